/* agsx — build: agsx commit's image, a sandbox's layers on its image, with
 * the layer writer and image writer of agsx build (see build.h). */
#include "config.h"

#include "image/build/build-internal.h"

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
