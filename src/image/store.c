/* agsx — the image store (an OCI image layout plus unpacked layers). */
#include "config.h"

#include "image/store.h"

#include "util/conf.h"
#include "image/layer.h"

#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#define COPY_BUF (1u << 20)
#define INDEX_MAX (16u << 20)

static const char OCI_LAYOUT[] = "{\"imageLayoutVersion\":\"1.0.0\"}";
static const char EMPTY_INDEX[] =
    "{\"schemaVersion\":2,\"mediaType\":\"" AGSX_MT_OCI_INDEX "\",\"manifests\":[]}";

void agsx_store_free(struct agsx_store *s) {
  if (s == NULL)
    return;
  agsx_closep(&s->rootfd);
  agsx_closep(&s->blobsfd);
  agsx_closep(&s->layersfd);
  agsx_closep(&s->tmpfd);
  agsx_closep(&s->gc_lock);
  free(s->path);
  free(s);
}

void agsx_store_freep(struct agsx_store **s) {
  agsx_store_free(*s);
  *s = NULL;
}

static int open_subdir(int dirfd, const char *name, bool create, mode_t mode, agsx_error_t *err) {
  if (create && mkdirat(dirfd, name, mode) < 0 && errno != EEXIST)
    return agsx_error_set(err, errno, "mkdir `%s`", name);
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "open `%s`", name);
  return fd;
}

/* Writes oci-layout and an empty index.json when they do not exist yet. */
static int init_layout(int rootfd, agsx_error_t *err) {
  if (faccessat(rootfd, "oci-layout", F_OK, AT_SYMLINK_NOFOLLOW) < 0 &&
      agsx_write_file_atomic(rootfd, "oci-layout", OCI_LAYOUT, strlen(OCI_LAYOUT), 0644, err) < 0)
    return -1;
  _cleanup_close_ int lock = agsx_lock_at(rootfd, ".index.lock", true, err);
  if (lock < 0)
    return -1;
  if (faccessat(rootfd, "index.json", F_OK, AT_SYMLINK_NOFOLLOW) < 0 &&
      agsx_write_file_atomic(rootfd, "index.json", EMPTY_INDEX, strlen(EMPTY_INDEX), 0644, err) < 0)
    return -1;
  return 0;
}

int agsx_store_open(const char *path, bool create, struct agsx_store **ret, agsx_error_t *err) {
  _cleanup_store_ struct agsx_store *s = xzalloc(sizeof(*s));
  s->rootfd = s->blobsfd = s->layersfd = s->tmpfd = s->gc_lock = -1;
  s->path = xstrdup(path);
  s->budget_max = AGSX_DEFAULT_MAX_IMAGE_SIZE;
  s->reserve = AGSX_DEFAULT_STORE_RESERVE;
  /* The store holds image files with their in-image owners and setuid bits:
   * only root may enter it. */
  if (create && agsx_mkdir_p(path, 0700, err) < 0)
    return agsx_error_wrap(err, "image store");
  s->rootfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (s->rootfd < 0)
    return agsx_error_set(err, errno, "image store `%s`", path);
  if (create && init_layout(s->rootfd, err) < 0)
    return agsx_error_wrap(err, "image store `%s`", path);
  _cleanup_close_ int blobs = open_subdir(s->rootfd, "blobs", create, 0755, err);
  if (blobs < 0)
    return agsx_error_wrap(err, "image store `%s`", path);
  s->blobsfd = open_subdir(blobs, "sha256", create, 0755, err);
  if (s->blobsfd < 0)
    return agsx_error_wrap(err, "image store `%s`: blobs", path);
  s->layersfd = open_subdir(s->rootfd, "layers", create, 0700, err);
  if (s->layersfd < 0)
    return agsx_error_wrap(err, "image store `%s`", path);
  s->tmpfd = open_subdir(s->rootfd, "tmp", create, 0700, err);
  if (s->tmpfd < 0)
    return agsx_error_wrap(err, "image store `%s`", path);
  if (create) {
    s->gc_lock = agsx_lock_at(s->rootfd, ".gc.lock", false, err);
    if (s->gc_lock < 0)
      return agsx_error_wrap(err, "image store `%s`", path);
  }
  *ret = steal_ptr(&s);
  return 0;
}

int agsx_store_hold(struct agsx_store *s, agsx_error_t *err) {
  if (s->gc_lock >= 0)
    return 0;
  s->gc_lock = agsx_lock_at(s->rootfd, ".gc.lock", false, err);
  return s->gc_lock < 0 ? agsx_error_wrap(err, "image store `%s`", s->path) : 0;
}

/* ---- blobs -------------------------------------------------------------------- */

