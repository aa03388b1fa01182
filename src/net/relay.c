/* agsx — relay: TCP and UDP forwarding between network namespaces. See
 * relay.h. */
#include "config.h"

#include "net/relay.h"
#include "net/dnsfilter.h"
#include "host/rootless.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>

/* ---- -p specs ------------------------------------------------------------------------------ */

const char *agsx_proto_name(enum agsx_proto p) { return p == AGSX_PROTO_UDP ? "udp" : "tcp"; }

int agsx_proto_parse(const char *s, enum agsx_proto *ret) {
  if (strcmp(s, "tcp") == 0)
    *ret = AGSX_PROTO_TCP;
  else if (strcmp(s, "udp") == 0)
    *ret = AGSX_PROTO_UDP;
  else
    return -1;
  return 0;
}

/* Decimal digits only (no sign, no spaces), at most 5, value <= 65535. */
static int parse_port(const char *s, size_t len, bool allow_zero, uint16_t *ret) {
  if (len == 0 || len > 5)
    return -1;
  unsigned v = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9')
      return -1;
    v = v * 10 + (unsigned)(s[i] - '0');
  }
  if (v > 65535 || (v == 0 && !allow_zero))
    return -1;
  *ret = (uint16_t)v;
  return 0;
}

int agsx_sockaddr_from_ip(const char *ip, uint16_t port, struct sockaddr_storage *ret) {
  memset(ret, 0, sizeof(*ret));
  struct sockaddr_in *in4 = (struct sockaddr_in *)ret;
  struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ret;
  if (inet_pton(AF_INET, ip, &in4->sin_addr) == 1) {
    in4->sin_family = AF_INET;
    in4->sin_port = htons(port);
    return 0;
  }
  memset(ret, 0, sizeof(*ret));
  if (inet_pton(AF_INET6, ip, &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    return 0;
  }
  return -1;
}

uint16_t agsx_sockaddr_port(const struct sockaddr_storage *ss) {
  if (ss->ss_family == AF_INET)
    return ntohs(((const struct sockaddr_in *)ss)->sin_port);
  if (ss->ss_family == AF_INET6)
    return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
  return 0;
}

static socklen_t sockaddr_len(const struct sockaddr_storage *ss) {
  return ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

char *agsx_sockaddr_ip(const struct sockaddr_storage *ss, char *buf, size_t len) {
  const void *a = ss->ss_family == AF_INET6
                      ? (const void *)&((const struct sockaddr_in6 *)ss)->sin6_addr
                      : (const void *)&((const struct sockaddr_in *)ss)->sin_addr;
  if (inet_ntop(ss->ss_family, a, buf, (socklen_t)len) == NULL)
    snprintf(buf, len, "?");
  return buf;
}

char *agsx_sockaddr_format(const struct sockaddr_storage *ss, char *buf, size_t len) {
  char ip[INET6_ADDRSTRLEN];
  agsx_sockaddr_ip(ss, ip, sizeof(ip));
  if (ss->ss_family == AF_INET6)
    snprintf(buf, len, "[%s]:%u", ip, agsx_sockaddr_port(ss));
  else
    snprintf(buf, len, "%s:%u", ip, agsx_sockaddr_port(ss));
  return buf;
}

/* Splits off the host IP: "[v6]:" or "v4:" before HOSTPORT:PORT. Returns
 * the rest; *IP is "" when there is none. */
static const char *split_ip(const char *s, char *ip, size_t iplen) {
  ip[0] = '\0';
  if (s[0] == '[') {
    const char *end = strchr(s, ']');
    if (end == NULL || end[1] != ':' || (size_t)(end - s - 1) >= iplen || end == s + 1)
      return NULL;
    memcpy(ip, s + 1, (size_t)(end - s - 1));
    ip[end - s - 1] = '\0';
    return end + 2;
  }
  /* Colons: 0 (PORT), 1 (HOSTPORT:PORT) or 2 (IP:HOSTPORT:PORT). */
  const char *c1 = strchr(s, ':');
  const char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
  if (c2 == NULL)
    return s;
  if (strchr(c2 + 1, ':'))
    return NULL; /* an unbracketed IPv6 address, or garbage */
  if ((size_t)(c1 - s) >= iplen || c1 == s)
    return NULL;
  memcpy(ip, s, (size_t)(c1 - s));
  ip[c1 - s] = '\0';
  return c1 + 1;
}

int agsx_port_parse(const char *spec, struct agsx_port *ret, agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  size_t slen = strnlen(spec, AGSX_PORTSPEC_MAX + 1);
  if (slen == 0 || slen > AGSX_PORTSPEC_MAX)
    return agsx_error_set_quiet(err, EINVAL,
                                "invalid port spec (want [IP:]HOSTPORT:PORT[/tcp|udp])");
  char buf[AGSX_PORTSPEC_MAX + 1];
  memcpy(buf, spec, slen);
  buf[slen] = '\0';
  /* Error messages quote only what was checked to be printable. */
  for (size_t i = 0; i < slen; i++)
    if (buf[i] <= ' ' || buf[i] > '~')
      return agsx_error_set_quiet(err, EINVAL,
                                  "invalid port spec (want [IP:]HOSTPORT:PORT[/tcp|udp])");
  char *slash = strchr(buf, '/');
  ret->proto = AGSX_PROTO_TCP;
  if (slash) {
    *slash = '\0';
    if (agsx_proto_parse(slash + 1, &ret->proto) < 0)
      return agsx_error_set_quiet(err, EINVAL, "invalid port spec `%s`: protocol `%s` (tcp or udp)",
                                  spec, slash + 1);
  }
  char ip[INET6_ADDRSTRLEN + 1];
  const char *rest = split_ip(buf, ip, sizeof(ip));
  if (rest == NULL)
    return agsx_error_set_quiet(err, EINVAL,
                                "invalid port spec `%s` (want [IP:]HOSTPORT:PORT[/tcp|udp], IPv6 "
                                "addresses in brackets)",
                                spec);
  const char *colon = strchr(rest, ':');
  if (ip[0] && colon == NULL) /* after an IP: HOSTPORT:PORT, HOSTPORT maybe empty */
    return agsx_error_set_quiet(err, EINVAL,
                                "invalid port spec `%s` (want IP:HOSTPORT:PORT or "
                                "IP::PORT)",
                                spec);
  uint16_t hostport = 0;
  const char *inner = colon ? colon + 1 : rest;
  /* HOSTPORT may be empty (IP::PORT) only after an IP. */
  if (colon && !(colon == rest && ip[0]) &&
      parse_port(rest, (size_t)(colon - rest), true, &hostport) < 0)
    return agsx_error_set_quiet(err, EINVAL,
                                "invalid port spec `%s`: host port `%.*s` (0 to 65535)", spec,
                                (int)(colon - rest), rest);
  if (parse_port(inner, strlen(inner), false, &ret->port) < 0)
    return agsx_error_set_quiet(
        err, EINVAL, "invalid port spec `%s`: sandbox port `%s` (1 to 65535)", spec, inner);
  if (agsx_sockaddr_from_ip(ip[0] ? ip : "127.0.0.1", hostport, &ret->host) < 0)
    return agsx_error_set_quiet(err, EINVAL, "invalid port spec `%s`: `%s` is not an IP address",
                                spec, ip);
  /* The brackets and the family agree: no "[1.2.3.4]", no bare "::1". */
  if ((spec[0] == '[') != (ret->host.ss_family == AF_INET6))
    return agsx_error_set_quiet(
        err, EINVAL, "invalid port spec `%s`: IPv6 addresses (only) go in brackets", spec);
  return 0;
}

static bool same_ip(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
  if (a->ss_family != b->ss_family)
    return false;
  if (a->ss_family == AF_INET)
    return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
           ((const struct sockaddr_in *)b)->sin_addr.s_addr;
  return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
}

int agsx_ports_check(const struct agsx_port *v, size_t n, agsx_error_t *err) {
  if (n > AGSX_MAX_PORTS)
    return agsx_error_set(err, E2BIG, "at most %d published ports", AGSX_MAX_PORTS);
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < i; j++) {
      uint16_t p = agsx_sockaddr_port(&v[i].host);
      if (p == 0 || v[i].proto != v[j].proto || p != agsx_sockaddr_port(&v[j].host) ||
          !same_ip(&v[i].host, &v[j].host))
        continue;
      char a[80];
      return agsx_error_set_quiet(err, EINVAL, "port %s/%s is published twice",
                                  agsx_sockaddr_format(&v[i].host, a, sizeof(a)),
                                  agsx_proto_name(v[i].proto));
    }
  return 0;
}

/* ---- the relay ----------------------------------------------------------------------------- */

struct listener {
  enum agsx_proto proto;
  int fd;
  int connect_ns; /* owned, or -1 (ours), or AGSX_RELAY_NS_LATER */
  struct sockaddr_storage target, bound;
};

struct conn {
  struct listener *l;
  int fd[2];       /* 0: the client's (accepted), 1: ours to the target */
  bool connecting; /* fd[1]'s connect is under way */
  bool eof[2];     /* fd[i] has read EOF */
  bool shut[2];    /* SHUT_WR done on fd[i] */
  bool dead;
  int64_t last_ms;       /* a byte moved, an EOF, the connect began or ended */
  size_t off[2], len[2]; /* buf[i]: read from fd[i], to write to fd[1 - i] */
  size_t vet[2];         /* filtered: buf[i] up to vet[i] passed the filter */
  char buf[2][AGSX_RELAY_BUF];
};

struct flow {
  struct listener *l;
  int fd; /* connected to the target, from its namespace */
  struct sockaddr_storage client;
  socklen_t client_len;
  int64_t last_ms;
};

struct agsx_relay {
  int home;  /* the namespace we return to after socket() */
  bool lost; /* could not return: no more sockets */
  struct listener **ls;
  size_t nl;
  struct conn **conns;
  size_t nc;
  struct flow **flows;
  size_t nf;
  /* the layout agsx_relay_fill() wrote */
  size_t fill_nl, fill_nc, fill_nf;
  char *dgram; /* one UDP datagram */
  size_t max_conns, max_flows;
  int udp_idle_ms;
  int tcp_idle_ms, half_closed_ms; /* 0: none */
  size_t fds, fd_budget;           /* held by connections and flows; the most */
  int64_t paused_until;            /* TCP listeners not polled before (ms) */
  int backoff_ms;                  /* the next pause */
  struct agsx_dns_filter *filter;  /* a filtering DNS relay's, or NULL */
  struct agsx_relay_stats st;
};

void agsx_relay_set_filter(struct agsx_relay *r, struct agsx_dns_filter *f) {
  agsx_dns_filter_free(r->filter);
  r->filter = f;
}

struct agsx_dns_filter *agsx_relay_filter(const struct agsx_relay *r) {
  return r ? r->filter : NULL;
}

static int64_t now_ms(void) { return agsx_mono_ns() / 1000000; }

struct agsx_relay *agsx_relay_new(agsx_error_t *err) {
  int home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (home < 0)
    return agsx_error_set(err, errno, "open the current network namespace"), NULL;
  struct agsx_relay *r = xzalloc(sizeof(*r));
  r->home = home;
  r->dgram = xmalloc(65536);
  r->max_conns = AGSX_RELAY_MAX_CONNS;
  r->max_flows = AGSX_RELAY_MAX_FLOWS;
  r->udp_idle_ms = AGSX_RELAY_UDP_IDLE_MS;
  r->half_closed_ms = AGSX_RELAY_HALF_CLOSED_MS;
  r->fd_budget = agsx_relay_fd_headroom(AGSX_RELAY_FD_RESERVE);
  r->backoff_ms = AGSX_RELAY_BACKOFF_MIN_MS;
  return r;
}

void agsx_relay_set_tcp_timeouts(struct agsx_relay *r, int idle_ms, int half_closed_ms) {
  r->tcp_idle_ms = idle_ms > 0 ? idle_ms : 0;
  r->half_closed_ms = half_closed_ms > 0 ? half_closed_ms : 0;
}

/* ---- file descriptors ----------------------------------------------------------------------- */

/* The fds open now; when /proc cannot tell, a guess on the safe side. */
static size_t open_fds(void) {
  _cleanup_dir_ DIR *d = opendir("/proc/self/fd"); /* O_CLOEXEC */
  if (d == NULL)
    return 256;
  size_t n = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL)
    if (de->d_name[0] != '.')
      n++;
  return n > 0 ? n - 1 : 0; /* less the directory's own */
}

