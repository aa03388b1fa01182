/* agsx — build: COPY and ADD: sources from the context, another stage or an
 * image, local archives unpacked by ADD, ownership, the copy layer;
 * and WORKDIR's layer, which writes missing parents the same way. */
#include "config.h"

#include "image/build/build-internal.h"

#include "image/tarentry.h"

#include "sandbox/passwd.h"
#include "util/json.h"

#include <archive.h>
#include <archive_entry.h>
#include <ctype.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

/* ---- COPY and ADD ------------------------------------------------------------------------------- */

struct centry {
  char *dst;  /* path in the layer */
  int rootfd; /* borrowed: the context or a layer */
  char *src;  /* real path under rootfd ("" = rootfd itself) */
  struct stat st;
  char *link;
};

struct copy {
  struct centry *v;
  size_t n;
  int *fds; /* layer fds to close */
  size_t n_fds;
  char **archives; /* ADD: local archives (context paths) and, after each, its destination */
  mode_t chmod_bits;
  bool has_chmod, has_chown;
  uid_t uid;
  gid_t gid;
  struct agsx_strset entries; /* destinations of the entries */
  struct agsx_strset emitted; /* parent directories written (per pass) */
};

static void copy_clear(struct copy *c) {
  agsx_strset_clear(&c->entries);
  agsx_strset_clear(&c->emitted);
  for (size_t i = 0; i < c->n; i++) {
    free(c->v[i].dst);
    free(c->v[i].src);
    free(c->v[i].link);
  }
  free(c->v);
  for (size_t i = 0; i < c->n_fds; i++)
    close(c->fds[i]);
  free(c->fds);
  agsx_strv_free(c->archives);
}

static void support_filters(struct archive *a) {
  archive_read_support_filter_none(a);
  archive_read_support_filter_gzip(a);
  archive_read_support_filter_xz(a);
  archive_read_support_filter_zstd(a);
}

/* Is the context file FD a tar archive (plain, gzip, xz, zstd)?
 * ADD extracts those, as Docker does. */
static bool is_archive(int fd) {
  struct archive *a = archive_read_new();
  archive_read_support_format_tar(a);
  support_filters(a);
  struct archive_entry *ae;
  _cleanup_close_ int dup = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  bool r = dup >= 0 && archive_read_open_fd(a, dup, 1 << 16) == ARCHIVE_OK &&
           archive_read_next_header(a, &ae) == ARCHIVE_OK;
  archive_read_free(a);
  return r;
}

/* The shared tar-entry policy (tarentry.h) for ADD's archives: names are
 * read inside DST ("/x" is DST/x, "a//./b" is a/b, as Docker does), ".."
 * is refused. */
static void add_policy(struct agsx_tarentry_policy *ret) {
  agsx_tarentry_policy_default(ret);
  ret->max_entries = MAX_COPY_ENTRIES;
  ret->collapse = true;
}

/* Writes the entry T of an archive (read from A) under DST. Devices and
 * sockets are skipped. */
static int extract_entry(struct copy *c, struct archive *a, const struct agsx_tarentry *t,
                         const char *src, const char *dst, struct lw *w, char *buf, size_t size,
                         agsx_error_t *err) {
  struct archive_entry *ae = t->ae;
  if (*t->path == '\0' || t->kind == AGSX_TAR_DEVICE || t->kind == AGSX_TAR_OTHER)
    return 0;
  _cleanup_free_ char *path = *dst ? xasprintf("%s/%s", dst, t->path) : xstrdup(t->path);
  mode_t type = archive_entry_filetype(ae);
  bool hl = t->kind == AGSX_TAR_HARDLINK;
  _cleanup_free_ char *hpath = NULL;
  if (hl)
    hpath = *dst ? xasprintf("%s/%s", dst, t->hardlink) : xstrdup(t->hardlink);
  mode_t mode = (type ? type : AE_IFREG) | (archive_entry_perm(ae) & 07777);
  if (c->has_chmod && type != AE_IFLNK)
    mode = (mode & S_IFMT) | c->chmod_bits;
  struct archive_entry *out = archive_entry_new();
  archive_entry_set_pathname(out, path);
  archive_entry_set_mode(out, hl ? (AE_IFREG | (mode & 07777)) : mode);
  archive_entry_set_uid(out, c->has_chown ? c->uid : (uid_t)archive_entry_uid(ae));
  archive_entry_set_gid(out, c->has_chown ? c->gid : (gid_t)archive_entry_gid(ae));
  archive_entry_set_mtime(out, archive_entry_mtime(ae), 0);
  if (hl)
    archive_entry_set_hardlink(out, hpath);
  else if (t->kind == AGSX_TAR_SYMLINK)
    archive_entry_set_symlink(out, t->symlink);
  if (!hl && type == AE_IFREG)
    archive_entry_set_size(out, archive_entry_size(ae));
  int r = 0;
  if (archive_write_header(w->a, out) != ARCHIVE_OK)
    r = agsx_error_set(err, 0, "write `%s`: %s", path, archive_error_string(w->a));
  archive_entry_free(out);
  if (r < 0 || hl || type != AE_IFREG)
    return r;
  for (;;) {
    la_ssize_t n = archive_read_data(a, buf, size);
    if (n == 0)
      return 0;
    if (n < 0)
      return agsx_error_set(err, 0, "`%s`: %s", src, archive_error_string(a));
    if (archive_write_data(w->a, buf, (size_t)n) != n)
      return agsx_error_set(err, 0, "write `%s`: %s", path, archive_error_string(w->a));
  }
}

