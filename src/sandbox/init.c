/* agsx — the sandbox init (C, pid 1 of the sandbox) and the command's
 * last steps before exec (X). See sandbox.h for the order and its reasons. */
#include "config.h"

#include "host/rootless.h"
#include "sandbox/caps.h"
#include "sandbox/pool.h"
#include "sandbox/sandbox-internal.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <limits.h>
#include <linux/openat2.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>

_Noreturn void agsx_child_fail(struct agsx_child_ctx *c, int code, agsx_error_t *err) {
  struct agsx_msg m = {
      .type = AGSX_MSG_ERROR, .code = code, .err = err && *err ? (*err)->errno_ : 0};
  snprintf(m.text, sizeof(m.text), "%s", err && *err ? (*err)->msg : "sandbox setup failed");
  agsx_msg_send(c->sync, &m, NULL, 0);
  _exit(code);
}

/* X, parked: the steps agsx_proc_prepare did before the claim. */
static unsigned parked_prepared;

/* X: runs in the child of the init; never returns. */
static _Noreturn void run_command(struct agsx_child_ctx *c, int errpipe) {
  struct agsx_proc_spec p = {
      .argv = c->cfg->argv,
      .env = c->env,
      .cwd = c->cfg->cwd,
      .user = &c->user,
      .tty_slave = c->cfg->tty ? c->pty_slave : -1,
      .seccomp = c->cfg->seccomp,
      .new_privs = c->cfg->new_privs,
      .prepared = parked_prepared,
  };
  agsx_proc_exec(&p, errpipe);
}

/* ---- the init ------------------------------------------------------------------------- */

static void wait_go(struct agsx_child_ctx *c) {
  struct agsx_msg m;
  ssize_t n = agsx_msg_recv(c->sync, &m, c->fds, AGSX_MSG_MAX_FDS, &c->nfds);
  if (n <= 0 || m.type != AGSX_MSG_GO)
    _exit(125); /* the parent is gone: nobody to report to */
  if (c->nfds != c->cfg->n_layers + c->cfg->n_binds + 1) {
    agsx_error_t err = NULL;
    agsx_error_set(&err, 0, "expected %zu mounts from the parent, got %zu",
                   c->cfg->n_layers + c->cfg->n_binds + 1, c->nfds);
    agsx_child_fail(c, 125, &err);
  }
}

static int become_root(agsx_error_t *err) {
  if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
    return agsx_error_set(err, errno, "become root of the user namespace");
  if (setgroups(0, NULL) < 0 && !agsx_setgroups_denied())
    return agsx_error_set(err, errno, "setgroups");
  /* Credentials changed: set the parent-death signal now (it is reset by
   * every change of credentials). The sync socket covers the window. */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
    return agsx_error_set(err, errno, "parent death signal");
  /* Sandbox processes must not read the init's memory or ptrace it. */
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
    return agsx_error_set(err, errno, "dumpable");
  return 0;
}

/* The user, from the sandbox's own /etc (read after pivot_root: inside). */
static int resolve_user(struct agsx_child_ctx *c, agsx_error_t *err) {
  return agsx_child_read_user(c->cfg->user, &c->user, err);
}

static void build_env(struct agsx_child_ctx *c) {
  c->env = agsx_child_build_env(c->cfg->env, c->cfg->hostname, &c->user, c->cfg->tty);
}

static int open_pty(struct agsx_child_ctx *c, agsx_error_t *err) {
  if (agsx_child_open_pty(&c->pty_master, &c->pty_slave, err) < 0)
    return -1;
  if (c->cfg->has_winsize)
    ioctl(c->pty_master, TIOCSWINSZ, &c->cfg->winsize);
  return 0;
}

static void report_exit(struct agsx_child_ctx *c, int status) {
  struct agsx_msg m = {.type = AGSX_MSG_EXIT, .status = status};
  agsx_msg_send(c->sync, &m, &c->upperfd, c->upperfd >= 0 ? 1 : 0);
  char ack;
  while (c->exit_ack && recv(c->sync, &ack, 1, 0) < 0 && errno == EINTR) {
  }
  _exit(0);
}

/* Reaps every zombie (the init adopts orphans) until the command ends. */
static _Noreturn void init_loop(struct agsx_child_ctx *c, pid_t cmd, int sfd) {
  for (;;) {
    struct signalfd_siginfo si;
    ssize_t n = read(sfd, &si, sizeof(si));
    if (n < 0 && errno == EINTR)
      continue;
    if (n != (ssize_t)sizeof(si))
      _exit(125);
    if (si.ssi_signo == SIGCHLD) {
      int status;
      pid_t p;
      while ((p = waitpid(-1, &status, WNOHANG)) > 0)
        if (p == cmd)
          report_exit(c, status);
      continue;
    }
    /* SIGTERM stops the whole sandbox; other signals go to the command. */
    if (si.ssi_signo == SIGTERM)
      kill(-1, SIGTERM);
    else
      kill(cmd, (int)si.ssi_signo);
  }
}

