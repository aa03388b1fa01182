// The server is SIGKILLed and restarted while this client works (the bats
// test does it between the two phases): the same Sandbox object carries on.
// Phase 1 prints "id ID pid PID" and waits for a line on stdin; phase 2 runs
// after the restart, in the same process.
import { Sandbox, assert, eq, main, cleanup, TEMPLATE, sleep } from './lib.mjs';
import readline from 'node:readline';

await main(async () => {
  const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 120000 });
  cleanup.push(sbx);
  const h = await sbx.commands.run('for i in $(seq 1 40); do echo tick$i; sleep 0.1; done; sleep 60',
    { background: true, timeoutMs: 0 });
  console.log(`id ${sbx.sandboxId} pid ${h.pid}`);
  const rl = readline.createInterface({ input: process.stdin });
  await new Promise((r) => rl.once('line', r)); // the server was killed and restarted
  rl.close();
  await sleep(500);
  // the same client object, against the new server
  const r = await sbx.commands.run('echo after');
  eq(r.stdout, 'after\n', 'commands.run after the restart');
  const list = await sbx.commands.list();
  assert(list.some((p) => p.pid === h.pid), 'the background process survived: ' + JSON.stringify(list));
  let out = '';
  const c = await sbx.commands.connect(h.pid, { onStdout: (d) => { out += d; } });
  for (let i = 0; i < 60 && !out.includes('tick40'); i++) await sleep(100);
  assert(out.startsWith('tick1\n') && out.includes('tick40\n'),
    'its output, written partly while no server ran, is all there: ' + JSON.stringify(out.slice(0, 80)));
  const again = await Sandbox.connect(sbx.sandboxId);
  assert(await again.isRunning(), 'Sandbox.connect finds it');
  await sbx.commands.kill(h.pid);
  await c.wait().catch(() => {});
});
