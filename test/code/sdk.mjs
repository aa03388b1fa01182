// The unmodified npm `@e2b/code-interpreter` SDK against `agsx serve`
// (test/bats/code.bats): every scenario of issue 14 in one sandbox per run.
// E2B_SDK names the node_modules directory test/code/npm-install filled; the
// SDK is configured only through E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY.
// argv[2] picks a scenario (default: all of them but "memory"). With
// E2B_SANDBOX_ID the scenarios run in that sandbox (Sandbox.connect), one
// made by `agsx run --label e2b.template=...` with limits the API cannot
// set, and leave it running.
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(path.join(process.env.E2B_SDK, 'x.js'));
const { Sandbox } = require('@e2b/code-interpreter');
const TEMPLATE = process.env.E2B_TEMPLATE || 'code-interpreter-v1';

function assert(c, what) { if (!c) throw new Error('assertion failed: ' + what); }
function eq(a, b, what) {
  const sa = JSON.stringify(a), sb = JSON.stringify(b);
  if (sa !== sb) throw new Error(`${what}: got ${sa}, want ${sb}`);
}
async function rejects(fn, name, what) {
  try { await fn(); } catch (e) {
    if (name && e.name !== name) throw new Error(`${what}: threw ${e.name}: ${e.message}, want ${name}`);
    return e;
  }
  throw new Error(`${what}: did not throw`);
}

