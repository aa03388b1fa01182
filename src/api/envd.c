/* agsx — api: envd's routes for a sandbox (e2b-protocol.md §3): /health,
 * the process.Process service over the supervisor's processes
 * (sandbox/processes.h), and the filesystem glue (files.c).
 *
 * A Start or Connect stream replays the process's log from its start and
 * then follows it: so a client that reconnects (commands.connect, or the
 * same client after the server restarted) gets the whole output the log
 * still holds (its cap: logbuf.h) and then what comes. */
#include "config.h"

#include "api/api-internal.h"
#include "api/auth.h"
#include "api/body.h"
#include "api/files.h"
#include "sandbox/copy.h"
#include "sandbox/passwd.h"
#include "sandbox/processes.h"

#include <signal.h>
#include <string.h>

/* ---- users --------------------------------------------------------------------------------- */

struct envd_user {
  char *name;
  char home[256];
  bool has_bash;
};

static void envd_user_clear(struct envd_user *u) { free(u->name); }

/* NAME (NULL: the server's default, else "user" when the image has one,
 * else root) against the sandbox's own /etc/passwd. EKEYREJECTED: unknown. */
static int resolve_user(struct server *s, const struct agsx_record *rec, const char *name,
                        struct envd_user *ret, agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  _cleanup_close_ int root = agsx_copy_open_root(rec, err);
  if (root < 0)
    return agsx_error_set(err, ESRCH, "the sandbox is not running");
  _cleanup_free_ char *pw = NULL, *gr = NULL;
  size_t pwlen = 0, grlen = 0;
  _cleanup_close_ int pfd = agsx_open_in_root(root, "etc/passwd", O_RDONLY | AGSX_O_UNTRUSTED, 0);
  if (pfd >= 0 && agsx_read_fd(pfd, AGSX_PASSWD_MAX, &pw, &pwlen, NULL) < 0)
    pw = NULL;
  _cleanup_close_ int gfd = agsx_open_in_root(root, "etc/group", O_RDONLY | AGSX_O_UNTRUSTED, 0);
  if (gfd >= 0 && agsx_read_fd(gfd, AGSX_PASSWD_MAX, &gr, &grlen, NULL) < 0)
    gr = NULL;
  const char *want = name ? name : s->cfg->default_user;
  struct agsx_user u;
  agsx_error_t e = NULL;
  if (want == NULL) {
    want = agsx_user_resolve("user", pw, pwlen, gr, grlen, &u, &e) == 0 ? "user" : "root";
    agsx_error_free(&e);
  }
  if (agsx_user_resolve(want, pw, pwlen, gr, grlen, &u, &e) < 0) {
    agsx_error_free(&e);
    return agsx_error_set(err, EKEYREJECTED, "invalid username: '%s'", want);
  }
  ret->name = xstrdup(want);
  snprintf(ret->home, sizeof(ret->home), "%s", u.home[0] ? u.home : "/");
  _cleanup_close_ int bash = agsx_open_in_root(root, "bin/bash", O_PATH, 0);
  ret->has_bash = bash >= 0;
  return 0;
}

/* The request's user: Basic auth (RPC) or ?username= (REST); NULL: default.
 * false after answering 401. */
static bool request_user(struct req *r, bool rpc, char **ret) {
  *ret = NULL;
  if (rpc) {
    const char *h = agsx_req_header(r, "Authorization");
    if (h == NULL)
      return true;
    agsx_error_t err = NULL;
    if (agsx_basic_auth_user(h, ret, &err) < 0) {
      agsx_respond_connect_error(r, AGSX_CONNECT_UNAUTHENTICATED, "%s", err->msg);
      agsx_error_free(&err);
      return false;
    }
    return true;
  }
  const char *q = agsx_req_query(r, "username");
  if (q == NULL || *q == '\0')
    return true;
  if (!agsx_api_user_is_valid(q)) {
    agsx_respond_error(r, 401, "invalid username: '%.64s'", q);
    return false;
  }
  *ret = xstrdup(q);
  return true;
}

/* ---- process events ------------------------------------------------------------------------ */

