/* agsx — tarentry: the one policy for the names in a hostile tar stream,
 * and the reading loop that applies it.
 *
 * Three readers take tar streams agsx did not write: layer unpack
 * (layer.c), `agsx cp -` into a sandbox (sandbox/copy-tar.c) and build's
 * ADD of a local archive (build/copy.c). Each creates entries its own way,
 * but what a name may be is decided here, once:
 *
 *   - a name that cannot be decoded is refused;
 *   - leading "/" and "./" name the root ("/etc/x" is "etc/x"), unless the
 *     policy refuses absolute names; "." and "" are the root itself;
 *     trailing slashes are dropped;
 *   - ".." is refused anywhere (never resolved lexically: "a/../../x" is
 *     an escape attempt, not "x");
 *   - empty and "." components inside a name are refused, or with
 *     `collapse` dropped ("a//./b" is "a/b");
 *   - a name or link target longer than max_path, a component longer than
 *     NAME_MAX and a name deeper than max_depth are refused;
 *   - a hard link's target is a name like any other, and never the root;
 *     a symlink's target is kept as it is (callers resolve it inside their
 *     root) but must be non-empty and within max_path;
 *   - a stream with more than max_entries entries is refused.
 *
 * The cleaned name is relative ("" = the root); callers still resolve it
 * with openat2(RESOLVE_IN_ROOT) or below a directory fd: the policy keeps
 * names sane, the kernel keeps them inside. */
#ifndef AGSX_TARENTRY_H
#define AGSX_TARENTRY_H

#include "util/util.h"

#include <archive.h>
#include <archive_entry.h>
#include <stdbool.h>
#include <stdint.h>

struct agsx_tarentry_policy {
  size_t max_path;      /* bytes of a name or a link target */
  size_t max_depth;     /* components of a name */
  uint64_t max_entries; /* entries of one stream; 0: unbounded here */
  bool refuse_absolute; /* "/x" is refused instead of read as "x" */
  bool collapse;        /* "a//b" and "a/./b" are "a/b" instead of refused */
};

/* 4096 bytes, 256 components, no entry bound, absolute names read inside
 * the root, empty and "." components refused. */
void agsx_tarentry_policy_default(struct agsx_tarentry_policy *p);

/* Cleans RAW (see above) into *RET, a relative name; "" is the root. */
int agsx_tarentry_clean(const char *raw, const struct agsx_tarentry_policy *p, char **ret,
                        agsx_error_t *err);

/* S for an error message: control bytes and '\' escaped, at most 256
 * bytes (entry names end up on a terminal). */
char *agsx_tarentry_quote(const char *s);

enum agsx_tarentry_kind {
  AGSX_TAR_FILE,
  AGSX_TAR_DIR,
  AGSX_TAR_SYMLINK,
  AGSX_TAR_HARDLINK, /* whatever its type says: a hard link names a target */
  AGSX_TAR_FIFO,
  AGSX_TAR_DEVICE, /* character, block device or socket */
  AGSX_TAR_OTHER,
};

/* The entry the reader stands on. Valid until the next call. */
struct agsx_tarentry {
  struct archive_entry *ae;
  const char *raw;     /* the name as in the stream */
  char *path;          /* cleaned; "" is the root */
  char *hardlink;      /* cleaned target of a hard link, else NULL */
  const char *symlink; /* target of a symlink (checked), else NULL */
  enum agsx_tarentry_kind kind;
};

/* The reading loop over an archive the caller opened (format and filters
 * are the caller's: layers decompress themselves, ADD accepts xz). */
struct agsx_tar_reader {
  struct archive *a;                         /* borrowed */
  const struct agsx_tarentry_policy *policy; /* borrowed */
  const char *what;                          /* "layer entry": names an entry in errors */
  const char *root;                          /* "layer root": what "" is, in errors */
  uint64_t entries;                          /* read so far */
  bool read_failed;                          /* the last error is libarchive's */
  struct agsx_tarentry cur;
};

/* Reads the next header into R->cur and checks it against the policy.
 * Returns 1 with *RET set, 0 at the end of the stream, < 0 on error: a
 * read failure ("read tar: ...", R->read_failed set), too many entries, or
 * a refused name, target or link ("WHAT `NAME`: ..."). */
int agsx_tar_reader_next(struct agsx_tar_reader *r, struct agsx_tarentry **ret, agsx_error_t *err);

void agsx_tar_reader_clear(struct agsx_tar_reader *r);

#endif
