#!/usr/bin/env bats
# test-runner: parallel
# Paths the sandbox controls must not lead out of it (the runc
# CVE-2024-21626 class). Sandbox code replaces a directory agsx will enter
# (the recorded working directory, an `exec -w` path, a PATH entry, a
# volume's subdirectory for `run -w`) with a link to /proc/self/fd/N (any
# fd a freshly started exec child might hold: the state directory, the
# store, cgroup directories…), /proc/self/cwd, /proc/self/root,
# /proc/1/root or /proc/1/cwd. The next command must then fail cleanly or
# stay inside: nothing of the host may be listed, run or written.

load helpers

bats_require_minimum_version 1.5.0

# Every link a test plants: the fds a new exec child can hold, then the
# /proc links that name a directory.
LINKS=()
for n in $(seq 0 24); do LINKS+=("/proc/self/fd/$n"); done
LINKS+=(/proc/self/cwd /proc/self/root /proc/1/root /proc/1/cwd /proc/thread-self/cwd)

setup_file() { busybox_setup_file; }

setup() {
  rm -f /tmp/escaped-w /tmp/escaped-ww
  common_setup
  AX_TIMEOUT=30
  ax image load "$BB" >/dev/null
  # Host bait: a marker file and an executable in every host directory an
  # agsx process works in. Seen or run from inside means escaped.
  # $T is world-writable and the bait world-readable, so that an escape
  # into a host directory shows (sandbox uids are unprivileged on the host).
  mkdir -p "$STATE" "$ROOT"
  chmod 1777 "$T"
  for d in "$T" "$STATE" "$ROOT"; do
    echo HOSTSECRET >"$d/host-marker"
    printf '#!/bin/sh\necho ESCAPED-EXEC\n' >"$d/pwn"
    chmod 755 "$d/pwn"
  done
}

teardown() {
  # What an escape wrote into the host's /tmp (../../ of the state dir).
  rm -f /tmp/escaped-w /tmp/escaped-ww
  ax kill --all >/dev/null 2>&1 || true
  for _ in $(seq 50); do
    [ -z "$(ax ls -q 2>/dev/null)" ] && break
    sleep 0.1
  done
  common_teardown
}

