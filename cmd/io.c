/* agsx CLI: terminal and output plumbing shared by run and exec. */
#include "config.h"

#include "io.h"

#include <string.h>

void agsx_term_raw(struct agsx_term *t) {
  if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &t->saved) < 0)
    return;
  struct termios raw = t->saved;
  cfmakeraw(&raw);
  if (tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0)
    t->raw = true;
}

void agsx_term_restore(struct agsx_term *t) {
  if (t->raw)
    tcsetattr(STDIN_FILENO, TCSANOW, &t->saved);
  t->raw = false;
}

void agsx_print_result(const struct agsx_result *r) {
  size_t len;
  _cleanup_free_ char *s = agsx_result_json(r, &len);
  fwrite(s, 1, len, stdout);
  fputc('\n', stdout);
  fflush(stdout);
}
