#!/usr/bin/env bats
# test-runner: parallel
# scripts/oci-conformance, the runner of opencontainers/runtime-tools'
# validation suite against agsx-oci and an oracle runtime (issue 26 item 6):
# only what needs no checkout of runtime-tools (make check has none): its
# help, and its refusals, each one `oci-conformance: ...` line and exit 2
# before anything is built, installed or started.

load helpers

bats_require_minimum_version 1.5.0

setup() {
  common_setup
  SCRIPT=$AGSX_SRCDIR/scripts/oci-conformance
}

teardown() {
  common_teardown
}

@test "oci-conformance: --help names every option and the checkout's commit" {
  run -0 "$SCRIPT" --help
  local o
  for o in --runtime-tools --podman-system --agsx-oci --oracle --go --out --file --timeout; do
    [[ "$output" == *"$o "* ]] || { echo "# --help lacks $o" >&3; false; }
  done
  [[ "$output" == *e5b454202754ff211f8dbeb98a398b5c3d346b79* ]]
  run -0 "$SCRIPT" -h
}

@test "oci-conformance: bad usage is one line and exit 2, nothing started" {
  run -2 "$SCRIPT"
  [[ "$output" == "oci-conformance: give --runtime-tools DIR and/or --podman-system DIR"* ]]
  run -2 "$SCRIPT" --runtime-tools /nonexistent
  [[ "$output" == "oci-conformance: /nonexistent: no such directory" ]]
  mkdir -p "$T/rt"
  run -2 "$SCRIPT" --runtime-tools "$T/rt"
  [[ "$output" == "oci-conformance: $T/rt is not a checkout of opencontainers/runtime-tools"* ]]
  run -2 "$SCRIPT" --podman-system /nonexistent
  [[ "$output" == "oci-conformance: /nonexistent: no such directory" ]]
  run -2 "$SCRIPT" --podman-system "$T/rt"
  [[ "$output" == "oci-conformance: $T/rt is not a checkout of containers/podman (test/system)" ]]
  # A tree shaped like a checkout gets as far as the options' values.
  mkdir -p "$T/rt/validation/util" "$T/rt/vendor"
  touch "$T/rt/validation/util/test.go" "$T/rt/vendor/modules.txt"
  run -2 "$SCRIPT" --runtime-tools "$T/rt" --timeout soon
  [[ "$output" == "oci-conformance: --timeout wants seconds, not soon" ]]
  run -2 "$SCRIPT" --runtime-tools "$T/rt" --agsx-oci "$T/none"
  [[ "$output" == "oci-conformance: no agsx-oci at $T/none"* ]]
  run -2 "$SCRIPT" --bogus
  [[ "$output" == "oci-conformance: unknown argument --bogus"* ]]
  run -2 "$SCRIPT" --file
  [[ "$output" == "oci-conformance: --file needs a value" ]]
  [ ! -e "$T/rt/runtimetest" ]
}