bool agsx_store_has_blob(struct agsx_store *s, const char *digest) {
  struct stat st;
  return agsx_digest_validate(digest, NULL) == 0 &&
         fstatat(s->blobsfd, agsx_digest_hex(digest), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
         S_ISREG(st.st_mode);
}

int agsx_store_open_blob(struct agsx_store *s, const char *digest, agsx_error_t *err) {
  if (agsx_digest_validate(digest, err) < 0)
    return -1;
  int fd = openat(s->blobsfd, agsx_digest_hex(digest), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "blob `%s`", digest);
  return fd;
}

int agsx_store_read_blob(struct agsx_store *s, const char *digest, size_t max, char **ret_buf,
                         size_t *ret_len, agsx_error_t *err) {
  return agsx_store_read_staged_blob(s, -1, digest, max, ret_buf, ret_len, err);
}

static int open_stage_dir(int workfd, const char *name, agsx_error_t *err) {
  if (mkdirat(workfd, name, 0700) < 0 && errno != EEXIST)
    return agsx_error_set(err, errno, "mkdir work `%s`", name);
  int fd = openat(workfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "open work `%s`", name);
  return fd;
}

static bool staged(int workfd, const char *sub, const char *digest) {
  _cleanup_free_ char *p = xasprintf("%s/%s", sub, agsx_digest_hex(digest));
  return faccessat(workfd, p, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

/* Copies IN to OUT, hashing; checks SIZE (< 0: unknown) and DIGEST. With
 * OUT < 0 only verifies. */
static int copy_verify(int in, int out, const char *digest, int64_t size, agsx_error_t *err) {
  _cleanup_free_ char *buf = xmalloc(COPY_BUF);
  _cleanup_sha256_ agsx_sha256 *h = agsx_sha256_new();
  uint64_t total = 0;
  for (;;) {
    ssize_t n = agsx_read_all(in, buf, COPY_BUF);
    if (n < 0)
      return agsx_error_set(err, errno, "read blob `%s`", digest);
    if (n == 0)
      break;
    total += (uint64_t)n;
    if (size >= 0 && total > (uint64_t)size)
      return agsx_error_set(
          err, 0, "blob `%s` is larger than its descriptor says (%" PRId64 " bytes)", digest, size);
    agsx_sha256_update(h, buf, (size_t)n);
    if (out >= 0 && agsx_write_all(out, buf, (size_t)n) < 0)
      return agsx_error_set(err, errno, "write blob `%s`", digest);
  }
  if (size >= 0 && total != (uint64_t)size)
    return agsx_error_set(err, 0, "blob `%s` is truncated: %" PRIu64 " of %" PRId64 " bytes",
                          digest, total, size);
  char got[AGSX_DIGEST_LEN];
  agsx_sha256_final(h, got);
  if (strcmp(got, digest) != 0)
    return agsx_error_set(err, 0, "blob `%s` does not match its digest (content is `%s`)", digest,
                          got);
  return 0;
}

int agsx_store_stage_blob_fd(struct agsx_store *s, int workfd, int fd, const char *digest,
                             int64_t size, agsx_error_t *err) {
  if (agsx_digest_validate(digest, err) < 0)
    return -1;
  if (agsx_store_has_blob(s, digest) || staged(workfd, "blobs", digest))
    return 0;
  if (size < 0) {
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
      return agsx_error_set(err, 0, "blob `%s` of unknown size", digest);
    size = st.st_size;
  }
  if (agsx_store_charge(s, (uint64_t)size, digest, err) < 0 ||
      agsx_store_check_space(s, (uint64_t)size, err) < 0)
    return -1;
  _cleanup_close_ int dir = open_stage_dir(workfd, "blobs", err);
  if (dir < 0)
    return -1;
  /* Anonymous until verified: a bad blob never gets a name. */
  _cleanup_close_ int out = openat(dir, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0644);
  if (out < 0)
    return agsx_error_set(err, errno, "create a temporary file in the store");
  if (copy_verify(fd, out, digest, size, err) < 0)
    return -1;
  if (agsx_link_fd(out, dir, agsx_digest_hex(digest)) < 0 && errno != EEXIST)
    return agsx_error_set(err, errno, "stage blob `%s`", digest);
  return 0;
}

int agsx_store_stage_blob_move(struct agsx_store *s, int workfd, int dirfd, const char *name,
                               const char *digest, int64_t size, agsx_error_t *err) {
  if (agsx_digest_validate(digest, err) < 0)
    return -1;
  if (agsx_store_has_blob(s, digest) || staged(workfd, "blobs", digest))
    return 0;
  _cleanup_close_ int in = agsx_open_beneath_nofollow(dirfd, name, O_RDONLY | AGSX_O_UNTRUSTED, 0);
  if (in < 0)
    return agsx_error_set(err, errno, "open `%s`", name);
  struct stat st;
  if (fstat(in, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1)
    return agsx_error_set(err, 0, "`%s` is not a plain file", name);
  if (agsx_store_charge(s, (uint64_t)(size >= 0 ? size : st.st_size), digest, err) < 0)
    return -1;
  if (copy_verify(in, -1, digest, size, err) < 0)
    return -1;
  _cleanup_close_ int dir = open_stage_dir(workfd, "blobs", err);
  if (dir < 0)
    return -1;
  if (renameat(dirfd, name, dir, agsx_digest_hex(digest)) < 0)
    return agsx_error_set(err, errno, "stage blob `%s`", digest);
  return 0;
}

int agsx_store_stage_blob_mem(struct agsx_store *s, int workfd, const void *buf, size_t len,
                              char ret_digest[AGSX_DIGEST_LEN], agsx_error_t *err) {
  agsx_sha256_buf(buf, len, ret_digest);
  if (agsx_store_has_blob(s, ret_digest) || staged(workfd, "blobs", ret_digest))
    return 0;
  if (agsx_store_charge(s, len, ret_digest, err) < 0 || agsx_store_check_space(s, len, err) < 0)
    return -1;
  _cleanup_close_ int dir = open_stage_dir(workfd, "blobs", err);
  if (dir < 0)
    return -1;
  _cleanup_close_ int out = openat(dir, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0644);
  if (out < 0)
    return agsx_error_set(err, errno, "create a temporary file in the store");
  if (agsx_write_all(out, buf, len) < 0)
    return agsx_error_set(err, errno, "write blob `%s`", ret_digest);
  if (agsx_link_fd(out, dir, agsx_digest_hex(ret_digest)) < 0 && errno != EEXIST)
    return agsx_error_set(err, errno, "stage blob `%s`", ret_digest);
  return 0;
}

static int open_staged_blob(struct agsx_store *s, int workfd, const char *digest,
                            agsx_error_t *err) {
  if (agsx_digest_validate(digest, err) < 0)
    return -1;
  if (workfd < 0)
    return agsx_store_open_blob(s, digest, err);
  _cleanup_free_ char *p = xasprintf("blobs/%s", agsx_digest_hex(digest));
  int fd = openat(workfd, p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0 || errno != ENOENT)
    return fd >= 0 ? fd : agsx_error_set(err, errno, "blob `%s`", digest);
  return agsx_store_open_blob(s, digest, err);
}

int agsx_store_read_staged_blob(struct agsx_store *s, int workfd, const char *digest, size_t max,
                                char **ret_buf, size_t *ret_len, agsx_error_t *err) {
  _cleanup_close_ int fd = open_staged_blob(s, workfd, digest, err);
  if (fd < 0)
    return -1;
  _cleanup_free_ char *buf = NULL;
  size_t len;
  if (agsx_read_fd(fd, max, &buf, &len, err) < 0)
    return agsx_error_wrap(err, "blob `%s`", digest);
  char got[AGSX_DIGEST_LEN];
  agsx_sha256_buf(buf, len, got);
  if (strcmp(got, digest) != 0)
    return agsx_error_set(err, 0, "blob `%s` is corrupt (content has digest `%s`)", digest, got);
  *ret_buf = steal_ptr(&buf);
  if (ret_len)
    *ret_len = len;
  return 0;
}

static int commit_dir(int workfd, const char *sub, int destfd, agsx_error_t *err) {
  _cleanup_close_ int dfd = openat(workfd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0)
    return errno == ENOENT ? 0 : agsx_error_set(err, errno, "open work `%s`", sub);
  _cleanup_dir_ DIR *d = agsx_dir_stream(dfd);
  if (d == NULL)
    return agsx_error_set(err, errno, "read work `%s`", sub);
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.')
      continue;
    /* Existing content is identical (content-addressed): keep it. */
    if (renameat2(dfd, de->d_name, destfd, de->d_name, RENAME_NOREPLACE) < 0 && errno != EEXIST)
      return agsx_error_set(err, errno, "commit `%s/%s`", sub, de->d_name);
  }
  if (fsync(destfd) < 0)
    return agsx_error_set(err, errno, "fsync `%s`", sub);
  return 0;
}

int agsx_store_commit(struct agsx_store *s, int workfd, agsx_error_t *err) {
  /* One syncfs for everything staged instead of an fsync per file: content
   * must be on disk before a rename makes it visible. */
  if (syncfs(workfd) < 0)
    return agsx_error_set(err, errno, "syncfs");
  if (commit_dir(workfd, "blobs", s->blobsfd, err) < 0 ||
      commit_dir(workfd, "layers", s->layersfd, err) < 0)
    return agsx_error_wrap(err, "image store");
  return 0;
}

/* ---- space ------------------------------------------------------------------------ */

int agsx_store_charge(struct agsx_store *s, uint64_t n, const char *what, agsx_error_t *err) {
  if (n > s->budget_max - s->budget_used) {
    _cleanup_free_ char *max = agsx_format_size(s->budget_max);
    return agsx_error_set(err, 0,
                          "`%s`: the image is larger than its budget of %s (max-image-size in "
                          "agsx.conf, AGSX_MAX_IMAGE_SIZE)",
                          what, max);
  }
  s->budget_used += n;
  return 0;
}

int agsx_store_check_space_fd(int fd, uint64_t n, uint64_t reserve, agsx_error_t *err) {
  struct statvfs sv;
  if (fstatvfs(fd, &sv) < 0)
    return agsx_error_set(err, errno, "statvfs of the image store");
  uint64_t avail = (uint64_t)sv.f_bavail * sv.f_frsize;
  if (avail < reserve || avail - reserve < n) {
    _cleanup_free_ char *a = agsx_format_size(avail);
    _cleanup_free_ char *need = agsx_format_size(n);
    _cleanup_free_ char *r = agsx_format_size(reserve);
    return agsx_error_set(err, 0,
                          "not enough space in the image store: %s free, %s needed and %s kept "
                          "in reserve (store-reserve in agsx.conf, AGSX_STORE_RESERVE)",
                          a, need, r);
  }
  return 0;
}

int agsx_store_check_space(struct agsx_store *s, uint64_t n, agsx_error_t *err) {
  return agsx_store_check_space_fd(s->rootfd, n, s->reserve, err);
}

/* ---- work directories ------------------------------------------------------------ */

/* A work directory is created under a dot name, locked, then renamed to its
 * real name: the cleaner only ever sees locked work directories, or dot
 * names that a crash left between mkdir and rename (removed once old). */
static int size_setting(const char *key, const char *env, uint64_t *ret, agsx_error_t *err) {
  _cleanup_free_ char *v = NULL;
  if (agsx_conf_get(key, env, &v, err) < 0)
    return -1;
  if (v && agsx_parse_size(v, ret, err) < 0)
    return agsx_error_wrap(err, "%s (%s)", key, env);
  return 0;
}

int agsx_store_mkwork(struct agsx_store *s, const char *prefix, char **ret_name,
                      agsx_error_t *err) {
  s->budget_max = AGSX_DEFAULT_MAX_IMAGE_SIZE;
  s->reserve = AGSX_DEFAULT_STORE_RESERVE;
  s->budget_used = 0;
  if (size_setting("max-image-size", "AGSX_MAX_IMAGE_SIZE", &s->budget_max, err) < 0 ||
      size_setting("store-reserve", "AGSX_STORE_RESERVE", &s->reserve, err) < 0)
    return -1;
  _cleanup_free_ char *tmp = NULL;
  _cleanup_close_ int fd = agsx_mkdtemp_at(s->tmpfd, ".new", 0700, &tmp, err);
  if (fd < 0)
    return -1;
  if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
    agsx_error_set(err, errno, "lock work directory");
    unlinkat(s->tmpfd, tmp, AT_REMOVEDIR);
    return -1;
  }
  _cleanup_free_ char *name = xasprintf("%s-%s", prefix, tmp + strlen(".new-"));
  if (renameat2(s->tmpfd, tmp, s->tmpfd, name, RENAME_NOREPLACE) < 0) {
    agsx_error_set(err, errno, "name work directory");
    unlinkat(s->tmpfd, tmp, AT_REMOVEDIR);
    return -1;
  }
  if (ret_name)
    *ret_name = steal_ptr(&name);
  return steal_fd(&fd);
}

static bool stale_new(int dirfd, const char *name) {
  struct stat st;
  return fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
         st.st_mtime + 60 < agsx_now_ns() / 1000000000LL;
}

int agsx_store_clean_tmp(struct agsx_store *s, agsx_error_t *err) {
  _cleanup_dir_ DIR *d = agsx_dir_stream(s->tmpfd);
  if (d == NULL)
    return agsx_error_set(err, errno, "open store tmp");
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    if (de->d_name[0] == '.' && !stale_new(s->tmpfd, de->d_name))
      continue; /* being created right now */
    _cleanup_close_ int fd =
        openat(s->tmpfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) < 0)
      continue; /* still owned by a running agsx */
    agsx_debug("removing stale work directory `%s`", de->d_name);
    if (agsx_rm_rf_at(s->tmpfd, de->d_name, err) < 0)
      return agsx_error_wrap(err, "clean store tmp");
  }
  return 0;
}

