/* agsx run: a command in a new sandbox, in the foreground or detached.
 * Options become an agsx_run_spec; the lifecycle (src/sandbox/lifecycle.h)
 * does the rest. Here: the terminal, timing lines, the documents printed,
 * the exit code. */
#include "config.h"

#include "cmd.h"
#include "run.h"
#include "io.h"
#include "image/registry/registry.h"
#include "net/egress.h"
#include "net/netspec.h"
#include "net/relay.h"
#include "sandbox/lifecycle.h"
#include "sandbox/volume.h"
#include "state/state.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int add_env(struct run_opts *o, const char *kv) {
  if (*kv == '\0' || *kv == '=')
    return agsx_failf("run: invalid environment variable `%s` (want KEY=VALUE)", kv), -1;
  char *v;
  if (strchr(kv, '='))
    v = xstrdup(kv);
  else if (getenv(kv)) /* -e KEY passes the caller's value, like Docker */
    v = xasprintf("%s=%s", kv, getenv(kv));
  else
    return 0;
  o->env = xrealloc(o->env, (o->n_env + 2) * sizeof(char *));
  o->env[o->n_env++] = v;
  o->env[o->n_env] = NULL;
  return 0;
}

static int add_bind(struct run_opts *o, const char *spec) {
  if (o->n_binds >= AGSX_MAX_BINDS)
    return agsx_failf("run: at most %d volumes", AGSX_MAX_BINDS), -1;
  _cleanup_free_ char *s = xstrdup(spec);
  char *dst = strchr(s, ':');
  if (dst == NULL || dst == s)
    return agsx_failf("run: invalid volume `%s` (want SRC:DST[:ro])", spec), -1;
  *dst++ = '\0';
  char *mode = strchr(dst, ':');
  bool ro = false;
  if (mode) {
    *mode++ = '\0';
    if (strcmp(mode, "ro") == 0)
      ro = true;
    else if (strcmp(mode, "rw") != 0)
      return agsx_failf("run: invalid volume mode `%s` (ro or rw)", mode), -1;
  }
  /* SRC without a `/` names a volume (made on first use, as Docker's). */
  bool volume = strchr(s, '/') == NULL;
  if (volume && !agsx_volume_name_is_valid(s))
    return agsx_failf("run: invalid volume name `%s`: letters, digits and _.- (at most %d, "
                      "starting with a letter or digit)",
                      s, AGSX_VOLUME_NAME_MAX),
           -1;
  if ((!volume && s[0] != '/') || dst[0] != '/' || !agsx_path_is_clean(dst + 1, 4096, 64))
    return agsx_failf("run: volume `%s`: both paths must be absolute and clean", spec), -1;
  struct stat st;
  if (!volume && stat(s, &st) < 0)
    return agsx_failf("run: volume source `%s`: %s", s, strerror(errno)), -1;
  o->binds = xrealloc(o->binds, (o->n_binds + 1) * sizeof(*o->binds));
  o->binds[o->n_binds++] = (struct agsx_bind){xstrdup(s), xstrdup(dst), ro, .volume = volume};
  return 0;
}

static int add_port(struct run_opts *o, const char *spec) {
  agsx_error_t err = NULL;
  struct agsx_port p;
  if (o->n_ports >= AGSX_MAX_PORTS)
    return agsx_failf("run: at most %d published ports", AGSX_MAX_PORTS), -1;
  if (agsx_port_parse(spec, &p, &err) < 0)
    return agsx_failf("run: %s", err->msg), agsx_error_free(&err), -1;
  o->ports = xrealloc(o->ports, (o->n_ports + 1) * sizeof(*o->ports));
  o->ports[o->n_ports++] = p;
  if (agsx_ports_check(o->ports, o->n_ports, &err) < 0)
    return agsx_failf("run: %s", err->msg), agsx_error_free(&err), -1;
  return 0;
}

static int parse_cpus(const char *v, double *ret) {
  char *end;
  errno = 0;
  double d = strtod(v, &end);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (errno || *end || !(d >= 0.01))
    return agsx_failf("run: invalid --cpus `%s` (a number of CPUs, e.g. 0.5 or 2)", v), -1;
  if (n > 0 && d > (double)n)
    return agsx_failf("run: --cpus `%s` is more than the %ld CPUs of this host", v, n), -1;
  *ret = d;
  return 0;
}

static int parse_count(const char *v, uint64_t *ret) {
  char *end;
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  if (errno || *end || n == 0 || n > 4194304 || v[0] == '-')
    return agsx_failf("run: invalid --pids `%s` (1 to 4194304)", v), -1;
  *ret = n;
  return 0;
}

