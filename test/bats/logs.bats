#!/usr/bin/env bats
# test-runner: parallel
# agsx logs: a detached sandbox's own stdout and stderr, kept in a bounded
# log by its supervisor (sandbox/logbuf.h), docker logs semantics.

load helpers

bats_require_minimum_version 1.5.0

setup_file() { busybox_setup_file; }

setup() { busybox_setup 60; }

# Starts a detached sandbox running sh -c "$1"; its id in $id.
start_sh() {
  id=$(ax run -d busybox sh -c "$1") || { echo "# run -d failed" >&3; return 1; }
  echo "$id" >>"$T/ids"
}

# logs_are SANDBOX TEXT: polls (at most 10 s) until `agsx logs SANDBOX` is TEXT.
logs_are() { poll 100 logs_is "$1" "$2"; }
logs_is() { [ "$(ax logs "$1" 2>/dev/null)" = "$2" ]; }

@test "logs: stdout to stdout, stderr to stderr, after the sandbox ended" {
  start_sh 'echo out1; echo err1 >&2; echo out2'
  ax wait "$id" >/dev/null
  run --separate-stderr ax logs "$id"
  assert_success
  [ "$output" = $'out1\nout2' ] || { show_run; return 1; }
  [ "$stderr" = err1 ] || { echo "# stderr: $stderr" >&3; return 1; }
}

@test "logs: by name and prefix; output written while no reader existed is there" {
  id=$(ax run -d --name talker busybox sh -c 'for i in 1 2 3; do echo line$i; done; sleep 300')
  echo "$id" >>"$T/ids"
  logs_are talker $'line1\nline2\nline3' || true
  run_ax logs talker
  assert_success
  [ "$output" = $'line1\nline2\nline3' ] || { show_run; return 1; }
  run_ax logs "${id:0:8}"
  assert_success
  [ "$output" = $'line1\nline2\nline3' ] || { show_run; return 1; }
}

@test "logs --tail N: the last N lines, stdout and stderr together" {
  # (Pauses between the streams: two pipes read in one round lose their
  # relative order, as docker's do.)
  start_sh 'for i in 1 2 3 4 5; do echo o$i; done; sleep 0.3; echo e6 >&2; sleep 0.3; printf partial'
  ax wait "$id" >/dev/null
  run_ax logs --tail 2 "$id"
  assert_success
  [ "$output" = $'e6\npartial' ] || { show_run; return 1; }
  run_ax logs -n 0 "$id"
  assert_success
  [ -z "$output" ] || { show_run; return 1; }
  run_ax logs --tail 100 "$id"
  assert_success
  [ "$(printf '%s\n' "$output" | wc -l)" = 7 ] || { show_run; return 1; }
  run_ax logs --tail x "$id"
  assert_agsx_error "invalid --tail"
}

@test "logs -f: follows until the sandbox ends, then exits" {
  start_sh 'echo a; sleep 1; echo b; sleep 1; echo c'
  local t0=$SECONDS
  run_ax logs -f "$id"
  assert_success
  [ "$output" = $'a\nb\nc' ] || { show_run; return 1; }
  [ $((SECONDS - t0)) -ge 1 ] && [ $((SECONDS - t0)) -lt 20 ] || {
    echo "# took $((SECONDS - t0)) s" >&3
    return 1
  }
}

@test "logs -f: a stopped sandbox ends the follow (kill, deadline)" {
  start_sh 'echo up; sleep 300'
  (logs_are "$id" up || true; sleep 1; ax kill "$id" >/dev/null) &
  run_ax logs -f "$id"
  wait
  assert_success
  [ "$output" = up ] || { show_run; return 1; }
  id=$(ax run -d --timeout 2 busybox sh -c 'echo soon; sleep 300')
  echo "$id" >>"$T/ids"
  run_ax logs -f "$id"
  assert_success
  [ "$output" = soon ] || { show_run; return 1; }
}

@test "logs -t: each line has its RFC 3339 time" {
  start_sh 'echo one; echo two'
  ax wait "$id" >/dev/null
  run_ax logs -t "$id"
  assert_success
  local re='^20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{9}Z (one|two)$'
  [ "$(printf '%s\n' "$output" | grep -cE "$re")" = 2 ] || { show_run; return 1; }
}

