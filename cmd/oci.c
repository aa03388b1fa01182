/* agsx-oci: the OCI runtime front end (runc's command line), a second small
 * program linked against the same library as agsx.
 *
 * Why a second binary and not an argv[0] personality of agsx: agsx's own
 * global options (--root is the image store there, the state root here),
 * its `kill` and `exec` mean other things, and engines pass no arguments
 * before the verb that could select a mode (containerd's BinaryName,
 * Podman's runtime path, and Podman's `state` call drops runtime flags).
 * A separate program keeps each command line one table with one meaning,
 * and agsx's help, man pages and completions free of runc's verbs; the
 * work is the library's (src/oci/), as for every front end.
 *
 * Output contract (what engines parse): `state` prints JSON on stdout and
 * nothing on stderr; a successful create/start/kill/delete/exec prints
 * nothing; a failure is one line `agsx-oci: <why>` on stderr (and one
 * object in --log with --log-format json), exit 1. */
#include "config.h"

#include "oci/oci.h"
#include "util/json.h"

#include <signal.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static const char usage[] =
    "Usage: agsx-oci [GLOBAL OPTIONS] COMMAND [OPTIONS] ID\n"
    "\n"
    "agsx as an OCI runtime for Podman, containerd and CRI-O (runc's command line).\n"
    "\n"
    "Commands:\n"
    "  create [--bundle DIR] [--pid-file FILE] [--console-socket PATH] [--preserve-fds N]\n"
    "         [--no-new-keyring] ID     Create a container (its program does not run yet)\n"
    "  start ID                       Run the program of a created container\n"
    "  state ID                       Print the container's state as JSON\n"
    "  kill [--all] ID [SIGNAL]       Send a signal (default TERM) to the init, or to all\n"
    "  delete [--force] ID            Delete a stopped (or, with --force, any) container\n"
    "  exec [--process FILE] [--detach] [--pid-file FILE] [--tty] [--console-socket PATH]\n"
    "       [--preserve-fds N] [--cwd DIR] [--env K=V] ID [COMMAND...]\n"
    "                                 Run a process in the container\n"
    "  pause ID, resume ID            Freeze and thaw the container's processes\n"
    "  ps [--format json] ID          List the container's host pids\n"
    "  update --resources FILE|- ID   Change cgroup limits (linux.resources JSON)\n"
    "  list [--format table|json] [--quiet]\n"
    "                                 List the containers under the state root\n"
    "  features                       Print what this runtime supports (JSON)\n"
    "\n"
    "Global options:\n"
    "  --root DIR        State root (default /run/agsx-oci)\n"
    "  --log FILE        Also write errors to FILE\n"
    "  --log-format FMT  text (default) or json\n"
    "  --debug           Log warnings and debug messages too\n"
    "  --systemd-cgroup  cgroupsPath is slice:prefix:name: a systemd scope where\n"
    "                    systemd runs (cgroup v2), else mapped to cgroupfs\n"
    "  --version         Print the version\n"
    "  --help            Print this help\n"
    "\n"
    "See agsx-oci(1) for what agsx honours, refuses and tightens in config.json.\n";

static FILE *log_file;
static bool log_json;

static void log_sink(enum agsx_log_level level, const char *msg, void *data) {
  (void)data;
  static const char *const names[] = {"error", "warning", "info", "debug"};
  int saved = errno;
  if (log_file) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char t[64];
    size_t n = strftime(t, sizeof(t), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(t + n, sizeof(t) - n, ".%09ldZ", ts.tv_nsec);
    if (log_json) {
      _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
      yajl_gen_map_open(g);
      agsx_json_kv_str(g, "level", names[level]);
      agsx_json_kv_str(g, "msg", msg);
      agsx_json_kv_str(g, "time", t);
      yajl_gen_map_close(g);
      _cleanup_free_ char *line = agsx_json_gen_steal(g, NULL);
      fprintf(log_file, "%s\n", line);
    } else {
      fprintf(log_file, "time=\"%s\" level=%s msg=\"%s\"\n", t, names[level], msg);
    }
    fflush(log_file);
  }
  /* stderr only for errors: on success nothing may reach it (it is the
   * container's log under conmon and the shim). */
  if (level == AGSX_LOG_ERROR || agsx_log_level == AGSX_LOG_DEBUG) {
    _cleanup_free_ char *full =
        xasprintf("agsx-oci: %s%s%s\n", level == AGSX_LOG_ERROR ? "" : names[level],
                  level == AGSX_LOG_ERROR ? "" : ": ", msg);
    if (write(2, full, strlen(full)) < 0) {
    }
  }
  errno = saved;
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char buf[2048];
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  agsx_log(AGSX_LOG_ERROR, "%s", buf);
  return 1;
}

