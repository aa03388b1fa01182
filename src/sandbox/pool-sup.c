/* agsx — sandbox: warm pools (see pool.h), the parked sandbox's
 * supervisor's side: parking (the claim socket STATE/<id>/claim and the
 * pool's parked/<id> entry), taking a claim (the claimer's stdio, user,
 * environment and host name handed to the waiting command), the claimed
 * record, an attached claimer's signals and its answer at the end, and the
 * refill the supervisor starts when its sandbox leaves the pool. Invariant:
 * the entry is unlinked and the claim socket closed before the claim is
 * answered, so a sandbox is claimed at most once; only a peer of our uid
 * or root may claim; a sandbox that leaves the pool (claimed, or ended
 * unclaimed but not killed) starts a refill unless the pool is gone. */
#include "config.h"

#include "host/rootless.h"
#include "sandbox/pool-internal.h"
#include "sandbox/sync.h"
#include "sandbox/supervisor.h"
#include "state/state.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define CLAIM_REQUEST_MS 2000
/* A claim's refill waits this long, or for the command's end if that comes
 * first: the refiller's fork (and the wait for its first child) is then
 * not between a quick command's end and its answer. */
#define REFILL_DEFER_NS (10 * 1000000LL)

/* ---- the supervisor's side -------------------------------------------------------------------------- */

struct agsx_pool_sup {
  char *name;
  int pooldir, parked, listen_fd, conn;
  int utsfd; /* the supervisor's own UTS namespace (set_hostname comes back to it) */
  bool claimed;
  bool record_due;   /* attached: the claim's record is still to be written (settle_record) */
  bool ended;        /* the command's end is known, the supervisor's loop ended without error */
  int64_t refill_at; /* monotonic ns of the claim's deferred refill; 0: none */
  int64_t accepted_ns, exec_ns; /* the claim's connection accepted; its command's exec */
  struct agsx_claim claim;      /* what the sandbox now runs (owned: the spec points in) */
};

static void ps_free(struct agsx_pool_sup *ps) {
  if (ps == NULL)
    return;
  free(ps->name);
  agsx_closep(&ps->pooldir);
  agsx_closep(&ps->parked);
  agsx_closep(&ps->listen_fd);
  agsx_closep(&ps->conn);
  agsx_closep(&ps->utsfd);
  agsx_claim_clear(&ps->claim);
  free(ps);
}

void agsx_pool_sup_free(struct sup *f) {
  ps_free(f->pool);
  f->pool = NULL;
}

static int listen_claims(struct sup *f, struct agsx_pool_sup *ps, agsx_error_t *err) {
  ps->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (ps->listen_fd < 0)
    return agsx_error_set(err, errno, "claim socket");
  struct sockaddr_un a;
  agsx_pool_claim_addr(f->sb->dirfd, &a);
  unlinkat(f->sb->dirfd, CLAIM_SOCKET, 0);
  mode_t old = umask(0177);
  int r = bind(ps->listen_fd, (struct sockaddr *)&a, sizeof(a));
  umask(old);
  if (r < 0 || listen(ps->listen_fd, 64) < 0)
    return agsx_error_set(err, errno, "claim socket");
  return 0;
}

/* parked/<id>, holding the manifest digest, made whole then renamed in. */
static int register_entry(struct sup *f, struct agsx_pool_sup *ps, agsx_error_t *err) {
  const char *id = f->sb->id;
  const char *digest = f->p->info.img.manifest.digest;
  if (faccessat(ps->pooldir, POOL_JSON, F_OK, 0) < 0)
    return agsx_error_set(err, ENOENT, "pool `%s` was removed", ps->name);
  _cleanup_free_ char *tmp = xasprintf(".%s.tmp", id);
  _cleanup_close_ int fd =
      openat(ps->parked, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0 || agsx_write_all(fd, digest ? digest : "", strlen(digest ? digest : "")) < 0 ||
      renameat(ps->parked, tmp, ps->parked, id) < 0) {
    int e = errno;
    unlinkat(ps->parked, tmp, 0);
    return agsx_error_set(err, e, "pool `%s`: register the sandbox", ps->name);
  }
  return 0;
}

