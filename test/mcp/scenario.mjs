// The scenario in one run of the official MCP SDK client, over
// stdio or (with MCP_URL and MCP_TOKEN) Streamable HTTP, for
// test/bats/mcp.bats: tools and their schemas; a sandbox (the host image,
// for its python3 with ipykernel); a python cell twice (state kept); a
// file written and read; a background process and its output; a snapshot,
// something broken, a rollback; a browser's screenshot of a page served
// inside its sandbox (a PNG of the asked size); kills. Usage:
//   NODE_PATH=<node_modules> node scenario.mjs AGSX [AGSX-ARGS...]
// Prints "ok - ..." lines and exits 1 at the first failed check.
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(path.join(process.env.NODE_PATH, 'x.js'));
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');

const [agsx, ...args] = process.argv.slice(2);
function check(cond, what, detail) {
  if (!cond) {
    console.log(`not ok - ${what}${detail === undefined ? '' : ': ' + JSON.stringify(detail).slice(0, 3000)}`);
    process.exit(1);
  }
  console.log(`ok - ${what}`);
}

const http = process.env.MCP_URL;
const transport = http
  ? new StreamableHTTPClientTransport(new URL(http), { requestInit: { headers: { Authorization: `Bearer ${process.env.MCP_TOKEN}` } } })
  : new StdioClientTransport({ command: agsx, args: [...args, 'mcp'], env: process.env, stderr: 'inherit' });
const client = new Client({ name: 'agsx-scenario', version: '1.0.0' });
await client.connect(transport);
check(client.getServerVersion()?.name === 'agsx', `initialize over ${http ? 'Streamable HTTP' : 'stdio'}`);
const call = (name, a, opts) => client.callTool({ name, arguments: a }, undefined, { timeout: 180000, ...opts });

const { tools } = await client.listTools();
check(tools.length >= 32 && tools.every(t => t.inputSchema?.type === 'object' && t.outputSchema?.type === 'object'),
  `tools/list: ${tools.length} tools, each with input and output schemas`);

let r = await call('sandbox_create', { image: 'host', timeout: 600 });
check(!r.isError, 'sandbox_create', r);
const id = r.structuredContent.id;

r = await call('code_run', { sandbox: id, code: 'answer = 6 * 7\nprint("set")' });
check(r.structuredContent?.stdout === 'set\n', 'a python cell', r);
r = await call('code_run', { sandbox: id, code: 'answer' });
check(r.structuredContent?.text === '42', 'a second cell sees the first one\'s state', r);

r = await call('file_write', { sandbox: id, path: '/tmp/work/notes.txt', content: 'keep this\n' });
check(!r.isError, 'file_write', r);
r = await call('file_read', { sandbox: id, path: '/tmp/work/notes.txt' });
check(r.structuredContent?.content === 'keep this\n', 'file_read gives it back', r);

r = await call('process_start', { sandbox: id, command: 'for i in 1 2 3; do echo tick $i; sleep 0.2; done' });
check(!r.isError && r.structuredContent.pid > 0, 'process_start', r);
r = await call('process_output', { sandbox: id, pid: r.structuredContent.pid, wait: 30 });
check(r.structuredContent?.stdout === 'tick 1\ntick 2\ntick 3\n' && r.structuredContent.running === false, 'its output, once it ended', r);

r = await call('snapshot_create', { sandbox: id, name: 'good' });
check(!r.isError, 'snapshot_create', r);
r = await call('exec', { sandbox: id, command: 'rm -rf /tmp/work && echo broken >/tmp/broken' });
r = await call('file_read', { sandbox: id, path: '/tmp/work/notes.txt' });
check(r.isError, 'something broken: the file is gone', r);
r = await call('sandbox_rollback', { sandbox: id, snapshot: 'good', confirm: true });
check(r.structuredContent?.rolled_back === true, 'sandbox_rollback', r);
r = await call('exec', { sandbox: id, command: 'cat /tmp/work/notes.txt; ls /tmp/broken 2>/dev/null | wc -l' });
check(r.structuredContent?.stdout === 'keep this\n0\n', 'rolled back: the file is back, the breakage gone', r);

r = await call('browser_start', { timeout: 300 });
check(!r.isError && /^ws:\/\/127\.0\.0\.1:\d+\/devtools\/browser\//.test(r.structuredContent.ws_url), 'browser_start', r);
const b = r.structuredContent.sandbox.id;
r = await call('file_write', { sandbox: b, path: '/tmp/www/index.html',
  content: '<!doctype html><title>in the sandbox</title><body style="margin:0;background:#00f"><div style="width:200px;height:100px;background:#f00"></div></body>' });
check(!r.isError, 'a page written into the browser\'s sandbox', r);
r = await call('process_start', { sandbox: b, argv: ['python3', '-m', 'http.server', '8000', '--bind', '127.0.0.1', '--directory', '/tmp/www'] });
check(!r.isError, 'a server started beside the browser', r);
for (let i = 0; i < 50; i++) {
  r = await call('browser_navigate', { sandbox: b, url: 'http://127.0.0.1:8000/' });
  if (r.structuredContent?.title === 'in the sandbox')
    break;
  await new Promise(res => setTimeout(res, 200));
}
check(r.structuredContent?.title === 'in the sandbox' && r.structuredContent.loaded, 'browser_navigate to the page the sandbox serves', r);
r = await call('browser_screenshot', { sandbox: b, width: 320, height: 240 });
const img = r.content?.find(c => c.type === 'image');
check(!r.isError && img?.mimeType === 'image/png', 'browser_screenshot: image content', { ...r, content: r.content?.map(c => c.type) });
const png = Buffer.from(img.data, 'base64');
check(png.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])) && png.readUInt32BE(16) === 320 && png.readUInt32BE(20) === 240,
  'it decodes as a PNG of 320x240', { w: png.readUInt32BE(16), h: png.readUInt32BE(20) });

r = await call('sandbox_kill', { sandbox: b });
check(r.isError && /confirm: true/.test(r.content[0].text), 'sandbox_kill without confirm: refused', r);
for (const x of [b, id]) {
  r = await call('sandbox_kill', { sandbox: x, confirm: true });
  check(r.structuredContent?.killed === true, 'sandbox_kill', r);
}
if (http)
  await transport.terminateSession();
await client.close();
check(true, 'closed');
