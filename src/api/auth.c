/* agsx — api: the API key file and the derived sandbox tokens. */
#include "config.h"

#include "api/auth.h"

#include "util/digest.h"

#include <string.h>
#include <sys/stat.h>

bool agsx_api_key_is_valid(const char *key) {
  size_t n = strlen(key);
  if (n < AGSX_API_KEY_MIN || n > AGSX_API_KEY_MAX)
    return false;
  for (size_t i = 0; i < n; i++)
    if (key[i] <= ' ' || key[i] > '~')
      return false;
  return true;
}

static int generate(int dirfd, const char *name, const char *path, agsx_error_t *err) {
  char key[4 + 40 + 2] = "e2b_";
  agsx_random_hex(key + 4, 20);
  key[4 + 40] = '\n';
  key[4 + 40 + 1] = '\0';
  if (agsx_write_file_atomic(dirfd, name, key, strlen(key), 0600, err) < 0)
    return agsx_error_wrap(err, "write `%s`", path);
  return 0;
}

int agsx_api_key_load(const char *path, char **ret_key, bool *ret_created, agsx_error_t *err) {
  *ret_key = NULL;
  *ret_created = false;
  _cleanup_free_ char *dir = xstrdup(path);
  char *slash = strrchr(dir, '/');
  const char *name = slash ? slash + 1 : path;
  if (slash == dir)
    dir[1] = '\0';
  else if (slash)
    *slash = '\0';
  else
    snprintf(dir, strlen(dir) + 1, "%s", ".");
  if (*name == '\0')
    return agsx_error_set(err, EINVAL, "invalid API key file `%s`", path);
  if (agsx_mkdir_p(dir, 0755, err) < 0)
    return agsx_error_wrap(err, "the API key's directory");
  _cleanup_close_ int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0)
    return agsx_error_set(err, errno, "open `%s`", dir);
  _cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) {
    if (generate(dirfd, name, path, err) < 0)
      return -1;
    *ret_created = true;
    fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  }
  if (fd < 0)
    return agsx_error_set(err, errno, "open the API key file `%s`", path);
  struct stat st;
  if (fstat(fd, &st) < 0)
    return agsx_error_set(err, errno, "stat `%s`", path);
  /* Fail closed: a key others can read or replace guards nothing. */
  if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077))
    return agsx_error_set(err, EPERM,
                          "the API key file `%s` must be a regular file of ours, mode 0600", path);
  char buf[AGSX_API_KEY_MAX + 2];
  ssize_t n = agsx_read_all(fd, buf, sizeof(buf) - 1);
  if (n < 0)
    return agsx_error_set(err, errno, "read `%s`", path);
  buf[n] = '\0';
  buf[strcspn(buf, "\r\n")] = '\0';
  if (!agsx_api_key_is_valid(buf))
    return agsx_error_set(err, EINVAL, "the API key in `%s` is not 8 to 256 printable characters",
                          path);
  *ret_key = xstrdup(buf);
  return 0;
}

static void derive(const char *key, const char *label, const char *id, char ret[65]) {
  unsigned char md[32];
  _cleanup_free_ char *msg = xasprintf("%s:%s", label, id);
  agsx_hmac_sha256(key, strlen(key), msg, strlen(msg), md);
  for (unsigned i = 0; i < 32; i++)
    snprintf(ret + 2 * i, 3, "%02x", md[i]);
  ret[64] = '\0';
}

void agsx_api_envd_token(const char *key, const char *id, char ret[65]) {
  derive(key, "agsx-envd-token", id, ret);
}

void agsx_api_traffic_token(const char *key, const char *id, char ret[65]) {
  derive(key, "agsx-traffic-token", id, ret);
}

bool agsx_api_secret_equal(const char *a, const char *b) {
  if (a == NULL || b == NULL)
    return false;
  size_t la = strlen(a), lb = strlen(b);
  /* Compare as many bytes as the secret has whatever the guess's length. */
  int diff = la != lb;
  for (size_t i = 0; i < lb; i++)
    diff |= (i < la ? a[i] : 0) ^ b[i];
  return diff == 0;
}
