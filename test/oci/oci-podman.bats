#!/usr/bin/env bats
# Podman (Debian's 4.3 with conmon) driving agsx-oci: `--runtime agsx`
# with the containers.conf drop-in of contrib/. Private storage, run root,
# runtime state root and image per file; rootful Podman's default (no
# --userns) runs through agsx's injected user namespace.

load helpers
bats_require_minimum_version 1.5.0

setup_file() {
  export FILE_SKIP=
  command -v podman >/dev/null || { FILE_SKIP="podman is not installed (apt-get install podman)"; return 0; }
  export PM=$BATS_FILE_TMPDIR/pm
  mkdir -p "$PM"
  chmod 0755 "$BATS_FILE_TMPDIR" "$PM"
  # A wrapper named agsx-oci (Podman looks JSON support up by basename)
  # that pins the state root: Podman's own `state` call passes no flags.
  cat >"$PM/agsx-oci" <<EOF2
#!/bin/sh
exec "$AGSX_OCI" --root "$PM/state" "\$@"
EOF2
  chmod +x "$PM/agsx-oci"
  sed -e "s|/usr/libexec/agsx/agsx-oci|$PM/agsx-oci|" \
    "$BATS_TEST_DIRNAME/../../contrib/podman/containers.conf.d/90-agsx.conf" >"$PM/containers.conf"
  export CONTAINERS_CONF=$PM/containers.conf
  local r
  r=$(base_rootfs)
  tar -C "$r" -c . | pm import - localhost/agsx-test:busybox >/dev/null
  # A pod's infra image (Podman's own pause image needs catatonit).
  tar -C "$r" -c . | pm import --change 'ENTRYPOINT ["/bin/sleep","1000000"]' - \
    localhost/agsx-test:pause >/dev/null
}

pm() {
  timeout --kill-after=5 60 podman --root "$PM/storage" --runroot "$PM/run" \
    --cgroup-manager cgroupfs --events-backend none "$@"
}
P() { pm --runtime agsx "$@"; }
IMG=localhost/agsx-test:busybox

teardown_file() {
  [ -n "${PM:-}" ] || return 0
  pm rm -af -t 0 >/dev/null 2>&1 || true
  pm rmi -af >/dev/null 2>&1 || true
  pm system reset -f >/dev/null 2>&1 || true
}

teardown() {
  [ -z "$FILE_SKIP" ] || return 0
  local leaks=""
  P pod rm -af -t 0 >/dev/null 2>&1 || true
  P rm -af -t 0 >/dev/null 2>&1 || true
  if [ -n "$(ls "$PM/state" 2>/dev/null)" ]; then leaks+="state: $(ls "$PM/state"); "; fi
  # (polled: a pod's containers end with their infra, and their cleanup by
  # conmon may still be removing a cgroup when `pod rm` returns)
  local left i
  for i in $(seq 50); do
    left=$(cgroup_mounts | while read -r m; do ls -d "$m"/libpod_parent/libpod-* 2>/dev/null; done)
    [ -n "$left" ] || break
    sleep 0.1
  done
  [ -z "$left" ] || leaks+="cgroups: $(echo "$left" | head -3 | tr '\n' ' '); "
  oci_teardown || true
  [ -z "$leaks" ] || { echo "# leaked: $leaks" >&3; return 1; }
}

@test "podman run: output and exit codes 0, 42, 126, 127" {
  run P run --rm --network none $IMG echo hi
  [ "$status" -eq 0 ] && [ "$output" = hi ] || { echo "# $output" >&3; false; }
  run P run --rm --network none $IMG sh -c 'exit 42'
  [ "$status" -eq 42 ]
  run -127 P run --rm --network none $IMG /nonexistent
  [ "$status" -eq 127 ] || { echo "# $status $output" >&3; false; }
  run -126 P run --rm --network none $IMG /etc/passwd
  [ "$status" -eq 126 ] || { echo "# $status $output" >&3; false; }
}

@test "podman run in the injected user namespace: an agsx range, the image's owners" {
  run P run --rm --network none $IMG sh -c 'cat /proc/self/uid_map; ls -ln /etc/passwd; touch /etc/x && echo wrote'
  [ "$status" -eq 0 ] || { echo "# $output" >&3; false; }
  [[ "$output" != *"         0          0"* ]]
  [[ "$output" == *"65536"* ]]
  [[ "$output" == *" 0        0 "* ]]
  [[ "$output" == *wrote* ]]
}

