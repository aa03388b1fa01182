/* agsx — sandbox: processes a sandbox's supervisor owns (see processes.h
 * and procs-internal.h). The client side reads STATE/<id>/ and talks to
 * the supervisor over STATE/<id>/ctl; the supervisor side starts the
 * processes through agsx_exec_start and owns their stdio and logs. */
#include "config.h"

#include "sandbox/procs-internal.h"
#include "net/relay.h"
#include "sandbox/control.h"
#include "sandbox/exec.h"
#include "sandbox/proc.h"
#include "util/json.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define PROCS_DIR "procs"
#define CONFIG_JSON "config.json"
#define CONFIG_MAX (256u << 10)
#define CTL_REPLY_TIMEOUT_MS 60000 /* a start on a loaded machine */
#define CTL_CONNS_MAX 64
#define INPUT_PENDING_MAX (1u << 20) /* stdin bytes a process has not taken yet */

/* ---- the client side ---------------------------------------------------------------------- */

/* STATE/<ID>: ID must be a full id (the front end resolves names and prefixes). */
static int open_sandbox_dir(int statefd, const char *id, agsx_error_t *err) {
  size_t n = strlen(id);
  bool hex = n == 32;
  for (size_t i = 0; hex && i < n; i++)
    hex = (id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f');
  if (!hex)
    return agsx_error_set(err, EINVAL, "`%s` is not a sandbox id", id);
  int fd = openat(statefd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return agsx_error_set_quiet(err, errno == ENOENT ? ENOENT : errno, "no such sandbox `%.12s`",
                                id);
  return fd;
}

int agsx_sandbox_log_open(int statefd, const char *id, uint64_t from, struct agsx_log_reader **ret,
                          agsx_error_t *err) {
  _cleanup_close_ int dirfd = open_sandbox_dir(statefd, id, err);
  if (dirfd < 0)
    return -1;
  if (faccessat(dirfd, "log", F_OK, AT_SYMLINK_NOFOLLOW) < 0)
    return agsx_error_set_quiet(
        err, ENOENT, "sandbox `%.12s` has no log (only detached sandboxes keep one)", id);
  return agsx_log_reader_open(dirfd, "log", from, ret, err);
}

void agsx_process_info_clear(struct agsx_process_info *p) {
  free(p->tag);
  agsx_strv_free(p->argv);
  agsx_strv_free(p->env);
  free(p->cwd);
  free(p->user);
  memset(p, 0, sizeof(*p));
}

void agsx_process_list_free(struct agsx_process_info *list, size_t n) {
  for (size_t i = 0; i < n; i++)
    agsx_process_info_clear(&list[i]);
  free(list);
}

/* The address of DIRFD/ctl: through /proc/self/fd, whatever the state
 * directory's path length (sun_path holds 108 bytes). */
static void ctl_addr(int dirfd, struct sockaddr_un *a) {
  memset(a, 0, sizeof(*a));
  a->sun_family = AF_UNIX;
  snprintf(a->sun_path, sizeof(a->sun_path), "/proc/self/fd/%d/%s", dirfd, AGSX_CONTROL_SOCKET);
}

/* Whether sandbox ID is running, for the error of a failed connect. */
static int not_running(int statefd, const char *id, agsx_error_t *err) {
  struct agsx_record r;
  agsx_error_t e = NULL;
  if (agsx_record_read(statefd, id, &r, &e) < 0) {
    agsx_error_free(&e);
    return agsx_error_set_quiet(err, ESRCH, "no such sandbox `%.12s`", id);
  }
  bool running = r.status == AGSX_STATUS_RUNNING;
  agsx_record_clear(&r);
  if (running)
    return agsx_error_set_quiet(err, ESRCH,
                                "sandbox `%.12s` has no control socket (not started by this "
                                "version of agsx, or its supervisor is gone)",
                                id);
  return agsx_error_set_quiet(err, ESRCH, "sandbox `%.12s` is not running", id);
}

/* One request, one reply. */
static int call(int statefd, const char *id, const struct agsx_control_msg *m,
                struct agsx_control_reply *ret, agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  size_t len;
  _cleanup_free_ char *req = agsx_control_msg_encode(m, &len, err);
  if (req == NULL)
    return -1;
  _cleanup_close_ int dirfd = open_sandbox_dir(statefd, id, err);
  if (dirfd < 0)
    return -1;
  _cleanup_close_ int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return agsx_error_set(err, errno, "socket");
  struct sockaddr_un a;
  ctl_addr(dirfd, &a);
  if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
    if (errno == ENOENT || errno == ECONNREFUSED)
      return not_running(statefd, id, err);
    return agsx_error_set(err, errno, "connect to the supervisor of `%.12s`", id);
  }
  if (send(fd, req, len, MSG_NOSIGNAL) != (ssize_t)len)
    return agsx_error_set(err, errno ? errno : EMSGSIZE, "send to the supervisor of `%.12s`", id);
  struct pollfd p = {.fd = fd, .events = POLLIN};
  int n = poll(&p, 1, CTL_REPLY_TIMEOUT_MS);
  if (n == 0)
    return agsx_error_set(err, ETIMEDOUT, "the supervisor of `%.12s` did not answer", id);
  _cleanup_free_ char *buf = xmalloc(AGSX_CONTROL_MSG_MAX);
  ssize_t got = n < 0 ? -1 : recv(fd, buf, AGSX_CONTROL_MSG_MAX, 0);
  if (got <= 0)
    return agsx_error_set(err, got < 0 ? errno : ESRCH,
                          "the supervisor of `%.12s` closed the connection", id);
  if (agsx_control_reply_parse(buf, (size_t)got, ret, err) < 0)
    return -1;
  if (!ret->ok) {
    int e = ret->errno_ ? ret->errno_ : EIO;
    agsx_error_set_quiet(err, e, "%s", ret->error);
    return -1;
  }
  return 0;
}

int agsx_process_start(int statefd, const char *id, const struct agsx_process_spec *spec,
                       struct agsx_process_info *ret, int *ret_code, agsx_error_t *err) {
  struct agsx_control_msg m = {.op = AGSX_OP_START, .spec = *spec};
  struct agsx_control_reply r;
  *ret_code = 125;
  memset(ret, 0, sizeof(*ret));
  int rc = call(statefd, id, &m, &r, err);
  if (rc < 0 && r.code)
    *ret_code = r.code;
  uint32_t pid = r.pid;
  agsx_control_reply_clear(&r);
  if (rc < 0)
    return -1;
  *ret_code = 0;
  return agsx_process_get(statefd, id, pid, ret, err);
}

static int simple(int statefd, const char *id, struct agsx_control_msg *m, agsx_error_t *err) {
  struct agsx_control_reply r;
  int rc = call(statefd, id, m, &r, err);
  agsx_control_reply_clear(&r);
  return rc;
}

int agsx_process_input(int statefd, const char *id, uint32_t pid, const void *buf, size_t len,
                       bool pty, agsx_error_t *err) {
  if (len > AGSX_PROCESS_INPUT_MAX)
    return agsx_error_set(err, EFBIG, "at most %u bytes of input at once", AGSX_PROCESS_INPUT_MAX);
  struct agsx_control_msg m = {
      .op = AGSX_OP_INPUT, .pid = pid, .pty = pty, .data = buf, .len = len};
  return simple(statefd, id, &m, err);
}

int agsx_process_close_stdin(int statefd, const char *id, uint32_t pid, agsx_error_t *err) {
  struct agsx_control_msg m = {.op = AGSX_OP_CLOSE_STDIN, .pid = pid};
  return simple(statefd, id, &m, err);
}

int agsx_process_signal(int statefd, const char *id, uint32_t pid, int sig, agsx_error_t *err) {
  struct agsx_control_msg m = {.op = AGSX_OP_SIGNAL, .pid = pid, .signal = sig};
  return simple(statefd, id, &m, err);
}

int agsx_process_resize(int statefd, const char *id, uint32_t pid, unsigned cols, unsigned rows,
                        agsx_error_t *err) {
  struct agsx_control_msg m = {.op = AGSX_OP_RESIZE, .pid = pid};
  m.spec.cols = cols;
  m.spec.rows = rows;
  return simple(statefd, id, &m, err);
}

/* ---- the processes' records (STATE/<id>/procs/<pid>/config.json) ---------------------------- */

static void gen_strv_key(yajl_gen g, const char *key, char *const *v) {
  agsx_json_key(g, key);
  yajl_gen_array_open(g);
  for (size_t i = 0; v && v[i]; i++)
    agsx_json_str(g, v[i]);
  yajl_gen_array_close(g);
}

static char **json_strv(yajl_val v, const char *key) {
  yajl_val a = agsx_json_get_array(v, key);
  char **out = agsx_strv_concat(NULL, NULL);
  for (size_t i = 0; a && i < a->u.array.len; i++)
    if (YAJL_IS_STRING(a->u.array.values[i]))
      agsx_strv_push(&out, YAJL_GET_STRING(a->u.array.values[i]));
  return out;
}

static char *json_str(yajl_val v, const char *key) {
  const char *s = agsx_json_get_string(v, key);
  return s ? xstrdup(s) : NULL;
}

static int info_from_json(const char *buf, size_t len, struct agsx_process_info *p,
                          agsx_error_t *err) {
  _cleanup_json_ yajl_val v = agsx_json_parse(buf, len, CONFIG_MAX, err);
  if (v == NULL)
    return -1;
  int64_t pid = 0, code = -1, sig = 0, started = 0, ended = 0;
  yajl_val running = agsx_json_get(v, "running"), pty = agsx_json_get(v, "pty");
  if (!agsx_json_get_int64(v, "pid", &pid) || pid <= 0 || pid > UINT32_MAX)
    return agsx_error_set(err, EINVAL, "process record without a pid");
  agsx_json_get_int64(v, "exit_code", &code);
  agsx_json_get_int64(v, "term_signal", &sig);
  agsx_json_get_int64(v, "started_ns", &started);
  agsx_json_get_int64(v, "ended_ns", &ended);
  p->pid = (uint32_t)pid;
  p->tag = json_str(v, "tag");
  p->argv = json_strv(v, "argv");
  p->env = json_strv(v, "env");
  p->cwd = json_str(v, "cwd");
  p->user = json_str(v, "user");
  p->pty = pty && YAJL_IS_TRUE(pty);
  p->running = running && YAJL_IS_TRUE(running);
  p->exit_code = (int)code;
  p->term_signal = (int)sig;
  p->started_ns = started;
  p->ended_ns = ended;
  return 0;
}

static char *info_to_json(const struct agsx_process_info *p, size_t *ret_len) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_int(g, "pid", p->pid);
  agsx_json_kv_str(g, "tag", p->tag);
  gen_strv_key(g, "argv", p->argv);
  gen_strv_key(g, "env", p->env);
  agsx_json_kv_str(g, "cwd", p->cwd);
  agsx_json_kv_str(g, "user", p->user);
  agsx_json_kv_bool(g, "pty", p->pty);
  agsx_json_kv_bool(g, "running", p->running);
  agsx_json_kv_int(g, "exit_code", p->exit_code);
  agsx_json_kv_int(g, "term_signal", p->term_signal);
  agsx_json_kv_int(g, "started_ns", p->started_ns);
  agsx_json_kv_int(g, "ended_ns", p->ended_ns);
  yajl_gen_map_close(g);
  return agsx_json_gen_steal(g, ret_len);
}

