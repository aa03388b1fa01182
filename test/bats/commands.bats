#!/usr/bin/env bats
# The commands Docker users and scripts reach for (issue 11 items 9 and 10):
# ls that never cuts a name or an image, inspect, wait, rm and stats.
#
# Every test has its own store ($ROOT, the busybox image loaded in setup)
# and state dir ($STATE). teardown stops and collects everything with
# `agsx kill --all` + `agsx gc`, then checks that nothing of the test's
# sandboxes is left: no record, no name, no cgroup, no mount.

load helpers

bats_require_minimum_version 1.5.0

setup_file() {
  export BB="$BATS_FILE_TMPDIR/bb"
  "$FIXTURES/busybox-image" "$BB" --probe "$PROBE" >/dev/null
}

setup() {
  common_setup
  AX_TIMEOUT=30
  ax image load "$BB" >/dev/null
}

teardown() {
  local rc=0
  note_ids
  ax kill --all >/dev/null 2>&1 || true
  ax gc >/dev/null 2>&1 || rc=1
  assert_nothing_left || rc=1
  common_teardown || rc=1
  return $rc
}

# ---- helpers -----------------------------------------------------------

# rund ARGS...: `agsx run -d ARGS...`, prints the id and remembers it.
rund() {
  local id
  id=$(ax run -d "$@") || return
  echo "$id" >>"$T/ids"
  echo "$id"
}

note_ids() {
  [ -d "$STATE" ] || return 0
  ls "$STATE" 2>/dev/null | grep -xE '[0-9a-f]{32}' >>"$T/ids" || true
}

# Cgroup directories of the test's sandboxes still on the host.
cgroups_of() {
  local id
  for id in "$@"; do
    ls -d /sys/fs/cgroup/*/agsx/"$id" /sys/fs/cgroup/agsx/"$id" 2>/dev/null || true
  done
}

# Records, names, cgroups and mounts the test's sandboxes left.
leftovers() {
  local ids
  ids=$(sort -u "$T/ids" 2>/dev/null)
  if [ -d "$STATE" ]; then
    ls "$STATE" 2>/dev/null | grep -vx -e slots -e cache -e names | sed 's/^/state: /' || true
    ls "$STATE/names" 2>/dev/null | sed 's/^/name: /' || true
  fi
  # shellcheck disable=SC2086 # one id a word
  cgroups_of $ids | sed 's/^/cgroup: /'
  grep -F -e "$STATE" /proc/self/mountinfo | sed 's/^/mount: /' || true
}

assert_nothing_left() {
  local i left
  for i in $(seq 30); do
    left=$(leftovers)
    [ -z "$left" ] && return 0
    sleep 0.1
  done
  echo "# left behind: $(echo "$left" | tr '\n' ';')" >&3
  return 1
}

# py CODE ARGS...: runs python3 CODE on $output (as stdin), for JSON checks.
py() {
  local code=$1
  shift
  printf '%s' "$output" | python3 -c "$code" "$@" || { show_run; return 1; }
}

# ---- ls: nothing but ids is cut (item 9) --------------------------------

@test "ls: a long name and a long image reference appear whole; --no-trunc shows full ids" {
  local long=lc-accmark71afa2-0123456789-abcdef
  local img=registry.example.internal:5000/team/agents/a-rather-long-repository-name:v1.2.3-build.4567
  ax image load --tag "$img" "$BB" >/dev/null
  local a b
  a=$(rund --name "$long" --timeout 60 busybox sleep 600)
  b=$(rund --name short --timeout 60 "$img" sleep 600)
  run_ax ls
  assert_success
  # grep by the whole name and the whole image, as scripts do
  printf '%s\n' "$output" | grep -qw -- "$long" || { show_run; false; }
  printf '%s\n' "$output" | grep -F -- "$img" | grep -qw short || { show_run; false; }
  # ids are 12 digits by default, and the columns line up with the header
  printf '%s\n' "$output" | grep -q "^${a:0:12}  " || { show_run; false; }
  refute_output_contains "$a"
  local hdr col
  hdr=$(printf '%s\n' "$output" | head -1)
  col=${hdr%%IMAGE*}
  printf '%s\n' "$output" | grep "^${b:0:12}" | cut -c$((${#col} + 1))- | grep -q "^$img " ||
    { show_run; false; }
  # no line ends in blanks
  ! printf '%s\n' "$output" | grep -q ' $' || { show_run; false; }
  run_ax ls --no-trunc
  assert_success
  printf '%s\n' "$output" | grep -q "^$a  .*$long" || { show_run; false; }
  printf '%s\n' "$output" | grep -q "^$b  " || { show_run; false; }
  run_ax ls -q --no-trunc
  assert_success
  [ "$(sort <<<"$output")" = "$(printf '%s\n' "$a" "$b" | sort)" ] || { show_run; false; }
  run_ax ls -q
  assert_success
  [ "$(sort <<<"$output")" = "$(printf '%s\n' "${a:0:12}" "${b:0:12}" | sort)" ] ||
    { show_run; false; }
}
