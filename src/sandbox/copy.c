/* agsx — copy: `agsx cp` between the host and a running sandbox (see copy.h
 * for the rules that keep a hostile sandbox from steering a copy). */
#include "config.h"

#include "sandbox/copy-internal.h"
#include "sandbox/proc.h"
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
void agsx_copy_copier_clear(struct copier *c) {
  free(c->zeros);
  for (size_t i = 0; i < c->n_created; i++)
    free(c->created[i]);
  free(c->created);
}

void agsx_copy_limits_default(struct agsx_copy_limits *lim) {
  *lim =
      (struct agsx_copy_limits){.max_bytes = DEFAULT_MAX_BYTES, .max_entries = DEFAULT_MAX_ENTRIES};
  const char *size = getenv("AGSX_CP_MAX_SIZE"), *entries = getenv("AGSX_CP_MAX_ENTRIES");
  _cleanup_error_ agsx_error_t err = NULL;
  uint64_t v;
  if (size && *size && agsx_parse_size(size, &v, &err) < 0)
    agsx_warn("ignoring AGSX_CP_MAX_SIZE: %s", err->msg);
  else if (size && *size)
    lim->max_bytes = v;
  char *end = NULL;
  errno = 0;
  unsigned long long n = entries && *entries ? strtoull(entries, &end, 10) : 0;
  if (entries && *entries && (errno || *end || n == 0 || *entries == '-'))
    agsx_warn("ignoring AGSX_CP_MAX_ENTRIES: not a positive number: `%.40s`", entries);
  else if (entries && *entries)
    lim->max_entries = n;
}

void agsx_copy_copier_limits(struct copier *c, const struct agsx_copy_sandbox *sb) {
  if (sb->limits)
    c->lim = *sb->limits;
  else
    agsx_copy_limits_default(&c->lim);
}

/* N more bytes of data for the destination, within the copy's limit. */
int agsx_copy_account_bytes(struct copier *c, uint64_t n, const char *path, agsx_error_t *err) {
  if (n > c->lim.max_bytes - c->bytes)
    return agsx_error_set(err, EFBIG,
                          "`%s`: the copy would write more than its limit of %" PRIu64
                          " bytes (AGSX_CP_MAX_SIZE)",
                          path, c->lim.max_bytes);
  c->bytes += n;
  return 0;
}

int agsx_copy_account_entry(struct copier *c, const char *path, agsx_error_t *err) {
  if (c->entries >= c->lim.max_entries)
    return agsx_error_set(err, E2BIG,
                          "`%s`: the copy has more than its limit of %" PRIu64
                          " entries (AGSX_CP_MAX_ENTRIES)",
                          path, c->lim.max_entries);
  c->entries++;
  return 0;
}

static void archive_freep(struct archive **a) {
  if (*a)
    archive_write_free(*a);
}

void agsx_copy_archive_read_freep(struct archive **a) {
  if (*a)
    archive_read_free(*a);
}

void agsx_copy_entry_freep(struct archive_entry **e) {
  if (*e)
    archive_entry_free(*e);
}

int agsx_copy_open_child(int dfd, const char *name, int flags, mode_t mode) {
  return agsx_openat2(dfd, name, flags | O_NOFOLLOW | O_NOCTTY, mode, RESOLVE_CHILD);
}

static char *join(const char *dir, const char *name) {
  return *dir ? xasprintf("%s/%s", dir, name) : xstrdup(name);
}

/* An entry that vanished or was swapped for another type while we copied
 * (sandbox code may do that at any time) is skipped, not followed. */
static bool changed_errno(int e) {
  return e == ENOENT || e == ELOOP || e == ENOTDIR || e == ENXIO || e == EINVAL;
}

/* ---- ownership, modes, times ------------------------------------------------------------ */

/* The uid and gid an entry with source ST gets; (uid_t)-1 keeps the caller. */
int agsx_copy_dest_ids(const struct copier *c, const struct stat *st, const char *path,
                       uid_t *ret_uid, gid_t *ret_gid, agsx_error_t *err) {
  bool keep = c->flags & AGSX_COPY_ARCHIVE;
  if (c->to_sandbox) {
    if (keep && (st->st_uid >= ID_RANGE || st->st_gid >= ID_RANGE))
      return agsx_error_set(err, EOVERFLOW, "`%s`: uid %u or gid %u is beyond the sandbox's 0-%u",
                            path, st->st_uid, st->st_gid, ID_RANGE - 1);
    *ret_uid = c->base + (keep ? st->st_uid : 0);
    *ret_gid = c->base + (keep ? st->st_gid : 0);
    return 0;
  }
  bool uid_in = st->st_uid >= c->base && st->st_uid - c->base < ID_RANGE;
  bool gid_in = st->st_gid >= c->base && st->st_gid - c->base < ID_RANGE;
  if (keep && (!uid_in || !gid_in))
    return agsx_error_set(err, EOVERFLOW, "`%s`: host uid %u or gid %u is not one of the sandbox's",
                          path, st->st_uid, st->st_gid);
  if (c->tar) { /* the sandbox's own view, like a tar made inside it */
    *ret_uid = uid_in ? st->st_uid - c->base : OVERFLOW_ID;
    *ret_gid = gid_in ? st->st_gid - c->base : OVERFLOW_ID;
  } else {
    *ret_uid = keep ? st->st_uid - c->base : (uid_t)-1;
    *ret_gid = keep ? st->st_gid - c->base : (gid_t)-1;
  }
  return 0;
}

