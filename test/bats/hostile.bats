#!/usr/bin/env bats
# test-runner: parallel
# Hostile layers through `agsx image load`: every case either is refused
# (exit 125, nothing added to the store) or is neutralised inside the layer
# directory; nothing outside the store is ever created or changed.

load helpers

setup() {
  common_setup
  CANARY=$T/canary
  mkdir -p "$CANARY"
  echo canary >"$CANARY/file"
  PASSWD_SUM=$(sha256sum /etc/passwd)
}

teardown() {
  # the host is untouched whatever the case was
  [ "$(cat "$CANARY/file")" = canary ]
  [ "$(ls "$CANARY")" = file ]
  [ "$(sha256sum /etc/passwd)" = "$PASSWD_SUM" ]
  [ ! -e /tmp/agsx-hostile-escape ]
  common_teardown
}

# layer NAME PYTHON-BODY: writes $T/NAME.tar with python's tarfile; the body
# gets `t` (the TarFile), `add(name, data=b"", **attrs)` and the canary path.
layer() {
  local name=$1 body=$2
  python3 - "$T/$name.tar" "$CANARY" <<PY
import io, sys, tarfile
out, canary = sys.argv[1], sys.argv[2]
t = tarfile.open(out, "w", format=tarfile.PAX_FORMAT)
def add(name, data=b"", **kw):
    ti = tarfile.TarInfo(name)
    for k, v in kw.items():
        setattr(ti, k, v)
    if ti.type == tarfile.REGTYPE:
        ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))
    else:
        t.addfile(ti)
$body
t.close()
PY
  "$FIXTURES/mkimage" --ref "hostile:$name" "$T/$name" "$T/$name.tar" >/dev/null
}

refused() { # refused NAME WHY
  # a store with something in it, which a refused load must leave as it is
  if [ ! -e "$ROOT/index.json" ]; then
    mkdir -p "$T/base" && echo base >"$T/base/f"
    "$FIXTURES/mkimage" --ref base:1 "$T/baseimg" "$T/base" >/dev/null
    ax image load "$T/baseimg" >/dev/null
  fi
  local before
  before=$(store_snapshot)
  run_ax image load "$T/$1"
  assert_agsx_error "$2"
  [ "$(store_snapshot)" = "$before" ] || { echo "# the store changed" >&3; false; }
}

# The unpacked layer directory of image hostile:NAME (its only layer).
layer_dir() {
  local d
  d=$(ax image inspect "hostile:$1" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["config"]["rootfs"]["diff_ids"][-1][7:])')
  echo "$ROOT/layers/$d"
}

@test "a ../ path is refused" {
  layer up 'add("../../../../tmp/agsx-hostile-escape", b"x")'
  refused up "\`..\`"
}

@test "an absolute path is neutralised into the layer" {
  layer abs 'add("/tmp/agsx-hostile-escape", b"x")'
  run_ax image load "$T/abs"
  assert_success
  [ -f "$(layer_dir abs)/tmp/agsx-hostile-escape" ]
}

