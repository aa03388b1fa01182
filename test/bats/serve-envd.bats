#!/usr/bin/env bats
# test-runner: parallel
# envd >= 0.6 through `agsx serve` (issue 25): what the newest npm `e2b` SDK
# gates on the envdVersion agsx reports (file metadata, watch events with
# entries, network mounts allowed), with the unmodified SDK
# (test/serve/envd06.mjs; skipped while the SDK is missing), and curl for
# what the SDK checks client-side (metadata bounds) or never sends
# (POST /files/compose).

load helpers

bats_require_minimum_version 1.5.0

setup_file() {
  export BB="$BATS_FILE_TMPDIR/bb"
  "$FIXTURES/busybox-image" "$BB" --probe "$PROBE" >/dev/null
  export NODE_LATEST=
  if command -v node >/dev/null && [ -f "$AGSX_SRCDIR/test/serve/lib.mjs" ] &&
    mods=$("$AGSX_SRCDIR/test/serve/npm-install" 2>/dev/null); then
    NODE_LATEST=$(echo "$mods" | sed -n 1p)
  fi
  # The sandbox's writable layer is a tmpfs: user xattrs there since 6.6.
  local probe
  probe=$(mktemp /dev/shm/agsx-xattr-XXXXXX)
  export META=0
  python3 -c 'import os,sys; os.setxattr(sys.argv[1], "user.agsx", b"1")' "$probe" 2>/dev/null &&
    META=1
  rm -f "$probe"
}

KEY=e2b_0123456789abcdef0123456789abcdef01234567

setup() {
  common_setup
  AX_TIMEOUT=60
  SRV_PID=
}

teardown() {
  local rc=0
  serve_stop || rc=1
  sandbox_teardown || rc=1
  return $rc
}

serve_start() {
  "$AGSX" serve --help >/dev/null 2>&1 || skip "agsx serve is not built yet"
  ax image load --tag bb "$BB" >/dev/null
  api_serve_start --template bb=bb "$@"
}

run_sdk() { # run_sdk SCRIPT: the scenario with the latest SDK; its last line must be "ok"
  [ -n "$NODE_LATEST" ] || skip "the npm e2b SDK or test/serve/lib.mjs is missing"
  local script=$1
  run env E2B_SDK=$NODE_LATEST E2B_API_URL=$U E2B_SANDBOX_URL=$U E2B_API_KEY=$KEY E2B_TEMPLATE=bb \
    META=$META timeout --kill-after=5 "${SDK_TIMEOUT:-120}" node "$AGSX_SRCDIR/test/serve/$script"
  if [ "$status" -ne 0 ] || [ "${lines[${#lines[@]}-1]}" != ok ]; then
    echo "# node $script: status $status" >&3
    printf '%s\n' "$output" | sed 's/^/#   /' >&3
    sed 's/^/# serve: /' "$T/serve.log" | tail -30 >&3
    return 1
  fi
}

# sbx_create: a sandbox through the API; $SID, $TOK, $EH (its envd headers)
sbx_create() {
  local out
  out=$(curl -s -X POST -H "X-API-KEY: $KEY" -H 'Content-Type: application/json' \
    --data-binary '{"templateID":"bb","timeout":120}' "$U/v2/sandboxes")
  SID=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["sandboxID"])' "$out")
  TOK=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["envdAccessToken"])' "$out")
  EH=(-H "E2b-Sandbox-Id: $SID" -H "E2b-Sandbox-Port: 49983" -H "X-Access-Token: $TOK")
}

rpc() { # rpc METHOD JSON: a unary Connect call of the Filesystem service
  curl -s "${EH[@]}" -H 'Content-Type: application/json' -H 'Connect-Protocol-Version: 1' \
    --data-binary "$2" -w '\n%{http_code}' "$U/filesystem.Filesystem/$1"
}

put() { # put PATH DATA [CURL ARGS]: a raw upload; the body, then the status on its own line
  local p=$1 d=$2
  shift 2
  printf '%s' "$d" | curl -s "${EH[@]}" -H 'Content-Type: application/octet-stream' "$@" \
    --data-binary @- -w '\n%{http_code}' "$U/files?path=$p"
}

@test "sdk envd 0.6: the reported envdVersion lets the SDK use metadata, watch entries, network mounts" {
  serve_start
  run curl -s -X POST -H "X-API-KEY: $KEY" -H 'Content-Type: application/json' \
    --data-binary '{"templateID":"bb","timeout":30}' "$U/v2/sandboxes"
  [[ $output == *'"envdVersion":"0.6.4"'* ]]
  id=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["sandboxID"])' "$output")
  curl -s -X DELETE -H "X-API-KEY: $KEY" "$U/sandboxes/$id"
  run_sdk envd06.mjs
}

@test "curl metadata: X-Metadata-* headers, their bounds, and entries that show them" {
  [ "$META" = 1 ] || skip "no user xattrs on tmpfs here (Linux before 6.6): the SDK test checks the 501"
  serve_start
  sbx_create
  run put /tmp/a.txt one -H 'X-Metadata-Owner: team a' -H 'x-metadata-owner: second' \
    -H 'X-Metadata-Empty;'
  [ "${lines[1]}" = 200 ]
  [[ ${lines[0]} == *'"metadata":{"empty":"","owner":"team a"}'* ]]
  run rpc ListDir '{"path":"/tmp","depth":1}'
  [[ $output == *'"name":"a.txt"'*'"metadata":{"empty":"","owner":"team a"}'* ]]
  # a key of 247 bytes, and a set over 4096 bytes: 400, nothing written
  long=$(printf 'k%.0s' $(seq 247))
  run put /tmp/a.txt two -H "X-Metadata-$long: v"
  [ "${lines[1]}" = 400 ]
  [[ ${lines[0]} == *'"code":400'*'exceeds 246 bytes'* ]]
  big=$(printf 'v%.0s' $(seq 2100))
  run put /tmp/a.txt two -H "X-Metadata-a: $big" -H "X-Metadata-b: $big"
  [ "${lines[1]}" = 400 ]
  [[ ${lines[0]} == *'exceeds 4096 bytes'* ]]
  run curl -s "${EH[@]}" "$U/files?path=/tmp/a.txt"
  [ "$output" = one ]
  run rpc Stat '{"path":"/tmp/a.txt"}'
  [[ $output == *'"metadata":{"empty":"","owner":"team a"}'* ]]
}
