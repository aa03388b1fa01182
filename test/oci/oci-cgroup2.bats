#!/usr/bin/env bats
# agsx-oci on cgroup v2 (see helpers.bash).
#
# Two layouts, as test/bats/cgroup2.bats does for native agsx:
# - the kernel's own, wherever the host mounts it (host.bash:
#   cgroup2_mount): /sys/fs/cgroup on a v2 host, agsx-oci's default; on a
#   v1 host its cgroup2 mount (this project's development machine:
#   /sys/fs/cgroup/unified, hugetlb its only controller) as
#   AGSX_CGROUP_ROOT. Placement, ps, exec's cgroup, pause through
#   cgroup.freeze, kill --all and delete's rmdir run on the kernel's v2
#   code; a memory limit is applied where the hierarchy has the memory
#   controller and refused, nothing left, where it has not.
# - a fake one for the resource files (on a v1 host no v2 memory, cpu or
#   pids controller can exist next to their v1 hierarchies):
#   AGSX_OCI_CGROUP_LAYOUT=v2 takes a directory tree the test made (the
#   engine's leaf, with empty interface files) as the v2 hierarchy; what
#   agsx-oci writes there is what a v2 kernel would be asked.
# The oracle (crun) refuses a hybrid host's cgroups, and has no fake
# layout: there, agsx-oci only.

load helpers

use_v2() {
  V2=$(cgroup2_mount) ||
    skip "the host has no cgroup v2 hierarchy (no cgroup2 mount in /proc/self/mountinfo)"
  if ! cgroup_host_is_v2; then
    is_agsx || skip "crun refuses a hybrid host's cgroups (v1 controllers beside a cgroup2 mount)"
    export AGSX_CGROUP_ROOT=$V2
  fi
}

