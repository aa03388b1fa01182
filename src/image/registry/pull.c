/* agsx — registry: pull: manifests, small blobs and parallel layer downloads into
 * the store. */
#include "config.h"

#include "image/registry/registry-internal.h"

#include "image/image.h"
#include "image/store.h"
#include "util/json.h"

#include <ctype.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/file.h>
#include <time.h>

/* ---- manifests ------------------------------------------------------------------------------- */

#define ACCEPT_MANIFESTS                                                                           \
  AGSX_MT_OCI_INDEX ", " AGSX_MT_OCI_MANIFEST ", " AGSX_MT_DOCKER_LIST ","                         \
                    " " AGSX_MT_DOCKER_MANIFEST

/* Fetches manifest REFERENCE (tag or digest), verified against EXPECT
 * (digest, or NULL for a tag) and SIZE (< 0: unknown). */
static int get_manifest(struct registry *r, const char *reference, const char *expect, int64_t size,
                        char **ret_buf, size_t *ret_len, char **ret_mt,
                        char ret_digest[AGSX_DIGEST_LEN], agsx_error_t *err) {
  _cleanup_free_ char *path = xasprintf("/v2/%s/manifests/%s", r->path, reference);
  struct xfer x;
  int st = agsx_registry_api_get(r, path, ACCEPT_MANIFESTS, AGSX_IMAGE_JSON_MAX, &x, err);
  if (st < 0)
    return -1;
  int rc = 0;
  if (st == 404)
    rc = agsx_error_set(err, 0, "manifest `%s` not found in `%s`", reference, r->path);
  else if (st != 200)
    rc = agsx_error_set(err, 0, "manifest `%s`: HTTP %d", reference, st);
  else if (x.buf == NULL)
    rc = agsx_error_set(err, 0, "manifest `%s`: empty response", reference);
  if (rc < 0) {
    agsx_registry_xfer_clear(&x);
    return -1;
  }
  agsx_sha256_buf(x.buf, x.len, ret_digest);
  if (expect && strcmp(expect, ret_digest) != 0)
    rc = agsx_error_set(err, 0, "manifest `%s` is corrupt (content has digest `%s`)", expect,
                        ret_digest);
  else if (size >= 0 && (int64_t)x.len != size)
    rc = agsx_error_set(err, 0, "manifest `%s` has %zu bytes, expected %lld", reference, x.len,
                        (long long)size);
  /* The media type: the document's own, else the Content-Type. */
  _cleanup_json_ yajl_val v =
      rc == 0 ? agsx_json_parse(x.buf, x.len, AGSX_IMAGE_JSON_MAX, err) : NULL;
  const char *mt = v ? agsx_json_get_string(v, "mediaType") : NULL;
  if (rc == 0 && v == NULL)
    rc = agsx_error_wrap(err, "manifest `%s`", reference);
  if (rc == 0 && mt == NULL && x.content_type)
    mt = x.content_type;
  if (rc == 0 && mt == NULL)
    rc = agsx_error_set(err, 0, "manifest `%s` has no media type", reference);
  if (rc == 0) {
    *ret_mt = xstrndup(mt, strcspn(mt, "; "));
    *ret_len = x.len;
    *ret_buf = steal_ptr(&x.buf);
  }
  agsx_registry_xfer_clear(&x);
  return rc;
}

/* ---- blobs ----------------------------------------------------------------------------------- */

