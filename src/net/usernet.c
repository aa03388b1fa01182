/* agsx — net/usernet: an ordinary user's router namespace and its pasta. */
#include "config.h"

#include "net/usernet.h"
#include "host/cgroup.h"
#include "host/rootless.h"
#include "host/systemd.h"
#include "net/net.h"
#include "net/nft.h"
#include "state/state.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/capability.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ROUTER_FILE "usernet"
#define ROUTER_LOCK "usernet.lock"
#define ROUTER_LOG "usernet.log"
#define ADDRS_FILE "usernet.addrs"
#define READY_MS 10000

/* ---- finding the router ----------------------------------------------------------------------- */

static int state_dir(void) {
  const char *state = agsx_rootless_state();
  if (state == NULL) {
    errno = ENETDOWN;
    return -1;
  }
  return open(state, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/* Whether process PID is in this process's user namespace: a router left
 * by an earlier holder (the user's namespace made again) is not, and its
 * network namespace is not ours to enter. */
static bool same_userns(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
  struct stat a, b;
  return stat(path, &a) == 0 && stat("/proc/self/ns/user", &b) == 0 && a.st_ino == b.st_ino &&
         a.st_dev == b.st_dev;
}

/* The router named by STATE/usernet, if alive and ours: its network
 * namespace's fd (and its pid). Checked after the open: not a reused pid.
 * A live router of another user namespace is stopped (STALE). */
static int router_open_at(int statefd, pid_t *ret_pid, bool stop_stale) {
  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  if (agsx_read_file_at(statefd, ROUTER_FILE, 256, &text, &len, NULL) < 0)
    return -1;
  int pid = 0;
  uint64_t start = 0;
  if (sscanf(text, "%d %" SCNu64, &pid, &start) != 2 || pid <= 0)
    return -1;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/ns/net", pid);
  _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct agsx_proc_ref ref = {.pid = pid, .start_time = start};
  if (fd < 0 || !agsx_proc_ref_alive(&ref))
    return -1;
  if (!same_userns(pid)) {
    if (stop_stale && agsx_proc_ref_alive(&ref))
      kill(pid, SIGTERM);
    return -1;
  }
  if (ret_pid)
    *ret_pid = pid;
  return steal_fd(&fd);
}

static int router_open(int statefd, pid_t *ret_pid) {
  return router_open_at(statefd, ret_pid, false);
}

/* The router's namespace, kept open by this process; checked at every use
 * (a process that closed every fd, as a supervisor does, may have that
 * number reused). */
static struct {
  int fd;
  dev_t dev;
  ino_t ino;
} cached = {-1, 0, 0};

static int router_netns(void) {
  struct stat st;
  if (cached.fd >= 0 && fstat(cached.fd, &st) == 0 && st.st_dev == cached.dev &&
      st.st_ino == cached.ino)
    return cached.fd;
  cached.fd = -1;
  _cleanup_close_ int dir = state_dir();
  int fd = dir < 0 ? -1 : router_open(dir, NULL);
  if (fd < 0 || fstat(fd, &st) < 0) {
    if (fd >= 0)
      close(fd);
    errno = ENETDOWN;
    return -1;
  }
  cached.fd = fd;
  cached.dev = st.st_dev;
  cached.ino = st.st_ino;
  return fd;
}

bool agsx_usernet_running(void) { return agsx_rootless() && router_netns() >= 0; }

const char *agsx_net_run_dir(void) {
  static char *dir;
  if (!agsx_rootless() || agsx_rootless_state() == NULL)
    return "/run/agsx-net";
  if (dir == NULL)
    dir = xasprintf("%s/net", agsx_rootless_state());
  return dir;
}

/* ---- calls on the host side ------------------------------------------------------------------- */

struct hcall {
  int ns;
  int (*fn)(void *);
  void *arg;
  int r, e;
};

static void *hcall_main(void *p) {
  struct hcall *c = p;
  if (setns(c->ns, CLONE_NEWNET) < 0) {
    c->e = errno;
    return NULL;
  }
  errno = 0;
  c->r = c->fn(c->arg);
  c->e = errno;
  return NULL;
}

int agsx_hostnet_call(int (*fn)(void *), void *arg) {
  if (!agsx_rootless())
    return fn(arg);
  int ns = router_netns();
  if (ns < 0)
    return -1;
  struct hcall c = {ns, fn, arg, -1, 0};
  pthread_t t;
  int e = pthread_create(&t, NULL, hcall_main, &c);
  if (e != 0) {
    errno = e;
    return -1;
  }
  pthread_join(t, NULL);
  errno = c.e;
  return c.r;
}

struct sock_args {
  int domain, type, protocol;
};
static int do_socket(void *p) {
  struct sock_args *a = p;
  return socket(a->domain, a->type, a->protocol);
}

int agsx_host_socket(int domain, int type, int protocol) {
  struct sock_args a = {domain, type, protocol};
  return agsx_hostnet_call(do_socket, &a);
}

struct name_args {
  const char *name;
  int flags;
};
static int do_ifindex(void *p) {
  struct name_args *a = p;
  return (int)if_nametoindex(a->name);
}

unsigned agsx_host_ifindex(const char *name) {
  struct name_args a = {name, 0};
  int r = agsx_hostnet_call(do_ifindex, &a);
  return r < 0 ? 0 : (unsigned)r;
}

static int do_open(void *p) {
  struct name_args *a = p;
  return open(a->name, a->flags | O_CLOEXEC);
}

int agsx_host_sysctl_open(const char *path, int flags) {
  struct name_args a = {path, flags};
  return agsx_hostnet_call(do_open, &a);
}

/* The router's sysfs: a detached mount made in its namespace (a sysfs
 * shows the links of the namespace it was mounted in), kept as cached. */
static struct {
  int fd;
  dev_t dev;
  ino_t ino;
} sysfs = {-1, 0, 0};

static int do_sysfs(void *p) {
  (void)p;
  agsx_error_t e = NULL;
  int fd = agsx_net_new_sysfs(&e);
  int saved = agsx_error_errno(&e);
  agsx_error_free(&e);
  errno = saved;
  return fd;
}

int agsx_host_sysfs_open(const char *rel, int flags) {
  if (!agsx_rootless()) {
    _cleanup_free_ char *path = xasprintf("/sys/%s", rel);
    return open(path, flags | O_CLOEXEC);
  }
  struct stat st;
  if (sysfs.fd < 0 || fstat(sysfs.fd, &st) < 0 || st.st_dev != sysfs.dev ||
      st.st_ino != sysfs.ino) {
    sysfs.fd = agsx_hostnet_call(do_sysfs, NULL);
    if (sysfs.fd < 0 || fstat(sysfs.fd, &st) < 0)
      return -1;
    sysfs.dev = st.st_dev;
    sysfs.ino = st.st_ino;
  }
  return openat(sysfs.fd, rel, flags | O_CLOEXEC);
}

/* ---- the router ------------------------------------------------------------------------------- */

struct router_word {
  int pid, pasta, e;
  char msg[240];
};

static pid_t router_pasta; /* in the router: its pasta */

static void router_say(int up, int e, const char *msg) {
  struct router_word w = {getpid(), router_pasta, e, ""};
  snprintf(w.msg, sizeof(w.msg), "%s", msg ? msg : "");
  (void)!write(up, &w, sizeof(w));
}

static bool write_proc(const char *path, const char *value) {
  _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
  return fd >= 0 && write(fd, value, strlen(value)) == (ssize_t)strlen(value);
}

/* Whether this process's network namespace has an IPv4 default route:
 * pasta configured it (--config-net copies the host's). */
static bool default_route(void) {
  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  if (agsx_read_file_at(AT_FDCWD, "/proc/self/net/route", 1 << 16, &text, &len, NULL) < 0)
    return false;
  for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
    char ifname[32];
    char dest[16];
    if (sscanf(l, "%31s %15s", ifname, dest) == 2 && strcmp(dest, "00000000") == 0)
      return true;
  }
  return false;
}

/* Only what pasta needs (it keeps these three), in every set but the
 * bounding one: the ambient set carries them over pasta's exec; the
 * router keeps the same, CAP_SYS_ADMIN for removing its bind at its end. */
static int keep_pasta_caps(void) {
  static const int keep[] = {CAP_NET_ADMIN, CAP_SYS_ADMIN, CAP_NET_BIND_SERVICE};
  struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
  struct __user_cap_data_struct d[2];
  memset(d, 0, sizeof(d));
  for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
    d[keep[i] / 32].permitted |= 1u << (keep[i] % 32);
    d[keep[i] / 32].effective |= 1u << (keep[i] % 32);
    d[keep[i] / 32].inheritable |= 1u << (keep[i] % 32);
  }
  if (syscall(SYS_capset, &h, d) < 0)
    return -1;
  for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++)
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, keep[i], 0, 0) < 0)
      return -1;
  return 0;
}

