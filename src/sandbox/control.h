/* agsx — sandbox: the control protocol between a client (`agsx kill`,
 * `agsx update`, `agsx rm -f`, the API server) and a sandbox's supervisor.
 *
 * The client changes the record (under its lock), then sends the supervisor
 * AGSX_SIG_CONTROL through a pidfd checked against the record's start time,
 * with a value (SI_QUEUE) that says what:
 *   AGSX_CONTROL_STOP    stop now; needs no fd, so a supervisor whose fds
 *                        are all taken still obeys it;
 *   AGSX_CONTROL_RELOAD  reread the record (the deadline changed); retried
 *                        by the supervisor until the read succeeds.
 * A plain signal (no value) rereads the record. A stop takes
 * AGSX_STOP_GRACE_SEC (SIGTERM, then SIGKILL) plus the teardown; a client
 * that waits escalates after that (agsx_control_wait_stopped).
 *
 * Both sides are here, so the protocol has one definition. */
#ifndef AGSX_SANDBOX_CONTROL_H
#define AGSX_SANDBOX_CONTROL_H

#include "sandbox/proc.h"
#include "sandbox/processes.h"
#include "state/state.h"
#include "util/util.h"

#include <signal.h>
#include <sys/signalfd.h>

#define AGSX_SIG_CONTROL (SIGRTMIN)
enum agsx_control { AGSX_CONTROL_NONE = 0, AGSX_CONTROL_RELOAD = 1, AGSX_CONTROL_STOP = 2 };
#define AGSX_STOP_GRACE_SEC 2

/* ---- client side ---- */

/* Asks the supervisor of sandbox ID to stop it (records the request, then
 * AGSX_CONTROL_STOP). *RET_PIDFD: the supervisor's pidfd to wait on, or -1
 * when there is nothing to wait for (a supervisor that was gone has been
 * reaped here). ESRCH: the sandbox has already exited. */
int agsx_control_request_stop(int statefd, const char *id, int *ret_pidfd, agsx_error_t *err);

/* A stop under way: the supervisor's pidfd, the sandbox. */
struct agsx_stopping {
  int pidfd;
  char id[33];
};
/* Waits for every supervisor in V to end (each stops its sandbox: SIGTERM,
 * the grace, SIGKILL, the teardown), all at once, escalating for the ones
 * that do not in a bounded time (SIGKILL to the sandbox's init, then to the
 * supervisor, then the record reaped, reported through REP). Closes the
 * pidfds of those that ended. ETIMEDOUT: some did not. */
int agsx_control_wait_stopped(int statefd, struct agsx_stopping *v, size_t n,
                              const struct agsx_reap_report *rep, agsx_error_t *err);

/* Sets sandbox ID's deadline to SEC seconds from now and tells its
 * supervisor. *RET: the record as written (the caller clears it).
 * *RET_GONE: the record was changed but its supervisor is gone. NAME (what
 * the caller called the sandbox) names it in errors; ESRCH: not running. */
int agsx_control_set_timeout(int statefd, const char *id, const char *name, uint64_t sec,
                             struct agsx_record *ret, bool *ret_gone, agsx_error_t *err);

/* ---- supervisor side ---- */

/* What a signal the supervisor received asks for: AGSX_CONTROL_NONE when it
 * is no control signal. */
enum agsx_control agsx_control_decode(const struct signalfd_siginfo *si);

/* What the record asks of its supervisor, after AGSX_CONTROL_RELOAD. */
struct agsx_control_req {
  bool stop;
  int64_t deadline;    /* seconds, as recorded */
  int64_t deadline_ns; /* exact */
  int64_t restart_seq; /* agsx rollback's request (sandbox/snapshot.h) */
};
/* Reads the request from sandbox ID's record. *RET_RETRY: the read failed
 * for want of fds or memory and should be tried again shortly. */
int agsx_control_read(int statefd, const char *id, struct agsx_control_req *ret, bool *ret_retry,
                      agsx_error_t *err);

/* ---- the control socket ----
 * A detached supervisor also listens on STATE/<id>/ctl (SOCK_SEQPACKET,
 * 0600, peers checked with SO_PEERCRED: root or the supervisor's euid) for
 * the requests of processes.h: one request message, one reply message.
 * A message is "AGC1", a u32 (little-endian) length of a JSON object, the
 * object, then a payload (input bytes) taking the rest; at most
 * AGSX_CONTROL_MSG_MAX bytes. Requests: {"op": "start", "argv": [...],
 * "env": [...], "cwd", "user", "tag", "pty", "cols", "rows", "stdin",
 * "timeout_ms"}, {"op": "input", "pid", "pty"} + payload, {"op":
 * "close_stdin", "pid"}, {"op": "signal", "pid", "signal"}, {"op":
 * "resize", "pid", "cols", "rows"}. Replies: {"ok": true, "pid"} or {"ok":
 * false, "errno", "code", "error"}. Unknown fields are refused (a client
 * and a supervisor of different versions must not half-understand). */
#define AGSX_CONTROL_SOCKET "ctl"
#define AGSX_CONTROL_JSON_MAX (128u << 10)
#define AGSX_CONTROL_MSG_MAX (8 + AGSX_CONTROL_JSON_MAX + (64u << 10))
#define AGSX_CONTROL_ARGS_MAX 4096 /* argv and env entries */

enum agsx_control_op {
  AGSX_OP_START = 1,
  AGSX_OP_INPUT,
  AGSX_OP_CLOSE_STDIN,
  AGSX_OP_SIGNAL,
  AGSX_OP_RESIZE,
};

struct agsx_control_msg {
  enum agsx_control_op op;
  uint32_t pid;
  int signal;
  bool pty;
  /* start: the spec, its strings owned by the message */
  struct agsx_process_spec spec;
  /* input: the bytes (into the parsed buffer) */
  const char *data;
  size_t len;
};
/* Parses a request (hostile bytes: bounded, every field checked). */
int agsx_control_msg_parse(const char *buf, size_t len, struct agsx_control_msg *ret,
                           agsx_error_t *err);
/* Encodes a request; NULL with ERR when it exceeds the bounds. */
char *agsx_control_msg_encode(const struct agsx_control_msg *m, size_t *ret_len, agsx_error_t *err);
void agsx_control_msg_clear(struct agsx_control_msg *m);

struct agsx_control_reply {
  bool ok;
  uint32_t pid;
  int errno_, code;
  char *error;
};
int agsx_control_reply_parse(const char *buf, size_t len, struct agsx_control_reply *ret,
                             agsx_error_t *err);
char *agsx_control_reply_encode(const struct agsx_control_reply *r, size_t *ret_len);
void agsx_control_reply_clear(struct agsx_control_reply *r);

#endif
