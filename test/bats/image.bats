#!/usr/bin/env bats
# agsx image load / ls / rm / inspect and gc --images: formats, naming,
# platforms, verification, atomicity, concurrency, interoperability.

load helpers

setup_file() {
  export BB="$BATS_FILE_TMPDIR/bb"
  "$FIXTURES/busybox-image" "$BB" --probe "$PROBE" >/dev/null
}

setup() { common_setup; }
teardown() {
  if mountpoint -q "$T/small" 2>/dev/null; then umount "$T/small"; fi
  common_teardown
}

mk() { # mk OUT [busybox-image options...]
  local out=$1; shift
  "$FIXTURES/busybox-image" "$out" --probe "$PROBE" "$@" >/dev/null
}

@test "load an OCI layout: listed with name, tag, id, size" {
  run_ax image load "$BB"
  assert_success
  [ "$output" = "Loaded image: busybox:latest" ] || { show_run; false; }
  run_ax image ls
  assert_success
  assert_output_contains "REPOSITORY"
  [[ "$output" =~ busybox\ +latest\ +[0-9a-f]{12}\ .*MB ]] || { show_run; false; }
  # the layers are unpacked, one directory per diff_id
  [ "$(ls "$ROOT/layers" | wc -l)" -eq 2 ]
  [ -x "$ROOT/layers/$(ls "$ROOT/layers" | head -1)/bin/busybox" ] ||
    [ -x "$ROOT/layers/$(ls "$ROOT/layers" | tail -1)/bin/busybox" ]
}

@test "the store is an OCI layout skopeo and umoci read" {
  run_ax image load "$BB"
  assert_success
  run skopeo inspect --insecure-policy "oci:$ROOT:busybox:latest"
  [ "$status" -eq 0 ] || { show_run; false; }
  [[ "$output" == *'"Architecture": "amd64"'* ]]
  run umoci stat --image "$ROOT:busybox:latest"
  [ "$status" -eq 0 ] || { show_run; false; }
  run umoci ls --layout "$ROOT"
  [ "$output" = "busybox:latest" ]
}

@test "load an oci-archive and a docker-archive, plain and gzip-compressed" {
  mk "$T/o.tar" --format oci-archive --ref oa:1
  mk "$T/d.tar" --format docker-archive --ref da:1
  gzip -c "$T/d.tar" >"$T/d.tar.gz"
  run_ax image load "$T/o.tar"
  assert_success
  assert_output_contains "Loaded image: oa:1"
  run_ax image load "$T/d.tar"
  assert_success
  assert_output_contains "Loaded image: da:1"
  run_ax image load -t dz:2 "$T/d.tar.gz"
  assert_success
  assert_output_contains "Loaded image: dz:2"
  run_ax --json image ls
  assert_success
  for r in oa:1 da:1 dz:2; do assert_output_contains "\"ref\":\"$r\""; done
  # the docker-archive's layers are the same content as the OCI ones
  run_ax image load "$BB"
  [ "$(ls "$ROOT/layers" | wc -l)" -eq 2 ]
}

@test "load uncompressed and zstd layers" {
  mk "$T/plain" --compression none --ref plain:1
  run_ax image load "$T/plain"
  assert_success
  if command -v zstd >/dev/null; then
    mk "$T/zst" --compression zstd --ref zst:1
    run_ax image load "$T/zst"
    assert_success
  fi
  run_ax image ls -q
  [ "$(echo "$output" | wc -l)" -ge 1 ]
}

@test "--tag names the image; a source with several images refuses it" {
  run_ax image load -t mine/box:v1 "$BB"
  assert_success
  assert_output_contains "Loaded image: mine/box:v1"
  cp -r "$BB" "$T/two"
  "$FIXTURES/mkimage" --ref other:1 "$T/two" "$FIXTURES" >/dev/null
  run_ax image load -t x:1 "$T/two"
  assert_agsx_error "one image"
  run_ax image load -t 'Bad Name' "$BB"
  assert_agsx_error "invalid image reference"
}

