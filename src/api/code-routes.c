/* agsx — api: port-49999 traffic (E2B's code interpreter), glue over
 * src/code/: /health, /execute (NDJSON stream), /contexts.
 *
 * The SDK's parser splits on \n and JSON.parses every line (a blank line
 * throws), decodes each chunk on its own (so multi-byte characters may not
 * cross chunks) and turns unknown result keys into `extra`: the lines come
 * from agsx_code_item_parse, ASCII-only with known keys, one item a line;
 * {"type":"keepalive"} after 5 s of silence (also our probe of a client
 * that went away: its disconnect frees the stream, which interrupts the
 * cell); {"type":"end_of_execution"} last. */
#include "config.h"

#include "api/api-internal.h"
#include "api/auth.h"
#include "code/code.h"

#include <string.h>
#include <sys/epoll.h>

#define KEEPALIVE_NS (5 * 1000000000LL)
#define PUMP_RECORDS 64

struct agsx_api_code_stream {
  struct agsx_code_exec *e;
  char sandbox[33];
  int64_t next_check_ns;
};

static void respond_text(struct req *r, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void respond_text(struct req *r, unsigned status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  _cleanup_free_ char *msg = xvasprintf(fmt, ap);
  va_end(ap);
  agsx_respond(r, status, "text/plain; charset=utf-8", msg, strlen(msg));
}

static void respond_raw_json(struct req *r, unsigned status, const char *json, size_t len) {
  agsx_respond(r, status, "application/json", json, len);
}

/* An error of the library to E2B's statuses: 404 for a context that is not
 * there, 502 for a sandbox that stopped, 501 for a language agsx has no
 * kernel for (a refusal), 500 otherwise. */
static void respond_code_error(struct req *r, agsx_error_t *err) {
  int e = agsx_error_errno(err);
  if (e == ESRCH)
    agsx_api_respond_gone(r);
  else
    respond_text(r, e == ENOENT ? 404 : e == ENOTSUP ? 501 : 500, "%s", (*err)->msg);
  agsx_error_free(err);
}

/* A context that cannot be made: a language agsx has no kernel for is
 * refused (501, as the API's other refusals), a malformed one is a 400. */
static unsigned create_status(agsx_error_t *err) {
  int e = agsx_error_errno(err);
  return e == ENOTSUP ? 501 : e == EINVAL ? 400 : 500;
}

static void context_json(char **b, size_t *n, size_t *cap, const struct agsx_code_context *c) {
  const char *parts[] = {"{\"id\":", ",\"language\":", ",\"cwd\":"};
  const char *vals[] = {c->id, c->language, c->cwd};
  for (int i = 0; i < 3; i++) {
    size_t l = strlen(parts[i]);
    if (*n + l + 1 > *cap)
      *b = xrealloc(*b, *cap = 2 * (*n + l + 1));
    memcpy(*b + *n, parts[i], l);
    *n += l;
    agsx_code_json_ascii_str(b, n, cap, vals[i], strlen(vals[i]));
  }
  if (*n + 2 > *cap)
    *b = xrealloc(*b, *cap = *n + 16);
  (*b)[(*n)++] = '}';
  (*b)[*n] = '\0';
}

static void execute_in(struct req *r, const struct agsx_code_context *c, const char *code,
                       char **env);

/* ---- context operations under way ------------------------------------------------------- */

/* A kernel's start (a create, an execution's default context), a restart
 * or a removal takes seconds: the request's connection is suspended while
 * its operation (code.h's poll component) runs in the loop beside every
 * other request, and resumed to answer when it is done. Bounded per
 * sandbox and overall: past that, 429. */
enum what { WHAT_CREATE, WHAT_EXECUTE, WHAT_RESTART, WHAT_REMOVE, WHAT_LIST };

/* The contexts E2B's server makes when the sandbox starts, in its order.
 * Here the first listing makes them (each language's default context,
 * once), so a fresh sandbox lists them as E2B's does and a sandbox that
 * never lists pays for no kernel it does not use. One that cannot start
 * (no node in the image) is left out of the listing. */
static const char *const default_languages[] = {"python", "javascript"};

struct pending {
  struct pending *next, **pprev;
  struct req *r;
  struct agsx_code_op *op;
  enum what what;
  int fd; /* the op's, in the loop's epoll; -1: none */
  bool finished;
  int rc; /* once finished: 1 done, -1 failed (err) */
  agsx_error_t err;
  char ctx[64]; /* restart, remove: the context asked for */
  char *code;   /* execute: what to run once the context is there */
  char **env;
  size_t stage; /* list: the next of default_languages to make */
};

static void pending_watch(struct pending *p, int fd) {
  if (p->fd == fd)
    return;
  if (p->fd >= 0)
    epoll_ctl(p->r->s->epfd, EPOLL_CTL_DEL, p->fd, NULL);
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = p};
  p->fd = fd >= 0 && epoll_ctl(p->r->s->epfd, EPOLL_CTL_ADD, fd, &ev) == 0 ? fd : -1;
}

