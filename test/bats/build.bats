#!/usr/bin/env bats
# test-runner: parallel
# agsx build: every Dockerfile instruction, multi-stage builds, COPY --from a
# stage and an image, the seed scenario (a runtime image on Debian with a
# daemon binary from another image, a package installed with dpkg, a user),
# the layer cache, .dockerignore, and every error case (exit 125, one
# `agsx: Dockerfile:N: ...` line, nothing left behind). Built images are
# read back with skopeo and umoci and run with `agsx run`.
#
# RUN steps use `--network internal`: public networking needs a test-made
# network namespace (left to the network tests).

load helpers

bats_require_minimum_version 1.5.0

setup_file() {
  busybox_setup_file
  export DEB="$BATS_FILE_TMPDIR/deb"
  "$FIXTURES/debian-rootfs" --oci "$DEB" --ref debian:bookworm >/dev/null
  # A tiny package for "RUN dpkg -i" (never the internet).
  local pkg="$BATS_FILE_TMPDIR/pkg"
  mkdir -p "$pkg/DEBIAN" "$pkg/usr/share/tiny"
  printf 'Package: tiny\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@example.invalid>\nDescription: tiny test package\n' \
    >"$pkg/DEBIAN/control"
  echo 'tiny readme' >"$pkg/usr/share/tiny/README"
  export DEBFILE="$BATS_FILE_TMPDIR/tiny.deb"
  dpkg-deb --root-owner-group -b "$pkg" "$DEBFILE" >/dev/null
}

setup() {
  busybox_setup 120
  TEARDOWN_NO_RECORDS=1 # RUN steps leave no record (the default teardown)
  CTX=$T/ctx
  mkdir -p "$CTX"
}

# Builds $CTX quietly with the internal network; extra arguments first.
build() {
  run_ax build -q --network internal "$@" "$CTX"
}

layer_dirs() { ls "$ROOT/layers" | sort; }

# The image's config, as skopeo reads it from the store's OCI layout.
config_of() {
  skopeo inspect --insecure-policy --config --raw "oci:$ROOT:$1"
}

# Asserts a build failure: exit 125, one "agsx: Dockerfile:N: ..." line, no
# image, no work directory.
assert_build_error() {
  assert_agsx_error "$1" || return 1
  local n
  n=$(ax image ls -q | wc -l)
  [ "$n" -eq 1 ] || { echo "# an image was left: $(ax image ls)" >&3; return 1; }
  [ -z "$(ls -A "$ROOT/tmp")" ] || { echo "# work dirs left: $(ls -A "$ROOT/tmp")" >&3; return 1; }
}

@test "build: metadata instructions make the image config and empty history entries" {
  cat >"$CTX/Dockerfile" <<'EOF'
# syntax=docker/dockerfile:1
ARG BASE=busybox
FROM $BASE AS base
ARG VERSION=1.0
ENV APP_HOME=/srv/app \
    GREETING="hello world"
ENV LEGACY value with spaces
LABEL org.example.version=$VERSION "org.example.desc"="a ${APP_HOME:+set} label"
EXPOSE 8080 53/udp
USER 1000:1000
WORKDIR $APP_HOME
WORKDIR sub
STOPSIGNAL SIGINT
SHELL ["/bin/sh", "-ec"]
VOLUME /data
ENTRYPOINT ["/bin/echo", "ep"]
CMD ["c1", "c2"]
EOF
  build -t meta:1 --build-arg VERSION=2.5
  assert_success
  [[ "$output" == sha256:* ]]
  run config_of meta:1
  assert_success
  echo "$output" | python3 -c '
import json, sys
c = json.load(sys.stdin)
cf = c["config"]
assert "APP_HOME=/srv/app" in cf["Env"], cf["Env"]
assert "GREETING=hello world" in cf["Env"]
assert "LEGACY=value with spaces" in cf["Env"]
assert cf["Labels"]["org.example.version"] == "2.5", cf["Labels"]
assert cf["Labels"]["org.example.desc"] == "a set label"
assert set(cf["ExposedPorts"]) == {"8080/tcp", "53/udp"}, cf["ExposedPorts"]
assert cf["User"] == "1000:1000"
assert cf["WorkingDir"] == "/srv/app/sub", cf["WorkingDir"]
assert cf["StopSignal"] == "SIGINT"
assert cf["Shell"] == ["/bin/sh", "-ec"]
assert "/data" in cf["Volumes"]
assert cf["Entrypoint"] == ["/bin/echo", "ep"]
assert cf["Cmd"] == ["c1", "c2"]
h = c["history"]
assert sum(1 for e in h if not e.get("empty_layer")) == len(c["rootfs"]["diff_ids"]), h
assert any(e.get("created_by") == "STOPSIGNAL SIGINT" and e.get("empty_layer") for e in h)
'
  run_ax run --rm meta:1
  assert_success
  [ "$output" = "ep c1 c2" ]
}

