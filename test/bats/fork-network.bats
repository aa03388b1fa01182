#!/usr/bin/env bats
# test-runner: parallel
# agsx fork on public and vpc networks (sandbox/snapshot.h): every fork has
# its own address and reaches what its source reaches. Inside an outer
# namespace with a "world" (test/fixtures/networld), as network.bats: no
# packet leaves it, nothing is sent from the host's namespace.

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

@test "fork: public: two forks have their own addresses and reach the world as their source" {
  run_nax run -d --name src --network public busybox sleep 300
  assert_success
  run_nax fork -n 2 --name f src
  assert_success
  local n a seen=""
  for n in src f-1 f-2; do
    a=$(addr_of "$n")
    [[ "$a" == 198.19.0.* ]] || { echo "# $n: address $a" >&3; return 1; }
    [[ " $seen " != *" $a "* ]] || { echo "# $n shares address $a: $seen" >&3; return 1; }
    seen+=" $a"
    run_nax exec "$n" sh -c 'probe http 198.18.0.2 80; ip -4 -o addr show eth0'
    assert_success
    [ "${lines[0]}" = "http 198.18.0.2:80: world" ] || { show_run; return 1; }
    [[ "${lines[1]}" == *"inet $a/24"* ]] || { show_run; return 1; }
  done
  # Public sandboxes do not reach one another, forks included.
  nax exec -d f-1 probe listen 8080 >/dev/null
  wait_listen f-1 8080
  run_nax exec f-2 probe connect "$(addr_of f-1)" 8080 1000
  [ "$output" = "connect $(addr_of f-1):8080: timeout" ] || { show_run; return 1; }
}

@test "fork: vpc: forks get their own addresses and reach the source and each other, not the world" {
  run_nax network create team --subnet 198.19.7.0/24
  assert_success
  run_nax run -d --name src --network vpc:team busybox probe listen 8080
  assert_success
  wait_listen src 8080
  run_nax fork -n 2 --name f src
  assert_success
  wait_listen f-1 8080
  wait_listen f-2 8080
  local s f1 f2
  s=$(addr_of src)
  f1=$(addr_of f-1)
  f2=$(addr_of f-2)
  [[ "$s" == 198.19.7.* && "$f1" == 198.19.7.* && "$f2" == 198.19.7.* ]] || { echo "# $s $f1 $f2" >&3; return 1; }
  [ "$(printf '%s\n' "$s" "$f1" "$f2" | sort -u | wc -l)" = 3 ] || { echo "# $s $f1 $f2" >&3; return 1; }
  run_nax exec f-1 sh -c "probe connect $s 8080; probe connect $f2 8080; probe http 198.18.0.2 80 1000"
  assert_success
  [ "$output" = "connect $s:8080: ok"$'\n'"connect $f2:8080: ok"$'\n'"http 198.18.0.2:80: timeout" ] || { show_run; return 1; }
  run_nax exec src sh -c "probe connect $f1 8080; probe http 198.18.0.2 80 1000"
  [ "$output" = "connect $f1:8080: ok"$'\n'"http 198.18.0.2:80: timeout" ] || { show_run; return 1; }
  run_nax kill src f-1 f-2
  assert_success
  run_nax network rm team
  assert_success
}
