#!/usr/bin/env bats
# containerd 1.6's CRI plugin (Debian's containerd) with agsx as a runtime
# handler, driven through its CRI gRPC API as the kubelet drives it: no
# kubelet or crictl exists in Debian 12, so test/oci/cri-client.js calls
# the API (test/oci/cri.proto) with @grpc/grpc-js from npm
# (test/oci/cri-npm-install). The handler's config is the documented one,
# contrib/containerd/config.toml, with its paths pointed at this build and
# a private daemon (own root, state, socket; SystemdCgroup off). The daemon
# runs in a network namespace of the test's own (unshare -n), where CNI's
# bridge plugin makes the pods' bridge, on 198.18.7.0/24 (host-local's
# leases under the daemon's directory too); nothing is routed out of it.
# The pause image is busybox's sleep.

load helpers

# A missing tool skips every test (FILE_SKIP, helpers.bash).
setup_file() {
  export FILE_SKIP=
  command -v containerd >/dev/null || { FILE_SKIP="containerd is not installed (apt-get install containerd)"; return 0; }
  command -v node >/dev/null || { FILE_SKIP="node is not installed (apt-get install nodejs npm)"; return 0; }
  local p
  for p in bridge host-local loopback; do
    [ -x /usr/lib/cni/$p ] ||
      { FILE_SKIP="no CNI $p plugin (apt-get install containernetworking-plugins)"; return 0; }
  done
  export NODE_PATH
  NODE_PATH=$("$BATS_TEST_DIRNAME/cri-npm-install" 2>"$BATS_FILE_TMPDIR/npm.err") || {
    FILE_SKIP="no @grpc/grpc-js from npm (test/oci/cri-npm-install): $(grep -m1 . "$BATS_FILE_TMPDIR/npm.err")"
    return 0
  }
  export CT=$BATS_FILE_TMPDIR/ctd
  mkdir -p "$CT/cni" "$CT/logs"
  chmod 0755 "$BATS_FILE_TMPDIR" "$CT"
  # The sandbox's oomScoreAdj is -998: lowering it takes CAP_SYS_RESOURCE
  # (bit 24), which some CI containers lack (runc fails there too); without
  # it the CRI plugin clamps the values to the daemon's own.
  local restrict=false
  (( 0x$(awk '/^CapEff/ {print $2}' /proc/self/status) >> 24 & 1 )) || restrict=true
  {
    ctd_config
    cat <<EOF2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/agsx-test:pause"
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  restrict_oom_score_adj = $restrict
  stream_server_address = "127.0.0.1"
[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "$CT/cni"
# The default handler stays runc: the pods ask for agsx by name.
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
EOF2
    # The documented handler, its paths this file's, cgroupfs paths (the
    # systemd driver is tested through ctr and the guest lane's hosts).
    sed -e "s|\"/usr/libexec/agsx/agsx-oci\"|\"$AGSX_OCI\"|" -e "s|\"/run/containerd/agsx\"|\"$CT/agsx\"|" \
      -e "s|SystemdCgroup = true|SystemdCgroup = false|" "$BATS_TEST_DIRNAME/../../contrib/containerd/config.toml"
  } >"$CT/config.toml"
  grep -q "BinaryName = \"$AGSX_OCI\"" "$CT/config.toml" && grep -q "Root = \"$CT/agsx\"" "$CT/config.toml" &&
    grep -q "SystemdCgroup = false" "$CT/config.toml" ||
    { echo "# contrib/containerd/config.toml: no BinaryName, Root or SystemdCgroup to point here" >&3; return 1; }
  cat >"$CT/cni/10-agsx.conflist" <<EOF2
{"cniVersion": "0.4.0", "name": "agsx-cri-test",
 "plugins": [{"type": "bridge", "bridge": "agsxcri0", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "dataDir": "$CT/ipam", "ranges": [[{"subnet": "198.18.7.0/24"}]]}}]}
EOF2
  ctd_start unshare -n sh -c 'ip link set lo up && exec "$@"' sh
  local i
  for i in $(seq 100); do cri Version >/dev/null 2>&1 && break; sleep 0.1; done
  cri Version >/dev/null || { grep -i 'level=error\|level=warn' "$CT/log" | tail -5 | sed 's/^/# /' >&3; return 1; }
  ctd_image k8s.io localhost/agsx-test:busybox
  echo '{"Entrypoint": ["/bin/sleep", "2147483647"]}' >"$CT/pause.json"
  ctd_image k8s.io localhost/agsx-test:pause --config-json "$CT/pause.json"
}

