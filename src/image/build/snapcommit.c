/* agsx — build: agsx commit's image, a sandbox's layers on its image, with
 * the layer writer and image writer of agsx build (see build.h). */
#include "config.h"

#include "image/build/build-internal.h"

#include "image/image.h"
#include "sandbox/snapshot.h"
#include "state/state.h"

#include <fcntl.h>
#include <string.h>

static int one_layer(struct build *b, struct stage *st, const char *dir, const char *created_by,
                     agsx_error_t *err) {
  _cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "open layer `%s`", dir);
  struct lw lw = {.fd = -1};
  int r = agsx_lw_open(b, &lw, err);
  if (r == 0) {
    struct upper_walk u = {.b = b, .w = &lw, .base = 0};
    r = agsx_build_upper_dir(&u, fd, "", 0, err);
    for (size_t i = 0; i < u.n_links; i++)
      free(u.links[i].path);
    free(u.links);
  }
  if (r == 0)
    r = agsx_lw_commit(b, &lw, st, created_by, NULL, err);
  agsx_lw_free(&lw);
  return r;
}

int agsx_build_commit(struct agsx_store *s, const struct agsx_commit_opts *o,
                      char ret_digest[AGSX_DIGEST_LEN], agsx_error_t *err) {
  struct agsx_build_opts bo = {.tags = o->tags, .pull = "never", .cancel_fd = -1};
  struct agsx_build_result res = {0};
  struct build b = {.s = s, .o = &bo, .workfd = -1, .ctxfd = -1, .cachefd = -1, .res = &res};
  struct stage st = {0};
  b.cur = &st;
  _cleanup_error_ agsx_error_t cerr = NULL;
  if (agsx_store_clean_tmp(s, &cerr) < 0)
    agsx_warn("%s", cerr->msg);
  b.workfd = agsx_store_mkwork(s, "commit", &b.work, err);
  int r = b.workfd < 0 ? -1 : agsx_build_from_image(&b, &st, o->image, err);
  for (size_t i = 0; r == 0 && o->layer_dirs && o->layer_dirs[i]; i++)
    r = one_layer(&b, &st, o->layer_dirs[i], o->created_by, err);
  if (r == 0)
    r = agsx_build_write_image(&b, &st, err);
  if (r == 0)
    memcpy(ret_digest, res.digest, AGSX_DIGEST_LEN);
  agsx_build_stage_clear(&st);
  agsx_closep(&b.workfd);
  agsx_error_free(&cerr);
  if (b.work && agsx_rm_rf_at(s->tmpfd, b.work, &cerr) < 0)
    agsx_warn("%s", cerr->msg);
  free(b.work);
  return r;
}

/* ---- a sandbox's commit ------------------------------------------------------------------ */

struct taken {
  char **lids, **paths;
  char own[33]; /* the captured layer, removed at the end */
};

static int take_layers(int statefd, const struct agsx_sandbox_commit_opts *o, struct taken *l,
                       struct agsx_sandbox_commit_result *ret, agsx_error_t *err) {
  if (o->snapshot) {
    struct agsx_snapshot s;
    if (agsx_snapshot_get(statefd, o->id, o->snapshot, &s, err) < 0)
      return -1;
    l->lids = steal_ptr(&s.layers);
    agsx_snapshot_clear(&s);
  } else {
    struct agsx_capture c;
    if (agsx_snapshot_capture(statefd, o->id, &c, err) < 0)
      return -1;
    l->lids = steal_ptr(&c.layers);
    memcpy(l->own, c.lid, sizeof(l->own));
    ret->frozen_ns = c.frozen_ns;
    agsx_capture_clear(&c);
  }
  for (size_t i = 0; l->lids[i]; i++) {
    _cleanup_free_ char *p = xasprintf("%s/layers/%s", o->state, l->lids[i]);
    agsx_strv_push(&l->paths, p);
  }
  uint64_t holes = agsx_snapshot_layers_holes(statefd, l->lids);
  if (holes > AGSX_COMMIT_HOLES_MAX) {
    _cleanup_free_ char *h = agsx_format_size(holes);
    return agsx_error_set(err, 0,
                          "sandbox `%.12s` has sparse files with %s of holes: a layer holds files "
                          "whole (at most 1 GiB of holes)",
                          o->id, h);
  }
  return 0;
}

static int commit_taken(int statefd, const struct agsx_sandbox_commit_opts *o, struct taken *l,
                        struct agsx_sandbox_commit_result *ret, agsx_error_t *err) {
  struct agsx_record rec;
  if (agsx_record_read(statefd, o->id, &rec, err) < 0)
    return -1;
  int r = 0;
  if (rec.image_digest == NULL)
    r = agsx_error_set_quiet(err, ENOTSUP,
                             "sandbox `%.12s` runs the host image: the host's / is no image in "
                             "the store, so its writable layer (/tmp and /root) cannot become "
                             "one; snapshot or fork it instead, or work in an image",
                             o->id);
  _cleanup_strv_ char **tags = NULL;
  if (r == 0 && o->image) {
    char *ref = agsx_image_ref_normalize(o->image, err);
    if (ref == NULL)
      r = agsx_error_wrap(err, "invalid image name `%s`", o->image);
    else
      agsx_strv_push(&tags, ref);
    free(ref);
  }
  _cleanup_free_ char *by =
      xasprintf("agsx commit %.12s%s%s", o->id, o->snapshot ? " snapshot " : "",
                o->snapshot ? o->snapshot : "");
  struct agsx_store *s = NULL;
  if (r == 0)
    r = take_layers(statefd, o, l, ret, err);
  if (r == 0)
    r = agsx_store_open(o->root, true, &s, err);
  struct agsx_commit_opts co = {
      .image = rec.image_digest, .layer_dirs = l->paths, .tags = tags, .created_by = by};
  if (r == 0)
    r = agsx_build_commit(s, &co, ret->digest, err);
  agsx_store_free(s);
  agsx_record_clear(&rec);
  return r;
}

int agsx_build_commit_sandbox(const struct agsx_sandbox_commit_opts *o,
                              struct agsx_sandbox_commit_result *ret, agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  _cleanup_close_ int statefd = agsx_state_open(o->state, false, err);
  if (statefd < 0)
    return -1;
  struct taken l = {0};
  int r = commit_taken(statefd, o, &l, ret, err);
  if (l.own[0]) {
    _cleanup_free_ char *p = xasprintf("layers/%s", l.own);
    _cleanup_error_ agsx_error_t e = NULL;
    agsx_rm_rf_at(statefd, p, &e);
  }
  agsx_strv_free(l.lids);
  agsx_strv_free(l.paths);
  return r;
}
