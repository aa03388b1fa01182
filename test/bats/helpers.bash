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

common_teardown() {
  local leaks=""
  leaks+=$(remove_private_cgroup_parent)
  if [ -d "$ROOT/tmp" ] && [ -n "$(ls -A "$ROOT/tmp" 2>/dev/null)" ]; then
    leaks+="work dirs left in the store: $(ls -A "$ROOT/tmp"); "
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
    ours_cg = any(('/' + parent + '/' + i) in cg for i in ids)
    if ours_cmd or (uid >= base and ours_cg):
        print(p, uid, cmd[:100].strip())
PY
}

# Cgroup directories of the test's sandboxes still on the host.
sandbox_cgroups() {
  local id p
  p=$(cgroup_parent)
  for id in $(sandbox_ids); do
    ls -d /sys/fs/cgroup/*/"$p/$id" /sys/fs/cgroup/"$p/$id" 2>/dev/null || true
  done
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
# made $STATE started no sandbox: only common_teardown runs.
sandbox_teardown() {
  local rc=0
  [ -n "${T:-}" ] || return 0 # setup did not run common_setup
  if [ -d "$STATE" ]; then
    note_sandbox_ids
    run ax kill --all
    if [ "$status" -ne 0 ]; then
      echo "# teardown: agsx kill --all failed ($status): $output" >&3
      rc=1
    fi
    run ax gc
    if [ "$status" -ne 0 ]; then
      echo "# teardown: agsx gc failed ($status): $output" >&3
      rc=1
    fi
    assert_no_sandbox_leaks || rc=1
  fi
  common_teardown || rc=1
  return $rc
}

teardown() { sandbox_teardown; }

# Sandbox cgroups live in a parent directory of each cgroup hierarchy:
# `agsx`, shared by every agsx on the host, or $AGSX_CGROUP_PARENT.
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
  for d in /sys/fs/cgroup/*/"$p" /sys/fs/cgroup/"$p"; do
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