/* ---- layers ----------------------------------------------------------------------- */

bool agsx_store_has_layer(struct agsx_store *s, const char *diff_id) {
  struct stat st;
  return agsx_digest_validate(diff_id, NULL) == 0 &&
         fstatat(s->layersfd, agsx_digest_hex(diff_id), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
         S_ISDIR(st.st_mode);
}

/* ROOT/verified/<blob hex> holds "DIFF_ID COMPRESSION\n" once the blob was
 * seen to decompress to DIFF_ID. Best effort: a marker that cannot be
 * written only costs another check next time. */
static int open_verified(struct agsx_store *s, agsx_error_t *err) {
  return open_subdir(s->rootfd, "verified", true, 0700, err);
}

static char *verified_record(const char *diff_id, enum agsx_compression comp) {
  return xasprintf("%s %d\n", diff_id, (int)comp);
}

static bool blob_verified(struct agsx_store *s, const char *blob, enum agsx_compression comp,
                          const char *diff_id) {
  _cleanup_close_ int dir =
      openat(s->rootfd, "verified", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  _cleanup_free_ char *buf = NULL, *want = verified_record(diff_id, comp);
  size_t len;
  return dir >= 0 && agsx_read_file_at(dir, agsx_digest_hex(blob), 256, &buf, &len, NULL) == 0 &&
         len == strlen(want) && memcmp(buf, want, len) == 0;
}

static void record_verified(struct agsx_store *s, const char *blob, enum agsx_compression comp,
                            const char *diff_id) {
  agsx_error_t e = NULL;
  _cleanup_close_ int dir = open_verified(s, &e);
  _cleanup_free_ char *rec = verified_record(diff_id, comp);
  if (dir < 0 ||
      agsx_write_file_atomic(dir, agsx_digest_hex(blob), rec, strlen(rec), 0600, &e) < 0) {
    agsx_debug("record verified blob `%s`: %s", blob, e->msg);
    agsx_error_free(&e);
  }
}

static int diff_id_mismatch(const char *blob, const char *got, const char *diff_id,
                            agsx_error_t *err) {
  return agsx_error_set(err, 0,
                        "layer `%s`: uncompressed content has digest `%s`, the image config "
                        "says `%s`",
                        blob, got, diff_id);
}

static void layer_limits(struct agsx_store *s, struct agsx_layer_limits *lim) {
  agsx_layer_limits_default(lim);
  uint64_t left = s->budget_max - s->budget_used;
  if (lim->max_bytes > left)
    lim->max_bytes = left;
  lim->space_reserve = s->reserve;
}

/* DIFF_ID is unpacked already: BLOB must decompress to it too. */
static int check_layer_blob(struct agsx_store *s, int blob, const struct agsx_descriptor *layer,
                            enum agsx_compression comp, const char *diff_id, agsx_error_t *err) {
  if (blob_verified(s, layer->digest, comp, diff_id))
    return 0;
  struct agsx_layer_limits lim;
  agsx_layer_limits_default(&lim);
  char got[AGSX_DIGEST_LEN];
  if (agsx_layer_diff_id_fd(blob, comp, &lim, got, err) < 0)
    return agsx_error_wrap(err, "layer `%s`", layer->digest);
  if (strcmp(got, diff_id) != 0)
    return diff_id_mismatch(layer->digest, got, diff_id, err);
  record_verified(s, layer->digest, comp, diff_id);
  return 0;
}

int agsx_store_stage_layer(struct agsx_store *s, int workfd, const struct agsx_descriptor *layer,
                           const char *diff_id, agsx_error_t *err) {
  if (agsx_digest_validate(diff_id, err) < 0)
    return -1;
  enum agsx_compression comp;
  if (agsx_layer_media_type_compression(layer->media_type, &comp, err) < 0)
    return -1;
  _cleanup_close_ int blob = open_staged_blob(s, workfd, layer->digest, err);
  if (blob < 0)
    return -1;
  if (agsx_store_has_layer(s, diff_id) || staged(workfd, "layers", diff_id))
    return check_layer_blob(s, blob, layer, comp, diff_id, err);
  _cleanup_close_ int dir = open_stage_dir(workfd, "layers", err);
  if (dir < 0)
    return -1;
  _cleanup_free_ char *tmp = xasprintf(".%s", agsx_digest_hex(diff_id));
  if (mkdirat(dir, tmp, 0755) < 0)
    return agsx_error_set(err, errno, "mkdir work layer");
  _cleanup_close_ int dest = openat(dir, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dest < 0)
    return agsx_error_set(err, errno, "open work layer");
  struct agsx_layer_limits lim;
  layer_limits(s, &lim);
  char got[AGSX_DIGEST_LEN];
  uint64_t size = 0;
  if (agsx_layer_unpack_fd_sized(blob, comp, dest, &lim, got, &size, err) < 0)
    return agsx_error_wrap(err, "layer `%s`", layer->digest);
  if (strcmp(got, diff_id) != 0)
    return diff_id_mismatch(layer->digest, got, diff_id, err);
  if (agsx_store_charge(s, size, layer->digest, err) < 0)
    return -1;
  record_verified(s, layer->digest, comp, diff_id);
  if (renameat(dir, tmp, dir, agsx_digest_hex(diff_id)) < 0)
    return agsx_error_set(err, errno, "stage layer `%s`", diff_id);
  return 0;
}

/* ---- refs ------------------------------------------------------------------------- */

void agsx_store_images_free(struct agsx_store_image *v, size_t n) {
  for (size_t i = 0; v && i < n; i++) {
    free(v[i].ref);
    agsx_descriptor_clear(&v[i].manifest);
  }
  free(v);
}

static yajl_val read_index_tree(struct agsx_store *s, agsx_error_t *err) {
  _cleanup_free_ char *buf = NULL;
  size_t len;
  if (agsx_read_file_at(s->rootfd, "index.json", INDEX_MAX, &buf, &len, err) < 0)
    return NULL;
  yajl_val root = agsx_json_parse(buf, len, INDEX_MAX, err);
  if (root == NULL) {
    agsx_error_wrap(err, "store index.json");
    return NULL;
  }
  if (!YAJL_IS_OBJECT(root) || agsx_json_get_array(root, "manifests") == NULL) {
    yajl_tree_free(root);
    agsx_error_set(err, 0, "store index.json: no `manifests` array");
    return NULL;
  }
  return root;
}

int agsx_store_list(struct agsx_store *s, struct agsx_store_image **ret, size_t *ret_n,
                    agsx_error_t *err) {
  _cleanup_json_ yajl_val root = read_index_tree(s, err);
  if (root == NULL)
    return -1;
  yajl_val list = agsx_json_get_array(root, "manifests");
  struct agsx_store_image *v = xzalloc((list->u.array.len + 1) * sizeof(*v));
  size_t n = 0;
  for (size_t i = 0; i < list->u.array.len; i++) {
    agsx_error_t derr = NULL;
    if (agsx_descriptor_parse(list->u.array.values[i], &v[n].manifest, &derr) < 0) {
      agsx_warn("store index.json: entry %zu ignored: %s", i, derr->msg);
      agsx_error_free(&derr);
      agsx_descriptor_clear(&v[n].manifest);
      continue;
    }
    v[n].ref = v[n].manifest.ref_name ? xstrdup(v[n].manifest.ref_name) : NULL;
    n++;
  }
  *ret = v;
  *ret_n = n;
  return 0;
}

static bool is_hex_prefix(const char *s) {
  size_t n = strlen(s);
  if (n < 4 || n > 64)
    return false;
  return strspn(s, "0123456789abcdef") == n;
}

int agsx_store_resolve(struct agsx_store *s, const char *name, struct agsx_store_image *ret,
                       agsx_error_t *err) {
  struct agsx_store_image *v = NULL;
  size_t n = 0;
  if (agsx_store_list(s, &v, &n, err) < 0)
    return -1;
  _cleanup_free_ char *ref = agsx_image_ref_normalize(name, NULL);
  const char *prefix = agsx_str_has_prefix(name, "sha256:") ? name + 7 : name;
  ssize_t found = -1;
  bool ambiguous = false;
  for (size_t i = 0; i < n && ref; i++)
    if (v[i].ref && strcmp(v[i].ref, ref) == 0)
      found = (ssize_t)i;
  for (size_t i = 0; i < n && found < 0 && is_hex_prefix(prefix); i++) {
    if (!agsx_str_has_prefix(agsx_digest_hex(v[i].manifest.digest), prefix))
      continue;
    for (size_t j = 0; j < i && !ambiguous; j++)
      if (strcmp(v[j].manifest.digest, v[i].manifest.digest) != 0 &&
          agsx_str_has_prefix(agsx_digest_hex(v[j].manifest.digest), prefix))
        ambiguous = true;
    for (size_t j = i + 1; j < n && !ambiguous; j++)
      if (strcmp(v[j].manifest.digest, v[i].manifest.digest) != 0 &&
          agsx_str_has_prefix(agsx_digest_hex(v[j].manifest.digest), prefix))
        ambiguous = true;
    found = (ssize_t)i;
  }
  int r = 0;
  if (ambiguous)
    r = agsx_error_set(err, 0, "image `%s` is ambiguous: more than one image id starts with it",
                       name);
  else if (found < 0)
    r = agsx_error_set_quiet(err, ENOENT, "image `%s` not found", name);
  else {
    *ret = v[found];
    memset(&v[found], 0, sizeof(v[found]));
  }
  agsx_store_images_free(v, n);
  return r;
}

static void gen_descriptor(yajl_gen g, const char *ref, const struct agsx_descriptor *d) {
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "mediaType", d->media_type);
  agsx_json_kv_str(g, "digest", d->digest);
  agsx_json_kv_int(g, "size", d->size);
  if (ref) {
    agsx_json_key(g, "annotations");
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, AGSX_REF_ANNOTATION, ref);
    yajl_gen_map_close(g);
  }
  yajl_gen_map_close(g);
}

