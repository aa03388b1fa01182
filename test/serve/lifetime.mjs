// Lifetimes: pause/connect keep a counting process's state; setTimeout then
// the sandbox dies on its deadline; Sandbox.connect from a second process
// (argv[2] = "connect ID": only connects and runs a command).
import { Sandbox, assert, eq, main, cleanup, TEMPLATE, sleep } from './lib.mjs';

if (process.argv[2] === 'connect') {
  await main(async () => {
    const sbx = await Sandbox.connect(process.argv[3]);
    const r = await sbx.commands.run('cat /tmp/mark');
    eq(r.stdout, 'first\n', 'the second process sees the first one\'s file');
  });
} else {
  await main(async () => {
    const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 120000 });
    cleanup.push(sbx);
    await sbx.commands.run('echo first > /tmp/mark');
    // Sandbox.connect from a second process
    const { execFileSync } = await import('node:child_process');
    const out = execFileSync(process.execPath, [new URL(import.meta.url).pathname, 'connect',
      sbx.sandboxId], { encoding: 'utf8', timeout: 60000 });
    assert(out.trim().endsWith('ok'), 'the second process: ' + out);
    // a counter that only counts while it runs
    await sbx.commands.run('i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done',
      { background: true, timeoutMs: 0 });
    await sleep(1000);
    assert(await sbx.pause(), 'pause');
    eq((await sbx.getInfo()).state, 'paused', 'paused');
    await sleep(100);
    const frozen = (await sbx.files.read('/tmp/count').catch(() => null));
    await sleep(1000);
    const again = await Sandbox.connect(sbx.sandboxId);
    eq((await again.getInfo()).state, 'running', 'connect resumed it');
    const r = await again.commands.run('cat /tmp/count');
    const n = Number(r.stdout.trim());
    assert(n >= 5 && n < 40, 'the counter kept its state and did not count while paused: ' + n + ' (frozen ' + frozen + ')');
    await sleep(500);
    const m = Number((await again.commands.run('cat /tmp/count')).stdout.trim());
    assert(m > n, 'it counts again: ' + m + ' > ' + n);

    // setTimeout, then the deadline
    await sbx.setTimeout(3000);
    assert(await sbx.isRunning(), 'running before its deadline');
    await sleep(6000);
    assert(!(await sbx.isRunning()), 'dead after its deadline');
    cleanup.length = 0;
  });
}
