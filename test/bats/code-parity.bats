#!/usr/bin/env bats
# test-runner: parallel
# E2B parity of the code interpreter (issue 25): the unmodified npm
# @e2b/code-interpreter SDK through agsx serve, in sandboxes of the host
# image (code-interpreter-v1 without a built code-interpreter image), one
# scenario of test/code/parity.mjs per test. Needs what code.bats needs, and
# Debian's python3-pil, node-typescript, r-cran-irkernel for their tests
# (scripts/deps.sh installs them); skips otherwise.

load helpers

bats_require_minimum_version 1.5.0

setup_file() {
  /usr/bin/python3 -c 'import ipykernel, jupyter_client, numpy, pandas, matplotlib' 2>/dev/null ||
    export CODE_SKIP="python3-ipykernel, jupyter-client, numpy, pandas or matplotlib missing"
  export SDK=
  if command -v node >/dev/null && SDK=$("$AGSX_SRCDIR/test/code/npm-install" 2>/dev/null); then
    export SDK
  fi
}

setup() {
  [ -z "${CODE_SKIP:-}" ] || skip "$CODE_SKIP"
  [ -n "$SDK" ] || skip "npm @e2b/code-interpreter not installable"
  common_setup
  api_serve_start
}

teardown() {
  local rc=0
  serve_stop || rc=1
  sandbox_teardown || rc=1
  return $rc
}

KEY=e2b_0123456789abcdef0123456789abcdef01234567

parity() {
  run env E2B_SDK="$SDK" E2B_API_URL="$U" E2B_SANDBOX_URL="$U" E2B_API_KEY="$KEY" \
    timeout 600 node "$AGSX_SRCDIR/test/code/parity.mjs" "$1"
  echo "$output"
  [ "$status" = 0 ] || { tail -30 "$T/serve.log" >&3; false; }
  [[ "$output" == *"ok $1 "* ]]
}

@test "code parity: a result's text is the text/plain repr with one pair of quotes stripped" {
  parity text
}

@test "code parity: per-execution env vars hold for one cell (bash, python, js, r)" {
  [ -x /usr/bin/R ] || skip "R (r-cran-irkernel) missing"
  parity envs
}

@test "code parity: a fresh sandbox lists E2B's default contexts, python and javascript" {
  parity defaults
}

@test "code parity: PIL images are png results (show, last expression, save)" {
  /usr/bin/python3 -c 'import PIL' 2>/dev/null || skip "python3-pil missing"
  parity pil
}

@test "code parity: chart values are rounded as e2b_charts rounds them" {
  parity charts
}

@test "code parity: javascript: esm imports, top-level await's value, state, streaming, errors" {
  [ -d /usr/share/nodejs/typescript ] || skip "node-typescript missing (it parses the cells)"
  parity javascript
}

@test "code parity: typescript contexts (node-typescript)" {
  [ -d /usr/share/nodejs/typescript ] || skip "node-typescript missing"
  parity typescript
}

@test "code parity: r contexts (IRkernel): state, data frames, plots, output, errors" {
  [ -x /usr/bin/R ] || skip "R (r-cran-irkernel) missing"
  parity r
}