static void on_dead(void *data);

int agsx_pool_sup_park(struct sup *f, agsx_error_t *err) {
  if (f->o->pool == NULL)
    return 0;
  /* Until claimed, its record is the pool's: it goes when the sandbox
   * ends (the claim sets the claimer's --rm). */
  ((struct agsx_run_spec *)f->o)->rm = true;
  struct agsx_pool_sup *ps = f->pool = xzalloc(sizeof(*ps));
  ps->pooldir = ps->parked = ps->listen_fd = ps->conn = -1;
  ps->name = xstrdup(f->o->pool);
  ps->utsfd = open("/proc/thread-self/ns/uts", O_RDONLY | O_CLOEXEC);
  if (ps->utsfd < 0)
    return agsx_error_set(err, errno, "open /proc/thread-self/ns/uts");
  ps->pooldir = agsx_pool_open_dir(f->o->state, ps->name, err);
  if (ps->pooldir < 0)
    return -1;
  ps->parked = openat(ps->pooldir, PARKED, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (ps->parked < 0)
    return agsx_error_set(err, errno, "pool `%s`", ps->name);
  if (listen_claims(f, ps, err) < 0)
    return -1;
  f->sb->on_dead = on_dead;
  f->sb->on_dead_data = f;
  return register_entry(f, ps, err);
}

bool agsx_pool_sup_claimed(const struct sup *f) { return f->pool && f->pool->claimed; }

size_t agsx_pool_sup_nfds(const struct sup *f) { return f->pool ? 2 : 0; }

size_t agsx_pool_sup_fill(struct sup *f, struct pollfd *p) {
  struct agsx_pool_sup *ps = f->pool;
  if (ps == NULL)
    return 0;
  p[0] = (struct pollfd){.fd = ps->claimed ? -1 : ps->listen_fd, .events = POLLIN};
  p[1] = (struct pollfd){.fd = ps->conn, .events = POLLIN};
  return 2;
}

static void reply(int fd, int type, int code, int e, const char *text) {
  struct agsx_msg m = {.type = type, .code = code, .err = e};
  snprintf(m.text, sizeof(m.text), "%s", text ? text : "");
  agsx_msg_send(fd, &m, NULL, 0);
}

static bool peer_allowed(int fd) {
  struct ucred c;
  socklen_t len = sizeof(c);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &len) < 0)
    return false;
  return c.uid == 0 || c.uid == geteuid();
}

/* The request: the claim and 0 or 3 fds (FDS; more are closed). */
static ssize_t recv_request(int fd, char *buf, size_t cap, int fds[3], size_t *ret_nfds) {
  *ret_nfds = 0;
  struct pollfd p = {.fd = fd, .events = POLLIN};
  if (poll(&p, 1, CLAIM_REQUEST_MS) <= 0)
    return -1;
  int flags = 0;
  ssize_t n = agsx_recv_fds(fd, buf, cap, MSG_DONTWAIT, fds, 3, ret_nfds, &flags);
  if (n > 0 && (flags & (MSG_TRUNC | MSG_CTRUNC)))
    return -1;
  return n;
}

/* The sandbox's command line: the image's Entrypoint, then the claim's
 * command or the image's Cmd (as build_config does for a start; the host
 * image's default is /bin/sh). */
static char **claim_argv(struct sup *f, const struct agsx_claim *c) {
  const struct agsx_image_config *ic = &f->p->info.config;
  if (f->cfg->host_image && agsx_strv_len(c->argv) == 0)
    return agsx_strv_concat((char *[]){"/bin/sh", NULL}, NULL);
  return agsx_strv_concat(ic->entrypoint, agsx_strv_len(c->argv) ? c->argv : ic->cmd);
}

