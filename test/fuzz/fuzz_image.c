/* Fuzz target: image metadata parsers (manifest, index, config) and the
 * bounded JSON parser under them. The first byte picks the parser so one
 * corpus covers all. */
#include "config.h"

#include "fuzz.h"
#include "image/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  const char *buf = (const char *)data + 1;
  size_t len = size - 1;
  agsx_error_t err = NULL;
  switch (data[0] % 4) {
  case 0: {
    struct agsx_manifest m;
    if (agsx_manifest_parse(buf, len, &m, &err) == 0)
      agsx_manifest_clear(&m);
    break;
  }
  case 1: {
    struct agsx_index ix;
    if (agsx_index_parse(buf, len, &ix, &err) == 0) {
      agsx_index_select_platform(&ix, NULL);
      agsx_index_clear(&ix);
    }
    break;
  }
  case 2: {
    struct agsx_image_config c;
    if (agsx_image_config_parse(buf, len, &c, &err) == 0)
      agsx_image_config_clear(&c);
    break;
  }
  default: {
    yajl_val v = agsx_json_parse(buf, len, 1u << 20, &err);
    if (v) {
      yajl_gen g = agsx_json_gen_new(false);
      agsx_json_value(g, v);
      yajl_gen_free(g);
      yajl_tree_free(v);
    }
    break;
  }
  }
  agsx_error_free(&err);
  return 0;
}
