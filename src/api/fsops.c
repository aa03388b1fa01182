/* agsx — fsops: envd's filesystem operations over a sandbox's root (see
 * fsops.h for the rules). Watchers and the upload/receive pipeline are in
 * fswatch.c and fsupload.c; this file holds the context, paths, entries
 * and the unary operations. */
#include "config.h"

#include "api/fsops-internal.h"
#include "sandbox/copy.h"
#include "sandbox/passwd.h"
#include "sandbox/proc.h"
#include "state/state.h"

#include <inttypes.h>
#include <limits.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/stat.h>

/* ---- error codes ---------------------------------------------------------------------- */

enum agsx_fs_code agsx_fs_code(const agsx_error_t *err) {
  if (err == NULL || *err == NULL)
    return AGSX_FS_OK;
  switch ((*err)->errno_) {
  case ENOENT: return AGSX_FS_NOT_FOUND;
  case EEXIST:
  case ENOTEMPTY: return AGSX_FS_ALREADY_EXISTS;
  case EINVAL:
  case ENOTDIR:
  case EISDIR:
  case ELOOP:
  case ENAMETOOLONG:
  case EXDEV: return AGSX_FS_INVALID_ARGUMENT;
  case EACCES:
  case EPERM:
  case EROFS: return AGSX_FS_PERMISSION_DENIED;
  case ENOSPC:
  case EDQUOT:
  case E2BIG:
  case EFBIG:
  case ENOBUFS: return AGSX_FS_RESOURCE_EXHAUSTED;
  case EKEYREJECTED: return AGSX_FS_UNAUTHENTICATED;
  case ESRCH: return AGSX_FS_UNAVAILABLE;
  case EOPNOTSUPP: return AGSX_FS_UNIMPLEMENTED;
  default: return AGSX_FS_INTERNAL;
  }
}

const char *agsx_fs_code_name(enum agsx_fs_code code) {
  switch (code) {
  case AGSX_FS_OK: return "";
  case AGSX_FS_NOT_FOUND: return "not_found";
  case AGSX_FS_ALREADY_EXISTS: return "already_exists";
  case AGSX_FS_INVALID_ARGUMENT: return "invalid_argument";
  case AGSX_FS_PERMISSION_DENIED: return "permission_denied";
  case AGSX_FS_RESOURCE_EXHAUSTED: return "resource_exhausted";
  case AGSX_FS_UNAUTHENTICATED: return "unauthenticated";
  case AGSX_FS_UNAVAILABLE: return "unavailable";
  case AGSX_FS_UNIMPLEMENTED: return "unimplemented";
  case AGSX_FS_INTERNAL: break;
  }
  return "internal";
}

int agsx_fs_code_connect_status(enum agsx_fs_code code) {
  switch (code) {
  case AGSX_FS_OK: return 200;
  case AGSX_FS_NOT_FOUND: return 404;
  case AGSX_FS_ALREADY_EXISTS: return 409;
  case AGSX_FS_INVALID_ARGUMENT: return 400;
  case AGSX_FS_PERMISSION_DENIED: return 403;
  case AGSX_FS_RESOURCE_EXHAUSTED: return 429;
  case AGSX_FS_UNAUTHENTICATED: return 401;
  case AGSX_FS_UNAVAILABLE: return 503;
  case AGSX_FS_UNIMPLEMENTED: return 501;
  case AGSX_FS_INTERNAL: break;
  }
  return 500;
}

int agsx_fs_code_rest_status(enum agsx_fs_code code) {
  switch (code) {
  case AGSX_FS_OK: return 200;
  case AGSX_FS_NOT_FOUND: return 404;
  case AGSX_FS_ALREADY_EXISTS:
  case AGSX_FS_INVALID_ARGUMENT: return 400;
  case AGSX_FS_PERMISSION_DENIED: return 403;
  case AGSX_FS_RESOURCE_EXHAUSTED: return 507;
  case AGSX_FS_UNAUTHENTICATED: return 401;
  case AGSX_FS_UNAVAILABLE: return 502;
  case AGSX_FS_UNIMPLEMENTED: return 501;
  case AGSX_FS_INTERNAL: break;
  }
  return 500;
}

int fs_pass_error(agsx_error_t *err, agsx_error_t *from) {
  if (err && *err == NULL)
    *err = steal_ptr(from);
  return -1;
}

/* ---- context -------------------------------------------------------------------------- */

/* The image's /etc/passwd or /etc/group, read inside the root; absent,
 * unreadable or not a regular file is empty (a FIFO or a device planted
 * there is never opened). */
static void read_etc(struct agsx_fs_ctx *c, const char *path, char **ret, size_t *ret_len) {
  *ret = NULL;
  *ret_len = 0;
  struct stat st;
  _cleanup_error_ agsx_error_t e = NULL;
  _cleanup_close_ int fd = fs_open_regular(c, path, &st, &e);
  if (fd < 0 || agsx_read_fd(fd, AGSX_PASSWD_MAX, ret, ret_len, &e) < 0) {
    *ret = NULL;
    *ret_len = 0;
  }
}

/* A user name as envd takes it: an entry of the image's /etc/passwd
 * (`root` stands even without one: uid 0, home /root). */
