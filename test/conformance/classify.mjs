// classify.mjs — the report of scripts/e2b-conformance: reads vitest's JSON
// reports of E2B's suites and the project's list of known failures
// (test/conformance/e2b-classes), and prints pass/fail counts by class, then
// every failing test with its first error line, grouped by class and reason.
//
// Usage: node classify.mjs CLASSES SUITE SERVER.json [MOCKED.json]
//   SUITE        js-sdk or code-interpreter (the first column of CLASSES)
//   SERVER.json  the run against agsx serve
//   MOCKED.json  the run of the files that use msw (or make no sandbox)
//                without the server's URLs: a test that passes there but not
//                against the server is a mocked test, counted apart (against
//                the server it fails only because the URLs point the SDK away
//                from its mock); one that passes both ways counts as passed.
// Exit status: 0, or 1 when a failure is not in the list (a regression, or a
// new test to classify), 2 on bad input.
import fs from 'node:fs';
import path from 'node:path';

const CLASSES = {
  refused: 'refused on purpose (501 with E2B\'s error shape)',
  incompatible: 'incompatible (an agsx bug or a missing feature)',
  infra: 'needs E2B\'s cloud or infrastructure',
};

function die(msg) {
  console.error(`classify: ${msg}`);
  process.exit(2);
}

const [classesFile, suite, serverFile, mockedFile] = process.argv.slice(2);
if (!classesFile || !suite || !serverFile) die('usage: classify.mjs CLASSES SUITE SERVER.json [MOCKED.json]');

// A pattern is a test id with * for any run of characters.
function globRegex(glob) {
  const esc = glob.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*');
  return new RegExp(`^${esc}$`);
}

const rules = [];
fs.readFileSync(classesFile, 'utf8').split('\n').forEach((line, i) => {
  if (!line.trim() || line.startsWith('#')) return;
  const f = line.split('\t');
  if (f.length !== 4 || !CLASSES[f[1]] || !f[2] || !f[3])
    die(`${classesFile}:${i + 1}: want SUITE<TAB>CLASS<TAB>PATTERN<TAB>REASON, CLASS one of ${Object.keys(CLASSES).join(', ')}`);
  if (f[0] === suite) rules.push({ cls: f[1], pattern: f[2], re: globRegex(f[2]), reason: f[3], used: 0 });
});

// The tests of a vitest JSON report, by id "FILE > DESCRIBE > ... > TITLE",
// FILE relative to the suite's tests/ directory. A file that did not load
// is one pseudo-test "FILE > (file)".
function load(file) {
  let report;
  try {
    report = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    die(`${file}: ${e.message}`);
  }
  const tests = new Map();
  for (const tr of report.testResults || []) {
    const rel = tr.name.replace(/^.*?\/tests\//, '');
    const cases = tr.assertionResults || [];
    if (cases.length === 0 || (tr.status === 'failed' && tr.message && !cases.some((c) => c.status === 'failed'))) {
      if (tr.status === 'failed')
        tests.set(`${rel} > (file)`, { status: 'failed', error: tr.message || 'the file failed' });
    }
    for (const c of cases) {
      const id = [rel, ...(c.ancestorTitles || []), c.title].join(' > ');
      const status = c.status === 'passed' ? 'passed' : c.status === 'failed' ? 'failed' : 'skipped';
      tests.set(id, { status, error: (c.failureMessages || [])[0] || '' });
    }
  }
  return tests;
}

// The first meaningful line of an error, without ANSI colours.
function firstLine(msg) {
  const lines = String(msg).replace(/\x1b\[[0-9;]*m/g, '').split('\n').map((l) => l.trim()).filter(Boolean);
  const line = lines[0] || '(no message)';
  return line.length > 200 ? line.slice(0, 197) + '...' : line;
}

const server = load(serverFile);
const mocked = mockedFile ? load(mockedFile) : new Map();
let mockedPassed = 0;
for (const [id, t] of mocked) {
  if (t.status === 'passed' && server.get(id)?.status !== 'passed') {
    mockedPassed++;
    server.delete(id);
  }
}

const counts = { passed: 0, refused: 0, incompatible: 0, infra: 0, skipped: 0, unlisted: 0 };
const groups = new Map(); // "class\treason" -> [[id, error]]
for (const [id, t] of [...server].sort((a, b) => a[0].localeCompare(b[0]))) {
  if (t.status !== 'failed') {
    counts[t.status]++;
    continue;
  }
  const rule = rules.find((r) => r.re.test(id));
  const key = rule ? `${rule.cls}\t${rule.reason}` : 'unlisted\tnot in the list: classify it';
  if (rule) rule.used++;
  counts[rule ? rule.cls : 'unlisted']++;
  if (!groups.has(key)) groups.set(key, []);
  groups.get(key).push([id, firstLine(t.error)]);
}

const total = server.size;
console.log(`== ${suite}: ${total} tests against agsx serve` +
  (mockedFile ? `, and ${mockedPassed} apart (mocked: they pass without the server's URLs, fail with them)` : ''));
const pad = (s) => String(s).padStart(5);
console.log(`${pad(counts.passed)}  passed`);
for (const c of Object.keys(CLASSES)) console.log(`${pad(counts[c])}  ${CLASSES[c]}`);
console.log(`${pad(counts.unlisted)}  failed and not in the list (to classify)`);
console.log(`${pad(counts.skipped)}  skipped by the suite itself`);
console.log(`${suite}-summary: total=${total} passed=${counts.passed} refused=${counts.refused} ` +
  `incompatible=${counts.incompatible} infra=${counts.infra} unlisted=${counts.unlisted} ` +
  `skipped=${counts.skipped} mocked=${mockedPassed}`);

for (const cls of ['unlisted', ...Object.keys(CLASSES)]) {
  for (const [key, list] of groups) {
    const [c, reason] = key.split('\t');
    if (c !== cls) continue;
    console.log(`\n-- ${c}: ${reason} (${list.length})`);
    for (const [id, err] of list) console.log(`   ${id}\n      ${err}`);
  }
}
// Lines of the list that matched no failure: fixed, the list can shrink
// (only on a whole run: with --file most lines have nothing to match).
// A line whose reason says "flaky" may match nothing in a good run.
const stale = rules.filter((r) => r.used === 0 && !/\bflaky\b/.test(r.reason) &&
  [...server.keys()].some((id) => r.re.test(id)));
if (stale.length) {
  console.log(`\n-- lines of ${path.basename(classesFile)} that matched no failure (${stale.length}): take them out`);
  for (const r of stale) console.log(`   ${r.cls}\t${r.pattern}`);
}
process.exit(counts.unlisted ? 1 : 0);
