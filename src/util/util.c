/* agsx — util: errors, cleanup, fd/path helpers, logging, parsing. */
#include "config.h"

#include "util/util.h"

#include <ctype.h>
#include <inttypes.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <string.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>

/* ---- errors ---------------------------------------------------------------- */

static char *vformat(const char *fmt, va_list ap) {
  char *s = NULL;
  if (vasprintf(&s, fmt, ap) < 0)
    abort();
  return s;
}

int agsx_error_set(agsx_error_t *err, int errno_, const char *fmt, ...) {
  if (err == NULL || *err != NULL)
    return -1;
  va_list ap;
  va_start(ap, fmt);
  _cleanup_free_ char *msg = vformat(fmt, ap);
  va_end(ap);
  struct agsx_error_s *e = xzalloc(sizeof(*e));
  e->errno_ = errno_;
  e->msg = errno_ ? xasprintf("%s: %s", msg, strerror(errno_)) : steal_ptr(&msg);
  *err = e;
  return -1;
}

int agsx_error_set_quiet(agsx_error_t *err, int errno_, const char *fmt, ...) {
  if (err == NULL || *err != NULL)
    return -1;
  va_list ap;
  va_start(ap, fmt);
  struct agsx_error_s *e = xzalloc(sizeof(*e));
  e->errno_ = errno_;
  e->msg = vformat(fmt, ap);
  va_end(ap);
  *err = e;
  return -1;
}

int agsx_error_wrap(agsx_error_t *err, const char *fmt, ...) {
  if (err == NULL || *err == NULL)
    return -1;
  va_list ap;
  va_start(ap, fmt);
  _cleanup_free_ char *ctx = vformat(fmt, ap);
  va_end(ap);
  char *msg = xasprintf("%s: %s", ctx, (*err)->msg);
  free((*err)->msg);
  (*err)->msg = msg;
  return -1;
}

void agsx_error_free(agsx_error_t *err) {
  if (err == NULL || *err == NULL)
    return;
  free((*err)->msg);
  free(*err);
  *err = NULL;
}

int agsx_error_errno(const agsx_error_t *err) {
  if (err == NULL || *err == NULL || (*err)->errno_ == 0)
    return EIO;
  return (*err)->errno_;
}

/* ---- cleanup ---------------------------------------------------------------- */

void agsx_freep(void *p) { free(*(void **)p); }

void agsx_closep(int *fd) {
  if (*fd >= 0) {
    int saved = errno;
    close(*fd);
    errno = saved;
  }
  *fd = -1;
}

void agsx_fclosep(FILE **f) {
  if (*f)
    fclose(*f);
  *f = NULL;
}

void agsx_closedirp(DIR **d) {
  if (*d)
    closedir(*d);
  *d = NULL;
}

void agsx_strv_free(char **v) {
  if (v == NULL)
    return;
  for (char **p = v; *p; p++)
    free(*p);
  free(v);
}

void agsx_strvfreep(char ***v) {
  agsx_strv_free(*v);
  *v = NULL;
}

size_t agsx_strv_len(char *const *v) {
  size_t n = 0;
  while (v && v[n])
    n++;
  return n;
}

void agsx_strv_push(char ***v, const char *s) {
  size_t n = agsx_strv_len(*v);
  *v = xrealloc(*v, (n + 2) * sizeof(char *));
  (*v)[n] = xstrdup(s);
  (*v)[n + 1] = NULL;
}

char **agsx_strv_concat(char *const *a, char *const *b) {
  size_t na = agsx_strv_len(a), nb = agsx_strv_len(b);
  char **v = xzalloc((na + nb + 1) * sizeof(char *));
  for (size_t i = 0; i < na; i++)
    v[i] = xstrdup(a[i]);
  for (size_t i = 0; i < nb; i++)
    v[na + i] = xstrdup(b[i]);
  return v;
}

bool agsx_strv_contains(char *const *v, const char *s) {
  for (size_t i = 0; v && v[i]; i++)
    if (strcmp(v[i], s) == 0)
      return true;
  return false;
}

