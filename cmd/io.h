/* agsx CLI: terminal and output plumbing shared by run and exec. */
#ifndef AGSX_CMD_IO_H
#define AGSX_CMD_IO_H

#include "sandbox/output.h"
#include "util/util.h"

#include <termios.h>

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
