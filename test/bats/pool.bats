#!/usr/bin/env bats
# test-runner: parallel
# Warm pools (issue 18): agsx pool create/ls/rm, run --pool's claims (the
# same results as cold runs, atomic under concurrency), refills, crashes of
# a claimer or of a parked sandbox's supervisor, the empty pool's cold
# start, options a claim cannot change, lifetimes, removed or re-tagged
# images, and what a claimed sandbox shows of its past.
#
# Every test has its own store and state dir; the teardown removes the
# test's pools first (so that no refill races the default teardown's
# kill --all + gc), then checks that nothing leaked.

load helpers

bats_require_minimum_version 1.5.0

setup_file() { busybox_setup_file; }

setup() { busybox_setup 60; }

teardown() {
  local p rc=0
  if [ -d "$STATE/pools" ]; then
    for p in $(ax pool ls -q 2>/dev/null); do ax pool rm "$p" >/dev/null 2>&1 || true; done
    if [ -d "$STATE/pools" ]; then
      echo "# leaked: $STATE/pools after pool rm: $(ls -A "$STATE/pools")" >&3
      rm -rf "$STATE/pools"
      rc=1
    fi
  fi
  sandbox_teardown || rc=1
  if [ -n "${NW:-}" ]; then "$FIXTURES/networld" stop "$NW" || rc=1; fi
  return $rc
}

# A networld of the test's own (test/fixtures/networld): $NW, $OUTER, $WORLD.
own_networld() {
  NW=$BATS_TEST_TMPDIR/world
  "$FIXTURES/networld" start "$NW"
  OUTER=$(cat "$NW/outer.pid")
  WORLD=$(cat "$NW/world.pid")
}

# parked_ids POOL: the ids of the pool's parked sandboxes, sorted.
parked_ids() { ls "$STATE/pools/$1/parked" 2>/dev/null | grep -xE '[0-9a-f]{32}' | sort; }

# pool_field POOL FIELD: a field of the pool's `pool ls --json` entry.
pool_field() {
  ax pool ls --json | python3 -c '
import json, sys
for p in json.load(sys.stdin):
    if p["name"] == sys.argv[1]:
        print(p[sys.argv[2]]); sys.exit(0)
print("<absent>")' "$1" "$2"
}

# wait_parked POOL N: until N sandboxes are parked (at most 30 s).
wait_parked() {
  local i
  for i in $(seq 300); do
    [ "$(pool_field "$1" parked)" = "$2" ] && return 0
    sleep 0.1
  done
  echo "# pool $1: $(pool_field "$1" parked) parked, not $2" >&3
  return 1
}

# parked_status POOL FIELD: FIELD of /proc/PID/status of the waiting
# command's process of the pool's (one) parked sandbox: the init's child.
parked_status() {
  local id init x
  id=$(parked_ids "$1")
  init=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["init"]["pid"])' "$STATE/$id/state.json")
  x=$(cat "/proc/$init/task/$init/children")
  awk -v f="$2:" '$1 == f { print $2 }' "/proc/${x% }/status"
}

# without_run_fields: a --json result without what differs between any
# two runs (id, duration, hostname-derived lines).
without_run_fields() {
  python3 -c '
import json, sys
d = json.load(sys.stdin)
for k in ("id", "duration_ms"): d.pop(k, None)
print(json.dumps(d, sort_keys=True))'
}

@test "pool: create parks SIZE sandboxes; ls, ls --json and ls show them; rm leaves nothing" {
  run_ax pool create p1 --image busybox --size 2 --memory 64m
  [ "$status" -eq 0 ] || { show_run; false; }
  [ "$output" = p1 ]
  [ "$(parked_ids p1 | wc -l)" -eq 2 ]
  run_ax pool ls
  [ "$status" -eq 0 ] || { show_run; false; }
  [[ "${lines[0]}" == NAME*IMAGE*SIZE*PARKED* ]]
  [[ "${lines[1]}" =~ ^p1\ +busybox\ +2\ +2\ +internal\ +1h ]] || { show_run; false; }
  run_ax pool ls --json
  python3 -c '
import json, sys
v = json.loads(sys.argv[1])
assert len(v) == 1, v
p = v[0]
assert p["name"] == "p1" and p["image"] == "busybox" and p["size"] == 2 and p["parked"] == 2, p
assert p["limits"]["memory"] == 64 << 20 and p["network"] == "internal" and p["lifetime"] == 3600, p
assert p["image_digest"].startswith("sha256:"), p' "$output"
  # Parked sandboxes are ordinary sandboxes, each with its own uid range.
  run_ax ls --json
  python3 -c '
import json, sys
v = json.loads(sys.argv[1])
assert len(v) == 2 and all(s["status"] == "parked" and s["pool"] == "p1" for s in v), v' "$output"
  local a b
  a=$(parked_ids p1 | head -1)
  b=$(parked_ids p1 | tail -1)
  [ "$(rec "$a" uid_base)" != "$(rec "$b" uid_base)" ]
  [ "$(rec "$a" memory)" = $((64 << 20)) ]
  run_ax pool rm p1
  [ "$status" -eq 0 ] || { show_run; false; }
  run_ax ls -a -q
  [ -z "$output" ] || { show_run; false; }
  [ ! -e "$STATE/pools" ]
  [ ! -d "$STATE/$a" ]
  [ ! -d "$STATE/$b" ]
}

