/* agsx — code: contexts (bridge processes) and executions over the
 * processes API. See code.h and README.md for the protocol. */
#include "config.h"

#include "code/code.h"
#include "sandbox/processes.h"

#include <ctype.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* The bridge's source, generated from bridge.py at build time. */
extern const char agsx_code_bridge_src[];

#define LOADER                                                                                     \
  "import os;exec(compile(os.environ.pop('AGSX_CODE_BRIDGE'),'agsx-code-bridge','exec'))"
#define CHUNK_LINE_MAX 60000 /* request lines stay below AGSX_PROCESS_INPUT_MAX */
#define STDERR_KEEP 1024     /* bridge stderr quoted when it fails to start */

void agsx_code_context_clear(struct agsx_code_context *c) {
  free(c->language);
  free(c->cwd);
  memset(c, 0, sizeof(*c));
}

void agsx_code_context_list_free(struct agsx_code_context *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    agsx_code_context_clear(&v[i]);
  free(v);
}

static void random_hex(char out[33]) {
  unsigned char b[16];
  if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
    abort(); /* the kernel's CSPRNG does not fail for 16 bytes */
  for (int i = 0; i < 16; i++)
    snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* A context from a process: tag "agsx-code:<32 hex>[:default]", argv
 * python3 -I -c LOADER LANGUAGE. */
static bool from_process(const struct agsx_process_info *p, struct agsx_code_context *ret) {
  if (!p->running || p->tag == NULL || !agsx_str_has_prefix(p->tag, AGSX_CODE_TAG_PREFIX))
    return false;
  const char *id = p->tag + strlen(AGSX_CODE_TAG_PREFIX);
  size_t n = strspn(id, "0123456789abcdef");
  if (n != 32 || (id[32] != '\0' && strcmp(id + 32, ":default") != 0))
    return false;
  if (agsx_strv_len(p->argv) != 5)
    return false;
  memset(ret, 0, sizeof(*ret));
  memcpy(ret->id, id, 32);
  ret->is_default = id[32] != '\0';
  ret->language = xstrdup(p->argv[4]);
  ret->cwd = xstrdup(p->cwd ? p->cwd : "/");
  ret->pid = p->pid;
  ret->started_ns = p->started_ns;
  return true;
}

int agsx_code_context_list(int statefd, const char *sandbox, struct agsx_code_context **ret,
                           size_t *ret_n, agsx_error_t *err) {
  struct agsx_process_info *procs = NULL;
  size_t n = 0;
  if (agsx_process_list(statefd, sandbox, false, &procs, &n, err) < 0)
    return -1;
  struct agsx_code_context *v = xzalloc((n + 1) * sizeof(*v));
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (from_process(&procs[i], &v[k]))
      k++;
  agsx_process_list_free(procs, n);
  /* Oldest first, as E2B lists them in creation order. */
  for (size_t i = 1; i < k; i++)
    for (size_t j = i; j > 0 && v[j].started_ns < v[j - 1].started_ns; j--) {
      struct agsx_code_context t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  *ret = v;
  *ret_n = k;
  return 0;
}

int agsx_code_context_get(int statefd, const char *sandbox, const char *ctxid,
                          struct agsx_code_context *ret, agsx_error_t *err) {
  struct agsx_code_context *v = NULL;
  size_t n = 0, found = n;
  if (agsx_code_context_list(statefd, sandbox, &v, &n, err) < 0)
    return -1;
  size_t len = strlen(ctxid), matches = 0;
  for (size_t i = 0; i < n && len > 0 && len <= 32; i++)
    if (strncmp(v[i].id, ctxid, len) == 0) {
      found = i;
      matches++;
      if (len == 32)
        break;
    }
  if (matches == 1 || (matches > 0 && len == 32)) {
    *ret = v[found];
    memset(&v[found], 0, sizeof(v[found]));
    agsx_code_context_list_free(v, n);
    return 0;
  }
  agsx_code_context_list_free(v, n);
  if (matches > 1)
    return agsx_error_set_quiet(err, EINVAL, "context prefix `%s` is ambiguous", ctxid);
  return agsx_error_set_quiet(err, ENOENT, "Context %s not found", ctxid);
}

/* ---- talking to a bridge ------------------------------------------------ */

/* One request line. The supervisor takes a message whole or refuses it
 * (EAGAIN) while the bridge has not read what is pending: a bridge busy
 * assembling megabytes of code gets time, one that reads nothing for a
 * minute is an error. */
#define SEND_PATIENCE_NS (60 * 1000000000LL)

static int send_line(int statefd, const char *sandbox, uint32_t pid, const char *line, size_t len,
                     agsx_error_t *err) {
  int64_t until = agsx_mono_ns() + SEND_PATIENCE_NS;
  for (long wait_ms = 2;; wait_ms = wait_ms < 100 ? wait_ms * 2 : 100) {
    agsx_error_t e = NULL;
    if (agsx_process_input(statefd, sandbox, pid, line, len, false, &e) == 0)
      return 0;
    if (agsx_error_errno(&e) != EAGAIN || agsx_mono_ns() >= until) {
      *err = e;
      return agsx_error_wrap(err, "send to the code context");
    }
    agsx_error_free(&e);
    struct timespec ts = {0, wait_ms * 1000000L};
    nanosleep(&ts, NULL);
  }
}

/* Reads the log of PID for the reply line {"id":RID,"type":TYPE,"ok":..}
 * for at most TIMEOUT_MS: 0 and *RET_ERROR (NULL when ok). STDERR of the
 * bridge is kept for the message when it ends first. */
struct waiter {
  struct agsx_log_reader *r;
  char *line;
  size_t len, cap;
  char stderr_tail[STDERR_KEEP];
  size_t stderr_len;
};

static void waiter_clear(struct waiter *w) {
  if (w->r)
    agsx_log_reader_free(w->r);
  free(w->line);
}

static void keep_stderr(struct waiter *w, const char *d, size_t n) {
  if (n >= STDERR_KEEP) {
    memcpy(w->stderr_tail, d + n - STDERR_KEEP + 1, STDERR_KEEP - 1);
    w->stderr_len = STDERR_KEEP - 1;
    return;
  }
  if (w->stderr_len + n >= STDERR_KEEP) {
    size_t drop = w->stderr_len + n - (STDERR_KEEP - 1);
    memmove(w->stderr_tail, w->stderr_tail + drop, w->stderr_len - drop);
    w->stderr_len -= drop;
  }
  memcpy(w->stderr_tail + w->stderr_len, d, n);
  w->stderr_len += n;
}

static int check_reply(const char *line, size_t len, const char *rid, const char *type,
                       char **ret_error, bool *done) {
  char prefix[64];
  snprintf(prefix, sizeof(prefix), "{\"id\":\"%s\"", rid);
  if (len < strlen(prefix) || memcmp(line, prefix, strlen(prefix)) != 0)
    return 0;
  _cleanup_error_ agsx_error_t e = NULL;
  _cleanup_json_ yajl_val v = agsx_json_parse(line, len, 1 << 20, &e);
  const char *t = v ? agsx_json_get_string(v, "type") : NULL;
  const char *id = v ? agsx_json_get_string(v, "id") : NULL;
  if (t == NULL || id == NULL || strcmp(t, type) != 0 || strcmp(id, rid) != 0)
    return 0;
  yajl_val ok = agsx_json_get(v, "ok");
  const char *msg = agsx_json_get_string(v, "error");
  *ret_error = ok && YAJL_IS_TRUE(ok) ? NULL : xstrdup(msg ? msg : "the code context failed");
  *done = true;
  return 0;
}

static int wait_reply(struct waiter *w, const char *rid, const char *type, int timeout_ms,
                      char **ret_error, agsx_error_t *err) {
  int64_t deadline = agsx_mono_ns() + (int64_t)timeout_ms * 1000000;
  bool done = false;
  while (!done) {
    struct agsx_log_rec rec;
    int r = agsx_log_next(w->r, &rec, err);
    if (r < 0)
      return agsx_error_wrap(err, "read the code context's output");
    if (r == 2) {
      while (w->stderr_len && isspace((unsigned char)w->stderr_tail[w->stderr_len - 1]))
        w->stderr_len--;
      const char *nl = memrchr(w->stderr_tail, '\n', w->stderr_len);
      size_t off = nl ? (size_t)(nl - w->stderr_tail) + 1 : 0;
      return agsx_error_set(err, 0, "the code context ended%s%.*s", w->stderr_len ? ": " : "",
                            (int)(w->stderr_len - off), w->stderr_tail + off);
    }
    if (r == 0) {
      int left = (int)((deadline - agsx_mono_ns()) / 1000000);
      if (left <= 0)
        return agsx_error_set(err, ETIMEDOUT, "the code context did not answer in %d s",
                              timeout_ms / 1000);
      struct pollfd p = {.fd = agsx_log_reader_fd(w->r), .events = POLLIN};
      if (poll(&p, 1, left < 500 ? left : 500) < 0 && errno != EINTR)
        return agsx_error_set(err, errno, "poll");
      continue;
    }
    if (rec.kind == AGSX_LOG_STDERR) {
      keep_stderr(w, rec.data, rec.len);
      continue;
    }
    if (rec.kind != AGSX_LOG_STDOUT)
      continue;
    for (size_t i = 0; i < rec.len && !done; i++) {
      if (rec.data[i] != '\n') {
        if (w->len < (1u << 20)) {
          if (w->len + 1 >= w->cap)
            w->line = xrealloc(w->line, w->cap = w->cap ? 2 * w->cap : 4096);
          w->line[w->len++] = rec.data[i];
        }
        continue;
      }
      check_reply(w->line, w->len, rid, type, ret_error, &done);
      w->len = 0;
    }
  }
  return 0;
}

/* Sends {"op":OP,"id":RID} and waits for its reply. */
static int request(int statefd, const char *sandbox, uint32_t pid, const char *op, const char *type,
                   uint64_t from, int timeout_ms, agsx_error_t *err) {
  struct waiter w = {0};
  char rid[33], line[128];
  random_hex(rid);
  int r = -1;
  _cleanup_free_ char *fail = NULL;
  if (agsx_process_log_open(statefd, sandbox, pid, from, &w.r, err) < 0)
    goto out;
  int n = snprintf(line, sizeof(line), "{\"op\":\"%s\",\"id\":\"%s\"}\n", op, rid);
  if (send_line(statefd, sandbox, pid, line, (size_t)n, err) < 0)
    goto out;
  if (wait_reply(&w, rid, type, timeout_ms, &fail, err) < 0)
    goto out;
  if (fail) {
    agsx_error_set(err, 0, "%s", fail);
    goto out;
  }
  r = 0;
out:
  waiter_clear(&w);
  return r;
}

static void stop_bridge(int statefd, const char *sandbox, uint32_t pid) {
  _cleanup_error_ agsx_error_t e = NULL;
  agsx_process_close_stdin(statefd, sandbox, pid, &e);
  struct agsx_process_info info = {0};
  for (int i = 0; i < 40; i++) { /* 2 s to shut its kernel down, then signals */
    agsx_error_free(&e);
    if (agsx_process_get(statefd, sandbox, pid, &info, &e) < 0 || !info.running)
      break;
    agsx_process_info_clear(&info);
    if (i == 20)
      agsx_process_signal(statefd, sandbox, pid, SIGTERM, &e);
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  if (info.running)
    agsx_process_signal(statefd, sandbox, pid, SIGKILL, &e);
  agsx_process_info_clear(&info);
}

static int create(int statefd, const char *sandbox, const char *language, const char *cwd,
                  bool is_default, struct agsx_code_context *ret, agsx_error_t *err) {
  _cleanup_free_ char *lang = NULL;
  if (agsx_code_language(language, &lang, err) < 0)
    return -1;
  char id[33];
  random_hex(id);
  _cleanup_free_ char *tag =
      xasprintf(AGSX_CODE_TAG_PREFIX "%s%s", id, is_default ? ":default" : "");
  _cleanup_free_ char *envsrc = xasprintf("AGSX_CODE_BRIDGE=%s", agsx_code_bridge_src);
  char *argv[] = {"python3", "-I", "-c", LOADER, lang, NULL};
  char *env[] = {envsrc, "PYTHONUNBUFFERED=1", NULL};
  struct agsx_process_spec spec = {
      .argv = argv, .env = env, .cwd = cwd, .tag = tag, .stdin_open = true};
  struct agsx_process_info info = {0};
  int code = 0;
  if (agsx_process_start(statefd, sandbox, &spec, &info, &code, err) < 0)
    return agsx_error_wrap(err, "start a %s context", lang);
  uint32_t pid = info.pid;
  agsx_process_info_clear(&info);
  if (request(statefd, sandbox, pid, "ping", "pong", AGSX_LOG_FROM_START,
              AGSX_CODE_START_TIMEOUT_MS, err) < 0) {
    stop_bridge(statefd, sandbox, pid);
    return agsx_error_wrap(err, "Failed to create context");
  }
  memset(ret, 0, sizeof(*ret));
  memcpy(ret->id, id, 33);
  ret->language = steal_ptr(&lang);
  ret->cwd = xstrdup(cwd ? cwd : "/");
  ret->pid = pid;
  ret->is_default = is_default;
  /* The listing's view of the cwd (the sandbox's workdir when CWD is NULL). */
  struct agsx_code_context again;
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_code_context_get(statefd, sandbox, id, &again, &e) == 0) {
    free(ret->cwd);
    ret->cwd = steal_ptr(&again.cwd);
    ret->started_ns = again.started_ns;
    agsx_code_context_clear(&again);
  }
  return 0;
}

int agsx_code_context_create(int statefd, const char *sandbox, const char *language,
                             const char *cwd, struct agsx_code_context *ret, agsx_error_t *err) {
  return create(statefd, sandbox, language, cwd, false, ret, err);
}

int agsx_code_context_default(int statefd, const char *sandbox, const char *language,
                              struct agsx_code_context *ret, agsx_error_t *err) {
  _cleanup_free_ char *lang = NULL;
  if (agsx_code_language(language, &lang, err) < 0)
    return -1;
  _cleanup_close_ int dir = openat(statefd, sandbox, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0)
    return agsx_error_set(err, errno, "open the sandbox's state");
  _cleanup_close_ int lock = agsx_lock_at(dir, "code.lock", true, err);
  if (lock < 0)
    return -1;
  struct agsx_code_context *v = NULL;
  size_t n = 0;
  if (agsx_code_context_list(statefd, sandbox, &v, &n, err) < 0)
    return -1;
  for (size_t i = 0; i < n; i++)
    if (v[i].is_default && strcmp(v[i].language, lang) == 0) {
      *ret = v[i];
      memset(&v[i], 0, sizeof(v[i]));
      agsx_code_context_list_free(v, n);
      return 0;
    }
  agsx_code_context_list_free(v, n);
  return create(statefd, sandbox, lang, NULL, true, ret, err);
}

int agsx_code_context_restart(int statefd, const char *sandbox, const struct agsx_code_context *c,
                              agsx_error_t *err) {
  if (request(statefd, sandbox, c->pid, "restart", "restarted", AGSX_LOG_FROM_END,
              AGSX_CODE_START_TIMEOUT_MS, err) < 0)
    return agsx_error_wrap(err, "Failed to restart context %s", c->id);
  return 0;
}

int agsx_code_context_remove(int statefd, const char *sandbox, const struct agsx_code_context *c,
                             agsx_error_t *err) {
  (void)err;
  stop_bridge(statefd, sandbox, c->pid);
  return 0;
}

/* ---- executions --------------------------------------------------------- */

struct agsx_code_exec {
  int statefd;
  char *sandbox;
  uint32_t pid;
  char rid[33];
  struct agsx_log_reader *r;
  char *line;
  size_t len, cap;
  bool skipping;       /* the rest of a line that was too long or partly lost */
  int64_t deadline_ns; /* monotonic; 0: none */
  uint64_t timeout_ms, output_max, output;
  bool ended, more;
  struct agsx_code_exec_result res;
};

static void put_raw(char **buf, size_t *len, size_t *cap, const char *s) {
  size_t n = strlen(s);
  if (*len + n + 1 > *cap)
    *buf = xrealloc(*buf, *cap = 2 * (*len + n + 1));
  memcpy(*buf + *len, s, n + 1);
  *len += n;
}

/* One request line {"op":"chunk","id":RID,"data":S} of as much of CODE as
 * fits below CHUNK_LINE_MAX, cut between UTF-8 sequences; returns the bytes
 * of CODE it holds. */
static size_t chunk_line(const char *rid, const char *code, size_t len, char **buf, size_t *blen,
                         size_t *cap) {
  size_t piece = len < 48 * 1024 ? len : 48 * 1024;
  for (;;) {
    size_t p = piece;
    while (p < len && p > 1 && ((unsigned char)code[p] & 0xc0) == 0x80)
      p--;
    *blen = 0;
    char head[96];
    int h = snprintf(head, sizeof(head), "{\"op\":\"chunk\",\"id\":\"%s\",\"data\":", rid);
    if (*cap < (size_t)h + 1)
      *buf = xrealloc(*buf, *cap = 4096);
    memcpy(*buf, head, h);
    *blen = h;
    agsx_code_json_ascii_str(buf, blen, cap, code, p);
    if (*blen + 3 <= CHUNK_LINE_MAX || p <= 1) {
      put_raw(buf, blen, cap, "}\n");
      return p;
    }
    piece = p / 2;
  }
}

/* {"op":"execute","id":RID,"env":{..},"output_max":N} */
static char *execute_line(const char *rid, char *const *env, uint64_t output_max, size_t *ret_len) {
  char *b = NULL;
  size_t n = 0, cap = 0;
  char head[128];
  snprintf(head, sizeof(head), "{\"op\":\"execute\",\"id\":\"%s\",\"output_max\":%llu,\"env\":{",
           rid, (unsigned long long)output_max);
  put_raw(&b, &n, &cap, head);
  for (size_t i = 0; env && env[i]; i++) {
    const char *eq = strchr(env[i], '=');
    if (eq == NULL || eq == env[i])
      continue;
    if (i)
      put_raw(&b, &n, &cap, ",");
    agsx_code_json_ascii_str(&b, &n, &cap, env[i], (size_t)(eq - env[i]));
    put_raw(&b, &n, &cap, ":");
    agsx_code_json_ascii_str(&b, &n, &cap, eq + 1, strlen(eq + 1));
  }
  put_raw(&b, &n, &cap, "}}\n");
  *ret_len = n;
  return b;
}

void agsx_code_exec_free(struct agsx_code_exec *e) {
  if (e == NULL)
    return;
  if (e->r)
    agsx_log_reader_free(e->r);
  free(e->sandbox);
  free(e->line);
  free(e);
}

int agsx_code_exec_start(int statefd, const char *sandbox, const struct agsx_code_context *c,
                         const struct agsx_code_exec_spec *spec, struct agsx_code_exec **ret,
                         agsx_error_t *err) {
  if (spec->code_len > AGSX_CODE_CODE_MAX)
    return agsx_error_set(err, EFBIG, "code of %zu bytes is over the limit of %u MiB",
                          spec->code_len, AGSX_CODE_CODE_MAX >> 20);
  struct agsx_code_exec *e = xzalloc(sizeof(*e));
  e->statefd = statefd;
  e->sandbox = xstrdup(sandbox);
  e->pid = c->pid;
  e->output_max = spec->output_max ? spec->output_max : AGSX_CODE_OUTPUT_DEFAULT;
  e->timeout_ms = spec->timeout_ms;
  e->res.execution_count = -1;
  random_hex(e->rid);
  /* The reader first: every line of this request comes after its end. */
  if (agsx_process_log_open(statefd, sandbox, c->pid, AGSX_LOG_FROM_END, &e->r, err) < 0) {
    agsx_code_exec_free(e);
    return agsx_error_wrap(err, "read context %s", c->id);
  }
  _cleanup_free_ char *buf = NULL;
  size_t blen = 0, cap = 0;
  for (size_t off = 0; off < spec->code_len;) {
    off += chunk_line(e->rid, spec->code + off, spec->code_len - off, &buf, &blen, &cap);
    if (send_line(statefd, sandbox, c->pid, buf, blen, err) < 0) {
      agsx_code_exec_free(e);
      return -1;
    }
  }
  size_t n = 0;
  _cleanup_free_ char *line = execute_line(e->rid, spec->env, e->output_max, &n);
  if (send_line(statefd, sandbox, c->pid, line, n, err) < 0) {
    agsx_code_exec_free(e);
    return -1;
  }
  if (e->timeout_ms)
    e->deadline_ns = agsx_mono_ns() + (int64_t)e->timeout_ms * 1000000;
  *ret = e;
  return 0;
}

int agsx_code_exec_fd(const struct agsx_code_exec *e) { return agsx_log_reader_fd(e->r); }

int agsx_code_exec_timeout_ms(const struct agsx_code_exec *e) {
  if (e->deadline_ns == 0)
    return -1;
  int64_t left = (e->deadline_ns - agsx_mono_ns()) / 1000000;
  return left < 0 ? 0 : left > 3600000 ? 3600000 : (int)left + 1;
}

const struct agsx_code_exec_result *agsx_code_exec_result(const struct agsx_code_exec *e) {
  return &e->res;
}

static void interrupt(struct agsx_code_exec *e) {
  char line[96];
  int n = snprintf(line, sizeof(line), "{\"op\":\"interrupt\",\"id\":\"%s\"}\n", e->rid);
  _cleanup_error_ agsx_error_t ie = NULL;
  if (agsx_process_input(e->statefd, e->sandbox, e->pid, line, (size_t)n, false, &ie) < 0)
    agsx_debug("interrupt code execution: %s", ie->msg);
}

int agsx_code_exec_cancel(struct agsx_code_exec *e, agsx_error_t *err) {
  (void)err;
  if (!e->ended) {
    interrupt(e);
    e->ended = true;
    e->res.cancelled = true;
  }
  return 0;
}

/* An item we make ourselves (timeout, a context that ended), passed through
 * the same parser as the bridge's lines. */
static int synth(struct agsx_code_exec *e, const char *name, const char *value,
                 agsx_code_item_fn fn, void *data) {
  char *b = NULL;
  size_t n = 0, cap = 0;
  char head[64];
  snprintf(head, sizeof(head), "{\"id\":\"%s\",\"type\":\"error\",\"name\":", e->rid);
  put_raw(&b, &n, &cap, head);
  agsx_code_json_ascii_str(&b, &n, &cap, name, strlen(name));
  put_raw(&b, &n, &cap, ",\"value\":");
  agsx_code_json_ascii_str(&b, &n, &cap, value, strlen(value));
  put_raw(&b, &n, &cap, ",\"traceback\":\"\"}");
  struct agsx_code_item it;
  _cleanup_error_ agsx_error_t ie = NULL;
  int r = agsx_code_item_parse(b, n, e->rid, &it, &ie);
  free(b);
  if (r != 1)
    return 0;
  e->res.error = true;
  r = fn(&it, data);
  agsx_code_item_clear(&it);
  return r;
}

static int on_line(struct agsx_code_exec *e, agsx_code_item_fn fn, void *data, agsx_error_t *err) {
  struct agsx_code_item it;
  _cleanup_error_ agsx_error_t le = NULL;
  int r = agsx_code_item_parse(e->line, e->len, e->rid, &it, &le);
  if (r < 0) {
    agsx_warn("code execution: %s", le->msg);
    return 0;
  }
  if (r == 0)
    return 0;
  int stop = 0;
  switch (it.type) {
  case AGSX_CODE_END: e->ended = true; break;
  case AGSX_CODE_TRUNCATED:
    e->res.truncated = true;
    e->res.dropped += it.dropped;
    stop = fn(&it, data);
    break;
  case AGSX_CODE_STDOUT:
  case AGSX_CODE_STDERR:
    /* The bridge bounds its output; an untrusted one is bounded here too. */
    e->output += strlen(it.text);
    if (e->output > e->output_max) {
      e->res.truncated = true;
      e->res.dropped += strlen(it.text);
      break;
    }
    stop = fn(&it, data);
    break;
  case AGSX_CODE_COUNT:
    e->res.execution_count = it.execution_count;
    stop = fn(&it, data);
    break;
  case AGSX_CODE_ERROR:
    if (e->res.error)
      break; /* the first error only, as E2B */
    e->res.error = true;
    stop = fn(&it, data);
    break;
  default: stop = fn(&it, data); break;
  }
  agsx_code_item_clear(&it);
  if (stop)
    agsx_code_exec_cancel(e, err);
  return 0;
}

static int feed(struct agsx_code_exec *e, const char *d, size_t n, agsx_code_item_fn fn, void *data,
                agsx_error_t *err) {
  for (size_t i = 0; i < n && !e->ended;) {
    const char *nl = memchr(d + i, '\n', n - i);
    size_t k = nl ? (size_t)(nl - (d + i)) : n - i;
    if (!e->skipping) {
      if (e->len + k > AGSX_CODE_LINE_MAX) {
        e->skipping = true;
        e->res.truncated = true;
        e->len = 0;
      } else {
        if (e->len + k + 1 > e->cap)
          e->line = xrealloc(e->line, e->cap = 2 * (e->len + k + 1));
        memcpy(e->line + e->len, d + i, k);
        e->len += k;
      }
    }
    i += k;
    if (nl) {
      i++;
      if (!e->skipping && on_line(e, fn, data, err) < 0)
        return -1;
      e->skipping = false;
      e->len = 0;
    }
  }
  return 0;
}

bool agsx_code_exec_more(const struct agsx_code_exec *e) { return e->more; }

int agsx_code_exec_dispatch(struct agsx_code_exec *e, size_t max_records, agsx_code_item_fn fn,
                            void *data, agsx_error_t *err) {
  e->more = false;
  for (size_t n = 0; !e->ended; n++) {
    if (max_records && n >= max_records) {
      e->more = true;
      return 0;
    }
    struct agsx_log_rec rec;
    int r = agsx_log_next(e->r, &rec, err);
    if (r < 0)
      return agsx_error_wrap(err, "read the code context's output");
    if (r == 2) {
      e->ended = true;
      synth(e, "DeadKernelError", "The code context ended: create a new one", fn, data);
      break;
    }
    if (r == 0) {
      if (e->deadline_ns && agsx_mono_ns() >= e->deadline_ns) {
        interrupt(e);
        e->ended = true;
        e->res.timed_out = true;
        _cleanup_free_ char *msg =
            xasprintf("Execution timed out after %llu ms: the cell was interrupted",
                      (unsigned long long)e->timeout_ms);
        synth(e, "TimeoutError", msg, fn, data);
      }
      return e->ended ? 1 : 0;
    }
    if (rec.kind == AGSX_LOG_LOST) {
      e->res.truncated = true;
      e->res.dropped += rec.lost;
      e->skipping = true; /* the line in progress lost its middle */
      e->len = 0;
    } else if (rec.kind == AGSX_LOG_STDOUT && feed(e, rec.data, rec.len, fn, data, err) < 0) {
      return -1;
    }
  }
  return 1;
}

int agsx_code_run(int statefd, const char *sandbox, const struct agsx_code_context *c,
                  const struct agsx_code_exec_spec *spec, int cancel_fd, agsx_code_item_fn fn,
                  void *data, struct agsx_code_exec_result *ret, agsx_error_t *err) {
  struct agsx_code_exec *e = NULL;
  if (agsx_code_exec_start(statefd, sandbox, c, spec, &e, err) < 0)
    return -1;
  int r;
  while ((r = agsx_code_exec_dispatch(e, 0, fn, data, err)) == 0) {
    struct pollfd p[2] = {{.fd = agsx_code_exec_fd(e), .events = POLLIN},
                          {.fd = cancel_fd, .events = POLLIN}};
    if (poll(p, 2, agsx_code_exec_timeout_ms(e)) < 0 && errno != EINTR) {
      r = agsx_error_set(err, errno, "poll");
      break;
    }
    if (p[1].revents) {
      agsx_code_exec_cancel(e, err);
      r = 1;
      break;
    }
  }
  if (r > 0 && ret)
    *ret = e->res;
  agsx_code_exec_free(e);
  return r < 0 ? -1 : 0;
}
