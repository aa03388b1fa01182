/* agsx CLI: terminal and output plumbing shared by run and exec. */
#ifndef AGSX_CMD_IO_H
#define AGSX_CMD_IO_H

#include "util/util.h"

#include <termios.h>

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

struct agsx_term {
  bool raw;
  struct termios saved;
};
void agsx_term_raw(struct agsx_term *t);
void agsx_term_restore(struct agsx_term *t);
void agsx_term_winsize(int master);

/* The --json result of run and exec. */
struct agsx_result {
  int exit_code;
  const struct agsx_output *out; /* [2]: stdout, stderr */
  int64_t duration_ms;
  const char *stop_reason;
  int signal; /* 0: none */
  const char *id, *name, *error;
};
void agsx_print_result(const struct agsx_result *r);

#endif
