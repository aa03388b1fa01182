#!/usr/bin/env bats
# test-runner: parallel
# scripts/e2b-conformance, the runner of E2B's own suites against agsx serve
# (issue 25 item 5): its classifier (test/conformance/classify.mjs) on made-up
# vitest reports, the project's list of known failures, the script's refusals;
# and, when a checkout of e2b-dev/E2B is named by AGSX_E2B_CHECKOUT (see the
# script's header), a short real run: one file against the server, one mocked
# file apart, everything it started gone afterwards; and the same for the code
# interpreter with AGSX_E2B_CI_CHECKOUT. Without the checkouts those tests
# skip (make check has none).

load helpers

bats_require_minimum_version 1.5.0

setup() {
  common_setup
  mkdir -p "$T"
  command -v node >/dev/null || skip "node is missing"
  SCRIPT=$AGSX_SRCDIR/scripts/e2b-conformance
  CLASSIFY=$AGSX_SRCDIR/test/conformance/classify.mjs
}

teardown() {
  common_teardown
}

# A vitest JSON report of FILE with tests "TITLE=STATUS[=MESSAGE]" under the
# describe block "D".
report() {
  local file=$1
  shift
  node -e '
    const [file, ...cases] = process.argv.slice(1);
    const assertionResults = cases.map((c) => {
      const [title, status, msg] = c.split("=");
      return { ancestorTitles: ["D"], title, fullName: "D " + title, status,
        failureMessages: msg ? [msg + "\n    at somewhere"] : [] };
    });
    console.log(JSON.stringify({ testResults: [{ name: "/x/js-sdk/tests/" + file,
      status: "passed", message: "", assertionResults }] }));
  ' "$file" "$@"
}

@test "e2b-conformance: the classifier counts by class, lists failures with their first line, flags the unlisted" {
  printf '# a comment\n%s\t%s\t%s\t%s\n' \
    js-sdk refused 'a.test.ts > D > refused*' 'agsx refuses it (501)' \
    js-sdk infra 'a.test.ts > D > cloud' 'needs the cloud' \
    js-sdk incompatible 'a.test.ts > D > bug' 'a known bug' \
    js-sdk incompatible 'a.test.ts > D > fixed' 'fixed since' \
    js-sdk incompatible 'b.test.ts > *' 'not in this run' \
    code-interpreter infra 'a.test.ts > D > new' 'another suite' >"$T/classes"
  report a.test.ts ok=passed refused-one='failed=NotImplemented: 501' cloud='failed=TimeoutError: x' \
    bug=failed=AssertionError fixed=passed new='failed=Error: new one' skip=skipped mock=failed both=passed \
    >"$T/server.json"
  # "mock" passes only without the server's URLs: counted apart; "both"
  # passes either way: a pass like any other.
  report a.test.ts mock=passed other=failed both=passed >"$T/mocked.json"
  run -1 node "$CLASSIFY" "$T/classes" js-sdk "$T/server.json" "$T/mocked.json"
  echo "$output" | grep -qx 'js-sdk-summary: total=8 passed=3 refused=1 incompatible=1 infra=1 unlisted=1 skipped=1 mocked=1' ||
    { echo "$output" >&3; false; }
  # The unlisted failure comes first, with its error's first line.
  echo "$output" | grep -A2 -m1 '^-- ' | grep -q 'unlisted' || { echo "$output" >&3; false; }
  echo "$output" | grep -A1 'a.test.ts > D > new$' | grep -q 'Error: new one' || { echo "$output" >&3; false; }
  echo "$output" | grep -q -- '-- refused: agsx refuses it (501) (1)' || { echo "$output" >&3; false; }
  # A line that matches only tests that passed is pointed out, so the list
  # shrinks; one that matches no test of the run (another file) is not.
  echo "$output" | grep -A1 'that matched no failure (1)' | grep -q 'a.test.ts > D > fixed' ||
    { echo "$output" >&3; false; }
  # Everything listed: exit 0.
  report a.test.ts ok=passed bug=failed >"$T/server2.json"
  run -0 node "$CLASSIFY" "$T/classes" js-sdk "$T/server2.json"
  # Bad list or report: exit 2 and a line saying where.
  printf 'js-sdk\tbogus\tx\ty\n' >"$T/bad"
  run -2 node "$CLASSIFY" "$T/bad" js-sdk "$T/server2.json"
  [[ "$output" == *"bad:1: want SUITE<TAB>CLASS"* ]] || { echo "$output" >&3; false; }
  echo '{' >"$T/broken.json"
  run -2 node "$CLASSIFY" "$T/classes" js-sdk "$T/broken.json"
}

