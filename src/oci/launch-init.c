/* agsx — oci/launch: the container's init (C), from the clone to the
 * exec of the container's program (see oci.h for the steps): root of the
 * user namespace, the stage, the root filesystem P handed over at GO, the
 * engine's mounts in order, /dev, sysctls, masked and read-only paths,
 * pivot_root, names, the terminal, the hand-over to the engine, then the
 * wait on the start socket and procexec.h's last steps. Invariant: every
 * mount destination is resolved inside the root by the init itself, with
 * openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS), and a filesystem's
 * (not a bind's) under /proc, /sys or /dev with no symlink at all
 * (CVE-2024-21626). */
#include "config.h"

#include "oci/launch-internal.h"
#include "sandbox/procexec.h"
#include "sandbox/rootfs.h"

#include <fcntl.h>
#include <dirent.h>
#include <grp.h>
#include <inttypes.h>
#include <linux/keyctl.h>
#include <linux/openat2.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>

/* The first fd of the bind mounts in GO (after stage, start socket, root). */
static size_t first_bind(const struct child *c) {
  (void)c;
  return 3;
}

#define RESOLVE_ROOT (RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)

static _Noreturn void child_fail(struct child *c, agsx_error_t *err) {
  struct agsx_msg m = {.type = AGSX_MSG_ERROR, .code = 1, .err = *err ? (*err)->errno_ : 0};
  snprintf(m.text, sizeof(m.text), "%s", *err ? (*err)->msg : "container setup failed");
  agsx_msg_send(c->sync, &m, NULL, 0);
  _exit(1);
}

static unsigned attrs_of(unsigned long flags) {
  unsigned a = 0;
  if (flags & MS_RDONLY)
    a |= MOUNT_ATTR_RDONLY;
  if (flags & MS_NOSUID)
    a |= MOUNT_ATTR_NOSUID;
  if (flags & MS_NODEV)
    a |= MOUNT_ATTR_NODEV;
  if (flags & MS_NOEXEC)
    a |= MOUNT_ATTR_NOEXEC;
  /* One atime mode (the attributes hold a value, not bits), by mount(2)'s
   * precedence: strictatime over noatime over relatime. */
  if (flags & MS_STRICTATIME)
    a |= MOUNT_ATTR_STRICTATIME;
  else if (flags & MS_NOATIME)
    a |= MOUNT_ATTR_NOATIME;
  if (flags & MS_NODIRATIME)
    a |= MOUNT_ATTR_NODIRATIME;
  return a;
}

/* mount_setattr changes the atime mode only with all of MOUNT_ATTR__ATIME
 * cleared in the same call (else EINVAL). */
static unsigned atime_clr(unsigned long flags) {
  return flags & (MS_RELATIME | MS_NOATIME | MS_STRICTATIME) ? MOUNT_ATTR__ATIME : 0;
}

/* mounts[].options shared or rshared, once FD is attached. A bind of the
 * host's shared mount was a peer of the host's until made a slave (before
 * it was attached): shared now, it is a peer of its own copies inside the
 * container, receiving from the host's, never propagating to it, as under
 * runc in a user namespace. */
static int make_shared(int fd, const struct agsx_oci_mount *m, agsx_error_t *err) {
  if (!(m->propagation & MS_SHARED))
    return 0;
  struct mount_attr a = {.propagation = MS_SHARED};
  if (mount_setattr(fd, "", AT_EMPTY_PATH | (m->propagation & MS_REC ? AT_RECURSIVE : 0), &a,
                    sizeof(a)) < 0)
    return agsx_error_set(err, errno, "mount `%s`: shared propagation", m->destination);
  return 0;
}

/* ---- the init: mounts ------------------------------------------------------------------------ */

/* The data of a mount ("mode=755,size=65536k") as fsconfig pairs. */
static int fs_with_data(const char *type, const char *data, const char *const *extra,
                        unsigned attrs, agsx_error_t *err) {
  const char *opts[2 * 40 + 8];
  size_t n = 0;
  _cleanup_free_ char *copy = xstrdup(data ? data : "");
  for (size_t i = 0; extra && extra[i]; i += 2) {
    opts[n++] = extra[i];
    opts[n++] = extra[i + 1];
  }
  for (char *save = NULL, *t = strtok_r(copy, ",", &save); t && n < 2 * 40;
       t = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(t, '=');
    if (eq)
      *eq = '\0';
    if (strcmp(t, "newinstance") == 0 && extra)
      continue;
    opts[n++] = t;
    opts[n++] = eq ? eq + 1 : NULL;
  }
  opts[n] = NULL;
  return agsx_rootfs_fs_new(type, opts, attrs, err);
}

