/* agsx — sandbox: processes a sandbox's supervisor owns.
 *
 * Processes started through this API must outlive the client that started
 * them (`agsx serve` may restart), so the sandbox's supervisor forks them
 * (through agsx_exec_start, the one implementation of "a command in a
 * running sandbox"), holds their stdio pipes or pty master, writes their
 * logs, enforces their timeouts and records their end. A client keeps no
 * state: everything is in STATE/<id>/.
 *
 * STATE/<id>/procs/<pid>/ holds each one's config (config.json) and its log
 * (logbuf.h: <pid>/log, kinds STDOUT/STDERR or PTY, then END); PID is the
 * process's pid in the sandbox's pid namespace. Ended processes stay
 * addressable until the sandbox is removed (the oldest beyond
 * AGSX_PROCESS_KEEP_ENDED go). The sandbox's own command's stdout/stderr
 * (detached sandboxes) is the log STATE/<id>/log (`agsx logs`).
 *
 * The requests travel over the supervisor's control socket STATE/<id>/ctl
 * (control.h). */
#ifndef AGSX_SANDBOX_PROCESSES_H
#define AGSX_SANDBOX_PROCESSES_H

#include "sandbox/logbuf.h"
#include "util/util.h"

#include <stdbool.h>
#include <stdint.h>

#define AGSX_PROCESS_KEEP_ENDED 256
#define AGSX_PROCESS_INPUT_MAX (64u << 10)
#define AGSX_PROCESS_MAX 1024 /* running at once per sandbox */

struct agsx_process_spec {
  char **argv;            /* argv[0]: a path or a name looked up in the sandbox's PATH */
  char **env;             /* KEY=VALUE, added to the sandbox's environment, later wins */
  const char *cwd, *user; /* NULL: the sandbox's */
  const char *tag;        /* NULL or a client's label (E2B's tag) */
  bool pty;
  unsigned cols, rows;
  bool stdin_open;     /* a stdin pipe (or the pty) fed with agsx_process_input; else /dev/null */
  uint64_t timeout_ms; /* 0: none; at the end the supervisor kills the process's tree */
};

struct agsx_process_info {
  uint32_t pid; /* in the sandbox's pid namespace */
  char *tag, **argv, **env, *cwd, *user;
  bool pty, running;
  int exit_code, term_signal; /* when !running */
  int64_t started_ns, ended_ns;
};
void agsx_process_info_clear(struct agsx_process_info *p);

/* Starts it (through agsx_exec_start: the same namespaces, cgroup, uid map,
 * capabilities, no_new_privs, seccomp and safe path resolution as `agsx
 * exec`); returns once it was exec'd. A command that cannot be executed:
 * ret_code 126/127 and ERR; anything else 125. ESRCH: the sandbox is not
 * running (or paused: EAGAIN with a clear message). */
int agsx_process_start(int statefd, const char *id, const struct agsx_process_spec *spec,
                       struct agsx_process_info *ret, int *ret_code, agsx_error_t *err);
int agsx_process_list(int statefd, const char *id, bool include_ended,
                      struct agsx_process_info **ret, size_t *ret_n, agsx_error_t *err);
void agsx_process_list_free(struct agsx_process_info *list, size_t n);
/* ENOENT: no such process. */
int agsx_process_get(int statefd, const char *id, uint32_t pid, struct agsx_process_info *ret,
                     agsx_error_t *err);
/* Looks a process up by its tag (the newest running one). ENOENT. */
int agsx_process_find_tag(int statefd, const char *id, const char *tag,
                          struct agsx_process_info *ret, agsx_error_t *err);
/* Input to its stdin pipe (PTY: false) or its pty (PTY: true; EINVAL for the
 * other kind, with envd's messages). At most AGSX_PROCESS_INPUT_MAX bytes per
 * call; EPIPE when closed. */
int agsx_process_input(int statefd, const char *id, uint32_t pid, const void *buf, size_t len,
                       bool pty, agsx_error_t *err);
int agsx_process_close_stdin(int statefd, const char *id, uint32_t pid, agsx_error_t *err);
/* ENOENT: not running. */
int agsx_process_signal(int statefd, const char *id, uint32_t pid, int sig, agsx_error_t *err);
int agsx_process_resize(int statefd, const char *id, uint32_t pid, unsigned cols, unsigned rows,
                        agsx_error_t *err);
/* A reader of its log (logbuf.h) FROM an offset. */
int agsx_process_log_open(int statefd, const char *id, uint32_t pid, uint64_t from,
                          struct agsx_log_reader **ret, agsx_error_t *err);
/* The sandbox's own log (its command's stdout/stderr, the supervisor's warnings as META). */
int agsx_sandbox_log_open(int statefd, const char *id, uint64_t from, struct agsx_log_reader **ret,
                          agsx_error_t *err);

#endif
