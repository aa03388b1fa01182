/* agsx — mcp: commands in a sandbox. exec waits for its command;
 * process_start leaves it running, and process_output, process_input,
 * process_signal and process_list reach it later. Every command is a
 * process of the sandbox's supervisor (sandbox/processes.h): it runs as
 * `agsx exec` does, outlives nothing but the sandbox, and its output is the
 * supervisor's log of it, read back from an offset, at most 1 MiB an
 * answer. While a call waits on a log, the input is watched for its
 * cancellation. */
#include "config.h"

#include "mcp/tools-internal.h"
#include "sandbox/processes.h"

#include <poll.h>
#include <signal.h>
#include <string.h>
#include <strings.h>

/* ---- exec ----------------------------------------------------------------------------------------- */

/* The arguments of exec and process_start that say what to run (command_of). */
/* clang-format off */
#define COMMAND_ARGS                                                                               \
  {"sandbox", A_STR, true, 0, 0, "The sandbox's id"},                                              \
  {"argv", A_STRV, false, 0, 0, "The command and its arguments (or give command)"},                \
  {"command", A_STR, false, 0, 0, "A shell command line, run with /bin/sh -c (or give argv)"},     \
  {"cwd", A_STR, false, 0, 0, "Working directory, absolute (default: the image's)"},               \
  {"env", A_ENV, false, 0, 0, "Environment variables added for this command"},                     \
  {"user", A_STR, false, 0, 0, "User (name or uid[:gid]; default: the image's)"}
/* clang-format on */

static const struct arg exec_args[] = {
    COMMAND_ARGS,
    {"timeout", A_INT, false, 1, 86400,
     "Seconds before the command's whole process tree is killed (default 300)"},
    {"stdin", A_STR, false, 0, 0, "Text fed to the command's standard input (at most 1 MiB)"},
    {0},
};

#define EXEC_TIMEOUT_DEFAULT 300
#define EXEC_SCHEMA                                                                                \
  "{\"type\":\"object\",\"properties\":{\"exit_code\":{\"type\":\"integer\",\"description\":"      \
  "\"the command's status; 128+N when killed by signal N; 126/127: could not be run\"},"           \
  "\"signal\":{\"type\":\"integer\",\"description\":\"the signal that killed it, 0: none\"},"      \
  "\"stdout\":{\"type\":\"string\"},\"stderr\":{\"type\":\"string\"},\"stdout_truncated\":"        \
  "{\"type\":\"boolean\"},\"stderr_truncated\":{\"type\":\"boolean\"},\"truncated\":{\"type\":"    \
  "\"boolean\",\"description\":\"output beyond 1 MiB per stream was dropped\"},\"timed_out\":"     \
  "{\"type\":\"boolean\"},\"duration_ms\":{\"type\":\"integer\"}},\"required\":[\"exit_code\","    \
  "\"signal\",\"stdout\",\"stderr\",\"stdout_truncated\",\"stderr_truncated\",\"truncated\","      \
  "\"timed_out\",\"duration_ms\"]}"

struct capture {
  char *buf;
  size_t len;
  bool truncated;
};

static void keep(struct capture *c, const char *data, size_t len) {
  size_t room = AGSX_MCP_OUTPUT_CAP - c->len;
  if (len > room)
    c->truncated = true;
  if (len > room)
    len = room;
  if (len == 0)
    return;
  c->buf = xrealloc(c->buf, c->len + len + 1);
  memcpy(c->buf + c->len, data, len);
  c->len += len;
}

/* Feeds STDIN to process PID, then closes its stdin. */
static int feed(struct agsx_mcp *s, const char *id, uint32_t pid, const char *in,
                agsx_error_t *err) {
  size_t len = in ? strlen(in) : 0;
  for (size_t off = 0; off < len;) {
    size_t n = len - off < AGSX_PROCESS_INPUT_MAX ? len - off : AGSX_PROCESS_INPUT_MAX;
    if (agsx_process_input(s->statefd, id, pid, in + off, n, false, err) < 0) {
      if (agsx_error_errno(err) != EPIPE)
        return -1;
      agsx_error_free(err); /* the command stopped reading: as a pipe would */
      break;
    }
    off += n;
  }
  if (agsx_process_close_stdin(s->statefd, id, pid, err) < 0 && agsx_error_errno(err) != ENOENT &&
      agsx_error_errno(err) != EPIPE)
    return -1;
  agsx_error_free(err);
  return 0;
}

