// The MCP side of bench/mcp, and its table. Two modes:
//
//   NODE_PATH=<node_modules> node mcp-client.mjs serve AGSX IMAGE [GLOBAL-ARGS...]
//     One session of `agsx mcp` through the official MCP TypeScript SDK
//     (Client over StdioClientTransport, as an agent's client runs it).
//     Makes one sandbox (sandbox_create, untimed), prints "ready", then
//     answers one line of stdin at a time with the call's time in ms,
//     measured around the SDK's callTool:
//       exec  tools/call exec argv ["true"] in that sandbox -> "MS"
//       list  tools/call sandbox_list                      -> "MS"
//       new   sandbox_create + exec ["true"] + sandbox_kill confirm
//                                      -> "TOTAL CREATE EXEC KILL"
//       pool  the same, sandbox_create claiming from the pool $BENCH_POOL
//                                      -> "TOTAL CREATE EXEC KILL"
//       end   kills its sandbox, closes the session and exits.
//     A failed call, an isError or an exit status other than 0 ends it
//     (exit 1): the bench stops there.
//
//   node mcp-client.mjs report SAMPLES
//     SAMPLES: lines "NAME MS" (NAME.PART for the parts of a total); prints
//     the table: median and p90 of each, the ratios mcp/cli.
import { createRequire } from 'node:module';
import { createInterface } from 'node:readline';
import { readFileSync } from 'node:fs';
import path from 'node:path';

const [mode, ...rest] = process.argv.slice(2);
const die = (what, detail) => {
  console.error(`mcp-client: ${what}${detail === undefined ? '' : ': ' + JSON.stringify(detail).slice(0, 2000)}`);
  process.exit(1);
};

if (mode === 'serve') await serve(...rest);
else if (mode === 'report') report(rest[0]);
else die('usage: mcp-client.mjs serve AGSX IMAGE [GLOBAL-ARGS...] | report SAMPLES');

async function serve(agsx, image, ...gargs) {
  if (!agsx || !image) die('serve: AGSX and IMAGE are needed');
  const require = createRequire(path.join(process.env.NODE_PATH, 'x.js'));
  const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
  const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');
  const transport = new StdioClientTransport({ command: agsx, args: [...gargs, 'mcp'], env: process.env, stderr: 'inherit' });
  const client = new Client({ name: 'agsx-bench', version: '1.0.0' });
  await client.connect(transport);
  const now = () => Number(process.hrtime.bigint()) / 1e6;
  const call = async (name, args) => {
    const r = await client.callTool({ name, arguments: args });
    if (r.isError) die(`tools/call ${name}`, r.content);
    return r.structuredContent;
  };
  const execTrue = async id => {
    const r = await call('exec', { sandbox: id, argv: ['true'] });
    if (r.exit_code !== 0) die('exec true', r);
  };
  const box = (await call('sandbox_create', { image, timeout: 3600 })).id;
  const ops = {
    exec: async () => { const t0 = now(); await execTrue(box); return [now() - t0]; },
    list: async () => { const t0 = now(); await call('sandbox_list', {}); return [now() - t0]; },
    new: async () => newSandbox({ image }),
    pool: async () => newSandbox({ pool: process.env.BENCH_POOL }),
  };
  async function newSandbox(create) {
    {
      const t0 = now();
      const id = (await call('sandbox_create', create)).id;
      const t1 = now();
      await execTrue(id);
      const t2 = now();
      const k = await call('sandbox_kill', { sandbox: id, confirm: true });
      const t3 = now();
      if (!k.killed) die('sandbox_kill', k);
      return [t3 - t0, t1 - t0, t2 - t1, t3 - t2];
    }
  }
  console.log('ready');
  for await (const line of createInterface({ input: process.stdin })) {
    if (line === 'end') break;
    if (!ops[line]) die(`unknown request ${line}`);
    console.log((await ops[line]()).map(v => v.toFixed(3)).join(' '));
  }
  await call('sandbox_kill', { sandbox: box, confirm: true });
  await client.close();
  process.exit(0); // stdin, read by readline, would keep Node alive
}

function report(file) {
  const got = {};
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    const [name, v] = line.split(' ');
    if (name) (got[name] ??= []).push(Number(v));
  }
  // Median and p90 as the other benches take them: of n sorted values, the
  // ((n+1)/2)th and the (0.9 n)th, 1-based, rounded down.
  const pick = v => {
    const s = [...v].sort((a, b) => a - b);
    return { median: s[Math.floor((s.length + 1) / 2) - 1], p90: s[Math.max(Math.floor(s.length * 0.9), 1) - 1] };
  };
  const st = n => { if (!got[n]) die(`report: no samples of ${n}`); return pick(got[n]); };
  const rows = [
    ['in a running sandbox', null],
    ['MCP tools/call exec ["true"]', 'mcp_exec'],
    ['agsx exec ID true', 'cli_exec'],
    ['floor: MCP tools/call sandbox_list', 'mcp_list'],
    ['floor: bash spawns /bin/true', 'spawn_true'],
    ['a new sandbox', null],
    ['MCP create+exec+kill', 'mcp_new'],
    ['  sandbox_create', 'mcp_new.create'],
    ['  exec ["true"]', 'mcp_new.exec'],
    ['  sandbox_kill confirm', 'mcp_new.kill'],
    ['MCP create (pool)+exec+kill', 'mcp_pool'],
    ['  sandbox_create pool', 'mcp_pool.create'],
    ['  exec ["true"]', 'mcp_pool.exec'],
    ['  sandbox_kill confirm', 'mcp_pool.kill'],
    ['agsx run --rm IMG true', 'cli_rm'],
    ['agsx run --rm --pool P true', 'cli_pool'],
    ['agsx run -d --rm + exec + kill', 'cli_new'],
    ['  run -d --rm IMG sleep', 'cli_new.create'],
    ['  exec ID true', 'cli_new.exec'],
    ['  kill ID', 'cli_new.kill'],
  ];
  const w = 36;
  console.log(`${`${got.mcp_exec?.length} rounds, interleaved`.padEnd(w)} | median ms | p90 ms`);
  console.log(`${'-'.repeat(w)}-|-----------|-------`);
  for (const [what, n] of rows) {
    if (!n) { console.log(`${what}:`); continue; }
    const s = st(n);
    console.log(`${what.padEnd(w)} | ${s.median.toFixed(2).padStart(9)} | ${s.p90.toFixed(2).padStart(6)}`);
  }
  console.log(`${'ratios'.padEnd(w)} | medians   | per round (median)`);
  const ratio = (label, a, b) => {
    const paired = pick(got[a].map((v, i) => v / got[b][i])).median;
    console.log(`${label.padEnd(w)} | ${(st(a).median / st(b).median).toFixed(2).padStart(9)} | ${paired.toFixed(2)}`);
  };
  ratio('exec: MCP / agsx exec', 'mcp_exec', 'cli_exec');
  ratio('exec: MCP / MCP floor (sandbox_list)', 'mcp_exec', 'mcp_list');
  ratio('new: MCP / agsx run --rm', 'mcp_new', 'cli_rm');
  ratio('new: MCP / run -d + exec + kill', 'mcp_new', 'cli_new');
  ratio('pool: MCP / agsx run --rm --pool', 'mcp_pool', 'cli_pool');
  ratio('MCP: pool / no pool', 'mcp_pool', 'mcp_new');
  console.log('(a claim from an empty pool starts cold: the pool refills between rounds, not always in time)');
}
