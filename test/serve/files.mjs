// Every `files` call of the SDK against agsx serve: write and read text and
// bytes, an empty file, several files in one write, list with depth,
// makeDir true/false, rename, remove, exists on a missing path, getInfo,
// a user's ownership, errors in the SDK's classes, and symlinks planted by
// sandbox code (to /, /etc, ../../..) that resolve inside the sandbox.
import { Sandbox, e2b, assert, eq, rejects, main, cleanup, TEMPLATE } from './lib.mjs';

const { FileNotFoundError, NotFoundError, InvalidArgumentError } = e2b;

// Sandbox code, through the SDK's commands.
async function sh(sbx, cmd) {
  const r = await sbx.commands.run(cmd);
  return r.stdout;
}

await main(async () => {
  const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 120000 });
  cleanup.push(sbx);
  const f = sbx.files;

  // text, bytes, empty
  const w = await f.write('/tmp/t/a.txt', 'hello\n');
  eq({ name: w.name, path: w.path, type: w.type }, { name: 'a.txt', path: '/tmp/t/a.txt', type: 'file' },
    'write answers path, name and type');
  eq(await f.read('/tmp/t/a.txt'), 'hello\n', 'read back as text');
  const bytes = new Uint8Array(256);
  for (let i = 0; i < 256; i++) bytes[i] = 255 - i;
  await f.write('/tmp/t/b.bin', bytes.buffer);
  eq(Array.from(await f.read('/tmp/t/b.bin', { format: 'bytes' })), Array.from(bytes), 'bytes round trip');
  const blob = await f.read('/tmp/t/b.bin', { format: 'blob' });
  eq(blob.size, 256, 'read as a blob');
  await f.write('/tmp/t/empty', '');
  eq(await f.read('/tmp/t/empty'), '', 'an empty file');
  await f.write('/tmp/t/a.txt', 'replaced');
  eq(await f.read('/tmp/t/a.txt'), 'replaced', 'a write replaces the content');

  // several files in one request, parents created
  const infos = await f.write([
    { path: '/tmp/m/1.txt', data: 'one' },
    { path: '/tmp/m/sub/2.txt', data: 'two' },
    { path: '/tmp/m/sub/deep/3.bin', data: new Uint8Array([1, 2, 3]).buffer },
  ]);
  eq(infos.map((i) => i.path), ['/tmp/m/1.txt', '/tmp/m/sub/2.txt', '/tmp/m/sub/deep/3.bin'],
    'one write of three files');
  eq(await f.read('/tmp/m/sub/2.txt'), 'two', 'the second file');

  // list with depth: lexical, the root excluded
  eq((await f.list('/tmp/m')).map((e) => e.name), ['1.txt', 'sub'], 'list, depth 1');
  const l2 = await f.list('/tmp/m', { depth: 2 });
  eq(l2.map((e) => e.path), ['/tmp/m/1.txt', '/tmp/m/sub', '/tmp/m/sub/2.txt', '/tmp/m/sub/deep'],
    'list, depth 2');
  eq(l2.map((e) => e.type), ['file', 'dir', 'file', 'dir'], 'entry types');
  const one = l2[0];
  eq([one.size, one.mode, one.permissions], [3, 0o644, '-rw-r--r--'], 'size, mode, permissions');
  assert(one.modifiedTime instanceof Date && Math.abs(one.modifiedTime - Date.now()) < 120000,
    'modifiedTime is a recent Date: ' + one.modifiedTime);
  assert(typeof one.owner === 'string' && one.owner.length > 0, 'owner: ' + one.owner);
  await rejects(() => f.list('/tmp/nothing-here'), NotFoundError, 'listing a missing directory');

  // makeDir
  eq(await f.makeDir('/tmp/nd/x/y'), true, 'makeDir creates parents');
  eq(await f.makeDir('/tmp/nd/x/y'), false, 'makeDir of an existing directory is false');
  await rejects(() => f.makeDir('/tmp/t/a.txt'), InvalidArgumentError, 'makeDir over a file');

  // rename, exists, getInfo, remove
  const r = await f.rename('/tmp/t/a.txt', '/tmp/t/moved/c.txt');
  eq([r.path, r.name, r.type], ['/tmp/t/moved/c.txt', 'c.txt', 'file'], 'rename answers the new entry');
  eq(await f.exists('/tmp/t/a.txt'), false, 'the old name is gone');
  eq(await f.exists('/tmp/t/moved/c.txt'), true, 'the new name exists');
  eq(await f.exists('/no/such/path'), false, 'exists on a missing path is false');
  await rejects(() => f.rename('/tmp/none', '/tmp/x'), NotFoundError, 'rename of a missing file');
  const gi = await f.getInfo('/tmp/t/moved/c.txt');
  eq([gi.name, gi.type, gi.size, gi.path], ['c.txt', 'file', 8, '/tmp/t/moved/c.txt'], 'getInfo');
  eq((await f.getInfo('/tmp/m')).type, 'dir', 'getInfo of a directory');
  await rejects(() => f.getInfo('/no/such'), NotFoundError, 'getInfo of a missing path');
  await rejects(() => f.read('/no/such'), FileNotFoundError, 'read of a missing file');
  await rejects(() => f.read('/tmp/m'), InvalidArgumentError, 'read of a directory');
  await f.remove('/tmp/m');
  eq(await f.exists('/tmp/m'), false, 'remove is recursive');
  await f.remove('/tmp/m'); // a missing path is no error

  // relative paths and ~ are the user's home; a user's files are the user's
  const home = (await f.write('rel.txt', 'r')).path;
  assert(home.startsWith('/') && home.endsWith('/rel.txt'), 'a relative path under home: ' + home);
  eq(await f.read('~/rel.txt'), 'r', '~ is the same home');
  const mine = await f.write('/tmp/agent.txt', 'x', { user: 'agent' });
  eq(mine.path, '/tmp/agent.txt', 'a write as another user');
  const ai = await f.getInfo('/tmp/agent.txt');
  eq([ai.owner, ai.group], ['agent', 'agent'], 'the file is that user\'s');

  // symlinks planted by sandbox code
  await sh(sbx,
    'ln -s / /tmp/rootlink && ln -s /etc /tmp/etclink && ln -s ../../../../../../etc /tmp/up && echo sandbox-only >/etc/agsx-marker');
  const pw = await f.read('/tmp/rootlink/etc/passwd');
  assert(pw.includes('agent:x:1000'), 'a link to / reads the sandbox\'s /etc/passwd');
  eq(await f.read('/tmp/up/agsx-marker'), 'sandbox-only\n', '../../.. stays inside the sandbox');
  await rejects(() => f.read('/tmp/etclink/shadow'), FileNotFoundError, 'no host /etc/shadow');
  await f.write('/tmp/etclink/written-through-link', 'w');
  eq(await sh(sbx, 'cat /etc/written-through-link'), 'w', 'a write through a link lands inside');
  const li = await f.getInfo('/tmp/etclink');
  eq([li.type, li.symlinkTarget], ['dir', '/etc'], 'a symlink\'s entry: its target\'s type and path');
  eq((await f.list('/tmp/rootlink')).some((e) => e.name === 'boot'), false, 'a link to / lists the sandbox\'s /');
});