static uint64_t str_hash(const char *s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* The slot of S in SET: its member's, or the free one where it would go. */
static size_t strset_slot(const struct agsx_strset *set, const char *s) {
  size_t i = str_hash(s) & (set->cap - 1);
  while (set->slots[i] && strcmp(set->v[set->slots[i] - 1], s) != 0)
    i = (i + 1) & (set->cap - 1);
  return i;
}

bool agsx_strset_has(const struct agsx_strset *set, const char *s) {
  return set->cap > 0 && set->slots[strset_slot(set, s)] != 0;
}

bool agsx_strset_add(struct agsx_strset *set, const char *s) {
  if (agsx_strset_has(set, s))
    return false;
  if (2 * (set->n + 1) > set->cap) { /* at most half full */
    free(set->slots);
    set->cap = set->cap ? 2 * set->cap : 16;
    set->slots = xzalloc(set->cap * sizeof(*set->slots));
    for (size_t k = 0; k < set->n; k++)
      set->slots[strset_slot(set, set->v[k])] = k + 1;
    /* Room for cap / 2 members and the NULL: V grows with the slots. */
    set->v = xrealloc(set->v, (set->cap / 2 + 1) * sizeof(char *));
  }
  set->v[set->n] = xstrdup(s);
  set->v[set->n + 1] = NULL;
  set->n++;
  set->slots[strset_slot(set, s)] = set->n;
  return true;
}

void agsx_strset_clear(struct agsx_strset *set) {
  agsx_strv_free(set->v);
  free(set->slots);
  *set = (struct agsx_strset){0};
}

/* ---- memory and strings ------------------------------------------------------ */

void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (p == NULL)
    abort();
  return p;
}

void *xzalloc(size_t n) {
  void *p = calloc(1, n ? n : 1);
  if (p == NULL)
    abort();
  return p;
}

void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (q == NULL)
    abort();
  return q;
}

char *xstrdup(const char *s) {
  char *p = strdup(s);
  if (p == NULL)
    abort();
  return p;
}

char *xstrndup(const char *s, size_t n) {
  char *p = strndup(s, n);
  if (p == NULL)
    abort();
  return p;
}

char *xvasprintf(const char *fmt, va_list ap) { return vformat(fmt, ap); }

char *xasprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = vformat(fmt, ap);
  va_end(ap);
  return s;
}

bool agsx_str_has_prefix(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

bool agsx_str_has_suffix(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && memcmp(s + a - b, suffix, b) == 0;
}

bool agsx_list_has(const char *list, const char *word, const char *seps) {
  size_t wl = strlen(word);
  for (const char *p = list; p && *p;) {
    p += strspn(p, seps);
    size_t n = strcspn(p, seps);
    if (n > 0 && n == wl && strncmp(p, word, wl) == 0)
      return true;
    p += n;
  }
  return false;
}

/* ---- logging -------------------------------------------------------------------- */

enum agsx_log_level agsx_log_level = AGSX_LOG_WARNING;
static agsx_log_sink_fn log_sink = agsx_log_sink_stderr;
static void *log_sink_data;

void agsx_log_set_sink(agsx_log_sink_fn fn, void *data) {
  log_sink = fn ? fn : agsx_log_sink_stderr;
  log_sink_data = fn ? data : NULL;
}

int agsx_log_level_parse(const char *s, enum agsx_log_level *ret) {
  static const char *const names[] = {"error", "warning", "info", "debug"};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(names); i++)
    if (strcmp(s, names[i]) == 0) {
      *ret = (enum agsx_log_level)i;
      return 0;
    }
  if (strcmp(s, "warn") == 0) {
    *ret = AGSX_LOG_WARNING;
    return 0;
  }
  return -1;
}

void agsx_log_sink_stderr(enum agsx_log_level level, const char *msg, void *data) {
  static const char *const prefix[] = {"error: ", "warning: ", "", "debug: "};
  (void)data;
  int saved = errno;
  /* One write per line so concurrent agsx processes do not interleave. */
  dprintf(STDERR_FILENO, "agsx: %s%s\n", prefix[level], msg);
  errno = saved;
}

void agsx_log(enum agsx_log_level level, const char *fmt, ...) {
  if (level > agsx_log_level)
    return;
  int saved = errno;
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  log_sink(level, buf, log_sink_data);
  errno = saved;
}

/* ---- fds and paths ---------------------------------------------------------------- */

int agsx_openat2(int dirfd, const char *path, int flags, mode_t mode, uint64_t resolve) {
  struct open_how how = {
      .flags = (uint64_t)(flags | O_CLOEXEC),
      .mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0,
      .resolve = resolve,
  };
  int fd;
  do
    fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
  while (fd < 0 && (errno == EINTR || errno == EAGAIN));
  return fd;
}

int agsx_open_in_root(int rootfd, const char *path, int flags, mode_t mode) {
  return agsx_openat2(rootfd, path, flags, mode,
                      RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV);
}

int agsx_open_beneath_nofollow(int dirfd, const char *path, int flags, mode_t mode) {
  return agsx_openat2(dirfd, path, flags, mode,
                      RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
                          RESOLVE_NO_XDEV);
}

