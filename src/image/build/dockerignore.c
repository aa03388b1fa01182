/* agsx — the .dockerignore matcher. See dockerignore.h. */
#include "config.h"

#include "image/build/dockerignore.h"

#include <fnmatch.h>
#include <string.h>

void agsx_dockerignore_clear(struct agsx_dockerignore *di) {
  for (size_t i = 0; i < di->n; i++)
    agsx_strv_free(di->v[i].parts);
  free(di->v);
  memset(di, 0, sizeof(*di));
}

/* Splits a pattern into clean components ("." dropped, ".." pops). */
static char **split_clean(const char *p, size_t *ret_n) {
  char **v = xzalloc(sizeof(char *));
  size_t n = 0;
  while (*p) {
    size_t k = strcspn(p, "/");
    if (k == 0 || (k == 1 && p[0] == '.')) {
      /* empty or "." component */
    } else if (k == 2 && p[0] == '.' && p[1] == '.') {
      if (n > 0)
        free(v[--n]), v[n] = NULL;
    } else {
      v = xrealloc(v, (n + 2) * sizeof(char *));
      v[n++] = xstrndup(p, k);
      v[n] = NULL;
    }
    p += k;
    if (*p == '/')
      p++;
  }
  *ret_n = n;
  return v;
}

int agsx_dockerignore_parse(const char *buf, size_t len, struct agsx_dockerignore *ret,
                            agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  if (len > AGSX_DOCKERIGNORE_MAX)
    return agsx_error_set(err, 0, ".dockerignore is larger than %u bytes", AGSX_DOCKERIGNORE_MAX);
  if (memchr(buf, '\0', len))
    return agsx_error_set(err, 0, ".dockerignore holds a NUL byte");
  size_t pos = 0;
  while (pos < len) {
    const char *s = buf + pos;
    const char *nl = memchr(s, '\n', len - pos);
    size_t n = nl ? (size_t)(nl - s) : len - pos;
    pos += n + (nl ? 1 : 0);
    while (n && (s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
      n--;
    while (n && (*s == ' ' || *s == '\t'))
      s++, n--;
    if (n == 0 || *s == '#')
      continue;
    bool neg = *s == '!';
    if (neg) {
      s++, n--;
      while (n && (*s == ' ' || *s == '\t'))
        s++, n--;
    }
    _cleanup_free_ char *pat = xstrndup(s, n);
    size_t np;
    char **parts = split_clean(pat, &np);
    if (np > 256) {
      agsx_strv_free(parts);
      agsx_dockerignore_clear(ret);
      return agsx_error_set(err, 0, ".dockerignore: a pattern has more than 256 components");
    }
    if (np == 0) {
      agsx_strv_free(parts);
      continue;
    }
    if (ret->n >= AGSX_DOCKERIGNORE_MAX_PATTERNS) {
      agsx_strv_free(parts);
      agsx_dockerignore_clear(ret);
      return agsx_error_set(err, 0, ".dockerignore has more than %d patterns",
                            AGSX_DOCKERIGNORE_MAX_PATTERNS);
    }
    ret->v = xrealloc(ret->v, (ret->n + 1) * sizeof(*ret->v));
    ret->v[ret->n++] = (struct agsx_ignore_pattern){.parts = parts, .n_parts = np, .negate = neg};
    ret->has_negation |= neg;
  }
  return 0;
}

/* Matches pattern components PP against path components XP, both whole:
 * a table over (pattern suffix, path suffix), so that many "**" cost
 * np * nx steps rather than an exponential search. */
static bool match_parts(char *const *pp, size_t np, char *const *xp, size_t nx) {
  _cleanup_free_ bool *m = xzalloc((np + 1) * (nx + 1) * sizeof(bool));
#define M(i, j) m[(i) * (nx + 1) + (j)]
  M(np, nx) = true;
  for (size_t i = np; i-- > 0;) {
    bool dstar = strcmp(pp[i], "**") == 0;
    for (size_t j = nx + 1; j-- > 0;) {
      if (dstar)
        /* zero components, or one and stay on "**" */
        M(i, j) = M(i + 1, j) || (j < nx && M(i, j + 1));
      else
        /* "**" inside a component behaves like "*" */
        M(i, j) = j < nx && M(i + 1, j + 1) && fnmatch(pp[i], xp[j], 0) == 0;
    }
  }
  bool r = M(0, 0);
#undef M
  return r;
}

/* The pattern matches the path or one of its parent directories. */
static bool matches(const struct agsx_ignore_pattern *p, char *const *xp, size_t nx) {
  for (size_t k = nx; k >= 1; k--)
    if (match_parts(p->parts, p->n_parts, xp, k))
      return true;
  return false;
}

bool agsx_dockerignore_excluded(const struct agsx_dockerignore *di, const char *path) {
  if (di == NULL || di->n == 0)
    return false;
  size_t nx;
  char **xp = split_clean(path, &nx);
  bool excluded = false;
  if (nx > 0)
    for (size_t i = 0; i < di->n; i++)
      if (matches(&di->v[i], xp, nx))
        excluded = !di->v[i].negate;
  agsx_strv_free(xp);
  return excluded;
}
