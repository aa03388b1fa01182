#!/usr/bin/env bats
# Sandboxes on a systemd host (issue 23): where systemd is PID 1 on the
# unified cgroup v2 hierarchy, every sandbox is a transient scope
# agsx.slice/agsx-<id>.scope that systemd delegates to agsx (host/cgroup.h):
# sandbox/ holds the sandbox and its limits, supervisor/ a detached
# sandbox's supervisor. Run by the guest lane (test/guest/lane: Debian 12,
# systemd 252); elsewhere every test skips, saying why.
#
# Units the tests start are named agsx-t$$-* and stopped in teardown.

load ../bats/helpers

bats_require_minimum_version 1.5.0

setup_file() {
  [ -d /run/systemd/system ] || skip "systemd is not PID 1 here (the guest lane has it)"
  [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] ||
    skip "/sys/fs/cgroup is not the unified cgroup v2 hierarchy"
  busybox_setup_file
}

setup() {
  busybox_setup 60
  U=agsx-t$$-$BATS_TEST_NUMBER
}

teardown() {
  local u
  for u in $(systemctl list-units --all --plain --no-legend "agsx-t$$-*" 2>/dev/null |
    awk '{print $1}'); do
    systemctl stop "$u" >/dev/null 2>&1 || true
    systemctl reset-failed "$u" >/dev/null 2>&1 || true
  done
  rm -f /run/systemd/system/agsx-t$$-*.service
  systemctl daemon-reload
  [ -z "${SRV_UNIT:-}" ] || systemctl stop "$SRV_UNIT" >/dev/null 2>&1 || true
  sandbox_teardown
}

scope() { echo "/sys/fs/cgroup/agsx.slice/agsx-$1.scope"; }
status_of() { ax ls -a --json | jq -r --arg id "$1" '.[] | select(.id == $id) | .status'; }
reason_of() { ax ls -a --json | jq -r --arg id "$1" '.[] | select(.id == $id) | .stop_reason'; }
is_status() { [ "$(status_of "$1")" = "$2" ]; }
gone() { [ ! -d "$1" ]; }

# unit_run UNIT CMD...: a service (a unit file in /run, so that it can be
# stopped and started again) that runs CMD, then stays (sleep), as a CI
# runner's or a shell's unit would.
unit_run() {
  local u=$1
  shift
  printf '%q ' "$@" >"$T/$u.sh"
  printf '>%q 2>%q; exec sleep 1000\n' "$T/$u.out" "$T/$u.err" >>"$T/$u.sh"
  printf '[Service]\nExecStart=/bin/bash %s\n' "$T/$u.sh" >"/run/systemd/system/$u.service"
  systemctl daemon-reload
  systemctl start "$u"
}

run_d_cmd() {
  echo env AGSX_PULL=never "$AGSX" --root "$ROOT" --state "$STATE" run -d "$@"
}

@test "systemd: agsx info names the systemd manager, the slice and why" {
  run_ax info
  assert_success
  assert_output_contains "manager systemd; sandboxes in agsx.slice/agsx-<id>.scope/sandbox"
  assert_output_contains "systemd is PID 1 on the unified cgroup v2 hierarchy"
  run_ax info --json
  [ "$(jq -r .cgroup.manager <<<"$output")" = systemd ] || { show_run; false; }
  # cgroupfs on request: today's placement
  AGSX_CGROUP_MANAGER=cgroupfs run_ax info
  assert_output_contains "manager cgroupfs; sandboxes in agsx/<id>"
  AGSX_CGROUP_MANAGER=bogus run_ax run --rm busybox true
  assert_agsx_error "invalid cgroup-manager \`bogus\`"
}