# fake_v2 LEAF: $T/cg2 as a v2 hierarchy with every controller delegated
# down to LEAF (relative), which the engine made with the files agsx writes.
fake_v2() {
  agsx_only
  local r=$T/cg2 d f
  mkdir -p "$r/$1"
  d=$r
  for part in "" ${1//\// }; do
    d=$d${part:+/$part}
    echo "cpuset cpu io memory hugetlb pids" >"$d/cgroup.controllers"
    : >"$d/cgroup.subtree_control"
  done
  for f in cgroup.procs cgroup.freeze memory.max memory.swap.max memory.low pids.max cpu.max \
    cpu.weight cpuset.cpus cpuset.mems io.weight io.max; do
    : >"$r/$1/$f"
  done
  printf 'populated 0\nfrozen 0\n' >"$r/$1/cgroup.events"
  export AGSX_CGROUP_ROOT=$r AGSX_OCI_CGROUP_LAYOUT=v2
}

@test "cgroup v2: the init is in cgroupsPath in the v2 hierarchy; exec joins it; ps lists both; delete removes it" {
  use_v2
  b=$(make_bundle b sleep 1000)
  rtc --bundle "$b" c1
  pid=$(state_field c1 pid)
  grep -qx "0::/$CGP/b" /proc/$pid/cgroup || { cat /proc/$pid/cgroup >&3; false; }
  [ -d "$V2/$CGP/b" ]
  grep -qx "$pid" "$V2/$CGP/b/cgroup.procs"
  # Not in a v1 leaf of its own: v2 is the one hierarchy.
  [ ! -d "/sys/fs/cgroup/memory/$CGP/b" ]
  rt start c1
  rt exec --detach --pid-file "$T/x.pid" c1 sleep 999
  x=$(cat "$T/x.pid")
  grep -qx "0::/$CGP/b" /proc/$x/cgroup
  run_rt ps --format json c1
  assert_success
  [ "$(echo "$output" | jq -c 'sort')" = "$(jq -cn --argjson a "$pid" --argjson b "$x" '[$a,$b]|sort')" ] || { show_run; false; }
  run_rt kill --all c1 KILL
  assert_success
  wait_status c1 stopped
  ! kill -0 "$x" 2>/dev/null || false
  run_rt delete c1
  assert_success
  [ ! -d "$V2/$CGP/b" ] || { echo "# left: $(ls "$V2/$CGP/b")" >&3; false; }
  # The parent is not agsx's: it stays (the teardown removes it).
  [ -d "$V2/$CGP" ]
}

@test "cgroup v2: pause freezes through cgroup.freeze; resume thaws; delete --force of a paused one" {
  use_v2
  b=$(make_bundle b sh -c 'while :; do date +%s%N >/tmp/t.new; mv /tmp/t.new /tmp/t; sleep 0.05; done')
  rtc --bundle "$b" c1
  rt start c1
  wait_status c1 running
  for _ in $(seq 50); do [ -s "$b/rootfs/tmp/t" ] && break; sleep 0.1; done
  run_rt pause c1
  assert_success
  [ "$(state_field c1 status)" = paused ]
  [ "$(cat "$V2/$CGP/b/cgroup.freeze")" = 1 ]
  grep -qx 'frozen 1' "$V2/$CGP/b/cgroup.events"
  a=$(cat "$b/rootfs/tmp/t"); sleep 0.4; z=$(cat "$b/rootfs/tmp/t")
  [ -n "$z" ]
  [ "$a" = "$z" ]
  run_rt resume c1
  assert_success
  [ "$(state_field c1 status)" = running ]
  grep -qx 'frozen 0' "$V2/$CGP/b/cgroup.events"
  local now=$z
  for _ in $(seq 50); do
    now=$(cat "$b/rootfs/tmp/t")
    [ "$now" != "$z" ] && break
    sleep 0.1
  done
  [ -n "$now" ]
  [ "$now" != "$z" ]
  rt pause c1
  run_rt delete --force c1
  assert_success
  [ ! -d "$V2/$CGP/b" ]
}

@test "cgroup v2: a memory limit: memory.max where the hierarchy has the controller, else refused naming it, nothing left" {
  use_v2
  b=$(make_bundle b sleep 1000)
  cfg "$b" '.linux.resources.memory.limit=67108864'
  if grep -qw memory "$V2/cgroup.controllers"; then
    rtc --bundle "$b" c1 || { cat "$T/create.err" >&3; false; }
    pid=$(state_field c1 pid)
    [ "$(cat "$V2/$CGP/b/memory.max")" = 67108864 ]
    grep -qx "$pid" "$V2/$CGP/b/cgroup.procs"
    rt delete --force c1
    return 0
  fi
  agsx_only
  run rt create --bundle "$b" c1 </dev/null
  assert_failure
  assert_output_contains "the \`memory\` controller is not enabled for cgroup v2"
  [ ! -d "$V2/$CGP/b" ]
  [ -z "$(ls "$ROOT" 2>/dev/null)" ]
}

@test "cgroup v2 (fake layout): memory.max, memory.swap.max, memory.low, pids.max, cpu.max, cpu.weight from shares; update --resources" {
  fake_v2 "$CGP/b"
  local L=$T/cg2/$CGP/b
  b=$(make_bundle b sleep 1000)
  cfg "$b" '.linux.resources = {"memory":{"limit":67108864,"swap":201326592,"reservation":33554432},
    "pids":{"limit":99},"cpu":{"shares":1024,"quota":50000,"period":100000,"cpus":"0","mems":"0"}}'
  rtc --bundle "$b" c1 || { cat "$T/create.err" >&3; false; }
  pid=$(state_field c1 pid)
  [ "$(cat "$L/memory.max")" = 67108864 ]
  # The spec's swap is memory+swap; v2's is swap alone.
  [ "$(cat "$L/memory.swap.max")" = 134217728 ]
  [ "$(cat "$L/memory.low")" = 33554432 ]
  [ "$(cat "$L/pids.max")" = 99 ]
  [ "$(cat "$L/cpu.max")" = "50000 100000" ]
  # runc's and crun's conversion: 1024 shares is weight 39.
  [ "$(cat "$L/cpu.weight")" = 39 ]
  [ "$(cat "$L/cpuset.cpus")" = 0 ]
  [ "$(cat "$L/cgroup.procs")" = "$pid" ]
  # The controllers enabled in each ancestor, in one write.
  [ "$(cat "$T/cg2/cgroup.subtree_control")" = "+cpu +cpuset +io +memory +pids" ]
  [ "$(cat "$T/cg2/$CGP/cgroup.subtree_control")" = "+cpu +cpuset +io +memory +pids" ]
  echo '{"memory":{"limit":33554432,"swap":67108864},"pids":{"limit":-1},"cpu":{"shares":2048,"quota":-1,"period":200000}}' |
    rt update --resources - c1
  [ "$(cat "$L/memory.max")" = 33554432 ]
  [ "$(cat "$L/memory.swap.max")" = 33554432 ]
  [ "$(cat "$L/pids.max")" = max ]
  [ "$(cat "$L/cpu.weight")" = 79 ]
  [ "$(cat "$L/cpu.max")" = "max 200000" ]
  # A swap below the memory limit cannot be converted: refused, unchanged.
  run_rt update --resources - c1 <<<'{"memory":{"limit":67108864,"swap":1048576}}'
  assert_failure
  assert_output_contains linux.resources.memory.swap
  [ "$(cat "$L/memory.swap.max")" = 33554432 ]
  run_rt delete --force c1
  assert_success
  # The engine made the leaf: it is not agsx's to remove.
  [ -d "$L" ]
}

