/* agsx — api: create and Start bodies (see body.h). */
#include "config.h"

#include "api/body.h"
#include "api/server.h"
#include "net/egress.h"
#include "sandbox/volume.h"
#include "state/state.h"
#include "util/json.h"

#include <string.h>

#define ARGS_MAX 4096
#define ENVS_MAX 4096

static bool is_null(yajl_val v) { return v == NULL || YAJL_IS_NULL(v); }

static bool is_empty(yajl_val v) {
  return is_null(v) || (YAJL_IS_ARRAY(v) && v->u.array.len == 0) ||
         (YAJL_IS_OBJECT(v) && v->u.object.len == 0) || (YAJL_IS_STRING(v) && *v->u.string == 0) ||
         YAJL_IS_FALSE(v);
}

static int fail(int *ret_status, int status, agsx_error_t *err, const char *fmt, const char *arg) {
  *ret_status = status;
  return agsx_error_set(err, status == 501 ? ENOTSUP : EINVAL, fmt, arg);
}

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

/* An object of strings into KEY=VALUE strings; false when it is not one. */
static bool string_map(yajl_val m, size_t max, char ***ret) {
  if (is_null(m))
    return true;
  if (!YAJL_IS_OBJECT(m) || m->u.object.len > max)
    return false;
  for (size_t i = 0; i < m->u.object.len; i++) {
    yajl_val v = m->u.object.values[i];
    const char *k = m->u.object.keys[i];
    if (!YAJL_IS_STRING(v) || *k == '\0' || strchr(k, '='))
      return false;
    _cleanup_free_ char *kv = xasprintf("%s=%s", k, v->u.string);
    agsx_strv_push(ret, kv);
  }
  return true;
}

void agsx_api_create_clear(struct agsx_api_create *c) {
  free(c->template_id);
  agsx_strv_free(c->env);
  agsx_strv_free(c->metadata);
  agsx_strv_free(c->egress);
  agsx_strv_free(c->volumes);
  memset(c, 0, sizeof(*c));
}

/* What agsx does not do is refused (501), never ignored. */
static int unsupported(yajl_val body, int *ret_status, agsx_error_t *err) {
  static const struct {
    const char *field, *what;
  } no[] = {{"mcp", "MCP gateways"}, {"iam", "IAM tokens"}};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(no); i++)
    if (!is_empty(agsx_json_get(body, no[i].field)))
      return fail(ret_status, 501, err, "agsx: %s are not supported", no[i].what);
  yajl_val net = agsx_json_get(body, "network");
  if (!is_null(net) && !YAJL_IS_OBJECT(net))
    return fail(ret_status, 400, err, "%s must be an object", "network");
  for (size_t i = 0; net && YAJL_IS_OBJECT(net) && i < net->u.object.len; i++) {
    const char *k = net->u.object.keys[i];
    yajl_val v = net->u.object.values[i];
    if (strcmp(k, "allowPublicTraffic") == 0) {
      if (!is_null(v) && !YAJL_IS_TRUE(v) && !YAJL_IS_FALSE(v))
        return fail(ret_status, 400, err, "%s must be a boolean", "network.allowPublicTraffic");
      continue;
    }
    if (strcmp(k, "allowOut") == 0 || strcmp(k, "denyOut") == 0)
      continue; /* agsx_api_egress_parse */
    if (!is_empty(v))
      return fail(ret_status, 501, err, "agsx: network.%s is not supported", k);
  }
  return 0;
}

/* E2B's allowOut (CIDRs, addresses and domains) and denyOut (CIDRs and
 * addresses) as egress rule lines. As in E2B, allowOut wins over denyOut:
 * any allowOut makes the sandbox default-deny (agsx's allow-list), so
 * denyOut then adds nothing and is dropped (see agsx_api_egress_parse). */
