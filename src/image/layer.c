/* agsx — layer: safe unpacking of one OCI layer.
 *
 * Two halves. The source decompresses (zlib, libzstd or nothing) and hands
 * the tar stream to libarchive through a read callback, hashing and counting
 * every uncompressed byte on the way: that is the diff_id and the
 * decompression-bomb guard. The unpacker then creates each entry itself,
 * never with archive_write_disk: the parent directory is resolved inside the
 * destination with openat2(RESOLVE_IN_ROOT), the final component is created
 * with *at() calls that do not follow symlinks. lim->max_depth bounds both
 * the components of a name and the levels of every directory made, counted
 * on disk (see real_depth()). */
#include "config.h"

#include "image/layer.h"
#include "host/rootless.h"

#include "image/tarentry.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <zlib.h>
#ifdef HAVE_ZSTD
#include <zstd.h>
#endif

#define BUF_SIZE ((size_t)1 << 20) /* input and output chunks: few, large reads and writes */
#define ID_MAX 65535               /* the sandbox maps ids 0-65535 only */
#define ID_OVERFLOW 65534
#define WHITEOUT_PREFIX ".wh."
#define WHITEOUT_META_PREFIX ".wh..wh."
#define WHITEOUT_OPAQUE ".wh..wh..opq"

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define SPACE_CHECK_EVERY ((uint64_t)4 << 20)

void agsx_layer_limits_default(struct agsx_layer_limits *lim) {
  *lim = (struct agsx_layer_limits){
      .max_bytes = (uint64_t)64 << 30,
      .max_entries = 2000000,
      .max_path = 4096,
      .max_depth = 256,
  };
  const char *env = getenv("AGSX_MAX_LAYER_SIZE");
  if (env == NULL || *env == '\0')
    return;
  _cleanup_error_ agsx_error_t err = NULL;
  uint64_t bytes;
  if (agsx_parse_size(env, &bytes, &err) < 0)
    agsx_warn("ignoring AGSX_MAX_LAYER_SIZE: %s", err->msg);
  else
    lim->max_bytes = bytes;
}

/* ---- source: decompression, hashing, counting ------------------------------------------- */

struct source {
  int fd; /* -1: read from mem */
  const uint8_t *mem;
  size_t mem_len, mem_pos;
  uint8_t *inbuf;    /* fd input */
  const uint8_t *in; /* unconsumed input */
  size_t in_len;
  bool in_eof;
  enum agsx_compression comp;
  z_stream z;
  bool z_ready, z_member_done;
#ifdef HAVE_ZSTD
  ZSTD_DStream *zs;
  size_t zs_last; /* last ZSTD_decompressStream result: 0 at a frame boundary */
#endif
  uint8_t *out;
  agsx_sha256 *hash;
  uint64_t total, max_bytes;
  int space_fd; /* -1, or the destination whose free space is watched */
  uint64_t space_reserve, space_next;
  agsx_error_t err; /* set by the read callback, handed to the caller */
};

static void source_done(struct source *s) {
  if (s->z_ready)
    inflateEnd(&s->z);
#ifdef HAVE_ZSTD
  ZSTD_freeDStream(s->zs);
#endif
  free(s->inbuf);
  free(s->out);
  agsx_sha256_free(s->hash);
  agsx_error_free(&s->err);
}

/* Hands the read callback's error to the caller. Returns -1. */
static int source_error(struct source *s, agsx_error_t *err) {
  if (err != NULL && *err == NULL)
    *err = steal_ptr(&s->err);
  return -1;
}

static int input_fill(struct source *s) {
  if (s->in_len > 0 || s->in_eof)
    return 0;
  if (s->fd < 0) {
    s->in = s->mem + s->mem_pos;
    s->in_len = MIN(s->mem_len - s->mem_pos, BUF_SIZE);
    s->mem_pos += s->in_len;
  } else {
    ssize_t n = agsx_read_all(s->fd, s->inbuf, BUF_SIZE);
    if (n < 0)
      return agsx_error_set(&s->err, errno, "read layer");
    s->in = s->inbuf;
    s->in_len = (size_t)n;
  }
  s->in_eof = s->in_len == 0;
  return 0;
}

static ssize_t read_plain(struct source *s, const void **ret) {
  if (input_fill(s) < 0)
    return -1;
  size_t n = s->in_len;
  *ret = s->in;
  s->in_len = 0;
  return (ssize_t)n;
}

static int zlib_error(struct source *s, int r) {
  const char *what = s->z.msg ? s->z.msg : zError(r);
  return agsx_error_set(&s->err, 0, "corrupt gzip data: %s", what);
}

/* Inflates into s->out until it is full or the input ends. A layer may be
 * several gzip members back to back (pigz, appended streams): each member
 * end resets the inflater and decoding goes on. */
static ssize_t read_gzip(struct source *s, const void **ret) {
  s->z.next_out = s->out;
  s->z.avail_out = (uInt)BUF_SIZE;
  while (s->z.avail_out > 0) {
    if (s->z.avail_in == 0) {
      s->in_len = 0;
      if (input_fill(s) < 0)
        return -1;
      if (s->in_eof) {
        if (!s->z_member_done)
          return agsx_error_set(&s->err, 0, "corrupt gzip data: unexpected end of stream");
        break;
      }
      s->z.next_in = (Bytef *)s->in;
      s->z.avail_in = (uInt)s->in_len;
    }
    if (s->z_member_done && inflateReset(&s->z) != Z_OK)
      return zlib_error(s, Z_STREAM_ERROR);
    s->z_member_done = false;
    int r = inflate(&s->z, Z_NO_FLUSH);
    if (r == Z_STREAM_END)
      s->z_member_done = true;
    else if (r == Z_BUF_ERROR && s->z.avail_in > 0 && s->z.avail_out > 0)
      return zlib_error(s, r); /* no progress with room on both sides: never loop on it */
    else if (r != Z_OK && r != Z_BUF_ERROR)
      return zlib_error(s, r);
  }
  *ret = s->out;
  return (ssize_t)(BUF_SIZE - s->z.avail_out);
}