/* Writes the entries of archive SRC (in the context) under DST. */
static int extract_into(struct build *b, struct copy *c, const char *src, const char *dst,
                        struct lw *w, agsx_error_t *err) {
  _cleanup_close_ int fd = agsx_open_beneath_nofollow(b->ctxfd, src, O_RDONLY, 0);
  if (fd < 0)
    return agsx_error_set(err, errno, "open `%s`", src);
  struct archive *a = archive_read_new();
  archive_read_support_format_tar(a);
  support_filters(a);
  int r = 0;
  if (archive_read_open_fd(a, fd, 1 << 16) != ARCHIVE_OK)
    r = agsx_error_set(err, 0, "`%s`: %s", src, archive_error_string(a));
  struct agsx_tarentry_policy policy;
  add_policy(&policy);
  struct agsx_tar_reader rd = {.a = a, .policy = &policy, .what = "archive entry"};
  const size_t size = 1 << 16;
  _cleanup_free_ char *buf = xmalloc(size);
  while (r == 0) {
    struct agsx_tarentry *t;
    int n = agsx_tar_reader_next(&rd, &t, err);
    if (n < 0)
      r = agsx_error_wrap(err, "`%s`", src);
    if (n <= 0)
      break;
    r = extract_entry(c, a, t, src, dst, w, buf, size, err);
  }
  agsx_tar_reader_clear(&rd);
  archive_read_free(a);
  return r;
}

static int add_entry(struct copy *c, const char *dst, int rootfd, const char *src,
                     const struct stat *st, agsx_error_t *err) {
  if (c->n >= MAX_COPY_ENTRIES)
    return agsx_error_set(err, 0, "more than %d files to copy", MAX_COPY_ENTRIES);
  c->v = xrealloc(c->v, (c->n + 1) * sizeof(*c->v));
  struct centry *e = &c->v[c->n++];
  memset(e, 0, sizeof(*e));
  e->dst = xstrdup(dst);
  agsx_strset_add(&c->entries, dst);
  e->rootfd = rootfd;
  e->src = xstrdup(src);
  e->st = *st;
  if (S_ISLNK(st->st_mode)) {
    char t[4096];
    _cleanup_free_ char *parent = xstrdup(src);
    char *slash = strrchr(parent, '/');
    _cleanup_close_ int pfd = -1;
    if (slash) {
      *slash = '\0';
      pfd = agsx_open_beneath_nofollow(rootfd, parent, O_PATH | O_DIRECTORY, 0);
    } else {
      pfd = fcntl(rootfd, F_DUPFD_CLOEXEC, 3);
    }
    ssize_t n = pfd >= 0 ? readlinkat(pfd, slash ? slash + 1 : src, t, sizeof(t) - 1) : -1;
    if (n < 0)
      return agsx_error_set(err, errno, "readlink `%s`", src);
    t[n] = '\0';
    e->link = xstrdup(t);
  }
  return 0;
}

/* lstat of PATH under ROOTFD, no symlink followed on the way. */
static int lstat_beneath(int rootfd, const char *path, struct stat *st) {
  if (*path == '\0')
    return fstat(rootfd, st);
  const char *slash = strrchr(path, '/');
  if (slash == NULL)
    return fstatat(rootfd, path, st, AT_SYMLINK_NOFOLLOW);
  _cleanup_free_ char *parent = xstrndup(path, (size_t)(slash - path));
  _cleanup_close_ int pfd = agsx_open_beneath_nofollow(rootfd, parent, O_PATH | O_DIRECTORY, 0);
  if (pfd < 0)
    return -1;
  return fstatat(pfd, slash + 1, st, AT_SYMLINK_NOFOLLOW);
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names of a directory. */
int agsx_build_list_dir(int dirfd, const char *path, char ***ret, agsx_error_t *err) {
  _cleanup_close_ int fd = *path
                               ? agsx_open_beneath_nofollow(dirfd, path, O_RDONLY | O_DIRECTORY, 0)
                               : openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "open `%s`", path);
  _cleanup_dir_ DIR *d = agsx_dir_stream(fd);
  if (d == NULL)
    return agsx_error_set(err, errno, "read `%s`", path);
  char **v = xzalloc(sizeof(char *));
  size_t n = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    agsx_strv_push(&v, de->d_name);
    n++;
  }
  qsort(v, n, sizeof(char *), cmp_name);
  *ret = v;
  return 0;
}