static const char *go_signal_name(int sig) {
  switch (sig) {
  case SIGKILL: return "killed";
  case SIGTERM: return "terminated";
  case SIGINT: return "interrupt";
  case SIGHUP: return "hangup";
  case SIGQUIT: return "quit";
  case SIGABRT: return "aborted";
  case SIGSEGV: return "segmentation fault";
  case SIGPIPE: return "broken pipe";
  case SIGBUS: return "bus error";
  case SIGFPE: return "floating point exception";
  case SIGILL: return "illegal instruction";
  case SIGALRM: return "alarm clock";
  case SIGUSR1: return "user defined signal 1";
  case SIGUSR2: return "user defined signal 2";
  default: return NULL;
  }
}

/* envd's end event, worded as Go's ProcessState: "exit status N" or
 * "signal: killed"; exitCode omitted when 0 (protobuf-JSON drops zeros). */
static void end_event(struct stream *st, int exit_code, int term_signal) {
  char status[64];
  if (term_signal > 0) {
    const char *n = go_signal_name(term_signal);
    if (n)
      snprintf(status, sizeof(status), "signal: %s", n);
    else
      snprintf(status, sizeof(status), "signal: signal %d", term_signal);
  } else {
    snprintf(status, sizeof(status), "exit status %d", exit_code);
  }
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_key(g, "event");
  yajl_gen_map_open(g);
  agsx_json_key(g, "end");
  yajl_gen_map_open(g);
  int code = term_signal > 0 ? -1 : exit_code;
  if (code != 0)
    agsx_json_kv_int(g, "exitCode", code);
  agsx_json_kv_bool(g, "exited", term_signal <= 0);
  agsx_json_kv_str(g, "status", status);
  if (code != 0)
    agsx_json_kv_str(g, "error", status);
  yajl_gen_map_close(g);
  yajl_gen_map_close(g);
  yajl_gen_map_close(g);
  size_t len;
  _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
  agsx_stream_event(st, s);
}

static void data_event(struct stream *st, const char *kind, const char *buf, size_t len) {
  _cleanup_free_ char *b = agsx_base64_encode(buf, len);
  _cleanup_free_ char *s = xasprintf("{\"event\":{\"data\":{\"%s\":\"%s\"}}}", kind, b);
  agsx_stream_event(st, s);
}

static void deadline_exceeded(struct stream *st) {
  agsx_stream_end(st, AGSX_CONNECT_DEADLINE_EXCEEDED, "context deadline exceeded");
}

/* The process ended: its END record, or (a log without one: the
 * supervisor died) what the supervisor recorded. */
static void process_ended(struct stream *st, const struct agsx_log_rec *rec, int64_t now) {
  int exit_code = 0, sig = 0;
  if (rec && rec->kind == AGSX_LOG_END) {
    exit_code = rec->exit_code;
    sig = rec->term_signal;
  } else {
    struct agsx_process_info info = {0};
    agsx_error_t err = NULL;
    if (agsx_process_get(st->s->statefd, st->id, st->pid, &info, &err) == 0 && !info.running) {
      exit_code = info.exit_code;
      sig = info.term_signal;
    } else {
      agsx_error_free(&err);
      agsx_process_info_clear(&info);
      agsx_stream_abort(st); /* the sandbox ended */
      return;
    }
    agsx_process_info_clear(&info);
  }
  /* Killed with its sandbox (a kill, the sandbox's timeout): no exit of
   * its own but the end of the sandbox, as E2B's proxy drops it. */
  struct agsx_record sb;
  agsx_error_t gone = NULL;
  if (agsx_api_find_sandbox(st->s, st->id, &sb, &gone) < 0) {
    agsx_error_free(&gone);
    agsx_stream_abort(st);
    return;
  }
  agsx_record_clear(&sb);
  /* Killed at the stream's deadline (its Connect-Timeout-Ms, which the
   * supervisor enforces as the process's timeout): a timeout for the SDK,
   * as envd's context deadline is. */
  if (st->started_here && st->deadline_ns > 0 && sig == SIGKILL &&
      now >= st->deadline_ns - 250 * 1000000LL) {
    deadline_exceeded(st);
    return;
  }
  end_event(st, exit_code, sig);
  agsx_stream_end(st, -1, NULL);
}