#ifdef HAVE_ZSTD
/* libzstd decodes concatenated frames (and skips skippable ones) by itself;
 * the stream is complete only when input ends on a frame boundary. */
static ssize_t read_zstd(struct source *s, const void **ret) {
  ZSTD_outBuffer out = {.dst = s->out, .size = BUF_SIZE};
  while (out.pos < out.size) {
    if (s->in_len == 0 && input_fill(s) < 0)
      return -1;
    if (s->in_eof && s->zs_last == 0)
      break;
    ZSTD_inBuffer in = {.src = s->in, .size = s->in_len};
    size_t before = out.pos;
    size_t r = ZSTD_decompressStream(s->zs, &out, &in);
    if (ZSTD_isError(r))
      return agsx_error_set(&s->err, 0, "corrupt zstd data: %s", ZSTD_getErrorName(r));
    s->in += in.pos;
    s->in_len -= in.pos;
    s->zs_last = r;
    if (s->in_eof && r != 0 && out.pos == before)
      return agsx_error_set(&s->err, 0, "corrupt zstd data: unexpected end of stream");
  }
  *ret = s->out;
  return (ssize_t)out.pos;
}
#endif

static int account(struct source *s, const void *buf, size_t n) {
  if (n > s->max_bytes - s->total)
    return agsx_error_set(&s->err, 0, "decompressed size exceeds the limit of %" PRIu64 " bytes",
                          s->max_bytes);
  s->total += n;
  agsx_sha256_update(s->hash, buf, n);
  if (s->space_fd >= 0 && s->space_reserve > 0 && s->total >= s->space_next) {
    s->space_next = s->total + SPACE_CHECK_EVERY;
    struct statvfs sv;
    if (fstatvfs(s->space_fd, &sv) < 0)
      return agsx_error_set(&s->err, errno, "statvfs");
    uint64_t avail = (uint64_t)sv.f_bavail * sv.f_frsize;
    if (avail < s->space_reserve)
      return agsx_error_set(&s->err, 0,
                            "the image store is running out of space (%" PRIu64
                            " bytes free, %" PRIu64 " kept in reserve)",
                            avail, s->space_reserve);
  }
  return 0;
}

/* The next chunk of the uncompressed stream: > 0 bytes, 0 at its end, -1
 * with s->err set. */
static ssize_t source_next(struct source *s, const void **ret) {
  ssize_t n;
  if (s->err != NULL)
    return -1;
  switch (s->comp) {
  case AGSX_COMPRESSION_GZIP: n = read_gzip(s, ret); break;
#ifdef HAVE_ZSTD
  case AGSX_COMPRESSION_ZSTD: n = read_zstd(s, ret); break;
#endif
  default: n = read_plain(s, ret); break;
  }
  if (n > 0 && account(s, *ret, (size_t)n) < 0)
    return -1;
  return n;
}

static la_ssize_t source_read_cb(struct archive *a, void *data, const void **ret) {
  struct source *s = data;
  ssize_t n = source_next(s, ret);
  if (n < 0)
    archive_set_error(a, agsx_error_errno(&s->err), "%s", s->err->msg);
  return n;
}

static int sniff(struct source *s, agsx_error_t *err) {
  if (input_fill(s) < 0)
    return source_error(s, err);
  static const uint8_t gz[] = {0x1f, 0x8b}, zst[] = {0x28, 0xb5, 0x2f, 0xfd};
  s->comp = AGSX_COMPRESSION_NONE;
  if (s->in_len >= sizeof(gz) && memcmp(s->in, gz, sizeof(gz)) == 0)
    s->comp = AGSX_COMPRESSION_GZIP;
  else if (s->in_len >= sizeof(zst) && memcmp(s->in, zst, sizeof(zst)) == 0)
    s->comp = AGSX_COMPRESSION_ZSTD;
  return 0;
}

static int source_start(struct source *s, enum agsx_compression comp, agsx_error_t *err) {
  if ((unsigned)comp > AGSX_COMPRESSION_AUTO)
    return agsx_error_set(err, 0, "unknown compression %d", (int)comp);
  s->comp = comp;
  if (s->fd >= 0)
    s->inbuf = xmalloc(BUF_SIZE);
  if (comp == AGSX_COMPRESSION_AUTO && sniff(s, err) < 0)
    return -1;
  s->hash = agsx_sha256_new();
  if (s->comp == AGSX_COMPRESSION_GZIP) {
    /* 16 + MAX_WBITS: gzip wrapper only, no raw deflate or zlib. */
    if (inflateInit2(&s->z, 16 + MAX_WBITS) != Z_OK)
      return agsx_error_set(err, 0, "gzip: cannot initialise zlib (out of memory)");
    s->z_ready = true;
    s->z.next_in = (Bytef *)s->in; /* what sniff() read */
    s->z.avail_in = (uInt)s->in_len;
    s->out = xmalloc(BUF_SIZE);
  } else if (s->comp == AGSX_COMPRESSION_ZSTD) {
#ifdef HAVE_ZSTD
    s->zs = ZSTD_createDStream();
    if (s->zs == NULL || ZSTD_isError(ZSTD_initDStream(s->zs)))
      return agsx_error_set(err, 0, "zstd: cannot initialise the decoder");
    s->zs_last = 1; /* an empty input is not a complete frame */
    s->out = xmalloc(BUF_SIZE);
#else
    return agsx_error_set(err, 0, "zstd-compressed layer, but agsx was built without zstd");
#endif
  }
  return 0;
}

