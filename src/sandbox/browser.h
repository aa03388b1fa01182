/* agsx — browser: Chromium in a sandbox, as `agsx browser` and agsx mcp's
 * browser_start start it: its command line, the published DevTools port,
 * and the wait until that endpoint answers.
 *
 * With a view (agsx browser --view), Chromium runs headed on a virtual
 * display inside the sandbox, and a person watches it, or takes it over,
 * in noVNC: Xvfb, x11vnc and websockify (with noVNC's pages) run inside the
 * sandbox, as the sandbox's user, from its image; only websockify's port
 * is published, on the host's loopback. websockify lets a WebSocket through
 * only with a token of the sandbox's (its TokenFile plugin): the view
 * token reaches an x11vnc that takes no input (-viewonly), the takeover
 * token, made only when asked for, one that does. The tokens reach the
 * launcher in its environment, never on a command line (which any host
 * user can read in /proc).
 *
 * Chromium's own sandbox cannot work inside ours (it needs new user or pid
 * namespaces, which our seccomp filter denies, or a setuid helper, which
 * no_new_privs disables), so Chromium runs with --no-sandbox and agsx's
 * isolation replaces it: see man agsx-browser(1). Its DevTools endpoint
 * listens on the sandbox's loopback only, published on the host through
 * the sandbox's relay. */
#ifndef AGSX_SANDBOX_BROWSER_H
#define AGSX_SANDBOX_BROWSER_H

#include "sandbox/cdp.h"
#include "util/util.h"

#include <signal.h>
#include <sys/socket.h>

#define AGSX_BROWSER_CDP_PORT 9222 /* inside the sandbox, on its loopback only */
#define AGSX_BROWSER_CDP_PORT_STR "9222"
#define AGSX_BROWSER_READY_SEC 30        /* start-up bound */
#define AGSX_BROWSER_MEMORY (2ull << 30) /* 2g */
#define AGSX_BROWSER_USER "1000:1000"
/* The memory limit a browser gets unless its caller gives one:
 * AGSX_BROWSER_MEMORY, or none where limits are off (an ordinary user
 * without a delegated cgroup: agsx(1), ROOTLESS), where a default must not
 * refuse the start that an explicit --memory rightly refuses. */
uint64_t agsx_browser_default_memory(void);
#define AGSX_BROWSER_EXTRA_MAX 64   /* Chromium flags a caller may add */
#define AGSX_BROWSER_VIEW_PORT 6080 /* websockify and noVNC, on the sandbox's loopback */
#define AGSX_BROWSER_VIEW_PORT_STR "6080"
#define AGSX_BROWSER_VIEW_W 1280 /* the virtual display, and Chromium's window on it */
#define AGSX_BROWSER_VIEW_H 800

/* A view's tokens: 32 hex digits each; TAKEOVER_TOKEN is empty without
 * takeover. */
struct agsx_browser_view {
  char token[33];
  char takeover_token[33];
};
/* New random tokens; TAKEOVER: also a takeover token. */
void agsx_browser_view_new(struct agsx_browser_view *v, bool takeover);

/* Chromium's command line (DevTools on the sandbox's loopback, profile
 * and shared memory in /tmp), then EXTRA's N flags, then about:blank:
 * headless when VIEW is NULL, else headed under the view's launcher (a
 * /bin/sh script that starts the display, the VNC servers and websockify,
 * and then execs Chromium). */
char **agsx_browser_argv(char *const *extra, size_t n, const struct agsx_browser_view *view);
/* Its environment: HOME=/tmp (its workdir is /tmp too) and, with VIEW, the
 * tokens for the launcher (which unsets them before Chromium starts). */
char **agsx_browser_env(const struct agsx_browser_view *view);
/* The noVNC page of TOKEN at HOSTPORT: view only (noVNC's own setting; the
 * server's is the token's) or with input. */
char *agsx_browser_view_url(const char *hostport, const char *token, bool view_only);

/* Sandbox ID's PORT (AGSX_BROWSER_CDP_PORT, _VIEW_PORT) as published, from
 * its record: the host address as bound (an unspecified one becomes
 * loopback). ENOENT when it is not published. */
int agsx_browser_published(int statefd, const char *id, int port, struct sockaddr_storage *ret,
                           agsx_error_t *err);

/* Waits, at most BOUND seconds, until the view at A answers (GET
 * /vnc.html: websockify starts only once its VNC servers listen), as
 * agsx_browser_wait waits. */
int agsx_browser_view_wait(const struct sockaddr_storage *a, const char *hostport, uint64_t bound,
                           bool (*alive)(void *data), void *data,
                           const volatile sig_atomic_t *interrupted, agsx_error_t *err);

/* The last line the sandbox's command wrote to stderr (at most 300 bytes),
 * or NULL: why a browser that exited during its start did. */
char *agsx_browser_last_error(int statefd, const char *id);

/* Waits, at most BOUND seconds, until GET /json/version answers at A
 * (HOSTPORT: its text, the Host header), polling; ALIVE(DATA) says whether
 * the sandbox still runs (false: Chromium exited during its start), and a
 * non-zero *INTERRUPTED stops the wait (EINTR). */
int agsx_browser_wait(const struct sockaddr_storage *a, const char *hostport, uint64_t bound,
                      bool (*alive)(void *data), void *data,
                      const volatile sig_atomic_t *interrupted, struct agsx_cdp_version *ret,
                      agsx_error_t *err);

#endif
