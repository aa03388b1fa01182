#!/usr/bin/env bats
# test-runner: parallel
# envd's filesystem half (api/fsops.h) on running sandboxes: through the
# test driver test/fixtures/fsops-drive (the library, no HTTP), and through
# the unmodified npm `e2b` SDK's `files` calls against `agsx serve`
# (test/serve/files*.mjs; those tests skip while the server or the SDK is
# missing), and curl for what the JS SDK does not send (gzip bodies,
# signed URLs, the polling watchers of the Python SDK). Symlinks planted by sandbox code (to /, /etc, ../../..) must
# resolve inside the sandbox: no host file may be read or change.

load helpers

bats_require_minimum_version 1.5.0

setup_file() {
  busybox_setup_file
  export NODE_LATEST=
  if command -v node >/dev/null && [ -f "$AGSX_SRCDIR/test/serve/lib.mjs" ] &&
    mods=$("$AGSX_SRCDIR/test/serve/npm-install" 2>/dev/null); then
    NODE_LATEST=$(echo "$mods" | sed -n 1p)
  fi
}

KEY=e2b_0123456789abcdef0123456789abcdef01234567

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
  SRV_PID=
}

teardown() {
  local rc=0
  serve_stop || rc=1
  ax kill box >/dev/null 2>&1 || true
  ax kill hbox >/dev/null 2>&1 || true
  if [ "$(host_sums)" != "$HOST_SUMS" ]; then
    echo "# a host file changed" >&3
    rc=1
  fi
  [ "$(cat "$CANARY")" = canary ] || rc=1
  [ ! -e "/tmp/agsx-fs-evil-$$" ] || { echo "# /tmp/agsx-fs-evil-$$ written on the host" >&3; rc=1; }
  rm -f "$CANARY" "/tmp/agsx-fs-evil-$$"
  sandbox_teardown || rc=1
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
  run timeout 60 "$DRIVE" "$STATE" "${BOX:-box}" "$user" "$@"
}

field() { # field KEY: KEY's value from the JSON object in $output
  python3 -c 'import json,sys; v=json.loads(sys.argv[1]); print(v[sys.argv[2]])' "$output" "$1"
}

@test "fsops: write, read, stat, list, mkdir, move, remove; what is created is the user's" {
  start_box
  fs agent write '~/dir/a.txt' <<<"hello"
  assert_success
  [ "$(field path)" = /home/agent/dir/a.txt ]
  [ "$(field owner)" = agent ]
  [ "$(field group)" = agent ]
  [ "$(field size)" = 6 ]
  [ "$(field permissions)" = -rw-r--r-- ]
  [ "$(field mode)" = 420 ]
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
  [ "$(field name)" = a.txt ]
  [ "$(field type)" = FILE_TYPE_FILE ]
  fs agent mkdir '~/dir/b/c'
  assert_success
  [ "$(field type)" = FILE_TYPE_DIRECTORY ]
  fs agent mkdir '~/dir/b/c'
  [ "$status" = 1 ]
  [[ $output == "already_exists: directory already exists: /home/agent/dir/b/c" ]]
  fs agent mkdir '~/dir/a.txt'
  [ "$status" = 1 ]
  [[ $output == invalid_argument:* ]]
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
  [ "$status" = 1 ]
  [[ $output == "not_found: source file not found"* ]]
  fs agent rm '~/dir'
  assert_success
  run_ax exec box test -e /home/agent/dir
  [ "$status" = 1 ]
  fs agent rm '~/dir'
  assert_success
  fs agent stat '~/dir'
  [ "$status" = 1 ]
  [[ $output == not_found:* ]]
  fs nosuchuser stat /
  [ "$status" = 1 ]
  [[ $output == unauthenticated:* ]]
}