/* What a read of a process's log gathered. */
struct gathered {
  struct capture out[2];
  bool ended;
  int exit_code, term_signal; /* when ended */
  uint64_t lost;              /* bytes the log had dropped before they were read */
  uint64_t offset;            /* where the next read goes on */
  bool full;                  /* it stopped at its cap: more is there to read */
};

static void gathered_clear(struct gathered *g) {
  for (int i = 0; i < 2; i++)
    free(g->out[i].buf);
}

/* Reads process PID's log from G->offset while the input is watched for
 * the call's cancellation. With TOTAL 0 it keeps the first 1 MiB of each
 * stream and reads to the end (exec); else it stops before the record that
 * would take both past TOTAL bytes, and at WAIT_NS (monotonic) when the
 * end has not come (process_output). 1 when cancelled, 0 otherwise. */
static int gather(struct agsx_mcp *s, const char *id, uint32_t pid, size_t total, int64_t wait_ns,
                  struct gathered *g, agsx_error_t *err) {
  struct agsx_log_reader *r = NULL;
  if (agsx_process_log_open(s->statefd, id, pid, g->offset, &r, err) < 0)
    return -1;
  int64_t t0 = agsx_mono_ns();
  int rc = -1;
  for (;;) {
    struct agsx_log_rec rec;
    int n = agsx_log_next(r, &rec, err);
    if (n < 0)
      break;
    if (n == 2 || (n == 1 && rec.kind == AGSX_LOG_END)) {
      g->ended = true;
      g->exit_code = rec.exit_code;
      g->term_signal = rec.term_signal;
      rc = 0;
      break;
    }
    if (n == 1) {
      bool out = rec.kind == AGSX_LOG_STDOUT || rec.kind == AGSX_LOG_STDERR;
      if (total && out && g->out[0].len + g->out[1].len + rec.len > total) {
        g->offset = rec.offset; /* the next call begins with it */
        g->full = true;
        agsx_log_reader_free(r);
        return 0;
      }
      if (out)
        keep(&g->out[rec.kind == AGSX_LOG_STDERR], rec.data, rec.len);
      else if (rec.kind == AGSX_LOG_LOST)
        g->lost += rec.lost;
      g->offset = agsx_log_reader_offset(r);
      continue;
    }
    int ms = 1000;
    if (total) {
      int64_t left = wait_ns - agsx_mono_ns();
      if (left <= 0) {
        rc = 0;
        break;
      }
      if (left < 1000 * 1000000LL)
        ms = (int)(left / 1000000) + 1;
    }
    /* A full input is not read meanwhile: the client waits for us. */
    bool room = !s->eof && agsx_mcp_input_room(s);
    struct pollfd p[3] = {{.fd = agsx_log_reader_fd(r), .events = POLLIN},
                          {.fd = room ? s->cfg->in_fd : -1, .events = POLLIN},
                          {.fd = s->sigfd, .events = POLLIN}};
    if (poll(p, 3, ms) < 0 && errno != EINTR)
      break;
    if (p[1].revents && !agsx_mcp_read_input(s))
      s->cancelled = true; /* the session ends: nobody waits for the answer */
    if (p[2].revents)
      s->cancelled = s->stop = true; /* SIGTERM...: the loop then ends the session */
    agsx_mcp_scan_cancel(s);
    if (s->cancelled) {
      rc = 1;
      break;
    }
    int64_t secs = (agsx_mono_ns() - t0) / 1000000000LL;
    _cleanup_free_ char *msg = xasprintf("process %u: running for %llds, %zu bytes of output", pid,
                                         (long long)secs, g->out[0].len + g->out[1].len);
    agsx_mcp_progress(s, secs, 0, msg);
  }
  if (rc < 0 && err && *err == NULL)
    agsx_error_set_quiet(err, EIO, "the log of process %u", pid);
  agsx_log_reader_free(r);
  return rc;
}

/* The command of exec and process_start: argv or a shell line, its cwd
 * and env. */
