#!/usr/bin/env bats
# test-runner: parallel
# Named volumes (sandbox/volume.h): agsx volume create / ls / rm, and
# `agsx run -v NAME:/path`: a volume shared by sandboxes of different uid
# ranges (idmapped: owners kept), kept after they end, refused for removal
# while one uses it, and bad names refused with nothing made.

load helpers

bats_require_minimum_version 1.5.0

setup_file() { busybox_setup_file; }
setup() { busybox_setup 60; }

@test "volume: create, ls, rm; names listed sorted, in text, -q and --json" {
  run_ax volume create b a
  assert_success
  [ "$output" = $'b\na' ]
  run_ax volume ls -q
  assert_success
  [ "$output" = $'a\nb' ]
  run_ax volume ls
  assert_success
  [[ "${lines[0]}" == "NAME"*"CREATED"*"IN USE" ]]
  [[ "${lines[1]}" == "a "*" no" ]]
  run_ax volume ls --json
  assert_success
  python3 -c '
import json, sys
v = json.loads(sys.argv[1])
assert [x["name"] for x in v] == ["a", "b"], v
assert all(x["in_use"] is False and x["created"].endswith("Z") for x in v), v
assert v[0]["path"].endswith("/volumes/a/_data"), v' "$output"
  # the store keeps them where no host user reaches
  [ "$(stat -c %a "$ROOT/volumes")" = 700 ]
  [ "$(stat -c '%a %u' "$ROOT/volumes/a/_data")" = "777 0" ]
  run_ax volume create a
  assert_agsx_error "volume \`a\` already exists"
  run_ax volume rm a b
  assert_success
  [ "$output" = $'a\nb' ]
  run_ax volume ls -q
  assert_success
  [ -z "$output" ]
  [ -z "$(ls -A "$ROOT/volumes" | grep -v '^\.lock$')" ]
  run_ax volume rm a
  assert_agsx_error "no such volume \`a\`"
}

@test "volume: no volume ever made lists nothing" {
  run_ax volume ls -q
  assert_success
  [ -z "$output" ]
  [ ! -e "$ROOT/volumes" ]
}

@test "volume: bad names are refused, nothing is made" {
  local name
  for name in a/b .. . ../x .hidden _x 'a b' "$(printf 'x%.0s' $(seq 65))"; do
    run_ax volume create "$name"
    assert_agsx_error "invalid volume name"
    run_ax volume rm "$name"
    assert_agsx_error "invalid volume name"
  done
  run_ax run --rm -v 'a b:/data' busybox true
  assert_agsx_error "invalid volume name"
  run_ax run --rm -v '..:/data' busybox true
  assert_agsx_error "invalid volume name"
  run_ax run --rm -v '../x:/data' busybox true
  assert_agsx_error "both paths must be absolute"
  run_ax volume ls -q
  [ -z "$output" ]
  [ -z "$(ls -A "$ROOT/volumes" 2>/dev/null | grep -v '^\.lock$')" ]
}

@test "volume: run -v NAME:/path makes it; another sandbox reads what one wrote, owners kept" {
  run_ax run --rm -v shared:/data busybox sh -c 'echo hello >/data/f && mkdir /data/d &&
    chown 1000:1000 /data/d && echo ok'
  assert_success
  [ "$output" = ok ]
  run_ax volume ls -q
  [ "$output" = shared ]
  # A second sandbox (another uid range) sees the owners the first wrote,
  # and its uid 1000 may write in the directory uid 1000 owns.
  run_ax run --rm -u 1000:1000 -v shared:/data busybox sh -c 'cat /data/f &&
    stat -c "%u:%g" /data/f /data/d && echo x >/data/d/g && stat -c "%u" /data/d/g'
  assert_success
  [ "$output" = $'hello\n0:0\n1000:1000\n1000' ]
  # stored with the raw ids, as the image's layers
  [ "$(stat -c %u "$ROOT/volumes/shared/_data/d/g")" = 1000 ]
  # :ro mounts it read-only
  run_ax run --rm -v shared:/data:ro busybox sh -c 'echo y >/data/h'
  [ "$status" -ne 0 ]
  [ ! -e "$ROOT/volumes/shared/_data/h" ]
}

@test "volume: in use while a sandbox mounts it; rm refused, then allowed at its end" {
  ax volume create busy >/dev/null
  local id
  id=$(rund -v busy:/data busybox sleep 60)
  run_ax volume ls
  assert_success
  [[ "${lines[1]}" == "busy "*" yes" ]]
  run_ax volume rm busy
  assert_agsx_error "volume \`busy\` is in use by a sandbox"
  [ -d "$ROOT/volumes/busy/_data" ]
  ax kill "$id" >/dev/null
  ax wait "$id" >/dev/null || true
  # the supervisor lets go when it ends
  poll 50 ax volume rm busy
  [ ! -e "$ROOT/volumes/busy" ]
}

@test "volume: a pool takes no named volume" {
  run_ax pool create p --image busybox --size 1 -v v:/data
  assert_agsx_error "a pool's sandboxes take host paths, not named volumes"
  [ ! -e "$ROOT/volumes" ]
}

@test "volume: inspect lists a sandbox's volumes; a fork mounts them too (shared, not copied)" {
  local id
  id=$(rund -v fv:/data -v fro:/ro:ro busybox sleep 60)
  run_ax inspect "$id"
  assert_success
  python3 -c '
import json, sys
assert json.loads(sys.argv[1])[0]["volumes"] == ["fv:/data", "fro:/ro:ro"], sys.argv[1]' "$output"
  run_ax fork --name fk "$id" sh -c 'echo from-fork >/data/f; touch /ro/x 2>/dev/null || echo ro'
  assert_success
  note_sandbox_ids
  ax wait fk >/dev/null || true
  [ "$(cat "$ROOT/volumes/fv/_data/f")" = from-fork ]
  [ ! -e "$ROOT/volumes/fro/_data/x" ]
  run_ax exec "$id" cat /data/f
  assert_success
  [ "$output" = from-fork ]
}

@test "volume: what a crashed create or rm left is removed by a later create once old" {
  ax volume create first >/dev/null
  mkdir -p "$ROOT/volumes/.rm-old/v/_data/sub" "$ROOT/volumes/.tmp-old/_data" \
    "$ROOT/volumes/.rm-young/v"
  touch -d '2 hours ago' "$ROOT/volumes/.rm-old" "$ROOT/volumes/.tmp-old"
  run_ax volume ls -q
  [ "$output" = first ]
  ax volume create second >/dev/null
  [ ! -e "$ROOT/volumes/.rm-old" ]
  [ ! -e "$ROOT/volumes/.tmp-old" ]
  [ -d "$ROOT/volumes/.rm-young" ] # may be a removal under way
  run_ax volume ls -q
  [ "$output" = $'first\nsecond' ]
}