static int resolve_user(struct agsx_fs_ctx *c, const char *name, agsx_error_t *err) {
  if (*name == '\0' || strchr(name, ':') || strlen(name) > 256)
    return agsx_error_set_quiet(err, EKEYREJECTED, "invalid username '%.64s'", name);
  struct agsx_user u;
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_user_resolve(name, c->passwd, c->passwd_len, c->group, c->group_len, &u, &e) < 0) {
    if (strcmp(name, "root") != 0)
      return agsx_error_set_quiet(err, EKEYREJECTED, "error looking up user '%s': %s", name,
                                  e->msg);
    memset(&u, 0, sizeof(u));
    snprintf(u.home, sizeof(u.home), "/root");
  }
  c->uid = u.uid;
  c->gid = u.gid;
  c->user = xstrdup(name);
  _cleanup_error_ agsx_error_t pe = NULL;
  c->home = u.home[0] == '/' ? fs_clean(u.home, &pe) : NULL;
  if (c->home == NULL)
    c->home = xstrdup("/");
  return 0;
}

static bool has_user(const struct agsx_fs_ctx *c, const char *name) {
  struct agsx_user u;
  _cleanup_error_ agsx_error_t e = NULL;
  return agsx_user_resolve(name, c->passwd, c->passwd_len, c->group, c->group_len, &u, &e) == 0;
}

int agsx_fs_open_root(int rootfd, uint32_t uid_base, const char *sandbox_id,
                      const struct agsx_fs_opts *opts, struct agsx_fs_ctx **ret,
                      agsx_error_t *err) {
  static const struct agsx_fs_opts none = {0};
  if (opts == NULL)
    opts = &none;
  _cleanup_fs_ctx_ struct agsx_fs_ctx *c = xzalloc(sizeof(*c));
  c->refs = 1;
  c->rootfd = rootfd;
  c->pidfd = -1;
  c->uid_base = uid_base;
  snprintf(c->sandbox_id, sizeof(c->sandbox_id), "%s", sandbox_id ? sandbox_id : "");
  read_etc(c, "/etc/passwd", &c->passwd, &c->passwd_len);
  read_etc(c, "/etc/group", &c->group, &c->group_len);
  const char *name = opts->user && *opts->user ? opts->user : opts->default_user;
  if (name == NULL || *name == '\0')
    name = has_user(c, "user") ? "user" : "root";
  if (resolve_user(c, name, err) < 0)
    return -1;
  if (opts->workdir && *opts->workdir) {
    _cleanup_free_ char *w = NULL;
    if (opts->workdir[0] != '/' || (w = fs_clean(opts->workdir, err)) == NULL)
      return agsx_error_set_quiet(err, EINVAL, "invalid default workdir '%.100s'", opts->workdir);
    c->workdir = steal_ptr(&w);
  }
  *ret = steal_ptr(&c);
  return 0;
}

int agsx_fs_open(const struct agsx_record *rec, const struct agsx_fs_opts *opts,
                 struct agsx_fs_ctx **ret, agsx_error_t *err) {
  _cleanup_close_ int pidfd =
      rec->status == AGSX_STATUS_RUNNING ? agsx_proc_ref_pidfd(&rec->init) : -1;
  if (pidfd < 0 && (rec->status != AGSX_STATUS_RUNNING || errno == ESRCH))
    return agsx_error_set_quiet(err, ESRCH, "sandbox `%.12s` is not running", rec->id);
  if (pidfd < 0)
    return agsx_error_set(err, errno, "sandbox `%.12s`: pidfd of its init", rec->id);
  int rootfd = agsx_copy_open_root(rec, err);
  if (rootfd < 0)
    return -1;
  if (agsx_fs_open_root(rootfd, rec->uid_base, rec->id, opts, ret, err) < 0)
    return -1;
  (*ret)->pidfd = steal_fd(&pidfd);
  return 0;
}

struct agsx_fs_ctx *fs_ctx_ref(struct agsx_fs_ctx *c) {
  c->refs++;
  return c;
}

void agsx_fs_close(struct agsx_fs_ctx *c) {
  if (c == NULL || --c->refs > 0)
    return;
  if (c->rootfd >= 0)
    close(c->rootfd);
  if (c->pidfd >= 0)
    close(c->pidfd);
  free(c->passwd);
  free(c->group);
  free(c->user);
  free(c->home);
  free(c->workdir);
  free(c);
}

void agsx_fs_closep(struct agsx_fs_ctx **c) {
  agsx_fs_close(*c);
  *c = NULL;
}

const char *agsx_fs_user(const struct agsx_fs_ctx *c) { return c->user; }
uid_t agsx_fs_uid(const struct agsx_fs_ctx *c) { return c->uid; }
gid_t agsx_fs_gid(const struct agsx_fs_ctx *c) { return c->gid; }
const char *agsx_fs_home(const struct agsx_fs_ctx *c) { return c->home; }

/* ---- paths ---------------------------------------------------------------------------- */

/* Lexically cleans the absolute PATH: no empty, "." or ".." component left,
 * ".." at the top stays at "/" (as the kernel resolves it in the root). */
char *fs_clean(const char *path, agsx_error_t *err) {
  size_t n = strlen(path);
  if (n > AGSX_FS_PATH_MAX) {
    agsx_error_set_quiet(err, ENAMETOOLONG, "path of %zu bytes is longer than %u", n,
                         AGSX_FS_PATH_MAX);
    return NULL;
  }
  char *out = xmalloc(n + 2);
  size_t o = 0, depth = 0;
  const char *p = path;
  while (*p) {
    while (*p == '/')
      p++;
    const char *e = p;
    while (*e && *e != '/')
      e++;
    size_t l = (size_t)(e - p);
    if (l == 0 || (l == 1 && p[0] == '.')) {
      /* nothing */
    } else if (l == 2 && p[0] == '.' && p[1] == '.') {
      while (o > 0 && out[o - 1] != '/')
        o--;
      if (o > 0) {
        o--; /* the slash before the dropped component */
        depth--;
      }
    } else {
      if (++depth > AGSX_FS_PATH_DEPTH) {
        free(out);
        agsx_error_set_quiet(err, ENAMETOOLONG, "path has more than %u components",
                             AGSX_FS_PATH_DEPTH);
        return NULL;
      }
      out[o++] = '/';
      memcpy(out + o, p, l);
      o += l;
    }
    p = e;
  }
  if (o == 0)
    out[o++] = '/';
  out[o] = '\0';
  return out;
}

