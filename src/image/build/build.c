/* agsx — building images from Dockerfiles. See build.h. */
#include "config.h"

#include "image/build/build.h"
#include "image/build/dockerfile.h"
#include "image/build/dockerignore.h"
#include "util/json.h"
#include "net/net.h"
#include "net/network.h"
#include "image/registry/registry.h"
#include "net/relay.h"
#include "sandbox/lifecycle.h"
#include "sandbox/passwd.h"
#include "sandbox/sandbox.h"
#include "sandbox/seccomp.h"

#include <archive.h>
#include <ctype.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <poll.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <zlib.h>

#define MAX_STAGES 64
#define MAX_COPY_ENTRIES 200000
#define TAIL_MAX 2048
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* ---- small string lists ------------------------------------------------------------------ */

static void strv_add(char ***v, const char *s) {
  size_t n = agsx_strv_len(*v);
  *v = xrealloc(*v, (n + 2) * sizeof(char *));
  (*v)[n] = xstrdup(s);
  (*v)[n + 1] = NULL;
}

static char **strv_dup(char *const *v) {
  char **r = xzalloc(sizeof(char *));
  for (size_t i = 0; v && v[i]; i++)
    strv_add(&r, v[i]);
  return r;
}

/* Sets KEY=VALUE in a list of "K=V" strings, replacing an earlier KEY. */
static void kv_set(char ***v, const char *key, const char *value) {
  size_t kl = strlen(key);
  _cleanup_free_ char *e = xasprintf("%s=%s", key, value);
  for (size_t i = 0; *v && (*v)[i]; i++)
    if (strncmp((*v)[i], key, kl) == 0 && (*v)[i][kl] == '=') {
      free((*v)[i]);
      (*v)[i] = steal_ptr(&e);
      return;
    }
  strv_add(v, e);
}

static const char *kv_get(char *const *v, const char *key) {
  size_t kl = strlen(key);
  for (size_t i = 0; v && v[i]; i++)
    if (strncmp(v[i], key, kl) == 0 && v[i][kl] == '=')
      return v[i] + kl + 1;
  return NULL;
}

static bool strv_has(char *const *v, const char *s) {
  for (size_t i = 0; v && v[i]; i++)
    if (strcmp(v[i], s) == 0)
      return true;
  return false;
}

/* A set of strings (open addressing): paths already taken from an upper
 * layer, and whiteouts. */
struct sset {
  char **slot;
  size_t cap, n;
};

static size_t shash(const char *s) {
  size_t h = 1469598103934665603ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static bool sset_has(const struct sset *set, const char *s) {
  if (set->cap == 0)
    return false;
  for (size_t i = shash(s) & (set->cap - 1);; i = (i + 1) & (set->cap - 1)) {
    if (set->slot[i] == NULL)
      return false;
    if (strcmp(set->slot[i], s) == 0)
      return true;
  }
}

static void sset_add(struct sset *set, const char *s) {
  if (sset_has(set, s))
    return;
  if ((set->n + 1) * 2 > set->cap) {
    struct sset bigger = {.cap = set->cap ? set->cap * 2 : 256};
    bigger.slot = xzalloc(bigger.cap * sizeof(char *));
    for (size_t i = 0; i < set->cap; i++)
      if (set->slot[i]) {
        size_t k = shash(set->slot[i]) & (bigger.cap - 1);
        while (bigger.slot[k])
          k = (k + 1) & (bigger.cap - 1);
        bigger.slot[k] = set->slot[i];
      }
    free(set->slot);
    bigger.n = set->n;
    *set = bigger;
  }
  size_t k = shash(s) & (set->cap - 1);
  while (set->slot[k])
    k = (k + 1) & (set->cap - 1);
  set->slot[k] = xstrdup(s);
  set->n++;
}

static void sset_clear(struct sset *set) {
  for (size_t i = 0; i < set->cap; i++)
    free(set->slot[i]);
  free(set->slot);
  memset(set, 0, sizeof(*set));
}

/* ---- stages ---------------------------------------------------------------------------------- */

struct blayer {
  char diff_id[AGSX_DIGEST_LEN];
  char digest[AGSX_DIGEST_LEN];
  int64_t size;
  char *media_type;
};

struct stage {
  char *name; /* AS name (lowercase), or NULL */
  struct blayer *layers;
  size_t n_layers;
  char **env, **cmd, **entrypoint, **shell, **labels, **ports, **volumes;
  char *user, *workdir, *stopsignal;
  char **args;     /* ARGs declared in this stage, "K=V" */
  yajl_val base_history;
  char **history;  /* created_by of our steps, "0"/"1" empty_layer prefix */
  char chain[AGSX_DIGEST_LEN]; /* cache key of the state so far */
};

static void stage_clear(struct stage *st) {
  free(st->name);
  for (size_t i = 0; i < st->n_layers; i++)
    free(st->layers[i].media_type);
  free(st->layers);
  char **lists[] = {st->env, st->cmd, st->entrypoint, st->shell, st->labels, st->ports,
                    st->volumes, st->args, st->history};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(lists); i++)
    agsx_strv_free(lists[i]);
  free(st->user);
  free(st->workdir);
  free(st->stopsignal);
  if (st->base_history)
    yajl_tree_free(st->base_history);
  memset(st, 0, sizeof(*st));
}

struct build {
  struct agsx_store *s;
  const struct agsx_build_opts *o;
  struct agsx_dockerfile df;
  char *work;
  int workfd;
  int ctxfd;
  struct agsx_dockerignore ignore;
  int cachefd;
  char **meta;      /* ARGs before the first FROM, "K=V" */
  char **meta_decl; /* their names */
  char **used_args; /* build args some ARG consumed */
  struct stage stages[MAX_STAGES];
  size_t n_stages;
  struct stage *cur;
  const struct agsx_df_instr *in;
  struct agsx_seccomp_bpf bpf;
  bool have_bpf;
  /* cache records to write once the layers are committed */
  char **pending_cache; /* "keyhex\0record" pairs stored as two entries */
  struct agsx_build_result *res;
};

/* A signal on the caller's cancel fd (SIGINT, SIGTERM...) stops the build;
 * everything made so far is removed like for any failure. */
static bool cancelled(struct build *b) {
  if (b->o->cancel_fd < 0)
    return false;
  struct pollfd p = {.fd = b->o->cancel_fd, .events = POLLIN};
  return poll(&p, 1, 0) == 1;
}

static int line_err(struct build *b, agsx_error_t *err) {
  return agsx_error_wrap(err, "Dockerfile:%u", b->in->line);
}

static void progress(struct build *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void progress(struct build *b, const char *fmt, ...) {
  if (b->o->progress == NULL)
    return;
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  int n = vasprintf(&s, fmt, ap);
  va_end(ap);
  if (n >= 0)
    b->o->progress(s, (size_t)n, b->o->data);
  free(s);
}

/* "Step 3/9 (Dockerfile:4): COPY a /b" on the progress stream. */
static void banner(struct build *b) {
  progress(b, "Step %zu/%zu (Dockerfile:%u): %s\n", (size_t)(b->in - b->df.v) + 1, b->df.n,
           b->in->line, b->in->text);
}

/* The build argument NAME given on the command line, or NULL. */
static const char *build_arg(struct build *b, const char *name) {
  size_t kl = strlen(name);
  for (size_t i = 0; b->o->build_args && b->o->build_args[i]; i++) {
    const char *a = b->o->build_args[i];
    if (strncmp(a, name, kl) == 0 && a[kl] == '=')
      return a + kl + 1;
    if (strcmp(a, name) == 0)
      return getenv(name);
  }
  return NULL;
}

/* Variables for substitution: ENV wins over ARG (as in Docker). */
static const char *stage_lookup(const char *name, void *data) {
  struct build *b = data;
  const char *v = kv_get(b->cur->env, name);
  return v ? v : kv_get(b->cur->args, name);
}

static const char *meta_lookup(const char *name, void *data) {
  struct build *b = data;
  return kv_get(b->meta, name);
}

static int expand_word(struct build *b, const char *s, char **ret, agsx_error_t *err) {
  if (agsx_df_expand_word(s, b->df.escape, stage_lookup, b, ret, err) < 0)
    return line_err(b, err);
  return 0;
}

static int expand_words(struct build *b, const char *s, char ***ret, agsx_error_t *err) {
  if (agsx_df_expand_words(s, b->df.escape, stage_lookup, b, ret, err) < 0)
    return line_err(b, err);
  return 0;
}

/* The chain key: sha256 over the parent key and the step's description. */
static void chain(struct stage *st, const char *what, size_t len) {
  _cleanup_sha256_ agsx_sha256 *h = agsx_sha256_new();
  agsx_sha256_update(h, st->chain, strlen(st->chain));
  agsx_sha256_update(h, "\n", 1);
  agsx_sha256_update(h, what, len);
  agsx_sha256_final(h, st->chain);
}

static void history(struct stage *st, const char *created_by, bool empty) {
  _cleanup_free_ char *e = xasprintf("%c%s", empty ? '1' : '0', created_by);
  strv_add(&st->history, e);
}

/* ---- paths ------------------------------------------------------------------------------------ */

/* Cleans an absolute path into a relative one without "." or ".."
 * (".." at the root stays at the root, as in the image). "" is the root. */
static char *clean_abs(const char *path) {
  char *out = xzalloc(strlen(path) + 1);
  size_t len = 0;
  const char *p = path;
  while (*p) {
    size_t k = strcspn(p, "/");
    if (k == 0 || (k == 1 && p[0] == '.')) {
    } else if (k == 2 && p[0] == '.' && p[1] == '.') {
      while (len && out[len - 1] != '/')
        len--;
      if (len)
        len--;
    } else {
      if (len)
        out[len++] = '/';
      memcpy(out + len, p, k);
      len += k;
    }
    p += k;
    if (*p == '/')
      p++;
  }
  out[len] = '\0';
  return out;
}

/* Joins PATH to the working directory when relative; returns a clean
 * relative path (from /). */
static char *in_image_path(struct stage *st, const char *path) {
  _cleanup_free_ char *abs = path[0] == '/' ? xstrdup(path)
                                            : xasprintf("%s/%s", st->workdir ? st->workdir : "/",
                                                        path);
  return clean_abs(abs);
}

static char *layer_path(struct build *b, const char *diff_id) {
  if (agsx_store_has_layer(b->s, diff_id))
    return xasprintf("%s/layers/%s", b->s->path, agsx_digest_hex(diff_id));
  return xasprintf("%s/tmp/%s/layers/%s", b->s->path, b->work, agsx_digest_hex(diff_id));
}

static int open_layer(struct build *b, const char *diff_id, agsx_error_t *err) {
  _cleanup_free_ char *p = layer_path(b, diff_id);
  int fd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "layer `%s`", diff_id);
  return fd;
}

