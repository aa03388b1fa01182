# Shared helpers for the agsx bats suite.
#
# Each test gets a private store and state dir under $T (a fresh temp dir);
# `ax ARGS` runs agsx on them under `timeout`. `run_ax` is bats' `run` of
# the same, printing the command line, status and output when a later
# assertion fails. The default teardown (below; a file may define its own
# and call sandbox_teardown or common_teardown from it) stops and collects
# the test's sandboxes and checks that the test leaked nothing.
#
# Parallel files. test/run-tests runs each bats file as its own bats
# process; a file whose header has the line
#   # test-runner: parallel
# runs at the same time as other such files (and as the unit tests and the
# fuzzers), a file without it runs while no other bats file runs. A new file
# is serial until someone checks it against these rules and adds the line:
#   - every path it writes is under $T, $BATS_FILE_TMPDIR or a cache that
#     takes a lock (test/fixtures/debian-rootfs); named network namespaces,
#     /run paths and fixed names carry $$ or live in the test's own mount
#     namespace;
#   - anything with bridges, NAT or nftables runs in its own outer namespace
#     (test/fixtures/networld), never the host's ruleset or links;
#   - a server listens on a port the kernel picked (bind to port 0), or
#     inside a sandbox or namespace of the test's own, never a fixed host port;
#   - it looks only at processes, cgroups and records it can tell are its own
#     (its $T or $STATE in the command line, the ids it started), never "any
#     sandbox cgroup" or "any process in the uid range"; pgrep patterns name
#     $T or a string no other file uses;
#   - it removes nothing host-wide that another file may be using: `agsx gc`
#     with AGSX_GC_MIN_AGE=0 (which removes every empty sandbox cgroup, also
#     another file's sandbox being started) and host-wide cgroup listings run
#     after private_cgroup_parent;
#   - it changes no host setting (sysctls, the cgroup mount, modules) and
#     installs nothing (browser.bats' one-time `apt-get install chromium`
#     aside: no other file runs apt); timing bounds leave room for a loaded
#     machine.
# The same file never runs beside itself (under two builds) at once.
# Speed: host-wide lists grow with uptime (/run/agsx-uid-ranges keeps a file
# per range ever used); scan them with awk or python, not a shell loop, which
# bats' DEBUG trap makes cost a fraction of a millisecond per command.

# What the host offers (cgroup hierarchies, block devices): host.bash.
source "$(dirname "${BASH_SOURCE[0]}")/host.bash"

AGSX=${AGSX:-$BATS_TEST_DIRNAME/../../build/agsx}
AGSX_SRCDIR=${AGSX_SRCDIR:-$(cd "$BATS_TEST_DIRNAME/../.." && pwd)}
FIXTURES=$AGSX_SRCDIR/test/fixtures
PROBE=${PROBE:-$(dirname "$AGSX")/test/fixtures/probe}
export PROBE

common_setup() {
  T=$(mktemp -d /tmp/agsx-bats.XXXXXX)
  ROOT=$T/root
  STATE=$T/state
}

# The last check of every teardown: no process whose command line names $T
# (a registry, a proxy, a helper the test started), no private cgroup parent,
# no work dir in the store (nor a partial download where CHECK_PARTIAL is
# set), no mount under $T; then $T goes.
common_teardown() {
  local leaks="" procs i
  for i in $(seq 20); do
    procs=$(pgrep -af -- "$T/" || true)
    [ -z "$procs" ] && break
    sleep 0.1
  done
  if [ -n "$procs" ]; then
    leaks+="processes naming $T: $(echo "$procs" | cut -c1-100 | tr '\n' ';'); "
    pkill -9 -f -- "$T/" || true
  fi
  leaks+=$(remove_private_cgroup_parent)
  if [ -d "$ROOT/tmp" ] && [ -n "$(ls -A "$ROOT/tmp" 2>/dev/null)" ]; then
    leaks+="work dirs left in the store: $(ls -A "$ROOT/tmp"); "
  fi
  if [ -n "${CHECK_PARTIAL:-}" ] && [ -n "$(ls -A "$ROOT/partial" 2>/dev/null)" ]; then
    leaks+="partial blobs left: $(ls -A "$ROOT/partial"); "
  fi
  if grep -q " $T" /proc/self/mountinfo; then
    leaks+="mounts left under $T; "
  fi
  rm -rf "$T"
  if [ -n "$leaks" ]; then
    echo "# leaked: $leaks" >&3
    return 1
  fi
}

