/* agsx — fsops: uploads (streamed into an unnamed file, renamed into place
 * on commit), whole POST /files bodies (multipart or raw, optionally
 * gzip-encoded), downloads and the signed-URL check (see fsops.h). */
#include "config.h"

#include "api/fsops-internal.h"
#include "api/multipart.h"
#include "util/digest.h"

#include <inttypes.h>
#include <limits.h>
#include <linux/openat2.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <zlib.h>

#define MAX_HOPS 40 /* symlinks followed at an upload's destination */

struct agsx_fs_upload {
  struct agsx_fs_ctx *c;
  char *abs;     /* where the file goes (its symlinks followed) */
  char *base;    /* its name in PFD */
  int pfd;       /* its directory, O_PATH */
  int fd;        /* the data, written so far */
  char *tmpname; /* a named temp in PFD (no O_TMPFILE there), or NULL */
  mode_t mode;
  bool committed;
};

void agsx_fs_upload_free(struct agsx_fs_upload *u) {
  if (u == NULL)
    return;
  if (u->fd >= 0)
    close(u->fd);
  if (u->tmpname && !u->committed)
    unlinkat(u->pfd, u->tmpname, 0);
  if (u->pfd >= 0)
    close(u->pfd);
  free(u->tmpname);
  free(u->abs);
  free(u->base);
  agsx_fs_close(u->c);
  free(u);
}

static void upload_freep(struct agsx_fs_upload **u) {
  agsx_fs_upload_free(*u);
  *u = NULL;
}

#define UPLOAD_PREFIX ".agsx-upload-"

/* UPLOAD_PREFIX and 16 hex digits. */
static char *upload_temp_name(void) {
  static const char hex[] = "0123456789abcdef";
  static uint64_t seq;
  uint64_t r = ((uint64_t)agsx_mono_ns() ^ ((uint64_t)getpid() << 40)) + ++seq;
  r *= 6364136223846793005ULL;
  char s[17];
  for (int i = 0; i < 16; i++)
    s[i] = hex[(r >> (4 * i)) & 15];
  s[16] = '\0';
  return xasprintf("%s%s", UPLOAD_PREFIX, s);
}

bool fs_is_upload_temp(const char *name) {
  size_t n = strlen(UPLOAD_PREFIX);
  if (strncmp(name, UPLOAD_PREFIX, n) != 0 || strlen(name + n) != 16)
    return false;
  return strspn(name + n, "0123456789abcdef") == 16;
}

/* Finds where ABS's data goes: its directory (created as the user) and the
 * name there, a symlink at the end followed inside the root as open(2)
 * would. The caller has entered the user's ids. */
static int upload_target(struct agsx_fs_upload *u, agsx_error_t *err) {
  _cleanup_free_ char *cur = xstrdup(u->abs);
  for (int hops = 0;; hops++) {
    _cleanup_free_ char *parent = NULL, *base = NULL;
    if (fs_split(cur, &parent, &base, err) < 0)
      return -1;
    _cleanup_close_ int pfd = fs_ensure_dirs(u->c, parent, err);
    if (pfd < 0)
      return agsx_fs_code(err) == AGSX_FS_INVALID_ARGUMENT
                 ? -1
                 : agsx_error_wrap(err, "error ensuring directories");
    struct stat st;
    if (fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno != ENOENT)
        return agsx_error_set(err, errno, "error getting file info %s", cur);
      u->mode = 0644;
    } else if (S_ISLNK(st.st_mode)) {
      char target[PATH_MAX];
      ssize_t n = readlinkat(pfd, base, target, sizeof(target) - 1);
      if (n <= 0 || hops >= MAX_HOPS)
        return agsx_error_set_quiet(err, ELOOP, "%s: too many levels of symbolic links", u->abs);
      target[n] = '\0';
      _cleanup_free_ char *next =
          target[0] == '/' ? xstrdup(target) : xasprintf("%s/%s", parent, target);
      free(cur);
      cur = fs_clean(next, err);
      if (cur == NULL)
        return -1;
      continue;
    } else if (S_ISDIR(st.st_mode)) {
      return agsx_error_set_quiet(err, EISDIR, "path is a directory: %s", cur);
    } else if (!S_ISREG(st.st_mode)) {
      return agsx_error_set_quiet(err, EINVAL, "path is not a regular file: %s", cur);
    } else {
      u->mode = st.st_mode & 0777; /* never a set-id bit from an upload */
    }
    if (agsx_copy_on_kernel_fs_fd(pfd))
      return agsx_error_set_quiet(err, EACCES, "cannot write %s: on a kernel filesystem", cur);
    if (fs_check_unlink(u->c, pfd, base, cur, err) < 0)
      return -1;
    free(u->abs);
    u->abs = steal_ptr(&cur);
    u->base = steal_ptr(&base);
    u->pfd = steal_fd(&pfd);
    return 0;
  }
}

