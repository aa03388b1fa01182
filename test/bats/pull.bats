#!/usr/bin/env bats
# test-runner: parallel
# agsx pull / image pull against a real registry (Debian's docker-registry)
# on loopback, started per test with its storage in $T; a small front proxy
# (test/fixtures/registry) adds the bearer-token flow, cuts connections and
# logs requests. Covers tags, digests, indexes, auth, verification,
# resumption, skipping present blobs, insecure and TLS registries.

bats_require_minimum_version 1.5.0
load helpers

setup_file() {
  # (no skip here: Debian's bats 1.8 fails a file whose setup_file skips;
  # setup skips each test)
  command -v docker-registry >/dev/null || return 0
  busybox_setup_file
}

setup() {
  command -v docker-registry >/dev/null || skip "docker-registry not installed"
  common_setup
  REG_DIR=$T/reg
  mkdir -p "$REG_DIR"
  # no credentials of the user running the tests
  export DOCKER_CONFIG=$T/docker
}

# The registries and proxies the test started; the default teardown then
# checks that none is left running (a process naming $T) and, with
# CHECK_PARTIAL, that no partial download is left in the store.
teardown() {
  local d
  for d in "$T"/reg "$T"/reg2 "$T"/px "$T"/px2 "$T"/tls; do
    [ -d "$d" ] && "$FIXTURES/registry" stop "$d"
  done
  sandbox_teardown
}

registry() { # registry [start options]: starts one in $REG_DIR, sets $REG
  REG=$("$FIXTURES/registry" start "$REG_DIR" "$@")
}

push() { # push LAYOUT:REF DEST [skopeo options]: DEST is REPO:TAG on $REG
  local src=$1 dst=$2; shift 2
  skopeo copy --insecure-policy --dest-tls-verify=false "$@" "oci:$src" "docker://$REG/$dst" \
    >/dev/null 2>"$T/skopeo.err" || { cat "$T/skopeo.err" >&3; return 1; }
}

none() { # none CMD...: CMD fails (bats ignores a failing `! CMD`)
  if "$@" >/dev/null 2>&1; then
    echo "# unexpectedly succeeded: $*" >&3
    return 1
  fi
}

