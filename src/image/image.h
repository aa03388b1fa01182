/* agsx — image: OCI and Docker manifests, indexes and image configs, parsed
 * from untrusted JSON into checked structures, and image references. */
#ifndef AGSX_IMAGE_H
#define AGSX_IMAGE_H

#include "util/digest.h"
#include "util/json.h"
#include "image/layer.h"
#include "util/util.h"

/* Bounds on untrusted image metadata. */
#define AGSX_IMAGE_JSON_MAX (4u << 20) /* manifest, index, config: 4 MiB */
#define AGSX_IMAGE_MAX_LAYERS 512
#define AGSX_IMAGE_MAX_MANIFESTS 1024

#define AGSX_MT_OCI_INDEX "application/vnd.oci.image.index.v1+json"
#define AGSX_MT_OCI_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define AGSX_MT_OCI_CONFIG "application/vnd.oci.image.config.v1+json"
#define AGSX_MT_OCI_LAYER "application/vnd.oci.image.layer.v1.tar"
#define AGSX_MT_OCI_LAYER_GZIP "application/vnd.oci.image.layer.v1.tar+gzip"
#define AGSX_MT_OCI_LAYER_ZSTD "application/vnd.oci.image.layer.v1.tar+zstd"
#define AGSX_MT_DOCKER_LIST "application/vnd.docker.distribution.manifest.list.v2+json"
#define AGSX_MT_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define AGSX_MT_DOCKER_CONFIG "application/vnd.docker.container.image.v1+json"
#define AGSX_MT_DOCKER_LAYER_GZIP "application/vnd.docker.image.rootfs.diff.tar.gzip"
#define AGSX_REF_ANNOTATION "org.opencontainers.image.ref.name"
#define AGSX_CONTAINERD_NAME_ANNOTATION "io.containerd.image.name"

struct agsx_descriptor {
  char *media_type;
  char digest[AGSX_DIGEST_LEN];
  int64_t size;
  char *os, *architecture, *variant; /* platform, index entries only */
  char *ref_name;                    /* org.opencontainers.image.ref.name */
  char *image_name;                  /* io.containerd.image.name */
};

struct agsx_manifest {
  char *media_type;
  struct agsx_descriptor config;
  struct agsx_descriptor *layers;
  size_t n_layers;
};

struct agsx_index {
  struct agsx_descriptor *manifests;
  size_t n_manifests;
};

struct agsx_image_config {
  char *os, *architecture, *variant;
  char *created;   /* RFC 3339 or NULL */
  char **diff_ids; /* validated digests */
  size_t n_diff_ids;
  char **env, **entrypoint, **cmd; /* NULL-terminated, may be NULL */
  char *working_dir, *user, *stop_signal;
};

void agsx_descriptor_clear(struct agsx_descriptor *d);
void agsx_manifest_clear(struct agsx_manifest *m);
void agsx_index_clear(struct agsx_index *ix);
void agsx_image_config_clear(struct agsx_image_config *c);

/* Parse and check. Unknown media types, bad digests, negative sizes and
 * oversized documents fail with a message naming the problem. */
int agsx_descriptor_parse(yajl_val v, struct agsx_descriptor *ret, agsx_error_t *err);
int agsx_manifest_parse(const char *buf, size_t len, struct agsx_manifest *ret, agsx_error_t *err);
int agsx_index_parse(const char *buf, size_t len, struct agsx_index *ret, agsx_error_t *err);
int agsx_image_config_parse(const char *buf, size_t len, struct agsx_image_config *ret,
                            agsx_error_t *err);

/* Layer media type -> compression; -1 with an error for unknown types. */
int agsx_layer_media_type_compression(const char *mt, enum agsx_compression *ret,
                                      agsx_error_t *err);
bool agsx_media_type_is_index(const char *mt);
bool agsx_media_type_is_manifest(const char *mt);

/* The one platform agsx runs and builds: linux/amd64. True for it only
 * (NULL is not it). */
#define AGSX_PLATFORM "linux/amd64"
bool agsx_platform_is_supported(const char *os, const char *architecture);
/* Refuses a config for another platform: "image is for OS/ARCH: agsx runs
 * only linux/amd64 images". */
int agsx_image_config_check_platform(const struct agsx_image_config *c, agsx_error_t *err);

/* Picks the linux/amd64 manifest of an index; a clear error naming the
 * platforms it has when there is none. Returns the index into ix->manifests. */
int agsx_index_select_platform(const struct agsx_index *ix, agsx_error_t *err);

/* Image references as stored in index.json: "name:tag" or "name@sha256:…".
 * NAME follows the Docker grammar (lowercase path components, optional
 * registry host[:port]); a missing tag means "latest". Returns the
 * normalised reference, in Docker's familiar form (docker.io/library/x is
 * x, docker.io/u/x is u/x). */
char *agsx_image_ref_normalize(const char *ref, agsx_error_t *err);

/* A reference split for a registry: "python:3.12" is domain "docker.io",
 * path "library/python", tag "3.12". FAMILIAR is the normalised form the
 * store names the image by ("python:3.12", "ghcr.io/a/b:latest",
 * "x@sha256:…"). DIGEST is NULL for a tag reference; a reference with both
 * keeps both (the digest wins when pulling). */
struct agsx_image_ref {
  char *domain, *path, *tag, *digest, *familiar;
};
int agsx_image_ref_parse(const char *ref, struct agsx_image_ref *ret, agsx_error_t *err);
void agsx_image_ref_clear(struct agsx_image_ref *r);

#endif
