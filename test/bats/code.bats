#!/usr/bin/env bats
# test-runner: parallel
# agsx code: stateful code contexts (an IPython kernel, a persistent bash)
# in a running sandbox of the host image, through the CLI. Needs Debian's
# python3-ipykernel, python3-jupyter-client, numpy, pandas and matplotlib on
# the host (scripts/deps.sh installs them); skips otherwise.

load helpers

bats_require_minimum_version 1.5.0

setup_file() {
  /usr/bin/python3 -c 'import ipykernel, jupyter_client, numpy, pandas, matplotlib' 2>/dev/null ||
    export CODE_SKIP="python3-ipykernel, jupyter-client, numpy, pandas or matplotlib missing"
  export SDK=
  if command -v node >/dev/null && SDK=$("$AGSX_SRCDIR/test/code/npm-install" 2>/dev/null); then
    export SDK
  fi
}

setup() {
  [ -z "${CODE_SKIP:-}" ] || skip "$CODE_SKIP"
  common_setup
  AX_TIMEOUT=120
  run_ax run -d --name lab --timeout 10m host sleep infinity
  assert_success
}

jq_() { jq -e "$@"; }

# On a failure: the sandbox's processes and each context bridge's stderr
# (the kernel's own diagnostics), so an intermittent hang can be read.
code_diag() {
  echo "# processes in lab:" >&3
  ax exec lab ps -eo pid,ppid,stat,etime,wchan:24,args 2>&1 | sed 's/^/#   /' >&3 || true
  local pid
  for pid in $(ax exec lab ps -eo pid=,args= 2>/dev/null | awk '/python3 -I -c/ && !/awk/ {print $1}'); do
    echo "# bridge $pid stderr:" >&3
    ax logs --exec "$pid" lab 2>&1 | tail -40 | sed 's/^/#   /' >&3 || true
  done
}

teardown() {
  local rc=0
  serve_stop || rc=1
  sandbox_teardown || rc=1
  return $rc
}

KEY=e2b_0123456789abcdef0123456789abcdef01234567

# agsx serve on a free loopback port, for the SDK (helpers.bash).
serve_start() { api_serve_start "$@"; }

run_sdk() {
  E2B_SDK=$SDK E2B_API_URL=$U E2B_SANDBOX_URL=$U E2B_API_KEY=$KEY \
    timeout 300 node "$AGSX_SRCDIR/test/code/sdk.mjs" "$@"
}

@test "code: state across cells, 1+1 -> 2, stdout then the main result" {
  run_ax code lab 'x = 41; print("hello")'
  assert_success
  [ "$output" = hello ] || { show_run; false; }
  run_ax code lab 'x + 1'
  assert_success
  [ "$output" = 42 ] || { show_run; false; }
  run_ax code --json lab '1+1'
  assert_success
  echo "$output" | jq_ '.text == "2" and .execution_count == 3 and .error == null' >/dev/null
  echo "$output" | jq_ '.results == [{"text":"2","extra":{},"is_main_result":true}]' >/dev/null
  echo "$output" | jq_ '.logs == {"stdout":[],"stderr":[]} and .timed_out == false and .truncated == false' >/dev/null
  echo "$output" | jq_ '.context.language == "python" and (.context.id | test("^[0-9a-f]{32}$"))' >/dev/null
  # One default python context, made by the first call.
  run_ax code --list --json lab
  assert_success
  echo "$output" | jq_ 'length == 1 and .[0].default == true and .[0].language == "python"' >/dev/null
}

@test "code: 1/0 is a ZeroDivisionError with its traceback, exit 1; the context goes on" {
  run_ax code --json lab '1/0'
  assert_status 1
  echo "$output" | jq_ '.error.name == "ZeroDivisionError" and .error.value == "division by zero"' >/dev/null
  echo "$output" | jq_ '.error.traceback | test("Traceback \\(most recent call last\\)") and test("----> 1 1/0")' >/dev/null
  run -1 ax code lab 'y = 1/0'
  [[ "$output" == *"ZeroDivisionError: division by zero"* ]] || { show_run; false; }
  run_ax code lab '"still here"'
  assert_success
  [ "$output" = "still here" ] || { show_run; false; }
}

