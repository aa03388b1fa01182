#!/usr/bin/env bats
# test-runner: parallel
# agsx pause / unpause (sandbox/freeze.h): the freezer on cgroup v1 (where
# the host has a v1 freezer hierarchy) and on cgroup v2 (wherever the host
# mounts it, as in cgroup2.bats: /sys/fs/cgroup on a v2 host, a v1 host's
# cgroup2 mount as agsx's v2 root); the deadline and kill of a paused
# sandbox, which leave nothing frozen; exec refused; bad input.

load helpers

bats_require_minimum_version 1.5.0

setup_file() {
  busybox_setup_file
}

setup() {
  common_setup
  AX_TIMEOUT=40
  private_cgroup_parent
  V2=$(cgroup2_mount) || V2=
  ax image load "$BB" >/dev/null
}

use_v2() {
  [ -n "$V2" ] || skip "the host has no cgroup v2 hierarchy (no cgroup2 mount in /proc/self/mountinfo)"
  # A v1 host's own cgroup root is v1: point agsx at the v2 mount.
  cgroup_host_is_v2 || export AGSX_CGROUP_ROOT=$V2
  # Without the pids controller there: no default pids limit to set.
  grep -qw pids "$V2/cgroup.controllers" || export AGSX_DEFAULT_PIDS=0
}

# use_v1: the host's v1 hierarchies, with a freezer.
use_v1() {
  cgroup_host_is_v2 && skip "the host has no cgroup v1 hierarchies (it is cgroup v2)"
  cgroup_v1_mount freezer >/dev/null || skip "the host has no v1 freezer hierarchy"
}

teardown() {
  local rc=0
  sandbox_teardown || rc=1
  # (a v1 host's cgroup2 mount: common_teardown looks under /sys/fs/cgroup)
  if [ -n "${AGSX_CGROUP_ROOT:-}" ] && [ -d "$V2/$AGSX_CGROUP_PARENT" ]; then
    find "$V2/$AGSX_CGROUP_PARENT" -mindepth 1 -depth -type d -exec rmdir {} + 2>/dev/null
    local left
    left=$(find "$V2/$AGSX_CGROUP_PARENT" -mindepth 1 -type d)
    [ -z "$left" ] || { echo "# leaked v2 cgroups: $left" >&3; rc=1; }
    rmdir "$V2/$AGSX_CGROUP_PARENT" || rc=1
  fi
  return $rc
}

COUNTER='i=0; while :; do i=$((i+1)); echo $i >/tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.05; done'

count() { ax cp box:/tmp/count - | tar -xO; }

# The counter stops while paused and goes on from where it was (memory
# kept) after unpause; ls, ls --json and inspect say paused.
pause_and_resume() {
  run_ax run -d --name box --timeout 60s busybox sh -c "$COUNTER"
  assert_success
  # the counter's first file is there (at most 10 s on a loaded machine)
  local i
  for i in $(seq 100); do [ -n "$(count 2>/dev/null)" ] && break; sleep 0.1; done
  run_ax pause box
  assert_success
  [ "$output" = box ]
  local a b c
  a=$(count)
  sleep 0.6
  b=$(count)
  [ -n "$a" ] && [ "$a" = "$b" ] || { echo "# counter moved while paused: $a $b" >&3; return 1; }
  run_ax ls
  assert_output_contains " paused "
  run_ax ls --json
  python3 -c 'import json,sys; v=json.load(sys.stdin); assert v[0]["status"]=="paused" and v[0]["paused"] is True, v' <<<"$output"
  run_ax inspect box
  python3 -c 'import json,sys; v=json.load(sys.stdin)[0]; assert v["status"]=="paused" and v["paused_at"], v' <<<"$output"
  run_ax unpause box
  assert_success
  # It goes on from b (however loaded the host: within 5 s), not from 0.
  for _ in $(seq 50); do
    sleep 0.1
    c=$(count)
    [ -n "$c" ] && [ "$c" -gt "$b" ] && break
  done
  [ "$c" -gt "$b" ] && [ "$c" -lt $((b + 120)) ] || { echo "# counter after unpause: $b -> $c" >&3; return 1; }
  run_ax ls --json
  python3 -c 'import json,sys; v=json.load(sys.stdin); assert v[0]["status"]=="running" and v[0]["paused"] is False, v' <<<"$output"
}

# A paused sandbox still ends at its deadline; nothing is left frozen.
deadline_while_paused() {
  run_ax run -d --name box --timeout 3s busybox sh -c "$COUNTER"
  assert_success
  local id=$output
  run_ax exec box sh -c 'sleep 300 >/dev/null 2>&1 & echo ok'
  assert_success
  run_ax pause box
  assert_success
  local t0=$SECONDS
  run_ax wait box
  [ "$output" = 143 ] || { show_run; return 1; }
  [ $((SECONDS - t0)) -lt 10 ] || { echo "# ended after $((SECONDS - t0)) s" >&3; return 1; }
  run_ax ls -a --json
  python3 -c 'import json,sys; v=json.load(sys.stdin); assert v[0]["stop_reason"]=="timeout" and v[0]["status"]=="exited" and v[0]["paused"] is False, v' <<<"$output"
  for _ in $(seq 30); do [ -z "$(sandbox_cgroups)" ] && break; sleep 0.1; done
  [ -z "$(sandbox_cgroups)" ] || { echo "# cgroups left: $(sandbox_cgroups)" >&3; return 1; }
  [ -z "$(sandbox_processes)" ] || { echo "# processes left: $(sandbox_processes)" >&3; return 1; }
}

