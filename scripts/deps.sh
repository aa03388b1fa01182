#!/usr/bin/env bash
# Installs the Debian packages agsx needs, if any are missing: to build it
# and run `make demo` by default; with --test (make check, check-quick,
# check-hosts, format-check) also every tool the tests, fuzzing and
# benchmarks use. As root it runs apt-get; otherwise it prints the exact
# command.
set -euo pipefail
test_too=0
browser=0
for a in "$@"; do
  case $a in
    --test) test_too=1 ;;
    --browser) test_too=1 browser=1 ;;
    *) echo "usage: deps.sh [--test] [--browser]" >&2; exit 2 ;;
  esac
done

# build: toolchain and the libraries of configure.ac
pkgs=(autoconf automake libtool pkg-config make gcc libc6-dev
      libseccomp-dev libyajl-dev libnl-3-dev libnl-route-3-dev zlib1g-dev
      libarchive-dev libssl-dev libzstd-dev libcurl4-openssl-dev libsystemd-dev)
# agsx serve: the HTTP server library
pkgs+=(libmicrohttpd-dev)
# run time: public and vpc networks load libnftables with dlopen()
pkgs+=(libnftables1)
# pull: libcurl is dlopen()ed at pull time; HTTPS registries need the CAs
pkgs+=(libcurl4 ca-certificates)
# image load/pull/push/build/commit: libcrypto.so.3 is dlopen()ed by the first
# large SHA-256 (OpenSSL's SHA-NI/AVX2 code; without it, slower portable code)
pkgs+=(libssl3)
# an ordinary user's agsx: the setuid newuidmap and newgidmap map the
# user's namespace from /etc/subuid and /etc/subgid (src/host/rootless.h)
pkgs+=(uidmap)
# an ordinary user's public and vpc networks: pasta, the user-mode network
# stack that connects the user's router namespace to the host
# (src/net/usernet.h)
pkgs+=(passt)
# make demo: its busybox image (busybox-static, which file tells is static;
# python3 writes the image) and the host image's python3
pkgs+=(busybox-static file python3)
[ "${AGSX_DEPS_TEST:-0}" = 1 ] && test_too=1
if [ "$test_too" = 1 ]; then
  # tests and fixtures: bats, busybox-static (file tells it is static)
  # and a static libc for the probe, python3, skopeo/umoci for
  # interoperability, debootstrap for the Python rootfs, clang with libFuzzer
  # and the sanitizer runtimes, clang-format for `make format-check`, a
  # registry with htpasswd and openssl for pull.bats, curl for ports.bats and
  # browser.bats, pgrep/ps (procps), man for docs.bats, strace for
  # serve-api.bats and firewall.bats
  pkgs+=(bats busybox-static file skopeo umoci debootstrap clang libclang-rt-14-dev clang-format
         python3 xz-utils zstd docker-registry apache2-utils openssl curl procps man-db strace)
  # network tests build their namespaces with ip, nsenter and unshare, and
  # inspect agsx's rules with nft
  pkgs+=(iproute2 util-linux nftables)
  # code contexts (test/bats/code.bats, bench/code) in the host image: a real
  # IPython kernel and the libraries of a code-interpreter sandbox
  pkgs+=(python3-ipykernel python3-jupyter-client python3-numpy python3-pandas python3-matplotlib)
  # PIL results, typescript and r contexts (test/bats/code-parity.bats)
  pkgs+=(python3-pil node-typescript r-base-core r-cran-irkernel)
  # benchmarks compare with these
  pkgs+=(crun bubblewrap)
  # agsx-oci's engine tests (test/oci): Podman with conmon, containerd,
  # Docker (docker.io: the tests start a private dockerd) with apparmor (its
  # Recommends, as on Debian's default installs: where the kernel enables
  # AppArmor, dockerd refuses containers without apparmor_parser), and runc
  # as the oracle (crun refuses hybrid cgroup layouts)
  pkgs+=(podman conmon containerd docker.io apparmor runc jq)
  # containerd's CRI plugin (test/oci/oci-cri.bats) networks its pods with
  # CNI's bridge, host-local and loopback plugins. (Its CRI client runs on
  # node, which node-typescript brings; its gRPC packages come from npm,
  # test/oci/cri-npm-install, or the file skips.)
  pkgs+=(containernetworking-plugins)
  # the guest lane (test/guest/lane, run by make check): debootstrap (above)
  # builds its image, qemu boots it; not inside that image itself
  if [ "${AGSX_DEPS_GUEST:-0}" != 1 ]; then
    pkgs+=(qemu-system-x86 e2fsprogs)
  fi
  # optional: `agsx browser` with the host image, its tests and bench/browser.
  # Only with --browser (or AGSX_DEPS_BROWSER=1): build and demo never need
  # them; test/bats/browser.bats installs Chromium itself or skips. (Node
  # and npm, for the Playwright/Puppeteer tests, are the user's: any node >= 18.)
  if [ "$browser" = 1 ] || [ "${AGSX_DEPS_BROWSER:-0}" = 1 ]; then
    pkgs+=(chromium fonts-liberation)
    # agsx browser --view: the display, VNC server and noVNC in the sandbox
    pkgs+=(xvfb x11vnc websockify novnc)
    # serve --ports-tls's tests: Chromium trusts agsx's CA through NSS
    pkgs+=(libnss3-tools)
  fi
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" != 0 ]; then
  echo "agsx: missing Debian packages; as root run:" >&2
  echo "  apt-get update && $cmd" >&2
  exit 1
fi
echo "agsx: installing missing Debian packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
# The tests start the daemons they need (dockerd, containerd, a registry)
# privately and stop them: installing a package starts no service (a
# policy-rc.d that denies every start, unless one is there already), and
# the services of those installed here are left disabled, not started at
# the next boot either. A daemon the machine ran before is not touched.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# agsx scripts/deps.sh: no service starts while it installs\nexit 101\n' >"$policy"
  chmod 0755 "$policy"
  made_policy=1
  trap 'rm -f "$policy"' EXIT
fi
apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
services=()
for p in "${missing[@]}"; do
  case $p in
    docker.io) services+=(docker.socket docker.service) ;;
    containerd) services+=(containerd.service) ;;
    docker-registry) services+=(docker-registry.service) ;;
  esac
done
if [ ${#services[@]} -gt 0 ]; then
  if command -v systemctl >/dev/null; then
    systemctl --root=/ --quiet disable "${services[@]}" 2>/dev/null || true
  fi
  for s in "${services[@]}"; do
    s=${s%.*}
    [ -x "/etc/init.d/$s" ] && update-rc.d "$s" disable >/dev/null 2>&1 || true
  done
  echo "agsx: left stopped and disabled (for the tests only): ${services[*]}" >&2
fi
[ "$made_policy" = 0 ] || { rm -f "$policy"; trap - EXIT; }
