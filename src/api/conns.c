/* agsx — api: the server's connections, bounded (see api-internal.h).
 *
 * libmicrohttpd's own bounds do not keep a well-behaved client in: its
 * connection limit refuses the newcomer once idle or trickling clients hold
 * every slot, and its timeout is an idle one that each trickled byte
 * restarts. So the server keeps its own account of every connection (from
 * MHD's start and close notifications) and of the state that matters:
 * waiting for a request's headers (a new connection, or a kept-alive one
 * between requests) or in a request (from its headers to its completion:
 * streams and suspended requests included).
 *
 *   - A waiting connection gets AGSX_API_HEADER_SEC for the next request's
 *     headers, however it trickles them; then it is closed.
 *   - A client (an address) holds at most AGSX_API_PER_CLIENT connections,
 *     and all together at most AGSX_API_MAX_CONNECTIONS. A connection past
 *     either bound makes room by closing the oldest waiting connection (of
 *     that client, or of all); when every one is in a request, the
 *     newcomer is closed instead.
 *
 * Requests are admitted (admit.c) as soon as their headers are in, so a
 * client without credentials never holds a connection in a request: it
 * waits, and waiting connections are the ones that give way. A connection
 * is closed from here by shutdown(2) of its socket, which MHD then sees as
 * the client's end. */
#include "config.h"

#include "api/api-internal.h"

#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#define CLIENT_BUCKETS 256
#define STR_(x) #x
#define STR(x) STR_(x)

struct conn {
  struct conn *prev, *next; /* in the waiting list, oldest first */
  struct MHD_Connection *c;
  int fd;
  struct client *cl;
  int64_t wait_ns; /* waiting for headers since (CLOCK_MONOTONIC); 0: in a request */
  bool shut;       /* closed from here: no longer counted */
};

struct client {
  struct client *next;
  unsigned char addr[16];
  unsigned n;    /* its counted connections */
  unsigned refs; /* its connections until MHD closes them, counted or shut from here */
};

struct agsx_api_conns {
  struct conn *head, *tail; /* waiting */
  size_t n;                 /* counted connections */
  int64_t sweep_ns;         /* the next look for waiting connections whose client has gone */
  struct client *bucket[CLIENT_BUCKETS];
};

struct agsx_api_conns *agsx_api_conns_new(void) {
  return xzalloc(sizeof(struct agsx_api_conns));
}

void agsx_api_conns_free(struct agsx_api_conns *a) {
  if (a == NULL)
    return;
  for (size_t i = 0; i < CLIENT_BUCKETS; i++)
    while (a->bucket[i]) {
      struct client *c = a->bucket[i];
      a->bucket[i] = c->next;
      free(c);
    }
  free(a);
}

/* The client's address: IPv4 as IPv4-mapped IPv6, so one client is one key. */
static void client_key(struct MHD_Connection *c, unsigned char key[16]) {
  memset(key, 0, 16);
  const union MHD_ConnectionInfo *ci =
      agsx_mhd.get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  const struct sockaddr *sa = ci ? ci->client_addr : NULL;
  if (sa && sa->sa_family == AF_INET6) {
    memcpy(key, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
  } else if (sa && sa->sa_family == AF_INET) {
    key[10] = key[11] = 0xff;
    memcpy(key + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
  }
}

static struct client *client_get(struct agsx_api_conns *a, const unsigned char key[16]) {
  uint32_t h = 2166136261u;
  for (int i = 0; i < 16; i++)
    h = (h ^ key[i]) * 16777619u;
  struct client **b = &a->bucket[h % CLIENT_BUCKETS];
  for (struct client *c = *b; c; c = c->next)
    if (memcmp(c->addr, key, 16) == 0)
      return c;
  struct client *c = xzalloc(sizeof(*c));
  memcpy(c->addr, key, 16);
  c->next = *b;
  *b = c;
  return c;
}

/* Drops a reference of CL; the last one frees it. (Not its count: a
 * connection shut from here stops counting at once but still points at
 * its client until MHD's close notification.) */
static void client_drop(struct agsx_api_conns *a, struct client *cl) {
  if (--cl->refs > 0)
    return;
  uint32_t h = 2166136261u;
  for (int i = 0; i < 16; i++)
    h = (h ^ cl->addr[i]) * 16777619u;
  for (struct client **p = &a->bucket[h % CLIENT_BUCKETS]; *p; p = &(*p)->next)
    if (*p == cl) {
      *p = cl->next;
      free(cl);
      return;
    }
}

static void unwait(struct agsx_api_conns *a, struct conn *k) {
  if (k->wait_ns == 0)
    return;
  if (k->prev)
    k->prev->next = k->next;
  else
    a->head = k->next;
  if (k->next)
    k->next->prev = k->prev;
  else
    a->tail = k->prev;
  k->prev = k->next = NULL;
  k->wait_ns = 0;
}

static void wait_headers(struct agsx_api_conns *a, struct conn *k) {
  if (k->shut || k->wait_ns)
    return;
  k->wait_ns = agsx_mono_ns();
  k->prev = a->tail;
  if (a->tail)
    a->tail->next = k;
  else
    a->head = k;
  a->tail = k;
}

/* Closes K from here: it stops counting at once, MHD closes it at its
 * next turn (and notifies). */
static void shut(struct agsx_api_conns *a, struct conn *k, const char *why) {
  if (k->shut)
    return;
  unwait(a, k);
  k->shut = true;
  k->cl->n--;
  a->n--;
  agsx_debug("serve: closing a connection: %s", why);
  if (k->fd >= 0)
    shutdown(k->fd, SHUT_RDWR);
}

/* The oldest waiting connection of CL (NULL: of any client), or NULL. */
static struct conn *oldest_waiting(struct agsx_api_conns *a, const struct client *cl) {
  for (struct conn *k = a->head; k; k = k->next)
    if (cl == NULL || k->cl == cl)
      return k;
  return NULL;
}

/* Room for the newcomer K past a bound: the oldest waiting connection of
 * its client (or of all) goes, else K. */
static void make_room(struct agsx_api_conns *a, struct conn *k, bool per_client) {
  struct conn *v = oldest_waiting(a, per_client ? k->cl : NULL);
  if (v && v != k)
    return shut(a, v,
                per_client ? "its client is at " STR(AGSX_API_PER_CLIENT) " connections"
                           : "the server is at " STR(AGSX_API_MAX_CONNECTIONS) " connections");
  shut(a, k, "every connection of its client, or of the server, is in a request");
}

void agsx_api_conn_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
  struct server *s = cls;
  struct agsx_api_conns *a = s->conns;
  if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
    struct conn *k = *socket_context;
    if (k == NULL)
      return;
    unwait(a, k);
    if (!k->shut) {
      k->cl->n--;
      a->n--;
    }
    client_drop(a, k->cl);
    free(k);
    *socket_context = NULL;
    return;
  }
  struct conn *k = xzalloc(sizeof(*k));
  k->c = c;
  const union MHD_ConnectionInfo *ci =
      agsx_mhd.get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  k->fd = ci ? ci->connect_fd : -1;
  unsigned char key[16];
  client_key(c, key);
  k->cl = client_get(a, key);
  k->cl->refs++;
  k->cl->n++;
  a->n++;
  *socket_context = k;
  wait_headers(a, k);
  if (k->cl->n > AGSX_API_PER_CLIENT)
    make_room(a, k, true);
  if (!k->shut && a->n > AGSX_API_MAX_CONNECTIONS)
    make_room(a, k, false);
}