@test "pause: cgroup v1: a counting process stops and goes on after unpause" {
  use_v1
  pause_and_resume
}

@test "pause: cgroup v2: a counting process stops and goes on after unpause" {
  use_v2
  pause_and_resume
}

@test "pause: cgroup v1: a paused sandbox still dies on its deadline, nothing left frozen" {
  use_v1
  deadline_while_paused
}

@test "pause: cgroup v2: a paused sandbox still dies on its deadline, nothing left frozen" {
  use_v2
  deadline_while_paused
}

@test "pause: kill of a paused sandbox ends it at once (its exec'd processes too)" {
  run_ax run -d --name box busybox sleep 300
  assert_success
  run_ax exec box sh -c 'sleep 301 >/dev/null 2>&1 & echo ok'
  assert_success
  run_ax pause box
  assert_success
  local t0=$SECONDS
  run_ax kill box
  assert_success
  [ $((SECONDS - t0)) -lt 6 ] || { echo "# kill took $((SECONDS - t0)) s" >&3; return 1; }
  run_ax ls -a --json
  python3 -c 'import json,sys; v=json.load(sys.stdin); assert v[0]["stop_reason"]=="killed", v' <<<"$output"
  for _ in $(seq 30); do [ -z "$(sandbox_cgroups)$(sandbox_processes)" ] && break; sleep 0.1; done
  [ -z "$(sandbox_cgroups)$(sandbox_processes)" ] || { echo "# left: $(sandbox_cgroups) $(sandbox_processes)" >&3; return 1; }
}

@test "pause: kill -s KILL of a paused sandbox ends it at once (v1's freezer holds SIGKILLed tasks)" {
  run_ax run -d --name box busybox sleep 300
  assert_success
  run_ax exec box sh -c 'sleep 301 >/dev/null 2>&1 & echo ok'
  assert_success
  run_ax pause box
  assert_success
  run_ax kill -s KILL box
  assert_success
  run_ax wait box
  [ "$output" = 137 ] || { show_run; return 1; }
  run_ax ls -a --json
  python3 -c 'import json,sys; v=json.load(sys.stdin); assert v[0]["status"]=="exited" and not v[0].get("paused"), v' <<<"$output"
  for _ in $(seq 30); do [ -z "$(sandbox_cgroups)$(sandbox_processes)" ] && break; sleep 0.1; done
  [ -z "$(sandbox_cgroups)$(sandbox_processes)" ] || { echo "# left: $(sandbox_cgroups) $(sandbox_processes)" >&3; return 1; }
}

@test "pause: exec into a paused sandbox is refused; cp still works" {
  run_ax run -d --name box busybox sleep 300
  assert_success
  run_ax pause box
  assert_success
  run_ax exec box true
  assert_agsx_error "is paused (agsx unpause it first)"
  echo hi >"$T/f"
  run_ax cp "$T/f" box:/tmp/f
  assert_success
  run_ax unpause box
  assert_success
  run_ax exec box cat /tmp/f
  assert_success
  [ "$output" = hi ]
}

@test "pause: a published port's connections wait while paused and are served after" {
  run_ax run -d --name box -p 0:80 busybox httpd -f -p 80 -h /etc
  assert_success
  local port
  port=$(ax port box 80 | sed 's/.*://')
  curl -fsS --max-time 5 "http://127.0.0.1:$port/hostname" >/dev/null
  run_ax pause box
  assert_success
  curl -sS --max-time 15 "http://127.0.0.1:$port/hostname" >"$T/body" 2>&1 &
  local cpid=$!
  sleep 1
  kill -0 "$cpid" || { echo "# answered while paused: $(cat "$T/body")" >&3; return 1; }
  run_ax unpause box
  assert_success
  wait "$cpid" || { echo "# no answer after unpause: $(cat "$T/body")" >&3; return 1; }
  [ -s "$T/body" ]
}

@test "pause: bad input: twice, not paused, ended, unknown, no operand" {
  run_ax run -d --name box busybox sleep 300
  assert_success
  run_ax pause box
  assert_success
  run_ax pause box
  assert_agsx_error "is paused already"
  run_ax unpause box
  assert_success
  run_ax unpause box
  assert_agsx_error "is not paused"
  run_ax kill box
  assert_success
  run_ax pause box
  assert_agsx_error "is not running"
  run_ax pause nosuch
  assert_agsx_error "nosuch"
  run_ax pause
  assert_agsx_error "give SANDBOX"
  run_ax unpause --frob box
  assert_agsx_error "unknown option"
}
