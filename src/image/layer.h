/* agsx — layer: unpacking one image layer (a tar stream, optionally gzip or
 * zstd compressed) into a directory, safely. The result is an overlayfs
 * lower directory: OCI whiteouts become overlay whiteouts (0:0 character
 * devices) and opaque directories get trusted.overlay.opaque=y.
 *
 * The layer is hostile input. Every path is resolved inside the destination
 * with openat2(RESOLVE_IN_ROOT); nothing outside it is created or changed;
 * device nodes are skipped; limits bound what a layer can make us write. */
#ifndef AGSX_LAYER_H
#define AGSX_LAYER_H

#include "util/digest.h"
#include "util/util.h"

enum agsx_compression {
  AGSX_COMPRESSION_NONE,
  AGSX_COMPRESSION_GZIP,
  AGSX_COMPRESSION_ZSTD,
  AGSX_COMPRESSION_AUTO, /* sniff the magic bytes */
};

struct agsx_layer_limits {
  uint64_t max_bytes;   /* uncompressed tar stream bytes */
  uint64_t max_entries; /* tar entries */
  size_t max_path;      /* bytes of one entry name */
  size_t max_depth;     /* components of one entry name */
  /* When > 0: unpacking stops once the destination's filesystem has fewer
   * than this many bytes free (checked every few MiB), so a layer cannot
   * fill the disk. */
  uint64_t space_reserve;
};

/* Defaults: 64 GiB, 2,000,000 entries, 4096 bytes, 256 components. The
 * environment variable AGSX_MAX_LAYER_SIZE (a size: "100m") lowers or raises
 * max_bytes (tests use it to exercise the bomb limit cheaply). */
void agsx_layer_limits_default(struct agsx_layer_limits *lim);

/* Unpacks the layer read from FD into DESTFD, which must be an empty
 * directory. On success, RET_DIFF_ID holds the sha256 of the uncompressed
 * tar stream (the OCI diff_id) for the caller to verify. On failure, DESTFD
 * may hold a partial tree: the caller removes it. */
int agsx_layer_unpack_fd(int fd, enum agsx_compression comp, int destfd,
                         const struct agsx_layer_limits *lim, char ret_diff_id[AGSX_DIGEST_LEN],
                         agsx_error_t *err);

/* agsx_layer_unpack_fd that also returns the size of the uncompressed
 * stream (what the image budget is charged). */
int agsx_layer_unpack_fd_sized(int fd, enum agsx_compression comp, int destfd,
                               const struct agsx_layer_limits *lim,
                               char ret_diff_id[AGSX_DIGEST_LEN], uint64_t *ret_size,
                               agsx_error_t *err);

/* Decompresses and hashes the layer read from FD without unpacking it (at
 * most LIM->max_bytes): its diff_id, to check a blob against a layer that is
 * already unpacked. */
int agsx_layer_diff_id_fd(int fd, enum agsx_compression comp, const struct agsx_layer_limits *lim,
                          char ret_diff_id[AGSX_DIGEST_LEN], agsx_error_t *err);

/* The same from memory (tests and fuzzing). */
int agsx_layer_unpack_mem(const void *buf, size_t len, enum agsx_compression comp, int destfd,
                          const struct agsx_layer_limits *lim, char ret_diff_id[AGSX_DIGEST_LEN],
                          agsx_error_t *err);

/* Writes the uncompressed tar stream of the layer read from FD to OUT, as
 * it is (the bytes RET_DIFF_ID hashes; RET_SIZE counts them), within
 * LIM's max_bytes (NULL: the defaults). For writers of formats that carry
 * uncompressed layers (docker-archive). */
int agsx_layer_decompress_fd(int fd, enum agsx_compression comp, int out,
                             const struct agsx_layer_limits *lim, char ret_diff_id[AGSX_DIGEST_LEN],
                             uint64_t *ret_size, agsx_error_t *err);

#endif