@test "build: RUN (shell and exec form), COPY, ADD, ARG and ENV reach RUN" {
  echo hello >"$CTX/hello.txt"
  mkdir -p "$CTX/dir/sub"
  echo x >"$CTX/dir/sub/x"
  ln -s x "$CTX/dir/sub/link"
  echo a >"$CTX/a.conf"
  echo b >"$CTX/b.conf"
  mkdir -p "$T/arc/inner"
  echo packed >"$T/arc/inner/file"
  tar -C "$T/arc" -czf "$CTX/arc.tar.gz" .
  cat >"$CTX/Dockerfile" <<'EOF'
FROM busybox
ARG WHO=nobody
ENV FOO=bar
COPY hello.txt /app/
COPY --chmod=750 --chown=agent dir /app/dir
COPY *.conf /etc/app/
ADD arc.tar.gz /opt/arc
ADD hello.txt /opt/plain.txt
RUN echo "$WHO $FOO" >/app/out && rm /bin/true && mkdir /app/made
RUN ["/bin/sh", "-c", "id -u >/app/uid"]
USER agent
RUN id -un >/tmp/whoami
CMD ["cat", "/app/out"]
EOF
  build -t files:1 --build-arg WHO=me
  assert_success
  run_ax run --rm files:1
  assert_success
  [ "$output" = "me bar" ]
  run_ax run --rm files:1 sh -c '
    cat /app/hello.txt /app/dir/sub/x /etc/app/a.conf /etc/app/b.conf /opt/arc/inner/file /opt/plain.txt
    stat -c "%a %U" /app/dir/sub/x; readlink /app/dir/sub/link
    cat /app/uid /tmp/whoami; test -d /app/made; test ! -e /bin/true && echo gone'
  assert_success
  [ "$output" = $'hello\nx\na\nb\npacked\nhello\n750 agent\nx\n0\nagent\ngone' ]
}

@test "build: layers are OCI tars with whiteouts; skopeo and umoci read the image" {
  cat >"$CTX/Dockerfile" <<'EOF'
FROM busybox
RUN mkdir -p /d/keep && echo 1 >/d/old && echo k >/d/keep/k
RUN rm /d/old /bin/true && rm -rf /d/keep && mkdir /d/keep && echo new >/d/keep/n
EOF
  build -t wh:1
  assert_success
  run skopeo inspect --insecure-policy "oci:$ROOT:wh:1"
  assert_success
  [[ "$output" == *'"Architecture": "amd64"'* ]]
  # the last layer holds the whiteouts and the opaque directory
  local last
  last=$(skopeo inspect --insecure-policy "oci:$ROOT:wh:1" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["Layers"][-1].split(":")[1])')
  run tar -tzf "$ROOT/blobs/sha256/$last"
  assert_success
  [[ "$output" == *"d/.wh.old"* ]]
  [[ "$output" == *"bin/.wh.true"* ]]
  [[ "$output" == *"d/keep/.wh..wh..opq"* ]]
  [[ "$output" != *"etc/hosts"* ]]
  run umoci unpack --image "$ROOT:wh:1" "$T/bundle"
  assert_success
  [ -f "$T/bundle/rootfs/d/keep/n" ]
  [ ! -e "$T/bundle/rootfs/d/keep/k" ]
  [ ! -e "$T/bundle/rootfs/d/old" ]
  rm -rf "$T/bundle"
  run_ax run --rm wh:1 sh -c 'ls /d; ls /d/keep; test ! -e /bin/true'
  assert_success
  [ "$output" = $'keep\nn' ]
}

