// bench/desktop's client: one @e2b/desktop sandbox through agsx serve,
// timed; prints {"id","create","stream"} (milliseconds) once its stream
// runs, then waits for a line on stdin (the bench measures the sandbox
// meanwhile) and kills it. E2B_SDK: node_modules with @e2b/desktop
// (test/serve/npm-install --desktop); E2B_API_URL, E2B_SANDBOX_URL,
// E2B_API_KEY as for the SDK tests.
import { createRequire } from 'node:module';
import path from 'node:path';
import readline from 'node:readline';

const require = createRequire(path.join(process.env.E2B_SDK, 'x.js'));
const { Sandbox } = require('@e2b/desktop');

const t0 = performance.now();
const d = await Sandbox.create('desktop', { timeoutMs: 300000, resolution: [1024, 768] });
const t1 = performance.now();
try {
  await d.stream.start();
  const t2 = performance.now();
  console.log(JSON.stringify({ id: d.sandboxId, create: t1 - t0, stream: t2 - t0 }));
  const rl = readline.createInterface({ input: process.stdin });
  await new Promise((resolve) => rl.once('line', resolve));
  rl.close();
} finally {
  await d.kill();
}