static bool is_whiteout(const struct stat *st) {
  return S_ISCHR(st->st_mode) && st->st_rdev == makedev(0, 0);
}

/* Finds PATH (clean, relative) in the stage's layers, top-most first,
 * following symlinks inside each layer. Returns an O_PATH fd and the layer
 * index, or -1 (ENOENT) when no layer has it or a whiteout hides it. */
static int lookup_in_layers_x(struct build *b, struct stage *st, const char *path, bool follow,
                              int *ret_layerfd, agsx_error_t *err) {
  for (size_t i = st->n_layers; i-- > 0;) {
    _cleanup_close_ int lfd = open_layer(b, st->layers[i].diff_id, err);
    if (lfd < 0)
      return -1;
    int fd = *path ? agsx_open_in_root(lfd, path, O_PATH | O_NOFOLLOW, 0)
                   : fcntl(lfd, F_DUPFD_CLOEXEC, 3);
    if (fd < 0 && errno != ENOENT && errno != ENOTDIR)
      return agsx_error_set(err, errno, "`/%s`", path);
    if (fd < 0)
      continue;
    struct stat sb;
    if (fstat(fd, &sb) < 0 || is_whiteout(&sb)) {
      close(fd);
      break;
    }
    if (S_ISLNK(sb.st_mode) && follow) {
      /* A symlink that resolves nowhere in this layer: follow it by name. */
      close(fd);
      fd = agsx_open_in_root(lfd, path, O_PATH, 0);
      if (fd < 0)
        continue;
    }
    if (ret_layerfd)
      *ret_layerfd = steal_fd(&lfd);
    return fd;
  }
  return agsx_error_set_quiet(err, ENOENT, "`/%s` not found", path);
}

static int lookup_in_layers(struct build *b, struct stage *st, const char *path, int *ret_layerfd,
                            agsx_error_t *err) {
  return lookup_in_layers_x(b, st, path, true, ret_layerfd, err);
}

/* Resolves the symlinks on the way to REL (clean, relative) in the stage's
 * merged tree, as Docker does for a destination: COPY x /lib/y writes
 * usr/lib/y where lib -> usr/lib. Missing components stay as given. */
static char *resolve_dst(struct build *b, struct stage *st, const char *rel) {
  char *cur = xstrdup(rel);
  for (int loops = 0; loops < 40; loops++) {
    bool changed = false;
    for (size_t i = 0; cur[i] && !changed; i++) {
      size_t end = i + strcspn(cur + i, "/");
      _cleanup_free_ char *prefix = xstrndup(cur, end);
      agsx_error_t e = NULL;
      _cleanup_close_ int fd = lookup_in_layers_x(b, st, prefix, false, NULL, &e);
      agsx_error_free(&e);
      struct stat sb;
      if (fd < 0 || fstat(fd, &sb) < 0)
        break;
      if (S_ISLNK(sb.st_mode)) {
        char t[4096];
        ssize_t n = readlinkat(fd, "", t, sizeof(t) - 1);
        if (n <= 0)
          break;
        t[n] = '\0';
        char *slash = strrchr(prefix, '/');
        if (slash)
          *slash = '\0';
        _cleanup_free_ char *joined = t[0] == '/' ? xasprintf("%s%s", t, cur + end)
                                                  : xasprintf("/%s/%s%s", slash ? prefix : "", t,
                                                              cur + end);
        free(cur);
        cur = clean_abs(joined);
        changed = true;
        break;
      }
      i = end;
      if (cur[i] == '\0')
        break;
    }
    if (!changed)
      return cur;
  }
  return cur;
}

/* A file of the stage's image, such as etc/passwd: absent is not an error
 * (NULL, 0), anything but a regular file of at most AGSX_PASSWD_MAX bytes
 * is. The image is untrusted: its etc/passwd may be a FIFO that would block
 * the open forever, a device, or gigabytes. */
static int read_from_layers(struct build *b, struct stage *st, const char *path, char **ret_buf,
                            size_t *ret_len, agsx_error_t *err) {
  agsx_error_t e = NULL;
  _cleanup_close_ int fd = lookup_in_layers(b, st, path, NULL, &e);
  *ret_buf = NULL;
  *ret_len = 0;
  if (fd < 0 && agsx_error_errno(&e) == ENOENT) {
    agsx_error_free(&e);
    return 0;
  }
  if (fd < 0) {
    *err = steal_ptr(&e);
    return -1;
  }
  _cleanup_free_ char *what = xasprintf("the image's `/%s`", path);
  if (agsx_check_regular(fcntl(fd, F_DUPFD_CLOEXEC, 3), what, err) < 0)
    return -1;
  /* The O_PATH fd pins the inode just checked; reopen it for reading. */
  char proc[64];
  snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
  _cleanup_close_ int rfd =
      agsx_check_regular(open(proc, O_RDONLY | O_CLOEXEC | AGSX_O_UNTRUSTED), what, err);
  if (rfd < 0)
    return -1;
  if (agsx_read_fd(rfd, AGSX_PASSWD_MAX, ret_buf, ret_len, err) < 0)
    return agsx_error_wrap(err, "%s", what);
  return 0;
}

/* ---- writing layers ---------------------------------------------------------------------------- */

struct lw {
  struct archive *a;
  agsx_sha256 *diff, *blob;
  z_stream z;
  bool z_ok;
  int fd;
  int64_t size;
  unsigned char out[1 << 16];
  int error;
};

static int lw_flush(struct lw *w, int flush) {
  do {
    w->z.next_out = w->out;
    w->z.avail_out = sizeof(w->out);
    int r = deflate(&w->z, flush);
    if (r == Z_STREAM_ERROR)
      return -1;
    size_t n = sizeof(w->out) - w->z.avail_out;
    if (n) {
      agsx_sha256_update(w->blob, w->out, n);
      if (agsx_write_all(w->fd, w->out, n) < 0)
        return -1;
      w->size += (int64_t)n;
    }
  } while (w->z.avail_out == 0);
  return 0;
}

static la_ssize_t lw_write(struct archive *a, void *data, const void *buf, size_t n) {
  struct lw *w = data;
  agsx_sha256_update(w->diff, buf, n);
  w->z.next_in = (unsigned char *)buf;
  w->z.avail_in = (uInt)n;
  if (lw_flush(w, Z_NO_FLUSH) < 0) {
    w->error = errno ? errno : EIO;
    archive_set_error(a, w->error, "write layer");
    return -1;
  }
  return (la_ssize_t)n;
}

static void lw_free(struct lw *w) {
  if (w->a)
    archive_write_free(w->a);
  if (w->z_ok)
    deflateEnd(&w->z);
  agsx_sha256_free(w->diff);
  agsx_sha256_free(w->blob);
  agsx_closep(&w->fd);
  memset(w, 0, sizeof(*w));
  w->fd = -1;
}

