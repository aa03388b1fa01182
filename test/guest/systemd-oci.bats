#!/usr/bin/env bats
# agsx-oci with the systemd cgroup manager (issue 23): Podman on its
# defaults on a systemd host (cgroup manager systemd, --systemd-cgroup to
# the runtime) and agsx-oci's own --systemd-cgroup: the container's
# transient scope, its resources as unit properties and in the cgroup's
# files, update, pause, kill, rm; a pod (shared ipc, uts and pid: one user
# namespace and range) in its slice; a scope name taken fails with one
# line and leaves nothing. Run by the guest lane; elsewhere every test
# skips.

load ../oci/helpers

bats_require_minimum_version 1.5.0

setup_file() {
  [ -d /run/systemd/system ] || skip "systemd is not PID 1 here (the guest lane has it)"
  [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] ||
    skip "/sys/fs/cgroup is not the unified cgroup v2 hierarchy"
  export PM=$BATS_FILE_TMPDIR/pm
  mkdir -p "$PM"
  chmod 0755 "$BATS_FILE_TMPDIR" "$PM"
  cat >"$PM/agsx-oci" <<EOF2
#!/bin/sh
exec "$AGSX_OCI" --root "$PM/state" "\$@"
EOF2
  chmod +x "$PM/agsx-oci"
  sed -e "s|/usr/libexec/agsx/agsx-oci|$PM/agsx-oci|" \
    "$BATS_TEST_DIRNAME/../../contrib/podman/containers.conf.d/90-agsx.conf" >"$PM/containers.conf"
  export CONTAINERS_CONF=$PM/containers.conf
  local r
  r=$(base_rootfs)
  tar -C "$r" -c . | pm import - localhost/agsx-test:busybox >/dev/null
  # A pod's infra image (Podman's own pause image needs catatonit).
  tar -C "$r" -c . | pm import --change 'ENTRYPOINT ["/bin/sleep","1000000"]' - \
    localhost/agsx-test:pause >/dev/null
}

# Podman on its defaults: no --cgroup-manager (systemd here).
pm() {
  timeout --kill-after=5 120 podman --root "$PM/storage" --runroot "$PM/run" \
    --events-backend none "$@"
}
P() { pm --runtime agsx "$@"; }
IMG=localhost/agsx-test:busybox

teardown_file() {
  [ -n "${PM:-}" ] || return 0
  pm pod rm -af -t 0 >/dev/null 2>&1 || true
  pm rm -af -t 0 >/dev/null 2>&1 || true
  pm rmi -af >/dev/null 2>&1 || true
  pm system reset -f >/dev/null 2>&1 || true
}

teardown() {
  local leaks=""
  P pod rm -af -t 0 >/dev/null 2>&1 || true
  P rm -af -t 0 >/dev/null 2>&1 || true
  systemctl stop "agsxt$$-x.scope" >/dev/null 2>&1 || true
  if [ -n "$(ls "$PM/state" 2>/dev/null)" ]; then leaks+="state: $(ls "$PM/state"); "; fi
  oci_teardown || true
  [ -z "$leaks" ] || { echo "# leaked: $leaks" >&3; return 1; }
}

