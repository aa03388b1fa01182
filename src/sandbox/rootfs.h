/* agsx — rootfs steps shared with other launchers: the new-mount-API
 * helpers of rootfs.c (every target resolved inside the root with
 * openat2(RESOLVE_IN_ROOT)), Docker's masked and read-only paths, and
 * pivot_root. The OCI runtime (src/oci/launch-init.c) builds an engine-given
 * mount list with these; the native sandbox's tree stays rootfs.c's. */
#ifndef AGSX_ROOTFS_H
#define AGSX_ROOTFS_H

#include "util/util.h"

/* A detached mount of a new TYPE filesystem (fsopen/fsconfig/fsmount);
 * OPTS: key, value pairs (value NULL: a flag), NULL-terminated. */
int agsx_rootfs_fs_new(const char *type, const char *const *opts, unsigned attrs,
                       agsx_error_t *err);
/* Opens directory PATH inside ROOTFD (RESOLVE_IN_ROOT, no magic links, no
 * crossing mounts), creating missing components with CREATE; STRICT
 * refuses any symlink on the way. */
int agsx_rootfs_dir_in_root(int rootfd, const char *path, bool create, bool strict,
                            agsx_error_t *err);
/* Attaches the detached mount MFD on directory PATH inside ROOTFD. */
int agsx_rootfs_attach(int rootfd, const char *path, int mfd, bool strict, agsx_error_t *err);
/* A detached clone of DIRFD/PATH ("" = DIRFD itself) with mount ATTRS. */
int agsx_rootfs_bind_clone(int dirfd, const char *path, unsigned attrs, bool recursive,
                           agsx_error_t *err);
/* Masks PATH inside ROOT (a file with DEVNULL, a directory with EMPTYDIR,
 * an empty read-only detached mount); a missing PATH or a symlink is left
 * alone. The first directory gets EMPTYDIR itself (*ATTACHED false, then
 * set), later ones clones of it: a detached mount cannot be cloned before
 * Linux 6.15, an attached one can, and one attached is not dissolved
 * (an RCU grace period) when closed. */
int agsx_rootfs_mask(int root, const char *path, int devnull, int emptydir, bool *attached,
                     agsx_error_t *err);
/* Remounts PATH inside ROOT read-only (recursively); missing: nothing. */
int agsx_rootfs_readonly(int root, const char *path, agsx_error_t *err);
/* Docker's masked and read-only paths, as every agsx sandbox has them. */
extern const char *const *const agsx_rootfs_masked_paths;
extern const size_t agsx_rootfs_n_masked_paths;
extern const char *const *const agsx_rootfs_readonly_paths;
extern const size_t agsx_rootfs_n_readonly_paths;
/* pivot_root into ROOT and detach the old root. */
int agsx_rootfs_pivot(int root, agsx_error_t *err);

#endif
