#!/usr/bin/env bats
# test-runner: parallel
# Processes a sandbox's supervisor owns (sandbox/processes.h), driven
# through the test front end test/fixtures/agsx-procs (the library's API,
# as `agsx serve` calls it), idle sandboxes, and the detached supervisor's
# fd hygiene.

load helpers

bats_require_minimum_version 1.5.0

setup_file() { busybox_setup_file; }

setup() {
  busybox_setup 60
  PROCS=${AGSX_BUILDDIR:-$(dirname "$AGSX")}/test/fixtures/agsx-procs
}

# The fixture on this test's store and state.
px() { timeout --kill-after=5 60 "$PROCS" --root "$ROOT" --state "$STATE" "$@"; }

# An idle busybox sandbox; its id in $id.
idle() {
  local out
  out=$(px create --idle "$@" busybox) || { echo "# create failed: $out" >&3; return 1; }
  id=${out%% *}
  echo "$id" >>"$T/ids"
}

# Waits (at most $2 s, default 20) until process $1 has ended.
wait_ended() {
  local i
  for i in $(seq 1 $((${2:-20} * 10))); do
    [[ "$(px get "$id" "$1")" == "$1 ended "* ]] && return 0
    sleep 0.1
  done
  echo "# process $1 did not end: $(px get "$id" "$1")" >&3
  return 1
}

# box_ok CMD: polls (at most 10 s) until sh -c CMD, started in the
# sandbox, ends with 0.
box_ok() {
  local i q
  for i in $(seq 100); do
    q=$(px start "$id" sh -c "$1") && wait_ended "$q" 2>/dev/null &&
      [[ "$(px get "$id" "$q")" == "$q ended 0 0 "* ]] && return 0
    sleep 0.1
  done
  echo "# never true in the sandbox: $1" >&3
  return 1
}