static int command_of(yajl_val a, char ***argv, char ***env, agsx_error_t *err) {
  const char *command = arg_str(a, "command"), *cwd = arg_str(a, "cwd");
  *argv = agsx_mcp_arg_strv(a, "argv");
  if ((*argv == NULL) == (command == NULL))
    return agsx_error_set_quiet(err, EINVAL, "give either argv (a non-empty array) or command");
  if (command) {
    char *sh[] = {"/bin/sh", "-c", (char *)command, NULL};
    *argv = agsx_strv_concat(sh, NULL);
  }
  if (cwd && cwd[0] != '/')
    return agsx_error_set_quiet(err, EINVAL, "cwd `%.100s` must be an absolute path", cwd);
  return agsx_mcp_arg_env(a, "env", env, err);
}

static void kill_cancelled(struct agsx_mcp *s, const char *id, uint32_t pid) {
  agsx_error_t e = NULL;
  if (agsx_process_signal(s->statefd, id, pid, SIGKILL, &e) < 0)
    agsx_error_free(&e);
  agsx_info("mcp: exec %u in %.12s cancelled: killed", pid, id);
}

static int exec(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  const char *in = arg_str(a, "stdin");
  _cleanup_strv_ char **argv = NULL, **env = NULL;
  if (command_of(a, &argv, &env, err) < 0)
    return -1;
  if (in && strlen(in) > AGSX_MCP_FILE_MAX)
    return agsx_error_set_quiet(err, E2BIG, "stdin: at most 1 MiB");
  struct agsx_record rec;
  if (agsx_mcp_find(s, arg_str(a, "sandbox"), &rec, err) < 0)
    return -1;
  int64_t t0 = agsx_mono_ns(), timeout = arg_int(a, "timeout", EXEC_TIMEOUT_DEFAULT);
  struct agsx_process_spec spec = {.argv = argv,
                                   .env = env,
                                   .cwd = arg_str(a, "cwd"),
                                   .user = arg_str(a, "user"),
                                   .stdin_open = in != NULL,
                                   .timeout_ms = (uint64_t)timeout * 1000};
  struct agsx_process_info info = {0};
  struct gathered got = {0};
  int code = 125, rc = -1;
  if (agsx_process_start(s->statefd, rec.id, &spec, &info, &code, err) < 0) {
    agsx_error_wrap(err, "exec (exit code %d)", code);
    goto out;
  }
  if (in && feed(s, rec.id, info.pid, in, err) < 0)
    goto out;
  rc = gather(s, rec.id, info.pid, 0, 0, &got, err);
  if (rc == 1)
    kill_cancelled(s, rec.id, info.pid);
  if (rc != 0)
    goto out;
  int64_t ms = (agsx_mono_ns() - t0) / 1000000;
  int sig = got.term_signal > 0 ? got.term_signal : 0;
  bool trunc[2] = {got.out[0].truncated || got.lost, got.out[1].truncated || got.lost};
  yajl_gen_map_open(g);
  agsx_json_kv_int(g, "exit_code", sig ? 128 + sig : got.exit_code);
  agsx_json_kv_int(g, "signal", sig);
  for (int i = 0; i < 2; i++) {
    agsx_json_key(g, i ? "stderr" : "stdout");
    agsx_json_bytes(g, got.out[i].buf ? got.out[i].buf : "", got.out[i].len);
  }
  agsx_json_kv_bool(g, "stdout_truncated", trunc[0]);
  agsx_json_kv_bool(g, "stderr_truncated", trunc[1]);
  agsx_json_kv_bool(g, "truncated", trunc[0] || trunc[1]);
  agsx_json_kv_bool(g, "timed_out", sig == SIGKILL && ms >= timeout * 1000);
  agsx_json_kv_int(g, "duration_ms", ms);
  yajl_gen_map_close(g);
out:
  gathered_clear(&got);
  agsx_process_info_clear(&info);
  agsx_record_clear(&rec);
  return rc;
}

/* ---- background processes ----------------------------------------------------------------------- */

static const struct arg start_args[] = {
    COMMAND_ARGS,
    {"timeout", A_INT, false, 1, 86400,
     "Seconds before its whole process tree is killed (default: none, it lives as long as the "
     "sandbox)"},
    {"stdin", A_BOOL, false, 0, 0,
     "Keep its standard input open for process_input (default: /dev/null)"},
    {0},
};

