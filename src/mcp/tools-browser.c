/* agsx — mcp: browsers. browser_start starts headless Chromium in a
 * sandbox of the session, as `agsx browser` does (sandbox/browser.h: the
 * same command line, user, limits, and DevTools port published on the
 * host's loopback), and answers once its DevTools endpoint does: the
 * WebSocket URL is what Playwright's connectOverCDP or Puppeteer's connect
 * take. The browser is an ordinary sandbox of the session (exec, files,
 * snapshots, kill) and ends with it unless created with keep.
 *
 * browser_navigate, _screenshot, _click, _type and _text drive its page
 * through the Chrome DevTools Protocol, spoken by agsx itself
 * (sandbox/cdpws.h): each call connects, attaches to the browser's first
 * page (making one if it has none), does its work and disconnects, so the
 * page is the state and a call holds nothing. Everything the browser
 * answers is untrusted (it runs the pages' code): cdpws bounds and checks
 * the frames, yajl parses them, a screenshot goes out as image content
 * only when it decodes to a PNG, and page text is cut at 1 MiB. */
#include "config.h"

#include "mcp/tools-internal.h"
#include "net/relay.h"
#include "api/wire.h"
#include "sandbox/browser.h"
#include "sandbox/cdpws.h"
#include "sandbox/control.h"
#include "state/state.h"

#include <string.h>

static const struct arg start_args[] = {
    {"timeout", A_INT, false, 1, 86400, "Lifetime in seconds (default 1800)"},
    {"memory", A_STR, false, 0, 0, "Memory limit (default 2g; none where limits are off)"},
    {"network", A_STR, false, 0, 0,
     "internal (default: the browser reaches only pages inside its own sandbox) or the mode "
     "agsx mcp --network allows"},
    {"keep", A_BOOL, false, 0, 0, "Keep the browser running after this session ends"},
    {"view", A_BOOL, false, 0, 0,
     "Run Chromium headed with a live view a person opens in a web browser (noVNC, view only): "
     "view_url"},
    {"takeover", A_BOOL, false, 0, 0,
     "With view: also takeover_url, whose view takes mouse and keyboard (a person takes over "
     "for a login or a CAPTCHA)"},
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
  uint64_t memory = agsx_browser_default_memory();
  if (mem && agsx_parse_size(mem, &memory, err) < 0)
    return agsx_error_wrap(err, "memory");
  if (agsx_mcp_room(s, 1, err) < 0)
    return -1;
  bool takeover = arg_bool(a, "takeover"), with_view = takeover || arg_bool(a, "view");
  struct agsx_browser_view view;
  if (with_view)
    agsx_browser_view_new(&view, takeover);
  _cleanup_strv_ char **argv = agsx_browser_argv(NULL, 0, with_view ? &view : NULL),
                      **labels = NULL;
  agsx_labels_set(&labels, AGSX_MCP_LABEL_SESSION, s->session);
  if (arg_bool(a, "keep"))
    agsx_labels_set(&labels, AGSX_MCP_LABEL_KEEP, "true");
  /* HOME and the profile in its writable /tmp; the view's tokens. */
  _cleanup_strv_ char **env = agsx_browser_env(with_view ? &view : NULL);
  char *ports[] = {(char *)"127.0.0.1:0:" AGSX_BROWSER_CDP_PORT_STR,
                   with_view ? (char *)"127.0.0.1:0:" AGSX_BROWSER_VIEW_PORT_STR : NULL, NULL};
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
  struct sockaddr_storage addr, vaddr;
  char hostport[80], vhostport[80];
  struct agsx_cdp_version v = {0};
  struct alive al = {s, id};
  uint64_t bound = timeout < AGSX_BROWSER_READY_SEC ? timeout : AGSX_BROWSER_READY_SEC;
  agsx_mcp_progress(s, 1, 0, "starting Chromium");
  if (agsx_browser_published(s->statefd, id, AGSX_BROWSER_CDP_PORT, &addr, err) < 0 ||
      (agsx_sockaddr_format(&addr, hostport, sizeof(hostport)),
       agsx_browser_wait(&addr, hostport, bound, running, &al, NULL, &v, err) < 0) ||
      (with_view &&
       (agsx_browser_published(s->statefd, id, AGSX_BROWSER_VIEW_PORT, &vaddr, err) < 0 ||
        (agsx_sockaddr_format(&vaddr, vhostport, sizeof(vhostport)),
         agsx_browser_view_wait(&vaddr, vhostport, bound, running, &al, NULL, err) < 0)))) {
    _cleanup_free_ char *why =
        agsx_error_errno(err) == ESRCH ? agsx_browser_last_error(s->statefd, id) : NULL;
    if (why) {
      _cleanup_free_ char *msg = xstrdup((*err)->msg);
      agsx_error_free(err);
      agsx_error_set_quiet(err, ESRCH, "%s; it said: %s", msg, why);
    }
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
    if (with_view) {
      _cleanup_free_ char *vu = agsx_browser_view_url(vhostport, view.token, true);
      _cleanup_free_ char *tu =
          takeover ? agsx_browser_view_url(vhostport, view.takeover_token, false) : NULL;
      agsx_json_kv_str(g, "view_url", vu);
      agsx_json_kv_str(g, "takeover_url", tu);
    }
    yajl_gen_map_close(g);
    agsx_info("mcp: session %s: started browser %.12s (%s)", s->session, id, ws);
    agsx_record_clear(&rec);
  }
  agsx_cdp_version_clear(&v);
  if (with_view)
    explicit_bzero(&view, sizeof(view));
  return r;
}

