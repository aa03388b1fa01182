/* agsx — import of OCI layouts, oci-archives and docker-archives. */
#include "config.h"

#include "image/import.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>

#define MANIFEST_JSON_MAX (1u << 20)
#define NESTING_MAX 4

/* What is being imported: a directory tree (the user's layout, or an
 * archive we extracted into the work dir, whose files we may move). */
struct source {
  const char *path; /* for messages */
  int dirfd;
  bool ours;
};

/* An image found in the source, named or not, staged and waiting for the
 * commit. */
struct pending {
  char *ref;
  struct agsx_descriptor manifest;
};

struct import {
  struct agsx_store *store;
  int workfd;
  struct source src;
  struct pending *imgs;
  size_t n_imgs;
};

static void import_clear(struct import *im) {
  for (size_t i = 0; i < im->n_imgs; i++) {
    free(im->imgs[i].ref);
    agsx_descriptor_clear(&im->imgs[i].manifest);
  }
  free(im->imgs);
  im->imgs = NULL;
  im->n_imgs = 0;
}

/* ---- archive extraction into the work dir ---------------------------------------------
 * The archive is hostile like a layer, but only needs regular files,
 * directories and (old docker-archive) symlinks; everything is created
 * under the work dir's "src" with parents resolved in root. */

static int open_parent(int rootfd, const char *path, char **ret_base, agsx_error_t *err) {
  _cleanup_close_ int cur = fcntl(rootfd, F_DUPFD_CLOEXEC, 3);
  if (cur < 0)
    return agsx_error_set(err, errno, "dup");
  for (const char *p = path;;) {
    const char *slash = strchr(p, '/');
    if (slash == NULL) {
      *ret_base = xstrdup(p);
      return steal_fd(&cur);
    }
    _cleanup_free_ char *comp = xstrndup(p, (size_t)(slash - p));
    if (mkdirat(cur, comp, 0755) < 0 && errno != EEXIST)
      return agsx_error_set(err, errno, "create directory `%s`", comp);
    /* A symlink planted by an earlier entry resolves inside, never out. */
    int next = agsx_open_in_root(cur, comp, O_PATH | O_DIRECTORY, 0);
    if (next < 0)
      return agsx_error_set(err, errno, "open directory `%s`", comp);
    close(cur);
    cur = next;
    p = slash + 1;
  }
}

/* What an archive may extract to: a compressed archive is as much a bomb
 * as a layer. The image budget bounds it, and the store's reserve is kept
 * (checked every few MiB). */
struct extract_budget {
  struct agsx_store *store;
  uint64_t used, next_check;
};
#define EXTRACT_CHECK_EVERY ((uint64_t)4 << 20)

static int extract_charge(struct extract_budget *b, size_t len, agsx_error_t *err) {
  if (len > b->store->budget_max - b->used) {
    _cleanup_free_ char *max = agsx_format_size(b->store->budget_max);
    return agsx_error_set(err, 0,
                          "the archive holds more than the image budget of %s (max-image-size "
                          "in agsx.conf, AGSX_MAX_IMAGE_SIZE)",
                          max);
  }
  b->used += len;
  if (b->used < b->next_check)
    return 0;
  b->next_check = b->used + EXTRACT_CHECK_EVERY;
  return agsx_store_check_space(b->store, 0, err);
}

