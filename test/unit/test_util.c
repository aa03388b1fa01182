/* Unit tests: util (durations, sizes, paths, errors, atomic files). */
#include "config.h"

#include "tap.h"
#include "util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>

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
    int next = mkdirat(cur, "d", 0700) == 0 ? openat(cur, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                                            : -1;
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

int main(void) {
  test_durations();
  test_sizes();
  test_paths();
  test_errors();
  test_files();
  test_rm_deep();
  test_time();
  return tap_done();
}