/* ---- a page of a browser of the session ------------------------------------------------------- */

#define IO_MS 15000              /* one DevTools command's bound */
#define TEXT_MAX (1u << 20)      /* page text returned */
#define SHOT_MAX (16u << 20)     /* decoded screenshot bytes */
#define NAVIGATE_WAIT_DEFAULT 30 /* seconds for the page to load */

struct page {
  struct agsx_cdp *c;
  char *sid; /* the attached page's session */
};

static void page_close(struct page *p) {
  agsx_cdp_close(p->c);
  free(p->sid);
  *p = (struct page){0};
}

/* METHOD in the page (or the browser, when SID is NULL): its result. */
static yajl_val cdp(struct agsx_cdp *c, const char *sid, const char *method, const char *params,
                    int ms, agsx_error_t *err) {
  yajl_val res = NULL;
  agsx_cdp_call(c, sid, method, params, ms, &res, err);
  return res;
}

/* Connects to browser SANDBOX of the session and attaches to its first
 * page, making one when it has none. */
static int page_open(struct agsx_mcp *s, const char *sandbox, struct page *p, agsx_error_t *err) {
  struct agsx_record rec;
  if (agsx_mcp_find(s, sandbox, &rec, err) < 0)
    return -1;
  struct sockaddr_storage addr;
  char hostport[80], id[33];
  memcpy(id, rec.id, sizeof(id));
  agsx_record_clear(&rec);
  if (agsx_browser_published(s->statefd, id, AGSX_BROWSER_CDP_PORT, &addr, err) < 0)
    return agsx_error_set_quiet(
        err, EINVAL, "sandbox `%.64s` is not a browser (start one with browser_start)", sandbox);
  agsx_sockaddr_format(&addr, hostport, sizeof(hostport));
  struct agsx_cdp_version v = {0};
  int r = agsx_browser_wait(&addr, hostport, 5, NULL, NULL, NULL, &v, err);
  if (r == 0)
    r = agsx_cdp_open(&addr, hostport, v.ws_path, IO_MS, &p->c, err);
  agsx_cdp_version_clear(&v);
  if (r < 0)
    return agsx_error_wrap(err, "the browser's DevTools endpoint");
  _cleanup_json_ yajl_val t = cdp(p->c, NULL, "Target.getTargets", NULL, IO_MS, err);
  if (t == NULL)
    return -1;
  const char *target = NULL;
  yajl_val infos = agsx_json_get_array(t, "targetInfos");
  for (size_t i = 0; infos && i < infos->u.array.len && !target; i++) {
    const char *type = agsx_json_get_string(infos->u.array.values[i], "type");
    if (type && strcmp(type, "page") == 0)
      target = agsx_json_get_string(infos->u.array.values[i], "targetId");
  }
  _cleanup_json_ yajl_val made = NULL;
  if (target == NULL) {
    made = cdp(p->c, NULL, "Target.createTarget", "{\"url\":\"about:blank\"}", IO_MS, err);
    target = made ? agsx_json_get_string(made, "targetId") : NULL;
    if (target == NULL)
      return made ? agsx_error_set_quiet(err, EPROTO, "the browser made no page") : -1;
  }
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "targetId", target);
  agsx_json_kv_bool(g, "flatten", true);
  yajl_gen_map_close(g);
  size_t len;
  _cleanup_free_ char *params = agsx_json_gen_steal(g, &len);
  _cleanup_json_ yajl_val at = cdp(p->c, NULL, "Target.attachToTarget", params, IO_MS, err);
  const char *sid = at ? agsx_json_get_string(at, "sessionId") : NULL;
  if (sid == NULL)
    return at ? agsx_error_set_quiet(err, EPROTO, "the browser gave no session for its page") : -1;
  p->sid = xstrdup(sid);
  return 0;
}

