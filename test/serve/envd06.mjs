// What the SDK gates on envd 0.6 (e2b-protocol.md §3.6), with the unmodified
// SDK: file metadata (0.6.2: X-Metadata-* headers kept as user.e2b.* xattrs,
// EntryInfo.metadata), watch events with their entries (0.6.3) and watches
// that allow network mounts (0.6.4). Below those versions the SDK refuses each
// of them client-side (TemplateError). Also Stat of a relative symlink, and
// envd's POST /files/compose.
// META=0 when the sandbox's writable layer keeps no user xattrs (a tmpfs before
// Linux 6.6): then an upload with metadata must fail (501) and write nothing.
import { Sandbox, e2b, assert, eq, rejects, main, cleanup, TEMPLATE, sleep } from './lib.mjs';

const META = process.env.META !== '0';

async function sh(sbx, cmd) {
  return (await sbx.commands.run(cmd)).stdout;
}

async function until(cond, ms) {
  for (const end = Date.now() + ms; Date.now() < end; await sleep(50)) if (cond()) return true;
  return cond();
}

await main(async () => {
  const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 120000 });
  cleanup.push(sbx);
  const f = sbx.files;
  assert(sbx.sandboxId, 'created');

  // Stat of relative symlinks: the absolute target, once
  await sh(sbx, 'mkdir -p /tmp/l/d && echo hi >/tmp/l/file && ln -s file /tmp/l/rel && ln -s ../rel /tmp/l/d/up');
  const rel = await f.getInfo('/tmp/l/rel');
  eq([rel.type, rel.symlinkTarget], ['file', '/tmp/l/file'], 'a relative symlink');
  const up = await f.getInfo('/tmp/l/d/up');
  eq(up.symlinkTarget, '/tmp/l/file', 'a relative symlink to a relative symlink');
  const listed = (await f.list('/tmp/l')).find((e) => e.name === 'rel');
  eq(listed.symlinkTarget, '/tmp/l/file', 'ListDir shows the same target');

  // POST /files/compose, through the SDK's own envd client (the SDK ships
  // the route's types; no method of it calls the route yet)
  const api = sbx.envdApi.api;
  const compose = (body) => api.POST('/files/compose', { body });
  await f.write([{ path: '/tmp/c/p1', data: 'ab' }, { path: '/tmp/c/p2', data: 'cd' },
    { path: '/tmp/c/p3', data: 'ef' }]);
  let res = await compose({ source_paths: ['/tmp/c/p1', '/tmp/c/p2', '/tmp/c/p3'], destination: '/tmp/c/out/all' });
  eq([res.response.status, res.data], [200, { path: '/tmp/c/out/all', name: 'all', type: 'file' }],
    'compose answers the new entry');
  eq(await f.read('/tmp/c/out/all'), 'abcdef', 'the sources in order');
  eq(await Promise.all(['/tmp/c/p1', '/tmp/c/p2', '/tmp/c/p3'].map((p) => f.exists(p))), [false, false, false],
    'the sources are removed');
  await sh(sbx, 'dd if=/dev/zero of=/tmp/c/big1 bs=1M count=40 2>/dev/null; dd if=/dev/zero of=/tmp/c/big2 bs=1M count=30 2>/dev/null');
  res = await compose({ source_paths: ['/tmp/c/big1', '/tmp/c/big2'], destination: '/tmp/c/big' });
  eq([res.response.status, (await f.getInfo('/tmp/c/big')).size], [200, 70 << 20], 'compose of 70 MiB, in steps');
  res = await compose({ source_paths: ['nope'], destination: 'x' });
  eq([res.response.status, res.error && res.error.code], [404, 404], 'a missing source: 404');
  eq(await f.exists('x'), false, 'and nothing is written');
  await f.write('/tmp/c/s', 'keep');
  await sh(sbx, 'ln -s s /tmp/c/to-s');
  for (const destination of ['/tmp/c/s', '/tmp/c/to-s']) {
    res = await compose({ source_paths: ['/tmp/c/s'], destination });
    eq(res.response.status, 400, 'the destination is a source: 400 (' + destination + ')');
  }
  eq(await f.read('/tmp/c/s'), 'keep', 'and the source stays');
  res = await compose({ source_paths: [], destination: '/tmp/c/e' });
  eq(res.response.status, 400, 'no source: 400');
  res = await compose({ source_paths: ['/tmp/c'], destination: '/tmp/c/e' });
  eq(res.response.status, 400, 'a directory source: 400');

  // File metadata
  await f.write('/tmp/m/a.txt', 'old');
  if (!META) {
    const e = await rejects(() => f.write('/tmp/m/a.txt', 'new', { metadata: { k: 'v' } }),
      e2b.SandboxError, 'metadata where no xattr can be kept');
    assert(/501|extended attributes/.test(e.message), 'the 501 says why: ' + e.message);
    eq(await f.read('/tmp/m/a.txt'), 'old', 'and the old file is left');
    return;
  }
  const w = await f.write('/tmp/m/a.txt', 'new', { metadata: { Author: 'me', 'job-id': '42' } });
  eq(w.metadata, { author: 'me', 'job-id': '42' }, 'write answers the metadata, keys lowercased');
  eq((await f.getInfo('/tmp/m/a.txt')).metadata, { author: 'me', 'job-id': '42' }, 'getInfo');
  eq((await f.list('/tmp/m'))[0].metadata, { author: 'me', 'job-id': '42' }, 'list');
  eq(await sh(sbx, "cat /tmp/m/a.txt"), 'new', 'the content');
  const octet = await f.write('/tmp/m/o.bin', new Uint8Array([1, 2, 3]).buffer,
    { useOctetStream: true, metadata: { via: 'octet-stream' } });
  eq(octet.metadata, { via: 'octet-stream' }, 'a raw (octet-stream) upload too');
  const many = await f.write([{ path: '/tmp/m/x', data: 'x' }, { path: '/tmp/m/y', data: 'y' }],
    { metadata: { batch: '1' } });
  eq(many.map((e) => e.metadata), [{ batch: '1' }, { batch: '1' }], 'every file of one write');
  await f.write('/tmp/m/a.txt', 'plain');
  eq((await f.getInfo('/tmp/m/a.txt')).metadata, undefined, 'a write without metadata clears it');
  await f.rename('/tmp/m/x', '/tmp/m/moved');
  eq((await f.getInfo('/tmp/m/moved')).metadata, { batch: '1' }, 'a move keeps it');
  await sh(sbx, 'ln -s o.bin /tmp/m/olink');
  eq((await f.getInfo('/tmp/m/olink')).metadata, { via: 'octet-stream' }, "a symlink shows its target's");
  await rejects(() => f.write('/tmp/m/bad', 'x', { metadata: { k: 'tab\there' } }),
    e2b.InvalidArgumentError, 'the SDK checks values');

  // Watch events with their entries; network mounts allowed
  await f.makeDir('/tmp/w');
  const evs = [];
  const h = await f.watchDir('/tmp/w', (e) => evs.push(e), { includeEntry: true, allowNetworkMounts: true });
  await f.write('/tmp/w/e.txt', 'entry', { metadata: { seen: 'yes' } });
  await sh(sbx, 'mv /tmp/w/e.txt /tmp/w/f.txt');
  const done = () => evs.some((e) => e.type === 'rename') && evs.some((e) => e.name === 'f.txt');
  await until(done, 5000);
  await h.stop();
  const created = evs.find((e) => e.type === 'create' && e.name === 'e.txt');
  assert(created && created.entry, 'a create event carries its entry: ' + JSON.stringify(evs));
  const withData = evs.find((e) => e.name === 'e.txt' && e.entry && e.entry.size === 5);
  assert(withData && withData.entry.path === '/tmp/w/e.txt' && withData.entry.type === 'file',
    'the entry: ' + JSON.stringify(evs));
  eq(withData.entry.metadata, { seen: 'yes' }, "the entry's metadata");
  const renamed = evs.find((e) => e.type === 'rename');
  assert(renamed && renamed.entry === undefined, 'a rename carries no entry: ' + JSON.stringify(renamed));
  const plain = [];
  const h2 = await f.watchDir('/tmp/w', (e) => plain.push(e));
  await f.write('/tmp/w/g.txt', 'x');
  await until(() => plain.length > 0, 5000);
  await h2.stop();
  assert(plain.length > 0 && plain.every((e) => e.entry === undefined), 'no entry unless asked');
});
