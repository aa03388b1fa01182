/* agsx — sandbox: the lifecycle of a sandbox, from a spec to its end.
 *
 *   agsx_lifecycle_create   spec → checked spec, id, network lease and
 *                           namespace (made meanwhile by a helper), image
 *                           resolved (pulled through the front end's hook),
 *                           sandbox configuration, seccomp program
 *   agsx_lifecycle_run      foreground: start, supervise, tear down, with the
 *                           caller's stdio (or captured: the --json document)
 *   agsx_lifecycle_detach   a detached supervisor (a grandchild in its own
 *                           session, holding none of the caller's fds) that
 *                           does the same; returns once the command runs
 *
 * The supervisor is one poll loop of components that fill and dispatch
 * (supervisor.h): the sandbox's sync socket, signals (the control protocol,
 * control.h), the deadline timer, captured output, the pty, the firewall
 * watch, the published ports' relay and the DNS relay; detached, also the
 * sandbox's log (STATE/<id>/log: the command's stdout and stderr, the
 * supervisor's warnings) and the control socket with the processes it
 * owns (processes.h). It writes the state record as the sandbox starts and
 * ends (with `rm`, removes it). Every front end (run, browser, build's
 * RUN, the API server) goes through these calls. */
#ifndef AGSX_SANDBOX_LIFECYCLE_H
#define AGSX_SANDBOX_LIFECYCLE_H

#include "net/relay.h"
#include "sandbox/output.h"
#include "sandbox/sandbox.h"
#include "state/state.h"
#include "util/util.h"

#define AGSX_DEFAULT_TIMEOUT_SEC 300

struct agsx_sg_rule;
struct agsx_egress;

/* What to run. Strings are borrowed for the lifecycle's life. */
struct agsx_run_spec {
  const char *root, *state; /* the image store, the state directory */
  const char *image;        /* a reference, or "host" */
  char **cmd;               /* NULL or empty: the image's Cmd (after its Entrypoint) */
  const char *pull;         /* a pull policy, or NULL: $AGSX_PULL, else missing */
  /* Pulls IMAGE when the policy says so (the front end shows progress). */
  int (*pull_image)(void *data, const char *image, agsx_error_t *err);
  void *pull_data;
  char **env;    /* KEY=VALUE, after the image's */
  char **labels; /* KEY=VALUE, into the record (agsx_labels_check) */
  const char *user, *workdir, *hostname, *name;
  const char *seccomp; /* a profile file, "unconfined", or NULL: the default */
  /* --security-opt no-new-privileges=false: the sandbox's processes start
   * without no_new_privs (setuid works inside; sandbox/procexec.h). */
  bool new_privs;
  struct agsx_bind *binds;
  size_t n_binds;
  const char *network;              /* internal (NULL), public or vpc:NAME */
  const struct agsx_sg_rule *rules; /* vpc only */
  size_t n_rules;
  const struct agsx_egress *egress; /* public, vpc: egress rules (net/egress.h), or NULL */
  struct agsx_port *ports;          /* published; the host ports are filled in as bound */
  size_t n_ports;
  uint64_t timeout;            /* seconds; 0: AGSX_DEFAULT_TIMEOUT_SEC */
  uint64_t memory, pids, disk; /* 0: the defaults */
  double cpus;                 /* 0: no limit */
  bool read_only, rm, timing;
  /* Detached, for a caller that exits right after the start (the CLI): the
   * supervisor may stay its child, a fork less; the caller's exit
   * reparents it. A caller that lives on (a server) leaves this false and
   * gets a grandchild, which it never has to reap. */
  bool caller_exits;
  /* No command: the sandbox's init only reaps until the sandbox is stopped
   * or reaches its deadline; its processes come through processes.h (API
   * sandboxes, whose images may have no shell). Detached only. */
  bool idle;
  /* At the deadline the sandbox is paused (sandbox/freeze.h: processes
   * frozen, memory kept) instead of stopped, and stays so until it is
   * unpaused with a new deadline (the API's lifecycle.onTimeout "pause").
   * Detached only; kept in the record. */
  bool pause_on_timeout;
  /* A parked sandbox of pool POOL (sandbox/pool.h): set up, then waiting
   * for a claim, which brings the command. Detached only. */
  const char *pool;
  /* Foreground stdio: the caller's stdin (interactive), a pty (tty), or
   * stdout and stderr captured for the result document (capture). */
  bool interactive, tty, capture;
  int64_t t0; /* the front end's start (agsx_mono_ns) for durations; 0: now */
  /* Build's RUN: the root from these layers (lowest first) instead of
   * IMAGE's (which only names it then), the upper directory handed back
   * (agsx_lifecycle_sandbox()->upperfd after the run), no state record, no
   * deadline, the caller's signals left alone, stdout and stderr merged
   * and streamed to ON_OUTPUT, a readable *CANCEL_FD kills the sandbox, and
   * a firewall that cuts the sandbox off kills it too (agsx_lifecycle_cut). */
  char **layers;
  size_t n_layers;
  bool keep_upper, ephemeral, no_timeout, no_signals, cut_kills;
  const int *cancel_fd;
  void (*on_output)(void *data, const char *buf, size_t len);
  void *output_data;
  /* agsx fork (sandbox/snapshot.h): layers of the state directory
   * (STATE/layers/<id>, lowest first) above the image's, and the whole
   * command line (the image's Entrypoint included) instead of CMD. */
  char *const *extra_layers;
  char *const *argv;
  /* The name the record shows for IMAGE (a fork runs its source's image by
   * digest but is listed by the source's image name); NULL: IMAGE. */
  const char *image_name;
};

