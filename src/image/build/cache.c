/* agsx — build: the build cache: records keyed by the chain of steps so far. */
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

/* ---- the cache ------------------------------------------------------------------------------------ */

/* A record: "diff_id\ndigest\nsize\n". A hit needs the blob in the store;
 * the unpacked layer is made again when gc removed it. */
bool agsx_build_cache_hit(struct build *b, struct stage *st, const char *created_by) {
  if (b->o->no_cache || b->cachefd < 0)
    return false;
  _cleanup_free_ char *buf = NULL;
  size_t len;
  if (agsx_read_file_at(b->cachefd, agsx_digest_hex(st->chain), 512, &buf, &len, NULL) < 0)
    return false;
  char diff[AGSX_DIGEST_LEN], dig[AGSX_DIGEST_LEN];
  int64_t size;
  if (sscanf(buf, "%71s\n%71s\n%" SCNd64, diff, dig, &size) != 3 ||
      agsx_digest_validate(diff, NULL) < 0 || agsx_digest_validate(dig, NULL) < 0 ||
      !agsx_store_has_blob(b->s, dig))
    return false;
  struct agsx_descriptor d = {.media_type = (char *)AGSX_MT_OCI_LAYER_GZIP, .size = size};
  memcpy(d.digest, dig, AGSX_DIGEST_LEN);
  agsx_error_t e = NULL;
  if (agsx_store_stage_layer(b->s, b->workfd, &d, diff, &e) < 0) {
    agsx_error_free(&e);
    return false;
  }
  struct blayer l = {.size = size, .media_type = xstrdup(AGSX_MT_OCI_LAYER_GZIP)};
  memcpy(l.diff_id, diff, AGSX_DIGEST_LEN);
  memcpy(l.digest, dig, AGSX_DIGEST_LEN);
  st->layers = xrealloc(st->layers, (st->n_layers + 1) * sizeof(*st->layers));
  st->layers[st->n_layers++] = l;
  agsx_build_history(st, created_by, false);
  b->res->cached_layers++;
  agsx_build_progress(b, " ---> Using cache %.19s\n", diff);
  return true;
}

void agsx_build_cache_later(struct build *b, const char *key, const char *record) {
  agsx_strv_push(&b->pending_cache, agsx_digest_hex(key));
  agsx_strv_push(&b->pending_cache, record);
}

void agsx_build_cache_write_all(struct build *b) {
  for (size_t i = 0; b->cachefd >= 0 && b->pending_cache && b->pending_cache[i]; i += 2) {
    agsx_error_t e = NULL;
    const char *rec = b->pending_cache[i + 1];
    if (agsx_write_file_atomic(b->cachefd, b->pending_cache[i], rec, strlen(rec), 0600, &e) < 0) {
      agsx_warn("build cache: %s", e->msg);
      agsx_error_free(&e);
    }
  }
}
