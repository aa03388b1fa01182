/* agsx — oci/launch: `create`, the parent's (P's) side: config.json read,
 * parsed and put under the policy, the container's directory, lock and
 * record, the uid range, the cgroup (or systemd scope), the start socket,
 * GO with the fds the init mounts (the rootfs and bind sources, idmapped),
 * the hooks, the console, the pid file and the hand-over; see oci.h for
 * the steps and their order. The namespaces and the clone are
 * launch-ns.c's, the engine's overlay launch-overlay.c's, the init
 * launch-init.c's. Invariant: nothing is made before the config passed
 * the policy; a failed create undoes what it made (create_abort), and the
 * record names each thing create makes as it makes it (the cgroup before),
 * so that delete --force finds what a killed create left. */
#include "config.h"

#include "oci/launch-internal.h"
#include "host/kernel.h"
#include "host/systemd.h"
#include "state/state.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

/* ---- helpers ------------------------------------------------------------------------------- */

int agsx_oci_launch_send_msg(int sock, int type, const int *fds, size_t n) {
  struct agsx_msg m = {.type = type};
  return agsx_msg_send(sock, &m, fds, n);
}

int agsx_oci_launch_wait_msg(int sock, int type, int *fd, agsx_error_t *err) {
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

/* ---- the parent --------------------------------------------------------------------------- */

int agsx_oci_launch_write_record(struct create *cr, agsx_error_t *err) {
  return agsx_oci_record_write(cr->dirfd, &cr->rec, err);
}

int agsx_oci_oom_score_adj(pid_t pid, const struct agsx_oci_process *p, agsx_error_t *err) {
  if (!p->has_oom_score_adj)
    return 0;
  char path[64], v[16];
  if (pid > 0)
    snprintf(path, sizeof(path), "/proc/%d/oom_score_adj", (int)pid);
  else
    snprintf(path, sizeof(path), "/proc/self/oom_score_adj");
  int n = snprintf(v, sizeof(v), "%d", p->oom_score_adj);
  _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, v, (size_t)n) != n)
    return agsx_error_set(err, errno, "process.oomScoreAdj");
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
  return agsx_oci_oom_score_adj(pid, p, err);
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
  if (agsx_oci_launch_write_record(cr, err) < 0)
    return -1;
  if (agsx_oci_launch_own_range(cr)) {
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
    if (cr->rec.cgroup_owned && agsx_oci_launch_write_record(cr, err) < 0)
      return -1;
  }
  if (agsx_oci_cgroup_create(cr->rec.cgroup, &s->resources, s->devices, s->n_devices, &cr->cg,
                             err) < 0)
    return -1;
  cr->rec.cgroup_owned = agsx_oci_cgroup_owned(cr->cg);
  return agsx_oci_launch_write_record(cr, err);
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
  return agsx_oci_launch_write_record(cr, err);
}

static bool wants_cgroup(const struct agsx_oci_spec *s) {
  for (size_t i = 0; i < s->n_mounts; i++)
    if (!agsx_oci_launch_is_bind(&s->mounts[i]) && strcmp(s->mounts[i].type, "cgroup") == 0)
      return true;
  return false;
}