registry_blob() { # registry_blob DIGEST: path of the blob's data in the registry storage
  local hex=${1#sha256:}
  echo "$REG_DIR/storage/docker/registry/v2/blobs/sha256/${hex:0:2}/$hex/data"
}

assert_runs() { # assert_runs REF: the image runs and skopeo reads it from the store
  run_ax run --rm "$1" /bin/sh -c 'echo ok'
  assert_success
  [ "$output" = ok ] || { show_run; false; }
  run skopeo inspect --insecure-policy "oci:$ROOT:$1"
  [ "$status" -eq 0 ] || { show_run; false; }
  [[ "$output" == *'"Architecture": "amd64"'* ]] || { show_run; false; }
}

@test "pull by tag: prints digest and name, the image runs and is an OCI layout entry" {
  registry
  push "$BB:busybox:latest" test/bb:1
  run_ax pull "$REG/test/bb:1"
  assert_success
  [[ "${lines[0]}" =~ ^Digest:\ sha256:[0-9a-f]{64}$ ]] || { show_run; false; }
  [ "${lines[1]}" = "$REG/test/bb:1" ] || { show_run; false; }
  run_ax image ls
  assert_output_contains "$REG/test/bb"
  assert_runs "$REG/test/bb:1"
  # nothing left behind by the download
  [ -z "$(ls -A "$ROOT/partial")" ]
}

@test "image pull by digest; --json and -q output" {
  registry
  push "$BB:busybox:latest" test/bb:1
  digest=$(skopeo inspect --insecure-policy --tls-verify=false "docker://$REG/test/bb:1" |
    sed -n 's/^ *"Digest": "\(.*\)",/\1/p')
  run_ax --json image pull "$REG/test/bb@$digest"
  assert_success
  [ "$output" = "{\"name\":\"$REG/test/bb@$digest\",\"ref\":\"$REG/test/bb@$digest\",\"digest\":\"$digest\",\"id\":\"${digest#sha256:}\"}" ] ||
    { show_run; false; }
  assert_runs "$REG/test/bb@$digest"
  run_ax pull -q "$REG/test/bb:1"
  assert_success
  [ "$output" = "$REG/test/bb:1" ] || { show_run; false; }
  # a wrong digest is not found, and nothing is named
  run_ax pull "$REG/test/bb@sha256:$(printf '%064d' 0)"
  assert_agsx_error "not found"
}

@test "a multi-platform index resolves to linux/amd64; arm64-only images are refused" {
  registry
  "$FIXTURES/busybox-image" "$T/multi" --probe "$PROBE" --multi linux/amd64,linux/arm64 \
    --ref multi:1 >/dev/null
  "$FIXTURES/busybox-image" "$T/arm" --probe "$PROBE" --multi linux/arm64 --ref arm:1 >/dev/null
  "$FIXTURES/busybox-image" "$T/arm1" --probe "$PROBE" --platform linux/arm64 --ref arm1:1 >/dev/null
  push "$T/multi:multi:1" test/multi:1 --all
  push "$T/arm:arm:1" test/arm:1 --all
  push "$T/arm1:arm1:1" test/arm1:1
  run_ax --json pull "$REG/test/multi:1"
  assert_success
  # the digest is the index's, the id the amd64 manifest's
  index=$(echo "$output" | sed 's/.*"digest":"sha256:\([0-9a-f]*\)".*/\1/')
  id=$(echo "$output" | sed 's/.*"id":"\([0-9a-f]*\)".*/\1/')
  [ "$index" != "$id" ] || { show_run; false; }
  assert_runs "$REG/test/multi:1"
  before=$(store_snapshot)
  run_ax pull "$REG/test/arm:1"
  assert_agsx_error "no linux/amd64 image in the index (it has: linux/arm64)"
  run_ax pull "$REG/test/arm1:1"
  assert_agsx_error "image is for linux/arm64"
  [ "$(store_snapshot)" = "$before" ]
}

@test "basic auth: credentials from --authfile and \$DOCKER_CONFIG; missing or wrong ones refused" {
  registry --htpasswd alice:s3cret
  push "$BB:busybox:latest" test/bb:1 --dest-creds alice:s3cret
  run_ax pull "$REG/test/bb:1"
  assert_agsx_error "authentication required: no credentials for \`$REG\`"
  printf '{"auths":{"%s":{"auth":"%s"}}}' "$REG" "$(printf alice:wrong | base64)" >"$T/bad.json"
  run_ax pull --authfile "$T/bad.json" "$REG/test/bb:1"
  assert_agsx_error "access denied (HTTP 401): check the credentials"
  none grep -q test/bb "$ROOT/index.json"
  printf '{"auths":{"http://%s":{"auth":"%s"}}}' "$REG" "$(printf alice:s3cret | base64)" \
    >"$T/good.json"
  run_ax pull --authfile "$T/good.json" "$REG/test/bb:1"
  assert_success
  mkdir -p "$DOCKER_CONFIG"
  printf '{"auths":{"%s":{"username":"alice","password":"s3cret"}}}' "$REG" \
    >"$DOCKER_CONFIG/config.json"
  run_ax image rm "$REG/test/bb:1"
  run_ax pull "$REG/test/bb:1"
  assert_success
  assert_runs "$REG/test/bb:1"
  # a missing --authfile is an error, a missing default file is not
  run_ax pull --authfile "$T/none.json" "$REG/test/bb:1"
  assert_agsx_error "credentials \`$T/none.json\`"
}

@test "bearer tokens: 401 -> token server (anonymous or with credentials) -> retry" {
  registry
  push "$BB:busybox:latest" test/bb:1
  PX=$("$FIXTURES/registry" proxy "$T/px" --upstream "$REG" --bearer)
  run_ax pull "$PX/test/bb:1"
  assert_success
  grep -q '^GET /token?scope=repository%3Atest%2Fbb%3Apull&service=test-registry ' "$T/px/proxy.log"
  grep -q '^GET /v2/test/bb/manifests/1 .*auth=Bearer' "$T/px/proxy.log"
  none grep '/blobs/.*auth=none' "$T/px/proxy.log"
  assert_runs "$PX/test/bb:1"
  "$FIXTURES/registry" stop "$T/px"
  # a token server that wants credentials
  PX=$("$FIXTURES/registry" proxy "$T/px" --upstream "$REG" --bearer --token-cred bob:pw)
  run_ax pull "$PX/test/bb:1"
  assert_agsx_error "authentication failed: the token server refused anonymous access (HTTP 401)"
  printf '{"auths":{"%s":{"auth":"%s"}}}' "$PX" "$(printf bob:pw | base64)" >"$T/a.json"
  run_ax image rm "$PX/test/bb:1"
  run_ax pull --authfile "$T/a.json" "$PX/test/bb:1"
  assert_success
  grep -q '^GET /token.* auth=Basic' "$T/px/proxy.log"
}

@test "blob redirects are followed without the registry's credentials" {
  registry
  push "$BB:busybox:latest" test/bb:1
  # blob storage on another host (127.0.0.2), which must not see the token
  PX2=$("$FIXTURES/registry" proxy "$T/px2" --upstream "$REG" --addr 127.0.0.2)
  PX=$("$FIXTURES/registry" proxy "$T/px" --upstream "$REG" --bearer --redirect-blobs "http://$PX2")
  run_ax pull "$PX/test/bb:1"
  assert_success
  [ "$(grep -c '/blobs/.*auth=Bearer' "$T/px/proxy.log")" -eq 3 ] || { cat "$T/px/proxy.log" >&3; false; }
  [ "$(grep -c '/blobs/.*auth=none' "$T/px2/proxy.log")" -eq 3 ] || { cat "$T/px2/proxy.log" >&3; false; }
  none grep -q 'auth=Bearer' "$T/px2/proxy.log"
  assert_runs "$PX/test/bb:1"
}

@test "a redirect target's 401 challenge gets no credentials, nor does its token server" {
  registry
  push "$BB:busybox:latest" test/bb:1
  # the registry itself is anonymous, the user has credentials for it; its
  # blobs redirect to a second server on another port that answers 401 with
  # a Bearer challenge naming its own token endpoint (which logs what arrives)
  PX2=$("$FIXTURES/registry" proxy "$T/px2" --upstream "$REG" --bearer)
  PX=$("$FIXTURES/registry" proxy "$T/px" --upstream "$REG" --redirect-blobs "http://$PX2")
  printf '{"auths":{"%s":{"auth":"%s"}}}' "$PX" "$(printf alice:s3cret | base64)" >"$T/a.json"
  run_ax pull --authfile "$T/a.json" "$PX/test/bb:1"
  assert_agsx_error "HTTP 401 from \`http://$PX2\`, where the registry redirected"
  none grep -q /token "$T/px2/proxy.log"
  none grep -q 'auth=Basic' "$T/px2/proxy.log"
  grep -q '/blobs/.*auth=none' "$T/px2/proxy.log" || { cat "$T/px2/proxy.log" >&3; false; }
  run_ax image ls -q
  [ -z "$output" ] || { show_run; false; }
}

@test "the image budget and the store's free space are checked before layers are downloaded" {
  registry
  push "$BB:busybox:latest" test/bb:1
  PX=$("$FIXTURES/registry" proxy "$T/px" --upstream "$REG")
  # declared layer sizes over the budget (env, then agsx.conf): only the
  # config (small, capped) is fetched
  AGSX_MAX_IMAGE_SIZE=100k run_ax pull "$PX/test/bb:1"
  assert_agsx_error "the manifest declares more than the image budget of 102kB"
  [ "$(grep -c '/blobs/' "$T/px/proxy.log")" -eq 1 ] || { cat "$T/px/proxy.log" >&3; false; }
  printf 'max-image-size = 100k\n' >"$T/agsx.conf"
  AGSX_CONFIG=$T/agsx.conf run_ax pull "$PX/test/bb:1"
  assert_agsx_error "declares more than the image budget"
  printf 'max-image-size = lots\n' >"$T/agsx.conf"
  AGSX_CONFIG=$T/agsx.conf run_ax pull "$PX/test/bb:1"
  assert_agsx_error "max-image-size (AGSX_MAX_IMAGE_SIZE)"
  # a reserve larger than the free space
  : >"$T/px/proxy.log"
  AGSX_STORE_RESERVE=1000000000g run_ax pull "$PX/test/bb:1"
  assert_agsx_error "not enough space in the image store"
  [ "$(grep -c '/blobs/' "$T/px/proxy.log")" -le 1 ] || { cat "$T/px/proxy.log" >&3; false; }
  run_ax image ls -q
  [ -z "$output" ] || { show_run; false; }
  run_ax pull "$PX/test/bb:1"
  assert_success
}

@test "a blob longer than its descriptor is cut off and refused" {
  registry
  push "$BB:busybox:latest" test/bb:1
  blob=$(ls -S "$REG_DIR"/storage/docker/registry/v2/blobs/sha256/*/*/data | head -1)
  head -c 100000 /dev/urandom >>"$blob"
  run_ax pull "$REG/test/bb:1"
  assert_agsx_error
  [[ "$output" == *"sent more than its"* || "$output" == *"larger than its descriptor"* ]] ||
    { show_run; false; }
  hex=$(basename "$(dirname "$blob")")
  [ ! -e "$ROOT/blobs/sha256/$hex" ]
  [ "$(stat -c %s "$ROOT/partial/$hex" 2>/dev/null || echo 0)" -le "$(($(stat -c %s "$blob") - 100000))" ]
}

@test "a pulled image pairing a diff_id the store has with another blob is refused" {
  registry
  mkdir -p "$T/a" "$T/b" && echo good >"$T/a/f" && echo evil >"$T/b/f"
  "$FIXTURES/mkimage" --ref a:1 "$T/la" "$T/a" >/dev/null
  ax image load "$T/la" >/dev/null
  diff=$(python3 -c 'import json,sys
d = sys.argv[1]
blob = lambda dg: json.load(open(d + "/blobs/sha256/" + dg.split(":")[1]))
m = blob(json.load(open(d + "/index.json"))["manifests"][0]["digest"])
print(blob(m["config"]["digest"])["rootfs"]["diff_ids"][0])' "$T/la")
  "$FIXTURES/mkimage" --ref b:1 --diff-id "$diff" "$T/lb" "$T/b" >/dev/null
  push "$T/lb:b:1" test/b:1
  before=$(store_snapshot)
  run_ax pull "$REG/test/b:1"
  assert_agsx_error "uncompressed content has digest"
  [ "$(store_snapshot)" = "$before" ] || { echo "# the store changed" >&3; false; }
}

@test "a corrupted blob on the registry is refused: no image, no stray files" {
  registry
  push "$BB:busybox:latest" test/bb:1
  # the biggest layer blob: flip one byte in the middle, keeping its size
  blob=$(ls -S "$REG_DIR"/storage/docker/registry/v2/blobs/sha256/*/*/data | head -1)
  size=$(stat -c %s "$blob")
  printf 'X' | dd of="$blob" bs=1 seek=$((size / 2)) conv=notrunc status=none
  run_ax pull "$REG/test/bb:1"
  assert_agsx_error "does not match its digest"
  none grep -q test/bb "$ROOT/index.json"
  # nothing of the bad blob is kept (a download of another layer cut short
  # by the failure may stay in partial/, to be resumed)
  hex=$(basename "$(dirname "$blob")")
  [ ! -e "$ROOT/partial/$hex" ] || { ls -l "$ROOT/partial" >&3; false; }
  [ -z "$(ls -A "$ROOT/layers")" ]
  # only the config may have been kept (verified); no layer blob
  [ ! -e "$ROOT/blobs/sha256/$(basename "$(dirname "$blob")")" ]
}

@test "an interrupted pull resumes with a Range request and completes" {
  registry
  mkdir -p "$T/big/data"
  head -c $((8 << 20)) /dev/urandom >"$T/big/data/random"
  # the busybox image's layers (gzip blobs, used verbatim) plus a big
  # incompressible one
  layers=()
  for d in $(python3 -c 'import json,sys
m = json.load(open(sys.argv[1] + "/index.json"))["manifests"][0]["digest"]
m = json.load(open(sys.argv[1] + "/blobs/sha256/" + m.split(":")[1]))
print(" ".join(l["digest"].split(":")[1] for l in m["layers"]))' "$BB"); do
    ln -s "$BB/blobs/sha256/$d" "$T/$d.tar.gz"
    layers+=("$T/$d.tar.gz")
  done
  "$FIXTURES/mkimage" --ref big:1 "$T/img" "${layers[@]}" "$T/big" >/dev/null
  push "$T/img:big:1" test/big:1
  PX=$("$FIXTURES/registry" proxy "$T/px" --upstream "$REG" --cut-after 3000000)
  run_ax pull "$PX/test/big:1"
  assert_agsx_error
  # the partial blobs are kept (the cut one, and those in flight beside
  # it), nothing is listed
  stat -c %s "$ROOT/partial/"* | grep -qx 3000000 || { ls -l "$ROOT/partial" >&3; false; }
  none grep -q test/big "$ROOT/index.json"
  run_ax pull "$PX/test/big:1"
  assert_success
  grep -q 'range=bytes=3000000-' "$T/px/proxy.log" || { cat "$T/px/proxy.log" >&3; false; }
  [ -z "$(ls -A "$ROOT/partial")" ]
  assert_runs "$PX/test/big:1"
  run_ax run --rm "$PX/test/big:1" sha256sum /data/random
  [ "${output%% *}" = "$(sha256sum "$T/big/data/random" | cut -d' ' -f1)" ] || { show_run; false; }
}

@test "blobs already in the store are not downloaded again" {
  registry
  push "$BB:busybox:latest" test/bb:1
  push "$BB:busybox:latest" other/name:2
  PX=$("$FIXTURES/registry" proxy "$T/px" --upstream "$REG")
  run_ax pull "$PX/test/bb:1"
  assert_success
  [ "$(grep -c '/blobs/' "$T/px/proxy.log")" -eq 3 ] || { cat "$T/px/proxy.log" >&3; false; }
  : >"$T/px/proxy.log"
  run_ax pull "$PX/other/name:2"
  assert_success
  none grep '/blobs/' "$T/px/proxy.log"
  grep -q '/manifests/2' "$T/px/proxy.log"
  assert_runs "$PX/other/name:2"
}

@test "plain http to a non-loopback-named registry needs --insecure or AGSX_INSECURE_REGISTRIES" {
  # 127.0.0.2 is loopback, but not one of the names (localhost, 127.0.0.1)
  # that are insecure implicitly
  registry --addr 127.0.0.2
  push "$BB:busybox:latest" test/bb:1
  run_ax pull "$REG/test/bb:1"
  assert_agsx_error "a plain http registry needs --insecure"
  none grep -q test/bb "$ROOT/index.json"
  run_ax pull --insecure "$REG/test/bb:1"
  assert_success
  run_ax image rm "$REG/test/bb:1"
  AGSX_INSECURE_REGISTRIES="other:1,$REG" run_ax pull "$REG/test/bb:1"
  assert_success
  assert_runs "$REG/test/bb:1"
}

make_certs() { # CA and a server certificate for 127.0.0.2 in $T/tls
  mkdir -p "$T/tls"
  (
    cd "$T/tls"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 \
      -subj /CN=agsx-test-ca 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout srv.key -out srv.csr -subj /CN=127.0.0.2 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.2\n' >ext
    openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out srv.crt -days 2 \
      -extfile ext 2>/dev/null
  )
}

@test "an https registry's blob redirect to plain http is refused" {
  registry
  push "$BB:busybox:latest" test/bb:1
  make_certs
  PX2=$("$FIXTURES/registry" proxy "$T/px2" --upstream "$REG")
  PX=$("$FIXTURES/registry" proxy "$T/px" --upstream "$REG" --addr 127.0.0.2 \
    --redirect-blobs "http://$PX2" --tls "$T/tls/srv.crt" "$T/tls/srv.key")
  mkdir -p "$T/certs/$PX"
  cp "$T/tls/ca.crt" "$T/certs/$PX/ca.crt"
  AGSX_CERTS_DIR=$T/certs run_ax pull "$PX/test/bb:1"
  assert_agsx_error "redirect from https to plain http refused"
  none grep -q /blobs/ "$T/px2/proxy.log"
  run_ax image ls -q
  [ -z "$output" ] || { show_run; false; }
}

@test "https with a registry CA from certs.d (AGSX_CERTS_DIR); unknown CA refused" {
  make_certs
  REG=$("$FIXTURES/registry" start "$T/tls" --addr 127.0.0.2 --tls "$T/tls/srv.crt" "$T/tls/srv.key")
  REG_DIR=$T/tls
  skopeo copy --insecure-policy --dest-tls-verify=false "oci:$BB:busybox:latest" \
    "docker://$REG/test/bb:1" >/dev/null 2>"$T/skopeo.err" || { cat "$T/skopeo.err" >&3; false; }
  run_ax pull "$REG/test/bb:1"
  assert_agsx_error "certificate"
  mkdir -p "$T/certs/$REG"
  cp "$T/tls/ca.crt" "$T/certs/$REG/ca.crt"
  AGSX_CERTS_DIR=$T/certs run_ax pull "$REG/test/bb:1"
  assert_success
  assert_runs "$REG/test/bb:1"
}

@test "short names expand like Docker's; bad references and missing images fail cleanly" {
  registry
  run_ax pull "Bad/Name"
  assert_agsx_error "invalid image reference"
  run_ax pull "$REG/test/none:1"
  assert_agsx_error "manifest \`1\` not found in \`test/none\`"
  run_ax pull "127.0.0.1:1/x"
  assert_agsx_error "Could"
  # without libcurl: a clear error, before any network access
  AGSX_LIBCURL=libcurl-missing.so.4 run_ax pull busybox
  assert_agsx_error "pull needs libcurl (apt-get install libcurl4)"
  run_ax image ls -q
  [ -z "$output" ] || { show_run; false; }
}

@test "progress on stderr only when it is a terminal" {
  registry
  push "$BB:busybox:latest" test/bb:1
  ax pull "$REG/test/bb:1" >"$T/out" 2>"$T/err"
  [ ! -s "$T/err" ] || { cat "$T/err" >&3; false; }
  grep -qx "$REG/test/bb:1" "$T/out"
  run_ax image rm "$REG/test/bb:1"
  # under a pseudo-terminal: a status line redrawn in place, then cleared
  run script -qec "timeout 60 $AGSX --root $ROOT pull $REG/test/bb:1" /dev/null
  [ "$status" -eq 0 ] || { show_run; false; }
  [[ "$output" == *"layers 2/2"* ]] || { show_run; false; }
  [[ "$output" == *"$REG/test/bb:1"* ]] || { show_run; false; }
}

@test "partial downloads nobody resumed for a week are dropped by the next pull" {
  registry
  push "$BB:busybox:latest" test/bb:1
  mkdir -p "$ROOT/partial"
  head -c 1000 /dev/zero >"$ROOT/partial/$(printf '%064d' 1)"
  head -c 1000 /dev/zero >"$ROOT/partial/$(printf '%064d' 2)"
  touch -d '8 days ago' "$ROOT/partial/$(printf '%064d' 1)"
  run_ax pull "$REG/test/bb:1"
  assert_success
  [ "$(ls "$ROOT/partial")" = "$(printf '%064d' 2)" ] || { ls -l "$ROOT/partial" >&3; false; }
}

@test "run and build pull a missing image (policy missing); --pull never and always" {
  registry
  push "$BB:busybox:latest" test/bb:1
  # never: the store lacks it, nothing is asked of the registry
  run_ax run --rm --pull never "$REG/test/bb:1" true
  assert_agsx_error "not found (and --pull never)"
  run_ax run --rm --pull sometimes "$REG/test/bb:1" true
  assert_agsx_error "invalid pull policy \`sometimes\`"
  AGSX_PULL=bogus run_ax run --rm "$REG/test/bb:1" true
  assert_agsx_error "AGSX_PULL: invalid pull policy"
  # missing: run pulls it (a line on stderr), then it is local
  AGSX_PULL=missing run --separate-stderr ax run --rm "$REG/test/bb:1" /bin/sh -c 'echo ran'
  [ "$status" -eq 0 ] && [ "$output" = ran ] || { echo "$stderr" >&3; false; }
  [[ "$stderr" == *"not found locally: pulling it"* ]] || { echo "$stderr" >&3; false; }
  run_ax image ls -q
  [ -n "$output" ]
  # now present: no pull, even with the registry gone
  "$FIXTURES/registry" stop "$REG_DIR"
  AGSX_PULL=missing run --separate-stderr ax run --rm "$REG/test/bb:1" true
  [ "$status" -eq 0 ] && [ -z "$stderr" ] || { echo "$stderr" >&3; false; }
  # always: asks the registry first, so with it gone the run fails
  run_ax run --rm --pull always "$REG/test/bb:1" true
  assert_status 125
  # build: FROM an image the store lacks is pulled too
  registry
  push "$BB:busybox:latest" test/base:2
  mkdir -p "$T/ctx"
  printf 'FROM %s\nCMD ["echo", "built"]\n' "$REG/test/base:2" >"$T/ctx/Dockerfile"
  run_ax build -q --pull never "$T/ctx"
  assert_agsx_error "no such image"
  AGSX_PULL=missing run_ax build -q -t b:1 "$T/ctx"
  assert_success
  run_ax run --rm b:1
  [ "$output" = built ] || { show_run; false; }
}

@test "gc --images removes partial downloads no pull is resuming" {
  registry
  push "$BB:busybox:latest" test/bb:1
  run_ax pull "$REG/test/bb:1"
  assert_success
  local p=$ROOT/partial/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
  mkdir -p "$ROOT/partial"
  head -c 1000 /dev/urandom >"$p"
  run_ax gc --images --dry-run
  [[ "$output" == *"partial download 0123456789abcdef"* ]] || { show_run; false; }
  [ -f "$p" ]
  # held by a pull (flocked): kept. The lock is held for 10 s from when
  # it is seen taken (10 s at most, however loaded the host), time enough
  # for the gc on a loaded host.
  flock "$p" sleep 10 &
  local i
  for i in $(seq 100); do
    flock -n "$p" true || break
    sleep 0.1
  done
  run_ax gc --images
  [ -f "$p" ]
  wait
  run_ax gc --images
  assert_success
  [ ! -e "$p" ]
  assert_runs "$REG/test/bb:1"
}

# ---- agsx image push ----

@test "image push: skopeo reads what it pushed, a fresh store pulls and runs it" {
  registry
  PX=$("$FIXTURES/registry" proxy "$T/px" --upstream "$REG")
  ax image load "$BB" >/dev/null
  id=$(ax image ls -q)
  run_ax image push busybox:latest "$PX/test/pushed:1"
  assert_success
  [[ "${lines[0]}" =~ ^Digest:\ sha256:${id}[0-9a-f]{52}$ ]] || { show_run; false; }
  [ "${lines[1]}" = "$PX/test/pushed:1" ] || { show_run; false; }
  pushed=${lines[0]#Digest: }
  # each blob: HEAD (absent), POST, PUT with its digest; then the manifest
  [ "$(grep -c '^HEAD /v2/test/pushed/blobs/' "$T/px/proxy.log")" -eq 3 ] || { cat "$T/px/proxy.log" >&3; false; }
  [ "$(grep -c '^POST /v2/test/pushed/blobs/uploads/ ' "$T/px/proxy.log")" -eq 3 ] || { cat "$T/px/proxy.log" >&3; false; }
  [ "$(grep -c '^PUT /v2/test/pushed/blobs/uploads/.*digest=sha256' "$T/px/proxy.log")" -eq 3 ] || { cat "$T/px/proxy.log" >&3; false; }
  grep -q '^PUT /v2/test/pushed/manifests/1 ' "$T/px/proxy.log"
  run skopeo inspect --tls-verify=false "docker://$REG/test/pushed:1"
  [ "$status" -eq 0 ] || { show_run; false; }
  [[ "$output" == *"\"Digest\": \"$pushed\""* ]] || { show_run; false; }
  [[ "$output" == *'"Architecture": "amd64"'* ]] || { show_run; false; }
  # pulled back into a fresh store, it runs
  ROOT=$T/root2 run_ax pull "$REG/test/pushed:1"
  assert_success
  ROOT=$T/root2 assert_runs "$REG/test/pushed:1"
  # again under another tag: the blobs are there, only the manifest goes
  : >"$T/px/proxy.log"
  run_ax --json image push busybox:latest "$PX/test/pushed:2"
  assert_success
  [[ "$output" =~ ^\{\"ref\":\"$PX/test/pushed:2\",\"digest\":\"sha256:$id[0-9a-f]{52}\"\}$ ]] || { show_run; false; }
  none grep -q '^POST' "$T/px/proxy.log"
  # docker push's form (and the alias): an image named after its registry
  # goes there
  ROOT=$T/root2 run_ax push -q "$REG/test/pushed:1"
  assert_success
  [ "$output" = "$REG/test/pushed:1" ] || { show_run; false; }
  # what cannot be pushed
  run_ax image push busybox:latest "$REG/test/x@sha256:$(printf '%064d' 0)"
  assert_agsx_error "names a digest: push to a tag"
  run_ax image push nosuch:1 "$REG/test/x:1"
  assert_agsx_error "push \`nosuch:1\`"
  digest=$(skopeo inspect --tls-verify=false "docker://$REG/test/pushed:1" |
    sed -n 's/^ *"Digest": "\(.*\)",/\1/p')
  ROOT=$T/root3 run_ax pull "$REG/test/pushed@$digest"
  assert_success
  ROOT=$T/root3 run_ax image push "$REG/test/pushed@$digest"
  assert_agsx_error "has no tag to push to: name a destination"
}

@test "image push: basic auth and bearer tokens with push scope" {
  registry --htpasswd alice:s3cret
  ax image load "$BB" >/dev/null
  run_ax image push busybox:latest "$REG/test/bb:1"
  assert_agsx_error "authentication required: no credentials for \`$REG\`"
  printf '{"auths":{"%s":{"auth":"%s"}}}' "$REG" "$(printf alice:s3cret | base64)" >"$T/a.json"
  run_ax image push --authfile "$T/a.json" busybox:latest "$REG/test/bb:1"
  assert_success
  run skopeo inspect --tls-verify=false --creds alice:s3cret "docker://$REG/test/bb:1"
  [ "$status" -eq 0 ] || { show_run; false; }
  "$FIXTURES/registry" stop "$REG_DIR"
  # a token server: the token asked for covers push
  REG_DIR=$T/reg2 registry
  PX=$("$FIXTURES/registry" proxy "$T/px" --upstream "$REG" --bearer)
  run_ax image push busybox:latest "$PX/test/bb:2"
  assert_success
  grep -q '^GET /token?scope=repository%3Atest%2Fbb%3Apull%2Cpush&service=test-registry ' \
    "$T/px/proxy.log" || { cat "$T/px/proxy.log" >&3; false; }
  grep -q '^PUT /v2/test/bb/blobs/uploads/.* auth=Bearer' "$T/px/proxy.log"
  grep -q '^PUT /v2/test/bb/manifests/2 .*auth=Bearer' "$T/px/proxy.log"
  none grep -q '^PUT .*auth=none' "$T/px/proxy.log"
  ROOT=$T/root2 run_ax pull "$PX/test/bb:2"
  assert_success
}

@test "image push: an upload Location on another origin gets no credentials" {
  registry
  ax image load "$BB" >/dev/null
  # the registry (a token server in front) sends uploads to a second server
  PX2=$("$FIXTURES/registry" proxy "$T/px2" --upstream "$REG")
  PX=$("$FIXTURES/registry" proxy "$T/px" --upstream "$REG" --bearer --uploads-to "$PX2")
  run_ax image push busybox:latest "$PX/test/bb:1"
  assert_success
  [ "$(grep -c '^PUT /v2/test/bb/blobs/uploads/' "$T/px2/proxy.log")" -eq 3 ] || { cat "$T/px2/proxy.log" >&3; false; }
  none grep -q 'auth=Bearer' "$T/px2/proxy.log"
  grep -q '^PUT /v2/test/bb/manifests/1 .*auth=Bearer' "$T/px/proxy.log"
}

@test "image push: https with certs.d, plain http only with --insecure" {
  make_certs
  ax image load "$BB" >/dev/null
  REG=$("$FIXTURES/registry" start "$T/tls" --addr 127.0.0.2 --tls "$T/tls/srv.crt" "$T/tls/srv.key")
  run_ax image push busybox:latest "$REG/test/bb:1"
  assert_agsx_error "certificate"
  mkdir -p "$T/certs/$REG"
  cp "$T/tls/ca.crt" "$T/certs/$REG/ca.crt"
  AGSX_CERTS_DIR=$T/certs run_ax image push busybox:latest "$REG/test/bb:1"
  assert_success
  run skopeo inspect --cert-dir "$T/certs/$REG" "docker://$REG/test/bb:1"
  [ "$status" -eq 0 ] || { show_run; false; }
  # plain http on a name that is not implicitly insecure
  registry --addr 127.0.0.2
  run_ax image push busybox:latest "$REG/test/bb:1"
  assert_agsx_error "a plain http registry needs --insecure"
  run_ax image push --insecure busybox:latest "$REG/test/bb:1"
  assert_success
  run skopeo inspect --tls-verify=false "docker://$REG/test/bb:1"
  [ "$status" -eq 0 ] || { show_run; false; }
}
