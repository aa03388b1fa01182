/* agsx — export: oci-archives and docker-archives of stored images. */
#include "config.h"

#include "image/export.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>

#define BUF_SIZE ((size_t)1 << 20)

/* One image to save: its name in the archive (NULL: unnamed), manifest
 * descriptor, and the parsed manifest and config. */
struct image {
  char *ref;
  struct agsx_descriptor desc;
  struct agsx_manifest m;
  struct agsx_image_config c;
};

struct export {
  struct agsx_store *store;
  struct image *imgs;
  size_t n_imgs;
  struct archive *a;
  char *buf;
  char **written; /* archive paths already written (shared blobs go once) */
  size_t n_written;
};

static void export_clear(struct export *ex) {
  for (size_t i = 0; i < ex->n_imgs; i++) {
    free(ex->imgs[i].ref);
    agsx_descriptor_clear(&ex->imgs[i].desc);
    agsx_manifest_clear(&ex->imgs[i].m);
    agsx_image_config_clear(&ex->imgs[i].c);
  }
  free(ex->imgs);
  for (size_t i = 0; i < ex->n_written; i++)
    free(ex->written[i]);
  free(ex->written);
  if (ex->a)
    archive_write_free(ex->a);
  free(ex->buf);
}

int agsx_export_format_parse(const char *s, enum agsx_export_format *ret, agsx_error_t *err) {
  if (strcmp(s, "oci-archive") == 0)
    *ret = AGSX_EXPORT_OCI_ARCHIVE;
  else if (strcmp(s, "docker-archive") == 0)
    *ret = AGSX_EXPORT_DOCKER_ARCHIVE;
  else
    return agsx_error_set(err, 0, "unknown archive format `%s` (oci-archive or docker-archive)", s);
  return 0;
}

/* ---- the images ------------------------------------------------------------------------- */

static int read_image(struct agsx_store *s, struct image *img, agsx_error_t *err) {
  _cleanup_free_ char *mbuf = NULL, *cbuf = NULL;
  size_t mlen, clen;
  if (agsx_store_read_blob(s, img->desc.digest, AGSX_IMAGE_JSON_MAX, &mbuf, &mlen, err) < 0 ||
      agsx_manifest_parse(mbuf, mlen, &img->m, err) < 0)
    return -1;
  if (agsx_store_read_blob(s, img->m.config.digest, AGSX_IMAGE_JSON_MAX, &cbuf, &clen, err) < 0 ||
      agsx_image_config_parse(cbuf, clen, &img->c, err) < 0)
    return -1;
  if (img->c.n_diff_ids != img->m.n_layers)
    return agsx_error_set(err, 0, "the manifest has %zu layers but the config %zu diff_ids",
                          img->m.n_layers, img->c.n_diff_ids);
  return 0;
}

static bool have_image(const struct export *ex, const char *ref, const char *digest) {
  for (size_t i = 0; i < ex->n_imgs; i++)
    if (strcmp(ex->imgs[i].desc.digest, digest) == 0 &&
        (ref == NULL ? ex->imgs[i].ref == NULL
                     : ex->imgs[i].ref != NULL && strcmp(ex->imgs[i].ref, ref) == 0))
      return true;
  return false;
}

/* Resolves NAME and adds it (once) with its manifest and config. */
static int add_image(struct export *ex, const char *name, agsx_error_t *err) {
  struct agsx_store_image si = {0};
  if (agsx_store_resolve(ex->store, name, &si, err) < 0)
    return -1;
  _cleanup_free_ char *ref = agsx_image_ref_normalize(name, NULL);
  const char *saved = ref && si.ref && strcmp(ref, si.ref) == 0 ? si.ref : NULL;
  int r = 0;
  if (!have_image(ex, saved, si.manifest.digest)) {
    ex->imgs = xrealloc(ex->imgs, (ex->n_imgs + 1) * sizeof(*ex->imgs));
    struct image *img = &ex->imgs[ex->n_imgs++];
    memset(img, 0, sizeof(*img));
    img->ref = saved ? xstrdup(saved) : NULL;
    img->desc.media_type = xstrdup(si.manifest.media_type);
    memcpy(img->desc.digest, si.manifest.digest, AGSX_DIGEST_LEN);
    img->desc.size = si.manifest.size;
    r = read_image(ex->store, img, err);
  }
  free(si.ref);
  agsx_descriptor_clear(&si.manifest);
  return r < 0 ? agsx_error_wrap(err, "image `%s`", name) : 0;
}

