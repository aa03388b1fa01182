#!/usr/bin/env bats
# test-runner: parallel
# agsx cp: files and trees both ways with modes, times and ownership, tar
# streams, Docker's destination rules, a 200 MB file, errors, and the
# symlink attacks of sandbox code (links to /, /etc, ../../.., swapped
# during the copy): no host file may change. Ownership inside the sandbox is
# checked from the host through /proc/<init pid>/root.

load helpers

bats_require_minimum_version 1.5.0

setup_file() { busybox_setup_file; }

# The sandbox plants its symlinks before anything else runs.
PLANT='ln -s / /tmp/rootlink; ln -s /etc /tmp/etclink; ln -s ../../../../../../tmp /tmp/up;
  mkdir /tmp/d; echo sandbox-secret >/tmp/secret'

setup() {
  busybox_setup 60
  CANARY=/tmp/agsx-canary-$$-$BATS_TEST_NUMBER
  echo canary >"$CANARY"
  HOST_SUMS=$(host_sums)
}

teardown() {
  local rc=0
  ax kill box >/dev/null 2>&1 || true
  if [ "$(host_sums)" != "$HOST_SUMS" ]; then
    echo "# a host file changed" >&3
    rc=1
  fi
  [ "$(cat "$CANARY")" = canary ] || rc=1
  [ ! -e "/tmp/agsx-evil-$$" ] || { echo "# /tmp/agsx-evil-$$ written on the host" >&3; rc=1; }
  rm -f "$CANARY" "/tmp/agsx-evil-$$"
  common_teardown || rc=1
  return $rc
}

host_sums() {
  sha256sum /etc/passwd /etc/hostname /etc/shadow "$CANARY" 2>/dev/null
  ls -la /etc /tmp/agsx-canary-$$-* 2>/dev/null | sha256sum
}