/* The record as the claimed sandbox's: a fresh run's, started now. */
static void record_claim(struct sup *f, const struct agsx_claim *c, const char *hostname) {
  agsx_error_t err = NULL;
  struct agsx_sandbox *sb = f->sb;
  _cleanup_close_ int lock = agsx_record_lock(sb->statefd, sb->id, &err);
  struct agsx_record r;
  if (lock < 0 || agsx_record_read(sb->statefd, sb->id, &r, &err) < 0) {
    agsx_warn("sandbox %.12s: claim: %s", sb->id, err->msg);
    agsx_error_free(&err);
    return;
  }
  free(r.name);
  r.name = c->name ? xstrdup(c->name) : NULL;
  agsx_strv_free(r.argv);
  r.argv = agsx_strv_concat(c->argv, NULL);
  agsx_strv_free(r.env);
  r.env = agsx_strv_concat(c->env, NULL);
  free(r.user);
  r.user = c->user ? xstrdup(c->user) : NULL;
  free(r.cwd);
  r.cwd = xstrdup(c->cwd ? c->cwd : "/");
  if (hostname) {
    free(r.hostname);
    r.hostname = xstrdup(hostname);
  }
  if (c->labels && *c->labels) {
    agsx_strv_free(r.labels);
    r.labels = agsx_strv_concat(c->labels, NULL);
  }
  r.rm = c->rm;
  r.idle = c->idle;
  r.parked = false;
  r.timeout = f->o->timeout;
  r.deadline = f->deadline;
  r.deadline_ns = f->deadline_ns;
  r.started_ns = agsx_now_ns(); /* claimed: what E2B's API reports as its start */
  r.started = r.started_ns / 1000000000LL;
  if (agsx_record_write(sb->statefd, &r, &err) < 0) {
    agsx_warn("sandbox %.12s: claim: %s", sb->id, err->msg);
    agsx_error_free(&err);
  }
  agsx_record_clear(&r);
}

/* The claim's host name, set from here in the sandbox's UTS namespace
 * (entered through the init's pidfd; the supervisor then returns to its
 * own): the parked command may run under agsx's filter already, which
 * denies sethostname (init.c, prepare_parked). Nothing is opened or
 * resolved meanwhile. Not coming back is an error: the claim fails, and
 * the supervisor does nothing that reads its host name before it ends. */
static int set_hostname(struct agsx_pool_sup *ps, int pidfd, const char *name, agsx_error_t *err) {
  if (agsx_rootless()) {
    /* An ordinary user's supervisor could not return to the host's UTS
     * namespace (host/rootless.h): a child sets it and exits. */
    pid_t pid = fork();
    if (pid == 0)
      _exit(setns(pidfd, CLONE_NEWUTS) < 0 || sethostname(name, strlen(name)) < 0 ? 1 : 0);
    int status = 0;
    if (pid < 0)
      return agsx_error_set(err, errno, "fork");
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
      ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      return agsx_error_set(err, EPERM, "set the hostname in the sandbox's UTS namespace");
    return 0;
  }
  if (setns(pidfd, CLONE_NEWUTS) < 0)
    return agsx_error_set(err, errno, "enter the sandbox's UTS namespace");
  int r = sethostname(name, strlen(name)) < 0 ? -errno : 0;
  if (setns(ps->utsfd, CLONE_NEWUTS) < 0)
    return agsx_error_set(err, errno, "return to the supervisor's UTS namespace");
  return r < 0 ? agsx_error_set(err, -r, "set the hostname") : 0;
}

/* Takes the claim C (FDS: the claimer's stdio, or none): 0 claimed, -1
 * refused (still parked: *RET_PARKED) or failed (ERR, *RET_CODE). */
