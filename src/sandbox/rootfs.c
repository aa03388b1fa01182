/* agsx — the sandbox root filesystem, built by the sandbox init (C) inside
 * its own user and mount namespaces with the new mount API:
 *
 *   STATE/<id>      ← a tmpfs of --disk bytes (the sandbox's only writable
 *                     storage: ENOSPC inside, nothing on the host's disks)
 *     l0 … lN       ← the image layers, idmapped read-only clones (from P)
 *     upper, work   ← the overlay's writable layer
 *     root          ← overlay(lower=lN:…:l0, upper) — the new /
 *
 * Every target inside the new root is resolved with openat2(RESOLVE_IN_ROOT)
 * so image symlinks cannot point a mount outside it; /proc, /dev and /sys
 * targets must not be symlinks at all. Nothing here is visible on the host:
 * the whole tree dies with the mount namespace.
 *
 * Two ways to assemble a subtree (the host image's root, /dev): on Linux
 * 6.15 and later it is built on a detached mount and attached once whole;
 * older kernels refuse mounts on detached trees (and clones of them), so
 * there it is attached first and built in place. The mounts, their flags and
 * what the command can reach are the same: nothing of the sandbox runs
 * before pivot_root, and the mount namespace is private either way. The
 * kernel is probed once per boot (host/kernel.h). */
#include "config.h"

#include "host/rootless.h"
#include "host/kernel.h"
#include "net/netspec.h"
#include "sandbox/rootfs.h"
#include "sandbox/sandbox-internal.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sched.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>

/* ---- helpers ----------------------------------------------------------------------- */

/* Subtrees are built on detached mounts (Linux 6.15), or attached first. */
static bool in_place(void) { return !agsx_kernel_has(AGSX_KF_DETACHED_MOUNTS); }

static int fs_new(const char *type, const char *const *opts, unsigned attrs, agsx_error_t *err) {
  _cleanup_close_ int fs = fsopen(type, FSOPEN_CLOEXEC);
  if (fs < 0)
    return agsx_error_set(err, errno, "fsopen `%s`", type);
  for (size_t i = 0; opts && opts[i]; i += 2) {
    int r = opts[i + 1] ? fsconfig(fs, FSCONFIG_SET_STRING, opts[i], opts[i + 1], 0)
                        : fsconfig(fs, FSCONFIG_SET_FLAG, opts[i], NULL, 0);
    if (r < 0)
      return agsx_error_set(err, errno, "%s option `%s`", type, opts[i]);
  }
  if (fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) {
    char log[256];
    ssize_t n = read(fs, log, sizeof(log) - 1);
    log[n > 0 ? n : 0] = '\0';
    return agsx_error_set(err, errno, "create %s%s%s", type, n > 0 ? ": " : "", n > 0 ? log : "");
  }
  int m = fsmount(fs, FSMOUNT_CLOEXEC, attrs);
  if (m < 0)
    return agsx_error_set(err, errno, "mount %s", type);
  return m;
}

/* Opens directory PATH inside ROOTFD, creating missing components. With
 * STRICT, no symlink may appear on the way. */
static int dir_in_root(int rootfd, const char *path, bool create, bool strict, agsx_error_t *err) {
  uint64_t resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  if (strict)
    resolve |= RESOLVE_NO_SYMLINKS;
  int fd = agsx_openat2(rootfd, path, O_PATH | O_DIRECTORY, 0, resolve);
  if (fd >= 0 || !create || errno != ENOENT)
    return fd >= 0 ? fd : agsx_error_set(err, errno, "`%s`", path);
  _cleanup_free_ char *parent = xstrdup(path);
  char *slash = strrchr(parent, '/');
  while (slash && slash > parent && slash[1] == '\0')
    *slash = '\0', slash = strrchr(parent, '/');
  _cleanup_free_ char *base = xstrdup(slash ? slash + 1 : parent);
  if (slash == parent)
    parent[1] = '\0';
  else if (slash)
    *slash = '\0';
  _cleanup_close_ int pfd =
      slash ? dir_in_root(rootfd, parent, true, strict, err) : fcntl(rootfd, F_DUPFD_CLOEXEC, 3);
  if (pfd < 0)
    return -1;
  if (mkdirat(pfd, base, 0755) < 0 && errno != EEXIST)
    return agsx_error_set(err, errno, "mkdir `%s`", path);
  fd = agsx_openat2(pfd, base, O_PATH | O_DIRECTORY, 0, resolve);
  if (fd < 0)
    return agsx_error_set(err, errno, "`%s`", path);
  return fd;
}

