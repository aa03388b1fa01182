/* agsx — browser: Chromium's command line and its DevTools endpoint's
 * readiness (browser.h). */
#include "config.h"

#include "sandbox/browser.h"
#include "net/relay.h"
#include "sandbox/logbuf.h"
#include "sandbox/processes.h"
#include "state/state.h"
#include "host/cgroup.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#define PROBE_IO_MS 2000 /* one probe's connect/read bound */

/* The view's launcher, run as `sh -c LAUNCHER agsx-browser-view CHROMIUM...`
 * with AGSX_VIEW_TOKEN, AGSX_TAKEOVER_TOKEN (maybe empty) and
 * AGSX_VIEW_SCREEN in its environment. Xvfb first (-displayfd: ready when
 * it writes the display number); then, in the background, the VNC servers
 * (ready when they print PORT=) and only after them websockify, so that
 * the view's port answers only once the view works; Chromium meanwhile. A
 * missing program fails at once, naming the package. Its files are in
 * /tmp/.agsx-view, private to the sandbox's user. */
static const char launcher[] =
    "set -u\n"
    "d=/tmp/.agsx-view web=/usr/share/novnc\n"
    "fail() { echo \"agsx browser --view: $*\" >&2; exit 127; }\n"
    "for c in Xvfb x11vnc websockify; do\n"
    "  command -v \"$c\" >/dev/null 2>&1 || fail \"the image has no $c (Debian's xvfb, x11vnc, "
    "websockify and novnc: see agsx-browser(1))\"\n"
    "done\n"
    "[ -f \"$web/vnc.html\" ] || fail \"the image has no noVNC ($web/vnc.html, Debian's novnc: "
    "see agsx-browser(1))\"\n"
    "umask 077\n"
    "mkdir -p \"$d\" || fail \"cannot make $d\"\n"
    "mkdir -p /tmp/.X11-unix 2>/dev/null && chmod 1777 /tmp/.X11-unix 2>/dev/null\n"
    "Xvfb :99 -screen 0 \"${AGSX_VIEW_SCREEN}x24\" -nolisten tcp -displayfd 3 3>\"$d/display\" "
    ">\"$d/xvfb.log\" 2>&1 &\n"
    "x=$! i=0\n"
    "until [ -s \"$d/display\" ]; do\n"
    "  kill -0 \"$x\" 2>/dev/null || fail \"Xvfb exited: $(tail -n 2 \"$d/xvfb.log\")\"\n"
    "  i=$((i + 1)); [ \"$i\" -lt 400 ] || fail 'Xvfb did not start within 20s'\n"
    "  sleep 0.05\n"
    "done\n"
    "export DISPLAY=:99\n"
    "printf '%s: 127.0.0.1:5900\\n' \"$AGSX_VIEW_TOKEN\" >\"$d/tokens\"\n"
    "t=${AGSX_TAKEOVER_TOKEN:-}\n"
    "[ -z \"$t\" ] || printf '%s: 127.0.0.1:5901\\n' \"$t\" >>\"$d/tokens\"\n"
    "unset AGSX_VIEW_TOKEN AGSX_TAKEOVER_TOKEN AGSX_VIEW_SCREEN\n"
    "vnc() { x11vnc -display :99 -localhost -shared -forever -nopw -noxdamage -xkb -quiet \"$@\"; "
    "}\n"
    "(\n"
    "  vnc -rfbport 5900 -viewonly >\"$d/vnc-view.log\" 2>&1 &\n"
    "  [ -z \"$t\" ] || vnc -rfbport 5901 >\"$d/vnc-takeover.log\" 2>&1 &\n"
    "  i=0\n"
    "  until grep -q '^PORT=' \"$d/vnc-view.log\" 2>/dev/null &&\n"
    "        { [ -z \"$t\" ] || grep -q '^PORT=' \"$d/vnc-takeover.log\" 2>/dev/null; }; do\n"
    "    i=$((i + 1)); [ \"$i\" -lt 400 ] || exit 1\n"
    "    sleep 0.05\n"
    "  done\n"
    "  exec websockify --web \"$web\" --token-plugin TokenFile --token-source \"$d/tokens\" "
    "127.0.0.1:" AGSX_BROWSER_VIEW_PORT_STR " >\"$d/websockify.log\" 2>&1\n"
    ") &\n"
    "exec \"$@\"\n";

