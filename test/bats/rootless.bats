#!/usr/bin/env bats
# An ordinary user's agsx (src/host/rootless.h): no root, no setuid helper
# of agsx's own. Each test user runs agsx through runuser with its own
# runtime, data and config directories under $T; agsx keeps the user's
# namespace alive with a holder process, maps it with Debian's setuid
# newuidmap/newgidmap from /etc/subuid, and runs the sandboxes in it.
#
# Four users are made for the file (and removed with everything they
# left): A and B with 65536 subordinate ids each, in ranges no other line
# of /etc/subuid uses, C with none (the one-id namespace), and D with four
# ranges of 65536 (a range of its own per sandbox: src/sandbox/ranges.h).
#
# These users have no systemd user manager (test/guest/rootless-systemd.bats
# has one): limits and pause are refused with the reason. Public and vpc
# networks go through the user's router and pasta (src/net/usernet.h), tested
# inside a networld (test/fixtures/networld) only.

load helpers
bats_require_minimum_version 1.5.0

setup_file() {
  export FILE_SKIP=
  command -v newuidmap >/dev/null || { FILE_SKIP="newuidmap is not installed (apt-get install uidmap)"; return 0; }
  command -v runuser >/dev/null || { FILE_SKIP="runuser is missing (util-linux)"; return 0; }
  busybox_setup_file
  export RLA=agsxrla$$ RLB=agsxrlb$$ RLC=agsxrlc$$ RLD=agsxrld$$
  local base
  base=$(free_subid_base)
  export RLA_BASE=$base RLB_BASE=$((base + 65536)) RLD_BASE=$((base + 131072))
  rootless_user_add "$RLA" "$RLA_BASE"
  rootless_user_add "$RLB" "$RLB_BASE"
  rootless_user_add "$RLC"
  rootless_user_add "$RLD" "$RLD_BASE" 262144
  # agsx and the busybox image must be reachable by the users.
  if ! runuser -u "$RLA" -- test -x "$AGSX"; then
    FILE_SKIP="$AGSX cannot be executed by an ordinary user (a directory on its path is not searchable)"
  fi
  # The npm e2b SDK for the serve test, as serve.bats installs it.
  export NODE_LATEST=
  local mods
  if command -v node >/dev/null && mods=$("$AGSX_SRCDIR/test/serve/npm-install" 2>/dev/null); then
    NODE_LATEST=$(sed -n 1p <<<"$mods")
  fi
  RLBB=$(mktemp -d /tmp/agsx-rlbb.XXXXXX)
  export RLBB
  cp -a "$BB/." "$RLBB/"
  chmod -R a+rX "$RLBB"
}

# Every process of the users (holders, supervisors) and of their ranges
# (sandboxes) is killed, then the users and their lines go.
teardown_file() {
  [ -n "${RLA:-}" ] || return 0
  rootless_users_remove "$RLA" "$RLB" "$RLC" "$RLD"
  rm -rf "${RLBB:-/nonexistent}"
}

setup() {
  [ -z "${FILE_SKIP:-}" ] || skip "$FILE_SKIP"
  common_setup
  chmod 0711 "$T"
  local u
  for u in "$RLA" "$RLB" "$RLC" "$RLD"; do
    install -d -m 0700 -o "$u" -g "$u" "$T/run-$u" "$T/data-$u" "$T/conf-$u"
  done
}

teardown() {
  [ -z "${FILE_SKIP:-}" ] || return 0
  local u rc=0 left
  # The users' sandboxes end with kill --all; what is left is a leak.
  for u in "$RLA" "$RLB" "$RLC" "$RLD"; do
    agsx_as "$u" kill --all >/dev/null 2>&1 || true
    agsx_as "$u" gc >/dev/null 2>&1 || true
  done
  for u in "$RLA" "$RLB" "$RLD"; do
    left=$(pgrep -u "$(subid_of "$u")" -a 2>/dev/null || true)
    if [ -n "$left" ]; then
      echo "# sandbox processes of $u left: $left" >&3
      rc=1
    fi
  done
  # The holders (and routers) go with the test (they would outlive it).
  rootless_users_kill "$RLA" "$RLB" "$RLC" "$RLD"
  if [ -s "$T/nw/outer.pid" ]; then
    assert_user_networld_clean || rc=1
    "$FIXTURES/networld" stop "$T/nw"
  fi
  common_teardown || rc=1
  return $rc
}

# subid_of USER: the host ids of USER's ranges, comma-separated (pgrep -u).
subid_of() {
  case $1 in
  "$RLA") echo "$RLA_BASE" ;;
  "$RLB") echo "$RLB_BASE" ;;
  *) echo "$RLD_BASE,$((RLD_BASE + 65536)),$((RLD_BASE + 131072)),$((RLD_BASE + 196608))" ;;
  esac
}

# agsx_as USER ARGS: agsx as USER (a login's environment: HOME, PATH, its
# runtime directory), under timeout.
agsx_as() {
  local u=$1
  shift
  runuser -u "$u" -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$(getent passwd "$u" | cut -d: -f6)" \
    XDG_RUNTIME_DIR="$T/run-$u" XDG_DATA_HOME="$T/data-$u" XDG_CONFIG_HOME="$T/conf-$u" \
    timeout --kill-after=5 "${AX_TIMEOUT:-60}" "$AGSX" "$@"
}

