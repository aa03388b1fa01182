/* Fuzz target: envd-style path cleaning (fsops' fs_clean) on request
 * paths. The result must be absolute and clean: no empty, "." or ".."
 * component, no trailing slash but for "/" itself. Input: a path. */
#include "config.h"

#include "api/fsops-internal.h"
#include "fuzz.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 8192 || memchr(data, '\0', size))
    return 0;
  char *in = malloc(size + 2);
  in[0] = '/';
  memcpy(in + 1, data, size);
  in[size + 1] = '\0';
  agsx_error_t err = NULL;
  char *out = fs_clean(in, &err);
  if (out == NULL) {
    if (err == NULL || (strlen(in) <= AGSX_FS_PATH_MAX && err->errno_ != ENAMETOOLONG))
      __builtin_trap();
  } else {
    size_t n = strlen(out);
    if (out[0] != '/' || (n > 1 && out[n - 1] == '/') || strstr(out, "//") || strstr(out, "/./") ||
        strstr(out, "/../") || (n >= 2 && strcmp(out + n - 2, "/.") == 0) ||
        (n >= 3 && strcmp(out + n - 3, "/..") == 0) || n > strlen(in))
      __builtin_trap();
    char *again = fs_clean(out, &err);
    if (again == NULL || strcmp(again, out) != 0) /* idempotent */
      __builtin_trap();
    free(again);
  }
  free(out);
  agsx_error_free(&err);
  free(in);
  return 0;
}
