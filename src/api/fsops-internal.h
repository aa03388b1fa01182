/* agsx — fsops internals shared by fsops.c (context, paths, entries, the
 * unary operations), fsupload.c (uploads, POST /files bodies, downloads,
 * signatures) and fswatch.c (watchers and their registry). Not a public
 * header. */
#ifndef AGSX_API_FSOPS_INTERNAL_H
#define AGSX_API_FSOPS_INTERNAL_H

#include "api/fsops.h"
#include "sandbox/copy-internal.h"

#include <sys/stat.h>

struct agsx_fs_ctx {
  unsigned refs; /* the request's, and each watcher's */
  int rootfd;    /* /proc/PID/root of the sandbox's init, O_PATH */
  int pidfd;     /* of the sandbox's init (-1 for agsx_fs_open_root): its end */
  uint32_t uid_base;
  char sandbox_id[33];
  char *user, *home, *workdir; /* workdir NULL: home */
  uid_t uid;
  gid_t gid;
  char *passwd, *group; /* the image's files, for owner names */
  size_t passwd_len, group_len;
};

struct agsx_fs_ctx *fs_ctx_ref(struct agsx_fs_ctx *c);
/* Moves *FROM into *ERR (when that is empty) and returns -1. */
int fs_pass_error(agsx_error_t *err, agsx_error_t *from);
char *fs_clean(const char *path, agsx_error_t *err);
int fs_split(const char *abs, char **ret_parent, char **ret_base, agsx_error_t *err);
/* Acts as the context's user (fsuid/fsgid) until fs_leave. */
int fs_enter(const struct agsx_fs_ctx *c, int *ret_secbits, agsx_error_t *err);
void fs_leave(int secbits);
/* openat2 of the absolute ABS in the sandbox's root. */
int fs_open(const struct agsx_fs_ctx *c, const char *abs, int flags);
int fs_ensure_dirs(const struct agsx_fs_ctx *c, const char *abs, agsx_error_t *err);
void fs_fill_entry(const struct agsx_fs_ctx *c, const char *abs, const struct stat *st,
                   struct agsx_fs_entry *e);
/* What the sandbox's own root may do (MASK of R_OK, W_OK, X_OK) to the
 * inode ST: anything when its owner and group are the sandbox's ids (over
 * those it holds its capabilities), else only what "other" may. So a host
 * file in a sandbox (a host image's /usr and /etc/ssl, a volume) is not
 * read or written with the server's host root privileges. */
bool fs_sandbox_may(const struct agsx_fs_ctx *c, const struct stat *st, int mask);
/* The same for the inode at FD (fstat), failing with EACCES and PATH. */
int fs_check_may(const struct agsx_fs_ctx *c, int fd, int mask, const char *path,
                 agsx_error_t *err);
/* Every directory on the way to ABS (its symlinks followed) searchable
 * for the sandbox: a host directory without "other" x hides what is below. */
int fs_check_search(const struct agsx_fs_ctx *c, const char *abs, agsx_error_t *err);
/* May the entry NAME (lstat ST) of the directory DIR (fstat DST) be
 * removed or renamed away: DIR writable for the sandbox, and not a sticky
 * directory's entry of someone outside it. */
int fs_check_unlink(const struct agsx_fs_ctx *c, int dfd, const char *name, const char *path,
                    agsx_error_t *err);
/* KEY: S (NULL: ""), invalid UTF-8 replaced. */
void fs_gen_text(yajl_gen g, const char *key, const char *s);
/* Opens the regular file at ABS for reading, never opening anything else
 * (a device, a FIFO: O_PATH first, then the same inode again). */
int fs_open_regular(const struct agsx_fs_ctx *c, const char *abs, struct stat *ret_st,
                    agsx_error_t *err);
/* NAME is an upload's temporary file (hidden from watchers). */
bool fs_is_upload_temp(const char *name);
/* The metadata of the inode at FD (any fd, O_PATH too) into *RET: best
 * effort (none where it cannot be read), within AGSX_FS_META_MAX. */
void fs_meta_read(int fd, struct agsx_fs_meta *ret);
/* Writes M on the file open at FD (PATH for messages); EOPNOTSUPP where
 * its filesystem keeps no user xattrs. */
int fs_meta_write(int fd, const struct agsx_fs_meta *m, const char *path, agsx_error_t *err);
int fs_stat_abs(const struct agsx_fs_ctx *c, const char *abs, struct agsx_fs_entry *ret,
                agsx_error_t *err);

#endif
