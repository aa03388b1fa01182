/* Unit tests: -p spec parsing, the ports of a record, and the relay itself
 * between the test's network namespace and one it makes (loopback only). */
#include "config.h"

#include "net/relay.h"
#include "net/net.h"
#include "state/state.h"
#include "tap.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

/* ---- specs --------------------------------------------------------------------------------- */

static const char *fmt_port(const struct agsx_port *p) {
  static char buf[160];
  char a[80];
  snprintf(buf, sizeof(buf), "%s->%u/%s", agsx_sockaddr_format(&p->host, a, sizeof(a)), p->port,
           agsx_proto_name(p->proto));
  return buf;
}

static void parses(const char *spec, const char *want) {
  agsx_error_t err = NULL;
  struct agsx_port p;
  int r = agsx_port_parse(spec, &p, &err);
  if (r < 0) {
    tap_ok(0, "parse `%s`: %s", spec, err->msg);
    agsx_error_free(&err);
    return;
  }
  tap_is_str(fmt_port(&p), want, "parse `%s`", spec);
}

static void refuses(const char *spec, const char *msg_part) {
  agsx_error_t err = NULL;
  struct agsx_port p;
  int r = agsx_port_parse(spec, &p, &err);
  char shown[64];
  snprintf(shown, sizeof(shown), "%s", spec);
  for (char *q = shown; *q; q++)
    if (*q < ' ' || *q > '~')
      *q = '?';
  tap_ok(r < 0 && err && strstr(err->msg, msg_part), "refuse `%s` (%s)", shown,
         err ? err->msg : "accepted");
  agsx_error_free(&err);
}

