/* agsx — sandbox: named volumes (see volume.h). */
#include "config.h"

#include "sandbox/volume.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DATA "_data"
#define LOCK ".lock"

bool agsx_volume_name_is_valid(const char *name) {
  size_t n = name ? strlen(name) : 0;
  if (n == 0 || n > AGSX_VOLUME_NAME_MAX)
    return false;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)name[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && (i == 0 || (c != '_' && c != '.' && c != '-')))
      return false;
  }
  return true;
}

void agsx_volume_clear(struct agsx_volume *v) {
  free(v->name);
  memset(v, 0, sizeof(*v));
}

void agsx_volume_list_free(struct agsx_volume *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    agsx_volume_clear(&v[i]);
  free(v);
}

static int check_name(const char *name, agsx_error_t *err) {
  if (agsx_volume_name_is_valid(name))
    return 0;
  return agsx_error_set_quiet(err, EINVAL,
                              "invalid volume name `%.100s`: letters, digits and _.- (at most %d, "
                              "starting with a letter or digit)",
                              name ? name : "", AGSX_VOLUME_NAME_MAX);
}

/* ROOT/volumes, made (0700) with CREATE; ENOENT without it when missing. */
static int open_volumes(const char *root, bool create, agsx_error_t *err) {
  if (create && agsx_mkdir_p(root, 0700, err) < 0)
    return -1;
  _cleanup_close_ int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0)
    return agsx_error_set(err, errno, "image store `%s`", root);
  if (create && mkdirat(rootfd, "volumes", 0700) < 0 && errno != EEXIST)
    return agsx_error_set(err, errno, "mkdir `%s/volumes`", root);
  int fd = openat(rootfd, "volumes", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "`%s/volumes`", root);
  return fd;
}

/* The lock's byte of NAME: FNV-1a, within what an off_t holds. A collision
 * would only make two volumes share "in use". */
static off_t lock_offset(const char *name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const unsigned char *p = (const unsigned char *)name; *p; p++)
    h = (h ^ *p) * 0x100000001b3ULL;
  return (off_t)(h & ((1ULL << 62) - 1));
}

static int lock_byte(int fd, const char *name, short type, bool wait) {
  struct flock fl = {
      .l_type = type, .l_whence = SEEK_SET, .l_start = lock_offset(name), .l_len = 1};
  int r;
  do
    r = fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl);
  while (r < 0 && errno == EINTR);
  return r;
}

static bool byte_locked(int fd, const char *name) {
  struct flock fl = {
      .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = lock_offset(name), .l_len = 1};
  return fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
}

