#!/usr/bin/env bats
# An ordinary user's sandboxes on a systemd host (src/host/rootless.h,
# host/cgroup.h): systemd's user manager (user@UID.service, lingering on)
# delegates memory, pids and cpu to the user, and agsx makes each sandbox a
# transient scope of that manager, agsx.slice/agsx-<id>.scope in
# user@UID.service, with the limits in its sandbox/. Run by the guest lane
# (Debian's systemd, cgroup v2); elsewhere every test skips, saying why.
#
# The user is made for the file (three ranges of 65536 subordinate ids no
# other line uses, so that each sandbox has a range of its own:
# src/sandbox/ranges.h; lingering on) and removed with everything it left.

load ../bats/helpers

bats_require_minimum_version 1.5.0

setup_file() {
  export FILE_SKIP=
  if [ ! -d /run/systemd/system ]; then
    FILE_SKIP="systemd is not PID 1 here (the guest lane has it)"
  elif [ "$(stat -fc %T /sys/fs/cgroup)" != cgroup2fs ]; then
    FILE_SKIP="/sys/fs/cgroup is not the unified cgroup v2 hierarchy"
  elif ! command -v newuidmap >/dev/null; then
    FILE_SKIP="newuidmap is not installed (apt-get install uidmap)"
  fi
  [ -z "$FILE_SKIP" ] || return 0
  busybox_setup_file
  export RLU=agsxrls$$
  RLU_BASE=$(free_subid_base)
  export RLU_BASE
  rootless_user_add "$RLU" "$RLU_BASE" 196608
  export RLU_IDS="$RLU_BASE,$((RLU_BASE + 65536)),$((RLU_BASE + 131072))"
  RLUID=$(id -u "$RLU")
  export RLUID RLRUN=/run/user/$RLUID
  loginctl enable-linger "$RLU"
  local i
  for i in $(seq 300); do
    [ -S "$RLRUN/systemd/private" ] && break
    sleep 0.1
  done
  [ -S "$RLRUN/systemd/private" ] || FILE_SKIP="user@$RLUID.service did not start"
  if ! runuser -u "$RLU" -- test -x "$AGSX"; then
    FILE_SKIP="$AGSX cannot be executed by an ordinary user"
  fi
  RLBB=$(mktemp -d /tmp/agsx-rlbb.XXXXXX)
  export RLBB
  cp -a "$BB/." "$RLBB/"
  chmod -R a+rX "$RLBB"
}

teardown_file() {
  [ -n "${RLU:-}" ] || return 0
  loginctl disable-linger "$RLU" 2>/dev/null || true
  systemctl stop "user@$RLUID.service" 2>/dev/null || true
  rootless_users_remove "$RLU"
  rm -rf "${RLBB:-/nonexistent}"
}

setup() {
  [ -z "${FILE_SKIP:-}" ] || skip "$FILE_SKIP"
  common_setup
  chmod 0711 "$T"
  install -d -m 0700 -o "$RLU" -g "$RLU" "$T/data" "$T/conf"
  AX_TIMEOUT=120
  ux image load --tag bb "$RLBB" >/dev/null
}

teardown() {
  [ -z "${FILE_SKIP:-}" ] || return 0
  local rc=0 left
  ux kill --all >/dev/null 2>&1 || true
  ux gc >/dev/null 2>&1 || true
  left=$(pgrep -u "$RLU_IDS" -a 2>/dev/null || true)
  if [ -n "$left" ]; then
    echo "# sandbox processes left: $left" >&3
    rc=1
  fi
  # No sandbox's scope is left in the user's manager (the user's namespace
  # has one, agsx-userns-PID.scope, for the file).
  if ls "$(uroot)/agsx.slice" 2>/dev/null | grep '^agsx-' | grep -qv '^agsx-userns-'; then
    echo "# scopes left: $(ls "$(uroot)/agsx.slice")" >&3
    rc=1
  fi
  if [ -s "$T/nw/outer.pid" ]; then
    "$FIXTURES/networld" stop "$T/nw"
  fi
  # The user's namespace holder goes with the test.
  pkill -KILL -u "$RLU" -x agsx-userns 2>/dev/null || true
  pkill -KILL -u "$RLU" -x agsx 2>/dev/null || true
  common_teardown || rc=1
  return $rc
}

uroot() { echo "/sys/fs/cgroup/user.slice/user-$RLUID.slice/user@$RLUID.service"; }
scope() { echo "$(uroot)/agsx.slice/agsx-$1.scope"; }

# ux ARGS: agsx as the user, in its login's environment (its runtime
# directory is systemd-logind's, where the user manager listens).
ux() {
  runuser -u "$RLU" -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="/home/$RLU" \
    XDG_RUNTIME_DIR="$RLRUN" XDG_DATA_HOME="$T/data" XDG_CONFIG_HOME="$T/conf" AGSX_PULL=never \
    timeout --kill-after=5 "${AX_TIMEOUT:-60}" "$AGSX" "$@"
}

