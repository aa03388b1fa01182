/* agsx — api: E2B's fork, createSnapshot and listSnapshots (e2b-protocol.md
 * §2), thin glue over sandbox/snapshot.h and agsx_build_commit_sandbox.
 *
 * An E2B snapshot persists and is a template: here it is an image of the
 * store, committed from the sandbox (frozen for the copy), named
 * e2b-snapshots/<sandboxID>:<n> and, when the caller gave a name, that name
 * too. Its snapshotID is the name (else the e2b-snapshots one), which
 * Sandbox.create takes as a templateID (any templateID names an image).
 * A fork is agsx_sandbox_fork: one copy, COUNT sandboxes. */
#include "config.h"

#include "api/api-internal.h"
#include "image/build/build.h"
#include "image/image.h"
#include "image/store.h"
#include "sandbox/snapshot.h"

#include <string.h>

#define SNAP_PREFIX "e2b-snapshots/"
#define FORK_TIMEOUT_DEFAULT 15 /* E2B's default for forks (seconds) */
#define SNAP_LIST_MAX 1000

static bool find_running(struct req *r, const char *e2b_id, struct agsx_record *rec) {
  agsx_error_t err = NULL;
  if (agsx_api_find_sandbox(r->s, e2b_id, rec, &err) < 0) {
    agsx_error_free(&err);
    agsx_respond_error(r, 404, "sandbox \"%.40s\" not found", e2b_id);
    return false;
  }
  return true;
}

static bool int_field(struct req *r, yajl_val body, const char *key, int64_t min, int64_t max,
                      int64_t *ret) {
  yajl_val v = agsx_json_get(body, key);
  if (v == NULL || YAJL_IS_NULL(v))
    return true;
  if (!YAJL_IS_INTEGER(v) || YAJL_GET_INTEGER(v) < min || YAJL_GET_INTEGER(v) > max) {
    agsx_respond_error(r, 400, "%s must be an integer from %lld to %lld", key, (long long)min,
                       (long long)max);
    return false;
  }
  *ret = YAJL_GET_INTEGER(v);
  return true;
}

/* ---- fork ----------------------------------------------------------------------------------- */

void agsx_api_fork(struct req *r, const char *e2b_id) {
  _cleanup_json_ yajl_val body = agsx_api_parse_body(r, false);
  if (body == NULL)
    return;
  int64_t count = 1, timeout = FORK_TIMEOUT_DEFAULT;
  if (!int_field(r, body, "count", 1, AGSX_FORK_MAX, &count) ||
      !int_field(r, body, "timeout", 1, AGSX_DURATION_MAX_SEC, &timeout))
    return;
  struct agsx_record src;
  if (!find_running(r, e2b_id, &src))
    return;
  const struct agsx_api_config *cfg = r->s->cfg;
  char id[33];
  memcpy(id, src.id, sizeof(id));
  struct agsx_fork_opts fo = {.root = cfg->root,
                              .state = cfg->state,
                              .source = id,
                              .count = (unsigned)count,
                              .timeout = (uint64_t)timeout};
  agsx_record_clear(&src);
  struct agsx_fork *v = NULL;
  size_t n = 0;
  int64_t frozen = 0;
  agsx_error_t err = NULL;
  int rc = agsx_sandbox_fork(&fo, &v, &n, &frozen, &err);
  if (rc < 0 && n == 0) {
    int e = agsx_error_errno(&err);
    agsx_respond_error(r, e == ESRCH ? 404 : e == ENOTSUP ? 400 : 500, "fork: %s", err->msg);
    agsx_error_free(&err);
    agsx_forks_free(v, n);
    return;
  }
  /* One entry per requested fork: the sandbox, or why it did not start. */
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_array_open(g);
  for (size_t i = 0; i < (size_t)count; i++) {
    yajl_gen_map_open(g);
    struct agsx_record rec;
    agsx_error_t e = NULL;
    if (i < n && agsx_record_read(r->s->statefd, v[i].id, &rec, &e) == 0) {
      agsx_json_key(g, "sandbox");
      agsx_api_gen_sandbox(r->s, g, &rec);
      agsx_record_clear(&rec);
    } else {
      agsx_json_key(g, "error");
      yajl_gen_map_open(g);
      agsx_json_kv_int(g, "code", 500);
      agsx_json_kv_str(g, "message", e ? e->msg : err ? err->msg : "the fork did not start");
      yajl_gen_map_close(g);
    }
    agsx_error_free(&e);
    yajl_gen_map_close(g);
  }
  yajl_gen_array_close(g);
  agsx_info("serve: forked sandbox %.20s: %zu of %lld, frozen %lld ms", e2b_id, n, (long long)count,
            (long long)(frozen / 1000000));
  agsx_respond_json(r, 201, g);
  agsx_error_free(&err);
  agsx_forks_free(v, n);
}

