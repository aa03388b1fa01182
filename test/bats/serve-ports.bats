#!/usr/bin/env bats
# test-runner: parallel
# serve --ports-listen: a sandbox's own ports by E2B's host names
# (PORT-ID.DOMAIN, as getHost() builds them) through a listener of their
# own (src/api/forward.c): a server in a sandbox answers there; the Host and
# Origin rules against DNS rebinding, unknown sandboxes, closed ports, the
# API's own ports, and what is not HTTP are refused in E2B's proxy's words;
# the end of a sandbox ends its ports. WebSockets through it (noVNC) are
# desktop.bats's stream check.

load helpers

bats_require_minimum_version 1.5.0

KEY=e2b_0123456789abcdef0123456789abcdef01234567

setup_file() { busybox_setup_file; }

setup() {
  common_setup
  AX_TIMEOUT=60
  SRV_PID=
}

teardown() {
  local rc=0
  serve_stop || rc=1
  sandbox_teardown || rc=1
  return $rc
}

@test "serve --ports-listen: a sandbox's port by host name; refusals; its end" {
  ax image load --tag bb "$BB" >/dev/null
  local pp id
  pp=$(free_port)
  api_serve_start --ports-listen "127.0.0.1:$pp" --template box=bb
  curl -s -X POST -H "X-API-KEY: $KEY" -H 'Content-Type: application/json' \
    -d '{"templateID":"box","timeout":120}' "$U/sandboxes" >"$T/created"
  id=$(jq -r .sandboxID "$T/created")
  [ -n "$id" ] && [ "$id" != null ] || { cat "$T/serve.log" >&3; false; }
  # E2B's `domain`, from which the SDKs build a port's host (over their
  # E2B_DOMAIN): this listener's
  [ "$(jq -r .domain "$T/created")" = "localhost:$pp" ]
  [ "$(curl -s -H "X-API-KEY: $KEY" "$U/sandboxes/$id" | jq -r .domain)" = "localhost:$pp" ]
  grep -q "ports on http://PORT-ID.localhost:$pp (their domain)" "$T/serve.log"
  ax exec "$id" sh -c 'mkdir -p /tmp/www && echo hello-port > /tmp/www/index.html'
  ax exec -d "$id" httpd -f -p 127.0.0.1:8080 -h /tmp/www
  local P=http://127.0.0.1:$pp
  up() { [ "$(curl -s -H "Host: 8080-$id.localhost:$pp" "$P/index.html")" = hello-port ]; }
  poll 50 up || { curl -s -i -H "Host: 8080-$id.localhost:$pp" "$P/index.html" >&3; false; }
  # Refusals, each in E2B's proxy's words where it has them.
  code() { curl -s -o "$T/body" -w '%{http_code}' -H "Host: $1" ${2:+-H "Origin: $2"} "$P/"; }
  [ "$(code "8081-$id.localhost")" = 502 ]
  grep -q "port is not open" "$T/body"
  [ "$(code "8080-aaaaaaaaaaaaaaaaaaaa.localhost")" = 502 ]
  grep -q "was not found" "$T/body"
  [ "$(code "8080-$id.evil.example")" = 403 ]
  [ "$(code "8080-$id.localhost" http://evil.example)" = 403 ]
  [ "$(code "localhost")" = 404 ]
  [ "$(code "49983-$id.localhost")" = 502 ]
  grep -q "API address" "$T/body"
  # Not HTTP, no Host, a head without an end: refused; the listener goes on.
  python3 - "$pp" <<'PY'
import socket, sys
def ask(data):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), 5)
    s.sendall(data)
    out = s.recv(200)
    s.close()
    return out.split(b"\r\n")[0]
for data, want in ((b"HELLO\r\n\r\n", b"HTTP/1.1 400 Bad Request"),
                   (b"GET / HTTP/1.0\r\n\r\n", b"HTTP/1.1 400 Bad Request"),
                   (b"GET / HTTP/1.1\r\nX: " + b"a" * 20000, b"HTTP/1.1 431 Request Header Fields Too Large")):
    got = ask(data)
    assert got == want, (data[:20], got)