/* ---- the router's namespace, where pasta may open it ----------------------------------------
 * pasta opens the namespace it serves by a path. Through /proc/PID/ns/net
 * that open is a ptrace access check, which Debian's AppArmor profile of
 * pasta does not grant; the path the profile allows (and Podman uses) is a
 * bind mount under /run/user/UID/netns/. So the router binds its namespace
 * there, in the user's mount namespace (src/host/rootless.h: agsx's own,
 * nobody else's), as agsx-router-PID, and removes it at its end. A user
 * without /run/user/UID (no login, no linger) gets a private tmpfs on
 * /run/user in that mount namespace. */

#define NETNS_PREFIX "agsx-router-"

static char *netns_dir(void) {
  struct agsx_rootless_info ri;
  agsx_rootless_describe(&ri);
  return xasprintf("/run/user/%lu", ri.uid);
}

/* The router's bind: DIR/netns/agsx-router-PID. */
static char *netns_path(const char *dir, pid_t pid) {
  return xasprintf("%s/netns/" NETNS_PREFIX "%d", dir, (int)pid);
}

static int netns_bind(const char *dir, const char *path) {
  struct stat st;
  if (stat(dir, &st) < 0 || st.st_uid != getuid()) {
    if (mount("tmpfs", "/run/user", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755") < 0 ||
        (mkdir(dir, 0700) < 0 && errno != EEXIST))
      return -1;
  }
  _cleanup_free_ char *nsdir = xasprintf("%s/netns", dir);
  if (mkdir(nsdir, 0700) < 0 && errno != EEXIST)
    return -1;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    return -1;
  close(fd);
  if (mount("/proc/self/ns/net", path, NULL, MS_BIND, NULL) < 0) {
    int e = errno;
    unlink(path);
    errno = e;
    return -1;
  }
  return 0;
}

static void netns_unbind(const char *path) {
  umount2(path, MNT_DETACH);
  unlink(path);
}

/* Binds of routers that died without removing theirs (SIGKILL): each keeps
 * its namespace alive. KEEP: the live router's pid. */
static void netns_sweep(pid_t keep) {
  _cleanup_free_ char *dir = netns_dir();
  _cleanup_free_ char *nsdir = xasprintf("%s/netns", dir);
  _cleanup_dir_ DIR *d = opendir(nsdir);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    if (strncmp(e->d_name, NETNS_PREFIX, strlen(NETNS_PREFIX)) != 0)
      continue;
    int pid = atoi(e->d_name + strlen(NETNS_PREFIX));
    if (pid <= 0 || pid == keep)
      continue;
    char comm[64];
    snprintf(comm, sizeof(comm), "/proc/%d/comm", pid);
    _cleanup_free_ char *name = NULL;
    if (agsx_read_file_at(AT_FDCWD, comm, 64, &name, NULL, NULL) == 0 &&
        strncmp(name, "agsx-usernet", 12) == 0 && same_userns(pid))
      continue; /* a live router (of another state directory) */
    _cleanup_free_ char *path = xasprintf("%s/%s", nsdir, e->d_name);
    netns_unbind(path);
  }
}

