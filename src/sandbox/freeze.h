/* agsx — freeze: pausing and resuming a running sandbox (`agsx pause`,
 * `agsx unpause`, the API server's pause and connect).
 *
 * Pausing freezes every process of the sandbox through its cgroup (v2
 * cgroup.freeze; v1 the freezer hierarchy, whose cgroup is made at the
 * first pause: see agsx_cgroup_freeze): they stop where they are, memory,
 * open files and connections kept (a peer's data waits in the socket
 * buffers). The record says `paused` (status `paused` in ls, inspect and
 * --json). Under the record's lock, so a pause and an unpause never cross.
 *
 * While paused the deadline keeps counting (as E2B's timeout does): at the
 * deadline, and on `agsx kill`, the supervisor's SIGTERM thaws the sandbox
 * (agsx_sandbox_signal) so it can act on it, and SIGKILL follows after the
 * usual grace; whatever destroys a cgroup thaws it first. Nothing is left
 * frozen. `exec` into a paused sandbox is refused. */
#ifndef AGSX_SANDBOX_FREEZE_H
#define AGSX_SANDBOX_FREEZE_H

#include "state/state.h"
#include "util/util.h"

/* Freezes sandbox ID (an id: resolve names with agsx_state_resolve). ESRCH:
 * not running; EALREADY: paused already. */
int agsx_sandbox_pause(int statefd, const char *id, agsx_error_t *err);
/* Thaws it. ESRCH: not running; EALREADY: not paused. */
int agsx_sandbox_unpause(int statefd, const char *id, agsx_error_t *err);

/* For commit and snapshot: freezes ID unless it is paused already, under
 * its lock held in *RET_LOCK (the caller closes it after
 * agsx_sandbox_thaw_for). *RET_FROZE: this call froze it. */
int agsx_sandbox_freeze_for(int statefd, const char *id, struct agsx_record *ret_rec, int *ret_lock,
                            bool *ret_froze, agsx_error_t *err);
void agsx_sandbox_thaw_for(const char *id, bool froze);

#endif
