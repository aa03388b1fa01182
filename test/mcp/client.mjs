// Drives `agsx mcp` with the official MCP TypeScript SDK (Client over
// StdioClientTransport), for test/bats/mcp.bats. Usage:
//   NODE_PATH=<node_modules> node client.mjs IMAGE AGSX [AGSX-ARGS...]
// With MCP_URL (and MCP_TOKEN) in the environment it talks to a running
// `agsx mcp --listen` over StreamableHTTPClientTransport instead, and ends
// its session with DELETE.
// Prints TAP-like lines ("ok - ..."), the kept sandbox's id as "KEEP <id>",
// and exits 1 at the first failed check.
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(path.join(process.env.NODE_PATH, 'x.js'));
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');
const { LATEST_PROTOCOL_VERSION } = require('@modelcontextprotocol/sdk/types.js');

const [image, agsx, ...args] = process.argv.slice(2);
function check(cond, what, detail) {
  if (!cond) {
    console.log(`not ok - ${what}${detail === undefined ? '' : ': ' + JSON.stringify(detail).slice(0, 2000)}`);
    process.exit(1);
  }
  console.log(`ok - ${what}`);
}

const http = process.env.MCP_URL;
const transport = http
  ? new StreamableHTTPClientTransport(new URL(http), { requestInit: { headers: { Authorization: `Bearer ${process.env.MCP_TOKEN}` } } })
  : new StdioClientTransport({ command: agsx, args: [...args, 'mcp'], env: process.env, stderr: 'inherit' });
const client = new Client({ name: 'agsx-test', version: '1.0.0' });
await client.connect(transport);
check(client.getServerVersion()?.name === 'agsx', 'initialize: server info', client.getServerVersion());
if (http)
  check(/^[0-9a-f]{32}$/.test(transport.sessionId ?? ''), 'Streamable HTTP: a session id', transport.sessionId);
else
  check(transport._process !== undefined, 'stdio transport up');

const { tools } = await client.listTools();
const names = tools.map(t => t.name).sort();
const want = ['browser_click', 'browser_navigate', 'browser_screenshot', 'browser_start', 'browser_text', 'browser_type', 'code_context_create', 'code_run', 'exec', 'file_copy_in', 'file_copy_out', 'file_list', 'file_move', 'file_read', 'file_remove', 'file_search', 'file_stat', 'file_write',
  'process_input', 'process_list', 'process_output', 'process_signal', 'process_start', 'sandbox_create', 'sandbox_extend', 'sandbox_fork', 'sandbox_info', 'sandbox_kill', 'sandbox_list', 'sandbox_rollback',
  'snapshot_create', 'snapshot_list'];
check(JSON.stringify(names) === JSON.stringify(want), `tools/list: the ${want.length} tools`, names);
for (const t of tools)
  check(t.annotations?.destructiveHint === ['sandbox_kill', 'sandbox_rollback', 'file_remove', 'file_move', 'process_signal', 'file_copy_out'].includes(t.name),
    `${t.name}: destructiveHint`, t.annotations);
for (const t of tools)
  check(t.inputSchema?.type === 'object' && t.outputSchema?.type === 'object' && t.description, `${t.name}: input and output schemas`);

let err;
const call = (name, a, opts) => client.callTool({ name, arguments: a }, undefined, opts);
const ok = (r, what) => check(!r.isError && r.structuredContent && r.content?.[0]?.type === 'text', what, r);

let r = await call('sandbox_create', { image, timeout: 120, env: { GREETING: 'hi there' } });
ok(r, 'sandbox_create');
const id = r.structuredContent.id;
check(/^[0-9a-f]{32}$/.test(id) && r.structuredContent.network === 'internal', 'an id, network internal', r.structuredContent);

r = await call('exec', { sandbox: id, argv: ['echo', 'hello'] });
ok(r, 'exec argv');
check(r.structuredContent.stdout === 'hello\n' && r.structuredContent.exit_code === 0, 'echo: stdout and exit 0', r.structuredContent);

r = await call('exec', { sandbox: id, command: 'echo "$GREETING" >&2; exit 3' });
ok(r, 'exec command');
check(r.structuredContent.exit_code === 3 && r.structuredContent.stderr === 'hi there\n', 'exit 3, stderr, the sandbox env', r.structuredContent);

