#!/usr/bin/env bats
# test-runner: parallel
# Network modes end to end: internal, public and vpc, with their rules.
#
# Everything runs inside an outer network+mount namespace made by
# test/fixtures/networld, with a "world" namespace on 198.18.0.0/24 playing
# the internet (HTTP on 198.18.0.2:80, a name server on 198.18.0.2:53 and a
# metadata service on 169.254.169.254:80) and services of the "host" on
# 0.0.0.0:8081 of the outer namespace. Sandboxes get addresses from
# 198.19.0.0/16. No packet leaves the outer namespace; nothing is sent from
# the host's own namespace.

load helpers

setup_file() { networld_setup_file; }
teardown_file() { networld_teardown_file; }

setup() { busybox_setup; }

# The address of sandbox $1.
addr_of() {
  nax ls --json | python3 -c '
import json, sys
for s in json.load(sys.stdin):
    if s["name"] == sys.argv[1]: print(s["address"])' "$1"
}

# The default teardown (helpers.bash) then stops and collects the sandboxes
# in the outer namespace and checks it: no link, nft table or lease left.
teardown() {
  [ ! -f "$T/holder.pid" ] || kill "$(cat "$T/holder.pid")" 2>/dev/null || true
  sandbox_teardown
}

@test "network: internal reaches nothing, not even the world" {
  run_nax run --rm busybox sh -c 'probe connect 198.18.0.2 80 1000; ip -o link | wc -l'
  assert_success
  [[ "${lines[0]}" == "connect 198.18.0.2:80: failed (errno=ENETUNREACH)" ]] || { show_run; false; }
  [ "${lines[1]}" = 1 ] || { show_run; false; } # lo only
}

@test "network: public reaches the world; its address, route, hosts and resolv.conf" {
  run_nax run --rm --network public busybox sh -c \
    'probe http 198.18.0.2 80; ip -4 -o addr show eth0; ip route; grep -c . /etc/hosts; cat /etc/resolv.conf'
  assert_success
  [ "${lines[0]}" = "http 198.18.0.2:80: world" ] || { show_run; false; }
  [[ "$output" == *"inet 198.19.0."*"/24"* ]] || { show_run; false; }
  [[ "$output" == *"default via 198.19.0.1 dev eth0"* ]] || { show_run; false; }
  [[ "$output" == *"nameserver 127.0.0.11"* ]] || { show_run; false; }
  # IPv6 is off on eth0 (the rules are IPv4 only) and on the bridge (a
  # kernel without IPv6 has no such switch: no address at all then).
  if host_has_ipv6; then
    run_nax run --rm --network public busybox sh -c \
      'cat /proc/sys/net/ipv6/conf/eth0/disable_ipv6; ip -6 addr show dev eth0 | grep -c inet6'
    [ "$output" = $'1\n0' ] || { show_run; false; }
    [ "$(outer cat /proc/sys/net/ipv6/conf/agsx0/disable_ipv6)" = 1 ]
  else
    run_nax run --rm --network public busybox sh -c 'ip -6 addr show 2>/dev/null | grep -c inet6'
    [ "$output" = 0 ] || { show_run; false; }
  fi
}

@test "network: public does not reach the host, its gateway, metadata or private ranges" {
  run_nax run --rm --network public busybox sh -c '
    probe http 198.18.0.1 8081 1000
    probe http 198.19.0.1 8081 1000
    probe http 169.254.169.254 80 1000
    probe connect 127.0.0.1 8081 500'
  assert_success
  [ "${lines[0]}" = "http 198.18.0.1:8081: timeout" ] || { show_run; false; }
  [ "${lines[1]}" = "http 198.19.0.1:8081: timeout" ] || { show_run; false; }
  [ "${lines[2]}" = "http 169.254.169.254:80: timeout" ] || { show_run; false; }
  [[ "${lines[3]}" == "connect 127.0.0.1:8081: failed (errno=ECONNREFUSED)" ]] || { show_run; false; }
  # The same services answer from the outer namespace: the rules did it.
  run outer python3 -c 'import urllib.request as u; print(u.urlopen("http://198.18.0.1:8081/", timeout=2).read().decode().strip())'
  [ "$output" = host ]
}

