/* agsx — build: the layer writer: a tar stream, gzipped and hashed twice (diff_id
 * and blob digest) on the way into the store. */
#include "config.h"

#include "image/build/build-internal.h"

#include "util/json.h"

#include <archive.h>
#include <archive_entry.h>
#include <ctype.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

/* ---- writing layers ---------------------------------------------------------------------------- */

static int lw_flush(struct lw *w, int flush) {
  do {
    w->z.next_out = w->out;
    w->z.avail_out = sizeof(w->out);
    int r = deflate(&w->z, flush);
    if (r == Z_STREAM_ERROR)
      return -1;
    size_t n = sizeof(w->out) - w->z.avail_out;
    if (n) {
      agsx_sha256_update(w->blob, w->out, n);
      if (agsx_write_all(w->fd, w->out, n) < 0)
        return -1;
      w->size += (int64_t)n;
    }
  } while (w->z.avail_out == 0);
  return 0;
}

static la_ssize_t lw_write(struct archive *a, void *data, const void *buf, size_t n) {
  struct lw *w = data;
  agsx_sha256_update(w->diff, buf, n);
  w->z.next_in = (unsigned char *)buf;
  w->z.avail_in = (uInt)n;
  if (lw_flush(w, Z_NO_FLUSH) < 0) {
    w->error = errno ? errno : EIO;
    archive_set_error(a, w->error, "write layer");
    return -1;
  }
  return (la_ssize_t)n;
}

void agsx_lw_free(struct lw *w) {
  if (w->a)
    archive_write_free(w->a);
  if (w->z_ok)
    deflateEnd(&w->z);
  agsx_sha256_free(w->diff);
  agsx_sha256_free(w->blob);
  agsx_closep(&w->fd);
  free(w->in);
  memset(w, 0, sizeof(*w));
  w->fd = -1;
}