static void pending_free(struct pending *p) {
  pending_watch(p, -1);
  if (p->pprev) {
    *p->pprev = p->next;
    if (p->next)
      p->next->pprev = p->pprev;
    p->r->s->n_code_ops--;
  }
  agsx_code_op_free(p->op);
  agsx_error_free(&p->err);
  free(p->code);
  agsx_strv_free(p->env);
  p->r->code_op = NULL;
  free(p);
}

static struct pending *pending_new(struct req *r, struct agsx_code_op *op, enum what what) {
  struct pending *p = xzalloc(sizeof(*p));
  p->r = r;
  p->op = op;
  p->what = what;
  p->fd = -1;
  r->code_op = p;
  return p;
}

/* A listing: on to the next default context to make; false when all are
 * there (or could not start: the listing goes on without them). */
static bool list_next_default(struct pending *p) {
  while (p->stage < AGSX_ARRAY_SIZE(default_languages)) {
    /* Out of the loop's epoll before its fd closes: the next op's fd may
     * get the same number. */
    pending_watch(p, -1);
    agsx_code_op_free(p->op);
    p->op = NULL;
    agsx_error_free(&p->err);
    const char *lang = default_languages[p->stage++];
    if (agsx_code_op_default(p->r->s->statefd, p->r->rec.id, lang, &p->op, &p->err) == 0)
      return true;
  }
  agsx_error_free(&p->err);
  return false;
}

/* Runs the operation one step; true once it finished. */
static bool pending_step(struct pending *p) {
  if (p->finished)
    return true;
  int rc;
  for (;;) {
    rc = agsx_code_op_dispatch(p->op, &p->err);
    if (rc == 0) {
      pending_watch(p, agsx_code_op_fd(p->op));
      return false;
    }
    if (p->what != WHAT_LIST)
      break;
    if (!list_next_default(p)) {
      rc = 1;
      break;
    }
  }
  p->finished = true;
  p->rc = rc;
  pending_watch(p, -1);
  return true;
}

static void list_answer(struct req *r);

static void pending_answer(struct req *r) {
  struct pending *p = r->code_op;
  struct agsx_record rec;
  agsx_error_t gone = NULL;
  if (p->what == WHAT_LIST) {
    list_answer(r);
  } else if (p->rc < 0 && agsx_api_find_sandbox(r->s, r->rec.id, &rec, &gone) < 0) {
    /* Killed while its kernel was starting (the SDK's first runCode starts
     * the default context): dropped, as a cell that was running. */
    agsx_error_free(&gone);
    agsx_req_drop(r);
  } else if (p->rc < 0) {
    agsx_record_clear(&rec);
    if (p->what == WHAT_CREATE && agsx_error_errno(&p->err) != ESRCH) {
      respond_text(r, create_status(&p->err), "Failed to create context: %s", p->err->msg);
    } else {
      if (p->what == WHAT_RESTART)
        agsx_error_wrap(&p->err, "Failed to restart context %s", p->ctx);
      respond_code_error(r, &p->err);
    }
  } else if (p->what == WHAT_CREATE) {
    char *b = NULL;
    size_t n = 0, cap = 0;
    context_json(&b, &n, &cap, agsx_code_op_context(p->op));
    respond_raw_json(r, 200, b, n);
    free(b);
  } else if (p->what == WHAT_EXECUTE) {
    execute_in(r, agsx_code_op_context(p->op), p->code, p->env);
  } else {
    respond_raw_json(r, 200, "null", 4);
  }
  pending_free(p);
}