static int egress_list(yajl_val v, const char *what, bool allow, char ***rules, bool *all,
                       int *ret_status, agsx_error_t *err) {
  if (is_null(v))
    return 0;
  if (!YAJL_IS_ARRAY(v) || v->u.array.len > AGSX_EGRESS_MAX_RULES)
    return fail(ret_status, 400, err, "network.%s must be a list of at most 512 strings", what);
  for (size_t i = 0; i < v->u.array.len; i++) {
    const char *s = YAJL_GET_STRING(v->u.array.values[i]);
    struct agsx_egress_rule r;
    agsx_error_t e = NULL;
    if (s == NULL)
      return fail(ret_status, 400, err, "network.%s must be a list of strings", what);
    if (!allow && strcmp(s, "0.0.0.0/0") == 0) {
      *all = true;
      continue;
    }
    if (agsx_egress_rule_parse(s, allow, &r, &e) < 0) {
      *ret_status = 400;
      agsx_error_set_quiet(err, EINVAL, "network.%s: %s", what, e->msg);
      agsx_error_free(&e);
      return -1;
    }
    if (!allow && r.kind != AGSX_EGRESS_CIDR) /* E2B's asymmetry: names only in allowOut */
      return fail(ret_status, 400, err,
                  "network.denyOut: `%.256s`: only IP addresses and CIDRs can be denied "
                  "(domains go in allowOut)",
                  s);
    char *line = agsx_egress_rule_format(&r);
    agsx_strv_push(rules, line);
    free(line);
  }
  return 0;
}

int agsx_api_egress_parse(yajl_val net, char ***ret_rules, int *ret_status, agsx_error_t *err) {
  *ret_rules = NULL;
  *ret_status = 400;
  if (is_null(net))
    return 0;
  if (!YAJL_IS_OBJECT(net))
    return fail(ret_status, 400, err, "%s must be an object", "network");
  bool all = false;
  if (egress_list(agsx_json_get(net, "denyOut"), "denyOut", false, ret_rules, &all, ret_status,
                  err) < 0 ||
      egress_list(agsx_json_get(net, "allowOut"), "allowOut", true, ret_rules, &all, ret_status,
                  err) < 0) {
    agsx_strv_free(steal_ptr(ret_rules));
    return -1;
  }
  bool any_allow = false;
  for (size_t i = 0; *ret_rules && (*ret_rules)[i]; i++)
    any_allow |= agsx_str_has_prefix((*ret_rules)[i], "allow ");
  if (any_allow) {
    /* E2B: allowed entries always win over denied ones. With an allow-list
     * the sandbox is default-deny, so denyOut's entries add nothing, and
     * kept they would win (agsx's deny rules do): dropped. */
    size_t k = 0;
    for (size_t i = 0; (*ret_rules)[i]; i++) {
      if (agsx_str_has_prefix((*ret_rules)[i], "deny "))
        free((*ret_rules)[i]);
      else
        (*ret_rules)[k++] = (*ret_rules)[i];
    }
    (*ret_rules)[k] = NULL;
  } else if (all) {
    agsx_strv_push(ret_rules, "deny 0.0.0.0/0"); /* all traffic denied, nothing allowed */
  }
  return 0;
}

static bool is_bool(yajl_val v) { return YAJL_IS_TRUE(v) || YAJL_IS_FALSE(v); }

/* The lifecycle (what the SDK's lifecycle.onTimeout and autoResume become):
 * autoPause (onTimeout "pause"), autoPauseMemory (false: keepMemory false,
 * refused) and autoResume {"enabled"}, checked as E2B's SDK checks them. */
static int lifecycle(yajl_val body, struct agsx_api_create *c, int *ret_status, agsx_error_t *err) {
  yajl_val ap = agsx_json_get(body, "autoPause"), mem = agsx_json_get(body, "autoPauseMemory");
  yajl_val ar = agsx_json_get(body, "autoResume");
  if (!is_null(ap) && !is_bool(ap))
    return fail(ret_status, 400, err, "%s must be a boolean", "autoPause");
  if (!is_null(mem) && !is_bool(mem))
    return fail(ret_status, 400, err, "%s must be a boolean", "autoPauseMemory");
  c->pause_on_timeout = ap && YAJL_IS_TRUE(ap);
  if (!is_null(ar)) {
    static const char *const known[] = {"enabled", NULL};
    yajl_val en = YAJL_IS_OBJECT(ar) ? agsx_json_get(ar, "enabled") : NULL;
    if (!YAJL_IS_OBJECT(ar) || unknown_key(ar, known) || !is_bool(en))
      return fail(ret_status, 400, err, "%s must be {\"enabled\": true|false}", "autoResume");
    c->auto_resume = YAJL_IS_TRUE(en);
  }
  bool keep = !(mem && YAJL_IS_FALSE(mem));
  if (c->auto_resume && !c->pause_on_timeout)
    return fail(ret_status, 400, err, "autoResume can only be enabled with %s",
                "autoPause (lifecycle.onTimeout 'pause')");
  if (c->auto_resume && !keep)
    return fail(ret_status, 400, err, "autoResume can only be enabled with %s",
                "autoPauseMemory true (a paused filesystem is resumed by Sandbox.connect)");
  if (c->pause_on_timeout && !keep)
    return fail(ret_status, 501, err, "agsx: %s is not supported",
                "pausing without memory (onTimeout keepMemory false)");
  return 0;
}

