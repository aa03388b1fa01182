/* agsx pool create/ls/rm, and `run --pool`'s claim: warm pools of parked
 * sandboxes (src/sandbox/pool.h does the work). */
#include "config.h"

#include "cmd.h"
#include "run.h"
#include "table.h"
#include "image/store.h"
#include "sandbox/pool.h"
#include "state/state.h"
#include "util/json.h"

#include <fcntl.h>
#include <string.h>

/* ---- pool create ---------------------------------------------------------------------------- */

struct create_opts {
  struct run_opts run;
  const char *image;
  unsigned size;
  bool json;
};

static int on_create_opt(void *data, int id, const char *v) {
  struct create_opts *o = data;
  switch (id) {
  case O_IMAGE: o->image = v; return 0;
  case O_JSON: o->json = true; return 0;
  case O_SIZE: {
    char *end;
    errno = 0;
    unsigned long n = strtoul(v, &end, 10);
    if (errno || *end || v[0] == '-' || n == 0 || n > AGSX_POOL_MAX_SIZE)
      return agsx_failf("pool create: invalid --size `%s` (1 to %d)", v, AGSX_POOL_MAX_SIZE), -1;
    o->size = (unsigned)n;
    return 0;
  }
  default: return agsx_run_opt(&o->run, id, v);
  }
}

static int pull_quietly(void *data, const char *image, agsx_error_t *err) {
  return agsx_cmd_pull_quietly(data, image, err);
}

static void print_pool_json(const struct agsx_pool_config *pc, unsigned parked, bool with_parked);

int agsx_cmd_pool_create(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc,
                         char **argv) {
  struct create_opts o = {.json = ctx->json};
  /* NAME may come first (`pool create NAME --image IMG`) or last. */
  const char *name = NULL;
  int shift = 0;
  if (argc > 1 && argv[1][0] != '-') {
    name = argv[1];
    shift = 1;
  }
  char **args = argv + shift;
  int nargs = argc - shift;
  if (shift)
    args[0] = argv[0];
  int i = agsx_parse_options(cmd, nargs, args, on_create_opt, &o);
  int code = AGSX_EXIT_FAILURE;
  if (i < 0)
    goto done;
  if (name == NULL && i < nargs)
    name = args[i++];
  if (i < nargs) {
    agsx_failf("pool create: unexpected argument `%s` (a pool's sandboxes get their command "
               "from run --pool)",
               args[i]);
    goto done;
  }
  if (name == NULL || o.image == NULL || o.size == 0) {
    agsx_failf("pool create: expected NAME, --image IMAGE and --size N (see agsx pool create "
               "--help)");
    goto done;
  }
  if (o.run.detach || o.run.json || o.run.timing) {
    agsx_failf("pool create: --detach, --json and --timing are run's, not a pool's");
    goto done;
  }
  for (size_t k = 0; k < o.run.n_binds; k++)
    if (o.run.binds[k].volume) {
      agsx_failf("pool create: volume `%s`: a pool's sandboxes take host paths, not named volumes",
                 o.run.binds[k].src);
      goto done;
    }
  struct agsx_run_spec spec;
  agsx_run_fill_spec(ctx, &o.run, o.image, NULL, agsx_mono_ns(), &spec);
  spec.pull_image = pull_quietly;
  spec.capture = false;
  agsx_error_t err = NULL;
  if (agsx_pool_create(&spec, name, o.size, &err) < 0) {
    code = agsx_fail(&err);
    goto done;
  }
  if (o.json) {
    struct agsx_pool_config pc;
    if (agsx_pool_read(ctx->state, name, &pc, &err) < 0) {
      code = agsx_fail(&err);
      goto done;
    }
    print_pool_json(&pc, pc.size, false);
    printf("\n");
    agsx_pool_config_clear(&pc);
  } else {
    printf("%s\n", name);
  }
  code = 0;
done:
  agsx_run_opts_clear(&o.run);
  return code;
}

/* ---- pool ls, rm ---------------------------------------------------------------------------- */

struct ls_opts {
  bool json, quiet;
};

static int on_ls_opt(void *data, int id, const char *v) {
  struct ls_opts *o = data;
  (void)v;
  if (id == O_JSON)
    o->json = true;
  else if (id == O_QUIET)
    o->quiet = true;
  return 0;
}

