/* agsx serve: the E2B-compatible HTTP API (src/api/server.h). Options, with
 * agsx.conf and environment defaults, become an agsx_api_config; the
 * library serves until SIGINT or SIGTERM. */
#include "config.h"

#include "api/server.h"
#include "cmd.h"
#include "net/netspec.h"
#include "state/state.h"
#include "util/conf.h"

#include <string.h>

struct serve_opts {
  const char *listen, *ports_listen, *ports_cert, *ports_key, *api_key, *api_key_file, *network,
      *default_user;
  bool listen_public, ports_tls;
  char **hosts;
  char **templates;
  char **pools;
};

/* TEMPLATES' NAME=IMAGE[,no-new-privileges=true|false] entries become
 * NAME=IMAGE in *RET, and *RET_NEW_PRIVS lists each NAME whose last entry
 * says false (a later entry for a NAME wins, options included). */
static int split_templates(char **templates, char ***ret, char ***ret_new_privs) {
  size_t n = agsx_strv_len(templates);
  for (size_t i = 0; i < n; i++) {
    const char *t = templates[i], *comma = strchr(t, ','), *eq = strchr(t, '=');
    if (eq == NULL || eq == t || eq[1] == '\0' || (comma && comma < eq) || comma == eq + 1)
      return agsx_failf("serve: invalid --template `%s` (want NAME=IMAGE[,OPTION])", t), -1;
    bool np = false;
    if (comma) {
      if (strcmp(comma + 1, "no-new-privileges=false") == 0)
        np = true;
      else if (strcmp(comma + 1, "no-new-privileges=true") != 0)
        return agsx_failf("serve: --template `%s`: unknown option `%s` "
                          "(no-new-privileges=true|false)",
                          t, comma + 1),
               -1;
    }
    _cleanup_free_ char *name = xstrndup(t, (size_t)(eq - t));
    _cleanup_free_ char *map = comma ? xstrndup(t, (size_t)(comma - t)) : xstrdup(t);
    agsx_strv_push(ret, map);
    bool last = true;
    for (size_t k = i + 1; k < n && last; k++)
      last = !(strncmp(templates[k], name, strlen(name)) == 0 && templates[k][strlen(name)] == '=');
    if (np && last)
      agsx_strv_push(ret_new_privs, name);
  }
  return 0;
}

static int on_serve_opt(void *data, int id, const char *v) {
  struct serve_opts *o = data;
  agsx_error_t err = NULL;
  switch (id) {
  case O_LISTEN: o->listen = v; return 0;
  case O_PORTS_LISTEN: o->ports_listen = v; return 0;
  case O_PORTS_TLS: o->ports_tls = true; return 0;
  case O_PORTS_CERT: o->ports_cert = v; return 0;
  case O_PORTS_KEY: o->ports_key = v; return 0;
  case O_LISTEN_PUBLIC: o->listen_public = true; return 0;
  case O_SERVE_HOST: agsx_strv_push(&o->hosts, v); return 0;
  case O_API_KEY: o->api_key = v; return 0;
  case O_API_KEY_FILE: o->api_key_file = v; return 0;
  case O_DEFAULT_USER: o->default_user = v; return 0;
  case O_NETWORK: {
    enum agsx_net_mode mode;
    const char *name;
    if (agsx_net_mode_parse(v, &mode, &name, &err) < 0)
      return agsx_failf("serve: --network: %s", err->msg), agsx_error_free(&err), -1;
    o->network = v;
    return 0;
  }
  case O_POOL: {
    const char *eq = strchr(v, '=');
    if (eq == NULL || eq == v || !agsx_name_is_valid(eq + 1))
      return agsx_failf("serve: invalid --pool `%s` (want TEMPLATE=POOL)", v), -1;
    agsx_strv_push(&o->pools, v);
    return 0;
  }
  case O_TEMPLATE: {
    const char *eq = strchr(v, '=');
    if (eq == NULL || eq == v || eq[1] == '\0')
      return agsx_failf("serve: invalid --template `%s` (want NAME=IMAGE[,OPTION])", v), -1;
    agsx_strv_push(&o->templates, v);
    return 0;
  }
  }
  return 0;
}

static void on_ready(void *data, const char *addr, const char *ports_domain, const char *ports_ca,
                     const char *note) {
  const struct serve_opts *o = data;
  if (note)
    fprintf(stderr, "agsx: serve: %s\n", note);
  fprintf(stderr, "agsx: serve: listening on http://%s (E2B_API_URL and E2B_SANDBOX_URL)\n", addr);
  if (ports_domain)
    fprintf(stderr, "agsx: serve: sandboxes' ports on %s://PORT-ID.%s (their domain)\n",
            o->ports_tls || o->ports_cert ? "https" : "http", ports_domain);
  if (ports_ca)
    fprintf(stderr, "agsx: serve: their certificates are signed by agsx's CA %s\n", ports_ca);
}

/* A setting from agsx.conf (KEY) or the environment (ENV) when no flag
 * gave it; *RET stays NULL when neither has it. */