/* Adds SRC (under ROOTFD) as DST, and, for a directory, everything below. */
static int walk(struct build *b, struct copy *c, int rootfd, const char *src, const char *dst,
                bool from_context, bool layers_mode, agsx_error_t *err) {
  struct stat st;
  if (lstat_beneath(rootfd, src, &st) < 0)
    return agsx_error_set(err, errno, "`%s`", src);
  if (from_context && *src && agsx_dockerignore_excluded(&b->ignore, src) &&
      !(S_ISDIR(st.st_mode) && b->ignore.has_negation))
    return 0;
  if (layers_mode && agsx_build_is_whiteout(&st))
    return 0;
  bool excluded = from_context && *src && agsx_dockerignore_excluded(&b->ignore, src);
  if (*dst && !excluded && add_entry(c, dst, rootfd, src, &st, err) < 0)
    return -1;
  if (!S_ISDIR(st.st_mode))
    return 0;
  _cleanup_strv_ char **names = NULL;
  if (agsx_build_list_dir(rootfd, src, &names, err) < 0)
    return -1;
  for (size_t i = 0; names[i]; i++) {
    _cleanup_free_ char *s = *src ? xasprintf("%s/%s", src, names[i]) : xstrdup(names[i]);
    _cleanup_free_ char *d = *dst ? xasprintf("%s/%s", dst, names[i]) : xstrdup(names[i]);
    if (walk(b, c, rootfd, s, d, from_context, layers_mode, err) < 0)
      return -1;
  }
  return 0;
}

/* Is directory PATH of layer LFD opaque (layer.c marks those)? */
static bool getxattr_at_opaque(int lfd, const char *path, char v[4]) {
  _cleanup_close_ int fd = agsx_open_beneath_nofollow(lfd, path, O_RDONLY | O_DIRECTORY, 0);
  if (fd < 0)
    return false;
  ssize_t n = fgetxattr(fd, "trusted.overlay.opaque", v, 4);
  if (n < 0)
    n = fgetxattr(fd, "user.overlay.opaque", v, 4);
  return n == 1 && v[0] == 'y';
}

/* Whether PATH or one of its parents was whited out by an upper layer. */
static bool whited(const struct agsx_strset *wh, const char *path) {
  _cleanup_free_ char *p = xstrdup(path);
  for (;;) {
    if (agsx_strset_has(wh, p))
      return true;
    char *slash = strrchr(p, '/');
    if (slash == NULL)
      return false;
    *slash = '\0';
  }
}

/* One layer's part of a merged directory: entries no upper layer had. */
static int walk_layer(struct copy *c, int lfd, const char *src, const char *dst,
                      struct agsx_strset *seen, struct agsx_strset *wh, struct agsx_strset *next_wh,
                      agsx_error_t *err) {
  struct stat st;
  if (lstat_beneath(lfd, src, &st) < 0)
    return agsx_error_set(err, errno, "`%s`", src);
  if (whited(wh, dst))
    return 0;
  if (agsx_build_is_whiteout(&st)) {
    agsx_strset_add(next_wh, dst);
    return 0;
  }
  if (!agsx_strset_has(seen, dst)) {
    agsx_strset_add(seen, dst);
    if (add_entry(c, dst, lfd, src, &st, err) < 0)
      return -1;
  }
  if (!S_ISDIR(st.st_mode))
    return 0;
  _cleanup_strv_ char **names = NULL;
  if (agsx_build_list_dir(lfd, src, &names, err) < 0)
    return -1;
  for (size_t i = 0; names[i]; i++) {
    _cleanup_free_ char *s2 = xasprintf("%s/%s", src, names[i]);
    _cleanup_free_ char *d2 = *dst ? xasprintf("%s/%s", dst, names[i]) : xstrdup(names[i]);
    if (walk_layer(c, lfd, s2, d2, seen, wh, next_wh, err) < 0)
      return -1;
  }
  return 0;
}

static int cmp_centry(const void *a, const void *b) {
  return strcmp(((const struct centry *)a)->dst, ((const struct centry *)b)->dst);
}

/* A directory of another stage or image: the union of its layers, upper
 * ones winning, whiteouts hiding what is below them. */
static int walk_merged(struct build *b, struct copy *c, struct stage *from, const char *real,
                       const char *dst, agsx_error_t *err) {
  struct agsx_strset seen = {0}, wh = {0};
  size_t first = c->n;
  int r = 0;
  for (size_t i = from->n_layers; r == 0 && i-- > 0;) {
    int lfd = agsx_build_open_layer(b, from->layers[i].diff_id, err);
    if (lfd < 0) {
      r = -1;
      break;
    }
    c->fds = xrealloc(c->fds, (c->n_fds + 1) * sizeof(int));
    c->fds[c->n_fds++] = lfd;
    struct stat st;
    if (lstat_beneath(lfd, real, &st) < 0)
      continue; /* not in this layer */
    if (!S_ISDIR(st.st_mode))
      break; /* a file or a whiteout hides the directory below */
    struct agsx_strset next = {0};
    r = walk_layer(c, lfd, real, dst, &seen, &wh, &next, err);
    for (size_t k = 0; k < next.n; k++)
      agsx_strset_add(&wh, next.v[k]);
    agsx_strset_clear(&next);
    char v[4];
    if (getxattr_at_opaque(lfd, real, v))
      break;
  }
  agsx_strset_clear(&seen);
  agsx_strset_clear(&wh);
  qsort(c->v + first, c->n - first, sizeof(*c->v), cmp_centry);
  return r;
}

