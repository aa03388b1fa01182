/* agsx — tarentry: the tar-entry name policy and reading loop (see
 * tarentry.h). */
#include "config.h"

#include "image/tarentry.h"

#include <inttypes.h>
#include <limits.h>
#include <string.h>

#define QUOTE_MAX 256

void agsx_tarentry_policy_default(struct agsx_tarentry_policy *p) {
  *p = (struct agsx_tarentry_policy){.max_path = 4096, .max_depth = 256};
}

char *agsx_tarentry_quote(const char *s) {
  size_t cap = QUOTE_MAX * 4 + 4, n = 0;
  char *out = xmalloc(cap);
  size_t i;
  for (i = 0; s[i] != '\0' && i < QUOTE_MAX; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x20 || c == 0x7f || c == '\\')
      n += (size_t)snprintf(out + n, cap - n, "\\x%02x", c);
    else
      out[n++] = (char)c;
  }
  snprintf(out + n, cap - n, "%s", s[i] != '\0' ? "..." : "");
  return out;
}

/* PATH without empty and "." components. */
static void collapse(char *path) {
  char *out = path;
  for (const char *p = path; *p != '\0';) {
    size_t n = strcspn(p, "/");
    if (n > 0 && !(n == 1 && p[0] == '.')) {
      if (out != path)
        *out++ = '/';
      memmove(out, p, n);
      out += n;
    }
    p += n;
    p += *p == '/';
  }
  *out = '\0';
}

/* Checks every component of the relative PATH, in order, so the first
 * fault is the one named; empty and "." components are refused last (an
 * escape is the more useful message). */
static int check_components(const char *path, const struct agsx_tarentry_policy *pol,
                            agsx_error_t *err) {
  size_t depth = 0;
  bool bad = false;
  for (const char *p = path;;) {
    size_t n = strcspn(p, "/");
    if (n == 2 && p[0] == '.' && p[1] == '.')
      return agsx_error_set(err, 0, "path contains `..`");
    if (n > NAME_MAX)
      return agsx_error_set(err, 0, "component longer than %d bytes", NAME_MAX);
    if (++depth > pol->max_depth)
      return agsx_error_set(err, 0, "path deeper than %zu components", pol->max_depth);
    bad |= n == 0 || (n == 1 && p[0] == '.');
    p += n;
    if (*p == '\0')
      break;
    p++;
  }
  if (bad)
    return agsx_error_set(err, 0, "invalid path (empty or `.` component)");
  return 0;
}

int agsx_tarentry_clean(const char *raw, const struct agsx_tarentry_policy *pol, char **ret,
                        agsx_error_t *err) {
  if (raw == NULL)
    return agsx_error_set(err, 0, "name cannot be decoded");
  if (strlen(raw) > pol->max_path)
    return agsx_error_set(err, 0, "name longer than %zu bytes", pol->max_path);
  if (raw[0] == '/' && pol->refuse_absolute)
    return agsx_error_set(err, 0, "absolute path");
  /* Leading "/" and "./" name the root, as in tar and containerd: "/etc/x"
   * is neutralised to "etc/x". */
  while (raw[0] == '/' || (raw[0] == '.' && raw[1] == '/'))
    raw += raw[0] == '/' ? 1 : 2;
  if (strcmp(raw, ".") == 0)
    raw = "";
  _cleanup_free_ char *p = xstrdup(raw);
  size_t n = strlen(p);
  while (n > 0 && p[n - 1] == '/')
    p[--n] = '\0';
  if (pol->collapse)
    collapse(p);
  if (*p != '\0' && check_components(p, pol, err) < 0)
    return -1;
  *ret = steal_ptr(&p);
  return 0;
}

static const char *entry_string(const char *mbs, const char *utf8) { return mbs ? mbs : utf8; }

static enum agsx_tarentry_kind kind_of(struct archive_entry *e, bool hardlink) {
  if (hardlink)
    return AGSX_TAR_HARDLINK;
  switch (archive_entry_filetype(e)) {
  case AE_IFREG: return AGSX_TAR_FILE;
  case AE_IFDIR: return AGSX_TAR_DIR;
  case AE_IFLNK: return AGSX_TAR_SYMLINK;
  case AE_IFIFO: return AGSX_TAR_FIFO;
  case AE_IFCHR:
  case AE_IFBLK:
  case AE_IFSOCK: return AGSX_TAR_DEVICE;
  default: return AGSX_TAR_OTHER;
  }
}

static int check_links(struct agsx_tar_reader *r, agsx_error_t *err) {
  struct agsx_tarentry *t = &r->cur;
  const char *hl = entry_string(archive_entry_hardlink(t->ae), archive_entry_hardlink_utf8(t->ae));
  t->kind = kind_of(t->ae, hl != NULL);
  if (t->kind == AGSX_TAR_HARDLINK) {
    if (agsx_tarentry_clean(hl, r->policy, &t->hardlink, err) < 0)
      return agsx_error_wrap(err, "hardlink target");
    if (*t->hardlink == '\0')
      return agsx_error_set(err, 0, "hardlink target is the %s", r->root ? r->root : "root");
  } else if (t->kind == AGSX_TAR_SYMLINK) {
    t->symlink = entry_string(archive_entry_symlink(t->ae), archive_entry_symlink_utf8(t->ae));
    if (t->symlink == NULL || *t->symlink == '\0')
      return agsx_error_set(err, 0, "symlink without a target");
    if (strlen(t->symlink) > r->policy->max_path)
      return agsx_error_set(err, 0, "symlink target longer than %zu bytes", r->policy->max_path);
  }
  return 0;
}

static void entry_clear(struct agsx_tarentry *t) {
  free(t->path);
  free(t->hardlink);
  *t = (struct agsx_tarentry){0};
}

int agsx_tar_reader_next(struct agsx_tar_reader *r, struct agsx_tarentry **ret, agsx_error_t *err) {
  entry_clear(&r->cur);
  r->read_failed = false;
  struct archive_entry *e;
  int h = archive_read_next_header(r->a, &e);
  if (h == ARCHIVE_EOF)
    return 0;
  if (h != ARCHIVE_OK && h != ARCHIVE_WARN) {
    r->read_failed = true;
    const char *msg = archive_error_string(r->a);
    return agsx_error_set(err, 0, "read tar: %s", msg ? msg : "unknown error");
  }
  if (r->policy->max_entries > 0 && ++r->entries > r->policy->max_entries)
    return agsx_error_set(err, 0, "more than %" PRIu64 " entries", r->policy->max_entries);
  r->cur.ae = e;
  r->cur.raw = entry_string(archive_entry_pathname(e), archive_entry_pathname_utf8(e));
  if (agsx_tarentry_clean(r->cur.raw, r->policy, &r->cur.path, err) < 0 ||
      check_links(r, err) < 0) {
    _cleanup_free_ char *q = agsx_tarentry_quote(r->cur.raw ? r->cur.raw : "?");
    return agsx_error_wrap(err, "%s `%s`", r->what ? r->what : "tar entry", q);
  }
  *ret = &r->cur;
  return 1;
}

void agsx_tar_reader_clear(struct agsx_tar_reader *r) { entry_clear(&r->cur); }
