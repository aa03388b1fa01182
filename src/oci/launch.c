/* agsx — oci/launch: `create`, parent (P) and init (C) side. See oci.h for
 * the steps and their order. */
#include "config.h"

#include "net/net.h"
#include "oci/cgroup.h"
#include "host/kernel.h"
#include "host/systemd.h"
#include "oci/oci.h"
#include "sandbox/procexec.h"
#include "sandbox/rootfs.h"
#include "sandbox/sync.h"
#include "sandbox/userns.h"
#include "state/state.h"
#include "util/json.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/keyctl.h>
#include <linux/nsfs.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

/* Messages on the sync socket beyond sync.h's GO/READY/ERROR. */
enum { MSG_MOUNTED = 100, MSG_CONT, MSG_DONE, MSG_ACK };

/* Fds of GO: the stage dir, the start socket, the rootfs, then one per bind
 * mount (in mount order), then the sysfs if a sysfs mount is asked for. */
struct child {
  const struct agsx_oci_spec *s;
  const struct agsx_oci_create_opts *o;
  int sync;
  int fds[AGSX_MSG_MAX_FDS];
  size_t nfds;
  bool new_cgroupns, new_uts;
  const struct agsx_seccomp_bpf *base, *eng;
  char *stage; /* ROOT/<id>/mnt, opened by the init in its own mount namespace */
  /* The engine's overlay to rebuild from idmapped layers (P does it):
   * its lower layers, and the names of upper and work in their parent. */
  size_t n_lower;
  char upper[256], work[256];
};

/* The first fd of the bind mounts in GO (after stage, start socket, root). */
static size_t first_bind(const struct child *c) {
  (void)c;
  return 3;
}

#define RESOLVE_ROOT (RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)

/* ---- helpers ------------------------------------------------------------------------------- */

static int send_msg(int sock, int type, const int *fds, size_t n) {
  struct agsx_msg m = {.type = type};
  return agsx_msg_send(sock, &m, fds, n);
}

/* Waits for TYPE; an ERROR message from the other side is returned as the
 * error. */
static int wait_msg(int sock, int type, int *fd, agsx_error_t *err) {
  struct agsx_msg m;
  int f = -1;
  size_t nfds = 0;
  ssize_t n = agsx_msg_recv(sock, &m, &f, 1, &nfds);
  if (fd)
    *fd = nfds ? f : -1;
  else if (nfds)
    close(f);
  if (n == 0)
    return agsx_error_set(err, 0, "the container's init died during setup");
  if (n < 0)
    return agsx_error_set(err, (int)-n, "read from the container's init");
  if (m.type == AGSX_MSG_ERROR) {
    m.text[sizeof(m.text) - 1] = '\0';
    return agsx_error_set_quiet(err, m.err, "%s", m.text);
  }
  if (m.type != type)
    return agsx_error_set(err, 0, "unexpected message %d from the container's init", m.type);
  return 0;
}

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
  if (flags & MS_NOATIME)
    a |= MOUNT_ATTR_NOATIME;
  if (flags & MS_STRICTATIME)
    a |= MOUNT_ATTR_STRICTATIME;
  if (flags & MS_NODIRATIME)
    a |= MOUNT_ATTR_NODIRATIME;
  return a;
}

static bool is_bind(const struct agsx_oci_mount *m) { return m->bind; }

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
      return agsx_error_set(err, errno, "mount point `%s`", path);
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
    return agsx_error_set(err, errno, "mount point `%s`", dst);
  if (move_mount(mfd, "", p, slash + 1, MOVE_MOUNT_F_EMPTY_PATH) < 0)
    return agsx_error_set(err, errno, "mount on `%s`", dst);
  return 0;
}