/* The unnamed file (O_TMPFILE) in the target's directory, or a hidden
 * named one where the filesystem has no O_TMPFILE. */
static int upload_create(struct agsx_fs_upload *u, agsx_error_t *err) {
  u->fd = agsx_openat2(u->pfd, ".", O_TMPFILE | O_WRONLY, 0600, RESOLVE_CHILD);
  for (int i = 0; u->fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL) && i < 8;
       i++) {
    free(u->tmpname);
    u->tmpname = upload_temp_name();
    u->fd = agsx_copy_open_child(u->pfd, u->tmpname, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (u->fd < 0 && errno == EEXIST)
      errno = EINVAL; /* try another name */
  }
  if (u->fd < 0) {
    int e = errno;
    free(u->tmpname);
    u->tmpname = NULL;
    if (e == ENOSPC || e == EDQUOT)
      return agsx_error_set(err, e, "not enough inodes available for %s", u->abs);
    return agsx_error_set(err, e, "error opening file %s", u->abs);
  }
  /* the user's group even below a set-group-ID directory, as envd's chown */
  if (fchown(u->fd, u->c->uid_base + u->c->uid, u->c->uid_base + u->c->gid) < 0)
    return agsx_error_set(err, errno, "error changing file ownership of %s", u->abs);
  if (fchmod(u->fd, u->mode) < 0)
    return agsx_error_set(err, errno, "error setting the mode of %s", u->abs);
  return 0;
}

int agsx_fs_upload_open(struct agsx_fs_ctx *c, const char *path, struct agsx_fs_upload **ret,
                        agsx_error_t *err) {
  _cleanup_(upload_freep) struct agsx_fs_upload *u = xzalloc(sizeof(*u));
  u->pfd = u->fd = -1;
  u->c = fs_ctx_ref(c);
  u->abs = agsx_fs_path(c, path, err);
  if (u->abs == NULL)
    return -1;
  int secbits;
  if (fs_enter(c, &secbits, err) < 0)
    return -1;
  int r = upload_target(u, err);
  if (r == 0)
    r = upload_create(u, err);
  fs_leave(secbits);
  if (r < 0)
    return -1;
  *ret = steal_ptr(&u);
  return 0;
}

int agsx_fs_upload_write(struct agsx_fs_upload *u, const void *buf, size_t len, agsx_error_t *err) {
  if (u->fd < 0 || u->committed)
    return agsx_error_set_quiet(err, EINVAL, "upload of %s is closed", u->abs);
  if (agsx_write_all(u->fd, buf, len) == 0)
    return 0;
  if (errno == ENOSPC || errno == EDQUOT)
    return agsx_error_set_quiet(err, errno, "not enough disk space available for %s", u->abs);
  return agsx_error_set(err, errno, "error writing file %s", u->abs);
}

/* Gives the unnamed file a temporary name, to rename it over the target
 * (AT_EMPTY_PATH, which root's server may use, else our own
 * /proc/self/fd link: agsx_link_fd). */