r = await call('exec', { sandbox: id, argv: ['sh', '-c', 'pwd; id -u; echo $X'], cwd: '/tmp', user: '1000', env: { X: 'y' } });
check(r.structuredContent?.stdout === '/tmp\n1000\ny\n', 'exec cwd, user, env', r);
r = await call('exec', { sandbox: id, argv: ['pwd'], cwd: 'tmp' });
check(r.isError && /absolute/.test(r.content[0].text), 'a relative cwd: isError', r);
r = await call('exec', { sandbox: id, argv: ['/no/such/program'] });
check(r.isError && /127/.test(r.content[0].text), 'a missing program: isError, 127', r);
r = await call('exec', { sandbox: id, argv: ['cat'], stdin: 'fed\n' });
check(r.structuredContent?.stdout === 'fed\n', 'exec stdin', r);

r = await call('file_write', { sandbox: id, path: '/tmp/dir/a.txt', content: 'file data\n' });
ok(r, 'file_write');
check(r.structuredContent.path === '/tmp/dir/a.txt' && r.structuredContent.size === 10, 'written path and size', r.structuredContent);
r = await call('file_read', { sandbox: id, path: '/tmp/dir/a.txt' });
check(r.structuredContent?.content === 'file data\n', 'file_read gives it back', r);
r = await call('exec', { sandbox: id, argv: ['cat', '/tmp/dir/a.txt'] });
check(r.structuredContent?.stdout === 'file data\n', 'the command sees the file', r);
r = await call('file_read', { sandbox: id, path: '/tmp/nope' });
check(r.isError && /does not exist/.test(r.content[0].text), 'file_read of a missing file: isError', r);
r = await call('file_read', { sandbox: id, path: '/../../../etc/hostname' });
check(!r.isError || /does not exist/.test(r.content[0].text), 'a path above / stays inside the sandbox', r);

// file_list, file_stat, file_search, file_move, file_remove
r = await call('exec', { sandbox: id, command: 'mkdir -p /tmp/dir/sub /tmp/dir/.hid && echo x >/tmp/dir/sub/b.py && echo y >/tmp/dir/c.py && ln -s a.txt /tmp/dir/ln && chmod 640 /tmp/dir/c.py' });
check(r.structuredContent?.exit_code === 0, 'a tree made', r);
r = await call('file_list', { sandbox: id, path: '/tmp/dir' });
ok(r, 'file_list');
const ents = Object.fromEntries(r.structuredContent.entries.map(e => [e.name, e]));
check(JSON.stringify(Object.keys(ents).sort()) === JSON.stringify(['.hid', 'a.txt', 'c.py', 'ln', 'sub']) && r.structuredContent.truncated === false,
  'file_list: one level, hidden entries too', Object.keys(ents));
check(ents['a.txt'].type === 'file' && ents['a.txt'].size === 10 && ents['sub'].type === 'directory' && ents['c.py'].permissions === '-rw-r-----' &&
  ents['ln'].symlink_target === '/tmp/dir/a.txt' && ents['c.py'].path === '/tmp/dir/c.py' && ents['c.py'].modified > 1.7e9,
  'file_list: type, size, permissions, symlink target, path, time', ents);
r = await call('file_list', { sandbox: id, path: '/tmp/dir', depth: 2 });
check(r.structuredContent?.entries.some(e => e.path === '/tmp/dir/sub/b.py'), 'file_list depth 2', r);
r = await call('file_list', { sandbox: id, path: '/tmp/dir/a.txt' });
check(r.isError, 'file_list of a file: isError', r);
r = await call('file_search', { sandbox: id, path: '/tmp', pattern: '*.py' });
check(JSON.stringify(r.structuredContent?.entries.map(e => e.path).sort()) === JSON.stringify(['/tmp/dir/c.py', '/tmp/dir/sub/b.py']), 'file_search *.py', r);
r = await call('file_search', { sandbox: id, path: '/tmp/dir', pattern: 'sub/*.py' });
check(JSON.stringify(r.structuredContent?.entries.map(e => e.path)) === JSON.stringify(['/tmp/dir/sub/b.py']), 'file_search by a path pattern', r);
r = await call('file_stat', { sandbox: id, path: '/tmp/dir/sub' });
check(r.structuredContent?.type === 'directory' && r.structuredContent.path === '/tmp/dir/sub', 'file_stat', r);
r = await call('file_stat', { sandbox: id, path: '/tmp/dir/none' });
check(r.isError && /not|exist/.test(r.content[0].text), 'file_stat of a missing path: isError', r);
r = await call('file_move', { sandbox: id, from: '/tmp/dir/c.py', to: '/tmp/moved/c2.py' });
check(r.structuredContent?.path === '/tmp/moved/c2.py' && r.structuredContent.size === 2, 'file_move, a parent made', r);
r = await call('file_remove', { sandbox: id, path: '/tmp/dir/sub' });
check(r.isError && /confirm: true/.test(r.content[0].text), 'file_remove without confirm: refused', r);
r = await call('file_remove', { sandbox: id, path: '/tmp/dir/sub', confirm: true });
check(r.structuredContent?.removed === true, 'file_remove of a directory', r);
r = await call('exec', { sandbox: id, command: 'ls /tmp/dir; cat /tmp/moved/c2.py' });
check(r.structuredContent?.stdout === 'a.txt\nln\ny\n', 'the sandbox sees the move and the removal', r);
r = await call('file_remove', { sandbox: id, path: '/tmp/dir/sub', confirm: true });
check(r.isError && /not|exist/.test(r.content[0].text), 'file_remove of a missing path: isError', r);
r = await call('file_remove', { sandbox: id, path: '/', confirm: true });
check(r.isError, 'file_remove of /: refused', r);

