#!/usr/bin/env bash
# make base-image: builds the e2b-base image (images/base: E2B's `base`
# template shape, user `user` with passwordless sudo) offline from Debian's
# archive, into the store (AGSX_ROOT, default /var/lib/agsx), where
# `agsx serve` takes it for the `base` template.
#
# The packages go into a debootstrap rootfs (test/fixtures/debian-rootfs,
# cached under AGSX_TEST_CACHE: a few minutes the first time), loaded as
# agsx-base-rootfs:bookworm; `agsx build` then adds the user from
# images/base/Dockerfile, and the intermediate image is removed.
# Needs root (debootstrap, chroot). Usage: base-image.sh BUILDDIR
set -euo pipefail
B=${1:?usage: base-image.sh BUILDDIR}
top=$(cd "$(dirname "$0")/.." && pwd)
agsx=$B/agsx
pkgs=ca-certificates,curl,git,python3-pip,sudo
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
DEBIAN_ROOTFS_EXTRA=$pkgs "$top/test/fixtures/debian-rootfs" --oci "$work/rootfs" \
  --ref agsx-base-rootfs:bookworm >/dev/null
"$agsx" image load "$work/rootfs" >/dev/null
"$agsx" build -t e2b-base --build-arg BASE=agsx-base-rootfs:bookworm "$top/images/base"
"$agsx" image rm agsx-base-rootfs:bookworm >/dev/null
echo "base-image: e2b-base is built; agsx serve's base template uses it"