# log_has P PATTERN: polls (at most 10 s) until process P's output so far,
# without carriage returns (and trailing newlines), matches the glob PATTERN.
log_has() {
  local i out
  for i in $(seq 100); do
    out=$(px log "$id" "$1" 2>/dev/null)
    out=${out//$'\r'/}
    # shellcheck disable=SC2053
    [[ "$out" == $2 ]] && return 0
    sleep 0.1
  done
  echo "# output of $1 never matched: $out" >&3
  return 1
}

@test "processes: start, output, exit codes 0 and 3, 126 and 127" {
  idle
  local p
  p=$(px start "$id" sh -c 'echo out; echo err >&2; exit 3')
  wait_ended "$p"
  run --separate-stderr px log "$id" "$p"
  [ "$status" -eq 0 ] && [ "$output" = out ] || { show_run; return 1; }
  [ "$stderr" = $'err\nend exit=3 signal=0 error=' ] || { echo "# stderr: $stderr" >&3; return 1; }
  [[ "$(px get "$id" "$p")" == "$p ended 3 0 - sh -c "* ]]
  p=$(px start "$id" true)
  wait_ended "$p"
  [[ "$(px get "$id" "$p")" == "$p ended 0 0 - true" ]]
  run -127 px start "$id" nosuchcmd
  [[ "$output" == *"nosuchcmd"* ]] || { show_run; return 1; }
  run px start "$id" /etc/passwd
  [ "$status" -eq 126 ] || { show_run; return 1; }
  run px get "$id" 99999
  [ "$status" -eq 1 ] && [[ "$output" == *ENOENT* ]] || { show_run; return 1; }
}

@test "processes: env, cwd, user and the sandbox's restrictions" {
  idle
  local p
  p=$(px start -e FOO=bar --cwd /tmp --user 1000:1000 "$id" sh -c 'echo $FOO $(pwd) $(id -u):$(id -g); grep CapEff /proc/self/status; grep NoNewPrivs /proc/self/status')
  wait_ended "$p"
  run px log "$id" "$p"
  [[ "${lines[0]}" == "bar /tmp 1000:1000" ]] || { show_run; return 1; }
  [[ "$output" == *"CapEff:"*"0000000000000000"* ]] || { show_run; return 1; }
  [[ "$output" == *"NoNewPrivs:"*"1"* ]] || { show_run; return 1; }
}

@test "processes: stdin input and close, EPIPE after, kinds checked" {
  idle
  local p
  p=$(px start --stdin "$id" sh -c 'while read l; do echo "got $l"; done; echo eof')
  px input "$id" "$p" 'one\ntwo\n'
  run px input --pty "$id" "$p" 'x'
  [ "$status" -eq 1 ] && [[ "$output" == *"has no pty"*EINVAL* ]] || { show_run; return 1; }
  px close-stdin "$id" "$p"
  wait_ended "$p"
  run px log "$id" "$p"
  [ "$output" = $'got one\ngot two\neof\nend exit=0 signal=0 error=' ] || { show_run; return 1; }
  run px input "$id" "$p" 'late'
  [ "$status" -eq 1 ] && [[ "$output" == *"not running"* ]] || { show_run; return 1; }
  # Without --stdin, stdin is /dev/null.
  p=$(px start "$id" sh -c 'cat; echo done')
  wait_ended "$p"
  [ "$(px log "$id" "$p" 2>/dev/null)" = done ]
}

@test "processes: input to a process that closed its stdin: EPIPE, the supervisor lives on" {
  idle
  local p
  # (it lives until told to go: the input below must find it running)
  p=$(px start --stdin "$id" sh -c 'exec 0<&-; : >/tmp/closed; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo alive')
  box_ok 'test -e /tmp/closed'
  run px input "$id" "$p" 'into the void\n'
  [ "$status" -eq 1 ] && [[ "$output" == *EPIPE* ]] || { show_run; return 1; }
  box_ok ': >/tmp/go'
  wait_ended "$p"
  [ "$(px log "$id" "$p" 2>/dev/null)" = alive ]
  p=$(px start "$id" echo still-here)
  wait_ended "$p"
  [ "$(px log "$id" "$p" 2>/dev/null)" = still-here ]
}

@test "processes: a pty: controlling tty, size, input, resize" {
  idle
  local p
  p=$(px start --pty --cols 100 --rows 30 "$id" sh -c 'tty; stty size; while read l; do echo "got $l"; stty size; done')
  log_has "$p" "*30 100*"
  px input --pty "$id" "$p" 'hi\n'
  run px input "$id" "$p" 'x'
  [ "$status" -eq 1 ] && [[ "$output" == *"has a pty"*EINVAL* ]] || { show_run; return 1; }
  # the loop answered hi (with the old size) before the resize
  log_has "$p" "*got hi"$'\n'"30 100*"
  px resize "$id" "$p" 120 40
  px input --pty "$id" "$p" 'again\n'
  log_has "$p" "*got again"$'\n'"40 120*"
  px input --pty "$id" "$p" '\x04'
  wait_ended "$p"
  run px log "$id" "$p"
  local out=${output//$'\r'/}
  [[ "$out" == "/dev/pts/"* ]] || { show_run; return 1; }
  [[ "$out" == *$'\n30 100\n'*"got hi"*$'\n30 100\n'*"got again"*$'\n40 120\n'* ]] || { show_run; return 1; }
  [[ "$(px get "$id" "$p")" == "$p ended 0 0 - "* ]]
  run px resize "$id" "$p" 10 10
  [ "$status" -eq 1 ] || { show_run; return 1; }
}

@test "processes: signals; ENOENT once ended" {
  idle
  local p
  p=$(px start "$id" sleep 300)
  [[ "$(px get "$id" "$p")" == "$p running -1 0 - sleep 300" ]]
  px signal "$id" "$p" 15
  wait_ended "$p"
  [[ "$(px get "$id" "$p")" == "$p ended 143 15 - sleep 300" ]]
  run px signal "$id" "$p" 9
  [ "$status" -eq 1 ] && [[ "$output" == *ENOENT* ]] || { show_run; return 1; }
}

@test "processes: a timeout kills the process's whole tree" {
  idle
  local p t0=$SECONDS
  p=$(px start --timeout-ms 800 "$id" sh -c 'sleep 301 & sleep 302; echo never')
  wait_ended "$p" 15
  [ $((SECONDS - t0)) -lt 10 ]
  [[ "$(px get "$id" "$p")" == "$p ended 137 9 - "* ]]
  run px log "$id" "$p"
  [[ "$output" == *"end exit=137 signal=9 error=the process timed out"* ]] || { show_run; return 1; }
  [[ "$output" != *never* ]]
  local q
  q=$(px start "$id" ps -o args)
  wait_ended "$q"
  run px log "$id" "$q"
  [[ "$output" != *"sleep 30"* ]] || { show_run; return 1; }
}

@test "processes: outlive their client; output written while nobody reads is kept; tags" {
  idle
  local p
  p=$(px start --tag worker "$id" sh -c 'sleep 1; echo late; sleep 300')
  [[ "$(px find-tag "$id" worker)" == "$p running "* ]]
  run px find-tag "$id" nosuchtag
  [ "$status" -eq 1 ] && [[ "$output" == *ENOENT* ]] || { show_run; return 1; }
  sleep 2
  # (no reader meanwhile; on a loaded machine the echo may come later still)
  log_has "$p" late || true
  run --separate-stderr px log "$id" "$p"
  [ "$output" = late ] || { show_run; return 1; }
  # A reader from an offset and a follower.
  run --separate-stderr px log --from 0 "$id" "$p"
  [ "$output" = late ]
  px signal "$id" "$p" 9
  run --separate-stderr px log --follow "$id" "$p"
  [ "$output" = late ] && [ "$stderr" = "end exit=137 signal=9 error=" ] || { show_run; return 1; }
  [ -z "$(px list "$id")" ]
  [[ "$(px list --all "$id")" == "$p ended 137 9 worker "* ]]
}

@test "processes: a flood of output stays within the cap" {
  export AGSX_LOG_SIZE=256k
  idle
  local p
  p=$(px start "$id" sh -c 'i=0; while [ $i -lt 50000 ]; do echo "line $i ........................................................"; i=$((i+1)); done; echo last')
  wait_ended "$p" 60
  local kept
  kept=$(du -sb "$STATE/$id/procs/$p/log" | cut -f1)
  [ "$kept" -le $((256 * 1024 + 65536 + 4096)) ] || { echo "# kept $kept" >&3; return 1; }
  run --separate-stderr px log "$id" "$p"
  [ "${output##*$'\n'}" = last ] || { echo "# last: ${output: -80}" >&3; return 1; }
  [[ "$stderr" == "lost "* ]] || { echo "# stderr: $stderr" >&3; return 1; }
}

@test "processes: 50 at once; the sandbox's stop ends them all and their logs" {
  heavy
  idle
  local i pids=()
  for i in $(seq 1 50); do
    pids+=("$(px start "$id" sh -c "echo p$i; exec sleep 300")")
  done
  [ "$(px list "$id" | grep -c ' running ')" -eq 50 ]
  [ "$(printf '%s\n' "${pids[@]}" | sort -u | wc -l)" -eq 50 ]
  ax kill "$id" >/dev/null
  [ "$(px list --all "$id" | grep -c ' ended ')" -eq 50 ]
  local k
  for k in 1 25 50; do
    run --separate-stderr px log "$id" "${pids[$((k - 1))]}"
    [ "$output" = "p$k" ] && [ "$stderr" = "end exit=143 signal=15 error=" ] || {
      show_run
      echo "# stderr: $stderr" >&3
      return 1
    }
  done
  run px start "$id" true
  [ "$status" -ne 0 ] && [[ "$output" == *"not running"*ESRCH* ]] || { show_run; return 1; }
}

@test "processes: the deadline ends them, with their logs" {
  idle --timeout 3
  local p
  p=$(px start "$id" sleep 300)
  run ax wait "$id"
  [ "$output" = 143 ] || { show_run; return 1; }
  [[ "$(px get "$id" "$p")" == "$p ended "* ]]
  run --separate-stderr px log "$id" "$p"
  # (The stop's SIGTERM reached it first.)
  [ "$stderr" = "end exit=143 signal=15 error=" ] || { show_run; return 1; }
}

@test "processes: a paused sandbox refuses new ones (EAGAIN), its processes keep their state" {
  idle
  local p
  p=$(px start "$id" sh -c 'i=0; while :; do i=$((i+1)); echo $i >/tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done')
  box_ok 'test -s /tmp/count'
  ax pause "$id"
  run px start "$id" true
  [ "$status" -eq 125 ] && [[ "$output" == *"is paused"*EAGAIN* ]] || { show_run; return 1; }
  [[ "$(px get "$id" "$p")" == "$p running "* ]]
  ax unpause "$id"
  local q
  q=$(px start "$id" cat /tmp/count)
  wait_ended "$q"
  [ "$(px log "$id" "$q" 2>/dev/null)" -gt 0 ]
  # (agsx pause's freezer cgroup outlives the sandbox today, with `agsx run
  # -d` as well: a bug of pause, not of processes; removed here so that the
  # leak check looks at what this test owns.)
  ax kill "$id" >/dev/null
  local fz
  if fz=$(cgroup_v1_mount freezer); then rmdir "$fz/$(cgroup_parent)/$id" 2>/dev/null || true; fi
}

@test "idle sandboxes: listed, exec works, a stop is quick (143) with no command to wait for" {
  idle
  run_ax ls
  [[ "$output" == *"${id:0:12}"*running* ]] || { show_run; return 1; }
  run_ax exec "$id" echo inside
  assert_success
  [ "$output" = inside ]
  local t0=$SECONDS
  run_ax kill "$id"
  assert_success
  [ $((SECONDS - t0)) -lt 2 ] || { echo "# stop took $((SECONDS - t0)) s" >&3; return 1; }
  run_ax wait "$id"
  [ "$output" = 143 ] || { show_run; return 1; }
  [ ! -e "$STATE/$id/ctl" ]
}

@test "the detached supervisor holds none of its caller's fds and is not its child" {
  run px create --idle --hold-fd busybox
  [ "$status" -eq 0 ] || { show_run; return 1; }
  echo "${lines[0]%% *}" >>"$T/ids"
  [[ "${lines[1]}" == "hygiene held=socket:"*" leaked=0 "* ]] || { show_run; return 1; }
  local parent self
  parent=$(sed 's/.* parent=\([0-9]*\).*/\1/' <<<"${lines[1]}")
  self=$(sed 's/.* self=\([0-9]*\).*/\1/' <<<"${lines[1]}")
  [ "$parent" != "$self" ] || { show_run; return 1; }
  # It runs on after its caller is gone.
  id=${lines[0]%% *}
  [[ "$(ax ls -q)" == *"${id:0:12}"* ]]
}

@test "the control socket: 0600, survives garbage, refuses unknown fields" {
  idle
  [ "$(stat -c %a "$STATE/$id/ctl")" = 600 ]
  python3 - "$STATE/$id/ctl" <<'END'
import socket, sys, struct, json
def call(b):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(sys.argv[1]); s.send(b); r = s.recv(300000); s.close(); return r
for junk in [b"", b"x", b"AGC1\xff\xff\xff\xff", b"AGC1\x02\x00\x00\x00{}", b"\x00" * 1000]:
    try:
        r = call(junk) if junk else b"AGC1"
    except OSError:
        pass
j = json.dumps({"op": "start", "argv": ["true"], "bogus": 1}).encode()
r = call(b"AGC1" + struct.pack("<I", len(j)) + j)
assert b"unknown field" in r and b'"ok":false' in r, r
END
  local p
  p=$(px start "$id" echo still-answering)
  wait_ended "$p"
  [ "$(px log "$id" "$p" 2>/dev/null)" = still-answering ]
}

@test "processes: a killed supervisor's processes read as ended (137), new ones are refused" {
  local out sup p
  out=$(px create --idle busybox)
  id=${out%% *}
  sup=${out##* }
  echo "$id" >>"$T/ids"
  p=$(px start "$id" sleep 300)
  kill -9 "$sup"
  local i
  for i in $(seq 1 50); do
    kill -0 "$sup" 2>/dev/null || break
    sleep 0.1
  done
  [[ "$(px get "$id" "$p")" == "$p ended 137 9 - sleep 300" ]] || { px get "$id" "$p" >&3; return 1; }
  [ -z "$(px list "$id")" ]
  run px start "$id" true
  [ "$status" -ne 0 ] && [[ "$output" == *ESRCH* ]] || { show_run; return 1; }
}

@test "a caller SIGKILLed with its whole process group leaves the sandbox and its processes running" {
  setsid "$PROCS" --root "$ROOT" --state "$STATE" create --idle --linger busybox >"$T/created" &
  local caller=$! i
  for i in $(seq 1 100); do
    [ -s "$T/created" ] && break
    sleep 0.1
  done
  id=$(cut -d' ' -f1 "$T/created")
  echo "$id" >>"$T/ids"
  local p
  p=$(px start "$id" sleep 300)
  # As a server's unit stop or a terminal's hangup would: every process
  # of the caller's group at once.
  kill -9 -- "-$caller"
  wait "$caller" 2>/dev/null || true
  sleep 0.5
  [[ "$(ax ls -q)" == *"${id:0:12}"* ]] || { ax ls >&3; return 1; }
  [[ "$(px get "$id" "$p")" == "$p running "* ]]
  local q
  q=$(px start "$id" echo after)
  wait_ended "$q"
  [ "$(px log "$id" "$q" 2>/dev/null)" = after ]
}

@test "the detached supervisor does not inherit its caller's signal state" {
  local out
  out=$(px create --odd-signals busybox sh -c 'sleep 0.5; exit 3')
  id=${out%% *}
  echo "$id" >>"$T/ids"
  run_ax wait "$id"
  [ "$output" = 3 ] || { show_run; return 1; }
  out=$(px create --idle --odd-signals busybox)
  id=${out%% *}
  echo "$id" >>"$T/ids"
  local t0=$SECONDS
  run_ax kill "$id"
  assert_success
  run_ax wait "$id"
  [ "$output" = 143 ] && [ $((SECONDS - t0)) -lt 5 ] || { show_run; return 1; }
}

@test "processes: 120 at once under a soft fd limit of 1024 (the supervisor raises it)" {
  heavy
  local hard
  hard=$(ulimit -Hn)
  [ "$hard" -ge 4096 ] || skip "the hard fd limit ($hard) leaves no room to raise"
  local out
  out=$(prlimit --nofile=1024:"$hard" "$PROCS" --root "$ROOT" --state "$STATE" create --idle busybox)
  id=${out%% *}
  echo "$id" >>"$T/ids"
  local i n=0
  for i in $(seq 1 120); do
    px start "$id" sleep 300 >/dev/null && n=$((n + 1))
  done
  [ "$n" -eq 120 ] || { echo "# started $n" >&3; return 1; }
  ax kill "$id" >/dev/null
  [ "$(px list --all "$id" | grep -c ' ended ')" -eq 120 ]
}