@test "code: a matplotlib plot gives a PNG (--save and --json); a DataFrame gives html" {
  run_ax code --json --save "$T/plots" lab 'import matplotlib.pyplot as plt
plt.plot([1, 3, 2]); plt.show()'
  assert_success
  echo "$output" | jq_ '.results | length == 1' >/dev/null
  echo "$output" | jq_ '.results[0].is_main_result == false and .results[0].extra == {}' >/dev/null
  echo "$output" | jq_ '.results[0].chart | .type == "line" and .elements[0].label == "Line 0" and .elements[0].points == [[0,1],[1,3],[2,2]]' >/dev/null
  echo "$output" | jq -r '.results[0].png' | base64 -d >"$T/p.png"
  [ "$(head -c 8 "$T/p.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]
  [ "$(stat -c %s "$T/p.png")" -gt 5000 ]
  local f
  f=$(echo "$output" | jq -r '.files[0]')
  cmp "$f" "$T/p.png"
  file "$f" | grep -q 'PNG image data, [0-9]* x [0-9]*'
  run_ax code --json lab 'import pandas as pd
pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})'
  assert_success
  echo "$output" | jq_ '.results[0].is_main_result and (.results[0].html | test("<table")) and (.results[0].text | test("a"))' >/dev/null
  echo "$output" | jq_ '.results[0].data == {"a":[1,2],"b":["x","y"]}' >/dev/null
  # E2B's chart shapes: two axes make a superchart of their charts.
  run_ax code --json lab 'fig, (a, b) = plt.subplots(1, 2); fig.suptitle("both")
a.bar(["x", "y"], [3, 5], label="n"); a.set_ylabel("size (MiB)"); b.pie([1, 3], labels=["p", "q"]); plt.show()'
  assert_success
  echo "$output" | jq_ '.results[0].chart | .type == "superchart" and .title == "both" and
    .elements[0].type == "bar" and .elements[0].y_unit == "MiB" and
    .elements[0].elements == [{"label":"x","group":"n","value":3},{"label":"y","group":"n","value":5}] and
    .elements[1].type == "pie" and ([.elements[1].elements[] | .label] == ["p","q"]) and
    .elements[1].elements[1].angle == 270' >/dev/null || { show_run; false; }
  run_ax code --json lab '{"k": [1, 2]}'
  assert_success
  echo "$output" | jq_ '.results[0].json == {"k":[1,2]}' >/dev/null
}

@test "code: stdout comes line by line, before the cell ends" {
  # 5 s between the lines, seen at least 2 s apart: room for the first
  # line's way out on a loaded host.
  ax code lab 'import time
print("first", flush=True)
time.sleep(5)
print("second")' | while IFS= read -r l; do echo "$(date +%s%N) $l"; done >"$T/lines"
  cat "$T/lines"
  [ "$(wc -l <"$T/lines")" = 2 ]
  local t1 t2
  t1=$(awk 'NR == 1 {print $1}' "$T/lines")
  t2=$(awk 'NR == 2 {print $1}' "$T/lines")
  [ "$(awk 'NR == 1 {print $2}' "$T/lines")" = first ]
  [ $(((t2 - t1) / 1000000)) -gt 2000 ]
}

@test "code: a bash context keeps cwd and variables; a failing command is an error" {
  run_ax code -l bash lab 'cd /etc; N=5; f() { echo "f$1"; }'
  assert_success
  run_ax code -l bash lab 'pwd; echo "$N"; f 1'
  assert_success
  [ "$output" = "$(printf '/etc\n5\nf1')" ] || { show_run; false; }
  run_ax code --json -l bash lab 'ls /nonexistent'
  assert_status 1
  echo "$output" | jq_ '.error == {"name":"","value":"2","traceback":""}' >/dev/null
  echo "$output" | jq_ '.logs.stdout[0] | test("No such file")' >/dev/null
  run_ax code --list --json lab
  echo "$output" | jq_ 'map(.language) == ["bash"]' >/dev/null
}

@test "code: a javascript context (node in the image): state, await, errors, interrupts" {
  command -v node >/dev/null || skip "no node on the host"
  run_ax code -l js lab 'let n = 20; const f = (x) => x * 2; console.log("hi")'
  assert_success
  [ "$output" = hi ] || { show_run; false; }
  run_ax code -l javascript lab 'f(n) + 2'
  assert_success
  [ "$output" = 42 ] || { show_run; false; }
  run_ax code --json -l js lab 'await new Promise((r) => setTimeout(r, 100)); null.x'
  assert_status 1
  echo "$output" | jq_ '.error.name == "TypeError" and (.error.traceback | test("cell.js"))' >/dev/null
  run_ax code --json --timeout 2s -l js lab 'while (true) {}'
  assert_status 124
  run_ax code -l js lab 'n'
  [ "$output" = 20 ] || { show_run; false; }
}

