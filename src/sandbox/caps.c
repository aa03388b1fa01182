/* agsx — Docker's default capability set. */
#include "config.h"

#include "sandbox/caps.h"

#include <linux/capability.h>
#include <strings.h>

const struct agsx_cap agsx_default_caps[] = {
    {"CAP_CHOWN", CAP_CHOWN},
    {"CAP_DAC_OVERRIDE", CAP_DAC_OVERRIDE},
    {"CAP_FOWNER", CAP_FOWNER},
    {"CAP_FSETID", CAP_FSETID},
    {"CAP_KILL", CAP_KILL},
    {"CAP_SETGID", CAP_SETGID},
    {"CAP_SETUID", CAP_SETUID},
    {"CAP_SETPCAP", CAP_SETPCAP},
    {"CAP_NET_BIND_SERVICE", CAP_NET_BIND_SERVICE},
    {"CAP_NET_RAW", CAP_NET_RAW},
    {"CAP_SYS_CHROOT", CAP_SYS_CHROOT},
    {"CAP_MKNOD", CAP_MKNOD},
    {"CAP_AUDIT_WRITE", CAP_AUDIT_WRITE},
    {"CAP_SETFCAP", CAP_SETFCAP},
};
const size_t agsx_n_default_caps = AGSX_ARRAY_SIZE(agsx_default_caps);

bool agsx_cap_is_default(int value) {
  for (size_t i = 0; i < agsx_n_default_caps; i++)
    if (agsx_default_caps[i].value == value)
      return true;
  return false;
}

bool agsx_cap_name_is_default(const char *name) {
  for (size_t i = 0; i < agsx_n_default_caps; i++)
    if (strcasecmp(agsx_default_caps[i].name, name) == 0)
      return true;
  return false;
}