/* EXPR evaluated in the page (a promise awaited): its value, parsed, in
 * *RET_TREE, the value itself (NULL: undefined) in *RET. A thrown
 * exception fails with its text. */
static int page_eval(struct page *p, const char *expr, int ms, yajl_val *ret_tree, yajl_val *ret,
                     agsx_error_t *err) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "expression", expr);
  agsx_json_kv_bool(g, "returnByValue", true);
  agsx_json_kv_bool(g, "awaitPromise", true);
  yajl_gen_map_close(g);
  size_t len;
  _cleanup_free_ char *params = agsx_json_gen_steal(g, &len);
  yajl_val t = cdp(p->c, p->sid, "Runtime.evaluate", params, ms, err);
  if (t == NULL)
    return -1;
  yajl_val ex = agsx_json_get(t, "exceptionDetails");
  if (ex) {
    const char *text = agsx_json_get_string(agsx_json_get(ex, "exception"), "description");
    agsx_error_set_quiet(err, EINVAL, "the page threw: %.500s",
                         text ? text : agsx_json_get_string(ex, "text"));
    yajl_tree_free(t);
    return -1;
  }
  *ret_tree = t;
  *ret = agsx_json_get(agsx_json_get(t, "result"), "value");
  return 0;
}

/* A JavaScript expression: the element SELECTOR names, scrolled into view,
 * then EXPR_TAIL applied to it (as `el`); an error when there is none. */
static char *on_element(const char *selector, const char *tail) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  agsx_json_str(g, selector); /* a JSON string is a JavaScript string literal */
  size_t len;
  _cleanup_free_ char *lit = agsx_json_gen_steal(g, &len);
  return xasprintf("(() => { const el = document.querySelector(%s); if (!el) throw new "
                   "Error('no element matches the selector'); el.scrollIntoView({block: "
                   "'center', inline: 'center'}); %s })()",
                   lit, tail);
}

/* The page's URL and title into G (an open map). */
static void gen_where(struct page *p, yajl_gen g) {
  yajl_val t = NULL, v = NULL;
  agsx_error_t e = NULL;
  const char *url = "", *title = "";
  if (page_eval(p, "[location.href, document.title]", IO_MS, &t, &v, &e) == 0 && YAJL_IS_ARRAY(v) &&
      v->u.array.len == 2) {
    url = YAJL_GET_STRING(v->u.array.values[0]) ? YAJL_GET_STRING(v->u.array.values[0]) : "";
    title = YAJL_GET_STRING(v->u.array.values[1]) ? YAJL_GET_STRING(v->u.array.values[1]) : "";
  }
  agsx_error_free(&e);
  agsx_json_kv_str(g, "url", url);
  agsx_json_kv_str(g, "title", title);
  yajl_tree_free(t);
}

/* ---- browser_navigate -------------------------------------------------------------------------- */

static const struct arg navigate_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The browser's sandbox (browser_start's sandbox.id)"},
    {"url", A_STR, true, 0, 0,
     "Where to go: http(s)://, data: or about:; the browser reaches what its network allows "
     "(internal: only its own sandbox, e.g. http://127.0.0.1:8000/ of a server started there)"},
    {"wait", A_INT, false, 0, 300, "Seconds to wait for the page to load (default 30)"},
    {0},
};