int agsx_lw_open(struct build *b, struct lw *w, agsx_error_t *err) {
  memset(w, 0, sizeof(*w));
  w->fd = -1;
  if (b->cur->n_layers >= AGSX_IMAGE_MAX_LAYERS)
    return agsx_error_set(err, 0, "the image would have more than %d layers",
                          AGSX_IMAGE_MAX_LAYERS);
  unlinkat(b->workfd, "layer.tar.gz", 0);
  w->fd = openat(b->workfd, "layer.tar.gz", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (w->fd < 0)
    return agsx_error_set(err, errno, "create a layer in the work directory");
  /* gzip with no name and mtime 0: the same tar gives the same blob. */
  if (deflateInit2(&w->z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    return agsx_error_set(err, 0, "zlib: deflateInit2 failed");
  w->z_ok = true;
  w->in = xmalloc(LW_IN_SIZE);
  w->diff = agsx_sha256_new();
  w->blob = agsx_sha256_new();
  w->a = archive_write_new();
  if (archive_write_set_format_pax_restricted(w->a) != ARCHIVE_OK ||
      archive_write_add_filter_none(w->a) != ARCHIVE_OK ||
      archive_write_set_bytes_in_last_block(w->a, 1) != ARCHIVE_OK ||
      archive_write_open(w->a, w, NULL, lw_write, NULL) != ARCHIVE_OK)
    return agsx_error_set(err, 0, "libarchive: %s", archive_error_string(w->a));
  return 0;
}

/* A layer's ".wh.NAME" entry deletes NAME (OCI whiteouts, AUFS's
 * convention): a file of that name the sandbox, the context or RUN made
 * would turn into a deletion when the layer is unpacked, by agsx and by
 * every other tool. The format has no escape for such names (Docker and
 * containerd write them through as they are, and so unpack them as
 * deletions): refused, naming the path. */
static int check_name(const struct lentry *e, agsx_error_t *err) {
  const char *slash = strrchr(e->path, '/'), *base = slash ? slash + 1 : e->path;
  if (e->whiteout || strncmp(base, ".wh.", 4) != 0)
    return 0;
  return agsx_error_set_quiet(err, EINVAL,
                              "`/%s`: a file whose name starts with .wh. would be a deletion in an "
                              "image layer (an OCI whiteout): rename or remove it",
                              e->path);
}

int agsx_lw_add(struct lw *w, const struct lentry *e, agsx_error_t *err) {
  if (check_name(e, err) < 0)
    return -1;
  struct archive_entry *ae = archive_entry_new();
  archive_entry_set_pathname(ae, e->path);
  archive_entry_set_uid(ae, e->uid);
  archive_entry_set_gid(ae, e->gid);
  archive_entry_set_mtime(ae, e->mtime, 0);
  archive_entry_set_perm(ae, e->mode & 07777);
  if (e->hardlink) {
    archive_entry_set_filetype(ae, AE_IFREG);
    archive_entry_set_hardlink(ae, e->hardlink);
    archive_entry_set_size(ae, 0);
  } else if (S_ISDIR(e->mode)) {
    archive_entry_set_filetype(ae, AE_IFDIR);
  } else if (S_ISLNK(e->mode)) {
    archive_entry_set_filetype(ae, AE_IFLNK);
    archive_entry_set_symlink(ae, e->link);
  } else if (S_ISFIFO(e->mode)) {
    archive_entry_set_filetype(ae, AE_IFIFO);
  } else {
    archive_entry_set_filetype(ae, AE_IFREG);
    archive_entry_set_size(ae, e->fd >= 0 ? e->size : 0);
  }
  int r = archive_write_header(w->a, ae);
  archive_entry_free(ae);
  if (r != ARCHIVE_OK)
    return agsx_error_set(err, 0, "write layer entry `%s`: %s", e->path,
                          archive_error_string(w->a));
  if (!S_ISREG(e->mode) || e->hardlink || e->fd < 0)
    return 0;
  char *buf = w->in;
  int64_t left = e->size;
  while (left > 0) {
    ssize_t n = read(e->fd, buf, left < (int64_t)LW_IN_SIZE ? (size_t)left : LW_IN_SIZE);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return agsx_error_set(err, n < 0 ? errno : 0, "read `%s`%s", e->path,
                            n == 0 ? ": file shrank while being copied" : "");
    if (archive_write_data(w->a, buf, (size_t)n) != n)
      return agsx_error_set(err, 0, "write layer entry `%s`: %s", e->path,
                            archive_error_string(w->a));
    left -= n;
  }
  return 0;
}

/* Ends the tar and the gzip stream, stages the blob and unpacks it as a
 * layer of the work directory; appends it to the stage. */
int agsx_lw_commit(struct build *b, struct lw *w, struct stage *st, const char *created_by,
                   char ret_key_record[256], agsx_error_t *err) {
  if (archive_write_close(w->a) != ARCHIVE_OK)
    return agsx_error_set(err, w->error, "finish layer: %s", archive_error_string(w->a));
  w->z.next_in = NULL;
  w->z.avail_in = 0;
  if (lw_flush(w, Z_FINISH) < 0)
    return agsx_error_set(err, errno, "finish layer");
  agsx_closep(&w->fd);
  struct blayer l = {.size = w->size, .media_type = xstrdup(AGSX_MT_OCI_LAYER_GZIP)};
  agsx_sha256_final(w->diff, l.diff_id);
  agsx_sha256_final(w->blob, l.digest);
  struct agsx_descriptor d = {.media_type = l.media_type, .size = l.size};
  memcpy(d.digest, l.digest, AGSX_DIGEST_LEN);
  if (agsx_store_stage_blob_move(b->s, b->workfd, b->workfd, "layer.tar.gz", l.digest, l.size,
                                 err) < 0 ||
      agsx_store_stage_layer(b->s, b->workfd, &d, l.diff_id, err) < 0) {
    free(l.media_type);
    return -1;
  }
  unlinkat(b->workfd, "layer.tar.gz", 0);
  st->layers = xrealloc(st->layers, (st->n_layers + 1) * sizeof(*st->layers));
  st->layers[st->n_layers++] = l;
  agsx_build_history(st, created_by, false);
  if (ret_key_record)
    snprintf(ret_key_record, 256, "%s\n%s\n%" PRId64 "\n", l.diff_id, l.digest, l.size);
  b->res->new_layers++;
  return 0;
}
