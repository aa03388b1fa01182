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
/* The same, but EAGAIN at once when a change (commit, snapshot, fork,
 * rollback) holds the sandbox: for its supervisor (pause_on_timeout),
 * which must never wait on a client that may be waiting on it. */
int agsx_sandbox_pause_nowait(int statefd, const char *id, agsx_error_t *err);
/* Thaws it. ESRCH: not running; EALREADY: not paused. */
int agsx_sandbox_unpause(int statefd, const char *id, agsx_error_t *err);

/* Freezes (FREEZE) or thaws sandbox ID's cgroup, record untouched. A
 * first freeze leaves STATE/<id>/AGSX_FROZEN_MARK, by which the sandbox's
 * stop and end know to thaw it and to remove its v1 freezer cgroup
 * (sandboxes never paused pay nothing for either). */
#define AGSX_FROZEN_MARK "frozen"
int agsx_sandbox_set_frozen(int statefd, const char *id, bool freeze, agsx_error_t *err);
/* After a SIGKILL to sandbox ID's init from outside its supervisor (agsx
 * kill -s KILL): thaws its cgroup if frozen, since v1's freezer holds even
 * a SIGKILLed task, so a paused sandbox, or one frozen by a capture, would
 * not die until thawed (the capture, which checks its freeze as it goes,
 * then gives up). The tasks die at once: a fatal signal is taken before
 * any return to user code. Other signals wait in a frozen sandbox until it
 * is unpaused. */
void agsx_sandbox_thaw_killed(const char *id);
/* True while ID's cgroup is frozen. */
bool agsx_sandbox_is_frozen(const char *id);
/* Takes STATE/<id>/changes.lock (exclusive, blocking): pause, unpause,
 * commit, snapshot, rollback and fork of one sandbox take turns, so that
 * one never thaws what another froze. Returns the lock's fd. */
int agsx_sandbox_lock_changes(int statefd, const char *id, agsx_error_t *err);

#endif
