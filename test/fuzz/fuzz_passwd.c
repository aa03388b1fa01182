/* Fuzz target: passwd/group parsing as done for `run -u` against a
 * sandbox's own (hostile) /etc files. Input: spec NUL passwd NUL group. */
#include "config.h"

#include "fuzz.h"
#include "sandbox/passwd.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *p = (const char *)data, *end = p + size;
  const char *a = memchr(p, '\0', size);
  if (a == NULL)
    return 0;
  const char *b = memchr(a + 1, '\0', (size_t)(end - a - 1));
  const char *pw = a + 1;
  size_t pwl = b ? (size_t)(b - pw) : (size_t)(end - pw);
  const char *gr = b ? b + 1 : NULL;
  size_t grl = b ? (size_t)(end - gr) : 0;
  struct agsx_user u;
  agsx_error_t err = NULL;
  if (agsx_user_resolve(p, pw, pwl, gr, grl, &u, &err) == 0 &&
      (u.uid > 65535 || u.gid > 65535 || u.n_groups == 0 || u.n_groups > AGSX_MAX_GROUPS))
    __builtin_trap();
  agsx_error_free(&err);
  return 0;
}
