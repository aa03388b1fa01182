/* agsx — api: E2B's /volumes (create, list, get, delete), thin glue over
 * sandbox/volume.h: an E2B volume is a named volume of the store, the one
 * `agsx volume` lists, and its volumeID is its name (volumeMounts name it
 * too). Its token would authorize E2B's volume content API
 * (/volumecontent: files of a volume without a sandbox), which agsx does
 * not serve (501): the token is empty. */
#include "config.h"

#include "api/api-internal.h"
#include "sandbox/volume.h"

#include <string.h>

static void gen_volume(yajl_gen g, const char *name, bool token) {
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "volumeID", name);
  agsx_json_kv_str(g, "name", name);
  if (token)
    agsx_json_kv_str(g, "token", "");
  yajl_gen_map_close(g);
}

static void respond_volume(struct req *r, unsigned status, const char *name) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  gen_volume(g, name, true);
  agsx_respond_json(r, status, g);
}

/* 400 for a name that could never be a volume's (a `/`, `..`). */
static bool valid(struct req *r, const char *name) {
  if (agsx_volume_name_is_valid(name))
    return true;
  agsx_respond_error(r, 400,
                     "invalid volume name \"%.80s\": letters, digits and _.- (at most %d, "
                     "starting with a letter or digit)",
                     name, AGSX_VOLUME_NAME_MAX);
  return false;
}

static unsigned status_of(agsx_error_t *err) {
  switch (agsx_error_errno(err)) {
  case ENOENT: return 404;
  case EEXIST:
  case EBUSY: return 409;
  case EINVAL: return 400;
  default: return 500;
  }
}

static void fail(struct req *r, agsx_error_t *err) {
  agsx_respond_error(r, status_of(err), "%s", (*err)->msg);
  agsx_error_free(err);
}

static void create(struct req *r) {
  _cleanup_json_ yajl_val body = agsx_api_parse_body(r, false);
  if (body == NULL)
    return;
  const char *name = agsx_json_get_string(body, "name");
  if (!YAJL_IS_OBJECT(body) || name == NULL)
    return agsx_respond_error(r, 400, "name is required (a string)");
  for (size_t i = 0; i < body->u.object.len; i++)
    if (strcmp(body->u.object.keys[i], "name") != 0)
      return agsx_respond_error(r, 400, "unknown field `%.64s`", body->u.object.keys[i]);
  if (!valid(r, name))
    return;
  agsx_error_t err = NULL;
  if (agsx_volume_create(r->s->cfg->root, name, false, &err) < 0)
    return fail(r, &err);
  agsx_info("serve: created volume %s", name);
  respond_volume(r, 201, name);
}

static void list(struct req *r) {
  struct agsx_volume *v = NULL;
  size_t n = 0;
  agsx_error_t err = NULL;
  if (agsx_volume_list(r->s->cfg->root, &v, &n, &err) < 0)
    return fail(r, &err);
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_array_open(g);
  for (size_t i = 0; i < n; i++)
    gen_volume(g, v[i].name, false);
  yajl_gen_array_close(g);
  agsx_volume_list_free(v, n);
  agsx_respond_json(r, 200, g);
}

static void get(struct req *r, const char *name) {
  if (!valid(r, name))
    return;
  struct agsx_volume v;
  agsx_error_t err = NULL;
  if (agsx_volume_get(r->s->cfg->root, name, &v, &err) < 0)
    return fail(r, &err);
  respond_volume(r, 200, v.name);
  agsx_volume_clear(&v);
}

static void destroy(struct req *r, const char *name) {
  if (!valid(r, name))
    return;
  agsx_error_t err = NULL;
  if (agsx_volume_remove(r->s->cfg->root, name, &err) < 0)
    return fail(r, &err);
  agsx_info("serve: removed volume %s", name);
  agsx_respond(r, 204, NULL, "", 0);
}

int agsx_api_volumes_check(const char *root, char *const *volumes, agsx_error_t *err) {
  for (size_t i = 0; volumes && volumes[i]; i++) {
    _cleanup_free_ char *name = xstrndup(volumes[i], strcspn(volumes[i], ":"));
    struct agsx_volume v;
    if (agsx_volume_get(root, name, &v, err) < 0)
      return -1;
    agsx_volume_clear(&v);
  }
  return 0;
}

void agsx_api_gen_volume_mounts(yajl_gen g, char *const *volumes) {
  agsx_json_key(g, "volumeMounts");
  yajl_gen_array_open(g);
  for (size_t i = 0; volumes && volumes[i]; i++) {
    const char *colon = strchr(volumes[i], ':');
    if (colon == NULL)
      continue;
    _cleanup_free_ char *name = xstrndup(volumes[i], (size_t)(colon - volumes[i]));
    /* The API's paths have no ':' (body.h); a CLI sandbox's may end in :ro. */
    _cleanup_free_ char *path = xstrndup(colon + 1, strcspn(colon + 1, ":"));
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "name", name);
    agsx_json_kv_str(g, "path", path);
    yajl_gen_map_close(g);
  }
  yajl_gen_array_close(g);
}

void agsx_api_volumes(struct req *r, char **seg, size_t n) {
  const char *m = r->method;
  if (n == 1 && strcmp(m, "POST") == 0)
    return create(r);
  if (n == 1 && strcmp(m, "GET") == 0)
    return list(r);
  if (n == 2 && strcmp(m, "GET") == 0)
    return get(r, seg[1]);
  if (n == 2 && strcmp(m, "DELETE") == 0)
    return destroy(r, seg[1]);
  /* A volumeID with a `/` in it (decoded from %2F) splits into more. */
  if (n > 2 && (strcmp(m, "GET") == 0 || strcmp(m, "DELETE") == 0))
    return agsx_respond_error(r, 400, "invalid volume name: no `/` in a volume's name");
  agsx_respond_error(r, 404, "no route %s %s", m, r->path);
}