@test "build: multi-stage, COPY --from a stage (merged layers) and an image" {
  cat >"$CTX/Dockerfile" <<'EOF'
FROM busybox AS builder
RUN mkdir -p /out/a && echo 1 >/out/a/one && echo x >/out/gone
RUN echo 2 >/out/two && rm /out/gone
FROM builder AS second
RUN echo 3 >/out/three
FROM scratch
COPY --from=second /out /copied
COPY --from=0 /out/a/one /single
COPY --from=busybox /bin/busybox /bin/busybox
ENTRYPOINT ["/bin/busybox"]
EOF
  build -t ms:1
  assert_success
  run_ax run --rm ms:1 sh -c 'find /copied | sort; cat /single'
  assert_success
  [ "$output" = $'/copied\n/copied/a\n/copied/a/one\n/copied/three\n/copied/two\n1' ]
}

@test "build: the seed scenario (daemon from another image, dpkg -i, USER) and the cache" {
  # the "daemon" image
  mkdir -p "$T/dctx"
  cp "$PROBE" "$T/dctx/agentd"
  printf 'FROM scratch\nCOPY agentd /usr/bin/agentd\n' >"$T/dctx/Dockerfile"
  run_ax build -q -t agentd:1 "$T/dctx"
  assert_success
  ax image load "$DEB" >/dev/null
  cp "$DEBFILE" "$CTX/tiny.deb"
  cat >"$CTX/Dockerfile" <<'EOF'
FROM debian:bookworm
COPY --from=agentd:1 --chmod=755 /usr/bin/agentd /usr/bin/agentd
COPY tiny.deb /tmp/tiny.deb
RUN dpkg -i /tmp/tiny.deb && rm /tmp/tiny.deb
RUN useradd -m -u 1000 agent
USER agent
WORKDIR /home/agent
CMD ["/usr/bin/agentd", "uidmap"]
EOF
  build -t runtime:1
  assert_success
  local first=$output before
  before=$(layer_dirs)
  run_ax run --rm runtime:1 sh -c 'id -un; dpkg -s tiny | grep Status; stat -c %a /usr/bin/agentd; pwd; test ! -e /tmp/tiny.deb'
  assert_success
  [ "$output" = $'agent\nStatus: install ok installed\n755\n/home/agent' ]
  # python3 of the Debian image runs in the built image too
  run_ax run --rm runtime:1 python3 -c 'print(6*7)'
  assert_success
  [ "$output" = 42 ]
  # a rebuild reuses every layer: same layer digests, no new layer directory
  run_ax --json build -q --network internal -t runtime:2 "$CTX"
  assert_success
  [[ "$output" == *'"new_layers":0,"cached_layers":4}' ]]
  [ "$(layer_dirs)" = "$before" ]
  run diff <(skopeo inspect --insecure-policy "oci:$ROOT:runtime:1" | grep -A20 '"Layers"') \
    <(skopeo inspect --insecure-policy "oci:$ROOT:runtime:2" | grep -A20 '"Layers"')
  assert_success
  # --no-cache runs every step again (layers whose content and mtimes come
  # out the same have the same digest: the layer dirs may not change)
  run_ax --json build -q --network internal --no-cache -t runtime:3 "$CTX"
  assert_success
  [[ "$output" == *'"new_layers":4,"cached_layers":0}' ]]
  [ "$first" != "" ]
}

@test "build: the cache follows context content, args and instructions" {
  echo v1 >"$CTX/f"
  printf 'FROM busybox\nARG X=1\nCOPY f /f\nRUN echo $X >/x\n' >"$CTX/Dockerfile"
  build -t c:1
  assert_success
  local l1
  l1=$(layer_dirs)
  build -t c:1
  assert_success
  [ "$(layer_dirs)" = "$l1" ]
  # same content, new mtime: a new COPY layer (metadata is hashed too)
  echo v2 >"$CTX/f"
  build -t c:2
  assert_success
  [ "$(layer_dirs)" != "$l1" ]
  run_ax run --rm c:2 cat /f /x
  [ "$output" = $'v2\n1' ]
  local l2
  l2=$(layer_dirs)
  build -t c:3 --build-arg X=2
  assert_success
  [ "$(layer_dirs)" != "$l2" ]
  run_ax run --rm c:3 cat /x
  [ "$output" = 2 ]
}