static int navigate_in(struct page *p, struct agsx_mcp *s, yajl_val a, yajl_gen g,
                       agsx_error_t *err) {
  _cleanup_gen_ yajl_gen pg = agsx_json_gen_new(false);
  yajl_gen_map_open(pg);
  agsx_json_kv_str(pg, "url", arg_str(a, "url"));
  yajl_gen_map_close(pg);
  size_t len;
  _cleanup_free_ char *params = agsx_json_gen_steal(pg, &len);
  _cleanup_json_ yajl_val nav = cdp(p->c, p->sid, "Page.navigate", params, IO_MS, err);
  if (nav == NULL)
    return -1;
  const char *failed = agsx_json_get_string(nav, "errorText");
  if (failed && *failed) {
    agsx_error_set_quiet(err, EIO, "the page did not load: %.200s", failed);
    return -1;
  }
  /* Loaded: document.readyState "complete", polled. */
  int64_t until = agsx_mono_ns() + arg_int(a, "wait", NAVIGATE_WAIT_DEFAULT) * 1000000000LL;
  bool loaded = false;
  for (int n = 0; !loaded; n++) {
    yajl_val t = NULL, v = NULL;
    agsx_error_t e = NULL;
    if (page_eval(p, "document.readyState", IO_MS, &t, &v, &e) == 0) {
      const char *state = YAJL_GET_STRING(v);
      loaded = state && strcmp(state, "complete") == 0;
    }
    agsx_error_free(&e);
    yajl_tree_free(t);
    if (loaded || agsx_mono_ns() >= until)
      break;
    agsx_mcp_progress(s, n + 1, 0, "waiting for the page to load");
    usleep(100000);
  }
  yajl_gen_map_open(g);
  gen_where(p, g);
  agsx_json_kv_bool(g, "loaded", loaded);
  yajl_gen_map_close(g);
  return 0;
}

static int navigate(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  struct page p = {0};
  int rc = page_open(s, arg_str(a, "sandbox"), &p, err) < 0 ? -1 : navigate_in(&p, s, a, g, err);
  page_close(&p);
  return rc;
}

/* ---- browser_screenshot ------------------------------------------------------------------------ */

static const struct arg shot_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The browser's sandbox"},
    {"width", A_INT, false, 16, 4096, "Viewport width in CSS pixels (default: as it is, 800)"},
    {"height", A_INT, false, 16, 4096, "Viewport height (default: as it is, 600)"},
    {"full_page", A_BOOL, false, 0, 0, "The whole page, not only the viewport"},
    {0},
};

/* B64 (the browser's) decodes to a PNG: its size from IHDR. B64 is then
 * nothing but the standard alphabet, safe to put in JSON as it is. */
static bool png_size(const char *b64, int64_t *w, int64_t *h) {
  if (strpbrk(b64, "-_"))
    return false;
  char *bytes = NULL;
  size_t n = 0;
  agsx_error_t e = NULL;
  bool ok = agsx_base64_decode(b64, SHOT_MAX, &bytes, &n, &e) == 0 && n >= 33 &&
            memcmp(bytes, "\x89PNG\r\n\x1a\n", 8) == 0 && memcmp(bytes + 12, "IHDR", 4) == 0;
  if (ok) {
    const unsigned char *u = (const unsigned char *)bytes;
    *w = (int64_t)u[16] << 24 | u[17] << 16 | u[18] << 8 | u[19];
    *h = (int64_t)u[20] << 24 | u[21] << 16 | u[22] << 8 | u[23];
  }
  agsx_error_free(&e);
  free(bytes);
  return ok;
}