/* Rewrites index.json keeping every entry KEEP() accepts, then ADD. */
typedef bool (*keep_fn)(yajl_val entry, const void *data);

static int rewrite_index(struct agsx_store *s, keep_fn keep, const void *data, const char *add_ref,
                         const struct agsx_descriptor *add, size_t *ret_removed,
                         agsx_error_t *err) {
  _cleanup_close_ int lock = agsx_lock_at(s->rootfd, ".index.lock", true, err);
  if (lock < 0)
    return -1;
  _cleanup_json_ yajl_val root = read_index_tree(s, err);
  if (root == NULL)
    return -1;
  yajl_val list = agsx_json_get_array(root, "manifests");
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_int(g, "schemaVersion", 2);
  agsx_json_kv_str(g, "mediaType", AGSX_MT_OCI_INDEX);
  agsx_json_key(g, "manifests");
  yajl_gen_array_open(g);
  size_t removed = 0;
  for (size_t i = 0; i < list->u.array.len; i++) {
    if (keep(list->u.array.values[i], data))
      agsx_json_value(g, list->u.array.values[i]);
    else
      removed++;
  }
  if (add)
    gen_descriptor(g, add_ref, add);
  yajl_gen_array_close(g);
  yajl_gen_map_close(g);
  size_t len;
  _cleanup_free_ char *out = agsx_json_gen_steal(g, &len);
  if (agsx_write_file_atomic(s->rootfd, "index.json", out, len, 0644, err) < 0)
    return agsx_error_wrap(err, "update store index.json");
  if (ret_removed)
    *ret_removed = removed;
  return 0;
}

