/* agsx — oci: start, state, kill, delete, pause/resume, ps, update, list,
 * features, exec, and the hooks. See oci.h. */
#include "config.h"

#include "host/systemd.h"
#include "oci/cgroup.h"
#include "oci/oci.h"
#include "sandbox/procexec.h"
#include "sandbox/sync.h"
#include "sandbox/userns.h"
#include "state/state.h"
#include "util/json.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>

#ifndef PIDFD_NONBLOCK
#define PIDFD_NONBLOCK O_NONBLOCK
#endif

/* ---- shared pieces ---------------------------------------------------------------------- */

int agsx_oci_read_config(int dirfd, struct agsx_oci_spec **ret, agsx_error_t *err) {
  _cleanup_free_ char *buf = NULL;
  size_t len;
  struct agsx_oci_policy pol;
  if (agsx_read_file_at(dirfd, "config.json", AGSX_OCI_CONFIG_MAX, &buf, &len, err) < 0 ||
      agsx_oci_spec_parse(buf, len, ret, err) < 0)
    return agsx_error_wrap(err, "the container's config");
  if (agsx_oci_policy_load(&pol, err) < 0 || agsx_oci_policy_apply(&pol, *ret, err) < 0) {
    agsx_oci_spec_freep(ret);
    return -1;
  }
  return 0;
}

int agsx_oci_load_seccomp(const char *root, const struct agsx_oci_spec *s,
                          struct agsx_seccomp_bpf *base, struct agsx_seccomp_bpf *eng,
                          agsx_error_t *err) {
  _cleanup_free_ char *cache = xasprintf("%s/.seccomp-cache", root);
  if (agsx_mkdir_p(root, 0700, err) < 0)
    return -1;
  /* agsx's own filter always, the engine's above it: both apply. */
  if (agsx_seccomp_load_cached(cache, NULL, 0, base, err) < 0)
    return agsx_error_wrap(err, "agsx's seccomp baseline");
  if (s->seccomp && agsx_seccomp_load_cached(cache, s->seccomp, strlen(s->seccomp), eng, err) < 0)
    return agsx_error_wrap(err, "config: linux.seccomp");
  return 0;
}

/* Forks the hook with a pipe on its stdin (*RET_IN) and one from its
 * stdout and stderr (*RET_OUT). */
static pid_t hook_spawn(const struct agsx_oci_hook *h, int *ret_in, int *ret_out,
                        agsx_error_t *err) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) < 0)
    return agsx_error_set(err, errno, "pipe");
  if (pipe2(out, O_CLOEXEC) < 0) {
    close(in[0]);
    close(in[1]);
    return agsx_error_set(err, errno, "pipe");
  }
  pid_t pid = fork();
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(out[1], 2);
    agsx_close_all_except(NULL, 0);
    char *const none[] = {h->path, NULL};
    execve(h->path, h->args && h->args[0] ? h->args : none, h->env ? h->env : (char *[]){NULL});
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  if (pid < 0) {
    close(in[1]);
    close(out[0]);
    return agsx_error_set(err, errno, "fork");
  }
  *ret_in = in[1];
  *ret_out = out[0];
  return pid;
}

/* The hook's output up to its end, the first BUFSZ-1 bytes kept in BUF;
 * past DEADLINE (0: none) it is killed: true. */
static bool hook_collect(int out, pid_t pid, int64_t deadline, char *buf, size_t bufsz,
                         size_t *ret_len) {
  size_t len = 0;
  bool timed_out = false;
  for (bool eof = false; !eof;) {
    int ms = -1;
    if (deadline) {
      int64_t left = deadline - agsx_mono_ns();
      if (left <= 0) {
        timed_out = true;
        kill(pid, SIGKILL);
        break;
      }
      ms = (int)(left / 1000000) + 1;
    }
    struct pollfd p = {.fd = out, .events = POLLIN};
    int r = poll(&p, 1, ms);
    if (r <= 0)
      continue; /* EINTR, or the deadline's turn */
    ssize_t n = read(out, buf + len, len < bufsz - 1 ? bufsz - 1 - len : 0);
    if (n <= 0 && !(n < 0 && errno == EINTR)) {
      char sink[512];
      if (len >= bufsz - 1 && read(out, sink, sizeof(sink)) > 0)
        continue;
      eof = true;
    } else if (n > 0) {
      len += (size_t)n;
    }
  }
  buf[len] = '\0';
  while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == ' '))
    buf[--len] = '\0';
  for (char *c = buf; *c; c++)
    if (*c == '\n')
      *c = ' ';
  *ret_len = len;
  return timed_out;
}

/* A hook: state on stdin, its output collected for the error, TIMEOUT. */
static int run_hook(const struct agsx_oci_hook *h, const char *state, agsx_error_t *err) {
  int in = -1, out = -1;
  pid_t pid = hook_spawn(h, &in, &out, err);
  if (pid < 0)
    return -1;
  signal(SIGPIPE, SIG_IGN);
  agsx_write_all(in, state, strlen(state));
  close(in);
  char buf[1024];
  size_t len = 0;
  int64_t deadline = h->timeout > 0 ? agsx_mono_ns() + (int64_t)h->timeout * 1000000000LL : 0;
  bool timed_out = hook_collect(out, pid, deadline, buf, sizeof(buf), &len);
  close(out);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    return agsx_error_set(err, ETIMEDOUT, "hook `%s` timed out after %d s", h->path, h->timeout);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return agsx_error_set(err, 0, "hook `%s` failed (status %d)%s%s", h->path,
                          WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
                          len ? ": " : "", buf);
  return 0;
}

int agsx_oci_run_hooks(const struct agsx_oci_spec *s, int kind, const char *state_json,
                       agsx_error_t *err) {
  for (size_t i = 0; i < s->n_hooks[kind]; i++)
    if (run_hook(&s->hooks[kind][i], state_json, err) < 0)
      return agsx_error_wrap(err, "%s hook", agsx_oci_hook_names[kind]);
  return 0;
}

/* ---- opening a container ----------------------------------------------------------------- */