static size_t pending_of(struct server *s, const char *sandbox) {
  size_t n = 0;
  for (struct pending *p = s->code_ops; p; p = p->next)
    n += strcmp(p->r->rec.id, sandbox) == 0;
  return n;
}

/* Answers at once when the operation needs no waiting (a default context
 * that is there), else suspends the request until it is done. */
static void pending_begin(struct pending *p) {
  struct req *r = p->r;
  struct server *s = r->s;
  if (s->n_code_ops >= AGSX_API_CODE_OPS_MAX ||
      pending_of(s, r->rec.id) >= AGSX_API_CODE_OPS_SANDBOX) {
    respond_text(r, 429,
                 "too many code context operations under way (at most %u for a sandbox, %u in "
                 "all): try again when one is done",
                 AGSX_API_CODE_OPS_SANDBOX, AGSX_API_CODE_OPS_MAX);
    pending_free(p);
    return;
  }
  if (pending_step(p))
    return pending_answer(r);
  p->next = s->code_ops;
  if (s->code_ops)
    s->code_ops->pprev = &p->next;
  p->pprev = &s->code_ops;
  s->code_ops = p;
  s->n_code_ops++;
  agsx_req_wait(r, pending_answer);
}

void agsx_api_code_tick(struct server *s) {
  for (struct pending *p = s->code_ops; p; p = p->next)
    if (!p->finished && pending_step(p))
      agsx_req_continue(p->r);
}

int agsx_api_code_timeout_ms(struct server *s) {
  int best = -1;
  for (struct pending *p = s->code_ops; p; p = p->next) {
    int t = p->finished ? -1 : agsx_code_op_timeout_ms(p->op);
    if (t >= 0 && (best < 0 || t < best))
      best = t;
  }
  return best;
}

void agsx_api_code_stop(struct server *s) {
  for (struct pending *p = s->code_ops; p; p = p->next)
    if (!p->finished) {
      p->finished = true;
      p->rc = -1;
      agsx_error_set_quiet(&p->err, ESHUTDOWN, "the server is stopping");
      agsx_req_continue(p->r);
    }
}

void agsx_api_code_req_free(struct req *r) {
  if (r->code_op)
    pending_free(r->code_op);
}

/* ---- /execute --------------------------------------------------------------------------- */

static void line(struct stream *st, const char *s, size_t len) {
  agsx_buf_add(&st->out, s, len);
  agsx_buf_add(&st->out, "\n", 1);
  st->last_ns = agsx_mono_ns();
}

static int on_item(const struct agsx_code_item *it, void *data) {
  struct stream *st = data;
  if (it->type == AGSX_CODE_TRUNCATED) {
    char msg[160];
    int n = snprintf(msg, sizeof(msg),
                     "{\"type\":\"stderr\",\"text\":\"[agsx: output over the limit: %llu bytes "
                     "dropped]\\n\"}",
                     (unsigned long long)it->dropped);
    line(st, msg, (size_t)n);
  } else if (it->line) {
    line(st, it->line, it->line_len);
  }
  return 0;
}

static void finish(struct stream *st) {
  static const char end[] = "{\"type\":\"end_of_execution\"}";
  line(st, end, sizeof(end) - 1);
  st->ended = true;
}

