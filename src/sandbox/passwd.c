/* agsx — USER[:GROUP] resolution from passwd/group text. */
#include "config.h"

#include "sandbox/passwd.h"

#include <string.h>

#define ID_MAX 65535

/* Splits LINE (NUL-terminated) on ':' into at most N fields. */
static size_t split(char *line, char **fields, size_t n) {
  size_t k = 0;
  fields[k++] = line;
  for (char *p = line; *p && k < n; p++)
    if (*p == ':') {
      *p = '\0';
      fields[k++] = p + 1;
    }
  return k;
}

static bool parse_id(const char *s, unsigned *ret) {
  if (*s == '\0' || strlen(s) > 10)
    return false;
  unsigned long v = 0;
  for (const char *p = s; *p; p++) {
    if (*p < '0' || *p > '9')
      return false;
    v = v * 10 + (unsigned long)(*p - '0');
  }
  if (v > 0xffffffffUL)
    return false;
  *ret = (unsigned)v;
  return true;
}

/* Calls FN for each line of TEXT with its fields; stops when FN returns true. */
typedef bool (*line_fn)(char **f, size_t n, void *data);

static bool each_line(const char *text, size_t len, size_t nfields, line_fn fn, void *data) {
  if (text == NULL)
    return false;
  const char *p = text, *end = text + len;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
    if (l > 0 && l < 4096 && p[0] != '#') {
      char line[4096];
      memcpy(line, p, l);
      line[l] = '\0';
      char *f[8];
      size_t n = split(line, f, nfields);
      if (fn(f, n, data))
        return true;
    }
    p += l + 1;
  }
  return false;
}

struct pw_query {
  const char *name; /* match by name, or */
  unsigned uid;     /* by uid when name is NULL */
  struct agsx_user *u;
  bool found;
};

static bool pw_match(char **f, size_t n, void *data) {
  struct pw_query *q = data;
  unsigned uid, gid;
  if (n < 7 || !parse_id(f[2], &uid) || !parse_id(f[3], &gid))
    return false;
  if (q->name ? strcmp(f[0], q->name) != 0 : uid != q->uid)
    return false;
  q->u->uid = uid;
  q->u->gid = gid;
  snprintf(q->u->home, sizeof(q->u->home), "%s", f[5]);
  q->found = true;
  return true;
}

struct gr_query {
  const char *name;   /* group name to find, or */
  const char *member; /* user name whose groups we collect */
  unsigned gid;
  struct agsx_user *u;
  bool found;
};

static bool gr_match(char **f, size_t n, void *data) {
  struct gr_query *q = data;
  unsigned gid;
  if (n < 4 || !parse_id(f[2], &gid))
    return false;
  if (q->name) {
    if (strcmp(f[0], q->name) != 0)
      return false;
    q->gid = gid;
    q->found = true;
    return true;
  }
  /* Member lists are comma-separated user names. */
  for (char *m = f[3]; m && *m;) {
    char *comma = strchr(m, ',');
    size_t l = comma ? (size_t)(comma - m) : strlen(m);
    if (strlen(q->member) == l && strncmp(m, q->member, l) == 0 && gid <= ID_MAX &&
        q->u->n_groups < AGSX_MAX_GROUPS && gid != q->u->gid)
      q->u->groups[q->u->n_groups++] = gid;
    m = comma ? comma + 1 : NULL;
  }
  return false;
}

static int resolve_group(const char *spec, const char *group, size_t group_len, gid_t *ret,
                         agsx_error_t *err) {
  unsigned gid;
  if (parse_id(spec, &gid)) {
    if (gid > ID_MAX)
      return agsx_error_set(err, 0, "group id %u is outside the sandbox's ids (0-65535)", gid);
    *ret = gid;
    return 0;
  }
  struct gr_query q = {.name = spec};
  each_line(group, group_len, 4, gr_match, &q);
  if (!q.found)
    return agsx_error_set(err, 0, "unknown group `%s` (no such entry in the image's /etc/group)",
                          spec);
  if (q.gid > ID_MAX)
    return agsx_error_set(err, 0, "group `%s` has id %u, outside 0-65535", spec, q.gid);
  *ret = q.gid;
  return 0;
}

static int resolve_user(const char *spec, const char *passwd, size_t passwd_len,
                        struct agsx_user *u, const char **ret_name, agsx_error_t *err) {
  unsigned uid;
  struct pw_query q = {.u = u};
  if (parse_id(spec, &uid)) {
    if (uid > ID_MAX)
      return agsx_error_set(err, 0, "user id %u is outside the sandbox's ids (0-65535)", uid);
    q.uid = uid;
    each_line(passwd, passwd_len, 7, pw_match, &q);
    if (q.found && u->gid > ID_MAX)
      return agsx_error_set(err, 0, "user %u has group id %u, outside 0-65535", uid, u->gid);
    if (!q.found) { /* a bare number needs no entry */
      u->uid = uid;
      u->gid = uid == 0 ? 0 : uid;
      snprintf(u->home, sizeof(u->home), "/");
    }
    *ret_name = NULL;
    return 0;
  }
  q.name = spec;
  each_line(passwd, passwd_len, 7, pw_match, &q);
  if (!q.found)
    return agsx_error_set(err, 0, "unknown user `%s` (no such entry in the image's /etc/passwd)",
                          spec);
  if (u->uid > ID_MAX || u->gid > ID_MAX)
    return agsx_error_set(err, 0, "user `%s` has ids outside 0-65535", spec);
  *ret_name = spec;
  return 0;
}

int agsx_user_resolve(const char *spec, const char *passwd, size_t passwd_len, const char *group,
                      size_t group_len, struct agsx_user *ret, agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  snprintf(ret->home, sizeof(ret->home), "/root");
  if (spec == NULL || *spec == '\0')
    spec = "0";
  if (strlen(spec) > 256)
    return agsx_error_set(err, 0, "user `%.32s…` is too long", spec);
  char buf[257];
  snprintf(buf, sizeof(buf), "%s", spec);
  char *colon = strchr(buf, ':');
  if (colon)
    *colon = '\0';
  const char *name = NULL;
  if (buf[0] == '\0')
    return agsx_error_set(err, 0, "invalid user `%s`", spec);
  if (resolve_user(buf, passwd, passwd_len, ret, &name, err) < 0)
    return -1;
  if (colon && resolve_group(colon + 1, group, group_len, &ret->gid, err) < 0)
    return -1;
  ret->groups[0] = ret->gid;
  ret->n_groups = 1;
  if (name && !colon) {
    struct gr_query q = {.member = name, .u = ret};
    each_line(group, group_len, 4, gr_match, &q);
  }
  return 0;
}

struct name_query {
  unsigned id;
  char *buf;
  size_t size;
  bool found;
};

static bool name_match(char **f, size_t n, void *data) {
  struct name_query *q = data;
  unsigned id;
  if (n < 3 || !parse_id(f[2], &id) || id != q->id || f[0][0] == '\0')
    return false;
  q->found = strlen(f[0]) < q->size;
  if (q->found)
    snprintf(q->buf, q->size, "%s", f[0]);
  return true;
}

bool agsx_passwd_name(const char *text, size_t len, unsigned id, char *buf, size_t size) {
  struct name_query q = {.id = id, .buf = buf, .size = size};
  each_line(text, len, 4, name_match, &q);
  return q.found;
}