/* A process whose record says running while its sandbox's supervisor is
 * gone died with the sandbox. */
static bool sandbox_alive(int statefd, const char *id) {
  struct agsx_record r;
  agsx_error_t e = NULL;
  if (agsx_record_read(statefd, id, &r, &e) < 0) {
    agsx_error_free(&e);
    return false;
  }
  int fd = r.status == AGSX_STATUS_RUNNING ? agsx_proc_ref_pidfd(&r.supervisor) : -1;
  agsx_record_clear(&r);
  if (fd < 0)
    return false;
  close(fd);
  return true;
}

static int read_info(int procsfd, const char *name, struct agsx_process_info *ret,
                     agsx_error_t *err) {
  _cleanup_close_ int d = openat(procsfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (d < 0)
    return agsx_error_set_quiet(err, errno == ENOENT ? ENOENT : errno, "no such process %s", name);
  _cleanup_free_ char *buf = NULL;
  size_t len;
  if (agsx_read_file_at(d, CONFIG_JSON, CONFIG_MAX, &buf, &len, err) < 0)
    return -1;
  return info_from_json(buf, len, ret, err);
}

static int open_procs(int statefd, const char *id, agsx_error_t *err) {
  _cleanup_close_ int dirfd = open_sandbox_dir(statefd, id, err);
  if (dirfd < 0)
    return -1;
  int fd = openat(dirfd, PROCS_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno != ENOENT)
    return agsx_error_set(err, errno, "open the processes of `%.12s`", id);
  return fd; /* -1 (errno ENOENT): none yet */
}

int agsx_process_get(int statefd, const char *id, uint32_t pid, struct agsx_process_info *ret,
                     agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  _cleanup_close_ int procs = open_procs(statefd, id, err);
  if (procs < 0)
    return *err ? -1 : agsx_error_set_quiet(err, ENOENT, "no such process %u", pid);
  char name[16];
  snprintf(name, sizeof(name), "%u", pid);
  if (read_info(procs, name, ret, err) < 0)
    return -1;
  if (ret->running && !sandbox_alive(statefd, id)) {
    ret->running = false;
    ret->exit_code = 128 + SIGKILL;
    ret->term_signal = SIGKILL;
  }
  return 0;
}

static int cmp_started(const void *a, const void *b) {
  const struct agsx_process_info *x = a, *y = b;
  return x->started_ns < y->started_ns ? -1 : x->started_ns > y->started_ns;
}

int agsx_process_list(int statefd, const char *id, bool include_ended,
                      struct agsx_process_info **ret, size_t *ret_n, agsx_error_t *err) {
  *ret = NULL;
  *ret_n = 0;
  _cleanup_close_ int procs = open_procs(statefd, id, err);
  if (procs < 0)
    return *err ? -1 : 0;
  _cleanup_dir_ DIR *d = agsx_dir_stream(procs);
  if (d == NULL)
    return agsx_error_set(err, errno, "list the processes of `%.12s`", id);
  bool alive = sandbox_alive(statefd, id);
  struct agsx_process_info *v = NULL;
  size_t n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9')
      continue;
    struct agsx_process_info p;
    agsx_error_t e2 = NULL;
    memset(&p, 0, sizeof(p));
    if (read_info(procs, e->d_name, &p, &e2) < 0) {
      agsx_error_free(&e2); /* (being written or removed) */
      continue;
    }
    if (p.running && !alive) {
      p.running = false;
      p.exit_code = 128 + SIGKILL;
      p.term_signal = SIGKILL;
    }
    if (!p.running && !include_ended) {
      agsx_process_info_clear(&p);
      continue;
    }
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      v = xrealloc(v, cap * sizeof(*v));
    }
    v[n++] = p;
  }
  if (n)
    qsort(v, n, sizeof(*v), cmp_started);
  *ret = v;
  *ret_n = n;
  return 0;
}