# ---- the default teardown: nothing of the test's sandboxes remains --------
#
# teardown stops and collects everything with `agsx kill --all` + `agsx gc`,
# then asserts that nothing of the test's sandboxes remains: no process in a
# sandbox uid range (>= UID_BASE) in one of the test's sandboxes' cgroups and
# no process at all (a supervisor, a background agsx) whose command line names
# the test's $STATE; no cgroup of theirs, no $STATE/<id> or name, no mount
# under $STATE or $ROOT, no work dir in the store (common_teardown). What
# leaked is named, then removed by force so that later tests start clean.
# The test's sandboxes are the records in $STATE at teardown plus every id
# written to $T/ids (note an id there when the test removes its record).
# Only what can be told to be the test's own is looked at, as the parallel
# rules above ask.

UID_BASE=$((0x70000000))

# Remembers the ids of every sandbox record now in $STATE.
note_sandbox_ids() {
  [ -d "$STATE" ] || return 0
  ls "$STATE" 2>/dev/null | grep -xE '[0-9a-f]{32}' >>"$T/ids" || true
}

sandbox_ids() { sort -u "$T/ids" 2>/dev/null; }

# Processes left of the test's sandboxes, one "pid uid cmdline" a line.
sandbox_processes() {
  sandbox_ids >"$T/ids.sorted"
  python3 - "$STATE" "$T/ids.sorted" "$UID_BASE" "$(cgroup_parent)" <<'PY'
import os, sys
state, idfile, base, parent = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
ids = set(open(idfile).read().split())
me = os.getpid()
for p in os.listdir('/proc'):
    if not p.isdigit() or int(p) == me:
        continue
    try:
        st = open(f'/proc/{p}/status').read()
        uid = int([l for l in st.splitlines() if l.startswith('Uid:')][0].split()[1])
        cmd = open(f'/proc/{p}/cmdline', 'rb').read().replace(b'\0', b' ').decode(errors='replace')
        cg = open(f'/proc/{p}/cgroup').read()
    except Exception:
        continue
    ours_cmd = ('--state ' + state + ' ') in cmd
    ours_cg = any(('/' + parent + '/' + i) in cg or ('/agsx.slice/agsx-' + i + '.scope/') in cg
                  for i in ids)
    if ours_cmd or (uid >= base and ours_cg):
        print(p, uid, cmd[:100].strip())
PY
}

# Cgroup directories of the test's sandboxes still on the host.
sandbox_cgroups() {
  local id p m mounts
  p=$(cgroup_parent)
  mounts=$(cgroup_mounts)
  for id in $(sandbox_ids); do
    for m in $mounts; do [ -d "$m/$p/$id" ] && echo "$m/$p/$id"; done
    # (systemd hosts: a transient scope per sandbox, host/cgroup.h)
    [ -d /sys/fs/cgroup/agsx.slice/agsx-"$id".scope ] && echo /sys/fs/cgroup/agsx.slice/agsx-"$id".scope
  done
  return 0
}

# sandbox_cgroup ID [CONTROLLER]: the host directory of sandbox ID's cgroup
# (in the v1 hierarchy of CONTROLLER when agsx uses v1), read from its
# init's /proc/PID/cgroup (the record's pid, trusted only with its start
# time), never composed from agsx's layout (host.bash). Status 1 when the
# sandbox's init is gone.
sandbox_cgroup() {
  local pid st
  pid=$(rec "$1" init.pid 2>/dev/null) && st=$(rec "$1" init.start_time 2>/dev/null) || return 1
  [ -n "$pid" ] && [ "$pid" != 0 ] || return 1
  [ "$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f20)" = "$st" ] || return 1
  proc_cgroup_dir "$pid" "${2:-}"
}

# Per-sandbox state dirs and names left in $STATE.
sandbox_state_left() {
  [ -d "$STATE" ] || return 0
  ls "$STATE" 2>/dev/null | grep -vx -e slots -e cache -e names || true
  ls "$STATE/names" 2>/dev/null | sed 's/^/names\//' || true
}