@test "network: a public sandbox does not reach another one" {
  run_nax run -d --name s1 --network public busybox probe listen 8080
  assert_success
  wait_listen s1 8080
  local a1
  a1=$(addr_of s1)
  [[ $a1 == 198.19.0.* ]]
  run_nax run --rm --network public busybox sh -c "probe connect $a1 8080 1000; probe connect 198.18.0.2 80"
  assert_success
  [ "${lines[0]}" = "connect $a1:8080: timeout" ] || { show_run; false; }
  [ "${lines[1]}" = "connect 198.18.0.2:80: ok" ] || { show_run; false; }
  # s1 itself serves: from inside it answers.
  run_nax exec s1 probe connect 127.0.0.1 8080
  [ "$output" = "connect 127.0.0.1:8080: ok" ] || { show_run; false; }
}

@test "network: a sandbox cannot send with another address (no raw, packet, transparent sockets)" {
  run_nax run -d --name s1 --network public busybox sleep 60
  assert_success
  local a1
  a1=$(addr_of s1)
  run_nax run --rm --network public busybox probe spoof "$a1" 198.18.0.2 9
  assert_success
  [[ "$output" == "raw=EPERM packet=EPERM transparent=EPERM freebind-send="* ]] || { show_run; false; }
  [[ "$output" != *"freebind-send=ok"* ]] || { show_run; false; }
}

@test "network: sandbox root cannot change its addresses, routes or links" {
  run_nax run --rm --network public busybox sh -c '
    ip addr add 198.19.0.250/24 dev eth0 2>/dev/null && echo addr-added
    ip route del default 2>/dev/null && echo route-deleted
    ip link set eth0 down 2>/dev/null && echo link-down
    ip link add x0 type dummy 2>/dev/null && echo link-added
    probe http 198.18.0.2 80'
  assert_success
  [ "$output" = "http 198.18.0.2:80: world" ] || { show_run; false; }
}

@test "network: public sandboxes resolve names through the relay" {
  run_nax run --rm --network public busybox probe resolve www.example.test
  assert_success
  [ "$output" = "resolve www.example.test: 198.18.0.2" ] || { show_run; false; }
}

@test "network: the record and ls show the network and the address" {
  run_nax run -d --name s1 --network public busybox sleep 60
  assert_success
  run_nax ls
  [[ "$output" == *"public"*"198.19.0."* ]] || { show_run; false; }
  run_nax ls --json
  [[ "$output" == *'"network":"public"'* ]] || { show_run; false; }
}

@test "network: every address is released; public start after kill reuses nothing stale" {
  local i
  for i in 1 2 3; do
    run_nax run --rm --network public busybox probe http 198.18.0.2 80
    [ "$output" = "http 198.18.0.2:80: world" ] || { show_run; false; }
  done
  # Leases are free (unlocked) once the sandboxes ended.
  run outer sh -c 'for f in /run/agsx-net/agsx0/198.*; do flock -n "$f" true || echo "held $f"; done'
  [ -z "$output" ] || { echo "$output" >&3; false; }
}

@test "network: vpc members reach each other; non-members and the world do not" {
  run_nax network create team --subnet 198.19.1.0/24
  assert_success
  [ "$output" = team ]
  run_nax run -d --name a --network vpc:team busybox probe listen 8080
  assert_success
  wait_listen a 8080
  local aa
  aa=$(addr_of a)
  [[ $aa == 198.19.1.* ]] || { echo "address $aa" >&3; false; }
  run_nax run --rm --network vpc:team busybox sh -c "probe connect $aa 8080; probe http 198.18.0.2 80 1000; probe http 198.19.1.1 8081 1000"
  assert_success
  [ "${lines[0]}" = "connect $aa:8080: ok" ] || { show_run; false; }
  [ "${lines[1]}" = "http 198.18.0.2:80: timeout" ] || { show_run; false; }
  [ "${lines[2]}" = "http 198.19.1.1:8081: timeout" ] || { show_run; false; }
  # Not from a public sandbox, nor from the world.
  run_nax run --rm --network public busybox probe connect "$aa" 8080 1000
  [ "$output" = "connect $aa:8080: timeout" ] || { show_run; false; }
  run world timeout 5 python3 -c "
import socket, sys
s = socket.socket(); s.settimeout(1)
try: s.connect(('$aa', 8080)); print('ok')
except Exception as e: print('blocked')"
  [ "$output" = blocked ] || { echo "$output" >&3; false; }
}

