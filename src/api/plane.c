/* agsx — api: E2B's control plane (e2b-protocol.md §2) over the lifecycle,
 * state, control, freeze and stats modules. Sandboxes it made carry the
 * label e2b.template; their E2B metadata are their other labels. */
#include "config.h"

#include "api/api-internal.h"
#include "api/auth.h"
#include "api/body.h"
#include "api/spawn.h"
#include "image/image.h"
#include "image/store.h"
#include "net/egress.h"
#include "net/network.h"
#include "sandbox/control.h"
#include "sandbox/freeze.h"
#include "sandbox/pool.h"
#include "sandbox/stats.h"

#include <string.h>
#include <sys/stat.h>

#define CLIENT_ID "6532622b" /* what E2B always sends; Python requires the field */
#define LABEL_TEMPLATE "e2b.template"
#define LABEL_INTERNET "e2b.internet"
#define LABEL_AUTORESUME AGSX_API_LABEL_AUTORESUME
#define LABEL_PREFIX "e2b."
#define LIST_LIMIT_MAX 1000
#define LIST_LIMIT_DEFAULT 100 /* E2B's */

/* ---- sandboxes -------------------------------------------------------------------------- */

static bool valid_e2b_id(const char *s) {
  size_t n = strlen(s);
  return (n == 20 || n == 32) && strspn(s, "0123456789abcdef") == n;
}

static struct agsx_api_id *id_slot(struct server *s, const char *e2b_id) {
  if (s->ids == NULL)
    s->ids = xzalloc(AGSX_API_ID_CACHE * sizeof(*s->ids));
  uint32_t h = 2166136261u; /* FNV-1a of the first 20 digits */
  for (size_t i = 0; i < 20 && e2b_id[i]; i++)
    h = (h ^ (unsigned char)e2b_id[i]) * 16777619u;
  return &s->ids[h % AGSX_API_ID_CACHE];
}

/* The full id of E2B_ID: the cache's if its directory is still there,
 * else agsx_state_resolve's (which then goes into the cache). */
static int resolve_id(struct server *s, const char *e2b_id, char id[33], agsx_error_t *err) {
  struct agsx_api_id *c = strlen(e2b_id) == 20 ? id_slot(s, e2b_id) : NULL;
  struct stat st;
  if (c && strcmp(c->e2b, e2b_id) == 0 &&
      fstatat(s->statefd, c->id, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    memcpy(id, c->id, 33);
    return 0;
  }
  if (agsx_state_resolve(s->statefd, e2b_id, id, err) < 0)
    return -1;
  if (c) {
    memcpy(c->e2b, e2b_id, 21);
    memcpy(c->id, id, 33);
  }
  return 0;
}

void agsx_api_remember_id(struct server *s, const char id[33]) {
  char e2b[21];
  snprintf(e2b, sizeof(e2b), "%.20s", id);
  struct agsx_api_id *c = id_slot(s, e2b);
  memcpy(c->e2b, e2b, 21);
  memcpy(c->id, id, 33);
}

int agsx_api_find_sandbox(struct server *s, const char *e2b_id, struct agsx_record *ret,
                          agsx_error_t *err) {
  if (!valid_e2b_id(e2b_id))
    return agsx_error_set(err, ENOENT, "sandbox `%.40s` not found", e2b_id);
  char id[33];
  agsx_error_t e = NULL;
  if (resolve_id(s, e2b_id, id, &e) < 0) {
    agsx_error_free(&e);
    return agsx_error_set(err, ENOENT, "sandbox `%s` not found", e2b_id);
  }
  if (agsx_record_read(s->statefd, id, ret, &e) < 0) {
    agsx_error_free(&e);
    return agsx_error_set(err, ENOENT, "sandbox `%s` not found", e2b_id);
  }
  if (ret->status != AGSX_STATUS_RUNNING || ret->stop_request ||
      !agsx_label_get(ret->labels, LABEL_TEMPLATE) || !agsx_proc_ref_alive(&ret->supervisor)) {
    agsx_record_clear(ret);
    return agsx_error_set(err, ENOENT, "sandbox `%s` not found", e2b_id);
  }
  return 0;
}

static void gen_metadata(yajl_gen g, char *const *labels) {
  agsx_json_key(g, "metadata");
  yajl_gen_map_open(g);
  for (size_t i = 0; labels && labels[i]; i++) {
    if (agsx_str_has_prefix(labels[i], LABEL_PREFIX))
      continue;
    const char *eq = strchr(labels[i], '=');
    yajl_gen_string(g, (const unsigned char *)labels[i], (size_t)(eq - labels[i]));
    agsx_json_str(g, eq + 1);
  }
  yajl_gen_map_close(g);
}

enum shape { SHAPE_SANDBOX, SHAPE_DETAIL, SHAPE_LISTED };

static void gen_time(yajl_gen g, const char *key, int64_t sec) {
  _cleanup_free_ char *t = agsx_format_rfc3339(sec);
  agsx_json_kv_str(g, key, t);
}

/* When the API reports it started: to the ns (0 in records older than the
 * field: their second). */
static int64_t started_ns(const struct agsx_record *r) {
  return r->started_ns ? r->started_ns : r->started * 1000000000LL;
}

/* With microseconds, as E2B's (Go's RFC 3339 with a fraction): two
 * sandboxes started in the same second keep their order for a client. */
static void gen_time_us(yajl_gen g, const char *key, int64_t ns) {
  _cleanup_free_ char *t = agsx_format_rfc3339(ns / 1000000000LL);
  size_t n = strlen(t);
  char buf[64];
  snprintf(buf, sizeof(buf), "%.*s.%06lldZ", (int)(n - 1), t,
           (long long)(ns % 1000000000LL / 1000));
  agsx_json_kv_str(g, key, buf);
}

static void gen_sandbox(struct server *s, yajl_gen g, const struct agsx_record *r, enum shape how) {
  char e2b_id[21], token[65], traffic[65];
  snprintf(e2b_id, sizeof(e2b_id), "%.20s", r->id);
  const char *tmpl = agsx_label_get(r->labels, LABEL_TEMPLATE);
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "sandboxID", e2b_id);
  agsx_json_kv_str(g, "templateID", tmpl);
  agsx_json_kv_str(g, "alias", tmpl);
  agsx_json_kv_str(g, "clientID", CLIENT_ID);
  agsx_json_kv_str(g, "envdVersion", AGSX_ENVD_VERSION);
  if (how != SHAPE_LISTED) {
    agsx_api_envd_token(s->key, r->id, token);
    agsx_json_kv_str(g, "envdAccessToken", token);
    /* The code interpreter's SDK sends it with every port-49999 request. */
    agsx_api_traffic_token(s->key, r->id, traffic);
    agsx_json_kv_str(g, "trafficAccessToken", traffic);
    /* The SDKs build a port's URL from it (getHost: PORT-ID.DOMAIN), over
     * their E2B_DOMAIN: the ports listener's, or null without one. */
    agsx_json_kv_str(g, "domain", s->ports_domain);
  }
  if (how != SHAPE_SANDBOX) {
    gen_time_us(g, "startedAt", started_ns(r));
    gen_time(g, "endAt", r->deadline);
    agsx_json_kv_str(g, "state", r->paused ? "paused" : "running");
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t cpus = r->cpu_quota_us ? (int64_t)((r->cpu_quota_us + 99999) / 100000) : ncpu;
    agsx_json_kv_int(g, "cpuCount", cpus > 0 ? cpus : 1);
    int64_t mem =
        r->memory ? (int64_t)r->memory : (int64_t)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE);
    agsx_json_kv_int(g, "memoryMB", mem >> 20);
    agsx_json_kv_int(g, "diskSizeMB", (int64_t)(r->disk >> 20));
    gen_metadata(g, r->labels);
    const char *inet = agsx_label_get(r->labels, LABEL_INTERNET);
    agsx_json_kv_bool(g, "allowInternetAccess", inet && strcmp(inet, "true") == 0);
    agsx_api_gen_volume_mounts(g, r->volumes);
  }
  if (how == SHAPE_DETAIL) {
    agsx_json_key(g, "lifecycle");
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "onTimeout", r->pause_on_timeout ? "pause" : "kill");
    agsx_json_kv_bool(g, "autoResume", agsx_label_get(r->labels, LABEL_AUTORESUME) != NULL);
    yajl_gen_map_close(g);
  }
  yajl_gen_map_close(g);
}