int agsx_check_regular(int fd, const char *what, agsx_error_t *err) {
  if (fd < 0)
    return agsx_error_set(err, errno, "open %s", what);
  struct stat st;
  if (fstat(fd, &st) < 0) {
    int e = errno;
    close(fd);
    return agsx_error_set(err, e, "stat %s", what);
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return agsx_error_set(err, 0, "%s is not a regular file", what);
  }
  return fd;
}

ssize_t agsx_read_all(int fd, void *buf, size_t len) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = read(fd, (char *)buf + done, len - done);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    if (n == 0)
      break;
    done += (size_t)n;
  }
  return (ssize_t)done;
}

int agsx_write_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

int agsx_read_fd(int fd, size_t max, char **ret_buf, size_t *ret_len, agsx_error_t *err) {
  size_t cap = 4096, len = 0;
  _cleanup_free_ char *buf = xmalloc(cap + 1);
  for (;;) {
    if (len == cap) {
      if (cap > max)
        return agsx_error_set(err, EFBIG, "file larger than %zu bytes", max);
      cap *= 2;
      buf = xrealloc(buf, cap + 1);
    }
    ssize_t n = read(fd, buf + len, cap - len);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return agsx_error_set(err, errno, "read");
    }
    if (n == 0)
      break;
    len += (size_t)n;
    if (len > max)
      return agsx_error_set(err, EFBIG, "file larger than %zu bytes", max);
  }
  buf[len] = '\0';
  *ret_buf = steal_ptr(&buf);
  if (ret_len)
    *ret_len = len;
  return 0;
}

int agsx_read_file_at(int dirfd, const char *path, size_t max, char **ret_buf, size_t *ret_len,
                      agsx_error_t *err) {
  _cleanup_close_ int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return agsx_error_set(err, errno, "open `%s`", path);
  if (agsx_read_fd(fd, max, ret_buf, ret_len, err) < 0)
    return agsx_error_wrap(err, "`%s`", path);
  return 0;
}

int agsx_write_file_atomic(int dirfd, const char *name, const void *data, size_t len, mode_t mode,
                           agsx_error_t *err) {
  _cleanup_free_ char *tmp = xasprintf(".%s.tmp-%d-%lx", name, getpid(), (long)agsx_mono_ns());
  _cleanup_close_ int fd =
      openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0)
    return agsx_error_set(err, errno, "create `%s`", tmp);
  if (agsx_write_all(fd, data, len) < 0 || fsync(fd) < 0) {
    agsx_error_set(err, errno, "write `%s`", tmp);
    unlinkat(dirfd, tmp, 0);
    return -1;
  }
  if (renameat(dirfd, tmp, dirfd, name) < 0) {
    agsx_error_set(err, errno, "rename `%s` to `%s`", tmp, name);
    unlinkat(dirfd, tmp, 0);
    return -1;
  }
  /* The rename itself must reach the disk before we report success. */
  if (fsync(dirfd) < 0)
    return agsx_error_set(err, errno, "fsync directory of `%s`", name);
  return 0;
}

int agsx_mkdir_p(const char *path, mode_t mode, agsx_error_t *err) {
  _cleanup_free_ char *p = xstrdup(path);
  size_t len = strlen(p);
  while (len > 1 && p[len - 1] == '/')
    p[--len] = '\0';
  for (char *s = p + 1; *s; s++) {
    if (*s != '/')
      continue;
    *s = '\0';
    if (mkdir(p, mode) < 0 && errno != EEXIST)
      return agsx_error_set(err, errno, "mkdir `%s`", p);
    *s = '/';
  }
  if (mkdir(p, mode) < 0 && errno != EEXIST)
    return agsx_error_set(err, errno, "mkdir `%s`", p);
  return 0;
}

int agsx_mkdir_p_open(const char *path, mode_t mode, agsx_error_t *err) {
  if (agsx_mkdir_p(path, mode, err) < 0)
    return -1;
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "open `%s`", path);
  return fd;
}

DIR *agsx_dir_stream(int dirfd) {
  int fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
  if (fd < 0)
    return NULL;
  DIR *d = fdopendir(fd);
  if (d == NULL) {
    int saved = errno;
    close(fd);
    errno = saved;
    return NULL;
  }
  rewinddir(d);
  return d;
}

/* Tree removal holds two fds whatever the depth: a layer that descends
 * through its own symlinks, or sandbox code running `mkdir -p` in a loop,
 * makes trees thousands of levels deep, and a walk holding one fd (and one
 * stack frame) per level runs out of both and leaks the tree. The walk
 * keeps, per level, only the directory's identity (st_dev, st_ino), its name
 * and the names of the subdirectories still to remove; it goes down by
 * opening a child without following symlinks and up through "..", which
 * must be the very directory it came from (same st_dev and st_ino), so a
 * directory moved meanwhile stops the removal instead of steering it. */
