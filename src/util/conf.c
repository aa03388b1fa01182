/* agsx — conf: the optional configuration file. */
#include "config.h"
#include "util/conf.h"

#include <ctype.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>

static bool key_is_valid(const char *s, size_t n) {
  if (n == 0 || n > 64)
    return false;
  for (size_t i = 0; i < n; i++)
    if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '-'))
      return false;
  return true;
}

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t')
    s++;
  size_t n = strlen(s);
  while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
    s[--n] = '\0';
  return s;
}

int agsx_conf_parse(const char *text, size_t len, const char *what, const char *key, char **ret,
                    agsx_error_t *err) {
  *ret = NULL;
  _cleanup_free_ char *value = NULL; /* *RET stays NULL on failure */
  if (memchr(text, '\0', len))
    return agsx_error_set_quiet(err, EINVAL, "%s: a NUL byte in a text file", what), -1;
  size_t line = 0;
  for (size_t i = 0; i < len;) {
    const char *nl = memchr(text + i, '\n', len - i);
    size_t end = nl ? (size_t)(nl - text) : len;
    line++;
    if (end - i > 4096)
      return agsx_error_set_quiet(err, EINVAL, "%s:%zu: line too long", what, line), -1;
    _cleanup_free_ char *l = xstrndup(text + i, end - i);
    i = end + 1;
    char *s = trim(l);
    if (*s == '\0' || *s == '#')
      continue;
    char *eq = strchr(s, '=');
    if (eq == NULL)
      return agsx_error_set_quiet(err, EINVAL, "%s:%zu: expected KEY = VALUE", what, line), -1;
    *eq = '\0';
    char *k = trim(s), *v = trim(eq + 1);
    if (!key_is_valid(k, strlen(k)))
      return agsx_error_set_quiet(err, EINVAL, "%s:%zu: invalid key `%s`", what, line, k), -1;
    if (strcmp(k, key) == 0) {
      free(value);
      value = xstrdup(v); /* the last one wins, as in most config files */
    }
  }
  *ret = steal_ptr(&value);
  return 0;
}

/* The file's text, read once per process and path (AGSX_CONFIG may name
 * another) and kept until agsx_conf_reset(): a command asks for several
 * keys, and a long-lived process (the API server) reloads by resetting. A
 * missing file is cached too (as no text). The lock makes get and reset
 * safe from any thread. */
static pthread_mutex_t conf_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  char *path; /* NULL: nothing cached */
  char *text; /* NULL: no file */
  size_t len;
} conf_cache;

void agsx_conf_reset(void) {
  pthread_mutex_lock(&conf_lock);
  free(conf_cache.path);
  free(conf_cache.text);
  memset(&conf_cache, 0, sizeof(conf_cache));
  pthread_mutex_unlock(&conf_lock);
}

/* Fills the cache for PATH; called with the lock held. */
static int conf_load(const char *path, agsx_error_t *err) {
  if (conf_cache.path && strcmp(conf_cache.path, path) == 0)
    return 0;
  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0 && errno != ENOENT)
    return agsx_error_set(err, errno, "open `%s`", path);
  if (fd >= 0 && agsx_read_fd(fd, 1 << 20, &text, &len, err) < 0)
    return agsx_error_wrap(err, "read `%s`", path);
  free(conf_cache.path);
  free(conf_cache.text);
  conf_cache.path = xstrdup(path);
  conf_cache.text = steal_ptr(&text);
  conf_cache.len = len;
  return 0;
}

int agsx_conf_get(const char *key, const char *env, char **ret, agsx_error_t *err) {
  *ret = NULL;
  const char *e = env ? getenv(env) : NULL;
  if (e && *e) {
    *ret = xstrdup(e);
    return 0;
  }
  const char *path = getenv("AGSX_CONFIG");
  if (path == NULL || *path == '\0')
    path = AGSX_CONFIG_PATH;
  pthread_mutex_lock(&conf_lock);
  int r = conf_load(path, err);
  if (r == 0 && conf_cache.text)
    r = agsx_conf_parse(conf_cache.text, conf_cache.len, path, key, ret, err);
  pthread_mutex_unlock(&conf_lock);
  return r;
}
