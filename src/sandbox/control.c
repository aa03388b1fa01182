/* agsx — sandbox: the control protocol, both sides (see control.h). */
#include "config.h"

#include "sandbox/control.h"
#include "util/json.h"

#include <poll.h>
#include <string.h>
#include <sys/syscall.h>

/* ---- client side ---- */

int agsx_control_request_stop(int statefd, const char *id, int *ret_pidfd, agsx_error_t *err) {
  struct agsx_record r;
  *ret_pidfd = -1;
  {
    _cleanup_close_ int lock = agsx_record_lock(statefd, id, err);
    if (lock < 0 || agsx_record_read(statefd, id, &r, err) < 0)
      return -1;
    if (r.status == AGSX_STATUS_EXITED) {
      int code = r.exit_code;
      agsx_record_clear(&r);
      return agsx_error_set_quiet(err, ESRCH, "sandbox `%.12s` is not running (exited with %d)", id,
                                  code);
    }
    r.stop_request = true;
    if (agsx_record_write(statefd, &r, err) < 0) {
      agsx_record_clear(&r);
      return -1;
    }
  }
  int fd = agsx_proc_ref_pidfd(&r.supervisor);
  agsx_record_clear(&r);
  if (fd >= 0 && agsx_pidfd_signal(fd, AGSX_SIG_CONTROL, AGSX_CONTROL_STOP) == 0) {
    *ret_pidfd = fd;
    return 0;
  }
  if (fd >= 0)
    close(fd);
  /* The supervisor is gone: reap it ourselves. */
  return agsx_state_reap_one(statefd, id, NULL, err) < 0 ? -1 : 0;
}

/* Waits until MS pass or every supervisor of V has ended (its pidfd is then
 * set to -1 and closed); returns how many are left. */
static size_t wait_supervisors(struct agsx_stopping *v, size_t n, int64_t ms) {
  int64_t deadline = agsx_mono_ns() + ms * 1000000LL;
  struct pollfd *p = xzalloc((n + 1) * sizeof(*p));
  size_t left = 0;
  for (;;) {
    left = 0;
    for (size_t i = 0; i < n; i++) {
      p[i] = (struct pollfd){.fd = v[i].pidfd, .events = POLLIN};
      left += v[i].pidfd >= 0;
    }
    int64_t wait_ms = (deadline - agsx_mono_ns()) / 1000000;
    if (left == 0 || wait_ms <= 0)
      break;
    if (poll(p, n, (int)wait_ms) < 0 && errno != EINTR)
      break;
    for (size_t i = 0; i < n; i++)
      if (p[i].fd >= 0 && p[i].revents)
        agsx_closep(&v[i].pidfd);
  }
  free(p);
  return left;
}

/* The escalation of a stop nobody answers: its supervisor is stuck (stopped,
 * out of resources). STAGE 0: SIGKILL to the sandbox's init, the end of its
 * pid namespace (a live supervisor notices and tears down as usual).
 * STAGE 1: SIGKILL to the supervisor, then the record is marked killed and
 * the cgroup removed as for a crashed supervisor (gc removes its network
 * lease). */
static void escalate(int statefd, struct agsx_stopping *s, int stage,
                     const struct agsx_reap_report *rep) {
  agsx_error_t err = NULL;
  struct agsx_record r;
  if (agsx_record_read(statefd, s->id, &r, &err) < 0) {
    agsx_warn("sandbox %.12s: %s", s->id, err->msg);
    agsx_error_free(&err);
    return;
  }
  if (stage == 0) {
    agsx_warn("sandbox %.12s: its supervisor does not answer: killing the sandbox", s->id);
    agsx_proc_ref_signal(&r.init, SIGKILL, 0);
  } else {
    agsx_warn("sandbox %.12s: its supervisor is stuck: killing it", s->id);
    agsx_pidfd_signal(s->pidfd, SIGKILL, 0);
    if (wait_supervisors(s, 1, 2000) > 0)
      goto out; /* unkillable for now (uninterruptible sleep): reported */
    if (agsx_state_reap_one(statefd, s->id, rep, &err) < 0) {
      agsx_warn("sandbox %.12s: %s", s->id, err->msg);
      agsx_error_free(&err);
    }
  }
out:
  agsx_record_clear(&r);
}

#define ANSWER_MS ((AGSX_STOP_GRACE_SEC + 2) * 1000) /* a stop and its teardown */
#define STUCK_MS 5000                                /* after the sandbox's SIGKILL */

