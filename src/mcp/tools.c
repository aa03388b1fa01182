/* agsx — mcp: the tools. One table per tool describes its arguments: it
 * gives tools/list its inputSchema and checks every call's arguments
 * (unknown names, wrong types and out-of-range numbers are JSON-RPC invalid
 * params), so the schema and the check cannot disagree. A failure of the
 * tool itself is a result with isError and a message an agent can act on. */
#include "config.h"

#include "mcp/rpc.h"
#include "mcp/tools-internal.h"
#include "net/egress.h"
#include "net/relay.h"
#include "sandbox/control.h"
#include "sandbox/pool.h"
#include "state/state.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- arguments ----------------------------------------------------------------------------- */

static const char *type_name(enum arg_type t) {
  switch (t) {
  case A_STR: return "string";
  case A_INT: return "integer";
  case A_NUM: return "number";
  case A_BOOL: return "boolean";
  case A_STRV: return "array";
  case A_INTV: return "array";
  case A_ENV: return "object";
  }
  return "string";
}

static void gen_input_schema(yajl_gen g, const struct arg *args) {
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "type", "object");
  agsx_json_key(g, "properties");
  yajl_gen_map_open(g);
  for (const struct arg *a = args; a->name; a++) {
    agsx_json_key(g, a->name);
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "type", type_name(a->type));
    agsx_json_kv_str(g, "description", a->desc);
    if ((a->type == A_INT || a->type == A_NUM) && a->max > 0) {
      agsx_json_kv_int(g, "minimum", a->min);
      agsx_json_kv_int(g, "maximum", a->max);
    }
    if (a->type == A_STRV || a->type == A_ENV) {
      agsx_json_key(g, a->type == A_STRV ? "items" : "additionalProperties");
      yajl_gen_map_open(g);
      agsx_json_kv_str(g, "type", "string");
      yajl_gen_map_close(g);
    }
    if (a->type == A_INTV) {
      agsx_json_key(g, "items");
      yajl_gen_map_open(g);
      agsx_json_kv_str(g, "type", "integer");
      agsx_json_kv_int(g, "minimum", a->min);
      agsx_json_kv_int(g, "maximum", a->max);
      yajl_gen_map_close(g);
    }
    yajl_gen_map_close(g);
  }
  yajl_gen_map_close(g);
  agsx_json_key(g, "required");
  yajl_gen_array_open(g);
  for (const struct arg *a = args; a->name; a++)
    if (a->required)
      agsx_json_str(g, a->name);
  yajl_gen_array_close(g);
  agsx_json_kv_bool(g, "additionalProperties", false);
  yajl_gen_map_close(g);
}

static bool all_strings(yajl_val v, bool object) {
  size_t n = object ? v->u.object.len : v->u.array.len;
  for (size_t i = 0; i < n; i++)
    if (!YAJL_IS_STRING(object ? v->u.object.values[i] : v->u.array.values[i]))
      return false;
  return true;
}

/* An array of integers from MIN to MAX. */
static bool all_ints(yajl_val v, int64_t min, int64_t max) {
  if (!YAJL_IS_ARRAY(v))
    return false;
  for (size_t i = 0; i < v->u.array.len; i++) {
    yajl_val x = v->u.array.values[i];
    if (!YAJL_IS_INTEGER(x) || x->u.number.i < min || x->u.number.i > max)
      return false;
  }
  return true;
}