@test "build: gc --images removes cache entries no image uses" {
  printf 'FROM busybox\nRUN echo 1 >/one\n' >"$CTX/Dockerfile"
  build -t g:1
  assert_success
  local n
  n=$(ls "$ROOT/cache" | wc -l)
  [ "$n" -ge 1 ]
  run_ax gc --images
  assert_success
  [ "$(ls "$ROOT/cache" | wc -l)" -eq "$n" ]
  run_ax image rm g:1
  assert_success
  run_ax gc --images
  assert_success
  [ "$(ls "$ROOT/cache" | wc -l)" -eq 0 ]
  # and a build after that works without the cache
  build -t g:2
  assert_success
}

@test "build: .dockerignore with ! exceptions and **" {
  mkdir -p "$CTX/logs/deep" "$CTX/src"
  echo 1 >"$CTX/logs/a.log"
  echo 1 >"$CTX/logs/deep/b.log"
  echo keep >"$CTX/logs/keep.log"
  echo s >"$CTX/src/main.c"
  echo secret >"$CTX/secret.env"
  printf '**/*.log\n!logs/keep.log\nsecret.env\n' >"$CTX/.dockerignore"
  printf 'FROM busybox\nCOPY . /ctx\n' >"$CTX/Dockerfile"
  build -t ign:1
  assert_success
  run_ax run --rm ign:1 sh -c 'cd /ctx && find . -type f | sort'
  assert_success
  [ "$output" = $'./.dockerignore\n./Dockerfile\n./logs/keep.log\n./src/main.c' ]
  ax image rm ign:1 >/dev/null
  printf 'FROM busybox\nCOPY secret.env /x\n' >"$CTX/Dockerfile"
  build
  assert_build_error "Dockerfile:2:"
}

@test "build: -f, --build-arg from the environment, scratch, JSON output" {
  mkdir -p "$T/other"
  printf 'FROM scratch\nARG MSG\nCOPY --from=busybox /bin/busybox /bin/sh\nLABEL msg=$MSG\n' >"$T/other/Build.df"
  MSG=from-env run_ax --json build -q --network internal -f "$T/other/Build.df" --build-arg MSG -t s:1 "$CTX"
  assert_success
  [[ "$output" == '{"id":"sha256:'* ]]
  run config_of s:1
  [[ "$output" == *'"msg":"from-env"'* ]]
}

@test "build errors: exit 125, one line naming the Dockerfile line, nothing left" {
  ln -s /etc/passwd "$CTX/out-link"
  mkdir -p "$CTX/d"
  ln -s ../../.. "$CTX/d/up"
  local cases=(
    $'FROM busybox\n\n\n\n\n\nFOO bar\n|Dockerfile:7: unknown instruction "FOO"'
    $'FROM busybox\nCOPY missing /x\n|Dockerfile:2: `missing` not found in the build context'
    $'FROM busybox\nCOPY ../x /x\n|Dockerfile:2: `../x` is outside the build context'
    $'FROM busybox\nCOPY out-link /x\n|Dockerfile:2: `out-link` leads outside the build context'
    $'FROM busybox\nCOPY d/up/etc/passwd /x\n|Dockerfile:2: `d/up/etc/passwd` leads outside the build context'
    $'FROM busybox\nRUN echo first; echo last >&2; exit 3\n|Dockerfile:2: RUN failed with exit code 3: first|last'
    $'FROM --platform=linux/arm64 busybox\n|Dockerfile:1: unsupported platform `linux/arm64`'
    $'FROM nosuch:1\n|Dockerfile:1: no such image `nosuch:1` (and --pull never)'
    $'FROM busybox\nCMD ["a", b]\n|Dockerfile:2: CMD: invalid JSON array'
    $'FROM busybox\nENV A="open\n|Dockerfile:2: unterminated double quote'
    $'FROM busybox\nRUN <<EOF\necho\nEOF\n|Dockerfile:2: heredocs'
    $'FROM busybox\nADD http://example.invalid/x /x\n|Dockerfile:2: ADD of a URL'
    $'FROM busybox\nCOPY --chown=nosuchuser hello /x\n|Dockerfile:2: --chown'
    $'FROM busybox\nEXPOSE 99999\n|Dockerfile:2: invalid port'
    $'RUN true\n|Dockerfile:1: the first instruction must be FROM'
    $'FROM busybox\nCOPY --from=busybox /nonexistent /x\n|Dockerfile:2: COPY --from=busybox'
  )
  echo hello >"$CTX/hello"
  local c
  for c in "${cases[@]}"; do
    printf '%s' "${c%%|*}" >"$CTX/Dockerfile"
    build
    assert_build_error "${c#*|}"
  done
  run_ax build -q --platform linux/arm64 "$CTX"
  assert_agsx_error "unsupported platform"
  run_ax build -q --network bogus "$CTX"
  assert_agsx_error "invalid --network"
  run_ax build -q "$T/nonexistent"
  assert_agsx_error "build context"
}

