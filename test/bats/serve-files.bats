#!/usr/bin/env bats
# test-runner: parallel
# envd's filesystem half (api/fsops.h) on running sandboxes: through the
# test driver test/fixtures/fsops-drive (the library, no HTTP), and through
# the unmodified npm `e2b` SDK's `files` calls against `agsx serve`
# (test/serve/files.mjs; those tests skip while the server or the SDK is
# missing). Symlinks planted by sandbox code (to /, /etc, ../../..) must
# resolve inside the sandbox: no host file may be read or change.

load helpers

bats_require_minimum_version 1.5.0

setup_file() {
  export BB="$BATS_FILE_TMPDIR/bb"
  "$FIXTURES/busybox-image" "$BB" --probe "$PROBE" >/dev/null
}

DRIVE=${AGSX_BUILDDIR:-$(dirname "$AGSX")}/test/fixtures/fsops-drive

PLANT='ln -s / /tmp/rootlink; ln -s /etc /tmp/etclink; ln -s ../../../../../../tmp /tmp/up;
  ln -s /etc/passwd /tmp/pwlink; mkdir -p /tmp/w; echo sandbox-secret >/tmp/secret'

setup() {
  common_setup
  AX_TIMEOUT=60
  ax image load "$BB" >/dev/null
  CANARY=/tmp/agsx-fs-canary-$$-$BATS_TEST_NUMBER
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
  [ ! -e "/tmp/agsx-fs-evil-$$" ] || { echo "# /tmp/agsx-fs-evil-$$ written on the host" >&3; rc=1; }
  rm -f "$CANARY" "/tmp/agsx-fs-evil-$$"
  common_teardown || rc=1
  return $rc
}

host_sums() {
  sha256sum /etc/passwd /etc/group /etc/hostname /etc/shadow "$CANARY" 2>/dev/null
  ls -la /etc /tmp/agsx-fs-canary-$$-* 2>/dev/null | sha256sum
}

# start_box [RUN OPTIONS]: the sandbox "box" (busybox, its links planted),
# its root from the host in $R, its root's host uid in $BASE.
start_box() {
  ax run -d --name box --timeout 10m "$@" busybox sh -c "$PLANT
exec sleep 600" >/dev/null
  local pid i
  pid=$(ax ls --json | sed -n 's/.*"pid":\([0-9]*\).*/\1/p')
  R=/proc/$pid/root
  for i in $(seq 50); do [ -e "$R/tmp/secret" ] && break; sleep 0.1; done
  BASE=$(stat -c %u "$R/tmp/secret")
  [ "$BASE" -ge 65536 ]
}

# fs USER OP ARGS...: one operation through the library, as bats' run.
fs() {
  local user=$1
  shift
  AX_CMD="fsops-drive $user $*"
  run timeout 60 "$DRIVE" "$STATE" box "$user" "$@"
}

field() { # field KEY: KEY's value from the JSON object in $output
  python3 -c 'import json,sys; v=json.loads(sys.argv[1]); print(v[sys.argv[2]])' "$output" "$1"
}

