/* agsx — sandbox: the supervisor's poll loop and its components (see
 * supervisor.h). Each concern is a component with fill and dispatch: the
 * relays, signals and the control protocol, the deadline, the firewall
 * watch, build's cancel fd, captured or logged output, the pty, the control
 * socket and the processes it owns (processes.h), and the sandbox's sync
 * socket last. Nothing in the loop blocks. */
#include "config.h"

#include "sandbox/supervisor.h"
#include "host/rootless.h"
#include "net/network.h"
#include "sandbox/control.h"
#include "sandbox/freeze.h"
#include "sandbox/pool.h"
#include "sandbox/procs-internal.h"
#include "sandbox/snapshot.h"
#include "state/state.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#define GRACE_SEC AGSX_STOP_GRACE_SEC /* SIGTERM → SIGKILL at the deadline */
#define SIG_CONTROL AGSX_SIG_CONTROL
#define RELOAD_RETRY_MS 100
#define PAUSE_RETRY_MS 200

void agsx_sup_arm_deadline(struct sup *f) {
  int64_t ns = f->deadline_ns > 0 ? f->deadline_ns : 1;
  struct itimerspec its = {
      .it_value = {.tv_sec = (time_t)(ns / 1000000000LL), .tv_nsec = (long)(ns % 1000000000LL)}};
  timerfd_settime(f->timerfd, TFD_TIMER_ABSTIME, &its, NULL);
}

/* SIGTERM to every process of the sandbox, then a short grace. */
static void begin_stop(struct sup *f, enum agsx_stop_reason reason) {
  if (f->stopping)
    return;
  f->stopping = true;
  f->stop_reason = reason;
  agsx_sandbox_signal(f->sb, SIGTERM);
  struct itimerspec its = {.it_value = {.tv_sec = GRACE_SEC}};
  timerfd_settime(f->timerfd, 0, &its, NULL);
}

/* pause_on_timeout: the deadline pauses the sandbox and is then off (a
 * client that unpauses it sets a new one, which on_control arms). A change
 * under way (a snapshot's freeze) is waited out by polling, never by
 * blocking the loop; a pause that fails ends the lifetime as usual. */
static bool pause_at_deadline(struct sup *f) {
  agsx_error_t err = NULL;
  struct itimerspec its = {0};
  if (agsx_sandbox_pause_nowait(f->sb->statefd, f->sb->id, &err) < 0) {
    int e = agsx_error_errno(&err);
    if (e == EAGAIN)
      its.it_value.tv_nsec = PAUSE_RETRY_MS * 1000000L;
    else if (e != EALREADY)
      agsx_warn("sandbox %.12s: pause at the deadline: %s: stopping it", f->sb->id, err->msg);
    agsx_error_free(&err);
    if (e != EAGAIN && e != EALREADY)
      return false;
  } else {
    agsx_info("sandbox %.12s: paused at its deadline", f->sb->id);
  }
  timerfd_settime(f->timerfd, 0, &its, NULL);
  return true;
}

static void on_deadline(struct sup *f) {
  uint64_t ticks;
  if (read(f->timerfd, &ticks, sizeof(ticks)) < 0)
    return;
  if (!f->stopping && f->detached && f->o->pause_on_timeout && pause_at_deadline(f))
    return;
  if (!f->stopping) {
    begin_stop(f, AGSX_STOP_TIMEOUT);
  } else if (!f->killed) {
    f->killed = true;
    agsx_sandbox_kill(f->sb);
  }
}

/* `agsx update` and `agsx kill` change the record, then signal us (see
 * AGSX_SIG_CONTROL). Reading the record takes fds: when that fails the
 * supervise loop tries again shortly. */
static void on_restart(struct sup *f, int64_t seq);

