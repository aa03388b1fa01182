/* agsx snapshot, snapshot ls, snapshot rm, rollback: a running sandbox's
 * filesystem recorded and restored (sandbox/snapshot.h). */
#include "config.h"

#include "cmd.h"
#include "sandbox/snapshot.h"
#include "state/state.h"
#include "table.h"
#include "util/json.h"

#include <fcntl.h>
#include <string.h>

struct snflags {
  bool json, quiet;
};

static int on_opt(void *data, int id, const char *arg) {
  struct snflags *f = data;
  (void)arg;
  if (id == O_JSON)
    f->json = true;
  else if (id == O_QUIET)
    f->quiet = true;
  return 0;
}

static int parse(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv,
                 struct snflags *f) {
  memset(f, 0, sizeof(*f));
  f->json = ctx->json;
  return agsx_parse_options(cmd, argc, argv, on_opt, f);
}

/* The state directory and SANDBOX's id; -1 after printing why. */
static int open_target(struct agsx_ctx *ctx, const char *sandbox, char id[33]) {
  int fd = agsx_cmd_state_open(ctx);
  agsx_error_t err = NULL;
  if (agsx_cmd_lookup_id(fd, sandbox, id, &err) < 0) {
    if (fd >= 0)
      close(fd);
    return agsx_fail(&err), -1;
  }
  return fd;
}

static void gen_snapshot(yajl_gen g, const char *id, const struct agsx_snapshot *s) {
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "sandbox", id);
  agsx_json_kv_str(g, "name", s->name);
  _cleanup_free_ char *created = agsx_format_rfc3339(s->created);
  agsx_json_kv_str(g, "created", created);
  agsx_json_kv_int(g, "bytes", (int64_t)s->bytes);
  agsx_json_kv_int(g, "files", (int64_t)s->files);
  agsx_json_kv_int(g, "layers", (int64_t)agsx_strv_len(s->layers));
}

static void print_gen(yajl_gen g) {
  size_t len;
  _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
  fwrite(s, 1, len, stdout);
  fputc('\n', stdout);
}

int agsx_cmd_snapshot(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  struct snflags f;
  int i = parse(ctx, cmd, argc, argv, &f);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i >= argc || argc - i > 2)
    return agsx_failf("snapshot: give SANDBOX [NAME] (see agsx snapshot --help)");
  char id[33];
  _cleanup_close_ int statefd = open_target(ctx, argv[i], id);
  if (statefd < 0)
    return AGSX_EXIT_FAILURE;
  agsx_error_t err = NULL;
  struct agsx_snapshot s;
  int64_t frozen = 0;
  if (agsx_snapshot_create(statefd, id, i + 1 < argc ? argv[i + 1] : NULL, &s, &frozen, &err) < 0)
    return agsx_fail(&err);
  if (f.json) {
    _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
    gen_snapshot(g, id, &s);
    agsx_json_kv_int(g, "frozen_ms", frozen / 1000000);
    yajl_gen_map_close(g);
    print_gen(g);
  } else {
    printf("%s\n", s.name);
  }
  agsx_snapshot_clear(&s);
  return 0;
}

/* The snapshots of one sandbox, or of every running one. */
int agsx_cmd_snapshot_ls(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc,
                         char **argv) {
  struct snflags f;
  int i = parse(ctx, cmd, argc, argv, &f);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (argc - i > 1)
    return agsx_failf("snapshot ls: give at most one SANDBOX");
  _cleanup_strv_ char **ids = NULL;
  _cleanup_close_ int statefd = -1;
  if (i < argc) {
    char id[33];
    if ((statefd = open_target(ctx, argv[i], id)) < 0)
      return AGSX_EXIT_FAILURE;
    agsx_strv_push(&ids, id);
  } else {
    agsx_state_reap_all(ctx->state, true, NULL);
    statefd = open(ctx->state, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct agsx_record *v = NULL;
    size_t n = statefd < 0 ? 0 : agsx_state_load(statefd, 0, &v);
    for (size_t k = 0; k < n; k++) {
      if (v[k].status == AGSX_STATUS_RUNNING)
        agsx_strv_push(&ids, v[k].id);
      agsx_record_clear(&v[k]);
    }
    free(v);
  }
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_array_open(g);
  static const char *const head[] = {"SANDBOX", "NAME", "CREATED", "SIZE", "FILES"};
  struct agsx_table t;
  agsx_table_init(&t, 5, head);
  int rc = 0;
  int64_t now = agsx_now_ns() / 1000000000LL;
  for (size_t k = 0; ids && ids[k]; k++) {
    struct agsx_snapshot *v = NULL;
    size_t n = 0;
    agsx_error_t err = NULL;
    if (agsx_snapshot_list(statefd, ids[k], &v, &n, &err) < 0) {
      if (i == argc && agsx_error_errno(&err) == ESRCH) {
        agsx_error_free(&err); /* ended since the listing */
        continue;
      }
      agsx_table_clear(&t);
      return agsx_fail(&err);
    }
    for (size_t j = 0; j < n; j++) {
      if (f.json) {
        gen_snapshot(g, ids[k], &v[j]);
        yajl_gen_map_close(g);
        continue;
      }
      if (f.quiet) {
        printf("%s\n", v[j].name);
        continue;
      }
      char sid[13], files[24];
      snprintf(sid, sizeof(sid), "%.12s", ids[k]);
      snprintf(files, sizeof(files), "%llu", (unsigned long long)v[j].files);
      _cleanup_free_ char *age =
          agsx_format_duration((uint64_t)(now > v[j].created ? now - v[j].created : 0));
      _cleanup_free_ char *ago = xasprintf("%s ago", age);
      _cleanup_free_ char *size = agsx_format_size(v[j].bytes);
      const char *cells[] = {sid, v[j].name, ago, size, files};
      agsx_table_add(&t, cells);
    }
    agsx_snapshot_list_free(v, n);
  }
  yajl_gen_array_close(g);
  if (f.json)
    print_gen(g);
  else if (!f.quiet)
    agsx_table_print(&t, stdout);
  agsx_table_clear(&t);
  return rc;
}

int agsx_cmd_snapshot_rm(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc,
                         char **argv) {
  struct snflags f;
  int i = parse(ctx, cmd, argc, argv, &f);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (argc - i < 2)
    return agsx_failf("snapshot rm: give SANDBOX NAME... (see agsx snapshot rm --help)");
  char id[33];
  _cleanup_close_ int statefd = open_target(ctx, argv[i], id);
  if (statefd < 0)
    return AGSX_EXIT_FAILURE;
  int rc = 0;
  for (int k = i + 1; k < argc; k++) {
    agsx_error_t err = NULL;
    if (agsx_snapshot_remove(statefd, id, argv[k], &err) < 0)
      rc = agsx_fail(&err);
    else
      printf("%s\n", argv[k]);
  }
  return rc;
}

int agsx_cmd_rollback(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  struct snflags f;
  int i = parse(ctx, cmd, argc, argv, &f);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (argc - i != 2)
    return agsx_failf("rollback: give SANDBOX NAME (see agsx rollback --help)");
  char id[33];
  _cleanup_close_ int statefd = open_target(ctx, argv[i], id);
  if (statefd < 0)
    return AGSX_EXIT_FAILURE;
  agsx_error_t err = NULL;
  if (agsx_snapshot_rollback(statefd, id, argv[i + 1], &err) < 0)
    return agsx_fail(&err);
  printf("%s\n", argv[i]);
  return 0;
}
