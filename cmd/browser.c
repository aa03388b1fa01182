/* agsx browser: headless Chromium in a detached sandbox, its DevTools
 * endpoint published on a host port. The sandbox is started by run's own
 * detached machinery (agsx_run_detached), so it is an ordinary sandbox for
 * ls, exec, kill, update and gc; this command only chooses the command line
 * and waits until the endpoint answers.
 *
 * Chromium's own sandbox cannot work inside ours (it needs new user or pid
 * namespaces, which our seccomp filter denies, or a setuid helper, which
 * no_new_privs disables), so Chromium runs with --no-sandbox and agsx's
 * isolation replaces it: see man agsx-browser(1). */
#include "config.h"

#include "cdp.h"
#include "cmd.h"
#include "json.h"
#include "state.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>

#define CDP_PORT 9222         /* inside the sandbox, on its loopback only */
#define READY_WAIT_SEC 30     /* start-up bound (or the lifetime, if shorter) */
#define PROBE_IO_MS 2000      /* one probe's connect/read bound */
#define DEFAULT_MEMORY "2g"
#define DEFAULT_USER "1000:1000"
#define MAX_EXTRA_FLAGS 64

struct bopts {
  const char *name, *network, *publish, *timeout, *memory, *image, *user;
  bool json;
  uint64_t timeout_sec;
  struct in_addr ip;
  unsigned port; /* 0: pick a free one */
};

static int on_bopt(void *data, int id, const char *v) {
  struct bopts *o = data;
  agsx_error_t err = NULL;
  uint64_t n;
  switch (id) {
  case O_NAME:
    if (!agsx_name_is_valid(v))
      return agsx_failf("browser: invalid name `%s`: letters, digits and _.- (at most 64, "
                        "starting with a letter or digit)", v), -1;
    o->name = v;
    return 0;
  case O_NETWORK: o->network = v; return 0;
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
    return 0;
  case O_IMAGE: o->image = v; return 0;
  case O_USER: o->user = v; return 0;
  case O_JSON: o->json = true; return 0;
  case O_PUBLISH: o->publish = v; return 0;
  }
  return 0;
}

/* [IP:]HOSTPORT, IPv4; IP defaults to 127.0.0.1. */
static int parse_publish(struct bopts *o) {
  o->ip.s_addr = htonl(INADDR_LOOPBACK);
  if (o->publish == NULL)
    return 0;
  const char *colon = strrchr(o->publish, ':');
  const char *port = colon ? colon + 1 : o->publish;
  if (colon) {
    char ip[INET_ADDRSTRLEN];
    size_t n = (size_t)(colon - o->publish);
    if (n == 0 || n >= sizeof(ip))
      return agsx_failf("browser: invalid -p `%s` (want [IP:]HOSTPORT)", o->publish);
    memcpy(ip, o->publish, n);
    ip[n] = '\0';
    if (inet_pton(AF_INET, ip, &o->ip) != 1)
      return agsx_failf("browser: -p `%s`: `%s` is not an IPv4 address", o->publish, ip);
  }
  char *end;
  errno = 0;
  unsigned long p = strtoul(port, &end, 10);
  if (errno || *end || *port == '\0' || *port == '-' || p == 0 || p > 65535)
    return agsx_failf("browser: -p `%s`: invalid host port (1 to 65535)", o->publish);
  o->port = (unsigned)p;
  return 0;
}

/* A free TCP port on IP, chosen by the kernel. The short window before the
 * sandbox binds it is a race another program could win: then the start
 * fails with "address in use" and the user passes -p. */
static int pick_port(struct in_addr ip, unsigned *ret) {
  _cleanup_close_ int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr = ip};
  socklen_t len = sizeof(a);
  if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 ||
      getsockname(s, (struct sockaddr *)&a, &len) < 0)
    return agsx_failf("browser: choose a free host port: %s", strerror(errno)), -1;
  *ret = ntohs(a.sin_port);
  return 0;
}

/* Published ports (-p HOSTPORT:PORT of run) come from other work; without
 * them the endpoint is reachable only inside the sandbox's netns. */
static bool run_can_publish(void) {
  const struct agsx_command *run = agsx_command_find("run");
  for (const struct agsx_option *o = run ? run->options : NULL; o && o->long_name; o++)
    if (strcmp(o->long_name, "publish") == 0)
      return true;
  return false;
}

