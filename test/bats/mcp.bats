#!/usr/bin/env bats
# test-runner: parallel
# agsx mcp: MCP over stdio. The official TypeScript SDK's client
# (@modelcontextprotocol/sdk, installed by test/mcp/npm-install into a
# cache; those tests skip when npm cannot reach its registry) drives the
# tools through test/mcp/client.mjs; raw lines on stdin check the JSON-RPC
# edges. Every test has its own store and state; the default teardown
# checks that no sandbox, process, cgroup or mount is left.

load helpers

bats_require_minimum_version 1.5.0

setup_file() {
  busybox_setup_file
  export MCP_NODE=
  local mods
  if command -v node >/dev/null && mods=$("$AGSX_SRCDIR/test/mcp/npm-install" 2>/dev/null); then
    MCP_NODE=$mods
  fi
}

# A server a failed test left: stopped (its sessions end) before the
# checks for leftovers.
teardown() {
  if [ -n "${MCP_PID:-}" ] && kill -TERM "$MCP_PID" 2>/dev/null; then
    local i
    for i in $(seq 100); do kill -0 "$MCP_PID" 2>/dev/null || break; sleep 0.1; done
  fi
  sandbox_teardown
}

setup() {
  common_setup
  AX_TIMEOUT=60
  ax image load --tag bb "$BB" >/dev/null
}

# mcp_lines LINE...: each LINE on agsx mcp's stdin, then EOF; the answers
# in $output.
mcp_lines() {
  AX_CMD="agsx mcp <<< $*"
  run --separate-stderr ax mcp < <(printf '%s\n' "$@")
}

# answer ID: the answer with that id (JSON text) from $output, as JSON.
answer() {
  python3 -c '
import json, sys
want = json.loads(sys.argv[1])
for line in sys.stdin:
    m = json.loads(line)
    if m.get("id") == want:
        print(json.dumps(m, sort_keys=True))
        break
else:
    sys.exit(1)' "$1" <<<"$output"
}

INIT='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bats","version":"1"}}}'

@test "mcp: the SDK client: tools, schemas, exec, files, the 1 MiB cap, confirm, cancel, the session's end" {
  [ -n "$MCP_NODE" ] || skip "the npm @modelcontextprotocol/sdk is not installed (npm or its registry unreachable)"
  run timeout --kill-after=5 240 env NODE_PATH="$MCP_NODE" \
    node "$AGSX_SRCDIR/test/mcp/client.mjs" bb "$AGSX" --root "$ROOT" --state "$STATE"
  echo "$output"
  [ "$status" -eq 0 ]
  ! grep -q '^not ok' <<<"$output" || false
  # (the server's stderr is here too: no sanitizer report in the ASan build)
  ! grep -qE 'AddressSanitizer|LeakSanitizer|runtime error' <<<"$output" || false
  grep -q '^ok - closed' <<<"$output"
  keep=$(awk '$1 == "KEEP" {print $2}' <<<"$output")
  ends=$(awk '$1 == "ENDS" {print $2}' <<<"$output")
  [ -n "$keep" ]
  [ -n "$ends" ]
  echo "$keep" "$ends" >>"$T/ids"
  # The session ended with stdin: its sandboxes are stopped, the keep one runs on.
  gone() { [ "$(ax ls -q | cut -c1-12)" = "${keep:0:12}" ]; }
  poll 100 gone
  ax exec "$keep" true
  # its limits (memory: "64m", cpus: 0.5) are the sandbox's
  [ "$(rec "$keep" memory)" = 67108864 ]
  [ "$(rec "$keep" cpu_quota_us)" -gt 0 ]
  ax kill "$keep"
  # The snapshot's, the rollback's and the fork's layers go with gc once
  # no sandbox uses them (no grace here).
  none() { [ -z "$(ax ls -q)" ]; }
  poll 100 none
  [ -n "$(ls -A "$STATE/layers")" ]
  AGSX_GC_MIN_AGE=0 ax gc >/dev/null
  [ -z "$(ls -A "$STATE/layers" 2>/dev/null)" ] || { ls -la "$STATE/layers"; false; }
}