char *agsx_fs_path(const struct agsx_fs_ctx *c, const char *path, agsx_error_t *err) {
  if (path == NULL)
    path = "";
  if (strlen(path) > AGSX_FS_PATH_MAX) {
    agsx_error_set_quiet(err, ENAMETOOLONG, "path of %zu bytes is longer than %u", strlen(path),
                         AGSX_FS_PATH_MAX);
    return NULL;
  }
  if (*path == '\0')
    return xstrdup(c->workdir ? c->workdir : c->home);
  _cleanup_free_ char *full = NULL;
  if (path[0] == '~') {
    if (path[1] != '\0' && path[1] != '/') {
      agsx_error_set_quiet(err, EINVAL,
                           "failed to expand path '%s' for user '%s': cannot expand "
                           "user-specific home dir",
                           path, c->user);
      return NULL;
    }
    full = xasprintf("%s/%s", c->home, path + 1);
  } else if (path[0] != '/') {
    full = xasprintf("%s/%s", c->home, path);
  } else {
    full = xstrdup(path);
  }
  return fs_clean(full, err);
}

/* "/a/b" → parent "/a", base "b"; "/" has no parent (EINVAL). */
int fs_split(const char *abs, char **ret_parent, char **ret_base, agsx_error_t *err) {
  if (strcmp(abs, "/") == 0)
    return agsx_error_set_quiet(err, EINVAL, "path '/' has no parent directory");
  const char *slash = strrchr(abs, '/');
  *ret_parent = slash == abs ? xstrdup("/") : xstrndup(abs, (size_t)(slash - abs));
  *ret_base = xstrdup(slash + 1);
  return 0;
}

static char *join_path(const char *dir, const char *name) {
  return strcmp(dir, "/") == 0 ? xasprintf("/%s", name) : xasprintf("%s/%s", dir, name);
}

/* ---- ids and resolution --------------------------------------------------------------- */

int fs_enter(const struct agsx_fs_ctx *c, int *ret_secbits, agsx_error_t *err) {
  return agsx_copy_enter_sandbox_user(c->uid_base + c->uid, c->uid_base + c->gid, ret_secbits, err);
}

void fs_leave(int secbits) { agsx_copy_leave_sandbox_ids(secbits); }

int fs_open(const struct agsx_fs_ctx *c, const char *abs, int flags) {
  return agsx_openat2(c->rootfd, abs, flags, 0, RESOLVE_SANDBOX);
}

static bool mapped(const struct agsx_fs_ctx *c, unsigned id) {
  return id >= c->uid_base && id - c->uid_base < 65536;
}

bool fs_sandbox_may(const struct agsx_fs_ctx *c, const struct stat *st, int mask) {
  if (mapped(c, st->st_uid) && mapped(c, st->st_gid))
    return true;
  mode_t other = st->st_mode & 07;
  return !((mask & R_OK) && !(other & 04)) && !((mask & W_OK) && !(other & 02)) &&
         !((mask & X_OK) && !(other & 01));
}

int fs_check_may(const struct agsx_fs_ctx *c, int fd, int mask, const char *path,
                 agsx_error_t *err) {
  struct stat st;
  if (fstat(fd, &st) < 0)
    return agsx_error_set(err, errno, "stat %s", path);
  if (!fs_sandbox_may(c, &st, mask))
    return agsx_error_set_quiet(err, EACCES, "permission denied: %s", path);
  return 0;
}

int fs_check_unlink(const struct agsx_fs_ctx *c, int dfd, const char *name, const char *path,
                    agsx_error_t *err) {
  struct stat dst, st;
  if (fstat(dfd, &dst) < 0)
    return agsx_error_set(err, errno, "stat the directory of %s", path);
  if (!fs_sandbox_may(c, &dst, W_OK | X_OK))
    return agsx_error_set_quiet(err, EACCES, "permission denied: %s", path);
  if ((dst.st_mode & S_ISVTX) && fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      !mapped(c, st.st_uid) && !mapped(c, dst.st_uid))
    return agsx_error_set_quiet(err, EACCES, "permission denied: %s", path);
  return 0;
}

static char *link_destination(const struct agsx_fs_ctx *c, const char *abs);

int fs_check_search(const struct agsx_fs_ctx *c, const char *abs, agsx_error_t *err) {
  _cleanup_free_ char *dest = link_destination(c, abs);
  for (char *p = dest + 1; (p = strchr(p, '/')) != NULL; p++) {
    *p = '\0';
    _cleanup_close_ int fd = fs_open(c, dest, O_PATH | O_DIRECTORY);
    struct stat st;
    bool denied = fd >= 0 && fstat(fd, &st) == 0 && !fs_sandbox_may(c, &st, X_OK);
    if (denied)
      return agsx_error_set_quiet(err, EACCES, "permission denied: %s", abs);
    *p = '/';
  }
  return 0;
}