/* Refuses what would harm the sandbox or the host whoever the caller is:
 * names, hostnames, volume and working-directory paths, combinations. */
int agsx_run_spec_check(const struct agsx_run_spec *spec, agsx_error_t *err);
/* An RFC 1123 hostname of at most 64 characters. */
bool agsx_hostname_is_valid(const char *name);

struct agsx_lifecycle;
int agsx_lifecycle_create(const struct agsx_run_spec *spec, struct agsx_lifecycle **ret,
                          agsx_error_t *err);
void agsx_lifecycle_free(struct agsx_lifecycle *lc);

/* Called in the foreground supervisor: STARTED once the command runs,
 * ENDED when it has ended, before the teardown. */
struct agsx_run_hooks {
  void (*started)(void *data, struct agsx_lifecycle *lc);
  void (*ended)(void *data, struct agsx_lifecycle *lc);
  void *data;
};
/* Runs the sandbox in the foreground until it ends and tears it down.
 * Returns its exit code (125 when it could not start); ERR is set when agsx
 * failed, also after a start (the code is then the command's if it ended). */
int agsx_lifecycle_run(struct agsx_lifecycle *lc, const struct agsx_run_hooks *hooks,
                       agsx_error_t *err);

/* A detached sandbox: its id and its supervisor, which is NOT a child of
 * the caller (a grandchild in its own session, holding none of the
 * caller's fds: a server never reaps supervisors, and a killed server
 * leaves them running). SUPERVISOR_REF proves it (proc.h). */
struct agsx_run_started {
  char id[33];
  pid_t supervisor;
  struct agsx_proc_ref supervisor_ref;
};
int agsx_lifecycle_detach(struct agsx_lifecycle *lc, struct agsx_run_started *ret,
                          agsx_error_t *err);

/* The sandbox (NULL before it started) and what the run measured. */
const struct agsx_sandbox *agsx_lifecycle_sandbox(const struct agsx_lifecycle *lc);
int64_t agsx_lifecycle_prepare_ns(const struct agsx_lifecycle *lc);
/* The start's phases after prepare (run: the sandbox's; detach: the
 * supervisor's, with its fork first and the report last); NULL if none. */
const struct agsx_timing *agsx_lifecycle_timing(const struct agsx_lifecycle *lc);
/* The end after the command: the init's reaping, the cgroups, the record
 * (teardown), and the release of the sandbox's mounts, right after the
 * reaping and on_dead (release: not part of teardown's figure). */
int64_t agsx_lifecycle_teardown_ns(const struct agsx_lifecycle *lc);
int64_t agsx_lifecycle_release_ns(const struct agsx_lifecycle *lc);
/* From the command's start to the supervisor's seeing its end (the
 * command, its reaping by the init, the EXIT message): before teardown. */
int64_t agsx_lifecycle_command_ns(const struct agsx_lifecycle *lc);
/* Whether *CANCEL_FD stopped the run; why the firewall cut it off, or NULL. */
bool agsx_lifecycle_cancelled(const struct agsx_lifecycle *lc);
const char *agsx_lifecycle_cut(const struct agsx_lifecycle *lc);
/* The run's --json document (see agsx_result_json) for EXIT_CODE and ERROR. */
char *agsx_lifecycle_result_json(const struct agsx_lifecycle *lc, int exit_code, const char *error,
                                 size_t *ret_len);

#endif
