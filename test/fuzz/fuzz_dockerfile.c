/* Fuzz target: Dockerfile parsing, and word processing of every
 * instruction's arguments with a few variables set. */
#include "config.h"

#include "image/build/dockerfile.h"
#include "fuzz.h"

#include <string.h>

static const char *lookup(const char *name, void *data) {
  (void)data;
  return strcmp(name, "A") == 0 ? "a b" : strcmp(name, "E") == 0 ? "" : NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct agsx_dockerfile df;
  agsx_error_t err = NULL;
  if (agsx_dockerfile_parse((const char *)data, size, &df, &err) < 0) {
    if (err == NULL || err->msg == NULL)
      __builtin_trap();
    agsx_error_free(&err);
    return 0;
  }
  for (size_t i = 0; i < df.n; i++) {
    const struct agsx_df_instr *in = &df.v[i];
    if (in->line == 0 || in->text == NULL || in->args == NULL || (in->json && in->argv == NULL))
      __builtin_trap();
    char **w = NULL;
    char *one = NULL;
    if (agsx_df_expand_words(in->args, df.escape, lookup, NULL, &w, &err) == 0)
      agsx_strv_free(w);
    agsx_error_free(&err);
    if (agsx_df_expand_word(in->args, df.escape, lookup, NULL, &one, &err) == 0)
      free(one);
    agsx_error_free(&err);
  }
  agsx_dockerfile_clear(&df);
  return 0;
}