static int conf_default(const char *key, const char *env, const char **val, char **own) {
  if (*val)
    return 0;
  agsx_error_t err = NULL;
  if (agsx_conf_get(key, env, own, &err) < 0)
    return agsx_failf("serve: %s", err->msg), agsx_error_free(&err), -1;
  *val = *own;
  return 0;
}

int agsx_cmd_serve(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  struct serve_opts o = {0};
  int rc = AGSX_EXIT_FAILURE;
  _cleanup_free_ char *c_listen = NULL, *c_net = NULL, *c_user = NULL, *c_base = NULL, *c_ci = NULL,
                      *c_key = NULL, *c_plisten = NULL, *c_ptls = NULL, *c_pcert = NULL,
                      *c_pkey = NULL;
  _cleanup_strv_ char **templates = NULL; /* before any goto: freed at the end */
  _cleanup_strv_ char **maps = NULL, **new_privs = NULL;
  int i = agsx_parse_options(cmd, argc, argv, on_serve_opt, &o);
  if (i < 0)
    goto out;
  if (i < argc) {
    agsx_failf("serve: unexpected argument `%s`", argv[i]);
    goto out;
  }
  /* The ports listener's settings from agsx.conf, as a whole: flags for
   * it replace the file's. */
  if (o.ports_listen == NULL && !o.ports_tls && o.ports_cert == NULL && o.ports_key == NULL) {
    const char *tls = NULL;
    if (conf_default("serve-ports-listen", NULL, &o.ports_listen, &c_plisten) < 0 ||
        conf_default("serve-ports-tls", NULL, &tls, &c_ptls) < 0 ||
        conf_default("serve-ports-cert", NULL, &o.ports_cert, &c_pcert) < 0 ||
        conf_default("serve-ports-key", NULL, &o.ports_key, &c_pkey) < 0)
      goto out;
    if (tls && strcmp(tls, "true") != 0 && strcmp(tls, "false") != 0) {
      agsx_failf("serve: serve-ports-tls in agsx.conf is `%s` (want true or false)", tls);
      goto out;
    }
    o.ports_tls = tls && strcmp(tls, "true") == 0;
  }
  if ((o.ports_tls || o.ports_cert || o.ports_key) && o.ports_listen == NULL) {
    agsx_failf("serve: --ports-tls, --ports-cert and --ports-key need --ports-listen");
    goto out;
  }
  if ((o.ports_cert == NULL) != (o.ports_key == NULL)) {
    agsx_failf("serve: --ports-cert and --ports-key go together");
    goto out;
  }
  if (conf_default("serve-listen", NULL, &o.listen, &c_listen) < 0 ||
      conf_default("serve-network", NULL, &o.network, &c_net) < 0 ||
      conf_default("serve-default-user", NULL, &o.default_user, &c_user) < 0 ||
      conf_default("serve-api-key-file", NULL, &o.api_key_file, &c_key) < 0)
    goto out;
  if (o.api_key == NULL && getenv("AGSX_API_KEY") && *getenv("AGSX_API_KEY"))
    o.api_key = getenv("AGSX_API_KEY");
  /* The aliases from agsx.conf come first, so --template wins. */
  const char *base = NULL, *ci = NULL;
  if (conf_default("serve-template-base", NULL, &base, &c_base) < 0 ||
      conf_default("serve-template-code-interpreter", NULL, &ci, &c_ci) < 0)
    goto out;
  if (base) {
    _cleanup_free_ char *t = xasprintf("base=%s", base);
    agsx_strv_push(&templates, t);
  }
  if (ci) {
    _cleanup_free_ char *t = xasprintf("code-interpreter-v1=%s", ci);
    agsx_strv_push(&templates, t);
  }
  for (size_t k = 0; o.templates && o.templates[k]; k++)
    agsx_strv_push(&templates, o.templates[k]);
  if (split_templates(templates, &maps, &new_privs) < 0)
    goto out;
  struct agsx_api_config cfg = {
      .root = ctx->root,
      .state = ctx->state,
      .listen = o.listen,
      .listen_public = o.listen_public,
      .ports_listen = o.ports_listen,
      .ports_tls = o.ports_tls,
      .ports_cert = o.ports_cert,
      .ports_key = o.ports_key,
      .hosts = o.hosts,
      .api_key = o.api_key,
      .api_key_file = o.api_key_file,
      .network = o.network,
      .templates = maps,
      .new_privs = new_privs,
      .pools = o.pools,
      .default_user = o.default_user,
      .ready = on_ready,
      .ready_data = &o,
  };
  agsx_error_t err = NULL;
  if (agsx_api_serve(&cfg, &err) < 0) {
    agsx_failf("serve: %s", err->msg);
    agsx_error_free(&err);
    goto out;
  }
  rc = 0;
out:
  agsx_strv_free(o.templates);
  agsx_strv_free(o.pools);
  agsx_strv_free(o.hosts);
  return rc;
}
