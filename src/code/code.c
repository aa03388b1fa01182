/* agsx — code: contexts (bridge processes) and executions over the
 * processes API. See code.h and README.md for the protocol. */
#include "config.h"

#include "code/code.h"
#include "sandbox/processes.h"

#include <ctype.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
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

/* Request lines go to the bridge through the supervisor, which takes a
 * message whole or refuses it (EAGAIN) while the bridge has not read what
 * is pending. Nothing here waits for that: a sender tries once, and when
 * refused says when to try again (a backoff of 2 to 100 ms). A bridge
 * busy assembling megabytes of code gets time; one that reads nothing for
 * a minute (stopped, hung) is an error, never a stall of the caller. */
#define SEND_PATIENCE_NS (60 * 1000000000LL)

struct sender {
  int64_t stalled_ns; /* the first refusal since the last line went; 0: none */
  int64_t next_ns;    /* not before this */
  long backoff_ms;
};

/* 1: LINE went; 0: refused for now (try again at S->next_ns); -1: failed. */
static int sender_try(struct sender *s, int statefd, const char *sandbox, uint32_t pid,
                      const char *line, size_t len, agsx_error_t *err) {
  int64_t now = agsx_mono_ns();
  if (now < s->next_ns)
    return 0;
  agsx_error_t e = NULL;
  if (agsx_process_input(statefd, sandbox, pid, line, len, false, &e) == 0) {
    *s = (struct sender){0};
    return 1;
  }
  if (agsx_error_errno(&e) != EAGAIN) {
    agsx_error_free(err);
    *err = e;
    return agsx_error_wrap(err, "send to the code context");
  }
  agsx_error_free(&e);
  if (s->stalled_ns == 0)
    s->stalled_ns = now;
  else if (now - s->stalled_ns >= SEND_PATIENCE_NS)
    return agsx_error_set(err, ETIMEDOUT, "send to the code context: it read no input for %lld s",
                          SEND_PATIENCE_NS / 1000000000LL);
  s->backoff_ms = s->backoff_ms ? (s->backoff_ms < 50 ? 2 * s->backoff_ms : 100) : 2;
  s->next_ns = now + s->backoff_ms * 1000000LL;
  return 0;
}

/* The reply line {"id":RID,"type":TYPE,"ok":..} in the log of a bridge,
 * read as it comes. The bridge's stderr is kept for the message when it
 * ends first. */
struct waiter {
  struct agsx_log_reader *r;
  char *line;
  size_t len, cap;
  char stderr_tail[STDERR_KEEP];
  size_t stderr_len;
  bool more; /* the last step stopped at its budget */
};