@test "pool: create refuses what is a claim's, bad sizes, names and images; duplicates" {
  run_ax pool create p1 --image busybox
  [ "$status" -eq 125 ] && [[ "$output" == *"--size"* ]] || { show_run; false; }
  run_ax pool create p1 --image busybox --size 0
  [ "$status" -eq 125 ] || { show_run; false; }
  run_ax pool create 'bad/name' --image busybox --size 1
  [ "$status" -eq 125 ] && [[ "$output" == *"invalid pool name"* ]] || { show_run; false; }
  run_ax pool create p1 --image busybox --size 1 -p 8080
  [ "$status" -eq 125 ] || { show_run; false; }
  run_ax pool create p1 --image busybox --size 1 --name x
  [ "$status" -eq 125 ] && [[ "$output" == *"--name"* ]] || { show_run; false; }
  run_ax pool create p1 --image busybox --size 1 echo hi
  [ "$status" -eq 125 ] || { show_run; false; }
  run_ax pool create p1 --image nosuch --size 1
  [ "$status" -eq 125 ] && [[ "$output" == *nosuch* ]] || { show_run; false; }
  [ -z "$(ax pool ls -q)" ]
  run_ax pool create p1 --image busybox --size 1
  [ "$status" -eq 0 ] || { show_run; false; }
  run_ax pool create p1 --image busybox --size 1
  [ "$status" -eq 125 ] && [[ "$output" == *exists* ]] || { show_run; false; }
  run_ax pool rm nosuch
  [ "$status" -eq 125 ] && [[ "$output" == *"no such pool"* ]] || { show_run; false; }
  run_ax pool --help
  [ "$status" -eq 0 ] && [[ "$output" == *create*ls*rm* ]] || { show_run; false; }
  run_ax pool frob
  [ "$status" -eq 125 ] && [[ "$output" == *"unknown command \`pool frob\`"* ]] || { show_run; false; }
  run_ax run --pool nosuch true
  [ "$status" -eq 125 ] && [[ "$output" == *"no such pool"* ]] || { show_run; false; }
}

# issue 24 finding 10: `--image host` was refused as "a pool needs an
# image" though one was given. A parked host-image sandbox is as useful as
# any: it has no digest to compare at the claim, and no image Cmd (a claim
# without a command runs /bin/sh, as a cold `run host` does).
@test "pool: the host image: parked, claimed like a cold run host, refilled" {
  run_ax pool create ph --image host --size 1
  [ "$status" -eq 0 ] || { show_run; false; }
  run_ax pool ls --json
  python3 -c '
import json, sys
p = json.loads(sys.argv[1])[0]
assert p["image"] == "host" and p["image_digest"] is None and p["parked"] == 1, p' "$output" ||
    { show_run; false; }
  local parked cold
  parked=$(parked_ids ph)
  [ -n "$parked" ]
  cold=$(ax run --rm host sh -c 'echo "$0 $*"; id -u; test -x /usr/bin/env && echo hostfs' a b)
  run_ax run --pool ph --rm sh -c 'echo "$0 $*"; id -u; test -x /usr/bin/env && echo hostfs' a b
  [ "$status" -eq 0 ] && [ "$output" = "$cold" ] || { echo "# cold: $cold" >&3; show_run; false; }
  # The claim took the parked sandbox (it is gone from the pool).
  [ ! -e "$STATE/pools/ph/parked/$parked" ] || { echo "# $parked still parked" >&3; false; }
  wait_parked ph 1
  # No command: /bin/sh, reading the claimer's stdin.
  run ax run --pool ph --rm -i <<<'echo from-sh; exit 7'
  [ "$status" -eq 7 ] && [ "$output" = from-sh ] || { show_run; false; }
  wait_parked ph 1
  # A detached claim is the parked sandbox, with the host image recorded.
  parked=$(parked_ids ph)
  run_ax run --pool ph -d sleep 100
  [ "$status" -eq 0 ] && [ "$output" = "$parked" ] || { echo "# parked: $parked" >&3; show_run; false; }
  [ "$(rec "$parked" image)" = host ]
  [ "$(rec "$parked" image_digest)" = null ]
}