static int link_tmpfile(struct agsx_fs_upload *u, agsx_error_t *err) {
  for (int i = 0; i < 8; i++) {
    _cleanup_free_ char *name = upload_temp_name();
    if (agsx_link_fd(u->fd, u->pfd, name) == 0) {
      u->tmpname = steal_ptr(&name);
      return 0;
    }
    if (errno != EEXIST)
      return agsx_error_set(err, errno, "error linking %s", u->abs);
  }
  return agsx_error_set(err, EEXIST, "error linking %s", u->abs);
}

int agsx_fs_upload_commit(struct agsx_fs_upload *u, struct agsx_fs_entry *ret, agsx_error_t *err) {
  if (u->fd < 0 || u->committed)
    return agsx_error_set_quiet(err, EINVAL, "upload of %s is closed", u->abs);
  int secbits;
  if (fs_enter(u->c, &secbits, err) < 0)
    return -1;
  int r = u->tmpname ? 0 : link_tmpfile(u, err);
  if (r == 0 && renameat(u->pfd, u->tmpname, u->pfd, u->base) < 0)
    r = agsx_error_set(err, errno, "error renaming the upload into %s", u->abs);
  fs_leave(secbits);
  if (r < 0) {
    if (u->tmpname)
      unlinkat(u->pfd, u->tmpname, 0);
    free(u->tmpname);
    u->tmpname = NULL;
    return -1;
  }
  u->committed = true;
  close(u->fd);
  u->fd = -1;
  if (ret)
    return fs_stat_abs(u->c, u->abs, ret, err);
  return 0;
}

/* ---- POST /files bodies ----------------------------------------------------------------- */

struct agsx_fs_receive {
  struct agsx_fs_ctx *c;
  char *query_path;
  struct agsx_multipart *mp; /* NULL: a raw body into RAW */
  struct agsx_fs_upload *cur;
  bool skip; /* the current part is no file */
  struct agsx_strset seen;
  struct agsx_fs_entry *v;
  size_t n, cap;
  bool gzip, z_ready, z_end;
  z_stream z;
  char *zbuf;
  struct agsx_fs_meta meta; /* written on each file */
};

void agsx_fs_receive_free(struct agsx_fs_receive *r) {
  if (r == NULL)
    return;
  agsx_fs_upload_free(r->cur);
  agsx_multipart_free(r->mp);
  agsx_strset_clear(&r->seen);
  agsx_fs_entries_free(r->v, r->n);
  if (r->z_ready)
    inflateEnd(&r->z);
  free(r->zbuf);
  agsx_fs_meta_clear(&r->meta);
  free(r->query_path);
  agsx_fs_close(r->c);
  free(r);
}

static void receive_freep(struct agsx_fs_receive **r) {
  agsx_fs_receive_free(*r);
  *r = NULL;
}

static int begin_file(struct agsx_fs_receive *r, const char *dest, agsx_error_t *err) {
  _cleanup_free_ char *abs = agsx_fs_path(r->c, dest, err);
  if (abs == NULL)
    return agsx_error_wrap(err, "error resolving path");
  if (agsx_strset_has(&r->seen, abs))
    return agsx_error_set_quiet(err, EINVAL,
                                "you cannot upload multiple files to the same path '%s' in one "
                                "upload request, only the first specified file was uploaded",
                                abs);
  agsx_strset_add(&r->seen, abs);
  return agsx_fs_upload_open(r->c, abs, &r->cur, err);
}

void agsx_fs_receive_set_meta(struct agsx_fs_receive *r, struct agsx_fs_meta *meta) {
  agsx_fs_meta_clear(&r->meta);
  r->meta = *meta;
  memset(meta, 0, sizeof(*meta));
}