struct ctr {
  int rootfd, dirfd, lockfd;
  struct agsx_oci_record rec;
  bool has_rec;
  char *rootpath;
};

static void ctr_close(struct ctr *c) {
  agsx_closep(&c->lockfd);
  agsx_closep(&c->dirfd);
  agsx_closep(&c->rootfd);
  agsx_oci_record_clear(&c->rec);
  free(c->rootpath);
}
#define _cleanup_ctr_ _cleanup_(ctr_close)

/* Opens ID (and takes its lock with LOCK). A directory without a record
 * (a create that never finished) is opened too, with has_rec false. */
static int ctr_open(const struct agsx_oci_global *g, const char *id, bool lock, struct ctr *c,
                    agsx_error_t *err) {
  memset(c, 0, sizeof(*c));
  c->rootfd = c->dirfd = c->lockfd = -1;
  c->rec.slot = -1;
  c->rootpath = g->root ? xstrdup(g->root) : agsx_oci_default_root();
  if (!agsx_oci_id_is_valid(id))
    return agsx_error_set_quiet(err, EINVAL, "invalid container ID format");
  c->rootfd = open(c->rootpath, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (c->rootfd < 0 && errno == ENOENT)
    return agsx_error_set_quiet(err, ENOENT, "container does not exist");
  if (c->rootfd < 0)
    return agsx_error_set(err, errno, "state root `%s`", c->rootpath);
  c->dirfd = agsx_oci_dir_open(c->rootfd, id, err);
  if (c->dirfd < 0)
    return -1;
  if (lock && (c->lockfd = agsx_lock_at(c->dirfd, "lock", true, err)) < 0)
    return -1;
  _cleanup_error_ agsx_error_t e = NULL;
  c->has_rec = agsx_oci_record_read(c->dirfd, &c->rec, &e) == 0;
  return 0;
}

static enum agsx_oci_status ctr_status(struct ctr *c) {
  return c->has_rec ? agsx_oci_record_status(c->dirfd, &c->rec) : AGSX_OCI_CREATING;
}

static int ctr_pidfd(struct ctr *c, agsx_error_t *err) {
  int fd = (int)syscall(SYS_pidfd_open, c->rec.pid, 0);
  if (fd < 0)
    return agsx_error_set_quiet(err, ESRCH, "container not running");
  struct agsx_proc_ref ref = {.pid = c->rec.pid, .start_time = c->rec.start_time};
  if (!agsx_proc_ref_alive(&ref)) {
    close(fd);
    return agsx_error_set_quiet(err, ESRCH, "container not running");
  }
  return fd;
}

/* ---- verbs ------------------------------------------------------------------------------------ */

int agsx_oci_state(const struct agsx_oci_global *g, const char *id, char **ret, agsx_error_t *err) {
  _cleanup_ctr_ struct ctr c;
  if (ctr_open(g, id, false, &c, err) < 0)
    return -1;
  if (!c.has_rec)
    return agsx_error_set_quiet(err, ENOENT, "container does not exist");
  *ret = agsx_oci_state_json(&c.rec, ctr_status(&c));
  return 0;
}

static int connect_start(int dirfd, int *ret, agsx_error_t *err) {
  _cleanup_close_ int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  _cleanup_close_ int cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof(a.sun_path), "start.sock");
  if (s < 0 || cwd < 0 || fchdir(dirfd) < 0)
    return agsx_error_set(err, errno, "start");
  int r = connect(s, (struct sockaddr *)&a, sizeof(a));
  int saved = errno;
  if (fchdir(cwd) < 0)
    return agsx_error_set(err, errno, "chdir back");
  if (r < 0)
    return agsx_error_set(err, saved, "start the container's init");
  *ret = steal_fd(&s);
  return 0;
}

int agsx_oci_start(const struct agsx_oci_global *g, const char *id, agsx_error_t *err) {
  _cleanup_ctr_ struct ctr c;
  if (ctr_open(g, id, true, &c, err) < 0)
    return -1;
  enum agsx_oci_status st = ctr_status(&c);
  if (!c.has_rec)
    return agsx_error_set_quiet(err, ENOENT, "container does not exist");
  if (st != AGSX_OCI_CREATED)
    return agsx_error_set_quiet(err, EINVAL, "cannot start a container that has %s",
                                st == AGSX_OCI_STOPPED ? "stopped" : "already been started");
  _cleanup_oci_spec_ struct agsx_oci_spec *s = NULL;
  if (agsx_oci_read_config(c.dirfd, &s, err) < 0)
    return -1;
  _cleanup_close_ int sock = -1;
  if (connect_start(c.dirfd, &sock, err) < 0)
    return -1;
  unlinkat(c.dirfd, "start.sock", 0);
  /* EOF: the program was exec'd (the socket is close-on-exec in it); a
   * message: why it was not. */
  struct agsx_msg m;
  ssize_t n;
  do
    n = read(sock, &m, sizeof(m));
  while (n < 0 && errno == EINTR);
  if (n == (ssize_t)sizeof(m) && m.type == AGSX_MSG_ERROR) {
    m.text[sizeof(m.text) - 1] = '\0';
    return agsx_error_set_quiet(err, m.err, "%s", m.text);
  }
  _cleanup_free_ char *state = agsx_oci_state_json(&c.rec, AGSX_OCI_RUNNING);
  /* A failing poststart hook is an error, the container stays (spec). */
  if (agsx_oci_run_hooks(s, AGSX_OCI_HOOK_POSTSTART, state, err) < 0)
    return -1;
  return 0;
}

