/* agsx network: create, list, inspect and remove vpc networks. */
#include "config.h"

#include "cmd.h"
#include "util/json.h"
#include "net/network.h"

#include <fcntl.h>
#include <string.h>

int agsx_cmd_parse_rule_opt(int id, const char *v, struct agsx_sg_rule **rules, size_t *n,
                            agsx_error_t *err) {
  if (id == O_RULES) {
    _cleanup_close_ int fd = open(v, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    _cleanup_free_ char *text = NULL;
    size_t len;
    if (fd < 0)
      return agsx_error_set(err, errno, "--rules: open `%s`", v);
    if (agsx_read_fd(fd, 1 << 20, &text, &len, err) < 0)
      return agsx_error_wrap(err, "--rules: `%s`", v);
    return agsx_sg_rules_parse_file(text, len, v, rules, n, err);
  }
  struct agsx_sg_rule r;
  if (agsx_sg_rule_parse(v, id == O_ALLOW, &r, err) < 0)
    return -1;
  return agsx_sg_rules_append(rules, n, &r, err);
}

struct create_opts {
  const char *subnet;
  struct agsx_sg_rule *rules;
  size_t n_rules;
  bool json, quiet;
};

static int on_opt(void *data, int id, const char *v) {
  struct create_opts *o = data;
  agsx_error_t err = NULL;
  switch (id) {
  case O_SUBNET: o->subnet = v; return 0;
  case O_JSON: o->json = true; return 0;
  case O_QUIET: o->quiet = true; return 0;
  case O_ALLOW:
  case O_DENY:
  case O_RULES:
    if (agsx_cmd_parse_rule_opt(id, v, &o->rules, &o->n_rules, &err) < 0)
      return agsx_fail(&err), -1;
    return 0;
  }
  return 0;
}

int agsx_cmd_network_create(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc,
                            char **argv) {
  struct create_opts o = {.json = ctx->json};
  int code = AGSX_EXIT_FAILURE;
  int i = agsx_parse_options(cmd, argc, argv, on_opt, &o);
  agsx_error_t err = NULL;
  struct agsx_network n = {0};
  if (i < 0)
    goto out;
  /* Options may also follow NAME, as with docker network create. */
  if (i < argc && i + 1 < argc) {
    int j = agsx_parse_options(cmd, argc - i, argv + i, on_opt, &o);
    if (j < 0)
      goto out;
    if (i + j < argc) {
      agsx_failf("network create: unexpected argument `%s`", argv[i + j]);
      goto out;
    }
  }
  if (i >= argc) {
    agsx_failf("network create: expected a NAME (see agsx network create --help)");
    goto out;
  }
  if (o.subnet == NULL) {
    agsx_failf("network create: --subnet CIDR is required (e.g. --subnet 10.20.0.0/24)");
    goto out;
  }
  if (agsx_cidr_parse(o.subnet, false, false, &n.subnet, &err) < 0) {
    code = agsx_fail(&err);
    goto out;
  }
  n.name = xstrdup(argv[i]);
  n.rules = steal_ptr(&o.rules);
  n.n_rules = o.n_rules;
  if (agsx_network_create(ctx->root, &n, &err) < 0) {
    code = agsx_fail(&err);
    goto out;
  }
  if (o.json) {
    _cleanup_free_ char *j = agsx_network_to_json(&n, false);
    printf("%s\n", j);
  } else {
    printf("%s\n", n.name);
  }
  code = 0;
out:
  free(o.rules);
  agsx_network_clear(&n);
  return code;
}

int agsx_cmd_network_ls(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc,
                        char **argv) {
  struct create_opts o = {.json = ctx->json};
  int i = agsx_parse_options(cmd, argc, argv, on_opt, &o);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i < argc)
    return agsx_failf("network ls: unexpected argument `%s`", argv[i]);
  agsx_error_t err = NULL;
  struct agsx_network *v = NULL;
  size_t n = 0;
  if (agsx_network_list(ctx->root, &v, &n, &err) < 0)
    return agsx_fail(&err);
  /* The public network first: it always exists (its bridge is made on use). */
  v = xrealloc(v, (n + 1) * sizeof(*v));
  memmove(v + 1, v, n * sizeof(*v));
  if (agsx_network_public(&v[0], &err) < 0) {
    memmove(v, v + 1, n * sizeof(*v));
    for (size_t k = 0; k < n; k++)
      agsx_network_clear(&v[k]);
    free(v);
    return agsx_fail(&err);
  }
  n++;
  if (o.json) {
    printf("[");
    for (size_t k = 0; k < n; k++) {
      _cleanup_free_ char *j = agsx_network_to_json(&v[k], true);
      printf("%s%s", k ? "," : "", j);
    }
    printf("]\n");
  } else if (o.quiet) {
    for (size_t k = 0; k < n; k++)
      printf("%s\n", v[k].name);
  } else {
    printf("%-20s %-7s %-18s %-15s %-6s %s\n", "NAME", "MODE", "SUBNET", "BRIDGE", "RULES",
           "SANDBOXES");
    for (size_t k = 0; k < n; k++) {
      char sub[20];
      printf("%-20s %-7s %-18s %-15s %-6zu %d\n", v[k].name, v[k].public_ ? "public" : "vpc",
             agsx_cidr_format(&v[k].subnet, sub), v[k].bridge, v[k].n_rules,
             agsx_network_users(&v[k]));
    }
  }
  for (size_t k = 0; k < n; k++)
    agsx_network_clear(&v[k]);
  free(v);
  return 0;
}