static int end_file(struct agsx_fs_receive *r, agsx_error_t *err) {
  /* Before the file is in place: metadata that cannot be kept fails the
   * upload, and the old file stays. The answer's set is read back from
   * the file, as envd's. */
  struct agsx_fs_meta kept = {0};
  if (r->meta.n > 0) {
    if (fs_meta_write(r->cur->fd, &r->meta, r->cur->abs, err) < 0)
      return -1;
    fs_meta_read(r->cur->fd, &kept);
  }
  if (agsx_fs_upload_commit(r->cur, NULL, err) < 0) {
    agsx_fs_meta_clear(&kept);
    return -1;
  }
  if (r->n == r->cap) {
    r->cap = r->cap ? r->cap * 2 : 4;
    r->v = xrealloc(r->v, r->cap * sizeof(*r->v));
  }
  struct agsx_fs_entry *e = &r->v[r->n++];
  memset(e, 0, sizeof(*e));
  e->meta = kept;
  e->path = xstrdup(r->cur->abs);
  e->name = xstrdup(strrchr(r->cur->abs, '/') + 1);
  e->type = AGSX_FS_TYPE_FILE;
  agsx_fs_upload_free(r->cur);
  r->cur = NULL;
  return 0;
}

static int on_part_begin(void *data, const struct agsx_multipart_part *part, agsx_error_t *err) {
  struct agsx_fs_receive *r = data;
  r->skip = strcmp(part->name, "file") != 0;
  if (r->skip)
    return 0;
  const char *dest = r->query_path ? r->query_path : part->filename;
  if (dest == NULL || *dest == '\0')
    return agsx_error_set_quiet(err, EINVAL, "a file part without a filename (and no path)");
  return begin_file(r, dest, err);
}

static int on_part_data(void *data, const char *buf, size_t len, agsx_error_t *err) {
  struct agsx_fs_receive *r = data;
  return r->skip ? 0 : agsx_fs_upload_write(r->cur, buf, len, err);
}

static int on_part_end(void *data, agsx_error_t *err) {
  struct agsx_fs_receive *r = data;
  return r->skip ? 0 : end_file(r, err);
}

static const struct agsx_multipart_callbacks receive_cb = {on_part_begin, on_part_data,
                                                           on_part_end};