struct rm_level {
  dev_t dev;
  ino_t ino;
  char *name;     /* in the parent level; NULL at the top */
  char **subdirs; /* still to remove, taken from the end */
  size_t n, cap;
};

struct rm_walk {
  struct rm_level *v;
  size_t n, cap;
  const struct agsx_rm_gate *gate; /* NULL: everything goes */
};

static void rm_level_clear(struct rm_level *l) {
  free(l->name);
  for (size_t i = 0; i < l->n; i++)
    free(l->subdirs[i]);
  free(l->subdirs);
}

static void rm_walk_clear(struct rm_walk *w) {
  for (size_t i = 0; i < w->n; i++)
    rm_level_clear(&w->v[i]);
  free(w->v);
}

/* Unlinks everything in the directory FD but its subdirectories, which it
 * records in L; with a gate, each entry passes it first (the first refusal
 * stops the walk). The stream reads a duplicate: FD stays ours. */
static int rm_scan(int fd, struct rm_level *l, const struct agsx_rm_gate *gate, agsx_error_t *err) {
  _cleanup_dir_ DIR *dir = agsx_dir_stream(fd);
  if (dir == NULL)
    return agsx_error_set(err, errno, "read directory");
  struct dirent *de;
  while ((errno = 0, de = readdir(dir)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    if (gate && gate->may(gate->data, fd, de->d_name, err) < 0)
      return -1;
    if (unlinkat(fd, de->d_name, 0) == 0 || errno == ENOENT)
      continue;
    if (errno != EISDIR && errno != EPERM)
      return agsx_error_set(err, errno, "unlink `%s`", de->d_name);
    if (l->n == l->cap) {
      l->cap = l->cap ? 2 * l->cap : 8;
      l->subdirs = xrealloc(l->subdirs, l->cap * sizeof(*l->subdirs));
    }
    l->subdirs[l->n++] = xstrdup(de->d_name);
  }
  if (errno != 0)
    return agsx_error_set(err, errno, "readdir");
  return 0;
}

/* Enters subdirectory NAME of *FD: *FD becomes the child's. */
static int rm_down(struct rm_walk *w, int *fd, char *name, agsx_error_t *err) {
  _cleanup_free_ char *owned = name;
  /* Again at the descent: the entry may have been replaced since the scan. */
  if (w->gate && w->gate->may(w->gate->data, *fd, name, err) < 0)
    return -1;
  int sub = openat(*fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (sub < 0 && errno == ENOENT)
    return 0;
  if (sub < 0)
    return agsx_error_set(err, errno, "open `%s`", name);
  struct stat st;
  if (fstat(sub, &st) < 0) {
    close(sub);
    return agsx_error_set(err, errno, "stat `%s`", name);
  }
  close(*fd);
  *fd = sub;
  if (w->n == w->cap) {
    w->cap = 2 * w->cap;
    w->v = xrealloc(w->v, w->cap * sizeof(*w->v));
  }
  w->v[w->n++] = (struct rm_level){.dev = st.st_dev, .ino = st.st_ino, .name = steal_ptr(&owned)};
  return rm_scan(*fd, &w->v[w->n - 1], w->gate, err);
}

/* Leaves the emptied top level for its parent and removes it there. */
static int rm_up(struct rm_walk *w, int *fd, agsx_error_t *err) {
  struct rm_level *l = &w->v[w->n - 1], *parent = &w->v[w->n - 2];
  int up = openat(*fd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (up < 0)
    return agsx_error_set(err, errno, "open the parent of `%s`", l->name);
  struct stat st;
  if (fstat(up, &st) < 0) {
    close(up);
    return agsx_error_set(err, errno, "stat the parent of `%s`", l->name);
  }
  if (st.st_dev != parent->dev || st.st_ino != parent->ino) {
    close(up);
    return agsx_error_set(err, EXDEV, "`%s` moved during the removal", l->name);
  }
  close(*fd);
  *fd = up;
  if (unlinkat(*fd, l->name, AT_REMOVEDIR) < 0 && errno != ENOENT)
    return agsx_error_set(err, errno, "rmdir `%s`", l->name);
  rm_level_clear(l);
  w->n--;
  return 0;
}

/* Empties the directory FD (ours: closed here) depth first, iteratively. */
static int rm_rf_children(int fd, const struct agsx_rm_gate *gate, agsx_error_t *err) {
  _cleanup_close_ int cur = fd;
  _cleanup_(rm_walk_clear) struct rm_walk w = {
      .v = xzalloc(16 * sizeof(*w.v)), .n = 1, .cap = 16, .gate = gate};
  struct stat st;
  if (fstat(cur, &st) < 0)
    return agsx_error_set(err, errno, "stat");
  w.v[0].dev = st.st_dev;
  w.v[0].ino = st.st_ino;
  if (rm_scan(cur, &w.v[0], gate, err) < 0)
    return -1;
  while (w.n > 1 || w.v[0].n > 0) {
    struct rm_level *l = &w.v[w.n - 1];
    int r = l->n > 0 ? rm_down(&w, &cur, l->subdirs[--l->n], err) : rm_up(&w, &cur, err);
    if (r < 0)
      return agsx_error_wrap(err, "%zu levels down", w.n - 1);
  }
  return 0;
}

int agsx_rm_rf_gated_at(int dirfd, const char *name, const struct agsx_rm_gate *gate,
                        agsx_error_t *err) {
  if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT)
    return 0;
  if (errno != EISDIR && errno != EPERM)
    return agsx_error_set(err, errno, "remove `%s`", name);
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "open `%s`", name);
  if (rm_rf_children(fd, gate, err) < 0)
    return agsx_error_wrap(err, "remove `%s`", name);
  if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
    return agsx_error_set(err, errno, "rmdir `%s`", name);
  return 0;
}

int agsx_rm_rf_at(int dirfd, const char *name, agsx_error_t *err) {
  return agsx_rm_rf_gated_at(dirfd, name, NULL, err);
}

int agsx_rm_children_at(int dirfd, const char *name, agsx_error_t *err) {
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT)
    return 0;
  if (fd < 0)
    return agsx_error_set(err, errno, "open `%s`", name);
  if (rm_rf_children(fd, NULL, err) < 0)
    return agsx_error_wrap(err, "empty `%s`", name);
  return 0;
}

