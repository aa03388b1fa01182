/* agsx browser: Chromium in a detached sandbox, its DevTools endpoint
 * published on a host port; headless, or headed with a live view (--view,
 * --takeover: noVNC inside the sandbox, see sandbox/browser.h). The
 * sandbox is started through the lifecycle library, detached, as `run -d`
 * starts one (agsx_lifecycle_*), so it is an ordinary sandbox for ls, exec,
 * kill, update and gc; this command only fills the spec (Chromium's command
 * line: sandbox/browser.h) and waits until the endpoint (and the view)
 * answers. */
#include "config.h"

#include "sandbox/browser.h"
#include "cmd.h"
#include "util/json.h"
#include "net/netspec.h"
#include "net/relay.h"
#include "sandbox/lifecycle.h"
#include "sandbox/proc.h"
#include "state/state.h"

#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>

#define MAX_EXTRA_FLAGS AGSX_BROWSER_EXTRA_MAX

struct bopts {
  const char *name, *network, *timeout, *memory, *image, *user;
  char *publish; /* run's -p spec: [IP:]HOSTPORT:9222 */
  bool json, view, takeover;
  uint64_t timeout_sec, memory_bytes;
};

/* -p [IP:]HOSTPORT becomes run's -p [IP:]HOSTPORT:9222 (HOSTPORT 0: a free
 * port), checked here so that errors name this command's syntax. */
static int set_publish(struct bopts *o, const char *v) {
  agsx_error_t err = NULL;
  struct agsx_port p;
  if (strchr(v, '/') || strlen(v) > AGSX_PORTSPEC_MAX - 8)
    return agsx_failf("browser: invalid -p `%s` (want [IP:]HOSTPORT)", v), -1;
  _cleanup_free_ char *spec = xasprintf("%s:%d", v, AGSX_BROWSER_CDP_PORT);
  if (agsx_port_parse(spec, &p, &err) < 0) {
    agsx_failf("browser: invalid -p `%s` (want [IP:]HOSTPORT): %s", v, err->msg);
    agsx_error_free(&err);
    return -1;
  }
  if (p.port != AGSX_BROWSER_CDP_PORT)
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
  case O_VIEW: o->view = true; return 0;
  case O_TAKEOVER: o->view = o->takeover = true; return 0;
  case O_PUBLISH: return set_publish(o, v);
  }
  return 0;
}

/* ---- the sandbox: Chromium's command line and the spec ----------------------------------- */

static int pull_image(void *data, const char *image, agsx_error_t *err) {
  return agsx_cmd_pull_quietly(data, image, err);
}

/* Starts the sandbox detached: its id and supervisor go to ST. Returns 0,
 * or 125 after printing the error. */
static int start_sandbox(struct agsx_ctx *ctx, const struct bopts *o,
                         const struct agsx_browser_view *view, char **extra, int n_extra,
                         struct agsx_run_started *st) {
  agsx_error_t err = NULL;
  _cleanup_strv_ char **argv = agsx_browser_argv(extra, (size_t)n_extra, view);
  /* HOME and the profile in its writable /tmp; the view's tokens. */
  _cleanup_strv_ char **env = agsx_browser_env(view);
  /* Default: a free port of 127.0.0.1, picked when the relay binds. The
   * view's is always one of 127.0.0.1. */
  struct agsx_port ports[2];
  struct agsx_run_spec spec = {
      .root = ctx->root,
      .state = ctx->state,
      .image = o->image ? o->image : "host",
      .cmd = argv,
      .pull_image = pull_image,
      .pull_data = ctx,
      .env = env,
      .user = o->user ? o->user : AGSX_BROWSER_USER,
      .workdir = "/tmp",
      .name = o->name,
      .network = o->network,
      .ports = ports,
      .n_ports = view ? 2 : 1,
      .timeout = o->timeout ? o->timeout_sec : AGSX_DEFAULT_TIMEOUT_SEC,
      .memory = o->memory ? o->memory_bytes : agsx_browser_default_memory(),
  };
  struct agsx_lifecycle *lc = NULL;
  int r = agsx_port_parse(o->publish ? o->publish : "127.0.0.1:0:" AGSX_BROWSER_CDP_PORT_STR,
                          &ports[0], &err);
  if (r == 0 && view)
    r = agsx_port_parse("127.0.0.1:0:" AGSX_BROWSER_VIEW_PORT_STR, &ports[1], &err);
  if (r == 0)
    r = agsx_lifecycle_create(&spec, &lc, &err);
  if (r == 0)
    r = agsx_lifecycle_detach(lc, st, &err);
  agsx_lifecycle_free(lc);
  return r < 0 ? agsx_fail(&err) : 0;
}

/* ---- waiting for the endpoint ------------------------------------------------------------- */

static volatile sig_atomic_t interrupted;
static void on_interrupt(int sig) { interrupted = sig; }

/* Whether the sandbox runs: its supervisor (not our child: proven by its
 * start time) still does. */