static bool is_octet_stream(const char *ct) {
  size_t n = strlen("application/octet-stream");
  while (*ct == ' ')
    ct++;
  return strncasecmp(ct, "application/octet-stream", n) == 0 &&
         (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ');
}

int agsx_fs_receive_open(struct agsx_fs_ctx *c, const char *content_type, const char *query_path,
                         bool gzip, struct agsx_fs_receive **ret, agsx_error_t *err) {
  _cleanup_(receive_freep) struct agsx_fs_receive *r = xzalloc(sizeof(*r));
  r->c = fs_ctx_ref(c);
  r->query_path = query_path ? xstrdup(query_path) : NULL;
  const char *ct = content_type ? content_type : "";
  if (strncasecmp(ct + strspn(ct, " "), "multipart/", 10) == 0) {
    _cleanup_free_ char *boundary = NULL;
    if (agsx_multipart_boundary(ct, &boundary, err) < 0)
      return -1;
    r->mp = agsx_multipart_new(boundary, &receive_cb, r);
  } else if (is_octet_stream(ct)) {
    if (query_path == NULL)
      return agsx_error_set_quiet(err, EINVAL,
                                  "path query parameter is required for raw body upload");
    if (begin_file(r, query_path, err) < 0)
      return -1;
  } else {
    return agsx_error_set_quiet(err, EINVAL,
                                "unsupported content type: %.100s, expected multipart/form-data "
                                "or application/octet-stream",
                                ct);
  }
  if (gzip) {
    if (inflateInit2(&r->z, 16 + MAX_WBITS) != Z_OK)
      return agsx_error_set(err, ENOMEM, "error decompressing request body: inflateInit");
    r->z_ready = r->gzip = true;
    r->zbuf = xmalloc(1u << 16);
  }
  *ret = steal_ptr(&r);
  return 0;
}

static int feed_plain(struct agsx_fs_receive *r, const char *buf, size_t len, agsx_error_t *err) {
  if (r->mp)
    return agsx_multipart_feed(r->mp, buf, len, err);
  return agsx_fs_upload_write(r->cur, buf, len, err);
}

/* Inflates BUF (gzip members one after another, as gzip(1) writes them). */
static int feed_gzip(struct agsx_fs_receive *r, const char *buf, size_t len, agsx_error_t *err) {
  r->z.next_in = (Bytef *)(uintptr_t)buf;
  r->z.avail_in = (uInt)len;
  while (r->z.avail_in > 0) {
    if (r->z_end) {
      if (inflateReset(&r->z) != Z_OK)
        return agsx_error_set_quiet(err, EINVAL, "error decompressing request body");
      r->z_end = false;
    }
    r->z.next_out = (Bytef *)r->zbuf;
    r->z.avail_out = 1u << 16;
    int z = inflate(&r->z, Z_NO_FLUSH);
    if (z != Z_OK && z != Z_STREAM_END && z != Z_BUF_ERROR)
      return agsx_error_set_quiet(err, EINVAL, "error decompressing request body: %s",
                                  r->z.msg ? r->z.msg : "invalid gzip data");
    size_t out = (1u << 16) - r->z.avail_out;
    if (out > 0 && feed_plain(r, r->zbuf, out, err) < 0)
      return -1;
    if (z == Z_STREAM_END)
      r->z_end = true;
    else if (z == Z_BUF_ERROR && out == 0)
      break;
  }
  return 0;
}

int agsx_fs_receive_feed(struct agsx_fs_receive *r, const void *buf, size_t len,
                         agsx_error_t *err) {
  if (len == 0)
    return 0;
  if (len > UINT32_MAX)
    return agsx_error_set_quiet(err, EINVAL, "chunk too large");
  return r->gzip ? feed_gzip(r, buf, len, err) : feed_plain(r, buf, len, err);
}

int agsx_fs_receive_finish(struct agsx_fs_receive *r, struct agsx_fs_entry **ret, size_t *ret_n,
                           agsx_error_t *err) {
  if (r->gzip && !r->z_end)
    return agsx_error_set_quiet(err, EINVAL,
                                "error decompressing request body: the gzip stream is truncated");
  if (r->mp && agsx_multipart_finish(r->mp, err) < 0)
    return -1;
  if (!r->mp &&
      (r->cur == NULL ? agsx_error_set_quiet(err, EINVAL, "upload failed") : end_file(r, err)) < 0)
    return -1;
  *ret = steal_ptr(&r->v);
  *ret_n = r->n;
  r->n = r->cap = 0;
  return 0;
}

/* ---- POST /files/compose --------------------------------------------------------------- */

struct agsx_fs_compose {
  struct agsx_fs_ctx *c;
  struct agsx_fs_upload *u; /* DEST */
  char **abs;               /* the sources' paths */
  size_t n, cur;
  int fd; /* source CUR, open while it is copied (never 10,000 fds at once) */
};

void agsx_fs_compose_free(struct agsx_fs_compose *k) {
  if (k == NULL)
    return;
  for (size_t i = 0; i < k->n; i++)
    free(k->abs[i]);
  if (k->fd >= 0)
    close(k->fd);
  free(k->abs);
  agsx_fs_upload_free(k->u);
  agsx_fs_close(k->c);
  free(k);
}

static void compose_freep(struct agsx_fs_compose **k) {
  agsx_fs_compose_free(*k);
  *k = NULL;
}

/* Opens source I of K (SRC as given, for messages): a regular file the
 * sandbox may read; *RET_ST its inode. */
static int compose_open_source(struct agsx_fs_compose *k, size_t i, const char *src,
                               struct stat *ret_st, agsx_error_t *err) {
  _cleanup_error_ agsx_error_t e = NULL;
  int fd = fs_open_regular(k->c, k->abs[i], ret_st, &e);
  if (fd >= 0)
    return fd;
  switch (agsx_fs_code(&e)) {
  case AGSX_FS_NOT_FOUND:
    return agsx_error_set_quiet(err, ENOENT, "source file not found: %s", src);
  case AGSX_FS_INVALID_ARGUMENT:
    return agsx_error_set_quiet(err, EINVAL, "source path is not a regular file: %s", src);
  default: return fs_pass_error(err, &e);
  }
}

static int same_as_dest(const char *src, agsx_error_t *err) {
  return agsx_error_set_quiet(err, EINVAL, "source path \"%s\" cannot be the same as destination",
                              src);
}

/* Source I of K: resolved, not DEST's path, a regular file the sandbox
 * may read, whose inode goes in *RET_ST. */
static int compose_source(struct agsx_fs_compose *k, size_t i, const char *src, const char *dest,
                          struct stat *ret_st, agsx_error_t *err) {
  k->abs[i] = agsx_fs_path(k->c, src, err);
  if (k->abs[i] == NULL)
    return agsx_error_wrap(err, "error resolving source path '%s'", src);
  if (strcmp(k->abs[i], dest) == 0)
    return same_as_dest(src, err);
  int fd = compose_open_source(k, i, src, ret_st, err);
  if (fd < 0)
    return -1;
  close(fd);
  return 0;
}

int agsx_fs_compose_open(struct agsx_fs_ctx *c, char *const *sources, size_t n, const char *dest,
                         struct agsx_fs_compose **ret, agsx_error_t *err) {
  if (n == 0)
    return agsx_error_set_quiet(err, EINVAL, "source_paths must not be empty");
  if (n > AGSX_FS_COMPOSE_MAX)
    return agsx_error_set_quiet(err, EINVAL, "more than %u source_paths", AGSX_FS_COMPOSE_MAX);
  if (dest == NULL || *dest == '\0')
    return agsx_error_set_quiet(err, EINVAL, "destination is required");
  _cleanup_(compose_freep) struct agsx_fs_compose *k = xzalloc(sizeof(*k));
  k->c = fs_ctx_ref(c);
  k->fd = -1;
  k->abs = xzalloc(n * sizeof(*k->abs));
  k->n = n;
  _cleanup_free_ char *dabs = agsx_fs_path(c, dest, err);
  if (dabs == NULL)
    return agsx_error_wrap(err, "error resolving destination path");
  _cleanup_free_ struct stat *st = xmalloc(n * sizeof(*st));
  for (size_t i = 0; i < n; i++)
    if (compose_source(k, i, sources[i], dabs, &st[i], err) < 0)
      return -1;
  if (agsx_fs_upload_open(c, dabs, &k->u, err) < 0)
    return -1;
  /* DEST through a symlink may be a source: renaming over it and then
   * unlinking the source would lose both */
  struct stat dst;
  if (fstatat(k->u->pfd, k->u->base, &dst, AT_SYMLINK_NOFOLLOW) == 0)
    for (size_t i = 0; i < n; i++)
      if (st[i].st_dev == dst.st_dev && st[i].st_ino == dst.st_ino)
        return same_as_dest(sources[i], err);
  *ret = steal_ptr(&k);
  return 0;
}

/* Up to MAX bytes from IN to OUT: in the kernel where it can, else read
 * and write. Returns what was copied, 0 at IN's end, -1 with errno. */
static ssize_t copy_some(int in, int out, size_t max) {
  ssize_t n = copy_file_range(in, NULL, out, NULL, max, 0);
  if (n >= 0 || (errno != EXDEV && errno != EINVAL && errno != EOPNOTSUPP && errno != ENOSYS))
    return n;
  char buf[1 << 16];
  n = read(in, buf, max < sizeof(buf) ? max : sizeof(buf));
  if (n > 0 && agsx_write_all(out, buf, (size_t)n) < 0)
    return -1;
  return n;
}

int agsx_fs_compose_step(struct agsx_fs_compose *k, uint64_t max, agsx_error_t *err) {
  uint64_t done = 0;
  while (k->cur < k->n && done < max) {
    struct stat st;
    if (k->fd < 0 && (k->fd = compose_open_source(k, k->cur, k->abs[k->cur], &st, err)) < 0)
      return -1;
    ssize_t n = copy_some(k->fd, k->u->fd, (size_t)(max - done));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == ENOSPC || errno == EDQUOT))
      return agsx_error_set_quiet(err, errno, "not enough disk space available");
    if (n < 0)
      return agsx_error_set(err, errno, "error composing source %s", k->abs[k->cur]);
    if (n == 0) {
      close(k->fd);
      k->fd = -1;
      k->cur++;
    }
    done += (uint64_t)n;
  }
  return k->cur == k->n;
}