int agsx_process_find_tag(int statefd, const char *id, const char *tag,
                          struct agsx_process_info *ret, agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  struct agsx_process_info *v;
  size_t n;
  if (agsx_process_list(statefd, id, false, &v, &n, err) < 0)
    return -1;
  ssize_t best = -1;
  for (size_t i = 0; i < n; i++)
    if (v[i].tag && strcmp(v[i].tag, tag) == 0)
      best = (ssize_t)i; /* sorted by start: the last is the newest */
  if (best >= 0) {
    *ret = v[best];
    memset(&v[best], 0, sizeof(v[best]));
  }
  agsx_process_list_free(v, n);
  if (best < 0)
    return agsx_error_set_quiet(err, ENOENT, "no running process tagged `%.64s`", tag);
  return 0;
}

int agsx_process_log_open(int statefd, const char *id, uint32_t pid, uint64_t from,
                          struct agsx_log_reader **ret, agsx_error_t *err) {
  _cleanup_close_ int procs = open_procs(statefd, id, err);
  if (procs < 0)
    return *err ? -1 : agsx_error_set_quiet(err, ENOENT, "no such process %u", pid);
  char name[16];
  snprintf(name, sizeof(name), "%u", pid);
  _cleanup_close_ int d = openat(procs, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (d < 0)
    return agsx_error_set_quiet(err, errno == ENOENT ? ENOENT : errno, "no such process %u", pid);
  return agsx_log_reader_open(d, "log", from, ret, err);
}

/* ---- the supervisor side ------------------------------------------------------------------ */

struct proc {
  struct agsx_process_info info;
  struct agsx_exec *e;
  int out[2];    /* stdout and stderr read ends, or the pty master in out[0]; -1: closed */
  int in;        /* the stdin pipe's write end or the pty master; -1: none or closed */
  bool close_in; /* close stdin once the pending input is written */
  char *pend;
  size_t pend_len;
  struct agsx_log_writer *log;
  int64_t deadline; /* agsx_mono_ns; 0: none */
  bool timed_out;
  int dirfd; /* procs/<pid> */
};

struct agsx_procs {
  int statefd, dirfd, procsfd, listen_fd;
  struct agsx_record rec;
  const struct agsx_seccomp_bpf *seccomp;
  uint64_t cap;
  struct proc **v; /* running */
  size_t n, cap_v;
  uint32_t *ended; /* ended pids, oldest first (pruned beyond AGSX_PROCESS_KEEP_ENDED) */
  size_t n_ended;
  int conns[CTL_CONNS_MAX];
  size_t n_conns;
};

int agsx_procs_new(int statefd, int dirfd, const struct agsx_record *rec,
                   const struct agsx_seccomp_bpf *seccomp, uint64_t log_cap,
                   struct agsx_procs **ret, agsx_error_t *err) {
  struct agsx_procs *ps = xzalloc(sizeof(*ps));
  ps->statefd = ps->dirfd = ps->procsfd = ps->listen_fd = -1;
  *ret = ps;
  ps->seccomp = seccomp;
  ps->cap = log_cap;
  size_t len;
  _cleanup_free_ char *json = agsx_record_to_json(rec, &len);
  if (agsx_record_from_json(json, len, &ps->rec, err) < 0)
    return -1;
  ps->statefd = fcntl(statefd, F_DUPFD_CLOEXEC, 3);
  ps->dirfd = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
  if (ps->statefd < 0)
    return agsx_error_set(err, errno, "state directory");
  if (ps->dirfd < 0 || (mkdirat(ps->dirfd, PROCS_DIR, 0700) < 0 && errno != EEXIST))
    return agsx_error_set(err, errno, "processes directory");
  ps->procsfd = openat(ps->dirfd, PROCS_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  ps->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (ps->procsfd < 0 || ps->listen_fd < 0)
    return agsx_error_set(err, errno, "control socket");
  struct sockaddr_un a;
  ctl_addr(ps->dirfd, &a);
  unlinkat(ps->dirfd, AGSX_CONTROL_SOCKET, 0);
  /* 0600 from the start: no window in which another user could connect. */
  mode_t old = umask(0177);
  int r = bind(ps->listen_fd, (struct sockaddr *)&a, sizeof(a));
  umask(old);
  if (r < 0 || listen(ps->listen_fd, 64) < 0)
    return agsx_error_set(err, errno, "control socket");
  return 0;
}

/* Written whole and renamed into place, without agsx_write_file_atomic's
 * fsyncs: the state directory does not outlive a reboot, and a start or an
 * end must not wait for a disk (twice per process). */
static void proc_write_info(struct proc *p) {
  size_t len;
  _cleanup_free_ char *json = info_to_json(&p->info, &len);
  _cleanup_close_ int fd = openat(p->dirfd, CONFIG_JSON ".tmp",
                                  O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 || agsx_write_all(fd, json, len) < 0 ||
      renameat(p->dirfd, CONFIG_JSON ".tmp", p->dirfd, CONFIG_JSON) < 0)
    agsx_warn("process %u: write its record: %s", p->info.pid, strerror(errno));
}

static void proc_free(struct proc *p) {
  if (p == NULL)
    return;
  agsx_process_info_clear(&p->info);
  agsx_exec_free(p->e);
  if (p->out[0] == p->in)
    p->out[0] = -1; /* the pty master, once */
  agsx_closep(&p->out[0]);
  agsx_closep(&p->out[1]);
  agsx_closep(&p->in);
  free(p->pend);
  agsx_log_writer_free(p->log);
  agsx_closep(&p->dirfd);
  free(p);
}

/* The process's pid in the sandbox's pid namespace: the last NSpid field. */
static uint32_t ns_pid(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  _cleanup_fclose_ FILE *f = fopen(path, "re");
  char line[256];
  while (f && fgets(line, sizeof(line), f))
    if (strncmp(line, "NSpid:", 6) == 0) {
      char *last = strrchr(line, '\t');
      last = last ? last : line + 6;
      long v = strtol(last, NULL, 10);
      return v > 0 && v <= UINT32_MAX ? (uint32_t)v : 0;
    }
  return 0;
}

/* Ended processes beyond the keep count go, oldest first. */
static void prune_ended(struct agsx_procs *ps, uint32_t pid) {
  ps->ended = xrealloc(ps->ended, (ps->n_ended + 1) * sizeof(*ps->ended));
  ps->ended[ps->n_ended++] = pid;
  while (ps->n_ended > AGSX_PROCESS_KEEP_ENDED) {
    char name[16];
    snprintf(name, sizeof(name), "%u", ps->ended[0]);
    agsx_error_t err = NULL;
    agsx_rm_rf_at(ps->procsfd, name, &err);
    agsx_error_free(&err);
    memmove(ps->ended, ps->ended + 1, --ps->n_ended * sizeof(*ps->ended));
  }
}

static int open_stdio(const struct agsx_process_spec *s, struct proc *p, int child[3],
                      agsx_error_t *err) {
  int pipes[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}};
  child[0] = child[1] = child[2] = -1;
  if (s->pty)
    return 0;
  for (int i = 0; i < 3; i++)
    if ((i > 0 || s->stdin_open) && pipe2(pipes[i], O_CLOEXEC) < 0)
      goto fail;
  child[0] = s->stdin_open ? pipes[0][0] : open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (child[0] < 0)
    goto fail;
  p->in = pipes[0][1];
  child[1] = pipes[1][1];
  child[2] = pipes[2][1];
  p->out[0] = pipes[1][0];
  p->out[1] = pipes[2][0];
  for (int i = 0; i < 2; i++)
    fcntl(p->out[i], F_SETFL, O_NONBLOCK);
  if (p->in >= 0)
    fcntl(p->in, F_SETFL, O_NONBLOCK);
  return 0;
fail:
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 2; j++)
      agsx_closep(&pipes[i][j]);
  return agsx_error_set(err, errno, "pipes for the process");
}