@test "podman on its defaults (systemd): a scope, limits in its files, update, pause, kill, rm" {
  [ "$(pm info --format '{{.Host.CgroupManager}}')" = systemd ]
  run P run -d --name c1 --network none --memory 64m --cpus 0.5 --pids-limit 40 $IMG sleep 1000
  [ "$status" -eq 0 ] || { echo "# $output" >&3; false; }
  cid=$(P inspect -f '{{.Id}}' c1)
  pid=$(P inspect -f '{{.State.Pid}}' c1)
  cg=$(awk -F: '$1 == 0 {print $3}' "/proc/$pid/cgroup")
  [[ "$cg" == /machine.slice/libpod-$cid.scope* ]] || [[ "$cg" == */libpod-$cid.scope* ]] ||
    { echo "# cgroup: $cg" >&3; false; }
  d=/sys/fs/cgroup${cg%/container}
  d=${d%/}
  [ "$(systemctl show -P Delegate "libpod-$cid.scope")" = yes ]
  f=/sys/fs/cgroup$cg
  [ "$(cat "$f/memory.max")" = 67108864 ]
  [ "$(cat "$f/cpu.max")" = "50000 100000" ]
  [ "$(cat "$f/pids.max")" = 40 ]
  [ "$(systemctl show -P MemoryMax "libpod-$cid.scope")" = 67108864 ]
  run P update --memory 96m c1
  [ "$status" -eq 0 ] || { echo "# $output" >&3; false; }
  [ "$(cat "$f/memory.max")" = 100663296 ]
  [ "$(systemctl show -P MemoryMax "libpod-$cid.scope")" = 100663296 ]
  run P pause c1
  [ "$status" -eq 0 ] || { echo "# $output" >&3; false; }
  [ "$(cat "$f/cgroup.freeze")" = 1 ]
  run P unpause c1
  [ "$status" -eq 0 ] || { echo "# $output" >&3; false; }
  run P kill c1
  [ "$status" -eq 0 ] || { echo "# $output" >&3; false; }
  run P rm -f c1
  [ "$status" -eq 0 ] || { echo "# $output" >&3; false; }
  poll() { local i; for i in $(seq 100); do "$@" && return 0; sleep 0.1; done; return 1; }
  poll test ! -d "$f"
  ! systemctl is-active -q "libpod-$cid.scope" || false
}

@test "podman run --rm on the defaults: output and exit code" {
  run P run --rm --network none $IMG sh -c 'echo hi; cat /proc/self/cgroup; exit 3'
  [ "$status" -eq 3 ] || { echo "# $output" >&3; false; }
  [[ "$output" == hi* ]] && [[ "$output" == *"0::/"* ]] || { echo "# $output" >&3; false; }
}

@test "podman pod on the defaults (systemd): shared ipc, uts and pid, one user namespace; another pod shares none" {
  local show='/usr/local/bin/probe shm 4246; hostname; ps -o args | grep -c "^sleep 1000$"; readlink /proc/self/ns/user; cat /proc/self/cgroup'
  P pod create --name p1 --infra-image localhost/agsx-test:pause --network none \
    --share ipc,uts,pid --hostname pod-one >/dev/null
  P pod create --name p2 --infra-image localhost/agsx-test:pause --network none \
    --share ipc,uts --hostname pod-two >/dev/null
  P run -d --pod p1 --name a1 $IMG sleep 1000
  run P exec a1 /usr/local/bin/probe shm 4246
  [ "$output" = "shm 4246: made" ] || { echo "# $status $output" >&3; false; }
  run P run --rm --pod p1 $IMG sh -c "$show"
  [ "$status" -eq 0 ] || { echo "# $status $output" >&3; false; }
  local out1=$output user1
  user1=$(P exec a1 readlink /proc/self/ns/user)
  [[ "$out1" == "shm 4246: found"$'\n'pod-one$'\n'1$'\n'"$user1"$'\n'*"0::/"* ]] || { echo "# $out1" >&3; false; }
  run P run --rm --pod p2 $IMG sh -c "$show"
  [ "$status" -eq 0 ] || { echo "# $status $output" >&3; false; }
  [[ "$output" == "shm 4246: made"$'\n'pod-two$'\n'0$'\n'* && "$output" != *"$user1"* ]] ||
    { echo "# $output" >&3; false; }
  P pod rm -f -t 0 p1 >/dev/null
  P pod rm -f -t 0 p2 >/dev/null
}

@test "agsx-oci --systemd-cgroup: a scope name taken is one line, nothing left" {
  systemd-run --quiet --scope --unit "agsxt$$-x" sleep 1000 &
  local i
  for i in $(seq 100); do systemctl is-active -q "agsxt$$-x.scope" && break; sleep 0.1; done
  b=$(make_bundle b sleep 100)
  cfg "$b" '.linux.cgroupsPath = $p' --arg p ":agsxt$$:x"
  run rt --systemd-cgroup create --bundle "$b" c1 </dev/null
  [ "$status" -ne 0 ] || { show_run; false; }
  [ "$(printf '%s\n' "$output" | grep -c .)" -eq 1 ] || { show_run; false; }
  [[ "$output" == *"agsxt$$-x.scope"* ]] || { show_run; false; }
  [ -z "$(ls "$ROOT" 2>/dev/null)" ] || { ls "$ROOT" >&3; false; }
  systemctl stop "agsxt$$-x.scope"
}