static int lw_open(struct build *b, struct lw *w, agsx_error_t *err) {
  memset(w, 0, sizeof(*w));
  w->fd = -1;
  if (b->cur->n_layers >= AGSX_IMAGE_MAX_LAYERS)
    return agsx_error_set(err, 0, "the image would have more than %d layers",
                          AGSX_IMAGE_MAX_LAYERS);
  unlinkat(b->workfd, "layer.tar.gz", 0);
  w->fd = openat(b->workfd, "layer.tar.gz", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (w->fd < 0)
    return agsx_error_set(err, errno, "create a layer in the work directory");
  /* gzip with no name and mtime 0: the same tar gives the same blob. */
  if (deflateInit2(&w->z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    return agsx_error_set(err, 0, "zlib: deflateInit2 failed");
  w->z_ok = true;
  w->diff = agsx_sha256_new();
  w->blob = agsx_sha256_new();
  w->a = archive_write_new();
  if (archive_write_set_format_pax_restricted(w->a) != ARCHIVE_OK ||
      archive_write_add_filter_none(w->a) != ARCHIVE_OK ||
      archive_write_set_bytes_in_last_block(w->a, 1) != ARCHIVE_OK ||
      archive_write_open(w->a, w, NULL, lw_write, NULL) != ARCHIVE_OK)
    return agsx_error_set(err, 0, "libarchive: %s", archive_error_string(w->a));
  return 0;
}

struct lentry {
  const char *path; /* in the layer, relative */
  mode_t mode;      /* type and permissions */
  uid_t uid;
  gid_t gid;
  int64_t mtime;
  int64_t size;
  const char *link;     /* symlink target */
  const char *hardlink; /* earlier entry's path */
  int fd;               /* content of a regular file */
};

static int lw_add(struct lw *w, const struct lentry *e, agsx_error_t *err) {
  struct archive_entry *ae = archive_entry_new();
  archive_entry_set_pathname(ae, e->path);
  archive_entry_set_uid(ae, e->uid);
  archive_entry_set_gid(ae, e->gid);
  archive_entry_set_mtime(ae, e->mtime, 0);
  archive_entry_set_perm(ae, e->mode & 07777);
  if (e->hardlink) {
    archive_entry_set_filetype(ae, AE_IFREG);
    archive_entry_set_hardlink(ae, e->hardlink);
    archive_entry_set_size(ae, 0);
  } else if (S_ISDIR(e->mode)) {
    archive_entry_set_filetype(ae, AE_IFDIR);
  } else if (S_ISLNK(e->mode)) {
    archive_entry_set_filetype(ae, AE_IFLNK);
    archive_entry_set_symlink(ae, e->link);
  } else if (S_ISFIFO(e->mode)) {
    archive_entry_set_filetype(ae, AE_IFIFO);
  } else {
    archive_entry_set_filetype(ae, AE_IFREG);
    archive_entry_set_size(ae, e->fd >= 0 ? e->size : 0);
  }
  int r = archive_write_header(w->a, ae);
  archive_entry_free(ae);
  if (r != ARCHIVE_OK)
    return agsx_error_set(err, 0, "write layer entry `%s`: %s", e->path,
                          archive_error_string(w->a));
  if (!S_ISREG(e->mode) || e->hardlink || e->fd < 0)
    return 0;
  static char buf[1 << 16];
  int64_t left = e->size;
  while (left > 0) {
    ssize_t n = read(e->fd, buf, left < (int64_t)sizeof(buf) ? (size_t)left : sizeof(buf));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return agsx_error_set(err, n < 0 ? errno : 0, "read `%s`%s", e->path,
                            n == 0 ? ": file shrank while being copied" : "");
    if (archive_write_data(w->a, buf, (size_t)n) != n)
      return agsx_error_set(err, 0, "write layer entry `%s`: %s", e->path,
                            archive_error_string(w->a));
    left -= n;
  }
  return 0;
}

/* Ends the tar and the gzip stream, stages the blob and unpacks it as a
 * layer of the work directory; appends it to the stage. */
static int lw_commit(struct build *b, struct lw *w, struct stage *st, const char *created_by,
                     char ret_key_record[256], agsx_error_t *err) {
  if (archive_write_close(w->a) != ARCHIVE_OK)
    return agsx_error_set(err, w->error, "finish layer: %s", archive_error_string(w->a));
  w->z.next_in = NULL;
  w->z.avail_in = 0;
  if (lw_flush(w, Z_FINISH) < 0)
    return agsx_error_set(err, errno, "finish layer");
  agsx_closep(&w->fd);
  struct blayer l = {.size = w->size, .media_type = xstrdup(AGSX_MT_OCI_LAYER_GZIP)};
  agsx_sha256_final(w->diff, l.diff_id);
  agsx_sha256_final(w->blob, l.digest);
  struct agsx_descriptor d = {.media_type = l.media_type, .size = l.size};
  memcpy(d.digest, l.digest, AGSX_DIGEST_LEN);
  if (agsx_store_stage_blob_move(b->s, b->workfd, b->workfd, "layer.tar.gz", l.digest, l.size,
                                 err) < 0 ||
      agsx_store_stage_layer(b->s, b->workfd, &d, l.diff_id, err) < 0) {
    free(l.media_type);
    return -1;
  }
  unlinkat(b->workfd, "layer.tar.gz", 0);
  st->layers = xrealloc(st->layers, (st->n_layers + 1) * sizeof(*st->layers));
  st->layers[st->n_layers++] = l;
  history(st, created_by, false);
  if (ret_key_record)
    snprintf(ret_key_record, 256, "%s\n%s\n%" PRId64 "\n", l.diff_id, l.digest, l.size);
  b->res->new_layers++;
  return 0;
}

/* ---- the cache ------------------------------------------------------------------------------------ */

/* A record: "diff_id\ndigest\nsize\n". A hit needs the blob in the store;
 * the unpacked layer is made again when gc removed it. */
static bool cache_hit(struct build *b, struct stage *st, const char *created_by) {
  if (b->o->no_cache || b->cachefd < 0)
    return false;
  _cleanup_free_ char *buf = NULL;
  size_t len;
  if (agsx_read_file_at(b->cachefd, agsx_digest_hex(st->chain), 512, &buf, &len, NULL) < 0)
    return false;
  char diff[AGSX_DIGEST_LEN], dig[AGSX_DIGEST_LEN];
  int64_t size;
  if (sscanf(buf, "%71s\n%71s\n%" SCNd64, diff, dig, &size) != 3 ||
      agsx_digest_validate(diff, NULL) < 0 || agsx_digest_validate(dig, NULL) < 0 ||
      !agsx_store_has_blob(b->s, dig))
    return false;
  struct agsx_descriptor d = {.media_type = (char *)AGSX_MT_OCI_LAYER_GZIP, .size = size};
  memcpy(d.digest, dig, AGSX_DIGEST_LEN);
  agsx_error_t e = NULL;
  if (agsx_store_stage_layer(b->s, b->workfd, &d, diff, &e) < 0) {
    agsx_error_free(&e);
    return false;
  }
  struct blayer l = {.size = size, .media_type = xstrdup(AGSX_MT_OCI_LAYER_GZIP)};
  memcpy(l.diff_id, diff, AGSX_DIGEST_LEN);
  memcpy(l.digest, dig, AGSX_DIGEST_LEN);
  st->layers = xrealloc(st->layers, (st->n_layers + 1) * sizeof(*st->layers));
  st->layers[st->n_layers++] = l;
  history(st, created_by, false);
  b->res->cached_layers++;
  progress(b, " ---> Using cache %.19s\n", diff);
  return true;
}

static void cache_later(struct build *b, const char *key, const char *record) {
  strv_add(&b->pending_cache, agsx_digest_hex(key));
  strv_add(&b->pending_cache, record);
}

static void cache_write_all(struct build *b) {
  for (size_t i = 0; b->cachefd >= 0 && b->pending_cache && b->pending_cache[i]; i += 2) {
    agsx_error_t e = NULL;
    const char *rec = b->pending_cache[i + 1];
    if (agsx_write_file_atomic(b->cachefd, b->pending_cache[i], rec, strlen(rec), 0600, &e) < 0) {
      agsx_warn("build cache: %s", e->msg);
      agsx_error_free(&e);
    }
  }
}

/* ---- FROM ------------------------------------------------------------------------------------------ */

static int pull_policy(const struct agsx_build_opts *o, enum agsx_pull_policy *ret,
                       agsx_error_t *err) {
  return o->pull ? agsx_pull_policy_parse(o->pull, ret, err) : agsx_pull_policy_default(ret, err);
}

static int pull_image(const struct agsx_build_opts *o, const char *name, agsx_error_t *err) {
  struct agsx_pull_result res;
  if (o->progress) {
    _cleanup_free_ char *line = xasprintf("Pulling %s\n", name);
    o->progress(line, strlen(line), o->data);
  }
  if (agsx_pull(o->root ? o->root : "/var/lib/agsx", name, NULL, &res, err) < 0)
    return -1;
  agsx_pull_result_clear(&res);
  return 0;
}

int agsx_build_missing_image(const struct agsx_build_opts *o, const char *name, agsx_error_t *err) {
  enum agsx_pull_policy p;
  if (pull_policy(o, &p, err) < 0)
    return -1;
  if (p == AGSX_PULL_NEVER)
    return agsx_error_set(err, ENOENT, "no such image `%s` (and --pull never)", name);
  return pull_image(o, name, err);
}

static struct stage *find_stage(struct build *b, const char *name) {
  for (size_t i = 0; i + 1 < b->n_stages; i++)
    if (b->stages[i].name && strcasecmp(b->stages[i].name, name) == 0)
      return &b->stages[i];
  char *end;
  unsigned long n = strtoul(name, &end, 10);
  if (*name && *end == '\0' && n + 1 < b->n_stages)
    return &b->stages[n];
  return NULL;
}

static void copy_stage(struct stage *dst, const struct stage *src) {
  dst->layers = xzalloc((src->n_layers + 1) * sizeof(*dst->layers));
  for (size_t i = 0; i < src->n_layers; i++) {
    dst->layers[i] = src->layers[i];
    dst->layers[i].media_type = xstrdup(src->layers[i].media_type);
  }
  dst->n_layers = src->n_layers;
  dst->env = strv_dup(src->env);
  dst->cmd = src->cmd ? strv_dup(src->cmd) : NULL;
  dst->entrypoint = src->entrypoint ? strv_dup(src->entrypoint) : NULL;
  dst->shell = src->shell ? strv_dup(src->shell) : NULL;
  dst->labels = strv_dup(src->labels);
  dst->ports = strv_dup(src->ports);
  dst->volumes = strv_dup(src->volumes);
  dst->history = strv_dup(src->history);
  dst->user = src->user ? xstrdup(src->user) : NULL;
  dst->workdir = src->workdir ? xstrdup(src->workdir) : NULL;
  dst->stopsignal = src->stopsignal ? xstrdup(src->stopsignal) : NULL;
  if (src->base_history) {
    /* Re-parse: yajl trees cannot be shared. */
    yajl_gen g = agsx_json_gen_new(false);
    agsx_json_value(g, src->base_history);
    size_t len;
    _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
    yajl_gen_free(g);
    dst->base_history = agsx_json_parse(s, len, AGSX_IMAGE_JSON_MAX, NULL);
  }
  memcpy(dst->chain, src->chain, AGSX_DIGEST_LEN);
}

static char **json_keys(yajl_val obj) {
  char **v = xzalloc(sizeof(char *));
  for (size_t i = 0; obj && YAJL_IS_OBJECT(obj) && i < obj->u.object.len; i++)
    strv_add(&v, obj->u.object.keys[i]);
  return v;
}

/* Loads what agsx_image_config does not carry: Labels, ExposedPorts,
 * Volumes, Shell and the history. */
static int load_raw_config(struct build *b, struct stage *st, const char *digest,
                           agsx_error_t *err) {
  _cleanup_free_ char *buf = NULL;
  size_t len;
  if (agsx_store_read_blob(b->s, digest, AGSX_IMAGE_JSON_MAX, &buf, &len, err) < 0)
    return -1;
  _cleanup_json_ yajl_val root = agsx_json_parse(buf, len, AGSX_IMAGE_JSON_MAX, err);
  if (root == NULL)
    return -1;
  yajl_val c = agsx_json_get_object(root, "config");
  yajl_val labels = agsx_json_get_object(c, "Labels");
  st->labels = xzalloc(sizeof(char *));
  for (size_t i = 0; labels && i < labels->u.object.len; i++)
    if (YAJL_IS_STRING(labels->u.object.values[i]))
      kv_set(&st->labels, labels->u.object.keys[i], labels->u.object.values[i]->u.string);
  st->ports = json_keys(agsx_json_get_object(c, "ExposedPorts"));
  st->volumes = json_keys(agsx_json_get_object(c, "Volumes"));
  yajl_val shell = agsx_json_get_array(c, "Shell");
  for (size_t i = 0; shell && i < shell->u.array.len; i++)
    if (YAJL_IS_STRING(shell->u.array.values[i]))
      strv_add(&st->shell, shell->u.array.values[i]->u.string);
  yajl_val h = agsx_json_get_array(root, "history");
  if (h) {
    /* Keep it: steal the array out of the tree. */
    for (size_t i = 0; i < root->u.object.len; i++)
      if (root->u.object.values[i] == h)
        root->u.object.values[i] = NULL;
    st->base_history = h;
    /* yajl_tree_free skips NULL values. */
  }
  return 0;
}

static int from_image(struct build *b, struct stage *st, const char *name, agsx_error_t *err) {
  struct agsx_image_info info;
  enum agsx_pull_policy p;
  if (pull_policy(b->o, &p, err) < 0 || (p == AGSX_PULL_ALWAYS && pull_image(b->o, name, err) < 0))
    return -1;
  int r = agsx_store_prepare_image(b->s, name, &info, err);
  if (r < 0 && agsx_error_errno(err) == ENOENT && p == AGSX_PULL_MISSING) {
    agsx_error_free(err);
    if (agsx_build_missing_image(b->o, name, err) < 0)
      return -1;
    r = agsx_store_prepare_image(b->s, name, &info, err);
  }
  if (r < 0) {
    if (agsx_error_errno(err) == ENOENT && p == AGSX_PULL_NEVER) {
      agsx_error_free(err);
      return agsx_error_set_quiet(err, ENOENT, "no such image `%s` (and --pull never)", name);
    }
    return -1;
  }
  r = 0;
  const struct agsx_image_config *c = &info.config;
  if (strcmp(c->os, "linux") != 0 || strcmp(c->architecture, "amd64") != 0)
    r = agsx_error_set(err, 0, "image `%s` is for %s/%s: agsx builds only linux/amd64 images",
                       name, c->os, c->architecture);
  st->layers = xzalloc((info.manifest.n_layers + 1) * sizeof(*st->layers));
  for (size_t i = 0; r == 0 && i < info.manifest.n_layers; i++) {
    struct blayer *l = &st->layers[st->n_layers++];
    memcpy(l->diff_id, c->diff_ids[i], AGSX_DIGEST_LEN);
    memcpy(l->digest, info.manifest.layers[i].digest, AGSX_DIGEST_LEN);
    l->size = info.manifest.layers[i].size;
    l->media_type = xstrdup(info.manifest.layers[i].media_type);
  }
  if (r == 0) {
    st->env = strv_dup(c->env);
    st->cmd = c->cmd ? strv_dup(c->cmd) : NULL;
    st->entrypoint = c->entrypoint ? strv_dup(c->entrypoint) : NULL;
    st->user = c->user && *c->user ? xstrdup(c->user) : NULL;
    st->workdir = c->working_dir && *c->working_dir ? xstrdup(c->working_dir) : NULL;
    st->stopsignal = c->stop_signal ? xstrdup(c->stop_signal) : NULL;
    memcpy(st->chain, info.img.manifest.digest, AGSX_DIGEST_LEN);
    r = load_raw_config(b, st, info.manifest.config.digest, err);
  }
  agsx_image_info_clear(&info);
  return r;
}

static const char *lower_dup(char *s) {
  for (char *p = s; *p; p++)
    *p = (char)tolower((unsigned char)*p);
  return s;
}

static int do_from(struct build *b, agsx_error_t *err) {
  const struct agsx_df_instr *in = b->in;
  if (b->n_stages >= MAX_STAGES)
    return agsx_error_set(err, 0, "Dockerfile:%u: more than %d stages", in->line, MAX_STAGES);
  const char *platform = agsx_df_flag(in, "platform", NULL);
  _cleanup_strv_ char **w = NULL;
  if (agsx_df_expand_words(in->args, b->df.escape, meta_lookup, b, &w, err) < 0)
    return line_err(b, err);
  size_t n = agsx_strv_len(w);
  if (!(n == 1 || (n == 3 && strcasecmp(w[1], "as") == 0)))
    return agsx_error_set(err, 0, "Dockerfile:%u: FROM takes IMAGE [AS NAME]", in->line);
  if (platform) {
    _cleanup_free_ char *p = NULL;
    if (agsx_df_expand_word(platform, b->df.escape, meta_lookup, b, &p, err) < 0)
      return line_err(b, err);
    if (strcmp(p, "linux/amd64") != 0)
      return agsx_error_set(err, 0, "Dockerfile:%u: unsupported platform `%s` (only linux/amd64)",
                            in->line, p);
  }
  struct stage *st = &b->stages[b->n_stages++];
  b->cur = st;
  if (n == 3) {
    st->name = xstrdup(lower_dup(w[2]));
    for (size_t i = 0; i + 1 < b->n_stages; i++)
      if (b->stages[i].name && strcmp(b->stages[i].name, st->name) == 0)
        return agsx_error_set(err, 0, "Dockerfile:%u: duplicate stage name `%s`", in->line,
                              st->name);
  }
  banner(b);
  struct stage *from = find_stage(b, w[0]);
  if (from) {
    copy_stage(st, from);
  } else if (strcmp(w[0], "scratch") == 0) {
    snprintf(st->chain, sizeof(st->chain), "scratch");
    st->env = xzalloc(sizeof(char *));
    st->labels = xzalloc(sizeof(char *));
    st->ports = xzalloc(sizeof(char *));
    st->volumes = xzalloc(sizeof(char *));
  } else if (from_image(b, st, w[0], err) < 0) {
    return line_err(b, err);
  }
  st->args = xzalloc(sizeof(char *));
  if (st->env == NULL)
    st->env = xzalloc(sizeof(char *));
  /* Docker gives every image a PATH when its base has none. */
  if (!kv_get(st->env, "PATH"))
    kv_set(&st->env, "PATH", DEFAULT_PATH);
  return 0;
}

/* ---- metadata instructions ------------------------------------------------------------------------ */

static int do_env_label(struct build *b, char ***list, bool is_env, agsx_error_t *err) {
  _cleanup_strv_ char **w = NULL;
  if (expand_words(b, b->in->args, &w, err) < 0)
    return -1;
  size_t n = agsx_strv_len(w);
  if (n >= 1 && strchr(w[0], '=') == NULL) {
    /* ENV KEY VALUE: the rest of the line is the value. */
    if (!is_env || n < 2)
      return agsx_error_set(err, 0, "Dockerfile:%u: %s needs KEY=VALUE", b->in->line,
                            is_env ? "ENV" : "LABEL");
    const char *rest = b->in->args + strcspn(b->in->args, " \t");
    rest += strspn(rest, " \t");
    _cleanup_free_ char *v = NULL;
    if (expand_word(b, rest, &v, err) < 0)
      return -1;
    kv_set(list, w[0], v);
    return 0;
  }
  /* Every pair is expanded with the values before this instruction. */
  for (size_t i = 0; i < n; i++) {
    char *eq = strchr(w[i], '=');
    if (eq == NULL || eq == w[i])
      return agsx_error_set(err, 0, "Dockerfile:%u: `%s` is not KEY=VALUE", b->in->line, w[i]);
    *eq = '\0';
    kv_set(list, w[i], eq + 1);
  }
  return 0;
}

static int do_arg(struct build *b, bool meta, agsx_error_t *err) {
  _cleanup_strv_ char **w = NULL;
  if (agsx_df_expand_words(b->in->args, b->df.escape, meta ? meta_lookup : stage_lookup, b, &w,
                           err) < 0)
    return line_err(b, err);
  for (size_t i = 0; w[i]; i++) {
    char *eq = strchr(w[i], '=');
    if (eq)
      *eq = '\0';
    const char *name = w[i];
    if (*name == '\0')
      return agsx_error_set(err, 0, "Dockerfile:%u: ARG needs a name", b->in->line);
    const char *given = build_arg(b, name);
    const char *val = given ? given : eq ? eq + 1 : NULL;
    if (!meta && val == NULL && strv_has(b->meta_decl, name))
      val = kv_get(b->meta, name);
    if (given && !strv_has(b->used_args, name))
      strv_add(&b->used_args, name);
    if (meta) {
      if (!strv_has(b->meta_decl, name))
        strv_add(&b->meta_decl, name);
      if (val)
        kv_set(&b->meta, name, val);
    } else if (val) {
      kv_set(&b->cur->args, name, val);
    }
    if (!meta) {
      _cleanup_free_ char *d = xasprintf("ARG %s=%s", name, val ? val : "");
      chain(b->cur, d, strlen(d));
    }
  }
  return 0;
}

static int json_or_shell(struct build *b, char ***ret) {
  if (b->in->json) {
    *ret = strv_dup(b->in->argv);
    return 0;
  }
  char **sh = b->cur->shell ? b->cur->shell : (char *[]){"/bin/sh", "-c", NULL};
  *ret = strv_dup(sh);
  strv_add(ret, b->in->args);
  return 0;
}

static int do_meta(struct build *b, agsx_error_t *err) {
  struct stage *st = b->cur;
  const struct agsx_df_instr *in = b->in;
  _cleanup_free_ char *one = NULL;
  switch (in->cmd) {
  case AGSX_DF_ENV:
    return do_env_label(b, &st->env, true, err);
  case AGSX_DF_LABEL:
    return do_env_label(b, &st->labels, false, err);
  case AGSX_DF_MAINTAINER:
    kv_set(&st->labels, "maintainer", in->args);
    return 0;
  case AGSX_DF_ARG:
    return do_arg(b, false, err);
  case AGSX_DF_CMD:
    agsx_strv_free(st->cmd);
    return json_or_shell(b, &st->cmd);
  case AGSX_DF_ENTRYPOINT:
    agsx_strv_free(st->entrypoint);
    json_or_shell(b, &st->entrypoint);
    /* Docker: an ENTRYPOINT resets the CMD inherited from the base. */
    agsx_strv_free(st->cmd);
    st->cmd = NULL;
    return 0;
  case AGSX_DF_SHELL:
    agsx_strv_free(st->shell);
    st->shell = strv_dup(in->argv);
    return 0;
  case AGSX_DF_USER:
    if (expand_word(b, in->args, &one, err) < 0)
      return -1;
    free(st->user);
    st->user = steal_ptr(&one);
    return 0;
  case AGSX_DF_STOPSIGNAL:
    if (expand_word(b, in->args, &one, err) < 0)
      return -1;
    free(st->stopsignal);
    st->stopsignal = steal_ptr(&one);
    return 0;
  case AGSX_DF_WORKDIR: {
    if (expand_word(b, in->args, &one, err) < 0)
      return -1;
    _cleanup_free_ char *rel = in_image_path(st, one);
    free(st->workdir);
    st->workdir = xasprintf("/%s", rel);
    return 0;
  }
  case AGSX_DF_EXPOSE:
  case AGSX_DF_VOLUME: {
    _cleanup_strv_ char **w = NULL;
    if (in->json)
      w = strv_dup(in->argv);
    else if (expand_words(b, in->args, &w, err) < 0)
      return -1;
    for (size_t i = 0; w[i]; i++) {
      if (in->cmd == AGSX_DF_VOLUME) {
        if (!strv_has(st->volumes, w[i]))
          strv_add(&st->volumes, w[i]);
        continue;
      }
      _cleanup_free_ char *p = strchr(w[i], '/') ? xstrdup(w[i]) : xasprintf("%s/tcp", w[i]);
      char *end;
      unsigned long port = strtoul(p, &end, 10);
      if (end == p || port == 0 || port > 65535 ||
          (strcmp(end, "/tcp") != 0 && strcmp(end, "/udp") != 0 && strcmp(end, "/sctp") != 0))
        return agsx_error_set(err, 0, "Dockerfile:%u: invalid port `%s`", in->line, w[i]);
      if (!strv_has(st->ports, p))
        strv_add(&st->ports, p);
    }
    return 0;
  }
  default:
    return agsx_error_set(err, 0, "Dockerfile:%u: internal error", in->line);
  }
}

/* ---- COPY and ADD ------------------------------------------------------------------------------- */

struct centry {
  char *dst;   /* path in the layer */
  int rootfd;  /* borrowed: the context or a layer */
  char *src;   /* real path under rootfd ("" = rootfd itself) */
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
  struct sset entries; /* destinations of the entries */
  struct sset emitted; /* parent directories written (per pass) */
};

static void copy_clear(struct copy *c) {
  sset_clear(&c->entries);
  sset_clear(&c->emitted);
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

/* Writes the entries of archive SRC (in the context) under DST. Names are
 * cleaned and kept beneath DST; devices are skipped. */
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
  struct archive_entry *ae;
  size_t count = 0;
  while (r == 0) {
    int h = archive_read_next_header(a, &ae);
    if (h == ARCHIVE_EOF)
      break;
    if (h != ARCHIVE_OK && h != ARCHIVE_WARN) {
      r = agsx_error_set(err, 0, "`%s`: %s", src, archive_error_string(a));
      break;
    }
    if (++count > MAX_COPY_ENTRIES) {
      r = agsx_error_set(err, 0, "`%s`: more than %d entries", src, MAX_COPY_ENTRIES);
      break;
    }
    const char *name = archive_entry_pathname(ae);
    _cleanup_free_ char *abs = xasprintf("/%s", name ? name : "");
    _cleanup_free_ char *clean = clean_abs(abs);
    if (*clean == '\0')
      continue;
    _cleanup_free_ char *path = *dst ? xasprintf("%s/%s", dst, clean) : xstrdup(clean);
    mode_t type = archive_entry_filetype(ae);
    const char *hl = archive_entry_hardlink(ae);
    _cleanup_free_ char *hpath = NULL;
    if (hl) {
      _cleanup_free_ char *habs = xasprintf("/%s", hl);
      _cleanup_free_ char *hclean = clean_abs(habs);
      hpath = *dst ? xasprintf("%s/%s", dst, hclean) : xstrdup(hclean);
    }
    if (!hl && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK && type != AE_IFIFO)
      continue;
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
    else if (type == AE_IFLNK)
      archive_entry_set_symlink(out, archive_entry_symlink(ae));
    if (!hl && type == AE_IFREG)
      archive_entry_set_size(out, archive_entry_size(ae));
    if (archive_write_header(w->a, out) != ARCHIVE_OK)
      r = agsx_error_set(err, 0, "write `%s`: %s", path, archive_error_string(w->a));
    archive_entry_free(out);
    if (r < 0 || hl || type != AE_IFREG)
      continue;
    static char buf[1 << 16];
    for (;;) {
      la_ssize_t n = archive_read_data(a, buf, sizeof(buf));
      if (n == 0)
        break;
      if (n < 0) {
        r = agsx_error_set(err, 0, "`%s`: %s", src, archive_error_string(a));
        break;
      }
      if (archive_write_data(w->a, buf, (size_t)n) != n) {
        r = agsx_error_set(err, 0, "write `%s`: %s", path, archive_error_string(w->a));
        break;
      }
    }
  }
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
  sset_add(&c->entries, dst);
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
static int list_dir(int dirfd, const char *path, char ***ret, agsx_error_t *err) {
  _cleanup_close_ int fd = *path ? agsx_open_beneath_nofollow(dirfd, path, O_RDONLY | O_DIRECTORY, 0)
                                 : openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "open `%s`", path);
  _cleanup_dir_ DIR *d = fdopendir(fd);
  if (d == NULL)
    return agsx_error_set(err, errno, "read `%s`", path);
  fd = -1;
  char **v = xzalloc(sizeof(char *));
  size_t n = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    strv_add(&v, de->d_name);
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
  if (layers_mode && is_whiteout(&st))
    return 0;
  bool excluded = from_context && *src && agsx_dockerignore_excluded(&b->ignore, src);
  if (*dst && !excluded && add_entry(c, dst, rootfd, src, &st, err) < 0)
    return -1;
  if (!S_ISDIR(st.st_mode))
    return 0;
  _cleanup_strv_ char **names = NULL;
  if (list_dir(rootfd, src, &names, err) < 0)
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
static bool whited(const struct sset *wh, const char *path) {
  _cleanup_free_ char *p = xstrdup(path);
  for (;;) {
    if (sset_has(wh, p))
      return true;
    char *slash = strrchr(p, '/');
    if (slash == NULL)
      return false;
    *slash = '\0';
  }
}

/* One layer's part of a merged directory: entries no upper layer had. */
static int walk_layer(struct copy *c, int lfd, const char *src, const char *dst, struct sset *seen,
                      struct sset *wh, struct sset *next_wh, agsx_error_t *err) {
  struct stat st;
  if (lstat_beneath(lfd, src, &st) < 0)
    return agsx_error_set(err, errno, "`%s`", src);
  if (whited(wh, dst))
    return 0;
  if (is_whiteout(&st)) {
    sset_add(next_wh, dst);
    return 0;
  }
  if (!sset_has(seen, dst)) {
    sset_add(seen, dst);
    if (add_entry(c, dst, lfd, src, &st, err) < 0)
      return -1;
  }
  if (!S_ISDIR(st.st_mode))
    return 0;
  _cleanup_strv_ char **names = NULL;
  if (list_dir(lfd, src, &names, err) < 0)
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
  struct sset seen = {0}, wh = {0};
  size_t first = c->n;
  int r = 0;
  for (size_t i = from->n_layers; r == 0 && i-- > 0;) {
    int lfd = open_layer(b, from->layers[i].diff_id, err);
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
    struct sset next = {0};
    r = walk_layer(c, lfd, real, dst, &seen, &wh, &next, err);
    for (size_t k = 0; k < next.cap; k++)
      if (next.slot[k])
        sset_add(&wh, next.slot[k]);
    sset_clear(&next);
    char v[4];
    if (getxattr_at_opaque(lfd, real, v))
      break;
  }
  sset_clear(&seen);
  sset_clear(&wh);
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
      return lstat_beneath(b->ctxfd, p, &st) == 0 ? (strv_add(ret, p), 0) : 0;
    return lstat_beneath(b->ctxfd, p, &st) == 0 && S_ISDIR(st.st_mode)
               ? glob_context(b, p, rest, ret, depth + 1, err)
               : 0;
  }
  _cleanup_strv_ char **names = NULL;
  agsx_error_t e = NULL;
  if (list_dir(b->ctxfd, dir, &names, &e) < 0) {
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
      strv_add(ret, p);
    else if (glob_context(b, p, rest, ret, depth + 1, err) < 0)
      return -1;
  }
  return 0;
}

/* Sources in the context: clean, beneath it (symlinks resolved inside it
 * only), globs in the last component. */
static int context_sources(struct build *b, const char *src, char ***ret, agsx_error_t *err) {
  _cleanup_free_ char *abs = xasprintf("/%s", src);
  _cleanup_free_ char *clean = clean_abs(abs);
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
    strv_add(ret, clean);
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
  if (expand_word(b, spec, &s, err) < 0)
    return -1;
  struct agsx_user u;
  if (read_from_layers(b, b->cur, "etc/passwd", &pw, &pwl, err) < 0 ||
      read_from_layers(b, b->cur, "etc/group", &gr, &grl, err) < 0 ||
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
    if (*p == '\0' || sset_has(&c->entries, p) || sset_has(&c->emitted, p)) {
      *s = '/';
      continue;
    }
    sset_add(&c->emitted, p);
    struct stat st = {.st_mode = S_IFDIR | 0755};
    agsx_error_t e = NULL;
    _cleanup_close_ int fd = lookup_in_layers_x(b, b->cur, p, false, NULL, &e);
    agsx_error_free(&e);
    if (fd >= 0)
      fstat(fd, &st);
    if (!S_ISDIR(st.st_mode))
      st.st_mode = S_IFDIR | 0755, st.st_uid = st.st_gid = 0;
    struct lentry le = {.path = p, .mode = st.st_mode, .uid = st.st_uid, .gid = st.st_gid,
                        .mtime = st.st_mtime, .fd = -1};
    if (h) {
      _cleanup_free_ char *d = xasprintf("P %s %o %u %u\n", p, st.st_mode, st.st_uid, st.st_gid);
      agsx_sha256_update(h, d, strlen(d));
    }
    if (w && lw_add(w, &le, err) < 0)
      return;
    *s = '/';
  }
}

static void hash_entry(agsx_sha256 *h, const struct centry *e) {
  _cleanup_free_ char *d = xasprintf("E %s %o %u %u %lld %lld %s\n", e->dst, e->st.st_mode,
                                     e->st.st_uid, e->st.st_gid, (long long)e->st.st_size,
                                     (long long)e->st.st_mtime, e->link ? e->link : "");
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
  static char buf[1 << 16];
  for (;;) {
    ssize_t n = agsx_read_all(fd, buf, sizeof(buf));
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
    struct lentry le = {.path = e->dst, .mode = mode, .uid = c->has_chown ? c->uid : 0,
                        .gid = c->has_chown ? c->gid : 0, .mtime = e->st.st_mtime,
                        .size = e->st.st_size, .link = e->link, .fd = -1};
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
    if (lw_add(w, &le, err) < 0)
      return -1;
  }
  return 0;
}

static int do_copy(struct build *b, agsx_error_t *err) {
  const struct agsx_df_instr *in = b->in;
  struct stage *st = b->cur;
  _cleanup_strv_ char **w = NULL;
  if (in->json)
    w = strv_dup(in->argv);
  else if (expand_words(b, in->args, &w, err) < 0)
    return -1;
  size_t n = agsx_strv_len(w);
  if (n < 2)
    return agsx_error_set(err, 0, "Dockerfile:%u: %s needs a source and a destination", in->line,
                          agsx_df_cmd_name(in->cmd));
  struct copy c = {0};
  int r = -1;
  const char *chmod_s = agsx_df_flag(in, "chmod", NULL);
  const char *chown_s = agsx_df_flag(in, "chown", NULL);
  const char *from = agsx_df_flag(in, "from", NULL);
  _cleanup_free_ char *from_x = NULL, *pdst = NULL;
  struct stage img = {0};
  struct stage *src_stage = NULL;
  _cleanup_free_ char *dst_given = in_image_path(st, w[n - 1]);
  _cleanup_free_ char *dst_rel = resolve_dst(b, st, dst_given);
  bool dst_dir = agsx_str_has_suffix(w[n - 1], "/") || n > 2 ||
                 agsx_str_has_suffix(w[n - 1], "/.") || *dst_rel == '\0';
  if (!dst_dir) {
    /* An existing directory is copied into, as BuildKit does. */
    agsx_error_t e = NULL;
    _cleanup_close_ int dfd = lookup_in_layers(b, st, dst_rel, NULL, &e);
    struct stat dsb;
    agsx_error_free(&e);
    if (dfd >= 0 && fstat(dfd, &dsb) == 0 && S_ISDIR(dsb.st_mode))
      dst_dir = true;
  }
  _cleanup_sha256_ agsx_sha256 *h = agsx_sha256_new();
  agsx_sha256_update(h, in->text, strlen(in->text));
  if (chmod_s) {
    char *end;
    unsigned long m = strtoul(chmod_s, &end, 8);
    if (*chmod_s == '\0' || *end || m > 07777) {
      agsx_error_set(err, 0, "Dockerfile:%u: invalid --chmod `%s` (octal)", in->line, chmod_s);
      goto out;
    }
    c.has_chmod = true, c.chmod_bits = (mode_t)m;
  }
  if (chown_s && resolve_chown(b, &c, chown_s, err) < 0)
    goto out;
  if (from) {
    if (expand_word(b, from, &from_x, err) < 0)
      goto out;
    src_stage = find_stage(b, from_x);
    if (src_stage == NULL) {
      if (from_image(b, &img, from_x, err) < 0) {
        line_err(b, err);
        goto out;
      }
      src_stage = &img;
    }
  }
  for (size_t i = 0; i + 1 < n; i++) {
    if (in->cmd == AGSX_DF_ADD && (strstr(w[i], "://") || agsx_str_has_prefix(w[i], "git@"))) {
      agsx_error_set(err, 0, "Dockerfile:%u: ADD of a URL (`%s`) is not supported; download it "
                     "in a RUN step or into the context", in->line, w[i]);
      goto out;
    }
    if (src_stage) {
      _cleanup_free_ char *rel = clean_abs(w[i]);
      int lfd = -1;
      _cleanup_close_ int fd = lookup_in_layers(b, src_stage, rel, &lfd, err);
      if (fd < 0) {
        agsx_error_wrap(err, "Dockerfile:%u: COPY --from=%s", in->line, from_x);
        goto out;
      }
      c.fds = xrealloc(c.fds, (c.n_fds + 1) * sizeof(int));
      c.fds[c.n_fds++] = lfd;
      _cleanup_free_ char *real = rel_path(lfd, fd);
      struct stat sb;
      fstat(fd, &sb);
      const char *base = strrchr(rel, '/') ? strrchr(rel, '/') + 1 : rel;
      _cleanup_free_ char *d = S_ISDIR(sb.st_mode) ? xstrdup(dst_rel)
                               : dst_dir ? (*dst_rel ? xasprintf("%s/%s", dst_rel, base) : xstrdup(base))
                                         : xstrdup(dst_rel);
      if (real == NULL ||
          (S_ISDIR(sb.st_mode) ? walk_merged(b, &c, src_stage, real, d, err)
                               : walk(b, &c, lfd, real, d, false, true, err)) < 0) {
        if (real == NULL)
          agsx_error_set(err, 0, "`%s`: cannot resolve", w[i]);
        line_err(b, err);
        goto out;
      }
      continue;
    }
    _cleanup_strv_ char **srcs = NULL;
    if (context_sources(b, w[i], &srcs, err) < 0) {
      line_err(b, err);
      goto out;
    }
    if (srcs[0] == NULL) {
      agsx_error_set(err, 0, "Dockerfile:%u: no file in the build context matches `%s`", in->line,
                     w[i]);
      goto out;
    }
    if (srcs[1])
      dst_dir = true;
    for (size_t k = 0; srcs[k]; k++) {
      _cleanup_close_ int fd = open_context_source(b, srcs[k], err);
      if (fd < 0) {
        line_err(b, err);
        goto out;
      }
      _cleanup_free_ char *real = rel_path(b->ctxfd, fd);
      if (real == NULL) {
        agsx_error_set(err, 0, "Dockerfile:%u: `%s` leads outside the build context", in->line,
                       srcs[k]);
        goto out;
      }
      if (*real && agsx_dockerignore_excluded(&b->ignore, real)) {
        agsx_error_set(err, 0, "Dockerfile:%u: `%s` not found in the build context (excluded by "
                       ".dockerignore)", in->line, srcs[k]);
        goto out;
      }
      struct stat sb;
      fstat(fd, &sb);
      if (in->cmd == AGSX_DF_ADD && S_ISREG(sb.st_mode)) {
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        _cleanup_close_ int rfd = open(proc, O_RDONLY | O_CLOEXEC);
        if (rfd >= 0 && is_archive(rfd)) {
          strv_add(&c.archives, real);
          strv_add(&c.archives, dst_rel);
          struct centry ae = {.dst = (char *)"", .rootfd = b->ctxfd, .src = real, .st = sb};
          hash_entry(h, &ae);
          if (hash_content(h, &ae, err) < 0) {
            line_err(b, err);
            goto out;
          }
          continue;
        }
      }
      /* A symlink source is copied under its own name, with its target's
       * content (Docker). */
      const char *base = strrchr(srcs[k], '/') ? strrchr(srcs[k], '/') + 1 : srcs[k];
      _cleanup_free_ char *d = S_ISDIR(sb.st_mode) ? xstrdup(dst_rel)
                               : dst_dir ? (*dst_rel ? xasprintf("%s/%s", dst_rel, base) : xstrdup(base))
                                         : xstrdup(dst_rel);
      if (walk(b, &c, b->ctxfd, real, d, true, false, err) < 0) {
        line_err(b, err);
        goto out;
      }
    }
  }
  /* The cache key: the instruction, the parent, and every entry's
   * metadata and content. */
  for (size_t i = 0; i < c.n; i++) {
    parent_entries(b, &c, c.v[i].dst, NULL, h, err);
    hash_entry(h, &c.v[i]);
    if (hash_content(h, &c.v[i], err) < 0) {
      line_err(b, err);
      goto out;
    }
  }
  for (size_t i = 0; c.archives && c.archives[i]; i += 2) {
    _cleanup_free_ char *ad = xasprintf("%s/", c.archives[i + 1]);
    parent_entries(b, &c, ad, NULL, h, err);
  }
  sset_clear(&c.emitted);
  char own[96]; /* no cleanup variable here: the gotos above jump past it */
  snprintf(own, sizeof(own), "O %d %u %u %d %o", c.has_chown, c.uid, c.gid, c.has_chmod,
           c.chmod_bits);
  agsx_sha256_update(h, own, strlen(own));
  char key[AGSX_DIGEST_LEN];
  agsx_sha256_final(h, key);
  chain(st, key, strlen(key));
  banner(b);
  if (cache_hit(b, st, in->text)) {
    r = 0;
    goto out;
  }
  struct lw lw;
  char record[256];
  if (lw_open(b, &lw, err) < 0) {
    lw_free(&lw);
    line_err(b, err);
    goto out;
  }
  int wr = write_copy_layer(b, &c, &lw, err);
  for (size_t i = 0; wr == 0 && c.archives && c.archives[i]; i += 2) {
    /* An archive's destination is a directory: it gets an entry too. */
    free(pdst);
    pdst = xasprintf("%s/", c.archives[i + 1]);
    parent_entries(b, &c, pdst, &lw, NULL, err);
    wr = *err ? -1 : extract_into(b, &c, c.archives[i], c.archives[i + 1], &lw, err);
  }
  if (wr == 0 && lw_commit(b, &lw, st, in->text, record, err) == 0) {
    cache_later(b, st->chain, record);
    r = 0;
  }
  lw_free(&lw);
  if (r < 0)
    line_err(b, err);
out:
  stage_clear(&img);
  copy_clear(&c);
  return r;
}

/* ---- RUN -------------------------------------------------------------------------------------------- */

/* Files agsx itself writes into every sandbox's root: never part of a
 * layer (Docker bind-mounts them for RUN). */
static bool agsx_made(const char *path) {
  return strcmp(path, "etc/hosts") == 0 || strcmp(path, "etc/hostname") == 0 ||
         strcmp(path, "etc/resolv.conf") == 0;
}

struct upper_walk {
  struct build *b;
  struct lw *w;
  uid_t base;
  struct {
    dev_t dev;
    ino_t ino;
    char *path;
  } *links;
  size_t n_links;
};

static uid_t shift(uid_t id, uid_t base) {
  return id >= base && id - base < AGSX_UID_RANGE ? id - base : 0;
}

/* Walks the upper directory DIRFD (on the sandbox's tmpfs, never through a
 * symlink) into the layer. */
static int upper_dir(struct upper_walk *u, int dirfd, const char *prefix, int depth,
                     agsx_error_t *err) {
  if (depth > 256)
    return agsx_error_set(err, 0, "RUN made a tree deeper than 256 levels");
  _cleanup_strv_ char **names = NULL;
  if (list_dir(dirfd, "", &names, err) < 0)
    return -1;
  for (size_t i = 0; names[i]; i++) {
    _cleanup_free_ char *path = *prefix ? xasprintf("%s/%s", prefix, names[i]) : xstrdup(names[i]);
    if (agsx_made(path))
      continue;
    struct stat st;
    if (fstatat(dirfd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
      return agsx_error_set(err, errno, "`%s`", path);
    struct lentry le = {.path = path, .mode = st.st_mode, .uid = shift(st.st_uid, u->base),
                        .gid = shift(st.st_gid, u->base), .mtime = st.st_mtime,
                        .size = st.st_size, .fd = -1};
    _cleanup_free_ char *wh = NULL, *target = NULL;
    _cleanup_close_ int fd = -1;
    if (is_whiteout(&st)) {
      wh = *prefix ? xasprintf("%s/.wh.%s", prefix, names[i]) : xasprintf(".wh.%s", names[i]);
      le.path = wh, le.mode = S_IFREG | 0644, le.uid = le.gid = 0, le.size = 0;
    } else if (S_ISLNK(st.st_mode)) {
      target = xzalloc(4096);
      ssize_t n = readlinkat(dirfd, names[i], target, 4095);
      if (n < 0)
        return agsx_error_set(err, errno, "readlink `%s`", path);
      le.link = target;
    } else if (S_ISREG(st.st_mode)) {
      if (st.st_nlink > 1) {
        for (size_t k = 0; k < u->n_links && !le.hardlink; k++)
          if (u->links[k].dev == st.st_dev && u->links[k].ino == st.st_ino)
            le.hardlink = u->links[k].path;
        if (!le.hardlink) {
          u->links = xrealloc(u->links, (u->n_links + 1) * sizeof(*u->links));
          u->links[u->n_links].dev = st.st_dev;
          u->links[u->n_links].ino = st.st_ino;
          u->links[u->n_links++].path = xstrdup(path);
        }
      }
      if (!le.hardlink) {
        _cleanup_free_ char *what = xasprintf("`%s`", path);
        fd = agsx_check_regular(
            openat(dirfd, names[i], O_RDONLY | O_NOFOLLOW | O_CLOEXEC | AGSX_O_UNTRUSTED), what,
            err);
        if (fd < 0)
          return -1;
        le.fd = fd;
      }
    } else if (!S_ISDIR(st.st_mode) && !S_ISFIFO(st.st_mode)) {
      continue; /* sockets, devices: not in layers */
    }
    if (lw_add(u->w, &le, err) < 0)
      return -1;
    if (!S_ISDIR(st.st_mode))
      continue;
    _cleanup_close_ int sub = openat(dirfd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                                                         O_CLOEXEC);
    if (sub < 0)
      return agsx_error_set(err, errno, "open `%s`", path);
    char v[8];
    ssize_t xl = fgetxattr(sub, "user.overlay.opaque", v, sizeof(v));
    if (xl == 1 && v[0] == 'y') {
      _cleanup_free_ char *opq = xasprintf("%s/.wh..wh..opq", path);
      struct lentry oe = {.path = opq, .mode = S_IFREG | 0644, .mtime = st.st_mtime, .fd = -1};
      if (lw_add(u->w, &oe, err) < 0)
        return -1;
    }
    if (upper_dir(u, sub, path, depth + 1, err) < 0)
      return -1;
  }
  return 0;
}

/* The network of this RUN: `RUN --network=none` is internal, `default`
 * the build's --network; `host` is never given to a sandbox. */
static int run_network_mode(struct build *b, const char **ret, agsx_error_t *err) {
  const char *flag = agsx_df_flag(b->in, "network", NULL);
  *ret = b->o->network;
  if (flag == NULL || strcmp(flag, "default") == 0)
    return 0;
  if (strcmp(flag, "none") == 0) {
    *ret = "internal";
    return 0;
  }
  return agsx_error_set(err, 0, "Dockerfile:%u: RUN --network=%s is not supported (none or default)",
                        b->in->line, flag);
}

/* The sandbox's network for RUN: its mode must parse (it was checked on
 * the command line; RUN --network may only narrow it). */
static int run_network(struct build *b, const char *mode, agsx_error_t *err) {
  enum agsx_net_mode m;
  const char *name;
  if (agsx_net_mode_parse(mode, &m, &name, err) < 0)
    return agsx_error_wrap(err, "Dockerfile:%u: RUN", b->in->line);
  return 0;
}

static void keep_tail(char *tail, size_t *len, const char *buf, size_t n) {
  if (n >= TAIL_MAX) {
    memcpy(tail, buf + n - TAIL_MAX, TAIL_MAX);
    *len = TAIL_MAX;
    return;
  }
  if (*len + n > TAIL_MAX) {
    size_t drop = *len + n - TAIL_MAX;
    memmove(tail, tail + drop, *len - drop);
    *len -= drop;
  }
  memcpy(tail + *len, buf, n);
  *len += n;
}

/* The last lines of the output, on one line for the error message. */
static char *tail_lines(const char *tail, size_t len) {
  while (len && (tail[len - 1] == '\n' || tail[len - 1] == '\r'))
    len--;
  size_t start = len, lines = 0;
  while (start > 0 && lines < 5)
    if (tail[--start] == '\n')
      lines++;
  if (tail[start] == '\n')
    start++;
  char *s = xstrndup(tail + start, len - start);
  for (char *p = s; *p; p++)
    if (*p == '\n')
      *p = '|';
    else if ((unsigned char)*p < 0x20)
      *p = ' ';
  return s;
}

/* The step's output: the tail kept for the error message, the rest shown. */
struct run_out {
  struct build *b;
  char tail[TAIL_MAX];
  size_t tlen;
};

static void run_output(void *data, const char *buf, size_t n) {
  struct run_out *o = data;
  keep_tail(o->tail, &o->tlen, buf, n);
  if (o->b->o->progress)
    o->b->o->progress(buf, n, o->b->o->data);
}

/* Runs the step in a sandbox of the lifecycle library (network, DNS relay,
 * firewall watch, seccomp as for `agsx run`), on the stage's layers, its
 * upper directory handed back in *RET_LC's sandbox. */
static int run_sandbox(struct build *b, char **argv, char **env, const char *net,
                       struct agsx_lifecycle **ret_lc, agsx_error_t *err) {
  struct stage *st = b->cur;
  _cleanup_strv_ char **paths = xzalloc((st->n_layers + 1) * sizeof(char *));
  for (size_t i = 0; i < st->n_layers; i++)
    paths[i] = layer_path(b, st->layers[i].diff_id);
  struct run_out *out = xzalloc(sizeof(*out));
  out->b = b;
  struct agsx_run_spec spec = {
      .root = b->o->root ? b->o->root : "/var/lib/agsx", .state = b->o->state_dir,
      .layers = paths, .n_layers = st->n_layers, .cmd = argv, .env = env, .user = st->user,
      .workdir = st->workdir, .hostname = "buildkitsandbox", .network = net,
      .disk = 8ull << 30, .keep_upper = true, .ephemeral = true, .no_timeout = true,
      .no_signals = true, .cut_kills = true, .on_output = run_output, .output_data = out,
      .cancel_fd = b->o->cancel_fd >= 0 ? &b->o->cancel_fd : NULL,
  };
  struct agsx_lifecycle *lc = NULL;
  int r = agsx_lifecycle_create(&spec, &lc, err);
  if (r == 0)
    agsx_lifecycle_run(lc, NULL, err);
  *ret_lc = lc;
  const struct agsx_sandbox *sb = lc ? agsx_lifecycle_sandbox(lc) : NULL;
  if (sb == NULL) {
    free(out);
    return agsx_error_wrap(err, "Dockerfile:%u: RUN", b->in->line);
  }
  agsx_error_free(err); /* the teardown's: the step's result is what counts */
  _cleanup_free_ char *t = tail_lines(out->tail, out->tlen);
  free(out);
  if (agsx_lifecycle_cancelled(lc))
    return agsx_error_set(err, 0, "Dockerfile:%u: RUN: the build was interrupted", b->in->line);
  if (agsx_lifecycle_cut(lc))
    return agsx_error_set(err, 0, "Dockerfile:%u: RUN: %s", b->in->line, agsx_lifecycle_cut(lc));
  if (sb->exit_code != 0 || !sb->exited)
    return agsx_error_set(err, 0, "Dockerfile:%u: RUN failed with exit code %d%s%s", b->in->line,
                          sb->exit_code, *t ? ": " : "", t);
  return 0;
}

static int do_run(struct build *b, agsx_error_t *err) {
  struct stage *st = b->cur;
  const struct agsx_df_instr *in = b->in;
  _cleanup_strv_ char **argv = NULL;
  json_or_shell(b, &argv);
  /* ARGs go to the environment, under ENV (which wins). */
  _cleanup_strv_ char **env = strv_dup(st->args);
  for (size_t i = 0; st->env && st->env[i]; i++) {
    char *eq = strchr(st->env[i], '=');
    if (eq) {
      _cleanup_free_ char *k = xstrndup(st->env[i], (size_t)(eq - st->env[i]));
      kv_set(&env, k, eq + 1);
    }
  }
  if (!kv_get(env, "PATH"))
    kv_set(&env, "PATH", DEFAULT_PATH);
  /* The key: the instruction with the args it sees, under the parent. */
  _cleanup_sha256_ agsx_sha256 *h = agsx_sha256_new();
  for (size_t i = 0; argv[i]; i++)
    agsx_sha256_update(h, argv[i], strlen(argv[i]) + 1);
  for (size_t i = 0; env[i]; i++)
    agsx_sha256_update(h, env[i], strlen(env[i]) + 1);
  const char *net;
  if (run_network_mode(b, &net, err) < 0)
    return -1;
  _cleanup_free_ char *ctx = xasprintf("U %s W %s N %s", st->user ? st->user : "",
                                       st->workdir ? st->workdir : "", net);
  agsx_sha256_update(h, ctx, strlen(ctx));
  char key[AGSX_DIGEST_LEN];
  agsx_sha256_final(h, key);
  chain(st, key, strlen(key));
  banner(b);
  _cleanup_free_ char *created = xasprintf("RUN %s", in->json ? in->args : in->args);
  if (cache_hit(b, st, created))
    return 0;
  if (run_network(b, net, err) < 0)
    return -1;
  struct agsx_lifecycle *lc = NULL;
  int r = run_sandbox(b, argv, env, net, &lc, err);
  const struct agsx_sandbox *sb = lc ? agsx_lifecycle_sandbox(lc) : NULL;
  if (r == 0 && (sb == NULL || sb->upperfd < 0))
    r = agsx_error_set(err, 0, "Dockerfile:%u: RUN: the sandbox did not hand back its changes",
                       in->line);
  struct lw lw = {.fd = -1};
  char record[256];
  if (r == 0 && (r = lw_open(b, &lw, err)) < 0)
    line_err(b, err);
  if (r == 0) {
    struct upper_walk u = {.b = b, .w = &lw, .base = sb->ids.base};
    r = upper_dir(&u, sb->upperfd, "", 0, err);
    for (size_t i = 0; i < u.n_links; i++)
      free(u.links[i].path);
    free(u.links);
    if (r < 0)
      line_err(b, err);
    else if ((r = lw_commit(b, &lw, st, created, record, err)) == 0)
      cache_later(b, st->chain, record);
  }
  lw_free(&lw);
  agsx_lifecycle_free(lc);
  return r;
}

/* ---- the image ---------------------------------------------------------------------------------- */

static void gen_strv(yajl_gen g, const char *key, char *const *v) {
  if (v == NULL)
    return;
  agsx_json_key(g, key);
  yajl_gen_array_open(g);
  for (size_t i = 0; v[i]; i++)
    agsx_json_str(g, v[i]);
  yajl_gen_array_close(g);
}

static void gen_set(yajl_gen g, const char *key, char *const *v) {
  if (v == NULL || v[0] == NULL)
    return;
  agsx_json_key(g, key);
  yajl_gen_map_open(g);
  for (size_t i = 0; v[i]; i++) {
    agsx_json_key(g, v[i]);
    yajl_gen_map_open(g);
    yajl_gen_map_close(g);
  }
  yajl_gen_map_close(g);
}

static char *gen_config(struct stage *st, const char *created, size_t *ret_len) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "created", created);
  agsx_json_kv_str(g, "architecture", "amd64");
  agsx_json_kv_str(g, "os", "linux");
  agsx_json_key(g, "config");
  yajl_gen_map_open(g);
  if (st->user)
    agsx_json_kv_str(g, "User", st->user);
  gen_set(g, "ExposedPorts", st->ports);
  gen_strv(g, "Env", st->env);
  gen_strv(g, "Entrypoint", st->entrypoint);
  gen_strv(g, "Cmd", st->cmd);
  gen_set(g, "Volumes", st->volumes);
  if (st->workdir)
    agsx_json_kv_str(g, "WorkingDir", st->workdir);
  if (st->labels && st->labels[0]) {
    agsx_json_key(g, "Labels");
    yajl_gen_map_open(g);
    for (size_t i = 0; st->labels[i]; i++) {
      char *eq = strchr(st->labels[i], '=');
      _cleanup_free_ char *k = xstrndup(st->labels[i], (size_t)(eq - st->labels[i]));
      agsx_json_kv_str(g, k, eq + 1);
    }
    yajl_gen_map_close(g);
  }
  if (st->stopsignal)
    agsx_json_kv_str(g, "StopSignal", st->stopsignal);
  gen_strv(g, "Shell", st->shell);
  yajl_gen_map_close(g);
  agsx_json_key(g, "rootfs");
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "type", "layers");
  agsx_json_key(g, "diff_ids");
  yajl_gen_array_open(g);
  for (size_t i = 0; i < st->n_layers; i++)
    agsx_json_str(g, st->layers[i].diff_id);
  yajl_gen_array_close(g);
  yajl_gen_map_close(g);
  agsx_json_key(g, "history");
  yajl_gen_array_open(g);
  for (size_t i = 0; st->base_history && YAJL_IS_ARRAY(st->base_history) &&
                     i < st->base_history->u.array.len;
       i++)
    agsx_json_value(g, st->base_history->u.array.values[i]);
  for (size_t i = 0; st->history && st->history[i]; i++) {
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "created", created);
    agsx_json_kv_str(g, "created_by", st->history[i] + 1);
    agsx_json_kv_str(g, "comment", "agsx build");
    if (st->history[i][0] == '1')
      agsx_json_kv_bool(g, "empty_layer", true);
    yajl_gen_map_close(g);
  }
  yajl_gen_array_close(g);
  yajl_gen_map_close(g);
  return agsx_json_gen_steal(g, ret_len);
}

static int write_image(struct build *b, struct stage *st, agsx_error_t *err) {
  _cleanup_free_ char *created = agsx_format_rfc3339(agsx_now_ns() / 1000000000LL);
  size_t clen, mlen;
  _cleanup_free_ char *config = gen_config(st, created, &clen);
  char cdigest[AGSX_DIGEST_LEN];
  if (clen > AGSX_IMAGE_JSON_MAX)
    return agsx_error_set(err, 0, "the image config would be %zu bytes, over the limit of %u", clen,
                          AGSX_IMAGE_JSON_MAX);
  if (agsx_store_stage_blob_mem(b->s, b->workfd, config, clen, cdigest, err) < 0)
    return -1;
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_int(g, "schemaVersion", 2);
  agsx_json_kv_str(g, "mediaType", AGSX_MT_OCI_MANIFEST);
  agsx_json_key(g, "config");
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "mediaType", AGSX_MT_OCI_CONFIG);
  agsx_json_kv_str(g, "digest", cdigest);
  agsx_json_kv_int(g, "size", (int64_t)clen);
  yajl_gen_map_close(g);
  agsx_json_key(g, "layers");
  yajl_gen_array_open(g);
  for (size_t i = 0; i < st->n_layers; i++) {
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "mediaType", st->layers[i].media_type);
    agsx_json_kv_str(g, "digest", st->layers[i].digest);
    agsx_json_kv_int(g, "size", st->layers[i].size);
    yajl_gen_map_close(g);
  }
  yajl_gen_array_close(g);
  yajl_gen_map_close(g);
  _cleanup_free_ char *manifest = agsx_json_gen_steal(g, &mlen);
  struct agsx_descriptor md = {.media_type = (char *)AGSX_MT_OCI_MANIFEST, .size = (int64_t)mlen};
  if (agsx_store_stage_blob_mem(b->s, b->workfd, manifest, mlen, md.digest, err) < 0 ||
      agsx_store_commit(b->s, b->workfd, err) < 0)
    return -1;
  cache_write_all(b);
  size_t ntags = agsx_strv_len(b->o->tags);
  for (size_t i = 0; i < (ntags ? ntags : 1); i++)
    if (agsx_store_tag(b->s, ntags ? b->o->tags[i] : NULL, &md, err) < 0)
      return -1;
  memcpy(b->res->digest, md.digest, AGSX_DIGEST_LEN);
  return 0;
}