# start_box [RUN OPTIONS] [-- SHELL SCRIPT]: the sandbox "box", its init pid
# in $PID, its root in $R, its root's host uid in $BASE.
start_box() {
  local opts=() script="$PLANT"
  while [ $# -gt 0 ]; do
    if [ "$1" = -- ]; then script="$PLANT
$2"; break; fi
    opts+=("$1"); shift
  done
  ax run -d --name box --timeout 10m "${opts[@]}" busybox sh -c "$script
exec sleep 600" >/dev/null
  PID=$(ax ls --json | sed -n 's/.*"pid":\([0-9]*\).*/\1/p')
  R=/proc/$PID/root
  local i
  for i in $(seq 50); do [ -e "$R/tmp/secret" ] && break; sleep 0.1; done
  BASE=$(stat -c %u "$R/tmp/secret")
  [ "$BASE" -ge 65536 ]
}

@test "a file in and out: content, mode, times; owned by the sandbox's root inside" {
  start_box
  printf 'hello\n' >"$T/f"
  chmod 0754 "$T/f"
  touch -m -d '2020-01-02 03:04:05.123456789' "$T/f"
  touch -a -d '2021-05-06 07:08:09' "$T/f"
  run_ax cp "$T/f" box:/tmp/f
  assert_success
  [ "$(stat -c '%a %u %g %y %x' "$R/tmp/f")" = \
    "754 $BASE $BASE 2020-01-02 03:04:05.123456789 +0000 2021-05-06 07:08:09.000000000 +0000" ] ||
    { stat "$R/tmp/f" >&3; false; }
  [ "$(cat "$R/tmp/f")" = hello ]
  run_ax cp box:/tmp/f "$T/back"
  assert_success
  cmp "$T/f" "$T/back"
  [ "$(stat -c '%a %u %y' "$T/back")" = "754 0 2020-01-02 03:04:05.123456789 +0000" ]
  # into an existing directory: inside it, under its own name
  mkdir "$T/dir"
  run_ax cp box:/tmp/f "$T/dir"
  assert_success
  cmp "$T/f" "$T/dir/f"
  run_ax cp "$T/f" box:/root/
  assert_success
  [ "$(cat "$R/root/f")" = hello ]
}

@test "-a keeps uids and gids, mapped into and out of the sandbox's range" {
  start_box
  echo x >"$T/f"
  chown 1000:1001 "$T/f"
  run_ax cp -a "$T/f" box:/tmp/f
  assert_success
  [ "$(stat -c '%u %g' "$R/tmp/f")" = "$((BASE + 1000)) $((BASE + 1001))" ]
  run_ax cp --archive box:/tmp/f "$T/g"
  assert_success
  [ "$(stat -c '%u %g' "$T/g")" = "1000 1001" ]
  chown 70000 "$T/f"
  run_ax cp -a "$T/f" box:/tmp/f2
  assert_agsx_error "beyond the sandbox"
}

@test "a directory tree both ways: nested dirs, a symlink, an empty dir" {
  start_box
  mkdir -p "$T/src/a/b" "$T/src/empty"
  echo one >"$T/src/a/one"
  echo two >"$T/src/a/b/two"
  ln -s ../one "$T/src/a/b/link"
  chmod 0700 "$T/src/a/b"
  run_ax cp "$T/src" box:/tmp/
  assert_success
  [ "$(cat "$R/tmp/src/a/b/two")" = two ]
  [ "$(readlink "$R/tmp/src/a/b/link")" = ../one ]
  [ -d "$R/tmp/src/empty" ]
  [ "$(stat -c '%a %u' "$R/tmp/src/a/b")" = "700 $BASE" ]
  [ "$(stat -c %u "$R/tmp/src/a/b/link")" = "$BASE" ]
  # out again, into an existing directory, and the contents with SRC/.
  mkdir "$T/out"
  run_ax cp box:/tmp/src "$T/out"
  assert_success
  diff -r --no-dereference "$T/src" "$T/out/src"
  [ "$(readlink "$T/out/src/a/b/link")" = ../one ]
  [ -d "$T/out/src/empty" ]
  [ "$(stat -c %Y "$T/out/src/a/one")" = "$(stat -c %Y "$T/src/a/one")" ]
  run_ax cp box:/tmp/src/. "$T/contents"
  assert_success
  [ -f "$T/contents/a/one" ]
  [ -d "$T/contents/empty" ]
  # a directory onto a file is refused; a missing DST/ for a file too
  run_ax cp box:/tmp/src "$T/src/a/one"
  assert_agsx_error "non-directory"
  run_ax cp "$T/src/a/one" box:/tmp/nodir/
  assert_agsx_error "does not exist"
}

@test "tar streams: - as SRC extracts, - as DST writes a pax tar" {
  start_box
  mkdir -p "$T/src/sub"
  echo a >"$T/src/sub/a"
  ln -s sub/a "$T/src/l"
  ln "$T/src/sub/a" "$T/src/hard"
  tar -C "$T" -cf "$T/in.tar" src
  run ax cp - box:/tmp <"$T/in.tar"
  [ "$status" -eq 0 ] || { echo "$output" >&3; false; }
  [ "$(cat "$R/tmp/src/sub/a")" = a ]
  [ "$(readlink "$R/tmp/src/l")" = sub/a ]
  [ "$(stat -c '%h %u' "$R/tmp/src/hard")" = "2 $BASE" ]
  run --separate-stderr ax cp box:/tmp/src - 
  [ "$status" -eq 0 ]
  ax cp box:/tmp/src - >"$T/out.tar"
  run tar -tvf "$T/out.tar"
  [[ "$output" == *"src/sub/a"* ]] && [[ "$output" == *"src/l -> sub/a"* ]] || { echo "$output" >&3; false; }
  # DST of a stream must be a directory
  run ax cp - box:/tmp/secret <"$T/in.tar"
  [ "$status" -eq 125 ]
}

@test "hostile tar streams: absolute paths, .., a file through a symlink, foreign hard links" {
  start_box
  python3 - "$T" "$CANARY" <<'PY'
import io, sys, tarfile
t, canary = sys.argv[1], sys.argv[2]
def mk(name, *entries):
    with tarfile.open(f"{t}/{name}.tar", "w") as tf:
        for kind, path, arg in entries:
            ti = tarfile.TarInfo(path)
            if kind == "file":
                ti.size = len(arg); tf.addfile(ti, io.BytesIO(arg))
            elif kind == "sym":
                ti.type = tarfile.SYMTYPE; ti.linkname = arg; tf.addfile(ti)
            elif kind == "hard":
                ti.type = tarfile.LNKTYPE; ti.linkname = arg; tf.addfile(ti)
mk("abs", ("file", canary, b"evil"))
mk("dotdot", ("file", "../../../../../.." + canary, b"evil"))
mk("via-link", ("sym", "l", "/tmp/up"), ("file", "l/x", b"evil"))
mk("hard", ("hard", "h", "/etc/passwd"))
mk("hard2", ("hard", "h", "secret"))
PY
  for n in abs dotdot via-link hard hard2; do
    run ax cp - box:/tmp <"$T/$n.tar"
    [ "$status" -eq 125 ] || { echo "# $n: $status $output" >&3; false; }
  done
  # the symlink itself was made, pointing where the sandbox said, not followed
  [ "$(readlink "$R/tmp/l")" = /tmp/up ]
}

@test "a 200 MB file both ways, hash compared" {
  heavy
  start_box --disk 1g
  head -c 200M /dev/urandom >"$T/big"
  run_ax cp "$T/big" box:/tmp/big
  assert_success
  run_ax cp box:/tmp/big "$T/big.out"
  assert_success
  [ "$(sha256sum <"$T/big")" = "$(sha256sum <"$R/tmp/big")" ]
  [ "$(sha256sum <"$T/big")" = "$(sha256sum <"$T/big.out")" ]
}

@test "errors: unknown or stopped sandbox, both or neither side, missing source" {
  run_ax cp nosuch:/x "$T/y"
  assert_agsx_error "no such sandbox"
  run_ax cp "$T/a" "$T/b"
  assert_agsx_error "exactly one"
  run_ax cp a:/x b:/y
  assert_agsx_error "exactly one"
  run_ax cp x
  assert_agsx_error
  ax run -d --name dead busybox true >/dev/null
  # Ended (its record says so: 10 s at most, however loaded the host).
  local i
  for i in $(seq 50); do
    ax ls -a --json | grep -q '"name":"dead",[^}]*"status":"exited"' && break
    sleep 0.2
  done
  run_ax cp dead:/etc/passwd "$T/p"
  assert_agsx_error "not running"
  start_box
  run_ax cp box:/nonexistent "$T/x"
  assert_agsx_error "No such file"
  run_ax cp "$T/nonexistent" box:/tmp/
  assert_agsx_error "No such file"
}

@test "attack: reading through a link to / reads the sandbox's file" {
  start_box
  run_ax cp box:/tmp/rootlink/etc/hostname "$T/h"
  assert_success
  [ "$(cat "$T/h")" = "$(cat "$R/etc/hostname")" ]
  [ "$(cat "$T/h")" != "$(cat /etc/hostname)" ] || skip "host and sandbox share a hostname"
  run_ax cp box:/tmp/up/agsx-canary-$$-$BATS_TEST_NUMBER "$T/c"
  [ "$status" -eq 125 ]
  [ ! -e "$T/c" ]
  # a link as SRC is copied as a link; with -L it is followed inside the sandbox
  run_ax cp box:/tmp/etclink "$T/el"
  assert_success
  [ "$(readlink "$T/el")" = /etc ]
  run_ax cp -L box:/tmp/etclink "$T/etc"
  assert_success
  cmp "$T/etc/passwd" "$R/etc/passwd"
}

@test "attack: writing through links to /etc and ../../.. stays in the sandbox" {
  start_box
  echo evil >"$T/evil"
  run_ax cp "$T/evil" box:/tmp/etclink/passwd
  assert_success
  [ "$(cat "$R/etc/passwd")" = evil ]
  run_ax cp "$T/evil" "box:/tmp/up/agsx-canary-$$-$BATS_TEST_NUMBER"
  assert_success
  [ "$(cat "$R/tmp/agsx-canary-$$-$BATS_TEST_NUMBER")" = evil ]
  run_ax cp "$T/evil" "box:/tmp/rootlink/tmp/agsx-evil-$$"
  assert_success
  [ -f "$R/tmp/agsx-evil-$$" ]
  # a tree whose inner directory is a planted link: replaced, not followed
  mkdir -p "$T/tree/up"
  echo evil >"$T/tree/up/agsx-evil-$$"
  run_ax cp "$T/tree" box:/tmp/d/
  assert_success
  [ -f "$R/tmp/d/tree/up/agsx-evil-$$" ]
}

@test "attack: copying out a tree with links to / and /etc copies the links" {
  start_box -- 'mkdir /tmp/t; ln -s / /tmp/t/root; ln -s /etc/passwd /tmp/t/pw; mkfifo /tmp/t/fifo'
  run_ax cp box:/tmp/t "$T/"
  assert_success
  [ "$(readlink "$T/t/root")" = / ]
  [ "$(readlink "$T/t/pw")" = /etc/passwd ]
  [ ! -e "$T/t/fifo" ]
  # a second copy over the first replaces the links, never writes through them
  run_ax cp box:/tmp/t "$T/"
  assert_success
  [ "$(readlink "$T/t/pw")" = /etc/passwd ]
}

@test "attack: a directory swapped for a link to / during 50 copies in and out" {
  heavy
  start_box -- 'mkdir -p /tmp/d/x; echo in-sandbox >/tmp/d/x/f
    (while :; do mv /tmp/d /tmp/d.x; ln -s / /tmp/d; rm /tmp/d; mv /tmp/d.x /tmp/d; done) &'
  mkdir -p "$T/tree/etc" "$T/tree/tmp"
  echo evil >"$T/tree/etc/passwd"
  echo evil >"$T/tree/tmp/agsx-evil-$$"
  echo evil >"$T/tree/tmp/agsx-canary-$$-$BATS_TEST_NUMBER"
  local i ok=0
  for i in $(seq 50); do
    ax cp "$T/tree/." box:/tmp/d/ 2>/dev/null && ok=$((ok + 1)) || true
    ax cp "$T/tree/etc/passwd" box:/tmp/d/x/f 2>/dev/null || true
    ax cp box:/tmp/d "$T/out$i" 2>/dev/null || true
  done
  echo "# $ok of 50 copies in completed" >&3
  # what was copied out came from the sandbox: no host /etc/shadow, no
  # canary (find: an out$i may be a copy of the link to /, not to follow)
  [ -z "$(find "$T" -path "$T/out*" -name shadow)" ]
  [ -z "$(find "$T" -path "$T/out*" -type f -exec grep -l canary {} +)" ]
}

@test "a file growing during the copy out is copied at its size at open; holes stay holes" {
  start_box --disk 512m
  ax exec box sh -c 'dd if=/dev/urandom of=/tmp/grow bs=1M count=64 2>/dev/null
    truncate -s 1099511627776 /tmp/sparse && echo tail >>/tmp/sparse
    dd if=/dev/urandom of=/tmp/sparse bs=4k count=1 conv=notrunc 2>/dev/null'
  # As soon as the copy has begun, the file grows by 1 GiB (sparse: it costs
  # the sandbox nothing), in four steps.
  python3 - "$R/tmp/grow" "$T/out" "$T/ready" <<'PY' &
import os, sys, time
src, dst, ready = sys.argv[1:]
open(ready, "w").close()
end = time.time() + 60
while time.time() < end:
    try:
        if os.stat(dst).st_size > 0:
            break
    except FileNotFoundError:
        pass
size = os.stat(src).st_size
for i in range(4):
    os.truncate(src, size + (i + 1) * (256 << 20))
    time.sleep(0.02)
PY
  local grower=$!
  for _ in $(seq 100); do [ -e "$T/ready" ] && break; sleep 0.05; done
  run_ax cp box:/tmp/grow "$T/out"
  wait "$grower"
  assert_success
  [ "$(stat -c %s "$T/out")" -eq $((64 << 20)) ] || { ls -ls "$T/out" >&3; false; }
  cmp -n $((64 << 20)) "$R/tmp/grow" "$T/out"
  [ "$(du -k "$T/out" | cut -f1)" -lt $((66 << 10)) ]
  # a sparse 1 TiB file comes out 1 TiB large in a few blocks, both ways
  run_ax cp box:/tmp/sparse "$T/sparse"
  assert_success
  [ "$(stat -c %s "$T/sparse")" -eq $(((1 << 40) + 5)) ]
  [ "$(du -k "$T/sparse" | cut -f1)" -lt 1024 ] || { du -k "$T/sparse" >&3; false; }
  cmp <(head -c 4096 "$R/tmp/sparse") <(head -c 4096 "$T/sparse")
  [ "$(tail -c 5 "$T/sparse")" = tail ]
  run_ax cp "$T/sparse" box:/tmp/sparse2
  assert_success
  [ "$(stat -c %s "$R/tmp/sparse2")" -eq $(((1 << 40) + 5)) ]
  [ "$(du -k "$R/tmp/sparse2" | cut -f1)" -lt 1024 ]
  # zeros written as data in the sandbox do not take the host's disk either
  ax exec box sh -c 'dd if=/dev/zero of=/tmp/zeros bs=1M count=32 2>/dev/null; echo end >>/tmp/zeros'
  run_ax cp box:/tmp/zeros "$T/zeros"
  assert_success
  cmp "$R/tmp/zeros" "$T/zeros"
  [ "$(du -k "$T/zeros" | cut -f1)" -lt 64 ] || { du -k "$T/zeros" >&3; false; }
  # and as tar streams: sparse entries, small, holes again on extraction
  ax exec box sh -c 'truncate -s 1073741824 /tmp/hole'
  ax cp box:/tmp/sparse - >"$T/s.tar"
  ax cp box:/tmp/hole - >"$T/h.tar"
  [ "$(stat -c %s "$T/s.tar")" -lt $((1 << 20)) ] || { ls -l "$T/s.tar" >&3; false; }
  [ "$(stat -c %s "$T/h.tar")" -lt $((1 << 20)) ] || { ls -l "$T/h.tar" >&3; false; }
  mkdir "$T/x" && tar -C "$T/x" -xf "$T/s.tar" && tar -C "$T/x" -xf "$T/h.tar"
  [ "$(stat -c %s "$T/x/sparse")" -eq $(((1 << 40) + 5)) ]
  [ "$(du -k "$T/x/sparse" | cut -f1)" -lt 1024 ]
  cmp "$T/sparse" "$T/x/sparse" -n $((1 << 20))
  [ "$(tail -c 5 "$T/x/sparse")" = tail ]
  [ "$(stat -c %s "$T/x/hole")" -eq $((1 << 30)) ]
  [ "$(du -k "$T/x/hole" | cut -f1)" -lt 64 ]
  ax exec box mkdir /tmp/in
  tar -C "$T/x" --sparse -cf - sparse | ax cp - box:/tmp/in
  [ "$(stat -c %s "$R/tmp/in/sparse")" -eq $(((1 << 40) + 5)) ]
  [ "$(du -k "$R/tmp/in/sparse" | cut -f1)" -lt 1024 ]
  [ "$(tail -c 5 "$R/tmp/in/sparse")" = tail ]
}

# cp_tar_out SRC: `agsx cp SRC -` into $T/out.tar, stderr into $T/err, the
# exit status into $rc.
cp_tar_out() {
  rc=0
  ax cp "$1" - >"$T/out.tar" 2>"$T/err" || rc=$?
}

@test "one copy is bounded in bytes and entries, both ways and as a tar; nothing partial stays" {
  start_box -- 'mkdir -p /tmp/t/sub
    for i in 1 2 3 4; do dd if=/dev/urandom of=/tmp/t/sub/f$i bs=512k count=1 2>/dev/null; done
    for i in 1 2 3 4 5 6 7 8 9 10; do echo $i >/tmp/t/e$i; done'
  for _ in $(seq 50); do [ -e "$R/tmp/t/e10" ] && break; sleep 0.1; done
  export AGSX_CP_MAX_SIZE=1m
  run_ax cp box:/tmp/t "$T/t"
  assert_agsx_error "more than its limit of 1048576 bytes (AGSX_CP_MAX_SIZE)"
  [ ! -e "$T/t" ] || { find "$T/t" >&3; false; }
  # into an existing directory: what was there stays, nothing new does
  mkdir "$T/ex" && echo keep >"$T/ex/keep"
  run_ax cp box:/tmp/t/. "$T/ex"
  assert_agsx_error "AGSX_CP_MAX_SIZE"
  [ "$(ls -A "$T/ex")" = keep ]
  [ "$(cat "$T/ex/keep")" = keep ]
  # a tar stream stops before the file that would pass the limit
  cp_tar_out box:/tmp/t
  [ "$rc" -eq 125 ]
  [ "$(wc -l <"$T/err")" -eq 1 ]
  grep -q '^agsx: .*AGSX_CP_MAX_SIZE' "$T/err"
  [ "$(stat -c %s "$T/out.tar")" -lt $(((1 << 20) + (64 << 10))) ]
  # copying in is bounded the same way
  mkdir -p "$T/in" && head -c 3M /dev/urandom >"$T/in/big"
  for i in $(seq 10); do echo "$i" >"$T/in/s$i"; done
  run_ax cp "$T/in" box:/tmp/in
  assert_agsx_error "AGSX_CP_MAX_SIZE"
  [ ! -e "$R/tmp/in" ]
  unset AGSX_CP_MAX_SIZE
  export AGSX_CP_MAX_ENTRIES=5
  run_ax cp box:/tmp/t "$T/t"
  assert_agsx_error "more than its limit of 5 entries (AGSX_CP_MAX_ENTRIES)"
  [ ! -e "$T/t" ]
  cp_tar_out box:/tmp/t
  [ "$rc" -eq 125 ]
  grep -q '^agsx: .*AGSX_CP_MAX_ENTRIES' "$T/err"
  rc=0
  tar -C "$T/in" -cf - . | ax cp - box:/tmp 2>"$T/err" || rc=$?
  [ "$rc" -eq 125 ]
  grep -q AGSX_CP_MAX_ENTRIES "$T/err"
  unset AGSX_CP_MAX_ENTRIES
  # within the limits, the same copies work
  run_ax cp box:/tmp/t "$T/t"
  assert_success
  [ "$(ls "$T/t/sub" | wc -l)" -eq 4 ]
}