run_as() {
  AX_CMD="agsx (as $1) ${*:2}"
  run agsx_as "$@"
}

# agsx as USER inside the test's networld (public and vpc networks).
nagsx_as() {
  local u=$1
  shift
  nsenter -t "$OUTER" --net --mount -- runuser -u "$u" -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    HOME="$(getent passwd "$u" | cut -d: -f6)" XDG_RUNTIME_DIR="$T/run-$u" \
    XDG_DATA_HOME="$T/data-$u" XDG_CONFIG_HOME="$T/conf-$u" AGSX_PULL=never \
    timeout --kill-after=5 "${AX_TIMEOUT:-60}" "$AGSX" "$@"
}
run_nas() { # (stdout only: the limits warning is on stderr, shown on a failure)
  AX_CMD="agsx (as $1, in the outer namespace) ${*:2}"
  run --separate-stderr nagsx_as "$@"
  [ "$status" -eq 0 ] || printf '# stderr: %s\n' "$stderr" >&3
}
outer() { nsenter -t "$OUTER" --net --mount -- "$@"; }

# The outer namespace holds nothing of the users' networks: their bridges,
# tables and veths were in their routers, which are gone.
assert_user_networld_clean() {
  local left
  left=$(outer ip -o link show | awk -F': ' '{print $2}' | grep -E '^agsx' || true)
  [ -z "$left" ] || { echo "# links left in the outer namespace: $left" >&3; return 1; }
  left=$(outer nft list tables | grep agsx || true)
  [ -z "$left" ] || { echo "# nft tables left in the outer namespace: $left" >&3; return 1; }
  left=$(pgrep -u "$RLA,$RLB" -a 2>/dev/null || true)
  [ -z "$left" ] || { echo "# the users' processes left: $left" >&3; return 1; }
}

# wait_parked USER: USER's one pool has a parked sandbox (5 s at most).
wait_parked() {
  local parked=
  for _ in $(seq 50); do
    parked=$(agsx_as "$1" --json pool ls 2>/dev/null | jq -r '.[0].parked')
    [ "$parked" = 1 ] && return 0
    sleep 0.1
  done
  echo "# no parked sandbox in $1's pool" >&3
  return 1
}

# The host pid of the process whose command line is exactly CMD.
host_pid_of() { pgrep -xf -- "$1" | head -1; }

@test "rootless: run as an ordinary user: the user's paths, a namespace of its own, sandbox root a subordinate id" {
  run_as "$RLA" run host sh -c 'id -u; cat /proc/self/uid_map'
  show_run
  [ "$status" -eq 0 ]
  grep -qx 0 <<<"$output"
  # The map is the user's namespace's ids 0-65535 (its subordinate ids).
  grep -qE '^ +0 +0 +65536$' <<<"$output"
  grep -q "limits are off" <<<"$output"
  # State and store are the user's own, and nothing went to root's paths.
  [ -d "$T/run-$RLA/agsx" ]
  [ "$(stat -c %U "$T/run-$RLA/agsx")" = "$RLA" ]
  # A detached sandbox: its processes are the user's first subordinate id
  # on the host, never the user.
  run_as "$RLA" run -d host sleep 4241
  [ "$status" -eq 0 ]
  local id=${lines[-1]} pid
  for _ in $(seq 50); do
    pid=$(host_pid_of "sleep 4241")
    [ -n "$pid" ] && break
    sleep 0.1
  done
  [ -n "$pid" ]
  [ "$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")" = "$RLA_BASE" ]
  [ "$(awk '/^Gid:/ {print $2}' "/proc/$pid/status")" = "$RLA_BASE" ]
  # The holder is the user's, and so is the supervisor.
  pgrep -u "$RLA" -x agsx-userns >/dev/null
  run_as "$RLA" ls -q
  [ "$status" -eq 0 ]
  [[ $output == *"${id:0:12}"* ]]
  run_as "$RLA" kill "$id"
  [ "$status" -eq 0 ]
}