@test "build: a failed multi-step build leaves no layer, work dir or cache entry" {
  printf 'FROM busybox\nRUN echo 1 >/one\nRUN exit 1\n' >"$CTX/Dockerfile"
  local before blobs
  before=$(layer_dirs)
  blobs=$(ls "$ROOT/blobs/sha256" | sort)
  build -t f:1
  assert_build_error "Dockerfile:3: RUN failed with exit code 1"
  [ "$(layer_dirs)" = "$before" ]
  [ "$(ls "$ROOT/blobs/sha256" | sort)" = "$blobs" ]
  [ -z "$(ls -A "$ROOT/cache" 2>/dev/null)" ]
}

@test "build: RUN runs with the sandbox's isolation" {
  printf 'FROM busybox\nRUN probe caps >/caps; probe nnp >/nnp; probe seccomp >/seccomp; probe uidmap >/uidmap\n' >"$CTX/Dockerfile"
  build -t iso:1
  assert_success
  run_ax run --rm iso:1 cat /caps /nnp /seccomp /uidmap
  assert_success
  [[ "$output" == *"CapEff=00000000a80425fb"* ]]
  [[ "$output" == *"NoNewPrivs=1"* ]]
  [[ "$output" == *"Seccomp=2"* ]]
  # its own uid range above the host's ids, never host root
  local base
  base=$(echo "$output" | awk 'NR==4 {print $2}')
  [ "$base" -ge $((0x70000000)) ]
}

@test "build: SIGINT during RUN stops the build and leaves nothing" {
  printf 'FROM busybox\nRUN echo started; sleep 60\n' >"$CTX/Dockerfile"
  local before
  before=$(layer_dirs)
  "$AGSX" --root "$ROOT" --state "$STATE" build --network internal "$CTX" >"$T/out" 2>&1 &
  local pid=$!
  local i
  for i in $(seq 100); do grep -q started "$T/out" && break; sleep 0.1; done
  kill -INT "$pid"
  local rc=0
  wait "$pid" || rc=$?
  [ "$rc" -eq 125 ]
  grep -q "agsx: Dockerfile:2: RUN: the build was interrupted" "$T/out"
  [ "$(layer_dirs)" = "$before" ]
  [ "$(ax image ls -q | wc -l)" -eq 1 ]
}

@test "build: automatic platform ARGs, RUN --network=none, ARG scoping" {
  cat >"$CTX/Dockerfile" <<'EOF2'
ARG TAG=latest
FROM --platform=$BUILDPLATFORM busybox:${TAG}
ARG TARGETARCH
ARG TAG
ARG UNSET
RUN --network=none echo "$TARGETARCH $TAG ${UNSET:-none}" >/args
EOF2
  build -t plat:1
  assert_success
  run_ax run --rm plat:1 cat /args
  assert_success
  [ "$output" = "amd64 latest none" ]
  ax image rm plat:1 >/dev/null
  printf 'FROM busybox\nRUN --network=host true\n' >"$CTX/Dockerfile"
  build
  assert_build_error "Dockerfile:2: RUN --network=host is not supported"
}

