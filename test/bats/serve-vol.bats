#!/usr/bin/env bats
# test-runner: parallel
# agsx serve's volumes (api/volumes.c over sandbox/volume.h): E2B's /volumes
# and volumeMounts, with curl for the wire shapes and the unmodified npm
# `e2b` SDK (test/serve/volume.mjs) for a volume two sandboxes share; the
# volumes are the CLI's (agsx volume ls/rm). Secrets are refused (501).

load helpers

bats_require_minimum_version 1.5.0

KEY=e2b_0123456789abcdef0123456789abcdef01234567

setup_file() { serve_setup_file; }

setup() { serve_setup; }

teardown() { serve_teardown; }

# expect STATUS: the last `run api` answered STATUS with {"code": STATUS, ...}
# (or no error body for a 2xx).
expect() {
  if [ "$(status_of "$output")" != "$1" ]; then
    echo "# expected $1, got: $output" >&3
    return 1
  fi
  [[ $1 == 2* ]] && return 0
  python3 -c 'import json,sys; b=json.loads(sys.argv[1]); assert b["code"]==int(sys.argv[2]) and b["message"], b' \
    "$(body_of "$output")" "$1"
}

@test "serve-vol: /volumes create, list, get, delete in E2B's shapes; the CLI sees the same" {
  serve_start
  run api POST /volumes '{"name":"v1"}'
  expect 201
  [ "$(body_of "$output")" = '{"volumeID":"v1","name":"v1","token":""}' ]
  run api POST /volumes '{"name":"v1"}'
  expect 409
  run api GET /volumes
  expect 200
  [ "$(body_of "$output")" = '[{"volumeID":"v1","name":"v1"}]' ]
  run api GET /volumes/v1
  expect 200
  [ "$(body_of "$output")" = '{"volumeID":"v1","name":"v1","token":""}' ]
  run_ax volume ls -q
  [ "$output" = v1 ]
  ax volume create v2 >/dev/null
  run api GET /volumes
  [ "$(body_of "$output")" = '[{"volumeID":"v1","name":"v1"},{"volumeID":"v2","name":"v2"}]' ]
  run api DELETE /volumes/v1
  expect 204
  run api DELETE /volumes/v1
  expect 404
  run api GET /volumes/v1
  expect 404
  run_ax volume ls -q
  [ "$output" = v2 ]
  # what agsx does not serve: the volume content API
  run api GET '/volumecontent/v2/dir?path=/'
  expect 501
}

@test "serve-vol: bad names and bodies get 400, nothing is made" {
  serve_start
  local b
  for b in '{"name":"a/b"}' '{"name":".."}' '{"name":"a b"}' '{"name":""}' '{}' '{"name":1}' \
    '{"name":"x","size":1}' '[]' 'nope'; do
    run api POST /volumes "$b"
    expect 400
  done
  run api GET /volumes/..x
  expect 400
  run api GET /volumes/a%2Fb
  expect 400
  run api DELETE /volumes/a%2Fb
  expect 400
  run api GET /volumes
  [ "$(body_of "$output")" = '[]' ]
  # volume v exists: each of these is refused for what the body says
  ax volume create v >/dev/null
  for b in '[{"name":"a/b","path":"/x"}]' '[{"name":"v","path":"rel"}]' \
    '[{"name":"v","path":"/a/../b"}]' '[{"name":"v","path":"/proc/x"}]' '[{"name":"v"}]' \
    '[{"name":"v","path":"/x","ro":true}]' '{"name":"v"}' '[{"name":"v","path":"/a:b"}]' \
    '[{"name":"v","path":"/x"},{"name":"v","path":"/x"}]' '[{"name":"missing","path":"/x"}]'; do
    run api POST /v2/sandboxes "{\"templateID\":\"bb\",\"volumeMounts\":$b}"
    expect 400
  done
  run api GET /volumes
  [ "$(body_of "$output")" = '[{"volumeID":"v","name":"v"}]' ]
  [ -z "$(ax ls -q)" ]
}

@test "serve-vol: volumeMounts mount a volume; in use (409) until the sandbox ends" {
  serve_start
  ax volume create data >/dev/null
  run api POST /v2/sandboxes '{"templateID":"bb","timeout":60,"volumeMounts":[{"name":"data","path":"/mnt/data"}]}'
  expect 201
  local sid
  sid=$(body_of "$output" | python3 -c 'import json,sys; print(json.load(sys.stdin)["sandboxID"])')
  run api GET "/sandboxes/$sid"
  expect 200
  body_of "$output" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["volumeMounts"] == [{"name": "data", "path": "/mnt/data"}], d
assert d.get("metadata", {}) == {}, d'
  run api GET /v2/sandboxes
  body_of "$output" | python3 -c '
import json, sys
assert json.load(sys.stdin)[0]["volumeMounts"] == [{"name": "data", "path": "/mnt/data"}]'
  ax exec "$(ax ls -q)" sh -c 'echo hi > /mnt/data/f'
  [ "$(cat "$ROOT/volumes/data/_data/f")" = hi ]
  run api DELETE /volumes/data
  expect 409
  run_ax volume rm data
  assert_agsx_error "in use"
  run api DELETE "/sandboxes/$sid"
  expect 204
  local i
  for i in $(seq 50); do
    run api DELETE /volumes/data
    [ "$(status_of "$output")" = 409 ] || break
    sleep 0.1
  done
  expect 204
  [ ! -e "$ROOT/volumes/data" ]
}

@test "serve-vol: secrets are refused in E2B's shape" {
  serve_start
  run api POST /secrets '{"name":"k","value":"v"}'
  expect 501
  [[ $output == *'TLS-intercepting proxy'* ]]
  run api GET /secrets
  expect 501
  run api DELETE /secrets/k
  expect 501
}

@test "serve-vol: the SDK: a volume two sandboxes share, kept, listed, removed; bad names" {
  [ -n "$NODE_LATEST" ] || skip "the npm e2b SDK is not installed (npm or its registry unreachable)"
  serve_start
  run env E2B_SDK="$NODE_LATEST" E2B_API_URL="$U" E2B_SANDBOX_URL="$U" E2B_API_KEY="$KEY" \
    E2B_TEMPLATE=bb timeout --kill-after=5 180 node "$AGSX_SRCDIR/test/serve/volume.mjs"
  if [ "$status" -ne 0 ] || [ "${lines[${#lines[@]}-1]}" != ok ]; then
    printf '%s\n' "$output" | sed 's/^/#   /' >&3
    sed 's/^/# serve: /' "$T/serve.log" | tail -30 >&3
    return 1
  fi
  run_ax volume ls -q
  [ -z "$output" ]
}