/* The hash must cover every byte of the stream, including the tar padding
 * that follows the end-of-archive blocks. */
static int source_drain(struct source *s, agsx_error_t *err) {
  const void *buf;
  ssize_t n;
  while ((n = source_next(s, &buf)) > 0)
    ;
  return n < 0 ? source_error(s, err) : 0;
}

/* ---- names ------------------------------------------------------------------------------ */

/* The shared tar-entry policy (tarentry.h) in its strict form, within LIM:
 * a layer's names are exactly what overlayfs will show. */
static void layer_policy(const struct agsx_layer_limits *lim, struct agsx_tarentry_policy *ret) {
  agsx_tarentry_policy_default(ret);
  ret->max_path = lim->max_path;
  ret->max_depth = lim->max_depth;
  ret->max_entries = lim->max_entries;
}

/* ---- unpacker --------------------------------------------------------------------------- */

struct dir_time {
  char *path;
  size_t depth, seq;
  struct timespec ts[2];
};

struct unpacker {
  int destfd;
  const struct agsx_layer_limits *lim;
  struct source *src;
  struct archive *a;
  struct agsx_tarentry_policy policy;
  struct agsx_tar_reader rd;
  /* The parent of the previous entry, reused while nothing was removed:
   * consecutive entries mostly share a directory. */
  char *cached_parent;
  int cached_fd;
  size_t cached_depth;
  dev_t root_dev; /* the destination, where depths are counted from */
  ino_t root_ino;
  struct dir_time *dirs;
  size_t n_dirs, cap_dirs;
};

static void unpacker_done(struct unpacker *u) {
  agsx_tar_reader_clear(&u->rd);
  free(u->cached_parent);
  agsx_closep(&u->cached_fd);
  for (size_t i = 0; i < u->n_dirs; i++)
    free(u->dirs[i].path);
  free(u->dirs);
}

/* A removal can change what a cached path resolves to. The fd stays open:
 * the entry being unpacked may still be using it. */
static void cache_forget(struct unpacker *u) {
  free(u->cached_parent);
  u->cached_parent = NULL;
}

static void cache_set(struct unpacker *u, const char *parent, int fd) {
  cache_forget(u);
  agsx_closep(&u->cached_fd);
  u->cached_parent = xstrdup(parent);
  u->cached_fd = fd;
}

/* The library's failure as ours: the source's own error when the read
 * callback failed, libarchive's message otherwise. */
static int archive_failure(struct unpacker *u, agsx_error_t *err) {
  if (u->src->err != NULL)
    return source_error(u->src, err);
  const char *msg = archive_error_string(u->a);
  return agsx_error_set(err, 0, "read tar: %s", msg ? msg : "unknown error");
}

/* Implicit directory NAME in DIRFD: 0755, root, whatever the umask or a
 * setgid parent would make it. */
static int make_implicit_dir(int dirfd, const char *name, agsx_error_t *err) {
  if (mkdirat(dirfd, name, 0755) < 0)
    return agsx_error_set(err, errno, "create directory");
  /* We just created NAME and nothing else writes here: it is a directory. */
  if (fchownat(dirfd, name, 0, 0, AT_SYMLINK_NOFOLLOW) < 0 || fchmodat(dirfd, name, 0755, 0) < 0)
    return agsx_error_set(err, errno, "set up directory");
  int fd = openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "open directory");
  return fd;
}

/* How many levels below the layer root the directory FD really is. The
 * path string does not tell: entries may descend through the layer's own
 * symlinks (`l -> d/d/d`, then `l/d/`, again and again), which builds trees
 * thousands of levels deep from names of a few components. The walk goes up
 * through ".." and stops past max_depth. */
