#!/usr/bin/env bats
# test-runner: parallel
# Egress allow-lists by name and CIDR (agsx run --egress-allow/--egress-deny,
# agsx update --egress-…, agsx netlog): enforced in the kernel from the
# DNS relay's answers.
#
# Everything runs inside the outer namespace of test/fixtures/networld. The
# world gets a name server of its own on 198.18.0.3 (the sandboxes' relay
# forwards to it: AGSX_DNS) answering names under egress.test with world
# addresses 198.18.0.10-.24, each serving HTTP on :80 and :443 and a UDP
# echo on :7 (test/fixtures/egress-world.py); it leaves held.egress.test
# unanswered while $BATS_FILE_TMPDIR/held-gate exists. Nothing leaves the
# outer namespace.

load helpers

setup_file() {
  busybox_setup_file
  export NW=$BATS_FILE_TMPDIR/world
  "$FIXTURES/networld" start "$NW"
  export OUTER WORLD
  OUTER=$(cat "$NW/outer.pid")
  WORLD=$(cat "$NW/world.pid")
  local a
  for a in 3 10 11 12 13 14 15 16 17 18 20 21 22 23 24; do
    nsenter -t "$WORLD" --net -- ip addr add "198.18.0.$a/32" dev wi0
  done
  nsenter -t "$WORLD" --net -- "$FIXTURES/egress-world.py" 198.18.0.3 \
    allowed.egress.test=198.18.0.10 denied.egress.test=198.18.0.11 \
    port.egress.test=198.18.0.12 a.wild.egress.test=198.18.0.13 wild.egress.test=198.18.0.14 \
    short.egress.test=198.18.0.15/1 other.egress.test=198.18.0.16 \
    'alias.egress.test>denied.egress.test' 'deep.egress.test>hop.egress.test' \
    'hop.egress.test>allowed.egress.test' mixed.egress.test=198.18.0.16+stray.egress.test:198.18.0.17 \
    n1.many.egress.test=198.18.0.20 n2.many.egress.test=198.18.0.21 \
    n3.many.egress.test=198.18.0.22 n4.many.egress.test=198.18.0.23 \
    n5.many.egress.test=198.18.0.24 "held.egress.test=198.18.0.18?$BATS_FILE_TMPDIR/held-gate" \
    </dev/null >"$BATS_FILE_TMPDIR/egress-world.log" 2>&1 3>&- &
  echo $! >"$BATS_FILE_TMPDIR/egress-world.pid"
  local i
  for i in $(seq 100); do
    nsenter -t "$OUTER" --net -- python3 -c '
import urllib.request as u; u.urlopen("http://198.18.0.24:443/", timeout=1)' 2>/dev/null && break
    sleep 0.1
  done
}

teardown_file() {
  kill "$(cat "$BATS_FILE_TMPDIR/egress-world.pid")" 2>/dev/null || true
  "$FIXTURES/networld" stop "$NW"
}

setup() {
  common_setup
  ax image load "$BB" >/dev/null
}

# A short minimum TTL, so that expiry can be seen (egress.h's bounds).
nax() {
  nsenter -t "$OUTER" --net --mount -- env AGSX_PUBLIC_SUBNET=198.19.0.0/24 AGSX_PULL=never \
    AGSX_DNS=198.18.0.3 AGSX_EGRESS_TTL_MIN="${TTL_MIN:-60}" \
    timeout --kill-after=5 "${AX_TIMEOUT:-60}" "$AGSX" --root "$ROOT" --state "$STATE" "$@"
}
run_nax() {
  AX_CMD="agsx $* (in the outer namespace)"
  run nax "$@"
}
outer() { nsenter -t "$OUTER" --net --mount -- "$@"; }

# What agsx keeps in the ruleset for sandboxes with egress rules: chains,
# and sets of addresses learnt (each sandbox's own; the host's count xcount
# only counts, its elements run out by themselves).
egress_objects() {
  outer nft list ruleset 2>/dev/null | grep -Eo '(chain|set) x[lapd]?_[0-9a-f]{8}' || true
}
# The elements of the sandboxes' own sets, one a line.
learnt_elements() {
  outer nft list ruleset 2>/dev/null | awk '/set x[apd]_/ { s = $2 } /^\t}/ { s = "" } s && /timeout/ { print s ": " $0 }'
}

teardown() {
  nax kill --all >/dev/null 2>&1 || true
  nax gc >/dev/null 2>&1 || true
  local rc=0 left i
  for i in $(seq 75); do
    left=$(outer ip -o link show | awk -F': ' '{print $2}' | grep -E '^agsx' || true)
    [ -z "$left" ] && break
    sleep 0.2
  done
  [ -z "$left" ] || { echo "# links left: $left" >&3; rc=1; }
  left=$(egress_objects)
  [ -z "$left" ] || { echo "# egress chains and sets left: $left" >&3; rc=1; }
  left=$(outer nft list tables | grep agsx || true)
  [ -z "$left" ] || { echo "# nft tables left: $left" >&3; rc=1; }
  common_teardown || rc=1
  return $rc
}

# probe resolve NAME, then probe http ADDR PORT on what it answered.
# Prints "resolve ...: ADDR" or the failure, then the http line.
fetch() { # SANDBOX NAME PORT
  nax exec "$1" sh -c '
    r=$(probe resolve "$1"); echo "$r"
    a=${r##*: }
    case $a in failed*) exit 0;; esac
    probe http "$a" "$2" 2000' _ "$2" "$3"
}

