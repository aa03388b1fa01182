/* agsx exec: a command in a running sandbox. */
#include "config.h"

#include "cmd.h"
#include "sandbox/exec.h"
#include "sandbox/processes.h"
#include "util/json.h"
#include "io.h"
#include "state/state.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>

struct exec_opts {
  bool interactive, tty, json, detach;
  const char *user, *workdir;
  char **env;
  size_t n_env;
  uint64_t timeout;
};

static int on_exec_opt(void *data, int id, const char *v) {
  struct exec_opts *o = data;
  agsx_error_t err = NULL;
  switch (id) {
  case O_INTERACTIVE: o->interactive = true; return 0;
  case O_TTY: o->tty = true; return 0;
  case O_JSON: o->json = true; return 0;
  case O_DETACH: o->detach = true; return 0;
  case O_USER: o->user = v; return 0;
  case O_WORKDIR:
    if (v[0] != '/')
      return agsx_failf("exec: working directory `%s` must be absolute", v), -1;
    o->workdir = v;
    return 0;
  case O_ENV:
    if (*v == '\0' || *v == '=')
      return agsx_failf("exec: invalid environment variable `%s` (want KEY=VALUE)", v), -1;
    o->env = xrealloc(o->env, (o->n_env + 2) * sizeof(char *));
    if (strchr(v, '='))
      o->env[o->n_env++] = xstrdup(v);
    else if (getenv(v))
      o->env[o->n_env++] = xasprintf("%s=%s", v, getenv(v));
    o->env[o->n_env] = NULL;
    return 0;
  case O_TIMEOUT:
    if (agsx_parse_duration(v, &o->timeout, &err) < 0)
      return agsx_failf("exec: --timeout: %s", err->msg), agsx_error_free(&err), -1;
    return 0;
  }
  return 0;
}

/* The same seccomp program as the sandbox's command. */
static int load_seccomp(struct agsx_ctx *ctx, const struct agsx_record *rec,
                        struct agsx_seccomp_bpf *bpf, bool *none, agsx_error_t *err) {
  *none = rec->seccomp && strcmp(rec->seccomp, "unconfined") == 0;
  if (*none)
    return 0;
  _cleanup_free_ char *json = NULL;
  size_t len = 0;
  if (rec->seccomp && strcmp(rec->seccomp, "default") != 0 &&
      agsx_read_file_at(AT_FDCWD, rec->seccomp, AGSX_SECCOMP_JSON_MAX, &json, &len, err) < 0)
    return agsx_error_wrap(err, "the sandbox's seccomp profile");
  _cleanup_free_ char *cache = xasprintf("%s/cache", ctx->state);
  return agsx_seccomp_load_cached(cache, json, len, bpf, err);
}

struct eloop {
  struct agsx_exec *e;
  struct exec_opts *o;
  struct agsx_output out[2];
  int sigfd, timerfd;
  bool timed_out;
};

/* Forwards a signal to the command; true for one that stops agsx exec. */
static bool on_signal(struct eloop *l) {
  struct signalfd_siginfo si;
  if (read(l->sigfd, &si, sizeof(si)) != (ssize_t)sizeof(si))
    return false;
  if (si.ssi_signo == SIGWINCH) {
    agsx_term_winsize(l->e->pty_master);
    return false;
  }
  if (l->e->pidfd >= 0)
    syscall(SYS_pidfd_send_signal, l->e->pidfd, si.ssi_signo, NULL, 0);
  return si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT || si.ssi_signo == SIGHUP ||
         si.ssi_signo == SIGQUIT;
}

/* After the command ended, its output is read until EOF, or until it has
 * been quiet for DRAIN_IDLE_MS, or for DRAIN_MAX_MS at most: a process it
 * left in the background may hold the pipes open for ever. Signals and the
 * deadline stay live meanwhile. */
#define DRAIN_IDLE_MS 100
#define DRAIN_MAX_MS 2000

static bool outputs_closed(const struct eloop *l, int master_closed) {
  return l->out[0].fd < 0 && l->out[1].fd < 0 && master_closed;
}

