#!/usr/bin/env bats
# test-runner: parallel
# agsx snapshot / snapshot ls / snapshot rm / rollback, agsx commit and
# agsx fork (sandbox/snapshot.h): exactness of the copy (content, modes,
# owners, hard links, xattrs, deletions, sparse files), images that skopeo
# reads and that run, independent forks, and the faults: a sandbox that
# dies during a copy, agsx killed during one, two commits at once, the
# --disk cap, a missing snapshot, a paused source, tricks in the sandbox.

load helpers

bats_require_minimum_version 1.5.0

setup_file() {
  busybox_setup_file
  # A sandbox's writable layer is a tmpfs: user.* xattrs there need Linux
  # 6.6 (agsx info: tmpfs-user-xattrs); before it the tree has none.
  XATTR=$("$AGSX" info --json | python3 -c '
import json, sys
f = {x["name"]: x for x in json.load(sys.stdin)["kernel"]["features"]}
print(1 if f["tmpfs-user-xattrs"]["used"] else "")')
  export XATTR
}

setup() {
  common_setup
  AX_TIMEOUT=60
  private_cgroup_parent
  ax image load "$BB" >/dev/null
}

teardown() {
  local rc=0 left
  sandbox_teardown_keep_t || rc=1
  # Layers of snapshots and forks go with their sandboxes (gc).
  left=$(ls -A "$STATE/layers" 2>/dev/null || true)
  [ -z "$left" ] || { echo "# layers left: $left" >&3; rc=1; }
  common_teardown || rc=1
  return $rc
}

# sandbox_teardown without common_teardown (which removes $T), then a gc
# with no grace so that unused layers go at once.
sandbox_teardown_keep_t() {
  [ -d "$STATE" ] || return 0
  local rc=0
  note_sandbox_ids
  ax kill --all >/dev/null 2>&1 || rc=1
  AGSX_GC_MIN_AGE=0 ax gc >/dev/null 2>&1 || rc=1
  assert_no_sandbox_leaks || rc=1
  return $rc
}

# What a tree looks like: every entry's type, mode, owner, size, link
# count and content hash, and one xattr (probe getxattr; without it, one
# line whatever errno says so: tmpfs before 6.6 and a layer differ).
MANIFEST='cd /data && find . | sort | while read -r f; do
  if [ -L "$f" ]; then echo "$f L $(readlink "$f") $(stat -c "%u:%g" "$f")";
  elif [ -d "$f" ]; then echo "$f D $(stat -c "%a %u:%g" "$f")";
  elif [ -p "$f" ]; then echo "$f P $(stat -c "%a %u:%g" "$f")";
  elif [ "$(stat -c %s "$f")" -gt 10000000 ]; then echo "$f S $(stat -c "%a %u:%g %s %h" "$f") $(du -k "$f" | cut -f1) $(tail -c 5 "$f")";
  else echo "$f F $(stat -c "%a %u:%g %s %h" "$f") $(md5sum < "$f" | cut -c1-32)"; fi; done;
  probe getxattr /data/x/attr user.agsx | sed "s/: errno=.*/: no user.agsx/"; ls /bin/true /etc/passwd 2>&1; cat /tmp/starts'

make_tree() {
  local setx=true
  [ -z "$XATTR" ] || setx='probe setxattr /data/x/attr user.agsx v1'
  ax exec box sh -c "mkdir -p /data/x/deep/er && echo one >/data/x/a && chmod 640 /data/x/a &&
    chown 123:45 /data/x/a && ln /data/x/a /data/x/hard && ln -s /etc/passwd /data/x/sym &&
    echo attr >/data/x/attr && $setx &&
    mkfifo /data/x/fifo && truncate -s 5G /data/x/sparse && echo tail >>/data/x/sparse &&
    dd if=/dev/urandom of=/data/x/deep/er/blob bs=64k count=16 2>/dev/null && rm /bin/true"
}

@test "snapshot: rollback restores content, modes, owners, links, xattrs and deletions exactly" {
  run_ax run -d --name box --timeout 2m busybox sh -c 'echo started >>/tmp/starts; exec sleep 300'
  assert_success
  local id=$output
  make_tree
  local before
  before=$(ax exec box sh -c "$MANIFEST")
  [ -z "$XATTR" ] || [[ "$before" == *"user.agsx=v1"* ]] || { echo "# no xattr: $before" >&3; return 1; }
  run_ax snapshot --json box clean
  assert_success
  python3 -c 'import json,sys; v=json.loads(sys.argv[1]); assert v["name"]=="clean" and v["frozen_ms"]>=0 and v["bytes"]<10<<20, v' "$output"
  # Every kind of change.
  ax exec box sh -c 'echo two >/data/x/a; chmod 600 /data/x/hard; chown 7:7 /data/x/attr;
    probe setxattr /data/x/attr user.agsx v2; rm -rf /data/x/deep; rm /etc/passwd;
    echo new >/data/new; rm /data/x/sym; ln -s /nowhere /data/x/sym; echo x >/bin/true'
  run_ax exec box sh -c "$MANIFEST"
  [ "$output" != "$before" ]
  run_ax rollback box clean
  assert_success
  [ "$output" = box ]
  local after
  after=$(ax exec box sh -c "$MANIFEST")
  # The command started again on the restored files: one more start.
  [ "$after" = "$before"$'\nstarted' ] || {
    diff <(echo "$before") <(echo "$after") >&3
    return 1
  }
  # Same id and name, running.
  run_ax inspect box
  python3 -c 'import json,sys; v=json.loads(sys.argv[1])[0]; assert v["id"]==sys.argv[2] and v["status"]=="running", v' "$output" "$id"
}

@test "snapshot: rollback with exec'd processes running: they end with the old state, at once" {
  run_ax run -d --name box --timeout 2m busybox sleep 300
  assert_success
  run_ax exec -d box sleep 200
  assert_success
  run_ax snapshot box s1
  assert_success
  # The processes are the supervisor's children in the old pid namespace:
  # reaped before the old init is waited for (else the rollback hung until
  # its client gave up, 30 s).
  local t0=$SECONDS
  run_ax rollback box s1
  assert_success
  [ $((SECONDS - t0)) -lt "$(slow 10)" ] || { echo "# rollback took $((SECONDS - t0)) s" >&3; false; }
  run_ax exec box sh -c 'ps -o args | grep -c "^sleep 200" || true'
  [ "$output" = 0 ]
}

@test "snapshot: rollback keeps the published port; ls, rm; a missing snapshot is refused" {
  run_ax run -d --name box -p 0:80 busybox httpd -f -p 80 -h /tmp
  assert_success
  ax exec box sh -c 'echo v1 >/tmp/index.html'
  local port
  port=$(ax port box 80 | sed 's/.*://')
  [ "$(curl -fsS --max-time 5 "http://127.0.0.1:$port/")" = v1 ]
  run_ax snapshot box
  assert_success
  [ "$output" = snap-1 ]
  ax exec box sh -c 'echo v2 >/tmp/index.html'
  run_ax snapshot box second
  assert_success
  run_ax snapshot box second
  assert_agsx_error "has a snapshot \`second\` already"
  run_ax snapshot ls box
  assert_success
  [[ "$output" == *snap-1* && "$output" == *second* ]] || { show_run; return 1; }
  run_ax snapshot ls -q
  [ "$output" = $'snap-1\nsecond' ] || { show_run; return 1; }
  run_ax rollback box nosuch
  assert_agsx_error "has no snapshot \`nosuch\`"
  run_ax rollback box snap-1
  assert_success
  [ "$(curl -fsS --max-time 5 "http://127.0.0.1:$port/")" = v1 ]
  run_ax rollback box second
  assert_success
  [ "$(curl -fsS --max-time 5 "http://127.0.0.1:$port/")" = v2 ]
  run_ax snapshot rm box snap-1
  assert_success
  run_ax snapshot ls -q box
  [ "$output" = second ]
  run_ax snapshot rm box snap-1
  assert_agsx_error "has no snapshot"
  run_ax snapshot box 'bad/name'
  assert_agsx_error "invalid snapshot name"
}

@test "snapshot: snapshots die with the sandbox; the host image's /tmp and /root" {
  run_ax run -d --name box busybox sleep 300
  assert_success
  local id=$output
  ax exec box sh -c 'echo x >/f'
  run_ax snapshot box s
  assert_success
  [ -n "$(ls "$STATE/layers")" ]
  run_ax kill box
  assert_success
  run_ax snapshot ls box
  assert_agsx_error "is not running"
  [ ! -e "$STATE/$id/snapshots" ]
  AGSX_GC_MIN_AGE=0 ax gc >/dev/null
  [ -z "$(ls -A "$STATE/layers")" ]
  # The host image: /tmp and /root are its writable layer.
  run_ax run -d --name h host sleep 300
  assert_success
  ax exec h sh -c 'echo t >/tmp/t; mkdir /root/r; echo r >/root/r/f'
  run_ax snapshot h s
  assert_success
  ax exec h sh -c 'rm /tmp/t; echo x >/root/r/f; echo n >/tmp/new'
  run_ax rollback h s
  assert_success
  run_ax exec h sh -c 'cat /tmp/t /root/r/f; ls /tmp'
  [ "$output" = $'t\nr\nt' ] || { show_run; return 1; }
  run_ax fork --name hf h
  assert_success
  run_ax exec hf sh -c 'cat /tmp/t; python3 -c "print(6 * 7)"'
  [ "$output" = $'t\n42' ] || { show_run; return 1; }
  run_ax commit h
  assert_agsx_error "runs the host image: the host's / is no image in the store"
  run_ax commit --snapshot s h
  assert_agsx_error "runs the host image"
}

@test "commit: an image skopeo reads, that runs with the committed files and deletions" {
  command -v skopeo >/dev/null || skip "no skopeo"
  run_ax run -d --name box busybox sleep 300
  assert_success
  ax exec box sh -c 'echo hello >/greeting; mkdir -p /d; echo x >/d/f; chown 5:6 /d/f; rm /bin/true;
    rm -rf /etc; mkdir /etc; echo only >/etc/only'
  run --separate-stderr ax commit box mine:1
  assert_success
  local digest=$output
  [[ "$digest" == sha256:* ]] || { show_run; return 1; }
  [[ "$stderr" == *"frozen for"*" ms"* ]] || { echo "# stderr: $stderr" >&3; return 1; }
  run skopeo inspect "oci:$ROOT:mine:1"
  assert_success
  python3 -c 'import json,sys; v=json.loads(sys.argv[1]); assert v["Digest"]==sys.argv[2] and len(v["Layers"])==3, v' "$output" "$digest"
  run_ax run --rm mine:1 sh -c 'cat /greeting; stat -c "%u:%g" /d/f; ls /bin/true 2>&1; ls /etc'
  assert_success
  [ "$output" = $'hello\n5:6\nls: /bin/true: No such file or directory\nhostname\nhosts\nonly\nresolv.conf' ] || { show_run; return 1; }
  # The sandbox runs on; the image has agsx's history entry.
  run_ax exec box cat /greeting
  [ "$output" = hello ]
  run_ax image inspect mine:1
  [[ "$output" == *"agsx commit"* ]] || { show_run; return 1; }
  # A snapshot commits too (and outlives the sandbox so).
  ax exec box sh -c 'echo later >/greeting'
  run_ax snapshot box s
  ax exec box sh -c 'echo latest >/greeting'
  run_ax commit --snapshot s -q box mine:2
  assert_success
  run_ax run --rm mine:2 cat /greeting
  [ "$output" = later ]
}

@test "commit: at the --disk cap, two at once, a paused sandbox stays paused" {
  run_ax run -d --name box --disk 8m busybox sleep 300
  assert_success
  run_ax exec box sh -c 'dd if=/dev/zero of=/fill bs=1M count=20 2>&1; echo rc=$?'
  [[ "$output" == *"No space left"* ]] || { show_run; return 1; }
  ax commit -q box full:1 >"$T/c1" 2>&1 &
  local p1=$!
  ax commit -q box full:2 >"$T/c2" 2>&1 &
  local p2=$!
  wait "$p1" || { cat "$T/c1" >&3; return 1; }
  wait "$p2" || { cat "$T/c2" >&3; return 1; }
  [[ "$(cat "$T/c1")" == sha256:* && "$(cat "$T/c2")" == sha256:* ]]
  local k
  for k in 1 2; do
    run_ax run --rm "full:$k" sh -c 'stat -c %s /fill'
    assert_success
    [ "$output" -gt 7000000 ]
  done
  run_ax pause box
  run_ax commit -q box full:3
  assert_success
  run_ax ls --json
  python3 -c 'import json,sys; v=json.loads(sys.argv[1]); assert v[0]["status"]=="paused", v' "$output"
}

@test "fork: three independent sandboxes with their own ids, uid ranges and deadlines" {
  run_ax run -d --name src --memory 64m --timeout 3m -e FOO=bar busybox sh -c 'exec sleep 300'
  assert_success
  ax exec src sh -c 'echo base >/state; rm /bin/true'
  run_ax fork --json -n 3 --name f --timeout 1m src
  assert_success
  python3 -c 'import json,sys; v=json.loads(sys.argv[1]); assert [f["name"] for f in v]==["f-1","f-2","f-3"], v' "$output"
  local k
  for k in 1 2 3; do
    ax exec "f-$k" sh -c "echo fork$k >/state"
  done
  for k in 1 2 3; do
    run_ax exec "f-$k" sh -c 'cat /state; echo $FOO; ls /bin/true 2>&1 | grep -c "No such"'
    [ "$output" = $'fork'$k$'\nbar\n1' ] || { show_run; return 1; }
  done
  run_ax exec src cat /state
  [ "$output" = base ]
  run_ax inspect src f-1 f-2 f-3
  python3 - "$output" <<'PY'
import json, sys
v = json.loads(sys.argv[1])
bases = {r["uid_range"]["base"] for r in v}
ids = {r["id"] for r in v}
assert len(bases) == 4 and len(ids) == 4, bases
src, forks = v[0], v[1:]
for f in forks:
    assert f["limits"]["memory"] == src["limits"]["memory"] == 64 << 20, f
    assert f["timeout"] == 60 and f["network"] == src["network"], f
PY
  run_ax fork --name f-1 src
  assert_agsx_error "f-1"
  run_ax fork -n 0 src
  assert_agsx_error "invalid count"
}

@test "fork: published ports get new host ports, volumes stay out, ls shows the image name" {
  mkdir -p "$T/vol"
  echo host-data >"$T/vol/f"
  run_ax run -d --name src -p 0:80 -p 127.0.0.1:0:81 -v "$T/vol:/vol" busybox sh -c \
    'mkdir -p /www; httpd -p 80 -h /www; exec httpd -f -p 81 -h /www'
  assert_success
  ax exec src sh -c 'mkdir -p /www && echo src >/www/index.html'
  run_ax fork -n 2 --name f src
  assert_success
  ax exec f-1 sh -c 'echo f1 >/www/index.html'
  ax exec f-2 sh -c 'echo f2 >/www/index.html'
  local n p80 p81 seen=""
  for n in src f-1 f-2; do
    run_ax --json port "$n"
    assert_success
    read -r p80 p81 < <(python3 -c '
import json, sys
v = {p["port"]: p for p in json.loads(sys.argv[1])}
assert set(v) == {80, 81}, v
assert v[81]["host_ip"] == "127.0.0.1", v
print(v[80]["host_port"], v[81]["host_port"])' "$output") || { show_run; return 1; }
    [[ " $seen " != *" $p80 "* && " $seen " != *" $p81 "* ]] || { echo "# $n reuses a host port: $seen / $p80 $p81" >&3; return 1; }
    seen+=" $p80 $p81"
    local want=${n#f-}
    [ "$n" = src ] || want=f$want
    [ "$(curl -fsS --max-time 5 "http://127.0.0.1:$p80/")" = "$want" ] || { echo "# $n :80 on $p80" >&3; return 1; }
    [ "$(curl -fsS --max-time 5 "http://127.0.0.1:$p81/")" = "$want" ] || { echo "# $n :81 on $p81" >&3; return 1; }
  done
  # The volume is the source's alone.
  run_ax exec f-1 sh -c 'cat /vol/f 2>&1; echo x >/vol/g 2>&1; true'
  refute_output_contains host-data
  [ ! -e "$T/vol/g" ]
  [ "$(ax exec src cat /vol/f)" = host-data ]
  run_ax ls --json
  python3 -c '
import json, sys
v = {s["name"]: s for s in json.loads(sys.argv[1])}
assert v["f-1"]["image"] == v["f-2"]["image"] == v["src"]["image"] == "busybox", v
' "$output" || { show_run; return 1; }
  run_ax ls
  [[ "$(grep -E '^\S+\s+f-1' <<<"$output")" == *busybox* ]] || { show_run; return 1; }
}

@test "fork: of a paused sandbox (which stays paused); with a command" {
  run_ax run -d --name src busybox sleep 300
  assert_success
  ax exec src sh -c 'echo p >/p'
  run_ax pause src
  assert_success
  run_ax fork src cat /p
  assert_success
  run_ax wait "$output"
  [ "$output" = 0 ]
  run_ax ls --json
  python3 -c 'import json,sys; v=[s for s in json.loads(sys.argv[1]) if s["name"]=="src"]; assert v[0]["status"]=="paused", v' "$output"
}

@test "fork: three forks of 100 MiB of changes start well under a second each" {
  heavy
  run_ax run -d --name src --disk 512m busybox sleep 300
  assert_success
  ax exec src sh -c 'dd if=/dev/urandom of=/big bs=1M count=100 2>/dev/null'
  local t0 t1
  t0=$(date +%s%N)
  run_ax fork -n 3 src
  assert_success
  t1=$(date +%s%N)
  local ms=$(((t1 - t0) / 1000000))
  echo "# 3 forks of 100 MiB: $ms ms" >&3
  [ "$ms" -lt $(slow 2400) ] || { echo "# took $ms ms" >&3; return 1; }
  for f in $output; do
    run_ax exec "$f" sh -c 'stat -c %s /big'
    [ "$output" = 104857600 ]
  done
}

# Waits (5 s at most) until a copy into a new layer has begun.
copy_started() {
  local _
  for _ in $(seq 100); do
    compgen -G "$STATE/layers/.tmp-*/*" >/dev/null && return 0
    sleep 0.05
  done
}

@test "faults: a sandbox killed during a snapshot or commit leaves nothing listed" {
  heavy
  # Many small files: a copy of some seconds, with a kill in its middle.
  many='mkdir /m && cd /m && i=0; while [ $i -lt 300 ]; do mkdir d$i; (cd d$i && seq 1 200 | xargs touch); i=$((i+1)); done'
  run_ax run -d --name box --disk 700m busybox sleep 300
  assert_success
  ax exec box sh -c "$many"
  ax snapshot box s1 >"$T/snap" 2>&1 &
  local p=$!
  copy_started
  # SIGKILL of the init of a sandbox the copy froze (v1's freezer holds
  # it until thawed): it dies at once and the copy gives up at once (it
  # used to copy on to the end, over a minute at 100% CPU).
  local t0=$SECONDS
  ax kill -s KILL box >/dev/null
  local st=0
  wait "$p" || st=$?
  [ $((SECONDS - t0)) -lt 10 ] || { echo "# the snapshot took $((SECONDS - t0)) s after the kill" >&3; return 1; }
  if [ "$st" = 0 ]; then
    echo "# the snapshot finished before the kill" >&3
  else
    grep -qE "^agsx: " "$T/snap" || { echo "# snapshot ($st): $(cat "$T/snap")" >&3; return 1; }
  fi
  ax wait box >/dev/null || true
  run_ax snapshot ls
  assert_success
  [[ "$output" != *s1* ]] || { show_run; return 1; }
  [ -z "$(ls -A "$STATE/layers" | grep -v '^\.tmp-' || true)" ] || AGSX_GC_MIN_AGE=0 ax gc >/dev/null
  [ -z "$(ls -A "$STATE/layers")" ] || { ls -la "$STATE/layers" >&3; return 1; }
  # commit: no image unless complete.
  run_ax run -d --name box2 --disk 700m busybox sleep 300
  ax exec box2 sh -c "$many"
  ax commit box2 dying:1 >"$T/commit" 2>&1 &
  p=$!
  copy_started
  t0=$SECONDS
  ax kill -s KILL box2 >/dev/null
  st=0
  wait "$p" || st=$?
  [ $((SECONDS - t0)) -lt 10 ] || { echo "# the commit took $((SECONDS - t0)) s after the kill" >&3; return 1; }
  if [ "$st" = 0 ]; then
    echo "# the commit's copy finished before the kill" >&3
    run_ax run --rm dying:1 sh -c 'find /m -type f | wc -l'
    [ "$output" = 60000 ] # whole, if it was made
  else
    run_ax image ls
    refute_output_contains dying
  fi
}

# A counter that a frozen sandbox cannot move: a whole file renamed into
# place, so that a reading is never the empty file between a truncate and
# a write.
COUNTER='i=0; while :; do i=$((i+1)); echo $i >/tmp/c.new; mv /tmp/c.new /tmp/c; sleep 0.05; done'

# Waits for box's counter to move on from a first reading (10 s at most,
# however loaded the host; a sandbox just rolled back may not have written
# its first yet). Prints the two readings.
counter_moves() {
  local a="" b="" c _
  for _ in $(seq 50); do
    c=$(ax exec box cat /tmp/c 2>/dev/null) || c=""
    if [ -z "$a" ]; then
      a=$c
    elif [ -n "$c" ] && [ "$c" -gt "$a" ]; then
      b=$c
      break
    fi
    sleep 0.2
  done
  echo "${a:-none} ${b:-none}"
}

# After agsx died holding box frozen: runs agsx (each invocation thaws
# what a dead capture froze, but reaps at most once a second, so one run
# may come too soon) until box's record names no freezer (10 s at most),
# then counter_moves.
thawed_counter() {
  local id _
  id=$(ax inspect box | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
  for _ in $(seq 50); do
    ax ls >/dev/null
    case $(rec "$id" frozen_by.pid) in 0 | None | null | "") break ;; esac
    sleep 0.2
  done
  counter_moves
}

@test "faults: agsx SIGKILLed during a copy: the sandbox is thawed, gc removes the remains" {
  heavy
  run_ax run -d --name box --disk 1g busybox sh -c "$COUNTER"
  assert_success
  ax exec box sh -c 'dd if=/dev/urandom of=/big bs=1M count=600 2>/dev/null'
  "$AGSX" --root "$ROOT" --state "$STATE" snapshot box s >/dev/null 2>&1 &
  local p=$!
  copy_started # (it froze box first)
  kill -9 "$p" 2>/dev/null || true
  wait "$p" || true
  # The next agsx thaws what the dead copy froze.
  local a b
  read -r a b < <(thawed_counter)
  [ "$b" != none ] && [ "$b" -gt "$a" ] || { echo "# still frozen: $a $b" >&3; return 1; }
  run_ax snapshot ls -q box
  [ -z "$output" ]
  AGSX_GC_MIN_AGE=0 ax gc >/dev/null
  [ -z "$(ls -A "$STATE/layers" 2>/dev/null)" ] || { ls -la "$STATE/layers" >&3; return 1; }
  # A commit killed while compressing leaves a work dir that gc removes.
  "$AGSX" --root "$ROOT" --state "$STATE" commit box killed:1 >/dev/null 2>&1 &
  p=$!
  sleep 1.5
  kill -9 "$p" 2>/dev/null || true
  wait "$p" || true
  ax gc >/dev/null
  AGSX_GC_MIN_AGE=0 ax gc >/dev/null
  [ -z "$(ls -A "$ROOT/tmp" 2>/dev/null)" ] || { ls -la "$ROOT/tmp" >&3; return 1; }
  run_ax image ls
  refute_output_contains killed
  # A fork killed during its copy or its starts: the source runs on, and
  # what it left goes with gc (teardown checks the layers).
  "$AGSX" --root "$ROOT" --state "$STATE" fork -n 3 box >/dev/null 2>&1 &
  p=$!
  sleep 0.3
  kill -9 "$p" 2>/dev/null || true # (a fast host may have finished the fork)
  wait "$p" || true
  read -r a b < <(thawed_counter)
  [ "$b" != none ] && [ "$b" -gt "$a" ] || { echo "# frozen after the fork was killed: $a $b" >&3; return 1; }
}

@test "faults: agsx SIGKILLed during a rollback: the sandbox runs on one state or the other, nothing half-made" {
  heavy
  run_ax run -d --name box busybox sh -c "$COUNTER"
  assert_success
  ax exec box sh -c 'echo v1 >/f; dd if=/dev/urandom of=/big bs=1M count=50 2>/dev/null'
  run_ax snapshot box s
  assert_success
  local d a b f
  for d in 0 0.001 0.01 0.05 0.2; do
    ax exec box sh -c 'echo v2 >/f'
    "$AGSX" --root "$ROOT" --state "$STATE" rollback box s >/dev/null 2>&1 &
    local p=$!
    sleep "$d"
    kill -9 "$p" 2>/dev/null || true
    wait "$p" || true
    # A rollback the supervisor took up finishes without its client.
    for _ in $(seq 50); do
      ax exec box true 2>/dev/null && break
      sleep 0.1
    done
    run_ax inspect box
    python3 -c 'import json,sys; v=json.loads(sys.argv[1])[0]; assert v["status"]=="running" and not v.get("paused"), v' "$output"
    f=$(ax exec box cat /f)
    [[ "$f" == v1 || "$f" == v2 ]] || { echo "# /f after a rollback killed after $d s: $f" >&3; return 1; }
    read -r a b < <(counter_moves)
    [ "$b" != none ] && [ "$b" -gt "$a" ] || { echo "# not running after a rollback killed after $d s: $a $b" >&3; return 1; }
    # A request its killed client left behind is not carried out later
    # (an update signals the supervisor).
    ax exec box sh -c 'echo v3 >/f'
    ax update --timeout 5m box >/dev/null
    sleep 0.3
    [ "$(ax exec box cat /f)" = v3 ] || { echo "# a stale rollback ran after an update (kill after $d s)" >&3; return 1; }
    run_ax snapshot ls -q box
    [ "$output" = s ] || { show_run; return 1; }
  done
  # The same, made sure of: a request whose client is gone, as one killed
  # between its record write and its signal leaves it.
  local id
  id=$(ax inspect box | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
  ax exec box sh -c 'echo v4 >/f'
  python3 - "$STATE/$id" <<'PY'
import json, os, sys
d = sys.argv[1]
r = json.load(open(d + "/state.json"))
r["restart_seq"] = max(r.get("restart_seq") or 0, r.get("restarted_seq") or 0) + 1
r["restart_layers"] = json.load(open(d + "/snapshots/s.json"))["layers"]
r["restart_by"] = {"pid": 4194300, "start_time": 1}
open(d + "/.t", "w").write(json.dumps(r))
os.rename(d + "/.t", d + "/state.json")
PY
  ax update --timeout 5m box >/dev/null
  sleep 0.5
  [ "$(ax exec box cat /f)" = v4 ] || { echo "# a dead client's rollback was carried out" >&3; return 1; }
  # Nothing but the snapshot's layer and the sandbox's own remain.
  AGSX_GC_MIN_AGE=0 ax gc >/dev/null
  run_ax rollback box s
  assert_success
  [ "$(ax exec box cat /f)" = v1 ]
  [ "$(ls "$STATE/layers" | wc -l)" -le 2 ] || { ls -la "$STATE/layers" >&3; return 1; }
}

@test "faults: symlinks, hard links, FIFOs, sparse files and odd names never reach a host file" {
  run_ax run -d --name box busybox sleep 300
  assert_success
  echo host-secret >"$T/secret"
  ax exec box sh -c "ln -s $T/secret /link; ln -s ../../../../../$T/secret /rel; mkdir -p /d;
    ln -s / /d/root; mkfifo /fifo; mknod /dev/nullx c 1 3 2>/dev/null; touch ./-rf '/ sp' /.wh.x;
    truncate -s 1099511627776 /huge; ln /link /hardsym"
  run_ax snapshot box s
  assert_success
  run_ax rollback box s
  assert_success
  run_ax exec box sh -c 'readlink /link; cat /link 2>&1; ls -l /fifo | cut -c1; stat -c %s /huge'
  [[ "$output" == "$T/secret"$'\n'"cat: can't open '/link': No such file or directory"$'\np\n1099511627776' ]] || { show_run; return 1; }
  # The layer holds the symlinks as symlinks.
  [ -z "$(grep -rl host-secret "$STATE/layers" 2>/dev/null)" ]
  # commit refuses a terabyte of holes rather than compressing it.
  run_ax commit box huge:1
  assert_agsx_error "of holes"
  # The same tricks, without the holes, committed.
  run_ax run -d --name box2 busybox sleep 300
  assert_success
  ax exec box2 sh -c "ln -s $T/secret /link; mkfifo /fifo; ln -s / /root-link"
  run_ax commit -q box2 tricks:1
  assert_success
  run_ax run --rm tricks:1 sh -c 'readlink /link; ls -l /fifo | cut -c1; cat /link 2>&1'
  [[ "$output" == "$T/secret"$'\np\n'* ]] || { show_run; return 1; }
  refute_output_contains host-secret
  [ "$(cat "$T/secret")" = host-secret ]
}

@test "commit and build: a file named .wh.* is refused, naming it (it would unpack as a deletion)" {
  run_ax run -d --name box busybox sleep 300
  assert_success
  # A snapshot and a rollback keep it as the file it is.
  ax exec box sh -c 'mkdir -p /d && echo keep >/d/.wh.passwd && touch /etc/.wh..wh..opq'
  run_ax snapshot box s
  assert_success
  run_ax rollback box s
  assert_success
  [ "$(ax exec box cat /d/.wh.passwd)" = keep ]
  run_ax commit box bad:1
  assert_agsx_error '.wh.'
  [[ "$output" == *'`/d/.wh.passwd`'* || "$output" == *'`/etc/.wh..wh..opq`'* ]] || { show_run; return 1; }
  run_ax commit --snapshot s box bad:2
  assert_agsx_error 'would be a deletion'
  run_ax image ls
  refute_output_contains bad
  # Real deletions still commit as whiteouts (a sandbox that never had the
  # files: the rolled back one has them in its snapshot's layer).
  run_ax run -d --name box2 busybox sleep 300
  assert_success
  ax exec box2 sh -c 'mkdir -p /d && echo keep >/d/.wh.passwd && rm -rf /d /etc/passwd'
  run_ax commit -q box2 good:1
  assert_success
  run_ax run --rm good:1 sh -c 'ls /etc/passwd 2>&1; ls -d /d 2>&1; ls /etc | wc -l'
  [[ "$output" == *"/etc/passwd: No such file"*"/d: No such file"* ]] || { show_run; return 1; }
  [ "${output##*$'\n'}" -gt 3 ] || { show_run; return 1; }
  # build: RUN and COPY share the layer writer.
  mkdir -p "$T/ctx"
  printf 'FROM busybox\nRUN mkdir /r && touch /r/.wh.x\n' >"$T/ctx/Dockerfile"
  run_ax build -q -t bad:3 "$T/ctx"
  assert_agsx_error 'would be a deletion'
  [[ "$output" == *'`/r/.wh.x`'* ]] || { show_run; return 1; }
  echo y >"$T/ctx/.wh.y"
  printf 'FROM busybox\nCOPY .wh.y /\n' >"$T/ctx/Dockerfile"
  run_ax build -q -t bad:4 "$T/ctx"
  assert_agsx_error 'would be a deletion'
  run_ax image ls
  # (the REPOSITORY column: an image id may hold "bad" too)
  ! grep -q '^bad ' <<<"$output" || { show_run; return 1; }
}

@test "rollback: bad input and a sandbox that is not running" {
  run_ax rollback
  assert_agsx_error "give SANDBOX NAME"
  run_ax run -d --name box busybox sleep 300
  assert_success
  run_ax rollback box
  assert_agsx_error "give SANDBOX NAME"
  run_ax snapshot box s
  run_ax kill box
  run_ax rollback box s
  assert_agsx_error "is not running"
  run_ax rollback nosuch s
  assert_agsx_error "nosuch"
}