int agsx_mkdtemp_at(int dirfd, const char *prefix, mode_t mode, char **ret_name,
                    agsx_error_t *err) {
  static const char hex[] = "0123456789abcdef";
  for (int attempt = 0; attempt < 100; attempt++) {
    uint64_t r = (uint64_t)agsx_mono_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)attempt * 7919;
    char suffix[13];
    for (int i = 0; i < 12; i++) {
      suffix[i] = hex[r & 15];
      r = r * 6364136223846793005ULL + 1442695040888963407ULL;
      r ^= r >> 29;
    }
    suffix[12] = '\0';
    _cleanup_free_ char *name = xasprintf("%s-%s", prefix, suffix);
    if (mkdirat(dirfd, name, mode) < 0) {
      if (errno == EEXIST)
        continue;
      return agsx_error_set(err, errno, "mkdir `%s`", name);
    }
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      agsx_error_set(err, errno, "open `%s`", name);
      unlinkat(dirfd, name, AT_REMOVEDIR);
      return -1;
    }
    if (ret_name)
      *ret_name = steal_ptr(&name);
    return fd;
  }
  return agsx_error_set(err, EEXIST, "cannot create a temporary directory `%s-*`", prefix);
}

int agsx_link_fd(int fd, int dirfd, const char *name) {
  if (linkat(fd, "", dirfd, name, AT_EMPTY_PATH) == 0)
    return 0;
  if (errno != ENOENT)
    return -1;
  char path[32];
  snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  return linkat(AT_FDCWD, path, dirfd, name, AT_SYMLINK_FOLLOW);
}