teardown_file() { ctd_stop; }

# cri METHOD [JSON]: the response, one line of JSON.
cri() { CRI_TIMEOUT=60 timeout --kill-after=5 90 node "$BATS_TEST_DIRNAME/cri-client.js" "$CT/containerd.sock" "$@" 3>&-; }

# pod_config NAME: a PodSandboxConfig (hostname NAME-host, cgroups under
# /$CGP, helpers.bash's, which oci_teardown checks).
pod_config() {
  jq -nc --arg n "$1" --arg l "$CT/logs/$1" --arg cg "/$CGP" \
    '{metadata: {name: $n, uid: ("uid-" + $n), namespace: "agsx-test"}, hostname: ($n + "-host"),
      log_directory: $l, linux: {cgroup_parent: $cg}}'
}

# run_pod NAME: RunPodSandbox with handler agsx; prints the pod's id.
run_pod() {
  local r
  mkdir -p "$CT/logs/$1"
  r=$(cri RunPodSandbox "$(jq -nc --argjson c "$(pod_config "$1")" '{config: $c, runtime_handler: "agsx"}')") ||
    return 1
  jq -r .pod_sandbox_id <<<"$r" | tee -a "$CT/pods"
}

# run_container POD-ID POD-NAME NAME: created and started in the pod
# (sleep 1000, busybox's image); prints its id.
run_container() {
  local id
  id=$(cri CreateContainer "$(jq -nc --arg p "$1" --argjson c "$(pod_config "$2")" --arg n "$3" \
    '{pod_sandbox_id: $p, sandbox_config: $c,
      config: {metadata: {name: $n}, image: {image: "localhost/agsx-test:busybox"},
               command: ["sleep", "1000"], log_path: ($n + ".log")}}')" | jq -r .container_id) || return 1
  cri StartContainer "$(jq -nc --arg c "$id" '{container_id: $c}')" >/dev/null || return 1
  echo "$id"
}

# cexec ID CMD...: ExecSync; $output its stdout, $xstatus its exit code
# (no newline in an argument; jq would take `-c' for its own).
cexec() {
  local id=$1 r
  shift
  r=$(cri ExecSync "$(printf '%s\n' "$@" | jq -Rc --arg c "$id" '[., inputs] | {container_id: $c, cmd: ., timeout: 30}')") ||
    return 1
  output=$(jq -r .stdout <<<"$r")
  output=${output%$'\n'}
  xstatus=$(jq -r .exit_code <<<"$r")
}

# The init of a pod (its pause process) or container, from agsx-oci's
# state under the handler's Root (the shim's Root plus containerd's namespace).
init_pid() { "$AGSX_OCI" --root "$CT/agsx/k8s.io" state "$1" | jq -r .pid; }

remove_pod() {
  cri StopPodSandbox "{\"pod_sandbox_id\": \"$1\"}" >/dev/null &&
    cri RemovePodSandbox "{\"pod_sandbox_id\": \"$1\"}" >/dev/null
}

teardown() {
  [ -z "$FILE_SKIP" ] || return 0
  local leaks="" p
  for p in $(cat "$CT/pods" 2>/dev/null); do remove_pod "$p" 2>/dev/null || leaks+="pod $p not removed; "; done
  rm -f "$CT/pods"
  [ -z "$(ls "$CT/agsx/k8s.io" 2>/dev/null)" ] || leaks+="state: $(ls "$CT/agsx/k8s.io"); "
  # The pods' rootfs, /dev/shm and network namespaces.
  if grep -qF "$CT/state/" /proc/self/mountinfo; then
    leaks+="mounts: $(grep -F "$CT/state/" /proc/self/mountinfo | awk '{print $5}' | head -2); "
  fi
  # Cgroups (/$CGP/ID, the pods' cgroup_parent), processes, mounts under $T.
  oci_teardown || leaks+="(above) "
  [ -z "$leaks" ] || { echo "# leaked: $leaks" >&3; return 1; }
}