@test "mcp: code_run: python state across cells, a traceback, a plot as a PNG, bash, timeout, cancel" {
  [ -n "$MCP_NODE" ] || skip "the npm @modelcontextprotocol/sdk is not installed (npm or its registry unreachable)"
  /usr/bin/python3 -c 'import ipykernel, jupyter_client, matplotlib' 2>/dev/null ||
    skip "python3-ipykernel, jupyter-client or matplotlib missing on the host (the host image's kernel)"
  run timeout --kill-after=5 300 env NODE_PATH="$MCP_NODE" \
    node "$AGSX_SRCDIR/test/mcp/code.mjs" "$AGSX" --root "$ROOT" --state "$STATE"
  echo "$output"
  [ "$status" -eq 0 ]
  ! grep -q '^not ok' <<<"$output" || false
  ! grep -qE 'AddressSanitizer|LeakSanitizer|runtime error' <<<"$output" || false
  grep -q '^ok - closed' <<<"$output"
  none() { [ -z "$(ax ls -q)" ]; }
  poll 100 none
}

@test "mcp: a bad line, an unknown method, an invalid request: JSON-RPC errors, and the server goes on" {
  mcp_lines "$INIT" '{"jsonrpc":"2.0","method":"notifications/initialized"}' \
    '{"jsonrpc":"2.0","id":2,' \
    '{"jsonrpc":"2.0","id":3,"method":"no/such"}' \
    '{"jsonrpc":"1.0","id":4,"method":"ping"}' \
    '[{"jsonrpc":"2.0","id":5,"method":"ping"}]' \
    '{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"nope","arguments":{}}}' \
    '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"exec","arguments":{"sandbox":1}}}' \
    '{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"exec","arguments":{"sandbox":"x","bogus":1}}}' \
    '' \
    '{"jsonrpc":"2.0","id":"last","method":"ping"}'
  [ "$status" -eq 0 ]
  # parse error: id null, answered in order
  [ "$(sed -n 2p <<<"$output" | python3 -c 'import json,sys; m=json.load(sys.stdin); print(m["id"], m["error"]["code"])')" = "None -32700" ]
  answer 3 | grep -q '"code": -32601'
  answer 4 | grep -q '"code": -32600'
  answer 6 | grep -q '"code": -32602'
  answer 6 | grep -q 'unknown tool'
  answer 7 | grep -q '"code": -32602'
  answer 7 | grep -q 'must be a string'
  answer 8 | grep -q 'no argument \\"bogus\\"'
  [ "$(answer '"last"')" = '{"id": "last", "jsonrpc": "2.0", "result": {}}' ]
  # the batch: one invalid request, id null
  [ "$(grep -c '"code":-32600' <<<"$output")" -eq 2 ]
}