# Fails when anything was written outside the sandbox, or when OUTPUT shows
# host content.
assert_contained() {
  local f
  f=$(find "$T" /tmp -maxdepth 4 -name 'escaped-*' 2>/dev/null | head -n 3)
  if [ -n "$f" ]; then
    echo "# written outside the sandbox: $f" >&3
    show_run
    return 1
  fi
  # A command that ran must have had a cwd inside: getcwd() fails (pwd prints
  # nothing) for a directory outside the sandbox's root.
  if [ "$status" -eq 0 ] && [[ "${lines[0]:-}" != /* ]]; then
    echo "# the command ran in a directory outside the sandbox" >&3
    show_run
    return 1
  fi
  local id=${SBID:-no-sandbox-id}
  case "$output" in
    *HOSTSECRET* | *host-marker* | *ESCAPED-EXEC* | *"$id"*)
      echo "# host content seen from inside" >&3
      show_run
      return 1
      ;;
  esac
}

# The command run in a planted directory: lists the parents, reads bait,
# writes a file next to them.
PROBE_CMD='pwd; ls -a .. ../.. 2>/dev/null; cat ../host-marker ../../host-marker 2>/dev/null; echo x > ../escaped-w; echo x > ../../escaped-ww; ls /proc/self/fd'

start_box() {
  run_ax run -d --name box -w /tmp/w busybox sleep 300
  assert_success
  SBID=$output
}

@test "escape: the recorded working directory replaced by a /proc link" {
  start_box
  for l in "${LINKS[@]}"; do
    run_ax exec -w / box sh -c "rm -rf /tmp/w; ln -s $l /tmp/w"
    assert_success
    run_ax exec box sh -c "$PROBE_CMD"
    assert_contained || { echo "# link $l" >&3; return 1; }
    # Refused as an agsx error, never run elsewhere.
    assert_agsx_error "working directory" || { echo "# link $l" >&3; return 1; }
  done
}

@test "escape: an exec -w path that is, or passes through, a /proc link" {
  start_box
  for l in "${LINKS[@]}"; do
    run_ax exec -w / box sh -c "rm -rf /tmp/x; ln -s $l /tmp/x"
    assert_success
    for w in /tmp/x /tmp/x/.. /tmp/x/sub; do
      run_ax exec -w "$w" box sh -c "$PROBE_CMD"
      assert_contained || { echo "# link $l, -w $w" >&3; return 1; }
      assert_agsx_error || { echo "# link $l, -w $w" >&3; return 1; }
    done
  done
}

@test "escape: a PATH entry that is a /proc link is skipped" {
  start_box
  for l in "${LINKS[@]}"; do
    run_ax exec -w / box sh -c "rm -rf /evil; ln -s $l /evil"
    assert_success
    run_ax exec -w / -e PATH=/evil:/evil/..:/bin box pwn
    assert_contained || { echo "# link $l" >&3; return 1; }
    # Not found; or, for the init's non-dumpable /proc/1/root, not allowed.
    [ "$status" -eq 127 ] || [ "$status" -eq 126 ] || { show_run; return 1; }
    # A command behind the link named with a slash is refused too.
    run_ax exec -w / box /evil/pwn
    assert_contained || { echo "# link $l" >&3; return 1; }
    [ "$status" -eq 126 ] || [ "$status" -eq 127 ] || { show_run; return 1; }
  done
  # An ordinary PATH still works, symlinked directories included.
  run_ax exec -w / box sh -c 'mkdir -p /opt/real && ln -sfn /opt/real /opt/bin &&
    printf "#!/bin/sh\necho tool-ran\n" > /opt/real/tool && chmod 755 /opt/real/tool'
  assert_success
  run_ax exec -w / -e PATH=/nonexistent:/opt/bin:/bin box tool
  assert_success
  [ "$output" = tool-ran ] || { show_run; return 1; }
}

@test "escape: /etc/passwd replaced by a /proc link or a FIFO resolves nothing of the host" {
  start_box
  run_ax exec -w / box sh -c 'grep -q "^root:" /etc/passwd'
  assert_success
  for l in /proc/self/fd/3 /proc/self/fd/4 /proc/1/root/etc/passwd /proc/self/root/etc/passwd; do
    run_ax exec -w / box sh -c "cp /etc/passwd /etc/passwd.real 2>/dev/null; rm -f /etc/passwd; ln -s $l /etc/passwd"
    assert_success
    # A name needs the database: not found, cleanly (no host entries).
    run_ax exec -w / -u nobody box id
    assert_agsx_error || { echo "# link $l" >&3; return 1; }
    run_ax exec -w / box sh -c 'rm -f /etc/passwd; cp /etc/passwd.real /etc/passwd'
    assert_success
  done
  run_ax exec -w / box sh -c 'rm -f /etc/passwd; mkfifo /etc/passwd'
  assert_success
  # A FIFO is not a database: no hang (the run is under a timeout); the
  # command itself reads nothing of it.
  AX_TIMEOUT=10 run_ax exec -w / -u 0:0 box echo ran
  assert_success
  [ "$output" = ran ] || { show_run; return 1; }
  AX_TIMEOUT=10 run_ax exec -w / -u nobody box echo ran
  assert_agsx_error
}

@test "escape: a missing working directory is created inside, also below a symlink" {
  start_box
  run_ax exec -w / box sh -c 'mkdir -p /srv/real && ln -s /srv/real /srv/lnk && ln -s ../../.. /srv/up'
  assert_success
  run_ax exec -w /new/deep/dir box pwd
  assert_success
  [ "$output" = /new/deep/dir ] || { show_run; return 1; }
  run_ax exec -w /srv/lnk/made box pwd
  assert_success
  [ "$output" = /srv/real/made ] || { show_run; return 1; }
  # ../ and absolute links are scoped to the sandbox root.
  run_ax exec -w /srv/up/tmp box pwd
  assert_success
  [ "$output" = /tmp ] || { show_run; return 1; }
}

@test "escape: run -w through a volume's link to /proc stays inside" {
  mkdir -p "$T/vol"
  for l in /proc/self/fd/3 /proc/self/fd/4 /proc/self/fd/5 /proc/self/cwd /proc/1/root; do
    rm -f "$T/vol/w"
    ln -s "$l" "$T/vol/w"
    run_ax run --rm -v "$T/vol:/vol" -w /vol/w busybox sh -c "$PROBE_CMD"
    assert_contained || { echo "# link $l" >&3; return 1; }
    assert_agsx_error "working directory" || { echo "# link $l" >&3; return 1; }
  done
}

@test "escape: the exec child holds no fd but stdio when the command starts" {
  start_box
  # The command's own fds: 0, 1, 2 and the one ls opens for the listing.
  run_ax exec -w / box sh -c 'ls /proc/self/fd | tr "\n" " "'
  assert_success
  [ "$output" = "0 1 2 3 " ] || { show_run; return 1; }
  # And before exec: a command that cannot be run reports cleanly.
  run_ax exec -w / box /nonexistent
  assert_status 127
}