int agsx_fd_from_ns(int nsfd, int nstype, int (*make)(void *data), void *data) {
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
    return -1;
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;
  memset(u.buf, 0, sizeof(u.buf));
  int e = 0, fd = -1;
  struct iovec iov = {&e, sizeof(e)};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
  pid_t pid = fork();
  if (pid == 0) {
    close(sp[0]);
    if (setns(nsfd, nstype) < 0 || (fd = make(data)) < 0)
      e = errno;
    if (fd >= 0) {
      mh.msg_control = u.buf;
      mh.msg_controllen = sizeof(u.buf);
      struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    _exit(sendmsg(sp[1], &mh, MSG_NOSIGNAL) < 0);
  }
  int saved = errno;
  close(sp[1]);
  if (pid < 0) {
    close(sp[0]);
    return errno = saved, -1;
  }
  e = EIO;
  mh.msg_control = u.buf;
  mh.msg_controllen = sizeof(u.buf);
  ssize_t n;
  do
    n = recvmsg(sp[0], &mh, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  close(sp[0]);
  struct cmsghdr *c = n > 0 ? CMSG_FIRSTHDR(&mh) : NULL;
  if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
      c->cmsg_len == CMSG_LEN(sizeof(int)))
    memcpy(&fd, CMSG_DATA(c), sizeof(int));
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
    ;
  if (fd < 0)
    return errno = n == (ssize_t)sizeof(e) && e ? e : EIO, -1;
  return fd;
}

int agsx_lock_at(int dirfd, const char *name, bool exclusive, agsx_error_t *err) {
  _cleanup_close_ int fd = openat(dirfd, name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    return agsx_error_set(err, errno, "open lock `%s`", name);
  int r;
  do
    r = flock(fd, exclusive ? LOCK_EX : LOCK_SH);
  while (r < 0 && errno == EINTR);
  if (r < 0)
    return agsx_error_set(err, errno, "lock `%s`", name);
  return steal_fd(&fd);
}

static int cmp_fd(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

static void close_span(unsigned from, unsigned to) {
  if (syscall(SYS_close_range, from, to, 0) == 0)
    return;
  struct rlimit rl;
  unsigned lim = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 1u << 20
                     ? (unsigned)rl.rlim_cur
                     : 1u << 20;
  for (unsigned fd = from; fd <= to && fd < lim; fd++)
    close((int)fd);
}

void agsx_stdio_null(void) {
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0)
    return;
  for (int fd = 0; fd <= 2; fd++)
    dup2(null, fd);
  if (null > 2)
    close(null);
}

void agsx_signal_defaults(void) {
  for (int sig = 1; sig < NSIG; sig++)
    if (sig != SIGKILL && sig != SIGSTOP)
      signal(sig, SIG_DFL);
}

void agsx_close_all_except(const int *keep, size_t n) {
  int sorted[16];
  size_t k = 0;
  for (size_t i = 0; i < n && k < AGSX_ARRAY_SIZE(sorted); i++)
    if (keep[i] >= 3)
      sorted[k++] = keep[i];
  qsort(sorted, k, sizeof(*sorted), cmp_fd);
  unsigned from = 3;
  for (size_t i = 0; i < k; i++) {
    if ((unsigned)sorted[i] < from)
      continue; /* a duplicate */
    if ((unsigned)sorted[i] > from)
      close_span(from, (unsigned)sorted[i] - 1);
    from = (unsigned)sorted[i] + 1;
  }
  close_span(from, ~0U);
}

int agsx_cloexec_from(int from) {
#ifdef HAVE_DECL_SYS_CLOSE_RANGE
#if HAVE_DECL_SYS_CLOSE_RANGE
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
  if (syscall(SYS_close_range, (unsigned)from, ~0U, CLOSE_RANGE_CLOEXEC) == 0)
    return 0;
#endif
#endif
  _cleanup_dir_ DIR *d = opendir("/proc/self/fd");
  if (d == NULL)
    return -1;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    char *end;
    long fd = strtol(de->d_name, &end, 10);
    if (*end || fd < from || fd == dirfd(d))
      continue;
    int fl = fcntl((int)fd, F_GETFD);
    if (fl >= 0)
      fcntl((int)fd, F_SETFD, fl | FD_CLOEXEC);
  }
  return 0;
}

bool agsx_path_is_clean(const char *path, size_t max_len, size_t max_depth) {
  size_t len = strlen(path);
  if (len == 0 || len > max_len || path[0] == '/')
    return false;
  size_t depth = 0;
  const char *p = path;
  while (*p) {
    const char *slash = strchr(p, '/');
    size_t n = slash ? (size_t)(slash - p) : strlen(p);
    if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
      return false;
    if (n > NAME_MAX)
      return false;
    if (++depth > max_depth)
      return false;
    p += n;
    if (*p == '/')
      p++;
  }
  return true;
}

/* ---- parsing -------------------------------------------------------------------- */

int agsx_parse_duration(const char *s, uint64_t *ret_sec, agsx_error_t *err) {
  if (s == NULL || *s == '\0')
    return agsx_error_set(err, 0, "invalid duration ``: empty");
  const char *p = s;
  uint64_t total = 0;
  int last_rank = 4; /* h=3, m=2, s=1: units must come in decreasing order */
  bool any = false;
  while (*p) {
    if (!isdigit((unsigned char)*p))
      return agsx_error_set(err, 0, "invalid duration `%s`: expected a number at `%s`", s, p);
    uint64_t n = 0;
    while (isdigit((unsigned char)*p)) {
      if (n > (UINT64_MAX - 9) / 10)
        return agsx_error_set(err, 0, "invalid duration `%s`: too large (maximum 24h)", s);
      n = n * 10 + (uint64_t)(*p++ - '0');
    }
    uint64_t mult;
    int rank;
    if (*p == '\0' && !any) {
      mult = 1, rank = 1; /* plain seconds */
    } else if (*p == 'h') {
      mult = 3600, rank = 3, p++;
    } else if (*p == 'm' && p[1] != 's') {
      mult = 60, rank = 2, p++;
    } else if (*p == 's') {
      mult = 1, rank = 1, p++;
    } else if (*p == '\0') {
      return agsx_error_set(err, 0, "invalid duration `%s`: missing unit after the last number", s);
    } else {
      return agsx_error_set(err, 0, "invalid duration `%s`: unknown unit at `%s` (use s, m or h)",
                            s, p);
    }
    if (rank >= last_rank)
      return agsx_error_set(err, 0, "invalid duration `%s`: units out of order or repeated", s);
    last_rank = rank;
    if (n > AGSX_DURATION_MAX_SEC * 2ULL / mult + 1)
      return agsx_error_set(err, 0, "invalid duration `%s`: over the maximum of 24h", s);
    total += n * mult;
    any = true;
  }
  if (total == 0)
    return agsx_error_set(err, 0, "invalid duration `%s`: must be greater than zero", s);
  if (total > AGSX_DURATION_MAX_SEC)
    return agsx_error_set(err, 0, "invalid duration `%s`: over the maximum of 24h", s);
  *ret_sec = total;
  return 0;
}

char *agsx_format_duration(uint64_t sec) {
  uint64_t h = sec / 3600, m = (sec % 3600) / 60, s = sec % 60;
  char buf[64];
  size_t n = 0;
  if (h)
    n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%" PRIu64 "h", h);
  if (m)
    n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%" PRIu64 "m", m);
  if (s || n == 0)
    snprintf(buf + n, sizeof(buf) - n, "%" PRIu64 "s", s);
  return xstrdup(buf);
}

int agsx_parse_size(const char *s, uint64_t *ret_bytes, agsx_error_t *err) {
  if (s == NULL || *s == '\0')
    return agsx_error_set(err, 0, "invalid size ``: empty");
  const char *p = s;
  if (!isdigit((unsigned char)*p))
    return agsx_error_set(err, 0, "invalid size `%s`: expected a number", s);
  uint64_t whole = 0, frac = 0, frac_div = 1;
  while (isdigit((unsigned char)*p)) {
    if (whole > (UINT64_MAX - 9) / 10)
      return agsx_error_set(err, 0, "invalid size `%s`: too large", s);
    whole = whole * 10 + (uint64_t)(*p++ - '0');
  }
  if (*p == '.') {
    p++;
    if (!isdigit((unsigned char)*p))
      return agsx_error_set(err, 0, "invalid size `%s`: expected digits after `.`", s);
    while (isdigit((unsigned char)*p)) {
      if (frac_div < 1000000000ULL) {
        frac = frac * 10 + (uint64_t)(*p - '0');
        frac_div *= 10;
      }
      p++;
    }
  }
  static const struct {
    const char *suffix;
    int shift;
  } units[] = {
      {"", 0},     {"b", 0},  {"k", 10},  {"kb", 10},  {"kib", 10}, {"m", 20},  {"mb", 20},
      {"mib", 20}, {"g", 30}, {"gb", 30}, {"gib", 30}, {"t", 40},   {"tb", 40}, {"tib", 40},
  };
  char unit[8];
  size_t ul = strlen(p);
  if (ul >= sizeof(unit))
    return agsx_error_set(err, 0, "invalid size `%s`: unknown unit `%s`", s, p);
  for (size_t i = 0; i <= ul; i++)
    unit[i] = (char)tolower((unsigned char)p[i]);
  int shift = -1;
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(units); i++)
    if (strcmp(unit, units[i].suffix) == 0)
      shift = units[i].shift;
  if (shift < 0)
    return agsx_error_set(err, 0, "invalid size `%s`: unknown unit `%s` (use b, k, m, g or t)", s,
                          p);
  if (shift == 0 && frac_div > 1)
    return agsx_error_set(err, 0, "invalid size `%s`: fractional bytes", s);
  if (whole > (UINT64_MAX >> shift) - 1)
    return agsx_error_set(err, 0, "invalid size `%s`: too large", s);
  uint64_t bytes = (whole << shift) + (uint64_t)(((__uint128_t)frac << shift) / frac_div);
  if (bytes == 0)
    return agsx_error_set(err, 0, "invalid size `%s`: must be greater than zero", s);
  *ret_bytes = bytes;
  return 0;
}

