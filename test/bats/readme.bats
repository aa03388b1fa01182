#!/usr/bin/env bats
# test-runner: parallel
# The README stays true: its ```sh blocks are run, line by line, against a
# private --root/--state (a wrapper `agsx` on PATH adds them), in a work
# directory holding what the commands name (busybox.tar and ./layout, the
# local busybox test image; job.py, src/main.py). Each line must exit 0, or
# the status its comment promises (EXPECT below). A few lines are rewritten
# first (REWRITE: what needs a terminal, ssh, a fixed host port, a project
# of the user's); blocks that need the internet, a registry, Chromium, host
# bridges or the whole build are skipped with the reason (SKIP). A block
# this file does not know is run as it is, so a new README example is tested
# unless someone says here why it cannot be; a rewrite or expectation whose
# README text is gone fails, so the two files change together.

load helpers

bats_require_minimum_version 1.5.0

README=$AGSX_SRCDIR/README.md

# First line of a block -> why it is not run.
declare -gA SKIP=(
  ['make demo    # install missing Debian packages, build, load the default image, show it']='the build itself: make demo and make check are what runs this file'
  ['agsx browser --name web                       # ws://127.0.0.1:41233/devtools/browser/…']='needs Chromium: browser.bats runs these'
  ['agsx browser --takeover']='needs Chromium, Xvfb, x11vnc and noVNC: browser.bats runs it and opens its views'
  ['certutil -d sql:$HOME/.pki/nssdb -A -t C,, -n agsx-serve -i /var/lib/agsx/tls/ca.pem']='changes the user'"'"'s and the system'"'"'s trust: serve-ports.bats trusts the CA in an NSS database of its own and opens the page in Chromium'
  ['agsx build --network internal -t runtime:1 .   # prints the image id; steps on stderr']='FROM debian:bookworm needs a registry: build.bats builds from local images'
  ['agsx pull python:3.12                   # docker.io/library/python:3.12, stored as python:3.12']='needs Docker Hub or a registry: pull.bats runs a local one'
  ['agsx image push tool:1 localhost:5000/team/tool:1   # IMAGE and a destination']='needs a registry: pull.bats runs a local one'
  ['agsx run --network public host curl -sI https://example.org']='needs the internet and host bridges and nftables: network.bats and firewall.bats run these in a namespace of their own'
  ['AGSX=$PWD/build/agsx PROBE=$PWD/build/test/fixtures/probe AGSX_SRCDIR=$PWD bats test/bats/run.bats']='runs a whole bats file: make check does'
  ['agsx serve &                                  # generates /etc/agsx/api-key on first start']='a server for the npm SDK: serve.bats starts one on a free port and runs the SDK against it'
)

# README text -> what runs instead, and why.
REWRITES=(
  # needs a terminal; the same command without one
  'agsx run -it busybox sh' 'agsx run busybox sh -c true'
  'agsx exec -it work sh' 'agsx exec work sh -c true'
  # another machine over ssh: this one
  '| ssh host agsx image load -' '| agsx image load -'
  # fixed host ports may be taken: ports the kernel picks
  '-p 8080:80' '-p 80'
  # (on IPv4 alone where the host has no IPv6 loopback)
  "'[::1]:5353:53/udp'" "$(host_has_ipv6_loopback && echo "'[::1]:0:53/udp'" || echo "'127.0.0.1:0:53/udp'")"
  # "img": an image serving on 3000; busybox, kept alive
  ' img  #' ' busybox sleep 60  #'
  # the user's project: a test step that leaves the report the next line copies
  'work make test' "work sh -c 'echo {} >/tmp/report.json'"
)

# README text on a line -> the exit status the README says it has.
EXPECT=(
  'host sleep 60' 143
  'agsx wait "$id"' 3
)