/* pasta's process, forked before the router left the host's network
 * namespace (pasta's sockets are the host's): it waits for GO, then runs
 * pasta with the three capabilities (ambient: kept by the exec). */
static _Noreturn void pasta_exec(const char *pasta, pid_t router, int go, int log, const char *ns) {
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  char c;
  if (getppid() != router || read(go, &c, 1) != 1 || keep_pasta_caps() < 0)
    _exit(1);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL); /* (the router blocks them all) */
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(log, 2) < 0)
    _exit(1);
  int keep[] = {0, 1, 2};
  agsx_close_all_except(keep, 3);
  /* Foreground (the router is its parent, and it dies with the router);
   * IPv4 only, as the rules; the host's addresses and routes copied; no
   * port forwarded either way; the gateway not mapped to the host's
   * loopback. */
  char *argv[] = {
      "pasta",   "--foreground", "--quiet", "--ipv4-only", "--config-net", "--no-map-gw", "-t",
      "none",    "-u",           "none",    "-T",          "none",         "-U",          "none",
      "--netns", (char *)ns,     NULL};
  execv(pasta, argv);
  dprintf(2, "execute %s: %s\n", pasta, strerror(errno));
  _exit(127);
}

/* The router: a process of the user's namespace in a network namespace of
 * its own, pasta's parent. It ends when pasta does, and pasta (its parent
 * death signal) when it does. */