r = await call('file_copy_in', { sandbox: id, host_path: '/etc/hostname', path: '/tmp' });
check(r.isError && /--allow-host-path DIR/.test(r.content[0].text), 'file_copy_in without --allow-host-path: refused, the flag named', r);

// resources: the session's sandboxes and their files
check(client.getServerCapabilities()?.resources !== undefined, 'the resources capability');
const { resources } = await client.listResources();
check(resources.some(x => x.uri === `agsx://sandbox/${id}` && x.mimeType === 'application/json'), 'resources/list: the sandbox', resources);
const { resourceTemplates } = await client.listResourceTemplates();
check(resourceTemplates.length === 1 && resourceTemplates[0].uriTemplate === 'agsx://sandbox/{sandbox}/files/{+path}', 'resources/templates/list: its files', resourceTemplates);
let rr = await client.readResource({ uri: `agsx://sandbox/${id}` });
check(JSON.parse(rr.contents[0].text).id === id, 'resources/read: the sandbox as JSON', rr);
rr = await client.readResource({ uri: `agsx://sandbox/${id}/files/tmp/dir/a.txt` });
check(rr.contents[0].text === 'file data\n' && rr.contents[0].mimeType === 'text/plain', 'resources/read: a text file', rr);
await call('exec', { sandbox: id, command: 'printf "\\000\\377bin" >"/tmp/dir/b i.bin"' });
rr = await client.readResource({ uri: `agsx://sandbox/${id}/files/tmp/dir/b%20i.bin` });
check(Buffer.from(rr.contents[0].blob ?? '', 'base64').equals(Buffer.from([0, 255, 98, 105, 110])), 'resources/read: a binary file as a blob, a %-escaped name', rr);
rr = await client.readResource({ uri: `agsx://sandbox/${id}/files/tmp/dir` });
check(JSON.parse(rr.contents[0].text).entries.some(e => e.name === 'a.txt'), 'resources/read: a directory', rr);
err = undefined;
try { await client.readResource({ uri: `agsx://sandbox/${id}/files/tmp/none` }); } catch (e) { err = e; }
check(err?.code === -32002, 'resources/read of a missing file: -32002', String(err));
for (const bad of ['tmp/%zz', 'tmp/a%00b', 'tmp/%4']) {
  err = undefined;
  try { await client.readResource({ uri: `agsx://sandbox/${id}/files/${bad}` }); } catch (e) { err = e; }
  check(err?.code === -32602 && /escape/.test(err.message), `resources/read of ${bad}: invalid params`, String(err));
}
err = undefined;
try { await client.readResource({ uri: 'file:///etc/passwd' }); } catch (e) { err = e; }
check(err?.code === -32002, 'resources/read of another scheme: -32002', String(err));
err = undefined;
try { await client.readResource({ uri: 'agsx://sandbox/0123456789abcdef0123456789abcdef' }); } catch (e) { err = e; }
check(err?.code === -32002 && /no sandbox/.test(err.message), 'resources/read of a sandbox not of this session: -32002', String(err));

