/* agsx — host/rootless: the user's namespace, its holder and its id map. */
#include "config.h"

#include "host/rootless.h"
#include "host/cgroup.h"
#include "host/systemd.h"
#include "state/state.h"

#include <ctype.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <linux/capability.h>
#include <linux/nsfs.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#define SUBUID_FILE "/etc/subuid"
#define SUBGID_FILE "/etc/subgid"
/* A sandbox's ids; the user's namespace maps up to RANGES_MAX of them. */
#define RANGE_IDS 65536UL
#define RANGES_MAX 64UL
#define HOLDER_FILE "userns"
#define HOLDER_LOCK "userns.lock"
/* Set for our re-exec in the user's namespace (agsx_rootless_wanted). */
#define REEXEC_MARK "AGSX_ROOTLESS_NS"

static bool rootless_on;
/* How many ids from 0 the user's namespace maps onto subordinate ids. */
static unsigned long rootless_span = RANGE_IDS;
static char *rootless_state;

bool agsx_rootless(void) { return rootless_on; }
const char *agsx_rootless_state(void) { return rootless_state; }
unsigned long agsx_rootless_ids(void) {
  return rootless_span < RANGE_IDS ? rootless_span : RANGE_IDS;
}
unsigned long agsx_rootless_ranges(void) { return rootless_span / RANGE_IDS; }

/* ---- /etc/subuid ---------------------------------------------------------------------- */

static bool parse_ulong(const char *s, size_t n, unsigned long *ret) {
  if (n == 0 || n > 10)
    return false;
  unsigned long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isdigit((unsigned char)s[i]))
      return false;
    v = v * 10 + (unsigned long)(s[i] - '0');
  }
  if (v > UINT32_MAX)
    return false;
  *ret = v;
  return true;
}

void agsx_subid_find(const char *text, size_t len, const char *user, unsigned long uid,
                     struct agsx_subid *ret) {
  char num[16];
  snprintf(num, sizeof(num), "%lu", uid);
  *ret = (struct agsx_subid){0, 0};
  const char *end = text + len;
  for (const char *l = text; l < end;) {
    const char *nl = memchr(l, '\n', (size_t)(end - l));
    const char *le = nl ? nl : end;
    const char *c1 = memchr(l, ':', (size_t)(le - l));
    const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(le - c1 - 1)) : NULL;
    unsigned long start, count;
    if (l < le && *l != '#' && c1 && c2 && parse_ulong(c1 + 1, (size_t)(c2 - c1 - 1), &start) &&
        parse_ulong(c2 + 1, (size_t)(le - c2 - 1), &count) && count > 0 &&
        start + count - 1 <= UINT32_MAX - 1) {
      size_t nlen = (size_t)(c1 - l);
      bool mine = (user && strlen(user) == nlen && memcmp(l, user, nlen) == 0) ||
                  (strlen(num) == nlen && memcmp(l, num, nlen) == 0);
      if (mine && count > ret->count)
        *ret = (struct agsx_subid){start, count};
    }
    l = le + 1;
  }
}

static void subid_of(const char *file, const char *user, unsigned long id, struct agsx_subid *ret) {
  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  *ret = (struct agsx_subid){0, 0};
  if (agsx_read_file_at(AT_FDCWD, file, 1 << 20, &text, &len, NULL) == 0)
    agsx_subid_find(text, len, user, id, ret);
}

static char *user_name(uid_t uid) {
  struct passwd pw, *res = NULL;
  char buf[4096];
  if (getpwuid_r(uid, &pw, buf, sizeof(buf), &res) == 0 && res)
    return xstrdup(res->pw_name);
  return NULL;
}

/* ---- paths ----------------------------------------------------------------------------- */

static char *home_dir(void) {
  const char *h = getenv("HOME");
  if (h && h[0] == '/')
    return xstrdup(h);
  struct passwd pw, *res = NULL;
  char buf[4096];
  if (getpwuid_r(geteuid(), &pw, buf, sizeof(buf), &res) == 0 && res && res->pw_dir[0] == '/')
    return xstrdup(res->pw_dir);
  return NULL;
}

