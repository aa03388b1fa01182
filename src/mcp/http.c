/* agsx — mcp: Streamable HTTP, MCP's other transport (`agsx mcp --listen`).
 *
 * One endpoint, /mcp, guarded as `agsx serve` is: the Host, and an Origin
 * when a browser sends one, must be this server's (DNS rebinding), and
 * every request carries `Authorization: Bearer TOKEN`.
 *
 * A session is a worker process that runs the stdio server
 * (agsx_mcp_serve) on two pipes. The front end forks it (it has no thread,
 * so the child is sound), hands it each POSTed message as a line and
 * routes its lines back: an answer to the request that waits for it, a
 * progress notification to the request whose progressToken it names (an
 * event of that request's SSE stream; a plain JSON answer has no room for
 * one). So no tool has a second implementation, sessions run side by side,
 * and each behaves as a stdio session does, labels and limits included. A
 * session ends at DELETE, after IDLE_SEC without a request, or when the
 * server stops: its worker's stdin closes, and it stops the session's
 * sandboxes (those without keep) as at the end of stdio.
 *
 * GET (a stream of messages the server starts on its own) is 405: agsx
 * sends none. Batches (arrays) are not part of MCP since 2025-06-18. */
#include "config.h"

#include "api/auth.h"
#include "api/mhd.h"
#include "api/server.h"
#include "api/wire.h"
#include "mcp/mcp-internal.h"
#include "mcp/rpc.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#define SESSIONS_MAX 16
#define IDLE_SEC 3600               /* a session without a request this long ends */
#define WORKER_LINE_MAX (64u << 20) /* a worker's line (its own, bounded answers) */
#define STOP_WAIT_NS 60000000000LL  /* for the workers to stop their sandboxes */
#define SESSION_HEADER "Mcp-Session-Id"

struct hsrv;
struct hreq;

/* An fd in the epoll set: which session, which pipe. */
struct hwatch {
  struct hsess *s;
  bool in;
};

struct hsess {
  struct hsess *next;
  struct hsrv *h;
  char id[33];
  pid_t pid;
  int in_fd, out_fd; /* the worker's stdin (ours to write) and stdout (ours to read) */
  struct hwatch w_in, w_out;
  struct agsx_buf wq; /* lines not yet written to IN_FD, from WOFF */
  size_t woff;
  bool want_out;        /* IN_FD is in the epoll set for EPOLLOUT */
  struct agsx_buf line; /* the worker's line in progress */
  bool discarding;
  int64_t used_ns;
  bool closing;      /* its stdin is closed: the worker ends the session */
  struct hreq *reqs; /* requests waiting for an answer */
};

/* A connection's request (MHD's con_cls). */
struct hreq {
  struct hsrv *h;
  struct MHD_Connection *c;
  struct agsx_buf body;
  bool too_big, handled;
  int refs; /* the connection's, and a streamed response's */
  /* waiting for an answer: its session, its id and progressToken (JSON) */
  struct hsess *sess;
  struct hreq *next;
  char *id, *ptoken;
  bool sse, answered, suspended;
  char sid[33];        /* the session a new one (initialize) is answered with */
  struct agsx_buf out; /* the answer (JSON), or SSE events from OFF */
  size_t off;
};

struct hsrv {
  const struct agsx_mcp_config *cfg;
  struct MHD_Daemon *d;
  int epfd, sigfd;
  struct hsess *sessions;
  size_t n_sessions;
  bool stopping;
};

static const char *const versions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05",
                                       "2024-10-07"};

/* ---- responses ---------------------------------------------------------------------------- */

static enum MHD_Result respond(struct MHD_Connection *c, unsigned status, const char *ctype,
                               const char *body, size_t len, const char *sid) {
  struct MHD_Response *resp =
      agsx_mhd.create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
  if (resp == NULL)
    return MHD_NO;
  if (ctype)
    agsx_mhd.add_response_header(resp, "Content-Type", ctype);
  if (sid && *sid)
    agsx_mhd.add_response_header(resp, SESSION_HEADER, sid);
  if (status == 401)
    agsx_mhd.add_response_header(resp, "WWW-Authenticate", "Bearer realm=\"agsx mcp\"");
  if (status == 405)
    agsx_mhd.add_response_header(resp, "Allow", "POST, DELETE");
  enum MHD_Result ret = agsx_mhd.queue_response(c, status, resp);
  agsx_mhd.destroy_response(resp);
  return ret;
}