@test "fsops: write, read, stat, list, mkdir, move, remove; what is created is the user's" {
  start_box
  fs agent write '~/dir/a.txt' <<<"hello"
  assert_success
  [ "$(field path)" = /home/agent/dir/a.txt ]
  [ "$(field owner)" = agent ] && [ "$(field group)" = agent ] && [ "$(field size)" = 6 ]
  [ "$(field permissions)" = -rw-r--r-- ] && [ "$(field mode)" = 420 ]
  # the sandbox sees its user's files, the host the user's mapped ids
  run_ax exec box stat -c '%u:%g %a' /home/agent/dir /home/agent/dir/a.txt
  assert_success
  [ "$output" = "1000:1000 755
1000:1000 644" ]
  [ "$(stat -c %u "$R/home/agent/dir/a.txt")" = $((BASE + 1000)) ]
  fs agent read dir/a.txt
  assert_success
  [ "$output" = hello ]
  fs - stat /home/agent/dir/a.txt
  assert_success
  [ "$(field name)" = a.txt ] && [ "$(field type)" = FILE_TYPE_FILE ]
  fs agent mkdir '~/dir/b/c'
  assert_success
  [ "$(field type)" = FILE_TYPE_DIRECTORY ]
  fs agent mkdir '~/dir/b/c'
  [ "$status" = 1 ] && [[ $output == "already_exists: directory already exists: /home/agent/dir/b/c" ]]
  fs agent mkdir '~/dir/a.txt'
  [ "$status" = 1 ] && [[ $output == invalid_argument:* ]]
  fs agent list '~/dir' 2
  assert_success
  [ "$(python3 -c 'import json,sys; print(" ".join(e["path"] for e in json.loads(sys.argv[1])))' "$output")" = \
    "/home/agent/dir/a.txt /home/agent/dir/b /home/agent/dir/b/c" ]
  fs agent mv '~/dir/a.txt' '~/moved/x.txt'
  assert_success
  [ "$(field path)" = /home/agent/moved/x.txt ]
  run_ax exec box cat /home/agent/moved/x.txt
  [ "$output" = hello ]
  fs agent mv '~/nothing' '~/y'
  [ "$status" = 1 ] && [[ $output == "not_found: source file not found"* ]]
  fs agent rm '~/dir'
  assert_success
  run_ax exec box test -e /home/agent/dir
  [ "$status" = 1 ]
  fs agent rm '~/dir'
  assert_success
  fs agent stat '~/dir'
  [ "$status" = 1 ] && [[ $output == not_found:* ]]
  fs nosuchuser stat /
  [ "$status" = 1 ] && [[ $output == unauthenticated:* ]]
}

@test "fsops: links to /, /etc and ../../.. planted by sandbox code resolve inside the sandbox" {
  start_box
  fs - read /tmp/rootlink/etc/passwd
  assert_success
  [[ $output == *agent:x:1000* ]] # the sandbox's own, not the host's
  fs - read /tmp/etclink/shadow
  [ "$status" = 1 ] && [[ $output == "not_found: path '/tmp/etclink/shadow' does not exist" ]]
  fs - read /tmp/up/agsx-fs-canary-$$-$BATS_TEST_NUMBER
  [ "$status" = 1 ] && [[ $output == not_found:* ]]
  fs - write "/tmp/up/agsx-fs-evil-$$" <<<"evil"
  assert_success
  [ -e "$R/tmp/agsx-fs-evil-$$" ] && [ ! -e "/tmp/agsx-fs-evil-$$" ]
  fs - write /tmp/rootlink/etc/group <<<"evil:x:0:"
  assert_success
  [ "$(cat "$R/etc/group")" = "evil:x:0:" ]
  fs - write /tmp/pwlink <<<"root:x:0:0::/:/bin/sh"
  assert_success
  [ "$(cat "$R/etc/passwd")" = "root:x:0:0::/:/bin/sh" ]
  fs - list /tmp/rootlink 1
  assert_success
  [[ $output != *'"/tmp/rootlink/boot"'* ]] # the host's / has /boot, the image has none
  fs - stat /tmp/up
  assert_success
  [ "$(field symlinkTarget)" = /tmp ]
  fs - rm /tmp/rootlink
  assert_success
  [ -e "$R/etc" ] && [ -e /etc/hostname ]
  fs - mkdir /tmp/etclink/made-in-sandbox
  assert_success
  [ -d "$R/etc/made-in-sandbox" ] && [ ! -e /etc/made-in-sandbox ]
  fs - read /proc/self/root/etc/hostname
  [ "$status" = 1 ]
  fs - read /proc/kallsyms
  [ "$status" = 1 ] && [[ $output == permission_denied:*"kernel filesystem"* ]]
}

@test "fsops: a 50 MiB upload is streamed, read back the same, in little memory" {
  start_box
  head -c $((50 << 20)) /dev/urandom >"$T/big"
  want=$(sha256sum <"$T/big" | cut -d' ' -f1)
  run /usr/bin/time -f 'maxrss %M' timeout 120 "$DRIVE" "$STATE" box - write /tmp/big <"$T/big"
  assert_success
  rss=$(sed -n 's/^maxrss //p' <<<"$output")
  echo "# upload: max RSS ${rss} KiB" >&3
  [ "$rss" -lt $((16 * 1024)) ]
  [ "$(sha256sum <"$R/tmp/big" | cut -d' ' -f1)" = "$want" ]
  [ "$(ls -a "$R/tmp" | grep -c agsx-upload)" = 0 ]
  timeout 120 "$DRIVE" "$STATE" box - read /tmp/big >"$T/back"
  [ "$(sha256sum <"$T/back" | cut -d' ' -f1)" = "$want" ]
}

@test "fsops: no space left is resource_exhausted and leaves no half file" {
  start_box --disk 2m
  run_ax exec box sh -c 'echo old >/root/f'
  fs - write /root/f < <(head -c $((8 << 20)) /dev/zero)
  [ "$status" = 1 ] && [[ $output == "resource_exhausted: not enough disk space"* ]]
  run_ax exec box cat /root/f
  [ "$output" = old ]
  run_ax exec box ls -a /root
  [[ $output != *agsx-upload* ]]
}

@test "fsops: a multipart body of several files; the same path twice is refused" {
  start_box
  printf -- '--XX\r\nContent-Disposition: form-data; name="file"; filename="/tmp/m/one.txt"\r\n\r\n1\r\n--XX\r\nContent-Disposition: form-data; name="file"; filename="rel/two.txt"\r\nContent-Type: application/octet-stream\r\n\r\n2\r\n--XX--\r\n' >"$T/body"
  fs agent post 'multipart/form-data; boundary=XX' <"$T/body"
  assert_success
  [ "$output" = '[{"name":"one.txt","type":"FILE_TYPE_FILE","path":"/tmp/m/one.txt"},{"name":"two.txt","type":"FILE_TYPE_FILE","path":"/home/agent/rel/two.txt"}]' ]
  [ "$(cat "$R/tmp/m/one.txt")" = 1 ] && [ "$(cat "$R/home/agent/rel/two.txt")" = 2 ]
  printf -- '--XX\r\nContent-Disposition: form-data; name="file"; filename="/tmp/d.txt"\r\n\r\n1\r\n--XX\r\nContent-Disposition: form-data; name="file"; filename="/tmp/./d.txt"\r\n\r\n2\r\n--XX--\r\n' >"$T/body"
  fs - post 'multipart/form-data; boundary=XX' <"$T/body"
  [ "$status" = 1 ] && [[ $output == "invalid_argument: you cannot upload multiple files to the same path '/tmp/d.txt'"* ]]
  fs - post 'application/octet-stream' /tmp/raw.bin <<<"raw"
  assert_success
  [ "$(cat "$R/tmp/raw.bin")" = raw ]
}

@test "fsops: watch events from sandbox code, recursive, names relative" {
  start_box
  timeout 30 "$DRIVE" "$STATE" box - watch /tmp/w 1 4 >"$T/events" 2>&1 &
  local wpid=$! i
  for i in $(seq 50); do grep -q start "$T/events" && break; sleep 0.1; done
  run_ax exec box sh -c 'echo 1 >/tmp/w/a; mkdir /tmp/w/sub; sleep 0.5; echo 2 >/tmp/w/sub/b;
    chmod 600 /tmp/w/sub/b; mv /tmp/w/a /tmp/w/c; rm /tmp/w/sub/b'
  assert_success
  fs - write /tmp/w/sub/up.txt <<<"uploaded"
  assert_success
  wait $wpid || true
  # an upload shows as envd's write in place would, its temp file never
  ! grep -E 'agsx-upload|#' "$T/events"
  for e in "EVENT_TYPE_CREATE a" "EVENT_TYPE_WRITE a" "EVENT_TYPE_CREATE sub" \
    "EVENT_TYPE_CREATE sub/b" "EVENT_TYPE_WRITE sub/b" "EVENT_TYPE_CHMOD sub/b" \
    "EVENT_TYPE_RENAME a" "EVENT_TYPE_CREATE c" "EVENT_TYPE_REMOVE sub/b" \
    "EVENT_TYPE_CREATE sub/up.txt" "EVENT_TYPE_WRITE sub/up.txt"; do
    grep -qx "$e" "$T/events" || { echo "# no '$e' in:" >&3; cat "$T/events" >&3; false; }
  done
  run timeout 10 "$DRIVE" "$STATE" box - watch /tmp/secret 0 1
  [ "$status" = 1 ] && [[ $output == invalid_argument:* ]]
}

@test "fsops: a sandbox that is not running is unavailable" {
  start_box
  ax kill box >/dev/null
  for i in $(seq 50); do ax ls -q | grep -q . || break; sleep 0.1; done
  fs - stat /
  [ "$status" = 1 ]
  [[ $output == unavailable:* || $output == not_found:*"no such sandbox"* ]]
}
