/* agsx — registry: push: blobs (HEAD, then upload), then the manifest. */
#include "config.h"

#include "image/registry/registry-internal.h"

#include "image/image.h"
#include "image/store.h"
#include "util/json.h"

#include <ctype.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

/* ---- push ------------------------------------------------------------------------------------ */

void agsx_push_result_clear(struct agsx_push_result *r) {
  free(r->name);
  memset(r, 0, sizeof(*r));
}

/* HEAD the blob: 1 when the registry has it, 0 when not. */
static int blob_exists(struct registry *r, const struct agsx_descriptor *d, bool *ret,
                       agsx_error_t *err) {
  _cleanup_free_ char *url =
      xasprintf("%s://%s/v2/%s/blobs/%s", r->scheme, r->host, r->path, d->digest);
  struct req q = {.method = "HEAD", .max = 0, .body_fd = -1};
  struct xfer x;
  int st = agsx_registry_api_req(r, url, &q, &x, err);
  if (st < 0)
    return -1;
  agsx_registry_xfer_clear(&x);
  if (st != 200 && st != 404)
    return agsx_error_set(err, 0, "blob `%s`: HTTP %d to HEAD", d->digest, st);
  *ret = st == 200;
  return 0;
}

/* Where the registry's answer to a POST/PATCH says the upload goes on. */
static int upload_location(struct registry *r, struct xfer *x, char **ret, bool *ret_foreign,
                           agsx_error_t *err) {
  if (x->location == NULL)
    return agsx_error_set(err, 0, "upload: HTTP %ld without a Location", x->status);
  if (agsx_registry_resolve_location(x->url, x->location, ret, err) < 0)
    return agsx_error_wrap(err, "upload");
  char mine[AGSX_REGISTRY_ORIGIN_MAX], theirs[AGSX_REGISTRY_ORIGIN_MAX];
  _cleanup_free_ char *base = xasprintf("%s://%s/", r->scheme, r->host);
  if (agsx_registry_url_origin(base, mine, err) < 0 ||
      agsx_registry_url_origin(*ret, theirs, err) < 0) {
    free(steal_ptr(ret));
    return agsx_error_wrap(err, "upload");
  }
  if (strcmp(r->scheme, "https") == 0 && !agsx_str_has_prefix(theirs, "https:")) {
    free(steal_ptr(ret));
    return agsx_error_set(err, 0, "upload: the registry sent it to plain http");
  }
  *ret_foreign = strcmp(mine, theirs) != 0;
  return 0;
}

/* A monolithic upload: POST for a session, PUT of the whole blob with its
 * digest (OCI distribution spec, "POST then PUT"). */
static int upload_blob(struct registry *r, int fd, const struct agsx_descriptor *d,
                       agsx_error_t *err) {
  _cleanup_free_ char *url = xasprintf("%s://%s/v2/%s/blobs/uploads/", r->scheme, r->host, r->path);
  struct req post = {.method = "POST", .max = 1u << 20, .body_fd = -1, .body = ""};
  struct xfer x;
  int st = agsx_registry_api_req(r, url, &post, &x, err);
  if (st < 0)
    return -1;
  _cleanup_free_ char *loc = NULL;
  bool foreign = false;
  int rc = st == 202 ? upload_location(r, &x, &loc, &foreign, err)
                     : agsx_error_set(err, 0, "start upload: HTTP %d", st);
  agsx_registry_xfer_clear(&x);
  if (rc < 0)
    return -1;
  _cleanup_free_ char *put =
      xasprintf("%s%sdigest=%s", loc, strchr(loc, '?') ? "&" : "?", d->digest);
  struct req q = {.method = "PUT",
                  .content_type = "application/octet-stream",
                  .body_fd = fd,
                  .body_len = (size_t)d->size,
                  .max = 1u << 20,
                  .no_credentials = foreign};
  st = agsx_registry_api_req(r, put, &q, &x, err);
  if (st < 0)
    return -1;
  agsx_registry_xfer_clear(&x);
  if (st != 201)
    return agsx_error_set(err, 0, "upload: HTTP %d", st);
  return 0;
}

static int push_blob(struct registry *r, struct agsx_store *s, const struct agsx_descriptor *d,
                     agsx_error_t *err) {
  bool have;
  if (blob_exists(r, d, &have, err) < 0)
    return agsx_error_wrap(err, "blob `%s`", d->digest);
  if (have) {
    agsx_debug("blob %s: already in the registry", d->digest);
    return 0;
  }
  _cleanup_close_ int fd = agsx_store_open_blob(s, d->digest, err);
  if (fd < 0)
    return -1;
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size != d->size)
    return agsx_error_set(err, 0, "blob `%s` in the store is not its %lld bytes", d->digest,
                          (long long)d->size);
  if (upload_blob(r, fd, d, err) < 0)
    return agsx_error_wrap(err, "blob `%s`", d->digest);
  return 0;
}

