/* agsx — api: `agsx serve`, the E2B-compatible HTTP API.
 *
 * One HTTP/1.1 listener (libmicrohttpd, in its external-epoll mode, driven
 * by this module's one loop on one thread) serves the control plane (E2B's
 * REST API: requests without an E2b-Sandbox-Id header) and every sandbox's
 * envd (told apart by E2b-Sandbox-Id and E2b-Sandbox-Port). The server
 * keeps no state of its own: sandboxes are ordinary agsx sandboxes whose
 * records (with E2B's metadata as labels) are in the state directory, their
 * processes belong to their supervisors (sandbox/processes.h) and the envd
 * tokens are derived from the API key (auth.h). Kill it, restart it: the
 * clients find everything again. See src/api/README.md. */
#ifndef AGSX_API_SERVER_H
#define AGSX_API_SERVER_H

#include "util/util.h"

#define AGSX_API_DEFAULT_LISTEN "127.0.0.1:3000"
#define AGSX_API_BODY_MAX (1u << 20) /* JSON and Connect request bodies */
/* Port 49999's POST /execute: a cell of code, buffered whole before it runs
 * (`agsx code` takes AGSX_CODE_CODE_MAX from stdin). */
#define AGSX_API_CODE_BODY_MAX (16u << 20)
/* Frames a stream holds for a slow client before it stops reading its
 * source (whose own bound then applies: a process log drops its oldest):
 * AGSX_API_STREAM_QUEUE each, AGSX_API_STREAM_QUEUE_LOW once all streams
 * together hold AGSX_API_QUEUE_TOTAL. The log never waits for a reader, so
 * this is what lets a slow client (the JS SDK decodes some 10 MB/s) take a
 * burst of output whole. */
#define AGSX_API_STREAM_QUEUE (128u << 20)
#define AGSX_API_STREAM_QUEUE_LOW (4u << 20)
#define AGSX_API_QUEUE_TOTAL (512u << 20)
/* Connections (conns.c): all together, and of one client (address). Past
 * either, the oldest connection waiting for a request's headers is closed
 * to make room (the newcomer when none waits). */
#define AGSX_API_MAX_CONNECTIONS 1024
#define AGSX_API_PER_CLIENT 256
/* A connection waiting for a request's headers (a new one, or a kept-alive
 * one between requests) is closed after this, however it trickles them. */
#define AGSX_API_HEADER_SEC 10
/* A connection in a request that stays idle (a body that stopped coming)
 * is closed after this (libmicrohttpd's timeout, restarted by each byte). */
#define AGSX_API_IDLE_SEC 30
#define AGSX_API_TIMEOUT_MAX 86400 /* seconds, a sandbox's lifetime (DESIGN.md: 24 h) */
#define AGSX_API_TIMEOUT_DEFAULT 300
/* The newest envd whose features are served (e2b-protocol.md §3.6): the
 * SDKs refuse, client-side, what they gate on a later one. */
#define AGSX_ENVD_VERSION "0.6.4"

struct agsx_api_config {
  const char *root, *state; /* the image store and the state directory */
  const char *listen;       /* ADDR:PORT (IPv4 or [IPv6]); NULL: AGSX_API_DEFAULT_LISTEN */
  bool listen_public;       /* a non-loopback ADDR is refused without it */
  /* ADDR:PORT of the listener of sandboxes' own ports by host name
   * (PORT-ID.DOMAIN, forward.c; the same rule for a non-loopback ADDR);
   * NULL: none. */
  const char *ports_listen;
  /* TLS on it (tls.h): ports_tls with agsx's CA under ROOT/tls, or the
   * user's certificate chain and key (PEM files; both or neither; either
   * implies ports_tls). */
  bool ports_tls;
  const char *ports_cert, *ports_key;
  /* Host names (or addresses) requests may name in Host and Origin besides
   * the address they reached and localhost; one label below a name is
   * also its (E2B's api.NAME, PORT-ID.NAME). NULL: none. */
  char **hosts;
  const char *api_key;      /* NULL: read (or generate) API_KEY_FILE */
  const char *api_key_file; /* NULL: AGSX_API_KEY_FILE */
  /* The network of sandboxes whose creator allows internet access:
   * "internal" (NULL), "public" or "vpc:NAME"; allow_internet_access:false
   * always gets internal. */
  const char *network;
  /* Templates: NAME=IMAGE (later ones win); the aliases `base` and
   * `code-interpreter-v1` default to the `host` image (the latter to
   * the store's `code-interpreter` image when it has one); any other
   * templateID names an image of the store. */
  char **templates;
  /* Templates (NAME) whose sandboxes run without no_new_privs (serve
   * --template NAME=IMAGE,no-new-privileges=false), or NULL. */
  char **new_privs;
  /* TEMPLATE=POOL: Sandbox.create() of TEMPLATE claims a parked sandbox of
   * warm pool POOL (sandbox/pool.h) when the pool's network is the one
   * the sandbox gets and it asks for no egress rules; else, or when the
   * pool is empty, it starts one as without. */
  char **pools;
  const char *default_user; /* NULL: "user" when the image has one, else root */
  /* Called once the listeners are up, with their addresses (the front end
   * says so; PORTS_DOMAIN, NAME:PORT of the ports listener as the
   * sandboxes' `domain` gives it, NULL without --ports-listen; PORTS_CA the path
   * of agsx's CA's certificate when the ports listener's TLS uses it). */
  void (*ready)(void *data, const char *addr, const char *ports_domain, const char *ports_ca,
                const char *key_note);
  void *ready_data;
};

/* Serves until SIGINT or SIGTERM (taken through a signalfd: the caller's
 * thread must have them blocked or default). Returns 0 after a clean stop. */
int agsx_api_serve(const struct agsx_api_config *cfg, agsx_error_t *err);

/* Whether the address part of LISTEN (ADDR:PORT) is a loopback address;
 * EINVAL when LISTEN does not parse. */
int agsx_api_listen_parse(const char *listen, void *ret_sockaddr, unsigned *ret_len,
                          bool *ret_loopback, agsx_error_t *err);
/* A listening TCP socket (non-blocking, CLOEXEC) on ADDR (ADDR:PORT); EPERM
 * for a non-loopback address unless LISTEN_PUBLIC (the error names
 * CREDENTIAL, what guards the server). */
int agsx_api_listen_socket(const char *addr, bool listen_public, const char *credential,
                           agsx_error_t *err);

#endif