int agsx_control_wait_stopped(int statefd, struct agsx_stopping *v, size_t n,
                              const struct agsx_reap_report *rep, agsx_error_t *err) {
  for (int stage = 0; stage < 2; stage++) {
    if (wait_supervisors(v, n, stage == 0 ? ANSWER_MS : STUCK_MS) == 0)
      return 0;
    for (size_t i = 0; i < n; i++)
      if (v[i].pidfd >= 0)
        escalate(statefd, &v[i], stage, rep);
  }
  size_t left = wait_supervisors(v, n, 0);
  if (left)
    return agsx_error_set_quiet(err, ETIMEDOUT, "%zu sandbox(es) did not stop in time", left);
  return 0;
}

int agsx_control_set_timeout(int statefd, const char *id, const char *name, uint64_t sec,
                             struct agsx_record *ret, bool *ret_gone, agsx_error_t *err) {
  struct agsx_record r;
  {
    _cleanup_close_ int lock = agsx_record_lock(statefd, id, err);
    if (lock < 0 || agsx_record_read(statefd, id, &r, err) < 0)
      return -1;
    if (r.status == AGSX_STATUS_EXITED) {
      agsx_record_clear(&r);
      return agsx_error_set_quiet(err, ESRCH, "sandbox `%s` is not running", name);
    }
    /* The new deadline counts from now, and the 24 h maximum applies. */
    r.deadline_ns = agsx_now_ns() + (int64_t)sec * 1000000000LL;
    r.deadline = (r.deadline_ns + 500000000LL) / 1000000000LL;
    r.timeout = sec;
    if (agsx_record_write(statefd, &r, err) < 0) {
      agsx_record_clear(&r);
      return -1;
    }
  }
  *ret_gone = agsx_proc_ref_signal(&r.supervisor, AGSX_SIG_CONTROL, AGSX_CONTROL_RELOAD) < 0;
  *ret = r;
  return 0;
}

/* ---- supervisor side ---- */

enum agsx_control agsx_control_decode(const struct signalfd_siginfo *si) {
  if ((int)si->ssi_signo != AGSX_SIG_CONTROL)
    return AGSX_CONTROL_NONE;
  if (si->ssi_code == SI_QUEUE && si->ssi_int == AGSX_CONTROL_STOP)
    return AGSX_CONTROL_STOP; /* no fd needed */
  return AGSX_CONTROL_RELOAD;
}

int agsx_control_read(int statefd, const char *id, struct agsx_control_req *ret, bool *ret_retry,
                      agsx_error_t *err) {
  struct agsx_record r;
  *ret_retry = false;
  if (agsx_record_read(statefd, id, &r, err) < 0) {
    int e = agsx_error_errno(err);
    *ret_retry = e == EMFILE || e == ENFILE || e == ENOMEM;
    return -1;
  }
  ret->stop = r.stop_request;
  ret->deadline = r.deadline;
  ret->deadline_ns = r.deadline_ns ? r.deadline_ns : r.deadline * 1000000000LL;
  ret->restart_seq = r.restart_seq;
  agsx_record_clear(&r);
  return 0;
}

/* ---- the control socket's messages ---- */

#define MAGIC "AGC1"
#define TIMEOUT_MS_MAX (24ull * 3600 * 1000)

static char *frame(const char *json, size_t jlen, const void *data, size_t len, size_t *ret_len) {
  size_t n = 8 + jlen + len;
  char *b = xmalloc(n);
  memcpy(b, MAGIC, 4);
  for (int i = 0; i < 4; i++)
    b[4 + i] = (char)(jlen >> (8 * i));
  memcpy(b + 8, json, jlen);
  if (len)
    memcpy(b + 8 + jlen, data, len);
  *ret_len = n;
  return b;
}

/* The JSON object of a message, and its payload. */
static yajl_val unframe(const char *buf, size_t len, const char **ret_data, size_t *ret_len,
                        agsx_error_t *err) {
  if (len < 8 || len > AGSX_CONTROL_MSG_MAX || memcmp(buf, MAGIC, 4) != 0) {
    agsx_error_set(err, EBADMSG, "not a control message");
    return NULL;
  }
  size_t jlen = 0;
  for (int i = 0; i < 4; i++)
    jlen |= (size_t)(unsigned char)buf[4 + i] << (8 * i);
  if (jlen > len - 8 || jlen > AGSX_CONTROL_JSON_MAX) {
    agsx_error_set(err, EBADMSG, "control message: bad length");
    return NULL;
  }
  yajl_val v = agsx_json_parse(buf + 8, jlen, AGSX_CONTROL_JSON_MAX, err);
  if (v && !YAJL_IS_OBJECT(v)) {
    yajl_tree_free(v);
    agsx_error_set(err, EBADMSG, "control message: not an object");
    return NULL;
  }
  *ret_data = buf + 8 + jlen;
  *ret_len = len - 8 - jlen;
  return v;
}