static _Noreturn void router_main(int up, int log, const char *pasta) {
  prctl(PR_SET_NAME, "agsx-usernet");
  /* Nothing of its caller's (a server's listeners, a sandbox's fds). */
  int keep[] = {up, log};
  agsx_close_all_except(keep, 2);
  agsx_signal_defaults();
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, NULL);
  agsx_error_t err = NULL;
  int go[2];
  if (pipe2(go, O_CLOEXEC) < 0) {
    router_say(up, errno, "pipe");
    _exit(1);
  }
  pid_t self = getpid();
  _cleanup_free_ char *dir = netns_dir();
  _cleanup_free_ char *nspath = netns_path(dir, self);
  pid_t child = fork();
  if (child == 0) {
    close(go[1]);
    pasta_exec(pasta, self, go[0], log, nspath);
  }
  close(go[0]);
  router_pasta = child > 0 ? child : 0;
  if (child < 0) {
    router_say(up, errno, "fork");
    _exit(1);
  }
  if (unshare(CLONE_NEWNET) < 0) {
    router_say(up, errno, "create the router's network namespace");
    _exit(1);
  }
  if (agsx_net_loopback_up(&err) < 0) {
    router_say(up, agsx_error_errno(&err), err->msg);
    _exit(1);
  }
  /* It routes the sandboxes' traffic; IPv6 is off, as on sandbox links. */
  if (!write_proc("/proc/sys/net/ipv4/ip_forward", "1\n") ||
      !write_proc("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1\n") ||
      !write_proc("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1\n")) {
    router_say(up, errno, "the router's sysctls");
    _exit(1);
  }
  if (netns_bind(dir, nspath) < 0) {
    router_say(up, errno, "bind the router's network namespace under /run/user");
    _exit(1);
  }
  if (keep_pasta_caps() < 0) {
    router_say(up, errno, "the router's capabilities");
    netns_unbind(nspath);
    _exit(1);
  }
  if (write(go[1], "", 1) != 1) {
    router_say(up, errno, "start pasta");
    netns_unbind(nspath);
    _exit(1);
  }
  close(go[1]);
  int status;
  for (int ms = 0;; ms += 10) {
    pid_t w = waitpid(child, &status, WNOHANG);
    if (w == child) {
      router_say(up, EIO, "pasta exited");
      netns_unbind(nspath);
      _exit(1);
    }
    if (default_route())
      break;
    if (ms >= READY_MS) {
      kill(child, SIGKILL);
      router_say(up, ETIMEDOUT, "pasta configured no route in 10 s");
      netns_unbind(nspath);
      _exit(1);
    }
    struct timespec t = {0, 10 * 1000 * 1000};
    nanosleep(&t, NULL);
  }
  router_say(up, 0, NULL);
  agsx_stdio_null();
  agsx_close_all_except(NULL, 0);
  if (chdir("/") < 0) {
  }
  /* SIGTERM (agsx gc) ends it, and pasta with it; so does pasta's end.
   * Either way its bind goes. */
  sigset_t end;
  sigemptyset(&end);
  sigaddset(&end, SIGTERM);
  sigaddset(&end, SIGCHLD);
  for (;;) {
    int sig = sigwaitinfo(&end, NULL);
    if (sig == SIGTERM) {
      kill(child, SIGTERM);
      break;
    }
    if (sig == SIGCHLD && waitpid(child, &status, WNOHANG) == child)
      break;
  }
  netns_unbind(nspath);
  _exit(0);
}