int agsx_oci_kill(const struct agsx_oci_global *g, const char *id, int sig, bool all,
                  agsx_error_t *err) {
  _cleanup_ctr_ struct ctr c;
  if (ctr_open(g, id, true, &c, err) < 0)
    return -1;
  if (!c.has_rec)
    return agsx_error_set_quiet(err, ENOENT, "container does not exist");
  enum agsx_oci_status st = ctr_status(&c);
  if (all) {
    _cleanup_oci_cgroup_ struct agsx_oci_cgroup *cg = NULL;
    _cleanup_error_ agsx_error_t e = NULL;
    if (agsx_oci_cgroup_open(c.rec.cgroup, c.rec.cgroup_owned, &cg, &e) < 0)
      return st == AGSX_OCI_STOPPED ? 0 : agsx_error_set_quiet(err, ESRCH, "container not running");
    if (agsx_oci_cgroup_signal(cg, sig, err) < 0)
      return -1;
    bool frozen = false;
    if (sig == SIGKILL && agsx_oci_cgroup_is_frozen(cg, &frozen, &e) == 0 && frozen)
      agsx_oci_cgroup_freeze(cg, false, &e);
    return 0;
  }
  if (st == AGSX_OCI_STOPPED || st == AGSX_OCI_CREATING)
    return agsx_error_set_quiet(err, ESRCH, "container not running");
  _cleanup_close_ int pidfd = ctr_pidfd(&c, err);
  if (pidfd < 0)
    return -1;
  if (syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0) < 0)
    return agsx_error_set_quiet(err, errno, "container not running: no such process");
  if (sig == SIGKILL && st == AGSX_OCI_PAUSED) {
    _cleanup_oci_cgroup_ struct agsx_oci_cgroup *cg = NULL;
    _cleanup_error_ agsx_error_t e = NULL;
    if (agsx_oci_cgroup_open(c.rec.cgroup, false, &cg, &e) == 0)
      agsx_oci_cgroup_freeze(cg, false, &e);
  }
  return 0;
}

/* Kills what is left, runs poststop, removes the cgroup, the lease and the
 * directory. Safe on any half-made container. */
static int destroy(struct ctr *c, const char *id, agsx_error_t *err) {
  _cleanup_oci_spec_ struct agsx_oci_spec *s = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  if (c->has_rec && c->rec.pid > 0) {
    _cleanup_close_ int pidfd = (int)syscall(SYS_pidfd_open, c->rec.pid, 0);
    struct agsx_proc_ref ref = {.pid = c->rec.pid, .start_time = c->rec.start_time};
    if (pidfd >= 0 && agsx_proc_ref_alive(&ref)) {
      syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
      struct pollfd p = {.fd = pidfd, .events = POLLIN};
      poll(&p, 1, 2000);
    }
  }
  if (c->has_rec && c->rec.cgroup) {
    _cleanup_oci_cgroup_ struct agsx_oci_cgroup *cg = NULL;
    if (agsx_oci_cgroup_open(c->rec.cgroup, c->rec.cgroup_owned, &cg, &e) == 0 &&
        agsx_oci_cgroup_destroy(cg, err) < 0)
      return agsx_error_wrap(err, "delete");
  }
  /* --systemd-cgroup: what is left goes with the scope (killed above,
   * it is empty: systemd would end it anyway; stopping it is certain). */
  if (c->has_rec && c->rec.unit && agsx_systemd_stop_unit(c->rec.unit, true, err) < 0)
    return agsx_error_wrap(err, "delete");
  agsx_error_free(&e);
  if (c->has_rec && c->rec.complete && agsx_oci_read_config(c->dirfd, &s, &e) == 0) {
    _cleanup_free_ char *state = agsx_oci_state_json(&c->rec, AGSX_OCI_STOPPED);
    /* A failing poststop hook is only a warning (spec). */
    if (agsx_oci_run_hooks(s, AGSX_OCI_HOOK_POSTSTOP, state, &e) < 0)
      agsx_warn("%s", e->msg);
  }
  if (c->has_rec && c->rec.workdir)
    agsx_oci_remove_workdir(c->rec.workdir);
  if (c->has_rec && c->rec.slot >= 0)
    agsx_userns_unlease((unsigned)c->rec.slot, c->rec.pid, c->rec.start_time, NULL);
  agsx_closep(&c->lockfd);
  agsx_closep(&c->dirfd);
  if (agsx_rm_rf_at(c->rootfd, id, err) < 0)
    return agsx_error_wrap(err, "delete");
  return 0;
}

int agsx_oci_delete(const struct agsx_oci_global *g, const char *id, bool force,
                    agsx_error_t *err) {
  _cleanup_ctr_ struct ctr c;
  if (ctr_open(g, id, true, &c, err) < 0) {
    if (force && agsx_error_errno(err) == ENOENT) {
      agsx_error_free(err);
      return 0;
    }
    return -1;
  }
  enum agsx_oci_status st = ctr_status(&c);
  /* runc: a created container is killed and deleted without --force. */
  if ((st == AGSX_OCI_RUNNING || st == AGSX_OCI_PAUSED) && !force)
    return agsx_error_set_quiet(err, EBUSY, "cannot delete container %s that is not stopped: %s",
                                id, agsx_oci_status_name(st));
  return destroy(&c, id, err);
}

int agsx_oci_pause(const struct agsx_oci_global *g, const char *id, bool pause, agsx_error_t *err) {
  _cleanup_ctr_ struct ctr c;
  if (ctr_open(g, id, true, &c, err) < 0)
    return -1;
  if (!c.has_rec)
    return agsx_error_set_quiet(err, ENOENT, "container does not exist");
  enum agsx_oci_status st = ctr_status(&c);
  if (pause && st != AGSX_OCI_RUNNING && st != AGSX_OCI_CREATED)
    return agsx_error_set_quiet(
        err, EINVAL, st == AGSX_OCI_PAUSED ? "container paused" : "container not running");
  if (!pause && st != AGSX_OCI_PAUSED)
    return agsx_error_set_quiet(err, EINVAL, "container not paused");
  _cleanup_oci_cgroup_ struct agsx_oci_cgroup *cg = NULL;
  if (agsx_oci_cgroup_open(c.rec.cgroup, c.rec.cgroup_owned, &cg, err) < 0 ||
      agsx_oci_cgroup_freeze(cg, pause, err) < 0)
    return -1;
  return 0;
}