static void on_control(struct sup *f) {
  agsx_error_t err = NULL;
  struct agsx_control_req req;
  if (agsx_control_read(f->sb->statefd, f->sb->id, &req, &f->reload_pending, &err) < 0) {
    agsx_error_free(&err);
    return;
  }
  if (req.stop)
    begin_stop(f, AGSX_STOP_KILLED);
  else if (!f->stopping && req.restart_seq > f->restart_seq)
    on_restart(f, req.restart_seq);
  if (!req.stop && !f->stopping && req.deadline != f->deadline) {
    f->deadline = req.deadline;
    f->deadline_ns = req.deadline_ns;
    agsx_sup_arm_deadline(f);
  }
}

static void on_signal(struct sup *f) {
  struct signalfd_siginfo si;
  if (read(f->sigfd, &si, sizeof(si)) != (ssize_t)sizeof(si))
    return;
  int sig = (int)si.ssi_signo;
  enum agsx_control c = agsx_control_decode(&si);
  if (c == AGSX_CONTROL_STOP)
    begin_stop(f, AGSX_STOP_KILLED); /* no fd needed */
  else if (c == AGSX_CONTROL_RELOAD)
    on_control(f);
  else if (sig == SIGWINCH)
    agsx_term_winsize(f->sb->pty_master);
  else if (f->detached && sig == SIGTERM)
    begin_stop(f, AGSX_STOP_KILLED);
  else if (!f->detached)
    agsx_sandbox_signal(f->sb, sig);
}

/* The ruleset changed: a sandbox whose rules went is cut off its network
 * (fail closed); one that cannot be cut off is stopped. */
static void on_firewall(struct sup *f) {
  agsx_error_t err = NULL;
  _cleanup_free_ char *cut = NULL;
  if (f->o->cut_kills) {
    /* A build step whose rules went is cut off and stopped, and fails: its
     * result would lack what it could not fetch. */
    if (agsx_net_attach_watch(f->net, &f->cut, &err) < 0)
      f->cut = xstrdup(err->msg);
    if (f->cut)
      agsx_sandbox_kill(f->sb);
    agsx_error_free(&err);
    return;
  }
  if (agsx_net_attach_watch(f->net, &cut, &err) < 0) {
    agsx_warn("sandbox %.12s: %s: stopping it", f->sb->id, err->msg); /* detached: in its log */
    agsx_error_free(&err);
    begin_stop(f, AGSX_STOP_ERROR);
  } else if (cut) {
    agsx_warn("sandbox %.12s: %s", f->sb->id, cut);
  }
}

/* The relays' share of the fds: the soft limit is raised as far as they
 * could use (after the start: the sandbox keeps the caller's limits), and
 * what is left after AGSX_RELAY_FD_RESERVE (the record, the teardown) is
 * split, the DNS relay getting at most half when ports are published too,
 * so neither can starve the other or the supervisor. */
void agsx_sup_budget_relays(struct sup *f) {
  size_t need_p = agsx_relay_fd_need(f->relay), need_d = agsx_relay_fd_need(f->dns);
  agsx_relay_fd_limit_raise(need_p + need_d + AGSX_RELAY_FD_RESERVE);
  size_t room = agsx_relay_fd_headroom(AGSX_RELAY_FD_RESERVE);
  size_t d = f->relay ? room / 2 : room;
  d = d < need_d ? d : need_d;
  if (f->dns)
    agsx_relay_set_fd_budget(f->dns, d);
  if (f->relay)
    agsx_relay_set_fd_budget(f->relay, room - d);
}

/* The earlier of two poll timeouts (-1: none). */
static int min_timeout(int a, int b) { return a < 0 ? b : b < 0 ? a : a < b ? a : b; }

/* ---- components ---------------------------------------------------------------------------- */

struct component {
  size_t (*nfds)(const struct sup *f);
  size_t (*fill)(struct sup *f, struct pollfd *p);
  void (*dispatch)(struct sup *f, const struct pollfd *p, size_t n);
  int (*timeout_ms)(const struct sup *f); /* NULL: none */
  void (*drain)(struct sup *f);           /* after the command's end; NULL: nothing */
};

