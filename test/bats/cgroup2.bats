#!/usr/bin/env bats
# test-runner: parallel
# cgroup v2 for real, wherever the host mounts it (host.bash: cgroup2_mount
# reads /proc/self/mountinfo): on a v2 host /sys/fs/cgroup, with its
# controllers, agsx's default; on a v1 host with a cgroup2 mount (this
# project's development machine: /sys/fs/cgroup/unified, no controllers,
# but real cgroup.procs, cgroup.kill and cgroup.freeze) that mount as
# agsx's v2 root (AGSX_CGROUP_ROOT). Either way membership and kill run on
# the kernel's v2 code, not on a mock. Where the v2 hierarchy has no pids
# controller there is no default pids limit to set: AGSX_DEFAULT_PIDS=0.
# A sandbox's cgroup is read from its init (sandbox_cgroup), not composed.
# Each test has its own cgroup parent, removed and checked in teardown.
# Also exec's process tree on v1 when the sandbox has no cgroup of its own
# (no limits).

load helpers

bats_require_minimum_version 1.5.0

setup_file() { busybox_setup_file; }

setup() {
  common_setup
  AX_TIMEOUT=40
  export AGSX_CGROUP_PARENT="agsx-bats-cg2-$$-$BATS_TEST_NUMBER"
  V2=$(cgroup2_mount) || V2=
  ax image load "$BB" >/dev/null
}

use_v2() {
  [ -n "$V2" ] || skip "the host has no cgroup v2 hierarchy (no cgroup2 mount in /proc/self/mountinfo)"
  # A v1 host's own cgroup root is v1: point agsx at the v2 mount.
  cgroup_host_is_v2 || export AGSX_CGROUP_ROOT=$V2
  grep -qw pids "$V2/cgroup.controllers" || export AGSX_DEFAULT_PIDS=0
}

# AGSX_CGROUP_ROOT: a directory holding only the host's v1 pids hierarchy,
# mounted again there (unmounted in teardown): a v1 host without the
# cpuacct and memory controllers, whose sandboxes without limits have no
# cgroup of their own (not even agsx stats's accounting ones).
pids_only_root() {
  cgroup_v1_mount pids >/dev/null ||
    skip "the host has no v1 pids hierarchy (its pids controller is cgroup v2's)"
  mkdir -p "$T/cg/pids"
  mount -t cgroup -o pids cgroup "$T/cg/pids" || skip "cannot mount the v1 pids hierarchy again"
  export AGSX_CGROUP_ROOT=$T/cg AGSX_DEFAULT_PIDS=0
}

our_cgroups() {
  find /sys/fs/cgroup/*/"$AGSX_CGROUP_PARENT" ${V2:+"$V2/$AGSX_CGROUP_PARENT"} -mindepth 1 -type d \
    2>/dev/null | sort -u
}

teardown() {
  local rc=0 left
  ax kill --all >/dev/null 2>&1 || true
  for _ in $(seq 50); do
    [ -z "$(ax ls -q 2>/dev/null)" ] && [ -z "$(our_cgroups)" ] && break
    sleep 0.1
  done
  left=$(our_cgroups)
  if [ -n "$left" ]; then
    echo "# leaked cgroups: $left" >&3
    rc=1
  fi
  # The parent directories are the test's own.
  for d in /sys/fs/cgroup/*/"$AGSX_CGROUP_PARENT" ${V2:+"$V2/$AGSX_CGROUP_PARENT"}; do
    [ -d "$d" ] && { find "$d" -mindepth 1 -depth -type d -exec rmdir {} + 2>/dev/null; rmdir "$d"; }
  done
  if mountpoint -q "$T/cg/pids" 2>/dev/null; then umount "$T/cg/pids" || rc=1; fi
  common_teardown || rc=1
  return $rc
}

@test "cgroup v2: an exec'd command is in its exec cgroup from the start" {
  use_v2
  run_ax run -d --name box busybox sleep 300
  assert_success
  local id=$output
  # Inside the sandbox's cgroup namespace: a child of the sandbox's cgroup.
  run_ax exec box cat /proc/self/cgroup
  assert_success
  [[ "$output" == *"0::/exec-"* ]] || { show_run; return 1; }
  # From the host: the command's pid is listed in that cgroup.
  # (long enough to be there however long exec takes to return)
  run_ax exec box sh -c 'sleep 30 >/dev/null 2>&1 & echo started'
  assert_success
  local procs cg
  cg=$(sandbox_cgroup "$id") || { echo "# no cgroup for $id" >&3; return 1; }
  procs=$(cat "$cg"/exec-*/cgroup.procs 2>/dev/null | wc -l)
  [ "$procs" -ge 1 ] || { echo "# no process in an exec cgroup: $(find "$cg" -name cgroup.procs -exec grep -H . {} +) id=$id" >&3; return 1; }
}