int agsx_oci_ps(const struct agsx_oci_global *g, const char *id, char **ret, agsx_error_t *err) {
  _cleanup_ctr_ struct ctr c;
  if (ctr_open(g, id, false, &c, err) < 0)
    return -1;
  if (!c.has_rec)
    return agsx_error_set_quiet(err, ENOENT, "container does not exist");
  _cleanup_oci_cgroup_ struct agsx_oci_cgroup *cg = NULL;
  _cleanup_free_ pid_t *pids = NULL;
  size_t n = 0;
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_oci_cgroup_open(c.rec.cgroup, false, &cg, &e) == 0 &&
      agsx_oci_cgroup_pids(cg, &pids, &n, err) < 0)
    return -1;
  _cleanup_gen_ yajl_gen gen = agsx_json_gen_new(false);
  yajl_gen_array_open(gen);
  for (size_t i = 0; i < n; i++)
    yajl_gen_integer(gen, pids[i]);
  yajl_gen_array_close(gen);
  *ret = agsx_json_gen_steal(gen, NULL);
  return 0;
}

int agsx_oci_update(const struct agsx_oci_global *g, const char *id, const char *json, size_t len,
                    agsx_error_t *err) {
  _cleanup_ctr_ struct ctr c;
  if (ctr_open(g, id, true, &c, err) < 0)
    return -1;
  if (!c.has_rec)
    return agsx_error_set_quiet(err, ENOENT, "container does not exist");
  if (ctr_status(&c) == AGSX_OCI_STOPPED)
    return agsx_error_set_quiet(err, ESRCH, "container not running");
  struct agsx_oci_resources r;
  if (agsx_oci_resources_parse(json, len, &r, err) < 0)
    return -1;
  _cleanup_oci_cgroup_ struct agsx_oci_cgroup *cg = NULL;
  /* systemd's properties first: a daemon-reload re-applies them, so they
   * must say what the cgroupfs files say. */
  int rv = (c.rec.unit && agsx_oci_cgroup_systemd_update(c.rec.unit, &r, err) < 0) ||
                   agsx_oci_cgroup_open(c.rec.cgroup, c.rec.cgroup_owned, &cg, err) < 0 ||
                   agsx_oci_cgroup_update(cg, &r, err) < 0
               ? -1
               : 0;
  agsx_oci_resources_clear(&r);
  return rv;
}

int agsx_oci_list(const struct agsx_oci_global *g, bool json, char **ret, agsx_error_t *err) {
  _cleanup_free_ char *rootpath = g->root ? xstrdup(g->root) : agsx_oci_default_root();
  _cleanup_close_ int rootfd = open(rootpath, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  _cleanup_gen_ yajl_gen gen = agsx_json_gen_new(true);
  _cleanup_free_ char *table = xstrdup("ID\tPID\tSTATUS\tBUNDLE\tCREATED\tOWNER\n");
  yajl_gen_array_open(gen);
  _cleanup_dir_ DIR *d = rootfd >= 0 ? agsx_dir_stream(rootfd) : NULL;
  if (rootfd < 0 && errno != ENOENT)
    return agsx_error_set(err, errno, "state root `%s`", rootpath);
  for (struct dirent *de; d && (de = readdir(d));) {
    if (de->d_name[0] == '.' || !agsx_oci_id_is_valid(de->d_name))
      continue;
    struct agsx_oci_global g2 = *g;
    g2.root = rootpath;
    _cleanup_ctr_ struct ctr c;
    _cleanup_error_ agsx_error_t e = NULL;
    if (ctr_open(&g2, de->d_name, false, &c, &e) < 0 || !c.has_rec)
      continue;
    enum agsx_oci_status st = ctr_status(&c);
    if (st == AGSX_OCI_CREATING)
      st = AGSX_OCI_STOPPED;
    _cleanup_free_ char *one = agsx_oci_state_json(&c.rec, st);
    _cleanup_json_ yajl_val v = agsx_json_parse(one, strlen(one), 1u << 20, &e);
    if (v)
      agsx_json_value(gen, v);
    char *t =
        xasprintf("%s%s\t%d\t%s\t%s\t%s\t%s\n", table, c.rec.id,
                  st == AGSX_OCI_STOPPED ? 0 : c.rec.pid, agsx_oci_status_name(st), c.rec.bundle,
                  c.rec.created ? c.rec.created : "", c.rec.owner ? c.rec.owner : "");
    free(table);
    table = t;
  }
  yajl_gen_array_close(gen);
  *ret = json ? agsx_json_gen_steal(gen, NULL) : steal_ptr(&table);
  return 0;
}

char *agsx_oci_features(void) {
  return xstrdup(
      "{\n"
      "  \"ociVersionMin\": \"1.0.0\",\n"
      "  \"ociVersionMax\": \"1.2.0\",\n"
      "  \"hooks\": [\"prestart\", \"createRuntime\", \"poststart\", \"poststop\"],\n"
      "  \"mountOptions\": [\"ro\", \"rw\", \"nosuid\", \"suid\", \"nodev\", \"dev\", "
      "\"noexec\", \"exec\", \"relatime\", \"norelatime\", \"noatime\", \"atime\", "
      "\"strictatime\", \"nodiratime\", \"diratime\", \"bind\", \"rbind\", \"private\", "
      "\"rprivate\", \"slave\", \"rslave\", \"shared\", \"rshared\", \"unbindable\", "
      "\"runbindable\"],\n"
      "  \"linux\": {\n"
      "    \"namespaces\": [\"cgroup\", \"ipc\", \"mount\", \"network\", \"pid\", \"user\", "
      "\"uts\"],\n"
      "    \"capabilities\": [\"CAP_CHOWN\", \"CAP_DAC_OVERRIDE\", \"CAP_FOWNER\", "
      "\"CAP_FSETID\", \"CAP_KILL\", \"CAP_SETGID\", \"CAP_SETUID\", \"CAP_SETPCAP\", "
      "\"CAP_NET_BIND_SERVICE\", \"CAP_SYS_CHROOT\", \"CAP_MKNOD\", \"CAP_AUDIT_WRITE\", "
      "\"CAP_SETFCAP\"],\n"
      "    \"cgroup\": {\"v1\": true, \"v2\": true, \"systemd\": true, \"systemdUser\": false, "
      "\"rdma\": false},\n"
      "    \"seccomp\": {\"enabled\": true, \"actions\": [\"SCMP_ACT_ALLOW\", "
      "\"SCMP_ACT_ERRNO\", \"SCMP_ACT_KILL\", \"SCMP_ACT_KILL_PROCESS\", \"SCMP_ACT_KILL_THREAD\", "
      "\"SCMP_ACT_LOG\", \"SCMP_ACT_TRACE\", \"SCMP_ACT_TRAP\"]},\n"
      "    \"apparmor\": {\"enabled\": true},\n"
      "    \"selinux\": {\"enabled\": true},\n"
      "    \"intelRdt\": {\"enabled\": false},\n"
      "    \"mountExtensions\": {\"idmap\": {\"enabled\": false}}\n"
      "  },\n"
      "  \"annotations\": {\"io.agsx.runtime\": \"agsx-oci\", \"io.agsx.version\": \"" VERSION
      "\"}\n"
      "}");
}

/* ---- exec ----------------------------------------------------------------------------------- */

struct exec_child {
  const struct agsx_oci_exec_opts *o;
  struct agsx_oci_process *p;
  char **env;
  int pidfd; /* the init's */
  int sock;  /* to P: X's pid, the pty master, an exec error */
  const struct agsx_seccomp_bpf *base, *eng;
  int nsflags;
  struct winsize ws; /* the pty's size before the program runs (rows 0: the kernel's) */
};

/* X: in every namespace of the container already; never returns. */
static _Noreturn void exec_x(struct exec_child *c) {
  agsx_error_t err = NULL;
  int slave = -1, master = -1;
  if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0) {
    agsx_error_set(&err, errno, "become root of the container's user namespace");
    goto fail;
  }
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
    agsx_error_set(&err, errno, "dumpable");
    goto fail;
  }
  if (c->p->terminal) { /* process.json decides, as runc: the shim sends no --tty */
    if (agsx_child_open_pty(&master, &slave, &err) < 0)
      goto fail;
    /* Sized here, before the program can look: P's relay sizing it after
     * the master arrived raced the program's first TIOCGWINSZ. */
    if (c->ws.ws_row && c->ws.ws_col)
      ioctl(master, TIOCSWINSZ, &c->ws);
    struct agsx_msg m = {.type = AGSX_MSG_READY};
    if (agsx_msg_send(c->sock, &m, &master, 1) < 0)
      _exit(1);
    close(master);
  }
  int e = agsx_proc_check_exec(c->p->args, c->env);
  if (e == ENOENT || e == ENOTDIR) {
    agsx_error_set_quiet(&err, ENOENT,
                         "exec: \"%s\": executable file not found in $PATH: no such file or "
                         "directory",
                         c->p->args[0]);
    goto fail;
  }
  if (c->p->umask >= 0)
    umask((mode_t)c->p->umask);
  if (agsx_oci_lsm_exec(c->p->apparmor, c->p->selinux, &err) < 0)
    goto fail;
  struct agsx_user u;
  memset(&u, 0, sizeof(u));
  u.uid = c->p->uid;
  u.gid = c->p->gid;
  u.groups[u.n_groups++] = c->p->gid;
  for (size_t i = 0; i < c->p->n_groups && u.n_groups < AGSX_MAX_GROUPS; i++)
    u.groups[u.n_groups++] = c->p->groups[i];
  struct agsx_proc_spec ps = {
      .argv = c->p->args,
      .env = c->env,
      .cwd = c->p->cwd,
      .user = &u,
      .tty_slave = slave,
      .seccomp = c->eng,
      .seccomp_base = c->base,
      .caps = c->p->caps,
      .preserve_fds = c->o->preserve_fds,
      .cwd_must_exist = true,
  };
  agsx_proc_exec(&ps, c->sock);