static const struct arg output_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The sandbox's id"},
    {"pid", A_INT, true, 1, 4194304, "The process (process_start's pid)"},
    {"offset", A_INT, false, 0, INT64_MAX,
     "Where to go on reading: the last answer's next_offset (default 0, the beginning)"},
    {"wait", A_INT, false, 0, 60,
     "Seconds to wait for the process to end, with what it prints meanwhile (default 0)"},
    {0},
};

static const struct arg input_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The sandbox's id"},
    {"pid", A_INT, true, 1, 4194304, "The process (started with stdin: true)"},
    {"data", A_STR, false, 0, 0, "Text written to its standard input (at most 1 MiB)"},
    {"close", A_BOOL, false, 0, 0, "Close its standard input afterwards (end of file)"},
    {0},
};

static const struct arg signal_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The sandbox's id"},
    {"pid", A_INT, true, 1, 4194304, "The process"},
    {"signal", A_STR, false, 0, 0,
     "TERM (default), KILL, INT, HUP, QUIT, USR1, USR2, STOP or CONT (with or without SIG)"},
    {0},
};

static const struct arg plist_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The sandbox's id"},
    {0},
};

#define PROCESS_PROPS                                                                              \
  "\"pid\":{\"type\":\"integer\",\"description\":\"in the sandbox\"},\"running\":{\"type\":"       \
  "\"boolean\"},\"exit_code\":{\"type\":\"integer\",\"description\":\"when it ended: its status; " \
  "128+N when killed by signal N\"}"
#define PROCESS_SCHEMA                                                                             \
  "{\"type\":\"object\",\"properties\":{" PROCESS_PROPS ",\"argv\":{\"type\":\"array\","           \
  "\"items\":{\"type\":\"string\"}}},\"required\":[\"pid\",\"running\",\"argv\"]}"
#define OUTPUT_SCHEMA                                                                              \
  "{\"type\":\"object\",\"properties\":{" PROCESS_PROPS ",\"stdout\":{\"type\":\"string\"},"       \
  "\"stderr\":{\"type\":\"string\"},\"next_offset\":{\"type\":\"integer\",\"description\":\"give " \
  "it as offset to read on\"},\"more\":{\"type\":\"boolean\",\"description\":\"output past 1 MiB " \
  "is waiting: read again from next_offset\"},\"lost\":{\"type\":\"integer\",\"description\":"     \
  "\"bytes of output the process's log (8 MiB) dropped before they were read\"}},\"required\":"    \
  "[\"pid\",\"running\",\"stdout\",\"stderr\",\"next_offset\",\"more\",\"lost\"]}"

static int find_pid(struct agsx_mcp *s, yajl_val a, struct agsx_record *rec, uint32_t *pid,
                    struct agsx_process_info *info, agsx_error_t *err) {
  if (agsx_mcp_find(s, arg_str(a, "sandbox"), rec, err) < 0)
    return -1;
  *pid = (uint32_t)arg_int(a, "pid", 0);
  if (agsx_process_get(s->statefd, rec->id, *pid, info, err) < 0) {
    agsx_record_clear(rec);
    if (agsx_error_errno(err) == ENOENT) {
      agsx_error_free(err);
      return agsx_error_set_quiet(err, ENOENT,
                                  "no process %u in this sandbox (process_start gives pids; "
                                  "process_list shows them)",
                                  *pid);
    }
    return -1;
  }
  return 0;
}

static void gen_argv(yajl_gen g, char *const *argv) {
  agsx_json_key(g, "argv");
  yajl_gen_array_open(g);
  for (size_t i = 0; argv && argv[i]; i++)
    agsx_json_str(g, argv[i]);
  yajl_gen_array_close(g);
}

static void process_fields(yajl_gen g, const struct agsx_process_info *p, bool running, int code,
                           int sig) {
  agsx_json_kv_int(g, "pid", p->pid);
  agsx_json_kv_bool(g, "running", running);
  if (!running)
    agsx_json_kv_int(g, "exit_code", sig > 0 ? 128 + sig : code);
}

