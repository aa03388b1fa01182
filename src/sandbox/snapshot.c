/* agsx — snapshot: captures of a sandbox's writable layer, snapshots, the
 * layers' gc (see snapshot.h). */
#include "config.h"

#include "sandbox/snapshot.h"

#include "sandbox/control.h"
#include "sandbox/freeze.h"
#include "sandbox/lifecycle.h"
#include "sandbox/proc.h"
#include "sandbox/sandbox.h"
#include "sandbox/userns.h"
#include "util/json.h"

#include <ctype.h>
#include <endian.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/file.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <sys/xattr.h>
#include <time.h>

#define DEPTH_MAX 256
#define OVERFLOW_ID 65534u
#define XATTR_NAME_CAPS "security.capability"
#define XATTR_LIST_MAX_ 65536
#define XATTR_VALUE_MAX 65536
#define COPY_BUF (1 << 20)
#define SENDFILE_MAX (16u << 20) /* per call, so that copy_check runs between */
#define SNAPSHOT_JSON_MAX (1 << 20)

bool agsx_snapshot_layer_id_is_valid(const char *s) {
  return s && strlen(s) == 32 && strspn(s, "0123456789abcdef") == 32;
}

bool agsx_snapshot_name_is_valid(const char *s) { return s && agsx_name_is_valid(s); }

/* ---- the sandbox's tmpfs ------------------------------------------------------------------ */

