/* agsx — api: the listener and the one loop (see server.h, README.md).
 *
 * libmicrohttpd runs in its external-epoll mode: no thread of its own, its
 * epoll fd nested in ours. A streamed response that has nothing to send
 * suspends its connection; the loop resumes it when the stream's source
 * (a process log, a watcher) has more, or a keepalive or deadline is due.
 * One thread means sandbox creation (which forks a supervisor) never forks
 * a multithreaded process, and nothing here needs a lock. */
#include "config.h"

#include "api/api-internal.h"
#include "api/auth.h"
#include "net/relay.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/wait.h>

/* ---- the listen address ------------------------------------------------------------------ */

int agsx_api_listen_parse(const char *listen, void *ret_sa, unsigned *ret_len, bool *ret_loopback,
                          agsx_error_t *err) {
  const char *colon = strrchr(listen, ':');
  if (colon == NULL || colon == listen)
    return agsx_error_set(err, EINVAL, "invalid listen address `%s` (want ADDR:PORT)", listen);
  char *end;
  errno = 0;
  unsigned long port = strtoul(colon + 1, &end, 10);
  if (errno || *end || colon[1] == '\0' || port == 0 || port > 65535)
    return agsx_error_set(err, EINVAL, "invalid port in `%s` (1 to 65535)", listen);
  _cleanup_free_ char *host = xstrndup(listen, (size_t)(colon - listen));
  if (host[0] == '[') {
    size_t n = strlen(host);
    if (n < 3 || host[n - 1] != ']')
      return agsx_error_set(err, EINVAL, "invalid listen address `%s`", listen);
    host[n - 1] = '\0';
    struct sockaddr_in6 *a = ret_sa;
    memset(a, 0, sizeof(*a));
    a->sin6_family = AF_INET6;
    a->sin6_port = htons((uint16_t)port);
    if (inet_pton(AF_INET6, host + 1, &a->sin6_addr) != 1)
      return agsx_error_set(err, EINVAL, "invalid IPv6 address in `%s`", listen);
    *ret_len = sizeof(*a);
    *ret_loopback = IN6_IS_ADDR_LOOPBACK(&a->sin6_addr);
    return 0;
  }
  struct sockaddr_in *a = ret_sa;
  memset(a, 0, sizeof(*a));
  a->sin_family = AF_INET;
  a->sin_port = htons((uint16_t)port);
  if (strcmp(host, "localhost") == 0)
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  else if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
    return agsx_error_set(err, EINVAL, "invalid IPv4 address in `%s`", listen);
  *ret_len = sizeof(*a);
  *ret_loopback = (ntohl(a->sin_addr.s_addr) >> 24) == 127;
  return 0;
}

/* ---- timing ------------------------------------------------------------------------------ */

void agsx_api_mark(struct agsx_api_timing *t, const char *what) {
  if (t->t0 == 0 || t->n >= AGSX_API_MARKS)
    return;
  t->m[t->n].what = what;
  t->m[t->n].ns = agsx_mono_ns();
  t->n++;
}

/* One debug line: WHAT, then each mark in ms since the request's headers. */
static void timing_log(const struct agsx_api_timing *t, const char *what, unsigned status) {
  if (t->t0 == 0)
    return;
  char line[512];
  size_t k = 0;
  for (unsigned i = 0; i < t->n && k < sizeof(line); i++) {
    int n = snprintf(line + k, sizeof(line) - k, "%s%s %.3f", i ? ", " : "", t->m[i].what,
                     (double)(t->m[i].ns - t->t0) / 1e6);
    if (n < 0)
      break;
    k += (size_t)n;
  }
  line[k < sizeof(line) ? k : sizeof(line) - 1] = '\0';
  /* The start on CLOCK_MONOTONIC too, which a client on this host can
   * line up with its own (Node's process.hrtime, say). */
  agsx_debug("serve: timing: %s %u: at %.3f: %s ms", what, status, (double)t->t0 / 1e6, line);
}

/* ---- responses --------------------------------------------------------------------------- */

#define STR_(x) #x
#define STR(x) STR_(x)
#define KEEPALIVE_TIMEOUT STR(AGSX_API_HEADER_SEC)