char **agsx_browser_argv(char *const *extra, size_t n, const struct agsx_browser_view *view) {
  static const char *const flags[] = {
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
  if (view) {
    agsx_strv_push(&v, "/bin/sh");
    agsx_strv_push(&v, "-c");
    agsx_strv_push(&v, launcher);
    agsx_strv_push(&v, "agsx-browser-view");
  }
  agsx_strv_push(&v, "chromium");
  if (!view)
    agsx_strv_push(&v, "--headless=new");
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(flags); i++)
    agsx_strv_push(&v, flags[i]);
  if (view) {
    /* The whole display, whatever draws it: no window manager places it. */
    agsx_strv_push(&v, "--window-position=0,0");
    _cleanup_free_ char *size =
        xasprintf("--window-size=%d,%d", AGSX_BROWSER_VIEW_W, AGSX_BROWSER_VIEW_H);
    agsx_strv_push(&v, size);
    /* No keyring to ask for (there is no desktop session), and no bar
     * warning about --no-sandbox over the page a person watches: agsx's
     * sandbox is the one that holds. */
    agsx_strv_push(&v, "--password-store=basic");
    agsx_strv_push(&v, "--test-type");
  }
  for (size_t i = 0; i < n; i++)
    agsx_strv_push(&v, extra[i]);
  agsx_strv_push(&v, "about:blank");
  return v;
}

void agsx_browser_view_new(struct agsx_browser_view *v, bool takeover) {
  agsx_random_hex(v->token, 16);
  v->takeover_token[0] = '\0';
  if (takeover)
    agsx_random_hex(v->takeover_token, 16);
}

char **agsx_browser_env(const struct agsx_browser_view *view) {
  char **v = NULL;
  agsx_strv_push(&v, "HOME=/tmp");
  if (view) {
    _cleanup_free_ char *t = xasprintf("AGSX_VIEW_TOKEN=%s", view->token);
    _cleanup_free_ char *k = xasprintf("AGSX_TAKEOVER_TOKEN=%s", view->takeover_token);
    _cleanup_free_ char *s =
        xasprintf("AGSX_VIEW_SCREEN=%dx%d", AGSX_BROWSER_VIEW_W, AGSX_BROWSER_VIEW_H);
    agsx_strv_push(&v, t);
    agsx_strv_push(&v, k);
    agsx_strv_push(&v, s);
  }
  return v;
}

char *agsx_browser_view_url(const char *hostport, const char *token, bool view_only) {
  /* noVNC's settings: connect at once, scale the display to the window,
   * and the WebSocket path with the token (websockify's TokenFile). */
  return xasprintf("http://%s/vnc.html?autoconnect=1&resize=scale&reconnect=1%s"
                   "&path=websockify%%3Ftoken%%3D%s",
                   hostport, view_only ? "&view_only=1" : "", token);
}

