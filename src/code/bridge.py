# agsx code bridge: one code context inside a sandbox.
#
# Started by src/code/code.c through the sandbox's supervisor (processes.h)
# as `python3 -I -c LOADER LANGUAGE` (python, bash, javascript), with this source in
# the environment variable AGSX_CODE_BRIDGE (removed before anything else
# runs, so kernels and user code do not inherit it).
#
# Protocol (version 1), NDJSON both ways, one JSON object per line:
#   stdin   {"op":"chunk","id":R,"data":S}       part of R's code (lines stay < 64 KiB)
#           {"op":"execute","id":R,"code":S,"env":{K:V},"output_max":N}
#           {"op":"interrupt","id":R}            cancel R: dropped if queued, interrupted if running
#           {"op":"restart","id":R}              fresh state (queued like an execution)
#           {"op":"ping","id":R}                 answered once the kernel is up
#   stdout  {"id":R, "type":..., ...}            E2B's items (number_of_executions, stdout,
#                                                stderr, result, error), then
#           {"id":R,"type":"end_of_execution"}   the last line for R, always
#           {"id":R,"type":"truncated","bytes":N} output beyond output_max was dropped
#           {"id":R,"type":"pong"|"restarted","ok":B,"error":S}
# Every line is ASCII-only JSON (ensure_ascii). Requests are handled one at a
# time in arrival order (Jupyter's queue); interrupts act at once. The C side
# treats every line as untrusted: user code runs as the same user.
import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time

LANGUAGE = sys.argv[1] if len(sys.argv) > 1 else "python"
LINE_MAX = 1 << 20          # a request line longer than this is dropped
CODE_MAX = 64 << 20         # code assembled from chunks
ITEM_TEXT_MAX = 32 << 10    # stream text per item
RESULT_MAX = 16 << 20       # one result item's JSON
INTERRUPT_GRACE = 5.0       # seconds an interrupted cell gets before the kernel is restarted
DEFAULT_OUTPUT_MAX = 32 << 20

# Whatever the starter blocked or ignored, interrupts must reach the kernel
# (it inherits this mask) and SIGTERM must stop us.
signal.pthread_sigmask(signal.SIG_SETMASK, [])
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)

_out_lock = threading.Lock()
_stdout_fd = os.dup(1)
os.set_inheritable(_stdout_fd, False)
# Nothing else may write to the protocol stream: fd 1 of children (and of
# stray writes) goes to stderr, which the supervisor logs apart.
os.dup2(2, 1)


def clean(v):
    """JSON-safe copy: strings with lone surrogates fixed, non-finite floats None."""
    if isinstance(v, str):
        try:
            v.encode("utf-8")
            return v
        except UnicodeEncodeError:
            return v.encode("utf-8", "replace").decode("utf-8")
    if isinstance(v, float):
        return v if v == v and v not in (float("inf"), float("-inf")) else None
    if isinstance(v, dict):
        return {clean(str(k)): clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean(x) for x in v]
    if v is None or isinstance(v, (bool, int)):
        return v
    return clean(str(v))


