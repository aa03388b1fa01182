#!/usr/bin/env bats
# test-runner: parallel
# agsx serve, the E2B-compatible HTTP API: curl tests of the protocol edges
# here, and the unmodified npm `e2b` SDK (test/serve/*.mjs, installed by
# test/serve/npm-install into a cache; the SDK tests skip when npm cannot
# reach its registry). Every test starts its own server on a free loopback
# port with its own store and state; teardown stops it, checks that it
# leaked no fd, and the default teardown that no sandbox, process, cgroup
# or mount is left.

load helpers

bats_require_minimum_version 1.5.0

KEY=e2b_0123456789abcdef0123456789abcdef01234567

setup_file() { serve_setup_file; }

setup() { serve_setup; }

teardown() { serve_teardown; }

create() { # prints the sandbox id
  api POST /v2/sandboxes "${1:-{\"templateID\":\"bb\",\"timeout\":60}}" |
    python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["sandboxID"])'
}

wait_no_sandboxes() { # 10 s, widened where the host is slow (a TCG guest)
  local i
  for i in $(seq "$(slow 100)"); do
    [ -z "$(ax ls -q)" ] && return 0
    sleep 0.1
  done
  ax ls >&3
  return 1
}

wait_gone() { # the sandbox's record goes (the supervisor removed it)
  local i
  for i in $(seq "$(slow 100)"); do
    [ -z "$(ax ls -q --no-trunc | grep "^$1")" ] && return 0
    sleep 0.1
  done
  return 1
}

# node SCRIPT with the SDK of $1 (latest or v250) pointed at the server.
sdk() {
  local which=$1 script=$2
  shift 2
  local mods=$NODE_LATEST
  [ "$which" = v250 ] && mods=$NODE_V250
  [ -n "$mods" ] || skip "the npm e2b SDK is not installed (npm or its registry unreachable)"
  E2B_SDK=$mods E2B_API_URL=$U E2B_SANDBOX_URL=$U E2B_API_KEY=$KEY E2B_TEMPLATE=${E2B_TEMPLATE:-bb} \
    timeout --kill-after=5 "${SDK_TIMEOUT:-$(slow 120)}" node "$AGSX_SRCDIR/test/serve/$script" "$@"
}

run_sdk() {
  # skip here, not in sdk: under `run` it would only end the subshell
  [ -n "$NODE_LATEST" ] || skip "the npm e2b SDK is not installed (npm or its registry unreachable)"
  run sdk "$@"
  if [ "$status" -ne 0 ] || [ "${#lines[@]}" -eq 0 ] || [ "${lines[${#lines[@]}-1]}" != ok ]; then
    echo "# node $2 ($1): status $status" >&3
    printf '%s\n' "$output" | sed 's/^/#   /' >&3
    sed 's/^/# serve: /' "$T/serve.log" | tail -30 >&3
    return 1
  fi
}

@test "serve: a wrong or missing API key gets 401 in the SDK's shape" {
  serve_start
  run curl -s -w '\n%{http_code}' "$U/v2/sandboxes"
  [ "$(status_of "$output")" = 401 ]
  [ "$(body_of "$output")" = '{"code":401,"message":"invalid API key"}' ]
  run curl -s -w '\n%{http_code}' -H 'X-API-KEY: e2b_00' "$U/sandboxes"
  [ "$(status_of "$output")" = 401 ]
}

