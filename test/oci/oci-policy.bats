#!/usr/bin/env bats
# agsx-oci's refusals and strict policy (config.json honoured, refused,
# tightened), the JSON log, console socket, hooks and features. Tests that
# check agsx's own policy skip under the oracle (RUNTIME=runc).

load helpers

# refuse BUNDLE WORDS: create fails with exit 1, one stderr line naming
# WORDS, one JSON object in --log, and leaves no state and no cgroup.
refuse() {
  local b=$1 words=$2
  rm -f "$T/log.json"
  run rt --log "$T/log.json" --log-format json create --bundle "$b" refused </dev/null
  [ "$status" -eq 1 ] || { show_run; false; }
  [ "$(printf '%s\n' "$output" | wc -l)" -eq 1 ] || { show_run; false; }
  assert_output_contains "$words"
  [[ "$output" != *"not found"* && "$output" != *"no such file"* ]] || { show_run; false; }
  [ "$(wc -l <"$T/log.json")" -eq 1 ]
  python3 - "$T/log.json" <<'PY'
import json, sys, datetime
for line in open(sys.argv[1]):
    o = json.loads(line)
    assert o["level"] == "error" and o["msg"], o
    datetime.datetime.fromisoformat(o["time"][:26] + "+00:00")
PY
  [ ! -e "$ROOT/refused" ]
  ! cgroup_mounts | while read -r m; do ls -d "$m/$CGP/b" 2>/dev/null; done | grep -q .
}

# The slices the --systemd-cgroup test makes (agsx removes only its leaf).
teardown() {
  local d m
  for m in $(cgroup_mounts); do
    for d in "$m/agsxt$$.slice/agsxt$$-s.slice" "$m/agsxt$$.slice"; do
      [ ! -d "$d" ] || rmdir "$d" 2>/dev/null || true
    done
  done
  oci_teardown
}