/* The real path of an O_PATH fd relative to ROOTFD's directory. */
static char *rel_path(int rootfd, int fd) {
  char p1[64], p2[64], a[4096], c[4096];
  snprintf(p1, sizeof(p1), "/proc/self/fd/%d", rootfd);
  snprintf(p2, sizeof(p2), "/proc/self/fd/%d", fd);
  ssize_t n1 = readlink(p1, a, sizeof(a) - 1), n2 = readlink(p2, c, sizeof(c) - 1);
  if (n1 < 0 || n2 < 0)
    return NULL;
  a[n1] = c[n2] = '\0';
  size_t l = (size_t)n1;
  if (strncmp(a, c, l) != 0 || (c[l] != '/' && c[l] != '\0'))
    return NULL;
  return xstrdup(c[l] == '/' ? c + l + 1 : "");
}

static bool has_glob(const char *s) { return strpbrk(s, "*?[") != NULL; }

/* Expands the glob components of PATTERN (clean, relative) against the
 * context, below DIR; matches are added to RET, sorted. */
static int glob_context(struct build *b, const char *dir, const char *pattern, char ***ret,
                        int depth, agsx_error_t *err) {
  if (depth > 64 || agsx_strv_len(*ret) > MAX_COPY_ENTRIES)
    return agsx_error_set(err, 0, "the pattern `%s` matches too much", pattern);
  size_t k = strcspn(pattern, "/");
  _cleanup_free_ char *comp = xstrndup(pattern, k);
  const char *rest = pattern[k] ? pattern + k + 1 : NULL;
  if (!has_glob(comp)) {
    _cleanup_free_ char *p = *dir ? xasprintf("%s/%s", dir, comp) : xstrdup(comp);
    struct stat st;
    if (rest == NULL)
      return lstat_beneath(b->ctxfd, p, &st) == 0 ? (agsx_strv_push(ret, p), 0) : 0;
    return lstat_beneath(b->ctxfd, p, &st) == 0 && S_ISDIR(st.st_mode)
               ? glob_context(b, p, rest, ret, depth + 1, err)
               : 0;
  }
  _cleanup_strv_ char **names = NULL;
  agsx_error_t e = NULL;
  if (agsx_build_list_dir(b->ctxfd, dir, &names, &e) < 0) {
    agsx_error_free(&e);
    return 0; /* not a directory: nothing matches */
  }
  for (size_t i = 0; names[i]; i++) {
    if (fnmatch(comp, names[i], FNM_PERIOD) != 0)
      continue;
    _cleanup_free_ char *p = *dir ? xasprintf("%s/%s", dir, names[i]) : xstrdup(names[i]);
    if (agsx_dockerignore_excluded(&b->ignore, p))
      continue;
    if (rest == NULL)
      agsx_strv_push(ret, p);
    else if (glob_context(b, p, rest, ret, depth + 1, err) < 0)
      return -1;
  }
  return 0;
}

/* Sources in the context: clean, beneath it (symlinks resolved inside it
 * only), globs in the last component. */
static int context_sources(struct build *b, const char *src, char ***ret, agsx_error_t *err) {
  _cleanup_free_ char *abs = xasprintf("/%s", src);
  _cleanup_free_ char *clean = agsx_build_clean_abs(abs);
  /* "../x" cleans to "x" above: refuse any ".." that climbs out first. */
  int depth = 0;
  for (const char *p = src; *p;) {
    size_t k = strcspn(p, "/");
    if (k == 2 && p[0] == '.' && p[1] == '.')
      depth--;
    else if (k && !(k == 1 && p[0] == '.'))
      depth++;
    if (depth < 0)
      return agsx_error_set(err, 0, "`%s` is outside the build context", src);
    p += k;
    if (*p == '/')
      p++;
  }
  *ret = xzalloc(sizeof(char *));
  if (!has_glob(clean)) {
    agsx_strv_push(ret, clean);
    return 0;
  }
  return glob_context(b, "", clean, ret, 0, err);
}

static int open_context_source(struct build *b, const char *path, agsx_error_t *err) {
  if (*path == '\0')
    return fcntl(b->ctxfd, F_DUPFD_CLOEXEC, 3);
  int fd = agsx_openat2(b->ctxfd, path, O_PATH, 0,
                        RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV);
  if (fd >= 0)
    return fd;
  if (errno == EXDEV)
    return agsx_error_set(err, 0, "`%s` leads outside the build context", path);
  if (errno == ENOENT)
    return agsx_error_set(err, 0, "`%s` not found in the build context", path);
  return agsx_error_set(err, errno, "`%s`", path);
}