setup() {
  common_setup
  mkdir -p "$T/bin" "$T/work/src"
  cat >"$T/bin/agsx" <<SH
#!/bin/sh
exec timeout --kill-after=5 60 "$AGSX" --root "$ROOT" --state "$STATE" "\$@"
SH
  chmod +x "$T/bin/agsx"
  local layout
  layout=$(busybox_layout)
  cp -r "$layout" "$T/work/layout"
  tar -C "$layout" -cf "$T/work/busybox.tar" .
  echo 'print("job")' >"$T/work/job.py"
  echo 'print("main")' >"$T/work/src/main.py"
  ax image load "$T/work/busybox.tar" >/dev/null
}

# The ```sh blocks of the README, each as "KEY<TAB>LINE" lines (KEY: the
# block's first line), comment-only and blank lines dropped.
readme_blocks() {
  python3 - "$README" <<'PY'
import sys
key, inblock = None, False
for line in open(sys.argv[1]).read().splitlines():
    if not inblock:
        if line.strip() == '```sh':
            inblock, key = True, None
        continue
    if line.strip() == '```':
        inblock = False
        continue
    if not line.strip() or line.lstrip().startswith('#'):
        continue
    if key is None:
        key = line
    print(key + '\t' + line)
PY
}

readme_keys() { readme_blocks | cut -f1 | uniq; }

# run_block KEY: writes the block as a script with the rewrites and a status
# check after each line, runs it in $T/work, fails naming every bad line.
run_block() {
  local key=$1 i
  [ -z "${SKIP[$key]:-}" ] || skip "${SKIP[$key]}"
  readme_blocks | awk -F'\t' -v k="$key" '$1 == k { sub(/^[^\t]*\t/, ""); print }' >"$T/block"
  [ -s "$T/block" ] || { echo "# no README block starts with: $key" >&3; return 1; }
  python3 - "$T/block" "$T/script" "${REWRITES[@]}" -- "${EXPECT[@]}" <<'PY'
import shlex, sys
src, out, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
sep = rest.index('--')
rw, ex = rest[:sep], rest[sep + 1:]
rw = list(zip(rw[0::2], rw[1::2]))
ex = list(zip(ex[0::2], ex[1::2]))
with open(out, 'w') as f:
    f.write('set -o pipefail\nbad=0\n')
    for n, line in enumerate(open(src).read().splitlines(), 1):
        for a, b in rw:
            line = line.replace(a, b)
        want = next((s for t, s in ex if t in line), '0')
        f.write(line + '\n')
        f.write('rc=$?; if [ "$rc" -ne %s ]; then echo "README line failed: exit $rc, expected %s: "%s >&2; bad=1; fi\n'
                % (want, want, shlex.quote(line)))
    f.write('exit $bad\n')
PY
  cd "$T/work"
  run --separate-stderr env PATH="$T/bin:$PATH" bash "$T/script"
  AX_CMD="README block: $key"
  if [ "$status" -ne 0 ]; then
    printf '# %s\n' "$stderr" >&3
  fi
  assert_success
}