/* ---- tar entries ------------------------------------------------------------------------------ */

static int tar_fail(struct archive *a, const char *path, agsx_error_t *err) {
  int e = archive_errno(a);
  return agsx_error_set(err, e > 0 ? e : 0, "write `%s`: %s", path,
                        archive_error_string(a) ? archive_error_string(a) : "tar error");
}

static bool written(struct export *ex, const char *path) {
  for (size_t i = 0; i < ex->n_written; i++)
    if (strcmp(ex->written[i], path) == 0)
      return true;
  ex->written = xrealloc(ex->written, (ex->n_written + 1) * sizeof(char *));
  ex->written[ex->n_written++] = xstrdup(path);
  return false;
}

static int tar_header(struct export *ex, const char *path, mode_t type, int64_t size,
                      agsx_error_t *err) {
  struct archive_entry *e = archive_entry_new();
  archive_entry_copy_pathname(e, path);
  archive_entry_set_filetype(e, type);
  archive_entry_set_perm(e, type == AE_IFDIR ? 0755 : 0644);
  archive_entry_set_size(e, type == AE_IFREG ? size : 0);
  archive_entry_set_mtime(e, 0, 0);
  int r = archive_write_header(ex->a, e);
  archive_entry_free(e);
  return r == ARCHIVE_OK ? 0 : tar_fail(ex->a, path, err);
}

static int tar_dir(struct export *ex, const char *path, agsx_error_t *err) {
  if (written(ex, path))
    return 0;
  return tar_header(ex, path, AE_IFDIR, 0, err);
}

static int tar_mem(struct export *ex, const char *path, const void *buf, size_t len,
                   agsx_error_t *err) {
  if (written(ex, path))
    return 0;
  if (tar_header(ex, path, AE_IFREG, (int64_t)len, err) < 0)
    return -1;
  if (len > 0 && archive_write_data(ex->a, buf, len) != (la_ssize_t)len)
    return tar_fail(ex->a, path, err);
  return 0;
}

/* Writes SIZE bytes of FD as PATH; with DIGEST, they must hash to it. The
 * archive is complete only if they do: a mismatch fails the save. */
static int tar_fd(struct export *ex, const char *path, int fd, int64_t size, const char *digest,
                  agsx_error_t *err) {
  if (tar_header(ex, path, AE_IFREG, size, err) < 0)
    return -1;
  _cleanup_sha256_ agsx_sha256 *h = digest ? agsx_sha256_new() : NULL;
  for (int64_t left = size; left > 0;) {
    ssize_t n = agsx_read_all(fd, ex->buf, left < (int64_t)BUF_SIZE ? (size_t)left : BUF_SIZE);
    if (n < 0)
      return agsx_error_set(err, errno, "read `%s`", path);
    if (n == 0)
      return agsx_error_set(err, 0, "`%s` shrank while it was written", path);
    if (h)
      agsx_sha256_update(h, ex->buf, (size_t)n);
    if (archive_write_data(ex->a, ex->buf, (size_t)n) != n)
      return tar_fail(ex->a, path, err);
    left -= n;
  }
  if (h) {
    char got[AGSX_DIGEST_LEN];
    agsx_sha256_final(h, got);
    if (strcmp(got, digest) != 0)
      return agsx_error_set(err, 0, "blob `%s` is corrupt in the store (content has digest `%s`)",
                            digest, got);
  }
  return 0;
}

/* A stored blob as PATH, verified against its digest and size. */
static int tar_blob(struct export *ex, const char *path, const struct agsx_descriptor *d,
                    agsx_error_t *err) {
  if (written(ex, path))
    return 0;
  _cleanup_close_ int fd = agsx_store_open_blob(ex->store, d->digest, err);
  if (fd < 0)
    return -1;
  struct stat st;
  if (fstat(fd, &st) < 0)
    return agsx_error_set(err, errno, "blob `%s`", d->digest);
  if (!S_ISREG(st.st_mode) || st.st_size != d->size)
    return agsx_error_set(err, 0,
                          "blob `%s` is corrupt in the store (%" PRId64 " bytes, its descriptor "
                          "says %" PRId64 ")",
                          d->digest, (int64_t)st.st_size, d->size);
  return tar_fd(ex, path, fd, d->size, d->digest, err);
}

/* ---- oci-archive ------------------------------------------------------------------------------ */

