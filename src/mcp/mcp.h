/* agsx — mcp: `agsx mcp`, a Model Context Protocol server over stdio (or
 * Streamable HTTP: http.c, each session a stdio server in a worker) that
 * offers agsx sandboxes as tools (sandboxes, exec, files, snapshots,
 * rollback and fork: tools.c and agsx-mcp(1) list them), and the
 * session's sandboxes and their files as resources (resources.c).
 *
 * Messages are newline-delimited JSON-RPC 2.0 (rpc.h) on IN_FD, answers on
 * OUT_FD, logs only through the log sink (stderr). It calls the same
 * library as `agsx serve`: sandboxes are created by the spawner
 * (api/spawn.h, forked first, so no supervisor holds the client's pipes),
 * commands run as the supervisor's processes (sandbox/processes.h), files
 * go through api/fsops.h (openat2 RESOLVE_IN_ROOT in the sandbox's root).
 *
 * A session is one run: its sandboxes carry the label mcp.session=<id>,
 * a tool reaches only those, and at the end of IN_FD every one not created
 * with keep is stopped. Calls are handled one at a time; while an exec
 * runs, the input is still read, so notifications/cancelled of that exec
 * kills its process (its timeout kills its whole tree); other requests
 * wait for the exec to end. */
#ifndef AGSX_MCP_MCP_H
#define AGSX_MCP_MCP_H

#include "util/util.h"

#define AGSX_MCP_LIFETIME_DEFAULT 1800u /* seconds: a sandbox's default lifetime */
#define AGSX_MCP_OUTPUT_CAP (1u << 20)  /* bytes of stdout, and of stderr, per exec */
#define AGSX_MCP_FILE_MAX (1u << 20)    /* bytes of one file_read or file_write */
#define AGSX_MCP_MAX_SANDBOXES 8u
#define AGSX_MCP_LABEL_SESSION "mcp.session"
#define AGSX_MCP_LABEL_KEEP "mcp.keep"

#define AGSX_MCP_HOST_PATHS_MAX 16

struct agsx_mcp_config {
  const char *root, *state;
  const char *network;    /* the network a sandbox may ask for beyond internal, or NULL */
  unsigned max_sandboxes; /* running ones of this session at once */
  /* --allow-host-path: absolute real paths of host directories the copy
   * tools may use (NULL: none); opened once at the start, so what they
   * name cannot change under the server */
  char **host_paths;
  int in_fd, out_fd;
  /* Streamable HTTP (agsx_mcp_serve_http): the loopback ADDR:PORT, the
   * bearer token every request must carry, and what to call once the
   * listener is up */
  const char *listen, *token;
  void (*ready)(const char *listen);
};

/* Serves until IN_FD ends (or SIGINT/SIGTERM); then stops the session's
 * sandboxes that were not created with keep. */
int agsx_mcp_serve(const struct agsx_mcp_config *cfg, agsx_error_t *err);

/* Serves MCP over Streamable HTTP at http://LISTEN/mcp (http.c): each
 * session a worker process running agsx_mcp_serve on pipes. Until SIGINT
 * or SIGTERM; then every session ends as a stdio one does. */
int agsx_mcp_serve_http(const struct agsx_mcp_config *cfg, agsx_error_t *err);

#endif