static bool known_keys(yajl_val v, const char *const *keys, const char **ret_bad) {
  for (size_t i = 0; i < v->u.object.len; i++) {
    bool ok = false;
    for (size_t k = 0; keys[k] && !ok; k++)
      ok = strcmp(v->u.object.keys[i], keys[k]) == 0;
    if (!ok) {
      *ret_bad = v->u.object.keys[i];
      return false;
    }
  }
  return true;
}

/* An optional unsigned field: false (ERR) when present and not in [0, MAX]. */
static bool get_uint(yajl_val v, const char *key, uint64_t max, uint64_t *ret, agsx_error_t *err) {
  yajl_val x = agsx_json_get(v, key);
  if (x == NULL)
    return true;
  if (!YAJL_IS_INTEGER(x) || YAJL_GET_INTEGER(x) < 0 || (uint64_t)YAJL_GET_INTEGER(x) > max) {
    agsx_error_set(err, EINVAL, "control message: bad `%s`", key);
    return false;
  }
  *ret = (uint64_t)YAJL_GET_INTEGER(x);
  return true;
}

static bool get_bool(yajl_val v, const char *key, bool *ret, agsx_error_t *err) {
  yajl_val x = agsx_json_get(v, key);
  if (x == NULL)
    return true;
  if (!YAJL_IS_TRUE(x) && !YAJL_IS_FALSE(x)) {
    agsx_error_set(err, EINVAL, "control message: bad `%s`", key);
    return false;
  }
  *ret = YAJL_IS_TRUE(x);
  return true;
}

/* An optional string: NULL when missing or null. */
static bool get_str(yajl_val v, const char *key, char **ret, agsx_error_t *err) {
  yajl_val x = agsx_json_get(v, key);
  if (x == NULL || YAJL_IS_NULL(x))
    return true;
  if (!YAJL_IS_STRING(x)) {
    agsx_error_set(err, EINVAL, "control message: bad `%s`", key);
    return false;
  }
  *ret = xstrdup(YAJL_GET_STRING(x));
  return true;
}

static bool get_strv(yajl_val v, const char *key, char ***ret, agsx_error_t *err) {
  yajl_val a = agsx_json_get(v, key);
  if (a == NULL || YAJL_IS_NULL(a))
    return true;
  if (!YAJL_IS_ARRAY(a) || a->u.array.len > AGSX_CONTROL_ARGS_MAX) {
    agsx_error_set(err, EINVAL, "control message: bad `%s`", key);
    return false;
  }
  char **out = agsx_strv_concat(NULL, NULL);
  for (size_t i = 0; i < a->u.array.len; i++) {
    if (!YAJL_IS_STRING(a->u.array.values[i])) {
      agsx_strv_free(out);
      agsx_error_set(err, EINVAL, "control message: bad `%s`", key);
      return false;
    }
    agsx_strv_push(&out, YAJL_GET_STRING(a->u.array.values[i]));
  }
  *ret = out;
  return true;
}

static int parse_start(yajl_val v, struct agsx_control_msg *m, agsx_error_t *err) {
  static const char *const keys[] = {"op",  "argv", "env",  "cwd",   "user",       "tag",
                                     "pty", "cols", "rows", "stdin", "timeout_ms", NULL};
  const char *bad;
  if (!known_keys(v, keys, &bad))
    return agsx_error_set(err, EINVAL, "control message: unknown field `%.64s`", bad);
  struct agsx_process_spec *s = &m->spec;
  uint64_t cols = 0, rows = 0, tmo = 0;
  if (!get_strv(v, "argv", &s->argv, err) || !get_strv(v, "env", &s->env, err) ||
      !get_str(v, "cwd", (char **)&s->cwd, err) || !get_str(v, "user", (char **)&s->user, err) ||
      !get_str(v, "tag", (char **)&s->tag, err) || !get_bool(v, "pty", &s->pty, err) ||
      !get_bool(v, "stdin", &s->stdin_open, err) || !get_uint(v, "cols", 65535, &cols, err) ||
      !get_uint(v, "rows", 65535, &rows, err) ||
      !get_uint(v, "timeout_ms", TIMEOUT_MS_MAX, &tmo, err))
    return -1;
  s->cols = (unsigned)cols;
  s->rows = (unsigned)rows;
  s->timeout_ms = tmo;
  if (agsx_strv_len(s->argv) == 0 || s->argv[0][0] == '\0')
    return agsx_error_set(err, EINVAL, "no command given");
  for (size_t i = 0; s->env && s->env[i]; i++)
    if (s->env[i][0] == '=' || strchr(s->env[i], '=') == NULL)
      return agsx_error_set(err, EINVAL, "environment entry `%.64s` is not KEY=VALUE", s->env[i]);
  if (s->cwd && s->cwd[0] != '/')
    return agsx_error_set(err, EINVAL, "working directory `%.256s` must be absolute", s->cwd);
  return 0;
}