static int resolve_chown(struct build *b, struct copy *c, const char *spec, agsx_error_t *err) {
  _cleanup_free_ char *pw = NULL, *gr = NULL, *s = NULL;
  size_t pwl = 0, grl = 0;
  if (agsx_build_expand_word(b, spec, &s, err) < 0)
    return -1;
  struct agsx_user u;
  if (agsx_build_read_from_layers(b, b->cur, "etc/passwd", &pw, &pwl, err) < 0 ||
      agsx_build_read_from_layers(b, b->cur, "etc/group", &gr, &grl, err) < 0 ||
      agsx_user_resolve(s, pw, pwl, gr, grl, &u, err) < 0)
    return agsx_error_wrap(err, "Dockerfile:%u: --chown", b->in->line);
  c->uid = u.uid;
  c->gid = u.gid;
  c->has_chown = true;
  return 0;
}

/* The parents of DST that are not entries themselves, once each, with
 * the metadata the stage's layers give them (else a root-owned 0755
 * directory): a layer that holds usr/bin/x must not turn /tmp into 0755. */
static void parent_entries(struct build *b, struct copy *c, const char *dst, struct lw *w,
                           agsx_sha256 *h, agsx_error_t *err) {
  _cleanup_free_ char *p = xstrdup(dst);
  for (char *s = strchr(p, '/'); s; s = strchr(s + 1, '/')) {
    *s = '\0';
    if (*p == '\0' || agsx_strset_has(&c->entries, p) || agsx_strset_has(&c->emitted, p)) {
      *s = '/';
      continue;
    }
    agsx_strset_add(&c->emitted, p);
    struct stat st = {.st_mode = S_IFDIR | 0755};
    agsx_error_t e = NULL;
    _cleanup_close_ int fd = agsx_build_lookup_in_layers_x(b, b->cur, p, false, NULL, &e);
    agsx_error_free(&e);
    if (fd >= 0)
      fstat(fd, &st);
    if (!S_ISDIR(st.st_mode))
      st.st_mode = S_IFDIR | 0755, st.st_uid = st.st_gid = 0;
    struct lentry le = {.path = p,
                        .mode = st.st_mode,
                        .uid = st.st_uid,
                        .gid = st.st_gid,
                        .mtime = st.st_mtime,
                        .fd = -1};
    if (h) {
      _cleanup_free_ char *d = xasprintf("P %s %o %u %u\n", p, st.st_mode, st.st_uid, st.st_gid);
      agsx_sha256_update(h, d, strlen(d));
    }
    if (w && agsx_lw_add(w, &le, err) < 0)
      return;
    *s = '/';
  }
}

static void hash_entry(agsx_sha256 *h, const struct centry *e) {
  _cleanup_free_ char *d =
      xasprintf("E %s %o %u %u %lld %lld %s\n", e->dst, e->st.st_mode, e->st.st_uid, e->st.st_gid,
                (long long)e->st.st_size, (long long)e->st.st_mtime, e->link ? e->link : "");
  agsx_sha256_update(h, d, strlen(d));
}

static int hash_content(agsx_sha256 *h, const struct centry *e, agsx_error_t *err) {
  if (!S_ISREG(e->st.st_mode))
    return 0;
  _cleanup_free_ char *what = xasprintf("`%s`", e->src);
  _cleanup_close_ int fd = agsx_check_regular(
      agsx_open_beneath_nofollow(e->rootfd, e->src, O_RDONLY | AGSX_O_UNTRUSTED, 0), what, err);
  if (fd < 0)
    return -1;
  const size_t size = 1 << 16;
  _cleanup_free_ char *buf = xmalloc(size);
  for (;;) {
    ssize_t n = agsx_read_all(fd, buf, size);
    if (n < 0)
      return agsx_error_set(err, errno, "read `%s`", e->src);
    if (n == 0)
      return 0;
    agsx_sha256_update(h, buf, (size_t)n);
  }
}

static int write_copy_layer(struct build *b, struct copy *c, struct lw *w, agsx_error_t *err) {
  for (size_t i = 0; i < c->n; i++) {
    const struct centry *e = &c->v[i];
    parent_entries(b, c, e->dst, w, NULL, err);
    if (*err)
      return -1;
    mode_t mode = e->st.st_mode;
    if (c->has_chmod && !S_ISLNK(mode))
      mode = (mode & S_IFMT) | c->chmod_bits;
    struct lentry le = {.path = e->dst,
                        .mode = mode,
                        .uid = c->has_chown ? c->uid : 0,
                        .gid = c->has_chown ? c->gid : 0,
                        .mtime = e->st.st_mtime,
                        .size = e->st.st_size,
                        .link = e->link,
                        .fd = -1};
    _cleanup_close_ int fd = -1;
    if (S_ISREG(mode)) {
      _cleanup_free_ char *what = xasprintf("`%s`", e->src);
      fd = agsx_check_regular(
          agsx_open_beneath_nofollow(e->rootfd, e->src, O_RDONLY | AGSX_O_UNTRUSTED, 0), what, err);
      if (fd < 0)
        return -1;
      le.fd = fd;
    } else if (!S_ISDIR(mode) && !S_ISLNK(mode)) {
      continue; /* devices, sockets, fifos are not copied */
    }
    if (agsx_lw_add(w, &le, err) < 0)
      return -1;
  }
  return 0;
}

