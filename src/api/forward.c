/* agsx — api: a sandbox's own ports by host name (serve --ports-listen).
 *
 * E2B's SDKs name a port of a sandbox `PORT-ID.DOMAIN` (getHost; the
 * desktop SDK's stream URL); E2B's proxy forwards such a host to the
 * sandbox. This is that proxy for agsx: a listener of its own, beside the
 * API's, whose connections are not HTTP to agsx but bytes for the sandbox.
 * Each connection's request head is read (bounded in size and time) only
 * to route it:
 *
 *   Host     must be this server's (wire.h: the listen address, localhost,
 *            a name of --host, one label below one), and its first label
 *            PORT-ID; Origin, when sent, must be this server's too (DNS
 *            rebinding, as for the API)
 *   ID       a running sandbox the API made (agsx_api_find_sandbox)
 *   PORT     not envd's or the code interpreter's (the API serves those)
 *
 * Then the head and everything after it go to 127.0.0.1:PORT in the
 * sandbox's network namespace, and back, as bytes: HTTP keep-alive and
 * WebSockets alike, the Host unchanged (E2B's default). The socket is made
 * in that namespace (setns through the sandbox init's pidfd) and the
 * server returns to its own at once, or aborts: it never goes on in a
 * sandbox's namespace. No path is resolved meanwhile.
 *
 * A sandbox's ports are public, as E2B's are by default
 * (allowPublicTraffic): whoever can reach this listener and names a
 * sandbox's id reaches its ports. The id (20 random characters) is the
 * secret, as in E2B's URLs; the listener is loopback only unless
 * --listen-public. A sandbox made with allowPublicTraffic false answers
 * only requests whose E2B-Traffic-Access-Token is its traffic access
 * token (403 otherwise, before anything reaches it).
 *
 * With --ports-tls (tls.h) the client's end speaks TLS: the handshake
 * comes first, within the head's time, and the sandbox's port gets the
 * plain bytes.
 *
 * Everything runs in the server's loop, non-blocking: agsx_api_ports_tick
 * moves what can move; epoll only wakes the loop (each fd's interest is
 * what it waits for, so a full buffer does not spin). */
#include "config.h"

#include "api/api-internal.h"
#include "api/auth.h"
#include "api/tls.h"
#include "api/wire.h"
#include "net/relay.h"
#include "sandbox/freeze.h"
#include "sandbox/proc.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define FWD_MAX 512               /* connections at once; more are closed at accept */
#define FWD_BUF (64u << 10)       /* bytes buffered each way */
#define FWD_HEAD_NS 10000000000LL /* a head, then a connect, within 10 s */

struct fwd_end {
  int fd;
  char *buf; /* what was read from this end, for the other one */
  size_t len, off;
  bool eof;                  /* this end sent no more */
  bool shut;                 /* the other end was told (shutdown SHUT_WR) */
  uint32_t want;             /* its epoll interest, as registered */
  struct agsx_tls_conn *tls; /* the client's end with --ports-tls */
  uint32_t tls_want;         /* what TLS waits for besides (EPOLLIN, EPOLLOUT) */
};

struct fwd {
  struct fwd *next;
  struct fwd_end c, b; /* the client, the sandbox's port (b.fd -1 until routed) */
  bool piping;         /* routed: bytes flow */
  bool connecting;     /* b's connect is under way */
  bool handshaking;    /* c's TLS handshake is under way */
  bool again;          /* TLS holds bytes epoll does not see: tick again at once */
  int64_t deadline;    /* of the head, then of the connect */
};

/* ---- answers before a connection is routed ------------------------------- */

/* A short HTTP answer, sent as far as the socket takes it now (nothing
 * before a TLS handshake ends); the connection is closed after. */