const scenarios = {
  async state(sbx) {
    await sbx.runCode('x = 41');
    const e = await sbx.runCode('x + 1');
    eq(e.text, '42', 'state across cells');
    eq((await sbx.runCode('1+1')).text, '2', '1+1');
    eq(e.results[0].isMainResult, true, 'main result');
  },
  async plot(sbx) {
    const e = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()');
    eq(e.results.length, 1, 'one result');
    const png = Buffer.from(e.results[0].png, 'base64');
    eq(png.subarray(0, 8).toString('hex'), '89504e470d0a1a0a', 'PNG header');
    assert(png.length > 5000, 'PNG size ' + png.length);
    eq(e.results[0].formats(), ['png'], 'formats');
    eq(e.results[0].extra, {}, 'extra');
    eq(e.results[0].chart.type, 'line', 'chart type');
    eq(e.results[0].chart.elements[0].points, [[0, 1], [1, 2], [2, 3]], 'chart points');
  },
  async dataframe(sbx) {
    const e = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2]})');
    assert(/<table/.test(e.results[0].html), 'html: ' + e.results[0].html);
    eq(e.results[0].data, { a: [1, 2] }, 'data');
  },
  async error(sbx) {
    const e = await sbx.runCode('1/0');
    eq(e.error.name, 'ZeroDivisionError', 'error name');
    eq(e.error.value, 'division by zero', 'error value');
    assert(/1\/0/.test(e.error.traceback), 'traceback: ' + e.error.traceback);
  },
  async stream(sbx) {
    const seen = [];
    const t0 = Date.now();
    await sbx.runCode('import time\nprint("a", flush=True)\ntime.sleep(2)\nprint("b")',
      { onStdout: (m) => seen.push([m.line, Date.now() - t0]) });
    const end = Date.now() - t0;
    eq(seen.map((s) => s[0]), ['a\n', 'b\n'], 'lines');
    assert(end - seen[0][1] > 1500, `first line ${seen[0][1]} ms, end ${end} ms`);
  },
  async bash(sbx) {
    await sbx.runCode('cd /tmp; V=9', { language: 'bash' });
    const e = await sbx.runCode('pwd; echo $V', { language: 'bash' });
    eq(e.logs.stdout.join(''), '/tmp\n9\n', 'bash keeps cwd and variables');
    const f = await sbx.runCode('exit 3', { language: 'bash' });
    eq([f.error.name, f.error.value], ['', '3'], 'bash error');
  },
  async contexts(sbx) {
    const c = await sbx.createCodeContext({ language: 'python', cwd: '/tmp' });
    eq([c.language, c.cwd], ['python', '/tmp'], 'created');
    await sbx.runCode('k = 5', { context: c });
    eq((await sbx.runCode('k', { context: c })).text, '5', 'context state');
    eq((await sbx.runCode('import os; os.getcwd()', { context: c })).text, '/tmp', 'context cwd');
    const list = await sbx.listCodeContexts();
    assert(list.some((x) => x.id === c.id), 'listed');
    await sbx.restartCodeContext(c);
    eq((await sbx.runCode('k', { context: c })).error.name, 'NameError', 'restart: state gone');
    await sbx.removeCodeContext(c);
    await rejects(() => sbx.runCode('1', { context: c }), 'NotFoundError', 'removed: 404');
    assert(!(await sbx.listCodeContexts()).some((x) => x.id === c.id), 'not listed');
    const nojava = await rejects(() => sbx.runCode('1', { language: 'java' }), 'SandboxError', 'no Java kernel');
    assert(/501/.test(nojava.message), 'no Java kernel: a 501, not ' + nojava.message);
  },
  async javascript(sbx) {
    await sbx.runCode('let n = 20; console.log("js")', { language: 'js' });
    const e = await sbx.runCode('n * 2 + 2', { language: 'js' });
    eq(e.text, '42', 'js state and value');
    const f = await sbx.runCode('await new Promise((r) => setTimeout(r, 50)); null.x', { language: 'js' });
    eq(f.error.name, 'TypeError', 'js error');
  },
  async timeout(sbx) {
    await sbx.runCode('kept = "yes"');
    await rejects(() => sbx.runCode('import time\ntime.sleep(300)', { timeoutMs: 2000 }),
      'TimeoutError', 'timeoutMs');
    const t0 = Date.now();
    eq((await sbx.runCode('kept')).text, 'yes', 'the next cell keeps the variables');
    assert(Date.now() - t0 < 10000, 'interrupted, not waited for');
  },
  async network(sbx) {
    const e = await sbx.runCode('import socket\ns = socket.socket(); s.settimeout(3)\ntry:\n    s.connect(("198.18.0.1", 9)); r = "connected"\nexcept OSError as e:\n    r = type(e).__name__\nr');
    assert(e.text !== 'connected', 'internal network: ' + e.text);
  },
  async parallel(sbx) {
    // One context: the second cell waits for the first (Jupyter's queue).
    await sbx.runCode('order = []');
    const done = [];
    const a = sbx.runCode('import time; time.sleep(2); order.append(1)').then((e) => { done.push('a'); return e; });
    await new Promise((r) => setTimeout(r, 500));
    const b = sbx.runCode('order.append(2); order').then((e) => { done.push('b'); return e; });
    const [ea, eb] = await Promise.all([a, b]);
    eq([ea.error, eb.error], [undefined, undefined], 'no errors');
    eq(eb.text, '[1, 2]', 'one context: in order');
    eq(done, ['a', 'b'], 'one context: the second ends after the first');
    // Two contexts: their cells overlap in time.
    const c1 = await sbx.createCodeContext({ language: 'python' });
    const c2 = await sbx.createCodeContext({ language: 'python' });
    const cell = 'import time, json\ns = time.time(); time.sleep(3)\nprint(json.dumps([s, time.time()]))';
    const t0 = Date.now();
    const [e1, e2] = await Promise.all([sbx.runCode(cell, { context: c1 }), sbx.runCode(cell, { context: c2 })]);
    const took = Date.now() - t0;
    const [s1, f1] = JSON.parse(e1.logs.stdout.join('')), [s2, f2] = JSON.parse(e2.logs.stdout.join(''));
    assert(s1 < f2 && s2 < f1, `two contexts overlap: [${s1}, ${f1}] [${s2}, ${f2}]`);
    assert(took < 5500, `two 3 s cells took ${took} ms`);
    await sbx.removeCodeContext(c1);
    await sbx.removeCodeContext(c2);
  },
  async memory(sbx) {
    await sbx.runCode('small = 1');
    const e = await sbx.runCode('big = bytearray(1 << 30); big[::4096] = b"x" * len(big[::4096])');
    assert(e.error && ['DeadKernelError', 'MemoryError'].includes(e.error.name), 'OOM: ' + JSON.stringify(e.error));
    eq((await sbx.runCode('6 * 7')).text, '42', 'recovered');
  },
};

const pick = process.argv[2] ? [process.argv[2]] : Object.keys(scenarios).filter((k) => k !== 'memory');
let code = 0;
const given = process.env.E2B_SANDBOX_ID;
const sbx = given ? await Sandbox.connect(given) : await Sandbox.create(TEMPLATE, { timeoutMs: 300000 });
try {
  for (const name of pick) {
    const t0 = Date.now();
    try {
      await scenarios[name](sbx);
      console.log(`ok ${name} ${Date.now() - t0} ms`);
    } catch (e) {
      console.log(`FAILED ${name}: ${e && e.stack ? e.stack : e}`);
      code = 1;
    }
  }
} finally {
  if (!given) await sbx.kill().catch(() => {});
}
process.exit(code);