/* ---- snapshots ------------------------------------------------------------------------------ */

static void gen_info(yajl_gen g, const char *id, char *const *names) {
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "snapshotID", id);
  agsx_json_key(g, "names");
  yajl_gen_array_open(g);
  for (size_t i = 0; names && names[i]; i++)
    agsx_json_str(g, names[i]);
  yajl_gen_array_close(g);
  yajl_gen_map_close(g);
}

/* The store's images, and the first free e2b-snapshots/<e2b id>:<n>. */
static char *next_ref(struct agsx_store *s, const char *e2b_id) {
  struct agsx_store_image *v = NULL;
  size_t n = 0;
  _cleanup_error_ agsx_error_t e = NULL;
  agsx_store_list(s, &v, &n, &e);
  for (unsigned k = 1;; k++) {
    char *ref = xasprintf(SNAP_PREFIX "%s:%u", e2b_id, k);
    bool taken = false;
    for (size_t i = 0; i < n && !taken; i++)
      taken = v[i].ref && strstr(v[i].ref, ref) != NULL;
    if (!taken) {
      agsx_store_images_free(v, n);
      return ref;
    }
    free(ref);
  }
}

void agsx_api_create_snapshot(struct req *r, const char *e2b_id) {
  _cleanup_json_ yajl_val body = agsx_api_parse_body(r, false);
  if (body == NULL)
    return;
  yajl_val nm = agsx_json_get(body, "name");
  const char *name = NULL;
  if (nm && !YAJL_IS_NULL(nm)) {
    if (!YAJL_IS_STRING(nm) || *nm->u.string == '\0' || strlen(nm->u.string) > 128) {
      agsx_respond_error(r, 400, "name must be a non-empty string");
      return;
    }
    name = nm->u.string;
  }
  struct agsx_record rec;
  if (!find_running(r, e2b_id, &rec))
    return;
  char short_id[21];
  snprintf(short_id, sizeof(short_id), "%.20s", rec.id);
  const struct agsx_api_config *cfg = r->s->cfg;
  agsx_error_t err = NULL;
  _cleanup_free_ char *named = name ? agsx_image_ref_normalize(name, &err) : NULL;
  _cleanup_free_ char *ref = NULL;
  struct agsx_store *s = NULL;
  int rc = name && named == NULL ? -1 : agsx_store_open(cfg->root, true, &s, &err);
  if (rc == 0)
    ref = next_ref(s, short_id);
  struct agsx_sandbox_commit_opts co = {
      .root = cfg->root, .state = cfg->state, .id = rec.id, .image = ref};
  struct agsx_sandbox_commit_result res;
  if (rc == 0)
    rc = agsx_build_commit_sandbox(&co, &res, &err);
  if (rc == 0 && named) {
    /* The caller's name on the same image. */
    struct agsx_store_image img;
    rc = agsx_store_resolve(s, res.digest, &img, &err);
    if (rc == 0) {
      rc = agsx_store_tag(s, named, &img.manifest, &err);
      free(img.ref);
      agsx_descriptor_clear(&img.manifest);
    }
  }
  agsx_store_free(s);
  agsx_record_clear(&rec);
  if (rc < 0) {
    int e = agsx_error_errno(&err);
    agsx_respond_error(r,
                       e == ESRCH                    ? 404
                       : e == ENOTSUP || e == EINVAL ? 400
                                                     : 500,
                       "snapshot: %s", err->msg);
    agsx_error_free(&err);
    return;
  }
  agsx_info("serve: snapshot of %.20s: %s (frozen %lld ms)", e2b_id, named ? named : ref,
            (long long)(res.frozen_ns / 1000000));
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  char *names[] = {named ? named : ref, NULL};
  gen_info(g, named ? named : ref, names);
  agsx_respond_json(r, 201, g);
}

static bool matches(const char *ref, const char *want) {
  if (want == NULL || *want == '\0')
    return true;
  size_t n = strlen(want);
  /* "name" matches name:TAG; "name:tag" exactly; a registry prefix may lead. */
  const char *p = strstr(ref, want);
  return p && (p == ref || p[-1] == '/') && (p[n] == '\0' || (p[n] == ':' && !strchr(want, ':')));
}