static int check_one(const struct arg *a, yajl_val v, agsx_error_t *err) {
  bool ok;
  switch (a->type) {
  case A_STR: ok = YAJL_IS_STRING(v); break;
  case A_INT: ok = YAJL_IS_INTEGER(v); break;
  case A_NUM: ok = YAJL_IS_DOUBLE(v); break;
  case A_BOOL: ok = YAJL_IS_TRUE(v) || YAJL_IS_FALSE(v); break;
  case A_STRV: ok = YAJL_IS_ARRAY(v) && all_strings(v, false); break;
  case A_ENV: ok = YAJL_IS_OBJECT(v) && all_strings(v, true); break;
  case A_INTV:
    if (!all_ints(v, a->min, a->max))
      return agsx_error_set(err, 0,
                            "invalid params: argument \"%s\" must be an array of integers %lld "
                            "to %lld",
                            a->name, (long long)a->min, (long long)a->max);
    ok = true;
    break;
  default: ok = false;
  }
  if (!ok)
    return agsx_error_set(
        err, 0, "invalid params: argument \"%s\" must be %s%s", a->name,
        a->type == A_STRV  ? "an array of strings"
        : a->type == A_ENV ? "an object of strings"
        : a->type == A_INT ? "an integer"
                           : "a ",
        a->type == A_STRV || a->type == A_ENV || a->type == A_INT ? "" : type_name(a->type));
  if (a->max > 0 && a->type == A_INT && (v->u.number.i < a->min || v->u.number.i > a->max))
    return agsx_error_set(err, 0, "invalid params: argument \"%s\" must be %lld to %lld", a->name,
                          (long long)a->min, (long long)a->max);
  if (a->max > 0 && a->type == A_NUM &&
      !(v->u.number.d >= (double)a->min && v->u.number.d <= (double)a->max))
    return agsx_error_set(err, 0, "invalid params: argument \"%s\" must be %lld to %lld", a->name,
                          (long long)a->min, (long long)a->max);
  return 0;
}

static int check_args(const struct tool *t, yajl_val a, agsx_error_t *err) {
  if (a && !YAJL_IS_OBJECT(a))
    return agsx_error_set(err, 0, "invalid params: \"arguments\" must be an object");
  for (size_t i = 0; a && i < a->u.object.len; i++) {
    const struct arg *d = t->args;
    while (d->name && strcmp(d->name, a->u.object.keys[i]) != 0)
      d++;
    if (d->name == NULL)
      return agsx_error_set(err, 0, "invalid params: %s has no argument \"%.64s\"", t->name,
                            a->u.object.keys[i]);
    if (check_one(d, a->u.object.values[i], err) < 0)
      return -1;
  }
  for (const struct arg *d = t->args; d->name; d++)
    if (d->required && agsx_json_get(a, d->name) == NULL)
      return agsx_error_set(err, 0, "invalid params: %s needs argument \"%s\"", t->name, d->name);
  return 0;
}

char **agsx_mcp_arg_strv(yajl_val a, const char *k) {
  yajl_val v = a ? agsx_json_get(a, k) : NULL;
  char **out = NULL;
  for (size_t i = 0; YAJL_IS_ARRAY(v) && i < v->u.array.len; i++)
    agsx_strv_push(&out, v->u.array.values[i]->u.string);
  return out;
}

int agsx_mcp_arg_env(yajl_val a, const char *k, char ***ret, agsx_error_t *err) {
  yajl_val v = a ? agsx_json_get(a, k) : NULL;
  for (size_t i = 0; YAJL_IS_OBJECT(v) && i < v->u.object.len; i++) {
    const char *key = v->u.object.keys[i];
    if (*key == '\0' || strchr(key, '='))
      return agsx_error_set_quiet(err, EINVAL, "env: invalid variable name `%.64s`", key);
    _cleanup_free_ char *kv = xasprintf("%s=%s", key, v->u.object.values[i]->u.string);
    agsx_strv_push(ret, kv);
  }
  return 0;
}

/* ---- sandboxes of the session ----------------------------------------------------------------- */

static bool ours(const struct agsx_mcp *s, const struct agsx_record *r) {
  const char *sess = agsx_label_get(r->labels, AGSX_MCP_LABEL_SESSION);
  return sess && strcmp(sess, s->session) == 0;
}

int agsx_mcp_find(struct agsx_mcp *s, const char *sandbox, struct agsx_record *ret,
                  agsx_error_t *err) {
  agsx_error_t e = NULL;
  if (agsx_state_lookup_at(s->statefd, sandbox, ret, &e) < 0 || !ours(s, ret)) {
    if (e == NULL)
      agsx_record_clear(ret);
    agsx_error_free(&e);
    return agsx_error_set_quiet(
        err, ENOENT, "no sandbox `%.64s` in this session (sandbox_list shows them)", sandbox);
  }
  if (ret->status == AGSX_STATUS_EXITED || ret->stop_request ||
      !agsx_proc_ref_alive(&ret->supervisor)) {
    agsx_record_clear(ret);
    return agsx_error_set_quiet(err, ESRCH, "sandbox `%.64s` is not running (create a new one)",
                                sandbox);
  }
  return 0;
}