@test "multi-platform index: linux/amd64 is picked" {
  mk "$T/multi" --multi linux/arm64,linux/amd64,linux/s390x --ref multi:1
  run_ax image load "$T/multi"
  assert_success
  run_ax image inspect multi:1
  assert_success
  assert_output_contains '"architecture": "amd64"'
}

@test "only linux/amd64: other platforms are refused, nothing left" {
  # a store with something unrelated in it; refused loads leave it as it is
  # (blobs the store already has are not read again from a source)
  mkdir -p "$T/e" && echo base >"$T/e/base"
  "$FIXTURES/mkimage" --ref base:1 "$T/base" "$T/e" >/dev/null
  ax image load "$T/base" >/dev/null
  before=$(store_snapshot)
  mk "$T/arm" --platform linux/arm64 --ref arm:1
  run_ax image load "$T/arm"
  assert_agsx_error "linux/arm64"
  assert_output_contains "only linux/amd64"
  mk "$T/marm" --multi linux/arm64,linux/ppc64le --ref marm:1
  run_ax image load "$T/marm"
  assert_agsx_error "no linux/amd64 image"
  [ "$(store_snapshot)" = "$before" ]
}

@test "corrupt sources are refused with exit 125 and leave nothing" {
  # a store with something unrelated in it; refused loads leave it as it is
  # (blobs the store already has are not read again from a source)
  mkdir -p "$T/e" && echo base >"$T/e/base"
  "$FIXTURES/mkimage" --ref base:1 "$T/base" "$T/e" >/dev/null
  ax image load "$T/base" >/dev/null
  before=$(store_snapshot)
  for kind in layer-digest config-digest truncate-layer bad-gzip bad-mediatype huge-json \
      diffid-mismatch missing-blob; do
    mk "$T/bad-$kind" --corrupt "$kind" --ref "bad:$kind"
    run_ax image load "$T/bad-$kind"
    assert_status 125
    [[ "$output" == "agsx: load "* ]] || { echo "# kind $kind" >&3; show_run; false; }
    [ "$(store_snapshot)" = "$before" ] || { echo "# $kind changed the store" >&3; false; }
  done
  for kind in config-digest truncate-layer diffid-mismatch missing-blob; do
    mk "$T/badd-$kind.tar" --format docker-archive --corrupt "$kind" --ref "badd:$kind"
    run_ax image load "$T/badd-$kind.tar"
    assert_status 125
    [ "$(store_snapshot)" = "$before" ] || { echo "# docker $kind changed the store" >&3; false; }
  done
}

@test "corrupt archives and non-images are refused" {
  head -c 10000 /dev/urandom >"$T/noise.tar"
  run_ax image load "$T/noise.tar"
  assert_agsx_error "not a valid tar archive"
  mk "$T/o.tar" --format oci-archive
  head -c 20000 "$T/o.tar" >"$T/cut.tar"
  run_ax image load "$T/cut.tar"
  assert_status 125
  mkdir "$T/empty"
  run_ax image load "$T/empty"
  assert_agsx_error "not an OCI image layout or docker-archive"
  run_ax image load "$T/missing"
  assert_agsx_error "No such file or directory"
  run_ax image load
  assert_agsx_error "expected one PATH"
}

@test "hostile archive paths cannot escape the work directory" {
  python3 - "$T/evil.tar" <<'PY'
import io, sys, tarfile
with tarfile.open(sys.argv[1], "w") as t:
    for name in ["../../../../tmp/agsx-evil-escape", "/tmp/agsx-evil-abs"]:
        data = b"x"
        ti = tarfile.TarInfo(name); ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))
PY
  run_ax image load "$T/evil.tar"
  assert_agsx_error "unsafe"
  [ ! -e /tmp/agsx-evil-escape ] && [ ! -e /tmp/agsx-evil-abs ]
  python3 - "$T/evil2.tar" <<'PY'
