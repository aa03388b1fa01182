#!/usr/bin/env bats
# test-runner: parallel
# setuid inside a sandbox: `--security-opt no-new-privileges=false` (run,
# exec, pools, serve's --template option) lets a setuid program of the image
# reach the sandbox's root, keeping the seccomp filter and the capability
# bound; without it nothing changes. Then E2B's base template shape, the
# e2b-base image (images/base, scripts/base-image.sh, built offline from
# Debian's archive; skipped when it cannot be built): sudo with the flag
# only, and the unmodified npm `e2b` SDK against serve's `base` template
# (test/serve/base.mjs).

load helpers

bats_require_minimum_version 1.5.0

KEY=e2b_0123456789abcdef0123456789abcdef01234567

setup_file() {
  busybox_setup_file
  export NODE_LATEST=
  if command -v node >/dev/null && mods=$("$AGSX_SRCDIR/test/serve/npm-install" 2>/dev/null); then
    NODE_LATEST=$(echo "$mods" | sed -n 1p)
  fi
}

setup() {
  common_setup
  AX_TIMEOUT=60
  SRV_PID=
  ax image load "$BB" >/dev/null
}

teardown() {
  local rc=0
  serve_stop || rc=1
  sandbox_teardown || rc=1
  return $rc
}

# suid: busybox with a setuid-root copy of the probe, made by agsx build (the
# layer writer and the unpack keep the bit).
suid_image() {
  mkdir -p "$T/ctx"
  printf '%s\n' 'FROM busybox' \
    'RUN cp /usr/local/bin/probe /usr/local/bin/probe-suid && chmod 4755 /usr/local/bin/probe-suid' \
    >"$T/ctx/Dockerfile"
  ax build --network internal -t suid "$T/ctx" >/dev/null 2>"$T/build.log" || { cat "$T/build.log" >&3; return 1; }
}

@test "security-opt no-new-privileges=false: a setuid program reaches the sandbox's root; not by default" {
  suid_image
  run_ax run --rm -u agent suid sh -c 'probe-suid id; probe nnp'
  assert_success
  [ "$output" = $'uid=1000 gid=1000 euid=1000 egid=1000 groups=1000\nNoNewPrivs=1' ] || { show_run; false; }
  for opt in no-new-privileges no-new-privileges=true no-new-privileges:true; do
    run_ax run --rm -u agent --security-opt "$opt" suid probe-suid id
    assert_output_contains "euid=1000"
  done
  for opt in no-new-privileges=false no-new-privileges:false; do
    run_ax run --rm -u agent --security-opt "$opt" suid sh -c 'probe-suid id; probe nnp; probe seccomp; probe-suid caps'
    assert_success
    assert_output_contains "uid=1000 gid=1000 euid=0 egid=1000"
    assert_output_contains "NoNewPrivs=0"
    # the filter and the bounding set stay: the setuid process gets Docker's set at most
    assert_output_contains "Seccomp=2"
    assert_output_contains "CapEff=00000000a80425fb CapBnd=00000000a80425fb"
  done
  # the default filter still denies; a custom profile or none apply as well
  run_ax run --rm --security-opt no-new-privileges=false suid probe syscall keyctl
  assert_output_contains "keyctl: blocked"
  cat >"$T/deny-mkdir.json" <<'END'
{"defaultAction":"SCMP_ACT_ALLOW",
 "syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO","errnoRet":1}]}
END
  run_ax run --rm -u agent --security-opt no-new-privileges=false --security-opt "seccomp=$T/deny-mkdir.json" \
    suid sh -c 'probe-suid id; probe seccomp; mkdir /tmp/x || echo mkdir-denied'
  assert_success
  assert_output_contains "euid=0"
  assert_output_contains "Seccomp=2"
  assert_output_contains "mkdir-denied"
  run_ax run --rm -u agent --security-opt no-new-privileges=false --security-opt seccomp=unconfined \
    suid sh -c 'probe-suid id; probe seccomp'
  assert_output_contains "euid=0"
  assert_output_contains "Seccomp=0"
}

@test "security-opt: exec and inspect follow the sandbox's setting" {
  suid_image
  local a b
  a=$(ax run -d --timeout 60 --security-opt no-new-privileges=false suid sleep 600)
  b=$(ax run -d --timeout 60 suid sleep 600)
  run_ax exec -u agent "$a" sh -c 'probe-suid id; probe nnp'
  assert_output_contains "euid=0"
  assert_output_contains "NoNewPrivs=0"
  run_ax exec -u agent "$b" sh -c 'probe-suid id; probe nnp'
  assert_output_contains "euid=1000"
  assert_output_contains "NoNewPrivs=1"
  [ "$(ax inspect "$a" | jq -r '.[0].no_new_privileges')" = false ]
  [ "$(ax inspect "$b" | jq -r '.[0].no_new_privileges')" = true ]
  ax kill "$a" "$b" >/dev/null
}

@test "security-opt: bad values are refused (125), nothing is left" {
  for v in no-new-privileges=maybe no-new-privileges=FALSE nnp=false no-new-privileges=; do
    run_ax run --rm --security-opt "$v" busybox true
    assert_agsx_error "unknown --security-opt"
  done
  [ -z "$(ax ls -a -q)" ]
}

