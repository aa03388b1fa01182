/* Fuzz target: one line of MCP's stdio transport (mcp/rpc.h), and the same
 * bytes as a resource URI's path (agsx_rpc_uri_path). Whatever the
 * bytes, parsing gives a message or an error code the server answers with;
 * a message's id, when there is one, makes answers that parse again as
 * JSON-RPC responses echoing that id. */
#include "config.h"

#include "mcp/rpc.h"
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

static void answer_parses(const char *id) {
  size_t len;
  char *line = agsx_rpc_error(id, AGSX_RPC_INVALID_REQUEST, "x\xff", &len);
  struct agsx_rpc_msg m;
  int code;
  agsx_error_t err = NULL;
  if (agsx_rpc_parse(line, len, &m, &code, &err) < 0 || m.kind != AGSX_RPC_RESPONSE ||
      (id && strcmp(m.id, id) != 0))
    abort();
  agsx_rpc_msg_clear(&m);
  free(line);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > (1u << 16))
    return 0;
  struct agsx_rpc_msg m;
  int code = 0;
  agsx_error_t err = NULL;
  if (agsx_rpc_parse((const char *)data, size, &m, &code, &err) < 0) {
    if ((code != AGSX_RPC_PARSE_ERROR && code != AGSX_RPC_INVALID_REQUEST &&
         code != AGSX_RPC_INVALID_PARAMS) ||
        err == NULL)
      abort();
    agsx_error_free(&err);
  } else {
    if ((m.kind == AGSX_RPC_RESPONSE) != (m.method == NULL) ||
        (m.kind == AGSX_RPC_NOTIFICATION) != (m.id == NULL))
      abort();
    _cleanup_free_ char *cid = agsx_rpc_id_of(m.params, "requestId");
    (void)cid;
  }
  if (m.id)
    answer_parses(m.id);
  agsx_rpc_msg_clear(&m);
  /* the same bytes as a resource URI's path: decoded no longer, no NUL */
  char *s = strndup((const char *)data, size);
  char *p = s ? agsx_rpc_uri_path(s) : NULL;
  if (p && (strlen(p) > strlen(s) + 1 || p[0] != '/'))
    abort();
  free(p);
  free(s);
  return 0;
}