PY
  up
  # A sandbox that ends takes its port with it.
  ax kill "$id" >/dev/null
  local _
  for _ in $(seq 40); do [ "$(code "8080-$id.localhost")" = 502 ] && break; sleep 0.25; done
  [ "$(code "8080-$id.localhost")" = 502 ]
  grep -q "was not found" "$T/body"
}

@test "serve --ports-listen: a non-loopback or bad address is refused (125), nothing listens" {
  local api
  api=127.0.0.1:$(free_port)
  run_ax serve --listen "$api" --api-key "$KEY" --ports-listen 0.0.0.0:1
  assert_agsx_error "--ports-listen"
  assert_output_contains "not a loopback address"
  for a in nope 127.0.0.1 127.0.0.1:99999 '[::1'; do
    run_ax serve --listen "$api" --api-key "$KEY" --ports-listen "$a"
    assert_agsx_error "--ports-listen"
  done
  # One in use: refused too, naming it. The holder binds a port of the
  # kernel's choice and says which (a port picked first and bound later may
  # be taken meanwhile).
  local pp holder _
  python3 -c 'import socket,sys,time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1]))
import os; os.rename(sys.argv[1] + ".tmp", sys.argv[1]); time.sleep(30)' "$T/held" &
  holder=$!
  for _ in $(seq 100); do [ -s "$T/held" ] && break; sleep 0.05; done
  pp=$(cat "$T/held")
  AX_TIMEOUT=15 run_ax serve --listen "$api" --api-key "$KEY" --ports-listen "127.0.0.1:$pp"
  kill "$holder" 2>/dev/null || true
  wait "$holder" 2>/dev/null || true
  assert_agsx_error "127.0.0.1:$pp"
  # and the API's listener went with it
  ! curl -s -o /dev/null --max-time 2 "http://$api/health" || false
}

# A sandbox (busybox httpd on 8080 serving hello-port and 3 MiB of random
# bytes) behind serve --ports-listen with the given options; sets id, pp.
ports_sandbox() {
  ax image load --tag bb "$BB" >/dev/null
  pp=$(free_port)
  api_serve_start --ports-listen "127.0.0.1:$pp" --template box=bb "$@"
  curl -s -X POST -H "X-API-KEY: $KEY" -H 'Content-Type: application/json' \
    -d '{"templateID":"box","timeout":120}' "$U/sandboxes" >"$T/created"
  id=$(jq -r .sandboxID "$T/created")
  [ -n "$id" ] && [ "$id" != null ] || { cat "$T/serve.log" >&3; false; }
  ax exec "$id" sh -c 'mkdir -p /tmp/www && echo hello-port > /tmp/www/index.html &&
    dd if=/dev/urandom of=/tmp/www/big bs=1024 count=3072 2>/dev/null'
  ax exec -d "$id" httpd -f -p 127.0.0.1:8080 -h /tmp/www
}

# curl over TLS to NAME (resolved to loopback here: no DNS) on the ports
# listener, trusting CA.
tls_curl() {
  local ca=$1 name=$2
  shift 2
  curl -s --max-time 20 --cacert "$ca" --resolve "$name:$pp:127.0.0.1" "$@"
}

