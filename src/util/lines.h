/* agsx — lines: the reader of line-based text files (rules files, agsx.conf).
 *
 * One line at a time, numbered from 1, with the checks every such file
 * takes: no NUL byte, lines of at most MAX bytes, `\r`, `\v` and `\f` read
 * as blanks, blanks cut at both ends, `#` comments and blank lines skipped.
 * A failure of the callback is wrapped with "WHAT:LINE". */
#ifndef AGSX_UTIL_LINES_H
#define AGSX_UTIL_LINES_H

#include "util/util.h"

#include <stddef.h>

enum {
  AGSX_LINES_HASH_ANYWHERE = 1, /* `#` starts a comment anywhere (else only a line's first) */
};

/* LINE (NUL-terminated, the callback may change it), its number. */
typedef int (*agsx_line_fn)(char *line, size_t lineno, void *data, agsx_error_t *err);

int agsx_lines_each(const char *text, size_t len, const char *what, size_t max, unsigned flags,
                    agsx_line_fn fn, void *data, agsx_error_t *err);

#endif