int agsx_cmd_network_rm(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc,
                        char **argv) {
  struct create_opts o = {0};
  int i = agsx_parse_options(cmd, argc, argv, on_opt, &o);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i >= argc)
    return agsx_failf("network rm: expected a NAME (see agsx network rm --help)");
  int code = 0;
  for (; i < argc; i++) {
    agsx_error_t err = NULL;
    if (strcmp(argv[i], "public") == 0) {
      code = agsx_failf("network rm: the public network cannot be removed (agsx gc removes its "
                        "bridge when unused)");
      continue;
    }
    if (agsx_network_remove(ctx->root, argv[i], &err) < 0)
      code = agsx_fail(&err);
    else
      printf("%s\n", argv[i]);
  }
  return code;
}

int agsx_cmd_network_inspect(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc,
                             char **argv) {
  struct create_opts o = {0};
  int i = agsx_parse_options(cmd, argc, argv, on_opt, &o);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i >= argc)
    return agsx_failf("network inspect: expected a NAME (see agsx network inspect --help)");
  int code = 0;
  printf("[");
  for (int k = 0; i < argc; i++) {
    agsx_error_t err = NULL;
    struct agsx_network n;
    int r = strcmp(argv[i], "public") == 0 ? agsx_network_public(&n, &err)
                                           : agsx_network_load(ctx->root, argv[i], &n, &err);
    if (r < 0) {
      fflush(stdout);
      code = agsx_fail(&err);
      continue;
    }
    _cleanup_free_ char *j = agsx_network_to_json(&n, true);
    printf("%s%s", k++ ? "," : "", j);
    agsx_network_clear(&n);
  }
  printf("]\n");
  return code;
}

int agsx_cmd_network_update(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc,
                            char **argv) {
  struct create_opts o = {.json = ctx->json};
  bool given = false;
  int code = AGSX_EXIT_FAILURE;
  int i = agsx_parse_options(cmd, argc, argv, on_opt, &o);
  if (i < 0)
    goto out;
  /* Options may also follow NAME. */
  if (i < argc && i + 1 < argc) {
    int j = agsx_parse_options(cmd, argc - i, argv + i, on_opt, &o);
    if (j < 0)
      goto out;
    if (i + j < argc) {
      agsx_failf("network update: unexpected argument `%s`", argv[i + j]);
      goto out;
    }
  }
  for (int k = 1; k < argc; k++)
    given |= strncmp(argv[k], "--allow", 7) == 0 || strncmp(argv[k], "--deny", 6) == 0 ||
             strncmp(argv[k], "--rules", 7) == 0;
  if (i >= argc || !given) {
    agsx_failf("network update: expected --allow, --deny or --rules, and a NAME (see agsx network "
               "update --help)");
    goto out;
  }
  agsx_error_t err = NULL;
  size_t members = 0, cut = 0;
  if (agsx_network_update(ctx->root, argv[i], o.rules, o.n_rules, &members, &cut, &err) < 0) {
    code = agsx_fail(&err);
    goto out;
  }
  if (o.json) {
    struct agsx_network n;
    if (agsx_network_load(ctx->root, argv[i], &n, &err) < 0) {
      code = agsx_fail(&err);
      goto out;
    }
    _cleanup_free_ char *j = agsx_network_to_json(&n, false);
    agsx_network_clear(&n);
    /* the definition, plus what the update touched */
    printf("%.*s,\"updated_sandboxes\":%zu,\"connections_cut\":%zu}\n", (int)strlen(j) - 1, j,
           members, cut);
  } else {
    printf("%s\n", argv[i]);
  }
  code = 0;
out:
  free(o.rules);
  return code;
}
