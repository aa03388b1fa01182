/* agsx — code: stateful code contexts in a running sandbox (E2B's code
 * interpreter), for `agsx code` and the server's port-49999 routes.
 *
 * A context is one bridge process inside the sandbox (src/code/bridge.py,
 * embedded in the binary), started through the sandbox's supervisor
 * (sandbox/processes.h) with a stdin pipe and the tag
 * "agsx-code:<ctxid>[:default]". The supervisor owns it, so contexts outlive
 * every front end; listing contexts is listing processes by tag. A python
 * bridge drives one IPython kernel (Debian's ipykernel + jupyter_client), a
 * bash bridge one persistent shell. Requests go in as NDJSON through
 * agsx_process_input, each with a random request id; results come back as
 * NDJSON lines on the bridge's stdout (its process log), which a front end
 * tails from the end, keeping only its own request's lines. Everything the
 * bridge writes is untrusted (user code runs as the same user): each line is
 * bounded, parsed, checked and written out again by us as ASCII-only JSON. */
#ifndef AGSX_CODE_H
#define AGSX_CODE_H

#include "util/json.h"
#include "util/util.h"

#include <stdbool.h>
#include <stdint.h>

#define AGSX_CODE_TAG_PREFIX "agsx-code:"
#define AGSX_CODE_LINE_MAX (24u << 20)         /* one bridge line (a result with a big PNG) */
#define AGSX_CODE_CODE_MAX (64u << 20)         /* code of one execution */
#define AGSX_CODE_OUTPUT_DEFAULT (32ull << 20) /* stdout+stderr bytes kept per execution */
#define AGSX_CODE_START_TIMEOUT_MS 120000      /* kernel start */

struct agsx_code_context {
  char id[33];
  char *language, *cwd;
  uint32_t pid; /* the bridge's, in the sandbox's pid namespace */
  bool is_default;
  int64_t started_ns;
};
void agsx_code_context_clear(struct agsx_code_context *c);
void agsx_code_context_list_free(struct agsx_code_context *v, size_t n);

/* E2B's normalisation: NULL or "" -> python, lower case, trimmed, js ->
 * javascript, ts -> typescript. ENOTSUP (with "no kernel for language X")
 * for a language agsx has no kernel for: python, bash and javascript (node,
 * when the image has it) are supported. */
int agsx_code_language(const char *in, char **ret, agsx_error_t *err);

/* Starts a context of LANGUAGE with working directory CWD (NULL: the
 * sandbox's) and waits until its kernel is up. ESRCH: the sandbox is not
 * running. */
int agsx_code_context_create(int statefd, const char *sandbox, const char *language,
                             const char *cwd, struct agsx_code_context *ret, agsx_error_t *err);
/* The running contexts, oldest first. */
int agsx_code_context_list(int statefd, const char *sandbox, struct agsx_code_context **ret,
                           size_t *ret_n, agsx_error_t *err);
/* ENOENT "context X not found": no running context with that id (or a
 * unique prefix of it). */
int agsx_code_context_get(int statefd, const char *sandbox, const char *ctxid,
                          struct agsx_code_context *ret, agsx_error_t *err);
/* The default context of LANGUAGE, created on first use (one per language
 * even when several front ends ask at once: under STATE/<id>/code.lock). */
int agsx_code_context_default(int statefd, const char *sandbox, const char *language,
                              struct agsx_code_context *ret, agsx_error_t *err);
/* Fresh state: the kernel (or shell) is restarted in the context's cwd. */
int agsx_code_context_restart(int statefd, const char *sandbox, const struct agsx_code_context *c,
                              agsx_error_t *err);
/* Stops the bridge and its kernel (stdin closed, then SIGTERM, SIGKILL). */
int agsx_code_context_remove(int statefd, const char *sandbox, const struct agsx_code_context *c,
                             agsx_error_t *err);

/* The four calls above block for a kernel's start, a lock or a bridge's
 * end (seconds). The same operations as poll components, for a front end
 * with one loop (the server), which none of them may stall: poll
 * agsx_code_op_fd() (-1: none now) for POLLIN with
 * agsx_code_op_timeout_ms(), then call agsx_code_op_dispatch(): 1 done,
 * 0 not yet, -1 failed (ERR, worded as the blocking call's). A create or
 * default that is done has its context in agsx_code_op_context(). The
 * blocking calls run these under poll(): one implementation. Freeing an
 * operation that has not finished closes the stdin of a bridge it started
 * (the bridge ends, with its kernel) and waits for nothing. */
struct agsx_code_op;
int agsx_code_op_create(int statefd, const char *sandbox, const char *language, const char *cwd,
                        struct agsx_code_op **ret, agsx_error_t *err);
int agsx_code_op_default(int statefd, const char *sandbox, const char *language,
                         struct agsx_code_op **ret, agsx_error_t *err);
int agsx_code_op_restart(int statefd, const char *sandbox, const struct agsx_code_context *c,
                         struct agsx_code_op **ret, agsx_error_t *err);
int agsx_code_op_remove(int statefd, const char *sandbox, const struct agsx_code_context *c,
                        struct agsx_code_op **ret, agsx_error_t *err);