static int get_small_blob(struct registry *r, const struct agsx_descriptor *d, char **ret_buf,
                          size_t *ret_len, agsx_error_t *err) {
  if (d->size > (int64_t)AGSX_IMAGE_JSON_MAX)
    return agsx_error_set(err, 0, "blob `%s`: %lld bytes is too large", d->digest,
                          (long long)d->size);
  _cleanup_free_ char *path = xasprintf("/v2/%s/blobs/%s", r->path, d->digest);
  struct xfer x;
  int st = agsx_registry_api_get(r, path, NULL, AGSX_IMAGE_JSON_MAX, &x, err);
  if (st < 0)
    return -1;
  int rc = 0;
  if (st != 200)
    rc = agsx_error_set(err, 0, "blob `%s`: HTTP %d", d->digest, st);
  char got[AGSX_DIGEST_LEN];
  agsx_sha256_buf(x.buf ? x.buf : "", x.len, got);
  if (rc == 0 && ((int64_t)x.len != d->size || strcmp(got, d->digest) != 0))
    rc = agsx_error_set(err, 0, "blob `%s` is corrupt (%zu bytes with digest `%s`)", d->digest,
                        x.len, got);
  if (rc == 0) {
    *ret_buf = x.buf ? steal_ptr(&x.buf) : xstrdup("");
    *ret_len = x.len;
  }
  agsx_registry_xfer_clear(&x);
  return rc;
}

/* ---- the pull -------------------------------------------------------------------------------- */

struct pull {
  struct agsx_store *store;
  struct registry reg;
  const struct agsx_pull_opts *o;
  int workfd, partialfd;
  struct agsx_pull_progress prog;
  int64_t last_report;
};

static void report(struct pull *p, bool force) {
  if (p->o == NULL || p->o->progress == NULL)
    return;
  int64_t now = agsx_mono_ns();
  if (!force && now - p->last_report < 200 * 1000000LL)
    return;
  p->last_report = now;
  p->o->progress(&p->prog, p->o->data);
}

/* Opens (and locks: a concurrent pull of the same blob waits) the partial
 * file of blob D. The lock holder may have moved the file on meanwhile:
 * then the name is opened again. */