@test "podman run -i and -t" {
  run sh -c "echo x | podman --root '$PM/storage' --runroot '$PM/run' --cgroup-manager cgroupfs --events-backend none --runtime agsx run -i --rm --network none $IMG cat"
  [ "$output" = x ] || { echo "# $output" >&3; false; }
  run script -qec "podman --root '$PM/storage' --runroot '$PM/run' --cgroup-manager cgroupfs --events-backend none --runtime agsx run --rm -t --network none $IMG tty" /dev/null
  [[ "$output" == *"/dev/pts/0"* ]] || { echo "# $output" >&3; false; }
}

@test "podman run -d, then exec, top, kill -s, pause/unpause, update, stop -t 1, rm -f" {
  run P run -d --name c1 --network none $IMG sh -c 'trap "echo usr1 >/tmp/usr1" USR1; trap "" TERM; while :; do sleep 0.1; done'
  [ "$status" -eq 0 ] || { echo "# $output" >&3; false; }
  id=$(P inspect -f '{{.Id}}' c1)
  pid=$(P inspect -f '{{.State.Pid}}' c1)
  [ "$pid" = "$("$PM/agsx-oci" state "$id" | jq .pid)" ]
  [ "$(readlink /proc/$pid/ns/net)" != "$(readlink /proc/self/ns/net)" ]
  run P exec c1 sh -c 'exit 5'
  [ "$status" -eq 5 ]
  run P exec c1 cat /proc/self/status
  [[ "$output" == *"NoNewPrivs:	1"* ]]
  run script -qec "podman --root '$PM/storage' --runroot '$PM/run' --cgroup-manager cgroupfs --events-backend none --runtime agsx exec -t c1 sh -c 'tty; exit 6'" /dev/null
  [[ "$output" == *"/dev/pts/"* ]] || { echo "# $status $output" >&3; false; }
  [ "$status" -eq 6 ] || { echo "# $status $output" >&3; false; }
  # (podman top lists /proc, then reads each pid: the loop's short-lived
  # sleeps can end in between, "read /proc/N/stat: no such process", as
  # under runc; that one race is retried, a bounded few times)
  for i in 1 2 3 4 5; do
    run P top c1
    [[ $status -ne 0 && $output == *"no such process"* ]] || break
  done
  [ "$status" -eq 0 ] || { echo "# $output" >&3; false; }
  P kill -s USR1 c1
  for i in $(seq 30); do P exec c1 cat /tmp/usr1 2>/dev/null | grep -q usr1 && break; sleep 0.2; done
  P exec c1 cat /tmp/usr1 | grep -q usr1
  P pause c1
  [ "$(P inspect -f '{{.State.Status}}' c1)" = paused ]
  P unpause c1
  [ "$(P inspect -f '{{.State.Status}}' c1)" = running ]
  P update --memory 64m c1
  # (the container's cgroup, read from its init: v1 or v2, wherever podman put it)
  f=$(proc_cgroup_dir "$pid" memory)
  if [ -f "$f/memory.max" ]; then
    [ "$(cat "$f/memory.max")" = 67108864 ] || { echo "# $f/memory.max: $(cat "$f/memory.max")" >&3; false; }
  else
    [ "$(cat "$f/memory.limit_in_bytes")" = 67108864 ] || { echo "# $f: $(cat "$f/memory.limit_in_bytes")" >&3; false; }
  fi
  start=$(date +%s%N)
  P stop -t 1 c1
  el=$(( ($(date +%s%N) - start) / 1000000 ))
  [ "$el" -lt $(slow 8000) ]
  P rm -f c1
}