@test "code: contexts are created, listed, restarted (state gone) and removed" {
  local c
  run_ax code --create -w /tmp lab
  assert_success
  c=$output
  [[ "$c" =~ ^[0-9a-f]{32}$ ]] || { show_run; false; }
  run_ax code -c "$c" lab 'import os; v = 7; os.getcwd()'
  assert_success
  [ "$output" = /tmp ] || { show_run; false; }
  run_ax code -c "${c:0:8}" lab 'v'
  assert_success
  [ "$output" = 7 ]
  run_ax code --create --json --language bash lab
  assert_success
  echo "$output" | jq_ '.language == "bash" and .default == false' >/dev/null
  run_ax code --list --json lab
  assert_success
  echo "$output" | jq_ --arg c "$c" 'length == 2 and .[0].id == $c and .[0].cwd == "/tmp"' >/dev/null
  run_ax code --list lab
  assert_output_contains "CONTEXT ID"
  run_ax code -c "$c" --restart lab
  assert_success
  run -1 ax code -c "$c" lab 'v'
  [[ "$output" == *"NameError: name 'v' is not defined"* ]] || { show_run; false; }
  run_ax code -c "$c" lab 'import os; os.getcwd()'
  [ "$output" = /tmp ] || { show_run; false; }
  run_ax code -c "$c" --rm lab
  assert_success
  run_ax code -c "$c" lab 'v'
  assert_agsx_error "Context $c not found"
  run_ax code --list -q lab
  [ "$(echo "$output" | grep -c .)" = 1 ]
}

@test "code: --timeout interrupts an endless cell; the next cell keeps the variables" {
  run_ax code lab 'kept = "yes"'
  assert_success
  local t0=$SECONDS
  run_ax code --json --timeout 3s lab 'while True: pass'
  assert_status 124
  [ $((SECONDS - t0)) -lt 20 ]
  echo "$output" | jq_ '.timed_out == true and .error.name == "TimeoutError"' >/dev/null
  run_ax code lab 'kept'
  [ "$status" = 0 ] && [ "$output" = yes ] || { show_run; code_diag; false; }
}

@test "code: a kernel that dies reports an error, the next execution has a fresh kernel" {
  run_ax code lab 'a = 1'
  run_ax code --json lab 'import os; os._exit(3)'
  assert_status 1
  echo "$output" | jq_ '.error.name == "DeadKernelError"' >/dev/null
  run_ax code --json lab '2 * 21'
  assert_success
  echo "$output" | jq_ '.text == "42" and .execution_count == 1' >/dev/null
}

@test "code: a kernel killed by --memory reports an error and the context recovers" {
  ax kill lab >/dev/null
  run_ax run -d --name lab2 --timeout 10m --memory 400m host sleep infinity
  assert_success
  run_ax code lab2 'small = 5'
  assert_success
  run_ax code --json lab2 'big = bytearray(1 << 30); big[::4096] = b"x" * len(big[::4096])'
  assert_status 1
  echo "$output" | jq_ '.error.name == "DeadKernelError" or .error.name == "MemoryError"' >/dev/null
  run_ax code --json lab2 '6 * 7'
  assert_success
  echo "$output" | jq_ '.text == "42"' >/dev/null
  run_ax ls --json
  echo "$output" | jq_ 'map(select(.name == "lab2")) | .[0].status == "running"' >/dev/null
}

@test "code: the kernel has the sandbox's network: internal reaches nothing outside" {
  run_ax code --json lab 'import socket
s = socket.socket(); s.settimeout(3)
try:
    s.connect(("198.18.0.1", 9)); r = "connected"
except OSError as e:
    r = type(e).__name__
r'
  assert_success
  echo "$output" | jq_ '.text != "connected"' >/dev/null
  # It runs in the sandbox: its pid namespace, not the host's.
  run_ax code lab 'import os; os.getpid() < 1000 and not os.path.exists("/proc/1/root/'"$T"'")'
  assert_success
  [ "$output" = True ] || { show_run; false; }
}

@test "code: bad input: MiBs of code, binary junk, 100000 lines, a fork, non-UTF-8 output" {
  heavy
  python3 -c 'print("s = \"" + "a" * (4 << 20) + "\"\nlen(s)")' >"$T/big.py"
  run_ax code lab - <"$T/big.py"
  assert_success
  [ "$output" = 4194304 ] || { show_run; false; }
  head -c 200000 /dev/urandom >"$T/junk"
  # Junk is whatever IPython makes of it (mostly a SyntaxError; a `?` in
  # it may ask for help instead): one valid document, no crash.
  run ax code --json lab - <"$T/junk"
  [ "$status" = 0 ] || [ "$status" = 1 ] || { show_run; false; }
  echo "$output" | jq_ '.context.language == "python"' >/dev/null
  run_ax code lab 'for i in range(100000): print(i)'
  assert_success
  [ "$(echo "$output" | wc -l)" = 100000 ]
  [ "$(echo "$output" | tail -1)" = 99999 ]
  run_ax code lab 'import os
pid = os.fork()
if pid == 0:
    os._exit(7)
os.waitpid(pid, 0)[1] >> 8'
  assert_success
  [ "$output" = 7 ] || { show_run; false; }
  run_ax code --json lab 'import os, subprocess
os.write(1, b"\xff\xfe ok \xc3\n")
subprocess.run(["printf", "\\377 sub\\n"]).returncode'
  assert_success
  echo "$output" | LC_ALL=C grep -qv '[^ -~]' # ASCII only
  echo "$output" | jq_ '.logs.stdout | join("") | test("\ufffd\ufffd ok \ufffd\n") and test("sub")' >/dev/null
  run_ax code lab '"fine"'
  [ "$output" = fine ]
}

