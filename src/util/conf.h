/* agsx — conf: the optional /etc/agsx/agsx.conf (AGSX_CONFIG names
 * another file). Every setting has a default; environment variables
 * override the file, and command-line flags override both.
 *
 *   # comment
 *   public-subnet = 10.89.0.0/16
 *   public-bridge = agsx0
 *   dns = 192.0.2.53, 192.0.2.54
 *   insecure-registries = registry.lan:5000
 *   default-pids = 4096
 *   max-image-size = 64g     (store.h: the image budget)
 *   store-reserve = 1g       (store.h: free space kept)
 *   log-size = 8m            (logbuf.h: the cap of sandbox and process logs)
 *   cgroup-manager = auto    (host/cgroup.h: auto, systemd or cgroupfs)
 */
#ifndef AGSX_CONF_H
#define AGSX_CONF_H

#include "util/util.h"

#define AGSX_CONFIG_PATH "/etc/agsx/agsx.conf"
#define AGSX_DEFAULT_PUBLIC_SUBNET "10.89.0.0/16"
#define AGSX_DEFAULT_PUBLIC_BRIDGE "agsx0"

/* The value of KEY: the environment variable ENV if set and not empty,
 * else the file's, else NULL. The file is read once per process (per path)
 * and cached until agsx_conf_reset(). A malformed file is an error (with its
 * line), not silently ignored. On failure *RET is NULL. Thread-safe. */
int agsx_conf_get(const char *key, const char *env, char **ret, agsx_error_t *err);

/* Forgets the cached file: the next agsx_conf_get reads it again (a
 * long-lived process reloading its configuration). Thread-safe. */
void agsx_conf_reset(void);

/* Parses TEXT (for tests and fuzzing): the value of KEY or NULL. The whole
 * text is checked; on failure *RET is NULL. */
int agsx_conf_parse(const char *text, size_t len, const char *what, const char *key, char **ret,
                    agsx_error_t *err);

#endif