static int take_claim(struct sup *f, struct agsx_claim *c, const int *fds, bool *ret_parked,
                      int *ret_code, agsx_error_t *err) {
  struct agsx_pool_sup *ps = f->pool;
  struct agsx_sandbox *sb = f->sb;
  struct agsx_run_spec *o = (struct agsx_run_spec *)f->o; /* the supervisor's own copy */
  *ret_parked = true;
  *ret_code = 125;
  _cleanup_strv_ char **argv = c->idle ? agsx_strv_concat(NULL, NULL) : claim_argv(f, c);
  if (agsx_strv_len(argv) == 0 && !c->idle)
    return agsx_error_set(err, 0, "no command given and the image has no Cmd or Entrypoint");
  if (c->labels && agsx_labels_check(c->labels, err) < 0)
    return -1;
  if (c->name && agsx_name_claim(sb->statefd, c->name, sb->id, err) < 0)
    return -1;
  if (c->name)
    sb->name = xstrdup(c->name);
  /* Out of the pool: no other claimer can take it from here on. */
  *ret_parked = false;
  ps->claimed = true;
  unlinkat(ps->parked, sb->id, 0);
  agsx_closep(&ps->listen_fd);
  unlinkat(sb->dirfd, CLAIM_SOCKET, 0);
  /* The environment, user and directory as a start computes them. */
  struct agsx_claim to_init = {
      .argv = argv,
      .env = agsx_strv_concat(f->cfg->env, c->env),
      .cwd = c->cwd ? c->cwd : (char *)f->cfg->cwd,
      .user = c->user ? c->user : (char *)f->cfg->user,
      .hostname = c->hostname ? c->hostname : c->name,
      .idle = c->idle,
      .detach = c->idle,
  };
  size_t len;
  _cleanup_free_ char *buf = agsx_claim_encode(&to_init, &len, err);
  int r = buf ? 0 : -1;
  if (r == 0 && to_init.hostname && *to_init.hostname)
    r = set_hostname(ps, sb->pidfd, to_init.hostname, err);
  if (r < 0)
    agsx_sandbox_kill(sb); /* the command never got its claim: it must not wait on */
  else
    r = agsx_sandbox_claim(sb, buf, len, fds, err);
  ps->exec_ns = agsx_mono_ns();
  /* What the record and the end tell: the claim as run. */
  agsx_strv_free(c->argv);
  c->argv = steal_ptr(&argv);
  agsx_strv_free(c->env);
  c->env = to_init.env;
  if (c->cwd == NULL && to_init.cwd)
    c->cwd = xstrdup(to_init.cwd);
  if (c->user == NULL && to_init.user)
    c->user = xstrdup(to_init.user);
  o->name = c->name;
  o->rm = c->rm;
  o->idle = c->idle;
  f->cfg->idle = c->idle;
  o->timeout = c->timeout ? c->timeout : AGSX_DEFAULT_TIMEOUT_SEC;
  if (r < 0) {
    *ret_code = sb->exit_code;
    f->recorded = false; /* as a start that failed: no record stays */
    return -1;
  }
  f->deadline_ns = agsx_now_ns() + (int64_t)o->timeout * 1000000000LL;
  f->deadline = (f->deadline_ns + 500000000LL) / 1000000000LL;
  agsx_sup_arm_deadline(f);
  /* Detached, the record is the claimer's answer (it may exec into the
   * sandbox at once); attached, it follows the answer (on_claim). */
  if (c->detach)
    record_claim(f, c, to_init.hostname);
  return 0;
}