@test "rootless: image load and run, exec, logs, cp, wait, gc" {
  run_as "$RLA" image load --tag bb "$RLBB"
  show_run
  [ "$status" -eq 0 ]
  # The layers hold the sandbox's ids, which are the user's subordinate
  # ids on disk; the store's own files are the user's.
  local bin
  bin=$(find "$T/data-$RLA/agsx/layers" -mindepth 2 -maxdepth 2 -name bin | head -1)
  [ -n "$bin" ]
  [ "$(stat -c %u "$bin")" = "$RLA_BASE" ]
  # (the image's user 1000 owns its home: the user's id 1000 up)
  [ -n "$(find "$T/data-$RLA/agsx/layers" -uid $((RLA_BASE + 1000)) | head -1)" ]
  [ "$(stat -c %U "$T/data-$RLA/agsx/index.json")" = "$RLA" ]
  run_as "$RLA" run bb sh -c 'id -u; ls -ln /bin/busybox | awk "{print \$3}"'
  show_run
  [ "$status" -eq 0 ]
  [ "${lines[-2]}" = 0 ]
  [ "${lines[-1]}" = 0 ]
  # The image's own user (1000) in the sandbox.
  run_as "$RLA" run -u 1000 bb sh -c 'id -u; echo x >/tmp/f; stat -c %u /tmp/f'
  [ "$status" -eq 0 ]
  [ "${lines[-1]}" = 1000 ]
  run_as "$RLA" run -d --name rl1 bb sh -c 'echo started; sleep 60'
  [ "$status" -eq 0 ]
  run_as "$RLA" exec rl1 sh -c 'echo in-exec; id -u'
  show_run
  [ "$status" -eq 0 ]
  [[ $output == *in-exec* ]]
  [ "${lines[-1]}" = 0 ]
  run_as "$RLA" exec rl1 sh -c 'exit 9'
  [ "$status" -eq 9 ]
  run_as "$RLA" logs rl1
  [[ $output == *started* ]]
  echo hello >"$T/in.txt"
  chmod a+r "$T/in.txt"
  run_as "$RLA" cp "$T/in.txt" rl1:/tmp/in.txt
  show_run
  [ "$status" -eq 0 ]
  run_as "$RLA" exec rl1 cat /tmp/in.txt
  [ "$output" = hello ]
  run_as "$RLA" kill rl1
  [ "$status" -eq 0 ]
  run_as "$RLA" wait rl1
  [ "$output" = 143 ]
  run_as "$RLA" gc
  [ "$status" -eq 0 ]
  run_as "$RLA" ls -aq
  [ -z "$output" ]
}

@test "rootless: limits and pause are refused with the reason; info says what holds" {
  run_as "$RLA" run --memory 64m host true
  [ "$status" -eq 125 ]
  [[ $output == *"limits (memory, cpus, pids) need a cgroup"* ]]
  run_as "$RLA" run --pids 10 host true
  [ "$status" -eq 125 ]
  [[ $output == *"limits (memory, cpus, pids) need a cgroup"* ]]
  run_as "$RLA" run --cpus 0.5 host true
  [ "$status" -eq 125 ]
  [[ $output == *"limits (memory, cpus, pids) need a cgroup"* ]]
  # a snapshot pauses
  run_as "$RLA" run -d --name sn host sleep 60
  run_as "$RLA" snapshot sn
  [ "$status" -eq 125 ]
  [[ $output == *"needs a cgroup"* ]]
  run_as "$RLA" run -d --name p1 host sleep 60
  [ "$status" -eq 0 ]
  run_as "$RLA" pause p1
  [ "$status" -eq 125 ]
  [[ $output == *"freezing a sandbox (pause, snapshot, fork, commit) needs a cgroup"* ]]
  # Nothing was marked paused: exec still runs.
  run_as "$RLA" exec p1 true
  [ "$status" -eq 0 ]
  # stats: no cgroup counts CPU, memory or tasks: unknown, never 0.
  run_as "$RLA" --json stats --no-stream p1
  show_run
  [ "$status" -eq 0 ]
  [ "$(jq -r '.[0].pids' <<<"${lines[-1]}")" = null ]
  [ "$(jq -r '.[0].cpu_ns' <<<"${lines[-1]}")" = null ]
  [ "$(jq -r '.[0].disk_size' <<<"${lines[-1]}")" -gt 0 ]
  run_as "$RLA" info
  show_run
  [ "$status" -eq 0 ]
  [[ $output == *"rootless: yes, user $(id -u "$RLA")"* ]]
  [[ $output == *"are the host's $RLA_BASE-$((RLA_BASE + 65535))"* ]]
  [[ $output == *"manager none"* ]]
  [[ $output == *"connected to the host by pasta"* ]]
  run_as "$RLA" --json info
  [ "$(jq -r .rootless.host_uid0 <<<"$output")" = "$RLA_BASE" ]
  [ "$(jq -r .rootless.ids <<<"$output")" = 65536 ]
  [ "$(jq -r .cgroup.manager <<<"$output")" = none ]
  # Root's view is unchanged.
  run "$AGSX" --root "$ROOT" --state "$STATE" info
  [[ $output == *"rootless: no"* ]]
}

@test "rootless: one user cannot see, signal or enter another's sandboxes" {
  run_as "$RLA" run -d --name mine host sleep 4242
  [ "$status" -eq 0 ]
  local id=${lines[-1]}
  run_as "$RLB" ls -aq
  [ "$status" -eq 0 ]
  [ -z "$output" ]
  run_as "$RLB" kill "$id"
  [ "$status" -ne 0 ]
  run_as "$RLB" exec "$id" true
  [ "$status" -ne 0 ]
  # B's sandboxes are B's ids, another range.
  run_as "$RLB" run host cat /proc/self/uid_map
  [ "$status" -eq 0 ]
  # B cannot join A's namespace, nor A's sandbox's, nor read A's state.
  local holder spid
  holder=$(pgrep -u "$RLA" -x agsx-userns | head -1)
  [ -n "$holder" ]
  run runuser -u "$RLB" -- nsenter -t "$holder" -U true
  [ "$status" -ne 0 ]
  spid=$(host_pid_of "sleep 4242")
  [ -n "$spid" ]
  run runuser -u "$RLB" -- nsenter -t "$spid" -U -m true
  [ "$status" -ne 0 ]
  run runuser -u "$RLB" -- kill -0 "$spid"
  [ "$status" -ne 0 ]
  run runuser -u "$RLB" -- ls "$T/run-$RLA/agsx"
  [ "$status" -ne 0 ]
  # A's sandbox is still there.
  run_as "$RLA" exec mine true
  [ "$status" -eq 0 ]
}

