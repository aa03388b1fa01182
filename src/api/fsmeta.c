/* agsx — fsops: file metadata, envd's `user.e2b.*` extended attributes (see
 * fsops.h): the X-Metadata-* request headers, and reading and writing a
 * file's set. Every xattr call goes through an fd that was opened inside
 * the sandbox's root (openat2), never through a sandbox path. */
#include "config.h"

#include "api/fsops-internal.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>
#include <sys/xattr.h>

#define HEADER_PREFIX "X-Metadata-"
#define PREFIX_LEN (sizeof(AGSX_FS_META_PREFIX) - 1)
#define LIST_MAX 65536u /* the kernel's XATTR_LIST_MAX */

void agsx_fs_meta_clear(struct agsx_fs_meta *m) {
  if (m == NULL)
    return;
  for (size_t i = 0; i < m->n; i++) {
    free(m->keys[i]);
    free(m->values[i]);
  }
  free(m->keys);
  free(m->values);
  memset(m, 0, sizeof(*m));
}

static bool printable(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
      return false;
  return true;
}

static bool meta_has(const struct agsx_fs_meta *m, const char *key) {
  for (size_t i = 0; i < m->n; i++)
    if (strcmp(m->keys[i], key) == 0)
      return true;
  return false;
}

/* Inserts KEY (taken) and VALUE (taken) in key order. */
static void meta_put(struct agsx_fs_meta *m, char *key, char *value) {
  size_t at = 0;
  while (at < m->n && strcmp(m->keys[at], key) < 0)
    at++;
  m->keys = xrealloc(m->keys, (m->n + 1) * sizeof(*m->keys));
  m->values = xrealloc(m->values, (m->n + 1) * sizeof(*m->values));
  memmove(m->keys + at + 1, m->keys + at, (m->n - at) * sizeof(*m->keys));
  memmove(m->values + at + 1, m->values + at, (m->n - at) * sizeof(*m->values));
  m->bytes += PREFIX_LEN + strlen(key) + strlen(value);
  m->keys[at] = key;
  m->values[at] = value;
  m->n++;
}

int agsx_fs_meta_header(struct agsx_fs_meta *m, const char *name, const char *value,
                        agsx_error_t *err) {
  size_t pl = strlen(HEADER_PREFIX);
  if (name == NULL || strncasecmp(name, HEADER_PREFIX, pl) != 0 || name[pl] == '\0')
    return 0;
  if (value == NULL)
    value = "";
  _cleanup_free_ char *key = xstrdup(name + pl);
  size_t kl = strlen(key), vl = strlen(value);
  for (size_t i = 0; i < kl; i++)
    key[i] = (char)tolower((unsigned char)key[i]);
  if (meta_has(m, key))
    return 0;
  if (kl > AGSX_FS_META_KEY_MAX)
    return agsx_error_set_quiet(err, EINVAL,
                                "invalid metadata: metadata key '%.64s...' exceeds %zu bytes", key,
                                (size_t)AGSX_FS_META_KEY_MAX);
  if (!printable(key, kl))
    return agsx_error_set_quiet(
        err, EINVAL, "invalid metadata: metadata key contains a non-printable-ASCII byte");
  if (!printable(value, vl))
    return agsx_error_set_quiet(err, EINVAL,
                                "invalid metadata: metadata value for key '%s' contains a "
                                "non-printable-ASCII byte",
                                key);
  if (m->bytes + PREFIX_LEN + kl + vl > AGSX_FS_META_MAX)
    return agsx_error_set_quiet(
        err, E2BIG, "invalid metadata: total metadata size exceeds %u bytes", AGSX_FS_META_MAX);
  meta_put(m, steal_ptr(&key), xstrdup(value));
  return 1;
}

/* xattr calls on an fd, O_PATH ones included (f*xattr refuses those): its
 * /proc/self/fd link names the inode the fd holds, whatever the sandbox
 * did to the path since. */
static void fd_link(int fd, char buf[static 32]) { snprintf(buf, 32, "/proc/self/fd/%d", fd); }

/* A value of the inode behind LINK, NUL-terminated, at most MAX bytes;
 * NULL when absent, larger, or holding a NUL (no text). */
static char *get_value(const char *link, const char *name, size_t max) {
  _cleanup_free_ char *v = xmalloc(max + 1);
  ssize_t n = getxattr(link, name, v, max);
  if (n < 0 || memchr(v, '\0', (size_t)n))
    return NULL;
  v[n] = '\0';
  return steal_ptr(&v);
}

void fs_meta_read(int fd, struct agsx_fs_meta *ret) {
  memset(ret, 0, sizeof(*ret));
  char link[32];
  fd_link(fd, link);
  ssize_t n = listxattr(link, NULL, 0);
  if (n <= 0 || (size_t)n > LIST_MAX)
    return;
  _cleanup_free_ char *names = xmalloc((size_t)n + 1);
  n = listxattr(link, names, (size_t)n);
  if (n <= 0)
    return; /* gone, or grown meanwhile: shown without */
  names[n] = '\0';
  for (char *p = names; p < names + n; p += strlen(p) + 1) {
    if (strncmp(p, AGSX_FS_META_PREFIX, PREFIX_LEN) != 0 || p[PREFIX_LEN] == '\0')
      continue;
    const char *key = p + PREFIX_LEN;
    size_t used = ret->bytes + strlen(p);
    if (used >= AGSX_FS_META_MAX || !printable(key, strlen(key)))
      continue; /* the set's bound, as envd's writes keep it: the rest is not shown */
    _cleanup_free_ char *v = get_value(link, p, AGSX_FS_META_MAX - used);
    if (v == NULL || !printable(v, strlen(v)))
      continue;
    meta_put(ret, xstrdup(key), steal_ptr(&v));
  }
}

int fs_meta_write(int fd, const struct agsx_fs_meta *m, const char *path, agsx_error_t *err) {
  for (size_t i = 0; i < m->n; i++) {
    _cleanup_free_ char *name = xasprintf("%s%s", AGSX_FS_META_PREFIX, m->keys[i]);
    if (fsetxattr(fd, name, m->values[i], strlen(m->values[i]), 0) == 0)
      continue;
    if (errno == EOPNOTSUPP)
      return agsx_error_set_quiet(err, EOPNOTSUPP,
                                  "file metadata: the filesystem of %s keeps no user extended "
                                  "attributes",
                                  path);
    if (errno == ENOSPC || errno == EDQUOT || errno == E2BIG)
      return agsx_error_set_quiet(err, errno, "not enough space for file metadata of %s", path);
    return agsx_error_set(err, errno, "error writing file metadata of %s", path);
  }
  return 0;
}