@test "fsops: links to /, /etc and ../../.. planted by sandbox code resolve inside the sandbox" {
  start_box
  fs - read /tmp/rootlink/etc/passwd
  assert_success
  [[ $output == *agent:x:1000* ]] # the sandbox's own, not the host's
  fs - read /tmp/etclink/shadow
  [ "$status" = 1 ]
  [[ $output == "not_found: path '/tmp/etclink/shadow' does not exist" ]]
  fs - read /tmp/up/agsx-fs-canary-$$-$BATS_TEST_NUMBER
  [ "$status" = 1 ]
  [[ $output == not_found:* ]]
  fs - write "/tmp/up/agsx-fs-evil-$$" <<<"evil"
  assert_success
  [ -e "$R/tmp/agsx-fs-evil-$$" ]
  [ ! -e "/tmp/agsx-fs-evil-$$" ]
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
  [ -e "$R/etc" ]
  [ -e /etc/hostname ]
  fs - mkdir /tmp/etclink/made-in-sandbox
  assert_success
  [ -d "$R/etc/made-in-sandbox" ]
  [ ! -e /etc/made-in-sandbox ]
  fs - read /proc/self/root/etc/hostname
  [ "$status" = 1 ]
  fs - read /proc/kallsyms
  [ "$status" = 1 ]
  [[ $output == permission_denied:*"kernel filesystem"* ]]
}

@test "fsops: host files in a sandbox (a host image, a volume) get no host root privileges" {
  mkdir -p "$T/vol/ro" "$T/vol/open"
  echo secret >"$T/vol/secret" && chmod 0600 "$T/vol/secret"
  echo public >"$T/vol/public" && chmod 0644 "$T/vol/public"
  chmod 0755 "$T/vol" && chmod 1777 "$T/vol/open"
  ax run -d --name hbox --timeout 10m -v "$T/vol:/vol" host sleep 600 >/dev/null
  BOX=hbox
  fs - read /vol/secret
  [ "$status" = 1 ]
  [[ $output == "permission_denied: permission denied: /vol/secret" ]]
  fs - read /vol/public
  assert_success
  [ "$output" = public ]
  fs - write /vol/new <<<"x"
  [ "$status" = 1 ]
  [[ $output == permission_denied:* ]]
  fs - rm /vol/public
  [ "$status" = 1 ]
  [[ $output == permission_denied:* ]]
  fs - mv /vol/public /tmp/stolen
  [ "$status" = 1 ]
  [[ $output == permission_denied:* ]]
  [ -e "$T/vol/public" ]
  [ ! -e "$T/vol/new" ]
  fs - write /vol/open/mine <<<"ours"
  assert_success
  [ "$(cat "$T/vol/open/mine")" = ours ]
  fs - read /usr/bin/env
  assert_success
  fs - rm /vol
  [ "$status" = 1 ]
  [[ $output == "invalid_argument: cannot remove /vol: a mount point" ]]
  [ -e "$T/vol/public" ]
  if [ -d /etc/ssl/private ] && [ "$(stat -c %a /etc/ssl/private | cut -c3)" -lt 4 ]; then
    fs - list /etc/ssl/private 1 # the host's private keys: the sandbox may not list them
    [ "$status" = 1 ]
    [[ $output == permission_denied:* ]]
  fi
  ax kill hbox >/dev/null
}

