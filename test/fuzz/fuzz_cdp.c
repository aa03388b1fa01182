/* Fuzz target: the DevTools /json/version answer `agsx browser` reads from
 * a sandboxed (hostile) browser. The first byte says whether it is at EOF. */
#include "config.h"

#include "sandbox/cdp.h"
#include "fuzz.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  struct agsx_cdp_version v;
  agsx_error_t err = NULL;
  int r = agsx_cdp_parse_version((const char *)data + 1, size - 1, data[0] & 1, &v, &err);
  if (r == 1 && (v.ws_path == NULL || strstr(v.ws_path, "..") || strchr(v.ws_path, '"')))
    __builtin_trap();
  if ((r < 0) != (err != NULL))
    __builtin_trap();
  agsx_cdp_version_clear(&v);
  agsx_error_free(&err);
  return 0;
}
