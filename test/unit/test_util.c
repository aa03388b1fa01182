/* Unit tests: util (durations, sizes, paths, errors, atomic files). */
#include "config.h"

#include "tap.h"
#include "sandbox/proc.h"
#include "util/conf.h"
#include "util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

static void dur_ok(const char *s, uint64_t want) {
  uint64_t v = 0;
  agsx_error_t err = NULL;
  int r = agsx_parse_duration(s, &v, &err);
  tap_ok(r == 0 && v == want, "duration `%s` = %llu (got %llu%s%s)", s, (unsigned long long)want,
         (unsigned long long)v, err ? ": " : "", err ? err->msg : "");
  agsx_error_free(&err);
}

static void dur_bad(const char *s, const char *why) {
  uint64_t v = 0;
  agsx_error_t err = NULL;
  int r = agsx_parse_duration(s, &v, &err);
  tap_ok(r < 0 && err && strstr(err->msg, why), "duration `%s` refused (%s): %s", s, why,
         err ? err->msg : "accepted");
  agsx_error_free(&err);
}

static void size_ok(const char *s, uint64_t want) {
  uint64_t v = 0;
  agsx_error_t err = NULL;
  int r = agsx_parse_size(s, &v, &err);
  tap_ok(r == 0 && v == want, "size `%s` = %llu (got %llu)", s, (unsigned long long)want,
         (unsigned long long)v);
  agsx_error_free(&err);
}

static void size_bad(const char *s) {
  uint64_t v = 0;
  agsx_error_t err = NULL;
  int r = agsx_parse_size(s, &v, &err);
  tap_ok(r < 0 && err && strncmp(err->msg, "invalid size", 12) == 0, "size `%s` refused: %s", s,
         err ? err->msg : "accepted");
  agsx_error_free(&err);
}

static void test_durations(void) {
  dur_ok("300", 300);
  dur_ok("300s", 300);
  dur_ok("5m", 300);
  dur_ok("1h", 3600);
  dur_ok("1h30m", 5400);
  dur_ok("2h5m10s", 7510);
  dur_ok("24h", 86400);
  dur_ok("86400", 86400);
  dur_bad("", "empty");
  dur_bad("0", "greater than zero");
  dur_bad("0s", "greater than zero");
  dur_bad("-5m", "expected a number");
  dur_bad("5x", "unknown unit");
  dur_bad("5ms", "unknown unit");
  dur_bad("25h", "maximum");
  dur_bad("24h1s", "maximum");
  dur_bad("86401", "maximum");
  dur_bad("99999999999999999999999", "too large");
  dur_bad("18446744073709551615s", "maximum");
  dur_bad("5m1h", "out of order");
  dur_bad("1h1h", "out of order");
  dur_bad("1h30", "missing unit");
  dur_bad("m", "expected a number");
  dur_bad(" 5m", "expected a number");
  char *s = agsx_format_duration(5400);
  tap_is_str(s, "1h30m", "format 5400s");
  free(s);
  s = agsx_format_duration(42);
  tap_is_str(s, "42s", "format 42s");
  free(s);
}

static void test_sizes(void) {
  size_ok("512", 512);
  size_ok("1k", 1024);
  size_ok("64m", 64ull << 20);
  size_ok("64M", 64ull << 20);
  size_ok("1g", 1ull << 30);
  size_ok("1.5g", 3ull << 29);
  size_ok("10MiB", 10ull << 20);
  size_ok("2GB", 2ull << 30);
  size_ok("100b", 100);
  size_bad("");
  size_bad("0");
  size_bad("-1m");
  size_bad("12q");
  size_bad("1.5");
  size_bad("99999999999999999999");
  size_bad("20000000000t");
  size_bad("1.g");
  size_bad("m");
  char *s = agsx_format_size(12345678);
  tap_is_str(s, "12.3MB", "format 12345678 bytes");
  free(s);
}