void agsx_api_code_pump(struct stream *st, int64_t now) {
  struct agsx_api_code_stream *cs = st->code;
  if (st->ended)
    return;
  if (st->out.len - st->off < (1u << 20)) {
    agsx_error_t err = NULL;
    size_t mark = st->out.len;
    int r = agsx_code_exec_dispatch(cs->e, PUMP_RECORDS, on_item, st, &err);
    /* A cell that ends because its sandbox did (a kill: the kernel died
     * with it) ends as E2B's: dropped, without the dead kernel's error. */
    struct agsx_record rec;
    agsx_error_t gone = NULL;
    if (r != 0 && agsx_api_find_sandbox(st->s, cs->sandbox, &rec, &gone) < 0) {
      agsx_error_free(&gone);
      agsx_error_free(&err);
      st->out.len = mark;
      agsx_stream_abort(st);
      return;
    }
    if (r != 0)
      agsx_record_clear(&rec);
    if (r < 0) {
      char *b = NULL;
      size_t n = 0, cap = 0;
      const char head[] = "{\"type\":\"error\",\"name\":\"UnexpectedEndOfExecution\",\"value\":";
      b = xstrdup(head);
      n = cap = strlen(head);
      agsx_code_json_ascii_str(&b, &n, &cap, err->msg, strlen(err->msg));
      agsx_buf_add(&st->out, b, n);
      line(st, ",\"traceback\":\"\"}", 16);
      free(b);
      agsx_error_free(&err);
      finish(st);
      return;
    }
    if (r == 1) {
      finish(st);
      return;
    }
  }
  if (now >= cs->next_check_ns) {
    cs->next_check_ns = now + 1000000000LL;
    struct agsx_record rec;
    agsx_error_t err = NULL;
    if (agsx_api_find_sandbox(st->s, cs->sandbox, &rec, &err) < 0) {
      agsx_error_free(&err);
      agsx_stream_abort(st); /* as E2B's proxy: the SDK's TimeoutError */
      return;
    }
    agsx_record_clear(&rec);
  }
  if (now - st->last_ns >= KEEPALIVE_NS) {
    static const char ka[] = "{\"type\":\"keepalive\"}";
    line(st, ka, sizeof(ka) - 1);
  }
  /* Wake for the next keepalive, the cell's timeout, or at once when the
   * last dispatch left records unread. */
  int64_t wake = st->last_ns + KEEPALIVE_NS;
  if (wake > cs->next_check_ns)
    wake = cs->next_check_ns;
  int t = agsx_code_exec_timeout_ms(cs->e); /* the rest of the code to send */
  if (t >= 0 && now + t * 1000000LL < wake)
    wake = now + t * 1000000LL;
  if (agsx_code_exec_more(cs->e) && st->out.len - st->off < (1u << 20))
    wake = now + 1000000;
  st->deadline_ns = wake;
}

void agsx_api_code_free(struct stream *st) {
  struct agsx_api_code_stream *cs = st->code;
  if (cs == NULL)
    return;
  /* Whatever ended the stream short of the cell's end (the client went
   * away, timed out, or the sandbox check failed), nobody reads the cell
   * any more: interrupt it, so that the context's next cell runs. A cell
   * that ended makes this a no-op. */
  agsx_error_t err = NULL;
  agsx_code_exec_cancel(cs->e, &err);
  agsx_error_free(&err);
  agsx_code_exec_free(cs->e);
  free(cs);
  st->code = NULL;
}

/* KEY=VALUE strings of an {"K":"V"} object; false for anything else. */
static bool env_vars(yajl_val v, char ***ret) {
  if (v == NULL || YAJL_IS_NULL(v))
    return true;
  if (!YAJL_IS_OBJECT(v))
    return false;
  for (size_t i = 0; i < v->u.object.len; i++) {
    yajl_val x = v->u.object.values[i];
    if (!YAJL_IS_STRING(x) || !*v->u.object.keys[i] || strchr(v->u.object.keys[i], '='))
      return false;
    _cleanup_free_ char *kv = xasprintf("%s=%s", v->u.object.keys[i], x->u.string);
    agsx_strv_push(ret, kv);
  }
  return true;
}

