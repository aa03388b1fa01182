#!/usr/bin/env bash
# make demo: prepare the default image and show agsx working on it.
# Runs after `make` (which installed missing packages and built agsx).
set -euo pipefail
B=${1:?usage: demo.sh BUILDDIR}
top=$(cd "$(dirname "$0")/.." && pwd)
agsx=$B/agsx
root=${AGSX_ROOT:-/var/lib/agsx}
if [ "$(id -u)" != 0 ]; then
  root=${AGSX_ROOT:-$B/demo-store}
  echo "demo: not root; using the store $root"
fi

say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
run() { say "$*"; "$@"; }

make --no-print-directory -s -C "$B" test/fixtures/probe
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The default demo image: busybox-static plus agsx's probe, built locally.
"$top/test/fixtures/busybox-image" "$work/busybox" --probe "$B/test/fixtures/probe" >/dev/null

run "$agsx" --root "$root" image load "$work/busybox"
run "$agsx" --root "$root" image ls
say "$agsx --root $root image inspect busybox | head -n 12"
"$agsx" --root "$root" image inspect busybox | head -n 12
run "$agsx" --root "$root" gc --images --dry-run
say "$agsx run --rm busybox echo hello"
"$agsx" --root "$root" run --rm busybox echo hello || true
echo
echo "demo: images load, list and inspect; sandboxes (agsx run) are the next step."