# Issue 24, finding 6: host root removed what lay below a removable top.
@test "fsops: a recursive Remove or Move passes the sandbox root's checks at every level" {
  mkdir -p "$T/vol/open" "$T/vol/hdir"
  echo host >"$T/vol/hostfile" && echo host >"$T/vol/hdir/f"
  chmod 0755 "$T/vol" "$T/vol/hdir" && chmod 1777 "$T/vol/open"
  ax run -d --name hbox --timeout 10m -v "$T/vol:/data/vol" busybox sleep 600 >/dev/null
  BOX=hbox
  # The sandbox's own root may not empty the volume: neither may the API.
  run_ax exec hbox rm -rf /data
  [ "$status" -ne 0 ]
  [[ $output == *"Permission denied"* || $output == *"busy"* ]]
  [ -e "$T/vol/hostfile" ]
  fs - rm /data
  [ "$status" = 1 ]
  [[ $output == "invalid_argument: "*"cannot remove \`vol\` below /data: a mount point"* ]]
  [ -e "$T/vol/hostfile" ]
  [ -e "$T/vol/hdir/f" ]
  # A directory of the sandbox's, with a host directory put in it: its
  # entries are not the sandbox's to remove, nor the API's.
  fs - mkdir /data/vol/open/mine
  assert_success
  mkdir "$T/vol/open/mine/hostdir" && echo host >"$T/vol/open/mine/hostdir/hostfile"
  echo ours >"$T/vol/open/mine/z-ours"
  chown "$(stat -c %u:%g "$T/vol/open/mine")" "$T/vol/open/mine/z-ours"
  run_ax exec hbox rm -rf /data/vol/open/mine
  [ "$status" -ne 0 ]
  [[ $output == *"Permission denied"* ]]
  [ -e "$T/vol/open/mine/hostdir/hostfile" ]
  fs - rm /data/vol/open/mine
  [ "$status" = 1 ]
  [[ $output == "permission_denied: "*"hostfile"* ]]
  [ -e "$T/vol/open/mine/hostdir/hostfile" ]
  # A host directory moved to another parent (its ".." rewritten): no.
  fs - mkdir /data/vol/open/other
  assert_success
  fs - mv /data/vol/open/mine/hostdir /data/vol/open/other/hostdir
  [ "$status" = 1 ]
  [[ $output == permission_denied:* ]]
  [ -e "$T/vol/open/mine/hostdir/hostfile" ]
  run_ax exec hbox mv /data/vol/open/mine/hostdir /data/vol/open/other/hostdir
  [ "$status" -ne 0 ]
  # What the sandbox owns still goes, host files aside.
  rm -rf "$T/vol/open/mine/hostdir"
  fs - rm /data/vol/open/mine
  assert_success
  [ ! -e "$T/vol/open/mine" ]
  [ -e "$T/vol/hostfile" ]
  ax kill hbox >/dev/null
}

@test "fsops: a 50 MiB upload is streamed, read back the same, in little memory" {
  start_box
  head -c $((50 << 20)) /dev/urandom >"$T/big"
  want=$(sha256sum <"$T/big" | cut -d' ' -f1)
  # Under ASan the process starts at about 27 MiB (its shadow and
  # allocator): still well below the 50 MiB a buffered upload would take.
  local max=16
  [ -z "${AGSX_SANITIZER:-}" ] || max=40
  run /usr/bin/time -f 'maxrss %M' timeout 120 "$DRIVE" "$STATE" box - write /tmp/big <"$T/big"
  assert_success
  rss=$(sed -n 's/^maxrss //p' <<<"$output")
  echo "# upload: max RSS ${rss} KiB (bound $max MiB)" >&3
  [ "$rss" -lt $((max * 1024)) ]
  [ "$(sha256sum <"$R/tmp/big" | cut -d' ' -f1)" = "$want" ]
  [ "$(ls -a "$R/tmp" | grep -c agsx-upload)" = 0 ]
  timeout 120 "$DRIVE" "$STATE" box - read /tmp/big >"$T/back"
  [ "$(sha256sum <"$T/back" | cut -d' ' -f1)" = "$want" ]
}

@test "fsops: no space left is resource_exhausted and leaves no half file" {
  start_box --disk 2m
  run_ax exec box sh -c 'echo old >/root/f'
  fs - write /root/f < <(head -c $((8 << 20)) /dev/zero)
  [ "$status" = 1 ]
  [[ $output == "resource_exhausted: not enough disk space"* ]]
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
  [ "$(cat "$R/tmp/m/one.txt")" = 1 ]
  [ "$(cat "$R/home/agent/rel/two.txt")" = 2 ]
  printf -- '--XX\r\nContent-Disposition: form-data; name="file"; filename="/tmp/d.txt"\r\n\r\n1\r\n--XX\r\nContent-Disposition: form-data; name="file"; filename="/tmp/./d.txt"\r\n\r\n2\r\n--XX--\r\n' >"$T/body"
  fs - post 'multipart/form-data; boundary=XX' <"$T/body"
  [ "$status" = 1 ]
  [[ $output == "invalid_argument: you cannot upload multiple files to the same path '/tmp/d.txt'"* ]]
  fs - post 'application/octet-stream' /tmp/raw.bin <<<"raw"
  assert_success
  [ "$(cat "$R/tmp/raw.bin")" = raw ]
}

