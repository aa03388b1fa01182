/* agsx mcp: sandboxes as Model Context Protocol tools over stdio, or over
 * Streamable HTTP with --listen (src/mcp/mcp.h). Options become an
 * agsx_mcp_config; the library serves until stdin ends (or a signal). */
#include "config.h"

#include "cmd.h"
#include "api/auth.h"
#include "api/server.h"
#include "mcp/mcp.h"
#include "net/netspec.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_SANDBOXES_LIMIT 256

struct mcp_opts {
  const char *network;
  unsigned max_sandboxes;
  char **host_paths; /* --allow-host-path, real paths */
  const char *listen;
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
  case O_LISTEN: {
    struct sockaddr_storage ss;
    unsigned len;
    bool loopback;
    if (agsx_api_listen_parse(v, &ss, &len, &loopback, &err) < 0)
      return agsx_failf("mcp: --listen `%s`: %s", v, err->msg), agsx_error_free(&err), -1;
    if (!loopback)
      return agsx_failf("mcp: --listen `%s` is not a loopback address: agsx mcp listens on "
                        "loopback only",
                        v),
             -1;
    o->listen = v;
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

static const char *generated_token;

static void on_ready(const char *listen) {
  fprintf(stderr, "agsx: mcp: listening on http://%s/mcp\n", listen);
  if (generated_token)
    fprintf(stderr, "agsx: mcp: token (Authorization: Bearer): %s\n", generated_token);
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
      .listen = o.listen,
      .ready = on_ready,
  };
  char token[33];
  if (o.listen) {
    /* The token: $AGSX_MCP_TOKEN, else a new one, said once. */
    cfg.token = getenv("AGSX_MCP_TOKEN");
    if (cfg.token && !agsx_api_key_is_valid(cfg.token))
      return agsx_failf("mcp: $AGSX_MCP_TOKEN must be 8 to 256 printable characters");
    if (cfg.token == NULL || *cfg.token == '\0') {
      agsx_random_hex(token, 16);
      cfg.token = generated_token = token;
    }
  }
  agsx_error_t err = NULL;
  if ((o.listen ? agsx_mcp_serve_http(&cfg, &err) : agsx_mcp_serve(&cfg, &err)) < 0) {
    agsx_failf("mcp: %s", err->msg);
    agsx_error_free(&err);
    return AGSX_EXIT_FAILURE;
  }
  return 0;
}
