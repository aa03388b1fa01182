#!/usr/bin/env bats
# agsx-oci against the runtime spec where engines and runtime-tools'
# validation found it apart from runc (issue 26): engines' own seccomp
# profiles, mounts, devices, deprecated resources, groups, cgroup view,
# the shim's directories. Also run against the oracle (test/oci/run-oracle).
# See helpers.bash.

load helpers

# seccomp_profile DEFAULT-ACTION SYSCALL...: a linux.seccomp object that
# allows the named syscalls on x86_64 and refuses the rest with DEFAULT-ACTION.
seccomp_profile() {
  local action=$1
  shift
  printf '%s\n' "$@" | jq -R . | jq -s --arg a "$action" \
    '{"defaultAction":$a,"architectures":["SCMP_ARCH_X86_64"],"syscalls":[{"names":.,"action":"SCMP_ACT_ALLOW"}]}'
}

# What a static busybox applet and the runtimes' last steps need, and no
# way to open a file: neither open, openat nor openat2.
MINIMAL_SYSCALLS=(execve exit exit_group write writev brk arch_prctl set_tid_address
  set_robust_list rseq mmap munmap mprotect rt_sigaction rt_sigprocmask rt_sigreturn
  getuid geteuid getgid getegid getpid gettid getppid prlimit64 futex sigaltstack tgkill
  nanosleep sched_yield madvise close fcntl read fstatfs statfs getdents64 epoll_pwait
  epoll_ctl epoll_create1 pipe2 clone)

@test "seccomp: a profile without openat2 or open still runs the program, found in PATH" {
  b=$(make_bundle b echo minimal-ok)
  local extra=()
  # runc 1.1.5 itself opens /proc/self/fd under the engine's filter
  is_agsx || extra=(openat)
  cfg "$b" '.linux.seccomp=$p' --argjson p "$(seccomp_profile SCMP_ACT_ERRNO "${MINIMAL_SYSCALLS[@]}" "${extra[@]}")"
  run_ctr "$b"
  assert_success
  assert_output_contains minimal-ok
  # the same with an absolute path, and a failing open inside (EPERM, not a kill)
  cfg "$b" '.process.args=["/bin/sh","-c","cat /etc/passwd 2>&1; echo abs-ok"]'
  cfg "$b" '.linux.seccomp.syscalls[0].names+=["wait4","clone","clone3","vfork","getcwd","stat","fstat","newfstatat","ioctl","dup2","pipe2","getrandom","uname","umask","lseek","statx","getdents64","faccessat","faccessat2","access","chdir"]'
  run_ctr "$b"
  assert_success
  assert_output_contains abs-ok
  if is_agsx; then assert_output_contains "not permitted"; fi
}

@test "seccomp: defaultAction ERRNO with a sane allow list (no openat2) runs a shell" {
  b=$(make_bundle b sh -c 'grep -c root /etc/passwd; ls / >/dev/null && echo sane-ok; /usr/local/bin/probe syscall keyctl')
  # A runtime-tools-like default: the everyday syscalls, openat but no openat2.
  sane=("${MINIMAL_SYSCALLS[@]}" openat open stat lstat fstat newfstatat statx lseek pread64
    ioctl dup dup2 dup3 pipe pipe2 clone clone3 vfork fork wait4 getcwd chdir fchdir uname
    getdents64 access faccessat faccessat2 readlink readlinkat getrandom umask getpgrp
    setpgid getpgid getsid setsid poll ppoll select pselect6 kill sysinfo getrlimit
    getgroups setuid setgid setgroups capget capset prctl)
  cfg "$b" '.linux.seccomp=$p' --argjson p "$(seccomp_profile SCMP_ACT_ERRNO "${sane[@]}")"
  run_ctr "$b"
  assert_success
  assert_output_contains sane-ok
  assert_output_contains "keyctl: blocked"
}

@test "seccomp: agsx's baseline still applies under an engine's allow-all profile" {
  agsx_only
  b=$(make_bundle b sh -c '/usr/local/bin/probe syscall unshare-user; /usr/local/bin/probe syscall keyctl; echo done')
  cfg "$b" '.linux.seccomp={"defaultAction":"SCMP_ACT_ALLOW"}'
  run_ctr "$b"
  assert_success
  assert_output_contains "unshare-user: blocked"
  assert_output_contains "keyctl: blocked"
  assert_output_contains done
}