@test "build: globs in any component; existing directories keep their metadata" {
  mkdir -p "$CTX/src/a" "$CTX/src/b" "$CTX/src/c"
  echo 1 >"$CTX/src/a/one.txt"
  echo 2 >"$CTX/src/b/two.txt"
  echo 3 >"$CTX/src/c/three.md"
  echo t >"$CTX/t.txt"
  cat >"$CTX/Dockerfile" <<'EOF2'
FROM busybox
COPY src/*/*.txt /globbed/
COPY t.txt /tmp
EOF2
  ln -s t.txt "$CTX/alias.txt"
  echo 'COPY alias.txt /aliased/' >>"$CTX/Dockerfile"
  build -t glob:1
  assert_success
  run_ax run --rm glob:1 sh -c 'ls /globbed; stat -c %a /tmp; cat /tmp/t.txt; cat /aliased/alias.txt'
  assert_success
  [ "$output" = $'one.txt\ntwo.txt\n1777\nt\nt' ]
  ax image rm glob:1 >/dev/null
  printf 'FROM busybox\nCOPY src/*/none* /x/\n' >"$CTX/Dockerfile"
  build
  assert_build_error "Dockerfile:2: no file in the build context matches"
}

# An image whose etc/passwd and etc/group are FIFOs: nothing would ever
# write to them, so a blocking open hangs the build forever.
fifo_passwd_image() {
  python3 - "$T/fifo.tar" <<'PY'
import sys, tarfile
t = tarfile.open(sys.argv[1], "w", format=tarfile.PAX_FORMAT)
d = tarfile.TarInfo("etc"); d.type = tarfile.DIRTYPE; d.mode = 0o755; t.addfile(d)
for name in ("etc/passwd", "etc/group"):
    f = tarfile.TarInfo(name); f.type = tarfile.FIFOTYPE; f.mode = 0o644; t.addfile(f)
t.close()
PY
  "$FIXTURES/mkimage" --ref fifo:1 "$T/fifo" "$T/fifo.tar" >/dev/null
  ax image load "$T/fifo" >/dev/null
}

@test "build: COPY --chown with a FIFO as the image's /etc/passwd fails, never hangs" {
  fifo_passwd_image
  echo hello >"$CTX/hello"
  AX_TIMEOUT=30
  local spec
  for spec in agent 1000:1000; do
    printf 'FROM fifo:1\nCOPY --chown=%s hello /x\n' "$spec" >"$CTX/Dockerfile"
    build
    assert_agsx_error "Dockerfile:2: --chown: the image's \`/etc/passwd\` is not a regular file"
    [ -z "$(ls -A "$ROOT/tmp")" ] || { echo "# work dirs left: $(ls -A "$ROOT/tmp")" >&3; false; }
  done
}

# ADD used to resolve `..` in an archive's names lexically ("../../x" became
# DST/x); it now follows the one tar-entry policy of layers and `cp -`
# (src/image/tarentry.h), which refuses `..` as an escape attempt, as
# Docker does. Absolute names still land inside DST.
@test "build: ADD of a local archive refuses \`..\` names, keeps absolute ones inside DST" {
  python3 - "$CTX" <<'PY'
import io, sys, tarfile
ctx = sys.argv[1]
def mk(name, *paths):
    with tarfile.open(f"{ctx}/{name}", "w") as tf:
        for p in paths:
            ti = tarfile.TarInfo(p); ti.size = 5; tf.addfile(ti, io.BytesIO(b"evil\n"))
mk("dotdot.tar", "ok", "a/../../escaped")
mk("abs.tar", "/etc/abs", "./dir//./f")
PY
  printf 'FROM busybox\nADD dotdot.tar /opt/x\n' >"$CTX/Dockerfile"
  build
  assert_build_error 'Dockerfile:2: `dotdot.tar`: archive entry `a/../../escaped`: path contains `..`'
  printf 'FROM busybox\nADD abs.tar /opt/x\n' >"$CTX/Dockerfile"
  build -t add-abs:1
  assert_success
  run_ax run --rm add-abs:1 cat /opt/x/etc/abs /opt/x/dir/f
  assert_success
  [ "$output" = $'evil\nevil' ]
}