static void test_specs(void) {
  parses("80", "127.0.0.1:0->80/tcp");
  parses("80/udp", "127.0.0.1:0->80/udp");
  parses("8080:80", "127.0.0.1:8080->80/tcp");
  parses("0:80", "127.0.0.1:0->80/tcp");
  parses("127.0.0.1:8080:80", "127.0.0.1:8080->80/tcp");
  parses("0.0.0.0:8080:80/tcp", "0.0.0.0:8080->80/tcp");
  parses("127.0.0.1::80", "127.0.0.1:0->80/tcp");
  parses("[::1]:8080:80", "[::1]:8080->80/tcp");
  parses("[::1]::53/udp", "[::1]:0->53/udp");
  parses("[::]:1:65535", "[::]:1->65535/tcp");
  parses("65535:1", "127.0.0.1:65535->1/tcp");
  refuses("", "invalid port spec");
  refuses("0", "sandbox port `0`");
  refuses("65536", "sandbox port");
  refuses("99999999999999999999", "sandbox port");
  refuses("80:0", "sandbox port `0`");
  refuses("70000:80", "host port `70000`");
  refuses("-1", "sandbox port");
  refuses("+80", "sandbox port");
  refuses(" 80", "invalid port spec");
  refuses("80\n", "invalid port spec");
  refuses("80/sctp", "protocol `sctp`");
  refuses("80/", "protocol");
  refuses("80/TCP", "protocol");
  refuses("80/tcp/udp", "protocol");
  refuses("1.2.3:80:80", "`1.2.3` is not an IP address");
  refuses("localhost:80:80", "not an IP address");
  refuses("::1:80:80", "in brackets");
  refuses("[::1]80:80", "invalid port spec");
  refuses("[::1]:80", "IP::PORT");
  refuses("[198.18.3.4]:80:80", "brackets");
  refuses("[]:80:80", "invalid port spec");
  refuses("[::1:80:80", "invalid port spec");
  refuses("[fe80::1%lo]:80:80", "not an IP address");
  refuses(":80", "host port");
  refuses("::80", "invalid port spec");
  refuses("1:2:3:4", "invalid port spec");
  refuses("123456:80", "host port");
  char big[300];
  memset(big, '1', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  refuses(big, "invalid port spec");

  struct agsx_port v[3];
  agsx_error_t err = NULL;
  agsx_port_parse("127.0.0.1:8080:80", &v[0], NULL);
  agsx_port_parse("8080:81/udp", &v[1], NULL);
  agsx_port_parse("90", &v[2], NULL);
  tap_ok(agsx_ports_check(v, 3, &err) == 0, "same host port, other protocol: fine");
  agsx_port_parse("80", &v[1], NULL);
  tap_ok(agsx_ports_check(v, 3, &err) == 0, "two free host ports: fine");
  agsx_port_parse("8080:81", &v[2], NULL);
  int r = agsx_ports_check(v, 3, &err);
  tap_ok(r < 0 && strstr(err->msg, "127.0.0.1:8080/tcp is published twice"),
         "a host port twice: %s", err ? err->msg : "accepted");
  agsx_error_free(&err);
  agsx_port_parse("[::1]:8080:81", &v[2], NULL);
  tap_ok(agsx_ports_check(v, 3, &err) == 0, "same port on another address: fine");
}

/* ---- records ------------------------------------------------------------------------------- */

static void test_record(void) {
  struct agsx_record r = {.id = "0123456789abcdef0123456789abcdef"};
  r.status = AGSX_STATUS_RUNNING;
  r.n_ports = 2;
  r.ports = xzalloc(2 * sizeof(*r.ports));
  agsx_port_parse("127.0.0.1:8080:80", &r.ports[0], NULL);
  agsx_port_parse("[::1]:5353:53/udp", &r.ports[1], NULL);
  size_t len;
  char *json = agsx_record_to_json(&r, &len);
  struct agsx_record back;
  agsx_error_t err = NULL;
  tap_ok(agsx_record_from_json(json, len, &back, &err) == 0, "record with ports parses");
  tap_ok(!back.pause_on_timeout, "killed at its deadline by default");
  tap_is_int(back.n_ports, 2, "two ports back");
  if (back.n_ports == 2) {
    tap_is_str(fmt_port(&back.ports[0]), "127.0.0.1:8080->80/tcp", "first port");
    tap_is_str(fmt_port(&back.ports[1]), "[::1]:5353->53/udp", "second port");
  }
  agsx_record_clear(&back);
  free(json);
  agsx_record_clear(&r);

  r = (struct agsx_record){.id = "0123456789abcdef0123456789abcdef", .pause_on_timeout = true};
  json = agsx_record_to_json(&r, &len);
  tap_ok(agsx_record_from_json(json, len, &back, &err) == 0 && back.pause_on_timeout,
         "pause_on_timeout is kept in the record");
  agsx_record_clear(&back);
  free(json);

  const char *old = "{\"id\":\"0123456789abcdef0123456789abcdef\",\"status\":\"running\"}";
  tap_ok(agsx_record_from_json(old, strlen(old), &back, &err) == 0 && back.n_ports == 0 &&
             back.ports == NULL,
         "an old record without ports: none");
  agsx_record_clear(&back);
  const char *bad =
      "{\"id\":\"0123456789abcdef0123456789abcdef\",\"status\":\"running\",\"ports\":["
      "{\"host_ip\":\"x\",\"host_port\":1,\"port\":2,\"proto\":\"tcp\"},"
      "{\"host_ip\":\"127.0.0.1\",\"host_port\":70000,\"port\":2,\"proto\":\"tcp\"},"
      "{\"host_ip\":\"127.0.0.1\",\"host_port\":1,\"port\":0,\"proto\":\"tcp\"},"
      "{\"host_ip\":\"127.0.0.1\",\"host_port\":1,\"port\":2,\"proto\":\"sctp\"},"
      "7, null, [],"
      "{\"host_ip\":\"127.0.0.1\",\"host_port\":1,\"port\":2,\"proto\":\"udp\"}]}";
  tap_ok(agsx_record_from_json(bad, strlen(bad), &back, &err) == 0, "malformed ports: record ok");
  tap_is_int(back.n_ports, 1, "only the valid port kept");
  agsx_record_clear(&back);
  agsx_error_free(&err);
}

/* ---- the relay, between namespaces ------------------------------------------------------------
 * A child in a new network namespace runs a TCP server on 127.0.0.1:7
 * (reads to EOF, answers "got N", closes) and a UDP echo on 127.0.0.1:7;
 * the relay listens on our 127.0.0.1 and connects in the child's. */

static _Noreturn void server(int ready) {
  agsx_error_t err = NULL;
  if (unshare(CLONE_NEWNET) < 0 || agsx_net_loopback_up(&err) < 0)
    _exit(1);
  struct sockaddr_storage a;
  agsx_sockaddr_from_ip("127.0.0.1", 7, &a);
  int one = 1;
  int t = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int u = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  setsockopt(t, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(t, (struct sockaddr *)&a, sizeof(struct sockaddr_in)) < 0 || listen(t, 64) < 0 ||
      bind(u, (struct sockaddr *)&a, sizeof(struct sockaddr_in)) < 0)
    _exit(1);
  if (write(ready, "r", 1) != 1)
    _exit(1);
  for (;;) {
    struct pollfd p[2] = {{.fd = t, .events = POLLIN}, {.fd = u, .events = POLLIN}};
    if (poll(p, 2, -1) < 0)
      continue;
    if (p[1].revents) {
      char buf[2048];
      struct sockaddr_storage from;
      socklen_t flen = sizeof(from);
      ssize_t n = recvfrom(u, buf, sizeof(buf), 0, (struct sockaddr *)&from, &flen);
      if (n > 0)
        sendto(u, buf, (size_t)n, 0, (struct sockaddr *)&from, flen);
    }
    if (p[0].revents) {
      int c = accept4(t, NULL, NULL, SOCK_CLOEXEC);
      if (c < 0)
        continue;
      char buf[65536];
      size_t total = 0;
      ssize_t n;
      while ((n = read(c, buf, sizeof(buf))) > 0)
        total += (size_t)n;
      char reply[64];
      int len = snprintf(reply, sizeof(reply), "got %zu", total);
      if (write(c, reply, (size_t)len) < 0) {
      }
      close(c);
    }
  }
}

/* Runs the relay until FD has EVENTS (or MS pass); returns the revents. */
static short pump(struct agsx_relay *r, int fd, short events, int ms) {
  int64_t end = agsx_mono_ns() / 1000000 + ms;
  struct pollfd *p = NULL;
  short got = 0;
  while (agsx_mono_ns() / 1000000 < end) {
    p = xrealloc(p, (agsx_relay_nfds(r) + 1) * sizeof(*p));
    p[0] = (struct pollfd){.fd = fd, .events = events};
    size_t n = agsx_relay_fill(r, p + 1);
    poll(p, n + 1, 20);
    agsx_relay_dispatch(r, p + 1, n);
    if ((got = p[0].revents) != 0)
      break;
  }
  free(p);
  return got;
}

static int tcp_client(const struct sockaddr_storage *a) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  connect(fd, (const struct sockaddr *)a, sizeof(struct sockaddr_in));
  return fd;
}

