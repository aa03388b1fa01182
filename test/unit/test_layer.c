/* Unit tests: layer unpacking. Tar streams are built in memory with
 * libarchive's writer, compressed with zlib (and zstd), unpacked into a
 * fresh directory under /tmp, and checked. Every hostile layer is also
 * checked for escapes: a canary directory next to the destination must stay
 * as it was, and nothing named like the payloads may appear outside.
 * Runs as root (chown, mknod, trusted.* xattrs). */
#include "config.h"

#include "util/digest.h"
#include "image/layer.h"
#include "tap.h"
#include "util/util.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <zlib.h>
#ifdef HAVE_ZSTD
#include <zstd.h>
#endif

#define CANARY "canary\n"

static char escape_name[64]; /* payload name that must never appear outside dest */

/* ---- building tar streams ---------------------------------------------------------------- */

struct tar {
  struct archive *a;
  char *buf;
  size_t cap, used;
};

struct ent {
  const char *path;
  mode_t mode; /* type and permissions */
  const char *data;
  size_t size;          /* with data NULL: that many zero bytes */
  const char *link;     /* symlink target */
  const char *hardlink; /* hardlink target */
  int64_t uid, gid;
  time_t mtime;
  dev_t rdev;
  const char *xattr[4]; /* name, value pairs */
};

/* PAX_FULL: libarchive's full pax writer (sparse entries); else the
 * restricted one, ustar headers with pax extensions only when needed. */
static void tar_begin(struct tar *t, size_t cap, bool pax_full) {
  t->cap = cap;
  t->buf = xmalloc(cap);
  t->used = 0;
  t->a = archive_write_new();
  if (pax_full)
    archive_write_set_format_pax(t->a);
  else
    archive_write_set_format_pax_restricted(t->a);
  archive_write_add_filter_none(t->a);
  if (archive_write_open_memory(t->a, t->buf, t->cap, &t->used) != ARCHIVE_OK)
    abort();
}

static void tar_data(struct tar *t, const struct ent *en) {
  static const char zeros[65536];
  if (en->data != NULL) {
    archive_write_data(t->a, en->data, en->size);
    return;
  }
  for (size_t done = 0; done < en->size;) {
    size_t n = en->size - done < sizeof(zeros) ? en->size - done : sizeof(zeros);
    archive_write_data(t->a, zeros, n);
    done += n;
  }
}

static void tar_add(struct tar *t, struct ent en) {
  struct archive_entry *e = archive_entry_new();
  archive_entry_set_pathname(e, en.path);
  archive_entry_set_mode(e, en.mode ? en.mode : (S_IFREG | 0644));
  archive_entry_set_uid(e, en.uid);
  archive_entry_set_gid(e, en.gid);
  archive_entry_set_mtime(e, en.mtime ? en.mtime : 1600000000, 0);
  if (en.link)
    archive_entry_set_symlink(e, en.link);
  if (en.hardlink)
    archive_entry_set_hardlink(e, en.hardlink);
  if (en.rdev)
    archive_entry_set_rdev(e, en.rdev);
  for (int i = 0; i < 4 && en.xattr[i]; i += 2)
    archive_entry_xattr_add_entry(e, en.xattr[i], en.xattr[i + 1], strlen(en.xattr[i + 1]));
  if (en.data && !en.size)
    en.size = strlen(en.data);
  bool has_data = S_ISREG(archive_entry_mode(e)) && !en.hardlink;
  archive_entry_set_size(e, has_data ? (la_int64_t)en.size : 0);
  if (archive_write_header(t->a, e) != ARCHIVE_OK) {
    printf("# archive_write_header `%.60s`: %s\n", en.path, archive_error_string(t->a));
    abort();
  }
  if (has_data)
    tar_data(t, &en);
  archive_entry_free(e);
}

/* Ends the stream; the buffer is returned, T is spent. */
static char *tar_end(struct tar *t, size_t *ret_len) {
  archive_write_close(t->a);
  archive_write_free(t->a);
  *ret_len = t->used;
  return t->buf;
}