@test "mcp: a line over 8 MiB is a parse error, skipped to its newline" {
  AX_CMD="agsx mcp <<< (9 MiB line, ping)"
  run --separate-stderr ax mcp < <(python3 -c '
import sys
sys.stdout.write("{\"x\":\"" + "a" * (9 << 20) + "\"}\n")
sys.stdout.write("{\"jsonrpc\":\"2.0\",\"id\":\"after\",\"method\":\"ping\"}\n")')
  [ "$status" -eq 0 ]
  [ "$(sed -n 1p <<<"$output")" = '{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: a message over 8 MiB"}}' ]
  [ "$(sed -n 2p <<<"$output")" = '{"jsonrpc":"2.0","id":"after","result":{}}' ]
  [ "$(wc -l <<<"$output")" -eq 2 ]
}

@test "mcp: protocol versions: the client's when known, else the newest" {
  mcp_lines "$INIT" \
    '{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2024-11-05"}}' \
    '{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"1999-01-01"}}' \
    '{"jsonrpc":"2.0","id":4,"method":"initialize","params":{}}'
  [ "$status" -eq 0 ]
  answer 1 | grep -q '"protocolVersion": "2025-11-25"'
  answer 1 | grep -q '"tools": {"listChanged": false}'
  answer 2 | grep -q '"protocolVersion": "2024-11-05"'
  answer 3 | grep -q '"protocolVersion": "2025-11-25"'
  answer 4 | grep -q '"code": -32602'
}

CREATE='{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sandbox_create","arguments":{"image":"bb"}}}'

@test "mcp: only the session's sandboxes are reachable; they stop at EOF; a bad image is a tool error" {
  other=$(rund bb sleep 60)
  mcp_lines "$INIT" "$CREATE" \
    "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"exec\",\"arguments\":{\"sandbox\":\"$other\",\"argv\":[\"true\"]}}}" \
    '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"sandbox_create","arguments":{"image":"no-such-image"}}}'
  [ "$status" -eq 0 ]
  answer 2 | grep -q '"isError": false'
  answer 2 | python3 -c 'import json,sys; print(json.load(sys.stdin)["result"]["structuredContent"]["id"])' >>"$T/ids"
  answer 3 | grep -q '"isError": true'
  answer 3 | grep -q 'no sandbox'
  answer 4 | grep -q '"isError": true'
  answer 4 | grep -q 'no-such-image'
  only_other() { [ "$(ax ls -q | cut -c1-12)" = "${other:0:12}" ]; }
  poll 100 only_other || { echo "other $other; ls: $(ax ls)"; false; }
  ax kill "$other"
}

@test "mcp: --max-sandboxes N: the N+1th create is refused" {
  AX_CMD="agsx mcp --max-sandboxes 1"
  run --separate-stderr ax mcp --max-sandboxes 1 < <(printf '%s\n' "$INIT" "$CREATE" "${CREATE/\"id\":2/\"id\":3}")
  [ "$status" -eq 0 ]
  answer 2 | grep -q '"isError": false'
  answer 2 | python3 -c 'import json,sys; print(json.load(sys.stdin)["result"]["structuredContent"]["id"])' >>"$T/ids"
  answer 3 | grep -q '"isError": true'
  answer 3 | grep -q 'maximum'
  none() { [ -z "$(ax ls -q)" ]; }
  poll 100 none
}

@test "mcp: --max-sandboxes N counts forks: a fork past it is refused" {
  local id line fork
  coproc MCP { ax mcp --max-sandboxes 1 2>"$T/mcp.err"; }
  printf '%s\n%s\n' "$INIT" "$CREATE" >&"${MCP[1]}"
  for _ in 1 2; do IFS= read -r -t 60 line <&"${MCP[0]}"; done
  id=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["result"]["structuredContent"]["id"])' "$line")
  echo "$id" >>"$T/ids"
  fork='{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sandbox_fork","arguments":{"sandbox":"'$id'"}}}'
  printf '%s\n' "$fork" >&"${MCP[1]}"
  IFS= read -r -t 60 line <&"${MCP[0]}"
  echo "$line"
  [[ $line == *'"isError":true'* && $line == *maximum* && $line == *max-sandboxes* ]]
  [ "$(ax ls -q | wc -l)" -eq 1 ]
  exec {MCP[1]}>&-
  wait "$MCP_PID"
  none() { [ -z "$(ax ls -q)" ]; }
  poll 100 none
}

# call ID NAME ARGS: a tools/call on the coprocess MCP; its answer in $line.
mcp_call() {
  printf '{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"%s","arguments":%s}}\n' \
    "$1" "$2" "$3" >&"${MCP[1]}"
  IFS= read -r -t 60 line <&"${MCP[0]}"
  echo "# $2: $line"
}

