/* agsx — sandbox launch, parent side. See sandbox.h for the sequence. */
#include "config.h"

#include "util/conf.h"

#include "host/kernel.h"
#include "host/rootless.h"
#include "net/net.h"
#include "state/state.h"
#include "sandbox/sandbox-internal.h"
#include "sandbox/freeze.h"
#include "sandbox/proc.h"
#include "sandbox/ranges.h"
#include "sandbox/snapshot.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

const char *agsx_stop_reason_name(enum agsx_stop_reason r) {
  static const char *const names[] = {"", "exit", "timeout", "killed", "oom", "error"};
  return r < AGSX_ARRAY_SIZE(names) ? names[r] : "";
}

void agsx_sandbox_new_id(char out[AGSX_ID_HEX + 1]) { agsx_random_hex(out, AGSX_ID_HEX / 2); }

static void phase(struct agsx_sandbox *sb, const char *name, int64_t *t0) {
  int64_t now = agsx_mono_ns();
  if (sb->timing.n < AGSX_MAX_PHASES) {
    sb->timing.name[sb->timing.n] = name;
    sb->timing.ns[sb->timing.n++] = now - *t0;
  }
  *t0 = now;
}

/* The init's own steps, on the same monotonic clock, from the GO sent at
 * *T: its wake-up ("go"), its steps, and READY's way back ("ready"), so
 * that every phase follows the one before and they add up. A step the
 * init did not take (an idle init execs nothing) is left out; one that
 * ended before *T (the init woke and went on before our clock read after
 * the send) counts 0. */
static void child_phases(struct agsx_sandbox *sb, int64_t *t) {
  static const char *const names[] = {"go", "userns+cgroupns", "rootfs", "env", "exec"};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(names); i++) {
    int64_t at = sb->child_ns[i];
    if (at == 0)
      continue;
    if (sb->timing.n < AGSX_MAX_PHASES) {
      sb->timing.name[sb->timing.n] = names[i];
      sb->timing.ns[sb->timing.n++] = at > *t ? at - *t : 0;
    }
    if (at > *t)
      *t = at;
  }
  phase(sb, "ready", t);
}

/* ---- parent-side steps ------------------------------------------------------------ */

/* Record directories are recycled: an ended sandbox's, emptied, waits as
 * STATE/.spare-K for the next sandbox. On ext4 (where /run lives on some
 * hosts) mkdir allocates a block and rmdir frees it, with a synchronous
 * discard on a filesystem mounted with `discard` (0.2-20 ms of waiting for
 * the disk here); a rename within STATE does neither (and, within one
 * directory, takes no filesystem-wide rename lock). A spare is always empty
 * when it is put there, so any sandbox may take any of them; rename is
 * atomic, so two sandboxes racing for one get it once. At most
 * SPARE_DIRS wait; beyond that the directory is removed. */
#define SPARE_DIRS 8

static void spare_name(char buf[16], unsigned k) { snprintf(buf, 16, ".spare-%u", k); }

static bool take_spare(int statefd, const char *id) {
  char spare[16];
  for (unsigned k = 0; k < SPARE_DIRS; k++) {
    spare_name(spare, k);
    if (renameat2(statefd, spare, statefd, id, RENAME_NOREPLACE) == 0) {
      /* A fresh mtime: gc leaves young directories without a record alone. */
      utimensat(statefd, id, NULL, AT_SYMLINK_NOFOLLOW);
      return true;
    }
    if (errno != ENOENT)
      return false;
  }
  return false;
}

static bool put_spare(int statefd, const char *id) {
  char spare[16];
  for (unsigned k = 0; k < SPARE_DIRS; k++) {
    spare_name(spare, k);
    if (renameat2(statefd, id, statefd, spare, RENAME_NOREPLACE) == 0)
      return true;
    if (errno != EEXIST)
      return false;
  }
  return false;
}

