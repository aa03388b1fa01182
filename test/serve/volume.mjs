// E2B volumes through the unmodified SDK (test/bats/serve-vol.bats): Volume.create, list,
// getInfo and destroy; a volume mounted by two sandboxes (volumeMounts, by the Volume
// and by its name): one writes, the other reads, through commands and envd's files;
// kept after both end; refused for removal while one mounts it; bad names refused.
// Secrets are refused (501). Prints the volume's name on the way for the bats side.
import { e2b, Sandbox, SandboxError, main, cleanup, assert, eq, rejects, TEMPLATE } from './lib.mjs';

const { Volume, VolumeError, VolumeNotFoundError } = e2b;

main(async () => {
  const name = 'shared-' + process.pid;
  const vol = await Volume.create(name);
  eq([vol.name, vol.volumeId], [name, name], 'Volume.create: name and volumeId');
  assert(typeof vol.token === 'string', 'Volume.create: a token (string)');
  assert((await Volume.list()).some((v) => v.name === name && v.volumeId === name), 'listed');
  eq((await Volume.getInfo(name)).name, name, 'Volume.getInfo');
  await rejects(() => Volume.create(name), VolumeError, 'Volume.create of an existing name');

  // One writes: by command and by envd's files API.
  const a = await Sandbox.create(TEMPLATE, { volumeMounts: { '/mnt/data': vol }, timeoutMs: 120000 });
  cleanup.push(a);
  const w = await a.commands.run('echo from-a > /mnt/data/f && mkdir -p /mnt/data/dir && echo ok');
  eq(w.stdout.trim(), 'ok', 'a writes');
  await a.files.write('/mnt/data/dir/g', 'written-by-files');
  eq((await a.getInfo()).volumeMounts, [{ name, path: '/mnt/data' }], 'a.getInfo().volumeMounts');

  // The other, at once (by the volume's name), reads both.
  const b = await Sandbox.create(TEMPLATE, { volumeMounts: { '/data': name }, timeoutMs: 120000 });
  cleanup.push(b);
  eq((await b.commands.run('cat /data/f')).stdout, 'from-a\n', 'b reads what a wrote');
  eq(await b.files.read('/data/dir/g'), 'written-by-files', 'b reads it through files');
  eq((await b.files.list('/data')).map((e) => e.name).sort(), ['dir', 'f'], 'b lists the volume');

  // In use: not removed.
  await rejects(() => Volume.destroy(name), VolumeError, 'Volume.destroy while mounted');
  assert((await Volume.list()).some((v) => v.name === name), 'still listed while in use');

  // Both end; the volume stays, and a third sandbox finds the data.
  await a.kill();
  await b.kill();
  cleanup.length = 0;
  assert((await Volume.list()).some((v) => v.name === name), 'kept after both ended');
  const c = await Sandbox.create(TEMPLATE, { volumeMounts: { '/v': name } });
  cleanup.push(c);
  eq((await c.commands.run('cat /v/f /v/dir/g')).stdout, 'from-a\nwritten-by-files', 'c reads');
  await c.kill();
  cleanup.length = 0;

  // Removed (the supervisor lets go of it as it ends: retry briefly).
  let gone = false;
  for (let i = 0; i < 50 && !gone; i++) {
    try {
      gone = await Volume.destroy(name);
    } catch (e) {
      if (!(e instanceof VolumeError)) throw e;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  assert(gone, 'Volume.destroy once unused');
  assert(!(await Volume.list()).some((v) => v.name === name), 'not listed once removed');
  await rejects(() => Volume.getInfo(name), VolumeNotFoundError, 'getInfo of a removed volume');
  eq(await Volume.destroy(name), false, 'Volume.destroy of a missing volume');

  // Bad names: the SDK's error, nothing made.
  for (const bad of ['a/b', '..', 'a b', '.x']) {
    const e = await rejects(() => Volume.create(bad), VolumeError, `Volume.create(${bad})`);
    assert(/400/.test(e.message), `Volume.create(${bad}): a 400: ${e.message}`);
  }
  await rejects(() => Volume.getInfo('..x'), VolumeError, 'getInfo of a bad name');
  const e = await rejects(() => Sandbox.create(TEMPLATE, { volumeMounts: { '/x': 'a/b' } }),
    SandboxError, 'volumeMounts with a bad name');
  assert(/400/.test(e.message), 'volumeMounts with a bad name: 400: ' + e.message);
  await rejects(() => Sandbox.create(TEMPLATE, { volumeMounts: { '/x': 'nope-' + process.pid } }),
    SandboxError, 'volumeMounts of a missing volume');
  await rejects(() => Sandbox.create(TEMPLATE, { volumeMounts: { 'rel': name } }), SandboxError,
    'volumeMounts at a relative path');
  eq((await Volume.list()).filter((v) => /^(a|\.|nope|shared)/.test(v.name)), [], 'nothing made');

  // Secrets: refused, as agsx cannot keep them from the sandbox (agsx-serve(1)).
  const s = await rejects(() => e2b.Secret.create('k', 'v'), e2b.SecretError || Error,
    'Secret.create');
  assert(/501/.test(s.message), 'Secret.create: 501: ' + s.message);
});
