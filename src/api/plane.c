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
#define LABEL_PREFIX "e2b."
#define LIST_LIMIT_MAX 1000

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
    agsx_json_kv_str(g, "domain", NULL);
  }
  if (how != SHAPE_SANDBOX) {
    gen_time(g, "startedAt", r->started);
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
    agsx_json_kv_str(g, "onTimeout", "kill");
    agsx_json_kv_bool(g, "autoResume", false);
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
  if (strcmp(tmpl, "base") == 0)
    return "host";
  return tmpl;
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
  if (name == NULL || q->egress || q->volumes)
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
  if (strcmp(want, pc.network ? pc.network : "internal") == 0 && strcmp(pc.image, q->image) == 0) {
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
  };
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
  if (body == NULL)
    agsx_respond_error(r, 400, "invalid request body: %s", err->msg);
  else if (agsx_api_egress_parse(net, &rules, &status, &err) < 0)
    agsx_respond_error(r, (unsigned)status, "%s", err->msg);
  else {
    for (size_t i = 0; rules && rules[i] && err == NULL; i++) {
      struct agsx_egress_rule er;
      if (agsx_egress_rule_parse_line(rules[i], &er, &err) == 0)
        agsx_egress_append(&e, &er, &err);
    }
    if (err)
      agsx_respond_error(r, 400, "%s", err->msg);
    else if (agsx_net_egress_update(r->s->cfg->root, r->s->cfg->state, rec.id, rec.network,
                                    rec.address, &e, &cut, &err) < 0)
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
  if (ap && YAJL_IS_TRUE(ap)) {
    agsx_respond_error(r, 501, "agsx: pausing on timeout is not supported (sandboxes are killed)");
    return;
  }
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

static void metrics(struct req *r, const char *e2b_id) {
  struct agsx_record rec;
  if (!find(r, e2b_id, &rec))
    return;
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
  gen_time(g, "timestamp", now);
  agsx_json_kv_int(g, "timestampUnix", now);
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

static int cmp_started(const void *a, const void *b) {
  const struct agsx_record *x = a, *y = b;
  return x->started < y->started ? -1 : x->started > y->started ? 1 : strcmp(x->id, y->id);
}

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
  bool want_running = !state || agsx_api_list_has(state, "running");
  bool want_paused = !state || agsx_api_list_has(state, "paused");
  long limit = LIST_LIMIT_MAX;
  const char *l = agsx_req_query(r, "limit");
  if (v2 && l) {
    char *end;
    limit = strtol(l, &end, 10);
    if (*end || limit < 1 || limit > LIST_LIMIT_MAX) {
      agsx_respond_error(r, 400, "limit must be 1 to %d", LIST_LIMIT_MAX);
      return;
    }
  }
  const char *next = v2 ? agsx_req_query(r, "nextToken") : NULL;
  const char *order = agsx_req_query(r, "order");
  bool desc = order && strcmp(order, "desc") == 0;
  struct agsx_record *v = NULL;
  size_t n = agsx_state_load(r->s->statefd, 0, &v);
  qsort(v, n, sizeof(*v), cmp_started);
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_array_open(g);
  long count = 0;
  bool past = next == NULL;
  char last[33] = "";
  _cleanup_free_ char *more = NULL;
  for (size_t k0 = 0; k0 < n; k0++) {
    size_t k = desc ? n - 1 - k0 : k0;
    struct agsx_record *x = &v[k];
    if (x->status != AGSX_STATUS_RUNNING || x->stop_request ||
        !agsx_label_get(x->labels, LABEL_TEMPLATE))
      continue;
    if (!(x->paused ? want_paused : want_running))
      continue;
    bool match = true;
    for (size_t j = 0; filters && filters[j] && match; j++)
      match = agsx_labels_match(x->labels, filters[j]);
    if (!match)
      continue;
    if (!past) { /* the token is the id of the page's last sandbox */
      past = strcmp(x->id, next) == 0;
      continue;
    }
    if (count == limit) {
      more = xstrdup(last);
      break;
    }
    gen_sandbox(r->s, g, x, SHAPE_LISTED);
    snprintf(last, sizeof(last), "%s", x->id);
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
    agsx_mhd.add_response_header(resp, "X-Next-Token", more);
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