const char *agsx_req_header(struct req *r, const char *name) {
  return agsx_mhd.lookup_connection_value(r->c, MHD_HEADER_KIND, name);
}

const char *agsx_req_query(struct req *r, const char *name) {
  return agsx_mhd.lookup_connection_value(r->c, MHD_GET_ARGUMENT_KIND, name);
}

void agsx_respond_queue(struct req *r, unsigned status, struct MHD_Response *resp) {
  if (resp == NULL) {
    agsx_warn("serve: out of memory for a response");
    return;
  }
  agsx_debug("serve: %s %s%s%s: %u", r->method, r->path, r->envd ? " for " : "",
             r->envd ? r->e2b_id : "", status);
  agsx_api_mark(&r->tm, "answered");
  r->status = status;
  /* How long a kept-alive connection may wait for its next request
   * (conns.c): clients that read it (undici: the JS SDKs) let go first. */
  agsx_mhd.add_response_header(resp, "Keep-Alive", "timeout=" KEEPALIVE_TIMEOUT);
  if (agsx_mhd.queue_response(r->c, status, resp) != MHD_YES)
    agsx_debug("serve: %s %s: the response could not be queued", r->method, r->path);
  agsx_mhd.destroy_response(resp);
  r->answered = true;
}

void agsx_respond(struct req *r, unsigned status, const char *ctype, const char *body, size_t len) {
  if (r->answered)
    return;
  struct MHD_Response *resp =
      agsx_mhd.create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
  if (resp && ctype)
    agsx_mhd.add_response_header(resp, "Content-Type", ctype);
  agsx_respond_queue(r, status, resp);
}

void agsx_respond_json(struct req *r, unsigned status, yajl_gen g) {
  size_t len;
  _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
  agsx_respond(r, status, "application/json", s, len);
}

static void respond_msg(struct req *r, unsigned status, yajl_gen g, const char *code_s,
                        const char *msg) {
  yajl_gen_map_open(g);
  if (code_s)
    agsx_json_kv_str(g, "code", code_s);
  else
    agsx_json_kv_int(g, "code", status);
  agsx_json_kv_str(g, "message", msg);
  yajl_gen_map_close(g);
  agsx_respond_json(r, status, g);
}

void agsx_respond_error(struct req *r, unsigned status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  _cleanup_free_ char *msg = xvasprintf(fmt, ap);
  va_end(ap);
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  respond_msg(r, status, g, NULL, msg);
}

void agsx_respond_connect_error(struct req *r, enum agsx_connect_code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  _cleanup_free_ char *msg = NULL;
  if (vasprintf(&msg, fmt, ap) < 0)
    msg = NULL;
  va_end(ap);
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  respond_msg(r, (unsigned)agsx_connect_code_status(code), g, agsx_connect_code_name(code),
              msg ? msg : "error");
}

/* ---- streams ----------------------------------------------------------------------------- */

struct stream *agsx_stream_new(struct server *s, struct MHD_Connection *c) {
  struct stream *st = xzalloc(sizeof(*st));
  st->s = s;
  st->c = c;
  st->pollfd = -1;
  st->last_ns = agsx_mono_ns();
  st->keepalive_ns = 90 * 1000000000LL; /* envd's default */
  st->keepalive_json = "{\"event\":{\"keepalive\":{}}}";
  st->next_check_ns = st->last_ns + 1000000000LL;
  return st;
}

bool agsx_stream_has_room(const struct stream *st) {
  size_t cap =
      st->s->queued >= AGSX_API_QUEUE_TOTAL ? AGSX_API_STREAM_QUEUE_LOW : AGSX_API_STREAM_QUEUE;
  return st->out.len - st->off < cap;
}

void agsx_stream_event(struct stream *st, const char *json) {
  if (st->ended)
    return;
  /* Keep the queue from creeping along an ever larger buffer. */
  if (st->off > 0 && st->off >= st->out.len / 2) {
    memmove(st->out.p, st->out.p + st->off, st->out.len - st->off);
    st->out.len -= st->off;
    st->off = 0;
  }
  agsx_connect_frame(&st->out, 0, json, strlen(json));
  st->last_ns = agsx_mono_ns();
}