import io, sys, tarfile
with tarfile.open(sys.argv[1], "w") as t:
    ti = tarfile.TarInfo("blobs"); ti.type = tarfile.SYMTYPE; ti.linkname = "/tmp"
    t.addfile(ti)
    data = b"x"
    ti = tarfile.TarInfo("blobs/agsx-evil-link"); ti.size = 1
    t.addfile(ti, io.BytesIO(data))
PY
  run_ax image load "$T/evil2.tar"
  assert_status 125
  [ ! -e /tmp/agsx-evil-link ]
}

@test "image rm by name, by id; unreferenced content goes with it" {
  run_ax image load "$BB"
  run_ax image load -t copy:1 "$BB"
  nblobs=$(ls "$ROOT/blobs/sha256" | wc -l)
  run_ax image rm busybox
  assert_success
  assert_output_contains "Untagged: busybox"
  # the content is still used by copy:1
  [ "$(ls "$ROOT/blobs/sha256" | wc -l)" -eq "$nblobs" ]
  [ "$(ls "$ROOT/layers" | wc -l)" -eq 2 ]
  id=$(ax image ls -q | head -1)
  run_ax image rm "$id"
  assert_success
  [ "$(ls "$ROOT/blobs/sha256" | wc -l)" -eq 0 ]
  [ "$(ls "$ROOT/layers" | wc -l)" -eq 0 ]
  run_ax --json image ls
  [ "$output" = "[]" ]
  run_ax image rm nosuch:1
  assert_agsx_error "image \`nosuch:1\` not found"
}

@test "image ls --json and image inspect are valid, documented JSON" {
  run_ax image load "$BB"
  run_ax image ls --json
  assert_success
  echo "$output" | python3 -c '
import json, sys
v = json.load(sys.stdin)
assert isinstance(v, list) and len(v) == 1, v
i = v[0]
for k in ("ref", "name", "tag", "id", "digest", "size", "created"):
    assert k in i, k
assert i["ref"] == "busybox:latest" and i["name"] == "busybox" and i["tag"] == "latest"
assert i["digest"] == "sha256:" + i["id"] and i["size"] > 0
'
  run_ax image inspect busybox
  assert_success
  echo "$output" | python3 -c '
import json, sys
v = json.load(sys.stdin)
assert v[0]["config"]["architecture"] == "amd64"
assert v[0]["manifest"]["schemaVersion"] == 2
assert v[0]["config"]["config"]["Cmd"] == ["/bin/sh"]
'
  run_ax image inspect nosuch
  assert_agsx_error "not found"
}

@test "unnamed images are listed as <none> and removable by id" {
  python3 - "$BB/index.json" "$T/un" <<'PY'
import json, shutil, sys
src = sys.argv[1].rsplit("/", 1)[0]
shutil.copytree(src, sys.argv[2])
p = sys.argv[2] + "/index.json"
ix = json.load(open(p))
for m in ix["manifests"]:
    m.pop("annotations", None)
json.dump(ix, open(p, "w"))
PY
  run_ax image load "$T/un"
  assert_success
  assert_output_contains "Loaded image ID: sha256:"
  run_ax image ls
  assert_output_contains "<none>"
  id=$(ax image ls -q)
  run_ax image rm "$id"
  assert_success
  [ "$(ax --json image ls)" = "[]" ]
}

@test "concurrent loads never corrupt the store" {
  heavy
  for i in $(seq 1 8); do
    ax image load -t "par:$i" "$BB" >"$T/out.$i" 2>&1 &
  done
  wait
  for i in $(seq 1 8); do grep -q "Loaded image: par:$i" "$T/out.$i" || { cat "$T/out.$i"; false; }; done
  run_ax --json image ls
  python3 -c 'import json,sys; v=json.load(sys.stdin); assert len(v)==8, len(v)' <<<"$output"
  python3 -c 'import json; json.load(open("'"$ROOT"'/index.json"))'
  [ "$(ls "$ROOT/layers" | wc -l)" -eq 2 ]
}