/* Where the sources of one COPY/ADD go: DST_REL inside the image, a
 * directory (sources go below it) or the name of the one copy. */
struct copy_dst {
  const char *rel;
  bool dir;
};

/* The destination of source BASE: the directory itself for a directory
 * source, else a file in it or the destination's own name. */
static char *entry_dst(const struct copy_dst *d, bool is_dir, const char *base) {
  if (is_dir || !d->dir)
    return xstrdup(d->rel);
  return *d->rel ? xasprintf("%s/%s", d->rel, base) : xstrdup(base);
}

/* Whether the destination is a directory: spelled so, more than one source,
 * the image root, or (as BuildKit does) an existing directory. */
static bool dst_is_dir(struct build *b, struct stage *st, char **w, size_t n, const char *rel) {
  if (agsx_str_has_suffix(w[n - 1], "/") || n > 2 || agsx_str_has_suffix(w[n - 1], "/.") ||
      *rel == '\0')
    return true;
  agsx_error_t e = NULL;
  _cleanup_close_ int dfd = agsx_build_lookup_in_layers(b, st, rel, NULL, &e);
  struct stat dsb;
  agsx_error_free(&e);
  return dfd >= 0 && fstat(dfd, &dsb) == 0 && S_ISDIR(dsb.st_mode);
}

/* --chmod and --chown. */
static int copy_flags(struct build *b, struct copy *c, agsx_error_t *err) {
  const struct agsx_df_instr *in = b->in;
  const char *chmod_s = agsx_df_flag(in, "chmod", NULL);
  const char *chown_s = agsx_df_flag(in, "chown", NULL);
  if (chmod_s) {
    char *end;
    unsigned long m = strtoul(chmod_s, &end, 8);
    if (*chmod_s == '\0' || *end || m > 07777)
      return agsx_error_set(err, 0, "Dockerfile:%u: invalid --chmod `%s` (octal)", in->line,
                            chmod_s);
    c->has_chmod = true, c->chmod_bits = (mode_t)m;
  }
  if (chown_s && resolve_chown(b, c, chown_s, err) < 0)
    return -1;
  return 0;
}

/* --from: an earlier stage, or an image (into *IMG). *RET stays NULL without --from. */
static int copy_from(struct build *b, char **ret_name, struct stage *img, struct stage **ret,
                     agsx_error_t *err) {
  const char *from = agsx_df_flag(b->in, "from", NULL);
  if (from == NULL)
    return 0;
  if (agsx_build_expand_word(b, from, ret_name, err) < 0)
    return -1;
  *ret = agsx_build_find_stage(b, *ret_name);
  if (*ret)
    return 0;
  if (agsx_build_from_image(b, img, *ret_name, err) < 0) {
    agsx_build_line_err(b, err);
    return -1;
  }
  *ret = img;
  return 0;
}

/* COPY --from: SRC in the layers of stage FROM (named FROM_NAME). */
static int add_stage_source(struct build *b, struct copy *c, struct stage *from,
                            const char *from_name, const char *src, const struct copy_dst *d,
                            agsx_error_t *err) {
  _cleanup_free_ char *rel = agsx_build_clean_abs(src);
  int lfd = -1;
  _cleanup_close_ int fd = agsx_build_lookup_in_layers(b, from, rel, &lfd, err);
  if (fd < 0)
    return agsx_error_wrap(err, "Dockerfile:%u: COPY --from=%s", b->in->line, from_name);
  c->fds = xrealloc(c->fds, (c->n_fds + 1) * sizeof(int));
  c->fds[c->n_fds++] = lfd;
  _cleanup_free_ char *real = rel_path(lfd, fd);
  struct stat sb;
  fstat(fd, &sb);
  const char *base = strrchr(rel, '/') ? strrchr(rel, '/') + 1 : rel;
  _cleanup_free_ char *dst = entry_dst(d, S_ISDIR(sb.st_mode), base);
  if (real == NULL || (S_ISDIR(sb.st_mode) ? walk_merged(b, c, from, real, dst, err)
                                           : walk(b, c, lfd, real, dst, false, true, err)) < 0) {
    if (real == NULL)
      agsx_error_set(err, 0, "`%s`: cannot resolve", src);
    agsx_build_line_err(b, err);
    return -1;
  }
  return 0;
}

/* ADD of a local archive (FD, at context path REAL): remembered for
 * extraction and hashed. Returns 1 when it was one, 0 when not. */