int fs_open_regular(const struct agsx_fs_ctx *c, const char *abs, struct stat *ret_st,
                    agsx_error_t *err) {
  _cleanup_close_ int pfd = fs_open(c, abs, O_PATH);
  struct stat st, st2;
  if (pfd < 0 || fstat(pfd, &st) < 0)
    return agsx_error_set(err, errno == ENOTDIR ? ENOENT : errno, "open %s", abs);
  if (S_ISDIR(st.st_mode))
    return agsx_error_set_quiet(err, EISDIR, "path '%s' is a directory", abs);
  if (!S_ISREG(st.st_mode))
    return agsx_error_set_quiet(err, EINVAL, "path '%s' is not a regular file", abs);
  if (agsx_copy_on_kernel_fs_fd(pfd))
    return agsx_error_set_quiet(err, EACCES, "path '%s' is on a kernel filesystem", abs);
  if (!fs_sandbox_may(c, &st, R_OK) || fs_check_search(c, abs, err) < 0)
    return agsx_error_set_quiet(err, EACCES, "permission denied: %s", abs);
  int fd = fs_open(c, abs, O_RDONLY | AGSX_O_UNTRUSTED);
  if (fd < 0)
    return agsx_error_set(err, errno, "open %s", abs);
  if (fstat(fd, &st2) < 0 || st2.st_dev != st.st_dev || st2.st_ino != st.st_ino) {
    close(fd);
    return agsx_error_set_quiet(err, EAGAIN, "path '%s' changed while it was opened", abs);
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0)
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  *ret_st = st2;
  return fd;
}

/* mkdir -p of the absolute clean PATH as the context's user (the caller
 * has entered its ids): each existing prefix is opened inside the root
 * (symlinks followed there, as envd's os.Stat), each missing one created
 * in the directory just opened. Returns the directory, O_PATH. */
int fs_ensure_dirs(const struct agsx_fs_ctx *c, const char *abs, agsx_error_t *err) {
  _cleanup_close_ int cur = fs_open(c, "/", O_PATH | O_DIRECTORY);
  if (cur < 0)
    return agsx_error_set(err, errno, "open the sandbox's /");
  size_t n = strlen(abs);
  _cleanup_free_ char *prefix = xmalloc(n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (i < n && abs[i] != '/')
      continue;
    memcpy(prefix, abs, i);
    prefix[i] = '\0';
    const char *name = strrchr(prefix, '/') + 1;
    for (int tries = 0;; tries++) {
      int fd = fs_open(c, prefix, O_PATH | O_DIRECTORY);
      if (fd >= 0) {
        close(cur);
        cur = fd;
        break;
      }
      if (errno == ENOTDIR)
        return agsx_error_set_quiet(err, ENOTDIR, "path is a file: %s", prefix);
      if (errno != ENOENT || tries >= 3)
        return agsx_error_set(err, errno, "failed to stat directory %s", prefix);
      if (agsx_copy_on_kernel_fs_fd(cur))
        return agsx_error_set_quiet(err, EACCES, "cannot create %s on a kernel filesystem", prefix);
      if (fs_check_may(c, cur, W_OK | X_OK, prefix, err) < 0)
        return -1;
      if (mkdirat(cur, name, 0755) < 0 && errno != EEXIST)
        return agsx_error_set(err, errno, "failed to create directory %s", prefix);
      /* the user's group even below a set-group-ID directory, as envd's chown */
      if (fchownat(cur, name, c->uid_base + c->uid, c->uid_base + c->gid, AT_SYMLINK_NOFOLLOW) <
              0 &&
          errno != ENOENT)
        return agsx_error_set(err, errno, "failed to chown directory %s", prefix);
    }
  }
  return steal_fd(&cur);
}

/* ---- entries -------------------------------------------------------------------------- */

void agsx_fs_entry_clear(struct agsx_fs_entry *e) {
  if (e == NULL)
    return;
  free(e->name);
  free(e->path);
  free(e->owner);
  free(e->group);
  free(e->symlink_target);
  agsx_fs_meta_clear(&e->meta);
  memset(e, 0, sizeof(*e));
}

void agsx_fs_entries_free(struct agsx_fs_entry *v, size_t n) {
  for (size_t i = 0; v && i < n; i++)
    agsx_fs_entry_clear(&v[i]);
  free(v);
}

static enum agsx_fs_type type_of(mode_t m) {
  if (S_ISREG(m))
    return AGSX_FS_TYPE_FILE;
  if (S_ISDIR(m))
    return AGSX_FS_TYPE_DIRECTORY;
  if (S_ISLNK(m))
    return AGSX_FS_TYPE_SYMLINK;
  return AGSX_FS_TYPE_UNSPECIFIED;
}

/* The host id ID of an inode as the sandbox sees it, named from its files. */
static char *id_name(const struct agsx_fs_ctx *c, unsigned id, bool group) {
  if (id < c->uid_base || id - c->uid_base > 65535)
    return xstrdup("65534"); /* unmapped: the kernel's overflow id */
  id -= c->uid_base;
  char buf[256];
  if (agsx_passwd_name(group ? c->group : c->passwd, group ? c->group_len : c->passwd_len, id, buf,
                       sizeof(buf)))
    return xstrdup(buf);
  return xasprintf("%u", id);
}

/* Where the symlink at ABS leads, lexically, symlinks of the way replaced
 * by their text (as Go's EvalSymlinks): for display, and for
 * fs_check_search, which is therefore best effort against sandbox code
 * swapping a symlink meanwhile (the file's own permission is checked on
 * the inode opened). Every open still goes through openat2 in the root. ABS itself when it cannot be
 * told (a loop, a missing component is kept as is). */