int agsx_fs_compose_commit(struct agsx_fs_compose *k, struct agsx_fs_entry *ret,
                           agsx_error_t *err) {
  if (k->cur < k->n)
    return agsx_error_set_quiet(err, EINVAL, "compose of %s is not complete", k->u->abs);
  if (agsx_fs_upload_commit(k->u, NULL, err) < 0)
    return -1;
  /* Each source's own name goes, as the sandbox's root could remove it;
   * what cannot be is left, as envd ignores os.Remove's error. */
  for (size_t i = 0; i < k->n; i++) {
    _cleanup_free_ char *parent = NULL, *base = NULL;
    _cleanup_error_ agsx_error_t e = NULL;
    if (fs_split(k->abs[i], &parent, &base, &e) < 0)
      continue;
    _cleanup_close_ int pfd = fs_open(k->c, parent, O_PATH | O_DIRECTORY);
    if (pfd >= 0 && !agsx_copy_on_kernel_fs_fd(pfd) &&
        fs_check_unlink(k->c, pfd, base, k->abs[i], &e) == 0)
      unlinkat(pfd, base, 0); /* never a directory */
  }
  if (ret) {
    memset(ret, 0, sizeof(*ret));
    ret->path = xstrdup(k->u->abs);
    ret->name = xstrdup(strrchr(k->u->abs, '/') + 1);
    ret->type = AGSX_FS_TYPE_FILE;
  }
  return 0;
}

