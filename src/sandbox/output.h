/* agsx — sandbox: bounded capture of a command's output (run --json,
 * exec --json) and fd copying for attached stdio. */
#ifndef AGSX_SANDBOX_OUTPUT_H
#define AGSX_SANDBOX_OUTPUT_H

#include "util/util.h"

#define AGSX_OUTPUT_CAP (1u << 20) /* --json: bytes kept of stdout and of stderr */

struct agsx_output {
  char *buf;
  size_t len;
  bool truncated;
  int fd;
};

/* Reads what is available from O->fd, keeping at most the cap. */
void agsx_output_read(struct agsx_output *o);
/* Reads what is in O's pipe now, without waiting: true once it reached EOF
 * (the fd is closed then). */
bool agsx_output_drain(struct agsx_output *o);
void agsx_output_clear(struct agsx_output *o);
/* Copies one read's worth from FROM to TO; sets *CLOSED at EOF or error. */
void agsx_copy_fd(int from, int to, int *closed);

/* The --json result of run and exec: the one definition of that document,
 * so every front end emits the same bytes. */
struct agsx_result {
  int exit_code;
  const struct agsx_output *out; /* [2]: stdout, stderr */
  int64_t duration_ms;
  const char *stop_reason;
  int signal; /* 0: none */
  const char *id, *name, *error;
};
/* The document, without a trailing newline; the caller frees it. */
char *agsx_result_json(const struct agsx_result *r, size_t *ret_len);

/* The `run --detach --json` document, {"id": ID, "name": NAME or null}:
 * a detached sandbox once its command runs. Without a trailing newline;
 * the caller frees it. */
char *agsx_started_json(const char *id, const char *name, size_t *ret_len);

#endif