static char *link_destination(const struct agsx_fs_ctx *c, const char *abs) {
  _cleanup_free_ char *rest = xstrdup(abs), *done = xstrdup("/");
  for (int hops = 0; hops < 40;) {
    const char *p = rest;
    while (*p == '/')
      p++;
    if (*p == '\0')
      return steal_ptr(&done);
    const char *e = strchrnul(p, '/');
    _cleanup_free_ char *comp = xstrndup(p, (size_t)(e - p));
    _cleanup_free_ char *tail = xstrdup(e);
    _cleanup_free_ char *cand = NULL;
    if (strcmp(comp, ".") == 0) {
      cand = xstrdup(done);
    } else if (strcmp(comp, "..") == 0) {
      char *s = strrchr(done, '/');
      cand = s == done ? xstrdup("/") : xstrndup(done, (size_t)(s - done));
    } else {
      cand = join_path(done, comp);
    }
    char target[PATH_MAX];
    ssize_t n = -1;
    _cleanup_close_ int fd = fs_open(c, cand, O_PATH | O_NOFOLLOW);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISLNK(st.st_mode))
      n = readlinkat(fd, "", target, sizeof(target) - 1);
    free(rest);
    if (n > 0) {
      target[n] = '\0';
      hops++;
      /* The target goes on from the link's directory (DONE), or from
       * "/" when absolute; its text is never prefixed with DONE, which
       * the walk would then append to DONE again. */
      rest = xasprintf("%s%s", target, tail);
      if (target[0] == '/') {
        free(done);
        done = xstrdup("/");
      }
    } else {
      rest = steal_ptr(&tail);
      free(done);
      done = steal_ptr(&cand);
    }
  }
  return xstrdup(abs);
}

/* The metadata of the file or directory at FD (opened in the root), when
 * the sandbox's root may read it: a host file's xattrs are not read with
 * the server's privileges. */
static void fill_meta(const struct agsx_fs_ctx *c, int fd, struct agsx_fs_entry *e) {
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0 || !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) ||
      !fs_sandbox_may(c, &st, R_OK))
    return;
  fs_meta_read(fd, &e->meta);
}

/* The entry NAME in DFD (lstat ST), at ABS in the sandbox. */
void fs_fill_entry(const struct agsx_fs_ctx *c, const char *abs, const struct stat *st,
                   struct agsx_fs_entry *e) {
  memset(e, 0, sizeof(*e));
  const char *slash = strrchr(abs, '/');
  e->name = xstrdup(strcmp(abs, "/") == 0 ? "/" : slash + 1);
  e->path = xstrdup(abs);
  e->st_mode = st->st_mode;
  e->mode = st->st_mode & 0777;
  e->type = type_of(st->st_mode);
  e->size = (uint64_t)st->st_size;
  e->owner = id_name(c, st->st_uid, false);
  e->group = id_name(c, st->st_gid, true);
  e->mtime_sec = st->st_mtim.tv_sec;
  e->mtime_nsec = st->st_mtim.tv_nsec;
  if (!S_ISLNK(st->st_mode)) {
    if (S_ISREG(st->st_mode) || S_ISDIR(st->st_mode)) {
      _cleanup_close_ int fd = fs_open(c, abs, O_PATH | O_NOFOLLOW);
      fill_meta(c, fd, e);
    }
    return;
  }
  _cleanup_free_ char *dest = link_destination(c, abs);
  _cleanup_close_ int fd = fs_open(c, abs, O_PATH);
  struct stat tst;
  if (fd >= 0 && fstat(fd, &tst) == 0) {
    e->type = type_of(tst.st_mode);
    e->mode = tst.st_mode & 0777;
    fill_meta(c, fd, e); /* the target's, as envd's xattr.List follows the link */
  } else {
    e->mode = 0; /* a dangling link: shown as a symlink (envd drops it) */
  }
  e->symlink_target = steal_ptr(&dest);
}

static void mode_string(uint32_t mode, char *buf) {
  size_t n = 0;
  mode_t m = (mode_t)mode;
  if (S_ISDIR(m))
    buf[n++] = 'd';
  if (S_ISLNK(m))
    buf[n++] = 'L';
  if (S_ISBLK(m) || S_ISCHR(m))
    buf[n++] = 'D';
  if (S_ISFIFO(m))
    buf[n++] = 'p';
  if (S_ISSOCK(m))
    buf[n++] = 'S';
  if (m & S_ISUID)
    buf[n++] = 'u';
  if (m & S_ISGID)
    buf[n++] = 'g';
  if (S_ISCHR(m))
    buf[n++] = 'c';
  if (m & S_ISVTX)
    buf[n++] = 't';
  if (n == 0)
    buf[n++] = '-';
  static const char rwx[] = "rwxrwxrwx";
  for (int i = 0; i < 9; i++)
    buf[n++] = (m & (1u << (8 - i))) ? rwx[i] : '-';
  buf[n] = '\0';
}

void agsx_fs_mode_string(uint32_t mode, char buf[static 16]) { mode_string(mode, buf); }

static const char *type_name(enum agsx_fs_type t) {
  switch (t) {
  case AGSX_FS_TYPE_FILE: return "FILE_TYPE_FILE";
  case AGSX_FS_TYPE_DIRECTORY: return "FILE_TYPE_DIRECTORY";
  case AGSX_FS_TYPE_SYMLINK: return "FILE_TYPE_SYMLINK";
  case AGSX_FS_TYPE_UNSPECIFIED: break;
  }
  return "FILE_TYPE_UNSPECIFIED";
}