void agsx_api_stream_pump(struct stream *st, int64_t now) {
  if (st->code) {
    agsx_api_code_pump(st, now);
    return;
  }
  if (st->watch) {
    agsx_api_files_watch_pump(st, now);
    return;
  }
  if (st->log == NULL)
    return;
  /* Bounded per turn, and not while the client is slow to take it. */
  for (int i = 0; i < 1024 && agsx_stream_has_room(st); i++) {
    struct agsx_log_rec rec;
    agsx_error_t err = NULL;
    int rc = agsx_log_next(st->log, &rec, &err);
    if (rc == 0)
      break;
    if (rc < 0) {
      agsx_stream_end(st, AGSX_CONNECT_INTERNAL, err->msg);
      agsx_error_free(&err);
      return;
    }
    if (rc == 2 || rec.kind == AGSX_LOG_END) {
      process_ended(st, rc == 1 || rec.kind == AGSX_LOG_END ? &rec : NULL, now);
      return;
    }
    if (rec.kind == AGSX_LOG_STDOUT)
      data_event(st, "stdout", rec.data, rec.len);
    else if (rec.kind == AGSX_LOG_STDERR)
      data_event(st, "stderr", rec.data, rec.len);
    else if (rec.kind == AGSX_LOG_PTY)
      data_event(st, "pty", rec.data, rec.len);
    else if (rec.kind == AGSX_LOG_LOST) {
      /* The log is bounded and never waits for its readers: say what was
       * dropped rather than splice the output silently. */
      char note[160];
      int n = snprintf(note, sizeof(note),
                       "\nagsx: %llu bytes of output were dropped (the process's log keeps "
                       "the last %u MiB and this reader fell behind)\n",
                       (unsigned long long)rec.lost, (unsigned)(AGSX_LOG_DEFAULT_CAP >> 20));
      data_event(st, st->pty ? "pty" : "stderr", note, (size_t)n);
    }
  }
  if (!st->ended && st->deadline_ns > 0 && now >= st->deadline_ns)
    deadline_exceeded(st);
}

void agsx_api_stream_free_parts(struct stream *st) {
  agsx_api_code_free(st);
  agsx_log_reader_free(st->log);
  st->log = NULL;
  agsx_api_files_watch_free(st);
}

/* ---- process.Process ------------------------------------------------------------------------ */

/* A ProcessSelector {"pid": N} or {"tag": "x"}: the pid; 0 after answering. */
static uint32_t selector_pid(struct req *r, yajl_val body, bool stream, struct stream *st) {
  yajl_val sel = agsx_json_get(body, "process");
  yajl_val pid = YAJL_IS_OBJECT(sel) ? agsx_json_get(sel, "pid") : NULL;
  const char *tag = YAJL_IS_OBJECT(sel) ? agsx_json_get_string(sel, "tag") : NULL;
  int64_t n = 0;
  if (pid && YAJL_IS_INTEGER(pid))
    n = YAJL_GET_INTEGER(pid);
  else if (pid && YAJL_IS_STRING(pid))
    n = strtoll(pid->u.string, NULL, 10);
  if (n > 0 && n <= UINT32_MAX)
    return (uint32_t)n;
  if (tag) {
    struct agsx_process_info info = {0};
    agsx_error_t err = NULL;
    if (agsx_process_find_tag(r->s->statefd, r->rec.id, tag, &info, &err) == 0) {
      uint32_t p = info.pid;
      agsx_process_info_clear(&info);
      return p;
    }
    agsx_error_free(&err);
    if (stream)
      agsx_stream_end(st, AGSX_CONNECT_NOT_FOUND, "process with tag not found");
    else
      agsx_respond_connect_error(r, AGSX_CONNECT_NOT_FOUND, "process with tag '%.64s' not found",
                                 tag);
    return 0;
  }
  if (stream)
    agsx_stream_end(st, AGSX_CONNECT_INVALID_ARGUMENT, "a process selector (pid or tag) is needed");
  else
    agsx_respond_connect_error(r, AGSX_CONNECT_INVALID_ARGUMENT,
                               "a process selector (pid or tag) is needed");
  return 0;
}

/* A unary Process call's body and the pid its selector names; 0 after
 * answering (a bad body, no selector, an unknown tag). */
static uint32_t unary_selected(struct req *r, yajl_val *ret_body) {
  *ret_body = agsx_api_parse_body(r, true);
  return *ret_body ? selector_pid(r, *ret_body, false, NULL) : 0;
}