/* Reads everything until EOF, driving the relay; returns the byte count
 * (-1 on a reset) and the text in BUF. */
static ssize_t read_to_eof(struct agsx_relay *r, int fd, char *buf, size_t len) {
  size_t got = 0;
  for (;;) {
    if (!pump(r, fd, POLLIN, 3000))
      return -2;
    ssize_t n = recv(fd, buf + got, len - got - 1, 0);
    if (n == 0)
      break;
    if (n < 0 && errno == EAGAIN)
      continue;
    if (n < 0)
      return -1;
    got += (size_t)n;
  }
  buf[got] = '\0';
  return (ssize_t)got;
}

static void test_relay(void) {
  int pp[2];
  if (pipe2(pp, O_CLOEXEC) < 0)
    abort();
  pid_t pid = fork();
  if (pid == 0)
    server(pp[1]);
  close(pp[1]);
  char c;
  if (read(pp[0], &c, 1) != 1) {
    tap_ok(0, "the server in its namespace started (are we root?)");
    return;
  }
  close(pp[0]);
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/ns/net", pid);
  int ns = open(path, O_RDONLY | O_CLOEXEC);
  agsx_error_t err = NULL;
  struct agsx_relay *r = agsx_relay_new(&err);
  struct sockaddr_storage l, t, closed, bound, ubound;
  agsx_sockaddr_from_ip("127.0.0.1", 0, &l);
  agsx_sockaddr_from_ip("127.0.0.1", 7, &t);
  agsx_sockaddr_from_ip("127.0.0.1", 9, &closed);
  tap_ok(agsx_relay_listen(r, AGSX_PROTO_TCP, -1, &l, AGSX_RELAY_NS_LATER, &t, &bound, &err) == 0,
         "listen tcp");
  tap_ok(agsx_relay_listen(r, AGSX_PROTO_UDP, -1, &l, ns, &t, &ubound, &err) == 0, "listen udp");
  struct sockaddr_storage rbound;
  tap_ok(agsx_relay_listen(r, AGSX_PROTO_TCP, -1, &l, ns, &closed, &rbound, &err) == 0,
         "listen tcp to a closed port");
  tap_ok(agsx_sockaddr_port(&bound) != 0, "a port was picked");
  /* The same port again: in use. */
  struct agsx_relay *r2 = agsx_relay_new(&err);
  tap_ok(agsx_relay_listen(r2, AGSX_PROTO_TCP, -1, &bound, -1, &t, NULL, &err) < 0 && err &&
             strstr(err->msg, "is already in use") && agsx_error_errno(&err) == EADDRINUSE,
         "a port in use: %s", err ? err->msg : "bound");
  agsx_error_free(&err);
  agsx_relay_free(r2);
  tap_ok(agsx_relay_set_connect_ns(r, ns, &err) == 0, "connect namespace set");

  /* TCP: send, half-close, the reply comes back, then EOF. */
  for (int round = 0; round < 3; round++) {
    int fd = tcp_client(&bound);
    pump(r, fd, POLLOUT, 2000);
    char data[100000];
    memset(data, 'x', sizeof(data));
    size_t sent = 0;
    while (sent < sizeof(data)) {
      ssize_t n = send(fd, data + sent, sizeof(data) - sent, MSG_NOSIGNAL);
      if (n > 0)
        sent += (size_t)n;
      else
        pump(r, fd, POLLOUT, 2000);
    }
    shutdown(fd, SHUT_WR);
    char buf[128];
    ssize_t n = read_to_eof(r, fd, buf, sizeof(buf));
    tap_ok(n > 0 && strcmp(buf, "got 100000") == 0, "tcp round %d: half-close, reply `%s`", round,
           n > 0 ? buf : "none");
    close(fd);
  }
  /* A closed port inside: the client is reset at once. */
  int fd = tcp_client(&rbound);
  char buf[128];
  tap_ok(read_to_eof(r, fd, buf, sizeof(buf)) == -1, "nothing listens inside: reset");
  close(fd);

  /* UDP: two clients, each gets its own echo. */
  int u1 = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int u2 = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  connect(u1, (struct sockaddr *)&ubound, sizeof(struct sockaddr_in));
  connect(u2, (struct sockaddr *)&ubound, sizeof(struct sockaddr_in));
  send(u1, "one", 3, 0);
  send(u2, "two", 3, 0);
  memset(buf, 0, sizeof(buf));
  pump(r, u1, POLLIN, 2000);
  tap_ok(recv(u1, buf, sizeof(buf), 0) == 3 && memcmp(buf, "one", 3) == 0, "udp echo 1");
  pump(r, u2, POLLIN, 2000);
  tap_ok(recv(u2, buf, sizeof(buf), 0) == 3 && memcmp(buf, "two", 3) == 0, "udp echo 2");
  struct agsx_relay_stats st;
  agsx_relay_stats(r, &st);
  tap_is_int(st.flows, 2, "two udp flows");
  tap_ok(agsx_relay_timeout_ms(r) > 0 && agsx_relay_timeout_ms(r) <= AGSX_RELAY_UDP_IDLE_MS + 1,
         "a timeout for the flows' expiry");
  tap_is_int(st.conns, 0, "no tcp connection left");
  tap_ok(st.accepted >= 4 && st.refused >= 1, "stats: %llu accepted, %llu refused",
         (unsigned long long)st.accepted, (unsigned long long)st.refused);
  /* Caps: 2 connections (the third is reset at once), 1 flow (the least
   * recently used goes), flows idle for 100 ms expire. */
  agsx_relay_set_limits(r, 2, 1, 100);
  int c1 = tcp_client(&bound), c2 = tcp_client(&bound);
  pump(r, -1, 0, 200);
  int c3 = tcp_client(&bound);
  tap_ok(read_to_eof(r, c3, buf, sizeof(buf)) == -1, "over the connection cap: reset");
  agsx_relay_stats(r, &st);
  tap_is_int(st.conns, 2, "two connections relayed");
  shutdown(c1, SHUT_WR);
  shutdown(c2, SHUT_WR);
  tap_ok(read_to_eof(r, c1, buf, sizeof(buf)) > 0 && strcmp(buf, "got 0") == 0 &&
             read_to_eof(r, c2, buf, sizeof(buf)) > 0 && strcmp(buf, "got 0") == 0,
         "the two under the cap work");
  close(c1);
  close(c2);
  close(c3);
  send(u1, "again", 5, 0);
  pump(r, u1, POLLIN, 2000);
  tap_ok(recv(u1, buf, sizeof(buf), 0) == 5, "udp after the cap change");
  agsx_relay_stats(r, &st);
  tap_is_int(st.flows, 1, "one flow kept (the least recently used went)");
  pump(r, -1, 0, 300);
  agsx_relay_stats(r, &st);
  tap_is_int(st.flows, 0, "idle flows expire");
  close(u1);
  close(u2);
  agsx_relay_free(r);
  /* Freed: the port can be bound again at once. */
  r = agsx_relay_new(&err);
  tap_ok(agsx_relay_listen(r, AGSX_PROTO_TCP, -1, &bound, -1, &t, NULL, &err) == 0,
         "rebound right after");
  agsx_relay_free(r);
  agsx_error_free(&err);
  close(ns);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

/* ---- fds: the budget, the back-off, the timeouts ------------------------------------------
 * In our own namespace, to a listener of ours (SRV) that accepts only when
 * told: the relay's connects complete in its backlog. */

static int local_listener(struct sockaddr_storage *ret) {
  agsx_sockaddr_from_ip("127.0.0.1", 0, ret);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  socklen_t len = sizeof(*ret);
  if (bind(fd, (struct sockaddr *)ret, sizeof(struct sockaddr_in)) < 0 || listen(fd, 128) < 0 ||
      getsockname(fd, (struct sockaddr *)ret, &len) < 0)
    abort();
  return fd;
}

/* The client was reset (or closed) by the relay, driving it meanwhile. */
static bool ended(struct agsx_relay *r, int fd) {
  char c;
  if (!pump(r, fd, POLLIN, 2000))
    return false;
  return recv(fd, &c, 1, 0) <= 0;
}

static void test_budget(void) {
  agsx_error_t err = NULL;
  struct sockaddr_storage t, l, bound;
  int srv = local_listener(&t);
  agsx_sockaddr_from_ip("127.0.0.1", 0, &l);
  struct agsx_relay *r = agsx_relay_new(&err);
  struct agsx_relay_stats st;
  agsx_relay_stats(r, &st);
  tap_ok(st.fd_budget > 0 && st.fd_budget + AGSX_RELAY_FD_RESERVE < 1000000,
         "a new relay's fd budget comes from the fd limit (%zu)", st.fd_budget);
  agsx_relay_listen(r, AGSX_PROTO_TCP, -1, &l, -1, &t, &bound, &err);
  tap_ok(agsx_relay_fd_need(r) == 2 * AGSX_RELAY_MAX_CONNS + AGSX_RELAY_MAX_FLOWS, "fd need");
  agsx_relay_set_fd_budget(r, 7); /* three connections (two fds each) */
  int c[6];
  for (int i = 0; i < 6; i++) {
    c[i] = tcp_client(&bound);
    pump(r, -1, 0, 60);
  }
  agsx_relay_stats(r, &st);
  tap_ok(st.conns == 3 && st.fds == 6 && st.over_budget == 3,
         "the budget holds: %zu connections, %zu fds, %llu over the budget", st.conns, st.fds,
         (unsigned long long)st.over_budget);
  tap_ok(ended(r, c[3]) && ended(r, c[4]) && ended(r, c[5]), "the ones over it are reset");
  /* Closed by the clients, never answered: half-closed, reaped. */
  agsx_relay_set_tcp_timeouts(r, 0, 100);
  for (int i = 0; i < 6; i++)
    close(c[i]);
  pump(r, -1, 0, 400);
  agsx_relay_stats(r, &st);
  tap_ok(st.conns == 0 && st.fds == 0, "closed by the clients: nothing held (%zu)", st.fds);
  /* UDP: no budget, no flow. */
  struct agsx_relay *u = agsx_relay_new(&err);
  struct sockaddr_storage ub;
  agsx_relay_listen(u, AGSX_PROTO_UDP, -1, &l, -1, &t, &ub, &err);
  agsx_relay_set_fd_budget(u, 0);
  int uc = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  connect(uc, (struct sockaddr *)&ub, sizeof(struct sockaddr_in));
  send(uc, "q", 1, 0);
  pump(u, -1, 0, 60);
  agsx_relay_stats(u, &st);
  tap_ok(st.flows == 0 && st.over_budget == 1, "udp over the budget: dropped, no flow");
  close(uc);
  agsx_relay_free(u);
  agsx_relay_free(r);
  close(srv);
}

/* Accept failing with EMFILE leaves the connection pending: the relay must
 * not poll its listener again at once (the old relay spun at 100% CPU). */
static void test_backoff(void) {
  agsx_error_t err = NULL;
  struct sockaddr_storage t, l, bound;
  int srv = local_listener(&t);
  agsx_sockaddr_from_ip("127.0.0.1", 0, &l);
  struct agsx_relay *r = agsx_relay_new(&err);
  agsx_relay_listen(r, AGSX_PROTO_TCP, -1, &l, -1, &t, &bound, &err);
  agsx_relay_set_fd_budget(r, 1000);
  int c[4];
  for (int i = 0; i < 4; i++)
    c[i] = tcp_client(&bound);
  struct pollfd *p = xzalloc(64 * sizeof(*p));
  struct rlimit old, low;
  getrlimit(RLIMIT_NOFILE, &old);
  low = old;
  low.rlim_cur = old.rlim_cur - agsx_relay_fd_headroom(0); /* the fds open now */
  setrlimit(RLIMIT_NOFILE, &low);
  /* The limit bounds fd numbers: fill the holes below it, and no fd is
   * left (accept() fails with EMFILE). */
  int holes[256], nholes = 0;
  while (nholes < 256 && (holes[nholes] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
    nholes++;
  int wakeups = 0;
  int64_t end = agsx_mono_ns() / 1000000 + 500;
  for (int64_t now; (now = agsx_mono_ns() / 1000000) < end; wakeups++) {
    size_t n = agsx_relay_fill(r, p);
    int ms = agsx_relay_timeout_ms(r);
    poll(p, n, ms < 0 || ms > end - now ? (int)(end - now) : ms);
    agsx_relay_dispatch(r, p, n);
  }
  struct agsx_relay_stats st;
  agsx_relay_stats(r, &st);
  tap_ok(st.backoffs >= 1 && wakeups < 20,
         "out of fds: the relay backs off (%d wake-ups in 500 ms, %llu back-offs)", wakeups,
         (unsigned long long)st.backoffs);
  tap_ok(st.backing_off && st.accepted == 0, "and is still backing off, nothing accepted (%llu)",
         (unsigned long long)st.accepted);
  setrlimit(RLIMIT_NOFILE, &old);
  while (nholes > 0)
    close(holes[--nholes]);
  pump(r, -1, 0, AGSX_RELAY_BACKOFF_MAX_MS + 200); /* the longest pause, then the accepts */
  agsx_relay_stats(r, &st);
  tap_ok(st.conns == 4 && !st.backing_off, "fds again: the pending connections are relayed (%zu)",
         st.conns);
  for (int i = 0; i < 4; i++)
    close(c[i]);
  free(p);
  agsx_relay_free(r);
  close(srv);
}

static void test_timeouts(void) {
  agsx_error_t err = NULL;
  struct sockaddr_storage t, l, bound;
  int srv = local_listener(&t);
  agsx_sockaddr_from_ip("127.0.0.1", 0, &l);
  struct agsx_relay *r = agsx_relay_new(&err);
  agsx_relay_listen(r, AGSX_PROTO_TCP, -1, &l, -1, &t, &bound, &err);
  agsx_relay_set_tcp_timeouts(r, 400, 150);
  /* Half-closed: the client ends its side, the server never answers. */
  int c = tcp_client(&bound);
  pump(r, -1, 0, 60);
  int s = accept4(srv, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  shutdown(c, SHUT_WR);
  char buf[8];
  tap_ok(s >= 0 && pump(r, s, POLLIN, 1000) && recv(s, buf, sizeof(buf), 0) == 0,
         "the half-close reaches the server");
  int ms = agsx_relay_timeout_ms(r);
  tap_ok(ms > 0 && ms <= 151, "a poll timeout for the half-closed connection (%d ms)", ms);
  int64_t t0 = agsx_mono_ns();
  tap_ok(ended(r, c), "half-closed and quiet: reset");
  int64_t dt = (agsx_mono_ns() - t0) / 1000000;
  struct agsx_relay_stats st;
  agsx_relay_stats(r, &st);
  tap_ok(st.timed_out == 1 && st.conns == 0 && dt >= 50 && dt < 1000,
         "after the half-closed timeout (%lld ms)", (long long)dt);
  close(c);
  if (s >= 0)
    close(s);
  /* Idle: nothing moves at all. */
  c = tcp_client(&bound);
  pump(r, -1, 0, 60);
  s = accept4(srv, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  send(c, "x", 1, 0);
  tap_ok(s >= 0 && pump(r, s, POLLIN, 1000) && recv(s, buf, sizeof(buf), 0) == 1, "a byte through");
  t0 = agsx_mono_ns();
  tap_ok(ended(r, c), "then idle: reset");
  dt = (agsx_mono_ns() - t0) / 1000000;
  agsx_relay_stats(r, &st);
  tap_ok(st.timed_out == 2 && dt >= 250 && dt < 1500, "after the idle timeout (%lld ms)",
         (long long)dt);
  close(c);
  if (s >= 0)
    close(s);
  agsx_relay_free(r);
  close(srv);
}

int main(void) {
  test_specs();
  test_record();
  test_relay();
  test_budget();
  test_backoff();
  test_timeouts();
  return tap_done();
}
