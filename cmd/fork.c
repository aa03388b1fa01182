/* agsx fork: new sandboxes from a running sandbox's current filesystem
 * (sandbox/snapshot.h agsx_sandbox_fork). */
#include "config.h"

#include "cmd.h"
#include "sandbox/snapshot.h"
#include "state/state.h"
#include "util/json.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

struct fork_cli {
  bool json;
  const char *name;
  unsigned count;
  uint64_t timeout;
};

static int on_opt(void *data, int id, const char *arg) {
  struct fork_cli *o = data;
  agsx_error_t err = NULL;
  switch (id) {
  case O_JSON: o->json = true; return 0;
  case O_NAME:
    if (!agsx_name_is_valid(arg))
      return agsx_failf("fork: invalid name `%s`: letters, digits and _.- (at most 64, starting "
                        "with a letter or digit)",
                        arg),
             -1;
    o->name = arg;
    return 0;
  case O_COUNT: {
    char *end;
    errno = 0;
    unsigned long n = strtoul(arg, &end, 10);
    if (errno || *end || end == arg || n < 1 || n > AGSX_FORK_MAX || arg[0] == '-')
      return agsx_failf("fork: invalid count `%s` (1 to %d)", arg, AGSX_FORK_MAX), -1;
    o->count = (unsigned)n;
    return 0;
  }
  case O_TIMEOUT:
    if (agsx_parse_duration(arg, &o->timeout, &err) < 0)
      return agsx_failf("fork: invalid --timeout `%s`: %s", arg, err->msg), agsx_error_free(&err),
             -1;
    return 0;
  }
  return 0;
}

int agsx_cmd_fork(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  struct fork_cli o = {.json = ctx->json, .count = 1};
  int i = agsx_parse_options(cmd, argc, argv, on_opt, &o);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i >= argc)
    return agsx_failf("fork: give SANDBOX (see agsx fork --help)");
  _cleanup_close_ int statefd = agsx_cmd_state_open(ctx);
  agsx_error_t err = NULL;
  char id[33];
  if (agsx_cmd_lookup_id(statefd, argv[i], id, &err) < 0)
    return agsx_fail(&err);
  struct agsx_fork_opts fo = {.root = ctx->root,
                              .state = ctx->state,
                              .source = id,
                              .name = o.name,
                              .count = o.count,
                              .timeout = o.timeout,
                              .cmd = i + 1 < argc ? argv + i + 1 : NULL};
  struct agsx_fork *v = NULL;
  size_t n = 0;
  int64_t frozen = 0;
  sigset_t old;
  agsx_cmd_block_stop_signals(&old);
  int r = agsx_sandbox_fork(&fo, &v, &n, &frozen, &err);
  sigprocmask(SIG_SETMASK, &old, NULL);
  if (o.json) {
    _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
    yajl_gen_array_open(g);
    for (size_t k = 0; k < n; k++) {
      yajl_gen_map_open(g);
      agsx_json_kv_str(g, "id", v[k].id);
      agsx_json_kv_str(g, "name", v[k].name);
      agsx_json_kv_str(g, "source", id);
      agsx_json_kv_int(g, "frozen_ms", frozen / 1000000);
      yajl_gen_map_close(g);
    }
    yajl_gen_array_close(g);
    size_t len;
    _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
    printf("%s\n", s);
  } else {
    for (size_t k = 0; k < n; k++)
      printf("%s\n", v[k].id);
  }
  agsx_forks_free(v, n);
  return r < 0 ? agsx_fail(&err) : 0;
}