@test "pool: claims give what cold runs give: output, exit codes, env, user, cwd, --json" {
  ax pool create p1 --image busybox --size 2 >/dev/null
  local c
  for c in 'echo hi' 'exit 1' 'exit 3' 'kill -9 $$' 'cat /etc/hostname >/dev/null; echo $0 "$@"'; do
    run_ax run --rm busybox sh -c "$c" a b
    local cold_status=$status cold_output=$output
    run_ax run --pool p1 --rm busybox sh -c "$c" a b
    [ "$status" -eq "$cold_status" ] && [ "$output" = "$cold_output" ] ||
      { echo "# cold: $cold_status $cold_output" >&3; show_run; false; }
  done
  # 126 and 127, with the same message.
  run_ax run --rm busybox /etc/passwd
  local m126=$output
  run_ax run --pool p1 --rm /etc/passwd
  [ "$status" -eq 126 ] && [ "$output" = "$m126" ] || { show_run; false; }
  run_ax run --rm busybox nosuchcommand
  local m127=$output
  run_ax run --pool p1 --rm nosuchcommand
  [ "$status" -eq 127 ] && [ "$output" = "$m127" ] || { show_run; false; }
  # IMAGE may be left out; the image's Cmd when no command is given.
  run_ax run --pool p1 --rm echo no image
  [ "$status" -eq 0 ] && [ "$output" = "no image" ] || { show_run; false; }
  run_ax run --pool p1 --rm -i busybox <<<'echo from stdin'
  [ "$status" -eq 0 ] && [ "$output" = "from stdin" ] || { show_run; false; }
  # Environment, user, working directory (-e, -u, -w), the --json document.
  local script='env | grep -v ^HOSTNAME= | sort; id; pwd; echo err >&2; exit 5'
  run_ax run --rm --json -e A=1 -e B=two -u 1000 -w /tmp busybox sh -c "$script"
  [ "$status" -eq 5 ] || { show_run; false; }
  local cold
  cold=$(without_run_fields <<<"$output")
  run_ax run --pool p1 --rm --json -e A=1 -e B=two -u 1000 -w /tmp busybox sh -c "$script"
  [ "$status" -eq 5 ] || { show_run; false; }
  [ "$(without_run_fields <<<"$output")" = "$cold" ] || { echo "# cold: $cold" >&3; show_run; false; }
  [[ "$cold" == *'"stdout": "A=1\nB=two\nHOME=/home/agent'* ]]
  # --name: the record, the host name, the --json name.
  run_ax run --pool p1 --rm --json --name claimed1 hostname
  [ "$status" -eq 0 ] || { show_run; false; }
  python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert d["name"] == "claimed1" and d["stdout"] == "claimed1\n" and d["exit_code"] == 0, d
assert d["stop_reason"] == "exit" and len(d["id"]) == 32, d' "$output"
  # --rm: no record stays; without it, the ended record as a cold run's.
  run_ax ls -a -q
  [ "$(echo "$output" | wc -l)" -eq 2 ] || { show_run; false; } # the refilled parked ones
  run_ax run --pool p1 sh -c 'exit 7'
  [ "$status" -eq 7 ]
  run_ax ls -a --json
  python3 -c '
import json, sys
v = [s for s in json.loads(sys.argv[1]) if s["status"] == "exited"]
assert len(v) == 1 and v[0]["exit_code"] == 7 and v[0]["stop_reason"] == "exit", v' "$output"
}

@test "pool: an attached --rm claim returns at its end, the sandbox already gone from ls, its name free" {
  ax pool create p1 --image busybox --size 2 >/dev/null
  local id i
  id=$(parked_ids p1 | head -1)
  # Answered before the teardown, yet never shown as running (nor at all)
  # right after, its name free at once, and nothing of it (a background
  # process holding the claimer's stdout) outlives the answer.
  for i in 1 2 3; do
    run_ax run --pool p1 --rm --name same sh -c '(sleep 3; echo late) & echo now; exit 3'
    [ "$status" -eq 3 ] || { show_run; false; }
    [ "$output" = now ] || { show_run; false; }
    run_ax ls -a --json
    [ "$status" -eq 0 ] || { show_run; false; }
    python3 -c '
import json, sys
for r in json.loads(sys.argv[1]):
    assert r.get("name") != "same" and (r["status"] != "running" or r.get("parked")), r' "$output"
  done
  sleep 0.8
  # --json keeps the end as a cold run's.
  run_ax run --pool p1 --rm --json sh -c 'kill -9 $$'
  [ "$status" -eq 137 ] || { show_run; false; }
  [[ "$output" == *'"exit_code": 137'* || "$output" == *'"exit_code":137'* ]] || { show_run; false; }
  # With a waiter, the end record comes first as always (agsx wait gets it).
  run_ax run --pool p1 -d --rm sleep 0.5
  [ "$status" -eq 0 ] || { show_run; false; }
  run_ax wait "$output"
  [ "$status" -eq 0 ] || { show_run; false; }
  wait_parked p1 2
  # --timing: the claim's phases, each part of the one before.
  run_ax run --pool p1 --timing --rm true
  [ "$status" -eq 0 ] || { show_run; false; }
  python3 -c '
import re, sys
m = re.search(r"agsx: timing: claim ([0-9.]+) ms, start to exec ([0-9.]+) ms, before the request "
              r"([0-9.]+) ms, request to answer ([0-9.]+) ms, supervisor accept to exec ([0-9.]+) ms",
              sys.argv[1])
assert m, sys.argv[1]
t, e, b, a, s = map(float, m.groups())
# The exec (stamped by the init) comes after the request and before the answer.
assert 0 < s <= a and b + a <= t + 0.002 and b < e <= t + 0.002, m.groups()' "$output"
}