@test "serve: create, get, list with a metadata filter, timeout, kill" {
  serve_start
  run api POST /v2/sandboxes '{"templateID":"bb","timeout":60,"metadata":{"user":"a b","app":"x"},"envVars":{"FOO":"bar"}}'
  [ "$(status_of "$output")" = 201 ]
  id=$(body_of "$output" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["clientID"]=="6532622b" and d["envdVersion"]=="0.6.4" and d["envdAccessToken"] and d["templateID"]=="bb"; print(d["sandboxID"])')
  [[ $id =~ ^[0-9a-f]{20}$ ]]
  # an ordinary agsx sandbox, its metadata its labels
  run ax ls --filter label=user='a b' --json
  [[ $output == *'"labels":{"user":"a b","app":"x","e2b.template":"bb","e2b.internet":"true"}'* ]]
  run api GET "/sandboxes/$id"
  [ "$(status_of "$output")" = 200 ]
  body_of "$output" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["state"]=="running" and d["metadata"]=={"user":"a b","app":"x"} and d["startedAt"] and d["endAt"] and d["cpuCount"]>0 and d["memoryMB"]>0, d'
  # the SDK's filter: each part encoded, then the whole (e2b-protocol.md §2.1)
  run api GET "/v2/sandboxes?metadata=user%3Da%2520b%26app%3Dx"
  [[ $(body_of "$output") == *"\"sandboxID\":\"$id\""* ]]
  run api GET "/v2/sandboxes?metadata=user%3Dnobody"
  [ "$(body_of "$output")" = "[]" ]
  run api POST "/sandboxes/$id/timeout" '{"timeout":120}'
  [ "$(status_of "$output")" = 204 ]
  run ax ls --json
  [[ $output == *'"time_left":1'[12]* ]]
  run api DELETE "/sandboxes/$id"
  [ "$(status_of "$output")" = 204 ]
  run api GET "/sandboxes/$id"
  [ "$(status_of "$output")" = 404 ]
  [[ $(body_of "$output") == '{"code":404,'* ]]
  run api DELETE "/sandboxes/$id"
  [ "$(status_of "$output")" = 404 ]
  wait_gone "$id"
}

@test "serve: list pages with X-Next-Token and filters by state" {
  serve_start
  a=$(create) b=$(create) c=$(create)
  run curl -s -D "$T/h" -H "X-API-KEY: $KEY" "$U/v2/sandboxes?limit=2"
  [ "$(echo "$output" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 2 ]
  tok=$(sed -n 's/^X-Next-Token: *\([0-9a-f]*\).*/\1/ip' "$T/h")
  [ -n "$tok" ]
  run curl -s -D "$T/h2" -H "X-API-KEY: $KEY" "$U/v2/sandboxes?limit=2&nextToken=$tok"
  [ "$(echo "$output" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 1 ]
  ! grep -qi '^X-Next-Token' "$T/h2" || false
  run api POST "/sandboxes/$b/pause" '{}'
  [ "$(status_of "$output")" = 204 ]
  run api POST "/sandboxes/$b/pause" '{}'
  [ "$(status_of "$output")" = 409 ]
  run api GET "/v2/sandboxes?state=paused"
  [[ $(body_of "$output") == *"$b"* && $(body_of "$output") != *"$a"* ]]
  run api POST "/v2/sandboxes/$b/connect" '{"timeout":30}'
  [ "$(status_of "$output")" = 201 ]
  run api POST "/v2/sandboxes/$b/connect" '{"timeout":30}'
  [ "$(status_of "$output")" = 200 ]
  run api POST "/sandboxes/$b/connect" '{}'
  [ "$(status_of "$output")" = 400 ]
  for x in $a $b $c; do api DELETE "/sandboxes/$x" >/dev/null; done
  for x in $a $b $c; do wait_gone "$x"; done
}

@test "serve: what is not supported is a 501 with code 501, never 404 or 409" {
  serve_start
  id=$(create)
  for r in "GET /templates" \
    'POST /v2/sandboxes {"templateID":"bb","mcp":{"x":{}}}' \
    'POST /secrets {"name":"k","value":"v"}' "GET /volumecontent/v/dir" \
    'POST /v2/sandboxes {"templateID":"bb","network":{"maskRequestHost":"x"}}'; do
    read -r m p b <<<"$r"
    run api "$m" "$p" "$b"
    [ "$(status_of "$output")" = 501 ] || { echo "$r: $output" >&3; false; }
    [[ $(body_of "$output") == '{"code":501,"message":"agsx: '* ]]
  done
  api DELETE "/sandboxes/$id" >/dev/null
  wait_gone "$id"
}

@test "serve: bad bodies: malformed JSON, unknown fields, bad values, oversized" {
  serve_start
  for b in '{' '[1]' '{"templateID":"bb","bogus":1}' '{"templateID":"bb","timeout":0}' \
    '{"templateID":"bb","timeout":86401}' '{"templateID":"bb","metadata":{"e2b.x":"y"}}' \
    '{"templateID":"bb","envVars":{"A":1}}' '{"templateID":"no-such-image"}'; do
    run api POST /v2/sandboxes "$b"
    [ "$(status_of "$output")" = 400 ] || { echo "$b: $output" >&3; false; }
    [[ $(body_of "$output") == '{"code":400,"message":'* ]]
  done
  head -c 2000000 /dev/zero | tr '\0' ' ' >"$T/big"
  run curl -s -w '\n%{http_code}' -H "X-API-KEY: $KEY" --data-binary @"$T/big" "$U/v2/sandboxes"
  [ "$(status_of "$output")" = 413 ]
  # chunked past the cap: the connection is closed
  run curl -s -H "X-API-KEY: $KEY" -H 'Transfer-Encoding: chunked' \
    --data-binary @"$T/big" "$U/v2/sandboxes"
  # empty reply, a reset while sending (55: the server closed first) or receiving
  case $status in 52 | 55 | 56) ;; *) echo "# curl: status $status: $output" >&3; false ;; esac
  run api GET /v2/sandboxes
  [ "$(status_of "$output")" = 200 ]
  wait_no_sandboxes
}

@test "serve: envd routes: 502 for unknown or killed sandboxes, 401 without the token" {
  serve_start
  run curl -s -w '\n%{http_code}' -H 'E2b-Sandbox-Id: 0123456789abcdef0123' -H 'E2b-Sandbox-Port: 49983' "$U/health"
  [ "$(status_of "$output")" = 502 ]
  [ "$(body_of "$output")" = '{"sandboxId":"0123456789abcdef0123","message":"The sandbox was not found","code":502}' ]
  run curl -s -w '\n%{http_code}' -H 'E2b-Sandbox-Id: ../../etc' "$U/health"
  [ "$(status_of "$output")" = 502 ]
  id=$(create)
  run curl -s -w '\n%{http_code}' -H "E2b-Sandbox-Id: $id" -H 'E2b-Sandbox-Port: 49983' "$U/health"
  [ "$(status_of "$output")" = 204 ]
  run curl -s -w '\n%{http_code}' -H "E2b-Sandbox-Id: $id" -H 'Content-Type: application/json' -d '{}' "$U/process.Process/List"
  [ "$(status_of "$output")" = 401 ]
  [[ $(body_of "$output") == '{"code":401,"message":"unauthorized access'* ]]
  # (49999 is the code interpreter: code.bats)
  run curl -s -w '\n%{http_code}' -H "E2b-Sandbox-Id: $id" -H 'E2b-Sandbox-Port: 8080' "$U/health"
  [ "$(status_of "$output")" = 502 ]
  [[ $output == *'port is not open'* ]]
  api DELETE "/sandboxes/$id" >/dev/null
  run curl -s -w '\n%{http_code}' -H "E2b-Sandbox-Id: $id" "$U/health"
  [ "$(status_of "$output")" = 502 ]
  wait_gone "$id"
}

# Issue 24, finding 3: a web page could reach the server through DNS
# rebinding (its own name resolved to 127.0.0.1) and send requests as the
# server's own; curl --resolve is that page's browser.
code_as() { curl -s -o /dev/null -w '%{http_code}' -H "X-API-KEY: $KEY" "$@"; }

@test "serve: a rebinding page's Host and a cross-site Origin get 403; the listen address and localhost work" {
  serve_start
  run code_as --resolve "rebind.example:$PORT:127.0.0.1" "http://rebind.example:$PORT/v2/sandboxes"
  [ "$output" = 403 ]
  run curl -s --resolve "rebind.example:$PORT:127.0.0.1" -H "X-API-KEY: $KEY" \
    "http://rebind.example:$PORT/v2/sandboxes"
  [[ $output == '{"code":403,"message":"host `rebind.example:'* ]]
  for h in "127.0.0.1:$PORT" 127.0.0.1 "localhost:$PORT" LOCALHOST. 49999-x.localhost; do
    run code_as -H "Host: $h" "$U/v2/sandboxes"
    [ "$output" = 200 ] || { echo "Host $h: $output" >&3; false; }
  done
  for h in 127.0.0.2 "[::1]" a.b.localhost localhost.example "localhost:x" 'a b' "localhost:65536"; do
    run code_as -H "Host: $h" "$U/v2/sandboxes"
    [ "$output" = 403 ] || { echo "Host '$h': $output" >&3; false; }
  done
  # Origins: the page's own site, never a cross-site one (nor "null").
  for o in "http://localhost:5173" "http://127.0.0.1:$PORT"; do
    run code_as -H "Origin: $o" "$U/v2/sandboxes"
    [ "$output" = 200 ] || { echo "Origin $o: $output" >&3; false; }
  done
  for o in "http://rebind.example" null "file://" "http://localhost/x" "ftp://localhost"; do
    run code_as -H "Origin: $o" "$U/v2/sandboxes"
    [ "$output" = 403 ] || { echo "Origin $o: $output" >&3; false; }
  done
  # The same on a sandbox's ports, with its token, before anything runs.
  id=$(create)
  tok=$(api POST "/v2/sandboxes/$id/connect" '{"timeout":60}' | head -1 |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["envdAccessToken"])')
  run curl -s -o /dev/null -w '%{http_code}' --resolve "rebind.example:$PORT:127.0.0.1" \
    -H "E2b-Sandbox-Id: $id" -H "X-Access-Token: $tok" -H 'Content-Type: application/json' \
    -d '{}' "http://rebind.example:$PORT/process.Process/List"
  [ "$output" = 403 ]
  run curl -s -o /dev/null -w '%{http_code}' -H 'Origin: http://rebind.example' \
    -H "E2b-Sandbox-Id: $id" -H "E2b-Sandbox-Port: 49999" "$U/health"
  [ "$output" = 403 ]
  api DELETE "/sandboxes/$id" >/dev/null
  wait_gone "$id"
}

@test "serve: --host NAME answers NAME and one label below it (E2B_DOMAIN's hosts); a bad NAME is refused" {
  serve_start --host e2b.test --host 10.9.8.7
  for h in "e2b.test:$PORT" api.e2b.test sandbox.e2b.test:443 E2B.TEST. 10.9.8.7 "127.0.0.1:$PORT"; do
    run code_as -H "Host: $h" "$U/v2/sandboxes"
    [ "$output" = 200 ] || { echo "Host $h: $output" >&3; false; }
  done
  for h in a.b.e2b.test e2b.test.example xe2b.test .e2b.test 1.10.9.8.7 rebind.example; do
    run code_as -H "Host: $h" "$U/v2/sandboxes"
    [ "$output" = 403 ] || { echo "Host '$h': $output" >&3; false; }
  done
  run code_as -H "Origin: https://api.e2b.test" "$U/v2/sandboxes"
  [ "$output" = 200 ]
  id=$(create)
  tok=$(api POST "/v2/sandboxes/$id/connect" '{"timeout":60}' | head -1 |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["envdAccessToken"])')
  run curl -s -o /dev/null -w '%{http_code}' -H "Host: 49983-$id.e2b.test" -H "E2b-Sandbox-Id: $id" \
    -H "X-Access-Token: $tok" -H 'Content-Type: application/json' -d '{}' "$U/process.Process/List"
  [ "$output" = 200 ]
  api DELETE "/sandboxes/$id" >/dev/null
  wait_gone "$id"
  for h in e2b.test:80 'a/b' '' '[::1' .. 'a b'; do
    run "$AGSX" --state "$STATE" serve --listen "127.0.0.1:$(free_port)" --api-key "$KEY" --host "$h"
    [ "$status" -eq 125 ] || { echo "--host '$h': $status $output" >&3; false; }
    [[ $output == "agsx: serve: invalid host"* ]]
  done
}

@test "serve: listening off loopback needs --listen-public; the key file is generated 0600" {
  run "$AGSX" --state "$STATE" serve --listen 0.0.0.0:1 --api-key "$KEY"
  [ "$status" -eq 125 ]
  [[ $output == *"not a loopback address"*"--listen-public"* ]]
  run "$AGSX" --state "$STATE" serve --listen 127.0.0.1:99999 --api-key "$KEY"
  [ "$status" -eq 125 ]
  PORT=$(free_port)
  "$AGSX" --root "$ROOT" --state "$STATE" serve --listen "127.0.0.1:$PORT" \
    --api-key-file "$T/etc/api-key" >"$T/serve.log" 2>&1 &
  SRV_PID=$!
  # The key is written before the server listens: wait (10 s at most,
  # however loaded the host) for both, then note its fds.
  for i in $(seq 200); do grep -qxE 'e2b_[0-9a-f]{40}' "$T/etc/api-key" 2>/dev/null && break; sleep 0.05; done
  grep -qxE 'e2b_[0-9a-f]{40}' "$T/etc/api-key"
  [ "$(stat -c %a "$T/etc/api-key")" = 600 ]
  for i in $(seq 200); do curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break; sleep 0.05; done
  SRV_FDS=$(ls /proc/$SRV_PID/fd | wc -l)
  k=$(cat "$T/etc/api-key")
  run curl -s -w '\n%{http_code}' -H "X-API-KEY: $k" "http://127.0.0.1:$PORT/v2/sandboxes"
  [ "$(status_of "$output")" = 200 ]
  grep -q 'generated the API key' "$T/serve.log"
  chmod 644 "$T/etc/api-key"
  run "$AGSX" --state "$STATE" serve --listen "127.0.0.1:$(free_port)" --api-key-file "$T/etc/api-key"
  [ "$status" -eq 125 ]
  [[ $output == *"mode 0600"* ]]
}

@test "serve: run --label and ls --filter label=" {
  id=$(ax run -d --label a=1 -l b=x=y --timeout 30s bb sleep 30)
  run_ax ls --filter label=a -q
  [ "$output" = "${id:0:12}" ]
  run_ax ls --filter label=b=x=y --filter label=a=1 -q
  [ "$output" = "${id:0:12}" ]
  run_ax ls --filter label=a=2 -q
  [ -z "$output" ]
  run_ax inspect "$id"
  [[ $output == *'"labels": {'*'"a": "1"'* ]]
  run_ax ls --filter name=x
  assert_agsx_error "unknown filter"
  run_ax run --label '=x' bb true
  assert_agsx_error "invalid label"
  run_ax run --label "k=$(printf 'a\tb')" bb true
  assert_agsx_error "control characters"
  ax kill "$id" >/dev/null
}

@test "serve: SDK (latest): the control plane: create, getInfo, list by metadata, setTimeout, metrics, connect, kill, a wrong key" {
  serve_start
  run_sdk latest control.mjs
  grep -q 'POST /v2/sandboxes: 201' "$T/serve.log"
  wait_no_sandboxes
}

@test "serve: SDK 2.50.x creates through the v1 route" {
  serve_start
  run_sdk v250 control.mjs
  grep -q 'POST /sandboxes: 201' "$T/serve.log"
  ! grep -q 'POST /v2/sandboxes:' "$T/serve.log" || false
  wait_no_sandboxes
}

@test "serve: SIGKILL and restart on the same port: sandboxes and tokens are found again" {
  serve_start
  id=$(create)
  tok=$(api POST "/v2/sandboxes/$id/connect" '{}' | head -1 |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["envdAccessToken"])')
  kill -9 "$SRV_PID"
  wait "$SRV_PID" 2>/dev/null || true
  SRV_PID=
  # its supervisors hold no fd of the server's: the port is free at once
  local port=$PORT
  "$AGSX" --root "$ROOT" --state "$STATE" serve --listen "127.0.0.1:$port" --api-key "$KEY" \
    --template bb=bb >>"$T/serve.log" 2>&1 &
  SRV_PID=$!
  for i in $(seq 100); do curl -s -o /dev/null "$U/" && break; sleep 0.05; done
  SRV_FDS=$(ls /proc/$SRV_PID/fd | wc -l)
  run api GET "/sandboxes/$id"
  [ "$(status_of "$output")" = 200 ] || { cat "$T/serve.log" >&3; false; }
  run curl -s -w '%{http_code}' -H "E2b-Sandbox-Id: $id" -H "X-Access-Token: $tok" \
    -H 'Content-Type: application/json' -d '{"path":"/"}' "$U/filesystem.Filesystem/Stat"
  [[ $output == *'"name":"/"'*200 ]]
  api DELETE "/sandboxes/$id" >/dev/null
  wait_gone "$id"
}

@test "serve: SDK: commands.run: output, exit codes, envs, cwd, user, streaming, timeout" {
  serve_start
  run_sdk latest commands.mjs
  wait_no_sandboxes
}

@test "serve: SDK: a background command (list, connect, stdin, kill) and a PTY" {
  serve_start
  run_sdk latest background.mjs
  wait_no_sandboxes
}

@test "serve: SDK: pause and connect keep a process's state; setTimeout, then the deadline; a second process" {
  serve_start
  run_sdk latest lifetime.mjs
  wait_no_sandboxes
}

@test "serve: SDK: SIGKILL the server mid-work, restart it: the same client carries on" {
  [ -n "$NODE_LATEST" ] || skip "the npm e2b SDK is not installed"
  serve_start
  coproc CLIENT { E2B_SDK=$NODE_LATEST E2B_API_URL=$U E2B_SANDBOX_URL=$U E2B_API_KEY=$KEY \
    E2B_TEMPLATE=bb timeout 120 node "$AGSX_SRCDIR/test/serve/restart.mjs" 2>&1; }
  read -r -t 60 line <&"${CLIENT[0]}"
  [[ $line == "id "* ]] || { echo "# client: $line" >&3; false; }
  kill -9 "$SRV_PID"
  wait "$SRV_PID" 2>/dev/null || true
  SRV_PID=
  sleep 1 # the background command writes on while no server runs
  local port=$PORT
  "$AGSX" --root "$ROOT" --state "$STATE" --log-level debug serve --listen "127.0.0.1:$port" \
    --api-key "$KEY" --template bb=bb >>"$T/serve.log" 2>&1 &
  SRV_PID=$!
  for i in $(seq 100); do curl -s -o /dev/null "$U/" && break; sleep 0.05; done
  SRV_FDS=$(ls /proc/$SRV_PID/fd | wc -l)
  echo go >&"${CLIENT[1]}"
  out=$(cat <&"${CLIENT[0]}")
  wait "$CLIENT_PID" || true
  [[ $out == *ok ]] || { echo "# client: $out" >&3; sed 's/^/# serve: /' "$T/serve.log" | tail -20 >&3; false; }
  wait_no_sandboxes
}

@test "serve: 200 parallel requests and clients that go away mid-request" {
  serve_start
  id=$(create)
  python3 - "$PORT" "$KEY" "$id" <<'PY'
import socket, sys, threading, http.client
port, key, sid = int(sys.argv[1]), sys.argv[2], sys.argv[3]
res = []
def one(i):
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=60)
    if i % 2:
        c.request('GET', '/v2/sandboxes', headers={'X-API-KEY': key})
    else:
        c.request('GET', '/health', headers={'E2b-Sandbox-Id': sid})
    r = c.getresponse(); r.read()
    res.append(r.status)
    c.close()
ts = [threading.Thread(target=one, args=(i,)) for i in range(200)]
for t in ts: t.start()
for t in ts: t.join()
assert len(res) == 200 and set(res) <= {200, 204}, res
# half a request, then gone; a body announced and never sent
import time
for n in range(20):
    s = socket.create_connection(('127.0.0.1', port))
    s.sendall(b'POST /v2/sandboxes HTTP/1.1\r\nHost: x\r\nX-API-KEY: ' + key.encode() +
              b'\r\nContent-Length: 1000\r\n\r\n{"templ')
    time.sleep(0.02)
    s.close()
    s = socket.create_connection(('127.0.0.1', port))
    s.sendall(b'GET /v2/sand')
    time.sleep(0.02)
    s.close()
print('ok')
PY
  run api GET /v2/sandboxes
  [ "$(status_of "$output")" = 200 ]
  api DELETE "/sandboxes/$id" >/dev/null
  wait_gone "$id"
}