static void test_paths(void) {
  tap_ok(agsx_path_is_clean("a/b/c", 4096, 10), "clean relative path");
  tap_ok(!agsx_path_is_clean("/etc/passwd", 4096, 10), "absolute path refused");
  tap_ok(!agsx_path_is_clean("a/../b", 4096, 10), ".. refused");
  tap_ok(!agsx_path_is_clean("..", 4096, 10), "bare .. refused");
  tap_ok(!agsx_path_is_clean("a//b", 4096, 10), "empty component refused");
  tap_ok(!agsx_path_is_clean("./a", 4096, 10), ". refused");
  tap_ok(!agsx_path_is_clean("a/b/c/d", 4096, 3), "depth limit");
  tap_ok(!agsx_path_is_clean("", 4096, 3), "empty refused");
  tap_ok(!agsx_path_is_clean("abcdef", 5, 3), "length limit");
}

static void test_errors(void) {
  agsx_error_t err = NULL;
  tap_is_int(agsx_error_set(&err, ENOENT, "open `%s`", "x"), -1, "error_set returns -1");
  agsx_error_wrap(&err, "load `%s`", "img");
  tap_is_str(err->msg, "load `img`: open `x`: No such file or directory", "wrapped message");
  tap_is_int(agsx_error_errno(&err), ENOENT, "errno kept");
  agsx_error_set(&err, EIO, "second");
  tap_is_str(err->msg, "load `img`: open `x`: No such file or directory", "first error wins");
  agsx_error_free(&err);
  tap_ok(err == NULL, "freed");
}