fail:;
  struct agsx_msg m = {.type = AGSX_MSG_ERROR, .code = 1, .err = err ? err->errno_ : 0};
  snprintf(m.text, sizeof(m.text), "%s", err ? err->msg : "exec failed");
  agsx_msg_send(c->sock, &m, NULL, 0);
  _exit(1);
}

/* C: joins the cgroup while still host root, then every namespace of the
 * init at once (pidfd setns: the user namespace together with the rest, so
 * a network namespace owned by the container's still joins), holding
 * nothing of the host but stdio, preserved fds and the socket to P; forks
 * X into the pid namespace and exits, so that X is the caller's (a
 * subreaper's) child. */
static _Noreturn void exec_c(struct exec_child *c) {
  int keep[16];
  size_t nkeep = 0;
  keep[nkeep++] = c->sock;
  keep[nkeep++] = c->pidfd;
  for (int i = 0; i < c->o->preserve_fds && nkeep < AGSX_ARRAY_SIZE(keep); i++)
    keep[nkeep++] = 3 + i;
  agsx_close_all_except(keep, nkeep);
  if (setns(c->pidfd, c->nsflags) < 0) {
    agsx_error_t err = NULL;
    agsx_error_set(&err, errno, "join the container's namespaces");
    struct agsx_msg m = {.type = AGSX_MSG_ERROR, .code = 1, .err = err->errno_};
    snprintf(m.text, sizeof(m.text), "%s", err->msg);
    agsx_msg_send(c->sock, &m, NULL, 0);
    _exit(1);
  }
  close(c->pidfd);
  pid_t x = fork();
  if (x == 0)
    exec_x(c);
  struct agsx_msg m = {.type = AGSX_MSG_GO, .status = x};
  agsx_msg_send(c->sock, &m, NULL, 0);
  _exit(x < 0 ? 1 : 0);
}

/* The namespaces of PID that differ from ours (joining one's own user
 * namespace is EINVAL). */
static int ns_flags(pid_t pid) {
  static const struct {
    const char *name;
    int flag;
  } kinds[] = {{"user", CLONE_NEWUSER},    {"mnt", CLONE_NEWNS},  {"pid", CLONE_NEWPID},
               {"ipc", CLONE_NEWIPC},      {"uts", CLONE_NEWUTS}, {"net", CLONE_NEWNET},
               {"cgroup", CLONE_NEWCGROUP}};
  int flags = 0;
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(kinds); i++) {
    char a[64], b[64];
    struct stat sa, sb;
    snprintf(a, sizeof(a), "/proc/%d/ns/%s", pid, kinds[i].name);
    snprintf(b, sizeof(b), "/proc/self/ns/%s", kinds[i].name);
    if (stat(a, &sa) < 0 || stat(b, &sb) < 0 || sa.st_ino != sb.st_ino || sa.st_dev != sb.st_dev)
      flags |= kinds[i].flag;
  }
  return flags | CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID;
}