# agsx serve in the outer namespace on a free loopback port: sets port,
# key (the caller's locals) and EGRESS_SRV; waits for its listener.
egress_serve() {
  key=e2b_egress_test_key
  port=$(outer python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  nsenter -t "$OUTER" --net --mount -- env AGSX_PUBLIC_SUBNET=198.19.0.0/24 AGSX_PULL=never \
    AGSX_DNS=198.18.0.3 "$AGSX" --root "$ROOT" --state "$STATE" serve --listen "127.0.0.1:$port" \
    --api-key "$key" --network public --template bb=busybox </dev/null >>"$T/serve.log" 2>&1 3>&- &
  EGRESS_SRV=$!
  local i
  for i in $(seq 100); do
    outer curl -s -o /dev/null "http://127.0.0.1:$port/" && break
    sleep 0.05
  done
}
egress_serve_stop() {
  kill "$EGRESS_SRV" 2>/dev/null || true
  wait "$EGRESS_SRV" 2>/dev/null || true
}

# Waits (10 s at most, however loaded the host) until the outer
# namespace's conntrack table has an established connection to ADDR:PORT.
wait_established() { # ADDR PORT
  local _
  for _ in $(seq 50); do
    outer grep -q "ESTABLISHED src=[0-9.]* dst=$1 sport=[0-9]* dport=$2 " /proc/net/nf_conntrack && return 0
    sleep 0.2
  done
  return 0
}

start_sb() { # NAME RULE-OPTIONS...
  local name=$1
  shift
  run_nax run -d --name "$name" --network public "$@" busybox sleep 300
  assert_success
}

@test "egress: an allowed name connects; a denied one neither resolves nor connects directly" {
  start_sb e1 --egress-allow allowed.egress.test
  run fetch e1 allowed.egress.test 80
  assert_output_contains "resolve allowed.egress.test: 198.18.0.10"
  assert_output_contains "http 198.18.0.10:80: 198.18.0.10:80"
  # learnt (written as netlink, egress_nl.h) into its own set, with its
  # TTL and name, as nft shows it
  run learnt_elements
  assert_output_contains '198.18.0.10 timeout 1m expires'
  assert_output_contains 'comment "allowed.egress.test"'
  [[ $output =~ xa_c613[0-9a-f]{4}: ]]
  run fetch e1 denied.egress.test 80
  assert_output_contains "resolve denied.egress.test: failed"
  run nax exec e1 probe connect 198.18.0.11 80 2000
  assert_output_contains "connect 198.18.0.11:80: failed"
  # The world's own name server, directly: refused (UDP and TCP)
  run nax exec e1 probe udp 198.18.0.3 53 2000
  refute_output_contains "reply"
  run nax exec e1 probe connect 198.18.0.3 53 2000
  assert_output_contains "failed"
}

@test "egress: a name allowed on :443 does not connect on :80; a wildcard matches subdomains only" {
  start_sb e2 --egress-allow port.egress.test:443 --egress-allow '*.wild.egress.test'
  run fetch e2 port.egress.test 443
  assert_output_contains "http 198.18.0.12:443: 198.18.0.12:443"
  run fetch e2 port.egress.test 80
  assert_output_contains "resolve port.egress.test: 198.18.0.12"
  assert_output_contains "http 198.18.0.12:80: failed"
  run fetch e2 a.wild.egress.test 80
  assert_output_contains "http 198.18.0.13:80: 198.18.0.13:80"
  # the apex is not matched by *.wild.egress.test
  run fetch e2 wild.egress.test 80
  assert_output_contains "resolve wild.egress.test: failed"
}

@test "egress: UDP and CIDR rules; deny wins; an address learnt by one sandbox does not open another" {
  start_sb e3 --egress-allow allowed.egress.test --egress-allow 198.18.0.16:443 \
    --egress-deny 198.18.0.10/32:443
  start_sb e4 --egress-allow other.egress.test
  run fetch e3 allowed.egress.test 80
  assert_output_contains "http 198.18.0.10:80: 198.18.0.10:80"
  run nax exec e3 probe udp 198.18.0.10 7 2000
  assert_output_contains "udp 198.18.0.10:7: reply"
  # deny beats the name's allowance on :443
  run nax exec e3 probe http 198.18.0.10 443 2000
  assert_output_contains "failed"
  # a CIDR with a port: only that port, and no name needed
  run nax exec e3 probe http 198.18.0.16 443 2000
  assert_output_contains "http 198.18.0.16:443: 198.18.0.16:443"
  run nax exec e3 probe udp 198.18.0.16 7 2000
  refute_output_contains "reply"
  # e3 learnt 198.18.0.10; e4 did not
  run nax exec e4 probe http 198.18.0.10 80 2000
  assert_output_contains "failed"
  run fetch e4 other.egress.test 80
  assert_output_contains "http 198.18.0.16:80: 198.18.0.16:80"
}

@test "egress: an alias (CNAME) of a denied name is refused, and its address stays closed" {
  start_sb e20 --egress-allow alias.egress.test --egress-allow deep.egress.test \
    --egress-deny denied.egress.test
  # alias.egress.test -> denied.egress.test: denials win through the alias
  run fetch e20 alias.egress.test 80
  assert_output_contains "resolve alias.egress.test: failed"
  run nax exec e20 probe connect 198.18.0.11 80 2000
  assert_output_contains "connect 198.18.0.11:80: failed"
  # deep -> hop -> allowed: an alias the rules do not name opens for the
  # name asked
  run fetch e20 deep.egress.test 80
  assert_output_contains "resolve deep.egress.test: 198.18.0.10"
  assert_output_contains "http 198.18.0.10:80: 198.18.0.10:80"
  run learnt_elements
  [ -z "$(learnt_elements | grep '^xa_.*198\.18\.0\.11 ')" ]
  assert_output_contains 'comment "deep.egress.test"'
  local i
  for i in $(seq 50); do
    nax netlog --json e20 2>/dev/null | grep -q '"name":"denied.egress.test"' && break
    sleep 0.2
  done
  run_nax netlog --json e20
  assert_output_contains '"name":"denied.egress.test"'
}

@test "egress: an A record for another owner in an answer is not learnt" {
  # mixed.egress.test's answer carries stray.egress.test's address too
  start_sb e21 --egress-allow mixed.egress.test
  run fetch e21 mixed.egress.test 80
  assert_output_contains "http 198.18.0.16:80: 198.18.0.16:80"
  run nax exec e21 probe http 198.18.0.17 80 2000
  assert_output_contains "http 198.18.0.17:80: failed"
  run learnt_elements
  refute_output_contains "198.18.0.17"
}

@test "egress: a denied name with no allow-list: closed by address too, and through aliases" {
  start_sb e22 --egress-deny denied.egress.test
  # not looked up by the sandbox: the relay resolved it itself at the start
  run nax exec e22 probe connect 198.18.0.11 80 2000
  assert_output_contains "connect 198.18.0.11:80: failed"
  run nax exec e22 probe ping 198.18.0.11 2000
  assert_output_contains "ping 198.18.0.11: failed"
  run fetch e22 denied.egress.test 80
  assert_output_contains "resolve denied.egress.test: failed"
  run fetch e22 alias.egress.test 80
  assert_output_contains "resolve alias.egress.test: failed"
  # everything else as the network allows
  run fetch e22 other.egress.test 80
  assert_output_contains "http 198.18.0.16:80: 198.18.0.16:80"
  run nax exec e22 probe http 198.18.0.10 80 2000
  assert_output_contains "http 198.18.0.10:80: 198.18.0.10:80"
  run learnt_elements
  assert_output_contains "198.18.0.11 timeout"
  assert_output_contains 'comment "denied.egress.test"'
  [[ $output =~ xd_c613[0-9a-f]{4}: ]]
  # a live update lifts the denial: the address opens; the new one closes
  run_nax update --egress-deny other.egress.test e22
  assert_success
  run nax exec e22 probe http 198.18.0.11 80 2000
  assert_output_contains "http 198.18.0.11:80: 198.18.0.11:80"
  local i
  for i in $(seq 50); do
    learnt_elements | grep -q '198.18.0.16 timeout' && break
    sleep 0.2
  done
  run nax exec e22 probe http 198.18.0.16 80 2000
  assert_output_contains "http 198.18.0.16:80: failed"
}

@test "egress: a sandbox's learnt addresses are bounded; past the bound an answer opens nothing" {
  AGSX_EGRESS_LEARNT_MAX=3 start_sb e23 --egress-allow '*.many.egress.test'
  local i
  for i in 1 2 3; do
    run fetch e23 "n$i.many.egress.test" 80
    assert_output_contains "http 198.18.0.2$((i - 1)):80: 198.18.0.2$((i - 1)):80"
  done
  # the fourth: answered, not opened, logged
  run fetch e23 n4.many.egress.test 80
  assert_output_contains "resolve n4.many.egress.test: 198.18.0.23"
  assert_output_contains "http 198.18.0.23:80: failed"
  run outer nft list ruleset
  assert_output_contains "size 3"
  for i in $(seq 50); do
    nax netlog --json e23 2>/dev/null | grep -q '"kind":"limit"' && break
    sleep 0.2
  done
  run_nax netlog --json e23
  assert_output_contains '"kind":"limit","name":"n4.many.egress.test"'
  run_nax netlog e23
  assert_output_contains "n4.many.egress.test"
  # the first three still open
  run nax exec e23 probe http 198.18.0.20 80 2000
  assert_output_contains "http 198.18.0.20:80: 198.18.0.20:80"
}

@test "egress: the host's bound on learnt addresses: a full count opens nothing, and frees" {
  start_sb e24 --egress-allow allowed.egress.test
  # fill the host's count (xcount) with others' elements
  python3 -c '
for k in range(64):
    print("add element inet agsx xcount { " + ", ".join(
        "10.0.0.1 . 10.%d.%d.%d . 0 timeout 5m" % (k, j // 256, j % 256) for j in range(1024)) + " }")
' >"$BATS_TEST_TMPDIR/fill.nft"
  outer nft -f "$BATS_TEST_TMPDIR/fill.nft"
  run fetch e24 allowed.egress.test 80
  assert_output_contains "resolve allowed.egress.test: 198.18.0.10"
  assert_output_contains "http 198.18.0.10:80: failed"
  local i
  for i in $(seq 50); do
    nax netlog --json e24 2>/dev/null | grep -q '"kind":"limit"' && break
    sleep 0.2
  done
  run_nax netlog --json e24
  assert_output_contains '"kind":"limit","name":"allowed.egress.test"'
  outer nft flush set inet agsx xcount
  run fetch e24 allowed.egress.test 80
  assert_output_contains "http 198.18.0.10:80: 198.18.0.10:80"
}

# Waits (10 s at most) for sandbox $1's netlog to hold text $2.
wait_netlog() { # SANDBOX TEXT
  local i
  for i in $(seq 50); do
    nax netlog --json "$1" 2>/dev/null | grep -qF "$2" && return 0
    sleep 0.2
  done
  return 0
}

@test "egress: a denied name not resolved yet keeps the sandbox closed until it is" {
  # the world's name server does not answer for held.egress.test yet
  touch "$BATS_FILE_TMPDIR/held-gate"
  start_sb e25 --egress-deny held.egress.test
  # not by address either, before its relay could record it
  run nax exec e25 probe connect 198.18.0.18 80 2000
  assert_output_contains "connect 198.18.0.18:80: failed"
  # closed whole (its chain's first rule)
  run nax exec e25 probe http 198.18.0.10 80 2000
  assert_output_contains "http 198.18.0.10:80: failed"
  run outer nft list ruleset
  [[ $output =~ "goto xl_c613"[0-9a-f]{4}" comment \"agsx:closed\"" ]]
  wait_netlog e25 '"kind":"closed"'
  run_nax netlog --json e25
  assert_output_contains '"kind":"closed","name":"held.egress.test","reason":"unresolved"'
  run_nax netlog e25
  assert_output_contains "held.egress.test (unresolved)"
  # answered now: its address recorded, then the rest opens
  rm -f "$BATS_FILE_TMPDIR/held-gate"
  local i
  for i in $(seq 50); do
    outer nft list ruleset | grep -q 'agsx:closed' || break
    sleep 0.2
  done
  run learnt_elements
  assert_output_contains "198.18.0.18 timeout"
  run nax exec e25 probe http 198.18.0.10 80 2000
  assert_output_contains "http 198.18.0.10:80: 198.18.0.10:80"
  run nax exec e25 probe connect 198.18.0.18 80 2000
  assert_output_contains "connect 198.18.0.18:80: failed"
}

@test "egress: a full host count (others' learnt addresses) opens no denied address" {
  start_sb e26a # (the table, and its count)
  python3 -c '
for k in range(64):
    print("add element inet agsx xcount { " + ", ".join(
        "10.0.0.1 . 10.%d.%d.%d . 0 timeout 5m" % (k, j // 256, j % 256) for j in range(1024)) + " }")
' >"$BATS_TEST_TMPDIR/fill.nft"
  outer nft -f "$BATS_TEST_TMPDIR/fill.nft"
  start_sb e26 --egress-deny denied.egress.test
  run nax exec e26 probe connect 198.18.0.11 80 2000
  assert_output_contains "connect 198.18.0.11:80: failed"
  run learnt_elements
  assert_output_contains "198.18.0.11 timeout"
  # the rest as the network allows: a sandbox's denials count on no other's
  run nax exec e26 probe http 198.18.0.10 80 2000
  assert_output_contains "http 198.18.0.10:80: 198.18.0.10:80"
  outer nft flush set inet agsx xcount
}

@test "egress: past its deny set's bound a sandbox is closed, and its log says why" {
  # room for one denied address: the second name's cannot be recorded
  AGSX_EGRESS_LEARNT_MAX=1 start_sb e27 --egress-deny denied.egress.test \
    --egress-deny other.egress.test
  run nax exec e27 probe http 198.18.0.10 80 2000
  assert_output_contains "http 198.18.0.10:80: failed"
  run nax exec e27 probe connect 198.18.0.11 80 2000
  assert_output_contains "connect 198.18.0.11:80: failed"
  run nax exec e27 probe connect 198.18.0.16 80 2000
  assert_output_contains "connect 198.18.0.16:80: failed"
  wait_netlog e27 '"kind":"closed"'
  run_nax netlog --json e27
  [[ $output =~ \"kind\":\"closed\",\"name\":\"(denied|other)\.egress\.test\",\"reason\":\"limit\" ]]
  run_nax netlog e27
  assert_output_contains ".egress.test (limit)"
}

@test "egress: what an earlier holder of an address left is removed at the next start, and said" {
  run_nax network create left --subnet 198.19.9.0/29 --allow "out tcp/80 198.18.0.0/24"
  assert_success
  run_nax run -d --name l0 --network vpc:left busybox sleep 60
  assert_success
  # for every other address: a hooked chain that lets 198.18.0.10 through,
  # and a set of learnt addresses (as an end whose removal failed leaves)
  local a hex held
  held=$(cat "$STATE"/*/state.json | grep -Eo '"address": ?"198\.19\.9\.[0-9]+"' || true)
  [ -n "$held" ]
  for a in 2 3 4 5 6; do
    hex=$(printf 'c61309%02x' "$a")
    [[ $held == *"198.19.9.$a\""* ]] && continue
    printf '%s\n' "add set inet agsx xa_$hex { type ipv4_addr; flags timeout; }" \
      "add element inet agsx xa_$hex { 198.18.0.10 timeout 5m comment \"allowed.egress.test\" }" \
      "add chain inet agsx x_$hex" "add rule inet agsx x_$hex ip daddr @xa_$hex return" \
      "add element inet agsx xmap { 198.19.9.$a : jump x_$hex }" | outer nft -f -
  done
  local i
  for i in 1 2 3 4; do
    if [ "$i" = 4 ]; then # (one without egress rules: it must not inherit a chain either)
      run_nax run -d --name "l$i" --network vpc:left busybox sleep 60
    else
      run_nax run -d --name "l$i" --network vpc:left --egress-allow other.egress.test busybox sleep 60
    fi
    assert_success
    assert_output_contains "a previous sandbox left"
  done
  for i in 1 2 3; do
    run nax exec "l$i" probe http 198.18.0.10 80 2000
    assert_output_contains "http 198.18.0.10:80: failed"
  done
  run learnt_elements
  refute_output_contains "198.18.0.10"
  nax kill --all >/dev/null 2>&1 || true
  AGSX_GC_MIN_AGE=0 run_nax gc
  run_nax network rm left
  assert_success
}

@test "egress: ICMP and UDP follow the rules (ping allowed and dropped, logged; UDP by port)" {
  # 198.18.0.14: every protocol; port.egress.test (198.18.0.12) and
  # 198.18.0.15: UDP and TCP on :7 only. Every world address echoes UDP
  # on :7 and :9 and answers pings.
  start_sb e10 --egress-allow 198.18.0.14 --egress-allow port.egress.test:7 \
    --egress-allow 198.18.0.15:7
  run nax exec e10 probe ping 198.18.0.14 2000
  assert_output_contains "ping 198.18.0.14: reply"
  run nax exec e10 probe ping 198.18.0.11 2000
  assert_output_contains "ping 198.18.0.11: failed"
  # a port rule opens no ICMP
  run nax exec e10 probe ping 198.18.0.15 2000
  assert_output_contains "ping 198.18.0.15: failed"
  # the chain as the kernel shows it (written as netlink, egress_nl.h)
  run outer nft list ruleset
  assert_output_contains "ip daddr 198.18.0.14 return"
  assert_output_contains "ip daddr 198.18.0.15 udp dport 7 return"
  assert_output_contains "ct state established,related return"
  assert_output_contains "udp dport 853 goto xl_"
  assert_output_contains "ip daddr @xd_c613"
  [[ $output =~ "ip daddr . udp dport @xp_c613"[0-9a-f]{4}" return" ]]
  assert_output_contains "reject with icmpx admin-prohibited"
  run nax exec e10 probe udp 198.18.0.14 9 2000
  assert_output_contains "udp 198.18.0.14:9: reply"
  run nax exec e10 probe udp 198.18.0.15 7 2000
  assert_output_contains "udp 198.18.0.15:7: reply"
  run nax exec e10 probe udp 198.18.0.15 9 2000
  refute_output_contains "reply"
  # by name: UDP to the learnt address on the allowed port only
  run nax exec e10 sh -c 'probe resolve port.egress.test; probe udp 198.18.0.12 7 2000;
    probe udp 198.18.0.12 9 2000'
  assert_output_contains "resolve port.egress.test: 198.18.0.12"
  assert_output_contains "udp 198.18.0.12:7: reply"
  refute_output_contains "udp 198.18.0.12:9: reply"
  # The log is flushed about once a second: wait (up to 10 s, however
  # loaded the host) for the last drop in it, then check it all.
  local i
  for i in $(seq 50); do
    sleep 0.2
    nax netlog --json e10 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
sys.exit(not any(e["kind"] == "connection" and e["address"] == "198.18.0.12" and
                 e["protocol"] == "udp" and e["port"] == 9 for e in d["entries"]))' && break
  done
  run_nax netlog --json e10
  assert_success
  echo "$output" | python3 -c '
import json, sys
d = json.load(sys.stdin)
c = [e for e in d["entries"] if e["kind"] == "connection"]
def has(addr, proto, port=None):
    return any(e["address"] == addr and e["protocol"] == proto and
               (port is None or e["port"] == port) for e in c)
assert has("198.18.0.11", "icmp"), c
assert has("198.18.0.15", "icmp"), c
assert has("198.18.0.15", "udp", 9) and has("198.18.0.12", "udp", 9), c
assert not has("198.18.0.14", "icmp") and not has("198.18.0.15", "udp", 7), c'
}

@test "egress: TTL expiry closes the address" {
  TTL_MIN=2
  start_sb e5 --egress-allow short.egress.test
  run fetch e5 short.egress.test 80
  assert_output_contains "http 198.18.0.15:80: 198.18.0.15:80"
  sleep 3.5
  run nax exec e5 probe http 198.18.0.15 80 2000
  assert_output_contains "failed"
}

@test "egress: a live update opens and closes access, and cuts established connections" {
  start_sb e6 --egress-allow allowed.egress.test
  run fetch e6 other.egress.test 80
  assert_output_contains "resolve other.egress.test: failed"
  run_nax update --egress-allow other.egress.test --egress-allow allowed.egress.test e6
  assert_success
  run fetch e6 other.egress.test 80
  assert_output_contains "http 198.18.0.16:80: 198.18.0.16:80"
  # a connection open to allowed.egress.test (its request sent 6 s later,
  # time enough for the update on a loaded host), then the name is
  # denied: the update cuts it
  run fetch e6 allowed.egress.test 80
  assert_output_contains "http 198.18.0.10:80"
  nax exec e6 sh -c '(sleep 6; printf "GET / HTTP/1.0\r\n\r\n") | nc 198.18.0.10 80 >/tmp/out 2>&1
    echo "rc=$?" >>/tmp/out' </dev/null >/dev/null 2>&1 3>&- &
  local held=$!
  wait_established 198.18.0.10 80
  run_nax --json update --egress-allow other.egress.test e6
  assert_success
  assert_output_contains '"egress":["allow other.egress.test"]'
  [[ $output =~ \"connections_cut\":[1-9] ]]
  wait "$held" || true
  run nax exec e6 cat /tmp/out
  refute_output_contains "198.18.0.10:80"
  run fetch e6 allowed.egress.test 80
  assert_output_contains "resolve allowed.egress.test: failed"
  run nax exec e6 probe http 198.18.0.10 80 2000
  assert_output_contains "failed"
  # no rules: the network's default egress again
  run_nax update --egress-clear e6
  assert_success
  run fetch e6 denied.egress.test 80
  assert_output_contains "http 198.18.0.11:80: 198.18.0.11:80"
  [ -z "$(egress_objects)" ]
}

@test "egress: the blocked-attempt log shows the denied name and the dropped connection" {
  start_sb e7 --egress-allow allowed.egress.test
  run fetch e7 denied.egress.test 80
  run nax exec e7 probe connect 198.18.0.11 80 2000
  run nax exec e7 probe connect 198.18.0.11 80 2000
  # The log is flushed about once a second: wait for both attempts in it
  # (up to 10 s, however loaded the host).
  local i
  for i in $(seq 50); do
    sleep 0.2
    nax netlog --json e7 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
c = [e for e in d["entries"] if e["kind"] == "connection" and e["address"] == "198.18.0.11"]
sys.exit(not (c and c[0]["count"] >= 2 and any(e.get("name") == "denied.egress.test" for e in d["entries"])))' && break
  done
  run_nax netlog e7
  assert_success
  assert_output_contains "denied.egress.test"
  assert_output_contains "198.18.0.11:80"
  run_nax logs --network e7
  assert_success
  assert_output_contains "denied.egress.test"
  run_nax logs --network -f e7
  assert_agsx_error "goes alone"
  run_nax netlog --json e7
  assert_success
  echo "$output" | python3 -c '
import json, sys
d = json.load(sys.stdin)
q = [e for e in d["entries"] if e["kind"] == "dns" and e["name"] == "denied.egress.test"]
c = [e for e in d["entries"] if e["kind"] == "connection" and e["address"] == "198.18.0.11"]
assert q and c, d
assert c[0]["port"] == 80 and c[0]["protocol"] == "tcp" and c[0]["count"] >= 2, c
assert q[0]["first"] and q[0]["last"], q'
}

@test "egress: the most rules a sandbox takes (512, with ports) go in one transaction" {
  python3 -c '
for i in range(1, 512): print("allow 198.%d.%d.0/24:%d" % (18 + i // 256, i % 256, 999 + i))
print("allow allowed.egress.test")' >"$BATS_TEST_TMPDIR/rules"
  start_sb e11 --egress-rules "$BATS_TEST_TMPDIR/rules"
  run outer sh -c "nft list ruleset | grep -c 'ip daddr 198\.1[89]\.[0-9]*\.0/24 .*dport 1[0-9]* return'"
  [ "$output" = 1022 ]
  run fetch e11 allowed.egress.test 80
  assert_output_contains "http 198.18.0.10:80: 198.18.0.10:80"
  echo "allow 198.19.9.9" >>"$BATS_TEST_TMPDIR/rules"
  run_nax run --rm --network public --egress-rules "$BATS_TEST_TMPDIR/rules" busybox true
  assert_agsx_error "too many egress rules"
}

@test "egress: what a crashed sandbox learnt does not open its address's next holder" {
  private_cgroup_parent
  # five addresses: the next five sandboxes take the crashed one's too
  run_nax network create tiny --subnet 198.19.8.0/29 --allow "out tcp/80 198.18.0.0/24"
  assert_success
  run_nax run -d --name c0 --network vpc:tiny --egress-allow allowed.egress.test busybox sleep 60
  assert_success
  run fetch c0 allowed.egress.test 80
  assert_output_contains "http 198.18.0.10:80: 198.18.0.10:80"
  local sup i
  sup=$(python3 -c 'import json,sys,glob; print(json.load(open(glob.glob(sys.argv[1] + "/*/state.json")[0]))["supervisor"]["pid"])' "$STATE")
  kill -9 "$sup"
  sleep 0.5
  run learnt_elements
  assert_output_contains "198.18.0.10 timeout"
  local warned=""
  for i in 1 2 3 4 5; do
    run_nax run -d --name "c$i" --network vpc:tiny --egress-allow other.egress.test busybox sleep 60
    assert_success
    [[ $output == *"a previous sandbox left"* ]] && warned+=$i
  done
  # the one that got the crashed sandbox's address heard of it
  [ "${#warned}" = 1 ]
  run learnt_elements
  refute_output_contains "198.18.0.10"
  for i in 1 2 3 4 5; do
    run nax exec "c$i" probe http 198.18.0.10 80 2000
    assert_output_contains "http 198.18.0.10:80: failed"
  done
  nax kill --all >/dev/null 2>&1 || true
  AGSX_GC_MIN_AGE=0 run_nax gc
  run_nax network rm tiny
  assert_success
}

@test "egress: bad rules are refused with exit 125; internal takes none" {
  run_nax run --rm --network public --egress-allow 'a*.b' busybox true
  assert_agsx_error "invalid egress rule"
  run_nax run --rm --network public --egress-allow 'x.org:99999' busybox true
  assert_agsx_error "invalid egress rule"
  run_nax run --rm --egress-allow pypi.org busybox true
  assert_agsx_error "public and vpc"
  printf 'allow pypi.org\nbogus line\n' >"$BATS_TEST_TMPDIR/rules"
  run_nax run --rm --network public --egress-rules "$BATS_TEST_TMPDIR/rules" busybox true
  assert_agsx_error "rules:2"
}

@test "egress: vpc members take egress rules; network update changes a security group live" {
  run_nax network create --subnet 198.19.8.0/24 --allow "out tcp/80 198.18.0.0/24" ev
  assert_success
  run_nax run -d --name v1 --network vpc:ev --egress-allow allowed.egress.test busybox sleep 300
  assert_success
  run fetch v1 allowed.egress.test 80
  assert_output_contains "http 198.18.0.10:80: 198.18.0.10:80"
  run nax exec v1 probe http 198.18.0.16 80 2000
  assert_output_contains "failed"
  # the security group does not allow :443 yet (it drops: a timeout)
  run nax exec v1 probe http 198.18.0.10 443 1000
  refute_output_contains "http 198.18.0.10:443: 198.18.0.10"
  # a connection held open on :80, cut by the update (a security group
  # drops: it stalls; PROBE_RST: no socket lingers once it is killed)
  nax exec --timeout 15s -e PROBE_RST=1 v1 probe hold 198.18.0.10 80 1 </dev/null >/dev/null 2>&1 3>&- &
  local held=$!
  wait_established 198.18.0.10 80
  outer grep -q 'ESTABLISHED src=198.19.8.[0-9]* dst=198.18.0.10 sport=[0-9]* dport=80 ' \
    /proc/net/nf_conntrack
  run_nax --json network update --allow "out tcp/443 198.18.0.0/24" ev
  assert_success
  assert_output_contains '"rules":["allow out tcp/443 198.18.0.0/24"]'
  assert_output_contains '"updated_sandboxes":1'
  [[ $output =~ \"connections_cut\":[1-9] ]]
  run outer grep -q 'ESTABLISHED src=198.19.8.[0-9]* dst=198.18.0.10 sport=[0-9]* dport=80 ' \
    /proc/net/nf_conntrack
  [ "$status" -ne 0 ]
  run nax exec v1 probe http 198.18.0.10 443 2000
  assert_output_contains "http 198.18.0.10:443: 198.18.0.10:443"
  run nax exec v1 probe http 198.18.0.10 80 1000
  refute_output_contains "http 198.18.0.10:80: 198.18.0.10"
  run_nax network update ev
  assert_agsx_error "expected --allow"
  # :80 again, from a rules file
  printf 'allow out tcp/80 198.18.0.0/24\nallow out tcp/443 198.18.0.0/24\n' >"$BATS_TEST_TMPDIR/sg"
  run_nax network update --rules "$BATS_TEST_TMPDIR/sg" ev
  assert_success
  run nax exec v1 probe http 198.18.0.10 80 2000
  assert_output_contains "http 198.18.0.10:80: 198.18.0.10:80"
  wait "$held" || true
  nax kill v1 >/dev/null
  nax wait v1 >/dev/null || true
  run_nax network rm ev
  assert_success
}

@test "egress: the E2B API's network.allowOut/denyOut at create and PUT /sandboxes/{id}/network" {
  local port key
  egress_serve
  api() { # METHOD PATH [BODY]: the body, then the status
    outer curl -s -X "$1" -H "X-API-KEY: $key" -H 'Content-Type: application/json' \
      ${3:+--data-binary "$3"} -w '\n%{http_code}\n' "http://127.0.0.1:$port$2"
  }
  run api POST /v2/sandboxes '{"templateID":"bb","timeout":60,"network":{"allowOut":["allowed.egress.test","198.18.0.16:443"],"denyOut":["0.0.0.0/0"]}}'
  assert_output_contains "201"
  local sb
  sb=$(nax ls -q | head -1)
  run fetch "$sb" allowed.egress.test 80
  assert_output_contains "http 198.18.0.10:80: 198.18.0.10:80"
  run fetch "$sb" other.egress.test 80
  assert_output_contains "resolve other.egress.test: failed"
  run nax exec "$sb" probe http 198.18.0.16 443 2000
  assert_output_contains "http 198.18.0.16:443: 198.18.0.16:443"
  local e2b
  e2b=$(api GET /v2/sandboxes | head -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["sandboxID"])')
  run api PUT "/sandboxes/$e2b/network" '{"allowOut":["other.egress.test"],"denyOut":["0.0.0.0/0"]}'
  assert_output_contains "204"
  run fetch "$sb" other.egress.test 80
  assert_output_contains "http 198.18.0.16:80: 198.18.0.16:80"
  run fetch "$sb" allowed.egress.test 80
  assert_output_contains "resolve allowed.egress.test: failed"
  run api PUT "/sandboxes/$e2b/network" '{"allowOut":["a*b"]}'
  assert_output_contains "400"
  run api POST /v2/sandboxes '{"templateID":"bb","allow_internet_access":false,"network":{"allowOut":["x.org"]}}'
  assert_output_contains "400"
  api DELETE "/sandboxes/$e2b" >/dev/null
  egress_serve_stop
}

@test "egress: the E2B SDK's network allowOut/denyOut at create and updateNetwork" {
  local mods port key
  command -v node >/dev/null || skip "node is missing"
  mods=$("$AGSX_SRCDIR/test/serve/npm-install" 2>/dev/null | sed -n 1p) ||
    skip "the npm e2b SDK is not installed (npm or its registry unreachable)"
  [ -n "$mods" ] || skip "the npm e2b SDK is not installed"
  egress_serve
  run outer env E2B_SDK="$mods" E2B_API_URL="http://127.0.0.1:$port" \
    E2B_SANDBOX_URL="http://127.0.0.1:$port" E2B_API_KEY="$key" E2B_TEMPLATE=bb \
    timeout --kill-after=5 120 node "$AGSX_SRCDIR/test/serve/egress.mjs"
  egress_serve_stop
  if [ "$status" -ne 0 ] || [ "${lines[${#lines[@]}-1]}" != ok ]; then
    printf '%s\n' "$output" | sed 's/^/#   /' >&3
    sed 's/^/# serve: /' "$T/serve.log" | tail -20 >&3
    return 1
  fi
}

@test "egress: agsx build's RUN steps take the same rules" {
  mkdir -p "$BATS_TEST_TMPDIR/ctx"
  printf 'FROM busybox\nRUN probe resolve allowed.egress.test; probe resolve denied.egress.test; probe http 198.18.0.16 80 2000\n' \
    >"$BATS_TEST_TMPDIR/ctx/Dockerfile"
  run_nax build --egress-allow allowed.egress.test -t egress-built "$BATS_TEST_TMPDIR/ctx"
  assert_success
  assert_output_contains "resolve allowed.egress.test: 198.18.0.10"
  assert_output_contains "resolve denied.egress.test: failed"
  refute_output_contains "http 198.18.0.16:80: 198.18.0.16"
  # the same rules: the cache; other rules (or none): the step runs again
  run_nax build --egress-allow allowed.egress.test -t egress-built "$BATS_TEST_TMPDIR/ctx"
  assert_success
  assert_output_contains "Using cache"
  refute_output_contains "resolve allowed.egress.test:"
  run_nax build --egress-allow denied.egress.test -t egress-built "$BATS_TEST_TMPDIR/ctx"
  assert_success
  refute_output_contains "Using cache"
  assert_output_contains "resolve denied.egress.test: 198.18.0.11"
  assert_output_contains "resolve allowed.egress.test: failed"
  run_nax build --egress-allow denied.egress.test -t egress-built "$BATS_TEST_TMPDIR/ctx"
  assert_output_contains "Using cache"
  run_nax build -t egress-built "$BATS_TEST_TMPDIR/ctx"
  assert_success
  refute_output_contains "Using cache"
  assert_output_contains "http 198.18.0.16:80: 198.18.0.16"
}

@test "egress: agsx mcp's sandbox_create egress_allow: only the listed names; none on internal" {
  local line id
  coproc MCP {
    nsenter -t "$OUTER" --net --mount -- env AGSX_PUBLIC_SUBNET=198.19.0.0/24 AGSX_PULL=never \
      AGSX_DNS=198.18.0.3 "$AGSX" --root "$ROOT" --state "$STATE" mcp --network public 2>"$T/mcp.err"
  }
  call() { # ID NAME ARGS: a tools/call; its answer in $line
    printf '{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"%s","arguments":%s}}\n' \
      "$1" "$2" "$3" >&"${MCP[1]}"
    IFS= read -r -t 60 line <&"${MCP[0]}"
  }
  echo '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bats","version":"1"}}}' >&"${MCP[1]}"
  IFS= read -r -t 60 line <&"${MCP[0]}"
  call 2 sandbox_create '{"image":"busybox","egress_allow":["allowed.egress.test"]}'
  [[ $line == *"needs a network with a way out"*'"isError":true'* ]] || { echo "$line"; false; }
  call 3 sandbox_create '{"image":"busybox","network":"public","egress_allow":["a*b"]}'
  [[ $line == *"egress_allow:"*'"isError":true'* ]] || { echo "$line"; false; }
  call 4 sandbox_create '{"image":"busybox","network":"public","egress_allow":["allowed.egress.test"]}'
  id=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["result"]["structuredContent"]["id"])' "$line")
  run fetch "$id" allowed.egress.test 80
  assert_output_contains "http 198.18.0.10:80: 198.18.0.10:80"
  run fetch "$id" other.egress.test 80
  assert_output_contains "resolve other.egress.test: failed"
  run nax exec "$id" probe connect 198.18.0.16 80 2000
  assert_output_contains "connect 198.18.0.16:80: failed"
  # The session's end stops it.
  exec {MCP[1]}>&-
  wait "$MCP_PID" || true
  gone() { [ -z "$(nax ls -q)" ]; }
  poll 100 gone
}
