/* Unit tests: cgroup. Runs as root against the machine's real cgroups, under
 * a private parent "agsx-test-<pid>" (AGSX_CGROUP_PARENT) in every
 * hierarchy, removed at the end even when a check failed. The v1 checks need
 * cgroup v1 controllers (memory, cpu, pids); the v2 path is exercised on a
 * fresh cgroup2 mount in a private mount namespace. */
#include "config.h"

#include "host/cgroup.h"
#include "tap.h"
#include "util/util.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <sys/wait.h>

#define MIB (1024ULL * 1024)

static char parent[64];
static char v2dir[64];

/* ---- helpers ------------------------------------------------------------------------------- */

/* Mount points of every cgroup and cgroup2 mount (NULL-terminated), or only
 * of the v1 mount carrying CTRL. */
static char **cgroup_mounts(const char *ctrl) {
  FILE *f = fopen("/proc/self/mountinfo", "re");
  char **v = xzalloc(sizeof(char *));
  size_t n = 0, cap = 0;
  _cleanup_free_ char *line = NULL;
  while (f && getline(&line, &cap, f) > 0) {
    char mnt[4096], fs[64], opts[4096];
    const char *sep = strstr(line, " - ");
    if (sep == NULL || sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1 ||
        sscanf(sep, " - %63s %*s %4095s", fs, opts) != 2)
      continue;
    if (strcmp(fs, "cgroup") != 0 && strcmp(fs, "cgroup2") != 0)
      continue;
    if (ctrl) {
      _cleanup_free_ char *o = xasprintf(",%s,", opts), *w = xasprintf(",%s,", ctrl);
      if (strcmp(fs, "cgroup") != 0 || strstr(o, w) == NULL)
        continue;
    }
    v = xrealloc(v, (n + 2) * sizeof(char *));
    v[n++] = xstrdup(mnt);
    v[n] = NULL;
  }
  if (f)
    fclose(f);
  return v;
}

static char *mnt_of(const char *ctrl) {
  _cleanup_strv_ char **v = cgroup_mounts(ctrl);
  return v[0] ? xstrdup(v[0]) : NULL;
}

static char *leaf(const char *ctrl, const char *name) {
  _cleanup_free_ char *m = mnt_of(ctrl);
  return m ? xasprintf("%s/%s/%s", m, parent, name) : xstrdup("/nonexistent");
}

/* Contents of a file with trailing white space removed, or NULL. */
static char *slurp(const char *path) {
  char *buf = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_read_file_at(AT_FDCWD, path, 1 << 20, &buf, NULL, &e) < 0)
    return NULL;
  for (size_t n = strlen(buf); n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ');)
    buf[--n] = '\0';
  return buf;
}

static void is_file(const char *ctrl, const char *name, const char *file, const char *want) {
  _cleanup_free_ char *dir = leaf(ctrl, name), *path = xasprintf("%s/%s", dir, file);
  _cleanup_free_ char *got = slurp(path);
  tap_is_str(got, want, "%s holds %s", path, want);
}

static bool dir_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool leaf_exists(const char *ctrl, const char *name) {
  _cleanup_free_ char *p = leaf(ctrl, name);
  return dir_exists(p);
}

static bool gone_everywhere(const char *name) {
  _cleanup_strv_ char **m = cgroup_mounts(NULL);
  for (char **p = m; *p; p++) {
    _cleanup_free_ char *path = xasprintf("%s/%s/%s", *p, parent, name);
    if (dir_exists(path)) {
      printf("# still there: %s\n", path);
      return false;
    }
  }
  return true;
}

static bool in_cgroup(pid_t pid, const char *ctrl, const char *name) {
  _cleanup_free_ char *p = xasprintf("/proc/%d/cgroup", (int)pid), *buf = slurp(p);
  _cleanup_free_ char *want = xasprintf(":%s:/%s/%s\n", ctrl, parent, name);
  _cleanup_free_ char *b = buf ? xasprintf("%s\n", buf) : NULL;
  return b && strstr(b, want);
}

