/* Fuzz target: the shared tar-entry policy and reading loop (tarentry.h).
 * The first byte picks the policy (bit 0: refuse absolute names, bit 1:
 * collapse empty and "." components) and the mode (bit 2: the rest is a
 * tar stream, read to the end; else it is one name). Every name the
 * policy lets through must be clean (relative, no "..", no empty or "."
 * component, within the bounds) and clean it again unchanged; anything
 * else aborts the run. */
#include "config.h"

#include "fuzz.h"
#include "image/tarentry.h"

#include <limits.h>
#include <string.h>

static void check_clean(const char *path, const struct agsx_tarentry_policy *p) {
  if (strlen(path) > p->max_path || path[0] == '/')
    __builtin_trap();
  if (*path == '\0')
    return;
  size_t depth = 0;
  for (const char *c = path;; c++) {
    size_t n = strcspn(c, "/");
    if (n == 0 || n > NAME_MAX || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
      __builtin_trap();
    if (++depth > p->max_depth)
      __builtin_trap();
    c += n;
    if (*c == '\0')
      break;
  }
  /* Idempotent: a clean name is its own cleaning, under every policy. */
  struct agsx_tarentry_policy strict = *p;
  strict.collapse = false;
  strict.refuse_absolute = true;
  char *again = NULL;
  agsx_error_t err = NULL;
  if (agsx_tarentry_clean(path, &strict, &again, &err) < 0 || strcmp(again, path) != 0)
    __builtin_trap();
  free(again);
}

static void read_stream(const uint8_t *data, size_t size, const struct agsx_tarentry_policy *p) {
  struct archive *a = archive_read_new();
  if (a == NULL)
    __builtin_trap();
  archive_read_support_format_tar(a);
  agsx_error_t err = NULL;
  if (archive_read_open_memory(a, data, size) == ARCHIVE_OK) {
    struct agsx_tar_reader rd = {.a = a, .policy = p, .what = "entry"};
    struct agsx_tarentry *t;
    while (agsx_tar_reader_next(&rd, &t, &err) > 0) {
      check_clean(t->path, p);
      if ((t->kind == AGSX_TAR_HARDLINK) != (t->hardlink != NULL))
        __builtin_trap();
      if (t->hardlink && *t->hardlink == '\0')
        __builtin_trap(); /* never the root */
      if (t->hardlink)
        check_clean(t->hardlink, p);
      if (t->kind == AGSX_TAR_SYMLINK &&
          (t->symlink == NULL || *t->symlink == '\0' || strlen(t->symlink) > p->max_path))
        __builtin_trap();
    }
    agsx_error_free(&err);
    agsx_tar_reader_clear(&rd);
  }
  archive_read_free(a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  struct agsx_tarentry_policy p;
  agsx_tarentry_policy_default(&p);
  p.refuse_absolute = data[0] & 1;
  p.collapse = data[0] & 2;
  p.max_entries = 1000;
  p.max_depth = 64; /* small bounds, so the fuzzer reaches them */
  p.max_path = 1024;
  if (data[0] & 4) {
    read_stream(data + 1, size - 1, &p);
    return 0;
  }
  char *name = strndup((const char *)data + 1, size - 1);
  if (name == NULL)
    __builtin_trap();
  char *clean = NULL;
  agsx_error_t err = NULL;
  if (agsx_tarentry_clean(name, &p, &clean, &err) == 0)
    check_clean(clean, &p);
  else if (clean != NULL || err == NULL)
    __builtin_trap();
  agsx_error_free(&err);
  free(clean);
  free(name);
  return 0;
}
