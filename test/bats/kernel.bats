#!/usr/bin/env bats
# test-runner: parallel
# The kernel agsx runs on (src/host/kernel.h): `agsx info`, the per-boot
# feature cache, a kernel without what agsx needs (one clear line, nothing
# left behind), and the fallback for kernels before 6.15 — the root
# filesystem attached first, then assembled in place — against the
# detached assembly of newer ones: the same mounts with the same flags.
# On this file's host the fallback is forced with AGSX_KERNEL_DISABLE; the
# guest lane (test/guest) runs it on Debian's 6.1 and 6.12 for real.

load helpers

bats_require_minimum_version 1.5.0

setup_file() { busybox_setup_file; }

setup() {
  common_setup
  AX_TIMEOUT=30
  unaided_setup
  ax image load "$BB" >/dev/null
}

# A sandbox's mount table, ids and mount ids left out (they differ between
# any two sandboxes): mount point, options, type, source, super options.
mount_table() {
  ax run --rm "$@" cat /proc/self/mountinfo |
    awk '{ $1 = $2 = $3 = ""; print }' | sed -E 's/(uid|gid)=[0-9]+/\1=N/g'
}

@test "kernel: agsx info names every feature, the path taken for each, and agrees with --json" {
  run_ax info
  [ "$status" -eq 0 ]
  [[ "$output" == *"kernel: Linux $(uname -r) ("* ]]
  [[ "$output" == *"agsx supports Linux 6.1 and later"* ]]
  local f
  for f in user-namespaces mount-api openat2 clone-into-cgroup idmapped-mounts overlayfs \
    overlayfs-idmapped-layers tmpfs-user-xattrs detached-mounts; do
    echo "$output" | grep -E "^  $f +(yes|no|off) " || { echo "no line for $f"; return 1; }
  done
  [[ "$output" == *"cgroup: v"* ]]
  [[ "$output" == *"store: $ROOT"* ]]
  [[ "$output" == *"state: $STATE"* ]]
  local text=$output
  run_ax info --json
  [ "$status" -eq 0 ]
  # The same features, and the same answer for each, as the text.
  python3 - "$text" "$output" <<'PY'
import json, re, sys
text, doc = sys.argv[1], json.loads(sys.argv[2])
assert doc["kernel"]["floor"] == "6.1", doc["kernel"]
rows = dict(re.findall(r"^  (\S+) +(yes|no|off) ", text, re.M))
feats = {f["name"]: f for f in doc["kernel"]["features"]}
assert set(rows) == set(feats), (rows, feats)
for name, f in feats.items():
    want = "yes" if f["used"] else ("off" if f["present"] else "no")
    assert rows[name] == want, (name, rows[name], f)
    assert f["path"] and f["since"], f
required = [f["name"] for f in doc["kernel"]["features"] if f["required"]]
assert "user-namespaces" in required and "detached-mounts" not in required, required
assert doc["cgroup"]["version"] in (1, 2), doc["cgroup"]
PY
  # The global --json says the same.
  run_ax --json info
  [ "$status" -eq 0 ]
  echo "$output" | python3 -c 'import json, sys; json.load(sys.stdin)["kernel"]["features"]'
}

@test "kernel: AGSX_KERNEL_DISABLE turns a better path off; required ones and unknown names cannot be" {
  AGSX_KERNEL_DISABLE=detached-mounts run_ax info --json
  [ "$status" -eq 0 ]
  echo "$output" | python3 -c '
import json, sys
f = {x["name"]: x for x in json.load(sys.stdin)["kernel"]["features"]}
d = f["detached-mounts"]
assert not d["used"], d
assert "attached first" in d["path"], d'
  AGSX_KERNEL_DISABLE=user-namespaces,no-such-thing run_ax info
  [ "$status" -eq 0 ]
  [[ "$output" == *"\`user-namespaces\` is not an optional kernel feature, ignored"* ]]
  [[ "$output" == *"\`no-such-thing\` is not an optional kernel feature, ignored"* ]]
  echo "$output" | grep -E '^  user-namespaces +yes '
}

