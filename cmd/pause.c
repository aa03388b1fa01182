/* agsx pause, unpause: freeze and thaw running sandboxes (sandbox/freeze.h). */
#include "config.h"

#include "cmd.h"
#include "sandbox/freeze.h"
#include "state/state.h"

#include <fcntl.h>

static int no_opt(void *data, int id, const char *arg) {
  (void)data, (void)id, (void)arg;
  return 0;
}

/* Each SANDBOX in turn; one that fails is said and the others still go. */
static int each(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv,
                int (*fn)(int, const char *, agsx_error_t *)) {
  int i = agsx_parse_options(cmd, argc, argv, no_opt, NULL);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i >= argc)
    return agsx_failf("%s: give SANDBOX... (see agsx %s --help)", cmd->name, cmd->name);
  _cleanup_close_ int statefd = agsx_cmd_state_open(ctx);
  int rc = 0;
  for (; i < argc; i++) {
    agsx_error_t err = NULL;
    char id[33];
    if (agsx_cmd_lookup_id(statefd, argv[i], id, &err) < 0 || fn(statefd, id, &err) < 0) {
      rc = agsx_fail(&err);
      continue;
    }
    printf("%s\n", argv[i]);
  }
  return rc;
}

int agsx_cmd_pause(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  return each(ctx, cmd, argc, argv, agsx_sandbox_pause);
}

int agsx_cmd_unpause(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  return each(ctx, cmd, argc, argv, agsx_sandbox_unpause);
}