@test "serve: a client that sends part of a body, or of its headers, and closes at once holds nothing" {
  serve_start
  # The bytes and the end arrive together, before the server reads them:
  # libmicrohttpd's edge-triggered epoll sees one edge for both, so only
  # the server's own look at the socket closes these before a timeout.
  python3 - "$PORT" "$KEY" <<'PY'
import socket, sys
port, key = int(sys.argv[1]), sys.argv[2]
for n in range(20):
    s = socket.create_connection(('127.0.0.1', port))
    s.sendall(b'POST /v2/sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-KEY: ' + key.encode() +
              b'\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"templ')
    s.close()
    s = socket.create_connection(('127.0.0.1', port))
    s.sendall(b'GET /v2/sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API')
    s.close()
PY
  # Well within the 10 s header deadline and the 30 s idle timeout.
  local i fds
  for i in $(seq 40); do
    fds=$(ls /proc/$SRV_PID/fd | wc -l)
    [ "$fds" -le "$SRV_FDS" ] && break
    sleep 0.1
  done
  [ "$fds" -le "$SRV_FDS" ] || {
    echo "# the server still holds $fds fds after 4 s ($SRV_FDS after its start)" >&3
    false
  }
  # The server answers as before.
  run api GET /v2/sandboxes
  [ "$(status_of "$output")" = 200 ]
}