static bool live(const struct agsx_record *r) {
  return r->status != AGSX_STATUS_EXITED && !r->stop_request;
}

size_t agsx_mcp_load(struct agsx_mcp *s, struct agsx_record **ret) {
  struct agsx_record *recs = NULL;
  size_t n = agsx_state_load(s->statefd, 0, &recs), k = 0;
  for (size_t i = 0; i < n; i++) {
    if (ours(s, &recs[i]) && live(&recs[i]))
      recs[k++] = recs[i];
    else
      agsx_record_clear(&recs[i]);
  }
  *ret = recs;
  return k;
}

void agsx_mcp_records_free(struct agsx_record *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    agsx_record_clear(&v[i]);
  free(v);
}

int agsx_mcp_room(struct agsx_mcp *s, unsigned add, agsx_error_t *err) {
  struct agsx_record *recs = NULL;
  size_t count = agsx_mcp_load(s, &recs);
  agsx_mcp_records_free(recs, count);
  if (count + add > s->cfg->max_sandboxes)
    return agsx_error_set_quiet(err, EAGAIN,
                                "this session runs %zu sandboxes, its maximum is %u "
                                "(agsx mcp --max-sandboxes): sandbox_kill one first",
                                count, s->cfg->max_sandboxes);
  return 0;
}

static void sandbox_fields(yajl_gen g, const struct agsx_record *r) {
  agsx_json_kv_str(g, "id", r->id);
  agsx_json_kv_str(g, "name", r->name ? r->name : "");
  agsx_json_kv_str(g, "image", r->image ? r->image : "");
  agsx_json_kv_str(g, "status", agsx_record_status(r));
  agsx_json_kv_str(g, "network", r->network ? r->network : "internal");
  agsx_json_kv_int(g, "deadline", r->deadline);
  agsx_json_kv_bool(g, "keep", agsx_label_get(r->labels, AGSX_MCP_LABEL_KEEP) != NULL);
  agsx_json_kv_str(g, "pool", r->pool ? r->pool : "");
  agsx_json_key(g, "ports");
  yajl_gen_array_open(g);
  for (size_t i = 0; i < r->n_ports; i++) {
    if (r->ports[i].proto != AGSX_PROTO_TCP)
      continue;
    char host[64];
    agsx_sockaddr_format(&r->ports[i].host, host, sizeof(host));
    yajl_gen_map_open(g);
    agsx_json_kv_int(g, "port", r->ports[i].port);
    agsx_json_kv_str(g, "host", host);
    _cleanup_free_ char *url = xasprintf("http://%s", host);
    agsx_json_kv_str(g, "url", url);
    yajl_gen_map_close(g);
  }
  yajl_gen_array_close(g);
}

void agsx_mcp_gen_sandbox(yajl_gen g, const struct agsx_record *r) {
  yajl_gen_map_open(g);
  sandbox_fields(g, r);
  yajl_gen_map_close(g);
}

/* ---- sandbox_create ----------------------------------------------------------------------------- */