@test "pool: a detached claim (-d): id, --json, name, logs, exec, kill, deadline from the claim" {
  ax pool create p1 --image busybox --size 1 --timeout 1h >/dev/null
  local parked id
  parked=$(parked_ids p1)
  run_ax run --pool p1 -d --name job sh -c 'echo started; sleep 60'
  [ "$status" -eq 0 ] || { show_run; false; }
  id=$output
  [ "$id" = "$parked" ]
  [ "$(rec "$id" parked)" = false ]
  [ "$(rec "$id" name)" = job ]
  # The claim's deadline: the default 5m from now, not the parked hour.
  local left
  left=$(($(rec "$id" deadline) - $(date +%s)))
  [ "$left" -gt $((300 - $(slow 20))) ] && [ "$left" -le 301 ] || { echo "# left $left" >&3; false; }
  for _ in $(seq 50); do [ "$(ax logs job)" = started ] && break; sleep 0.1; done
  [ "$(ax logs job)" = started ]
  run_ax exec job sh -c 'echo $HOSTNAME'
  [ "$output" = job ] || { show_run; false; }
  run_ax run --pool p1 -d --json --timeout 1m sleep 60
  [ "$status" -eq 0 ] || { show_run; false; }
  python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert len(d["id"]) == 32 and d["name"] is None, d' "$output"
  run_ax kill job
  [ "$status" -eq 0 ] || { show_run; false; }
  run_ax wait job
  [ "$output" = 143 ] || { show_run; false; }
}

@test "pool: 20 concurrent claimers never share a sandbox; the pool refills to its size" {
  ax pool create p1 --image busybox --size 6 >/dev/null
  parked_ids p1 >"$T/before"
  local i
  for i in $(seq 20); do
    ax run --pool p1 --rm --json sh -c 'echo $HOSTNAME; sleep 0.2' >"$T/out.$i" 2>"$T/err.$i" &
  done
  wait
  python3 - "$T" <<'PY'
import json, os, sys
t = sys.argv[1]
before = set(open(f"{t}/before").read().split())
ids, hosts = [], []
for i in range(1, 21):
    d = json.load(open(f"{t}/out.{i}"))
    assert d["exit_code"] == 0, (i, d, open(f"{t}/err.{i}").read())
    ids.append(d["id"]); hosts.append(d["stdout"])
assert len(set(ids)) == 20, ids
assert len(set(hosts)) == 20, hosts
claimed = before & set(ids)
# every claim of a parked sandbox got a different one; some were claimed
assert len(claimed) >= 1, (before, ids)
PY
  wait_parked p1 6
}

@test "pool: SIGKILL of a claimer: mid-claim the pool stays whole; after the claim its sandbox ends" {
  # (its own cgroup parent: the end collects young leftovers, below)
  private_cgroup_parent
  ax pool create p1 --image busybox --size 2 >/dev/null
  # Killed at once, at various points of the claim.
  local i pid
  for i in 1 2 3 4 5 6; do
    "$AGSX" --root "$ROOT" --state "$STATE" run --pool p1 sleep 30 &
    pid=$!
    sleep "0.0$i"
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  # Killed once its command runs: the sandbox dies with it, as a
  # foreground run's does.
  "$AGSX" --root "$ROOT" --state "$STATE" run --pool p1 --name fg sleep 30 >"$T/fg.out" 2>&1 &
  pid=$!
  for _ in $(seq 200); do [ -L "$STATE/names/fg" ] && break; sleep 0.05; done
  [ -L "$STATE/names/fg" ] || { cat "$T/fg.out" >&3; ls -la "$STATE" "$STATE/names" >&3; false; }
  local id
  id=$(readlink "$STATE/names/fg")
  kill -9 "$pid"
  wait "$pid" 2>/dev/null || true
  for _ in $(seq 100); do [ "$(rec "$id" status)" = exited ] && break; sleep 0.05; done
  [ "$(rec "$id" status)" = exited ]
  [ "$(rec "$id" stop_reason)" = killed ]
  # Consistent: every entry is a live parked sandbox, each claimable once.
  wait_parked p1 2
  run_ax gc
  [ "$status" -eq 0 ] || { show_run; false; }
  wait_parked p1 2
  for i in 1 2; do
    run_ax run --pool p1 --rm true
    [ "$status" -eq 0 ] || { show_run; false; }
  done
  # A claimer killed after it found the pool empty (its two refilling, on a
  # loaded host) was starting cold: gc takes what that left once it is a
  # minute old (a start under way looks the same before), here at once:
  # once the claims' refills are done, so that no start of ours is under way.
  wait_parked p1 2
  AGSX_GC_MIN_AGE=0 run_ax gc
  [ "$status" -eq 0 ] || { show_run; false; }
  [ "$(pool_field p1 parked)" = 2 ]
}

