/* agsx — mcp: JSON-RPC 2.0 framing (see rpc.h). */
#include "config.h"

#include "mcp/rpc.h"

#include <string.h>

/* The JSON text of an id: a string or a number (MCP: never null). */
static char *id_text(yajl_val v) {
  if (v == NULL)
    return NULL;
  if (YAJL_IS_NUMBER(v) && v->u.number.r)
    return xstrdup(v->u.number.r);
  if (!YAJL_IS_STRING(v))
    return NULL;
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  agsx_json_str(g, v->u.string);
  size_t len;
  return agsx_json_gen_steal(g, &len);
}

char *agsx_rpc_id_of(yajl_val params, const char *key) {
  return YAJL_IS_OBJECT(params) ? id_text(agsx_json_get(params, key)) : NULL;
}

static int invalid(int *ret_code, agsx_error_t *err, const char *why) {
  *ret_code = AGSX_RPC_INVALID_REQUEST;
  return agsx_error_set(err, 0, "invalid request: %s", why);
}

int agsx_rpc_parse(const char *buf, size_t len, struct agsx_rpc_msg *ret, int *ret_code,
                   agsx_error_t *err) {
  *ret = (struct agsx_rpc_msg){0};
  *ret_code = AGSX_RPC_PARSE_ERROR;
  if (len > AGSX_RPC_LINE_MAX)
    return agsx_error_set(err, 0, AGSX_RPC_TOO_LONG);
  agsx_error_t perr = NULL;
  ret->tree = agsx_json_parse(buf, len, AGSX_RPC_LINE_MAX, &perr);
  if (ret->tree == NULL) {
    agsx_error_set(err, 0, "parse error: %s", perr ? perr->msg : "not JSON");
    agsx_error_free(&perr);
    return -1;
  }
  yajl_val t = ret->tree;
  if (!YAJL_IS_OBJECT(t))
    return invalid(ret_code, err, YAJL_IS_ARRAY(t) ? "batches are not supported" : "not an object");
  yajl_val idv = agsx_json_get(t, "id");
  ret->id = id_text(idv);
  const char *ver = agsx_json_get_string(t, "jsonrpc");
  if (ver == NULL || strcmp(ver, "2.0") != 0)
    return invalid(ret_code, err, "\"jsonrpc\" must be \"2.0\"");
  if (idv && ret->id == NULL)
    return invalid(ret_code, err, "\"id\" must be a string or a number");
  yajl_val m = agsx_json_get(t, "method");
  if (m == NULL) {
    if (ret->id == NULL || (!agsx_json_get(t, "result") && !agsx_json_get(t, "error")))
      return invalid(ret_code, err, "no \"method\"");
    ret->kind = AGSX_RPC_RESPONSE;
    return 0;
  }
  if (!YAJL_IS_STRING(m))
    return invalid(ret_code, err, "\"method\" must be a string");
  ret->method = m->u.string;
  yajl_val p = agsx_json_get(t, "params");
  if (p && !YAJL_IS_OBJECT(p) && !YAJL_IS_NULL(p)) {
    /* JSON-RPC allows positional params; no MCP method takes them. */
    *ret_code = AGSX_RPC_INVALID_PARAMS;
    return agsx_error_set(err, 0, "invalid params: \"params\" must be an object");
  }
  ret->params = YAJL_IS_OBJECT(p) ? p : NULL;
  ret->kind = ret->id ? AGSX_RPC_REQUEST : AGSX_RPC_NOTIFICATION;
  return 0;
}

void agsx_rpc_msg_clear(struct agsx_rpc_msg *m) {
  free(m->id);
  agsx_json_freep(&m->tree);
  *m = (struct agsx_rpc_msg){0};
}

char *agsx_rpc_result(const char *id, const char *result, size_t *ret_len) {
  char *s = xasprintf("{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":%s}", id ? id : "null", result);
  *ret_len = strlen(s);
  return s;
}

char *agsx_rpc_error(const char *id, int code, const char *msg, size_t *ret_len) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_int(g, "code", code);
  agsx_json_key(g, "message");
  agsx_json_bytes(g, msg, strlen(msg));
  yajl_gen_map_close(g);
  size_t n;
  _cleanup_free_ char *e = agsx_json_gen_steal(g, &n);
  char *s = xasprintf("{\"jsonrpc\":\"2.0\",\"id\":%s,\"error\":%s}", id ? id : "null", e);
  *ret_len = strlen(s);
  return s;
}

static int hex(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

char *agsx_rpc_uri_path(const char *s) {
  size_t n = strlen(s);
  char *out = xmalloc(n + 2), *o = out;
  *o++ = '/';
  for (size_t i = 0; i < n; i++) {
    if (s[i] != '%') {
      *o++ = s[i];
      continue;
    }
    int h = i + 1 < n ? hex(s[i + 1]) : -1, l = i + 2 < n ? hex(s[i + 2]) : -1;
    if (h < 0 || l < 0 || (h == 0 && l == 0)) {
      free(out);
      return NULL;
    }
    *o++ = (char)(h * 16 + l);
    i += 2;
  }
  *o = '\0';
  return out;
}
