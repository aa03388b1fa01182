/* agsx — sandbox: warm pools (`agsx pool`, `agsx run --pool`, `serve --pool`).
 *
 * A pool is SIZE parked sandboxes of one configuration (image, network,
 * limits, volumes, seccomp, default env/user/workdir). A parked sandbox is
 * an ordinary detached sandbox, owned by its own supervisor, whose init has
 * done every step of the launch (namespaces, id map, cgroup, address,
 * rootfs, seccomp compiled) and waits before the command's fork
 * (sandbox.h: cfg->park). There is no pool daemon:
 *
 *   STATE/pools/<name>/pool.json    the configuration (written once)
 *   STATE/pools/<name>/lock         flock: one refill (or rm) at a time
 *   STATE/pools/<name>/parked/<id>  one per parked sandbox: the manifest
 *                                   digest it runs (empty: the host
 *                                   image); made by its supervisor
 *                                   once it is ready, removed by it when it
 *                                   is claimed or ends
 *   STATE/<id>/claim                the parked supervisor's claim socket
 *
 * Claim: the claimer takes an exclusive non-blocking flock of a
 * parked/<id> file, checks it is still linked (st_nlink) and that its
 * digest is what the pool's image resolves to now, and sends the claim
 * over STATE/<id>/claim (with its stdin, stdout and stderr in SCM_RIGHTS
 * when attached). The supervisor unlinks parked/<id> before it answers, and
 * the claimer keeps the flock until the answer: two claimers never get the
 * same sandbox. A claimer killed mid-claim lets go of the flock (the
 * sandbox stays parked if the claim never arrived); a dead supervisor's
 * entry is unlinked by the claimer that finds its socket dead, or by gc.
 *
 * Refill: the supervisor of a sandbox that leaves the pool (claimed, or
 * ended unclaimed: its lifetime, a kill) starts a detached refiller, which
 * takes the pool's lock (blocking, so refills queue instead of being lost),
 * counts the live entries and starts sandboxes until SIZE are parked. The
 * claimer's path stays one connect and one answer; the pool refills even
 * when the claimer exits at once.
 *
 * Lifetime: a parked sandbox lives the pool's lifetime (create --timeout,
 * default 1h) and is then replaced; a claim restarts the deadline from the
 * claim (the claimer's --timeout, default 5m). */
#ifndef AGSX_SANDBOX_POOL_H
#define AGSX_SANDBOX_POOL_H

#include "sandbox/lifecycle.h"
#include "sandbox/output.h"
#include "util/util.h"

#define AGSX_POOL_DIR "pools"
#define AGSX_POOL_MAX_SIZE 1024
#define AGSX_POOL_DEFAULT_LIFETIME 3600
#define AGSX_CLAIM_MAX (256u << 10) /* an encoded claim */

/* ---- the configuration ---- */
struct agsx_pool_config {
  char *name;
  char *image, *image_digest; /* as given; the manifest at create (informative; NULL: host) */
  unsigned size;
  uint64_t lifetime; /* a parked sandbox's, seconds */
  char *network;     /* NULL: internal */
  uint64_t memory, pids, disk;
  double cpus;
  bool read_only;
  char *seccomp;  /* NULL: the default */
  bool new_privs; /* --security-opt no-new-privileges=false */
  struct agsx_bind *binds;
  size_t n_binds;
  char **env; /* defaults a claim adds to */
  char *user, *workdir;
  int64_t created;
};
void agsx_pool_config_clear(struct agsx_pool_config *pc);
bool agsx_pool_name_is_valid(const char *name);

/* Creates pool NAME of SIZE sandboxes from SPEC (image, network, limits,
 * volumes, seccomp, env, user, workdir, timeout = the parked lifetime; no
 * command, ports, rules, egress, name, tty) and fills it before returning.
 * EEXIST: the pool exists. A failed fill removes the pool again. */
int agsx_pool_create(const struct agsx_run_spec *spec, const char *name, unsigned size,
                     agsx_error_t *err);
/* ENOENT "no such pool". */
int agsx_pool_read(const char *state, const char *name, struct agsx_pool_config *ret,
                   agsx_error_t *err);
/* The spec of one of the pool's sandboxes (strings borrowed from PC). */
void agsx_pool_spec(const struct agsx_pool_config *pc, const char *root, const char *state,
                    struct agsx_run_spec *ret);
/* Refuses (EINVAL, a clear message) a claim's SPEC that sets what a claim
 * cannot change (image, network, limits, volumes, seccomp, read-only,
 * ports, rules, egress, a terminal) to something else than the pool's;
 * what SPEC leaves unset (NULL, 0) is the pool's. */
int agsx_pool_check(const struct agsx_pool_config *pc, const struct agsx_run_spec *spec,
                    agsx_error_t *err);

/* Starts sandboxes until SIZE are parked (under the pool's lock). A pool
 * that is gone is no error. */
int agsx_pool_fill(const char *root, const char *state, const char *name, agsx_error_t *err);

/* The same in a detached refiller (a grandchild in its own session that
 * holds nothing of the caller's); returns at once. */
void agsx_pool_refill_async(const char *root, const char *state, const char *name);