void agsx_api_gen_sandbox(struct server *s, yajl_gen g, const struct agsx_record *r) {
  gen_sandbox(s, g, r, SHAPE_SANDBOX);
}

static void respond_sandbox(struct req *r, unsigned status, const struct agsx_record *rec,
                            enum shape how) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  gen_sandbox(r->s, g, rec, how);
  agsx_respond_json(r, status, g);
}

/* ---- bodies ------------------------------------------------------------------------------ */

yajl_val agsx_api_parse_body(struct req *r, bool connect) {
  agsx_error_t err = NULL;
  const char *buf = r->body.p ? r->body.p : "";
  size_t len = r->body.len;
  if (len == 0) {
    buf = "{}";
    len = 2;
  }
  yajl_val v = agsx_json_parse(buf, len, r->body_max ? r->body_max : AGSX_API_BODY_MAX, &err);
  if (v && !YAJL_IS_OBJECT(v)) {
    yajl_tree_free(v);
    v = NULL;
    agsx_error_set(&err, EINVAL, "the body is not a JSON object");
  }
  if (v == NULL) {
    if (connect)
      agsx_respond_connect_error(r, AGSX_CONNECT_INVALID_ARGUMENT, "invalid request: %s", err->msg);
    else
      agsx_respond_error(r, 400, "invalid request body: %s", err->msg);
  }
  agsx_error_free(&err);
  return v;
}

/* The first key of object V not in KNOWN (NULL-terminated), or NULL. */
static const char *unknown_key(yajl_val v, const char *const *known) {
  for (size_t i = 0; i < v->u.object.len; i++) {
    bool ok = false;
    for (size_t k = 0; known[k] && !ok; k++)
      ok = strcmp(v->u.object.keys[i], known[k]) == 0;
    if (!ok)
      return v->u.object.keys[i];
  }
  return NULL;
}

static bool is_null(yajl_val v) { return v == NULL || YAJL_IS_NULL(v); }

/* A timeout field: -1 after answering 400; 0 when absent. */
static int64_t body_timeout(struct req *r, yajl_val body, bool required) {
  yajl_val t = agsx_json_get(body, "timeout");
  if (is_null(t)) {
    if (required) {
      agsx_respond_error(r, 400, "timeout is required");
      return -1;
    }
    return 0;
  }
  if (!YAJL_IS_INTEGER(t) || YAJL_GET_INTEGER(t) <= 0 ||
      YAJL_GET_INTEGER(t) > AGSX_API_TIMEOUT_MAX) {
    agsx_respond_error(r, 400, "timeout must be 1 to %d seconds", AGSX_API_TIMEOUT_MAX);
    return -1;
  }
  return YAJL_GET_INTEGER(t);
}

/* ---- create ------------------------------------------------------------------------------ */