static bool under(const char *path, const char *dir) {
  size_t n = strlen(dir);
  return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

static int mount_bind(int root, const struct agsx_oci_mount *m, int fd, agsx_error_t *err) {
  struct mount_attr a = {.attr_set = attrs_of(m->flags) | MOUNT_ATTR_NODEV,
                         .propagation = m->propagation & ~MS_REC};
  if (a.propagation == 0)
    a.propagation = MS_PRIVATE;
  if (mount_setattr(fd, "", AT_EMPTY_PATH | (m->recursive ? AT_RECURSIVE : 0), &a, sizeof(a)) < 0)
    return agsx_error_set(err, errno, "mount `%s`: set attributes", m->destination);
  struct stat st;
  if (fstat(fd, &st) < 0)
    return agsx_error_set(err, errno, "mount `%s`", m->destination);
  if (!S_ISDIR(st.st_mode))
    return attach_file(root, m->destination, fd, err);
  return oci_attach(root, m->destination, fd, false, err);
}

/* cgroup v1 hierarchies cannot be mounted from a user namespace, and
 * agsx exposes none of the host's tree: an empty read-only tmpfs there
 * (v2 hosts get the container's own cgroup2 where the kernel allows). */
static int mount_cgroup(int root, const struct agsx_oci_mount *m, bool v2ok, agsx_error_t *err) {
  unsigned attrs = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
  _cleanup_error_ agsx_error_t e = NULL;
  int fd = v2ok ? agsx_rootfs_fs_new("cgroup2", NULL, attrs, &e) : -1;
  if (fd < 0) {
    const char *opts[] = {"size", "0", "mode", "0555", NULL};
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
  if (is_bind(m))
    return mount_bind(root, m, bindfd, err);
  unsigned attrs = attrs_of(m->flags);
  const char *t = m->type;
  int fd = -1;
  bool strict = under(m->destination, "/proc") || under(m->destination, "/sys") ||
                under(m->destination, "/dev");
  if (strcmp(t, "proc") == 0) {
    fd = agsx_rootfs_fs_new("proc", NULL, attrs | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, err);
  } else if (strcmp(t, "sysfs") == 0) {
    /* P's sysfs of the container's network namespace, read-only always. */
    fd = sysfs >= 0 ? fcntl(sysfs, F_DUPFD_CLOEXEC, 3) : -1;
    if (fd < 0)
      return agsx_error_set(err, errno, "mount sysfs on `%s`", m->destination);
  } else if (strcmp(t, "tmpfs") == 0) {
    fd = fs_with_data("tmpfs", m->data, NULL, attrs, err);
  } else if (strcmp(t, "devpts") == 0) {
    static const char *const extra[] = {"newinstance", NULL, NULL};
    fd = fs_with_data("devpts", m->data, extra, attrs, err);
  } else if (strcmp(t, "mqueue") == 0) {
    fd = agsx_rootfs_fs_new("mqueue", NULL, attrs, err);
  } else if (strcmp(t, "cgroup") == 0 || strcmp(t, "cgroup2") == 0) {
    return mount_cgroup(root, m, c->new_cgroupns, err);
  } else {
    return agsx_error_set(err, 0, "mount type `%s` is not supported by agsx", t);
  }
  if (fd < 0)
    return agsx_error_wrap(err, "mount %s on `%s`", t, m->destination);
  int r = oci_attach(root, m->destination, fd, strict, err);
  close(fd);
  return r;
}

static int mount_all(struct child *c, int root, agsx_error_t *err) {
  const struct agsx_oci_spec *s = c->s;
  size_t next = first_bind(c);
  int sysfs = -1;
  for (size_t i = 0; i < s->n_mounts; i++)
    if (is_bind(&s->mounts[i]))
      next++;
  if (next < c->nfds)
    sysfs = c->fds[next];
  next = first_bind(c);
  for (size_t i = 0; i < s->n_mounts; i++) {
    const struct agsx_oci_mount *m = &s->mounts[i];
    int bindfd = is_bind(m) ? c->fds[next++] : -1;
    if (mount_one(c, root, m, bindfd, sysfs, err) < 0)
      return -1;
  }
  return 0;
}

/* The spec's default devices, and linux.devices: the host's nodes bound in
 * (no mknod in a user namespace), only where /dev is a tmpfs of ours. */
static int bind_device(int dev, const char *name, const char *host, char type, int64_t major,
                       int64_t minor, agsx_error_t *err) {
  struct stat st;
  if (stat(host, &st) < 0)
    return agsx_error_set(err, errno, "device `%s`", host);
  if (major >= 0 && ((type == 'c' && !S_ISCHR(st.st_mode)) || (int64_t)major(st.st_rdev) != major ||
                     (int64_t)minor(st.st_rdev) != minor))
    return agsx_error_set(err, 0,
                          "config: linux.devices: `%s` differs from the host's node (agsx binds "
                          "host devices, it cannot create them)",
                          host);
  _cleanup_close_ int f = openat(dev, name, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (f < 0)
    return agsx_error_set(err, errno, "/dev/%s", name);
  _cleanup_close_ int m =
      agsx_rootfs_bind_clone(AT_FDCWD, host, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false, err);
  if (m < 0 || move_mount(m, "", dev, name, MOVE_MOUNT_F_EMPTY_PATH) < 0)
    return agsx_error_set(err, errno, "/dev/%s", name);
  return 0;
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
    if (bind_device(dev, defaults[i], host, 'c', -1, -1, err) < 0)
      return -1;
  }
  for (size_t i = 0; i < c->s->n_devices; i++) {
    const struct agsx_oci_device *d = &c->s->devices[i];
    const char *name = d->path + 5;
    bool dflt = false;
    for (size_t k = 0; k < AGSX_ARRAY_SIZE(defaults); k++)
      dflt |= strcmp(defaults[k], name) == 0;
    if (dflt)
      continue;
    if (strchr(name, '/'))
      return agsx_error_set(err, 0, "config: linux.devices: `%s`: only /dev/NAME is supported",
                            d->path);
    if (bind_device(dev, name, d->path, d->type, d->major, d->minor, err) < 0)
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
    if (agsx_rootfs_mask(root, *p, devnull, empty, &attached, err) < 0)
      return -1;
  for (size_t i = 0; i < agsx_rootfs_n_readonly_paths; i++)
    if (agsx_rootfs_readonly(root, agsx_rootfs_readonly_paths[i], err) < 0)
      return -1;
  for (char **p = s->readonly; p && *p; p++)
    if (agsx_rootfs_readonly(root, *p, err) < 0)
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
  if (mount_all(c, root, err) < 0 || populate_dev(c, root, err) < 0 ||
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
  if (n <= 0 || m.type != AGSX_MSG_GO)
    _exit(1);
  int root = -1;
  /* The stage, by path: an fd of P's would name P's mount namespace. The
   * directory is host root's (0700): open it before becoming the user
   * namespace's root. */
  agsx_closep(&c->fds[0]);
  c->fds[0] = open(c->stage, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
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
  if (send_msg(c->sync, MSG_MOUNTED, NULL, 0) < 0 || wait_msg(c->sync, MSG_CONT, NULL, &err) < 0)
    _exit(1);
  for (size_t i = 2; i < c->nfds; i++)
    agsx_closep(&c->fds[i]);
  agsx_closep(&c->fds[0]);
  if (agsx_rootfs_pivot(root, &err) < 0)
    child_fail(c, &err);
  close(root);
}

static void child_names(struct child *c) {
  agsx_error_t err = NULL;
  const struct agsx_oci_spec *s = c->s;
  if (c->new_uts && s->hostname && sethostname(s->hostname, strlen(s->hostname)) < 0) {
    agsx_error_set(&err, errno, "sethostname");
    child_fail(c, &err);
  }
  if (c->new_uts && s->domainname && setdomainname(s->domainname, strlen(s->domainname)) < 0) {
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
  if (send_msg(c->sync, AGSX_MSG_READY, &master, master >= 0 ? 1 : 0) < 0)
    _exit(1);
  agsx_closep(&master);
  if (wait_msg(c->sync, MSG_DONE, NULL, &err) < 0)
    _exit(1);
  if (prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0) < 0 || send_msg(c->sync, MSG_ACK, NULL, 0) < 0)
    _exit(1);
  agsx_closep(&c->sync);
  return slave;
}

static _Noreturn void child_main(struct child *c) {
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

/* ---- the parent --------------------------------------------------------------------------- */

struct create {
  const struct agsx_oci_global *g;
  const struct agsx_oci_create_opts *o;
  struct agsx_oci_spec *s;
  int rootfd, dirfd, lockfd;
  struct agsx_oci_record rec;
  struct agsx_idrange ids;
  struct agsx_oci_cgroup *cg;
  bool scope_started; /* --systemd-cgroup: the scope is up (create_abort stops it) */
  pid_t pid;
  int pidfd, sync;
  bool dir_made;
  const char *config;
  size_t config_len;
  char **ovl_lower;
  char *ovl_upper, *ovl_work;
  struct agsx_netns_job net; /* a new network namespace, made meanwhile */
};

static int write_record(struct create *cr, agsx_error_t *err) {
  return agsx_oci_record_write(cr->dirfd, &cr->rec, err);
}

static int open_ns(const char *path, int type, agsx_error_t *err) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "namespace `%s`", path);
  int t = ioctl(fd, NS_GET_NSTYPE);
  if (t != type) {
    close(fd);
    return agsx_error_set(err, 0, "config: linux.namespaces: `%s` is not a namespace of its type",
                          path);
  }
  return fd;
}

/* Namespaces joined by path (pods share network, ipc, uts and pid this
 * way), entered by P around the clone: what P joins, the init is created
 * in. HOST holds P's own to return to. */
struct joined {
  int type;
  int host, target;
};

static void leave_joined(struct joined *j, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (j[i].host >= 0 && setns(j[i].host, j[i].type) < 0)
      agsx_warn("return to the host's namespace: %s", strerror(errno));
    agsx_closep(&j[i].host);
    agsx_closep(&j[i].target);
  }
}

static int enter_joined(const struct agsx_oci_spec *s, struct joined *j, size_t *n,
                        agsx_error_t *err) {
  static const struct {
    int type;
    const char *self;
  } kinds[] = {{CLONE_NEWNET, "net"},
               {CLONE_NEWIPC, "ipc"},
               {CLONE_NEWUTS, "uts"},
               {CLONE_NEWPID, "pid_for_children"},
               {CLONE_NEWCGROUP, "cgroup"}};
  *n = 0;
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(kinds); i++) {
    const struct agsx_oci_ns *ns = agsx_oci_spec_ns(s, kinds[i].type);
    if (ns == NULL || ns->path == NULL)
      continue;
    char self[64];
    snprintf(self, sizeof(self), "/proc/thread-self/ns/%s", kinds[i].self);
    struct joined *e = &j[(*n)++];
    e->type = kinds[i].type;
    e->host = open(self, O_RDONLY | O_CLOEXEC);
    e->target = open_ns(ns->path, kinds[i].type, err);
    if (e->host < 0 || e->target < 0)
      return e->host < 0 ? agsx_error_set(err, errno, "open `%s`", self) : -1;
    if (setns(e->target, kinds[i].type) < 0) {
      agsx_closep(&e->host);
      return agsx_error_set(err, errno, "join namespace `%s`", ns->path);
    }
  }
  return 0;
}

/* net.* sysctls, written by P in the container's network namespace (one
 * agsx made is owned by the host user namespace: the container's root
 * could not write them itself). */
static int net_sysctls(const struct agsx_oci_spec *s, agsx_error_t *err) {
  for (char **kv = s->sysctl; kv && *kv; kv++) {
    if (!agsx_str_has_prefix(*kv, "net."))
      continue;
    _cleanup_free_ char *path = xasprintf("/proc/sys/%s", *kv);
    char *eq = strchr(path, '=');
    *eq = '\0';
    for (char *p = path + 10; *p; p++)
      if (*p == '.')
        *p = '/';
    _cleanup_close_ int fd = agsx_openat2(AT_FDCWD, path, O_WRONLY | O_TRUNC, 0,
                                          RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
    if (fd < 0 || agsx_write_all(fd, eq + 1, strlen(eq + 1)) < 0)
      return agsx_error_set(err, errno, "sysctl `%s`", *kv);
  }
  return 0;
}

/* linux.namespaces[user].path: the container joins it (pods), with its
 * mappings and no idmap: the rootfs's owners are the engine's business, as
 * with mappings it sends. */
static bool joins_user(const struct agsx_oci_spec *s) {
  const struct agsx_oci_ns *u = agsx_oci_spec_ns(s, CLONE_NEWUSER);
  return u && u->path;
}

/* Neither agsx's range nor the engine's mappings: agsx idmaps and leases. */
static bool own_range(const struct agsx_oci_spec *s) {
  return s->n_uid_maps == 0 && !joins_user(s);
}

static int write_maps(pid_t pid, const struct agsx_oci_spec *s, const struct agsx_idrange *ids,
                      agsx_error_t *err) {
  if (joins_user(s))
    return 0;
  if (s->n_uid_maps == 0)
    return agsx_userns_write_maps(pid, ids->base, err);
  static const char *const files[] = {"gid_map", "uid_map"};
  for (int f = 0; f < 2; f++) {
    const struct agsx_oci_idmap *m = f ? s->uid_maps : s->gid_maps;
    size_t n = f ? s->n_uid_maps : s->n_gid_maps;
    char buf[64 * AGSX_OCI_MAX_MAPS], path[64];
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
      len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%u %u %u\n", m[i].container, m[i].host,
                              m[i].size);
    snprintf(path, sizeof(path), "/proc/%d/%s", pid, files[f]);
    _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, buf, len) != (ssize_t)len)
      return agsx_error_set(err, errno, "write `%s`", path);
  }
  return 0;
}