static int make_state_dir(struct agsx_sandbox *sb, const struct agsx_sandbox_config *cfg,
                          agsx_error_t *err) {
  sb->statefd = agsx_state_open(cfg->state_dir, true, err);
  if (sb->statefd < 0)
    return -1;
  if (!(!cfg->restart && take_spare(sb->statefd, sb->id)) &&
      mkdirat(sb->statefd, sb->id, 0700) < 0 && !(cfg->restart && errno == EEXIST))
    return agsx_error_set(err, errno, "create `%s/%s`", cfg->state_dir, sb->id);
  sb->dirfd = openat(sb->statefd, sb->id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (sb->dirfd < 0)
    return agsx_error_set(err, errno, "open `%s/%s`", cfg->state_dir, sb->id);
  /* The name is claimed once the record directory exists, so a racing
   * claim never takes it for a stale one. */
  if (cfg->name) {
    if (!cfg->restart && agsx_name_claim(sb->statefd, cfg->name, sb->id, err) < 0)
      return -1;
    sb->name = xstrdup(cfg->name);
  }
  return 0;
}

int agsx_sandbox_kernel_check(const char *state_dir, agsx_error_t *err) {
  _cleanup_free_ char *cache = xasprintf("%s/cache", state_dir);
  return agsx_kernel_ensure(cache, err);
}

static pid_t do_clone3(uint64_t flags, int cgroupfd, int *ret_pidfd) {
  struct clone_args args = {
      .flags = flags | CLONE_PIDFD,
      .pidfd = (uint64_t)(uintptr_t)ret_pidfd,
      .exit_signal = SIGCHLD,
  };
  if (cgroupfd >= 0) {
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = (uint64_t)cgroupfd;
  }
  return (pid_t)syscall(SYS_clone3, &args, sizeof(args));
}

/* The command's process tree lives in these namespaces, created together
 * with C. The network namespace is not among them: P made it beforehand. */
#define SANDBOX_NS_FLAGS (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS)

static int spawn_init(struct agsx_sandbox *sb, const struct agsx_sandbox_config *cfg, int netns,
                      int sysfs, struct agsx_child_ctx *child, agsx_error_t *err) {
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
    return agsx_error_set(err, errno, "socketpair");
  int hostns = -1;
  bool rootless = agsx_rootless();
  if (rootless) {
    /* The namespace stays where it is; the clone's helper enters it. */
    sb->sysfs = fcntl(sysfs, F_DUPFD_CLOEXEC, 3);
    sb->netns = fcntl(netns, F_DUPFD_CLOEXEC, 3);
  } else if (netns >= 0) {
    /* Made ahead by a helper: join it for the clone only. */
    hostns = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (hostns < 0 || setns(netns, CLONE_NEWNET) < 0) {
      agsx_closep(&hostns);
      close(sp[0]);
      close(sp[1]);
      return agsx_error_set(err, errno, "enter the sandbox's network namespace");
    }
    sb->sysfs = fcntl(sysfs, F_DUPFD_CLOEXEC, 3);
    sb->netns = fcntl(netns, F_DUPFD_CLOEXEC, 3);
  } else {
    if (agsx_net_enter_new(&hostns, err) < 0) {
      close(sp[0]);
      close(sp[1]);
      return -1;
    }
    /* A sysfs of the sandbox's own network namespace (its /sys/class/net
     * shows only lo), mounted while we are in it; the init attaches it. */
    sb->sysfs = agsx_net_new_sysfs(err);
    sb->netns = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  }
  if (sb->sysfs < 0 || sb->netns < 0) {
    agsx_net_leave(hostns);
    close(sp[0]);
    close(sp[1]);
    return agsx_error_set(err, errno, "sandbox sysfs");
  }
  int cgfd = sb->cg ? agsx_cgroup_fd(sb->cg) : -1;
  pid_t pid = rootless
                  ? agsx_clone_in_ns(sb->netns, CLONE_NEWNET, SANDBOX_NS_FLAGS, cgfd, &sb->pidfd)
                  : do_clone3(SANDBOX_NS_FLAGS, cgfd, &sb->pidfd);
  if (pid == 0) {
    close(sp[0]);
    child->sync = sp[1];
    agsx_child_main(child);
  }
  int saved = errno;
  int back = rootless ? 0 : agsx_net_leave(hostns);
  close(sp[1]);
  if (pid < 0) {
    close(sp[0]);
    return agsx_error_set(err, saved, "clone3");
  }
  sb->init_pid = pid;
  sb->sync = sp[0];
  if (back < 0)
    return agsx_error_set(err, errno, "return to the host network namespace");
  return 0;
}

/* Idmapped, read-only clones of the layer directories: on-disk ids 0–65535
 * appear as the sandbox's own, nothing is copied or chowned per sandbox. */
static int idmapped_layer(const char *path, int usernsfd, bool idmap, agsx_error_t *err) {
  _cleanup_close_ int fd = open_tree(AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "open_tree `%s`", path);
  struct mount_attr attr = {
      .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID,
  };
  if (idmap) {
    attr.attr_set |= MOUNT_ATTR_IDMAP;
    attr.userns_fd = (uint64_t)usernsfd;
  }
  if (mount_setattr(fd, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0) {
    if (errno == EINVAL || errno == EOPNOTSUPP)
      return agsx_error_set(err, errno,
                            "idmapped mount of `%s` (agsx needs idmapped mounts: Linux >= 5.19 "
                            "on a filesystem that supports them)",
                            path);
    return agsx_error_set(err, errno, "mount_setattr `%s`", path);
  }
  return steal_fd(&fd);
}

/* A host directory is mounted as it is (its files are "nobody"'s inside);
 * a named volume's data idmapped as the layers are, so that each sandbox
 * sees the files its own ids wrote (sandbox/volume.h). */
static int bind_source(const struct agsx_bind *b, int userns, agsx_error_t *err) {
  _cleanup_close_ int fd =
      open_tree(AT_FDCWD, b->src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
  if (fd < 0)
    return agsx_error_set(err, errno, "volume `%s`", b->src);
  struct mount_attr attr = {.attr_set = MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID};
  if (b->ro)
    attr.attr_set |= MOUNT_ATTR_RDONLY;
  /* An ordinary user's volumes, as its layers, hold the sandboxes' own ids
   * (and a host filesystem cannot be idmapped by that user). */
  if (b->idmap && !agsx_rootless()) {
    attr.attr_set |= MOUNT_ATTR_IDMAP;
    attr.userns_fd = (uint64_t)userns;
  }
  if (mount_setattr(fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) < 0)
    return agsx_error_set(err, errno, "volume `%s`", b->src);
  return steal_fd(&fd);
}

static int send_go(struct agsx_sandbox *sb, const struct agsx_sandbox_config *cfg,
                   agsx_error_t *err) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/ns/user", sb->init_pid);
  _cleanup_close_ int userns = open(path, O_RDONLY | O_CLOEXEC);
  if (userns < 0)
    return agsx_error_set(err, errno, "open `%s`", path);
  /* (The init is our unreaped child: its pid names it until we wait.) */
  snprintf(path, sizeof(path), "/proc/%d/ns/mnt", sb->init_pid);
  if ((sb->mntns = open(path, O_RDONLY | O_CLOEXEC)) < 0)
    return agsx_error_set(err, errno, "open `%s`", path);
  /* Layers, volumes and the sysfs travel in one message (see
   * AGSX_MSG_MAX_FDS); more would overflow it. */
  if (cfg->n_layers + cfg->n_binds + 1 > AGSX_MSG_MAX_FDS)
    return agsx_error_set(err, E2BIG,
                          "%zu layers and %zu volumes: a sandbox takes at most %d together",
                          cfg->n_layers, cfg->n_binds, AGSX_MSG_MAX_FDS - 1);
  int fds[AGSX_MSG_MAX_FDS];
  size_t n = 0;
  int r = 0;
  for (size_t i = 0; r == 0 && i < cfg->n_layers; i++)
    if ((fds[n] = idmapped_layer(sb->layers[i], userns, !agsx_rootless(), err)) < 0)
      r = -1;
    else
      n++;
  for (size_t i = 0; r == 0 && i < cfg->n_binds; i++)
    if ((fds[n] = bind_source(&cfg->binds[i], userns, err)) < 0)
      r = -1;
    else
      n++;
  if (r == 0)
    fds[n++] = fcntl(sb->sysfs, F_DUPFD_CLOEXEC, 3);
  struct agsx_msg m = {.type = AGSX_MSG_GO};
  if (r == 0 && (r = agsx_msg_send(sb->sync, &m, fds, n)) < 0)
    agsx_error_set(err, -r, "send to the sandbox init");
  for (size_t i = 0; i < n; i++)
    close(fds[i]);
  return r < 0 ? -1 : 0;
}

/* Waits for READY or ERROR from the init. */
static int wait_ready(struct agsx_sandbox *sb, agsx_error_t *err) {
  struct agsx_msg m;
  int fds[2] = {-1, -1};
  size_t nfds = 0;
  ssize_t n = agsx_msg_recv(sb->sync, &m, fds, 2, &nfds);
  if (n == 0)
    return agsx_error_set(err, 0, "the sandbox init died during setup");
  if (n < 0)
    return agsx_error_set(err, (int)-n, "read from the sandbox init");
  if (m.type == AGSX_MSG_READY) {
    size_t k = 0;
    if ((m.code & AGSX_READY_PTY) && k < nfds)
      sb->pty_master = fds[k++];
    if ((m.code & AGSX_READY_TMPFS) && k < nfds)
      sb->tmpfsfd = fds[k++];
    for (; k < nfds; k++)
      close(fds[k]);
    memcpy(sb->child_ns, m.phase_ns, sizeof(sb->child_ns));
    return 0;
  }
  for (size_t k = 0; k < nfds; k++)
    close(fds[k]);
  if (m.type == AGSX_MSG_ERROR) {
    sb->exit_code = m.code;
    sb->exited = true; /* the outcome is known: the init's death adds nothing */
    /* The text already ends with the errno's message. */
    return agsx_error_set_quiet(err, m.err, "%s", m.text);
  }
  return agsx_error_set(err, 0, "unexpected message %d from the sandbox init", m.type);
}

int agsx_sandbox_default_pids(uint64_t *ret, agsx_error_t *err) {
  _cleanup_free_ char *v = NULL;
  *ret = AGSX_DEFAULT_PIDS;
  if (agsx_conf_get("default-pids", "AGSX_DEFAULT_PIDS", &v, err) < 0)
    return -1;
  if (v == NULL)
    return 0;
  if (strcmp(v, "none") == 0 || strcmp(v, "0") == 0) {
    *ret = 0;
    return 0;
  }
  char *end;
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  if (errno || end == v || *end || n > 4194304 || v[0] == '-')
    return agsx_error_set(err, EINVAL, "invalid default-pids `%s` (none, or 1 to 4194304)", v);
  *ret = n;
  return 0;
}

/* The sandbox's id range, and its layers as seen from it (sandbox/ranges.h).
 * An ordinary user's named volumes hold the shared range's ids (see
 * bind_source): a sandbox that mounts one shares that range. */
static int reserve_ids(struct agsx_sandbox *sb, const struct agsx_sandbox_config *cfg,
                       agsx_error_t *err) {
  bool shared = false;
  for (size_t i = 0; agsx_rootless() && i < cfg->n_binds; i++)
    shared |= cfg->binds[i].idmap;
  int r = shared ? agsx_userns_reserve_shared(&sb->ids)
                 : agsx_userns_reserve(sb->statefd, &sb->ids, err);
  if (r < 0)
    return -1;
  return agsx_range_layers(&sb->ids, cfg->layers, cfg->n_layers, &sb->layers, err);
}

int agsx_sandbox_start(const struct agsx_sandbox_config *cfg, struct agsx_sandbox **ret,
                       agsx_error_t *err) {
  struct agsx_sandbox *sb = xzalloc(sizeof(*sb));
  sb->pidfd = sb->sync = sb->pty_master = sb->statefd = sb->dirfd = sb->ids.lockfd = -1;
  sb->sysfs = sb->netns = sb->mntns = sb->upperfd = sb->tmpfsfd = -1;
  sb->init_pid = -1;
  sb->exit_code = 125;
  memcpy(sb->id, cfg->id, sizeof(sb->id));
  *ret = sb;
  int64_t t0 = agsx_mono_ns();
  if (agsx_sandbox_kernel_check(cfg->state_dir, err) < 0 || make_state_dir(sb, cfg, err) < 0 ||
      reserve_ids(sb, cfg, err) < 0)
    return -1;
  phase(sb, "state+ids", &t0);
  if (agsx_cgroup_create(sb->id, &cfg->limits, &sb->cg, err) < 0)
    return agsx_error_wrap(err, "cgroup");
  phase(sb, "cgroup", &t0);
  struct agsx_child_ctx child = {.cfg = cfg,
                                 .pty_master = -1,
                                 .pty_slave = -1,
                                 .rootfd = -1,
                                 .stagefd = -1,
                                 .upperfd = -1,
                                 .tmpfsfd = -1};
  /* The sandbox's tmpfs is mounted over its record directory, in its own
   * mount namespace only: no directory of its own to create and remove. */
  snprintf(child.stage, sizeof(child.stage), "%s/%s", cfg->state_dir, sb->id);
  /* The network namespace a helper has been making meanwhile. */
  _cleanup_close_ int netns = -1, sysfs = -1;
  if (cfg->netns >= 0) {
    netns = fcntl(cfg->netns, F_DUPFD_CLOEXEC, 3);
    sysfs = fcntl(cfg->sysfs, F_DUPFD_CLOEXEC, 3);
  } else if (cfg->netns_job && agsx_net_collect(cfg->netns_job, &netns, &sysfs, err) < 0) {
    return -1;
  } else if (cfg->netns_job == NULL && agsx_rootless()) {
    /* Made by a helper too: we could not come back from making it here. */
    struct agsx_netns_job job;
    if (agsx_net_prepare(&job, NULL, err) < 0 || agsx_net_collect(&job, &netns, &sysfs, err) < 0)
      return -1;
  }
  phase(sb, "netns wait", &t0);
  int nfd = agsx_cgroup_self_attach_fds(sb->cg, child.cgroup_fds, 8, err);
  if (nfd < 0)
    return -1;
  child.n_cgroup_fds = (size_t)nfd;
  child.exit_ack = agsx_cgroup_is_pending(sb->cg);
  int r = spawn_init(sb, cfg, netns, sysfs, &child, err);
  agsx_cgroup_close_fds(child.cgroup_fds, child.n_cgroup_fds);
  if (r < 0)
    return -1;
  phase(sb, "netns+clone", &t0);
  /* systemd, a foreground sandbox: its scope comes now, with the init (still
   * waiting for GO, so nothing of the sandbox has run outside it). */
  if (agsx_cgroup_is_pending(sb->cg)) {
    char desc[96];
    if (cfg->description == NULL)
      snprintf(desc, sizeof(desc), "agsx sandbox %.12s", sb->id);
    if (agsx_cgroup_place(sb->cg, sb->init_pid, cfg->description ? cfg->description : desc, err) <
        0)
      return -1;
    phase(sb, "scope", &t0);
  }
  if (cfg->on_netns && cfg->on_netns(cfg->on_netns_data, sb->netns, err) < 0)
    return -1;
  if (agsx_userns_write_maps(sb->init_pid, sb->ids.base, err) < 0)
    return -1;
  phase(sb, "idmaps", &t0);

  if (send_go(sb, cfg, err) < 0)
    return -1;
  phase(sb, "layers+go", &t0);
  if (wait_ready(sb, err) < 0)
    return -1;
  child_phases(sb, &t0);
  return 0;
}

/* ---- running ----------------------------------------------------------------------- */

int agsx_sandbox_claim(struct agsx_sandbox *sb, const char *claim, size_t len, const int fds[3],
                       agsx_error_t *err) {
  struct agsx_msg m = {.type = AGSX_MSG_CLAIM, .code = fds ? 3 : 0};
  int r = agsx_msg_send(sb->sync, &m, fds, fds ? 3 : 0);
  if (r == 0 && send(sb->sync, claim, len, MSG_NOSIGNAL) != (ssize_t)len)
    r = -(errno ? errno : EMSGSIZE);
  if (r < 0)
    return agsx_error_set(err, -r, "send the claim to the sandbox init");
  return wait_ready(sb, err);
}

int agsx_sandbox_handle_event(struct agsx_sandbox *sb, agsx_error_t *err) {
  struct agsx_msg m;
  int fd = -1;
  size_t nfds = 0;
  if (sb->sync < 0)
    return 1;
  ssize_t n = agsx_msg_recv(sb->sync, &m, &fd, 1, &nfds);
  if (nfds && n > 0 && m.type == AGSX_MSG_EXIT && sb->upperfd < 0)
    sb->upperfd = fd;
  else if (nfds)
    close(fd);
  if (n < 0)
    return agsx_error_set(err, (int)-n, "read from the sandbox init");
  if (n == 0) {
    /* The init is gone without a word: killed (timeout, oom, agsx kill). */
    agsx_closep(&sb->sync);
    return 1;
  }
  if (m.type != AGSX_MSG_EXIT)
    return 0;
  if (agsx_cgroup_goes_with_sandbox(sb->cg)) {
    /* The init waits for this word before it exits (exit_ack): until then
     * the scope has a process and its files are there to read. */
    sb->oom_seen = agsx_cgroup_oom_killed(sb->cg);
    send(sb->sync, "", 1, MSG_NOSIGNAL);
  }
  int sig;
  int code = agsx_wait_status_exit_code(m.status, &sig);
  if (code >= 0)
    sb->exit_code = code;
  if (sig)
    sb->term_signal = sig;
  sb->reason = AGSX_STOP_EXIT;
  sb->exited = true;
  return 1;
}

/* A paused sandbox (sandbox/freeze.h) that is stopped must not stay frozen:
 * after SIGTERM (the deadline, agsx kill) or SIGKILL it is thawed, so the
 * signal takes effect. Its cgroup is looked up afresh: on v1 the freezer
 * cgroup is made by the pause, after the start. */
static bool was_frozen(struct agsx_sandbox *sb) {
  return sb->dirfd >= 0 && faccessat(sb->dirfd, AGSX_FROZEN_MARK, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

static void thaw_for_stop(struct agsx_sandbox *sb) {
  _cleanup_cgroup_ struct agsx_cgroup *cg = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  if (was_frozen(sb) && agsx_cgroup_open(sb->id, &cg, &e) == 0 && agsx_cgroup_frozen(cg))
    agsx_cgroup_thaw_quiet(cg);
}

int agsx_sandbox_signal(struct agsx_sandbox *sb, int sig) {
  if (sb->pidfd < 0)
    return -ESRCH;
  if (syscall(SYS_pidfd_send_signal, sb->pidfd, sig, NULL, 0) < 0)
    return -errno;
  if (sig == SIGTERM || sig == SIGKILL)
    thaw_for_stop(sb);
  return 0;
}

void agsx_sandbox_kill(struct agsx_sandbox *sb) {
  /* SIGKILL to a pid namespace's init takes every process in it along. */
  agsx_sandbox_signal(sb, SIGKILL);
}

static void reap_init(struct agsx_sandbox *sb) {
  if (sb->init_pid <= 0)
    return;
  int status;
  pid_t r;
  do
    r = waitpid(sb->init_pid, &status, 0);
  while (r < 0 && errno == EINTR);
  if (r == sb->init_pid && !sb->exited) {
    /* No EXIT message: the init itself was killed. */
    int sig;
    int code = agsx_wait_status_exit_code(status, &sig);
    if (sig) {
      sb->term_signal = sig;
      sb->exit_code = code;
    } else if (code >= 0 && sb->exit_code == 125) {
      sb->exit_code = code;
    }
  }
  sb->init_pid = -1;
}

/* Why the sandbox stopped, once its end is final; then sb->on_dead. */
static void settle_end(struct agsx_sandbox *sb) {
  if (sb->cg && sb->reason != AGSX_STOP_TIMEOUT && sb->reason != AGSX_STOP_KILLED &&
      (sb->oom_seen || agsx_cgroup_oom_killed(sb->cg)))
    sb->reason = AGSX_STOP_OOM;
  /* Killed from outside (agsx kill -s KILL, the OOM killer checked above). */
  if (sb->reason == AGSX_STOP_NONE && !sb->exited && sb->term_signal == SIGKILL)
    sb->reason = AGSX_STOP_KILLED;
  if (sb->reason == AGSX_STOP_NONE)
    sb->reason = AGSX_STOP_ERROR;
  if (sb->on_dead)
    sb->on_dead(sb->on_dead_data);
  sb->on_dead = NULL;
}

/* The command has ended (the init's EXIT, which the init sends just before
 * it exits by itself) and it was the last of the sandbox's processes: the
 * pids controller counts one task, the init, with any exec's process in a
 * child cgroup counted too. An exec that joins after this count dies with
 * the init, as one racing any end does. */
static bool only_init_left(struct agsx_sandbox *sb) {
  return sb->exited && sb->init_pid > 0 && sb->cg && agsx_cgroup_tasks(sb->cg) == 1;
}

int agsx_sandbox_destroy(struct agsx_sandbox *sb, agsx_error_t *err) {
  if (sb == NULL)
    return 0;
  /* Every process but the exiting init gone, the end is final: it is told
   * (on_dead: a pool claim's --rm answer) before the init's own exit. */
  if (sb->on_dead && only_init_left(sb))
    settle_end(sb);
  if (sb->init_pid > 0) {
    agsx_sandbox_kill(sb);
    reap_init(sb);
  }
  int r = 0;
  /* The init is reaped: its pid namespace, every process in it, is gone. */
  settle_end(sb);
  /* Its mounts go now, the answer given: the last reference to the mount
   * namespace unmounts its tree and frees the filesystems' superblocks. */
  if (sb->mntns >= 0) {
    int64_t t = agsx_mono_ns();
    agsx_closep(&sb->mntns);
    sb->release_ns = agsx_mono_ns() - t;
  }
  if (sb->cg)
    r = agsx_cgroup_destroy(sb->cg, err);
  /* Hierarchies other processes made the sandbox's cgroup in: an exec's
   * tracking cgroup (v1 without limits), a pause's freezer. (With the
   * cached layout this costs one open of each hierarchy's leaf.) */
  _cleanup_cgroup_ struct agsx_cgroup *more = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  if (r == 0 && agsx_cgroup_open(sb->id, &more, &e) == 0)
    r = agsx_cgroup_destroy(more, err);
  /* The sandbox's mounts lived in its own mount namespace and died with
   * it. The record stays until the caller removes it
   * (agsx_sandbox_remove_record); its snapshots die with it. */
  if (sb->statefd >= 0 && !sb->keep_snapshots)
    agsx_snapshot_drop_all(sb->statefd, sb->id);
  agsx_userns_release(&sb->ids);
  return r;
}

int agsx_sandbox_remove_record(struct agsx_sandbox *sb, agsx_error_t *err) {
  if (sb->statefd < 0)
    return 0;
  if (sb->name)
    agsx_name_release(sb->statefd, sb->name, sb->id);
  agsx_closep(&sb->dirfd);
  /* Emptied, then kept as a spare (see take_spare) if there is room. */
  if (agsx_rm_children_at(sb->statefd, sb->id, err) < 0)
    return -1;
  if (put_spare(sb->statefd, sb->id))
    return 0;
  return agsx_rm_rf_at(sb->statefd, sb->id, err);
}

void agsx_sandbox_free(struct agsx_sandbox *sb) {
  if (sb == NULL)
    return;
  free(sb->name);
  agsx_closep(&sb->pidfd);
  agsx_closep(&sb->sysfs);
  agsx_closep(&sb->netns);
  agsx_closep(&sb->mntns);
  agsx_closep(&sb->sync);
  agsx_closep(&sb->pty_master);
  agsx_closep(&sb->statefd);
  agsx_closep(&sb->dirfd);
  agsx_closep(&sb->upperfd);
  agsx_closep(&sb->tmpfsfd);
  agsx_userns_release(&sb->ids);
  agsx_strv_free(sb->layers);
  agsx_cgroup_free(sb->cg);
  free(sb);
}