static void on_claim(struct sup *f, int fd) {
  struct agsx_pool_sup *ps = f->pool;
  agsx_error_t err = NULL;
  int fds[3] = {-1, -1, -1};
  size_t nfds = 0;
  _cleanup_free_ char *buf = xmalloc(AGSX_CLAIM_MAX);
  ssize_t n = recv_request(fd, buf, AGSX_CLAIM_MAX, fds, &nfds);
  struct agsx_claim c;
  bool parked = true;
  int code = 125;
  if (n <= 0) {
    /* The claimer died before its claim: still parked. */
  } else if (nfds != 0 && nfds != 3) {
    reply(fd, AGSX_CLAIM_FAIL, 125, EINVAL, "a claim passes 0 or 3 fds");
  } else if (agsx_claim_decode(buf, (size_t)n, &c, &err) < 0) {
    reply(fd, AGSX_CLAIM_FAIL, 125, err->errno_, err->msg);
  } else if (take_claim(f, &c, nfds ? fds : NULL, &parked, &code, &err) < 0) {
    reply(fd, AGSX_CLAIM_FAIL, code, err ? err->errno_ : EIO, err ? err->msg : "claim failed");
    if (parked)
      agsx_claim_clear(&c);
    else
      ps->claim = c; /* the spec points into it */
  } else {
    ps->claim = c;
    struct agsx_msg m = {.type = AGSX_CLAIM_OK,
                         .status = (int)((ps->exec_ns - ps->accepted_ns) / 1000)};
    m.phase_ns[0] = f->sb->child_ns[4]; /* the init's stamp of the command's exec */
    snprintf(m.text, sizeof(m.text), "%s", f->sb->id);
    agsx_msg_send(fd, &m, NULL, 0); /* status: the claimer's --timing */
    if (!c.detach) {
      ps->conn = fcntl(fd, F_DUPFD_CLOEXEC, 3);
      ps->record_due = true; /* settle_record, after any event already pending */
    }
  }
  for (size_t i = 0; i < nfds; i++)
    close(fds[i]); /* the init has them */
  agsx_error_free(&err);
  close(fd);
  if (!parked)
    ps->refill_at = agsx_mono_ns() + REFILL_DEFER_NS;
}

/* The claim's refill, if one is due (NOW: 0, whenever it is pending). */
static void refill_due(struct sup *f, int64_t now) {
  struct agsx_pool_sup *ps = f->pool;
  if (ps->refill_at == 0 || (now && now < ps->refill_at))
    return;
  ps->refill_at = 0;
  if (faccessat(ps->pooldir, POOL_JSON, F_OK, 0) == 0)
    agsx_pool_refill_async(f->o->root, f->o->state, ps->name);
}

/* An attached claim's record (the claimed command, name, user...): written
 * once the supervisor has nothing else to do, not between the answer and a
 * quick command's end (a record read, parse and rewrite: ~0.1 ms). When the
 * command's end is already pending, it is written before the end is
 * handled (ENDING), unless that end removes the record at once (--rm, no
 * `agsx wait` waiter): then nobody could read it. Meanwhile `agsx ls`
 * shows the sandbox as it was parked, for less than a round of the loop. */
static void settle_record(struct sup *f, bool ending) {
  struct agsx_pool_sup *ps = f->pool;
  if (ps == NULL || !ps->record_due)
    return;
  if (!ending) {
    struct pollfd p = {.fd = f->sb->sync, .events = POLLIN};
    if (f->sb->sync >= 0 && poll(&p, 1, 0) > 0)
      return; /* the end (or another event) first: this same round handles it */
  }
  ps->record_due = false;
  if (ending && f->o->rm && f->sb->dirfd >= 0 && !agsx_state_has_waiters(f->sb->dirfd))
    return;
  record_claim(f, &ps->claim, ps->claim.hostname ? ps->claim.hostname : ps->claim.name);
}

int agsx_pool_sup_timeout_ms(const struct sup *f) {
  const struct agsx_pool_sup *ps = f->pool;
  if (ps && ps->record_due)
    return 0;
  if (ps == NULL || ps->refill_at == 0)
    return -1;
  int64_t left = ps->refill_at - agsx_mono_ns();
  return left <= 0 ? 0 : (int)((left + 999999) / 1000000);
}

/* The attached claimer: its signals for the command, or its death (the
 * sandbox dies with it, as with a foreground run's agsx). */
static void on_claimer(struct sup *f) {
  struct agsx_pool_sup *ps = f->pool;
  struct agsx_msg m;
  ssize_t n = agsx_msg_recv(ps->conn, &m, NULL, 0, NULL);
  if (n == -EAGAIN || n == -EINTR)
    return;
  if (n <= 0) {
    agsx_closep(&ps->conn);
    if (!f->stopping) {
      f->stopping = true;
      f->stop_reason = AGSX_STOP_KILLED;
    }
    agsx_sandbox_kill(f->sb);
    return;
  }
  if (m.type == AGSX_CLAIM_SIGNAL && m.code > 0 && m.code < NSIG)
    agsx_sandbox_signal(f->sb, m.code);
}

