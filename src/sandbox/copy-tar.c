/* agsx — copy: the tar streams of `agsx cp -`: writing what the copier
 * walks as a pax tar, and extracting a tar stream into the sandbox. */
#include "config.h"

#include "sandbox/copy-internal.h"

#include "image/tarentry.h"
#include "state/state.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <linux/securebits.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>

/* ---- the tar destination ------------------------------------------------------------- */

int agsx_copy_tar_fail(struct archive *a, const char *path, agsx_error_t *err) {
  int e = archive_errno(a);
  return agsx_error_set(err, 0, "`%s`: tar: %s%s%s", path, archive_error_string(a),
                        e > 0 ? ": " : "", e > 0 ? strerror(e) : "");
}

/* The data extents of the first SIZE bytes of IN, for a sparse tar entry.
 * A file with more extents than MAX_EXTENTS, or one whose only extent is
 * all of it, gets none: its entry is a plain one. */
struct extent {
  off_t off, len;
};

#define MAX_EXTENTS 65536

static int data_extents(int in, off_t size, struct extent **ret, size_t *ret_n, const char *path,
                        agsx_error_t *err) {
  _cleanup_free_ struct extent *v = NULL;
  size_t n = 0, cap = 0;
  *ret = NULL;
  *ret_n = 0;
  if (size == 0)
    return 0;
  off_t data, end;
  for (off_t off = 0; off < size; off = end) {
    int r = agsx_copy_next_extent(in, off, size, &data, &end, path, err);
    if (r < 0)
      return -1;
    if (r == 0)
      break;
    if (n == MAX_EXTENTS)
      return 0;
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      v = xrealloc(v, cap * sizeof(*v));
    }
    v[n++] = (struct extent){data, end - data};
  }
  if (n == 1 && v[0].off == 0 && v[0].len == size)
    return 0;
  if (n == 0) { /* all hole: one empty extent at the end, as GNU tar writes it */
    v = xmalloc(sizeof(*v));
    v[n++] = (struct extent){size, 0};
  }
  *ret = steal_ptr(&v);
  *ret_n = n;
  return 0;
}

/* Feeds LEN bytes of a hole to the writer, which skips them in a sparse
 * entry without reading them (the zero buffer is never touched). */
static int tar_hole(struct copier *c, off_t len, const char *path, agsx_error_t *err) {
  if (c->zeros == NULL)
    c->zeros = xzalloc(ZEROS_SIZE);
  for (; len > 0;) {
    size_t n = len < (off_t)ZEROS_SIZE ? (size_t)len : ZEROS_SIZE;
    if (archive_write_data(c->tar, c->zeros, n) < 0)
      return agsx_copy_tar_fail(c->tar, path, err);
    len -= (off_t)n;
  }
  return 0;
}

/* [OFF, OFF+LEN) of IN into the stream; what the file lost meanwhile is
 * written as zeros, so the entry keeps the size its header gave. */