static int open_partial(struct pull *p, const struct agsx_descriptor *d, int64_t *ret_have,
                        agsx_error_t *err) {
  const char *hex = agsx_digest_hex(d->digest);
  for (int tries = 0;; tries++) {
    _cleanup_close_ int fd =
        openat(p->partialfd, hex, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
      return agsx_error_set(err, errno, "partial blob `%s`", d->digest);
    if (flock(fd, LOCK_EX) < 0)
      return agsx_error_set(err, errno, "lock partial blob `%s`", d->digest);
    struct stat st, now;
    if (fstat(fd, &st) < 0)
      return agsx_error_set(err, errno, "partial blob `%s`", d->digest);
    if (fstatat(p->partialfd, hex, &now, AT_SYMLINK_NOFOLLOW) < 0 || now.st_ino != st.st_ino ||
        now.st_dev != st.st_dev) {
      if (tries < 8)
        continue;
      return agsx_error_set(err, 0, "partial blob `%s` keeps changing", d->digest);
    }
    if (!S_ISREG(st.st_mode) || st.st_nlink != 1)
      return agsx_error_set(err, 0, "partial blob `%s` is not a plain file", d->digest);
    if (st.st_size > d->size) {
      if (ftruncate(fd, 0) < 0)
        return agsx_error_set(err, errno, "partial blob `%s`", d->digest);
      st.st_size = 0;
    }
    *ret_have = st.st_size;
    return steal_fd(&fd);
  }
}

/* Moves a downloaded blob from partial/ into the work dir, which verifies
 * its digest and size; a bad one is deleted, so nothing of it stays and
 * the next pull fetches it afresh. */
static int verify_blob(struct pull *p, const struct agsx_descriptor *d, agsx_error_t *err) {
  const char *hex = agsx_digest_hex(d->digest);
  if (agsx_store_stage_blob_move(p->store, p->workfd, p->partialfd, hex, d->digest, d->size, err) ==
      0)
    return 0;
  unlinkat(p->partialfd, hex, 0);
  return -1;
}

static int launch_blob(struct pull *p, CURLM *m, struct xfer *x, agsx_error_t *err) {
  if (agsx_registry_xfer_setup(x, &p->reg, NULL, err) < 0)
    return -1;
  agsx_curl.easy_setopt(x->h, CURLOPT_WRITEFUNCTION, agsx_registry_on_data_file);
  agsx_curl.easy_setopt(x->h, CURLOPT_WRITEDATA, x);
  agsx_curl.easy_setopt(x->h, CURLOPT_PRIVATE, x);
  if (x->offset > 0) {
    char range[64];
    snprintf(range, sizeof(range), "%lld-", (long long)x->offset);
    agsx_curl.easy_setopt(x->h, CURLOPT_RANGE, range);
    agsx_debug("resuming blob %s at byte %lld", x->desc->digest, (long long)x->offset);
  }
  CURLMcode mc = agsx_curl.multi_add_handle(m, x->h);
  if (mc != CURLM_OK)
    return agsx_error_set(err, 0, "curl: %s", agsx_curl.multi_strerror(mc));
  return 0;
}

static int start_blob(struct pull *p, CURLM *m, struct xfer *x, const struct agsx_descriptor *d,
                      agsx_error_t *err) {
  _cleanup_free_ char *url =
      xasprintf("%s://%s/v2/%s/blobs/%s", p->reg.scheme, p->reg.host, p->reg.path, d->digest);
  if (agsx_registry_xfer_begin(x, url, false, err) < 0)
    return -1;
  return launch_blob(p, m, x, err);
}

static int no_space_error(struct pull *p, struct xfer *x, agsx_error_t *err) {
  if (agsx_store_check_space(p->store, 0, err) < 0)
    return agsx_error_wrap(err, "blob `%s`", x->desc->digest);
  return agsx_error_set(err, 0, "blob `%s`: the image store is running out of space",
                        x->desc->digest);
}

static int finish_blob(struct pull *p, struct xfer *x, CURLcode c, agsx_error_t *err) {
  const char *dg = x->desc->digest;
  if (x->too_big)
    return agsx_error_set(err, 0, "blob `%s`: the registry sent more than its %lld bytes", dg,
                          (long long)x->size);
  if (x->no_space)
    return no_space_error(p, x, err);
  if (x->bad_range)
    return agsx_error_set(err, 0, "blob `%s`: the registry answered a range request wrongly", dg);
  if (x->bad_status || (c == CURLE_OK && !x->started)) {
    long code = x->status;
    if (code == 0)
      agsx_curl.easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &code);
    /* An empty body is right only when nothing was missing. */
    bool complete = x->offset == x->size && (code == 200 || code == 206 || code == 416);
    if (!complete)
      return agsx_error_set(err, 0, "blob `%s`: HTTP %ld", dg, code);
  } else if (c != CURLE_OK) {
    return agsx_registry_curl_error(x, c, err);
  }
  if (x->offset != x->size)
    return agsx_error_set(err, 0, "blob `%s`: the registry sent %lld of %lld bytes", dg,
                          (long long)x->offset, (long long)x->size);
  (void)p;
  return 0;
}

/* An index into the manifest's layers with its digest beside it, so the
 * comparison needs no context (qsort has none; a static one would be
 * shared by concurrent pulls in one process). */
struct layer_ref {
  const char *digest;
  size_t i;
};

static int cmp_layer_digest(const void *a, const void *b) {
  const struct layer_ref *x = a, *y = b;
  int c = strcmp(x->digest, y->digest);
  return c ? c : (x->i > y->i) - (x->i < y->i);
}

/* Downloads the blobs of LAYERS not yet in the store into partial/, up to
 * AGSX_REGISTRY_PARALLEL at a time. */
/* The layers of one pull: a transfer each, and those still to download. */
struct downloads {
  struct xfer *xs;
  size_t n;
  size_t *todo, ntodo;
};

static void layer_skipped(struct pull *p, struct xfer *x) {
  p->prog.layers_skipped++;
  p->prog.layers_done++;
  x->done = true;
}

/* Layer I (the K-th in digest order): skipped when the store has it (or it
 * is a duplicate), verified when its partial file is complete, else queued. */