static void test_files(void) {
  char tmpl[] = "/tmp/agsx-test-util-XXXXXX";
  tap_ok(mkdtemp(tmpl) != NULL, "mkdtemp");
  int dfd = open(tmpl, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  agsx_error_t err = NULL;
  tap_is_int(agsx_write_file_atomic(dfd, "f.json", "{}", 2, 0644, &err), 0, "atomic write");
  char *buf = NULL;
  size_t len = 0;
  tap_is_int(agsx_read_file_at(dfd, "f.json", 100, &buf, &len, &err), 0, "read back");
  tap_is_str(buf, "{}", "content");
  free(buf);
  buf = NULL;
  tap_ok(agsx_read_file_at(dfd, "f.json", 1, &buf, &len, &err) < 0 && err->errno_ == EFBIG,
         "read limit enforced");
  agsx_error_free(&err);
  tap_ok(symlinkat("/etc/passwd", dfd, "link") == 0, "symlink made");
  tap_ok(agsx_read_file_at(dfd, "link", 100, &buf, &len, &err) < 0, "symlink not followed");
  agsx_error_free(&err);
  int fd = agsx_open_in_root(dfd, "link", O_RDONLY, 0);
  tap_ok(fd < 0, "in-root resolution of /etc/passwd stays inside (ENOENT)");
  tap_ok(symlinkat("../../../../etc", dfd, "up") == 0, "symlink up made");
  fd = agsx_open_in_root(dfd, "up/passwd", O_RDONLY, 0);
  tap_ok(fd < 0, "in-root resolution of ../../etc stays inside");
  char *name = NULL;
  int t = agsx_mkdtemp_at(dfd, "work", 0700, &name, &err);
  tap_ok(t >= 0 && name && strncmp(name, "work-", 5) == 0, "mkdtemp_at");
  mkdirat(t, "a", 0755);
  mkdirat(t, "a/b", 0755);
  tap_ok(symlinkat("/etc", t, "a/etc") == 0, "symlink a/etc made");
  close(t);
  tap_is_int(agsx_rm_rf_at(dfd, name, &err), 0, "rm_rf removes tree without following symlinks");
  tap_ok(access("/etc/passwd", F_OK) == 0, "symlink target untouched");
  free(name);
  int lk = agsx_lock_at(dfd, "lock", true, &err);
  tap_ok(lk >= 0, "lock");
  close(lk);
  tap_is_int(agsx_rm_rf_at(AT_FDCWD, tmpl, &err), 0, "cleanup");
  close(dfd);
}

/* Removal must not hold one fd (or one stack frame) per level: a layer
 * descending through its own symlinks, or sandbox code, can make trees far
 * deeper than any fd limit. Removed here under a 32-fd limit. */
static void test_rm_deep(void) {
  char tmpl[] = "/tmp/agsx-test-rmdeep-XXXXXX";
  tap_ok(mkdtemp(tmpl) != NULL, "mkdtemp");
  int top = open(tmpl, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  bool built = mkdirat(top, "t", 0700) == 0;
  int cur = openat(top, "t", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  for (int i = 0; built && i < 5000; i++) {
    if (i % 500 == 0) { /* files, links and a side branch here and there */
      close(openat(cur, "f", O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
      built = symlinkat("/etc", cur, "etc") == 0 && mkdirat(cur, "side", 0700) == 0 &&
              mkdirat(cur, "side/x", 0700) == 0;
    }
    int next =
        mkdirat(cur, "d", 0700) == 0 ? openat(cur, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    close(cur);
    cur = next;
    built = built && cur >= 0;
  }
  close(cur);
  tap_ok(built, "a 5000-level tree built");
  struct rlimit old, low = {32, 32};
  getrlimit(RLIMIT_NOFILE, &old);
  low.rlim_max = old.rlim_max;
  setrlimit(RLIMIT_NOFILE, &low);
  agsx_error_t err = NULL;
  int r = agsx_rm_rf_at(top, "t", &err);
  setrlimit(RLIMIT_NOFILE, &old);
  tap_is_int(r, 0, "rm_rf removes a 5000-level tree under a 32-fd limit");
  if (err)
    printf("#   %s\n", err->msg);
  agsx_error_free(&err);
  tap_ok(faccessat(top, "t", F_OK, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT, "nothing left");
  tap_ok(access("/etc/passwd", F_OK) == 0, "symlink targets untouched");
  close(top);
  rmdir(tmpl);
}

/* A gate refusing one entry deep down stops the removal there: it and its
 * directories stay, and the gate saw every entry before it went. */
struct gate_seen {
  unsigned calls;
};

static int refuse_keep(void *data, int dirfd, const char *name, agsx_error_t *err) {
  (void)dirfd;
  ((struct gate_seen *)data)->calls++;
  if (strcmp(name, "keep") == 0)
    return agsx_error_set(err, EACCES, "refused `%s`", name);
  return 0;
}

static void test_rm_gated(void) {
  char tmpl[] = "/tmp/agsx-test-rmgate-XXXXXX";
  tap_ok(mkdtemp(tmpl) != NULL, "mkdtemp");
  int top = open(tmpl, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  bool built = mkdirat(top, "t", 0700) == 0 && mkdirat(top, "t/a", 0700) == 0 &&
               mkdirat(top, "t/a/b", 0700) == 0;
  close(openat(top, "t/a/b/keep", O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  tap_ok(built, "a tree with t/a/b/keep");
  struct gate_seen seen = {0};
  struct agsx_rm_gate gate = {.may = refuse_keep, .data = &seen};
  agsx_error_t err = NULL;
  tap_ok(agsx_rm_rf_gated_at(top, "t", &gate, &err) < 0 && agsx_error_errno(&err) == EACCES,
         "a refused entry fails the removal");
  agsx_error_free(&err);
  tap_ok(faccessat(top, "t/a/b/keep", F_OK, AT_SYMLINK_NOFOLLOW) == 0, "the refused entry stays");
  tap_ok(seen.calls >= 3, "the gate saw every level (a, b, keep)");
  unlinkat(top, "t/a/b/keep", 0);
  tap_is_int(agsx_rm_rf_gated_at(top, "t", &gate, &err), 0, "without it, the tree goes");
  tap_ok(faccessat(top, "t", F_OK, AT_SYMLINK_NOFOLLOW) < 0, "nothing left");
  close(top);
  rmdir(tmpl);
}

static void test_time(void) {
  int64_t t = 0;
  tap_ok(agsx_parse_rfc3339("2024-01-02T03:04:05Z", &t) == 0 && t == 1704164645, "rfc3339 Z");
  tap_ok(agsx_parse_rfc3339("2024-01-02T03:04:05.123456789+01:00", &t) == 0 && t == 1704161045,
         "rfc3339 fraction and offset");
  tap_ok(agsx_parse_rfc3339("yesterday", &t) < 0, "rfc3339 garbage refused");
  char *s = agsx_format_rfc3339(1704164645);
  tap_is_str(s, "2024-01-02T03:04:05Z", "format rfc3339");
  free(s);
}

static void test_random_hex(void) {
  char a[33], b[33], c[5];
  memset(a, 'x', sizeof(a));
  agsx_random_hex(a, 16);
  agsx_random_hex(b, 16);
  tap_ok(strlen(a) == 32 && strspn(a, "0123456789abcdef") == 32, "random hex: 2N lowercase digits");
  tap_ok(strcmp(a, b) != 0, "random hex: two draws differ");
  agsx_random_hex(c, 2);
  tap_ok(strlen(c) == 4, "random hex: N=2 gives 4 digits and a NUL");
}

/* ---- the configuration file: cached per path until agsx_conf_reset ---- */

static char *conf_value(const char *key) {
  char *v = NULL;
  agsx_error_t err = NULL;
  if (agsx_conf_get(key, NULL, &v, &err) < 0)
    v = xasprintf("error: %s", err->msg);
  agsx_error_free(&err);
  return v;
}

static void test_conf(void) {
  char path[] = "/tmp/agsx-test-conf-XXXXXX";
  int fd = mkostemp(path, O_CLOEXEC);
  tap_ok(fd >= 0, "mkostemp");
  setenv("AGSX_CONFIG", path, 1);
  agsx_write_all(fd, "dns = 198.18.0.53\n", 18);
  char *v = conf_value("dns");
  tap_is_str(v, "198.18.0.53", "conf: the file's value");
  free(v);
  tap_ok(ftruncate(fd, 0) == 0 && pwrite(fd, "dns = 198.18.0.54\n", 18, 0) == 18, "conf: edit");
  v = conf_value("dns");
  tap_is_str(v, "198.18.0.53", "conf: cached, an edit is not seen without a reset");
  free(v);
  agsx_conf_reset();
  v = conf_value("dns");
  tap_is_str(v, "198.18.0.54", "conf: an edit is seen after agsx_conf_reset");
  free(v);
  unlink(path);
  agsx_conf_reset();
  v = conf_value("dns");
  tap_ok(v == NULL, "conf: no file, no value");
  free(v);
  int fd2 = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  tap_ok(fd2 >= 0 && agsx_write_all(fd2, "dns = 198.18.0.56\n", 18) == 0, "conf: the file again");
  v = conf_value("dns");
  tap_ok(v == NULL, "conf: a missing file is cached too");
  free(v);
  agsx_conf_reset();
  v = conf_value("dns");
  tap_is_str(v, "198.18.0.56", "conf: and read after a reset");
  free(v);
  close(fd2);
  unlink(path);
  unsetenv("AGSX_CONFIG");
  v = conf_value("dns");
  tap_ok(v == NULL || strcmp(v, "198.18.0.53") != 0, "conf: another path is read, not the cache");
  free(v);
  close(fd);
  char *r = (char *)"x";
  agsx_error_t err = NULL;
  const char text[] = "dns = 198.18.0.55\nnot a setting\n";
  int rc = agsx_conf_parse(text, sizeof(text) - 1, "t", "dns", &r, &err);
  tap_ok(rc < 0 && r == NULL && err, "conf: a bad line after the key fails with no value: %s",
         err ? err->msg : "accepted");
  agsx_error_free(&err);
}

/* ---- directory streams over duplicates ---- */

static int lowest_free_fd(void) {
  int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  close(fd);
  return fd;
}

static void test_dir_stream(void) {
  char tmpl[] = "/tmp/agsx-test-dirstream-XXXXXX";
  tap_ok(mkdtemp(tmpl) != NULL, "dir stream: mkdtemp");
  int dfd = open(tmpl, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  close(openat(dfd, "a", O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  close(openat(dfd, "b", O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  for (int round = 0; round < 2; round++) {
    DIR *d = agsx_dir_stream(dfd);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));)
      n += de->d_name[0] != '.';
    tap_is_int(n, 2, "dir stream: every entry, from the first (round %d)", round);
    tap_ok(d && dirfd(d) != dfd && (fcntl(dirfd(d), F_GETFD) & FD_CLOEXEC),
           "dir stream: reads a CLOEXEC duplicate");
    if (d)
      closedir(d);
    tap_ok(fcntl(dfd, F_GETFD) >= 0, "dir stream: the caller's fd stays open");
  }
  int file = openat(dfd, "a", O_RDONLY | O_CLOEXEC);
  int before = lowest_free_fd();
  errno = 0;
  DIR *d = agsx_dir_stream(file);
  tap_ok(d == NULL && errno == ENOTDIR, "dir stream: a file is refused (%s)", strerror(errno));
  tap_is_int(lowest_free_fd(), before, "dir stream: nothing leaks on failure");
  close(file);
  agsx_rm_rf_at(AT_FDCWD, tmpl, NULL);
  close(dfd);
}

/* ---- string vectors and sets ---- */

static void test_strv_strset(void) {
  _cleanup_strv_ char **v = NULL;
  tap_ok(!agsx_strv_contains(v, "a") && agsx_strv_len(v) == 0, "strv: NULL is empty");
  agsx_strv_push(&v, "a");
  agsx_strv_push(&v, "b");
  tap_ok(agsx_strv_len(v) == 2 && strcmp(v[0], "a") == 0 && strcmp(v[1], "b") == 0 && !v[2],
         "strv: push appends copies, NULL-terminated");
  tap_ok(agsx_strv_contains(v, "b") && !agsx_strv_contains(v, "c"), "strv: contains");
  _cleanup_strv_ char **none = agsx_strv_concat(NULL, NULL);
  tap_ok(none && none[0] == NULL, "strv: concat of nothing is an empty vector, not NULL");
  _cleanup_strv_ char **both = agsx_strv_concat(v, (char *[]){"c", NULL});
  tap_ok(agsx_strv_len(both) == 3 && strcmp(both[0], "a") == 0 && strcmp(both[2], "c") == 0 &&
             both[0] != v[0],
         "strv: concat copies A then B");
  _cleanup_strv_ char **copy = agsx_strv_concat(NULL, v);
  tap_ok(agsx_strv_len(copy) == 2 && strcmp(copy[1], "b") == 0, "strv: concat with NULL copies");
  tap_ok(agsx_list_has("cpu,cpuacct", "cpuacct", ", ") && agsx_list_has(", a,, b ", "b", ", ") &&
             !agsx_list_has("cpuacct", "cpu", ", ") && !agsx_list_has("ab", "a", ", ") &&
             !agsx_list_has(NULL, "a", ", ") && !agsx_list_has("", "a", ", ") &&
             !agsx_list_has("a\tb", "b", ", ") && agsx_list_has("a\tb", "b", ", \t"),
         "list: whole items only, any run of the separators given, NULL and empty hold none");
  _cleanup_strset_ struct agsx_strset set = {0};
  tap_ok(!agsx_strset_has(&set, "x") && set.v == NULL, "strset: zeroed is empty");
  bool fresh = true, dup = false, all = true;
  for (int i = 0; i < 5000; i++) {
    char k[16];
    snprintf(k, sizeof(k), "k%d", i);
    fresh &= agsx_strset_add(&set, k);
    dup |= agsx_strset_add(&set, k);
  }
  tap_ok(fresh && !dup && set.n == 5000, "strset: add says new once per member");
  for (int i = 0; i < 5000 && all; i++) {
    char k[16];
    snprintf(k, sizeof(k), "k%d", i);
    all = agsx_strset_has(&set, k) && strcmp(set.v[i], k) == 0;
  }
  tap_ok(all && set.v[5000] == NULL, "strset: members in insertion order, NULL-terminated");
  tap_ok(!agsx_strset_has(&set, "k5000") && !agsx_strset_has(&set, ""), "strset: non-members");
  agsx_strset_clear(&set);
  tap_ok(set.n == 0 && !agsx_strset_has(&set, "k1") && agsx_strset_add(&set, "k1"),
         "strset: clear empties it, and it can be used again");
}

/* ---- processes: wait status, pidfds proven by start time ---- */

static int child_status(int how) {
  pid_t pid = fork();
  if (pid == 0) {
    if (how == 0)
      _exit(3);
    signal(SIGKILL, SIG_DFL);
    raise(SIGKILL);
    _exit(1);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  return status;
}

static void test_processes(void) {
  int sig = -1;
  tap_is_int(agsx_wait_status_exit_code(child_status(0), &sig), 3, "wait status: exit 3 is 3");
  tap_is_int(sig, 0, "wait status: no signal");
  tap_is_int(agsx_wait_status_exit_code(child_status(1), &sig), 137, "wait status: SIGKILL is 137");
  tap_is_int(sig, SIGKILL, "wait status: the signal");
  tap_is_int(agsx_wait_status_exit_code(0x137f, NULL), -1, "wait status: stopped is no end");

  struct agsx_proc_ref self;
  tap_ok(agsx_proc_ref_self(&self) == 0, "proc ref: self");
  int fd = agsx_proc_ref_pidfd(&self);
  tap_ok(fd >= 0 && (fcntl(fd, F_GETFD) & FD_CLOEXEC), "proc ref: a CLOEXEC pidfd for self");
  if (fd >= 0)
    close(fd);
  struct agsx_proc_ref other = {self.pid, self.start_time + 1};
  errno = 0;
  tap_ok(agsx_proc_ref_pidfd(&other) < 0 && errno == ESRCH,
         "proc ref: the same pid with another start time is refused (ESRCH)");
  errno = 0;
  tap_ok(agsx_proc_ref_open(&other, "", O_RDONLY | O_DIRECTORY) < 0 && errno == ESRCH,
         "proc ref: nor is its /proc opened");
  fd = agsx_proc_ref_open(&self, "stat", O_RDONLY);
  char buf[64] = "";
  tap_ok(fd >= 0 && read(fd, buf, sizeof(buf) - 1) > 0 && atoi(buf) == (int)self.pid,
         "proc ref: /proc/PID/stat of self, proven");
  if (fd >= 0)
    close(fd);
  pid_t dead = fork();
  if (dead == 0)
    _exit(0);
  struct agsx_proc_ref gone = {dead, agsx_proc_start_time(dead)};
  waitpid(dead, NULL, 0);
  errno = 0;
  tap_ok(agsx_proc_ref_pidfd(&gone) < 0 && errno == ESRCH, "proc ref: a reaped process is gone");
  tap_is_int(agsx_proc_ref_signal(&gone, SIGKILL, 0), -ESRCH, "proc ref: no signal to it");

  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  struct agsx_proc_ref live = {child, 0};
  for (int k = 0; k < 1000 && live.start_time == 0; k++)
    live.start_time = agsx_proc_start_time(child);
  struct agsx_proc_ref recycled = {child, live.start_time + 1};
  tap_is_int(agsx_proc_ref_signal(&recycled, SIGKILL, 0), -ESRCH,
             "proc ref: no signal to the same pid with another start time");
  tap_is_int(agsx_proc_ref_signal(&live, SIGKILL, 0), 0, "proc ref: a signal to the live one");
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR)
    ;
  tap_ok(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "proc ref: it got SIGKILL");
}

/* ---- the log sink ---- */

struct captured {
  int n;
  enum agsx_log_level level;
  char msg[128];
};

static void capture(enum agsx_log_level level, const char *msg, void *data) {
  struct captured *c = data;
  c->n++;
  c->level = level;
  snprintf(c->msg, sizeof(c->msg), "%s", msg);
  errno = EBADF; /* agsx_log keeps errno whatever the sink does */
}

/* What the default sink writes to fd 2 for one warning. */
static void default_sink_output(char *buf, size_t len) {
  int p[2];
  buf[0] = '\0';
  if (pipe2(p, O_CLOEXEC) < 0)
    return;
  int saved = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
  dup2(p[1], STDERR_FILENO);
  agsx_warn("disk %d%% full", 93);
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(p[1]);
  ssize_t n = agsx_read_all(p[0], buf, len - 1);
  buf[n > 0 ? n : 0] = '\0';
  close(p[0]);
}

static void test_log_sink(void) {
  enum agsx_log_level saved = agsx_log_level;
  agsx_log_level = AGSX_LOG_WARNING;
  struct captured c = {0};
  agsx_log_set_sink(capture, &c);
  errno = ENOENT;
  agsx_warn("layer `%s` skipped", "a");
  tap_ok(c.n == 1 && c.level == AGSX_LOG_WARNING, "the installed sink gets a warning");
  tap_is_str(c.msg, "layer `a` skipped", "the sink gets the formatted message, no prefix");
  tap_is_int(errno, ENOENT, "agsx_log keeps errno");
  agsx_debug("not shown");
  tap_is_int(c.n, 1, "messages above the level never reach the sink");
  agsx_log_set_sink(NULL, NULL);
  char out[256];
  default_sink_output(out, sizeof(out));
  tap_is_str(out, "agsx: warning: disk 93% full\n", "NULL restores the default sink on fd 2");
  tap_is_int(c.n, 1, "the old sink is no longer called");
  agsx_log_level = saved;
}

static void test_mountinfo(void) {
  char line[] = "36 25 0:32 / /sys/fs/cgroup/my\\040mem rw,nosuid shared:9 master:2 - cgroup "
                "cgroup rw,memory\n";
  char *tok[64];
  int sep;
  int n = agsx_mountinfo_split(line, tok, 64, &sep);
  tap_ok(n == 12 && sep == 8 && strcmp(tok[sep + 1], "cgroup") == 0 &&
             strcmp(tok[sep + 3], "rw,memory") == 0,
         "mountinfo: fields, the separator after the optional ones (%d %d)", n, sep);
  tap_ok(strcmp(agsx_mountinfo_unescape(tok[4]), "/sys/fs/cgroup/my mem") == 0,
         "mountinfo: \\040 is a space");
  char esc[] = "a\\134b\\011c\\012d\\9\\0";
  tap_ok(strcmp(agsx_mountinfo_unescape(esc), "a\\b\tc\nd\\9\\0") == 0,
         "mountinfo: backslash, tab, newline; a short or bad escape stays");
  char none[] = "1 2 3:4 / /x rw shared:1\n", cut[] = "1 2 3:4 / /x rw - overlay\n";
  agsx_mountinfo_split(none, tok, 64, &sep);
  int sep2;
  agsx_mountinfo_split(cut, tok, 64, &sep2);
  tap_ok(sep == -1 && sep2 == -1, "mountinfo: no separator, or nothing after it: skipped");
  char many[] = "1 2 3:4 / /x rw a b c d e f g h - t s o";
  tap_ok(agsx_mountinfo_split(many, tok, 8, &sep) == 8 && sep == -1,
         "mountinfo: at most MAX fields");
}

int main(void) {
  test_durations();
  test_sizes();
  test_paths();
  test_errors();
  test_files();
  test_rm_deep();
  test_rm_gated();
  test_time();
  test_random_hex();
  test_log_sink();
  test_conf();
  test_dir_stream();
  test_strv_strset();
  test_processes();
  test_mountinfo();
  return tap_done();
}