# Waits up to 5 s for the test's processes and cgroups to go, then names
# whatever is left and removes it by force.
assert_no_sandbox_leaks() {
  local i procs cgs state leaks=""
  for i in $(seq 50); do
    procs=$(sandbox_processes)
    cgs=$(sandbox_cgroups)
    [ -z "$procs$cgs" ] && break
    sleep 0.1
  done
  state=$(sandbox_state_left)
  [ -z "$procs" ] || leaks+="processes (pid uid cmd): $(echo "$procs" | tr '\n' ';'); "
  [ -z "$cgs" ] || leaks+="cgroups: $(echo $cgs); "
  [ -z "$state" ] || leaks+="state: $(echo $state); "
  if grep -qF -e "$STATE" -e "$ROOT" /proc/self/mountinfo; then
    leaks+="mounts: $(grep -F -e "$STATE" -e "$ROOT" /proc/self/mountinfo | head -3 | tr '\n' ';'); "
  fi
  [ -z "$leaks" ] && return 0
  echo "# leaked after kill --all + gc: $leaks" >&3
  local pid m
  for pid in $(echo "$procs" | awk '{print $1}'); do kill -9 "$pid" 2>/dev/null || true; done
  sleep 0.3
  for i in $cgs; do rmdir "$i" 2>/dev/null || true; done
  grep -F -e "$STATE" -e "$ROOT" /proc/self/mountinfo | awk '{print $5}' | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
  return 1
}

# kill --all + gc, the leak check, then common_teardown. A test that never
# made $STATE started no sandbox: only common_teardown runs. A file opts into
# more in setup: TEARDOWN_UNAIDED=1 (unaided_setup) first checks that agsx
# cleaned up by itself, before kill --all + gc could help; TEARDOWN_NO_RECORDS=1
# that no sandbox record is left at all (build's RUN steps leave none). With
# a networld ($OUTER), agsx runs in the outer namespace and its links, nft
# tables and leases there must be gone too.
sandbox_teardown() {
  local rc=0 tax=ax
  [ -n "${T:-}" ] || return 0 # setup did not run common_setup
  [ -z "${OUTER:-}" ] || tax=nax
  if [ -n "${TEARDOWN_UNAIDED:-}" ]; then assert_no_unaided_leaks || rc=1; fi
  if [ -n "${TEARDOWN_NO_RECORDS:-}" ] && [ -d "$STATE" ] &&
    ls "$STATE" | grep -qxE '[0-9a-f]{32}'; then
    echo "# leaked: sandbox records: $(ls "$STATE" | grep -xE '[0-9a-f]{32}' | tr '\n' ' ')" >&3
    rc=1
  fi
  if [ -d "$STATE" ]; then
    note_sandbox_ids
    run $tax kill --all
    if [ "$status" -ne 0 ]; then
      echo "# teardown: agsx kill --all failed ($status): $output" >&3
      rc=1
    fi
    run $tax gc
    if [ "$status" -ne 0 ]; then
      echo "# teardown: agsx gc failed ($status): $output" >&3
      rc=1
    fi
    assert_no_sandbox_leaks || rc=1
  fi
  if [ -n "${OUTER:-}" ]; then assert_networld_clean || rc=1; fi
  common_teardown || rc=1
  return $rc
}

teardown() { sandbox_teardown; }

# Sandbox cgroups live in a parent directory of each cgroup hierarchy:
# `agsx`, shared by every agsx on the host, or $AGSX_CGROUP_PARENT. Under
# systemd's manager (a systemd host on cgroup v2) a sandbox is the scope
# agsx.slice/agsx-<id>.scope instead (sandbox/ and supervisor/ in it; the
# parent does not apply), which the checks below look for as well.
cgroup_parent() { echo "${AGSX_CGROUP_PARENT:-agsx}"; }

# private_cgroup_parent: the sandboxes this test starts from now on (and
# `agsx gc`) use a parent of their own, so that the test can list or
# collect "every sandbox cgroup" without seeing another file's. Called in a
# test or in setup (not setup_file: common_teardown removes the parent after
# each test, naming any cgroup still in it as a leak).
private_cgroup_parent() {
  export AGSX_CGROUP_PARENT
  AGSX_CGROUP_PARENT=agsx-bats-$BASHPID-$RANDOM
}

