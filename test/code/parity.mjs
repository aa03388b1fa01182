// E2B parity of the code interpreter (issue 25, items 1 and 4): the
// unmodified npm `@e2b/code-interpreter` SDK against `agsx serve`
// (test/bats/code-parity.bats), one fresh sandbox per scenario.
// E2B_SDK names the node_modules directory test/code/npm-install filled; the
// SDK is configured only through E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY.
// argv[2..] pick scenarios (default: all). The expected values are those of
// E2B's own server (e2b-dev/code-interpreter, template/server) and suite.
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
const PNG = '89504e470d0a1a0a';
const isPng = (b64) => typeof b64 === 'string' && Buffer.from(b64, 'base64').subarray(0, 8).toString('hex') === PNG;
const noError = (e, what) => eq(e.error ? [e.error.name, e.error.value] : null, null, what + ': error');

const scenarios = {
  // The text of a result is IPython's text/plain with one pair of quotes
  // stripped (E2B's Result): a string is its value, a string holding quotes
  // keeps the inner ones; the same for JavaScript (util.inspect's repr).
  async text(sbx) {
    eq((await sbx.runCode("'still-ok'")).text, 'still-ok', 'python str');
    eq((await sbx.runCode('"\'still-ok\'"')).text, "'still-ok'", 'python str with quotes');
    eq((await sbx.runCode('[1, "a"]')).text, "[1, 'a']", 'python list');
    eq((await sbx.runCode("'still-ok'", { language: 'js' })).text, 'still-ok', 'js string');
    eq((await sbx.runCode('"\'still-ok\'"', { language: 'js' })).text, "'still-ok'", 'js string with quotes');
    eq((await sbx.runCode("({ a: 'x' })", { language: 'js' })).text, "{ a: 'x' }", 'js object');
  },
  // Per-execution env vars hold for that cell only, in every language.
  async envs(sbx) {
    const cases = [
      ['bash', 'echo $FOO', 'echo ${FOO:-default}', (e) => e.logs.stdout.join('')],
      ['python', 'import os; os.environ.get("FOO")', 'os.environ.get("FOO", "default")', (e) => e.text],
      ['js', 'process.env.FOO', "process.env.FOO || 'default'", (e) => e.text],
      ['r', 'Sys.getenv("FOO")', 'Sys.getenv("FOO", unset = "default")', (e) => e.results[0]?.text],
    ];
    const want = { bash: ['bar\n', 'default\n'], python: ['bar', 'default'], js: ['bar', 'default'],
      r: ['[1] "bar"', '[1] "default"'] };
    for (const [language, with_, without, get] of cases) {
      const a = await sbx.runCode(with_, { language, envs: { FOO: 'bar' } });
      const b = await sbx.runCode(without, { language });
      eq([get(a), get(b)], want[language], `${language}: the env var of one execution`);
    }
    // A variable the shell had is put back, not unset.
    await sbx.runCode('export KEEP=mine', { language: 'bash' });
    await sbx.runCode('echo $KEEP', { language: 'bash', envs: { KEEP: 'theirs' } });
    eq((await sbx.runCode('echo $KEEP', { language: 'bash' })).logs.stdout, ['mine\n'], 'bash: restored');
  },
  // A fresh sandbox lists E2B's default contexts (python, javascript); a
  // context made then is the last one listed.
  async defaults(sbx) {
    const list = await sbx.listCodeContexts();
    const langs = list.map((c) => c.language);
    assert(langs.includes('python') && langs.includes('javascript'), 'defaults: ' + JSON.stringify(langs));
    eq((await sbx.listCodeContexts()).length, list.length, 'listed again: no more contexts');
    const c = await sbx.createCodeContext();
    const after = await sbx.listCodeContexts();
    eq(after[after.length - 1].id, c.id, 'the new context is the last');
    // The default python context is the one runCode uses.
    await sbx.runCode('shared = 7');
    eq((await sbx.runCode('shared', { context: list.find((x) => x.language === 'python') })).text, '7',
      'listed python default = runCode default');
  },
  // PIL images are results (png): shown, as the last expression, or saved.
  async pil(sbx) {
    const mk = 'import numpy\nfrom PIL import Image\n' +
      'image = Image.fromarray((numpy.random.rand(16, 16, 3) * 255).astype("uint8")).convert("RGBA")\n';
    const shown = await sbx.runCode(mk + 'image.show()\nprint("done")');
    noError(shown, 'show');
    assert(isPng(shown.results[0]?.png), 'show(): png');
    eq(shown.logs, { stdout: ['done\n'], stderr: [] }, 'show(): no viewer program ran');
    assert(isPng((await sbx.runCode(mk + 'image')).results[0]?.png), 'last expression: png');
    const saved = await sbx.runCode(mk + 'image.save("/tmp/parity.png")');
    assert(isPng(saved.results[0]?.png), 'save(): png');
    eq((await sbx.runCode('import os; os.path.getsize("/tmp/parity.png") > 0')).text, 'True', 'saved');
  },
  // Chart values derived from float32 geometry are rounded as e2b_charts'
  // dynamic_round does (E2B's pie and box-and-whisker tests).
  async charts(sbx) {
    const pie = await sbx.runCode('import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n' +
      'ax.pie([90, 10], labels=["No", "No, in blue"], startangle=90)\nplt.show()');
    const el = pie.results[0].chart.elements;
    eq(el.map((e) => [e.label, e.angle, e.radius]), [['No', 324, 1], ['No, in blue', 36, 1]], 'pie angles');
    const box = await sbx.runCode('import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n' +
      "data = {'Class A': [85, 90, 78, 92, 88], 'Class B': [95, 89, 76, 91, 84, 87], 'Class C': [75, 82, 88, 79, 86]}\n" +
      'ax.boxplot(data.values(), labels=data.keys(), patch_artist=True)\nplt.show()');
    const b = box.results[0].chart.elements;
    eq(b.map((x) => x.outliers), [[], [76], []], 'outliers');
    eq(b.map((x) => x.min), [78, 84, 75], 'min');
    eq(b.map((x) => x.first_quartile), [85, 84.75, 79], 'first_quartile');
    eq(b.map((x) => x.median), [88, 88, 82], 'median');
    eq(b.map((x) => x.third_quartile), [90, 90.5, 86], 'third_quartile');
    eq(b.map((x) => x.max), [92, 95, 88], 'max');
  },
  // JavaScript as E2B's kernel: ESM imports, top-level await with its value,
  // declarations that stay, streaming, errors.
  async javascript(sbx) {
    eq((await sbx.runCode('console.log("Hello World!")', { language: 'js' })).logs.stdout, ['Hello World!\n'], 'log');
    eq((await sbx.runCode("import { readFileSync } from 'fs'\nconsole.log(typeof readFileSync)",
      { language: 'js' })).logs.stdout, ['function\n'], 'esm import');
    eq((await sbx.runCode("await Promise.resolve('Hello World!')", { language: 'js' })).text, 'Hello World!',
      'top-level await value');
    await sbx.runCode('const base = await Promise.resolve(40)\nfunction add(x) { return base + x }', { language: 'js' });
    eq((await sbx.runCode('add(2)', { language: 'js' })).text, '42', 'declarations of an await cell stay');
    await sbx.runCode('let again = 1', { language: 'js' });
    noError(await sbx.runCode('let again = 2', { language: 'js' }), 'a declaration made again');
    const seen = [];
    const t0 = Date.now();
    await sbx.runCode('console.log("a"); await new Promise((r) => setTimeout(r, 2000)); console.log("b")',
      { language: 'js', onStdout: (m) => seen.push([m.line, Date.now() - t0]) });
    eq(seen.map((s) => s[0]), ['a\n', 'b\n'], 'streamed lines');
    assert(seen[1][1] - seen[0][1] > 1500, `first line at ${seen[0][1]} ms, second at ${seen[1][1]} ms`);
    const f = await sbx.runCode('null.x', { language: 'js' });
    eq(f.error.name, 'TypeError', 'error name');
    assert(/Cannot read properties of null/.test(f.error.value), 'error value: ' + f.error.value);
    assert(/cell\.js/.test(f.error.traceback), 'traceback: ' + f.error.traceback);
  },
  // TypeScript: cells transpiled (node-typescript), state across cells.
  async typescript(sbx) {
    eq((await sbx.runCode('const message: string = "Hello World!"; console.log(message)', { language: 'ts' }))
      .logs.stdout, ['Hello World!\n'], 'ts log');
    await sbx.runCode('interface P { x: number }\nconst p: P = { x: 20 }', { language: 'ts' });
    eq((await sbx.runCode('p.x * 2 + 2', { language: 'ts' })).text, '42', 'ts state');
    eq((await sbx.runCode('const n: number = await Promise.resolve(6); n * 7', { language: 'typescript' })).text,
      '42', 'ts await');
    const contexts = await sbx.listCodeContexts();
    assert(contexts.some((c) => c.language === 'typescript'), 'a typescript context is listed');
    const c = await sbx.createCodeContext({ language: 'ts' });
    eq(c.language, 'typescript', 'created');
  },
  // R through IRkernel: state, values, data frames, plots, errors, output.
  async r(sbx) {
    await sbx.runCode('x <- 41', { language: 'r' });
    eq((await sbx.runCode('x + 1', { language: 'r' })).results[0].text, '[1] 42', 'r state');
    const df = await sbx.runCode('data.frame(a = 1:2)', { language: 'r' });
    assert(/<table/.test(df.results[0].html), 'data frame html: ' + df.results[0].html);
    const plot = await sbx.runCode('plot(1:3)', { language: 'r' });
    assert(plot.results.some((x) => isPng(x.png)), 'plot png');
    const out = await sbx.runCode('print("hi"); message("warn")', { language: 'r' });
    eq(out.logs.stdout, ['[1] "hi"\n'], 'r stdout');
    assert(out.logs.stderr.join('').startsWith('warn'), 'r stderr: ' + out.logs.stderr);
    const f = await sbx.runCode('stop("boom")', { language: 'r' });
    assert(f.error && /boom/.test(f.error.value) && /stop/.test(f.error.traceback), 'r error: ' + JSON.stringify(f.error));
  },
};

const pick = process.argv.length > 2 ? process.argv.slice(2) : Object.keys(scenarios);
let code = 0;
for (const name of pick) {
  const t0 = Date.now();
  const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 300000 });
  try {
    await scenarios[name](sbx);
    console.log(`ok ${name} ${Date.now() - t0} ms`);
  } catch (e) {
    console.log(`FAILED ${name}: ${e && e.stack ? e.stack : e}`);
    code = 1;
  } finally {
    await sbx.kill().catch(() => {});
  }
}
process.exit(code);
