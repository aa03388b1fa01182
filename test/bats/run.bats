#!/usr/bin/env bats
# test-runner: parallel
# agsx run: isolation (user namespace and uid ranges, capabilities, no_new_privs,
# seccomp, /proc, /sys, /dev, fds, hostname), the internal network, limits
# (memory, pids, disk, cpu), exit codes, --json, --timeout, image config,
# -t/-i, --read-only, volumes, the host image, and that nothing leaks.
#
# Every test has its own store ($ROOT, the busybox image loaded in setup) and
# state dir ($STATE); the default teardown of helpers.bash, in its unaided
# mode (unaided_setup), asserts that agsx itself left nothing, then runs
# kill --all + gc and its usual checks. Each test's sandbox cgroups go under
# a private parent, so that "every cgroup created during the test" means
# this test's, also while other files run in parallel.

load helpers

bats_require_minimum_version 1.5.0

setup_file() {
  busybox_setup_file
  # An image with an Entrypoint, and one without (for `env`, `pwd`, `id`).
  cat >"$BATS_FILE_TMPDIR/ep.json" <<'END'
{"Entrypoint":["/bin/echo","ep"],"Cmd":["c1"],"Env":["FOO=bar"],"WorkingDir":"/work","User":"agent"}
END
  cat >"$BATS_FILE_TMPDIR/cf.json" <<'END'
{"Cmd":["/bin/sh","-c","echo uid=$(id -u) gid=$(id -g) cwd=$(pwd) FOO=$FOO"],
 "Env":["PATH=/usr/local/bin:/usr/bin:/bin","FOO=bar"],"WorkingDir":"/work","User":"agent"}
END
  export EP="$BATS_FILE_TMPDIR/ep" CF="$BATS_FILE_TMPDIR/cf"
  "$FIXTURES/busybox-image" "$EP" --probe "$PROBE" --ref ep:1 \
    --config-json "$BATS_FILE_TMPDIR/ep.json" >/dev/null
  "$FIXTURES/busybox-image" "$CF" --probe "$PROBE" --ref cf:1 \
    --config-json "$BATS_FILE_TMPDIR/cf.json" >/dev/null
}

setup() {
  common_setup
  AX_TIMEOUT=30
  unaided_setup
  ax image load "$BB" >/dev/null
}

# ---- helpers -----------------------------------------------------------