# A sandbox through curl, and its envd token: sets ID and TOK.
create_with_token() {
  local out
  out=$(api POST /v2/sandboxes "${1:-{\"templateID\":\"bb\",\"timeout\":60}}" | head -1)
  ID=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["sandboxID"])' "$out")
  TOK=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["envdAccessToken"])' "$out")
}

rpc() { python3 "$AGSX_SRCDIR/test/serve/connect.py" "$PORT" "$ID" "$TOK" "$@"; }

# Issue 24, finding 2: 1024 idle or trickling connections filled the
# server's one connection limit, with no per-client bound and no deadline
# for headers (each trickled byte restarted libmicrohttpd's idle timer).
@test "serve: idle and trickling connections (one client, or many) never lock a well-behaved client out" {
  serve_start
  python3 - "$PORT" "$KEY" <<'PY'
import socket, sys, time
port, key = int(sys.argv[1]), sys.argv[2]
def conn(src):
    return socket.create_connection(('127.0.0.1', port), timeout=5, source_address=(src, 0))
def request(what):
    t0 = time.monotonic()
    s = conn('127.0.0.1')
    s.sendall(b'GET /v2/sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-KEY: ' + key.encode() +
              b'\r\nConnection: close\r\n\r\n')
    data = b''
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    took = time.monotonic() - t0
    assert data.startswith(b'HTTP/1.1 200'), (what, data[:100])
    assert took < 3, (what, took)  # generous: it is answered at once
    print('%s: answered in %.0f ms' % (what, took * 1000), file=sys.stderr)
def closed(s):
    s.settimeout(0)
    try:
        return s.recv(1) == b''
    except (BlockingIOError, ):
        return False
    except OSError:
        return True
# Many clients, more than the server holds, half of them trickling a request.
many = []
for i in range(5):
    many += [conn('127.0.0.%d' % (3 + i)) for _ in range(220)]
for s in many[::2]:
    s.sendall(b'GET /v2/sand')
request('1100 connections from 5 clients, half trickling')
for s in many:
    s.close()
# One client, idle connections past its bound: its oldest give way.
one = [conn('127.0.0.2') for _ in range(300)]
request('one client with 300 idle connections')
time.sleep(0.5)
n = sum(closed(s) for s in one)
assert n >= 300 - 256, ('connections of a client past its bound were not closed', n)
for s in one:
    s.close()
print('ok')
PY
  # The server is left with nothing but its own fds.
  poll 50 bash -c "[ \$(ls /proc/$SRV_PID/fd | wc -l) -le $SRV_FDS ]"
}

