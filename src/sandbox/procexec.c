/* agsx — procexec: the last steps of a command inside a sandbox, shared by
 * run's command (a child of the init), exec's child and build's RUN. See
 * procexec.h. */
#include "config.h"

#include "sandbox/caps.h"
#include "sandbox/procexec.h"
#include "host/rootless.h"
#include "sandbox/sync.h"

#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <termios.h>

/* ---- capabilities ---------------------------------------------------------------------- */

/* Bounding set first (needs CAP_SETPCAP, which we still have), then the
 * process sets: effective = permitted = inheritable = the default set. A
 * non-root command loses them at exec, as with Docker. */
static int drop_bounding(const uint64_t *caps, agsx_error_t *err) {
  for (int cap = 0; cap <= 63; cap++) {
    if (caps ? (caps[0] >> cap) & 1 : agsx_cap_is_default(cap))
      continue;
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
      if (errno == EINVAL)
        break; /* past the kernel's last capability */
      return agsx_error_set(err, errno, "drop capability %d", cap);
    }
  }
  return 0;
}

/* An OCI container's sets (already clamped by the policy to agsx's
 * maximum and to its own bounding set). */
static int set_oci_caps(const uint64_t *caps, agsx_error_t *err) {
  struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
  struct __user_cap_data_struct d[2] = {{0}};
  for (int i = 0; i < 2; i++) {
    d[i].effective = (uint32_t)(caps[1] >> (32 * i));
    d[i].inheritable = (uint32_t)(caps[2] >> (32 * i));
    d[i].permitted = (uint32_t)(caps[3] >> (32 * i));
  }
  if (syscall(SYS_capset, &h, d) < 0)
    return agsx_error_set(err, errno, "capset");
  /* Ambient needs the capability permitted and inheritable; what is not
   * stays unraised, as runc does (the set can only shrink this way). */
  for (int cap = 0; cap <= 63; cap++)
    if ((caps[4] >> cap) & (caps[3] >> cap) & (caps[2] >> cap) & 1)
      prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0);
  return 0;
}

static int set_caps(const uint64_t *caps, agsx_error_t *err) {
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
    return agsx_error_set(err, errno, "clear ambient capabilities");
  if (caps)
    return set_oci_caps(caps, err);
  struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
  struct __user_cap_data_struct d[2] = {{0}};
  for (size_t i = 0; i < agsx_n_default_caps; i++) {
    int cap = agsx_default_caps[i].value;
    d[cap / 32].effective |= 1u << (cap % 32);
  }
  /* Inheritable stays empty (CVE-2022-24769: an inheritable set lets
   * file capabilities of an executable raise ambient privileges). */
  for (int i = 0; i < 2; i++)
    d[i].permitted = d[i].effective;
  if (syscall(SYS_capset, &h, d) < 0)
    return agsx_error_set(err, errno, "capset");
  return 0;
}

/* ---- the command ---------------------------------------------------------------------- */

static const char *env_get(char **env, const char *key) {
  size_t n = strlen(key);
  for (char **e = env; e && *e; e++)
    if (strncmp(*e, key, n) == 0 && (*e)[n] == '=')
      return *e + n + 1;
  return NULL;
}

/* Every sandbox path the last steps touch (working directory, the PATH
 * search, /etc/passwd and /etc/group) is resolved under the current root,
 * which is the sandbox's, without magic links: a /proc/<pid>/fd/N,
 * /proc/<pid>/cwd, /proc/<pid>/root or /proc/<pid>/exe link planted by the
 * sandbox on the way must not lead out of it (CVE-2024-21626). The process
 * also holds no host fd by then (agsx_proc_exec closes them first), so
 * even a path resolved again by the kernel (execve) can reach nothing but
 * the sandbox and the command's own stdio. */
#define RESOLVE_SANDBOX (RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)

static int open_root(void) { return open("/", O_PATH | O_DIRECTORY | O_CLOEXEC); }

/* Opens PATH (absolute: under ROOT; relative: from the cwd, which is under
 * ROOT) with no magic link on the way. */
