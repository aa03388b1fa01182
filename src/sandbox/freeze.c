/* agsx — freeze: pause and unpause a running sandbox (see freeze.h). */
#include "config.h"

#include "sandbox/freeze.h"

#include "sandbox/cgroup.h"

#include <string.h>

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

static int set_frozen(const char *id, bool freeze, agsx_error_t *err) {
  _cleanup_cgroup_ struct agsx_cgroup *cg = NULL;
  if (agsx_cgroup_open(id, &cg, err) < 0) {
    if (agsx_error_errno(err) == ENOENT)
      agsx_error_wrap(err, "the sandbox has no cgroup (started without limits on cgroup v1)");
    return -1;
  }
  return freeze ? agsx_cgroup_freeze(cg, err) : agsx_cgroup_thaw(cg, err);
}

static int change(int statefd, const char *id, bool pause, agsx_error_t *err) {
  struct agsx_record r;
  _cleanup_close_ int lock = -1;
  if (lock_running(statefd, id, &r, &lock, err) < 0)
    return -1;
  int ret = 0;
  if (r.paused == pause)
    ret = agsx_error_set_quiet(err, EALREADY, "sandbox `%.12s` is %s", id,
                               pause ? "paused already" : "not paused");
  else if (set_frozen(id, pause, err) < 0)
    ret = agsx_error_wrap(err, "%s sandbox `%.12s`", pause ? "pause" : "unpause", id);
  if (ret == 0) {
    r.paused = pause;
    r.paused_at = pause ? agsx_now_ns() / 1000000000LL : 0;
    if (agsx_record_write(statefd, &r, err) < 0) {
      /* The record is what everyone goes by: undo. */
      _cleanup_error_ agsx_error_t e = NULL;
      set_frozen(id, !pause, &e);
      ret = -1;
    }
  }
  agsx_record_clear(&r);
  return ret;
}

int agsx_sandbox_pause(int statefd, const char *id, agsx_error_t *err) {
  return change(statefd, id, true, err);
}

int agsx_sandbox_unpause(int statefd, const char *id, agsx_error_t *err) {
  return change(statefd, id, false, err);
}

int agsx_sandbox_freeze_for(int statefd, const char *id, struct agsx_record *ret_rec, int *ret_lock,
                            bool *ret_froze, agsx_error_t *err) {
  _cleanup_close_ int lock = -1;
  *ret_froze = false;
  if (lock_running(statefd, id, ret_rec, &lock, err) < 0)
    return -1;
  if (!ret_rec->paused) {
    if (set_frozen(id, true, err) < 0) {
      agsx_record_clear(ret_rec);
      return -1;
    }
    *ret_froze = true;
  }
  *ret_lock = steal_fd(&lock);
  return 0;
}

void agsx_sandbox_thaw_for(const char *id, bool froze) {
  _cleanup_error_ agsx_error_t e = NULL;
  if (froze && set_frozen(id, false, &e) < 0)
    agsx_warn("thaw sandbox `%.12s`: %s", id, e->msg);
}
