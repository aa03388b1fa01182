/* agsx — export: images of the store written as an archive other tools
 * load (`agsx image save`):
 *   oci-archive     a tar of an OCI image layout; each index entry names its
 *                   image twice: org.opencontainers.image.ref.name holds the
 *                   store's reference ("busybox:latest", what agsx and
 *                   skopeo's oci-archive:FILE:REF read) and
 *                   io.containerd.image.name the fully qualified one
 *                   ("docker.io/library/busybox:latest", what containerd and
 *                   Docker read). Blobs are copied as stored.
 *   docker-archive  the `docker save` format: manifest.json (Config,
 *                   RepoTags, Layers), each config as <hex>.json, each
 *                   layer uncompressed as <diff_id hex>.tar.
 * Every blob is checked against its digest (oci-archive) or, uncompressed,
 * against its diff_id (docker-archive) while it is written. Entries are
 * owned by 0:0 with time 0: an image saves to the same bytes every time. */
#ifndef AGSX_EXPORT_H
#define AGSX_EXPORT_H

#include "image/store.h"

enum agsx_export_format {
  AGSX_EXPORT_OCI_ARCHIVE,
  AGSX_EXPORT_DOCKER_ARCHIVE,
};

/* "oci-archive" or "docker-archive". */
int agsx_export_format_parse(const char *s, enum agsx_export_format *ret, agsx_error_t *err);

/* Writes the images NAMES (N of them: references or ids, as
 * agsx_store_resolve takes them) to FD. An image given by name is saved
 * under that name; one given by id is saved unnamed, as docker does. The
 * caller holds the store's writer lock (agsx_store_open with CREATE) so gc
 * removes nothing while it is read. */
int agsx_export_fd(struct agsx_store *s, char *const *names, size_t n,
                   enum agsx_export_format format, int fd, agsx_error_t *err);

/* The same into the file PATH, atomically: the archive is written to an
 * unnamed file beside PATH (O_TMPFILE; a dot name where the file system
 * lacks it) and renamed over it once complete and on disk. On failure (or
 * if agsx is killed) PATH is left as it was. An existing PATH that is not a
 * regular file is refused. */
int agsx_export_file(struct agsx_store *s, char *const *names, size_t n,
                     enum agsx_export_format format, const char *path, agsx_error_t *err);

#endif
