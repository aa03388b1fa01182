// A background command: commands.list finds it, commands.connect replays and
// follows its output, sendStdin feeds it, kill ends it; a PTY with input,
// resize and kill.
import { Sandbox, CommandExitError, assert, eq, rejects, main, cleanup, TEMPLATE, sleep } from './lib.mjs';

await main(async () => {
  const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 120000 });
  cleanup.push(sbx);
  const h = await sbx.commands.run('echo started; while read l; do echo got:$l; done; echo eof',
    { background: true, stdin: true });
  assert(h.pid > 0, 'a pid');
  const procs = await sbx.commands.list();
  assert(procs.some((p) => p.pid === h.pid), 'commands.list finds it: ' + JSON.stringify(procs));

  await sbx.commands.sendStdin(h.pid, 'one\n');
  await sleep(300);
  // a second client: the output from the start, then what comes
  let seen = '';
  const c = await sbx.commands.connect(h.pid, { onStdout: (d) => { seen += d; } });
  await sbx.commands.sendStdin(h.pid, 'two\n');
  for (let i = 0; i < 50 && !seen.includes('got:two'); i++) await sleep(100);
  eq(seen, 'started\ngot:one\ngot:two\n', 'connect replays, then follows');

  assert(await sbx.commands.kill(h.pid), 'kill is true');
  await rejects(() => c.wait(), CommandExitError, 'the killed command');
  assert(!(await sbx.commands.kill(h.pid)), 'a second kill is false');
  assert(!(await sbx.commands.list()).some((p) => p.pid === h.pid), 'gone from the list');

  // stdin closed: the reader sees EOF
  const h2 = await sbx.commands.run('cat; echo done', { background: true, stdin: true });
  await sbx.commands.sendStdin(h2.pid, 'abc\n');
  await sbx.commands.closeStdin(h2.pid);
  const r2 = await h2.wait();
  eq(r2.stdout, 'abc\ndone\n', 'closeStdin');

  // a PTY
  let out = '';
  const t = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += new TextDecoder().decode(d); } });
  await sbx.pty.sendInput(t.pid, new TextEncoder().encode('stty size; echo tty-$((6*7))\n'));
  for (let i = 0; i < 50 && !out.includes('tty-42'); i++) await sleep(100);
  assert(out.includes('24 80') && out.includes('tty-42'), 'pty input and size: ' + JSON.stringify(out));
  await sbx.pty.resize(t.pid, { cols: 100, rows: 30 });
  await sbx.pty.sendInput(t.pid, new TextEncoder().encode('stty size\n'));
  for (let i = 0; i < 50 && !out.includes('30 100'); i++) await sleep(100);
  assert(out.includes('30 100'), 'pty resize: ' + JSON.stringify(out.slice(-200)));
  assert(await sbx.pty.kill(t.pid), 'pty kill');
  const pe = await rejects(() => t.wait(), CommandExitError, 'the killed pty');
  eq(pe.exitCode, -1, 'a killed pty exits -1');
});
