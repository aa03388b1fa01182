/* agsx — dockerignore: the .dockerignore matcher (Docker's semantics):
 * patterns are cleaned paths relative to the context (a leading '/' is
 * dropped), `*`, `?` and `[...]` match within one path component, `**`
 * matches any number of components, `!` re-includes, the last matching
 * pattern wins, and a pattern that matches a directory excludes everything
 * below it. Comments (#) and blank lines are ignored. */
#ifndef AGSX_DOCKERIGNORE_H
#define AGSX_DOCKERIGNORE_H

#include "util/util.h"

#define AGSX_DOCKERIGNORE_MAX (1u << 20)
#define AGSX_DOCKERIGNORE_MAX_PATTERNS 4096

struct agsx_ignore_pattern {
  char **parts; /* components, NULL-terminated */
  size_t n_parts;
  bool negate;
};

struct agsx_dockerignore {
  struct agsx_ignore_pattern *v;
  size_t n;
  bool has_negation;
};

int agsx_dockerignore_parse(const char *buf, size_t len, struct agsx_dockerignore *ret,
                            agsx_error_t *err);
void agsx_dockerignore_clear(struct agsx_dockerignore *di);
/* Is PATH (relative to the context, clean, '/'-separated) excluded? */
bool agsx_dockerignore_excluded(const struct agsx_dockerignore *di, const char *path);

#endif