@test "serve --ports-tls: https by E2B's host names with agsx's own CA, confined to localhost" {
  local id pp ca=$ROOT/tls/ca.pem
  ports_sandbox --ports-tls
  grep -q "ports on https://PORT-ID.localhost:$pp (their domain)" "$T/serve.log"
  grep -q "signed by agsx's CA $ca" "$T/serve.log"
  [ "$(jq -r .domain "$T/created")" = "localhost:$pp" ]
  # The CA: its key only root's, its certificate public, confined by name
  # constraints to localhost and loopback addresses.
  [ "$(stat -c %a "$ROOT/tls/ca-key.pem")" = 600 ]
  [ "$(stat -c %a "$ca")" = 644 ]
  openssl x509 -in "$ca" -noout -text >"$T/ca.txt"
  grep -A4 'Name Constraints: critical' "$T/ca.txt" | grep -q 'DNS:localhost'
  grep -q 'CA:TRUE, pathlen:0' "$T/ca.txt"
  local h=8080-$id.localhost
  up() { [ "$(tls_curl "$ca" "$h" "https://$h:$pp/index.html")" = hello-port ]; }
  poll 50 up || { tls_curl "$ca" "$h" -v "https://$h:$pp/index.html" >&3 2>&1; false; }
  # The leaf names this host (SAN), issued by the CA, verified by curl.
  tls_curl "$ca" "$h" -v -o /dev/null "https://$h:$pp/index.html" 2>"$T/v" || { cat "$T/v" >&3; false; }
  grep -q "subjectAltName: host \"$h\" matched" "$T/v"
  grep -q 'issuer: CN=agsx serve local CA' "$T/v"
  # 3 MiB through TLS, whole.
  [ "$(tls_curl "$ca" "$h" "https://$h:$pp/big" | sha256sum | cut -d' ' -f1)" = \
    "$(ax exec "$id" sha256sum /tmp/www/big | cut -d' ' -f1)" ]
  # The HTTP refusals hold inside TLS.
  [ "$(tls_curl "$ca" "$h" -o /dev/null -w '%{http_code}' -H "Origin: http://evil.example" \
    "https://$h:$pp/")" = 403 ]
  [ "$(tls_curl "$ca" "8081-$id.localhost" -o /dev/null -w '%{http_code}' \
    "https://8081-$id.localhost:$pp/")" = 502 ]
  # A name outside localhost gets no certificate (the handshake fails);
  # plain HTTP gets no answer; neither stops the listener.
  run tls_curl "$ca" evil.example "https://evil.example:$pp/"
  [ "$status" -ne 0 ]
  run curl -s --max-time 5 -H "Host: $h:$pp" "http://127.0.0.1:$pp/index.html"
  [ "$status" -ne 0 ]
  [ -z "$output" ]
  # A client that connects and never says hello is closed after the head's
  # 10 s (no slot held for ever); serve_stop checks that no fd is left.
  python3 - "$pp" <<'PY'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), 5)
s.settimeout(30)
t = time.monotonic()
assert s.recv(100) == b"", "no answer expected"
took = time.monotonic() - t
assert 8 < took < 25, took
PY
  up
  # A restart keeps the CA (a browser that trusts it goes on trusting it).
  local fp
  fp=$(openssl x509 -in "$ca" -noout -fingerprint -sha256)
  serve_stop
  api_serve_start --ports-listen "127.0.0.1:$pp" --ports-tls
  [ "$(openssl x509 -in "$ca" -noout -fingerprint -sha256)" = "$fp" ]
  poll 50 up
}

@test "serve --ports-tls: Chromium that trusts agsx's CA (NSS, as a user does) opens the page" {
  need_chromium
  need_certutil
  local id pp ca=$ROOT/tls/ca.pem
  ports_sandbox --ports-tls
  # A user's Chromium trusts the CA once: its NSS database in ~/.pki/nssdb.
  mkdir -p "$T/home/.pki/nssdb"
  certutil -d "sql:$T/home/.pki/nssdb" -N --empty-password
  certutil -d "sql:$T/home/.pki/nssdb" -A -t C,, -n agsx-serve -i "$ca"
  local url=https://8080-$id.localhost:$pp/index.html
  poll 50 tls_curl "$ca" "8080-$id.localhost" -f -o /dev/null "$url"
  # Chromium resolves *.localhost to loopback itself (no DNS).
  run env HOME="$T/home" timeout 60 chromium --headless --no-sandbox --disable-gpu \
    --user-data-dir="$T/chrome" --dump-dom "$url"
  [[ "$output" == *hello-port* ]] || { printf '%s\n' "$output" | tail -5 >&3; false; }
  # and one that does not trust it gets an error page, not the sandbox's
  run env HOME="$T/home2" timeout 60 chromium --headless --no-sandbox --disable-gpu \
    --user-data-dir="$T/chrome2" --dump-dom "$url"
  [[ "$output" != *hello-port* ]]
}

@test "serve --ports-cert/--ports-key: the user's certificate for *.DOMAIN; bad ones refused (125)" {
  # A certificate for *.box.test and its key, made with openssl.
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj /CN=box.test -addext 'subjectAltName=DNS:*.box.test' \
    -keyout "$T/key.pem" -out "$T/cert.pem" 2>/dev/null
  local id pp
  ports_sandbox --ports-cert "$T/cert.pem" --ports-key "$T/key.pem" --host 10.1.2.3 --host box.test
  [ "$(jq -r .domain "$T/created")" = "box.test:$pp" ]
  grep -q "ports on https://PORT-ID.box.test:$pp" "$T/serve.log"
  run grep -q "agsx's CA" "$T/serve.log"
  [ "$status" -ne 0 ]
  [ ! -e "$ROOT/tls" ]
  local h=8080-$id.box.test
  up() { [ "$(tls_curl "$T/cert.pem" "$h" "https://$h:$pp/index.html")" = hello-port ]; }
  poll 50 up || { tls_curl "$T/cert.pem" "$h" -v "https://$h:$pp/index.html" >&3 2>&1; false; }
  serve_stop
  SRV_PID=
  local api=127.0.0.1:$(free_port) p2=127.0.0.1:$(free_port)
  openssl ecparam -name prime256v1 -genkey -noout -out "$T/other.pem" 2>/dev/null
  run_ax serve --listen "$api" --api-key "$KEY" --ports-listen "$p2" --ports-cert "$T/cert.pem" \
    --ports-key "$T/other.pem"
  assert_agsx_error "is not the certificate's"
  run_ax serve --listen "$api" --api-key "$KEY" --ports-listen "$p2" --ports-cert "$T/nope.pem" \
    --ports-key "$T/key.pem"
  assert_agsx_error "$T/nope.pem"
  run_ax serve --listen "$api" --api-key "$KEY" --ports-listen "$p2" --ports-cert "$T/cert.pem"
  assert_agsx_error "go together"
  run_ax serve --listen "$api" --api-key "$KEY" --ports-tls
  assert_agsx_error "need --ports-listen"
  ! curl -s -o /dev/null --max-time 2 "http://$api/health" || false
}

@test "serve --ports-listen: allowPublicTraffic false: the ports need the traffic access token" {
  ax image load --tag bb "$BB" >/dev/null
  local pp id tok
  pp=$(free_port)
  api_serve_start --ports-listen "127.0.0.1:$pp" --template box=bb
  curl -s -X POST -H "X-API-KEY: $KEY" -H 'Content-Type: application/json' \
    -d '{"templateID":"box","timeout":120,"network":{"allowPublicTraffic":false}}' \
    "$U/sandboxes" >"$T/created"
  id=$(jq -r .sandboxID "$T/created")
  tok=$(jq -r .trafficAccessToken "$T/created")
  [ -n "$id" ] && [ "$id" != null ] || { cat "$T/created" "$T/serve.log" >&3; false; }
  [ ${#tok} = 64 ]
  ax exec "$id" sh -c 'mkdir -p /tmp/www && echo private-port > /tmp/www/index.html'
  ax exec -d "$id" httpd -f -p 127.0.0.1:8080 -h /tmp/www
  local P=http://127.0.0.1:$pp H="Host: 8080-$id.localhost:$pp"
  up() { [ "$(curl -s -H "$H" -H "E2B-Traffic-Access-Token: $tok" "$P/index.html")" = private-port ]; }
  poll 50 up || { curl -s -i -H "$H" -H "E2B-Traffic-Access-Token: $tok" "$P/index.html" >&3; false; }
  # the header's name in any case, as HTTP allows
  [ "$(curl -s -H "$H" -H "e2b-traffic-access-token: $tok" "$P/index.html")" = private-port ]
  # no token, a wrong one, another sandbox's kind of token (envd's): 403
  [ "$(curl -s -o "$T/body" -w '%{http_code}' -H "$H" "$P/index.html")" = 403 ]
  grep -q "traffic access token" "$T/body"
  # (the last digit changed: a token ending in 0 gets a 1)
  local bad=${tok%?}0
  [ "$bad" != "$tok" ] || bad=${tok%?}1
  [ "$(curl -s -o "$T/body" -w '%{http_code}' -H "$H" -H "E2B-Traffic-Access-Token: $bad" \
    "$P/index.html")" = 403 ]
  grep -q "Invalid traffic access token" "$T/body"
  [ "$(curl -s -o /dev/null -w '%{http_code}' -H "$H" \
    -H "E2B-Traffic-Access-Token: $(jq -r .envdAccessToken "$T/created")" "$P/index.html")" = 403 ]
  # A public sandbox beside it needs none; a non-boolean is refused (400).
  [ "$(curl -s -o /dev/null -w '%{http_code}' -X POST -H "X-API-KEY: $KEY" \
    -H 'Content-Type: application/json' -d '{"templateID":"box","network":{"allowPublicTraffic":"no"}}' \
    "$U/sandboxes")" = 400 ]
}

@test "serve --ports-listen: a request to a paused sandbox's port resumes it with autoResume, not without" {
  ax image load --tag bb "$BB" >/dev/null
  local pp id plain
  pp=$(free_port)
  SERVE_LOG_LEVEL=info api_serve_start --ports-listen "127.0.0.1:$pp" --template box=bb
  mk() {
    curl -s -X POST -H "X-API-KEY: $KEY" -H 'Content-Type: application/json' -d "$1" \
      "$U/v2/sandboxes" | jq -r .sandboxID
  }
  id=$(mk '{"templateID":"box","timeout":120,"autoPause":true,"autoResume":{"enabled":true}}')
  plain=$(mk '{"templateID":"box","timeout":120}')
  [ ${#id} = 20 ] && [ ${#plain} = 20 ] || { cat "$T/serve.log" >&3; false; }
  local s
  for s in "$id" "$plain"; do
    ax exec "$s" sh -c 'mkdir -p /tmp/www && echo awake > /tmp/www/index.html'
    ax exec -d "$s" httpd -f -p 127.0.0.1:8080 -h /tmp/www
  done
  get() { curl -s --max-time 10 -o "$T/body" -w '%{http_code}' -H "Host: 8080-$1.localhost:$pp" \
    "http://127.0.0.1:$pp/index.html"; }
  up() { [ "$(get "$1")" = 200 ]; }
  poll 50 up "$id"
  poll 50 up "$plain"
  state() { curl -s -H "X-API-KEY: $KEY" "$U/sandboxes/$1" | jq -r .state; }
  for s in "$id" "$plain"; do
    [ "$(curl -s -o /dev/null -w '%{http_code}' -X POST -H "X-API-KEY: $KEY" "$U/sandboxes/$s/pause")" = 204 ]
    [ "$(state "$s")" = paused ]
  done
  # without autoResume: not running (502), and it stays paused
  [ "$(get "$plain")" = 502 ]
  grep -q "not running" "$T/body"
  [ "$(state "$plain")" = paused ]
  # with it: the request itself is answered, by a running sandbox
  [ "$(get "$id")" = 200 ]
  [ "$(cat "$T/body")" = awake ]
  [ "$(state "$id")" = running ]
  grep -q "resumed sandbox $id on a request to its port 8080" "$T/serve.log"
}

@test "serve: the ports listener from agsx.conf (serve-ports-*), flags replacing it; a bad value refused" {
  local pp api id
  pp=$(free_port)
  printf 'serve-ports-listen = 127.0.0.1:%s\nserve-ports-tls = true\n' "$pp" >"$T/agsx.conf"
  AGSX_CONFIG=$T/agsx.conf api_serve_start --template box=bb
  grep -q "ports on https://PORT-ID.localhost:$pp (their domain)" "$T/serve.log"
  [ -s "$ROOT/tls/ca.pem" ]
  # the listener speaks TLS: a sandbox that is not there, in E2B's words
  [ "$(curl -s --max-time 10 --cacert "$ROOT/tls/ca.pem" \
    --resolve "8080-aaaaaaaaaaaaaaaaaaaa.localhost:$pp:127.0.0.1" -o /dev/null -w '%{http_code}' \
    "https://8080-aaaaaaaaaaaaaaaaaaaa.localhost:$pp/")" = 502 ]
  serve_stop
  SRV_PID=
  # --ports-listen replaces the file's settings, TLS included: plain HTTP
  local p2
  p2=$(free_port)
  AGSX_CONFIG=$T/agsx.conf api_serve_start --ports-listen "127.0.0.1:$p2"
  grep -q "ports on http://PORT-ID.localhost:$p2 (their domain)" "$T/serve.log"
  serve_stop
  SRV_PID=
  api=127.0.0.1:$(free_port)
  printf 'serve-ports-listen = 127.0.0.1:%s\nserve-ports-tls = maybe\n' "$pp" >"$T/agsx.conf"
  AGSX_CONFIG=$T/agsx.conf run_ax serve --listen "$api" --api-key "$KEY"
  assert_agsx_error "serve-ports-tls"
}