@test "serve: a connection trickling its headers is closed after 10 s" {
  serve_start
  python3 - "$PORT" <<'PY'
import socket, sys, time
port = int(sys.argv[1])
s = socket.create_connection(('127.0.0.1', port), timeout=5)
t0 = time.monotonic()
req = b'GET /v2/sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: ' + b'a' * 100
gone = None
for b in req:  # a byte a second, for 20 s at most
    try:
        s.sendall(bytes([b]))
        s.settimeout(1)
        if s.recv(1) == b'':
            gone = time.monotonic() - t0
            break
    except socket.timeout:
        continue
    except OSError:
        gone = time.monotonic() - t0
        break
    if time.monotonic() - t0 > 20:
        break
assert gone is not None and 9 <= gone <= 15, gone
print('closed after %.1f s' % gone, file=sys.stderr)
PY
}

inotify_instances() { # of process $1
  python3 -c 'import os,sys
d="/proc/%s/fd" % sys.argv[1]
n=0
for f in os.listdir(d):
    try:
        n += os.readlink(os.path.join(d, f)) == "anon_inode:inotify"
    except OSError:
        pass
print(n)' "$1"
}

no_inotify_left() { [ "$(inotify_instances "$SRV_PID")" -eq 0 ]; }

# Issue 24, finding 5: each watcher and each process stream was an inotify
# instance of host root's (128 for the whole host by default), and the
# server allowed 1024 of each.
@test "serve: watchers and process streams share a few inotify instances; a sandbox's watchers are bounded" {
  serve_start
  create_with_token
  python3 - "$PORT" "$ID" "$TOK" "$SRV_PID" <<'PY'
import json, os, socket, struct, sys, time
port, sid, tok, srv = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
def instances():
    d = '/proc/%s/fd' % srv
    n = 0
    for f in os.listdir(d):
        try:
            n += os.readlink(os.path.join(d, f)) == 'anon_inode:inotify'
        except OSError:
            pass
    return n
def stream(method, msg):
    body = json.dumps(msg).encode()
    env = struct.pack('>BI', 0, len(body)) + body
    s = socket.create_connection(('127.0.0.1', port), timeout=30)
    s.sendall(('POST /%s HTTP/1.1\r\nHost: 127.0.0.1\r\nE2b-Sandbox-Id: %s\r\n'
               'X-Access-Token: %s\r\nContent-Type: application/connect+json\r\n'
               'Connect-Timeout-Ms: 60000\r\nContent-Length: %d\r\n\r\n'
               % (method, sid, tok, len(env))).encode() + env)
    got = b''
    while b'{"' not in got.split(b'\r\n\r\n', 1)[-1] or b'\r\n\r\n' not in got:
        b = s.recv(4096)
        assert b, ('stream ended', method, got)
        got += b
    assert got.startswith(b'HTTP/1.1 200'), got[:200]
    return s
def unary(method, msg):
    body = json.dumps(msg).encode()
    s = socket.create_connection(('127.0.0.1', port), timeout=30)
    s.sendall(('POST /%s HTTP/1.1\r\nHost: 127.0.0.1\r\nE2b-Sandbox-Id: %s\r\n'
               'X-Access-Token: %s\r\nContent-Type: application/json\r\nConnection: close\r\n'
               'Content-Length: %d\r\n\r\n' % (method, sid, tok, len(body))).encode() + body)
    data = b''
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    head, _, rest = data.partition(b'\r\n\r\n')
    return int(head.split()[1]), rest
before = instances()
held = [stream('process.Process/Start', {'process': {'cmd': '/bin/sh', 'args': ['-c', 'sleep 60']}})
        for _ in range(40)]
held += [stream('filesystem.Filesystem/WatchDir', {'path': '/tmp', 'recursive': True})
         for _ in range(40)]
after = instances()
print('inotify instances: %d before, %d with 40 process streams and 40 watchers' % (before, after),
      file=sys.stderr)
assert after - before <= 2, (before, after)  # the logs' and the sandbox's
# 64 watchers per sandbox: 24 more polling ones, then a clear refusal.
ids = []
for i in range(24):
    st, body = unary('filesystem.Filesystem/CreateWatcher', {'path': '/tmp'})
    assert st == 200, (i, st, body)
    ids.append(json.loads(body)['watcherId'])
st, body = unary('filesystem.Filesystem/CreateWatcher', {'path': '/tmp'})
assert st == 429 and b'"code":"resource_exhausted"' in body and b'at most 64' in body, (st, body)
st, body = unary('filesystem.Filesystem/RemoveWatcher', {'watcherId': ids[0]})
assert st == 200, body
st, body = unary('filesystem.Filesystem/CreateWatcher', {'path': '/tmp'})
assert st == 200, ('room again after a removal', st, body)
assert instances() - before <= 2
# Host root still has its instances.
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0o2000000)
assert fd >= 0, ctypes.get_errno()
os.close(fd)
for s in held:
    s.close()