static int screenshot_in(struct page *p, struct agsx_mcp *s, yajl_val a, yajl_gen g,
                         agsx_error_t *err) {
  if (agsx_json_get(a, "width") || agsx_json_get(a, "height")) {
    _cleanup_free_ char *params =
        xasprintf("{\"width\":%lld,\"height\":%lld,\"deviceScaleFactor\":1,\"mobile\":false}",
                  (long long)arg_int(a, "width", 800), (long long)arg_int(a, "height", 600));
    _cleanup_json_ yajl_val m =
        cdp(p->c, p->sid, "Emulation.setDeviceMetricsOverride", params, IO_MS, err);
    if (m == NULL)
      return -1;
  }
  _cleanup_json_ yajl_val shot =
      cdp(p->c, p->sid, "Page.captureScreenshot",
          arg_bool(a, "full_page") ? "{\"format\":\"png\",\"captureBeyondViewport\":true}"
                                   : "{\"format\":\"png\"}",
          IO_MS * 2, err);
  if (shot == NULL)
    return -1;
  const char *data = agsx_json_get_string(shot, "data");
  int64_t w = 0, h = 0;
  if (data == NULL || !png_size(data, &w, &h)) {
    agsx_error_set_quiet(err, EPROTO, "the browser's screenshot is no PNG (or over 16 MiB)");
    return -1;
  }
  yajl_gen_map_open(g);
  gen_where(p, g);
  agsx_json_kv_int(g, "width", w);
  agsx_json_kv_int(g, "height", h);
  agsx_json_kv_int(g, "bytes", (int64_t)(strlen(data) / 4 * 3));
  yajl_gen_map_close(g);
  _cleanup_free_ char *item =
      xasprintf(",{\"type\":\"image\",\"mimeType\":\"image/png\",\"data\":\"%s\"}", data);
  agsx_mcp_add_content(s, item);
  return 0;
}

static int screenshot(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  struct page p = {0};
  int rc = page_open(s, arg_str(a, "sandbox"), &p, err) < 0 ? -1 : screenshot_in(&p, s, a, g, err);
  page_close(&p);
  return rc;
}

/* ---- browser_click, browser_type --------------------------------------------------------------- */

static const struct arg click_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The browser's sandbox"},
    {"selector", A_STR, false, 0, 0, "A CSS selector: the element's centre is clicked"},
    {"x", A_NUM, false, 0, 100000, "Or the point to click, in CSS pixels of the viewport"},
    {"y", A_NUM, false, 0, 100000, "(with x)"},
    {0},
};

/* A left click at X, Y: the mouse moved there, pressed, released. */
static int click_at(struct page *p, double x, double y, agsx_error_t *err) {
  static const char *const kinds[] = {"mouseMoved", "mousePressed", "mouseReleased"};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(kinds); i++) {
    _cleanup_free_ char *params =
        xasprintf("{\"type\":\"%s\",\"x\":%.2f,\"y\":%.2f,\"button\":\"%s\",\"clickCount\":%d}",
                  kinds[i], x, y, i ? "left" : "none", i ? 1 : 0);
    _cleanup_json_ yajl_val r = cdp(p->c, p->sid, "Input.dispatchMouseEvent", params, IO_MS, err);
    if (r == NULL)
      return -1;
  }
  return 0;
}

static int click_in(struct page *p, struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  const char *sel = arg_str(a, "selector");
  yajl_val x = agsx_json_get(a, "x"), y = agsx_json_get(a, "y");
  if (!sel == !(x && y))
    return agsx_error_set_quiet(err, EINVAL, "give selector, or x and y");
  double px = x ? x->u.number.d : 0, py = y ? y->u.number.d : 0;
  if (sel) {
    _cleanup_free_ char *expr = on_element(
        sel, "const r = el.getBoundingClientRect(); return [r.left + r.width / 2, r.top + "
             "r.height / 2];");
    yajl_val t = NULL, v = NULL;
    if (page_eval(p, expr, IO_MS, &t, &v, err) < 0)
      return -1;
    bool ok = YAJL_IS_ARRAY(v) && v->u.array.len == 2 && YAJL_IS_NUMBER(v->u.array.values[0]) &&
              YAJL_IS_NUMBER(v->u.array.values[1]);
    if (ok) {
      px = YAJL_GET_DOUBLE(v->u.array.values[0]);
      py = YAJL_GET_DOUBLE(v->u.array.values[1]);
    }
    yajl_tree_free(t);
    if (!ok) {
      agsx_error_set_quiet(err, EPROTO, "the element's position is unknown");
      return -1;
    }
  }
  if (click_at(p, px, py, err) < 0)
    return -1;
  yajl_gen_map_open(g);
  gen_where(p, g);
  agsx_json_key(g, "x");
  yajl_gen_double(g, px);
  agsx_json_key(g, "y");
  yajl_gen_double(g, py);
  yajl_gen_map_close(g);
  return 0;
}

