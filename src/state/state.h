/* agsx — state: sandbox records under STATE (default /run/agsx).
 *
 *   STATE/<id>/state.json   the record (written as temp + rename, under an
 *                           flock of STATE/<id>); STATE/<id> is also where
 *                           the sandbox's tmpfs is mounted, in the sandbox's
 *                           own mount namespace only
 *   STATE/names/<name>      a symlink to <id>: created with symlinkat(), which
 *                           fails if the name exists, so exactly one of two
 *                           racing `run --name x` wins
 *   STATE/slots/<n>         uid range locks (userns.h)
 *   STATE/cache/            compiled seccomp programs
 *
 * A pid in a record is trusted only with its start time (field 22 of
 * /proc/PID/stat): a recycled pid never passes for the supervisor. A record
 * that cannot be parsed (damaged: records are replaced whole, so that is
 * never a write in progress) is never fatal: `ls` lists it as `unknown`
 * with a warning naming the file, `gc` stops what is left of its sandbox
 * and removes it. */
#ifndef AGSX_STATE_H
#define AGSX_STATE_H

#include "util/json.h"
#include "net/relay.h"
#include "util/util.h"

#define AGSX_STATE_DEFAULT "/run/agsx"
#define AGSX_RECORD_MAX (1u << 20)
#define AGSX_NAME_MAX 64

/* UNKNOWN is never written: it marks a damaged record that
 * agsx_state_load returns on request (AGSX_LOAD_DAMAGED). */
enum agsx_status {
  AGSX_STATUS_CREATED,
  AGSX_STATUS_RUNNING,
  AGSX_STATUS_EXITED,
  AGSX_STATUS_UNKNOWN
};

struct agsx_proc_ref {
  pid_t pid;
  uint64_t start_time; /* clock ticks since boot, /proc/PID/stat field 22 */
};

struct agsx_record {
  char id[33];
  char *name;
  char *image, *image_digest;
  enum agsx_status status;
  char *stop_reason;               /* exit, timeout, killed, oom, error */
  int exit_code;                   /* -1 while running */
  int64_t created, started, ended; /* seconds since the epoch; 0 = not yet */
  int64_t started_ns;              /* started, exact (0 in old records): the API's order */
  int64_t deadline;                /* seconds since the epoch */
  int64_t deadline_ns;             /* the same, exact (0 in old records) */
  uint64_t timeout;                /* the lifetime asked for, seconds */
  struct agsx_proc_ref supervisor, init;
  char *network, *address;
  struct agsx_port *ports; /* published (-p), host ports as bound */
  size_t n_ports;
  uint64_t memory, pids, disk, cpu_quota_us;
  unsigned slot;
  uint32_t uid_base;
  char **argv, **env;
  char *user, *cwd, *hostname;
  char *seccomp; /* "default", "unconfined" or the path of the profile used */
  /* --security-opt no-new-privileges=false: its processes (the command,
   * exec's, the API's) start without no_new_privs, so setuid binaries of
   * its image work (sandbox/procexec.h); false, the default, sets it. */
  bool new_privs;
  char **labels; /* KEY=VALUE (agsx_labels_check), NULL: none */
  /* Named volumes it mounts (sandbox/volume.h), NAME:/path or NAME:/path:ro:
   * a fork mounts them too. */
  char **volumes;
  bool rm;   /* remove the record when the sandbox ends */
  bool idle; /* no command (agsx_run_spec.idle): a fork is idle too */
  /* sandbox/pool.h: the pool it was started for, and whether it still
   * waits there for a claim (status "parked" while it does). */
  char *pool;
  bool parked;
  bool stop_request; /* `agsx kill` asked the supervisor to stop it */
  bool reported;     /* an ended sandbox's end was shown by ls -a or waited for */
  bool paused;       /* frozen by agsx pause (sandbox/freeze.h); only while running */
  int64_t paused_at; /* seconds since the epoch, while paused */
  /* At its deadline the supervisor pauses it (freeze.h) instead of
   * stopping it: the API's lifecycle.onTimeout "pause". A state of the
   * sandbox, so it holds whoever started it and whatever runs meanwhile. */
  bool pause_on_timeout;
  /* sandbox/snapshot.h: the supervisor's fd of the sandbox's tmpfs (-1:
   * none), the layers (STATE/layers/<id>) under its writable one, above
   * the image's (a fork's, a rollback's), and the process (commit,
   * snapshot, fork) that froze it for a copy, thawed by the reaper if it
   * died meanwhile. */
  int tmpfs_fd;
  char **layers;
  struct agsx_proc_ref frozen_by;
  /* agsx rollback: the client asks for restart number restart_seq on
   * restart_layers; the supervisor answers with restarted_seq and, when it
   * failed, restart_error. */
  int64_t restart_seq, restarted_seq;
  char **restart_layers;
  /* The client that asked and waits: a request whose client died before
   * the supervisor took it up (SIGKILLed between its record write and its
   * signal) is dropped, not carried out at the next `agsx update`. */
  struct agsx_proc_ref restart_by;
  char *restart_error;
  /* AGSX_STATUS_UNKNOWN only: why the record could not be read, naming
   * its file. Such a record has its id and name (from names/), nothing
   * else. */
  char *damage;
};