static void unary_error(struct req *r, agsx_error_t *err) {
  int e = agsx_error_errno(err);
  enum agsx_connect_code code = agsx_connect_code_of_errno(e);
  if (e == ENOENT)
    code = AGSX_CONNECT_NOT_FOUND;
  agsx_respond_connect_error(r, code, "%s", (*err)->msg);
  agsx_error_free(err);
}

static void respond_empty(struct req *r) { agsx_respond(r, 200, "application/json", "{}", 2); }

static int64_t header_ms(struct req *r, const char *name) {
  const char *v = agsx_req_header(r, name);
  if (v == NULL)
    return 0;
  char *end;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  if (*end || n < 0 || errno)
    return 0;
  /* Nothing outlives its sandbox: a day at most (and no overflow below). */
  return n > AGSX_API_TIMEOUT_MAX * 1000LL ? AGSX_API_TIMEOUT_MAX * 1000LL : (int64_t)n;
}

/* The stream for Start and Connect: its deadline (Connect-Timeout-Ms) and
 * keepalive (Keepalive-Ping-Interval, seconds). */
static struct stream *process_stream(struct req *r) {
  struct stream *st = agsx_stream_new(r->s, r->c);
  int64_t to = header_ms(r, "Connect-Timeout-Ms");
  if (to > 0)
    st->deadline_ns = agsx_mono_ns() + to * 1000000LL;
  int64_t ka = header_ms(r, "Keepalive-Ping-Interval");
  if (ka > 0 && ka <= 3600)
    st->keepalive_ns = ka * 1000000000LL;
  snprintf(st->id, sizeof(st->id), "%s", r->rec.id);
  return st;
}

/* Follows process PID's log from its start on ST, after the start event. */
static void follow(struct req *r, struct stream *st, uint32_t pid) {
  agsx_error_t err = NULL;
  st->pid = pid;
  _cleanup_free_ char *start = xasprintf("{\"event\":{\"start\":{\"pid\":%u}}}", pid);
  agsx_stream_event(st, start);
  if (agsx_process_log_open(r->s->statefd, r->rec.id, pid, AGSX_LOG_FROM_START, &st->log, &err) <
      0) {
    agsx_stream_end(st, AGSX_CONNECT_INTERNAL, err->msg);
    agsx_error_free(&err);
  } else if (agsx_stream_watch_fd(st, agsx_log_reader_fd(st->log)) < 0) {
    agsx_stream_end(st, AGSX_CONNECT_RESOURCE_EXHAUSTED, "too many streams");
  }
  agsx_api_stream_pump(st, agsx_mono_ns());
  agsx_respond_stream(r, st);
}

static bool parse_connect_body(struct req *r, yajl_val *ret) {
  const char *msg;
  size_t len;
  agsx_error_t err = NULL;
  *ret = NULL;
  if (agsx_connect_envelope(r->body.p ? r->body.p : "", r->body.len, &msg, &len, &err) < 0) {
    agsx_respond_connect_error(r, AGSX_CONNECT_INVALID_ARGUMENT, "%s", err->msg);
    agsx_error_free(&err);
    return false;
  }
  yajl_val v = agsx_json_parse(len ? msg : "{}", len ? len : 2, AGSX_API_BODY_MAX, &err);
  if (v == NULL || !YAJL_IS_OBJECT(v)) {
    agsx_respond_connect_error(r, AGSX_CONNECT_INVALID_ARGUMENT, "invalid request: %s",
                               err ? err->msg : "not a JSON object");
    agsx_error_free(&err);
    yajl_tree_free(v);
    return false;
  }
  *ret = v;
  return true;
}