# mnt_src: "mount-point fstype source" for each line of the container's
# mountinfo (the output of run_ctr).
MNT_SRC="awk '{ for (i = 7; \$i != \"-\"; i++); print \$5, \$(i + 1), \$(i + 2) }' /proc/self/mountinfo"

@test "mounts: each filesystem reports its source in mountinfo, as runc" {
  b=$(make_bundle b sh -c "$MNT_SRC")
  cfg "$b" '.mounts+=[{"destination":"/data","type":"tmpfs","source":"my-scratch","options":["size=1m"]}]'
  run_ctr "$b"
  assert_success
  for want in "/proc proc proc" "/dev tmpfs tmpfs" "/dev/pts devpts devpts" "/dev/shm tmpfs shm" \
    "/dev/mqueue mqueue mqueue" "/sys sysfs sysfs" "/data tmpfs my-scratch"; do
    assert_output_contains "$want"
  done
}

@test "mounts: /proc first, then the config's order, in mountinfo" {
  mkdir -p "$T/src"
  b=$(make_bundle b sh -c "$MNT_SRC")
  # a bind and a tmpfs after /sys, a bind before /dev
  cfg "$b" '.mounts=[.mounts[0]] + [{"destination":"/m1","type":"bind","source":$s,"options":["rbind","ro"]}] + .mounts[1:] + [{"destination":"/m2","type":"tmpfs","source":"tmpfs"},{"destination":"/m3","type":"bind","source":$s,"options":["bind"]}]' --arg s "$T/src"
  want=$(jq -r '.mounts[].destination' "$b/config.json" | tr '\n' ' ')
  run_ctr "$b"
  assert_success
  got=$(printf '%s\n' "$output" | awk -v want="$want" 'BEGIN { n = split(want, w, " "); for (i = 1; i <= n; i++) in_cfg[w[i]] = 1 }
    in_cfg[$1] && !seen[$1]++ { printf "%s ", $1 }')
  [ "$got" = "$want" ] || { echo "# got:  $got" >&3; echo "# want: $want" >&3; false; }
}

@test "devices: created at their container path, by number, nested paths too" {
  [ -c /dev/net/tun ] || skip "the host has no /dev/net/tun"
  b=$(make_bundle b sh -c 'ls -l /dev/mynull /dev/net/tun /dev/deep/er/zero; echo x >/dev/mynull && echo wrote; head -c 3 /dev/deep/er/zero | od -An -tx1')
  # Docker's --device /dev/null:/dev/mynull: the container's path, the host's numbers
  cfg "$b" '.linux.devices=[{"path":"/dev/mynull","type":"c","major":1,"minor":3,"fileMode":438},{"path":"/dev/net/tun","type":"c","major":10,"minor":200},{"path":"/dev/deep/er/zero","type":"c","major":1,"minor":5}]'
  cfg "$b" '.linux.resources.devices=[{"allow":false,"access":"rwm"},{"allow":true,"type":"c","major":1,"minor":3,"access":"rwm"},{"allow":true,"type":"c","major":1,"minor":5,"access":"rwm"},{"allow":true,"type":"c","major":10,"minor":200,"access":"rwm"},{"allow":true,"type":"c","major":1,"minor":9,"access":"rwm"},{"allow":true,"type":"c","major":1,"minor":8,"access":"rwm"},{"allow":true,"type":"c","major":1,"minor":7,"access":"rwm"},{"allow":true,"type":"c","major":5,"minor":0,"access":"rwm"},{"allow":true,"type":"c","major":136,"access":"rwm"},{"allow":true,"type":"c","major":5,"minor":2,"access":"rwm"}]'
  run_ctr "$b"
  assert_success
  assert_output_contains "1,   3"
  assert_output_contains "10, 200"
  assert_output_contains "1,   5"
  assert_output_contains wrote
  assert_output_contains "00 00 00"
}

@test "devices: a number the host has no node for is refused, naming it" {
  agsx_only
  b=$(make_bundle b true)
  cfg "$b" '.linux.devices=[{"path":"/dev/nothere","type":"c","major":4095,"minor":4095}]'
  run_ctr "$b"
  [ "$status" -ne 0 ] || { show_run; false; }
  assert_output_contains "/dev/nothere"
  assert_output_contains "4095:4095"
}

@test "resources: the deprecated memory.kernel and kernelTCP are accepted and ignored, create and update" {
  b=$(make_bundle b sleep 1000)
  cfg "$b" '.linux.resources.memory={"limit":67108864,"kernel":0,"kernelTCP":0}'
  rtc --bundle "$b" c1 || { cat "$T/create.err" >&3; false; }
  pid=$(state_field c1 pid)
  d=$(proc_cgroup_dir "$pid" memory)
  if cgroup_agsx_is_v2; then f=$d/memory.max; else f=$d/memory.limit_in_bytes; fi
  [ "$(cat "$f")" = 67108864 ]
  # docker update --memory 32m: kernel 0 always with it
  run_rt update --resources - c1 <<<'{"memory":{"limit":33554432,"kernel":0,"kernelTCP":0},"cpu":{}}'
  assert_success
  [ "$(cat "$f")" = 33554432 ]
  # still numbers: garbage there is refused, nothing changed
  if is_agsx; then
    run_rt update --resources - c1 <<<'{"memory":{"limit":16777216,"kernel":"x"}}'
    assert_failure
    [ "$(cat "$f")" = 33554432 ]
  fi
  rt delete --force c1
}

@test "user: supplementary groups hold no duplicate gid, init and exec" {
  b=$(make_bundle b sh -c 'grep ^Groups: /proc/self/status; sleep 1000')
  cfg "$b" '.process.user={"uid":1000,"gid":1000,"additionalGids":[1000,10,10,20,1000]}'
  rtc --bundle "$b" c1
  rt start c1
  for i in $(seq 50); do grep -q Groups "$T/create.out" && break; sleep 0.1; done
  groups=$(sed -n 's/^Groups:\s*//p' "$T/create.out" | tr -s ' \t' '\n' | grep . | sort -n)
  [ -n "$groups" ]
  [ -z "$(uniq -d <<<"$groups")" ]
  for g in 10 20; do grep -qx "$g" <<<"$groups"; done
  jq '.process | .args=["grep","^Groups:","/proc/self/status"]' "$b/config.json" >"$T/p.json"
  run_rt exec --process "$T/p.json" c1
  assert_success
  groups=$(sed -n 's/^Groups:\s*//p' <<<"$output" | tr -s ' \t' '\n' | grep . | sort -n)
  [ -z "$(uniq -d <<<"$groups")" ]
  for g in 10 20; do grep -qx "$g" <<<"$groups"; done
  rt delete --force c1
}

@test "cgroup mount: /sys/fs/cgroup shows the container's own cgroup, read-only" {
  b=$(make_bundle b sh -c 'cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory.max 2>/dev/null; ls /sys/fs/cgroup/pids/ /sys/fs/cgroup/ 2>/dev/null | grep -c "^agsx-oci-test"; grep -E "^[0-9]+:(memory)?:" /proc/self/cgroup; echo 1 >/sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || echo write-refused; mkdir /sys/fs/cgroup/x 2>/dev/null || echo mkdir-refused')
  cfg "$b" '.linux.resources.memory.limit=67108864 | .linux.namespaces+=[{"type":"cgroup"}]'
  jq -e '.mounts[] | select(.type=="cgroup") | .options | index("ro")' "$b/config.json" >/dev/null
  run_ctr "$b"
  assert_success
  assert_output_contains 67108864
  # the host's tree above the container's cgroup is not there
  [[ "$output" == *$'\n0\n'* ]] || { show_run; false; }
  # its own cgroup is the root of its cgroup namespace
  [[ "$output" != *":/agsx-oci-test"* ]] || { show_run; false; }
  assert_output_contains write-refused
  assert_output_contains mkdir-refused
}

@test "state root and bundle below a directory without search bits (containerd's shim made /run/containerd 0600)" {
  b=$(make_bundle b sh -c 'echo inside-ok; sleep 1000')
  mkdir -p "$T/shim"
  mv "$b" "$T/shim/bundle"
  b=$T/shim/bundle
  cfg "$b" '.root.path=$r' --arg r "$b/rootfs"
  ROOT=$T/shim/state
  chmod 0600 "$T/shim"
  rtc --bundle "$b" c1 || { chmod 0700 "$T/shim"; cat "$T/create.err" >&3; false; }
  run_rt start c1
  assert_success
  for i in $(seq 50); do grep -q inside-ok "$T/create.out" && break; sleep 0.1; done
  grep -q inside-ok "$T/create.out"
  jq '.process | .args=["echo","exec-ok"]' "$b/config.json" >"$T/p.json"
  run_rt exec --process "$T/p.json" c1
  assert_success
  assert_output_contains exec-ok
  rt delete --force c1
  chmod 0700 "$T/shim"
}

@test "sysctl: net.ipv4.ping_group_range names the container's gids, clamped to its gid map" {
  b=$(make_bundle b sh -c 'cat /proc/sys/net/ipv4/ping_group_range; probe ping 127.0.0.1 2000')
  cfg "$b" '.process.user={"uid":1000,"gid":1000} | .linux.sysctl={"net.ipv4.ping_group_range":"1000 1000"}'
  run_ctr "$b"
  assert_success
  assert_output_contains $'1000\t1000'
  assert_output_contains "ping 127.0.0.1: reply"
  cfg "$b" '.linux.sysctl={"net.ipv4.ping_group_range":"0 999"}'
  run_ctr "$b"
  assert_success
  assert_output_contains $'0\t999'
  assert_output_contains "ping 127.0.0.1: failed"
  # Docker's "every group": as much of it as the gid map covers (agsx's
  # own range: 65536 gids)
  cfg "$b" '.linux.sysctl={"net.ipv4.ping_group_range":"0 2147483647"}'
  run_ctr "$b"
  assert_success
  assert_output_contains "ping 127.0.0.1: reply"
  if is_agsx; then assert_output_contains $'0\t65535'; fi
}

@test "maskedPaths and readonlyPaths: repeated and nested entries start, each path mounted once" {
  b=$(make_bundle b cat /proc/self/mountinfo)
  cfg "$b" '.linux.maskedPaths=["/proc/keys","/proc/keys","/proc//keys","/proc/acpi","/proc/acpi/","/proc/acpi/x","/proc/timer_list"]
    | .linux.readonlyPaths=["/proc/sys","/proc/sys","/proc/sys/net","/proc/sys/net/","/proc/bus","/proc/bus/"]'
  run_ctr "$b"
  assert_success
  local p n
  for p in /proc/keys /proc/acpi /proc/timer_list /proc/sys /proc/sys/net /proc/bus; do
    n=$(awk -v p="$p" '$5 == p' <<<"$output" | wc -l)
    [ "$n" -ge 1 ] || { echo "# $p: not mounted" >&3; show_run; false; }
    # once each is agsx's rule, not the spec's: the oracle is not held to it
    is_agsx || continue
    [ "$n" -eq 1 ] || { echo "# $p: $n mounts" >&3; show_run; false; }
  done
}

@test "mounts: binds' atime options applied; shared and rshared shared inside the container, never to the host" {
  mkdir -p "$T/src"/{a,b,c/sub}
  b=$(make_bundle b cat /proc/self/mountinfo)
  cfg "$b" '.mounts += [
    {"destination":"/a","type":"bind","source":($s+"/a"),"options":["bind","noatime"]},
    {"destination":"/b","type":"bind","source":($s+"/b"),"options":["rbind","strictatime","nodiratime"]},
    {"destination":"/c","type":"bind","source":($s+"/c"),"options":["bind","relatime","rshared"]},
    {"destination":"/d","type":"tmpfs","source":"tmpfs","options":["noatime","shared"]}]' --arg s "$T/src"
  if is_agsx; then
    # The source a peer of a host mount; a mount below the container's
    # shared copy must not reach it (runc, in the host's user namespace,
    # propagates it: not the oracle's to check).
    cfg "$b" '.mounts += [{"destination":"/c/sub","type":"tmpfs","source":"tmpfs"}]'
    mount --bind "$T/src" "$T/src"
    mount --make-shared "$T/src"
  fi
  run_ctr "$b"
  local leaked
  leaked=$(awk -v p="$T/src/c/sub" '$5 == p' /proc/self/mountinfo)
  if is_agsx; then umount -R "$T/src"; fi
  assert_success
  [ -z "$leaked" ] || { echo "# on the host: $leaked" >&3; false; }
  local a b c d
  a=$(awk '$5 == "/a"' <<<"$output")
  b=$(awk '$5 == "/b"' <<<"$output")
  c=$(awk '$5 == "/c"' <<<"$output")
  d=$(awk '$5 == "/d"' <<<"$output")
  [[ "$a" == *,noatime* ]] || { show_run; false; }
  [[ "$b" == *,nodiratime* && "$b" != *relatime* && "$b" != *noatime* ]] || { show_run; false; }
  [[ "$c" == *,relatime* && "$c" == *" shared:"* ]] || { show_run; false; }
  [[ "$d" == *,noatime* && "$d" == *" shared:"* ]] || { show_run; false; }
}

