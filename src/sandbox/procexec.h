/* agsx — procexec: the last steps of a command inside a sandbox, in the
 * process that becomes the command (run's, exec's, build's RUN): session
 * and terminal, working directory, groups and ids, capabilities,
 * no_new_privs, fd sweep, signal state, PATH search, seccomp, exec; and
 * the sandbox files those steps read. Every path is the sandbox's, resolved under the
 * current root (the sandbox's) without magic links, holding no host fd. */
#ifndef AGSX_PROCEXEC_H
#define AGSX_PROCEXEC_H

#include "sandbox/passwd.h"
#include "sandbox/seccomp.h"
#include "util/util.h"

#include <stdbool.h>

/* The last steps of a command inside a sandbox (run's command and exec's):
 * session and terminal, cwd, groups and ids, capabilities, no_new_privs,
 * fd sweep, signal state, the executable's PATH search, seccomp (agsx's
 * baseline, then the command's filter), exec. Every path is resolved
 * before the filters go in, so a filter (an engine's profile without
 * openat2 or open) need only allow execve, as with runc; with new_privs
 * the filters go in before the ids drop and must allow the rest too. On
 * failure an AGSX_MSG_ERROR goes to ERRFD (code 126/127/125). */
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
  /* No no_new_privs (--security-opt no-new-privileges=false): setuid and
   * file capabilities work, up to the sandbox's root and the capability
   * bound (Docker's set). The filters then go in before the ids drop
   * (the kernel needs CAP_SYS_ADMIN without no_new_privs), so they must
   * allow agsx_proc_after_filter's syscalls, as agsx's default does. */
  bool new_privs;
  /* A missing cwd is an error, not made (runc's exec: an engine's exec
   * --cwd naming a missing directory fails; the init's is made, as
   * Docker's and runc's). */
  bool cwd_must_exist;
  unsigned prepared; /* AGSX_PREP_*: steps agsx_proc_prepare has done already */
};
_Noreturn void agsx_proc_exec(const struct agsx_proc_spec *p, int errfd);

/* Steps that depend on nothing of the command, done ahead by a pool's
 * parked command process (sandbox/pool.h) before it waits for its claim,
 * so that the claim does not pay them: the bounding set's drop (Docker's
 * default set: P->caps must be NULL), no_new_privs (unless P->new_privs), every signal's
 * disposition back to the default (the mask stays: it is set at the exec,
 * so no signal reaches the waiting process), and, with AGSX_PREP_SECCOMP
 * in WHAT, P->seccomp's installation. Only for a filter proven to allow
 * every syscall agsx_proc_exec makes after it (agsx_proc_after_filter:
 * agsx's default filter, test/unit/test_pool.c); a custom profile may deny
 * one, and is installed at the exec as for any start. Sets P->prepared to
 * what was done (a failed step and the ones after it are not), so that
 * agsx_proc_exec skips those; -1 with ERR on failure, and the caller must
 * then not exec (it reports ERR when claimed). */
#define AGSX_PREP_BOUNDING 1u
#define AGSX_PREP_NO_NEW_PRIVS 2u
#define AGSX_PREP_SIGNALS 4u
#define AGSX_PREP_SECCOMP 8u
int agsx_proc_prepare(struct agsx_proc_spec *p, unsigned what, agsx_error_t *err);
/* The syscalls a process makes between agsx_proc_prepare's installation
 * of the filter and its exec (a claim's: receive it, stdio, the user's
 * files, cwd, session, ids, capabilities, signal mask, PATH search, exec,
 * an error's report, allocation), native numbers, ending with -1. */
extern const int agsx_proc_after_filter[];
/* The errno execve of ARGV[0] (searched in ENV's PATH under the current
 * root) would fail with before running anything: 0 when found and
 * executable-looking. For a check ahead of the exec itself. */
int agsx_proc_check_exec(char **argv, char **env);
char **agsx_child_build_env(char **in, const char *hostname, const struct agsx_user *u, bool tty);
int agsx_child_open_pty(int *ret_master, int *ret_slave, agsx_error_t *err);
/* Resolves SPEC against the /etc of the current root (inside the sandbox). */
int agsx_child_read_user(const char *spec, struct agsx_user *ret, agsx_error_t *err);

#endif