static const struct arg create_args[] = {
    {"image", A_STR, false, 0, 0,
     "An image of the local store (agsx image ls), e.g. busybox, or host (the host's programs, "
     "read-only); give image or pool"},
    {"pool", A_STR, false, 0, 0,
     "A warm pool (agsx pool ls): one of its parked sandboxes is claimed at once, with the "
     "pool's image, network and limits; an empty pool starts one cold"},
    {"timeout", A_INT, false, 1, 86400, "Lifetime in seconds (default 1800)"},
    {"env", A_ENV, false, 0, 0, "Environment variables of the sandbox"},
    {"memory", A_STR, false, 0, 0, "Memory limit, e.g. 512m or 2g"},
    {"cpus", A_NUM, false, 0, 1024, "CPU limit in CPUs, e.g. 0.5"},
    {"network", A_STR, false, 0, 0,
     "internal (default: no network) or the mode agsx mcp --network allows"},
    {"egress_allow", A_STRV, false, 0, 0,
     "The only destinations the sandbox may reach (default-deny): names (pypi.org, "
     "*.github.com), NAME:PORT, addresses or CIDRs; needs a network other than internal"},
    {"ports", A_INTV, false, 1, 65535,
     "TCP ports of the sandbox to publish on the host's loopback (at most 16); the answer gives "
     "each one's url"},
    {"keep", A_BOOL, false, 0, 0, "Keep the sandbox running after this session ends"},
    {0},
};

#define PORTS_MAX 16

/* ports' entries as -p specs: each on the host's loopback, a free port. */
static int port_specs(yajl_val a, char ***ret, agsx_error_t *err) {
  yajl_val v = agsx_json_get(a, "ports");
  if (v == NULL || YAJL_IS_NULL(v))
    return 0;
  if (v->u.array.len > PORTS_MAX)
    return agsx_error_set_quiet(err, EINVAL, "ports: at most %d", PORTS_MAX);
  for (size_t i = 0; i < v->u.array.len; i++) {
    for (size_t j = 0; j < i; j++)
      if (v->u.array.values[j]->u.number.i == v->u.array.values[i]->u.number.i)
        return agsx_error_set_quiet(err, EINVAL, "ports: %lld twice",
                                    (long long)v->u.array.values[i]->u.number.i);
    _cleanup_free_ char *spec =
        xasprintf("127.0.0.1:0:%lld", (long long)v->u.array.values[i]->u.number.i);
    agsx_strv_push(ret, spec);
  }
  return 0;
}

/* egress_allow's entries as egress rule lines (net/egress.h): at most
 * AGSX_EGRESS_MAX_RULES, each a name, NAME:PORT, an address or a CIDR. */
static int egress_rules(yajl_val a, const char *net, char ***ret, agsx_error_t *err) {
  yajl_val v = agsx_json_get(a, "egress_allow");
  if (v == NULL || YAJL_IS_NULL(v))
    return 0;
  if (net == NULL)
    return agsx_error_set_quiet(err, EINVAL,
                                "egress_allow needs a network with a way out: the internal network "
                                "has none (give network)");
  if (v->u.array.len == 0)
    return agsx_error_set_quiet(err, EINVAL,
                                "egress_allow is empty: leave it out, or name a destination");
  if (v->u.array.len > AGSX_EGRESS_MAX_RULES)
    return agsx_error_set_quiet(err, EINVAL, "egress_allow: at most %d destinations",
                                AGSX_EGRESS_MAX_RULES);
  for (size_t i = 0; i < v->u.array.len; i++) {
    struct agsx_egress_rule r;
    agsx_error_t e = NULL;
    if (agsx_egress_rule_parse(YAJL_GET_STRING(v->u.array.values[i]), true, &r, &e) < 0) {
      agsx_error_set_quiet(err, EINVAL, "egress_allow: %s", e->msg);
      agsx_error_free(&e);
      return -1;
    }
    _cleanup_free_ char *line = agsx_egress_rule_format(&r);
    agsx_strv_push(ret, line);
  }
  return 0;
}

int agsx_mcp_net_allowed(const struct agsx_mcp_config *cfg, const char *net, agsx_error_t *err) {
  if (net && (cfg->network == NULL || strcmp(net, cfg->network) != 0))
    return agsx_error_set_quiet(
        err, EPERM, "network `%.64s` is not allowed: this server allows only internal%s%s", net,
        cfg->network ? " and " : " (agsx mcp --network MODE allows more)",
        cfg->network ? cfg->network : "");
  return 0;
}

/* A parked sandbox of pool PC claimed for the session: 1 with ID, 0 when
 * the pool had none (it is refilled meanwhile). A claim that fails is
 * logged and counts as none: the caller starts one cold. */
