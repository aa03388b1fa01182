/* agsx — sandbox: the control protocol, both sides (see control.h). */
#include "config.h"

#include "sandbox/control.h"

#include <poll.h>
#include <string.h>
#include <sys/syscall.h>

/* ---- client side ---- */

int agsx_control_request_stop(int statefd, const char *id, int *ret_pidfd, agsx_error_t *err) {
  struct agsx_record r;
  *ret_pidfd = -1;
  {
    _cleanup_close_ int lock = agsx_record_lock(statefd, id, err);
    if (lock < 0 || agsx_record_read(statefd, id, &r, err) < 0)
      return -1;
    if (r.status == AGSX_STATUS_EXITED) {
      int code = r.exit_code;
      agsx_record_clear(&r);
      return agsx_error_set_quiet(err, ESRCH, "sandbox `%.12s` is not running (exited with %d)", id,
                                  code);
    }
    r.stop_request = true;
    if (agsx_record_write(statefd, &r, err) < 0) {
      agsx_record_clear(&r);
      return -1;
    }
  }
  int fd = agsx_proc_ref_pidfd(&r.supervisor);
  agsx_record_clear(&r);
  if (fd >= 0 && agsx_pidfd_signal(fd, AGSX_SIG_CONTROL, AGSX_CONTROL_STOP) == 0) {
    *ret_pidfd = fd;
    return 0;
  }
  if (fd >= 0)
    close(fd);
  /* The supervisor is gone: reap it ourselves. */
  return agsx_state_reap_one(statefd, id, NULL, err) < 0 ? -1 : 0;
}

/* Waits until MS pass or every supervisor of V has ended (its pidfd is then
 * set to -1 and closed); returns how many are left. */
static size_t wait_supervisors(struct agsx_stopping *v, size_t n, int64_t ms) {
  int64_t deadline = agsx_mono_ns() + ms * 1000000LL;
  struct pollfd *p = xzalloc((n + 1) * sizeof(*p));
  size_t left = 0;
  for (;;) {
    left = 0;
    for (size_t i = 0; i < n; i++) {
      p[i] = (struct pollfd){.fd = v[i].pidfd, .events = POLLIN};
      left += v[i].pidfd >= 0;
    }
    int64_t wait_ms = (deadline - agsx_mono_ns()) / 1000000;
    if (left == 0 || wait_ms <= 0)
      break;
    if (poll(p, n, (int)wait_ms) < 0 && errno != EINTR)
      break;
    for (size_t i = 0; i < n; i++)
      if (p[i].fd >= 0 && p[i].revents)
        agsx_closep(&v[i].pidfd);
  }
  free(p);
  return left;
}

/* The escalation of a stop nobody answers: its supervisor is stuck (stopped,
 * out of resources). STAGE 0: SIGKILL to the sandbox's init, the end of its
 * pid namespace (a live supervisor notices and tears down as usual).
 * STAGE 1: SIGKILL to the supervisor, then the record is marked killed and
 * the cgroup removed as for a crashed supervisor (gc removes its network
 * lease). */
static void escalate(int statefd, struct agsx_stopping *s, int stage,
                     const struct agsx_reap_report *rep) {
  agsx_error_t err = NULL;
  struct agsx_record r;
  if (agsx_record_read(statefd, s->id, &r, &err) < 0) {
    agsx_warn("sandbox %.12s: %s", s->id, err->msg);
    agsx_error_free(&err);
    return;
  }
  if (stage == 0) {
    agsx_warn("sandbox %.12s: its supervisor does not answer: killing the sandbox", s->id);
    agsx_proc_ref_signal(&r.init, SIGKILL, 0);
  } else {
    agsx_warn("sandbox %.12s: its supervisor is stuck: killing it", s->id);
    agsx_pidfd_signal(s->pidfd, SIGKILL, 0);
    if (wait_supervisors(s, 1, 2000) > 0)
      goto out; /* unkillable for now (uninterruptible sleep): reported */
    if (agsx_state_reap_one(statefd, s->id, rep, &err) < 0) {
      agsx_warn("sandbox %.12s: %s", s->id, err->msg);
      agsx_error_free(&err);
    }
  }
out:
  agsx_record_clear(&r);
}

#define ANSWER_MS ((AGSX_STOP_GRACE_SEC + 2) * 1000) /* a stop and its teardown */
#define STUCK_MS 5000                                /* after the sandbox's SIGKILL */

int agsx_control_wait_stopped(int statefd, struct agsx_stopping *v, size_t n,
                              const struct agsx_reap_report *rep, agsx_error_t *err) {
  for (int stage = 0; stage < 2; stage++) {
    if (wait_supervisors(v, n, stage == 0 ? ANSWER_MS : STUCK_MS) == 0)
      return 0;
    for (size_t i = 0; i < n; i++)
      if (v[i].pidfd >= 0)
        escalate(statefd, &v[i], stage, rep);
  }
  size_t left = wait_supervisors(v, n, 0);
  if (left)
    return agsx_error_set_quiet(err, ETIMEDOUT, "%zu sandbox(es) did not stop in time", left);
  return 0;
}

int agsx_control_set_timeout(int statefd, const char *id, const char *name, uint64_t sec,
                             struct agsx_record *ret, bool *ret_gone, agsx_error_t *err) {
  struct agsx_record r;
  {
    _cleanup_close_ int lock = agsx_record_lock(statefd, id, err);
    if (lock < 0 || agsx_record_read(statefd, id, &r, err) < 0)
      return -1;
    if (r.status == AGSX_STATUS_EXITED) {
      agsx_record_clear(&r);
      return agsx_error_set_quiet(err, ESRCH, "sandbox `%s` is not running", name);
    }
    /* The new deadline counts from now, and the 24 h maximum applies. */
    r.deadline_ns = agsx_now_ns() + (int64_t)sec * 1000000000LL;
    r.deadline = (r.deadline_ns + 500000000LL) / 1000000000LL;
    r.timeout = sec;
    if (agsx_record_write(statefd, &r, err) < 0) {
      agsx_record_clear(&r);
      return -1;
    }
  }
  *ret_gone = agsx_proc_ref_signal(&r.supervisor, AGSX_SIG_CONTROL, AGSX_CONTROL_RELOAD) < 0;
  *ret = r;
  return 0;
}

/* ---- supervisor side ---- */

enum agsx_control agsx_control_decode(const struct signalfd_siginfo *si) {
  if ((int)si->ssi_signo != AGSX_SIG_CONTROL)
    return AGSX_CONTROL_NONE;
  if (si->ssi_code == SI_QUEUE && si->ssi_int == AGSX_CONTROL_STOP)
    return AGSX_CONTROL_STOP; /* no fd needed */
  return AGSX_CONTROL_RELOAD;
}

int agsx_control_read(int statefd, const char *id, struct agsx_control_req *ret, bool *ret_retry,
                      agsx_error_t *err) {
  struct agsx_record r;
  *ret_retry = false;
  if (agsx_record_read(statefd, id, &r, err) < 0) {
    int e = agsx_error_errno(err);
    *ret_retry = e == EMFILE || e == ENFILE || e == ENOMEM;
    return -1;
  }
  ret->stop = r.stop_request;
  ret->deadline = r.deadline;
  ret->deadline_ns = r.deadline_ns ? r.deadline_ns : r.deadline * 1000000000LL;
  ret->restart_seq = r.restart_seq;
  agsx_record_clear(&r);
  return 0;
}