static const char *nonnull_string(yajl_val body, const char *key, bool *bad) {
  yajl_val v = agsx_json_get(body, key);
  if (v == NULL || YAJL_IS_NULL(v))
    return NULL;
  if (!YAJL_IS_STRING(v)) {
    *bad = true;
    return NULL;
  }
  return v->u.string;
}

/* The execution's stream, over the context C. */
static void execute_in(struct req *r, const struct agsx_code_context *c, const char *code,
                       char **env) {
  struct agsx_code_exec_spec spec = {.code = code, .code_len = strlen(code), .env = env};
  struct agsx_code_exec *e = NULL;
  agsx_error_t err = NULL;
  if (agsx_code_exec_start(r->s->statefd, r->rec.id, c, &spec, &e, &err) < 0)
    return respond_code_error(r, &err);
  struct stream *st = agsx_stream_new(r->s, r->c);
  struct agsx_api_code_stream *cs = xzalloc(sizeof(*cs));
  cs->e = e;
  memcpy(cs->sandbox, r->rec.id, sizeof(cs->sandbox));
  cs->next_check_ns = agsx_mono_ns() + 1000000000LL;
  st->code = cs;
  st->keepalive_ns = 0;          /* ours are NDJSON lines (the pump) */
  st->next_check_ns = INT64_MAX; /* the pump checks the sandbox itself */
  if (agsx_stream_watch_fd(st, agsx_code_exec_fd(e)) < 0) {
    agsx_stream_free(st);
    return respond_text(r, 500, "watch the execution: %s", strerror(errno));
  }
  agsx_api_code_pump(st, agsx_mono_ns());
  agsx_respond_stream(r, st);
}

static void execute(struct req *r) {
  _cleanup_json_ yajl_val body = agsx_api_parse_body(r, false);
  if (body == NULL)
    return;
  bool bad = false;
  const char *code = nonnull_string(body, "code", &bad);
  const char *ctxid = nonnull_string(body, "context_id", &bad);
  const char *language = nonnull_string(body, "language", &bad);
  _cleanup_strv_ char **env = NULL;
  if (code == NULL || bad || !env_vars(agsx_json_get(body, "env_vars"), &env))
    return respond_text(r, 422,
                        "code (a string) is required; context_id, language: strings; "
                        "env_vars: an object of strings");
  if (ctxid && language)
    return respond_text(r, 400, "Only one of context_id or language can be provided");
  agsx_error_t err = NULL;
  if (ctxid) {
    struct agsx_code_context c = {0};
    if (agsx_code_context_get(r->s->statefd, r->rec.id, ctxid, &c, &err) < 0)
      return respond_code_error(r, &err);
    execute_in(r, &c, code, env);
    agsx_code_context_clear(&c);
    return;
  }
  /* The language's default context, made on first use: a kernel's start. */
  struct agsx_code_op *op = NULL;
  if (agsx_code_op_default(r->s->statefd, r->rec.id, language, &op, &err) < 0)
    return respond_code_error(r, &err);
  struct pending *p = pending_new(r, op, WHAT_EXECUTE);
  p->code = xstrdup(code);
  p->env = steal_ptr(&env);
  pending_begin(p);
}

/* ---- /contexts -------------------------------------------------------------------------- */

static void contexts_create(struct req *r) {
  _cleanup_json_ yajl_val body = agsx_api_parse_body(r, false);
  if (body == NULL)
    return;
  bool bad = false;
  const char *language = nonnull_string(body, "language", &bad);
  const char *cwd = nonnull_string(body, "cwd", &bad);
  if (bad || (cwd && cwd[0] != '/'))
    return respond_text(r, 422, "language and cwd (an absolute path) are strings");
  struct agsx_code_op *op = NULL;
  agsx_error_t err = NULL;
  if (agsx_code_op_create(r->s->statefd, r->rec.id, language, cwd, &op, &err) < 0) {
    respond_text(r, create_status(&err), "Failed to create context: %s", err->msg);
    agsx_error_free(&err);
    return;
  }
  pending_begin(pending_new(r, op, WHAT_CREATE));
}

