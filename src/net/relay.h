/* agsx — relay: TCP and UDP forwarding between network namespaces, run
 * inside a single-threaded poll loop (the sandbox's supervisor).
 *
 * A relay holds listeners; each listener has a listen side (a socket bound
 * in one network namespace) and a connect side (an address reached from a
 * socket created in another namespace). Sockets keep the namespace they
 * were created in, so only socket() runs in the other namespace:
 * setns(ns) + socket() + setns(home), on the calling thread (which must be
 * single-threaded for that time and may enter the namespaces: root in
 * their owning user namespace).
 *
 * `agsx run -p` uses listen side = the host, connect side = 127.0.0.1:PORT
 * in the sandbox's namespace (the sandbox itself still opens nothing
 * outwards). A DNS relay is the other way round: listen on 127.0.0.11:53
 * in the sandbox's namespace (UDP and TCP), connect to a resolver from
 * the host's.
 *
 * TCP: non-blocking copies through a bounded buffer per direction,
 * half-close propagated (shutdown(SHUT_WR)), a refused or reset inner
 * connection resets the client's (RST, not a hang), at most
 * AGSX_RELAY_MAX_CONNS connections per relay (more are accepted and closed
 * at once). A connect to the target not done in AGSX_RELAY_CONNECT_MS, a
 * connection half-closed and silent for AGSX_RELAY_HALF_CLOSED_MS (and,
 * when asked, one idle for long) is reset. UDP: one connected flow socket
 * per client address, replies go back to it, flows idle for
 * AGSX_RELAY_UDP_IDLE_MS expire and at most AGSX_RELAY_MAX_FLOWS live (the
 * least recently used one goes first).
 *
 * File descriptors: the clients decide how many connections there are, and
 * the relay's process has other work (a supervisor must still obey a stop).
 * So the relay holds at most its fd budget (2 per connection, 1 per flow),
 * set from RLIMIT_NOFILE less the fds open at agsx_relay_new() and
 * AGSX_RELAY_FD_RESERVE (the caller may set it again once its own fds are
 * open), and a connection over the budget is accepted and reset like one
 * over the cap. Should accept() or socket() still fail for want of fds or
 * memory (EMFILE, ENFILE, ENOBUFS, ENOMEM: someone else used them), the
 * relay stops polling its TCP listeners for a while (from 50 ms, doubling to
 * 2 s) instead of waking at once for the same pending connection. */
#ifndef AGSX_RELAY_H
#define AGSX_RELAY_H

#include "util/util.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#define AGSX_RELAY_MAX_CONNS 512
#define AGSX_RELAY_MAX_FLOWS 256
#define AGSX_RELAY_UDP_IDLE_MS 60000
#define AGSX_RELAY_BUF (64 * 1024) /* per direction of a TCP connection */
#define AGSX_RELAY_CONNECT_MS 10000
#define AGSX_RELAY_HALF_CLOSED_MS 60000
#define AGSX_RELAY_FD_RESERVE 64 /* left to the rest of the process */
#define AGSX_RELAY_BACKOFF_MIN_MS 50
#define AGSX_RELAY_BACKOFF_MAX_MS 2000
#define AGSX_RELAY_NS_LATER (-2) /* connect side: set by agsx_relay_set_connect_ns */

enum agsx_proto { AGSX_PROTO_TCP, AGSX_PROTO_UDP };

/* ---- -p specs ----
 * [IP:]HOSTPORT:PORT[/tcp|udp], PORT[/PROTO] (a free host port), IP::PORT;
 * IPv6 addresses in brackets ([::1]:8080:80). The host IP defaults to
 * 127.0.0.1; HOSTPORT 0 (or none) picks a free port. */
#define AGSX_PORTSPEC_MAX 128 /* longest spec accepted */
#define AGSX_MAX_PORTS 64     /* -p options per sandbox */

struct agsx_port {
  struct sockaddr_storage host; /* IP and port (0 until bound, when asked for) */
  uint16_t port;                /* in the sandbox */
  enum agsx_proto proto;
};

int agsx_port_parse(const char *spec, struct agsx_port *ret, agsx_error_t *err);
/* Refuses a list that publishes the same host address and port twice. */
int agsx_ports_check(const struct agsx_port *v, size_t n, agsx_error_t *err);
const char *agsx_proto_name(enum agsx_proto p);
int agsx_proto_parse(const char *s, enum agsx_proto *ret);
uint16_t agsx_sockaddr_port(const struct sockaddr_storage *ss);
/* "127.0.0.1:8080", "[::1]:8080" (BUF of at least 64 bytes). */
char *agsx_sockaddr_format(const struct sockaddr_storage *ss, char *buf, size_t len);
/* The host IP alone (no brackets), for records. */
char *agsx_sockaddr_ip(const struct sockaddr_storage *ss, char *buf, size_t len);
/* Parses an IPv4 or IPv6 literal (no brackets) with PORT into RET. */
int agsx_sockaddr_from_ip(const char *ip, uint16_t port, struct sockaddr_storage *ret);