/* Whether the store has an image named NAME (normalised, as `agsx image ls`). */
static bool store_has(const struct agsx_api_config *cfg, const char *name) {
  struct agsx_store *st = NULL;
  agsx_error_t err = NULL;
  bool found = false;
  if (cfg->root && agsx_store_open(cfg->root, false, &st, &err) == 0) {
    struct agsx_store_image *v = NULL;
    size_t n = 0;
    _cleanup_free_ char *ref = agsx_image_ref_normalize(name, NULL);
    if (ref && agsx_store_list(st, &v, &n, &err) == 0) {
      for (size_t i = 0; i < n && !found; i++)
        found = v[i].ref && strcmp(v[i].ref, ref) == 0;
      agsx_store_images_free(v, n);
    }
    agsx_store_free(st);
  }
  agsx_error_free(&err);
  return found;
}

static const char *template_image(const struct agsx_api_config *cfg, const char *tmpl) {
  const char *img = NULL;
  size_t n = strlen(tmpl);
  for (size_t i = 0; cfg->templates && cfg->templates[i]; i++)
    if (strncmp(cfg->templates[i], tmpl, n) == 0 && cfg->templates[i][n] == '=')
      img = cfg->templates[i] + n + 1;
  if (img)
    return img;
  /* code-interpreter-v1: the code-interpreter image once it is built
   * (`agsx build -t code-interpreter images/code-interpreter`), else the
   * host's Python (scripts/deps.sh installs the kernel's packages). */
  if (strcmp(tmpl, "code-interpreter-v1") == 0)
    return store_has(cfg, "code-interpreter") ? "code-interpreter" : "host";
  /* base: E2B's shape (user `user`, sudo) once built (`make base-image`:
   * images/base), else the host image. */
  if (strcmp(tmpl, "base") == 0)
    return store_has(cfg, "e2b-base") ? "e2b-base" : "host";
  /* desktop (@e2b/desktop's default): E2B's shape, Xfce on Xvfb (`make
   * desktop-image`: images/desktop); no fallback, the host has no desktop. */
  if (strcmp(tmpl, "desktop") == 0 && store_has(cfg, "e2b-desktop"))
    return "e2b-desktop";
  return tmpl;
}

/* Whether TMPL's sandboxes run without no_new_privs, so that sudo works in
 * them: `serve --template NAME=IMAGE,no-new-privileges=false` (NAME in
 * cfg->new_privs), and the base alias's default, the e2b-base image, which
 * is built for passwordless sudo. */
static bool template_new_privs(const struct agsx_api_config *cfg, const char *tmpl,
                               const char *image) {
  size_t n = strlen(tmpl);
  bool mapped = false;
  for (size_t i = 0; cfg->templates && cfg->templates[i]; i++)
    mapped |= strncmp(cfg->templates[i], tmpl, n) == 0 && cfg->templates[i][n] == '=';
  if (!mapped && ((strcmp(tmpl, "base") == 0 && strcmp(image, "e2b-base") == 0) ||
                  (strcmp(tmpl, "desktop") == 0 && strcmp(image, "e2b-desktop") == 0)))
    return true;
  return mapped && agsx_strv_contains(cfg->new_privs, tmpl);
}

/* The pool configured for template TMPL (serve --pool TMPL=POOL), or NULL. */
static const char *template_pool(const struct agsx_api_config *cfg, const char *tmpl) {
  size_t n = strlen(tmpl);
  const char *pool = NULL;
  for (size_t i = 0; cfg->pools && cfg->pools[i]; i++)
    if (strncmp(cfg->pools[i], tmpl, n) == 0 && cfg->pools[i][n] == '=')
      pool = cfg->pools[i] + n + 1;
  return pool;
}

/* A parked sandbox of the template's pool, claimed as an API sandbox (no
 * command, detached, removed at its end): true with ID set. A pool that
 * does not fit the request (another network, egress rules), is empty or
 * fails the claim leaves the start to the spawner. */
static bool claim_pooled(struct req *r, const char *tmpl, const struct agsx_spawn_req *q,
                         char id[33]) {
  const struct agsx_api_config *cfg = r->s->cfg;
  const char *name = template_pool(cfg, tmpl);
  if (name == NULL || q->egress || q->pause_on_timeout || q->volumes)
    return false;
  agsx_error_t err = NULL;
  struct agsx_pool_config pc;
  if (agsx_pool_read(cfg->state, name, &pc, &err) < 0) {
    agsx_warn("serve: template %s: %s", tmpl, err->msg);
    agsx_error_free(&err);
    return false;
  }
  bool claimed = false;
  const char *want = q->network ? q->network : "internal";
  if (strcmp(want, pc.network ? pc.network : "internal") == 0 && strcmp(pc.image, q->image) == 0 &&
      pc.new_privs == q->new_privs) {
    struct agsx_claim cl = {
        .env = q->env,
        .labels = q->labels,
        .timeout = q->timeout,
        .rm = true,
        .detach = true,
        .idle = true,
    };
    struct agsx_pool_claimed got;
    int code;
    if (agsx_pool_claim(cfg->root, cfg->state, &pc, &cl, NULL, &claimed, &got, &code, &err) < 0) {
      agsx_warn("serve: template %s: pool %s: %s", tmpl, name, err->msg);
      agsx_error_free(&err);
      claimed = false;
    } else if (claimed) {
      memcpy(id, got.id, 33);
      agsx_info("serve: claimed sandbox %.20s of pool %s (template %s)", id, name, tmpl);
    } else {
      agsx_pool_refill_async(cfg->root, cfg->state, name); /* empty: refilled meanwhile */
    }
  }
  agsx_pool_config_clear(&pc);
  agsx_api_mark(&r->tm, claimed ? "claimed" : "no claim");
  return claimed;
}