/* E2B's order: the default contexts first, then the others oldest first
 * (so a context just made is the last). */
static void list_answer(struct req *r) {
  struct agsx_code_context *v = NULL;
  size_t n = 0;
  agsx_error_t err = NULL;
  if (agsx_code_context_list(r->s->statefd, r->rec.id, &v, &n, &err) < 0)
    return respond_code_error(r, &err);
  char *b = xstrdup("[");
  size_t len = 1, cap = 2;
  bool first = true;
  for (int defaults = 1; defaults >= 0; defaults--)
    for (size_t i = 0; i < n; i++) {
      if (v[i].is_default != (defaults == 1))
        continue;
      if (!first) {
        if (len + 2 > cap)
          b = xrealloc(b, cap = 2 * (len + 2));
        b[len++] = ',';
      }
      first = false;
      context_json(&b, &len, &cap, &v[i]);
    }
  if (len + 2 > cap)
    b = xrealloc(b, cap = len + 2);
  b[len++] = ']';
  respond_raw_json(r, 200, b, len);
  free(b);
  agsx_code_context_list_free(v, n);
}

static void contexts_list(struct req *r) {
  struct pending *p = pending_new(r, NULL, WHAT_LIST);
  if (!list_next_default(p)) {
    list_answer(r);
    pending_free(p);
    return;
  }
  pending_begin(p);
}

static void context_op(struct req *r, const char *id, bool restart) {
  struct agsx_code_context c = {0};
  agsx_error_t err = NULL;
  if (agsx_code_context_get(r->s->statefd, r->rec.id, id, &c, &err) < 0)
    return respond_code_error(r, &err);
  struct agsx_code_op *op = NULL;
  int rc = restart ? agsx_code_op_restart(r->s->statefd, r->rec.id, &c, &op, &err)
                   : agsx_code_op_remove(r->s->statefd, r->rec.id, &c, &op, &err);
  agsx_code_context_clear(&c);
  if (rc < 0)
    return respond_code_error(r, &err);
  struct pending *p = pending_new(r, op, restart ? WHAT_RESTART : WHAT_REMOVE);
  snprintf(p->ctx, sizeof(p->ctx), "%s", id);
  pending_begin(p);
}

/* Admitted already (admit.c): the sandbox runs, the credentials hold. */
void agsx_api_code(struct req *r) {
  const char *p = r->path, *m = r->method;
  if (strcmp(p, "/health") == 0 && strcmp(m, "GET") == 0)
    return respond_raw_json(r, 200, "\"OK\"", 4);
  if (strcmp(p, "/execute") == 0 && strcmp(m, "POST") == 0)
    return execute(r);
  if (strcmp(p, "/contexts") == 0 && strcmp(m, "POST") == 0)
    return contexts_create(r);
  if (strcmp(p, "/contexts") == 0 && strcmp(m, "GET") == 0)
    return contexts_list(r);
  if (agsx_str_has_prefix(p, "/contexts/")) {
    char ctx[64];
    const char *rest = p + strlen("/contexts/");
    size_t n = strcspn(rest, "/");
    if (n == 0 || n >= sizeof(ctx))
      return respond_text(r, 404, "Context not found");
    memcpy(ctx, rest, n);
    ctx[n] = '\0';
    if (strcmp(rest + n, "/restart") == 0 && strcmp(m, "POST") == 0)
      return context_op(r, ctx, true);
    if (rest[n] == '\0' && strcmp(m, "DELETE") == 0)
      return context_op(r, ctx, false);
  }
  respond_text(r, 404, "Not Found");
}