static int parse_size_opt(const char *flag, const char *v, uint64_t min, uint64_t *ret) {
  agsx_error_t err = NULL;
  if (agsx_parse_size(v, ret, &err) < 0)
    return agsx_failf("run: %s: %s", flag, err->msg), agsx_error_free(&err), -1;
  if (*ret < min)
    return agsx_failf("run: %s `%s` is below the minimum of %llu bytes", flag, v,
                      (unsigned long long)min),
           -1;
  return 0;
}

int agsx_run_opt(void *data, int id, const char *v) {
  struct run_opts *o = data;
  agsx_error_t err = NULL;
  switch (id) {
  case O_RM: o->rm = true; return 0;
  case O_POOL:
    if (!agsx_name_is_valid(v))
      return agsx_failf("run: invalid pool name `%s`", v), -1;
    o->pool = v;
    return 0;
  case O_DETACH: o->detach = true; return 0;
  case O_NAME:
    if (!agsx_name_is_valid(v))
      return agsx_failf("run: invalid name `%s`: letters, digits and _.- (at most 64, starting "
                        "with a letter or digit)",
                        v),
             -1;
    o->name = v;
    return 0;
  case O_INTERACTIVE: o->interactive = true; return 0;
  case O_TTY: o->tty = true; return 0;
  case O_JSON: o->json = true; return 0;
  case O_READ_ONLY: o->read_only = true; return 0;
  case O_TIMING: o->timing = true; return 0;
  case O_USER: o->user = v; return 0;
  case O_WORKDIR:
    if (v[0] != '/')
      return agsx_failf("run: working directory `%s` must be absolute", v), -1;
    o->workdir = v;
    return 0;
  case O_HOSTNAME:
    if (!agsx_hostname_is_valid(v))
      return agsx_failf("run: invalid hostname `%s`", v), -1;
    o->hostname = v;
    return 0;
  case O_NETWORK:
    if (agsx_net_mode_parse(v, &o->net_mode, &o->net_name, &err) < 0)
      return agsx_failf("run: %s", err->msg), agsx_error_free(&err), -1;
    o->network = v;
    return 0;
  case O_ALLOW:
  case O_DENY:
  case O_RULES:
    if (agsx_cmd_parse_rule_opt(id, v, &o->rules, &o->n_rules, &err) < 0)
      return agsx_failf("run: %s", err->msg), agsx_error_free(&err), -1;
    return 0;
  case O_EGRESS_ALLOW:
  case O_EGRESS_DENY:
  case O_EGRESS_RULES:
    if (agsx_cmd_parse_egress_opt(id, v, &o->egress, &err) < 0)
      return agsx_failf("run: %s", err->msg), agsx_error_free(&err), -1;
    return 0;
  case O_PULL: {
    enum agsx_pull_policy pp;
    if (agsx_pull_policy_parse(v, &pp, &err) < 0)
      return agsx_failf("run: --pull: %s", err->msg), agsx_error_free(&err), -1;
    o->pull = v;
    return 0;
  }
  case O_SECURITY_OPT:
    /* Docker's spellings: no-new-privileges alone (or =true) is the
     * default; =false lets setuid programs work inside (agsx-run(1)). */
    if (agsx_str_has_prefix(v, "seccomp=")) {
      o->seccomp = v + 8;
      return 0;
    }
    if (strcmp(v, "no-new-privileges") == 0 || strcmp(v, "no-new-privileges=true") == 0 ||
        strcmp(v, "no-new-privileges:true") == 0) {
      o->new_privs = false;
      return 0;
    }
    if (strcmp(v, "no-new-privileges=false") == 0 || strcmp(v, "no-new-privileges:false") == 0) {
      o->new_privs = true;
      return 0;
    }
    return agsx_failf("run: unknown --security-opt `%s` "
                      "(seccomp=FILE|unconfined, no-new-privileges=true|false)",
                      v),
           -1;
  case O_ENV: return add_env(o, v);
  case O_LABEL: {
    /* Docker's --label: a later KEY wins; checked whole by the library. */
    const char *eq = strchr(v, '=');
    if (eq == NULL || eq == v)
      return agsx_failf("run: invalid label `%s` (want KEY=VALUE)", v), -1;
    _cleanup_free_ char *key = xstrndup(v, (size_t)(eq - v));
    agsx_labels_set(&o->labels, key, eq + 1);
    return 0;
  }
  case O_VOLUME: return add_bind(o, v);
  case O_PUBLISH: return add_port(o, v);
  case O_TIMEOUT:
    if (agsx_parse_duration(v, &o->timeout, &err) < 0)
      return agsx_failf("run: --timeout: %s", err->msg), agsx_error_free(&err), -1;
    return 0;
  case O_MEMORY: return parse_size_opt("--memory", v, 4u << 20, &o->memory);
  case O_DISK: return parse_size_opt("--disk", v, 1u << 20, &o->disk);
  case O_PIDS: return parse_count(v, &o->pids);
  case O_CPUS: return parse_cpus(v, &o->cpus);
  }
  return 0;
}