@test "kernel: without detached mount trees, the same mounts with the same flags (host image and an image)" {
  local img a b
  for img in host busybox; do
    a=$(mount_table "$img")
    b=$(AGSX_KERNEL_DISABLE=detached-mounts mount_table "$img")
    [ -n "$a" ]
    if [ "$a" != "$b" ]; then
      diff <(echo "$a") <(echo "$b") || true
      return 1
    fi
  done
  # And they work: /dev's nodes, the masks, a writable /tmp, the host's programs.
  AGSX_KERNEL_DISABLE=detached-mounts run_ax run --rm host sh -c \
    'echo x >/dev/null && head -c 4 /dev/zero | wc -c && cat /proc/keys | wc -c &&
     ls /proc/acpi | wc -l && echo ok >/tmp/f && cat /tmp/f && python3 -c "print(6*7)"'
  [ "$status" -eq 0 ]
  [ "$output" = "$(printf '4\n0\n0\nok\n42')" ]
  AGSX_KERNEL_DISABLE=detached-mounts run_ax run --rm busybox sh -c \
    'ls /dev/pts /dev/shm /dev/mqueue >/dev/null && echo x 2>/dev/null >/dev/full; echo $?'
  [ "$output" = 1 ]
}

@test "kernel: the features are probed once per boot and kept in STATE/cache/kernel" {
  run_ax run --rm busybox true
  [ "$status" -eq 0 ]
  [ -f "$STATE/cache/kernel" ]
  grep -qx "boot $(cat /proc/sys/kernel/random/boot_id)" "$STATE/cache/kernel"
  grep -qx "release $(uname -r)" "$STATE/cache/kernel"
  grep -qE '^features [0-9a-f]{8}$' "$STATE/cache/kernel"
  local before
  before=$(stat -c %Y.%i "$STATE/cache/kernel")
  run_ax run --rm busybox true
  [ "$status" -eq 0 ]
  [ "$(stat -c %Y.%i "$STATE/cache/kernel")" = "$before" ]
  # A cache of another boot (or kernel) is not believed: probed again.
  sed -i 's/^boot .*/boot 00000000-0000-0000-0000-000000000000/; s/^features .*/features 00000000/' \
    "$STATE/cache/kernel"
  run_ax run --rm busybox echo fine
  [ "$status" -eq 0 ]
  [ "$output" = fine ]
  grep -qx "boot $(cat /proc/sys/kernel/random/boot_id)" "$STATE/cache/kernel"
}

@test "kernel: a kernel without what agsx needs: one line naming it and the version, nothing left" {
  run_ax run --rm busybox true
  [ "$status" -eq 0 ]
  # This boot's kernel, as one without user namespaces (the required
  # features but that one, and no detached mounts).
  sed -i 's/^features .*/features 0000007e/' "$STATE/cache/kernel"
  run_ax run --rm busybox true
  [ "$status" -eq 125 ]
  [ "${#lines[@]}" -eq 1 ]
  [[ "$output" == "agsx: this kernel (Linux $(uname -r)) lacks user namespaces (CONFIG_USER_NS), which agsx needs (Linux 3.8 has it; agsx supports Linux 6.1 and later)" ]]
  run_ax run -d --name k1 busybox sleep 10
  [ "$status" -eq 125 ]
  [[ "$output" == *"lacks user namespaces"* ]]
  # Without idmapped mounts: that one is named.
  sed -i 's/^features .*/features 000000af/' "$STATE/cache/kernel"
  run_ax run --rm busybox true
  [ "$status" -eq 125 ]
  [[ "$output" == *"lacks idmapped mounts (mount_setattr), which agsx needs (Linux 5.12 has it"* ]]
  # Nothing was made: no record, no name, no cgroup (the unaided teardown
  # checks the rest).
  [ -z "$(ls "$STATE" | grep -vx -e cache -e slots -e names)" ]
  [ -z "$(ls "$STATE/names" 2>/dev/null)" ]
  [ -z "$(cgroup_dirs)" ]
}

@test "kernel: user.* xattrs in the writable layer where agsx info says the kernel has them, EOPNOTSUPP elsewhere" {
  local used
  used=$(ax info --json | python3 -c '
import json, sys
f = {x["name"]: x for x in json.load(sys.stdin)["kernel"]["features"]}
print(f["tmpfs-user-xattrs"]["used"])')
  run_ax run --rm busybox sh -c 'echo x >/tmp/f && probe setxattr /tmp/f user.agsx v && probe getxattr /tmp/f user.agsx'
  if [ "$used" = True ]; then
    [[ "$output" == *"user.agsx=v"* ]] || { show_run; false; }
  else
    [[ "$output" == *"EOPNOTSUPP"* ]] || { show_run; false; }
  fi
}
