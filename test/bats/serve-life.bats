#!/usr/bin/env bats
# test-runner: parallel
# agsx serve: E2B's sandbox lifecycle (autoPause / lifecycle.onTimeout
# 'pause', autoResume) and the refusals of network updates, over curl and
# the unmodified npm `e2b` SDK (test/serve/lifecycle.mjs). The same server
# set-up as serve.bats: a server per test on a free loopback port, stopped
# and checked for leaked fds by teardown.

load helpers

bats_require_minimum_version 1.5.0

KEY=e2b_0123456789abcdef0123456789abcdef01234567

setup_file() { serve_setup_file; }

setup() { serve_setup; }

teardown() { serve_teardown; }

field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

# The record's paused flag of the one sandbox of the test.
paused() { ax ls --json | python3 -c 'import json,sys; v=json.load(sys.stdin); print(v[0]["paused"])'; }

wait_gone() { # the sandbox's record goes (the supervisor removed it)
  poll $(slow 100) eval "[ -z \"\$(ax ls -q --no-trunc | grep '^$1')\" ]"
}

run_sdk() {
  [ -n "$NODE_LATEST" ] || skip "the npm e2b SDK is not installed (npm or its registry unreachable)"
  run env E2B_SDK="$NODE_LATEST" E2B_API_URL="$U" E2B_SANDBOX_URL="$U" E2B_API_KEY="$KEY" \
    E2B_TEMPLATE=bb timeout --kill-after=5 "${SDK_TIMEOUT:-120}" node "$AGSX_SRCDIR/test/serve/$1"
  if [ "$status" -ne 0 ] || [ "${#lines[@]}" -eq 0 ] || [ "${lines[${#lines[@]}-1]}" != ok ]; then
    echo "# node $1: status $status" >&3
    printf '%s\n' "$output" | sed 's/^/#   /' >&3
    sed 's/^/# serve: /' "$T/serve.log" | tail -30 >&3
    return 1
  fi
}

@test "serve-life: SDK: lifecycle.onTimeout 'pause' pauses with memory, connect and autoResume resume" {
  serve_start
  SDK_TIMEOUT=$(slow 120) run_sdk lifecycle.mjs
}

@test "serve-life: a sandbox paused at its timeout stays paused without the server; connect resumes it" {
  serve_start
  run api POST /v2/sandboxes '{"templateID":"bb","timeout":2,"autoPause":true}'
  [ "$(status_of "$output")" = 201 ]
  id=$(field "$(body_of "$output")" sandboxID)
  run api GET "/sandboxes/$id"
  [[ $output == *'"lifecycle":{"onTimeout":"pause","autoResume":false}'* ]]
  # the server goes (SIGKILL); the supervisor pauses the sandbox on its own
  kill -9 "$SRV_PID"
  wait "$SRV_PID" 2>/dev/null || true
  SRV_PID=
  poll $(slow 100) eval '[ "$(paused)" = True ]'
  ax ls | grep -q paused
  # past its deadline and the reaper's grace for a stuck supervisor (any
  # agsx invocation reaps): still there, paused
  deadline=$(ax inspect "$id" | python3 -c 'import json,sys; v=json.load(sys.stdin); v=v[0] if isinstance(v,list) else v; print(v["deadline_ns"] // 10**9)')
  sleep $((deadline + 16 - $(date +%s)))
  ax ls | grep -q paused
  serve_start
  run api GET "/sandboxes/$id"
  [[ $output == *'"state":"paused"'* ]]
  # no autoResume: an envd request does not resume it
  ax ls | grep -q paused
  run api POST "/sandboxes/$id/connect" '{"timeout":30}'
  [ "$(status_of "$output")" = 201 ]
  [ "$(paused)" = False ]
  run api GET "/sandboxes/$id"
  [[ $output == *'"state":"running"'* ]]
  # a second connect: running already (200), never shortened
  run api POST "/v2/sandboxes/$id/connect" '{"timeout":5}'
  [ "$(status_of "$output")" = 200 ]
  left=$(ax ls --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["time_left"])')
  [ "$left" -gt 20 ]
  api DELETE "/sandboxes/$id" >/dev/null
}