void agsx_stream_end(struct stream *st, int code, const char *message) {
  if (st->ended)
    return;
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  if (code >= 0) {
    agsx_json_key(g, "error");
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "code", agsx_connect_code_name((enum agsx_connect_code)code));
    agsx_json_kv_str(g, "message", message);
    yajl_gen_map_close(g);
  }
  yajl_gen_map_close(g);
  size_t len;
  _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
  agsx_connect_frame(&st->out, AGSX_CONNECT_FLAG_END, s, len);
  st->ended = true;
}

void agsx_stream_abort(struct stream *st) {
  if (st->ended)
    return;
  st->ended = st->aborted = true;
}

int agsx_stream_watch_fd(struct stream *st, int fd) {
  if (fd < 0)
    return 0; /* a subscription of the hub, whose fd the loop has */
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = st};
  if (epoll_ctl(st->s->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
    return -1;
  st->pollfd = fd;
  return 0;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  struct stream *st = cls;
  (void)pos;
  if (st->off < st->out.len) {
    if (!st->first_marked) {
      st->first_marked = true;
      agsx_api_mark(&st->tm, "first frame");
    }
    return (ssize_t)agsx_buf_drain(&st->out, &st->off, buf, max);
  }
  if (st->ended) {
    agsx_api_mark(&st->tm, "end");
    return st->aborted ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
  }
  /* Nothing yet: returning 0 would have MHD call again at once. */
  agsx_mhd.suspend_connection(st->c);
  st->suspended = true;
  return 0;
}

static void stream_free(void *cls) {
  struct stream *st = cls;
  timing_log(&st->tm, st->what, 200);
  if (st->pollfd >= 0)
    epoll_ctl(st->s->epfd, EPOLL_CTL_DEL, st->pollfd, NULL);
  agsx_api_stream_free_parts(st);
  if (st->pprev) {
    *st->pprev = st->next;
    if (st->next)
      st->next->pprev = st->pprev;
    st->s->n_streams--;
  }
  agsx_buf_clear(&st->out);
  free(st);
}

void agsx_stream_free(struct stream *st) { stream_free(st); }

void agsx_respond_stream(struct req *r, struct stream *st) {
  struct server *s = r->s;
  st->next = s->streams;
  if (s->streams)
    s->streams->pprev = &st->next;
  st->pprev = &s->streams;
  s->streams = st;
  s->n_streams++;
  st->tm = r->tm;
  agsx_api_mark(&st->tm, "stream");
  snprintf(st->what, sizeof(st->what), "%s %s", r->method, r->path);
  r->tm.t0 = 0; /* the stream logs it */
  struct MHD_Response *resp = agsx_mhd.create_response_from_callback(MHD_SIZE_UNKNOWN, 256 * 1024,
                                                                     stream_read, st, stream_free);
  if (resp == NULL) {
    stream_free(st);
    return;
  }
  agsx_mhd.add_response_header(resp, "Content-Type", "application/connect+json");
  agsx_respond_queue(r, 200, resp);
}

/* A suspended stream's socket is out of MHD's sight: a client that went
 * away would be noticed only when the next keepalive fails to be written
 * (two of them: the first still goes out), seconds to minutes later, with
 * its cell or watch going on meanwhile. So the server asks the sockets of
 * suspended streams itself, once a second. */
static void streams_peer_check(struct server *s, int64_t now) {
  if (now < s->streams_peer_ns)
    return;
  s->streams_peer_ns = now + AGSX_API_SWEEP_MS * 1000000LL;
  for (struct stream *st = s->streams; st; st = st->next)
    if (st->suspended && !st->ended && agsx_api_conn_peer_gone(st->c))
      agsx_stream_abort(st);
}

static void pump_streams(struct server *s) {
  int64_t now = agsx_mono_ns();
  streams_peer_check(s, now);
  s->queued = 0;
  for (struct stream *st = s->streams; st; st = st->next)
    s->queued += st->out.len - st->off;
  for (struct stream *st = s->streams; st; st = st->next) {
    if (!st->ended) {
      agsx_api_stream_pump(st, now);
      if (!st->ended && st->keepalive_ns > 0 && now - st->last_ns >= st->keepalive_ns)
        agsx_stream_event(st, st->keepalive_json);
      /* A sandbox killed meanwhile ends its streams (its processes' logs
       * may never get their end record). */
      if (!st->ended && now >= st->next_check_ns) {
        st->next_check_ns = now + 1000000000LL;
        struct agsx_record rec;
        agsx_error_t err = NULL;
        if (agsx_api_find_sandbox(s, st->id, &rec, &err) < 0) {
          agsx_error_free(&err);
          agsx_api_stream_pump(st, now); /* what the log still has */
          agsx_stream_abort(st);
        } else {
          agsx_record_clear(&rec);
        }
      }
    }
    if (st->suspended && (st->out.len > st->off || st->ended)) {
      st->suspended = false;
      agsx_mhd.resume_connection(st->c);
    }
  }
}

static int64_t streams_timeout_ms(struct server *s) {
  int64_t now = agsx_mono_ns(), best = 1000;
  for (struct stream *st = s->streams; st; st = st->next) {
    if (st->ended)
      continue;
    int64_t t = -1;
    if (st->keepalive_ns > 0)
      t = st->last_ns + st->keepalive_ns;
    if (st->deadline_ns > 0 && (t < 0 || st->deadline_ns < t))
      t = st->deadline_ns;
    if (t >= 0) {
      int64_t ms = t > now ? (t - now + 999999) / 1000000 : 0;
      if (ms < best)
        best = ms;
    }
  }
  return best;
}

/* ---- requests ----------------------------------------------------------------------------- */

void agsx_req_wait(struct req *r, void (*cont)(struct req *r)) {
  r->cont = cont;
  r->waiting = true;
  agsx_mhd.suspend_connection(r->c);
}

void agsx_req_continue(struct req *r) {
  if (!r->waiting)
    return;
  r->waiting = false;
  agsx_mhd.resume_connection(r->c);
}

void agsx_req_drop(struct req *r) { r->answered = r->dropped = true; }

static void req_free(struct req *r) {
  agsx_api_code_req_free(r);
  agsx_api_req_free_parts(r);
  if (r->has_rec)
    agsx_record_clear(&r->rec);
  agsx_buf_clear(&r->body);
  free(r->path);
  free(r->upload_error);
  free(r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  (void)toe;
  agsx_api_conn_idle(cls, c); /* kept alive: it waits for the next request's headers */
  struct req *r = *con_cls;
  if (r) {
    agsx_api_mark(&r->tm, "sent");
    char what[48];
    snprintf(what, sizeof(what), "%s %s", r->method, r->path);
    timing_log(&r->tm, what, r->status);
  }
  if (*con_cls)
    req_free(*con_cls);
  *con_cls = NULL;
}

static void dispatch(struct req *r) {
  if (r->envd)
    agsx_api_envd(r);
  else
    agsx_api_control_plane(r);
  if (!r->answered && !r->waiting)
    agsx_respond_error(r, 500, "no response");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *data_size, void **con_cls) {
  struct server *s = cls;
  (void)version;
  struct req *r = *con_cls;
  if (r == NULL) {
    r = xzalloc(sizeof(*r));
    r->s = s;
    r->c = c;
    r->method = method;
    r->path = xstrdup(url);
    if (agsx_log_level >= AGSX_LOG_DEBUG)
      r->tm.t0 = agsx_mono_ns();
    *con_cls = r;
    const char *length = agsx_req_header(r, "Content-Length");
    r->body_length = length ? strtoull(length, NULL, 10) : UINT64_MAX;
    agsx_api_conn_request(s, c);
    r->envd = agsx_req_header(r, "E2b-Sandbox-Id") != NULL;
    /* Credentials first: nothing of a refused request's body is read. */
    if (!agsx_api_admit(r)) {
      r->body_dropped = true;
      return MHD_YES;
    }
    if (r->envd && r->port == AGSX_API_PORT_ENVD && strcmp(method, "POST") == 0 &&
        strcmp(url, "/files") == 0) {
      r->upload = true;
      agsx_api_upload_begin(r);
      return MHD_YES;
    }
    /* Only a cell of code may be bigger than other bodies. */
    bool code = r->envd && r->port == AGSX_API_PORT_CODE; /* plain HTTP, not Connect */
    bool execute = code && strcmp(method, "POST") == 0 && strcmp(url, "/execute") == 0;
    r->body_max = execute ? AGSX_API_CODE_BODY_MAX : AGSX_API_BODY_MAX;
    /* A body announced too large is refused before it is read. */
    const char *cl = agsx_req_header(r, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > r->body_max) {
      r->body_dropped = true;
      if (r->envd && !code)
        agsx_respond_connect_error(r, AGSX_CONNECT_RESOURCE_EXHAUSTED,
                                   "request body over %zu bytes", r->body_max);
      else
        agsx_respond_error(r, 413, "request body over %zu bytes", r->body_max);
    }
    return MHD_YES;
  }
  if (*data_size > 0) {
    /* A client that sent part of a body and closed: MHD may have read its
     * end with those bytes and would wait for it until the idle timeout.
     * (Only with a Content-Length: a chunked body's end is not known here,
     * and a client may close its side once the whole body is sent.) */
    r->body_seen += *data_size;
    if (r->body_length != UINT64_MAX && r->body_seen < r->body_length &&
        agsx_api_conn_peer_gone(c)) {
      agsx_debug("serve: %s %s: the client closed before its body's end", r->method, r->path);
      return MHD_NO;
    }
    if (r->upload) {
      agsx_api_upload_data(r, data, *data_size);
    } else if (!r->body_dropped) {
      if (r->body.len + *data_size > r->body_max)
        return MHD_NO; /* a chunked body past the cap: the connection is closed */
      agsx_buf_add(&r->body, data, *data_size);
    }
    *data_size = 0;
    return MHD_YES;
  }
  if (r->answered || r->waiting)
    return MHD_YES;
  if (r->cont) { /* resumed: the route's work is done */
    void (*cont)(struct req *) = r->cont;
    r->cont = NULL;
    cont(r);
    if (!r->answered && !r->waiting)
      agsx_respond_error(r, 500, "no response");
    return r->dropped ? MHD_NO : MHD_YES; /* MHD_NO: the connection is closed */
  }
  if (r->upload) {
    agsx_api_upload_finish(r);
    return MHD_YES;
  }
  agsx_buf_add(&r->body, "", 1); /* NUL-terminated for the parsers; len excludes it */
  r->body.len--;
  agsx_api_mark(&r->tm, "body");
  dispatch(r);
  return r->dropped ? MHD_NO : MHD_YES;
}

/* ---- the loop ----------------------------------------------------------------------------- */

static void reap_children(struct server *s) {
  /* Our one child is the spawner (supervisors are its children). */
  if (s->spawner.pid > 0 && waitpid(s->spawner.pid, NULL, WNOHANG) == s->spawner.pid) {
    agsx_warn("serve: the spawner died; sandboxes can no longer be created");
    s->spawner.pid = 0;
  }
}

int agsx_api_listen_socket(const char *addr, bool listen_public, const char *credential,
                           agsx_error_t *err) {
  struct sockaddr_storage ss;
  unsigned len;
  bool loopback;
  if (agsx_api_listen_parse(addr, &ss, &len, &loopback, err) < 0)
    return -1;
  if (!loopback && !listen_public)
    return agsx_error_set(err, EPERM,
                          "`%s` is not a loopback address: anyone who can reach it and has the "
                          "%s runs code on this host (use --listen-public to mean it)",
                          addr, credential);
  _cleanup_close_ int fd =
      socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP);
  if (fd < 0)
    return agsx_error_set(err, errno, "socket");
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 1024) < 0)
    return agsx_error_set(err, errno, "listen on %s", addr);
  return steal_fd(&fd);
}

