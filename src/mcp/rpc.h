/* agsx — mcp: JSON-RPC 2.0 framing of the Model Context Protocol's stdio
 * transport, as pure functions over untrusted bytes (fuzzed:
 * test/fuzz/fuzz_mcprpc.c).
 *
 * A message is one line of JSON (no embedded newline); agsx_rpc_parse()
 * classifies it as a request (method and id), a notification (method, no
 * id) or a response (id, result or error: the client answering a request
 * of ours; we send none, so they are dropped). Batches (arrays) are not
 * part of MCP since 2025-06-18 and are invalid requests. The id is kept as
 * its JSON text ("7", "\"a\"") so that an answer echoes it exactly, a
 * number's digits included, without a second JSON parser. */
#ifndef AGSX_MCP_RPC_H
#define AGSX_MCP_RPC_H

#include "util/json.h"
#include "util/util.h"

#define AGSX_RPC_LINE_MAX (8u << 20) /* bytes of one message */
/* The error of a longer one, whether it was seen whole or in part. */
#define AGSX_RPC_TOO_LONG "parse error: a message over 8 MiB"

enum {
  AGSX_RPC_PARSE_ERROR = -32700,
  AGSX_RPC_INVALID_REQUEST = -32600,
  AGSX_RPC_METHOD_NOT_FOUND = -32601,
  AGSX_RPC_INVALID_PARAMS = -32602,
  AGSX_RPC_INTERNAL_ERROR = -32603,
  AGSX_RPC_RESOURCE_NOT_FOUND = -32002, /* MCP's */
};

enum agsx_rpc_kind { AGSX_RPC_REQUEST, AGSX_RPC_NOTIFICATION, AGSX_RPC_RESPONSE };

struct agsx_rpc_msg {
  enum agsx_rpc_kind kind;
  char *id;           /* the id's JSON text; NULL for a notification */
  const char *method; /* NULL for a response; points into TREE */
  yajl_val params;    /* an object, or NULL when absent; points into TREE */
  yajl_val tree;
};

/* Parses the message in BUF. On failure *RET_CODE is AGSX_RPC_PARSE_ERROR
 * (not JSON) or AGSX_RPC_INVALID_REQUEST (JSON, but no JSON-RPC 2.0
 * message), ERR says why and RET->id holds the id when one could be read
 * (else NULL: the error is answered with a null id). */
int agsx_rpc_parse(const char *buf, size_t len, struct agsx_rpc_msg *ret, int *ret_code,
                   agsx_error_t *err);
void agsx_rpc_msg_clear(struct agsx_rpc_msg *m);

/* {"jsonrpc":"2.0","id":ID,"result":RESULT}: ID is JSON text (NULL: null),
 * RESULT a JSON document. The caller frees the line (no newline). */
char *agsx_rpc_result(const char *id, const char *result, size_t *ret_len);
/* {"jsonrpc":"2.0","id":ID,"error":{"code":CODE,"message":MSG}}. */
char *agsx_rpc_error(const char *id, int code, const char *msg, size_t *ret_len);
/* A request id of PARAMS' KEY (notifications/cancelled's requestId) as JSON
 * text, or NULL when it is no string or number. */
char *agsx_rpc_id_of(yajl_val params, const char *key);

/* "/" + the percent-decoded S (the path of a resource URI); NULL for a bad
 * escape or an encoded NUL. */
char *agsx_rpc_uri_path(const char *s);

#endif
