/* agsx — mcp: browsers. browser_start starts headless Chromium in a
 * sandbox of the session, as `agsx browser` does (sandbox/browser.h: the
 * same command line, user, limits, and DevTools port published on the
 * host's loopback), and answers once its DevTools endpoint does: the
 * WebSocket URL is what Playwright's connectOverCDP or Puppeteer's connect
 * take. The browser is an ordinary sandbox of the session (exec, files,
 * snapshots, kill) and ends with it unless created with keep. */
#include "config.h"

#include "mcp/tools-internal.h"
#include "net/relay.h"
#include "sandbox/browser.h"
#include "sandbox/control.h"
#include "state/state.h"

#include <string.h>

static const struct arg start_args[] = {
    {"timeout", A_INT, false, 1, 86400, "Lifetime in seconds (default 1800)"},
    {"memory", A_STR, false, 0, 0, "Memory limit (default 2g)"},
    {"network", A_STR, false, 0, 0,
     "internal (default: the browser reaches only pages inside its own sandbox) or the mode "
     "agsx mcp --network allows"},
    {"keep", A_BOOL, false, 0, 0, "Keep the browser running after this session ends"},
    {0},
};

struct alive {
  struct agsx_mcp *s;
  const char *id;
};

/* Whether the browser's sandbox still runs (its command is Chromium: the
 * sandbox ends when Chromium exits). */
static bool running(void *data) {
  struct alive *a = data;
  struct agsx_record rec;
  agsx_error_t e = NULL;
  if (agsx_record_read(a->s->statefd, a->id, &rec, &e) < 0) {
    agsx_error_free(&e);
    return false;
  }
  bool up = rec.status == AGSX_STATUS_RUNNING && agsx_proc_ref_alive(&rec.supervisor);
  agsx_record_clear(&rec);
  return up;
}

static int browser_start(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  const struct agsx_mcp_config *cfg = s->cfg;
  const char *net = arg_str(a, "network"), *mem = arg_str(a, "memory");
  if (net && strcmp(net, "internal") == 0)
    net = NULL;
  if (agsx_mcp_net_allowed(cfg, net, err) < 0)
    return -1;
  uint64_t memory = AGSX_BROWSER_MEMORY;
  if (mem && agsx_parse_size(mem, &memory, err) < 0)
    return agsx_error_wrap(err, "memory");
  if (agsx_mcp_room(s, 1, err) < 0)
    return -1;
  _cleanup_strv_ char **argv = agsx_browser_argv(NULL, 0), **labels = NULL;
  agsx_labels_set(&labels, AGSX_MCP_LABEL_SESSION, s->session);
  if (arg_bool(a, "keep"))
    agsx_labels_set(&labels, AGSX_MCP_LABEL_KEEP, "true");
  char *env[] = {(char *)"HOME=/tmp", NULL}; /* HOME and the profile in its writable /tmp */
  char *ports[] = {(char *)"127.0.0.1:0:" AGSX_BROWSER_CDP_PORT_STR, NULL};
  uint64_t timeout = (uint64_t)arg_int(a, "timeout", AGSX_MCP_LIFETIME_DEFAULT);
  struct agsx_spawn_req q = {
      .root = cfg->root,
      .state = cfg->state,
      .image = "host",
      .network = net,
      .env = env,
      .labels = labels,
      .ports = ports,
      .cmd = argv,
      .user = AGSX_BROWSER_USER,
      .workdir = "/tmp",
      .timeout = timeout,
      .memory = memory,
  };
  char id[33];
  int status;
  if (agsx_spawn(&s->spawner, &q, id, &status, err) < 0)
    return agsx_error_wrap(err, "start a browser");
  struct sockaddr_storage addr;
  char hostport[80];
  struct agsx_cdp_version v = {0};
  struct alive al = {s, id};
  uint64_t bound = timeout < AGSX_BROWSER_READY_SEC ? timeout : AGSX_BROWSER_READY_SEC;
  agsx_mcp_progress(s, 1, 0, "starting Chromium");
  if (agsx_browser_published(s->statefd, id, &addr, err) < 0 ||
      (agsx_sockaddr_format(&addr, hostport, sizeof(hostport)),
       agsx_browser_wait(&addr, hostport, bound, running, &al, NULL, &v, err) < 0)) {
    int pidfd = -1;
    agsx_error_t e = NULL;
    if (agsx_control_request_stop(s->statefd, id, &pidfd, &e) < 0 && agsx_error_errno(&e) != ESRCH)
      agsx_warn("mcp: stop browser %.12s: %s", id, e->msg);
    agsx_error_free(&e);
    agsx_closep(&pidfd);
    agsx_cdp_version_clear(&v);
    return agsx_error_wrap(err, "start a browser");
  }
  struct agsx_record rec;
  int r = agsx_record_read(s->statefd, id, &rec, err);
  if (r == 0) {
    _cleanup_free_ char *ws = xasprintf("ws://%s%s", hostport, v.ws_path);
    _cleanup_free_ char *http = xasprintf("http://%s", hostport);
    yajl_gen_map_open(g);
    agsx_json_key(g, "sandbox");
    agsx_mcp_gen_sandbox(g, &rec);
    agsx_json_kv_str(g, "ws_url", ws);
    agsx_json_kv_str(g, "http_url", http);
    agsx_json_kv_str(g, "browser", v.browser ? v.browser : "");
    yajl_gen_map_close(g);
    agsx_info("mcp: session %s: started browser %.12s (%s)", s->session, id, ws);
    agsx_record_clear(&rec);
  }
  agsx_cdp_version_clear(&v);
  return r;
}

const struct tool agsx_mcp_browser_tools[] = {
    {"browser_start", "Start a browser",
     "Start headless Chromium in a new sandbox of this session (user 1000, 2g, no network "
     "unless asked for and allowed) and wait until its DevTools endpoint answers; returns the "
     "sandbox and ws_url, the Chrome DevTools Protocol WebSocket URL (Playwright's "
     "connectOverCDP, Puppeteer's connect) on the host's loopback. Stop it with sandbox_kill.",
     start_args,
     "{\"type\":\"object\",\"properties\":{\"sandbox\":" SANDBOX_SCHEMA
     ",\"ws_url\":{\"type\":\"string\"},\"http_url\":{\"type\":\"string\"},\"browser\":{\"type\":"
     "\"string\",\"description\":\"Chromium's version\"}},\"required\":[\"sandbox\",\"ws_url\","
     "\"http_url\",\"browser\"]}",
     false, false, browser_start},
    {0},
};
