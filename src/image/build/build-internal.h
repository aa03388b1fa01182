/* agsx — build internals shared by build.c (string lists, stages, paths
 * in the layers, FROM, metadata, RUN and the driver), writer.c (the layer
 * writer), cache.c, copy.c (COPY, ADD, WORKDIR's layer) and commit.c (the
 * image). Not a public header. */
#ifndef AGSX_BUILD_INTERNAL_H
#define AGSX_BUILD_INTERNAL_H

#include "image/build/build.h"

#include "image/build/dockerfile.h"
#include "image/build/dockerignore.h"
#include "image/image.h"
#include "image/store.h"
#include "util/digest.h"

#include <archive.h>
#include <sys/stat.h>
#include <zlib.h>

#define MAX_STAGES 64
#define MAX_COPY_ENTRIES 200000
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

struct blayer {
  char diff_id[AGSX_DIGEST_LEN];
  char digest[AGSX_DIGEST_LEN];
  int64_t size;
  char *media_type;
};

struct stage {
  char *name; /* AS name (lowercase), or NULL */
  struct blayer *layers;
  size_t n_layers;
  char **env, **cmd, **entrypoint, **shell, **labels, **ports, **volumes;
  char *user, *workdir, *stopsignal;
  char **args; /* ARGs declared in this stage, "K=V" */
  yajl_val base_history;
  char **history;              /* created_by of our steps, "0"/"1" empty_layer prefix */
  char chain[AGSX_DIGEST_LEN]; /* cache key of the state so far */
};

struct build {
  struct agsx_store *s;
  const struct agsx_build_opts *o;
  struct agsx_dockerfile df;
  char *work;
  int workfd;
  int ctxfd;
  struct agsx_dockerignore ignore;
  int cachefd;
  char **meta;      /* ARGs before the first FROM, "K=V" */
  char **meta_decl; /* their names */
  char **used_args; /* build args some ARG consumed */
  struct stage stages[MAX_STAGES];
  size_t n_stages;
  struct stage *cur;
  const struct agsx_df_instr *in;
  /* cache records to write once the layers are committed */
  char **pending_cache; /* "keyhex\0record" pairs stored as two entries */
  struct agsx_build_result *res;
};

struct lw {
  struct archive *a;
  agsx_sha256 *diff, *blob;
  z_stream z;
  bool z_ok;
  int fd;
  int64_t size;
  unsigned char out[1 << 16];
  char *in; /* LW_IN_SIZE: file contents on their way into the tar */
  int error;
};
#define LW_IN_SIZE (1 << 16)

struct lentry {
  const char *path; /* in the layer, relative */
  mode_t mode;      /* type and permissions */
  uid_t uid;
  gid_t gid;
  int64_t mtime;
  int64_t size;
  const char *link;     /* symlink target */
  const char *hardlink; /* earlier entry's path */
  int fd;               /* content of a regular file */
  bool whiteout;        /* a deletion or opaque mark the walk made (.wh.NAME) */
};

/* build.c */
void agsx_build_stage_clear(struct stage *st);
int agsx_build_line_err(struct build *b, agsx_error_t *err);
void agsx_build_progress(struct build *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void agsx_build_banner(struct build *b);
int agsx_build_expand_word(struct build *b, const char *s, char **ret, agsx_error_t *err);
int agsx_build_expand_words(struct build *b, const char *s, char ***ret, agsx_error_t *err);
void agsx_build_chain(struct stage *st, const char *what, size_t len);
void agsx_build_history(struct stage *st, const char *created_by, bool empty);
char *agsx_build_clean_abs(const char *path);
char *agsx_build_in_image_path(struct stage *st, const char *path);
int agsx_build_open_layer(struct build *b, const char *diff_id, agsx_error_t *err);
bool agsx_build_is_whiteout(const struct stat *st);
int agsx_build_lookup_in_layers_x(struct build *b, struct stage *st, const char *path, bool follow,
                                  int *ret_layerfd, agsx_error_t *err);
int agsx_build_lookup_in_layers(struct build *b, struct stage *st, const char *path,
                                int *ret_layerfd, agsx_error_t *err);
char *agsx_build_resolve_dst(struct build *b, struct stage *st, const char *rel);
int agsx_build_read_from_layers(struct build *b, struct stage *st, const char *path, char **ret_buf,
                                size_t *ret_len, agsx_error_t *err);
struct stage *agsx_build_find_stage(struct build *b, const char *name);
int agsx_build_from_image(struct build *b, struct stage *st, const char *name, agsx_error_t *err);

/* build.c: an overlay upper directory (or a layer directory in its form:
 * sandbox/snapshot.h) into the layer W writes, ids shifted back by BASE. */
struct upper_walk {
  struct build *b;
  struct lw *w;
  uid_t base;
  struct {
    dev_t dev;
    ino_t ino;
    char *path;
  } * links;
  size_t n_links;
};
int agsx_build_upper_dir(struct upper_walk *u, int dirfd, const char *prefix, int depth,
                         agsx_error_t *err);

/* writer.c */
void agsx_lw_free(struct lw *w);
int agsx_lw_open(struct build *b, struct lw *w, agsx_error_t *err);
int agsx_lw_add(struct lw *w, const struct lentry *e, agsx_error_t *err);
int agsx_lw_commit(struct build *b, struct lw *w, struct stage *st, const char *created_by,
                   char ret_key_record[256], agsx_error_t *err);

/* cache.c */
bool agsx_build_cache_hit(struct build *b, struct stage *st, const char *created_by);
void agsx_build_cache_later(struct build *b, const char *key, const char *record);
void agsx_build_cache_write_all(struct build *b);

/* copy.c */
int agsx_build_list_dir(int dirfd, const char *path, char ***ret, agsx_error_t *err);
int agsx_build_copy(struct build *b, agsx_error_t *err);
int agsx_build_workdir_layer(struct build *b, agsx_error_t *err);

/* commit.c */
int agsx_build_write_image(struct build *b, struct stage *st, agsx_error_t *err);

#endif