@test "network: vpc rules open an allowed port and keep a denied one shut, both directions" {
  run_nax network create team --subnet 198.19.2.0/24 --allow "out tcp/80 198.18.0.0/24"
  assert_success
  # b: reachable from the world on 9000 only, and denies 8081 even to members.
  run_nax run -d --name b --network vpc:team --allow "in tcp/9000 198.18.0.0/24" \
    --deny "in tcp/8081" busybox sh -c 'probe listen 9000 & probe listen 9001 & probe listen 8080 & probe listen 8081 & wait'
  assert_success
  wait_listen b 9000 && wait_listen b 9001 && wait_listen b 8081
  local ab
  ab=$(addr_of b)
  # Out: tcp/80 to the world is allowed; the metadata service never is.
  run_nax run --rm --network vpc:team --allow "out all 169.254.169.254" busybox sh -c \
    "probe http 198.18.0.2 80; probe http 169.254.169.254 80 1000; probe connect $ab 8080; probe connect $ab 8081 1000"
  assert_success
  [ "${lines[0]}" = "http 198.18.0.2:80: world" ] || { show_run; false; }
  [ "${lines[1]}" = "http 169.254.169.254:80: timeout" ] || { show_run; false; }
  [ "${lines[2]}" = "connect $ab:8080: ok" ] || { show_run; false; }
  [ "${lines[3]}" = "connect $ab:8081: timeout" ] || { show_run; false; }
  # In: the world reaches 9000, not 9001.
  run world timeout 5 python3 -c "
import socket
for p in (9000, 9001):
    s = socket.socket(); s.settimeout(1)
    try: s.connect(('$ab', p)); print(p, 'ok')
    except Exception: print(p, 'blocked')"
  [ "$output" = $'9000 ok\n9001 blocked' ] || { echo "$output" >&3; false; }
}

@test "network: vpc rules file; run rules only on vpc" {
  printf '# web\nallow out tcp/80 198.18.0.0/24\n\ndeny out tcp/81\n' >"$T/rules"
  run_nax network create team --subnet 198.19.3.0/24 --rules "$T/rules"
  assert_success
  run_nax network inspect team
  assert_success
  [[ "$output" == *'"rules":["allow out tcp/80 198.18.0.0/24","deny out tcp/81 0.0.0.0/0"]'* ]] || { show_run; false; }
  run_nax run --rm --network vpc:team busybox probe http 198.18.0.2 80
  [ "$output" = "http 198.18.0.2:80: world" ] || { show_run; false; }
  run_nax run --rm --network public --allow "out tcp/80" busybox true
  assert_agsx_error "are for vpc networks"
  run_nax run --rm --allow "out tcp/80" busybox true
  assert_agsx_error "are for vpc networks"
}

@test "network: create, ls, inspect and rm" {
  run_nax network create one --subnet 198.19.4.0/24
  assert_success
  run_nax network ls
  assert_success
  [[ "${lines[1]}" == "public "*"198.19.0.0/24"*"agsx0"* ]] || { show_run; false; }
  [[ "${lines[2]}" == "one "*"vpc"*"198.19.4.0/24"*"agsxv"* ]] || { show_run; false; }
  run_nax network ls -q
  [ "$output" = $'public\none' ] || { show_run; false; }
  run_nax network inspect one
  [[ "$output" == *'"name":"one"'*'"subnet":"198.19.4.0/24"'*'"gateway":"198.19.4.1"'*'"sandboxes":0'* ]] || { show_run; false; }
  run_nax run -d --name m --network vpc:one busybox sleep 60
  assert_success
  run_nax network rm one
  assert_agsx_error "network \`one\` is in use by 1 sandbox"
  run_nax kill m
  assert_success
  run_nax network rm one
  assert_success
  [ "$output" = one ]
  run_nax network ls -q
  [ "$output" = public ]
  [ -z "$(outer ip -o link show | grep agsxv || true)" ]
}

