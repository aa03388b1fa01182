/* agsx — caps: the capability set a sandbox's command holds (Docker's
 * default set). One table, used to set the capabilities (init.c) and to
 * read seccomp profiles whose entries depend on capabilities (seccomp.c). */
#ifndef AGSX_CAPS_H
#define AGSX_CAPS_H

#include "util/util.h"

struct agsx_cap {
  const char *name; /* "CAP_CHOWN" */
  int value;
};

extern const struct agsx_cap agsx_default_caps[];
extern const size_t agsx_n_default_caps;

bool agsx_cap_is_default(int value);
bool agsx_cap_name_is_default(const char *name); /* case-insensitive */

#endif