/* ---- the foreground: terminal, timing, the result ---------------------------------------- */

static int pull_image(void *data, const char *image, agsx_error_t *err) {
  return agsx_cmd_pull_quietly(data, image, err);
}

/* --timing: what agsx spent before run's first line (exec, dynamic
 * linking, library constructors, main's options): the task's time on a CPU
 * and waiting for one, from /proc/self/schedstat. Read only when asked. */
static bool wants_timing(int argc, char **argv) {
  for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
    if (strcmp(argv[i], "--timing") == 0)
      return true;
  return false;
}

static int64_t startup_ns(void) {
  _cleanup_close_ int fd = open("/proc/self/schedstat", O_RDONLY | O_CLOEXEC);
  char buf[128];
  ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
  if (n <= 0)
    return 0;
  buf[n] = '\0';
  unsigned long long on_cpu = 0, waiting = 0;
  if (sscanf(buf, "%llu %llu", &on_cpu, &waiting) != 2)
    return 0;
  return (int64_t)(on_cpu + waiting);
}

static void print_timing(const struct agsx_lifecycle *lc, int64_t startup, int64_t total_ns) {
  const struct agsx_timing *t = agsx_lifecycle_timing(lc);
  fprintf(stderr, "agsx: timing: startup %.3f ms, prepare %.3f ms", (double)startup / 1e6,
          (double)agsx_lifecycle_prepare_ns(lc) / 1e6);
  for (size_t i = 0; t && i < t->n; i++)
    fprintf(stderr, ", %s %.3f ms", t->name[i], (double)t->ns[i] / 1e6);
  fprintf(stderr, ", total %.3f ms\n", (double)total_ns / 1e6);
}

struct foreground {
  const struct run_opts *o;
  int64_t t0, startup;
  struct agsx_term term;
};

static void on_started(void *data, struct agsx_lifecycle *lc) {
  struct foreground *g = data;
  if (g->o->timing)
    print_timing(lc, g->startup, agsx_mono_ns() - g->t0);
  /* Raw only with -i: without it ^C must stay a signal to agsx, which
   * forwards it (as Docker does). */
  if (g->o->tty && g->o->interactive)
    agsx_term_raw(&g->term);
}

static void on_ended(void *data, struct agsx_lifecycle *lc) {
  struct foreground *g = data;
  (void)lc;
  agsx_term_restore(&g->term);
}

/* The run's end, measured: the command (until the supervisor saw its
 * end), the teardown, and run's own exit (the result, freeing), which ends
 * just before the process's exit. */
struct end_timing {
  int64_t command, teardown, release, ended;
};

static int run_foreground(struct agsx_lifecycle *lc, const struct run_opts *o, int64_t t0,
                          int64_t startup, struct end_timing *et) {
  agsx_error_t err = NULL;
  struct foreground g = {.o = o, .t0 = t0, .startup = startup};
  struct agsx_run_hooks hooks = {on_started, on_ended, &g};
  int code = agsx_lifecycle_run(lc, &hooks, &err);
  const struct agsx_sandbox *sb = agsx_lifecycle_sandbox(lc);
  if (sb && o->timing)
    *et = (struct end_timing){agsx_lifecycle_command_ns(lc), agsx_lifecycle_teardown_ns(lc),
                              agsx_lifecycle_release_ns(lc), agsx_mono_ns()};
  if (sb && sb->reason == AGSX_STOP_OOM && !o->json)
    dprintf(STDERR_FILENO, "agsx: sandbox %.12s: out of memory: killed\n", sb->id);
  if (sb && sb->reason == AGSX_STOP_TIMEOUT && !o->json)
    dprintf(STDERR_FILENO, "agsx: sandbox %.12s: deadline reached: stopped\n", sb->id);
  if (o->json) {
    size_t len;
    _cleanup_free_ char *s = agsx_lifecycle_result_json(lc, code, err ? err->msg : NULL, &len);
    fwrite(s, 1, len, stdout);
    fputc('\n', stdout);
    fflush(stdout);
  } else if (err) {
    agsx_failf("%s", err->msg);
  }
  agsx_error_free(&err);
  return code;
}

/* run -d: prints the id once the command runs. */
static int run_detached(struct agsx_lifecycle *lc, const struct run_opts *o, int64_t t0,
                        int64_t startup) {
  agsx_error_t err = NULL;
  struct agsx_run_started st;
  if (agsx_lifecycle_detach(lc, &st, &err) < 0)
    return agsx_fail(&err);
  if (o->timing)
    print_timing(lc, startup, agsx_mono_ns() - t0);
  if (o->json) {
    size_t len;
    _cleanup_free_ char *s = agsx_started_json(st.id, o->name, &len);
    printf("%s\n", s);
  } else {
    printf("%s\n", st.id);
  }
  return 0;
}