@test "code: an output flood is truncated with a flag; the context stays usable" {
  run_ax code --json --output-limit 1m lab 'import sys
for i in range(50): sys.stdout.write("x" * 100000 + "\n")'
  assert_success
  echo "$output" | jq_ '.truncated == true and .dropped_bytes > 3000000' >/dev/null
  echo "$output" | jq_ '(.logs.stdout | join("") | length) <= 1048576' >/dev/null
  run_ax code lab '3'
  [ "$output" = 3 ]
}

@test "code: executions on one context queue in order; different contexts run in parallel" {
  # The default context exists first, so the two calls below cannot race
  # to make it; the second is sent only once the first cell is running.
  run_ax code lab 'order = []'
  assert_success
  ax code lab 'import time; open("/tmp/first-running", "w").close(); time.sleep(2); order.append(1)' \
    >"$T/a" 2>&1 &
  local a=$! i
  for i in $(seq 300); do
    ax exec lab test -e /tmp/first-running 2>/dev/null && break
    sleep 0.1
  done
  run_ax code lab 'order.append(2); order'
  wait "$a"
  assert_success
  [ "$output" = "[1, 2]" ] || { show_run; false; }
  # Two contexts at once: the cell in c1 waits (30 s at most) for a file
  # that the cell in c2 writes, so it can only end well if c2's cell runs
  # while c1's is still running.
  local c1 c2
  c1=$(ax code --create lab)
  c2=$(ax code --create lab)
  ax code -c "$c1" lab 'import os, time
for _ in range(300):
    if os.path.exists("/tmp/from-c2"):
        break
    time.sleep(0.1)
else:
    raise SystemExit("c2 never ran")
"both"' >"$T/c1" 2>&1 &
  a=$!
  run_ax code -c "$c2" lab 'open("/tmp/from-c2", "w").close(); "c2"'
  assert_success
  [ "$output" = c2 ]
  wait "$a" || { cat "$T/c1"; false; }
  [ "$(cat "$T/c1")" = both ] || { cat "$T/c1"; false; }
}

@test "code: bad flags and unknown contexts fail cleanly with 125" {
  run_ax code --context abc --language bash lab 'x'
  assert_agsx_error "only one of --context and --language"
  run_ax code --rm lab
  assert_agsx_error "--rm needs --context"
  run_ax code --list --create lab
  assert_agsx_error "do not go together"
  run_ax code -c 0123456789abcdef0123456789abcdef lab 'x'
  assert_agsx_error "Context 0123456789abcdef0123456789abcdef not found"
  run_ax code -l java lab '1'
  assert_agsx_error "no kernel for language \`java\`"
  run_ax code -l 'r;rm' lab '1'
  assert_agsx_error "invalid language"
  run_ax code nosuchsandbox '1'
  assert_agsx_error
  run_ax code --timeout 0 lab '1'
  assert_agsx_error
  run_ax code
  assert_agsx_error "expected SANDBOX"
  ax kill lab >/dev/null
  run_ax wait lab
  run_ax code lab '1'
  assert_agsx_error "not running"
}

@test "code: the unmodified @e2b/code-interpreter SDK through agsx serve (port 49999)" {
  [ -n "$SDK" ] || skip "npm @e2b/code-interpreter not installable"
  serve_start
  run run_sdk
  echo "$output"
  [ "$status" = 0 ] || { cat "$T/serve.log" >&3; false; }
  for s in state plot dataframe error stream bash contexts javascript timeout network parallel; do
    [[ "$output" == *"ok $s "* ]]
  done
}