@test "e2b-conformance: the project's list parses (suite, class, pattern, reason on every line)" {
  echo '{"testResults":[]}' >"$T/empty.json"
  run -0 node "$CLASSIFY" "$AGSX_SRCDIR/test/conformance/e2b-classes" js-sdk "$T/empty.json"
  run -0 node "$CLASSIFY" "$AGSX_SRCDIR/test/conformance/e2b-classes" code-interpreter "$T/empty.json"
  # Each line names a suite the script runs.
  run -0 awk -F'\t' '!/^#/ && NF && $1 != "js-sdk" && $1 != "code-interpreter"' \
    "$AGSX_SRCDIR/test/conformance/e2b-classes"
  [ -z "$output" ]
}

@test "e2b-conformance: bad usage is one line and exit 2, nothing started" {
  run -2 "$SCRIPT"
  [[ "$output" == "e2b-conformance: give --e2b DIR"* ]]
  run -2 "$SCRIPT" --e2b "$T"
  [[ "$output" == "e2b-conformance: $T is not a checkout of e2b-dev/E2B" ]]
  run -2 "$SCRIPT" --bogus
  [[ "$output" == "e2b-conformance: unknown argument --bogus"* ]]
  run -2 "$SCRIPT" --e2b
  run -0 "$SCRIPT" --help
  [[ "$output" == *"--code-interpreter DIR"* ]]
}

@test "e2b-conformance: a short real run (AGSX_E2B_CHECKOUT): counts, mocked apart, nothing left behind" {
  [ -n "${AGSX_E2B_CHECKOUT:-}" ] || skip "AGSX_E2B_CHECKOUT names no checkout of e2b-dev/E2B"
  mkdir -p "$ROOT"
  run timeout 900 "$SCRIPT" --e2b "$AGSX_E2B_CHECKOUT" --agsx "$AGSX" --root "$ROOT" --out "$T/out" \
    --file sandbox/commands/run.test.ts --file sandbox/iam.test.ts
  [ "$status" = 0 ] || { echo "$output" >&3; tail -30 "$T/out/server.log" >&3 || true; false; }
  # run.test.ts's tests against the server; iam.test.ts's mocked ones fail
  # there (the SDK goes to agsx, not to msw) and are counted apart.
  echo "$output" | grep -Eq '^js-sdk-summary: total=([0-9]+) passed=\1 refused=0 incompatible=0 infra=0 unlisted=0 skipped=0 mocked=[1-9][0-9]*$' ||
    { echo "$output" >&3; false; }
  [ -s "$T/out/server.json" ]
  [ -s "$T/out/mocked.json" ]
  # The server is stopped; its sandboxes, their state and the work copy are gone.
  [ ! -e "$T/out/state" ]
  [ ! -e "$T/out/js-sdk" ]
  run ! pgrep -af -- "--root $ROOT "
  run ! grep -q " $T/" /proc/self/mountinfo
}

@test "e2b-conformance: a short real run of the code interpreter (AGSX_E2B_CI_CHECKOUT): its image made, counts" {
  [ -n "${AGSX_E2B_CI_CHECKOUT:-}" ] || skip "AGSX_E2B_CI_CHECKOUT names no checkout of e2b-dev/code-interpreter"
  mkdir -p "$ROOT"
  # A fresh store: the script makes the code-interpreter image itself (from
  # debian-rootfs's cache: minutes the first time on a machine).
  run timeout 1200 "$SCRIPT" --code-interpreter "$AGSX_E2B_CI_CHECKOUT" --agsx "$AGSX" --root "$ROOT" \
    --out "$T/out" --file statefulness.test.ts --file systemd.test.ts
  [ "$status" = 0 ] || { echo "$output" >&3; tail -30 "$T/out/ci.log" >&3 || true; false; }
  # statefulness passes; the systemd tests fail as the list says (infra).
  echo "$output" | grep -qx 'code-interpreter-summary: total=3 passed=1 refused=0 incompatible=0 infra=2 unlisted=0 skipped=0 mocked=0' ||
    { echo "$output" >&3; false; }
  # The image stays (the store had it after the script made it); the state goes.
  "$AGSX" --root "$ROOT" image inspect code-interpreter >/dev/null
  [ ! -e "$T/out/state" ]
  run ! pgrep -af -- "--root $ROOT "
}