/* WORKDIR makes its directory when no layer has it (as Docker does): a
 * small layer with the directory and its parents. */
static int workdir_layer(struct build *b, agsx_error_t *err) {
  struct stage *st = b->cur;
  _cleanup_free_ char *rel = clean_abs(st->workdir);
  if (*rel == '\0')
    return 0;
  agsx_error_t e = NULL;
  _cleanup_close_ int fd = lookup_in_layers(b, st, rel, NULL, &e);
  bool missing = fd < 0 && agsx_error_errno(&e) == ENOENT;
  agsx_error_free(&e);
  if (!missing)
    return 0;
  _cleanup_free_ char *key = xasprintf("WORKDIR mkdir %s", rel);
  chain(st, key, strlen(key));
  _cleanup_free_ char *created = xasprintf("WORKDIR %s", st->workdir);
  /* the history entry of the metadata step becomes this layer's */
  if (st->history && agsx_strv_len(st->history) > 0) {
    size_t n = agsx_strv_len(st->history);
    free(st->history[n - 1]);
    st->history[n - 1] = NULL;
  }
  if (cache_hit(b, st, created))
    return 0;
  struct lw lw;
  char record[256];
  int r = lw_open(b, &lw, err);
  if (r == 0) {
    _cleanup_free_ char *withdir = xasprintf("%s/", rel);
    struct copy c = {0};
    parent_entries(b, &c, withdir, &lw, NULL, err);
    copy_clear(&c);
    r = *err ? -1 : lw_commit(b, &lw, st, created, record, err);
    if (r == 0)
      cache_later(b, st->chain, record);
  }
  lw_free(&lw);
  return r < 0 ? line_err(b, err) : 0;
}