char *agsx_usernet_pasta(void) {
  const char *path = getenv("PATH");
  _cleanup_free_ char *dirs = xasprintf("%s:/usr/bin:/usr/sbin:/bin", path ? path : "");
  for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    if (d[0] != '/')
      continue;
    char *p = xasprintf("%s/pasta", d);
    if (access(p, X_OK) == 0)
      return p;
    free(p);
  }
  return NULL;
}

/* The last line of pasta's log, for an error. */
static char *log_tail(int statefd) {
  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  if (agsx_read_file_at(statefd, ROUTER_LOG, 1 << 16, &text, &len, NULL) < 0 || len == 0)
    return NULL;
  while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == ' '))
    text[--len] = '\0';
  char *nl = strrchr(text, '\n');
  return xstrdup(nl ? nl + 1 : text);
}

static int make_router(int statefd, pid_t *ret, pid_t *ret_pasta, agsx_error_t *err) {
  _cleanup_free_ char *pasta = agsx_usernet_pasta();
  if (pasta == NULL)
    return agsx_error_set_quiet(err, ENOENT,
                                "an ordinary user's public and vpc networks go through pasta, "
                                "which is not installed (apt-get install passt)"),
           -1;
  _cleanup_close_ int log =
      openat(statefd, ROUTER_LOG, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (log < 0)
    return agsx_error_set(err, errno, "open %s", ROUTER_LOG);
  int up[2];
  if (pipe2(up, O_CLOEXEC) < 0)
    return agsx_error_set(err, errno, "pipe");
  /* Forked twice, as the holder: nobody's child, in a session of its own. */
  pid_t mid = fork();
  if (mid == 0) {
    close(up[0]);
    if (setsid() < 0)
      _exit(1);
    pid_t r = fork();
    if (r == 0)
      router_main(up[1], log, pasta);
    _exit(r < 0);
  }
  int saved = errno;
  close(up[1]);
  _cleanup_close_ int upr = up[0];
  if (mid < 0)
    return agsx_error_set(err, saved, "fork");
  int status;
  while (waitpid(mid, &status, 0) < 0 && errno == EINTR)
    ;
  struct router_word w;
  if (agsx_read_all(upr, &w, sizeof(w)) != (ssize_t)sizeof(w))
    return agsx_error_set(err, EIO, "the user-mode network's router died at its start");
  w.msg[sizeof(w.msg) - 1] = '\0';
  if (w.e) {
    _cleanup_free_ char *tail = log_tail(statefd);
    return agsx_error_set(err, w.e, "the user-mode network: %s%s%s", w.msg, tail ? ": " : "",
                          tail ? tail : "");
  }
  *ret = w.pid;
  *ret_pasta = w.pasta;
  return 0;
}

/* The router and its pasta in a scope of the user's systemd manager,
 * agsx.slice/agsx-usernet-PID.scope, where the user's sandboxes have
 * scopes (limits on): they outlive the unit or job whose agsx made them,
 * as the sandboxes do, instead of dying with its cgroup and taking the
 * user's public and vpc networks with them. Best effort. */
static void router_scope(pid_t router, pid_t pasta) {
  static const struct agsx_systemd_prop props[] = {
      {.name = "CollectMode", .type = 's', .s = "inactive-or-failed"},
  };
  if (agsx_cgroup_limits_off())
    return;
  char unit[64];
  snprintf(unit, sizeof(unit), "agsx-usernet-%d.scope", (int)router);
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_systemd_start_scope(unit, AGSX_CGROUP_SLICE,
                               "agsx: the user's networks (router and pasta)", router, props,
                               AGSX_ARRAY_SIZE(props), &e) < 0 ||
      (pasta > 0 && agsx_systemd_attach(unit, "", pasta, &e) < 0))
    agsx_warn("the user-mode network stays in the cgroup of this command (it ends with its "
              "unit): %s",
              e->msg);
}