static void process_start(struct req *r) {
  const char *msg;
  size_t len;
  agsx_error_t err = NULL;
  if (agsx_connect_envelope(r->body.p ? r->body.p : "", r->body.len, &msg, &len, &err) < 0)
    return unary_error(r, &err);
  struct agsx_api_start q;
  if (agsx_api_start_parse(msg, len, &q, &err) < 0)
    return unary_error(r, &err);
  /* Every owning local before the first goto: a jump past a cleanup
   * variable's initialisation would free garbage at the end. */
  _cleanup_free_ char *uname = NULL, *home = NULL, *user = NULL, *logname = NULL, *cwd = NULL;
  _cleanup_strv_ char **argv = NULL, **env = NULL;
  struct envd_user u = {0};
  if (!request_user(r, true, &uname))
    goto out;
  if (resolve_user(r->s, &r->rec, uname, &u, &err) < 0) {
    unary_error(r, &err);
    goto out;
  }
  agsx_api_mark(&r->tm, "user");
  /* The SDK runs everything through /bin/bash; images without bash get
   * /bin/sh, which takes the same -l, -i and -c. */
  agsx_strv_push(&argv, strcmp(q.cmd, "/bin/bash") == 0 && !u.has_bash ? "/bin/sh" : q.cmd);
  for (size_t i = 0; q.args && q.args[i]; i++)
    agsx_strv_push(&argv, q.args[i]);
  home = xasprintf("HOME=%s", u.home);
  user = xasprintf("USER=%s", u.name);
  logname = xasprintf("LOGNAME=%s", u.name);
  agsx_strv_push(&env, home);
  agsx_strv_push(&env, user);
  agsx_strv_push(&env, logname);
  for (size_t i = 0; q.envs && q.envs[i]; i++)
    agsx_strv_push(&env, q.envs[i]);
  if (q.cwd)
    cwd = q.cwd[0] == '/'   ? xstrdup(q.cwd)
          : q.cwd[0] == '~' ? xasprintf("%s%s", u.home, q.cwd + 1)
                            : xasprintf("%s/%s", u.home, q.cwd);
  struct stream *st = process_stream(r);
  int64_t to = header_ms(r, "Connect-Timeout-Ms");
  struct agsx_process_spec spec = {
      .argv = argv,
      .env = env,
      .cwd = cwd ? cwd : u.home,
      .user = u.name,
      .tag = q.tag,
      .pty = q.pty,
      .cols = q.cols,
      .rows = q.rows,
      .stdin_open = q.stdin_open,
      .timeout_ms = (uint64_t)to,
  };
  struct agsx_process_info info = {0};
  int code = 0;
  st->started_here = true;
  st->pty = q.pty;
  if (agsx_process_start(r->s->statefd, r->rec.id, &spec, &info, &code, &err) < 0) {
    int e = agsx_error_errno(&err);
    if (e == ESRCH) {
      agsx_stream_free(st);
      agsx_error_free(&err);
      agsx_api_respond_gone(r);
      goto out;
    }
    enum agsx_connect_code c = code == 126 || code == 127 ? AGSX_CONNECT_INVALID_ARGUMENT
                               : e == EAGAIN              ? AGSX_CONNECT_UNAVAILABLE
                                                          : agsx_connect_code_of_errno(e);
    _cleanup_free_ char *m = xasprintf("error starting process: %s", err->msg);
    agsx_error_free(&err);
    agsx_stream_end(st, c, m);
    agsx_respond_stream(r, st);
    goto out;
  }
  agsx_api_mark(&r->tm, "process started");
  uint32_t pid = info.pid;
  agsx_process_info_clear(&info);
  follow(r, st, pid);
out:
  envd_user_clear(&u);
  agsx_api_start_clear(&q);
}

static void process_connect(struct req *r) {
  _cleanup_json_ yajl_val body = NULL;
  if (!parse_connect_body(r, &body))
    return;
  struct stream *st = process_stream(r);
  uint32_t pid = selector_pid(r, body, true, st);
  if (pid == 0)
    return agsx_respond_stream(r, st);
  struct agsx_process_info info = {0};
  agsx_error_t err = NULL;
  if (agsx_process_get(r->s->statefd, r->rec.id, pid, &info, &err) < 0) {
    agsx_stream_end(st, AGSX_CONNECT_NOT_FOUND, "process with pid not found");
    agsx_error_free(&err);
    return agsx_respond_stream(r, st);
  }
  st->pty = info.pty;
  agsx_process_info_clear(&info);
  follow(r, st, pid);
}