/* "docker.io/library/busybox:latest" for "busybox:latest". */
static char *qualified_name(const char *ref) {
  struct agsx_image_ref r;
  if (agsx_image_ref_parse(ref, &r, NULL) < 0)
    return NULL;
  char *q = xasprintf("%s/%s%s%s%s%s", r.domain, r.path, r.tag ? ":" : "", r.tag ? r.tag : "",
                      r.digest ? "@" : "", r.digest ? r.digest : "");
  agsx_image_ref_clear(&r);
  return q;
}

static void gen_index_entry(yajl_gen g, const struct image *img) {
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "mediaType", img->desc.media_type);
  agsx_json_kv_str(g, "digest", img->desc.digest);
  agsx_json_kv_int(g, "size", img->desc.size);
  agsx_json_key(g, "platform");
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "architecture", img->c.architecture);
  agsx_json_kv_str(g, "os", img->c.os);
  if (img->c.variant)
    agsx_json_kv_str(g, "variant", img->c.variant);
  yajl_gen_map_close(g);
  _cleanup_free_ char *qualified = img->ref ? qualified_name(img->ref) : NULL;
  if (img->ref) {
    agsx_json_key(g, "annotations");
    yajl_gen_map_open(g);
    if (qualified)
      agsx_json_kv_str(g, AGSX_CONTAINERD_NAME_ANNOTATION, qualified);
    agsx_json_kv_str(g, AGSX_REF_ANNOTATION, img->ref);
    yajl_gen_map_close(g);
  }
  yajl_gen_map_close(g);
}

static char *oci_index(const struct export *ex, size_t *ret_len) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_int(g, "schemaVersion", 2);
  agsx_json_kv_str(g, "mediaType", AGSX_MT_OCI_INDEX);
  agsx_json_key(g, "manifests");
  yajl_gen_array_open(g);
  for (size_t i = 0; i < ex->n_imgs; i++)
    gen_index_entry(g, &ex->imgs[i]);
  yajl_gen_array_close(g);
  yajl_gen_map_close(g);
  return agsx_json_gen_steal(g, ret_len);
}

static char *blob_path(const char *digest) {
  return xasprintf("blobs/sha256/%s", agsx_digest_hex(digest));
}

static int write_oci(struct export *ex, agsx_error_t *err) {
  static const char layout[] = "{\"imageLayoutVersion\":\"1.0.0\"}";
  size_t ilen;
  _cleanup_free_ char *index = oci_index(ex, &ilen);
  if (tar_mem(ex, "oci-layout", layout, strlen(layout), err) < 0 ||
      tar_mem(ex, "index.json", index, ilen, err) < 0 || tar_dir(ex, "blobs", err) < 0 ||
      tar_dir(ex, "blobs/sha256", err) < 0)
    return -1;
  for (size_t i = 0; i < ex->n_imgs; i++) {
    const struct image *img = &ex->imgs[i];
    _cleanup_free_ char *mp = blob_path(img->desc.digest), *cp = blob_path(img->m.config.digest);
    if (tar_blob(ex, mp, &img->desc, err) < 0 || tar_blob(ex, cp, &img->m.config, err) < 0)
      return -1;
    for (size_t l = 0; l < img->m.n_layers; l++) {
      _cleanup_free_ char *lp = blob_path(img->m.layers[l].digest);
      if (tar_blob(ex, lp, &img->m.layers[l], err) < 0)
        return -1;
    }
  }
  return 0;
}

/* ---- docker-archive ----------------------------------------------------------------------------- */

static char *layer_path(const char *diff_id) {
  return xasprintf("%s.tar", agsx_digest_hex(diff_id));
}

static char *config_path(const char *digest) {
  return xasprintf("%s.json", agsx_digest_hex(digest));
}