static size_t one(const struct sup *f) {
  (void)f;
  return 1;
}

static size_t two(const struct sup *f) {
  (void)f;
  return 2;
}

static size_t put(struct pollfd *p, int fd) {
  *p = (struct pollfd){.fd = fd, .events = POLLIN};
  return 1;
}

/* The published ports' relay and the DNS relay. */
static size_t ports_nfds(const struct sup *f) { return agsx_relay_nfds(f->relay); }
static size_t ports_fill(struct sup *f, struct pollfd *p) { return agsx_relay_fill(f->relay, p); }
static void ports_dispatch(struct sup *f, const struct pollfd *p, size_t n) {
  agsx_relay_dispatch(f->relay, p, n);
}
static int ports_timeout(const struct sup *f) { return agsx_relay_timeout_ms(f->relay); }

static size_t dns_nfds(const struct sup *f) { return agsx_relay_nfds(f->dns); }
static size_t dns_fill(struct sup *f, struct pollfd *p) { return agsx_relay_fill(f->dns, p); }
static void dns_dispatch(struct sup *f, const struct pollfd *p, size_t n) {
  agsx_relay_dispatch(f->dns, p, n);
}
static int dns_timeout(const struct sup *f) { return agsx_relay_timeout_ms(f->dns); }

/* Signals and the control protocol; a reload that could not read the
 * record is retried shortly. */
static size_t sig_fill(struct sup *f, struct pollfd *p) { return put(p, f->sigfd); }
static void sig_dispatch(struct sup *f, const struct pollfd *p, size_t n) {
  (void)n;
  if (f->reload_pending)
    on_control(f);
  if (p[0].revents)
    on_signal(f);
}
static int sig_timeout(const struct sup *f) { return f->reload_pending ? RELOAD_RETRY_MS : -1; }

/* The deadline, then the stop's grace. */
static size_t timer_fill(struct sup *f, struct pollfd *p) { return put(p, f->timerfd); }
static void timer_dispatch(struct sup *f, const struct pollfd *p, size_t n) {
  (void)n;
  if (p[0].revents)
    on_deadline(f);
}

static size_t firewall_fill(struct sup *f, struct pollfd *p) {
  return put(p, f->net && !f->cut ? f->net->watch_fd : -1);
}
static void firewall_dispatch(struct sup *f, const struct pollfd *p, size_t n) {
  (void)n;
  if (p[0].revents)
    on_firewall(f);
}

/* Build's cancel fd. */
static size_t cancel_fill(struct sup *f, struct pollfd *p) {
  return put(p, f->o->cancel_fd && !f->cancelled ? *f->o->cancel_fd : -1);
}
static void cancel_dispatch(struct sup *f, const struct pollfd *p, size_t n) {
  (void)n;
  if (p[0].revents) {
    f->cancelled = true;
    agsx_sandbox_kill(f->sb);
  }
}

/* Output: streamed to build (one pipe), captured for --json, or logged
 * (detached: STATE/<id>/log). */
/* ON_OUTPUT's stream: what is there now; false at EOF (the fd closed). */
static bool stream_read(struct sup *f) {
  char buf[65536];
  ssize_t n = read(f->out[0].fd, buf, sizeof(buf));
  if (n < 0 && (errno == EINTR || errno == EAGAIN))
    return true;
  if (n <= 0) {
    agsx_closep(&f->out[0].fd);
    return false;
  }
  f->o->on_output(f->o->output_data, buf, (size_t)n);
  return true;
}

/* The stream after the end: background processes may hold the pipe, so
 * the sandbox is killed (they die with its init) and the pipe read to EOF. */
static void stream_drain(struct sup *f) {
  agsx_sandbox_kill(f->sb);
  while (f->out[0].fd >= 0) {
    struct pollfd p = {.fd = f->out[0].fd, .events = POLLIN};
    if (poll(&p, 1, 5000) <= 0 || !stream_read(f))
      break;
  }
}