static void create(struct req *r) {
  struct agsx_api_create c;
  int status;
  agsx_error_t err = NULL;
  if (agsx_api_create_parse(r->body.p, r->body.len, &c, &status, &err) < 0) {
    agsx_respond_error(r, (unsigned)status, "%s", err->msg);
    agsx_error_free(&err);
    return;
  }
  const struct agsx_api_config *cfg = r->s->cfg;
  _cleanup_strv_ char **labels = agsx_strv_concat(c.metadata, NULL);
  agsx_labels_set(&labels, LABEL_TEMPLATE, c.template_id);
  agsx_labels_set(&labels, LABEL_INTERNET, c.internet ? "true" : "false");
  if (c.auto_resume)
    agsx_labels_set(&labels, LABEL_AUTORESUME, "true");
  if (c.private_ports)
    agsx_labels_set(&labels, AGSX_API_LABEL_PRIVATE, "true");
  char id[33];
  struct agsx_record rec;
  struct agsx_spawn_req q = {
      .root = cfg->root,
      .state = cfg->state,
      .image = template_image(cfg, c.template_id),
      .env = c.env,
      .labels = labels,
      .egress = c.egress,
      .volumes = c.volumes,
      .network =
          c.internet && cfg->network && strcmp(cfg->network, "internal") != 0 ? cfg->network : NULL,
      .timeout = (uint64_t)(c.timeout ? c.timeout : AGSX_API_TIMEOUT_DEFAULT),
      .pause_on_timeout = c.pause_on_timeout,
  };
  q.new_privs = template_new_privs(cfg, c.template_id, q.image);
  if (agsx_api_volumes_check(cfg->root, c.volumes, &err) < 0)
    agsx_respond_error(r, 400, "volumeMounts: %s", err->msg);
  else if (agsx_labels_check(labels, &err) < 0)
    agsx_respond_error(r, 400, "metadata: %s", err->msg);
  else if (c.egress && q.network == NULL)
    agsx_respond_error(r, 400, "network.allowOut/denyOut: the sandbox has no internet access (%s)",
                       c.internet ? "agsx serve --network internal"
                                  : "allow_internet_access false");
  else if (!claim_pooled(r, c.template_id, &q, id) &&
           agsx_spawn(&r->s->spawner, &q, id, &status, &err) < 0 && status == 400)
    agsx_respond_error(r, 400, "template `%s`: %s", c.template_id, err->msg);
  else if (err)
    agsx_respond_error(r, 500, "start the sandbox: %s", err->msg);
  else if (agsx_api_mark(&r->tm, "started"), agsx_record_read(r->s->statefd, id, &rec, &err) < 0)
    agsx_respond_error(r, 500, "read the new sandbox's record: %s", err->msg);
  else {
    agsx_api_remember_id(r->s, id);
    agsx_info("serve: created sandbox %.20s (template %s, image %s)", id, c.template_id, q.image);
    respond_sandbox(r, 201, &rec, SHAPE_SANDBOX);
    agsx_record_clear(&rec);
  }
  agsx_error_free(&err);
  agsx_api_create_clear(&c);
}

/* ---- one sandbox ------------------------------------------------------------------------- */

static bool find(struct req *r, const char *e2b_id, struct agsx_record *rec);

/* What else an update may carry (the SDK's updateNetwork): rules and
 * egressProxy are refused (501) as at create; allow_internet_access false
 * is what E2B makes it: all traffic denied but allowOut's (as denyOut
 * 0.0.0.0/0, the SDK's allTraffic). */
static int network_update_check(yajl_val body, yajl_val net, bool *no_internet, int *status,
                                agsx_error_t *err) {
  static const char *const known[] = {
      "allowOut", "denyOut", "rules", "egressProxy", "network", "allow_internet_access", NULL};
  *status = 400;
  if (!YAJL_IS_OBJECT(body) || !YAJL_IS_OBJECT(net))
    return agsx_error_set_quiet(err, EINVAL, "the body is not a JSON object");
  const char *bad = unknown_key(body, known);
  if (bad == NULL && net != body)
    bad = unknown_key(net, known);
  if (bad)
    return agsx_error_set_quiet(err, EINVAL, "unknown field `%.64s`", bad);
  for (size_t i = 0; i < 2; i++) {
    yajl_val v = agsx_json_get(net, i ? "egressProxy" : "rules");
    if (v && !YAJL_IS_NULL(v) && !(YAJL_IS_OBJECT(v) && v->u.object.len == 0)) {
      *status = 501;
      return agsx_error_set_quiet(err, ENOTSUP, "agsx: network.%s is not supported",
                                  i ? "egressProxy" : "rules");
    }
  }
  yajl_val inet = agsx_json_get(body, "allow_internet_access");
  if (inet && !YAJL_IS_NULL(inet) && !YAJL_IS_TRUE(inet) && !YAJL_IS_FALSE(inet))
    return agsx_error_set_quiet(err, EINVAL, "allow_internet_access must be a boolean");
  *no_internet = inet && YAJL_IS_FALSE(inet);
  return 0;
}

/* PUT /sandboxes/{id}/network: {"allowOut": [...], "denyOut": [...]} (or
 * the same in a "network" object) replaces its egress rules, live, as
 * agsx update --egress-... does. */
