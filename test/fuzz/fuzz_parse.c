/* Fuzz target: the small parsers of user input — durations, sizes, image
 * references, RFC 3339 times. */
#include "config.h"

#include "fuzz.h"
#include "image/image.h"
#include "util/util.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 4096)
    return 0;
  char *s = xstrndup((const char *)data, size);
  agsx_error_t err = NULL;
  uint64_t v;
  if (agsx_parse_duration(s, &v, &err) == 0 && (v == 0 || v > AGSX_DURATION_MAX_SEC))
    __builtin_trap(); /* the parser promised 1..24h */
  agsx_error_free(&err);
  if (agsx_parse_size(s, &v, &err) == 0 && v == 0)
    __builtin_trap();
  agsx_error_free(&err);
  char *r = agsx_image_ref_normalize(s, &err);
  if (r) {
    /* Normalising is idempotent. */
    char *r2 = agsx_image_ref_normalize(r, NULL);
    if (r2 == NULL || strcmp(r, r2) != 0)
      __builtin_trap();
    free(r2);
  }
  free(r);
  agsx_error_free(&err);
  int64_t t;
  agsx_parse_rfc3339(s, &t);
  free(s);
  return 0;
}
