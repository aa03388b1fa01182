/* agsx — exec: a command in a running sandbox.
 *
 * The command joins the sandbox's namespaces (through a pidfd of its init,
 * so a recycled pid cannot be joined) and a child cgroup of the sandbox's
 * own, then takes exactly the restrictions of the sandbox's command:
 * the same uid map, Docker's capability set, no_new_privs, the same seccomp
 * program, the fd sweep (agsx_proc_exec, shared with run). The child cgroup
 * lets --timeout kill the command's whole process tree; processes it leaves
 * behind on a normal exit keep running, as with `docker exec`. */
#ifndef AGSX_EXEC_H
#define AGSX_EXEC_H

#include "host/cgroup.h"
#include "sandbox/seccomp.h"
#include "state/state.h"

#include <sys/ioctl.h>

struct agsx_exec_config {
  char **argv;
  char **env;             /* added to the sandbox's environment; later entries win */
  const char *cwd, *user; /* NULL: the sandbox's */
  bool tty;
  int stdio[3];
  const struct agsx_seccomp_bpf *seccomp; /* NULL: none (the sandbox had none) */
  /* tty: the terminal's size from its first instruction on, or NULL */
  const struct winsize *winsize;
};

struct agsx_exec {
  pid_t pid;
  int pidfd;
  int pty_master;
  struct agsx_cgroup *cg;
  int exit_code, term_signal;
};

/* Starts the command; returns once it was exec'd. A command that cannot be
 * executed fails with ret_code 126/127 (and err), anything else 125. */
int agsx_exec_start(const struct agsx_record *rec, const struct agsx_exec_config *cfg,
                    struct agsx_exec **ret, int *ret_code, agsx_error_t *err);
/* Reaps the command (its pidfd is readable). */
void agsx_exec_reap(struct agsx_exec *e);
/* Kills the command's whole process tree. */
void agsx_exec_kill_tree(struct agsx_exec *e);
/* Removes the exec cgroup when nothing is left in it; frees. */
void agsx_exec_free(struct agsx_exec *e);

#endif
