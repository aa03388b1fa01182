// watchDir: events of the SDK's own writes and of sandbox code, recursive
// and not, with names relative to the watched directory.
import { Sandbox, e2b, assert, main, cleanup, TEMPLATE, sleep } from './lib.mjs';

// Sandbox code, through the SDK's commands.
async function sh(sbx, cmd) {
  const r = await sbx.commands.run(cmd);
  return r.stdout;
}

async function until(cond, ms) {
  for (const end = Date.now() + ms; Date.now() < end; await sleep(50)) if (cond()) return true;
  return cond();
}

await main(async () => {
  const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 120000 });
  cleanup.push(sbx);
  const f = sbx.files;
  await f.makeDir('/tmp/w/sub');

  const rec = [];
  const h = await f.watchDir('/tmp/w', (e) => { rec.push(`${e.type} ${e.name}`); }, { recursive: true });
  const flat = [];
  const h2 = await f.watchDir('/tmp/w', (e) => { flat.push(`${e.type} ${e.name}`); });
  await f.write('/tmp/w/a.txt', 'x');
  await sh(sbx, 'echo 1 >/tmp/w/sub/b && mkdir /tmp/w/new && sleep 0.3 && echo 2 >/tmp/w/new/c && chmod 600 /tmp/w/a.txt && mv /tmp/w/a.txt /tmp/w/d.txt && rm /tmp/w/sub/b');
  const want = ['create a.txt', 'write a.txt', 'create sub/b', 'write sub/b', 'create new', 'create new/c',
    'chmod a.txt', 'rename a.txt', 'create d.txt', 'remove sub/b'];
  await until(() => want.every((w) => rec.includes(w)), 5000);
  for (const w of want) assert(rec.includes(w), `recursive watch saw '${w}': ${JSON.stringify(rec)}`);
  assert(!rec.some((e) => /agsx-upload|#/.test(e)), 'no upload temp file: ' + JSON.stringify(rec));
  assert(flat.includes('create a.txt') && flat.includes('create new'), 'flat watch: ' + JSON.stringify(flat));
  assert(!flat.some((e) => e.includes('/')), 'a flat watch sees nothing below: ' + JSON.stringify(flat));
  await h.stop();
  await h2.stop();
  const n = rec.length;
  await f.write('/tmp/w/after.txt', 'x');
  await sleep(300);
  assert(rec.length === n, 'no event after stop()');
  let threw = false;
  try {
    await f.watchDir('/tmp/w/d.txt', () => {});
  } catch (e) {
    threw = e instanceof e2b.SandboxError;
  }
  assert(threw, 'watching a file fails');
});