@test "network: exact errors, nothing half-made" {
  run_nax network create one --subnet 198.19.5.0/24
  assert_success
  run_nax network create two --subnet 198.19.5.128/25
  assert_agsx_error "overlaps network \`one\`"
  run_nax network create two --subnet 198.19.0.0/16
  assert_agsx_error "overlaps the public network"
  run_nax network create one --subnet 198.19.6.0/24
  assert_agsx_error "already exists"
  run_nax network create two --subnet 198.18.0.0/16
  assert_agsx_error "overlaps the host's network 198.18.0.0/24 on \`wo0\`"
  run_nax network create two --subnet 198.19.6.1/24
  assert_agsx_error "did you mean 198.19.6.0/24"
  run_nax network create two --subnet 198.19.6.0/33
  assert_agsx_error "invalid CIDR"
  run_nax network create two
  assert_agsx_error "--subnet CIDR is required"
  run_nax network create Bad --subnet 198.19.6.0/24
  assert_agsx_error "invalid network name"
  run_nax network create two --subnet 198.19.6.0/24 --allow "out tcp/99999"
  assert_agsx_error "is not a port"
  printf 'allow out tcp/80\nallow sideways tcp/1\n' >"$T/bad"
  run_nax network create two --subnet 198.19.6.0/24 --rules "$T/bad"
  assert_agsx_error "$T/bad:2:"
  run_nax run --rm --network vpc:nope busybox true
  assert_agsx_error "no such network \`nope\`"
  run_nax run --rm --network vpc:Bad busybox true
  assert_agsx_error "invalid network name"
  run_nax run --rm --network bridge busybox true
  assert_agsx_error "invalid network \`bridge\`"
  run_nax network rm public
  assert_agsx_error "cannot be removed"
  run_nax network ls -q
  [ "$output" = $'public\none' ] || { show_run; false; }
}

@test "network: an exhausted subnet is an error and leaves nothing" {
  run_nax network create tiny --subnet 198.19.7.0/29
  assert_success
  local i
  for i in 1 2 3 4 5; do
    run_nax run -d --network vpc:tiny busybox sleep 60
    assert_success
  done
  run_nax run --rm --network vpc:tiny busybox true
  assert_agsx_error "network \`tiny\` has no free address"
  [ "$(nax ls -q | wc -l)" -eq 5 ]
  run outer nft list chain inet agsx forward
  assert_success
  [ "$(outer nft list ruleset | grep -c 'chain e_')" -eq 5 ]
}

@test "network: a public sandbox's bridge address clash is refused" {
  run_nax run --rm --network public busybox true
  assert_success
  # agsx0 exists now only if a sandbox runs; make one hold it, then ask for
  # another subnet.
  run_nax run -d --name s1 --network public busybox sleep 60
  assert_success
  run nsenter -t "$OUTER" --net --mount -- env AGSX_PUBLIC_SUBNET=198.19.9.0/24 \
    "$AGSX" --root "$ROOT" --state "$STATE" run --rm --network public busybox true
  assert_agsx_error "exists with subnet 198.19.0.0/24, not 198.19.9.0/24"
}