static void gen_process(yajl_gen g, const struct agsx_process_info *p) {
  yajl_gen_map_open(g);
  agsx_json_key(g, "config");
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "cmd", p->argv && p->argv[0] ? p->argv[0] : "");
  agsx_json_key(g, "args");
  yajl_gen_array_open(g);
  for (size_t i = 1; p->argv && p->argv[0] && p->argv[i]; i++)
    agsx_json_str(g, p->argv[i]);
  yajl_gen_array_close(g);
  agsx_json_key(g, "envs");
  yajl_gen_map_open(g);
  for (size_t i = 0; p->env && p->env[i]; i++) {
    const char *eq = strchr(p->env[i], '=');
    if (eq == NULL)
      continue;
    yajl_gen_string(g, (const unsigned char *)p->env[i], (size_t)(eq - p->env[i]));
    agsx_json_str(g, eq + 1);
  }
  yajl_gen_map_close(g);
  if (p->cwd)
    agsx_json_kv_str(g, "cwd", p->cwd);
  yajl_gen_map_close(g);
  agsx_json_kv_int(g, "pid", p->pid);
  if (p->tag)
    agsx_json_kv_str(g, "tag", p->tag);
  yajl_gen_map_close(g);
}

static void process_list(struct req *r) {
  _cleanup_json_ yajl_val body = agsx_api_parse_body(r, true);
  if (body == NULL)
    return;
  struct agsx_process_info *v = NULL;
  size_t n = 0;
  agsx_error_t err = NULL;
  if (agsx_process_list(r->s->statefd, r->rec.id, false, &v, &n, &err) < 0)
    return unary_error(r, &err);
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_key(g, "processes");
  yajl_gen_array_open(g);
  for (size_t i = 0; i < n; i++)
    if (v[i].running)
      gen_process(g, &v[i]);
  yajl_gen_array_close(g);
  yajl_gen_map_close(g);
  agsx_process_list_free(v, n);
  agsx_respond_json(r, 200, g);
}

static void process_send_input(struct req *r) {
  _cleanup_json_ yajl_val body = NULL;
  uint32_t pid = unary_selected(r, &body);
  if (pid == 0)
    return;
  yajl_val in = agsx_json_get(body, "input");
  const char *data = YAJL_IS_OBJECT(in) ? agsx_json_get_string(in, "stdin") : NULL;
  bool pty = false;
  if (data == NULL && YAJL_IS_OBJECT(in)) {
    data = agsx_json_get_string(in, "pty");
    pty = data != NULL;
  }
  if (data == NULL)
    return agsx_respond_connect_error(r, AGSX_CONNECT_INVALID_ARGUMENT,
                                      "input.stdin or input.pty is required");
  _cleanup_free_ char *buf = NULL;
  size_t len;
  agsx_error_t err = NULL;
  if (agsx_base64_decode(data, AGSX_PROCESS_INPUT_MAX, &buf, &len, &err) < 0)
    return agsx_respond_connect_error(r, AGSX_CONNECT_INVALID_ARGUMENT, "input: %s", err->msg),
           agsx_error_free(&err);
  if (agsx_process_input(r->s->statefd, r->rec.id, pid, buf, len, pty, &err) < 0)
    return unary_error(r, &err);
  respond_empty(r);
}

static int parse_signal(yajl_val v) {
  if (v && YAJL_IS_INTEGER(v))
    return YAJL_GET_INTEGER(v) == 9 || YAJL_GET_INTEGER(v) == 15 ? (int)YAJL_GET_INTEGER(v) : 0;
  if (v && YAJL_IS_STRING(v)) {
    if (strcmp(v->u.string, "SIGNAL_SIGKILL") == 0)
      return SIGKILL;
    if (strcmp(v->u.string, "SIGNAL_SIGTERM") == 0)
      return SIGTERM;
  }
  return 0;
}