/* An HTTP error with a JSON-RPC error body (id null: what the TypeScript
 * SDK's transport reads from a failed request). */
static enum MHD_Result fail(struct MHD_Connection *c, unsigned status, int code, const char *fmt,
                            ...) __attribute__((format(printf, 4, 5)));
static enum MHD_Result fail(struct MHD_Connection *c, unsigned status, int code, const char *fmt,
                            ...) {
  va_list ap;
  va_start(ap, fmt);
  _cleanup_free_ char *msg = xvasprintf(fmt, ap);
  va_end(ap);
  size_t len;
  _cleanup_free_ char *body = agsx_rpc_error(NULL, code, msg, &len);
  agsx_debug("mcp: http %u: %s", status, msg);
  return respond(c, status, "application/json", body, len, NULL);
}

/* ---- sessions ----------------------------------------------------------------------------- */

static void req_resume(struct hreq *r) {
  if (r->suspended) {
    r->suspended = false;
    agsx_mhd.resume_connection(r->c);
  }
}

static void req_unwait(struct hreq *r) {
  if (r->sess == NULL)
    return;
  for (struct hreq **p = &r->sess->reqs; *p; p = &(*p)->next)
    if (*p == r) {
      *p = r->next;
      break;
    }
  r->sess = NULL;
  r->next = NULL;
}

/* LINE (a message of the worker) for R: an SSE event, or the JSON answer;
 * FINAL: R's answer. */
static void deliver(struct hreq *r, const char *line, size_t len, bool final) {
  if (r->sse) {
    agsx_buf_add(&r->out, "event: message\ndata: ", 21);
    agsx_buf_add(&r->out, line, len);
    agsx_buf_add(&r->out, "\n\n", 2);
  } else if (final) {
    agsx_buf_add(&r->out, line, len);
  }
  if (final) {
    r->answered = true;
    req_unwait(r);
  }
  req_resume(r);
}

static void want_out(struct hsess *s, bool on) {
  if (s->want_out == on || s->in_fd < 0)
    return;
  struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = &s->w_in};
  epoll_ctl(s->h->epfd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, s->in_fd, &ev);
  s->want_out = on;
}

/* Its stdin closed: the worker ends the session (stops its sandboxes) and
 * exits; its stdout's end removes it. */
static void sess_close(struct hsess *s, const char *why) {
  if (s->closing)
    return;
  agsx_info("mcp: http session %.8s: %s", s->id, why);
  want_out(s, false);
  agsx_closep(&s->in_fd);
  s->closing = true;
}

static void sess_flush(struct hsess *s) {
  while (s->in_fd >= 0 && s->woff < s->wq.len) {
    ssize_t n = write(s->in_fd, s->wq.p + s->woff, s->wq.len - s->woff);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      break;
    if (n < 0) {
      sess_close(s, "its worker stopped reading");
      return;
    }
    s->woff += (size_t)n;
  }
  if (s->woff == s->wq.len)
    s->woff = s->wq.len = 0;
  want_out(s, s->woff < s->wq.len);
}

static void sess_free(struct hsess *s) {
  struct hsrv *h = s->h;
  while (s->reqs) {
    size_t len;
    struct hreq *r = s->reqs;
    _cleanup_free_ char *line =
        agsx_rpc_error(r->id, AGSX_RPC_INTERNAL_ERROR, "the session's worker ended", &len);
    deliver(r, line, len, true);
  }
  for (struct hsess **p = &h->sessions; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      break;
    }
  h->n_sessions--;
  want_out(s, false);
  agsx_closep(&s->in_fd);
  if (s->out_fd >= 0)
    epoll_ctl(h->epfd, EPOLL_CTL_DEL, s->out_fd, NULL);
  agsx_closep(&s->out_fd);
  agsx_buf_clear(&s->wq);
  agsx_buf_clear(&s->line);
  agsx_info("mcp: http session %.8s ended", s->id);
  free(s);
}