/* Its directory, its log and its record, once it runs. */
static int proc_record(struct agsx_procs *ps, struct proc *p, agsx_error_t *err) {
  char name[16];
  snprintf(name, sizeof(name), "%u", p->info.pid);
  agsx_error_t e = NULL;
  agsx_rm_rf_at(ps->procsfd, name, &e); /* a pid used again: the old one goes */
  agsx_error_free(&e);
  if (mkdirat(ps->procsfd, name, 0700) < 0)
    return agsx_error_set(err, errno, "process directory");
  p->dirfd = openat(ps->procsfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (p->dirfd < 0)
    return agsx_error_set(err, errno, "process directory");
  if (agsx_log_writer_open(p->dirfd, "log", ps->cap, &p->log, err) < 0)
    return -1;
  proc_write_info(p);
  return 0;
}

static void info_from_spec(struct agsx_process_info *i, const struct agsx_process_spec *s) {
  i->tag = s->tag ? xstrdup(s->tag) : NULL;
  i->argv = agsx_strv_concat(s->argv, NULL);
  i->env = agsx_strv_concat(s->env, NULL);
  i->cwd = s->cwd ? xstrdup(s->cwd) : NULL;
  i->user = s->user ? xstrdup(s->user) : NULL;
  i->pty = s->pty;
  i->running = true;
  i->exit_code = -1;
  i->started_ns = agsx_now_ns();
}

/* Forks and execs it (agsx_exec_start, with the record as it is now: a
 * paused sandbox is refused there); P then holds its pipes or pty master. */
static int proc_exec(struct agsx_procs *ps, const struct agsx_process_spec *s, struct proc *p,
                     int *ret_code, agsx_error_t *err) {
  int child[3];
  if (open_stdio(s, p, child, err) < 0)
    return -1;
  struct winsize ws = {.ws_row = (unsigned short)(s->rows ? s->rows : 24),
                       .ws_col = (unsigned short)(s->cols ? s->cols : 80)};
  struct agsx_exec_config cfg = {.argv = s->argv,
                                 .env = s->env,
                                 .cwd = s->cwd,
                                 .user = s->user,
                                 .tty = s->pty,
                                 .stdio = {child[0], child[1], child[2]},
                                 .seccomp = ps->seccomp,
                                 .winsize = s->pty ? &ws : NULL};
  struct agsx_record rec;
  int r = agsx_record_read(ps->statefd, ps->rec.id, &rec, err);
  if (r == 0) {
    r = agsx_exec_start(&rec, &cfg, &p->e, ret_code, err);
    agsx_record_clear(&rec);
  }
  for (int i = 0; i < 3; i++)
    agsx_closep(&child[i]);
  if (r < 0)
    return -1;
  if (s->pty) {
    p->out[0] = p->in = p->e->pty_master;
    p->e->pty_master = -1;
    fcntl(p->in, F_SETFL, O_NONBLOCK);
  }
  return 0;
}

static int proc_start(struct agsx_procs *ps, const struct agsx_process_spec *s, uint32_t *ret_pid,
                      int *ret_code, agsx_error_t *err) {
  *ret_code = 125;
  if (ps->n >= AGSX_PROCESS_MAX)
    return agsx_error_set(err, EAGAIN, "at most %d processes at once", AGSX_PROCESS_MAX);
  /* A process holds about a dozen fds (pipes, pidfd, log, directory, exec
   * cgroup): the soft limit (1024 by default) is raised towards the hard
   * one as they add up, rather than refusing the 80th. */
  agsx_relay_fd_limit_raise(32);
  struct proc *p = xzalloc(sizeof(*p));
  p->out[0] = p->out[1] = p->in = p->dirfd = -1;
  if (proc_exec(ps, s, p, ret_code, err) < 0) {
    proc_free(p);
    return -1;
  }
  p->info.pid = ns_pid(p->e->pid);
  info_from_spec(&p->info, s);
  if (s->timeout_ms)
    p->deadline = agsx_mono_ns() + (int64_t)s->timeout_ms * 1000000LL;
  if (p->info.pid == 0 || proc_record(ps, p, err) < 0) {
    if (*err == NULL)
      agsx_error_set(err, ESRCH, "the process is gone");
    agsx_exec_kill_tree(p->e);
    agsx_exec_reap(p->e);
    proc_free(p);
    *ret_code = 125;
    return -1;
  }
  if (ps->n == ps->cap_v) {
    ps->cap_v = ps->cap_v ? 2 * ps->cap_v : 16;
    ps->v = xrealloc(ps->v, ps->cap_v * sizeof(*ps->v));
  }
  ps->v[ps->n++] = p;
  *ret_pid = p->info.pid;
  *ret_code = 0;
  return 0;
}

static struct proc *find(struct agsx_procs *ps, uint32_t pid) {
  for (size_t i = 0; i < ps->n; i++)
    if (ps->v[i]->info.pid == pid)
      return ps->v[i];
  return NULL;
}

/* Writes what is pending to stdin; closes it when asked and done. False
 * when the reader is gone (EPIPE: stdin is closed then). */
static bool flush_input(struct proc *p) {
  while (p->pend_len > 0 && p->in >= 0) {
    ssize_t n = write(p->in, p->pend, p->pend_len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      return true;
    if (n <= 0) {
      p->pend_len = 0;
      if (!p->info.pty)
        agsx_closep(&p->in);
      return false;
    }
    memmove(p->pend, p->pend + n, p->pend_len - (size_t)n);
    p->pend_len -= (size_t)n;
  }
  if (p->close_in && p->pend_len == 0 && p->in >= 0 && !p->info.pty)
    agsx_closep(&p->in);
  return true;
}

static int op_input(struct proc *p, const struct agsx_control_msg *m, agsx_error_t *err) {
  if (m->pty != p->info.pty)
    return agsx_error_set(err, EINVAL,
                          m->pty ? "process %u has no pty: send its input as stdin"
                                 : "process %u has a pty: send its input as pty input",
                          p->info.pid);
  if (p->in < 0 || p->close_in)
    return agsx_error_set(err, EPIPE, "the stdin of process %u is closed", p->info.pid);
  if (p->pend_len + m->len > INPUT_PENDING_MAX)
    return agsx_error_set(err, EAGAIN, "process %u is not reading its input", p->info.pid);
  p->pend = xrealloc(p->pend, p->pend_len + m->len + 1);
  memcpy(p->pend + p->pend_len, m->data, m->len);
  p->pend_len += m->len;
  if (!flush_input(p))
    return agsx_error_set(err, EPIPE, "process %u closed its stdin", p->info.pid);
  return 0;
}

static int op_on(struct agsx_procs *ps, const struct agsx_control_msg *m, agsx_error_t *err) {
  struct proc *p = find(ps, m->pid);
  if (p == NULL)
    return agsx_error_set(err, ENOENT, "process %u is not running", m->pid);
  switch (m->op) {
  case AGSX_OP_INPUT: return op_input(p, m, err);
  case AGSX_OP_CLOSE_STDIN:
    if (p->info.pty)
      return agsx_error_set(err, EINVAL, "process %u has a pty: send EOF (^D) as input", m->pid);
    p->close_in = true;
    flush_input(p);
    return 0;
  case AGSX_OP_SIGNAL:
    if (agsx_pidfd_signal(p->e->pidfd, m->signal, 0) < 0)
      return agsx_error_set(err, ESRCH, "process %u is not running", m->pid);
    return 0;
  case AGSX_OP_RESIZE: {
    if (!p->info.pty)
      return agsx_error_set(err, EINVAL, "process %u has no pty", m->pid);
    struct winsize ws = {.ws_row = (unsigned short)m->spec.rows,
                         .ws_col = (unsigned short)m->spec.cols};
    if (ioctl(p->in, TIOCSWINSZ, &ws) < 0)
      return agsx_error_set(err, errno, "resize the pty of process %u", m->pid);
    return 0;
  }
  default: return agsx_error_set(err, EINVAL, "unknown request");
  }
}

/* A peer must be root or us: the socket is 0600 in a 0700 directory, and
 * this holds even if those modes were changed. */
static bool peer_allowed(int fd) {
  struct ucred c;
  socklen_t len = sizeof(c);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &len) < 0)
    return false;
  return c.uid == 0 || c.uid == geteuid();
}