# serve cannot give an API sandbox a memory limit (a template is an image,
# the create body has no limits), so the sandbox is made with agsx run and
# labelled as a template's: the API then serves it as any other.
@test "code: SDK: a kernel killed by --memory reports an error and the context recovers" {
  [ -n "$SDK" ] || skip "npm @e2b/code-interpreter not installable"
  ax kill lab >/dev/null
  run_ax run -d --name lab2 --timeout 10m --memory 400m --label e2b.template=code-interpreter-v1 \
    host sleep infinity
  assert_success
  local id
  id=$(ax ls --json | jq -r '.[] | select(.name == "lab2") | .id')
  [ ${#id} = 32 ]
  serve_start
  E2B_SANDBOX_ID=${id:0:20} run run_sdk memory
  echo "$output"
  [ "$status" = 0 ] || { cat "$T/serve.log" >&3; false; }
  [[ "$output" == *"ok memory "* ]]
  run_ax ls --json
  echo "$output" | jq_ 'map(select(.name == "lab2")) | .[0].status == "running"' >/dev/null
}

@test "code: port 49999 over HTTP: NDJSON lines, statuses, unknown contexts" {
  serve_start
  local c id tok
  c=$(curl -s -X POST -H "X-API-KEY: $KEY" -H 'Content-Type: application/json' \
    -d '{"templateID":"code-interpreter-v1","timeout":120}' "$U/sandboxes")
  id=$(echo "$c" | jq -r .sandboxID)
  tok=$(echo "$c" | jq -r .envdAccessToken)
  local h=(-H "E2b-Sandbox-Id: $id" -H "E2b-Sandbox-Port: 49999" -H 'Content-Type: application/json')
  [ "$(curl -s "${h[@]}" "$U/health")" = '"OK"' ]
  curl -sN "${h[@]}" -H "X-Access-Token: $tok" -d '{"code":"print(\"h\u00e9\")\n1+1"}' \
    "$U/execute" >"$T/out"
  cat "$T/out"
  # ASCII only, no blank line, end_of_execution last.
  ! LC_ALL=C grep -q '[^ -~]' "$T/out" || false
  ! grep -q '^$' "$T/out" || false
  [ "$(tail -1 "$T/out")" = '{"type":"end_of_execution"}' ]
  grep -qx '{"type":"stdout","text":"h\\u00e9\\n","timestamp":"[^"]*"}' "$T/out"
  grep -qx '{"type":"result","text":"2","extra":{},"is_main_result":true}' "$T/out"
  # Statuses: no token 401, both context and language 400, unknown context 404, no kernel 501.
  [ "$(curl -s -o /dev/null -w '%{http_code}' "${h[@]}" -d '{"code":"1"}' "$U/execute")" = 401 ]
  [ "$(curl -s -o /dev/null -w '%{http_code}' "${h[@]}" -H "X-Access-Token: $tok" \
    -d '{"code":"1","context_id":"x","language":"python"}' "$U/execute")" = 400 ]
  run curl -s -w ' %{http_code}' "${h[@]}" -H "X-Access-Token: $tok" \
    -d '{"code":"1","context_id":"0123456789abcdef0123456789abcdef"}' "$U/execute"
  [ "$output" = "Context 0123456789abcdef0123456789abcdef not found 404" ]
  [ "$(curl -s -o /dev/null -w '%{http_code}' "${h[@]}" -H "X-Access-Token: $tok" \
    -d '{"code":"1","language":"java"}' "$U/execute")" = 501 ]
  [ "$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "${h[@]}" -H "X-Access-Token: $tok" \
    "$U/contexts/nope")" = 404 ]
  [ "$(curl -s -o /dev/null -w '%{http_code}' "${h[@]}" -H "X-Access-Token: $tok" -d 'junk' \
    "$U/contexts")" = 400 ]
  # A silent cell gets keepalives; a client that goes away interrupts it
  # at once.
  # (The first keepalive is due 5 s into the silence; 12 s leaves room for
  # a loaded host.)
  curl -sN -m 12 "${h[@]}" -H "X-Access-Token: $tok" \
    -d '{"code":"import time\nmark = 1\ntime.sleep(300)"}' "$U/execute" >"$T/ka" || true
  grep -qx '{"type":"keepalive"}' "$T/ka" || { echo "no keepalive: $(cat "$T/ka")" >&3; false; }
  local t0=$SECONDS
  curl -sN -m "$(slow 30)" "${h[@]}" -H "X-Access-Token: $tok" -d '{"code":"mark + 1"}' \
    "$U/execute" >"$T/after" || {
    echo "curl $? after $((SECONDS - t0)) s: $(cat "$T/after"); first: $(cat "$T/ka")" >&3
    grep -v ' GET ' "$T/serve.log" | tail -40 >&3
    false
  }
  grep -q '"text":"2"' "$T/after" || { echo "after the interrupt: $(cat "$T/after")" >&3; false; }
  # The server asks a suspended stream's socket once a second: the cell is
  # interrupted then, not when a keepalive fails to go out (8 s and more).
  [ $((SECONDS - t0)) -lt "$(slow 6)" ] || { echo "interrupt took $((SECONDS - t0)) s" >&3; false; }
  # A sandbox that is gone: 502.
  curl -s -X DELETE -H "X-API-KEY: $KEY" "$U/sandboxes/$id" >/dev/null
  [ "$(curl -s -o /dev/null -w '%{http_code}' "${h[@]}" "$U/health")" = 502 ]
}

# A kill while the first /execute still starts its default context: the
# connection is dropped, as E2B's proxy drops a request to a sandbox that
# is gone (the SDK then reports "killed while the request was in
# progress"), never a 500 with the dead kernel's error.
@test "code: a sandbox killed while /execute starts its kernel: the connection is dropped" {
  serve_start
  local c id tok pid rc
  c=$(curl -s -X POST -H "X-API-KEY: $KEY" -H 'Content-Type: application/json' \
    -d '{"templateID":"code-interpreter-v1","timeout":120}' "$U/sandboxes")
  id=$(echo "$c" | jq -r .sandboxID)
  tok=$(echo "$c" | jq -r .envdAccessToken)
  curl -sN -o "$T/out" -w '%{http_code}' -H "E2b-Sandbox-Id: $id" -H "E2b-Sandbox-Port: 49999" \
    -H "X-Access-Token: $tok" -d '{"code":"1"}' "$U/execute" >"$T/code" 2>"$T/err" &
  pid=$!
  local t0=$EPOCHREALTIME
  sleep 0.3
  curl -s -X DELETE -H "X-API-KEY: $KEY" "$U/sandboxes/$id" >/dev/null
  rc=0
  wait "$pid" || rc=$?
  echo "curl $rc after $(awk "BEGIN{print $EPOCHREALTIME - $t0}") s, status $(cat "$T/code"), body $(cat "$T/out")"
  # Closed without a response (52), or mid-stream if the cell had begun; on
  # a host slow enough that the kill came first, the gone sandbox's 502.
  case $(cat "$T/code") in
  000 | 200) [ "$rc" != 0 ] ;;
  502) ;;
  *) false ;;
  esac
  ! grep -q '"type":"end_of_execution"' "$T/out" || false
  # The server goes on.
  [ "$(curl -s -o /dev/null -w '%{http_code}' -H "X-API-KEY: $KEY" "$U/sandboxes")" = 200 ]
}