print('ok')
PY
  api DELETE "/sandboxes/$ID" >/dev/null
  wait_gone "$ID"
  # The instances go a moment after their last watch (the loop's timer).
  poll 100 no_inotify_left
}

@test "serve: Start streams start, data, end, then the end-stream frame; exitCode omitted when 0" {
  serve_start
  create_with_token
  run rpc stream process.Process/Start '{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"]},"stdin":false}'
  [ "${lines[0]}" = '0 {"event":{"start":{"pid":'"$(echo "${lines[0]}" | grep -o '"pid":[0-9]*' | cut -d: -f2)"'}}}' ]
  [ "${lines[1]}" = 'stdout: hi' ]
  [ "${lines[2]}" = '0 {"event":{"end":{"exited":true,"status":"exit status 0"}}}' ]
  [ "${lines[3]}" = '2 {}' ]
  run rpc stream process.Process/Start '{"process":{"cmd":"/bin/sh","args":["-c","kill -9 $$"]}}'
  [[ ${lines[1]} == '0 {"event":{"end":{"exitCode":-1,"exited":false,"status":"signal: killed","error":"signal: killed"}}}' ]]
  run rpc stream process.Process/Start '{"process":{"cmd":"/bin/sh","args":["-c","exit 3"]}}'
  [[ ${lines[1]} == '0 {"event":{"end":{"exitCode":3,"exited":true,"status":"exit status 3","error":"exit status 3"}}}' ]]
  # Connect-Timeout-Ms: the process's lifetime and the stream's deadline
  run rpc stream process.Process/Start '{"process":{"cmd":"/bin/sh","args":["-c","sleep 30"]}}' Connect-Timeout-Ms=800
  [[ ${lines[-1]} == '2 {"error":{"code":"deadline_exceeded",'* ]]
  # keepalives per Keepalive-Ping-Interval (seconds)
  run rpc stream process.Process/Start '{"process":{"cmd":"/bin/sh","args":["-c","sleep 2.5; echo late"]}}' Keepalive-Ping-Interval=1
  [[ $output == *'{"event":{"keepalive":{}}}'*'stdout: late'* ]]
  # errors: unknown pid, stdin to nothing, bad input, no such command
  run rpc unary process.Process/SendSignal '{"process":{"pid":99999},"signal":"SIGNAL_SIGKILL"}'
  [[ $output == '404 {"code":"not_found",'* ]]
  run rpc unary process.Process/List '{"bogus":'
  [[ $output == '400 {"code":"invalid_argument",'* ]]
  run rpc stream process.Process/Connect '{"process":{"pid":99999}}'
  [[ ${lines[-1]} == '2 {"error":{"code":"not_found",'* ]]
  run rpc stream process.Process/Start '{"process":{"cmd":"/no/such/cmd"}}'
  [[ ${lines[-1]} == '2 {"error":'* ]]
  run rpc unary process.Process/StreamInput '{}'
  [[ $output == '501 {"code":"unimplemented",'* ]]
  run rpc unary process.Process/List '{}' Content-Type=application/proto
  [[ $output == 415* ]]
  # an unknown user is refused; a known one is used
  run rpc unary process.Process/List '{}' 'Authorization=Basic bm9ib2R5eDo='
  [[ $output == 200* ]]
  run rpc stream process.Process/Start '{"process":{"cmd":"/bin/sh","args":["-c","id -un"]}}' 'Authorization=Basic YWdlbnQ6'
  [ "${lines[1]}" = 'stdout: agent' ]
  run rpc stream process.Process/Start '{"process":{"cmd":"/bin/sh","args":["-c","id -un"]}}' 'Authorization=Basic bm9ib2R5eDo='
  [[ $output == 'HTTP 401 {"code":"unauthenticated","message":"invalid username: '* ]]
  api DELETE "/sandboxes/$ID" >/dev/null
  wait_gone "$ID"
}

