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
  id=$(curl -s -X POST -H "X-API-KEY: $KEY" -H 'Content-Type: application/json' \
    -d '{"templateID":"box","timeout":120}' "$U/sandboxes" | jq -r .sandboxID)
  [ -n "$id" ] && [ "$id" != null ] || { cat "$T/serve.log" >&3; false; }
  ax exec "$id" sh -c 'mkdir -p /tmp/www && echo hello-port > /tmp/www/index.html'
  ax exec -d "$id" httpd -f -p 127.0.0.1:8080 -h /tmp/www
  local P=http://127.0.0.1:$pp
  up() { [ "$(curl -s -H "Host: 8080-$id.localhost:$pp" "$P/index.html")" = hello-port ]; }
  poll 50 up || { curl -s -i -H "Host: 8080-$id.localhost:$pp" "$P/index.html" >&3; false; }
  # Refusals, each in E2B's proxy's words where it has them.
  code() { curl -s -o "$T/body" -w '%{http_code}' -H "Host: $1" ${2:+-H "Origin: $2"} "$P/"; }
  [ "$(code "8081-$id.localhost")" = 502 ] && grep -q "port is not open" "$T/body"
  [ "$(code "8080-aaaaaaaaaaaaaaaaaaaa.localhost")" = 502 ] && grep -q "was not found" "$T/body"
  [ "$(code "8080-$id.evil.example")" = 403 ]
  [ "$(code "8080-$id.localhost" http://evil.example)" = 403 ]
  [ "$(code "localhost")" = 404 ]
  [ "$(code "49983-$id.localhost")" = 502 ] && grep -q "API address" "$T/body"
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
  [ "$(code "8080-$id.localhost")" = 502 ] && grep -q "was not found" "$T/body"
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