void agsx_record_clear(struct agsx_record *r);
char *agsx_record_to_json(const struct agsx_record *r, size_t *ret_len);
int agsx_record_from_json(const char *buf, size_t len, struct agsx_record *r, agsx_error_t *err);
/* "created", "running", "exited" or "unknown". */
const char *agsx_record_status_name(enum agsx_status s);
/* What ls and inspect show: the status name, "paused" for a running
 * sandbox that is paused, "parked" for one waiting in a pool. */
const char *agsx_record_status(const struct agsx_record *r);
/* The public JSON object of a sandbox: `ls --json`'s fields (id, name,
 * image, image_digest, status (paused too), paused, created, deadline, time_left, stop_reason,
 * exit_code, network, address, ports, pid, limits); with FULL, `inspect`'s
 * too (started, ended, timeout, deadline_ns, supervisor and init with their
 * start times, uid_range, argv, env, user, cwd, hostname, seccomp,
 * no_new_privileges, rm, stop_requested, volumes). NOW is the time (seconds) time_left counts from. */
void agsx_record_gen(yajl_gen g, const struct agsx_record *r, int64_t now, bool full);
/* The value of a record's "ports" (also in `ls --json` and `port --json`). */
void agsx_record_gen_ports(yajl_gen g, const struct agsx_port *v, size_t n);

/* ---- labels ----
 * KEY=VALUE strings on a sandbox (`run --label`, the API server's E2B
 * metadata and its own e2b.* keys), kept in its record and shown by
 * `ls --json` and `inspect` as an object. Bounded: at most
 * AGSX_LABELS_MAX labels, keys of 1 to AGSX_LABEL_KEY_MAX bytes without
 * '=' or control characters, values of at most AGSX_LABEL_VALUE_MAX bytes
 * without control characters, AGSX_LABELS_SIZE_MAX bytes in all; keys
 * unique. */
#define AGSX_LABELS_MAX 64
#define AGSX_LABEL_KEY_MAX 256
#define AGSX_LABEL_VALUE_MAX 4096
#define AGSX_LABELS_SIZE_MAX 65536
int agsx_labels_check(char *const *labels, agsx_error_t *err);
/* The value of KEY, or NULL. */
const char *agsx_label_get(char *const *labels, const char *key);
/* Whether LABELS match FILTER: "KEY" (present) or "KEY=VALUE" (equal). */
bool agsx_labels_match(char *const *labels, const char *filter);
/* Sets KEY=VALUE in the vector *LABELS (replacing an earlier KEY). */
void agsx_labels_set(char ***labels, const char *key, const char *value);

/* Opens (creating with CREATE) the state directory. */
int agsx_state_open(const char *path, bool create, agsx_error_t *err);

/* Writes STATE/<id>/state.json atomically. The caller holds the lock. */
int agsx_record_write(int statefd, const struct agsx_record *r, agsx_error_t *err);
int agsx_record_read(int statefd, const char *id, struct agsx_record *r, agsx_error_t *err);
/* Takes STATE/<id>/lock (exclusive); returns the lock fd. */
int agsx_record_lock(int statefd, const char *id, agsx_error_t *err);
/* Removes the record directory and its name link. */
int agsx_record_remove(int statefd, const struct agsx_record *r, agsx_error_t *err);

/* Claims NAME for ID; EEXIST (with a clear message) when taken. */
int agsx_name_claim(int statefd, const char *name, const char *id, agsx_error_t *err);
void agsx_name_release(int statefd, const char *name, const char *id);
bool agsx_name_is_valid(const char *name);

/* Resolves SANDBOX (an id, a unique id prefix of at least 4 hex digits, or
 * a name) to an id. */
int agsx_state_resolve(int statefd, const char *sandbox, char ret_id[33], agsx_error_t *err);
/* Reads the record of SANDBOX (resolved as above) into *RET, to be cleared
 * with agsx_record_clear. ENOENT "no such sandbox" also when the state
 * directory does not exist (STATEFD -1 for _at: no sandbox was ever made). */
int agsx_state_lookup(const char *state_dir, const char *sandbox, struct agsx_record *ret,
                      agsx_error_t *err);
int agsx_state_lookup_at(int statefd, const char *sandbox, struct agsx_record *ret,
                         agsx_error_t *err);

/* The manifest digests of the images of running sandboxes (NULL-terminated),
 * for the store's gc: their layers stay while they run. */
char **agsx_state_running_images(const char *state_dir);