static int set_rlimits(pid_t pid, const struct agsx_oci_process *p, agsx_error_t *err) {
  for (size_t i = 0; i < p->n_rlimits; i++) {
    struct rlimit rl = {.rlim_cur = p->rlimits[i].soft, .rlim_max = p->rlimits[i].hard}, cur;
    if (prlimit(pid, p->rlimits[i].resource, &rl, NULL) == 0)
      continue;
    /* Above our own hard limit without CAP_SYS_RESOURCE (Podman asks
     * RLIMIT_NOFILE 1048576 everywhere): the container gets our hard
     * limit, lower than asked, never higher. */
    if (errno != EPERM || prlimit(0, p->rlimits[i].resource, NULL, &cur) < 0 ||
        rl.rlim_max <= cur.rlim_max)
      return agsx_error_set(err, errno, "process.rlimits");
    agsx_warn("process.rlimits: %d lowered to the runtime's hard limit %llu",
              p->rlimits[i].resource, (unsigned long long)cur.rlim_max);
    rl.rlim_max = cur.rlim_max;
    if (rl.rlim_cur > rl.rlim_max)
      rl.rlim_cur = rl.rlim_max;
    if (prlimit(pid, p->rlimits[i].resource, &rl, NULL) < 0)
      return agsx_error_set(err, errno, "process.rlimits");
  }
  if (p->has_oom_score_adj) {
    char path[64], v[16];
    snprintf(path, sizeof(path), "/proc/%d/oom_score_adj", pid);
    int n = snprintf(v, sizeof(v), "%d", p->oom_score_adj);
    _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, v, (size_t)n) != n)
      return agsx_error_set(err, errno, "process.oomScoreAdj");
  }
  return 0;
}

/* The bundle's rootfs, idmapped through the container's user namespace
 * when agsx made the mapping (the engine then thinks of ids as host ids).
 * An overlayfs mount cannot be idmapped (EINVAL): say what to configure. */
static int rootfs_fd(const struct create *cr, int userns, bool idmap, agsx_error_t *err) {
  _cleanup_close_ int fd =
      open_tree(AT_FDCWD, cr->rec.rootfs, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
  if (fd < 0)
    return agsx_error_set(err, errno, "root.path `%s`", cr->rec.rootfs);
  struct mount_attr a = {.attr_set = MOUNT_ATTR_NODEV, .propagation = MS_PRIVATE};
  if (idmap) {
    a.attr_set |= MOUNT_ATTR_IDMAP;
    a.userns_fd = (uint64_t)userns;
  }
  if (mount_setattr(fd, "", AT_EMPTY_PATH, &a, sizeof(a)) < 0) {
    if (idmap && (errno == EINVAL || errno == EOPNOTSUPP))
      return agsx_error_set_quiet(
          err, errno,
          "root.path `%s`: cannot idmap it for agsx's user namespace (its filesystem does not "
          "support idmapped mounts, e.g. an overlay mount); give the container a user namespace "
          "(podman --userns=auto, ctr --uidmap) or an idmappable rootfs",
          cr->rec.rootfs);
    return agsx_error_set(err, errno, "root.path `%s`", cr->rec.rootfs);
  }
  return steal_fd(&fd);
}

static char *unescape_mountinfo(const char *s);

/* The engine's overlay mounted on PATH (Podman's and containerd's
 * drivers): its lowerdir, upperdir and workdir from mountinfo. 0 with
 * *RET_N 0 when PATH is no overlay mount. */
static int overlay_of(const char *path, char ***ret_lower, size_t *ret_n, char **ret_upper,
                      char **ret_work, agsx_error_t *err) {
  *ret_lower = NULL;
  *ret_n = 0;
  *ret_upper = *ret_work = NULL;
  _cleanup_fclose_ FILE *f = fopen("/proc/self/mountinfo", "re");
  if (f == NULL)
    return agsx_error_set(err, errno, "open `/proc/self/mountinfo`");
  _cleanup_free_ char *line = NULL, *found = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, f) > 0) {
    char *tok[64], *save = NULL;
    int n = 0, sep = -1;
    _cleanup_free_ char *copy = xstrdup(line);
    for (char *t = strtok_r(copy, " \n", &save); t && n < 64; t = strtok_r(NULL, " \n", &save)) {
      if (sep < 0 && n >= 6 && strcmp(t, "-") == 0)
        sep = n;
      tok[n++] = t;
    }
    if (sep < 0 || sep + 3 >= n)
      continue;
    _cleanup_free_ char *mnt = unescape_mountinfo(tok[4]);
    if (strcmp(mnt, path) != 0)
      continue;
    free(found);
    found = strcmp(tok[sep + 1], "overlay") == 0 ? xstrdup(tok[sep + 3]) : NULL;
  }
  if (found == NULL)
    return 0;
  for (char *save = NULL, *o = strtok_r(found, ",", &save); o; o = strtok_r(NULL, ",", &save)) {
    _cleanup_free_ char *v = unescape_mountinfo(o);
    if (agsx_str_has_prefix(v, "lowerdir=")) {
      for (char *s2 = NULL, *l = strtok_r(v + 9, ":", &s2); l; l = strtok_r(NULL, ":", &s2))
        if (l[0])
          agsx_strv_push(ret_lower, l);
    } else if (agsx_str_has_prefix(v, "upperdir=")) {
      *ret_upper = xstrdup(v + 9);
    } else if (agsx_str_has_prefix(v, "workdir=")) {
      *ret_work = xstrdup(v + 8);
    }
  }
  *ret_n = agsx_strv_len(*ret_lower);
  if (*ret_n == 0 || *ret_upper == NULL || *ret_work == NULL)
    return agsx_error_set(err, 0, "root.path `%s`: an overlay without upper and lower layers",
                          path);
  return 0;
}

static int bind_fd(const struct agsx_oci_mount *m, int userns, bool idmap, agsx_error_t *err) {
  _cleanup_close_ int fd = open_tree(
      AT_FDCWD, m->source, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | (m->recursive ? AT_RECURSIVE : 0));
  if (fd < 0)
    return agsx_error_set(err, errno, "mount `%s`: source `%s`", m->destination, m->source);
  if (idmap) {
    /* Files the engine made for the container (hosts, resolv.conf) are
     * host root's: idmapped they are the container root's. A filesystem
     * that cannot (devtmpfs, proc) keeps its ids: nobody, never more. */
    struct mount_attr a = {.attr_set = MOUNT_ATTR_IDMAP, .userns_fd = (uint64_t)userns};
    if (mount_setattr(fd, "", AT_EMPTY_PATH | (m->recursive ? AT_RECURSIVE : 0), &a, sizeof(a)) < 0)
      agsx_debug("mount `%s`: not idmapped: %s", m->destination, strerror(errno));
  }
  return steal_fd(&fd);
}

