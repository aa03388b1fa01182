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

/* Prints R's document (agsx_result_json) and a newline on stdout. */
void agsx_print_result(const struct agsx_result *r);

#endif