static int exec_process(const struct agsx_oci_exec_opts *o, const struct agsx_oci_spec *s,
                        struct agsx_oci_process *p, agsx_error_t *err) {
  struct agsx_oci_policy pol;
  if (o->process_json) {
    if (agsx_oci_process_parse(o->process_json, o->process_len, p, err) < 0)
      return -1;
    /* No score of its own: the container's (runc 1.1 gives every exec
     * the container's, whatever process.json says). */
    if (!p->has_oom_score_adj && s->process.has_oom_score_adj) {
      p->has_oom_score_adj = true;
      p->oom_score_adj = s->process.oom_score_adj;
    }
  } else {
    /* `exec ID CMD...`: the container's process with another command. */
    memset(p, 0, sizeof(*p));
    *p = s->process;
    p->args = agsx_strv_concat(o->argv, NULL);
    p->env = agsx_strv_concat(s->process.env, o->env);
    p->cwd = xstrdup(o->cwd ? o->cwd : s->process.cwd);
    p->rlimits = NULL;
    p->n_rlimits = 0;
    p->terminal = o->tty; /* apparmor, selinux: the container's (borrowed) */
    if (p->args[0] == NULL)
      return agsx_error_set(err, EINVAL, "exec: no command");
  }
  if (agsx_oci_policy_load(&pol, err) < 0 || agsx_oci_policy_process(&pol, p, err) < 0)
    return -1;
  /* exec can never gain what the init lacks (Podman's exec --privileged
   * asks for every capability). */
  for (int k = 0; k < AGSX_OCI_CAP_SETS; k++)
    p->caps[k] &= s->process.caps[AGSX_OCI_CAP_BOUNDING];
  return 0;
}

/* C reports X's pid, X its terminal (with --tty): in either order. */
static int exec_wait_x(int sock, bool tty, pid_t *ret_x, int *ret_master, agsx_error_t *err) {
  *ret_master = -1;
  *ret_x = -1;
  while (*ret_x < 0 || (tty && *ret_master < 0)) {
    struct agsx_msg m;
    int fd = -1;
    size_t nfds = 0;
    ssize_t n = agsx_msg_recv(sock, &m, &fd, 1, &nfds);
    if (n <= 0)
      return agsx_error_set(err, n < 0 ? (int)-n : 0, "exec: the process died during setup");
    if (m.type == AGSX_MSG_ERROR) {
      if (nfds)
        close(fd);
      m.text[sizeof(m.text) - 1] = '\0';
      return agsx_error_set_quiet(err, m.err, "%s", m.text);
    }
    if (m.type == AGSX_MSG_GO)
      *ret_x = m.status;
    else if (m.type == AGSX_MSG_READY && nfds == 1)
      *ret_master = fd;
    else if (nfds)
      close(fd);
  }
  return 0;
}

/* The detached exec's pid file, as create's. */
static int exec_pid_file(const char *path, pid_t x, agsx_error_t *err) {
  char v[16];
  int n = snprintf(v, sizeof(v), "%d", (int)x);
  _cleanup_free_ char *dir = xstrdup(path);
  char *slash = strrchr(dir, '/');
  if (slash == dir)
    dir[1] = '\0';
  else if (slash)
    *slash = '\0';
  _cleanup_close_ int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return agsx_error_set(err, errno, "pid file `%s`", path);
  return agsx_oci_write_file(dfd, slash ? slash + 1 : path, v, (size_t)n, 0644, err);
}

/* The signals a foreground exec forwards to its process, as runc: every
 * one but those that cannot be caught and SIGCHLD. */
static void forwarded_signals(sigset_t *set) {
  sigemptyset(set);
  for (int sig = 1; sig < 32; sig++)
    if (sig != SIGKILL && sig != SIGSTOP && sig != SIGCHLD)
      sigaddset(set, sig);
  for (int sig = SIGRTMIN; sig <= SIGRTMAX; sig++)
    sigaddset(set, sig);
}

/* BEGIN: blocks FWD (from before the fork: a signal sent meanwhile is
 * queued for the process, not lost; X unblocks everything before its
 * exec) and sets them to SIG_DFL (an inherited SIG_IGN, as a shell's
 * background job has for INT and QUIT, would discard them before signalfd
 * sees them; runc catches them all the same). Else restores both. */
static void fg_signals(bool begin, const sigset_t *fwd, sigset_t *old, struct sigaction *olds) {
  if (begin)
    sigprocmask(SIG_BLOCK, fwd, old);
  for (int sig = 1; sig < NSIG; sig++)
    if (sigismember(fwd, sig) == 1)
      sigaction(sig, begin ? &(struct sigaction){.sa_handler = SIG_DFL} : &olds[sig],
                begin ? &olds[sig] : NULL);
  if (!begin)
    sigprocmask(SIG_SETMASK, old, NULL);
}

/* A foreground exec's terminal without a console socket (`runc exec -t`
 * in a terminal, CRI-O's streaming exec): agsx-oci holds the pty master
 * and copies the caller's stdin to it and it to the caller's stdout, the
 * caller's terminal raw meanwhile (the pty does the echo and line
 * editing), its size passed on at SIGWINCH. Stdin's end is the pty's
 * end-of-file character. */
struct relay {
  int master;     /* -1: no terminal, or the slave side is gone */
  bool in_open;   /* stdin still read */
  char buf[4096]; /* stdin's bytes the pty did not take yet */
  size_t len, off;
  bool raw; /* the caller's terminal was made raw */
  struct termios saved;
};

static void relay_begin(struct relay *r, int master) {
  memset(r, 0, sizeof(*r));
  r->master = master;
  r->in_open = master >= 0;
  if (master < 0)
    return;
  fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK);
  if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &r->saved) == 0) {
    struct termios raw = r->saved;
    cfmakeraw(&raw);
    r->raw = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
  }
}