static int parse_op(yajl_val v, struct agsx_control_msg *m, agsx_error_t *err) {
  static const char *const keys[] = {"op", "pid", "pty", "signal", "cols", "rows", NULL};
  const char *bad;
  if (!known_keys(v, keys, &bad))
    return agsx_error_set(err, EINVAL, "control message: unknown field `%.64s`", bad);
  uint64_t pid = 0, sig = 0, cols = 0, rows = 0;
  if (!get_uint(v, "pid", UINT32_MAX, &pid, err) || !get_bool(v, "pty", &m->pty, err) ||
      !get_uint(v, "signal", 64, &sig, err) || !get_uint(v, "cols", 65535, &cols, err) ||
      !get_uint(v, "rows", 65535, &rows, err))
    return -1;
  if (pid == 0)
    return agsx_error_set(err, EINVAL, "control message: no pid");
  m->pid = (uint32_t)pid;
  m->signal = (int)sig;
  m->spec.cols = (unsigned)cols;
  m->spec.rows = (unsigned)rows;
  if (m->op == AGSX_OP_SIGNAL && sig == 0)
    return agsx_error_set(err, EINVAL, "control message: no signal");
  if (m->op == AGSX_OP_RESIZE && (cols == 0 || rows == 0))
    return agsx_error_set(err, EINVAL, "a terminal of at least 1x1");
  if (m->op != AGSX_OP_INPUT && m->len > 0)
    return agsx_error_set(err, EINVAL, "control message: unexpected payload");
  if (m->len > AGSX_PROCESS_INPUT_MAX)
    return agsx_error_set(err, EFBIG, "at most %u bytes of input at once", AGSX_PROCESS_INPUT_MAX);
  return 0;
}

static const char *const op_names[] = {NULL, "start", "input", "close_stdin", "signal", "resize"};

int agsx_control_msg_parse(const char *buf, size_t len, struct agsx_control_msg *ret,
                           agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  _cleanup_json_ yajl_val v = unframe(buf, len, &ret->data, &ret->len, err);
  if (v == NULL)
    return -1;
  const char *op = agsx_json_get_string(v, "op");
  for (size_t i = 1; op && i < AGSX_ARRAY_SIZE(op_names); i++)
    if (strcmp(op, op_names[i]) == 0)
      ret->op = (enum agsx_control_op)i;
  int r;
  if (ret->op == 0)
    r = agsx_error_set(err, EINVAL, "control message: unknown op");
  else
    r = ret->op == AGSX_OP_START ? (ret->len ? agsx_error_set(err, EINVAL, "unexpected payload")
                                             : parse_start(v, ret, err))
                                 : parse_op(v, ret, err);
  if (r < 0)
    agsx_control_msg_clear(ret);
  return r;
}

static void gen_strv(yajl_gen g, const char *key, char *const *v) {
  if (v == NULL)
    return;
  agsx_json_key(g, key);
  yajl_gen_array_open(g);
  for (size_t i = 0; v[i]; i++)
    agsx_json_str(g, v[i]);
  yajl_gen_array_close(g);
}

static void gen_start(yajl_gen g, const struct agsx_process_spec *s) {
  gen_strv(g, "argv", s->argv);
  gen_strv(g, "env", s->env);
  if (s->cwd)
    agsx_json_kv_str(g, "cwd", s->cwd);
  if (s->user)
    agsx_json_kv_str(g, "user", s->user);
  if (s->tag)
    agsx_json_kv_str(g, "tag", s->tag);
  agsx_json_kv_bool(g, "pty", s->pty);
  agsx_json_kv_bool(g, "stdin", s->stdin_open);
  agsx_json_kv_int(g, "cols", s->cols);
  agsx_json_kv_int(g, "rows", s->rows);
  agsx_json_kv_int(g, "timeout_ms", (int64_t)s->timeout_ms);
}

