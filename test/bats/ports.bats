#!/usr/bin/env bats
# test-runner: parallel
# Published ports (agsx run -p, agsx port): a host-side relay run by the
# sandbox's supervisor connects each client from inside the sandbox's network
# namespace to 127.0.0.1:PORT. Everything stays on loopback: servers in
# internal sandboxes (busybox httpd and nc, the probe's UDP echo), clients on
# the host (curl, and tcp.py below) on 127.0.0.1 or ::1 only.
#
# Every test has its own store and state dir; teardown stops and collects
# everything (kill --all + gc) and asserts that no supervisor, record or
# cgroup of the test's sandboxes is left.

load helpers

bats_require_minimum_version 1.5.0

setup_file() {
  busybox_setup_file
  export TCP="$BATS_FILE_TMPDIR/tcp.py"
  cat >"$TCP" <<'PY'
# Host-side clients for ports.bats; loopback only.
import hashlib, os, socket, sys, threading, time

def addr(a):
    host, port = a.rsplit(':', 1)
    return host.strip('[]'), int(port)

def connect(a, timeout=10):
    host, port = addr(a)
    assert host in ('127.0.0.1', '::1'), host
    return socket.create_connection((host, port), timeout=timeout)

def read_all(s):
    out = []
    while True:
        b = s.recv(1 << 16)
        if not b:
            return b''.join(out)
        out.append(b)

def http_get(a, path='/'):
    s = connect(a)
    s.sendall(b'GET ' + path.encode() + b' HTTP/1.0\r\nHost: x\r\n\r\n')
    r = read_all(s)
    s.close()
    head, _, body = r.partition(b'\r\n\r\n')
    return head.split(b'\r\n')[0], body

cmd, a = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None
if cmd == 'free':      # a port free right now on 127.0.0.1
    s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])
elif cmd == 'hold':    # hold a listener until killed
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(addr(a)); s.listen(); print('ready', flush=True); time.sleep(3600)
elif cmd == 'bind':    # can a server bind it now (as servers do, SO_REUSEADDR)?
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(addr(a)); s.listen(); print('bound')
elif cmd == 'wait':    # until an HTTP GET gets an answer (the server inside is up)
    for _ in range(100):
        try:
            if http_get(a)[0]:
                print('up'); break
        except OSError:
            pass
        time.sleep(0.05)
    else:
        print('down'); sys.exit(1)
elif cmd == 'get':     # prints the status line and the body's sha256
    line, body = http_get(a, sys.argv[3] if len(sys.argv) > 3 else '/')
    print(line.decode(), len(body), hashlib.sha256(body).hexdigest())
elif cmd == 'send':    # sends a file, shuts the write side, prints the reply
    s = connect(a)
    s.sendall(open(sys.argv[3], 'rb').read())
    s.shutdown(socket.SHUT_WR)
    sys.stdout.write(read_all(s).decode())
elif cmd == 'many':    # N sequential GETs, each must succeed
    n = int(sys.argv[3]); ok = sum(http_get(a)[0].endswith(b'200 OK') for _ in range(n))
    print(ok)
elif cmd == 'conc':    # N concurrent connections held open together, then GETs
    n = int(sys.argv[3]); res = []
    socks = [connect(a) for _ in range(n)]
    def one(s):
        s.sendall(b'GET / HTTP/1.0\r\n\r\n'); res.append(b' 200 OK' in read_all(s).split(b'\r\n')[0])
    ts = [threading.Thread(target=one, args=(s,)) for s in socks]
    [t.start() for t in ts]; [t.join() for t in ts]
    print(sum(res))
elif cmd == 'closed':  # the relay closes (or resets) a connection nobody serves
    t0 = time.monotonic()
    try:
        s = connect(a)  # the reset may come before connect() returns
        r = s.recv(10)
        what = 'closed' if r == b'' else 'data'
    except ConnectionResetError:
        what = 'closed'
    except socket.timeout:
        what = 'hang'
    print(what, 'fast' if time.monotonic() - t0 < 2 else 'slow')
elif cmd == 'idle':    # holds an idle connection; prints how it ended
    s = connect(a, 30); print('open', flush=True)
    try:
        r = s.recv(10); print('eof' if r == b'' else 'data')
    except ConnectionResetError:
        print('eof')