static char *unescape_mountinfo(const char *s) {
  char *out = xmalloc(strlen(s) + 1), *o = out;
  for (; *s; s++) {
    if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' && s[3] >= '0' &&
        s[3] <= '7') {
      *o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
      s += 3;
    } else {
      *o++ = *s;
    }
  }
  *o = '\0';
  return out;
}

static int make_start_socket(int dirfd, agsx_error_t *err) {
  _cleanup_close_ int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0)
    return agsx_error_set(err, errno, "socket");
  /* bind() takes a path of at most 107 bytes: bind relative to the
   * container's directory. */
  _cleanup_close_ int cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof(a.sun_path), "start.sock");
  if (cwd < 0 || fchdir(dirfd) < 0)
    return agsx_error_set(err, errno, "chdir");
  int r = bind(s, (struct sockaddr *)&a, sizeof(a));
  int saved = errno;
  if (fchdir(cwd) < 0)
    return agsx_error_set(err, errno, "chdir back");
  if (r < 0 || listen(s, 1) < 0)
    return agsx_error_set(err, r < 0 ? saved : errno, "start socket");
  return steal_fd(&s);
}

int agsx_oci_send_console(const char *path, int master, agsx_error_t *err) {
  _cleanup_close_ int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof(a.sun_path))
    return agsx_error_set(err, ENAMETOOLONG, "console socket `%s`", path);
  memcpy(a.sun_path, path, strlen(path));
  if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) < 0)
    return agsx_error_set(err, errno, "console socket `%s`", path);
  /* One sendmsg: a name and exactly one fd (conmon's and go-runc's
   * receivers take nothing else). */
  char name[] = "/dev/ptmx";
  struct iovec iov = {.iov_base = name, .iov_len = sizeof(name)};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;
  memset(&u, 0, sizeof(u));
  struct msghdr mh = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
  struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &master, sizeof(int));
  ssize_t n;
  do
    n = sendmsg(s, &mh, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    return agsx_error_set(err, errno, "console socket `%s`: send the terminal", path);
  return 0;
}

void agsx_oci_remove_workdir(const char *path) {
  _cleanup_free_ char *parent = xstrdup(path);
  char *slash = strrchr(parent, '/');
  if (slash == NULL || strcmp(slash, "/agsx-work") != 0)
    return;
  *slash = '\0';
  _cleanup_close_ int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  _cleanup_error_ agsx_error_t e = NULL;
  if (pfd >= 0 && agsx_rm_rf_at(pfd, "agsx-work", &e) < 0)
    agsx_warn("remove `%s`: %s", path, e->msg);
}

/* The pid file as go-runc reads it: decimal, no newline, atomically. */
static int write_pid_file(const char *path, pid_t pid, agsx_error_t *err) {
  _cleanup_free_ char *dir = xstrdup(path);
  char *slash = strrchr(dir, '/');
  const char *base = slash ? slash + 1 : path;
  if (slash == dir)
    dir[1] = '\0';
  else if (slash)
    *slash = '\0';
  _cleanup_close_ int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return agsx_error_set(err, errno, "pid file `%s`", path);
  char v[16];
  int n = snprintf(v, sizeof(v), "%d", (int)pid);
  if (agsx_oci_write_file(dfd, base, v, (size_t)n, 0644, err) < 0)
    return agsx_error_wrap(err, "pid file");
  return 0;
}

static char *now_rfc3339nano(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char buf[64];
  size_t n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf + n, sizeof(buf) - n, ".%09ldZ", ts.tv_nsec);
  return xstrdup(buf);
}

static char *state_for_hooks(const struct create *cr, const char *status) {
  struct agsx_oci_record r = cr->rec;
  r.pid = cr->pid;
  _cleanup_free_ char *j = agsx_oci_state_json(&r, AGSX_OCI_RUNNING);
  /* The hooks see the status of their step. */
  char *p = strstr(j, "\"running\"");
  if (p == NULL)
    return steal_ptr(&j);
  *p = '\0';
  return xasprintf("%s\"%s\"%s", j, status, p + strlen("\"running\""));
}

static void create_abort(struct create *cr) {
  _cleanup_error_ agsx_error_t e = NULL;
  agsx_net_job_cancel(&cr->net);
  if (cr->pidfd >= 0) {
    syscall(SYS_pidfd_send_signal, cr->pidfd, SIGKILL, NULL, 0);
    waitpid(cr->pid, NULL, 0);
  }
  if (cr->cg && agsx_oci_cgroup_destroy(cr->cg, &e) < 0)
    agsx_warn("remove cgroup: %s", e->msg);
  agsx_error_free(&e);
  if (cr->scope_started && agsx_systemd_stop_unit(cr->rec.unit, false, &e) < 0)
    agsx_warn("%s", e->msg);
  agsx_userns_release(&cr->ids); /* its flock first: unlease takes it */
  if (cr->rec.slot >= 0 && cr->pid > 0)
    agsx_userns_unlease((unsigned)cr->rec.slot, cr->pid, cr->rec.start_time, NULL);
  if (cr->rec.workdir)
    agsx_oci_remove_workdir(cr->rec.workdir);
  if (cr->dir_made) {
    agsx_error_free(&e);
    if (agsx_rm_rf_at(cr->rootfd, cr->o->id, &e) < 0)
      agsx_warn("remove `%s`: %s", cr->o->id, e->msg);
  }
}

static int read_bundle_config(const char *bundle, char **ret_buf, size_t *ret_len,
                              agsx_error_t *err) {
  _cleanup_close_ int bfd = open(bundle, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (bfd < 0)
    return agsx_error_set(err, errno, "bundle `%s`", bundle);
  if (agsx_read_file_at(bfd, "config.json", AGSX_OCI_CONFIG_MAX, ret_buf, ret_len, err) < 0)
    return agsx_error_wrap(err, "bundle `%s`", bundle);
  return 0;
}

static int clone_init(struct create *cr, struct child *c, uint64_t flags, agsx_error_t *err) {
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
    return agsx_error_set(err, errno, "socketpair");
  struct clone_args args = {
      .flags = flags | CLONE_PIDFD,
      .pidfd = (uint64_t)(uintptr_t)&cr->pidfd,
      .exit_signal = SIGCHLD,
  };
  pid_t pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));
  if (pid == 0) {
    close(sp[0]);
    c->sync = sp[1];
    child_main(c);
  }
  int saved = errno;
  close(sp[1]);
  if (pid < 0) {
    close(sp[0]);
    return agsx_error_set(err, saved, "clone3");
  }
  cr->pid = pid;
  cr->sync = sp[0];
  return 0;
}

/* The cgroupsPath as a cgroupfs path. systemd's form (with
 * --systemd-cgroup, as the engines send it) is, where systemd manages the
 * cgroups, a scope started with the init (go(): cgroup-systemd.c), at
 * the path systemd gives it; elsewhere the same path made on cgroupfs. */
static int cgroup_path(struct create *cr, agsx_error_t *err) {
  const char *p = cr->s->cgroups_path;
  bool colon = p && strchr(p, ':');
  if (cr->g->systemd_cgroup || colon) {
    if (!cr->g->systemd_cgroup)
      return agsx_error_set(err, 0,
                            "config: linux.cgroupsPath: the systemd form `slice:prefix:name` "
                            "needs --systemd-cgroup");
    _cleanup_free_ char *dflt = NULL;
    bool scope = agsx_oci_systemd_manages();
    if (scope && (!p || !p[0])) /* as runc: system.slice:agsx-oci:<id> */
      p = dflt = xasprintf(":agsx-oci:%s", cr->o->id);
    if (scope && agsx_oci_cgroup_systemd_unit(p, &cr->rec.unit, &cr->rec.slice, err) < 0)
      return -1;
    if (p && p[0])
      return agsx_oci_cgroup_systemd_path(p, &cr->rec.cgroup, err);
  }
  cr->rec.cgroup = p && p[0] ? xstrdup(p) : xasprintf("agsx-oci/%s", cr->o->id);
  return 0;
}

