/* agsx — build: the image: its config document, the manifest and the tag. */
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

/* ---- the image ---------------------------------------------------------------------------------- */

static void gen_strv(yajl_gen g, const char *key, char *const *v) {
  if (v == NULL)
    return;
  agsx_json_key(g, key);
  yajl_gen_array_open(g);
  for (size_t i = 0; v[i]; i++)
    agsx_json_str(g, v[i]);
  yajl_gen_array_close(g);
}

static void gen_set(yajl_gen g, const char *key, char *const *v) {
  if (v == NULL || v[0] == NULL)
    return;
  agsx_json_key(g, key);
  yajl_gen_map_open(g);
  for (size_t i = 0; v[i]; i++) {
    agsx_json_key(g, v[i]);
    yajl_gen_map_open(g);
    yajl_gen_map_close(g);
  }
  yajl_gen_map_close(g);
}

static char *gen_config(struct stage *st, const char *created, size_t *ret_len) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "created", created);
  agsx_json_kv_str(g, "architecture", "amd64");
  agsx_json_kv_str(g, "os", "linux");
  agsx_json_key(g, "config");
  yajl_gen_map_open(g);
  if (st->user)
    agsx_json_kv_str(g, "User", st->user);
  gen_set(g, "ExposedPorts", st->ports);
  gen_strv(g, "Env", st->env);
  gen_strv(g, "Entrypoint", st->entrypoint);
  gen_strv(g, "Cmd", st->cmd);
  gen_set(g, "Volumes", st->volumes);
  if (st->workdir)
    agsx_json_kv_str(g, "WorkingDir", st->workdir);
  if (st->labels && st->labels[0]) {
    agsx_json_key(g, "Labels");
    yajl_gen_map_open(g);
    for (size_t i = 0; st->labels[i]; i++) {
      char *eq = strchr(st->labels[i], '=');
      _cleanup_free_ char *k = xstrndup(st->labels[i], (size_t)(eq - st->labels[i]));
      agsx_json_kv_str(g, k, eq + 1);
    }
    yajl_gen_map_close(g);
  }
  if (st->stopsignal)
    agsx_json_kv_str(g, "StopSignal", st->stopsignal);
  gen_strv(g, "Shell", st->shell);
  yajl_gen_map_close(g);
  agsx_json_key(g, "rootfs");
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "type", "layers");
  agsx_json_key(g, "diff_ids");
  yajl_gen_array_open(g);
  for (size_t i = 0; i < st->n_layers; i++)
    agsx_json_str(g, st->layers[i].diff_id);
  yajl_gen_array_close(g);
  yajl_gen_map_close(g);
  agsx_json_key(g, "history");
  yajl_gen_array_open(g);
  for (size_t i = 0;
       st->base_history && YAJL_IS_ARRAY(st->base_history) && i < st->base_history->u.array.len;
       i++)
    agsx_json_value(g, st->base_history->u.array.values[i]);
  for (size_t i = 0; st->history && st->history[i]; i++) {
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "created", created);
    agsx_json_kv_str(g, "created_by", st->history[i] + 1);
    agsx_json_kv_str(g, "comment", "agsx build");
    if (st->history[i][0] == '1')
      agsx_json_kv_bool(g, "empty_layer", true);
    yajl_gen_map_close(g);
  }
  yajl_gen_array_close(g);
  yajl_gen_map_close(g);
  return agsx_json_gen_steal(g, ret_len);
}

int agsx_build_write_image(struct build *b, struct stage *st, agsx_error_t *err) {
  _cleanup_free_ char *created = agsx_format_rfc3339(agsx_now_ns() / 1000000000LL);
  size_t clen, mlen;
  _cleanup_free_ char *config = gen_config(st, created, &clen);
  char cdigest[AGSX_DIGEST_LEN];
  if (clen > AGSX_IMAGE_JSON_MAX)
    return agsx_error_set(err, 0, "the image config would be %zu bytes, over the limit of %u", clen,
                          AGSX_IMAGE_JSON_MAX);
  if (agsx_store_stage_blob_mem(b->s, b->workfd, config, clen, cdigest, err) < 0)
    return -1;
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_int(g, "schemaVersion", 2);
  agsx_json_kv_str(g, "mediaType", AGSX_MT_OCI_MANIFEST);
  agsx_json_key(g, "config");
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "mediaType", AGSX_MT_OCI_CONFIG);
  agsx_json_kv_str(g, "digest", cdigest);
  agsx_json_kv_int(g, "size", (int64_t)clen);
  yajl_gen_map_close(g);
  agsx_json_key(g, "layers");
  yajl_gen_array_open(g);
  for (size_t i = 0; i < st->n_layers; i++) {
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "mediaType", st->layers[i].media_type);
    agsx_json_kv_str(g, "digest", st->layers[i].digest);
    agsx_json_kv_int(g, "size", st->layers[i].size);
    yajl_gen_map_close(g);
  }
  yajl_gen_array_close(g);
  yajl_gen_map_close(g);
  _cleanup_free_ char *manifest = agsx_json_gen_steal(g, &mlen);
  struct agsx_descriptor md = {.media_type = (char *)AGSX_MT_OCI_MANIFEST, .size = (int64_t)mlen};
  if (agsx_store_stage_blob_mem(b->s, b->workfd, manifest, mlen, md.digest, err) < 0 ||
      agsx_store_commit(b->s, b->workfd, err) < 0)
    return -1;
  agsx_build_cache_write_all(b);
  size_t ntags = agsx_strv_len(b->o->tags);
  for (size_t i = 0; i < (ntags ? ntags : 1); i++)
    if (agsx_store_tag(b->s, ntags ? b->o->tags[i] : NULL, &md, err) < 0)
      return -1;
  memcpy(b->res->digest, md.digest, AGSX_DIGEST_LEN);
  return 0;
}

/* WORKDIR makes its directory when no layer has it (as Docker does): a
 * small layer with the directory and its parents. */