static int plan_layer(struct pull *p, struct downloads *dl, size_t i, bool dup, agsx_error_t *err) {
  struct xfer *x = &dl->xs[i];
  const struct agsx_descriptor *d = x->desc;
  if (dup || agsx_store_has_blob(p->store, d->digest)) {
    layer_skipped(p, x);
    return 0;
  }
  x->size = d->size;
  x->fd = open_partial(p, d, &x->offset, err);
  if (x->fd < 0)
    return -1;
  if (agsx_store_has_blob(p->store, d->digest)) {
    /* A concurrent pull committed it while we waited for the lock. */
    if (x->offset == 0)
      unlinkat(p->partialfd, agsx_digest_hex(d->digest), 0);
    agsx_closep(&x->fd);
    layer_skipped(p, x);
    return 0;
  }
  p->prog.bytes_total += d->size;
  p->prog.bytes_done += x->offset;
  if (x->offset == d->size) {
    x->done = true;
    p->prog.layers_done++;
    return verify_blob(p, d, err);
  }
  dl->todo[dl->ntodo++] = i;
  return 0;
}

/* Partial files are locked in digest order, so two pulls sharing layers
 * in different orders cannot wait on each other. */
static int plan_layers(struct pull *p, struct downloads *dl, const struct agsx_manifest *mf,
                       agsx_error_t *err) {
  size_t n = dl->n;
  _cleanup_free_ struct layer_ref *order = xmalloc((n + 1) * sizeof(*order));
  for (size_t i = 0; i < n; i++)
    order[i] = (struct layer_ref){mf->layers[i].digest, i};
  qsort(order, n, sizeof(*order), cmp_layer_digest);
  for (size_t k = 0; k < n; k++) {
    bool dup = k > 0 && strcmp(order[k - 1].digest, order[k].digest) == 0;
    if (plan_layer(p, dl, order[k].i, dup, err) < 0)
      return -1;
  }
  /* What is still to come must fit, with the reserve kept free. */
  return agsx_store_check_space(p->store, (uint64_t)(p->prog.bytes_total - p->prog.bytes_done),
                                err);
}

/* The transfers that ended: a redirect starts its next hop, the others are
 * finished and verified. */
static int reap_transfers(struct pull *p, CURLM *m, size_t *running_n, agsx_error_t *err) {
  CURLMsg *msg;
  int left, rc = 0;
  while (rc == 0 && (msg = agsx_curl.multi_info_read(m, &left)) != NULL) {
    if (msg->msg != CURLMSG_DONE)
      continue;
    struct xfer *x = NULL;
    agsx_curl.easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
    CURLcode c = msg->data.result;
    agsx_curl.multi_remove_handle(m, x->h);
    int rd = c == CURLE_OK && !x->started ? agsx_registry_xfer_redirect(x, err) : 0;
    if (rd > 0) {
      agsx_registry_xfer_reset_hop(x);
      rc = launch_blob(p, m, x, err);
      continue;
    }
    (*running_n)--;
    rc = rd < 0 ? -1 : finish_blob(p, x, c, err);
    if (rc == 0)
      rc = verify_blob(p, x->desc, err);
    x->done = true;
    p->prog.layers_done++;
  }
  return rc;
}

/* The queued layers, AGSX_REGISTRY_PARALLEL at a time, in one curl multi. */
static int run_transfers(struct pull *p, struct downloads *dl, CURLM *m, agsx_error_t *err) {
  size_t next = 0, running_n = 0;
  int rc = 0;
  while (rc == 0 && (next < dl->ntodo || running_n > 0)) {
    while (next < dl->ntodo && running_n < AGSX_REGISTRY_PARALLEL && rc == 0) {
      struct xfer *x = &dl->xs[dl->todo[next++]];
      rc = start_blob(p, m, x, x->desc, err);
      running_n++;
    }
    if (rc < 0)
      break;
    int still;
    CURLMcode mc = agsx_curl.multi_perform(m, &still);
    if (mc == CURLM_OK)
      mc = agsx_curl.multi_poll(m, NULL, 0, 200, NULL);
    if (mc != CURLM_OK)
      return agsx_error_set(err, 0, "curl: %s", agsx_curl.multi_strerror(mc));
    rc = reap_transfers(p, m, &running_n, err);
    int64_t live = 0;
    for (size_t i = 0; i < dl->n; i++)
      if (dl->xs[i].fd >= 0)
        live += dl->xs[i].offset;
    p->prog.bytes_done = live;
    report(p, false);
  }
  return rc;
}