elif cmd == 'refused': # nothing listens on the host port any more
    try:
        connect(a, 2).close(); print('open')
    except ConnectionRefusedError:
        print('refused')
elif cmd == 'udp':     # N datagrams echoed back
    host, port = addr(a)
    assert host in ('127.0.0.1', '::1'), host
    s = socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3); ok = 0
    for i in range(int(sys.argv[3])):
        msg = b'ping %d' % i
        s.sendto(msg, (host, port))
        try:
            ok += s.recvfrom(2048)[0] == msg
        except socket.timeout:
            pass
    print(ok)
PY
}

setup() {
  busybox_setup 60
  mkdir -p "$T/www"
  echo hello >"$T/www/index.html"
}

# The clients the test left in the background; then the default teardown
# (helpers.bash): kill --all + gc, no record, cgroup or supervisor left.
teardown() {
  [ -z "$(jobs -p)" ] || kill $(jobs -p) 2>/dev/null || true
  sandbox_teardown
}

tcp() { timeout 60 python3 "$TCP" "$@"; }

# An httpd in an internal sandbox serving $T/www on port 80 inside.
httpd_args() { echo "-v $T/www:/www:ro busybox httpd -f -p ${1:-80} -h /www"; }

# Waits until SANDBOX has ended (its record says exited).
wait_exited() {
  for _ in $(seq 100); do
    ax ls -a --json | grep -q "\"name\":\"$1\",[^}]*\"status\":\"exited\"" && return 0
    sleep 0.1
  done
  return 1
}

# ---- the basics --------------------------------------------------------------------------