@test "writing through a symlink to / stays in the layer" {
  layer link "add(\"evil\", type=tarfile.SYMTYPE, linkname=\"/\")
add(\"evil\" + canary + \"/file\", b\"pwned\")
add(\"evil/tmp/agsx-hostile-escape\", b\"x\")"
  run_ax image load "$T/link"
  # either refused or clamped inside; never outside (teardown checks)
  if [ "$status" -eq 0 ]; then
    [ -f "$(layer_dir link)$CANARY/file" ] || [ -f "$(layer_dir link)/tmp/agsx-hostile-escape" ]
  else
    assert_status 125
  fi
}

@test "writing through a symlink to ../../.. stays in the layer" {
  layer uplink 'add("up", type=tarfile.SYMTYPE, linkname="../../../../../../..")
add("up/tmp/agsx-hostile-escape", b"x")'
  run_ax image load "$T/uplink"
  [ "$status" -eq 0 ] || assert_status 125
}

@test "a symlink in a lower layer does not redirect an upper layer's writes" {
  layer lower 'add("etc", type=tarfile.SYMTYPE, linkname="/etc")'
  layer upper 'add("etc/passwd", b"root::0:0::/:/bin/sh\n")'
  "$FIXTURES/mkimage" --ref hostile:two "$T/two" "$T/lower.tar" "$T/upper.tar" >/dev/null
  run_ax image load "$T/two"
  assert_success
  # each layer is unpacked on its own; the host's /etc is untouched (teardown)
}

@test "hardlinks to paths outside are refused" {
  layer hl1 'add("pw", type=tarfile.LNKTYPE, linkname="../../etc/passwd")'
  refused hl1 "\`..\`"
  layer hl2 'add("pw", type=tarfile.LNKTYPE, linkname="/etc/passwd")'
  refused hl2 "hardlink target"
}

@test "device nodes are skipped, the rest unpacks" {
  layer dev 'add("dev/sda", type=tarfile.BLKTYPE, devmajor=8, devminor=0)
add("dev/mem", type=tarfile.CHRTYPE, devmajor=1, devminor=1)
add("ok", b"fine")'
  run_ax image load "$T/dev"
  assert_success
  [ -f "$(layer_dir dev)/ok" ]
  [ ! -e "$(layer_dir dev)/dev/sda" ]
  [ ! -e "$(layer_dir dev)/dev/mem" ]
}

@test "a decompression bomb is refused at the size limit" {
  python3 - "$T/bomb.tar" <<'PY'
import io, sys, tarfile
t = tarfile.open(sys.argv[1], "w")
ti = tarfile.TarInfo("zeros"); ti.size = 64 << 20
t.addfile(ti, io.BytesIO(bytes(ti.size)))
t.close()
PY
  gzip -9 "$T/bomb.tar"
  "$FIXTURES/mkimage" --ref hostile:bomb "$T/bomb" "$T/bomb.tar.gz" >/dev/null
  [ "$(stat -c %s "$T/bomb.tar.gz")" -lt 200000 ]
  export AGSX_MAX_LAYER_SIZE=8m
  refused bomb "limit"
}

@test "absurd path depth and name length are refused" {
  layer deep 'add("/".join(["d"] * 300) + "/f", b"x")'
  refused deep "deeper"
  layer long 'add("x" * 5000, b"x")'
  refused long "longer"
}

@test "whiteouts become overlay whiteouts; bad whiteout names are refused" {
  layer wh 'add("gone/.wh.file", b"")
add("opaque/.wh..wh..opq", b"")'
  run_ax image load "$T/wh"
  assert_success
  [ "$(stat -c '%F %t:%T' "$(layer_dir wh)/gone/file")" = "character special file 0:0" ]
  python3 -c 'import os,sys; assert os.getxattr(sys.argv[1], "trusted.overlay.opaque") == b"y"' \
    "$(layer_dir wh)/opaque"
  layer badwh 'add(".wh..wh.evil", b"")'
  refused badwh "whiteout"
}

@test "trusted.* xattrs from a layer are dropped, user.* kept" {
  python3 - "$T/xa.tar" <<'PY'
import io, sys, tarfile
t = tarfile.open(sys.argv[1], "w", format=tarfile.PAX_FORMAT)
ti = tarfile.TarInfo("f"); ti.size = 1
ti.pax_headers = {"SCHILY.xattr.trusted.overlay.redirect": "/etc", "SCHILY.xattr.user.note": "hi"}
t.addfile(ti, io.BytesIO(b"x"))
t.close()
PY
  "$FIXTURES/mkimage" --ref hostile:xa "$T/xa" "$T/xa.tar" >/dev/null
  run_ax image load "$T/xa"
  assert_success
  python3 - "$(layer_dir xa)/f" <<'PY'
import os, sys
names = os.listxattr(sys.argv[1])
assert "user.note" in names, names
assert not any(n.startswith("trusted.") for n in names), names
PY
}

@test "whiteouts and opaque directories take effect in a sandbox" {
  mkdir -p "$T/lo/keep" "$T/lo/opq" "$T/up"
  echo 1 >"$T/lo/keep/a"; echo 2 >"$T/lo/gone"; echo 3 >"$T/lo/opq/old"
  cp /bin/busybox "$T/lo/busybox"
  layer wo 'add("gone", type=tarfile.REGTYPE)
add(".wh.gone", b"")
add("opq/.wh..wh..opq", b"")
add("opq/new", b"4")'
  # the lower layer from a directory, the upper from the hostile tar above
  python3 - "$T/wo.tar" "$T/wo2.tar" <<'PY'
import sys, tarfile
src = tarfile.open(sys.argv[1]); dst = tarfile.open(sys.argv[2], "w", format=tarfile.PAX_FORMAT)
for m in src.getmembers():
    if m.name != "gone":
        dst.addfile(m, src.extractfile(m) if m.isfile() else None)
dst.close()
PY
  "$FIXTURES/mkimage" --ref hostile:wo2 "$T/wo2img" "$T/lo" "$T/wo2.tar" >/dev/null
  ax image load "$T/wo2img" >/dev/null
  run_ax run --rm hostile:wo2 /busybox sh -c 'ls /; ls /opq; cat /keep/a'
  assert_success
  refute_output_contains "gone"
  refute_output_contains "old"
  assert_output_contains "new"
}

@test "user.overlay.* xattrs from a layer are dropped (the sandbox overlay reads them)" {
  python3 - "$T/uo.tar" <<'PY'
import io, sys, tarfile
t = tarfile.open(sys.argv[1], "w", format=tarfile.PAX_FORMAT)
ti = tarfile.TarInfo("d"); ti.type = tarfile.DIRTYPE
ti.pax_headers = {"SCHILY.xattr.user.overlay.redirect": "/etc", "SCHILY.xattr.user.overlay.opaque": "y"}
t.addfile(ti)
t.close()
PY
  "$FIXTURES/mkimage" --ref hostile:uo "$T/uo" "$T/uo.tar" >/dev/null
  run_ax image load "$T/uo"
  assert_success
  python3 - "$(layer_dir uo)/d" <<'PY'
import os, sys
names = os.listxattr(sys.argv[1])
assert not any(n.startswith("user.overlay.") for n in names), names
PY
}

@test "directories descending through the layer's own symlinks stop at the depth bound" {
  # `l` always points at the deepest directory so far and `l/d/` makes one
  # more level: 5000 real levels from names of two components. Targets are
  # chained through l1, l2, ... to stay under the symlink target limit.
  layer descend 'add("d", type=tarfile.DIRTYPE, mode=0o755)
base, m, k = "d", 0, 0
for i in range(5000):
    if m == 1000:
        k += 1
        add("l%d" % k, type=tarfile.SYMTYPE, linkname=base + "/d" * m)
        base, m = "l%d" % k, 0
    add("l", type=tarfile.SYMTYPE, linkname=base + "/d" * m)
    add("l/d", type=tarfile.DIRTYPE, mode=0o755)
    m += 1'
  refused descend "directory deeper than 256 levels below the layer root"
  # nothing of the partial tree stays in the store (common_teardown checks
  # its tmp too)
  [ -z "$(ls -A "$ROOT/tmp")" ]
}

@test "gc removes a work directory thousands of levels deep" {
  mkdir -p "$T/base" && echo base >"$T/base/f"
  "$FIXTURES/mkimage" --ref base:1 "$T/baseimg" "$T/base" >/dev/null
  ax image load "$T/baseimg" >/dev/null
  # what a layer unpacked by an older agsx could leave: 5000 levels
  python3 - "$ROOT/tmp/unpack-deadbeef0000" <<'PY'
import os, sys
os.mkdir(sys.argv[1])
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
for i in range(5000):
    os.mkdir("d", dir_fd=fd)
    if i % 1000 == 0:
        os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
    nfd = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    os.close(fd)
    fd = nfd
os.close(fd)
PY
  run_ax gc
  assert_success
  [ -z "$(ls -A "$ROOT/tmp")" ] || { echo "# left: $(ls -A "$ROOT/tmp")" >&3; false; }
}

@test "a FIFO in place of a layout's file is refused, never waited on" {
  mkdir -p "$T/src" && echo x >"$T/src/f"
  local blob
  for what in index manifest; do
    rm -rf "$T/fifo-$what"
    "$FIXTURES/mkimage" --ref "hostile:fifo-$what" "$T/fifo-$what" "$T/src" >/dev/null
    if [ $what = index ]; then
      blob=$T/fifo-$what/index.json
    else
      blob=$T/fifo-$what/blobs/sha256/$(python3 -c 'import json,sys
print(json.load(open(sys.argv[1]))["manifests"][0]["digest"][7:])' "$T/fifo-$what/index.json")
    fi
    rm "$blob" && mkfifo "$blob"
    AX_TIMEOUT=20 run_ax image load "$T/fifo-$what"
    assert_agsx_error "not a"
  done
}