#define FD_LIMIT_MAX ((size_t)1 << 20) /* fs.nr_open's default: no soft limit goes higher */

static size_t soft_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
    return 1024;
  return rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > FD_LIMIT_MAX ? FD_LIMIT_MAX
                                                                    : (size_t)rl.rlim_cur;
}

size_t agsx_relay_fd_headroom(size_t reserve) {
  size_t lim = soft_limit(), used = open_fds();
  return lim > used + reserve ? lim - used - reserve : 0;
}

size_t agsx_relay_fd_need(const struct agsx_relay *r) {
  return r ? 2 * r->max_conns + r->max_flows : 0;
}

void agsx_relay_set_fd_budget(struct agsx_relay *r, size_t fds) { r->fd_budget = fds; }

size_t agsx_relay_fd_limit_raise(size_t want) {
  struct rlimit rl;
  size_t goal = open_fds() + want;
  if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= goal)
    return soft_limit();
  rl.rlim_cur = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < goal ? rl.rlim_max : goal;
  setrlimit(RLIMIT_NOFILE, &rl); /* EPERM/EINVAL: the old limit stays, and is what we return */
  return soft_limit();
}

/* accept() or socket() failed for want of fds or memory: the pending
 * connection stays readable, so polling the listeners again at once would
 * spin. Pause them, longer each time until one accept works. */