static int claim(struct agsx_mcp *s, const struct agsx_pool_config *pc, char **env, char **labels,
                 uint64_t timeout, char id[33]) {
  struct agsx_claim cl = {
      .env = env, .labels = labels, .timeout = timeout, .rm = true, .detach = true, .idle = true};
  struct agsx_pool_claimed got;
  bool claimed = false;
  int code;
  agsx_error_t e = NULL;
  if (agsx_pool_claim(s->cfg->root, s->cfg->state, pc, &cl, NULL, &claimed, &got, &code, &e) < 0) {
    agsx_info("mcp: pool %s: %s: a cold start instead", pc->name, e->msg);
    agsx_error_free(&e);
    return 0;
  }
  if (!claimed) {
    agsx_pool_refill_async(s->cfg->root, s->cfg->state, pc->name);
    return 0;
  }
  memcpy(id, got.id, 33);
  return 1;
}

static int create(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  const struct agsx_mcp_config *cfg = s->cfg;
  const char *net = arg_str(a, "network"), *mem = arg_str(a, "memory");
  const char *image = arg_str(a, "image"), *pool = arg_str(a, "pool");
  yajl_val c = agsx_json_get(a, "cpus");
  if (net && strcmp(net, "internal") == 0)
    net = NULL;
  if (agsx_mcp_net_allowed(cfg, net, err) < 0)
    return -1;
  if (image == NULL && pool == NULL)
    return agsx_error_set_quiet(err, EINVAL, "give image (agsx image ls) or pool (agsx pool ls)");
  if (pool && agsx_json_get(a, "egress_allow"))
    return agsx_error_set_quiet(
        err, EINVAL, "a pool's sandboxes have the pool's network: leave egress_allow out");
  if (pool && agsx_json_get(a, "ports"))
    return agsx_error_set_quiet(err, EINVAL,
                                "a pool's sandboxes publish the pool's ports: leave ports out");
  _cleanup_strv_ char **egress = NULL, **ports = NULL;
  if (egress_rules(a, net, &egress, err) < 0 || port_specs(a, &ports, err) < 0)
    return -1;
  _cleanup_(agsx_pool_config_clear) struct agsx_pool_config pc = {0};
  if (pool) {
    if (!agsx_pool_name_is_valid(pool))
      return agsx_error_set_quiet(err, EINVAL, "invalid pool name `%.64s`", pool);
    if (agsx_pool_read(cfg->state, pool, &pc, err) < 0)
      return -1;
    const char *pnet = pc.network && strcmp(pc.network, "internal") != 0 ? pc.network : NULL;
    if (image && strcmp(image, pc.image) != 0)
      return agsx_error_set_quiet(err, EINVAL, "pool `%.64s` holds image `%.100s`, not `%.100s`",
                                  pool, pc.image, image);
    if (mem || c)
      return agsx_error_set_quiet(
          err, EINVAL, "a pool's sandboxes have the pool's limits: leave memory and cpus out");
    if (net && (pnet == NULL || strcmp(net, pnet) != 0))
      return agsx_error_set_quiet(err, EINVAL, "pool `%.64s` has network %s", pool,
                                  pnet ? pnet : "internal");
    if (agsx_mcp_net_allowed(cfg, pnet, err) < 0)
      return agsx_error_wrap(err, "pool `%.64s`", pool);
    image = pc.image;
    net = pnet;
  }
  uint64_t memory = pool ? pc.memory : 0;
  if (mem && agsx_parse_size(mem, &memory, err) < 0)
    return agsx_error_wrap(err, "memory");
  double cpus = pool ? pc.cpus : 0;
  if (YAJL_IS_DOUBLE(c))
    cpus = c->u.number.d;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus < 0 || (ncpu > 0 && cpus > (double)ncpu))
    return agsx_error_set_quiet(err, EINVAL, "cpus: at most the %ld CPUs of this host", ncpu);
  if (agsx_mcp_room(s, 1, err) < 0)
    return -1;
  _cleanup_strv_ char **env = NULL, **labels = NULL, **cold_env = NULL;
  if (agsx_mcp_arg_env(a, "env", &env, err) < 0)
    return -1;
  agsx_labels_set(&labels, AGSX_MCP_LABEL_SESSION, s->session);
  if (arg_bool(a, "keep"))
    agsx_labels_set(&labels, AGSX_MCP_LABEL_KEEP, "true");
  uint64_t timeout = (uint64_t)arg_int(a, "timeout", AGSX_MCP_LIFETIME_DEFAULT);
  char id[33];
  if (pool == NULL || claim(s, &pc, env, labels, timeout, id) == 0) {
    /* cold: an empty pool's sandbox gets the pool's environment first */
    cold_env = agsx_strv_concat(pool ? pc.env : NULL, env);
    struct agsx_spawn_req q = {
        .root = cfg->root,
        .state = cfg->state,
        .image = image,
        .network = net,
        .egress = egress,
        .ports = ports,
        .env = cold_env,
        .labels = labels,
        .timeout = timeout,
        .memory = memory,
        .cpus = cpus,
        .new_privs = pool ? pc.new_privs : false,
    };
    int status;
    if (agsx_spawn(&s->spawner, &q, id, &status, err) < 0)
      return agsx_error_wrap(err, "create a sandbox of image `%.100s`", q.image);
  }
  struct agsx_record rec;
  if (agsx_record_read(s->statefd, id, &rec, err) < 0)
    return agsx_error_wrap(err, "the new sandbox %.12s", id);
  agsx_info("mcp: session %s: created sandbox %.12s (%s%s%s)", s->session, id, image,
            rec.pool ? ", claimed from pool " : "", rec.pool ? rec.pool : "");
  agsx_mcp_gen_sandbox(g, &rec);
  agsx_record_clear(&rec);
  return 0;
}

