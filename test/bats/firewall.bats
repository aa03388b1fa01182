#!/usr/bin/env bats
# test-runner: parallel
# The firewall of public and vpc networks fails closed: after a host
# firewall reload (`nft flush ruleset`) new sandboxes get their rules back,
# running ones are cut off and ls/gc say so; and isolation between
# sandboxes holds without br_netfilter.
#
# As in network.bats, everything runs inside an outer network+mount
# namespace made by test/fixtures/networld (the world on 198.18.0.0/24,
# sandboxes on 198.19.0.0/16): the ruleset flushed and the bridge sysctls
# turned off are the outer namespace's, never the host's.

load helpers

setup_file() { networld_setup_file; }
teardown_file() { networld_teardown_file; }

setup() { busybox_setup; }

# The record's field $2 of sandbox $1.
field_of() {
  nax ls --json 2>/dev/null | python3 -c '
import json, sys
for s in json.load(sys.stdin):
    if s["name"] == sys.argv[1]: print(s[sys.argv[2]])' "$1" "$2"
}
# The supervisor's pid of sandbox $1.
sup_of() {
  python3 -c '
import json, sys, glob
for f in glob.glob(sys.argv[1] + "/*/state.json"):
    r = json.load(open(f))
    if r.get("name") == sys.argv[2]: print(r["supervisor"]["pid"])' "$STATE" "$1"
}
# The host end of sandbox $1's veth pair.
veth_of() { local id; id=$(field_of "$1" id); echo "agsx${id:0:11}"; }

# Waits (bounded) until link $1 is gone from the outer namespace.
wait_link_gone() {
  local i
  for i in $(seq 50); do
    outer ip link show "$1" >/dev/null 2>&1 || return 0
    sleep 0.1
  done
  echo "# link $1 is still there" >&3
  return 1
}

# No br_netfilter: bridged frames skip the IP hooks, as on a host without
# the module (per namespace on this kernel; the bridge's own flag too).
no_br_netfilter() {
  outer sh -c 'echo 0 >/proc/sys/net/bridge/bridge-nf-call-iptables'
  outer ip link set "$1" type bridge nf_call_iptables 0
  [ "$(outer cat /proc/sys/net/bridge/bridge-nf-call-iptables)" = 0 ]
  [ "$(cat /proc/sys/net/bridge/bridge-nf-call-iptables)" = 1 ] # the host's stays
}

# The bridge sysctl a test turned off; the default teardown (helpers.bash)
# then stops and collects the sandboxes in the outer namespace and checks it.
teardown() {
  outer sh -c 'echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables' || true
  sandbox_teardown
}

@test "firewall: after nft flush ruleset a new public sandbox gets its rules back" {
  run_nax run -d --name s1 --network public busybox sleep 60
  assert_success
  outer nft flush ruleset
  run_nax run --rm --network public busybox sh -c '
    probe http 198.19.0.1 8081 1000
    probe http 169.254.169.254 80 1000
    probe http 198.18.0.2 80'
  assert_success
  [ "${lines[0]}" = "http 198.19.0.1:8081: timeout" ] || { show_run; false; }
  [ "${lines[1]}" = "http 169.254.169.254:80: timeout" ] || { show_run; false; }
  [ "${lines[2]}" = "http 198.18.0.2:80: world" ] || { show_run; false; }
  run outer nft list chain inet agsx forward
  assert_success
  [[ "$output" == *'agsx:end'* ]] || { echo "$output" >&3; false; }
}

# agsx run traced (openat only) in the outer namespace, into $T/trace.
traced_run() {
  # (LeakSanitizer cannot work under ptrace: an ASan build's leak check is off here)
  nsenter -t "$OUTER" --net --mount -- env AGSX_PUBLIC_SUBNET=198.19.0.0/24 AGSX_PULL=never \
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
    strace -f -qq -e trace=openat -o "$T/trace" "$AGSX" --root "$ROOT" --state "$STATE" run "$@"
}