@test "cri: RunPodSandbox with handler agsx runs the pause process under agsx-oci in a user namespace" {
  run cri Version '{"version": "v1"}'
  [ "$status" -eq 0 ] && [ "$(jq -r .runtime_api_version <<<"$output")" = v1 ] || { echo "# $output" >&3; false; }
  local p pid
  p=$(run_pod p1)
  [ -n "$p" ]
  run cri PodSandboxStatus "{\"pod_sandbox_id\": \"$p\"}"
  [ "$(jq -r .status.state <<<"$output")" = SANDBOX_READY ] || { echo "# $output" >&3; false; }
  [ "$(jq -r .status.runtime_handler <<<"$output")" = agsx ]
  [[ "$(jq -r .status.network.ip <<<"$output")" == 198.18.7.* ]] || { echo "# $output" >&3; false; }
  [ -d "$CT/agsx/k8s.io/$p" ]
  pid=$(init_pid "$p")
  [ "$(tr -s ' ' <"/proc/$pid/cmdline" | tr '\0' ' ')" = "/bin/sleep 2147483647 " ]
  # agsx injects a user namespace: its root is not host root.
  [ "$(awk 'NR == 1 {print $2}' "/proc/$pid/uid_map")" != 0 ] || { cat "/proc/$pid/uid_map" >&3; false; }
  [ "$(readlink "/proc/$pid/ns/user")" != "$(readlink /proc/self/ns/user)" ]
  [ "$(readlink "/proc/$pid/ns/net")" != "$(readlink /proc/self/ns/net)" ]
  [ "$(readlink "/proc/$pid/ns/net")" != "$(readlink "/proc/$(cat "$CT/pid")/ns/net")" ]
  # In the cgroup the CRI plugin asked for, under the pod's cgroup_parent.
  [ "$(proc_cgroup_rel "$pid" pids)" = "/$CGP/$p" ] || { echo "# $(proc_cgroup_rel "$pid" pids)" >&3; false; }
  # Stopped: the pause process ends, its cgroup goes; removed: agsx's state goes.
  cri StopPodSandbox "{\"pod_sandbox_id\": \"$p\"}" >/dev/null
  for i in $(seq 50); do [ -e "/proc/$pid" ] || break; sleep 0.1; done
  [ ! -e "/proc/$pid" ] || { echo "# $pid lives on" >&3; false; }
  [ -z "$(ls -d /sys/fs/cgroup/*/"$CGP"/*/ /sys/fs/cgroup/"$CGP"/*/ 2>/dev/null)" ] || { echo "# cgroup left" >&3; false; }
  cri RemovePodSandbox "{\"pod_sandbox_id\": \"$p\"}" >/dev/null
  [ ! -e "$CT/agsx/k8s.io/$p" ]
  rm -f "$CT/pods"
}