static int real_depth(struct unpacker *u, int fd, size_t *ret, agsx_error_t *err) {
  _cleanup_close_ int cur = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  for (size_t depth = 0; cur >= 0; depth++) {
    struct stat st;
    if (fstat(cur, &st) < 0)
      break;
    if (st.st_dev == u->root_dev && st.st_ino == u->root_ino) {
      *ret = depth;
      return 0;
    }
    if (depth >= u->lim->max_depth)
      return agsx_error_set(err, 0, "directory deeper than %zu levels below the layer root",
                            u->lim->max_depth);
    int up = openat(cur, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
    agsx_closep(&cur);
    cur = up;
  }
  return agsx_error_set(err, errno, "find the depth of a directory");
}

/* A directory made in a directory DEPTH levels down must stay within the
 * limit. */
static int check_depth(struct unpacker *u, size_t depth, agsx_error_t *err) {
  if (depth + 1 > u->lim->max_depth)
    return agsx_error_set(err, 0, "directory deeper than %zu levels below the layer root",
                          u->lim->max_depth);
  return 0;
}

static size_t path_depth(const char *path) {
  size_t n = 1;
  for (; *path; path++)
    n += *path == '/';
  return n;
}

static int parent_error(agsx_error_t *err, int errno_, const char *parent) {
  _cleanup_free_ char *q = agsx_tarentry_quote(parent);
  if (errno_ != 0)
    agsx_error_set(err, errno_, "open directory");
  return agsx_error_wrap(err, "parent `%s`", q);
}

/* Opens PARENT, creating missing directories one component at a time. Each
 * prefix is resolved from the destination root so that symlinks planted by
 * the layer are followed the same way everywhere, and only inside it. The
 * depth of CUR is known from the first directory made on (SIZE_MAX: not
 * yet, an existing prefix may lie anywhere). */
static int make_parents(struct unpacker *u, const char *parent, size_t *ret_depth,
                        agsx_error_t *err) {
  _cleanup_free_ char *prefix = xstrdup(parent);
  _cleanup_close_ int cur = agsx_open_in_root(u->destfd, ".", O_PATH | O_DIRECTORY, 0);
  if (cur < 0)
    return agsx_error_set(err, errno, "open layer root");
  size_t depth = 0;
  for (char *p = prefix;;) {
    char *slash = strchr(p, '/');
    if (slash)
      *slash = '\0';
    int next = agsx_open_in_root(u->destfd, prefix, O_PATH | O_DIRECTORY, 0);
    if (next < 0 && errno != ENOENT)
      return parent_error(err, errno, prefix);
    if (next >= 0) {
      depth = SIZE_MAX;
    } else {
      if ((depth == SIZE_MAX && real_depth(u, cur, &depth, err) < 0) ||
          check_depth(u, depth, err) < 0 || (next = make_implicit_dir(cur, p, err)) < 0)
        return parent_error(err, 0, prefix);
      depth++;
    }
    agsx_closep(&cur);
    cur = next;
    if (slash == NULL)
      break;
    *slash = '/';
    p = slash + 1;
  }
  if (depth == SIZE_MAX && real_depth(u, cur, &depth, err) < 0)
    return parent_error(err, 0, parent);
  *ret_depth = depth;
  return steal_fd(&cur);
}

/* The directory that holds the entry, borrowed: valid until the next call,
 * and how deep it really is. A parent reached without a symlink is as deep
 * as its name; one reached through symlinks is measured. */
static int open_parent(struct unpacker *u, const char *parent, size_t *ret_depth,
                       agsx_error_t *err) {
  if (*parent == '\0') {
    *ret_depth = 0;
    return u->destfd;
  }
  if (u->cached_parent != NULL && strcmp(u->cached_parent, parent) == 0) {
    *ret_depth = u->cached_depth;
    return u->cached_fd;
  }
  size_t depth = path_depth(parent);
  int fd = agsx_open_beneath_nofollow(u->destfd, parent, O_PATH | O_DIRECTORY, 0);
  if (fd < 0) {
    fd = agsx_open_in_root(u->destfd, parent, O_PATH | O_DIRECTORY, 0);
    if (fd < 0 && errno != ENOENT)
      return parent_error(err, errno, parent);
    if (fd < 0) {
      if ((fd = make_parents(u, parent, &depth, err)) < 0)
        return -1;
    } else if (real_depth(u, fd, &depth, err) < 0) {
      close(fd);
      return parent_error(err, 0, parent);
    }
  }
  cache_set(u, parent, fd);
  u->cached_depth = *ret_depth = depth;
  return fd;
}

/* NAME already exists: keep it when it is a directory and KEEP_DIR, else
 * remove it. Returns 1 when kept. */
static int clear_existing(struct unpacker *u, int dirfd, const char *name, bool keep_dir,
                          agsx_error_t *err) {
  struct stat st;
  if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return errno == ENOENT ? 0 : agsx_error_set(err, errno, "stat existing entry");
  if (keep_dir && S_ISDIR(st.st_mode))
    return 1;
  cache_forget(u);
  if (agsx_rm_rf_at(dirfd, name, err) < 0)
    return agsx_error_wrap(err, "replace existing entry");
  return 0;
}

/* ---- metadata --------------------------------------------------------------------------- */

static uid_t map_id(la_int64_t id) { return id < 0 || id > ID_MAX ? ID_OVERFLOW : (uid_t)id; }

static long clamp_nsec(long nsec) { return nsec < 0 || nsec > 999999999 ? 0 : nsec; }

static bool entry_times(struct archive_entry *e, struct timespec ts[2]) {
  if (!archive_entry_mtime_is_set(e))
    return false;
  ts[1] = (struct timespec){archive_entry_mtime(e), clamp_nsec(archive_entry_mtime_nsec(e))};
  ts[0] = ts[1];
  if (archive_entry_atime_is_set(e))
    ts[0] = (struct timespec){archive_entry_atime(e), clamp_nsec(archive_entry_atime_nsec(e))};
  return true;
}

/* trusted.* and other security.* attributes are never taken from a layer:
 * trusted.overlay.* would steer overlayfs, security.selinux would relabel.
 * Nor user.overlay.*: sandboxes mount their overlay with `userxattr`, which
 * reads overlay's own attributes (opaque, redirect, metacopy) from there. */
static bool xattr_allowed(const char *name) {
  if (agsx_str_has_prefix(name, "user.overlay."))
    return false;
  return agsx_str_has_prefix(name, "user.") || strcmp(name, "security.capability") == 0;
}

static int apply_xattrs(int fd, struct archive_entry *e, agsx_error_t *err) {
  const char *name;
  const void *value;
  size_t size;
  if (archive_entry_xattr_reset(e) == 0)
    return 0;
  while (archive_entry_xattr_next(e, &name, &value, &size) == ARCHIVE_OK) {
    _cleanup_free_ char *q = agsx_tarentry_quote(name);
    if (!xattr_allowed(name)) {
      agsx_debug("layer entry: skipping xattr `%s`", q);
      continue;
    }
    if (fsetxattr(fd, name, value, size, 0) == 0)
      continue;
    if (errno != ENOTSUP)
      return agsx_error_set(err, errno, "set xattr `%s`", q);
    agsx_warn("layer entry: xattr `%s` not supported by the filesystem, skipped", q);
  }
  return 0;
}

/* A chown that failed: EINVAL names an id the caller's user namespace
 * lacks, which for an ordinary user's agsx (host/rootless.h) means too few
 * subordinate ids. */
static int chown_failed(struct archive_entry *e, agsx_error_t *err) {
  if (errno == EINVAL && agsx_rootless())
    return agsx_error_set(err, EINVAL,
                          "owned by uid %lld, gid %lld, which this user's sandboxes do not have "
                          "(they have ids 0-%lu: too few subordinate ids; as root: usermod "
                          "--add-subuids 100000-165535 --add-subgids 100000-165535 USER)",
                          (long long)archive_entry_uid(e), (long long)archive_entry_gid(e),
                          agsx_rootless_ids() - 1);
  return agsx_error_set(err, errno, "chown");
}

/* Owner, mode and xattrs through an fd of a regular file or directory. The
 * order matters: chown clears setuid/setgid and security.capability, so it
 * comes first and the capability last. */
static int apply_meta_fd(int fd, struct archive_entry *e, agsx_error_t *err) {
  if (fchown(fd, map_id(archive_entry_uid(e)), map_id(archive_entry_gid(e))) < 0)
    return chown_failed(e, err);
  if (fchmod(fd, archive_entry_perm(e) & 07777) < 0)
    return agsx_error_set(err, errno, "chmod");
  return apply_xattrs(fd, e, err);
}

/* Owner and times of a symlink or FIFO, by name without following it. */
static int apply_meta_at(int dirfd, const char *name, struct archive_entry *e, agsx_error_t *err) {
  struct timespec ts[2];
  if (fchownat(dirfd, name, map_id(archive_entry_uid(e)), map_id(archive_entry_gid(e)),
               AT_SYMLINK_NOFOLLOW) < 0)
    return chown_failed(e, err);
  if (entry_times(e, ts) && utimensat(dirfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0)
    return agsx_error_set(err, errno, "set times");
  /* Linux refuses user.* xattrs on symlinks and FIFOs, and a capability
   * means nothing there: their xattrs are skipped. */
  if (archive_entry_xattr_count(e) > 0)
    agsx_debug("layer entry: skipping xattrs of a symlink or FIFO");
  return 0;
}

/* Directory times are applied after every entry (creating children changes
 * them), deepest first, later entries for the same path last. */
static void record_dir_time(struct unpacker *u, const char *parent, const char *name,
                            struct archive_entry *e) {
  struct timespec ts[2];
  if (!entry_times(e, ts))
    return;
  if (u->n_dirs == u->cap_dirs) {
    u->cap_dirs = u->cap_dirs ? u->cap_dirs * 2 : 64;
    u->dirs = xrealloc(u->dirs, u->cap_dirs * sizeof(*u->dirs));
  }
  char *path = *parent ? xasprintf("%s/%s", parent, name) : xstrdup(name);
  size_t depth = 0;
  for (const char *p = path; *p; p++)
    depth += *p == '/';
  u->dirs[u->n_dirs] = (struct dir_time){path, depth, u->n_dirs, {ts[0], ts[1]}};
  u->n_dirs++;
}

static int cmp_dir_time(const void *pa, const void *pb) {
  const struct dir_time *a = pa, *b = pb;
  if (a->depth != b->depth)
    return a->depth > b->depth ? -1 : 1;
  return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static int apply_dir_times(struct unpacker *u, agsx_error_t *err) {
  if (u->n_dirs > 0)
    qsort(u->dirs, u->n_dirs, sizeof(*u->dirs), cmp_dir_time);
  for (size_t i = 0; i < u->n_dirs; i++) {
    struct dir_time *d = &u->dirs[i];
    _cleanup_close_ int fd =
        agsx_open_in_root(u->destfd, d->path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
    /* A later entry replaced the directory: its times went with it. */
    if (fd < 0 && (errno == ENOENT || errno == ENOTDIR || errno == ELOOP))
      continue;
    if (fd < 0 || futimens(fd, d->ts) < 0) {
      _cleanup_free_ char *q = agsx_tarentry_quote(d->path);
      return agsx_error_set(err, errno, "set times of directory `%s`", q);
    }
  }
  return 0;
}

/* ---- entries ---------------------------------------------------------------------------- */

static int pwrite_all(int fd, const void *buf, size_t len, off_t off) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = pwrite(fd, p, len, off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return -1;
    p += n;
    off += n;
    len -= (size_t)n;
  }
  return 0;
}

/* Writes the entry's data at the offsets libarchive gives: holes of sparse
 * entries are skipped, and the size set at the end. */
static int write_data(struct unpacker *u, int fd, struct archive_entry *e, agsx_error_t *err) {
  uint64_t size = (uint64_t)archive_entry_size(e), end = 0;
  for (;;) {
    const void *buf;
    size_t len;
    la_int64_t off;
    int r = archive_read_data_block(u->a, &buf, &len, &off);
    if (r == ARCHIVE_EOF)
      break;
    if (r != ARCHIVE_OK)
      return archive_failure(u, err);
    if (off < 0 || (uint64_t)off > size || len > size - (uint64_t)off)
      return agsx_error_set(err, 0, "data beyond the entry size");
    if (len > 0 && pwrite_all(fd, buf, len, off) < 0)
      return agsx_error_set(err, errno, "write");
    end = (uint64_t)off + len > end ? (uint64_t)off + len : end;
  }
  if (size > end && ftruncate(fd, (off_t)size) < 0)
    return agsx_error_set(err, errno, "set size");
  return 0;
}

/* Sparse entries can claim any size: bound it by what is left of the
 * limit (for ordinary entries the stream count would catch it anyway). */
static int check_size(struct unpacker *u, struct archive_entry *e, agsx_error_t *err) {
  la_int64_t size = archive_entry_size(e), pos = archive_read_header_position(u->a);
  uint64_t left =
      pos < 0 || (uint64_t)pos > u->lim->max_bytes ? 0 : u->lim->max_bytes - (uint64_t)pos;
  if (size < 0)
    return agsx_error_set(err, 0, "negative size");
  if ((uint64_t)size > left)
    return agsx_error_set(err, 0,
                          "size %" PRId64 " exceeds the remaining limit of %" PRIu64 " bytes",
                          (int64_t)size, left);
  return 0;
}

static int make_file(struct unpacker *u, struct archive_entry *e, int dirfd, const char *name,
                     agsx_error_t *err) {
  if (check_size(u, e, err) < 0)
    return -1;
  _cleanup_close_ int fd =
      openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) {
    if (clear_existing(u, dirfd, name, false, err) < 0)
      return -1;
    fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  }
  if (fd < 0)
    return agsx_error_set(err, errno, "create file");
  /* Data first: a write clears setuid and security.capability. */
  if (write_data(u, fd, e, err) < 0 || apply_meta_fd(fd, e, err) < 0)
    return -1;
  struct timespec ts[2];
  if (entry_times(e, ts) && futimens(fd, ts) < 0)
    return agsx_error_set(err, errno, "set times");
  return 0;
}

static int make_dir(struct unpacker *u, struct archive_entry *e, int dirfd, size_t depth,
                    const char *parent, const char *name, agsx_error_t *err) {
  if (check_depth(u, depth, err) < 0)
    return -1;
  if (mkdirat(dirfd, name, 0700) < 0) {
    int r = errno == EEXIST ? clear_existing(u, dirfd, name, true, err)
                            : agsx_error_set(err, errno, "create directory");
    if (r < 0)
      return -1;
    if (r == 0 && mkdirat(dirfd, name, 0700) < 0)
      return agsx_error_set(err, errno, "create directory");
  }
  _cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "open directory");
  if (apply_meta_fd(fd, e, err) < 0)
    return -1;
  record_dir_time(u, parent, name, e);
  return 0;
}

/* "./" itself: the metadata of the destination directory. */
static int make_root(struct unpacker *u, struct archive_entry *e, agsx_error_t *err) {
  if (archive_entry_filetype(e) != AE_IFDIR || archive_entry_hardlink(e) != NULL)
    return agsx_error_set(err, 0, "the layer root is not a directory");
  _cleanup_close_ int fd = agsx_open_in_root(u->destfd, ".", O_RDONLY | O_DIRECTORY, 0);
  if (fd < 0)
    return agsx_error_set(err, errno, "open layer root");
  if (apply_meta_fd(fd, e, err) < 0)
    return -1;
  record_dir_time(u, "", ".", e);
  return 0;
}

typedef int (*create_fn)(int dirfd, const char *name, const void *arg);

/* Runs FN to create NAME; when something is in the way, removes it (a
 * directory with everything below) and tries once more. */
static int create_at(struct unpacker *u, int dirfd, const char *name, create_fn fn, const void *arg,
                     const char *what, agsx_error_t *err) {
  if (fn(dirfd, name, arg) == 0)
    return 0;
  if (errno != EEXIST)
    return agsx_error_set(err, errno, "create %s", what);
  if (clear_existing(u, dirfd, name, false, err) < 0)
    return -1;
  if (fn(dirfd, name, arg) < 0)
    return agsx_error_set(err, errno, "create %s", what);
  return 0;
}

static int do_symlink(int dirfd, const char *name, const void *target) {
  return symlinkat(target, dirfd, name);
}

static int do_fifo(int dirfd, const char *name, const void *arg) {
  return mknodat(dirfd, name, S_IFIFO | 0600, 0);
}

static int do_link(int dirfd, const char *name, const void *fdp) {
  return agsx_link_fd(*(const int *)fdp, dirfd, name);
}

static int do_whiteout(int dirfd, const char *name, const void *arg) {
  return mknodat(dirfd, name, S_IFCHR | 0000, makedev(0, 0));
}

/* Symlink targets are stored verbatim: they only matter when followed, and
 * every resolution here stays inside the destination. */
static int make_symlink(struct unpacker *u, const struct agsx_tarentry *t, int dirfd,
                        const char *name, agsx_error_t *err) {
  if (create_at(u, dirfd, name, do_symlink, t->symlink, "symlink", err) < 0)
    return -1;
  return apply_meta_at(dirfd, name, t->ae, err);
}

static int make_fifo(struct unpacker *u, struct archive_entry *e, int dirfd, const char *name,
                     agsx_error_t *err) {
  if (create_at(u, dirfd, name, do_fifo, NULL, "fifo", err) < 0 ||
      apply_meta_at(dirfd, name, e, err) < 0)
    return -1;
  /* After chown, which clears setuid/setgid. NAME is the FIFO just made:
   * nothing else writes to the destination, so following is not a risk. */
  if (fchmodat(dirfd, name, archive_entry_perm(e) & 07777, 0) < 0)
    return agsx_error_set(err, errno, "chmod");
  return 0;
}

/* The target (cleaned by the policy, never the root) is resolved inside
 * the destination and not followed at its last component, so a link can
 * only ever share an inode of this layer. */
static int make_hardlink(struct unpacker *u, const char *target, int dirfd, const char *name,
                         agsx_error_t *err) {
  _cleanup_free_ char *q = agsx_tarentry_quote(target);
  _cleanup_close_ int fd = agsx_open_in_root(u->destfd, target, O_PATH | O_NOFOLLOW, 0);
  if (fd < 0)
    return agsx_error_set(err, errno, "hardlink target `%s`", q);
  struct stat st;
  if (fstat(fd, &st) < 0)
    return agsx_error_set(err, errno, "hardlink target `%s`", q);
  if (S_ISDIR(st.st_mode))
    return agsx_error_set(err, 0, "hardlink target `%s` is a directory", q);
  return create_at(u, dirfd, name, do_link, &fd, "hardlink", err);
}

/* Both spellings: an overlay mounted by host root reads trusted.overlay.*,
 * the sandboxes' (mounted in their user namespace, `userxattr`) read
 * user.overlay.*. */
static int make_opaque(int dirfd, agsx_error_t *err) {
  _cleanup_close_ int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || fsetxattr(fd, "trusted.overlay.opaque", "y", 1, 0) < 0 ||
      fsetxattr(fd, "user.overlay.opaque", "y", 1, 0) < 0)
    return agsx_error_set(err, errno, "mark directory opaque");
  return 0;
}