static void update_network(struct req *r, const char *e2b_id) {
  struct agsx_record rec;
  if (!find(r, e2b_id, &rec))
    return;
  agsx_error_t err = NULL;
  int status = 400;
  _cleanup_strv_ char **rules = NULL;
  struct agsx_egress e = {0};
  _cleanup_json_ yajl_val body =
      agsx_json_parse(r->body.len ? r->body.p : "{}", r->body.len ? r->body.len : 2, 1 << 20, &err);
  yajl_val net = body && YAJL_IS_OBJECT(body) && agsx_json_get(body, "network")
                     ? agsx_json_get(body, "network")
                     : body;
  size_t cut = 0;
  bool no_internet = false;
  if (body == NULL)
    agsx_respond_error(r, 400, "invalid request body: %s", err->msg);
  else if (network_update_check(body, net, &no_internet, &status, &err) < 0)
    agsx_respond_error(r, (unsigned)status, "%s", err->msg);
  else if (agsx_api_egress_parse(net, &rules, &status, &err) < 0)
    agsx_respond_error(r, (unsigned)status, "%s", err->msg);
  else {
    bool any_allow = false;
    for (size_t i = 0; rules && rules[i]; i++)
      any_allow |= agsx_str_has_prefix(rules[i], "allow ");
    if (no_internet && !any_allow && !agsx_strv_contains(rules, "deny 0.0.0.0/0"))
      agsx_strv_push(&rules, "deny 0.0.0.0/0");
    for (size_t i = 0; rules && rules[i] && err == NULL; i++) {
      struct agsx_egress_rule er;
      if (agsx_egress_rule_parse_line(rules[i], &er, &err) == 0)
        agsx_egress_append(&e, &er, &err);
    }
    if (err)
      agsx_respond_error(r, 400, "%s", err->msg);
    else if (agsx_net_egress_update(r->s->cfg->root, r->s->cfg->state, rec.id, rec.network,
                                    rec.address, &e, 0, &cut, &err) < 0)
      agsx_respond_error(r, agsx_error_errno(&err) == EINVAL ? 400 : 500, "%s", err->msg);
    else
      agsx_respond(r, 204, NULL, "", 0);
  }
  agsx_egress_clear(&e);
  agsx_error_free(&err);
  agsx_record_clear(&rec);
}

static bool find(struct req *r, const char *e2b_id, struct agsx_record *rec) {
  agsx_error_t err = NULL;
  if (agsx_api_find_sandbox(r->s, e2b_id, rec, &err) < 0) {
    agsx_respond_error(r, 404, "sandbox \"%.40s\" not found", e2b_id);
    agsx_error_free(&err);
    return false;
  }
  return true;
}

static void kill_sandbox(struct req *r, const char *e2b_id) {
  struct agsx_record rec;
  if (!find(r, e2b_id, &rec))
    return;
  agsx_error_t err = NULL;
  int pidfd = -1;
  /* Asked, not awaited: the record says stop_request at once, so every
   * route treats the sandbox as gone while its supervisor tears it down. */
  if (agsx_control_request_stop(r->s->statefd, rec.id, &pidfd, &err) < 0) {
    if (agsx_error_errno(&err) == ESRCH)
      agsx_respond_error(r, 404, "sandbox \"%s\" not found", e2b_id);
    else
      agsx_respond_error(r, 500, "kill: %s", err->msg);
    agsx_error_free(&err);
  } else {
    agsx_api_envd_drop_sandbox(r->s, rec.id);
    agsx_respond(r, 204, NULL, "", 0);
  }
  if (pidfd >= 0)
    close(pidfd);
  agsx_record_clear(&rec);
}

static void set_timeout(struct req *r, const char *e2b_id, bool refresh) {
  _cleanup_json_ yajl_val body = agsx_api_parse_body(r, false);
  if (body == NULL)
    return;
  static const char *const known[] = {"timeout", NULL}, *const known_r[] = {"duration", NULL};
  const char *bad = unknown_key(body, refresh ? known_r : known);
  if (bad) {
    agsx_respond_error(r, 400, "unknown field `%.64s`", bad);
    return;
  }
  int64_t sec;
  if (refresh) {
    yajl_val d = agsx_json_get(body, "duration");
    sec = is_null(d) ? 60 : YAJL_IS_INTEGER(d) ? YAJL_GET_INTEGER(d) : -1;
    if (sec <= 0 || sec > 3600) {
      agsx_respond_error(r, 400, "duration must be 1 to 3600 seconds");
      return;
    }
  } else if ((sec = body_timeout(r, body, true)) < 0) {
    return;
  }
  struct agsx_record rec;
  if (!find(r, e2b_id, &rec))
    return;
  agsx_error_t err = NULL;
  struct agsx_record out;
  bool gone = false;
  if (agsx_control_set_timeout(r->s->statefd, rec.id, e2b_id, (uint64_t)sec, &out, &gone, &err) <
      0) {
    if (agsx_error_errno(&err) == ESRCH)
      agsx_respond_error(r, 404, "sandbox \"%s\" not found", e2b_id);
    else
      agsx_respond_error(r, 500, "set the timeout: %s", err->msg);
    agsx_error_free(&err);
  } else {
    agsx_record_clear(&out);
    if (gone)
      agsx_respond_error(r, 404, "sandbox \"%s\" not found", e2b_id);
    else
      agsx_respond(r, 204, NULL, "", 0);
  }
  agsx_record_clear(&rec);
}

/* Connect and resume: thaws a paused sandbox (201), else 200; a timeout
 * given lengthens the lifetime (never shortens it, as E2B's connect). */