static int click(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  struct page p = {0};
  int rc = page_open(s, arg_str(a, "sandbox"), &p, err) < 0 ? -1 : click_in(&p, s, a, g, err);
  page_close(&p);
  return rc;
}

static const struct arg type_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The browser's sandbox"},
    {"text", A_STR, true, 0, 0, "What to type (inserted as the keyboard would, into the focus)"},
    {"selector", A_STR, false, 0, 0, "A CSS selector of the field to focus first"},
    {"enter", A_BOOL, false, 0, 0, "Press Enter afterwards (submits a form)"},
    {0},
};

static int type_in(struct page *p, struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  const char *sel = arg_str(a, "selector");
  if (sel) {
    _cleanup_free_ char *expr = on_element(sel, "el.focus(); return true;");
    yajl_val t = NULL, v = NULL;
    if (page_eval(p, expr, IO_MS, &t, &v, err) < 0)
      return -1;
    yajl_tree_free(t);
  }
  _cleanup_gen_ yajl_gen tg = agsx_json_gen_new(false);
  yajl_gen_map_open(tg);
  agsx_json_kv_str(tg, "text", arg_str(a, "text"));
  yajl_gen_map_close(tg);
  size_t len;
  _cleanup_free_ char *params = agsx_json_gen_steal(tg, &len);
  _cleanup_json_ yajl_val r = cdp(p->c, p->sid, "Input.insertText", params, IO_MS, err);
  if (r == NULL)
    return -1;
  if (arg_bool(a, "enter")) {
    static const char *const kinds[] = {"keyDown", "keyUp"};
    for (size_t i = 0; i < AGSX_ARRAY_SIZE(kinds); i++) {
      _cleanup_free_ char *kp = xasprintf(
          "{\"type\":\"%s\",\"key\":\"Enter\",\"code\":\"Enter\",\"windowsVirtualKeyCode\":13%s}",
          kinds[i], i ? "" : ",\"text\":\"\\r\"");
      _cleanup_json_ yajl_val k = cdp(p->c, p->sid, "Input.dispatchKeyEvent", kp, IO_MS, err);
      if (k == NULL)
        return -1;
    }
  }
  yajl_gen_map_open(g);
  gen_where(p, g);
  agsx_json_kv_int(g, "typed", (int64_t)strlen(arg_str(a, "text")));
  yajl_gen_map_close(g);
  return 0;
}

static int type(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  struct page p = {0};
  int rc = page_open(s, arg_str(a, "sandbox"), &p, err) < 0 ? -1 : type_in(&p, s, a, g, err);
  page_close(&p);
  return rc;
}

/* ---- browser_text ------------------------------------------------------------------------------ */

static const struct arg text_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The browser's sandbox"},
    {"selector", A_STR, false, 0, 0, "Only this element's text (default: the whole body)"},
    {0},
};

static int text_in(struct page *p, struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  const char *sel = arg_str(a, "selector");
  _cleanup_free_ char *expr =
      sel ? on_element(sel, "return el.innerText;")
          : xstrdup(
                "document.body ? document.body.innerText : document.documentElement.textContent");
  yajl_val t = NULL, v = NULL;
  if (page_eval(p, expr, IO_MS, &t, &v, err) < 0)
    return -1;
  const char *txt = YAJL_GET_STRING(v) ? YAJL_GET_STRING(v) : "";
  size_t n = strlen(txt);
  bool truncated = n > TEXT_MAX;
  if (truncated) /* at a character's start (the text is UTF-8: yajl checked it) */
    for (n = TEXT_MAX; n > 0 && ((unsigned char)txt[n] & 0xC0) == 0x80; n--) {
    }
  _cleanup_free_ char *cut = xstrndup(txt, n);
  yajl_gen_map_open(g);
  gen_where(p, g);
  agsx_json_kv_str(g, "text", cut);
  agsx_json_kv_bool(g, "truncated", truncated);
  yajl_gen_map_close(g);
  yajl_tree_free(t);
  return 0;
}

