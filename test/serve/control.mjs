// The control plane through the SDK: create with metadata and timeout, getInfo,
// list with a metadata filter, setTimeout, getMetrics, connect, kill, isRunning,
// a wrong API key.
import { Sandbox, AuthenticationError, assert, eq, rejects, main, cleanup, TEMPLATE, sleep } from './lib.mjs';

await main(async () => {
  const tag = 'ctl-' + process.pid;
  const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 60000, metadata: { tag, who: 'a b&c=d' } });
  cleanup.push(sbx);
  assert(/^[0-9a-f]{20}$/.test(sbx.sandboxId), 'a 20-digit id: ' + sbx.sandboxId);
  const info = await sbx.getInfo();
  eq(info.metadata, { tag, who: 'a b&c=d' }, 'metadata');
  eq(info.state, 'running', 'state');
  eq(info.templateId, TEMPLATE, 'templateId');
  const left = (info.endAt.getTime() - Date.now()) / 1000;
  assert(left > 50 && left <= 61, 'deadline about 60 s away: ' + left);

  const page = await Sandbox.list({ query: { metadata: { tag, who: 'a b&c=d' } } }).nextItems();
  eq(page.map((s) => s.sandboxId), [sbx.sandboxId], 'list by metadata');
  eq((await Sandbox.list({ query: { metadata: { tag: 'nobody' } } }).nextItems()).length, 0,
    'list by other metadata');

  await sbx.setTimeout(120000);
  const left2 = ((await sbx.getInfo()).endAt.getTime() - Date.now()) / 1000;
  assert(left2 > 110, 'setTimeout moved the deadline: ' + left2);

  const m = await sbx.getMetrics();
  assert(m.length >= 1 && m[0].memTotal > 0 && m[0].cpuCount >= 1, 'metrics: ' + JSON.stringify(m));

  const again = await Sandbox.connect(sbx.sandboxId);
  eq(again.sandboxId, sbx.sandboxId, 'connect');
  assert(await again.isRunning(), 'isRunning');

  await rejects(() => Sandbox.list({ apiKey: 'e2b_' + '0'.repeat(40) }).nextItems(),
    AuthenticationError, 'a wrong key');

  assert(await sbx.kill(), 'kill() is true');
  assert(!(await sbx.isRunning()), 'isRunning() is false after kill');
  assert(!(await Sandbox.kill(sbx.sandboxId)), 'a second kill is false');
  cleanup.length = 0;
});