@test "serve: a client that goes away mid-stream: the process runs on, the server keeps no fd" {
  serve_start
  create_with_token
  run rpc abort process.Process/Start '{"process":{"cmd":"/bin/sh","args":["-c","while :; do echo x; sleep 0.2; done"]},"stdin":false}' Keepalive-Ping-Interval=1 Connect-Timeout-Ms=0
  pid=$(echo "$output" | grep -o '"pid":[0-9]*' | cut -d: -f2)
  [ -n "$pid" ]
  sleep 2.5 # a keepalive or the output finds the connection gone
  run rpc unary process.Process/List '{}'
  [[ $output == *"\"pid\":$pid"* ]]
  run rpc unary process.Process/SendSignal "{\"process\":{\"pid\":$pid},\"signal\":\"SIGNAL_SIGKILL\"}"
  [[ $output == '200 {}' ]]
  api DELETE "/sandboxes/$ID" >/dev/null
  wait_gone "$ID"
}

@test "serve: a sandbox killed during a stream drops it, with no end frame; its envd routes answer 502" {
  serve_start
  create_with_token
  rpc stream process.Process/Start '{"process":{"cmd":"/bin/sh","args":["-c","echo up; sleep 60"]}}' >"$T/frames" &
  local client=$!
  for i in $(seq 50); do grep -q 'stdout: up' "$T/frames" && break; sleep 0.1; done
  api DELETE "/sandboxes/$ID" >/dev/null
  for i in $(seq 100); do kill -0 $client 2>/dev/null || break; sleep 0.1; done
  ! kill -0 $client 2>/dev/null || false
  ! wait $client || false # the connection closed mid-stream, as E2B's proxy drops it
  grep -q 'stdout: up' "$T/frames"
  ! grep -q '^2 ' "$T/frames" || false
  run rpc unary process.Process/List '{}'
  [[ $output == '502 {"sandboxId":'* ]]
  wait_gone "$ID"
}

@test "serve: the network: internal by default and without internet access; the server's --network otherwise" {
  serve_start --network vpc:nosuchnet
  run api POST /v2/sandboxes '{"templateID":"bb","allow_internet_access":false}'
  [ "$(status_of "$output")" = 201 ]
  run api POST /v2/sandboxes '{"templateID":"bb"}'
  [ "$(status_of "$output")" = 400 ]
  [[ $output == *nosuchnet* ]]
  serve_stop
  serve_start
  run api POST /v2/sandboxes '{"templateID":"bb"}'
  [ "$(status_of "$output")" = 201 ]
  run ax ls --json
  [ "$(echo "$output" | python3 -c 'import json,sys; print(sorted(set(s["network"] for s in json.load(sys.stdin))))')" = "['internal']" ]
  for id in $(ax ls -q --no-trunc); do api DELETE "/sandboxes/${id:0:20}" >/dev/null; done
  wait_no_sandboxes
}

@test "serve: the default user: root without a user account, or --default-user; HOME and cwd its home" {
  serve_start
  create_with_token
  run rpc stream process.Process/Start '{"process":{"cmd":"/bin/bash","args":["-l","-c","echo $(id -un) $(pwd) $HOME"]}}'
  [ "${lines[1]}" = 'stdout: root /root /root' ] || { echo "$output" >&3; false; }
  api DELETE "/sandboxes/$ID" >/dev/null
  wait_gone "$ID"
  serve_stop
  serve_start --default-user agent
  create_with_token
  run rpc stream process.Process/Start '{"process":{"cmd":"/bin/bash","args":["-l","-c","echo $(id -un) $(pwd) $HOME"]}}'
  [ "${lines[1]}" = 'stdout: agent /home/agent /home/agent' ] || { echo "$output" >&3; false; }
  # the SDK's user:'root' overrides it
  run rpc stream process.Process/Start '{"process":{"cmd":"/bin/sh","args":["-c","id -u"]}}' 'Authorization=Basic cm9vdDo='
  [ "${lines[1]}" = 'stdout: 0' ]
  api DELETE "/sandboxes/$ID" >/dev/null
  wait_gone "$ID"
}