run_ux() {
  AX_CMD="agsx (as $RLU) $*"
  run ux "$@"
}

@test "rootless systemd: agsx info names the user manager; limits reach the sandbox's scope in user@UID.service" {
  run_ux info
  show_run
  [ "$status" -eq 0 ]
  [[ $output == *"manager systemd"* ]]
  [[ $output == *"user manager delegates user@UID.service"* ]]
  run_ux run -d --memory 64m --cpus 0.5 --pids 40 bb sleep 1000
  show_run
  [ "$status" -eq 0 ]
  local id=${lines[-1]} s
  s=$(scope "$id")
  [ -d "$s/sandbox" ]
  [ "$(cat "$s/sandbox/memory.max")" = 67108864 ]
  [ "$(cat "$s/sandbox/memory.swap.max")" = 0 ]
  [ "$(cat "$s/sandbox/cpu.max")" = "50000 100000" ]
  [ "$(cat "$s/sandbox/pids.max")" = 40 ]
  # The sandbox's processes are the user's subordinate ids (range 1's, the
  # first of its own), in the scope.
  local pid
  pid=$(head -1 "$s/sandbox/cgroup.procs")
  [ -n "$pid" ]
  # (the init, then the command: both are the sandbox's ids)
  [ "$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")" = $((RLU_BASE + 65536)) ]
  # The user manager knows the scope by its name.
  run runuser -u "$RLU" -- env XDG_RUNTIME_DIR="$RLRUN" systemctl --user status "agsx-$id.scope"
  [[ $output == *"agsx sandbox ${id:0:12}"* ]]
  run_ux kill "$id"
  [ "$status" -eq 0 ]
}

@test "rootless systemd: OOM kill, the pids limit, pause and unpause" {
  run_ux run --memory 32m bb sh -c 'x=a; while :; do x=$x$x; done'
  show_run
  [ "$status" -eq 137 ]
  # A shell forking 40 sleeps under a limit of 12: the forks past it fail
  # (and the shell with them).
  run_ux run -d --pids 12 bb sleep 300
  show_run
  [ "$status" -eq 0 ]
  local f=${lines[-1]}
  run_ux exec "$f" sh -c 'for i in $(seq 40); do sleep 300 </dev/null >/dev/null 2>&1 & done 2>/dev/null; true' 
  # (Linux 6.1 counts the event in the forking process's cgroup, exec's.)
  show_run
  cat "$(scope "$f")"/sandbox/pids.events "$(scope "$f")"/sandbox/*/pids.events | grep -qE '^max [1-9]' ||
    { grep . "$(scope "$f")"/sandbox/pids.* "$(scope "$f")"/sandbox/*/pids.* >&3; false; }
  [ "$(cat "$(scope "$f")/sandbox/pids.current")" -le 12 ]
  run_ux kill "$f"
  [ "$status" -eq 0 ]
  run_ux run -d --name counter bb sh -c 'i=0; while :; do i=$((i+1)); echo $i >/tmp/n; sleep 0.05; done'
  [ "$status" -eq 0 ]
  local id=${lines[-1]} b
  sleep 1
  run_ux pause counter
  show_run
  [ "$status" -eq 0 ]
  [ "$(cat "$(scope "$id")/sandbox/cgroup.freeze")" = 1 ]
  grep -q "frozen 1" "$(scope "$id")/sandbox/cgroup.events"
  run_ux unpause counter
  [ "$status" -eq 0 ]
  sleep 1
  b=$(ux exec counter cat /tmp/n)
  [ "$b" -gt 0 ]
  run_ux snapshot counter clean
  show_run
  [ "$status" -eq 0 ]
  # A rollback restarts the command on the snapshot's files (the
  # supervisor makes a new sysfs of the sandbox's network namespace).
  ux exec counter sh -c 'echo changed >/etc/marker'
  run_ux rollback counter clean
  show_run
  [ "$status" -eq 0 ]
  run_ux exec counter sh -c 'test ! -e /etc/marker && echo restored'
  [ "$output" = restored ]
  run_ux kill counter
  [ "$status" -eq 0 ]
}