/* Whether the user namespace H (the helper) is in maps host uid or gid 0,
 * read from the host's side (ids as the host sees them, however deep). */
static int check_joined_maps(const struct agsx_oci_spec *s, pid_t h, const char *path,
                             agsx_error_t *err) {
  static const char *const files[] = {"uid_map", "gid_map"};
  for (int f = 0; f < 2; f++) {
    const struct agsx_oci_idmap *want = f ? s->gid_maps : s->uid_maps;
    size_t nwant = f ? s->n_gid_maps : s->n_uid_maps, n_lines = 0, matched = 0;
    char p[64];
    snprintf(p, sizeof(p), "/proc/%d/%s", (int)h, files[f]);
    _cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
    char buf[4096];
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
    if (n < 0)
      return agsx_error_set(err, errno, "read the %s of `%s`", files[f], path);
    buf[n] = '\0';
    bool any = false;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
      unsigned long in, out, count;
      if (sscanf(line, "%lu %lu %lu", &in, &out, &count) != 3)
        continue;
      any = true;
      n_lines++;
      for (size_t i = 0; i < nwant; i++)
        matched += want[i].container == in && want[i].host == out && want[i].size == count;
      if (out == 0 && count > 0)
        return agsx_error_set(err, 0,
                              "config: linux.namespaces[user].path: `%s` maps host root (%s); "
                              "agsx never runs a container as host root",
                              path, files[f]);
    }
    if (!any)
      return agsx_error_set(err, 0, "config: linux.namespaces[user].path: `%s` has no %s yet", path,
                            files[f]);
    if (nwant && (matched != n_lines || nwant != n_lines))
      return agsx_error_set(err, 0, "config: linux.%s: not the mappings of the user namespace `%s`",
                            f ? "gidMappings" : "uidMappings", path);
  }
  return 0;
}

/* H: in the joined user namespace (full capabilities there, host root's
 * ids unmapped), once P has checked its mappings, clones the init with the
 * other new namespaces, owned by it, as P's child (CLONE_PARENT: the
 * engine's child in the end, as always), and hands P its pidfd. */
static _Noreturn void joined_helper(struct child *c, uint64_t flags, int userns, int hs, int sync) {
  char b = 0;
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (setns(userns, CLONE_NEWUSER) < 0) {
    struct agsx_msg m = {.type = AGSX_MSG_ERROR, .err = errno};
    snprintf(m.text, sizeof(m.text), "join the user namespace: %s", strerror(errno));
    agsx_msg_send(hs, &m, NULL, 0);
    _exit(1);
  }
  close(userns);
  struct agsx_msg m = {.type = AGSX_MSG_READY};
  if (agsx_msg_send(hs, &m, NULL, 0) < 0 || read(hs, &b, 1) != 1)
    _exit(1);
  int pidfd = -1;
  struct clone_args args = {
      .flags = flags | CLONE_PIDFD | CLONE_PARENT,
      .pidfd = (uint64_t)(uintptr_t)&pidfd,
      .exit_signal = 0, /* with CLONE_PARENT: H's own (SIGCHLD), to P */
  };
  pid_t pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));
  if (pid == 0) {
    close(hs);
    c->sync = sync;
    child_main(c);
  }
  struct agsx_msg r = {.type = pid < 0 ? AGSX_MSG_ERROR : AGSX_MSG_GO, .status = pid, .err = errno};
  if (pid < 0)
    snprintf(r.text, sizeof(r.text), "clone3: %s", strerror(errno));
  agsx_msg_send(hs, &r, &pidfd, pid < 0 ? 0 : 1);
  _exit(pid < 0);
}

static int clone_init_joined(struct create *cr, struct child *c, uint64_t flags,
                             agsx_error_t *err) {
  const char *path = agsx_oci_spec_ns(cr->s, CLONE_NEWUSER)->path;
  _cleanup_close_ int userns = open_ns(path, CLONE_NEWUSER, err);
  int sp[2], hs[2];
  if (userns < 0)
    return -1;
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
    return agsx_error_set(err, errno, "socketpair");
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, hs) < 0) {
    close(sp[0]);
    close(sp[1]);
    return agsx_error_set(err, errno, "socketpair");
  }
  pid_t h = fork();
  if (h == 0) {
    close(sp[0]);
    close(hs[0]);
    joined_helper(c, flags, userns, hs[1], sp[1]);
  }
  close(sp[1]);
  close(hs[1]);
  cr->sync = sp[0];
  _cleanup_close_ int hsock = hs[0];
  if (h < 0)
    return agsx_error_set(err, errno, "fork");
  struct agsx_msg m = {0};
  int fd = -1;
  size_t nfds = 0;
  int r = 0;
  ssize_t got = agsx_msg_recv(hsock, &m, &fd, 1, &nfds);
  m.text[sizeof(m.text) - 1] = '\0';
  if (got <= 0 || m.type != AGSX_MSG_READY)
    r = agsx_error_set(err, m.err, "%s",
                       m.type == AGSX_MSG_ERROR ? m.text : "join the user namespace");
  else if (check_joined_maps(cr->s, h, path, err) < 0)
    r = -1;
  else if (write(hsock, "g", 1) != 1 || agsx_msg_recv(hsock, &m, &fd, 1, &nfds) <= 0 ||
           m.type != AGSX_MSG_GO || nfds != 1 || m.status <= 0) {
    m.text[sizeof(m.text) - 1] = '\0';
    r = agsx_error_set(err, m.err, "%s", m.type == AGSX_MSG_ERROR ? m.text : "clone the init");
  } else {
    cr->pid = m.status;
    cr->pidfd = fd;
  }
  if (r < 0)
    kill(h, SIGKILL);
  while (waitpid(h, NULL, 0) < 0 && errno == EINTR) {
  }
  return r;
}

/* Everything up to the clone, in the order of oci.h. */
static int prepare(struct create *cr, agsx_error_t *err) {
  const struct agsx_oci_spec *s = cr->s;
  if (mkdirat(cr->rootfd, cr->o->id, 0700) < 0) {
    if (errno == EEXIST)
      return agsx_error_set_quiet(err, EEXIST, "container with given ID already exists");
    return agsx_error_set(err, errno, "create the container's directory");
  }
  cr->dir_made = true;
  cr->dirfd = agsx_oci_dir_open(cr->rootfd, cr->o->id, err);
  if (cr->dirfd < 0)
    return -1;
  cr->lockfd = agsx_lock_at(cr->dirfd, "lock", true, err);
  if (cr->lockfd < 0 || mkdirat(cr->dirfd, "mnt", 0700) < 0)
    return cr->lockfd < 0 ? -1 : agsx_error_set(err, errno, "mkdir mnt");
  /* The config as parsed: later edits of the bundle's must not matter. */
  if (agsx_oci_write_file(cr->dirfd, "config.json", cr->config, cr->config_len, 0600, err) < 0)
    return -1;
  if (cgroup_path(cr, err) < 0)
    return -1;
  if (!agsx_oci_cgroup_path_is_valid(cr->rec.cgroup))
    return agsx_error_set(err, 0, "config: linux.cgroupsPath: invalid path");
  if (write_record(cr, err) < 0)
    return -1;
  if (own_range(s)) {
    if (agsx_userns_reserve(-1, &cr->ids, err) < 0)
      return -1;
    cr->rec.slot = (int)cr->ids.slot;
  }
  /* A systemd scope comes with the init (go()); systemd removes it. */
  if (cr->rec.unit)
    return 0;
  /* Recorded as ours before it is made: a create killed right after the
   * mkdir leaves a cgroup that delete --force must find and remove. */
  {
    _cleanup_oci_cgroup_ struct agsx_oci_cgroup *probe = NULL;
    _cleanup_error_ agsx_error_t e = NULL;
    cr->rec.cgroup_owned = agsx_oci_cgroup_open(cr->rec.cgroup, false, &probe, &e) < 0;
    if (cr->rec.cgroup_owned && write_record(cr, err) < 0)
      return -1;
  }
  if (agsx_oci_cgroup_create(cr->rec.cgroup, &s->resources, s->devices, s->n_devices, &cr->cg,
                             err) < 0)
    return -1;
  cr->rec.cgroup_owned = agsx_oci_cgroup_owned(cr->cg);
  return write_record(cr, err);
}