/* OCI whiteouts become overlayfs ones: ".wh.NAME" a 0:0 character device
 * NAME, ".wh..wh..opq" the opaque xattr on its directory. */
static int make_whiteout(struct unpacker *u, int dirfd, const char *name, agsx_error_t *err) {
  if (strcmp(name, WHITEOUT_OPAQUE) == 0)
    return make_opaque(dirfd, err);
  if (agsx_str_has_prefix(name, WHITEOUT_META_PREFIX))
    return agsx_error_set(err, 0, "unknown whiteout metadata entry");
  const char *victim = name + strlen(WHITEOUT_PREFIX);
  if (*victim == '\0' || strcmp(victim, ".") == 0 || strcmp(victim, "..") == 0)
    return agsx_error_set(err, 0, "invalid whiteout name");
  cache_forget(u);
  if (agsx_rm_rf_at(dirfd, victim, err) < 0)
    return -1;
  if (do_whiteout(dirfd, victim, NULL) < 0)
    return agsx_error_set(err, errno, "create whiteout");
  return 0;
}

static int make_entry(struct unpacker *u, const struct agsx_tarentry *t, const char *parent,
                      const char *name, agsx_error_t *err) {
  struct archive_entry *e = t->ae;
  size_t depth = 0;
  int dirfd = open_parent(u, parent, &depth, err);
  if (dirfd < 0)
    return -1;
  if (agsx_str_has_prefix(name, WHITEOUT_PREFIX))
    return make_whiteout(u, dirfd, name, err);
  if (t->kind == AGSX_TAR_HARDLINK)
    return make_hardlink(u, t->hardlink, dirfd, name, err);
  switch (archive_entry_filetype(e)) {
  case AE_IFREG: return make_file(u, e, dirfd, name, err);
  case AE_IFDIR: return make_dir(u, e, dirfd, depth, parent, name, err);
  case AE_IFLNK: return make_symlink(u, t, dirfd, name, err);
  case AE_IFIFO: return make_fifo(u, e, dirfd, name, err);
  default:
    return agsx_error_set(err, 0, "unsupported entry type 0%o",
                          (unsigned)archive_entry_filetype(e));
  }
}

