/* agsx — lines: the reader of line-based text files. See lines.h. */
#include "config.h"

#include "util/lines.h"

#include <string.h>

static bool blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

int agsx_lines_each(const char *text, size_t len, const char *what, size_t max, unsigned flags,
                    agsx_line_fn fn, void *data, agsx_error_t *err) {
  if (memchr(text, '\0', len))
    return agsx_error_set_quiet(err, EINVAL, "%s: a NUL byte in a text file", what), -1;
  size_t lineno = 0;
  for (size_t i = 0; i < len;) {
    const char *nl = memchr(text + i, '\n', len - i);
    size_t end = nl ? (size_t)(nl - text) : len;
    lineno++;
    if (end - i > max)
      return agsx_error_set_quiet(err, EINVAL, "%s:%zu: line too long", what, lineno), -1;
    _cleanup_free_ char *l = xstrndup(text + i, end - i);
    i = end + 1;
    if (flags & AGSX_LINES_HASH_ANYWHERE) {
      char *hash = strchr(l, '#');
      if (hash)
        *hash = '\0';
    }
    for (char *p = l; *p; p++)
      if (*p == '\r' || *p == '\v' || *p == '\f')
        *p = ' ';
    char *s = l;
    while (blank(*s))
      s++;
    size_t n = strlen(s);
    while (n > 0 && blank(s[n - 1]))
      s[--n] = '\0';
    if (*s == '\0' || *s == '#')
      continue;
    if (fn(s, lineno, data, err) < 0)
      return agsx_error_wrap(err, "%s:%zu", what, lineno);
  }
  return 0;
}