static int download_layers(struct pull *p, const struct agsx_manifest *mf, agsx_error_t *err) {
  size_t n = mf->n_layers;
  struct downloads dl = {
      .xs = xzalloc(n * sizeof(*dl.xs)), .n = n, .todo = xmalloc((n + 1) * sizeof(*dl.todo))};
  for (size_t i = 0; i < n; i++) {
    dl.xs[i].fd = -1;
    dl.xs[i].desc = &mf->layers[i];
    dl.xs[i].space_reserve = p->store->reserve;
  }
  p->prog.layers_total = n;
  int rc = plan_layers(p, &dl, mf, err);
  CURLM *m = rc == 0 ? agsx_curl.multi_init() : NULL;
  if (rc == 0 && m == NULL)
    rc = agsx_error_set(err, ENOMEM, "curl: cannot make a multi handle");
  if (rc == 0)
    rc = run_transfers(p, &dl, m, err);
  if (m) {
    for (size_t i = 0; i < n; i++)
      if (dl.xs[i].h)
        agsx_curl.multi_remove_handle(m, dl.xs[i].h);
    agsx_curl.multi_cleanup(m);
  }
  for (size_t i = 0; i < n; i++) {
    agsx_registry_xfer_clear(&dl.xs[i]);
    agsx_closep(&dl.xs[i].fd);
  }
  if (rc == 0)
    report(p, true);
  free(dl.xs);
  free(dl.todo);
  return rc;
}

/* Unpacks each layer, checking its diff_id. */
static int stage_layers(struct pull *p, const struct agsx_manifest *mf,
                        const struct agsx_image_config *c, agsx_error_t *err) {
  for (size_t i = 0; i < mf->n_layers; i++)
    if (agsx_store_stage_layer(p->store, p->workfd, &mf->layers[i], c->diff_ids[i], err) < 0)
      return -1;
  return 0;
}

/* The sizes the manifest declares are refused before anything is
 * downloaded when they exceed the image budget (each, and together). */
static int check_declared_sizes(struct pull *p, const struct agsx_manifest *mf, agsx_error_t *err) {
  uint64_t max = p->store->budget_max, total = (uint64_t)mf->config.size;
  for (size_t i = 0; i < mf->n_layers; i++) {
    uint64_t sz = (uint64_t)mf->layers[i].size;
    if (sz > max || total + sz > max) {
      _cleanup_free_ char *m = agsx_format_size(max);
      return agsx_error_set(err, 0,
                            "layer `%s`: the manifest declares more than the image budget of %s "
                            "(max-image-size in agsx.conf, AGSX_MAX_IMAGE_SIZE)",
                            mf->layers[i].digest, m);
    }
    total += sz;
  }
  return 0;
}