@test "mcp --allow-host-path: copies only below it; .., symlinks and other paths stay out" {
  local line id A="$T/allowed"
  mkdir -p "$A/tree/sub" "$T/secret"
  echo in >"$A/in.txt"
  echo deep >"$A/tree/sub/f"
  echo secret >"$T/secret/s"
  ln -s "$T/secret" "$A/esc"
  ln -s / "$A/root"
  coproc MCP { ax mcp --allow-host-path "$A" 2>"$T/mcp.err"; }
  printf '%s\n%s\n' "$INIT" "$CREATE" >&"${MCP[1]}"
  for _ in 1 2; do IFS= read -r -t 60 line <&"${MCP[0]}"; done
  id=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["result"]["structuredContent"]["id"])' "$line")
  echo "$id" >>"$T/ids"
  mcp_call 3 file_copy_in '{"sandbox":"'$id'","host_path":"'$A'/in.txt","path":"/tmp/"}'
  [[ $line == *'"copied":true'* ]]
  mcp_call 4 file_copy_in '{"sandbox":"'$id'","host_path":"'$A'/tree","path":"/tmp/t"}'
  [[ $line == *'"copied":true'* ]]
  [ "$(ax exec "$id" cat /tmp/in.txt /tmp/t/sub/f)" = "$(printf 'in\ndeep')" ]
  ax exec "$id" sh -c 'mkdir -p /tmp/o && echo made >/tmp/o/m && ln -s /etc /tmp/o/l'
  mcp_call 5 file_copy_out '{"sandbox":"'$id'","path":"/tmp/o","host_path":"'$A'/"}'
  [[ $line == *'"copied":true'* ]]
  [ "$(cat "$A/o/m")" = made ]
  [ "$(readlink "$A/o/l")" = /etc ]
  # outside the allowed directory, .., symlinks leading out: refused or kept inside
  mcp_call 6 file_copy_in '{"sandbox":"'$id'","host_path":"'$T'/secret/s","path":"/tmp/"}'
  [[ $line == *'"isError":true'* && $line == *"not below"* ]]
  mcp_call 7 file_copy_in '{"sandbox":"'$id'","host_path":"'$A'/../secret/s","path":"/tmp/"}'
  [[ $line == *'"isError":true'* && $line == *'`..` is not allowed'* ]]
  mcp_call 8 file_copy_in '{"sandbox":"'$id'","host_path":"'$A'/esc/s","path":"/tmp/"}'
  [[ $line == *'"isError":true'* ]]
  mcp_call 9 file_copy_in '{"sandbox":"'$id'","host_path":"'$A'/root/etc/hostname","path":"/tmp/"}'
  [[ $line == *'"isError":true'* ]]
  mcp_call 10 file_copy_in '{"sandbox":"'$id'","host_path":"'$A'/o/l/passwd","path":"/tmp/"}'
  [[ $line == *'"isError":true'* ]]
  run ax exec "$id" ls /tmp
  [[ $output != *secret* && $output != *hostname* && $output != *passwd* && $output != *" s"* ]]
  # out through the symlinks the sandbox planted: they resolve inside $A
  mcp_call 11 file_copy_out '{"sandbox":"'$id'","path":"/tmp/o/m","host_path":"'$A'/o/l/x"}'
  [[ $line == *'"isError":true'* ]]
  [ ! -e /etc/x ]
  mcp_call 12 file_copy_out '{"sandbox":"'$id'","path":"/tmp/o/m","host_path":"'$A'/esc/planted"}'
  [[ $line == *'"isError":true'* ]]
  [ ! -e "$T/secret/planted" ]
  mcp_call 13 file_copy_out '{"sandbox":"'$id'","path":"/tmp/o/m","host_path":"/tmp/agsx-mcp-out"}'
  [[ $line == *'"isError":true'* && $line == *"not below"* ]]
  [ ! -e /tmp/agsx-mcp-out ]
  exec {MCP[1]}>&-
  wait "$MCP_PID"
  none() { [ -z "$(ax ls -q)" ]; }
  poll 100 none
  # bad flags
  run_ax mcp --allow-host-path /
  [ "$status" -eq 125 ]
  [[ $output == *"whole host"* ]]
  run_ax mcp --allow-host-path "$A/in.txt"
  [ "$status" -eq 125 ]
  [[ $output == *"not a directory"* ]]
  run_ax mcp --allow-host-path "$T/none"
  [ "$status" -eq 125 ]
  [[ $output == *"No such file"* ]]
}