/* $VAR if it is an absolute path, else HOME/REL. */
static char *xdg_dir(const char *var, const char *rel) {
  const char *v = getenv(var);
  if (v && v[0] == '/')
    return xstrdup(v);
  _cleanup_free_ char *home = home_dir();
  return home ? xasprintf("%s/%s", home, rel) : NULL;
}

int agsx_rootless_paths(char **ret_root, char **ret_state, char **ret_config, agsx_error_t *err) {
  _cleanup_free_ char *data = xdg_dir("XDG_DATA_HOME", ".local/share");
  _cleanup_free_ char *conf = xdg_dir("XDG_CONFIG_HOME", ".config");
  const char *run = getenv("XDG_RUNTIME_DIR");
  _cleanup_free_ char *fallback = NULL;
  if (run == NULL || run[0] != '/') {
    /* systemd-logind's directory of the user, when the variable was lost
     * (sudo -u, su without -l). */
    fallback = xasprintf("/run/user/%u", (unsigned)geteuid());
    struct stat st;
    if (stat(fallback, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
      return agsx_error_set(err, ENOENT,
                            "no runtime directory for uid %u: XDG_RUNTIME_DIR is not set and "
                            "%s is not yours (log in through systemd-logind, or set "
                            "XDG_RUNTIME_DIR or AGSX_STATE)",
                            (unsigned)geteuid(), fallback);
    run = fallback;
  }
  if (data == NULL || conf == NULL)
    return agsx_error_set(err, ENOENT, "no home directory: set HOME, or AGSX_ROOT and AGSX_CONFIG");
  *ret_root = xasprintf("%s/agsx", data);
  *ret_state = xasprintf("%s/agsx", run);
  *ret_config = xasprintf("%s/agsx/agsx.conf", conf);
  return 0;
}

/* ---- the holder ------------------------------------------------------------------------ */

/* Runs ARGV (a setuid newuidmap/newgidmap), waiting for it; its stderr is
 * kept for the error. */
static int run_helper(char *const argv[], agsx_error_t *err) {
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) < 0)
    return agsx_error_set(err, errno, "pipe");
  pid_t pid = fork();
  if (pid < 0) {
    close(pfd[0]);
    close(pfd[1]);
    return agsx_error_set(err, errno, "fork");
  }
  if (pid == 0) {
    dup2(pfd[1], 2);
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
      dup2(null, 0);
      dup2(null, 1);
    }
    execvp(argv[0], argv);
    dprintf(2, "%s", strerror(errno));
    _exit(127);
  }
  close(pfd[1]);
  char msg[512];
  ssize_t n = agsx_read_all(pfd[0], msg, sizeof(msg) - 1);
  close(pfd[0]);
  msg[n > 0 ? n : 0] = '\0';
  for (char *e = msg + strlen(msg); e > msg && (e[-1] == '\n' || e[-1] == ' '); e--)
    e[-1] = '\0';
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return agsx_error_set(err, errno, "wait for %s", argv[0]);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
    return 0;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
    return agsx_error_set(err, ENOENT,
                          "%s: %s (install Debian's uidmap package, which has the setuid "
                          "newuidmap and newgidmap)",
                          argv[0], msg[0] ? msg : "not found");
  return agsx_error_set(err, EPERM, "%s failed: %s", argv[0], msg[0] ? msg : "no message");
}

static int write_self_map(pid_t pid, const char *file, const char *line, agsx_error_t *err) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
  _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0 || agsx_write_all(fd, line, strlen(line)) < 0)
    return agsx_error_set(err, errno, "write `%s`", path);
  return 0;
}

/* The maps of the holder PID: subordinate ids 0…N-1, the user at N; or,
 * without subordinate ids, the user alone as 0 (written directly: a user
 * may map itself). */
