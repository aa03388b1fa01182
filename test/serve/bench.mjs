// bench/serve's SDK side: node bench.mjs PHASE [N]; prints one JSON line.
//   roundtrip N   Sandbox.create -> commands.run('true') -> kill, N times
//   createrun N   Sandbox.create -> commands.run('true'), N times (each killed untimed;
//                 PACE_MS: a pause before each round, so that the last round's
//                 teardown and the pool's refill are done); the create and the
//                 run are timed apart too
//   empty N       N GET /health of no sandbox: an HTTP round trip, the floor
//   ab N          paired rounds against two servers (AB_URLS="URL_A URL_B", each
//                 with TEMPLATE pooled): create+run of each in a random order per
//                 round (PACE_MS before each), medians and the paired difference
//   creates N     N concurrent Sandbox.create, then kill them all
//   output MB     commands.run writing MB MiB to stdout, counted by onStdout
//   files MB      files.write / files.read of MB MiB
//   hold N        N live sandboxes; prints their ids, waits for stdin to close
import { Sandbox, TEMPLATE, assert } from './lib.mjs';
import { randomBytes, createHash } from 'node:crypto';

const [phase, arg] = process.argv.slice(2);
const n = Number(arg || 10);
const now = () => Number(process.hrtime.bigint()) / 1e6;
const stats = (v) => {
  const s = [...v].sort((a, b) => a - b);
  const q = (p) => s[Math.min(s.length - 1, Math.floor(p * s.length))];
  return { n: s.length, median_ms: +q(0.5).toFixed(1), p90_ms: +q(0.9).toFixed(1) };
};

