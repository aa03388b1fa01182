// A sandbox killed under runCode (issue 25): the unmodified npm
// `@e2b/code-interpreter` SDK (E2B_SDK: the node_modules directory that
// test/code/npm-install filled) must see the connection dropped, as E2B's
// proxy drops it, and throw its TimeoutError; not an error item or an end.
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(path.join(process.env.E2B_SDK, 'x.js'));
const { Sandbox } = require('@e2b/code-interpreter');

let sbx;
try {
  sbx = await Sandbox.create(process.env.E2B_TEMPLATE || 'code-interpreter-v1', { timeoutMs: 120000 });
  await sbx.runCode('x = 1'); // the kernel is up
  const out = [];
  const run = sbx.runCode('import time\nprint("started", flush=True)\ntime.sleep(60)', {
    onStdout: (m) => out.push(m.line),
  }).then((r) => r, (e) => e);
  for (let i = 0; i < 100 && out.length === 0; i++) await new Promise((r) => setTimeout(r, 100));
  if (out.length === 0) throw new Error('the cell did not start');
  const t0 = Date.now();
  await sbx.kill();
  const err = await run;
  if (!(err instanceof Error) || err.name !== 'TimeoutError')
    throw new Error('want a TimeoutError, got ' + (err && err.name) + ': ' + JSON.stringify(err));
  if (!/killed/.test(err.message)) throw new Error('its message: ' + err.message);
  if (Date.now() - t0 > 15000) throw new Error('not at once: ' + (Date.now() - t0) + ' ms');
  console.log('ok');
} catch (e) {
  console.error('FAILED:', e && e.stack ? e.stack : e);
  try { await sbx?.kill(); } catch {}
  process.exit(1);
}