static int write_maps(pid_t pid, const struct agsx_subid *su, const struct agsx_subid *sg,
                      agsx_error_t *err) {
  uid_t uid = geteuid();
  gid_t gid = getegid();
  if (su->count == 0 || sg->count == 0) {
    char line[64];
    snprintf(line, sizeof(line), "0 %u 1\n", (unsigned)uid);
    if (write_self_map(pid, "setgroups", "deny", err) < 0 ||
        write_self_map(pid, "uid_map", line, err) < 0)
      return -1;
    snprintf(line, sizeof(line), "0 %u 1\n", (unsigned)gid);
    return write_self_map(pid, "gid_map", line, err);
  }
  unsigned long n = su->count < sg->count ? su->count : sg->count;
  if (n > RANGE_IDS * RANGES_MAX)
    n = RANGE_IDS * RANGES_MAX;
  /* Whole ranges of a sandbox's size (sandbox/userns.h), when there is
   * more than one. */
  if (n > RANGE_IDS)
    n -= n % RANGE_IDS;
  char spid[16], sbase[16], sn[16], sown[16];
  snprintf(spid, sizeof(spid), "%d", (int)pid);
  snprintf(sn, sizeof(sn), "%lu", n);
  snprintf(sbase, sizeof(sbase), "%lu", su->start);
  snprintf(sown, sizeof(sown), "%u", (unsigned)uid);
  char *uargv[] = {"newuidmap", spid, "0", sbase, sn, sn, sown, "1", NULL};
  if (run_helper(uargv, err) < 0)
    return -1;
  snprintf(sbase, sizeof(sbase), "%lu", sg->start);
  snprintf(sown, sizeof(sown), "%u", (unsigned)gid);
  char *gargv[] = {"newgidmap", spid, "0", sbase, sn, sn, sown, "1", NULL};
  return run_helper(gargv, err);
}

/* What the holder says through its pipe: its pid, and an errno (0: done). */
struct holder_word {
  pid_t pid;
  int e;
};

static void holder_say(int up, int e) {
  struct holder_word w = {getpid(), e};
  (void)!write(up, &w, sizeof(w));
}

/* The holder: a process of the user's namespace that does nothing but
 * keep it (and its mount namespace) alive. It leaves its caller's session,
 * terminal and fds. */
static _Noreturn void holder_main(int up, int down) {
  char c = 0;
  int e = 0;
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0)
    e = errno;
  holder_say(up, e);
  if (e || read(down, &c, 1) != 1)
    _exit(1);
  /* Host mounts propagate in, none out. (Its ids stay the user's: a
   * change would make it undumpable, and its namespaces unreadable to the
   * user's other processes.) */
  if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0) {
    holder_say(up, errno);
    _exit(1);
  }
  holder_say(up, 0);
  agsx_stdio_null();
  agsx_close_all_except(NULL, 0);
  if (chdir("/") < 0)
    _exit(1);
  prctl(PR_SET_NAME, "agsx-userns");
  sigset_t all;
  sigfillset(&all);
  sigdelset(&all, SIGTERM);
  sigprocmask(SIG_SETMASK, &all, NULL);
  signal(SIGTERM, SIG_DFL);
  for (;;)
    pause();
}

static int read_word(int fd, struct holder_word *w, agsx_error_t *err) {
  ssize_t n = agsx_read_all(fd, w, sizeof(*w));
  if (n != (ssize_t)sizeof(*w))
    return agsx_error_set(err, EIO, "the holder of the user's namespace died at its start");
  return 0;
}

static int make_holder(const struct agsx_subid *su, const struct agsx_subid *sg, pid_t *ret,
                       agsx_error_t *err) {
  int up[2], down[2];
  if (pipe2(up, O_CLOEXEC) < 0)
    return agsx_error_set(err, errno, "pipe");
  if (pipe2(down, O_CLOEXEC) < 0) {
    int saved = errno;
    close(up[0]);
    close(up[1]);
    return agsx_error_set(err, saved, "pipe");
  }
  /* Forked twice: the holder is nobody's child, so no caller reaps it or
   * waits for it, and it is in a session of its own. */
  pid_t mid = fork();
  if (mid == 0) {
    close(up[0]);
    close(down[1]);
    if (setsid() < 0)
      _exit(1);
    pid_t h = fork();
    if (h == 0)
      holder_main(up[1], down[0]);
    _exit(h < 0);
  }
  int saved = errno;
  close(up[1]);
  close(down[0]);
  _cleanup_close_ int upr = up[0], downw = down[1];
  if (mid < 0)
    return agsx_error_set(err, saved, "fork");
  int status;
  while (waitpid(mid, &status, 0) < 0 && errno == EINTR)
    ;
  struct holder_word w;
  if (read_word(upr, &w, err) < 0)
    return -1;
  if (w.e)
    return agsx_error_set(err, w.e,
                          "create a user namespace (are unprivileged user namespaces turned "
                          "off: user.max_user_namespaces, an AppArmor restriction?)");
  if (write_maps(w.pid, su, sg, err) < 0) {
    kill(w.pid, SIGKILL);
    return agsx_error_wrap(err, "the id map of the user's namespace");
  }
  if (write(downw, "", 1) != 1 || read_word(upr, &w, err) < 0) {
    kill(w.pid, SIGKILL);
    return agsx_error_set(err, EIO, "the holder of the user's namespace died at its start");
  }
  if (w.e) {
    kill(w.pid, SIGKILL);
    return agsx_error_set(err, w.e, "set up the user's namespace");
  }
  *ret = w.pid;
  return 0;
}