@test "cgroup v2 (fake layout): blockIO as io.weight (converted) or io.bfq.weight, throttles as io.max" {
  fake_v2 "$CGP/b"
  local L=$T/cg2/$CGP/b
  b=$(make_bundle b sleep 1000)
  cfg "$b" '.linux.resources.blockIO = {"weight":500,"throttleReadBpsDevice":[{"major":8,"minor":0,"rate":1048576}]}'
  rtc --bundle "$b" c1 || { cat "$T/create.err" >&3; false; }
  # runc's and crun's conversion: blkio weight 500 is io.weight 4950.
  [ "$(cat "$L/io.weight")" = "default 4950" ]
  [ "$(cat "$L/io.max")" = "8:0 rbps=1048576" ]
  echo '{"blockIO":{"throttleWriteIOPSDevice":[{"major":8,"minor":0,"rate":0}]}}' | rt update --resources - c1
  [ "$(cat "$L/io.max")" = "8:0 wiops=max" ]
  # With BFQ's file the weight is written as it is.
  : >"$L/io.bfq.weight"
  echo '{"blockIO":{"weight":300}}' | rt update --resources - c1
  [ "$(cat "$L/io.bfq.weight")" = 300 ]
  rt delete --force c1
}

# issue 24 finding 11: a kernel without BFQ's or iocost's weight file has
# no blockIO weight to give; agsx-oci refuses it, naming both files.
@test "cgroup v2 (fake layout): a blockIO weight without io.weight or io.bfq.weight is refused; throttles alone apply" {
  fake_v2 "$CGP/b"
  local L=$T/cg2/$CGP/b
  rm "$L/io.weight"
  b=$(make_bundle b sleep 1000)
  cfg "$b" '.linux.resources.blockIO = {"weight":500,"throttleReadBpsDevice":[{"major":8,"minor":0,"rate":1048576}]}'
  run rt create --bundle "$b" c1 </dev/null
  assert_failure
  assert_output_contains "no \`io.bfq.weight\` or \`io.weight\`"
  [ -z "$(ls "$ROOT" 2>/dev/null)" ]
  [ ! -s "$L/io.max" ]
  cfg "$b" 'del(.linux.resources.blockIO.weight)'
  rtc --bundle "$b" c1 || { cat "$T/create.err" >&3; false; }
  [ "$(cat "$L/io.max")" = "8:0 rbps=1048576" ]
  run_rt update --resources - c1 <<<'{"blockIO":{"weight":300}}'
  assert_failure
  assert_output_contains "linux.resources.blockIO.weight"
  [ ! -e "$L/io.weight" ]
  [ ! -e "$L/io.bfq.weight" ]
  rt delete --force c1
}

@test "cgroup v2 (fake layout): create refuses a swap below the memory limit, leaving nothing" {
  fake_v2 "$CGP/b"
  b=$(make_bundle b sleep 1000)
  cfg "$b" '.linux.resources.memory = {"limit":67108864,"swap":1048576}'
  run rt create --bundle "$b" c1 </dev/null
  assert_failure
  assert_output_contains "linux.resources.memory.swap"
  [ -z "$(ls "$ROOT" 2>/dev/null)" ]
  ! pgrep -f "$T" >/dev/null || false
}

@test "cgroup v2 (fake layout): hugepageLimits as hugetlb.<size>.max; swappiness and disableOOMKiller ignored, as runc" {
  fake_v2 "$CGP/b"
  local L=$T/cg2/$CGP/b
  : >"$L/hugetlb.2MB.max"
  : >"$L/hugetlb.1GB.max"
  b=$(make_bundle b sleep 1000)
  cfg "$b" '.linux.resources = {"memory":{"limit":67108864,"swappiness":10,"disableOOMKiller":true},
    "hugepageLimits":[{"pageSize":"2MB","limit":4194304},{"pageSize":"1GB","limit":18446744073709551615}]}'
  rtc --bundle "$b" c1 || { cat "$T/create.err" >&3; false; }
  [ "$(cat "$L/hugetlb.2MB.max")" = 4194304 ]
  [ "$(cat "$L/hugetlb.1GB.max")" = max ]
  [ "$(cat "$L/memory.max")" = 67108864 ]
  [ ! -e "$L/memory.swappiness" ]
  [ ! -e "$L/memory.oom_control" ]
  # hugetlb enabled in each ancestor only when asked for
  [ "$(cat "$T/cg2/cgroup.subtree_control")" = "+cpu +cpuset +io +memory +pids +hugetlb" ]
  echo '{"hugepageLimits":[{"pageSize":"2MB","limit":2097152}],"memory":{"swappiness":20}}' | rt update --resources - c1
  [ "$(cat "$L/hugetlb.2MB.max")" = 2097152 ]
  # a page size the kernel has no file for
  run_rt update --resources - c1 <<<'{"hugepageLimits":[{"pageSize":"64KB","limit":65536}]}'
  assert_failure
  assert_output_contains linux.resources.hugepageLimits
  rt delete --force c1
}