@test "rootless: without subordinate ids, the one-id namespace runs simple commands; images that need ids name usermod" {
  run_as "$RLC" run host sh -c 'id -u; cat /proc/self/uid_map'
  show_run
  [ "$status" -eq 0 ]
  grep -qE '^ +0 +0 +1$' <<<"$output"
  # Its sandbox's root is the user itself (documented for this mode).
  run_as "$RLC" run -d host sleep 4243
  [ "$status" -eq 0 ]
  local pid
  for _ in $(seq 50); do
    pid=$(host_pid_of "sleep 4243")
    [ -n "$pid" ] && break
    sleep 0.1
  done
  [ "$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")" = "$(id -u "$RLC")" ]
  run_as "$RLC" image load --tag bb "$RLBB"
  [ "$status" -eq 125 ]
  [[ $output == *"usermod --add-subuids"* ]]
  # Nothing partial is left in the store.
  [ -z "$(ls -A "$T/data-$RLC/agsx/layers")" ]
  [ -z "$(ls -A "$T/data-$RLC/agsx/tmp")" ]
  run_as "$RLC" info
  [[ $output == *"a sandbox has one id, 0, which is the user itself"* ]]
}

@test "rootless: without a runtime directory, one line says what to set" {
  run runuser -u "$RLA" -- env -i PATH=/usr/bin:/bin HOME=/nonexistent "$AGSX" ls
  [ "$status" -eq 125 ]
  [[ $output == *"no runtime directory"* ]]
  [ "${#lines[@]}" -eq 1 ]
  # A state given by the user is enough.
  run runuser -u "$RLA" -- env -i PATH=/usr/bin:/bin HOME=/nonexistent AGSX_STATE="$T/run-$RLA/s" AGSX_ROOT="$T/data-$RLA/r" "$AGSX" ls -q
  [ "$status" -eq 0 ]
}