/* The holder named by STATE/userns ("PID START"), if it is alive and its
 * user namespace is one the caller owns: its namespaces' fds. */
static bool holder_open(int statefd, int *ret_user, int *ret_mnt) {
  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  if (agsx_read_file_at(statefd, HOLDER_FILE, 256, &text, &len, NULL) < 0)
    return false;
  int pid = 0;
  uint64_t start = 0;
  if (sscanf(text, "%d %" SCNu64, &pid, &start) != 2 || pid <= 0)
    return false;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/ns/user", pid);
  _cleanup_close_ int user = open(path, O_RDONLY | O_CLOEXEC);
  snprintf(path, sizeof(path), "/proc/%d/ns/mnt", pid);
  _cleanup_close_ int mnt = open(path, O_RDONLY | O_CLOEXEC);
  /* Still the same process once the fds are open: not a reused pid. */
  struct agsx_proc_ref ref = {.pid = pid, .start_time = start};
  uid_t owner = (uid_t)-1;
  if (user < 0 || mnt < 0 || !agsx_proc_ref_alive(&ref) ||
      ioctl(user, NS_GET_OWNER_UID, &owner) < 0 || owner != geteuid())
    return false;
  *ret_user = steal_fd(&user);
  *ret_mnt = steal_fd(&mnt);
  return true;
}

/* Every capability, raised into the inheritable and ambient sets so that
 * an execve keeps them (a non-root uid's exec drops the others); or, with
 * CLEAR, both sets emptied again. */
static int ambient_caps(bool clear) {
  struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
  struct __user_cap_data_struct d[2];
  if (syscall(SYS_capget, &h, d) < 0)
    return -1;
  if (clear) {
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
      return -1;
    d[0].inheritable = d[1].inheritable = 0;
    return (int)syscall(SYS_capset, &h, d);
  }
  d[0].inheritable = d[0].permitted;
  d[1].inheritable = d[1].permitted;
  if (syscall(SYS_capset, &h, d) < 0)
    return -1;
  for (int cap = 0; cap <= CAP_LAST_CAP; cap++)
    if (d[cap / 32].permitted & (1u << (cap % 32)))
      (void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0);
  return 0;
}

/* agsx again, from its start, inside the user's namespace: a process keeps
 * the user namespace its memory was made in (at its exec) for ptrace's
 * checks, and exec, the supervisors and sandbox inits, which are not
 * dumpable, must be reachable through that namespace's capabilities
 * (setns(2) of a pidfd checks ptrace access), not the host's. */
static int reexec(agsx_error_t *err) {
  _cleanup_free_ char *cmdline = NULL;
  size_t len = 0;
  if (agsx_read_file_at(AT_FDCWD, "/proc/self/cmdline", 1 << 20, &cmdline, &len, err) < 0)
    return -1;
  _cleanup_free_ char **argv = xzalloc((len + 2) * sizeof(char *));
  size_t n = 0;
  for (size_t i = 0; i < len; i += strlen(cmdline + i) + 1)
    argv[n++] = cmdline + i;
  if (ambient_caps(false) < 0)
    return agsx_error_set(err, errno, "keep the user's namespace's capabilities");
  setenv(REEXEC_MARK, "1", 1);
  extern char **environ;
  execve("/proc/self/exe", argv, environ);
  return agsx_error_set(err, errno, "execute agsx again in the user's namespace");
}