# Issue 24, finding 1: the context routes took no credentials at all.
@test "code: port 49999 admits every route with the sandbox's token, as envd's (401 before anything runs)" {
  serve_start
  local c id tok traffic other otok
  c=$(curl -s -X POST -H "X-API-KEY: $KEY" -H 'Content-Type: application/json' \
    -d '{"templateID":"code-interpreter-v1","timeout":120}' "$U/sandboxes")
  id=$(echo "$c" | jq -r .sandboxID)
  tok=$(echo "$c" | jq -r .envdAccessToken)
  traffic=$(echo "$c" | jq -r .trafficAccessToken)
  c=$(curl -s -X POST -H "X-API-KEY: $KEY" -H 'Content-Type: application/json' \
    -d '{"templateID":"code-interpreter-v1","timeout":120}' "$U/sandboxes")
  other=$(echo "$c" | jq -r .sandboxID)
  otok=$(echo "$c" | jq -r .trafficAccessToken)
  local h=(-H "E2b-Sandbox-Id: $id" -H "E2b-Sandbox-Port: 49999" -H 'Content-Type: application/json')
  local ctx=0123456789abcdef0123456789abcdef
  # No token, a wrong one, another sandbox's: 401 on every route but /health.
  local cred req
  for cred in "" "E2B-Traffic-Access-Token: $otok" "X-Access-Token: x" "E2B-Traffic-Access-Token: $tok"; do
    for req in "POST /contexts {}" "GET /contexts" "POST /contexts/$ctx/restart" \
      "DELETE /contexts/$ctx" 'POST /execute {"code":"1"}' "GET /nope"; do
      read -r m p b <<<"$req"
      run curl -s -w ' %{http_code}' -X "$m" "${h[@]}" ${cred:+-H "$cred"} ${b:+-d "$b"} "$U$p"
      [[ $output == '{"code":401,'*' 401' ]] || { echo "$cred $req: $output" >&3; false; }
    done
  done
  [ "$(curl -s "${h[@]}" "$U/health")" = '"OK"' ]
  [[ $traffic =~ ^[0-9a-f]{64}$ ]]
  [ "$traffic" != "$tok" ]
  # Nothing was started by those requests: the listing has E2B's default
  # contexts only, which it makes itself.
  run curl -s "${h[@]}" -H "E2B-Traffic-Access-Token: $traffic" "$U/contexts"
  [ "$(echo "$output" | jq -c 'map(.language)')" = '["python","javascript"]' ] || { echo "$output" >&3; false; }
  # The traffic token opens port 49999 (what the SDK sends), not envd.
  run curl -s -w ' %{http_code}' "${h[@]}" -H "E2B-Traffic-Access-Token: $traffic" \
    -d '{"language":"bash"}' "$U/contexts"
  [[ $output == '{"id":"'*'","language":"bash",'*' 200' ]]
  local cid=${output:7:32}
  run curl -s -w ' %{http_code}' -X POST -H "E2b-Sandbox-Id: $id" -H 'Content-Type: application/json' \
    -H "E2B-Traffic-Access-Token: $traffic" -d '{}' "$U/process.Process/List"
  [[ $output == *' 401' ]]
  run curl -s -w ' %{http_code}' -X DELETE "${h[@]}" -H "X-Access-Token: $tok" "$U/contexts/$cid"
  [ "$output" = 'null 200' ]
  for x in $id $other; do curl -s -X DELETE -H "X-API-KEY: $KEY" "$U/sandboxes/$x" >/dev/null; done
}