static int fail_err(agsx_error_t *err) {
  int r = fail("%s", *err && (*err)->msg ? (*err)->msg : "failed");
  agsx_error_free(err);
  return r;
}

/* --name VALUE or --name=VALUE; *I advanced past what was used. */
static bool opt_value(char **argv, int argc, int *i, const char *lng, char shrt, const char **ret) {
  const char *a = argv[*i];
  size_t n = strlen(lng);
  if (a[0] == '-' && a[1] == '-' && strncmp(a + 2, lng, n) == 0 && a[2 + n] == '=') {
    *ret = a + 3 + n;
    return true;
  }
  bool match = (a[0] == '-' && a[1] == '-' && strcmp(a + 2, lng) == 0) ||
               (shrt && a[0] == '-' && a[1] == shrt && a[2] == '\0');
  if (!match)
    return false;
  if (*i + 1 >= argc) {
    *ret = NULL;
    return true;
  }
  *ret = argv[++*i];
  return true;
}

static bool opt_flag(const char *a, const char *lng, char shrt) {
  return (a[0] == '-' && a[1] == '-' && strcmp(a + 2, lng) == 0) ||
         (shrt && a[0] == '-' && a[1] == shrt && a[2] == '\0');
}

static int parse_int(const char *s, int *ret) {
  char *end;
  errno = 0;
  long v = s ? strtol(s, &end, 10) : 0;
  if (s == NULL || errno || end == s || *end || v < 0 || v > 1000000)
    return -1;
  *ret = (int)v;
  return 0;
}

static int parse_signal(const char *s, int *ret) {
  static const struct {
    const char *name;
    int sig;
  } sigs[] = {{"HUP", SIGHUP},       {"INT", SIGINT},   {"QUIT", SIGQUIT},     {"ILL", SIGILL},
              {"TRAP", SIGTRAP},     {"ABRT", SIGABRT}, {"IOT", SIGIOT},       {"BUS", SIGBUS},
              {"FPE", SIGFPE},       {"KILL", SIGKILL}, {"USR1", SIGUSR1},     {"SEGV", SIGSEGV},
              {"USR2", SIGUSR2},     {"PIPE", SIGPIPE}, {"ALRM", SIGALRM},     {"TERM", SIGTERM},
              {"STKFLT", SIGSTKFLT}, {"CHLD", SIGCHLD}, {"CONT", SIGCONT},     {"STOP", SIGSTOP},
              {"TSTP", SIGTSTP},     {"TTIN", SIGTTIN}, {"TTOU", SIGTTOU},     {"URG", SIGURG},
              {"XCPU", SIGXCPU},     {"XFSZ", SIGXFSZ}, {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF},
              {"WINCH", SIGWINCH},   {"IO", SIGIO},     {"PWR", SIGPWR},       {"SYS", SIGSYS}};
  int n;
  if (parse_int(s, &n) == 0) {
    if (n < 1 || n > 64)
      return -1;
    *ret = n;
    return 0;
  }
  const char *name = strncasecmp(s, "SIG", 3) == 0 ? s + 3 : s;
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(sigs); i++)
    if (strcasecmp(sigs[i].name, name) == 0) {
      *ret = sigs[i].sig;
      return 0;
    }
  return -1;
}

/* One ID, nothing else. */
static int one_id(int argc, char **argv, int i, const char *verb, const char **ret) {
  if (i >= argc || argv[i][0] == '-' || i + 1 != argc)
    return fail("%s: expected one container id", verb);
  *ret = argv[i];
  return 0;
}