@test "fsops: watch events from sandbox code, recursive, names relative" {
  start_box
  # (a watch of 10 s: time for two agsx runs and an upload on a loaded host)
  timeout 30 "$DRIVE" "$STATE" box - watch /tmp/w 1 10 >"$T/events" 2>&1 &
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
  [ "$status" = 1 ]
  [[ $output == invalid_argument:* ]]
}

@test "fsops: a sandbox that is not running is unavailable; its watchers end with it" {
  start_box
  timeout 60 "$DRIVE" "$STATE" box - watch /tmp 1 30 >"$T/events" 2>&1 &
  local wpid=$! i t0
  for i in $(seq 50); do grep -q start "$T/events" && break; sleep 0.1; done
  t0=$(date +%s)
  ax kill box >/dev/null
  wait $wpid && false
  [ $(($(date +%s) - t0)) -lt 15 ] # not at the end of its 30 s
  grep -q '^unavailable: sandbox .* is not running' "$T/events" || { cat "$T/events" >&3; false; }
  for i in $(seq 50); do ax ls -q | grep -q . || break; sleep 0.1; done
  fs - stat /
  [ "$status" = 1 ]
  [[ $output == unavailable:* || $output == not_found:*"no such sandbox"* ]]
}

# ---- through the SDK and agsx serve (the helpers of serve.bats) ----


serve_start() {
  [ -n "$NODE_LATEST" ] || skip "the npm e2b SDK or test/serve/lib.mjs is missing"
  "$AGSX" serve --help >/dev/null 2>&1 || skip "agsx serve is not built yet"
  ax image load --tag bb "$BB" >/dev/null
  api_serve_start --template bb=bb "$@"
}

run_sdk() { # run_sdk SCRIPT: the scenario with the latest SDK; its last line must be "ok"
  local script=$1
  run env E2B_SDK=$NODE_LATEST E2B_API_URL=$U E2B_SANDBOX_URL=$U E2B_API_KEY=$KEY E2B_TEMPLATE=bb \
    timeout --kill-after=5 "${SDK_TIMEOUT:-120}" node "$AGSX_SRCDIR/test/serve/$script"
  if [ "$status" -ne 0 ] || [ "${lines[${#lines[@]}-1]}" != ok ]; then
    echo "# node $script: status $status" >&3
    printf '%s\n' "$output" | sed 's/^/#   /' >&3
    sed 's/^/# serve: /' "$T/serve.log" | tail -30 >&3
    return 1
  fi
}

@test "sdk files: every files call; planted links resolve inside the sandbox" {
  serve_start
  run_sdk files.mjs
}

@test "sdk files: 50 MiB up and down by hash, multipart and streamed; the server stays small" {
  serve_start
  SDK_TIMEOUT=300 run_sdk files-big.mjs
  printf '%s\n' "$output" | grep '^#' >&3 || true
  hwm=$(awk '/^VmHWM/ {print $2}' /proc/$SRV_PID/status)
  echo "# server VmHWM: $hwm KiB" >&3
  [ "$hwm" -lt $((32 * 1024)) ]
}

@test "sdk files: watchDir events, recursive and not" {
  serve_start
  run_sdk files-watch.mjs
}

# ---- curl: the edges of /files and the polling watchers ----

# sbx_create: a sandbox through the API; $SID, $TOK, $EH (its envd headers)
sbx_create() {
  local out
  out=$(curl -s -X POST -H "X-API-KEY: $KEY" -H 'Content-Type: application/json' \
    --data-binary '{"templateID":"bb","timeout":120}' "$U/v2/sandboxes")
  SID=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["sandboxID"])' "$out")
  TOK=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["envdAccessToken"])' "$out")
  EH=(-H "E2b-Sandbox-Id: $SID" -H "E2b-Sandbox-Port: 49983")
}