static const char *msg(agsx_error_t e) { return e ? e->msg : "(no error)"; }

/* A child that waits for a byte on *ret_go, then runs FN(report fd). */
static pid_t spawn(void (*fn)(int rep), int *ret_go, int *ret_rep) {
  int go[2], rep[2];
  if (pipe2(go, O_CLOEXEC) < 0 || pipe2(rep, O_CLOEXEC) < 0)
    abort();
  pid_t pid = fork();
  if (pid == 0) {
    alarm(20); /* bounded whatever happens */
    close(go[1]);
    close(rep[0]);
    char c;
    if (read(go[0], &c, 1) != 1)
      _exit(2);
    fn(rep[1]);
    _exit(0);
  }
  close(go[0]);
  close(rep[1]);
  *ret_go = go[1];
  *ret_rep = rep[0];
  return pid;
}

static void go(int fd) {
  if (write(fd, "g", 1) != 1)
    abort();
  close(fd);
}

static void sleeper(int rep) {
  (void)rep;
  pause();
}

static void forkbomb(int rep) {
  int v[3] = {0, 0, 0}; /* forked, EAGAIN, other errors */
  for (int i = 0; i < 100; i++) {
    pid_t p = fork();
    if (p == 0) {
      sleep(2);
      _exit(0);
    }
    v[p > 0 ? 0 : errno == EAGAIN ? 1 : 2]++;
  }
  agsx_write_all(rep, v, sizeof(v));
  pause();
}

static void hog(int rep) {
  (void)rep;
  size_t n = 128 * MIB;
  char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    _exit(3);
  for (size_t i = 0; i < n; i += 4096)
    p[i] = 1;
  _exit(0);
}

static int wait_sig(pid_t pid) {
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
    ;
  return WIFSIGNALED(st) ? WTERMSIG(st) : -WEXITSTATUS(st);
}

/* ---- v1 ------------------------------------------------------------------------------------- */

static void test_names(void) {
  const char *bad[] = {"", "abc", "../../etc", "DEADBEEF", "deadbeef/x", "deadbeefg"};
  struct agsx_cgroup_limits lim = {.pids = 10};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(bad); i++) {
    struct agsx_cgroup *cg = NULL;
    agsx_error_t e = NULL;
    int r = agsx_cgroup_create(bad[i], &lim, &cg, &e);
    tap_ok(r < 0 && strstr(msg(e), "invalid cgroup name"), "name `%s` refused: %s", bad[i], msg(e));
    agsx_error_free(&e);
  }
}