static int open_lock(int vdir, agsx_error_t *err) {
  int fd = openat(vdir, LOCK, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return agsx_error_set(err, errno, "volume lock");
  return fd;
}

/* Fills RET from VDIR/NAME; ENOENT when it is not a volume. */
static int stat_volume(int vdir, int lockfd, const char *name, struct agsx_volume *ret,
                       agsx_error_t *err) {
  struct stat st, data;
  _cleanup_close_ int fd = openat(vdir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 || fstat(fd, &st) < 0 || fstatat(fd, DATA, &data, AT_SYMLINK_NOFOLLOW) < 0 ||
      !S_ISDIR(data.st_mode))
    return agsx_error_set_quiet(err, ENOENT, "no such volume `%s`", name);
  ret->name = xstrdup(name);
  ret->created = st.st_mtim.tv_sec;
  ret->in_use = lockfd >= 0 && byte_locked(lockfd, name);
  return 0;
}

/* What a crash left: a creation's .tmp-* or a removal's .rm-* (renamed
 * away, not deleted yet), once older than any live one can be. */
#define STALE_SEC 3600
static void sweep_stale(int vdir) {
  _cleanup_dir_ DIR *d = agsx_dir_stream(vdir);
  int64_t now = agsx_now_ns() / 1000000000LL;
  for (struct dirent *e; d && (e = readdir(d));) {
    struct stat st;
    if ((strncmp(e->d_name, ".tmp-", 5) != 0 && strncmp(e->d_name, ".rm-", 4) != 0) ||
        fstatat(vdir, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        now - st.st_mtim.tv_sec < STALE_SEC)
      continue;
    agsx_error_t ignored = NULL;
    if (agsx_rm_rf_at(vdir, e->d_name, &ignored) < 0)
      agsx_error_free(&ignored); /* another sweep's meanwhile */
  }
}

int agsx_volume_create(const char *root, const char *name, bool exist_ok, agsx_error_t *err) {
  if (check_name(name, err) < 0)
    return -1;
  _cleanup_close_ int vdir = open_volumes(root, true, err);
  if (vdir < 0)
    return -1;
  _cleanup_close_ int lock = open_lock(vdir, err);
  if (lock < 0)
    return -1;
  struct agsx_volume v = {0};
  agsx_error_t e = NULL;
  if (stat_volume(vdir, -1, name, &v, &e) == 0) {
    agsx_volume_clear(&v);
    return exist_ok ? 0 : agsx_error_set_quiet(err, EEXIST, "volume `%s` already exists", name);
  }
  agsx_error_free(&e);
  sweep_stale(vdir);
  /* Made whole under a temporary name, then renamed: a volume that is
   * listed always has its data directory. */
  _cleanup_free_ char *tmp = NULL;
  _cleanup_close_ int t = agsx_mkdtemp_at(vdir, ".tmp-", 0700, &tmp, err);
  if (t < 0)
    return -1;
  int r = 0;
  /* Raw id 0 is the root of whichever sandbox mounts it (idmapped); 0777
   * so that an image's unprivileged user (E2B's `user`) can write too. */
  if (mkdirat(t, DATA, 0777) < 0 || fchmodat(t, DATA, 0777, 0) < 0 ||
      (geteuid() == 0 && fchownat(t, DATA, 0, 0, AT_SYMLINK_NOFOLLOW) < 0))
    r = agsx_error_set(err, errno, "volume `%s`: make its directory", name);
  else if (renameat2(vdir, tmp, vdir, name, RENAME_NOREPLACE) == 0)
    return 1;
  else if (errno != EEXIST)
    r = agsx_error_set(err, errno, "volume `%s`", name);
  else if (!exist_ok) /* made by another meanwhile */
    r = agsx_error_set_quiet(err, EEXIST, "volume `%s` already exists", name);
  agsx_error_t ignored = NULL;
  if (agsx_rm_rf_at(vdir, tmp, &ignored) < 0)
    agsx_error_free(&ignored);
  return r;
}

int agsx_volume_get(const char *root, const char *name, struct agsx_volume *ret,
                    agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  if (check_name(name, err) < 0)
    return -1;
  _cleanup_close_ int vdir = open_volumes(root, false, err);
  if (vdir < 0 && agsx_error_errno(err) == ENOENT) {
    agsx_error_free(err);
    return agsx_error_set_quiet(err, ENOENT, "no such volume `%s`", name);
  }
  if (vdir < 0)
    return -1;
  _cleanup_close_ int lock = openat(vdir, LOCK, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  return stat_volume(vdir, lock, name, ret, err);
}

static int cmp_volume(const void *a, const void *b) {
  return strcmp(((const struct agsx_volume *)a)->name, ((const struct agsx_volume *)b)->name);
}

int agsx_volume_list(const char *root, struct agsx_volume **ret, size_t *ret_n, agsx_error_t *err) {
  *ret = NULL;
  *ret_n = 0;
  _cleanup_close_ int vdir = open_volumes(root, false, err);
  if (vdir < 0 && agsx_error_errno(err) == ENOENT) {
    agsx_error_free(err);
    return 0; /* none was ever made */
  }
  if (vdir < 0)
    return -1;
  _cleanup_close_ int lock = openat(vdir, LOCK, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  _cleanup_dir_ DIR *d = agsx_dir_stream(vdir);
  if (d == NULL)
    return agsx_error_set(err, errno, "`%s/volumes`", root);
  struct agsx_volume *v = NULL;
  size_t n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    struct agsx_volume x;
    agsx_error_t ignored = NULL;
    if (!agsx_volume_name_is_valid(e->d_name)) /* ., .., .lock, .tmp-*, .rm-* */
      continue;
    if (stat_volume(vdir, lock, e->d_name, &x, &ignored) < 0) {
      agsx_error_free(&ignored); /* removed meanwhile */
      continue;
    }
    v = xrealloc(v, (n + 1) * sizeof(*v));
    v[n++] = x;
  }
  if (n)
    qsort(v, n, sizeof(*v), cmp_volume);
  *ret = v;
  *ret_n = n;
  return 0;
}

int agsx_volume_remove(const char *root, const char *name, agsx_error_t *err) {
  if (check_name(name, err) < 0)
    return -1;
  _cleanup_close_ int vdir = open_volumes(root, false, err);
  if (vdir < 0 && agsx_error_errno(err) == ENOENT) {
    agsx_error_free(err);
    return agsx_error_set_quiet(err, ENOENT, "no such volume `%s`", name);
  }
  if (vdir < 0)
    return -1;
  _cleanup_close_ int lock = open_lock(vdir, err);
  if (lock < 0)
    return -1;
  if (lock_byte(lock, name, F_WRLCK, false) < 0) {
    if (errno == EAGAIN || errno == EACCES)
      return agsx_error_set_quiet(err, EBUSY, "volume `%s` is in use by a sandbox", name);
    return agsx_error_set(err, errno, "volume `%s`: lock", name);
  }
  struct agsx_volume v;
  if (stat_volume(vdir, -1, name, &v, err) < 0)
    return -1;
  agsx_volume_clear(&v);
  /* Renamed away under the lock, deleted after it: a start that waited
   * for the lock finds no volume, and a long delete holds nobody up. */
  _cleanup_free_ char *trash = NULL;
  _cleanup_close_ int t = agsx_mkdtemp_at(vdir, ".rm-", 0700, &trash, err);
  if (t < 0)
    return -1;
  if (renameat(vdir, name, t, "v") < 0) {
    agsx_error_set(err, errno, "remove volume `%s`", name);
    (void)unlinkat(vdir, trash, AT_REMOVEDIR);
    return -1;
  }
  agsx_closep(&lock);
  if (agsx_rm_rf_at(vdir, trash, err) < 0)
    return agsx_error_wrap(err, "remove volume `%s`", name);
  return 0;
}

int agsx_volume_attach(const char *root, struct agsx_bind *binds, size_t n, int *ret_lock,
                       agsx_error_t *err) {
  *ret_lock = -1;
  bool any = false;
  for (size_t i = 0; i < n; i++)
    if (binds[i].volume && check_name(binds[i].src, err) < 0)
      return -1;
    else
      any |= binds[i].volume;
  if (!any)
    return 0;
  /* An absolute path: the supervisor opens it from wherever it runs. */
  _cleanup_free_ char *abs = realpath(root, NULL);
  _cleanup_close_ int vdir = abs ? open_volumes(abs, false, err) : -1;
  if (abs == NULL || (vdir < 0 && agsx_error_errno(err) == ENOENT)) {
    agsx_error_free(err);
    for (size_t i = 0; i < n; i++)
      if (binds[i].volume)
        return agsx_error_set_quiet(err, ENOENT, "no such volume `%s`", binds[i].src);
  }
  if (vdir < 0)
    return -1;
  _cleanup_close_ int lock = open_lock(vdir, err);
  if (lock < 0)
    return -1;
  for (size_t i = 0; i < n; i++) {
    struct agsx_bind *b = &binds[i];
    if (!b->volume)
      continue;
    /* Waits out a removal, which holds the lock only to rename. */
    if (lock_byte(lock, b->src, F_RDLCK, true) < 0)
      return agsx_error_set(err, errno, "volume `%s`: lock", b->src);
    struct agsx_volume v;
    if (stat_volume(vdir, -1, b->src, &v, err) < 0)
      return -1;
    agsx_volume_clear(&v);
    char *path = xasprintf("%s/volumes/%s/" DATA, abs, b->src);
    free(b->src);
    b->src = path;
    b->volume = false;
    b->idmap = true;
  }
  *ret_lock = steal_fd(&lock);
  return 0;
}