static struct hreq *waiting(struct hsess *s, const char *id, bool by_token) {
  for (struct hreq *r = s->reqs; r; r = r->next) {
    const char *k = by_token ? r->ptoken : r->id;
    if (k && id && strcmp(k, id) == 0)
      return r;
  }
  return NULL;
}

static void worker_line(struct hsess *s, const char *line, size_t len) {
  struct agsx_rpc_msg m;
  int code;
  agsx_error_t err = NULL;
  if (agsx_rpc_parse(line, len, &m, &code, &err) < 0) {
    agsx_warn("mcp: http session %.8s: a line of its worker: %s", s->id, err->msg);
    agsx_error_free(&err);
  } else if (m.kind == AGSX_RPC_RESPONSE) {
    struct hreq *r = waiting(s, m.id, false);
    if (r)
      deliver(r, line, len, true);
  } else if (m.kind == AGSX_RPC_NOTIFICATION && strcmp(m.method, "notifications/progress") == 0) {
    _cleanup_free_ char *tok = agsx_rpc_id_of(m.params, "progressToken");
    struct hreq *r = waiting(s, tok, true);
    if (r && r->sse)
      deliver(r, line, len, false);
  }
  agsx_rpc_msg_clear(&m);
  s->used_ns = agsx_mono_ns();
}

static void sess_read(struct hsess *s) {
  char buf[65536];
  for (;;) {
    ssize_t n = read(s->out_fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      return;
    if (n <= 0) {
      sess_free(s);
      return;
    }
    for (ssize_t i = 0; i < n;) {
      const char *nl = memchr(buf + i, '\n', (size_t)(n - i));
      size_t k = nl ? (size_t)(nl - (buf + i)) : (size_t)(n - i);
      if (!s->discarding && s->line.len + k > WORKER_LINE_MAX) {
        agsx_warn("mcp: http session %.8s: a line of its worker over %u bytes dropped", s->id,
                  WORKER_LINE_MAX);
        s->discarding = true;
        s->line.len = 0;
      }
      if (!s->discarding)
        agsx_buf_add(&s->line, buf + i, k);
      i += (ssize_t)k;
      if (nl) {
        i++;
        if (!s->discarding)
          worker_line(s, s->line.p, s->line.len);
        s->discarding = false;
        s->line.len = 0;
      }
    }
  }
}

/* The worker: the stdio server on the pipes, as fds 0 and 1. */
static _Noreturn void worker(const struct agsx_mcp_config *cfg, int in, int out) {
  if (dup2(in, STDIN_FILENO) < 0 || dup2(out, STDOUT_FILENO) < 0)
    _exit(125);
  agsx_close_all_except(NULL, 0); /* the listener, the connections, other sessions' pipes */
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  struct agsx_mcp_config c = *cfg;
  c.in_fd = STDIN_FILENO;
  c.out_fd = STDOUT_FILENO;
  c.listen = NULL;
  agsx_error_t err = NULL;
  if (agsx_mcp_serve(&c, &err) < 0) {
    agsx_warn("mcp: http session: %s", err->msg);
    _exit(1);
  }
  _exit(0);
}

static struct hsess *sess_start(struct hsrv *h, agsx_error_t *err) {
  int in[2] = {-1, -1}, out[2] = {-1, -1};
  if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0) {
    agsx_error_set(err, errno, "pipe");
    goto fail;
  }
  pid_t pid = fork();
  if (pid < 0) {
    agsx_error_set(err, errno, "fork a session");
    goto fail;
  }
  if (pid == 0)
    worker(h->cfg, in[0], out[1]);
  close(in[0]);
  close(out[1]);
  struct hsess *s = xzalloc(sizeof(*s));
  s->h = h;
  s->pid = pid;
  s->in_fd = in[1];
  s->out_fd = out[0];
  s->w_in = (struct hwatch){s, true};
  s->w_out = (struct hwatch){s, false};
  s->used_ns = agsx_mono_ns();
  agsx_random_hex(s->id, 16);
  fcntl(s->in_fd, F_SETFL, O_NONBLOCK);
  fcntl(s->out_fd, F_SETFL, O_NONBLOCK);
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &s->w_out};
  epoll_ctl(h->epfd, EPOLL_CTL_ADD, s->out_fd, &ev);
  s->next = h->sessions;
  h->sessions = s;
  h->n_sessions++;
  agsx_info("mcp: http session %.8s: worker %d", s->id, (int)pid);
  return s;