static void test_limits_attach_forkbomb_destroy(void) {
  const char *name = "deadbeef0001";
  struct agsx_cgroup_limits lim = {
      .memory = 64 * MIB, .cpu_quota_us = 50000, .cpu_period_us = 100000, .pids = 20};
  struct agsx_cgroup *cg = NULL;
  agsx_error_t e = NULL;
  tap_ok(agsx_cgroup_create(name, &lim, &cg, &e) == 0, "create with memory, cpu, pids: %s", msg(e));
  agsx_error_free(&e);
  if (cg == NULL)
    return;
  is_file("memory", name, "memory.limit_in_bytes", "67108864");
  _cleanup_free_ char *memmnt = mnt_of("memory");
  _cleanup_free_ char *memsw = xasprintf("%s/memory.memsw.limit_in_bytes", memmnt);
  if (access(memsw, F_OK) == 0)
    is_file("memory", name, "memory.memsw.limit_in_bytes", "67108864");
  is_file("cpu", name, "cpu.cfs_quota_us", "50000");
  is_file("cpu", name, "cpu.cfs_period_us", "100000");
  is_file("pids", name, "pids.max", "20");
  tap_ok(!leaf_exists("blkio", name) && !leaf_exists("freezer", name) &&
             !leaf_exists("devices", name),
         "no directory in hierarchies the limits do not need");
  tap_is_int(agsx_cgroup_fd(cg), -1, "no cgroup fd on v1");

  int gofd, rep;
  pid_t pid = spawn(forkbomb, &gofd, &rep);
  tap_ok(agsx_cgroup_attach(cg, pid, &e) == 0, "attach pid %d: %s", (int)pid, msg(e));
  agsx_error_free(&e);
  tap_ok(in_cgroup(pid, "memory", name) && in_cgroup(pid, "pids", name) &&
             in_cgroup(pid, "cpu", name),
         "child is in the memory, cpu and pids cgroups");
  go(gofd);
  int v[3] = {-1, -1, -1};
  tap_ok(agsx_read_all(rep, v, sizeof(v)) == sizeof(v), "fork bomb reported");
  close(rep);
  printf("# fork bomb: %d forked, %d EAGAIN, %d other errors\n", v[0], v[1], v[2]);
  tap_ok(v[0] >= 1 && v[0] <= 19, "at most 20 processes: %d forks succeeded", v[0]);
  tap_ok(v[1] == 100 - v[0] && v[2] == 0, "the other forks failed with EAGAIN");
  uint64_t mem = 0, pids = 0;
  agsx_cgroup_stats(cg, &mem, &pids);
  tap_ok(pids >= 1 && pids <= 20 && mem > 0, "stats: %llu pids, %llu bytes",
         (unsigned long long)pids, (unsigned long long)mem);
  tap_ok(!agsx_cgroup_oom_killed(cg), "no oom kill reported");

  tap_ok(agsx_cgroup_destroy(cg, &e) == 0, "destroy with processes inside: %s", msg(e));
  agsx_error_free(&e);
  tap_is_int(wait_sig(pid), SIGKILL, "child killed by destroy");
  tap_ok(gone_everywhere(name), "directories gone in every hierarchy");
  tap_ok(agsx_cgroup_destroy(cg, &e) == 0, "destroy again is a no-op: %s", msg(e));
  agsx_error_free(&e);
  agsx_cgroup_free(cg);
}

static void test_oom(void) {
  const char *name = "deadbeef0002";
  struct agsx_cgroup_limits lim = {.memory = 32 * MIB};
  _cleanup_cgroup_ struct agsx_cgroup *cg = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  if (!tap_ok(agsx_cgroup_create(name, &lim, &cg, &e) == 0, "create 32 MiB: %s", msg(e)))
    return;
  tap_ok(leaf_exists("memory", name) && !leaf_exists("pids", name) && !leaf_exists("cpu", name),
         "memory-only limits create only the memory cgroup");
  int gofd, rep;
  pid_t pid = spawn(hog, &gofd, &rep);
  tap_ok(agsx_cgroup_attach(cg, pid, &e) == 0, "attach hog: %s", msg(e));
  go(gofd);
  close(rep);
  int sig = wait_sig(pid);
  tap_is_int(sig, SIGKILL, "128 MiB in a 32 MiB cgroup: killed");
  tap_ok(agsx_cgroup_oom_killed(cg), "oom kill reported");
  tap_ok(agsx_cgroup_destroy(cg, &e) == 0 && gone_everywhere(name), "destroyed: %s", msg(e));
}

/* 200 ms of CPU time (not wall time: the machine may be busy), after
 * touching 4 MiB (charged to the cgroup it is in by then). */
static void spin(int rep) {
  (void)rep;
  size_t n = 4 * MIB;
  char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    _exit(3);
  memset(p, 1, n);
  struct timespec ts;
  do
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  while (ts.tv_sec == 0 && ts.tv_nsec < 200 * 1000000L);
  pause();
}