static void relay_end(struct relay *r) {
  if (r->raw)
    tcsetattr(STDIN_FILENO, TCSANOW, &r->saved);
  r->raw = false;
}

static void write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return; /* the caller's stdout is gone: the output is dropped, as runc */
    p += w;
    n -= (size_t)w;
  }
}

/* The pty's output to stdout: what is there now (non-blocking master).
 * EIO: no slave left. */
static void relay_out(struct relay *r) {
  char b[16384];
  for (;;) {
    ssize_t n = read(r->master, b, sizeof(b));
    if (n > 0) {
      write_all(STDOUT_FILENO, b, (size_t)n);
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n == 0 || errno != EAGAIN)
      agsx_closep(&r->master);
    return;
  }
}

/* Stdin to the pty (what fits; the rest waits for POLLOUT). */
static void relay_in(struct relay *r, bool readable) {
  if (readable && r->len == 0) {
    ssize_t n = read(STDIN_FILENO, r->buf, sizeof(r->buf));
    if (n < 0 && errno == EINTR)
      return;
    r->off = 0;
    if (n <= 0) {
      struct termios t;
      r->in_open = false;
      r->buf[0] = tcgetattr(r->master, &t) == 0 ? (char)t.c_cc[VEOF] : 4;
      r->len = 1;
    } else {
      r->len = (size_t)n;
    }
  }
  while (r->len > r->off) {
    ssize_t w = write(r->master, r->buf + r->off, r->len - r->off);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0 && errno == EAGAIN)
      return;
    if (w <= 0) {
      r->len = r->off = 0;
      r->in_open = false;
      return;
    }
    r->off += (size_t)w;
  }
  r->len = r->off = 0;
}

/* Polls the process, the signals and the relay's ends; 1 when the process
 * ended, 0 otherwise. */
static int relay_poll(struct relay *r, int pfd, int sfd, agsx_error_t *err) {
  struct pollfd fds[4] = {{.fd = pfd, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
  nfds_t n = 2;
  int mi = -1, ii = -1;
  if (r->master >= 0) {
    mi = (int)n;
    fds[n++] = (struct pollfd){.fd = r->master, .events = POLLIN | (r->len ? POLLOUT : 0)};
  }
  if (r->master >= 0 && r->in_open && r->len == 0) {
    ii = (int)n;
    fds[n++] = (struct pollfd){.fd = STDIN_FILENO, .events = POLLIN};
  }
  if (poll(fds, n, -1) < 0) {
    if (errno == EINTR)
      return 0;
    return agsx_error_set(err, errno, "wait for the process");
  }
  if (fds[1].revents & POLLIN) {
    struct signalfd_siginfo si;
    if (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
      if (si.ssi_signo == SIGWINCH && r->master >= 0)
        agsx_term_winsize(r->master); /* the kernel signals the pty's group */
      else
        syscall(SYS_pidfd_send_signal, pfd, (int)si.ssi_signo, NULL, 0);
    }
  }
  if (mi >= 0 && (fds[mi].revents & (POLLIN | POLLHUP | POLLERR)))
    relay_out(r);
  if (mi >= 0 && r->master >= 0 && (fds[mi].revents & POLLOUT))
    relay_in(r, false);
  if (ii >= 0 && r->master >= 0 && (fds[ii].revents & (POLLIN | POLLHUP | POLLERR)))
    relay_in(r, true);
  if (ii >= 0 && (fds[ii].revents & POLLNVAL))
    r->in_open = false;
  return (fds[0].revents & POLLIN) != 0;
}

/* Waits for X (our child: C exited, we are the subreaper), passing on the
 * signals we receive meanwhile (blocked since before the fork), relaying
 * its terminal when MASTER is ours (owned; closed here). */
static int exec_wait_fg(pid_t x, int master, int *ret_status, agsx_error_t *err) {
  sigset_t set;
  forwarded_signals(&set);
  struct relay r;
  relay_begin(&r, master);
  _cleanup_close_ int sfd = signalfd(-1, &set, SFD_CLOEXEC);
  _cleanup_close_ int pfd = (int)syscall(SYS_pidfd_open, x, 0);
  int rv = -1;
  if (sfd < 0 || pfd < 0) {
    agsx_error_set(err, errno, "wait for the process");
    goto out;
  }
  for (;;) {
    int ended = relay_poll(&r, pfd, sfd, err);
    if (ended < 0)
      goto out;
    if (ended == 0)
      continue;
    if (r.master >= 0)
      relay_out(&r); /* what it wrote last */
    int status;
    pid_t w = waitpid(x, &status, 0);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0) {
      agsx_error_set(err, errno, "wait for the process");
      goto out;
    }
    *ret_status = agsx_wait_status_exit_code(status, NULL);
    rv = 0;
    goto out;
  }
out:
  relay_end(&r);
  agsx_closep(&r.master);
  return rv;
}

/* EOF on the socket: X exec'd. A message: why not. */
static int exec_started(int sock, agsx_error_t *err) {
  struct agsx_msg m;
  ssize_t n;
  do
    n = read(sock, &m, sizeof(m));
  while (n < 0 && errno == EINTR);
  if (n == (ssize_t)sizeof(m) && m.type == AGSX_MSG_ERROR) {
    m.text[sizeof(m.text) - 1] = '\0';
    return agsx_error_set_quiet(err, m.err, "%s", m.text);
  }
  return 0;
}

/* C's side of the fork: the cgroup and oomScoreAdj as host root (X
 * inherits the score; inside the user namespace it could only raise it),
 * then exec_c. */
static _Noreturn void exec_child(struct exec_child *ec, struct agsx_oci_cgroup *cg) {
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_oci_cgroup_attach(cg, getpid(), &e) < 0 || agsx_oci_oom_score_adj(0, ec->p, &e) < 0) {
    struct agsx_msg m = {.type = AGSX_MSG_ERROR, .code = 1};
    snprintf(m.text, sizeof(m.text), "%s", e->msg);
    agsx_msg_send(ec->sock, &m, NULL, 0);
    _exit(1);
  }
  exec_c(ec);
}