static bool out_of_fds(int e) { return e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM; }

static void back_off(struct agsx_relay *r) {
  r->st.backoffs++;
  r->paused_until = now_ms() + r->backoff_ms;
  r->backoff_ms =
      r->backoff_ms * 2 > AGSX_RELAY_BACKOFF_MAX_MS ? AGSX_RELAY_BACKOFF_MAX_MS : r->backoff_ms * 2;
}

static bool paused(const struct agsx_relay *r) { return r->paused_until > now_ms(); }

void agsx_relay_set_limits(struct agsx_relay *r, size_t max_conns, size_t max_flows,
                           int udp_idle_ms) {
  if (max_conns)
    r->max_conns = max_conns;
  if (max_flows)
    r->max_flows = max_flows;
  if (udp_idle_ms > 0)
    r->udp_idle_ms = udp_idle_ms;
}

/* A socket of the namespace a child process enters (agsx_fd_from_ns): an
 * ordinary user's agsx may enter a sandbox's network namespace but never
 * come back to the host's (host/rootless.h). One fork per socket. */
struct socket_args {
  int family, type;
};

static int make_socket(void *data) {
  const struct socket_args *a = data;
  return socket(a->family, a->type, 0);
}

int agsx_netns_socket(int ns, int home, int family, int type, bool *lost) {
  type |= SOCK_NONBLOCK | SOCK_CLOEXEC;
  if (agsx_rootless()) {
    struct socket_args a = {family, type};
    return agsx_fd_from_ns(ns, CLONE_NEWNET, make_socket, &a);
  }
  if (setns(ns, CLONE_NEWNET) < 0)
    return -1;
  int fd = socket(family, type, 0);
  int saved = errno;
  if (setns(home, CLONE_NEWNET) < 0) {
    /* Never seen (we were there a moment ago); staying in the other
     * namespace would make every later socket there, so none is made. */
    agsx_warn("cannot return to our own network namespace: %s", strerror(errno));
    *lost = true;
    if (fd >= 0)
      close(fd);
    return errno = EIO, -1;
  }
  errno = saved;
  return fd;
}