if (phase === 'roundtrip') {
  const t = [];
  for (let i = 0; i < n; i++) {
    const t0 = now();
    const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 60000 });
    const r = await sbx.commands.run('true');
    assert(r.exitCode === 0, 'true exits 0');
    await sbx.kill();
    t.push(now() - t0);
  }
  console.log(JSON.stringify({ phase, ...stats(t) }));
} else if (phase === 'createrun') {
  const t = [], tc = [], tr = [];
  const pace = Number(process.env.PACE_MS || 0);
  for (let i = 0; i < n; i++) {
    if (pace) await new Promise((r) => setTimeout(r, pace));
    const t0 = now();
    const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 60000 });
    const t1 = now();
    const r = await sbx.commands.run('true');
    const t2 = now();
    t.push(t2 - t0);
    tc.push(t1 - t0);
    tr.push(t2 - t1);
    assert(r.exitCode === 0, 'true exits 0');
    await sbx.kill();
  }
  console.log(JSON.stringify({ phase, template: TEMPLATE, pace_ms: pace, ...stats(t),
    create_median_ms: stats(tc).median_ms, run_median_ms: stats(tr).median_ms }));
} else if (phase === 'ab') {
  const urls = process.env.AB_URLS.split(' ');
  const pace = Number(process.env.PACE_MS || 0);
  const t = urls.map(() => ({ c: [], r: [], all: [] }));
  const one = async (k) => {
    if (pace) await new Promise((r) => setTimeout(r, pace));
    const o = { apiUrl: urls[k], sandboxUrl: urls[k], timeoutMs: 60000 };
    const t0 = now();
    const sbx = await Sandbox.create(TEMPLATE, o);
    const t1 = now();
    const r = await sbx.commands.run('true');
    const t2 = now();
    assert(r.exitCode === 0, 'true exits 0');
    await sbx.kill();
    t[k].c.push(t1 - t0);
    t[k].r.push(t2 - t1);
    t[k].all.push(t2 - t0);
  };
  await one(0);
  await one(1);
  for (const x of t) x.c.length = x.r.length = x.all.length = 0; /* the warm-up */
  for (let i = 0; i < n; i++) {
    const order = Math.random() < 0.5 ? [0, 1] : [1, 0];
    for (const k of order) await one(k);
  }
  const d = t[1].all.map((v, i) => v - t[0].all[i]);
  const m = (v) => stats(v).median_ms;
  console.log(JSON.stringify({ phase, pace_ms: pace, n,
    a: { median_ms: m(t[0].all), create_ms: m(t[0].c), run_ms: m(t[0].r) },
    b: { median_ms: m(t[1].all), create_ms: m(t[1].c), run_ms: m(t[1].r) },
    b_minus_a_median_ms: m(d) }));
} else if (phase === 'empty') {
  const t = [];
  const url = process.env.E2B_SANDBOX_URL + '/health';
  for (let i = 0; i < n; i++) {
    const t0 = now();
    const res = await fetch(url, { headers: { 'E2b-Sandbox-Id': 'none' } });
    await res.arrayBuffer();
    t.push(now() - t0);
  }
  console.log(JSON.stringify({ phase, ...stats(t) }));
} else if (phase === 'creates') {
  const t0 = now();
  const res = await Promise.allSettled(
    Array.from({ length: n }, () => Sandbox.create(TEMPLATE, { timeoutMs: 120000 })));
  const secs = (now() - t0) / 1000;
  const ok = res.filter((r) => r.status === 'fulfilled').map((r) => r.value);
  const failed = res.filter((r) => r.status === 'rejected').map((r) => String(r.reason));
  await Promise.allSettled(ok.map((s) => s.kill()));
  console.log(JSON.stringify({ phase, n, ok: ok.length, seconds: +secs.toFixed(2),
    creates_per_s: +(ok.length / secs).toFixed(1), errors: failed.slice(0, 3) }));
} else if (phase === 'output') {
  const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 120000 });
  let bytes = 0, dropped = 0;
  const t0 = now();
  // a fast writer: the log keeps 8 MiB and never waits for a reader, so
  // what a slow reader misses is reported on stderr (counted here)
  await sbx.commands.run(`head -c ${n * 1048576} /dev/zero | tr '\\0' x`, {
    onStdout: (d) => { bytes += d.length; },
    onStderr: (d) => { for (const m of d.matchAll(/agsx: (\d+) bytes of output were dropped/g)) dropped += Number(m[1]); },
    timeoutMs: 110000,
  });
  const secs = (now() - t0) / 1000;
  // a writer paced below the reader loses nothing
  let paced = 0;
  const t1 = now();
  await sbx.commands.run(`i=0; while [ $i -lt ${n} ]; do head -c 1048576 /dev/zero | tr '\\0' x; sleep 0.1; i=$((i+1)); done`,
    { onStdout: (d) => { paced += d.length; }, timeoutMs: 110000 });
  const secs2 = (now() - t1) / 1000;
  await sbx.kill();
  console.log(JSON.stringify({ phase, written: n * 1048576, received: bytes, dropped,
    seconds: +secs.toFixed(2), mb_per_s: +(bytes / 1048576 / secs).toFixed(1),
    paced_received: paced, paced_mb_per_s: +(paced / 1048576 / secs2).toFixed(1) }));
} else if (phase === 'files') {
  const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 120000 });
  const data = randomBytes(n * 1048576);
  const t0 = now();
  await sbx.files.write('/tmp/bench.bin', new Blob([data]));
  const t1 = now();
  const back = Buffer.from(await sbx.files.read('/tmp/bench.bin', { format: 'bytes' }));
  const t2 = now();
  const same = createHash('sha256').update(data).digest('hex') ===
    createHash('sha256').update(back).digest('hex');
  await sbx.kill();
  console.log(JSON.stringify({ phase, mib: n, same,
    upload_mb_per_s: +(n / ((t1 - t0) / 1000)).toFixed(1),
    download_mb_per_s: +(n / ((t2 - t1) / 1000)).toFixed(1) }));
} else if (phase === 'hold') {
  const v = [];
  for (let i = 0; i < n; i += 10)
    v.push(...await Promise.all(Array.from({ length: Math.min(10, n - i) },
      () => Sandbox.create(TEMPLATE, { timeoutMs: 300000 }))));
  console.log(JSON.stringify({ phase, n: v.length }));
  process.stdin.resume();
  await new Promise((r) => process.stdin.on('end', r));
  await Promise.allSettled(v.map((s) => s.kill()));
} else {
  throw new Error('unknown phase ' + phase);
}