static void connect_sandbox(struct req *r, const char *e2b_id, bool v1, bool resume) {
  _cleanup_json_ yajl_val body = agsx_api_parse_body(r, false);
  if (body == NULL)
    return;
  static const char *const known[] = {"timeout", "memory", "autoPause", "autoResume", NULL};
  const char *bad = unknown_key(body, known);
  if (bad) {
    agsx_respond_error(r, 400, "unknown field `%.64s`", bad);
    return;
  }
  yajl_val ap = agsx_json_get(body, "autoPause");
  yajl_val mem = agsx_json_get(body, "memory");
  if (mem && YAJL_IS_FALSE(mem)) {
    agsx_respond_error(r, 501, "agsx: resuming without memory (a reboot) is not supported");
    return;
  }
  int64_t sec = body_timeout(r, body, v1 && !resume);
  if (sec < 0)
    return;
  struct agsx_record rec;
  if (!find(r, e2b_id, &rec))
    return;
  if (ap && !YAJL_IS_NULL(ap) && (!YAJL_IS_TRUE(ap) && !YAJL_IS_FALSE(ap))) {
    agsx_respond_error(r, 400, "autoPause must be a boolean");
    agsx_record_clear(&rec);
    return;
  }
  if (ap && (YAJL_IS_TRUE(ap) || YAJL_IS_FALSE(ap)) && YAJL_IS_TRUE(ap) != rec.pause_on_timeout) {
    /* The supervisor has it from the start (sandbox/lifecycle.h). */
    agsx_respond_error(r, 501, "agsx: autoPause is set at create and cannot be changed");
    agsx_record_clear(&rec);
    return;
  }
  agsx_error_t err = NULL;
  bool resumed = false;
  if (rec.paused) {
    if (agsx_sandbox_unpause(r->s->statefd, rec.id, &err) < 0 &&
        agsx_error_errno(&err) != EALREADY) {
      agsx_respond_error(r, agsx_error_errno(&err) == ESRCH ? 404 : 500, "resume: %s", err->msg);
      agsx_error_free(&err);
      agsx_record_clear(&rec);
      return;
    }
    agsx_error_free(&err);
    resumed = true;
  } else if (resume) {
    agsx_respond_error(r, 409, "sandbox \"%s\" is already running", e2b_id);
    agsx_record_clear(&rec);
    return;
  }
  int64_t now = agsx_now_ns() / 1000000000LL;
  if (sec > 0 && now + sec > rec.deadline) {
    struct agsx_record out;
    bool gone = false;
    if (agsx_control_set_timeout(r->s->statefd, rec.id, e2b_id, (uint64_t)sec, &out, &gone, &err) <
        0) {
      agsx_respond_error(r, 500, "set the timeout: %s", err->msg);
      agsx_error_free(&err);
      agsx_record_clear(&rec);
      return;
    }
    agsx_record_clear(&out);
  }
  agsx_record_clear(&rec);
  if (!find(r, e2b_id, &rec))
    return;
  respond_sandbox(r, resumed ? 201 : 200, &rec, SHAPE_SANDBOX);
  agsx_record_clear(&rec);
}

bool agsx_api_autoresume(struct req *r) {
  if (!r->rec.paused || !agsx_label_get(r->rec.labels, LABEL_AUTORESUME) ||
      strcmp(r->path, "/health") == 0)
    return true;
  agsx_error_t err = NULL;
  /* A sandbox paused at its deadline gets its lifetime again from now. */
  if (agsx_sandbox_unpause(r->s->statefd, r->rec.id, &err) < 0 &&
      agsx_error_errno(&err) != EALREADY) {
    bool gone = agsx_error_errno(&err) == ESRCH;
    agsx_warn("serve: auto-resume of %s: %s", r->e2b_id, err->msg);
    agsx_error_free(&err);
    if (gone)
      agsx_api_respond_gone(r);
    else
      agsx_respond_error(r, 500, "resume sandbox \"%s\"", r->e2b_id);
    return false;
  }
  agsx_error_free(&err);
  agsx_info("serve: resumed sandbox %s on a request (autoResume)", r->e2b_id);
  r->rec.paused = false;
  return true;
}

static void pause_sandbox(struct req *r, const char *e2b_id) {
  _cleanup_json_ yajl_val body = agsx_api_parse_body(r, false);
  if (body == NULL)
    return;
  yajl_val mem = agsx_json_get(body, "memory");
  if (mem && YAJL_IS_FALSE(mem)) {
    agsx_respond_error(r, 501, "agsx: pausing without memory is not supported");
    return;
  }
  struct agsx_record rec;
  if (!find(r, e2b_id, &rec))
    return;
  agsx_error_t err = NULL;
  if (agsx_sandbox_pause(r->s->statefd, rec.id, &err) < 0) {
    int e = agsx_error_errno(&err);
    if (e == EALREADY)
      agsx_respond_error(r, 409, "sandbox \"%s\" is already paused", e2b_id);
    else if (e == ESRCH)
      agsx_respond_error(r, 404, "sandbox \"%s\" not found", e2b_id);
    else
      agsx_respond_error(r, 500, "pause: %s", err->msg);
    agsx_error_free(&err);
  } else {
    agsx_respond(r, 204, NULL, "", 0);
  }
  agsx_record_clear(&rec);
}

/* A `start` or `end` query parameter: unix seconds (0 when absent); false
 * after answering 400. */
static bool unix_param(struct req *r, const char *name, int64_t *ret) {
  const char *v = agsx_req_query(r, name);
  *ret = 0;
  if (v == NULL || *v == '\0')
    return true;
  char *end;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  if (errno || *end || n < 0 || n > (1LL << 40)) {
    agsx_respond_error(r, 400, "%s must be a time in unix seconds", name);
    return false;
  }
  *ret = n;
  return true;
}

