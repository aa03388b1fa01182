#!/usr/bin/env bats
# containerd 1.6 (Debian's) with its runc shim v2 driving agsx-oci:
# `ctr run --runc-binary`, a private daemon per file (its own root, state
# and socket, the CRI plugin off) started and stopped here. The Kubernetes
# path (the CRI plugin, contrib/containerd/config.toml) is oci-cri.bats's,
# driven through the CRI API by a client of its own.

load helpers

setup_file() {
  export FILE_SKIP=
  command -v containerd >/dev/null || { FILE_SKIP="containerd is not installed (apt-get install containerd)"; return 0; }
  export CT=$BATS_FILE_TMPDIR/ctd NS=agsxtest$$
  mkdir -p "$CT"
  chmod 0755 "$BATS_FILE_TMPDIR" "$CT"
  { ctd_config; echo 'disabled_plugins = ["io.containerd.grpc.v1.cri"]'; } >"$CT/config.toml"
  ctd_start
  ctd_image "$NS" localhost/agsx-test:busybox
}

# The namespace names the containers' cgroups (/NS/ID): not agsx's own parent.
C() { timeout --kill-after=5 60 ctr -a "$CT/containerd.sock" -n "$NS" "$@" 3>&-; }
R() { echo --runc-binary "$AGSX_OCI" --runc-root "$CT/agsx"; }
IMG=localhost/agsx-test:busybox

teardown_file() {
  [ -z "$FILE_SKIP" ] || return 0
  ctd_stop
  for d in /sys/fs/cgroup/*/"$NS" /sys/fs/cgroup/"$NS"; do [ -d "$d" ] && rmdir "$d" 2>/dev/null; done
  return 0
}

teardown() {
  [ -z "$FILE_SKIP" ] || return 0
  local leaks="" t
  for t in $(C task ls -q 2>/dev/null); do C task kill -a -s SIGKILL "$t" >/dev/null 2>&1 || true; done
  sleep 0.3
  for t in $(C task ls -q 2>/dev/null); do C task delete -f "$t" >/dev/null 2>&1 || true; done
  for t in $(C container ls -q 2>/dev/null); do C container rm "$t" >/dev/null 2>&1 || true; done
  if [ -n "$(ls "$CT/agsx/$NS" 2>/dev/null)" ]; then leaks+="state: $(ls "$CT/agsx/$NS"); "; fi
  if ls -d /sys/fs/cgroup/*/"$NS"/*/ 2>/dev/null | grep -q .; then
    leaks+="cgroups: $(ls -d /sys/fs/cgroup/*/"$NS"/*/ | head -2); "
  fi
  local d
  for d in /sys/fs/cgroup/*/agsxc$$.slice/*/ /sys/fs/cgroup/*/agsxc$$.slice/; do
    [ ! -d "$d" ] || rmdir "$d" 2>/dev/null || true
  done
  oci_teardown || true
  [ -z "$leaks" ] || { echo "# leaked: $leaks" >&3; return 1; }
}

@test "ctr run: output, exit code, the injected user namespace" {
  run C run --rm $(R) $IMG t1 sh -c 'echo hi; cat /proc/self/uid_map'
  [ "$status" -eq 0 ] || { echo "# $output" >&3; false; }
  [[ "$output" == hi* ]]
  [[ "$output" != *"         0          0"* ]]
  run C run --rm $(R) $IMG t2 sh -c 'exit 7'
  [ "$status" -eq 7 ]
  # (ctr 1.6's --uidmap runs Debian's runc whatever --runc-binary says:
  # the engine's mappings are tested in oci-policy.bats and oci-podman.bats)
}

@test "ctr run -t gets a terminal" {
  run timeout --kill-after=5 60 script -qec "ctr -a '$CT/containerd.sock' -n $NS run --rm -t $(R) $IMG t1 sh -c 'tty; exit 3'" /dev/null
  [[ "$output" == *"/dev/pts/"* ]] || { echo "# $status $output" >&3; false; }
  [ "$status" -eq 3 ] || { echo "# $status $output" >&3; false; }
}

@test "ctr task exec -t gets a terminal of its own" {
  C run -d $(R) $IMG t1 sleep 1000
  run timeout --kill-after=5 60 script -qec "ctr -a '$CT/containerd.sock' -n $NS task exec -t --exec-id e1 t1 sh -c 'tty; exit 5'" /dev/null
  [[ "$output" == *"/dev/pts/"* ]] || { echo "# $status $output" >&3; false; }
  [ "$status" -eq 5 ] || { echo "# $status $output" >&3; false; }
  C task kill -s SIGKILL t1
  for i in $(seq 50); do [[ "$(C task ls | grep t1)" == *STOPPED* ]] && break; sleep 0.1; done
  C task delete t1
  C container rm t1
}

@test "ctr task exec/ps/pause/resume/metrics/kill/delete" {
  C run -d $(R) $IMG t1 sleep 1000
  run C task exec --exec-id e1 t1 sh -c 'exit 4'
  [ "$status" -eq 4 ] || { echo "# $status $output" >&3; false; }
  run C task ps t1
  [ "$status" -eq 0 ]
  [[ "$output" == *PID* ]]
  C task pause t1
  [[ "$(C task ls | grep t1)" == *PAUSED* ]]
  C task resume t1
  [[ "$(C task ls | grep t1)" == *RUNNING* ]]
  run C task metrics t1
  [ "$status" -eq 0 ] || { echo "# $output" >&3; false; }
  C task kill -s SIGTERM t1 || true
  C task kill -a -s SIGKILL t1
  for i in $(seq 50); do [[ "$(C task ls | grep t1)" == *STOPPED* ]] && break; sleep 0.1; done
  C task delete t1
  C container rm t1
  [ -z "$(ls "$CT/agsx/$NS" 2>/dev/null)" ]
}