/* `agsx stats`: CPU time and memory are accounted without any limit. */
static void test_accounting(void) {
  const char *name = "deadbeef0008";
  struct agsx_cgroup_limits lim = {.pids = 20};
  _cleanup_cgroup_ struct agsx_cgroup *cg = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  if (!tap_ok(agsx_cgroup_create(name, &lim, &cg, &e) == 0, "create, pids limit only: %s", msg(e)))
    return;
  _cleanup_free_ char *acct = mnt_of("cpuacct");
  tap_ok(leaf_exists("memory", name) && (acct == NULL || leaf_exists("cpuacct", name)),
         "memory and cpuacct accounting directories without their limits");
  int gofd, rep;
  pid_t pid = spawn(spin, &gofd, &rep);
  tap_ok(agsx_cgroup_attach(cg, pid, &e) == 0, "attach: %s", msg(e));
  go(gofd);
  struct agsx_cgroup_usage u;
  for (int i = 0; i < 500; i++) {
    agsx_cgroup_usage(cg, &u);
    if (u.cpu_ns >= 190 * 1000000ull)
      break;
    usleep(10000);
  }
  close(rep);
  tap_ok(u.has_cpu && u.cpu_ns >= 190 * 1000000ull && u.cpu_ns < 10 * 1000000000ull,
         "CPU time of a 200 ms spin: %llu ns", (unsigned long long)u.cpu_ns);
  tap_ok(u.has_memory && u.memory >= 4 * MIB && u.pids == 1, "memory %llu bytes, %llu pids",
         (unsigned long long)u.memory, (unsigned long long)u.pids);
  tap_ok(agsx_cgroup_destroy(cg, &e) == 0 && gone_everywhere(name), "destroyed: %s", msg(e));
  tap_is_int(wait_sig(pid), SIGKILL, "the spinner was killed");
}

static void test_eexist(void) {
  const char *name = "deadbeef0003";
  struct agsx_cgroup_limits lim = {.memory = 64 * MIB, .pids = 5};
  _cleanup_cgroup_ struct agsx_cgroup *a = NULL, *b = NULL;
  _cleanup_error_ agsx_error_t e = NULL, e2 = NULL;
  tap_ok(agsx_cgroup_create(name, &lim, &a, &e) == 0, "create: %s", msg(e));
  int r = agsx_cgroup_create(name, &lim, &b, &e2);
  tap_ok(r < 0 && agsx_error_errno(&e2) == EEXIST, "creating it again: EEXIST: %s", msg(e2));
  tap_ok(leaf_exists("memory", name) && leaf_exists("pids", name),
         "the existing cgroup is left alone");
  tap_ok(agsx_cgroup_destroy(a, &e) == 0 && gone_everywhere(name), "destroyed: %s", msg(e));
}

static void test_half_created(void) {
  const char *name = "deadbeef0004";
  /* The kernel refuses a CFS quota under 1 ms: memory and pids are in place
   * when the cpu write fails. */
  struct agsx_cgroup_limits lim = {.memory = 64 * MIB, .pids = 5, .cpu_quota_us = 10};
  struct agsx_cgroup *cg = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  int r = agsx_cgroup_create(name, &lim, &cg, &e);
  tap_ok(r < 0 && cg == NULL && strstr(msg(e), "cannot apply cpu limit"), "failing cpu limit: %s",
         msg(e));
  tap_ok(gone_everywhere(name), "half-created cgroup removed");
}

static void test_missing_controller(void) {
  char dir[] = "/tmp/agsx-cgroot-XXXXXX";
  if (mkdtemp(dir) == NULL)
    abort();
  setenv("AGSX_CGROUP_ROOT", dir, 1);
  const char *which[] = {"memory", "cpu", "pids"};
  for (int i = 0; i < 3; i++) {
    struct agsx_cgroup_limits lim = {.memory = i == 0 ? 64 * MIB : 0,
                                     .cpu_quota_us = i == 1 ? 50000 : 0,
                                     .pids = i == 2 ? 5 : 0};
    struct agsx_cgroup *cg = NULL;
    agsx_error_t e = NULL;
    _cleanup_free_ char *want = xasprintf("cannot apply %s limit", which[i]);
    int r = agsx_cgroup_create("deadbeef0005", &lim, &cg, &e);
    tap_ok(r < 0 && strstr(msg(e), want) && strstr(msg(e), "not mounted"),
           "missing %s controller: %s", which[i], msg(e));
    agsx_error_free(&e);
  }
  unsetenv("AGSX_CGROUP_ROOT");
  rmdir(dir);
  tap_ok(gone_everywhere("deadbeef0005"), "nothing created");
}