def emit(obj):
    line = json.dumps(clean(obj), ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    data = (line + "\n").encode("ascii")
    with _out_lock:
        view = memoryview(data)
        while view:
            try:
                n = os.write(_stdout_fd, view)
            except InterruptedError:
                continue
            view = view[n:]


def now_iso():
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%06d+00:00" % int((t % 1) * 1e6)


class Execution:
    def __init__(self, rid, code, env, output_max):
        self.id = rid
        self.code = code
        self.env = env if isinstance(env, dict) else {}
        self.output_max = output_max if isinstance(output_max, int) and output_max > 0 else DEFAULT_OUTPUT_MAX
        self.output = 0
        self.dropped = 0
        self.cancelled = threading.Event()
        self.error_sent = False

    def stream(self, name, text, timestamp=None):
        if not text:
            return
        raw = text.encode("utf-8", "replace")
        room = self.output_max - self.output
        if room <= 0:
            self.dropped += len(raw)
            return
        if len(raw) > room:
            self.dropped += len(raw) - room
            text = raw[:room].decode("utf-8", "ignore")
            raw = raw[:room]
        self.output += len(raw)
        ts = timestamp or now_iso()
        # Items of at most ITEM_TEXT_MAX, cut after a newline where there is one.
        while text:
            part = text[:ITEM_TEXT_MAX]
            if len(text) > ITEM_TEXT_MAX:
                nl = part.rfind("\n")
                if nl > 0:
                    part = part[: nl + 1]
            text = text[len(part):]
            emit({"id": self.id, "type": name, "text": part, "timestamp": ts})

    def error(self, name, value, traceback=""):
        if self.error_sent:
            return
        self.error_sent = True
        emit({"id": self.id, "type": "error", "name": name, "value": value, "traceback": traceback})

    def end(self):
        if self.dropped:
            emit({"id": self.id, "type": "truncated", "bytes": self.dropped})
        emit({"id": self.id, "type": "end_of_execution"})


FIELDS = [
    ("text/plain", "text"), ("text/html", "html"), ("text/markdown", "markdown"),
    ("image/svg+xml", "svg"), ("image/png", "png"), ("image/jpeg", "jpeg"),
    ("application/pdf", "pdf"), ("text/latex", "latex"), ("application/json", "json"),
    ("application/javascript", "javascript"), ("e2b/data", "data"), ("e2b/chart", "chart"),
]


def result_item(rid, data, is_main):
    item = {"id": rid, "type": "result"}
    rest = dict(data) if isinstance(data, dict) else {}
    for mime, field in FIELDS:
        if mime in rest:
            v = rest.pop(mime)
            if field == "text" and isinstance(v, str) and len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
                v = v[1:-1]
            item[field] = v
    item["extra"] = rest
    item["is_main_result"] = is_main
    if len(json.dumps(clean(item), ensure_ascii=True)) > RESULT_MAX:
        item = {"id": rid, "type": "result", "text": "[agsx: result too large, dropped]",
                "extra": {}, "is_main_result": is_main}
    return item


# ---- python: a real IPython kernel (jupyter_client) -------------------------

KERNEL_CONFIG = """
c.InteractiveShell.colors = "NoColor"
c.PlainTextFormatter.max_seq_length = 0
"""

# The kernel's command: ipykernel, with its fd-level capture (output of
# subprocesses and C code, os.write(1, ...)) decoding as UTF-8 with
# replacement: ipykernel 6.17's watcher thread dies at the first invalid byte
# and then drops all fd output.
LAUNCHER = r'''
import codecs, os, sys
import ipykernel.iostream as _io
def _watch(self):
    dec = codecs.getincrementaldecoder("utf-8")("replace")
    try:
        bts = os.read(self._fid, 65536)
        while bts and self._should_watch:
            self.write(dec.decode(bts))
            bts = os.read(self._fid, 65536)
    except Exception:
        self._exc = sys.exc_info()
_io.OutStream._watch_pipe_fd = _watch
from ipykernel import kernelapp
kernelapp.launch_new_instance()
'''

STARTUP = r'''
def _agsx_formatters():
    import sys
    ip = get_ipython()
    f = ip.display_formatter.formatters
    def _frame(df):
        try:
            import json as _j
            return _j.loads(df.to_json(orient="columns", date_format="iso"))
        except Exception:
            return None
    def _data(df):
        try:
            import json as _j
            d = {}
            for col in df.columns:
                d[str(col)] = _j.loads(df[col].to_json(orient="values", date_format="iso"))
            return d
        except Exception:
            return None
    from IPython.core.formatters import BaseFormatter
    class _E2bData(BaseFormatter):
        format_type = "e2b/data"
        print_method = "_repr_e2b_data_"
        _return_type = (dict,)
    f["e2b/data"] = _E2bData(parent=ip.display_formatter)
    f["e2b/data"].for_type_by_name("pandas.core.frame", "DataFrame", _data)
    def _json(obj):
        import json as _j
        try:
            return _j.loads(_j.dumps(obj, default=str))
        except Exception:
            return None
    f["application/json"].for_type(dict, _json)
    f["application/json"].for_type(list, _json)
    def _chart(fig):
        # E2B's chart field (e2b_charts' shapes, which needs a newer
        # matplotlib than Debian's): best effort, and no field at all when
        # the figure is not understood.
        import re as _re
        import datetime as _dt
        from matplotlib.lines import Line2D
        from matplotlib.collections import PathCollection
        from matplotlib.patches import Rectangle, Wedge, PathPatch

        def num(v):
            if isinstance(v, (_dt.datetime, _dt.date)):
                return v.isoformat()
            try:
                import numpy as _np
                if isinstance(v, _np.datetime64):
                    return str(v)
                if isinstance(v, _np.generic):
                    v = v.item()
            except Exception:
                pass
            if isinstance(v, float) and v != v:
                return None
            return v if isinstance(v, (int, float, str)) else str(v)

        def rnd(v):
            # E2B's rounding of derived values (pie angles, box statistics):
            # eight significant digits before the point's magnitude, at least
            # one, so 323.99999999999994 is 324.
            import decimal
            try:
                d = decimal.Decimal(repr(float(v)))
                if not d.is_finite():
                    return None
                ctx = decimal.Context(prec=max(1, 8 - d.adjusted()))
                return float(ctx.plus(d))
            except Exception:
                return num(v)

        def unit(label):
            m = _re.search(r"[(\[]([^)\]]+)[)\]]\s*$", label or "")
            return m.group(1) if m else None

        def scale(axis, name):
            conv = type(getattr(axis, "converter", None)).__name__
            if "Date" in conv:
                return "datetime"
            if "StrCategory" in conv:
                return "categorical"
            return name

        def two_d(ax, kind):
            xl, yl = ax.get_xlabel() or None, ax.get_ylabel() or None
            return {"type": kind, "title": ax.get_title() or None, "x_label": xl, "y_label": yl,
                    "x_unit": unit(xl), "y_unit": unit(yl)}

        def point(ax, kind, series):
            c = two_d(ax, kind)
            for a, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
                sc = scale(axis, axis.get_scale())
                if sc == "datetime":
                    from matplotlib.dates import num2date
                    c[a + "_ticks"] = [num2date(t).isoformat() for t in axis.get_ticklocs()]
                else:
                    c[a + "_ticks"] = [num(t) for t in axis.get_ticklocs()]
                c[a + "_tick_labels"] = [t.get_text() for t in axis.get_ticklabels()]
                c[a + "_scale"] = sc
            els = []
            for i, (label, pts) in enumerate(series):
                if not label or label.startswith("_"):
                    label = "%s %d" % ("Line" if kind == "line" else "Series", i)
                els.append({"label": label, "points": [[num(x), num(y)] for x, y in pts]})
            c["elements"] = els
            return c

        def tick_label(axis, v):
            for loc, t in zip(axis.get_ticklocs(), axis.get_ticklabels()):
                if abs(loc - v) < 1e-9:
                    return t.get_text()
            return str(num(v))

        def bar(ax):
            c = two_d(ax, "bar")
            els = []
            for i, cont in enumerate(getattr(ax, "containers", [])):
                group = cont.get_label()
                if not group or group.startswith("_"):
                    group = "Group %d" % i
                horizontal = getattr(cont, "orientation", "vertical") == "horizontal"
                for r in cont:
                    if horizontal:
                        els.append({"label": tick_label(ax.yaxis, r.get_y() + r.get_height() / 2),
                                    "group": group, "value": num(r.get_width())})
                    else:
                        els.append({"label": tick_label(ax.xaxis, r.get_x() + r.get_width() / 2),
                                    "group": group, "value": num(r.get_height())})
            c["elements"] = els
            return c

        def pie(ax):
            return {"type": "pie", "title": ax.get_title() or None,
                    "elements": [{"label": w.get_label(), "angle": abs(rnd(w.theta2 - w.theta1)),
                                  "radius": num(w.r)} for w in ax.patches]}

        def box(ax):
            c = two_d(ax, "box_and_whisker")
            flat = [l for l in ax.lines if len(l.get_xdata()) == 2 and l.get_ydata()[0] == l.get_ydata()[1]]
            els = []
            for p in ax.patches:
                v = p.get_path().vertices
                x0, x1 = float(min(v[:, 0])), float(max(v[:, 0]))
                q1, q3 = float(min(v[:, 1])), float(max(v[:, 1]))
                ys = [float(l.get_ydata()[0]) for l in flat if x0 - 1e-9 <= min(l.get_xdata()) and max(l.get_xdata()) <= x1 + 1e-9]
                ys += [float(l.get_ydata()[0]) for l in flat if min(l.get_xdata()) > x0 and max(l.get_xdata()) < x1]
                inside = [y for y in ys if q1 < y < q3]
                out = [float(y) for l in ax.lines if l.get_linestyle() in ("None", "", " ")
                       for x, y in zip(l.get_xdata(), l.get_ydata()) if x0 <= x <= x1]
                caps = [y for y in ys if y <= q1 or y >= q3]
                els.append({"label": tick_label(ax.xaxis, (x0 + x1) / 2),
                            "min": rnd(min(caps + [q1])), "first_quartile": rnd(q1),
                            "median": rnd(inside[0]) if inside else None, "third_quartile": rnd(q3),
                            "max": rnd(max(caps + [q3])), "outliers": [rnd(o) for o in out]})
            c["elements"] = els
            return c

        def axis_chart(ax):
            patches = [p for p in ax.patches]
            if patches and all(isinstance(p, Wedge) for p in patches):
                return pie(ax)
            if any(isinstance(p, PathPatch) for p in patches):
                return box(ax)
            if patches and all(isinstance(p, Rectangle) for p in patches) and not ax.collections:
                return bar(ax)
            colls = [c for c in ax.collections if isinstance(c, PathCollection)]
            if colls and len(colls) == len(ax.collections) and not ax.lines and not patches:
                return point(ax, "scatter", [(c.get_label(), c.get_offsets()) for c in colls])
            if ax.lines and not ax.collections and not patches:
                return point(ax, "line", [(l.get_label(), zip(l.get_xdata(), l.get_ydata()))
                                          for l in ax.lines if isinstance(l, Line2D)])
            return {"type": "unknown", "title": ax.get_title() or None, "elements": []}

        try:
            axes = [a for a in fig.get_axes() if a.has_data()]
            if not axes:
                return None
            charts = [axis_chart(a) for a in axes]
            if len(charts) == 1:
                return charts[0]
            st = getattr(fig, "_suptitle", None)
            return {"type": "superchart", "title": (st.get_text() if st else None) or None,
                    "elements": charts}
        except Exception:
            return None
    # Not registered by type: importing pyplot under the inline backend pops
    # Figure from every formatter (IPython's select_figure_formats).
    class _E2bChart(BaseFormatter):
        format_type = "e2b/chart"
        print_method = "_repr_e2b_chart_"
        _return_type = (dict,)

        def __call__(self, obj):
            t = type(obj)
            if self.enabled and t.__module__ == "matplotlib.figure" and t.__name__ == "Figure":
                return _chart(obj)
            return super().__call__(obj)
    f["e2b/chart"] = _E2bChart(parent=ip.display_formatter)
_agsx_formatters()
del _agsx_formatters


def _agsx_pil():
    # PIL images as results, as E2B's template does: show() and save() to
    # a path display the image (its png), and no external viewer is
    # started (the host image has xdg-open).
    try:
        from PIL import Image, ImageShow
    except Exception:
        return
    from IPython.display import display

    # Only IPython's viewer (Pillow has one since 9.0): the others start
    # programs (xdg-open) that have no display here.
    ipv = getattr(ImageShow, "IPythonViewer", None)
    ImageShow._viewers[:] = [v for v in ImageShow._viewers if ipv is not None and isinstance(v, ipv)]
    if ipv is not None and not ImageShow._viewers:
        ImageShow.register(ipv)
    saved = Image.Image.save

    def save(self, fp, format=None, **params):
        if isinstance(fp, str):
            display(self)
        return saved(self, fp, format, **params)
    Image.Image.save = save
_agsx_pil()
del _agsx_pil
'''


class Interrupts:
    """The rule every kernel follows for a cancelled cell: interrupt at once,
    and restart the kernel (its state gone) if the cell is still running
    INTERRUPT_GRACE seconds later."""

    def __init__(self, kernel, ex, what):
        self.kernel, self.ex, self.what, self.at = kernel, ex, what, None

    def check(self):
        """False once the kernel was restarted: the cell is over."""
        if self.ex.cancelled.is_set() and self.at is None:
            self.at = time.monotonic()
            self.kernel.interrupt()
        if self.at is not None and time.monotonic() - self.at > INTERRUPT_GRACE:
            self.kernel.start()
            self.ex.error("KernelRestarted", "The cell did not stop when interrupted: "
                          "%s was restarted, its state is gone" % self.what)
            return False
        return True

    def again(self):
        """Interrupt again, if we did, and count the grace from now."""
        if self.at is not None:
            self.at = time.monotonic()
            self.kernel.interrupt()


# R: Debian's IRkernel, driven as the IPython kernel is (jupyter_client,
# no Jupyter server), so R contexts get the same queue, interrupts,
# streaming and rich results.
R_ARGV = ["R", "--slave", "--no-save", "--no-restore", "-e", "IRkernel::main()", "--args", "{connection_file}"]


def r_str(v):
    # An R string literal: JSON's escapes (\" \\ \n \uXXXX) are R's too.
    return json.dumps(str(v), ensure_ascii=False)


class PythonKernel:
    """A Jupyter kernel through jupyter_client: IPython, or R's IRkernel."""

    def __init__(self, cwd, language="python"):
        self.cwd = cwd
        self.language = language
        self.km = None
        self.kc = None
        self.dead = None
        base = tempfile.mkdtemp(prefix="agsx-code-")
        os.environ["JUPYTER_RUNTIME_DIR"] = os.path.join(base, "runtime")
        os.environ["IPYTHONDIR"] = os.path.join(base, "ipython")
        os.environ.setdefault("MPLCONFIGDIR", os.path.join(base, "matplotlib"))
        os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
        # Debian's matplotlib looks for /etc/matplotlibrc only, which an image
        # made of the host's /usr (agsx's host image) lacks: name its own.
        if "MATPLOTLIBRC" not in os.environ and not os.path.exists("/etc/matplotlibrc"):
            import importlib.util
            spec = importlib.util.find_spec("matplotlib")
            for d in ["/usr/share/matplotlib/mpl-data"] + (
                    [os.path.join(os.path.dirname(spec.origin), "mpl-data")] if spec and spec.origin else []):
                if os.path.exists(os.path.join(d, "matplotlibrc")):
                    os.environ["MATPLOTLIBRC"] = os.path.join(d, "matplotlibrc")
                    break
        prof = os.path.join(base, "ipython", "profile_default")
        os.makedirs(os.path.join(prof, "startup"))
        with open(os.path.join(prof, "ipython_kernel_config.py"), "w") as f:
            f.write(KERNEL_CONFIG)
        with open(os.path.join(prof, "startup", "00-agsx.py"), "w") as f:
            f.write(STARTUP)
        spec = os.path.join(base, "jupyter", "kernels", "agsx-python3")
        os.makedirs(spec)
        argv = [sys.executable, "-c", LAUNCHER, "-f", "{connection_file}"] if language == "python" else R_ARGV
        with open(os.path.join(spec, "kernel.json"), "w") as f:
            json.dump({"argv": argv, "display_name": "%s (agsx)" % language, "language": language,
                       "interrupt_mode": "signal"}, f)
        os.environ["JUPYTER_PATH"] = os.path.join(base, "jupyter")

    def start(self):
        from jupyter_client import KernelManager
        self.stop()
        if self.language == "r":
            import shutil
            if shutil.which("R") is None:
                raise RuntimeError("no kernel for language r: R (r-cran-irkernel) is not installed in the sandbox")
        km = KernelManager(kernel_name="agsx-python3", transport="ipc")
        km.ip = os.path.join(os.environ["JUPYTER_RUNTIME_DIR"], "kernel")
        os.makedirs(os.environ["JUPYTER_RUNTIME_DIR"], exist_ok=True)
        km.start_kernel(cwd=self.cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        stdin=subprocess.DEVNULL)
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        self.km, self.kc, self.dead = km, kc, None
        try:  # under --memory, the OOM killer should pick the kernel, not the bridge
            with open("/proc/%d/oom_score_adj" % km.provisioner.process.pid, "w") as f:
                f.write("800")
        except Exception:
            pass

    def stop(self):
        if self.kc is not None:
            try:
                self.kc.stop_channels()
            except Exception:
                pass
        if self.km is not None:
            try:
                self.km.shutdown_kernel(now=True)
            except Exception:
                pass
        self.km = self.kc = None

    def alive(self):
        return self.km is not None and self.km.is_alive()

    def interrupt(self):
        if self.km is not None:
            try:
                self.km.interrupt_kernel()
            except Exception:
                pass

    def silent(self, code):
        mid = self.kc.execute(code, silent=True, store_history=False, allow_stdin=False)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                msg = self.kc.get_shell_msg(timeout=0.5)
            except queue.Empty:
                if not self.alive():
                    return
                continue
            if msg["parent_header"].get("msg_id") == mid:
                return

    def execute(self, ex):
        if not self.alive():
            self.start()
        restore = None
        if ex.env and self.language == "r":
            env = {str(k): str(v) for k, v in ex.env.items()}
            names = "c(%s)" % ", ".join(r_str(k) for k in env)
            self.silent(".agsx_env_saved <- Sys.getenv(%s, unset = NA, names = TRUE)\n"
                        "do.call(Sys.setenv, setNames(as.list(c(%s)), %s))\n"
                        % (names, ", ".join(r_str(v) for v in env.values()), names))
            restore = ("for (.agsx_k in names(.agsx_env_saved)) {\n"
                       "  .agsx_v <- .agsx_env_saved[[.agsx_k]]\n"
                       "  if (is.na(.agsx_v)) Sys.unsetenv(.agsx_k) else "
                       "do.call(Sys.setenv, setNames(list(.agsx_v), .agsx_k))\n"
                       "}\nrm(.agsx_env_saved, .agsx_k, .agsx_v)\n")
        elif ex.env:
            env = {str(k): str(v) for k, v in ex.env.items()}
            self.silent("import os as _agsx_os\n_agsx_env_saved = {k: _agsx_os.environ.get(k) for k in %r}\n"
                        "_agsx_os.environ.update(%r)\n" % (list(env), env))
            restore = ("for _k, _v in _agsx_env_saved.items():\n"
                       "    _agsx_os.environ.pop(_k, None) if _v is None else _agsx_os.environ.__setitem__(_k, _v)\n"
                       "del _agsx_env_saved, _agsx_os\n")
        try:
            self._run(ex)
        finally:
            if restore and self.alive():
                self.silent(restore)

    def _run(self, ex):
        kc = self.kc
        mid = kc.execute(ex.code, store_history=True, allow_stdin=False, stop_on_error=True)
        accepted = False
        intr = Interrupts(self, ex, "the kernel")
        last_check = time.monotonic()
        while True:
            if not intr.check():
                return
            try:
                msg = kc.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                if time.monotonic() - last_check > 0.5:
                    last_check = time.monotonic()
                    if not self.alive():
                        self.report_death(ex)
                        return
                continue
            if msg.get("parent_header", {}).get("msg_id") != mid:
                continue
            t, c = msg["msg_type"], msg["content"]
            date = msg["header"].get("date")
            ts = date.isoformat() if hasattr(date, "isoformat") else None
            if t == "status":
                if c.get("execution_state") == "idle" and accepted:
                    break
            elif t == "execute_input":
                accepted = True
                emit({"id": ex.id, "type": "number_of_executions", "execution_count": c.get("execution_count")})
                # An interrupt that came before the kernel took the cell was
                # ignored (ipykernel installs its SIGINT handler per request).
                intr.again()
            elif t == "stream":
                ex.stream("stderr" if c.get("name") == "stderr" else "stdout", c.get("text", ""), ts)
            elif t in ("display_data", "execute_result"):
                emit(result_item(ex.id, c.get("data", {}), t == "execute_result"))
            elif t == "error":
                ex.error(c.get("ename", ""), c.get("evalue", ""), "".join(c.get("traceback", [])))
        # The reply says whether the cell failed or was aborted.
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            try:
                msg = kc.get_shell_msg(timeout=0.2)
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != mid:
                continue
            c = msg["content"]
            if c.get("status") == "error":
                ex.error(c.get("ename", ""), c.get("evalue", ""), "".join(c.get("traceback", [])))
            elif c.get("status") == "aborted":
                ex.error("ExecutionAborted", "Execution was aborted")
            break

    def report_death(self, ex):
        code = None
        try:
            code = self.km.provisioner.process.poll()
        except Exception:
            pass
        how = "was killed by signal %d" % -code if code is not None and code < 0 else "exited (%s)" % code
        ex.error("DeadKernelError", "The kernel %s (out of memory?); it is restarted on the next execution" % how)
        self.stop()

    def restart(self):
        self.start()


# ---- bash: one persistent shell, sentinel-delimited runs ----------------------

BASH_LOOP = r'''
exec 3<&0 </dev/null
trap ':' INT
while :; do
  IFS= read -r -u 3 __agsx_line || { [ $? -gt 128 ] && continue; exit 0; }
  eval "$__agsx_line"
done
'''


class ChildKernel:
    """A kernel that is one child process in a session of its own (bash,
    node): stopped with its whole group, interrupted by SIGINT."""
    interrupt_group = True

    def __init__(self, cwd):
        self.cwd = cwd
        self.p = None
        self.count = 0

    def extra_files(self):
        return ()

    def stop(self):
        if self.p is not None:
            try:
                os.killpg(self.p.pid, signal.SIGKILL)
            except Exception:
                pass
            self.p.wait()
            for f in (self.p.stdin, self.p.stdout, self.p.stderr) + tuple(self.extra_files()):
                try:
                    if f is not None:
                        f.close()
                except Exception:
                    pass
            self.p = None

    def alive(self):
        return self.p is not None and self.p.poll() is None

    def interrupt(self):
        if self.alive():
            try:
                (os.killpg if self.interrupt_group else os.kill)(self.p.pid, signal.SIGINT)
            except Exception:
                pass

    def restart(self):
        self.start()


class BashShell(ChildKernel):
    def __init__(self, cwd):
        super().__init__(cwd)
        self.dir = tempfile.mkdtemp(prefix="agsx-bash-")

    def start(self):
        self.stop()
        self.p = subprocess.Popen(["bash", "--noprofile", "--norc", "-c", BASH_LOOP], cwd=self.cwd,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  start_new_session=True, close_fds=True)
        self.count = 0

    def execute(self, ex):
        if not self.alive():
            self.start()
        self.count += 1
        emit({"id": ex.id, "type": "number_of_executions", "execution_count": self.count})
        token = os.urandom(12).hex()
        cell = os.path.join(self.dir, "cell")
        with open(cell, "w", encoding="utf-8", errors="replace") as f:
            f.write(ex.code)
            f.write("\n")
        # Per-execution env vars hold for this cell only (as E2B's): each
        # is saved before and put back (or unset) after, in the same line,
        # so the next cell sees the shell's own value.
        names = [str(k) for k in (ex.env or {}) if str(k).isidentifier() and not str(k).startswith("__agsx")]
        save = restore = ""
        for i, k in enumerate(names):
            save += ("if [ -n \"${%s+x}\" ]; then __agsx_s%d=1 __agsx_v%d=\"$%s\"; else __agsx_s%d=; fi; "
                     "export %s=%s; " % (k, i, i, k, i, k, shlex.quote(str(ex.env[k]))))
            restore += ("if [ -n \"$__agsx_s%d\" ]; then export %s=\"$__agsx_v%d\"; else unset %s; fi; "
                        "unset __agsx_s%d __agsx_v%d; " % (i, k, i, k, i, i))
        cmd = save + ". %s; __agsx_rc=$?; %sprintf '\\036%s %%d\\n' $__agsx_rc\n" % (
            shlex.quote(cell), restore, token)
        marker = ("\x1e" + token + " ").encode()
        try:
            self.p.stdin.write(cmd.encode())
            self.p.stdin.flush()
        except OSError:
            pass
        fd = self.p.stdout.fileno()
        os.set_blocking(fd, False)
        buf = b""
        intr = Interrupts(self, ex, "the shell")
        import select
        while True:
            if not intr.check():
                return
            r, _, _ = select.select([fd], [], [], 0.2)
            if not r:
                if buf and marker[:1] not in buf:
                    ex.stream("stdout", buf.decode("utf-8", "replace"))
                    buf = b""
                continue
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not data:
                if buf:
                    ex.stream("stdout", buf.decode("utf-8", "replace"))
                self.p.wait()
                ex.error("", str(self.p.returncode), "")
                self.stop()
                return
            buf += data
            at = buf.find(marker)
            if at >= 0:
                nl = buf.find(b"\n", at)
                if nl < 0:
                    continue
                if at:
                    ex.stream("stdout", buf[:at].decode("utf-8", "replace"))
                rc = buf[at + len(marker):nl].decode("ascii", "replace")
                if rc != "0":
                    ex.error("", rc, "")
                return
            # Keep a possible partial marker, flush whole lines.
            keep = buf.rfind(b"\n") + 1
            if keep and keep >= len(buf) - len(marker):
                ex.stream("stdout", buf[:keep].decode("utf-8", "replace"))
                buf = buf[keep:]
            elif len(buf) > 65536:
                cut = len(buf) - len(marker)
                ex.stream("stdout", buf[:cut].decode("utf-8", "replace"))
                buf = buf[cut:]



# ---- javascript: one node process, a persistent vm context ------------------------

NODE_DRIVER = r"""
'use strict';
const vm = require('vm'), util = require('util'), fs = require('fs'), readline = require('readline');
const CTL = Number(process.env.AGSX_CODE_CTL_FD);
const TS = process.env.AGSX_CODE_TS === '1';
delete process.env.AGSX_CODE_CTL_FD;
delete process.env.AGSX_CODE_TS;
const send = (o) => fs.writeSync(CTL, JSON.stringify(o) + '\n');
// TypeScript's compiler (Debian's node-typescript): it transpiles
// typescript cells and parses every cell, to turn imports into requires and
// run a cell with top-level await as an async function that keeps its
// declarations and returns its last expression.
let ts = null;
for (const p of ['typescript', '/usr/share/nodejs/typescript', '/usr/lib/nodejs/typescript']) {
  try { ts = require(p); break; } catch (e) { /* next */ }
}
const sandbox = { require, process, Buffer, setTimeout, clearTimeout, setInterval, clearInterval,
  setImmediate, clearImmediate, URL, URLSearchParams, TextEncoder, TextDecoder, AbortController,
  fetch: globalThis.fetch, structuredClone: globalThis.structuredClone, console, module: { exports: {} } };
sandbox.exports = sandbox.module.exports;
sandbox.globalThis = sandbox;
sandbox.__agsx_default = (m) => (m && m.__esModule && 'default' in m ? m.default : m);
const ctx = vm.createContext(sandbox);
// text/plain as a REPL shows a value (strings quoted: the bridge strips one
// pair, as E2B's server does with ijavascript's).
const show = (v) => util.inspect(v, { depth: 4 });

function transform(code) {
  if (TS) {
    if (!ts) throw Object.assign(new Error('typescript is not installed in the sandbox (node-typescript)'),
      { name: 'KernelError' });
    code = ts.transpileModule(code, { reportDiagnostics: false, compilerOptions: {
      target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext, isolatedModules: false,
      verbatimModuleSyntax: false, removeComments: false } }).outputText
      .replace(/^export \{\};\s*$/m, '');
  }
  if (!ts) return { code, pre: '', wrap: /\bawait\b/.test(code) ? 'retry' : null };
  const sf = ts.createSourceFile('cell.js', code, ts.ScriptTarget.Latest, true, ts.ScriptKind.JS);
  // A cell that does not parse runs as written: node reports its own error.
  if (sf.parseDiagnostics && sf.parseDiagnostics.length) return { code, pre: '', wrap: null };
  let hasAwait = false;
  const visit = (n) => {
    if (hasAwait || ts.isFunctionLike(n) || ts.isClassLike(n)) return;
    if (n.kind === ts.SyntaxKind.AwaitExpression || (ts.isForOfStatement(n) && n.awaitModifier)) hasAwait = true;
    else ts.forEachChild(n, visit);
  };
  sf.statements.forEach(visit);
  const text = (n) => code.slice(n.getStart(sf), n.end);
  // Top-level declarations become assignments to context globals (declared
  // with var first), so they outlive the cell whether or not it is wrapped,
  // and a cell can run again; function declarations are run first, hoisted.
  const out = [], decl = [], fns = [];
  let lastIsDecl = false;
  sf.statements.forEach((s, i) => {
    const last = i === sf.statements.length - 1;
    lastIsDecl = true;
    if (ts.isImportDeclaration(s)) {
      const spec = text(s.moduleSpecifier), c = s.importClause;
      if (!c) { out.push(`require(${spec});`); return; }
      if (c.name) { decl.push(c.name.text); out.push(`${c.name.text} = __agsx_default(require(${spec}));`); }
      const nb = c.namedBindings;
      if (nb && ts.isNamespaceImport(nb)) { decl.push(nb.name.text); out.push(`${nb.name.text} = require(${spec});`); }
      if (nb && ts.isNamedImports(nb)) {
        const parts = nb.elements.map((e) => { decl.push(e.name.text);
          return e.propertyName ? `${e.propertyName.text}: ${e.name.text}` : e.name.text; });
        out.push(`({ ${parts.join(', ')} } = require(${spec}));`);
      }
      return;
    }
    if (ts.isExportDeclaration(s) || ts.isExportAssignment(s)) return;
    if (ts.isVariableStatement(s)) {
      for (const d of s.declarationList.declarations) {
        const collect = (b) => { if (ts.isIdentifier(b)) decl.push(b.text);
          else b.elements.forEach((e) => { if (!ts.isOmittedExpression(e)) collect(e.name); }); };
        collect(d.name);
        if (d.initializer) out.push(`(${text(d.name)} = ${text(d.initializer)});`);
      }
      return;
    }
    if (ts.isFunctionDeclaration(s) && s.name && s.body) {
      decl.push(s.name.text);
      fns.push(text(s).replace(/^export\s+(default\s+)?/, ''));
      return;
    }
    if (ts.isClassDeclaration(s) && s.name) {
      decl.push(s.name.text);
      out.push(`${s.name.text} = ${text(s).replace(/^export\s+/, '')};`);
      return;
    }
    lastIsDecl = false;
    if (last && hasAwait && ts.isExpressionStatement(s)) { out.push(`return (${text(s.expression)});`); return; }
    out.push(text(s));
  });
  if (lastIsDecl && !hasAwait) out.push('void 0;');
  const pre = (decl.length ? `var ${[...new Set(decl)].join(', ')};\n` : '') + fns.join('\n');
  return { code: out.join('\n'), pre, wrap: hasAwait ? 'async' : null };
}

async function run(code, env) {
  const saved = {};
  for (const [k, v] of Object.entries(env || {})) { saved[k] = process.env[k]; process.env[k] = v; }
  try {
    const t = transform(code);
    const opts = { filename: 'cell.js', breakOnSigint: true };
    if (t.pre) vm.runInContext(t.pre, ctx, opts);
    const wrapped = () => vm.runInContext('(async () => {\n' + t.code + '\n})()', ctx, opts);
    let v;
    if (t.wrap === 'async') {
      v = await wrapped();
    } else {
      try {
        v = vm.runInContext(t.code, ctx, opts);
      } catch (e) {
        // Without a parser: a cell with await fails as a script. Errors of
        // the context come from its own realm: no instanceof.
        if (t.wrap !== 'retry' || !e || e.name !== 'SyntaxError') throw e;
        v = await wrapped();
      }
    }
    if (v && typeof v.then === 'function') v = await v;
    if (v !== undefined) send({ type: 'result', text: show(v) });
  } catch (e) {
    const obj = e !== null && typeof e === 'object';
    send({ type: 'error', name: obj && e.name ? String(e.name) : 'Error',
      value: obj && 'message' in e ? String(e.message) : String(e),
      traceback: obj && e.stack ? String(e.stack) : String(e) });
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k]; else process.env[k] = v;
    }
  }
}
const rl = readline.createInterface({ input: process.stdin });
let chain = Promise.resolve();
rl.on('line', (l) => {
  const m = JSON.parse(l);
  chain = chain.then(async () => { await run(m.code, m.env); send({ type: 'done' }); });
});
process.on('SIGINT', () => {});
send({ type: 'ready' });
"""


class NodeKernel(ChildKernel):
    interrupt_group = False  # node only: breakOnSigint must see it, not its children

    def __init__(self, cwd, typescript=False):
        super().__init__(cwd)
        self.ctl = None
        self.typescript = typescript

    def extra_files(self):
        return (self.ctl,)

    def start(self):
        import shutil
        self.stop()
        node = shutil.which("node") or shutil.which("nodejs")
        if node is None:
            raise RuntimeError("no kernel for language %s: node is not installed in the sandbox" % LANGUAGE)
        r, w = os.pipe()
        env = dict(os.environ, AGSX_CODE_CTL_FD=str(w), AGSX_CODE_TS="1" if self.typescript else "0")
        self.p = subprocess.Popen([node, "-e", NODE_DRIVER], cwd=self.cwd, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                  pass_fds=(w,), start_new_session=True)
        os.close(w)
        self.ctl = os.fdopen(r, "rb", buffering=0)
        self.count = 0
        self.ctlbuf = b""
        msg = self.read_ctl(30)
        if msg is None or msg.get("type") != "ready":
            raise RuntimeError("node did not start")

    def read_ctl(self, timeout):
        import select
        deadline = time.monotonic() + timeout
        while b"\n" not in self.ctlbuf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([self.ctl], [], [], left)
            if r:
                d = os.read(self.ctl.fileno(), 65536)
                if not d:
                    return None
                self.ctlbuf += d
        line, self.ctlbuf = self.ctlbuf.split(b"\n", 1)
        return json.loads(line)

    def execute(self, ex):
        import select
        if not self.alive():
            self.start()
        self.count += 1
        emit({"id": ex.id, "type": "number_of_executions", "execution_count": self.count})
        # The driver sets the cell's env vars and puts them back after it.
        env = {str(k): str(v) for k, v in (ex.env or {}).items()}
        try:
            self.p.stdin.write((json.dumps({"code": ex.code, "env": env}) + "\n").encode())
            self.p.stdin.flush()
        except OSError:
            pass
        outs = {self.p.stdout.fileno(): "stdout", self.p.stderr.fileno(): "stderr"}
        intr = Interrupts(self, ex, "node")
        done = False
        while not done:
            if not intr.check():
                return
            r, _, _ = select.select(list(outs) + [self.ctl.fileno()], [], [], 0.2)
            for fd in r:
                if fd in outs:
                    d = os.read(fd, 65536)
                    if d:
                        ex.stream(outs[fd], d.decode("utf-8", "replace"))
                    continue
                d = os.read(fd, 65536)
                if not d:
                    ex.error("DeadKernelError", "node ended; it is restarted on the next execution")
                    self.stop()
                    return
                self.ctlbuf += d
                while b"\n" in self.ctlbuf:
                    line, self.ctlbuf = self.ctlbuf.split(b"\n", 1)
                    m = json.loads(line)
                    if m.get("type") == "done":
                        done = True
                    elif m.get("type") == "result":
                        emit(result_item(ex.id, {"text/plain": m.get("text", "")}, True))
                    elif m.get("type") == "error":
                        ex.error(m.get("name", ""), m.get("value", ""), m.get("traceback", ""))
            if not r and not self.alive():
                ex.error("DeadKernelError", "node ended; it is restarted on the next execution")
                self.stop()
                return
        # What the cell wrote before it ended is in the pipes already.
        for fd, name in outs.items():
            while select.select([fd], [], [], 0)[0]:
                d = os.read(fd, 65536)
                if not d:
                    break
                ex.stream(name, d.decode("utf-8", "replace"))

# ---- the request loop ---------------------------------------------------------

requests = queue.Queue()
pending = {}      # id -> Execution, queued or running
chunks = {}       # id -> [str]
_state_lock = threading.Lock()


def reader():
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline(LINE_MAX + 1)
        if not line:
            requests.put(None)
            return
        if len(line) > LINE_MAX and not line.endswith(b"\n"):
            while True:  # drop the rest of an overlong line
                more = stdin.readline(LINE_MAX)
                if not more or more.endswith(b"\n"):
                    break
            continue
        try:
            req = json.loads(line)
        except ValueError:
            continue
        if not isinstance(req, dict) or not isinstance(req.get("id"), str):
            continue
        op, rid = req.get("op"), req["id"]
        with _state_lock:
            if op == "chunk" and isinstance(req.get("data"), str):
                parts = chunks.setdefault(rid, [])
                if sum(map(len, parts)) + len(req["data"]) <= CODE_MAX:
                    parts.append(req["data"])
            elif op == "execute":
                code = "".join(chunks.pop(rid, [])) + (req.get("code") if isinstance(req.get("code"), str) else "")
                ex = Execution(rid, code, req.get("env"), req.get("output_max"))
                pending[rid] = ex
                requests.put(("execute", ex))
            elif op == "interrupt":
                chunks.pop(rid, None)  # cancelled before its execute line came
                ex = pending.get(rid)
                if ex is not None:
                    ex.cancelled.set()
            elif op in ("ping", "restart"):
                requests.put((op, rid))


kernel = None


def main():
    global kernel
    cwd = os.getcwd()
    if LANGUAGE in ("python", "r"):
        kernel = PythonKernel(cwd, LANGUAGE)
    elif LANGUAGE == "bash":
        kernel = BashShell(cwd)
    elif LANGUAGE in ("javascript", "typescript"):
        kernel = NodeKernel(cwd, LANGUAGE == "typescript")
    else:
        emit({"id": "", "type": "fatal", "error": "no kernel for language %s" % LANGUAGE})
        return 2
    start_error = None
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        kernel.start()
    except Exception as e:
        start_error = "%s: %s" % (type(e).__name__, e)
    while True:
        req = requests.get()
        if req is None:
            break
        op, arg = req
        if op == "ping":
            emit({"id": arg, "type": "pong", "ok": start_error is None, "error": start_error})
            continue
        if op == "restart":
            try:
                kernel.restart()
                start_error = None
                emit({"id": arg, "type": "restarted", "ok": True, "error": None})
            except Exception as e:
                emit({"id": arg, "type": "restarted", "ok": False, "error": "%s: %s" % (type(e).__name__, e)})
            continue
        ex = arg
        try:
            if ex.cancelled.is_set():
                ex.error("ExecutionAborted", "Execution was aborted")
                continue
            try:
                kernel.execute(ex)
                start_error = None
            except (Exception, KeyboardInterrupt) as e:
                # A stray SIGINT to the bridge itself must not end the loop
                # (every later request would go unanswered).
                ex.error("KernelError", "%s: %s" % (type(e).__name__, e))
        finally:
            ex.end()
            with _state_lock:
                pending.pop(ex.id, None)
    kernel.stop()
    return 0


sys.exit(main())