/* protojson's Timestamp: UTC, 0, 3, 6 or 9 fraction digits. */
static void gen_time(yajl_gen g, int64_t sec, long nsec) {
  _cleanup_free_ char *base = agsx_format_rfc3339(sec);
  size_t l = strlen(base);
  if (l > 0 && base[l - 1] == 'Z')
    base[l - 1] = '\0';
  char frac[32] = "";
  if (nsec > 0 && nsec % 1000000 == 0)
    snprintf(frac, sizeof(frac), ".%03ld", nsec / 1000000);
  else if (nsec > 0 && nsec % 1000 == 0)
    snprintf(frac, sizeof(frac), ".%06ld", nsec / 1000);
  else if (nsec > 0)
    snprintf(frac, sizeof(frac), ".%09ld", nsec);
  _cleanup_free_ char *s = xasprintf("%s%sZ", base, frac);
  agsx_json_str(g, s);
}

/* Sandbox names are bytes: invalid UTF-8 becomes U+FFFD, so the document
 * stays JSON that protobuf-es parses. */
void fs_gen_text(yajl_gen g, const char *key, const char *s) {
  agsx_json_key(g, key);
  agsx_json_bytes(g, s ? s : "", s ? strlen(s) : 0);
}

void agsx_fs_entry_gen(yajl_gen g, const struct agsx_fs_entry *e) {
  yajl_gen_map_open(g);
  fs_gen_text(g, "name", e->name);
  agsx_json_kv_str(g, "type", type_name(e->type));
  fs_gen_text(g, "path", e->path);
  if (e->st_mode != 0) { /* a full entry, not an upload's path/name/type */
    char size[24], perm[16];
    snprintf(size, sizeof(size), "%" PRIu64, e->size);
    agsx_json_kv_str(g, "size", size);
    agsx_json_kv_int(g, "mode", e->mode);
    mode_string(e->st_mode, perm);
    agsx_json_kv_str(g, "permissions", perm);
    fs_gen_text(g, "owner", e->owner);
    fs_gen_text(g, "group", e->group);
    agsx_json_key(g, "modifiedTime");
    gen_time(g, e->mtime_sec, e->mtime_nsec);
  }
  if (e->symlink_target)
    fs_gen_text(g, "symlinkTarget", e->symlink_target);
  agsx_fs_meta_gen(g, &e->meta);
  yajl_gen_map_close(g);
}

void agsx_fs_meta_gen(yajl_gen g, const struct agsx_fs_meta *m) {
  if (m->n == 0)
    return; /* protojson leaves an empty map out */
  agsx_json_key(g, "metadata");
  yajl_gen_map_open(g);
  for (size_t i = 0; i < m->n; i++)
    agsx_json_kv_str(g, m->keys[i], m->values[i]);
  yajl_gen_map_close(g);
}

/* ---- Stat, ListDir -------------------------------------------------------------------- */

int fs_stat_abs(const struct agsx_fs_ctx *c, const char *abs, struct agsx_fs_entry *ret,
                agsx_error_t *err) {
  _cleanup_close_ int fd = fs_open(c, abs, O_PATH | O_NOFOLLOW);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0) {
    if (errno == ENOENT || errno == ENOTDIR)
      return agsx_error_set_quiet(err, ENOENT, "file not found: stat %s: no such file or directory",
                                  abs);
    return agsx_error_set(err, errno, "error statting file %s", abs);
  }
  fs_fill_entry(c, abs, &st, ret);
  return 0;
}

int agsx_fs_stat(struct agsx_fs_ctx *c, const char *path, struct agsx_fs_entry *ret,
                 agsx_error_t *err) {
  _cleanup_free_ char *abs = agsx_fs_path(c, path, err);
  if (abs == NULL)
    return -1;
  return fs_stat_abs(c, abs, ret, err);
}