# A bridge with no address of its own takes its ports' lowest: when that
# port went, every sandbox that had learnt the gateway's address (for up to
# ~45 s) sent into the void, and one in 20 started together timed out.
# osys: a command in the outer namespace with its own sysfs on /sys (the
# outer mount namespace has the host's).
osys() { outer unshare -m sh -c 'mount -t sysfs sysfs /sys && exec "$@"' _ "$@"; }
# ... with the cgroup trees kept under it (for agsx itself).
osys_cg() {
  mkdir -p "$T/cg"
  outer unshare -m sh -c 'mount --rbind /sys/fs/cgroup "$0" && mount -t sysfs sysfs /sys &&
    mount --move "$0" /sys/fs/cgroup && exec "$@"' "$T/cg" "$@"
}
@test "network: the gateway keeps its MAC address while sandboxes come and go" {
  # (its own cgroup parent: the gc below collects young cgroups)
  private_cgroup_parent
  local i mac
  run_nax run -d --name b --network public busybox sleep 120
  assert_success
  for i in 1 2 3 4; do
    run_nax run -d --name "a$i" --network public busybox sleep 120
    assert_success
  done
  [ "$(osys cat /sys/class/net/agsx0/addr_assign_type)" = 3 ] # NET_ADDR_SET
  mac=$(osys cat /sys/class/net/agsx0/address)
  [ "$mac" = 02:41:c6:13:00:01 ] # the gateway's, 198.19.0.1
  run_nax exec b probe http 198.18.0.2 80 3000
  [ "$output" = "http 198.18.0.2:80: world" ] || { show_run; false; }
  for i in 1 2 3 4; do nax kill "a$i" >/dev/null; done
  for i in 1 2 3 4; do nax wait "a$i" >/dev/null || true; done
  [ "$(osys cat /sys/class/net/agsx0/address)" = "$mac" ]
  run_nax exec b sh -c 'probe http 198.18.0.2 80 3000; ip neigh show 198.19.0.1'
  [ "${lines[0]}" = "http 198.18.0.2:80: world" ] || { show_run; false; }
  [[ "${lines[1]}" == *"lladdr $mac "* ]] || { show_run; false; }
  nax kill b >/dev/null
  nax wait b >/dev/null || true
  # A bridge an older agsx made (no address of its own) is given its
  # present one by the next start (which sees the namespace's own /sys).
  AGSX_GC_MIN_AGE=0 nax gc >/dev/null
  outer ip link del agsx0 2>/dev/null || true
  outer ip link add agsx0 type bridge
  outer ip addr add 198.19.0.1/24 dev agsx0
  outer ip link set agsx0 up
  [ "$(osys cat /sys/class/net/agsx0/addr_assign_type)" != 3 ]
  mac=$(osys cat /sys/class/net/agsx0/address)
  run osys_cg env AGSX_PUBLIC_SUBNET=198.19.0.0/24 AGSX_PULL=never \
    "$AGSX" --root "$ROOT" --state "$STATE" run --rm --network public busybox probe http 198.18.0.2 80 3000
  [ "$output" = "http 198.18.0.2:80: world" ] || { show_run; false; }
  [ "$(osys cat /sys/class/net/agsx0/addr_assign_type)" = 3 ]
  [ "$(osys cat /sys/class/net/agsx0/address)" = "$mac" ]
}

@test "network: a killed supervisor's lease and rules are removed by gc" {
  # gc with AGSX_GC_MIN_AGE=0 collects every empty sandbox cgroup (the
  # cgroup tree is the host's): only this test's
  private_cgroup_parent
  run_nax network create team --subnet 198.19.8.0/24
  assert_success
  run_nax run -d --name v --network vpc:team busybox sleep 60
  assert_success
  local sup
  sup=$(python3 -c 'import json,sys,glob; print(json.load(open(glob.glob(sys.argv[1] + "/*/state.json")[0]))["supervisor"]["pid"])' "$STATE")
  kill -9 "$sup"
  sleep 0.5
  [ "$(outer nft list ruleset | grep -c 'chain e_')" -eq 1 ]
  AGSX_GC_MIN_AGE=0 run_nax gc
  assert_success
  [ "$(outer nft list ruleset 2>/dev/null | grep -c 'chain e_')" -eq 0 ]
  run_nax network rm team
  assert_success
}

@test "network: gc that cannot check a bridge says which and why (never \"unknown error\")" {
  # A file where a bridge's lease directory belongs (networld's private
  # /run/agsx-net): gc goes on, then fails with that one reason.
  outer touch /run/agsx-net/agsxbroken0
  run_nax gc
  outer rm -f /run/agsx-net/agsxbroken0
  assert_agsx_error "gc: network bridge \`agsxbroken0\`: open \`/run/agsx-net/agsxbroken0\`: Not a directory"
  refute_output_contains "unknown error"
}

@test "network: 20 public sandboxes at once, then nothing left" {
  heavy
  local i pids=()
  for i in $(seq 20); do
    nax run --rm --network public busybox probe http 198.18.0.2 80 10000 >"$T/out.$i" 2>&1 &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i"; done
  for i in $(seq 20); do
    [ "$(cat "$T/out.$i")" = "http 198.18.0.2:80: world" ] || { cat "$T/out.$i" >&3; false; }
  done
}

@test "network: -p reaches servers in public and vpc sandboxes from the host" {
  run_nax network create team --subnet 198.19.10.0/24
  assert_success
  run_nax run -d --name pub --network public -p 127.0.0.1:18080:8080 busybox probe listen 8080
  assert_success
  run_nax run -d --name vpc --network vpc:team -p 127.0.0.1:18081:8080 busybox probe listen 8080
  assert_success
  wait_listen pub 8080 && wait_listen vpc 8080
  local p
  for p in 18080 18081; do
    run outer timeout 5 python3 -c "
import socket
s = socket.create_connection(('127.0.0.1', $p), timeout=3)
print(s.makefile().readline().strip())"
    [ "$output" = "probe 8080" ] || { echo "port $p: $output" >&3; false; }
  done
  run_nax ls
  [[ "$output" == *"127.0.0.1:18080->8080/tcp"* ]] || { show_run; false; }
}