/* A --host NAME as requests' Host headers are compared with: a DNS name
 * or an address (an IPv6 one bare or in brackets), never a port. */
static int host_name(const char *name, char ret[static AGSX_API_HOST_MAX + 1], agsx_error_t *err) {
  size_t n = strlen(name);
  bool v6 = strchr(name, ':') != NULL;
  _cleanup_free_ char *b = v6 && name[0] != '[' ? xasprintf("[%s]", name) : xstrdup(name);
  if ((v6 && b[strlen(b) - 1] != ']') || n == 0 || agsx_api_host_parse(b, ret, NULL) < 0)
    return agsx_error_set(err, EINVAL, "invalid host `%s` (a DNS name or an address, no port)",
                          name);
  return 0;
}

static int signals_fd(agsx_error_t *err) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGCHLD);
  if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
    return agsx_error_set(err, errno, "block signals");
  signal(SIGPIPE, SIG_IGN);
  int fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "signalfd");
  return fd;
}

static void on_signals(struct server *s) {
  struct signalfd_siginfo si;
  while (read(s->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
    if (si.ssi_signo == SIGINT || si.ssi_signo == SIGTERM)
      s->stopping = true;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  _cleanup_free_ char *msg = NULL;
  if (vasprintf(&msg, fmt, ap) < 0)
    return;
  msg[strcspn(msg, "\n")] = '\0';
  agsx_debug("serve: libmicrohttpd: %s", msg);
}

/* Connections closed from conns.c that MHD has not noticed yet. */
#define CONNECTION_SLACK 64

static int start_daemon(struct server *s, int lfd, agsx_error_t *err) {
  unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
  s->d = agsx_mhd.start_daemon(
      flags, 0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
      MHD_OPTION_LISTEN_SOCKET, lfd, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
      MHD_OPTION_NOTIFY_CONNECTION, agsx_api_conn_notify, s,
      /* Above ours, so that a newcomer reaches conns.c, which makes room. */
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)(AGSX_API_MAX_CONNECTIONS + CONNECTION_SLACK),
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)AGSX_API_IDLE_SEC,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(512 * 1024), MHD_OPTION_END);
  if (s->d == NULL)
    return agsx_error_set(err, 0, "libmicrohttpd did not start");
  const union MHD_DaemonInfo *info = agsx_mhd.get_daemon_info(s->d, MHD_DAEMON_INFO_EPOLL_FD);
  if (info == NULL)
    return agsx_error_set(err, 0, "libmicrohttpd has no epoll fd");
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
  if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, info->epoll_fd, &ev) < 0)
    return agsx_error_set(err, errno, "epoll");
  return 0;
}

