// lifecycle.onTimeout 'pause' through the SDK (test/bats/serve-life.bats):
// a sandbox whose timeout expires is paused with its memory, not killed, and
// stays paused until Sandbox.connect resumes it; with autoResume a command to
// the paused sandbox resumes it and it has its lifetime again; pausing
// without memory is refused (501).
import { Sandbox, assert, eq, main, cleanup, TEMPLATE, sleep } from './lib.mjs';

// Polls getInfo until its state is STATE, for at most MS.
async function waitState(sbx, state, ms) {
  const until = Date.now() + ms;
  for (;;) {
    const info = await Sandbox.getInfo(sbx.sandboxId);
    if (info.state === state) return info;
    if (Date.now() > until) throw new Error(`state ${info.state} after ${ms} ms, want ${state}`);
    await sleep(200);
  }
}

const count = async (sbx) => Number((await sbx.commands.run('cat /tmp/count')).stdout.trim());

await main(async () => {
  // onTimeout 'pause', no autoResume
  const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 3000, lifecycle: { onTimeout: 'pause' } });
  cleanup.push(sbx);
  let info = await sbx.getInfo();
  eq(info.lifecycle, { onTimeout: 'pause', autoResume: false }, 'getInfo: the lifecycle');
  await sbx.commands.run('echo kept > /tmp/mark');
  await sbx.commands.run('i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done',
    { background: true, timeoutMs: 0 });
  info = await waitState(sbx, 'paused', 20000);
  const listed = await Sandbox.list({ query: { state: ['paused'] } }).nextItems();
  assert(listed.some((s) => s.sandboxId === sbx.sandboxId), 'listed as paused');
  await sleep(1000);
  eq((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused', 'still paused');
  const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60000 });
  info = await again.getInfo();
  eq(info.state, 'running', 'connect resumed it');
  assert(info.endAt.getTime() > Date.now() + 50000, 'with the timeout connect gave: ' + info.endAt);
  eq((await again.commands.run('cat /tmp/mark')).stdout, 'kept\n', 'its files');
  const n = await count(again);
  assert(n >= 3 && n < 200, 'the counter kept its memory: ' + n);
  await sleep(500);
  const m = await count(again);
  assert(m > n, `it counts again: ${m} > ${n}`);

  // autoResume: a command to the paused sandbox resumes it
  const auto = await Sandbox.create(TEMPLATE, {
    timeoutMs: 3000, lifecycle: { onTimeout: 'pause', autoResume: true },
  });
  cleanup.push(auto);
  eq((await auto.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: true }, 'autoResume');
  await auto.commands.run('echo auto > /tmp/mark');
  await waitState(auto, 'paused', 20000);
  await auto.isRunning(); // GET /health tells, and resumes nothing
  eq((await auto.getInfo()).state, 'paused', 'GET /health did not resume it');
  eq((await auto.commands.run('cat /tmp/mark')).stdout, 'auto\n', 'a command resumed it');
  info = await auto.getInfo();
  eq(info.state, 'running', 'running again');
  assert(info.endAt.getTime() > Date.now() + 1000, 'with its lifetime again: ' + info.endAt);
  // and at the next timeout it is paused again
  await waitState(auto, 'paused', 20000);

  // pause without memory and a reboot on connect are refused in E2B's shape
  let e = await auto.pause({ keepMemory: false }).then(() => null, (x) => x);
  assert(e && /501/.test(e.message), 'pause keepMemory false: ' + e);
  e = await Sandbox.create(TEMPLATE, { lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } })
    .then((s) => { cleanup.push(s); return null; }, (x) => x);
  assert(e && /501/.test(e.message), 'onTimeout keepMemory false: ' + e);
});
