#!/usr/bin/env bats
# test-runner: parallel
# Reaping by any invocation (state.h, agsx_state_reap_all, issue 18): at
# most once a second per state directory, every agsx command reaps the
# sandboxes whose supervisor died or is stuck past its deadline, reading
# each record once without its lock; the live ones are left alone.

load helpers

bats_require_minimum_version 1.5.0

setup_file() { busybox_setup_file; }

setup() { busybox_setup 30; }

@test "any command reaps a dead supervisor's sandbox and a stuck one past its deadline, not the live ones" {
  local a b c spa spb spc ipa i
  a=$(rund --timeout 5m busybox sleep 4242)
  b=$(rund --timeout 5m busybox sleep 4242)
  c=$(rund --timeout 5m busybox sleep 4242)
  spa=$(rec "$a" supervisor.pid)
  spb=$(rec "$b" supervisor.pid)
  spc=$(rec "$c" supervisor.pid)
  ipa=$(rec "$a" init.pid)
  kill -9 "$spa"
  for i in $(seq 50); do ! alive "$ipa" && break; sleep 0.1; done
  ! alive "$ipa" || false
  # b's supervisor stops answering, and its deadline is long past (the
  # record rewritten as the supervisor would: whole, then renamed).
  kill -STOP "$spb"
  python3 - "$STATE/$b" <<'PY'
import json, os, sys, time
d = sys.argv[1]
r = json.load(open(os.path.join(d, "state.json")))
r["deadline"] = int(time.time()) - 100
r["deadline_ns"] = r["deadline"] * 10**9
with open(os.path.join(d, ".state.json.tmp"), "w") as f:
    json.dump(r, f)
os.rename(os.path.join(d, ".state.json.tmp"), os.path.join(d, "state.json"))
PY
  [ "$(rec "$a" status)" = running ]
  # The run -d above stamped this second's reaping: wait it out, then any
  # command (one that never reaps by itself) does it.
  sleep 2.1
  run_ax image ls
  assert_success
  [ "$(rec "$a" status)" = exited ] || { echo "# a: $(rec "$a" status)" >&3; false; }
  [ "$(rec "$a" stop_reason)" = killed ]
  [ "$(rec "$a" exit_code)" = 137 ]
  [ "$(rec "$b" status)" = exited ] || { echo "# b: $(rec "$b" status)" >&3; false; }
  [ "$(rec "$b" stop_reason)" = timeout ]
  for i in $(seq 50); do ! alive "$spb" && break; sleep 0.1; done
  ! alive "$spb" || false
  [ "$(rec "$c" status)" = running ]
  alive "$spc"
  run_ax exec "$c" true
  assert_success
}

@test "ls reaps at once, also within the second another command reaped in" {
  local a spa ipa i
  a=$(rund --timeout 5m busybox sleep 4242)
  spa=$(rec "$a" supervisor.pid)
  ipa=$(rec "$a" init.pid)
  sleep 2.1
  run_ax image ls # stamps this second's reaping
  assert_success
  kill -9 "$spa"
  for i in $(seq 50); do ! alive "$ipa" && break; sleep 0.1; done
  ! alive "$ipa" || false
  run_ax ls -a --json
  assert_success
  [ "$(rec "$a" status)" = exited ]
  [ "$(rec "$a" stop_reason)" = killed ]
}