static int pull_image(struct pull *p, const char *mbuf, size_t mlen, agsx_error_t *err) {
  struct agsx_manifest mf;
  if (agsx_manifest_parse(mbuf, mlen, &mf, err) < 0)
    return -1;
  _cleanup_free_ char *cbuf = NULL;
  size_t clen;
  struct agsx_image_config c = {0};
  bool have_c = false;
  char cdigest[AGSX_DIGEST_LEN], mdigest[AGSX_DIGEST_LEN];
  int rc =
      agsx_store_has_blob(p->store, mf.config.digest)
          ? agsx_store_read_blob(p->store, mf.config.digest, AGSX_IMAGE_JSON_MAX, &cbuf, &clen, err)
          : get_small_blob(&p->reg, &mf.config, &cbuf, &clen, err);
  if (rc < 0)
    agsx_error_wrap(err, "config");
  if (rc == 0 && (rc = agsx_image_config_parse(cbuf, clen, &c, err)) == 0)
    have_c = true;
  if (rc == 0)
    rc = agsx_image_config_check_platform(&c, err);
  if (rc == 0 && c.n_diff_ids != mf.n_layers)
    rc = agsx_error_set(err, 0, "the manifest has %zu layers but the config %zu diff_ids",
                        mf.n_layers, c.n_diff_ids);
  if (rc == 0)
    rc = check_declared_sizes(p, &mf, err);
  if (rc == 0)
    rc = download_layers(p, &mf, err);
  if (rc == 0)
    rc = stage_layers(p, &mf, &c, err);
  if (rc == 0)
    rc = agsx_store_stage_blob_mem(p->store, p->workfd, cbuf, clen, cdigest, err);
  if (rc == 0)
    rc = agsx_store_stage_blob_mem(p->store, p->workfd, mbuf, mlen, mdigest, err);
  if (have_c)
    agsx_image_config_clear(&c);
  agsx_manifest_clear(&mf);
  return rc;
}

/* Resolves REFERENCE to an image manifest, through indexes. */
static int resolve(struct pull *p, const struct agsx_image_ref *ref, char **ret_buf,
                   size_t *ret_len, char **ret_mt, struct agsx_pull_result *res,
                   agsx_error_t *err) {
  const char *reference = ref->digest ? ref->digest : ref->tag;
  if (get_manifest(&p->reg, reference, ref->digest, -1, ret_buf, ret_len, ret_mt, res->digest,
                   err) < 0)
    return -1;
  memcpy(res->manifest_digest, res->digest, AGSX_DIGEST_LEN);
  for (int depth = 0; agsx_media_type_is_index(*ret_mt); depth++) {
    if (depth >= NESTING_MAX)
      return agsx_error_set(err, 0, "image indexes nested too deeply");
    struct agsx_index ix;
    if (agsx_index_parse(*ret_buf, *ret_len, &ix, err) < 0)
      return -1;
    int sel = agsx_index_select_platform(&ix, err);
    struct agsx_descriptor d = {0};
    if (sel >= 0) {
      d = ix.manifests[sel];
      ix.manifests[sel] = (struct agsx_descriptor){0};
    }
    agsx_index_clear(&ix);
    if (sel < 0)
      return -1;
    if (d.size > (int64_t)AGSX_IMAGE_JSON_MAX) {
      agsx_descriptor_clear(&d);
      return agsx_error_set(err, 0, "the index declares a manifest larger than %u bytes",
                            (unsigned)AGSX_IMAGE_JSON_MAX);
    }
    free(*ret_buf);
    free(*ret_mt);
    *ret_buf = *ret_mt = NULL;
    int r = get_manifest(&p->reg, d.digest, d.digest, d.size, ret_buf, ret_len, ret_mt,
                         res->manifest_digest, err);
    agsx_descriptor_clear(&d);
    if (r < 0)
      return -1;
  }
  if (!agsx_media_type_is_manifest(*ret_mt))
    return agsx_error_set(err, 0, "unsupported manifest media type `%.100s`", *ret_mt);
  return 0;
}

int agsx_pull_policy_parse(const char *s, enum agsx_pull_policy *ret, agsx_error_t *err) {
  static const char *const names[] = {"missing", "always", "never"};
  for (int i = 0; i < 3; i++)
    if (strcmp(s, names[i]) == 0) {
      *ret = (enum agsx_pull_policy)i;
      return 0;
    }
  return agsx_error_set_quiet(err, EINVAL, "invalid pull policy `%s` (missing, always or never)",
                              s),
         -1;
}

int agsx_pull_policy_default(enum agsx_pull_policy *ret, agsx_error_t *err) {
  *ret = AGSX_PULL_MISSING;
  const char *e = getenv("AGSX_PULL");
  if (e && *e && agsx_pull_policy_parse(e, ret, err) < 0)
    return agsx_error_wrap(err, "AGSX_PULL");
  return 0;
}