@test "podman, injected user namespace: what the container writes is in the engine's upper with the owners Podman expects" {
  P run -d --name c1 --network none $IMG sh -c \
    'echo made >/new; mkdir /newdir; echo f >/newdir/f; chown 1000:1000 /newdir/f; echo x >>/etc/group; rm /etc/passwd; touch /ready; sleep 1000'
  for _ in $(seq 100); do P exec c1 test -e /ready 2>/dev/null && break; sleep 0.1; done
  run P exec c1 sh -c 'ls -ln /new /newdir/f /etc/group; cat /proc/self/uid_map'
  [[ "$output" == *"65536"* && "$output" != *"         0          0"* ]] || { echo "# $output" >&3; false; }
  upper=$(pm inspect -f '{{.GraphDriver.Data.UpperDir}}' c1)
  # Container root is host root there (rootful Podman without --userns),
  # uid 1000 is 1000, a copied-up file keeps the image's owner.
  [ "$(stat -c %u:%g "$upper/new" "$upper/newdir" "$upper/newdir/f" "$upper/etc" "$upper/etc/group")" = \
    "$(printf '0:0\n0:0\n1000:1000\n0:0\n0:0')" ] || { stat -c '%n %u:%g' "$upper"/* "$upper"/*/* >&3; false; }
  # The whiteout for the removed file.
  [ "$(stat -c %F:%t:%T "$upper/etc/passwd")" = "character special file:0:0" ]
  run pm diff c1
  [[ "$output" == *"A /new"* && "$output" == *"A /newdir/f"* && "$output" == *"C /etc/group"* && "$output" == *"D /etc/passwd"* ]] ||
    { echo "# $output" >&3; false; }
  # podman cp and export read the engine's own mount: root's file is root's.
  pm export c1 | tar --numeric-owner -tvf - >"$T/tv"
  grep -Eq '^-rw-r--r-- 0/0 .* (\./)?new$' "$T/tv" && grep -Eq ' 1000/1000 .* (\./)?newdir/f$' "$T/tv" ||
    { grep new "$T/tv" >&3; false; }
  pm cp c1:/newdir/f "$T/f"
  [ "$(cat "$T/f")" = f ]
  # A commit of it runs again with the same owners.
  pm commit -q c1 localhost/agsx-test:committed >/dev/null
  P rm -f -t 0 c1
  run P run --rm --network none localhost/agsx-test:committed sh -c 'ls -ln /new /newdir/f; test -e /etc/passwd || echo gone'
  pm rmi -f localhost/agsx-test:committed >/dev/null
  [[ "$output" == *" 0        0 "*"/new"* && "$output" == *" 1000     1000 "*"/newdir/f"* && "$output" == *gone* ]] ||
    { echo "# $output" >&3; false; }
}

@test "podman passes config through: --cap-drop ALL, --read-only, -v, --tmpfs, --user, --uidmap" {
  mkdir -p "$T/vol" && echo data >"$T/vol/f"
  run P run --rm --network none --cap-drop ALL $IMG grep CapEff /proc/self/status
  [[ "$output" == *"0000000000000000"* ]] || { echo "# $output" >&3; false; }
  run P run --rm --network none --read-only $IMG touch /x
  [ "$status" -ne 0 ]
  run P run --rm --network none -v "$T/vol:/v:ro" $IMG cat /v/f
  [ "$output" = data ] || { echo "# $output" >&3; false; }
  run P run --rm --network none --tmpfs /t $IMG sh -c 'touch /t/a && grep " /t " /proc/mounts'
  [[ "$output" == *tmpfs* ]] || { echo "# $output" >&3; false; }
  run P run --rm --network none --user 1000:1000 $IMG id -u
  [ "$output" = 1000 ] || { echo "# $output" >&3; false; }
  run P run --rm --network none --uidmap 0:400000:65536 --gidmap 0:400000:65536 $IMG cat /proc/self/uid_map
  [[ "$output" == *"400000"* ]] || { echo "# $output" >&3; false; }
  run P run --rm --network none --security-opt unmask=ALL $IMG sh -c 'head -c 10 /proc/timer_list | wc -c'
  [ "$output" = 0 ] || { echo "# $output" >&3; false; }
}

@test "podman --userns container:c1 joins c1's user namespace by path" {
  P run -d --name c1 --network none --uidmap 0:410000:65536 --gidmap 0:410000:65536 $IMG sleep 1000
  pid=$(P inspect -f '{{.State.Pid}}' c1)
  run P run --rm --network none --userns container:c1 $IMG sh -c 'readlink /proc/self/ns/user; cat /proc/self/uid_map'
  [ "$status" -eq 0 ] || { echo "# $status $output" >&3; false; }
  [[ "$output" == *"$(readlink /proc/$pid/ns/user)"* && "$output" == *410000* ]] || { echo "# $output" >&3; false; }
  # Podman 4.3 sometimes finds c1's userdata/shm still busy right after the
  # --rm container that joined it (EBUSY from its own unmount): retry.
  local i ok=
  for i in 1 2 3 4 5; do
    if P rm -f -t 0 c1 >/dev/null 2>"$T/rm.err"; then ok=1 && break; fi
    grep -q 'resource busy' "$T/rm.err" || break
    sleep 0.5
  done
  [ -n "$ok" ] || { cat "$T/rm.err" >&3; false; }
}

@test "podman: privileged, host pid and host network are refused with agsx's reason (126)" {
  run P run --rm --network none --privileged $IMG true
  [ "$status" -eq 126 ] && [[ "$output" == *"privileged containers are not supported by agsx"* ]] ||
    { echo "# $status $output" >&3; false; }
  run P run --rm --network none --pid host $IMG true
  [ "$status" -eq 126 ] && [[ "$output" == *"pid namespace"* ]] || { echo "# $status $output" >&3; false; }
  run P run --rm --network host $IMG true
  [ "$status" -eq 126 ] && [[ "$output" == *"host networking"* ]] || { echo "# $status $output" >&3; false; }
}

