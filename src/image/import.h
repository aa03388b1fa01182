/* agsx — import: loading images into the store from an OCI image layout
 * directory, an oci-archive (tar of a layout) or a docker-archive (`docker
 * save` format, also as an extracted directory; gzip/xz/zstd-compressed
 * archives too), from a file or a stream. Only linux/amd64 images are
 * accepted; every blob is verified against its digest and size, every
 * layer unpacked and checked against its diff_id before the image is
 * named. */
#ifndef AGSX_IMPORT_H
#define AGSX_IMPORT_H

#include "image/store.h"

struct agsx_loaded_image {
  char *ref;                    /* name given, or NULL */
  char digest[AGSX_DIGEST_LEN]; /* manifest digest in the store */
};

struct agsx_import_opts {
  const char *tag; /* name the (single) image loaded; NULL: names from the source */
  /* Called once per image loaded (for progress output). */
  void (*loaded)(const struct agsx_loaded_image *img, void *data);
  void *data;
};

/* Archive limits (the container format, not the layers). */
#define AGSX_ARCHIVE_MAX_ENTRIES 100000
#define AGSX_ARCHIVE_MAX_IMAGES 256

/* PATH "-" is standard input, an archive read as it arrives. */
int agsx_import(struct agsx_store *s, const char *path, const struct agsx_import_opts *opts,
                agsx_error_t *err);

#endif
