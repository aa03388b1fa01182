// code_run and code_context_create through the official MCP SDK, for
// test/bats/mcp.bats (the host image: the host's python3 with ipykernel,
// as test/bats/code.bats). Usage:
//   NODE_PATH=<node_modules> node code.mjs AGSX [AGSX-ARGS...]
// Prints "ok - ..." lines and exits 1 at the first failed check.
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(path.join(process.env.NODE_PATH, 'x.js'));
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');

const [agsx, ...args] = process.argv.slice(2);
function check(cond, what, detail) {
  if (!cond) {
    console.log(`not ok - ${what}${detail === undefined ? '' : ': ' + JSON.stringify(detail).slice(0, 3000)}`);
    process.exit(1);
  }
  console.log(`ok - ${what}`);
}

const transport = new StdioClientTransport({ command: agsx, args: [...args, 'mcp'], env: process.env, stderr: 'inherit' });
const client = new Client({ name: 'agsx-test', version: '1.0.0' });
await client.connect(transport);
const call = (name, a, opts) => client.callTool({ name, arguments: a }, undefined, opts);

let r = await call('sandbox_create', { image: 'host', timeout: 300 });
check(!r.isError, 'sandbox_create host', r);
const id = r.structuredContent.id;

r = await call('code_run', { sandbox: id, code: 'x = 21\nprint("set")' }, { timeout: 180000 });
check(!r.isError && r.structuredContent.stdout === 'set\n' && r.structuredContent.language === 'python' && !r.structuredContent.error,
  'code_run: a python cell in the default context', r);
const ctx = r.structuredContent.context;
r = await call('code_run', { sandbox: id, code: 'x * 2' });
check(r.structuredContent?.text === '42' && r.structuredContent.context === ctx && r.structuredContent.execution_count >= 2,
  'a second cell sees the first one\'s variable: 42', r);
r = await call('code_run', { sandbox: id, code: '1/0' });
check(!r.isError && r.structuredContent.error?.name === 'ZeroDivisionError' && /1\/0|ZeroDivision/.test(r.structuredContent.error.traceback),
  'an error: its name and traceback (a result, not isError)', r);
r = await call('code_run', { sandbox: id, code: [
  '%config InlineBackend.print_figure_kwargs = {"bbox_inches": None}', 'import matplotlib.pyplot as plt',
  'fig = plt.figure(figsize=(4, 3), dpi=50)', 'plt.plot([1, 2, 3], [1, 4, 9])', 'plt.show()'].join('\n') },
  // matplotlib's first import (its font cache) took over the SDK's default 60 s on a loaded CI host
  { timeout: 180000 });
const img = r.content?.find(c => c.type === 'image');
check(r.structuredContent?.images === 1 && img?.mimeType === 'image/png', 'a plot: one image content item', { ...r, content: r.content?.map(c => c.type) });
const png = Buffer.from(img.data, 'base64');
check(png.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])) && png.readUInt32BE(16) === 200 && png.readUInt32BE(20) === 150,
  'it decodes as a PNG of 200x150', { w: png.readUInt32BE(16), h: png.readUInt32BE(20) });
r = await call('code_run', { sandbox: id, code: 'import time\nwhile True: time.sleep(0.1)', timeout: 2 });
check(r.structuredContent?.timed_out === true && r.structuredContent.error?.name === 'TimeoutError', 'timeout interrupts the cell', r);
r = await call('code_run', { sandbox: id, code: 'x + 1' });
check(r.structuredContent?.text === '22', 'and the context keeps its state', r);

r = await call('code_context_create', { sandbox: id, language: 'bash', cwd: '/tmp' });
check(!r.isError && r.structuredContent.language === 'bash' && r.structuredContent.cwd === '/tmp', 'code_context_create bash', r);
const bash = r.structuredContent.context;
r = await call('code_run', { sandbox: id, context: bash, code: 'V=kept; cd /; pwd' });
r = await call('code_run', { sandbox: id, context: bash, code: 'echo $V $(pwd)' });
check(r.structuredContent?.stdout === 'kept /\n' && r.structuredContent.language === 'bash', 'a bash context keeps variables and cwd', r);
r = await call('code_run', { sandbox: id, context: 'nonesuch', code: '1' });
check(r.isError && /not found/.test(r.content[0].text), 'an unknown context: isError', r);
r = await call('code_run', { sandbox: id, language: 'cobol', code: '1' });
check(r.isError && /no kernel/.test(r.content[0].text), 'an unknown language: isError', r);

// cancellation interrupts the cell; the context lives on
const ac = new AbortController();
const slow = call('code_run', { sandbox: id, code: 'import time\ntime.sleep(30)\ny = 1' }, { signal: ac.signal });
setTimeout(() => ac.abort('test'), 1500);
let err;
try { await slow; } catch (e) { err = e; }
check(err !== undefined, 'a cancelled cell rejects in the client');
r = await call('code_run', { sandbox: id, code: 'x' });
check(r.structuredContent?.text === '21', 'the context answers after the interrupt', r);
await client.close();
check(true, 'closed');