static void answer(struct fwd_end *c, int status, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void answer(struct fwd_end *c, int status, const char *reason, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  _cleanup_free_ char *body = xvasprintf(fmt, ap);
  va_end(ap);
  _cleanup_free_ char *msg =
      xasprintf("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                "Connection: close\r\n\r\n%s",
                status, reason, strlen(body), body);
  uint32_t want;
  ssize_t n = c->tls ? agsx_tls_write(c->tls, msg, strlen(msg), &want)
                     : send(c->fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n > 0 && c->tls)
    agsx_tls_close_notify(c->tls);
}

/* ---- the connections ------------------------------------------------------ */

static void set_want(struct server *s, struct fwd *f, struct fwd_end *e, uint32_t want) {
  if (e->fd < 0 || e->want == want)
    return;
  struct epoll_event ev = {.events = want, .data.ptr = f};
  epoll_ctl(s->epfd, EPOLL_CTL_MOD, e->fd, &ev);
  e->want = want;
}

static int watch(struct server *s, struct fwd *f, struct fwd_end *e) {
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = f};
  e->want = EPOLLIN;
  return epoll_ctl(s->epfd, EPOLL_CTL_ADD, e->fd, &ev);
}

static void end_close(struct server *s, struct fwd_end *e) {
  agsx_tls_conn_free(e->tls);
  e->tls = NULL;
  if (e->fd >= 0) {
    epoll_ctl(s->epfd, EPOLL_CTL_DEL, e->fd, NULL);
    close(e->fd);
    e->fd = -1;
  }
  free(e->buf);
  e->buf = NULL;
}

static void fwd_free(struct server *s, struct fwd *f) {
  end_close(s, &f->c);
  end_close(s, &f->b);
  free(f);
  s->n_fwds--;
}

/* Routes F by its head's Host and Origin values: 0 with the connect to
 * the sandbox's port under way, or -1 after answering. */