/* ---- the relay ---- */
struct agsx_relay;

struct agsx_relay *agsx_relay_new(agsx_error_t *err);
/* Closes every socket and namespace fd. NULL is fine. */
void agsx_relay_free(struct agsx_relay *r);

/* Adds a listener: binds PROTO at LADDR in namespace LISTEN_NS (-1: the
 * current one) now, so a port in use fails here; connects each client to
 * TADDR from namespace CONNECT_NS (-1: current, AGSX_RELAY_NS_LATER: the
 * one agsx_relay_set_connect_ns gives later). The namespace fds are
 * duplicated. *RET_BOUND (optional) gets the bound address (the port the
 * kernel picked for port 0). EADDRINUSE: "port IP:PORT is already in use". */
int agsx_relay_listen(struct agsx_relay *r, enum agsx_proto proto, int listen_ns,
                      const struct sockaddr_storage *laddr, int connect_ns,
                      const struct sockaddr_storage *taddr, struct sockaddr_storage *ret_bound,
                      agsx_error_t *err);
/* Changes the caps (0 keeps one): concurrent TCP connections, UDP flows,
 * a UDP flow's idle time (a DNS relay wants a short one). */
void agsx_relay_set_limits(struct agsx_relay *r, size_t max_conns, size_t max_flows,
                           int udp_idle_ms);
/* TCP timeouts, in ms (0: none): a connection with no byte moved for
 * IDLE_MS (none by default: published ports carry long quiet sessions), a
 * half-closed one (one direction ended) for HALF_CLOSED_MS. Either is reset. */
void agsx_relay_set_tcp_timeouts(struct agsx_relay *r, int idle_ms, int half_closed_ms);

/* ---- file descriptors ----
 * agsx_relay_fd_headroom(): how many more fds this process may open (the
 * soft RLIMIT_NOFILE less the open ones) less RESERVE, 0 if none.
 * agsx_relay_fd_need(): the fds R would hold at its caps.
 * agsx_relay_set_fd_budget(): the most R may hold from now on (it closes
 * nothing it holds). agsx_relay_fd_limit_raise(): raises the soft limit
 * towards the hard one, to at least open + WANT; returns the new soft
 * limit (the old one when it cannot). */
size_t agsx_relay_fd_headroom(size_t reserve);
size_t agsx_relay_fd_need(const struct agsx_relay *r);
void agsx_relay_set_fd_budget(struct agsx_relay *r, size_t fds);
size_t agsx_relay_fd_limit_raise(size_t want);

/* Makes R a filtering DNS relay (net/dnsfilter.h), which then owns F:
 * every UDP datagram and every TCP message (2-byte length framing) is a
 * DNS message handed to F each way; a TCP query F refuses, or an answer it
 * drops, resets the connection. F's fds join R's poll component. */
struct agsx_dns_filter;
void agsx_relay_set_filter(struct agsx_relay *r, struct agsx_dns_filter *f);
struct agsx_dns_filter *agsx_relay_filter(const struct agsx_relay *r);

/* A socket (non-blocking, close-on-exec) of network namespace NS (an fd
 * of it, or a pidfd of a process in it), made there: only socket() runs in
 * NS, and this thread returns to HOME (its own) at once. -1 with errno;
 * EIO with *LOST set when it could not return, and then the caller must
 * make no more sockets (each would be NS's). */
int agsx_netns_socket(int ns, int home, int family, int type, bool *lost);

/* Gives every AGSX_RELAY_NS_LATER listener its connect namespace. */
int agsx_relay_set_connect_ns(struct agsx_relay *r, int ns, agsx_error_t *err);

/* Poll integration: agsx_relay_nfds() is an upper bound of the pollfds
 * agsx_relay_fill() writes; agsx_relay_dispatch() gets the same array back
 * after poll(); agsx_relay_timeout_ms() is the poll timeout the relay
 * needs (UDP flow expiry, TCP timeouts, the end of a back-off), -1 for
 * none. The relay never blocks. */
size_t agsx_relay_nfds(const struct agsx_relay *r);
size_t agsx_relay_fill(struct agsx_relay *r, struct pollfd *p);
void agsx_relay_dispatch(struct agsx_relay *r, const struct pollfd *p, size_t n);
int agsx_relay_timeout_ms(const struct agsx_relay *r);

/* Counters, for tests and debugging. */
struct agsx_relay_stats {
  size_t conns, flows;
  size_t fds, fd_budget; /* held by connections and flows; the most allowed */
  uint64_t accepted, refused, dropped;
  uint64_t over_budget; /* connections reset, flows refused: the fd budget */
  uint64_t backoffs;    /* accept()/socket() out of fds or memory */
  uint64_t timed_out;   /* connections reset by a timeout */
  bool backing_off;     /* the TCP listeners are not polled now */
};
void agsx_relay_stats(const struct agsx_relay *r, struct agsx_relay_stats *ret);

#endif
