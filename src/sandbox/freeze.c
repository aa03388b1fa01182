/* agsx — freeze: pause and unpause a running sandbox (see freeze.h). */
#include "config.h"

#include "sandbox/freeze.h"

#include "host/cgroup.h"
#include "sandbox/control.h"
#include "sandbox/lifecycle.h"

#include <fcntl.h>
#include <string.h>
#include <sys/file.h>

/* The record of ID, running, under its lock (*RET_LOCK). */
static int lock_running(int statefd, const char *id, struct agsx_record *r, int *ret_lock,
                        agsx_error_t *err) {
  _cleanup_close_ int lock = agsx_record_lock(statefd, id, err);
  if (lock < 0 || agsx_record_read(statefd, id, r, err) < 0)
    return -1;
  if (r->status != AGSX_STATUS_RUNNING || !agsx_proc_ref_alive(&r->supervisor)) {
    bool ended = r->status == AGSX_STATUS_EXITED;
    int code = r->exit_code;
    agsx_record_clear(r);
    if (ended)
      return agsx_error_set_quiet(err, ESRCH, "sandbox `%.12s` is not running (exited with %d)", id,
                                  code);
    return agsx_error_set_quiet(err, ESRCH, "sandbox `%.12s` is not running", id);
  }
  *ret_lock = steal_fd(&lock);
  return 0;
}

int agsx_sandbox_set_frozen(int statefd, const char *id, bool freeze, agsx_error_t *err) {
  _cleanup_cgroup_ struct agsx_cgroup *cg = NULL;
  /* Freezing is the freezer's (a cgroup's); stopping every process by
   * signal would be seen by them. */
  if (freeze && agsx_cgroup_limits_off())
    return agsx_error_set(err, ENOTSUP,
                          "freezing a sandbox (pause, snapshot, fork, commit) needs a cgroup, "
                          "and this sandbox has none (agsx info says why)");
  if (freeze) {
    _cleanup_free_ char *mark = xasprintf("%s/" AGSX_FROZEN_MARK, id);
    _cleanup_close_ int fd =
        openat(statefd, mark, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
      return agsx_error_set(err, errno, "mark sandbox `%.12s` frozen", id);
  }
  if (agsx_cgroup_open(id, &cg, err) < 0) {
    if (agsx_error_errno(err) == ENOENT && !freeze) {
      agsx_error_free(err); /* gone: nothing is frozen */
      return 0;
    }
    if (agsx_error_errno(err) == ENOENT)
      agsx_error_wrap(err, "the sandbox has no cgroup (started without limits on cgroup v1)");
    return -1;
  }
  return freeze ? agsx_cgroup_freeze(cg, err) : agsx_cgroup_thaw(cg, err);
}

static int lock_changes(int statefd, const char *id, bool wait, agsx_error_t *err);

static int change(int statefd, const char *id, bool pause, bool wait, agsx_error_t *err) {
  struct agsx_record r;
  _cleanup_close_ int changes = lock_changes(statefd, id, wait, err);
  _cleanup_close_ int lock = -1;
  if (changes < 0 || lock_running(statefd, id, &r, &lock, err) < 0)
    return -1;
  int ret = 0;
  if (r.paused == pause)
    ret = agsx_error_set_quiet(err, EALREADY, "sandbox `%.12s` is %s", id,
                               pause ? "paused already" : "not paused");
  else if (agsx_sandbox_set_frozen(statefd, id, pause, err) < 0)
    ret = agsx_error_wrap(err, "%s sandbox `%.12s`", pause ? "pause" : "unpause", id);
  /* Paused at its deadline (pause_on_timeout): it gets its lifetime again
   * from now, which its supervisor arms on the reload. */
  bool renew = ret == 0 && !pause && r.pause_on_timeout &&
               (r.deadline_ns ? r.deadline_ns : r.deadline * 1000000000LL) <= agsx_now_ns();
  if (ret == 0) {
    r.paused = pause;
    r.paused_at = pause ? agsx_now_ns() / 1000000000LL : 0;
    if (renew) {
      uint64_t sec = r.timeout ? r.timeout : AGSX_DEFAULT_TIMEOUT_SEC;
      r.deadline_ns = agsx_now_ns() + (int64_t)sec * 1000000000LL;
      r.deadline = (r.deadline_ns + 500000000LL) / 1000000000LL;
    }
    if (agsx_record_write(statefd, &r, err) < 0) {
      /* The record is what everyone goes by: undo. */
      _cleanup_error_ agsx_error_t e = NULL;
      agsx_sandbox_set_frozen(statefd, id, !pause, &e);
      ret = -1;
    } else if (renew) {
      agsx_proc_ref_signal(&r.supervisor, AGSX_SIG_CONTROL, AGSX_CONTROL_RELOAD);
    }
  }
  agsx_record_clear(&r);
  return ret;
}

int agsx_sandbox_pause(int statefd, const char *id, agsx_error_t *err) {
  return change(statefd, id, true, true, err);
}

int agsx_sandbox_pause_nowait(int statefd, const char *id, agsx_error_t *err) {
  return change(statefd, id, true, false, err);
}

int agsx_sandbox_unpause(int statefd, const char *id, agsx_error_t *err) {
  return change(statefd, id, false, true, err);
}

bool agsx_sandbox_is_frozen(const char *id) {
  _cleanup_cgroup_ struct agsx_cgroup *cg = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  return agsx_cgroup_open(id, &cg, &e) == 0 && agsx_cgroup_frozen(cg);
}

void agsx_sandbox_thaw_killed(const char *id) {
  _cleanup_cgroup_ struct agsx_cgroup *cg = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_cgroup_open(id, &cg, &e) == 0 && agsx_cgroup_frozen(cg))
    agsx_cgroup_thaw_quiet(cg);
}

int agsx_sandbox_lock_changes(int statefd, const char *id, agsx_error_t *err) {
  return lock_changes(statefd, id, true, err);
}

static int lock_changes(int statefd, const char *id, bool wait, agsx_error_t *err) {
  _cleanup_free_ char *path = xasprintf("%s/changes.lock", id);
  _cleanup_close_ int fd = openat(statefd, path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return agsx_error_set(err, errno == ENOENT ? ESRCH : errno, "lock sandbox `%.12s`", id);
  int r;
  do
    r = flock(fd, wait ? LOCK_EX : LOCK_EX | LOCK_NB);
  while (r < 0 && errno == EINTR);
  if (r < 0 && errno == EWOULDBLOCK)
    return agsx_error_set_quiet(err, EAGAIN, "sandbox `%.12s` is being changed", id);
  if (r < 0)
    return agsx_error_set(err, errno, "lock sandbox `%.12s`", id);
  return steal_fd(&fd);
}