static bool wants_sysfs(const struct agsx_oci_spec *s) {
  for (size_t i = 0; i < s->n_mounts; i++)
    if (!s->mounts[i].bind && strcmp(s->mounts[i].type, "sysfs") == 0)
      return true;
  return false;
}

/* The network namespace the helper made while P prepared (creating one
 * waits for the kernel's cleanup of dead ones: from 1 to 700 ms here under
 * load), entered; its sysfs if a sysfs mount is asked for. */
static int enter_new_net(struct create *cr, int *ret_hostns, int *ret_sysfs, agsx_error_t *err) {
  _cleanup_close_ int netns = -1, sysfs = -1;
  if (agsx_net_collect(&cr->net, &netns, &sysfs, err) < 0)
    return -1;
  _cleanup_close_ int host = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (host < 0)
    return agsx_error_set(err, errno, "open the host network namespace");
  if (setns(netns, CLONE_NEWNET) < 0)
    return agsx_error_set(err, errno, "enter the container's network namespace");
  *ret_hostns = steal_fd(&host);
  if (wants_sysfs(cr->s))
    *ret_sysfs = steal_fd(&sysfs);
  return 0;
}

/* Namespaces → clone → maps and limits, leaving P back in its own. */
static int spawn(struct create *cr, struct child *c, int *ret_sysfs, agsx_error_t *err) {
  const struct agsx_oci_spec *s = cr->s;
  struct joined j[8];
  size_t nj = 0;
  int hostnet = -1, r = -1;
  const struct agsx_oci_ns *net = agsx_oci_spec_ns(s, CLONE_NEWNET);
  uint64_t flags = joins_user(s) ? CLONE_NEWNS : CLONE_NEWUSER | CLONE_NEWNS;
  static const int maybe[] = {CLONE_NEWPID, CLONE_NEWIPC, CLONE_NEWUTS};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(maybe); i++) {
    const struct agsx_oci_ns *ns = agsx_oci_spec_ns(s, maybe[i]);
    if (ns && ns->path == NULL)
      flags |= (uint64_t)maybe[i];
  }
  const struct agsx_oci_ns *uts = agsx_oci_spec_ns(s, CLONE_NEWUTS);
  const struct agsx_oci_ns *cgns = agsx_oci_spec_ns(s, CLONE_NEWCGROUP);
  c->new_uts = uts && uts->path == NULL;
  c->new_cgroupns = cgns && cgns->path == NULL;
  if (enter_joined(s, j, &nj, err) < 0)
    goto out;
  if (net && net->path == NULL && enter_new_net(cr, &hostnet, ret_sysfs, err) < 0)
    goto out;
  if (net_sysctls(s, err) < 0)
    goto out;
  if (wants_sysfs(s) && *ret_sysfs < 0 && (*ret_sysfs = agsx_net_new_sysfs(err)) < 0)
    goto out;
  r = joins_user(s) ? clone_init_joined(cr, c, flags, err) : clone_init(cr, c, flags, err);
out:
  if (hostnet >= 0 && agsx_net_leave(hostnet) < 0 && r == 0)
    r = agsx_error_set(err, errno, "return to the host network namespace");
  leave_joined(j, nj);
  return r;
}

/* The user namespace the upper layer is idmapped with: the container's
 * range (on-disk 0..65535 seen as BASE..BASE+65535, so that what the
 * container writes lands with the owners the engine expects: root's file
 * owned by 0) and on-disk AGSX_OCI_UPPER_MOUNTER as host root, the
 * mounter whose credentials overlay creates its work files and whiteouts
 * with (an idmapped mount refuses a creator it cannot map: EOVERFLOW).
 * The mount is overlay's private clone, never the container's: nothing
 * but overlay sees host root there. No process stays in the namespace:
 * the child that holds it while its maps are written exits then. */
#define AGSX_OCI_UPPER_MOUNTER 4294967294u

static int upper_userns(uid_t base, agsx_error_t *err) {
  int pp[2];
  if (pipe2(pp, O_CLOEXEC) < 0)
    return agsx_error_set(err, errno, "pipe");
  pid_t pid = (pid_t)syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, NULL);
  if (pid == 0) {
    char b;
    close(pp[1]);
    while (read(pp[0], &b, 1) < 0 && errno == EINTR) {
    }
    _exit(0);
  }
  close(pp[0]);
  _cleanup_close_ int hold = pp[1];
  if (pid < 0)
    return agsx_error_set(err, errno, "a user namespace for the overlay's upper layer");
  char map[96], path[64];
  int n =
      snprintf(map, sizeof(map), "0 %u 65536\n%u 0 1\n", (unsigned)base, AGSX_OCI_UPPER_MOUNTER);
  int fd = -1;
  for (int i = 0; i < 2 && n > 0; i++) {
    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, i ? "gid_map" : "uid_map");
    _cleanup_close_ int mf = open(path, O_WRONLY | O_CLOEXEC);
    if (mf < 0 || write(mf, map, (size_t)n) != n)
      n = -1;
  }
  snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
  if (n > 0)
    fd = open(path, O_RDONLY | O_CLOEXEC);
  int saved = errno;
  agsx_closep(&hold);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
  if (fd < 0)
    return agsx_error_set(err, saved, "the id map of the overlay's upper layer");
  return fd;
}

/* The upper layer's directory (the engine's upper and agsx's work
 * directory beside it: overlay wants both on one mount) cloned, idmapped
 * with upper_userns, at STAGE/u. */
static int attach_upper(int st, const char *parent, uid_t base, agsx_error_t *err) {
  _cleanup_close_ int uns = upper_userns(base, err);
  if (uns < 0)
    return -1;
  _cleanup_close_ int fd = open_tree(AT_FDCWD, parent, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "overlay upper `%s`", parent);
  struct mount_attr a = {.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NODEV,
                         .userns_fd = (uint64_t)uns};
  if (mount_setattr(fd, "", AT_EMPTY_PATH, &a, sizeof(a)) < 0)
    return agsx_error_set_quiet(err, errno,
                                "overlay upper `%s`: cannot idmap it for agsx's user namespace "
                                "(%s); put the engine's storage on a filesystem with idmapped "
                                "mounts (ext4, xfs, btrfs), or give the container a user "
                                "namespace (podman --userns=auto, ctr --uidmap)",
                                parent, strerror(errno));
  if (mkdirat(st, "u", 0700) < 0 || move_mount(fd, "", st, "u", MOVE_MOUNT_F_EMPTY_PATH) < 0)
    return agsx_error_set(err, errno, "attach overlay upper `%s`", parent);
  return 0;
}

/* The engine's overlay again, from idmapped clones of its lower layers: an
 * overlay mount cannot be idmapped (EINVAL), its ext4/xfs/btrfs layers
 * can. P mounts it, as host root (the layers keep their trusted.overlay
 * xattrs' meaning), in a mount namespace of its own on the container's
 * stage, and hands the container a detached clone: the same lower, upper
 * and work directories, so the container writes where the engine expects.
 * index=off: the engine's own mount of the same upper stays (the kernel
 * then only warns). Returns the overlay's fd. */
