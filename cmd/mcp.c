/* agsx mcp: sandboxes as Model Context Protocol tools over stdio
 * (src/mcp/mcp.h). Options become an agsx_mcp_config; the library serves
 * until stdin ends. */
#include "config.h"

#include "cmd.h"
#include "mcp/mcp.h"
#include "net/netspec.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_SANDBOXES_LIMIT 256

struct mcp_opts {
  const char *network;
  unsigned max_sandboxes;
  char **host_paths; /* --allow-host-path, real paths */
};

static int on_mcp_opt(void *data, int id, const char *v) {
  struct mcp_opts *o = data;
  agsx_error_t err = NULL;
  switch (id) {
  case O_NETWORK: {
    enum agsx_net_mode mode;
    const char *name;
    if (agsx_net_mode_parse(v, &mode, &name, &err) < 0)
      return agsx_failf("mcp: --network: %s", err->msg), agsx_error_free(&err), -1;
    o->network = strcmp(v, "internal") == 0 ? NULL : v;
    return 0;
  }
  case O_ALLOW_HOST_PATH: {
    _cleanup_free_ char *real = realpath(v, NULL);
    struct stat st;
    if (real == NULL || stat(real, &st) < 0)
      return agsx_failf("mcp: --allow-host-path `%s`: %s", v, strerror(errno)), -1;
    if (!S_ISDIR(st.st_mode))
      return agsx_failf("mcp: --allow-host-path `%s`: not a directory", v), -1;
    if (strcmp(real, "/") == 0)
      return agsx_failf("mcp: --allow-host-path `%s` is the whole host: name a directory of "
                        "files meant for the agent",
                        v),
             -1;
    if (agsx_strv_len(o->host_paths) >= AGSX_MCP_HOST_PATHS_MAX)
      return agsx_failf("mcp: at most %d --allow-host-path", AGSX_MCP_HOST_PATHS_MAX), -1;
    agsx_strv_push(&o->host_paths, real);
    return 0;
  }
  case O_MAX_SANDBOXES: {
    char *end;
    errno = 0;
    unsigned long n = strtoul(v, &end, 10);
    if (errno || *end || end == v || v[0] == '-' || n < 1 || n > MAX_SANDBOXES_LIMIT)
      return agsx_failf("mcp: invalid --max-sandboxes `%s` (1 to %d)", v, MAX_SANDBOXES_LIMIT), -1;
    o->max_sandboxes = (unsigned)n;
    return 0;
  }
  }
  return 0;
}

int agsx_cmd_mcp(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  struct mcp_opts o = {.max_sandboxes = AGSX_MCP_MAX_SANDBOXES};
  _cleanup_strv_ char **host_paths = NULL;
  int i = agsx_parse_options(cmd, argc, argv, on_mcp_opt, &o);
  host_paths = o.host_paths;
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i < argc)
    return agsx_failf("mcp: unexpected argument `%s`", argv[i]);
  struct agsx_mcp_config cfg = {
      .root = ctx->root,
      .state = ctx->state,
      .network = o.network,
      .max_sandboxes = o.max_sandboxes,
      .host_paths = host_paths,
      .in_fd = STDIN_FILENO,
      .out_fd = STDOUT_FILENO,
  };
  agsx_error_t err = NULL;
  if (agsx_mcp_serve(&cfg, &err) < 0) {
    agsx_failf("mcp: %s", err->msg);
    agsx_error_free(&err);
    return AGSX_EXIT_FAILURE;
  }
  return 0;
}
