/* Minimal TAP producer for agsx unit tests. */
#ifndef AGSX_TAP_H
#define AGSX_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int tap_n, tap_failed;

__attribute__((format(printf, 2, 3))) static inline int tap_ok(int cond, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("%s %d - ", cond ? "ok" : "not ok", ++tap_n);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  if (!cond)
    tap_failed++;
  fflush(stdout);
  return cond;
}

#define tap_is_str(got, want, ...)                                                                 \
  do {                                                                                             \
    const char *_g = (got), *_w = (want);                                                          \
    if (!tap_ok(_g && _w ? strcmp(_g, _w) == 0 : _g == _w, __VA_ARGS__))                           \
      printf("#   got: '%s'\n#   expected: '%s'\n", _g ? _g : "(null)", _w ? _w : "(null)");       \
  } while (0)

#define tap_is_int(got, want, ...)                                                                 \
  do {                                                                                             \
    long long _g = (long long)(got), _w = (long long)(want);                                       \
    if (!tap_ok(_g == _w, __VA_ARGS__))                                                            \
      printf("#   got: %lld\n#   expected: %lld\n", _g, _w);                                       \
  } while (0)

static inline int tap_done(void) {
  printf("1..%d\n", tap_n);
  return tap_failed ? 1 : 0;
}

#endif