/* The lower layers, idmapped clones at STAGE/l0..: their lowerdir= list. */
static char *attach_lowers(const struct create *cr, const struct child *c, int st, int userns,
                           agsx_error_t *err) {
  size_t cap = strlen(c->stage) * (c->n_lower + 1) + c->n_lower * 16 + 16, len = 0;
  _cleanup_free_ char *lower = xzalloc(cap);
  for (size_t i = 0; i < c->n_lower; i++) {
    const char *path = cr->ovl_lower[i];
    char name[32];
    snprintf(name, sizeof(name), "l%zu", i);
    _cleanup_close_ int fd = open_tree(AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (fd < 0)
      return agsx_error_set(err, errno, "overlay layer `%s`", path), NULL;
    struct mount_attr a = {.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NODEV | MOUNT_ATTR_RDONLY,
                           .userns_fd = (uint64_t)userns};
    if (mount_setattr(fd, "", AT_EMPTY_PATH, &a, sizeof(a)) < 0)
      return agsx_error_set_quiet(
                 err, errno,
                 "overlay layer `%s`: cannot idmap it for agsx's user namespace (%s); put the "
                 "engine's storage on a filesystem with idmapped mounts (ext4, xfs, btrfs), or "
                 "give the container a user namespace (podman --userns=auto, ctr --uidmap)",
                 path, strerror(errno)),
             NULL;
    if (mkdirat(st, name, 0700) < 0 || move_mount(fd, "", st, name, MOVE_MOUNT_F_EMPTY_PATH) < 0)
      return agsx_error_set(err, errno, "attach overlay layer `%s`", path), NULL;
    len += (size_t)snprintf(lower + len, cap - len, "%s%s/%s", len ? ":" : "", c->stage, name);
  }
  return steal_ptr(&lower);
}

/* A work directory of agsx's own beside the engine's (overlay wants it on
 * the upper's mount): the engine's is in use by its own mount, and a
 * volatile one (Podman's --rm) cannot be shared at all. Recorded (removed
 * at delete); its parent, the upper's too, in *RET_PARENT. */
static int make_workdir(struct create *cr, char **ret_parent, agsx_error_t *err) {
  _cleanup_free_ char *parent = xstrdup(cr->ovl_work);
  *strrchr(parent, '/') = '\0';
  _cleanup_close_ int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  _cleanup_error_ agsx_error_t e = NULL;
  if (pfd < 0)
    return agsx_error_set(err, errno, "overlay `%s`", parent);
  agsx_rm_rf_at(pfd, "agsx-work", &e);
  if (mkdirat(pfd, "agsx-work", 0700) < 0)
    return agsx_error_set(err, errno, "overlay work directory in `%s`", parent);
  free(cr->rec.workdir);
  cr->rec.workdir = xasprintf("%s/agsx-work", parent);
  if (write_record(cr, err) < 0)
    return -1;
  *ret_parent = steal_ptr(&parent);
  return 0;
}

static int rebuild_overlay(struct create *cr, const struct child *c, int userns,
                           agsx_error_t *err) {
  if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
    return agsx_error_set(err, errno, "a mount namespace for the overlay");
  const char *topts[] = {"size", "64k", "mode", "0700", NULL};
  _cleanup_close_ int t = agsx_rootfs_fs_new("tmpfs", topts, MOUNT_ATTR_NODEV, err);
  if (t < 0 || move_mount(t, "", AT_FDCWD, c->stage, MOVE_MOUNT_F_EMPTY_PATH) < 0)
    return err && *err ? -1 : agsx_error_set(err, errno, "mount the overlay stage");
  _cleanup_close_ int st = open(c->stage, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (st < 0)
    return agsx_error_set(err, errno, "open the overlay stage");
  _cleanup_free_ char *lower = attach_lowers(cr, c, st, userns, err), *parent = NULL;
  /* The upper layer idmapped too (attach_upper). */
  if (lower == NULL || make_workdir(cr, &parent, err) < 0 ||
      attach_upper(st, parent, cr->ids.base, err) < 0)
    return -1;
  /* mount(2), as the engines mount it: fsconfig's CMD_CREATE of the same
   * options fails here with ENODATA on 6.x kernels. */
  _cleanup_free_ char *opts =
      xasprintf("lowerdir=%s,upperdir=%s/u/%s,workdir=%s/u/agsx-work,index=off", lower, c->stage,
                c->upper, c->stage);
  _cleanup_free_ char *mnt = xasprintf("%s/root", c->stage);
  if (mkdirat(st, "root", 0700) < 0 || mount("overlay", mnt, "overlay", MS_NODEV, opts) < 0)
    return agsx_error_set(err, errno, "rebuild the engine's overlay");
  int ovl = open_tree(AT_FDCWD, mnt, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (ovl < 0)
    return agsx_error_set(err, errno, "rebuild the engine's overlay");
  return ovl;
}

/* --systemd-cgroup under systemd: the scope, with the init (stopped before
 * its start) as first process, then the resources on cgroupfs as well. */
static int systemd_scope(struct create *cr, agsx_error_t *err) {
  const struct agsx_oci_spec *s = cr->s;
  if (agsx_oci_cgroup_systemd_start(cr->rec.unit, cr->rec.slice, cr->o->id, cr->pid, &s->resources,
                                    err) < 0)
    return -1;
  cr->scope_started = true;
  if (agsx_oci_cgroup_create(cr->rec.cgroup, &s->resources, s->devices, s->n_devices, &cr->cg,
                             err) < 0)
    return -1;
  return write_record(cr, err);
}

static int go(struct create *cr, struct child *c, int sysfs, int startsock, agsx_error_t *err) {
  const struct agsx_oci_spec *s = cr->s;
  if (write_maps(cr->pid, s, &cr->ids, err) < 0 || set_rlimits(cr->pid, &s->process, err) < 0 ||
      (cr->rec.unit && systemd_scope(cr, err) < 0) ||
      agsx_oci_cgroup_attach(cr->cg, cr->pid, err) < 0)
    return -1;
  cr->rec.pid = cr->pid;
  cr->rec.start_time = agsx_proc_start_time(cr->pid);
  if (cr->rec.slot >= 0 && agsx_userns_lease(&cr->ids, cr->pid, cr->rec.start_time, err) < 0)
    return -1;
  if (write_record(cr, err) < 0)
    return -1;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/ns/user", cr->pid);
  _cleanup_close_ int userns = open(path, O_RDONLY | O_CLOEXEC);
  if (userns < 0)
    return agsx_error_set(err, errno, "open `%s`", path);
  bool idmap = own_range(s);
  int fds[AGSX_MSG_MAX_FDS];
  size_t n = 0;
  int r = 0;
  fds[n++] = openat(cr->dirfd, "mnt", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  fds[n++] = fcntl(startsock, F_DUPFD_CLOEXEC, 3);
  if (fds[0] < 0 || fds[1] < 0)
    r = agsx_error_set(err, errno, "stage");
  else if (c->n_lower && (fds[n] = rebuild_overlay(cr, c, userns, err)) >= 0)
    n++;
  else if (c->n_lower)
    r = -1;
  else if ((fds[n] = rootfs_fd(cr, userns, idmap, err)) < 0)
    r = -1;
  else
    n++;
  for (size_t i = 0; r == 0 && i < s->n_mounts; i++) {
    if (!is_bind(&s->mounts[i]))
      continue;
    if ((fds[n] = bind_fd(&s->mounts[i], userns, idmap, err)) < 0)
      r = -1;
    else
      n++;
  }
  if (r == 0 && sysfs >= 0)
    fds[n++] = fcntl(sysfs, F_DUPFD_CLOEXEC, 3);
  struct agsx_msg m = {.type = AGSX_MSG_GO};
  if (r == 0 && agsx_msg_send(cr->sync, &m, fds, n) < 0)
    r = agsx_error_set(err, errno, "send to the container's init");
  for (size_t i = 0; i < n; i++)
    if (fds[i] >= 0)
      close(fds[i]);
  return r;
}

static int finish(struct create *cr, agsx_error_t *err) {
  const struct agsx_oci_spec *s = cr->s;
  if (wait_msg(cr->sync, MSG_MOUNTED, NULL, err) < 0)
    return -1;
  _cleanup_free_ char *st = state_for_hooks(cr, "creating");
  if (agsx_oci_run_hooks(s, AGSX_OCI_HOOK_PRESTART, st, err) < 0 ||
      agsx_oci_run_hooks(s, AGSX_OCI_HOOK_CREATE_RUNTIME, st, err) < 0)
    return -1;
  if (send_msg(cr->sync, MSG_CONT, NULL, 0) < 0)
    return agsx_error_set(err, errno, "send to the container's init");
  _cleanup_close_ int master = -1;
  if (wait_msg(cr->sync, AGSX_MSG_READY, &master, err) < 0)
    return -1;
  if (s->process.terminal) {
    if (cr->o->console_socket == NULL)
      return agsx_error_set(err, 0, "process.terminal needs --console-socket");
    if (agsx_oci_send_console(cr->o->console_socket, master, err) < 0)
      return -1;
  }
  cr->rec.complete = true;
  if (write_record(cr, err) < 0)
    return -1;
  if (cr->o->pid_file && write_pid_file(cr->o->pid_file, cr->pid, err) < 0)
    return -1;
  if (send_msg(cr->sync, MSG_DONE, NULL, 0) < 0 || wait_msg(cr->sync, MSG_ACK, NULL, err) < 0)
    return agsx_error_wrap(err, "hand the init over");
  return 0;
}

/* The bundle's config.json read, parsed and put under the policy. */
static int load_config(const struct agsx_oci_create_opts *o, const char *bundle,
                       struct agsx_oci_spec **ret, char **ret_config, size_t *ret_len,
                       agsx_error_t *err) {
  struct agsx_oci_policy pol;
  if (read_bundle_config(bundle, ret_config, ret_len, err) < 0 ||
      agsx_oci_spec_parse(*ret_config, *ret_len, ret, err) < 0 ||
      agsx_oci_policy_load(&pol, err) < 0 || agsx_oci_policy_apply(&pol, *ret, err) < 0)
    return -1;
  if ((*ret)->process.terminal && o->console_socket == NULL)
    return agsx_error_set(err, 0, "process.terminal is set: --console-socket is required");
  return 0;
}

/* The record's fields known before anything is made. */
static void record_init(struct create *cr, const char *bundle) {
  const struct agsx_oci_spec *s = cr->s;
  cr->rec.slot = -1;
  cr->rec.id = xstrdup(cr->o->id);
  cr->rec.bundle = xstrdup(bundle);
  cr->rec.rootfs =
      s->root_path[0] == '/' ? xstrdup(s->root_path) : xasprintf("%s/%s", bundle, s->root_path);
  cr->rec.created = now_rfc3339nano();
  cr->rec.owner = xstrdup(geteuid() == 0 ? "root" : "");
  cr->rec.annotations = s->annotations ? xstrdup(s->annotations) : NULL;
}

/* With agsx's own range: whether the rootfs is the engine's overlay (its
 * layers then rebuilt idmapped), and that its upper and work directories
 * are siblings. */
static int engine_overlay(struct create *cr, struct child *c, agsx_error_t *err) {
  if (!own_range(cr->s))
    return 0;
  if (overlay_of(cr->rec.rootfs, &cr->ovl_lower, &c->n_lower, &cr->ovl_upper, &cr->ovl_work, err) <
      0)
    return -1;
  if (c->n_lower == 0)
    return 0;
  const char *us = strrchr(cr->ovl_upper, '/'), *ws = strrchr(cr->ovl_work, '/');
  size_t ul = (size_t)(us - cr->ovl_upper), wl = ws ? (size_t)(ws - cr->ovl_work) : 0;
  if (ws == NULL || ul != wl || strncmp(cr->ovl_upper, cr->ovl_work, ul) != 0 ||
      strlen(us + 1) >= sizeof(c->upper) || strlen(ws + 1) >= sizeof(c->work) ||
      c->n_lower + 8 > AGSX_MSG_MAX_FDS / 2)
    return agsx_error_set(err, 0,
                          "root.path `%s`: an overlay whose upper and work "
                          "directories are not siblings is not supported by agsx",
                          cr->rec.rootfs);
  snprintf(c->upper, sizeof(c->upper), "%s", us + 1);
  snprintf(c->work, sizeof(c->work), "%s", ws + 1);
  return 0;
}

static void create_free(struct create *cr) {
  agsx_net_job_cancel(&cr->net);
  agsx_closep(&cr->sync);
  agsx_closep(&cr->pidfd);
  agsx_closep(&cr->lockfd);
  agsx_closep(&cr->dirfd);
  agsx_closep(&cr->rootfd);
  agsx_userns_release(&cr->ids);
  agsx_oci_cgroup_free(cr->cg);
  agsx_oci_record_clear(&cr->rec);
  agsx_strv_free(cr->ovl_lower);
  free(cr->ovl_upper);
  free(cr->ovl_work);
}

int agsx_oci_create(const struct agsx_oci_global *g, const struct agsx_oci_create_opts *o,
                    agsx_error_t *err) {
  if (!agsx_oci_id_is_valid(o->id) || o->id[0] == '.')
    return agsx_error_set_quiet(err, EINVAL, "invalid container ID format");
  if (o->preserve_fds < 0 || o->preserve_fds > 14)
    return agsx_error_set(err, EINVAL, "--preserve-fds %d: at most 14", o->preserve_fds);
  _cleanup_free_ char *bundle = realpath(o->bundle ? o->bundle : ".", NULL);
  if (bundle == NULL)
    return agsx_error_set(err, errno, "bundle `%s`", o->bundle ? o->bundle : ".");
  _cleanup_oci_spec_ struct agsx_oci_spec *s = NULL;
  _cleanup_free_ char *config = NULL;
  size_t config_len = 0;
  if (load_config(o, bundle, &s, &config, &config_len, err) < 0)
    return -1;
  _cleanup_free_ char *rootpath = g->root ? xstrdup(g->root) : agsx_oci_default_root();
  _cleanup_seccomp_bpf_ struct agsx_seccomp_bpf base = {0}, eng = {0};
  if (agsx_oci_load_seccomp(rootpath, s, &base, &eng, err) < 0)
    return -1;
  struct create cr = {.g = g,
                      .o = o,
                      .s = s,
                      .rootfd = -1,
                      .dirfd = -1,
                      .lockfd = -1,
                      .pidfd = -1,
                      .sync = -1,
                      .ids = {.lockfd = -1},
                      .config = config,
                      .config_len = config_len,
                      .net = {-1, -1}};
  record_init(&cr, bundle);
  _cleanup_free_ char *absroot = NULL;
  if (agsx_mkdir_p(rootpath, 0700, err) < 0 || (absroot = realpath(rootpath, NULL)) == NULL) {
    create_free(&cr);
    return err && *err ? -1 : agsx_error_set(err, errno, "state root `%s`", rootpath);
  }
  _cleanup_free_ char *kcache = xasprintf("%s/.cache", absroot);
  if (agsx_kernel_ensure(kcache, err) < 0) {
    create_free(&cr);
    return -1;
  }
  _cleanup_free_ char *stage = xasprintf("%s/%s/mnt", absroot, o->id);
  struct child c = {.s = s,
                    .o = o,
                    .base = base.len ? &base : NULL,
                    .eng = eng.len ? &eng : NULL,
                    .stage = stage};
  int sysfs = -1, startsock = -1, r = -1;
  if (engine_overlay(&cr, &c, err) < 0) {
    create_free(&cr);
    return -1;
  }
  const struct agsx_oci_ns *net = agsx_oci_spec_ns(s, CLONE_NEWNET);
  if ((net == NULL || net->path || agsx_net_prepare(&cr.net, NULL, err) == 0) &&
      (cr.rootfd = agsx_oci_root_open(rootpath, true, err)) >= 0 && prepare(&cr, err) == 0 &&
      (startsock = make_start_socket(cr.dirfd, err)) >= 0 && spawn(&cr, &c, &sysfs, err) == 0 &&
      go(&cr, &c, sysfs, startsock, err) == 0 && finish(&cr, err) == 0)
    r = 0;
  if (r < 0)
    create_abort(&cr);
  agsx_closep(&sysfs);
  agsx_closep(&startsock);
  create_free(&cr);
  return r;
}
