#!/usr/bin/env bats
# test-runner: parallel
# agsx image load / ls / rm / inspect and gc --images: formats, naming,
# platforms, verification, atomicity, concurrency, interoperability.

load helpers

setup_file() { busybox_setup_file; }

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
  [ ! -e /tmp/agsx-evil-escape ]
  [ ! -e /tmp/agsx-evil-abs ]
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

# issue 24 finding 10: an image whose config has no real creation date
# (the Unix epoch that reproducible builds write in its place, as this
# busybox fixture does) showed "56 years ago"; Docker shows N/A.
@test "image ls: N/A (null in --json) for an image with no creation date; a real one shows its age" {
  run_ax image load "$BB"
  assert_success
  "$FIXTURES/busybox-image" "$T/dated" --probe "$PROBE" --ref dated:1 \
    --mtime $(($(date +%s) - 3 * 3600 - 60)) >/dev/null
  run_ax image load "$T/dated"
  assert_success
  run_ax image ls
  assert_success
  [[ "$(grep '^busybox ' <<<"$output")" =~ \ N/A\ +[0-9.]+[kMG]?B$ ]] || { show_run; false; }
  [[ "$(grep '^dated ' <<<"$output")" == *" 3 hours ago "* ]] || { show_run; false; }
  refute_output_contains "years ago"
  run_ax image ls --json
  assert_success
  python3 -c '
import json, sys
v = {i["name"]: i for i in json.loads(sys.argv[1])}
assert v["busybox"]["created"] is None, v
assert v["dated"]["created"].endswith("Z") and not v["dated"]["created"].startswith("1970"), v
' "$output" || { show_run; false; }
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
  [ -z "$(ls -A "$ROOT/layers")" ]
  [ -z "$(ls -A "$ROOT/blobs/sha256")" ]
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

# ---- image tag, image save, image load - ----

# The manifest digest of IMAGE in the store ROOT.
digest_of() { # digest_of IMAGE
  ax image inspect "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["digest"])'
}

@test "image tag: another name for the image, normalised; re-tagging moves the name" {
  run_ax image load "$BB"
  bb=$(digest_of busybox)
  run_ax image tag busybox mine/box:1
  assert_success
  [ -z "$output" ] || { show_run; false; }
  # the source and the target as Docker spells them; by id too
  run_ax image tag docker.io/library/busybox:latest docker.io/library/norm
  assert_success
  run_ax image tag "${bb#sha256:}" byid:2
  assert_success
  for r in mine/box:1 norm:latest byid:2; do [ "$(digest_of "$r")" = "$bb" ]; done
  # the new name runs
  run_ax run mine/box:1 echo tagged-ok
  assert_success
  assert_output_contains "tagged-ok"
  # a name in use moves to the new image; the old image keeps its other names
  mkdir -p "$T/e" && echo other >"$T/e/other"
  "$FIXTURES/mkimage" --ref other:1 "$T/other" "$T/e" >/dev/null
  ax image load "$T/other" >/dev/null
  run_ax image tag other:1 mine/box:1
  assert_success
  [ "$(digest_of mine/box:1)" = "$(digest_of other:1)" ]
  [ "$(digest_of busybox)" = "$bb" ]
  run_ax --json image ls
  [ "$(grep -o '"ref":"mine/box:1"' <<<"$output" | wc -l)" -eq 1 ] || { show_run; false; }
}

@test "image tag: unknown sources and bad targets are errors that change nothing" {
  run_ax image load "$BB"
  before=$(store_snapshot)
  run_ax image tag nosuch:1 x:1
  assert_agsx_error "image \`nosuch:1\` not found"
  run_ax image tag busybox 'Bad Name'
  assert_agsx_error "invalid image reference"
  run_ax image tag busybox "x@sha256:$(printf '0%.0s' {1..64})"
  assert_agsx_error "not a digest"
  run_ax image tag busybox
  assert_agsx_error "expected SOURCE and TARGET"
  [ "$(store_snapshot)" = "$before" ]
  # no store: nothing to tag, and none is created
  run "$AGSX" --root "$T/none" image tag busybox x:1
  assert_agsx_error "not found"
  [ ! -e "$T/none" ]
}

@test "image save: an oci-archive skopeo reads, with the ref annotations; loads back losslessly and runs" {
  run_ax image load "$BB"
  ax image tag busybox mine/box:1
  bb=$(digest_of busybox)
  run_ax image save -o "$T/o.tar" busybox mine/box:1
  assert_success
  [ -z "$output" ] || { show_run; false; }
  python3 - "$T/o.tar" <<'PY'
import json, sys, tarfile
t = tarfile.open(sys.argv[1])
names = t.getnames()
assert "oci-layout" in names and "index.json" in names, names
ix = json.load(t.extractfile("index.json"))
ann = [m["annotations"] for m in ix["manifests"]]
assert [a["org.opencontainers.image.ref.name"] for a in ann] == ["busybox:latest", "mine/box:1"], ann
assert [a["io.containerd.image.name"] for a in ann] == [
    "docker.io/library/busybox:latest", "docker.io/mine/box:1"], ann
assert all(m["platform"] == {"architecture": "amd64", "os": "linux"} for m in ix["manifests"])
# each blob once, every entry 0:0 and dated 0
blobs = [n for n in names if n.startswith("blobs/sha256/")]
assert len(blobs) == len(set(blobs)) == 4, blobs
assert all(m.uid == 0 and m.gid == 0 and m.mtime == 0 for m in t.getmembers())
PY
  run skopeo inspect --insecure-policy "oci-archive:$T/o.tar:mine/box:1"
  [ "$status" -eq 0 ] || { show_run; false; }
  [[ "$output" == *"\"Digest\": \"$bb\""* ]] || { show_run; false; }
  [[ "$output" == *'"Architecture": "amd64"'* ]]
  run skopeo copy --insecure-policy "oci-archive:$T/o.tar:busybox:latest" "oci:$T/copy:x"
  [ "$status" -eq 0 ] || { show_run; false; }
  run skopeo inspect --insecure-policy "oci:$T/copy:x"
  [[ "$output" == *"\"Digest\": \"$bb\""* ]] || { show_run; false; }
  # the same bytes every time
  ax image save busybox mine/box:1 >"$T/o2.tar"
  cmp "$T/o.tar" "$T/o2.tar"
  # a fresh store: the same images, the same ids
  ROOT=$T/r2
  run_ax image load "$T/o.tar"
  assert_success
  assert_output_contains "Loaded image: busybox:latest"
  assert_output_contains "Loaded image: mine/box:1"
  [ "$(digest_of mine/box:1)" = "$bb" ]
  run_ax run mine/box:1 echo saved-ok
  assert_success
  assert_output_contains "saved-ok"
}

@test "image save --format docker-archive: docker save's layout, read by skopeo and loaded back" {
  run_ax image load "$BB"
  ax image tag busybox mine/box:1
  ax image tag busybox "$(printf 'localhost:5000/x/y:2')"
  # to standard output
  ax image save --format docker-archive busybox mine/box:1 localhost:5000/x/y:2 >"$T/d.tar"
  ax image inspect busybox >"$T/inspect.json"
  python3 - "$T/d.tar" "$T/inspect.json" <<'PY'
import hashlib, json, sys, tarfile
t = tarfile.open(sys.argv[1])
img = json.load(open(sys.argv[2]))[0]
m = json.load(t.extractfile("manifest.json"))
assert len(m) == 1, m
e = m[0]
assert e["RepoTags"] == ["busybox:latest", "mine/box:1", "localhost:5000/x/y:2"], e
cfg = t.extractfile(e["Config"]).read()
assert "sha256:" + hashlib.sha256(cfg).hexdigest() == img["manifest"]["config"]["digest"]
# layers uncompressed: each file is its diff_id
diff_ids = json.loads(cfg)["rootfs"]["diff_ids"]
got = ["sha256:" + hashlib.sha256(t.extractfile(p).read()).hexdigest() for p in e["Layers"]]
assert got == diff_ids, (got, diff_ids)
PY
  run skopeo inspect "docker-archive:$T/d.tar:mine/box:1"
  [ "$status" -eq 0 ] || { show_run; false; }
  [[ "$output" == *'"Architecture": "amd64"'* ]] || { show_run; false; }
  run skopeo copy --insecure-policy "docker-archive:$T/d.tar:busybox:latest" "oci:$T/copy:x"
  [ "$status" -eq 0 ] || { show_run; false; }
  ROOT=$T/r2
  run_ax image load "$T/d.tar"
  assert_success
  for r in busybox:latest mine/box:1 localhost:5000/x/y:2; do
    assert_output_contains "Loaded image: $r"
  done
  run_ax run localhost:5000/x/y:2 echo docker-ok
  assert_success
  assert_output_contains "docker-ok"
}

@test "image save: by id unnamed; shared content once; a digest name is no RepoTag" {
  run_ax image load "$BB"
  id=$(ax image ls -q)
  ax image save "$id" >"$T/id.tar"
  ax image save --format docker-archive "$id" busybox busybox >"$T/idd.tar"
  python3 - "$T/id.tar" "$T/idd.tar" <<'PY'
import json, sys, tarfile
ix = json.load(tarfile.open(sys.argv[1]).extractfile("index.json"))
assert len(ix["manifests"]) == 1 and "annotations" not in ix["manifests"][0], ix
t = tarfile.open(sys.argv[2])
m = json.load(t.extractfile("manifest.json"))
assert len(m) == 1 and m[0]["RepoTags"] == ["busybox:latest"], m
assert len(t.getnames()) == len(set(t.getnames())) == 4, t.getnames()
PY
  ROOT=$T/r2
  run_ax image load "$T/id.tar"
  assert_success
  assert_output_contains "Loaded image ID: sha256:"
}

@test "image save: refuses a terminal, unknown images and formats, options after images" {
  run_ax image load "$BB"
  run script -qec "$AGSX --root $ROOT image save busybox" /dev/null
  [ "$status" -eq 125 ] && [[ "$output" == *"refusing to write an image archive to a terminal"* ]] ||
    { show_run; false; }
  mkdir "$T/out"
  run_ax image save -o "$T/out/x.tar" busybox nosuch:1
  assert_agsx_error "image \`nosuch:1\` not found"
  run_ax image save --format zip -o "$T/out/x.tar" busybox
  assert_agsx_error "unknown archive format \`zip\`"
  run_ax image save busybox -o "$T/out/x.tar"
  assert_agsx_error "options go before the images"
  run_ax image save
  assert_agsx_error "expected at least one IMAGE"
  run_ax image save -o /dev/null busybox
  assert_agsx_error "not a regular file"
  [ -c /dev/null ]
  run_ax image save -o "$T/out" busybox
  assert_agsx_error "not a regular file"
  [ -z "$(ls -A "$T/out")" ]
  run "$AGSX" --root "$T/none" image save -o "$T/out/x.tar" busybox
  assert_agsx_error "image \`busybox\` not found"
  [ ! -e "$T/none" ]
  [ -z "$(ls -A "$T/out")" ]
}

@test "image save -o: a failed save leaves the old file and no partial one" {
  run_ax image load "$BB"
  mkdir "$T/out"
  echo old >"$T/out/x.tar"
  # a layer blob the store holds corrupt: the digest check fails at its end
  blob=$(ax image inspect busybox | python3 -c '
import json, sys; print(json.load(sys.stdin)[0]["manifest"]["layers"][-1]["digest"][7:])')
  python3 - "$ROOT/blobs/sha256/$blob" <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 1; open(p, "wb").write(b)
PY
  for fmt in oci-archive docker-archive; do
    run_ax image save --format $fmt -o "$T/out/x.tar" busybox
    assert_status 125
    [[ "$output" == "agsx: "*"sha256:$blob"* ]] || { show_run; false; }
    [ "$(cat "$T/out/x.tar")" = old ]
    [ "$(ls -A "$T/out")" = x.tar ]
  done
}

@test "image save -o: killed mid-way, the file is the old one or complete, never partial" {
  heavy
  mkdir -p "$T/big/data" "$T/out"
  head -c $((64 << 20)) /dev/urandom >"$T/big/data/blob"
  "$FIXTURES/mkimage" --ref big:1 --compression none "$T/bigimg" "$T/big" >/dev/null
  ax image load "$T/bigimg" >/dev/null
  echo old >"$T/out/big.tar"
  "$AGSX" --root "$ROOT" image save -o "$T/out/big.tar" big:1 &
  pid=$!
  # kill it once its unnamed file is open
  seen=0
  for _ in $(seq 1 200); do
    ls -l "/proc/$pid/fd" 2>/dev/null | grep -q "$T/out/.*(deleted)" && { seen=1; break; }
    sleep 0.01
  done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" || true
  [ "$(ls -A "$T/out")" = big.tar ] || { ls -la "$T/out" >&3; false; }
  if [ "$(head -c 3 "$T/out/big.tar")" = old ]; then
    [ "$seen" = 1 ] # killed while it wrote
  else
    # it finished first: then the archive is complete
    skopeo inspect --insecure-policy "oci-archive:$T/out/big.tar:big:1" >/dev/null
  fi
}

# Loads the archive $1 through a pipe (standard input is not seekable).
load_piped() { # load_piped FILE [load options...]
  local f=$1; shift
  AX_CMD="cat $f | agsx image load $* -"
  cat "$f" | ax image load "$@" -
}

@test "image load -: an archive of either format from a pipe" {
  ax image load "$BB" >/dev/null
  ax image save busybox >"$T/o.tar"
  ax image save --format docker-archive busybox | gzip >"$T/d.tar.gz"
  ax image rm busybox >/dev/null
  run load_piped "$T/o.tar"
  assert_success
  [ "$output" = "Loaded image: busybox:latest" ] || { show_run; false; }
  run load_piped "$T/d.tar.gz" -t piped:1
  assert_success
  [ "$output" = "Loaded image: piped:1" ] || { show_run; false; }
  # the alias, from a redirected file
  AX_CMD="agsx load --json - <o.tar"
  run ax load --json - <"$T/o.tar"
  assert_success
  assert_output_contains '"ref":"busybox:latest"'
  run_ax run piped:1 echo stdin-ok
  assert_output_contains "stdin-ok"
}

@test "image load -: bad input is refused with 125 and leaves nothing" {
  ax image load "$BB" >/dev/null
  ax image save busybox >"$T/o.tar"
  before=$(store_snapshot)
  head -c 10000 /dev/urandom >"$T/noise"
  head -c 200000 "$T/o.tar" >"$T/cut.tar"
  # (content of its own: blobs the store has are not read from a source)
  mkdir -p "$T/e" && echo bad >"$T/e/bad"
  "$FIXTURES/mkimage" --corrupt layer-digest --ref bad:1 "$T/bad" "$T/e" >/dev/null
  tar -C "$T/bad" -cf "$T/bad.tar" .
  : >"$T/empty"
  for f in noise cut.tar bad.tar empty; do
    run load_piped "$T/$f"
    assert_agsx_error "load from standard input: "
    [ "$(store_snapshot)" = "$before" ] || { echo "# $f changed the store" >&3; false; }
    [ -z "$(ls -A "$ROOT/tmp")" ]
  done
  run script -qec "$AGSX --root $ROOT image load -" /dev/null
  [ "$status" -eq 125 ] && [[ "$output" == *"refusing to read an image archive from a terminal"* ]] ||
    { show_run; false; }
}

@test "an archive's content is bounded, from a pipe and from a file" {
  ax image load "$BB" >/dev/null
  ax image save --format docker-archive busybox | gzip >"$T/d.tar.gz"
  ax image rm busybox >/dev/null
  before=$(store_snapshot)
  export AGSX_MAX_IMAGE_SIZE=1m
  run load_piped "$T/d.tar.gz"
  assert_agsx_error "more than the image budget"
  run_ax image load "$T/d.tar.gz"
  assert_agsx_error "more than the image budget"
  [ "$(store_snapshot)" = "$before" ]
  unset AGSX_MAX_IMAGE_SIZE
  run_ax image load "$T/d.tar.gz"
  assert_success
}