@test "systemd: run -d from a unit survives the unit's stop and restart; its deadline holds" {
  unit_run "$U" $(run_d_cmd --timeout 40 busybox sleep 1000)
  poll 100 test -s "$T/$U.out" || { cat "$T/$U.err" >&3; false; }
  id=$(cat "$T/$U.out")
  echo "$id" >>"$T/ids"
  is_status "$id" running
  # the scope is the sandbox's, not the unit's: the sandbox in sandbox/, its
  # supervisor in supervisor/, nothing in the scope itself
  [ -z "$(cat "$(scope "$id")/cgroup.procs")" ]
  [ -n "$(cat "$(scope "$id")/sandbox/cgroup.procs")" ]
  sup=$(cat "$(scope "$id")/supervisor/cgroup.procs")
  [ -n "$sup" ]
  ! grep -q "$U" "/proc/$sup/cgroup" || false
  # a person finds it by its name and image
  run systemctl status "agsx-$id.scope"
  [[ "$output" == *"agsx sandbox ${id:0:12} (busybox"* ]] || { echo "# $output" >&3; false; }
  run systemd-cgls --no-pager /agsx.slice
  [[ "$output" == *"agsx-$id.scope"* ]] || { echo "# $output" >&3; false; }
  # stop returns once the unit's cgroup is empty: the sandbox was not in it
  systemctl stop "$U"
  is_status "$id" running || { ax ls -a >&3; false; }
  # restart: the unit's new run starts another; the first still runs
  rm -f "$T/$U.out"
  systemctl start "$U"
  poll 300 test -s "$T/$U.out" || { cat "$T/$U.err" >&3; false; }
  id2=$(cat "$T/$U.out")
  echo "$id2" >>"$T/ids"
  rm -f "$T/$U.out"
  systemctl restart "$U"
  poll 300 test -s "$T/$U.out" || { cat "$T/$U.err" >&3; false; }
  echo "$(cat "$T/$U.out")" >>"$T/ids"
  is_status "$id" running
  is_status "$id2" running
  # the deadline is the supervisor's, and it did not move with the unit
  poll 600 is_status "$id" exited || { ax ls -a >&3; false; }
  [ "$(reason_of "$id")" = timeout ]
  poll 100 gone "$(scope "$id")"
}

@test "systemd: limits in sandbox/'s files; stats, exec, pause, kill" {
  id=$(rund --memory 64m --cpus 0.5 --pids 50 busybox sleep 1000)
  s=$(scope "$id")
  [ "$(cat "$s/sandbox/memory.max")" = 67108864 ]
  [ "$(cat "$s/sandbox/memory.swap.max")" = 0 ]
  [ "$(cat "$s/sandbox/cpu.max")" = "50000 100000" ]
  [ "$(cat "$s/sandbox/pids.max")" = 50 ]
  [[ "$(cat "$s/cgroup.subtree_control")" == *memory* ]]
  # systemd's own limit does not stand in agsx's way
  [ "$(systemctl show -P TasksMax "agsx-$id.scope")" = infinity ]
  run_ax stats --no-stream --json "$id"
  assert_success
  [ "$(jq -r '.[0].pids // .pids' <<<"$output")" -ge 1 ] || { show_run; false; }
  run_ax exec "$id" sh -c 'cat /proc/self/cgroup'
  assert_success
  ax exec -d "$id" sleep 300 >/dev/null 2>&1 || ax exec "$id" sh -c 'sleep 300 &' || true
  run_ax pause "$id"
  assert_success
  [ "$(cat "$s/sandbox/cgroup.freeze")" = 1 ]
  grep -q "frozen 1" "$s/sandbox/cgroup.events"
  run_ax unpause "$id"
  assert_success
  [ "$(cat "$s/sandbox/cgroup.freeze")" = 0 ]
  run_ax kill "$id"
  assert_success
  poll 100 is_status "$id" exited
  poll 100 gone "$s" || { ls -R "$s" >&3; false; }
}

@test "systemd: a foreground run is its init's scope, and dies with its caller" {
  run_ax run --rm --memory 48m busybox sh -c 'cat /proc/self/cgroup'
  assert_success
  [ "$output" = "0::/" ] || { show_run; false; }
  # the caller stays in its own unit: the scope has the init alone
  unit_run "$U" env AGSX_PULL=never "$AGSX" --root "$ROOT" --state "$STATE" run --name fg busybox sleep 1000
  poll 100 sh -c "systemctl show -P Description 'agsx-*.scope' 2>/dev/null | grep -q 'agsx sandbox fg'" || {
    systemctl list-units 'agsx-*' >&3
    false
  }
  note_sandbox_ids
  systemctl stop "$U"
  # its caller gone, the sandbox goes too, and so does its scope
  poll 100 sh -c "! systemctl show -P Description 'agsx-*.scope' 2>/dev/null | grep -q 'agsx sandbox fg'"
}

@test "systemd: OOM in sandbox/ is stop reason oom, foreground and detached" {
  run --separate-stderr ax run --json --memory 32m busybox probe alloc 200
  [ "$status" -eq 137 ] || { show_run; false; }
  [ "$(jq -r .stop_reason <<<"$output")" = oom ] || { show_run; false; }
  id=$(rund --memory 32m busybox probe alloc 200)
  poll 100 is_status "$id" exited
  [ "$(reason_of "$id")" = oom ] || { ax ls -a --json >&3; false; }
}

@test "systemd: systemctl stop of a sandbox's scope ends it; its record says killed" {
  id=$(rund busybox sleep 1000)
  systemctl stop "agsx-$id.scope"
  poll 100 is_status "$id" exited || { ax ls -a >&3; false; }
  [ "$(reason_of "$id")" = killed ] || { ax ls -a --json >&3; false; }
  poll 100 gone "$(scope "$id")"
}

