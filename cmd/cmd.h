/* agsx CLI: the command table and the option tables that drive parsing,
 * --help, and (through `agsx __options`) the doc-agreement test. Only cmd/
 * prints to the user or chooses exit codes. */
#ifndef AGSX_CMD_H
#define AGSX_CMD_H

#include "util/util.h"

#include <signal.h>

/* Docker's exit codes: 125 when agsx itself fails. */
#define AGSX_EXIT_FAILURE 125

struct agsx_ctx {
  const char *root;  /* image store */
  const char *state; /* sandbox state */
  bool json;
};

struct agsx_option {
  const char *long_name;
  char short_name; /* 0: none */
  const char *arg; /* NULL: a flag; else the argument's name ("DIR") */
  const char *help;
  int id; /* passed to the command's handler */
};

struct agsx_command {
  const char *name;  /* "run", "image load" */
  const char *usage; /* "[OPTIONS] IMAGE [CMD...]" */
  const char *summary;
  const struct agsx_option *options; /* ends with a zeroed entry; NULL: none */
  int (*run)(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv);
  const char *alias_of; /* documented alias ("pull" -> "image pull") */
  const char *notes;    /* printed by --help after the summary; NULL: none */
};

/* Option ids shared by the tables in cmd/agsx.c and their handlers. */
enum {
  O_TAG = 1,
  O_QUIET,
  O_DIGESTS,
  O_DRY_RUN,
  O_IMAGES,
  O_JSON,
  O_RM,
  O_INTERACTIVE,
  O_TTY,
  O_READ_ONLY,
  O_TIMING,
  O_USER,
  O_WORKDIR,
  O_HOSTNAME,
  O_NETWORK,
  O_SECURITY_OPT,
  O_ENV,
  O_VOLUME,
  O_TIMEOUT,
  O_MEMORY,
  O_DISK,
  O_PIDS,
  O_CPUS,
  O_DETACH,
  O_NAME,
  O_ALL,
  O_SIGNAL,
  O_ARCHIVE,
  O_FOLLOW_LINK,
  O_PUBLISH,
  O_INSECURE,
  O_AUTHFILE,
  O_ALLOW,
  O_DENY,
  O_RULES,
  O_SUBNET,
  O_FILE,
  O_BUILD_ARG,
  O_NO_CACHE,
  O_PLATFORM,
  O_PULL,
  O_IMAGE,
  O_OUTPUT,
  O_FORMAT,
  O_NO_TRUNC,
  O_FORCE,
  O_NO_STREAM,
  O_SNAPSHOT,
  O_COUNT,
  O_LABEL,
  O_FILTER,
  O_LISTEN,
  O_LISTEN_PUBLIC,
  O_SERVE_HOST,
  O_API_KEY,
  O_API_KEY_FILE,
  O_TEMPLATE,
  O_DEFAULT_USER,
  O_FOLLOW,
  O_TAIL,
  O_TIMESTAMPS,
  O_EXEC,
  O_EGRESS_ALLOW,
  O_EGRESS_DENY,
  O_EGRESS_RULES,
  O_EGRESS_CLEAR,
  O_POOL,
  O_SIZE,
  O_MAX_SANDBOXES,
  O_ALLOW_HOST_PATH,
  O_VIEW,
  O_TAKEOVER,
  O_PORTS_LISTEN,
  O_PORTS_TLS,
  O_PORTS_CERT,
  O_PORTS_KEY,
};

/* The table, in cmd/agsx.c. */
extern const struct agsx_command agsx_commands[];
extern const struct agsx_option agsx_global_options[];
const struct agsx_command *agsx_command_find(const char *name);

/* Parses ARGV (ARGV[0] is the command name) against CMD's options, calling
 * ON_OPT for each. Handles --help. Options stop at the first operand
 * (so `run IMG ls -l` passes -l to ls). Returns the index of the first
 * operand, or -1 after printing an error (exit 125). Exits 0 after --help. */
typedef int (*agsx_opt_fn)(void *data, int id, const char *arg);
int agsx_parse_options(const struct agsx_command *cmd, int argc, char **argv, agsx_opt_fn on_opt,
                       void *data);
void agsx_print_command_help(const struct agsx_command *cmd, FILE *out);
void agsx_print_main_help(FILE *out);

/* Prints "agsx: MSG" for ERR, frees it and returns 125. */
int agsx_fail(agsx_error_t *err);
/* The state directory for a command on SANDBOX... (what ended is reaped
 * first): -1 when there is none (no sandbox was ever made), and each
 * lookup then says "no such sandbox". */
int agsx_cmd_state_open(struct agsx_ctx *ctx);
/* SANDBOX's id (an id, a unique id prefix or a name), through the one
 * lookup of state.h that every command uses. */
int agsx_cmd_lookup_id(int statefd, const char *sandbox, char ret_id[33], agsx_error_t *err);
/* Prints "agsx: ..." and returns 125. */
int agsx_failf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Commands. */
int agsx_cmd_image_ls(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_image_load(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_image_rm(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_image_inspect(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_image_pull(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_image_tag(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_image_save(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_image_push(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_run(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_pool_create(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_pool_ls(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_pool_rm(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_cp(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_exec(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_ls(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_kill(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_update(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_inspect(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_wait(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_logs(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_rm(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_stats(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_build(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_gc(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_serve(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_mcp(struct agsx_ctx *, const struct agsx_command *, int, char **);
/* --allow RULE, --deny RULE and --rules FILE (run and network create). */
struct agsx_sg_rule;
int agsx_cmd_parse_rule_opt(int id, const char *v, struct agsx_sg_rule **rules, size_t *n,
                            agsx_error_t *err);
/* --egress-allow RULE, --egress-deny RULE, --egress-rules FILE (run, build, update). */
struct agsx_egress;
int agsx_cmd_parse_egress_opt(int id, const char *v, struct agsx_egress *e, agsx_error_t *err);
int agsx_cmd_netlog(struct agsx_ctx *, const struct agsx_command *, int, char **);
/* Prints SANDBOX's blocked log (netlog, logs --network), as JSON with JSON. */
int agsx_cmd_netlog_show(struct agsx_ctx *ctx, const char *sandbox, bool json);
int agsx_cmd_network_create(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_network_update(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_network_ls(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_network_rm(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_volume_create(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_volume_ls(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_volume_rm(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_network_inspect(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_browser(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_port(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_info(struct agsx_ctx *, const struct agsx_command *, int, char **);
/* agsx code keeps its option table and ids in cmd/code.c. */
extern const struct agsx_option agsx_code_opts[];
int agsx_cmd_code(struct agsx_ctx *, const struct agsx_command *, int, char **);
/* Pulls IMAGE for run (a line on stderr, progress on a terminal). */
int agsx_cmd_pull_quietly(struct agsx_ctx *ctx, const char *image, agsx_error_t *err);
int agsx_cmd_pause(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_unpause(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_snapshot(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_snapshot_ls(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_snapshot_rm(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_rollback(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_commit(struct agsx_ctx *, const struct agsx_command *, int, char **);
int agsx_cmd_fork(struct agsx_ctx *, const struct agsx_command *, int, char **);
/* Blocks SIGINT, SIGTERM and SIGHUP (old mask in *OLD) while a sandbox is
 * frozen for our copy (cmd/commit.c). */
void agsx_cmd_block_stop_signals(sigset_t *old);
int agsx_cmd_not_yet(struct agsx_ctx *, const struct agsx_command *, int, char **);

#endif
