/* Fuzz target: a line a code context's bridge wrote (untrusted: user code
 * runs as the same user). What comes out must be one valid JSON line of
 * ASCII characters, whatever went in. */
#include "config.h"

#include "code/code.h"
#include "fuzz.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct agsx_code_item it;
  agsx_error_t err = NULL;
  int r =
      agsx_code_item_parse((const char *)data, size, "00112233445566778899aabbccddeeff", &it, &err);
  if ((r < 0) != (err != NULL))
    __builtin_trap();
  if (r == 1 && it.line) {
    for (size_t i = 0; i < it.line_len; i++)
      if ((unsigned char)it.line[i] >= 0x80 || it.line[i] < 0x20)
        __builtin_trap();
    agsx_error_t e2 = NULL;
    yajl_val v = agsx_json_parse(it.line, it.line_len, AGSX_CODE_LINE_MAX, &e2);
    if (v == NULL)
      __builtin_trap();
    yajl_tree_free(v);
  }
  if (r == 1)
    agsx_code_item_clear(&it);
  agsx_error_free(&err);
  return 0;
}