static void log_read(struct sup *f, int i) {
  char buf[65536];
  ssize_t n = read(f->out[i].fd, buf, sizeof(buf));
  if (n < 0 && (errno == EINTR || errno == EAGAIN))
    return;
  if (n <= 0) {
    agsx_closep(&f->out[i].fd);
    return;
  }
  agsx_error_t err = NULL;
  if (agsx_log_write(f->log, i == 0 ? AGSX_LOG_STDOUT : AGSX_LOG_STDERR, buf, (size_t)n, &err) < 0)
    agsx_error_free(&err); /* (the log is where a warning would go) */
}

static size_t output_fill(struct sup *f, struct pollfd *p) {
  return put(p, f->out[0].fd) + put(p + 1, f->out[1].fd);
}
static void output_dispatch(struct sup *f, const struct pollfd *p, size_t n) {
  (void)n;
  if (f->o->on_output && p[0].revents)
    stream_read(f);
  for (int i = 0; i < 2 && !f->o->on_output; i++)
    if (p[i].revents && f->log)
      log_read(f, i);
    else if (p[i].revents)
      agsx_output_read(&f->out[i]);
}
/* Drains what the command wrote before it ended. */
static void output_drain(struct sup *f) {
  if (f->o->on_output) {
    stream_drain(f);
    return;
  }
  for (int i = 0; i < 2 && f->log; i++)
    while (f->out[i].fd >= 0) {
      struct pollfd p = {.fd = f->out[i].fd, .events = POLLIN};
      if (poll(&p, 1, 0) <= 0)
        break;
      log_read(f, i);
    }
  for (int i = 0; i < 2 && !f->log; i++)
    agsx_output_drain(&f->out[i]);
}

/* The pty: the command's output to ours, our stdin (-i) to it. */
static size_t pty_fill(struct sup *f, struct pollfd *p) {
  return put(p, f->master_closed ? -1 : f->sb->pty_master) +
         put(p + 1, f->stdin_closed ? -1 : STDIN_FILENO);
}
static void pty_dispatch(struct sup *f, const struct pollfd *p, size_t n) {
  (void)n;
  if (p[0].revents)
    agsx_copy_fd(f->sb->pty_master, STDOUT_FILENO, &f->master_closed);
  if (p[1].revents)
    agsx_copy_fd(STDIN_FILENO, f->sb->pty_master, &f->stdin_closed);
}
static void pty_drain(struct sup *f) {
  while (!f->master_closed) {
    struct pollfd p = {.fd = f->sb->pty_master, .events = POLLIN};
    if (poll(&p, 1, 50) <= 0)
      break;
    agsx_copy_fd(f->sb->pty_master, STDOUT_FILENO, &f->master_closed);
  }
}

/* The control socket and the processes it started (detached sandboxes). */
static size_t ctl_nfds(const struct sup *f) { return agsx_procs_ctl_nfds(f->procs); }
static size_t ctl_fill(struct sup *f, struct pollfd *p) { return agsx_procs_ctl_fill(f->procs, p); }
static void ctl_dispatch(struct sup *f, const struct pollfd *p, size_t n) {
  agsx_procs_ctl_dispatch(f->procs, p, n);
}

static size_t procs_nfds(const struct sup *f) { return agsx_procs_nfds(f->procs); }
static size_t procs_fill(struct sup *f, struct pollfd *p) { return agsx_procs_fill(f->procs, p); }
static void procs_dispatch(struct sup *f, const struct pollfd *p, size_t n) {
  agsx_procs_dispatch(f->procs, p, n);
}
static int procs_timeout(const struct sup *f) { return agsx_procs_timeout_ms(f->procs); }

/* A pool's sandbox: its claim socket while parked, then the attached
 * claimer's connection (sandbox/pool.h). */