holds_lock() { ls -l "/proc/$SRV_PID/fd" 2>/dev/null | grep -q code.lock; }

# Issue 24, finding 1: a kernel's start held the server's one loop (four
# creates delayed everyone by 18 s), and so did the lock of a default
# context another front end was making.
@test "code: a kernel's start, or a lock another front end holds, stalls no other request" {
  serve_start
  local c id tok full
  c=$(curl -s -X POST -H "X-API-KEY: $KEY" -H 'Content-Type: application/json' \
    -d '{"templateID":"code-interpreter-v1","timeout":120}' "$U/sandboxes")
  id=$(echo "$c" | jq -r .sandboxID)
  tok=$(echo "$c" | jq -r .envdAccessToken)
  full=$(ax ls -q --no-trunc | grep "^$id")
  local h=(-H "E2b-Sandbox-Id: $id" -H "E2b-Sandbox-Port: 49999" -H 'Content-Type: application/json'
    -H "X-Access-Token: $tok")
  # Another front end (agsx code) making the default context: its lock,
  # held for 20 s at most (an old server would wait that long in flock).
  flock -o -x "$STATE/$full/code.lock" sleep 20 &
  local holder=$!
  poll 50 bash -c "! flock -n '$STATE/$full/code.lock' true"
  curl -sN -m 60 "${h[@]}" -d '{"code":"6 * 7"}' "$U/execute" >"$T/exec.out" &
  local cpid=$!
  poll 100 holds_lock # the server has the request and waits for the lock
  local t0=$SECONDS
  run curl -s -m 10 -o /dev/null -w '%{http_code}' -H "X-API-KEY: $KEY" "$U/v2/sandboxes"
  [ "$output" = 200 ]
  run curl -s -m 10 -o /dev/null -w '%{http_code}' -H "E2b-Sandbox-Id: $id" "$U/health"
  [ "$output" = 204 ]
  [ $((SECONDS - t0)) -lt 5 ]
  kill "$holder" # released: the execution goes on
  wait "$holder" || true
  wait "$cpid"
  grep -q '"text":"42"' "$T/exec.out" || { cat "$T/exec.out"; false; }
  # Kernels starting in parallel: a request sent after them is answered
  # before the first of them is up.
  local i pids=()
  for i in 1 2 3; do
    (curl -s -m 120 "${h[@]}" -d '{"language":"python"}' "$U/contexts" >"$T/ctx$i" &&
      date +%s%N >"$T/ctx$i.at") &
    pids+=($!)
  done
  poll 100 bash -c "[ \$(ls -l /proc/$SRV_PID/fd | grep -c 'procs.*log') -ge 3 ]" || true
  curl -s -m 10 -o /dev/null -H "E2b-Sandbox-Id: $id" "$U/health"
  local answered
  answered=$(date +%s%N)
  wait "${pids[@]}"
  for i in 1 2 3; do
    [[ $(cat "$T/ctx$i") == '{"id":"'* ]] || { cat "$T/ctx$i"; false; }
    [ "$answered" -lt "$(cat "$T/ctx$i.at")" ]
  done
  curl -s -X DELETE -H "X-API-KEY: $KEY" "$U/sandboxes/$id" >/dev/null
}