static bool keep_0007(const char *name, void *data) {
  (void)data;
  return strcmp(name, "deadbeef0007") == 0;
}

static void count_report(const char *what, void *data) {
  printf("# gc: %s\n", what);
  ++*(int *)data;
}

static void test_gc(void) {
  struct agsx_cgroup_limits lim = {.memory = 64 * MIB, .pids = 5};
  _cleanup_error_ agsx_error_t e = NULL;
  const char *names[] = {"deadbeef0006", "deadbeef0007"};
  for (int i = 0; i < 2; i++) {
    struct agsx_cgroup *cg = NULL;
    tap_ok(agsx_cgroup_create(names[i], &lim, &cg, &e) == 0, "leftover %s", names[i]);
    agsx_cgroup_free(cg); /* leaves it behind, like a crashed supervisor */
  }
  int n = 0;
  tap_ok(agsx_cgroup_gc(keep_0007, count_report, &n, true, &e) == 0, "gc --dry-run: %s", msg(e));
  tap_ok(n == 1 && leaf_exists("memory", names[0]), "dry run reports one, removes nothing");
  n = 0;
  tap_ok(agsx_cgroup_gc(keep_0007, count_report, &n, false, &e) == 0, "gc: %s", msg(e));
  tap_ok(n == 1 && gone_everywhere(names[0]), "gc removed the leftover");
  tap_ok(leaf_exists("memory", names[1]) && leaf_exists("pids", names[1]),
         "gc kept what keep() kept");

  _cleanup_cgroup_ struct agsx_cgroup *cg = NULL;
  tap_ok(agsx_cgroup_open(names[1], &cg, &e) == 0, "open existing: %s", msg(e));
  if (cg)
    tap_ok(agsx_cgroup_destroy(cg, &e) == 0 && gone_everywhere(names[1]), "destroy opened: %s",
           msg(e));
  _cleanup_cgroup_ struct agsx_cgroup *none = NULL;
  _cleanup_error_ agsx_error_t e2 = NULL;
  tap_ok(agsx_cgroup_open(names[1], &none, &e2) < 0 && agsx_error_errno(&e2) == ENOENT,
         "open missing: ENOENT: %s", msg(e2));
}

static double ms(int64_t ns) { return (double)ns / 1e6; }

static void time_cycles(const char *what, const struct agsx_cgroup_limits *lim) {
  enum { N = 20 };
  int64_t t[3] = {0, 0, 0}, worst = 0;
  int fails = 0;
  for (int i = 0; i < N; i++) {
    _cleanup_free_ char *name = xasprintf("feedface%04d", i);
    struct agsx_cgroup *cg = NULL;
    agsx_error_t e = NULL;
    int gofd, rep;
    pid_t pid = spawn(sleeper, &gofd, &rep);
    int64_t t0 = agsx_mono_ns();
    int r = agsx_cgroup_create(name, lim, &cg, &e);
    int64_t t1 = agsx_mono_ns();
    r = r < 0 ? r : agsx_cgroup_attach(cg, pid, &e);
    int64_t t2 = agsx_mono_ns();
    r = r < 0 ? r : agsx_cgroup_destroy(cg, &e);
    int64_t t3 = agsx_mono_ns();
    fails += r < 0;
    if (r < 0)
      printf("# %s\n", msg(e));
    t[0] += t1 - t0, t[1] += t2 - t1, t[2] += t3 - t2;
    worst = t3 - t0 > worst ? t3 - t0 : worst;
    agsx_error_free(&e);
    agsx_cgroup_free(cg);
    close(gofd);
    close(rep);
    kill(pid, SIGKILL);
    wait_sig(pid);
  }
  printf("# timing %s (mean of %d): create %.3f ms, attach %.3f ms, destroy %.3f ms; "
         "worst cycle %.3f ms\n",
         what, N, ms(t[0]) / N, ms(t[1]) / N, ms(t[2]) / N, ms(worst));
  tap_ok(fails == 0, "%d create+attach+destroy cycles (%s)", N, what);
}

