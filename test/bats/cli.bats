#!/usr/bin/env bats
# test-runner: parallel
# The CLI skeleton: help, version, global options, errors, unimplemented
# commands.

load helpers

setup() { common_setup; }
@test "agsx --help lists every command of the design" {
  run_ax --help
  assert_success
  for c in run exec cp ls kill gc build "image ls" "image load" "image rm" "image pull" network update; do
    assert_output_contains "  $c "
  done
  assert_output_contains "--root DIR"
  assert_output_contains "--state DIR"
  assert_output_contains "--log-level LEVEL"
  assert_output_contains "--json"
}

@test "agsx --version" {
  run_ax --version
  assert_success
  [[ "$output" =~ ^agsx\ version\ [0-9]+\.[0-9]+\.[0-9]+$ ]] || { show_run; false; }
}

@test "agsx COMMAND --help shows the command's usage" {
  run_ax image load --help
  assert_success
  assert_output_contains "Usage: agsx image load [OPTIONS] PATH"
  assert_output_contains "-t, --tag NAME[:TAG]"
  run_ax gc --help
  assert_success
  assert_output_contains "--images"
  run_ax image --help
  assert_success
  assert_output_contains "load"
}

@test "agsx with no command fails with usage" {
  run_ax
  assert_status 125
  assert_output_contains "Usage: agsx"
}

@test "unknown command: exit 125, one agsx: line" {
  run_ax frobnicate
  assert_agsx_error "unknown command \`frobnicate\`"
  run_ax image frobnicate
  assert_status 125
  assert_output_contains "agsx: unknown command \`image frobnicate\`"
}

@test "unknown and malformed options: exit 125, one agsx: line" {
  run_ax image ls --bogus
  assert_agsx_error "unknown option \`--bogus\`"
  run_ax image ls -Z
  assert_agsx_error "unknown option \`-Z\`"
  run_ax image load --tag
  assert_agsx_error "needs a value"
  run_ax image ls --quiet=yes
  assert_agsx_error "takes no value"
  run_ax --bogus image ls
  assert_agsx_error "unknown global option"
  run_ax --log-level loud image ls
  assert_agsx_error "invalid log level"
  run_ax --root
  assert_agsx_error "needs a value"
}

@test "global options: --root, AGSX_ROOT and --json" {
  # listing never creates a store
  run_ax image ls
  assert_success
  [ ! -e "$ROOT" ]
  mkdir "$T/empty"
  "$FIXTURES/mkimage" --ref tiny:1 "$T/img" "$T/empty" >/dev/null
  run_ax image load "$T/img"
  assert_success
  [ -f "$ROOT/oci-layout" ]
  [ -f "$ROOT/index.json" ]
  [ "$(stat -c %a "$ROOT")" = 700 ]
  AGSX_ROOT=$T/other run timeout 30 "$AGSX" image load "$T/img"
  [ "$status" -eq 0 ]
  [ -f "$T/other/index.json" ]
  run_ax --json image ls
  assert_success
  python3 -c 'import json,sys; v=json.load(sys.stdin); assert [i["ref"] for i in v] == ["tiny:1"], v' \
    <<<"$output" || { show_run; false; }
}
