#!/usr/bin/env bats
# test-runner: parallel
# Build hygiene (issue 12 item 7): scripts/format-check passes on a tree in
# .clang-format's style and fails naming a file that is not; the generated
# fuzz automake lines are current; a hardened build has full RELRO; no C
# source file is over 1500 lines (split by concern, with a -internal.h).

load helpers

bats_require_minimum_version 1.5.0

setup() {
  common_setup
}

# A copy of the C sources, the config and the script under $T/tree.
copy_tree() {
  mkdir -p "$T/tree/scripts" "$T/tree/test"
  cp -r "$AGSX_SRCDIR/src" "$AGSX_SRCDIR/cmd" "$T/tree/"
  cp -r "$AGSX_SRCDIR/test/unit" "$AGSX_SRCDIR/test/fuzz" "$T/tree/test/"
  rm -rf "$T/tree/test/fuzz/corpus"
  cp "$AGSX_SRCDIR/.clang-format" "$T/tree/"
  cp "$AGSX_SRCDIR/scripts/format-check" "$T/tree/scripts/"
}

# No agsx runs in these: the plain build's run is enough (heavy).
need_clang_format() {
  heavy
  command -v clang-format-14 >/dev/null || clang-format --version 2>/dev/null | grep -q 'version 14\.' ||
    skip "clang-format 14 is not installed (scripts/deps.sh installs it)"
}

@test "format-check: a formatted tree passes; a file off the style fails, named" {
  need_clang_format
  copy_tree
  run "$T/tree/scripts/format-check" --fix
  assert_success
  run "$T/tree/scripts/format-check"
  assert_success
  assert_output_contains "files follow .clang-format"
  printf 'int  f(void)   {return 0;}\n' >>"$T/tree/src/util/util.c"
  run "$T/tree/scripts/format-check"
  assert_status 1
  assert_output_contains "1 of "
  assert_output_contains "  src/util/util.c"
  refute_output_contains "src/util/json.c"
}

@test "format-check: given files, only those" {
  need_clang_format
  copy_tree
  "$T/tree/scripts/format-check" --fix
  printf 'int  g(void)   {return 0;}\n' >>"$T/tree/src/util/json.c"
  cd "$T/tree"
  run scripts/format-check src/util/util.c
  assert_success
  run scripts/format-check src/util/util.c src/util/json.c
  assert_status 1
  assert_output_contains "  src/util/json.c"
}

@test "size: no C source file in src/, cmd/ or test/ is over 1500 lines" {
  local over
  over=$(find "$AGSX_SRCDIR/src" "$AGSX_SRCDIR/cmd" "$AGSX_SRCDIR/test" -name '*.[ch]' -exec wc -l {} + |
    awk -v top="$AGSX_SRCDIR/" '$2 != "total" && $1 > 1500 {
      if (index($2, top) == 1) $2 = substr($2, length(top) + 1)
      printf "%s (%d) ", $2, $1
    }')
  [ -z "$over" ] || { echo "# over 1500 lines: $over" >&3; false; }
}

@test "gen-fuzz-am: test/fuzz/targets.am matches FUZZ_TARGETS in Makefile.am" {
  run "$AGSX_SRCDIR/scripts/gen-fuzz-am" --check
  assert_success
  local t
  for t in $(sed -n 's/^FUZZ_REPLAYS = //p' "$AGSX_SRCDIR/test/fuzz/targets.am"); do
    [ -f "$AGSX_SRCDIR/test/fuzz/fuzz_${t##*/replay-}.c" ] || { echo "# no source for $t" >&3; false; }
    [ -d "$AGSX_SRCDIR/test/fuzz/corpus/${t##*/replay-}" ] || { echo "# no corpus for $t" >&3; false; }
  done
}

@test "hardening: a hardened build binds now (full RELRO) and has a stack protector" {
  local mk=${AGSX_BUILDDIR:-$(dirname "$AGSX")}/Makefile
  [ -f "$mk" ] || skip "no build Makefile next to $AGSX"
  grep -q '^HARDEN_LDFLAGS = .*-z,now' "$mk" || skip "configured without hardening"
  command -v readelf >/dev/null || skip "readelf is not installed"
  run readelf -d "$AGSX"
  assert_output_contains "BIND_NOW"
  run readelf -lW "$AGSX"
  assert_output_contains "GNU_RELRO"
  run readelf -sW "$AGSX"
  assert_output_contains "__stack_chk_fail"
}