@test "pool: SIGKILL of a parked sandbox's supervisor: not handed out, refilled, gc cleans" {
  ax pool create p1 --image busybox --size 2 >/dev/null
  local dead sup
  dead=$(parked_ids p1 | head -1)
  sup=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["supervisor"]["pid"])' "$STATE/$dead/state.json")
  kill -9 "$sup"
  for _ in $(seq 50); do kill -0 "$sup" 2>/dev/null || break; sleep 0.05; done
  local i
  for i in 1 2 3; do
    run_ax run --pool p1 --rm --json true
    [ "$status" -eq 0 ] || { show_run; false; }
    [[ "$output" != *"$dead"* ]] || { show_run; false; }
  done
  wait_parked p1 2
  [[ "$(parked_ids p1)" != *"$dead"* ]]
  run_ax gc
  [ "$status" -eq 0 ] || { show_run; false; }
  [ ! -d "$STATE/$dead" ]
}

@test "pool: an empty pool starts cold, never an error, and is refilled" {
  ax pool create p1 --image busybox --size 1 --memory 64m >/dev/null
  local parked
  parked=$(parked_ids p1)
  # Stopped on request: not replaced, the pool is empty.
  ax kill "$parked" >/dev/null
  ax wait "$parked" >/dev/null || true
  [ -z "$(parked_ids p1)" ]
  run_ax run --pool p1 --rm --json sh -c 'cat /sys/fs/cgroup/memory.max 2>/dev/null; echo ok'
  [ "$status" -eq 0 ] || { show_run; false; }
  [[ "$output" == *'ok\n'* ]] || { show_run; false; }
  # The claim of the empty pool started the refill.
  wait_parked p1 1
}

