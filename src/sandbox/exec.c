/* agsx — exec into a running sandbox. See exec.h. */
#include "config.h"

#include "sandbox/exec.h"
#include "host/cgroup.h"
#include "host/rootless.h"
#include "sandbox/proc.h"
#include "sandbox/sandbox-internal.h"

#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#define JOIN_NS                                                                                    \
  (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET | CLONE_NEWCGROUP)

static _Noreturn void fail(int sock, int code, agsx_error_t *err) {
  struct agsx_msg m = {.type = AGSX_MSG_ERROR, .code = code, .err = (*err)->errno_};
  snprintf(m.text, sizeof(m.text), "%s", (*err)->msg);
  agsx_msg_send(sock, &m, NULL, 0);
  _exit(code);
}

static char **merge_env(char **base, char **extra) {
  size_t nb = agsx_strv_len(base), ne = agsx_strv_len(extra);
  char **v = xzalloc((nb + ne + 1) * sizeof(char *));
  size_t k = 0;
  for (size_t i = 0; i < nb; i++) {
    size_t klen = strcspn(base[i], "=");
    bool overridden = false;
    for (size_t j = 0; j < ne && !overridden; j++)
      overridden = strncmp(extra[j], base[i], klen) == 0 && extra[j][klen] == '=';
    if (!overridden)
      v[k++] = base[i];
  }
  for (size_t j = 0; j < ne; j++)
    v[k++] = extra[j];
  return v;
}

/* Puts the three stdio fds in place: each is duplicated above 2 first, so
 * that one landing on another's number does not clobber it. */
static int install_stdio(const int stdio[3]) {
  int tmp[3];
  for (int i = 0; i < 3; i++)
    if ((tmp[i] = fcntl(stdio[i], F_DUPFD_CLOEXEC, 3)) < 0)
      return -1;
  for (int i = 0; i < 3; i++)
    if (dup2(tmp[i], i) < 0)
      return -1;
  for (int i = 0; i < 3; i++)
    close(tmp[i]);
  return 0;
}

/* The exec'd process: in the sandbox's pid namespace already (forked after
 * setns), still host root until it joins the rest. Before it touches any
 * path of the sandbox it holds nothing of the host but its stdio and the
 * sync socket: every other fd the caller had (the state directory, the
 * store, cgroup directories, the seccomp cache…) would be reachable from
 * inside as /proc/self/fd/N through a link the sandbox planted on a path we
 * resolve (CVE-2024-21626). */
static _Noreturn void child(const struct agsx_record *rec, const struct agsx_exec_config *cfg,
                            int pidfd, int sock, const int *tasks, size_t ntasks,
                            bool wait_attach) {
  agsx_error_t err = NULL;
  /* Not dumpable: sandbox processes must not reach our fds or memory
   * through /proc/<pid> or ptrace while we are still privileged. */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
    agsx_error_set(&err, errno, "exec setup");
    fail(sock, 125, &err);
  }
  if (!cfg->tty && install_stdio(cfg->stdio) < 0) {
    agsx_error_set(&err, errno, "exec: set up stdio");
    fail(sock, 125, &err);
  }
  int keep[2 + 8] = {sock, pidfd};
  size_t nkeep = 2;
  for (size_t i = 0; i < ntasks && nkeep < AGSX_ARRAY_SIZE(keep); i++)
    keep[nkeep++] = tasks[i];
  agsx_close_all_except(keep, nkeep);
  /* Into the exec cgroup before any sandbox code can run: its limits and
   * its kill cover the command from its first instruction. (An ordinary
   * user's systemd cgroup: systemd moves us, then the parent says go.) */
  char go;
  if (wait_attach && read(sock, &go, 1) != 1) {
    agsx_error_set(&err, EIO, "join the exec cgroup: the caller did not say go");
    fail(sock, 125, &err);
  }
  int r = agsx_cgroup_self_attach(tasks, ntasks);
  if (r < 0) {
    agsx_error_set(&err, -r, "join the exec cgroup");
    fail(sock, 125, &err);
  }
  if (setns(pidfd, JOIN_NS) < 0) {
    agsx_error_set(&err, errno, "join the sandbox");
    fail(sock, 125, &err);
  }
  int only_sock[] = {sock};
  agsx_close_all_except(only_sock, 1);
  if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0 ||
      (setgroups(0, NULL) < 0 && !agsx_setgroups_denied()) ||
      prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
    agsx_error_set(&err, errno, "become root of the sandbox");
    fail(sock, 125, &err);
  }
  struct agsx_user user;
  if (agsx_child_read_user(cfg->user ? cfg->user : rec->user, &user, &err) < 0)
    fail(sock, 125, &err);
  _cleanup_strv_ char **base = merge_env(rec->env, cfg->env);
  char **env =
      agsx_child_build_env(base, rec->hostname ? rec->hostname : "sandbox", &user, cfg->tty);
  int master = -1, slave = -1;
  if (cfg->tty && agsx_child_open_pty(&master, &slave, &err) < 0)
    fail(sock, 125, &err);
  if (master >= 0 && cfg->winsize)
    ioctl(master, TIOCSWINSZ, cfg->winsize);
  struct agsx_msg ready = {.type = AGSX_MSG_READY};
  agsx_msg_send(sock, &ready, &master, master >= 0 ? 1 : 0);
  if (master >= 0)
    close(master);
  struct agsx_proc_spec p = {
      .argv = cfg->argv,
      .env = env,
      .cwd = cfg->cwd ? cfg->cwd : (rec->cwd ? rec->cwd : "/"),
      .user = &user,
      .tty_slave = slave,
      .seccomp = cfg->seccomp,
      .new_privs = rec->new_privs, /* the sandbox's own setting, as its command's */
  };
  agsx_proc_exec(&p, sock);
}

