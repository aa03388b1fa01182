# What the host offers, for tests that decide from it rather than from the
# layout of the machine they were written on (loaded by helpers.bash and by
# test/oci/helpers.bash).
#
# cgroups. A host is cgroup v2 when /sys/fs/cgroup is the unified hierarchy
# (every systemd distribution today), v1 when controllers are mounted one
# by one under it; a v1 host may also mount an empty cgroup2 hierarchy
# somewhere (this project's development machine: /sys/fs/cgroup/unified,
# "hybrid"). Nothing here composes where agsx puts a sandbox's cgroup: a
# test that needs one reads it from a process in it (proc_cgroup_dir, and
# sandbox_cgroup in helpers.bash), so that it keeps working when agsx
# places sandboxes elsewhere (systemd scopes).
#
# A test that skips says what the host lacks, in those terms.

# How much slower than a normal host this one is, for the generous bounds
# of time that tests assert (`slow N`: N of them): the guest lane sets 10
# under qemu's TCG emulation (test/guest/focused).
AGSX_TEST_SLOW=${AGSX_TEST_SLOW:-1}
slow() { echo $(($1 * AGSX_TEST_SLOW)); }

# cgroup2_mount: the mount point of the cgroup v2 hierarchy: /sys/fs/cgroup
# when it is the unified one, else the first cgroup2 mount in
# /proc/self/mountinfo; status 1 (nothing printed) when there is none.
cgroup2_mount() {
  if [ "$(stat -f -c %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ]; then
    echo /sys/fs/cgroup
    return 0
  fi
  local m
  # (field 5 is the mount point, octal escapes for blanks; after " - " the type)
  m=$(awk '{ for (i = 7; i <= NF; i++) if ($i == "-") break; if ($(i + 1) == "cgroup2") { print $5; exit } }' \
    /proc/self/mountinfo)
  [ -n "$m" ] || return 1
  printf '%b\n' "$m"
}

# cgroup_host_is_v2: /sys/fs/cgroup is the unified hierarchy (no v1
# hierarchies can be mounted for the controllers it holds).
cgroup_host_is_v2() { [ "$(stat -f -c %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ]; }

# cgroup_v1_mount CONTROLLER: where the v1 hierarchy holding CONTROLLER is
# mounted; status 1 when none is.
cgroup_v1_mount() {
  local m
  m=$(awk -v c="$1" '{
      for (i = 7; i <= NF; i++) if ($i == "-") break
      if ($(i + 1) != "cgroup") next
      n = split($(i + 3), o, ",")
      for (j = 1; j <= n; j++) if (o[j] == c) { print $5; exit }
    }' /proc/self/mountinfo)
  [ -n "$m" ] || return 1
  printf '%b\n' "$m"
}

# cgroup_mounts: the mount point of every cgroup hierarchy, v1 and v2,
# one a line (where to look for a cgroup of a given name).
cgroup_mounts() {
  awk '{ for (i = 7; i <= NF; i++) if ($i == "-") break
         if ($(i + 1) == "cgroup" || $(i + 1) == "cgroup2") print $5 }' /proc/self/mountinfo |
    while read -r m; do printf '%b\n' "$m"; done | sort -u
}

# cgroup_v2_controllers: the controllers of the v2 hierarchy's root, one
# line (empty when it has none, as a hybrid host's empty cgroup2 mount).
cgroup_v2_controllers() {
  local m
  m=$(cgroup2_mount) || return 1
  cat "$m/cgroup.controllers" 2>/dev/null
}

# cgroup_agsx_is_v2: the cgroup version agsx (and agsx-oci) use here, as
# src/sandbox/cgroup.h decides it: cgroup2 at ${AGSX_CGROUP_ROOT:-/sys/fs/cgroup}.
cgroup_agsx_is_v2() {
  [ "$(stat -f -c %T "${AGSX_CGROUP_ROOT:-/sys/fs/cgroup}" 2>/dev/null)" = cgroup2fs ] ||
    [ "${AGSX_OCI_CGROUP_LAYOUT:-}" = v2 ]
}

# proc_cgroup_dir PID [CONTROLLER]: the host directory of PID's cgroup, read
# from /proc/PID/cgroup: in the v2 hierarchy when agsx uses v2 here (or no
# CONTROLLER is given), else in the v1 hierarchy holding CONTROLLER. Status
# 1 when PID or that hierarchy is gone.
proc_cgroup_dir() {
  local pid=$1 c=${2:-} rel mnt
  if [ -z "$c" ] || cgroup_agsx_is_v2; then
    rel=$(sed -n 's/^0:://p' "/proc/$pid/cgroup" 2>/dev/null)
    mnt=${AGSX_CGROUP_ROOT:-$(cgroup2_mount)} || return 1
  else
    rel=$(awk -F: -v c="$c" '{ n = split($2, a, ","); for (i = 1; i <= n; i++) if (a[i] == c) print $3 }' \
      "/proc/$pid/cgroup" 2>/dev/null)
    mnt=$(cgroup_v1_mount "$c") || return 1
  fi
  [ -n "$rel" ] || return 1
  echo "${mnt%/}$rel"
}

# proc_cgroup_rel PID CONTROLLER: PID's cgroup path (from its hierarchy's
# root), read from /proc/PID/cgroup: the v2 line's where agsx uses v2 here,
# else the v1 line of the hierarchy holding CONTROLLER.
proc_cgroup_rel() {
  if cgroup_agsx_is_v2; then
    sed -n 's/^0:://p' "/proc/$1/cgroup"
  else
    awk -F: -v c="$2" '{ n = split($2, a, ","); for (i = 1; i <= n; i++) if (a[i] == c) print $3 }' \
      "/proc/$1/cgroup"
  fi
}

# block_device: MAJ:MIN of a whole block device with a request queue (a
# disk rather than a partition; loop devices last), for throttle rules
# (they may name any such device: nothing reads from it); status 1 when
# the host has none.
block_device() {
  local d best=
  for d in /sys/block/*; do
    [ -e "$d/queue" ] && [ -r "$d/dev" ] || continue
    case ${d##*/} in
      loop* | ram* | zram*) [ -n "$best" ] || best=$(cat "$d/dev") ;;
      *) cat "$d/dev"; return 0 ;;
    esac
  done
  [ -n "$best" ] || return 1
  echo "$best"
}

# swap_unbounded: the host has swap that a memory cgroup cannot bound (v1
# without swap accounting: no memory.memsw.*; v2 without memory.swap.max),
# so that a memory limit holds RAM only and an allocation past it swaps.
swap_unbounded() {
  local kb m
  kb=$(awk '/^SwapTotal:/ { print $2 }' /proc/meminfo)
  [ "${kb:-0}" -gt 0 ] || return 1
  if cgroup_agsx_is_v2; then
    m=${AGSX_CGROUP_ROOT:-$(cgroup2_mount)} || return 1
    ! ls "$m"/*/memory.swap.max >/dev/null 2>&1
  else
    m=$(cgroup_v1_mount memory) || return 1
    [ ! -e "$m/memory.memsw.limit_in_bytes" ]
  fi
}

# host_has_ipv6: the kernel has IPv6 (not booted with ipv6.disable=1).
host_has_ipv6() { [ -d /proc/sys/net/ipv6 ]; }

# host_has_ipv6_loopback: a socket can bind ::1.
host_has_ipv6_loopback() {
  python3 -c 'import socket; s = socket.socket(socket.AF_INET6); s.bind(("::1", 0))' 2>/dev/null
}