@test "podman run --rootfs DIR:O: an overlay over the directory, which stays untouched" {
  local r=$BATS_FILE_TMPDIR/orootfs
  [ -d "$r" ] || cp -a "$(base_rootfs)" "$r"
  run P run --rm --network none --rootfs "$r:O" sh -c 'echo written >/tmp/f && cat /tmp/f && cat /etc/passwd | head -1'
  [ "$status" -eq 0 ] || { echo "# $output" >&3; false; }
  [[ "$output" == *written* && "$output" == *root:x:0:0* ]] || { echo "# $output" >&3; false; }
  [ ! -e "$r/tmp/f" ]
  # the engine's own mapping over a rootfs owned by host root: refused as
  # runc refuses it, the cause named
  run P run --rm --network none --uidmap 0:200000:65536 --gidmap 0:200000:65536 --rootfs "$r:O" true
  [ "$status" -ne 0 ] || { echo "# $output" >&3; false; }
  [[ "$output" == *"not owned by the container's user namespace"* ]] || { echo "# $output" >&3; false; }
}

# pod NAME ARGS: a pod with the test image's sleep as its infra.
pod() {
  local n=$1
  shift
  P pod create --name "$n" --infra-image localhost/agsx-test:pause --network none "$@" >/dev/null
}

@test "podman pods: containers share ipc and uts (pid with --share pid); two pods share nothing" {
  pod p1 --share ipc,uts,pid --hostname pod-one
  pod p2 --share ipc,uts --hostname pod-two
  P run -d --pod p1 --name a1 $IMG sleep 1000
  run P exec a1 /usr/local/bin/probe shm 4244
  [ "$output" = "shm 4244: made" ] || { echo "# $status $output" >&3; false; }
  # a2 sees a1's segment, the pod's hostname and a1's process, runs in
  # the same user namespace and range, and writes its rootfs with the
  # image's owners (idmapped through the pod's range).
  local show='/usr/local/bin/probe shm 4244; hostname; ps -o args | grep -c "^sleep 1000$"; cat /proc/self/uid_map; readlink /proc/self/ns/user; readlink /proc/self/ns/ipc; ls -ln /etc/passwd; touch /etc/x && echo wrote'
  run P run --rm --pod p1 $IMG sh -c "$show"
  [ "$status" -eq 0 ] || { echo "# $status $output" >&3; false; }
  local out1=$output
  run P exec a1 sh -c 'cat /proc/self/uid_map; readlink /proc/self/ns/user; readlink /proc/self/ns/ipc'
  [[ "$out1" == "shm 4244: found"$'\n'pod-one$'\n'1$'\n'"$output"$'\n'*" 0        0 "*$'\n'wrote ]] ||
    { echo "# a2: $out1"$'\n'"# a1: $output" >&3; false; }
  [[ "$output" != *"         0          0"* && "$output" == *65536* ]] || { echo "# $output" >&3; false; }
  # The pod's other containers live in the infra's namespaces.
  infra=$(pm pod inspect -f '{{.InfraContainerID}}' p1)
  ipid=$(pm inspect -f '{{.State.Pid}}' "$infra")
  [[ "$output" == *"$(readlink /proc/$ipid/ns/user)"*"$(readlink /proc/$ipid/ns/ipc)"* ]] || { echo "# $output" >&3; false; }
  # p2: another user namespace, range, ipc namespace and hostname; no
  # shared pid namespace there (the pod's sleep is not seen).
  run P run --rm --pod p2 $IMG sh -c "$show"
  [ "$status" -eq 0 ] || { echo "# $status $output" >&3; false; }
  local out2=$output
  [[ "$out2" == "shm 4244: made"$'\n'pod-two$'\n'0$'\n'* ]] || { echo "# p2: $out2" >&3; false; }
  local map1 map2
  map1=$(sed -n 4p <<<"$out1") map2=$(sed -n 4p <<<"$out2")
  [ "$(awk '{print $2}' <<<"$map1")" != "$(awk '{print $2}' <<<"$map2")" ] || { echo "# $map1 / $map2" >&3; false; }
  [ "$(sed -n 5p <<<"$out1")" != "$(sed -n 5p <<<"$out2")" ] && [ "$(sed -n 6p <<<"$out1")" != "$(sed -n 6p <<<"$out2")" ] ||
    { echo "# p1: $out1"$'\n'"# p2: $out2" >&3; false; }
  P pod rm -f -t 0 p1 >/dev/null
  P pod rm -f -t 0 p2 >/dev/null
}