char *agsx_format_size(uint64_t bytes) {
  static const char *const units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  double v = (double)bytes;
  size_t u = 0;
  while (v >= 1000.0 && u + 1 < AGSX_ARRAY_SIZE(units)) {
    v /= 1000.0;
    u++;
  }
  if (u == 0)
    return xasprintf("%" PRIu64 "B", bytes);
  return xasprintf(v < 10 ? "%.2f%s" : v < 100 ? "%.1f%s" : "%.0f%s", v, units[u]);
}

int64_t agsx_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t agsx_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void agsx_random_hex(char *out, size_t n) {
  static const char hex[] = "0123456789abcdef";
  unsigned char b[256];
  if (n > sizeof(b) || getrandom(b, n, 0) != (ssize_t)n)
    abort();
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = hex[b[i] >> 4];
    out[2 * i + 1] = hex[b[i] & 15];
  }
  out[2 * n] = '\0';
  explicit_bzero(b, n);
}

char *agsx_format_rfc3339(int64_t sec) {
  time_t t = (time_t)sec;
  struct tm tm;
  if (gmtime_r(&t, &tm) == NULL)
    return xstrdup("1970-01-01T00:00:00Z");
  char buf[64];
  strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return xstrdup(buf);
}

int agsx_parse_rfc3339(const char *s, int64_t *ret_sec) {
  struct tm tm = {0};
  const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
  if (p == NULL)
    return -1;
  if (*p == '.') {
    p++;
    while (isdigit((unsigned char)*p))
      p++;
  }
  long off = 0;
  if (*p == 'Z' || *p == 'z') {
    p++;
  } else if (*p == '+' || *p == '-') {
    int sign = *p == '-' ? -1 : 1;
    if (!isdigit((unsigned char)p[1]) || !isdigit((unsigned char)p[2]) || p[3] != ':' ||
        !isdigit((unsigned char)p[4]) || !isdigit((unsigned char)p[5]))
      return -1;
    off = sign *
          (((p[1] - '0') * 10 + (p[2] - '0')) * 3600L + ((p[4] - '0') * 10 + (p[5] - '0')) * 60L);
    p += 6;
  } else {
    return -1;
  }
  if (*p)
    return -1;
  *ret_sec = (int64_t)timegm(&tm) - off;
  return 0;
}

