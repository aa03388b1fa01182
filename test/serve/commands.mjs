// commands.run through the SDK: stdout, stderr, exit codes and CommandExitError,
// envs (the sandbox's envVars and the command's), cwd, user root, onStdout
// streaming, a command timeout -> TimeoutError.
import { Sandbox, CommandExitError, TimeoutError, assert, eq, rejects, main, cleanup, TEMPLATE, sleep } from './lib.mjs';

await main(async () => {
  const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 120000, envs: { SBX_VAR: 'from-create' } });
  cleanup.push(sbx);
  let r = await sbx.commands.run('echo out; echo err >&2');
  eq(r.stdout, 'out\n', 'stdout');
  eq(r.stderr, 'err\n', 'stderr');
  eq(r.exitCode, 0, 'exit code');

  const e = await rejects(() => sbx.commands.run('echo oops >&2; exit 3'), CommandExitError, 'exit 3');
  eq(e.exitCode, 3, 'CommandExitError.exitCode');
  eq(e.stderr, 'oops\n', 'CommandExitError.stderr');

  r = await sbx.commands.run('echo $SBX_VAR $CMD_VAR', { envs: { CMD_VAR: 'from-run' } });
  eq(r.stdout, 'from-create from-run\n', 'envVars and envs');

  r = await sbx.commands.run('pwd', { cwd: '/tmp' });
  eq(r.stdout, '/tmp\n', 'cwd');

  r = await sbx.commands.run('id -u; echo $HOME $USER', { user: 'root' });
  eq(r.stdout, '0\n/root root\n', 'user root, HOME and USER');

  const chunks = [];
  r = await sbx.commands.run('for i in 1 2 3; do echo line$i; sleep 0.2; done',
    { onStdout: (d) => chunks.push([Date.now(), d]) });
  eq(r.stdout, 'line1\nline2\nline3\n', 'streamed stdout');
  assert(chunks.length >= 2 && chunks[chunks.length - 1][0] - chunks[0][0] >= 200,
    'onStdout called as the output came: ' + JSON.stringify(chunks));

  const t0 = Date.now();
  await rejects(() => sbx.commands.run('sleep 30', { timeoutMs: 1500 }), TimeoutError, 'timeout');
  assert(Date.now() - t0 < 10000, 'the timeout ended it in time');
  // the process was killed with its deadline (the supervisor enforces it)
  let left = [];
  for (let i = 0; i < 30; i++) {
    left = (await sbx.commands.list()).filter((p) => p.args.join(' ').includes('sleep 30'));
    if (left.length === 0) break;
    await sleep(100);
  }
  eq(left.length, 0, 'no process left soon after the timeout');

  // big output is kept whole
  r = await sbx.commands.run('seq 1 100000');
  eq(r.stdout.split('\n').length, 100001, 'seq 1 100000 lines');
});