@test "rootless systemd: snapshot, fork, rollback and commit across the user's ranges keep the files' owners" {
  run_ux run -d --name src bb sleep 300
  [ "$status" -eq 0 ]
  ux exec src sh -c 'echo r >/etc/rootfile; echo a >/home/agent/agentfile; chown 1000:1000 /home/agent/agentfile; rm /bin/ls'
  run_ux exec src cat /proc/self/uid_map
  grep -qE '^ +0 +65536 +65536$' <<<"$output"
  # A fork runs in another range (2), on a copy of the captured layer made
  # for it; the owners are those the source gave.
  run_ux fork --name fk src sleep 300
  show_run
  [ "$status" -eq 0 ]
  run_ux exec fk sh -c 'cat /proc/self/uid_map; stat -c "%u %n" /etc/rootfile /home/agent/agentfile; test ! -e /bin/ls && echo gone'
  show_run
  [ "$status" -eq 0 ]
  grep -qE '^ +0 +131072 +65536$' <<<"$output"
  [[ $output == *"0 /etc/rootfile"* ]]
  [[ $output == *"1000 /home/agent/agentfile"* ]]
  [ "${lines[-1]}" = gone ]
  local copies
  copies=$(ls "$RLRUN/agsx/ranges/2")
  [ -n "$copies" ]
  # A snapshot, then a rollback: the source restarts in its range on the
  # snapshot's layer (copied for that range).
  run_ux snapshot src s1
  [ "$status" -eq 0 ]
  ux exec src sh -c 'rm /etc/rootfile'
  run_ux rollback src s1
  show_run
  [ "$status" -eq 0 ]
  run_ux exec src stat -c "%u %n" /etc/rootfile /home/agent/agentfile
  show_run
  [[ $output == *"0 /etc/rootfile"* ]]
  [[ $output == *"1000 /home/agent/agentfile"* ]]
  # A commit's image holds the sandbox's own ids (0 and 1000), whatever
  # range made it; run in the one free range (the fork holds 2).
  run_ux commit -q src bbc
  show_run
  [ "$status" -eq 0 ]
  run_ux kill src
  run_ux run --rm bbc sh -c 'cat /proc/self/uid_map; stat -c "%u %n" /etc/rootfile /home/agent/agentfile'
  show_run
  [ "$status" -eq 0 ]
  grep -qE '^ +0 +65536 +65536$' <<<"$output"
  [[ $output == *"0 /etc/rootfile"* ]]
  [[ $output == *"1000 /home/agent/agentfile"* ]]
  # Once the forks and snapshots are gone, gc removes the copies of their layers.
  run_ux kill --all
  run_ux gc
  show_run
  [[ $output == *"removed id range copy 2/"* ]]
  [ ! -e "$RLRUN/agsx/ranges" ]
}

@test "rootless systemd: run -d from a user unit: the sandbox and the user's namespace outlive the unit, and the user's agsx still manages it" {
  # No holder yet: the unit's agsx makes the user's namespace.
  pkill -KILL -u "$RLU" -x agsx-userns 2>/dev/null || true
  for _ in $(seq 100); do
    pgrep -u "$RLU" -x agsx-userns >/dev/null || break
    sleep 0.1
  done
  local unit=agsxjob$$ dir=/home/$RLU/.config/systemd/user
  # A oneshot unit of the user's manager (its private socket: no D-Bus
  # session bus here), as a user's timer or CI job would run agsx: when
  # agsx exits, systemd stops the unit and kills what its cgroup holds.
  install -d -o "$RLU" -g "$RLU" "/home/$RLU/.config" "/home/$RLU/.config/systemd" "$dir"
  cat >"$dir/$unit.service" <<UNIT
[Service]
Type=oneshot
Environment=XDG_DATA_HOME=$T/data XDG_CONFIG_HOME=$T/conf AGSX_PULL=never
ExecStart=$AGSX run -d --name fromunit bb sleep 1000
UNIT
  chown "$RLU:" "$dir/$unit.service"
  uctl() { runuser -u "$RLU" -- env XDG_RUNTIME_DIR="$RLRUN" systemctl --user "$@"; }
  uctl daemon-reload
  AX_CMD="systemctl --user start (as $RLU) $unit: agsx run -d"
  run uctl start "$unit.service"
  rm -f "$dir/$unit.service"
  uctl daemon-reload
  show_run
  [ "$status" -eq 0 ]
  # The unit is gone (its cgroup emptied: nothing of agsx's was left in it).
  run uctl is-active "$unit.service"
  [ "$output" != active ]
  # The holder is in a scope of its own, not the unit's.
  local holder
  holder=$(pgrep -u "$RLU" -x agsx-userns | head -1)
  [ -n "$holder" ]
  grep -q "/agsx.slice/agsx-userns-$holder.scope$" "/proc/$holder/cgroup"
  # The same namespace: ls, exec and kill reach the sandbox.
  run_ux ls
  show_run
  [[ $output == *fromunit*running* ]]
  run_ux exec fromunit echo in
  show_run
  [ "$status" -eq 0 ]
  [ "${lines[-1]}" = in ]
  run_ux kill fromunit
  [ "$status" -eq 0 ]
}

