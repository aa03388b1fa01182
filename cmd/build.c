/* agsx build: an image from a Dockerfile (see src/image/build/build.h). */
#include "config.h"

#include "image/build/build.h"
#include "cmd.h"
#include "image/registry/registry.h"
#include "net/egress.h"

#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>

struct build_cli {
  char **tags, **args;
  const char *file, *network, *pull;
  bool no_cache, quiet;
  struct agsx_egress egress;
};

static int on_build_opt(void *data, int id, const char *v) {
  struct build_cli *o = data;
  agsx_error_t err = NULL;
  switch (id) {
  case O_TAG: {
    char *ref = agsx_image_ref_normalize(v, &err);
    if (ref == NULL)
      return agsx_failf("build: invalid tag `%s`: %s", v, err->msg), agsx_error_free(&err), -1;
    agsx_strv_push(&o->tags, ref);
    free(ref);
    return 0;
  }
  case O_FILE: o->file = v; return 0;
  case O_BUILD_ARG:
    if (*v == '\0' || *v == '=')
      return agsx_failf("build: invalid --build-arg `%s` (KEY=VALUE)", v), -1;
    agsx_strv_push(&o->args, v);
    return 0;
  case O_NETWORK:
    if (strcmp(v, "internal") != 0 && strcmp(v, "public") != 0 &&
        !(agsx_str_has_prefix(v, "vpc:") && v[4]))
      return agsx_failf("build: invalid --network `%s` (internal, public or vpc:NAME)", v), -1;
    o->network = v;
    return 0;
  case O_NO_CACHE: o->no_cache = true; return 0;
  case O_EGRESS_ALLOW:
  case O_EGRESS_DENY:
  case O_EGRESS_RULES:
    if (agsx_cmd_parse_egress_opt(id, v, &o->egress, &err) < 0)
      return agsx_failf("build: %s", err->msg), agsx_error_free(&err), -1;
    return 0;
  case O_PULL: {
    enum agsx_pull_policy pp;
    if (agsx_pull_policy_parse(v, &pp, &err) < 0)
      return agsx_failf("build: --pull: %s", err->msg), agsx_error_free(&err), -1;
    o->pull = v;
    return 0;
  }
  case O_QUIET: o->quiet = true; return 0;
  case O_PLATFORM:
    if (strcmp(v, "linux/amd64") != 0)
      return agsx_failf("build: unsupported platform `%s` (agsx builds linux/amd64)", v), -1;
    return 0;
  }
  return 0;
}

static void show(const char *text, size_t len, void *data) {
  (void)data;
  fwrite(text, 1, len, stderr);
}

int agsx_cmd_build(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  struct build_cli o = {.network = "public"};
  _cleanup_store_ struct agsx_store *s = NULL;
  _cleanup_close_ int sigfd = -1;
  agsx_error_t err = NULL;
  int code = AGSX_EXIT_FAILURE;
  int i = agsx_parse_options(cmd, argc, argv, on_build_opt, &o);
  if (i < 0)
    goto done;
  if (argc - i != 1) {
    agsx_failf("build: expected one CONTEXT directory (see agsx build --help)");
    goto done;
  }
  if (agsx_store_open(ctx->root, true, &s, &err) < 0) {
    code = agsx_fail(&err);
    goto done;
  }
  /* SIGINT, SIGTERM, SIGHUP stop the build cleanly: RUN's sandbox is
   * killed and the work directory removed. */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigprocmask(SIG_BLOCK, &set, NULL);
  sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  struct agsx_build_opts bo = {.cancel_fd = sigfd,
                               .context = argv[i],
                               .dockerfile = o.file,
                               .tags = o.tags,
                               .build_args = o.args,
                               .network = o.network,
                               .egress = &o.egress,
                               .no_cache = o.no_cache,
                               .state_dir = ctx->state,
                               .root = ctx->root,
                               .pull = o.pull,
                               .progress = o.quiet ? NULL : show};
  struct agsx_build_result res;
  if (agsx_build(s, &bo, &res, &err) < 0) {
    code = agsx_fail(&err);
    goto done;
  }
  if (ctx->json)
    printf("{\"id\":\"%s\",\"new_layers\":%zu,\"cached_layers\":%zu}\n", res.digest, res.new_layers,
           res.cached_layers);
  else
    printf("%s\n", res.digest);
  code = 0;
done:
  agsx_strv_free(o.tags);
  agsx_strv_free(o.args);
  agsx_egress_clear(&o.egress);
  return code;
}