/* Sandbox code can make its root own a set-user-ID file; copied out it
 * would be a set-user-ID root file on the host. */
mode_t agsx_copy_dest_mode(const struct copier *c, const struct stat *st) {
  mode_t m = st->st_mode & 07777;
  if (c->from_sandbox && !S_ISDIR(st->st_mode))
    m &= ~(mode_t)(S_ISUID | S_ISGID);
  return m;
}

int agsx_copy_set_meta(const struct copier *c, int fd, const struct stat *st, const char *path,
                       agsx_error_t *err) {
  uid_t uid;
  gid_t gid;
  if (agsx_copy_dest_ids(c, st, path, &uid, &gid, err) < 0)
    return -1;
  /* chown first: it clears the set-id bits fchmod then sets */
  if (uid != (uid_t)-1 && fchown(fd, uid, gid) < 0)
    return agsx_error_set(err, errno, "`%s`: chown", path);
  if (fchmod(fd, agsx_copy_dest_mode(c, st)) < 0)
    return agsx_error_set(err, errno, "`%s`: chmod", path);
  struct timespec ts[2] = {st->st_atim, st->st_mtim};
  if (futimens(fd, ts) < 0)
    return agsx_error_set(err, errno, "`%s`: set times", path);
  return 0;
}

int agsx_copy_set_link_meta(const struct copier *c, int dfd, const char *name,
                            const struct stat *st, const char *path, agsx_error_t *err) {
  uid_t uid;
  gid_t gid;
  if (agsx_copy_dest_ids(c, st, path, &uid, &gid, err) < 0)
    return -1;
  if (uid != (uid_t)-1 && fchownat(dfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
    return agsx_error_set(err, errno, "`%s`: chown", path);
  struct timespec ts[2] = {st->st_atim, st->st_mtim};
  if (utimensat(dfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0)
    return agsx_error_set(err, errno, "`%s`: set times", path);
  return 0;
}

/* ---- creating entries (host or sandbox side) -------------------------------------------- */

int agsx_copy_remove_nondir(int dfd, const char *name, const char *path, agsx_error_t *err) {
  struct stat st;
  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return errno == ENOENT ? 0 : agsx_error_set(err, errno, "`%s`", path);
  if (S_ISDIR(st.st_mode))
    return agsx_error_set(err, EISDIR, "cannot overwrite directory `%s` with a non-directory",
                          path);
  if (unlinkat(dfd, name, 0) < 0 && errno != ENOENT)
    return agsx_error_set(err, errno, "`%s`: remove", path);
  return 0;
}

/* O_EXCL never follows a symlink, even one planted between the unlink and
 * the create; then we unlink again, a few times. */
int agsx_copy_create_file(int dfd, const char *name, const char *path, agsx_error_t *err) {
  for (int i = 0; i < 8; i++) {
    if (agsx_copy_remove_nondir(dfd, name, path, err) < 0)
      return -1;
    int fd = agsx_copy_open_child(dfd, name, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd >= 0)
      return fd;
    if (errno != EEXIST)
      return agsx_error_set(err, errno, "`%s`: create", path);
  }
  return agsx_error_set(err, EEXIST, "`%s`: keeps reappearing", path);
}

int agsx_copy_create_link(int dfd, const char *name, const char *target, const char *path,
                          agsx_error_t *err) {
  for (int i = 0; i < 8; i++) {
    if (agsx_copy_remove_nondir(dfd, name, path, err) < 0)
      return -1;
    if (symlinkat(target, dfd, name) == 0)
      return 0;
    if (errno != EEXIST)
      return agsx_error_set(err, errno, "`%s`: symlink", path);
  }
  return agsx_error_set(err, EEXIST, "`%s`: keeps reappearing", path);
}

/* Creates directory NAME (or reuses an existing one, never a symlink to
 * one) and returns it open; *RET_CREATED (if not NULL) tells which. */
int agsx_copy_make_dir(int dfd, const char *name, mode_t mode, const char *path, bool *ret_created,
                       agsx_error_t *err) {
  bool created = mkdirat(dfd, name, mode) == 0;
  if (!created && errno != EEXIST)
    return agsx_error_set(err, errno, "`%s`: mkdir", path);
  if (ret_created)
    *ret_created = created;
  int fd = agsx_copy_open_child(dfd, name, O_RDONLY | O_DIRECTORY, 0);
  if (fd < 0 && (errno == ELOOP || errno == ENOTDIR))
    return agsx_error_set(err, ENOTDIR, "cannot overwrite non-directory `%s` with a directory",
                          path);
  if (fd < 0)
    return agsx_error_set(err, errno, "`%s`", path);
  return fd;
}

/* ---- streaming file data -------------------------------------------------------------- */

static bool fallback_errno(int e) {
  return e == EXDEV || e == EINVAL || e == ENOSYS || e == EOPNOTSUPP || e == EBADF || e == EPERM;
}

static bool all_zero(const char *p, size_t n) {
  return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

int agsx_copy_pwrite_all(int fd, const char *p, size_t n, off_t off) {
  while (n > 0) {
    ssize_t w = pwrite(fd, p, n, off);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    p += w;
    n -= (size_t)w;
    off += w;
  }
  return 0;
}

static size_t block_len(size_t n, size_t at) { return n - at < ZERO_BLOCK ? n - at : ZERO_BLOCK; }

/* Writes N bytes read at OFF, leaving out the blocks of zeros when the
 * source is a sandbox: holes it punches while we copy stay holes here. Runs
 * of other blocks go out in one write. */
static int write_chunk(struct copier *c, int out, const char *buf, size_t n, off_t off,
                       const char *path, agsx_error_t *err) {
  for (size_t done = 0; done < n;) {
    if (c->from_sandbox && all_zero(buf + done, block_len(n, done))) {
      done += block_len(n, done);
      continue;
    }
    size_t len = n - done;
    if (c->from_sandbox) { /* up to the next block of zeros */
      len = block_len(n, done);
      while (done + len < n && !all_zero(buf + done + len, block_len(n, done + len)))
        len += block_len(n, done + len);
    }
    if (agsx_copy_account_bytes(c, len, path, err) < 0)
      return -1;
    if (agsx_copy_pwrite_all(out, buf + done, len, off + (off_t)done) < 0)
      return agsx_error_set(err, errno ? errno : EIO, "`%s`: write", path);
    done += len;
  }
  return 0;
}

/* Copies [OFF, END) of IN to the same offsets of OUT. From the host,
 * copy_file_range(2) first (in-kernel, same file system); else, and always
 * from a sandbox, pread/pwrite through the 1 MiB buffer. A source that
 * shrank meanwhile ends early: the final ftruncate sets the size. */
static int copy_extent(struct copier *c, int in, int out, off_t off, off_t end, const char *path,
                       agsx_error_t *err) {
  while (!c->from_sandbox && off < end) {
    size_t want = end - off < (off_t)1 << 30 ? (size_t)(end - off) : (size_t)1 << 30;
    loff_t ioff = off, ooff = off;
    if (agsx_copy_account_bytes(c, want, path, err) < 0)
      return -1;
    ssize_t n = copy_file_range(in, &ioff, out, &ooff, want, 0);
    c->bytes -= want - (n > 0 ? (size_t)n : 0);
    if (n > 0) {
      off += n;
      continue;
    }
    if (n == 0)
      return 0;
    if (errno == EINTR)
      continue;
    if (!fallback_errno(errno))
      return agsx_error_set(err, errno, "`%s`: copy", path);
    break;
  }
  while (off < end) {
    size_t want = end - off < (off_t)BUF_SIZE ? (size_t)(end - off) : BUF_SIZE;
    ssize_t n = pread(in, c->buf, want, off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return agsx_error_set(err, errno, "`%s`: read", path);
    if (n == 0)
      return 0;
    if (write_chunk(c, out, c->buf, (size_t)n, off, path, err) < 0)
      return -1;
    off += n;
  }
  return 0;
}

int agsx_copy_next_extent(int in, off_t off, off_t size, off_t *ret_data, off_t *ret_end,
                          const char *path, agsx_error_t *err) {
  off_t data = lseek(in, off, SEEK_DATA);
  if (data < 0 && errno == ENXIO) /* only a hole up to the end */
    return 0;
  off_t hole = data < 0 ? -1 : lseek(in, data, SEEK_HOLE);
  if (hole < 0)
    return agsx_error_set(err, errno, "`%s`: seek", path);
  if (data >= size)
    return 0;
  *ret_data = data;
  *ret_end = hole < size ? hole : size;
  return 1;
}

/* Copies the first SIZE bytes of IN (its size when it was opened; what it
 * grows to meanwhile is not copied), data extents only: a file sandbox code
 * made sparse, 1 TiB large in no space, stays sparse and small. */
static int copy_data(struct copier *c, int in, int out, off_t size, const char *path,
                     agsx_error_t *err) {
  off_t data, end;
  for (off_t off = 0; off < size; off = end) {
    int r = agsx_copy_next_extent(in, off, size, &data, &end, path, err);
    if (r < 0)
      return -1;
    if (r == 0)
      break;
    if (copy_extent(c, in, out, data, end, path, err) < 0)
      return -1;
  }
  if (ftruncate(out, size) < 0)
    return agsx_error_set(err, errno, "`%s`: truncate", path);
  return 0;
}

/* ---- walking the source --------------------------------------------------------------- */

/* Records PATH, about to be created by the copy, when it is new in a
 * directory that existed before (the only entries a failure must remove). */
static void journal_new(struct copier *c, int ddfd, const char *dname, const char *path) {
  struct stat st;
  if (c->tar || c->in_new_dir || fstatat(ddfd, dname, &st, AT_SYMLINK_NOFOLLOW) == 0)
    return;
  if (c->n_created == c->cap_created) {
    c->cap_created = c->cap_created ? 2 * c->cap_created : 16;
    c->created = xrealloc(c->created, c->cap_created * sizeof(*c->created));
  }
  c->created[c->n_created++] = xstrdup(path);
}

/* After a failure: removes what the journal names, below DFD, walking one
 * component at a time without following symlinks. */
static void journal_undo(struct copier *c, int dfd) {
  for (size_t i = c->n_created; i-- > 0;) {
    char *path = c->created[i], *slash = strrchr(path, '/');
    _cleanup_close_ int pfd = fcntl(dfd, F_DUPFD_CLOEXEC, 3);
    if (slash) {
      *slash = '\0';
      agsx_closep(&pfd);
      pfd = agsx_copy_open_child(dfd, path, O_PATH | O_DIRECTORY, 0);
      *slash = '/';
    }
    _cleanup_error_ agsx_error_t e = NULL;
    if (pfd < 0 || agsx_rm_rf_at(pfd, slash ? slash + 1 : path, &e) < 0)
      agsx_warn("cp: could not remove `%s` after the failure%s%s", path, e ? ": " : "",
                e ? e->msg : "");
  }
}

static int copy_node(struct copier *c, int sdfd, const char *sname, const struct stat *st, int ddfd,
                     const char *dname, const char *path, agsx_error_t *err);

int agsx_copy_skip_changed(const char *path) {
  agsx_warn("cp: `%s` changed during the copy: skipped", path);
  return 0;
}

/* Kernel file systems mounted in the sandbox are not read from the host:
 * we read as host root, and /proc/kcore or a root-only sysfs attribute
 * would give the caller what the sandbox itself cannot read (sandbox code
 * can also bind-mount them anywhere in its tree). Nothing is written into
 * them either: entries are always created afresh, never opened for writing. */
bool agsx_copy_on_kernel_fs_fd(int fd) {
  static const long magics[] = {PROC_SUPER_MAGIC,    SYSFS_MAGIC,   CGROUP_SUPER_MAGIC,
                                CGROUP2_SUPER_MAGIC, DEBUGFS_MAGIC, TRACEFS_MAGIC,
                                SECURITYFS_MAGIC,    BPF_FS_MAGIC,  DEVPTS_SUPER_MAGIC,
                                EFIVARFS_MAGIC,      NSFS_MAGIC,    0x62656570 /* configfs */};
  struct statfs sf;
  if (fstatfs(fd, &sf) < 0)
    return true;
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(magics); i++)
    if ((long)sf.f_type == magics[i])
      return true;
  return false;
}

static bool on_kernel_fs(const struct copier *c, int fd) {
  return c->from_sandbox && agsx_copy_on_kernel_fs_fd(fd);
}

static int skip_kernel_fs(const char *path) {
  agsx_warn("cp: `%s` is on a kernel filesystem (proc, sysfs, ...): skipped", path);
  return 0;
}

static int copy_reg(struct copier *c, int sdfd, const char *sname, int ddfd, const char *dname,
                    const char *path, agsx_error_t *err) {
  /* O_NONBLOCK: if a FIFO was swapped in since the stat, the open must not
   * hang; fstat below then rejects it. */
  _cleanup_close_ int in = agsx_copy_open_child(sdfd, sname, O_RDONLY | O_NONBLOCK, 0);
  if (in < 0)
    return changed_errno(errno) ? agsx_copy_skip_changed(path)
                                : agsx_error_set(err, errno, "`%s`", path);
  struct stat st;
  if (fstat(in, &st) < 0)
    return agsx_error_set(err, errno, "`%s`: stat", path);
  if (!S_ISREG(st.st_mode))
    return agsx_copy_skip_changed(path);
  if (on_kernel_fs(c, in))
    return skip_kernel_fs(path);
  if (c->tar)
    return agsx_copy_tar_entry(c, path, &st, NULL, in, err);
  journal_new(c, ddfd, dname, path);
  _cleanup_close_ int out = agsx_copy_create_file(ddfd, dname, path, err);
  if (out < 0)
    return -1;
  if (copy_data(c, in, out, st.st_size, path, err) < 0 ||
      agsx_copy_set_meta(c, out, &st, path, err) < 0) {
    unlinkat(ddfd, dname, 0); /* never a partial file, whatever it replaced */
    return -1;
  }
  return 0;
}

static int copy_link(struct copier *c, int sdfd, const char *sname, const struct stat *st, int ddfd,
                     const char *dname, const char *path, agsx_error_t *err) {
  char target[PATH_MAX];
  ssize_t n = readlinkat(sdfd, sname, target, sizeof(target));
  if (n < 0)
    return changed_errno(errno) ? agsx_copy_skip_changed(path)
                                : agsx_error_set(err, errno, "`%s`", path);
  if ((size_t)n >= sizeof(target))
    return agsx_error_set(err, ENAMETOOLONG, "`%s`: symlink target too long", path);
  target[n] = '\0';
  if (c->tar)
    return agsx_copy_tar_entry(c, path, st, target, -1, err);
  journal_new(c, ddfd, dname, path);
  if (agsx_copy_create_link(ddfd, dname, target, path, err) < 0)
    return -1;
  return agsx_copy_set_link_meta(c, ddfd, dname, st, path, err);
}

/* Copies the entries of the open directory IN into OUT (or the tar). */
static int copy_children(struct copier *c, int in, int out, const char *path, agsx_error_t *err) {
  _cleanup_dir_ DIR *d = agsx_dir_stream(in);
  if (d == NULL)
    return agsx_error_set(err, errno, "`%s`: opendir", path);
  for (;;) {
    errno = 0;
    struct dirent *de = readdir(d);
    if (de == NULL)
      return errno ? agsx_error_set(err, errno, "`%s`: readdir", path) : 0;
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    _cleanup_free_ char *child = join(path, de->d_name);
    struct stat st;
    if (fstatat(in, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno == ENOENT)
        continue;
      return agsx_error_set(err, errno, "`%s`", child);
    }
    if (copy_node(c, in, de->d_name, &st, out, de->d_name, child, err) < 0)
      return -1;
  }
}

static int copy_dir(struct copier *c, int sdfd, const char *sname, int ddfd, const char *dname,
                    const char *path, agsx_error_t *err) {
  if (c->depth >= MAX_DEPTH)
    return agsx_error_set(err, ELOOP, "`%s`: more than %d directory levels", path, MAX_DEPTH);
  _cleanup_close_ int in = agsx_copy_open_child(sdfd, sname, O_RDONLY | O_DIRECTORY, 0);
  if (in < 0)
    return changed_errno(errno) ? agsx_copy_skip_changed(path)
                                : agsx_error_set(err, errno, "`%s`", path);
  struct stat st;
  if (fstat(in, &st) < 0)
    return agsx_error_set(err, errno, "`%s`: stat", path);
  if (on_kernel_fs(c, in))
    return skip_kernel_fs(path);
  _cleanup_close_ int out = -1;
  bool created = false, was_new = c->in_new_dir;
  if (c->tar) {
    if (agsx_copy_tar_entry(c, path, &st, NULL, -1, err) < 0)
      return -1;
  } else {
    journal_new(c, ddfd, dname, path);
    if ((out = agsx_copy_make_dir(ddfd, dname, 0700, path, &created, err)) < 0)
      return -1;
  }
  c->depth++;
  c->in_new_dir = was_new || created;
  int r = copy_children(c, in, out, path, err);
  c->in_new_dir = was_new;
  c->depth--;
  if (r < 0)
    return -1;
  /* after the children: creating them changed the directory's mtime */
  return c->tar ? 0 : agsx_copy_set_meta(c, out, &st, path, err);
}

/* Copies SDFD/SNAME (lstat'ed as ST) to DDFD/DNAME, or to the tar as PATH. */
static int copy_node(struct copier *c, int sdfd, const char *sname, const struct stat *st, int ddfd,
                     const char *dname, const char *path, agsx_error_t *err) {
  if (agsx_copy_account_entry(c, path, err) < 0)
    return -1;
  switch (st->st_mode & S_IFMT) {
  case S_IFREG: return copy_reg(c, sdfd, sname, ddfd, dname, path, err);
  case S_IFDIR: return copy_dir(c, sdfd, sname, ddfd, dname, path, err);
  case S_IFLNK: return copy_link(c, sdfd, sname, st, ddfd, dname, path, err);
  default:
    agsx_warn("cp: `%s` is not a regular file, directory or symlink: skipped", path);
    return 0;
  }
}

/* ---- resolving SRC and DST ------------------------------------------------------------ */

int agsx_copy_open_path(const struct side *s, const char *path, int flags) {
  if (s->rootfd >= 0)
    return agsx_openat2(s->rootfd, path, flags, 0, RESOLVE_SANDBOX);
  return openat(AT_FDCWD, path, flags | O_CLOEXEC);
}

struct split {
  char *dir;     /* where the last component is: "." when none, "/" */
  char *base;    /* the last component; "." when there is none */
  bool slash;    /* ended with "/" */
  bool contents; /* ended with "/." (or is the root) */
};

static void split_clear(struct split *p) {
  free(p->dir);
  free(p->base);
  p->dir = p->base = NULL;
}

/* Splits PATH; a sandbox path is relative to the sandbox's root. */
static int split_path(const struct side *s, const char *path, struct split *ret,
                      agsx_error_t *err) {
  _cleanup_free_ char *p = xstrdup(path);
  if (s->rootfd >= 0) {
    const char *q = p;
    while (*q == '/')
      q++;
    memmove(p, q, strlen(q) + 1);
  }
  size_t n = strlen(p);
  memset(ret, 0, sizeof(*ret));
  ret->slash = n > 0 && p[n - 1] == '/';
  ret->contents = strcmp(p, ".") == 0 || (n >= 2 && strcmp(p + n - 2, "/.") == 0);
  for (;;) { /* drop trailing "/" and "/." */
    if (n > 1 && p[n - 1] == '/')
      p[--n] = '\0';
    else if (n > 2 && strcmp(p + n - 2, "/.") == 0)
      p[n -= 2] = '\0';
    else
      break;
  }
  if (n == 0 || strcmp(p, "/") == 0 || strcmp(p, ".") == 0) {
    ret->dir = xstrdup(n == 0 ? "." : p);
    ret->base = xstrdup(".");
    ret->contents = true;
    return 0;
  }
  char *slash = strrchr(p, '/');
  ret->base = xstrdup(slash ? slash + 1 : p);
  ret->dir = slash ? xstrndup(p, slash == p ? 1 : (size_t)(slash - p)) : xstrdup(".");
  if (strcmp(ret->base, "..") == 0) {
    split_clear(ret);
    return agsx_error_set(err, EINVAL, "`%s`: a path may not end in `..`", path);
  }
  return 0;
}

struct src {
  int pfd;     /* the directory SNAME is in */
  char *sname; /* "." for a directory's contents */
  char *dname; /* the name the copy gets; NULL: SRC's contents */
  struct stat st;
};

static void src_clear(struct src *s) {
  if (s->pfd >= 0)
    close(s->pfd);
  free(s->sname);
  free(s->dname);
}

/* One resolution of PATH, not following a symlink at its end. */
static int resolve_once(const struct side *side, const char *path, struct src *ret, char **ret_dir,
                        agsx_error_t *err) {
  struct split p;
  if (split_path(side, path, &p, err) < 0)
    return -1;
  *ret = (struct src){.pfd = -1};
  if (p.contents || p.slash) { /* SRC/ and SRC/. name a directory, followed */
    _cleanup_free_ char *full = strcmp(p.base, ".") == 0  ? xstrdup(p.dir)
                                : strcmp(p.dir, ".") == 0 ? xstrdup(p.base)
                                                          : xasprintf("%s/%s", p.dir, p.base);
    ret->pfd = agsx_copy_open_path(side, full, O_PATH | O_DIRECTORY);
    ret->sname = xstrdup(".");
    ret->dname = p.contents ? NULL : xstrdup(p.base);
  } else {
    ret->pfd = agsx_copy_open_path(side, p.dir, O_PATH | O_DIRECTORY);
    ret->sname = xstrdup(p.base);
    ret->dname = xstrdup(p.base);
  }
  *ret_dir = steal_ptr(&p.dir);
  split_clear(&p);
  if (ret->pfd < 0 || fstatat(ret->pfd, ret->sname, &ret->st, AT_SYMLINK_NOFOLLOW) < 0) {
    agsx_error_set(err, errno, "`%s`", path);
    src_clear(ret);
    return -1;
  }
  return 0;
}

/* With AGSX_COPY_FOLLOW a symlink SRC is replaced by its target, resolved
 * on SRC's side (in the sandbox's root there); the copy keeps SRC's name. */
static int resolve_src(const struct side *side, const char *path, unsigned flags, struct src *ret,
                       agsx_error_t *err) {
  _cleanup_free_ char *cur = xstrdup(path), *dname = NULL;
  for (int hops = 0;; hops++) {
    _cleanup_free_ char *dir = NULL;
    if (resolve_once(side, cur, ret, &dir, err) < 0)
      return agsx_error_wrap(err, "%s", hops ? path : "source");
    if (hops == 0)
      dname = ret->dname ? xstrdup(ret->dname) : NULL;
    if (!(flags & AGSX_COPY_FOLLOW) || !S_ISLNK(ret->st.st_mode)) {
      if (hops > 0 && dname) {
        free(ret->dname);
        ret->dname = steal_ptr(&dname);
      }
      return 0;
    }
    char target[PATH_MAX];
    ssize_t n = readlinkat(ret->pfd, ret->sname, target, sizeof(target));
    int e = hops >= 40 ? ELOOP : n < 0 ? errno : (size_t)n >= sizeof(target) ? ENAMETOOLONG : 0;
    src_clear(ret);
    if (e)
      return agsx_error_set(err, e, "source `%s`: follow symlink", path);
    target[n] = '\0';
    free(cur);
    cur = target[0] == '/' || strcmp(dir, ".") == 0 ? xstrdup(target)
                                                    : xasprintf("%s/%s", dir, target);
  }
}

struct dst {
  int pfd;    /* where NAME is created, or where SRC's contents go */
  char *name; /* NULL: copy SRC's contents into PFD */
};

static char *split_full(const struct split *p) {
  if (strcmp(p->base, ".") == 0)
    return xstrdup(p->dir);
  if (strcmp(p->dir, ".") == 0)
    return xstrdup(p->base);
  return xasprintf("%s%s%s", p->dir, strcmp(p->dir, "/") == 0 ? "" : "/", p->base);
}

/* docker cp's rules: into DST when it is a directory (SRC's contents for
 * SRC/.), else DST itself; DST/ must be an existing directory. */
static int resolve_dst(const struct side *side, const char *path, const struct src *s,
                       struct dst *ret, agsx_error_t *err) {
  _cleanup_(split_clear) struct split p = {0};
  if (split_path(side, path, &p, err) < 0)
    return agsx_error_wrap(err, "destination");
  bool src_dir = S_ISDIR(s->st.st_mode), want_dir = p.slash || p.contents;
  _cleanup_free_ char *full = split_full(&p);
  *ret = (struct dst){.pfd = agsx_copy_open_path(side, full, O_PATH | O_DIRECTORY)};
  if (ret->pfd >= 0) {
    ret->name = s->dname ? xstrdup(s->dname) : NULL;
    return 0;
  }
  if (errno == ENOTDIR && want_dir)
    return agsx_error_set(err, ENOTDIR, "destination `%s` is not a directory", path);
  if (errno == ENOTDIR && src_dir)
    return agsx_error_set(err, ENOTDIR, "cannot copy a directory to non-directory `%s`", path);
  if (errno != ENOTDIR && errno != ENOENT)
    return agsx_error_set(err, errno, "destination `%s`", path);
  if (errno == ENOENT && want_dir && !src_dir)
    return agsx_error_set(err, ENOENT, "destination directory `%s` does not exist", path);
  if (strcmp(p.base, ".") == 0)
    return agsx_error_set(err, ENOENT, "destination `%s`", path);
  ret->pfd = agsx_copy_open_path(side, p.dir, O_PATH | O_DIRECTORY);
  if (ret->pfd < 0)
    return agsx_error_set(err, errno, "destination `%s`", path);
  ret->name = xstrdup(p.base);
  return 0;
}

static int copy_top(struct copier *c, const struct src *s, int dfd, const char *dname,
                    agsx_error_t *err) {
  if (dname)
    return copy_node(c, s->pfd, s->sname, &s->st, dfd, dname, dname, err);
  _cleanup_close_ int in = agsx_copy_open_child(s->pfd, s->sname, O_RDONLY | O_DIRECTORY, 0);
  if (in < 0)
    return agsx_error_set(err, errno, "source directory");
  if (on_kernel_fs(c, in))
    return skip_kernel_fs(s->sname);
  return copy_children(c, in, dfd, "", err);
}

/* ---- ids for writing into the sandbox -------------------------------------------------- */

/* Inodes created in the sandbox need an owner its user namespace maps:
 * its overlayfs and tmpfs refuse host root (EOVERFLOW). So we create as the
 * sandbox's root (fsuid/fsgid = base); SECBIT_NO_SETUID_FIXUP keeps our
 * capabilities across the change (CAP_CHOWN for -a, CAP_DAC_OVERRIDE for
 * directories of the sandbox's other users). One thread: nothing else runs
 * with these ids. */
int agsx_copy_enter_sandbox_user(uint32_t uid, uint32_t gid, int *ret_secbits, agsx_error_t *err) {
  int old = prctl(PR_GET_SECUREBITS);
  if (old < 0 || prctl(PR_SET_SECUREBITS, old | SECBIT_NO_SETUID_FIXUP) < 0)
    return agsx_error_set(err, errno, "keep capabilities while acting as a sandbox user");
  setfsgid(gid);
  setfsuid(uid);
  /* setfsuid reports no error: it returns the previous id. Ask again. */
  if ((uint32_t)setfsuid((uid_t)-1) != uid || (uint32_t)setfsgid((gid_t)-1) != gid) {
    agsx_copy_leave_sandbox_ids(old);
    return agsx_error_set(err, EPERM, "act as the sandbox's uid %u", uid);
  }
  *ret_secbits = old;
  return 0;
}

int agsx_copy_enter_sandbox_ids(uint32_t base, int *ret_secbits, agsx_error_t *err) {
  return agsx_copy_enter_sandbox_user(base, base, ret_secbits, err);
}

void agsx_copy_leave_sandbox_ids(int secbits) {
  setfsuid(0);
  setfsgid(0);
  prctl(PR_SET_SECUREBITS, secbits);
}

/* ---- entry points --------------------------------------------------------------------- */

int agsx_copy_open_root(const struct agsx_record *rec, agsx_error_t *err) {
  if (rec->status != AGSX_STATUS_RUNNING)
    return agsx_error_set_quiet(err, ESRCH, "sandbox `%.12s` is not running", rec->id);
  /* Proven to be the init's before and after the open (see proc.h). */
  int fd = agsx_proc_ref_open(&rec->init, "root", O_PATH | O_DIRECTORY);
  if (fd < 0 && errno == ESRCH)
    return agsx_error_set_quiet(err, ESRCH, "sandbox `%.12s` is not running", rec->id);
  if (fd < 0)
    return agsx_error_set(err, errno, "sandbox `%.12s`: open its root", rec->id);
  return fd;
}

static int copy_between(struct copier *c, const struct side *from, const char *src,
                        const struct side *to, const char *dst, agsx_error_t *err) {
  struct src s;
  if (resolve_src(from, src, c->flags, &s, err) < 0)
    return -1;
  struct dst d = {.pfd = -1};
  int r = resolve_dst(to, dst, &s, &d, err);
  if (r == 0) {
    r = copy_top(c, &s, d.pfd, d.name, err);
    if (r < 0)
      journal_undo(c, d.pfd);
    close(d.pfd);
    free(d.name);
  }
  src_clear(&s);
  return r;
}

int agsx_copy_in_at(const struct agsx_copy_sandbox *sb, int hostfd, const char *src,
                    const char *dst, unsigned flags, agsx_error_t *err) {
  const struct side host = {hostfd}, sandbox = {sb->rootfd};
  _cleanup_free_ char *buf = xmalloc(BUF_SIZE);
  _cleanup_(agsx_copy_copier_clear) struct copier c = {
      .to_sandbox = true, .base = sb->uid_base, .flags = flags, .buf = buf};
  agsx_copy_copier_limits(&c, sb);
  int secbits;
  if (agsx_copy_enter_sandbox_ids(sb->uid_base, &secbits, err) < 0)
    return -1;
  int r = copy_between(&c, &host, src, &sandbox, dst, err);
  agsx_copy_leave_sandbox_ids(secbits);
  return r;
}

int agsx_copy_in(const struct agsx_copy_sandbox *sb, const char *src, const char *dst,
                 unsigned flags, agsx_error_t *err) {
  return agsx_copy_in_at(sb, -1, src, dst, flags, err);
}

int agsx_copy_out_at(const struct agsx_copy_sandbox *sb, int hostfd, const char *src,
                     const char *dst, unsigned flags, agsx_error_t *err) {
  const struct side host = {hostfd}, sandbox = {sb->rootfd};
  _cleanup_free_ char *buf = xmalloc(BUF_SIZE);
  _cleanup_(agsx_copy_copier_clear) struct copier c = {
      .from_sandbox = true, .base = sb->uid_base, .flags = flags, .buf = buf};
  agsx_copy_copier_limits(&c, sb);
  return copy_between(&c, &sandbox, src, &host, dst, err);
}

int agsx_copy_out(const struct agsx_copy_sandbox *sb, const char *src, const char *dst,
                  unsigned flags, agsx_error_t *err) {
  return agsx_copy_out_at(sb, -1, src, dst, flags, err);
}

int agsx_copy_out_tar(const struct agsx_copy_sandbox *sb, const char *src, int fd, unsigned flags,
                      agsx_error_t *err) {
  const struct side sandbox = {sb->rootfd};
  struct src s;
  if (resolve_src(&sandbox, src, flags, &s, err) < 0)
    return -1;
  _cleanup_free_ char *buf = xmalloc(BUF_SIZE);
  _cleanup_(archive_freep) struct archive *a = archive_write_new();
  _cleanup_(agsx_copy_copier_clear) struct copier c = {
      .from_sandbox = true, .base = sb->uid_base, .flags = flags, .buf = buf, .tar = a};
  agsx_copy_copier_limits(&c, sb);
  int r = 0;
  if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
      archive_write_open_fd(a, fd) != ARCHIVE_OK)
    r = agsx_copy_tar_fail(a, "-", err);
  if (r == 0)
    r = copy_top(&c, &s, -1, s.dname, err);
  if (r == 0 && archive_write_close(a) != ARCHIVE_OK)
    r = agsx_copy_tar_fail(a, "-", err);
  src_clear(&s);
  return r;
}