@test "mcp: sandbox_create pool: a parked sandbox claimed, again after the refill; misfits refused" {
  local line id parked second
  ax pool create pm --image bb --size 1 >/dev/null
  for _ in $(seq 300); do
    parked=$(ls "$STATE/pools/pm/parked" 2>/dev/null | grep -xE '[0-9a-f]{32}' || true)
    [ -n "$parked" ] && break
    sleep 0.1
  done
  [ -n "$parked" ]
  coproc MCP { ax mcp 2>"$T/mcp.err"; }
  printf '%s\n' "$INIT" >&"${MCP[1]}"
  IFS= read -r -t 60 line <&"${MCP[0]}"
  mcp_call 2 sandbox_create '{"pool":"pm","env":{"A":"b"}}'
  id=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["result"]["structuredContent"]["id"])' "$line")
  echo "$id" >>"$T/ids"
  [ "$id" = "$parked" ]
  [[ $line == *'"pool":"pm"'* && $line == *'"image":"bb"'* ]]
  [ "$(ax exec "$id" sh -c 'echo $A')" = b ]
  [ "$(rec "$id" labels | grep -c mcp.session)" -ge 1 ] || grep -q mcp.session "$STATE/$id/state.json"
  mcp_call 3 sandbox_create '{"pool":"pm"}'
  [[ $line == *'"isError":false'* ]]
  second=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["result"]["structuredContent"]["id"])' "$line")
  echo "$second" >>"$T/ids"
  mcp_call 4 sandbox_create '{"pool":"pm","memory":"64m"}'
  [[ $line == *'"isError":true'* && $line == *"pool's limits"* ]]
  mcp_call 5 sandbox_create '{"pool":"pm","image":"other"}'
  [[ $line == *'"isError":true'* && $line == *"holds image"* ]]
  mcp_call 6 sandbox_create '{"pool":"nope"}'
  [[ $line == *'"isError":true'* && $line == *"no such pool"* ]]
  mcp_call 7 sandbox_create '{}'
  [[ $line == *'"isError":true'* && $line == *"give image"* ]]
  exec {MCP[1]}>&-
  wait "$MCP_PID"
  ax pool rm pm >/dev/null
  none() { [ -z "$(ax ls -q)" ]; }
  poll 100 none
}

@test "mcp --help states the safe defaults agsx-mcp(1) gives" {
  run_ax mcp --help
  [ "$status" -eq 0 ]
  local w
  for w in "--max-sandboxes running sandboxes (8, forks and browsers included)" "only the internal network" "30 min" "up to" "24 h" \
    "stops when the session ends" "1 MiB" "No host path"; do
    [[ $output == *"$w"* ]] || { echo "# --help lacks: $w" >&3; false; }
  done
  grep -q "SAFE DEFAULTS" "$AGSX_SRCDIR/man/agsx-mcp.1"
}

@test "mcp: bad flags are refused" {
  run_ax mcp --max-sandboxes 0
  [ "$status" -eq 125 ]
  [[ $output == *"invalid --max-sandboxes"* ]]
  run_ax mcp --network bogus
  [ "$status" -eq 125 ]
  run_ax mcp extra
  [ "$status" -eq 125 ]
  run_ax mcp --listen 192.0.2.1:8931
  [ "$status" -eq 125 ]
  [[ $output == *"not a loopback address"* ]]
  run_ax mcp --listen nonsense
  [ "$status" -eq 125 ]
  AGSX_MCP_TOKEN=short run_ax mcp --listen 127.0.0.1:9
  [ "$status" -eq 125 ]
  [[ $output == *"AGSX_MCP_TOKEN must be 8 to 256"* ]]
}