@test "pool: options a claim cannot change are refused when they differ" {
  ax pool create p1 --image busybox --size 1 --memory 64m >/dev/null
  ax image tag busybox other:1 >/dev/null
  local o
  for o in "--memory 32m" "--network public" "--cpus 0.5" "--pids 10" "--disk 2m" "--read-only" \
    "-v /tmp:/mnt" "--security-opt seccomp=unconfined" "-p 8080"; do
    # shellcheck disable=SC2086 # one option and its value
    run_ax run --pool p1 $o --rm true
    [ "$status" -eq 125 ] && [[ "$output" == *"cannot be changed"* ]] || { show_run; false; }
  done
  run_ax run --pool p1 --rm other:1 true
  [ "$status" -eq 125 ] && [[ "$output" == *"the image"* ]] || { show_run; false; }
  # -t starts one cold, of the pool's configuration (a pty is the start's).
  run_ax run --pool p1 --name tty1 -t tty
  [ "$status" -eq 0 ] && [[ "$output" == */dev/pts/* ]] || { show_run; false; }
  [ "$(rec "$(readlink "$STATE/names/tty1")" memory)" = $((64 << 20)) ]
  # The pool's own values are no change.
  run_ax run --pool p1 --rm --memory 64m --network internal busybox true
  [ "$status" -eq 0 ] || { show_run; false; }
  # Nothing was claimed by the refused ones.
  wait_parked p1 1
}

@test "pool: a parked sandbox lives the pool's lifetime and is replaced; a claim restarts the deadline" {
  ax pool create p1 --image busybox --size 1 --timeout 3s >/dev/null
  local first
  first=$(parked_ids p1)
  run_ax run --pool p1 -d --timeout 1m sleep 60
  [ "$status" -eq 0 ] || { show_run; false; }
  local claimed=$output
  [ "$claimed" = "$first" ]
  local second
  for _ in $(seq 100); do second=$(parked_ids p1); [ -n "$second" ] && break; sleep 0.1; done
  [ -n "$second" ]
  sleep 4
  # The claimed one outlives the pool's 3 s; the parked one was replaced.
  [ "$(rec "$claimed" status)" = running ]
  for _ in $(seq 100); do
    [ -n "$(parked_ids p1)" ] && [ "$(parked_ids p1)" != "$second" ] && break
    sleep 0.1
  done
  [ -n "$(parked_ids p1)" ]
  [ "$(parked_ids p1)" != "$second" ]
  [ "$(rec "$second" stop_reason)" = timeout ] || [ ! -d "$STATE/$second" ]
}

@test "pool: a parked sandbox whose image was removed or re-tagged is not handed out" {
  SOURCE_DATE_EPOCH=1 "$FIXTURES/busybox-image" "$T/bb2" --probe "$PROBE" --ref bb2:latest >/dev/null
  ax image load "$T/bb2" >/dev/null
  ax image tag busybox img:1 >/dev/null
  ax pool create p1 --image img:1 --size 2 >/dev/null
  local old
  old=$(parked_ids p1)
  # Re-tagged: img:1 now names another image.
  ax image tag bb2 img:1 >/dev/null
  run_ax run --pool p1 --rm --json true
  [ "$status" -eq 0 ] || { show_run; false; }
  local id
  id=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["id"])' "$output")
  [[ "$old" != *"$id"* ]] || { show_run; false; }
  # The stale ones were stopped and replaced by ones of the new image.
  local digest
  digest=$(ax image inspect bb2 | python3 -c 'import json,sys; d=json.load(sys.stdin); d=d[0] if isinstance(d,list) else d; print(d.get("digest") or d["manifest_digest"])' 2>/dev/null || true)
  wait_parked p1 2
  for id in $(parked_ids p1); do
    [[ "$old" != *"$id"* ]]
    [ -z "$digest" ] || [ "$(rec "$id" image_digest)" = "$digest" ]
  done
  # Removed: nothing is handed out; the cold start fails as a run would.
  old=$(parked_ids p1)
  ax image rm img:1 >/dev/null
  run_ax run --pool p1 --rm true
  [ "$status" -eq 125 ] && [[ "$output" == *"img:1"* ]] || { show_run; false; }
  for id in $old; do
    for _ in $(seq 50); do [ "$(rec "$id" status 2>/dev/null)" != running ] && break; sleep 0.1; done
    [ "$(rec "$id" status 2>/dev/null)" != running ]
  done
}

@test "pool: a claimed sandbox is indistinguishable from a fresh one" {
  ax pool create p1 --image busybox --size 1 >/dev/null
  local script
  for script in 'ls -A /tmp /root /home/agent' 'ps -o pid,user,args' 'tr -d "\0" </proc/1/cmdline' \
    'cat /proc/self/status | grep -E "^(Cap|Seccomp|NoNewPrivs|Uid|Gid)"' \
    'ls -A /dev /dev/shm /run 2>&1; cat /etc/hosts /etc/resolv.conf 2>&1 | grep -v "$HOSTNAME"'; do
    run_ax run --rm busybox sh -c "$script"
    local cold=$output
    wait_parked p1 1 # a claim, not the cold fallback of a pool still refilling
    run_ax run --pool p1 --rm busybox sh -c "$script"
    [ "$status" -eq 0 ] && [ "$output" = "$cold" ] || { echo "# cold: $cold" >&3; show_run; false; }
  done
  # Nothing runs in a parked sandbox before its claim: exec is refused.
  wait_parked p1 1
  run_ax exec "$(parked_ids p1)" touch /tmp/left-behind
  [ "$status" -eq 125 ] && [[ "$output" == *parked* ]] || { show_run; false; }
  wait_parked p1 1
  run_ax run --pool p1 --rm ls -A /tmp
  [ "$status" -eq 0 ] && [ -z "$output" ] || { show_run; false; }
  # A signal to the claimer reaches the command, as with a foreground run.
  wait_parked p1 1
  "$AGSX" --root "$ROOT" --state "$STATE" run --pool p1 --name sig \
    sh -c 'trap "echo got USR1; exit 7" USR1; echo ready; while :; do sleep 0.1; done' >"$T/sig.out" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q ready "$T/sig.out" 2>/dev/null && break; sleep 0.05; done
  # (USR1: a shell that waits for a child killed by SIGINT takes it as its own)
  kill -USR1 "$pid"
  local rc=0
  wait "$pid" || rc=$?
  [ "$rc" -eq 7 ] && grep -q "got USR1" "$T/sig.out" || { echo "# rc $rc: $(cat "$T/sig.out")" >&3; false; }
  # Parked ones have their own uid ranges, and their init is all that runs.
  ax pool rm p1 >/dev/null
  ax pool create p2 --image busybox --size 3 >/dev/null
  local ids bases
  ids=$(parked_ids p2)
  bases=$(for i in $ids; do rec "$i" uid_base; done | sort -u | wc -l)
  [ "$bases" -eq 3 ]
}

@test "pool: a public pool: each parked sandbox has its own address; the claimed one reaches the world" {
  own_networld
  nax pool create pub --image busybox --size 2 --network public >/dev/null
  local a b
  a=$(rec "$(parked_ids pub | head -1)" address)
  b=$(rec "$(parked_ids pub | tail -1)" address)
  [[ "$a" == 198.19.0.* ]] && [[ "$b" == 198.19.0.* ]] && [ "$a" != "$b" ] ||
    { echo "# addresses $a $b" >&3; false; }
  run_nax run --pool pub --rm --json sh -c 'probe http 198.18.0.2 80; ip -4 -o addr show eth0'
  [ "$status" -eq 0 ] || { show_run; false; }
  python3 -c '
import json, sys
d = json.loads(sys.argv[1])
out = d["stdout"].splitlines()
assert out[0] == "http 198.18.0.2:80: world", d
assert (" " + sys.argv[2] + "/") in out[1] or (" " + sys.argv[3] + "/") in out[1], d' "$output" "$a" "$b"
  # A claim that asks for another network is refused.
  run_nax run --pool pub --network internal --rm true
  [ "$status" -eq 125 ] || { show_run; false; }
  nax pool rm pub >/dev/null
}

# ---- agsx serve --pool: Sandbox.create() claims a parked sandbox ----------

@test "pool: serve --pool: the SDK's Sandbox.create() gets a parked sandbox; commands run as without" {
  command -v node >/dev/null || skip "node is not installed"
  local mods
  mods=$("$AGSX_SRCDIR/test/serve/npm-install" 2>/dev/null | sed -n 1p) ||
    skip "the npm e2b SDK is not installed (npm or its registry unreachable)"
  [ -n "$mods" ] || skip "the npm e2b SDK is not installed"
  ax image tag busybox bb >/dev/null
  ax pool create pbb --image bb --size 2 >/dev/null
  local before port key=e2b_0123456789abcdef0123456789abcdef01234567
  before=$(parked_ids pbb)
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$AGSX" --root "$ROOT" --state "$STATE" --log-level debug serve --listen "127.0.0.1:$port" \
    --api-key "$key" --template bb=bb --pool bb=pbb >>"$T/serve.log" 2>&1 &
  local srv=$! i
  for i in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$port/" && break
    sleep 0.05
  done
  run env E2B_SDK="$mods" E2B_API_URL="http://127.0.0.1:$port" E2B_SANDBOX_URL="http://127.0.0.1:$port" \
    E2B_API_KEY="$key" E2B_TEMPLATE=bb timeout --kill-after=5 120 node "$AGSX_SRCDIR/test/serve/commands.mjs"
  local rc=$status out=$output
  kill "$srv" 2>/dev/null || true
  wait "$srv" 2>/dev/null || true
  [ "$rc" -eq 0 ] && [ "${out##*$'\n'}" = ok ] ||
    { echo "# node: $out" >&3; sed 's/^/# serve: /' "$T/serve.log" | tail -20 >&3; false; }
  # The sandbox was one of the parked ones, and the pool was refilled.
  local claimed
  claimed=$(sed -nE 's/.*claimed sandbox ([0-9a-f]+) of pool pbb.*/\1/p' "$T/serve.log" | head -1)
  [ -n "$claimed" ] || { sed 's/^/# serve: /' "$T/serve.log" >&3; false; }
  [[ "$before" == *"$claimed"* ]]
  wait_parked pbb 2
}

@test "pool: a claim keeps the filter installed while parked: Seccomp 2, unshare denied, name, hostname, -u" {
  ax pool create p1 --image busybox --size 1 >/dev/null
  # The waiting process runs under the filter, no_new_privs and the
  # bounding set already.
  wait_parked p1 1
  [ "$(parked_status p1 Seccomp)" = 2 ] && [ "$(parked_status p1 NoNewPrivs)" = 1 ] &&
    [ "$(parked_status p1 CapBnd)" = 00000000a80425fb ] ||
    { echo "# parked: $(parked_status p1 Seccomp) $(parked_status p1 NoNewPrivs) $(parked_status p1 CapBnd)" >&3; false; }
  local script='probe seccomp; probe nnp; probe syscall unshare-user 2>/dev/null; probe syscall setns 2>/dev/null; probe caps; probe id'
  run_ax run --rm busybox sh -c "$script"
  local cold=$output
  [[ "$cold" == *"Seccomp=2"* && "$cold" == *"unshare-user: blocked (errno=EPERM)"* ]] || { show_run; false; }
  wait_parked p1 1
  run_ax run --pool p1 --rm busybox sh -c "$script"
  [ "$status" -eq 0 ] && [ "$output" = "$cold" ] || { echo "# cold: $cold" >&3; show_run; false; }
  # --name and --hostname: set in the sandbox's UTS namespace by its
  # supervisor (the parked command's filter denies sethostname), which
  # returns to the host's: the host's name and namespace are unchanged.
  local host_name host_uts
  host_name=$(hostname)
  host_uts=$(readlink /proc/self/ns/uts)
  wait_parked p1 1
  run_ax run --pool p1 --rm --name named1 sh -c 'probe hostname; echo $HOSTNAME; cat /proc/sys/kernel/hostname'
  [ "$status" -eq 0 ] && [ "$output" = $'hostname=named1\nnamed1\nnamed1' ] || { show_run; false; }
  wait_parked p1 1
  run_ax run --pool p1 --rm --name named2 --hostname box2 sh -c 'probe hostname; echo $HOSTNAME'
  [ "$status" -eq 0 ] && [ "$output" = $'hostname=box2\nbox2' ] || { show_run; false; }
  wait_parked p1 1
  local id sup
  id=$(ax run --pool p1 -d --hostname box3 sleep 30)
  sup=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["supervisor"]["pid"])' "$STATE/$id/state.json")
  [ "$(readlink "/proc/$sup/ns/uts")" = "$host_uts" ] || { echo "# supervisor $sup in $(readlink "/proc/$sup/ns/uts")" >&3; false; }
  run_ax exec "$id" hostname
  [ "$status" -eq 0 ] && [ "$output" = box3 ] || { show_run; false; }
  ax kill "$id" >/dev/null
  [ "$(hostname)" = "$host_name" ]
  # -u: the pool's default user resolved while parked, another at the claim.
  local u
  for u in 1000 agent 1000:0 root; do
    run_ax run --rm -u "$u" busybox sh -c 'probe id; echo $HOME; probe caps'
    cold=$output
    wait_parked p1 1
    run_ax run --pool p1 --rm -u "$u" busybox sh -c 'probe id; echo $HOME; probe caps'
    [ "$status" -eq 0 ] && [ "$output" = "$cold" ] || { echo "# -u $u cold: $cold" >&3; show_run; false; }
  done
  # A user that does not exist fails as a cold run does; the pool's next
  # claim is not affected.
  run_ax run --rm -u nosuchuser busybox true
  local cold_status=$status
  cold=$output
  [ "$cold_status" -eq 125 ] || { show_run; false; }
  wait_parked p1 1
  run_ax run --pool p1 --rm -u nosuchuser busybox true
  [ "$status" -eq "$cold_status" ] && [ "$output" = "$cold" ] || { echo "# cold: $cold" >&3; show_run; false; }
  wait_parked p1 1
  run_ax run --pool p1 --rm probe id
  [ "$status" -eq 0 ] && [[ "$output" == "uid=0 "* ]] || { show_run; false; }
}

@test "pool: a pool's default user (-u at create) is the claim's; another -u still works" {
  ax pool create pu --image busybox --size 1 -u 1000 >/dev/null
  wait_parked pu 1
  run_ax run --pool pu --rm sh -c 'probe id; echo $HOME'
  [ "$status" -eq 0 ] && [ "$output" = $'uid=1000 gid=1000 euid=1000 egid=1000 groups=1000\n/home/agent' ] ||
    { show_run; false; }
  wait_parked pu 1
  run_ax run --pool pu --rm -u 0 probe id
  [ "$status" -eq 0 ] && [[ "$output" == "uid=0 gid=0 "* ]] || { show_run; false; }
}

@test "pool: a custom seccomp profile and unconfined are installed at the claim, as a cold run does" {
  # A profile that denies what the claim's path needs after a filter
  # installed early would be (setresuid, setgroups, capset): installed
  # last, as at a start, it cannot break the claim.
  cat >"$T/deny.json" <<'END'
{"defaultAction":"SCMP_ACT_ALLOW",
 "syscalls":[{"names":["mkdir","mkdirat","setresuid","setgroups","capset","sethostname"],"action":"SCMP_ACT_ERRNO","errnoRet":1}]}
END
  ax pool create pc --image busybox --size 1 --security-opt "seccomp=$T/deny.json" >/dev/null
  ax pool create pn --image busybox --size 1 --security-opt seccomp=unconfined >/dev/null
  wait_parked pc 1
  [ "$(parked_status pc Seccomp)" = 0 ] && [ "$(parked_status pc NoNewPrivs)" = 1 ] ||
    { echo "# parked: $(parked_status pc Seccomp) $(parked_status pc NoNewPrivs)" >&3; false; }
  local script='probe seccomp; probe id; mkdir /tmp/x 2>/dev/null; echo mkdir=$?; probe syscall keyctl 2>/dev/null; probe hostname'
  run_ax run --rm -u 1000 --hostname hc --security-opt "seccomp=$T/deny.json" busybox sh -c "$script"
  local cold=$output
  [[ "$cold" == *"Seccomp=2"*"uid=1000"*"mkdir=1"*"keyctl: allowed"*"hostname=hc"* ]] || { show_run; false; }
  wait_parked pc 1
  run_ax run --pool pc --rm -u 1000 --hostname hc sh -c "$script"
  [ "$status" -eq 0 ] && [ "$output" = "$cold" ] || { echo "# cold: $cold" >&3; show_run; false; }
  run_ax run --rm -u 1000 --hostname hn --security-opt seccomp=unconfined busybox sh -c "$script"
  cold=$output
  [[ "$cold" == *"Seccomp=0"*"uid=1000"*"mkdir=0"*"keyctl: allowed"*"hostname=hn"* ]] || { show_run; false; }
  wait_parked pn 1
  run_ax run --pool pn --rm -u 1000 --hostname hn sh -c "$script"
  [ "$status" -eq 0 ] && [ "$output" = "$cold" ] || { echo "# cold: $cold" >&3; show_run; false; }
}

@test "pool: an attached claim's record is the claim's, for a quick command's end and while it runs" {
  ax pool create p1 --image busybox --size 1 >/dev/null
  wait_parked p1 1
  # A quick command without --rm: its ended record names the claim.
  run_ax run --pool p1 --name quick -u 1000 -w /tmp true
  [ "$status" -eq 0 ] || { show_run; false; }
  local id
  id=$(python3 -c '
import json, sys
print(next(s["id"] for s in json.loads(sys.argv[1]) if s.get("name") == "quick"))' "$(ax ls -a --json)")
  [ "$(rec "$id" name)" = quick ] && [ "$(rec "$id" argv)" = '["true"]' ] &&
    [ "$(rec "$id" user)" = 1000 ] && [ "$(rec "$id" cwd)" = /tmp ] &&
    [ "$(rec "$id" parked)" = false ] && [ "$(rec "$id" status)" = exited ] ||
    { cat "$STATE/$id/state.json" >&3; false; }
  ax rm "$id" >/dev/null
  # A running one: its record is the claim's while the command runs.
  wait_parked p1 1
  id=$(parked_ids p1)
  "$AGSX" --root "$ROOT" --state "$STATE" run --pool p1 --rm --name slow sleep 30 >/dev/null 2>&1 &
  local pid=$! i
  for i in $(seq 100); do [ "$(rec "$id" name 2>/dev/null)" = slow ] && break; sleep 0.05; done
  [ "$(rec "$id" name)" = slow ] && [ "$(rec "$id" argv)" = '["sleep", "30"]' ] &&
    [ "$(rec "$id" parked)" = false ] || { cat "$STATE/$id/state.json" >&3; false; }
  kill -TERM "$pid"
  wait "$pid" || true
}