static size_t pool_nfds(const struct sup *f) { return agsx_pool_sup_nfds(f); }
static size_t pool_fill(struct sup *f, struct pollfd *p) { return agsx_pool_sup_fill(f, p); }
static void pool_dispatch(struct sup *f, const struct pollfd *p, size_t n) {
  agsx_pool_sup_dispatch(f, p, n);
}
static int pool_timeout(const struct sup *f) { return agsx_pool_sup_timeout_ms(f); }

/* The sandbox's events: the command's end ends the loop. */
static size_t sync_fill(struct sup *f, struct pollfd *p) { return put(p, f->sb->sync); }
static void sync_dispatch(struct sup *f, const struct pollfd *p, size_t n) {
  (void)n;
  if (!p[0].revents)
    return;
  int r = agsx_sandbox_handle_event(f->sb, &f->loop_err);
  if (r != 0)
    f->done = true;
}

static const struct component components[] = {
    {ports_nfds, ports_fill, ports_dispatch, ports_timeout, NULL},
    {dns_nfds, dns_fill, dns_dispatch, dns_timeout, NULL},
    {one, sig_fill, sig_dispatch, sig_timeout, NULL},
    {one, timer_fill, timer_dispatch, NULL, NULL},
    {one, firewall_fill, firewall_dispatch, NULL, NULL},
    {one, cancel_fill, cancel_dispatch, NULL, NULL},
    {two, output_fill, output_dispatch, NULL, output_drain},
    {two, pty_fill, pty_dispatch, NULL, pty_drain},
    {ctl_nfds, ctl_fill, ctl_dispatch, NULL, NULL},
    {procs_nfds, procs_fill, procs_dispatch, procs_timeout, NULL},
    {pool_nfds, pool_fill, pool_dispatch, pool_timeout, NULL},
    {one, sync_fill, sync_dispatch, NULL, NULL},
};
#define N_COMPONENTS AGSX_ARRAY_SIZE(components)

static struct pollfd *poll_array(struct sup *f, size_t n) {
  if (n > f->pfd_cap) {
    f->pfd_cap = n + n / 2;
    f->pfd = xrealloc(f->pfd, f->pfd_cap * sizeof(*f->pfd));
  }
  return f->pfd;
}

/* One round: every component fills its slice, one poll, every component
 * dispatches its slice. */
static int round_once(struct sup *f, agsx_error_t *err) {
  size_t need = 0, at[N_COMPONENTS], cnt[N_COMPONENTS], k = 0;
  for (size_t i = 0; i < N_COMPONENTS; i++)
    need += components[i].nfds(f);
  struct pollfd *p = poll_array(f, need);
  int ms = -1;
  for (size_t i = 0; i < N_COMPONENTS; i++) {
    at[i] = k;
    k += cnt[i] = components[i].fill(f, p + k);
    if (components[i].timeout_ms)
      ms = min_timeout(ms, components[i].timeout_ms(f));
  }
  if (poll(p, k, ms) < 0)
    return errno == EINTR ? 0 : agsx_error_set(err, errno, "poll");
  for (size_t i = 0; i < N_COMPONENTS && !f->done; i++)
    components[i].dispatch(f, p + at[i], cnt[i]);
  return 0;
}

/* Runs until the command ends; returns 0 or -1 (err set). */
int agsx_supervise(struct sup *f, agsx_error_t *err) {
  f->stdin_closed = !(f->o->interactive && f->sb->pty_master >= 0);
  f->master_closed = f->sb->pty_master < 0;
  f->done = false;
  while (!f->done)
    if (round_once(f, err) < 0)
      return -1;
  if (f->loop_err) {
    *err = steal_ptr(&f->loop_err);
    return -1;
  }
  for (size_t i = 0; i < N_COMPONENTS; i++)
    if (components[i].drain)
      components[i].drain(f);
  return 0;
}