@test "systemd: a pool's parked sandboxes are scopes; a claim runs in one" {
  run_ax pool create "p$$" --image busybox --size 1
  assert_success
  poll 100 sh -c "systemctl show -P Description 'agsx-*.scope' 2>/dev/null | grep -q 'agsx sandbox'"
  run_ax run --pool "p$$" --rm busybox sh -c 'cat /proc/self/cgroup'
  assert_success
  [[ "$output" == "0::/"* ]] || { show_run; false; }
  run_ax pool rm "p$$"
  assert_success
  note_sandbox_ids
}

@test "systemd: gc ends the scope a crash left" {
  id=$(rund busybox sleep 1000)
  sup=$(cat "$(scope "$id")/supervisor/cgroup.procs")
  kill -9 $sup
  # the sandbox died with its supervisor (pdeathsig): the scope empties
  # and systemd ends it; gc removes the record's remains
  poll 100 gone "$(scope "$id")" || { ls -R "$(scope "$id")" >&3; false; }
  run_ax gc
  assert_success
}

@test "systemd: gc stops a stale scope: its supervisor dead, a stray process left in it" {
  id=$(rund busybox sleep 1000)
  s=$(scope "$id")
  sup=$(cat "$s/supervisor/cgroup.procs")
  # what a crash can leave: a process of the supervisor's (here a stand-in)
  # still in the scope after the supervisor and its sandbox are gone
  sleep 1000 &
  stray=$!
  echo "$stray" >"$s/supervisor/cgroup.procs"
  kill -9 "$sup"
  poll 100 sh -c "[ -z \"\$(cat $s/sandbox/cgroup.procs)\" ]"
  poll 100 is_status "$id" exited || { ax ls -a >&3; false; }
  [ -d "$s" ] && alive "$stray"
  AGSX_GC_MIN_AGE=0 run_ax gc
  assert_success
  assert_output_contains "agsx.slice/agsx-$id.scope"
  poll 300 gone "$s" || { ls -R "$s" >&3; false; }
  ! systemctl is-active -q "agsx-$id.scope" || false
  poll 100 sh -c "! kill -0 $stray 2>/dev/null"
}

@test "systemd: no bus, one line and nothing left" {
  AGSX_SYSTEMD_BUS=unix:path=/nonexistent run_ax run --rm busybox true
  assert_agsx_error "connect to systemd at \`unix:path=/nonexistent\`"
  AGSX_SYSTEMD_BUS=unix:path=/nonexistent run_ax run -d busybox sleep 100
  assert_agsx_error "connect to systemd"
  [ -z "$(ax ls -aq)" ] || { ax ls -a >&3; false; }
  note_sandbox_ids
}

@test "systemd: agsx serve as a unit, restarted, keeps its sandboxes and their processes" {
  KEY=test-key-$$
  PORT=$(free_port)
  SRV_UNIT=agsx-t$$-serve
  systemd-run --quiet --unit "$SRV_UNIT" -- "$AGSX" --root "$ROOT" --state "$STATE" serve \
    --listen "127.0.0.1:$PORT" --api-key "$KEY"
  poll 300 curl -s -o /dev/null "http://127.0.0.1:$PORT/" ||
    { journalctl -u "$SRV_UNIT" --no-pager | tail >&3; false; }
  api() {
    curl -s -X "$1" -H "X-API-KEY: $KEY" -H 'Content-Type: application/json' \
      ${3:+--data-binary "$3"} "http://127.0.0.1:$PORT$2"
  }
  ax image tag busybox bb >/dev/null 2>&1 || true
  id=$(api POST /v2/sandboxes '{"templateID":"busybox","timeout":120}' | jq -r .sandboxID)
  [ -n "$id" ] && [ "$id" != null ] || { api POST /v2/sandboxes '{"templateID":"busybox","timeout":120}' >&3; false; }
  note_sandbox_ids
  # a background process the sandbox owns (its supervisor's, as envd's are)
  bg=$(ax exec -d "$id" sleep 1000)
  [ -n "$bg" ] || { echo "# exec -d printed no pid" >&3; false; }
  systemctl restart "$SRV_UNIT"
  poll 300 curl -s -o /dev/null "http://127.0.0.1:$PORT/" ||
    { journalctl -u "$SRV_UNIT" --no-pager | tail >&3; false; }
  run api GET /sandboxes
  [[ "$output" == *"$id"* ]] || { echo "# $output" >&3; false; }
  [ -n "$(ax ls -q)" ]
  systemctl stop "$SRV_UNIT"
  [ -n "$(ax ls -q)" ] # still there without any server
  run_ax exec "$id" sh -c "kill -0 $bg && echo alive"
  [ "$output" = alive ] || { show_run; false; }
}