sbx_kill() { curl -s -X DELETE -H "X-API-KEY: $KEY" "$U/sandboxes/$SID" >/dev/null; }

rpc() { # rpc METHOD JSON: a unary Connect call of the Filesystem service
  curl -s "${EH[@]}" -H "X-Access-Token: $TOK" -H 'Content-Type: application/json' \
    -H 'Connect-Protocol-Version: 1' --data-binary "$2" -w '\n%{http_code}' \
    "$U/filesystem.Filesystem/$1"
}

sig() { # sig PATH OP [EXPIRATION]: envd's v1 signature for the default user, URL-encoded
  python3 -c 'import base64,hashlib,sys,urllib.parse
p,op,tok=sys.argv[1:4]; s=":".join([p,op,"",tok]+sys.argv[4:])
v="v1_"+base64.b64encode(hashlib.sha256(s.encode()).digest()).decode().rstrip("=")
print(urllib.parse.quote(v, safe=""))' "$1" "$2" "$TOK" "${@:3}"
}

@test "curl files: gzip and raw bodies, duplicates, 404 and 400 bodies, signed URLs, users" {
  serve_start
  sbx_create
  printf 'zipped\n' | gzip -c >"$T/z.gz"
  run curl -s "${EH[@]}" -H "X-Access-Token: $TOK" -H 'Content-Type: application/octet-stream' \
    -H 'Content-Encoding: gzip' --data-binary @"$T/z.gz" -w '\n%{http_code}' "$U/files?path=/tmp/z.txt"
  [ "${lines[1]}" = 200 ]
  [ "${lines[0]}" = '[{"path":"/tmp/z.txt","name":"z.txt","type":"file"}]' ]
  run ax exec "$SID" cat /tmp/z.txt
  [ "$output" = zipped ]
  run curl -s "${EH[@]}" -H "X-Access-Token: $TOK" -F 'file=@/etc/hostname;filename=/tmp/d' \
    -F 'file=@/etc/hostname;filename=/tmp/./d' -w '\n%{http_code}' "$U/files"
  [ "${lines[1]}" = 400 ]
  [[ ${lines[0]} == *"multiple files to the same path '/tmp/d'"* ]]
  run curl -s "${EH[@]}" -H "X-Access-Token: $TOK" -w '\n%{http_code}' "$U/files?path=/nope"
  [ "${lines[1]}" = 404 ]
  [ "${lines[0]}" = '{"code":404,"message":"path '"'/nope'"' does not exist"}' ]
  run curl -s "${EH[@]}" -H "X-Access-Token: $TOK" -w '\n%{http_code}' "$U/files?path=/tmp"
  [ "${lines[1]}" = 400 ]
  [[ ${lines[0]} == *"is a directory"* ]]
  run curl -s "${EH[@]}" -H "X-Access-Token: $TOK" -w '\n%{http_code}' "$U/files?path=/tmp/z.txt&username=nobody-here"
  [ "${lines[1]}" = 401 ]
  # signed URLs instead of the token: valid, wrong, expired
  run curl -s "${EH[@]}" -w '\n%{http_code}' "$U/files?path=/tmp/z.txt&signature=$(sig /tmp/z.txt read)"
  [ "${lines[1]}" = 200 ]
  [ "${lines[0]}" = zipped ]
  run curl -s "${EH[@]}" -w '\n%{http_code}' "$U/files?path=/tmp/z.txt&signature=$(sig /tmp/z.txt write)"
  [ "${lines[1]}" = 401 ]
  [[ ${lines[0]} == *"invalid signature"* ]]
  exp=$(($(date +%s) - 10))
  run curl -s "${EH[@]}" -w '\n%{http_code}' \
    "$U/files?path=/tmp/z.txt&signature=$(sig /tmp/z.txt read $exp)&signature_expiration=$exp"
  [ "${lines[1]}" = 401 ]
  [[ ${lines[0]} == *"already expired"* ]]
  run curl -s "${EH[@]}" -F 'file=@/etc/hostname' -w '\n%{http_code}' \
    "$U/files?path=/tmp/signed&signature=$(sig /tmp/signed write)"
  [ "${lines[1]}" = 200 ]
  # a user's upload is the user's
  run curl -s "${EH[@]}" -H "X-Access-Token: $TOK" -F 'file=@/etc/hostname;filename=mine' \
    -w '\n%{http_code}' "$U/files?username=agent"
  [ "${lines[1]}" = 200 ]
  [[ ${lines[0]} == *'"path":"/home/agent/mine"'* ]]
  run ax exec "$SID" stat -c %U /home/agent/mine
  [ "$output" = agent ]
  sbx_kill
}