/* ---- processes ------------------------------------------------------------------------------ */

#include <sys/wait.h>

int agsx_wait_status_exit_code(int status, int *ret_signal) {
  int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  if (ret_signal)
    *ret_signal = sig;
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  return sig ? 128 + sig : -1;
}

/* ---- terminals -------------------------------------------------------------------------------- */

#include <sys/ioctl.h>

void agsx_term_winsize(int master) {
  struct winsize ws;
  if (master >= 0 && ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0)
    ioctl(master, TIOCSWINSZ, &ws);
}

/* ---- process title ------------------------------------------------------------------------ */

#include <sys/prctl.h>

static char *title_area;
static size_t title_len;
/* The argv copies, kept (volatile: a store nothing reads would be
 * optimised away) so that leak checkers see them as reachable. */
static char **volatile title_copies;

void agsx_proc_title_init(int argc, char **argv) {
  if (argc < 1 || argv[0] == NULL)
    return;
  /* The arguments are contiguous: argv[0] up to the end of the last one. */
  char *end = argv[argc - 1] + strlen(argv[argc - 1]);
  title_area = argv[0];
  title_len = (size_t)(end - argv[0]);
  /* argv now points at copies, so that the area can be overwritten at any
   * time (a sandbox's init does it first thing: /proc/1/cmdline is
   * readable by the sandbox and names host paths) while the program still
   * reads its arguments. */
  char **v = xmalloc((size_t)argc * sizeof(*v));
  for (int i = 0; i < argc; i++)
    argv[i] = v[i] = xstrdup(argv[i]);
  title_copies = v;
}

void agsx_proc_title_set(const char *title) {
  prctl(PR_SET_NAME, title, 0, 0, 0);
  if (title_area == NULL || title_len == 0)
    return;
  memset(title_area, 0, title_len);
  snprintf(title_area, title_len, "%s", title);
}

/* ---- mountinfo ------------------------------------------------------------ */

int agsx_mountinfo_split(char *line, char **tok, int max, int *ret_sep) {
  char *save = NULL;
  int n = 0;
  *ret_sep = -1;
  for (char *t = strtok_r(line, " \n", &save); t && n < max; t = strtok_r(NULL, " \n", &save)) {
    if (*ret_sep < 0 && n >= 6 && strcmp(t, "-") == 0)
      *ret_sep = n;
    tok[n++] = t;
  }
  if (*ret_sep >= 0 && *ret_sep + 3 >= n)
    *ret_sep = -1; /* no type, source and options after it */
  return n;
}

char *agsx_mountinfo_unescape(char *s) {
  char *o = s, *in = s;
  for (; *in; in++) {
    if (in[0] == '\\' && in[1] >= '0' && in[1] <= '3' && in[2] >= '0' && in[2] <= '7' &&
        in[3] >= '0' && in[3] <= '7') {
      *o++ = (char)((in[1] - '0') * 64 + (in[2] - '0') * 8 + (in[3] - '0'));
      in += 3;
    } else {
      *o++ = *in;
    }
  }
  *o = '\0';
  return s;
}