@test "refused fields: one line naming the field, nothing created" {
  agsx_only
  b=$(make_bundle b true)
  cp "$b/config.json" "$T/orig.json"
  while read -r line; do
    filter=${line% @@ *}
    words=${line##* @@ }
    jq "$filter" "$T/orig.json" >"$b/config.json"
    refuse "$b" "$words"
  done <<'EOF2'
.linux.intelRdt={"closID":"x"} @@ linux.intelRdt
.hooks.createContainer=[{"path":"/bin/true"}] @@ hooks.createContainer
.hooks.startContainer=[{"path":"/bin/true"}] @@ hooks.startContainer
.linux.seccomp={"defaultAction":"SCMP_ACT_ALLOW","listenerPath":"/run/x.sock"} @@ listenerPath
.process.capabilities.bounding+=["CAP_SYS_ADMIN"] @@ CAP_SYS_ADMIN
.process.capabilities.effective+=["CAP_SYS_PTRACE"] @@ privileged
.linux.namespaces|=map(select(.type!="pid")) @@ pid namespace
.linux.namespaces|=map(select(.type!="ipc")) @@ ipc namespace
.linux.namespaces|=map(select(.type!="network")) @@ host networking
.linux.namespaces+=[{"type":"user"}]|.linux.uidMappings=[{"containerID":0,"hostID":0,"size":65536}]|.linux.gidMappings=.linux.uidMappings @@ host root
.linux.namespaces+=[{"type":"pid"}] @@ appears twice
.linux.sysctl={"kernel.panic":"1"} @@ kernel.panic
.mounts+=[{"destination":"/x","type":"overlay","source":"overlay"}] @@ overlay
.linux.rootfsPropagation="rshared" @@ shared propagation
.linux.resources.rdma={"mlx":{"hcaHandles":1}} @@ rdma
.linux.personality={"domain":"LINUX32"} @@ personality
.ociVersion="2.0.0" @@ ociVersion
.linux.cgroupsPath="system.slice:agsx:x" @@ systemd
EOF2
}

# The field labels of agsx-oci(1)'s Refused list (.TP rows under
# ".B Refused", up to .RE), "\-" as "-".
man_refused() {
  awk '/^\.B Refused$/ { on = 1; next }
       on && /^\.RE$/ { exit }
       on && prev ~ /^\.TP/ && /^\.B / { sub(/^\.B /, ""); gsub(/\\-/, "-"); print }
       { prev = $0 }' "$BATS_TEST_DIRNAME/../../man/agsx-oci.1"
}

# The fields src/oci/spec.c refuses by name: its refused[] tables (with the
# prefix their message adds) and UNSUPPORTED("...") calls.
code_refused() {
  python3 - "$BATS_TEST_DIRNAME/../../src/oci/spec.c" <<'PY'
import re, sys
src = open(sys.argv[1]).read()
for m in re.finditer(r'refused\[\] = \{(.*?)\};(.{0,400})', src, re.S):
    body, after = m.group(1), m.group(2)
    pre = re.search(r'snprintf\(field, sizeof\(field\), "([a-z.]*)%s"', after)
    for k in re.findall(r'"([A-Za-z]+)"', body):
        print((pre.group(1) if pre else "") + k)
for k in re.findall(r'UNSUPPORTED\(err, "([^"]+)"\)', src):
    print(k)
PY
}

@test "agsx-oci(1)'s Refused list: each row is refused by the code, each refusal of the code is a row" {
  agsx_only
  local labels
  labels=$(man_refused)
  [ "$(wc -l <<<"$labels")" -ge 30 ] || { echo "# parsed: $labels" >&3; false; }
  # The code's refusals by name are all in the table.
  local k missing=""
  for k in $(code_refused); do
    grep -qxF "$k" <<<"$labels" || missing+="$k "
  done
  [ -z "$missing" ] || { echo "# refused by spec.c, not in agsx-oci(1): $missing" >&3; false; }
  # Each row: the configs that must be refused (LABEL @@ JQ @@ WORDS).
  local cases
  cases=$(cat <<'EOF2'
process.capabilities @@ .process.capabilities.bounding+=["CAP_SYS_ADMIN"] @@ privileged containers are not supported by agsx
process.capabilities @@ .process.capabilities.permitted+=["CAP_CHECKPOINT_RESTORE"] @@ privileged containers
process.user.username @@ .process.user.username="root" @@ process.user.username
process.ioPriority @@ .process.ioPriority={"class":"IOPRIO_CLASS_IDLE"} @@ process.ioPriority
process.scheduler @@ .process.scheduler={"policy":"SCHED_IDLE"} @@ process.scheduler
process.execCPUAffinity @@ .process.execCPUAffinity={"initial":"0"} @@ process.execCPUAffinity
linux.namespaces @@ .linux.namespaces|=map(select(.type!="pid")) @@ linux.namespaces: the host's pid namespace
linux.namespaces @@ .linux.namespaces|=map(select(.type!="ipc")) @@ linux.namespaces: the host's ipc namespace
linux.namespaces @@ .linux.namespaces|=map(select(.type!="uts")) @@ linux.namespaces: the host's uts namespace
linux.namespaces @@ .linux.namespaces|=map(select(.type!="mount")) @@ linux.namespaces: the host's mount namespace
linux.namespaces @@ .linux.namespaces|=map(select(.type!="network")) @@ linux.namespaces: host networking
linux.namespaces @@ (.linux.namespaces[]|select(.type=="network")).path="/proc/self/ns/net" @@ is the host's network namespace: host networking is not supported
linux.namespaces @@ .linux.namespaces+=[{"type":"ipc"}] @@ appears twice
linux.namespaces @@ .linux.namespaces+=[{"type":"bogus"}] @@ unknown namespace type
linux.namespaces[mount].path @@ (.linux.namespaces[]|select(.type=="mount")).path="/proc/1/ns/mnt" @@ linux.namespaces[mount].path
linux.namespaces[time] @@ .linux.namespaces+=[{"type":"time"}] @@ linux.namespaces[time]
linux.uidMappings @@ .linux.namespaces+=[{"type":"user"}]|.linux.uidMappings=[{"containerID":0,"hostID":0,"size":65536}]|.linux.gidMappings=[{"containerID":0,"hostID":300000,"size":65536}] @@ linux.uidMappings: a mapping onto host root
linux.uidMappings @@ .linux.uidMappings=[{"containerID":0,"hostID":300000,"size":65536}]|.linux.gidMappings=.linux.uidMappings @@ linux.uidMappings: mappings without a user namespace
linux.gidMappings @@ .linux.namespaces+=[{"type":"user"}]|.linux.uidMappings=[{"containerID":0,"hostID":300000,"size":65536}]|.linux.gidMappings=[{"containerID":0,"hostID":0,"size":65536}] @@ linux.gidMappings: a mapping onto host root
linux.gidMappings @@ .linux.namespaces+=[{"type":"user"}]|.linux.uidMappings=[{"containerID":0,"hostID":300000,"size":65536}] @@ linux.gidMappings: uid and gid mappings must come together
mounts.type @@ .mounts+=[{"destination":"/x","type":"ext4","source":"/dev/null"}] @@ mount type `ext4` is not supported
mounts.options @@ .mounts+=[{"destination":"/x","type":"bind","source":"/tmp","options":["rbind","idmap"]}] @@ mounts.options: `idmap`
mounts.uidMappings @@ .mounts+=[{"destination":"/x","type":"bind","source":"/tmp","options":["rbind"],"uidMappings":[{"containerID":0,"hostID":300000,"size":1}]}] @@ mounts.uidMappings
linux.rootfsPropagation @@ .linux.rootfsPropagation="shared" @@ linux.rootfsPropagation: shared propagation
linux.devices @@ .linux.devices=[{"path":"/dev/vdz","type":"b","major":254,"minor":99}] @@ linux.devices: block device
linux.sysctl @@ .linux.sysctl={"vm.swappiness":"10"} @@ linux.sysctl: `vm.swappiness` is not a namespaced sysctl
linux.cgroupsPath @@ .linux.cgroupsPath="system.slice:agsx:x" @@ linux.cgroupsPath: the systemd form
linux.resources.rdma @@ .linux.resources.rdma={"mlx":{"hcaHandles":1}} @@ linux.resources.rdma
linux.resources.network @@ .linux.resources.network={"classID":1} @@ linux.resources.network
linux.resources.blockIO.weightDevice @@ .linux.resources.blockIO={"weightDevice":[{"major":8,"minor":0,"weight":100}]} @@ linux.resources.blockIO.weightDevice
linux.resources.blockIO.leafWeight @@ .linux.resources.blockIO={"leafWeight":100} @@ linux.resources.blockIO.leafWeight
linux.resources.unified @@ .linux.resources.unified={"memory.high":"1"} @@ linux.resources.unified
linux.resources.cpu.realtimeRuntime @@ .linux.resources.cpu={"realtimeRuntime":1000} @@ linux.resources.cpu.realtimeRuntime
linux.resources.cpu.realtimeRuntime @@ .linux.resources.cpu={"realtimePeriod":1000} @@ linux.resources.cpu.realtimeRuntime
linux.seccomp.listenerPath @@ .linux.seccomp={"defaultAction":"SCMP_ACT_ALLOW","listenerPath":"/run/x.sock"} @@ linux.seccomp.listenerPath
linux.intelRdt @@ .linux.intelRdt={"closID":"x"} @@ linux.intelRdt
linux.personality @@ .linux.personality={"domain":"LINUX32"} @@ linux.personality
linux.timeOffsets @@ .linux.timeOffsets={"monotonic":{"secs":1}} @@ linux.timeOffsets
linux.netDevices @@ .linux.netDevices={"eth9":{"name":"eth9"}} @@ linux.netDevices
linux.memoryPolicy @@ .linux.memoryPolicy={"mode":"MPOL_BIND","nodes":"0"} @@ linux.memoryPolicy
linux.mountLabel @@ .linux.mountLabel="system_u:object_r:container_file_t:s0" @@ linux.mountLabel
hooks.createContainer @@ .hooks.createContainer=[{"path":"/bin/true"}] @@ hooks.createContainer
hooks.startContainer @@ .hooks.startContainer=[{"path":"/bin/true"}] @@ hooks.startContainer
ociVersion @@ .ociVersion="2.0.0" @@ ociVersion
solaris @@ .solaris={"milestone":"x"} @@ solaris
windows @@ .windows={"layerFolders":["x"]} @@ windows
vm @@ .vm={"kernel":{"path":"/x"}} @@ vm
zos @@ .zos={"namespaces":[{"type":"pid"}]} @@ zos
EOF2
)
  b=$(make_bundle b true)
  cp "$b/config.json" "$T/orig.json"
  local label rest filter words untested=""
  for label in $labels; do
    awk -F' @@ ' -v l="$label" '$1 == l { f = 1 } END { exit !f }' <<<"$cases" || untested+="$label "
  done
  [ -z "$untested" ] || { echo "# rows of agsx-oci(1) with no case here: $untested" >&3; false; }
  while IFS= read -r line; do
    label=${line%% @@ *}
    rest=${line#* @@ }
    filter=${rest% @@ *}
    words=${rest##* @@ }
    grep -qxF "$label" <<<"$labels" || { echo "# case for $label: not a row of agsx-oci(1)" >&3; false; }
    jq "$filter" "$T/orig.json" >"$b/config.json" || { echo "# jq: $filter" >&3; false; }
    if [ "$label" = linux.mountLabel ] && ! grep -q ' selinuxfs ' /proc/mounts; then
      # Ignored where SELinux is not enabled, as the row says.
      rtc --bundle "$b" ml || { cat "$T/create.err" >&3; false; }
      rt delete --force ml
      continue
    fi
    refuse "$b" "config: " || { echo "# row $label: $filter" >&3; false; }
    assert_output_contains "$words" || { echo "# row $label" >&3; false; }
  done <<<"$cases"
}

@test "apparmorProfile, selinuxLabel, mountLabel: ignored with a debug line where the host does not enforce them" {
  agsx_only
  [ "$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)" != Y ] ||
    skip "AppArmor is enabled here: the profile is applied (not testable on the CI host)"
  [ "$(stat -f -c %T /sys/fs/selinux 2>/dev/null)" != selinux ] || skip "SELinux is enabled here"
  b=$(make_bundle b sh -c 'echo ran; sleep 100')
  cfg "$b" '.process.apparmorProfile="containers-default-0.50.1" | .process.selinuxLabel="system_u:system_r:container_t:s0" | .linux.mountLabel="system_u:object_r:container_file_t:s0"'
  rt --debug create --bundle "$b" c1 </dev/null >"$T/out" 2>"$T/err"
  grep -q "apparmorProfile \`containers-default-0.50.1\` ignored: AppArmor is not enabled" "$T/err"
  grep -q "selinuxLabel .* ignored: SELinux is not enabled" "$T/err"
  grep -q "mountLabel .* ignored: SELinux is not enabled" "$T/err"
  rt start c1
  for i in $(seq 50); do grep -q ran "$T/out" && break; sleep 0.1; done
  grep -q ran "$T/out"
  # exec: process.json's profile (Podman copies the container's) likewise
  jq '.process | .args=["sh","-c","exit 3"]' "$b/config.json" >"$T/p.json"
  run rt exec --process "$T/p.json" c1
  [ "$status" -eq 3 ] || { show_run; false; }
  # without --debug nothing is said (create's stderr is the container's log)
  rt delete --force c1
  rt create --bundle "$b" c2 </dev/null >"$T/out2" 2>"$T/err2"
  [ ! -s "$T/err2" ]
  rt delete --force c2
}

@test "--systemd-cgroup: slice:prefix:name mapped to systemd's cgroupfs path (no systemd here); --no-pivot refused" {
  agsx_only
  [ ! -d /run/systemd/system ] || skip "systemd runs here: --systemd-cgroup is refused (tested below)"
  b=$(make_bundle b sleep 100)
  cfg "$b" '.linux.cgroupsPath=$p' --arg p "agsxt$$-s.slice:agsx:c1"
  rt --systemd-cgroup create --bundle "$b" c1 </dev/null
  pid=$(state_field c1 pid)
  run proc_cgroup_rel "$pid" memory
  [ "$output" = "/agsxt$$.slice/agsxt$$-s.slice/agsx-c1.scope" ] || { show_run; false; }
  local dir
  dir=$(proc_cgroup_dir "$pid" memory)
  [ -d "$dir" ]
  rt --systemd-cgroup delete --force c1
  [ ! -d "$dir" ]
  # without the flag the form is refused, as is a plain path with it, and a bad slice
  run rt create --bundle "$b" c1 </dev/null
  [ "$status" -eq 1 ]
  assert_output_contains "needs --systemd-cgroup"
  cfg "$b" '.linux.cgroupsPath="/plain/c1"'
  run rt --systemd-cgroup create --bundle "$b" c1 </dev/null
  [ "$status" -eq 1 ]
  assert_output_contains "slice:prefix:name"
  cfg "$b" '.linux.cgroupsPath="a--b.slice:x:c1"'
  run rt --systemd-cgroup create --bundle "$b" c1 </dev/null
  [ "$status" -eq 1 ]
  assert_output_contains "invalid systemd form"
  run rt create --no-pivot --bundle "$b" c1 </dev/null
  [ "$status" -eq 1 ]
  assert_output_contains "--no-pivot"
  [ ! -e "$ROOT/c1" ]
}

@test "a user namespace always: agsx's own range when the engine sends none" {
  b=$(make_bundle b /usr/local/bin/probe uidmap)
  run_ctr "$b"
  assert_success
  if is_agsx; then
    # container 0 → an agsx range (0x70000000 + slot*65536), 65536 ids
    [[ "$output" =~ "0 "(18[0-9]{8}|19[0-9]{8}|2[0-9]{9})" 65536" ]] || { show_run; false; }
    [[ "$output" != *"0 0 "* ]]
  fi
}

@test "the engine's mappings are honoured (ctr --uidmap, podman --userns=auto)" {
  b=$(make_bundle b /usr/local/bin/probe uidmap)
  cfg "$b" '.linux.namespaces+=[{"type":"user"}] | .linux.uidMappings=[{"containerID":0,"hostID":300000,"size":65536}] | .linux.gidMappings=.linux.uidMappings'
  chown -R 300000:300000 "$b/rootfs"
  run_ctr "$b"
  assert_success
  assert_output_contains "0 300000 65536"
}

@test "a user namespace by path (pods) is joined; one that maps host root is refused" {
  a=$(make_bundle a sleep 100)
  cfg "$a" '.linux.namespaces+=[{"type":"user"}] | .linux.uidMappings=[{"containerID":0,"hostID":300000,"size":65536}] | .linux.gidMappings=.linux.uidMappings'
  chown -R 300000:300000 "$a/rootfs"
  rtc --bundle "$a" pa
  pid=$(state_field pa pid)
  b=$(make_bundle b sh -c 'cat /proc/self/uid_map; readlink /proc/self/ns/user; id -u')
  chown -R 300000:300000 "$b/rootfs"
  cfg "$b" '.linux.namespaces+=[{"type":"user","path":$p}]' --arg p "/proc/$pid/ns/user"
  # runc 1.1 (the oracle) wants the mappings with the path; agsx reads them from it
  is_agsx || cfg "$b" '.linux.uidMappings=[{"containerID":0,"hostID":300000,"size":65536}] | .linux.gidMappings=.linux.uidMappings'
  run_ctr "$b"
  assert_success
  assert_output_contains "0     300000      65536"
  assert_output_contains "$(readlink /proc/$pid/ns/user)"
  if is_agsx; then
    unshare -U -r sleep 100 &
    local up=$!
    for i in $(seq 20); do [ -s /proc/$up/uid_map ] && break; sleep 0.1; done
    cfg "$b" '.linux.namespaces=[.linux.namespaces[]|select(.type!="user")]+[{"type":"user","path":$p}]' --arg p "/proc/$up/ns/user"
    run rt create --bundle "$b" c2 </dev/null
    kill $up
    [ "$status" -eq 1 ] || { show_run; false; }
    assert_output_contains "maps host root"
    [ ! -e "$ROOT/c2" ]
  fi
  # mappings sent with the path (runc 1.1 requires them) must be its own
  cfg "$b" '.linux.namespaces=[.linux.namespaces[]|select(.type!="user")]+[{"type":"user","path":$p}] | .linux.uidMappings=[{"containerID":0,"hostID":300000,"size":65536}] | .linux.gidMappings=.linux.uidMappings' --arg p "/proc/$pid/ns/user"
  run_ctr "$b"
  assert_success
  assert_output_contains "0     300000      65536"
  if is_agsx; then
    cfg "$b" '.linux.uidMappings=[{"containerID":0,"hostID":400000,"size":65536}] | .linux.gidMappings=.linux.uidMappings'
    run rt create --bundle "$b" c3 </dev/null
    [ "$status" -eq 1 ] || { show_run; false; }
    assert_output_contains "not the mappings of the user namespace"
    [ ! -e "$ROOT/c3" ]
  fi
  rt delete --force pa
}

@test "ipc, uts and pid joined by path (a pod): the owner's user namespace and range, shared; the hostname as runc" {
  a=$(make_bundle a sleep 1000)
  cfg "$a" '.hostname="pod-a"'
  rtc --bundle "$a" pa
  rt start pa
  pid=$(state_field pa pid)
  local join='.linux.namespaces|=map(if .type=="ipc" or .type=="uts" or .type=="pid" then .path=("/proc/"+$p+"/ns/"+.type) else . end)'
  # A member with the pod's hostname (Podman sends it with the uts path):
  # set in the joined namespace, as runc does.
  b=$(make_bundle b /usr/local/bin/probe shm 4243)
  cfg "$b" "$join"' | .hostname="pod-b"' --arg p "$pid"
  run_ctr "$b"
  assert_success
  assert_output_contains "shm 4243: made"
  # Another sees its segment, the hostname, the pod's processes; its
  # /dev/mqueue and /proc are mounted for the pod's namespaces.
  c=$(make_bundle c sh -c '/usr/local/bin/probe shm 4243; hostname; ps -o args; cat /proc/self/uid_map; readlink /proc/self/ns/user; readlink /proc/self/ns/ipc; grep -c " /dev/mqueue mqueue " /proc/self/mounts')
  cfg "$c" "$join"' | del(.hostname)' --arg p "$pid"
  run_ctr "$c"
  assert_success
  assert_output_contains "shm 4243: found"
  assert_output_contains "pod-b"
  assert_output_contains "sleep 1000"
  assert_output_contains "$(readlink /proc/$pid/ns/ipc)"
  if is_agsx; then
    assert_output_contains "$(readlink /proc/$pid/ns/user)"
    assert_output_contains "$(cat /proc/$pid/uid_map)"
    # The pod's range stays leased while a member lives, its first
    # container gone (ipc and uts shared: pid 1 of a shared pid namespace
    # takes its members along).
    d=$(make_bundle d sleep 1000)
    cfg "$d" '.linux.namespaces|=map(if .type=="ipc" or .type=="uts" then .path=("/proc/"+$p+"/ns/"+.type) else . end)' --arg p "$pid"
    rtc --bundle "$d" pd
    slot=$(jq .slot "$ROOT/pa/state.json")
    [ "$slot" -ge 0 ]
    [ "$(jq .slot "$ROOT/pd/state.json")" = "$slot" ]
    dpid=$(state_field pd pid)
    # Its user namespace joined by path (podman --userns container:pa):
    # the same range, shared and leased, the rootfs idmapped through it.
    e=$(make_bundle e sh -c 'ls -ln /etc/passwd; exec sleep 1000')
    cfg "$e" '.linux.namespaces+=[{"type":"user","path":$p}]' --arg p "/proc/$pid/ns/user"
    : >"$T/create.out"
    rtc --bundle "$e" pe
    rt start pe
    [ "$(jq .slot "$ROOT/pe/state.json")" = "$slot" ]
    epid=$(state_field pe pid)
    for i in $(seq 50); do grep -q passwd "$T/create.out" && break; sleep 0.1; done
    grep -q " 0 *0 .*/etc/passwd" "$T/create.out" || { cat "$T/create.out" >&3; false; }
    rt delete --force pa
    grep -q "^$dpid " "/run/agsx-uid-ranges/$slot" && grep -q "^$epid " "/run/agsx-uid-ranges/$slot" ||
      { cat "/run/agsx-uid-ranges/$slot" >&3; false; }
    rt delete --force pd
    rt delete --force pe
    ! grep -q "^$dpid \|^$epid " "/run/agsx-uid-ranges/$slot" || false
  fi
}

@test "ipc, uts or pid of the host's user namespace, or of one no container here runs in, are refused" {
  agsx_only
  b=$(make_bundle b true)
  cfg "$b" '.linux.namespaces|=map(if .type=="ipc" then .path=$p else . end)' --arg p "/proc/$$/ns/ipc"
  refuse "$b" "linux.namespaces[ipc].path: \`/proc/$$/ns/ipc\` belongs to the host's user namespace"
  unshare -U -r -u sleep 100 &
  local up=$!
  for i in $(seq 20); do [ -s /proc/$up/uid_map ] && break; sleep 0.1; done
  cfg "$b" '.linux.namespaces|=map(if .type=="ipc" then del(.path) elif .type=="uts" then .path=$p else . end)' --arg p "/proc/$up/ns/uts"
  run rt create --bundle "$b" c2 </dev/null
  kill $up
  wait $up || true
  [ "$status" -eq 1 ] || { show_run; false; }
  assert_output_contains "no container of this runtime root runs in"
  [ ! -e "$ROOT/c2" ]
}

@test "strict: new user namespaces denied, keyctl denied, NoNewPrivs forced, even without the engine's seccomp" {
  agsx_only
  b=$(make_bundle b sh -c '/usr/local/bin/probe syscall unshare-user; /usr/local/bin/probe syscall keyctl; /usr/local/bin/probe nnp')
  cfg "$b" 'del(.linux.seccomp) | .process.noNewPrivileges=false'
  run_ctr "$b"
  assert_success
  assert_output_contains "unshare-user: blocked"
  assert_output_contains "keyctl: blocked"
  assert_output_contains "NoNewPrivs=1"
}

@test "oci-host-network = allow (with compat): the host's network namespace, by omission or by path; alone refused" {
  agsx_only
  local host
  host=$(readlink /proc/self/ns/net)
  b=$(make_bundle b readlink /proc/self/ns/net)
  cfg "$b" '.linux.namespaces|=map(select(.type!="network"))'
  AGSX_OCI_POLICY=compat AGSX_OCI_HOST_NETWORK=allow run_ctr "$b"
  assert_success
  [ "$output" = "$host" ] || { show_run; false; }
  # by path: the runtime's own namespace, as /proc/PID/ns/net of a host process names it
  cfg "$b" '.linux.namespaces+=[{"type":"network","path":"/proc/'$$'/ns/net"}]'
  AGSX_OCI_POLICY=compat AGSX_OCI_HOST_NETWORK=allow run_ctr "$b"
  assert_success
  [ "$output" = "$host" ] || { show_run; false; }
  # the same config, host networking not allowed: refused, nothing made
  AGSX_OCI_POLICY=compat run_ctr "$b"
  assert_failure
  assert_output_contains "is the host's network namespace: host networking is not supported"
  # allow without compat: the configuration is refused, naming both keys
  AGSX_OCI_HOST_NETWORK=allow run_ctr "$b"
  assert_failure
  assert_output_contains "oci-host-network = allow needs oci-policy = compat"
}

@test "strict: /proc/kcore stays masked with an empty maskedPaths; the engine's masks add" {
  # /proc/kcore where the kernel has it, /proc/timer_list here too
  b=$(make_bundle b sh -c 'for f in /proc/kcore /proc/timer_list; do [ -e $f ] && echo "$f $(head -c 64 $f | wc -c)"; done; cat /etc/hostname; echo end')
  cfg "$b" '.linux.maskedPaths=["/etc/hostname"]'
  echo secret >"$b/rootfs/etc/hostname"
  if is_agsx; then cfg "$b" '.linux.maskedPaths+=[]'; fi
  run_ctr "$b"
  assert_success
  [[ "$output" != *secret* ]] || { show_run; false; }
  if is_agsx; then
    cfg "$b" '.linux.maskedPaths=[]'
    run_ctr "$b"
    assert_output_contains "/proc/timer_list 0"
    [[ "$output" != *"/proc/kcore "[1-9]* ]] || { show_run; false; }
  fi
}

@test "capabilities: the engine's set, clamped; exec cannot gain what the init lacks" {
  b=$(make_bundle b sleep 1000)
  cfg "$b" '.process.capabilities={"bounding":["CAP_CHOWN","CAP_KILL"],"effective":["CAP_CHOWN","CAP_KILL"],"permitted":["CAP_CHOWN","CAP_KILL"]}'
  rtc --bundle "$b" c1
  rt start c1
  wait_status c1 running
  # Podman's exec --privileged asks for everything.
  jq '.process | .args=["grep","CapBnd","/proc/self/status"] | .capabilities.bounding=["CAP_CHOWN","CAP_KILL","CAP_NET_ADMIN","CAP_SYS_ADMIN"] | .capabilities.effective=.capabilities.bounding | .capabilities.permitted=.capabilities.bounding' "$b/config.json" >"$T/p.json"
  run_rt exec --process "$T/p.json" c1
  if is_agsx; then
    # CAP_SYS_ADMIN asked for: refused, or clamped to the init's (0x21)
    [[ "$output" == *"CapBnd:	0000000000000021"* || "$output" == *privileged* ]] || { show_run; false; }
    jq '.capabilities.bounding=["CAP_CHOWN","CAP_KILL","CAP_NET_RAW","CAP_SETUID"] | .capabilities.effective=.capabilities.bounding | .capabilities.permitted=.capabilities.bounding' "$T/p.json" >"$T/p2.json"
    run_rt exec --process "$T/p2.json" c1
    assert_success
    assert_output_contains "CapBnd:	0000000000000021"
  fi
  rt delete --force c1
}

@test "console socket: one fd, a terminal, consoleSize applied, the init's stdin is a pty" {
  b=$(make_bundle b sh -c 'stty size; readlink /proc/self/fd/0; tty')
  cfg "$b" '.process.terminal=true | .process.consoleSize={"height":33,"width":101}'
  python3 - "$T/console.sock" "$T/console.out" <<'PY' &
import array, os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); s.listen(1)
c, _ = s.accept()
fds = array.array("i")
msg, anc, flags, addr = c.recvmsg(4096, socket.CMSG_SPACE(16))
for level, typ, data in anc:
    fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
out = open(sys.argv[2], "w")
out.write("nfds=%d tty=%s\n" % (len(fds), os.isatty(fds[0])))
out.flush()
data = b""
while True:
    try:
        d = os.read(fds[0], 4096)
    except OSError:
        break
    if not d:
        break
    data += d
out.write(data.decode(errors="replace"))
PY
  recv=$!
  for i in $(seq 50); do [ -S "$T/console.sock" ] && break; sleep 0.1; done
  rtc --bundle "$b" --console-socket "$T/console.sock" c1
  rt start c1
  wait_status c1 stopped
  rt delete c1
  for i in $(seq 50); do kill -0 $recv 2>/dev/null || break; sleep 0.1; done
  kill $recv 2>/dev/null || true
  grep -q "nfds=1 tty=True" "$T/console.out"
  grep -q "33 101" "$T/console.out"
  grep -q "/dev/pts/" "$T/console.out"
}

@test "hooks run in order with the state on stdin; a failing prestart fails create cleanly" {
  b=$(make_bundle b true)
  cat >"$T/hook" <<EOF2
#!/bin/sh
s=\$(cat)
echo "\$1 \$(echo "\$s" | jq -r .status) \$(echo "\$s" | jq -r .id)" >>"$T/hooks.log"
EOF2
  chmod +x "$T/hook"
  cfg "$b" '.hooks={"prestart":[{"path":$h,"args":["hook","prestart"]}],"createRuntime":[{"path":$h,"args":["hook","createRuntime"]}],"poststart":[{"path":$h,"args":["hook","poststart"]}],"poststop":[{"path":$h,"args":["hook","poststop"]}]}' --arg h "$T/hook"
  rtc --bundle "$b" c1
  rt start c1
  wait_status c1 stopped
  rt delete c1
  [ "$(cut -d' ' -f1 "$T/hooks.log" | tr '\n' ' ')" = "prestart createRuntime poststart poststop " ]
  [ "$(sed -n 1p "$T/hooks.log" | cut -d' ' -f2)" = creating ]
  [ "$(sed -n 4p "$T/hooks.log" | cut -d' ' -f2)" = stopped ]
  cfg "$b" '.hooks={"prestart":[{"path":"/bin/false"}]}'
  run rt create --bundle "$b" c2 </dev/null
  [ "$status" -ne 0 ]
  [ ! -e "$ROOT/c2" ]
}

@test "a bundle symlink pointing out of the rootfs: mount destinations stay inside" {
  b=$(make_bundle b sh -c 'ls /evil/; echo done')
  mkdir -p "$T/outside"
  ln -s "$T/outside" "$b/rootfs/evil"
  cfg "$b" '.mounts+=[{"destination":"/evil","type":"tmpfs","source":"tmpfs","options":["size=1m"]}]'
  run_ctr "$b"
  assert_success
  assert_output_contains done
  ! grep -qF "$T/outside" /proc/self/mountinfo || false
}

@test "features: valid JSON, the spec range, only the implemented hooks" {
  agsx_only
  run rt features
  [ "$status" -eq 0 ]
  echo "$output" | jq -e '.ociVersionMin and .ociVersionMax and (.hooks | sort == ["createRuntime","poststart","poststop","prestart"])'
  run rt --version
  assert_output_contains "agsx-oci version"
  run rt list --format json
  [ "$status" -eq 0 ]
  echo "$output" | jq -e 'type == "array"'
}
