/* Fuzz target: envd-style path cleaning (fsops' fs_clean) on request
 * paths. The result must be absolute and clean: no empty, "." or ".."
 * component, no trailing slash but for "/" itself. Input: a path.
 * The same bytes, split at their first ':', are also an X-Metadata-*
 * request header's name and value (agsx_fs_meta_header, taken in turn
 * until one is refused): the set stays sorted, printable and within
 * AGSX_FS_META_MAX. And they are a POST /files/compose body
 * (agsx_fs_compose_parse): sources and a destination, or an error. */
#include "config.h"

#include "api/fsops-internal.h"
#include "fuzz.h"

#include <string.h>

/* "name:value\nname:value...": each line a header, with X-Metadata- put
 * before its name every other line. */
static void fuzz_meta(const char *in) {
  struct agsx_fs_meta m = {0};
  agsx_error_t err = NULL;
  char *copy = strdup(in), *save = NULL;
  int i = 0;
  for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save), i++) {
    char *colon = strchr(line, ':');
    if (colon)
      *colon = '\0';
    char name[8300];
    snprintf(name, sizeof(name), "%s%s", i % 2 ? "" : "X-Metadata-", line);
    if (agsx_fs_meta_header(&m, name, colon ? colon + 1 : NULL, &err) < 0) {
      if (err == NULL)
        __builtin_trap();
      break;
    }
  }
  size_t bytes = 0;
  for (size_t k = 0; k < m.n; k++) {
    if ((k > 0 && strcmp(m.keys[k - 1], m.keys[k]) >= 0) || m.keys[k][0] == '\0')
      __builtin_trap();
    for (const char *p = m.keys[k]; *p; p++)
      if (*p < 0x20 || *p > 0x7e || (*p >= 'A' && *p <= 'Z'))
        __builtin_trap();
    bytes += strlen(AGSX_FS_META_PREFIX) + strlen(m.keys[k]) + strlen(m.values[k]);
  }
  if (bytes != m.bytes || bytes > AGSX_FS_META_MAX)
    __builtin_trap();
  agsx_fs_meta_clear(&m);
  agsx_error_free(&err);
  free(copy);
}

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
  fuzz_meta(in + 1);
  struct agsx_fs_compose_req q;
  agsx_error_t cerr = NULL;
  if (agsx_fs_compose_parse((const char *)data, size, &q, &cerr) == 0) {
    if (q.n == 0 || q.n > AGSX_FS_COMPOSE_MAX || q.dest == NULL || q.dest[0] == '\0' ||
        agsx_strv_len(q.sources) != q.n || cerr)
      __builtin_trap();
    agsx_fs_compose_req_clear(&q);
  } else if (cerr == NULL || cerr->errno_ != EINVAL) {
    __builtin_trap();
  }
  agsx_error_free(&cerr);
  free(in);
  return 0;
}
