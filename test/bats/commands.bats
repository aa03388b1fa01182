#!/usr/bin/env bats
# test-runner: parallel
# The commands Docker users and scripts reach for (issue 11 items 9 and 10):
# ls that never cuts a name or an image, inspect, wait, rm and stats.
#
# Every test has its own store ($ROOT, the busybox image loaded in setup)
# and state dir ($STATE). The default teardown of helpers.bash stops and
# collects everything with `agsx kill --all` + `agsx gc`, then checks that
# nothing of the test's sandboxes is left: no process, record, name, cgroup
# or mount.

load helpers

bats_require_minimum_version 1.5.0

setup_file() { busybox_setup_file; }

setup() { busybox_setup 30; }

# ---- helpers -----------------------------------------------------------

# py CODE ARGS...: runs python3 CODE on $output (as stdin), for JSON checks.
py() {
  local code=$1
  shift
  printf '%s' "$output" | python3 -c "$code" "$@" || { show_run; return 1; }
}

# ---- ls: nothing but ids is cut (item 9) --------------------------------

@test "ls: a long name and a long image reference appear whole; --no-trunc shows full ids" {
  local long=lc-accmark71afa2-0123456789-abcdef
  local img=registry.example.internal:5000/team/agents/a-rather-long-repository-name:v1.2.3-build.4567
  ax image load --tag "$img" "$BB" >/dev/null
  local a b
  a=$(rund --name "$long" --timeout 60 busybox sleep 600)
  b=$(rund --name short --timeout 60 "$img" sleep 600)
  run_ax ls
  assert_success
  # grep by the whole name and the whole image, as scripts do
  printf '%s\n' "$output" | grep -qw -- "$long" || { show_run; false; }
  printf '%s\n' "$output" | grep -F -- "$img" | grep -qw short || { show_run; false; }
  # ids are 12 digits by default, and the columns line up with the header
  printf '%s\n' "$output" | grep -q "^${a:0:12}  " || { show_run; false; }
  refute_output_contains "$a"
  local hdr col
  hdr=$(printf '%s\n' "$output" | head -1)
  col=${hdr%%IMAGE*}
  printf '%s\n' "$output" | grep "^${b:0:12}" | cut -c$((${#col} + 1))- | grep -q "^$img " ||
    { show_run; false; }
  # no line ends in blanks
  ! printf '%s\n' "$output" | grep -q ' $' || { show_run; false; }
  run_ax ls --no-trunc
  assert_success
  printf '%s\n' "$output" | grep -q "^$a  .*$long" || { show_run; false; }
  printf '%s\n' "$output" | grep -q "^$b  " || { show_run; false; }
  run_ax ls -q --no-trunc
  assert_success
  [ "$(sort <<<"$output")" = "$(printf '%s\n' "$a" "$b" | sort)" ] || { show_run; false; }
  run_ax ls -q
  assert_success
  [ "$(sort <<<"$output")" = "$(printf '%s\n' "${a:0:12}" "${b:0:12}" | sort)" ] ||
    { show_run; false; }
}

# ---- inspect -----------------------------------------------------------

@test "inspect: the full record as a JSON list; an unknown sandbox is reported, the others printed" {
  local a b
  a=$(rund --name insp --timeout 60 --memory 64m --pids 50 busybox sleep 600)
  b=$(rund busybox sh -c 'exit 4')
  ax wait "$b" >/dev/null || true
  run_ax inspect insp "${b:0:8}"
  assert_success
  py '
import json, sys
l = json.load(sys.stdin)
assert isinstance(l, list) and len(l) == 2, l
a, b = l
ls_fields = {"id", "name", "image", "image_digest", "status", "created", "deadline", "time_left",
             "stop_reason", "exit_code", "network", "address", "ports", "pid", "limits"}
more = {"started", "ended", "timeout", "deadline_ns", "supervisor", "init", "uid_range", "argv",
        "env", "user", "cwd", "hostname", "seccomp", "rm", "stop_requested"}
for s in l:
    assert ls_fields | more <= set(s), ("missing", (ls_fields | more) - set(s))
assert a["id"] == sys.argv[1] and a["name"] == "insp" and a["status"] == "running", a
assert a["limits"]["memory"] == 64 << 20 and a["limits"]["pids"] == 50, a
assert a["init"]["pid"] == a["pid"] > 0 and a["init"]["start_time"] > 0, a
assert a["supervisor"]["pid"] > 0 and a["supervisor"]["start_time"] > 0, a
assert a["uid_range"]["base"] >= 0x70000000 and a["uid_range"]["size"] == 65536, a
assert a["argv"] == ["sleep", "600"] and a["timeout"] == 60 and a["ended"] is None, a
assert b["id"] == sys.argv[2] and b["status"] == "exited", b
assert b["exit_code"] == 4 and b["stop_reason"] == "exit" and b["ended"], b
' "$a" "$b"
  # the same fields as ls --json, with the same values
  local lsj
  lsj=$(ax ls --json)
  py '
import json, sys
full = json.load(sys.stdin)[0]
short = json.loads(sys.argv[1])[0]
for k, v in short.items():
    if k != "time_left":
        assert full[k] == v, (k, full[k], v)
' "$lsj"
  run --separate-stderr ax inspect insp nosuch
  [ "$status" -eq 125 ] || { show_run; false; }
  [ "$stderr" = "agsx: no such sandbox \`nosuch\`" ] || { echo "# stderr: $stderr" >&3; false; }
  py 'import json, sys; l = json.load(sys.stdin); assert [s["name"] for s in l] == ["insp"], l'
  run_ax inspect nosuch
  assert_status 125
  assert_output_contains "no such sandbox \`nosuch\`"
}

# ---- wait --------------------------------------------------------------

@test "run -d --json: the library's {id, name} document, name null without --name" {
  run_ax run -d --json --name dj busybox sleep 30
  assert_status 0
  [[ "$output" =~ ^\{\"id\":\"[0-9a-f]{32}\",\"name\":\"dj\"\}$ ]] || { show_run; false; }
  run_ax run -d --json busybox sleep 30
  assert_status 0
  [[ "$output" =~ ^\{\"id\":\"[0-9a-f]{32}\",\"name\":null\}$ ]] || { show_run; false; }
}

@test "wait: joins run -d, an ended sandbox and one at its deadline; prints each code, exits with the last" {
  local a b c t0 t1
  # a last: its 1 s runs from (about) t0, however long the other starts take
  b=$(rund busybox sh -c 'exit 5')
  c=$(rund --name late --timeout 2 busybox sleep 600)
  sleep 0.3
  a=$(rund busybox sh -c 'sleep 1; exit 3')
  t0=$(date +%s%N)
  run_ax wait "$a" "${b:0:12}"
  t1=$(date +%s%N)
  assert_status 5
  [ "$output" = $'3\n5' ] || { show_run; false; }
  # it blocked until the end of a, no longer
  [ $(((t1 - t0) / 1000000)) -ge 400 ] && [ $(((t1 - t0) / 1000000)) -lt 5000 ] ||
    { echo "# wait took $(((t1 - t0) / 1000000)) ms" >&3; false; }
  # the deadline ends c: SIGTERM, 143, stop reason timeout
  run_ax wait --json late
  assert_status 143
  py '
import json, sys
l = json.load(sys.stdin)
assert l == [{"id": sys.argv[1], "name": "late", "exit_code": 143, "stop_reason": "timeout"}], l
' "$c"
  # already ended: at once
  run_ax wait "$b"
  assert_status 5
  [ "$output" = 5 ] || { show_run; false; }
  run_ax wait nosuch
  assert_agsx_error "no such sandbox \`nosuch\`"
  run --separate-stderr ax wait nosuch "$b"
  [ "$status" -eq 125 ] && [ "$output" = 5 ] || { show_run; false; }
}

@test "wait: sleeps (no busy loop) and notices a supervisor killed without a word" {
  local a sup pid
  a=$(rund --timeout 60 busybox sleep 600)
  ax wait "$a" >"$T/out" 2>&1 &
  pid=$!
  sleep 1.5
  # the waiter used (almost) no CPU meanwhile: utime+stime in clock ticks
  local ticks p wpid=
  for p in $(pgrep -f -- "--state $STATE wait"); do
    [ "$(cat /proc/"$p"/comm 2>/dev/null)" = agsx ] && wpid=$p
  done
  [ -n "$wpid" ] || { echo "# no agsx wait process" >&3; false; }
  ticks=$(awk '{print $14 + $15}' /proc/"$wpid"/stat)
  [ "$ticks" -le 10 ] || { echo "# the waiter used $ticks ticks of CPU in 1.5 s" >&3; false; }
  kill -0 "$pid"
  sup=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["supervisor"]["pid"])' \
    "$STATE/$a/state.json")
  kill -9 "$sup"
  local rc=0
  wait "$pid" || rc=$?
  [ "$rc" -eq 137 ] && [ "$(cat "$T/out")" = 137 ] ||
    { echo "# wait: status $rc, output $(cat "$T/out")" >&3; false; }
}

@test "wait: a run -d --rm sandbox's exit code reaches its waiters, then the record goes" {
  local a
  a=$(rund --rm --name gone busybox sh -c 'sleep 1; exit 7')
  ax wait gone >"$T/w1" 2>&1 &
  local p1=$!
  run_ax wait --json "$a"
  assert_status 7
  py 'import json, sys; l = json.load(sys.stdin); assert l[0]["exit_code"] == 7 and l[0]["name"] == "gone", l'
  wait "$p1" || [ $? -eq 7 ]
  [ "$(cat "$T/w1")" = 7 ] || { echo "# other waiter: $(cat "$T/w1")" >&3; false; }
  # the record and the name went right after
  local i
  for i in $(seq 20); do [ -e "$STATE/$a" ] || break; sleep 0.1; done
  [ ! -e "$STATE/$a" ]
  [ ! -e "$STATE/names/gone" ]
  # and without a waiter, as before: no end record is written
  a=$(rund --rm busybox true)
  for i in $(seq 20); do [ -e "$STATE/$a" ] || break; sleep 0.1; done
  [ ! -e "$STATE/$a" ]
  run_ax wait "$a"
  assert_agsx_error "no such sandbox"
}

# ---- rm ----------------------------------------------------------------

@test "rm: removes ended records; refuses a running one; -f stops it first; nothing is left" {
  local a b c
  a=$(rund --name ended1 busybox true)
  b=$(rund --name live --timeout 60 busybox sleep 600)
  c=$(rund --timeout 60 busybox sleep 600)
  ax wait "$a" >/dev/null
  run_ax rm ended1
  assert_success
  [ "$output" = ended1 ] || { show_run; false; }
  [ ! -e "$STATE/$a" ]
  [ ! -e "$STATE/names/ended1" ]
  run_ax rm ended1
  assert_agsx_error "no such sandbox \`ended1\`"
  run_ax rm live
  assert_agsx_error "sandbox \`${b:0:12}\` is running"
  [ -e "$STATE/$b/state.json" ]
  # (read from their inits: where agsx put them)
  local cgb cgc
  cgb=$(sandbox_cgroup "$b" pids) && cgc=$(sandbox_cgroup "$c" pids)
  [[ "$cgb" == *"$b"* && -d "$cgb" && "$cgc" == *"$c"* ]] || { echo "# cgroups: $cgb $cgc" >&3; false; }
  run_ax rm -f --json live "${c:0:12}"
  assert_success
  py 'import json, sys; assert json.load(sys.stdin) == sys.argv[1:], sys.argv' "$b" "$c"
  [ ! -e "$STATE/$b" ]
  [ ! -e "$STATE/$c" ]
  [ ! -e "$STATE/names/live" ]
  [ ! -d "$cgb" ] && [ ! -d "$cgc" ] || { echo "# cgroups left: $(ls -d "$cgb" "$cgc" 2>/dev/null)" >&3; false; }
  ! grep -qF "$STATE" /proc/self/mountinfo || false
  run_ax ls -a -q
  [ -z "$output" ] || { show_run; false; }
  # the name is free again
  rund --name live busybox true >/dev/null
}

# ---- stats -------------------------------------------------------------

@test "stats --no-stream: CPU, memory, pids, disk and network of running sandboxes" {
  local a b
  a=$(rund --name busy --memory 128m --timeout 60 busybox sh -c \
    'dd if=/dev/zero of=/tmp/blob bs=1M count=8 2>/dev/null; while :; do :; done')
  b=$(rund --name idle --timeout 60 busybox sleep 600)
  # the 8 MB file is written, the shell spins from then on (at most 10 s on a loaded host)
  local i
  for i in $(seq 100); do
    ax exec busy sh -c '[ "$(stat -c %s /tmp/blob)" -ge 8388608 ]' 2>/dev/null && break
    sleep 0.1
  done
  sleep 0.5
  run_ax stats --no-stream --json
  assert_success
  py '
import json, sys
l = json.load(sys.stdin)
by = {s["name"]: s for s in l}
assert set(by) == {"busy", "idle"}, l
busy, idle = by["busy"], by["idle"]
assert busy["id"] == sys.argv[1] and busy["status"] == "running", busy
# a spinning shell: most of a CPU (the machine is shared: at least 20 %)
assert 20 <= busy["cpu_percent"] <= 210, busy
assert idle["cpu_percent"] < 5, idle
assert busy["memory_limit"] == 128 << 20 and 0 < busy["memory"] < 128 << 20, busy
assert 0 < busy["memory_percent"] < 100, busy
assert idle["memory_limit"] is None and idle["memory_percent"] is None, idle
assert busy["pids"] >= 1 and busy["pids_limit"] == 4096, busy
# the 8 MB file is in the writable layer (a 1 GB tmpfs)
assert 8 << 20 <= busy["disk_used"] < 64 << 20 and busy["disk_size"] == 1 << 30, busy
assert idle["disk_used"] < 8 << 20, idle
for s in l:
    assert s["net_rx"] == 0 and s["net_tx"] == 0, s   # internal: only lo, not counted
    assert s["cpu_ns"] > 0, s
' "$a"
  run_ax stats --no-stream idle
  assert_success
  [ "$(printf '%s\n' "$output" | wc -l)" -eq 2 ] || { show_run; false; }
  printf '%s\n' "$output" | head -1 | grep -q '^ID  *NAME  *CPU %  *MEM USAGE / LIMIT  *MEM %  *PIDS  *DISK  *NET RX / TX$' ||
    { show_run; false; }
  printf '%s\n' "$output" | tail -1 | grep -qE "^${b:0:12}  +idle  +[0-9.]+%  +[0-9.]+[kMG]?B / -  +-  +[0-9]+  " ||
    { show_run; false; }
  run_ax stats --no-stream nosuch
  assert_agsx_error "no such sandbox \`nosuch\`"
}

@test "stats: streams a block per second off a terminal; ends when the named sandboxes end" {
  local a
  a=$(rund --timeout 60 busybox sh -c 'sleep 2.5')
  run_ax stats --json "$a"
  assert_success
  py '
import json, sys
frames = [json.loads(l) for l in sys.stdin.read().splitlines()]
assert 2 <= len(frames) <= 5, frames
assert frames[0][0]["status"] == "running" and frames[-1][0]["status"] == "exited", frames
' 
  a=$(rund --timeout 60 busybox sleep 600)
  timeout 3.5 "$AGSX" --root "$ROOT" --state "$STATE" stats >"$T/out" || true
  local blocks
  blocks=$(grep -c '^ID ' "$T/out")
  [ "$blocks" -ge 2 ] && [ "$blocks" -le 4 ] || { echo "# blocks: $blocks"; cat "$T/out"; false; }
  grep -q "^${a:0:12} " "$T/out"
}

@test "stats: network bytes come from the sandbox's own namespace" {
  # An internal sandbox has only lo, which is not counted (as in docker
  # stats). A veth pair made inside its namespace carries what a ping sends
  # out of one end (ARP requests nobody answers) to the other: both ends
  # are the sandbox's, nothing leaves its namespace.
  local a pid
  a=$(rund --timeout 60 busybox sleep 600)
  pid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["init"]["pid"])' \
    "$STATE/$a/state.json")
  run_ax stats --no-stream --json "$a"
  py 'import json, sys; s = json.load(sys.stdin)[0]; assert s["net_rx"] == s["net_tx"] == 0, s'
  nsenter -t "$pid" -n ip link add agsxt0 type veth peer name agsxt1
  nsenter -t "$pid" -n ip link set agsxt0 up
  nsenter -t "$pid" -n ip link set agsxt1 up
  nsenter -t "$pid" -n ip addr add 198.18.77.1/24 dev agsxt0
  nsenter -t "$pid" -n ping -c 2 -i 0.2 -W 1 198.18.77.2 >/dev/null 2>&1 || true
  run_ax stats --no-stream --json "$a"
  assert_success
  py '
import json, sys
s = json.load(sys.stdin)[0]
assert s["net_tx"] > 0 and s["net_rx"] > 0, s
'
  # the interfaces are the sandbox's, not the host's
  ! ip link show agsxt0 >/dev/null 2>&1 || false
}