static void reply(int fd, const struct agsx_control_reply *r) {
  size_t len;
  _cleanup_free_ char *b = agsx_control_reply_encode(r, &len);
  if (send(fd, b, len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
  }
}

static void serve_one(struct agsx_procs *ps, int fd, const char *buf, size_t len) {
  agsx_error_t err = NULL;
  struct agsx_control_msg m;
  struct agsx_control_reply r = {.ok = true};
  int code = 125;
  if (agsx_control_msg_parse(buf, len, &m, &err) == 0) {
    if (m.op == AGSX_OP_START)
      r.ok = proc_start(ps, &m.spec, &r.pid, &code, &err) == 0;
    else
      r.ok = op_on(ps, &m, &err) == 0;
    agsx_control_msg_clear(&m);
  } else {
    r.ok = false;
  }
  if (!r.ok) {
    r.errno_ = err ? err->errno_ : EIO;
    r.code = code;
    r.error = err ? err->msg : NULL;
  }
  reply(fd, &r);
  agsx_error_free(&err);
}

static void conn_read(struct agsx_procs *ps, size_t i) {
  static char buf[AGSX_CONTROL_MSG_MAX + 1];
  ssize_t n = recv(ps->conns[i], buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC);
  if (n < 0 && (errno == EAGAIN || errno == EINTR))
    return;
  if (n <= 0) {
    agsx_closep(&ps->conns[i]);
    return;
  }
  if ((size_t)n > AGSX_CONTROL_MSG_MAX) {
    struct agsx_control_reply r = {
        .errno_ = EMSGSIZE, .code = 125, .error = (char *)"control message too large"};
    reply(ps->conns[i], &r);
    return;
  }
  serve_one(ps, ps->conns[i], buf, (size_t)n);
}

static void accept_conns(struct agsx_procs *ps) {
  for (;;) {
    int fd = accept4(ps->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
      return;
    if (!peer_allowed(fd) || ps->n_conns == CTL_CONNS_MAX) {
      close(fd); /* (a full table: clients retry or fail, the supervisor is unharmed) */
      continue;
    }
    ps->conns[ps->n_conns++] = fd;
  }
}

size_t agsx_procs_ctl_nfds(const struct agsx_procs *ps) { return ps ? 1 + CTL_CONNS_MAX : 0; }

size_t agsx_procs_ctl_fill(struct agsx_procs *ps, struct pollfd *p) {
  if (ps == NULL)
    return 0;
  p[0] = (struct pollfd){.fd = ps->listen_fd, .events = POLLIN};
  for (size_t i = 0; i < ps->n_conns; i++)
    p[1 + i] = (struct pollfd){.fd = ps->conns[i], .events = POLLIN};
  return 1 + ps->n_conns;
}

void agsx_procs_ctl_dispatch(struct agsx_procs *ps, const struct pollfd *p, size_t n) {
  if (ps == NULL || n == 0)
    return;
  for (size_t i = 0; i + 1 < n && i < ps->n_conns; i++)
    if (p[1 + i].revents)
      conn_read(ps, i);
  size_t k = 0;
  for (size_t i = 0; i < ps->n_conns; i++)
    if (ps->conns[i] >= 0)
      ps->conns[k++] = ps->conns[i];
  ps->n_conns = k;
  if (p[0].revents)
    accept_conns(ps);
}

/* ---- the processes' output and end ---- */

static void proc_output(struct proc *p, int i) {
  char buf[65536];
  ssize_t n = read(p->out[i], buf, sizeof(buf));
  if (n < 0 && (errno == EAGAIN || errno == EINTR))
    return;
  if (n <= 0) { /* EOF, or EIO: the pty's other side is closed */
    if (p->out[i] == p->in)
      p->in = -1;
    agsx_closep(&p->out[i]);
    return;
  }
  enum agsx_log_kind k = p->info.pty ? AGSX_LOG_PTY : i == 0 ? AGSX_LOG_STDOUT : AGSX_LOG_STDERR;
  agsx_error_t err = NULL;
  if (agsx_log_write(p->log, k, buf, (size_t)n, &err) < 0)
    agsx_error_free(&err);
}

/* Reads what is in the pipes now, without waiting: a process it left
 * behind may hold them open for ever. */
static void proc_drain(struct proc *p) {
  for (int i = 0; i < 2; i++)
    for (int rounds = 0; p->out[i] >= 0 && rounds < 64; rounds++) {
      struct pollfd q = {.fd = p->out[i], .events = POLLIN};
      if (poll(&q, 1, 0) <= 0)
        break;
      proc_output(p, i);
    }
}

static void proc_end(struct agsx_procs *ps, struct proc *p, const char *why) {
  agsx_exec_reap(p->e);
  proc_drain(p);
  p->info.running = false;
  p->info.exit_code = p->e->term_signal ? 128 + p->e->term_signal : p->e->exit_code;
  p->info.term_signal = p->e->term_signal;
  p->info.ended_ns = agsx_now_ns();
  const char *error = p->timed_out ? "the process timed out" : why;
  agsx_error_t err = NULL;
  if (agsx_log_end(p->log, p->info.exit_code, p->info.term_signal, error, &err) < 0)
    agsx_warn("process %u: %s", p->info.pid, err->msg);
  agsx_error_free(&err);
  proc_write_info(p);
  prune_ended(ps, p->info.pid);
}

#define SLOTS 4 /* per process: stdout (or the pty), stderr, stdin (POLLOUT), pidfd */

size_t agsx_procs_nfds(const struct agsx_procs *ps) { return ps ? SLOTS * ps->n : 0; }

size_t agsx_procs_fill(struct agsx_procs *ps, struct pollfd *p) {
  if (ps == NULL)
    return 0;
  for (size_t i = 0; i < ps->n; i++) {
    struct proc *x = ps->v[i];
    struct pollfd *q = p + SLOTS * i;
    q[0] = (struct pollfd){.fd = x->out[0], .events = POLLIN};
    q[1] = (struct pollfd){.fd = x->out[1], .events = POLLIN};
    q[2] = (struct pollfd){.fd = x->pend_len && !x->info.pty ? x->in : -1, .events = POLLOUT};
    q[3] = (struct pollfd){.fd = x->e->pidfd, .events = POLLIN};
  }
  return SLOTS * ps->n;
}

void agsx_procs_dispatch(struct agsx_procs *ps, const struct pollfd *p, size_t n) {
  if (ps == NULL)
    return;
  int64_t now = agsx_mono_ns();
  size_t k = 0, filled = n / SLOTS;
  for (size_t i = 0; i < ps->n; i++) {
    struct proc *x = ps->v[i];
    bool ended = false;
    if (i < filled) {
      const struct pollfd *q = p + SLOTS * i;
      for (int j = 0; j < 2; j++)
        if (q[j].revents)
          proc_output(x, j);
      if (q[2].revents || (x->info.pty && x->pend_len))
        flush_input(x);
      ended = q[3].revents != 0;
    }
    if (!ended && x->deadline && now >= x->deadline && !x->timed_out) {
      x->timed_out = true;
      agsx_exec_kill_tree(x->e); /* the pidfd says when it is gone */
    }
    if (ended) {
      proc_end(ps, x, NULL);
      proc_free(x);
      continue;
    }
    ps->v[k++] = x;
  }
  ps->n = k;
}

int agsx_procs_timeout_ms(const struct agsx_procs *ps) {
  if (ps == NULL)
    return -1;
  int64_t now = agsx_mono_ns(), best = -1;
  for (size_t i = 0; i < ps->n; i++) {
    const struct proc *x = ps->v[i];
    if (x->deadline && !x->timed_out) {
      int64_t ms = x->deadline > now ? (x->deadline - now + 999999) / 1000000 : 0;
      best = best < 0 || ms < best ? ms : best;
    }
    if (x->info.pty && x->pend_len)
      best = best < 0 || best > 10 ? 10 : best; /* a pty master takes input in bursts */
  }
  return best > 60000 ? 60000 : (int)best;
}

void agsx_procs_kill_all(struct agsx_procs *ps, const char *why) {
  if (ps == NULL)
    return;
  for (size_t i = 0; i < ps->n; i++) {
    agsx_exec_kill_tree(ps->v[i]->e);
    proc_end(ps, ps->v[i], why);
    proc_free(ps->v[i]);
  }
  ps->n = 0;
}

void agsx_procs_end(struct agsx_procs *ps, const char *why) {
  if (ps == NULL)
    return;
  if (ps->listen_fd >= 0) {
    agsx_closep(&ps->listen_fd);
    unlinkat(ps->dirfd, AGSX_CONTROL_SOCKET, 0);
  }
  for (size_t i = 0; i < ps->n_conns; i++)
    agsx_closep(&ps->conns[i]);
  ps->n_conns = 0;
  agsx_procs_kill_all(ps, why);
}

void agsx_procs_free(struct agsx_procs *ps) {
  if (ps == NULL)
    return;
  for (size_t i = 0; i < ps->n; i++)
    proc_free(ps->v[i]);
  for (size_t i = 0; i < ps->n_conns; i++)
    agsx_closep(&ps->conns[i]);
  free(ps->v);
  free(ps->ended);
  agsx_record_clear(&ps->rec);
  agsx_closep(&ps->listen_fd);
  agsx_closep(&ps->procsfd);
  agsx_closep(&ps->dirfd);
  agsx_closep(&ps->statefd);
  free(ps);
}
