#!/usr/bin/env bats
# test-runner: parallel
# Long-lived sandboxes (issue 4): run -d and its supervisor, deadlines and
# update, records under --state (atomic, locked, names unique, corrupt ones
# cleaned), ls, exec (the sandbox's very restrictions), kill and gc.
#
# Every test has its own store ($ROOT, the busybox image loaded in setup) and
# state dir ($STATE). The default teardown of helpers.bash stops and
# collects everything with `agsx kill --all` + `agsx gc`, then asserts that
# nothing of the test's sandboxes remains (processes, supervisors, records,
# cgroups, mounts).
# The tests that run `gc` with AGSX_GC_MIN_AGE=0 (which collects every
# empty sandbox cgroup on the host) use a private cgroup parent.

load helpers

bats_require_minimum_version 1.5.0

setup_file() { busybox_setup_file; }

setup() { busybox_setup 30; }

# ---- helpers -----------------------------------------------------------

# sb_json ID FIELD: a field of the sandbox's `agsx ls -a --json` entry
# ("null" for null; nested fields as a.b).
sb_json() {
  ax ls -a --json | python3 -c '
import json, sys
want, path = sys.argv[1], sys.argv[2].split(".")
for s in json.load(sys.stdin):
    if s["id"] == want:
        v = s
        for k in path: v = v[k]
        print(json.dumps(v) if v is None or isinstance(v, bool) else v)
        sys.exit(0)
print("<absent>")' "$1" "$2"
}