@test "cgroup v2: exec --timeout kills the whole tree" {
  use_v2
  run_ax run -d --name box busybox sleep 300
  assert_success
  local t0=$SECONDS
  run_ax exec --timeout 2s box sh -c '(sleep 4; touch /tmp/grandchild-survived) & sleep 21; echo SURVIVED'
  assert_status 137
  refute_output_contains SURVIVED
  [ $((SECONDS - t0)) -lt 10 ] || { echo "# took $((SECONDS - t0)) s" >&3; return 1; }
  sleep 3
  run_ax exec box sh -c 'ls /tmp/grandchild-survived 2>&1; ps -o pid,args | grep -c "sleep 4" || true'
  refute_output_contains "/tmp/grandchild-survived"$'\n'
  [[ "$output" == *"No such file"* ]] || { show_run; return 1; }
}

@test "cgroup v2: kill ends every process of the sandbox, background ones of exec included" {
  use_v2
  run_ax run -d --name box busybox sleep 300
  assert_success
  local id=$output
  # (sleeps of lengths no other test uses: the check below is host-wide)
  run_ax exec box sh -c 'sleep 20071 >/dev/null 2>&1 & sleep 20072 >/dev/null 2>&1 & echo ok'
  assert_success
  local cg
  cg=$(sandbox_cgroup "$id") || { echo "# no cgroup for $id" >&3; return 1; }
  [ "$(cat "$cg"/cgroup.procs "$cg"/exec-*/cgroup.procs | wc -l)" -ge 3 ]
  run_ax kill box
  assert_success
  poll 50 test ! -d "$cg"
  [ ! -d "$cg" ] || { echo "# cgroup left: $(ls "$cg")" >&3; return 1; }
  ! pgrep -f 'sleep 2007[12]' >/dev/null || { echo "# processes left: $(pgrep -af 'sleep 2007[12]')" >&3; return 1; }
}

@test "cgroup v2: the kernel's cgroup.freeze stops an exec'd tree and thaws it" {
  use_v2
  run_ax run -d --name box busybox sleep 300
  assert_success
  local id=$output
  run_ax exec box sh -c 'i=0; while :; do i=$((i+1)); echo $i >/tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.05; done >/dev/null 2>&1 & echo ok'
  assert_success
  # the counter's first file (a frozen, fileless counter would prove nothing)
  for _ in $(seq 100); do ax exec box test -s /tmp/count 2>/dev/null && break; sleep 0.1; done
  local cg
  cg=$(ls -d "$(sandbox_cgroup "$id")"/exec-*/ | head -n 1)
  echo 1 >"$cg/cgroup.freeze"
  for _ in $(seq 50); do grep -q '^frozen 1' "$cg/cgroup.events" && break; sleep 0.1; done
  grep -q '^frozen 1' "$cg/cgroup.events" || { echo "# not frozen" >&3; return 1; }
  local a b
  a=$(ax exec -w / box cat /tmp/count)
  [ -n "$a" ] || { echo "# no counter file before the freeze" >&3; return 1; }
  sleep 0.5
  b=$(ax exec -w / box cat /tmp/count)
  [ "$a" = "$b" ] || { echo "# counter moved while frozen: $a $b" >&3; return 1; }
  echo 0 >"$cg/cgroup.freeze"
  # it moves again (however loaded the host: within 10 s)
  for _ in $(seq 100); do
    sleep 0.1
    b=$(ax exec -w / box cat /tmp/count)
    [ "$a" != "$b" ] && break
  done
  [ "$a" != "$b" ] || { echo "# counter did not move after thaw" >&3; return 1; }
}

@test "cgroup v1, no limits: exec --timeout kills a grandchild that left its parent" {
  pids_only_root
  run_ax run -d --name box busybox sleep 300
  assert_success
  local id=$output
  # No limit: the sandbox has no cgroup of its own.
  [ -z "$(our_cgroups)" ] || { echo "# unexpected cgroups: $(our_cgroups)" >&3; return 1; }
  run_ax exec --timeout 2s box sh -c '(sleep 4; touch /tmp/grandchild-survived) >/dev/null 2>&1 & exit 0' 
  assert_success
  run_ax exec --timeout 2s box sh -c 'sh -c "(sleep 4; touch /tmp/orphan-survived) >/dev/null 2>&1 &"; sleep 30'
  assert_status 137
  sleep 3
  run_ax exec box ls /tmp
  refute_output_contains orphan-survived
  # A command that ended before its deadline leaves its background alone
  # (its touch comes 4 s after its start: up to 10 s more on a loaded host).
  for _ in $(seq 100); do ax exec box test -e /tmp/grandchild-survived && break; sleep 0.1; done
  run_ax exec box ls /tmp
  assert_output_contains grandchild-survived
  # The tracking cgroup goes with the sandbox.
  run_ax kill box
  for _ in $(seq 50); do [ -z "$(our_cgroups)" ] && break; sleep 0.1; done
  [ -z "$(our_cgroups)" ] || { echo "# left: $(our_cgroups)" >&3; return 1; }
}