static int open_init(const struct agsx_record *rec, agsx_error_t *err) {
  int fd = agsx_proc_ref_pidfd(&rec->init);
  if (fd < 0)
    return agsx_error_set_quiet(err, ESRCH, "sandbox `%.12s` is not running", rec->id);
  return fd;
}

/* The sandbox's cgroup, created for tracking when it has none (v1 without
 * limits): an exec's process tree must be killable as one, grandchildren
 * that left their parent included. The supervisor removes it at the end. */
static int sandbox_cgroup(const struct agsx_record *rec, struct agsx_cgroup **ret,
                          agsx_error_t *err) {
  if (agsx_cgroup_open(rec->id, ret, err) == 0)
    return 0;
  if (agsx_error_errno(err) != ENOENT)
    return -1;
  agsx_error_free(err);
  struct agsx_cgroup_limits track = {.track = true};
  if (agsx_cgroup_create(rec->id, &track, ret, err) == 0)
    return 0;
  if (agsx_error_errno(err) != EEXIST)
    return -1;
  agsx_error_free(err); /* another exec made it meanwhile */
  return agsx_cgroup_open(rec->id, ret, err);
}

static int exec_cgroup(const struct agsx_record *rec, struct agsx_exec *e, int *tasks,
                       size_t *ntasks, agsx_error_t *err) {
  _cleanup_cgroup_ struct agsx_cgroup *cg = NULL;
  *ntasks = 0;
  /* No cgroup at all (host/cgroup.h: an ordinary user's agsx): the
   * command alone is killed at its timeout, and what it left running goes
   * with the sandbox. */
  if (agsx_cgroup_limits_off())
    return 0;
  if (sandbox_cgroup(rec, &cg, err) < 0)
    return agsx_error_wrap(err, "exec cgroup");
  char name[24];
  snprintf(name, sizeof(name), "exec-%08x", (unsigned)(agsx_mono_ns() ^ getpid()));
  if (agsx_cgroup_create_sub(cg, name, &e->cg, err) < 0)
    return -1;
  int n = agsx_cgroup_join_fds(e->cg, tasks, 8, err);
  if (n < 0)
    return -1;
  *ntasks = (size_t)n;
  return 0;
}

static int wait_started(struct agsx_exec *e, int sock, int *ret_code, agsx_error_t *err) {
  for (;;) {
    struct agsx_msg m;
    int fd = -1;
    size_t nfds = 0;
    ssize_t n = agsx_msg_recv(sock, &m, &fd, 1, &nfds);
    if (n == 0)
      return 0; /* closed at exec: the command runs */
    if (n < 0)
      return agsx_error_set(err, (int)-n, "exec");
    if (m.type == AGSX_MSG_READY) {
      if (nfds)
        e->pty_master = fd;
      continue;
    }
    if (nfds)
      close(fd);
    *ret_code = m.code;
    return agsx_error_set_quiet(err, m.err, "%s", m.text);
  }
}