static int add_archive(struct build *b, struct copy *c, agsx_sha256 *h, int fd, const char *real,
                       const struct stat *sb, const struct copy_dst *d, agsx_error_t *err) {
  if (b->in->cmd != AGSX_DF_ADD || !S_ISREG(sb->st_mode))
    return 0;
  char proc[64];
  snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
  _cleanup_close_ int rfd = open(proc, O_RDONLY | O_CLOEXEC);
  if (rfd < 0 || !is_archive(rfd))
    return 0;
  agsx_strv_push(&c->archives, real);
  agsx_strv_push(&c->archives, d->rel);
  struct centry ae = {.dst = (char *)"", .rootfd = b->ctxfd, .src = (char *)real, .st = *sb};
  hash_entry(h, &ae);
  if (hash_content(h, &ae, err) < 0) {
    agsx_build_line_err(b, err);
    return -1;
  }
  return 1;
}

/* One source in the build context, matched from a pattern of the instruction. */
static int add_context_source(struct build *b, struct copy *c, agsx_sha256 *h, const char *src,
                              const struct copy_dst *d, agsx_error_t *err) {
  unsigned line = b->in->line;
  _cleanup_close_ int fd = open_context_source(b, src, err);
  if (fd < 0) {
    agsx_build_line_err(b, err);
    return -1;
  }
  _cleanup_free_ char *real = rel_path(b->ctxfd, fd);
  if (real == NULL)
    return agsx_error_set(err, 0, "Dockerfile:%u: `%s` leads outside the build context", line, src);
  if (*real && agsx_dockerignore_excluded(&b->ignore, real))
    return agsx_error_set(err, 0,
                          "Dockerfile:%u: `%s` not found in the build context (excluded by "
                          ".dockerignore)",
                          line, src);
  struct stat sb;
  fstat(fd, &sb);
  int r = add_archive(b, c, h, fd, real, &sb, d, err);
  if (r != 0)
    return r < 0 ? -1 : 0;
  /* A symlink source is copied under its own name, with its target's
   * content (Docker). */
  const char *base = strrchr(src, '/') ? strrchr(src, '/') + 1 : src;
  _cleanup_free_ char *dst = entry_dst(d, S_ISDIR(sb.st_mode), base);
  if (walk(b, c, b->ctxfd, real, dst, true, false, err) < 0) {
    agsx_build_line_err(b, err);
    return -1;
  }
  return 0;
}

/* The sources in the build context that PATTERN matches. */
static int add_context_sources(struct build *b, struct copy *c, agsx_sha256 *h, const char *pattern,
                               struct copy_dst *d, agsx_error_t *err) {
  _cleanup_strv_ char **srcs = NULL;
  if (context_sources(b, pattern, &srcs, err) < 0) {
    agsx_build_line_err(b, err);
    return -1;
  }
  if (srcs[0] == NULL)
    return agsx_error_set(err, 0, "Dockerfile:%u: no file in the build context matches `%s`",
                          b->in->line, pattern);
  if (srcs[1])
    d->dir = true;
  for (size_t k = 0; srcs[k]; k++)
    if (add_context_source(b, c, h, srcs[k], d, err) < 0)
      return -1;
  return 0;
}

/* Every source of the instruction (words W[0..N-2]) into C. */
static int collect_sources(struct build *b, struct copy *c, agsx_sha256 *h, char **w, size_t n,
                           struct copy_dst *d, agsx_error_t *err) {
  _cleanup_free_ char *from_name = NULL;
  _cleanup_(agsx_build_stage_clear) struct stage img = {0};
  struct stage *from = NULL;
  if (copy_from(b, &from_name, &img, &from, err) < 0)
    return -1;
  for (size_t i = 0; i + 1 < n; i++) {
    if (b->in->cmd == AGSX_DF_ADD && (strstr(w[i], "://") || agsx_str_has_prefix(w[i], "git@")))
      return agsx_error_set(err, 0,
                            "Dockerfile:%u: ADD of a URL (`%s`) is not supported; download it "
                            "in a RUN step or into the context",
                            b->in->line, w[i]);
    int r = from ? add_stage_source(b, c, from, from_name, w[i], d, err)
                 : add_context_sources(b, c, h, w[i], d, err);
    if (r < 0)
      return -1;
  }
  return 0;
}

/* The cache key: the instruction, the parent, and every entry's metadata
 * and content, chained onto the stage's. */
static int chain_copy_key(struct build *b, struct copy *c, agsx_sha256 *h, agsx_error_t *err) {
  for (size_t i = 0; i < c->n; i++) {
    parent_entries(b, c, c->v[i].dst, NULL, h, err);
    hash_entry(h, &c->v[i]);
    if (hash_content(h, &c->v[i], err) < 0) {
      agsx_build_line_err(b, err);
      return -1;
    }
  }
  for (size_t i = 0; c->archives && c->archives[i]; i += 2) {
    _cleanup_free_ char *ad = xasprintf("%s/", c->archives[i + 1]);
    parent_entries(b, c, ad, NULL, h, err);
  }
  agsx_strset_clear(&c->emitted);
  char own[96];
  snprintf(own, sizeof(own), "O %d %u %u %d %o", c->has_chown, c->uid, c->gid, c->has_chmod,
           c->chmod_bits);
  agsx_sha256_update(h, own, strlen(own));
  char key[AGSX_DIGEST_LEN];
  agsx_sha256_final(h, key);
  agsx_build_chain(b->cur, key, strlen(key));
  return 0;
}

