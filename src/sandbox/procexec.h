/* agsx — procexec: the last steps of a command inside a sandbox, in the
 * process that becomes the command (run's, exec's, build's RUN): session
 * and terminal, working directory, groups and ids, capabilities,
 * no_new_privs, fd sweep, signal state, seccomp, exec; and the sandbox
 * files those steps read. Every path is the sandbox's, resolved under the
 * current root (the sandbox's) without magic links, holding no host fd. */
#ifndef AGSX_PROCEXEC_H
#define AGSX_PROCEXEC_H

#include "sandbox/passwd.h"
#include "sandbox/seccomp.h"
#include "util/util.h"

#include <stdbool.h>

/* The last steps of a command inside a sandbox (run's command and exec's):
 * session and terminal, cwd, groups and ids, capabilities, no_new_privs,
 * fd sweep, signal state, seccomp, exec. On failure an AGSX_MSG_ERROR goes
 * to ERRFD (code 126/127/125). */
struct agsx_proc_spec {
  char **argv, **env;
  const char *cwd;
  const struct agsx_user *user;
  int tty_slave; /* -1: none */
  const struct agsx_seccomp_bpf *seccomp;
  /* OCI containers (src/oci/): all NULL/0 for agsx's own sandboxes. */
  const uint64_t *caps;                        /* bounding, effective, inheritable, permitted,
                           ambient (a bit each); NULL: Docker's default set */
  const struct agsx_seccomp_bpf *seccomp_base; /* installed before SECCOMP:
                                                  both apply (agsx's baseline
                                                  under an engine's filter) */
  int preserve_fds;                            /* fds 3 .. 3+N-1 stay open across exec (N <= 14) */
};
_Noreturn void agsx_proc_exec(const struct agsx_proc_spec *p, int errfd);
/* The errno execve of ARGV[0] (searched in ENV's PATH under the current
 * root) would fail with before running anything: 0 when found and
 * executable-looking. For a check ahead of the exec itself. */
int agsx_proc_check_exec(char **argv, char **env);
char **agsx_child_build_env(char **in, const char *hostname, const struct agsx_user *u, bool tty);
int agsx_child_open_pty(int *ret_master, int *ret_slave, agsx_error_t *err);
/* Resolves SPEC against the /etc of the current root (inside the sandbox). */
int agsx_child_read_user(const char *spec, struct agsx_user *ret, agsx_error_t *err);

#endif
