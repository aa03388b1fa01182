/* Unit tests: MCP's JSON-RPC framing (mcp/rpc.h). */
#include "config.h"

#include "mcp/rpc.h"
#include "tap.h"

static int parse(const char *s, struct agsx_rpc_msg *m, int *code) {
  agsx_error_t err = NULL;
  int r = agsx_rpc_parse(s, strlen(s), m, code, &err);
  agsx_error_free(&err);
  return r;
}

int main(void) {
  struct agsx_rpc_msg m;
  int code;
  tap_ok(parse("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}", &m, &code) == 0 &&
             m.kind == AGSX_RPC_REQUEST && strcmp(m.id, "7") == 0 && strcmp(m.method, "ping") == 0,
         "a request, its numeric id kept as text");
  agsx_rpc_msg_clear(&m);
  tap_ok(parse("{\"jsonrpc\":\"2.0\",\"id\":\"a\\\"b\",\"method\":\"x\",\"params\":{}}", &m,
               &code) == 0 &&
             strcmp(m.id, "\"a\\\"b\"") == 0 && m.params != NULL,
         "a string id, re-escaped");
  agsx_rpc_msg_clear(&m);
  tap_ok(parse("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", &m, &code) == 0 &&
             m.kind == AGSX_RPC_NOTIFICATION && m.id == NULL,
         "a notification");
  agsx_rpc_msg_clear(&m);
  tap_ok(parse("{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}", &m, &code) == 0 &&
             m.kind == AGSX_RPC_RESPONSE,
         "a response");
  agsx_rpc_msg_clear(&m);
  tap_ok(parse("{\"jsonrpc\":\"2.0\",\"id\":1,", &m, &code) < 0 && code == AGSX_RPC_PARSE_ERROR &&
             m.id == NULL,
         "broken JSON: parse error");
  agsx_rpc_msg_clear(&m);
  tap_ok(parse("[1]", &m, &code) < 0 && code == AGSX_RPC_INVALID_REQUEST, "a batch: invalid");
  agsx_rpc_msg_clear(&m);
  tap_ok(parse("{\"jsonrpc\":\"1.0\",\"id\":4,\"method\":\"ping\"}", &m, &code) < 0 &&
             code == AGSX_RPC_INVALID_REQUEST && m.id && strcmp(m.id, "4") == 0,
         "wrong version: invalid request, id kept for the answer");
  agsx_rpc_msg_clear(&m);
  tap_ok(parse("{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}", &m, &code) < 0 &&
             code == AGSX_RPC_INVALID_REQUEST,
         "an object id: invalid request");
  agsx_rpc_msg_clear(&m);
  tap_ok(parse("{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\",\"params\":[1]}", &m, &code) <
                 0 &&
             code == AGSX_RPC_INVALID_PARAMS,
         "positional params: invalid params");
  agsx_rpc_msg_clear(&m);
  tap_ok(parse("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":"
               "{\"requestId\":9}}",
               &m, &code) == 0,
         "cancelled parses");
  char *id = agsx_rpc_id_of(m.params, "requestId");
  tap_is_str(id, "9", "its requestId");
  free(id);
  agsx_rpc_msg_clear(&m);
  size_t len;
  char *s = agsx_rpc_error(NULL, AGSX_RPC_PARSE_ERROR, "bad \"x\"", &len);
  tap_is_str(s,
             "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"bad "
             "\\\"x\\\"\"}}",
             "an error with a null id");
  free(s);
  s = agsx_rpc_result("\"q\"", "{}", &len);
  tap_is_str(s, "{\"jsonrpc\":\"2.0\",\"id\":\"q\",\"result\":{}}", "a result");
  tap_ok(len == strlen(s), "its length");
  free(s);
  char *p = agsx_rpc_uri_path("tmp/a%20b/%C3%A9");
  tap_is_str(p, "/tmp/a b/\xc3\xa9", "uri path: escapes decoded, a leading slash");
  free(p);
  p = agsx_rpc_uri_path("");
  tap_is_str(p, "/", "uri path: empty is /");
  free(p);
  tap_ok(agsx_rpc_uri_path("a%00b") == NULL && agsx_rpc_uri_path("a%zz") == NULL &&
             agsx_rpc_uri_path("a%4") == NULL && agsx_rpc_uri_path("%") == NULL,
         "uri path: %%00, a bad or cut escape are refused");
  return tap_done();
}