static int open_sandbox_path(int root, const char *path, int flags) {
  if (path[0] == '/')
    return agsx_openat2(root, path, flags, 0, RESOLVE_SANDBOX);
  return agsx_openat2(AT_FDCWD, path, flags, 0, RESOLVE_NO_MAGICLINKS);
}

/* 0 when PATH names something execve() may run, else the errno to report:
 * it exists, is no directory, and the current ids may execute it (X_OK,
 * which also fails on a noexec mount). The kernel resolves PATH again in
 * execve(); what it can find differently in a race is still only inside
 * the sandbox (see above). */
static int check_exec_path(int root, const char *path) {
  _cleanup_close_ int fd = open_sandbox_path(root, path, O_PATH);
  if (fd < 0)
    return errno;
  struct stat st;
  if (fstat(fd, &st) < 0)
    return errno;
  if (S_ISDIR(st.st_mode))
    return EACCES;
  if (faccessat(fd, "", X_OK, AT_EMPTY_PATH | AT_EACCESS) < 0)
    return errno;
  return 0;
}

/* execvpe() searches the PATH of our own environment, not the command's:
 * the command's PATH is searched, under the current root, into FULL (SIZE
 * bytes). Returns 0 or the errno to report. This is all the path work of
 * the exec, done before the seccomp filters go in: an engine's profile
 * need not allow openat2 or openat (runtime-tools' and older engines'
 * defaults do not), only execve itself, as with runc. */
static int resolve_exec(char **argv, char **env, char *full, size_t size) {
  const char *file = argv[0];
  _cleanup_close_ int root = open_root();
  if (root < 0)
    return errno;
  if (strchr(file, '/')) {
    if (strlen(file) >= size)
      return ENAMETOOLONG;
    snprintf(full, size, "%s", file);
    return check_exec_path(root, file);
  }
  const char *path = env_get(env, "PATH");
  if (path == NULL)
    path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  int best = ENOENT;
  for (const char *p = path;;) {
    const char *colon = strchr(p, ':');
    size_t n = colon ? (size_t)(colon - p) : strlen(p);
    if (n + strlen(file) + 2 < size) {
      snprintf(full, size, "%.*s%s%s", (int)n, p, n ? "/" : "", file);
      int e = check_exec_path(root, full);
      if (e == 0)
        return 0;
      if (e == EACCES || e == EPERM)
        best = e; /* found but not executable: remember, keep looking */
      else if (e != ENOENT && e != ENOTDIR && e != ELOOP && e != EXDEV)
        return e; /* ELOOP, EXDEV: behind a magic link, as good as missing */
    }
    if (colon == NULL)
      break;
    p = colon + 1;
  }
  return best;
}

int agsx_proc_check_exec(char **argv, char **env) {
  char full[4096];
  return resolve_exec(argv, env, full, sizeof(full));
}

/* Like Docker, a missing working directory is created: each missing
 * component with mkdirat() in its parent, the parent itself resolved
 * under ROOT. */
static int make_cwd(int root, const char *cwd, agsx_error_t *err) {
  _cleanup_free_ char *p = xstrdup(cwd);
  size_t len = strlen(p);
  for (size_t i = 1; i <= len; i++) {
    if (p[i] != '/' && p[i] != '\0')
      continue;
    char saved = p[i];
    p[i] = '\0';
    char *slash = strrchr(p, '/');
    _cleanup_close_ int fd = agsx_openat2(root, p, O_PATH | O_DIRECTORY, 0, RESOLVE_SANDBOX);
    if (fd < 0 && errno == ENOENT && slash[1] != '\0') {
      *slash = '\0';
      _cleanup_close_ int parent =
          agsx_openat2(root, p[0] ? p : "/", O_PATH | O_DIRECTORY, 0, RESOLVE_SANDBOX);
      *slash = '/';
      if (parent < 0 || (mkdirat(parent, slash + 1, 0755) < 0 && errno != EEXIST))
        return agsx_error_set(err, errno, "create working directory `%s`", cwd);
    } else if (fd < 0 && errno != ENOENT) {
      return agsx_error_set(err, errno, "working directory `%s`", cwd);
    }
    p[i] = saved;
  }
  return 0;
}