static bool supervisor_alive(void *data) {
  struct agsx_run_started *st = data;
  if (agsx_proc_ref_signal(&st->supervisor_ref, 0, 0) != -ESRCH)
    return true;
  st->supervisor = 0;
  return false;
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

struct endpoint {
  struct sockaddr_storage a;
  char hostport[80];
};

static void print_started(const struct bopts *o, const struct agsx_run_started *st,
                          const struct agsx_cdp_version *v, const struct endpoint *cdp,
                          const struct agsx_browser_view *view, const struct endpoint *vw) {
  char ip[64];
  agsx_sockaddr_ip(&cdp->a, ip, sizeof(ip));
  _cleanup_free_ char *ws = xasprintf("ws://%s%s", cdp->hostport, v->ws_path);
  _cleanup_free_ char *http = xasprintf("http://%s", cdp->hostport);
  _cleanup_free_ char *view_url = NULL, *takeover_url = NULL;
  if (view) {
    view_url = agsx_browser_view_url(vw->hostport, view->token, true);
    if (view->takeover_token[0])
      takeover_url = agsx_browser_view_url(vw->hostport, view->takeover_token, false);
  }
  if (!o->json) {
    printf("%s\n", ws);
    if (view_url)
      printf("view: %s\n", view_url);
    if (takeover_url)
      printf("takeover: %s\n", takeover_url);
    return;
  }
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "id", st->id);
  agsx_json_kv_str(g, "name", o->name);
  agsx_json_kv_str(g, "ws_url", ws);
  agsx_json_kv_str(g, "http_url", http);
  agsx_json_kv_str(g, "host", ip);
  agsx_json_kv_int(g, "port", agsx_sockaddr_port(&cdp->a));
  if (view) {
    agsx_json_kv_str(g, "view_url", view_url);
    agsx_json_kv_str(g, "takeover_url", takeover_url);
    agsx_json_kv_int(g, "view_port", agsx_sockaddr_port(&vw->a));
  }
  agsx_json_kv_str(g, "browser", v->browser);
  agsx_json_kv_str(g, "image", o->image ? o->image : "host");
  agsx_json_kv_str(g, "network", o->network ? o->network : "internal");
  yajl_gen_map_close(g);
  size_t len;
  _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
  printf("%s\n", s);
}

/* Where sandbox ID's PORT is published, from its record. */
static int published(int statefd, const char *id, int port, struct endpoint *e, agsx_error_t *err) {
  if (agsx_browser_published(statefd, id, port, &e->a, err) < 0)
    return -1;
  agsx_sockaddr_format(&e->a, e->hostport, sizeof(e->hostport));
  return 0;
}

/* After the start: the published addresses, the waits, the output. */
static int await_browser(struct agsx_ctx *ctx, const struct bopts *o,
                         const struct agsx_browser_view *view, struct agsx_run_started *st) {
  agsx_error_t err = NULL;
  struct agsx_cdp_version v = {0};
  struct endpoint cdp, vw;
  _cleanup_close_ int statefd = agsx_state_open(ctx->state, false, &err);
  uint64_t bound = o->timeout_sec && o->timeout_sec < AGSX_BROWSER_READY_SEC
                       ? o->timeout_sec
                       : AGSX_BROWSER_READY_SEC;
  int r = statefd < 0 ? -1 : published(statefd, st->id, AGSX_BROWSER_CDP_PORT, &cdp, &err);
  if (r == 0 && view)
    r = published(statefd, st->id, AGSX_BROWSER_VIEW_PORT, &vw, &err);
  if (r == 0)
    r = agsx_browser_wait(&cdp.a, cdp.hostport, bound, supervisor_alive, st, &interrupted, &v,
                          &err);
  if (r == 0 && view)
    r = agsx_browser_view_wait(&vw.a, vw.hostport, bound, supervisor_alive, st, &interrupted, &err);
  if (r < 0) {
    /* Why it exited, from its own stderr (the view's launcher says which
     * program the image lacks). */
    _cleanup_free_ char *why = agsx_error_errno(&err) == ESRCH && statefd >= 0
                                   ? agsx_browser_last_error(statefd, st->id)
                                   : NULL;
    discard(ctx, st);
    agsx_cdp_version_clear(&v);
    if (why)
      agsx_failf("browser: %s; it said: %s", err->msg, why);
    else
      agsx_failf("browser: %s", err->msg);
    agsx_error_free(&err);
    return AGSX_EXIT_FAILURE;
  }
  print_started(o, st, &v, &cdp, view, &vw);
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
  struct agsx_browser_view view;
  if (o.view)
    agsx_browser_view_new(&view, o.takeover);
  code = start_sandbox(ctx, &o, o.view ? &view : NULL, argv + i, argc - i, &st);
  if (code == 0)
    code = await_browser(ctx, &o, o.view ? &view : NULL, &st);
  explicit_bzero(&view, sizeof(view));
out:
  free(o.publish);
  return code;
}
