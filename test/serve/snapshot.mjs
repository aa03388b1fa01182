// pause, Sandbox.connect (resume), createSnapshot, listSnapshots, Sandbox.create
// from a snapshot and fork, through the SDK.
import { Sandbox, assert, eq, main, cleanup, TEMPLATE } from './lib.mjs';

await main(async () => {
  const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 120000 });
  cleanup.push(sbx);
  await sbx.files.write('/tmp/state', 'before');

  assert(await sbx.pause(), 'pause() is true');
  eq((await sbx.getInfo()).state, 'paused', 'paused');
  const again = await Sandbox.connect(sbx.sandboxId);
  eq(again.sandboxId, sbx.sandboxId, 'connect resumes it');
  eq((await sbx.getInfo()).state, 'running', 'running after connect');
  eq(await sbx.files.read('/tmp/state'), 'before', 'files kept over a pause');

  const snap = await sbx.createSnapshot({ name: 'snap-' + process.pid });
  assert(snap.snapshotId && snap.names.length === 1, 'a snapshot: ' + JSON.stringify(snap));
  await sbx.files.write('/tmp/state', 'after');
  const listed = await sbx.listSnapshots().nextItems();
  assert(listed.some((s) => s.snapshotId === snap.snapshotId), 'listed: ' + JSON.stringify(listed));

  const from = await Sandbox.create(snap.snapshotId, { timeoutMs: 60000 });
  cleanup.push(from);
  eq(await from.files.read('/tmp/state'), 'before', 'a sandbox from the snapshot');

  const forks = await Sandbox.fork(sbx.sandboxId, { count: 2, timeoutMs: 60000 });
  eq(forks.length, 2, 'two forks');
  for (const f of forks) {
    assert(f instanceof Sandbox, 'a fork started: ' + f);
    cleanup.push(f);
    eq(await f.files.read('/tmp/state'), 'after', 'a fork has the current files');
  }
  await forks[0].files.write('/tmp/state', 'fork0');
  eq(await forks[1].files.read('/tmp/state'), 'after', 'forks are independent');
  eq(await sbx.files.read('/tmp/state'), 'after', 'the source is untouched');
});
