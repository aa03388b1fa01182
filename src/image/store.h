/* agsx — store: the image store. ROOT is an OCI image layout (oci-layout,
 * index.json, blobs/sha256/…) that skopeo and umoci can read. Beside the
 * layout, agsx keeps:
 *   ROOT/layers/<diff_id hex>/   unpacked layers (overlay lower dirs), 0700
 *   ROOT/tmp/                    work dirs, each flocked by its owner
 *   ROOT/cache/<key>             build cache records (agsx build), 0700
 *   ROOT/verified/<blob hex>     "diff_id compression": this layer blob was
 *                                seen to decompress to that diff_id
 *   ROOT/.index.lock             serialises index.json read-modify-write
 *   ROOT/.gc.lock                shared by writers, exclusive for gc
 * Blobs are content-addressed and created by linking a verified O_TMPFILE
 * into place; layers are unpacked in tmp/ and renamed into place; the ref
 * is written last. An interrupted import therefore never lists an image,
 * and leftovers in tmp/ are removed by the next writer. */
#ifndef AGSX_STORE_H
#define AGSX_STORE_H

#include "image/image.h"
#include "util/util.h"

#define AGSX_DEFAULT_ROOT "/var/lib/agsx"

/* What one image may cost the store, so that a hostile registry or image
 * cannot fill the disk: its blobs plus its unpacked layers at most
 * max-image-size (agsx.conf; AGSX_MAX_IMAGE_SIZE), and the store's
 * filesystem keeps store-reserve (AGSX_STORE_RESERVE) bytes free. */
#define AGSX_DEFAULT_MAX_IMAGE_SIZE ((uint64_t)64 << 30)
#define AGSX_DEFAULT_STORE_RESERVE ((uint64_t)1 << 30)

struct agsx_store {
  char *path;
  int rootfd, blobsfd, layersfd, tmpfd;
  int gc_lock; /* shared lock held while this handle may add content */
  /* The budget of what is being staged, reset by agsx_store_mkwork (one
   * work directory per image written). */
  uint64_t budget_max, budget_used, reserve;
};

/* Opens (creating when CREATE) the store at PATH and takes the shared
 * writer lock when CREATE (writers) so gc cannot remove blobs in flight. */
int agsx_store_open(const char *path, bool create, struct agsx_store **ret, agsx_error_t *err);
/* Takes the shared writer lock on a store opened without CREATE, so gc
 * removes nothing while this handle reads content out (image save, tag). */
int agsx_store_hold(struct agsx_store *s, agsx_error_t *err);
void agsx_store_free(struct agsx_store *s);
void agsx_store_freep(struct agsx_store **s);
#define _cleanup_store_ _cleanup_(agsx_store_freep)

/* ---- blobs ---- */
bool agsx_store_has_blob(struct agsx_store *s, const char *digest);
int agsx_store_open_blob(struct agsx_store *s, const char *digest, agsx_error_t *err);
/* Reads a blob of at most MAX bytes and checks its digest. */
int agsx_store_read_blob(struct agsx_store *s, const char *digest, size_t max, char **ret_buf,
                         size_t *ret_len, agsx_error_t *err);
bool agsx_store_has_layer(struct agsx_store *s, const char *diff_id);

/* ---- staging ----
 * An import writes verified content into a work directory (from
 * agsx_store_mkwork) and commits it in one step, so a failed or interrupted
 * import leaves nothing in the store. Content the store already has is not
 * staged again. */
/* Copies FD into the work dir, verifying DIGEST and SIZE (< 0: unknown). */
int agsx_store_stage_blob_fd(struct agsx_store *s, int workfd, int fd, const char *digest,
                             int64_t size, agsx_error_t *err);
/* Like stage_blob_fd for a file that may be moved (same filesystem, ours). */
int agsx_store_stage_blob_move(struct agsx_store *s, int workfd, int dirfd, const char *name,
                               const char *digest, int64_t size, agsx_error_t *err);
int agsx_store_stage_blob_mem(struct agsx_store *s, int workfd, const void *buf, size_t len,
                              char ret_digest[AGSX_DIGEST_LEN], agsx_error_t *err);
/* Reads a staged (or stored) blob of at most MAX bytes. */
int agsx_store_read_staged_blob(struct agsx_store *s, int workfd, const char *digest, size_t max,
                                char **ret_buf, size_t *ret_len, agsx_error_t *err);
