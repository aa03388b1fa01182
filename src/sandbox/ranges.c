/* agsx — ranges: copies of lower layers for an ordinary user's per-sandbox
 * id ranges (see ranges.h). */
#include "config.h"

#include "sandbox/ranges.h"

#include "host/rootless.h"
#include "sandbox/snapshot.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define RANGES_DIR "ranges"
#define TMP_PREFIX ".tmp-"

/* LAYER as X/layers/NAME: X (new) and NAME (in LAYER). NAME is a layer's
 * name as agsx makes them: hex digits (a diff_id's, a snapshot layer's). */
static int split_layer(const char *layer, char **ret_x, const char **ret_name, agsx_error_t *err) {
  const char *slash = strrchr(layer, '/');
  const char *name = slash ? slash + 1 : NULL;
  size_t len = name ? strlen(name) : 0;
  static const char dir[] = "/layers/";
  size_t dl = sizeof(dir) - 1;
  if (!name || len == 0 || len > 64 || strspn(name, "0123456789abcdef") != len ||
      (size_t)(name - layer) < dl + 1 || memcmp(name - dl, dir, dl) != 0)
    return agsx_error_set(err, EINVAL, "layer `%s`: not a layer directory of agsx's", layer);
  *ret_x = xstrndup(layer, (size_t)(name - dl - layer));
  *ret_name = name;
  return 0;
}

static int range_copy(const struct agsx_idrange *ids, const char *layer, char **ret,
                      agsx_error_t *err) {
  _cleanup_free_ char *x = NULL;
  const char *name = NULL;
  if (split_layer(layer, &x, &name, err) < 0)
    return -1;
  _cleanup_free_ char *dir = xasprintf("%s/" RANGES_DIR "/%u", x, ids->slot);
  _cleanup_close_ int dirfd = agsx_mkdir_p_open(dir, 0700, err);
  if (dirfd < 0)
    return agsx_error_wrap(err, "the copies of id range %u", ids->slot);
  char *path = xasprintf("%s/%s", dir, name);
  struct stat st;
  if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
    *ret = path;
    return 0;
  }
  _cleanup_free_ char *tmp = xasprintf(TMP_PREFIX "%s", name);
  _cleanup_error_ agsx_error_t e = NULL;
  agsx_rm_rf_at(dirfd, tmp, &e);
  int64_t t0 = agsx_mono_ns();
  uint64_t bytes = 0;
  _cleanup_close_ int src = open(layer, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (src < 0) {
    free(path);
    return agsx_error_set(err, errno, "open layer `%s`", layer);
  }
  int r = mkdirat(dirfd, tmp, 0700) < 0 ? agsx_error_set(err, errno, "create `%s`", tmp) : 0;
  _cleanup_close_ int dst =
      r < 0 ? -1 : openat(dirfd, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (r == 0 && dst < 0)
    r = agsx_error_set(err, errno, "open `%s`", tmp);
  if (r == 0)
    r = agsx_layer_copy_to_range(src, dst, ids->base, &bytes, err);
  /* Durable before it is named, as the store's layers are: a copy that
   * exists is whole (one syncfs, not an fsync per file). */
  if (r == 0 && syncfs(dst) < 0)
    r = agsx_error_set(err, errno, "syncfs `%s`", tmp);
  if (r == 0 && renameat(dirfd, tmp, dirfd, name) < 0)
    r = agsx_error_set(err, errno, "rename `%s`", tmp);
  if (r < 0) {
    agsx_rm_rf_at(dirfd, tmp, &e);
    free(path);
    return agsx_error_wrap(err, "copy layer %.12s for id range %u", name, ids->slot);
  }
  agsx_debug("id range %u: layer %.12s copied, %" PRIu64 " bytes in %" PRId64 " ms", ids->slot,
             name, bytes, (agsx_mono_ns() - t0) / 1000000);
  *ret = path;
  return 0;
}

int agsx_range_layers(const struct agsx_idrange *ids, char *const *layers, size_t n, char ***ret,
                      agsx_error_t *err) {
  char **v = xzalloc((n + 1) * sizeof(char *));
  for (size_t i = 0; i < n; i++) {
    if (!agsx_rootless() || ids->base == 0) {
      v[i] = xstrdup(layers[i]);
      continue;
    }
    if (range_copy(ids, layers[i], &v[i], err) < 0) {
      agsx_strv_free(v);
      return -1;
    }
  }
  *ret = v;
  return 0;
}

/* ---- gc ------------------------------------------------------------------------------------ */

static bool slot_name(const char *s, unsigned *ret) {
  size_t len = strlen(s);
  if (len == 0 || len > 4 || strspn(s, "0123456789") != len || (len > 1 && s[0] == '0'))
    return false;
  *ret = (unsigned)atoi(s);
  return true;
}

/* The copies of range SLOT (its lock held by us): the interrupted ones,
 * those of layers that are gone, every one when ALL. */
static void gc_range(int rangesfd, const char *k, int layersfd, bool all, bool dry_run,
                     void (*report)(const char *what, void *data), void *data) {
  _cleanup_close_ int kfd = openat(rangesfd, k, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (kfd < 0)
    return;
  _cleanup_dir_ DIR *d = agsx_dir_stream(kfd);
  if (d == NULL)
    return;
  for (struct dirent *de; (de = readdir(d));) {
    const char *name = de->d_name;
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
      continue;
    struct stat st;
    bool gone = all || strncmp(name, TMP_PREFIX, strlen(TMP_PREFIX)) == 0 || layersfd < 0 ||
                fstatat(layersfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0;
    if (!gone)
      continue;
    _cleanup_free_ char *what = xasprintf("id range copy %s/%s", k, name);
    _cleanup_error_ agsx_error_t e = NULL;
    if (!dry_run && agsx_rm_rf_at(kfd, name, &e) < 0) {
      agsx_warn("gc: %s: %s", what, e->msg);
      continue;
    }
    if (report)
      report(what, data);
  }
  if (!dry_run)
    (void)unlinkat(rangesfd, k, AT_REMOVEDIR);
}

void agsx_range_gc(const char *x, bool dry_run, void (*report)(const char *what, void *data),
                   void *data) {
  if (!agsx_rootless())
    return;
  _cleanup_free_ char *rdir = xasprintf("%s/" RANGES_DIR, x);
  _cleanup_close_ int rangesfd = open(rdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (rangesfd < 0)
    return;
  _cleanup_free_ char *ldir = xasprintf("%s/layers", x);
  _cleanup_close_ int layersfd = open(ldir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  _cleanup_error_ agsx_error_t e = NULL;
  _cleanup_close_ int slots = agsx_userns_open_user_slots(&e);
  if (slots < 0) {
    agsx_warn("gc: %s", e->msg);
    return;
  }
  _cleanup_dir_ DIR *d = agsx_dir_stream(rangesfd);
  if (d == NULL)
    return;
  unsigned long n = agsx_rootless_ranges();
  for (struct dirent *de; (de = readdir(d));) {
    unsigned slot;
    if (!slot_name(de->d_name, &slot))
      continue;
    /* A range a sandbox holds keeps its copies (its overlay is on them). */
    _cleanup_close_ int lock =
        openat(slots, de->d_name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (lock < 0 || flock(lock, LOCK_EX | LOCK_NB) < 0)
      continue;
    gc_range(rangesfd, de->d_name, layersfd, slot == 0 || slot >= n, dry_run, report, data);
  }
  if (!dry_run)
    (void)unlinkat(AT_FDCWD, rdir, AT_REMOVEDIR);
}
