/* agsx — browser: headless Chromium in a sandbox, as `agsx browser` and
 * agsx mcp's browser_start start it: its command line, the published
 * DevTools port, and the wait until that endpoint answers.
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
#define AGSX_BROWSER_EXTRA_MAX 64 /* Chromium flags a caller may add */

/* Chromium's command line (headless, DevTools on the sandbox's loopback,
 * profile and shared memory in /tmp), then EXTRA's N flags, then
 * about:blank. Its env wants HOME=/tmp and its workdir /tmp. */
char **agsx_browser_argv(char *const *extra, size_t n);

/* The DevTools port as published for sandbox ID, from its record: the
 * host address as bound (an unspecified one becomes loopback). */
int agsx_browser_published(int statefd, const char *id, struct sockaddr_storage *ret,
                           agsx_error_t *err);

/* Waits, at most BOUND seconds, until GET /json/version answers at A
 * (HOSTPORT: its text, the Host header), polling; ALIVE(DATA) says whether
 * the sandbox still runs (false: Chromium exited during its start), and a
 * non-zero *INTERRUPTED stops the wait (EINTR). */
int agsx_browser_wait(const struct sockaddr_storage *a, const char *hostport, uint64_t bound,
                      bool (*alive)(void *data), void *data,
                      const volatile sig_atomic_t *interrupted, struct agsx_cdp_version *ret,
                      agsx_error_t *err);

#endif
