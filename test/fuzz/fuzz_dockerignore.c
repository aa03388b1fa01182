/* Fuzz target: .dockerignore parsing and matching. Input: patterns, then
 * after a NUL, paths to match (one a line). */
#include "config.h"

#include "image/build/dockerignore.h"
#include "fuzz.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *p = (const char *)data;
  const char *nul = memchr(p, '\0', size);
  size_t plen = nul ? (size_t)(nul - p) : size;
  struct agsx_dockerignore di;
  agsx_error_t err = NULL;
  if (agsx_dockerignore_parse(p, plen, &di, &err) < 0) {
    agsx_error_free(&err);
    return 0;
  }
  if (nul) {
    char *paths = strndup(nul + 1, size - plen - 1);
    if (paths == NULL)
      __builtin_trap();
    for (char *save = NULL, *line = strtok_r(paths, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save))
      (void)agsx_dockerignore_excluded(&di, line);
    free(paths);
  } else {
    (void)agsx_dockerignore_excluded(&di, "a/b/c.txt");
  }
  agsx_dockerignore_clear(&di);
  return 0;
}