fail:
  for (int i = 0; i < 2; i++) {
    agsx_closep(&in[i]);
    agsx_closep(&out[i]);
  }
  return NULL;
}

static struct hsess *sess_find(struct hsrv *h, const char *id) {
  for (struct hsess *s = h->sessions; s; s = s->next)
    if (!s->closing && agsx_api_secret_equal(s->id, id))
      return s;
  return NULL;
}

/* ---- requests ----------------------------------------------------------------------------- */

static void req_unref(struct hreq *r) {
  if (--r->refs > 0)
    return;
  req_unwait(r);
  agsx_buf_clear(&r->body);
  agsx_buf_clear(&r->out);
  free(r->id);
  free(r->ptoken);
  free(r);
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  struct hreq *r = cls;
  if (r->off < r->out.len)
    return (ssize_t)agsx_buf_drain(&r->out, &r->off, buf, max);
  if (r->answered)
    return MHD_CONTENT_READER_END_OF_STREAM;
  r->suspended = true;
  agsx_mhd.suspend_connection(r->c);
  return 0;
}

static void sse_free(void *cls) { req_unref(cls); }

static const char *header(struct MHD_Connection *c, const char *name) {
  return agsx_mhd.lookup_connection_value(c, MHD_HEADER_KIND, name);
}

/* Whether the comma-separated media ranges of ACCEPT name TYPE, or any type. */
static bool accepts(const char *accept, const char *type) {
  if (accept == NULL)
    return false;
  size_t tl = strlen(type);
  for (const char *p = accept; *p;) {
    p += strspn(p, " \t,");
    size_t n = strcspn(p, ",;");
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
      n--;
    if ((n == tl && strncasecmp(p, type, tl) == 0) || (n == 3 && strncmp(p, "*/*", 3) == 0))
      return true;
    p += strcspn(p, ",");
  }
  return false;
}

/* Host and Origin (against DNS rebinding), then the bearer token. */
static enum MHD_Result admit(struct hsrv *h, struct MHD_Connection *c, bool *ok) {
  *ok = false;
  bool origin;
  const char *v;
  if (!agsx_mhd_host_allowed(c, NULL, &origin, &v))
    return origin ? fail(c, 403, AGSX_RPC_INVALID_REQUEST,
                         "cross-site request refused (origin `%.64s`)", v)
                  : fail(c, 403, AGSX_RPC_INVALID_REQUEST,
                         "host `%.64s` is not this server's (its listen address or localhost)", v);
  v = header(c, "Authorization");
  if (v == NULL || strncasecmp(v, "Bearer ", 7) != 0 ||
      !agsx_api_secret_equal(v + 7 + strspn(v + 7, " "), h->cfg->token))
    return fail(c, 401, AGSX_RPC_INVALID_REQUEST,
                "a valid `Authorization: Bearer TOKEN` is required (the server's token)");
  *ok = true;
  return MHD_YES;
}