static void loop(struct server *s) {
  struct epoll_event evs[64];
  while (!s->stopping) {
    int64_t t = streams_timeout_ms(s);
    int ct = agsx_api_code_timeout_ms(s);
    if (ct >= 0 && ct < t)
      t = ct;
    ct = agsx_api_conns_timeout_ms(s);
    if (ct >= 0 && ct < t)
      t = ct;
    ct = agsx_api_envd_timeout_ms(s);
    if (ct >= 0 && ct < t)
      t = ct;
    ct = agsx_api_ports_timeout_ms(s);
    if (ct >= 0 && ct < t)
      t = ct;
    MHD_UNSIGNED_LONG_LONG mt;
    if (agsx_mhd.get_timeout(s->d, &mt) == MHD_YES && (int64_t)mt < t)
      t = (int64_t)mt;
    int n = epoll_wait(s->epfd, evs, AGSX_ARRAY_SIZE(evs), (int)t);
    if (n < 0 && errno != EINTR) {
      agsx_warn("serve: epoll_wait: %s", strerror(errno));
      break;
    }
    for (int i = 0; i < n; i++)
      if (evs[i].data.ptr == &s->sigfd)
        on_signals(s);
    reap_children(s);
    agsx_api_envd_tick(s);
    agsx_api_code_tick(s);
    agsx_api_conns_tick(s);
    agsx_api_ports_tick(s);
    pump_streams(s);
    agsx_mhd.run(s->d);
  }
}

