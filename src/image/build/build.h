/* agsx — build: building a linux/amd64 OCI image into the store from a
 * Dockerfile and a context directory (`agsx build`).
 *
 * Stages run in order. RUN runs in an agsx sandbox (same isolation as any
 * sandbox) whose overlay upper directory the init hands back when the
 * command ends; that directory becomes the layer (overlay whiteouts →
 * `.wh.` entries, opaque directories → `.wh..wh..opq`, host ids shifted
 * back into the image's). COPY and ADD write their layer straight from the
 * context (resolved beneath it) or from another stage's or image's layers.
 * Layers are staged in one work directory and committed with the image at
 * the end: a failed build leaves nothing. A cache (ROOT/cache/<key>) maps
 * (parent, instruction after substitution, context content, args) to a
 * layer already in the store. */
#ifndef AGSX_BUILD_H
#define AGSX_BUILD_H

#include "image/store.h"

struct agsx_egress;

struct agsx_build_opts {
  const char *context;              /* the context directory */
  const char *dockerfile;           /* NULL: CONTEXT/Dockerfile */
  char **tags;                      /* normalised references, NULL-terminated (may be empty) */
  char **build_args;                /* "K=V", or "K" (the caller's environment) */
  const char *network;              /* internal | public | vpc:NAME */
  const struct agsx_egress *egress; /* RUN's egress rules (net/egress.h), or NULL */
  bool no_cache;
  const char *state_dir; /* sandbox state, for RUN */
  const char *root;      /* the store's root: vpc network definitions, for RUN */
  const char *pull;      /* FROM images: missing, always, never; NULL: $AGSX_PULL or missing */
  int cancel_fd;         /* readable (a signalfd) when the build must stop, or -1 */
  /* Called with each step ("Step 2/5: RUN ...") and RUN's output lines. */
  void (*progress)(const char *text, size_t len, void *data);
  void *data;
};

struct agsx_build_result {
  char digest[AGSX_DIGEST_LEN]; /* the image's manifest */
  size_t new_layers, cached_layers;
};

int agsx_build(struct agsx_store *s, const struct agsx_build_opts *o, struct agsx_build_result *ret,
               agsx_error_t *err);

/* agsx commit (sandbox/snapshot.h): IMAGE (a reference or digest in the
 * store) plus LAYER_DIRS (directories in overlay's form, lowest first, ids
 * in the image's range) as a new image, each directory a gzip layer
 * written as RUN's are (whiteouts, opaque directories, agsx's /etc files
 * left out), the image's configuration kept, history CREATED_BY; tagged
 * TAGS (none: an unnamed image). Staged in a work directory and committed
 * in one step: an interrupted commit leaves no image. */
struct agsx_commit_opts {
  const char *image;
  char *const *layer_dirs;
  char **tags;
  const char *created_by;
};
int agsx_build_commit(struct agsx_store *s, const struct agsx_commit_opts *o,
                      char ret_digest[AGSX_DIGEST_LEN], agsx_error_t *err);

/* agsx commit of sandbox ID (of state directory STATE) into the store at
 * ROOT, named IMAGE (a reference, or NULL): its current filesystem
 * (captured frozen: sandbox/snapshot.h) or its snapshot SNAPSHOT. More
 * than AGSX_COMMIT_HOLES_MAX of holes in sparse files is refused. The
 * captured copy is removed afterwards. The front ends (agsx commit, agsx
 * serve's createSnapshot) call this. */
struct agsx_sandbox_commit_opts {
  const char *root, *state, *id;
  const char *image, *snapshot;
};
struct agsx_sandbox_commit_result {
  char digest[AGSX_DIGEST_LEN];
  int64_t frozen_ns; /* 0 for a snapshot, or a paused sandbox */
};
int agsx_build_commit_sandbox(const struct agsx_sandbox_commit_opts *o,
                              struct agsx_sandbox_commit_result *ret, agsx_error_t *err);

/* FROM an image the store does not have: pulled, unless the pull policy
 * is never. */
int agsx_build_missing_image(const struct agsx_build_opts *o, const char *name, agsx_error_t *err);

#endif