/* ---- the command line of `run` ------------------------------------------------------------- */

struct argvb {
  char *v[128 + MAX_EXTRA_FLAGS];
  bool owned[128 + MAX_EXTRA_FLAGS];
  int n;
};

static void add(struct argvb *b, const char *s) {
  b->v[b->n++] = (char *)s;
}

static void addf(struct argvb *b, char *s) {
  b->owned[b->n] = true;
  b->v[b->n++] = s;
}

static void argvb_clear(struct argvb *b) {
  for (int i = 0; i < b->n; i++)
    if (b->owned[i])
      free(b->v[i]);
}

static void build_run_argv(const struct bopts *o, bool publish, char **extra, int n_extra,
                           struct argvb *b) {
  add(b, "run");
  if (o->name)
    add(b, "--name"), add(b, o->name);
  add(b, "--timeout"), add(b, o->timeout ? o->timeout : "5m");
  add(b, "--memory"), add(b, o->memory ? o->memory : DEFAULT_MEMORY);
  if (o->network)
    add(b, "--network"), add(b, o->network);
  if (publish) {
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &o->ip, ip, sizeof(ip));
    add(b, "--publish"), addf(b, xasprintf("%s:%u:%d", ip, o->port, CDP_PORT));
  }
  add(b, "--user"), add(b, o->user ? o->user : DEFAULT_USER);
  /* HOME and the profile in the sandbox's /tmp (its writable tmpfs). */
  add(b, "-e"), add(b, "HOME=/tmp");
  add(b, "-w"), add(b, "/tmp");
  add(b, o->image ? o->image : "host");
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

/* ---- waiting for the endpoint ------------------------------------------------------------- */

static volatile sig_atomic_t interrupted;
static void on_interrupt(int sig) {
  interrupted = sig;
}