/* A clean stop: every stream gets its end-stream frame (unavailable: the
 * SDK retries elsewhere or reports the sandbox unreachable) and is resumed,
 * for libmicrohttpd refuses to stop with suspended connections. */
static void drain(struct server *s) {
  agsx_api_code_stop(s);
  agsx_api_files_stop(s);
  for (struct stream *st = s->streams; st; st = st->next) {
    agsx_stream_end(st, AGSX_CONNECT_UNAVAILABLE, "the server is stopping");
    if (st->suspended) {
      st->suspended = false;
      agsx_mhd.resume_connection(st->c);
    }
  }
  int64_t until = agsx_mono_ns() + 2000000000LL;
  while ((s->streams || s->code_ops || s->composes) && agsx_mono_ns() < until) {
    struct epoll_event ev[8];
    epoll_wait(s->epfd, ev, AGSX_ARRAY_SIZE(ev), 50);
    agsx_mhd.run(s->d);
    for (struct stream *st = s->streams; st; st = st->next)
      if (st->suspended) {
        st->suspended = false;
        agsx_mhd.resume_connection(st->c);
      }
  }
}

int agsx_api_serve(const struct agsx_api_config *cfg, agsx_error_t *err) {
  if (agsx_mhd_load(err) < 0)
    return -1;
  struct server s = {.cfg = cfg,
                     .epfd = -1,
                     .sigfd = -1,
                     .statefd = -1,
                     .ports_lfd = -1,
                     .netns = -1,
                     .spawner = {-1, 0}};
  s.conns = agsx_api_conns_new();
  int ret = -1;
  _cleanup_close_ int lfd = -1;
  bool created = false;
  if (cfg->api_key) {
    if (!agsx_api_key_is_valid(cfg->api_key)) {
      agsx_error_set(err, EINVAL, "the API key must be 8 to 256 printable characters");
      goto out;
    }
    s.key = xstrdup(cfg->api_key);
  } else if (agsx_api_key_load(cfg->api_key_file ? cfg->api_key_file : AGSX_API_KEY_FILE, &s.key,
                               &created, err) < 0) {
    goto out;
  }
  for (size_t i = 0; cfg->hosts && cfg->hosts[i]; i++) {
    char h[AGSX_API_HOST_MAX + 1];
    if (host_name(cfg->hosts[i], h, err) < 0)
      goto out;
    agsx_strv_push(&s.hosts, h);
  }
  /* First, while this process has no fd worth keeping from a supervisor. */
  if (agsx_spawner_start(&s.spawner, err) < 0)
    goto out;
  s.statefd = agsx_state_open(cfg->state, true, err);
  if (s.statefd < 0)
    goto out;
  lfd = agsx_api_listen_socket(cfg->listen ? cfg->listen : AGSX_API_DEFAULT_LISTEN,
                               cfg->listen_public, "API key", err);
  if (lfd < 0)
    goto out;
  /* Every connection an fd, and the streams' and watchers' beside them. */
  agsx_relay_fd_limit_raise(AGSX_API_MAX_CONNECTIONS + CONNECTION_SLACK + 1024);
  s.epfd = epoll_create1(EPOLL_CLOEXEC);
  if (s.epfd < 0) {
    agsx_error_set(err, errno, "epoll_create1");
    goto out;
  }
  s.sigfd = signals_fd(err);
  if (s.sigfd < 0)
    goto out;
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &s.sigfd};
  epoll_ctl(s.epfd, EPOLL_CTL_ADD, s.sigfd, &ev);
  if (agsx_api_envd_init(&s, err) < 0)
    goto out;
  if (start_daemon(&s, lfd, err) < 0)
    goto out;
  lfd = -1; /* the daemon's now */
  if (agsx_api_ports_start(&s, err) < 0)
    goto out;
  if (cfg->ready) {
    _cleanup_free_ char *note =
        created ? xasprintf("generated the API key in %s",
                            cfg->api_key_file ? cfg->api_key_file : AGSX_API_KEY_FILE)
                : NULL;
    cfg->ready(cfg->ready_data, cfg->listen ? cfg->listen : AGSX_API_DEFAULT_LISTEN, s.ports_domain,
               s.ports_ca, note);
  }
  loop(&s);
  drain(&s);
  ret = 0;
out:
  agsx_api_ports_stop(&s);
  if (s.d)
    agsx_mhd.stop_daemon(s.d);  /* frees the streams through their responses */
  agsx_api_conns_free(s.conns); /* after MHD's last close notification */
  agsx_api_envd_fini(&s);
  agsx_spawner_stop(&s.spawner);
  if (s.sigfd >= 0)
    close(s.sigfd);
  if (s.epfd >= 0)
    close(s.epfd);
  if (s.statefd >= 0)
    close(s.statefd);
  free(s.ids);
  free(s.key);
  agsx_strv_free(s.hosts);
  return ret;
}