static int route(struct server *s, struct fwd *f, const struct agsx_api_head *head) {
  const char *host_v = head->host, *origin_v = head->origin;
  char host[AGSX_API_HOST_MAX + 1], origin[AGSX_API_HOST_MAX + 1], local[INET6_ADDRSTRLEN] = "";
  struct sockaddr_storage ss;
  socklen_t sl = sizeof(ss);
  if (getsockname(f->c.fd, (struct sockaddr *)&ss, &sl) == 0)
    inet_ntop(ss.ss_family,
              ss.ss_family == AF_INET6 ? (void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
                                       : (void *)&((struct sockaddr_in *)&ss)->sin_addr,
              local, sizeof(local));
  if (host_v[0] == '\0' || agsx_api_host_parse(host_v, host, NULL) < 0)
    return answer(&f->c, 400, "Bad Request",
                  "{\"code\":400,\"message\":\"a Host naming PORT-SANDBOXID.DOMAIN is needed\"}"),
           -1;
  if (!agsx_api_host_allowed(host, local, s->hosts))
    return answer(&f->c, 403, "Forbidden",
                  "{\"code\":403,\"message\":\"host `%.64s` is not this server's\"}", host),
           -1;
  if (origin_v[0] && (agsx_api_origin_parse(origin_v, origin, NULL) < 0 ||
                      !agsx_api_host_allowed(origin, local, s->hosts)))
    return answer(&f->c, 403, "Forbidden",
                  "{\"code\":403,\"message\":\"cross-site request refused\"}"),
           -1;
  unsigned port;
  char id[33];
  if (agsx_api_port_host(host, &port, id, NULL) < 0)
    return answer(&f->c, 404, "Not Found",
                  "{\"code\":404,\"message\":\"`%.64s` names no sandbox port "
                  "(PORT-SANDBOXID.DOMAIN)\"}",
                  host),
           -1;
  struct agsx_record rec;
  if (agsx_api_find_sandbox(s, id, &rec, NULL) < 0)
    return answer(&f->c, 502, "Bad Gateway",
                  "{\"sandboxId\":\"%s\",\"message\":\"The sandbox was not found\",\"code\":502}",
                  id),
           -1;
  /* allowPublicTraffic false: its ports need its traffic access token. */
  if (agsx_label_get(rec.labels, AGSX_API_LABEL_PRIVATE)) {
    char token[65];
    agsx_api_traffic_token(s->key, rec.id, token);
    bool ok = agsx_api_secret_equal(head->traffic, token);
    explicit_bzero(token, sizeof(token));
    if (!ok) {
      agsx_record_clear(&rec);
      return answer(&f->c, 403, "Forbidden",
                    "{\"sandboxId\":\"%s\",\"message\":\"%s\",\"code\":403}", id,
                    head->traffic[0] ? "Invalid traffic access token"
                                     : "The sandbox's ports are private: the request needs its "
                                       "traffic access token (E2B-Traffic-Access-Token)"),
             -1;
    }
  }
  /* autoResume: a request to a paused sandbox's port resumes it, as E2B's
   * proxy does (after the token check: no token, no resume). */
  if (rec.paused && agsx_label_get(rec.labels, AGSX_API_LABEL_AUTORESUME) &&
      port != AGSX_API_PORT_ENVD && port != AGSX_API_PORT_CODE) {
    agsx_error_t err = NULL;
    if (agsx_sandbox_unpause(s->statefd, rec.id, &err) == 0 || agsx_error_errno(&err) == EALREADY) {
      agsx_info("serve: resumed sandbox %s on a request to its port %u (autoResume)", id, port);
      rec.paused = false;
    } else {
      agsx_warn("serve: auto-resume of %s: %s", id, err->msg);
    }
    agsx_error_free(&err);
  }
  int pidfd = rec.paused ? -1 : agsx_proc_ref_pidfd(&rec.init);
  agsx_record_clear(&rec);
  if (port == AGSX_API_PORT_ENVD || port == AGSX_API_PORT_CODE || pidfd < 0) {
    if (pidfd >= 0)
      close(pidfd);
    return answer(&f->c, 502, "Bad Gateway",
                  "{\"sandboxId\":\"%s\",\"message\":\"%s\",\"port\":\"%u\",\"code\":502}", id,
                  pidfd < 0 ? "The sandbox is not running"
                            : "This port is served by the API address (E2B_SANDBOX_URL)",
                  port),
           -1;
  }
  bool lost = false;
  int fd = agsx_netns_socket(pidfd, s->netns, AF_INET, SOCK_STREAM, &lost);
  close(pidfd);
  if (lost)
    abort(); /* never go on in a sandbox's namespace: every later socket would be its */
  struct sockaddr_in to = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (fd < 0 || (connect(fd, (struct sockaddr *)&to, sizeof(to)) < 0 && errno != EINPROGRESS)) {
    if (fd >= 0)
      close(fd);
    return answer(&f->c, 502, "Bad Gateway",
                  "{\"sandboxId\":\"%s\",\"message\":\"The sandbox is running but port is not "
                  "open\",\"port\":\"%u\",\"code\":502}",
                  id, port),
           -1;
  }
  f->b.fd = fd;
  f->b.buf = xmalloc(FWD_BUF);
  if (watch(s, f, &f->b) < 0)
    return answer(&f->c, 503, "Service Unavailable", "{\"code\":503}"), -1;
  set_want(s, f, &f->b, EPOLLOUT);
  f->piping = f->connecting = true;
  f->deadline = agsx_mono_ns() + FWD_HEAD_NS;
  return 0;
}

/* Reads what FROM has into its buffer; false on an error. */
static bool fill(struct fwd_end *from) {
  while (!from->eof && from->len < FWD_BUF) {
    ssize_t n = from->tls ? agsx_tls_read(from->tls, from->buf + from->len, FWD_BUF - from->len,
                                          &from->tls_want)
                          : recv(from->fd, from->buf + from->len, FWD_BUF - from->len, 0);
    if (n > 0) {
      from->len += (size_t)n;
      continue;
    }
    if (n == 0) {
      from->eof = true;
      break;
    }
    if (errno == EINTR)
      continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
  return true;
}

/* Writes FROM's buffered bytes to TO; at FROM's end, half-closes TO. */
static bool flush(struct fwd_end *from, struct fwd_end *to) {
  while (from->off < from->len) {
    ssize_t n = to->tls ? agsx_tls_write(to->tls, from->buf + from->off, from->len - from->off,
                                         &to->tls_want)
                        : send(to->fd, from->buf + from->off, from->len - from->off, MSG_NOSIGNAL);
    if (n > 0) {
      from->off += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  from->off = from->len = 0;
  if (from->eof && !from->shut) {
    if (to->tls)
      agsx_tls_close_notify(to->tls);
    shutdown(to->fd, SHUT_WR);
    from->shut = true;
  }
  return true;
}

/* One step of F: false when it is done (closed or failed). */
static bool step(struct server *s, struct fwd *f, int64_t now) {
  f->c.tls_want = 0;
  f->again = false;
  if (f->handshaking) {
    int r = agsx_tls_handshake(f->c.tls, &f->c.tls_want);
    if (r < 0)
      return false; /* a client that does not trust the certificate, or no TLS */
    if (r == 0) {
      set_want(s, f, &f->c, f->c.tls_want);
      return now <= f->deadline;
    }
    f->handshaking = false;
  }
  if (!f->piping) {
    if (!fill(&f->c))
      return false;
    struct agsx_api_head head;
    agsx_error_t err = NULL;
    int r = agsx_api_head_scan(f->c.buf, f->c.len, &head, &err);
    if (r < 0) {
      bool big = agsx_error_errno(&err) == EMSGSIZE;
      answer(&f->c, big ? 431 : 400, big ? "Request Header Fields Too Large" : "Bad Request",
             "{\"code\":%d,\"message\":\"%s\"}", big ? 431 : 400, err->msg);
      agsx_error_free(&err);
      return false;
    }
    if (r == 0) {
      if (f->c.eof)
        return false;
      set_want(s, f, &f->c, EPOLLIN | f->c.tls_want);
      if (now > f->deadline) {
        answer(&f->c, 408, "Request Timeout", "{\"code\":408}");
        return false;
      }
      return true;
    }
    if (route(s, f, &head) < 0)
      return false;
    set_want(s, f, &f->c, 0); /* until the sandbox's port answers */
  }
  if (f->connecting) {
    struct pollfd p = {.fd = f->b.fd, .events = POLLOUT};
    if (poll(&p, 1, 0) == 0) {
      if (now <= f->deadline)
        return true;
      answer(&f->c, 504, "Gateway Timeout", "{\"code\":504}");
      return false;
    }
    int so = 0;
    socklen_t len = sizeof(so);
    if (getsockopt(f->b.fd, SOL_SOCKET, SO_ERROR, &so, &len) < 0 || so != 0) {
      answer(&f->c, 502, "Bad Gateway",
             "{\"message\":\"The sandbox is running but port is not open\",\"code\":502}");
      return false;
    }
    f->connecting = false;
  }
  /* Both ways: write what is buffered, read more, write again. */
  if (!flush(&f->c, &f->b) || !flush(&f->b, &f->c) || !fill(&f->c) || !fill(&f->b) ||
      !flush(&f->c, &f->b) || !flush(&f->b, &f->c))
    return false;
  if (f->c.shut && f->b.shut)
    return false;
  set_want(s, f, &f->c,
           (f->c.eof || f->c.len >= FWD_BUF ? 0 : EPOLLIN) | (f->b.len > f->b.off ? EPOLLOUT : 0) |
               f->c.tls_want);
  f->again = f->c.tls && !f->c.eof && f->c.len < FWD_BUF && agsx_tls_pending(f->c.tls) > 0;
  set_want(s, f, &f->b,
           (f->b.eof || f->b.len >= FWD_BUF ? 0 : EPOLLIN) | (f->c.len > f->c.off ? EPOLLOUT : 0));
  return true;
}

/* ---- the listener ------------------------------------------------------------ */

static void accept_all(struct server *s) {
  for (;;) {
    int fd = accept4(s->ports_lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
      return; /* EAGAIN, or out of fds: the next tick tries again */
    if (s->n_fwds >= FWD_MAX) {
      struct fwd_end e = {.fd = fd}; /* with TLS: closed without a word */
      if (s->tls == NULL)
        answer(&e, 503, "Service Unavailable",
               "{\"code\":503,\"message\":\"too many connections to sandbox ports\"}");
      close(fd);
      continue;
    }
    struct fwd *f = xzalloc(sizeof(*f));
    f->c.fd = fd;
    f->b.fd = -1;
    f->c.buf = xmalloc(FWD_BUF);
    f->deadline = agsx_mono_ns() + FWD_HEAD_NS;
    s->n_fwds++;
    if (s->tls) {
      agsx_error_t err = NULL;
      f->c.tls = agsx_tls_conn_new(s->tls, fd, &err);
      if (f->c.tls == NULL) {
        agsx_warn("serve: --ports-tls: %s", err->msg);
        agsx_error_free(&err);
        fwd_free(s, f);
        continue;
      }
      f->handshaking = true;
    }
    if (watch(s, f, &f->c) < 0) {
      fwd_free(s, f);
      continue;
    }
    f->next = s->fwds;
    s->fwds = f;
  }
}

int agsx_api_ports_start(struct server *s, agsx_error_t *err) {
  s->ports_lfd = s->netns = -1;
  if (s->cfg->ports_listen == NULL)
    return 0;
  if (s->cfg->ports_tls || s->cfg->ports_cert || s->cfg->ports_key) {
    s->tls =
        agsx_tls_server_new(s->cfg->root, s->cfg->ports_cert, s->cfg->ports_key, &s->ports_ca, err);
    if (s->tls == NULL)
      return agsx_error_wrap(err, "--ports-tls");
  }
  s->netns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (s->netns < 0)
    return agsx_error_set(err, errno, "open the server's network namespace");
  s->ports_lfd =
      agsx_api_listen_socket(s->cfg->ports_listen, s->cfg->listen_public, "id of a sandbox", err);
  if (s->ports_lfd < 0)
    return agsx_error_wrap(err, "--ports-listen");
  /* E2B's `domain`: localhost (the name agsx's CA signs, and where a
   * browser finds a loopback listener), or the first --host name for a
   * plain or the user's certificate; the port the listener has. */
  struct sockaddr_storage ss;
  socklen_t sl = sizeof(ss);
  if (getsockname(s->ports_lfd, (struct sockaddr *)&ss, &sl) == 0) {
    unsigned port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                   : ((struct sockaddr_in *)&ss)->sin_port);
    const char *name = "localhost";
    for (size_t i = 0; s->ports_ca == NULL && s->hosts && s->hosts[i]; i++)
      if (strchr(s->hosts[i], ':') == NULL && s->hosts[i][strspn(s->hosts[i], "0123456789.")]) {
        name = s->hosts[i]; /* a name, not an address */
        break;
      }
    s->ports_domain = xasprintf("%s:%u", name, port);
  }
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &s->ports_lfd};
  if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->ports_lfd, &ev) < 0)
    return agsx_error_set(err, errno, "epoll_ctl");
  return 0;
}

void agsx_api_ports_tick(struct server *s) {
  if (s->ports_lfd < 0)
    return;
  accept_all(s);
  int64_t now = agsx_mono_ns();
  for (struct fwd **p = &s->fwds; *p;) {
    struct fwd *f = *p;
    if (step(s, f, now)) {
      p = &f->next;
      continue;
    }
    *p = f->next;
    fwd_free(s, f);
  }
}

int agsx_api_ports_timeout_ms(struct server *s) {
  int64_t first = INT64_MAX, now = agsx_mono_ns();
  for (struct fwd *f = s->fwds; f; f = f->next)
    if (f->again)
      return 0;
    else if ((!f->piping || f->connecting) && f->deadline < first)
      first = f->deadline;
  if (first == INT64_MAX)
    return -1;
  return first <= now ? 0 : (int)((first - now) / 1000000 + 1);
}

void agsx_api_ports_stop(struct server *s) {
  while (s->fwds) {
    struct fwd *f = s->fwds;
    s->fwds = f->next;
    fwd_free(s, f);
  }
  if (s->ports_lfd >= 0) {
    epoll_ctl(s->epfd, EPOLL_CTL_DEL, s->ports_lfd, NULL);
    close(s->ports_lfd);
    s->ports_lfd = -1;
  }
  if (s->netns >= 0) {
    close(s->netns);
    s->netns = -1;
  }
  agsx_tls_server_free(s->tls);
  s->tls = NULL;
  free(s->ports_ca);
  s->ports_ca = NULL;
  free(s->ports_domain);
  s->ports_domain = NULL;
}