static int enter_cwd(const char *cwd, bool must_exist, agsx_error_t *err) {
  _cleanup_close_ int root = open_root();
  if (root < 0)
    return agsx_error_set(err, errno, "open the sandbox root");
  _cleanup_close_ int fd = agsx_openat2(root, cwd, O_PATH | O_DIRECTORY, 0, RESOLVE_SANDBOX);
  if (fd < 0 && errno == ENOENT && !must_exist) {
    if (make_cwd(root, cwd, err) < 0)
      return -1;
    fd = agsx_openat2(root, cwd, O_PATH | O_DIRECTORY, 0, RESOLVE_SANDBOX);
  }
  if (fd < 0)
    return agsx_error_set(err, errno, "working directory `%s`", cwd);
  if (fchdir(fd) < 0)
    return agsx_error_set(err, errno, "working directory `%s`", cwd);
  /* Beneath the root, or getcwd() fails ("(unreachable)" to the kernel). */
  char buf[PATH_MAX];
  if (getcwd(buf, sizeof(buf)) == NULL || buf[0] != '/')
    return agsx_error_set(err, EXDEV, "working directory `%s` is outside the sandbox", cwd);
  return 0;
}

static int drop_to_user(const struct agsx_user *u, agsx_error_t *err) {
  if (setgroups(u->n_groups, u->groups) < 0 && !agsx_setgroups_denied())
    return agsx_error_set(err, errno, "setgroups");
  if (setresgid(u->gid, u->gid, u->gid) < 0)
    return agsx_error_set(err, errno, "setresgid %u", u->gid);
  if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0 || setresuid(u->uid, u->uid, u->uid) < 0)
    return agsx_error_set(err, errno, "setresuid %u", u->uid);
  return 0;
}