/* ---- sandbox_list -------------------------------------------------------------------------------- */

static const struct arg no_args[] = {{0}};

static int list(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  (void)a, (void)err;
  struct agsx_record *recs = NULL;
  size_t n = agsx_mcp_load(s, &recs);
  yajl_gen_map_open(g);
  agsx_json_key(g, "sandboxes");
  yajl_gen_array_open(g);
  for (size_t i = 0; i < n; i++)
    agsx_mcp_gen_sandbox(g, &recs[i]);
  agsx_mcp_records_free(recs, n);
  yajl_gen_array_close(g);
  yajl_gen_map_close(g);
  return 0;
}

/* ---- sandbox_kill -------------------------------------------------------------------------------- */

static const struct arg kill_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The sandbox's id (or its name or an id prefix)"},
    {"confirm", A_BOOL, false, 0, 0, "Must be true: the sandbox and its files are gone for good"},
    {0},
};

static int kill_sandbox(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  if (!arg_bool(a, "confirm"))
    return agsx_error_set_quiet(
        err, EPERM,
        "sandbox_kill destroys the sandbox and its files: call it again with "
        "confirm: true if that is meant");
  struct agsx_record rec;
  if (agsx_mcp_find(s, arg_str(a, "sandbox"), &rec, err) < 0)
    return -1;
  int pidfd = -1;
  int r = agsx_control_request_stop(s->statefd, rec.id, &pidfd, err);
  agsx_closep(&pidfd);
  if (r == 0) {
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "id", rec.id);
    agsx_json_kv_bool(g, "killed", true);
    yajl_gen_map_close(g);
  }
  agsx_record_clear(&rec);
  return r < 0 ? agsx_error_wrap(err, "kill") : 0;
}

/* ---- sandbox_info, sandbox_extend ------------------------------------------------------------ */

static const struct arg info_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The sandbox's id (or its name or an id prefix)"},
    {0},
};

#define INFO_SCHEMA                                                                                \
  "{\"type\":\"object\",\"properties\":{" SANDBOX_PROPS                                            \
  ",\"created\":{\"type\":\"integer\",\"description\":\"seconds since the epoch\"},"               \
  "\"time_left\":{\"type\":\"integer\",\"description\":\"seconds until the deadline\"},"           \
  "\"memory\":{\"type\":\"integer\",\"description\":\"its memory limit in bytes, 0: none\"},"      \
  "\"address\":{\"type\":\"string\",\"description\":\"its IP address, empty without a "            \
  "network\"}},\"required\":[" SANDBOX_REQUIRED                                                    \
  ",\"created\",\"time_left\",\"memory\",\"address\"]}"