@test "network: agsx build runs RUN steps on the public network by default, with DNS" {
  mkdir -p "$T/ctx"
  printf 'FROM busybox\nRUN probe resolve pkg.example.test >/fetched && probe http 198.18.0.2 80 >>/fetched\n' >"$T/ctx/Dockerfile"
  run_nax build -q -t fetched:1 "$T/ctx"
  assert_success
  run_nax run --rm fetched:1 cat /fetched
  assert_success
  [ "$output" = $'resolve pkg.example.test: 198.18.0.2\nhttp 198.18.0.2:80: world' ] || { show_run; false; }
  # --network internal: the same step cannot reach the world.
  printf 'FROM busybox\nRUN probe http 198.18.0.2 80 1000 | grep -q world\n' >"$T/ctx/Dockerfile"
  run_nax build -q --network internal "$T/ctx"
  assert_status 125
  [[ "$output" == *"Dockerfile:2: RUN failed with exit code 1"* ]] || { show_run; false; }
}

# ---- the supervisor's fds under a flood of relayed connections ----------------

# The CPU time (clock ticks) process $1 has used: utime + stime.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# A command with a 1024 fd limit, soft and hard (run runs it in a subshell).
fd_limit_1024() { ulimit -n 1024 && "$@"; }

@test "network: 3000 TCP connections to the DNS relay: the supervisor neither spins nor ignores kill" {
  # A TCP "name server" in the world that accepts every connection and holds it,
  # so that the relay's connections stay open (the supervisor has 1024 fds).
  nsenter -t "$WORLD" --net -- python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("198.18.0.2", 53)); s.listen(4096)
print("ready", flush=True)
held = []
while True:
    held.append(s.accept()[0])' >"$T/holder.out" 2>&1 3>&- &
  echo $! >"$T/holder.pid"
  local i
  for i in $(seq 50); do grep -q ready "$T/holder.out" && break; sleep 0.1; done
  grep -q ready "$T/holder.out" || { cat "$T/holder.out" >&3; false; }
  # The supervisor (and the sandbox) get a 1024 fd limit, soft and hard.
  run fd_limit_1024 nax run -d --name flood --network public --timeout 1m busybox \
    sh -c 'probe hold 127.0.0.11 53 3000 8000 >/tmp/hold.out 2>&1'
  assert_success
  local id=$output sup
  sup=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["supervisor"]["pid"])' \
    "$STATE/$id/state.json")
  for i in $(seq 150); do
    nax exec flood grep -q established /tmp/hold.out 2>/dev/null && break
    sleep 0.1
  done
  run nax exec flood cat /tmp/hold.out
  [[ "$output" == "hold 127.0.0.11:53: "*" of 3000 established" ]] || { show_run; false; }
  # No busy loop: at most 20% of a CPU over 2 s while the flood is held.
  local c0 c1
  c0=$(cpu_ticks "$sup")
  sleep 2
  c1=$(cpu_ticks "$sup")
  [ $((c1 - c0)) -lt 40 ] || { echo "# the supervisor used $((c1 - c0)) ticks in 2 s" >&3; false; }
  # Names still resolve (UDP flows need fds too).
  run_nax exec flood probe resolve www.example.test
  [ "$output" = "resolve www.example.test: 198.18.0.2" ] || { show_run; false; }
  # kill is answered by the supervisor itself, at once (no escalation).
  local t0=$(($(date +%s%N) / 1000000)) dt
  run_nax kill flood
  dt=$(($(date +%s%N) / 1000000 - t0))
  assert_success
  refute_output_contains "does not answer"
  # (the supervisor answers within its stop, 2 s of grace and the
  # teardown, or the client escalates and says so: refuted above; the
  # bound leaves the client's own start room on a loaded host)
  [ "$dt" -lt $(slow 6000) ] || { echo "# kill took $dt ms" >&3; false; }
  run_nax ls -a --json
  [[ "$output" == *'"stop_reason":"killed"'* ]] || { show_run; false; }
}