void agsx_pool_sup_dispatch(struct sup *f, const struct pollfd *p, size_t n) {
  struct agsx_pool_sup *ps = f->pool;
  if (ps == NULL || n < 2)
    return;
  if (ps->record_due)
    settle_record(f, false);
  if (ps->refill_at)
    refill_due(f, agsx_mono_ns());
  if (p[1].revents && ps->conn >= 0)
    on_claimer(f);
  if (!p[0].revents || ps->claimed || f->stopping)
    return;
  int fd = accept4(ps->listen_fd, NULL, NULL, SOCK_CLOEXEC);
  if (fd < 0)
    return;
  ps->accepted_ns = agsx_mono_ns();
  if (!peer_allowed(fd)) {
    close(fd);
    return;
  }
  on_claim(f, fd);
}

/* The attached claimer's answer: how the command ended. */
static void send_end(struct sup *f, int exit_code, const char *error) {
  struct agsx_pool_sup *ps = f->pool;
  struct agsx_msg m = {.type = AGSX_CLAIM_END,
                       .code = exit_code,
                       .status = f->sb->term_signal,
                       .err = (int)f->sb->reason};
  snprintf(m.text, sizeof(m.text), "%s", error ? error : "");
  agsx_msg_send(ps->conn, &m, NULL, 0);
  agsx_closep(&ps->conn);
}

void agsx_pool_sup_ended(struct sup *f) {
  settle_record(f, true);
  if (f->pool)
    f->pool->ended = true;
}

/* sb->on_dead: every process of the claimed sandbox is gone and its end is
 * final. An attached --rm claim is answered now, before the teardown
 * (cgroups, the record's directory: ~10 ms of a claim's 15), once the
 * sandbox is out of every listing: its record file is unlinked (under the
 * record lock: `agsx ls` right after the claimer returns never shows it,
 * `agsx wait` finds it gone as after any --rm) and its name is free again.
 * Not with a waiter (`agsx wait` gets the end record first, as always), nor
 * when the supervisor failed (its error is the answer's). */
static void on_dead(void *data) {
  struct sup *f = data;
  struct agsx_pool_sup *ps = f->pool;
  struct agsx_sandbox *sb = f->sb;
  settle_record(f, true); /* (the loop failed: agsx_pool_sup_ended was not called) */
  if (ps == NULL || !ps->ended || !ps->claimed || ps->conn < 0 || !f->o->rm || !sb->exited ||
      sb->statefd < 0 || sb->dirfd < 0 || agsx_state_has_waiters(sb->dirfd))
    return;
  {
    agsx_error_t err = NULL;
    _cleanup_close_ int lock = agsx_record_lock(sb->statefd, sb->id, &err);
    agsx_error_free(&err);
    if (lock < 0 || (unlinkat(sb->dirfd, "state.json", 0) < 0 && errno != ENOENT))
      return;
  }
  if (sb->name) {
    agsx_name_release(sb->statefd, sb->name, sb->id);
    free(sb->name);
    sb->name = NULL;
  }
  send_end(f, sb->exit_code, NULL);
}

void agsx_pool_sup_end(struct sup *f, int exit_code, const char *error) {
  struct agsx_pool_sup *ps = f->pool;
  if (ps == NULL)
    return;
  if (ps->conn >= 0 && f->sb)
    send_end(f, exit_code, error);
  refill_due(f, 0); /* a claimed command that ended before its refill was due */
  if (!ps->claimed && f->sb) {
    /* Ended unclaimed: replaced at its lifetime's end or its init's death;
     * stopped on request (agsx kill, pool rm) it is not (the next claim of
     * an empty pool refills it). */
    unlinkat(ps->parked, f->sb->id, 0);
    if (f->sb->dirfd >= 0)
      unlinkat(f->sb->dirfd, CLAIM_SOCKET, 0);
    if (f->sb->reason != AGSX_STOP_KILLED && faccessat(ps->pooldir, POOL_JSON, F_OK, 0) == 0)
      agsx_pool_refill_async(f->o->root, f->o->state, ps->name);
  }
}
