/* agsx — mcp: resources, so that a client can browse the session's
 * sandboxes and their files without a tool call:
 *
 *   agsx://sandbox/ID                 the sandbox (sandbox_info's JSON)
 *   agsx://sandbox/ID/files/PATH      a file (text, or a base64 blob when it
 *                                     is no UTF-8 text; at most 1 MiB) or a
 *                                     directory (file_list's JSON)
 *
 * resources/list lists the sandboxes; resources/templates/list gives the
 * files' template. PATH is percent-decoded and resolved as the file tools
 * resolve theirs (api/fsops.h: openat2 RESOLVE_IN_ROOT in the sandbox). */
#include "config.h"

#include "api/fsops.h"
#include "api/wire.h"
#include "mcp/rpc.h"
#include "mcp/tools-internal.h"

#include <string.h>

#define SCHEME "agsx://sandbox/"

void agsx_mcp_resources_list(struct agsx_mcp *s, yajl_gen g) {
  struct agsx_record *recs = NULL;
  size_t n = agsx_mcp_load(s, &recs);
  yajl_gen_map_open(g);
  agsx_json_key(g, "resources");
  yajl_gen_array_open(g);
  for (size_t i = 0; i < n; i++) {
    const struct agsx_record *r = &recs[i];
    _cleanup_free_ char *uri = xasprintf(SCHEME "%s", r->id);
    _cleanup_free_ char *name = xasprintf("sandbox %.12s", r->id);
    _cleanup_free_ char *desc =
        xasprintf("A sandbox of this session: image %s, %s; its files are %s/files/PATH",
                  r->image ? r->image : "?", agsx_record_status(r), uri);
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "uri", uri);
    agsx_json_kv_str(g, "name", name);
    agsx_json_kv_str(g, "description", desc);
    agsx_json_kv_str(g, "mimeType", "application/json");
    yajl_gen_map_close(g);
  }
  agsx_mcp_records_free(recs, n);
  yajl_gen_array_close(g);
  yajl_gen_map_close(g);
}

void agsx_mcp_resource_templates(yajl_gen g) {
  yajl_gen_map_open(g);
  agsx_json_key(g, "resourceTemplates");
  yajl_gen_array_open(g);
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "uriTemplate", SCHEME "{sandbox}/files/{+path}");
  agsx_json_kv_str(g, "name", "sandbox-file");
  agsx_json_kv_str(g, "title", "A file or directory of a sandbox");
  agsx_json_kv_str(g, "description",
                   "PATH is absolute in the sandbox, without its leading slash: a file's "
                   "content (at most 1 MiB), or a directory's entries as JSON");
  yajl_gen_map_close(g);
  yajl_gen_array_close(g);
  yajl_gen_map_close(g);
}

static void content_open(yajl_gen g, const char *uri, const char *mime) {
  yajl_gen_map_open(g);
  agsx_json_key(g, "contents");
  yajl_gen_array_open(g);
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "uri", uri);
  agsx_json_kv_str(g, "mimeType", mime);
}

static void content_close(yajl_gen g) {
  yajl_gen_map_close(g);
  yajl_gen_array_close(g);
  yajl_gen_map_close(g);
}

/* The document of R as a JSON text, from GEN. */
static char *doc_of(void (*gen)(yajl_gen, const void *), const void *arg) {
  _cleanup_gen_ yajl_gen d = agsx_json_gen_new(false);
  gen(d, arg);
  size_t len;
  return agsx_json_gen_steal(d, &len);
}

static void gen_info_v(yajl_gen g, const void *r) { agsx_mcp_gen_info(g, r); }

struct listing {
  const struct agsx_fs_entry *v;
  size_t n;
};

static void gen_listing(yajl_gen g, const void *arg) {
  const struct listing *l = arg;
  yajl_gen_map_open(g);
  agsx_json_key(g, "entries");
  yajl_gen_array_open(g);
  for (size_t i = 0; i < l->n && i < 5000; i++)
    agsx_mcp_gen_entry(g, &l->v[i]);
  yajl_gen_array_close(g);
  agsx_json_kv_bool(g, "truncated", l->n > 5000);
  yajl_gen_map_close(g);
}

