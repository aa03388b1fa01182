/* agsx browser: headless Chromium in a detached sandbox, its DevTools
 * endpoint published on a host port. The sandbox is started through the
 * lifecycle library, detached, as `run -d` starts one (agsx_lifecycle_*), so
 * it is an ordinary sandbox for ls, exec, kill, update and gc; this command
 * only fills the spec and waits until the endpoint answers.
 *
 * Chromium's own sandbox cannot work inside ours (it needs new user or pid
 * namespaces, which our seccomp filter denies, or a setuid helper, which
 * no_new_privs disables), so Chromium runs with --no-sandbox and agsx's
 * isolation replaces it: see man agsx-browser(1). */
#include "config.h"

#include "sandbox/cdp.h"
#include "cmd.h"
#include "util/json.h"
#include "net/netspec.h"
#include "net/relay.h"
#include "sandbox/lifecycle.h"
#include "sandbox/proc.h"
#include "state/state.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>

#define CDP_PORT 9222 /* inside the sandbox, on its loopback only */
#define CDP_PORT_STR "9222"
#define READY_WAIT_SEC 30           /* start-up bound (or the lifetime, if shorter) */
#define PROBE_IO_MS 2000            /* one probe's connect/read bound */
#define DEFAULT_MEMORY (2ull << 30) /* 2g */
#define DEFAULT_USER "1000:1000"
#define MAX_EXTRA_FLAGS 64

struct bopts {
  const char *name, *network, *timeout, *memory, *image, *user;
  char *publish; /* run's -p spec: [IP:]HOSTPORT:9222 */
  bool json;
  uint64_t timeout_sec, memory_bytes;
};

/* -p [IP:]HOSTPORT becomes run's -p [IP:]HOSTPORT:9222 (HOSTPORT 0: a free
 * port), checked here so that errors name this command's syntax. */
static int set_publish(struct bopts *o, const char *v) {
  agsx_error_t err = NULL;
  struct agsx_port p;
  if (strchr(v, '/') || strlen(v) > AGSX_PORTSPEC_MAX - 8)
    return agsx_failf("browser: invalid -p `%s` (want [IP:]HOSTPORT)", v), -1;
  _cleanup_free_ char *spec = xasprintf("%s:%d", v, CDP_PORT);
  if (agsx_port_parse(spec, &p, &err) < 0) {
    agsx_failf("browser: invalid -p `%s` (want [IP:]HOSTPORT): %s", v, err->msg);
    agsx_error_free(&err);
    return -1;
  }
  if (p.port != CDP_PORT)
    return agsx_failf("browser: invalid -p `%s` (want [IP:]HOSTPORT)", v), -1;
  free(o->publish);
  o->publish = steal_ptr(&spec);
  return 0;
}

static int on_bopt(void *data, int id, const char *v) {
  struct bopts *o = data;
  agsx_error_t err = NULL;
  uint64_t n;
  switch (id) {
  case O_NAME:
    if (!agsx_name_is_valid(v))
      return agsx_failf("browser: invalid name `%s`: letters, digits and _.- (at most 64, "
                        "starting with a letter or digit)",
                        v),
             -1;
    o->name = v;
    return 0;
  case O_NETWORK: {
    enum agsx_net_mode mode;
    const char *name;
    /* (worded as when this command re-parsed a run command line) */
    if (agsx_net_mode_parse(v, &mode, &name, &err) < 0)
      return agsx_failf("run: %s", err->msg), agsx_error_free(&err), -1;
    o->network = v;
    return 0;
  }
  case O_TIMEOUT:
    if (agsx_parse_duration(v, &o->timeout_sec, &err) < 0)
      return agsx_failf("browser: --timeout: %s", err->msg), agsx_error_free(&err), -1;
    o->timeout = v;
    return 0;
  case O_MEMORY:
    if (agsx_parse_size(v, &n, &err) < 0)
      return agsx_failf("browser: --memory: %s", err->msg), agsx_error_free(&err), -1;
    if (n < (64u << 20))
      return agsx_failf("browser: --memory `%s`: Chromium needs at least 64m", v), -1;
    o->memory = v;
    o->memory_bytes = n;
    return 0;
  case O_IMAGE: o->image = v; return 0;
  case O_USER: o->user = v; return 0;
  case O_JSON: o->json = true; return 0;
  case O_PUBLISH: return set_publish(o, v);
  }
  return 0;
}