# Removes the test's private cgroup parent; prints what was left in it.
remove_private_cgroup_parent() {
  local p=${AGSX_CGROUP_PARENT:-} d c left=""
  [[ "$p" == agsx-bats-* ]] || return 0
  for d in $(cgroup_mounts | sed "s|\$|/$p|"); do
    [ -d "$d" ] || continue
    for c in "$d"/*/; do
      [ -d "$c" ] || continue
      left+="$c "
      rmdir "$c" 2>/dev/null || true
    done
    rmdir "$d" 2>/dev/null || true
  done
  [ -z "$left" ] || echo "cgroups left under $p: $left; "
}

# ---- the unaided leak check (TEARDOWN_UNAIDED) -------------------------------
#
# Nothing of the test's sandboxes remains before anyone helps: no per-sandbox
# state directory beyond an ended record, no cgroup created during the test
# (under its private parent), no mount naming $STATE or $ROOT, no process in
# the test's uid ranges. A --rm sandbox leaves no record, so its processes
# and cgroups are found by uid range and by what the test created.

UID_RANGE=65536

# setup: the unaided check for this file's tests (after common_setup).
unaided_setup() {
  TEARDOWN_UNAIDED=1
  private_cgroup_parent
  CG_BEFORE=$(cgroup_dirs)
}

# The sandbox cgroup directories on the host (v1 hierarchies and v2).
cgroup_dirs() {
  local p
  p=$(cgroup_parent)
  { cgroup_mounts | while read -r m; do ls -d "$m/$p"/*/ 2>/dev/null; done
    ls -d /sys/fs/cgroup/agsx.slice/agsx-*.scope/sandbox/ 2>/dev/null; } | sort
}

# Host uid bases of the ranges this test's state dir handed out: a slot's
# lock file stays (only its lock is released), slot N is UID_BASE + N*65536.
# The slot files of every agsx run since boot stay too (thousands on a busy
# host): no shell loop over them, which bats' DEBUG trap makes take seconds.
our_uid_bases() {
  ls /run/agsx-uid-ranges 2>/dev/null |
    awk -v base="$UID_BASE" -v range="$UID_RANGE" '/^[0-9]+$/ { printf "%.0f\n", base + $1 * range }'
}

# Processes (pid uid) whose uid is in one of this test's ranges and that
# descend from an agsx of this test ($T in the command line of the process or
# an ancestor: the sandbox init is a fork of agsx). Other sandboxes may run
# concurrently in the 0x70000000+ range (or, with a range-allocation bug, even
# in the same range), so only ours count.
# (One python pass: with thousands of other sandboxes' processes in the
# ranges on a busy host, a shell loop of tr/grep/awk per ancestor took
# minutes a test.)
our_processes() {
  in_our_ranges | python3 -c '
import sys
t = sys.argv[1].encode()
def read(p, f):
    try:
        with open(f"/proc/{p}/{f}", "rb") as fh:
            return fh.read()
    except OSError:
        return None
for line in sys.stdin:
    pid, uid = line.split()
    p = pid
    for _ in range(8):
        cmd = read(p, "cmdline")
        if cmd is not None and t in cmd.replace(b"\0", b" "):
            print(pid, uid)
            break
        st = read(p, "status") or b""
        pp = [l.split()[1] for l in st.splitlines() if l.startswith(b"PPid:")]
        if not pp or int(pp[0]) <= 1:
            break
        p = pp[0].decode()
' "$T"
}

in_our_ranges() {
  local slots
  slots=$(ls /run/agsx-uid-ranges 2>/dev/null | tr '\n' ' ')
  [ -n "$slots" ] || return 0
  grep -H '^Uid:' /proc/[0-9]*/status 2>/dev/null |
    awk -v slots="$slots" -v base="$UID_BASE" -v range="$UID_RANGE" '
      BEGIN { n = split(slots, s, " "); for (i = 1; i <= n; i++) if (s[i] ~ /^[0-9]+$/) ours[s[i] + 0] = 1 }
      { u = $2 + 0
        if (u >= base && (int((u - base) / range) in ours)) { split($1, p, "/"); print p[3], u } }'
}

# Sandbox cgroups created during the test that are still there and are
# abandoned (no process) or hold a process of ours.
suspicious_cgroups() {
  local d procs pid
  for d in $(comm -13 <(printf '%s\n' "$CG_BEFORE") <(cgroup_dirs)); do
    [ -d "$d" ] || continue
    procs=$(cat "$d/cgroup.procs" 2>/dev/null)
    if [ -z "$procs" ]; then echo "$d"; continue; fi
    for pid in $procs; do
      if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$T"; then
        echo "$d"; break
      fi
    done
  done
}