/* Forks C, which forks X; *RET_X is X once it reported (and exec'd, or
 * failed: *ERR). The terminal's master goes to the console socket. */
static int exec_spawn(struct exec_child *ec, struct agsx_oci_cgroup *cg, pid_t *ret_x,
                      int *ret_master, agsx_error_t *err) {
  const struct agsx_oci_exec_opts *o = ec->o;
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
    return agsx_error_set(err, errno, "socketpair");
  ec->sock = sp[1];
  pid_t cpid = fork();
  if (cpid == 0) {
    close(sp[0]);
    exec_child(ec, cg);
  }
  close(sp[1]);
  _cleanup_close_ int sock = sp[0], master = -1;
  if (cpid < 0)
    return agsx_error_set(err, errno, "fork");
  int cst;
  int wr = exec_wait_x(sock, ec->p->terminal, ret_x, &master, err);
  while (waitpid(cpid, &cst, 0) < 0 && errno == EINTR) {
  }
  if (wr == 0 && ec->p->terminal && o->console_socket &&
      agsx_oci_send_console(o->console_socket, master, err) < 0) {
    kill(*ret_x, SIGKILL);
    wr = -1;
  }
  if (wr == 0 && ec->p->terminal && !o->console_socket)
    *ret_master = steal_fd(&master); /* ours to relay; X sized it (ec->ws) */
  if (wr == 0 && exec_started(sock, err) < 0)
    wr = -1;
  if (wr < 0 && *ret_x > 0 && !o->detach)
    waitpid(*ret_x, NULL, 0);
  return wr;
}

/* X's process, filters and cgroup, made ready for exec_spawn. */
static int exec_prepare(struct ctr *c, const struct agsx_oci_spec *s, struct exec_child *ec,
                        struct agsx_seccomp_bpf *base, struct agsx_seccomp_bpf *eng,
                        struct agsx_oci_cgroup **cg, agsx_error_t *err) {
  if (ec->p->terminal && !ec->o->console_socket && ec->o->detach)
    return agsx_error_set(err, EINVAL,
                          "cannot allocate tty if agsx-oci will detach without setting console "
                          "socket");
  if (agsx_oci_load_seccomp(c->rootpath, s, base, eng, err) < 0 ||
      agsx_oci_cgroup_open(c->rec.cgroup, false, cg, err) < 0 ||
      (ec->pidfd = ctr_pidfd(c, err)) < 0)
    return -1;
  ec->base = base->len ? base : NULL;
  ec->eng = eng->len ? eng : NULL;
  ec->nsflags = ns_flags(c->rec.pid);
  return 0;
}

static void exec_process_clear(const struct agsx_oci_exec_opts *o, struct agsx_oci_process *p) {
  if (o->process_json) {
    agsx_oci_process_clear(p);
    return;
  }
  agsx_strv_free(p->args);
  agsx_strv_free(p->env);
  free(p->cwd);
}

int agsx_oci_exec(const struct agsx_oci_global *g, const struct agsx_oci_exec_opts *o,
                  int *ret_status, agsx_error_t *err) {
  *ret_status = 0;
  if (o->preserve_fds < 0 || o->preserve_fds > 12)
    return agsx_error_set(err, EINVAL, "--preserve-fds %d: at most 12", o->preserve_fds);
  _cleanup_ctr_ struct ctr c;
  if (ctr_open(g, o->id, false, &c, err) < 0)
    return -1;
  if (!c.has_rec)
    return agsx_error_set_quiet(err, ENOENT, "container does not exist");
  enum agsx_oci_status st = ctr_status(&c);
  if (st != AGSX_OCI_RUNNING && st != AGSX_OCI_CREATED)
    return agsx_error_set_quiet(
        err, EINVAL, st == AGSX_OCI_PAUSED ? "container paused" : "container not running");
  _cleanup_oci_spec_ struct agsx_oci_spec *s = NULL;
  struct agsx_oci_process p;
  if (agsx_oci_read_config(c.dirfd, &s, err) < 0 || exec_process(o, s, &p, err) < 0)
    return -1;
  _cleanup_seccomp_bpf_ struct agsx_seccomp_bpf base = {0}, eng = {0};
  _cleanup_oci_cgroup_ struct agsx_oci_cgroup *cg = NULL;
  _cleanup_strv_ char **env = agsx_strv_concat(p.env, NULL);
  struct exec_child ec = {.o = o, .p = &p, .env = env, .pidfd = -1, .sock = -1};
  if (p.terminal) {
    /* The process's consoleSize; relayed here (foreground, no console
     * socket), the caller's terminal's size first, else 24x80. */
    ec.ws = (struct winsize){.ws_row = (unsigned short)p.rows, .ws_col = (unsigned short)p.cols};
    if (!o->console_socket && ioctl(STDIN_FILENO, TIOCGWINSZ, &ec.ws) < 0 &&
        ioctl(STDOUT_FILENO, TIOCGWINSZ, &ec.ws) < 0 && ec.ws.ws_row == 0)
      ec.ws = (struct winsize){.ws_row = 24, .ws_col = 80};
  }
  sigset_t fwd, old;
  struct sigaction olds[NSIG];
  forwarded_signals(&fwd);
  pid_t x = -1;
  int r = -1, master = -1;
  if (exec_prepare(&c, s, &ec, &base, &eng, &cg, err) < 0)
    goto out;
  if (!o->detach) {
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    fg_signals(true, &fwd, &old, olds);
  }
  if (exec_spawn(&ec, cg, &x, &master, err) < 0)
    goto restore;
  if (o->detach) {
    if (o->pid_file && exec_pid_file(o->pid_file, x, err) < 0)
      kill(x, SIGKILL);
    else
      r = 0;
    goto out;
  }
  r = exec_wait_fg(x, master, ret_status, err);
restore:
  if (!o->detach)
    fg_signals(false, &fwd, &old, olds);
out:
  agsx_closep(&ec.pidfd);
  exec_process_clear(o, &p);
  return r;
}
