# Shared helpers for the agsx-oci suites (test/oci/*.bats).
#
# Every test runs against $RUNTIME: agsx-oci by default, or RUNTIME=crun
# (Debian's crun 1.8.1, the oracle: a test that crun fails tests the test,
# not agsx; `test/oci/run-oracle` runs the suites both ways). Tests of what
# only agsx does (refusals, the strict policy) call `agsx_only`.
#
# Each test gets $T: a state root ($ROOT) and bundles built from
# busybox-static and agsx's probe (make_bundle NAME → $T/NAME, config.json
# from `crun spec`, edited with jq by `cfg`). Containers get cgroupsPath
# /agsx-oci-test-$$/<id>. The teardown deletes every container left
# (delete --force) and checks that nothing is left: no state directory, no
# cgroup, no process naming $T, no mount under $T.

# What the host offers (cgroup hierarchies, block devices).
source "$BATS_TEST_DIRNAME/../bats/host.bash"

AGSX=${AGSX:-$BATS_TEST_DIRNAME/../../build/agsx}
AGSX_OCI=${AGSX_OCI:-$(dirname "$AGSX")/agsx-oci}
PROBE=${PROBE:-$(dirname "$AGSX")/test/fixtures/probe}
RUNTIME=${RUNTIME:-$AGSX_OCI}
CGP=agsx-oci-test-$$

is_agsx() { [[ $(basename "$RUNTIME") == agsx-oci ]]; }
agsx_only() { is_agsx || skip "agsx-oci only (the oracle has no such policy)"; }

oci_setup() {
  T=$(mktemp -d /tmp/agsx-oci-bats.XXXXXX)
  chmod 0755 "$T" # a mapped root (--uidmap) must reach the bundle
  ROOT=$T/root
}

# rt ARGS: the runtime on the test's root, under timeout.
rt() { timeout --kill-after=5 "${RT_TIMEOUT:-30}" "$RUNTIME" --root "$ROOT" "$@"; }

# create with its stdio on files: the container's init keeps create's
# stdio (pass-through), so a `run` or $(...) around it would wait for the
# container to end. The output lands in $T/create.out and .err.
rtc() {
  RT_CMD="$(basename "$RUNTIME") create $*"
  rt create "$@" </dev/null >>"$T/create.out" 2>>"$T/create.err"
}

run_rt() {
  RT_CMD="$(basename "$RUNTIME") $*"
  run rt "$@"
}

show_run() {
  {
    echo "# command: ${RT_CMD:-?}"
    echo "# status: $status"
    printf '# output:\n'
    printf '%s\n' "$output" | sed 's/^/#   /'
  } >&3
}

assert_success() { if [ "$status" -ne 0 ]; then show_run; return 1; fi; }
assert_failure() { if [ "$status" -eq 0 ]; then show_run; return 1; fi; }
assert_output_contains() {
  if [[ "$output" != *"$1"* ]]; then
    show_run
    echo "# expected output to contain: $1" >&3
    return 1
  fi
}

# The rootfs every bundle shares (read-only use): busybox, its applets,
# /etc/passwd and group, the probe.
base_rootfs() {
  local r=$BATS_FILE_TMPDIR/rootfs
  if [ ! -x "$r/bin/busybox" ]; then
    mkdir -p "$r"/{bin,etc,tmp,proc,sys,dev,root,usr/local/bin,home/agent}
    cp /bin/busybox "$r/bin/busybox"
    local a
    for a in $(/bin/busybox --list); do
      [ "$a" = busybox ] || ln -sf busybox "$r/bin/$a"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000::/home/agent:/bin/sh\nnobody:x:65534:65534::/:/bin/sh\n' >"$r/etc/passwd"
    printf 'root:x:0:\nagent:x:1000:\nnogroup:x:65534:\n' >"$r/etc/group"
    cp "$PROBE" "$r/usr/local/bin/probe"
    chmod 1777 "$r/tmp"
  fi
  echo "$r"
}

# make_bundle NAME [CMD...]: $T/NAME with a copy of the rootfs (a test may
# write to it) and crun's default config.json, no terminal, the command.
make_bundle() {
  local b=$T/$1
  shift
  mkdir -p "$b"
  cp -a "$(base_rootfs)" "$b/rootfs"
  (cd "$b" && crun spec)
  local args
  args=$(printf '%s\n' "${@:-true}" | jq -R . | jq -s .)
  jq --argjson a "$args" --arg cg "/$CGP/$(basename "$b")" \
    '.root.readonly=false | .process.terminal=false | .process.args=$a | .linux.cgroupsPath=$cg' \
    "$b/config.json" >"$b/c" && mv "$b/c" "$b/config.json"
  echo "$b"
}

# cfg BUNDLE JQ-FILTER [jq args]: edits BUNDLE/config.json.
cfg() {
  local b=$1 f=$2
  shift 2
  jq "$@" "$f" "$b/config.json" >"$b/c" && mv "$b/c" "$b/config.json"
}

state_field() { rt state "$1" | jq -r ".$2"; }