/* READY, with the pty's master and the sandbox's tmpfs (agsx commit,
 * snapshot and fork take it from the supervisor), which the init then
 * lets go of. */
static void send_ready(struct agsx_child_ctx *c) {
  struct agsx_msg ready = {.type = AGSX_MSG_READY};
  memcpy(ready.phase_ns, c->phase_ns, sizeof(ready.phase_ns));
  int fds[2];
  size_t nfds = 0;
  if (c->pty_master >= 0)
    fds[nfds++] = c->pty_master, ready.code |= AGSX_READY_PTY;
  if (c->tmpfsfd >= 0)
    fds[nfds++] = c->tmpfsfd, ready.code |= AGSX_READY_TMPFS;
  agsx_msg_send(c->sync, &ready, fds, nfds);
  agsx_closep(&c->pty_master);
  agsx_closep(&c->tmpfsfd);
}

/* An idle sandbox's init: no command; a stop signal goes to every process,
 * and the init ends once none is left (a grace the supervisor bounds). */
static _Noreturn void idle_loop(struct agsx_child_ctx *c, int sfd) {
  int stop = 0;
  for (;;) {
    struct pollfd p = {.fd = sfd, .events = POLLIN};
    if (poll(&p, 1, stop ? 50 : -1) < 0 && errno != EINTR)
      _exit(125);
    struct signalfd_siginfo si;
    if (p.revents && read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
      int sig = (int)si.ssi_signo;
      if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT) {
        stop = stop ? stop : sig;
        kill(-1, sig);
      }
    }
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    /* kill(-1, 0) reaches every process of the namespace but us. */
    if (stop && kill(-1, 0) < 0 && errno == ESRCH)
      report_exit(c, stop); /* a wait status: killed by STOP */
  }
}

/* Tells the supervisor an idle sandbox is ready, then reaps until stopped. */
static _Noreturn void start_idle(struct agsx_child_ctx *c, int ep[2], int sfd) {
  close(ep[0]);
  close(ep[1]);
  send_ready(c);
  idle_loop(c, sfd);
}

static const int forwarded[] = {SIGCHLD, SIGTERM,  SIGINT,  SIGHUP,  SIGQUIT, SIGUSR1,
                                SIGUSR2, SIGWINCH, SIGCONT, SIGTSTP, SIGALRM};

/* The init is a clone of its supervisor: the state and store directories,
 * locks, leases, published ports' listeners and the host's network
 * namespace must not live on in a process inside the sandbox, even a
 * non-dumpable one. Only the sync socket and the cgroup files stay. */
static void take_stdio_close_host_fds(struct agsx_child_ctx *c) {
  const struct agsx_sandbox_config *cfg = c->cfg;
  if (!cfg->tty)
    for (int i = 0; i < 3; i++)
      if (cfg->stdio[i] != i && dup2(cfg->stdio[i], i) < 0)
        _exit(125);
  int keep[1 + 8];
  size_t nkeep = 0;
  keep[nkeep++] = c->sync;
  for (size_t i = 0; i < c->n_cgroup_fds && nkeep < sizeof(keep) / sizeof(keep[0]); i++)
    keep[nkeep++] = c->cgroup_fds[i];
  agsx_close_all_except(keep, nkeep);
}

/* Whether the command's process may be vforked (see start_command): its
 * change of ids sets the shared memory's dumpable flag to fs.suid_dumpable,
 * and 1 ("debug") would let the sandbox's root trace the init until we
 * reset it. Read before GO, in the host's /proc; unknown is no. */
static bool command_vfork;

static bool suid_dumpable_safe(void) {
  char b[2] = "";
  _cleanup_close_ int fd = open("/proc/sys/fs/suid_dumpable", O_RDONLY | O_CLOEXEC);
  return fd >= 0 && read(fd, b, 1) == 1 && (b[0] == '0' || b[0] == '2');
}

/* Into the cgroup first, while our credentials are still host root's (the
 * files are root's), and before anything can fork; then wait for GO. */
static void join_cgroup_wait_go(struct agsx_child_ctx *c) {
  agsx_error_t err = NULL;
  int r = agsx_cgroup_self_attach(c->cgroup_fds, c->n_cgroup_fds);
  agsx_cgroup_close_fds(c->cgroup_fds, c->n_cgroup_fds);
  command_vfork = suid_dumpable_safe(); /* while the parent works */
  wait_go(c);
  if (r < 0) {
    agsx_error_set(&err, -r, "join the sandbox cgroup");
    agsx_child_fail(c, 125, &err);
  }
}