void agsx_fs_compose_req_clear(struct agsx_fs_compose_req *q) {
  agsx_strv_free(q->sources);
  free(q->dest);
  free(q->user);
  memset(q, 0, sizeof(*q));
}

int agsx_fs_compose_parse(const char *body, size_t len, struct agsx_fs_compose_req *ret,
                          agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  _cleanup_error_ agsx_error_t e = NULL;
  _cleanup_json_ yajl_val v = agsx_json_parse(body, len, len + 1, &e);
  if (v == NULL || !YAJL_IS_OBJECT(v))
    return agsx_error_set_quiet(err, EINVAL, "invalid request body: %s",
                                e ? e->msg : "not a JSON object");
  yajl_val src = agsx_json_get(v, "source_paths");
  yajl_val dest = agsx_json_get(v, "destination"), user = agsx_json_get(v, "username");
  if ((src && !YAJL_IS_ARRAY(src) && !YAJL_IS_NULL(src)) || (dest && !YAJL_IS_STRING(dest)) ||
      (user && !YAJL_IS_STRING(user) && !YAJL_IS_NULL(user)))
    return agsx_error_set_quiet(err, EINVAL, "invalid request body: a field of the wrong type");
  size_t n = src && YAJL_IS_ARRAY(src) ? src->u.array.len : 0;
  if (n == 0)
    return agsx_error_set_quiet(err, EINVAL, "source_paths must not be empty");
  if (n > AGSX_FS_COMPOSE_MAX)
    return agsx_error_set_quiet(err, EINVAL, "more than %u source_paths", AGSX_FS_COMPOSE_MAX);
  const char *d = dest ? YAJL_GET_STRING(dest) : NULL;
  if (d == NULL || *d == '\0')
    return agsx_error_set_quiet(err, EINVAL, "destination is required");
  _cleanup_strv_ char **sources = xzalloc((n + 1) * sizeof(*sources));
  for (size_t i = 0; i < n; i++) {
    yajl_val s = src->u.array.values[i];
    if (!YAJL_IS_STRING(s))
      return agsx_error_set_quiet(err, EINVAL, "invalid request body: source_paths holds a %s",
                                  "value that is not a string");
    sources[i] = xstrdup(YAJL_GET_STRING(s));
  }
  ret->sources = steal_ptr(&sources);
  ret->n = n;
  ret->dest = xstrdup(d);
  ret->user = user && YAJL_IS_STRING(user) ? xstrdup(YAJL_GET_STRING(user)) : NULL;
  return 0;
}