@test "an interrupted load lists nothing, and its leftovers are cleaned" {
  heavy
  mkdir -p "$T/big/data"
  head -c $((96 << 20)) /dev/urandom >"$T/big/data/blob"
  "$FIXTURES/mkimage" --ref big:1 --compression none "$T/bigimg" "$T/big" >/dev/null
  # agsx itself, not a wrapper, is what gets killed
  "$AGSX" --root "$ROOT" image load "$T/bigimg" &
  pid=$!
  # kill it while it copies or unpacks
  for _ in $(seq 1 100); do
    [ -n "$(ls -A "$ROOT/tmp" 2>/dev/null)" ] && break
    sleep 0.02
  done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" || true
  run_ax --json image ls
  [ "$output" = "[]" ] || { show_run; false; }
  # gc removes the dead load's work directory; nothing is left
  run_ax gc
  assert_success
  [ -z "$(ls -A "$ROOT/tmp")" ]
  [ -z "$(ls -A "$ROOT/blobs/sha256")" ]
  run_ax image load "$T/bigimg"
  assert_success
}

@test "gc --images removes unreferenced content; --dry-run removes nothing" {
  run_ax image load "$BB"
  # orphan content: drop the ref by hand, as a crash between writes could
  echo '{"schemaVersion":2,"manifests":[]}' >"$ROOT/index.json"
  run_ax gc --images --dry-run
  assert_success
  assert_output_contains "would remove blob sha256:"
  assert_output_contains "would remove layer sha256:"
  [ "$(ls "$ROOT/layers" | wc -l)" -eq 2 ]
  run_ax gc --images --json
  assert_success
  python3 -c 'import json,sys; v=json.load(sys.stdin); assert len(v)>=5, v' <<<"$output"
  [ -z "$(ls -A "$ROOT/layers")" ] && [ -z "$(ls -A "$ROOT/blobs/sha256")" ]
}