/* Root, cgroup namespace, root filesystem, hostname, user, terminal and
 * environment: the sandbox as the command will see it. */
static void setup_sandbox(struct agsx_child_ctx *c) {
  agsx_error_t err = NULL;
  const struct agsx_sandbox_config *cfg = c->cfg;
  /* The state directory is host root's (0700): open the stage before we
   * become the sandbox's root, who cannot enter it. */
  c->stagefd = open(c->stage, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (c->stagefd < 0) {
    agsx_error_set(&err, errno, "open `%s`", c->stage);
    agsx_child_fail(c, 125, &err);
  }
  c->phase_ns[0] = agsx_mono_ns();
  if (become_root(&err) < 0 || unshare(CLONE_NEWCGROUP) < 0 ||
      (c->phase_ns[1] = agsx_mono_ns(), agsx_child_rootfs(c, &err)) < 0)
    goto fail;
  /* The stage and the layers', volumes' and /sys's mount fds are the
   * host's: the root is built, so none is held while the sandbox's own
   * paths (/etc/passwd, /etc/group, /dev/ptmx) are resolved below. */
  agsx_closep(&c->stagefd);
  for (size_t i = 0; i < c->nfds; i++)
    agsx_closep(&c->fds[i]);
  if (sethostname(cfg->hostname, strlen(cfg->hostname)) < 0 || resolve_user(c, &err) < 0 ||
      (cfg->tty && open_pty(c, &err) < 0))
    goto fail;
  c->phase_ns[2] = agsx_mono_ns();
  build_env(c);
  return;
fail:
  if (err == NULL)
    agsx_error_set(&err, errno, "sandbox setup");
  agsx_child_fail(c, 125, &err);
}

/* The forwarded signals, blocked and read from a signalfd (returned), and
 * the pipe EP on which the command reports a failed exec. */
static int init_channels(struct agsx_child_ctx *c, int ep[2]) {
  agsx_error_t err = NULL;
  sigset_t set, old;
  sigemptyset(&set);
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(forwarded); i++)
    sigaddset(&set, forwarded[i]);
  sigprocmask(SIG_BLOCK, &set, &old);
  int sfd = signalfd(-1, &set, SFD_CLOEXEC);
  if (sfd < 0 || pipe2(ep, O_CLOEXEC) < 0) {
    agsx_error_set(&err, errno, "init setup");
    agsx_child_fail(c, 125, &err);
  }
  return sfd;
}

static pid_t await_exec(struct agsx_child_ctx *c, int ep[2], pid_t cmd);

/* Forks the command and waits for its exec: an exec error is reported and
 * ends the init; success (EOF on EP, closed by the exec) sends READY.
 * vfork, as posix_spawn does: the init waits for the exec anyway, and
 * nothing of its address space is copied or faulted in again (about 30
 * page faults and the page tables' copy a start). Until its exec the child
 * shares the init's memory: it writes to its own stack frames, its own fd
 * table and its own signal handlers only (and on an error path may
 * allocate: the init is single-threaded and suspended meanwhile). */
static pid_t start_command(struct agsx_child_ctx *c, int ep[2]) {
  agsx_error_t err = NULL;
  pid_t cmd = command_vfork ? vfork() : fork();
  if (cmd < 0) {
    agsx_error_set(&err, errno, "fork the command");
    agsx_child_fail(c, 125, &err);
  }
  if (cmd == 0) {
    close(ep[0]);
    if (c->tmpfsfd >= 0) /* the command resolves its paths holding nothing above its root */
      close(c->tmpfsfd); /* (closed, not reset: the init's memory) */
    run_command(c, ep[1]);
  }
  return await_exec(c, ep, cmd);
}

static pid_t await_exec(struct agsx_child_ctx *c, int ep[2], pid_t cmd) {
  close(ep[1]);
  agsx_closep(&c->pty_slave);
  struct agsx_msg m;
  ssize_t n;
  do
    n = read(ep[0], &m, sizeof(m));
  while (n < 0 && errno == EINTR);
  if (n == (ssize_t)sizeof(m)) {
    /* The command never ran: report its exec error, then reap it. */
    m.text[sizeof(m.text) - 1] = '\0';
    agsx_msg_send(c->sync, &m, NULL, 0);
    waitpid(cmd, NULL, 0);
    _exit(m.code);
  }
  close(ep[0]);
  c->phase_ns[4] = agsx_mono_ns();
  /* A vforked child's change of ids set our memory's dumpable flag (to 0
   * or 2: see command_vfork); ours is off, as become_root left it. */
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  send_ready(c);
  return cmd;
}

