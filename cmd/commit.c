/* agsx commit: a sandbox's filesystem as a new image (docker commit's job;
 * image/build/build.h agsx_build_commit_sandbox). */
#include "config.h"

#include "cmd.h"
#include "image/build/build.h"
#include "state/state.h"
#include "util/json.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>

struct commit_cli {
  bool json, quiet;
  const char *snapshot;
};

static int on_opt(void *data, int id, const char *arg) {
  struct commit_cli *o = data;
  if (id == O_JSON)
    o->json = true;
  else if (id == O_QUIET)
    o->quiet = true;
  else if (id == O_SNAPSHOT)
    o->snapshot = arg;
  return 0;
}

/* Signals that would end us while a sandbox is frozen for our copy wait
 * until it is thawed: the reaper would thaw it, but only at the next agsx. */
void agsx_cmd_block_stop_signals(sigset_t *old) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigprocmask(SIG_BLOCK, &set, old);
}

int agsx_cmd_commit(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  struct commit_cli o = {.json = ctx->json};
  int i = agsx_parse_options(cmd, argc, argv, on_opt, &o);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i >= argc || argc - i > 2)
    return agsx_failf("commit: give SANDBOX [IMAGE[:TAG]] (see agsx commit --help)");
  _cleanup_close_ int statefd = agsx_cmd_state_open(ctx);
  agsx_error_t err = NULL;
  char id[33];
  if (agsx_cmd_lookup_id(statefd, argv[i], id, &err) < 0)
    return agsx_fail(&err);
  const char *image = i + 1 < argc ? argv[i + 1] : NULL;
  struct agsx_sandbox_commit_opts co = {
      .root = ctx->root, .state = ctx->state, .id = id, .image = image, .snapshot = o.snapshot};
  struct agsx_sandbox_commit_result res;
  int64_t t0 = agsx_mono_ns();
  sigset_t old;
  agsx_cmd_block_stop_signals(&old);
  int r = agsx_build_commit_sandbox(&co, &res, &err);
  sigprocmask(SIG_SETMASK, &old, NULL);
  if (r < 0)
    return agsx_fail(&err);
  if (o.json) {
    _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "id", res.digest);
    agsx_json_kv_str(g, "sandbox", id);
    agsx_json_kv_str(g, "image", image);
    agsx_json_kv_str(g, "snapshot", o.snapshot);
    agsx_json_kv_int(g, "frozen_ms", res.frozen_ns / 1000000);
    agsx_json_kv_int(g, "duration_ms", (agsx_mono_ns() - t0) / 1000000);
    yajl_gen_map_close(g);
    size_t len;
    _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
    printf("%s\n", s);
    return 0;
  }
  printf("%s\n", res.digest);
  if (!o.quiet && !o.snapshot)
    fprintf(stderr, "sandbox %.12s was frozen for %lld ms\n", id,
            (long long)(res.frozen_ns / 1000000));
  return 0;
}