static void metrics(struct req *r, const char *e2b_id) {
  int64_t from, to;
  if (!unix_param(r, "start", &from) || !unix_param(r, "end", &to))
    return;
  if (to && from > to)
    return agsx_respond_error(r, 400, "start must not be after end");
  struct agsx_record rec;
  if (!find(r, e2b_id, &rec))
    return;
  int64_t now0 = agsx_now_ns() / 1000000000LL;
  /* The one point is now's: none for a range that ends before the sandbox
   * started or begins after now (the server keeps no history). */
  if ((to && to < rec.started) || from > now0) {
    agsx_record_clear(&rec);
    return agsx_respond(r, 200, "application/json", "[]", 2);
  }
  agsx_error_t err = NULL;
  struct agsx_stats st;
  if (agsx_stats_sample(&rec, &st, &err) < 0) {
    agsx_respond_error(r, agsx_error_errno(&err) == ESRCH ? 404 : 500, "metrics: %s", err->msg);
    agsx_error_free(&err);
    agsx_record_clear(&rec);
    return;
  }
  int64_t now = agsx_now_ns() / 1000000000LL;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int64_t cpus = rec.cpu_quota_us ? (int64_t)((rec.cpu_quota_us + 99999) / 100000) : ncpu;
  if (cpus < 1)
    cpus = 1;
  /* One point: CPU use averaged over the sandbox's life (the server keeps
   * no history), in percent of its CPUs as E2B reports it. */
  double life = (double)(now > rec.started ? now - rec.started : 1) * 1e9;
  double pct = st.has_cpu ? (double)st.cpu_ns / life / (double)cpus * 100.0 : 0;
  uint64_t memtotal =
      rec.memory ? rec.memory : (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_array_open(g);
  yajl_gen_map_open(g);
  int64_t at = to && to < now ? to : now; /* within the range asked for */
  gen_time(g, "timestamp", at);
  agsx_json_kv_int(g, "timestampUnix", at);
  agsx_json_kv_int(g, "cpuCount", cpus);
  agsx_json_key(g, "cpuUsedPct");
  yajl_gen_double(g, pct > 100 ? 100 : pct);
  agsx_json_kv_int(g, "memUsed", (int64_t)st.memory);
  agsx_json_kv_int(g, "memTotal", (int64_t)memtotal);
  agsx_json_kv_int(g, "memCache", 0);
  agsx_json_kv_int(g, "diskUsed", (int64_t)st.disk_used);
  agsx_json_kv_int(g, "diskTotal", (int64_t)(st.disk_size ? st.disk_size : rec.disk));
  yajl_gen_map_close(g);
  yajl_gen_array_close(g);
  agsx_respond_json(r, 200, g);
  agsx_record_clear(&rec);
}

/* ---- list -------------------------------------------------------------------------------- */

/* By start (to the ns), then id: the order pages follow. */
static int cmp_started(const void *a, const void *b) {
  const struct agsx_record *x = a, *y = b;
  int64_t sx = started_ns(x), sy = started_ns(y);
  return sx < sy ? -1 : sx > sy ? 1 : strcmp(x->id, y->id);
}

/* GET /v2/sandboxes (and v1's): E2B's filters (metadata, state, template,
 * startedAfter), newest first unless order=asc, LIMIT (100 by default)
 * per page; X-Next-Token is the position after the page's last one
 * (wire.h), X-Total-Running the running ones that match, all pages. */
static void list(struct req *r, bool v2) {
  _cleanup_strv_ char **filters = NULL;
  agsx_error_t err = NULL;
  const char *q = agsx_req_query(r, "metadata");
  if (q && agsx_api_metadata_filter(q, &filters, &err) < 0) {
    agsx_respond_error(r, 400, "%s", err->msg);
    agsx_error_free(&err);
    return;
  }
  const char *state = agsx_req_query(r, "state");
  if (state && *state) {
    _cleanup_free_ char *st = xstrdup(state);
    for (char *save = NULL, *w = strtok_r(st, ",", &save); w; w = strtok_r(NULL, ",", &save))
      if (strcmp(w, "running") != 0 && strcmp(w, "paused") != 0)
        return agsx_respond_error(r, 400, "invalid state `%.32s` (running or paused)", w);
  }
  bool want_running = !state || !*state || agsx_api_list_has(state, "running");
  bool want_paused = !state || !*state || agsx_api_list_has(state, "paused");
  long limit = v2 ? LIST_LIMIT_DEFAULT : LIST_LIMIT_MAX;
  const char *l = agsx_req_query(r, "limit");
  if (v2 && l) {
    char *end;
    errno = 0;
    limit = strtol(l, &end, 10);
    if (errno || *end || end == l || limit < 1 || limit > LIST_LIMIT_MAX)
      return agsx_respond_error(r, 400, "limit must be 1 to %d", LIST_LIMIT_MAX);
  }
  const char *order = agsx_req_query(r, "order");
  if (order && strcmp(order, "asc") != 0 && strcmp(order, "desc") != 0)
    return agsx_respond_error(r, 400, "order must be asc or desc");
  bool desc = !(order && strcmp(order, "asc") == 0);
  const char *after_s = agsx_req_query(r, "startedAfter");
  int64_t after = 0;
  if (after_s && agsx_api_time_parse(after_s, &after) < 0)
    return agsx_respond_error(r, 400, "startedAfter must be an RFC 3339 time");
  const char *tmpl = agsx_req_query(r, "template");
  if (tmpl && !*tmpl)
    tmpl = NULL;
  const char *next = v2 ? agsx_req_query(r, "nextToken") : NULL;
  struct agsx_record cur = {0};
  if (next && *next && agsx_api_list_token_parse(next, &cur.started_ns, cur.id) < 0)
    return agsx_respond_error(r, 400, "invalid nextToken");
  bool has_cur = next && *next;
  struct agsx_record *v = NULL;
  size_t n = agsx_state_load(r->s->statefd, 0, &v);
  qsort(v, n, sizeof(*v), cmp_started);
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_array_open(g);
  long count = 0, running = 0;
  bool more = false;
  char last[AGSX_API_LIST_TOKEN_LEN + 1] = "";
  for (size_t k0 = 0; k0 < n; k0++) {
    size_t k = desc ? n - 1 - k0 : k0;
    struct agsx_record *x = &v[k];
    const char *t = agsx_label_get(x->labels, LABEL_TEMPLATE);
    if (x->status != AGSX_STATUS_RUNNING || x->stop_request || t == NULL)
      continue;
    if (!(x->paused ? want_paused : want_running))
      continue;
    if ((tmpl && strcmp(t, tmpl) != 0) || started_ns(x) < after)
      continue;
    bool match = true;
    for (size_t j = 0; filters && filters[j] && match; j++)
      match = agsx_labels_match(x->labels, filters[j]);
    if (!match)
      continue;
    running += !x->paused;
    /* Pages go on strictly after the token's position in this order. */
    if (has_cur && (desc ? cmp_started(x, &cur) >= 0 : cmp_started(x, &cur) <= 0))
      continue;
    if (count == limit) {
      more = true;
      continue; /* on, for X-Total-Running */
    }
    gen_sandbox(r->s, g, x, SHAPE_LISTED);
    agsx_api_list_token(started_ns(x), x->id, last);
    count++;
  }
  yajl_gen_array_close(g);
  for (size_t k = 0; k < n; k++)
    agsx_record_clear(&v[k]);
  free(v);
  size_t len;
  _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
  struct MHD_Response *resp = agsx_mhd.create_response_from_buffer(len, s, MHD_RESPMEM_MUST_COPY);
  if (resp == NULL)
    return;
  agsx_mhd.add_response_header(resp, "Content-Type", "application/json");
  if (more)
    agsx_mhd.add_response_header(resp, "X-Next-Token", last);
  if (want_running) {
    char total[24];
    snprintf(total, sizeof(total), "%ld", running);
    agsx_mhd.add_response_header(resp, "X-Total-Running", total);
  }
  agsx_respond_queue(r, 200, resp);
}

/* ---- routing ------------------------------------------------------------------------------ */

/* Splits PATH ("/a/b/c") into at most 5 segments. */
static size_t segments(char *path, char *seg[5]) {
  size_t n = 0;
  for (char *p = strtok(path, "/"); p && n < 5; p = strtok(NULL, "/"))
    seg[n++] = p;
  return strtok(NULL, "/") ? 6 : n;
}

void agsx_api_control_plane(struct req *r) {
  _cleanup_free_ char *path = xstrdup(r->path);
  char *seg[5] = {0};
  size_t n = segments(path, seg);
  const char *m = r->method;
  bool get = strcmp(m, "GET") == 0, post = strcmp(m, "POST") == 0;
  bool v2 = n > 0 && strcmp(seg[0], "v2") == 0;
  char **s = v2 ? seg + 1 : seg;
  size_t k = v2 ? n - 1 : n;
  if (n <= 5 && k >= 1 && strcmp(s[0], "sandboxes") == 0) {
    if (k == 1 && post)
      return create(r);
    if (k == 1 && get)
      return list(r, v2);
    if (k == 2 && strcmp(s[1], "metrics") == 0 && get && !v2)
      return agsx_respond_error(r, 501, "agsx: metrics of several sandboxes are not supported");
    if (k == 2 && get && !v2)
      return (void)({
        struct agsx_record rec;
        if (find(r, s[1], &rec)) {
          respond_sandbox(r, 200, &rec, SHAPE_DETAIL);
          agsx_record_clear(&rec);
        }
      });
    if (k == 2 && strcmp(m, "DELETE") == 0 && !v2)
      return kill_sandbox(r, s[1]);
    if (k == 3 && post && strcmp(s[2], "connect") == 0)
      return connect_sandbox(r, s[1], !v2, false);
    if (k == 3 && !v2) {
      const char *a = s[2];
      if (post && strcmp(a, "timeout") == 0)
        return set_timeout(r, s[1], false);
      if (post && strcmp(a, "refreshes") == 0)
        return set_timeout(r, s[1], true);
      if (post && strcmp(a, "pause") == 0)
        return pause_sandbox(r, s[1]);
      if (post && strcmp(a, "resume") == 0)
        return connect_sandbox(r, s[1], true, true);
      if (get && strcmp(a, "metrics") == 0)
        return metrics(r, s[1]);
      if (post && strcmp(a, "fork") == 0)
        return agsx_api_fork(r, s[1]);
      if (post && strcmp(a, "snapshots") == 0)
        return agsx_api_create_snapshot(r, s[1]);
      if (strcmp(m, "PUT") == 0 && strcmp(a, "network") == 0)
        return update_network(r, s[1]);
    }
    if (k == 3 && get && strcmp(s[2], "logs") == 0)
      return agsx_respond_error(r, 501, "agsx: sandbox logs are not supported (use agsx logs)");
  }
  if (n == 1 && get && strcmp(seg[0], "snapshots") == 0)
    return agsx_api_list_snapshots(r);
  /* A snapshot's id may hold a '/' (e2b-snapshots/ID:N), which the SDK
   * sends escaped and the HTTP layer decodes: the rest of the path. */
  if (strcmp(m, "DELETE") == 0 && agsx_str_has_prefix(r->path, "/templates/") &&
      r->path[strlen("/templates/")] != '\0')
    return agsx_api_delete_snapshot(r, r->path + strlen("/templates/"));
  if (n >= 1 && strcmp(seg[0], "volumes") == 0)
    return agsx_api_volumes(r, seg, n);
  if (n >= 1 && strcmp(seg[0], "secrets") == 0)
    return agsx_respond_error(r, 501,
                              "agsx: secrets are not supported: E2B resolves "
                              "${e2b.secrets.NAME} in the headers of egress requests "
                              "(network.rules) through a TLS-intercepting proxy, which "
                              "agsx does not have (see agsx-serve(1))");
  if (n >= 1 && (strcmp(seg[0], "snapshots") == 0 || strcmp(seg[0], "templates") == 0 ||
                 strcmp(seg[0], "volumecontent") == 0 ||
                 (n >= 2 && (strcmp(seg[0], "v2") == 0 || strcmp(seg[0], "v3") == 0) &&
                  strcmp(seg[1], "templates") == 0)))
    return agsx_respond_error(r, 501, "agsx: /%s is not supported", seg[0]);
  agsx_respond_error(r, 404, "no route %s %s", m, r->path);
}