static void print_pool_json(const struct agsx_pool_config *pc, unsigned parked, bool with_parked) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "name", pc->name);
  agsx_json_kv_str(g, "image", pc->image);
  agsx_json_kv_str(g, "image_digest", pc->image_digest);
  agsx_json_kv_int(g, "size", pc->size);
  if (with_parked)
    agsx_json_kv_int(g, "parked", parked);
  agsx_json_kv_int(g, "lifetime", (int64_t)pc->lifetime);
  agsx_json_kv_str(g, "network", pc->network ? pc->network : "internal");
  agsx_json_key(g, "limits");
  yajl_gen_map_open(g);
  agsx_json_kv_int(g, "memory", (int64_t)pc->memory);
  agsx_json_kv_int(g, "pids", (int64_t)pc->pids);
  agsx_json_kv_int(g, "disk", (int64_t)pc->disk);
  agsx_json_key(g, "cpus");
  yajl_gen_double(g, pc->cpus);
  yajl_gen_map_close(g);
  agsx_json_kv_bool(g, "read_only", pc->read_only);
  agsx_json_kv_str(g, "seccomp", pc->seccomp ? pc->seccomp : "default");
  agsx_json_kv_bool(g, "no_new_privileges", !pc->new_privs);
  agsx_json_key(g, "volumes");
  yajl_gen_array_open(g);
  for (size_t i = 0; i < pc->n_binds; i++) {
    _cleanup_free_ char *v =
        xasprintf("%s:%s%s", pc->binds[i].src, pc->binds[i].dst, pc->binds[i].ro ? ":ro" : "");
    agsx_json_str(g, v);
  }
  yajl_gen_array_close(g);
  agsx_json_key(g, "env");
  yajl_gen_array_open(g);
  for (size_t i = 0; pc->env && pc->env[i]; i++)
    agsx_json_str(g, pc->env[i]);
  yajl_gen_array_close(g);
  agsx_json_kv_str(g, "user", pc->user);
  agsx_json_kv_str(g, "workdir", pc->workdir);
  _cleanup_free_ char *created = agsx_format_rfc3339(pc->created);
  agsx_json_kv_str(g, "created", created);
  yajl_gen_map_close(g);
  size_t len;
  _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
  fwrite(s, 1, len, stdout);
}

int agsx_cmd_pool_ls(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  struct ls_opts o = {.json = ctx->json};
  int i = agsx_parse_options(cmd, argc, argv, on_ls_opt, &o);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i < argc)
    return agsx_failf("pool ls: unexpected argument `%s`", argv[i]);
  agsx_error_t err = NULL;
  struct agsx_pool_info *v = NULL;
  size_t n = 0;
  if (agsx_pool_list(ctx->state, &v, &n, &err) < 0)
    return agsx_fail(&err);
  if (o.json) {
    printf("[");
    for (size_t k = 0; k < n; k++) {
      printf(k ? "," : "");
      print_pool_json(&v[k].config, v[k].parked, true);
    }
    printf("]\n");
  } else if (o.quiet) {
    for (size_t k = 0; k < n; k++)
      printf("%s\n", v[k].config.name);
  } else {
    struct agsx_table t;
    agsx_table_init(
        &t, 6, (const char *const[]){"NAME", "IMAGE", "SIZE", "PARKED", "NETWORK", "LIFETIME"});
    for (size_t k = 0; k < n; k++) {
      char size[16], parked[16];
      snprintf(size, sizeof(size), "%u", v[k].config.size);
      snprintf(parked, sizeof(parked), "%u", v[k].parked);
      _cleanup_free_ char *life = agsx_format_duration(v[k].config.lifetime);
      agsx_table_add(
          &t, (const char *const[]){v[k].config.name, v[k].config.image, size, parked,
                                    v[k].config.network ? v[k].config.network : "internal", life});
    }
    agsx_table_print(&t, stdout);
    agsx_table_clear(&t);
  }
  agsx_pool_list_free(v, n);
  return 0;
}

int agsx_cmd_pool_rm(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  struct ls_opts o = {0};
  int i = agsx_parse_options(cmd, argc, argv, on_ls_opt, &o);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i >= argc)
    return agsx_failf("pool rm: expected a pool NAME");
  int code = 0;
  for (; i < argc; i++) {
    agsx_error_t err = NULL;
    if (agsx_pool_remove(ctx->state, argv[i], &err) < 0)
      code = agsx_fail(&err);
    else
      printf("%s\n", argv[i]);
  }
  return code;
}

/* ---- run --pool ------------------------------------------------------------------------------ */

