/* agsx — mcp: what the server loop (mcp.c) and the tools (tools.c) share. */
#ifndef AGSX_MCP_INTERNAL_H
#define AGSX_MCP_INTERNAL_H

#include "api/spawn.h"
#include "mcp/rpc.h"
#include "mcp/mcp.h"
#include "util/json.h"

struct agsx_mcp {
  const struct agsx_mcp_config *cfg;
  int statefd, sigfd;
  struct agsx_spawner spawner;
  char session[17];
  /* the input: bytes read and not yet handled; SCANNED: how far an exec
   * under way has looked for its cancellation */
  char *in;
  size_t in_len, in_cap, scanned;
  bool discarding; /* inside a line over AGSX_RPC_LINE_MAX */
  bool eof, stop;
  /* the request being answered (its id's JSON text) and whether the client
   * cancelled it */
  const char *current_id;
  bool cancelled;
  /* its _meta.progressToken (JSON text) or NULL; the last notification's
   * time (monotonic) and progress */
  char *progress_token;
  int64_t progress_at, progress;
  /* content items a tool adds after its text (",{...}" each), or NULL */
  char *extra_content;
  /* the config's host_paths, opened (O_PATH | O_DIRECTORY) */
  int host_fds[AGSX_MCP_HOST_PATHS_MAX];
  size_t n_host;
};

/* Reads what IN_FD has (non-blocking): false at EOF or error. Reads
 * nothing while the input holds AGSX_MCP_INPUT_MAX bytes not handled. */
bool agsx_mcp_read_input(struct agsx_mcp *s);
#define AGSX_MCP_INPUT_MAX (2 * AGSX_RPC_LINE_MAX)
/* Whether the input has room for more (the fd is worth polling). */
bool agsx_mcp_input_room(const struct agsx_mcp *s);
/* Looks at the complete lines not scanned yet for notifications/cancelled
 * of the current request (they stay in the input, handled later). */
void agsx_mcp_scan_cancel(struct agsx_mcp *s);

/* notifications/progress of the current call, with MESSAGE, when its
 * client asked for them (a progressToken) and the last was a second ago
 * or more; PROGRESS: how far it is (growing), TOTAL: of what (0: unknown). */
void agsx_mcp_progress(struct agsx_mcp *s, int64_t progress, int64_t total, const char *message);

/* resources/list's, resources/templates/list's and resources/read's
 * results into G (resources.c); a read's failure: -1 with *RET_CODE. */
void agsx_mcp_resources_list(struct agsx_mcp *s, yajl_gen g);
void agsx_mcp_resource_templates(yajl_gen g);
int agsx_mcp_resource_read(struct agsx_mcp *s, const char *uri, yajl_gen g, int *ret_code,
                           agsx_error_t *err);

/* Adds ITEM (",{...}": a content item, JSON) to the current call's result. */
void agsx_mcp_add_content(struct agsx_mcp *s, const char *item);

/* tools/list's result into G. */
void agsx_mcp_tools_list(yajl_gen g);
/* tools/call: 0 with RET_RESULT (a CallToolResult, JSON: isError for a
 * failure of the tool), -1 with *RET_CODE (a JSON-RPC error: unknown
 * tool, invalid arguments) and ERR. 1: the client cancelled it (no
 * answer is due). */
int agsx_mcp_tools_call(struct agsx_mcp *s, yajl_val params, char **ret_result, int *ret_code,
                        agsx_error_t *err);
/* Stops every running sandbox of the session without keep. */
void agsx_mcp_end_session(struct agsx_mcp *s);

#endif