static enum MHD_Result post(struct hsrv *h, struct hreq *r) {
  struct MHD_Connection *c = r->c;
  const char *ct = header(c, "Content-Type");
  if (ct == NULL || strncasecmp(ct, "application/json", 16) != 0 ||
      (ct[16] && ct[16] != ';' && ct[16] != ' '))
    return fail(c, 415, AGSX_RPC_INVALID_REQUEST, "the body must be application/json");
  const char *acc = header(c, "Accept");
  bool json = accepts(acc, "application/json"), sse = accepts(acc, "text/event-stream");
  if (!json && !sse)
    return fail(c, 406, AGSX_RPC_INVALID_REQUEST,
                "Accept must name application/json or text/event-stream");
  if (r->too_big)
    return fail(c, 413, AGSX_RPC_PARSE_ERROR, AGSX_RPC_TOO_LONG);
  const char *pv = header(c, "MCP-Protocol-Version");
  if (pv) {
    bool known = false;
    for (size_t i = 0; i < AGSX_ARRAY_SIZE(versions); i++)
      known |= strcmp(pv, versions[i]) == 0;
    if (!known)
      return fail(c, 400, AGSX_RPC_INVALID_REQUEST, "unsupported MCP-Protocol-Version `%.32s`", pv);
  }
  /* A message is one line to the worker: a raw newline in JSON is only
   * ever whitespace (strings have theirs escaped). */
  for (size_t i = 0; i < r->body.len; i++)
    if (r->body.p[i] == '\n' || r->body.p[i] == '\r')
      r->body.p[i] = ' ';
  struct agsx_rpc_msg m;
  int code;
  agsx_error_t err = NULL;
  if (agsx_rpc_parse(r->body.p ? r->body.p : "", r->body.len, &m, &code, &err) < 0) {
    enum MHD_Result ret = fail(c, 400, code, "%s", err->msg);
    agsx_error_free(&err);
    agsx_rpc_msg_clear(&m);
    return ret;
  }
  const char *sid = header(c, SESSION_HEADER);
  bool init = m.kind == AGSX_RPC_REQUEST && strcmp(m.method, "initialize") == 0;
  struct hsess *s = NULL;
  enum MHD_Result ret = MHD_YES;
  if (sid) {
    s = sess_find(h, sid);
    if (s == NULL) {
      ret = fail(c, 404, AGSX_RPC_INVALID_REQUEST,
                 "no session `%.40s` (it ended: initialize again)", sid);
      goto out;
    }
  } else if (!init) {
    ret = fail(c, 400, AGSX_RPC_INVALID_REQUEST,
               "an Mcp-Session-Id header is required (initialize first)");
    goto out;
  } else if (h->n_sessions >= SESSIONS_MAX) {
    ret = fail(c, 503, AGSX_RPC_INTERNAL_ERROR, "%d sessions already: end one (DELETE /mcp)",
               SESSIONS_MAX);
    goto out;
  } else if ((s = sess_start(h, &err)) == NULL) {
    ret = fail(c, 500, AGSX_RPC_INTERNAL_ERROR, "start a session: %s", err->msg);
    agsx_error_free(&err);
    goto out;
  }
  if (s->wq.len - s->woff + r->body.len + 1 > 2 * AGSX_RPC_LINE_MAX) {
    ret = fail(c, 503, AGSX_RPC_INTERNAL_ERROR, "the session is not reading its messages");
    goto out;
  }
  s->used_ns = agsx_mono_ns();
  agsx_buf_add(&s->wq, r->body.p, r->body.len);
  agsx_buf_add(&s->wq, "\n", 1);
  sess_flush(s);
  if (m.kind != AGSX_RPC_REQUEST) {
    /* a notification (notifications/cancelled reaches the worker's scan)
     * or a response: accepted, nothing to answer */
    ret = respond(c, 202, NULL, "", 0, NULL);
    goto out;
  }
  r->sess = s;
  r->next = s->reqs;
  s->reqs = r;
  r->id = xstrdup(m.id);
  r->ptoken = agsx_rpc_id_of(agsx_json_get(m.params, "_meta"), "progressToken");
  r->sse = sse;
  if (init)
    memcpy(r->sid, s->id, sizeof(r->sid));
  if (sse) {
    struct MHD_Response *resp =
        agsx_mhd.create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, sse_read, r, sse_free);
    if (resp == NULL) {
      ret = MHD_NO;
      goto out;
    }
    r->refs++;
    agsx_mhd.add_response_header(resp, "Content-Type", "text/event-stream");
    agsx_mhd.add_response_header(resp, "Cache-Control", "no-cache");
    if (init)
      agsx_mhd.add_response_header(resp, SESSION_HEADER, r->sid);
    ret = agsx_mhd.queue_response(c, 200, resp);
    agsx_mhd.destroy_response(resp);
  } else {
    r->suspended = true;
    agsx_mhd.suspend_connection(c);
  }