static int unpack_entry(struct unpacker *u, const struct agsx_tarentry *t, agsx_error_t *err) {
  char *clean = t->path;
  if (*clean == '\0')
    return make_root(u, t->ae, err);
  const char *base = strrchr(clean, '/');
  base = base ? base + 1 : clean;
  /* The sandbox gets a minimal /dev of its own; a layer's nodes are not
   * needed and could hand out raw devices. */
  if (t->kind == AGSX_TAR_DEVICE && !agsx_str_has_prefix(base, WHITEOUT_PREFIX)) {
    _cleanup_free_ char *q = agsx_tarentry_quote(t->raw);
    agsx_warn("layer entry `%s`: skipping device node", q);
    return 0;
  }
  char *slash = strrchr(clean, '/');
  if (slash == NULL)
    return make_entry(u, t, "", clean, err);
  *slash = '\0';
  return make_entry(u, t, clean, slash + 1, err);
}

static int read_entries(struct unpacker *u, agsx_error_t *err) {
  layer_policy(u->lim, &u->policy);
  u->rd = (struct agsx_tar_reader){
      .a = u->a, .policy = &u->policy, .what = "layer entry", .root = "layer root"};
  for (;;) {
    struct agsx_tarentry *t;
    int r = agsx_tar_reader_next(&u->rd, &t, err);
    if (r < 0 && u->rd.read_failed) {
      agsx_error_free(err);
      return archive_failure(u, err);
    }
    if (r <= 0)
      return r;
    if (unpack_entry(u, t, err) < 0) {
      _cleanup_free_ char *q = agsx_tarentry_quote(t->raw);
      return agsx_error_wrap(err, "layer entry `%s`", q);
    }
  }
}