void agsx_run_opts_clear(struct run_opts *o) {
  agsx_strv_free(o->env);
  agsx_strv_free(o->labels);
  free(o->rules);
  agsx_egress_clear(&o->egress);
  for (size_t i = 0; i < o->n_binds; i++) {
    free(o->binds[i].src);
    free(o->binds[i].dst);
  }
  free(o->binds);
  free(o->ports);
}

void agsx_run_fill_spec(struct agsx_ctx *ctx, const struct run_opts *o, const char *image,
                        char **cmd, int64_t t0, struct agsx_run_spec *spec) {
  *spec = (struct agsx_run_spec){
      .root = ctx->root,
      .state = ctx->state,
      .image = image,
      .cmd = cmd,
      .pull = o->pull,
      .pull_image = pull_image,
      .pull_data = ctx,
      .env = o->env,
      .labels = o->labels,
      .user = o->user,
      .workdir = o->workdir,
      .hostname = o->hostname,
      .name = o->name,
      .seccomp = o->seccomp,
      .new_privs = o->new_privs,
      .binds = o->binds,
      .n_binds = o->n_binds,
      .network = o->network,
      .rules = o->rules,
      .n_rules = o->n_rules,
      .egress = &o->egress,
      .ports = o->ports,
      .n_ports = o->n_ports,
      .timeout = o->timeout,
      .memory = o->memory,
      .pids = o->pids,
      .disk = o->disk,
      .cpus = o->cpus,
      .read_only = o->read_only,
      .rm = o->rm,
      .timing = o->timing,
      .caller_exits = o->detach, /* run -d prints the id and exits */
      .interactive = o->interactive && !o->detach,
      .tty = o->tty,
      .capture = o->json && !o->detach,
      .t0 = t0,
  };
}

int agsx_run_start(const struct run_opts *o, const struct agsx_run_spec *spec, int64_t startup) {
  struct agsx_lifecycle *lc = NULL;
  agsx_error_t err = NULL;
  if (agsx_lifecycle_create(spec, &lc, &err) < 0)
    return agsx_fail(&err);
  struct end_timing et = {0};
  int64_t t0 = spec->t0;
  int code = o->detach ? run_detached(lc, o, t0, startup) : run_foreground(lc, o, t0, startup, &et);
  agsx_lifecycle_free(lc);
  if (et.ended)
    dprintf(STDERR_FILENO,
            "agsx: timing: command %.3f ms, teardown %.3f ms, release %.3f ms, exit %.3f ms\n",
            (double)et.command / 1e6, (double)et.teardown / 1e6, (double)et.release / 1e6,
            (double)(agsx_mono_ns() - et.ended) / 1e6);
  return code;
}

int agsx_cmd_run(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  int64_t t0 = agsx_mono_ns();
  int64_t startup = wants_timing(argc, argv) ? startup_ns() : 0;
  struct run_opts o = {.json = ctx->json};
  int i = agsx_parse_options(cmd, argc, argv, agsx_run_opt, &o);
  int code = AGSX_EXIT_FAILURE;
  if (i < 0)
    goto done;
  if (i >= argc && !o.pool) {
    agsx_failf("run: expected an IMAGE (see agsx run --help)");
    goto done;
  }
  if (o.tty && o.json) {
    agsx_failf("run: --tty and --json do not go together");
    goto done;
  }
  if (o.detach && (o.tty || o.interactive)) {
    agsx_failf("run: --detach runs without a terminal or stdin (use agsx exec -it later)");
    goto done;
  }
  if (o.net_mode == AGSX_NET_INTERNAL && o.n_rules > 0) {
    agsx_failf("run: --allow, --deny and --rules are for vpc networks");
    goto done;
  }
  if (o.net_mode == AGSX_NET_INTERNAL && o.egress.n > 0) {
    agsx_failf("run: --egress-allow, --egress-deny and --egress-rules are for the public and vpc "
               "networks");
    goto done;
  }
  if (o.pool) {
    code = agsx_run_pool(ctx, &o, argc - i, argv + i, t0);
    goto done;
  }
  for (size_t k = 0; k < o.n_binds; k++) {
    agsx_error_t err = NULL;
    if (o.binds[k].volume && agsx_volume_create(ctx->root, o.binds[k].src, true, &err) < 0) {
      agsx_fail(&err);
      goto done;
    }
  }
  struct agsx_run_spec spec;
  agsx_run_fill_spec(ctx, &o, argv[i], argv + i + 1, t0, &spec);
  code = agsx_run_start(&o, &spec, startup);
done:
  agsx_run_opts_clear(&o);
  return code;
}