int agsx_proc_prepare(struct agsx_proc_spec *p, unsigned what, agsx_error_t *err) {
  p->prepared = 0;
  if (p->caps)
    return agsx_error_set(err, EINVAL, "prepare: only Docker's default capability set");
  if (drop_bounding(NULL, err) < 0)
    return -1;
  p->prepared |= AGSX_PREP_BOUNDING;
  /* With new_privs the flag stays clear; the filter below still goes in,
   * as root holding CAP_SYS_ADMIN in the sandbox's user namespace. */
  if (!p->new_privs && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
    return agsx_error_set(err, errno, "no_new_privs");
  p->prepared |= AGSX_PREP_NO_NEW_PRIVS;
  agsx_signal_defaults();
  p->prepared |= AGSX_PREP_SIGNALS;
  if ((what & AGSX_PREP_SECCOMP) && p->seccomp) {
    int r = agsx_seccomp_install(p->seccomp);
    if (r < 0)
      return agsx_error_set(err, -r, "load the seccomp filter");
    p->prepared |= AGSX_PREP_SECCOMP;
  }
  return 0;
}

/* What agsx_proc_prepare's filter must let through, from the claim's
 * receipt to the exec (init.c's parked_command, take_claim, then
 * agsx_proc_exec): recvmsg/recvfrom (the claim), mmap/munmap/brk/mremap
 * (allocation), dup2/dup3/close/fcntl (stdio), openat2/openat/read/fstat/
 * newfstatat/faccessat2/lseek (the sandbox's passwd and group, the cwd,
 * the PATH search), close_range (the fd sweep, CLOEXEC), setsid, mkdirat/fchdir/
 * getcwd (the cwd), setgroups/setresgid/setresuid/prctl/capset (ids and
 * capabilities), rt_sigprocmask/rt_sigaction, execve, write (an error's
 * report) and exit_group. A step added to those paths adds its syscalls
 * here; test_pool checks agsx's default filter allows each. */
const int agsx_proc_after_filter[] = {
    SYS_recvmsg,    SYS_recvfrom,   SYS_mmap,           SYS_munmap,       SYS_brk,
    SYS_mremap,     SYS_dup2,       SYS_dup3,           SYS_close,        SYS_fcntl,
    SYS_openat2,    SYS_openat,     SYS_read,           SYS_fstat,        SYS_newfstatat,
    SYS_faccessat2, SYS_lseek,      SYS_close_range,    SYS_setsid,       SYS_mkdirat,
    SYS_fchdir,     SYS_getcwd,     SYS_setgroups,      SYS_setresgid,    SYS_setresuid,
    SYS_prctl,      SYS_capset,     SYS_rt_sigprocmask, SYS_rt_sigaction, SYS_execve,
    SYS_write,      SYS_exit_group, SYS_getpid,         SYS_getdents64,   -1,
};

/* agsx's baseline (OCI containers), then the command's filter unless
 * agsx_proc_prepare installed it already. */
static int install_filters(const struct agsx_proc_spec *p, agsx_error_t *err) {
  if (p->seccomp_base) {
    int r = agsx_seccomp_install(p->seccomp_base);
    if (r < 0)
      return agsx_error_set(err, -r, "load agsx's seccomp baseline");
  }
  if (p->seccomp && !(p->prepared & AGSX_PREP_SECCOMP)) {
    int r = agsx_seccomp_install(p->seccomp);
    if (r < 0)
      return agsx_error_set(err, -r, "load the seccomp filter");
  }
  return 0;
}

_Noreturn void agsx_proc_exec(const struct agsx_proc_spec *p, int errfd) {
  agsx_error_t err = NULL;
  int code = 125;
  /* Nothing but stdio, the error channel and the terminal from here on:
   * the paths below are the sandbox's. */
  int keep[2 + 16], nkeep = 0;
  keep[nkeep++] = errfd;
  keep[nkeep++] = p->tty_slave;
  for (int i = 0; i < p->preserve_fds && nkeep < (int)AGSX_ARRAY_SIZE(keep); i++)
    keep[nkeep++] = 3 + i;
  /* agsx_close_all_except keeps at most 16: the caller bounds N. */
  agsx_close_all_except(keep, (size_t)nkeep);
  if (setsid() < 0) {
    agsx_error_set(&err, errno, "setsid");
    goto fail;
  }
  if (p->tty_slave >= 0) {
    if (ioctl(p->tty_slave, TIOCSCTTY, 0) < 0 || dup2(p->tty_slave, 0) < 0 ||
        dup2(p->tty_slave, 1) < 0 || dup2(p->tty_slave, 2) < 0) {
      agsx_error_set(&err, errno, "controlling terminal");
      goto fail;
    }
  }
  /* Bounding set while still root (dropping needs CAP_SETPCAP in the
   * effective set), then ids, then the process sets. */
  if (enter_cwd(p->cwd ? p->cwd : "/", p->cwd_must_exist, &err) < 0 ||
      (!(p->prepared & AGSX_PREP_BOUNDING) && drop_bounding(p->caps, &err) < 0))
    goto fail;
  /* Without no_new_privs the kernel lets only a holder of CAP_SYS_ADMIN
   * (in the sandbox's user namespace: still ours here, as its root)
   * install a filter, so with new_privs the filters go in before the ids
   * and capabilities drop, as runc does; the filter then also sees those
   * steps and the exec (agsx's default allows them: agsx_proc_after_filter,
   * checked by test_pool). */
  if (p->new_privs && install_filters(p, &err) < 0)
    goto fail;
  if (drop_to_user(p->user, &err) < 0 || set_caps(p->caps, &err) < 0)
    goto fail;
  if (!p->new_privs && !(p->prepared & AGSX_PREP_NO_NEW_PRIVS) &&
      prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
    agsx_error_set(&err, errno, "no_new_privs");
    goto fail;
  }
  /* Nothing of ours may reach the command: every fd above 2 closes at exec. */
  agsx_cloexec_from(3 + (p->preserve_fds > 0 ? p->preserve_fds : 0));
  if (p->preserve_fds > 0 && errfd >= 3 && errfd < 3 + p->preserve_fds)
    fcntl(errfd, F_SETFD, FD_CLOEXEC);
  /* A clean signal state: agsx blocks and ignores signals the command must
   * receive (exec keeps both the mask and ignored dispositions). */
  if (!(p->prepared & AGSX_PREP_SIGNALS))
    agsx_signal_defaults();
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  /* The executable is found first: after the filters, only execve. */
  char full[4096];
  int e = resolve_exec(p->argv, p->env, full, sizeof(full));
  if (e == 0 && !p->new_privs && install_filters(p, &err) < 0)
    goto fail;
  if (e == 0) {
    execve(full, p->argv, p->env);
    e = errno;
  }
  code = e == ENOENT || e == ENOTDIR ? 127 : 126;
  agsx_error_set(&err, e, "exec `%s`", p->argv[0]);
fail:;
  struct agsx_msg m = {.type = AGSX_MSG_ERROR, .code = code, .err = err ? err->errno_ : 0};
  snprintf(m.text, sizeof(m.text), "%s", err ? err->msg : "exec failed");
  if (write(errfd, &m, sizeof(m)) < 0) {
  }
  _exit(code);
}

/* ---- the sandbox's own files ------------------------------------------------------------ */

/* A small regular file of the sandbox's (a FIFO or a device is "missing"). */
static int read_small(int root, const char *path, char **ret, size_t *ret_len) {
  *ret = NULL;
  *ret_len = 0;
  _cleanup_close_ int fd =
      agsx_openat2(root, path, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0, RESOLVE_SANDBOX);
  if (fd < 0)
    return 0;
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
    return 0;
  agsx_error_t e = NULL;
  int r = agsx_read_fd(fd, AGSX_PASSWD_MAX, ret, ret_len, &e);
  agsx_error_free(&e);
  return r;
}

char **agsx_child_build_env(char **in, const char *hostname, const struct agsx_user *u, bool tty) {
  size_t n = agsx_strv_len(in);
  char **env = xzalloc((n + 5) * sizeof(char *));
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    env[k++] = xstrdup(in[i]);
  if (!env_get(env, "PATH"))
    env[k++] = xstrdup("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
  if (!env_get(env, "HOSTNAME"))
    env[k++] = xasprintf("HOSTNAME=%s", hostname);
  if (!env_get(env, "HOME"))
    env[k++] = xasprintf("HOME=%s", u->home[0] ? u->home : "/");
  if (tty && !env_get(env, "TERM"))
    env[k++] = xstrdup("TERM=xterm");
  return env;
}

int agsx_child_open_pty(int *ret_master, int *ret_slave, agsx_error_t *err) {
  _cleanup_close_ int root = open_root();
  *ret_master =
      root < 0 ? -1 : agsx_openat2(root, "/dev/ptmx", O_RDWR | O_NOCTTY, 0, RESOLVE_SANDBOX);
  if (*ret_master < 0)
    return agsx_error_set(err, errno, "open /dev/ptmx");
  int unlock = 0;
  if (ioctl(*ret_master, TIOCSPTLCK, &unlock) < 0)
    return agsx_error_set(err, errno, "unlock pty");
  *ret_slave = ioctl(*ret_master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (*ret_slave < 0)
    return agsx_error_set(err, errno, "open pty peer");
  return 0;
}

int agsx_child_read_user(const char *spec, struct agsx_user *ret, agsx_error_t *err) {
  _cleanup_free_ char *pw = NULL, *gr = NULL;
  size_t pwl, grl;
  _cleanup_close_ int root = open_root();
  if (root < 0)
    return agsx_error_set(err, errno, "open the sandbox root");
  read_small(root, "/etc/passwd", &pw, &pwl);
  read_small(root, "/etc/group", &gr, &grl);
  return agsx_user_resolve(spec, pw, pwl, gr, grl, ret, err);
}