/* Whether this process is in USER's namespace already (our re-exec). */
static bool inside(int user) {
  struct stat a, b;
  return fstat(user, &a) == 0 && stat("/proc/self/ns/user", &b) == 0 && a.st_ino == b.st_ino &&
         a.st_dev == b.st_dev;
}

/* Joins the holder's namespaces. The process keeps the user's ids (id N
 * of the namespace: what it creates is the user's) and gets every
 * capability in the namespace, as setns(2) gives them; an execve would
 * drop them, and agsx execs nothing that needs them. */
static int join(int user, int mnt, agsx_error_t *err) {
  /* setns of a mount namespace moves the cwd to its root: the same path
   * is taken again in it. */
  char cwd[4096];
  bool have_cwd = getcwd(cwd, sizeof(cwd)) != NULL;
  if (setns(user, CLONE_NEWUSER) < 0)
    return agsx_error_set(err, errno, "join the user's namespace");
  if (setns(mnt, CLONE_NEWNS) < 0)
    return agsx_error_set(err, errno, "join the user's mount namespace");
  if (!have_cwd || chdir(cwd) < 0)
    (void)!chdir("/");
  return 0;
}

/* What this process's FILE (uid_map, gid_map) says: the host id of
 * namespace id 0 and how many ids from 0 are mapped (the sandboxes'
 * share), and the host id of namespace id AT (the user's own). False when
 * it cannot be read or maps no id 0. */
struct id_map {
  unsigned long out0, count0, out_at;
};

static bool map_read(const char *file, unsigned long at, struct id_map *ret) {
  *ret = (struct id_map){0, 0, 0};
  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  if (agsx_read_file_at(AT_FDCWD, file, 4096, &text, &len, NULL) < 0)
    return false;
  bool zero = false;
  for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
    unsigned long in, out, count;
    if (sscanf(l, "%lu %lu %lu", &in, &out, &count) != 3)
      continue;
    if (in == 0) {
      ret->out0 = out;
      ret->count0 = count;
      zero = true;
    }
    if (at >= in && at - in < count)
      ret->out_at = out + (at - in);
  }
  return zero;
}

/* Whether this process's user namespace is the initial one. */
static bool initial_userns(void) {
  struct id_map m;
  return !map_read("/proc/self/uid_map", 0, &m) || (m.out0 == 0 && m.count0 == 4294967295UL);
}

bool agsx_rootless_wanted(void) {
  if (geteuid() != 0)
    return true;
  /* Root of the one-id namespace of a user without subordinate ids, after
   * our re-exec: the mark says so, and only outside the initial one. */
  if (getenv(REEXEC_MARK) == NULL)
    return false;
  if (initial_userns()) {
    unsetenv(REEXEC_MARK);
    return false;
  }
  return true;
}

/* The holder PID in a scope of the user's own systemd manager,
 * agsx.slice/agsx-userns-PID.scope, where the user has one (systemd,
 * cgroup v2, the user logged in or lingering). Otherwise it stays in the
 * cgroup of whatever first ran agsx: a unit's stop (a service that ran
 * `agsx run -d`, a CI job's scope) would kill it with the unit while the
 * user's sandboxes, each in its own scope, live on in its namespace, and
 * every later agsx would make another namespace, from which those
 * sandboxes cannot be entered. Best effort: without it the namespace
 * still works. */
static void holder_scope(pid_t pid) {
  static const struct agsx_systemd_prop props[] = {
      {.name = "CollectMode", .type = 's', .s = "inactive-or-failed"},
  };
  const char *run = getenv("XDG_RUNTIME_DIR");
  struct statfs sfs;
  if (!agsx_systemd_booted() || run == NULL || run[0] != '/' ||
      statfs("/sys/fs/cgroup", &sfs) < 0 || sfs.f_type != CGROUP2_SUPER_MAGIC)
    return;
  _cleanup_free_ char *sock = xasprintf("%s/systemd/private", run);
  if (access(sock, F_OK) < 0)
    return;
  char unit[64];
  snprintf(unit, sizeof(unit), "agsx-userns-%d.scope", (int)pid);
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_systemd_start_user_scope(unit, AGSX_CGROUP_SLICE, "agsx: the user's namespace", pid,
                                    props, AGSX_ARRAY_SIZE(props), &e) < 0)
    agsx_warn("the user's namespace stays in the cgroup of this command (it ends with its "
              "unit): %s",
              e->msg);
}

