#!/usr/bin/env bats
# test-runner: parallel
# agsx browser: headless Chromium (Debian's package, through the host image)
# in a detached sandbox, driven by playwright-core and puppeteer-core from
# the npm registry over the published DevTools endpoint.
#
# Tests tagged `browser` need Chromium: when it is missing and cannot be
# installed (apt-get, as root) they are skipped, saying so; likewise the
# Node clients when npm cannot reach its registry. Clients reach the browser
# through the published port on the host's loopback, as users do.
#
# The default teardown of helpers.bash stops and collects everything, then
# asserts that nothing of the test's sandboxes remains: processes, cgroups,
# records, mounts.

load helpers

bats_require_minimum_version 1.5.0

setup() {
  common_setup
  AX_TIMEOUT=90
  mkdir -p "$STATE"
}

# ---- helpers -----------------------------------------------------------

# playwright-core and puppeteer-core, cached; NODE_PATH for the fixtures.
need_node_clients() {
  command -v node >/dev/null || skip "browser: node is not installed"
  local dir
  dir=$("$FIXTURES/browser-node-setup" 2>"$T/npm.log") ||
    skip "browser: npm could not install playwright-core/puppeteer-core ($(tail -n 1 "$T/npm.log"))"
  export NODE_PATH=$dir/node_modules
}

# A field of a JSON document on stdin.
jfield() {
  python3 -c 'import json,sys; v=json.load(sys.stdin)[sys.argv[1]]; print("null" if v is None else str(v).lower() if isinstance(v,bool) else v)' "$1"
}

# start_browser ARGS...: `agsx browser --json ARGS`; sets ID, WS, HTTP.
start_browser() {
  run --separate-stderr ax browser --json "$@"
  AX_CMD="agsx browser --json $*"
  assert_success || return 1
  BJSON=$output
  ID=$(jfield id <<<"$BJSON")
  WS=$(jfield ws_url <<<"$BJSON")
  HTTP=$(jfield http_url <<<"$BJSON")
  echo "$ID" >>"$T/ids"
}

# The init pid of sandbox $1.
init_pid() {
  ax ls --json | python3 -c '
import json, sys
for s in json.load(sys.stdin):
    if s["id"] == sys.argv[1]: print(s["pid"])' "$1"
}

# client CMD...: a client on the host, bounded.
client() {
  timeout 60 "$@"
}

# The memory cgroup directory of process $1 (v1 or v2: host.bash).
mem_cgroup() { proc_cgroup_dir "$1" memory; }

# Xvfb, x11vnc, websockify and noVNC on the host (for the host image, as
# agsx browser --view runs them inside the sandbox), installed if we may.
need_view() {
  need_chromium
  local missing=()
  command -v Xvfb >/dev/null || missing+=(xvfb)
  command -v x11vnc >/dev/null || missing+=(x11vnc)
  command -v websockify >/dev/null || missing+=(websockify)
  [ -f /usr/share/novnc/vnc.html ] || missing+=(novnc)
  if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >/dev/null 2>&1 || true
  fi
  command -v Xvfb >/dev/null && command -v x11vnc >/dev/null && command -v websockify >/dev/null &&
    [ -f /usr/share/novnc/vnc.html ] ||
    skip "browser --view: ${missing[*]} not installed and could not be (apt-get install xvfb x11vnc websockify novnc)"
}

# mcp_session: `agsx mcp` as the coprocess MCP, initialized (its answer in
# $line).
mcp_session() {
  coproc MCP { ax mcp 2>"$T/mcp.err"; }
  echo '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bats","version":"1"}}}' >&"${MCP[1]}"
  IFS= read -r -t 60 line <&"${MCP[0]}"
}

# view VERB ARGS...: test/fixtures/browser-view.js (a headless Chromium on
# the host opening the noVNC page, or Playwright over CDP).
view() {
  AX_CMD="browser-view.js $*"
  run client node "$FIXTURES/browser-view.js" "$@"
}

# near "R,G,B" "R,G,B": each channel within 40 (the VNC encoding may be lossy).
near() {
  local -a a b
  IFS=, read -ra a <<<"$1"
  IFS=, read -ra b <<<"$2"
  local i d
  for i in 0 1 2; do
    d=$((a[i] - b[i]))
    [ "${d#-}" -le 40 ] || return 1
  done
}