/* ---- the sandbox: Chromium's command line and the spec ----------------------------------- */

struct argvb {
  char *v[128 + MAX_EXTRA_FLAGS];
  bool owned[128 + MAX_EXTRA_FLAGS];
  int n;
};

static void add(struct argvb *b, const char *s) { b->v[b->n++] = (char *)s; }

static void addf(struct argvb *b, char *s) {
  b->owned[b->n] = true;
  b->v[b->n++] = s;
}

static void argvb_clear(struct argvb *b) {
  for (int i = 0; i < b->n; i++)
    if (b->owned[i])
      free(b->v[i]);
}

static void build_command(char **extra, int n_extra, struct argvb *b) {
  add(b, "chromium");
  static const char *const flags[] = {
      "--headless=new",
      /* Chromium's sandbox needs namespaces our seccomp denies; ours
       * replaces it (see the header comment). */
      "--no-sandbox",
      "--disable-gpu",
      /* /dev/shm is small in a sandbox; shared memory goes to /tmp. */
      "--disable-dev-shm-usage",
      "--no-first-run",
      "--no-default-browser-check",
      "--disable-background-networking",
      "--user-data-dir=/tmp/chromium-profile",
      "--remote-debugging-address=127.0.0.1",
  };
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(flags); i++)
    add(b, flags[i]);
  addf(b, xasprintf("--remote-debugging-port=%d", CDP_PORT));
  for (int i = 0; i < n_extra; i++)
    add(b, extra[i]);
  add(b, "about:blank");
  b->v[b->n] = NULL;
}

static int pull_image(void *data, const char *image, agsx_error_t *err) {
  return agsx_cmd_pull_quietly(data, image, err);
}

/* Starts the sandbox detached: its id and supervisor go to ST. Returns 0,
 * or 125 after printing the error. */
static int start_sandbox(struct agsx_ctx *ctx, const struct bopts *o, char **extra, int n_extra,
                         struct agsx_run_started *st) {
  agsx_error_t err = NULL;
  struct argvb b = {0};
  build_command(extra, n_extra, &b);
  /* Default: a free port of 127.0.0.1, picked when the relay binds. */
  struct agsx_port port;
  char *env[] = {(char *)"HOME=/tmp", NULL}; /* HOME and the profile in its writable /tmp */
  struct agsx_run_spec spec = {
      .root = ctx->root,
      .state = ctx->state,
      .image = o->image ? o->image : "host",
      .cmd = b.v,
      .pull_image = pull_image,
      .pull_data = ctx,
      .env = env,
      .user = o->user ? o->user : DEFAULT_USER,
      .workdir = "/tmp",
      .name = o->name,
      .network = o->network,
      .ports = &port,
      .n_ports = 1,
      .timeout = o->timeout ? o->timeout_sec : AGSX_DEFAULT_TIMEOUT_SEC,
      .memory = o->memory ? o->memory_bytes : DEFAULT_MEMORY,
  };
  struct agsx_lifecycle *lc = NULL;
  int r = agsx_port_parse(o->publish ? o->publish : "127.0.0.1:0:" CDP_PORT_STR, &port, &err);
  if (r == 0)
    r = agsx_lifecycle_create(&spec, &lc, &err);
  if (r == 0)
    r = agsx_lifecycle_detach(lc, st, &err);
  agsx_lifecycle_free(lc);
  argvb_clear(&b);
  return r < 0 ? agsx_fail(&err) : 0;
}

/* ---- waiting for the endpoint ------------------------------------------------------------- */

static volatile sig_atomic_t interrupted;
static void on_interrupt(int sig) { interrupted = sig; }