static char *gzip_buf(const void *in, size_t len, size_t *ret_len) {
  z_stream z = {0};
  if (deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    abort();
  size_t cap = deflateBound(&z, len) + 64;
  char *out = xmalloc(cap);
  z.next_in = (Bytef *)in;
  z.avail_in = (uInt)len;
  z.next_out = (Bytef *)out;
  z.avail_out = (uInt)cap;
  if (deflate(&z, Z_FINISH) != Z_STREAM_END)
    abort();
  *ret_len = z.total_out;
  deflateEnd(&z);
  return out;
}

/* Two gzip members back to back, split at byte AT of the input. */
static char *gzip2_buf(const char *in, size_t len, size_t at, size_t *ret_len) {
  size_t l1, l2;
  _cleanup_free_ char *a = gzip_buf(in, at, &l1);
  _cleanup_free_ char *b = gzip_buf(in + at, len - at, &l2);
  char *out = xmalloc(l1 + l2);
  memcpy(out, a, l1);
  memcpy(out + l1, b, l2);
  *ret_len = l1 + l2;
  return out;
}

/* ---- fixture: /tmp/agsx-layer-XXXXXX/{dest,canary/file} ----------------------------------- */

struct fx {
  char root[64];
  int destfd;
  char dest[96];
};

static int dir_names(const char *path, char *out, size_t cap) {
  _cleanup_dir_ DIR *d = opendir(path);
  struct dirent *de;
  size_t n = 0;
  out[0] = '\0';
  if (d == NULL)
    return -1;
  int count = 0;
  while ((de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    count++;
    n += (size_t)snprintf(out + n, n < cap ? cap - n : 0, "%s ", de->d_name);
  }
  return count;
}

static void fx_init(struct fx *f) {
  strcpy(f->root, "/tmp/agsx-layer-XXXXXX");
  if (mkdtemp(f->root) == NULL)
    abort();
  snprintf(f->dest, sizeof(f->dest), "%s/dest", f->root);
  _cleanup_free_ char *canary = xasprintf("%s/canary", f->root);
  if (mkdir(f->dest, 0755) < 0 || mkdir(canary, 0755) < 0)
    abort();
  agsx_error_t err = NULL;
  _cleanup_close_ int cfd = open(canary, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (agsx_write_file_atomic(cfd, "file", CANARY, strlen(CANARY), 0644, &err) < 0)
    abort();
  f->destfd = open(f->dest, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (f->destfd < 0)
    abort();
}

static void fx_done(struct fx *f) {
  agsx_error_t err = NULL;
  agsx_closep(&f->destfd);
  if (agsx_rm_rf_at(AT_FDCWD, f->root, &err) < 0) {
    printf("# cleanup %s: %s\n", f->root, err->msg);
    agsx_error_free(&err);
  }
}

static bool exists_at(int dirfd, const char *path) {
  struct stat st;
  return fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/* Nothing outside dest changed: the root holds dest and canary only, the
 * canary directory its one file with its content and a single link, and no
 * payload name appeared in / or /tmp. */
static bool fx_untouched(struct fx *f) {
  char names[512];
  bool ok = true;
  if (dir_names(f->root, names, sizeof(names)) != 2 || !strstr(names, "dest ") ||
      !strstr(names, "canary ")) {
    printf("#   %s holds: %s\n", f->root, names);
    ok = false;
  }
  _cleanup_free_ char *cdir = xasprintf("%s/canary", f->root);
  if (dir_names(cdir, names, sizeof(names)) != 1 || strcmp(names, "file ") != 0) {
    printf("#   %s holds: %s\n", cdir, names);
    ok = false;
  }
  _cleanup_free_ char *cfile = xasprintf("%s/canary/file", f->root);
  _cleanup_free_ char *buf = NULL;
  size_t len = 0;
  agsx_error_t err = NULL;
  struct stat st;
  if (agsx_read_file_at(AT_FDCWD, cfile, 4096, &buf, &len, &err) < 0 || strcmp(buf, CANARY) != 0 ||
      lstat(cfile, &st) < 0 || st.st_nlink != 1 || !S_ISREG(st.st_mode)) {
    printf("#   canary file changed\n");
    agsx_error_free(&err);
    ok = false;
  }
  _cleanup_free_ char *tmp_esc = xasprintf("/tmp/%s", escape_name);
  _cleanup_free_ char *root_esc = xasprintf("/%s", escape_name);
  if (exists_at(AT_FDCWD, tmp_esc) || exists_at(AT_FDCWD, root_esc)) {
    printf("#   `%s` appeared outside the destination\n", escape_name);
    ok = false;
  }
  return ok;
}

static int unpack(struct fx *f, const void *buf, size_t len, enum agsx_compression comp,
                  const struct agsx_layer_limits *lim, char diff_id[AGSX_DIGEST_LEN],
                  agsx_error_t *err) {
  char dummy[AGSX_DIGEST_LEN];
  return agsx_layer_unpack_mem(buf, len, comp, f->destfd, lim, diff_id ? diff_id : dummy, err);
}

static struct agsx_layer_limits limits(void) {
  struct agsx_layer_limits lim;
  unsetenv("AGSX_MAX_LAYER_SIZE");
  agsx_layer_limits_default(&lim);
  return lim;
}

/* Unpacks a hostile layer: it must fail with an error naming WHY, and
 * nothing outside dest may change. */
static void hostile_refused(const char *what, const void *buf, size_t len,
                            const struct agsx_layer_limits *lim, const char *why) {
  struct fx f;
  fx_init(&f);
  agsx_error_t err = NULL;
  struct agsx_layer_limits def = limits();
  int r = unpack(&f, buf, len, AGSX_COMPRESSION_AUTO, lim ? lim : &def, NULL, &err);
  tap_ok(r < 0 && err && strstr(err->msg, why), "%s: refused (%s): %.300s", what, why,
         err ? err->msg : "accepted");
  tap_ok(fx_untouched(&f), "%s: nothing outside dest changed", what);
  agsx_error_free(&err);
  fx_done(&f);
}

static char *tar_of(const struct ent *ents, size_t n, size_t *ret_len) {
  struct tar t;
  tar_begin(&t, 1 << 20, false);
  for (size_t i = 0; i < n; i++)
    tar_add(&t, ents[i]);
  return tar_end(&t, ret_len);
}

static void hostile(const char *what, const struct ent *ents, size_t n, const char *why) {
  size_t len;
  _cleanup_free_ char *tar = tar_of(ents, n, &len);
  hostile_refused(what, tar, len, NULL, why);
}

/* ---- checks ------------------------------------------------------------------------------- */

static bool check_stat(struct fx *f, const char *path, mode_t mode, uid_t uid, gid_t gid,
                       time_t mtime) {
  struct stat st;
  if (fstatat(f->destfd, path, &st, AT_SYMLINK_NOFOLLOW) < 0) {
    printf("#   %s: %s\n", path, strerror(errno));
    return false;
  }
  bool ok = st.st_mode == mode && st.st_uid == uid && st.st_gid == gid &&
            (mtime == 0 || st.st_mtime == mtime);
  if (!ok)
    printf("#   %s: mode 0%o uid %u gid %u mtime %lld\n", path, (unsigned)st.st_mode,
           (unsigned)st.st_uid, (unsigned)st.st_gid, (long long)st.st_mtime);
  return ok;
}

static char *read_at(struct fx *f, const char *path) {
  char *buf = NULL;
  size_t len;
  agsx_error_t err = NULL;
  if (agsx_read_file_at(f->destfd, path, 1 << 20, &buf, &len, &err) < 0) {
    printf("#   read %s: %s\n", path, err->msg);
    agsx_error_free(&err);
    return xstrdup("");
  }
  return buf;
}

static ssize_t xattr_at(struct fx *f, const char *path, const char *name, char *buf, size_t cap) {
  _cleanup_free_ char *p = xasprintf("%s/%s", f->dest, path);
  ssize_t n = lgetxattr(p, name, buf, cap - 1);
  buf[n > 0 ? n : 0] = '\0';
  return n;
}

/* ---- tests -------------------------------------------------------------------------------- */

static const struct ent basic_ents[] = {
    {.path = "./", .mode = S_IFDIR | 0755},
    {.path = "./etc/", .mode = S_IFDIR | 0750, .uid = 10, .gid = 20, .mtime = 1000000},
    {.path = "./etc/passwd", .data = "root:x:0:0::/root:/bin/sh\n", .mtime = 1234567},
    {.path = "./etc/shadow", .mode = S_IFREG | 0640, .data = "secret", .gid = 42},
    {.path = "bin/sh", .mode = S_IFREG | 04755, .data = "#!binary", .mtime = 1111111},
    {.path = "bin/ls", .mode = S_IFLNK | 0777, .link = "sh", .uid = 7, .gid = 8, .mtime = 2222},
    {.path = "bin/ash", .hardlink = "bin/sh"},
    {.path = "bin/ash2", .hardlink = "./bin/sh"},
    {.path = "run/fifo", .mode = S_IFIFO | 0620, .uid = 3, .gid = 4},
    {.path = "tmp/", .mode = S_IFDIR | 01777},
    {.path = "big-ids", .data = "x", .uid = 100000, .gid = 70000},
    {.path = "sgid", .mode = S_IFREG | 02755, .data = "y", .uid = 1, .gid = 1},
    {.path = "deep/a/b/c/file", .data = "deep"},
    {.path = "xattrs",
     .data = "z",
     .xattr = {"user.agsx.test", "hello", "trusted.overlay.opaque", "y"}},
    {.path = "xdir/", .mode = S_IFDIR | 0755, .xattr = {"trusted.overlay.redirect", "/etc"}},
    {.path = "caps", .mode = S_IFREG | 0755, .data = "c", .xattr = {"security.selinux", "x"}},
    {.path = "empty", .data = ""},
};

static void test_basic(void) {
  size_t len;
  _cleanup_free_ char *tar = tar_of(basic_ents, AGSX_ARRAY_SIZE(basic_ents), &len);
  char want[AGSX_DIGEST_LEN], got[AGSX_DIGEST_LEN] = "";
  agsx_sha256_buf(tar, len, want);
  struct fx f;
  fx_init(&f);
  agsx_error_t err = NULL;
  struct agsx_layer_limits lim = limits();
  int r = unpack(&f, tar, len, AGSX_COMPRESSION_NONE, &lim, got, &err);
  tap_ok(r == 0, "basic layer unpacks: %s", err ? err->msg : "ok");
  agsx_error_free(&err);
  tap_is_str(got, want, "diff_id is the sha256 of the tar (padding included, %zu bytes)", len);
  tap_ok(check_stat(&f, ".", S_IFDIR | 0755, 0, 0, 1600000000), "root dir metadata");
  tap_ok(check_stat(&f, "etc", S_IFDIR | 0750, 10, 20, 1000000), "dir mode, owner, mtime");
  tap_ok(check_stat(&f, "etc/passwd", S_IFREG | 0644, 0, 0, 1234567), "file mode, mtime");
  tap_ok(check_stat(&f, "etc/shadow", S_IFREG | 0640, 0, 42, 0), "file group");
  _cleanup_free_ char *pw = read_at(&f, "etc/passwd");
  tap_is_str(pw, "root:x:0:0::/root:/bin/sh\n", "file content");
  tap_ok(check_stat(&f, "bin/sh", S_IFREG | 04755, 0, 0, 1111111), "setuid kept");
  tap_ok(check_stat(&f, "bin/ls", S_IFLNK | 0777, 7, 8, 2222), "symlink owner and mtime");
  char target[64] = "";
  tap_ok(readlinkat(f.destfd, "bin/ls", target, sizeof(target) - 1) > 0, "symlink readable");
  tap_is_str(target, "sh", "symlink target");
  struct stat a, b, c;
  fstatat(f.destfd, "bin/sh", &a, 0);
  fstatat(f.destfd, "bin/ash", &b, 0);
  fstatat(f.destfd, "bin/ash2", &c, 0);
  tap_ok(a.st_ino == b.st_ino && a.st_ino == c.st_ino && a.st_nlink == 3, "hardlinks share inode");
  tap_ok(check_stat(&f, "run/fifo", S_IFIFO | 0620, 3, 4, 0), "fifo");
  tap_ok(check_stat(&f, "run", S_IFDIR | 0755, 0, 0, 0), "implicit parent 0755 root");
  tap_ok(check_stat(&f, "tmp", S_IFDIR | 01777, 0, 0, 0), "sticky dir");
  tap_ok(check_stat(&f, "big-ids", S_IFREG | 0644, 65534, 65534, 0), "ids > 65535 -> 65534");
  tap_ok(check_stat(&f, "sgid", S_IFREG | 02755, 1, 1, 0), "setgid kept after chown");
  tap_ok(check_stat(&f, "deep/a/b/c", S_IFDIR | 0755, 0, 0, 0), "deep implicit dirs");
  tap_ok(check_stat(&f, "empty", S_IFREG | 0644, 0, 0, 0), "empty file");
  char v[64];
  tap_ok(xattr_at(&f, "xattrs", "user.agsx.test", v, sizeof(v)) == 5 && strcmp(v, "hello") == 0,
         "user.* xattr kept");
  tap_ok(xattr_at(&f, "xattrs", "trusted.overlay.opaque", v, sizeof(v)) < 0 && errno == ENODATA,
         "trusted.* xattr dropped on file");
  tap_ok(xattr_at(&f, "xdir", "trusted.overlay.redirect", v, sizeof(v)) < 0 && errno == ENODATA,
         "trusted.overlay.redirect dropped on dir");
  tap_ok(xattr_at(&f, "caps", "security.selinux", v, sizeof(v)) < 0, "security.selinux dropped");
  tap_ok(fx_untouched(&f), "basic: nothing outside dest changed");
  fx_done(&f);
}

/* A tar unpacked from each compression gives the same diff_id. */
static void expect_diff_id(const char *what, const void *buf, size_t len,
                           enum agsx_compression comp, const char *want) {
  struct fx f;
  fx_init(&f);
  agsx_error_t err = NULL;
  char got[AGSX_DIGEST_LEN] = "";
  struct agsx_layer_limits lim = limits();
  int r = unpack(&f, buf, len, comp, &lim, got, &err);
  tap_ok(r == 0 && strcmp(got, want) == 0, "%s: unpacks, diff_id of the tar (%s)", what,
         err ? err->msg : got);
  _cleanup_free_ char *pw = r == 0 ? read_at(&f, "etc/passwd") : xstrdup("");
  tap_ok(r == 0 && strcmp(pw, "root:x:0:0::/root:/bin/sh\n") == 0, "%s: content", what);
  agsx_error_free(&err);
  fx_done(&f);
}

static void expect_error(const char *what, const void *buf, size_t len, enum agsx_compression comp,
                         const char *why) {
  struct fx f;
  fx_init(&f);
  agsx_error_t err = NULL;
  struct agsx_layer_limits lim = limits();
  int r = unpack(&f, buf, len, comp, &lim, NULL, &err);
  tap_ok(r < 0 && err && strstr(err->msg, why), "%s: refused (%s): %s", what, why,
         err ? err->msg : "accepted");
  agsx_error_free(&err);
  fx_done(&f);
}

static void test_compression(void) {
  size_t len, glen, g2len;
  _cleanup_free_ char *tar = tar_of(basic_ents, AGSX_ARRAY_SIZE(basic_ents), &len);
  char want[AGSX_DIGEST_LEN];
  agsx_sha256_buf(tar, len, want);
  _cleanup_free_ char *gz = gzip_buf(tar, len, &glen);
  _cleanup_free_ char *gz2 = gzip2_buf(tar, len, 1000, &g2len);
  expect_diff_id("plain, auto", tar, len, AGSX_COMPRESSION_AUTO, want);
  expect_diff_id("gzip, auto", gz, glen, AGSX_COMPRESSION_AUTO, want);
  expect_diff_id("gzip, explicit", gz, glen, AGSX_COMPRESSION_GZIP, want);
  expect_diff_id("gzip, two members", gz2, g2len, AGSX_COMPRESSION_AUTO, want);
  _cleanup_free_ char *bad = xmalloc(glen);
  memcpy(bad, gz, glen);
  for (size_t i = 20; i < 60 && i < glen; i++)
    bad[i] ^= 0x5a;
  expect_error("corrupt gzip", bad, glen, AGSX_COMPRESSION_AUTO, "corrupt gzip data");
  expect_error("truncated gzip", gz, glen / 2, AGSX_COMPRESSION_AUTO, "unexpected end");
  expect_error("gzip with trailing garbage", gz2, glen + 3, AGSX_COMPRESSION_GZIP, "corrupt gzip");
  expect_error("plain tar declared gzip", tar, len, AGSX_COMPRESSION_GZIP, "corrupt gzip data");
  expect_error("garbage", "hello world, no tar here", 24, AGSX_COMPRESSION_AUTO, "read tar");
#ifdef HAVE_ZSTD
  size_t zcap = ZSTD_compressBound(len), half = len / 2;
  _cleanup_free_ char *zst = xmalloc(2 * zcap);
  size_t z1 = ZSTD_compress(zst, zcap, tar, half, 3);
  size_t z2 = ZSTD_compress(zst + z1, zcap, tar + half, len - half, 3);
  tap_ok(!ZSTD_isError(z1) && !ZSTD_isError(z2), "zstd compress");
  expect_diff_id("zstd, two frames, auto", zst, z1 + z2, AGSX_COMPRESSION_AUTO, want);
  expect_diff_id("zstd, explicit", zst, z1 + z2, AGSX_COMPRESSION_ZSTD, want);
  expect_error("truncated zstd", zst, z1 + z2 / 2, AGSX_COMPRESSION_AUTO, "corrupt zstd data");
  for (size_t i = 30; i < 50; i++)
    zst[i] ^= 0x33;
  expect_error("corrupt zstd", zst, z1 + z2, AGSX_COMPRESSION_AUTO, "corrupt zstd data");
#endif
}

static void test_from_fd(void) {
  size_t len, glen;
  _cleanup_free_ char *tar = tar_of(basic_ents, AGSX_ARRAY_SIZE(basic_ents), &len);
  _cleanup_free_ char *gz = gzip_buf(tar, len, &glen);
  char want[AGSX_DIGEST_LEN], got[AGSX_DIGEST_LEN] = "";
  agsx_sha256_buf(tar, len, want);
  struct fx f;
  fx_init(&f);
  _cleanup_close_ int fd = open(f.root, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  agsx_write_all(fd, gz, glen);
  lseek(fd, 0, SEEK_SET);
  agsx_error_t err = NULL;
  struct agsx_layer_limits lim = limits();
  int r = agsx_layer_unpack_fd(fd, AGSX_COMPRESSION_AUTO, f.destfd, &lim, got, &err);
  tap_ok(r == 0 && strcmp(got, want) == 0, "unpack from an fd: %s", err ? err->msg : got);
  tap_ok(check_stat(&f, "bin/sh", S_IFREG | 04755, 0, 0, 1111111), "from fd: content there");
  agsx_error_free(&err);
  fx_done(&f);
}

static void test_empty_layer(void) {
  static const char zeros[1024];
  /* Docker's empty layer: two zero blocks. */
  struct fx f;
  fx_init(&f);
  agsx_error_t err = NULL;
  char got[AGSX_DIGEST_LEN] = "";
  struct agsx_layer_limits lim = limits();
  int r = unpack(&f, zeros, sizeof(zeros), AGSX_COMPRESSION_AUTO, &lim, got, &err);
  tap_ok(r == 0, "empty layer (1024 zero bytes) unpacks: %s", err ? err->msg : "ok");
  tap_is_str(got, "sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef",
             "empty layer diff_id");
  agsx_error_free(&err);
  fx_done(&f);
}

static void test_whiteouts(void) {
  static const struct ent ents[] = {
      {.path = "a/", .mode = S_IFDIR | 0755},
      {.path = "a/b", .data = "to be whited out"},
      {.path = "a/sub/", .mode = S_IFDIR | 0755},
      {.path = "a/sub/f", .data = "f"},
      {.path = "a/.wh.b"},
      {.path = "a/.wh.sub"},
      {.path = "a/.wh.gone"},
      {.path = "a/.wh..wh..opq"},
      {.path = "c/d/.wh..wh..opq"},
  };
  size_t len;
  _cleanup_free_ char *tar = tar_of(ents, AGSX_ARRAY_SIZE(ents), &len);
  struct fx f;
  fx_init(&f);
  agsx_error_t err = NULL;
  struct agsx_layer_limits lim = limits();
  int r = unpack(&f, tar, len, AGSX_COMPRESSION_AUTO, &lim, NULL, &err);
  tap_ok(r == 0, "whiteout layer unpacks: %s", err ? err->msg : "ok");
  agsx_error_free(&err);
  struct stat st;
  for (const char *const *p = (const char *const[]){"a/b", "a/sub", "a/gone", NULL}; *p; p++)
    tap_ok(fstatat(f.destfd, *p, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISCHR(st.st_mode) &&
               st.st_rdev == makedev(0, 0),
           "whiteout `%s` is a 0:0 char device", *p);
  tap_ok(!exists_at(f.destfd, "a/.wh.b"), "no .wh. file left");
  char v[8];
  tap_ok(xattr_at(&f, "a", "trusted.overlay.opaque", v, sizeof(v)) == 1 && v[0] == 'y',
         "opaque dir marked");
  tap_ok(xattr_at(&f, "c/d", "trusted.overlay.opaque", v, sizeof(v)) == 1 && v[0] == 'y',
         "opaque dir created and marked");
  tap_ok(!exists_at(f.destfd, "a/.wh..wh..opq"), "no opaque marker file");
  tap_ok(fx_untouched(&f), "whiteouts: nothing outside dest changed");
  fx_done(&f);
}

/* Later entries replace earlier ones; a directory over a directory keeps
 * what is inside. */
static void test_replace(void) {
  static const struct ent ents[] = {
      {.path = "d/", .mode = S_IFDIR | 0700},
      {.path = "d/keep", .data = "keep"},
      {.path = "d/", .mode = S_IFDIR | 0755, .uid = 5},
      {.path = "f", .data = "first"},
      {.path = "f", .data = "second"},
      {.path = "x/", .mode = S_IFDIR | 0755},
      {.path = "x/inner", .data = "gone"},
      {.path = "x", .data = "file now"},
      {.path = "y", .data = "file"},
      {.path = "y/", .mode = S_IFDIR | 0711},
      {.path = "l", .mode = S_IFLNK | 0777, .link = "f"},
      {.path = "l", .data = "not a link"},
  };
  size_t len;
  _cleanup_free_ char *tar = tar_of(ents, AGSX_ARRAY_SIZE(ents), &len);
  struct fx f;
  fx_init(&f);
  agsx_error_t err = NULL;
  struct agsx_layer_limits lim = limits();
  int r = unpack(&f, tar, len, AGSX_COMPRESSION_AUTO, &lim, NULL, &err);
  tap_ok(r == 0, "replacing layer unpacks: %s", err ? err->msg : "ok");
  agsx_error_free(&err);
  tap_ok(check_stat(&f, "d", S_IFDIR | 0755, 5, 0, 0) && exists_at(f.destfd, "d/keep"),
         "dir over dir keeps children, updates metadata");
  _cleanup_free_ char *c1 = read_at(&f, "f");
  tap_is_str(c1, "second", "file over file");
  _cleanup_free_ char *c2 = read_at(&f, "x");
  tap_is_str(c2, "file now", "file over dir");
  tap_ok(check_stat(&f, "y", S_IFDIR | 0711, 0, 0, 0), "dir over file");
  tap_ok(check_stat(&f, "l", S_IFREG | 0644, 0, 0, 0), "file over symlink");
  fx_done(&f);
}

static void test_sparse(void) {
  struct tar t;
  tar_begin(&t, 1 << 20, true);
  struct archive_entry *e = archive_entry_new();
  archive_entry_set_pathname(e, "sparse");
  archive_entry_set_mode(e, S_IFREG | 0644);
  archive_entry_set_size(e, 64 << 20);
  archive_entry_sparse_add_entry(e, 0, 4096);
  archive_entry_sparse_add_entry(e, 32 << 20, 4096);
  archive_write_header(t.a, e);
  _cleanup_free_ char *chunk = xzalloc(1 << 20);
  memset(chunk, 'a', 4096);
  for (int i = 0; i < 64; i++) {
    if (i == 32)
      memset(chunk, 'b', 4096);
    archive_write_data(t.a, chunk, 1 << 20);
    memset(chunk, 0, 4096);
  }
  archive_entry_free(e);
  size_t len;
  _cleanup_free_ char *tar = tar_end(&t, &len);
  struct fx f;
  fx_init(&f);
  agsx_error_t err = NULL;
  struct agsx_layer_limits lim = limits();
  int r = unpack(&f, tar, len, AGSX_COMPRESSION_AUTO, &lim, NULL, &err);
  struct stat st = {0};
  fstatat(f.destfd, "sparse", &st, 0);
  tap_ok(r == 0 && st.st_size == 64 << 20 && st.st_blocks * 512 < (1 << 20),
         "sparse file stays sparse (tar %zu bytes, size %lld, %lld blocks): %s", len,
         (long long)st.st_size, (long long)st.st_blocks, err ? err->msg : "ok");
  agsx_error_free(&err);
  fx_done(&f);
}

static void test_limits_default(void) {
  struct agsx_layer_limits lim;
  unsetenv("AGSX_MAX_LAYER_SIZE");
  agsx_layer_limits_default(&lim);
  tap_ok(lim.max_bytes == (uint64_t)64 << 30 && lim.max_entries == 2000000 &&
             lim.max_path == 4096 && lim.max_depth == 256,
         "default limits");
  setenv("AGSX_MAX_LAYER_SIZE", "100m", 1);
  agsx_layer_limits_default(&lim);
  tap_is_int(lim.max_bytes, 100 << 20, "AGSX_MAX_LAYER_SIZE=100m");
  setenv("AGSX_MAX_LAYER_SIZE", "lots", 1);
  enum agsx_log_level saved = agsx_log_level;
  agsx_log_level = AGSX_LOG_ERROR; /* the warning is expected */
  agsx_layer_limits_default(&lim);
  agsx_log_level = saved;
  tap_ok(lim.max_bytes == (uint64_t)64 << 30, "invalid AGSX_MAX_LAYER_SIZE ignored");
  unsetenv("AGSX_MAX_LAYER_SIZE");
}

static void test_hostile_names(void) {
  _cleanup_free_ char *up = xasprintf("../%s", escape_name);
  _cleanup_free_ char *abs = xasprintf("/tmp/%s", escape_name);
  _cleanup_free_ char *mid = xasprintf("a/../../%s", escape_name);
  _cleanup_free_ char *dots = xasprintf("./../%s", escape_name);
  hostile("`../x`", (struct ent[]){{.path = up, .data = "x"}}, 1, "path contains `..`");
  {
    /* Absolute names are neutralised: they land inside the layer. */
    struct fx f;
    fx_init(&f);
    agsx_error_t err = NULL;
    size_t len;
    _cleanup_free_ char *tar = tar_of((struct ent[]){{.path = abs, .data = "x"}}, 1, &len);
    struct agsx_layer_limits def = limits();
    int r = unpack(&f, tar, len, AGSX_COMPRESSION_AUTO, &def, NULL, &err);
    _cleanup_free_ char *inside = xasprintf("tmp/%s", escape_name);
    tap_ok(r == 0 && exists_at(f.destfd, inside) && fx_untouched(&f),
           "`/abs`: neutralised to a path inside dest: %s", err ? err->msg : "ok");
    agsx_error_free(&err);
    fx_done(&f);
  }
  hostile("`a/../../x`", (struct ent[]){{.path = "a/", .mode = S_IFDIR | 0755}, {.path = mid}}, 2,
          "path contains `..`");
  hostile("`./../x`", (struct ent[]){{.path = dots, .data = "x"}}, 1, "`..`");
  hostile("`..` dir", (struct ent[]){{.path = "../", .mode = S_IFDIR | 0755}}, 1, "`..`");
  hostile("symlink named `..`",
          (struct ent[]){{.path = "a/..", .mode = S_IFLNK | 0777, .link = "/"}}, 1, "`..`");
  hostile("empty component", (struct ent[]){{.path = "a//b", .data = "x"}}, 1, "invalid path");
  hostile("error names the entry", (struct ent[]){{.path = up, .data = "x"}}, 1, escape_name);
}

/* A symlink to "/" (or up and out) followed by an entry through it: the
 * entry lands inside dest, the canary is untouched. */
static void test_symlink_escapes(void) {
  const char *rootbase = NULL;
  struct fx f;
  fx_init(&f);
  rootbase = strrchr(f.root, '/') + 1;
  _cleanup_free_ char *via_root = xasprintf("evil/tmp/%s/canary/file", rootbase);
  _cleanup_free_ char *via_up = xasprintf("up/%s", escape_name);
  _cleanup_free_ char *canary_abs = xasprintf("%s/canary", f.root);
  _cleanup_free_ char *canary_file = xasprintf("%s/canary/file", f.root);
  _cleanup_free_ char *via_abs = xasprintf("cdir/%s", escape_name);
  const struct ent ents[] = {
      {.path = "evil", .mode = S_IFLNK | 0777, .link = "/"},
      {.path = via_root, .data = "pwned"},
      {.path = "up", .mode = S_IFLNK | 0777, .link = "../../.."},
      {.path = via_up, .data = "pwned"},
      {.path = "cdir", .mode = S_IFLNK | 0777, .link = canary_abs},
      {.path = via_abs, .data = "pwned"},
      {.path = "cfile", .mode = S_IFLNK | 0777, .link = canary_file},
      {.path = "cfile", .data = "pwned"}, /* over the symlink, not through it */
      {.path = "chl", .hardlink = "cfile"},
      {.path = "evil/etc/", .mode = S_IFDIR | 0700},
  };
  size_t len;
  _cleanup_free_ char *tar = tar_of(ents, AGSX_ARRAY_SIZE(ents), &len);
  agsx_error_t err = NULL;
  struct agsx_layer_limits lim = limits();
  int r = unpack(&f, tar, len, AGSX_COMPRESSION_AUTO, &lim, NULL, &err);
  tap_ok(r == 0, "symlink escapes: layer unpacks (inside dest): %s", err ? err->msg : "ok");
  agsx_error_free(&err);
  tap_ok(fx_untouched(&f), "symlink escapes: canary untouched, nothing outside");
  _cleanup_free_ char *in_root = xasprintf("tmp/%s/canary/file", rootbase);
  _cleanup_free_ char *c1 = read_at(&f, in_root);
  tap_is_str(c1, "pwned", "`evil -> /` then `evil/...`: written inside dest");
  _cleanup_free_ char *c2 = read_at(&f, escape_name);
  tap_is_str(c2, "pwned", "`up -> ../../..` then `up/x`: written at dest/x");
  _cleanup_free_ char *in_abs = xasprintf("%s/%s", canary_abs + 1, escape_name);
  _cleanup_free_ char *c3 = read_at(&f, in_abs);
  tap_is_str(c3, "pwned", "absolute symlink to the canary dir: clamped inside dest");
  tap_ok(check_stat(&f, "cfile", S_IFREG | 0644, 0, 0, 0), "file over symlink replaces the link");
  tap_ok(check_stat(&f, "etc", S_IFDIR | 0700, 0, 0, 0), "dir through `evil` lands in dest/etc");
  fx_done(&f);

  /* Each hostile symlink case on its own, checking /, /tmp and the canary. */
  const struct ent up_only[] = {{.path = "up", .mode = S_IFLNK | 0777, .link = "../../.."},
                                {.path = via_up, .data = "pwned"}};
  size_t ulen;
  _cleanup_free_ char *utar = tar_of(up_only, 2, &ulen);
  fx_init(&f);
  r = unpack(&f, utar, ulen, AGSX_COMPRESSION_AUTO, &lim, NULL, &err);
  tap_ok(r == 0 && exists_at(f.destfd, escape_name) && fx_untouched(&f),
         "`up -> ../../..`: clamped to dest, nothing outside: %s", err ? err->msg : "ok");
  agsx_error_free(&err);
  fx_done(&f);
}

static void test_hostile_hardlinks(void) {
  struct stat before, after;
  stat("/etc/passwd", &before);
  hostile("hardlink to `../../etc/passwd`",
          (struct ent[]){{.path = "pw", .hardlink = "../../etc/passwd"}}, 1, "`..`");
  hostile("hardlink to `/etc/passwd`", (struct ent[]){{.path = "pw", .hardlink = "/etc/passwd"}}, 1,
          "hardlink target `etc/passwd`");
  hostile("hardlink through a symlink to /etc",
          (struct ent[]){{.path = "e", .mode = S_IFLNK | 0777, .link = "/etc"},
                         {.path = "pw", .hardlink = "e/passwd"}},
          2, "No such file");
  hostile("hardlink to a missing target", (struct ent[]){{.path = "pw", .hardlink = "nothere"}}, 1,
          "hardlink target `nothere`");
  hostile("hardlink to a directory",
          (struct ent[]){{.path = "d/", .mode = S_IFDIR | 0755}, {.path = "pw", .hardlink = "d"}},
          2, "is a directory");
  hostile("hardlink to the root", (struct ent[]){{.path = "pw", .hardlink = "./"}}, 1,
          "layer root");
  stat("/etc/passwd", &after);
  tap_ok(before.st_nlink == after.st_nlink && before.st_ctime == after.st_ctime,
         "/etc/passwd link count unchanged");
  /* A hardlink to a symlink that points out links the symlink, not its target. */
  struct fx f;
  fx_init(&f);
  _cleanup_free_ char *cfile = xasprintf("%s/canary/file", f.root);
  const struct ent ents[] = {{.path = "s", .mode = S_IFLNK | 0777, .link = cfile},
                             {.path = "hl", .hardlink = "s"}};
  size_t len;
  _cleanup_free_ char *tar = tar_of(ents, 2, &len);
  agsx_error_t err = NULL;
  struct agsx_layer_limits lim = limits();
  int r = unpack(&f, tar, len, AGSX_COMPRESSION_AUTO, &lim, NULL, &err);
  struct stat st = {0};
  fstatat(f.destfd, "hl", &st, AT_SYMLINK_NOFOLLOW);
  tap_ok(r == 0 && S_ISLNK(st.st_mode) && fx_untouched(&f),
         "hardlink to an outward symlink links the symlink itself: %s", err ? err->msg : "ok");
  agsx_error_free(&err);
  fx_done(&f);
}

static void test_devices(void) {
  static const struct ent ents[] = {
      {.path = "dev/null", .mode = S_IFCHR | 0666, .rdev = 0x103},
      {.path = "dev/sda", .mode = S_IFBLK | 0660, .rdev = 0x800},
      {.path = "dev/ok", .data = "ok"},
  };
  size_t len;
  _cleanup_free_ char *tar = tar_of(ents, AGSX_ARRAY_SIZE(ents), &len);
  struct fx f;
  fx_init(&f);
  agsx_error_t err = NULL;
  struct agsx_layer_limits lim = limits();
  enum agsx_log_level saved = agsx_log_level;
  agsx_log_level = AGSX_LOG_ERROR; /* the skip warnings are expected */
  int r = unpack(&f, tar, len, AGSX_COMPRESSION_AUTO, &lim, NULL, &err);
  agsx_log_level = saved;
  tap_ok(r == 0, "device nodes: layer unpacks: %s", err ? err->msg : "ok");
  tap_ok(!exists_at(f.destfd, "dev/null") && !exists_at(f.destfd, "dev/sda") &&
             exists_at(f.destfd, "dev/ok"),
         "char and block devices skipped");
  tap_ok(fx_untouched(&f), "devices: nothing outside dest changed");
  agsx_error_free(&err);
  fx_done(&f);
}

static void test_bombs(void) {
  struct agsx_layer_limits lim = limits();
  lim.max_bytes = 1 << 20;
  /* One 10 MiB file of zeros: ~10 KiB of gzip. */
  struct tar t;
  tar_begin(&t, 12 << 20, false);
  tar_add(&t, (struct ent){.path = escape_name, .size = 10 << 20});
  size_t len, glen;
  _cleanup_free_ char *tar = tar_end(&t, &len);
  _cleanup_free_ char *gz = gzip_buf(tar, len, &glen);
  hostile_refused("gzip bomb (10 MiB file, 1 MiB limit)", gz, glen, &lim, "limit of 1048576 bytes");
  /* Many empty files, each within the limit: the stream count catches it. */
  tar_begin(&t, 4 << 20, false);
  for (int i = 0; i < 3000; i++) {
    _cleanup_free_ char *name = xasprintf("f%d", i);
    tar_add(&t, (struct ent){.path = name, .data = ""});
  }
  _cleanup_free_ char *tar2 = tar_end(&t, &len);
  _cleanup_free_ char *gz2 = gzip_buf(tar2, len, &glen);
  hostile_refused("gzip bomb (many files)", gz2, glen, &lim,
                  "decompressed size exceeds the limit of 1048576 bytes");
  /* A small tar followed by 4 MiB of zeros: caught while draining. */
  _cleanup_free_ char *tar4 = tar_of((struct ent[]){{.path = "a", .data = "a"}}, 1, &len);
  _cleanup_free_ char *padded = xzalloc(len + (4 << 20));
  memcpy(padded, tar4, len);
  _cleanup_free_ char *gz4 = gzip_buf(padded, len + (4 << 20), &glen);
  hostile_refused("gzip bomb (zeros after the tar)", gz4, glen, &lim,
                  "decompressed size exceeds the limit of 1048576 bytes");
  /* A sparse entry claiming a huge size. */
  tar_begin(&t, 1 << 20, true);
  struct archive_entry *e = archive_entry_new();
  archive_entry_set_pathname(e, escape_name);
  archive_entry_set_mode(e, S_IFREG | 0644);
  archive_entry_set_size(e, (la_int64_t)1 << 40);
  archive_entry_sparse_add_entry(e, 0, 512);
  archive_write_header(t.a, e);
  archive_entry_free(e);
  archive_write_data(t.a, "x", 1);
  _cleanup_free_ char *tar3 = tar_end(&t, &len);
  hostile_refused("sparse bomb (1 TiB apparent size)", tar3, len, &lim, "limit");
}

static void test_hostile_limits(void) {
  /* 300 components, under the byte limit. */
  _cleanup_free_ char *deep = xmalloc(300 * 2 + 1);
  for (int i = 0; i < 300; i++)
    memcpy(deep + 2 * i, "a/", 2);
  deep[599] = '\0';
  hostile("path depth 300", (struct ent[]){{.path = deep, .data = "x"}}, 1,
          "deeper than 256 components");
  /* 5000 bytes in components of 100. */
  _cleanup_free_ char *longname = xmalloc(5001);
  memset(longname, 'n', 5000);
  for (int i = 100; i < 5000; i += 101)
    longname[i] = '/';
  longname[5000] = '\0';
  hostile("name of 5000 bytes", (struct ent[]){{.path = longname, .data = "x"}}, 1,
          "longer than 4096 bytes");
  _cleanup_free_ char *comp = xmalloc(301);
  memset(comp, 'c', 300);
  comp[300] = '\0';
  hostile("component of 300 bytes", (struct ent[]){{.path = comp, .data = "x"}}, 1,
          "component longer than 255 bytes");
  struct ent many[11];
  char names[11][16];
  for (int i = 0; i < 11; i++) {
    snprintf(names[i], sizeof(names[i]), "e%d", i);
    many[i] = (struct ent){.path = names[i], .data = "x"};
  }
  size_t len;
  _cleanup_free_ char *tar = tar_of(many, 11, &len);
  struct agsx_layer_limits lim = limits();
  lim.max_entries = 10;
  hostile_refused("11 entries, limit 10", tar, len, &lim, "more than 10 entries");
  lim.max_entries = 11;
  struct fx f;
  fx_init(&f);
  agsx_error_t err = NULL;
  tap_ok(unpack(&f, tar, len, AGSX_COMPRESSION_AUTO, &lim, NULL, &err) == 0,
         "11 entries, limit 11: accepted");
  agsx_error_free(&err);
  fx_done(&f);
}

/* Entries that descend through the layer's own symlink: `l` points at the
 * deepest directory so far, `l/d/` makes one more level. LEVELS such steps
 * build d/d/.../d LEVELS+1 deep from names of two components; LAST is the
 * final entry's name under `l`. */
static char *descending_tar(int levels, const char *last, mode_t last_mode, size_t *ret_len) {
  struct tar t;
  tar_begin(&t, 4 << 20, false);
  tar_add(&t, (struct ent){.path = "d/", .mode = S_IFDIR | 0755});
  _cleanup_free_ char *target = xmalloc(2 * (size_t)levels + 4);
  strcpy(target, "d");
  for (int i = 0; i < levels; i++) {
    tar_add(&t, (struct ent){.path = "l", .mode = S_IFLNK | 0777, .link = target});
    bool end = i == levels - 1;
    tar_add(&t, (struct ent){.path = end ? last : "l/d/",
                             .mode = end ? last_mode : S_IFDIR | 0755,
                             .data = end && S_ISREG(last_mode) ? "x" : NULL});
    strcat(target, "/d");
  }
  return tar_end(&t, ret_len);
}

static void test_hostile_depth(void) {
  size_t len;
  /* 300 real levels, every name two components long: refused at 256. */
  _cleanup_free_ char *tar = descending_tar(300, "l/d/", S_IFDIR | 0755, &len);
  hostile_refused("directories descending through their own symlink", tar, len, NULL,
                  "directory deeper than 256 levels below the layer root");
  /* The same with the last level an implicit parent of a file. */
  _cleanup_free_ char *tar2 = descending_tar(256, "l/d/f", S_IFREG | 0644, &len);
  hostile_refused("an implicit parent past the depth through a symlink", tar2, len, NULL,
                  "directory deeper than 256 levels below the layer root");
  /* Up to the limit, through the symlink or not, is fine. */
  _cleanup_free_ char *ok = descending_tar(255, "l/d/f", S_IFREG | 0644, &len);
  struct fx f;
  fx_init(&f);
  agsx_error_t err = NULL;
  struct agsx_layer_limits lim = limits();
  int r = unpack(&f, ok, len, AGSX_COMPRESSION_AUTO, &lim, NULL, &err);
  tap_ok(r == 0, "256 real levels through a symlink: accepted: %s", err ? err->msg : "ok");
  agsx_error_free(&err);
  fx_done(&f);
}

static void test_hostile_whiteouts(void) {
  hostile("`.wh..wh.evil`", (struct ent[]){{.path = "a/.wh..wh.evil"}}, 1,
          "unknown whiteout metadata");
  hostile("`.wh.` alone", (struct ent[]){{.path = "a/.wh."}}, 1, "invalid whiteout");
  hostile("`.wh..`", (struct ent[]){{.path = "a/.wh.."}}, 1, "invalid whiteout");
  hostile("`.wh...`", (struct ent[]){{.path = "a/.wh..."}}, 1, "invalid whiteout");
  _cleanup_free_ char *wh = xasprintf("../.wh.%s", escape_name);
  hostile("whiteout outside", (struct ent[]){{.path = wh}}, 1, "`..`");
  /* Whiteouts through a symlink to the canary dir: with no such path inside
   * dest the parent cannot be made (refused); with a copy of the path inside
   * dest, the whiteout lands there. Either way the canary stays. */
  for (int mirror = 0; mirror < 2; mirror++) {
    struct fx f;
    fx_init(&f);
    _cleanup_free_ char *cdir = xasprintf("%s/canary", f.root);
    _cleanup_free_ char *inside = xasprintf("%s/", cdir + 1);
    const struct ent ents[] = {{.path = inside, .mode = S_IFDIR | 0755},
                               {.path = "c", .mode = S_IFLNK | 0777, .link = cdir},
                               {.path = "c/.wh.file"},
                               {.path = "c/.wh..wh..opq"}};
    size_t len;
    _cleanup_free_ char *tar = tar_of(ents + !mirror, AGSX_ARRAY_SIZE(ents) - !mirror, &len);
    agsx_error_t err = NULL;
    struct agsx_layer_limits lim = limits();
    int r = unpack(&f, tar, len, AGSX_COMPRESSION_AUTO, &lim, NULL, &err);
    char v[8];
    tap_ok(fx_untouched(&f) && getxattr(cdir, "trusted.overlay.opaque", v, sizeof(v)) < 0,
           "whiteouts through an outward symlink (%s): canary untouched",
           mirror ? "mirrored inside" : "dangling inside");
    _cleanup_free_ char *whpath = xasprintf("%s/file", cdir + 1);
    struct stat st = {0};
    if (mirror)
      tap_ok(r == 0 && fstatat(f.destfd, whpath, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                 S_ISCHR(st.st_mode) && xattr_at(&f, cdir + 1, "trusted.overlay.opaque", v, 8) == 1,
             "whiteouts through the symlink land inside dest: %s", err ? err->msg : "ok");
    else
      tap_ok(r < 0 && err && strstr(err->msg, "parent `c`: create directory"),
             "dangling symlink as parent refused: %s", err ? err->msg : "accepted");
    agsx_error_free(&err);
    fx_done(&f);
  }
}

static void test_no_fd_leak(void) {
  int before = open("/dev/null", O_RDONLY | O_CLOEXEC);
  close(before);
  size_t len, glen;
  _cleanup_free_ char *tar = tar_of(basic_ents, AGSX_ARRAY_SIZE(basic_ents), &len);
  _cleanup_free_ char *gz = gzip_buf(tar, len, &glen);
  for (int i = 0; i < 3; i++) {
    struct fx f;
    fx_init(&f);
    agsx_error_t err = NULL;
    struct agsx_layer_limits lim = limits();
    unpack(&f, gz, i == 2 ? glen / 2 : glen, AGSX_COMPRESSION_AUTO, &lim, NULL, &err);
    agsx_error_free(&err);
    fx_done(&f);
  }
  int after = open("/dev/null", O_RDONLY | O_CLOEXEC);
  tap_is_int(after, before, "no fd leaked (success and failure paths)");
  close(after);
}

/* The uncompressed stream of a layer, as docker-archive writers need it:
 * byte for byte the tar, its diff_id and size, and the bomb limit. */
static void test_decompress(void) {
  size_t len, glen;
  _cleanup_free_ char *tar = tar_of(basic_ents, AGSX_ARRAY_SIZE(basic_ents), &len);
  _cleanup_free_ char *gz = gzip_buf(tar, len, &glen);
  char want[AGSX_DIGEST_LEN], got[AGSX_DIGEST_LEN] = "";
  agsx_sha256_buf(tar, len, want);
  struct fx f;
  fx_init(&f);
  _cleanup_close_ int in = open(f.root, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  _cleanup_close_ int out = open(f.root, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  agsx_write_all(in, gz, glen);
  lseek(in, 0, SEEK_SET);
  agsx_error_t err = NULL;
  uint64_t size = 0;
  int r = agsx_layer_decompress_fd(in, AGSX_COMPRESSION_GZIP, out, NULL, got, &size, &err);
  tap_ok(r == 0 && strcmp(got, want) == 0 && size == len, "decompress: diff_id and size: %s",
         err ? err->msg : got);
  _cleanup_free_ char *back = NULL;
  size_t blen = 0;
  lseek(out, 0, SEEK_SET);
  tap_ok(agsx_read_fd(out, len + 1, &back, &blen, NULL) == 0 && blen == len &&
             memcmp(back, tar, len) == 0,
         "decompress: the tar stream, byte for byte");
  agsx_error_free(&err);
  struct agsx_layer_limits lim = limits();
  lim.max_bytes = len / 2;
  lseek(in, 0, SEEK_SET);
  r = agsx_layer_decompress_fd(in, AGSX_COMPRESSION_AUTO, out, &lim, got, &size, &err);
  tap_ok(r < 0 && err && strstr(err->msg, "exceeds the limit"), "decompress: bounded: %s",
         err ? err->msg : "no error");
  agsx_error_free(&err);
  fx_done(&f);
}

int main(void) {
  snprintf(escape_name, sizeof(escape_name), "agsx-escape-%d", (int)getpid());
  if (geteuid() != 0) {
    printf("1..0 # SKIP layer tests need root (chown, mknod, trusted.* xattrs)\n");
    return 0;
  }
  test_limits_default();
  test_basic();
  test_compression();
  test_from_fd();
  test_decompress();
  test_empty_layer();
  test_whiteouts();
  test_replace();
  test_sparse();
  test_hostile_names();
  test_symlink_escapes();
  test_hostile_hardlinks();
  test_devices();
  test_bombs();
  test_hostile_limits();
  test_hostile_depth();
  test_hostile_whiteouts();
  test_no_fd_leak();
  return tap_done();
}