/* manifest.json: one entry per manifest, with every name saved for it. */
static char *docker_manifest(const struct export *ex, size_t *ret_len) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_array_open(g);
  for (size_t i = 0; i < ex->n_imgs; i++) {
    const struct image *img = &ex->imgs[i];
    bool first = true;
    for (size_t j = 0; j < i && first; j++)
      first = strcmp(ex->imgs[j].desc.digest, img->desc.digest) != 0;
    if (!first)
      continue;
    yajl_gen_map_open(g);
    _cleanup_free_ char *cp = config_path(img->m.config.digest);
    agsx_json_kv_str(g, "Config", cp);
    agsx_json_key(g, "RepoTags");
    yajl_gen_array_open(g);
    /* Tags only: a digest reference is no tag. */
    for (size_t j = i; j < ex->n_imgs; j++)
      if (ex->imgs[j].ref && strchr(ex->imgs[j].ref, '@') == NULL &&
          strcmp(ex->imgs[j].desc.digest, img->desc.digest) == 0)
        agsx_json_str(g, ex->imgs[j].ref);
    yajl_gen_array_close(g);
    agsx_json_key(g, "Layers");
    yajl_gen_array_open(g);
    for (size_t l = 0; l < img->c.n_diff_ids; l++) {
      _cleanup_free_ char *lp = layer_path(img->c.diff_ids[l]);
      agsx_json_str(g, lp);
    }
    yajl_gen_array_close(g);
    yajl_gen_map_close(g);
  }
  yajl_gen_array_close(g);
  return agsx_json_gen_steal(g, ret_len);
}

/* The layer LAYER uncompressed as PATH, checked against DIFF_ID. A
 * compressed layer is decompressed into an unnamed file of the store's tmp
 * first: a tar header needs the size before the data. */