@test "readme: every rewrite and expectation still matches the README" {
  local text i bad=0
  text=$(readme_blocks | cut -f2-)
  for ((i = 0; i < ${#REWRITES[@]}; i += 2)); do
    [[ "$text" == *"${REWRITES[i]}"* ]] || { echo "# README no longer has: ${REWRITES[i]}" >&3; bad=1; }
  done
  for ((i = 0; i < ${#EXPECT[@]}; i += 2)); do
    [[ "$text" == *"${EXPECT[i]}"* ]] || { echo "# README no longer has: ${EXPECT[i]}" >&3; bad=1; }
  done
  for i in "${!SKIP[@]}"; do
    readme_keys | grep -qxF -- "$i" || { echo "# no README block starts with: $i" >&3; bad=1; }
  done
  [ "$bad" = 0 ]
}

@test "readme: every sh block is run or skipped here with a reason" {
  # The blocks the tests below run, by their first line.
  local known=(
    'agsx image load busybox.tar            # OCI layout, oci-archive or docker-archive (docker save)'
    "agsx run host python3 -c 'print(6 * 7)'   # 42; exits with the command's status"
    'agsx run -d --name work --timeout 30m host sleep infinity   # prints the id once running'
    'agsx run -d --name web -p 8080:80 busybox httpd -f -p 80   # http://127.0.0.1:8080/'
    'agsx run -d --name agent busybox sleep 1h            # a workspace for an agent'
    'agsx pool create warm --image busybox --size 2 --memory 256m   # two parked sandboxes'
    'agsx run -d --name lab --timeout 10m host sleep infinity   # a sandbox for code contexts'
  )
  local k bad=0
  while IFS= read -r k; do
    [ -n "${SKIP[$k]:-}" ] && continue
    printf '%s\n' "${known[@]}" | grep -qxF -- "$k" ||
      { echo "# README block not run by readme.bats: $k" >&3; bad=1; }
  done < <(readme_keys)
  [ "$bad" = 0 ]
}

@test "readme: the run --json example has the fields run --json prints" {
  local want got
  want=$(python3 - "$README" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
start = text.index("agsx run --json host python3 -c 'print(6 * 7)'")
example = ''.join(l.lstrip('# ') for l in text[start:].splitlines()[1:4] if l.startswith('#'))
print(' '.join(re.findall(r'"(\w+)":', example)))
PY
)
  run --separate-stderr ax run --rm --json host python3 -c 'print(6 * 7)'
  assert_success
  got=$(python3 -c 'import json, sys; print(" ".join(json.loads(sys.argv[1])))' "$output")
  [ "$want" = "$got" ] || { echo "# README: $want" >&3; echo "# agsx:   $got" >&3; false; }
}

@test "readme: the image tour" {
  run_block 'agsx image load busybox.tar            # OCI layout, oci-archive or docker-archive (docker save)'
}

@test "readme: sandboxes in the foreground" {
  run_block "agsx run host python3 -c 'print(6 * 7)'   # 42; exits with the command's status"
}

@test "readme: a long-lived sandbox" {
  run_block 'agsx run -d --name work --timeout 30m host sleep infinity   # prints the id once running'
}

@test "readme: published ports" {
  run_block 'agsx run -d --name web -p 8080:80 busybox httpd -f -p 80   # http://127.0.0.1:8080/'
}

@test "readme: snapshots, rollback, pause, fork, commit" {
  run_block 'agsx run -d --name agent busybox sleep 1h            # a workspace for an agent'
}

@test "readme: warm pools" {
  run_block 'agsx pool create warm --image busybox --size 2 --memory 256m   # two parked sandboxes'
}

@test "readme: code contexts" {
  /usr/bin/python3 -c 'import ipykernel, jupyter_client, pandas, matplotlib' 2>/dev/null ||
    skip "python3-ipykernel, jupyter-client, pandas or matplotlib missing (scripts/deps.sh)"
  run_block 'agsx run -d --name lab --timeout 10m host sleep infinity   # a sandbox for code contexts'
}

# The blocks that are not run, each skipped with its reason (SKIP).
@test "readme: make demo, make check" { run_block 'make demo    # install missing Debian packages, build, load the default image, show it'; }
@test "readme: agsx browser" { run_block 'agsx browser --name web                       # ws://127.0.0.1:41233/devtools/browser/…'; }
@test "readme: trust agsx's CA" { run_block 'certutil -d sql:$HOME/.pki/nssdb -A -t C,, -n agsx-serve -i /var/lib/agsx/tls/ca.pem'; }
@test "readme: agsx build" { run_block 'agsx build --network internal -t runtime:1 .   # prints the image id; steps on stderr'; }
@test "readme: agsx pull" { run_block 'agsx pull python:3.12                   # docker.io/library/python:3.12, stored as python:3.12'; }
@test "readme: agsx image push" { run_block 'agsx image push tool:1 localhost:5000/team/tool:1   # IMAGE and a destination'; }
@test "readme: networks" { run_block 'agsx run --network public host curl -sI https://example.org'; }
@test "readme: one bats file by hand" { run_block 'AGSX=$PWD/build/agsx PROBE=$PWD/build/test/fixtures/probe AGSX_SRCDIR=$PWD bats test/bats/run.bats'; }