/* ---- rollback: the sandbox restarted on a snapshot (sandbox/snapshot.h) ---------------------
 * The client records the snapshot's layers and a request number, then
 * signals a reload. The old sandbox is killed and destroyed (its snapshots
 * kept), and the same configuration starts again on the image's layers
 * plus the snapshot's, with an empty writable layer, in the same network
 * namespace (address, veth, published ports and DNS relay stay), under the
 * same id, name and deadline; the control socket and the sandbox's log go
 * on. The answer goes in the record. */

/* The old command's output is drained into the log and the new command
 * gets fresh pipes to it (the first ones' write ends were closed after the
 * first start). */
static int renew_log_pipes(struct sup *f, int pipes[2][2], agsx_error_t *err) {
  for (int i = 0; i < 2; i++) {
    while (f->out[i].fd >= 0) {
      struct pollfd p = {.fd = f->out[i].fd, .events = POLLIN};
      if (poll(&p, 1, 0) <= 0)
        break;
      log_read(f, i);
    }
    agsx_closep(&f->out[i].fd);
  }
  for (int i = 0; i < 2; i++) {
    if (pipe2(pipes[i], O_CLOEXEC) < 0)
      return agsx_error_set(err, errno, "pipe");
    f->cfg->stdio[1 + i] = pipes[i][1];
  }
  return 0;
}

static int make_sysfs(void *data) {
  (void)data;
  return agsx_net_new_sysfs(NULL);
}

static int restart_netns(struct sup *f, agsx_error_t *err) {
  struct agsx_sandbox_config *cfg = f->cfg;
  agsx_closep(&cfg->netns);
  agsx_closep(&cfg->sysfs);
  cfg->netns = fcntl(f->sb->netns, F_DUPFD_CLOEXEC, 3);
  if (cfg->netns < 0)
    return agsx_error_set(err, errno, "keep the network namespace");
  /* The old sysfs mount went with the old mount namespace: a new one of
   * the same network namespace (the supervisor has no threads). An
   * ordinary user's supervisor could not come back from it: a child
   * makes it (host/rootless.h). */
  if (agsx_rootless()) {
    cfg->sysfs = agsx_fd_from_ns(cfg->netns, CLONE_NEWNET, make_sysfs, NULL);
    if (cfg->sysfs < 0)
      return agsx_error_set(err, errno, "the sandbox's sysfs");
    cfg->netns_job = NULL;
    cfg->on_netns = NULL;
    return 0;
  }
  _cleanup_close_ int host = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (host < 0 || setns(cfg->netns, CLONE_NEWNET) < 0)
    return agsx_error_set(err, errno, "enter the sandbox's network namespace");
  cfg->sysfs = agsx_net_new_sysfs(err);
  if (setns(host, CLONE_NEWNET) < 0)
    abort(); /* never go on in the sandbox's namespace */
  if (cfg->sysfs < 0)
    return -1;
  cfg->netns_job = NULL;
  cfg->on_netns = NULL; /* the DNS relay is bound in it already */
  return 0;
}