static const char *entry_ref(yajl_val entry) {
  return agsx_json_get_string(agsx_json_get_object(entry, "annotations"), AGSX_REF_ANNOTATION);
}

struct tag_match {
  const char *ref;
  const char *digest;
};

static bool keep_other_refs(yajl_val entry, const void *data) {
  const struct tag_match *m = data;
  const char *r = entry_ref(entry);
  if (m->ref)
    return r == NULL || strcmp(r, m->ref) != 0;
  /* Unnamed entry: drop an unnamed duplicate of the same manifest. */
  const char *d = agsx_json_get_string(entry, "digest");
  return r != NULL || d == NULL || strcmp(d, m->digest) != 0;
}

int agsx_store_tag(struct agsx_store *s, const char *ref, const struct agsx_descriptor *manifest,
                   agsx_error_t *err) {
  struct tag_match m = {ref, manifest->digest};
  return rewrite_index(s, keep_other_refs, &m, ref, manifest, NULL, err);
}

int agsx_store_tag_image(struct agsx_store *s, const char *source, const char *target,
                         char **ret_ref, agsx_error_t *err) {
  _cleanup_free_ char *ref = agsx_image_ref_normalize(target, err);
  if (ref == NULL)
    return -1;
  if (strchr(ref, '@'))
    return agsx_error_set(err, 0, "`%s`: a tag is NAME[:TAG], not a digest", target);
  struct agsx_store_image img = {0};
  if (agsx_store_resolve(s, source, &img, err) < 0)
    return -1;
  int r = agsx_store_tag(s, ref, &img.manifest, err);
  free(img.ref);
  agsx_descriptor_clear(&img.manifest);
  if (r == 0 && ret_ref)
    *ret_ref = steal_ptr(&ref);
  return r;
}