@test "rootless: -p publishes on the host's loopback (each connection's socket made in the sandbox's network namespace)" {
  run_as "$RLA" image load --tag bb "$RLBB"
  [ "$status" -eq 0 ]
  run_as "$RLA" run -d --name web -p 127.0.0.1::8080 bb sh -c 'echo rootless-web >/tmp/i.html; cd /tmp; exec httpd -f -p 8080'
  show_run
  [ "$status" -eq 0 ]
  run_as "$RLA" port web 8080
  [ "$status" -eq 0 ]
  local hp=${lines[-1]##*:} i body=
  for i in $(seq 50); do
    body=$(curl -s -m 2 "http://127.0.0.1:$hp/i.html" || true)
    [ -n "$body" ] && break
    sleep 0.1
  done
  [ "$body" = rootless-web ]
  # Several connections, one after the other.
  for i in 1 2 3 4 5; do
    [ "$(curl -s -m 2 "http://127.0.0.1:$hp/i.html")" = rootless-web ]
  done
  run_as "$RLA" kill web
  [ "$status" -eq 0 ]
}

@test "rootless: serve, driven by the unmodified E2B SDK (commands, a background command, a PTY, files)" {
  [ -n "$NODE_LATEST" ] || skip "the npm e2b SDK is not installed"
  runuser -u "$RLA" -- test -r "$NODE_LATEST/e2b/package.json" || skip "$NODE_LATEST is not readable by an ordinary user"
  run_as "$RLA" image load --tag bb "$RLBB"
  [ "$status" -eq 0 ]
  local port key
  port=$(free_port)
  key=k$(head -c8 /dev/urandom | od -An -tx1 | tr -d ' \n')
  agsx_as "$RLA" serve --listen "127.0.0.1:$port" --api-key "$key" --template bb=bb >"$T/serve.log" 2>&1 &
  local srv=$!
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$port/" && break
    sleep 0.05
  done
  local s
  for s in commands.mjs background.mjs files.mjs; do
    run runuser -u "$RLA" -- env -i PATH=/usr/bin:/bin HOME=/tmp E2B_SDK="$NODE_LATEST" \
      E2B_API_URL="http://127.0.0.1:$port" E2B_SANDBOX_URL="http://127.0.0.1:$port" \
      E2B_API_KEY="$key" E2B_TEMPLATE=bb timeout 120 node "$AGSX_SRCDIR/test/serve/$s"
    [ "${lines[-1]}" = ok ] || { echo "# $s: $output" >&3; cat "$T/serve.log" >&3; false; }
  done
  kill "$srv"
  wait "$srv" || true
  run_as "$RLA" ls -q
  [ -z "$output" ]
}

@test "rootless: public and vpc networks through the user's router and pasta (in a networld)" {
  command -v pasta >/dev/null || skip "pasta is not installed (apt-get install passt)"
  "$FIXTURES/networld" start "$T/nw"
  OUTER=$(cat "$T/nw/outer.pid")
  # The user's namespace made in the outer namespace: its mount namespace
  # (which the user's agsx joins) has the networld's /etc/resolv.conf.
  run_nas "$RLA" image load --tag bb "$RLBB"
  [ "$status" -eq 0 ]
  # Public: the world, not the host (its address, its loopback), not the
  # metadata service; the sandbox cannot spoof or change its addresses.
  run_nas "$RLA" run --rm --network public bb sh -c '
    probe http 198.18.0.2 80 3000
    probe http 198.18.0.1 8081 1000
    probe http 169.254.169.254 80 1000
    probe connect 127.0.0.1 8081 500
    probe resolve world.test
    ip addr add 10.89.0.250/24 dev eth0 2>/dev/null && echo addr-added
    ip route del default 2>/dev/null && echo route-deleted
    true'
  show_run
  [ "$status" -eq 0 ]
  [ "${lines[0]}" = "http 198.18.0.2:80: world" ]
  [ "${lines[1]}" = "http 198.18.0.1:8081: timeout" ]
  [ "${lines[2]}" = "http 169.254.169.254:80: timeout" ]
  [[ ${lines[3]} == "connect 127.0.0.1:8081: failed (errno=ECONNREFUSED)" ]]
  [[ ${lines[4]} == *198.18.0.2* ]]
  [[ $output != *addr-added* ]]
  [[ $output != *route-deleted* ]]
  # The host's own service answers from the outer namespace: the rules did it.
  run outer python3 -c 'import urllib.request as u; print(u.urlopen("http://198.18.0.1:8081/", timeout=2).read().decode().strip())'
  [ "$output" = host ]
  # The router and pasta are the user's processes; the outer namespace (the
  # host) got no bridge, veth or table.
  pgrep -u "$RLA" -x agsx-usernet >/dev/null
  pgrep -u "$RLA" -f '^pasta .*--no-map-gw' >/dev/null
  run outer ip -o link show
  [[ $output != *agsx* ]]
  run outer nft list tables
  [[ $output != *agsx* ]]
  run_as "$RLA" --json info
  [ "$(jq -r .rootless.usernet.running <<<"$output")" = true ]
  # An address of the host that pasta did not copy into the router (a second
  # one, added now): the router's own rules would not refuse it, the set of
  # the host's addresses must (refreshed at the next start, as it changed).
  outer ip addr add 198.18.5.1/32 dev lo
  run outer python3 -c 'import urllib.request as u; print(u.urlopen("http://198.18.5.1:8081/", timeout=2).read().decode().strip())'
  [ "$output" = host ]
  run_nas "$RLA" run --rm --network public bb probe http 198.18.5.1 8081 1000
  [ "$output" = "http 198.18.5.1:8081: timeout" ]

  # vpc: members reach each other, nothing else by default; an allowance
  # opens the world.
  run_nas "$RLA" network create --subnet 10.77.0.0/24 v1
  [ "$status" -eq 0 ]
  run_nas "$RLA" run -d --name s1 --network vpc:v1 bb probe listen 8080
  [ "$status" -eq 0 ]
  local a1=
  for _ in $(seq 50); do
    a1=$(nagsx_as "$RLA" --json inspect s1 | jq -r '.[0].address // empty' 2>/dev/null)
    [ -n "$a1" ] && nagsx_as "$RLA" exec s1 sh -c "netstat -ltn | grep -q ':8080 '" && break
    sleep 0.1
  done
  [[ $a1 == 10.77.0.* ]]
  run_nas "$RLA" run --rm --network vpc:v1 bb sh -c "probe connect $a1 8080 2000; probe http 198.18.0.2 80 1000"
  show_run
  [ "${lines[0]}" = "connect $a1:8080: ok" ]
  [ "${lines[1]}" = "http 198.18.0.2:80: timeout" ]
  run_nas "$RLA" run --rm --network vpc:v1 --allow "out tcp/80 0.0.0.0/0" bb probe http 198.18.0.2 80 2000
  [ "$output" = "http 198.18.0.2:80: world" ]
  run_nas "$RLA" run --rm --network public bb probe connect "$a1" 8080 1000
  [ "$output" = "connect $a1:8080: timeout" ]

  # Egress by name: nothing until the name is resolved through the relay.
  run_nas "$RLA" run --rm --network public --egress-allow allowed.test bb sh -c '
    probe http 198.18.0.2 80 1000; probe resolve allowed.test >/dev/null; probe http 198.18.0.2 80 2000'
  show_run
  [[ ${lines[0]} == "http 198.18.0.2:80: failed"* || ${lines[0]} == "http 198.18.0.2:80: timeout" ]]
  [ "${lines[1]}" = "http 198.18.0.2:80: world" ]

  # A second user has a router of its own, and cannot reach the first's
  # sandboxes (a private address, through two routers).
  run_nas "$RLB" image load --tag bb "$RLBB"
  run_nas "$RLB" run --rm --network public bb sh -c "probe http 198.18.0.2 80 3000; probe connect $a1 8080 1000"
  show_run
  [ "${lines[0]}" = "http 198.18.0.2:80: world" ]
  [ "${lines[1]}" = "connect $a1:8080: timeout" ]
  [ "$(pgrep -u "$RLB" -x agsx-usernet | wc -l)" = 1 ]

  # gc removes the router (and pasta) once no sandbox uses a network.
  run_nas "$RLA" kill s1
  [ "$status" -eq 0 ]
  run_nas "$RLA" gc
  show_run
  [[ $output == *"removed the user-mode network (router and pasta)"* ]]
  for _ in $(seq 50); do
    pgrep -u "$RLA" -x agsx-usernet >/dev/null || break
    sleep 0.1
  done
  run ! pgrep -u "$RLA" -x agsx-usernet
  run ! pgrep -u "$RLA" pasta
}

@test "rootless: image pull from a registry, build with RUN, a warm pool's claim, as the user" {
  command -v docker-registry >/dev/null || skip "docker-registry not installed"
  command -v skopeo >/dev/null || skip "skopeo not installed"
  local reg
  reg=$("$FIXTURES/registry" start "$T/reg")
  skopeo copy --insecure-policy --dest-tls-verify=false "oci:$RLBB:busybox:latest" \
    "docker://$reg/test/bb:1" >/dev/null 2>"$T/skopeo.err" || { cat "$T/skopeo.err" >&3; false; }
  # pull: the layers unpacked with the user's subordinate ids
  run_as "$RLA" pull "$reg/test/bb:1"
  show_run
  "$FIXTURES/registry" stop "$T/reg"
  [ "$status" -eq 0 ]
  run_as "$RLA" run --rm "$reg/test/bb:1" sh -c 'stat -c %u /bin/busybox; id -u'
  [ "$status" -eq 0 ]
  [ "${lines[-2]}" = 0 ]
  [ "${lines[-1]}" = 0 ]
  [ "$(find "$T/data-$RLA/agsx" -path '*/bin/busybox' -printf '%u\n' 2>/dev/null | sort -u | head -1)" = "$RLA_BASE" ]
  # build: RUN runs in a sandbox of the user's
  mkdir -p "$T/ctx"
  printf 'FROM %s\nRUN echo built-by-$(id -u) >/built\n' "$reg/test/bb:1" >"$T/ctx/Dockerfile"
  chmod -R a+rX "$T/ctx"
  run_as "$RLA" build -q --network internal -t built:1 "$T/ctx"
  show_run
  [ "$status" -eq 0 ]
  run_as "$RLA" run --rm built:1 cat /built
  [ "${lines[-1]}" = built-by-0 ]
  # a pool parks sandboxes of the user's; a claim gets one
  run_as "$RLA" pool create --image built:1 --size 1 p1
  show_run
  [ "$status" -eq 0 ]
  wait_parked "$RLA"
  run_as "$RLA" run --pool p1 --rm built:1 cat /built
  show_run
  [ "$status" -eq 0 ]
  [ "${lines[-1]}" = built-by-0 ]
  run_as "$RLA" pool rm p1
  [ "$status" -eq 0 ]
}

@test "rootless: agsx browser as the user: Chromium's DevTools answer (no default memory limit where limits are off)" {
  command -v chromium >/dev/null || skip "chromium is not installed"
  AX_TIMEOUT=120 run_as "$RLA" browser --json
  show_run
  [ "$status" -eq 0 ]
  local http id
  http=$(jq -r .http_url <<<"${lines[-1]}")
  id=$(jq -r .id <<<"${lines[-1]}")
  [[ $http == http://127.0.0.1:* ]]
  run curl -s --max-time 10 "$http/json/version"
  [[ $output == *'"Browser"'* ]]
  # Limits are off here: an explicit --memory is refused, with the reason.
  run_as "$RLA" browser --memory 1g
  [ "$status" -eq 125 ]
  [[ $output == *"limits (memory, cpus, pids) need a cgroup"* ]]
  run_as "$RLA" kill "$id"
  [ "$status" -eq 0 ]
}

@test "rootless: a public start where pasta cannot connect the router fails with pasta's reason, leaving nothing" {
  command -v pasta >/dev/null || skip "pasta is not installed (apt-get install passt)"
  # A network namespace of the test's with loopback only: no route for pasta.
  local ns=agsxnoroute$$
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  AX_CMD="agsx (as $RLA, in a namespace without a route) run --network public"
  run nsenter --net="/run/netns/$ns" -- runuser -u "$RLA" -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    HOME="$(getent passwd "$RLA" | cut -d: -f6)" XDG_RUNTIME_DIR="$T/run-$RLA" \
    XDG_DATA_HOME="$T/data-$RLA" XDG_CONFIG_HOME="$T/conf-$RLA" AGSX_PULL=never \
    timeout 60 "$AGSX" run --rm --network public host true
  ip netns del "$ns"
  show_run
  [ "$status" -eq 125 ]
  [[ $output == *"network \`public\`: the user-mode network: pasta exited"* ]]
  # No router (a zombie waits for init to reap it), record or sandbox is left.
  [ -z "$(ps -u "$RLA" -o stat=,comm= | awk '$1 !~ /^Z/ && $2 == "agsx-usernet"')" ]
  [ ! -e "$T/run-$RLA/agsx/usernet" ]
  [ -z "$(ls "$T/run-$RLA/agsx" | grep -E '^[0-9a-f]{32}$' || true)" ]
}

# The host uid of the process whose command line is exactly CMD, waited for.
host_uid_of() {
  local pid=
  for _ in $(seq 50); do
    pid=$(host_pid_of "$1")
    [ -n "$pid" ] && break
    sleep 0.1
  done
  [ -n "$pid" ] && awk '/^Uid:/ {print $2}' "/proc/$pid/status"
}

@test "rootless: with several ranges each sandbox has its own, its layers copied to it; a volume's and the overflow share range 0; gc removes the copies" {
  run_as "$RLD" image load --tag bb "$RLBB"
  [ "$status" -eq 0 ]
  run_as "$RLD" info
  show_run
  [[ $output == *"ids: 4 ranges of 65536 from the host's uid $RLD_BASE and gid $RLD_BASE"* ]]
  [[ $output == *"each sandbox gets one of its own while one is free (ranges"* ]]
  run_as "$RLD" --json info
  [ "$(jq -r .rootless.ranges <<<"$output")" = per-sandbox ]
  [ "$(jq -r .rootless.own_ranges <<<"$output")" = 3 ]
  [ "$(jq -r .rootless.ids <<<"$output")" = 65536 ]
  # Ranges 1, 2 and 3 (lowest first), then the shared range 0.
  local n
  for n in 1 2 3 4; do
    run_as "$RLD" run -d --name "d$n" bb sleep "424$n"
    [ "$status" -eq 0 ]
  done
  for n in 1 2 3; do
    [ "$(host_uid_of "sleep 424$n")" = $((RLD_BASE + n * 65536)) ]
  done
  [ "$(host_uid_of "sleep 4244")" = "$RLD_BASE" ]
  # Inside, a sandbox of its own range sees the image as it is: root owns
  # its files, the image's user its home, and root may change them.
  run_as "$RLD" exec d2 sh -c 'cat /proc/self/uid_map; stat -c %u /bin/busybox /home/agent; echo x >>/etc/passwd && echo wrote'
  show_run
  [ "$status" -eq 0 ]
  grep -qE '^ +0 +131072 +65536$' <<<"$output"
  [ "${lines[-3]}" = 0 ]
  [ "${lines[-2]}" = 1000 ]
  [ "${lines[-1]}" = wrote ]
  # The copies, owned on the host by their ranges' ids; the layers by range 0's.
  local store=$T/data-$RLD/agsx bin
  bin=$(find "$store/ranges/2" -mindepth 2 -maxdepth 2 -name bin | head -1)
  [ -n "$bin" ]
  [ "$(stat -c %u "$bin")" = $((RLD_BASE + 131072)) ]
  [ -n "$(find "$store/ranges/2" -uid $((RLD_BASE + 131072 + 1000)) | head -1)" ]
  bin=$(find "$store/layers" -mindepth 2 -maxdepth 2 -name bin | head -1)
  [ "$(stat -c %u "$bin")" = "$RLD_BASE" ]
  [ ! -e "$store/ranges/0" ]
  # cp into and out of a sandbox of its own range: the sandbox's ids.
  echo hello >"$T/f.txt"
  chmod 0644 "$T/f.txt"
  run_as "$RLD" cp "$T/f.txt" d3:/root/f.txt
  [ "$status" -eq 0 ]
  run_as "$RLD" exec d3 stat -c '%u %g' /root/f.txt
  [ "${lines[-1]}" = "0 0" ]
  run_as "$RLD" cp d3:/root/f.txt -
  [[ $output == *f.txt* ]]
  # A sandbox that mounts a named volume shares range 0, as the volume's
  # files are its ids.
  run_as "$RLD" kill d1
  run_as "$RLD" volume create rv
  [ "$status" -eq 0 ]
  run_as "$RLD" run --rm -v rv:/data bb sh -c 'cat /proc/self/uid_map; touch /data/z; stat -c %u /data/z'
  show_run
  [ "$status" -eq 0 ]
  grep -qE '^ +0 +0 +65536$' <<<"$output"
  [ "${lines[-1]}" = 0 ]
  # The freed range 1 is taken again, its copies kept.
  run_as "$RLD" run --rm bb cat /proc/self/uid_map
  grep -qE '^ +0 +65536 +65536$' <<<"$output"
  # A pool's parked sandbox holds a range of its own (the lowest free: 1);
  # its claim runs there, the image's files as they are.
  run_as "$RLD" pool create --image bb --size 1 rp
  [ "$status" -eq 0 ]
  wait_parked "$RLD"
  run_as "$RLD" run --pool rp --rm bb sh -c 'cat /proc/self/uid_map; stat -c %u /bin/busybox'
  show_run
  [ "$status" -eq 0 ]
  grep -qE '^ +0 +65536 +65536$' <<<"$output"
  [ "${lines[-1]}" = 0 ]
  run_as "$RLD" pool rm rp
  [ "$status" -eq 0 ]
  # gc keeps the copies of held ranges and of layers still there; once the
  # image is gone, its copies go.
  run_as "$RLD" kill --all
  run_as "$RLD" gc
  [ -d "$store/ranges/1" ]
  run_as "$RLD" volume rm rv
  run_as "$RLD" image rm bb
  [ "$status" -eq 0 ]
  run_as "$RLD" gc --images
  show_run
  [ "$status" -eq 0 ]
  [[ $output == *"removed id range copy 1/"* ]]
  [[ $output == *"removed id range copy 3/"* ]]
  [ ! -e "$store/ranges" ]
}

@test "rootless: a layer copy that fails refuses the start with the reason, leaving no partial copy, sandbox or held range" {
  command -v chattr >/dev/null || skip "chattr is missing (e2fsprogs)"
  run_as "$RLD" image load --tag bb "$RLBB"
  [ "$status" -eq 0 ]
  # An image of one small layer, not yet copied to any range.
  mkdir -p "$T/xl"
  echo x >"$T/xl/x"
  "$FIXTURES/mkimage" --ref extra:1 "$T/extra" "$T/xl" >/dev/null
  chmod -R a+rX "$T/extra"
  run_as "$RLD" image load "$T/extra"
  [ "$status" -eq 0 ]
  run_as "$RLD" run --rm bb true
  [ "$status" -eq 0 ]
  local r1=$T/data-$RLD/agsx/ranges/1
  [ -d "$r1" ]
  # Range 1's directory may not take the copy (immutable: not even the
  # user's namespace's root may add to it).
  chattr +i "$r1" 2>/dev/null || skip "chattr +i is not supported on $T's file system"
  run_as "$RLD" run --rm extra:1 /x
  chattr -i "$r1"
  show_run
  [ "$status" -eq 125 ]
  [[ $output == *"copy layer "*" for id range 1"*"Operation not permitted"* ]]
  [ -z "$(ls -A "$r1" | grep '^\.tmp-' || true)" ]
  [ -z "$(ls "$T/run-$RLD/agsx" | grep -E '^[0-9a-f]{32}$' || true)" ]
  # Range 1 was let go: the next start takes it, and makes the copy.
  run_as "$RLD" run --rm extra:1 /x
  [ "$status" -ne 0 ]
  [ -n "$(ls "$r1" | grep -v '^\.' || true)" ]
  run_as "$RLD" run --rm bb cat /proc/self/uid_map
  grep -qE '^ +0 +65536 +65536$' <<<"$output"
}

@test "rootless: an image's file capabilities belong to the root of each range's copy" {
  command -v setcap >/dev/null || skip "setcap is not installed (libcap2-bin)"
  # An image of one layer: busybox with cap_net_raw, packed with its xattr.
  mkdir -p "$T/capl/usr/local/bin"
  cp "${BUSYBOX:-/bin/busybox}" "$T/capl/usr/local/bin/busybox"
  setcap cap_net_raw+ep "$T/capl/usr/local/bin/busybox"
  tar -C "$T/capl" --xattrs --xattrs-include=security.capability --numeric-owner --owner=0 \
    --group=0 -cf "$T/capl.tar" .
  "$FIXTURES/mkimage" --ref cap:latest "$T/capimg" "$T/capl.tar" >/dev/null
  chmod -R a+rX "$T/capimg"
  run_as "$RLD" image load "$T/capimg"
  [ "$status" -eq 0 ]
  # In range 1 (its copy) and in the shared range 0 (the layer as is), a
  # user of the sandbox that runs it has the capability.
  local hold=
  for hold in "" x; do
    if [ -n "$hold" ]; then
      for n in 1 2 3; do
        run_as "$RLD" run -d cap /usr/local/bin/busybox sleep 60
        [ "$status" -eq 0 ]
      done
    fi
    run_as "$RLD" run --rm -u 1000 cap /usr/local/bin/busybox sh -c \
      'cat /proc/self/uid_map; /usr/local/bin/busybox grep CapEff /proc/self/status'
    show_run
    [ "$status" -eq 0 ]
    [[ $output == *"CapEff:	0000000000002000"* ]]
    if [ -n "$hold" ]; then
      grep -qE '^ +0 +0 +65536$' <<<"$output"
    else
      grep -qE '^ +0 +65536 +65536$' <<<"$output"
    fi
  done
  local copy
  copy=$(find "$T/data-$RLD/agsx/ranges/1" -path '*/usr/local/bin/busybox')
  [[ $(getcap -n "$copy") == *"rootid=$((RLD_BASE + 65536))"* ]]
}