// sandbox_info, sandbox_extend
r = await call('sandbox_info', { sandbox: id });
ok(r, 'sandbox_info');
check(r.structuredContent.id === id && r.structuredContent.status === 'running' && r.structuredContent.time_left > 60 && r.structuredContent.time_left <= 120 && r.structuredContent.image === 'bb',
  'sandbox_info: status, image, time left', r.structuredContent);
r = await call('sandbox_extend', { sandbox: id, timeout: 600 });
check(r.structuredContent?.time_left > 590 && r.structuredContent.deadline >= Date.now() / 1000 + 590, 'sandbox_extend: the new deadline', r);
err = undefined;
try { await call('sandbox_extend', { sandbox: id, timeout: 86401 }); } catch (e) { err = e; }
check(err?.code === -32602, 'sandbox_extend past 24 h: invalid params', String(err));
r = await call('exec', { sandbox: id, command: 'yes 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV | head -c 52428800; echo done >&2' }, { timeout: 120000 });
ok(r, 'exec of 50 MiB of output');
check(r.structuredContent.truncated === true && r.structuredContent.stdout_truncated === true && r.structuredContent.stdout.length === 1 << 20 && r.structuredContent.stderr === 'done\n' && r.structuredContent.exit_code === 0, 'stdout capped at 1 MiB, truncated: true', { ...r.structuredContent, stdout: r.structuredContent.stdout.length });

r = await call('exec', { sandbox: id, argv: ['true'] });
check(r.structuredContent?.exit_code === 0, 'the server survives it', r);

r = await call('exec', { sandbox: id, argv: ['sleep', '30'], timeout: 1 });
check(r.structuredContent?.timed_out === true && r.structuredContent.exit_code === 137, 'exec timeout kills the command', r);

r = await call('sandbox_kill', { sandbox: id });
check(r.isError && /confirm: true/.test(r.content[0].text), 'sandbox_kill without confirm: refused', r);

r = await call('sandbox_create', { image, network: 'public' });
check(r.isError && /not allowed/.test(r.content[0].text), 'network public refused by default', r);

err = undefined;
try { await call('exec', { sandbox: id, argv: 'echo' }); } catch (e) { err = e; }
check(err?.code === -32602, 'a wrong argument type: invalid params', String(err));
err = undefined;
try { await call('no_such_tool', {}); } catch (e) { err = e; }
check(err?.code === -32602, 'an unknown tool: invalid params', String(err));

// Cancellation: the SDK sends notifications/cancelled on abort.
const ac = new AbortController();
const slow = call('exec', { sandbox: id, argv: ['sleep', '37'] }, { signal: ac.signal });
setTimeout(() => ac.abort('test'), 1000);
err = undefined;
try { await slow; } catch (e) { err = e; }
check(err !== undefined, 'a cancelled exec rejects in the client');
let gone = false;
for (let i = 0; i < 50 && !gone; i++) {
  r = await call('exec', { sandbox: id, command: 'ps -o args | grep -c "^sleep 37" || true' });
  gone = r.structuredContent?.stdout === '0\n';
  if (!gone) await new Promise(res => setTimeout(res, 100));
}
check(gone, 'and its process was killed in the sandbox', r);
await client.ping();
check(true, 'ping after the cancellation');

// progress notifications on a long call, when the client asks for them
const progress = [];
r = await call('exec', { sandbox: id, command: 'sleep 3.5; echo slept' }, { onprogress: p => progress.push(p) });
check(r.structuredContent?.stdout === 'slept\n', 'a long exec with a progress token', r);
check(progress.length >= 2 && progress.length <= 4 && progress.every((p, i) => i === 0 || p.progress > progress[i - 1].progress) &&
  /running for \d+s/.test(progress[0].message), 'notifications/progress about once a second, growing', progress);
progress.length = 0;
r = await call('process_start', { sandbox: id, argv: ['sleep', '2.5'] });
r = await call('process_output', { sandbox: id, pid: r.structuredContent.pid, wait: 10 }, { onprogress: p => progress.push(p) });
check(r.structuredContent?.running === false && progress.length >= 1, 'process_output wait sends them too', { r, progress });