int agsx_usernet_ensure(agsx_error_t *err) {
  if (router_netns() >= 0)
    return 0;
  _cleanup_close_ int dir = state_dir();
  if (dir < 0)
    return agsx_error_set(err, errno, "state directory");
  _cleanup_close_ int lock = agsx_lock_at(dir, ROUTER_LOCK, true, err);
  if (lock < 0)
    return -1;
  _cleanup_close_ int fd = router_open_at(dir, NULL, true);
  if (fd >= 0)
    return router_netns() >= 0 ? 0 : agsx_error_set(err, ENETDOWN, "the user-mode network");
  netns_sweep(0);
  pid_t pid = 0, pasta = 0;
  if (make_router(dir, &pid, &pasta, err) < 0)
    return -1;
  router_scope(pid, pasta);
  char line[64];
  int n = snprintf(line, sizeof(line), "%d %" PRIu64 "\n", (int)pid, agsx_proc_start_time(pid));
  /* A new router has new addresses to refuse. */
  unlinkat(dir, ADDRS_FILE, 0);
  if (agsx_write_file_atomic(dir, ROUTER_FILE, line, (size_t)n, 0600, err) < 0) {
    kill(pid, SIGTERM);
    return -1;
  }
  if (router_netns() < 0) {
    kill(pid, SIGTERM);
    return agsx_error_set(err, ESRCH, "the user-mode network's router is gone");
  }
  return 0;
}

void agsx_usernet_stop(void) {
  _cleanup_close_ int dir = state_dir();
  if (dir < 0)
    return;
  _cleanup_close_ int lock = agsx_lock_at(dir, ROUTER_LOCK, true, NULL);
  if (lock < 0)
    return;
  pid_t pid = 0;
  _cleanup_close_ int fd = router_open(dir, &pid);
  if (fd >= 0)
    kill(pid, SIGTERM);
  unlinkat(dir, ROUTER_FILE, 0);
  netns_sweep(fd >= 0 ? pid : 0); /* (the router removes its own) */
  unlinkat(dir, ADDRS_FILE, 0);
}

/* Whether the ", "-separated LIST has the element ADDR. */
static bool has_elem(const char *list, const char *addr) {
  size_t n = strlen(addr);
  for (const char *p = list; (p = strstr(p, addr)) != NULL; p += n)
    if ((p == list || p[-1] == ' ') && (p[n] == '\0' || p[n] == ','))
      return true;
  return false;
}

/* ---- the host's addresses ----------------------------------------------------------------------- */

char *agsx_usernet_rules_for(const struct agsx_net_addr *addrs, size_t n) {
  char *elems = xstrdup("");
  for (size_t i = 0; i < n; i++) {
    if ((addrs[i].addr >> 24) == 127 || addrs[i].addr == 0)
      continue;
    struct in_addr a = {htonl(addrs[i].addr)};
    char buf[INET_ADDRSTRLEN];
    if (inet_ntop(AF_INET, &a, buf, sizeof(buf)) == NULL || has_elem(elems, buf))
      continue; /* (on two links) */
    char *old = elems;
    elems = xasprintf("%s%s%s", old, old[0] ? ", " : "", buf);
    free(old);
  }
  char *cmds = xasprintf("add set inet agsx hostaddrs { type ipv4_addr; }\n"
                         "flush set inet agsx hostaddrs\n%s%s%s",
                         elems[0] ? "add element inet agsx hostaddrs { " : "", elems,
                         elems[0] ? " }\n" : "");
  free(elems);
  return cmds;
}

char *agsx_usernet_rules(void) {
  if (!agsx_rootless())
    return xstrdup("");
  struct agsx_net_addr *addrs = NULL;
  size_t n = 0;
  agsx_error_t e = NULL;
  /* This process is in the host's namespace: these are the host's. */
  if (agsx_net_addrs(&addrs, &n, &e) < 0)
    agsx_error_free(&e);
  char *cmds = agsx_usernet_rules_for(addrs, n);
  free(addrs);
  return cmds;
}

int agsx_usernet_refresh(agsx_error_t *err) {
  if (!agsx_rootless())
    return 0;
  _cleanup_free_ char *cmds = agsx_usernet_rules();
  _cleanup_close_ int dir = state_dir();
  _cleanup_free_ char *had = NULL;
  size_t len = 0;
  if (dir >= 0 && agsx_read_file_at(dir, ADDRS_FILE, 1 << 16, &had, &len, NULL) == 0 &&
      strcmp(had, cmds) == 0)
    return 0;
  if (agsx_nft_run(cmds, NULL, err) < 0)
    return agsx_error_wrap(err, "the host's addresses in the router's rules");
  if (dir >= 0)
    agsx_write_file_atomic(dir, ADDRS_FILE, cmds, strlen(cmds), 0600, NULL);
  return 0;
}