static int go(struct create *cr, struct child *c, int sysfs, int startsock, agsx_error_t *err) {
  const struct agsx_oci_spec *s = cr->s;
  if (agsx_oci_launch_write_maps(cr->pid, cr, err) < 0 || agsx_oci_launch_ping_range(cr, err) < 0 ||
      set_rlimits(cr->pid, &s->process, err) < 0 || (cr->rec.unit && systemd_scope(cr, err) < 0) ||
      agsx_oci_cgroup_attach(cr->cg, cr->pid, err) < 0)
    return -1;
  cr->rec.pid = cr->pid;
  cr->rec.start_time = agsx_proc_start_time(cr->pid);
  if (cr->rec.slot >= 0 && agsx_userns_lease(&cr->ids, cr->pid, cr->rec.start_time, err) < 0)
    return -1;
  if (agsx_oci_launch_write_record(cr, err) < 0)
    return -1;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/ns/user", cr->pid);
  _cleanup_close_ int userns = open(path, O_RDONLY | O_CLOEXEC);
  if (userns < 0)
    return agsx_error_set(err, errno, "open `%s`", path);
  bool idmap = agsx_oci_launch_idmapped(cr);
  int fds[AGSX_MSG_MAX_FDS];
  size_t n = 0;
  int r = 0;
  fds[n++] = openat(cr->dirfd, "mnt", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  fds[n++] = fcntl(startsock, F_DUPFD_CLOEXEC, 3);
  if (fds[0] < 0 || fds[1] < 0)
    r = agsx_error_set(err, errno, "stage");
  else if (c->n_lower && (fds[n] = agsx_oci_launch_rebuild_overlay(cr, c, userns, err)) >= 0)
    n++;
  else if (c->n_lower)
    r = -1;
  else if ((fds[n] = rootfs_fd(cr, userns, idmap, err)) < 0)
    r = -1;
  else
    n++;
  for (size_t i = 0; r == 0 && i < s->n_mounts; i++) {
    if (!agsx_oci_launch_is_bind(&s->mounts[i]))
      continue;
    if ((fds[n] = bind_fd(&s->mounts[i], userns, idmap, err)) < 0)
      r = -1;
    else
      n++;
  }
  if (r == 0 && sysfs >= 0)
    fds[n++] = fcntl(sysfs, F_DUPFD_CLOEXEC, 3);
  /* v1's cgroup mount: the container's own cgroups, last (code: how many). */
  struct agsx_msg m = {.type = AGSX_MSG_GO};
  int ncg = 0;
  if (r == 0 && cr->cg && wants_cgroup(s) &&
      (ncg = agsx_oci_cgroup_leaf_binds(cr->cg, fds + n, AGSX_MSG_MAX_FDS - n, m.text,
                                        sizeof(m.text), err)) < 0)
    r = -1;
  else if (ncg > 0)
    n += (size_t)ncg;
  m.code = ncg > 0 ? ncg : 0;
  if (r == 0 && agsx_msg_send(cr->sync, &m, fds, n) < 0)
    r = agsx_error_set(err, errno, "send to the container's init");
  for (size_t i = 0; i < n; i++)
    if (fds[i] >= 0)
      close(fds[i]);
  return r;
}

static int finish(struct create *cr, agsx_error_t *err) {
  const struct agsx_oci_spec *s = cr->s;
  if (agsx_oci_launch_wait_msg(cr->sync, MSG_MOUNTED, NULL, err) < 0)
    return -1;
  _cleanup_free_ char *st = state_for_hooks(cr, "creating");
  if (agsx_oci_run_hooks(s, AGSX_OCI_HOOK_PRESTART, st, err) < 0 ||
      agsx_oci_run_hooks(s, AGSX_OCI_HOOK_CREATE_RUNTIME, st, err) < 0)
    return -1;
  if (agsx_oci_launch_send_msg(cr->sync, MSG_CONT, NULL, 0) < 0)
    return agsx_error_set(err, errno, "send to the container's init");
  _cleanup_close_ int master = -1;
  if (agsx_oci_launch_wait_msg(cr->sync, AGSX_MSG_READY, &master, err) < 0)
    return -1;
  if (s->process.terminal) {
    if (cr->o->console_socket == NULL)
      return agsx_error_set(err, 0, "process.terminal needs --console-socket");
    if (agsx_oci_send_console(cr->o->console_socket, master, err) < 0)
      return -1;
  }
  cr->rec.complete = true;
  if (agsx_oci_launch_write_record(cr, err) < 0)
    return -1;
  if (cr->o->pid_file && write_pid_file(cr->o->pid_file, cr->pid, err) < 0)
    return -1;
  if (agsx_oci_launch_send_msg(cr->sync, MSG_DONE, NULL, 0) < 0 ||
      agsx_oci_launch_wait_msg(cr->sync, MSG_ACK, NULL, err) < 0)
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

static void create_free(struct create *cr) {
  agsx_net_job_cancel(&cr->net);
  agsx_closep(&cr->sync);
  agsx_closep(&cr->pidfd);
  agsx_closep(&cr->lockfd);
  agsx_closep(&cr->dirfd);
  agsx_closep(&cr->rootfd);
  agsx_closep(&cr->pod_userns);
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
                      .pod_userns = -1,
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
  if ((cr.rootfd = agsx_oci_root_open(rootpath, true, err)) < 0 ||
      agsx_oci_launch_pod(&cr, cr.rootfd, err) < 0 ||
      agsx_oci_launch_engine_overlay(&cr, &c, err) < 0) {
    create_free(&cr);
    return -1;
  }
  const struct agsx_oci_ns *net = agsx_oci_spec_ns(s, CLONE_NEWNET);
  if ((net == NULL || net->path || agsx_net_prepare(&cr.net, NULL, err) == 0) &&
      prepare(&cr, err) == 0 && (startsock = make_start_socket(cr.dirfd, err)) >= 0 &&
      agsx_oci_launch_spawn(&cr, &c, &sysfs, err) == 0 && go(&cr, &c, sysfs, startsock, err) == 0 &&
      finish(&cr, err) == 0)
    r = 0;
  if (r < 0)
    create_abort(&cr);
  agsx_closep(&sysfs);
  agsx_closep(&startsock);
  create_free(&cr);
  return r;
}