/* A TCP socket connected to A (the published port, on the host). */
static int dial(const struct sockaddr_storage *a, agsx_error_t *err) {
  _cleanup_close_ int s = socket(a->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  socklen_t alen =
      a->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
  if (s < 0)
    return agsx_error_set(err, errno, "socket");
  if (connect(s, (const struct sockaddr *)a, alen) < 0 && errno != EINPROGRESS)
    return agsx_error_set(err, errno, "connect");
  struct pollfd p = {.fd = s, .events = POLLOUT};
  int so = 0;
  socklen_t len = sizeof(so);
  if (poll(&p, 1, PROBE_IO_MS) <= 0)
    return agsx_error_set(err, ETIMEDOUT, "connect");
  if (getsockopt(s, SOL_SOCKET, SO_ERROR, &so, &len) < 0 || so != 0)
    return agsx_error_set(err, so ? so : errno, "connect");
  return steal_fd(&s);
}

/* One GET /json/version; 0 and RET filled when the endpoint answers. The
 * relay accepts at once, so "not yet" is a reset or an early EOF. */
static int probe(const struct sockaddr_storage *a, const char *hostport,
                 struct agsx_cdp_version *ret, agsx_error_t *err) {
  _cleanup_close_ int s = dial(a, err);
  if (s < 0)
    return -1;
  _cleanup_free_ char *req = xasprintf("GET /json/version HTTP/1.1\r\nHost: %s\r\n"
                                       "Connection: close\r\n\r\n",
                                       hostport);
  if (send(s, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req))
    return agsx_error_set(err, errno, "send");
  _cleanup_free_ char *buf = xzalloc(AGSX_CDP_RESPONSE_MAX + 1);
  size_t len = 0;
  int64_t until = agsx_mono_ns() + PROBE_IO_MS * 1000000LL;
  for (;;) {
    int ms = (int)((until - agsx_mono_ns()) / 1000000);
    struct pollfd p = {.fd = s, .events = POLLIN};
    if (ms <= 0 || poll(&p, 1, ms) <= 0)
      return agsx_error_set(err, ETIMEDOUT, "read the DevTools answer");
    ssize_t n = recv(s, buf + len, AGSX_CDP_RESPONSE_MAX + 1 - len, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (n < 0)
      return agsx_error_set(err, errno, "read the DevTools answer");
    len += (size_t)n;
    int r = agsx_cdp_parse_version(buf, len, n == 0, ret, err);
    if (r != 0)
      return r < 0 ? -1 : 0;
  }
}

/* The published host address, as bound (the port the kernel picked), from
 * the sandbox's record; an unspecified address is reached on loopback. */
static int published_addr(struct agsx_ctx *ctx, const char *id, struct sockaddr_storage *ret,
                          agsx_error_t *err) {
  _cleanup_close_ int statefd = agsx_state_open(ctx->state, false, err);
  struct agsx_record r;
  if (statefd < 0 || agsx_record_read(statefd, id, &r, err) < 0)
    return -1;
  int rc = 0;
  if (r.n_ports != 1 || agsx_sockaddr_port(&r.ports[0].host) == 0)
    rc = agsx_error_set(err, 0, "the sandbox's record has no published DevTools port");
  else
    *ret = r.ports[0].host;
  agsx_record_clear(&r);
  if (rc < 0)
    return -1;
  if (ret->ss_family == AF_INET) {
    struct sockaddr_in *in = (struct sockaddr_in *)ret;
    if (in->sin_addr.s_addr == htonl(INADDR_ANY))
      in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  } else if (ret->ss_family == AF_INET6) {
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ret;
    if (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr))
      in6->sin6_addr = in6addr_loopback;
  }
  return 0;
}

/* Waits until the endpoint answers through the published port. If the
 * supervisor ends (it is not our child: proven by its start time), so did
 * the sandbox. */
static int wait_ready(const struct bopts *o, struct agsx_run_started *st,
                      const struct sockaddr_storage *a, const char *hostport,
                      struct agsx_cdp_version *ret, agsx_error_t *err) {
  uint64_t bound =
      o->timeout_sec && o->timeout_sec < READY_WAIT_SEC ? o->timeout_sec : READY_WAIT_SEC;
  int64_t until = agsx_mono_ns() + (int64_t)bound * 1000000000LL;
  _cleanup_error_ agsx_error_t last = NULL;
  while (!interrupted) {
    if (agsx_proc_ref_signal(&st->supervisor_ref, 0, 0) == -ESRCH) {
      st->supervisor = 0;
      return agsx_error_set(err, 0,
                            "the browser exited during start-up (try `agsx run` with "
                            "the same image and `chromium --headless=new`)");
    }
    agsx_error_free(&last);
    if (probe(a, hostport, ret, &last) == 0)
      return 0;
    if (agsx_mono_ns() > until)
      return agsx_error_set(err, 0, "the DevTools endpoint did not answer within %llus: %s",
                            (unsigned long long)bound, last ? last->msg : "no answer");
    usleep(50000);
  }
  return agsx_error_set(err, EINTR, "interrupted while waiting for the browser");
}

/* Stops a browser that did not come up and removes every trace of it. */
static void discard(struct agsx_ctx *ctx, const struct agsx_run_started *st) {
  int fd = st->supervisor > 0 ? agsx_proc_ref_pidfd(&st->supervisor_ref) : -1;
  if (fd >= 0) {
    /* It stops the sandbox: TERM, grace, KILL, teardown. */
    agsx_pidfd_signal(fd, SIGTERM, 0);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (poll(&p, 1, 15000) < 0 && errno == EINTR) {
    }
    close(fd);
  }
  agsx_error_t err = NULL;
  _cleanup_close_ int statefd = agsx_state_open(ctx->state, false, &err);
  struct agsx_record r;
  if (statefd >= 0 && agsx_record_read(statefd, st->id, &r, &err) == 0) {
    if (agsx_record_remove(statefd, &r, &err) < 0)
      agsx_warn("%s", err->msg);
    agsx_record_clear(&r);
  }
  agsx_error_free(&err);
}

static void print_started(const struct bopts *o, const struct agsx_run_started *st,
                          const struct agsx_cdp_version *v, const struct sockaddr_storage *a,
                          const char *hostport) {
  char ip[64];
  agsx_sockaddr_ip(a, ip, sizeof(ip));
  _cleanup_free_ char *ws = xasprintf("ws://%s%s", hostport, v->ws_path);
  _cleanup_free_ char *http = xasprintf("http://%s", hostport);
  if (!o->json) {
    printf("%s\n", ws);
    return;
  }
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "id", st->id);
  agsx_json_kv_str(g, "name", o->name);
  agsx_json_kv_str(g, "ws_url", ws);
  agsx_json_kv_str(g, "http_url", http);
  agsx_json_kv_str(g, "host", ip);
  agsx_json_kv_int(g, "port", agsx_sockaddr_port(a));
  agsx_json_kv_str(g, "browser", v->browser);
  agsx_json_kv_str(g, "image", o->image ? o->image : "host");
  agsx_json_kv_str(g, "network", o->network ? o->network : "internal");
  yajl_gen_map_close(g);
  size_t len;
  _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
  printf("%s\n", s);
}