/* ---- v2, in a private mount namespace -------------------------------------------------------- */

static void report(int rep, int ok, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char buf[1024];
  int n = snprintf(buf, sizeof(buf), "%d ", ok ? 1 : 0);
  vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
  va_end(ap);
  for (char *p = buf; *p; p++)
    *p = *p == '\n' ? ' ' : *p;
  strcat(buf, "\n");
  agsx_write_all(rep, buf, strlen(buf));
}

struct clone_args_v2 {
  uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
      set_tid_size, cgroup;
};
#define CLONE_INTO_CGROUP_FLAG 0x200000000ULL

static pid_t clone_into(int cgfd) {
  struct clone_args_v2 a = {
      .flags = CLONE_INTO_CGROUP_FLAG, .exit_signal = SIGCHLD, .cgroup = (uint64_t)cgfd};
  pid_t pid = (pid_t)syscall(SYS_clone3, &a, sizeof(a));
  if (pid == 0) {
    alarm(20);
    pause();
    _exit(0);
  }
  return pid;
}

static bool in_cgroup_v2(pid_t pid, const char *name) {
  _cleanup_free_ char *p = xasprintf("/proc/%d/cgroup", (int)pid), *buf = slurp(p);
  _cleanup_free_ char *want = xasprintf("0::/%s/%s", parent, name);
  return buf && strstr(buf, want);
}

static void v2_limits(int rep, const char *avail) {
  struct agsx_cgroup_limits lim = {.memory = 64 * MIB, .pids = 10};
  _cleanup_cgroup_ struct agsx_cgroup *cg = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  int r = agsx_cgroup_create("cafe0001", &lim, &cg, &e);
  bool have = strstr(avail, "memory") && strstr(avail, "pids");
  if (!have) {
    report(rep,
           r < 0 && strstr(msg(e), "cannot apply memory limit") && strstr(msg(e), "not available"),
           "v2 without memory controller (have: %s): %s", avail, msg(e));
    return;
  }
  _cleanup_free_ char *path = xasprintf("%s/%s/cafe0001/memory.max", v2dir, parent);
  _cleanup_free_ char *got = slurp(path);
  report(rep, r == 0 && got && strcmp(got, "67108864") == 0, "v2 memory.max = %s: %s",
         got ? got : "(none)", msg(e));
  report(rep, cg && agsx_cgroup_destroy(cg, &e) == 0, "v2 destroy: %s", msg(e));
}

static void v2_kill(int rep) {
  const char *name = "cafe0002";
  struct agsx_cgroup_limits none = {0};
  _cleanup_cgroup_ struct agsx_cgroup *cg = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_cgroup_create(name, &none, &cg, &e) < 0)
    return report(rep, 0, "v2 create without limits: %s", msg(e));
  report(rep, agsx_cgroup_fd(cg) >= 0, "v2 create without limits; cgroup fd %d",
         agsx_cgroup_fd(cg));
  pid_t a = clone_into(agsx_cgroup_fd(cg));
  report(rep, a > 0 && in_cgroup_v2(a, name), "clone3(CLONE_INTO_CGROUP) lands in the cgroup");
  int gofd, r;
  pid_t b = spawn(sleeper, &gofd, &r);
  report(rep, agsx_cgroup_attach(cg, b, &e) == 0 && in_cgroup_v2(b, name), "v2 attach: %s", msg(e));
  uint64_t pids = 0;
  agsx_cgroup_stats(cg, NULL, &pids);
  report(rep, pids == 2, "v2 stats: %llu processes", (unsigned long long)pids);
  report(rep, agsx_cgroup_destroy(cg, &e) == 0, "v2 destroy (cgroup.kill): %s", msg(e));
  int sa = a > 0 ? wait_sig(a) : -1, sb = wait_sig(b);
  report(rep, sa == SIGKILL && sb == SIGKILL, "v2 processes killed (%d, %d)", sa, sb);
  _cleanup_free_ char *path = xasprintf("%s/%s/%s", v2dir, parent, name);
  report(rep, !dir_exists(path), "v2 directory removed");
  close(gofd);
  close(r);
}