int agsx_snapshot_open_tmpfs(const struct agsx_record *rec, agsx_error_t *err) {
  if (rec->tmpfs_fd < 0)
    return agsx_error_set(err, ENOTSUP, "sandbox `%.12s` was started by an agsx without snapshots",
                          rec->id);
  _cleanup_close_ int pidfd = agsx_proc_ref_pidfd(&rec->supervisor);
  if (pidfd < 0)
    return agsx_error_set_quiet(err, ESRCH, "sandbox `%.12s` is not running", rec->id);
  _cleanup_close_ int fd = (int)syscall(SYS_pidfd_getfd, pidfd, rec->tmpfs_fd, 0);
  if (fd < 0)
    return agsx_error_set(err, errno, "sandbox `%.12s`: take its tmpfs from the supervisor",
                          rec->id);
  struct statfs sfs;
  struct stat st;
  if (fstatfs(fd, &sfs) < 0 || sfs.f_type != TMPFS_MAGIC ||
      fstatat(fd, "upper", &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode) ||
      fstatat(fd, "work", &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
    return agsx_error_set(err, EIO, "sandbox `%.12s`: the supervisor's fd %d is not its tmpfs",
                          rec->id, rec->tmpfs_fd);
  return steal_fd(&fd);
}

/* ---- the copy ------------------------------------------------------------------------------ */

struct link {
  dev_t dev;
  ino_t ino;
  char *path; /* of the first copy, in the new layer */
};

struct copy {
  uint32_t base;
  /* Copying a lower layer into a range (agsx_layer_copy_to_range): ids
   * shifted up by BASE, file capabilities kept, no file left out. Else
   * a sandbox's upper directory into a layer: ids shifted down. */
  bool to_range;
  int dstroot;
  /* The sandbox whose freeze the copy relies on (see copy_check). */
  int statefd;
  const char *id;
  int64_t next_check;
  struct link *links;
  size_t n_links;
  uint64_t bytes, files;
  uint64_t holes; /* bytes of sparse files that are holes */
  char *buf;
};

static uid_t shift(const struct copy *c, uid_t id) {
  if (c->to_range)
    return (id < AGSX_UID_RANGE ? id : OVERFLOW_ID) + c->base;
  return id >= c->base && id - c->base < AGSX_UID_RANGE ? id - c->base : 0;
}

static bool stayed_frozen(int statefd, const char *id);

/* The copy is only worth going on while the sandbox stays frozen and
 * running: a stop (agsx kill, the deadline, its init's death) thaws it and
 * the copy could never be kept. Without this check a copy went on to the
 * end after a kill, tens of seconds for a tree of many files on a state
 * directory whose file system allocates inodes slowly after mass deletion
 * (ext4 without a journal skips every recently deleted inode: perf shows
 * recently_deleted and find_get_block_common), so a snapshot killed
 * mid-copy spun at 100% CPU for over a minute. Checked at most every
 * COPY_CHECK_NS of copying (a record read and a freezer state read; the
 * clock costs nothing beside a file's syscalls). */
#define COPY_CHECK_NS (20 * 1000000LL)
static int copy_check(struct copy *c, agsx_error_t *err) {
  if (c->id == NULL)
    return 0;
  int64_t now = agsx_mono_ns();
  if (now < c->next_check)
    return 0;
  c->next_check = now + COPY_CHECK_NS;
  if (!stayed_frozen(c->statefd, c->id))
    return agsx_error_set(err, ESRCH, "sandbox `%.12s` was stopped during the copy: nothing kept",
                          c->id);
  return 0;
}

/* Files agsx writes into every sandbox's root: never part of a layer. */
static bool agsx_made(const char *path) {
  return strcmp(path, "etc/hosts") == 0 || strcmp(path, "etc/hostname") == 0 ||
         strcmp(path, "etc/resolv.conf") == 0;
}

/* Overlay's bookkeeping that means nothing in a lower layer. */
static bool xattr_kept(const char *name) {
  static const char *const dropped[] = {"user.overlay.origin", "user.overlay.impure",
                                        "user.overlay.nlink", "user.overlay.upper",
                                        "user.overlay.uuid"};
  if (strncmp(name, "user.", 5) != 0)
    return false;
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(dropped); i++)
    if (strcmp(name, dropped[i]) == 0)
      return false;
  return true;
}

static int copy_xattrs(int src, int dst, const char *path, agsx_error_t *err) {
  _cleanup_free_ char *list = xmalloc(XATTR_LIST_MAX_);
  ssize_t n = flistxattr(src, list, XATTR_LIST_MAX_);
  if (n < 0)
    return errno == ENOTSUP ? 0 : agsx_error_set(err, errno, "list the xattrs of `%s`", path);
  _cleanup_free_ char *val = xmalloc(XATTR_VALUE_MAX);
  for (char *k = list; k < list + n; k += strlen(k) + 1) {
    if (!xattr_kept(k))
      continue;
    ssize_t vl = fgetxattr(src, k, val, XATTR_VALUE_MAX);
    if (vl < 0 && errno == ENODATA)
      continue;
    if (vl < 0 || fsetxattr(dst, k, val, (size_t)vl, 0) < 0)
      return agsx_error_set(err, errno, "copy xattr `%s` of `%s`", k, path);
  }
  return 0;
}

/* Owner, mode and times of DST from ST (after the content: a chown clears
 * set-id bits, a write the times). */
static int copy_attrs(const struct copy *c, int dst, const struct stat *st, const char *path,
                      agsx_error_t *err) {
  struct timespec ts[2] = {st->st_atim, st->st_mtim};
  if (fchown(dst, shift(c, st->st_uid), shift(c, st->st_gid)) < 0 ||
      fchmod(dst, st->st_mode & 07777) < 0 || futimens(dst, ts) < 0)
    return agsx_error_set(err, errno, "set the attributes of `%s`", path);
  return 0;
}

/* SRC's file capabilities on DST (after its chown, which clears them),
 * owned by the range's root: as read here, in the user's namespace,
 * version 2 (owned by its root, range 0's) or 3 with a root of ours; the
 * kernel takes a version 3 root as an id of the writer's namespace. */
static int copy_fcaps(const struct copy *c, int src, int dst, const char *path, agsx_error_t *err) {
  struct vfs_ns_cap_data cap = {0};
  ssize_t n = fgetxattr(src, XATTR_NAME_CAPS, &cap, sizeof(cap));
  if (n < 0)
    return errno == ENODATA || errno == ENOTSUP || errno == EOVERFLOW
               ? 0
               : agsx_error_set(err, errno, "read the capabilities of `%s`", path);
  uint32_t magic = le32toh(cap.magic_etc), root = 0;
  if ((magic & VFS_CAP_REVISION_MASK) == VFS_CAP_REVISION_3 && n == XATTR_CAPS_SZ_3)
    root = le32toh(cap.rootid);
  else if ((magic & VFS_CAP_REVISION_MASK) != VFS_CAP_REVISION_2 || n != XATTR_CAPS_SZ_2)
    return 0; /* none the kernel would honour */
  if (root >= AGSX_UID_RANGE)
    return 0; /* not a root of a sandbox's range: nobody's */
  cap.magic_etc = htole32(VFS_CAP_REVISION_3 | (magic & VFS_CAP_FLAGS_EFFECTIVE));
  cap.rootid = htole32(root + c->base);
  if (fsetxattr(dst, XATTR_NAME_CAPS, &cap, XATTR_CAPS_SZ_3, 0) < 0)
    return agsx_error_set(err, errno, "set the capabilities of `%s`", path);
  return 0;
}

/* The data segments of SRC into DST (holes stay holes), then its size. */
static int copy_data(struct copy *c, int src, int dst, off_t size, const char *path,
                     agsx_error_t *err) {
  off_t off = 0;
  while (off < size) {
    off_t data = lseek(src, off, SEEK_DATA);
    if (data < 0 && errno == ENXIO)
      break;
    off_t hole = data < 0 ? -1 : lseek(src, data, SEEK_HOLE);
    if (hole < 0)
      return agsx_error_set(err, errno, "read `%s`", path);
    /* In the kernel first (no copy through our memory), else by hand. */
    off = data;
    if (lseek(dst, data, SEEK_SET) == data)
      while (off < hole) {
        if (copy_check(c, err) < 0)
          return -1;
        ssize_t k =
            sendfile(dst, src, &off,
                     (size_t)(hole - off) < SENDFILE_MAX ? (size_t)(hole - off) : SENDFILE_MAX);
        if (k < 0 && errno == EINTR)
          continue;
        if (k <= 0)
          break;
        c->bytes += (uint64_t)k;
      }
    while (off < hole) {
      if (copy_check(c, err) < 0)
        return -1;
      size_t want = hole - off < COPY_BUF ? (size_t)(hole - off) : COPY_BUF;
      ssize_t r = pread(src, c->buf, want, off);
      if (r < 0 && errno == EINTR)
        continue;
      if (r <= 0)
        return agsx_error_set(err, r < 0 ? errno : EIO, "read `%s`", path);
      for (ssize_t w = 0; w < r;) {
        ssize_t k = pwrite(dst, c->buf + w, (size_t)(r - w), off + w);
        if (k < 0 && errno == EINTR)
          continue;
        if (k < 0)
          return agsx_error_set(err, errno, "write `%s`", path);
        w += k;
      }
      off += r;
      c->bytes += (uint64_t)r;
    }
  }
  if (ftruncate(dst, size) < 0)
    return agsx_error_set(err, errno, "write `%s`", path);
  return 0;
}

/* A second name of an inode already copied: the same link in the layer.
 * The first copy's directory is found beneath the layer with no symlink
 * allowed on the way (the layer holds the sandbox's symlinks). */
static int copy_hardlink(struct copy *c, const struct link *l, int dstdir, const char *name,
                         const char *path, agsx_error_t *err) {
  _cleanup_free_ char *dir = xstrdup(l->path);
  char *slash = strrchr(dir, '/');
  const char *base = slash ? slash + 1 : dir;
  if (slash)
    *slash = '\0';
  _cleanup_close_ int pfd =
      slash ? agsx_openat2(c->dstroot, dir, O_PATH | O_DIRECTORY, 0,
                           RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV)
            : fcntl(c->dstroot, F_DUPFD_CLOEXEC, 3);
  if (pfd < 0 || linkat(pfd, base, dstdir, name, 0) < 0)
    return agsx_error_set(err, errno, "link `%s` to `%s`", path, l->path);
  return 0;
}

static int copy_file(struct copy *c, int srcdir, int dstdir, const char *name,
                     const struct stat *st, const char *path, agsx_error_t *err) {
  if (st->st_nlink > 1) {
    for (size_t i = 0; i < c->n_links; i++)
      if (c->links[i].dev == st->st_dev && c->links[i].ino == st->st_ino)
        return copy_hardlink(c, &c->links[i], dstdir, name, path, err);
    c->links = xrealloc(c->links, (c->n_links + 1) * sizeof(*c->links));
    c->links[c->n_links++] = (struct link){st->st_dev, st->st_ino, xstrdup(path)};
  }
  _cleanup_free_ char *what = xasprintf("`%s`", path);
  _cleanup_close_ int src = agsx_check_regular(
      openat(srcdir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | AGSX_O_UNTRUSTED), what, err);
  if (src < 0)
    return -1;
  struct stat now;
  if (fstat(src, &now) < 0 || now.st_ino != st->st_ino)
    return agsx_error_set(err, errno ? errno : EAGAIN, "`%s` changed during the copy", path);
  _cleanup_close_ int dst =
      openat(dstdir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (dst < 0)
    return agsx_error_set(err, errno, "create `%s`", path);
  uint64_t before = c->bytes;
  if (copy_data(c, src, dst, now.st_size, path, err) < 0 || copy_xattrs(src, dst, path, err) < 0)
    return -1;
  if ((uint64_t)now.st_size > c->bytes - before)
    c->holes += (uint64_t)now.st_size - (c->bytes - before);
  if (copy_attrs(c, dst, &now, path, err) < 0)
    return -1;
  return c->to_range ? copy_fcaps(c, src, dst, path, err) : 0;
}

static int copy_symlink(struct copy *c, int srcdir, int dstdir, const char *name,
                        const struct stat *st, const char *path, agsx_error_t *err) {
  char target[4096];
  ssize_t n = readlinkat(srcdir, name, target, sizeof(target) - 1);
  if (n < 0)
    return agsx_error_set(err, errno, "readlink `%s`", path);
  target[n] = '\0';
  struct timespec ts[2] = {st->st_atim, st->st_mtim};
  if (symlinkat(target, dstdir, name) < 0 ||
      fchownat(dstdir, name, shift(c, st->st_uid), shift(c, st->st_gid), AT_SYMLINK_NOFOLLOW) < 0 ||
      utimensat(dstdir, name, ts, AT_SYMLINK_NOFOLLOW) < 0)
    return agsx_error_set(err, errno, "symlink `%s`", path);
  return 0;
}

/* A whiteout (overlay's 0:0 character device) or a FIFO; other devices
 * and sockets cannot be made in a sandbox and are left out. */
static int copy_special(struct copy *c, int dstdir, const char *name, const struct stat *st,
                        const char *path, agsx_error_t *err) {
  bool whiteout = S_ISCHR(st->st_mode) && st->st_rdev == makedev(0, 0);
  if (!whiteout && !S_ISFIFO(st->st_mode))
    return 0;
  if (mknodat(dstdir, name, whiteout ? S_IFCHR : S_IFIFO | 0600, 0) < 0 ||
      fchownat(dstdir, name, shift(c, st->st_uid), shift(c, st->st_gid), AT_SYMLINK_NOFOLLOW) < 0 ||
      (!whiteout && fchmodat(dstdir, name, st->st_mode & 07777, 0) < 0))
    return agsx_error_set(err, errno, "create `%s`", path);
  return 0;
}

static int copy_tree(struct copy *c, int src, int dst, const char *prefix, int depth,
                     agsx_error_t *err);

static int copy_subdir(struct copy *c, int srcdir, int dstdir, const char *name, const char *path,
                       int depth, agsx_error_t *err) {
  _cleanup_close_ int s = openat(srcdir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (s < 0)
    return agsx_error_set(err, errno, "open `%s`", path);
  struct stat st;
  if (fstat(s, &st) < 0)
    return agsx_error_set(err, errno, "`%s`", path);
  if (mkdirat(dstdir, name, 0700) < 0)
    return agsx_error_set(err, errno, "mkdir `%s`", path);
  _cleanup_close_ int d = openat(dstdir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (d < 0)
    return agsx_error_set(err, errno, "open `%s`", path);
  if (copy_xattrs(s, d, path, err) < 0 || copy_tree(c, s, d, path, depth + 1, err) < 0)
    return -1;
  return copy_attrs(c, d, &st, path, err);
}

static int copy_tree(struct copy *c, int src, int dst, const char *prefix, int depth,
                     agsx_error_t *err) {
  if (depth > DEPTH_MAX)
    return agsx_error_set(err, ELOOP, "a tree deeper than %d levels at `%s`", DEPTH_MAX, prefix);
  _cleanup_dir_ DIR *d = agsx_dir_stream(src);
  if (d == NULL)
    return agsx_error_set(err, errno, "read `%s`", *prefix ? prefix : "/");
  for (struct dirent *de; (errno = 0, de = readdir(d));) {
    const char *name = de->d_name;
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
      continue;
    _cleanup_free_ char *path = *prefix ? xasprintf("%s/%s", prefix, name) : xstrdup(name);
    if (!c->to_range && agsx_made(path))
      continue;
    if (copy_check(c, err) < 0)
      return -1;
    struct stat st;
    if (fstatat(src, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
      return agsx_error_set(err, errno, "`%s`", path);
    int r = 0;
    if (S_ISDIR(st.st_mode))
      r = copy_subdir(c, src, dst, name, path, depth, err);
    else if (S_ISREG(st.st_mode))
      r = copy_file(c, src, dst, name, &st, path, err);
    else if (S_ISLNK(st.st_mode))
      r = copy_symlink(c, src, dst, name, &st, path, err);
    else
      r = copy_special(c, dst, name, &st, path, err);
    if (r < 0)
      return -1;
    c->files++;
  }
  if (errno)
    return agsx_error_set(err, errno, "read `%s`", *prefix ? prefix : "/");
  return 0;
}

/* Copies UPPER (a sandbox's upper directory) into STATE/layers/.tmp-<lid>,
 * then, with COMMIT true, renames it to <lid>. */
static int copy_upper(int statefd, int upper, uint32_t base, const char *lid, struct copy *c,
                      agsx_error_t *err) {
  if (mkdirat(statefd, "layers", 0700) < 0 && errno != EEXIST)
    return agsx_error_set(err, errno, "create the layers directory");
  _cleanup_close_ int layers =
      openat(statefd, "layers", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (layers < 0)
    return agsx_error_set(err, errno, "open the layers directory");
  _cleanup_free_ char *tmp = xasprintf(".tmp-%s", lid);
  if (mkdirat(layers, tmp, 0700) < 0) {
    /* A gc removed the empty directory meanwhile: once more. */
    if (errno != ENOENT || mkdirat(statefd, "layers", 0700) < 0 ||
        (agsx_closep(&layers),
         layers = openat(statefd, "layers", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
        mkdirat(layers, tmp, 0700) < 0)
      return agsx_error_set(err, errno, "create a layer");
  }
  c->dstroot = openat(layers, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  int r = c->dstroot < 0 ? agsx_error_set(err, errno, "open a new layer") : 0;
  if (r == 0 && fstat(upper, &st) < 0)
    r = agsx_error_set(err, errno, "the upper directory");
  c->base = base;
  c->buf = xmalloc(COPY_BUF);
  if (r == 0)
    r = copy_tree(c, upper, c->dstroot, "", 0, err);
  if (r == 0 && (r = copy_xattrs(upper, c->dstroot, "/", err)) == 0)
    r = copy_attrs(c, c->dstroot, &st, "/", err);
  free(c->buf);
  c->buf = NULL;
  for (size_t i = 0; i < c->n_links; i++)
    free(c->links[i].path);
  free(c->links);
  c->links = NULL;
  c->n_links = 0;
  agsx_closep(&c->dstroot);
  if (r < 0) {
    _cleanup_error_ agsx_error_t e = NULL;
    agsx_rm_rf_at(layers, tmp, &e);
  }
  return r;
}

int agsx_layer_copy_to_range(int src, int dst, uint32_t base, uint64_t *ret_bytes,
                             agsx_error_t *err) {
  struct copy c = {.base = base, .to_range = true, .dstroot = dst, .statefd = -1};
  struct stat st;
  int r = fstat(src, &st) < 0 ? agsx_error_set(err, errno, "the layer") : 0;
  c.buf = xmalloc(COPY_BUF);
  if (r == 0)
    r = copy_tree(&c, src, dst, "", 0, err);
  if (r == 0 && (r = copy_xattrs(src, dst, "/", err)) == 0)
    r = copy_attrs(&c, dst, &st, "/", err);
  free(c.buf);
  for (size_t i = 0; i < c.n_links; i++)
    free(c.links[i].path);
  free(c.links);
  if (ret_bytes)
    *ret_bytes = c.bytes;
  return r;
}

static int publish_layer(int statefd, const char *lid, agsx_error_t *err) {
  _cleanup_free_ char *tmp = xasprintf("layers/.tmp-%s", lid), *dst = xasprintf("layers/%s", lid);
  if (renameat(statefd, tmp, statefd, dst) < 0)
    return agsx_error_set(err, errno, "publish layer `%s`", lid);
  return 0;
}

static void drop_layer_tmp(int statefd, const char *lid) {
  _cleanup_free_ char *tmp = xasprintf("layers/.tmp-%s", lid);
  _cleanup_error_ agsx_error_t e = NULL;
  agsx_rm_rf_at(statefd, tmp, &e);
}

/* ---- capture ------------------------------------------------------------------------------- */

void agsx_capture_clear(struct agsx_capture *c) {
  agsx_strv_free(c->layers);
  agsx_record_clear(&c->rec);
  memset(c, 0, sizeof(*c));
}

static int not_running(const struct agsx_record *r, agsx_error_t *err) {
  return agsx_error_set_quiet(err, ESRCH, "sandbox `%.12s` is not running", r->id);
}

/* Under the record's lock: the sandbox runs, and FROZEN_BY is written. */
static int mark_frozen_by(int statefd, const char *id, bool set, struct agsx_record *ret,
                          agsx_error_t *err) {
  _cleanup_close_ int lock = agsx_record_lock(statefd, id, err);
  struct agsx_record r;
  if (lock < 0 || agsx_record_read(statefd, id, &r, err) < 0)
    return -1;
  int ret_ = 0;
  if (set && (r.status != AGSX_STATUS_RUNNING || r.stop_request))
    ret_ = not_running(&r, err);
  else {
    if (set)
      agsx_proc_ref_self(&r.frozen_by);
    else
      r.frozen_by = (struct agsx_proc_ref){0};
    ret_ = agsx_record_write(statefd, &r, err);
  }
  if (ret_ == 0 && ret) {
    agsx_record_clear(ret);
    *ret = r;
  } else {
    agsx_record_clear(&r);
  }
  return ret_;
}

/* The copy is only good if nothing ran meanwhile: still running, not
 * being stopped (a stop thaws it), still frozen. */
static bool stayed_frozen(int statefd, const char *id) {
  struct agsx_record r;
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_record_read(statefd, id, &r, &e) < 0)
    return false;
  bool ok = r.status == AGSX_STATUS_RUNNING && !r.stop_request &&
            agsx_proc_ref_alive(&r.supervisor) && agsx_sandbox_is_frozen(id);
  agsx_record_clear(&r);
  return ok;
}

/* The sandbox ended or is being stopped. */
static bool stopping(int statefd, const char *id) {
  struct agsx_record r;
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_record_read(statefd, id, &r, &e) < 0)
    return true;
  bool gone =
      r.status != AGSX_STATUS_RUNNING || r.stop_request || !agsx_proc_ref_alive(&r.supervisor);
  agsx_record_clear(&r);
  return gone;
}

static int capture_locked(int statefd, const char *id, struct agsx_capture *c, agsx_error_t *err) {
  if (agsx_record_read(statefd, id, &c->rec, err) < 0)
    return -1;
  if (c->rec.status != AGSX_STATUS_RUNNING || !agsx_proc_ref_alive(&c->rec.supervisor))
    return not_running(&c->rec, err);
  _cleanup_close_ int tmpfs = agsx_snapshot_open_tmpfs(&c->rec, err);
  if (tmpfs < 0)
    return -1;
  _cleanup_close_ int upper =
      openat(tmpfs, "upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (upper < 0)
    return agsx_error_set(err, errno, "sandbox `%.12s`: open its upper directory", id);
  bool froze = !c->rec.paused;
  int64_t t0 = 0;
  if (froze && (mark_frozen_by(statefd, id, true, &c->rec, err) < 0 ||
                (t0 = agsx_mono_ns(), agsx_sandbox_set_frozen(statefd, id, true, err)) < 0)) {
    _cleanup_error_ agsx_error_t e = NULL;
    mark_frozen_by(statefd, id, false, NULL, &e);
    if (t0 && stopping(statefd, id)) {
      /* A stop thawed what the freeze was freezing: say so, not EBUSY. */
      agsx_error_free(err);
      return agsx_error_set(err, ESRCH, "sandbox `%.12s` was stopped during the freeze", id);
    }
    return -1;
  }
  agsx_sandbox_new_id(c->lid);
  struct copy cp = {.dstroot = -1, .statefd = statefd, .id = id};
  int r = copy_upper(statefd, upper, c->rec.uid_base, c->lid, &cp, err);
  bool ok = stayed_frozen(statefd, id);
  if (froze) {
    _cleanup_error_ agsx_error_t e = NULL;
    if (agsx_sandbox_set_frozen(statefd, id, false, &e) < 0)
      agsx_warn("thaw sandbox `%.12s`: %s", id, e->msg);
    c->frozen_ns = agsx_mono_ns() - t0;
    agsx_error_free(&e);
    mark_frozen_by(statefd, id, false, NULL, &e);
  }
  if (!ok) {
    drop_layer_tmp(statefd, c->lid);
    agsx_error_free(err);
    return agsx_error_set(err, ESRCH, "sandbox `%.12s` was stopped during the copy: nothing kept",
                          id);
  }
  if (r < 0)
    return agsx_error_wrap(err, "sandbox `%.12s`: copy its writable layer", id);
  if (publish_layer(statefd, c->lid, err) < 0) {
    drop_layer_tmp(statefd, c->lid);
    return -1;
  }
  c->bytes = cp.bytes;
  c->files = cp.files;
  c->holes = cp.holes;
  c->layers = agsx_strv_concat(c->rec.layers, NULL);
  agsx_strv_push(&c->layers, c->lid);
  return 0;
}

int agsx_snapshot_capture(int statefd, const char *id, struct agsx_capture *ret,
                          agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  _cleanup_close_ int changes = agsx_sandbox_lock_changes(statefd, id, err);
  if (changes < 0)
    return -1;
  int r = capture_locked(statefd, id, ret, err);
  if (r < 0)
    agsx_capture_clear(ret);
  return r;
}

void agsx_snapshot_thaw_orphan(int statefd, const char *id) {
  struct agsx_record r;
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_record_read(statefd, id, &r, &e) < 0)
    return;
  bool orphan = r.frozen_by.pid > 0 && !agsx_proc_ref_alive(&r.frozen_by);
  bool paused = r.paused;
  agsx_record_clear(&r);
  if (!orphan)
    return;
  /* Its capture died: under the changes lock nobody else is freezing. */
  _cleanup_close_ int changes = agsx_sandbox_lock_changes(statefd, id, &e);
  if (changes < 0)
    return;
  if (!paused && agsx_sandbox_set_frozen(statefd, id, false, &e) < 0)
    agsx_warn("thaw sandbox `%.12s`: %s", id, e->msg);
  agsx_error_free(&e);
  mark_frozen_by(statefd, id, false, NULL, &e);
}

/* ---- snapshots ---------------------------------------------------------------------------- */

void agsx_snapshot_clear(struct agsx_snapshot *s) {
  free(s->name);
  agsx_strv_free(s->layers);
  memset(s, 0, sizeof(*s));
}

void agsx_snapshot_list_free(struct agsx_snapshot *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    agsx_snapshot_clear(&v[i]);
  free(v);
}

static int open_snapdir(int statefd, const char *id, bool create, agsx_error_t *err) {
  _cleanup_free_ char *path = xasprintf("%s/snapshots", id);
  if (create && mkdirat(statefd, path, 0700) < 0 && errno != EEXIST)
    return agsx_error_set(err, errno, "create the snapshots of `%.12s`", id);
  int fd = openat(statefd, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno != ENOENT)
    return agsx_error_set(err, errno, "open the snapshots of `%.12s`", id);
  if (fd < 0)
    errno = ENOENT;
  return fd;
}

static char *snapshot_json(const struct agsx_snapshot *s, size_t *ret_len) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "name", s->name);
  agsx_json_kv_int(g, "created", s->created);
  agsx_json_kv_int(g, "created_ns", s->created_ns);
  agsx_json_kv_int(g, "bytes", (int64_t)s->bytes);
  agsx_json_kv_int(g, "files", (int64_t)s->files);
  agsx_json_kv_int(g, "holes", (int64_t)s->holes);
  agsx_json_key(g, "layers");
  yajl_gen_array_open(g);
  for (size_t i = 0; s->layers && s->layers[i]; i++)
    agsx_json_str(g, s->layers[i]);
  yajl_gen_array_close(g);
  yajl_gen_map_close(g);
  return agsx_json_gen_steal(g, ret_len);
}

static int snapshot_read(int dirfd, const char *file, struct agsx_snapshot *s, agsx_error_t *err) {
  memset(s, 0, sizeof(*s));
  _cleanup_free_ char *buf = NULL;
  size_t len;
  if (agsx_read_file_at(dirfd, file, SNAPSHOT_JSON_MAX, &buf, &len, err) < 0)
    return -1;
  _cleanup_json_ yajl_val v = agsx_json_parse(buf, len, SNAPSHOT_JSON_MAX, err);
  if (v == NULL)
    return -1;
  const char *name = agsx_json_get_string(v, "name");
  yajl_val a = agsx_json_get_array(v, "layers");
  if (!agsx_snapshot_name_is_valid(name) || a == NULL)
    return agsx_error_set(err, EINVAL, "snapshot `%s`: not a snapshot record", file);
  s->name = xstrdup(name);
  int64_t n = 0;
  agsx_json_get_int64(v, "created", &s->created);
  agsx_json_get_int64(v, "created_ns", &s->created_ns);
  if (agsx_json_get_int64(v, "bytes", &n))
    s->bytes = (uint64_t)n;
  if (agsx_json_get_int64(v, "files", &n))
    s->files = (uint64_t)n;
  if (agsx_json_get_int64(v, "holes", &n))
    s->holes = (uint64_t)n;
  s->layers = xzalloc((a->u.array.len + 1) * sizeof(char *));
  for (size_t i = 0, k = 0; i < a->u.array.len; i++) {
    yajl_val e = a->u.array.values[i];
    if (!YAJL_IS_STRING(e) || !agsx_snapshot_layer_id_is_valid(e->u.string)) {
      agsx_snapshot_clear(s);
      return agsx_error_set(err, EINVAL, "snapshot `%s`: bad layer", file);
    }
    s->layers[k++] = xstrdup(e->u.string);
  }
  return 0;
}

static int cmp_created(const void *a, const void *b) {
  const struct agsx_snapshot *x = a, *y = b;
  int64_t a_ = x->created_ns ? x->created_ns : x->created * 1000000000LL;
  int64_t b_ = y->created_ns ? y->created_ns : y->created * 1000000000LL;
  return a_ < b_ ? -1 : a_ > b_ ? 1 : strcmp(x->name, y->name);
}

/* Every snapshot of ID, running or not (gc and the end use it too). */
static int list_any(int statefd, const char *id, struct agsx_snapshot **ret, size_t *ret_n,
                    agsx_error_t *err) {
  *ret = NULL;
  *ret_n = 0;
  _cleanup_close_ int dir = open_snapdir(statefd, id, false, err);
  if (dir < 0)
    return errno == ENOENT ? 0 : -1;
  _cleanup_dir_ DIR *d = agsx_dir_stream(dir);
  if (d == NULL)
    return agsx_error_set(err, errno, "read the snapshots of `%.12s`", id);
  struct agsx_snapshot *v = NULL;
  size_t n = 0;
  for (struct dirent *de; (de = readdir(d));) {
    size_t l = strlen(de->d_name);
    if (l < 6 || strcmp(de->d_name + l - 5, ".json") != 0 || de->d_name[0] == '.')
      continue;
    struct agsx_snapshot s;
    _cleanup_error_ agsx_error_t e = NULL;
    if (snapshot_read(dir, de->d_name, &s, &e) < 0) {
      agsx_warn("sandbox `%.12s`: %s", id, e->msg);
      continue;
    }
    v = xrealloc(v, (n + 1) * sizeof(*v));
    v[n++] = s;
  }
  if (n)
    qsort(v, n, sizeof(*v), cmp_created);
  *ret = v;
  *ret_n = n;
  return 0;
}

static int require_running(int statefd, const char *id, struct agsx_record *r, agsx_error_t *err) {
  if (agsx_record_read(statefd, id, r, err) < 0)
    return -1;
  if (r->status != AGSX_STATUS_RUNNING) {
    int rc = not_running(r, err);
    agsx_record_clear(r);
    return rc;
  }
  return 0;
}

int agsx_snapshot_list(int statefd, const char *id, struct agsx_snapshot **ret, size_t *ret_n,
                       agsx_error_t *err) {
  struct agsx_record r;
  *ret = NULL;
  *ret_n = 0;
  if (require_running(statefd, id, &r, err) < 0)
    return -1;
  agsx_record_clear(&r);
  return list_any(statefd, id, ret, ret_n, err);
}

int agsx_snapshot_get(int statefd, const char *id, const char *name, struct agsx_snapshot *ret,
                      agsx_error_t *err) {
  if (!agsx_snapshot_name_is_valid(name))
    return agsx_error_set(err, EINVAL, "invalid snapshot name `%s`", name);
  struct agsx_record r;
  if (require_running(statefd, id, &r, err) < 0)
    return -1;
  agsx_record_clear(&r);
  _cleanup_close_ int dir = open_snapdir(statefd, id, false, err);
  _cleanup_free_ char *file = xasprintf("%s.json", name);
  if (dir < 0 || faccessat(dir, file, F_OK, AT_SYMLINK_NOFOLLOW) < 0)
    return agsx_error_set_quiet(err, ENOENT, "sandbox `%.12s` has no snapshot `%s`", id, name);
  return snapshot_read(dir, file, ret, err);
}

/* The first free snap-N. */
static char *default_name(const struct agsx_snapshot *v, size_t n) {
  for (unsigned k = 1;; k++) {
    char *name = xasprintf("snap-%u", k);
    bool taken = false;
    for (size_t i = 0; i < n && !taken; i++)
      taken = strcmp(v[i].name, name) == 0;
    if (!taken)
      return name;
    free(name);
  }
}

int agsx_snapshot_create(int statefd, const char *id, const char *name, struct agsx_snapshot *ret,
                         int64_t *ret_frozen_ns, agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  if (name && !agsx_snapshot_name_is_valid(name))
    return agsx_error_set(err, EINVAL,
                          "invalid snapshot name `%s`: letters, digits and _.- (at most 64, "
                          "starting with a letter or digit)",
                          name);
  _cleanup_close_ int changes = agsx_sandbox_lock_changes(statefd, id, err);
  if (changes < 0)
    return -1;
  struct agsx_snapshot *v = NULL;
  size_t n = 0;
  if (list_any(statefd, id, &v, &n, err) < 0)
    return -1;
  int r = 0;
  _cleanup_free_ char *nm = name ? xstrdup(name) : default_name(v, n);
  for (size_t i = 0; i < n && r == 0; i++)
    if (strcmp(v[i].name, nm) == 0)
      r = agsx_error_set_quiet(err, EEXIST, "sandbox `%.12s` has a snapshot `%s` already", id, nm);
  if (r == 0 && n >= AGSX_SNAPSHOTS_MAX)
    r = agsx_error_set_quiet(err, ENOSPC, "sandbox `%.12s` has %d snapshots, the most it may keep",
                             id, AGSX_SNAPSHOTS_MAX);
  agsx_snapshot_list_free(v, n);
  if (r < 0)
    return -1;
  struct agsx_capture c;
  memset(&c, 0, sizeof(c));
  if (capture_locked(statefd, id, &c, err) < 0) {
    agsx_capture_clear(&c);
    return -1;
  }
  ret->name = steal_ptr(&nm);
  ret->created_ns = agsx_now_ns();
  ret->created = ret->created_ns / 1000000000LL;
  ret->bytes = c.bytes;
  ret->files = c.files;
  ret->holes = c.holes;
  ret->layers = steal_ptr(&c.layers);
  *ret_frozen_ns = c.frozen_ns;
  size_t len;
  _cleanup_free_ char *json = snapshot_json(ret, &len);
  _cleanup_free_ char *file = xasprintf("%s.json", ret->name);
  _cleanup_close_ int dir = open_snapdir(statefd, id, true, err);
  /* Listed only when complete, and only while the sandbox runs: one that
   * ended meanwhile has its snapshots dropped (agsx_snapshot_drop_all). */
  _cleanup_close_ int lock = dir < 0 ? -1 : agsx_record_lock(statefd, id, err);
  struct agsx_record rec;
  r = lock < 0 ? -1 : require_running(statefd, id, &rec, err);
  if (r == 0) {
    agsx_record_clear(&rec);
    r = agsx_write_file_atomic(dir, file, json, len, 0600, err);
  }
  if (r < 0) {
    _cleanup_free_ char *l = xasprintf("layers/%s", c.lid);
    _cleanup_error_ agsx_error_t e = NULL;
    agsx_rm_rf_at(statefd, l, &e);
    agsx_snapshot_clear(ret);
    if (stopping(statefd, id)) {
      /* Its end removed the snapshots directory under the write. */
      agsx_error_free(err);
      agsx_error_set_quiet(err, ESRCH, "sandbox `%.12s` ended during the snapshot: nothing kept",
                           id);
    }
  }
  agsx_capture_clear(&c);
  return r;
}

int agsx_snapshot_remove(int statefd, const char *id, const char *name, agsx_error_t *err) {
  struct agsx_snapshot s;
  _cleanup_close_ int changes = agsx_sandbox_lock_changes(statefd, id, err);
  if (changes < 0 || agsx_snapshot_get(statefd, id, name, &s, err) < 0)
    return -1;
  agsx_snapshot_clear(&s);
  _cleanup_close_ int dir = open_snapdir(statefd, id, false, err);
  _cleanup_free_ char *file = xasprintf("%s.json", name);
  if (dir < 0 || unlinkat(dir, file, 0) < 0)
    return agsx_error_set(err, errno, "remove snapshot `%s`", name);
  agsx_snapshot_layers_gc(statefd, false, NULL, NULL);
  return 0;
}

void agsx_snapshot_drop_all(int statefd, const char *id) {
  _cleanup_free_ char *path = xasprintf("%s/snapshots", id);
  _cleanup_error_ agsx_error_t e = NULL;
  if (faccessat(statefd, path, F_OK, AT_SYMLINK_NOFOLLOW) == 0 &&
      agsx_rm_rf_at(statefd, path, &e) < 0)
    agsx_warn("%s", e->msg);
  if (faccessat(statefd, "layers", F_OK, AT_SYMLINK_NOFOLLOW) == 0)
    agsx_snapshot_layers_gc(statefd, false, NULL, NULL);
}

/* ---- rollback --------------------------------------------------------------------------------- */

#define ROLLBACK_WAIT_MS 30000

/* Waits for the supervisor's answer to request SEQ. */
static int await_restart(int statefd, const char *id, int64_t seq, agsx_error_t *err) {
  int64_t deadline = agsx_mono_ns() + ROLLBACK_WAIT_MS * 1000000LL;
  for (;;) {
    struct agsx_record r;
    if (agsx_record_read(statefd, id, &r, err) < 0)
      return -1;
    bool done = r.restarted_seq >= seq, running = r.status == AGSX_STATUS_RUNNING;
    _cleanup_free_ char *why = r.restart_error ? xstrdup(r.restart_error) : NULL;
    bool alive = agsx_proc_ref_alive(&r.supervisor);
    agsx_record_clear(&r);
    if (done && why)
      return agsx_error_set(err, EIO, "sandbox `%.12s`: rollback: %s", id, why);
    if (done)
      return 0;
    if (!running || !alive)
      return agsx_error_set(err, ESRCH, "sandbox `%.12s` ended during the rollback", id);
    if (agsx_mono_ns() > deadline)
      return agsx_error_set(err, ETIMEDOUT, "sandbox `%.12s`: its supervisor did not roll back",
                            id);
    struct timespec ts = {0, 10 * 1000000L};
    nanosleep(&ts, NULL);
  }
}

int agsx_snapshot_rollback(int statefd, const char *id, const char *name, agsx_error_t *err) {
  _cleanup_close_ int changes = agsx_sandbox_lock_changes(statefd, id, err);
  struct agsx_snapshot s;
  if (changes < 0 || agsx_snapshot_get(statefd, id, name, &s, err) < 0)
    return -1;
  int64_t seq = 0;
  struct agsx_proc_ref sup = {0};
  {
    _cleanup_close_ int lock = agsx_record_lock(statefd, id, err);
    struct agsx_record r;
    int rc = lock < 0 ? -1 : require_running(statefd, id, &r, err);
    if (rc == 0) {
      seq = (r.restart_seq > r.restarted_seq ? r.restart_seq : r.restarted_seq) + 1;
      r.restart_seq = seq;
      agsx_strv_free(r.restart_layers);
      r.restart_layers = agsx_strv_concat(s.layers, NULL);
      agsx_proc_ref_self(&r.restart_by);
      sup = r.supervisor;
      if (rc == 0)
        rc = agsx_record_write(statefd, &r, err);
      agsx_record_clear(&r);
    }
    agsx_snapshot_clear(&s);
    if (rc < 0)
      return -1;
  }
  int r = agsx_proc_ref_signal(&sup, AGSX_SIG_CONTROL, AGSX_CONTROL_RELOAD);
  if (r < 0)
    return agsx_error_set(err, -r, "sandbox `%.12s`: tell its supervisor", id);
  return await_restart(statefd, id, seq, err);
}

/* ---- fork ---------------------------------------------------------------------------------------- */

void agsx_forks_free(struct agsx_fork *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(v[i].name);
  free(v);
}

static int no_pull(void *data, const char *image, agsx_error_t *err) {
  (void)data;
  return agsx_error_set(err, ENOENT, "image `%s` is no longer in the store", image);
}

/* The source's published ports with new host ports, as -p with host port
 * 0 (same host address, sandbox port and protocol): the source keeps its
 * host ports, and each fork gets its own, picked by the kernel. */
static struct agsx_port *fork_ports(const struct agsx_record *r) {
  if (r->n_ports == 0)
    return NULL;
  struct agsx_port *v = xzalloc(r->n_ports * sizeof(*v));
  for (size_t i = 0; i < r->n_ports; i++) {
    v[i] = r->ports[i];
    if (v[i].host.ss_family == AF_INET)
      ((struct sockaddr_in *)&v[i].host)->sin_port = 0;
    else if (v[i].host.ss_family == AF_INET6)
      ((struct sockaddr_in6 *)&v[i].host)->sin6_port = 0;
  }
  return v;
}

/* The source's named volumes (its record's NAME:/path[:ro]), mounted by
 * each fork too: a volume is shared, not copied. */
static size_t fork_volumes(const struct agsx_record *r, struct agsx_bind **ret) {
  size_t n = agsx_strv_len(r->volumes);
  *ret = n ? xzalloc(n * sizeof(**ret)) : NULL;
  for (size_t i = 0; i < n; i++) {
    char *s = xstrdup(r->volumes[i]), *colon = strchr(s, ':');
    size_t len = strlen(s);
    bool ro = len > 3 && strcmp(s + len - 3, ":ro") == 0 && colon != s + len - 3;
    if (ro)
      s[len - 3] = '\0';
    if (colon)
      *colon = '\0';
    (*ret)[i] = (struct agsx_bind){
        .src = s, .dst = xstrdup(colon ? colon + 1 : ""), .ro = ro, .volume = true};
  }
  return n;
}

static void fork_volumes_free(struct agsx_bind *v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(v[i].src);
    free(v[i].dst);
  }
  free(v);
}

static int fork_one(const struct agsx_fork_opts *o, const struct agsx_capture *c, const char *name,
                    struct agsx_fork *ret, agsx_error_t *err) {
  const struct agsx_record *r = &c->rec;
  _cleanup_free_ struct agsx_port *ports = fork_ports(r);
  struct agsx_bind *binds = NULL;
  size_t n_binds = fork_volumes(r, &binds);
  bool host = r->image_digest == NULL && r->image && strcmp(r->image, "host") == 0;
  double cpus = r->cpu_quota_us ? (double)r->cpu_quota_us / AGSX_CGROUP_CPU_PERIOD_US : 0;
  struct agsx_run_spec spec = {
      .root = o->root,
      .state = o->state,
      .image = host ? "host" : r->image_digest,
      .image_name = host ? NULL : r->image,
      .cmd = o->cmd,
      .argv = o->cmd || r->idle ? NULL : r->argv,
      /* An API sandbox: no command (records before "idle" have an empty argv). */
      .idle = !o->cmd && (r->idle || agsx_strv_len(r->argv) == 0),
      .pull = "never",
      .pull_image = no_pull,
      .env = r->env,
      .user = r->user,
      .workdir = r->cwd,
      .name = name,
      .seccomp = r->seccomp && strcmp(r->seccomp, "default") != 0 ? r->seccomp : NULL,
      .new_privs = r->new_privs,
      .network = r->network,
      .timeout = o->timeout ? o->timeout : r->timeout,
      .memory = r->memory,
      .pids = r->pids,
      .disk = r->disk,
      .cpus = cpus,
      .extra_layers = c->layers,
      .labels = r->labels,
      .pause_on_timeout = r->pause_on_timeout,
      .rm = r->rm,
      .ports = ports,
      .n_ports = r->n_ports,
      .binds = binds,
      .n_binds = n_binds,
  };
  struct agsx_lifecycle *lc = NULL;
  struct agsx_run_started st;
  int rc = agsx_lifecycle_create(&spec, &lc, err);
  if (rc == 0)
    rc = agsx_lifecycle_detach(lc, &st, err);
  agsx_lifecycle_free(lc);
  fork_volumes_free(binds, n_binds);
  if (rc < 0)
    return -1;
  memcpy(ret->id, st.id, sizeof(ret->id));
  ret->name = name ? xstrdup(name) : NULL;
  return 0;
}

int agsx_sandbox_fork(const struct agsx_fork_opts *o, struct agsx_fork **ret, size_t *ret_n,
                      int64_t *ret_frozen_ns, agsx_error_t *err) {
  unsigned count = o->count ? o->count : 1;
  *ret = NULL;
  *ret_n = 0;
  *ret_frozen_ns = 0;
  if (count > AGSX_FORK_MAX)
    return agsx_error_set(err, EINVAL, "at most %d forks at once", AGSX_FORK_MAX);
  if (o->name && !agsx_name_is_valid(o->name))
    return agsx_error_set(err, EINVAL, "invalid name `%s`", o->name);
  _cleanup_close_ int statefd = agsx_state_open(o->state, false, err);
  if (statefd < 0)
    return -1;
  struct agsx_capture c;
  if (agsx_snapshot_capture(statefd, o->source, &c, err) < 0)
    return -1;
  *ret_frozen_ns = c.frozen_ns;
  int rc = 0;
  struct agsx_fork *v = xzalloc(count * sizeof(*v));
  size_t n = 0;
  for (unsigned i = 0; rc == 0 && i < count; i++) {
    _cleanup_free_ char *name =
        o->name ? (count > 1 ? xasprintf("%s-%u", o->name, i + 1) : xstrdup(o->name)) : NULL;
    rc = fork_one(o, &c, name, &v[n], err);
    if (rc == 0)
      n++;
  }
  if (n == 0) {
    /* Nobody uses the layer. */
    _cleanup_free_ char *l = xasprintf("layers/%s", c.lid);
    _cleanup_error_ agsx_error_t e = NULL;
    agsx_rm_rf_at(statefd, l, &e);
  }
  agsx_capture_clear(&c);
  *ret = v;
  *ret_n = n;
  return rc;
}

/* ---- holes ----------------------------------------------------------------------------------- */

static void tree_holes(int dirfd, int depth, uint64_t *holes) {
  _cleanup_dir_ DIR *d = depth > DEPTH_MAX ? NULL : agsx_dir_stream(dirfd);
  for (struct dirent *de; d && (de = readdir(d));) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    struct stat st;
    if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
      continue;
    if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > (uint64_t)st.st_blocks * 512)
      *holes += (uint64_t)st.st_size - (uint64_t)st.st_blocks * 512;
    if (!S_ISDIR(st.st_mode))
      continue;
    _cleanup_close_ int sub =
        openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub >= 0)
      tree_holes(sub, depth + 1, holes);
  }
}

uint64_t agsx_snapshot_layers_holes(int statefd, char *const *lids) {
  uint64_t holes = 0;
  for (size_t i = 0; lids && lids[i]; i++) {
    _cleanup_free_ char *p = xasprintf("layers/%s", lids[i]);
    _cleanup_close_ int fd = openat(statefd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0)
      tree_holes(fd, 0, &holes);
  }
  return holes;
}

/* ---- the layers' gc ------------------------------------------------------------------------ */

static void add_all(struct agsx_strset *set, char *const *v) {
  for (size_t i = 0; v && v[i]; i++)
    agsx_strset_add(set, v[i]);
}

void agsx_snapshot_layers_gc(int statefd, bool dry_run,
                             void (*report)(const char *what, void *data), void *data) {
  _cleanup_close_ int layers =
      openat(statefd, "layers", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (layers < 0)
    return;
  /* A capture publishes its layer, then the record or snapshot naming it:
   * younger layers than the grace are left alone. */
  /* Layers only ended sandboxes name were in use and are done with: no
   * grace for them. */
  _cleanup_strset_ struct agsx_strset used = {0}, done = {0};
  _cleanup_strv_ char **ids = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_state_list(statefd, &ids, &e) < 0)
    return;
  for (size_t i = 0; ids[i]; i++) {
    struct agsx_record r;
    _cleanup_error_ agsx_error_t e2 = NULL;
    if (agsx_record_read(statefd, ids[i], &r, &e2) < 0)
      continue;
    if (r.status == AGSX_STATUS_RUNNING) {
      add_all(&used, r.layers);
      struct agsx_snapshot *v;
      size_t n;
      if (list_any(statefd, ids[i], &v, &n, &e2) == 0)
        for (size_t k = 0; k < n; k++)
          add_all(&used, v[k].layers);
      agsx_snapshot_list_free(v, n);
    } else {
      add_all(&done, r.layers);
    }
    agsx_record_clear(&r);
  }
  int64_t now = agsx_now_ns() / 1000000000LL, grace = agsx_state_gc_min_age();
  _cleanup_dir_ DIR *d = agsx_dir_stream(layers);
  for (struct dirent *de; d && (de = readdir(d));) {
    const char *name = de->d_name;
    const char *lid = strncmp(name, ".tmp-", 5) == 0 ? name + 5 : name;
    struct stat st;
    /* ctime: the copy sets the layer root's mtime to the upper's. */
    if (!agsx_snapshot_layer_id_is_valid(lid) || agsx_strset_has(&used, lid) ||
        fstatat(layers, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        (now - st.st_ctime < grace && !agsx_strset_has(&done, lid)))
      continue;
    if (report) {
      _cleanup_free_ char *what =
          xasprintf("layer `%s`%s", lid, lid != name ? " (unfinished)" : "");
      report(what, data);
    }
    _cleanup_error_ agsx_error_t e3 = NULL;
    if (!dry_run && agsx_rm_rf_at(layers, name, &e3) < 0)
      agsx_warn("%s", e3->msg);
  }
  if (!dry_run)
    unlinkat(statefd, "layers", AT_REMOVEDIR); /* only when empty */
}
