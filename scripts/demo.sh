#!/usr/bin/env bash
# make demo: prepare the default image and show agsx working on it.
# Runs after `make` (which installed missing packages and built agsx).
set -euo pipefail
B=${1:?usage: demo.sh BUILDDIR}
top=$(cd "$(dirname "$0")/.." && pwd)
agsx=$B/agsx
# Root's store, or an ordinary user's own (~/.local/share/agsx: agsx(1),
# ROOTLESS); AGSX_ROOT chooses another.
store=()
[ -n "${AGSX_ROOT:-}" ] && store=(--root "$AGSX_ROOT")
if [ "$(id -u)" != 0 ]; then
  echo "demo: as $(id -un), without root: the user's own store and sandboxes (agsx info says where)"
fi

say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
run() { say "$*"; "$@"; }

make --no-print-directory -s -C "$B" test/fixtures/probe
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The default demo image: busybox-static plus agsx's probe, built locally.
"$top/test/fixtures/busybox-image" "$work/busybox" --probe "$B/test/fixtures/probe" >/dev/null

run "$agsx" "${store[@]}" image load "$work/busybox"
run "$agsx" "${store[@]}" image ls
say "$agsx image inspect busybox | head -n 12"
"$agsx" "${store[@]}" image inspect busybox | head -n 12
# A real code sandbox on the default image, `host`: the host's /usr
# read-only, a generated /etc, fresh /tmp and /root, no network.
say "$agsx run --rm host python3 -c '...'"
"$agsx" "${store[@]}" run --rm host python3 -c '
import os, platform, socket
print("hello from a sandbox: Python", platform.python_version())
print("uid", os.getuid(), "in a user namespace; hostname", socket.gethostname())
print("root directory:", sorted(os.listdir("/")))
print("network interfaces:", [n for _, n in socket.if_nameindex()])
'
say "$agsx run --json --rm --timeout 2s host sh -c 'echo working; sleep 10'"
"$agsx" "${store[@]}" run --json --rm --timeout 2s host sh -c 'echo working; sleep 10' || true
say "$agsx run --rm --memory 64m host python3 -c 'bytearray(256 << 20)'"
"$agsx" "${store[@]}" run --rm --memory 64m host python3 -c 'bytearray(256 << 20)' || true
run "$agsx" "${store[@]}" run --rm busybox probe caps
echo
echo "demo: done. Try: $agsx run --rm -it host bash"
