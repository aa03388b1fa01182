/* agsx — copy internals shared by copy.c (the tree copier, resolving SRC
 * and DST, the entry points) and copy-tar.c (the tar streams). Not a public
 * header. */
#ifndef AGSX_COPY_INTERNAL_H
#define AGSX_COPY_INTERNAL_H

#include "sandbox/copy.h"

#include <archive.h>
#include <archive_entry.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#define BUF_SIZE (1u << 20)
#define ZERO_BLOCK 4096u       /* a block of zeros read from a sandbox stays a hole */
#define ZEROS_SIZE (16u << 20) /* holes fed to the tar writer, in chunks of this */
#define MAX_DEPTH 256          /* directory levels below SRC (3 fds each) */
#define DEFAULT_MAX_BYTES ((uint64_t)64 << 30)
#define DEFAULT_MAX_ENTRIES 1000000u
#define ID_RANGE 65536u    /* ids a sandbox has */
#define OVERFLOW_ID 65534u /* the kernel's overflowuid */

/* Component-wise opening below DFD: no symlink, no magic link, no "..". */
#define RESOLVE_CHILD (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
/* Opening a path inside the sandbox: its symlinks resolve in its root. */
#define RESOLVE_SANDBOX (RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)

struct copier {
  bool to_sandbox;   /* the destination is the sandbox: ownership, fsuid */
  bool from_sandbox; /* the source is the sandbox: strip set-id bits */
  uint32_t base;
  unsigned flags;
  char *buf;
  struct archive *tar; /* the destination is this tar stream */
  unsigned depth;
  struct agsx_copy_limits lim;
  uint64_t bytes, entries; /* written and visited so far */
  /* What to remove when the copy fails: the entries it created in
   * directories that existed before (paths from the destination's parent);
   * what it made inside directories it created goes with them. */
  bool in_new_dir;
  char **created;
  size_t n_created, cap_created;
  char *zeros; /* ZEROS_SIZE, for tar holes; allocated on first use, never touched */
};

/* A path on one side: inside the sandbox (ROOTFD >= 0) or on the host. */
struct side {
  int rootfd;
};

/* copy.c */
void agsx_copy_copier_clear(struct copier *c);
void agsx_copy_copier_limits(struct copier *c, const struct agsx_copy_sandbox *sb);
int agsx_copy_account_bytes(struct copier *c, uint64_t n, const char *path, agsx_error_t *err);
int agsx_copy_account_entry(struct copier *c, const char *path, agsx_error_t *err);
void agsx_copy_archive_read_freep(struct archive **a);
void agsx_copy_entry_freep(struct archive_entry **e);
int agsx_copy_open_child(int dfd, const char *name, int flags, mode_t mode);
int agsx_copy_dest_ids(const struct copier *c, const struct stat *st, const char *path,
                       uid_t *ret_uid, gid_t *ret_gid, agsx_error_t *err);
mode_t agsx_copy_dest_mode(const struct copier *c, const struct stat *st);
int agsx_copy_set_meta(const struct copier *c, int fd, const struct stat *st, const char *path,
                       agsx_error_t *err);
int agsx_copy_set_link_meta(const struct copier *c, int dfd, const char *name,
                            const struct stat *st, const char *path, agsx_error_t *err);
int agsx_copy_remove_nondir(int dfd, const char *name, const char *path, agsx_error_t *err);
int agsx_copy_create_file(int dfd, const char *name, const char *path, agsx_error_t *err);
int agsx_copy_create_link(int dfd, const char *name, const char *target, const char *path,
                          agsx_error_t *err);
int agsx_copy_make_dir(int dfd, const char *name, mode_t mode, const char *path, bool *ret_created,
                       agsx_error_t *err);
/* The next data extent of IN at or after OFF and below SIZE, in
 * [*RET_DATA, *RET_END): 1 with one, 0 when only a hole is left (SEEK_DATA /
 * SEEK_HOLE; a file system without them reports all of it as data). */
int agsx_copy_next_extent(int in, off_t off, off_t size, off_t *ret_data, off_t *ret_end,
                          const char *path, agsx_error_t *err);
int agsx_copy_pwrite_all(int fd, const char *p, size_t n, off_t off);
int agsx_copy_skip_changed(const char *path);
int agsx_copy_open_path(const struct side *s, const char *path, int flags);
int agsx_copy_enter_sandbox_ids(uint32_t base, int *ret_secbits, agsx_error_t *err);
/* The same for host ids UID and GID (a sandbox user's base + uid). */
int agsx_copy_enter_sandbox_user(uint32_t uid, uint32_t gid, int *ret_secbits, agsx_error_t *err);
/* A file system of the kernel's (proc, sysfs, cgroup, ...): what host root
 * sees there is more than the sandbox's root may. True when FD's cannot be
 * told. */
bool agsx_copy_on_kernel_fs_fd(int fd);
void agsx_copy_leave_sandbox_ids(int secbits);

/* copy-tar.c */
int agsx_copy_tar_fail(struct archive *a, const char *path, agsx_error_t *err);
int agsx_copy_tar_entry(struct copier *c, const char *path, const struct stat *st, const char *link,
                        int in, agsx_error_t *err);

#endif