struct lister {
  const struct agsx_fs_ctx *c;
  struct agsx_fs_entry *v;
  size_t n, cap;
  unsigned depth;
  size_t meta_bytes; /* of all entries, within AGSX_FS_LIST_META_MAX */
};

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in directory FD, sorted (WalkDir's lexical order). */
static int read_names(int fd, char ***ret, size_t *ret_n, agsx_error_t *err) {
  _cleanup_dir_ DIR *d = agsx_dir_stream(fd);
  if (d == NULL)
    return agsx_error_set(err, errno, "read directory");
  _cleanup_strv_ char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *de;
  while ((errno = 0, de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    if (n >= AGSX_FS_LIST_MAX_ENTRIES)
      return agsx_error_set_quiet(err, E2BIG, "directory has more than %u entries",
                                  AGSX_FS_LIST_MAX_ENTRIES);
    if (n + 1 >= cap) {
      cap = cap ? cap * 2 : 64;
      names = xrealloc(names, cap * sizeof(*names));
    }
    names[n++] = xstrdup(de->d_name);
    names[n] = NULL;
  }
  if (errno)
    return agsx_error_set(err, errno, "read directory");
  if (n > 1)
    qsort(names, n, sizeof(*names), cmp_str);
  *ret = steal_ptr(&names);
  *ret_n = n;
  return 0;
}

static int list_dir(struct lister *l, int fd, const char *path, unsigned level, agsx_error_t *err) {
  _cleanup_strv_ char **names = NULL;
  size_t n = 0;
  if (read_names(fd, &names, &n, err) < 0)
    return agsx_error_wrap(err, "error reading directory %s", path);
  for (size_t i = 0; i < n; i++) {
    struct stat st;
    if (fstatat(fd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
      continue; /* vanished meanwhile */
    if (l->n >= AGSX_FS_LIST_MAX_ENTRIES)
      return agsx_error_set_quiet(err, E2BIG, "listing %s: more than %u entries", path,
                                  AGSX_FS_LIST_MAX_ENTRIES);
    if (l->n == l->cap) {
      l->cap = l->cap ? l->cap * 2 : 64;
      l->v = xrealloc(l->v, l->cap * sizeof(*l->v));
    }
    _cleanup_free_ char *child = join_path(path, names[i]);
    fs_fill_entry(l->c, child, &st, &l->v[l->n++]);
    l->meta_bytes += l->v[l->n - 1].meta.bytes;
    if (l->meta_bytes > AGSX_FS_LIST_META_MAX)
      return agsx_error_set_quiet(err, E2BIG, "listing %s: more than %u bytes of file metadata",
                                  path, AGSX_FS_LIST_META_MAX);
    if (!S_ISDIR(st.st_mode) || level + 1 >= l->depth)
      continue;
    if (!fs_sandbox_may(l->c, &st, R_OK | X_OK))
      continue; /* a host directory the sandbox may not read: listed, not entered */
    _cleanup_close_ int sub = agsx_copy_open_child(fd, names[i], O_RDONLY | O_DIRECTORY, 0);
    if (sub < 0)
      continue; /* vanished or swapped for a symlink: not followed */
    if (list_dir(l, sub, child, level + 1, err) < 0)
      return -1;
  }
  return 0;
}

int agsx_fs_list(struct agsx_fs_ctx *c, const char *path, unsigned depth,
                 struct agsx_fs_entry **ret, size_t *ret_n, agsx_error_t *err) {
  _cleanup_free_ char *abs = agsx_fs_path(c, path, err);
  if (abs == NULL)
    return -1;
  if (depth == 0)
    depth = 1;
  if (depth > AGSX_FS_LIST_MAX_DEPTH)
    depth = AGSX_FS_LIST_MAX_DEPTH;
  _cleanup_close_ int fd = fs_open(c, abs, O_RDONLY | O_DIRECTORY | AGSX_O_UNTRUSTED);
  if (fd < 0 && errno == ENOTDIR) {
    _cleanup_close_ int any = fs_open(c, abs, O_PATH);
    if (any >= 0)
      return agsx_error_set_quiet(err, EINVAL, "path is not a directory: %s", abs);
  }
  if (fd < 0 && (errno == ENOENT || errno == ENOTDIR))
    return agsx_error_set_quiet(err, ENOENT, "directory not found: %s", abs);
  if (fd < 0)
    return agsx_error_set(err, errno, "error opening directory %s", abs);
  if (fs_check_may(c, fd, R_OK | X_OK, abs, err) < 0 || fs_check_search(c, abs, err) < 0)
    return -1;
  struct lister l = {.c = c, .depth = depth};
  if (list_dir(&l, fd, abs, 0, err) < 0) {
    agsx_fs_entries_free(l.v, l.n);
    return -1;
  }
  *ret = l.v;
  *ret_n = l.n;
  return 0;
}

/* ---- MakeDir, Move, Remove ------------------------------------------------------------ */

int agsx_fs_mkdir(struct agsx_fs_ctx *c, const char *path, struct agsx_fs_entry *ret,
                  agsx_error_t *err) {
  _cleanup_free_ char *abs = agsx_fs_path(c, path, err);
  if (abs == NULL)
    return -1;
  _cleanup_close_ int fd = fs_open(c, abs, O_PATH);
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) == 0) {
    if (S_ISDIR(st.st_mode))
      return agsx_error_set_quiet(err, EEXIST, "directory already exists: %s", abs);
    return agsx_error_set_quiet(err, EINVAL, "path already exists but it is not a directory: %s",
                                abs);
  }
  if (errno != ENOENT && errno != ENOTDIR)
    return agsx_error_set(err, errno, "error getting file info %s", abs);
  int secbits;
  if (fs_enter(c, &secbits, err) < 0)
    return -1;
  int dfd = fs_ensure_dirs(c, abs, err);
  fs_leave(secbits);
  if (dfd < 0)
    return agsx_fs_code(err) == AGSX_FS_INVALID_ARGUMENT ? -1 : agsx_error_wrap(err, "make dir");
  close(dfd);
  return fs_stat_abs(c, abs, ret, err);
}

/* The directory of ABS opened in the root (O_PATH) and ABS's last name. */
static int open_parent(const struct agsx_fs_ctx *c, const char *abs, char **ret_base,
                       agsx_error_t *err) {
  _cleanup_free_ char *parent = NULL, *base = NULL;
  if (fs_split(abs, &parent, &base, err) < 0)
    return -1;
  int fd = fs_open(c, parent, O_PATH | O_DIRECTORY);
  if (fd < 0)
    return agsx_error_set(err, errno == ENOTDIR ? ENOENT : errno, "open %s", parent);
  *ret_base = steal_ptr(&base);
  return fd;
}

/* A directory that moves to another parent has its ".." rewritten, which
 * the kernel lets only a writer of that directory do: the sandbox's root
 * cannot move a host directory (a volume's) away, nor may the API. */
static int check_dir_reparent(const struct agsx_fs_ctx *c, int sfd, const char *sbase, int dfd,
                              const char *path, agsx_error_t *err) {
  struct stat st, sp, dp;
  if (fstatat(sfd, sbase, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
    return 0; /* not a directory (a missing one is rename's to report) */
  if (fstat(sfd, &sp) < 0 || fstat(dfd, &dp) < 0)
    return agsx_error_set(err, errno, "stat the directories of %s", path);
  if ((sp.st_dev == dp.st_dev && sp.st_ino == dp.st_ino) || fs_sandbox_may(c, &st, W_OK))
    return 0;
  return agsx_error_set_quiet(err, EACCES, "permission denied: %s", path);
}

int agsx_fs_move(struct agsx_fs_ctx *c, const char *src, const char *dst, struct agsx_fs_entry *ret,
                 agsx_error_t *err) {
  _cleanup_free_ char *from = agsx_fs_path(c, src, err);
  _cleanup_free_ char *to = from ? agsx_fs_path(c, dst, err) : NULL;
  _cleanup_free_ char *sbase = NULL, *dbase = NULL, *dparent = NULL;
  if (to == NULL)
    return -1;
  _cleanup_error_ agsx_error_t perr = NULL;
  _cleanup_close_ int sfd = open_parent(c, from, &sbase, &perr);
  if (sfd < 0 && agsx_fs_code(&perr) == AGSX_FS_NOT_FOUND)
    return agsx_error_set_quiet(err, ENOENT, "source file not found: %s", from);
  if (sfd < 0)
    return fs_pass_error(err, &perr);
  if (fs_split(to, &dparent, &dbase, err) < 0)
    return -1;
  if (agsx_copy_on_kernel_fs_fd(sfd))
    return agsx_error_set_quiet(err, EACCES, "cannot move %s: on a kernel filesystem", from);
  if (fs_check_unlink(c, sfd, sbase, from, err) < 0)
    return -1;
  int secbits;
  if (fs_enter(c, &secbits, err) < 0)
    return -1;
  _cleanup_close_ int dfd = fs_ensure_dirs(c, dparent, err);
  int r = dfd < 0 ? -1 : 0, e = 0;
  if (r == 0 && agsx_copy_on_kernel_fs_fd(dfd))
    r = agsx_error_set_quiet(err, EACCES, "cannot move to %s: on a kernel filesystem", to);
  if (r == 0)
    r = fs_check_unlink(c, dfd, dbase, to, err);
  if (r == 0)
    r = check_dir_reparent(c, sfd, sbase, dfd, from, err);
  if (r == 0 && renameat(sfd, sbase, dfd, dbase) < 0) {
    e = errno;
    r = -1;
  }
  fs_leave(secbits);
  if (e == ENOENT)
    return agsx_error_set_quiet(err, ENOENT, "source file not found: %s", from);
  if (e)
    return agsx_error_set(err, e, "error renaming %s to %s", from, to);
  if (r < 0)
    return -1;
  return fs_stat_abs(c, to, ret, err);
}

/* What the sandbox's root must be allowed for the entry NAME of DFD to go
 * in a Remove: fs_check_unlink's rule, and no mount point (a host image's
 * /tmp, a volume, /proc), which would be emptied and then not removed
 * (EBUSY). PATH names it in the message. */
static int check_remove(const struct agsx_fs_ctx *c, int dfd, const char *name, const char *path,
                        agsx_error_t *err) {
  if (fs_check_unlink(c, dfd, name, path, err) < 0)
    return -1;
  struct statx sx;
  if (statx(dfd, name, AT_SYMLINK_NOFOLLOW, STATX_TYPE, &sx) == 0 &&
      (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) &&
      (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT))
    return agsx_error_set_quiet(err, EINVAL, "cannot remove %s: a mount point", path);
  return 0;
}

struct remove_gate {
  const struct agsx_fs_ctx *c;
  const char *abs;
};

/* Every level below the top passes the top's check: host root removes
 * nothing that the sandbox's root could not (a host file in a volume below
 * the removed directory stays, and the removal stops there). */
static int remove_may(void *data, int dfd, const char *name, agsx_error_t *err) {
  const struct remove_gate *g = data;
  _cleanup_free_ char *path = xasprintf("`%s` below %s", name, g->abs);
  return check_remove(g->c, dfd, name, path, err);
}

int agsx_fs_remove(struct agsx_fs_ctx *c, const char *path, agsx_error_t *err) {
  _cleanup_free_ char *abs = agsx_fs_path(c, path, err);
  _cleanup_free_ char *base = NULL;
  if (abs == NULL)
    return -1;
  if (strcmp(abs, "/") == 0)
    return agsx_error_set_quiet(err, EINVAL, "refusing to remove '/'");
  _cleanup_error_ agsx_error_t perr = NULL;
  _cleanup_close_ int pfd = open_parent(c, abs, &base, &perr);
  if (pfd < 0) /* a missing path (or parent) is no error, as os.RemoveAll */
    return agsx_fs_code(&perr) == AGSX_FS_NOT_FOUND ? 0 : fs_pass_error(err, &perr);
  if (agsx_copy_on_kernel_fs_fd(pfd))
    return agsx_error_set_quiet(err, EACCES, "cannot remove %s: on a kernel filesystem", abs);
  struct stat st;
  if (fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT)
    return 0;
  if (check_remove(c, pfd, base, abs, err) < 0)
    return -1;
  struct remove_gate g = {.c = c, .abs = abs};
  struct agsx_rm_gate gate = {.may = remove_may, .data = &g};
  if (agsx_rm_rf_gated_at(pfd, base, &gate, err) < 0)
    return agsx_error_wrap(err, "error removing file or directory %s", abs);
  return 0;
}