static void process_signal(struct req *r) {
  _cleanup_json_ yajl_val body = NULL;
  uint32_t pid = unary_selected(r, &body);
  if (pid == 0)
    return;
  int sig = parse_signal(agsx_json_get(body, "signal"));
  if (sig == 0)
    return agsx_respond_connect_error(r, AGSX_CONNECT_INVALID_ARGUMENT,
                                      "signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
  agsx_error_t err = NULL;
  if (agsx_process_signal(r->s->statefd, r->rec.id, pid, sig, &err) < 0)
    return unary_error(r, &err);
  respond_empty(r);
}

static void process_close_stdin(struct req *r) {
  _cleanup_json_ yajl_val body = NULL;
  uint32_t pid = unary_selected(r, &body);
  if (pid == 0)
    return;
  agsx_error_t err = NULL;
  if (agsx_process_close_stdin(r->s->statefd, r->rec.id, pid, &err) < 0)
    return unary_error(r, &err);
  respond_empty(r);
}

static void process_update(struct req *r) {
  _cleanup_json_ yajl_val body = NULL;
  uint32_t pid = unary_selected(r, &body);
  if (pid == 0)
    return;
  yajl_val pty = agsx_json_get(body, "pty");
  yajl_val size = YAJL_IS_OBJECT(pty) ? agsx_json_get(pty, "size") : NULL;
  int64_t cols = 0, rows = 0;
  if (!YAJL_IS_OBJECT(size) || !agsx_json_get_int64(size, "cols", &cols) ||
      !agsx_json_get_int64(size, "rows", &rows) || cols <= 0 || rows <= 0 || cols > 10000 ||
      rows > 10000)
    return agsx_respond_connect_error(r, AGSX_CONNECT_INVALID_ARGUMENT,
                                      "pty.size with cols and rows (1 to 10000) is required");
  agsx_error_t err = NULL;
  if (agsx_process_resize(r->s->statefd, r->rec.id, pid, (unsigned)cols, (unsigned)rows, &err) < 0)
    return unary_error(r, &err);
  respond_empty(r);
}

/* ---- routing ------------------------------------------------------------------------------- */

void agsx_api_respond_gone(struct req *r) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "sandboxId", r->e2b_id);
  agsx_json_kv_str(g, "message", "The sandbox was not found");
  agsx_json_kv_int(g, "code", 502);
  yajl_gen_map_close(g);
  agsx_respond_json(r, 502, g);
}

static bool is_connect_json(struct req *r, bool stream) {
  const char *ct = agsx_req_header(r, "Content-Type");
  const char *want = stream ? "application/connect+json" : "application/json";
  if (ct && strncasecmp(ct, want, strlen(want)) == 0)
    return true;
  agsx_respond(r, 415, NULL, "", 0);
  return false;
}

/* Admitted already (admit.c): the sandbox runs, the credentials hold. */
void agsx_api_envd(struct req *r) {
  /* E2B's proxy knows no paused sandbox (its catalog holds running ones):
   * the SDK's isRunning() is false until a connect resumes it. */
  if (r->rec.paused && strcmp(r->path, "/health") == 0)
    return agsx_api_respond_gone(r);
  if (r->port == AGSX_API_PORT_CODE)
    return agsx_api_code(r);
  const char *p = r->path;
  bool post = strcmp(r->method, "POST") == 0;
  if (strcmp(p, "/health") == 0 && strcmp(r->method, "GET") == 0)
    return agsx_respond(r, 204, NULL, "", 0);
  if (strcmp(p, "/files") == 0)
    return agsx_api_files_rest(r);
  if (strcmp(p, "/files/compose") == 0 && post)
    return agsx_api_files_compose(r);
  if (post && agsx_str_has_prefix(p, "/process.Process/")) {
    const char *m = p + strlen("/process.Process/");
    bool stream = strcmp(m, "Start") == 0 || strcmp(m, "Connect") == 0;
    if (strcmp(m, "StreamInput") == 0)
      return agsx_respond_connect_error(r, AGSX_CONNECT_UNIMPLEMENTED,
                                        "StreamInput is not supported (use SendInput)");
    if (!is_connect_json(r, stream))
      return;
    if (strcmp(m, "Start") == 0)
      return process_start(r);
    if (strcmp(m, "Connect") == 0)
      return process_connect(r);
    if (strcmp(m, "List") == 0)
      return process_list(r);
    if (strcmp(m, "SendInput") == 0)
      return process_send_input(r);
    if (strcmp(m, "SendSignal") == 0)
      return process_signal(r);
    if (strcmp(m, "CloseStdin") == 0)
      return process_close_stdin(r);
    if (strcmp(m, "Update") == 0)
      return process_update(r);
  }
  if (post && agsx_str_has_prefix(p, "/filesystem.Filesystem/"))
    return agsx_api_files_rpc(r, p + strlen("/filesystem.Filesystem/"));
  agsx_respond_connect_error(r, AGSX_CONNECT_UNIMPLEMENTED, "no method %s %s", r->method, p);
}
