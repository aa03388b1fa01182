// bench/serve's floor: a server on loopback that answers what Sandbox.create,
// commands.run('true') and kill send at once, with canned answers of the
// shapes agsx serve gives (node mock.mjs PORT; prints "ready"). The SDK's own
// cost of create + run is what bench/serve times against it.
import http from 'node:http';

// A Connect envelope: flags, big-endian length, the JSON message.
const frame = (flags, obj) => {
  const b = Buffer.from(JSON.stringify(obj));
  const h = Buffer.alloc(5);
  h[0] = flags;
  h.writeUInt32BE(b.length, 1);
  return Buffer.concat([h, b]);
};
const sandbox = JSON.stringify({
  sandboxID: 'a0a0a0a0a0a0a0a0a0a0', templateID: 'base', alias: 'base', clientID: '00000000',
  envdVersion: '0.5.7', envdAccessToken: '0'.repeat(64), trafficAccessToken: null, domain: null,
});
const process_ = Buffer.concat([frame(0, { event: { start: { pid: 3 } } }),
  frame(0, { event: { end: { exited: true, status: 'exit status 0' } } }), frame(2, {})]);

const srv = http.createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    if (req.method === 'POST' && (req.url === '/v2/sandboxes' || req.url === '/sandboxes')) {
      res.writeHead(201, { 'Content-Type': 'application/json' });
      res.end(sandbox);
    } else if (req.method === 'POST' && req.url === '/process.Process/Start') {
      res.writeHead(200, { 'Content-Type': 'application/connect+json' });
      res.end(process_);
    } else if (req.method === 'DELETE') {
      res.writeHead(204);
      res.end();
    } else {
      res.writeHead(404);
      res.end();
    }
  });
});
srv.listen(Number(process.argv[2]), '127.0.0.1', () => console.log('ready'));