# wait_status ID STATUS: up to 5 s.
wait_status() {
  local i
  for i in $(seq 50); do
    [ "$(state_field "$1" status 2>/dev/null)" = "$2" ] && return 0
    sleep 0.1
  done
  echo "# $1: status $(state_field "$1" status 2>&1), wanted $2" >&3
  return 1
}

oci_teardown() {
  [ -n "${T:-}" ] || return 0
  local leaks="" id i
  if [ -d "$ROOT" ]; then
    for id in $(ls "$ROOT" 2>/dev/null); do
      [ -d "$ROOT/$id" ] || continue
      rt delete --force "$id" >/dev/null 2>&1 || true
    done
    local left
    left=$(ls "$ROOT" 2>/dev/null | grep -v '^\.' || true)
    [ -z "$left" ] || leaks+="state: $left; "
  fi
  for i in $(seq 30); do
    pgrep -f "$T" >/dev/null || break
    sleep 0.1
  done
  if pgrep -f "$T" >/dev/null; then
    leaks+="processes: $(pgrep -af "$T" | head -3 | tr '\n' ';'); "
    kill -9 $(pgrep -f "$T") 2>/dev/null || true
  fi
  local d c
  for d in $(cgroup_mounts | sed "s|\$|/$CGP|"); do
    [ -d "$d" ] || continue
    for c in "$d"/*/; do
      [ -d "$c" ] || continue
      leaks+="cgroup $c; "
      rmdir "$c" 2>/dev/null || true
    done
    rmdir "$d" 2>/dev/null || true
  done
  if grep -qF " $T" /proc/self/mountinfo; then
    leaks+="mounts under $T; "
  fi
  rm -rf "$T"
  if [ -n "$leaks" ]; then
    echo "# leaked: $leaks" >&3
    return 1
  fi
}

# A file whose engine is missing sets FILE_SKIP in setup_file and returns:
# each test then skips with that reason (Debian's bats 1.8 fails a file
# whose setup_file skips), and its teardowns do nothing.
setup() {
  [ -z "${FILE_SKIP:-}" ] || skip "$FILE_SKIP"
  oci_setup
}
teardown() { oci_teardown; }

# run_ctr BUNDLE: create + start + wait for the end; $output is what the
# program printed (stdout and stderr), $status create's or start's.
run_ctr() {
  local id=r$RANDOM
  : >"$T/create.out"
  : >"$T/create.err"
  rtc --bundle "$1" "$id" || { status=$?; output=$(cat "$T/create.err"); return 0; }
  run_rt start "$id"
  [ "$status" -eq 0 ] || return 0
  wait_status "$id" stopped || true
  rt delete --force "$id" || true
  output=$(cat "$T/create.out" "$T/create.err")
  status=0
}

# A private containerd per file (oci-containerd.bats, oci-cri.bats): its own
# root, state and socket under $CT, started and stopped by the file.
#
# ctd_config: the daemon's own part of a config.toml (version 2); the file
# appends its plugin sections.
ctd_config() {
  cat <<EOF2
version = 2
root = "$CT/root"
state = "$CT/state"
[grpc]
  address = "$CT/containerd.sock"
[ttrpc]
  address = "$CT/containerd.sock.ttrpc"
EOF2
}

# ctd_start [PREFIX...]: containerd on $CT/config.toml, run through PREFIX
# (which must exec it: its pid is containerd's), until its socket is there.
ctd_start() {
  # No fd of bats' may live on in the daemon or its shims (bats waits for them).
  "$@" containerd --config "$CT/config.toml" </dev/null >"$CT/log" 2>&1 3>&- &
  echo $! >"$CT/pid"
  local i
  for i in $(seq 50); do [ -S "$CT/containerd.sock" ] && return 0; sleep 0.1; done
  echo "# containerd did not start: $(tail -3 "$CT/log")" >&3
  return 1
}

# ctd_image NS REF [BUSYBOX-IMAGE-OPTIONS...]: test/fixtures/busybox-image
# as REF in the daemon's namespace NS, unpacked.
ctd_image() {
  local ns=$1 ref=$2 d
  shift 2
  d=$(mktemp -d "$CT/img.XXXXXX")
  "$BATS_TEST_DIRNAME/../fixtures/busybox-image" "$d/layout" --probe "$PROBE" "$@" >/dev/null
  skopeo copy -q oci:"$d/layout":busybox:latest docker-archive:"$d/img.tar":"$ref"
  timeout --kill-after=5 120 ctr -a "$CT/containerd.sock" -n "$ns" images import "$d/img.tar" >/dev/null 3>&-
  rm -rf "$d"
}

# ctd_stop: ends the daemon (its shims end with their containers) and
# unmounts what it left under $CT.
ctd_stop() {
  [ -n "${CT:-}" ] && [ -f "$CT/pid" ] || return 0
  local pid i
  pid=$(cat "$CT/pid")
  kill "$pid" 2>/dev/null || true
  for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  grep -F "$CT" /proc/self/mountinfo | awk '{print $5}' | sort -r | while read -r m; do umount -l "$m"; done
}