# mcp_http_start: agsx mcp --listen on a free loopback port, token $TOK;
# $MU is its endpoint.
mcp_http_start() {
  local port i
  port=$(free_port)
  MU=http://127.0.0.1:$port/mcp
  TOK=test-token-$RANDOM$RANDOM
  AGSX_MCP_TOKEN=$TOK "$AGSX" --root "$ROOT" --state "$STATE" mcp --listen "127.0.0.1:$port" \
    "$@" >>"$T/mcp.log" 2>&1 &
  MCP_PID=$!
  for i in $(seq 100); do
    grep -q 'listening on' "$T/mcp.log" && return 0
    kill -0 "$MCP_PID" 2>/dev/null || break
    sleep 0.05
  done
  cat "$T/mcp.log" >&3
  return 1
}

# mcp_http_stop: SIGTERM, and the server is gone in 30 s.
mcp_http_stop() {
  kill -TERM "$MCP_PID"
  local i
  for i in $(seq 300); do
    kill -0 "$MCP_PID" 2>/dev/null || break
    sleep 0.1
  done
  ! kill -0 "$MCP_PID" 2>/dev/null || { kill -9 "$MCP_PID"; echo "# mcp --listen did not stop" >&3; false; }
  wait "$MCP_PID" || { echo "# mcp --listen exited $?" >&3; false; }
}