@test "logs: a flood of output stays within the cap (AGSX_LOG_SIZE), the newest kept" {
  export AGSX_LOG_SIZE=256k
  # 4 MiB of numbered lines, the last one known.
  start_sh 'i=0; while [ $i -lt 60000 ]; do echo "line $i ................................................"; i=$((i+1)); done; echo last-line'
  ax wait "$id" >/dev/null
  local kept
  kept=$(du -sb "$STATE/$id/log" | cut -f1)
  [ "$kept" -le $((256 * 1024 + 65536)) ] || { echo "# kept $kept bytes" >&3; return 1; }
  run --separate-stderr ax logs "$id"
  assert_success
  [ "${output##*$'\n'}" = last-line ] || { echo "# last: ${output##*$'\n'}" >&3; return 1; }
  [[ "$stderr" == *"bytes of older output were dropped"* ]] || { echo "# stderr: $stderr" >&3; return 1; }
  local n
  n=$(printf '%s\n' "$output" | wc -l)
  [ "$n" -gt 1000 ] && [ "$n" -lt 60000 ] || { echo "# $n lines" >&3; return 1; }
  AGSX_LOG_SIZE=1k run_ax run -d busybox true
  assert_agsx_error "log-size"
}

@test "logs: refused for unknown sandboxes and foreground ones; gone with rm" {
  run_ax logs nosuchbox
  assert_agsx_error "no such sandbox"
  run_ax run --name fg busybox true
  assert_success
  run_ax logs fg
  assert_agsx_error "has no log"
  start_sh 'echo x'
  ax wait "$id" >/dev/null
  run_ax rm "$id"
  assert_success
  run_ax logs "$id"
  assert_agsx_error "no such sandbox"
  run_ax logs
  assert_agsx_error "expected one SANDBOX"
}

@test "logs: the detached supervisor's fds are not the command's (stdin is /dev/null)" {
  start_sh 'readlink /proc/self/fd/0; cat; echo done'
  ax wait "$id" >/dev/null
  run_ax logs "$id"
  assert_success
  [ "$output" = $'/dev/null\ndone' ] || { show_run; return 1; }
}

@test "logs -f: ends when the supervisor is killed (no end record)" {
  start_sh 'echo up; sleep 300'
  logs_are "$id" up || true
  local sup
  sup=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["supervisor"]["pid"])' "$STATE/$id/state.json")
  ax logs -f "$id" >"$T/out" 2>&1 &
  local lp=$! i
  # the follower printed what there was (and follows) before the kill
  for i in $(seq 100); do [ "$(cat "$T/out")" = up ] && break; sleep 0.1; done
  kill -9 "$sup"
  for i in $(seq 1 50); do
    kill -0 "$lp" 2>/dev/null || break
    sleep 0.1
  done
  ! kill -0 "$lp" 2>/dev/null || { kill "$lp"; echo "# logs -f still runs" >&3; return 1; }
  wait "$lp"
  [ "$(cat "$T/out")" = up ]
}

@test "exec -d: the supervisor owns the process; logs --exec PID shows its output" {
  id=$(ax run -d busybox sleep 300)
  echo "$id" >>"$T/ids"
  local p
  run_ax exec -d -e X=1 "$id" sh -c 'echo out $X; echo err >&2; sleep 1; echo later'
  assert_success
  p=$output
  [[ "$p" =~ ^[0-9]+$ ]] || { show_run; return 1; }
  run --separate-stderr ax logs -f --exec "$p" "$id"
  [ "$status" -eq 0 ] && [ "$output" = $'out 1\nlater' ] && [ "$stderr" = err ] || {
    show_run
    echo "# stderr: $stderr" >&3
    return 1
  }
  run_ax exec -d --json "$id" true
  assert_success
  [[ "$output" == "{\"id\":\"$id\",\"pid\":"*"}" ]] || { show_run; return 1; }
  run -127 ax exec -d "$id" nosuchcmd
  run_ax exec -d -t "$id" true
  assert_agsx_error "without a terminal"
  run_ax logs --exec 0 "$id"
  assert_agsx_error "invalid --exec"
  run_ax logs --exec 99999 "$id"
  assert_agsx_error "no such process"
  # The sandbox's end ends it (and its log).
  p=$(ax exec -d "$id" sleep 300)
  ax kill "$id" >/dev/null
  run_ax logs --exec "$p" "$id"
  assert_success
}
