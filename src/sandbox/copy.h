/* agsx — copy: `agsx cp` between the host and a running sandbox.
 *
 * The sandbox's files are reached from the host through its init's root,
 * /proc/PID/root, opened once (pidfd first, so a recycled pid is never
 * used). Every sandbox path below that fd is resolved with openat2(
 * RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS): a symlink planted by sandbox code
 * (to `/`, to `/etc`, to `../../..`) resolves inside the sandbox. Trees are
 * walked with fd-relative calls, one component at a time, never following
 * a symlink (O_NOFOLLOW, RESOLVE_NO_SYMLINKS): an entry swapped for a
 * symlink during the copy fails its open instead of leading out. Entries are
 * created with O_CREAT|O_EXCL after the old non-directory is unlinked, and
 * their owner, mode and times are set on the new fd.
 *
 * Symlinks are copied as symlinks, both ways. SRC itself is followed only
 * with AGSX_COPY_FOLLOW (`-L`), and then inside the sandbox's root.
 * FIFOs, sockets and devices are skipped with a warning. Files copied out of
 * a sandbox lose their set-user-ID and set-group-ID bits.
 *
 * Bounds: a file is copied up to the size it had when opened (fstat of the
 * open fd), never further, so a file sandbox code keeps growing (sparse:
 * costing the sandbox nothing) cannot fill the host. Holes stay holes: only
 * data extents (SEEK_DATA/SEEK_HOLE) are read, blocks of zeros read from a
 * sandbox are skipped, and the size is set with ftruncate. One copy writes
 * at most max_bytes of data and visits at most max_entries entries; past
 * either it fails, and a tree copy removes what it created (entries it
 * replaced keep their new, complete content). A tar stream written out
 * cannot be taken back: it stops before the entry that would pass the
 * limit. Tar streams keep holes too: sparse files are written as sparse pax
 * entries (GNU.sparse 1.0) and extracted with their holes. */
#ifndef AGSX_COPY_H
#define AGSX_COPY_H

#include "util/util.h"

struct agsx_record;

enum {
  /* Keep uids and gids: host id u becomes base+u inside the sandbox, and a
   * sandbox id u (host base+u) becomes u on the host; ids beyond the
   * sandbox's 65536 are refused. Without it, files copied in belong to the
   * sandbox's root and files copied out to the caller. */
  AGSX_COPY_ARCHIVE = 1 << 0,
  /* Follow SRC if it is a symlink (inside the sandbox's root for a sandbox
   * path). Symlinks below SRC are never followed. */
  AGSX_COPY_FOLLOW = 1 << 1,
};

struct agsx_copy_limits {
  uint64_t max_bytes;   /* data bytes written by one copy */
  uint64_t max_entries; /* entries (files, directories, links) of one copy */
};

/* Defaults: 64 GiB and 1,000,000 entries; the environment variables
 * AGSX_CP_MAX_SIZE (a size: "100m") and AGSX_CP_MAX_ENTRIES change them. */
void agsx_copy_limits_default(struct agsx_copy_limits *lim);

struct agsx_copy_sandbox {
  int rootfd;                            /* /proc/PID/root of the init, O_PATH */
  uint32_t uid_base;                     /* host uid (and gid) of the sandbox's root */
  const struct agsx_copy_limits *limits; /* NULL: agsx_copy_limits_default() */
};

/* Opens the root of the running sandbox REC (O_PATH|O_DIRECTORY). */
int agsx_copy_open_root(const struct agsx_record *rec, agsx_error_t *err);

/* Copies the host path SRC to DST, a path inside the sandbox (absolute, or
 * relative to its `/`), with `docker cp`'s rules: into DST if it is a
 * directory, SRC/. for SRC's contents, DST/ must be a directory. */
int agsx_copy_in(const struct agsx_copy_sandbox *sb, const char *src, const char *dst,
                 unsigned flags, agsx_error_t *err);
/* Copies SRC, a path inside the sandbox, to the host path DST. */
int agsx_copy_out(const struct agsx_copy_sandbox *sb, const char *src, const char *dst,
                  unsigned flags, agsx_error_t *err);
/* The same with the host's side confined to the directory HOSTFD (-1: none):
 * host paths are relative to it and resolved inside it as sandbox paths
 * are in the sandbox's root (RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS), so a
 * symlink or `..` there never leads out (agsx mcp --allow-host-path). */
int agsx_copy_in_at(const struct agsx_copy_sandbox *sb, int hostfd, const char *src,
                    const char *dst, unsigned flags, agsx_error_t *err);
int agsx_copy_out_at(const struct agsx_copy_sandbox *sb, int hostfd, const char *src,
                     const char *dst, unsigned flags, agsx_error_t *err);
/* Extracts the tar stream on FD into DST, an existing directory inside the
 * sandbox. Entries with absolute paths or `..` are refused; hard links may
 * only name files extracted before them by this stream. */
int agsx_copy_in_tar(const struct agsx_copy_sandbox *sb, int fd, const char *dst, unsigned flags,
                     agsx_error_t *err);
/* Writes SRC, a path inside the sandbox, to FD as a pax tar stream. Entries
 * carry the sandbox's view of uids and gids. */
int agsx_copy_out_tar(const struct agsx_copy_sandbox *sb, const char *src, int fd, unsigned flags,
                      agsx_error_t *err);

#endif
