#!/usr/bin/env bats
# test-runner: parallel
# agsx serve against what E2B's own js-sdk suite found (issue 25): a paused
# sandbox's /health, signed file URLs with no header, the list's order,
# filters and pages, the metrics' range, deleteSnapshot, and a sandbox
# killed under a running command or cell. Through the unmodified npm `e2b`
# SDK (test/serve/parity.mjs, one scenario a test; parity-code.mjs for the
# code interpreter's), and curl for the edges.
# Each test starts its own server on a free loopback port with its own
# store and state (helpers.bash: api_serve_start).

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

no_sandboxes() { [ -z "$(ax ls -q)" ]; }
wait_no_sandboxes() {
  poll 100 no_sandboxes || { ax ls >&3; return 1; }
}

# node test/serve/parity.mjs SCENARIO with the SDK pointed at the server.
run_parity() {
  [ -n "$NODE_LATEST" ] || skip "the npm e2b SDK is not installed (npm or its registry unreachable)"
  run env E2B_SDK="$NODE_LATEST" E2B_API_URL="$U" E2B_SANDBOX_URL="$U" E2B_API_KEY="$KEY" \
    E2B_TEMPLATE=bb timeout --kill-after=5 "${SDK_TIMEOUT:-120}" \
    node "$AGSX_SRCDIR/test/serve/parity.mjs" "$1"
  if [ "$status" -ne 0 ] || [ "${#lines[@]}" -eq 0 ] || [ "${lines[${#lines[@]}-1]}" != ok ]; then
    echo "# node parity.mjs $1: status $status" >&3
    printf '%s\n' "$output" | sed 's/^/#   /' >&3
    sed 's/^/# serve: /' "$T/serve.log" | tail -30 >&3
    return 1
  fi
}

@test "serve-api: /health of a paused sandbox is 502, so isRunning() is false until connect" {
  serve_start
  run_parity health
  wait_no_sandboxes
}

@test "serve-api: /health: 204 running, 502 paused, 204 resumed (curl)" {
  serve_start
  id=$(create)
  h() { curl -s -o /dev/null -w '%{http_code}' -H "E2b-Sandbox-Id: $id" -H 'E2b-Sandbox-Port: 49983' "$U/health"; }
  [ "$(h)" = 204 ]
  api POST "/sandboxes/$id/pause" '{}' >/dev/null
  [ "$(h)" = 502 ]
  run curl -s -H "E2b-Sandbox-Id: $id" "$U/health"
  [[ $output == *'"message":"The sandbox was not found","code":502'* ]]
  api POST "/v2/sandboxes/$id/connect" '{"timeout":30}' >/dev/null
  [ "$(h)" = 204 ]
  api DELETE "/sandboxes/$id" >/dev/null
  wait_no_sandboxes
}

@test "serve-api: signed downloadUrl/uploadUrl work with no header; expired, tampered or dead ones get 401" {
  serve_start
  run_parity signed
  wait_no_sandboxes
}

@test "serve-api: a signed URL without a sandbox id: no key, no signature, or a bad one is 401 and touches nothing" {
  serve_start
  id=$(create)
  run curl -s -w '\n%{http_code}' "$U/files?path=/etc/passwd"
  [ "$(status_of "$output")" = 401 ]
  [ "$(body_of "$output")" = '{"code":401,"message":"invalid API key"}' ]
  run curl -s -w '\n%{http_code}' "$U/files?path=/etc/passwd&signature=v1_AAAA"
  [ "$(status_of "$output")" = 401 ]
  [ "$(body_of "$output")" = '{"code":401,"message":"invalid signature"}' ]
  run curl -s -w '\n%{http_code}' -F file=@/etc/hostname "$U/files?path=/tmp/x&signature=v1_AAAA&signature_expiration=1"
  [ "$(status_of "$output")" = 401 ]
  # only GET and POST of /files
  run curl -s -o /dev/null -w '%{http_code}' -X DELETE "$U/files?path=/tmp/x&signature=v1_AAAA"
  [ "$output" = 401 ]
  # A bad signature costs a hash per sandbox, never a read of every record
  # (issue 24's gap: anyone could make the server read them all).
  strace -f -qq -e trace=open,openat,openat2,getdents64 -o "$T/trace" -p "$SRV_PID" &
  local st=$! i
  for i in $(seq 50); do
    [ "$(awk '/^TracerPid/ {print $2}' "/proc/$SRV_PID/status")" != 0 ] && break
    sleep 0.1
  done
  for i in $(seq 20); do
    curl -s -o /dev/null "$U/files?path=/etc/passwd&signature=v1_AAAA$i"
  done
  run curl -s -w '\n%{http_code}' "$U/files?path=/etc/passwd&signature=v1_AAAA"
  [ "$(status_of "$output")" = 401 ]
  kill -INT "$st"
  wait "$st" || true
  grep -q 'getdents64' "$T/trace" || { echo "# strace saw no listing: $(head -3 "$T/trace")" >&3; false; }
  ! grep 'state\.json' "$T/trace" || { echo "# records read for bad signatures" >&3; false; }
  api DELETE "/sandboxes/$id" >/dev/null
  wait_no_sandboxes
}

@test "serve-api: list: newest first, order, startedAfter, template, state, pages that survive a kill" {
  serve_start
  run_parity list
  wait_no_sandboxes
}

