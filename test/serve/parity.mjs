// What E2B's own js-sdk suite found wrong in agsx serve (issue 25), one
// scenario per argument, each through the unmodified SDK as E2B's tests use
// it: isRunning() after pause, signed download/upload URLs fetched with no
// header, Sandbox.list's order, filters and pages, getMetrics' range,
// deleteSnapshot, and a sandbox killed under commands.run.
import { Sandbox, TimeoutError, assert, eq, main, cleanup, sleep, TEMPLATE } from './lib.mjs';

const scenarios = {
  // GET /health of a paused sandbox is E2B's proxy's 502: isRunning() is
  // false after pause() and true again once connect resumed it.
  async health() {
    const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 60000 });
    cleanup.push(sbx);
    eq(await sbx.isRunning(), true, 'running after create');
    assert(await sbx.pause(), 'pause');
    eq(await sbx.isRunning(), false, 'not running once paused');
    await Sandbox.connect(sbx.sandboxId);
    eq(await sbx.isRunning(), true, 'running after connect');
  },

  // downloadUrl/uploadUrl: a plain fetch() of the URL, no header at all.
  async signed() {
    const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 60000 });
    cleanup.push(sbx);
    const other = await Sandbox.create(TEMPLATE, { timeoutMs: 60000 });
    cleanup.push(other);
    await sbx.files.write('/tmp/hello.txt', 'hello world');
    await other.files.write('/tmp/hello.txt', 'the other one');
    for (const opts of [undefined, { useSignatureExpiration: 10000 }]) {
      const res = await fetch(await sbx.downloadUrl('/tmp/hello.txt', opts));
      eq([res.status, await res.text()], [200, 'hello world'], 'download ' + JSON.stringify(opts));
    }
    const res2 = await fetch(await other.downloadUrl('/tmp/hello.txt'));
    eq(await res2.text(), 'the other one', "the other sandbox's URL reads its own file");
    // root's, relative to root's home
    await sbx.files.write('hello.txt', 'root file', { user: 'root' });
    const r3 = await fetch(await sbx.downloadUrl('hello.txt', { user: 'root', useSignatureExpiration: 10000 }));
    eq([r3.status, await r3.text()], [200, 'root file'], 'download as root');
    // upload
    const form = new FormData();
    form.append('file', 'file content');
    const up = await fetch(await sbx.uploadUrl('/tmp/up.txt', { useSignatureExpiration: 10000 }),
      { method: 'POST', body: form });
    eq([up.status, await up.json()], [200, [{ path: '/tmp/up.txt', name: 'up.txt', type: 'file' }]], 'upload');
    eq(await sbx.files.read('/tmp/up.txt'), 'file content', 'uploaded');
    // expired: envd's 401 and message
    const ex = await fetch(await sbx.downloadUrl('/tmp/hello.txt', { useSignatureExpiration: -10000 }));
    eq([ex.status, await ex.json()], [401, { code: 401, message: 'signature is already expired' }], 'expired');
    const form2 = new FormData();
    form2.append('file', 'nope');
    const exu = await fetch(await sbx.uploadUrl('/tmp/no.txt', { useSignatureExpiration: -100000 }),
      { method: 'POST', body: form2 });
    eq(exu.status, 401, 'expired upload');
    eq(await sbx.files.exists('/tmp/no.txt'), false, 'nothing written by an expired upload');
    // a URL signed for another path, or tampered with: 401
    const good = new URL(await sbx.downloadUrl('/tmp/hello.txt'));
    good.searchParams.set('path', '/etc/passwd');
    const bad = await fetch(good);
    eq([bad.status, (await bad.json()).message], [401, 'invalid signature'], 'another path');
    // a write signature does not read
    const w = new URL(await sbx.uploadUrl('/tmp/hello.txt'));
    eq((await fetch(w)).status, 401, 'a write signature does not read');
    // once the sandbox is killed its URLs are dead
    const url = await other.downloadUrl('/tmp/hello.txt');
    await other.kill();
    eq((await fetch(url)).status, 401, "a killed sandbox's URL");
  },

  // Sandbox.list: newest first, order asc, startedAfter, template, state,
  // limit/nextToken pages, sub-second startedAt.
  async list() {
    const tag = 'parity-' + process.pid;
    const made = [];
    for (let i = 0; i < 3; i++) {
      const s = await Sandbox.create(TEMPLATE, { timeoutMs: 60000, metadata: { tag } });
      cleanup.push(s);
      made.push(s.sandboxId);
    }
    const all = async (q, o = {}) => {
      const p = Sandbox.list({ query: { metadata: { tag }, ...q }, ...o });
      const out = [];
      while (p.hasNext) out.push(...(await p.nextItems()));
      return out;
    };
    const desc = await all({});
    eq(desc.map((s) => s.sandboxId), [...made].reverse(), 'newest first by default');
    const asc = await all({}, { order: 'asc' });
    eq(asc.map((s) => s.sandboxId), made, 'order asc');
    const times = desc.map((s) => s.startedAt.getTime());
    assert(times.some((t) => t % 1000 !== 0), 'startedAt has a fraction: ' + times);
    // pages of one
    const p = Sandbox.list({ limit: 1, query: { metadata: { tag } } });
    const pages = [];
    while (p.hasNext) pages.push((await p.nextItems()).map((s) => s.sandboxId));
    eq(pages, [[made[2]], [made[1]], [made[0]]], 'pages of one');
    // startedAfter: at or after
    const info = await Sandbox.getInfo(made[1]);
    const after = await all({ startedAfter: info.startedAt });
    eq(after.map((s) => s.sandboxId), [made[2], made[1]], 'startedAfter the second one');
    const later = await all({ startedAfter: new Date(Date.now() + 60000) });
    eq(later.length, 0, 'startedAfter the future');
    // template
    eq((await all({ template: TEMPLATE })).length, 3, 'template');
    eq((await all({ template: 'unknown-template' })).length, 0, 'unknown template');
    // state
    assert(await Sandbox.pause(made[0]), 'pause');
    eq((await all({ state: ['paused'] })).map((s) => s.sandboxId), [made[0]], 'paused');
    eq((await all({ state: ['running'] })).map((s) => s.sandboxId), [made[2], made[1]], 'running');
    // a page's position survives its last sandbox's end
    const q = Sandbox.list({ limit: 1, query: { metadata: { tag } } });
    eq((await q.nextItems()).map((s) => s.sandboxId), [made[2]], 'first page');
    await Sandbox.kill(made[2]);
    eq((await q.nextItems()).map((s) => s.sandboxId), [made[1]], 'the next page after a kill');
  },

  // getMetrics({start, end}): nothing before the sandbox existed.
  async metrics() {
    const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 60000 });
    cleanup.push(sbx);
    const start = new Date(Date.now() - 2000);
    const m = await sbx.getMetrics({ start, end: new Date(Date.now() + 2000) });
    assert(m.length > 0, 'a point in a range around now');
    for (const x of m)
      assert(x.timestamp.getTime() >= start.getTime() - 10000 && x.timestamp.getTime() <= Date.now() + 10000,
        'within the range: ' + x.timestamp.toISOString());
    const none = await sbx.getMetrics({
      start: new Date(start.getTime() - 3600 * 1000),
      end: new Date(start.getTime() - 1800 * 1000),
    });
    eq(none.length, 0, 'none for a range before the sandbox existed');
    const future = await sbx.getMetrics({ start: new Date(Date.now() + 3600 * 1000) });
    eq(future.length, 0, 'none for a range after now');
    assert((await sbx.getMetrics()).length > 0, 'no range: now');
  },

  // createSnapshot, listSnapshots, deleteSnapshot (named or not): gone from
  // the list and unusable; an unknown id or a template is false, not removed.
  async snapshots() {
    const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 120000 });
    cleanup.push(sbx);
    await sbx.files.write('/tmp/state', 'snap');
    const a = await sbx.createSnapshot();
    await sbx.files.write('/tmp/state', 'named'); // (unchanged files would be one image)
    const b = await sbx.createSnapshot({ name: 'parity-' + process.pid });
    const ids = async () => {
      const p = Sandbox.listSnapshots();
      const out = [];
      while (p.hasNext) out.push(...(await p.nextItems()).map((s) => s.snapshotId));
      return out;
    };
    const before = await ids();
    assert(before.includes(a.snapshotId) && before.includes(b.snapshotId), 'listed: ' + before);
    const from = await Sandbox.create(a.snapshotId, { timeoutMs: 60000 });
    eq(await from.files.read('/tmp/state'), 'snap', 'a sandbox from the snapshot');
    await from.kill();
    eq(await Sandbox.deleteSnapshot(a.snapshotId), true, 'delete the unnamed one');
    eq(await Sandbox.deleteSnapshot(b.snapshotId), true, 'delete the named one');
    const after = await ids();
    assert(!after.includes(a.snapshotId) && !after.includes(b.snapshotId), 'not listed: ' + after);
    eq(await Sandbox.deleteSnapshot(a.snapshotId), false, 'a second delete is false');
    eq(await Sandbox.deleteSnapshot(TEMPLATE), false, 'a template is no snapshot');
    let threw = false;
    try {
      const s = await Sandbox.create(a.snapshotId, { timeoutMs: 30000 });
      cleanup.push(s);
    } catch {
      threw = true;
    }
    assert(threw, 'no sandbox from a deleted snapshot');
  },

  // kill() under a running command: the stream is dropped, as E2B's proxy
  // drops it; the SDK asks /health (502) and throws its TimeoutError.
  async killed() {
    const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 60000 });
    const cmd = await sbx.commands.run('echo started; sleep 60', { background: true });
    await sleep(300);
    await sbx.kill();
    const t0 = Date.now();
    const err = await cmd.wait().then((r) => r, (e) => e);
    assert(err instanceof TimeoutError || (err && err.name === 'TimeoutError'),
      'a TimeoutError, got ' + (err && err.name) + ': ' + (err && err.message) + ' ' + JSON.stringify(err));
    assert(err.message.includes('sandbox was killed or reached its end of life'), 'its message: ' + err.message);
    assert(Date.now() - t0 < 15000, 'at once, not at a deadline');
    eq(cmd.stdout, 'started\n', 'what it printed before');
    // foreground: the same
    const s2 = await Sandbox.create(TEMPLATE, { timeoutMs: 60000 });
    const run = s2.commands.run('sleep 60').then((r) => r, (e) => e);
    await sleep(500);
    await s2.kill();
    const e2 = await run;
    assert(e2 && e2.name === 'TimeoutError', 'foreground run: ' + (e2 && e2.name) + ': ' + (e2 && e2.message));
  },
};

const which = process.argv[2];
if (!scenarios[which]) throw new Error('unknown scenario ' + which + ': ' + Object.keys(scenarios));
await main(scenarios[which]);