/* A TCP socket connected to A, made in NETNS (-1: ours). */
static int dial(int netns, const struct sockaddr_in *a, agsx_error_t *err) {
  _cleanup_close_ int self = -1;
  if (netns >= 0) {
    self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (self < 0 || setns(netns, CLONE_NEWNET) < 0)
      return agsx_error_set(err, errno, "enter the sandbox's network namespace");
  }
  /* The socket stays in the namespace it was made in. */
  _cleanup_close_ int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int e = errno;
  if (self >= 0 && setns(self, CLONE_NEWNET) < 0)
    return agsx_error_set(err, errno, "return to agsx's network namespace");
  if (s < 0)
    return agsx_error_set(err, e, "socket");
  if (connect(s, (const struct sockaddr *)a, sizeof(*a)) < 0 && errno != EINPROGRESS)
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

/* One GET /json/version; 0 and RET filled when the endpoint answers. */
static int probe(int netns, const struct sockaddr_in *a, struct agsx_cdp_version *ret,
                 agsx_error_t *err) {
  _cleanup_close_ int s = dial(netns, a, err);
  if (s < 0)
    return -1;
  char ip[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
  _cleanup_free_ char *req = xasprintf("GET /json/version HTTP/1.1\r\nHost: %s:%u\r\n"
                                       "Connection: close\r\n\r\n", ip, ntohs(a->sin_port));
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

/* The sandbox's netns, through its init (checked against its start time). */
static int open_netns(struct agsx_ctx *ctx, const char *id, agsx_error_t *err) {
  _cleanup_close_ int statefd = agsx_state_open(ctx->state, false, err);
  struct agsx_record r;
  if (statefd < 0 || agsx_record_read(statefd, id, &r, err) < 0)
    return -1;
  _cleanup_free_ char *path = xasprintf("/proc/%d/ns/net", (int)r.init.pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0 && !agsx_proc_ref_alive(&r.init))
    agsx_closep(&fd);
  agsx_record_clear(&r);
  if (fd < 0)
    return agsx_error_set(err, ESRCH, "the browser sandbox ended during start-up");
  return fd;
}

/* Waits until the endpoint answers, through the published port if there
 * is one, else inside the sandbox's netns. The supervisor is our child: if
 * it ends, so did the sandbox. */
static int wait_ready(struct agsx_ctx *ctx, const struct bopts *o, bool published,
                      const struct agsx_run_started *st, struct agsx_cdp_version *ret,
                      agsx_error_t *err) {
  struct sockaddr_in a = {.sin_family = AF_INET};
  _cleanup_close_ int netns = -1;
  if (published) {
    a.sin_addr.s_addr = o->ip.s_addr == htonl(INADDR_ANY) ? htonl(INADDR_LOOPBACK) : o->ip.s_addr;
    a.sin_port = htons((uint16_t)o->port);
  } else {
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(CDP_PORT);
    if ((netns = open_netns(ctx, st->id, err)) < 0)
      return -1;
  }
  uint64_t bound = o->timeout_sec && o->timeout_sec < READY_WAIT_SEC ? o->timeout_sec
                                                                     : READY_WAIT_SEC;
  int64_t until = agsx_mono_ns() + (int64_t)bound * 1000000000LL;
  _cleanup_error_ agsx_error_t last = NULL;
  while (!interrupted) {
    if (waitpid(st->supervisor, NULL, WNOHANG) == st->supervisor)
      return agsx_error_set(err, 0, "the browser exited during start-up (is Chromium installed "
                                    "in the image? try `agsx run` with the same image)");
    agsx_error_free(&last);
    if (probe(netns, &a, ret, &last) == 0)
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
  kill(st->supervisor, SIGTERM); /* it stops the sandbox: TERM, grace, KILL */
  while (waitpid(st->supervisor, NULL, 0) < 0 && errno == EINTR) {
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
                          const struct agsx_cdp_version *v, bool published) {
  char ip[INET_ADDRSTRLEN];
  struct in_addr show = o->ip;
  if (!published || show.s_addr == htonl(INADDR_ANY))
    show.s_addr = htonl(INADDR_LOOPBACK);
  inet_ntop(AF_INET, &show, ip, sizeof(ip));
  unsigned port = published ? o->port : CDP_PORT;
  _cleanup_free_ char *ws = xasprintf("ws://%s:%u%s", ip, port, v->ws_path);
  _cleanup_free_ char *http = xasprintf("http://%s:%u", ip, port);
  if (!published)
    agsx_warn("this agsx cannot publish ports: the endpoint is reachable only inside the "
              "sandbox's network namespace");
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
  agsx_json_kv_int(g, "port", port);
  agsx_json_kv_bool(g, "published", published);
  agsx_json_kv_str(g, "browser", v->browser);
  agsx_json_kv_str(g, "image", o->image ? o->image : "host");
  agsx_json_kv_str(g, "network", o->network ? o->network : "internal");
  yajl_gen_map_close(g);
  size_t len;
  _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
  printf("%s\n", s);
}

int agsx_cmd_browser(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  struct bopts o = {.json = ctx->json};
  int i = agsx_parse_options(cmd, argc, argv, on_bopt, &o);
  if (i < 0 || parse_publish(&o) != 0)
    return AGSX_EXIT_FAILURE;
  /* Operands are Chromium flags, after `--`. */
  if (i < argc && strcmp(argv[i - 1], "--") != 0)
    return agsx_failf("browser: unexpected argument `%s` (Chromium flags go after `--`)", argv[i]);
  if (argc - i > MAX_EXTRA_FLAGS)
    return agsx_failf("browser: at most %d Chromium flags", MAX_EXTRA_FLAGS);
  bool publish = run_can_publish();
  if (publish && o.port == 0 && pick_port(o.ip, &o.port) < 0)
    return AGSX_EXIT_FAILURE;
  struct argvb b = {0};
  build_run_argv(&o, publish, argv + i, argc - i, &b);
  struct sigaction sa = {.sa_handler = on_interrupt}, old[2];
  sigaction(SIGINT, &sa, &old[0]);
  sigaction(SIGTERM, &sa, &old[1]);
  struct agsx_run_started st = {0};
  int code = agsx_run_detached(ctx, b.n, b.v, &st);
  argvb_clear(&b);
  if (code != 0)
    return code;
  agsx_error_t err = NULL;
  struct agsx_cdp_version v = {0};
  if (wait_ready(ctx, &o, publish, &st, &v, &err) < 0) {
    discard(ctx, &st);
    agsx_cdp_version_clear(&v);
    agsx_failf("browser: %s", err->msg);
    agsx_error_free(&err);
    return AGSX_EXIT_FAILURE;
  }
  print_started(&o, &st, &v, publish);
  agsx_cdp_version_clear(&v);
  return 0;
}