@test "curl files: the polling watchers of the Python SDK (CreateWatcher, GetWatcherEvents, RemoveWatcher)" {
  serve_start
  sbx_create
  run rpc MakeDir '{"path":"/tmp/pw/sub"}'
  [ "${lines[1]}" = 200 ]
  run rpc CreateWatcher '{"path":"/tmp/pw","recursive":true}'
  [ "${lines[1]}" = 200 ]
  wid=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["watcherId"])' "${lines[0]}")
  [[ $wid =~ ^[0-9a-f]{32}$ ]]
  run ax exec "$SID" sh -c 'echo 1 >/tmp/pw/a; echo 2 >/tmp/pw/sub/b; rm /tmp/pw/a'
  # Events come in order, the removal last: gather them until it is in
  # (10 s at most, however loaded the host).
  local got="" i
  for i in $(seq 50); do
    run rpc GetWatcherEvents "{\"watcherId\":\"$wid\"}"
    [ "${lines[1]}" = 200 ]
    got+=" $(python3 -c 'import json,sys; print(" ".join(e["type"][11:]+":"+e["name"] for e in json.loads(sys.argv[1]).get("events", [])))' "${lines[0]}")"
    [[ " $got " == *" REMOVE:a "* ]] && break
    sleep 0.2
  done
  for e in CREATE:a WRITE:a CREATE:sub/b REMOVE:a; do
    [[ " $got " == *" $e "* ]] || { echo "# no $e in: $got" >&3; false; }
  done
  run rpc GetWatcherEvents "{\"watcherId\":\"$wid\"}"
  [ "${lines[1]}" = 200 ]
  [ "${lines[0]}" = '{"events":[]}' -o "${lines[0]}" = '{}' ]
  run rpc RemoveWatcher "{\"watcherId\":\"$wid\"}"
  [ "${lines[1]}" = 200 ]
  run rpc GetWatcherEvents "{\"watcherId\":\"$wid\"}"
  [ "${lines[1]}" = 404 ]
  [[ ${lines[0]} == *'"code":"not_found"'* ]]
  run rpc CreateWatcher '{"path":"/tmp/pw/sub/nothing"}'
  [ "${lines[1]}" = 404 ]
  # a watcher of a killed sandbox goes with it
  run rpc CreateWatcher '{"path":"/tmp/pw"}'
  [ "${lines[1]}" = 200 ]
  sbx_kill
}

@test "curl files: a client that goes away mid-upload leaves the old file and no temp" {
  serve_start
  sbx_create
  run ax exec "$SID" sh -c 'echo old >/tmp/keep'
  head -c $((64 << 20)) /dev/zero >"$T/big"
  curl -s "${EH[@]}" -H "X-Access-Token: $TOK" -H 'Content-Type: application/octet-stream' \
    --limit-rate 4M --data-binary @"$T/big" "$U/files?path=/tmp/keep" >/dev/null &
  local cpid=$! i
  sleep 1.5
  kill $cpid
  wait $cpid || true
  for i in $(seq 50); do
    [ "$(ls /proc/$SRV_PID/fd | wc -l)" -le "$SRV_FDS" ] && break
    sleep 0.1
  done
  run ax exec "$SID" cat /tmp/keep
  [ "$output" = old ]
  run ax exec "$SID" ls -a /tmp
  [[ $output != *agsx-upload* ]]
  sbx_kill
}