# Per-sandbox state dirs that are more than the record of an ended sandbox
# (a record, `state.json` + `lock`, stays without --rm, with a detached
# sandbox's `log` and its processes' `procs` (agsx logs); its status must
# not be a live one).
leftover_state() {
  local d id extra
  [ -d "$STATE" ] || return 0
  for d in "$STATE"/*/; do
    id=$(basename "$d")
    case $id in slots | cache | '*') continue ;; esac
    extra=$(ls -A "$d" | grep -vx -e state.json -e lock -e log -e procs || true)
    if [ -n "$extra" ] || [ ! -f "$d/state.json" ] ||
      grep -qE '"status": *"(created|running)"' "$d/state.json"; then
      echo "$id"
    fi
  done
}

# Short waits only cover the moment between a sandbox's end and its teardown.
assert_no_unaided_leaks() {
  local leaks="" i left
  for i in $(seq 30); do
    left="$(our_processes)$(suspicious_cgroups)"
    [ -z "$left" ] && break
    sleep 0.1
  done
  local procs cgs state
  procs=$(our_processes)
  [ -z "$procs" ] || leaks+="processes (pid uid): $(echo $procs); "
  cgs=$(suspicious_cgroups)
  [ -z "$cgs" ] || leaks+="cgroups: $(echo $cgs); "
  state=$(leftover_state)
  [ -z "$state" ] || leaks+="state dirs: $(echo $state); "
  if grep -qF -e "$STATE" -e "$ROOT" /proc/self/mountinfo; then
    leaks+="mounts: $(grep -F -e "$STATE" -e "$ROOT" /proc/self/mountinfo | head -3); "
  fi
  if [ -n "$leaks" ]; then
    echo "# leaked (before kill --all + gc): $leaks" >&3
    return 1
  fi
}

# ---- setup shared by the files ----------------------------------------------

# rund ARGS...: `agsx run -d ARGS...`, prints the id and remembers it for the
# default teardown's leak check (also once the test removed the record).
rund() {
  local id
  id=$(ax run -d "$@") || return
  echo "$id" >>"$T/ids"
  echo "$id"
}

# rec ID KEY: a field of $STATE/ID/state.json, read directly (KEY a.b for a
# nested one): JSON for true/false/null, lists and objects, else as is.
rec() {
  python3 -c '
import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    v = v.get(k) if isinstance(v, dict) else None
print(json.dumps(v) if isinstance(v, (bool, type(None), list, dict)) else v)' "$STATE/$1/state.json" "$2"
}

# alive PID: the process exists and is not a zombie.
# poll N CMD...: runs CMD until it succeeds, at most N times 0.1 s apart.
poll() {
  local n=$1 i
  shift
  for i in $(seq "$n"); do
    "$@" && return 0
    sleep 0.1
  done
  return 1
}

alive() {
  local s
  s=$(awk '/^State:/ {print $2}' "/proc/$1/status" 2>/dev/null) || return 1
  [ -n "$s" ] && [ "$s" != Z ] && [ "$s" != X ]
}

# setup_file: the busybox test image (with the probe) in $BB.
# The image is made once per probe, busybox and recipe, and kept in the test
# cache (AGSX_TEST_CACHE, default /var/cache/agsx-test: the guest lane
# shares it): making it costs a minute of a TCG guest, copying it nothing.
busybox_setup_file() {
  export BB="$BATS_FILE_TMPDIR/bb"
  local cache=${AGSX_TEST_CACHE:-/var/cache/agsx-test} key tmp
  key=$(cat "$PROBE" "${BUSYBOX:-/bin/busybox}" "$FIXTURES/busybox-image" "$FIXTURES/mkimage" |
    { sha256sum; echo "${SOURCE_DATE_EPOCH:-0}"; } | sha256sum | cut -c1-16)
  if [ -f "$cache/busybox-$key/index.json" ]; then
    cp -a "$cache/busybox-$key" "$BB"
    return 0
  fi
  "$FIXTURES/busybox-image" "$BB" --probe "$PROBE" >/dev/null
  # Published whole or not at all: a rename of a complete copy.
  if mkdir -p "$cache" 2>/dev/null && tmp=$(mktemp -d "$cache/.busybox.XXXXXX" 2>/dev/null); then
    find "$cache" -maxdepth 1 -name 'busybox-*' -mtime +7 -exec rm -rf {} + 2>/dev/null || true
    { cp -a "$BB/." "$tmp/" && mv -T "$tmp" "$cache/busybox-$key"; } 2>/dev/null || rm -rf "$tmp"
  fi
  return 0
}

# setup: a fresh $T (common_setup) whose store has the busybox image;
# AX_TIMEOUT=$1 when given.
busybox_setup() {
  common_setup
  [ -z "${1:-}" ] || AX_TIMEOUT=$1
  ax image load "$BB" >/dev/null
}

# ---- a file of E2B API tests (serve*.bats) ---------------------------------
# setup_file() { serve_setup_file; } and so on: the busybox image as template
# bb, the npm e2b SDK where it can be had (NODE_LATEST, NODE_V250; empty: the
# SDK tests skip), a server per test (serve_start), curl at it (api).
serve_setup_file() {
  busybox_setup_file
  export NODE_LATEST= NODE_V250=
  local mods
  if command -v node >/dev/null && mods=$("$AGSX_SRCDIR/test/serve/npm-install" 2>/dev/null); then
    NODE_LATEST=$(sed -n 1p <<<"$mods")
    NODE_V250=$(sed -n 2p <<<"$mods")
  fi
}
serve_setup() {
  common_setup
  AX_TIMEOUT=60
  ax image load --tag bb "$BB" >/dev/null
  SRV_PID=
}
serve_teardown() {
  local rc=0
  serve_stop || rc=1
  sandbox_teardown || rc=1
  return $rc
}
serve_start() { SERVE_LOG_LEVEL=debug api_serve_start --template bb=bb "$@"; }
# curl against the control plane: api METHOD PATH [BODY]; prints the body
# and then the status on a line of its own.
api() {
  local m=$1 p=$2
  shift 2
  curl -s -X "$m" -H "X-API-KEY: $KEY" -H 'Content-Type: application/json' \
    ${1:+--data-binary "$1"} -w '\n%{http_code}\n' "$U$p"
}
status_of() { tail -1 <<<"$1"; }
body_of() { head -n -1 <<<"$1"; }

# ---- agsx serve on a free loopback port ------------------------------------

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# agsx serve on this test's store and state with the API key $KEY, on a
# free loopback port ($PORT, base URL $U), extra flags in "$@"; waits for
# its listener and notes its fd count (SRV_FDS) for serve_stop's leak check.
api_serve_start() {
  PORT=$(free_port)
  U=http://127.0.0.1:$PORT
  "$AGSX" --root "$ROOT" --state "$STATE" ${SERVE_LOG_LEVEL:+--log-level "$SERVE_LOG_LEVEL"} \
    serve --listen "127.0.0.1:$PORT" --api-key "$KEY" "$@" >>"$T/serve.log" 2>&1 &
  SRV_PID=$!
  local i
  for i in $(seq 100); do
    curl -s -o /dev/null "$U/" && break
    kill -0 "$SRV_PID" 2>/dev/null || { cat "$T/serve.log" >&3; return 1; }
    sleep 0.05
  done
  SRV_FDS=$(ls /proc/$SRV_PID/fd | wc -l)
}

# Stops it; fails if it holds more fds than after its start (a leak).
serve_stop() {
  [ -n "${SRV_PID:-}" ] || return 0
  local fds rc=0 i
  # Connections the server is still closing count for a moment: a leak is
  # what is still there after 5 s.
  for i in $(seq 50); do
    sleep 0.1
    fds=$(ls /proc/$SRV_PID/fd 2>/dev/null | wc -l)
    [ "$fds" -gt "$SRV_FDS" ] || break
  done
  if [ "$fds" -gt "$SRV_FDS" ]; then
    echo "# the server holds $fds fds, $SRV_FDS after its start:" >&3
    ls -l /proc/$SRV_PID/fd >&3
    rc=1
  fi
  kill "$SRV_PID" 2>/dev/null || true
  wait "$SRV_PID" 2>/dev/null || true
  SRV_PID=
  return $rc
}

# ---- networld: an outer network+mount namespace with a world ----------------
#
# For files with bridges, NAT or nftables (network.bats, firewall.bats):
# test/fixtures/networld makes the outer namespace and a "world" on
# 198.18.0.0/24; sandboxes get 198.19.0.0/24. agsx runs in the outer
# namespace (nax), and the default teardown checks it there.

# setup_file: the busybox image and a networld ($NW, $OUTER, $WORLD).
networld_setup_file() {
  busybox_setup_file
  export NW=$BATS_FILE_TMPDIR/world
  "$FIXTURES/networld" start "$NW"
  export OUTER WORLD
  OUTER=$(cat "$NW/outer.pid")
  WORLD=$(cat "$NW/world.pid")
}

networld_teardown_file() {
  "$FIXTURES/networld" stop "$NW"
}

# agsx in the outer namespace.
nax() {
  nsenter -t "$OUTER" --net --mount -- env AGSX_PUBLIC_SUBNET=198.19.0.0/24 AGSX_PULL=never \
    timeout --kill-after=5 "${AX_TIMEOUT:-60}" "$AGSX" --root "$ROOT" --state "$STATE" "$@"
}
run_nax() {
  AX_CMD="agsx $* (in the outer namespace)"
  run nax "$@"
}
# A command in the outer namespace, or in the world.
outer() { nsenter -t "$OUTER" --net --mount -- "$@"; }
world() { nsenter -t "$WORLD" --net -- "$@"; }

# Waits until sandbox $1 listens on TCP port $2 (probe listen prints nothing
# until it is killed, so ask the kernel).
wait_listen() {
  local i
  for i in $(seq 50); do
    nax exec "$1" sh -c "netstat -ltn 2>/dev/null | grep -q ':$2 '" && return 0
    sleep 0.1
  done
  return 1
}

# Nothing of agsx's networking may be left in the outer namespace.
assert_networld_clean() {
  local left i
  # A sandbox's veth pair goes with its network namespace, which the kernel
  # tears down asynchronously after the last process: give it some time.
  for i in $(seq 75); do
    left=$(outer ip -o link show | awk -F': ' '{print $2}' | grep -E '^agsx' || true)
    [ -z "$left" ] && break
    sleep 0.2
  done
  [ -z "$left" ] || { echo "# links left: $left" >&3; return 1; }
  left=$(outer nft list tables | grep agsx || true)
  [ -z "$left" ] || { echo "# nft tables left: $left" >&3; return 1; }
  left=$(outer sh -c 'find /run/agsx-net -mindepth 1 -not -name .lock' || true)
  [ -z "$left" ] || { echo "# leases left: $left" >&3; return 1; }
}

# Tests never pull implicitly from a registry they did not start: a
# missing image is an error unless a test sets AGSX_PULL itself.
ax() {
  AGSX_PULL=${AGSX_PULL:-never} timeout --kill-after=5 "${AX_TIMEOUT:-120}" "$AGSX" \
    --root "$ROOT" --state "$STATE" "$@"
}

run_ax() {
  AX_CMD="agsx $*"
  run ax "$@"
}

# Prints the last run's command, status and output (for failed assertions).
show_run() {
  {
    echo "# command: ${AX_CMD:-?}"
    echo "# status: $status"
    printf '# output:\n'
    printf '%s\n' "$output" | sed 's/^/#   /'
  } >&3
}

assert_success() {
  if [ "$status" -ne 0 ]; then show_run; return 1; fi
}

# Asserts exit status $1 and, for 125, exactly one stderr line "agsx: ...".
assert_status() {
  if [ "$status" -ne "$1" ]; then
    echo "# expected status $1" >&3
    show_run
    return 1
  fi
}

# The Docker-style agsx failure: status 125, one line starting "agsx: ".
assert_agsx_error() {
  assert_status 125 || return 1
  local lines
  lines=$(printf '%s\n' "$output" | grep -c .)
  if [ "$lines" -ne 1 ] || [[ "$output" != "agsx: "* ]]; then
    echo "# expected one 'agsx: ...' line" >&3
    show_run
    return 1
  fi
  if [ -n "${1:-}" ] && [[ "$output" != *"$1"* ]]; then
    echo "# expected the message to contain: $1" >&3
    show_run
    return 1
  fi
}

assert_output_contains() {
  if [[ "$output" != *"$1"* ]]; then
    echo "# expected output to contain: $1" >&3
    show_run
    return 1
  fi
}

refute_output_contains() {
  if [[ "$output" == *"$1"* ]]; then
    echo "# expected output NOT to contain: $1" >&3
    show_run
    return 1
  fi
}

# A fingerprint of the store's content (blobs, layers, refs) for "nothing
# changed" assertions.
store_snapshot() {
  {
    ls -A "$ROOT/blobs/sha256" 2>/dev/null | sed 's/^/blob /'
    ls -A "$ROOT/layers" 2>/dev/null | sed 's/^/layer /'
    cat "$ROOT/index.json" 2>/dev/null
    echo
  } | sha256sum | cut -d' ' -f1
}

# Builds the busybox test image once per bats file into $BATS_FILE_TMPDIR.
busybox_layout() {
  local out=$BATS_FILE_TMPDIR/busybox-oci
  if [ ! -d "$out" ]; then
    "$FIXTURES/busybox-image" "$out" --probe "$PROBE" >/dev/null
  fi
  echo "$out"
}

# Heavy tests (parallel starts, big files, long races) run in the plain build
# only: under ASan/UBSan they take 5-20x longer and exercise no code the
# rest of the suite does not. run-tests sets AGSX_SANITIZER for such builds.
heavy() {
  if [ -n "${AGSX_SANITIZER:-}" ]; then
    skip "heavy: runs in the plain build"
  fi
}

# PNG check: signature and a sane IHDR; prints WIDTHxHEIGHT.
png_size() {
  python3 - "$1" <<'PY'
import struct, sys
d = open(sys.argv[1], 'rb').read()
assert d[:8] == b'\x89PNG\r\n\x1a\n', 'not a PNG'
assert d[12:16] == b'IHDR', 'no IHDR'
w, h = struct.unpack('>II', d[16:24])
assert 0 < w <= 10000 and 0 < h <= 10000, (w, h)
assert d[-8:-4] == b'IEND', 'truncated'
print(f'{w}x{h}')
PY
}

# png_pixel FILE X Y: "R,G,B" of one pixel of an 8-bit, non-interlaced RGB
# or RGBA PNG (what Chromium writes), the filters undone.
png_pixel() {
  python3 - "$@" <<'PY'
import struct, sys, zlib
d = open(sys.argv[1], 'rb').read()
x, y = int(sys.argv[2]), int(sys.argv[3])
pos, idat = 8, b''
while pos < len(d):
    n, t = struct.unpack('>I4s', d[pos:pos + 8])
    if t == b'IHDR':
        w, h, depth, ctype, _, _, interlace = struct.unpack('>IIBBBBB', d[pos + 8:pos + 21])
    elif t == b'IDAT':
        idat += d[pos + 8:pos + 8 + n]
    pos += 12 + n
assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
bpp = 3 if ctype == 2 else 4
raw, stride, prev = zlib.decompress(idat), w * bpp, bytearray(w * bpp)
for row in range(y + 1):
    f, line = raw[row * (stride + 1)], bytearray(raw[row * (stride + 1) + 1:(row + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    prev = line
print(','.join(str(v) for v in prev[x * bpp:x * bpp + 3]))
PY
}

# Chromium on the host (for the host image, and as the browser a person
# uses), installed if we may.
need_chromium() {
  # Chromium's start-up dominates these tests; agsx's part (cmd/browser.c,
  # src/sandbox/cdp.c) is unit-tested and fuzzed under the sanitizers.
  heavy
  if ! command -v chromium >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends \
        chromium fonts-liberation >/dev/null 2>&1 || true
    fi
  fi
  command -v chromium >/dev/null ||
    skip "browser: Chromium is not installed and could not be (apt-get install chromium)"
}

# NSS's certutil (Debian's libnss3-tools), with which a test makes Chromium
# trust a CA as a user would (~/.pki/nssdb), installed if we may.
need_certutil() {
  if ! command -v certutil >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -qq --no-install-recommends \
      libnss3-tools >/dev/null 2>&1 || true
  fi
  command -v certutil >/dev/null || skip "certutil is not installed and could not be (apt-get install libnss3-tools)"
}

# ---- ordinary users for the rootless tests (src/host/rootless.h) -----------

# The first id after every range of /etc/subuid and /etc/subgid (and at
# least 300000): a test user's range is one no other line uses.
free_subid_base() {
  awk -F: 'BEGIN { m = 300000 } NF == 3 && $2 + $3 > m { m = $2 + $3 } END { print m }' \
    /etc/subuid /etc/subgid 2>/dev/null
}

# rootless_user_add NAME [BASE [COUNT]]: a user with COUNT (65536)
# subordinate uids and gids from BASE, or none when BASE is not given
# (useradd's own lines replaced).
rootless_user_add() {
  touch /etc/subuid /etc/subgid
  useradd -m -s /bin/sh "$1"
  sed -i "/^$1:/d" /etc/subuid /etc/subgid
  if [ -n "${2:-}" ]; then
    echo "$1:$2:${3:-65536}" >>/etc/subuid
    echo "$1:$2:${3:-65536}" >>/etc/subgid
  fi
}

# rootless_users_kill NAME...: every process of the users (holders,
# supervisors) killed and gone; their sandboxes die with their supervisors.
rootless_users_kill() {
  local u i list
  list=$(IFS=,; echo "$*")
  for u in "$@"; do
    pkill -KILL -u "$u" 2>/dev/null || true
  done
  for i in $(seq 50); do
    pgrep -u "$list" >/dev/null 2>&1 || break
    sleep 0.1
  done
}

# rootless_users_remove NAME...: killed as above, then the users, their
# homes and their lines go.
rootless_users_remove() {
  rootless_users_kill "$@"
  local u
  for u in "$@"; do
    userdel -r "$u" 2>/dev/null || true
    sed -i "/^$u:/d" /etc/subuid /etc/subgid
  done
}