@test "code: port 49999 /execute takes a 4 MiB cell; 16 MiB is its cap, other routes keep 1 MiB" {
  serve_start
  local c id tok
  c=$(curl -s -X POST -H "X-API-KEY: $KEY" -H 'Content-Type: application/json' \
    -d '{"templateID":"code-interpreter-v1","timeout":120}' "$U/sandboxes")
  id=$(echo "$c" | jq -r .sandboxID)
  tok=$(echo "$c" | jq -r .envdAccessToken)
  local h=(-H "E2b-Sandbox-Id: $id" -H "E2b-Sandbox-Port: 49999" -H 'Content-Type: application/json')
  # 4 MiB of code: a string literal and its length, the last expression.
  python3 -c 'import json; print(json.dumps({"code": "s = \"" + "a" * (4 << 20) + "\"\nlen(s)"}))' \
    >"$T/big.json"
  [ "$(stat -c %s "$T/big.json")" -gt $((4 << 20)) ]
  curl -sN "${h[@]}" -H "X-Access-Token: $tok" --data-binary @"$T/big.json" "$U/execute" >"$T/out"
  grep -qx '{"type":"result","text":"4194304","extra":{},"is_main_result":true}' "$T/out" ||
    { cat "$T/out"; false; }
  [ "$(tail -1 "$T/out")" = '{"type":"end_of_execution"}' ]
  # Past 16 MiB: 413 before the body is read; the server goes on.
  python3 -c 'import json; print(json.dumps({"code": "#" + "a" * (16 << 20)}))' >"$T/huge.json"
  [ "$(curl -s -o /dev/null -w '%{http_code}' "${h[@]}" -H "X-Access-Token: $tok" \
    --data-binary @"$T/huge.json" "$U/execute")" = 413 ]
  # The other routes keep 1 MiB, on port 49999 too.
  python3 -c 'import json; print(json.dumps({"language": "python", "cwd": "/" + "a" * (2 << 20)}))' \
    >"$T/ctx.json"
  [ "$(curl -s -o /dev/null -w '%{http_code}' "${h[@]}" -H "X-Access-Token: $tok" \
    --data-binary @"$T/ctx.json" "$U/contexts")" = 413 ]
  [ "$(curl -s -o /dev/null -w '%{http_code}' -X POST -H "X-API-KEY: $KEY" \
    -H 'Content-Type: application/json' --data-binary @"$T/big.json" "$U/sandboxes")" = 413 ]
  curl -sN "${h[@]}" -H "X-Access-Token: $tok" -d '{"code":"6 * 7"}' "$U/execute" | grep -q '"text":"42"'
  curl -s -X DELETE -H "X-API-KEY: $KEY" "$U/sandboxes/$id" >/dev/null
}

# The image is big (700 MB of layer: matplotlib pulls scipy, R its
# toolchain): several minutes the first time (apt-get into the cached
# rootfs), then image load's unpack. Its packages are the recipe's
# (images/code-interpreter/Dockerfile), so the recipe is what is tested.
@test "code: an image made offline with Debian's packages (debootstrap): python, js, ts, r contexts in it" {
  heavy
  local pkgs
  pkgs=$("$FIXTURES/debian-rootfs" --packages-of "$AGSX_SRCDIR/images/code-interpreter/Dockerfile")
  [[ "$pkgs" == python3,*r-cran-irkernel* ]] || { echo "packages: $pkgs"; false; }
  DEBIAN_ROOTFS_EXTRA=$pkgs "$FIXTURES/debian-rootfs" --oci "$T/ci" --ref code-interpreter:latest \
    >/dev/null 2>"$T/rootfs.log" || skip "debootstrap failed (no Debian archive?): $(tail -1 "$T/rootfs.log")"
  run_ax image load "$T/ci"
  assert_success
  run_ax run -d --name ci --timeout 5m code-interpreter sleep infinity
  assert_success
  run_ax code --json ci 'import sys, numpy, pandas as pd, matplotlib.pyplot as plt
plt.plot(numpy.arange(3)); plt.show()
pd.DataFrame({"v": [1]})'
  assert_success
  echo "$output" | jq_ '.results | length == 2' >/dev/null
  echo "$output" | jq_ '(.results[0].png | length > 1000) and (.results[1].html | test("<table"))' >/dev/null
  run_ax code -l bash ci 'cat /etc/debian_version'
  assert_success
  [[ "$output" == 12.* ]] || { show_run; false; }
  # Debian's node 18 and node-typescript, R 4.2 and IRkernel.
  run_ax code -l js ci "import { platform } from 'os'
await Promise.resolve(platform())"
  assert_success
  [ "$output" = linux ] || { show_run; false; }
  run_ax code -l ts ci 'const n: number = 6; n * 7'
  assert_success
  [ "$output" = 42 ] || { show_run; false; }
  run_ax code --json -l r ci 'x <- c(1, 2); plot(x); sum(x)'
  assert_success
  echo "$output" | jq_ '(.results | map(select(.png)) | length == 1) and any(.results[]; .text == "[1] 3")' >/dev/null
}