int agsx_rootless_enter(const char *state, agsx_error_t *err) {
  if (agsx_mkdir_p(state, 0700, err) < 0)
    return agsx_error_wrap(err, "state directory");
  _cleanup_close_ int statefd = open(state, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (statefd < 0)
    return agsx_error_set(err, errno, "state directory `%s`", state);
  int user = -1, mnt = -1;
  if (!holder_open(statefd, &user, &mnt)) {
    /* One holder per user: made under the lock, looked for again there. */
    _cleanup_close_ int lock = agsx_lock_at(statefd, HOLDER_LOCK, true, err);
    if (lock < 0)
      return -1;
    if (!holder_open(statefd, &user, &mnt)) {
      /* The user's lines (the name through NSS: only here, never on the
       * path of every command). */
      _cleanup_free_ char *name = user_name(geteuid());
      struct agsx_subid su, sg;
      subid_of(SUBUID_FILE, name, geteuid(), &su);
      subid_of(SUBGID_FILE, name, getegid(), &sg);
      pid_t pid = 0;
      if (make_holder(&su, &sg, &pid, err) < 0)
        return -1;
      holder_scope(pid);
      char line[64];
      uint64_t start = agsx_proc_start_time(pid);
      int n = snprintf(line, sizeof(line), "%d %" PRIu64 "\n", (int)pid, start);
      if (agsx_write_file_atomic(statefd, HOLDER_FILE, line, (size_t)n, 0600, err) < 0) {
        kill(pid, SIGKILL);
        return -1;
      }
      if (!holder_open(statefd, &user, &mnt)) {
        kill(pid, SIGKILL);
        return agsx_error_set(err, ESRCH, "the holder of the user's namespace is gone");
      }
    }
  }
  if (inside(user)) {
    close(user);
    close(mnt);
    /* The user's own ids are N here, not those of /etc/subuid's lines:
     * the namespace's map says what the sandboxes get. */
    struct id_map u, g;
    map_read("/proc/self/uid_map", 0, &u);
    map_read("/proc/self/gid_map", 0, &g);
    rootless_on = true;
    free(rootless_state);
    rootless_state = xstrdup(state);
    rootless_span = u.count0 < g.count0 ? u.count0 : g.count0;
    if (rootless_span == 0)
      return agsx_error_set(err, EINVAL, "the user's namespace maps no id 0");
    if (ambient_caps(true) < 0)
      return agsx_error_set(err, errno, "drop the ambient capabilities");
    return 0;
  }
  int r = join(user, mnt, err);
  close(user);
  close(mnt);
  return r < 0 ? -1 : reexec(err);
}

/* The one-id namespace is the only one whose map we write ourselves, and
 * an unprivileged gid_map needs setgroups denied first (write_maps). Known
 * from what the process was told, not from a file: a sandbox's processes
 * ask too. */
bool agsx_setgroups_denied(void) { return rootless_on && rootless_span == 1; }

void agsx_rootless_describe(struct agsx_rootless_info *ret) {
  *ret = (struct agsx_rootless_info){
      .active = rootless_on, .ids = agsx_rootless_ids(), .ranges = agsx_rootless_ranges()};
  if (!rootless_on)
    return;
  /* The user is id N of its namespace, or 0 in the one-id namespace. */
  unsigned long at = rootless_span == 1 ? 0 : rootless_span;
  struct id_map u, g;
  map_read("/proc/self/uid_map", at, &u);
  map_read("/proc/self/gid_map", at, &g);
  ret->host_uid0 = u.out0;
  ret->uid = u.out_at;
  ret->host_gid0 = g.out0;
  ret->gid = g.out_at;
  ret->one_id = rootless_span == 1 && ret->host_uid0 == ret->uid;
}