static bool under(const char *path, const char *dir) {
  size_t n = strlen(dir);
  return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

static int volume_mount(yajl_val m, char ***ret, int *ret_status, agsx_error_t *err) {
  static const char *const known[] = {"name", "path", NULL};
  if (!YAJL_IS_OBJECT(m))
    return fail(ret_status, 400, err, "%s must be a list of {\"name\", \"path\"}", "volumeMounts");
  const char *bad = unknown_key(m, known);
  if (bad)
    return fail(ret_status, 400, err, "volumeMounts: unknown field `%.64s`", bad);
  const char *name = YAJL_GET_STRING(agsx_json_get(m, "name"));
  const char *path = YAJL_GET_STRING(agsx_json_get(m, "path"));
  if (name == NULL || path == NULL)
    return fail(ret_status, 400, err, "%s: name and path are required strings", "volumeMounts");
  if (!agsx_volume_name_is_valid(name))
    return fail(ret_status, 400, err,
                "volumeMounts: invalid volume name \"%.80s\": letters, digits and _.- (at most "
                "64, starting with a letter or digit)",
                name);
  /* (no ':': the record keeps NAME:/path[:ro], state.h) */
  if (path[0] != '/' || !agsx_path_is_clean(path + 1, 4096, 64) || strchr(path, ':'))
    return fail(ret_status, 400, err,
                "volumeMounts: path \"%.200s\" must be absolute, clean and without ':'", path);
  if (under(path, "/proc") || under(path, "/dev") || under(path, "/sys"))
    return fail(ret_status, 400, err, "volumeMounts: path \"%.200s\" is reserved", path);
  for (size_t i = 0; *ret && (*ret)[i]; i++)
    if (strcmp(strchr((*ret)[i], ':') + 1, path) == 0)
      return fail(ret_status, 400, err, "volumeMounts: two volumes at \"%.200s\"", path);
  _cleanup_free_ char *s = xasprintf("%s:%s", name, path);
  agsx_strv_push(ret, s);
  return 0;
}

int agsx_api_volume_mounts_parse(yajl_val v, char ***ret, int *ret_status, agsx_error_t *err) {
  *ret = NULL;
  *ret_status = 400;
  if (is_null(v))
    return 0;
  if (!YAJL_IS_ARRAY(v) || v->u.array.len > AGSX_MAX_BINDS)
    return fail(ret_status, 400, err, "volumeMounts must be a list of at most %s volumes", "64");
  for (size_t i = 0; i < v->u.array.len; i++)
    if (volume_mount(v->u.array.values[i], ret, ret_status, err) < 0) {
      agsx_strv_free(steal_ptr(ret));
      return -1;
    }
  return 0;
}

int agsx_api_create_parse(const char *buf, size_t len, struct agsx_api_create *ret, int *ret_status,
                          agsx_error_t *err) {
  static const char *const known[] = {"templateID",   "timeout",
                                      "metadata",     "envVars",
                                      "secure",       "allow_internet_access",
                                      "autoPause",    "autoPauseMemory",
                                      "autoResume",   "network",
                                      "mcp",          "iam",
                                      "volumeMounts", NULL};
  memset(ret, 0, sizeof(*ret));
  *ret_status = 400;
  _cleanup_json_ yajl_val body =
      agsx_json_parse(len ? buf : "{}", len ? len : 2, AGSX_API_BODY_MAX, err);
  if (body == NULL)
    return agsx_error_wrap(err, "invalid request body");
  if (!YAJL_IS_OBJECT(body))
    return fail(ret_status, 400, err, "invalid request body: %s", "not a JSON object");
  const char *bad = unknown_key(body, known);
  if (bad)
    return fail(ret_status, 400, err, "unknown field `%.64s`", bad);
  if (unsupported(body, ret_status, err) < 0)
    return -1;
  yajl_val t = agsx_json_get(body, "templateID");
  if (!is_null(t) && (!YAJL_IS_STRING(t) || *t->u.string == '\0' || strlen(t->u.string) > 256))
    return fail(ret_status, 400, err, "%s must be a non-empty string", "templateID");
  yajl_val to = agsx_json_get(body, "timeout");
  if (!is_null(to) && (!YAJL_IS_INTEGER(to) || YAJL_GET_INTEGER(to) <= 0 ||
                       YAJL_GET_INTEGER(to) > AGSX_API_TIMEOUT_MAX))
    return fail(ret_status, 400, err, "timeout must be 1 to %s seconds", "86400");
  yajl_val inet = agsx_json_get(body, "allow_internet_access");
  if (!is_null(inet) && !YAJL_IS_TRUE(inet) && !YAJL_IS_FALSE(inet))
    return fail(ret_status, 400, err, "%s must be a boolean", "allow_internet_access");
  struct agsx_api_create life = {0};
  if (lifecycle(body, &life, ret_status, err) < 0)
    return -1;
  char **egress = NULL, **volumes = NULL;
  if (agsx_api_egress_parse(agsx_json_get(body, "network"), &egress, ret_status, err) < 0)
    return -1;
  if (agsx_api_volume_mounts_parse(agsx_json_get(body, "volumeMounts"), &volumes, ret_status, err) <
      0) {
    agsx_strv_free(egress);
    return -1;
  }
  struct agsx_api_create c = {
      .egress = egress,
      .volumes = volumes,
      .template_id = xstrdup(is_null(t) ? "base" : t->u.string),
      .timeout = is_null(to) ? 0 : YAJL_GET_INTEGER(to),
      .internet = !(inet && YAJL_IS_FALSE(inet)),
      .pause_on_timeout = life.pause_on_timeout,
      .auto_resume = life.auto_resume,
      .private_ports =
          YAJL_IS_FALSE(agsx_json_get(agsx_json_get(body, "network"), "allowPublicTraffic")),
  };
  if (!string_map(agsx_json_get(body, "envVars"), ENVS_MAX, &c.env)) {
    agsx_api_create_clear(&c);
    return fail(ret_status, 400, err, "%s must be an object of strings with keys without '='",
                "envVars");
  }
  if (!string_map(agsx_json_get(body, "metadata"), AGSX_LABELS_MAX, &c.metadata)) {
    agsx_api_create_clear(&c);
    return fail(ret_status, 400, err, "%s must be an object of strings with keys without '='",
                "metadata");
  }
  for (size_t i = 0; c.metadata && c.metadata[i]; i++)
    if (agsx_str_has_prefix(c.metadata[i], "e2b.")) {
      agsx_api_create_clear(&c);
      return fail(ret_status, 400, err, "metadata keys starting with `%s` are reserved", "e2b.");
    }
  *ret = c;
  return 0;
}

/* ---- Start ------------------------------------------------------------------------------ */

void agsx_api_start_clear(struct agsx_api_start *s) {
  free(s->cmd);
  agsx_strv_free(s->args);
  agsx_strv_free(s->envs);
  free(s->cwd);
  free(s->tag);
  memset(s, 0, sizeof(*s));
}

static const char *opt_string(yajl_val o, const char *key, bool *bad) {
  yajl_val v = agsx_json_get(o, key);
  if (is_null(v))
    return NULL;
  if (!YAJL_IS_STRING(v))
    *bad = true;
  return YAJL_IS_STRING(v) ? v->u.string : NULL;
}

int agsx_api_start_parse(const char *buf, size_t len, struct agsx_api_start *ret,
                         agsx_error_t *err) {
  static const char *const known[] = {"process", "pty", "tag", "stdin", NULL};
  static const char *const known_p[] = {"cmd", "args", "envs", "cwd", NULL};
  memset(ret, 0, sizeof(*ret));
  _cleanup_json_ yajl_val body =
      agsx_json_parse(len ? buf : "{}", len ? len : 2, AGSX_API_BODY_MAX, err);
  if (body == NULL)
    return agsx_error_wrap(err, "invalid request");
  if (!YAJL_IS_OBJECT(body))
    return agsx_error_set(err, EINVAL, "invalid request: not a JSON object");
  const char *bad = unknown_key(body, known);
  if (bad)
    return agsx_error_set(err, EINVAL, "invalid request: unknown field `%.64s`", bad);
  yajl_val p = agsx_json_get(body, "process");
  if (!YAJL_IS_OBJECT(p))
    return agsx_error_set(err, EINVAL, "process is required");
  if ((bad = unknown_key(p, known_p)))
    return agsx_error_set(err, EINVAL, "invalid request: unknown field `process.%.64s`", bad);
  bool wrong = false;
  const char *cmd = opt_string(p, "cmd", &wrong), *cwd = opt_string(p, "cwd", &wrong);
  const char *tag = opt_string(body, "tag", &wrong);
  if (wrong || cmd == NULL || *cmd == '\0')
    return agsx_error_set(err, EINVAL, "process.cmd is required; cmd, cwd and tag are strings");
  struct agsx_api_start s = {.cmd = xstrdup(cmd),
                             .cwd = cwd && *cwd ? xstrdup(cwd) : NULL,
                             .tag = tag ? xstrdup(tag) : NULL,
                             .cols = 80,
                             .rows = 24,
                             .stdin_open = true};
  yajl_val a = agsx_json_get(p, "args");
  if (!is_null(a)) {
    if (!YAJL_IS_ARRAY(a) || a->u.array.len > ARGS_MAX) {
      agsx_api_start_clear(&s);
      return agsx_error_set(err, EINVAL, "process.args must be at most %d strings", ARGS_MAX);
    }
    for (size_t i = 0; i < a->u.array.len; i++) {
      if (!YAJL_IS_STRING(a->u.array.values[i])) {
        agsx_api_start_clear(&s);
        return agsx_error_set(err, EINVAL, "process.args must be strings");
      }
      agsx_strv_push(&s.args, a->u.array.values[i]->u.string);
    }
  }
  if (!string_map(agsx_json_get(p, "envs"), ENVS_MAX, &s.envs)) {
    agsx_api_start_clear(&s);
    return agsx_error_set(err, EINVAL, "process.envs must be an object of strings");
  }
  yajl_val pty = agsx_json_get(body, "pty");
  if (!is_null(pty)) {
    yajl_val size = YAJL_IS_OBJECT(pty) ? agsx_json_get(pty, "size") : NULL;
    int64_t cols = 80, rows = 24;
    if (!YAJL_IS_OBJECT(pty) || (!is_null(size) && !YAJL_IS_OBJECT(size))) {
      agsx_api_start_clear(&s);
      return agsx_error_set(err, EINVAL, "pty must be {\"size\":{\"cols\",\"rows\"}}");
    }
    if (size) {
      agsx_json_get_int64(size, "cols", &cols);
      agsx_json_get_int64(size, "rows", &rows);
    }
    if (cols < 1 || rows < 1 || cols > 10000 || rows > 10000) {
      agsx_api_start_clear(&s);
      return agsx_error_set(err, EINVAL, "pty size of 1 to 10000 columns and rows");
    }
    s.pty = true;
    s.cols = (unsigned)cols;
    s.rows = (unsigned)rows;
  }
  yajl_val in = agsx_json_get(body, "stdin");
  if (!is_null(in) && !YAJL_IS_TRUE(in) && !YAJL_IS_FALSE(in)) {
    agsx_api_start_clear(&s);
    return agsx_error_set(err, EINVAL, "stdin must be a boolean");
  }
  s.stdin_open = s.pty || is_null(in) || YAJL_IS_TRUE(in);
  *ret = s;
  return 0;
}