/* The layer: the entries, then each archive extracted into its directory. */
static int write_copy(struct build *b, struct copy *c, agsx_error_t *err) {
  struct stage *st = b->cur;
  struct lw lw;
  char record[256];
  int r = -1;
  if (agsx_lw_open(b, &lw, err) < 0) {
    agsx_lw_free(&lw);
    agsx_build_line_err(b, err);
    return -1;
  }
  int wr = write_copy_layer(b, c, &lw, err);
  for (size_t i = 0; wr == 0 && c->archives && c->archives[i]; i += 2) {
    /* An archive's destination is a directory: it gets an entry too. */
    _cleanup_free_ char *pdst = xasprintf("%s/", c->archives[i + 1]);
    parent_entries(b, c, pdst, &lw, NULL, err);
    wr = *err ? -1 : extract_into(b, c, c->archives[i], c->archives[i + 1], &lw, err);
  }
  if (wr == 0 && agsx_lw_commit(b, &lw, st, b->in->text, record, err) == 0) {
    agsx_build_cache_later(b, st->chain, record);
    r = 0;
  }
  agsx_lw_free(&lw);
  if (r < 0)
    agsx_build_line_err(b, err);
  return r;
}

int agsx_build_copy(struct build *b, agsx_error_t *err) {
  const struct agsx_df_instr *in = b->in;
  struct stage *st = b->cur;
  _cleanup_strv_ char **w = NULL;
  if (in->json)
    w = agsx_strv_concat(in->argv, NULL);
  else if (agsx_build_expand_words(b, in->args, &w, err) < 0)
    return -1;
  size_t n = agsx_strv_len(w);
  if (n < 2)
    return agsx_error_set(err, 0, "Dockerfile:%u: %s needs a source and a destination", in->line,
                          agsx_df_cmd_name(in->cmd));
  _cleanup_(copy_clear) struct copy c = {0};
  _cleanup_free_ char *dst_given = agsx_build_in_image_path(st, w[n - 1]);
  _cleanup_free_ char *dst_rel = agsx_build_resolve_dst(b, st, dst_given);
  struct copy_dst d = {.rel = dst_rel, .dir = dst_is_dir(b, st, w, n, dst_rel)};
  _cleanup_sha256_ agsx_sha256 *h = agsx_sha256_new();
  agsx_sha256_update(h, in->text, strlen(in->text));
  if (copy_flags(b, &c, err) < 0 || collect_sources(b, &c, h, w, n, &d, err) < 0 ||
      chain_copy_key(b, &c, h, err) < 0)
    return -1;
  agsx_build_banner(b);
  if (agsx_build_cache_hit(b, st, in->text))
    return 0;
  return write_copy(b, &c, err);
}

int agsx_build_workdir_layer(struct build *b, agsx_error_t *err) {
  struct stage *st = b->cur;
  _cleanup_free_ char *rel = agsx_build_clean_abs(st->workdir);
  if (*rel == '\0')
    return 0;
  agsx_error_t e = NULL;
  _cleanup_close_ int fd = agsx_build_lookup_in_layers(b, st, rel, NULL, &e);
  bool missing = fd < 0 && agsx_error_errno(&e) == ENOENT;
  agsx_error_free(&e);
  if (!missing)
    return 0;
  _cleanup_free_ char *key = xasprintf("WORKDIR mkdir %s", rel);
  agsx_build_chain(st, key, strlen(key));
  _cleanup_free_ char *created = xasprintf("WORKDIR %s", st->workdir);
  /* the history entry of the metadata step becomes this layer's */
  if (st->history && agsx_strv_len(st->history) > 0) {
    size_t n = agsx_strv_len(st->history);
    free(st->history[n - 1]);
    st->history[n - 1] = NULL;
  }
  if (agsx_build_cache_hit(b, st, created))
    return 0;
  struct lw lw;
  char record[256];
  int r = agsx_lw_open(b, &lw, err);
  if (r == 0) {
    _cleanup_free_ char *withdir = xasprintf("%s/", rel);
    struct copy c = {0};
    parent_entries(b, &c, withdir, &lw, NULL, err);
    copy_clear(&c);
    r = *err ? -1 : agsx_lw_commit(b, &lw, st, created, record, err);
    if (r == 0)
      agsx_build_cache_later(b, st->chain, record);
  }
  agsx_lw_free(&lw);
  return r < 0 ? agsx_build_line_err(b, err) : 0;
}