static struct conn *conn_of(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci =
      agsx_mhd.get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return ci ? ci->socket_context : NULL;
}

void agsx_api_conn_request(struct server *s, struct MHD_Connection *c) {
  struct conn *k = conn_of(c);
  if (k)
    unwait(s->conns, k);
}

void agsx_api_conn_idle(struct server *s, struct MHD_Connection *c) {
  struct conn *k = conn_of(c);
  if (k)
    wait_headers(s->conns, k);
}

/* Gone: the client's end is closed and nothing it sent is left unread
 * (what is left, MHD reads first, and a request it completes stands). */
static bool nothing_unread(int fd) {
  int n = 0;
  return ioctl(fd, FIONREAD, &n) == 0 && n == 0;
}

static bool fd_peer_gone(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLRDHUP};
  return fd >= 0 && poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) &&
         nothing_unread(fd);
}

bool agsx_api_conn_peer_gone(struct MHD_Connection *c) {
  struct conn *k = conn_of(c);
  return k && !k->shut && fd_peer_gone(k->fd);
}

/* Closes the waiting connections whose client has closed its end: one
 * poll(2) of them all. */
static void sweep(struct agsx_api_conns *a) {
  size_t n = 0;
  for (struct conn *k = a->head; k; k = k->next)
    n++;
  if (n == 0)
    return;
  _cleanup_free_ struct pollfd *p = xzalloc(n * sizeof(*p));
  _cleanup_free_ struct conn **of = xzalloc(n * sizeof(*of));
  size_t i = 0;
  for (struct conn *k = a->head; k; k = k->next, i++) {
    p[i] = (struct pollfd){.fd = k->fd, .events = POLLRDHUP};
    of[i] = k;
  }
  if (poll(p, n, 0) <= 0)
    return;
  for (i = 0; i < n; i++)
    if ((p[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) && nothing_unread(p[i].fd))
      shut(a, of[i], "its client has gone");
}

void agsx_api_conns_tick(struct server *s) {
  struct agsx_api_conns *a = s->conns;
  int64_t now = agsx_mono_ns(), limit = AGSX_API_HEADER_SEC * 1000000000LL;
  while (a->head && now - a->head->wait_ns >= limit)
    shut(a, a->head, "no request headers in " STR(AGSX_API_HEADER_SEC) " s");
  if (a->head && now >= a->sweep_ns) {
    sweep(a);
    a->sweep_ns = now + AGSX_API_SWEEP_MS * 1000000LL;
  }
}

int agsx_api_conns_timeout_ms(struct server *s) {
  struct agsx_api_conns *a = s->conns;
  if (a->head == NULL)
    return -1;
  int64_t now = agsx_mono_ns();
  int64_t left = a->head->wait_ns + AGSX_API_HEADER_SEC * 1000000000LL - now;
  if (a->sweep_ns - now < left)
    left = a->sweep_ns - now;
  return left <= 0 ? 0 : (int)((left + 999999) / 1000000);
}

size_t agsx_api_conns_count(struct server *s) { return s->conns->n; }