@test "rootless systemd: a public sandbox started by a unit keeps its network after the unit: the router and pasta have a scope of their own (in a networld)" {
  command -v pasta >/dev/null || skip "pasta is not installed (apt-get install passt)"
  "$FIXTURES/networld" start "$T/nw"
  local outer unit=agsxpub$$ router pasta
  outer=$(cat "$T/nw/outer.pid")
  # A system service that runs agsx as the user in the networld's outer
  # namespace (where pasta finds a route): when agsx exits, systemd stops
  # the unit and kills what its cgroup holds.
  cat >"/run/systemd/system/$unit.service" <<UNIT
[Service]
Type=oneshot
User=$RLU
NetworkNamespacePath=/proc/$outer/ns/net
Environment=HOME=/home/$RLU XDG_RUNTIME_DIR=$RLRUN XDG_DATA_HOME=$T/data XDG_CONFIG_HOME=$T/conf AGSX_PULL=never
ExecStart=$AGSX run -d --name pubunit --network public bb sleep 1000
UNIT
  systemctl daemon-reload
  AX_CMD="systemctl start $unit: agsx run -d --network public (as $RLU)"
  run systemctl start "$unit.service"
  rm -f "/run/systemd/system/$unit.service"
  systemctl daemon-reload
  show_run
  [ "$status" -eq 0 ]
  [ "$(systemctl is-active "$unit.service")" != active ]
  router=$(pgrep -u "$RLU" -x agsx-usernet | head -1)
  pasta=$(pgrep -u "$RLU" -f '^pasta .*--no-map-gw' | head -1)
  [ -n "$router" ]
  [ -n "$pasta" ]
  grep -q "/agsx.slice/agsx-usernet-$router.scope$" "/proc/$router/cgroup"
  grep -q "/agsx.slice/agsx-usernet-$router.scope$" "/proc/$pasta/cgroup"
  # The sandbox still reaches the world through them.
  run_ux exec pubunit probe http 198.18.0.2 80 3000
  show_run
  [ "$output" = "http 198.18.0.2:80: world" ]
  run_ux kill pubunit
  [ "$status" -eq 0 ]
  # gc stops the router and pasta; their scope goes with them.
  run_ux gc
  for _ in $(seq 100); do
    pgrep -u "$RLU" -x agsx-usernet >/dev/null || break
    sleep 0.1
  done
  [ -z "$(pgrep -u "$RLU" -x agsx-usernet)" ]
  for _ in $(seq 100); do
    [ -e "$(uroot)/agsx.slice/agsx-usernet-$router.scope" ] || break
    sleep 0.1
  done
  [ ! -e "$(uroot)/agsx.slice/agsx-usernet-$router.scope" ]
}

@test "rootless systemd: make install as root, then make demo as the user (its own store, its scopes)" {
  local src=${AGSX_SRCDIR:?} b=${AGSX_BUILDDIR:?} flags
  flags=$(cat "$b/.configure-flags" 2>/dev/null || true)
  # As root, as a user would install it (the guest's disk is a snapshot).
  run make --no-print-directory -s -C "$src" B="$b" CONFIGURE_FLAGS="$flags" install
  show_run
  [ "$status" -eq 0 ]
  [ -x /usr/local/bin/agsx ]
  # The installed agsx, as the user.
  run runuser -u "$RLU" -- env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="/home/$RLU" \
    XDG_RUNTIME_DIR="$RLRUN" AGSX_PULL=never timeout 120 agsx run --rm host id -u
  show_run
  [ "$status" -eq 0 ]
  [ "${lines[-1]}" = 0 ]
  # The README's demo, as the user: no root, nothing written to the tree.
  AX_CMD="make demo (as $RLU)"
  run runuser -u "$RLU" -- env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="/home/$RLU" \
    XDG_RUNTIME_DIR="$RLRUN" AGSX_PULL=never CONFIGURE_FLAGS="$flags" \
    timeout 900 make --no-print-directory -s -C "$src" B="$b" demo
  show_run
  [ "$status" -eq 0 ]
  [[ $output == *"demo: as $RLU, without root"* ]]
  [[ $output == *"hello from a sandbox: Python"* ]]
  [[ $output == *'"stop_reason":"timeout"'* ]]
  # The memory limit worked: the user manager delegates it.
  [[ $output != *"limits (memory, cpus, pids) need a cgroup"* ]]
  [[ $output == *"demo: done."* ]]
  # The images are in the user's own store.
  [ -d "/home/$RLU/.local/share/agsx" ]
  [ "$(stat -c %U "/home/$RLU/.local/share/agsx")" = "$RLU" ]
  runuser -u "$RLU" -- env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="/home/$RLU" \
    XDG_RUNTIME_DIR="$RLRUN" agsx gc >/dev/null 2>&1 || true
}