static int text(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  struct page p = {0};
  int rc = page_open(s, arg_str(a, "sandbox"), &p, err) < 0 ? -1 : text_in(&p, s, a, g, err);
  page_close(&p);
  return rc;
}

#define WHERE_PROPS "\"url\":{\"type\":\"string\"},\"title\":{\"type\":\"string\"}"

const struct tool agsx_mcp_browser_tools[] = {
    {"browser_start", "Start a browser",
     "Start headless Chromium in a new sandbox of this session (user 1000, 2g, no network "
     "unless asked for and allowed) and wait until its DevTools endpoint answers; returns the "
     "sandbox and ws_url, the Chrome DevTools Protocol WebSocket URL (Playwright's "
     "connectOverCDP, Puppeteer's connect) on the host's loopback. With view, Chromium runs "
     "headed and view_url is a live view for a person (noVNC, view only; takeover_url with "
     "takeover takes input): hand it to the user to watch or to log in. Stop it with "
     "sandbox_kill.",
     start_args,
     "{\"type\":\"object\",\"properties\":{\"sandbox\":" SANDBOX_SCHEMA
     ",\"ws_url\":{\"type\":\"string\"},\"http_url\":{\"type\":\"string\"},\"browser\":{\"type\":"
     "\"string\",\"description\":\"Chromium's version\"},\"view_url\":{\"type\":[\"string\","
     "\"null\"]},\"takeover_url\":{\"type\":[\"string\",\"null\"]}},\"required\":[\"sandbox\","
     "\"ws_url\",\"http_url\",\"browser\"]}",
     false, false, browser_start},
    {"browser_navigate", "Go to a URL",
     "Load a URL in the browser's page and wait for it to load; returns the page's url and "
     "title.",
     navigate_args,
     "{\"type\":\"object\",\"properties\":{" WHERE_PROPS ",\"loaded\":{\"type\":\"boolean\"}},"
     "\"required\":[\"url\",\"title\",\"loaded\"]}",
     false, false, navigate},
    {"browser_screenshot", "Screenshot the page",
     "A PNG of the browser's page (image content), optionally at a viewport size or of the "
     "whole page; returns its width and height.",
     shot_args,
     "{\"type\":\"object\",\"properties\":{" WHERE_PROPS
     ",\"width\":{\"type\":\"integer\"},\"height\":{\"type\":\"integer\"},\"bytes\":{\"type\":"
     "\"integer\"}},\"required\":[\"url\",\"title\",\"width\",\"height\",\"bytes\"]}",
     true, false, screenshot},
    {"browser_click", "Click in the page",
     "Click the element a CSS selector names (at its centre, scrolled into view) or a point "
     "of the viewport, with real mouse events.",
     click_args,
     "{\"type\":\"object\",\"properties\":{" WHERE_PROPS
     ",\"x\":{\"type\":\"number\"},\"y\":{\"type\":\"number\"}},\"required\":[\"url\",\"title\","
     "\"x\",\"y\"]}",
     false, false, click},
    {"browser_type", "Type into the page",
     "Type text into the focused element, or into the field a CSS selector names; optionally "
     "press Enter.",
     type_args,
     "{\"type\":\"object\",\"properties\":{" WHERE_PROPS
     ",\"typed\":{\"type\":\"integer\",\"description\":\"bytes\"}},\"required\":[\"url\","
     "\"title\",\"typed\"]}",
     false, false, type},
    {"browser_text", "Read the page's text",
     "The text of the browser's page as a person sees it (innerText), or of one element; at "
     "most 1 MiB.",
     text_args,
     "{\"type\":\"object\",\"properties\":{" WHERE_PROPS
     ",\"text\":{\"type\":\"string\"},\"truncated\":{\"type\":\"boolean\"}},\"required\":["
     "\"url\",\"title\",\"text\",\"truncated\"]}",
     true, false, text},
    {0},
};