static void archive_read_freep(struct archive **a) {
  if (*a != NULL)
    archive_read_free(*a);
}

static struct archive *open_archive(struct source *s, agsx_error_t *err) {
  _cleanup_(archive_read_freep) struct archive *a = archive_read_new();
  if (a == NULL)
    abort();
  /* Tar only (ustar, pax, GNU); decompression is ours, so no filters. */
  if (archive_read_support_format_tar(a) != ARCHIVE_OK ||
      archive_read_support_filter_none(a) != ARCHIVE_OK) {
    agsx_error_set(err, 0, "libarchive: %s", archive_error_string(a));
    return NULL;
  }
  if (archive_read_open(a, s, NULL, source_read_cb, NULL) != ARCHIVE_OK) {
    if (s->err != NULL)
      source_error(s, err);
    else
      agsx_error_set(err, 0, "read tar: %s", archive_error_string(a));
    return NULL;
  }
  return steal_ptr(&a);
}

static int unpack(struct source *src, enum agsx_compression comp, int destfd,
                  const struct agsx_layer_limits *lim, char ret_diff_id[AGSX_DIGEST_LEN],
                  agsx_error_t *err) {
  struct agsx_layer_limits deflim;
  if (lim == NULL) {
    agsx_layer_limits_default(&deflim);
    lim = &deflim;
  }
  src->max_bytes = lim->max_bytes;
  src->space_fd = destfd;
  src->space_reserve = lim->space_reserve;
  if (source_start(src, comp, err) < 0)
    return -1;
  _cleanup_(archive_read_freep) struct archive *a = open_archive(src, err);
  if (a == NULL)
    return -1;
  _cleanup_(unpacker_done) struct unpacker u = {
      .destfd = destfd, .lim = lim, .src = src, .a = a, .cached_fd = -1};
  struct stat root;
  if (fstat(destfd, &root) < 0)
    return agsx_error_set(err, errno, "stat layer root");
  u.root_dev = root.st_dev;
  u.root_ino = root.st_ino;
  if (read_entries(&u, err) < 0 || apply_dir_times(&u, err) < 0 || source_drain(src, err) < 0)
    return -1;
  agsx_sha256_final(src->hash, ret_diff_id);
  return 0;
}