@test "images made by umoci and skopeo load" {
  "$FIXTURES/interop-images" "$T/interop" >/dev/null 2>&1 || skip "interop-images failed to build (see fixture)"
  for f in "$T"/interop/*; do
    case $f in
      *umoci) run_ax image load -t umoci:1 "$f" ;;
      *.tar) run_ax image load "$f" ;;
      *) continue ;;
    esac
    assert_success
  done
  run_ax image ls
  assert_output_contains "umoci"
}

first_diff_id() { # first_diff_id LAYOUT: the diff_id of its image's first layer
  python3 -c 'import json,sys
d = sys.argv[1]
blob = lambda dg: json.load(open(d + "/blobs/sha256/" + dg.split(":")[1]))
m = blob(json.load(open(d + "/index.json"))["manifests"][0]["digest"])
print(blob(m["config"]["digest"])["rootfs"]["diff_ids"][0])' "$1"
}

first_layer_blob() { # first_layer_blob LAYOUT: the digest of its first layer blob
  python3 -c 'import json,sys
d = sys.argv[1]
blob = lambda dg: json.load(open(d + "/blobs/sha256/" + dg.split(":")[1]))
print(blob(json.load(open(d + "/index.json"))["manifests"][0]["digest"])["layers"][0]["digest"])' "$1"
}

@test "a known diff_id paired with another blob is refused; an honest blob is checked once" {
  mkdir -p "$T/a" "$T/b" && echo good >"$T/a/f" && echo evil >"$T/b/f"
  "$FIXTURES/mkimage" --ref a:1 "$T/la" "$T/a" >/dev/null
  ax image load "$T/la" >/dev/null
  diff=$(first_diff_id "$T/la")
  [ -f "$ROOT/verified/$(first_layer_blob "$T/la" | cut -d: -f2)" ]
  before=$(store_snapshot)
  # b's blob holds "evil", its config claims a's diff_id (already unpacked)
  "$FIXTURES/mkimage" --ref b:1 --diff-id "$diff" "$T/lb" "$T/b" >/dev/null
  run_ax image load "$T/lb"
  assert_agsx_error "uncompressed content has digest"
  [ "$(store_snapshot)" = "$before" ] || { echo "# the store changed" >&3; false; }
  "$FIXTURES/mkimage" --ref bd:1 --diff-id "$diff" --format docker-archive "$T/lb.tar" "$T/b" \
    >/dev/null
  run_ax image load "$T/lb.tar"
  assert_agsx_error "uncompressed content has digest"
  [ "$(store_snapshot)" = "$before" ] || { echo "# the store changed" >&3; false; }
  # the same layer in another blob (uncompressed): checked, recorded, loaded
  "$FIXTURES/mkimage" --ref c:1 --compression none "$T/lc" "$T/a" >/dev/null
  [ "$(first_diff_id "$T/lc")" = "$diff" ]
  run_ax image load "$T/lc"
  assert_success
  rec=$ROOT/verified/$(first_layer_blob "$T/lc" | cut -d: -f2)
  grep -q "^$diff " "$rec"
  # another image with that blob is not checked again (the record is not
  # rewritten)...
  echo '{"Env":["X=1"]}' >"$T/env.json"
  "$FIXTURES/mkimage" --ref c:2 --compression none --config-json "$T/env.json" "$T/lc2" "$T/a" \
    >/dev/null
  ino=$(stat -c %i "$rec")
  run_ax image load "$T/lc2"
  assert_success
  [ "$(stat -c %i "$rec")" = "$ino" ]
  # ...and the record goes with its blob
  run_ax image rm c:1 c:2
  [ ! -e "$rec" ]
}

@test "an image's unpacked size is bounded by its budget; unpacking stops short of the reserve" {
  mkdir -p "$T/z" && head -c $((48 << 20)) /dev/zero >"$T/z/zeros"
  "$FIXTURES/mkimage" --ref z:1 "$T/lz" "$T/z" >/dev/null
  # 48 MiB of zeros in a blob of some KiB: over an 8 MiB image budget
  AGSX_MAX_IMAGE_SIZE=8m run_ax image load "$T/lz"
  assert_agsx_error "exceeds the remaining limit of"
  run_ax image ls -q
  [ -z "$output" ] || { show_run; false; }
  # a compressed archive is bounded as it is extracted (48 MiB uncompressed
  # blob, some KiB of gzip)
  "$FIXTURES/mkimage" --ref z:2 --compression none --format oci-archive "$T/lz.tar" "$T/z" \
    >/dev/null
  gzip -9 "$T/lz.tar"
  [ "$(stat -c %s "$T/lz.tar.gz")" -lt $((1 << 20)) ]
  AGSX_MAX_IMAGE_SIZE=8m run_ax image load "$T/lz.tar.gz"
  assert_agsx_error "the archive holds more than the image budget of 8.39MB"
  [ -z "$(ls -A "$ROOT/tmp")" ] || { ls -R "$ROOT/tmp" >&3; false; }
  # a store on a 64 MiB filesystem keeping 24 MiB free: the layer would fit,
  # the reserve would not be kept
  mkdir -p "$T/small"
  mount -t tmpfs -o size=64m agsx-test "$T/small"
  ROOT=$T/small/root
  AGSX_STORE_RESERVE=24m run_ax image load "$T/lz"
  assert_agsx_error "the image store is running out of space"
  [ -z "$(ls -A "$ROOT/layers")" ] && [ -z "$(ls -A "$ROOT/tmp")" ] || { ls -R "$ROOT" >&3; false; }
  # the default reserve (1 GiB) is more than this filesystem has
  run_ax image load "$T/lz"
  assert_agsx_error "not enough space in the image store"
  AGSX_STORE_RESERVE=1m run_ax image load "$T/lz"
  assert_success
  rm -rf "$ROOT"
  umount "$T/small"
  ROOT=$T/root
}
