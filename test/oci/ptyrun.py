#!/usr/bin/env python3
"""Runs a command on a terminal of its own, as a user would in a terminal
window (test/oci: a foreground `exec --tty` without --console-socket).

  ptyrun.py ROWS COLS SCRIPT -- CMD...

SCRIPT is steps separated by ';': `wait:TEXT` (until the output holds
TEXT, 20 s at most), `send:TEXT` (\\n for a newline), `resize:R,C` (the
terminal's size; the kernel sends SIGWINCH). Prints the output, then lines
`status=N`, `echo-restored=0|1` (the terminal's ECHO flag after the command
ended is what it was before: raw mode undone) and `was-raw=0|1` (ECHO was
off while the command ran).
"""
import fcntl, os, pty, select, struct, sys, termios, time

rows, cols, script = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
cmd = sys.argv[sys.argv.index("--") + 1:]

pid, fd = pty.fork()
if pid == 0:
    os.execvp(cmd[0], cmd)
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
echo_before = termios.tcgetattr(fd)[3] & termios.ECHO
out = b""
was_raw = 0


def pump(timeout):
    global out, was_raw
    r, _, _ = select.select([fd], [], [], timeout)
    if not r:
        return True
    try:
        data = os.read(fd, 4096)
    except OSError:
        return False
    if not data:
        return False
    out += data
    if not termios.tcgetattr(fd)[3] & termios.ECHO:
        was_raw = 1
    return True


alive = True
for step in script.split(";"):
    kind, _, arg = step.partition(":")
    if kind == "wait":
        end = time.time() + 20
        while alive and arg.encode() not in out and time.time() < end:
            alive = pump(0.2)
    elif kind == "send":
        if not termios.tcgetattr(fd)[3] & termios.ECHO:
            was_raw = 1
        os.write(fd, arg.replace("\\n", "\r").encode())
    elif kind == "resize":
        r, c = arg.split(",")
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", int(r), int(c), 0, 0))
end = time.time() + 30
st = None
while st is None and time.time() < end:
    if alive:
        alive = pump(0.5)
    else:
        time.sleep(0.1)
    w, s = os.waitpid(pid, os.WNOHANG)
    if w:
        st = s
while alive:  # what is left in the terminal
    alive = pump(0.2) and select.select([fd], [], [], 0)[0] != []
try:
    echo_after = termios.tcgetattr(fd)[3] & termios.ECHO
except termios.error:
    echo_after = -1
if st is None:
    _, st = os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace").replace("\r", ""))
print("\nstatus=%d" % (os.waitstatus_to_exitcode(st)))
print("echo-restored=%d" % (1 if echo_after == echo_before else 0))
print("was-raw=%d" % was_raw)