static int extract_file(struct archive *a, int parent, const char *base, const char *name,
                        struct extract_budget *b, agsx_error_t *err) {
  _cleanup_close_ int fd =
      openat(parent, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return agsx_error_set(err, errno, "create `%s`", name);
  const void *buf;
  size_t len;
  la_int64_t off;
  int r;
  while ((r = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK) {
    if (extract_charge(b, len, err) < 0)
      return agsx_error_wrap(err, "`%s`", name);
    if (pwrite(fd, buf, len, off) != (ssize_t)len)
      return agsx_error_set(err, errno ? errno : EIO, "write `%s`", name);
  }
  if (r != ARCHIVE_EOF)
    return agsx_error_set(err, 0, "read `%s`: %s", name, archive_error_string(a));
  return 0;
}

static int extract_entry(struct archive *a, struct archive_entry *e, int rootfd,
                         struct extract_budget *b, agsx_error_t *err) {
  const char *raw = archive_entry_pathname(e);
  if (raw == NULL)
    return agsx_error_set(err, 0, "entry without a name");
  while (raw[0] == '.' && raw[1] == '/')
    raw += 2;
  _cleanup_free_ char *name = xstrdup(raw);
  size_t n = strlen(name);
  while (n > 0 && name[n - 1] == '/')
    name[--n] = '\0';
  if (n == 0 || strcmp(name, ".") == 0)
    return 0;
  if (!agsx_path_is_clean(name, 1024, 16))
    return agsx_error_set(err, 0, "entry `%.200s`: unsafe or too long a path", raw);
  _cleanup_free_ char *base = NULL;
  _cleanup_close_ int parent = open_parent(rootfd, name, &base, err);
  if (parent < 0)
    return agsx_error_wrap(err, "entry `%s`", name);
  switch (archive_entry_filetype(e)) {
  case AE_IFDIR:
    if (mkdirat(parent, base, 0755) < 0 && errno != EEXIST)
      return agsx_error_set(err, errno, "entry `%s`", name);
    return 0;
  case AE_IFREG:
    if (archive_entry_hardlink(e))
      return agsx_error_set(err, 0, "entry `%s`: hardlinks are not expected in an image archive",
                            name);
    return extract_file(a, parent, base, name, b, err);
  case AE_IFLNK:
    if (symlinkat(archive_entry_symlink(e), parent, base) < 0)
      return agsx_error_set(err, errno, "entry `%s`", name);
    return 0;
  default:
    return agsx_error_set(err, 0, "entry `%s`: unexpected file type in an image archive", name);
  }
}

/* Extracts the archive PATH, or the stream FD when FD >= 0, into ROOTFD. */
static int extract_archive(const char *path, int fd, int rootfd, struct agsx_store *s,
                           agsx_error_t *err) {
  struct extract_budget b = {.store = s};
  struct archive *a = archive_read_new();
  archive_read_support_format_tar(a);
  archive_read_support_filter_none(a);
  archive_read_support_filter_gzip(a);
  archive_read_support_filter_xz(a);
  archive_read_support_filter_zstd(a);
  int r = -1;
  int opened =
      fd >= 0 ? archive_read_open_fd(a, fd, 1 << 20) : archive_read_open_filename(a, path, 1 << 20);
  if (opened != ARCHIVE_OK) {
    agsx_error_set(err, 0, "not a valid tar archive: %s", archive_error_string(a));
    goto out;
  }
  struct archive_entry *e;
  size_t count = 0;
  int ar;
  while ((ar = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
    if (++count > AGSX_ARCHIVE_MAX_ENTRIES) {
      agsx_error_set(err, 0, "more than %d entries", AGSX_ARCHIVE_MAX_ENTRIES);
      goto out;
    }
    if (extract_entry(a, e, rootfd, &b, err) < 0)
      goto out;
  }
  if (ar != ARCHIVE_EOF) {
    agsx_error_set(err, 0, "not a valid tar archive: %s", archive_error_string(a));
    goto out;
  }
  if (count == 0) {
    agsx_error_set(err, 0, "empty archive");
    goto out;
  }
  r = 0;
out:
  archive_read_free(a);
  return r;
}

/* ---- reading from the source ------------------------------------------------------------ */

static int src_open(const struct source *src, const char *path, agsx_error_t *err) {
  int fd = agsx_open_in_root(src->dirfd, path, O_RDONLY | AGSX_O_UNTRUSTED, 0);
  if (fd < 0)
    return agsx_error_set(err, errno, "`%s`", path);
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return agsx_error_set(err, 0, "`%s` is not a regular file", path);
  }
  return fd;
}

static int src_read(const struct source *src, const char *path, size_t max, char **ret_buf,
                    size_t *ret_len, agsx_error_t *err) {
  _cleanup_close_ int fd = src_open(src, path, err);
  if (fd < 0)
    return -1;
  if (agsx_read_fd(fd, max, ret_buf, ret_len, err) < 0)
    return agsx_error_wrap(err, "`%s`", path);
  return 0;
}

static char *blob_path(const char *digest) {
  return xasprintf("blobs/sha256/%s", agsx_digest_hex(digest));
}

/* Stages one blob of the source, verified. */
static int stage_src_blob(struct import *im, const char *path, const char *digest, int64_t size,
                          agsx_error_t *err) {
  if (im->src.ours) {
    agsx_error_t merr = NULL;
    if (agsx_store_stage_blob_move(im->store, im->workfd, im->src.dirfd, path, digest, size,
                                   &merr) == 0)
      return 0;
    /* Not a plain file of ours (e.g. a symlinked layer): copy it instead. */
    if (merr->errno_ != 0 || strstr(merr->msg, "not a plain file") == NULL) {
      *err = merr;
      return -1;
    }
    agsx_error_free(&merr);
  }
  _cleanup_close_ int fd = src_open(&im->src, path, err);
  if (fd < 0)
    return -1;
  return agsx_store_stage_blob_fd(im->store, im->workfd, fd, digest, size, err);
}

/* Stages the config and layers of a parsed manifest and unpacks each layer. */
static int stage_image(struct import *im, const struct agsx_manifest *m, agsx_error_t *err) {
  _cleanup_free_ char *cpath = blob_path(m->config.digest);
  if (stage_src_blob(im, cpath, m->config.digest, m->config.size, err) < 0)
    return agsx_error_wrap(err, "config");
  _cleanup_free_ char *cbuf = NULL;
  size_t clen;
  if (agsx_store_read_staged_blob(im->store, im->workfd, m->config.digest, AGSX_IMAGE_JSON_MAX,
                                  &cbuf, &clen, err) < 0)
    return -1;
  struct agsx_image_config c;
  if (agsx_image_config_parse(cbuf, clen, &c, err) < 0)
    return -1;
  int r = agsx_image_config_check_platform(&c, err);
  if (r == 0 && c.n_diff_ids != m->n_layers)
    r = agsx_error_set(err, 0, "the manifest has %zu layers but the config %zu diff_ids",
                       m->n_layers, c.n_diff_ids);
  for (size_t i = 0; r == 0 && i < m->n_layers; i++) {
    _cleanup_free_ char *lpath = blob_path(m->layers[i].digest);
    r = stage_src_blob(im, lpath, m->layers[i].digest, m->layers[i].size, err);
    if (r == 0)
      r = agsx_store_stage_layer(im->store, im->workfd, &m->layers[i], c.diff_ids[i], err);
  }
  agsx_image_config_clear(&c);
  return r;
}

static void add_pending(struct import *im, const char *ref,
                        const struct agsx_descriptor *manifest) {
  im->imgs = xrealloc(im->imgs, (im->n_imgs + 1) * sizeof(*im->imgs));
  struct pending *p = &im->imgs[im->n_imgs++];
  memset(p, 0, sizeof(*p));
  p->ref = ref ? xstrdup(ref) : NULL;
  p->manifest.media_type = xstrdup(manifest->media_type);
  memcpy(p->manifest.digest, manifest->digest, AGSX_DIGEST_LEN);
  p->manifest.size = manifest->size;
}

/* ---- OCI image layout ------------------------------------------------------------------------ */

/* A name from the layout's annotations: containerd's full name, or a
 * ref.name that is a whole reference ("busybox:1.36"); a bare tag such as
 * "latest" names nothing on its own. */
static char *oci_entry_name(const struct agsx_descriptor *d) {
  if (d->image_name) {
    char *r = agsx_image_ref_normalize(d->image_name, NULL);
    if (r)
      return r;
  }
  if (d->ref_name && (strchr(d->ref_name, ':') || strchr(d->ref_name, '/')))
    return agsx_image_ref_normalize(d->ref_name, NULL);
  return NULL;
}

/* Stages the JSON blob D of the source and reads it back, verified. */
static int stage_json_blob(struct import *im, const struct agsx_descriptor *d, char **ret_buf,
                           size_t *ret_len, agsx_error_t *err) {
  _cleanup_free_ char *path = blob_path(d->digest);
  if (stage_src_blob(im, path, d->digest, d->size, err) < 0)
    return -1;
  return agsx_store_read_staged_blob(im->store, im->workfd, d->digest, AGSX_IMAGE_JSON_MAX, ret_buf,
                                     ret_len, err);
}

static int oci_manifest(struct import *im, const struct agsx_descriptor *d, const char *ref,
                        agsx_error_t *err);

static int oci_nested_index(struct import *im, const struct agsx_descriptor *d, const char *ref,
                            int depth, agsx_error_t *err) {
  if (depth > NESTING_MAX)
    return agsx_error_set(err, 0, "image indexes nested too deeply");
  _cleanup_free_ char *buf = NULL;
  size_t len;
  if (stage_json_blob(im, d, &buf, &len, err) < 0)
    return -1;
  struct agsx_index ix;
  if (agsx_index_parse(buf, len, &ix, err) < 0)
    return -1;
  int r, sel = agsx_index_select_platform(&ix, err);
  if (sel < 0)
    r = -1;
  else if (agsx_media_type_is_index(ix.manifests[sel].media_type))
    r = oci_nested_index(im, &ix.manifests[sel], ref, depth + 1, err);
  else
    r = oci_manifest(im, &ix.manifests[sel], ref, err);
  agsx_index_clear(&ix);
  return r;
}

static int oci_manifest(struct import *im, const struct agsx_descriptor *d, const char *ref,
                        agsx_error_t *err) {
  if (d->os && d->architecture && !agsx_platform_is_supported(d->os, d->architecture))
    return agsx_error_set(err, 0, "image is for %s/%s: agsx runs only linux/amd64 images", d->os,
                          d->architecture);
  _cleanup_free_ char *buf = NULL;
  size_t len;
  if (stage_json_blob(im, d, &buf, &len, err) < 0)
    return -1;
  struct agsx_manifest m;
  if (agsx_manifest_parse(buf, len, &m, err) < 0)
    return -1;
  int r = stage_image(im, &m, err);
  agsx_manifest_clear(&m);
  if (r == 0)
    add_pending(im, ref, d);
  return r;
}

static int import_oci(struct import *im, agsx_error_t *err) {
  _cleanup_free_ char *layout = NULL, *buf = NULL;
  size_t len;
  if (src_read(&im->src, "oci-layout", 4096, &layout, &len, err) < 0)
    return -1;
  _cleanup_json_ yajl_val lv = agsx_json_parse(layout, len, 4096, err);
  if (lv == NULL || agsx_json_get_string(lv, "imageLayoutVersion") == NULL)
    return agsx_error_set(err, 0, "`oci-layout` has no imageLayoutVersion");
  if (src_read(&im->src, "index.json", AGSX_IMAGE_JSON_MAX, &buf, &len, err) < 0)
    return -1;
  struct agsx_index ix;
  if (agsx_index_parse(buf, len, &ix, err) < 0)
    return agsx_error_wrap(err, "index.json");
  int r = 0;
  if (ix.n_manifests == 0)
    r = agsx_error_set(err, 0, "index.json lists no images");
  for (size_t i = 0; r == 0 && i < ix.n_manifests; i++) {
    const struct agsx_descriptor *d = &ix.manifests[i];
    _cleanup_free_ char *ref = oci_entry_name(d);
    if (agsx_media_type_is_index(d->media_type))
      r = oci_nested_index(im, d, ref, 1, err);
    else if (agsx_media_type_is_manifest(d->media_type))
      r = oci_manifest(im, d, ref, err);
    else
      r = agsx_error_set(err, 0, "unsupported media type `%.100s`", d->media_type);
    if (r < 0)
      agsx_error_wrap(err, "image %zu (`%s`)", i, d->ref_name ? d->ref_name : d->digest);
  }
  agsx_index_clear(&ix);
  return r;
}

/* ---- docker-archive ---------------------------------------------------------------------------- */

static int hash_src_file(const struct source *src, const char *path, char out[AGSX_DIGEST_LEN],
                         int64_t *ret_size, bool *ret_gzip, agsx_error_t *err) {
  _cleanup_close_ int fd = src_open(src, path, err);
  if (fd < 0)
    return -1;
  _cleanup_free_ char *buf = xmalloc(1u << 20);
  _cleanup_sha256_ agsx_sha256 *h = agsx_sha256_new();
  int64_t total = 0;
  for (;;) {
    ssize_t n = agsx_read_all(fd, buf, 1u << 20);
    if (n < 0)
      return agsx_error_set(err, errno, "read `%s`", path);
    if (n == 0)
      break;
    if (total == 0)
      *ret_gzip = n >= 2 && (unsigned char)buf[0] == 0x1f && (unsigned char)buf[1] == 0x8b;
    agsx_sha256_update(h, buf, (size_t)n);
    total += n;
  }
  agsx_sha256_final(h, out);
  *ret_size = total;
  return 0;
}

static void gen_desc(yajl_gen g, const char *mt, const char *digest, int64_t size) {
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "mediaType", mt);
  agsx_json_kv_str(g, "digest", digest);
  agsx_json_kv_int(g, "size", size);
  yajl_gen_map_close(g);
}

/* Stages the layers of one docker-archive image and writes its manifest. */
static int docker_layers(struct import *im, yajl_val layers, const struct agsx_image_config *c,
                         yajl_gen g, agsx_error_t *err) {
  if (layers->u.array.len != c->n_diff_ids)
    return agsx_error_set(err, 0, "manifest.json lists %zu layers but the config %zu diff_ids",
                          layers->u.array.len, c->n_diff_ids);
  for (size_t i = 0; i < layers->u.array.len; i++) {
    yajl_val lp = layers->u.array.values[i];
    if (!YAJL_IS_STRING(lp))
      return agsx_error_set(err, 0, "manifest.json: layer %zu is not a path", i);
    char digest[AGSX_DIGEST_LEN];
    int64_t size = 0;
    bool gz = false;
    if (hash_src_file(&im->src, lp->u.string, digest, &size, &gz, err) < 0)
      return -1;
    struct agsx_descriptor d = {
        .media_type = (char *)(gz ? AGSX_MT_OCI_LAYER_GZIP : AGSX_MT_OCI_LAYER), .size = size};
    memcpy(d.digest, digest, AGSX_DIGEST_LEN);
    if (stage_src_blob(im, lp->u.string, digest, size, err) < 0 ||
        agsx_store_stage_layer(im->store, im->workfd, &d, c->diff_ids[i], err) < 0)
      return agsx_error_wrap(err, "layer `%s`", lp->u.string);
    gen_desc(g, d.media_type, digest, size);
  }
  return 0;
}

static int docker_image(struct import *im, yajl_val entry, agsx_error_t *err) {
  const char *cfg = agsx_json_get_string(entry, "Config");
  yajl_val layers = agsx_json_get_array(entry, "Layers");
  yajl_val tags = agsx_json_get(entry, "RepoTags");
  if (cfg == NULL || layers == NULL)
    return agsx_error_set(err, 0, "manifest.json: entry without Config or Layers");
  _cleanup_free_ char *cbuf = NULL;
  size_t clen;
  if (src_read(&im->src, cfg, AGSX_IMAGE_JSON_MAX, &cbuf, &clen, err) < 0)
    return -1;
  struct agsx_image_config c;
  if (agsx_image_config_parse(cbuf, clen, &c, err) < 0)
    return -1;
  char cdigest[AGSX_DIGEST_LEN];
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_int(g, "schemaVersion", 2);
  agsx_json_kv_str(g, "mediaType", AGSX_MT_OCI_MANIFEST);
  int r = agsx_image_config_check_platform(&c, err);
  if (r == 0)
    r = agsx_store_stage_blob_mem(im->store, im->workfd, cbuf, clen, cdigest, err);
  if (r == 0) {
    agsx_json_key(g, "config");
    gen_desc(g, AGSX_MT_OCI_CONFIG, cdigest, (int64_t)clen);
    agsx_json_key(g, "layers");
    yajl_gen_array_open(g);
    r = docker_layers(im, layers, &c, g, err);
    yajl_gen_array_close(g);
  }
  yajl_gen_map_close(g);
  agsx_image_config_clear(&c);
  if (r < 0)
    return -1;
  size_t mlen;
  _cleanup_free_ char *mbuf = agsx_json_gen_steal(g, &mlen);
  struct agsx_descriptor md = {.media_type = (char *)AGSX_MT_OCI_MANIFEST, .size = (int64_t)mlen};
  if (agsx_store_stage_blob_mem(im->store, im->workfd, mbuf, mlen, md.digest, err) < 0)
    return -1;
  size_t ntags = tags && YAJL_IS_ARRAY(tags) ? tags->u.array.len : 0;
  for (size_t i = 0; i < ntags; i++) {
    yajl_val t = tags->u.array.values[i];
    _cleanup_free_ char *ref =
        YAJL_IS_STRING(t) ? agsx_image_ref_normalize(t->u.string, err) : NULL;
    if (ref == NULL)
      return agsx_error_set(err, 0, "manifest.json: invalid RepoTags entry");
    add_pending(im, ref, &md);
  }
  if (ntags == 0)
    add_pending(im, NULL, &md);
  return 0;
}

static int import_docker(struct import *im, agsx_error_t *err) {
  _cleanup_free_ char *buf = NULL;
  size_t len;
  if (src_read(&im->src, "manifest.json", MANIFEST_JSON_MAX, &buf, &len, err) < 0)
    return -1;
  _cleanup_json_ yajl_val root = agsx_json_parse(buf, len, MANIFEST_JSON_MAX, err);
  if (root == NULL)
    return agsx_error_wrap(err, "manifest.json");
  if (!YAJL_IS_ARRAY(root) || root->u.array.len == 0)
    return agsx_error_set(err, 0, "manifest.json: expected a non-empty array");
  if (root->u.array.len > AGSX_ARCHIVE_MAX_IMAGES)
    return agsx_error_set(err, 0, "manifest.json: more than %d images", AGSX_ARCHIVE_MAX_IMAGES);
  for (size_t i = 0; i < root->u.array.len; i++)
    if (docker_image(im, root->u.array.values[i], err) < 0)
      return agsx_error_wrap(err, "image %zu", i);
  return 0;
}

/* ---- entry point ---------------------------------------------------------------------------------- */

static int detect_and_stage(struct import *im, agsx_error_t *err) {
  if (faccessat(im->src.dirfd, "manifest.json", F_OK, AT_SYMLINK_NOFOLLOW) == 0)
    return import_docker(im, err);
  if (faccessat(im->src.dirfd, "oci-layout", F_OK, AT_SYMLINK_NOFOLLOW) == 0)
    return import_oci(im, err);
  return agsx_error_set(err, 0,
                        "not an OCI image layout or docker-archive (no `oci-layout` or "
                        "`manifest.json`)");
}

/* The work dir's "src", where an archive is extracted. */
static int open_work_src(struct import *im, agsx_error_t *err) {
  if (mkdirat(im->workfd, "src", 0700) < 0)
    return agsx_error_set(err, errno, "mkdir work dir");
  im->src.dirfd = openat(im->workfd, "src", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (im->src.dirfd < 0)
    return agsx_error_set(err, errno, "open work dir");
  im->src.ours = true;
  return 0;
}

static int open_source(struct import *im, const char *path, agsx_error_t *err) {
  im->src.path = path;
  /* A stream is extracted as it arrives, as an archive file is: with the
   * same checks and budget, into the work dir that goes afterwards. */
  if (strcmp(path, "-") == 0) {
    if (open_work_src(im, err) < 0)
      return -1;
    return extract_archive(path, STDIN_FILENO, im->src.dirfd, im->store, err);
  }
  struct stat st;
  if (stat(path, &st) < 0)
    return agsx_error_set(err, errno, "`%s`", path);
  if (S_ISDIR(st.st_mode)) {
    im->src.dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (im->src.dirfd < 0)
      return agsx_error_set(err, errno, "`%s`", path);
    return 0;
  }
  if (!S_ISREG(st.st_mode))
    return agsx_error_set(err, 0, "`%s` is not a directory or an archive file", path);
  if (open_work_src(im, err) < 0)
    return -1;
  return extract_archive(path, -1, im->src.dirfd, im->store, err);
}

static int commit(struct import *im, const struct agsx_import_opts *opts, agsx_error_t *err) {
  if (opts->tag && im->n_imgs != 1) {
    /* Several names of one image are one image. */
    for (size_t i = 1; i < im->n_imgs; i++)
      if (strcmp(im->imgs[i].manifest.digest, im->imgs[0].manifest.digest) != 0)
        return agsx_error_set(err, 0, "--tag needs a source with one image, this one has several");
  }
  if (agsx_store_commit(im->store, im->workfd, err) < 0)
    return -1;
  size_t n = opts->tag ? 1 : im->n_imgs;
  for (size_t i = 0; i < n; i++) {
    const char *ref = opts->tag ? opts->tag : im->imgs[i].ref;
    if (agsx_store_tag(im->store, ref, &im->imgs[i].manifest, err) < 0)
      return -1;
    struct agsx_loaded_image li = {.ref = (char *)ref};
    memcpy(li.digest, im->imgs[i].manifest.digest, AGSX_DIGEST_LEN);
    if (opts->loaded)
      opts->loaded(&li, opts->data);
  }
  return 0;
}

int agsx_import(struct agsx_store *s, const char *path, const struct agsx_import_opts *opts,
                agsx_error_t *err) {
  agsx_error_t cerr = NULL;
  if (agsx_store_clean_tmp(s, &cerr) < 0) {
    agsx_warn("%s", cerr->msg);
    agsx_error_free(&cerr);
  }
  _cleanup_free_ char *work = NULL;
  struct import im = {.store = s, .src = {.dirfd = -1}};
  _cleanup_free_ char *what =
      strcmp(path, "-") == 0 ? xstrdup("load from standard input") : xasprintf("load `%s`", path);
  im.workfd = agsx_store_mkwork(s, "import", &work, err);
  if (im.workfd < 0)
    return agsx_error_wrap(err, "%s", what);
  int r = open_source(&im, path, err);
  if (r == 0)
    r = detect_and_stage(&im, err);
  if (r == 0)
    r = commit(&im, opts, err);
  if (r < 0)
    agsx_error_wrap(err, "%s", what);
  import_clear(&im);
  agsx_closep(&im.src.dirfd);
  agsx_closep(&im.workfd);
  if (agsx_rm_rf_at(s->tmpfd, work, &cerr) < 0) {
    agsx_warn("%s", cerr->msg);
    agsx_error_free(&cerr);
  }
  return r;
}