out:
  agsx_rpc_msg_clear(&m);
  return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *size, void **con_cls) {
  (void)version;
  struct hsrv *h = cls;
  struct hreq *r = *con_cls;
  if (r == NULL) {
    r = xzalloc(sizeof(*r));
    r->h = h;
    r->c = c;
    r->refs = 1;
    *con_cls = r;
    return MHD_YES;
  }
  if (*size) {
    if (r->body.len + *size > AGSX_RPC_LINE_MAX)
      r->too_big = true;
    else
      agsx_buf_add(&r->body, data, *size);
    *size = 0;
    return MHD_YES;
  }
  if (r->handled) /* resumed: a JSON answer is here */
    return r->answered
               ? respond(c, 200, "application/json", r->out.p ? r->out.p : "", r->out.len, r->sid)
               : MHD_NO;
  r->handled = true;
  if (h->stopping)
    return fail(c, 503, AGSX_RPC_INTERNAL_ERROR, "the server is stopping");
  if (strcmp(url, "/mcp") != 0)
    return fail(c, 404, AGSX_RPC_INVALID_REQUEST, "no such endpoint: MCP is at /mcp");
  bool ok;
  enum MHD_Result ret = admit(h, c, &ok);
  if (!ok)
    return ret;
  if (strcmp(method, "POST") == 0)
    return post(h, r);
  if (strcmp(method, "DELETE") == 0) {
    const char *sid = header(c, SESSION_HEADER);
    struct hsess *s = sid ? sess_find(h, sid) : NULL;
    if (s == NULL)
      return fail(c, sid ? 404 : 400, AGSX_RPC_INVALID_REQUEST,
                  sid ? "no such session" : "an Mcp-Session-Id header is required");
    sess_close(s, "the client ended it");
    return respond(c, 200, NULL, "", 0, NULL);
  }
  return fail(c, 405, AGSX_RPC_INVALID_REQUEST,
              "method %.16s: /mcp takes POST (messages) and DELETE (the session's end)", method);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  (void)cls, (void)c, (void)toe;
  struct hreq *r = *con_cls;
  *con_cls = NULL;
  if (r == NULL)
    return;
  req_unwait(r); /* its client went away: the answer is dropped */
  r->suspended = false;
  req_unref(r);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  char msg[512];
  vsnprintf(msg, sizeof(msg), fmt, ap);
  msg[strcspn(msg, "\n")] = '\0';
  agsx_debug("mcp: libmicrohttpd: %s", msg);
}

/* ---- the loop ----------------------------------------------------------------------------- */

static void reap(void) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      agsx_warn("mcp: a session's worker %d ended with status %d", (int)pid, status);
}