static void loop(struct eloop *l) {
  struct agsx_exec *e = l->e;
  int stdin_closed = !(l->o->interactive && e->pty_master >= 0);
  int master_closed = e->pty_master < 0;
  int64_t ended = 0, quiet_since = 0; /* monotonic ns, 0 while the command runs */
  for (;;) {
    struct pollfd p[7] = {
        {.fd = ended ? -1 : e->pidfd, .events = POLLIN},
        {.fd = l->sigfd, .events = POLLIN},
        {.fd = l->timerfd, .events = POLLIN},
        {.fd = l->out[0].fd, .events = POLLIN},
        {.fd = l->out[1].fd, .events = POLLIN},
        {.fd = master_closed ? -1 : e->pty_master, .events = POLLIN},
        {.fd = stdin_closed || ended ? -1 : STDIN_FILENO, .events = POLLIN},
    };
    int timeout = -1;
    if (ended) {
      int64_t now = agsx_mono_ns();
      int64_t left_idle = DRAIN_IDLE_MS - (now - quiet_since) / 1000000;
      int64_t left_max = DRAIN_MAX_MS - (now - ended) / 1000000;
      int64_t left = left_idle < left_max ? left_idle : left_max;
      if (left <= 0 || outputs_closed(l, master_closed))
        break;
      timeout = (int)left;
    }
    int n = poll(p, 7, timeout);
    if (n < 0 && errno != EINTR)
      break;
    if (n > 0 && (p[3].revents || p[4].revents || p[5].revents))
      quiet_since = agsx_mono_ns();
    if (p[1].revents && on_signal(l) && ended)
      break; /* stopped while only draining: no more waiting */
    if (p[2].revents) {
      /* The deadline of this command: its whole process tree goes (what it
       * left running too, when it fires while we drain). */
      l->timed_out = !ended;
      agsx_exec_kill_tree(e);
      agsx_closep(&l->timerfd);
    }
    for (int i = 0; i < 2; i++)
      if (p[3 + i].revents)
        agsx_output_read(&l->out[i]);
    if (p[5].revents)
      agsx_copy_fd(e->pty_master, STDOUT_FILENO, &master_closed);
    if (p[6].revents)
      agsx_copy_fd(STDIN_FILENO, e->pty_master, &stdin_closed);
    if (p[0].revents) {
      agsx_exec_reap(e);
      ended = quiet_since = agsx_mono_ns();
    }
  }
  if (!ended)
    agsx_exec_reap(e);
  for (int i = 0; i < 2; i++)
    agsx_output_drain(&l->out[i]);
}

static int setup(struct eloop *l, struct agsx_exec_config *cfg, int pipes[2][2],
                 agsx_error_t *err) {
  sigset_t set;
  sigemptyset(&set);
  int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(sigs); i++)
    sigaddset(&set, sigs[i]);
  sigprocmask(SIG_BLOCK, &set, NULL);
  l->sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  l->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  if (l->sigfd < 0 || l->timerfd < 0)
    return agsx_error_set(err, errno, "signalfd/timerfd");
  if (l->o->timeout) {
    struct itimerspec its = {.it_value = {.tv_sec = (time_t)l->o->timeout}};
    timerfd_settime(l->timerfd, 0, &its, NULL);
  }
  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0)
    return agsx_error_set(err, errno, "open /dev/null");
  cfg->stdio[0] = l->o->interactive ? STDIN_FILENO : devnull;
  cfg->stdio[1] = STDOUT_FILENO;
  cfg->stdio[2] = STDERR_FILENO;
  for (int i = 0; l->o->json && i < 2; i++) {
    if (pipe2(pipes[i], O_CLOEXEC) < 0)
      return agsx_error_set(err, errno, "pipe");
    cfg->stdio[1 + i] = pipes[i][1];
    l->out[i].fd = pipes[i][0];
    fcntl(pipes[i][0], F_SETFL, O_NONBLOCK);
  }
  return 0;
}

