/* agsx — browser: Chromium's command line and its DevTools endpoint's
 * readiness (browser.h). */
#include "config.h"

#include "sandbox/browser.h"
#include "net/relay.h"
#include "state/state.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#define PROBE_IO_MS 2000 /* one probe's connect/read bound */

char **agsx_browser_argv(char *const *extra, size_t n) {
  static const char *const flags[] = {
      "chromium",
      "--headless=new",
      /* Chromium's sandbox needs namespaces our seccomp denies; ours
       * replaces it (see browser.h). */
      "--no-sandbox",
      "--disable-gpu",
      /* /dev/shm is small in a sandbox; shared memory goes to /tmp. */
      "--disable-dev-shm-usage",
      "--no-first-run",
      "--no-default-browser-check",
      "--disable-background-networking",
      "--user-data-dir=/tmp/chromium-profile",
      "--remote-debugging-address=127.0.0.1",
      ("--remote-debugging-port=" AGSX_BROWSER_CDP_PORT_STR),
  };
  char **v = NULL;
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(flags); i++)
    agsx_strv_push(&v, flags[i]);
  for (size_t i = 0; i < n; i++)
    agsx_strv_push(&v, extra[i]);
  agsx_strv_push(&v, "about:blank");
  return v;
}

int agsx_browser_published(int statefd, const char *id, struct sockaddr_storage *ret,
                           agsx_error_t *err) {
  struct agsx_record r;
  if (agsx_record_read(statefd, id, &r, err) < 0)
    return -1;
  int rc = 0;
  bool found = false;
  for (size_t i = 0; i < r.n_ports && !found; i++)
    if (r.ports[i].port == AGSX_BROWSER_CDP_PORT && r.ports[i].proto == AGSX_PROTO_TCP &&
        agsx_sockaddr_port(&r.ports[i].host) != 0) {
      *ret = r.ports[i].host;
      found = true;
    }
  if (!found)
    rc = agsx_error_set_quiet(err, ENOENT, "the sandbox's record has no published DevTools port");
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

int agsx_browser_wait(const struct sockaddr_storage *a, const char *hostport, uint64_t bound,
                      bool (*alive)(void *data), void *data,
                      const volatile sig_atomic_t *interrupted, struct agsx_cdp_version *ret,
                      agsx_error_t *err) {
  int64_t until = agsx_mono_ns() + (int64_t)bound * 1000000000LL;
  _cleanup_error_ agsx_error_t last = NULL;
  while (interrupted == NULL || !*interrupted) {
    if (alive && !alive(data))
      return agsx_error_set_quiet(err, ESRCH,
                                  "the browser exited during start-up (try `agsx run` with "
                                  "the same image and `chromium --headless=new`)");
    agsx_error_free(&last);
    if (probe(a, hostport, ret, &last) == 0)
      return 0;
    if (agsx_mono_ns() > until)
      return agsx_error_set_quiet(err, ETIMEDOUT,
                                  "the DevTools endpoint did not answer within %llus: %s",
                                  (unsigned long long)bound, last ? last->msg : "no answer");
    usleep(50000);
  }
  return agsx_error_set_quiet(err, EINTR, "interrupted while waiting for the browser");
}
