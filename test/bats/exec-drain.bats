#!/usr/bin/env bats
# test-runner: parallel
# agsx exec --json when the command leaves a background process holding its
# stdout/stderr: exec returns once the command ended and its output went
# quiet (bounded), without spinning, with signals and --timeout live.

load helpers

bats_require_minimum_version 1.5.0

setup_file() { busybox_setup_file; }

setup() {
  busybox_setup 40
  run_ax run -d --name box busybox sleep 300
  assert_success
}

json_field() { python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }

# CPU ticks (user+system) a process used.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }

@test "exec --json: a background process holding stdout does not keep exec, nor make it spin" {
  local t0=$SECONDS
  run_ax exec --json box sh -c 'sleep 30 & echo hi'
  assert_success
  [ $((SECONDS - t0)) -lt 6 ] || { echo "# took $((SECONDS - t0)) s" >&3; return 1; }
  [ "$(json_field stdout <<<"$output")" = hi ] || { show_run; return 1; }
  [ "$(json_field exit_code <<<"$output")" = 0 ] || { show_run; return 1; }
  [ "$(json_field stop_reason <<<"$output")" = exit ] || { show_run; return 1; }
}

@test "exec --json: output a background process keeps writing is cut off after a bound" {
  local t0=$SECONDS
  run_ax exec --json box sh -c 'echo first; (while :; do echo more; sleep 0.02; done) &'
  assert_success
  [ $((SECONDS - t0)) -lt 8 ] || { echo "# took $((SECONDS - t0)) s" >&3; return 1; }
  [[ "$(json_field stdout <<<"$output")" == first* ]] || { show_run; return 1; }
}

@test "exec --json: SIGTERM and --timeout stay live while the output is held open" {
  # The command itself runs long, with a background process on its stdout:
  # the deadline kills both and exec reports it promptly.
  local t0=$SECONDS
  run_ax exec --json --timeout 2s box sh -c 'sleep 60 & sleep 50'
  [ $((SECONDS - t0)) -lt 8 ] || { echo "# took $((SECONDS - t0)) s" >&3; return 1; }
  [ "$(json_field stop_reason <<<"$output")" = timeout ] || { show_run; return 1; }
  # SIGTERM to agsx exec: forwarded, the command ends, exec returns soon.
  "$AGSX" --root "$ROOT" --state "$STATE" exec --json box sh -c 'sleep 61 & sleep 51' >"$T/out" 2>&1 &
  local pid=$! i
  # the command runs (agsx exec's start, which uses CPU, is over), then 1 s
  for i in $(seq 100); do
    ax exec box sh -c 'ps -o args | grep -q "^sleep 51"' 2>/dev/null && break
    sleep 0.1
  done
  sleep 1
  local before
  before=$(cpu_ticks $pid)
  sleep 1
  # Not spinning while it waits (a busy loop uses ~100 ticks a second).
  [ $(( $(cpu_ticks $pid) - before )) -lt 20 ] || { echo "# agsx exec spins" >&3; kill -9 $pid; return 1; }
  kill -TERM $pid
  for i in $(seq 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  if kill -0 $pid 2>/dev/null; then
    echo "# agsx exec ignored SIGTERM" >&3
    kill -9 $pid
    return 1
  fi
  wait $pid || true
  [ "$(json_field exit_code <"$T/out")" = 143 ] || { cat "$T/out" >&3; return 1; }
}
