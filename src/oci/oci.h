/* agsx — oci: the runc-shaped verbs of `agsx-oci` (Podman/conmon,
 * containerd's runc shim and CRI-O drive these).
 *
 * Process model (runtime-spec runtime.md, and what the engines rely on):
 * `create` builds the container and leaves its init blocked before the
 * user's program, then exits; the init is the caller's child (conmon and
 * the shim are subreapers and reap it), in the container's namespaces and
 * cgroup, with no agsx supervisor above it. `start` releases it; the init
 * then applies capabilities, no_new_privs and the two seccomp filters
 * (agsx's baseline, then the engine's) and execs process.args as pid 1.
 *
 * Launch steps, create (P) and the init (C):
 *   P: config.json → parse + policy (refuse before touching anything) →
 *      seccomp programs → a new netns started by a helper (net.h; owned
 *      by the host userns) → ROOT/<id> (EEXIST: taken), lock, record
 *      "creating" → uid range (engine's mappings, a joined userns, or an
 *      agsx lease) → cgroup (systemd's form mapped) → the helper's netns
 *      entered (or one joined by path), net sysctls, ipc/uts/pid joined by
 *      path → clone3 with the stage as working directory (the clone
 *      makes it the init's own: no lookup through the engine's
 *      directories) (a joined userns: by a helper inside it, with
 *      CLONE_PARENT, after P checked its maps) → host namespaces back →
 *      id maps, rlimits, oom_score_adj, cgroup.procs → lease →
 *      GO(stage, start socket, rootfs [idmapped], bind sources, sysfs,
 *      v1: the container's cgroup leaves read-only)
 *   C: become root of the userns (PDEATHSIG until create is done) →
 *      cgroup ns → stage tmpfs → rootfs → the engine's mounts, in order
 *      (P's binds cloned at their turn: mountinfo follows the config),
 *      each destination resolved inside the rootfs → /dev nodes (host
 *      nodes found by number, bound at the container's path) → sysctls →
 *      masked (agsx's ∪ engine's) and read-only paths → MOUNTED
 *   P: prestart, createRuntime hooks → CONT
 *   C: pivot_root → hostname → program check → pty (now C's stdio) →
 *      READY(master)
 *   P: console socket ← master → pid file → record complete → DONE
 *   C: PDEATHSIG off → ACK; waits on start.sock
 *   start: connect → C (AppArmor/SELinux exec attrs where enforced),
 *      the PATH search, then the seccomp filters, execs (EOF on the
 *      socket) → poststart hooks */
#ifndef AGSX_OCI_H
#define AGSX_OCI_H

#include "oci/spec.h"
#include "oci/state.h"
#include "sandbox/seccomp.h"
#include "util/util.h"

struct agsx_oci_global {
  const char *root; /* NULL: the default */
  bool debug;
  bool systemd_cgroup; /* --systemd-cgroup: cgroupsPath is slice:prefix:name */
};

struct agsx_oci_create_opts {
  const char *id, *bundle, *pid_file, *console_socket;
  int preserve_fds;
  bool no_new_keyring;
};
int agsx_oci_create(const struct agsx_oci_global *g, const struct agsx_oci_create_opts *o,
                    agsx_error_t *err);
int agsx_oci_start(const struct agsx_oci_global *g, const char *id, agsx_error_t *err);
/* The state JSON in *RET. */
int agsx_oci_state(const struct agsx_oci_global *g, const char *id, char **ret, agsx_error_t *err);
int agsx_oci_kill(const struct agsx_oci_global *g, const char *id, int sig, bool all,
                  agsx_error_t *err);
int agsx_oci_delete(const struct agsx_oci_global *g, const char *id, bool force, agsx_error_t *err);
int agsx_oci_pause(const struct agsx_oci_global *g, const char *id, bool pause, agsx_error_t *err);
/* The container's host pids as a JSON array in *RET. */
int agsx_oci_ps(const struct agsx_oci_global *g, const char *id, char **ret, agsx_error_t *err);
int agsx_oci_update(const struct agsx_oci_global *g, const char *id, const char *resources_json,
                    size_t len, agsx_error_t *err);
/* list: one JSON array of state objects, or a table when !JSON. */
int agsx_oci_list(const struct agsx_oci_global *g, bool json, char **ret, agsx_error_t *err);
char *agsx_oci_features(void);

struct agsx_oci_exec_opts {
  const char *id;
  const char *process_json; /* --process FILE's text, or NULL: ARGV */
  size_t process_len;
  char **argv; /* with no --process: the command, the container's process otherwise */
  const char *pid_file, *console_socket, *cwd;
  char **env;
  bool detach, tty;
  int preserve_fds;
};
/* Detached: returns 0 once the process runs (pid file written). Foreground:
 * waits and sets *RET_STATUS to its exit code (128+N for signal N); a
 * terminal without a console socket is relayed to the caller's stdio (its
 * terminal raw meanwhile, SIGWINCH passed on as the pty's size). */
int agsx_oci_exec(const struct agsx_oci_global *g, const struct agsx_oci_exec_opts *o,
                  int *ret_status, agsx_error_t *err);

/* Internal, shared by launch*.c and oci.c. */
int agsx_oci_run_hooks(const struct agsx_oci_spec *s, int kind, const char *state_json,
                       agsx_error_t *err);
int agsx_oci_load_seccomp(const char *root, const struct agsx_oci_spec *s,
                          struct agsx_seccomp_bpf *base, struct agsx_seccomp_bpf *eng,
                          agsx_error_t *err);
/* Sends MASTER over the console socket at PATH: one message, one fd. */
int agsx_oci_send_console(const char *path, int master, agsx_error_t *err);
/* P->oomScoreAdj, if set, written for PID (0: the caller). By host root,
 * outside the container's user namespace: lowering a score needs
 * CAP_SYS_RESOURCE in the host's (runc writes it from its nsexec's first
 * stage likewise, for the init and for exec). */
int agsx_oci_oom_score_adj(pid_t pid, const struct agsx_oci_process *p, agsx_error_t *err);
/* Removes the overlay work directory create made beside the engine's. */
void agsx_oci_remove_workdir(const char *path);
int agsx_oci_read_config(int dirfd, struct agsx_oci_spec **ret, agsx_error_t *err);

#endif