@test "cri: two containers in an agsx pod share its network, ipc, uts, pid and user namespaces; ExecSync" {
  local p pid c1 c2 i pids
  p=$(run_pod p1)
  pid=$(init_pid "$p")
  c1=$(run_container "$p" p1 c1)
  c2=$(run_container "$p" p1 c2)
  [ -n "$c1" ]
  [ -n "$c2" ]
  pids="$pid $(init_pid "$c1") $(init_pid "$c2")"
  run cri ListContainers "{\"filter\": {\"pod_sandbox_id\": \"$p\"}}"
  [ "$(jq -r '[.containers[] | .state] | join(" ")' <<<"$output")" = "CONTAINER_RUNNING CONTAINER_RUNNING" ] ||
    { echo "# $output" >&3; false; }
  run cri ContainerStatus "{\"container_id\": \"$c1\"}"
  [ "$(jq -r .status.state <<<"$output")" = CONTAINER_RUNNING ] || { echo "# $output" >&3; false; }
  # Both run under agsx-oci, beside the pause container.
  [ -d "$CT/agsx/k8s.io/$c1" ]
  [ -d "$CT/agsx/k8s.io/$c2" ]
  # ExecSync: stdout and the exit code.
  cexec "$c1" sh -c 'echo out; echo err >&2; exit 3'
  [ "$output" = out ] && [ "$xstatus" = 3 ] || { echo "# $output $xstatus" >&3; false; }
  # Each container shows the pod's namespaces: the pause process's.
  local show='for n in net ipc uts pid user; do readlink /proc/self/ns/$n; done; hostname; cat /proc/self/uid_map'
  local want n
  want=$(for n in net ipc uts pid user; do readlink /proc/$pid/ns/$n; done)
  want+=$'\n'p1-host$'\n'$(cat /proc/$pid/uid_map)
  for c in "$c1" "$c2"; do
    cexec "$c" sh -c "$show"
    [ "$output" = "$want" ] && [ "$xstatus" = 0 ] || { printf '# %s\n# wanted:\n# %s\n' "$output" "$want" >&3; false; }
  done
  # The shared ipc and pid namespaces at work: c1's shared memory segment
  # and both containers' sleeps seen from c2 (the pod's pid namespace).
  cexec "$c1" /usr/local/bin/probe shm 4246
  [ "$output" = "shm 4246: made" ] || { echo "# $output" >&3; false; }
  cexec "$c2" /usr/local/bin/probe shm 4246
  [ "$output" = "shm 4246: found" ] || { echo "# $output" >&3; false; }
  cexec "$c2" sh -c 'ps -o args | grep -c "^sleep 1000$"'
  [ "$output" = 2 ] || { echo "# $output" >&3; false; }
  # A container stopped and removed, then the pod: nothing of either left.
  cri StopContainer "{\"container_id\": \"$c1\", \"timeout\": 1}" >/dev/null
  run cri ContainerStatus "{\"container_id\": \"$c1\"}"
  [ "$(jq -r .status.state <<<"$output")" = CONTAINER_EXITED ] || { echo "# $output" >&3; false; }
  cri RemoveContainer "{\"container_id\": \"$c1\"}" >/dev/null
  [ ! -e "$CT/agsx/k8s.io/$c1" ]
  remove_pod "$p"
  rm -f "$CT/pods"
  [ -z "$(ls "$CT/agsx/k8s.io")" ] || { ls "$CT/agsx/k8s.io" >&3; false; }
  for i in $pids; do [ ! -e "/proc/$i" ] || { echo "# $i lives on: $(tr '\0' ' ' <"/proc/$i/cmdline")" >&3; false; }; done
}

@test "cri: two agsx pods share nothing: user namespaces, id ranges, ipc, uts, network" {
  local p1 p2 c1 c2 pid1 pid2 t i
  p1=$(run_pod p1)
  p2=$(run_pod p2)
  pid1=$(init_pid "$p1")
  pid2=$(init_pid "$p2")
  for t in user ipc uts net pid; do
    [ "$(readlink /proc/$pid1/ns/$t)" != "$(readlink /proc/$pid2/ns/$t)" ] || { echo "# $t shared" >&3; false; }
  done
  [ "$(awk 'NR == 1 {print $2}' /proc/$pid1/uid_map)" != "$(awk 'NR == 1 {print $2}' /proc/$pid2/uid_map)" ]
  c1=$(run_container "$p1" p1 c1)
  c2=$(run_container "$p2" p2 c2)
  cexec "$c1" /usr/local/bin/probe shm 4247
  [ "$output" = "shm 4247: made" ] || { echo "# $output" >&3; false; }
  cexec "$c2" /usr/local/bin/probe shm 4247
  [ "$output" = "shm 4247: made" ] || { echo "# $output" >&3; false; }
  cexec "$c2" sh -c 'hostname; readlink /proc/self/ns/user'
  [ "$output" = "p2-host"$'\n'"$(readlink /proc/$pid2/ns/user)" ] || { echo "# $output" >&3; false; }
  # Each pod has its address on the test's bridge, and one pod reaches a
  # port of the other's (TCP: ping needs CAP_NET_RAW over a network
  # namespace the host's user namespace owns).
  local ip2
  ip2=$(cri PodSandboxStatus "{\"pod_sandbox_id\": \"$p2\"}" | jq -r .status.network.ip)
  [[ "$ip2" == 198.18.7.* ]] || { echo "# $ip2" >&3; false; }
  cexec "$c2" sh -c 'nc -l -p 8080 -e echo pong-from-p2 </dev/null >/dev/null 2>&1 &'
  for i in $(seq 20); do
    cexec "$c1" nc -w 5 "$ip2" 8080
    [ "$output" != pong-from-p2 ] || break
    sleep 0.2
  done
  [ "$output" = pong-from-p2 ] || { echo "# $output" >&3; false; }
}
