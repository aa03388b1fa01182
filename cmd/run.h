/* agsx run's options, shared with `agsx pool create` (cmd/pool.c), which
 * takes run's sandbox options through the same parser. */
#ifndef AGSX_CMD_RUN_H
#define AGSX_CMD_RUN_H

#include "cmd.h"
#include "net/egress.h"
#include "net/netspec.h"
#include "sandbox/lifecycle.h"

struct run_opts {
  bool rm, interactive, tty, json, read_only, timing, detach;
  bool new_privs;   /* --security-opt no-new-privileges=false */
  const char *pool; /* --pool NAME (sandbox/pool.h) */
  const char *user, *workdir, *hostname, *name, *network, *seccomp;
  char **env;
  size_t n_env;
  char **labels;
  struct agsx_bind *binds;
  size_t n_binds;
  enum agsx_net_mode net_mode;
  const char *net_name;
  struct agsx_sg_rule *rules;
  size_t n_rules;
  struct agsx_egress egress;
  const char *pull;        /* --pull POLICY, or NULL: $AGSX_PULL / missing */
  struct agsx_port *ports; /* -p; host ports as bound once started */
  size_t n_ports;
  uint64_t timeout, memory, pids, disk;
  double cpus;
};

/* One option of run's table (ID, its value V); prints the error itself. */
int agsx_run_opt(void *data, int id, const char *v);
void agsx_run_opts_clear(struct run_opts *o);
/* The spec of a start of IMAGE with CMD (strings borrowed from O). */
void agsx_run_fill_spec(struct agsx_ctx *ctx, const struct run_opts *o, const char *image,
                        char **cmd, int64_t t0, struct agsx_run_spec *spec);
/* Starts it, in the foreground or detached as O says; the exit code.
 * STARTUP: the process's start-up before main() for --timing, or 0. */
int agsx_run_start(const struct run_opts *o, const struct agsx_run_spec *spec, int64_t startup);
/* `run --pool`: claims a parked sandbox of the pool, or starts one cold
 * (with the pool's configuration) when it has none. */
int agsx_run_pool(struct agsx_ctx *ctx, struct run_opts *o, int argc, char **argv, int64_t t0);

#endif