struct agsx_pool_info {
  struct agsx_pool_config config;
  unsigned parked; /* live entries now */
};
int agsx_pool_list(const char *state, struct agsx_pool_info **ret, size_t *ret_n,
                   agsx_error_t *err);
void agsx_pool_list_free(struct agsx_pool_info *v, size_t n);
/* Removes pool NAME: no more refills, every parked sandbox stopped (and
 * waited for), the directory removed. Claimed sandboxes go on. */
int agsx_pool_remove(const char *state, const char *name, agsx_error_t *err);
/* gc: entries of dead supervisors, pools a crashed rm left, parked
 * sandboxes of pools that are gone. */
void agsx_pool_gc(const char *state, bool dry_run, void (*report)(const char *what, void *data),
                  void *data);

/* ---- claims ---- */
struct agsx_claim {
  char **argv;   /* empty: the image's Cmd (after its Entrypoint) */
  char **env;    /* KEY=VALUE after the pool's */
  char **labels; /* KEY=VALUE, into the record */
  char *cwd, *user, *name, *hostname;
  uint64_t timeout; /* seconds from the claim; 0: AGSX_DEFAULT_TIMEOUT_SEC */
  bool rm, detach;
  /* No command (lifecycle.h's idle: the API server's sandboxes, whose
   * processes come through processes.h); detached. */
  bool idle;
};
void agsx_claim_clear(struct agsx_claim *c);
/* The wire form (the claim socket, and the supervisor to the init). */
char *agsx_claim_encode(const struct agsx_claim *c, size_t *ret_len, agsx_error_t *err);
int agsx_claim_decode(const char *buf, size_t len, struct agsx_claim *ret, agsx_error_t *err);

struct agsx_pool_claimed {
  char id[33];
  int conn; /* attached: the connection the end comes on (agsx_pool_claim_wait) */
  /* --timing: when the claim's connect began and its answer came
   * (agsx_mono_ns), and the supervisor's own part, from its accept to the
   * command's exec (us; 0: not told). */
  int64_t sent_ns, answered_ns;
  int supervisor_us;
  /* When the command's execve completed (agsx_mono_ns), as the sandbox's
   * init saw it (EOF on its exec pipe, which closes at the exec); 0: not
   * told. */
  int64_t exec_ns;
};
/* Claims a parked sandbox of pool PC for CL. FDS: the command's stdin,
 * stdout, stderr (attached), or NULL (CL->detach: the sandbox's log).
 * *RET_CLAIMED false: the pool had none to give (start one cold). -1: the
 * claim failed like a start fails (*RET_CODE 125, 126 or 127, ERR). */
int agsx_pool_claim(const char *root, const char *state, const struct agsx_pool_config *pc,
                    const struct agsx_claim *cl, const int fds[3], bool *ret_claimed,
                    struct agsx_pool_claimed *ret, int *ret_code, agsx_error_t *err);

struct agsx_claim_end {
  int exit_code, signal;
  char stop_reason[16];
  char *error; /* agsx failed, or NULL */
};
/* An attached claim: forwards the caller's SIGINT, SIGTERM, SIGHUP,
 * SIGQUIT, SIGUSR1, SIGUSR2 to the command (blocked from the claim on, and
 * left blocked: the caller exits with the command's status, not of a late
 * signal), reads OUT (captured stdout and stderr, fd -1: none) meanwhile,
 * and returns its end. Closes CONN. */
int agsx_pool_claim_wait(int conn, struct agsx_output out[2], struct agsx_claim_end *ret,
                         agsx_error_t *err);

/* Messages on the claim socket after the request (struct agsx_msg). */
enum {
  AGSX_CLAIM_OK = 100, /* S→C: text = the id */
  AGSX_CLAIM_FAIL,     /* S→C: code 125/126/127, err, text */
  AGSX_CLAIM_SIGNAL,   /* C→S: code = a signal for the command */
  AGSX_CLAIM_END,      /* S→C: code = exit code, status = signal, err = stop reason, text */
};

/* ---- the supervisor's side (lifecycle.c, supervisor.c) ---- */
struct sup;
struct pollfd;
/* After the start of a pool's sandbox: its claim socket and its entry. */
int agsx_pool_sup_park(struct sup *f, agsx_error_t *err);
size_t agsx_pool_sup_nfds(const struct sup *f);
size_t agsx_pool_sup_fill(struct sup *f, struct pollfd *p);
void agsx_pool_sup_dispatch(struct sup *f, const struct pollfd *p, size_t n);
/* The poll timeout for a claim's deferred refill, or -1. */
int agsx_pool_sup_timeout_ms(const struct sup *f);
/* The supervisor's loop ended without error (the command's end is known):
 * an attached --rm claimer is then answered as soon as the sandbox's
 * processes are gone, before its teardown (sb->on_dead). */
void agsx_pool_sup_ended(struct sup *f);
/* After the end (EXIT_CODE as a foreground run would return it): the
 * attached claimer told (unless it was already), the entry gone, a refill
 * started. */
void agsx_pool_sup_end(struct sup *f, int exit_code, const char *error);
void agsx_pool_sup_free(struct sup *f);
bool agsx_pool_sup_claimed(const struct sup *f);

#endif