static int run_exec(struct agsx_ctx *ctx, struct exec_opts *o, const struct agsx_record *rec,
                    char **argv) {
  int64_t t0 = agsx_mono_ns();
  agsx_error_t err = NULL;
  struct agsx_seccomp_bpf bpf = {0};
  bool unconfined = false;
  struct eloop l = {.o = o, .sigfd = -1, .timerfd = -1, .out = {{.fd = -1}, {.fd = -1}}};
  struct agsx_exec_config cfg = {
      .argv = argv, .env = o->env, .cwd = o->workdir, .user = o->user, .tty = o->tty};
  int pipes[2][2] = {{-1, -1}, {-1, -1}};
  int code = 125;
  struct agsx_term term = {0};
  if (load_seccomp(ctx, rec, &bpf, &unconfined, &err) < 0 || setup(&l, &cfg, pipes, &err) < 0)
    goto out;
  cfg.seccomp = unconfined ? NULL : &bpf;
  int r = agsx_exec_start(rec, &cfg, &l.e, &code, &err);
  for (int i = 0; i < 2; i++)
    agsx_closep(&pipes[i][1]);
  if (r < 0)
    goto out;
  if (o->tty) {
    agsx_term_winsize(l.e->pty_master);
    agsx_term_raw(&term);
  }
  loop(&l);
  agsx_term_restore(&term);
  code = l.e->exit_code;
out:
  if (o->json) {
    struct agsx_result res = {
        .exit_code = code,
        .out = l.out,
        .duration_ms = (agsx_mono_ns() - t0) / 1000000,
        .stop_reason = err           ? "error"
                       : l.timed_out ? "timeout"
                                     : "exit",
        .signal = l.e && !err ? l.e->term_signal : 0,
        .id = rec->id,
        .name = rec->name,
        .error = err ? err->msg : NULL,
    };
    agsx_print_result(&res);
  } else if (err) {
    agsx_failf("%s", err->msg);
  }
  if (l.timed_out && !o->json)
    dprintf(STDERR_FILENO, "agsx: exec in %.12s: deadline reached: killed\n", rec->id);
  agsx_error_free(&err);
  agsx_exec_free(l.e);
  agsx_seccomp_bpf_clear(&bpf);
  for (int i = 0; i < 2; i++)
    agsx_output_clear(&l.out[i]);
  agsx_closep(&l.sigfd);
  agsx_closep(&l.timerfd);
  return code;
}

/* exec -d: the sandbox's supervisor starts and owns the process (the same
 * exec path), keeps its output in a log (`agsx logs --exec PID`) and ends
 * it with the sandbox; we print its pid in the sandbox. */
static int run_detached(struct agsx_ctx *ctx, struct exec_opts *o, const struct agsx_record *rec,
                        char **argv) {
  agsx_error_t err = NULL;
  _cleanup_close_ int statefd = agsx_state_open(ctx->state, false, &err);
  if (statefd < 0)
    return agsx_fail(&err);
  struct agsx_process_spec spec = {.argv = argv,
                                   .env = o->env,
                                   .cwd = o->workdir,
                                   .user = o->user,
                                   .timeout_ms = o->timeout * 1000};
  struct agsx_process_info info;
  int code;
  if (agsx_process_start(statefd, rec->id, &spec, &info, &code, &err) < 0) {
    agsx_fail(&err);
    return code;
  }
  if (o->json) {
    _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "id", rec->id);
    agsx_json_kv_int(g, "pid", info.pid);
    yajl_gen_map_close(g);
    size_t len;
    _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
    printf("%s\n", s);
  } else {
    printf("%u\n", info.pid);
  }
  agsx_process_info_clear(&info);
  return 0;
}

static int exec_in(struct agsx_ctx *ctx, struct exec_opts *o, int argc, char **argv, int i) {
  if (argc - i < 2)
    return agsx_failf("exec: expected SANDBOX and a command (see agsx exec --help)");
  if (o->tty && o->json)
    return agsx_failf("exec: --tty and --json do not go together");
  if (o->detach && (o->tty || o->interactive))
    return agsx_failf("exec: --detach runs without a terminal or stdin");
  agsx_error_t err = NULL;
  struct agsx_record rec;
  if (agsx_state_lookup(ctx->state, argv[i], &rec, &err) < 0)
    return agsx_fail(&err);
  int code;
  if (rec.status == AGSX_STATUS_EXITED || !agsx_proc_ref_alive(&rec.supervisor))
    code = agsx_failf("sandbox `%s` is not running", argv[i]);
  else if (o->detach)
    code = run_detached(ctx, o, &rec, argv + i + 1);
  else
    code = run_exec(ctx, o, &rec, argv + i + 1);
  agsx_record_clear(&rec);
  return code;
}

int agsx_cmd_exec(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  struct exec_opts o = {.json = ctx->json};
  int i = agsx_parse_options(cmd, argc, argv, on_exec_opt, &o);
  int code = i < 0 ? AGSX_EXIT_FAILURE : exec_in(ctx, &o, argc, argv, i);
  agsx_strv_free(o.env);
  return code;
}