/* Whether NAME is an image of the store (then it is IMAGE, not CMD). */
static bool is_image(const char *root, const char *name) {
  _cleanup_store_ struct agsx_store *s = NULL;
  agsx_error_t err = NULL;
  struct agsx_store_image img = {0};
  bool yes =
      agsx_store_open(root, false, &s, &err) == 0 && agsx_store_resolve(s, name, &img, &err) == 0;
  agsx_error_free(&err);
  free(img.ref);
  agsx_descriptor_clear(&img.manifest);
  return yes;
}

/* What the claimer prints at the end, as run_foreground does. */
static int claimed_end(const struct run_opts *o, const struct agsx_pool_claimed *c,
                       struct agsx_output out[2], int64_t t0) {
  agsx_error_t err = NULL;
  struct agsx_claim_end end;
  int code;
  if (agsx_pool_claim_wait(c->conn, o->json ? out : NULL, &end, &err) < 0) {
    end.error = xstrdup(err->msg);
    snprintf(end.stop_reason, sizeof(end.stop_reason), "error");
    agsx_error_free(&err);
  }
  code = end.exit_code;
  /* The end's own time: from the command's exec to its end's answer. */
  if (o->timing && c->exec_ns)
    dprintf(STDERR_FILENO, "agsx: timing: exec to end %.3f ms, total %.3f ms\n",
            (double)(agsx_mono_ns() - c->exec_ns) / 1e6, (double)(agsx_mono_ns() - t0) / 1e6);
  if (strcmp(end.stop_reason, "oom") == 0 && !o->json)
    dprintf(STDERR_FILENO, "agsx: sandbox %.12s: out of memory: killed\n", c->id);
  if (strcmp(end.stop_reason, "timeout") == 0 && !o->json)
    dprintf(STDERR_FILENO, "agsx: sandbox %.12s: deadline reached: stopped\n", c->id);
  if (o->json) {
    struct agsx_result r = {
        .exit_code = code,
        .out = out,
        .duration_ms = (agsx_mono_ns() - t0) / 1000000,
        .stop_reason = end.stop_reason,
        .signal = end.signal,
        .id = c->id,
        .name = o->name,
        .error = end.error,
    };
    size_t len;
    _cleanup_free_ char *s = agsx_result_json(&r, &len);
    fwrite(s, 1, len, stdout);
    fputc('\n', stdout);
    fflush(stdout);
  } else if (end.error) {
    agsx_failf("%s", end.error);
  }
  free(end.error);
  return code;
}

/* A claim that failed as a start fails (126, 127, 125). */
static int claim_failed(const struct run_opts *o, int code, agsx_error_t *err, int64_t t0) {
  if (!o->json || o->detach)
    return agsx_fail(err), code;
  struct agsx_output out[2] = {{.fd = -1}, {.fd = -1}};
  struct agsx_result r = {
      .exit_code = code,
      .out = out,
      .duration_ms = (agsx_mono_ns() - t0) / 1000000,
      .stop_reason = "error",
      .name = o->name,
      .error = (*err)->msg,
  };
  size_t len;
  _cleanup_free_ char *s = agsx_result_json(&r, &len);
  fwrite(s, 1, len, stdout);
  fputc('\n', stdout);
  agsx_error_free(err);
  return code;
}