static bool keep_unmatched(yajl_val entry, const void *data) {
  const struct tag_match *m = data;
  const char *r = entry_ref(entry);
  const char *d = agsx_json_get_string(entry, "digest");
  if (m->ref)
    return r == NULL || strcmp(r, m->ref) != 0;
  return d == NULL || strcmp(d, m->digest) != 0;
}

int agsx_store_remove(struct agsx_store *s, const char *name, agsx_error_t *err) {
  struct agsx_store_image img = {0};
  if (agsx_store_resolve(s, name, &img, err) < 0)
    return -1;
  _cleanup_free_ char *ref = agsx_image_ref_normalize(name, NULL);
  /* By name: that name only. By id: every name of that manifest. */
  bool by_ref = ref && img.ref && strcmp(ref, img.ref) == 0;
  struct tag_match m = {by_ref ? img.ref : NULL, img.manifest.digest};
  int r = rewrite_index(s, keep_unmatched, &m, NULL, NULL, NULL, err);
  free(img.ref);
  agsx_descriptor_clear(&img.manifest);
  return r;
}

/* ---- garbage collection ---------------------------------------------------------------- */

/* Marks the blobs (by hex) and layers (by diff_id hex) a manifest needs. A
 * blob that cannot be read keeps what is known and is reported. */