/* ---- GET /files ------------------------------------------------------------------------ */

int agsx_fs_download_open(struct agsx_fs_ctx *c, const char *path, int *ret_fd, uint64_t *ret_size,
                          char **ret_path, agsx_error_t *err) {
  _cleanup_free_ char *abs = agsx_fs_path(c, path, err);
  if (abs == NULL)
    return agsx_error_wrap(err, "error expanding and resolving path '%s'", path ? path : "");
  struct stat st;
  _cleanup_error_ agsx_error_t e = NULL;
  _cleanup_close_ int fd = fs_open_regular(c, abs, &st, &e);
  if (fd < 0 && agsx_fs_code(&e) == AGSX_FS_NOT_FOUND)
    return agsx_error_set_quiet(err, ENOENT, "path '%s' does not exist", abs);
  if (fd < 0 && agsx_error_errno(&e) == ELOOP)
    return agsx_error_set_quiet(err, ELOOP, "path '%s': too many levels of symbolic links", abs);
  if (fd < 0)
    return fs_pass_error(err, &e);
  *ret_fd = steal_fd(&fd);
  *ret_size = (uint64_t)st.st_size;
  if (ret_path)
    *ret_path = steal_ptr(&abs);
  return 0;
}

/* ---- signed URLs ------------------------------------------------------------------------ */

static int hexval(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

char *agsx_fs_signature(const char *path, const char *operation, const char *user,
                        const char *token, int64_t expiration) {
  _cleanup_free_ char *text =
      expiration
          ? xasprintf("%s:%s:%s:%s:%" PRId64, path, operation, user ? user : "", token, expiration)
          : xasprintf("%s:%s:%s:%s", path, operation, user ? user : "", token);
  char digest[AGSX_DIGEST_LEN];
  agsx_sha256_buf(text, strlen(text), digest);
  unsigned char raw[32];
  const char *hex = agsx_digest_hex(digest);
  for (int i = 0; i < 32; i++)
    raw[i] = (unsigned char)(hexval(hex[2 * i]) << 4 | hexval(hex[2 * i + 1]));
  static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  char out[3 + 44 + 1] = "v1_";
  size_t o = 3;
  for (int i = 0; i < 32; i += 3) {
    uint32_t v = (uint32_t)raw[i] << 16 | (i + 1 < 32 ? (uint32_t)raw[i + 1] << 8 : 0) |
                 (i + 2 < 32 ? raw[i + 2] : 0);
    int chars = i + 2 < 32 ? 4 : i + 1 < 32 ? 3 : 2;
    for (int k = 0; k < chars; k++)
      out[o++] = b64[(v >> (18 - 6 * k)) & 63];
  }
  out[o] = '\0';
  return xstrdup(out);
}

static bool same_time_constant(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  unsigned char d = la != lb;
  for (size_t i = 0; i < la; i++)
    d |= (unsigned char)(a[i] ^ b[i % (lb ? lb : 1)]);
  return d == 0;
}

int agsx_fs_signature_check(const char *path, const char *operation, const char *user,
                            const char *token, const char *signature, const char *expiration,
                            int64_t now, agsx_error_t *err) {
  if (signature == NULL)
    return agsx_error_set_quiet(err, EACCES, "missing signature query parameter");
  int64_t exp = 0;
  if (expiration) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(expiration, &end, 10);
    if (errno || end == expiration || *end || v <= 0)
      return agsx_error_set_quiet(err, EACCES, "invalid signature expiration");
    exp = v;
  }
  _cleanup_free_ char *want = agsx_fs_signature(path ? path : "", operation, user, token, exp);
  if (!same_time_constant(want, signature))
    return agsx_error_set_quiet(err, EACCES, "invalid signature");
  if (expiration && exp < now)
    return agsx_error_set_quiet(err, EACCES, "signature is already expired");
  return 0;
}