@test "resources: cgroup v1 memory.swappiness and disableOOMKiller applied, create and update" {
  ! cgroup_agsx_is_v2 || skip "cgroup v1 only (v2 has neither: ignored there, as runc; oci-cgroup2.bats)"
  b=$(make_bundle b sleep 1000)
  cfg "$b" '.linux.resources.memory={"limit":67108864,"swappiness":20,"disableOOMKiller":true}'
  rtc --bundle "$b" c1 || { cat "$T/create.err" >&3; false; }
  d=$(proc_cgroup_dir "$(state_field c1 pid)" memory)
  [ "$(cat "$d/memory.swappiness")" = 20 ]
  grep -qx "oom_kill_disable 1" "$d/memory.oom_control"
  # runc 1.1's update takes no swappiness from the JSON; agsx-oci does
  if is_agsx; then
    run_rt update --resources - c1 <<<'{"memory":{"swappiness":40}}'
    assert_success
    [ "$(cat "$d/memory.swappiness")" = 40 ]
    # Docker's "unset" (-1 as a uint64): left as it is
    run_rt update --resources - c1 <<<'{"memory":{"swappiness":18446744073709551615}}'
    assert_success
    [ "$(cat "$d/memory.swappiness")" = 40 ]
    run_rt update --resources - c1 <<<'{"memory":{"swappiness":101}}'
    assert_failure
    assert_output_contains linux.resources.memory.swappiness
    [ "$(cat "$d/memory.swappiness")" = 40 ]
  fi
  rt delete --force c1
}