@test "ctr --with-ns network: pod-style sharing of a network namespace" {
  C run -d $(R) $IMG t1 sleep 1000
  pid=$(C task ls | awk '$1=="t1"{print $2}')
  run C run --rm $(R) --with-ns network:/proc/$pid/ns/net $IMG t2 readlink /proc/self/ns/net
  [ "$output" = "$(readlink /proc/$pid/ns/net)" ] || { echo "# $output" >&3; false; }
  C task kill -s SIGKILL t1
  for i in $(seq 100); do [[ "$(C task ls | grep t1)" == *STOPPED* ]] && break; sleep 0.1; done
  C task delete t1
  C container rm t1
}

@test "ctr --with-ns ipc, uts and pid: the pod's user namespace and range, shared; another container shares nothing" {
  C run -d $(R) $IMG t1 sleep 1000
  pid=$(C task ls | awk '$1=="t1"{print $2}')
  local h
  h=$(C task exec --exec-id h t1 hostname)
  run C task exec --exec-id s t1 /usr/local/bin/probe shm 4245
  [ "$output" = "shm 4245: made" ] || { echo "# $output" >&3; false; }
  local show='/usr/local/bin/probe shm 4245; hostname; ps -o args | grep -c "^sleep 1000$"; readlink /proc/self/ns/user; readlink /proc/self/ns/ipc; cat /proc/self/uid_map'
  run C run --rm $(R) --with-ns ipc:/proc/$pid/ns/ipc --with-ns uts:/proc/$pid/ns/uts \
    --with-ns pid:/proc/$pid/ns/pid $IMG t2 sh -c "$show"
  [[ "$output" == "shm 4245: found"$'\n'"$h"$'\n'1$'\n'"$(readlink /proc/$pid/ns/user)"$'\n'"$(readlink /proc/$pid/ns/ipc)"$'\n'*"$(awk '{print $2}' /proc/$pid/uid_map)"* ]] ||
    { echo "# $output" >&3; false; }
  run C run --rm $(R) $IMG t3 sh -c "$show"
  [[ "$output" == "shm 4245: made"$'\n'*$'\n'0$'\n'* && "$output" != *"$(readlink /proc/$pid/ns/user)"* &&
    "$output" != *"$(readlink /proc/$pid/ns/ipc)"* && "$output" != *"$(awk '{print $2}' /proc/$pid/uid_map)"* ]] ||
    { echo "# $output" >&3; false; }
  C task kill -s SIGKILL t1
  for i in $(seq 100); do [[ "$(C task ls | grep t1)" == *STOPPED* ]] && break; sleep 0.1; done
  C task delete t1
  C container rm t1
}

@test "ctr: containerd's default seccomp profile plus agsx's baseline, a memory limit OOM, a refusal" {
  run C run --rm --seccomp $(R) $IMG t1 sh -c '/usr/local/bin/probe syscall unshare-user; /usr/local/bin/probe syscall keyctl'
  [[ "$output" == *"unshare-user: blocked"* && "$output" == *"keyctl: blocked"* ]] || { echo "# $output" >&3; false; }
  # The OOM is an event: the shim watches the init's memory cgroup (v1:
  # memory.oom_control through cgroup.event_control; v2: memory.events)
  # from the path in /proc/PID/cgroup once start returns (2 s before the
  # allocation: time for that on a loaded host; the event comes within 10 s).
  C events >"$CT/events" 2>&1 &
  local ev=$!
  run C run --rm --memory-limit 16777216 $(R) $IMG t2 sh -c 'sleep 2; /usr/local/bin/probe alloc 256'
  [ "$status" -eq 137 ] || { echo "# $status $output" >&3; kill $ev; false; }
  for i in $(seq 100); do grep -q /tasks/oom "$CT/events" && break; sleep 0.1; done
  kill $ev
  wait $ev || true
  grep /tasks/oom "$CT/events" | grep -q t2 || { echo "# events: $(cat "$CT/events")" >&3; false; }
  run C run --rm $(R) $IMG t3 /nonexistent
  [ "$status" -ne 0 ]
  [[ "$output" == *"OCI runtime create failed"* ]] || { echo "# $output" >&3; false; }
  run C run --rm --privileged $(R) $IMG t4 true
  [ "$status" -ne 0 ]
  [[ "$output" == *"privileged containers are not supported by agsx"* ]] || { echo "# $output" >&3; false; }
}

@test "ctr --runc-systemd-cgroup: slice:prefix:name placed where systemd would put it" {
  [ ! -d /run/systemd/system ] || skip "systemd runs here: the scope is test/guest/systemd.bats's"
  C run -d --runc-systemd-cgroup --cgroup "agsxc$$-pod.slice:cri:t1" $(R) $IMG t1 sleep 1000
  pid=$(C task ls | awk '$1=="t1"{print $2}')
  run proc_cgroup_rel "$pid" memory
  [ "$output" = "/agsxc$$.slice/agsxc$$-pod.slice/cri-t1.scope" ] || { echo "# $output" >&3; false; }
  run C task metrics t1
  [ "$status" -eq 0 ] || { echo "# $output" >&3; false; }
  C task kill -s SIGKILL t1
  for i in $(seq 50); do [[ "$(C task ls | grep t1)" == *STOPPED* ]] && break; sleep 0.1; done
  C task delete t1
  C container rm t1
  local d
  for d in /sys/fs/cgroup/*/agsxc$$.slice/agsxc$$-pod.slice /sys/fs/cgroup/*/agsxc$$.slice \
    /sys/fs/cgroup/agsxc$$.slice/agsxc$$-pod.slice /sys/fs/cgroup/agsxc$$.slice; do
    [ ! -d "$d" ] || rmdir "$d"
  done
}