/* A mount point the init cannot create: EACCES, EPERM and EROFS get the
 * likely cause named (an engine's own mapping over a rootfs it did not
 * chown, podman's --rootfs DIR:O with --uidmap: runc fails the same). */
static int mount_point_error(agsx_error_t *err, int e, const char *path) {
  if (e == EACCES || e == EPERM)
    return agsx_error_set(err, e,
                          "mount point `%s`: the container's root may not create it (the rootfs "
                          "is not owned by the container's user namespace: chown it to the "
                          "mapping, or leave the mapping to agsx)",
                          path);
  if (e == EROFS)
    return agsx_error_set(err, e, "mount point `%s`: missing in a read-only rootfs", path);
  return agsx_error_set(err, e, "mount point `%s`", path);
}

/* Directory PATH inside ROOT, missing components created. Unlike the
 * native tree's, the engine's mounts stack (/dev, then /dev/pts), so the
 * walk may cross mounts; it never leaves ROOT (RESOLVE_IN_ROOT) and
 * follows no magic link (CVE-2024-21626). STRICT: no symlink at all. */
static int oci_dir_at(int root, const char *path, bool strict, int depth, agsx_error_t *err) {
  uint64_t resolve = RESOLVE_ROOT | (strict ? RESOLVE_NO_SYMLINKS : 0);
  int fd = agsx_openat2(root, path, O_PATH | O_DIRECTORY, 0, resolve);
  if (fd >= 0 || errno != ENOENT)
    return fd >= 0 ? fd : agsx_error_set(err, errno, "mount point `%s`", path);
  if (depth > 16)
    return agsx_error_set(err, ELOOP, "mount point `%s`", path);
  _cleanup_close_ int cur = fcntl(root, F_DUPFD_CLOEXEC, 3);
  _cleanup_free_ char *p = xstrdup(path);
  for (char *save = NULL, *c = strtok_r(p, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
    if (strcmp(c, ".") == 0 || strcmp(c, "..") == 0)
      return agsx_error_set(err, EINVAL, "mount point `%s`", path);
    if (mkdirat(cur, c, 0755) < 0 && errno != EEXIST)
      return mount_point_error(err, errno, path);
    /* Re-resolved from ROOT each step: a symlink component stays inside. */
    size_t n = (size_t)(c - p) + strlen(c);
    _cleanup_free_ char *sofar = xmalloc(n + 1);
    memcpy(sofar, p, n);
    sofar[n] = '\0';
    for (char *q = sofar; q < sofar + (c - p); q++)
      if (*q == '\0')
        *q = '/';
    int next = agsx_openat2(root, sofar, O_PATH | O_DIRECTORY, 0, resolve);
    char target[4096];
    ssize_t tl;
    if (next < 0 && errno == ENOENT && !strict &&
        (tl = readlinkat(cur, c, target, sizeof(target) - 1)) > 0) {
      /* A dangling symlink (to an absolute host path, say): what it
       * names is made inside ROOT, as runc does, then the rest. */
      target[tl] = '\0';
      const char *rest = save && *save ? save : "";
      size_t pl = (size_t)(c - p);
      _cleanup_free_ char *parent = xstrndup(sofar, pl);
      _cleanup_free_ char *again = target[0] == '/' ? xasprintf("%s/%s", target, rest)
                                                    : xasprintf("%s/%s/%s", parent, target, rest);
      return oci_dir_at(root, again, strict, depth + 1, err);
    }
    if (next < 0)
      return agsx_error_set(err, errno, "mount point `%s`", path);
    agsx_closep(&cur);
    cur = next;
  }
  return steal_fd(&cur);
}

static int oci_dir(int root, const char *path, bool strict, agsx_error_t *err) {
  return oci_dir_at(root, path, strict, 0, err);
}

static int oci_attach(int root, const char *path, int mfd, bool strict, agsx_error_t *err) {
  _cleanup_close_ int dir = oci_dir(root, path, strict, err);
  if (dir < 0)
    return -1;
  if (move_mount(mfd, "", dir, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
    return agsx_error_set(err, errno, "mount on `%s`", path);
  return 0;
}

/* A file mount point: the parent made inside the root, the file created. */
static int attach_file(int root, const char *dst, int mfd, agsx_error_t *err) {
  _cleanup_free_ char *parent = xstrdup(dst);
  char *slash = strrchr(parent, '/');
  *slash = '\0';
  _cleanup_close_ int p = oci_dir(root, *parent ? parent : "/", false, err);
  if (p < 0)
    return agsx_error_wrap(err, "mount `%s`", dst);
  _cleanup_close_ int f = openat(p, slash + 1, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (f < 0 && errno != EISDIR)
    return mount_point_error(err, errno, dst);
  if (move_mount(mfd, "", p, slash + 1, MOVE_MOUNT_F_EMPTY_PATH) < 0)
    return agsx_error_set(err, errno, "mount on `%s`", dst);
  return 0;
}

static bool under(const char *path, const char *dir) {
  size_t n = strlen(dir);
  return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* A new copy of a mount P made (a bind, the sysfs), taken at its turn:
 * the kernel lists a namespace's mounts in the order their copies were
 * made, and runc's mountinfo follows config.json. A detached tree clones
 * only from the namespace that made it, so P's is attached to the stage
 * (agsx's tmpfs, never the container's) first, cloned, and detached. When
 * a step fails, P's copy stays: out of order, nothing else lost. */
static int in_turn(int stage, int *fd) {
  if (mkdirat(stage, "turn", 0700) < 0 && errno != EEXIST)
    return *fd;
  if (move_mount(*fd, "", stage, "turn", MOVE_MOUNT_F_EMPTY_PATH) < 0)
    return *fd;
  int n = open_tree(*fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE);
  if (fchdir(stage) < 0 || umount2("turn", MNT_DETACH) < 0) {
    if (n >= 0)
      close(n);
    return *fd;
  }
  if (n < 0)
    return *fd; /* detached again: P's copy, still whole */
  agsx_closep(fd);
  *fd = n;
  return n;
}

static int mount_bind(int root, const struct agsx_oci_mount *m, int fd, agsx_error_t *err) {
  struct mount_attr a = {.attr_set = attrs_of(m->flags) | MOUNT_ATTR_NODEV,
                         .attr_clr = atime_clr(m->flags),
                         .propagation = m->propagation & ~MS_REC};
  if (a.propagation == 0)
    a.propagation = MS_PRIVATE;
  else if (a.propagation == MS_SHARED)
    a.propagation = MS_SLAVE; /* out of the host's peer group first (make_shared) */
  if (mount_setattr(fd, "", AT_EMPTY_PATH | (m->recursive ? AT_RECURSIVE : 0), &a, sizeof(a)) < 0)
    return agsx_error_set(err, errno, "mount `%s`: set attributes", m->destination);
  struct stat st;
  if (fstat(fd, &st) < 0)
    return agsx_error_set(err, errno, "mount `%s`", m->destination);
  if (!S_ISDIR(st.st_mode) ? attach_file(root, m->destination, fd, err) < 0
                           : oci_attach(root, m->destination, fd, false, err) < 0)
    return -1;
  return make_shared(fd, m, err);
}

/* The container's own cgroups, read-only, as runc shows them. cgroup v1
 * hierarchies cannot be mounted from a user namespace: a tmpfs with P's
 * binds of the container's cgroup in each hierarchy (cgroup.h), made
 * read-only once filled when the engine asks for ro. v2: the container's
 * cgroup namespace's own cgroup2 where the kernel allows; else (no cgroup
 * namespace, or no binds) an empty read-only tmpfs: none of the host's
 * tree is ever shown. */
static int mount_cgroup(struct child *c, int root, const struct agsx_oci_mount *m,
                        agsx_error_t *err) {
  unsigned attrs = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
  const char *src = m->source && m->source[0] && strlen(m->source) < 256 ? m->source : NULL;
  if (c->n_cg > 0) {
    const char *opts[] = {"size", "64k", "mode", "0755", src ? "source" : NULL, src, NULL};
    _cleanup_close_ int fd = agsx_rootfs_fs_new("tmpfs", opts, attrs & ~MOUNT_ATTR_RDONLY, err);
    if (fd < 0 || oci_attach(root, m->destination, fd, true, err) < 0)
      return -1;
    _cleanup_close_ int dir = oci_dir(root, m->destination, true, err);
    if (dir < 0)
      return -1;
    _cleanup_free_ char *names = xstrdup(c->cg_names);
    size_t k = c->nfds - c->n_cg;
    for (char *save = NULL, *n = strtok_r(names, " ", &save); n && k < c->nfds;
         n = strtok_r(NULL, " ", &save), k++) {
      if (strchr(n, '/') || strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
        return agsx_error_set(err, EINVAL, "cgroup hierarchy `%s`", n);
      if (mkdirat(dir, n, 0555) < 0 && errno != EEXIST)
        return agsx_error_set(err, errno, "mount point `%s/%s`", m->destination, n);
      if (move_mount(c->fds[k], "", dir, n, MOVE_MOUNT_F_EMPTY_PATH) < 0)
        return agsx_error_set(err, errno, "mount the cgroup on `%s/%s`", m->destination, n);
    }
    struct mount_attr a = {.attr_set = MOUNT_ATTR_RDONLY};
    if ((m->flags & MS_RDONLY) && mount_setattr(dir, "", AT_EMPTY_PATH, &a, sizeof(a)) < 0)
      return agsx_error_set(err, errno, "mount `%s` read-only", m->destination);
    return 0;
  }
  _cleanup_error_ agsx_error_t e = NULL;
  const char *source[] = {src ? "source" : NULL, src, NULL};
  int fd = c->new_cgroupns ? agsx_rootfs_fs_new("cgroup2", source, attrs, &e) : -1;
  if (fd < 0) {
    const char *opts[] = {"size", "0", "mode", "0555", src ? "source" : NULL, src, NULL};
    fd = agsx_rootfs_fs_new("tmpfs", opts, attrs, err);
  }
  if (fd < 0)
    return -1;
  int r = oci_attach(root, m->destination, fd, true, err);
  close(fd);
  return r;
}

static int mount_one(struct child *c, int root, const struct agsx_oci_mount *m, int bindfd,
                     int sysfs, agsx_error_t *err) {
  if (agsx_oci_launch_is_bind(m))
    return mount_bind(root, m, bindfd, err);
  unsigned attrs = attrs_of(m->flags);
  const char *t = m->type;
  int fd = -1;
  bool strict = under(m->destination, "/proc") || under(m->destination, "/sys") ||
                under(m->destination, "/dev");
  /* The engine's source ("shm", "my-scratch") is what mountinfo shows, as
   * with runc's mount(2); the kernel takes at most 255 bytes of it. */
  const char *src = m->source && m->source[0] && strlen(m->source) < 256 ? m->source : NULL;
  const char *source[] = {src ? "source" : NULL, src, NULL, NULL, NULL};
  if (strcmp(t, "proc") == 0) {
    fd = agsx_rootfs_fs_new("proc", source, attrs | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, err);
  } else if (strcmp(t, "sysfs") == 0) {
    /* P's sysfs of the container's network namespace, read-only always. */
    fd = sysfs >= 0 ? fcntl(sysfs, F_DUPFD_CLOEXEC, 3) : -1;
    if (fd < 0)
      return agsx_error_set(err, errno, "mount sysfs on `%s`", m->destination);
  } else if (strcmp(t, "tmpfs") == 0) {
    fd = fs_with_data("tmpfs", m->data, source, attrs, err);
  } else if (strcmp(t, "devpts") == 0) {
    const char *extra[] = {"newinstance", NULL, src ? "source" : NULL, src, NULL};
    fd = fs_with_data("devpts", m->data, extra, attrs, err);
  } else if (strcmp(t, "mqueue") == 0) {
    fd = agsx_rootfs_fs_new("mqueue", source, attrs, err);
  } else if (strcmp(t, "cgroup") == 0 || strcmp(t, "cgroup2") == 0) {
    return mount_cgroup(c, root, m, err);
  } else {
    return agsx_error_set(err, 0, "mount type `%s` is not supported by agsx", t);
  }
  if (fd < 0)
    return agsx_error_wrap(err, "mount %s on `%s`", t, m->destination);
  int r = oci_attach(root, m->destination, fd, strict, err);
  if (r == 0)
    r = make_shared(fd, m, err);
  close(fd);
  return r;
}

/* The engine's mounts in config order (see in_turn), STAGE being agsx's. */
static int mount_all(struct child *c, int stage, int root, agsx_error_t *err) {
  const struct agsx_oci_spec *s = c->s;
  size_t next = first_bind(c), nsys;
  int sysfs = -1;
  bool sys_turned = false;
  for (size_t i = 0; i < s->n_mounts; i++)
    if (agsx_oci_launch_is_bind(&s->mounts[i]))
      next++;
  nsys = next;
  if (next < c->nfds - c->n_cg)
    sysfs = c->fds[next];
  next = first_bind(c);
  for (size_t i = 0; i < s->n_mounts; i++) {
    const struct agsx_oci_mount *m = &s->mounts[i];
    int bindfd = agsx_oci_launch_is_bind(m) ? in_turn(stage, &c->fds[next++]) : -1;
    if (!sys_turned && sysfs >= 0 && bindfd < 0 && strcmp(m->type, "sysfs") == 0) {
      sysfs = in_turn(stage, &c->fds[nsys]);
      sys_turned = true; /* a second sysfs mount shares it, attached already */
    }
    if (mount_one(c, root, m, bindfd, sysfs, err) < 0)
      return -1;
  }
  return 0;
}

/* The spec's default devices, and linux.devices: the host's nodes bound in
 * (no mknod in a user namespace), only where /dev is a tmpfs of ours. */
static bool node_is(const struct stat *st, char type, int64_t major, int64_t minor) {
  bool kind = type == 'b'   ? S_ISBLK(st->st_mode)
              : type == 'p' ? S_ISFIFO(st->st_mode)
                            : S_ISCHR(st->st_mode);
  return kind && (type == 'p' ||
                  ((int64_t)major(st->st_rdev) == major && (int64_t)minor(st->st_rdev) == minor));
}

/* The host's node of TYPE MAJOR:MINOR for a device asked for at PATH: PATH
 * itself when it is that node, else one named anywhere in the host's /dev
 * two levels deep (Docker's --device /dev/null:/dev/mynull sends the
 * container's path with the host node's numbers). Into OUT; 0 or -1. */
static int host_node(const char *path, char type, int64_t major, int64_t minor, char *out,
                     size_t size) {
  struct stat st;
  if (stat(path, &st) == 0 && node_is(&st, type, major, minor))
    return snprintf(out, size, "%s", path) < (int)size ? 0 : -1;
  static const char *const dirs[] = {"/dev",       "/dev/net",    "/dev/snd",  "/dev/dri",
                                     "/dev/input", "/dev/mapper", "/dev/vfio", "/dev/fuse"};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(dirs); i++) {
    _cleanup_dir_ DIR *d = opendir(dirs[i]);
    for (struct dirent *e; d && (e = readdir(d));) {
      if (e->d_type != DT_CHR && e->d_type != DT_BLK && e->d_type != DT_FIFO)
        continue;
      if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          node_is(&st, type, major, minor))
        return snprintf(out, size, "%s/%s", dirs[i], e->d_name) < (int)size ? 0 : -1;
    }
  }
  return -1;
}

/* HOST's node bound at NAME in DIR (a directory of the container's /dev). */
static int bind_node(int dir, const char *name, const char *host, const char *path,
                     agsx_error_t *err) {
  _cleanup_close_ int f = openat(dir, name, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (f < 0)
    return agsx_error_set(err, errno, "%s", path);
  _cleanup_close_ int m =
      agsx_rootfs_bind_clone(AT_FDCWD, host, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false, err);
  if (m < 0 || move_mount(m, "", dir, name, MOVE_MOUNT_F_EMPTY_PATH) < 0)
    return agsx_error_set(err, errno, "%s", path);
  return 0;
}

/* linux.devices' D at its container path, missing directories made in
 * the container's /dev (DEV), no symlink followed (/dev/net/tun). */
static int bind_device(int dev, const struct agsx_oci_device *d, agsx_error_t *err) {
  char host[512];
  if (host_node(d->path, d->type, d->major, d->minor, host, sizeof(host)) < 0)
    return agsx_error_set(err, 0,
                          "config: linux.devices: `%s`: the host has no %c %" PRId64 ":%" PRId64
                          " node (agsx binds host devices, it cannot create them)",
                          d->path, d->type, d->major, d->minor);
  _cleanup_free_ char *rel = xstrdup(d->path + 5);
  char *slash = strrchr(rel, '/');
  if (slash == NULL)
    return bind_node(dev, rel, host, d->path, err);
  *slash = '\0';
  _cleanup_close_ int parent = agsx_rootfs_dir_in_root(dev, rel, true, true, err);
  if (parent < 0)
    return agsx_error_wrap(err, "%s", d->path);
  return bind_node(parent, slash + 1, host, d->path, err);
}

static int populate_dev(struct child *c, int root, agsx_error_t *err) {
  _cleanup_close_ int dev =
      agsx_openat2(root, "/dev", O_RDONLY | O_DIRECTORY, 0, RESOLVE_ROOT | RESOLVE_NO_SYMLINKS);
  if (dev < 0)
    return 0;
  static const char *const defaults[] = {"null", "zero", "full", "random", "urandom", "tty"};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(defaults); i++) {
    char host[64];
    snprintf(host, sizeof(host), "/dev/%s", defaults[i]);
    if (bind_node(dev, defaults[i], host, host, err) < 0)
      return -1;
  }
  for (size_t i = 0; i < c->s->n_devices; i++) {
    const struct agsx_oci_device *d = &c->s->devices[i];
    bool dflt = false;
    for (size_t k = 0; k < AGSX_ARRAY_SIZE(defaults); k++)
      dflt |= strcmp(defaults[k], d->path + 5) == 0;
    if (!dflt && bind_device(dev, d, err) < 0)
      return -1;
  }
  static const char *const links[][2] = {{"/proc/self/fd", "fd"},
                                         {"/proc/self/fd/0", "stdin"},
                                         {"/proc/self/fd/1", "stdout"},
                                         {"/proc/self/fd/2", "stderr"},
                                         {"pts/ptmx", "ptmx"}};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(links); i++)
    if (symlinkat(links[i][0], dev, links[i][1]) < 0 && errno != EEXIST)
      return agsx_error_set(err, errno, "/dev/%s", links[i][1]);
  return 0;
}

static int write_sysctls(const struct agsx_oci_spec *s, int root, agsx_error_t *err) {
  for (char **kv = s->sysctl; kv && *kv; kv++) {
    if (agsx_str_has_prefix(*kv, "net."))
      continue; /* P wrote those, in the container's network namespace */
    _cleanup_free_ char *path = xasprintf("/proc/sys/%s", *kv);
    char *eq = strchr(path, '=');
    *eq = '\0';
    for (char *p = path + 10; *p; p++)
      if (*p == '.')
        *p = '/';
    _cleanup_close_ int fd =
        agsx_openat2(root, path, O_WRONLY | O_TRUNC, 0, RESOLVE_ROOT | RESOLVE_NO_SYMLINKS);
    if (fd < 0 || agsx_write_all(fd, eq + 1, strlen(eq + 1)) < 0)
      return agsx_error_set(err, errno, "sysctl `%s`", *kv);
  }
  return 0;
}

/* A and B name the same path but for repeated and trailing slashes. */
static bool same_path(const char *a, const char *b) {
  for (;; a++, b++) {
    while (*a == '/' && (a[1] == '/' || a[1] == '\0'))
      a++;
    while (*b == '/' && (b[1] == '/' || b[1] == '\0'))
      b++;
    if (*a != *b)
      return false;
    if (*a == '\0')
      return true;
  }
}

/* The engine's entry P is in agsx's own list OWN (N of them) or before P
 * in its list V: done already. Docker sends the paths agsx masks anyway,
 * engines repeat entries, and a second mount would only stack. */
static bool done_already(char **v, char **p, const char *const *own, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (same_path(own[i], *p))
      return true;
  for (char **q = v; q < p; q++)
    if (same_path(*q, *p))
      return true;
  return false;
}

static int mask_all(const struct agsx_oci_spec *s, int root, agsx_error_t *err) {
  _cleanup_close_ int devnull = open("/dev/null", O_PATH | O_CLOEXEC);
  const char *opts[] = {"size", "0", "mode", "0555", NULL};
  _cleanup_close_ int empty = agsx_rootfs_fs_new("tmpfs", opts, MOUNT_ATTR_RDONLY, err);
  if (devnull < 0 || empty < 0)
    return agsx_error_set(err, errno, "masked paths");
  /* The union: an engine can add, never remove (unmask=ALL, privileged). */
  bool attached = false;
  for (size_t i = 0; i < agsx_rootfs_n_masked_paths; i++)
    if (agsx_rootfs_mask(root, agsx_rootfs_masked_paths[i], devnull, empty, &attached, err) < 0)
      return -1;
  for (char **p = s->masked; p && *p; p++)
    if (!done_already(s->masked, p, agsx_rootfs_masked_paths, agsx_rootfs_n_masked_paths) &&
        agsx_rootfs_mask(root, *p, devnull, empty, &attached, err) < 0)
      return -1;
  for (size_t i = 0; i < agsx_rootfs_n_readonly_paths; i++)
    if (agsx_rootfs_readonly(root, agsx_rootfs_readonly_paths[i], err) < 0)
      return -1;
  for (char **p = s->readonly; p && *p; p++)
    if (!done_already(s->readonly, p, agsx_rootfs_readonly_paths, agsx_rootfs_n_readonly_paths) &&
        agsx_rootfs_readonly(root, *p, err) < 0)
      return -1;
  return 0;
}

static int child_rootfs(struct child *c, int *ret_root, agsx_error_t *err) {
  unsigned long prop = c->s->rootfs_propagation ? c->s->rootfs_propagation : MS_PRIVATE;
  if (mount(NULL, "/", NULL, MS_REC | (prop & ~MS_REC), NULL) < 0)
    return agsx_error_set(err, errno, "make mounts private");
  const char *opts[] = {"size", "1m", "mode", "0755", NULL};
  _cleanup_close_ int t =
      agsx_rootfs_fs_new("tmpfs", opts, MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID, err);
  if (t < 0)
    return -1;
  if (move_mount(t, "", c->fds[0], "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
    return agsx_error_set(err, errno, "mount the stage");
  agsx_closep(&c->fds[0]);
  if (mkdirat(t, "root", 0755) < 0 || move_mount(c->fds[2], "", t, "root", MOVE_MOUNT_F_EMPTY_PATH))
    return agsx_error_set(err, errno, "attach the root filesystem");
  int root = openat(t, "root", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0)
    return agsx_error_set(err, errno, "open the root filesystem");
  *ret_root = root;
  if (mount_all(c, t, root, err) < 0 || populate_dev(c, root, err) < 0 ||
      write_sysctls(c->s, root, err) < 0 || mask_all(c->s, root, err) < 0)
    return -1;
  if (c->s->root_readonly) {
    struct mount_attr a = {.attr_set = MOUNT_ATTR_RDONLY};
    if (mount_setattr(root, "", AT_EMPTY_PATH, &a, sizeof(a)) < 0)
      return agsx_error_set(err, errno, "read-only root");
  }
  return 0;
}

/* ---- the init ------------------------------------------------------------------------------- */

static int become_root(agsx_error_t *err) {
  if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
    return agsx_error_set(err, errno,
                          "become root of the user namespace (container id 0 must be mapped)");
  if (setgroups(0, NULL) < 0)
    return agsx_error_set(err, errno, "setgroups");
  /* Until create is done: a killed create takes its half-made init along. */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || getppid() == 1)
    return agsx_error_set(err, errno, "parent death signal");
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
    return agsx_error_set(err, errno, "dumpable");
  return 0;
}

static int check_program(const struct agsx_oci_process *p, agsx_error_t *err) {
  int e = agsx_proc_check_exec(p->args, p->env);
  if (e == 0)
    return 0;
  /* Words the engines match: Podman maps them to 127 and 126. */
  if (e == ENOENT || e == ENOTDIR || e == ELOOP || e == EXDEV)
    return agsx_error_set_quiet(err, ENOENT,
                                "exec: \"%s\": executable file not found in $PATH: no such file "
                                "or directory",
                                p->args[0]);
  if (e == EACCES || e == EPERM)
    return agsx_error_set_quiet(err, e, "exec: \"%s\": permission denied", p->args[0]);
  return agsx_error_set(err, e, "exec \"%s\"", p->args[0]);
}

static void init_user(const struct agsx_oci_process *p, struct agsx_user *u) {
  memset(u, 0, sizeof(*u));
  u->uid = p->uid;
  u->gid = p->gid;
  u->groups[u->n_groups++] = p->gid;
  for (size_t i = 0; i < p->n_groups && u->n_groups < AGSX_MAX_GROUPS; i++)
    u->groups[u->n_groups++] = p->groups[i];
}

static char **init_env(const struct agsx_oci_process *p) {
  char **env = agsx_strv_concat(p->env, NULL);
  bool home = false;
  for (char **e = env; *e; e++)
    home |= strncmp(*e, "HOME=", 5) == 0;
  if (!home)
    agsx_strv_push(&env, p->uid == 0 ? "HOME=/root" : "HOME=/");
  return env;
}

/* After start connected: why the program will not run, to `start`. */
static _Noreturn void start_fail(int conn, agsx_error_t *err) {
  struct agsx_msg m = {.type = AGSX_MSG_ERROR, .code = 125, .err = *err ? (*err)->errno_ : 0};
  snprintf(m.text, sizeof(m.text), "%s", *err ? (*err)->msg : "start failed");
  if (write(conn, &m, sizeof(m)) < 0) {
  }
  _exit(125);
}

/* C until its root is the container's: GO's fds, the user namespace's
 * root, the mounts (P's hooks run between MOUNTED and CONT), pivot. */
static void child_root(struct child *c) {
  agsx_error_t err = NULL;
  int keep[16];
  size_t nkeep = 0;
  keep[nkeep++] = c->sync;
  for (int i = 0; i < c->o->preserve_fds && nkeep < AGSX_ARRAY_SIZE(keep); i++)
    keep[nkeep++] = 3 + i;
  agsx_close_all_except(keep, nkeep);
  struct agsx_msg m;
  ssize_t n = agsx_msg_recv(c->sync, &m, c->fds, AGSX_MSG_MAX_FDS, &c->nfds);
  if (n <= 0 || m.type != AGSX_MSG_GO || m.code < 0 || (size_t)m.code > c->nfds)
    _exit(1);
  c->n_cg = (size_t)m.code;
  snprintf(c->cg_names, sizeof(c->cg_names), "%.*s", (int)sizeof(m.text), m.text);
  int root = -1;
  /* The stage: an fd of P's would name P's mount namespace, a path would
   * need search permission on the engine's directories above it; the
   * working directory the clone gave us is the stage in our own mount
   * namespace (launch-ns.c). Host root's (0700): opened before becoming
   * the user namespace's root. */
  agsx_closep(&c->fds[0]);
  c->fds[0] = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (c->fds[0] < 0) {
    agsx_error_set(&err, errno, "open the stage");
    child_fail(c, &err);
  }
  if (become_root(&err) < 0)
    child_fail(c, &err);
  if (c->new_cgroupns && unshare(CLONE_NEWCGROUP) < 0) {
    agsx_error_set(&err, errno, "cgroup namespace");
    child_fail(c, &err);
  }
  if (!c->o->no_new_keyring)
    syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL);
  if (child_rootfs(c, &root, &err) < 0)
    child_fail(c, &err);
  if (agsx_oci_launch_send_msg(c->sync, MSG_MOUNTED, NULL, 0) < 0 ||
      agsx_oci_launch_wait_msg(c->sync, MSG_CONT, NULL, &err) < 0)
    _exit(1);
  for (size_t i = 2; i < c->nfds; i++)
    agsx_closep(&c->fds[i]);
  agsx_closep(&c->fds[0]);
  if (agsx_rootfs_pivot(root, &err) < 0)
    child_fail(c, &err);
  close(root);
}

/* hostname and domainname, in a new uts namespace, or (non-empty, as runc
 * does) in a joined one: a pod's, owned by the pod's user namespace the
 * init is in (never the host's: refused at create). */
static void child_names(struct child *c) {
  agsx_error_t err = NULL;
  const struct agsx_oci_spec *s = c->s;
  const char *h = s->hostname, *d = s->domainname;
  if (h && (c->new_uts || h[0]) && sethostname(h, strlen(h)) < 0) {
    agsx_error_set(&err, errno, "sethostname");
    child_fail(c, &err);
  }
  if (d && (c->new_uts || d[0]) && setdomainname(d, strlen(d)) < 0) {
    agsx_error_set(&err, errno, "setdomainname");
    child_fail(c, &err);
  }
}

/* The terminal (its slave is returned, the master goes to P for the
 * console socket), READY, then the hand-over: from MSG_DONE the engine
 * owns our lifetime. */
static int child_handover(struct child *c) {
  agsx_error_t err = NULL;
  const struct agsx_oci_spec *s = c->s;
  int master = -1, slave = -1;
  if (s->process.terminal) {
    if (agsx_child_open_pty(&master, &slave, &err) < 0)
      child_fail(c, &err);
    struct winsize ws = {.ws_row = (unsigned short)s->process.rows,
                         .ws_col = (unsigned short)s->process.cols};
    if (ws.ws_row || ws.ws_col)
      ioctl(master, TIOCSWINSZ, &ws);
    /* The terminal is the init's stdio from now, not create's: the
     * engine (go-runc) reads create's output to EOF, which never comes
     * while the init still holds that pipe (as runc, before create ends). */
    if (dup2(slave, 0) < 0 || dup2(slave, 1) < 0 || dup2(slave, 2) < 0) {
      agsx_error_set(&err, errno, "terminal as stdio");
      child_fail(c, &err);
    }
  }
  if (agsx_oci_launch_send_msg(c->sync, AGSX_MSG_READY, &master, master >= 0 ? 1 : 0) < 0)
    _exit(1);
  agsx_closep(&master);
  if (agsx_oci_launch_wait_msg(c->sync, MSG_DONE, NULL, &err) < 0)
    _exit(1);
  if (prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0) < 0 ||
      agsx_oci_launch_send_msg(c->sync, MSG_ACK, NULL, 0) < 0)
    _exit(1);
  agsx_closep(&c->sync);
  return slave;
}

_Noreturn void agsx_oci_launch_child_main(struct child *c) {
  agsx_error_t err = NULL;
  const struct agsx_oci_spec *s = c->s;
  child_root(c);
  child_names(c);
  _cleanup_strv_ char **env = init_env(&s->process);
  struct agsx_oci_process p = s->process;
  p.env = env;
  if (check_program(&p, &err) < 0)
    child_fail(c, &err);
  int slave = child_handover(c);
  agsx_proc_title_set("agsx-oci-init");
  int conn;
  do
    conn = accept4(c->fds[1], NULL, NULL, SOCK_CLOEXEC);
  while (conn < 0 && errno == EINTR);
  if (conn < 0)
    _exit(1);
  close(c->fds[1]);
  if (s->process.umask >= 0)
    umask((mode_t)s->process.umask);
  if (agsx_oci_lsm_exec(s->process.apparmor, s->process.selinux, &err) < 0)
    start_fail(conn, &err);
  struct agsx_user u;
  init_user(&s->process, &u);
  struct agsx_proc_spec ps = {
      .argv = s->process.args,
      .env = env,
      .cwd = s->process.cwd,
      .user = &u,
      .tty_slave = slave,
      .seccomp = c->eng,
      .seccomp_base = c->base,
      .caps = s->process.caps,
      .preserve_fds = c->o->preserve_fds,
  };
  agsx_proc_exec(&ps, conn);
}