void agsx_api_list_snapshots(struct req *r) {
  const char *sandbox = agsx_req_query(r, "sandboxID");
  const char *name = agsx_req_query(r, "name");
  const char *lim = agsx_req_query(r, "limit");
  long limit = lim ? strtol(lim, NULL, 10) : 100;
  if (limit < 1 || limit > SNAP_LIST_MAX) {
    agsx_respond_error(r, 400, "limit must be 1 to %d", SNAP_LIST_MAX);
    return;
  }
  agsx_error_t err = NULL;
  struct agsx_store *s = NULL;
  struct agsx_store_image *v = NULL;
  size_t n = 0;
  if (agsx_store_open(r->s->cfg->root, true, &s, &err) < 0 ||
      agsx_store_list(s, &v, &n, &err) < 0) {
    agsx_respond_error(r, 500, "list snapshots: %s", err->msg);
    agsx_error_free(&err);
    agsx_store_free(s);
    return;
  }
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_array_open(g);
  long shown = 0;
  for (size_t i = 0; i < n && shown < limit; i++) {
    const char *snap = v[i].ref ? strstr(v[i].ref, SNAP_PREFIX) : NULL;
    if (snap == NULL || (snap != v[i].ref && snap[-1] != '/'))
      continue;
    /* One entry per image (two snapshots of unchanged files are one). */
    bool seen = false;
    for (size_t k = 0; k < i && !seen; k++)
      seen = v[k].ref && strstr(v[k].ref, SNAP_PREFIX) &&
             strcmp(v[k].manifest.digest, v[i].manifest.digest) == 0;
    if (seen)
      continue;
    if (sandbox && *sandbox &&
        (strncmp(snap + strlen(SNAP_PREFIX), sandbox, strlen(sandbox)) != 0 ||
         snap[strlen(SNAP_PREFIX) + strlen(sandbox)] != ':'))
      continue;
    /* Its other names: the caller's, on the same image. */
    _cleanup_strv_ char **names = NULL;
    for (size_t k = 0; k < n; k++)
      if (k != i && v[k].ref && strcmp(v[k].manifest.digest, v[i].manifest.digest) == 0 &&
          !strstr(v[k].ref, SNAP_PREFIX))
        agsx_strv_push(&names, v[k].ref);
    const char *id = names && names[0] ? names[0] : v[i].ref;
    bool hit = matches(id, name) || matches(v[i].ref, name);
    if (!hit)
      continue;
    if (names == NULL)
      agsx_strv_push(&names, v[i].ref);
    gen_info(g, id, names);
    shown++;
  }
  yajl_gen_array_close(g);
  agsx_store_images_free(v, n);
  agsx_store_free(s);
  agsx_respond_json(r, 200, g);
}

/* DELETE /templates/{id} for a snapshot (the SDK's deleteSnapshot): every
 * name of its image goes (one listing entry is one image), then what no
 * image names any more, unless a running sandbox still uses it (it goes
 * at the next gc after that one ends). An id that names no snapshot (a
 * template such as base) is a 404: this never removes other images. */
void agsx_api_delete_snapshot(struct req *r, const char *id) {
  agsx_error_t err = NULL;
  _cleanup_free_ char *ref = agsx_image_ref_normalize(id, NULL);
  struct agsx_store *s = NULL;
  struct agsx_store_image *v = NULL;
  size_t n = 0;
  if (agsx_store_open(r->s->cfg->root, true, &s, &err) < 0 ||
      agsx_store_list(s, &v, &n, &err) < 0) {
    agsx_respond_error(r, 500, "delete snapshot: %s", err->msg);
    agsx_error_free(&err);
    agsx_store_free(s);
    return;
  }
  const char *digest = NULL;
  for (size_t i = 0; i < n && !digest; i++)
    if (v[i].ref && ((ref && strcmp(v[i].ref, ref) == 0) || strcmp(v[i].ref, id) == 0))
      digest = v[i].manifest.digest;
  bool snapshot = false;
  for (size_t i = 0; i < n && digest && !snapshot; i++) {
    const char *p = v[i].ref ? strstr(v[i].ref, SNAP_PREFIX) : NULL;
    snapshot = p && (p == v[i].ref || p[-1] == '/') && strcmp(v[i].manifest.digest, digest) == 0;
  }
  int rc = 0;
  if (!snapshot)
    agsx_respond_error(r, 404, "snapshot \"%.128s\" not found", id);
  else if ((rc = agsx_store_remove(s, digest, &err)) < 0)
    agsx_respond_error(r, 500, "delete snapshot: %s", err->msg);
  if (snapshot && rc == 0) {
    _cleanup_strv_ char **inuse = agsx_state_running_images(r->s->cfg->state);
    rc = agsx_store_gc_try(s, inuse, &err);
    if (rc < 0)
      agsx_warn("serve: delete snapshot %s: %s", id, err->msg);
    else if (rc == 1)
      agsx_info("serve: delete snapshot %s: the store is in use; its content goes at the next gc",
                id);
    agsx_error_free(&err);
    agsx_info("serve: deleted snapshot %s", id);
    agsx_respond(r, 204, NULL, "", 0);
  }
  agsx_error_free(&err);
  agsx_store_images_free(v, n);
  agsx_store_free(s);
}