/* Removes the record of a sandbox whose record cannot be read: stops
 * whatever still runs in its cgroup (its supervisor then ends), removes
 * the directory and any name pointing at it. Under the record's lock;
 * nothing is done (0) when the record has become readable meanwhile. */
int agsx_state_remove_corrupt(int statefd, const char *id, agsx_error_t *err);
/* Removes names/ links whose sandbox record is gone. */
void agsx_state_prune_names(int statefd, void (*report)(const char *what, void *data), void *data,
                            bool dry_run);

/* Lists the ids of every record directory (valid or not). */
int agsx_state_list(int statefd, char ***ret_ids, agsx_error_t *err);
/* Reads every record into *RET (the caller clears each and frees the
 * array); one still starting is skipped. A damaged one is left in place
 * (gc removes it): with AGSX_LOAD_DAMAGED in FLAGS it is returned as an
 * AGSX_STATUS_UNKNOWN record (id, name, damage), otherwise skipped.
 * Returns how many. */
#define AGSX_LOAD_DAMAGED 1u
size_t agsx_state_load(int statefd, unsigned flags, struct agsx_record **ret);
/* gc's grace for what may still be starting: AGSX_GC_MIN_AGE seconds,
 * default 60. */
int64_t agsx_state_gc_min_age(void);
/* gc's policy for records: removes the ended and the damaged ones of V
 * (agsx_state_remove_corrupt for the latter) and record directories that
 * never got a record (a start that crashed) once older than the grace,
 * REPORT naming each (only naming them with DRY_RUN). */
void agsx_state_gc_records(int statefd, const struct agsx_record *v, size_t n, bool dry_run,
                           void (*report)(const char *what, void *data), void *data);
/* gc's policy for cgroups (agsx_cgroup_gc): keeps those of RUNNING (ids of
 * this state directory's running sandboxes), any with a process in it (it
 * may be another state directory's) and young empty ones (a start under
 * way); REPORT names each removed. */
int agsx_state_gc_cgroups(char *const *running, bool dry_run,
                          void (*report)(const char *what, void *data), void *data,
                          agsx_error_t *err);

/* The start time of PID, 0 when it does not exist. */
uint64_t agsx_proc_start_time(pid_t pid);
/* PID is alive and still the process the reference names. */
bool agsx_proc_ref_alive(const struct agsx_proc_ref *ref);
int agsx_proc_ref_self(struct agsx_proc_ref *ret);

/* ---- reaping ----
 * A running record whose supervisor is gone (killed, crashed) describes a
 * dead sandbox: its init died with the supervisor. A supervisor still alive
 * well past the deadline is stuck and is killed. Either way the leftovers
 * (cgroup, mount point) go and the record says how it ended. */
struct agsx_reap_report {
  void (*fn)(const char *id, const char *what, void *data);
  void *data;
};
/* Checks one record (by id) and reaps it if needed. Returns 1 if reaped. */
int agsx_state_reap_one(int statefd, const char *id, const struct agsx_reap_report *rep,
                        agsx_error_t *err);
/* Reaps every record; with !FORCE at most once a second per state dir
 * (STATE/.reaped is the stamp), so every agsx invocation can call it. */
void agsx_state_reap_all(const char *state_dir, bool force, const struct agsx_reap_report *rep);
#define AGSX_STUCK_GRACE_SEC 15

/* ---- waiting for the end ----
 * Blocks until sandbox ID has ended and fills RET with its final record.
 * The supervisor writes the end into the record, then exits: this sleeps
 * on its pidfd (checked against its start time) and on an inotify watch of
 * the record directory, re-reading the record on each wake-up, and wakes
 * at the deadline plus AGSX_STUCK_GRACE_SEC to reap a supervisor that is
 * stuck or gone (agsx_state_reap_one). Only without pidfds (kernels before
 * 5.3) does it poll, every 100 ms.
 *
 * `run --rm` removes the record at the end. So that its waiters still get
 * the exit code, each holds a shared flock of STATE/<id>/waiters while it
 * waits; a supervisor that finds that file writes the end record first and
 * removes the record only once it gets the lock exclusively (see
 * agsx_state_await_waiters). ENOENT when the record is gone anyway;
 * ETIMEDOUT after TIMEOUT_MS (-1: no limit). */
int agsx_state_wait(int statefd, const char *id, int64_t timeout_ms, struct agsx_record *ret,
                    agsx_error_t *err);
/* For a record about to be removed: true when someone waits for it (the
 * waiters file exists; then write the end record first). */
bool agsx_state_has_waiters(int dirfd);
/* Waits until no waiter holds the waiters file of the record directory
 * DIRFD (each lets go once it has read the end), at most AGSX_WAITERS_MS. */
void agsx_state_await_waiters(int dirfd);
#define AGSX_WAITERS_MS 2000
/* Removes the record of the ended sandbox ID (and its name, and a cgroup a
 * crash may have left); EBUSY when it is still running. */
int agsx_state_remove_ended(int statefd, const char *id, agsx_error_t *err);

#endif