int agsx_layer_unpack_fd(int fd, enum agsx_compression comp, int destfd,
                         const struct agsx_layer_limits *lim, char ret_diff_id[AGSX_DIGEST_LEN],
                         agsx_error_t *err) {
  return agsx_layer_unpack_fd_sized(fd, comp, destfd, lim, ret_diff_id, NULL, err);
}

int agsx_layer_unpack_fd_sized(int fd, enum agsx_compression comp, int destfd,
                               const struct agsx_layer_limits *lim,
                               char ret_diff_id[AGSX_DIGEST_LEN], uint64_t *ret_size,
                               agsx_error_t *err) {
  _cleanup_(source_done) struct source src = {.fd = fd};
  if (unpack(&src, comp, destfd, lim, ret_diff_id, err) < 0)
    return -1;
  if (ret_size)
    *ret_size = src.total;
  return 0;
}

int agsx_layer_diff_id_fd(int fd, enum agsx_compression comp, const struct agsx_layer_limits *lim,
                          char ret_diff_id[AGSX_DIGEST_LEN], agsx_error_t *err) {
  _cleanup_(source_done) struct source src = {.fd = fd, .space_fd = -1};
  struct agsx_layer_limits deflim;
  if (lim == NULL) {
    agsx_layer_limits_default(&deflim);
    lim = &deflim;
  }
  src.max_bytes = lim->max_bytes;
  if (source_start(&src, comp, err) < 0 || source_drain(&src, err) < 0)
    return -1;
  agsx_sha256_final(src.hash, ret_diff_id);
  return 0;
}

int agsx_layer_decompress_fd(int fd, enum agsx_compression comp, int out,
                             const struct agsx_layer_limits *lim, char ret_diff_id[AGSX_DIGEST_LEN],
                             uint64_t *ret_size, agsx_error_t *err) {
  struct agsx_layer_limits deflim;
  if (lim == NULL) {
    agsx_layer_limits_default(&deflim);
    lim = &deflim;
  }
  _cleanup_(source_done) struct source src = {.fd = fd, .max_bytes = lim->max_bytes};
  if (source_start(&src, comp, err) < 0)
    return -1;
  const void *buf;
  ssize_t n;
  while ((n = source_next(&src, &buf)) > 0)
    if (agsx_write_all(out, buf, (size_t)n) < 0)
      return agsx_error_set(err, errno, "write the uncompressed layer");
  if (n < 0)
    return source_error(&src, err);
  agsx_sha256_final(src.hash, ret_diff_id);
  *ret_size = src.total;
  return 0;
}

int agsx_layer_unpack_mem(const void *buf, size_t len, enum agsx_compression comp, int destfd,
                          const struct agsx_layer_limits *lim, char ret_diff_id[AGSX_DIGEST_LEN],
                          agsx_error_t *err) {
  _cleanup_(source_done) struct source src = {.fd = -1, .mem = buf, .mem_len = len};
  return unpack(&src, comp, destfd, lim, ret_diff_id, err);
}