# Without the controller a limit is skipped only where the host has no
# huge pages of that size (this development host: no hugetlb v1 hierarchy,
# an empty 2MB pool); runc 1.1 refuses it there.
@test "resources: hugepageLimits accepted, written where the hugetlb controller is, else skipped" {
  agsx_only
  b=$(make_bundle b sleep 1000)
  cfg "$b" '.linux.resources.hugepageLimits=[{"pageSize":"2MB","limit":4194304}]'
  local d f= pool
  pool=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/nr_{,overcommit_}hugepages 2>/dev/null |
    awk '{ s += $1 } END { print s + 0 }')
  if ! rtc --bundle "$b" c1; then
    # no controller, and 2MB pages the host could give: refused, nothing left
    grep -q "no hugetlb controller to limit them" "$T/create.err" || { cat "$T/create.err" >&3; false; }
    [ "$pool" -gt 0 ]
    [ -z "$(ls "$ROOT" 2>/dev/null)" ]
  else
    d=$(proc_cgroup_dir "$(state_field c1 pid)" hugetlb) || true
    if cgroup_agsx_is_v2; then
      [ -z "$d" ] || ! grep -qw hugetlb "$d/cgroup.controllers" || f=$d/hugetlb.2MB.max
    elif cgroup_v1_mount hugetlb >/dev/null; then
      f=$d/hugetlb.2MB.limit_in_bytes
    fi
    [ -n "$f" ] || [ "$pool" -eq 0 ] || { echo "# skipped with a 2MB pool of $pool" >&3; false; }
    [ -z "$f" ] || [ ! -e "$f" ] || [ "$(cat "$f")" = 4194304 ] || { cat "$f" >&3; false; }
    rt delete --force c1
  fi
  cfg "$b" '.linux.resources.hugepageLimits=[{"pageSize":"2M","limit":1}]'
  run rt create --bundle "$b" c2 </dev/null
  assert_failure
  assert_output_contains linux.resources.hugepageLimits
  [ -z "$(ls "$ROOT" 2>/dev/null)" ]
}