/* ---- a parked sandbox (sandbox/pool.h) --------------------------------------------------
 * The command's process (X) is forked while parked, so that a claim costs
 * no fork of the init: X reads the claim from the sync socket itself, takes
 * its stdio, host name, user and environment and goes on as a started
 * command does (agsx_proc_exec). Its errors before the exec travel on the
 * exec error pipe, as the exec's; the init only waits on that pipe. */

/* The claim's configuration: the parked one's, with the claimed command. */
static struct agsx_sandbox_config claimed_cfg;
static struct agsx_claim claimed;

static _Noreturn void claim_fail(int errpipe, agsx_error_t *err) {
  struct agsx_msg m = {.type = AGSX_MSG_ERROR, .code = 125, .err = *err ? (*err)->errno_ : 0};
  snprintf(m.text, sizeof(m.text), "%s", *err ? (*err)->msg : "claim failed");
  if (write(errpipe, &m, sizeof(m)) < 0) {
  }
  _exit(125);
}

/* X: the claim's stdio, user and environment. The host name is the
 * supervisor's to set (pool-sup.c: the filter X may already run under denies
 * sethostname); here it only goes into HOSTNAME. The user is the init's,
 * resolved before X was forked, unless the claim names another: nothing
 * runs in a parked sandbox, so its /etc/passwd and /etc/group are the same
 * files now; another user is resolved the same way, inside the root. */
static void take_claim(struct agsx_child_ctx *c, const int *fds, size_t nfds, int errpipe) {
  agsx_error_t err = NULL;
  bool same_user = !(claimed.user && *claimed.user) ||
                   strcmp(claimed.user, c->cfg->user ? c->cfg->user : "") == 0;
  claimed_cfg = *c->cfg;
  claimed_cfg.argv = claimed.argv;
  claimed_cfg.env = claimed.env;
  if (claimed.cwd && *claimed.cwd)
    claimed_cfg.cwd = claimed.cwd;
  if (claimed.user && *claimed.user)
    claimed_cfg.user = claimed.user;
  if (claimed.hostname && *claimed.hostname)
    claimed_cfg.hostname = claimed.hostname;
  c->cfg = &claimed_cfg;
  for (size_t i = 0; i < nfds && i < 3; i++)
    if (dup2(fds[i], (int)i) < 0)
      _exit(125);
  for (size_t i = 0; i < nfds; i++)
    close(fds[i]);
  if (!same_user) {
    if (resolve_user(c, &err) < 0)
      claim_fail(errpipe, &err);
  }
  build_env(c);
}

/* Receives the claim on SOCK: the message with 0 or 3 stdio fds, then the
 * claim itself. 0 on EOF (no claim); -1 with ERR when malformed. */
static int receive_claim(int sock, int fds[3], size_t *ret_nfds, char **ret_buf, size_t *ret_len,
                         agsx_error_t *err) {
  struct agsx_msg m;
  ssize_t n = agsx_msg_recv(sock, &m, fds, 3, ret_nfds);
  if (n <= 0 || m.type != AGSX_MSG_CLAIM)
    return n == 0 ? 0 : agsx_error_set(err, EBADMSG, "expected a claim");
  if (*ret_nfds != 0 && *ret_nfds != 3)
    return agsx_error_set(err, EINVAL, "a claim passes 0 or 3 stdio fds, not %zu", *ret_nfds);
  char *buf = xmalloc(AGSX_CLAIM_MAX);
  do
    n = recv(sock, buf, AGSX_CLAIM_MAX, 0);
  while (n < 0 && errno == EINTR);
  if (n <= 0 || agsx_claim_decode(buf, (size_t)n, &claimed, err) < 0) {
    free(buf);
    return *err ? -1 : agsx_error_set(err, EBADMSG, "no claim after its message");
  }
  *ret_buf = buf;
  *ret_len = (size_t)n;
  return 1;
}

/* X, before it waits: what agsx_proc_exec would do first thing after the
 * claim and does not depend on it (procexec.h): the bounding set, no new
 * privileges, the signals' dispositions, and agsx's default filter, which
 * lets every later step through (agsx_proc_after_filter, checked by
 * test_pool). A custom profile, which may not, is installed at the claim,
 * as for any start; `unconfined` has none. An error is kept for the claim
 * (the sandbox stays parked meanwhile, and the claimer gets it). */
