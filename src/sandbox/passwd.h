/* agsx — passwd: resolving USER[:GROUP] against a sandbox's /etc/passwd and
 * /etc/group. The files are sandbox content (hostile); they are parsed by
 * hand, never through NSS, which would load the sandbox's libraries into a
 * process that still holds privileges. */
#ifndef AGSX_PASSWD_H
#define AGSX_PASSWD_H

#include "util/util.h"

#define AGSX_PASSWD_MAX (4u << 20)
#define AGSX_MAX_GROUPS 64

struct agsx_user {
  uid_t uid;
  gid_t gid;
  gid_t groups[AGSX_MAX_GROUPS]; /* supplementary groups, gid first */
  size_t n_groups;
  char home[256];
};

/* Resolves SPEC ("name", "uid", "name:group", "uid:gid", NULL = root) from
 * the passwd and group file contents (either may be NULL when missing).
 * Numeric ids need no entry; ids above 65535 are refused (the sandbox maps
 * only 0–65535). */
int agsx_user_resolve(const char *spec, const char *passwd, size_t passwd_len, const char *group,
                      size_t group_len, struct agsx_user *ret, agsx_error_t *err);

/* The name of ID in passwd or group text TEXT (field 1 of the first entry
 * whose field 3 is ID) into BUF; false when there is none (or it does not
 * fit). For showing owners, as `ls -l` does. */
bool agsx_passwd_name(const char *text, size_t len, unsigned id, char *buf, size_t size);

#endif