@test "ports: -p IP:HOSTPORT:PORT reaches a server in an internal sandbox (run -d)" {
  local p
  p=$(tcp free)
  rund --name web -p "127.0.0.1:$p:80" $(httpd_args) >/dev/null
  run tcp wait "127.0.0.1:$p"
  [ "$output" = up ]
  run curl -sS -m 5 "http://127.0.0.1:$p/"
  assert_success
  [ "$output" = hello ]
  run_ax port web
  assert_success
  [ "$output" = "80/tcp -> 127.0.0.1:$p" ]
  run_ax port web 80
  [ "$output" = "127.0.0.1:$p" ]
  run_ax ls
  assert_output_contains "127.0.0.1:$p->80/tcp"
  [[ "$(echo "$output" | head -1)" == *PORTS* ]]
  run_ax ls --json
  assert_output_contains "\"ports\":[{\"host_ip\":\"127.0.0.1\",\"host_port\":$p,\"port\":80,\"proto\":\"tcp\"}]"
  run_ax --json port web
  [ "$output" = "[{\"host_ip\":\"127.0.0.1\",\"host_port\":$p,\"port\":80,\"proto\":\"tcp\"}]" ]
  # the record itself
  grep -q "\"host_port\": $p" "$STATE"/*/state.json
}

@test "ports: -p PORT picks a free host port on 127.0.0.1, found with agsx port and ls --json" {
  rund --name web -p 80 -p 127.0.0.1::81 $(httpd_args) >/dev/null
  local a a2
  a=$(ax port web 80)
  [[ "$a" =~ ^127\.0\.0\.1:[0-9]+$ ]]
  [ "${a##*:}" -ne 0 ]
  a2=$(ax port web 81/tcp)
  [[ "$a2" =~ ^127\.0\.0\.1:[0-9]+$ ]]
  [ "$a" != "$a2" ]
  run_ax ls --json
  assert_output_contains "\"host_port\":${a##*:},\"port\":80"
  run tcp wait "$a"
  [ "$output" = up ]
  run tcp get "$a"
  [[ "$output" == "HTTP/1."?" 200 OK 6 "* ]]
  run_ax port web 82
  assert_agsx_error "has no published port 82/tcp"
  run_ax port web 80/udp
  assert_agsx_error "has no published port 80/udp"
  run_ax port web 0
  assert_agsx_error "invalid port"
  run_ax port nosuch
  assert_agsx_error
}

@test "ports: IPv6 [::1] host address" {
  if ! host_has_ipv6_loopback; then
    skip "the host has no IPv6 loopback (::1)"
  fi
  rund --name web -p '[::1]::80' $(httpd_args) >/dev/null
  local a
  a=$(ax port web 80)
  [[ "$a" =~ ^\[::1\]:[0-9]+$ ]]
  run tcp wait "$a"
  [ "$output" = up ]
  run curl -sS -g -m 5 "http://$a/"
  [ "$output" = hello ]
  run_ax ls
  assert_output_contains "[::1]:${a##*:}->80/tcp"
}

@test "ports: a server bound only to 127.0.0.1 inside the sandbox is reached" {
  rund --name web -p 80 $(httpd_args 127.0.0.1:80) >/dev/null
  local a
  a=$(ax port web 80)
  run tcp wait "$a"
  [ "$output" = up ]
  run curl -sS -m 5 "http://$a/"
  [ "$output" = hello ]
}

@test "ports: foreground run publishes too, and frees the port when it ends" {
  local p
  p=$(tcp free)
  ax run --name fg -p "127.0.0.1:$p:80" $(httpd_args) >"$T/fg.out" 2>&1 &
  local pid=$!
  run tcp wait "127.0.0.1:$p"
  [ "$output" = up ]
  run curl -sS -m 5 "http://127.0.0.1:$p/"
  [ "$output" = hello ]
  run_ax kill fg
  assert_success
  wait "$pid" || true
  run tcp refused "127.0.0.1:$p"
  [ "$output" = refused ]
  run tcp bind "127.0.0.1:$p"
  [ "$output" = bound ]
}

@test "ports: UDP echo through -p PORT/udp, several clients, IPv4 and IPv6" {
  rund --name u -p 7/udp -p 127.0.0.1::7/udp busybox probe listen-udp 7 >/dev/null
  local a
  for a in $(ax port u 7/udp); do
    run tcp udp "$a" 5
    [ "$output" = 5 ] || { echo "# $a: $output" >&3; false; }
  done
  # a second client address is a second flow
  run tcp udp "$(ax port u 7/udp | head -1)" 3
  [ "$output" = 3 ]
  run_ax port u
  [[ "$output" == *"7/udp -> 127.0.0.1:"*"7/udp -> 127.0.0.1:"* ]]
}

# ---- TCP behaviour ------------------------------------------------------------------------

@test "ports: many sequential and concurrent connections" {
  rund --name web -p 80 $(httpd_args) >/dev/null
  local a
  a=$(ax port web 80)
  run tcp wait "$a"
  run tcp many "$a" 200
  [ "$output" = 200 ]
  run tcp conc "$a" 30
  [ "$output" = 30 ]
  # the relay kept nothing: all its connections closed with the clients'
  run tcp many "$a" 20
  [ "$output" = 20 ]
}

@test "ports: large transfers both ways keep every byte (checksums)" {
  heavy
  head -c 6000000 /dev/urandom >"$T/www/big"
  local want
  want=$(sha256sum <"$T/www/big" | cut -d' ' -f1)
  rund --name web -p 80 $(httpd_args) >/dev/null
  rund --name up -p 81 busybox nc -ll -p 81 -e sha256sum >/dev/null
  local a
  a=$(ax port web 80)
  run tcp wait "$a"
  # host <- sandbox
  run curl -sS -m 30 "http://$a/big" -o "$T/got"
  assert_success
  [ "$(sha256sum <"$T/got" | cut -d' ' -f1)" = "$want" ]
  # host -> sandbox: the reply only comes after our EOF went through
  run tcp send "$(ax port up 81)" "$T/www/big"
  [ "$output" = "$want  -" ]
}

@test "ports: half-close: the client shuts its write side and still gets the reply" {
  printf 'some bytes\n' >"$T/small"
  rund --name up -p 81 busybox nc -ll -p 81 -e sha256sum >/dev/null
  local a i
  a=$(ax port up 81)
  for i in $(seq 50); do
    run tcp send "$a" "$T/small"
    [ "$status" -eq 0 ] && [ -n "$output" ] && break
    sleep 0.1
  done
  [ "$output" = "$(sha256sum <"$T/small" | cut -d' ' -f1)  -" ]
}

@test "ports: a port nobody serves inside: the client's connection closes at once" {
  rund --name idle -p 80 busybox sleep 60 >/dev/null
  run tcp closed "$(ax port idle 80)"
  [ "$output" = "closed fast" ]
  # and again: the relay is still fine
  run tcp closed "$(ax port idle 80)"
  [ "$output" = "closed fast" ]
}

@test "ports: the sandbox still cannot connect out (internal), even to a host loopback listener" {
  local p
  p=$(tcp free)
  # not through tcp(): `kill %1` must reach python itself, not a shell
  # around it (an orphan would hold bats' fds for a minute)
  python3 "$TCP" hold "127.0.0.1:$p" >"$T/hold" 2>&1 3>&- &
  for _ in $(seq 50); do grep -q ready "$T/hold" && break; sleep 0.05; done
  run_ax run --rm -p 80 busybox probe connect 127.0.0.1 "$p"
  assert_success
  [[ "$output" == "connect 127.0.0.1:$p: failed"* ]]
  run_ax run --rm -p 80 busybox probe connect 198.18.0.1 80 500
  [[ "$output" == *"failed"* ]]
  kill %1
}

# ---- errors: refused with nothing made -------------------------------------------------------

@test "ports: a host port in use refuses the start (125) and leaves no record" {
  local p
  p=$(tcp free)
  # not through tcp(): `kill %1` must reach python itself, not a shell
  # around it (an orphan would hold bats' fds for a minute)
  python3 "$TCP" hold "127.0.0.1:$p" >"$T/hold" 2>&1 3>&- &
  for _ in $(seq 50); do grep -q ready "$T/hold" && break; sleep 0.05; done
  run_ax run --rm -p "127.0.0.1:$p:80" busybox true
  assert_agsx_error "agsx: port 127.0.0.1:$p is already in use"
  run_ax run -d --name d -p 80 -p "127.0.0.1:$p:81" busybox sleep 10
  assert_agsx_error "agsx: port 127.0.0.1:$p is already in use"
  run_ax ls -a --json
  [ "$output" = "[]" ]
  [ -z "$(ls "$STATE" 2>/dev/null | grep -xE '[0-9a-f]{32}')" ]
  [ ! -e "$STATE/names/d" ]
  kill %1
}

@test "ports: malformed -p specs are refused with exit 125" {
  local spec
  for spec in 0 65536 -1 80x abc 198.18.3:80:80 198.18.3.4.5:80:80 ::1:80:80 '[::1]80:80' \
              '[198.18.3.4]:80:80' '[::1]:80' 127.0.0.1:70000:80 127.0.0.1:80:0 80/sctp 80/ \
              80/TCP '' : :: ::: 1:2:3:4 ' 80' '8 0' 127.0.0.1:-1:80 +80 00000080 \
              'localhost:80:80' '[fe80::1%lo]:80:80'; do
    run_ax run --rm -p "$spec" busybox true
    assert_agsx_error || { echo "# spec: '$spec'" >&3; false; }
  done
  run_ax run --rm -p 127.0.0.1:18080:80 -p 127.0.0.1:18080:81 busybox true
  assert_agsx_error "port 127.0.0.1:18080/tcp is published twice"
  [ -z "$(ls "$STATE" 2>/dev/null | grep -xE '[0-9a-f]{32}')" ]
}

# ---- the end of a sandbox frees its ports ----------------------------------------------------

@test "ports: after exit, kill and timeout the host port is closed and rebindable at once" {
  local p
  p=$(tcp free)
  # exit (foreground), after relayed connections
  run_ax run --rm -p "127.0.0.1:$p:80" busybox true
  assert_success
  run tcp refused "127.0.0.1:$p"
  [ "$output" = refused ]
  # kill (-d), after relayed connections: a new sandbox binds it again at once
  rund --name k -p "127.0.0.1:$p:80" $(httpd_args) >/dev/null
  run tcp wait "127.0.0.1:$p"
  run tcp many "127.0.0.1:$p" 5
  [ "$output" = 5 ]
  ax kill k >/dev/null
  run tcp refused "127.0.0.1:$p"
  [ "$output" = refused ]
  rund --name k2 -p "127.0.0.1:$p:80" $(httpd_args) >/dev/null
  run tcp wait "127.0.0.1:$p"
  [ "$output" = up ]
  ax kill k2 >/dev/null
  # timeout (-d)
  rund --name t --timeout 1s -p "127.0.0.1:$p:80" -p "127.0.0.1:$p:80/udp" busybox sleep 60 >/dev/null
  wait_exited t
  run tcp refused "127.0.0.1:$p"
  [ "$output" = refused ]
  run tcp bind "127.0.0.1:$p"
  [ "$output" = bound ]
  run_ax port t
  assert_agsx_error "is not running"
}

@test "ports: open relayed connections do not hold up kill or the deadline; they end with it" {
  rund --name web -p 80 $(httpd_args) >/dev/null
  local a
  a=$(ax port web 80)
  run tcp wait "$a"
  tcp idle "$a" >"$T/idle1" &
  tcp idle "$a" >"$T/idle2" &
  # both connected before the kill (waiting for one raced the other's connect)
  for _ in $(seq 100); do grep -q open "$T/idle1" && grep -q open "$T/idle2" && break; sleep 0.05; done
  run_ax kill web
  assert_success
  wait
  [ "$(cat "$T/idle1")" = $'open\neof' ]
  [ "$(cat "$T/idle2")" = $'open\neof' ]
  # the deadline too
  # (room for the start and the connect on a loaded host: the connection
  # must be open before the deadline for the test to mean anything)
  rund --name dl --timeout 6s -p 80 $(httpd_args) >/dev/null
  a=$(ax port dl 80)
  run tcp wait "$a"
  tcp idle "$a" >"$T/idle3" &
  for _ in $(seq 100); do grep -q open "$T/idle3" && break; sleep 0.05; done
  wait_exited dl
  wait
  [ "$(cat "$T/idle3")" = $'open\neof' ]
}

@test "ports: 3000 connections to a published port with 1024 fds: no spin, update and kill answered" {
  # The supervisor (and the sandbox) get a 1024 fd limit, soft and hard; the
  # httpd inside keeps each connection open (it waits for a request).
  id=$(ulimit -n 1024 && ax run -d --name flood --timeout 1m -p 80 $(httpd_args)) || false
  echo "$id" >>"$T/ids"
  local a sup
  a=$(ax port flood 80)
  run tcp wait "$a"
  [ "$output" = up ]
  sup=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["supervisor"]["pid"])' \
    "$STATE/$id/state.json")
  "$PROBE" hold "${a%:*}" "${a##*:}" 3000 5000 >"$T/hold.out" 2>&1 3>&- &
  local i
  for i in $(seq 100); do grep -q established "$T/hold.out" && break; sleep 0.1; done
  grep -q established "$T/hold.out" || { cat "$T/hold.out" >&3; false; }
  # No busy loop: at most 20% of a CPU over 2 s while the flood is held.
  local c0 c1
  c0=$(awk '{print $14 + $15}' "/proc/$sup/stat")
  sleep 2
  c1=$(awk '{print $14 + $15}' "/proc/$sup/stat")
  [ $((c1 - c0)) -lt 40 ] || { echo "# the supervisor used $((c1 - c0)) ticks in 2 s" >&3; false; }
  # An update is heard (it rereads the record: fds): the new deadline ends it.
  local t0=$(($(date +%s%N) / 1000000)) dt
  run_ax update --timeout 2s flood
  assert_success
  wait_exited flood || { echo "# still running 10 s after update --timeout 2s" >&3; false; }
  dt=$(($(date +%s%N) / 1000000 - t0))
  [ "$dt" -lt 8000 ] || { echo "# ended $dt ms after the update" >&3; false; }
  run_ax ls -a --json
  assert_output_contains '"stop_reason":"timeout"'
  # And a stop, on a second flooded sandbox.
  id=$(ulimit -n 1024 && ax run -d --name flood2 --timeout 1m -p 80 $(httpd_args)) || false
  echo "$id" >>"$T/ids"
  a=$(ax port flood2 80)
  run tcp wait "$a"
  "$PROBE" hold "${a%:*}" "${a##*:}" 3000 5000 >"$T/hold2.out" 2>&1 3>&- &
  for i in $(seq 100); do grep -q established "$T/hold2.out" && break; sleep 0.1; done
  t0=$(($(date +%s%N) / 1000000))
  run_ax kill flood2
  dt=$(($(date +%s%N) / 1000000 - t0))
  assert_success
  refute_output_contains "does not answer"
  # (the supervisor answers within its stop, 2 s of grace and the
  # teardown, or the client escalates and says so: refuted above; the
  # bound leaves the client's own start room on a loaded host)
  [ "$dt" -lt 6000 ] || { echo "# kill took $dt ms" >&3; false; }
  kill $(jobs -p) 2>/dev/null || true
}