static void v2_timing(int rep) {
  enum { N = 20 };
  int64_t t[3] = {0, 0, 0};
  int fails = 0;
  struct agsx_cgroup_limits none = {0};
  for (int i = 0; i < N; i++) {
    _cleanup_free_ char *name = xasprintf("cafe1%03d", i);
    _cleanup_cgroup_ struct agsx_cgroup *cg = NULL;
    _cleanup_error_ agsx_error_t e = NULL;
    int gofd, r;
    pid_t pid = spawn(sleeper, &gofd, &r);
    int64_t t0 = agsx_mono_ns();
    int ok = agsx_cgroup_create(name, &none, &cg, &e) == 0 && agsx_cgroup_attach(cg, pid, &e) == 0;
    int64_t t1 = agsx_mono_ns();
    ok = ok && agsx_cgroup_destroy(cg, &e) == 0;
    int64_t t2 = agsx_mono_ns();
    fails += !ok;
    t[0] += t1 - t0, t[1] += t2 - t1;
    close(gofd);
    close(r);
    kill(pid, SIGKILL);
    wait_sig(pid);
  }
  char line[256];
  snprintf(line, sizeof(line),
           "# timing v2 no limits (mean of %d): create+attach %.3f ms, "
           "destroy (cgroup.kill) %.3f ms\n",
           N, ms(t[0]) / N, ms(t[1]) / N);
  agsx_write_all(rep, line, strlen(line));
  report(rep, fails == 0, "%d v2 create+attach+destroy cycles", N);
}

/* The layout is cached per root: a mount over the same root is seen only
 * after agsx_cgroup_reset. Called with the root a plain directory. */
static void v2_cached_layout(int rep) {
  struct agsx_cgroup_limits lim = {.track = true};
  struct agsx_cgroup *cg = NULL;
  agsx_error_t e = NULL;
  int r = agsx_cgroup_create("deadbeef000c", &lim, &cg, &e);
  report(rep, r < 0 && strstr(msg(e), "not mounted") != NULL,
         "layout of a plain directory: v1 with no controllers: %s", msg(e));
  agsx_error_free(&e);
}

static void v2_after_mount(int rep) {
  struct agsx_cgroup_limits lim = {.track = true};
  struct agsx_cgroup *cg = NULL;
  agsx_error_t e = NULL;
  int r = agsx_cgroup_create("deadbeef000c", &lim, &cg, &e);
  report(rep, r < 0 && strstr(msg(e), "not mounted") != NULL,
         "cgroup2 mounted on the same root: the cached layout is kept: %s", msg(e));
  agsx_error_free(&e);
  agsx_cgroup_reset();
  r = agsx_cgroup_create("deadbeef000c", &lim, &cg, &e);
  report(rep, r == 0, "after agsx_cgroup_reset the root is cgroup v2: %s", msg(e));
  if (r == 0 && agsx_cgroup_destroy(cg, &e) < 0)
    report(rep, 0, "destroy: %s", msg(e));
  agsx_cgroup_free(cg);
  agsx_error_free(&e);
}

static void v2_child(int rep) {
  setenv("AGSX_CGROUP_ROOT", v2dir, 1);
  v2_cached_layout(rep);
  if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
      mount("none", v2dir, "cgroup2", 0, NULL) < 0)
    return report(rep, 1, "# SKIP cannot mount cgroup2: %s", strerror(errno));
  v2_after_mount(rep);
  _cleanup_free_ char *cpath = xasprintf("%s/cgroup.controllers", v2dir);
  _cleanup_free_ char *avail = slurp(cpath);
  v2_limits(rep, avail ? avail : "");
  v2_kill(rep);
  v2_timing(rep);
  _cleanup_free_ char *p = xasprintf("%s/%s", v2dir, parent);
  rmdir(p);
}