// background processes: start, output from an offset, input, signal, list
r = await call('process_start', { sandbox: id, command: 'i=0; while [ $i -lt 3 ]; do echo line$i; i=$((i+1)); sleep 0.2; done; echo err >&2; exit 4' });
ok(r, 'process_start');
const bg = r.structuredContent.pid;
check(Number.isInteger(bg) && r.structuredContent.running === true && r.structuredContent.argv[0] === '/bin/sh', 'a pid, running', r.structuredContent);
r = await call('process_output', { sandbox: id, pid: bg, wait: 20 });
ok(r, 'process_output');
check(r.structuredContent.running === false && r.structuredContent.exit_code === 4 && r.structuredContent.stdout === 'line0\nline1\nline2\n' &&
  r.structuredContent.stderr === 'err\n' && r.structuredContent.more === false && r.structuredContent.lost === 0, 'process_output wait: its output and exit code', r.structuredContent);
r = await call('process_output', { sandbox: id, pid: bg, offset: r.structuredContent.next_offset });
check(r.structuredContent?.stdout === '' && r.structuredContent.stderr === '' && r.structuredContent.running === false, 'read on from next_offset: nothing new', r);
r = await call('process_start', { sandbox: id, argv: ['cat'], stdin: true });
const cat = r.structuredContent?.pid;
r = await call('process_input', { sandbox: id, pid: cat, data: 'typed\n' });
check(r.structuredContent?.written === 6, 'process_input', r);
let seen = '', off = 0;
for (let i = 0; i < 50 && seen !== 'typed\n'; i++) {
  r = await call('process_output', { sandbox: id, pid: cat, offset: off, wait: 0 });
  seen += r.structuredContent.stdout;
  off = r.structuredContent.next_offset;
  check(r.structuredContent.running === true || seen === 'typed\n', 'cat runs while its stdin is open', r.structuredContent);
  if (seen !== 'typed\n') await new Promise(res => setTimeout(res, 100));
}
check(seen === 'typed\n', 'the process echoed its input', seen);
r = await call('process_input', { sandbox: id, pid: cat, close: true });
check(r.structuredContent?.closed === true, 'process_input close', r);
r = await call('process_output', { sandbox: id, pid: cat, offset: off, wait: 20 });
check(r.structuredContent?.running === false && r.structuredContent.exit_code === 0, 'cat ends at end of file', r);
r = await call('process_input', { sandbox: id, pid: bg, data: 'x' });
check(r.isError, 'process_input to a process without stdin: isError', r);
r = await call('process_start', { sandbox: id, argv: ['sleep', '1000'] });
const sl = r.structuredContent?.pid;
r = await call('process_list', { sandbox: id });
check(r.structuredContent?.processes.some(p => p.pid === sl && p.running) && r.structuredContent.processes.some(p => p.pid === bg && p.exit_code === 4), 'process_list: running and ended', r);
r = await call('process_signal', { sandbox: id, pid: sl, signal: 'bogus' });
check(r.isError && /unknown signal/.test(r.content[0].text), 'an unknown signal: isError', r);
r = await call('process_signal', { sandbox: id, pid: sl, signal: 'SIGKILL' });
check(r.structuredContent?.signal === 9, 'process_signal KILL', r);
r = await call('process_output', { sandbox: id, pid: sl, wait: 20 });
check(r.structuredContent?.running === false && r.structuredContent.exit_code === 137, 'killed: 137', r);
r = await call('process_signal', { sandbox: id, pid: sl });
check(r.isError && /ended/.test(r.content[0].text), 'signal to an ended process: isError', r);
r = await call('process_output', { sandbox: id, pid: 4000000 });
check(r.isError && /process_start/.test(r.content[0].text), 'no such process: isError', r);
r = await call('process_start', { sandbox: id, command: 'head -c 3000000 /dev/zero | tr "\\0" a' });
const big = r.structuredContent?.pid;
let total = 0, reads = 0, mores = 0;
off = 0;
for (;;) {
  r = await call('process_output', { sandbox: id, pid: big, offset: off, wait: 20 });
  check(!r.isError && r.structuredContent.stdout.length <= 1 << 20, 'at most 1 MiB an answer', { ...r.structuredContent, stdout: r.structuredContent?.stdout?.length });
  total += r.structuredContent.stdout.length;
  off = r.structuredContent.next_offset;
  reads++;
  if (r.structuredContent.more) mores++;
  if (!r.structuredContent.running && !r.structuredContent.more) break;
  check(reads < 20, 'bounded reads');
}
check(total === 3000000 && reads >= 3 && mores >= 2, `3 MB of output in ${reads} answers from next_offset`, { total, reads, mores });