static int cmd_create(const struct agsx_oci_global *g, int argc, char **argv) {
  struct agsx_oci_create_opts o = {0};
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    const char *v = "";
    if (opt_value(argv, argc, &i, "bundle", 'b', &v))
      o.bundle = v;
    else if (opt_value(argv, argc, &i, "pid-file", 0, &v))
      o.pid_file = v;
    else if (opt_value(argv, argc, &i, "console-socket", 0, &v))
      o.console_socket = v;
    else if (opt_value(argv, argc, &i, "preserve-fds", 0, &v)) {
      if (parse_int(v, &o.preserve_fds) < 0)
        return fail("create: --preserve-fds: expected a count");
    } else if (opt_flag(argv[i], "no-new-keyring", 0))
      o.no_new_keyring = true;
    else if (opt_flag(argv[i], "no-pivot", 0))
      return fail("create: --no-pivot is not supported by agsx (it always uses pivot_root)");
    else
      return fail("create: unknown option `%s`", argv[i]);
    if (v == NULL)
      return fail("create: `%s` needs a value", argv[i]);
  }
  if (one_id(argc, argv, i, "create", &o.id) != 0)
    return 1;
  /* LISTEN_FDS (socket activation) travel with --preserve-fds, as runc. */
  const char *lf = getenv("LISTEN_FDS");
  int nlisten;
  if (lf && parse_int(lf, &nlisten) == 0 && nlisten > 0)
    o.preserve_fds += nlisten;
  agsx_error_t err = NULL;
  if (agsx_oci_create(g, &o, &err) < 0)
    return fail_err(&err);
  return 0;
}

static int cmd_simple(const struct agsx_oci_global *g, int argc, char **argv) {
  const char *verb = argv[0], *id = NULL;
  if (one_id(argc, argv, 1, verb, &id) != 0)
    return 1;
  agsx_error_t err = NULL;
  int r;
  _cleanup_free_ char *out = NULL;
  if (strcmp(verb, "start") == 0)
    r = agsx_oci_start(g, id, &err);
  else if (strcmp(verb, "state") == 0)
    r = agsx_oci_state(g, id, &out, &err);
  else if (strcmp(verb, "pause") == 0)
    r = agsx_oci_pause(g, id, true, &err);
  else
    r = agsx_oci_pause(g, id, false, &err);
  if (r < 0)
    return fail_err(&err);
  if (out)
    fputs(out, stdout);
  return 0;
}

static int cmd_kill(const struct agsx_oci_global *g, int argc, char **argv) {
  bool all = false;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    if (opt_flag(argv[i], "all", 'a'))
      all = true;
    else
      return fail("kill: unknown option `%s`", argv[i]);
  }
  if (i >= argc || i + 2 < argc)
    return fail("kill: expected a container id and an optional signal");
  int sig = SIGTERM;
  if (i + 1 < argc && parse_signal(argv[i + 1], &sig) < 0)
    return fail("kill: invalid signal `%s`", argv[i + 1]);
  agsx_error_t err = NULL;
  if (agsx_oci_kill(g, argv[i], sig, all, &err) < 0)
    return fail_err(&err);
  return 0;
}

static int cmd_delete(const struct agsx_oci_global *g, int argc, char **argv) {
  bool force = false;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    if (opt_flag(argv[i], "force", 'f'))
      force = true;
    else
      return fail("delete: unknown option `%s`", argv[i]);
  }
  const char *id = NULL;
  if (one_id(argc, argv, i, "delete", &id) != 0)
    return 1;
  agsx_error_t err = NULL;
  if (agsx_oci_delete(g, id, force, &err) < 0)
    return fail_err(&err);
  return 0;
}

static int cmd_ps(const struct agsx_oci_global *g, int argc, char **argv) {
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    const char *v;
    if (opt_value(argv, argc, &i, "format", 'f', &v)) {
      if (v == NULL || strcmp(v, "json") != 0)
        return fail("ps: --format %s is not supported by agsx (json only)", v ? v : "");
    } else {
      return fail("ps: unknown option `%s`", argv[i]);
    }
  }
  /* `ps ID [ps options]` (table form) is runc's; json takes the id alone. */
  const char *id = NULL;
  if (one_id(argc, argv, i, "ps", &id) != 0)
    return 1;
  agsx_error_t err = NULL;
  _cleanup_free_ char *out = NULL;
  if (agsx_oci_ps(g, id, &out, &err) < 0)
    return fail_err(&err);
  printf("%s\n", out);
  return 0;
}