/* Attaches the detached mount MFD at PATH inside the root. */
static int attach(int rootfd, const char *path, int mfd, bool strict, agsx_error_t *err) {
  _cleanup_close_ int dir = dir_in_root(rootfd, path, true, strict, err);
  if (dir < 0)
    return agsx_error_wrap(err, "mount point");
  if (move_mount(mfd, "", dir, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
    return agsx_error_set(err, errno, "mount on `%s`", path);
  return 0;
}

static int bind_clone(int dirfd, const char *path, unsigned attrs, bool recursive,
                      agsx_error_t *err) {
  unsigned flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | (recursive ? AT_RECURSIVE : 0);
  if (*path == '\0')
    flags |= AT_EMPTY_PATH;
  _cleanup_close_ int fd = open_tree(dirfd, path, flags);
  if (fd < 0)
    return agsx_error_set(err, errno, "bind `%s`", path);
  if (attrs) {
    struct mount_attr a = {.attr_set = attrs};
    if (mount_setattr(fd, "", AT_EMPTY_PATH | (recursive ? AT_RECURSIVE : 0), &a, sizeof(a)) < 0)
      return agsx_error_set(err, errno, "bind `%s`: set attributes", path);
  }
  return steal_fd(&fd);
}

static int write_in_root(int rootfd, const char *path, const char *data, mode_t mode,
                         agsx_error_t *err) {
  _cleanup_close_ int fd =
      agsx_openat2(rootfd, path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, mode,
                   RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV);
  if (fd < 0)
    return agsx_error_set(err, errno, "write `%s`", path);
  if (agsx_write_all(fd, data, strlen(data)) < 0)
    return agsx_error_set(err, errno, "write `%s`", path);
  return 0;
}

/* ---- the writable tmpfs and the overlay ------------------------------------------------- */

static int stage_tmpfs(struct agsx_child_ctx *c, agsx_error_t *err) {
  char size[32];
  snprintf(size, sizeof(size), "%llu", (unsigned long long)c->cfg->disk);
  const char *opts[] = {"size", size, "mode", "0755", NULL};
  _cleanup_close_ int t = fs_new("tmpfs", opts, MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID, err);
  if (t < 0)
    return -1;
  if (move_mount(t, "", c->stagefd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
    return agsx_error_set(err, errno, "mount the sandbox tmpfs");
  return steal_fd(&t);
}

static int overlay_root(struct agsx_child_ctx *c, int t, agsx_error_t *err) {
  const struct agsx_sandbox_config *cfg = c->cfg;
  if (mkdirat(t, "upper", 0755) < 0 || mkdirat(t, "work", 0700) < 0 || mkdirat(t, "root", 0755))
    return agsx_error_set(err, errno, "mkdir in the sandbox tmpfs");
  /* Layers go to short relative names so that 500 of them fit in one
   * lowerdir option; the overlay resolves them from the cwd. */
  size_t cap = cfg->n_layers * 8 + 8, len = 0;
  _cleanup_free_ char *lower = xzalloc(cap);
  for (size_t i = 0; i < cfg->n_layers; i++) {
    char name[32];
    snprintf(name, sizeof(name), "l%zu", i);
    if (mkdirat(t, name, 0755) < 0 ||
        move_mount(c->fds[i], "", t, name, MOVE_MOUNT_F_EMPTY_PATH) < 0)
      return agsx_error_set(err, errno, "attach layer %zu", i);
  }
  for (size_t i = cfg->n_layers; i-- > 0;)
    len += (size_t)snprintf(lower + len, cap - len, "%sl%zu", len ? ":" : "", i);
  if (fchdir(t) < 0)
    return agsx_error_set(err, errno, "chdir to the sandbox tmpfs");
  /* An image without layers still gets an (empty) root. */
  if (cfg->n_layers == 0) {
    if (mkdirat(t, "empty", 0755) < 0)
      return agsx_error_set(err, errno, "mkdir");
    snprintf(lower, cap, "empty");
  }
  const char *opts[] = {"lowerdir", lower,       "upperdir", "upper", "workdir",
                        "work",     "userxattr", NULL,       NULL};
  unsigned attrs = MOUNT_ATTR_NODEV;
  _cleanup_close_ int ovl = fs_new("overlay", opts, attrs, err);
  if (ovl < 0)
    return agsx_error_wrap(err, "root filesystem");
  if (move_mount(ovl, "", t, "root", MOVE_MOUNT_F_EMPTY_PATH) < 0)
    return agsx_error_set(err, errno, "attach the root filesystem");
  if (cfg->keep_upper) {
    c->upperfd = openat(t, "upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (c->upperfd < 0)
      return agsx_error_set(err, errno, "open the upper directory");
  }
  return steal_fd(&ovl);
}

/* ---- the built-in host image -------------------------------------------------------- */

/* The host's programs and libraries, read-only; /etc is generated; /tmp and
 * /root are fresh. No /home, /var, /run, no shadow, no ssh keys. */
static const char *const host_dirs[] = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"};
static const char *const host_etc[] = {
    "alternatives",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "mime.types",
    "fonts",
    "os-release",
    "debian_version",
    "python3",
    "python3.11",
    "R", /* R's Renviron and ldpaths (r contexts of agsx code) */
    "xdg",
    "chromium",
    "chromium.d",
    "nsswitch.conf",
    "protocols",
    "services",
    "gai.conf",
    "timezone",
    "login.defs",
    "profile",
    "bash.bashrc",
    "inputrc",
};

static int host_link_or_bind(int root, int hostfd, const char *name, bool in_etc,
                             agsx_error_t *err) {
  struct stat st;
  if (fstatat(hostfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return 0; /* the host has no such entry */
  _cleanup_free_ char *dst = xasprintf("%s%s", in_etc ? "etc/" : "", name);
  if (S_ISLNK(st.st_mode)) {
    char target[4096];
    ssize_t n = readlinkat(hostfd, name, target, sizeof(target) - 1);
    if (n < 0)
      return agsx_error_set(err, errno, "readlink `%s`", name);
    target[n] = '\0';
    if (symlinkat(target, root, dst) < 0 && errno != EEXIST)
      return agsx_error_set(err, errno, "symlink `%s`", dst);
    return 0;
  }
  if (S_ISDIR(st.st_mode)) {
    if (mkdirat(root, dst, 0755) < 0 && errno != EEXIST)
      return agsx_error_set(err, errno, "mkdir `%s`", dst);
  } else {
    _cleanup_close_ int f = openat(root, dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (f < 0)
      return agsx_error_set(err, errno, "create `%s`", dst);
  }
  _cleanup_close_ int m =
      bind_clone(hostfd, name, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID, true, err);
  if (m < 0)
    return -1;
  if (move_mount(m, "", root, dst, MOVE_MOUNT_F_EMPTY_PATH) < 0)
    return agsx_error_set(err, errno, "mount `%s`", dst);
  return 0;
}

static int host_etc_files(int root, agsx_error_t *err) {
  /* agsx (1000) is the non-root user of `agsx browser`; its home is /tmp,
   * the only writable place besides /root. */
  static const char passwd[] = "root:x:0:0:root:/root:/bin/sh\n"
                               "agsx:x:1000:1000:agsx:/tmp:/bin/sh\n"
                               "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
  static const char group[] = "root:x:0:\ntty:x:5:\nagsx:x:1000:\nnogroup:x:65534:\n";
  if (write_in_root(root, "etc/passwd", passwd, 0644, err) < 0 ||
      write_in_root(root, "etc/group", group, 0644, err) < 0)
    return -1;
  return 0;
}

/* upper/DIR alone, or overlaid on the DIR of each layer (l0..lN in T). */
static int host_writable(struct agsx_child_ctx *c, int t, const char *dir, agsx_error_t *err) {
  _cleanup_free_ char *upper = xasprintf("upper/%s", dir), *work = xasprintf("work/%s", dir);
  size_t n = c->cfg->n_layers;
  if (n == 0)
    return bind_clone(t, upper, 0, false, err);
  if (mkdirat(t, work, 0700) < 0)
    return agsx_error_set(err, errno, "mkdir in the sandbox tmpfs");
  size_t cap = n * (strlen(dir) + 12) + 8, len = 0;
  _cleanup_free_ char *lower = xzalloc(cap);
  for (size_t i = n; i-- > 0;) {
    _cleanup_free_ char *l = xasprintf("l%zu/%s", i, dir);
    struct stat st;
    if (fstatat(t, l, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
      continue; /* a layer without it adds nothing there */
    len += (size_t)snprintf(lower + len, cap - len, "%s%s", len ? ":" : "", l);
  }
  if (len == 0)
    return bind_clone(t, upper, 0, false, err);
  if (fchdir(t) < 0)
    return agsx_error_set(err, errno, "chdir to the sandbox tmpfs");
  const char *opts[] = {"lowerdir", lower,       "upperdir", upper, "workdir",
                        work,       "userxattr", NULL,       NULL};
  int m = fs_new("overlay", opts, MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID, err);
  return m < 0 ? agsx_error_wrap(err, "/%s", dir) : m;
}

/* The layers of a fork or a rollback of a host-image sandbox, in T. */
static int host_layers(struct agsx_child_ctx *c, int t, agsx_error_t *err) {
  for (size_t i = 0; i < c->cfg->n_layers; i++) {
    char name[32];
    snprintf(name, sizeof(name), "l%zu", i);
    if (mkdirat(t, name, 0755) < 0 ||
        move_mount(c->fds[i], "", t, name, MOVE_MOUNT_F_EMPTY_PATH) < 0)
      return agsx_error_set(err, errno, "attach layer %zu", i);
  }
  return 0;
}

static int attach_root(int t, int root, agsx_error_t *err) {
  if (mkdirat(t, "root", 0755) < 0 || move_mount(root, "", t, "root", MOVE_MOUNT_F_EMPTY_PATH) < 0)
    return agsx_error_set(err, errno, "attach the root filesystem");
  return 0;
}

static int host_root(struct agsx_child_ctx *c, int t, agsx_error_t *err) {
  const char *opts[] = {"size", "4m", "mode", "0755", NULL};
  _cleanup_close_ int root = fs_new("tmpfs", opts, MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID, err);
  if (root < 0 || (in_place() && attach_root(t, root, err) < 0))
    return -1;
  _cleanup_close_ int hostroot = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  _cleanup_close_ int hostetc = open("/etc", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (hostroot < 0 || hostetc < 0)
    return agsx_error_set(err, errno, "open host directories");
  static const char *const dirs[] = {"etc", "proc", "dev", "sys", "root", "tmp", "run", "var"};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(dirs); i++)
    if (mkdirat(root, dirs[i], 0755) < 0)
      return agsx_error_set(err, errno, "mkdir `%s`", dirs[i]);
  if (symlinkat("../tmp", root, "var/tmp") < 0)
    return agsx_error_set(err, errno, "symlink var/tmp");
  if (host_layers(c, t, err) < 0)
    return -1;
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(host_dirs); i++)
    if (host_link_or_bind(root, hostroot, host_dirs[i], false, err) < 0)
      return -1;
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(host_etc); i++)
    if (host_link_or_bind(root, hostetc, host_etc[i], true, err) < 0)
      return -1;
  if (host_etc_files(root, err) < 0)
    return -1;
  /* /tmp and /root come from the --disk tmpfs: writable, fresh, capped.
   * Their writable layers are upper/tmp and upper/root, so that a capture
   * (sandbox/snapshot.h) copies upper as for an image; a fork's or a
   * rollback's layers hold tmp/ and root/ and go under them. */
  if (mkdirat(t, "upper", 0755) < 0 || mkdirat(t, "work", 0700) < 0 ||
      mkdirat(t, "upper/tmp", 01777) < 0 || fchmodat(t, "upper/tmp", 01777, 0) < 0 ||
      mkdirat(t, "upper/root", 0700) < 0)
    return agsx_error_set(err, errno, "mkdir in the sandbox tmpfs");
  _cleanup_close_ int tmp = host_writable(c, t, "tmp", err);
  _cleanup_close_ int home = tmp >= 0 ? host_writable(c, t, "root", err) : -1;
  if (home < 0 || move_mount(tmp, "", root, "tmp", MOVE_MOUNT_F_EMPTY_PATH) < 0 ||
      move_mount(home, "", root, "root", MOVE_MOUNT_F_EMPTY_PATH) < 0)
    return agsx_error_set(err, errno, "mount /tmp and /root");
  if (!in_place() && attach_root(t, root, err) < 0)
    return -1;
  return steal_fd(&root);
}

/* ---- /etc files every sandbox gets ------------------------------------------------------ */

static int etc_files(struct agsx_child_ctx *c, int root, agsx_error_t *err) {
  const char *h = c->cfg->hostname;
  char addr[16] = "127.0.1.1";
  if (c->cfg->address)
    agsx_ipv4_format(c->cfg->address, addr);
  _cleanup_free_ char *hosts = xasprintf("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost "
                                         "ip6-loopback\n%s\t%s\n",
                                         addr, h);
  _cleanup_free_ char *hostname = xasprintf("%s\n", h);
  const char *resolv = c->cfg->address ? "# agsx: the sandbox's name server, relayed by agsx\n"
                                         "nameserver 127.0.0.11\noptions ndots:0\n"
                                       : "# agsx: network `internal`, no name servers\n";
  _cleanup_close_ int etc = dir_in_root(root, "/etc", true, false, err);
  if (etc < 0)
    return agsx_error_wrap(err, "/etc");
  if (write_in_root(root, "/etc/hosts", hosts, 0644, err) < 0 ||
      write_in_root(root, "/etc/hostname", hostname, 0644, err) < 0 ||
      write_in_root(root, "/etc/resolv.conf", resolv, 0644, err) < 0)
    return -1;
  return 0;
}

/* ---- /proc, /dev, /sys --------------------------------------------------------------- */

/* Docker's masked and read-only paths. */
static const char *const masked[] = {
    "/proc/acpi",           "/proc/asound",      "/proc/interrupts",
    "/proc/kcore",          "/proc/keys",        "/proc/latency_stats",
    "/proc/timer_list",     "/proc/timer_stats", "/proc/sched_debug",
    "/proc/scsi",           "/sys/firmware",     "/sys/devices/virtual/powercap",
    "/sys/kernel/security", "/sys/kernel/debug",
};
/* /proc/sysrq-trigger is read-only, as Docker has it, not masked: a write
 * then fails (EROFS) instead of going to a /dev/null that stands in for it. */
static const char *const readonly[] = {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
                                       "/proc/sysrq-trigger"};

/* Masks PATH with a clone of DEVNULL (a file) or of EMPTYDIR (a directory);
 * the first directory with EMPTYDIR itself (*ATTACHED false, then set): see
 * rootfs.h. */
static int mask_at(int root, const char *path, int devnull, int emptydir, bool *attached,
                   agsx_error_t *err) {
  _cleanup_close_ int fd =
      agsx_openat2(root, path, O_PATH | O_NOFOLLOW, 0, RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS);
  if (fd < 0)
    return 0; /* nothing to mask */
  struct stat st;
  if (fstat(fd, &st) < 0)
    return agsx_error_set(err, errno, "mask `%s`", path);
  if (S_ISDIR(st.st_mode) && !*attached) {
    if (move_mount(emptydir, "", fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
      return agsx_error_set(err, errno, "mask `%s`", path);
    *attached = true;
    return 0;
  }
  _cleanup_close_ int m =
      bind_clone(S_ISDIR(st.st_mode) ? emptydir : devnull, "", MOUNT_ATTR_RDONLY, false, err);
  if (m < 0)
    return -1;
  if (move_mount(m, "", fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
    return agsx_error_set(err, errno, "mask `%s`", path);
  return 0;
}

static int readonly_path(int root, const char *path, agsx_error_t *err) {
  _cleanup_close_ int fd =
      agsx_openat2(root, path, O_PATH | O_NOFOLLOW, 0, RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS);
  if (fd < 0)
    return 0;
  _cleanup_close_ int m = bind_clone(
      fd, "", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, true,
      err);
  if (m < 0)
    return -1;
  if (move_mount(m, "", fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
    return agsx_error_set(err, errno, "read-only `%s`", path);
  return 0;
}

/* A directory of the sandbox tmpfs T (created), cloned as a detached bind
 * mount with ATTRS (besides T's nodev, nosuid). Cheaper than a tmpfs of its
 * own: no superblock (its shrinker and LRU lists, their global locks) to
 * make at the start and to tear down at the end. Nothing above it is
 * reachable through it: `..` at its root goes to its mount point. */
static int tmpfs_dir(int t, const char *name, mode_t mode, unsigned attrs, agsx_error_t *err) {
  if (mkdirat(t, name, mode) < 0 || fchmodat(t, name, mode, 0) < 0)
    return agsx_error_set(err, errno, "mkdir `%s` in the sandbox tmpfs", name);
  return bind_clone(t, name, attrs, false, err);
}

static int mount_proc_sys(struct agsx_child_ctx *c, int t, int root, int devnull,
                          agsx_error_t *err) {
  _cleanup_close_ int proc =
      fs_new("proc", NULL, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, err);
  if (proc < 0 || attach(root, "/proc", proc, true, err) < 0)
    return -1;
  /* The parent made this sysfs, read-only, in the sandbox's own network
   * namespace: no host interfaces, no host cgroup trees under it. */
  int sys = c->fds[c->cfg->n_layers + c->cfg->n_binds];
  if (attach(root, "/sys", sys, true, err) < 0)
    return -1;
  /* Masked directories show an empty read-only directory of the sandbox
   * tmpfs (nothing is ever written there). The first gets the clone
   * itself, the others clones of it: closing a mount that was never
   * attached dissolves it, which waits for an RCU grace period (2-6 ms on
   * a busy machine). */
  _cleanup_close_ int empty = tmpfs_dir(t, "mask", 0555, MOUNT_ATTR_RDONLY, err);
  if (empty < 0)
    return -1;
  bool attached = false;
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(masked); i++)
    if (mask_at(root, masked[i], devnull, empty, &attached, err) < 0)
      return -1;
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(readonly); i++)
    if (readonly_path(root, readonly[i], err) < 0)
      return -1;
  return 0;
}

static const char *const devices[] = {"null", "zero", "full", "random", "urandom", "tty"};

/* /dev: a directory of the sandbox tmpfs (its few entries count against
 * --disk), nosuid, noexec and nodev (its device nodes are bind mounts of
 * the host's, with their own flags); /dev/shm keeps a tmpfs of its own. */
static int mount_dev(int t, int root, agsx_error_t *err) {
  _cleanup_close_ int dev = tmpfs_dir(t, "dev", 0755, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, err);
  if (dev < 0 || (in_place() && attach(root, "/dev", dev, true, err) < 0))
    return -1;
  /* Device nodes cannot be made in a user namespace: bind the host's. */
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(devices); i++) {
    _cleanup_free_ char *host = xasprintf("/dev/%s", devices[i]);
    _cleanup_close_ int f = openat(dev, devices[i], O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
    _cleanup_close_ int m =
        f >= 0 ? bind_clone(AT_FDCWD, host, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false, err) : -1;
    if (m < 0 || move_mount(m, "", dev, devices[i], MOVE_MOUNT_F_EMPTY_PATH) < 0)
      return agsx_error_set(err, errno, "/dev/%s", devices[i]);
  }
  static const char *const links[][2] = {
      {"/proc/self/fd", "fd"},       {"/proc/self/fd/0", "stdin"}, {"/proc/self/fd/1", "stdout"},
      {"/proc/self/fd/2", "stderr"}, {"pts/ptmx", "ptmx"},         {"/proc/kcore", "core"}};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(links) - 1; i++)
    if (symlinkat(links[i][0], dev, links[i][1]) < 0)
      return agsx_error_set(err, errno, "/dev/%s", links[i][1]);
  if (mkdirat(dev, "pts", 0755) < 0 || mkdirat(dev, "shm", 01777) < 0 ||
      mkdirat(dev, "mqueue", 0755) < 0 || fchmodat(dev, "shm", 01777, 0) < 0)
    return agsx_error_set(err, errno, "/dev directories");
  const char *popts[] = {"newinstance", NULL, "ptmxmode", "0666", "mode", "0620", "gid", "5", NULL};
  /* A one-id sandbox (host/rootless.h) has no group tty: its ptys are
   * root's group's. */
  if (agsx_rootless() && agsx_rootless_ids() <= 5)
    popts[6] = NULL;
  _cleanup_close_ int pts = fs_new("devpts", popts, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, err);
  const char *sopts[] = {"size", "65536k", "mode", "1777", NULL};
  _cleanup_close_ int shm =
      pts >= 0
          ? fs_new("tmpfs", sopts, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, err)
          : -1;
  _cleanup_close_ int mq =
      shm >= 0
          ? fs_new("mqueue", NULL, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, err)
          : -1;
  if (mq < 0)
    return -1;
  if (move_mount(pts, "", dev, "pts", MOVE_MOUNT_F_EMPTY_PATH) < 0 ||
      move_mount(shm, "", dev, "shm", MOVE_MOUNT_F_EMPTY_PATH) < 0 ||
      move_mount(mq, "", dev, "mqueue", MOVE_MOUNT_F_EMPTY_PATH) < 0)
    return agsx_error_set(err, errno, "/dev mounts");
  return in_place() ? 0 : attach(root, "/dev", dev, true, err);
}

/* ---- volumes ----------------------------------------------------------------------------- */

static bool under(const char *path, const char *dir) {
  size_t n = strlen(dir);
  return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

static int mount_binds(struct agsx_child_ctx *c, int root, agsx_error_t *err) {
  for (size_t i = 0; i < c->cfg->n_binds; i++) {
    const char *dst = c->cfg->binds[i].dst;
    if (under(dst, "/proc") || under(dst, "/dev") || under(dst, "/sys") || strcmp(dst, "/") == 0)
      return agsx_error_set(err, 0, "volume target `%s` is reserved", dst);
    int fd = c->fds[c->cfg->n_layers + i];
    struct stat st;
    if (fstat(fd, &st) < 0)
      return agsx_error_set(err, errno, "volume `%s`", dst);
    if (!S_ISDIR(st.st_mode)) {
      /* A file volume: its mount point is a file in the parent directory. */
      _cleanup_free_ char *parent = xstrdup(dst);
      char *slash = strrchr(parent, '/');
      *slash = '\0';
      _cleanup_close_ int p = dir_in_root(root, *parent ? parent : "/", true, false, err);
      if (p < 0)
        return agsx_error_wrap(err, "volume `%s`", dst);
      _cleanup_close_ int f =
          openat(p, slash + 1, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
      if (f < 0 || move_mount(fd, "", p, slash + 1, MOVE_MOUNT_F_EMPTY_PATH) < 0)
        return agsx_error_set(err, errno, "volume `%s`", dst);
      continue;
    }
    if (attach(root, dst, fd, false, err) < 0)
      return agsx_error_wrap(err, "volume `%s`", dst);
  }
  return 0;
}

/* ---- pivot_root ---------------------------------------------------------------------------- */

static int pivot(int root, agsx_error_t *err) {
  /* pivot_root(".", ".") stacks the old root on the new one; detaching it
   * leaves only the sandbox's tree in this mount namespace. */
  if (fchdir(root) < 0)
    return agsx_error_set(err, errno, "chdir to the new root");
  if (syscall(SYS_pivot_root, ".", ".") < 0)
    return agsx_error_set(err, errno, "pivot_root");
  if (umount2(".", MNT_DETACH) < 0)
    return agsx_error_set(err, errno, "detach the old root");
  /* The new root's own fd: nothing is looked up by path. */
  if (fchdir(root) < 0)
    return agsx_error_set(err, errno, "chdir to the new root");
  return 0;
}

int agsx_child_rootfs(struct agsx_child_ctx *c, agsx_error_t *err) {
  /* Nothing we mount may propagate back to the host. */
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
    return agsx_error_set(err, errno, "make mounts private");
  _cleanup_close_ int t = stage_tmpfs(c, err);
  if (t < 0)
    return -1;
  /* For the supervisor: commit, snapshot and fork read the upper directory
   * through it (sandbox/snapshot.h). The command never has it: CLOEXEC, and
   * closed once sent with READY. */
  if ((c->tmpfsfd = fcntl(t, F_DUPFD_CLOEXEC, 3)) < 0)
    return agsx_error_set(err, errno, "keep the sandbox tmpfs");
  _cleanup_close_ int root = c->cfg->host_image ? host_root(c, t, err) : overlay_root(c, t, err);
  if (root < 0)
    return -1;
  _cleanup_close_ int devnull = open("/dev/null", O_PATH | O_CLOEXEC);
  if (devnull < 0)
    return agsx_error_set(err, errno, "open /dev/null");
  if (etc_files(c, root, err) < 0 || mount_binds(c, root, err) < 0 ||
      mount_proc_sys(c, t, root, devnull, err) < 0 || mount_dev(t, root, err) < 0)
    return -1;
  /* --read-only, once the files agsx provides are written. The host
   * image's root holds only mount points and generated files: always. */
  if (c->cfg->host_image || c->cfg->read_only) {
    struct mount_attr a = {.attr_set = MOUNT_ATTR_RDONLY};
    if (mount_setattr(root, "", AT_EMPTY_PATH, &a, sizeof(a)) < 0)
      return agsx_error_set(err, errno, "read-only root");
  }
  return pivot(root, err);
}

/* ---- the steps other launchers share (rootfs.h) ------------------------------------------- */

int agsx_rootfs_fs_new(const char *type, const char *const *opts, unsigned attrs,
                       agsx_error_t *err) {
  return fs_new(type, opts, attrs, err);
}

int agsx_rootfs_dir_in_root(int rootfd, const char *path, bool create, bool strict,
                            agsx_error_t *err) {
  return dir_in_root(rootfd, path, create, strict, err);
}

int agsx_rootfs_attach(int rootfd, const char *path, int mfd, bool strict, agsx_error_t *err) {
  return attach(rootfd, path, mfd, strict, err);
}

int agsx_rootfs_bind_clone(int dirfd, const char *path, unsigned attrs, bool recursive,
                           agsx_error_t *err) {
  return bind_clone(dirfd, path, attrs, recursive, err);
}

int agsx_rootfs_mask(int root, const char *path, int devnull, int emptydir, bool *attached,
                     agsx_error_t *err) {
  return mask_at(root, path, devnull, emptydir, attached, err);
}

int agsx_rootfs_readonly(int root, const char *path, agsx_error_t *err) {
  return readonly_path(root, path, err);
}

const char *const *const agsx_rootfs_masked_paths = masked;
const size_t agsx_rootfs_n_masked_paths = AGSX_ARRAY_SIZE(masked);
const char *const *const agsx_rootfs_readonly_paths = readonly;
const size_t agsx_rootfs_n_readonly_paths = AGSX_ARRAY_SIZE(readonly);

int agsx_rootfs_pivot(int root, agsx_error_t *err) { return pivot(root, err); }
