/* Fuzz target: the JSON request bodies the API server parses: the first
 * byte picks the create body (NewSandbox, with its volumeMounts) or process
 * Start (StartRequest). */
#include "config.h"

#include "api/body.h"
#include "fuzz.h"
#include "sandbox/volume.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  const char *p = (const char *)data + 1;
  size_t n = size - 1;
  agsx_error_t err = NULL;
  if (data[0] & 1) {
    struct agsx_api_create c;
    int status = 0;
    if (agsx_api_create_parse(p, n, &c, &status, &err) == 0) {
      if (c.template_id == NULL || c.timeout < 0 || c.timeout > 86400)
        __builtin_trap();
      /* volumeMounts: a valid name, then an absolute clean path */
      for (size_t i = 0; c.volumes && c.volumes[i]; i++) {
        char *colon = strchr(c.volumes[i], ':');
        if (colon == NULL || colon[1] != '/' || !agsx_path_is_clean(colon + 2, 4096, 64))
          __builtin_trap();
        *colon = '\0';
        if (!agsx_volume_name_is_valid(c.volumes[i]))
          __builtin_trap();
        *colon = ':';
      }
      agsx_api_create_clear(&c);
    } else if (status != 400 && status != 501) {
      __builtin_trap();
    }
  } else {
    struct agsx_api_start s;
    if (agsx_api_start_parse(p, n, &s, &err) == 0) {
      if (s.cmd == NULL || *s.cmd == '\0' || s.cols < 1 || s.rows < 1)
        __builtin_trap();
      agsx_api_start_clear(&s);
    }
  }
  agsx_error_free(&err);
  return 0;
}
