/* agsx — proc: the processes a state record names (struct agsx_proc_ref:
 * a pid and its start time), pinned before they are used.
 *
 * A pid alone can be recycled at any moment. The rule: open a pidfd first
 * (it pins the process: the pid cannot be reused while we hold it), then
 * compare the start time (which proves the pinned process is the one the
 * record names). Anything read through /proc/PID is proven again after the
 * open: the pidfd pins the process but /proc/PID is by number, and the
 * number is only ours while the process is not reaped. */
#ifndef AGSX_PROC_H
#define AGSX_PROC_H

#include "state/state.h"
#include "util/util.h"

/* A pidfd (close-on-exec, as every pidfd) for REF's process, proven to be
 * it. -1 with errno: ESRCH when it is gone or the pid is another process's
 * now; pidfd_open's errno otherwise (ENOSYS before Linux 5.3). */
int agsx_proc_ref_pidfd(const struct agsx_proc_ref *ref);

/* Opens /proc/PID/SUB (SUB "" is /proc/PID itself) with FLAGS (O_CLOEXEC
 * is added) for REF's process, proven before and after the open. -1 with
 * errno (ESRCH as above, or the open's). */
int agsx_proc_ref_open(const struct agsx_proc_ref *ref, const char *sub, int flags);

/* SIG through PIDFD, with VALUE (SI_QUEUE) unless it is 0. Returns 0 or
 * -errno. */
int agsx_pidfd_signal(int pidfd, int sig, int value);
/* SIG (and VALUE) to the process REF names: pidfd first, then the start
 * time check (the pidfd pins the process, so a recycled pid is never
 * signalled). Returns 0 or -errno (-ESRCH: gone). */
int agsx_proc_ref_signal(const struct agsx_proc_ref *ref, int sig, int value);

/* A child of the caller, made by a helper process that first joins
 * namespace NSFD (of type NSTYPE: CLONE_NEWNET, or CLONE_NEWPID with a
 * pidfd or a pid namespace's fd), with clone3 FLAGS | CLONE_PARENT into
 * cgroup CGROUPFD (-1: none). For an ordinary user's agsx
 * (host/rootless.h), which may enter a sandbox's namespaces (the user's
 * namespace owns them) but never return to the host's (the initial user
 * namespace owns those): the caller never leaves its own, and the child
 * is its child all the same. Returns the child's pid with its pidfd in
 * *RET_PIDFD; 0 in the child; -1 with errno. */
pid_t agsx_clone_in_ns(int nsfd, int nstype, uint64_t flags, int cgroupfd, int *ret_pidfd);

#endif