static void waiter_clear(struct waiter *w) {
  if (w->r)
    agsx_log_reader_free(w->r);
  free(w->line);
  memset(w, 0, sizeof(*w));
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

static void check_reply(const char *line, size_t len, const char *rid, const char *type,
                        char **ret_error, bool *done) {
  char prefix[64];
  snprintf(prefix, sizeof(prefix), "{\"id\":\"%s\"", rid);
  if (len < strlen(prefix) || memcmp(line, prefix, strlen(prefix)) != 0)
    return;
  _cleanup_error_ agsx_error_t e = NULL;
  _cleanup_json_ yajl_val v = agsx_json_parse(line, len, 1 << 20, &e);
  const char *t = v ? agsx_json_get_string(v, "type") : NULL;
  const char *id = v ? agsx_json_get_string(v, "id") : NULL;
  if (t == NULL || id == NULL || strcmp(t, type) != 0 || strcmp(id, rid) != 0)
    return;
  yajl_val ok = agsx_json_get(v, "ok");
  const char *msg = agsx_json_get_string(v, "error");
  *ret_error = ok && YAJL_IS_TRUE(ok) ? NULL : xstrdup(msg ? msg : "the code context failed");
  *done = true;
}

#define WAITER_RECORDS 256 /* log records one step reads */

/* Reads what the bridge wrote since the last step: 1 once the reply came
 * (*RET_ERROR: NULL when ok), 0 not yet (W->more: call again at once),
 * -1 when the bridge ended first or its log failed. */
static int waiter_step(struct waiter *w, const char *rid, const char *type, char **ret_error,
                       agsx_error_t *err) {
  bool done = false;
  w->more = false;
  for (int n = 0; !done; n++) {
    if (n >= WAITER_RECORDS) {
      w->more = true;
      return 0;
    }
    struct agsx_log_rec rec;
    int r = agsx_log_next(w->r, &rec, err);
    if (r < 0)
      return agsx_error_wrap(err, "read the code context's output");
    if (r == 0)
      return 0;
    if (r == 2) {
      while (w->stderr_len && isspace((unsigned char)w->stderr_tail[w->stderr_len - 1]))
        w->stderr_len--;
      const char *nl = memrchr(w->stderr_tail, '\n', w->stderr_len);
      size_t off = nl ? (size_t)(nl - w->stderr_tail) + 1 : 0;
      return agsx_error_set(err, 0, "the code context ended%s%.*s", w->stderr_len ? ": " : "",
                            (int)(w->stderr_len - off), w->stderr_tail + off);
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
  return 1;
}

/* ---- context operations ------------------------------------------------- */

/* Each operation is a small state machine over the sender, the waiter and
 * timers, so that a front end with one loop (the server) never waits for
 * a kernel, a lock or a bridge; the blocking calls below run the same
 * machine under poll(). */
enum op_kind { OP_CREATE, OP_DEFAULT, OP_RESTART, OP_REMOVE };
enum op_step {
  STEP_LOCK,  /* default: STATE/<id>/code.lock, tried without waiting */
  STEP_LIST,  /* default: one there already? */
  STEP_START, /* create: the bridge's process */
  STEP_ASK,   /* the request line (ping, restart) */
  STEP_WAIT,  /* its reply */
  STEP_STOP,  /* remove, or a create that failed: the bridge stops */
  STEP_DONE,
};

#define LOCK_RETRY_NS (50 * 1000000LL)
#define STOP_POLL_NS (50 * 1000000LL) /* 2 s to shut the kernel down, then signals */
#define STOP_POLLS 40

struct agsx_code_op {
  enum op_kind kind;
  enum op_step step;
  int statefd;
  char *sandbox;
  char *lang, *cwd; /* create, default */
  bool is_default;
  int lockfd; /* default: code.lock, held until done */
  uint32_t pid;
  char id[33], rid[33];
  const char *ask, *reply; /* "ping"/"pong", "restart"/"restarted" */
  uint64_t log_from;
  struct waiter w;
  struct sender snd;
  int64_t deadline_ns, next_ns;
  int polls;
  agsx_error_t failed; /* a create's error, reported once its bridge stopped */
  struct agsx_code_context ctx;
};

static struct agsx_code_op *op_new(enum op_kind kind, int statefd, const char *sandbox,
                                   enum op_step first) {
  struct agsx_code_op *op = xzalloc(sizeof(*op));
  op->kind = kind;
  op->step = first;
  op->statefd = statefd;
  op->sandbox = xstrdup(sandbox);
  op->lockfd = -1;
  return op;
}

void agsx_code_op_free(struct agsx_code_op *op) {
  if (op == NULL)
    return;
  /* A bridge started for a context that never came to be: closing its
   * stdin ends it (and its kernel); nothing here waits for that. */
  bool half = (op->kind == OP_CREATE || op->kind == OP_DEFAULT) && op->pid &&
              op->step != STEP_DONE && op->step != STEP_STOP;
  if (half) {
    _cleanup_error_ agsx_error_t e = NULL;
    agsx_process_close_stdin(op->statefd, op->sandbox, op->pid, &e);
  }
  waiter_clear(&op->w);
  agsx_closep(&op->lockfd);
  agsx_error_free(&op->failed);
  agsx_code_context_clear(&op->ctx);
  free(op->sandbox);
  free(op->lang);
  free(op->cwd);
  free(op);
}

int agsx_code_op_create(int statefd, const char *sandbox, const char *language, const char *cwd,
                        struct agsx_code_op **ret, agsx_error_t *err) {
  _cleanup_free_ char *lang = NULL;
  if (agsx_code_language(language, &lang, err) < 0)
    return -1;
  struct agsx_code_op *op = op_new(OP_CREATE, statefd, sandbox, STEP_START);
  op->lang = steal_ptr(&lang);
  op->cwd = cwd ? xstrdup(cwd) : NULL;
  *ret = op;
  return 0;
}

int agsx_code_op_default(int statefd, const char *sandbox, const char *language,
                         struct agsx_code_op **ret, agsx_error_t *err) {
  _cleanup_free_ char *lang = NULL;
  if (agsx_code_language(language, &lang, err) < 0)
    return -1;
  _cleanup_close_ int dir = openat(statefd, sandbox, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0)
    return agsx_error_set(err, errno == ENOENT ? ESRCH : errno, "open the sandbox's state");
  int fd = openat(dir, "code.lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    return agsx_error_set(err, errno, "open lock `code.lock`");
  struct agsx_code_op *op = op_new(OP_DEFAULT, statefd, sandbox, STEP_LOCK);
  op->lang = steal_ptr(&lang);
  op->is_default = true;
  op->lockfd = fd;
  op->deadline_ns = agsx_mono_ns() + AGSX_CODE_START_TIMEOUT_MS * 1000000LL;
  *ret = op;
  return 0;
}

int agsx_code_op_restart(int statefd, const char *sandbox, const struct agsx_code_context *c,
                         struct agsx_code_op **ret, agsx_error_t *err) {
  (void)err;
  struct agsx_code_op *op = op_new(OP_RESTART, statefd, sandbox, STEP_ASK);
  op->pid = c->pid;
  memcpy(op->id, c->id, sizeof(op->id));
  op->ask = "restart";
  op->reply = "restarted";
  op->log_from = AGSX_LOG_FROM_END;
  *ret = op;
  return 0;
}

int agsx_code_op_remove(int statefd, const char *sandbox, const struct agsx_code_context *c,
                        struct agsx_code_op **ret, agsx_error_t *err) {
  (void)err;
  struct agsx_code_op *op = op_new(OP_REMOVE, statefd, sandbox, STEP_STOP);
  op->pid = c->pid;
  memcpy(op->id, c->id, sizeof(op->id));
  *ret = op;
  return 0;
}

/* A failed create keeps its error while its bridge is stopped. */
static int op_fail(struct agsx_code_op *op, agsx_error_t *err) {
  if (op->kind == OP_RESTART || op->pid == 0) {
    op->step = STEP_DONE;
    return -1;
  }
  agsx_error_wrap(err, "Failed to create context");
  op->failed = steal_ptr(err);
  op->step = STEP_STOP;
  op->polls = 0;
  op->next_ns = 0;
  return 0;
}

static int step_lock(struct agsx_code_op *op, agsx_error_t *err) {
  if (flock(op->lockfd, LOCK_EX | LOCK_NB) == 0) {
    op->step = STEP_LIST;
    return 0;
  }
  if (errno != EWOULDBLOCK && errno != EINTR)
    return agsx_error_set(err, errno, "lock `code.lock`");
  int64_t now = agsx_mono_ns();
  if (now >= op->deadline_ns)
    return agsx_error_set(err, ETIMEDOUT,
                          "another front end has been making the default context for %d s",
                          AGSX_CODE_START_TIMEOUT_MS / 1000);
  op->next_ns = now + LOCK_RETRY_NS;
  return 0;
}

static int step_list(struct agsx_code_op *op, agsx_error_t *err) {
  struct agsx_code_context *v = NULL;
  size_t n = 0;
  if (agsx_code_context_list(op->statefd, op->sandbox, &v, &n, err) < 0)
    return -1;
  for (size_t i = 0; i < n; i++)
    if (v[i].is_default && strcmp(v[i].language, op->lang) == 0) {
      op->ctx = v[i];
      memset(&v[i], 0, sizeof(v[i]));
      agsx_code_context_list_free(v, n);
      op->step = STEP_DONE;
      return 0;
    }
  agsx_code_context_list_free(v, n);
  op->step = STEP_START;
  return 0;
}

static int step_start(struct agsx_code_op *op, agsx_error_t *err) {
  agsx_random_hex(op->id, 16);
  _cleanup_free_ char *tag =
      xasprintf(AGSX_CODE_TAG_PREFIX "%s%s", op->id, op->is_default ? ":default" : "");
  _cleanup_free_ char *envsrc = xasprintf("AGSX_CODE_BRIDGE=%s", agsx_code_bridge_src);
  char *argv[] = {"python3", "-I", "-c", LOADER, op->lang, NULL};
  char *env[] = {envsrc, "PYTHONUNBUFFERED=1", NULL};
  struct agsx_process_spec spec = {
      .argv = argv, .env = env, .cwd = op->cwd, .tag = tag, .stdin_open = true};
  struct agsx_process_info info = {0};
  int code = 0;
  if (agsx_process_start(op->statefd, op->sandbox, &spec, &info, &code, err) < 0)
    return agsx_error_wrap(err, "start a %s context", op->lang);
  op->pid = info.pid;
  agsx_process_info_clear(&info);
  op->ask = "ping";
  op->reply = "pong";
  op->log_from = AGSX_LOG_FROM_START;
  op->step = STEP_ASK;
  return 0;
}

static int step_ask(struct agsx_code_op *op, agsx_error_t *err) {
  if (op->w.r == NULL) {
    if (agsx_process_log_open(op->statefd, op->sandbox, op->pid, op->log_from, &op->w.r, err) < 0)
      return -1;
    agsx_random_hex(op->rid, 16);
    op->deadline_ns = agsx_mono_ns() + AGSX_CODE_START_TIMEOUT_MS * 1000000LL;
  }
  char line[128];
  int n = snprintf(line, sizeof(line), "{\"op\":\"%s\",\"id\":\"%s\"}\n", op->ask, op->rid);
  int r = sender_try(&op->snd, op->statefd, op->sandbox, op->pid, line, (size_t)n, err);
  if (r > 0)
    op->step = STEP_WAIT;
  return r < 0 ? -1 : 0;
}

/* The listing's view of a new context (its cwd: the sandbox's workdir
 * when none was asked for). */
static void fill_context(struct agsx_code_op *op) {
  memset(&op->ctx, 0, sizeof(op->ctx));
  memcpy(op->ctx.id, op->id, sizeof(op->ctx.id));
  op->ctx.language = xstrdup(op->lang);
  op->ctx.cwd = xstrdup(op->cwd ? op->cwd : "/");
  op->ctx.pid = op->pid;
  op->ctx.is_default = op->is_default;
  struct agsx_code_context again;
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_code_context_get(op->statefd, op->sandbox, op->id, &again, &e) == 0) {
    free(op->ctx.cwd);
    op->ctx.cwd = steal_ptr(&again.cwd);
    op->ctx.started_ns = again.started_ns;
    agsx_code_context_clear(&again);
  }
}

static int step_wait(struct agsx_code_op *op, agsx_error_t *err) {
  _cleanup_free_ char *fail = NULL;
  int r = waiter_step(&op->w, op->rid, op->reply, &fail, err);
  if (r < 0)
    return -1;
  if (r == 0) {
    if (!op->w.more && agsx_mono_ns() >= op->deadline_ns)
      return agsx_error_set(err, ETIMEDOUT, "the code context did not answer in %d s",
                            AGSX_CODE_START_TIMEOUT_MS / 1000);
    return 0;
  }
  if (fail)
    return agsx_error_set(err, 0, "%s", fail);
  waiter_clear(&op->w);
  if (op->kind != OP_RESTART)
    fill_context(op);
  op->step = STEP_DONE;
  return 0;
}

/* Stdin closed (the bridge shuts its kernel down and exits), then its
 * state looked at every 50 ms: SIGTERM after 1 s, SIGKILL after 2 s. */
static int step_stop(struct agsx_code_op *op) {
  int64_t now = agsx_mono_ns();
  if (now < op->next_ns)
    return 0;
  _cleanup_error_ agsx_error_t e = NULL;
  if (op->polls == 0)
    agsx_process_close_stdin(op->statefd, op->sandbox, op->pid, &e);
  agsx_error_free(&e);
  struct agsx_process_info info = {0};
  bool running =
      agsx_process_get(op->statefd, op->sandbox, op->pid, &info, &e) == 0 && info.running;
  agsx_process_info_clear(&info);
  agsx_error_free(&e);
  if (running && op->polls == STOP_POLLS / 2)
    agsx_process_signal(op->statefd, op->sandbox, op->pid, SIGTERM, &e);
  if (running && op->polls >= STOP_POLLS) {
    agsx_process_signal(op->statefd, op->sandbox, op->pid, SIGKILL, &e);
    running = false;
  }
  op->polls++;
  op->next_ns = now + STOP_POLL_NS;
  if (!running)
    op->step = STEP_DONE;
  return 0;
}

int agsx_code_op_dispatch(struct agsx_code_op *op, agsx_error_t *err) {
  /* Steps that are ready run one after another; a step that has to wait
   * leaves the step as it is (its timer or the log says when to come back). */
  for (int guard = 0; guard < 16; guard++) {
    enum op_step was = op->step;
    int r = 0;
    if (op->step != STEP_DONE && op->step != STEP_STOP && op->next_ns > agsx_mono_ns())
      return 0;
    switch (op->step) {
    case STEP_LOCK: r = step_lock(op, err); break;
    case STEP_LIST: r = step_list(op, err); break;
    case STEP_START: r = step_start(op, err); break;
    case STEP_ASK: r = step_ask(op, err); break;
    case STEP_WAIT: r = step_wait(op, err); break;
    case STEP_STOP: r = step_stop(op); break;
    case STEP_DONE:
      agsx_closep(&op->lockfd); /* the default context is there: others may look */
      if (op->failed) {
        agsx_error_free(err);
        *err = steal_ptr(&op->failed);
        return -1;
      }
      return 1;
    }
    if (r < 0 && op_fail(op, err) < 0) {
      agsx_closep(&op->lockfd);
      return -1;
    }
    if (op->step == was && r >= 0)
      return 0; /* waiting */
  }
  return 0;
}

int agsx_code_op_fd(const struct agsx_code_op *op) {
  return op->step == STEP_WAIT && op->w.r ? agsx_log_reader_fd(op->w.r) : -1;
}

int agsx_code_op_timeout_ms(const struct agsx_code_op *op) {
  int64_t now = agsx_mono_ns(), at;
  switch (op->step) {
  case STEP_WAIT: at = op->w.more ? now : op->deadline_ns; break;
  case STEP_ASK: at = op->snd.next_ns; break;
  case STEP_LOCK:
  case STEP_STOP: at = op->next_ns; break;
  default: return 0;
  }
  int64_t left = (at - now + 999999) / 1000000;
  return left <= 0 ? 0 : left > 3600000 ? 3600000 : (int)left;
}

const struct agsx_code_context *agsx_code_op_context(const struct agsx_code_op *op) {
  return op->step == STEP_DONE && op->ctx.language ? &op->ctx : NULL;
}

/* The blocking form: the same machine under poll(). The log's inotify fd
 * is a hint, so the wait is capped. */
static int op_run(struct agsx_code_op *op, struct agsx_code_context *ret, agsx_error_t *err) {
  for (;;) {
    int r = agsx_code_op_dispatch(op, err);
    if (r < 0)
      break;
    if (r > 0) {
      if (ret) {
        *ret = op->ctx;
        memset(&op->ctx, 0, sizeof(op->ctx));
      }
      agsx_code_op_free(op);
      return 0;
    }
    struct pollfd p = {.fd = agsx_code_op_fd(op), .events = POLLIN};
    int t = agsx_code_op_timeout_ms(op);
    if (poll(&p, 1, t < 0 || t > 500 ? 500 : t) < 0 && errno != EINTR) {
      agsx_error_set(err, errno, "poll");
      break;
    }
  }
  agsx_code_op_free(op);
  return -1;
}

int agsx_code_context_create(int statefd, const char *sandbox, const char *language,
                             const char *cwd, struct agsx_code_context *ret, agsx_error_t *err) {
  struct agsx_code_op *op = NULL;
  if (agsx_code_op_create(statefd, sandbox, language, cwd, &op, err) < 0)
    return -1;
  return op_run(op, ret, err);
}

int agsx_code_context_default(int statefd, const char *sandbox, const char *language,
                              struct agsx_code_context *ret, agsx_error_t *err) {
  struct agsx_code_op *op = NULL;
  if (agsx_code_op_default(statefd, sandbox, language, &op, err) < 0)
    return -1;
  return op_run(op, ret, err);
}

int agsx_code_context_restart(int statefd, const char *sandbox, const struct agsx_code_context *c,
                              agsx_error_t *err) {
  struct agsx_code_op *op = NULL;
  if (agsx_code_op_restart(statefd, sandbox, c, &op, err) < 0 || op_run(op, NULL, err) < 0)
    return agsx_error_wrap(err, "Failed to restart context %s", c->id);
  return 0;
}

int agsx_code_context_remove(int statefd, const char *sandbox, const struct agsx_code_context *c,
                             agsx_error_t *err) {
  struct agsx_code_op *op = NULL;
  if (agsx_code_op_remove(statefd, sandbox, c, &op, err) < 0)
    return -1;
  return op_run(op, NULL, err);
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
  /* The request, sent as the bridge takes it (never waited for): the
   * code's chunks, then the execute line. */
  char *code;
  size_t code_len, code_off;
  char *out;                         /* the line being sent */
  size_t out_len, out_cap, out_code; /* its length, and the code bytes it holds */
  char *exec_line;                   /* the execute line; NULL once sent */
  size_t exec_len;
  struct sender snd;
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
  free(e->code);
  free(e->out);
  free(e->exec_line);
  free(e);
}

#define SEND_LINES 16 /* request lines one dispatch sends (of 48 KiB of code each) */

/* Sends what the bridge takes of the request, at most SEND_LINES lines:
 * 0 (all sent, or E->more, or refused for now: see the sender), -1 failed. */
static int send_some(struct agsx_code_exec *e, agsx_error_t *err) {
  for (int n = 0; e->exec_line; n++) {
    if (n >= SEND_LINES) {
      e->more = true;
      return 0;
    }
    if (e->out_len == 0 && e->code_off < e->code_len)
      e->out_code = chunk_line(e->rid, e->code + e->code_off, e->code_len - e->code_off, &e->out,
                               &e->out_len, &e->out_cap);
    bool chunk = e->out_len > 0;
    const char *line = chunk ? e->out : e->exec_line;
    size_t len = chunk ? e->out_len : e->exec_len;
    int r = sender_try(&e->snd, e->statefd, e->sandbox, e->pid, line, len, err);
    if (r <= 0)
      return r;
    if (chunk) {
      e->code_off += e->out_code;
      e->out_len = 0;
    } else {
      free(e->exec_line);
      e->exec_line = NULL;
      free(e->code); /* sent: the bridge has it */
      e->code = NULL;
    }
  }
  return 0;
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
  agsx_random_hex(e->rid, 16);
  /* The reader first: every line of this request comes after its end. */
  if (agsx_process_log_open(statefd, sandbox, c->pid, AGSX_LOG_FROM_END, &e->r, err) < 0) {
    agsx_code_exec_free(e);
    return agsx_error_wrap(err, "read context %s", c->id);
  }
  e->code = xmalloc(spec->code_len + 1);
  memcpy(e->code, spec->code, spec->code_len);
  e->code_len = spec->code_len;
  e->exec_line = execute_line(e->rid, spec->env, e->output_max, &e->exec_len);
  /* A first batch now, so that a context that is gone fails the start. */
  if (send_some(e, err) < 0) {
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
  int64_t at = e->deadline_ns;
  if (e->more)
    return 0;
  if (e->exec_line && (at == 0 || e->snd.next_ns < at))
    at = e->snd.next_ns; /* the next try to send */
  if (at == 0)
    return -1;
  int64_t left = (at - agsx_mono_ns()) / 1000000;
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
  if (e->exec_line && !e->ended && send_some(e, err) < 0)
    return -1;
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
