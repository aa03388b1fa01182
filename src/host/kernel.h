/* agsx — host/kernel: what the running kernel can do, probed once per boot.
 *
 * agsx supports every x86_64 kernel from Linux 6.1 on (Debian 12). What it
 * relies on falls in two kinds:
 *   - required: without it no sandbox can start (user namespaces, the new
 *     mount API, openat2, idmapped mounts, overlayfs with user xattrs, clone3
 *     into a cgroup). Every 6.1 kernel has the calls; a kernel may still be
 *     built or configured without the namespaces or overlayfs. A missing one
 *     is one `agsx: …` line naming it and the Linux version that has it;
 *   - better paths of newer kernels, used where present, with a fallback of
 *     the same isolation otherwise (the root filesystem assembled on
 *     detached mount trees, Linux 6.15, or in place).
 *
 * The probes that cost (a tmpfs mounted and cloned, detached) run once per
 * boot: their result is kept in a cache directory's file `kernel` (STATE/cache
 * for sandboxes, ROOT/.cache for agsx-oci; boot id and release checked on
 * every read, written atomically). AGSX_KERNEL_DISABLE=FEATURE[,…] turns
 * better paths off, for tests and benchmarks of the fallbacks. */
#ifndef AGSX_HOST_KERNEL_H
#define AGSX_HOST_KERNEL_H

#include "util/util.h"

#include <stdbool.h>
#include <stdint.h>

#define AGSX_KERNEL_FLOOR_MAJOR 6
#define AGSX_KERNEL_FLOOR_MINOR 1

enum agsx_kernel_feature {
  /* required */
  AGSX_KF_USERNS,         /* user namespaces (CONFIG_USER_NS, max_user_namespaces > 0) */
  AGSX_KF_MOUNT_API,      /* fsopen, fsmount, move_mount, open_tree: 5.2 */
  AGSX_KF_OPENAT2,        /* openat2 with RESOLVE_IN_ROOT: 5.6 */
  AGSX_KF_CLONE3_CGROUP,  /* clone3 with CLONE_INTO_CGROUP: 5.7 */
  AGSX_KF_IDMAPPED,       /* mount_setattr and MOUNT_ATTR_IDMAP: 5.12 */
  AGSX_KF_OVERLAY,        /* overlayfs (CONFIG_OVERLAY_FS) */
  AGSX_KF_OVERLAY_USERNS, /* overlayfs in a user namespace over idmapped layers: 5.19 */
  /* better paths, and what sandboxes can do where the kernel has it */
  AGSX_KF_TMPFS_XATTR,     /* user.* xattrs on tmpfs (the writable layer): 6.6 */
  AGSX_KF_DETACHED_MOUNTS, /* mounting on, and cloning, detached mount trees: 6.15 */
  AGSX_KF_N,
};

struct agsx_kernel {
  char release[65]; /* uname -r */
  unsigned major, minor;
  uint32_t have;     /* BIT(feature): found (after AGSX_KERNEL_DISABLE) */
  uint32_t disabled; /* BIT(feature): present, turned off by AGSX_KERNEL_DISABLE */
  bool cached;       /* read from STATE/kernel, not probed now */
};

/* The features of the running kernel. CACHE_DIR (made when missing; NULL:
 * probe without a cache) keeps the result for the boot. Fails, naming the first missing
 * required feature and the version that has it, when one is missing; *RET
 * is filled either way. */
int agsx_kernel_get(const char *cache_dir, struct agsx_kernel *ret, agsx_error_t *err);
/* agsx_kernel_get once per process (later calls repeat its answer): what
 * every sandbox start calls before it builds anything. */
int agsx_kernel_ensure(const char *cache_dir, agsx_error_t *err);
/* Probes now, ignoring and not writing any cache (agsx info). Never fails:
 * what cannot be probed counts as missing. */
void agsx_kernel_probe(struct agsx_kernel *ret);
/* The cheap, process-wide answer for FEATURE: the result of the last
 * agsx_kernel_get/agsx_kernel_probe of this process (false before any). */
bool agsx_kernel_has(enum agsx_kernel_feature f);
/* Sets what agsx_kernel_has answers (a sandbox init gets the parent's). */
void agsx_kernel_set(uint32_t have);
uint32_t agsx_kernel_bits(void);

/* For agsx info: the feature's name ("detached-mounts"), what it is, the
 * Linux version that brought it, and whether agsx needs it. */
const char *agsx_kernel_feature_name(enum agsx_kernel_feature f);
const char *agsx_kernel_feature_what(enum agsx_kernel_feature f);
const char *agsx_kernel_feature_since(enum agsx_kernel_feature f);
bool agsx_kernel_feature_required(enum agsx_kernel_feature f);
/* How agsx does what the feature is for, with it or without it. */
const char *agsx_kernel_feature_path(enum agsx_kernel_feature f, bool have);
/* True when the kernel is older than the floor agsx is tested on. */
bool agsx_kernel_below_floor(const struct agsx_kernel *k);

#endif