static int tar_data(struct copier *c, int in, off_t off, off_t len, const char *path,
                    agsx_error_t *err) {
  while (len > 0) {
    size_t want = len < (off_t)BUF_SIZE ? (size_t)len : BUF_SIZE;
    ssize_t n = pread(in, c->buf, want, off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return agsx_error_set(err, errno, "`%s`: read", path);
    if (n == 0) {
      memset(c->buf, 0, want);
      n = (ssize_t)want;
    }
    if (archive_write_data(c->tar, c->buf, (size_t)n) < 0)
      return agsx_copy_tar_fail(c->tar, path, err);
    off += n;
    len -= n;
  }
  return 0;
}

/* A regular file's data: its first ST_SIZE bytes (its size when opened),
 * holes as a sparse entry (GNU.sparse 1.0 in pax headers, which GNU tar,
 * bsdtar and Go's archive/tar read). Only the data counts towards the
 * limit, and it is checked before the header: a stream cannot be taken
 * back. */
static int tar_file(struct copier *c, struct archive_entry *e, int in, const struct stat *st,
                    const char *path, agsx_error_t *err) {
  _cleanup_free_ struct extent *v = NULL;
  size_t n = 0;
  if (data_extents(in, st->st_size, &v, &n, path, err) < 0)
    return -1;
  uint64_t data = v ? 0 : (uint64_t)st->st_size;
  for (size_t i = 0; i < n; i++) {
    data += (uint64_t)v[i].len;
    archive_entry_sparse_add_entry(e, v[i].off, v[i].len);
  }
  if (agsx_copy_account_bytes(c, data, path, err) < 0)
    return -1;
  if (archive_write_header(c->tar, e) != ARCHIVE_OK)
    return agsx_copy_tar_fail(c->tar, path, err);
  if (v == NULL)
    return tar_data(c, in, 0, st->st_size, path, err);
  off_t pos = 0;
  for (size_t i = 0; i < n; i++) {
    if (tar_hole(c, v[i].off - pos, path, err) < 0 ||
        tar_data(c, in, v[i].off, v[i].len, path, err) < 0)
      return -1;
    pos = v[i].off + v[i].len;
  }
  return tar_hole(c, st->st_size - pos, path, err);
}

/* One tar entry; a regular file's data comes from IN. */
int agsx_copy_tar_entry(struct copier *c, const char *path, const struct stat *st, const char *link,
                        int in, agsx_error_t *err) {
  uid_t uid;
  gid_t gid;
  if (agsx_copy_dest_ids(c, st, path, &uid, &gid, err) < 0)
    return -1;
  _cleanup_(agsx_copy_entry_freep) struct archive_entry *e = archive_entry_new();
  archive_entry_copy_pathname(e, path);
  archive_entry_set_filetype(e, st->st_mode & S_IFMT);
  archive_entry_set_perm(e, agsx_copy_dest_mode(c, st));
  archive_entry_set_uid(e, uid);
  archive_entry_set_gid(e, gid);
  archive_entry_set_mtime(e, st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
  archive_entry_set_atime(e, st->st_atim.tv_sec, st->st_atim.tv_nsec);
  archive_entry_set_size(e, S_ISREG(st->st_mode) ? st->st_size : 0);
  if (link)
    archive_entry_copy_symlink(e, link);
  if (S_ISREG(st->st_mode)) {
    if (tar_file(c, e, in, st, path, err) < 0)
      return -1;
  } else if (archive_write_header(c->tar, e) != ARCHIVE_OK) {
    return agsx_copy_tar_fail(c->tar, path, err);
  }
  if (archive_write_finish_entry(c->tar) != ARCHIVE_OK)
    return agsx_copy_tar_fail(c->tar, path, err);
  return 0;
}

/* The static libarchive's pax writer calls this helper, defined in
 * archive_write_set_format.o, the by-code format table: linking that object
 * pulls in every writer (7zip, xar) and with them bzip2, libxml2, ICU and
 * nettle, megabytes agsx does not use. A weak copy here satisfies the call;
 * if anything links the table itself, its strong definition wins. Only
 * regular files, directories and symlinks reach the writer, which pax
 * supports, so it is never called in practice. */
void __archive_write_entry_filetype_unsupported(struct archive *a, struct archive_entry *entry,
                                                const char *format);
__attribute__((weak)) void __archive_write_entry_filetype_unsupported(struct archive *a,
                                                                      struct archive_entry *entry,
                                                                      const char *format) {
  archive_set_error(a, EINVAL, "%s: %s format cannot archive this (mode=0%o)",
                    archive_entry_pathname(entry), format, (unsigned)archive_entry_mode(entry));
}

/* ---- extracting a tar stream into the sandbox ------------------------------------------ */

struct dirmeta {
  char *path;
  struct stat st;
};

struct extract {
  struct copier *c;
  struct archive *a;
  struct agsx_tar_reader rd;
  int dirfd;       /* DST */
  char *cache_dir; /* the parent directory walked to last, and its fd */
  int cache_fd;
  struct agsx_strset files; /* the regular files extracted: the only hard link targets */
  struct dirmeta *dirs;     /* metadata set at the end, deepest first */
  size_t ndirs;
};

static void extract_clear(struct extract *x) {
  agsx_tar_reader_clear(&x->rd);
  free(x->cache_dir);
  if (x->cache_fd >= 0)
    close(x->cache_fd);
  agsx_strset_clear(&x->files);
  for (size_t i = 0; i < x->ndirs; i++)
    free(x->dirs[i].path);
  free(x->dirs);
}

/* The shared tar-entry policy (tarentry.h): the sandbox names every
 * path itself, so an absolute name is refused rather than re-rooted; "a//b"
 * and "a/./b" are read as "a/b", as tar does. */
static const struct agsx_tarentry_policy cp_policy = {
    .max_path = PATH_MAX - 1,
    .max_depth = MAX_DEPTH,
    .refuse_absolute = true,
    .collapse = true,
};

/* Returns (owned) the directory PATH's last component is in, walking from
 * DST one component at a time, never through a symlink; with CREATE,
 * missing directories are made (0755, the sandbox's root's). */
static int walk_parent(struct extract *x, const char *path, bool create, const char **ret_name,
                       agsx_error_t *err) {
  const char *slash = strrchr(path, '/');
  *ret_name = slash ? slash + 1 : path;
  size_t dlen = slash ? (size_t)(slash - path) : 0;
  if (dlen == 0)
    return fcntl(x->dirfd, F_DUPFD_CLOEXEC, 3);
  if (x->cache_dir && strlen(x->cache_dir) == dlen && strncmp(x->cache_dir, path, dlen) == 0)
    return fcntl(x->cache_fd, F_DUPFD_CLOEXEC, 3);
  _cleanup_free_ char *dir = xstrndup(path, dlen);
  _cleanup_close_ int fd = -1;
  for (char *p = dir, *end; p; p = end ? end + 1 : NULL) {
    end = strchr(p, '/');
    if (end)
      *end = '\0';
    int at = fd >= 0 ? fd : x->dirfd;
    int next = agsx_copy_open_child(at, p, O_RDONLY | O_DIRECTORY, 0);
    if (next < 0 && errno == ENOENT && create)
      next = agsx_copy_make_dir(at, p, 0755, dir, NULL, err);
    else if (next < 0)
      agsx_error_set(err, errno == ELOOP ? ENOTDIR : errno, "`%s`: not a directory", dir);
    if (end)
      *end = '/';
    if (next < 0)
      return -1;
    if (fd >= 0)
      close(fd);
    fd = next;
  }
  free(x->cache_dir);
  if (x->cache_fd >= 0)
    close(x->cache_fd);
  x->cache_dir = steal_ptr(&dir);
  x->cache_fd = steal_fd(&fd);
  return fcntl(x->cache_fd, F_DUPFD_CLOEXEC, 3);
}

/* The entry's data blocks at their offsets: holes of a sparse entry stay
 * holes in the sandbox, and only data counts towards the limit. */
static int extract_data(struct extract *x, int out, la_int64_t size, const char *path,
                        agsx_error_t *err) {
  for (;;) {
    const void *buf;
    size_t len;
    la_int64_t off;
    int r = archive_read_data_block(x->a, &buf, &len, &off);
    if (r == ARCHIVE_EOF)
      break;
    if (r < ARCHIVE_WARN)
      return agsx_error_set(err, 0, "`%s`: tar: %s", path, archive_error_string(x->a));
    if (off < 0 || off > size || (la_int64_t)len > size - off)
      return agsx_error_set(err, EINVAL, "`%s`: tar: data beyond the entry's size", path);
    if (agsx_copy_account_bytes(x->c, len, path, err) < 0)
      return -1;
    if (len > 0 && agsx_copy_pwrite_all(out, buf, len, off) < 0)
      return agsx_error_set(err, errno ? errno : EIO, "`%s`: write", path);
  }
  if (ftruncate(out, size) < 0)
    return agsx_error_set(err, errno, "`%s`: truncate", path);
  return 0;
}

static int extract_hardlink(struct extract *x, int pfd, const char *name, const char *path,
                            const char *target, agsx_error_t *err) {
  if (!agsx_strset_has(&x->files, target))
    return agsx_error_set(err, EPERM, "`%s`: hard link to `%.200s`, not a file of this stream",
                          path, target);
  const char *tname;
  _cleanup_close_ int tfd = walk_parent(x, target, false, &tname, err);
  if (tfd < 0)
    return agsx_error_wrap(err, "`%s`: hard link target", path);
  for (int i = 0; i < 8; i++) {
    if (agsx_copy_remove_nondir(pfd, name, path, err) < 0)
      return -1;
    /* flags 0: a symlink swapped in for the target is linked, not followed */
    if (linkat(tfd, tname, pfd, name, 0) == 0) {
      agsx_strset_add(&x->files, path);
      return 0;
    }
    if (errno != EEXIST)
      return agsx_error_set(err, errno, "`%s`: hard link to `%s`", path, target);
  }
  return agsx_error_set(err, EEXIST, "`%s`: keeps reappearing", path);
}

static int extract_one(struct extract *x, const struct agsx_tarentry *t, int pfd, const char *name,
                       agsx_error_t *err) {
  struct archive_entry *e = t->ae;
  const char *path = t->path;
  struct stat st = *archive_entry_stat(e);
  if (!archive_entry_atime_is_set(e))
    st.st_atim = st.st_mtim;
  switch (archive_entry_filetype(e)) {
  case AE_IFREG: {
    _cleanup_close_ int fd = agsx_copy_create_file(pfd, name, path, err);
    if (fd < 0)
      return -1;
    if (extract_data(x, fd, archive_entry_size(e), path, err) < 0 ||
        agsx_copy_set_meta(x->c, fd, &st, path, err) < 0) {
      unlinkat(pfd, name, 0); /* never a partial file */
      return -1;
    }
    agsx_strset_add(&x->files, path);
    return 0;
  }
  case AE_IFDIR: {
    _cleanup_close_ int fd = agsx_copy_make_dir(pfd, name, 0700, path, NULL, err);
    if (fd < 0)
      return -1;
    x->dirs = xrealloc(x->dirs, (x->ndirs + 1) * sizeof(*x->dirs));
    x->dirs[x->ndirs++] = (struct dirmeta){xstrdup(path), st};
    return 0;
  }
  case AE_IFLNK: {
    if (agsx_copy_create_link(pfd, name, t->symlink, path, err) < 0)
      return -1;
    return agsx_copy_set_link_meta(x->c, pfd, name, &st, path, err);
  }
  default:
    agsx_warn("cp: `%s` is not a regular file, directory or symlink: skipped", path);
    return 0;
  }
}

static int extract_entry(struct extract *x, const struct agsx_tarentry *t, agsx_error_t *err) {
  if (*t->path == '\0') /* "./": DST itself, left as it is */
    return 0;
  const char *name;
  _cleanup_close_ int pfd = walk_parent(x, t->path, true, &name, err);
  if (pfd < 0)
    return -1;
  if (t->kind == AGSX_TAR_HARDLINK)
    return extract_hardlink(x, pfd, name, t->path, t->hardlink, err);
  return extract_one(x, t, pfd, name, err);
}

/* Directories get their mode and times last: extracting into them changed
 * their mtime, and a read-only mode must not stop later entries. */
static int finish_dirs(struct extract *x, agsx_error_t *err) {
  for (size_t i = x->ndirs; i-- > 0;) {
    const char *name, *path = x->dirs[i].path;
    _cleanup_close_ int pfd = walk_parent(x, path, false, &name, err);
    _cleanup_close_ int fd =
        pfd < 0 ? -1 : agsx_copy_open_child(pfd, name, O_RDONLY | O_DIRECTORY, 0);
    if (fd < 0) {
      agsx_error_free(err);
      agsx_copy_skip_changed(path);
      continue;
    }
    if (agsx_copy_set_meta(x->c, fd, &x->dirs[i].st, path, err) < 0)
      return -1;
  }
  return 0;
}

static int extract_all(struct extract *x, agsx_error_t *err) {
  x->rd = (struct agsx_tar_reader){.a = x->a, .policy = &cp_policy, .what = "tar entry"};
  for (;;) {
    struct agsx_tarentry *t;
    int r = agsx_tar_reader_next(&x->rd, &t, err);
    if (r == 0)
      return finish_dirs(x, err);
    if (r < 0)
      return x->rd.read_failed ? agsx_error_wrap(err, "tar stream") : -1;
    if (agsx_copy_account_entry(x->c, "tar stream", err) < 0)
      return -1;
    if (extract_entry(x, t, err) < 0)
      return -1;
  }
}

int agsx_copy_in_tar(const struct agsx_copy_sandbox *sb, int fd, const char *dst, unsigned flags,
                     agsx_error_t *err) {
  const struct side sandbox = {sb->rootfd};
  while (*dst == '/')
    dst++;
  _cleanup_close_ int dirfd = agsx_copy_open_path(&sandbox, *dst ? dst : ".", O_PATH | O_DIRECTORY);
  if (dirfd < 0)
    return agsx_error_set(err, errno, "destination `/%s` (must be a directory)", dst);
  _cleanup_free_ char *buf = xmalloc(BUF_SIZE);
  _cleanup_(agsx_copy_archive_read_freep) struct archive *a = archive_read_new();
  _cleanup_(agsx_copy_copier_clear) struct copier c = {
      .to_sandbox = true, .base = sb->uid_base, .flags = flags, .buf = buf};
  agsx_copy_copier_limits(&c, sb);
  struct extract x = {.c = &c, .a = a, .dirfd = dirfd, .cache_fd = -1};
  archive_read_support_format_tar(a);
  archive_read_support_filter_gzip(a);
  if (archive_read_open_fd(a, fd, BUF_SIZE) != ARCHIVE_OK)
    return agsx_error_set(err, 0, "tar stream: %s", archive_error_string(a));
  int secbits;
  if (agsx_copy_enter_sandbox_ids(sb->uid_base, &secbits, err) < 0)
    return -1;
  int r = extract_all(&x, err);
  agsx_copy_leave_sandbox_ids(secbits);
  extract_clear(&x);
  return r;
}