static int process_start(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  _cleanup_strv_ char **argv = NULL, **env = NULL;
  if (command_of(a, &argv, &env, err) < 0)
    return -1;
  struct agsx_record rec;
  if (agsx_mcp_find(s, arg_str(a, "sandbox"), &rec, err) < 0)
    return -1;
  struct agsx_process_spec spec = {.argv = argv,
                                   .env = env,
                                   .cwd = arg_str(a, "cwd"),
                                   .user = arg_str(a, "user"),
                                   .stdin_open = arg_bool(a, "stdin"),
                                   .timeout_ms = (uint64_t)arg_int(a, "timeout", 0) * 1000};
  struct agsx_process_info info = {0};
  int code = 125, rc = agsx_process_start(s->statefd, rec.id, &spec, &info, &code, err);
  if (rc < 0) {
    agsx_error_wrap(err, "process_start (exit code %d)", code);
  } else {
    agsx_info("mcp: session %s: process %u in %.12s", s->session, info.pid, rec.id);
    yajl_gen_map_open(g);
    process_fields(g, &info, true, 0, 0);
    gen_argv(g, argv);
    yajl_gen_map_close(g);
  }
  agsx_process_info_clear(&info);
  agsx_record_clear(&rec);
  return rc;
}

static int process_output(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  struct agsx_record rec;
  struct agsx_process_info info = {0};
  uint32_t pid;
  if (find_pid(s, a, &rec, &pid, &info, err) < 0)
    return -1;
  struct gathered got = {.offset = (uint64_t)arg_int(a, "offset", 0)};
  int64_t wait_ns = agsx_mono_ns() + arg_int(a, "wait", 0) * 1000000000LL;
  int rc = gather(s, rec.id, pid, AGSX_MCP_OUTPUT_CAP, wait_ns, &got, err);
  if (rc == 0) {
    yajl_gen_map_open(g);
    process_fields(g, &info, !got.ended, got.exit_code, got.term_signal);
    for (int i = 0; i < 2; i++) {
      agsx_json_key(g, i ? "stderr" : "stdout");
      agsx_json_bytes(g, got.out[i].buf ? got.out[i].buf : "", got.out[i].len);
    }
    agsx_json_kv_int(g, "next_offset", (int64_t)got.offset);
    agsx_json_kv_bool(g, "more", got.full);
    agsx_json_kv_int(g, "lost", (int64_t)got.lost);
    yajl_gen_map_close(g);
  }
  gathered_clear(&got);
  agsx_process_info_clear(&info);
  agsx_record_clear(&rec);
  return rc;
}

static int process_input(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  const char *data = arg_str(a, "data");
  bool close = arg_bool(a, "close");
  if (data == NULL && !close)
    return agsx_error_set_quiet(err, EINVAL, "give data, close: true, or both");
  if (data && strlen(data) > AGSX_MCP_FILE_MAX)
    return agsx_error_set_quiet(err, E2BIG, "data: at most 1 MiB");
  struct agsx_record rec;
  struct agsx_process_info info = {0};
  uint32_t pid;
  if (find_pid(s, a, &rec, &pid, &info, err) < 0)
    return -1;
  int rc = -1;
  size_t len = data ? strlen(data) : 0;
  for (size_t off = 0; off < len;) {
    size_t n = len - off < AGSX_PROCESS_INPUT_MAX ? len - off : AGSX_PROCESS_INPUT_MAX;
    if (agsx_process_input(s->statefd, rec.id, pid, data + off, n, false, err) < 0)
      goto out;
    off += n;
  }
  if (close && agsx_process_close_stdin(s->statefd, rec.id, pid, err) < 0)
    goto out;
  yajl_gen_map_open(g);
  agsx_json_kv_int(g, "pid", pid);
  agsx_json_kv_int(g, "written", (int64_t)len);
  agsx_json_kv_bool(g, "closed", close);
  yajl_gen_map_close(g);
  rc = 0;
out:
  if (rc < 0 && (agsx_error_errno(err) == EPIPE || agsx_error_errno(err) == EINVAL))
    agsx_error_wrap(err, "its stdin is closed or was never open (process_start with stdin: true)");
  agsx_process_info_clear(&info);
  agsx_record_clear(&rec);
  return rc;
}

static const struct {
  const char *name;
  int sig;
} signals[] = {{"TERM", SIGTERM}, {"KILL", SIGKILL}, {"INT", SIGINT},
               {"HUP", SIGHUP},   {"QUIT", SIGQUIT}, {"USR1", SIGUSR1},
               {"USR2", SIGUSR2}, {"STOP", SIGSTOP}, {"CONT", SIGCONT}};