void agsx_mcp_gen_info(yajl_gen g, const struct agsx_record *r) {
  int64_t left = r->deadline_ns > 0 ? (r->deadline_ns - agsx_now_ns()) / 1000000000
                                    : r->deadline - (int64_t)time(NULL);
  yajl_gen_map_open(g);
  sandbox_fields(g, r);
  agsx_json_kv_int(g, "created", r->created);
  agsx_json_kv_int(g, "time_left", left > 0 ? left : 0);
  agsx_json_kv_int(g, "memory", (int64_t)r->memory);
  agsx_json_kv_str(g, "address", r->address ? r->address : "");
  yajl_gen_map_close(g);
}

static int info(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  struct agsx_record rec;
  if (agsx_mcp_find(s, arg_str(a, "sandbox"), &rec, err) < 0)
    return -1;
  agsx_mcp_gen_info(g, &rec);
  agsx_record_clear(&rec);
  return 0;
}

static const struct arg extend_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The sandbox's id (or its name or an id prefix)"},
    {"timeout", A_INT, true, 1, 86400,
     "Seconds from now until the sandbox stops (replaces its deadline, earlier or later)"},
    {0},
};

static int extend(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  struct agsx_record rec, now;
  if (agsx_mcp_find(s, arg_str(a, "sandbox"), &rec, err) < 0)
    return -1;
  bool gone = false;
  int r = agsx_control_set_timeout(s->statefd, rec.id, arg_str(a, "sandbox"),
                                   (uint64_t)arg_int(a, "timeout", 0), &now, &gone, err);
  agsx_record_clear(&rec);
  if (r < 0)
    return -1;
  if (gone) {
    agsx_record_clear(&now);
    return agsx_error_set_quiet(err, ESRCH, "sandbox `%.64s` ended meanwhile",
                                arg_str(a, "sandbox"));
  }
  agsx_mcp_gen_info(g, &now);
  agsx_record_clear(&now);
  return 0;
}

/* ---- the table ---------------------------------------------------------------------------------- */

static const struct tool sandbox_tools[] = {
    {"sandbox_create", "Create a sandbox",
     "Start an isolated Linux sandbox from an image; returns its id. No network unless this "
     "server allows one; it stops at its lifetime (default 30 min) and when this session ends "
     "(unless keep).",
     create_args, SANDBOX_SCHEMA, false, false, create},
    {"sandbox_list", "List sandboxes", "The running sandboxes of this session.", no_args,
     "{\"type\":\"object\",\"properties\":{\"sandboxes\":{\"type\":\"array\","
     "\"items\":" SANDBOX_SCHEMA "}},\"required\":[\"sandboxes\"]}",
     true, false, list},
    {"sandbox_kill", "Kill a sandbox",
     "Stop a sandbox of this session and remove it with its files. Needs confirm: true.", kill_args,
     "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"},\"killed\":{\"type\":"
     "\"boolean\"}},\"required\":[\"id\",\"killed\"]}",
     false, true, kill_sandbox},
    {"sandbox_info", "Describe a sandbox",
     "A sandbox of this session: its image, status, network and address, memory limit, and when "
     "it stops.",
     info_args, INFO_SCHEMA, true, false, info},
    {"sandbox_extend", "Change a sandbox's lifetime",
     "Set a sandbox to stop TIMEOUT seconds from now (at most 24 h), later or sooner than before.",
     extend_args, INFO_SCHEMA, false, false, extend},
    {0},
};

/* tools/list's order: sandboxes, commands, code, files, snapshots, browsers. */
static const struct tool *const lists[] = {sandbox_tools,           agsx_mcp_process_tools,
                                           agsx_mcp_code_tools,     agsx_mcp_file_tools,
                                           agsx_mcp_snapshot_tools, agsx_mcp_browser_tools};

