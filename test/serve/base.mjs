// E2B's `base` template shape (images/base, built by `make base-image` as
// e2b-base, which serve's base alias uses) through the unmodified SDK: the
// default user is `user`, commands start in /home/user, passwordless sudo
// reaches root (the template runs without no_new_privs), and the tools
// E2B's base has are there.
import { Sandbox, eq, main, cleanup, TEMPLATE } from './lib.mjs';

await main(async () => {
  const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 120000 });
  cleanup.push(sbx);
  let r = await sbx.commands.run('whoami');
  eq(r.stdout, 'user\n', 'whoami');
  r = await sbx.commands.run('pwd; echo $HOME; id -u');
  eq(r.stdout, '/home/user\n/home/user\n1000\n', 'cwd, HOME and uid');
  r = await sbx.commands.run('sudo -n whoami');
  eq(r.stdout, 'root\n', 'sudo -n whoami');
  r = await sbx.commands.run('sudo -n true && echo sudo-ok');
  eq(r.stdout, 'sudo-ok\n', 'sudo -n true');
  // what sudo makes is root's; the SDK's user: root works as well
  r = await sbx.commands.run('sudo -n install -m 600 /dev/null /etc/made-by-sudo && stat -c %U /etc/made-by-sudo');
  eq(r.stdout, 'root\n', 'a file made through sudo');
  r = await sbx.commands.run('id -u', { user: 'root' });
  eq(r.stdout, '0\n', 'user root');
  // the files API writes as user, in its home
  await sbx.files.write('hello.txt', 'hi\n');
  r = await sbx.commands.run('stat -c %U:%a /home/user/hello.txt && cat hello.txt');
  eq(r.stdout.split('\n')[1], 'hi', 'the file written through the SDK');
  eq(r.stdout.split('\n')[0].split(':')[0], 'user', 'owned by user');
  r = await sbx.commands.run(
    'bash --version >/dev/null && git --version >/dev/null && curl --version >/dev/null && ' +
    'python3 -c "import sys; print(sys.version_info[0])" && pip --version >/dev/null && echo tools');
  eq(r.stdout, '3\ntools\n', 'bash, git, curl, python3 and pip');
});
