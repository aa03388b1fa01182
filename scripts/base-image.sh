#!/usr/bin/env bash
# make base-image, make desktop-image: builds the e2b-base image
# (images/base: E2B's `base` template shape, user `user` with passwordless
# sudo) or the e2b-desktop image (images/desktop: E2B's `desktop` shape,
# Xfce on Xvfb, for @e2b/desktop) offline from Debian's archive, into the
# store (AGSX_ROOT, default /var/lib/agsx), where `agsx serve` takes it for
# the `base` or `desktop` template.
#
# The packages go into a debootstrap rootfs (test/fixtures/debian-rootfs,
# cached under AGSX_TEST_CACHE: a few minutes the first time, more for the
# desktop), loaded as agsx-KIND-rootfs:bookworm; `agsx build` then adds the
# user from images/KIND/Dockerfile, and the intermediate image is removed.
# Needs root (debootstrap, chroot). Usage: base-image.sh BUILDDIR [base|desktop]
set -euo pipefail
B=${1:?usage: base-image.sh BUILDDIR [base|desktop]}
kind=${2:-base}
top=$(cd "$(dirname "$0")/.." && pwd)
agsx=$B/agsx
case $kind in
  base) pkgs=ca-certificates,curl,git,python3-pip,python-is-python3,sudo ;;
  # the recipe's own list: the offline image has what the Dockerfile installs
  desktop) pkgs=$("$top/test/fixtures/debian-rootfs" --packages-of "$top/images/desktop/Dockerfile") ;;
  *) echo "usage: base-image.sh BUILDDIR [base|desktop]" >&2; exit 2 ;;
esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
DEBIAN_ROOTFS_EXTRA=$pkgs "$top/test/fixtures/debian-rootfs" --oci "$work/rootfs" \
  --ref "agsx-$kind-rootfs:bookworm" >/dev/null
"$agsx" image load "$work/rootfs" >/dev/null
"$agsx" build -t "e2b-$kind" --build-arg "BASE=agsx-$kind-rootfs:bookworm" "$top/images/$kind"
"$agsx" image rm "agsx-$kind-rootfs:bookworm" >/dev/null
echo "base-image: e2b-$kind is built; agsx serve's $kind template uses it"