static int restart(struct sup *f, char *const *layers, agsx_error_t *err) {
  if (!f->detached || f->o->tty || f->o->capture || f->o->on_output || f->o->ephemeral ||
      f->o->interactive)
    return agsx_error_set(err, ENOTSUP, "rollback restarts detached sandboxes only (agsx run -d)");
  struct prepared *p = f->p;
  struct agsx_sandbox_config *cfg = f->cfg;
  _cleanup_strv_ char **paths = agsx_strv_concat(p->info.layer_paths, NULL);
  for (size_t i = 0; layers && layers[i]; i++) {
    if (!agsx_snapshot_layer_id_is_valid(layers[i]))
      return agsx_error_set(err, EINVAL, "invalid layer id `%s`", layers[i]);
    _cleanup_free_ char *path = xasprintf("%s/layers/%s", f->o->state, layers[i]);
    agsx_strv_push(&paths, path);
  }
  if (restart_netns(f, err) < 0)
    return -1;
  cfg->restart = true;
  struct agsx_sandbox *old = f->sb;
  old->keep_snapshots = true;
  agsx_sandbox_kill(old);
  /* Its processes (exec's, a code context's) are ours, in its pid
   * namespace: reaped before the destroy waits for the init, which cannot
   * finish exiting while one of them is an unreaped zombie of ours. */
  agsx_procs_kill_all(f->procs, "the sandbox was rolled back");
  _cleanup_error_ agsx_error_t derr = NULL;
  if (agsx_sandbox_destroy(old, &derr) < 0)
    agsx_warn("sandbox %.12s: rollback: %s", old->id, derr->msg);
  agsx_strv_free(p->layers);
  p->layers = steal_ptr(&paths);
  cfg->layers = p->layers;
  cfg->n_layers = agsx_strv_len(p->layers);
  int pipes[2][2] = {{-1, -1}, {-1, -1}};
  struct agsx_sandbox *sb = NULL;
  int r = f->log ? renew_log_pipes(f, pipes, err) : 0;
  if (r == 0)
    r = agsx_sandbox_start(cfg, &sb, err);
  for (int i = 0; i < 2; i++) {
    agsx_closep(&pipes[i][1]);
    f->out[i].fd = pipes[i][0];
    if (f->out[i].fd >= 0)
      fcntl(f->out[i].fd, F_SETFL, O_NONBLOCK);
  }
  if (r < 0) {
    /* Nothing runs any more: the sandbox ends (as after its command). */
    agsx_sandbox_free(sb);
    f->sb = old;
    return -1;
  }
  f->sb = sb;
  agsx_sandbox_free(old);
  return 0;
}

/* Writes how the restart went into the record. */
static void record_restart(struct sup *f, int64_t seq, int rc, const char *error, char ***layers) {
  int statefd = f->sb->statefd;
  struct agsx_record r;
  _cleanup_error_ agsx_error_t rerr = NULL;
  _cleanup_close_ int lock = agsx_record_lock(statefd, f->sb->id, &rerr);
  if (lock < 0 || agsx_record_read(statefd, f->sb->id, &r, &rerr) < 0)
    return;
  r.restarted_seq = seq;
  free(r.restart_error);
  r.restart_error = rc < 0 ? xstrdup(error ? error : "restart failed") : NULL;
  if (rc == 0) {
    agsx_strv_free(r.layers);
    r.layers = steal_ptr(layers);
    r.init.pid = f->sb->init_pid;
    r.init.start_time = agsx_proc_start_time(f->sb->init_pid);
    r.tmpfs_fd = f->sb->tmpfsfd;
    r.slot = f->sb->ids.slot;
    r.uid_base = f->sb->ids.base;
    r.paused = false;
    r.paused_at = 0;
  }
  _cleanup_error_ agsx_error_t werr = NULL;
  agsx_record_write(statefd, &r, &werr);
  agsx_record_clear(&r);
}

static void on_restart(struct sup *f, int64_t seq) {
  f->restart_seq = seq;
  agsx_error_t err = NULL;
  struct agsx_record r;
  _cleanup_strv_ char **layers = NULL;
  bool abandoned = false;
  {
    _cleanup_close_ int lock = agsx_record_lock(f->sb->statefd, f->sb->id, &err);
    if (lock >= 0 && agsx_record_read(f->sb->statefd, f->sb->id, &r, &err) == 0) {
      layers = steal_ptr(&r.restart_layers);
      abandoned = r.restart_by.pid > 0 && !agsx_proc_ref_alive(&r.restart_by);
      agsx_record_clear(&r);
    }
  }
  if (abandoned) {
    /* Its agsx rollback was killed before we took it up: nobody wants it. */
    record_restart(f, seq, -1, "its agsx rollback ended first: dropped", &layers);
    return;
  }
  int rc = err ? -1 : restart(f, layers, &err);
  record_restart(f, seq, rc, err ? err->msg : NULL, &layers);
  if (rc < 0)
    begin_stop(f, AGSX_STOP_ERROR);
  agsx_error_free(&err);
}