# Children pids of PID (from /proc).
children_of() { cat /proc/"$1"/task/*/children 2>/dev/null | tr ' ' '\n' | grep . || true; }

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# wait_ended ID...: waits (at most 10 s) until each sandbox's record says
# exited and its supervisor is gone (it wrote the record last): a test that
# then reads, corrupts or acts on the ended record races nothing.
wait_ended() {
  local s i sp
  for s in "$@"; do
    for i in $(seq 100); do
      if [ "$(rec "$s" status 2>/dev/null)" = exited ]; then
        sp=$(rec "$s" supervisor.pid 2>/dev/null)
        { [ -z "$sp" ] || [ "$sp" = null ] || ! alive "$sp"; } && break
      fi
      sleep 0.1
    done
  done
}

# in_box ID CMD: polls (at most 10 s) until CMD succeeds in the sandbox.
in_box() { poll 100 in_box_once "$@"; }
in_box_once() { ax exec "$1" sh -c "$2" >/dev/null 2>&1; }

# json FIELD: a field of the JSON document in $output.
json() {
  printf '%s' "$output" | python3 -c '
import json, sys
v = json.load(sys.stdin)[sys.argv[1]]
print(json.dumps(v) if v is None or isinstance(v, bool) else v)' "$1"
}

# Fails when any record under $STATE does not parse as JSON (a record that
# disappears while being read is fine).
all_records_parse() {
  python3 - "$STATE" <<'PY'
import json, os, sys
state, bad = sys.argv[1], []
for d in os.listdir(state):
    p = os.path.join(state, d, 'state.json')
    try:
        data = open(p, 'rb').read()
    except (FileNotFoundError, NotADirectoryError):
        continue
    try:
        json.loads(data)
    except Exception as e:
        bad.append(f'{d}: {e}: {data[:80]!r}')
print('\n'.join(bad))
sys.exit(1 if bad else 0)
PY
}

# Samples every record every 20 ms until $T/stop-sampler exists; parse
# failures go to $T/corrupt.log. Starts in the background: SAMPLER is its pid.
start_sampler() {
  : >"$T/corrupt.log"
  python3 - "$STATE" "$T/stop-sampler" "$T/corrupt.log" "$T/samples" <<'PY' &
import json, os, sys, time
state, stop, log, count = sys.argv[1:5]
n = 0
end = time.time() + 120
while not os.path.exists(stop) and time.time() < end:
    try:
        dirs = os.listdir(state)
    except FileNotFoundError:
        dirs = []
    for d in dirs:
        p = os.path.join(state, d, 'state.json')
        try:
            data = open(p, 'rb').read()
        except (FileNotFoundError, NotADirectoryError):
            continue
        n += 1
        try:
            json.loads(data)
        except Exception as e:
            with open(log, 'a') as f:
                f.write(f'{d}: {e}: {data[:80]!r}\n')
    time.sleep(0.02)
open(count, 'w').write(str(n))
PY
  SAMPLER=$!
}

stop_sampler() {
  touch "$T/stop-sampler"
  wait "$SAMPLER" || true
}

# ---- run -d, ls, names, prefixes ---------------------------------------------

@test "run -d: prints the id quickly; ls shows it running with the time left" {
  local t0 t1 id
  t0=$(now_ms)
  id=$(rund --timeout 60 busybox sleep 600)
  t1=$(now_ms)
  [[ "$id" =~ ^[0-9a-f]{32}$ ]] || { echo "# id: '$id'" >&3; false; }
  [ $((t1 - t0)) -lt $(slow 2000) ] || { echo "# run -d took $((t1 - t0)) ms" >&3; false; }
  # the command is running now, in the sandbox's uid range
  local ip cmdpid
  ip=$(rec "$id" init.pid)
  alive "$ip"
  cmdpid=$(children_of "$ip" | head -1)
  [ -n "$cmdpid" ] && alive "$cmdpid"
  [ "$(tr '\0' ' ' </proc/"$cmdpid"/cmdline)" = "sleep 600 " ]
  [ "$(awk '/^Uid:/ {print $2}' /proc/"$cmdpid"/status)" -ge "$UID_BASE" ]
  run_ax ls
  assert_success
  assert_output_contains "${id:0:12}"
  assert_output_contains "running"
  run_ax ls -q
  assert_success
  [ "$output" = "${id:0:12}" ] || { show_run; false; }
  run_ax ls --json
  assert_success
  printf '%s' "$output" | python3 -c '
import json, sys, time, datetime
l = json.load(sys.stdin)
assert isinstance(l, list) and len(l) == 1, l
s = l[0]
want = {"id", "name", "image", "image_digest", "status", "created", "deadline", "time_left",
        "stop_reason", "exit_code", "network", "address", "pid", "limits"}
assert want <= set(s), ("missing", want - set(s))
assert s["id"] == sys.argv[1], s
assert s["status"] == "running", s
assert s["image"] == "busybox", s
assert s["image_digest"].startswith("sha256:"), s
# (the deadline is recorded rounded up to the second: 61 is tolerated)
assert 60 - int(sys.argv[2]) <= s["time_left"] <= 61, s
assert s["exit_code"] is None and s["stop_reason"] is None, s
assert isinstance(s["pid"], int) and s["pid"] > 0, s
assert {"memory", "pids", "disk", "cpu_quota_us"} <= set(s["limits"]), s
dl = datetime.datetime.fromisoformat(s["deadline"].replace("Z", "+00:00")).timestamp()
assert abs(dl - (time.time() + 60)) < int(sys.argv[2]), (dl, time.time())
' "$id" "$(slow 5)" || { show_run; false; }
}

@test "run -d --name: the name works as SANDBOX everywhere; id prefixes work" {
  local id
  id=$(rund --name web1 --timeout 60 busybox sleep 600)
  [[ "$id" =~ ^[0-9a-f]{32}$ ]]
  [ "$(sb_json "$id" name)" = web1 ]
  run_ax ls
  assert_output_contains "web1"
  run_ax exec web1 echo by-name
  assert_success
  [ "$output" = by-name ] || { show_run; false; }
  run_ax exec "${id:0:12}" echo by-12
  assert_success
  [ "$output" = by-12 ] || { show_run; false; }
  run_ax exec "${id:0:6}" echo by-6
  assert_success
  [ "$output" = by-6 ] || { show_run; false; }
  run_ax exec "$id" echo by-id
  assert_success
  [ "$output" = by-id ] || { show_run; false; }
  run_ax update --timeout 2m web1
  assert_success
  [ "$(sb_json "$id" time_left)" -gt 100 ]
  run_ax kill -s CONT web1
  assert_success
  run_ax kill web1
  assert_success
  [ "$(sb_json "$id" status)" = exited ]
  [ "$(sb_json "$id" stop_reason)" = killed ]
  # after gc the name is free again
  run_ax gc
  assert_success
  id2=$(rund --name web1 --timeout 60 busybox true)
  [ "$id2" != "$id" ]
}

@test "an unknown sandbox: exit 125, no such sandbox" {
  local c
  for c in "exec nosuch true" "kill nosuch" "kill -s USR1 nosuch" "update --timeout 1m nosuch" \
      "exec deadbeefdeadbeefdeadbeefdeadbeef true"; do
    run_ax $c
    assert_agsx_error "no such sandbox" || { echo "# for: $c" >&3; return 1; }
  done
}

# ---- the supervisor ----------------------------------------------------------

@test "kill -9 of the supervisor: the sandbox is gone within 2 s, the record is complete, gc leaves nothing" {
  local id sp ip cmdpid i
  id=$(rund --name sk --timeout 60 busybox sleep 4242)
  sp=$(rec "$id" supervisor.pid)
  ip=$(rec "$id" init.pid)
  cmdpid=$(children_of "$ip" | head -1)
  alive "$sp" && alive "$ip" && [ -n "$cmdpid" ] && alive "$cmdpid"
  kill -9 "$sp"
  for i in $(seq 20); do
    ! alive "$ip" && ! alive "$cmdpid" && break
    sleep 0.1
  done
  if alive "$ip" || alive "$cmdpid"; then
    echo "# 2 s after the supervisor's SIGKILL: init alive=$(alive "$ip" && echo y) command alive=$(alive "$cmdpid" && echo y)" >&3
    false
  fi
  run_ax ls -a --json
  assert_success
  [ "$(sb_json "$id" status)" = exited ]
  [ "$(sb_json "$id" stop_reason)" = killed ] || { echo "# stop_reason $(sb_json "$id" stop_reason)" >&3; false; }
  [ "$(sb_json "$id" exit_code)" = 137 ] || { echo "# exit_code $(sb_json "$id" exit_code)" >&3; false; }
  [ "$(sb_json "$id" name)" = sk ]
  [ "$(sb_json "$id" image)" = busybox ]
  [[ "$(sb_json "$id" image_digest)" == sha256:* ]]
  [ "$(sb_json "$id" time_left)" = null ]
  run_ax gc
  assert_success
  assert_output_contains "${id:0:12}"
  [ ! -e "$STATE/$id" ]
  [ ! -e "$STATE/names/sk" ]
  [ -z "$(sandbox_cgroups)" ] || { echo "# cgroups: $(sandbox_cgroups)" >&3; false; }
}

@test "a 3 s lifetime expires while nobody runs agsx: timeout, 143" {
  local id sp ip cmdpid
  id=$(rund --timeout 3 busybox sleep 600)
  sp=$(rec "$id" supervisor.pid)
  ip=$(rec "$id" init.pid)
  cmdpid=$(children_of "$ip" | head -1)
  [ -n "$cmdpid" ] && alive "$cmdpid"
  # judged from /proc and /sys, without agsx: 3 s to the deadline, then up
  # to 15 s for the stop and the teardown on a loaded machine
  sleep 3
  local i
  for i in $(seq 150); do
    ! alive "$cmdpid" && ! alive "$ip" && ! alive "$sp" && [ -z "$(sandbox_cgroups)" ] && break
    sleep 0.1
  done
  ! alive "$cmdpid" || { echo "# the command still runs 18 s later" >&3; false; }
  ! alive "$ip" || { echo "# the init still runs 18 s later" >&3; false; }
  ! alive "$sp" || { echo "# the supervisor still runs 18 s later" >&3; false; }
  [ -z "$(sandbox_cgroups)" ] || { echo "# cgroups left by the supervisor: $(sandbox_cgroups)" >&3; false; }
  [ "$(rec "$id" status)" = exited ]
  [ "$(sb_json "$id" stop_reason)" = timeout ]
  [ "$(sb_json "$id" exit_code)" = 143 ]
}

# ---- update ------------------------------------------------------------------

@test "update: extend before expiry, shorten, at most 24h, not an ended sandbox" {
  local a b t0 i
  a=$(rund --timeout 3 busybox sleep 600)
  b=$(rund --timeout 1h busybox sleep 600)
  run_ax update --timeout 1h "$a"
  assert_success
  t0=$(now_ms)
  run_ax update --timeout 2s "$b"
  assert_success
  for i in $(seq 120); do
    [ "$(rec "$b" status)" = exited ] && break
    sleep 0.1
  done
  [ "$(rec "$b" status)" = exited ] || { echo "# shortened to 2s, still running after 12 s" >&3; false; }
  [ $(($(now_ms) - t0)) -ge 900 ] || { echo "# ended after only $(($(now_ms) - t0)) ms" >&3; false; }
  [ "$(sb_json "$b" stop_reason)" = timeout ]
  [ "$(sb_json "$b" exit_code)" = 143 ]
  # past a's original deadline of 3 s (the poll above may have taken longer)
  local rest=$((5000 - ($(now_ms) - t0)))
  [ "$rest" -le 0 ] || sleep "$((rest / 1000)).$(printf '%03d' $((rest % 1000)))"
  [ "$(sb_json "$a" status)" = running ] || { echo "# extended sandbox: $(sb_json "$a" status)" >&3; false; }
  local left
  left=$(sb_json "$a" time_left)
  [ "$left" -gt 3580 ] && [ "$left" -le 3600 ] || { echo "# time_left $left" >&3; false; }
  run_ax update --timeout 25h "$a"
  assert_agsx_error "24h"
  run_ax update --timeout 24h "$a"
  assert_success
  run_ax update --json --timeout 10m "$a"
  assert_success
  [ "$(json id)" = "$a" ]
  [ "$(json time_left)" -gt 590 ]
  run_ax update --timeout 1h "$b"
  assert_agsx_error "is not running"
  run_ax update --timeout bogus "$a"
  assert_agsx_error
}

# ---- concurrency -------------------------------------------------------------

@test "50 parallel run --rm: correct output, exit 0, no corrupt or leftover record" {
  heavy
  local i pids=()
  start_sampler
  for i in $(seq 50); do
    timeout --kill-after=5 60 "$AGSX" --root "$ROOT" --state "$STATE" run --rm busybox \
      sh -c 'echo $$; probe id' >"$T/out.$i" 2>"$T/err.$i" &
    pids+=($!)
  done
  local bad=0 rc
  for i in $(seq 50); do
    rc=0
    wait "${pids[$((i - 1))]}" || rc=$?
    if [ "$rc" -ne 0 ] || [ "$(cat "$T/out.$i")" != $'2\nuid=0 gid=0 euid=0 egid=0 groups=0' ]; then
      echo "# run $i: status $rc, stdout '$(cat "$T/out.$i")', stderr '$(cat "$T/err.$i")'" >&3
      bad=$((bad + 1))
    fi
  done
  stop_sampler
  [ "$bad" -eq 0 ] || { echo "# $bad of 50 failed" >&3; false; }
  [ ! -s "$T/corrupt.log" ] || { echo "# corrupt records seen: $(head -5 "$T/corrupt.log")" >&3; false; }
  all_records_parse
  [ -z "$(sandbox_state_left)" ] || { echo "# left: $(sandbox_state_left)" >&3; false; }
  run_ax ls -a -q
  assert_success
  [ -z "$output" ] || { show_run; false; }
}

@test "20 parallel run -d, exec in each, kill each: correct, no corrupt record at any time" {
  heavy
  local i pids=() ids=() rc bad=0
  start_sampler
  for i in $(seq 20); do
    timeout --kill-after=5 60 "$AGSX" --root "$ROOT" --state "$STATE" run -d --timeout 2m busybox \
      sleep 600 >"$T/id.$i" 2>"$T/err.$i" &
    pids+=($!)
  done
  for i in $(seq 20); do
    rc=0
    wait "${pids[$((i - 1))]}" || rc=$?
    cat "$T/id.$i" >>"$T/ids"
    if [ "$rc" -ne 0 ] || ! [[ "$(cat "$T/id.$i")" =~ ^[0-9a-f]{32}$ ]]; then
      echo "# run -d $i: status $rc, '$(cat "$T/id.$i")' '$(cat "$T/err.$i")'" >&3
      bad=$((bad + 1))
    fi
    ids+=("$(cat "$T/id.$i")")
  done
  [ "$bad" -eq 0 ]
  [ "$(printf '%s\n' "${ids[@]}" | sort -u | wc -l)" -eq 20 ]
  run_ax ls -q
  [ "$(printf '%s\n' "$output" | grep -c .)" -eq 20 ] || { show_run; false; }
  pids=()
  for i in $(seq 20); do
    timeout --kill-after=5 60 "$AGSX" --root "$ROOT" --state "$STATE" exec "${ids[$((i - 1))]}" \
      probe hostname >"$T/ex.$i" 2>"$T/exerr.$i" &
    pids+=($!)
  done
  for i in $(seq 20); do
    rc=0
    wait "${pids[$((i - 1))]}" || rc=$?
    if [ "$rc" -ne 0 ] || [ "$(cat "$T/ex.$i")" != "hostname=${ids[$((i - 1))]:0:12}" ]; then
      echo "# exec $i: status $rc, '$(cat "$T/ex.$i")' '$(cat "$T/exerr.$i")' (id ${ids[$((i - 1))]})" >&3
      bad=$((bad + 1))
    fi
  done
  pids=()
  for i in $(seq 20); do
    timeout --kill-after=5 60 "$AGSX" --root "$ROOT" --state "$STATE" kill "${ids[$((i - 1))]}" \
      >"$T/k.$i" 2>"$T/kerr.$i" &
    pids+=($!)
  done
  for i in $(seq 20); do
    rc=0
    wait "${pids[$((i - 1))]}" || rc=$?
    if [ "$rc" -ne 0 ]; then
      echo "# kill $i: status $rc, '$(cat "$T/k.$i")' '$(cat "$T/kerr.$i")'" >&3
      bad=$((bad + 1))
    fi
  done
  stop_sampler
  [ "$bad" -eq 0 ]
  [ ! -s "$T/corrupt.log" ] || { echo "# corrupt records seen: $(head -5 "$T/corrupt.log")" >&3; false; }
  [ "$(cat "$T/samples")" -gt 20 ] || { echo "# only $(cat "$T/samples") samples" >&3; false; }
  all_records_parse
  run_ax ls -a --json
  assert_success
  printf '%s' "$output" | python3 -c '
import json, sys
l = json.load(sys.stdin)
assert len(l) == 20, len(l)
for s in l:
    assert s["status"] == "exited" and s["stop_reason"] == "killed" and s["exit_code"] == 143, s
' || { show_run; false; }
  run_ax ls -q
  [ -z "$output" ] || { show_run; false; }
}

@test "the name race: of two racing run -d --name x, exactly one wins, the other is refused" {
  heavy
  local r fifo a b ra rb
  for r in $(seq 10); do
    fifo=$T/go.$r
    mkfifo "$fifo"
    (timeout 10 cat "$fifo" >/dev/null
      exec timeout --kill-after=5 30 "$AGSX" --root "$ROOT" --state "$STATE" run -d --name "race$r" \
        busybox sleep 600) >"$T/a.$r" 2>&1 &
    a=$!
    (timeout 10 cat "$fifo" >/dev/null
      exec timeout --kill-after=5 30 "$AGSX" --root "$ROOT" --state "$STATE" run -d --name "race$r" \
        busybox sleep 600) >"$T/b.$r" 2>&1 &
    b=$!
    sleep 0.2
    echo go >"$fifo"
    ra=0 rb=0
    wait "$a" || ra=$?
    wait "$b" || rb=$?
    grep -xE '[0-9a-f]{32}' "$T/a.$r" "$T/b.$r" -h >>"$T/ids" || true
    if ! { [ "$ra" -eq 0 ] && [ "$rb" -eq 125 ]; } && ! { [ "$ra" -eq 125 ] && [ "$rb" -eq 0 ]; }; then
      echo "# round $r: statuses $ra and $rb; outputs '$(cat "$T/a.$r")' '$(cat "$T/b.$r")'" >&3
      return 1
    fi
    local loser
    [ "$ra" -eq 125 ] && loser=$T/a.$r || loser=$T/b.$r
    [ "$(grep -c . "$loser")" -eq 1 ] && grep -q "^agsx: .*already in use" "$loser" ||
      { echo "# round $r: loser said '$(cat "$loser")'" >&3; return 1; }
  done
  # one running sandbox per name, no record of a loser
  run_ax ls --json
  printf '%s' "$output" | python3 -c '
import json, sys
l = json.load(sys.stdin)
names = sorted(s["name"] for s in l)
assert names == sorted(f"race{r}" for r in range(1, 11)), names
assert all(s["status"] == "running" for s in l), l
' || { show_run; false; }
  [ "$(ls "$STATE" | grep -cxE '[0-9a-f]{32}')" -eq 10 ]
  [ "$(ls "$STATE/names" | wc -l)" -eq 10 ]
}

# ---- records -----------------------------------------------------------------

@test "a corrupt or truncated record: ls works, warns and lists it; gc removes it, never fails on it" {
  local a b c
  a=$(rund --name ca busybox true)
  b=$(rund busybox true)
  c=$(rund --name cc --timeout 60 busybox sleep 600)
  wait_ended "$a" "$b"
  [ "$(rec "$a" status)" = exited ]
  [ "$(rec "$b" status)" = exited ]
  echo 'garbage!!{{{' >"$STATE/$a/state.json"
  head -c 100 "$STATE/$b/state.json" >"$T/trunc" && cat "$T/trunc" >"$STATE/$b/state.json"
  run ax ls -a
  [ "$status" -eq 0 ] || { show_run; false; }
  assert_output_contains "${c:0:12}"
  assert_output_contains "agsx: warning"
  assert_output_contains "${a:0:12}"
  assert_output_contains "${b:0:12}"
  [ "$(sb_json "$a" status)" = unknown ]
  [ "$(sb_json "$b" status)" = unknown ]
  [ "$(sb_json "$c" status)" = running ]
  # gc removes both and frees the name
  run ax gc
  [ "$status" -eq 0 ] || { show_run; false; }
  [ ! -e "$STATE/$a" ]
  [ ! -e "$STATE/$b" ]
  [ ! -e "$STATE/names/ca" ] || { echo "# the corrupt record's name stays taken" >&3; false; }
  run ax ls -a
  [ "$status" -eq 0 ] && [[ "$output" != *warning* ]] || { echo "# warned after gc" >&3; show_run; false; }
  # gc: on an empty and on a truncated record
  d=$(rund busybox true)
  e=$(rund busybox true)
  wait_ended "$d" "$e"
  : >"$STATE/$d/state.json"
  printf '{"version": 1, "id": "%s", "status": "exi' "$e" >"$STATE/$e/state.json"
  run ax gc
  [ "$status" -eq 0 ] || { show_run; false; }
  [ ! -e "$STATE/$d" ]
  [ ! -e "$STATE/$e" ]
  run ax gc --dry-run
  [ "$status" -eq 0 ] || { show_run; false; }
  [ "$(sb_json "$c" status)" = running ]
  # the name "ca" is free again
  rund --name ca busybox true >/dev/null
}

# issue 24 finding 9: a sandbox whose supervisor was SIGKILLed (its init
# dies with it) and whose record was then truncated stays in `ls -a`, as
# `unknown`, with a warning naming the file, until gc removes it.
@test "a damaged record (supervisor SIGKILLed, record truncated): ls -a shows it unknown, gc removes it" {
  local id sp f
  id=$(rund --name dmg busybox sleep 600)
  sp=$(rec "$id" supervisor.pid)
  kill -9 "$sp"
  poll 50 eval '! alive "$sp"'
  f=$STATE/$id/state.json
  head -c 300 "$f" >"$T/trunc" && cat "$T/trunc" >"$f"
  run_ax ls -a
  assert_success
  local row
  row=$(grep "^${id:0:12} " <<<"$output") || { echo "# not listed" >&3; show_run; false; }
  [[ "$row" == *" dmg "* && "$row" == *" unknown "* ]] || { echo "# row: $row" >&3; false; }
  assert_output_contains "agsx: warning: damaged record \`$f\`"
  # ls did not remove it: it is listed again, without -a too
  run_ax ls
  assert_success
  assert_output_contains "${id:0:12}"
  ax ls -a --json >"$T/ls.json" 2>"$T/ls.err" || { cat "$T/ls.err" >&3; false; }
  python3 -c '
import json, sys
v = json.load(open(sys.argv[2]))
e = [s for s in v if s["id"] == sys.argv[1]]
assert len(e) == 1 and e[0]["status"] == "unknown" and e[0]["name"] == "dmg", v
assert e[0]["created"] is None and e[0]["exit_code"] is None and "state.json" in e[0]["damage"], e
' "$id" "$T/ls.json" || { cat "$T/ls.json" >&3; false; }
  grep -q "agsx: warning: damaged record" "$T/ls.err"
  run_ax ls -a -q
  assert_success
  assert_output_contains "${id:0:12}"
  # kill --all goes on past it (gc's to remove), warning
  run_ax kill --all
  assert_success
  assert_output_contains "damaged record"
  # gc --dry-run names it and leaves it; gc removes it and frees its name
  run ax gc --dry-run
  [ "$status" -eq 0 ] && [[ "$output" == *"damaged record of sandbox ${id:0:12} dmg"* ]] || { show_run; false; }
  [ -e "$f" ]
  run ax gc
  [ "$status" -eq 0 ] && [[ "$output" == *"damaged record of sandbox ${id:0:12}"* ]] || { show_run; false; }
  [ ! -e "$STATE/$id" ]
  [ ! -e "$STATE/names/dmg" ]
  run_ax ls -a
  assert_success
  refute_output_contains "${id:0:12}"
  refute_output_contains warning
}

@test "crash leftovers: gc removes a record dir without a record and a dangling name" {
  local a id=0123456789abcdef0123456789abcdef
  private_cgroup_parent
  a=$(rund --name dn busybox true)
  wait_ended "$a"
  echo junk >"$STATE/$a/state.json"
  run ax ls -a
  [ "$status" -eq 0 ] || { show_run; false; }
  assert_output_contains "${a:0:12}"
  mkdir "$STATE/$id"
  echo "$id" >>"$T/ids"
  run ax ls -a
  [ "$status" -eq 0 ] || { show_run; false; }
  # a leftover is older than a minute (AGSX_GC_MIN_AGE), or it may be a start
  AGSX_GC_MIN_AGE=0 run ax gc
  [ "$status" -eq 0 ] || { show_run; false; }
  local left=""
  [ ! -e "$STATE/$a" ] || left+="$STATE/$a (damaged); "
  [ ! -e "$STATE/$id" ] || left+="$STATE/$id (no state.json); "
  [ ! -L "$STATE/names/dn" ] || left+="names/dn -> $(readlink "$STATE/names/dn") (dangling); "
  [ -z "$left" ] || { echo "# left after ls + gc: $left" >&3; rm -rf "$STATE/$id" "$STATE/names/dn"; false; }
}

@test "a running sandbox whose record is corrupted is not left running unmanaged" {
  local id ip cmdpid i
  id=$(rund --timeout 60 busybox sleep 600)
  ip=$(rec "$id" init.pid)
  cmdpid=$(children_of "$ip" | head -1)
  echo 'garbage!!' >"$STATE/$id/state.json"
  run ax ls -a
  [ "$status" -eq 0 ] || { show_run; false; }
  assert_output_contains "agsx: warning"
  run ax gc
  [ "$status" -eq 0 ] || { show_run; false; }
  # either it is still listed (and so can be stopped), or it is gone
  for i in $(seq 30); do ! alive "$cmdpid" && break; sleep 0.1; done
  if alive "$cmdpid"; then
    run_ax ls -a -q
    [[ "$output" == *"${id:0:12}"* ]] ||
      { echo "# the sandbox's command still runs (pid $cmdpid) but no agsx command lists or can stop it" >&3; false; }
  fi
}

# ---- exec --------------------------------------------------------------------

@test "exec: joins the sandbox (hostname, its processes, pid 1 is its init)" {
  local id
  id=$(rund busybox sh -c 'echo init-was-here >/tmp/mark; exec sleep 600')
  # (the shell writes the mark, then becomes the sleep)
  in_box "$id" 'ps -o args | grep -q "^sleep 600"'
  run_ax exec "$id" probe hostname
  assert_success
  [ "$output" = "hostname=${id:0:12}" ] || { show_run; false; }
  run_ax exec "$id" sh -c 'ls /proc | grep -xE "[0-9]+" | sort -n | head -1'
  assert_success
  [ "$output" = 1 ] || { show_run; false; }
  run_ax exec "$id" ps -o pid,args
  assert_success
  assert_output_contains "sleep 600"
  run_ax exec "$id" cat /tmp/mark
  assert_success
  [ "$output" = init-was-here ] || { show_run; false; }
  run_ax exec "$id" cat /proc/self/uid_map
  assert_success
  [ "$(echo $output)" = "0 $(rec "$id" uid_base) 65536" ] || { show_run; false; }
  # on the host, the exec'd command is in the sandbox's cgroup and uid range
  ax exec "$id" sleep 7.77 &
  local bg=$! pid="" i
  for i in $(seq 100); do
    pid=$(pgrep -x -f 'sleep 7.77' | head -1) && [ -n "$pid" ] && break
    sleep 0.1
  done
  [ -n "$pid" ]
  [ "$(awk '/^Uid:/ {print $2}' /proc/"$pid"/status)" = "$(rec "$id" uid_base)" ]
  # (cgroupfs: agsx/<id>; systemd's manager: the scope's sandbox/)
  grep -qE "/agsx/$id|/agsx.slice/agsx-$id.scope/sandbox" /proc/"$pid"/cgroup ||
    { cat /proc/"$pid"/cgroup >&3; false; }
  run_ax kill "$id"
  wait "$bg" || true
}

@test "exec: the same restrictions as the sandbox's command (probe output compared)" {
  local checks='caps nnp seccomp uidmap gidmap fds "syscall keyctl" "syscall unshare" "syscall mount"'
  local id
  id=$(rund busybox sh -c "for c in $checks; do probe \$c; done >/tmp/init.out 2>&1; exec sleep 600")
  local i
  for i in $(seq 30); do
    ax exec "$id" test -s /tmp/init.out 2>/dev/null && [ "$(rec "$id" status)" = running ] &&
      [ "$(ax exec "$id" sh -c 'ps -o args | grep -c "^sleep 600"')" = 1 ] && break
    sleep 0.1
  done
  run_ax exec "$id" cat /tmp/init.out
  assert_success
  local init_out=$output
  # fds of the caller never reach the command
  run ax exec "$id" sh -c "for c in $checks; do probe \$c; done 2>&1" 3</etc/hostname 7>/dev/null 9<&0
  [ "$status" -eq 0 ] || { show_run; false; }
  local exec_out=$output
  if [ "$exec_out" != "$init_out" ]; then
    echo "# exec:" >&3; printf '%s\n' "$exec_out" | sed 's/^/#   /' >&3
    echo "# the sandbox's command:" >&3; printf '%s\n' "$init_out" | sed 's/^/#   /' >&3
    false
  fi
  # and as a foreground run, up to the uid range's base
  run ax run --rm busybox sh -c "for c in $checks; do probe \$c; done 2>&1"
  [ "$status" -eq 0 ] || { show_run; false; }
  local norm='s/^0 [0-9]+ 65536$/0 BASE 65536/'
  [ "$(printf '%s\n' "$output" | sed -E "$norm")" = "$(printf '%s\n' "$exec_out" | sed -E "$norm")" ] || {
    echo "# run --rm:" >&3; printf '%s\n' "$output" | sed 's/^/#   /' >&3
    echo "# exec:" >&3; printf '%s\n' "$exec_out" | sed 's/^/#   /' >&3
    false
  }
  [[ "$exec_out" == *"NoNewPrivs=1"* ]]
  [[ "$exec_out" == *"Seccomp=2"* ]]
  [[ "$exec_out" == *"fds=0,1,2"* ]]
  [[ "$exec_out" == *"keyctl: blocked"* ]]
  # a user: no effective capabilities
  run_ax exec -u agent "$id" probe caps
  assert_success
  assert_output_contains "CapEff=0000000000000000"
  assert_output_contains "CapPrm=0000000000000000"
  run_ax exec -u agent "$id" id -u
  [ "$output" != 0 ] || { show_run; false; }
}

@test "exec: -e, -w, -u, -i, -t" {
  local id
  id=$(rund busybox sleep 600)
  run_ax exec -e FOO=bar -e BAZ=q "$id" sh -c 'echo "$FOO $BAZ"'
  assert_success
  [ "$output" = "bar q" ] || { show_run; false; }
  run_ax exec -w /tmp "$id" pwd
  assert_success
  [ "$output" = /tmp ] || { show_run; false; }
  run_ax exec -w /new/dir "$id" pwd
  assert_success
  [ "$output" = /new/dir ] || { show_run; false; }
  run_ax exec -u agent "$id" id -un
  assert_success
  [ "$output" = agent ] || { show_run; false; }
  run bash -c "echo hello-stdin | $AGSX --root $ROOT --state $STATE exec -i $id cat"
  [ "$status" -eq 0 ] && [ "$output" = hello-stdin ] || { show_run; false; }
  # without -i, stdin is /dev/null
  run bash -c "echo hello-stdin | timeout 10 $AGSX --root $ROOT --state $STATE exec $id cat"
  [ "$status" -eq 0 ] && [ -z "$output" ] || { show_run; false; }
  run timeout 20 script -qfec "$AGSX --root $ROOT --state $STATE exec -t $id sh -c 'test -t 0 && test -t 1 && echo TTY-OK; tty'" /dev/null
  [ "$status" -eq 0 ] || { show_run; false; }
  assert_output_contains "TTY-OK"
  assert_output_contains "/dev/pts/"
  run_ax exec -t --json "$id" true
  assert_agsx_error
}

@test "exec: exit codes 0, 7, 127, 126, 137 and --json fields" {
  local id
  id=$(rund busybox sleep 600)
  run_ax exec "$id" true
  assert_status 0
  run_ax exec "$id" sh -c 'exit 7'
  assert_status 7
  AX_CMD="agsx exec $id nosuchcmd"
  run -127 ax exec "$id" nosuchcmd
  run_ax exec "$id" /etc/passwd
  assert_status 126
  run_ax exec "$id" sh -c 'kill -9 $$'
  assert_status 137
  run_ax exec --json "$id" sh -c 'echo out; echo err >&2; exit 3'
  assert_status 3
  printf '%s' "$output" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
want = {"exit_code", "stdout", "stderr", "duration_ms", "stop_reason", "truncated",
        "stdout_truncated", "stderr_truncated", "signal", "id", "name", "error"}
assert want <= set(r), want - set(r)
assert r["exit_code"] == 3 and r["stdout"] == "out\n" and r["stderr"] == "err\n", r
assert r["stop_reason"] == "exit" and r["signal"] is None and r["error"] is None, r
assert r["id"] == sys.argv[1] and r["name"] is None, r
assert r["truncated"] is False and isinstance(r["duration_ms"], int), r
' "$id" || { show_run; false; }
  run_ax exec --json "$id" sh -c 'kill -9 $$'
  assert_status 137
  [ "$(json signal)" = 9 ] || { show_run; false; }
  AX_CMD="agsx exec --json $id nosuchcmd"
  run -127 ax exec --json "$id" nosuchcmd
  [ "$(json stop_reason)" = error ] && [ "$(json error)" != null ] || { show_run; false; }
}

@test "exec --timeout kills the command's whole tree; a normal exec's background process stays" {
  local id t0 t1
  id=$(rund busybox sleep 600)
  t0=$(now_ms)
  run_ax exec --timeout 1 "$id" sh -c 'sleep 101 & sleep 102'
  t1=$(now_ms)
  assert_status 137
  assert_output_contains "deadline reached"
  [ $((t1 - t0)) -lt $(slow 3000) ] || { echo "# took $((t1 - t0)) ms" >&3; false; }
  [ $((t1 - t0)) -ge 900 ] || { echo "# took only $((t1 - t0)) ms" >&3; false; }
  # (killed processes may take a moment to go on a loaded machine)
  in_box "$id" '! ps -o args | grep -q "^sleep 10[12]"' || true
  run_ax exec "$id" ps -o args
  assert_success
  refute_output_contains "sleep 101"
  refute_output_contains "sleep 102"
  run_ax exec --json --timeout 1 "$id" sleep 103
  assert_status 137
  [ "$(json stop_reason)" = timeout ] || { show_run; false; }
  # the sandbox goes on
  [ "$(sb_json "$id" status)" = running ]
  # (its output to a file: the background sleep keeps bats' pipe open)
  t0=$(now_ms)
  ax exec "$id" sh -c 'sleep 300 &' >"$T/bg.out" 2>&1 || { cat "$T/bg.out" >&3; false; }
  [ $(($(now_ms) - t0)) -lt $(slow 3000) ] || { echo "# exec of sh -c 'sleep 300 &' took $(($(now_ms) - t0)) ms" >&3; false; }
  sleep 1
  run_ax exec "$id" ps -o args
  assert_output_contains "sleep 300"
}

@test "exec into a stopped or unknown sandbox: 125 with a clear message" {
  local id
  id=$(rund --name gone busybox true)
  wait_ended "$id"
  run_ax exec "$id" true
  assert_agsx_error "is not running"
  run_ax exec gone true
  assert_agsx_error "is not running"
  run_ax exec --json gone true
  assert_agsx_error "is not running"
  run_ax exec nosuch true
  assert_agsx_error "no such sandbox"
  local id2
  id2=$(rund busybox sleep 600)
  run_ax kill "$id2"
  assert_success
  run_ax exec "$id2" true
  assert_agsx_error "is not running"
}

# ---- kill --------------------------------------------------------------------

@test "kill -s USR1 reaches the command; kill --all stops everything; killing an ended sandbox says so" {
  local a b c
  a=$(rund --name sig busybox sh -c 'trap "echo got > /tmp/got" USR1; : >/tmp/trapped; while :; do sleep 0.1; done')
  b=$(rund busybox sleep 600)
  c=$(rund busybox sleep 600)
  # the trap is set (a USR1 before it would end the shell)
  in_box sig 'test -e /tmp/trapped'
  run_ax kill -s USR1 sig
  assert_success
  local i
  for i in $(seq 100); do
    ax exec sig cat /tmp/got 2>/dev/null | grep -qx got && break
    sleep 0.1
  done
  run_ax exec sig cat /tmp/got
  assert_success
  [ "$output" = got ] || { show_run; false; }
  [ "$(sb_json "$a" status)" = running ]
  run_ax kill -s SIGUSR1 "$a"
  assert_success
  run_ax kill -s 10 "$a"
  assert_success
  run_ax kill -s NOSUCHSIG "$a"
  assert_agsx_error
  local t0
  t0=$(now_ms)
  run_ax kill --all
  assert_success
  [ $(($(now_ms) - t0)) -lt $(slow 4000) ]
  run_ax ls -q
  [ -z "$output" ] || { show_run; false; }
  for s in "$a" "$b" "$c"; do
    [ "$(sb_json "$s" status)" = exited ]
    [ "$(sb_json "$s" stop_reason)" = killed ] || { echo "# $s: $(sb_json "$s" stop_reason)" >&3; false; }
    [ "$(sb_json "$s" exit_code)" = 143 ] || { echo "# $s: exit $(sb_json "$s" exit_code)" >&3; false; }
  done
  run_ax kill "$b"
  assert_agsx_error "is not running"
  run_ax kill -s USR1 "$b"
  assert_agsx_error "is not running"
}

@test "kill: a command ignoring SIGTERM is SIGKILLed after the grace" {
  local id t0
  id=$(rund busybox sh -c 'trap "" TERM; : >/tmp/trapped; while :; do sleep 0.1; done')
  # the trap is set (a TERM before it would end the shell at once)
  in_box "$id" 'test -e /tmp/trapped'
  t0=$(now_ms)
  run_ax kill "$id"
  assert_success
  local dt=$(($(now_ms) - t0))
  [ "$dt" -ge 1500 ] && [ "$dt" -lt $(slow 5000) ] || { echo "# kill took $dt ms" >&3; false; }
  [ "$(sb_json "$id" stop_reason)" = killed ]
  [ "$(sb_json "$id" exit_code)" = 137 ]
}

@test "kill: a supervisor that does not answer (stopped) is escalated past, in bounded time" {
  local id sp ip cmdpid t0 dt
  id=$(rund --name stuck --timeout 5m busybox sleep 4242)
  sp=$(rec "$id" supervisor.pid)
  ip=$(rec "$id" init.pid)
  cmdpid=$(children_of "$ip" | head -1)
  [ -n "$cmdpid" ] && alive "$cmdpid"
  kill -STOP "$sp"
  t0=$(now_ms)
  run_ax kill stuck
  dt=$(($(now_ms) - t0))
  kill -CONT "$sp" 2>/dev/null || true
  assert_success
  assert_output_contains "does not answer"
  [ "$dt" -lt $(slow 14000) ] || { echo "# kill took $dt ms" >&3; false; }
  ! alive "$cmdpid" || { echo "# the command still runs" >&3; false; }
  ! alive "$ip" || { echo "# the init still runs" >&3; false; }
  ! alive "$sp" || { echo "# the stopped supervisor still runs" >&3; false; }
  [ "$(sb_json "$id" status)" = exited ]
  [ "$(sb_json "$id" stop_reason)" = killed ]
  [ "$(sb_json "$id" exit_code)" = 137 ]
  [ -z "$(sandbox_cgroups)" ] || { echo "# cgroups: $(sandbox_cgroups)" >&3; false; }
}

# ---- gc ----------------------------------------------------------------------

@test "gc: ended records go, running ones stay; leftover cgroups; --dry-run; --json" {
  local a b fake
  # A leftover made by hand is agsx's own cgroupfs layout; on a systemd host
  # test/guest/systemd.bats checks gc of stale scopes.
  export AGSX_CGROUP_MANAGER=cgroupfs
  private_cgroup_parent
  a=$(rund busybox true)
  b=$(rund busybox sleep 600)
  wait_ended "$a"
  fake=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  echo "$fake" >>"$T/ids"
  local cg=/sys/fs/cgroup/pids/$AGSX_CGROUP_PARENT
  [ -d "$cg" ] || cg=/sys/fs/cgroup/$AGSX_CGROUP_PARENT
  mkdir "$cg/$fake"
  # empty cgroups younger than AGSX_GC_MIN_AGE may be starting sandboxes
  export AGSX_GC_MIN_AGE=0
  run_ax gc --dry-run
  assert_success
  assert_output_contains "${a:0:12}"
  assert_output_contains "$fake"
  refute_output_contains "${b:0:12}"
  [ -e "$STATE/$a" ]
  [ -d "$cg/$fake" ]
  run_ax gc --dry-run --json
  assert_success
  printf '%s' "$output" | python3 -c 'import json, sys; assert isinstance(json.load(sys.stdin), list)' ||
    { show_run; false; }
  [ -e "$STATE/$a" ]
  [ -d "$cg/$fake" ]
  run_ax gc --json
  assert_success
  printf '%s' "$output" | python3 -c '
import json, sys
l = json.load(sys.stdin)
assert isinstance(l, list) and len(l) >= 2, l
s = json.dumps(l)
assert sys.argv[1][:12] in s and sys.argv[2] in s, l
' "$a" "$fake" || { show_run; false; }
  [ ! -e "$STATE/$a" ] || { echo "# gc left the ended record" >&3; false; }
  [ ! -d "$cg/$fake" ] || { rmdir "$cg/$fake"; echo "# gc left the cgroup" >&3; false; }
  [ -e "$STATE/$b" ]
  [ "$(sb_json "$b" status)" = running ]
  run_ax exec "$b" true
  assert_success
  run_ax gc --json
  assert_success
  refute_output_contains "${b:0:12}"
}

@test "gc --images keeps the layers of a running sandbox's image after image rm, then removes them" {
  local id
  id=$(rund busybox sleep 600)
  [ "$(ls "$ROOT/layers" | wc -l)" -eq 2 ]
  run_ax image rm busybox
  assert_success
  if [ "$(ls "$ROOT/layers" | wc -l)" -ne 2 ]; then
    local out st=0
    out=$(ax exec "$id" ls /bin/busybox 2>&1) || st=$?
    echo "# image rm removed the layers of a running sandbox: layers left '$(ls "$ROOT/layers")';" \
      "exec ls /bin/busybox in it now: $st '$out'" >&3
    false
  fi
  run_ax gc --images
  assert_success
  [ "$(ls "$ROOT/layers" | wc -l)" -eq 2 ] || { echo "# gc --images removed layers in use" >&3; false; }
  run_ax gc --images --dry-run
  assert_success
  # the sandbox still works, and so does a new exec reading the image's files
  run_ax exec "$id" sh -c 'ls /bin/busybox && probe hostname'
  assert_success
  run_ax kill "$id"
  assert_success
  run_ax gc --images
  assert_success
  [ "$(ls "$ROOT/layers" | wc -l)" -eq 0 ] || { echo "# layers left: $(ls "$ROOT/layers")" >&3; false; }
  [ "$(ls "$ROOT/blobs/sha256" | wc -l)" -eq 0 ] || { echo "# blobs left: $(ls "$ROOT/blobs/sha256")" >&3; false; }
}