static int put_manifest(struct registry *r, const char *tag, const char *mt, const char *buf,
                        size_t len, const char *digest, agsx_error_t *err) {
  _cleanup_free_ char *url =
      xasprintf("%s://%s/v2/%s/manifests/%s", r->scheme, r->host, r->path, tag);
  struct req q = {.method = "PUT",
                  .content_type = mt,
                  .body = buf,
                  .body_len = len,
                  .body_fd = -1,
                  .max = 1u << 20};
  struct xfer x;
  int st = agsx_registry_api_req(r, url, &q, &x, err);
  if (st < 0)
    return -1;
  int rc = 0;
  if (st != 201 && st != 200)
    rc = agsx_error_set(err, 0, "manifest: HTTP %d%s%.200s", st, x.buf ? ": " : "",
                        x.buf ? x.buf : "");
  else if (x.content_digest && strcmp(x.content_digest, digest) != 0)
    rc = agsx_error_set(err, 0, "manifest: the registry stored digest `%.80s`, not `%s`",
                        x.content_digest, digest);
  agsx_registry_xfer_clear(&x);
  return rc;
}

/* The manifest of IMAGE in the store: bytes, media type, parsed. */
static int read_local_manifest(struct agsx_store *s, const struct agsx_store_image *img,
                               char **ret_buf, size_t *ret_len, char **ret_mt,
                               struct agsx_manifest *ret_m, agsx_error_t *err) {
  if (agsx_store_read_blob(s, img->manifest.digest, AGSX_IMAGE_JSON_MAX, ret_buf, ret_len, err) < 0)
    return -1;
  _cleanup_json_ yajl_val v = agsx_json_parse(*ret_buf, *ret_len, AGSX_IMAGE_JSON_MAX, err);
  if (v == NULL)
    return agsx_error_wrap(err, "manifest");
  const char *mt = agsx_json_get_string(v, "mediaType");
  if (mt == NULL)
    mt = img->manifest.media_type;
  if (mt == NULL || !agsx_media_type_is_manifest(mt))
    return agsx_error_set(err, 0, "manifest media type `%.100s` cannot be pushed", mt ? mt : "");
  if (agsx_manifest_parse(*ret_buf, *ret_len, ret_m, err) < 0)
    return -1;
  *ret_mt = xstrdup(mt);
  return 0;
}

static int do_push(struct registry *reg, struct agsx_store *s, const struct agsx_store_image *img,
                   const char *tag, struct agsx_push_result *ret, agsx_error_t *err) {
  _cleanup_free_ char *mbuf = NULL, *mt = NULL;
  size_t mlen;
  struct agsx_manifest m;
  if (read_local_manifest(s, img, &mbuf, &mlen, &mt, &m, err) < 0)
    return -1;
  int rc = agsx_registry_ping(reg, err);
  /* Layers first, the config last, then the manifest that names them. */
  for (size_t i = 0; rc == 0 && i < m.n_layers; i++)
    rc = push_blob(reg, s, &m.layers[i], err);
  if (rc == 0)
    rc = push_blob(reg, s, &m.config, err);
  if (rc == 0)
    rc = put_manifest(reg, tag, mt, mbuf, mlen, img->manifest.digest, err);
  if (rc == 0)
    memcpy(ret->digest, img->manifest.digest, AGSX_DIGEST_LEN);
  agsx_manifest_clear(&m);
  return rc;
}

int agsx_push(const char *root, const char *image, const char *dest, const struct agsx_push_opts *o,
              struct agsx_push_result *ret, agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  _cleanup_store_ struct agsx_store *s = NULL;
  struct agsx_store_image img = {0};
  struct agsx_image_ref ref = {0};
  struct registry reg = {.actions = "pull,push"};
  int rc = agsx_curl_load(err);
  if (rc == 0)
    rc = agsx_store_open(root, false, &s, err);
  if (rc == 0)
    rc = agsx_store_resolve(s, image, &img, err);
  if (rc == 0 && dest == NULL && (img.ref == NULL || strchr(img.ref, '@')))
    rc = agsx_error_set(err, 0, "image `%s` has no tag to push to: name a destination", image);
  if (rc == 0)
    rc = agsx_image_ref_parse(dest ? dest : img.ref, &ref, err);
  if (rc == 0 && ref.digest)
    rc = agsx_error_set(err, 0, "destination `%s` names a digest: push to a tag", dest);
  struct agsx_pull_opts po = {.authfile = o ? o->authfile : NULL, .insecure = o && o->insecure};
  if (rc == 0)
    rc = agsx_registry_setup(&reg, &ref, &po, err);
  if (rc == 0)
    rc = do_push(&reg, s, &img, ref.tag, ret, err);
  if (rc == 0)
    ret->name = xasprintf("%s/%s:%s", ref.domain, ref.path, ref.tag);
  else
    agsx_error_wrap(err, "push `%s`", image);
  free(img.ref);
  agsx_descriptor_clear(&img.manifest);
  agsx_image_ref_clear(&ref);
  agsx_registry_clear(&reg);
  return rc;
}