@test "security-opt: a pool keeps its setting; a claim cannot raise it" {
  suid_image
  ax pool create --image suid --size 1 --security-opt no-new-privileges=false free >/dev/null
  ax pool create --image suid --size 1 strict >/dev/null
  run_ax run --rm -u agent --pool free probe-suid id
  assert_output_contains "euid=0"
  run_ax run --rm -u agent --pool strict probe-suid id
  assert_output_contains "euid=1000"
  run_ax run --rm --pool strict --security-opt no-new-privileges=false true
  assert_agsx_error "--security-opt"
  [ "$(ax pool ls --json | jq -r '[.[] | .no_new_privileges | tostring] | join(",")')" = false,true ]
  ax pool rm free strict >/dev/null
}

@test "serve --template NAME=IMAGE,OPTION: bad options are refused" {
  for t in 'x=bb,no-new-privileges=maybe' 'x=bb,foo' 'x=,no-new-privileges=false' 'x=bb,'; do
    run_ax serve --listen 127.0.0.1:0 --template "$t"
    assert_agsx_error "template"
  done
}

@test "serve --template NAME=IMAGE,no-new-privileges=false: the template's sandboxes, and exec in them" {
  suid_image
  api_serve_start --template free=suid,no-new-privileges=false --template strict=suid \
    --template both=suid,no-new-privileges=false --template both=suid
  local t id
  for t in free strict both; do
    id=$(curl -s -X POST -H "X-API-KEY: $KEY" -H 'Content-Type: application/json' \
      -d "{\"templateID\":\"$t\",\"timeout\":60}" "$U/v2/sandboxes" | jq -r .sandboxID)
    [ -n "$id" ] && [ "$id" != null ] || { cat "$T/serve.log" >&3; false; }
    run_ax exec -u agent "$id" probe-suid id
    case $t in
    free) assert_output_contains "euid=0" ;;
    *) assert_output_contains "euid=1000" ;; # both: the later entry wins
    esac
    [ "$(ax inspect "$id" | jq -r '.[0].no_new_privileges')" = "$([ $t = free ] && echo false || echo true)" ]
    ax kill "$id" >/dev/null
  done
}

# ---- the e2b-base image --------------------------------------------------

# Builds e2b-base once per file into a store of the file's
# (scripts/base-image.sh: the debootstrap rootfs, cached, then agsx build),
# and points $ROOT at it; skips when it cannot be built here.
base_image() {
  heavy
  command -v debootstrap >/dev/null || skip "no debootstrap"
  local r=$BATS_FILE_TMPDIR/base
  if ! [ -e "$r/built" ]; then
    AGSX_ROOT=$r/root AGSX_STATE=$r/state "$AGSX_SRCDIR/scripts/base-image.sh" "$(dirname "$AGSX")" \
      >"$r.log" 2>&1 || skip "e2b-base could not be built: $(tail -1 "$r.log")"
    touch "$r/built"
  fi
  ROOT=$r/root
}

@test "e2b-base: user, /home/user, the tools; sudo with no-new-privileges=false only" {
  base_image
  run_ax run --rm e2b-base bash -c 'whoami; pwd; sudo -n true'
  [ "$status" -eq 1 ] || { show_run; false; }
  assert_output_contains $'user\n/home/user\n'
  assert_output_contains "no new privileges"
  run_ax run --rm --security-opt no-new-privileges=false e2b-base \
    bash -c 'sudo -n whoami; sudo -n true && echo ok; stat -c %a:%U /etc/sudoers.d/user /usr/bin/sudo'
  assert_success
  [ "$output" = $'root\nok\n440:root\n4755:root' ] || { show_run; false; }
  run_ax run --rm e2b-base bash -c 'git --version && curl --version && python3 -m pip --version' >/dev/null
  assert_success
  # `python` too, as in E2B's base (its examples and tests run python -m ...)
  run_ax run --rm e2b-base python -c 'import sys; print(sys.version_info[0])'
  assert_success
  [ "$output" = 3 ] || { show_run; false; }
}

@test "e2b-base: the unmodified SDK against serve's base template: whoami, cwd, sudo" {
  [ -n "$NODE_LATEST" ] || skip "the npm e2b SDK is not installed (npm or its registry unreachable)"
  base_image
  SERVE_LOG_LEVEL=debug api_serve_start
  run env E2B_SDK="$NODE_LATEST" E2B_API_URL="$U" E2B_SANDBOX_URL="$U" E2B_API_KEY="$KEY" \
    E2B_TEMPLATE=base timeout --kill-after=5 120 node "$AGSX_SRCDIR/test/serve/base.mjs"
  if [ "$status" -ne 0 ] || [ "${lines[${#lines[@]}-1]}" != ok ]; then
    printf '%s\n' "$output" | sed 's/^/#   /' >&3
    tail -30 "$T/serve.log" | sed 's/^/# serve: /' >&3
    false
  fi
  grep -q 'template base, image e2b-base' "$T/serve.log"
}