static int cmd_update(const struct agsx_oci_global *g, int argc, char **argv) {
  const char *res = NULL;
  int i = 1;
  for (; i < argc && argv[i][0] == '-' && argv[i][1] != '\0'; i++) {
    const char *v;
    if (opt_value(argv, argc, &i, "resources", 'r', &v))
      res = v;
    else
      return fail("update: option `%s` is not supported by agsx (use --resources)", argv[i]);
  }
  const char *id = NULL;
  if (res == NULL)
    return fail("update: --resources FILE|- is required");
  if (one_id(argc, argv, i, "update", &id) != 0)
    return 1;
  agsx_error_t err = NULL;
  _cleanup_free_ char *buf = NULL;
  size_t len;
  int r = strcmp(res, "-") == 0
              ? agsx_read_fd(0, AGSX_OCI_CONFIG_MAX, &buf, &len, &err)
              : agsx_read_file_at(AT_FDCWD, res, AGSX_OCI_CONFIG_MAX, &buf, &len, &err);
  if (r < 0 || agsx_oci_update(g, id, buf, len, &err) < 0)
    return fail_err(&err);
  return 0;
}

static int cmd_list(const struct agsx_oci_global *g, int argc, char **argv) {
  bool json = false, quiet = false;
  for (int i = 1; i < argc; i++) {
    const char *v;
    if (opt_value(argv, argc, &i, "format", 'f', &v)) {
      if (v && strcmp(v, "json") == 0)
        json = true;
      else if (v == NULL || strcmp(v, "table") != 0)
        return fail("list: --format: expected table or json");
    } else if (opt_flag(argv[i], "quiet", 'q')) {
      quiet = true;
    } else {
      return fail("list: unknown argument `%s`", argv[i]);
    }
  }
  agsx_error_t err = NULL;
  _cleanup_free_ char *out = NULL;
  if (agsx_oci_list(g, json, &out, &err) < 0)
    return fail_err(&err);
  if (quiet && !json) {
    for (char *line = strchr(out, '\n'); line && line[1]; line = strchr(line + 1, '\n'))
      printf("%.*s\n", (int)strcspn(line + 1, "\t"), line + 1);
    return 0;
  }
  fputs(out, stdout);
  if (json)
    fputc('\n', stdout);
  return 0;
}

static int cmd_exec(const struct agsx_oci_global *g, int argc, char **argv) {
  struct agsx_oci_exec_opts o = {0};
  const char *process = NULL;
  _cleanup_strv_ char **env = NULL;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    const char *v = "";
    if (opt_value(argv, argc, &i, "process", 'p', &v))
      process = v;
    else if (opt_value(argv, argc, &i, "pid-file", 0, &v))
      o.pid_file = v;
    else if (opt_value(argv, argc, &i, "console-socket", 0, &v))
      o.console_socket = v;
    else if (opt_value(argv, argc, &i, "cwd", 0, &v))
      o.cwd = v;
    else if (opt_value(argv, argc, &i, "env", 'e', &v)) {
      if (v)
        agsx_strv_push(&env, v);
    } else if (opt_value(argv, argc, &i, "preserve-fds", 0, &v)) {
      if (parse_int(v, &o.preserve_fds) < 0)
        return fail("exec: --preserve-fds: expected a count");
    } else if (opt_flag(argv[i], "detach", 'd'))
      o.detach = true;
    else if (opt_flag(argv[i], "tty", 't'))
      o.tty = true;
    else
      return fail("exec: unknown option `%s`", argv[i]);
    if (v == NULL)
      return fail("exec: `%s` needs a value", argv[i]);
  }
  if (i >= argc)
    return fail("exec: expected a container id");
  o.id = argv[i++];
  o.env = env;
  _cleanup_free_ char *buf = NULL;
  agsx_error_t err = NULL;
  if (process) {
    if (i != argc)
      return fail("exec: --process and a command exclude each other");
    if (agsx_read_file_at(AT_FDCWD, process, AGSX_OCI_CONFIG_MAX, &buf, &o.process_len, &err) < 0)
      return fail_err(&err);
    o.process_json = buf;
  } else {
    if (i == argc)
      return fail("exec: expected a command (or --process FILE)");
    o.argv = argv + i;
  }
  int status = 0;
  if (agsx_oci_exec(g, &o, &status, &err) < 0)
    return fail_err(&err);
  return o.detach ? 0 : status;
}

