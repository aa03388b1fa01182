/* agsx CLI: tables whose columns widen to fit. */
#include "config.h"

#include "table.h"

#include "util/util.h"

#include <string.h>

void agsx_table_init(struct agsx_table *t, size_t ncols, const char *const *header) {
  memset(t, 0, sizeof(*t));
  t->ncols = ncols;
  agsx_table_add(t, header);
}

void agsx_table_add(struct agsx_table *t, const char *const *cells) {
  if (t->nrows == t->cap) {
    t->cap = t->cap ? t->cap * 2 : 8;
    t->cells = xrealloc(t->cells, t->cap * t->ncols * sizeof(char *));
  }
  for (size_t c = 0; c < t->ncols; c++)
    t->cells[t->nrows * t->ncols + c] = xstrdup(cells[c] ? cells[c] : "");
  t->nrows++;
}

void agsx_table_print(const struct agsx_table *t, FILE *out) {
  size_t *w = xzalloc((t->ncols + 1) * sizeof(size_t));
  for (size_t r = 0; r < t->nrows; r++)
    for (size_t c = 0; c < t->ncols; c++) {
      size_t n = strlen(t->cells[r * t->ncols + c]);
      w[c] = n > w[c] ? n : w[c];
    }
  for (size_t r = 0; r < t->nrows; r++) {
    /* Cells after the last non-empty one print nothing: no trailing blanks. */
    size_t last = 0;
    for (size_t c = 0; c < t->ncols; c++)
      if (*t->cells[r * t->ncols + c])
        last = c;
    for (size_t c = 0; c <= last; c++) {
      const char *s = t->cells[r * t->ncols + c];
      if (c == last)
        fprintf(out, "%s", s);
      else
        fprintf(out, "%-*s  ", (int)w[c], s);
    }
    fputc('\n', out);
  }
  free(w);
}

void agsx_table_clear(struct agsx_table *t) {
  for (size_t i = 0; i < t->nrows * t->ncols; i++)
    free(t->cells[i]);
  free(t->cells);
  memset(t, 0, sizeof(*t));
}
