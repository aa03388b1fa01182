/* agsx — conf: the optional configuration file. */
#include "config.h"
#include "util/conf.h"
#include "util/lines.h"

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

struct conf_lines {
  const char *key;
  char *value;
};

static int conf_line(char *line, size_t lineno, void *data, agsx_error_t *err) {
  (void)lineno;
  struct conf_lines *d = data;
  char *eq = strchr(line, '=');
  if (eq == NULL)
    return agsx_error_set_quiet(err, EINVAL, "expected KEY = VALUE"), -1;
  *eq = '\0';
  char *k = trim(line), *v = trim(eq + 1);
  if (!key_is_valid(k, strlen(k)))
    return agsx_error_set_quiet(err, EINVAL, "invalid key `%s`", k), -1;
  if (strcmp(k, d->key) == 0) {
    free(d->value);
    d->value = xstrdup(v); /* the last one wins, as in most config files */
  }
  return 0;
}

int agsx_conf_parse(const char *text, size_t len, const char *what, const char *key, char **ret,
                    agsx_error_t *err) {
  *ret = NULL;
  struct conf_lines d = {key, NULL};
  /* (a value may hold `#`: comments are whole lines) */
  if (agsx_lines_each(text, len, what, 4096, 0, conf_line, &d, err) < 0) {
    free(d.value); /* *RET stays NULL on failure */
    return -1;
  }
  *ret = d.value;
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
