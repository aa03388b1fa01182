/* agsx commit: a sandbox's filesystem as a new image (docker commit's job;
 * sandbox/snapshot.h, image/build/build.h agsx_build_commit). */
#include "config.h"

#include "cmd.h"
#include "image/build/build.h"
#include "image/image.h"
#include "sandbox/snapshot.h"
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

struct layers {
  char **lids, **paths;
  char own[33]; /* the captured layer, removed at the end */
  int64_t frozen_ns;
  uint64_t holes;
};

static int take_layers(int statefd, const char *state, const char *id, const char *snapshot,
                       struct layers *l, agsx_error_t *err) {
  if (snapshot) {
    struct agsx_snapshot s;
    if (agsx_snapshot_get(statefd, id, snapshot, &s, err) < 0)
      return -1;
    l->lids = steal_ptr(&s.layers);
    l->holes = s.holes;
    agsx_snapshot_clear(&s);
  } else {
    struct agsx_capture c;
    sigset_t old;
    agsx_cmd_block_stop_signals(&old);
    int r = agsx_snapshot_capture(statefd, id, &c, err);
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (r < 0)
      return -1;
    l->lids = steal_ptr(&c.layers);
    memcpy(l->own, c.lid, sizeof(l->own));
    l->frozen_ns = c.frozen_ns;
    l->holes = c.holes;
    agsx_capture_clear(&c);
  }
  l->holes = agsx_snapshot_layers_holes(statefd, l->lids);
  if (l->holes > AGSX_COMMIT_HOLES_MAX) {
    _cleanup_free_ char *h = agsx_format_size(l->holes);
    return agsx_error_set(err, 0,
                          "sandbox `%.12s` has sparse files with %s of holes: a layer holds files "
                          "whole (at most 1 GiB of holes)",
                          id, h);
  }
  for (size_t i = 0; l->lids[i]; i++) {
    _cleanup_free_ char *p = xasprintf("%s/layers/%s", state, l->lids[i]);
    agsx_strv_push(&l->paths, p);
  }
  return 0;
}

static int commit(struct agsx_ctx *ctx, const struct commit_cli *o, int statefd, const char *id,
                  const char *image, struct layers *l, char digest[AGSX_DIGEST_LEN],
                  agsx_error_t *err) {
  struct agsx_record rec;
  if (agsx_record_read(statefd, id, &rec, err) < 0)
    return -1;
  int r = 0;
  if (rec.image_digest == NULL)
    r = agsx_error_set(err, ENOTSUP,
                       "sandbox `%.12s` runs the host image: it has no image to commit onto", id);
  _cleanup_strv_ char **tags = NULL;
  if (r == 0 && image) {
    char *ref = agsx_image_ref_normalize(image, err);
    if (ref == NULL)
      r = agsx_error_wrap(err, "invalid image name `%s`", image);
    else
      agsx_strv_push(&tags, ref);
    free(ref);
  }
  _cleanup_free_ char *by = xasprintf("agsx commit %.12s%s%s", id, o->snapshot ? " snapshot " : "",
                                      o->snapshot ? o->snapshot : "");
  struct agsx_store *s = NULL;
  if (r == 0)
    r = take_layers(statefd, ctx->state, id, o->snapshot, l, err);
  if (r == 0)
    r = agsx_store_open(ctx->root, true, &s, err);
  struct agsx_commit_opts co = {
      .image = rec.image_digest, .layer_dirs = l->paths, .tags = tags, .created_by = by};
  if (r == 0)
    r = agsx_build_commit(s, &co, digest, err);
  agsx_store_free(s);
  agsx_record_clear(&rec);
  return r;
}

int agsx_cmd_commit(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  struct commit_cli o = {.json = ctx->json};
  int i = agsx_parse_options(cmd, argc, argv, on_opt, &o);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i >= argc || argc - i > 2)
    return agsx_failf("commit: give SANDBOX [IMAGE[:TAG]] (see agsx commit --help)");
  agsx_state_reap_all(ctx->state, true, NULL);
  _cleanup_close_ int statefd = open(ctx->state, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (statefd < 0)
    return agsx_failf("no such sandbox `%s`", argv[i]);
  agsx_error_t err = NULL;
  char id[33];
  if (agsx_state_resolve(statefd, argv[i], id, &err) < 0)
    return agsx_fail(&err);
  struct layers l = {0};
  char digest[AGSX_DIGEST_LEN];
  int64_t t0 = agsx_mono_ns();
  int r = commit(ctx, &o, statefd, id, i + 1 < argc ? argv[i + 1] : NULL, &l, digest, &err);
  if (l.own[0]) {
    _cleanup_free_ char *p = xasprintf("layers/%s", l.own);
    _cleanup_error_ agsx_error_t e = NULL;
    agsx_rm_rf_at(statefd, p, &e);
  }
  agsx_strv_free(l.lids);
  agsx_strv_free(l.paths);
  if (r < 0)
    return agsx_fail(&err);
  if (o.json) {
    _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "id", digest);
    agsx_json_kv_str(g, "sandbox", id);
    agsx_json_kv_str(g, "image", i + 1 < argc ? argv[i + 1] : NULL);
    agsx_json_kv_str(g, "snapshot", o.snapshot);
    agsx_json_kv_int(g, "frozen_ms", l.frozen_ns / 1000000);
    agsx_json_kv_int(g, "duration_ms", (agsx_mono_ns() - t0) / 1000000);
    yajl_gen_map_close(g);
    size_t len;
    _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
    printf("%s\n", s);
    return 0;
  }
  printf("%s\n", digest);
  if (!o.quiet && !o.snapshot)
    fprintf(stderr, "sandbox %.12s was frozen for %lld ms\n", id,
            (long long)(l.frozen_ns / 1000000));
  return 0;
}