static int read_file(struct agsx_mcp *s, const struct agsx_record *rec, const char *uri,
                     const char *path, yajl_gen g, agsx_error_t *err) {
  (void)s;
  _cleanup_fs_ctx_ struct agsx_fs_ctx *c = NULL;
  struct agsx_fs_opts o = {0};
  if (agsx_fs_open(rec, &o, &c, err) < 0)
    return -1;
  struct agsx_fs_entry e = {0};
  if (agsx_fs_stat(c, path, &e, err) < 0)
    return -1;
  bool dir = e.type == AGSX_FS_TYPE_DIRECTORY;
  agsx_fs_entry_clear(&e);
  if (dir) {
    struct agsx_fs_entry *v = NULL;
    size_t n = 0;
    if (agsx_fs_list(c, path, 1, &v, &n, err) < 0)
      return -1;
    struct listing l = {v, n};
    _cleanup_free_ char *doc = doc_of(gen_listing, &l);
    agsx_fs_entries_free(v, n);
    content_open(g, uri, "application/json");
    agsx_json_kv_str(g, "text", doc);
    content_close(g);
    return 0;
  }
  _cleanup_free_ char *buf = NULL, *abs = NULL;
  size_t len;
  if (agsx_mcp_read_file(c, path, &buf, &len, &abs, err) < 0)
    return -1;
  if (agsx_utf8_text(buf, len)) {
    content_open(g, uri, "text/plain");
    agsx_json_key(g, "text");
    agsx_json_bytes(g, buf, len);
  } else {
    _cleanup_free_ char *b64 = agsx_base64_encode(buf, len);
    content_open(g, uri, "application/octet-stream");
    agsx_json_kv_str(g, "blob", b64);
  }
  content_close(g);
  return 0;
}

int agsx_mcp_resource_read(struct agsx_mcp *s, const char *uri, yajl_gen g, int *ret_code,
                           agsx_error_t *err) {
  *ret_code = AGSX_RPC_RESOURCE_NOT_FOUND;
  if (strncmp(uri, SCHEME, strlen(SCHEME)) != 0)
    return agsx_error_set_quiet(err, ENOENT,
                                "resource not found: `%.200s` (resources/list and "
                                "resources/templates/list give agsx:// URIs)",
                                uri);
  const char *id = uri + strlen(SCHEME), *slash = strchr(id, '/');
  _cleanup_free_ char *sid = slash ? xstrndup(id, (size_t)(slash - id)) : xstrdup(id);
  _cleanup_free_ char *path = NULL;
  if (slash) {
    if (strncmp(slash, "/files/", 7) != 0 && strcmp(slash, "/files") != 0)
      return agsx_error_set_quiet(err, ENOENT, "resource not found: `%.200s`", uri);
    path = agsx_rpc_uri_path(slash[6] == '/' ? slash + 7 : "");
    if (path == NULL) {
      *ret_code = AGSX_RPC_INVALID_PARAMS;
      return agsx_error_set_quiet(err, EINVAL, "invalid params: a bad %%-escape in `%.200s`", uri);
    }
  }
  struct agsx_record rec;
  if (agsx_mcp_find(s, sid, &rec, err) < 0)
    return agsx_error_wrap(err, "resource not found: `%.200s`", uri);
  int r = 0;
  if (path == NULL) {
    _cleanup_free_ char *doc = doc_of(gen_info_v, &rec);
    content_open(g, uri, "application/json");
    agsx_json_kv_str(g, "text", doc);
    content_close(g);
  } else {
    r = read_file(s, &rec, uri, path, g, err);
    if (r < 0 && agsx_error_errno(err) != ENOENT)
      *ret_code = AGSX_RPC_INTERNAL_ERROR;
    if (r < 0)
      agsx_error_wrap(err, "`%.200s`", uri);
  }
  agsx_record_clear(&rec);
  return r;
}