/* Unpacks the layer blob LAYER (staged or stored) and checks DIFF_ID. When
 * DIFF_ID is unpacked already, the blob must still be one seen to
 * decompress to it (checked once per blob, recorded in verified/): an image
 * may not pair a known diff_id with another blob. */
int agsx_store_stage_layer(struct agsx_store *s, int workfd, const struct agsx_descriptor *layer,
                           const char *diff_id, agsx_error_t *err);
/* Moves everything staged into the store, durably. */
int agsx_store_commit(struct agsx_store *s, int workfd, agsx_error_t *err);

/* ---- refs ---- */
struct agsx_store_image {
  char *ref; /* "name:tag", or NULL for an unnamed image */
  struct agsx_descriptor manifest;
};
void agsx_store_images_free(struct agsx_store_image *v, size_t n);

/* Lists index.json entries (every manifest, named or not). */
int agsx_store_list(struct agsx_store *s, struct agsx_store_image **ret, size_t *ret_n,
                    agsx_error_t *err);
/* Finds an image by reference ("busybox", "busybox:1.36") or by a unique
 * manifest digest prefix ("sha256:ab12…" or "ab12…", at least 4 digits). */
int agsx_store_resolve(struct agsx_store *s, const char *name, struct agsx_store_image *ret,
                       agsx_error_t *err);
/* Points REF (normalised, or NULL for an unnamed entry) at MANIFEST,
 * replacing any entry with the same ref. Atomic, under the index lock. */
int agsx_store_tag(struct agsx_store *s, const char *ref, const struct agsx_descriptor *manifest,
                   agsx_error_t *err);
/* Names the image SOURCE (a reference or an id, as agsx_store_resolve
 * takes it) also TARGET, a NAME[:TAG] reference (not a digest), moving
 * TARGET from any image it named before, as docker tag does. Returns the
 * normalised TARGET in RET_REF when not NULL. */
int agsx_store_tag_image(struct agsx_store *s, const char *source, const char *target,
                         char **ret_ref, agsx_error_t *err);
/* Removes the entries matching NAME (a ref, or a digest removing every
 * entry of that manifest); then drops blobs no entry references. */
int agsx_store_remove(struct agsx_store *s, const char *name, agsx_error_t *err);

/* ---- running images ---- */
struct agsx_image_info {
  struct agsx_store_image img;
  struct agsx_manifest manifest;
  struct agsx_image_config config;
  char **layer_paths; /* unpacked layer directories, lowest first */
  size_t n_layers;
};
/* Resolves NAME and makes sure every layer is unpacked (unpacking again
 * what `gc --images` or a crash removed). */
int agsx_store_prepare_image(struct agsx_store *s, const char *name, struct agsx_image_info *ret,
                             agsx_error_t *err);
void agsx_image_info_clear(struct agsx_image_info *info);

/* ---- housekeeping ---- */
/* Removes tmp/ entries whose owner is gone. */
int agsx_store_clean_tmp(struct agsx_store *s, agsx_error_t *err);
/* Removes blobs and unpacked layers no index entry references (and build
 * cache records of the layer blobs removed), nor the
 * manifests in KEEP (NULL-terminated digests: images of running sandboxes).
 * With DRY_RUN only reports them through REPORT. Takes the exclusive gc
 * lock. */
int agsx_store_gc(struct agsx_store *s, char *const *keep, bool dry_run,
                  void (*report)(const char *what, void *data), void *data, agsx_error_t *err);
/* The same, unless someone holds the store (a pull, a build, a start
 * preparing its image): then 1 at once, nothing removed (the next gc
 * does). For a caller that must not wait: the API server's loop. */
int agsx_store_gc_try(struct agsx_store *s, char *const *keep, agsx_error_t *err);

/* ---- space ---- */
/* Charges N bytes of WHAT to the image budget; refuses when it is spent. */
int agsx_store_charge(struct agsx_store *s, uint64_t n, const char *what, agsx_error_t *err);
/* Refuses unless N more bytes fit in the store's filesystem with the
 * reserve kept free. */
int agsx_store_check_space(struct agsx_store *s, uint64_t n, agsx_error_t *err);
/* The same for the filesystem of FD. */
int agsx_store_check_space_fd(int fd, uint64_t n, uint64_t reserve, agsx_error_t *err);

/* Creates a flocked work directory under tmp/; returns its fd. Reads the
 * budget settings (a malformed one is an error) and resets the budget. */
int agsx_store_mkwork(struct agsx_store *s, const char *prefix, char **ret_name, agsx_error_t *err);

#endif
