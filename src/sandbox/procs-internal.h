/* agsx — sandbox: the supervisor's side of processes.h (internal to the
 * supervisor): the control socket STATE/<id>/ctl and the processes started
 * through it. Two poll components (supervisor.h): the listener with its
 * connections, and the processes' pipes, pty masters and pidfds. Every
 * function accepts a NULL agsx_procs (a sandbox without a control socket). */
#ifndef AGSX_SANDBOX_PROCS_INTERNAL_H
#define AGSX_SANDBOX_PROCS_INTERNAL_H

#include "sandbox/processes.h"
#include "sandbox/seccomp.h"
#include "state/state.h"

#include <poll.h>

struct agsx_procs;
/* Listens on DIRFD/ctl (DIRFD: STATE/<id>, STATEFD: STATE). REC is the
 * sandbox's record (copied; each start reads it again, so a paused
 * sandbox refuses), SECCOMP its program (borrowed), LOG_CAP each process's
 * log cap. */
int agsx_procs_new(int statefd, int dirfd, const struct agsx_record *rec,
                   const struct agsx_seccomp_bpf *seccomp, uint64_t log_cap,
                   struct agsx_procs **ret, agsx_error_t *err);
/* The sandbox has ended: every process is reaped and its log ended; the
 * socket is removed. */
void agsx_procs_end(struct agsx_procs *ps, const char *why);
/* Every process is killed (its tree), reaped and its log ended; the
 * socket stays (a rollback: the sandbox goes on). */
void agsx_procs_kill_all(struct agsx_procs *ps, const char *why);
void agsx_procs_free(struct agsx_procs *ps);

size_t agsx_procs_ctl_nfds(const struct agsx_procs *ps);
size_t agsx_procs_ctl_fill(struct agsx_procs *ps, struct pollfd *p);
void agsx_procs_ctl_dispatch(struct agsx_procs *ps, const struct pollfd *p, size_t n);

size_t agsx_procs_nfds(const struct agsx_procs *ps);
size_t agsx_procs_fill(struct agsx_procs *ps, struct pollfd *p);
void agsx_procs_dispatch(struct agsx_procs *ps, const struct pollfd *p, size_t n);
int agsx_procs_timeout_ms(const struct agsx_procs *ps);

#endif