# hpost [CURL-ARGS...] BODY: a JSON POST to $MU with the token (or $AUTH),
# accepting JSON and SSE (or $ACC); prints the headers and the body.
hpost() {
  local body=${!#}
  curl -s -i -m 30 -X POST -H "Authorization: Bearer ${AUTH-$TOK}" -H 'Content-Type: application/json' \
    -H "Accept: ${ACC-application/json, text/event-stream}" "${@:1:$#-1}" --data-binary "$body" "$MU"
}
hstatus() { head -1 <<<"$1" | awk '{print $2}'; }

@test "mcp --listen: the SDK client over Streamable HTTP: the same tools and checks; DELETE ends the session" {
  [ -n "$MCP_NODE" ] || skip "the npm @modelcontextprotocol/sdk is not installed (npm or its registry unreachable)"
  mcp_http_start
  run timeout --kill-after=5 240 env NODE_PATH="$MCP_NODE" MCP_URL="$MU" MCP_TOKEN="$TOK" \
    node "$AGSX_SRCDIR/test/mcp/client.mjs" bb "$AGSX"
  echo "$output"
  [ "$status" -eq 0 ]
  ! grep -q '^not ok' <<<"$output" || false
  grep -q '^ok - Streamable HTTP: a session id' <<<"$output"
  grep -q '^ok - notifications/progress about once a second' <<<"$output"
  grep -q '^ok - closed' <<<"$output"
  keep=$(awk '$1 == "KEEP" {print $2}' <<<"$output")
  [ -n "$keep" ]
  echo "$keep" >>"$T/ids"
  # DELETE ended the session: its sandboxes are stopped, the keep one runs
  # on, and the server serves on.
  gone() { [ "$(ax ls -q | cut -c1-12)" = "${keep:0:12}" ]; }
  poll 100 gone || { ax ls; cat "$T/mcp.log"; false; }
  kill -0 "$MCP_PID"
  ax exec "$keep" true
  ax kill "$keep"
  mcp_http_stop
  none() { [ -z "$(ax ls -q)" ]; }
  poll 100 none
  AGSX_GC_MIN_AGE=0 ax gc >/dev/null
  ! grep -qE 'AddressSanitizer|LeakSanitizer|runtime error' "$T/mcp.log" || false
}

@test "mcp --listen: token, Host, Origin, sessions, methods, media types; SIGTERM ends every session" {
  mcp_http_start
  local init='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bats","version":"1"}}}'
  # No token, a wrong one: 401 with a JSON-RPC error, nothing started.
  run curl -s -i -X POST -H 'Content-Type: application/json' -H 'Accept: application/json' -d "$init" "$MU"
  [ "$(hstatus "$output")" = 401 ]
  [[ $output == *"WWW-Authenticate: Bearer"* && $output == *'"code":-32600'* ]]
  AUTH=x$TOK run hpost "$init"
  [ "$(hstatus "$output")" = 401 ]
  # A rebinding page's Host or Origin: 403.
  run hpost -H 'Host: evil.example:80' "$init"
  [ "$(hstatus "$output")" = 403 ]
  run hpost -H 'Origin: http://evil.example' "$init"
  [ "$(hstatus "$output")" = 403 ]
  ACC=application/json run hpost -H 'Origin: http://localhost:1234' "$init"
  [ "$(hstatus "$output")" = 200 ]
  # A plain JSON answer when the client takes only JSON, and the session id.
  [[ $output == *"Content-Type: application/json"* && $output == *'"serverInfo":{"name":"agsx"'* ]]
  sid=$(grep -i '^Mcp-Session-Id:' <<<"$output" | awk '{print $2}' | tr -d '\r')
  [[ $sid =~ ^[0-9a-f]{32}$ ]]
  # Without a session, with an unknown one, a bad protocol version.
  run hpost '{"jsonrpc":"2.0","id":2,"method":"tools/list"}'
  [ "$(hstatus "$output")" = 400 ]
  [[ $output == *"Mcp-Session-Id header is required"* ]]
  run hpost -H "Mcp-Session-Id: 0123456789abcdef0123456789abcdef" '{"jsonrpc":"2.0","id":2,"method":"tools/list"}'
  [ "$(hstatus "$output")" = 404 ]
  run hpost -H "Mcp-Session-Id: $sid" -H 'MCP-Protocol-Version: 1999-01-01' '{"jsonrpc":"2.0","id":2,"method":"tools/list"}'
  [ "$(hstatus "$output")" = 400 ]
  # Media types, methods, paths, bad JSON, a batch.
  ACC=text/html run hpost -H "Mcp-Session-Id: $sid" '{"jsonrpc":"2.0","id":2,"method":"tools/list"}'
  [ "$(hstatus "$output")" = 406 ]
  run curl -s -i -H "Authorization: Bearer $TOK" -H "Mcp-Session-Id: $sid" -H 'Content-Type: text/plain' \
    -H 'Accept: application/json' -d '{"jsonrpc":"2.0","id":2,"method":"tools/list"}' "$MU"
  [ "$(hstatus "$output")" = 415 ]
  run curl -s -i -H "Authorization: Bearer $TOK" -H "Mcp-Session-Id: $sid" "$MU"
  [ "$(hstatus "$output")" = 405 ]
  [[ $output == *"Allow: POST, DELETE"* ]]
  run curl -s -i -H "Authorization: Bearer $TOK" "${MU%/mcp}/other"
  [ "$(hstatus "$output")" = 404 ]
  run hpost -H "Mcp-Session-Id: $sid" '{"jsonrpc":"2.0","id":2,'
  [ "$(hstatus "$output")" = 400 ]
  [[ $output == *'"code":-32700'* ]]
  run hpost -H "Mcp-Session-Id: $sid" '[{"jsonrpc":"2.0","id":2,"method":"tools/list"}]'
  [ "$(hstatus "$output")" = 400 ]
  [[ $output == *'"code":-32600'* ]]
  # A notification: 202. A request in pretty-printed JSON, over SSE.
  run hpost -H "Mcp-Session-Id: $sid" '{"jsonrpc":"2.0","method":"notifications/initialized"}'
  [ "$(hstatus "$output")" = 202 ]
  run hpost -H "Mcp-Session-Id: $sid" $'{\n "jsonrpc": "2.0",\n "id": "c",\n "method": "tools/call",\n "params": {"name": "sandbox_create", "arguments": {"image": "bb", "timeout": 120}}\n}'
  [ "$(hstatus "$output")" = 200 ]
  [[ $output == *"Content-Type: text/event-stream"* ]]
  data=$(sed -n 's/^data: //p' <<<"$output")
  id=$(jq -r .result.structuredContent.id <<<"$data")
  [[ $id =~ ^[0-9a-f]{32}$ ]] || { echo "$output"; false; }
  echo "$id" >>"$T/ids"
  ax exec "$id" true
  # A second session sees none of the first's sandboxes.
  ACC=application/json run hpost "$init"
  sid2=$(grep -i '^Mcp-Session-Id:' <<<"$output" | awk '{print $2}' | tr -d '\r')
  [ -n "$sid2" ]
  [ "$sid2" != "$sid" ]
  ACC=application/json run hpost -H "Mcp-Session-Id: $sid2" \
    '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sandbox_list","arguments":{}}}'
  [[ $output == *'"sandboxes":[]'* ]] || { echo "$output"; false; }
  # The server's stop ends both sessions: the sandbox is stopped.
  mcp_http_stop
  none() { [ -z "$(ax ls -q)" ]; }
  poll 100 none || { ax ls; cat "$T/mcp.log"; false; }
  ! grep -qE 'AddressSanitizer|LeakSanitizer|runtime error' "$T/mcp.log" || false
}

@test "mcp: sandbox_create ports: published on loopback, each with its url; bad lists refused" {
  local line id url
  coproc MCP { ax mcp 2>"$T/mcp.err"; }
  printf '%s\n' "$INIT" >&"${MCP[1]}"
  IFS= read -r -t 60 line <&"${MCP[0]}"
  mcp_call 2 sandbox_create '{"image":"bb","ports":[0]}'
  [[ $line == *'"code":-32602'*'array of integers 1 to 65535'* ]]
  mcp_call 3 sandbox_create '{"image":"bb","ports":[80,80]}'
  [[ $line == *'80 twice'*'"isError":true'* ]]
  mcp_call 4 sandbox_create '{"image":"bb","ports":[8080,8081]}'
  id=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["result"]["structuredContent"]["id"])' "$line")
  echo "$id" >>"$T/ids"
  url=$(python3 -c '
import json, sys
p = json.loads(sys.argv[1])["result"]["structuredContent"]["ports"]
assert [x["port"] for x in p] == [8080, 8081], p
assert all(x["url"] == "http://" + x["host"] and x["host"].startswith("127.0.0.1:") for x in p), p
print(p[0]["url"])' "$line")
  ax exec "$id" sh -c 'mkdir -p /www && echo "hello from the sandbox" >/www/index.html && httpd -p 8080 -h /www'
  ok() { [ "$(curl -s -m 5 "$url/index.html")" = "hello from the sandbox" ]; }
  poll 50 ok
  mcp_call 5 sandbox_info '{"sandbox":"'"$id"'"}'
  [[ $line == *"\"url\":\"$url\""* ]]
  exec {MCP[1]}>&-
  wait "$MCP_PID" || true
  none() { [ -z "$(ax ls -q)" ]; }
  poll 100 none
}

@test "mcp: the issue's scenario in one SDK run, over stdio and over Streamable HTTP" {
  [ -n "$MCP_NODE" ] || skip "the npm @modelcontextprotocol/sdk is not installed (npm or its registry unreachable)"
  /usr/bin/python3 -c 'import ipykernel, jupyter_client' 2>/dev/null ||
    skip "python3-ipykernel or jupyter-client missing on the host (the host image's kernel)"
  command -v chromium >/dev/null || skip "Chromium is not installed (browser.bats installs it)"
  [ -z "${AGSX_SANITIZER:-}" ] || skip "heavy: runs in the plain build"
  run timeout --kill-after=5 400 env NODE_PATH="$MCP_NODE" \
    node "$AGSX_SRCDIR/test/mcp/scenario.mjs" "$AGSX" --root "$ROOT" --state "$STATE"
  echo "$output"
  [ "$status" -eq 0 ]
  grep -q '^ok - closed' <<<"$output"
  mcp_http_start
  run timeout --kill-after=5 400 env NODE_PATH="$MCP_NODE" MCP_URL="$MU" MCP_TOKEN="$TOK" \
    node "$AGSX_SRCDIR/test/mcp/scenario.mjs" "$AGSX"
  echo "$output"
  [ "$status" -eq 0 ]
  grep -q '^ok - closed' <<<"$output"
  mcp_http_stop
  none() { [ -z "$(ax ls -q)" ]; }
  poll 100 none
  AGSX_GC_MIN_AGE=0 ax gc >/dev/null
}