static void mark_manifest(struct agsx_store *s, const char *digest, struct agsx_strset *blobs,
                          struct agsx_strset *layers, int depth) {
  if (depth > 4 || agsx_digest_validate(digest, NULL) < 0)
    return;
  agsx_strset_add(blobs, agsx_digest_hex(digest));
  _cleanup_free_ char *buf = NULL;
  size_t len;
  agsx_error_t err = NULL;
  if (agsx_store_read_blob(s, digest, AGSX_IMAGE_JSON_MAX, &buf, &len, &err) < 0) {
    agsx_warn("gc: %s", err->msg);
    agsx_error_free(&err);
    return;
  }
  struct agsx_manifest m;
  struct agsx_index ix;
  if (agsx_manifest_parse(buf, len, &m, NULL) == 0) {
    agsx_strset_add(blobs, agsx_digest_hex(m.config.digest));
    for (size_t i = 0; i < m.n_layers; i++)
      agsx_strset_add(blobs, agsx_digest_hex(m.layers[i].digest));
    _cleanup_free_ char *cbuf = NULL;
    struct agsx_image_config c;
    if (agsx_store_read_blob(s, m.config.digest, AGSX_IMAGE_JSON_MAX, &cbuf, &len, NULL) == 0 &&
        agsx_image_config_parse(cbuf, len, &c, NULL) == 0) {
      for (size_t i = 0; i < c.n_diff_ids; i++)
        agsx_strset_add(layers, agsx_digest_hex(c.diff_ids[i]));
      agsx_image_config_clear(&c);
    }
    agsx_manifest_clear(&m);
  } else if (agsx_index_parse(buf, len, &ix, NULL) == 0) {
    for (size_t i = 0; i < ix.n_manifests; i++)
      mark_manifest(s, ix.manifests[i].digest, blobs, layers, depth + 1);
    agsx_index_clear(&ix);
  }
}

static int sweep(int dirfd, const struct agsx_strset *keep, bool dry_run, const char *kind,
                 void (*report)(const char *, void *), void *data, agsx_error_t *err) {
  _cleanup_dir_ DIR *d = agsx_dir_stream(dirfd);
  if (d == NULL)
    return agsx_error_set(err, errno, "open %s directory", kind);
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.' || agsx_strset_has(keep, de->d_name))
      continue;
    _cleanup_free_ char *what = xasprintf("%s sha256:%s", kind, de->d_name);
    if (report)
      report(what, data);
    if (!dry_run && agsx_rm_rf_at(dirfd, de->d_name, err) < 0)
      return agsx_error_wrap(err, "gc");
  }
  return 0;
}

/* Build cache records (ROOT/cache/<key>: "diff_id\ndigest\nsize\n", see
 * build/cache.c) whose layer blob no image keeps go with the blob. */
static int sweep_cache(struct agsx_store *s, const struct agsx_strset *blobs, bool dry_run,
                       void (*report)(const char *, void *), void *data, agsx_error_t *err) {
  _cleanup_close_ int dfd =
      openat(s->rootfd, "cache", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0)
    return errno == ENOENT ? 0 : agsx_error_set(err, errno, "open the build cache");
  _cleanup_dir_ DIR *d = agsx_dir_stream(dfd);
  if (d == NULL)
    return agsx_error_set(err, errno, "read the build cache");
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.')
      continue;
    _cleanup_free_ char *buf = NULL;
    size_t len;
    char diff[AGSX_DIGEST_LEN], dig[AGSX_DIGEST_LEN];
    bool used = agsx_read_file_at(dfd, de->d_name, 512, &buf, &len, NULL) == 0 &&
                sscanf(buf, "%71s\n%71s", diff, dig) == 2 && agsx_digest_validate(dig, NULL) == 0 &&
                agsx_strset_has(blobs, agsx_digest_hex(dig));
    if (used)
      continue;
    _cleanup_free_ char *what = xasprintf("build cache %s", de->d_name);
    if (report)
      report(what, data);
    if (!dry_run && unlinkat(dfd, de->d_name, 0) < 0 && errno != ENOENT)
      return agsx_error_set(err, errno, "gc: remove `cache/%s`", de->d_name);
  }
  return 0;
}

/* Downloads an interrupted pull left in ROOT/partial/ for the next pull to
 * resume: gone with --images unless a pull holds them (flocked) now. */
static int sweep_partial(struct agsx_store *s, bool dry_run, void (*report)(const char *, void *),
                         void *data, agsx_error_t *err) {
  _cleanup_close_ int dfd =
      openat(s->rootfd, "partial", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0)
    return errno == ENOENT ? 0 : agsx_error_set(err, errno, "open partial downloads");
  _cleanup_dir_ DIR *d = agsx_dir_stream(dfd);
  if (d == NULL)
    return agsx_error_set(err, errno, "read partial downloads");
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.')
      continue;
    _cleanup_close_ int fd =
        openat(dfd, de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) < 0)
      continue; /* a pull is resuming it */
    _cleanup_free_ char *what = xasprintf("partial download %s", de->d_name);
    if (report)
      report(what, data);
    if (!dry_run && unlinkat(dfd, de->d_name, 0) < 0 && errno != ENOENT)
      return agsx_error_set(err, errno, "gc: remove `partial/%s`", de->d_name);
  }
  return 0;
}

/* Records of verified blobs go with their blob (not reported: bookkeeping). */
static int sweep_verified(struct agsx_store *s, const struct agsx_strset *blobs, bool dry_run,
                          agsx_error_t *err) {
  _cleanup_close_ int dfd =
      openat(s->rootfd, "verified", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0)
    return errno == ENOENT ? 0 : agsx_error_set(err, errno, "open verified blob records");
  return sweep(dfd, blobs, dry_run, "verified blob record", NULL, NULL, err);
}