void agsx_pull_result_clear(struct agsx_pull_result *r) {
  free(r->name);
  free(r->ref);
  memset(r, 0, sizeof(*r));
}

/* Partial downloads nobody resumed for a week are dropped (a pull holding
 * one has it locked). */
#define PARTIAL_MAX_AGE_SEC (7 * 86400)
static void clean_partials(int dirfd) {
  _cleanup_dir_ DIR *d = agsx_dir_stream(dirfd);
  if (d == NULL)
    return;
  time_t now = time(NULL);
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    struct stat st;
    if (de->d_name[0] == '.' || fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        now - st.st_mtime < PARTIAL_MAX_AGE_SEC)
      continue;
    _cleanup_close_ int fd =
        openat(dirfd, de->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0)
      unlinkat(dirfd, de->d_name, 0);
  }
}

static int do_pull(struct pull *p, const struct agsx_image_ref *ref, struct agsx_pull_result *res,
                   agsx_error_t *err) {
  if (agsx_registry_ping(&p->reg, err) < 0)
    return -1;
  _cleanup_free_ char *mbuf = NULL, *mt = NULL;
  size_t mlen;
  if (resolve(p, ref, &mbuf, &mlen, &mt, res, err) < 0)
    return -1;
  if (mkdirat(p->store->rootfd, PARTIAL_DIR, 0700) < 0 && errno != EEXIST)
    return agsx_error_set(err, errno, "create `%s`", PARTIAL_DIR);
  p->partialfd =
      openat(p->store->rootfd, PARTIAL_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (p->partialfd < 0)
    return agsx_error_set(err, errno, "open `%s`", PARTIAL_DIR);
  clean_partials(p->partialfd);
  _cleanup_free_ char *work = NULL;
  p->workfd = agsx_store_mkwork(p->store, "pull", &work, err);
  if (p->workfd < 0)
    return -1;
  int rc = pull_image(p, mbuf, mlen, err);
  if (rc == 0)
    rc = agsx_store_commit(p->store, p->workfd, err);
  struct agsx_descriptor md = {.media_type = mt, .size = (int64_t)mlen};
  memcpy(md.digest, res->manifest_digest, AGSX_DIGEST_LEN);
  if (rc == 0)
    rc = agsx_store_tag(p->store, ref->familiar, &md, err);
  agsx_error_t cerr = NULL;
  if (agsx_rm_rf_at(p->store->tmpfd, work, &cerr) < 0) {
    agsx_warn("%s", cerr->msg);
    agsx_error_free(&cerr);
  }
  return rc;
}

int agsx_pull(const char *root, const char *refstr, const struct agsx_pull_opts *o,
              struct agsx_pull_result *ret, agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  struct agsx_image_ref ref;
  if (agsx_image_ref_parse(refstr, &ref, err) < 0)
    return -1;
  struct pull p = {.o = o, .workfd = -1, .partialfd = -1};
  int rc = agsx_curl_load(err);
  if (rc == 0)
    rc = agsx_registry_setup(&p.reg, &ref, o, err);
  if (rc == 0)
    rc = agsx_store_open(root, true, &p.store, err);
  if (rc == 0) {
    agsx_error_t cerr = NULL;
    if (agsx_store_clean_tmp(p.store, &cerr) < 0) {
      agsx_warn("%s", cerr->msg);
      agsx_error_free(&cerr);
    }
    rc = do_pull(&p, &ref, ret, err);
  }
  if (rc == 0) {
    ret->ref = xstrdup(ref.familiar);
    ret->name = ref.digest ? xasprintf("%s/%s@%s", ref.domain, ref.path, ref.digest)
                           : xasprintf("%s/%s:%s", ref.domain, ref.path, ref.tag);
  } else {
    agsx_error_wrap(err, "pull `%s`", refstr);
  }
  agsx_closep(&p.workfd);
  agsx_closep(&p.partialfd);
  agsx_store_free(p.store);
  agsx_registry_clear(&p.reg);
  agsx_image_ref_clear(&ref);
  return rc;
}