@test "serve-api: list: bad filters are 400 in E2B's shape; startedAt has microseconds" {
  serve_start
  id=$(create)
  for q in 'order=up' 'startedAfter=yesterday' 'state=gone' 'limit=0' 'limit=x' 'nextToken=zz'; do
    run api GET "/v2/sandboxes?$q"
    [ "$(status_of "$output")" = 400 ] || { echo "$q: $output" >&3; false; }
    [[ $(body_of "$output") == '{"code":400,"message":'* ]]
  done
  run api GET "/v2/sandboxes"
  [[ $(body_of "$output") =~ \"startedAt\":\"[0-9-]+T[0-9:]+\.[0-9]{6}Z\" ]] || { echo "$output" >&3; false; }
  run curl -s -D "$T/h" -o /dev/null -H "X-API-KEY: $KEY" "$U/v2/sandboxes?state=running"
  grep -qi '^X-Total-Running: 1' "$T/h"
  api DELETE "/sandboxes/$id" >/dev/null
  wait_no_sandboxes
}

@test "serve-api: metrics honour start and end: none before the sandbox existed" {
  serve_start
  run_parity metrics
  wait_no_sandboxes
}

@test "serve-api: metrics: a bad start or end is 400" {
  serve_start
  id=$(create)
  for q in 'start=x' 'end=-1' 'start=20&end=10'; do
    run api GET "/sandboxes/$id/metrics?$q"
    [ "$(status_of "$output")" = 400 ] || { echo "$q: $output" >&3; false; }
  done
  api DELETE "/sandboxes/$id" >/dev/null
  wait_no_sandboxes
}

# The store's content, as a list of files (blobs, unpacked layers, index).
store_files() { (cd "$ROOT" && find . -path ./tmp -prune -o -type f -print | grep -v '\.lock$' | sort); }

@test "serve-api: deleteSnapshot deletes the snapshot and leaves nothing in the store" {
  serve_start
  # one sandbox first, so the store holds what any sandbox of bb adds
  id=$(create)
  api DELETE "/sandboxes/$id" >/dev/null
  wait_no_sandboxes
  before=$(store_files)
  SDK_TIMEOUT=240 run_parity snapshots
  wait_no_sandboxes
  after=$(store_files)
  [ "$before" = "$after" ] || { diff <(echo "$before") <(echo "$after") >&3; false; }
  run ax image ls -q
  [ "$(echo "$output" | wc -l)" = 1 ] || { ax image ls >&3; false; }
  AGSX_GC_MIN_AGE=0 ax gc >/dev/null # the snapshot sandboxes' layers
}

@test "serve-api: DELETE /templates/ID of an image that is no snapshot is a 404 and removes nothing" {
  serve_start
  run api DELETE /templates/bb
  [ "$(status_of "$output")" = 404 ]
  [[ $(body_of "$output") == '{"code":404,"message":"snapshot \"bb\" not found"}' ]]
  run ax image ls -q
  [ -n "$output" ]
  run api DELETE /templates/e2b-snapshots%2F0123:1
  [ "$(status_of "$output")" = 404 ]
}

@test "serve-api: killing a sandbox under commands.run drops the stream: the SDK's TimeoutError" {
  serve_start
  run_parity killed
  wait_no_sandboxes
}

@test "serve-api: killed under a Start stream: the connection closes with no end-stream frame" {
  serve_start
  id=$(create)
  tok=$(api POST "/v2/sandboxes/$id/connect" '{"timeout":60}' |
    python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["envdAccessToken"])')
  body='{"process":{"cmd":"/bin/sh","args":["-c","echo hi; sleep 60"]},"stdin":false}'
  python3 -c 'import struct,sys; b=sys.argv[1].encode(); sys.stdout.buffer.write(b"\0"+struct.pack(">I",len(b))+b)' \
    "$body" >"$T/req"
  curl -s -N -o "$T/out" -w '%{http_code}' -H "E2b-Sandbox-Id: $id" -H "X-Access-Token: $tok" \
    -H 'Content-Type: application/connect+json' -H 'Connect-Protocol-Version: 1' \
    --data-binary @"$T/req" "$U/process.Process/Start" >"$T/code" 2>&1 &
  local cpid=$!
  poll 100 grep -q aGkK "$T/out" # "hi\n", so the process runs
  api DELETE "/sandboxes/$id" >/dev/null
  local rc=0
  wait $cpid || rc=$?
  [ "$rc" = 18 ] || [ "$rc" = 56 ] || { echo "curl: $rc" >&3; false; } # partial / recv error
  # frames: the start and the output, no end event and no end-stream frame
  python3 - "$T/out" <<'PY'
import json, struct, sys
b = open(sys.argv[1], 'rb').read()
kinds = []
while b:
    flags, n = b[0], struct.unpack('>I', b[1:5])[0]
    assert flags == 0, 'an end-stream frame'
    kinds.append(next(iter(json.loads(b[5:5 + n])['event'])))
    b = b[5 + n:]
assert kinds[0] == 'start' and 'end' not in kinds, kinds
PY
  wait_no_sandboxes
}

@test "serve-api: killing a sandbox under runCode drops the stream: the code interpreter SDK's TimeoutError" {
  /usr/bin/python3 -c 'import ipykernel, jupyter_client' 2>/dev/null || skip "python3-ipykernel or jupyter-client missing"
  local sdk
  command -v node >/dev/null && sdk=$("$AGSX_SRCDIR/test/code/npm-install" 2>/dev/null) ||
    skip "npm @e2b/code-interpreter not installable"
  serve_start
  run env E2B_SDK="$sdk" E2B_API_URL="$U" E2B_SANDBOX_URL="$U" E2B_API_KEY="$KEY" \
    timeout --kill-after=5 120 node "$AGSX_SRCDIR/test/serve/parity-code.mjs"
  [ "$status" = 0 ] && [ "${lines[${#lines[@]}-1]}" = ok ] || {
    printf '%s\n' "$output" | sed 's/^/#   /' >&3
    sed 's/^/# serve: /' "$T/serve.log" | tail -30 >&3
    false
  }
  wait_no_sandboxes
}