/* A socket of namespace NS (-1: ours). Only socket() runs there. */
static int ns_socket(struct agsx_relay *r, int ns, int family, int type) {
  if (ns < 0)
    return socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (r->lost)
    return errno = EIO, -1;
  return agsx_netns_socket(ns, r->home, family, type, &r->lost);
}

static void reset_close(int *fd) {
  if (*fd < 0)
    return;
  struct linger lg = {.l_onoff = 1, .l_linger = 0};
  setsockopt(*fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  agsx_closep(fd);
}

static void listener_free(struct listener *l) {
  agsx_closep(&l->fd);
  if (l->connect_ns >= 0)
    close(l->connect_ns);
  free(l);
}

static int open_listener(struct agsx_relay *r, struct listener *l, int listen_ns,
                         const struct sockaddr_storage *laddr, agsx_error_t *err) {
  bool udp = l->proto == AGSX_PROTO_UDP;
  char a[80];
  agsx_sockaddr_format(laddr, a, sizeof(a));
  const char *suffix = udp ? "/udp" : "";
  l->fd = ns_socket(r, listen_ns, laddr->ss_family, udp ? SOCK_DGRAM : SOCK_STREAM);
  if (l->fd < 0)
    return agsx_error_set(err, errno, "socket for %s%s", a, suffix);
  int one = 1;
  /* TCP: rebinding right after a sandbox ends, over its connections in
   * TIME_WAIT. (Not UDP, where it would let two sockets share the port.) */
  if (!udp)
    setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (laddr->ss_family == AF_INET6)
    setsockopt(l->fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  if (bind(l->fd, (const struct sockaddr *)laddr, sockaddr_len(laddr)) < 0) {
    if (errno == EADDRINUSE)
      return agsx_error_set_quiet(err, EADDRINUSE, "port %s%s is already in use", a, suffix);
    return agsx_error_set(err, errno, "bind %s%s", a, suffix);
  }
  if (!udp && listen(l->fd, 128) < 0)
    return agsx_error_set(err, errno, "listen on %s", a);
  socklen_t len = sizeof(l->bound);
  if (getsockname(l->fd, (struct sockaddr *)&l->bound, &len) < 0)
    return agsx_error_set(err, errno, "getsockname %s", a);
  return 0;
}

int agsx_relay_listen(struct agsx_relay *r, enum agsx_proto proto, int listen_ns,
                      const struct sockaddr_storage *laddr, int connect_ns,
                      const struct sockaddr_storage *taddr, struct sockaddr_storage *ret_bound,
                      agsx_error_t *err) {
  struct listener *l = xzalloc(sizeof(*l));
  l->proto = proto;
  l->fd = -1;
  l->connect_ns = connect_ns >= 0 ? fcntl(connect_ns, F_DUPFD_CLOEXEC, 3) : connect_ns;
  l->target = *taddr;
  if ((connect_ns >= 0 && l->connect_ns < 0 &&
       agsx_error_set(err, errno, "duplicate a namespace fd") < 0) ||
      open_listener(r, l, listen_ns, laddr, err) < 0) {
    listener_free(l);
    return -1;
  }
  if (ret_bound)
    *ret_bound = l->bound;
  r->ls = xrealloc(r->ls, (r->nl + 1) * sizeof(*r->ls));
  r->ls[r->nl++] = l;
  return 0;
}

int agsx_relay_set_connect_ns(struct agsx_relay *r, int ns, agsx_error_t *err) {
  for (size_t i = 0; i < r->nl; i++) {
    if (r->ls[i]->connect_ns != AGSX_RELAY_NS_LATER)
      continue;
    r->ls[i]->connect_ns = fcntl(ns, F_DUPFD_CLOEXEC, 3);
    if (r->ls[i]->connect_ns < 0) {
      r->ls[i]->connect_ns = AGSX_RELAY_NS_LATER;
      return agsx_error_set(err, errno, "duplicate a namespace fd");
    }
  }
  return 0;
}

static void conn_close(struct agsx_relay *r, struct conn *c, bool reset) {
  for (int i = 0; i < 2; i++) {
    if (c->fd[i] >= 0)
      r->fds--;
    if (reset)
      reset_close(&c->fd[i]);
    else
      agsx_closep(&c->fd[i]);
  }
  c->dead = true;
}

static void flow_close(struct agsx_relay *r, struct flow *f) {
  if (f->fd >= 0)
    r->fds--;
  agsx_closep(&f->fd);
}

void agsx_relay_free(struct agsx_relay *r) {
  if (r == NULL)
    return;
  for (size_t i = 0; i < r->nc; i++) {
    conn_close(r, r->conns[i], false);
    free(r->conns[i]);
  }
  for (size_t i = 0; i < r->nf; i++) {
    flow_close(r, r->flows[i]);
    free(r->flows[i]);
  }
  for (size_t i = 0; i < r->nl; i++)
    listener_free(r->ls[i]);
  free(r->conns);
  free(r->flows);
  free(r->ls);
  free(r->dgram);
  agsx_closep(&r->home);
  agsx_dns_filter_free(r->filter);
  free(r);
}

/* ---- TCP ------------------------------------------------------------------------------------ */

/* Whether one more connection may be relayed: the cap, the fd budget,
 * the connect namespace. Counts why not. */
static bool conn_allowed(struct agsx_relay *r, const struct listener *l) {
  if (r->nc >= r->max_conns || l->connect_ns == AGSX_RELAY_NS_LATER)
    return false;
  if (r->fds + 2 > r->fd_budget) {
    r->st.over_budget++;
    return false;
  }
  return true;
}

/* Relays accepted FD to L's target; FD is closed on failure. */
static void conn_new(struct agsx_relay *r, struct listener *l, int fd) {
  int inner = conn_allowed(r, l) ? ns_socket(r, l->connect_ns, l->target.ss_family, SOCK_STREAM)
                                 : (errno = 0, -1);
  if (inner < 0) {
    if (out_of_fds(errno))
      back_off(r);
    r->st.dropped++;
    reset_close(&fd);
    return;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(inner, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  bool connecting = false;
  if (connect(inner, (const struct sockaddr *)&l->target, sockaddr_len(&l->target)) < 0) {
    if (errno != EINPROGRESS) {
      r->st.refused++;
      reset_close(&inner);
      reset_close(&fd);
      return;
    }
    connecting = true;
  }
  struct conn *c = xmalloc(sizeof(*c));
  memset(c, 0, offsetof(struct conn, buf));
  c->l = l;
  c->fd[0] = fd;
  c->fd[1] = inner;
  c->connecting = connecting;
  c->last_ms = now_ms();
  r->fds += 2;
  r->conns = xrealloc(r->conns, (r->nc + 1) * sizeof(*r->conns));
  r->conns[r->nc++] = c;
}

static void tcp_accept(struct agsx_relay *r, struct listener *l) {
  for (int k = 0; k < 64 && !paused(r); k++) {
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (out_of_fds(errno))
        back_off(r);
      return; /* EAGAIN, or an aborted connection: nothing to do */
    }
    r->st.accepted++;
    r->backoff_ms = AGSX_RELAY_BACKOFF_MIN_MS;
    conn_new(r, l, fd);
  }
}

static short conn_events(const struct agsx_relay *r, const struct conn *c, int i) {
  if (c->connecting)
    return i == 1 ? POLLOUT : 0;
  short ev = 0;
  if (r->filter) { /* messages accumulate; only vetted bytes go out */
    if (!c->eof[i] && c->len[i] < AGSX_RELAY_BUF)
      ev |= POLLIN;
    if (c->vet[1 - i] > c->off[1 - i])
      ev |= POLLOUT;
    return ev;
  }
  if (!c->eof[i] && c->len[i] == 0)
    ev |= POLLIN;
  if (c->len[1 - i] > c->off[1 - i])
    ev |= POLLOUT;
  return ev;
}

/* One direction: fd[d] → buf[d] → fd[1 - d]. Returns -1 on an error (the
 * connection is then reset on both sides). */
/* Filtered (DNS over TCP): passes whole messages only, each one vetted. */
static int conn_vet(struct agsx_relay *r, struct conn *c, int d) {
  while (c->len[d] - c->vet[d] >= 2) {
    unsigned char *p = (unsigned char *)c->buf[d] + c->vet[d];
    size_t n = (size_t)(p[0] << 8 | p[1]), m = n;
    if (n + 2 > AGSX_RELAY_BUF)
      return -1;
    if (c->len[d] - c->vet[d] < n + 2)
      break;
    enum agsx_dns_verdict v = d == 0 ? agsx_dns_filter_query(r->filter, (char *)p + 2, &m, n)
                                     : agsx_dns_filter_answer(r->filter, (char *)p + 2, &m);
    if (v != AGSX_DNS_PASS)
      return -1;
    c->vet[d] += n + 2;
  }
  return 0;
}

static int conn_pump_filtered(struct agsx_relay *r, struct conn *c, int d, short rev) {
  int src = c->fd[d], dst = c->fd[1 - d];
  if (c->off[d] > 0 && c->off[d] == c->vet[d]) { /* room for the rest of a message */
    memmove(c->buf[d], c->buf[d] + c->off[d], c->len[d] - c->off[d]);
    c->len[d] -= c->off[d];
    c->vet[d] -= c->off[d];
    c->off[d] = 0;
  }
  if (c->len[d] < AGSX_RELAY_BUF && !c->eof[d] && (rev & (POLLIN | POLLHUP | POLLERR))) {
    ssize_t n = recv(src, c->buf[d] + c->len[d], AGSX_RELAY_BUF - c->len[d], 0);
    if (n > 0) {
      c->len[d] += (size_t)n;
      c->last_ms = now_ms();
      if (conn_vet(r, c, d) < 0)
        return -1;
    } else if (n == 0) {
      c->eof[d] = true;
      c->last_ms = now_ms();
    } else if (errno != EAGAIN && errno != EINTR) {
      return -1;
    }
  }
  if (c->vet[d] > c->off[d]) {
    ssize_t n = send(dst, c->buf[d] + c->off[d], c->vet[d] - c->off[d], MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR)
      return -1;
    if (n > 0) {
      c->last_ms = now_ms();
      c->off[d] += (size_t)n;
    }
    if (c->off[d] == c->len[d])
      c->off[d] = c->len[d] = c->vet[d] = 0;
  }
  /* At EOF a partial message is never passed on. */
  if (c->eof[d] && c->vet[d] == c->off[d] && !c->shut[1 - d]) {
    shutdown(dst, SHUT_WR);
    c->shut[1 - d] = true;
  }
  return 0;
}

static int conn_pump(struct conn *c, int d, short rev) {
  int src = c->fd[d], dst = c->fd[1 - d];
  if (c->len[d] == 0 && !c->eof[d] && (rev & (POLLIN | POLLHUP | POLLERR))) {
    ssize_t n = recv(src, c->buf[d], AGSX_RELAY_BUF, 0);
    if (n > 0) {
      c->off[d] = 0;
      c->len[d] = (size_t)n;
      c->last_ms = now_ms();
    } else if (n == 0) {
      c->eof[d] = true;
      c->last_ms = now_ms();
    } else if (errno != EAGAIN && errno != EINTR) {
      return -1;
    }
  }
  if (c->len[d] > c->off[d]) {
    ssize_t n = send(dst, c->buf[d] + c->off[d], c->len[d] - c->off[d], MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR)
      return -1;
    if (n > 0)
      c->last_ms = now_ms();
    if (n > 0 && (c->off[d] += (size_t)n) == c->len[d])
      c->off[d] = c->len[d] = 0;
  }
  /* Everything from fd[d] is through: pass its EOF on (half-close). */
  if (c->eof[d] && c->len[d] == 0 && !c->shut[1 - d]) {
    shutdown(dst, SHUT_WR);
    c->shut[1 - d] = true;
  }
  return 0;
}

static void conn_step(struct agsx_relay *r, struct conn *c, short rev0, short rev1) {
  if (c->connecting) {
    if (!(rev1 & (POLLOUT | POLLERR | POLLHUP)))
      return;
    int e = 0;
    socklen_t len = sizeof(e);
    if (getsockopt(c->fd[1], SOL_SOCKET, SO_ERROR, &e, &len) < 0)
      e = errno;
    if (e != 0) {
      /* Nothing listens inside: the client sees a reset, not a hang. */
      r->st.refused++;
      conn_close(r, c, true);
      return;
    }
    c->connecting = false;
    c->last_ms = now_ms();
    rev1 = 0;
  }
  short rev[2] = {rev0, rev1};
  for (int d = 0; d < 2; d++)
    if ((r->filter ? conn_pump_filtered(r, c, d, rev[d]) : conn_pump(c, d, rev[d])) < 0) {
      conn_close(r, c, true);
      return;
    }
  if (c->shut[0] && c->shut[1])
    conn_close(r, c, false);
}

/* ---- UDP ------------------------------------------------------------------------------------ */

static bool same_addr(const struct sockaddr_storage *a, socklen_t alen,
                      const struct sockaddr_storage *b, socklen_t blen) {
  return alen == blen && memcmp(a, b, alen) == 0;
}

static struct flow *flow_new(struct agsx_relay *r, struct listener *l,
                             const struct sockaddr_storage *client, socklen_t clen) {
  if (l->connect_ns == AGSX_RELAY_NS_LATER)
    return NULL;
  size_t live = 0, lru = SIZE_MAX;
  for (size_t i = 0; i < r->nf; i++)
    if (r->flows[i]->fd >= 0) {
      live++;
      if (lru == SIZE_MAX || r->flows[i]->last_ms < r->flows[lru]->last_ms)
        lru = i;
    }
  /* At the cap or the fd budget the least recently used flow goes. */
  if ((live >= r->max_flows || r->fds + 1 > r->fd_budget) && lru != SIZE_MAX)
    flow_close(r, r->flows[lru]); /* collected at the end of the dispatch */
  if (r->fds + 1 > r->fd_budget) {
    r->st.over_budget++;
    return NULL;
  }
  int fd = ns_socket(r, l->connect_ns, l->target.ss_family, SOCK_DGRAM);
  if (fd < 0)
    return NULL;
  if (connect(fd, (const struct sockaddr *)&l->target, sockaddr_len(&l->target)) < 0) {
    close(fd);
    return NULL;
  }
  r->fds++;
  struct flow *f = xzalloc(sizeof(*f));
  f->l = l;
  f->fd = fd;
  f->client = *client;
  f->client_len = clen;
  f->last_ms = now_ms();
  r->flows = xrealloc(r->flows, (r->nf + 1) * sizeof(*r->flows));
  r->flows[r->nf++] = f;
  return f;
}

static void udp_in(struct agsx_relay *r, struct listener *l) {
  for (int k = 0; k < 64; k++) {
    struct sockaddr_storage from;
    socklen_t flen = sizeof(from);
    ssize_t n = recvfrom(l->fd, r->dgram, 65536, MSG_DONTWAIT, (struct sockaddr *)&from, &flen);
    if (n < 0)
      return;
    size_t len = (size_t)n;
    enum agsx_dns_verdict v =
        r->filter ? agsx_dns_filter_query(r->filter, r->dgram, &len, 65536) : AGSX_DNS_PASS;
    if (v == AGSX_DNS_REPLY)
      sendto(l->fd, r->dgram, len, MSG_DONTWAIT, (const struct sockaddr *)&from, flen);
    if (v != AGSX_DNS_PASS)
      continue;
    struct flow *f = NULL;
    for (size_t i = 0; i < r->nf && f == NULL; i++)
      if (r->flows[i]->fd >= 0 && r->flows[i]->l == l &&
          same_addr(&r->flows[i]->client, r->flows[i]->client_len, &from, flen))
        f = r->flows[i];
    if (f == NULL && (f = flow_new(r, l, &from, flen)) == NULL) {
      r->st.dropped++;
      continue;
    }
    f->last_ms = now_ms();
    /* A refused send (nothing listens inside yet) just drops it. */
    if (send(f->fd, r->dgram, len, MSG_DONTWAIT) < 0)
      r->st.dropped++;
  }
}

static void udp_back(struct agsx_relay *r, struct flow *f) {
  for (int k = 0; k < 64; k++) {
    ssize_t n = recv(f->fd, r->dgram, 65536, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR || errno == ECONNREFUSED)
        return;
      flow_close(r, f);
      return;
    }
    f->last_ms = now_ms();
    size_t len = (size_t)n;
    if (r->filter && agsx_dns_filter_answer(r->filter, r->dgram, &len) == AGSX_DNS_DROP)
      continue;
    sendto(f->l->fd, r->dgram, len, MSG_DONTWAIT, (const struct sockaddr *)&f->client,
           f->client_len);
  }
}

/* ---- polling -------------------------------------------------------------------------------- */

size_t agsx_relay_nfds(const struct agsx_relay *r) {
  return r ? r->nl + 2 * r->nc + r->nf + agsx_dns_filter_nfds(r->filter) : 0;
}

size_t agsx_relay_fill(struct agsx_relay *r, struct pollfd *p) {
  if (r == NULL)
    return 0;
  size_t n = 0;
  bool pause = paused(r);
  for (size_t i = 0; i < r->nl; i++) {
    bool off = pause && r->ls[i]->proto == AGSX_PROTO_TCP;
    p[n++] = (struct pollfd){.fd = off ? -1 : r->ls[i]->fd, .events = POLLIN};
  }
  for (size_t i = 0; i < r->nc; i++)
    for (int k = 0; k < 2; k++) {
      short ev = conn_events(r, r->conns[i], k);
      p[n++] = (struct pollfd){.fd = ev ? r->conns[i]->fd[k] : -1, .events = ev};
    }
  for (size_t i = 0; i < r->nf; i++)
    p[n++] = (struct pollfd){.fd = r->flows[i]->fd, .events = POLLIN};
  r->fill_nl = r->nl;
  r->fill_nc = r->nc;
  r->fill_nf = r->nf;
  return n + agsx_dns_filter_fill(r->filter, p + n);
}

/* When C is due to be reset (INT64_MAX: never): a connect taking too
 * long, a half-closed connection gone quiet, an idle one (if asked). */
static int64_t conn_due(const struct agsx_relay *r, const struct conn *c) {
  int64_t due = INT64_MAX;
  if (c->connecting)
    due = c->last_ms + AGSX_RELAY_CONNECT_MS;
  if (r->half_closed_ms && (c->shut[0] || c->shut[1]) && c->last_ms + r->half_closed_ms < due)
    due = c->last_ms + r->half_closed_ms;
  if (r->tcp_idle_ms && c->last_ms + r->tcp_idle_ms < due)
    due = c->last_ms + r->tcp_idle_ms;
  return due;
}

static void expire(struct agsx_relay *r) {
  int64_t now = now_ms();
  for (size_t i = 0; i < r->nf; i++)
    if (r->flows[i]->fd >= 0 && now - r->flows[i]->last_ms >= r->udp_idle_ms)
      flow_close(r, r->flows[i]);
  for (size_t i = 0; i < r->nc; i++)
    if (!r->conns[i]->dead && conn_due(r, r->conns[i]) <= now) {
      r->st.timed_out++;
      conn_close(r, r->conns[i], true);
    }
}

/* Drops closed connections and flows (only between dispatches: the pollfd
 * layout refers to them by position). */
static void compact(struct agsx_relay *r) {
  size_t k = 0;
  for (size_t i = 0; i < r->nc; i++)
    if (r->conns[i]->dead)
      free(r->conns[i]);
    else
      r->conns[k++] = r->conns[i];
  r->nc = k;
  k = 0;
  for (size_t i = 0; i < r->nf; i++)
    if (r->flows[i]->fd < 0)
      free(r->flows[i]);
    else
      r->flows[k++] = r->flows[i];
  r->nf = k;
}

void agsx_relay_dispatch(struct agsx_relay *r, const struct pollfd *p, size_t n) {
  if (r == NULL)
    return;
  size_t nfilter = agsx_dns_filter_nfds(r->filter);
  if (n != r->fill_nl + 2 * r->fill_nc + r->fill_nf + nfilter)
    return; /* not the array agsx_relay_fill() made */
  size_t k = 0;
  for (size_t i = 0; i < r->fill_nl; i++, k++) {
    if (!(p[k].revents & POLLIN) || p[k].fd != r->ls[i]->fd)
      continue;
    if (r->ls[i]->proto == AGSX_PROTO_TCP)
      tcp_accept(r, r->ls[i]);
    else
      udp_in(r, r->ls[i]);
  }
  for (size_t i = 0; i < r->fill_nc; i++, k += 2) {
    struct conn *c = r->conns[i];
    if (!c->dead && (p[k].revents || p[k + 1].revents))
      conn_step(r, c, p[k].revents, p[k + 1].revents);
  }
  for (size_t i = 0; i < r->fill_nf; i++, k++)
    if (p[k].revents && r->flows[i]->fd >= 0 && p[k].fd == r->flows[i]->fd)
      udp_back(r, r->flows[i]);
  agsx_dns_filter_dispatch(r->filter, p + k, nfilter);
  expire(r);
  compact(r);
  r->fill_nl = r->fill_nc = r->fill_nf = 0;
}

int agsx_relay_timeout_ms(const struct agsx_relay *r) {
  if (r == NULL)
    return -1;
  int64_t now = now_ms(), next = INT64_MAX;
  for (size_t i = 0; i < r->nf; i++) {
    int64_t at = r->flows[i]->last_ms + r->udp_idle_ms;
    if (at < next)
      next = at;
  }
  for (size_t i = 0; i < r->nc; i++) {
    int64_t at = conn_due(r, r->conns[i]);
    if (at < next)
      next = at;
  }
  if (r->paused_until > now && r->paused_until < next)
    next = r->paused_until;
  int fms = agsx_dns_filter_timeout_ms(r->filter);
  if (fms >= 0 && now + fms < next)
    next = now + fms;
  if (next == INT64_MAX)
    return -1;
  /* (a day at most: an int, and a wake-up costs nothing) */
  return next <= now ? 0 : next - now >= 86400000 ? 86400000 : (int)(next - now + 1);
}

void agsx_relay_stats(const struct agsx_relay *r, struct agsx_relay_stats *ret) {
  *ret = r->st;
  ret->conns = r->nc;
  ret->flows = r->nf;
  ret->fds = r->fds;
  ret->fd_budget = r->fd_budget;
  ret->backing_off = paused(r);
}