static void test_v2(void) {
  snprintf(v2dir, sizeof(v2dir), "/tmp/agsx-cg2-XXXXXX");
  if (mkdtemp(v2dir) == NULL)
    abort();
  int gofd, rep;
  pid_t pid = spawn(v2_child, &gofd, &rep);
  go(gofd);
  _cleanup_fclose_ FILE *f = fdopen(rep, "r");
  _cleanup_free_ char *line = NULL;
  size_t cap = 0;
  int n = 0;
  while (getline(&line, &cap, f) > 0) {
    line[strcspn(line, "\n")] = '\0';
    if (line[0] == '#') {
      printf("%s\n", line);
      continue;
    }
    tap_ok(line[0] == '1', "%s", line + 2);
    n++;
  }
  tap_ok(wait_sig(pid) == 0 && n > 0, "v2 child finished (%d checks)", n);
  rmdir(v2dir);
}

/* ---- cleanup ------------------------------------------------------------------------------------
 */

static void kill_procs(const char *dir) {
  _cleanup_free_ char *p = xasprintf("%s/cgroup.procs", dir), *buf = slurp(p);
  for (char *s = buf, *end; s && *s; s = end) {
    long pid = strtol(s, &end, 10);
    if (end == s)
      break;
    kill((pid_t)pid, SIGKILL);
  }
}

/* Removes the test parent in every hierarchy, whatever the module left. */
static void cleanup_all(void) {
  _cleanup_strv_ char **m = cgroup_mounts(NULL);
  for (char **p = m; *p; p++) {
    _cleanup_free_ char *dir = xasprintf("%s/%s", *p, parent);
    _cleanup_dir_ DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d));) {
      if (de->d_type != DT_DIR || de->d_name[0] == '.')
        continue;
      _cleanup_free_ char *sub = xasprintf("%s/%s", dir, de->d_name);
      printf("# cleanup: removing %s\n", sub);
      for (int i = 0; i < 100 && rmdir(sub) < 0 && errno == EBUSY; i++) {
        kill_procs(sub);
        usleep(20000);
      }
    }
    rmdir(dir);
  }
}

static bool parent_gone(void) {
  _cleanup_strv_ char **m = cgroup_mounts(NULL);
  bool gone = true;
  for (char **p = m; *p; p++) {
    _cleanup_free_ char *dir = xasprintf("%s/%s", *p, parent);
    if (dir_exists(dir)) {
      printf("# left behind: %s\n", dir);
      gone = false;
    }
  }
  return gone;
}

int main(void) {
  if (geteuid() != 0) {
    printf("1..0 # SKIP needs root\n");
    return 0;
  }
  snprintf(parent, sizeof(parent), "agsx-test-%d", (int)getpid());
  setenv("AGSX_CGROUP_PARENT", parent, 1);
  unsetenv("AGSX_CGROUP_ROOT");
  struct statfs sfs;
  _cleanup_free_ char *mem = mnt_of("memory"), *cpu = mnt_of("cpu"), *pids = mnt_of("pids");
  bool v1 = statfs("/sys/fs/cgroup", &sfs) == 0 && sfs.f_type != CGROUP2_SUPER_MAGIC && mem &&
            cpu && pids;
  test_names();
  if (v1) {
    test_limits_attach_forkbomb_destroy();
    test_oom();
    test_eexist();
    test_accounting();
    test_half_created();
    test_gc();
    struct agsx_cgroup_limits all = {.memory = 64 * MIB, .cpu_quota_us = 50000, .pids = 20};
    struct agsx_cgroup_limits pids_only = {.pids = 20};
    time_cycles("v1 memory+cpu+pids", &all);
    time_cycles("v1 pids only", &pids_only);
  } else {
    tap_ok(1, "v1 tests # SKIP no cgroup v1 memory, cpu and pids controllers");
  }
  test_missing_controller();
  test_v2();
  cleanup_all();
  tap_ok(parent_gone(), "no test cgroup `%s` left in any hierarchy", parent);
  return tap_done();
}
