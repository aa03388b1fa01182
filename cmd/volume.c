/* agsx volume: create, list and remove named volumes (sandbox/volume.h),
 * which `agsx run -v NAME:/path` and the API's volumeMounts mount. */
#include "config.h"

#include "cmd.h"
#include "table.h"
#include "sandbox/volume.h"
#include "util/json.h"

#include <stdio.h>
#include <string.h>

struct vol_opts {
  bool json, quiet;
};

static int on_opt(void *data, int id, const char *v) {
  (void)v;
  struct vol_opts *o = data;
  if (id == O_JSON)
    o->json = true;
  else if (id == O_QUIET)
    o->quiet = true;
  return 0;
}

int agsx_cmd_volume_create(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc,
                           char **argv) {
  struct vol_opts o = {0};
  int i = agsx_parse_options(cmd, argc, argv, on_opt, &o);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i >= argc)
    return agsx_failf("volume create: expected a NAME (see agsx volume create --help)");
  int code = 0;
  for (; i < argc; i++) {
    agsx_error_t err = NULL;
    if (agsx_volume_create(ctx->root, argv[i], false, &err) < 0)
      code = agsx_fail(&err);
    else
      printf("%s\n", argv[i]);
  }
  return code;
}

static void gen_volume(yajl_gen g, const char *root, const struct agsx_volume *v) {
  _cleanup_free_ char *created = agsx_format_rfc3339(v->created);
  _cleanup_free_ char *path = xasprintf("%s/volumes/%s/_data", root, v->name);
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "name", v->name);
  agsx_json_kv_str(g, "created", created);
  agsx_json_kv_bool(g, "in_use", v->in_use);
  agsx_json_kv_str(g, "path", path);
  yajl_gen_map_close(g);
}

int agsx_cmd_volume_ls(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc,
                       char **argv) {
  struct vol_opts o = {.json = ctx->json};
  int i = agsx_parse_options(cmd, argc, argv, on_opt, &o);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i < argc)
    return agsx_failf("volume ls: unexpected argument `%s`", argv[i]);
  agsx_error_t err = NULL;
  struct agsx_volume *v = NULL;
  size_t n = 0;
  if (agsx_volume_list(ctx->root, &v, &n, &err) < 0)
    return agsx_fail(&err);
  if (o.json) {
    _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
    yajl_gen_array_open(g);
    for (size_t k = 0; k < n; k++)
      gen_volume(g, ctx->root, &v[k]);
    yajl_gen_array_close(g);
    size_t len;
    _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
    printf("%s\n", s);
  } else if (o.quiet) {
    for (size_t k = 0; k < n; k++)
      printf("%s\n", v[k].name);
  } else {
    struct agsx_table t;
    agsx_table_init(&t, 3, (const char *const[]){"NAME", "CREATED", "IN USE"});
    for (size_t k = 0; k < n; k++) {
      _cleanup_free_ char *created = agsx_format_rfc3339(v[k].created);
      agsx_table_add(&t, (const char *const[]){v[k].name, created, v[k].in_use ? "yes" : "no"});
    }
    agsx_table_print(&t, stdout);
    agsx_table_clear(&t);
  }
  agsx_volume_list_free(v, n);
  return 0;
}

int agsx_cmd_volume_rm(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc,
                       char **argv) {
  struct vol_opts o = {0};
  int i = agsx_parse_options(cmd, argc, argv, on_opt, &o);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i >= argc)
    return agsx_failf("volume rm: expected a NAME (see agsx volume rm --help)");
  int code = 0;
  for (; i < argc; i++) {
    agsx_error_t err = NULL;
    if (agsx_volume_remove(ctx->root, argv[i], &err) < 0)
      code = agsx_fail(&err);
    else
      printf("%s\n", argv[i]);
  }
  return code;
}