static int process_signal(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  const char *name = arg_str(a, "signal");
  int sig = name ? 0 : SIGTERM;
  if (name && strncasecmp(name, "SIG", 3) == 0)
    name += 3;
  for (size_t i = 0; name && sig == 0 && i < AGSX_ARRAY_SIZE(signals); i++)
    if (strcasecmp(name, signals[i].name) == 0)
      sig = signals[i].sig;
  if (sig == 0)
    return agsx_error_set_quiet(err, EINVAL, "unknown signal `%.32s` (TERM, KILL, INT, HUP, ...)",
                                arg_str(a, "signal"));
  struct agsx_record rec;
  struct agsx_process_info info = {0};
  uint32_t pid;
  if (find_pid(s, a, &rec, &pid, &info, err) < 0)
    return -1;
  int rc = agsx_process_signal(s->statefd, rec.id, pid, sig, err);
  if (rc < 0 && agsx_error_errno(err) == ENOENT)
    agsx_error_wrap(err, "process %u has ended (process_output gives its exit code)", pid);
  if (rc == 0) {
    yajl_gen_map_open(g);
    agsx_json_kv_int(g, "pid", pid);
    agsx_json_kv_int(g, "signal", sig);
    yajl_gen_map_close(g);
  }
  agsx_process_info_clear(&info);
  agsx_record_clear(&rec);
  return rc;
}

static int process_list(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  struct agsx_record rec;
  if (agsx_mcp_find(s, arg_str(a, "sandbox"), &rec, err) < 0)
    return -1;
  struct agsx_process_info *v = NULL;
  size_t n = 0;
  int rc = agsx_process_list(s->statefd, rec.id, true, &v, &n, err);
  agsx_record_clear(&rec);
  if (rc < 0)
    return -1;
  yajl_gen_map_open(g);
  agsx_json_key(g, "processes");
  yajl_gen_array_open(g);
  for (size_t i = 0; i < n; i++) {
    yajl_gen_map_open(g);
    process_fields(g, &v[i], v[i].running, v[i].exit_code, v[i].term_signal);
    gen_argv(g, v[i].argv);
    yajl_gen_map_close(g);
  }
  yajl_gen_array_close(g);
  yajl_gen_map_close(g);
  agsx_process_list_free(v, n);
  return 0;
}

/* ---- the list -------------------------------------------------------------------------------- */

const struct tool agsx_mcp_process_tools[] = {
    {"exec", "Run a command",
     "Run a command in a sandbox and wait for it: exit code, stdout and stderr (each capped at "
     "1 MiB, truncated: true past that).",
     exec_args, EXEC_SCHEMA, false, false, exec},
    {"process_start", "Start a background process",
     "Start a command in a sandbox without waiting for it (a server, a watcher, a long build); "
     "returns its pid for process_output, process_input and process_signal.",
     start_args, PROCESS_SCHEMA, false, false, process_start},
    {"process_output", "Read a process's output",
     "What a process printed from an offset on (at most 1 MiB an answer), optionally waiting "
     "for it to end; whether it runs, and its exit code once it ended.",
     output_args, OUTPUT_SCHEMA, true, false, process_output},
    {"process_input", "Write to a process's stdin",
     "Write text to the standard input of a process started with stdin: true, and optionally "
     "close it.",
     input_args,
     "{\"type\":\"object\",\"properties\":{\"pid\":{\"type\":\"integer\"},\"written\":{\"type\":"
     "\"integer\"},\"closed\":{\"type\":\"boolean\"}},\"required\":[\"pid\",\"written\","
     "\"closed\"]}",
     false, false, process_input},
    {"process_signal", "Signal a process",
     "Send a signal (TERM by default, KILL, INT, ...) to a process of a sandbox.", signal_args,
     "{\"type\":\"object\",\"properties\":{\"pid\":{\"type\":\"integer\"},\"signal\":{\"type\":"
     "\"integer\"}},\"required\":[\"pid\",\"signal\"]}",
     false, true, process_signal},
    {"process_list", "List a sandbox's processes",
     "The processes started in a sandbox through exec and process_start (the last 256 that "
     "ended too), with their state.",
     plist_args,
     "{\"type\":\"object\",\"properties\":{\"processes\":{\"type\":\"array\",\"items\":"
     "" PROCESS_SCHEMA "}},\"required\":[\"processes\"]}",
     true, false, process_list},
    {0},
};