static void on_signals(struct hsrv *h) {
  struct signalfd_siginfo si;
  while (read(h->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
    if (si.ssi_signo != SIGCHLD && !h->stopping) {
      agsx_info("mcp: signal %u: stopping", si.ssi_signo);
      h->stopping = true;
      for (struct hsess *s = h->sessions; s; s = s->next)
        sess_close(s, "the server is stopping");
    }
  reap();
}

static void tick(struct hsrv *h) {
  int64_t now = agsx_mono_ns();
  for (struct hsess *s = h->sessions; s; s = s->next)
    if (!s->closing && s->reqs == NULL && now - s->used_ns > IDLE_SEC * 1000000000LL)
      sess_close(s, "idle for an hour");
}

static void loop(struct hsrv *h) {
  int64_t stop_by = 0;
  for (;;) {
    if (h->stopping) {
      if (stop_by == 0)
        stop_by = agsx_mono_ns() + STOP_WAIT_NS;
      if (h->sessions == NULL || agsx_mono_ns() >= stop_by)
        break;
    }
    int64_t t = 1000;
    MHD_UNSIGNED_LONG_LONG mt;
    if (agsx_mhd.get_timeout(h->d, &mt) == MHD_YES && (int64_t)mt < t)
      t = (int64_t)mt;
    struct epoll_event evs[32];
    int n = epoll_wait(h->epfd, evs, AGSX_ARRAY_SIZE(evs), (int)t);
    if (n < 0 && errno != EINTR) {
      agsx_warn("mcp: epoll_wait: %s", strerror(errno));
      break;
    }
    for (int i = 0; i < n; i++) {
      void *p = evs[i].data.ptr;
      if (p == &h->sigfd) {
        on_signals(h);
      } else if (p) {
        /* a session freed earlier in this batch is no longer in the list */
        struct hwatch *w = p;
        bool live = false;
        for (struct hsess *s = h->sessions; s; s = s->next)
          live |= s == w->s;
        if (live && w->in)
          sess_flush(w->s);
        else if (live)
          sess_read(w->s);
      }
    }
    tick(h);
    agsx_mhd.run(h->d);
  }
}

int agsx_mcp_serve_http(const struct agsx_mcp_config *cfg, agsx_error_t *err) {
  if (agsx_mhd_load(err) < 0)
    return -1;
  struct hsrv h = {.cfg = cfg, .epfd = -1, .sigfd = -1};
  int ret = -1;
  _cleanup_close_ int lfd = agsx_api_listen_socket(cfg->listen, false, "token", err);
  if (lfd < 0)
    return -1;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_BLOCK, &set, NULL);
  signal(SIGPIPE, SIG_IGN);
  h.sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  h.epfd = epoll_create1(EPOLL_CLOEXEC);
  if (h.sigfd < 0 || h.epfd < 0) {
    agsx_error_set(err, errno, "set up the loop");
    goto out;
  }
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &h.sigfd};
  epoll_ctl(h.epfd, EPOLL_CTL_ADD, h.sigfd, &ev);
  h.d = agsx_mhd.start_daemon(
      MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, &h,
      MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_LISTEN_SOCKET, lfd,
      MHD_OPTION_NOTIFY_COMPLETED, on_completed, &h, MHD_OPTION_CONNECTION_LIMIT, 256u,
      MHD_OPTION_CONNECTION_TIMEOUT, 300u, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(256 * 1024),
      MHD_OPTION_END);
  if (h.d == NULL) {
    agsx_error_set(err, 0, "libmicrohttpd did not start");
    goto out;
  }
  lfd = -1; /* the daemon's now */
  const union MHD_DaemonInfo *info = agsx_mhd.get_daemon_info(h.d, MHD_DAEMON_INFO_EPOLL_FD);
  ev = (struct epoll_event){.events = EPOLLIN, .data.ptr = NULL};
  if (info == NULL || epoll_ctl(h.epfd, EPOLL_CTL_ADD, info->epoll_fd, &ev) < 0) {
    agsx_error_set(err, errno, "epoll");
    goto out;
  }
  agsx_info("mcp: serving MCP (Streamable HTTP) at http://%s/mcp", cfg->listen);
  if (cfg->ready)
    cfg->ready(cfg->listen);
  loop(&h);
  ret = 0;
out:
  /* Whatever still waits gets the end of its stream, for libmicrohttpd
   * refuses to stop with suspended connections. */
  while (h.sessions) {
    agsx_warn("mcp: http session %.8s: its worker did not end in time: killed (its sandboxes "
              "run out their lifetime)",
              h.sessions->id);
    kill(h.sessions->pid, SIGKILL);
    sess_free(h.sessions);
  }
  if (h.d) {
    agsx_mhd.run(h.d);
    agsx_mhd.stop_daemon(h.d);
  }
  reap();
  agsx_closep(&h.sigfd);
  agsx_closep(&h.epfd);
  return ret;
}