char *agsx_control_msg_encode(const struct agsx_control_msg *m, size_t *ret_len,
                              agsx_error_t *err) {
  if (m->op < AGSX_OP_START || m->op > AGSX_OP_RESIZE) {
    agsx_error_set(err, EINVAL, "unknown control op");
    return NULL;
  }
  if (agsx_strv_len(m->spec.argv) > AGSX_CONTROL_ARGS_MAX ||
      agsx_strv_len(m->spec.env) > AGSX_CONTROL_ARGS_MAX || m->len > AGSX_PROCESS_INPUT_MAX) {
    agsx_error_set(err, E2BIG, "at most %d arguments and environment entries, %u bytes of input",
                   AGSX_CONTROL_ARGS_MAX, AGSX_PROCESS_INPUT_MAX);
    return NULL;
  }
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "op", op_names[m->op]);
  if (m->op == AGSX_OP_START) {
    gen_start(g, &m->spec);
  } else {
    agsx_json_kv_int(g, "pid", m->pid);
    if (m->op == AGSX_OP_INPUT)
      agsx_json_kv_bool(g, "pty", m->pty);
    if (m->op == AGSX_OP_SIGNAL)
      agsx_json_kv_int(g, "signal", m->signal);
    if (m->op == AGSX_OP_RESIZE) {
      agsx_json_kv_int(g, "cols", m->spec.cols);
      agsx_json_kv_int(g, "rows", m->spec.rows);
    }
  }
  yajl_gen_map_close(g);
  size_t jlen;
  _cleanup_free_ char *json = agsx_json_gen_steal(g, &jlen);
  if (jlen > AGSX_CONTROL_JSON_MAX) {
    agsx_error_set(err, E2BIG, "the command and its environment exceed %u bytes",
                   AGSX_CONTROL_JSON_MAX);
    return NULL;
  }
  return frame(json, jlen, m->op == AGSX_OP_INPUT ? m->data : NULL,
               m->op == AGSX_OP_INPUT ? m->len : 0, ret_len);
}

void agsx_control_msg_clear(struct agsx_control_msg *m) {
  agsx_strv_free(m->spec.argv);
  agsx_strv_free(m->spec.env);
  free((char *)m->spec.cwd);
  free((char *)m->spec.user);
  free((char *)m->spec.tag);
  memset(m, 0, sizeof(*m));
}

int agsx_control_reply_parse(const char *buf, size_t len, struct agsx_control_reply *ret,
                             agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  const char *data;
  size_t dlen;
  _cleanup_json_ yajl_val v = unframe(buf, len, &data, &dlen, err);
  if (v == NULL)
    return -1;
  uint64_t pid = 0, e = 0, code = 0;
  if (!get_bool(v, "ok", &ret->ok, err) || !get_uint(v, "pid", UINT32_MAX, &pid, err) ||
      !get_uint(v, "errno", 4095, &e, err) || !get_uint(v, "code", 255, &code, err) ||
      !get_str(v, "error", &ret->error, err)) {
    agsx_control_reply_clear(ret);
    return -1;
  }
  ret->pid = (uint32_t)pid;
  ret->errno_ = (int)e;
  ret->code = (int)code;
  if (!ret->ok && ret->error == NULL)
    ret->error = xstrdup("the sandbox's supervisor refused the request");
  return 0;
}

char *agsx_control_reply_encode(const struct agsx_control_reply *r, size_t *ret_len) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_bool(g, "ok", r->ok);
  if (r->ok) {
    agsx_json_kv_int(g, "pid", r->pid);
  } else {
    agsx_json_kv_int(g, "errno", r->errno_ > 0 && r->errno_ < 4096 ? r->errno_ : EIO);
    agsx_json_kv_int(g, "code", r->code >= 0 && r->code < 256 ? r->code : 125);
    agsx_json_key(g, "error");
    const char *e = r->error ? r->error : "failed";
    agsx_json_bytes(g, e, strnlen(e, 4096));
  }
  yajl_gen_map_close(g);
  size_t jlen;
  _cleanup_free_ char *json = agsx_json_gen_steal(g, &jlen);
  return frame(json, jlen, NULL, 0, ret_len);
}

void agsx_control_reply_clear(struct agsx_control_reply *r) {
  free(r->error);
  memset(r, 0, sizeof(*r));
}