static int tar_layer(struct export *ex, const char *path, const struct agsx_descriptor *layer,
                     const char *diff_id, agsx_error_t *err) {
  if (written(ex, path))
    return 0;
  enum agsx_compression comp;
  if (agsx_layer_media_type_compression(layer->media_type, &comp, err) < 0)
    return -1;
  _cleanup_close_ int blob = agsx_store_open_blob(ex->store, layer->digest, err);
  if (blob < 0)
    return -1;
  if (comp == AGSX_COMPRESSION_NONE)
    return tar_fd(ex, path, blob, layer->size, diff_id, err);
  _cleanup_close_ int tmp = openat(ex->store->tmpfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (tmp < 0)
    return agsx_error_set(err, errno, "create a temporary file in the store");
  char got[AGSX_DIGEST_LEN];
  uint64_t size;
  if (agsx_layer_decompress_fd(blob, comp, tmp, NULL, got, &size, err) < 0)
    return agsx_error_wrap(err, "layer `%s`", layer->digest);
  if (strcmp(got, diff_id) != 0)
    return agsx_error_set(err, 0,
                          "layer `%s`: uncompressed content has digest `%s`, the image config "
                          "says `%s`",
                          layer->digest, got, diff_id);
  if (lseek(tmp, 0, SEEK_SET) < 0)
    return agsx_error_set(err, errno, "rewind the uncompressed layer");
  return tar_fd(ex, path, tmp, (int64_t)size, NULL, err);
}

static int write_docker(struct export *ex, agsx_error_t *err) {
  size_t mlen;
  _cleanup_free_ char *manifest = docker_manifest(ex, &mlen);
  if (tar_mem(ex, "manifest.json", manifest, mlen, err) < 0)
    return -1;
  for (size_t i = 0; i < ex->n_imgs; i++) {
    const struct image *img = &ex->imgs[i];
    _cleanup_free_ char *cp = config_path(img->m.config.digest);
    if (tar_blob(ex, cp, &img->m.config, err) < 0)
      return -1;
    for (size_t l = 0; l < img->m.n_layers; l++) {
      _cleanup_free_ char *lp = layer_path(img->c.diff_ids[l]);
      if (tar_layer(ex, lp, &img->m.layers[l], img->c.diff_ids[l], err) < 0)
        return -1;
    }
  }
  return 0;
}

/* ---- entry points ------------------------------------------------------------------------------- */

int agsx_export_fd(struct agsx_store *s, char *const *names, size_t n,
                   enum agsx_export_format format, int fd, agsx_error_t *err) {
  if (n == 0)
    return agsx_error_set(err, 0, "no image to save");
  _cleanup_(export_clear) struct export ex = {.store = s};
  for (size_t i = 0; i < n; i++)
    if (add_image(&ex, names[i], err) < 0)
      return -1;
  ex.buf = xmalloc(BUF_SIZE);
  ex.a = archive_write_new();
  if (ex.a == NULL)
    abort();
  /* pax: no limit on names or sizes; "restricted" writes plain ustar
   * headers when they suffice, which every reader takes. */
  /* No padding of the last block, which libarchive adds on its own to
   * pipes and to fd 1 only: the same bytes wherever they go. */
  if (archive_write_set_format_pax_restricted(ex.a) != ARCHIVE_OK ||
      archive_write_set_bytes_in_last_block(ex.a, 1) != ARCHIVE_OK ||
      archive_write_open_fd(ex.a, fd) != ARCHIVE_OK)
    return tar_fail(ex.a, "archive", err);
  int r = format == AGSX_EXPORT_DOCKER_ARCHIVE ? write_docker(&ex, err) : write_oci(&ex, err);
  if (r == 0 && archive_write_close(ex.a) != ARCHIVE_OK)
    return tar_fail(ex.a, "archive", err);
  return r;
}

static char *temp_name(const char *base) {
  return xasprintf(".%s.agsx-%d-%lx", base, getpid(), (long)agsx_mono_ns());
}

/* The file the archive is written to: unnamed (O_TMPFILE), so that a
 * failed or killed save leaves nothing; on a file system without O_TMPFILE
 * (NFS; EISDIR from kernels before 3.11) a dot name beside BASE, which
 * RET_NAME returns and only a kill can leave behind. */
static int open_out(int dirfd, const char *base, char **ret_name, agsx_error_t *err) {
  *ret_name = NULL;
  int fd = openat(dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
  if (fd >= 0)
    return fd;
  if (errno != EOPNOTSUPP && errno != EISDIR)
    return agsx_error_set(err, errno, "create a temporary file");
  _cleanup_free_ char *name = temp_name(base);
  fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0)
    return agsx_error_set(err, errno, "create `%s`", name);
  *ret_name = steal_ptr(&name);
  return fd;
}

/* Gives the complete file FD (unnamed, or named NAME) the name BASE in
 * DIRFD, replacing what is there in one rename. */
static int publish(int fd, const char *name, int dirfd, const char *base, agsx_error_t *err) {
  _cleanup_free_ char *linked = NULL;
  if (name == NULL) {
    linked = temp_name(base);
    _cleanup_free_ char *proc = xasprintf("/proc/self/fd/%d", fd);
    /* AT_EMPTY_PATH would need CAP_DAC_READ_SEARCH; the magic link does not. */
    if (linkat(AT_FDCWD, proc, dirfd, linked, AT_SYMLINK_FOLLOW) < 0)
      return agsx_error_set(err, errno, "link the archive into place");
    name = linked;
  }
  if (renameat(dirfd, name, dirfd, base) < 0) {
    agsx_error_set(err, errno, "rename the archive into place");
    if (linked)
      unlinkat(dirfd, linked, 0);
    return -1;
  }
  if (fsync(dirfd) < 0)
    return agsx_error_set(err, errno, "fsync the archive's directory");
  return 0;
}

static int write_out(struct agsx_store *s, char *const *names, size_t n,
                     enum agsx_export_format format, int dirfd, const char *base, const char *path,
                     agsx_error_t *err) {
  _cleanup_free_ char *name = NULL;
  _cleanup_close_ int fd = open_out(dirfd, base, &name, err);
  if (fd < 0)
    return agsx_error_wrap(err, "`%s`", path);
  int r = agsx_export_fd(s, names, n, format, fd, err);
  if (r == 0 && fsync(fd) < 0)
    r = agsx_error_set(err, errno, "write `%s`", path);
  if (r == 0 && publish(fd, name, dirfd, base, err) < 0)
    r = agsx_error_wrap(err, "`%s`", path);
  if (r < 0 && name)
    unlinkat(dirfd, name, 0);
  return r;
}

int agsx_export_file(struct agsx_store *s, char *const *names, size_t n,
                     enum agsx_export_format format, const char *path, agsx_error_t *err) {
  _cleanup_free_ char *copy = xstrdup(path);
  size_t len = strlen(copy);
  while (len > 1 && copy[len - 1] == '/')
    copy[--len] = '\0';
  char *slash = strrchr(copy, '/');
  const char *base = slash ? slash + 1 : copy;
  const char *dir = slash ? (slash == copy ? "/" : copy) : ".";
  if (slash)
    *slash = '\0';
  if (*base == '\0' || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
    return agsx_error_set(err, 0, "`%s` is not a file name", path);
  _cleanup_close_ int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0)
    return agsx_error_set(err, errno, "`%s`", path);
  struct stat st;
  if (fstatat(dirfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode))
    return agsx_error_set(err, 0, "`%s` exists and is not a regular file", path);
  return write_out(s, names, n, format, dirfd, base, path, err);
}