int agsx_browser_published(int statefd, const char *id, int port, struct sockaddr_storage *ret,
                           agsx_error_t *err) {
  struct agsx_record r;
  if (agsx_record_read(statefd, id, &r, err) < 0)
    return -1;
  int rc = 0;
  bool found = false;
  for (size_t i = 0; i < r.n_ports && !found; i++)
    if (r.ports[i].port == port && r.ports[i].proto == AGSX_PROTO_TCP &&
        agsx_sockaddr_port(&r.ports[i].host) != 0) {
      *ret = r.ports[i].host;
      found = true;
    }
  if (!found)
    rc = agsx_error_set_quiet(err, ENOENT, "the sandbox's record has no published %s port",
                              port == AGSX_BROWSER_VIEW_PORT ? "view" : "DevTools");
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

/* One GET /json/version; 0 and RET (a struct agsx_cdp_version) filled when
 * the endpoint answers. The relay accepts at once, so "not yet" is a reset
 * or an early EOF. */
static int probe_cdp(const struct sockaddr_storage *a, const char *hostport, void *ret,
                     agsx_error_t *err) {
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

/* One GET /vnc.html: 0 when it answers 200 (websockify, once the VNC
 * servers listen). */
static int probe_view(const struct sockaddr_storage *a, const char *hostport, void *unused,
                      agsx_error_t *err) {
  (void)unused;
  _cleanup_close_ int s = dial(a, err);
  if (s < 0)
    return -1;
  _cleanup_free_ char *req =
      xasprintf("GET /vnc.html HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n\r\n", hostport);
  if (send(s, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req))
    return agsx_error_set(err, errno, "send");
  char line[64];
  size_t len = 0;
  int64_t until = agsx_mono_ns() + PROBE_IO_MS * 1000000LL;
  while (len < sizeof(line) - 1 && memchr(line, '\n', len) == NULL) {
    int ms = (int)((until - agsx_mono_ns()) / 1000000);
    struct pollfd p = {.fd = s, .events = POLLIN};
    if (ms <= 0 || poll(&p, 1, ms) <= 0)
      return agsx_error_set(err, ETIMEDOUT, "read the view's answer");
    ssize_t n = recv(s, line + len, sizeof(line) - 1 - len, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (n <= 0)
      return agsx_error_set(err, n < 0 ? errno : ECONNRESET, "read the view's answer");
    len += (size_t)n;
  }
  line[len] = '\0';
  if (strncmp(line, "HTTP/1.", 7) != 0 || strncmp(line + 8, " 200", 4) != 0)
    return agsx_error_set_quiet(err, EPROTO, "the view answered `%.*s`", (int)strcspn(line, "\r\n"),
                                line);
  return 0;
}

/* Polls PROBE until it succeeds, at most BOUND seconds (see
 * agsx_browser_wait); WHAT names the endpoint in the error. */
static int wait_for(const char *what,
                    int (*probe_fn)(const struct sockaddr_storage *, const char *, void *,
                                    agsx_error_t *),
                    void *ret, const struct sockaddr_storage *a, const char *hostport,
                    uint64_t bound, bool (*alive)(void *data), void *data,
                    const volatile sig_atomic_t *interrupted, agsx_error_t *err) {
  int64_t until = agsx_mono_ns() + (int64_t)bound * 1000000000LL;
  _cleanup_error_ agsx_error_t last = NULL;
  while (interrupted == NULL || !*interrupted) {
    if (alive && !alive(data))
      return agsx_error_set_quiet(err, ESRCH,
                                  "the browser exited during start-up (try `agsx run` with "
                                  "the same image and `chromium --headless=new`)");
    agsx_error_free(&last);
    if (probe_fn(a, hostport, ret, &last) == 0)
      return 0;
    if (agsx_mono_ns() > until)
      return agsx_error_set_quiet(err, ETIMEDOUT, "%s did not answer within %llus: %s", what,
                                  (unsigned long long)bound, last ? last->msg : "no answer");
    usleep(50000);
  }
  return agsx_error_set_quiet(err, EINTR, "interrupted while waiting for the browser");
}

int agsx_browser_wait(const struct sockaddr_storage *a, const char *hostport, uint64_t bound,
                      bool (*alive)(void *data), void *data,
                      const volatile sig_atomic_t *interrupted, struct agsx_cdp_version *ret,
                      agsx_error_t *err) {
  return wait_for("the DevTools endpoint", probe_cdp, ret, a, hostport, bound, alive, data,
                  interrupted, err);
}

int agsx_browser_view_wait(const struct sockaddr_storage *a, const char *hostport, uint64_t bound,
                           bool (*alive)(void *data), void *data,
                           const volatile sig_atomic_t *interrupted, agsx_error_t *err) {
  return wait_for("the view (noVNC)", probe_view, NULL, a, hostport, bound, alive, data,
                  interrupted, err);
}

char *agsx_browser_last_error(int statefd, const char *id) {
  struct agsx_log_reader *rd = NULL;
  agsx_error_t err = NULL;
  if (agsx_sandbox_log_open(statefd, id, AGSX_LOG_FROM_START, &rd, &err) < 0) {
    agsx_error_free(&err);
    return NULL;
  }
  char *line = NULL;
  struct agsx_log_rec r;
  int n;
  while ((n = agsx_log_next(rd, &r, &err)) == 1) {
    if (r.kind != AGSX_LOG_STDERR)
      continue;
    /* The record's last non-empty line. */
    size_t end = r.len;
    while (end > 0 && (r.data[end - 1] == '\n' || r.data[end - 1] == '\r'))
      end--;
    if (end == 0)
      continue;
    const char *nl = memrchr(r.data, '\n', end);
    size_t from = nl ? (size_t)(nl - r.data) + 1 : 0;
    size_t len = end - from < 300 ? end - from : 300;
    free(line);
    line = xstrndup(r.data + from, len);
    for (char *c = line; *c; c++)
      if ((unsigned char)*c < ' ')
        *c = ' ';
  }
  agsx_error_free(&err);
  agsx_log_reader_free(rd);
  return line;
}

uint64_t agsx_browser_default_memory(void) {
  return agsx_cgroup_limits_off() ? 0 : AGSX_BROWSER_MEMORY;
}