@test "serve-life: bad lifecycle values get 400 (or 501) in E2B's shape and create nothing" {
  serve_start
  for b in '{"templateID":"bb","autoPause":"yes"}' \
    '{"templateID":"bb","autoPauseMemory":1}' \
    '{"templateID":"bb","autoResume":true}' \
    '{"templateID":"bb","autoResume":{"enabled":"yes"}}' \
    '{"templateID":"bb","autoResume":{"enabled":true,"x":1}}' \
    '{"templateID":"bb","autoResume":{"enabled":true}}' \
    '{"templateID":"bb","autoPause":true,"autoPauseMemory":false,"autoResume":{"enabled":true}}'; do
    run api POST /v2/sandboxes "$b"
    [ "$(status_of "$output")" = 400 ] || { echo "$b: $output" >&3; false; }
    [[ $(body_of "$output") == '{"code":400,"message":"'* ]]
  done
  run api POST /v2/sandboxes '{"templateID":"bb","autoPause":true,"autoPauseMemory":false}'
  [ "$(status_of "$output")" = 501 ]
  [[ $(body_of "$output") == '{"code":501,"message":"agsx: '* ]]
  [ -z "$(ax ls -q)" ]
  # autoPause false and autoResume false are the default, accepted
  run api POST /v2/sandboxes '{"templateID":"bb","autoPause":false,"autoResume":{"enabled":false}}'
  [ "$(status_of "$output")" = 201 ]
  id=$(field "$(body_of "$output")" sandboxID)
  run api GET "/sandboxes/$id"
  [[ $output == *'"lifecycle":{"onTimeout":"kill","autoResume":false}'* ]]
  # connect cannot turn autoPause on afterwards
  run api POST "/sandboxes/$id/resume" '{"autoPause":true}'
  [ "$(status_of "$output")" = 501 ]
  api DELETE "/sandboxes/$id" >/dev/null
}

@test "serve-life: PUT network: unknown fields 400, rules and egressProxy 501, nothing changed" {
  serve_start
  run api POST /v2/sandboxes '{"templateID":"bb","timeout":60}'
  id=$(field "$(body_of "$output")" sandboxID)
  for b in '{"allowOut":["x.org"],"bogus":1}' '{"allow_internet_access":"no"}' \
    '{"denyOut":["x.org"]}' '{"allowOut":["a*b"]}' '{"denyOut":"1.2.3.4"}'; do
    run api PUT "/sandboxes/$id/network" "$b"
    [ "$(status_of "$output")" = 400 ] || { echo "$b: $output" >&3; false; }
    [[ $(body_of "$output") == '{"code":400,"message":"'* ]]
  done
  # a domain in denyOut: E2B's 400 (domains only in allowOut)
  run api PUT "/sandboxes/$id/network" '{"denyOut":["*.x.org"]}'
  [ "$(status_of "$output")" = 400 ]
  [[ $output == *"only IP addresses and CIDRs can be denied"* ]]
  run api POST /v2/sandboxes '{"templateID":"bb","network":{"denyOut":["x.org"]}}'
  [ "$(status_of "$output")" = 400 ]
  [[ $output == *"only IP addresses and CIDRs can be denied"* ]]
  [ "$(ax ls -q | wc -l)" = 1 ]
  for b in '{"rules":{"x.org":[{"transform":{}}]}}' '{"egressProxy":{"address":"p:1080"}}'; do
    run api PUT "/sandboxes/$id/network" "$b"
    [ "$(status_of "$output")" = 501 ] || { echo "$b: $output" >&3; false; }
  done
  api DELETE "/sandboxes/$id" >/dev/null
}

@test "serve-life: a fork keeps its source's lifecycle" {
  private_cgroup_parent # for the gc at the end (helpers.bash)
  serve_start
  run api POST /v2/sandboxes '{"templateID":"bb","timeout":60,"autoPause":true,"autoResume":{"enabled":true}}'
  [ "$(status_of "$output")" = 201 ]
  id=$(field "$(body_of "$output")" sandboxID)
  run api POST "/sandboxes/$id/fork" '{"timeout":60}'
  [ "$(status_of "$output")" = 201 ]
  fork=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])[0]["sandbox"]["sandboxID"])' "$(body_of "$output")")
  run api GET "/sandboxes/$fork"
  [[ $output == *'"lifecycle":{"onTimeout":"pause","autoResume":true}'* ]]
  for x in $id $fork; do api DELETE "/sandboxes/$x" >/dev/null; done
  for x in $id $fork; do wait_gone "$x"; done
  AGSX_GC_MIN_AGE=0 ax gc >/dev/null # the fork's layer
}