/* The collection itself, under the exclusive gc lock. */
static int gc_locked(struct agsx_store *s, char *const *keep, bool dry_run,
                     void (*report)(const char *what, void *data), void *data, agsx_error_t *err) {
  if (!dry_run && agsx_store_clean_tmp(s, err) < 0)
    return -1;
  struct agsx_store_image *v = NULL;
  size_t n = 0;
  if (agsx_store_list(s, &v, &n, err) < 0)
    return -1;
  struct agsx_strset blobs = {0}, layers = {0};
  for (size_t i = 0; i < n; i++)
    mark_manifest(s, v[i].manifest.digest, &blobs, &layers, 0);
  for (size_t i = 0; keep && keep[i]; i++)
    mark_manifest(s, keep[i], &blobs, &layers, 0);
  agsx_store_images_free(v, n);
  int r = sweep(s->blobsfd, &blobs, dry_run, "blob", report, data, err);
  if (r == 0)
    r = sweep(s->layersfd, &layers, dry_run, "layer", report, data, err);
  if (r == 0)
    r = sweep_cache(s, &blobs, dry_run, report, data, err);
  if (r == 0)
    r = sweep_partial(s, dry_run, report, data, err);
  if (r == 0)
    r = sweep_verified(s, &blobs, dry_run, err);
  agsx_strset_clear(&blobs);
  agsx_strset_clear(&layers);
  return r;
}

int agsx_store_gc(struct agsx_store *s, char *const *keep, bool dry_run,
                  void (*report)(const char *what, void *data), void *data, agsx_error_t *err) {
  /* Our own shared lock would block the exclusive one: trade it. */
  agsx_closep(&s->gc_lock);
  _cleanup_close_ int lock = agsx_lock_at(s->rootfd, ".gc.lock", true, err);
  if (lock < 0)
    return -1;
  return gc_locked(s, keep, dry_run, report, data, err);
}

int agsx_store_gc_try(struct agsx_store *s, char *const *keep, agsx_error_t *err) {
  agsx_closep(&s->gc_lock);
  _cleanup_close_ int lock =
      openat(s->rootfd, ".gc.lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (lock < 0)
    return agsx_error_set(err, errno, "open lock `.gc.lock`");
  if (flock(lock, LOCK_EX | LOCK_NB) < 0)
    return errno == EWOULDBLOCK ? 1 : agsx_error_set(err, errno, "lock `.gc.lock`");
  return gc_locked(s, keep, false, NULL, NULL, err);
}

/* ---- running images ---------------------------------------------------------------------- */

void agsx_image_info_clear(struct agsx_image_info *info) {
  free(info->img.ref);
  agsx_descriptor_clear(&info->img.manifest);
  agsx_manifest_clear(&info->manifest);
  agsx_image_config_clear(&info->config);
  for (size_t i = 0; i < info->n_layers; i++)
    free(info->layer_paths[i]);
  free(info->layer_paths);
  memset(info, 0, sizeof(*info));
}

static int read_image(struct agsx_store *s, struct agsx_image_info *info, agsx_error_t *err) {
  _cleanup_free_ char *mbuf = NULL, *cbuf = NULL;
  size_t mlen, clen;
  if (agsx_store_read_blob(s, info->img.manifest.digest, AGSX_IMAGE_JSON_MAX, &mbuf, &mlen, err) <
          0 ||
      agsx_manifest_parse(mbuf, mlen, &info->manifest, err) < 0)
    return -1;
  if (agsx_store_read_blob(s, info->manifest.config.digest, AGSX_IMAGE_JSON_MAX, &cbuf, &clen,
                           err) < 0 ||
      agsx_image_config_parse(cbuf, clen, &info->config, err) < 0)
    return -1;
  if (info->config.n_diff_ids != info->manifest.n_layers)
    return agsx_error_set(err, 0, "manifest and config disagree on the number of layers");
  return 0;
}

static int unpack_missing(struct agsx_store *s, struct agsx_image_info *info, agsx_error_t *err) {
  bool missing = false;
  for (size_t i = 0; i < info->manifest.n_layers && !missing; i++)
    missing = !agsx_store_has_layer(s, info->config.diff_ids[i]);
  if (!missing)
    return 0;
  _cleanup_free_ char *work = NULL;
  _cleanup_close_ int workfd = agsx_store_mkwork(s, "unpack", &work, err);
  if (workfd < 0)
    return -1;
  int r = 0;
  for (size_t i = 0; r == 0 && i < info->manifest.n_layers; i++)
    r = agsx_store_stage_layer(s, workfd, &info->manifest.layers[i], info->config.diff_ids[i], err);
  if (r == 0)
    r = agsx_store_commit(s, workfd, err);
  agsx_error_t cerr = NULL;
  agsx_rm_rf_at(s->tmpfd, work, &cerr);
  agsx_error_free(&cerr);
  return r;
}

int agsx_store_prepare_image(struct agsx_store *s, const char *name, struct agsx_image_info *ret,
                             agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  if (agsx_store_resolve(s, name, &ret->img, err) < 0)
    return -1;
  if (read_image(s, ret, err) < 0 || unpack_missing(s, ret, err) < 0) {
    agsx_error_wrap(err, "image `%s`", name);
    agsx_image_info_clear(ret);
    return -1;
  }
  ret->n_layers = ret->manifest.n_layers;
  ret->layer_paths = xzalloc((ret->n_layers + 1) * sizeof(char *));
  for (size_t i = 0; i < ret->n_layers; i++)
    ret->layer_paths[i] =
        xasprintf("%s/layers/%s", s->path, agsx_digest_hex(ret->config.diff_ids[i]));
  return 0;
}
