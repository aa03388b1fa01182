/* agsx — sandbox: named volumes, kept in the image store and mounted into
 * sandboxes (`agsx run -v NAME:/path`, `agsx volume`, the API's /volumes
 * and volumeMounts).
 *
 *   ROOT/volumes/             0700: only host root may reach what is below
 *   ROOT/volumes/.lock        one byte-range lock (OFD) per volume, at a
 *                             hash of its name
 *   ROOT/volumes/NAME/        made whole elsewhere and renamed into place;
 *                             holds _data only, so its mtime is the
 *                             volume's creation time
 *   ROOT/volumes/NAME/_data   the data: owned by raw id 0, mode 0777
 *
 * A sandbox mounts _data idmapped with its own user namespace, as it does
 * the image's layers: the file that sandbox uid N writes is stored as raw
 * id N, and every other sandbox, whatever its uid range, sees it as its
 * own uid N. (A directory owned by one sandbox's mapped uid would be
 * "nobody"'s in every other.) So a sandbox's setuid-root file is stored as
 * a host setuid-root file: the 0700 directory keeps host users from it,
 * and the mount is nosuid and nodev in the sandbox.
 *
 * In use: a sandbox's start takes a shared lock of each of its volumes'
 * bytes on one fd, which its supervisor keeps to its end (a crash lets go
 * too). Removal takes the byte exclusively without waiting (EBUSY: in
 * use), renames the volume away (.rm-*), lets go and then deletes it; a
 * start checks that its volume is still there once it holds the lock.
 * What a crash leaves (.tmp-*, .rm-*) the next creation removes once an
 * hour old. */
#ifndef AGSX_SANDBOX_VOLUME_H
#define AGSX_SANDBOX_VOLUME_H

#include "sandbox/sandbox.h"
#include "util/util.h"

#define AGSX_VOLUME_NAME_MAX 64

/* [A-Za-z0-9][A-Za-z0-9_.-]*, at most AGSX_VOLUME_NAME_MAX bytes: never
 * `/`, never `.` or `..`. */
bool agsx_volume_name_is_valid(const char *name);

struct agsx_volume {
  char *name;
  int64_t created; /* seconds since the epoch */
  bool in_use;     /* a sandbox holds it */
};
void agsx_volume_clear(struct agsx_volume *v);

/* Creates volume NAME in the store ROOT: EEXIST when it exists, unless
 * EXIST_OK (then 0 and nothing changes). Returns 1 when it was made. */
int agsx_volume_create(const char *root, const char *name, bool exist_ok, agsx_error_t *err);
/* ENOENT "no such volume" when it does not exist. */
int agsx_volume_get(const char *root, const char *name, struct agsx_volume *ret, agsx_error_t *err);
/* Every volume, sorted by name. */
int agsx_volume_list(const char *root, struct agsx_volume **ret, size_t *ret_n, agsx_error_t *err);
void agsx_volume_list_free(struct agsx_volume *v, size_t n);
/* Removes volume NAME and its data: ENOENT when there is none, EBUSY when
 * a sandbox uses it. */
int agsx_volume_remove(const char *root, const char *name, agsx_error_t *err);

/* For a sandbox's start: each of the N binds marked `volume` (its src a
 * volume's name) is locked shared and pointed at the volume's data
 * (src replaced by the absolute path, idmap set). ENOENT when a volume
 * does not exist. *RET_LOCK is the fd that holds the locks (-1 when no
 * bind is a volume): keep it open for the sandbox's life. */
int agsx_volume_attach(const char *root, struct agsx_bind *binds, size_t n, int *ret_lock,
                       agsx_error_t *err);

#endif