@test "firewall: a reload between two starts is caught by the second; intact rules cost no ruleset dump" {
  command -v strace >/dev/null || skip "no strace"
  run_nax run -d --name s1 --network public busybox sleep 60
  assert_success
  # Rules in place: the start's check is a few targeted netlink looks, not
  # libnftables (whose every call fetches the whole ruleset).
  run traced_run --rm --network public busybox true
  assert_success
  grep -q 'openat(' "$T/trace" # (traced at all)
  ! grep -q libnftables "$T/trace" || { grep libnftables "$T/trace" >&3; false; }
  # Only the bridge's element of set bridges goes (a partial reload): the
  # next start sees it, puts it back (through libnftables) and is isolated.
  outer nft delete element inet agsx bridges '{ "agsx0" }'
  run traced_run --rm --network public busybox probe http 198.19.0.1 8081 1000
  assert_success
  [ "$output" = "http 198.19.0.1:8081: timeout" ] || { show_run; false; }
  grep -q libnftables "$T/trace" || { echo "# the start did not restore the rules" >&3; false; }
  outer nft get element inet agsx bridges '{ "agsx0" }' >/dev/null
  # Then a whole flush: the start after it restores the table.
  outer nft flush ruleset
  run_nax run --rm --network public busybox probe http 198.19.0.1 8081 1000
  [ "$output" = "http 198.19.0.1:8081: timeout" ] || { show_run; false; }
  run outer nft list chain inet agsx forward
  [[ "$output" == *'agsx:end'* ]] || { echo "$output" >&3; false; }
  # The forward chain's end mark alone goes (its last rule deleted).
  local h
  h=$(outer nft -a list chain inet agsx forward | sed -n 's/.*agsx:end.*# handle \([0-9]*\)$/\1/p')
  [ -n "$h" ]
  outer nft delete rule inet agsx forward handle "$h"
  run traced_run --rm --network public busybox probe http 198.19.0.1 8081 1000
  [ "$output" = "http 198.19.0.1:8081: timeout" ] || { show_run; false; }
  grep -q libnftables "$T/trace" || { echo "# the start did not restore the rules" >&3; false; }
  run outer nft list chain inet agsx forward
  [[ "$output" == *'agsx:end'* ]] || { echo "$output" >&3; false; }
  # And the start after that finds everything in place again.
  run traced_run --rm --network public busybox true
  assert_success
  ! grep -q libnftables "$T/trace" || { grep libnftables "$T/trace" >&3; false; }
}

@test "firewall: a running public sandbox is cut off when the rules go; ls and gc say so" {
  run_nax run -d --name s1 --network public busybox sleep 60
  assert_success
  local veth
  veth=$(veth_of s1)
  outer ip link show "$veth" >/dev/null
  run_nax exec s1 probe http 198.18.0.2 80
  [ "$output" = "http 198.18.0.2:80: world" ] || { show_run; false; }
  outer nft flush ruleset
  wait_link_gone "$veth"
  run_nax exec s1 probe http 198.19.0.1 8081 1000
  [[ "$output" == "http 198.19.0.1:8081: "* && "$output" != *": host" ]] || { show_run; false; }
  run_nax exec s1 sh -c 'ip -o link | wc -l'
  [ "$output" = 1 ] || { show_run; false; } # lo only: eth0 went with the veth
  # It runs on, offline, and says so.
  run_nax ls
  assert_success
  [[ "$output" == *"s1"*"running"* ]] || { show_run; false; }
  [[ "$output" == *"agsx: warning: sandbox "*" s1: cut off from network \`public\`"* ]] || { show_run; false; }
  run_nax gc --dry-run
  [[ "$output" == *"s1: cut off from network \`public\`"* ]] || { show_run; false; }
}

@test "firewall: a removal after many additions in one transaction still cuts a sandbox off" {
  # The supervisors' watch drops notifications made only of additions in
  # the kernel (a socket filter): a removal at the end of a long batch
  # must still be heard.
  run_nax run -d --name s1 --network public busybox sleep 60
  assert_success
  local veth i
  veth=$(veth_of s1)
  {
    echo "add chain inet agsx zz_filler"
    for i in $(seq 400); do echo "add rule inet agsx zz_filler counter accept"; done
    echo "delete element inet agsx bridges { \"agsx0\" }"
  } >"$T/batch.nft"
  outer nft -f "$T/batch.nft"
  wait_link_gone "$veth"
  outer nft delete chain inet agsx zz_filler
}

@test "firewall: ls warns while a public sandbox's rules are missing" {
  run_nax run -d --name s1 --network public busybox sleep 60
  assert_success
  # The supervisor is stopped (not killed): nothing cuts s1 off meanwhile.
  local sup
  sup=$(sup_of s1)
  kill -STOP "$sup"
  outer nft delete table inet agsx
  run_nax ls
  kill -CONT "$sup"
  [[ "$output" == *"s1: not protected on network \`public\`: the firewall table inet agsx is gone"* ]] || { show_run; false; }
  wait_link_gone "$(veth_of s1)"
}