int agsx_code_op_fd(const struct agsx_code_op *op);
int agsx_code_op_timeout_ms(const struct agsx_code_op *op);
int agsx_code_op_dispatch(struct agsx_code_op *op, agsx_error_t *err);
const struct agsx_code_context *agsx_code_op_context(const struct agsx_code_op *op);
void agsx_code_op_free(struct agsx_code_op *op);

/* ---- one execution ------------------------------------------------------ */

enum agsx_code_item_type {
  AGSX_CODE_COUNT = 1, /* number_of_executions */
  AGSX_CODE_STDOUT,
  AGSX_CODE_STDERR,
  AGSX_CODE_RESULT,
  AGSX_CODE_ERROR,
  AGSX_CODE_TRUNCATED, /* output beyond the limit was dropped (no E2B line) */
  AGSX_CODE_END,       /* end_of_execution (the item parser's answer only) */
};

/* An item as the bridge sent it, checked. LINE is E2B's NDJSON line for it
 * (ASCII-only, no newline, known keys only; NULL for TRUNCATED); the other
 * fields point into OBJ (the parsed item) or LINE and live as long as the
 * item. */
struct agsx_code_item {
  enum agsx_code_item_type type;
  char *line;
  size_t line_len;
  yajl_val obj;
  const char *text;                     /* STDOUT/STDERR (UTF-8); RESULT: text/plain or NULL */
  const char *name, *value, *traceback; /* ERROR */
  bool is_main_result;                  /* RESULT */
  int64_t execution_count;              /* COUNT */
  uint64_t dropped;                     /* TRUNCATED: bytes */
};
void agsx_code_item_clear(struct agsx_code_item *it);
/* Parses one bridge line. 1: an item of request RID in *RET; 0: a line of
 * another request (or one to ignore); -1: a line of RID that is no valid
 * item (ERR). Never trusts the line: sizes, types and keys are checked. */
int agsx_code_item_parse(const char *line, size_t len, const char *rid, struct agsx_code_item *ret,
                         agsx_error_t *err);
/* Appends S[0..LEN) as a JSON string of ASCII characters only (\uXXXX,
 * surrogate pairs; invalid UTF-8 becomes U+FFFD) to *BUF of *LEN bytes
 * (xrealloc'd; *CAP its size). */
void agsx_code_json_ascii_str(char **buf, size_t *len, size_t *cap, const char *s, size_t slen);

struct agsx_code_exec_spec {
  const char *code;
  size_t code_len;
  char **env;          /* KEY=VALUE for this execution only, or NULL */
  uint64_t timeout_ms; /* 0: none; then interrupted, reported as TimeoutError */
  uint64_t output_max; /* stdout+stderr bytes; 0: AGSX_CODE_OUTPUT_DEFAULT */
};

struct agsx_code_exec_result {
  int64_t execution_count; /* -1: none seen */
  bool error;              /* an error item was reported */
  bool timed_out, cancelled, truncated;
  uint64_t dropped; /* bytes of output dropped (truncated) */
};

/* Called per item, in order; a nonzero return stops the execution
 * (cancelled, as agsx_code_exec_cancel). */
typedef int (*agsx_code_item_fn)(const struct agsx_code_item *item, void *data);

/* A running execution, for any poll loop (as relay.h): poll
 * agsx_code_exec_fd() for POLLIN with agsx_code_exec_timeout_ms(), then
 * call agsx_code_exec_dispatch(). The code goes to the bridge as it takes
 * it (a bridge that reads nothing for a minute fails the execution), never
 * waited for: the start sends a first part, dispatch the rest. */
struct agsx_code_exec;
int agsx_code_exec_start(int statefd, const char *sandbox, const struct agsx_code_context *c,
                         const struct agsx_code_exec_spec *spec, struct agsx_code_exec **ret,
                         agsx_error_t *err);
int agsx_code_exec_fd(const struct agsx_code_exec *e);
int agsx_code_exec_timeout_ms(const struct agsx_code_exec *e); /* -1: none */
/* Reads what is there (at most MAX_RECORDS log records, 0: no limit, so a
 * server can bound what one turn buffers), calling FN per item. 1: the
 * execution ended (see agsx_code_exec_result); 0: more to come (poll, or
 * call again at once when the budget ran out: agsx_code_exec_more); -1:
 * failed (ERR). */
int agsx_code_exec_dispatch(struct agsx_code_exec *e, size_t max_records, agsx_code_item_fn fn,
                            void *data, agsx_error_t *err);
/* The last dispatch stopped at its budget with records left. */
bool agsx_code_exec_more(const struct agsx_code_exec *e);
/* Interrupts the cell (the kernel and its state survive); the execution
 * has ended for its caller. */
int agsx_code_exec_cancel(struct agsx_code_exec *e, agsx_error_t *err);
const struct agsx_code_exec_result *agsx_code_exec_result(const struct agsx_code_exec *e);
void agsx_code_exec_free(struct agsx_code_exec *e);

/* All of it, blocking: until the end, the timeout, or CANCEL_FD (-1: none)
 * becomes readable (then cancelled). */
int agsx_code_run(int statefd, const char *sandbox, const struct agsx_code_context *c,
                  const struct agsx_code_exec_spec *spec, int cancel_fd, agsx_code_item_fn fn,
                  void *data, struct agsx_code_exec_result *ret, agsx_error_t *err);

#endif