# Removes what a SIGKILLed agsx leaves behind (its state dirs and their
# cgroups), once the sandbox's processes are gone, so later tests and the
# host stay clean.
reap_leftovers() {
  local d id
  for d in "$STATE"/*/; do
    id=$(basename "$d")
    case $id in slots | cache | '*') continue ;; esac
    cgroup_mounts | while read -r m; do rmdir "$m/$(cgroup_parent)/$id" 2>/dev/null || true; done
    rm -rf "$d"
  done
}

# The agsx command line, for `script` and background runs (no `timeout`).
agsx_cmdline() { echo "$AGSX --root $ROOT --state $STATE"; }

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# json FIELD: prints the field of the JSON document in $output ("null" for
# null, true/false for booleans).
json() {
  printf '%s' "$output" | python3 -c '
import json, sys
v = json.load(sys.stdin)[sys.argv[1]]
print(json.dumps(v) if v is None or isinstance(v, bool) else v)' "$1"
}

# ---- user namespace, capabilities, no_new_privs ---------------------------

@test "uid and gid map: 0-65535 to a private range at 0x70000000 or above, never root" {
  for m in uidmap gidmap; do
    run_ax run busybox probe $m
    assert_success
    [[ "$output" =~ ^0\ ([0-9]+)\ 65536$ ]] || { show_run; false; }
    local base=${BASH_REMATCH[1]}
    [ "$base" -ge "$UID_BASE" ] || { show_run; false; }
    [ $((base + UID_RANGE)) -le 4294967295 ] || { show_run; false; }
  done
  # the range is one of the slots this state dir handed out
  our_uid_bases | grep -qx "$base"
}

@test "two concurrent sandboxes get different uid ranges" {
  local cmd
  cmd=$(agsx_cmdline)
  timeout 20 $cmd run --timeout 15 busybox sh -c 'probe uidmap; sleep 1' >"$T/a" 2>&1 &
  local a=$!
  timeout 20 $cmd run --timeout 15 busybox sh -c 'probe uidmap; sleep 1' >"$T/b" 2>&1 &
  local b=$!
  wait $a
  wait $b
  grep -qE '^0 [0-9]+ 65536$' "$T/a"
  grep -qE '^0 [0-9]+ 65536$' "$T/b"
  local ra rb
  ra=$(awk '{print $2}' "$T/a")
  rb=$(awk '{print $2}' "$T/b")
  [ "$ra" != "$rb" ] || { echo "# both got $ra" >&3; false; }
  [ $((ra > rb ? ra - rb : rb - ra)) -ge "$UID_RANGE" ]
}

@test "capabilities: Docker's default set for root, none effective for a user" {
  run_ax run busybox probe caps
  assert_success
  assert_output_contains "CapPrm=00000000a80425fb"
  assert_output_contains "CapEff=00000000a80425fb"
  assert_output_contains "CapBnd=00000000a80425fb"
  assert_output_contains "CapAmb=0000000000000000"
  run_ax run -u agent busybox probe caps
  assert_success
  assert_output_contains "CapPrm=0000000000000000"
  assert_output_contains "CapEff=0000000000000000"
  assert_output_contains "CapBnd=00000000a80425fb"
  assert_output_contains "CapAmb=0000000000000000"
}

@test "no_new_privs is set and seccomp is in filter mode" {
  run_ax run busybox sh -c 'probe nnp; probe seccomp'
  assert_success
  [ "$output" = $'NoNewPrivs=1\nSeccomp=2' ] || { show_run; false; }
  run_ax run -u agent busybox sh -c 'probe nnp; probe seccomp'
  assert_success
  [ "$output" = $'NoNewPrivs=1\nSeccomp=2' ] || { show_run; false; }
}

# ---- seccomp ------------------------------------------------------------

@test "seccomp: each denied syscall and ioctl is blocked inside and not on the host" {
  local calls="keyctl bpf perf_event_open userfaultfd io_uring_setup mount umount2
    pivot_root unshare-user clone-newuser setns ptrace socket-alg ioctl-tiocsti
    ioctl-tioclinux add_key request_key open_by_handle_at kexec_load init_module
    finit_module delete_module reboot swapon acct"
  # One sandbox for all of them; stderr (the raw results) is discarded.
  run_ax run busybox sh -c "for c in $(echo $calls); do probe syscall \$c 2>/dev/null; done"
  assert_success
  local c host
  for c in $calls; do
    [[ "$output" == *"$c: blocked (errno=EPERM)"* ]] ||
      { echo "# $c not blocked with EPERM in the sandbox" >&3; show_run; return 1; }
    # Differential: the same probe, run on the host as real root.
    host=$("$PROBE" syscall "$c" 2>/dev/null)
    case $c in
    kexec_load | init_module | finit_module | delete_module)
      # This kernel is built without CONFIG_KEXEC / CONFIG_MODULES: the host
      # itself answers ENOSYS, so only the sandbox side (EPERM from the
      # filter, not ENOSYS from the kernel) is meaningful here.
      [[ "$host" == "$c: allowed" || "$host" == "$c: blocked (errno=ENOSYS)" ]] ||
        { echo "# host: $host" >&3; return 1; } ;;
    *)
      [ "$host" = "$c: allowed" ] ||
        { echo "# $c on the host: '$host' (expected allowed)" >&3; return 1; } ;;
    esac
  done
}

@test "seccomp: clone3 fails with ENOSYS inside (so libcs fall back to clone)" {
  run_ax run busybox probe syscall clone3
  assert_success
  [[ "$output" == *"clone3: blocked (errno=ENOSYS)"* ]] || { show_run; false; }
  run "$PROBE" syscall clone3
  [[ "$output" == *"clone3: allowed"* ]] || { show_run; false; }
}

@test "seccomp=unconfined: no filter" {
  run_ax run --security-opt seccomp=unconfined busybox sh -c 'probe seccomp; probe syscall keyctl 2>/dev/null'
  assert_success
  [ "$output" = $'Seccomp=0\nkeyctl: allowed' ] || { show_run; false; }
}

@test "seccomp=FILE: an OCI/Docker JSON profile replaces the default" {
  cat >"$T/deny-mkdir.json" <<'END'
{"defaultAction":"SCMP_ACT_ALLOW",
 "syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO","errnoRet":1}]}
END
  run_ax run --security-opt "seccomp=$T/deny-mkdir.json" busybox \
    sh -c 'probe seccomp; mkdir /tmp/x; echo mkdir=$?; touch /tmp/y && echo touch=ok'
  assert_success
  assert_output_contains "Seccomp=2"
  assert_output_contains "Operation not permitted"
  assert_output_contains "mkdir=1"
  assert_output_contains "touch=ok"
}

@test "seccomp: a bad or missing profile, or an unknown option, is refused" {
  printf '{"defaultAction":' >"$T/bad.json"
  run_ax run --security-opt "seccomp=$T/bad.json" busybox true
  assert_agsx_error "seccomp"
  run_ax run --security-opt "seccomp=$T/missing.json" busybox true
  assert_agsx_error "missing.json"
  run_ax run --security-opt seccomp=default busybox true
  assert_agsx_error
  run_ax run --security-opt apparmor=x busybox true
  assert_agsx_error "security-opt"
}

# ---- /proc, /sys, /dev, fds, hostname, /etc ------------------------------

@test "/proc: masked paths are empty or absent, /proc/sys is read-only" {
  run_ax run busybox sh -c '
    for f in /proc/kcore /proc/keys /proc/timer_list /proc/sched_debug /proc/latency_stats; do
      if [ -e $f ]; then echo "$f $(cat $f 2>/dev/null | wc -c)"; else echo "$f absent"; fi
    done
    probe write /proc/sys/kernel/hostname
    probe write /proc/sysrq-trigger
    probe statfs /proc/sys'
  assert_success
  local f
  for f in /proc/kcore /proc/keys /proc/timer_list /proc/sched_debug /proc/latency_stats; do
    [[ "$output" =~ (^|$'\n')"$f "(absent|0)($'\n'|$) ]] ||
      { echo "# $f is readable" >&3; show_run; return 1; }
  done
  refute_output_contains "writable"
  assert_output_contains "/proc/sys/kernel/hostname: errno="
  assert_output_contains "/proc/sysrq-trigger: errno="
  assert_output_contains "/proc/sys: ro,"
}

@test "/proc/1/cmdline is the init's title from the first instruction: no host path" {
  # The init is a fork of agsx, whose command line names the store and
  # state; a command that reads it at once must not see them.
  local i
  for i in $(seq 20); do
    run_ax run --rm busybox sh -c 'tr -d "\0" </proc/1/cmdline'
    assert_success
    [ "$output" = "agsx-init" ] || { show_run; false; }
  done
  run_ax run -d busybox sleep 30
  local id=$output
  echo "$id" >>"$T/ids"
  run_ax exec "$id" sh -c 'tr -d "\0" </proc/1/cmdline'
  [ "$output" = "agsx-init" ] || { show_run; false; }
  ax kill "$id" >/dev/null
}

@test "/sys is read-only" {
  run_ax run busybox sh -c 'probe write /sys/kernel; probe statfs /sys; probe write /sys/fs/cgroup'
  assert_success
  assert_output_contains "/sys/kernel: errno=EROFS"
  assert_output_contains "/sys: ro,"
  refute_output_contains "writable"
}

@test "/dev: only null zero full random urandom tty ptmx pts shm" {
  run_ax run busybox sh -c '
    find /dev \( -type c -o -type b \) | sort
    for d in /dev/pts /dev/shm; do [ -d $d ] && echo "dir $d"; done
    [ -c /dev/ptmx ] && echo "ptmx ok"
    echo x > /dev/null && echo "null ok"
    head -c 4 /dev/urandom | wc -c'
  assert_success
  [ "$output" = "/dev/full
/dev/null
/dev/pts/ptmx
/dev/random
/dev/tty
/dev/urandom
/dev/zero
dir /dev/pts
dir /dev/shm
ptmx ok
null ok
4" ] || { show_run; false; }
}

@test "fds: only 0, 1 and 2 reach the command, whatever the caller has open" {
  run ax run busybox probe fds 5>/dev/null 7</etc/hostname
  assert_success
  [ "$output" = "fds=0,1,2" ] || { show_run; false; }
  run ax run -i busybox probe fds 5>/dev/null 7</etc/hostname </dev/null
  [ "$output" = "fds=0,1,2" ] || { show_run; false; }
  run --separate-stderr ax run --json busybox probe fds 9</etc/hostname
  [ "$(json stdout)" = "fds=0,1,2" ] || { show_run; false; }
}

@test "hostname: the short id by default, in /etc/hostname and /etc/hosts" {
  run --separate-stderr ax run --json busybox sh -c 'hostname; cat /etc/hostname; grep -w "$(hostname)" /etc/hosts'
  [ "$status" -eq 0 ] || { show_run; false; }
  local id out
  id=$(json id)
  out=$(json stdout)
  [[ "$id" =~ ^[0-9a-f]{32}$ ]] || { show_run; false; }
  [ "$(sed -n 1p <<<"$out")" = "${id:0:12}" ] || { show_run; false; }
  [ "$(sed -n 2p <<<"$out")" = "${id:0:12}" ] || { show_run; false; }
  [[ "$(sed -n 3p <<<"$out")" =~ ^127\.[0-9.]+[[:space:]]+${id:0:12}$ ]] || { show_run; false; }
}

@test "--hostname sets the host name, /etc/hostname and /etc/hosts" {
  run_ax run --hostname my-box busybox sh -c 'hostname; cat /etc/hostname; grep -cw my-box /etc/hosts; grep -w localhost /etc/hosts | head -1'
  assert_success
  [[ "$output" =~ ^my-box$'\n'my-box$'\n'1$'\n'127\.0\.0\.1 ]] || { show_run; false; }
}

@test "/etc/resolv.conf, /etc/hosts and /etc/hostname are provided" {
  run_ax run busybox sh -c 'for f in /etc/resolv.conf /etc/hosts /etc/hostname; do [ -f $f ] && [ -r $f ] && echo "$f ok"; done'
  assert_success
  [ "$output" = $'/etc/resolv.conf ok\n/etc/hosts ok\n/etc/hostname ok' ] || { show_run; false; }
}

# ---- network internal ---------------------------------------------------

@test "network internal: only lo, and it is up" {
  run_ax run busybox sh -c 'tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " "; ip -o link show | wc -l; ip link show lo'
  assert_success
  [[ "$output" =~ ^lo$'\n'1$'\n'1:\ lo:\ \<LOOPBACK,UP ]] || { show_run; false; }
  # --network internal is the default and accepted explicitly
  run_ax run --network internal busybox sh -c 'tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " "'
  assert_success
  [ "$output" = "lo" ] || { show_run; false; }
}

@test "network internal: a server in the sandbox answers on 127.0.0.1" {
  # (the connect once the listener is up: at most 10 s on a loaded host)
  run_ax run --timeout 30 busybox sh -c 'probe listen 8080 & i=0
    until netstat -ltn 2>/dev/null | grep -q ":8080 " || [ $i -ge 100 ]; do sleep 0.1; i=$((i+1)); done
    probe connect 127.0.0.1 8080 2000; kill %1'
  assert_success
  assert_output_contains "listening 8080"
  assert_output_contains "connect 127.0.0.1:8080: ok"
}

@test "network internal: ip_unprivileged_port_start is 0, a user binds port 80" {
  run_ax run busybox cat /proc/sys/net/ipv4/ip_unprivileged_port_start
  assert_success
  [ "$output" = "0" ] || { show_run; false; }
  run_ax run --timeout 10 -u agent busybox sh -c 'probe id; timeout 1 probe listen 80; true'
  assert_success
  assert_output_contains "uid=1000"
  assert_output_contains "listening 80"
}

@test "network internal: sandbox root cannot change links, addresses or routes" {
  run_ax run busybox sh -c '
    ip link set lo down; echo link=$?
    ip addr add 127.0.0.2/8 dev lo; echo addr=$?
    ip route add 127.0.0.0/8 dev lo table 5; echo route=$?
    ip link show lo; ip -o addr show lo | grep -c "inet "'
  assert_success
  assert_output_contains "Operation not permitted"
  [[ "$output" =~ link=[1-9] ]] || { show_run; false; }
  [[ "$output" =~ addr=[1-9] ]] || { show_run; false; }
  [[ "$output" =~ route=[1-9] ]] || { show_run; false; }
  [[ "$output" == *"<LOOPBACK,UP"* ]] || { show_run; false; }
  refute_output_contains "127.0.0.2"
}

# ---- limits ---------------------------------------------------------------

@test "--memory: the OOM kill is exit 137, stop reason oom, one stderr line" {
  ! swap_unbounded ||
    skip "the host has swap that memory cgroups do not account (no memory.memsw.* or memory.swap.max): a limit bounds RAM only"
  run --separate-stderr ax run --memory 32m busybox probe alloc 200
  [ "$status" -eq 137 ] || { show_run; false; }
  [[ "$stderr" =~ ^agsx:\ sandbox\ [0-9a-f]{12}:\ out\ of\ memory:\ killed$ ]] ||
    { echo "# stderr: $stderr" >&3; false; }
  run --separate-stderr ax run --json --memory 32m busybox probe alloc 200
  [ "$status" -eq 137 ] || { show_run; false; }
  [ "$(json exit_code)" = 137 ]
  [ "$(json stop_reason)" = oom ] || { show_run; false; }
  [ "$(json signal)" = 9 ]
  [ -z "$stderr" ]
  # under the limit the allocation works
  run_ax run --memory 64m busybox probe alloc 16
  assert_success
  [ "$output" = "alloc 16: ok" ] || { show_run; false; }
}

@test "--pids: a fork bomb is contained and the host stays responsive" {
  local t0
  t0=$(now_ms)
  run_ax run --timeout 20 --pids 20 busybox probe fork-bomb 200
  assert_success
  [[ "$output" =~ ^forked=([0-9]+)\ failed_errno=EAGAIN$ ]] || { show_run; false; }
  [ "${BASH_REMATCH[1]}" -lt 20 ]
  [ $(($(now_ms) - t0)) -lt $(slow 5000) ]
  # the default limit (4096) lets a normal number of processes start
  run_ax run --timeout 20 busybox probe fork-bomb 100
  assert_success
  [ "$output" = "forked=100 failed_errno=none" ] || { show_run; false; }
}

@test "--disk: the writable layer fills up with ENOSPC inside, agsx exits 0" {
  run_ax run --disk 8m busybox probe fill /tmp/f 20
  assert_success
  [[ "$output" =~ ^fill:\ errno=ENOSPC\ after\ [0-9]+\ MiB$ ]] || { show_run; false; }
  # the default (1g) takes 20 MiB
  run_ax run busybox probe fill /tmp/f 20
  assert_success
  [ "$output" = "fill: wrote 20 MiB" ] || { show_run; false; }
}

@test "--cpus 0.5: the sandbox's cpu cgroup has a quota of half a period" {
  if cgroup_agsx_is_v2; then
    grep -qw cpu <<<"$(cgroup_v2_controllers)" || skip "the host's cgroup v2 hierarchy has no cpu controller"
  else
    cgroup_v1_mount cpu >/dev/null || skip "the host has no v1 cpu hierarchy"
  fi
  # The host name is the short id.
  timeout 40 $(agsx_cmdline) run --timeout 30 --cpus 0.5 busybox sh -c 'hostname; sleep 30' >"$T/out" 2>&1 &
  local pid=$! i id12 id cg
  for i in $(seq 100); do [ -s "$T/out" ] && break; sleep 0.05; done
  id12=$(head -1 "$T/out")
  [[ "$id12" =~ ^[0-9a-f]{12}$ ]] || { cat "$T/out" >&3; false; }
  id=$(ls "$STATE" | grep -m1 "^$id12")
  cg=$(sandbox_cgroup "$id" cpu) || { echo "# no cgroup found for $id" >&3; false; }
  local quota period
  if [ -f "$cg/cpu.max" ]; then
    read -r quota period <"$cg/cpu.max"
  else
    quota=$(cat "$cg/cpu.cfs_quota_us")
    period=$(cat "$cg/cpu.cfs_period_us")
  fi
  ax kill "$id" >/dev/null
  wait $pid || true
  [ "$quota" -eq $((period / 2)) ] || { echo "# $cg: quota $quota period $period" >&3; false; }
  [ "$quota" -eq 50000 ]
}

@test "bad limits are refused with one agsx: line" {
  local f
  for f in "--memory 0" "--memory lots" "--memory 1" "--cpus -1" "--cpus abc" "--cpus 0" \
    "--pids 0" "--pids -5" "--disk 1k" "--disk 0" "--disk lots"; do
    run_ax run $f busybox true
    assert_agsx_error "${f%% *}" || return 1
  done
}

# ---- exit codes -----------------------------------------------------------

@test "exit codes: own code, 126, 127, 128+N" {
  run_ax run busybox true
  assert_status 0
  run_ax run busybox sh -c 'exit 7'
  assert_status 7
  AX_CMD="agsx run busybox nosuchcmd"
  run -127 ax run busybox nosuchcmd
  [ "$output" = 'agsx: exec `nosuchcmd`: No such file or directory' ] || { show_run; false; }
  AX_CMD="agsx run busybox /no/such/path"
  run -127 ax run busybox /no/such/path
  assert_output_contains "/no/such/path"
  run_ax run busybox /etc/passwd
  assert_status 126
  [[ "$output" == "agsx: "*"/etc/passwd"* ]] || { show_run; false; }
  run_ax run busybox sh -c 'kill -9 $$'
  assert_status 137
  run_ax run busybox probe kill-self TERM
  assert_status 143
  run_ax run busybox probe kill-self INT
  assert_status 130
}

@test "a missing image is exit 125 with one agsx: line" {
  run_ax run nope true
  assert_agsx_error 'image `nope` not found'
  run_ax run busybox:nosuchtag true
  assert_agsx_error 'not found'
  run_ax run
  assert_agsx_error
}

@test "SIGINT and SIGTERM to agsx reach the command" {
  local cmd pid
  cmd=$(agsx_cmdline)
  for sig in INT TERM; do
    timeout 20 $cmd run --timeout 15 busybox sleep 30 &
    pid=$!
    # the sandbox runs (agsx is past its start: at most 10 s on a loaded host)
    local i
    for i in $(seq 100); do
      our_processes | awk '{print "/proc/" $1 "/cmdline"}' | xargs -r cat 2>/dev/null | tr '\0' ' ' |
        grep -q 'sleep 30' && break
      sleep 0.1
    done
    # timeout(1) forwards the signal to agsx
    kill -$sig $pid
    local rc=0
    wait $pid || rc=$?
    [ "$rc" -eq $((128 + $(kill -l $sig))) ] || { echo "# SIG$sig: status $rc" >&3; return 1; }
  done
}

# ---- --json -----------------------------------------------------------------

@test "--json: one object with the documented fields and types" {
  run --separate-stderr ax run --json busybox sh -c 'echo out; echo err >&2; exit 3'
  [ "$status" -eq 3 ] || { show_run; false; }
  [ -z "$stderr" ] || { echo "# stderr: $stderr" >&3; false; }
  printf '%s' "$output" | python3 -c '
import json, sys
d = json.load(sys.stdin)
want = {"exit_code": int, "stdout": str, "stderr": str, "duration_ms": int,
        "stop_reason": str, "truncated": bool, "stdout_truncated": bool,
        "stderr_truncated": bool, "id": str}
for k, t in want.items():
    assert isinstance(d[k], t), (k, d[k])
assert d["signal"] is None, d
assert d["error"] is None, d
assert d["exit_code"] == 3, d
assert d["stdout"] == "out\n" and d["stderr"] == "err\n", d
assert d["stop_reason"] == "exit", d
assert not d["truncated"] and not d["stdout_truncated"] and not d["stderr_truncated"], d
assert 0 <= d["duration_ms"] < 5000, d
assert len(d["id"]) == 32 and all(c in "0123456789abcdef" for c in d["id"]), d
' || { show_run; false; }
  # a command killed by a signal
  run --separate-stderr ax run --json busybox sh -c 'kill -9 $$'
  [ "$status" -eq 137 ]
  [ "$(json exit_code)" = 137 ]
  [ "$(json signal)" = 9 ]
  [ "$(json stop_reason)" = exit ] || [ "$(json stop_reason)" = killed ] || { show_run; false; }
}

@test "--json: duration_ms is plausible" {
  run --separate-stderr ax run --json busybox sleep 0.5
  [ "$status" -eq 0 ] || { show_run; false; }
  local d
  d=$(json duration_ms)
  [ "$d" -ge 450 ] && [ "$d" -lt $(slow 3000) ] || { show_run; false; }
}

# The phases between prepare and total follow one another: their sum is
# total, up to the few microseconds between the last one and the print.
timing_adds_up() {
  awk -v line="$1" 'BEGIN {
    sub(/^agsx: timing: /, "", line); n = split(line, p, ", "); sum = 0; total = -1
    for (i = 1; i <= n; i++) {
      m = split(p[i], f, " "); v = f[m - 1]; if (f[m] != "ms" || v !~ /^[0-9.]+$/) exit 2
      if (f[1] == "total") total = v; else if (f[1] != "startup") sum += v
    }
    d = total - sum; if (d < 0) d = -d
    exit (total > 0 && d <= 0.2 + total / 50) ? 0 : 1
  }'
}

@test "--timing: every phase in order, adding up to total; the end's phases" {
  run --separate-stderr ax run --timing --rm busybox sleep 0.2
  [ "$status" -eq 0 ] || { show_run; false; }
  local start end
  start=$(grep '^agsx: timing: startup ' <<<"$stderr")
  end=$(grep '^agsx: timing: command ' <<<"$stderr")
  [ "$(grep -c '^agsx: timing: ' <<<"$stderr")" -eq 2 ] || { show_run; false; }
  [[ "$start" == *", prepare "*", state+ids "*", cgroup "*", netns wait "*", netns+clone "*", go "*", rootfs "*", exec "*", ready "*", record "*", total "*" ms" ]] || { show_run; false; }
  timing_adds_up "$start" || { echo "# phases do not add up: $start" >&3; false; }
  [[ "$end" =~ ^"agsx: timing: command "([0-9]+)\.[0-9]+" ms, teardown "[0-9.]+" ms, release "[0-9.]+" ms, exit "[0-9.]+" ms"$ ]] || { show_run; false; }
  # (sleep began at its exec, before READY and the record: under load a
  # little of its 200 ms falls before `command`)
  [ "${BASH_REMATCH[1]}" -ge 100 ] || { show_run; false; }
  # Detached: the supervisor's phases come back with its report.
  run --separate-stderr ax run -d --timing --rm busybox true
  [ "$status" -eq 0 ] || { show_run; false; }
  [[ "$output" =~ ^[0-9a-f]{32}$ ]] || { show_run; false; }
  start=$(grep '^agsx: timing: startup ' <<<"$stderr")
  [[ "$start" == *", prepare "*", detach "*", setup "*", state+ids "*", exec "*", record "*", report "*", total "*" ms" ]] || { show_run; false; }
  timing_adds_up "$start" || { echo "# detached phases do not add up: $start" >&3; false; }
  echo "$output" >>"$T/ids"
  ax wait "$output" >/dev/null 2>&1 || true # gone already, or now
}

@test "--json: output is capped at 1 MiB per stream and flagged" {
  run --separate-stderr ax run --json busybox sh -c 'head -c 3000000 /dev/zero | tr "\0" a; echo tail >&2'
  [ "$status" -eq 0 ] || { show_run; false; }
  printf '%s' "$output" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert len(d["stdout"]) == 1048576, len(d["stdout"])
assert d["stdout"] == "a" * 1048576
assert d["stdout_truncated"] is True and d["truncated"] is True, d["truncated"]
assert d["stderr"] == "tail\n" and d["stderr_truncated"] is False
assert d["exit_code"] == 0
' || { echo "# status $status, ${#output} bytes" >&3; false; }
  # stderr too
  run --separate-stderr ax run --json busybox sh -c 'head -c 2000000 /dev/zero | tr "\0" b >&2'
  printf '%s' "$output" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert len(d["stderr"]) == 1048576 and d["stderr_truncated"] and d["truncated"]
assert d["stdout"] == "" and not d["stdout_truncated"]
'
}

@test "--json: a command that cannot be executed: exit 127, error set, no signal" {
  run -127 --separate-stderr ax run --json busybox nosuchcmd
  [ "$(json exit_code)" = 127 ]
  [[ "$(json error)" == *'nosuchcmd'* ]] || { show_run; false; }
  [ "$(json stop_reason)" = error ] || { show_run; false; }
  [ "$(json signal)" = null ] || { echo "# signal is $(json signal) for a command that never ran" >&3; show_run; false; }
}

# ---- --timeout --------------------------------------------------------------

@test "--timeout: the sandbox is stopped at its deadline (SIGTERM: 143)" {
  local t0 el
  t0=$(now_ms)
  run --separate-stderr ax run --timeout 1 busybox sleep 10
  el=$(($(now_ms) - t0))
  [ "$status" -eq 143 ] || { show_run; false; }
  [[ "$stderr" =~ ^agsx:\ sandbox\ [0-9a-f]{12}:\ deadline\ reached ]] || { echo "# stderr: $stderr" >&3; false; }
  [ "$el" -ge 900 ] && [ "$el" -lt $(slow 3000) ] || { echo "# took $el ms" >&3; false; }
  run --separate-stderr ax run --json --timeout 1 busybox sleep 10
  [ "$status" -eq 143 ]
  [ "$(json stop_reason)" = timeout ] || { show_run; false; }
  [ "$(json exit_code)" = 143 ]
}

@test "--timeout: a command ignoring SIGTERM is killed after the grace (137)" {
  local t0 el
  t0=$(now_ms)
  run --separate-stderr ax run --json --timeout 1 busybox sh -c 'trap "" TERM; sleep 10'
  el=$(($(now_ms) - t0))
  [ "$status" -eq 137 ] || { show_run; false; }
  [ "$(json stop_reason)" = timeout ] || { show_run; false; }
  [ "$(json signal)" = 9 ]
  [ "$el" -ge 2500 ] && [ "$el" -lt $(slow 5000) ] || { echo "# took $el ms" >&3; false; }
}

@test "--timeout: bad durations are refused with one agsx: line" {
  local d
  for d in 0 0s 25h 24h1s 86401 5x -1 1h1h 1.5 "" 99999999999999999999; do
    run_ax run --timeout "$d" busybox true
    assert_agsx_error "--timeout" || return 1
  done
  run_ax run --timeout 24h1s busybox true
  assert_agsx_error "maximum of 24h"
  run_ax run --timeout 25h busybox true
  assert_agsx_error "24h"
  # the accepted forms
  for d in 300s 5m 1h 1h30m 30 24h 86400; do
    run_ax run --timeout "$d" busybox true
    assert_success || return 1
  done
}

@test "--timeout: the default deadline is 5 minutes" {
  # agsx arms a timerfd with the deadline; its fdinfo shows what is left.
  local cmd pid i left=""
  cmd=$(agsx_cmdline)
  # (long enough to be seen however slowly agsx starts on a loaded host)
  $cmd run busybox sleep 5 &
  pid=$!
  for i in $(seq 200); do
    left=$(grep -h '^it_value:' /proc/$pid/fdinfo/* 2>/dev/null | head -1)
    [ -n "$left" ] && break
    sleep 0.05
  done
  wait $pid
  [[ "$left" =~ it_value:\ \(([0-9]+), ]] || { echo "# no timerfd: '$left'" >&3; false; }
  [ "${BASH_REMATCH[1]}" -ge 295 ] && [ "${BASH_REMATCH[1]}" -lt 300 ] || { echo "# $left" >&3; false; }
  run_ax run --help
  assert_output_contains "default 5m"
}

# ---- image config -------------------------------------------------------------

@test "image config: Entrypoint and Cmd; arguments replace Cmd" {
  ax image load "$EP" >/dev/null
  run_ax run ep:1
  assert_success
  [ "$output" = "ep c1" ] || { show_run; false; }
  run_ax run ep:1 x y
  assert_success
  [ "$output" = "ep x y" ] || { show_run; false; }
}

@test "image config: Env, WorkingDir (created), User by name" {
  ax image load "$CF" >/dev/null
  run_ax run cf:1
  assert_success
  [ "$output" = "uid=1000 gid=1000 cwd=/work FOO=bar" ] || { show_run; false; }
  run_ax run cf:1 sh -c '[ -d /work ] && echo dir; echo HOME=$HOME'
  assert_success
  [ "$output" = $'dir\nHOME=/home/agent' ] || { show_run; false; }
}

@test "image config: -u, -e and -w override it" {
  ax image load "$CF" >/dev/null
  run_ax run -u 0 cf:1
  assert_success
  [ "$output" = "uid=0 gid=0 cwd=/work FOO=bar" ] || { show_run; false; }
  run_ax run -u root cf:1
  [ "$output" = "uid=0 gid=0 cwd=/work FOO=bar" ] || { show_run; false; }
  run_ax run -u agent:root cf:1
  [ "$output" = "uid=1000 gid=0 cwd=/work FOO=bar" ] || { show_run; false; }
  run_ax run -u 1234:5678 cf:1
  [ "$output" = "uid=1234 gid=5678 cwd=/work FOO=bar" ] || { show_run; false; }
  run_ax run -e FOO=baz cf:1
  [ "$output" = "uid=1000 gid=1000 cwd=/work FOO=baz" ] || { show_run; false; }
  run_ax run -w /other cf:1
  [ "$output" = "uid=1000 gid=1000 cwd=/other FOO=bar" ] || { show_run; false; }
  HOSTVAR=from-caller run_ax run -e HOSTVAR cf:1 sh -c 'echo $HOSTVAR'
  assert_success
  [ "$output" = "from-caller" ] || { show_run; false; }
  run_ax run -u nosuch cf:1
  assert_agsx_error "unknown user"
  run_ax run -u agent:nosuchgroup cf:1
  assert_agsx_error "nosuchgroup"
}

# ---- -t and -i ----------------------------------------------------------------

# Runs a command on a new pty of 30 rows and 100 columns; prints its output
# (without \r) and then "status N".
pty_run() {
  python3 - "$@" <<'END'
import fcntl, os, pty, signal, struct, sys, termios
pid, fd = pty.fork()
if pid == 0:
    fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    os.execvp(sys.argv[1], sys.argv[1:])
signal.alarm(20)
out = b""
while True:
    try:
        d = os.read(fd, 4096)
    except OSError:
        break
    if not d:
        break
    out += d
_, st = os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace").replace("\r", ""))
print("status", os.waitstatus_to_exitcode(st))
END
}

@test "-t: the command gets a pty with the caller's window size" {
  run pty_run $(agsx_cmdline) run -t --timeout 20 busybox sh -c 'tty; [ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo all-tty'
  [ "$output" = $'/dev/pts/0\nall-tty\nstatus 0' ] || { show_run; false; }
  # The window size is there from the first instruction on (a command that
  # asks at once must not see 0x0): a few tries to catch a race.
  local i
  for i in 1 2 3 4 5; do
    run pty_run $(agsx_cmdline) run -t --timeout 20 busybox stty size
    [ "$output" = $'30 100\nstatus 0' ] || { echo "# try $i" >&3; show_run; return 1; }
  done
  # the exit code passes through
  run pty_run $(agsx_cmdline) run -t --timeout 20 busybox sh -c 'exit 5'
  [ "$output" = "status 5" ] || { show_run; false; }
  # with script(1), as a user would
  if command -v script >/dev/null; then
    run timeout 20 script -qfec "$(agsx_cmdline) run -t busybox tty" /dev/null
    [ "$(printf '%s' "$output" | tr -d '\r')" = "/dev/pts/0" ] || { show_run; false; }
  fi
  # without -t there is no terminal
  run_ax run busybox tty
  [ "$status" -ne 0 ]
  assert_output_contains "not a tty"
}

# A pty driver: runs agsx on a new pty, types ^C after 0.5 s, prints the exit
# status (as a shell would) or "timeout" after 3 s.
ctrl_c() {
  python3 - "$@" <<'END'
import os, pty, select, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
time.sleep(0.5)
os.write(fd, b"\x03")
t0 = time.monotonic()
while time.monotonic() - t0 < 3:
    r, _, _ = select.select([fd], [], [], 0.05)
    if r:
        try:
            os.read(fd, 4096)
        except OSError:
            pass
    wp, st = os.waitpid(pid, os.WNOHANG)
    if wp:
        print(os.waitstatus_to_exitcode(st) % 256 if os.WIFEXITED(st) else 128 + os.WTERMSIG(st))
        sys.exit(0)
print("timeout")
os.kill(pid, 9)
os.waitpid(pid, 0)
END
}

@test "-it: ^C interrupts the command (130)" {
  run ctrl_c $(agsx_cmdline) run -it --timeout 20 busybox sleep 30
  [ "$output" = 130 ] || { show_run; false; }
}

@test "-t without -i: ^C interrupts the command (130)" {
  run ctrl_c $(agsx_cmdline) run -t --timeout 20 busybox sleep 30
  if [ "$output" = timeout ]; then
    # the driver SIGKILLed agsx: clean up after it before failing
    sleep 0.5
    reap_leftovers
  fi
  [ "$output" = 130 ] || { show_run; false; }
}

@test "-i passes stdin; without -i stdin is empty" {
  run bash -c "echo hello | $(agsx_cmdline) run -i busybox cat"
  assert_success
  [ "$output" = "hello" ] || { show_run; false; }
  run bash -c "echo hello | $(agsx_cmdline) run busybox cat"
  assert_success
  [ "$output" = "" ] || { show_run; false; }
  run bash -c "printf 'a\nb\n' | $(agsx_cmdline) run --json -i busybox wc -l"
  [ "$(json stdout | tr -d ' ')" = 2 ] || { show_run; false; }
}

# ---- filesystem -----------------------------------------------------------------

@test "--read-only: the root filesystem cannot be written" {
  run_ax run --read-only busybox touch /x
  [ "$status" -ne 0 ] || { show_run; false; }
  assert_output_contains "Read-only file system"
  run_ax run --read-only busybox probe statfs /
  assert_success
  assert_output_contains "/: ro"
  run_ax run busybox sh -c 'touch /x && echo ok'
  assert_success
  [ "$output" = ok ]
}

@test "-v: read-write and read-only directory volumes, a file volume" {
  mkdir -p "$T/vol"
  echo hi >"$T/vol/f"
  chmod 1777 "$T/vol"
  echo file-volume >"$T/fv"
  run_ax run -v "$T/vol:/data" busybox sh -c 'cat /data/f; echo w >/data/g && echo wrote'
  assert_success
  [ "$output" = $'hi\nwrote' ] || { show_run; false; }
  [ "$(cat "$T/vol/g")" = w ]
  # files the sandbox creates belong to its range on the host, never to root
  [ "$(stat -c %u "$T/vol/g")" -ge "$UID_BASE" ]
  run_ax run -v "$T/vol:/data:ro" busybox sh -c 'cat /data/f; echo w >/data/h'
  [ "$status" -ne 0 ] || { show_run; false; }
  assert_output_contains "hi"
  assert_output_contains "Read-only file system"
  [ ! -e "$T/vol/h" ]
  run_ax run -v "$T/fv:/etc/fv:ro" busybox cat /etc/fv
  assert_success
  [ "$output" = file-volume ] || { show_run; false; }
}

@test "-v: targets under /proc, /sys, /dev and bad specs are refused" {
  mkdir -p "$T/vol"
  local v
  for v in "$T/vol:/proc" "$T/vol:/proc/x" "$T/vol:/sys/x" "$T/vol:/dev/x" \
    "/nonexistent:/x" "./rel:/x" "rel/x:/x" "$T/vol:rel" "$T/vol:/../x" "$T/vol:/x:rw:z" "$T/vol"; do
    run_ax run -v "$v" busybox true
    assert_agsx_error || return 1
  done
  run_ax run -v "$T/vol:/proc/x" busybox true
  assert_agsx_error "/proc/x"
}

@test "host image: the host's toolchain, nothing private" {
  run_ax run host python3 -c 'print(6 * 7)'
  assert_success
  [ "$output" = 42 ] || { show_run; false; }
  run_ax run host sh -c '
    for p in /home /etc/shadow /etc/gshadow /etc/ssh /var/lib /run/systemd; do [ -e $p ] && echo "present $p"; done
    echo "root: $(ls -A /root | wc -l)"
    touch /etc/x 2>/dev/null && echo "etc writable"
    touch /usr/x 2>/dev/null && echo "usr writable"
    touch /tmp/x && echo "tmp ok"
    touch /root/x && echo "root ok"
    id -u'
  assert_success
  [ "$output" = $'root: 0\ntmp ok\nroot ok\n0' ] || { show_run; false; }
  # the host's /root is not empty, yet nothing of it shows
  [ -n "$(ls -A /root)" ] || skip "the host's /root is empty"
}

# ---- no leaks when agsx itself dies ----------------------------------------------

@test "agsx SIGKILLed: the sandbox dies with it" {
  local rc=0 i
  timeout -s KILL 1 $(agsx_cmdline) run --timeout 20 busybox sleep 3131 || rc=$?
  [ "$rc" -eq 137 ]
  for i in $(seq 20); do
    [ -z "$(our_processes)" ] && ! pgrep -x -f 'sleep 3131' >/dev/null && break
    sleep 0.1
  done
  [ -z "$(our_processes)" ] || { echo "# left: $(our_processes)" >&3; false; }
  ! pgrep -a -x -f 'sleep 3131' || false
  ! grep -qF -e "$STATE" -e "$ROOT" /proc/self/mountinfo || false
  # Nobody removes a SIGKILLed agsx's state dir and cgroups (see the next
  # test); clean them up here so that only the processes are judged.
  reap_leftovers
}

@test "agsx SIGKILLed: agsx gc removes its state dir and cgroups" {
  local rc=0 i
  timeout -s KILL 1 $(agsx_cmdline) run --timeout 20 busybox sleep 3132 || rc=$?
  [ "$rc" -eq 137 ]
  for i in $(seq 20); do [ -z "$(our_processes)" ] && break; sleep 0.1; done
  ax gc >/dev/null 2>&1 || true
  # a later agsx invocation should also reap it (DESIGN.md §4)
  ax run busybox true
  local left
  left=$(leftover_state)
  if [ -n "$left" ]; then
    echo "# left after gc: state dirs $(echo $left); cgroups: $(for m in $(cgroup_mounts); do for i in $left; do ls -d "$m/$(cgroup_parent)/$i" 2>/dev/null; done; done | tr '\n' ' ')" >&3
    reap_leftovers
    false
  fi
}

@test "--rm: nothing of the sandbox stays in the state dir" {
  run_ax run --rm busybox true
  assert_success
  run_ax run --rm busybox sh -c 'exit 3'
  assert_status 3
  run_ax run --rm --timeout 1 busybox sleep 5
  assert_status 143
  [ -z "$(ls "$STATE" | grep -vx -e slots -e cache)" ] || { ls -la "$STATE" >&3; false; }
}

@test "--rm: record directories are recycled empty, at most 8 of them, and reused" {
  local i
  for i in $(seq 10); do ax run --rm busybox true & done
  wait
  local spares
  spares=$(cd "$STATE" && ls -d .spare-* 2>/dev/null | wc -l)
  [ "$spares" -ge 1 ] && [ "$spares" -le 8 ] || { ls -la "$STATE" >&3; false; }
  [ -z "$(find "$STATE"/.spare-* -mindepth 1 | head -1)" ] || { find "$STATE"/.spare-* >&3; false; }
  # The next sandbox takes one: its record is complete and listed, and the
  # directory is fresh (gc leaves young record directories alone).
  local id
  id=$(rund busybox sleep 30)
  [ "$(cd "$STATE" && ls -d .spare-* 2>/dev/null | wc -l)" -eq $((spares - 1)) ] || { ls -la "$STATE" >&3; false; }
  [ -f "$STATE/$id/state.json" ]
  [ "$(stat -c %a "$STATE/$id")" = 700 ]
  [ $(($(date +%s) - $(stat -c %Y "$STATE/$id"))) -le 5 ]
  run_ax ls -q
  assert_output_contains "${id:0:12}"
  ax kill "$id" >/dev/null
}

@test "a sandbox that fails to start leaves nothing behind" {
  run -127 ax run busybox nosuchcmd
  run_ax run -u nosuch busybox true
  assert_status 125
  run_ax run --memory 32m --cpus 0.5 --pids 10 busybox /etc/passwd
  assert_status 126
  run_ax run -w /etc/passwd busybox true
  [ "$status" -ne 0 ] || { show_run; false; }
  # (teardown checks state dirs, cgroups, mounts and processes)
}

@test "an image with more layers than one sandbox can take is refused cleanly" {
  local dirs=() i
  for i in $(seq 1 252); do
    mkdir -p "$T/l/$i" && echo "$i" >"$T/l/$i/f$i"
    dirs+=("$T/l/$i")
  done
  "$FIXTURES/mkimage" --ref many:1 "$T/many" "${dirs[@]}" >/dev/null
  ax image load "$T/many" >/dev/null
  run_ax run --rm many:1 /f1
  assert_agsx_error "at most 249"
}

@test "a sandbox's supervisor and init do not map libcrypto (SHA-256 loads it only for large inputs)" {
  local id spid ipid
  # The default seccomp profile is compiled, its cache key hashed: the run
  # path's hashing stays in agsx's own SHA-256.
  id=$(ax run -d busybox sleep 30)
  read -r spid ipid < <(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["supervisor"]["pid"], r["init"]["pid"])' "$STATE/$id/state.json")
  [ -n "$spid" ]
  [ -n "$ipid" ]
  [ "$spid" != "$ipid" ]
  # Both alive and really agsx: the maps are theirs, not a recycled pid's.
  grep -q agsx "/proc/$spid/maps"
  grep -q agsx "/proc/$ipid/maps"
  if grep -E 'libcrypto|libssl' "/proc/$spid/maps" "/proc/$ipid/maps"; then
    echo "# libcrypto mapped on the run path" >&3
    false
  fi
  # Nor is it linked in, shared or static (its constructor, which probes
  # the CPU at every exec, reads OPENSSL_ia32cap).
  run ldd "$AGSX"
  [[ "$output" != *libcrypto* ]]
  run -1 grep -ca OPENSSL_ia32cap "$AGSX"
  ax kill "$id" >/dev/null
}

@test "without libcrypto, image load hashes with agsx's own SHA-256 after one warning" {
  # The busybox layer is over 64 KiB: with libcrypto it goes to OpenSSL.
  run --separate-stderr env AGSX_LIBCRYPTO=/nonexistent/libcrypto.so.3 \
    "$AGSX" --root "$T/r2" --state "$STATE" image load "$BB"
  [ "$status" -eq 0 ]
  [ "$(grep -c 'agsx: warning: fast SHA-256 needs libcrypto (apt-get install libssl3)' <<<"$stderr")" -eq 1 ]
  # The same digests as the store loaded with libcrypto.
  [ "$(ls "$T/r2/blobs/sha256" | wc -l)" -ge 4 ]
  [ "$(ls "$T/r2/blobs/sha256" | sort)" = "$(ls "$ROOT/blobs/sha256" | sort)" ]
  run ax image ls
  local want=$output
  run "$AGSX" --root "$T/r2" --state "$STATE" image ls
  [ "$output" = "$want" ]
}

@test "the sandbox init keeps no fd of its supervisor (directories, locks, listeners)" {
  local id pid fds
  id=$(ax run -d -p 127.0.0.1::80 busybox sleep 30)
  pid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["init"]["pid"])' "$STATE/$id/state.json")
  fds=$(for f in /proc/$pid/fd/*; do readlink "$f"; done | sort)
  # stdio (stdin /dev/null, stdout and stderr the pipes into the sandbox's
  # log), the sync socket and the init's own signalfd; nothing else.
  if printf '%s\n' "$fds" | grep -vE '^(/dev/null|pipe:\[[0-9]+\]|socket:\[[0-9]+\]|anon_inode:\[signalfd\])$'; then
    echo "# unexpected fds of the init: $(echo $fds)" >&3
    false
  fi
  [ "$(printf '%s\n' "$fds" | grep -c '^socket:')" -eq 1 ]
  [ "$(printf '%s\n' "$fds" | grep -c '^pipe:')" -eq 2 ]
  [[ "$(readlink /proc/$pid/fd/1)" == pipe:* && "$(readlink /proc/$pid/fd/2)" == pipe:* ]]
  ax kill "$id" >/dev/null
}