@test "firewall: a vpc member is cut off when its chains go, even if the table is back" {
  run_nax network create team --subnet 198.19.20.0/24 --allow "out tcp/80 198.18.0.0/24"
  assert_success
  run_nax run -d --name a --network vpc:team busybox probe listen 8080
  assert_success
  wait_listen a 8080
  local va aa sup
  va=$(veth_of a)
  aa=$(field_of a address)
  sup=$(sup_of a)
  run_nax exec a probe http 198.18.0.2 80
  [ "$output" = "http 198.18.0.2:80: world" ] || { show_run; false; }
  # Flushed, then made again by the next start before a's supervisor
  # looks: a's chains are gone all the same, and without them a is shut.
  kill -STOP "$sup"
  outer nft flush ruleset
  run_nax run --rm --network vpc:team busybox sh -c "probe connect $aa 8080 1000; probe http 198.18.0.2 80"
  [ "${lines[0]}" = "connect $aa:8080: timeout" ] || { kill -CONT "$sup"; show_run; false; }
  [ "${lines[1]}" = "http 198.18.0.2:80: world" ] || { kill -CONT "$sup"; show_run; false; }
  run_nax exec a probe http 198.18.0.2 80 1000
  kill -CONT "$sup"
  [ "$output" = "http 198.18.0.2:80: timeout" ] || { show_run; false; }
  wait_link_gone "$va"
  run_nax ls
  [[ "$output" == *"a: cut off from network \`team\`"* ]] || { show_run; false; }
}

@test "firewall: a table whose chains were flushed is made anew" {
  run_nax run -d --name s1 --network public busybox sleep 60
  assert_success
  local veth
  veth=$(veth_of s1)
  outer nft flush chain inet agsx forward
  wait_link_gone "$veth"
  run_nax run --rm --network public busybox probe http 198.19.0.1 8081 1000
  [ "$output" = "http 198.19.0.1:8081: timeout" ] || { show_run; false; }
  run outer nft list chain inet agsx forward
  [[ "$output" == *'agsx:end'* ]] || { echo "$output" >&3; false; }
}

# The build step's `sleep 20` runs: a process of this test's uid ranges,
# descended from this test's agsx (our_processes, helpers.bash).
step_sleeps() {
  local p
  for p in $(our_processes | awk '{ print $1 }'); do
    [ "$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)" = "sleep 20 " ] && return 0
  done
  return 1
}

@test "firewall: a build's RUN step whose rules go is stopped and fails" {
  mkdir -p "$T/ctx"
  printf 'FROM busybox\nRUN sleep 20\n' >"$T/ctx/Dockerfile"
  nax build -q "$T/ctx" >"$T/build.out" 2>&1 &
  local pid=$! i st=0
  # The step's command runs (its rules are in and watched before the
  # command starts; a build step has no record to say so), 20 s at most
  # however loaded the host.
  for i in $(seq 100); do
    step_sleeps && break
    sleep 0.1
  done
  outer nft flush ruleset
  wait "$pid" || st=$?
  [ "$st" = 125 ] || { echo "# status $st: $(cat "$T/build.out")" >&3; false; }
  grep -q 'Dockerfile:2: RUN: cut off from network `public`' "$T/build.out" ||
    { cat "$T/build.out" >&3; false; }
}

@test "firewall: without br_netfilter public sandboxes still do not reach each other" {
  run_nax run -d --name s1 --network public busybox probe listen 8080
  assert_success
  wait_listen s1 8080
  no_br_netfilter agsx0
  local a1
  a1=$(field_of s1 address)
  run_nax run --rm --network public busybox sh -c "probe connect $a1 8080 1000; probe connect 198.18.0.2 80"
  assert_success
  [ "${lines[0]}" = "connect $a1:8080: timeout" ] || { show_run; false; }
  [ "${lines[1]}" = "connect 198.18.0.2:80: ok" ] || { show_run; false; }
}

@test "firewall: without br_netfilter vpc members reach each other only as the rules say" {
  run_nax network create team --subnet 198.19.21.0/24
  assert_success
  run_nax run -d --name b --network vpc:team --deny "in tcp/8081" busybox sh -c \
    'probe listen 8080 & probe listen 8081 & wait'
  assert_success
  wait_listen b 8080 && wait_listen b 8081
  local bridge ab
  bridge=$(nax network inspect team | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["bridge"])')
  no_br_netfilter "$bridge"
  ab=$(field_of b address)
  run_nax run --rm --network vpc:team busybox sh -c "probe connect $ab 8080; probe connect $ab 8081 1000"
  assert_success
  [ "${lines[0]}" = "connect $ab:8080: ok" ] || { show_run; false; }
  [ "${lines[1]}" = "connect $ab:8081: timeout" ] || { show_run; false; }
}

@test "firewall: vpc allowances out to the default peer do not open private ranges" {
  run_nax network create team --subnet 198.19.22.0/24 --allow "out tcp/80"
  assert_success
  run_nax run -d --name m --network vpc:team busybox sleep 60
  assert_success
  local addr hex
  addr=$(field_of m address)
  hex=$(printf '%02x' ${addr//./ })
  run outer nft list chain inet agsx "e_$hex"
  assert_success
  [[ "$output" == *'ip daddr != @private tcp dport 80 return'* ]] || { echo "$output" >&3; false; }
  # The world is no private range: still reached.
  run_nax run --rm --network vpc:team busybox probe http 198.18.0.2 80
  [ "$output" = "http 198.18.0.2:80: world" ] || { show_run; false; }
}