/* The global options before the verb; *I at the verb. An exit status
 * (help, version, a bad option), or -1 to go on. */
static int parse_globals(int argc, char **argv, struct agsx_oci_global *g, int *ret_i) {
  const char *log = NULL, *fmt = NULL;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    const char *v = "";
    if (opt_value(argv, argc, &i, "root", 0, &v))
      g->root = v;
    else if (opt_value(argv, argc, &i, "log", 0, &v))
      log = v;
    else if (opt_value(argv, argc, &i, "log-format", 0, &v))
      fmt = v;
    else if (opt_value(argv, argc, &i, "criu", 0, &v) ||
             opt_value(argv, argc, &i, "rootless", 0, &v)) {
      /* accepted, no effect: agsx has no checkpointing and runs as root */
    } else if (opt_value(argv, argc, &i, "cgroup-manager", 0, &v)) {
      if (v && strcmp(v, "cgroupfs") != 0)
        return fail("--cgroup-manager %s is not supported by agsx (cgroupfs only)", v);
    } else if (opt_flag(argv[i], "systemd-cgroup", 0))
      g->systemd_cgroup = true;
    else if (opt_flag(argv[i], "debug", 0))
      g->debug = true;
    else if (opt_flag(argv[i], "version", 'v')) {
      printf("agsx-oci version %s\nspec: 1.0.2-dev\n", VERSION);
      return 0;
    } else if (opt_flag(argv[i], "help", 'h')) {
      fputs(usage, stdout);
      return 0;
    } else
      return fail("unknown global option `%s` (see agsx-oci --help)", argv[i]);
    if (v == NULL)
      return fail("`%s` needs a value", argv[i]);
  }
  if (fmt && strcmp(fmt, "json") != 0 && strcmp(fmt, "text") != 0)
    return fail("--log-format %s: expected text or json", fmt);
  log_json = fmt && strcmp(fmt, "json") == 0;
  if (log && (log_file = fopen(log, "ae")) == NULL)
    return fail("--log `%s`: %s", log, strerror(errno));
  if (g->debug)
    agsx_log_level = AGSX_LOG_DEBUG;
  *ret_i = i;
  return -1;
}

static int cmd_features(const struct agsx_oci_global *g, int argc, char **argv) {
  (void)g, (void)argc, (void)argv;
  _cleanup_free_ char *f = agsx_oci_features();
  puts(f);
  return 0;
}

static const struct {
  const char *verb;
  int (*fn)(const struct agsx_oci_global *, int, char **);
} verbs[] = {
    {"create", cmd_create}, {"start", cmd_simple},  {"state", cmd_simple},
    {"pause", cmd_simple},  {"resume", cmd_simple}, {"kill", cmd_kill},
    {"delete", cmd_delete}, {"exec", cmd_exec},     {"ps", cmd_ps},
    {"update", cmd_update}, {"list", cmd_list},     {"features", cmd_features},
};

int main(int argc, char **argv) {
  struct agsx_oci_global g = {0};
  agsx_log_level = AGSX_LOG_ERROR;
  agsx_log_set_sink(log_sink, NULL);
  agsx_proc_title_init(argc, argv);
  int i = 1;
  int r = parse_globals(argc, argv, &g, &i);
  if (r >= 0)
    return r;
  if (i >= argc) {
    fputs(usage, stderr);
    return 1;
  }
  const char *verb = argv[i];
  for (size_t k = 0; k < sizeof(verbs) / sizeof(verbs[0]); k++)
    if (strcmp(verb, verbs[k].verb) == 0)
      return verbs[k].fn(&g, argc - i, argv + i);
  if (strcmp(verb, "checkpoint") == 0 || strcmp(verb, "restore") == 0 ||
      strcmp(verb, "events") == 0 || strcmp(verb, "run") == 0 || strcmp(verb, "spec") == 0)
    return fail("%s is not supported by agsx", verb);
  return fail("unknown command `%s` (see agsx-oci --help)", verb);
}