/* ---- the driver ----------------------------------------------------------------------------------- */

static int read_inputs(struct build *b, agsx_error_t *err) {
  b->ctxfd = open(b->o->context, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (b->ctxfd < 0)
    return agsx_error_set(err, errno, "build context `%s`", b->o->context);
  _cleanup_free_ char *buf = NULL;
  size_t len;
  int r = b->o->dockerfile
              ? agsx_read_file_at(AT_FDCWD, b->o->dockerfile, AGSX_DOCKERFILE_MAX, &buf, &len, err)
              : agsx_read_file_at(b->ctxfd, "Dockerfile", AGSX_DOCKERFILE_MAX, &buf, &len, err);
  if (r < 0)
    return agsx_error_wrap(err, "Dockerfile");
  if (agsx_dockerfile_parse(buf, len, &b->df, err) < 0)
    return -1;
  _cleanup_free_ char *ig = NULL;
  _cleanup_close_ int igfd = agsx_open_beneath_nofollow(b->ctxfd, ".dockerignore", O_RDONLY, 0);
  if (igfd >= 0) {
    if (agsx_read_fd(igfd, AGSX_DOCKERIGNORE_MAX, &ig, &len, err) < 0 ||
        agsx_dockerignore_parse(ig, len, &b->ignore, err) < 0)
      return agsx_error_wrap(err, ".dockerignore");
  }
  return 0;
}

static int step(struct build *b, agsx_error_t *err) {
  const struct agsx_df_instr *in = b->in;
  if (b->cur == NULL && in->cmd != AGSX_DF_FROM)
    return do_arg(b, true, err);
  switch (in->cmd) {
  case AGSX_DF_FROM:
    return do_from(b, err);
  case AGSX_DF_RUN:
    return do_run(b, err);
  case AGSX_DF_COPY:
  case AGSX_DF_ADD:
    return do_copy(b, err);
  default: {
    banner(b);
    if (do_meta(b, err) < 0)
      return -1;
    if (in->cmd != AGSX_DF_ARG) {
      /* The state after substitution is what later steps depend on. */
      _cleanup_free_ char *d = xasprintf("%s|%s|%s", in->text, b->cur->user ? b->cur->user : "",
                                         b->cur->workdir ? b->cur->workdir : "");
      chain(b->cur, d, strlen(d));
      for (size_t i = 0; b->cur->env && b->cur->env[i]; i++)
        chain(b->cur, b->cur->env[i], strlen(b->cur->env[i]));
    }
    history(b->cur, in->text, true);
    return in->cmd == AGSX_DF_WORKDIR ? workdir_layer(b, err) : 0;
  }
  }
}

int agsx_build(struct agsx_store *s, const struct agsx_build_opts *o, struct agsx_build_result *ret,
               agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  agsx_error_t cerr = NULL;
  if (agsx_store_clean_tmp(s, &cerr) < 0) {
    agsx_warn("%s", cerr->msg);
    agsx_error_free(&cerr);
  }
  struct build b = {.s = s, .o = o, .workfd = -1, .ctxfd = -1, .cachefd = -1, .res = ret};
  /* Docker's automatic platform arguments, global scope. */
  static const char *const platform_args[][2] = {
      {"BUILDPLATFORM", "linux/amd64"}, {"BUILDOS", "linux"}, {"BUILDARCH", "amd64"},
      {"TARGETPLATFORM", "linux/amd64"}, {"TARGETOS", "linux"}, {"TARGETARCH", "amd64"}};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(platform_args); i++) {
    kv_set(&b.meta, platform_args[i][0], platform_args[i][1]);
    strv_add(&b.meta_decl, platform_args[i][0]);
  }
  int r = read_inputs(&b, err);
  if (r == 0) {
    b.workfd = agsx_store_mkwork(s, "build", &b.work, err);
    r = b.workfd < 0 ? -1 : 0;
  }
  if (r == 0) {
    if (mkdirat(s->rootfd, "cache", 0700) < 0 && errno != EEXIST)
      agsx_warn("build cache: %s", strerror(errno));
    b.cachefd = openat(s->rootfd, "cache", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  }
  for (size_t i = 0; r == 0 && i < b.df.n; i++) {
    b.in = &b.df.v[i];
    r = cancelled(&b) ? agsx_error_set(err, 0, "the build was interrupted") : step(&b, err);
  }
  if (r == 0 && b.cur == NULL)
    r = agsx_error_set(err, 0, "Dockerfile has no FROM");
  if (r == 0)
    r = write_image(&b, b.cur, err);
  for (size_t i = 0; o->build_args && o->build_args[i] && r == 0; i++) {
    _cleanup_free_ char *k = xstrndup(o->build_args[i], strcspn(o->build_args[i], "="));
    if (!strv_has(b.used_args, k))
      agsx_warn("build argument `%s` was not consumed by any ARG", k);
  }
  for (size_t i = 0; i < b.n_stages; i++)
    stage_clear(&b.stages[i]);
  agsx_dockerfile_clear(&b.df);
  agsx_dockerignore_clear(&b.ignore);
  agsx_strv_free(b.meta);
  agsx_strv_free(b.meta_decl);
  agsx_strv_free(b.used_args);
  agsx_strv_free(b.pending_cache);
  if (b.have_bpf)
    agsx_seccomp_bpf_clear(&b.bpf);
  agsx_closep(&b.ctxfd);
  agsx_closep(&b.cachefd);
  agsx_closep(&b.workfd);
  if (b.work && agsx_rm_rf_at(s->tmpfd, b.work, &cerr) < 0) {
    agsx_warn("%s", cerr->msg);
    agsx_error_free(&cerr);
  }
  free(b.work);
  return r;
}
