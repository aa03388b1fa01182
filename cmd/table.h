/* agsx CLI: tables whose columns widen to fit their rows (Docker's style:
 * nothing is ever cut, so `agsx ls | grep NAME` works in scripts). */
#ifndef AGSX_CMD_TABLE_H
#define AGSX_CMD_TABLE_H

#include <stddef.h>
#include <stdio.h>

struct agsx_table {
  size_t ncols, nrows, cap;
  char **cells; /* nrows * ncols, row-major; row 0 is the header */
};

/* Starts a table with the header's NCOLS column titles. */
void agsx_table_init(struct agsx_table *t, size_t ncols, const char *const *header);
/* Adds a row of NCOLS cells (copied; NULL prints as empty). */
void agsx_table_add(struct agsx_table *t, const char *const *cells);
/* Prints every row, each column as wide as its widest cell plus two
 * spaces; a row ends at its last non-empty cell (no trailing blanks). */
void agsx_table_print(const struct agsx_table *t, FILE *out);
void agsx_table_clear(struct agsx_table *t);

#endif