@test "serve: SIGTERM with streams open: each ends with unavailable, the server exits 0, the process runs on" {
  serve_start
  create_with_token
  rpc stream process.Process/Start '{"process":{"cmd":"/bin/sh","args":["-c","echo a; sleep 60"]}}' >"$T/frames" &
  local client=$!
  for i in $(seq 50); do grep -q 'stdout: a' "$T/frames" && break; sleep 0.1; done
  kill "$SRV_PID"
  wait "$SRV_PID"
  SRV_PID=
  wait $client
  [ "$(tail -1 "$T/frames")" = '2 {"error":{"code":"unavailable","message":"the server is stopping"}}' ]
  serve_start
  run rpc unary process.Process/List '{}'
  [[ $output == 200*'"sleep 60"'* ]] || [[ $output == 200*'sleep 60'* ]]
  api DELETE "/sandboxes/$ID" >/dev/null
  wait_gone "$ID"
}

@test "serve: fork, createSnapshot, listSnapshots over curl; a snapshot is a template" {
  serve_start
  id=$(create)
  run api POST "/sandboxes/$id/fork" '{"count":2,"timeout":30}'
  [ "$(status_of "$output")" = 201 ] || { echo "$output" >&3; false; }
  python3 -c 'import json,sys; v=json.loads(sys.argv[1]); assert len(v)==2 and all(len(f["sandbox"]["sandboxID"])==20 for f in v), v' "$(body_of "$output")"
  local forks
  forks=$(python3 -c 'import json,sys; print(" ".join(f["sandbox"]["sandboxID"] for f in json.loads(sys.argv[1])))' "$(body_of "$output")")
  run api POST "/sandboxes/$id/fork" '{"count":0}'
  [ "$(status_of "$output")" = 400 ]
  run api POST "/sandboxes/0123456789abcdef0123/fork" '{}'
  [ "$(status_of "$output")" = 404 ]
  run api POST "/sandboxes/$id/snapshots" '{"name":"mysnap"}'
  [ "$(status_of "$output")" = 201 ] || { echo "$output" >&3; false; }
  local snap
  snap=$(python3 -c 'import json,sys; v=json.loads(sys.argv[1]); assert v["names"]==[v["snapshotID"]], v; print(v["snapshotID"])' "$(body_of "$output")")
  [[ "$snap" == *mysnap* ]]
  ax exec "$(ax ls -q --no-trunc | grep "^$id")" sh -c 'echo changed >/changed'
  run api POST "/sandboxes/$id/snapshots" '{}'
  [ "$(status_of "$output")" = 201 ]
  run api GET "/snapshots?sandboxID=$id"
  [ "$(status_of "$output")" = 200 ]
  python3 -c 'import json,sys; v=json.loads(sys.argv[1]); assert len(v)==2, v' "$(body_of "$output")"
  run api GET "/snapshots?name=mysnap"
  python3 -c 'import json,sys; v=json.loads(sys.argv[1]); assert len(v)==1 and v[0]["snapshotID"]==sys.argv[2], v' "$(body_of "$output")" "$snap"
  run api POST /v2/sandboxes "{\"templateID\":\"$snap\",\"timeout\":30}"
  [ "$(status_of "$output")" = 201 ] || { echo "$output" >&3; false; }
  new=$(body_of "$output" | python3 -c 'import json,sys; print(json.load(sys.stdin)["sandboxID"])')
  for x in $id $forks $new; do api DELETE "/sandboxes/$x" >/dev/null; done
  for x in $id $forks $new; do wait_gone "$x"; done
  AGSX_GC_MIN_AGE=0 ax gc >/dev/null # the forks' layer
}

@test "serve: createSnapshot of a base (host image) sandbox is a clear 400; fork of it works" {
  serve_start
  run api POST /v2/sandboxes '{"templateID":"base","timeout":30}'
  [ "$(status_of "$output")" = 201 ] || { echo "$output" >&3; cat "$T/serve.log" >&3; false; }
  id=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["sandboxID"])' "$(body_of "$output")")
  run api POST "/sandboxes/$id/snapshots" '{"name":"hostsnap"}'
  [ "$(status_of "$output")" = 400 ] || { echo "$output" >&3; false; }
  [[ "$(body_of "$output")" == *"runs the host image: the host's / is no image in the store"* ]] || { echo "$output" >&3; false; }
  run api GET "/snapshots?name=hostsnap"
  [ "$(body_of "$output")" = "[]" ] || { echo "$output" >&3; false; }
  run api POST "/sandboxes/$id/fork" '{"timeout":30}'
  [ "$(status_of "$output")" = 201 ] || { echo "$output" >&3; false; }
  local f
  f=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])[0]["sandbox"]["sandboxID"])' "$(body_of "$output")")
  for x in $id $f; do api DELETE "/sandboxes/$x" >/dev/null; done
  for x in $id $f; do wait_gone "$x"; done
  AGSX_GC_MIN_AGE=0 ax gc >/dev/null # the fork's layer
}

@test "serve: SDK (latest): pause, connect, createSnapshot, listSnapshots, fork" {
  serve_start
  SDK_TIMEOUT=240 run_sdk latest snapshot.mjs
  wait_no_sandboxes
  AGSX_GC_MIN_AGE=0 ax gc >/dev/null # the forks' layer
}