# view_shows URL RX,RY=R,G,B...: the view's screen, as the noVNC page in a
# headless Chromium on the host shows it, has those colours at those
# fractions (percent) of its width and height. Polled, at most 10 shots:
# the view follows the browser within a frame or two. The last shot stays
# in $T/view.png; VIEW_SEEN says what each point showed.
view_shows() {
  local url=$1 i spec at want size w h x y got ok
  shift
  for i in $(seq 10); do
    view shot "$url" "$T/view.png"
    [ "$status" -eq 0 ] || { show_run; return 1; }
    size=$(png_size "$T/view.png") || return 1
    w=${size%x*} h=${size#*x} ok=1 VIEW_SEEN=
    for spec in "$@"; do
      at=${spec%=*} want=${spec#*=}
      x=$((w * ${at%,*} / 100)) y=$((h * ${at#*,} / 100))
      got=$(png_pixel "$T/view.png" "$x" "$y")
      VIEW_SEEN+=" $at=$got"
      near "$got" "$want" || ok=0
    done
    [ "$ok" = 1 ] && return 0
    sleep 0.5
  done
  echo "# the view showed:$VIEW_SEEN (wanted $*)" >&3
  return 1
}

# ws_upgrade PORT QUERY: the status line websockify answers a WebSocket
# upgrade of /websockify?QUERY with ("" when it closes unanswered).
ws_upgrade() {
  timeout 5 curl -s -i -N --max-time 3 -H "Connection: Upgrade" -H "Upgrade: websocket" \
    -H "Sec-WebSocket-Version: 13" -H "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==" \
    "http://127.0.0.1:$1/websockify$2" 2>/dev/null | head -n 1 | tr -d '\r' || true
}


# ---- no Chromium needed --------------------------------------------------

@test "browser: --help lists the options" {
  run_ax browser --help
  assert_success
  for o in --name --network --publish --timeout --memory --image --user --json; do
    assert_output_contains "$o"
  done
}

@test "browser: bad arguments are refused before anything starts" {
  local args
  for args in "-p -1" "-p 70000" "-p 80/udp" "-p 1:2:3" "-p x" "-p 1.2.3:80" "-p :80" "--memory 1m" "--memory lots" \
              "--timeout 0" "--timeout 25h" "--name -bad" "stray"; do
    # shellcheck disable=SC2086
    run_ax browser $args
    assert_agsx_error "browser" || return 1
  done
  [ -z "$(ls "$STATE" | grep -vx -e slots -e cache -e names)" ]
}

@test "browser: an image without Chromium fails with one line and leaves nothing" {
  "$FIXTURES/busybox-image" "$T/bb" --probe "$PROBE" >/dev/null
  ax image load "$T/bb" >/dev/null
  run_ax browser --image busybox --timeout 20s
  assert_agsx_error "chromium"
  [ -z "$(ls "$STATE" | grep -vx -e slots -e cache -e names)" ]
}

# ---- with Chromium ---------------------------------------------------------

# bats test_tags=browser
@test "browser: starts, answers, prints its endpoint; an ordinary sandbox as user 1000" {
  need_chromium
  local t0 t1
  t0=$(date +%s%N)
  start_browser --name web --timeout 60s
  t1=$(date +%s%N)
  [[ $WS =~ ^ws://127\.0\.0\.1:[0-9]+/devtools/browser/[0-9a-f-]+$ ]] || { show_run; false; }
  [[ $HTTP =~ ^http://127\.0\.0\.1:[0-9]+$ ]] || { show_run; false; }
  [[ $(jfield browser <<<"$BJSON") == Chrome/* ]] || { show_run; false; }
  [ "$(jfield name <<<"$BJSON")" = web ]
  [ "$(jfield network <<<"$BJSON")" = internal ]
  echo "# ready in $(((t1 - t0) / 1000000)) ms" >&3
  # Ready means ready: the endpoint answers at once.
  run client curl -sf "$HTTP/json/version"
  assert_success
  assert_output_contains "${WS#ws://*/}"
  # An ordinary sandbox: ls shows it, exec runs in it.
  run_ax ls
  assert_output_contains web
  # Every Chromium process: uid 1000, under agsx's seccomp filter, no caps.
  run_ax exec web sh -c 'for s in /proc/[0-9]*/status; do
      grep -q "^Name:.*chrom" "$s" 2>/dev/null || continue
      echo "$(grep ^Uid: "$s" | cut -f2) $(grep ^Seccomp: "$s" | cut -f2) $(grep ^CapEff: "$s" | cut -f2)"
    done | sort -u'
  assert_success
  [ "$output" = "1000 2 0000000000000000" ] || { show_run; false; }
  # ls and port show the published port.
  run_ax port web
  assert_output_contains "9222/tcp -> ${HTTP#http://}"
  # The text form: one line, the URL, on the port asked for (IPv6 too).
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  run --separate-stderr ax browser --name web2 --timeout 30s -p "127.0.0.1:$port"
  assert_success
  [[ $output =~ ^ws://127\.0\.0\.1:$port/devtools/browser/[0-9a-f-]+$ ]] || { show_run; false; }
  if [ -f /proc/net/if_inet6 ] && ip -6 addr show dev lo | grep -q '::1'; then
    start_browser --timeout 30s -p '[::1]:0'
    [[ $WS =~ ^ws://\[::1\]:[0-9]+/devtools/browser/ ]] || { show_run; false; }
    run client curl -sfg "$HTTP/json/version"
    assert_success
  fi
  # A port in use: refused, nothing left.
  run --separate-stderr ax browser -p "127.0.0.1:$port"
  [ "$status" -eq 125 ] && [[ $stderr == *"in use"* ]] || { show_run; false; }
}

# bats test_tags=browser
@test "browser: Playwright fills a form, clicks, reads the result and takes a screenshot" {
  need_chromium
  need_node_clients
  start_browser --timeout 90s
  run client node "$FIXTURES/browser-playwright.js" "$HTTP" "$FIXTURES/browser-form.html" \
    "$T/shot.png"
  assert_success
  assert_output_contains "connected "
  assert_output_contains "title agsx form"
  assert_output_contains "result Hello, agsx (42)"
  run png_size "$T/shot.png"
  assert_success
  [[ $output =~ ^[0-9]+x[0-9]+$ ]]
  [ "$(stat -c %s "$T/shot.png")" -gt 1000 ]
}

# bats test_tags=browser
@test "browser: agsx's own DevTools client (cdpws) reads the title and takes a screenshot" {
  need_chromium
  start_browser --timeout 60s
  # 800x600: a red 400x300 block top left on blue.
  local page='data:text/html,<title>agsx%20cdpws</title><body%20style="margin:0;background:rgb(0,0,255)"><div%20style="width:400px;height:300px;background:rgb(255,0,0)"></div>'
  AX_CMD="cdp-shot $WS"
  run client "${AGSX_BUILDDIR:-$(dirname "$AGSX")}/test/fixtures/cdp-shot" "$WS" "$page" "$T/shot.png"
  assert_success
  assert_output_contains "title agsx cdpws"
  # A 3 MiB answer (64-bit frame lengths) read whole.
  assert_output_contains "big 3145728"
  # An error answer becomes an error, the browser's message in it.
  assert_output_contains "error Nope.nothing: the browser answered: 'Nope.nothing' wasn't found"
  run png_size "$T/shot.png"
  assert_success
  [ "$output" = 800x600 ] || { show_run; false; }
  [ "$(png_pixel "$T/shot.png" 100 100)" = 255,0,0 ]
  [ "$(png_pixel "$T/shot.png" 600 450)" = 0,0,255 ]
}

# bats test_tags=browser
@test "browser: Puppeteer connects to the printed WebSocket URL" {
  need_chromium
  need_node_clients
  start_browser --timeout 60s
  run client node "$FIXTURES/browser-puppeteer.js" "$WS"
  assert_success
  assert_output_contains "puppeteer Chrome/"
  assert_output_contains " 42"
}

# bats test_tags=browser
@test "browser: the deadline kills it and nothing is left" {
  need_chromium
  # 15 s: Chromium starts well within it on a loaded host too (4 s did not
  # always: the deadline then came before the browser answered; 10 s left
  # too little time after the start to read the init's pid)
  start_browser --timeout 15s
  local pid
  pid=$(init_pid "$ID")
  [ -n "$pid" ]
  # Stopped and collected after its 15 s (30 s at most, however loaded the
  # host: a stop gives Chromium its grace first).
  local _
  for _ in $(seq 60); do
    sleep 0.5
    ax ls -a --json | python3 -c '
import json, sys
s = [s for s in json.load(sys.stdin) if s["id"] == sys.argv[1]]
sys.exit(not (s and s[0]["status"] == "exited"))' "$ID" 2>/dev/null || continue
    [ ! -d "/proc/$pid" ] && [ -z "$(sandbox_processes)" ] && [ -z "$(sandbox_cgroups)" ] && break
  done
  run_ax ls -a --json
  assert_success
  python3 -c '
import json, sys
s = [s for s in json.load(sys.stdin) if s["id"] == sys.argv[1]][0]
assert s["status"] == "exited" and s["stop_reason"] == "timeout", s' "$ID" <<<"$output" ||
    { show_run; false; }
  [ ! -d "/proc/$pid" ]
  [ -z "$(sandbox_processes)" ]
  [ -z "$(sandbox_cgroups)" ]
}

# bats test_tags=browser
@test "browser: the memory limit holds; a page that eats memory crashes, reported" {
  need_chromium
  need_node_clients
  start_browser --timeout 90s --memory 384m
  local cg limit
  cg=$(mem_cgroup "$(init_pid "$ID")")
  cat > "$T/oom.js" <<'EOF'
const { chromium } = require('playwright-core');
(async () => {
  const browser = await chromium.connectOverCDP(process.argv[2], { timeout: 20000 });
  const ctx = browser.contexts()[0] || await browser.newContext();
  const page = await ctx.newPage();
  try {
    await page.evaluate(() => { const a = []; for (;;) a.push(new Float64Array(1 << 20).fill(Math.random())); });
    console.log('survived');
  } catch (e) { console.log('page failed ' + e.message.split('\n')[0]); }
  try {
    const p2 = await ctx.newPage();
    await p2.setContent('<p>still here</p>');
    console.log('browser alive ' + await p2.textContent('p'));
  } catch (e) { console.log('browser gone ' + e.message.split('\n')[0]); }
  process.exit(0);
})().catch((e) => { console.log('browser gone ' + e.message); process.exit(0); });
EOF
  run client node "$T/oom.js" "$HTTP"
  assert_success
  refute_output_contains survived
  assert_output_contains "page failed"
  if [[ $output == *"browser alive still here"* ]]; then
    # The OOM killer took the renderer: the browser lives on, the limit held.
    if [ -f "$cg/memory.max_usage_in_bytes" ]; then
      limit=$(cat "$cg/memory.limit_in_bytes")
      [ "$(cat "$cg/memory.max_usage_in_bytes")" -le "$limit" ]
      grep -q '^oom_kill [1-9]' "$cg/memory.oom_control"
    else
      [ "$(cat "$cg/memory.max")" = $((384 << 20)) ]
      grep -q '^oom_kill [1-9]' "$cg/memory.events"
    fi
  else
    # Or the whole sandbox went, and says so (once its record is written:
    # 10 s at most, however loaded the host).
    local _
    for _ in $(seq 50); do
      ax ls -a --json | grep -q '"stop_reason":"oom"' && break
      sleep 0.2
    done
    run_ax ls -a --json
    assert_output_contains '"stop_reason":"oom"'
  fi
}

# bats test_tags=browser
@test "browser: a browser that never answers is stopped and removed" {
  need_chromium
  # The last --remote-debugging-port wins: nothing listens where we look.
  AX_CMD="agsx browser --timeout 3s -- --remote-debugging-port=9333"
  run --separate-stderr ax browser --timeout 3s -- --remote-debugging-port=9333
  [ "$status" -eq 125 ] || { show_run; false; }
  [[ $stderr == "agsx: browser: "* ]] || { show_run; false; }
  note_sandbox_ids
  [ -z "$(ls "$STATE" | grep -vx -e slots -e cache -e names)" ]
  [ -z "$(sandbox_processes)" ]
  [ -z "$(sandbox_cgroups)" ]
}

# bats test_tags=browser
@test "browser: ^C while waiting stops and removes the browser" {
  need_chromium
  timeout 60 "$AGSX" --root "$ROOT" --state "$STATE" browser --timeout 30s \
    -- --remote-debugging-port=9333 2>"$T/err" &
  local pid=$! rc=0
  for i in $(seq 50); do
    ls "$STATE" 2>/dev/null | grep -qxE '[0-9a-f]{32}' && break
    sleep 0.1
  done
  note_sandbox_ids
  # Started (10 s at most, however loaded the host), so that the ^C comes
  # while it waits for the browser, not during the start.
  local id
  id=$(ls "$STATE" 2>/dev/null | grep -xE '[0-9a-f]{32}' | head -1)
  for i in $(seq 50); do
    [ "$(rec "$id" status 2>/dev/null)" = running ] && break
    sleep 0.2
  done
  sleep 0.5
  kill -INT "$pid"
  wait "$pid" || rc=$?
  [ "$rc" -eq 125 ] || { echo "# status $rc: $(cat "$T/err")" >&3; false; }
  grep -q "^agsx: browser: interrupted" "$T/err"
  [ -z "$(ls "$STATE" | grep -vx -e slots -e cache -e names)" ]
  [ -z "$(sandbox_processes)" ]
  [ -z "$(sandbox_cgroups)" ]
}

# ---- networks ------------------------------------------------------------

# Runs the rest of this test inside a new network and mount namespace with a
# "world" namespace on 198.19.200.0/24 serving HTTP: nothing is sent from
# the host's own namespace (the network-test rule).
# bats test_tags=browser
@test "browser: internal cannot reach a world server, public can" {
  need_chromium
  need_node_clients
  mkdir -p "$T/www"
  echo "hello from the world" >"$T/www/index.html"
  cat >"$T/net.sh" <<'EOF'
set -eu
ip link set lo up
# agsx's leases and sandbox addresses stay in this namespace too.
mkdir -p /run/agsx-net
mount -t tmpfs tmpfs /run/agsx-net
export AGSX_PUBLIC_SUBNET=198.19.0.0/24
ip netns add "agsx-world-$$"
w="agsx-world-$$"
trap '"$AGSX" --root "$ROOT" --state "$STATE" kill --all >/dev/null 2>&1
      "$AGSX" --root "$ROOT" --state "$STATE" gc >/dev/null 2>&1
      kill $srv 2>/dev/null; ip netns del "$w"' EXIT
ip link add veth-up type veth peer name veth-w netns "$w"
ip addr add 198.19.200.1/24 dev veth-up
ip link set veth-up up
ip route add default via 198.19.200.2
ip -n "$w" addr add 198.19.200.2/24 dev veth-w
ip -n "$w" link set veth-w up
ip -n "$w" link set lo up
ip netns exec "$w" python3 -m http.server --bind 198.19.200.2 8080 --directory "$WWW" \
  >/dev/null 2>&1 &
srv=$!
for i in $(seq 50); do
  ip netns exec "$w" python3 -c 'import socket; socket.create_connection(("198.19.200.2", 8080), 1)' \
    2>/dev/null && break
  sleep 0.1
done
echo "outer $(python3 -c 'import urllib.request as u; print(u.urlopen("http://198.19.200.2:8080/", timeout=5).read().decode().strip())')"
for mode in internal public; do
  out=$("$AGSX" --root "$ROOT" --state "$STATE" browser --json --network "$mode" --timeout 60s)
  http=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["http_url"])')
  echo "$mode $(timeout 60 node "$FIXTURES/browser-fetch.js" "$http" http://198.19.200.2:8080/)"
done
EOF
  run env WWW="$T/www" AGSX="$AGSX" ROOT="$ROOT" STATE="$STATE" FIXTURES="$FIXTURES" \
    NODE_PATH="$NODE_PATH" timeout 180 unshare --net --mount --propagation private bash "$T/net.sh"
  assert_success
  assert_output_contains "outer hello from the world"
  assert_output_contains "internal failed"
  assert_output_contains "public loaded hello from the world"
}

# bats test_tags=browser
@test "browser: agsx mcp: browser_start, Puppeteer through ws_url; navigate, text, type, click, screenshot of a page in the sandbox" {
  need_chromium
  local line id ws http
  mcp_session
  echo '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"browser_start","arguments":{"network":"public"}}}' >&"${MCP[1]}"
  IFS= read -r -t 60 line <&"${MCP[0]}"
  [[ $line == *"network \`public\` is not allowed"*'"isError":true'* ]] || { echo "$line"; false; }
  echo '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"browser_start","arguments":{"timeout":90}}}' >&"${MCP[1]}"
  IFS= read -r -t 90 line <&"${MCP[0]}"
  read -r id ws http < <(python3 -c '
import json, sys
c = json.loads(sys.argv[1])["result"]["structuredContent"]
print(c["sandbox"]["id"], c["ws_url"], c["http_url"])' "$line") || { echo "$line"; false; }
  echo "$id" >>"$T/ids"
  [[ $ws =~ ^ws://127\.0\.0\.1:[0-9]+/devtools/browser/[0-9a-f-]+$ ]] || { echo "$line"; false; }
  [[ $line == *'"port":9222'* && $line == *'"browser":"Chrome/'* ]] || { echo "$line"; false; }
  # The endpoint answers at once, as agsx browser's; Chromium is user 1000.
  run client curl -sf "$http/json/version"
  assert_success
  assert_output_contains "${ws#ws://*/}"
  run_ax exec "$id" sh -c 'for s in /proc/[0-9]*/status; do
      grep -q "^Name:.*chrom" "$s" 2>/dev/null && grep ^Uid: "$s" | cut -f2; done | sort -u'
  [ "$output" = 1000 ] || { show_run; false; }
  if command -v node >/dev/null && dir=$("$FIXTURES/browser-node-setup" 2>"$T/npm.log"); then
    run client env NODE_PATH="$dir/node_modules" node "$FIXTURES/browser-puppeteer.js" "$ws"
    assert_success
    assert_output_contains "puppeteer Chrome/"
  fi
  # agsx's own CDP: a page served inside the browser's sandbox (internal
  # network: its loopback), navigated, read, filled in, clicked, shot.
  local html='<!doctype html><title>agsx form</title>
<body style="margin:0;background:rgb(0,0,255)">
<div style="width:320px;height:200px;background:rgb(255,0,0)"></div>
<p id="msg">waiting</p><input id="name"><button id="go" onclick="document.getElementById(&quot;msg&quot;).textContent = &quot;Hello, &quot; + document.getElementById(&quot;name&quot;).value">go</button>
</body>'
  ax exec "$id" sh -c 'mkdir -p /tmp/www && echo "$1" | base64 -d >/tmp/www/form.html' _ "$(base64 -w0 <<<"$html")"
  run_ax exec -d "$id" python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp/www
  mcall() { # ID NAME ARGS: a tools/call; its answer in $line
    printf '{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"%s","arguments":%s}}\n' \
      "$1" "$2" "$3" >&"${MCP[1]}"
    IFS= read -r -t 90 line <&"${MCP[0]}"
  }
  up() { mcall 10 browser_navigate '{"sandbox":"'"$id"'","url":"http://127.0.0.1:8000/form.html"}'; [[ $line == *'"title":"agsx form"'* ]]; }
  poll 50 up || { echo "$line"; false; }
  [[ $line == *'"loaded":true'* ]]
  mcall 11 browser_text '{"sandbox":"'"$id"'","selector":"#msg"}'
  [[ $line == *'"text":"waiting"'* ]] || { echo "$line"; false; }
  mcall 12 browser_type '{"sandbox":"'"$id"'","selector":"#name","text":"agsx \u00e9"}'
  [[ $line == *'"typed":7'* ]] || { echo "$line"; false; }
  mcall 13 browser_click '{"sandbox":"'"$id"'","selector":"#go"}'
  [[ $line == *'"isError":false'* ]] || { echo "$line"; false; }
  mcall 14 browser_text '{"sandbox":"'"$id"'"}'
  [[ $line == *'Hello, agsx \u00e9'* || $line == *'Hello, agsx é'* ]] || { echo "$line"; false; }
  mcall 15 browser_click '{"sandbox":"'"$id"'","selector":"#nope"}'
  [[ $line == *"no element matches the selector"*'"isError":true'* ]] || { echo "$line"; false; }
  mcall 16 browser_screenshot '{"sandbox":"'"$id"'","width":640,"height":480}'
  python3 -c '
import base64, json, sys
r = json.loads(sys.argv[1])["result"]
assert r["structuredContent"]["width"] == 640 and r["structuredContent"]["height"] == 480, r["structuredContent"]
img = [c for c in r["content"] if c["type"] == "image"]
assert len(img) == 1 and img[0]["mimeType"] == "image/png"
open(sys.argv[2], "wb").write(base64.b64decode(img[0]["data"], validate=True))' "$line" "$T/mcp-shot.png" ||
    { echo "${line:0:400}"; false; }
  [ "$(png_size "$T/mcp-shot.png")" = 640x480 ]
  [ "$(png_pixel "$T/mcp-shot.png" 100 100)" = 255,0,0 ]
  [ "$(png_pixel "$T/mcp-shot.png" 600 450)" = 0,0,255 ]
  # A sandbox that is no browser, a page that does not load.
  mcall 17 browser_navigate '{"sandbox":"'"$id"'","url":"http://127.0.0.1:1/"}'
  [[ $line == *"did not load"*'"isError":true'* ]] || { echo "$line"; false; }
  # The session's end stops it.
  exec {MCP[1]}>&-
  wait "$MCP_PID" || true
  ! grep -E 'AddressSanitizer|LeakSanitizer|runtime error' "$T/mcp.err" || false
  none() { [ -z "$(ax ls -q)" ]; }
  poll 100 none
}

# bats test_tags=browser
@test "browser --view: an image without the view's programs fails naming them; nothing left" {
  "$FIXTURES/busybox-image" "$T/bb" --probe "$PROBE" >/dev/null
  ax image load "$T/bb" >/dev/null
  run_ax browser --view --image busybox --timeout 20s
  assert_agsx_error "the image has no Xvfb"
  assert_output_contains "xvfb, x11vnc, websockify and novnc"
  [ -z "$(ls "$STATE" | grep -vx -e slots -e cache -e names)" ]
}

# bats test_tags=browser
@test "browser --view: a person watches in noVNC while Playwright drives; view only; tokens" {
  need_view
  need_node_clients
  start_browser --view --timeout 120s
  local vurl vport
  vurl=$(jfield view_url <<<"$BJSON")
  vport=$(jfield view_port <<<"$BJSON")
  [[ $vurl =~ ^http://127\.0\.0\.1:$vport/vnc\.html\?.*view_only=1.*path=websockify%3Ftoken%3D[0-9a-f]{32}$ ]] ||
    { show_run; false; }
  [ "$(jfield takeover_url <<<"$BJSON")" = null ]
  run_ax port "$ID"
  assert_output_contains "6080/tcp -> 127.0.0.1:$vport"
  # Display, VNC server and websockify run inside the sandbox, as its user;
  # one VNC server only (no takeover), and it takes no input.
  run_ax exec "$ID" ps -eo user,args
  assert_success
  grep -Eq '^agsx +Xvfb :99 ' <<<"$output" || { show_run; false; }
  [ "$(grep -Ec '^agsx +x11vnc ' <<<"$output")" = 1 ] || { show_run; false; }
  grep -Eq '^agsx +x11vnc .*-rfbport 5900 -viewonly$' <<<"$output" || { show_run; false; }
  grep -Eq '^agsx +(/usr/bin/python3 )?/usr/bin/websockify .*127\.0\.0\.1:6080$' <<<"$output" ||
    { show_run; false; }
  grep -Eq '^agsx +/usr/lib/chromium/chromium .*--window-size=1280,800' <<<"$output" ||
    { show_run; false; }
  ! grep -q -- '--headless' <<<"$output" || { show_run; false; }
  # No token on a command line, inside or on the host.
  local tok=${vurl##*%3D}
  ! grep -q "$tok" <<<"$output" || { show_run; false; }
  ! grep -rqs "$tok" /proc/[0-9]*/cmdline || { echo "# a command line holds the token" >&3; false; }
  # Playwright puts a red left half on blue; the view shows it where the
  # page has it (the page is below Chromium's toolbar: 70% down).
  view goto "$HTTP" 'data:text/html,<body style="margin:0;background:%230000ff"><div style="position:fixed;left:0;top:0;width:50vw;height:100vh;background:%23ff0000"></div>'
  assert_success
  view_shows "$vurl" 25,70=255,0,0 75,70=0,0,255 || false
  # A second page, through Playwright; the next view shows the change.
  view goto "$HTTP" 'data:text/html,<body style="margin:0;background:%2300ff00">'
  assert_success
  view_shows "$vurl" 25,70=0,255,0 75,70=0,255,0 || false
  # View only, by the server: a click through the view's token does not
  # reach the page, even with noVNC's own view-only setting off.
  view goto "$HTTP" 'data:text/html,<button style="position:fixed;left:0;top:0;width:100vw;height:100vh" onclick="window.clicks=(window.clicks||0)+1">press</button>'
  assert_success
  view click "${vurl/&view_only=1/}" 0.5 0.7
  assert_success
  view eval "$HTTP" 'window.clicks || 0'
  assert_output_contains "value 0"
  # The token is what lets the WebSocket through: none, a wrong one, a
  # well-formed one of no sandbox are closed unanswered; the right one
  # speaks VNC.
  [ -z "$(ws_upgrade "$vport" "")" ] || false
  [ -z "$(ws_upgrade "$vport" "?token=wrong")" ] || false
  [ -z "$(ws_upgrade "$vport" "?token=0123456789abcdef0123456789abcdef")" ] || false
  [[ $(ws_upgrade "$vport" "?token=$tok") == "HTTP/1.1 101 "* ]] || false
  # The noVNC page without a token shows no screen.
  VIEW_TIMEOUT_MS=5000 view shot "http://127.0.0.1:$vport/vnc.html?autoconnect=1" "$T/none.png"
  [ "$status" -ne 0 ] && [[ $output == *"error page.waitForSelector: Timeout"* ]] || { show_run; false; }
}

# bats test_tags=browser
@test "browser --takeover: a click and typing through noVNC reach the page; ended with the sandbox" {
  need_view
  need_node_clients
  # The text form: the ws URL, then the view and takeover URLs.
  run --separate-stderr ax browser --takeover --timeout 120s
  AX_CMD="agsx browser --takeover"
  assert_success
  [ "$(wc -l <<<"$output")" = 3 ] || { show_run; false; }
  local ws vurl turl
  ws=$(sed -n 1p <<<"$output")
  vurl=$(sed -n 's/^view: //p' <<<"$output")
  turl=$(sed -n 's/^takeover: //p' <<<"$output")
  [[ $ws =~ ^ws://127\.0\.0\.1:[0-9]+/devtools/browser/ ]] || { show_run; false; }
  [[ $vurl == *view_only=1* && $turl != *view_only* ]] || { show_run; false; }
  [ "${vurl##*%3D}" != "${turl##*%3D}" ] || false
  ID=$(ax ls -q | head -n 1)
  echo "$ID" >>"$T/ids"
  run_ax exec "$ID" ps -eo args
  [ "$(grep -c '^x11vnc ' <<<"$output")" = 2 ] || { show_run; false; }
  view goto "$ws" 'data:text/html,<input id=t style="position:fixed;left:0;top:0;width:100vw;height:40vh;font-size:40px"><button style="position:fixed;left:0;top:40vh;width:100vw;height:60vh" onclick="window.clicks=(window.clicks||0)+1">press</button>'
  assert_success
  # The same click at the same place through the view token (noVNC's own
  # view-only setting off) does not reach the page: the server drops it.
  view click "${vurl/&view_only=1/}" 0.5 0.8
  assert_success
  view eval "$ws" 'window.clicks || 0'
  assert_output_contains "value 0"
  # A person clicks the button through the takeover view: its handler runs.
  view click "$turl" 0.5 0.8
  assert_success
  view eval "$ws" 'window.clicks || 0'
  assert_output_contains "value 1"
  # And types into the field: the keys reach the page.
  view type "$turl" 0.5 0.3 'agsx Takeover 42'
  assert_success
  view eval "$ws" 'document.getElementById("t").value'
  assert_output_contains 'value "agsx Takeover 42"'
  # Published ports: the supervisor listens on exactly the two, on loopback.
  local sup listening
  sup=$(ax inspect "$ID" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["supervisor"]["pid"])')
  listening=$(ss -Hltnp | grep "pid=$sup," | awk '{print $4}' | sort)
  [ "$(wc -l <<<"$listening")" = 2 ] && ! grep -qv '^127\.0\.0\.1:' <<<"$listening" ||
    { echo "# the supervisor listens on: $listening" >&3; false; }
  local vport=${vurl#http://127.0.0.1:}
  vport=${vport%%/*}
  grep -qx "127.0.0.1:$vport" <<<"$listening" || false
  # Killed: nothing of the view is left, and its port is closed.
  run_ax kill "$ID"
  assert_success
  local _
  for _ in $(seq 40); do
    [ -z "$(sandbox_processes)" ] && ! curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$vport/vnc.html" && break
    sleep 0.25
  done
  [ -z "$(sandbox_processes)" ] || { echo "# left: $(sandbox_processes)" >&3; false; }
  ! curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$vport/vnc.html" || false
}

# bats test_tags=browser
@test "browser: agsx mcp: browser_start with view and takeover returns both URLs, and they work" {
  need_view
  local line vurl turl id
  mcp_session
  echo '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"browser_start","arguments":{"timeout":90,"takeover":true}}}' >&"${MCP[1]}"
  IFS= read -r -t 90 line <&"${MCP[0]}"
  read -r id vurl turl < <(python3 -c '
import json, sys
c = json.loads(sys.argv[1])["result"]["structuredContent"]
print(c["sandbox"]["id"], c["view_url"], c["takeover_url"])' "$line") || { echo "$line"; false; }
  echo "$id" >>"$T/ids"
  [[ $vurl == http://127.0.0.1:*/vnc.html?*view_only=1*token%3D* && $turl != *view_only* ]] ||
    { echo "$line"; false; }
  local vport=${vurl#http://127.0.0.1:}
  vport=${vport%%/*}
  [[ $(ws_upgrade "$vport" "?token=${vurl##*%3D}") == "HTTP/1.1 101 "* ]] || false
  [[ $(ws_upgrade "$vport" "?token=${turl##*%3D}") == "HTTP/1.1 101 "* ]] || false
  [ -z "$(ws_upgrade "$vport" "?token=wrong")" ] || false
  run_ax exec "$id" ps -eo args
  [ "$(grep -c '^x11vnc ' <<<"$output")" = 2 ] || { show_run; false; }
  # The session's end stops it, view and all.
  exec {MCP[1]}>&-
  wait "$MCP_PID" || true
  local _
  for _ in $(seq 40); do
    [ -z "$(sandbox_processes)" ] && break
    sleep 0.25
  done
  [ -z "$(sandbox_processes)" ] || { echo "# left: $(sandbox_processes)" >&3; false; }
}