static void prepare_parked(struct agsx_child_ctx *c, agsx_error_t *err) {
  struct agsx_proc_spec p = {
      .tty_slave = -1, .seccomp = c->cfg->seccomp, .new_privs = c->cfg->new_privs};
  agsx_proc_prepare(&p, c->cfg->seccomp_default ? AGSX_PREP_SECCOMP : 0, err);
  parked_prepared = p.prepared;
}

/* X while parked: reads the claim from the supervisor itself (the init
 * does not read the sync socket meanwhile), then becomes the command. An
 * idle claim is told to the init on the exec error pipe (a CLAIM message). */
static _Noreturn void parked_command(struct agsx_child_ctx *c, int errpipe) {
  agsx_error_t err = NULL, prep_err = NULL;
  prepare_parked(c, &prep_err);
  int fds[3] = {-1, -1, -1};
  size_t nfds = 0, len;
  char *buf = NULL;
  int r = receive_claim(c->sync, fds, &nfds, &buf, &len, &err);
  if (r == 0)
    _exit(0); /* the supervisor is gone (the init dies with it) */
  if (r < 0)
    claim_fail(errpipe, &err);
  if (prep_err && !claimed.idle)
    claim_fail(errpipe, &prep_err); /* fail closed: the claim gets the error */
  if (claimed.idle) {
    struct agsx_msg m = {.type = AGSX_MSG_CLAIM};
    if (write(errpipe, &m, sizeof(m)) < 0) {
    }
    _exit(0);
  }
  free(buf);
  /* It resolves the user inside the root next, holding nothing of the
   * host but the claim's stdio and the error pipe. */
  agsx_closep(&c->sync);
  take_claim(c, fds, nfds, errpipe);
  run_command(c, errpipe);
}

/* Parked: set up, X forked and waiting for the claim, READY sent; the init
 * waits for X's exec (EOF on EP, then READY as a start sends it), its
 * error, an idle claim, or a stop (the pool's lifetime, pool rm): no CPU
 * while it waits. Returns X (0 after an idle claim: X has ended). */
static pid_t park(struct agsx_child_ctx *c, int sfd, int ep[2]) {
  agsx_error_t err = NULL;
  pid_t x = fork();
  if (x < 0) {
    agsx_error_set(&err, errno, "fork the command");
    agsx_child_fail(c, 125, &err);
  }
  if (x == 0) {
    close(ep[0]);
    agsx_closep(&c->tmpfsfd); /* above its root: the init hands it over, not X */
    parked_command(c, ep[1]);
  }
  agsx_closep(&ep[1]);
  send_ready(c);
  for (;;) {
    struct pollfd p[2] = {{.fd = ep[0], .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR)
        continue;
      _exit(125);
    }
    /* X's exec first: its SIGCHLD (a quick command) must stay queued for
     * the init loop, not be read here. */
    if (p[0].revents)
      break;
    struct signalfd_siginfo si;
    if (p[1].revents && read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
      int sig = (int)si.ssi_signo;
      if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT)
        report_exit(c, sig); /* a wait status: killed by SIG */
    }
  }
  struct agsx_msg m;
  ssize_t n;
  do
    n = read(ep[0], &m, sizeof(m));
  while (n < 0 && errno == EINTR);
  if (n == (ssize_t)sizeof(m) && m.type == AGSX_MSG_CLAIM) {
    waitpid(x, NULL, 0); /* idle: X has ended */
    return 0;
  }
  if (n == (ssize_t)sizeof(m)) {
    /* The command never ran: report its error, then reap it. */
    m.text[sizeof(m.text) - 1] = '\0';
    agsx_msg_send(c->sync, &m, NULL, 0);
    waitpid(x, NULL, 0);
    _exit(m.code);
  }
  agsx_closep(&ep[0]);
  c->phase_ns[4] = agsx_mono_ns();
  send_ready(c);
  return x;
}

_Noreturn void agsx_child_main(struct agsx_child_ctx *c) {
  /* Our command line names host paths; the sandbox sees pid 1 as this,
   * from before anything of it can run (argv is a copy: util.h). */
  agsx_proc_title_set("agsx-init");
  take_stdio_close_host_fds(c);
  join_cgroup_wait_go(c);
  setup_sandbox(c);
  int ep[2];
  int sfd = init_channels(c, ep);
  c->phase_ns[3] = agsx_mono_ns();
  if (c->cfg->idle)
    start_idle(c, ep, sfd);
  pid_t cmd;
  if (c->cfg->park) {
    cmd = park(c, sfd, ep);
    if (cmd == 0)
      start_idle(c, ep, sfd);
  } else {
    cmd = start_command(c, ep);
  }
  init_loop(c, cmd, sfd);
}