// snapshot, break something, roll back; fork
r = await call('exec', { sandbox: id, command: 'mkdir -p /work && echo good >/work/state && echo run1 >/work/run' });
check(r.structuredContent?.exit_code === 0, 'a state to keep', r);
r = await call('snapshot_create', { sandbox: id, name: 'before' });
ok(r, 'snapshot_create');
check(r.structuredContent.name === 'before' && r.structuredContent.files >= 2, 'the snapshot: its name and files', r.structuredContent);
r = await call('snapshot_create', { sandbox: id, name: 'before' });
check(r.isError && /before/.test(r.content[0].text), 'a snapshot name taken: isError', r);
r = await call('snapshot_create', { sandbox: id, name: '../x' });
check(r.isError && /invalid snapshot name/.test(r.content[0].text), 'a bad snapshot name: isError', r);
r = await call('exec', { sandbox: id, command: 'rm -rf /work; echo broken >/broken; sleep 1000 >/dev/null 2>&1 & echo bg' });
check(r.structuredContent?.stdout === 'bg\n', 'something broken, a process left running', r);
r = await call('snapshot_list', { sandbox: id });
check(JSON.stringify(r.structuredContent?.snapshots.map(x => x.name)) === '["before"]', 'snapshot_list', r);
r = await call('sandbox_rollback', { sandbox: id, snapshot: 'before' });
check(r.isError && /confirm: true/.test(r.content[0].text), 'sandbox_rollback without confirm: refused', r);
r = await call('sandbox_rollback', { sandbox: id, snapshot: 'nope', confirm: true });
check(r.isError && /snapshot_list/.test(r.content[0].text), 'sandbox_rollback to no such snapshot: isError', r);
r = await call('sandbox_rollback', { sandbox: id, snapshot: 'before', confirm: true });
check(r.structuredContent?.rolled_back === true && r.structuredContent.id === id, 'sandbox_rollback', r);
r = await call('exec', { sandbox: id, command: 'cat /work/state; ls /broken 2>&1 >/dev/null | wc -l; ps -o args | grep -c "^sleep 1000" || true' });
check(r.structuredContent?.stdout === 'good\n1\n0\n', 'rolled back: the files as they were, the process gone', r);
r = await call('exec', { sandbox: id, command: 'echo forked-from >/work/run' });
r = await call('sandbox_fork', { sandbox: id, timeout: 60 });
ok(r, 'sandbox_fork');
const fid = r.structuredContent.id;
check(fid !== id && /^[0-9a-f]{32}$/.test(fid) && r.structuredContent.image === 'bb', 'the fork: a sandbox of its own', r.structuredContent);
r = await call('exec', { sandbox: fid, command: 'cat /work/state /work/run; echo fork-only >/work/run' });
check(r.structuredContent?.stdout === 'good\nforked-from\n', 'the fork has its source\'s files', r);
r = await call('exec', { sandbox: id, command: 'cat /work/run' });
check(r.structuredContent?.stdout === 'forked-from\n', 'the source does not see the fork\'s change', r);
r = await call('sandbox_list', {});
check(r.structuredContent?.sandboxes?.length === 2, 'sandbox_list: the fork is the session\'s', r);
r = await call('sandbox_kill', { sandbox: fid, confirm: true });
check(r.structuredContent?.killed === true, 'the fork killed', r);

r = await call('sandbox_create', { image, keep: true, timeout: 120, memory: '64m', cpus: 0.5 });
ok(r, 'sandbox_create keep');
console.log(`KEEP ${r.structuredContent.id}`);
r = await call('sandbox_list', {});
check(r.structuredContent?.sandboxes?.length === 2, 'sandbox_list: both', r);

r = await call('sandbox_kill', { sandbox: id, confirm: true });
check(!r.isError && r.structuredContent.killed, 'sandbox_kill with confirm', r);
r = await call('exec', { sandbox: id, argv: ['true'] });
check(r.isError && /not running|no sandbox/.test(r.content[0].text), 'exec in a killed sandbox: isError', r);

r = await call('sandbox_create', { image, timeout: 120 });
ok(r, 'one more, to be stopped at the end of the session');
console.log(`ENDS ${r.structuredContent.id}`);
console.log(`PROTOCOL ${LATEST_PROTOCOL_VERSION}`);
if (http)
  await transport.terminateSession(); /* DELETE: the session's end */
await client.close();
check(true, 'closed');