int agsx_exec_start(const struct agsx_record *rec, const struct agsx_exec_config *cfg,
                    struct agsx_exec **ret, int *ret_code, agsx_error_t *err) {
  struct agsx_exec *e = xzalloc(sizeof(*e));
  e->pidfd = e->pty_master = -1;
  e->pid = -1;
  *ret = e;
  *ret_code = 125;
  if (rec->status == AGSX_STATUS_EXITED)
    return agsx_error_set_quiet(err, ESRCH, "sandbox `%.12s` is not running", rec->id);
  /* A parked sandbox (sandbox/pool.h) is its claimer's, untouched until
   * then: nothing may run in it before, or leave files there. */
  if (rec->parked)
    return agsx_error_set_quiet(err, EBUSY,
                                "sandbox `%.12s` is parked in pool `%s` (claim it: run --pool)",
                                rec->id, rec->pool ? rec->pool : "?");
  /* Its processes are frozen: the command would hang until unpause. */
  if (rec->paused)
    return agsx_error_set_quiet(err, EAGAIN, "sandbox `%.12s` is paused (agsx unpause it first)",
                                rec->id);
  _cleanup_close_ int initfd = open_init(rec, err);
  if (initfd < 0)
    return -1;
  int tasks[8];
  size_t ntasks = 0;
  if (exec_cgroup(rec, e, tasks, &ntasks, err) < 0)
    return -1;
  bool by_manager = agsx_cgroup_attach_needs_manager(e->cg);
  if (by_manager) {
    agsx_cgroup_close_fds(tasks, ntasks);
    ntasks = 0;
  }
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) {
    agsx_cgroup_close_fds(tasks, ntasks);
    return agsx_error_set(err, errno, "socketpair");
  }
  pid_t pid;
  if (agsx_rootless()) {
    /* We could not come back to our own pid namespace: a helper joins
     * the sandbox's for the fork (sandbox/proc.h). */
    pid = agsx_clone_in_ns(initfd, CLONE_NEWPID, 0, -1, &e->pidfd);
    if (pid == 0) {
      close(sp[0]);
      child(rec, cfg, initfd, sp[1], tasks, ntasks, by_manager);
    }
  } else {
    /* The next child of this process is born in the sandbox's pid
     * namespace; afterwards ours go back to our own (anything forking
     * later — the leak checker of a sanitizer build, say — must not land
     * in the sandbox). */
    int ownpid = open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);
    if (ownpid < 0 || setns(initfd, CLONE_NEWPID) < 0) {
      agsx_closep(&ownpid);
      agsx_cgroup_close_fds(tasks, ntasks);
      close(sp[0]);
      close(sp[1]);
      return agsx_error_set(err, errno, "join the sandbox's pid namespace");
    }
    pid = fork();
    if (pid == 0) {
      close(sp[0]);
      child(rec, cfg, initfd, sp[1], tasks, ntasks, by_manager);
    }
    int saved = errno;
    int back = setns(ownpid, CLONE_NEWPID);
    close(ownpid);
    if (back < 0)
      agsx_warn("return to our pid namespace: %s", strerror(errno));
    errno = saved;
  }
  agsx_cgroup_close_fds(tasks, ntasks);
  close(sp[1]);
  if (pid < 0) {
    close(sp[0]);
    return agsx_error_set(err, errno, "join the sandbox's pid namespace and fork");
  }
  e->pid = pid;
  if (e->pidfd < 0)
    e->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (by_manager) {
    if (agsx_cgroup_attach_by_manager(e->cg, pid, err) < 0) {
      close(sp[0]);
      kill(pid, SIGKILL);
      agsx_exec_reap(e);
      return agsx_error_wrap(err, "exec cgroup");
    }
    if (send(sp[0], "", 1, MSG_NOSIGNAL) != 1) {
      int saved = errno;
      close(sp[0]);
      agsx_exec_reap(e);
      return agsx_error_set(err, saved, "exec: start the command");
    }
  }
  int r = wait_started(e, sp[0], ret_code, err);
  close(sp[0]);
  if (r < 0)
    agsx_exec_reap(e);
  return r;
}

void agsx_exec_reap(struct agsx_exec *e) {
  if (e->pid <= 0)
    return;
  int status;
  pid_t r;
  do
    r = waitpid(e->pid, &status, 0);
  while (r < 0 && errno == EINTR);
  if (r == e->pid) {
    int sig;
    int code = agsx_wait_status_exit_code(status, &sig);
    if (code >= 0)
      e->exit_code = code;
    if (sig)
      e->term_signal = sig;
  }
  e->pid = -1;
}

void agsx_exec_kill_tree(struct agsx_exec *e) {
  agsx_error_t err = NULL;
  /* The command first: even if the cgroup kill found nothing (a process
   * that is not where it should be), the command itself goes. */
  if (e->pidfd >= 0)
    syscall(SYS_pidfd_send_signal, e->pidfd, SIGKILL, NULL, 0);
  if (e->cg) {
    agsx_cgroup_destroy(e->cg, &err);
    agsx_error_free(&err);
  }
}

void agsx_exec_free(struct agsx_exec *e) {
  if (e == NULL)
    return;
  if (e->cg) {
    /* Empty: remove it. Processes the command left running keep it (and
     * go with the sandbox). */
    uint64_t mem = 0, pids = 0;
    agsx_cgroup_stats(e->cg, &mem, &pids);
    agsx_error_t err = NULL;
    if (pids == 0)
      agsx_cgroup_destroy(e->cg, &err);
    agsx_error_free(&err);
    agsx_cgroup_free(e->cg);
  }
  agsx_closep(&e->pidfd);
  agsx_closep(&e->pty_master);
  free(e);
}