static int do_claim(struct agsx_ctx *ctx, struct run_opts *o, const struct agsx_pool_config *pc,
                    char **cmd, bool *ret_claimed, int64_t t0) {
  struct agsx_claim cl = {
      .argv = cmd,
      .env = o->env,
      .labels = o->labels,
      .cwd = (char *)o->workdir,
      .user = (char *)o->user,
      .name = (char *)o->name,
      .hostname = (char *)o->hostname,
      .timeout = o->timeout,
      .rm = o->rm,
      .detach = o->detach,
  };
  struct agsx_output out[2] = {{.fd = -1}, {.fd = -1}};
  int pipes[2][2] = {{-1, -1}, {-1, -1}};
  _cleanup_close_ int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  int fds[3] = {o->interactive ? STDIN_FILENO : devnull, STDOUT_FILENO, STDERR_FILENO};
  for (int i = 0; o->json && !o->detach && i < 2; i++) {
    if (pipe2(pipes[i], O_CLOEXEC) < 0)
      return agsx_failf("run: pipe: %s", strerror(errno));
    fds[1 + i] = pipes[i][1];
    out[i].fd = pipes[i][0];
    fcntl(out[i].fd, F_SETFL, O_NONBLOCK);
  }
  agsx_error_t err = NULL;
  struct agsx_pool_claimed c;
  int code = 125;
  int r = agsx_pool_claim(ctx->root, ctx->state, pc, &cl, o->detach ? NULL : fds, ret_claimed, &c,
                          &code, &err);
  for (int i = 0; i < 2; i++)
    agsx_closep(&pipes[i][1]);
  if (r < 0 || !*ret_claimed) {
    for (int i = 0; i < 2; i++)
      agsx_output_clear(&out[i]);
    return r < 0 ? claim_failed(o, code, &err, t0) : 0;
  }
  /* "start to exec": run's start to the command's execve, stamped by the
   * sandbox's init (the same clock); "claim": to the answer, here. */
  if (o->timing)
    dprintf(STDERR_FILENO,
            "agsx: timing: claim %.3f ms, start to exec %.3f ms, before the request %.3f ms, "
            "request to answer %.3f ms, supervisor accept to exec %.3f ms\n",
            (double)(agsx_mono_ns() - t0) / 1e6,
            c.exec_ns > t0 ? (double)(c.exec_ns - t0) / 1e6 : 0.0, (double)(c.sent_ns - t0) / 1e6,
            (double)(c.answered_ns - c.sent_ns) / 1e6, (double)c.supervisor_us / 1e3);
  if (o->detach) {
    if (o->json) {
      size_t len;
      _cleanup_free_ char *s = agsx_started_json(c.id, o->name, &len);
      printf("%s\n", s);
    } else {
      printf("%s\n", c.id);
    }
    return 0;
  }
  code = claimed_end(o, &c, out, t0);
  for (int i = 0; i < 2; i++)
    agsx_output_clear(&out[i]);
  return code;
}

/* The pool is empty: a cold start of the pool's configuration. */
static int cold_start(struct agsx_ctx *ctx, struct run_opts *o, const struct agsx_pool_config *pc,
                      char **cmd, int64_t t0) {
  struct agsx_run_spec spec, pool;
  agsx_run_fill_spec(ctx, o, pc->image, cmd, t0, &spec);
  agsx_pool_spec(pc, ctx->root, ctx->state, &pool);
  _cleanup_strv_ char **env = agsx_strv_concat(pc->env, o->env);
  spec.env = env;
  spec.user = o->user ? o->user : pc->user;
  spec.workdir = o->workdir ? o->workdir : pc->workdir;
  spec.network = pool.network;
  spec.memory = pool.memory;
  spec.pids = pool.pids;
  spec.disk = pool.disk;
  spec.cpus = pool.cpus;
  spec.read_only = pool.read_only;
  spec.seccomp = pool.seccomp;
  spec.new_privs = pool.new_privs;
  spec.binds = pool.binds;
  spec.n_binds = pool.n_binds;
  return agsx_run_start(o, &spec, 0);
}

int agsx_run_pool(struct agsx_ctx *ctx, struct run_opts *o, int argc, char **argv, int64_t t0) {
  agsx_error_t err = NULL;
  struct agsx_pool_config pc;
  if (agsx_pool_read(ctx->state, o->pool, &pc, &err) < 0)
    return agsx_failf("run: --pool: %s", err->msg), agsx_error_free(&err), AGSX_EXIT_FAILURE;
  /* IMAGE may be left out; given, it must be the pool's. */
  const char *image = NULL;
  if (argc > 0 && (strcmp(argv[0], pc.image) == 0 || is_image(ctx->root, argv[0]))) {
    image = argv[0];
    argc--, argv++;
  }
  struct agsx_run_spec given;
  agsx_run_fill_spec(ctx, o, image, argv, t0, &given);
  if (o->egress.n == 0)
    given.egress = NULL;
  /* A terminal is opened at the start: -t starts one cold, of the pool's
   * configuration (the claim path hands over stdio, not a pty). */
  given.tty = false;
  int code = AGSX_EXIT_FAILURE;
  bool claimed = false;
  if (agsx_pool_check(&pc, &given, &err) < 0) {
    code = agsx_failf("run: %s", err->msg);
    agsx_error_free(&err);
  } else {
    if (!o->tty)
      code = do_claim(ctx, o, &pc, argv, &claimed, t0);
    if (!claimed && o->tty) {
      code = cold_start(ctx, o, &pc, argv, t0);
    } else if (!claimed) {
      /* Empty (claimed faster than refilled, or its sandboxes were
       * killed): refilled meanwhile, and this one starts cold. */
      agsx_pool_refill_async(ctx->root, ctx->state, pc.name);
      code = cold_start(ctx, o, &pc, argv, t0);
    }
  }
  agsx_pool_config_clear(&pc);
  return code;
}