static const struct tool *tool_next(size_t *list, const struct tool *t) {
  t = t ? t + 1 : lists[*list];
  while (t->name == NULL && ++*list < AGSX_ARRAY_SIZE(lists))
    t = lists[*list];
  return t->name ? t : NULL;
}

void agsx_mcp_tools_list(yajl_gen g) {
  yajl_gen_map_open(g);
  agsx_json_key(g, "tools");
  yajl_gen_array_open(g);
  size_t list = 0;
  for (const struct tool *t = tool_next(&list, NULL); t; t = tool_next(&list, t)) {
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "name", t->name);
    agsx_json_kv_str(g, "title", t->title);
    agsx_json_kv_str(g, "description", t->desc);
    agsx_json_key(g, "inputSchema");
    gen_input_schema(g, t->args);
    agsx_json_key(g, "outputSchema");
    _cleanup_json_ yajl_val out = agsx_json_parse(t->output, strlen(t->output), 1u << 16, NULL);
    agsx_json_value(g, out);
    agsx_json_key(g, "annotations");
    yajl_gen_map_open(g);
    agsx_json_kv_bool(g, "readOnlyHint", t->read_only);
    agsx_json_kv_bool(g, "destructiveHint", t->destructive);
    agsx_json_kv_bool(g, "openWorldHint", false);
    yajl_gen_map_close(g);
    yajl_gen_map_close(g);
  }
  yajl_gen_array_close(g);
  yajl_gen_map_close(g);
}

/* A CallToolResult: the structured result and its text, or isError. */
void agsx_mcp_add_content(struct agsx_mcp *s, const char *item) {
  char *all = xasprintf("%s%s", s->extra_content ? s->extra_content : "", item);
  free(s->extra_content);
  s->extra_content = all;
}

static char *call_result(const char *structured, const char *error, const char *extra) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  const char *text = error ? error : structured;
  agsx_json_bytes(g, text, strlen(text));
  size_t len;
  _cleanup_free_ char *t = agsx_json_gen_steal(g, &len);
  if (error)
    return xasprintf("{\"content\":[{\"type\":\"text\",\"text\":%s}],\"isError\":true}", t);
  /* structuredContent is the tool's document as generated, not parsed
   * again; EXTRA, content items after the text (code_run's images). */
  return xasprintf("{\"content\":[{\"type\":\"text\",\"text\":%s}%s],\"isError\":false,"
                   "\"structuredContent\":%s}",
                   t, extra ? extra : "", structured);
}

int agsx_mcp_tools_call(struct agsx_mcp *s, yajl_val params, char **ret_result, int *ret_code,
                        agsx_error_t *err) {
  *ret_code = AGSX_RPC_INVALID_PARAMS;
  const char *name = agsx_json_get_string(params, "name");
  if (name == NULL)
    return agsx_error_set(err, 0, "invalid params: tools/call needs \"name\"");
  size_t list = 0;
  const struct tool *t = tool_next(&list, NULL);
  while (t && strcmp(t->name, name) != 0)
    t = tool_next(&list, t);
  if (t == NULL)
    return agsx_error_set(err, 0, "invalid params: unknown tool `%.64s` (tools/list has them)",
                          name);
  yajl_val a = params ? agsx_json_get(params, "arguments") : NULL;
  if (YAJL_IS_NULL(a))
    a = NULL;
  if (check_args(t, a, err) < 0)
    return -1;
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  agsx_error_t terr = NULL;
  int r = t->call(s, a, g, &terr);
  _cleanup_free_ char *extra = steal_ptr(&s->extra_content);
  if (r > 0)
    return 1;
  if (r < 0) {
    agsx_info("mcp: %s: %s", t->name, terr ? terr->msg : "failed");
    *ret_result = call_result(NULL, terr ? terr->msg : "the tool failed", NULL);
    agsx_error_free(&terr);
    return 0;
  }
  size_t len;
  _cleanup_free_ char *doc = agsx_json_gen_steal(g, &len);
  *ret_result = call_result(doc, NULL, extra);
  return 0;
}