/* After the start: the published address, the wait, the output. */
static int await_browser(struct agsx_ctx *ctx, const struct bopts *o, struct agsx_run_started *st) {
  agsx_error_t err = NULL;
  struct agsx_cdp_version v = {0};
  struct sockaddr_storage a;
  char hostport[80];
  if (published_addr(ctx, st->id, &a, &err) < 0 ||
      (agsx_sockaddr_format(&a, hostport, sizeof(hostport)),
       wait_ready(o, st, &a, hostport, &v, &err) < 0)) {
    discard(ctx, st);
    agsx_cdp_version_clear(&v);
    agsx_failf("browser: %s", err->msg);
    agsx_error_free(&err);
    return AGSX_EXIT_FAILURE;
  }
  print_started(o, st, &v, &a, hostport);
  agsx_cdp_version_clear(&v);
  return 0;
}

int agsx_cmd_browser(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  struct bopts o = {.json = ctx->json};
  int i = agsx_parse_options(cmd, argc, argv, on_bopt, &o);
  int code = AGSX_EXIT_FAILURE;
  if (i < 0)
    goto out;
  /* Operands are Chromium flags, after `--`. */
  if (i < argc && strcmp(argv[i - 1], "--") != 0) {
    agsx_failf("browser: unexpected argument `%s` (Chromium flags go after `--`)", argv[i]);
    goto out;
  }
  if (argc - i > MAX_EXTRA_FLAGS) {
    agsx_failf("browser: at most %d Chromium flags", MAX_EXTRA_FLAGS);
    goto out;
  }
  /* ^C while waiting still cleans up (the supervisor has its own session). */
  struct sigaction sa = {.sa_handler = on_interrupt};
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  struct agsx_run_started st = {0};
  code = start_sandbox(ctx, &o, argv + i, argc - i, &st);
  if (code == 0)
    code = await_browser(ctx, &o, &st);
out:
  free(o.publish);
  return code;
}
