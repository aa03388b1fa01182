/* Unit tests: seccomp — the default profile, JSON profiles, the program cache,
 * and the filters installed in forked children, checked syscall by syscall.
 * Each denial is chosen so that, without the filter, the call would fail
 * differently (or succeed): EPERM then proves the filter, not the kernel. */
#include "config.h"

#include "sandbox/seccomp.h"
#include "tap.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#ifndef AF_ALG
#define AF_ALG 38
#endif
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

/* ---- compiling ------------------------------------------------------------- */

static bool bpf_equal(const struct agsx_seccomp_bpf *a, const struct agsx_seccomp_bpf *b) {
  return a->len == b->len && memcmp(a->insns, b->insns, a->len * sizeof(a->insns[0])) == 0;
}

static int compile_str(const char *json, struct agsx_seccomp_bpf *ret, agsx_error_t *err) {
  return agsx_seccomp_compile_json(json, strlen(json), ret, err);
}

static void test_compile_default(void) {
  _cleanup_seccomp_bpf_ struct agsx_seccomp_bpf a = {0}, b = {0};
  agsx_error_t err = NULL;
  int64_t t0 = agsx_mono_ns();
  int r = agsx_seccomp_compile_default(&a, &err);
  double ms = (double)(agsx_mono_ns() - t0) / 1e6;
  tap_ok(r == 0, "compile the default profile%s%s", err ? ": " : "", err ? err->msg : "");
  agsx_error_free(&err);
  tap_ok(a.len > 0 && a.len <= BPF_MAXINSNS, "default program has %zu instructions", a.len);
  printf("# default profile: %zu instructions, compiled in %.2f ms\n", a.len, ms);
  tap_ok(agsx_seccomp_compile_default(&b, NULL) == 0 && bpf_equal(&a, &b),
         "compiling twice gives identical programs");
}

static const char small_profile[] =
    "{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"defaultErrnoRet\":1,"
    "\"architectures\":[\"SCMP_ARCH_X86_64\",\"SCMP_ARCH_X86\",\"SCMP_ARCH_X32\"],"
    "\"syscalls\":[{\"names\":[\"read\",\"write\",\"exit_group\",\"chown32\",\"no_such_call\"],"
    "\"action\":\"SCMP_ACT_ALLOW\"},"
    "{\"names\":[\"personality\"],\"action\":\"scmp_act_allow\","
    "\"args\":[{\"index\":0,\"value\":8,\"op\":\"SCMP_CMP_EQ\"}]},"
    "{\"names\":[\"clone\"],\"action\":\"SCMP_ACT_ALLOW\",\"args\":[{\"index\":0,"
    "\"value\":2114060288,\"op\":\"SCMP_CMP_MASKED_EQ\"}],\"excludes\":{\"caps\":[\"CAP_SYS_"
    "ADMIN\"]}},"
    "{\"names\":[\"mount\"],\"action\":\"SCMP_ACT_ALLOW\",\"includes\":{\"caps\":[\"CAP_SYS_"
    "ADMIN\"]}},"
    "{\"names\":[\"clone3\"],\"action\":\"SCMP_ACT_ERRNO\",\"errnoRet\":38},"
    "{\"names\":[\"getpid\"],\"action\":\"SCMP_ACT_ERRNO\",\"errnoRet\":1},"
    "{\"names\":[\"ptrace\"],\"action\":\"SCMP_ACT_KILL_PROCESS\",\"includes\":{\"minKernel\":\"4."
    "8\"}},"
    "{\"names\":[\"ioctl\"],\"action\":\"SCMP_ACT_LOG\",\"args\":[{\"index\":1,"
    "\"value\":18446744073709551615,\"valueTwo\":21522,\"op\":\"SCMP_CMP_MASKED_EQ\"}]}]}";

static const char oci_profile[] =
    "{\"defaultAction\":\"SCMP_ACT_KILL\",\"flags\":[\"SECCOMP_FILTER_FLAG_LOG\"],"
    "\"syscalls\":[{\"names\":[\"exit\"],\"action\":\"SCMP_ACT_ALLOW\"},"
    "{\"names\":[\"kill\"],\"action\":\"SCMP_ACT_TRAP\",\"args\":[{\"index\":1,\"value\":0,"
    "\"op\":\"SCMP_CMP_EQ\"},{\"index\":1,\"value\":9,\"op\":\"SCMP_CMP_EQ\"}]}]}";

static void test_compile_json(void) {
  _cleanup_seccomp_bpf_ struct agsx_seccomp_bpf a = {0}, b = {0};
  agsx_error_t err = NULL;
  int r = compile_str(small_profile, &a, &err);
  tap_ok(r == 0 && a.len > 0, "compile a Docker-style profile%s%s", err ? ": " : "",
         err ? err->msg : "");
  agsx_error_free(&err);
  r = compile_str(oci_profile, &b, &err);
  tap_ok(r == 0 && b.len > 0, "compile an OCI linux.seccomp object%s%s", err ? ": " : "",
         err ? err->msg : "");
  agsx_error_free(&err);
}

static const struct {
  const char *json, *want;
} bad_profiles[] = {
    {"{\"defaultAction\":", "invalid JSON"},
    {"[]", "not a JSON object"},
    {"{}", "missing string `defaultAction`"},
    {"{\"defaultAction\":\"SCMP_ACT_NOPE\"}", "unknown action `SCMP_ACT_NOPE`"},
    {"{\"defaultAction\":\"SCMP_ACT_TRACE\"}", "needs a tracer"},
    {"{\"defaultAction\":\"SCMP_ACT_NOTIFY\"}", "needs a listener"},
    {"{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"defaultErrnoRet\":5000}", "from 0 to 4095"},
    {"{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"defaultErrnoRet\":1}", "only valid with"},
    {"{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"architectures\":[\"SCMP_ARCH_Z80\"]}",
     "unknown architecture `SCMP_ARCH_Z80`"},
    {"{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"archMap\":[{\"architecture\":\"SCMP_ARCH_X86_64\","
     "\"subArchitectures\":[\"X86\"]}]}",
     "unknown architecture `X86`"},
    {"{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"flags\":[\"SECCOMP_FILTER_FLAG_NOPE\"]}",
     "unknown flag"},
    {"{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"listenerPath\":\"/run/x.sock\"}", "listenerPath"},
    {"{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":{}}", "`syscalls` is not an array"},
    {"{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{\"names\":[\"read\"],"
     "\"action\":\"SCMP_ACT_BOGUS\"}]}",
     "syscall entry 0: unknown action `SCMP_ACT_BOGUS`"},
    {"{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{\"names\":[\"read\"],"
     "\"action\":\"SCMP_ACT_ERRNO\",\"args\":[{\"index\":0,\"value\":1,\"op\":\"SCMP_CMP_SIMILAR\"}"
     "]}]}",
     "unknown operator `SCMP_CMP_SIMILAR`"},
    {"{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{\"names\":[\"read\"],"
     "\"action\":\"SCMP_ACT_ERRNO\",\"args\":[{\"index\":6,\"value\":1,\"op\":\"SCMP_CMP_EQ\"}]}]}",
     "`index` must be an integer from 0 to 5"},
    {"{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{\"names\":[\"read\"],"
     "\"action\":\"SCMP_ACT_ERRNO\",\"args\":[{\"index\":0,\"value\":-1,\"op\":\"SCMP_CMP_EQ\"}]}]"
     "}",
     "`value` must be an integer"},
    {"{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{\"names\":[\"read\"],"
     "\"action\":\"SCMP_ACT_ERRNO\",\"args\":[{\"index\":0,\"value\":18446744073709551616,"
     "\"op\":\"SCMP_CMP_EQ\"}]}]}",
     "`value` must be an integer"},
    {"{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{\"names\":[\"read\"],"
     "\"action\":\"SCMP_ACT_ERRNO\",\"args\":[{\"index\":0,\"op\":\"SCMP_CMP_EQ\"},"
     "{\"index\":1,\"op\":\"SCMP_CMP_EQ\"},{\"index\":2,\"op\":\"SCMP_CMP_EQ\"},"
     "{\"index\":3,\"op\":\"SCMP_CMP_EQ\"},{\"index\":4,\"op\":\"SCMP_CMP_EQ\"},"
     "{\"index\":5,\"op\":\"SCMP_CMP_EQ\"},{\"index\":5,\"op\":\"SCMP_CMP_EQ\"}]}]}",
     "7 arguments, the limit is 6"},
    {"{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{\"names\":[\"read\", 3],"
     "\"action\":\"SCMP_ACT_ERRNO\"}]}",
     "`names` holds a non-string"},
    {"{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{\"names\":[\"read\"],"
     "\"action\":\"SCMP_ACT_ALLOW\",\"errnoRet\":1}]}",
     "only valid with SCMP_ACT_ERRNO"},
    {"{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{\"names\":[\"read\"],"
     "\"action\":\"SCMP_ACT_ERRNO\",\"includes\":{\"minKernel\":\"four\"}}]}",
     "invalid `minKernel` `four`"},
    {"{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{\"name\":\"read\",\"names\":[\"write\"],"
     "\"action\":\"SCMP_ACT_ERRNO\"}]}",
     "both `name` and `names`"},
};

static void test_bad_profiles(void) {
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(bad_profiles); i++) {
    struct agsx_seccomp_bpf b = {0};
    agsx_error_t err = NULL;
    int r = compile_str(bad_profiles[i].json, &b, &err);
    bool ok = r < 0 && err && strstr(err->msg, bad_profiles[i].want) &&
              agsx_str_has_prefix(err->msg, "seccomp profile: ") && b.insns == NULL;
    tap_ok(ok, "refused with `%s`", bad_profiles[i].want);
    if (!ok)
      printf("#   got: %s\n", err ? err->msg : "(success)");
    agsx_error_free(&err);
    agsx_seccomp_bpf_clear(&b);
  }
}

static void test_bounds(void) {
  /* 2001 entries: over the limit. */
  size_t cap = 64 + 2001 * 48;
  _cleanup_free_ char *doc = xmalloc(cap);
  size_t n = (size_t)snprintf(doc, cap, "{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[");
  for (int i = 0; i < 2001; i++)
    n += (size_t)snprintf(doc + n, cap - n, "%s{\"names\":[],\"action\":\"SCMP_ACT_LOG\"}",
                          i ? "," : "");
  n += (size_t)snprintf(doc + n, cap - n, "]}");
  agsx_error_t err = NULL;
  struct agsx_seccomp_bpf b = {0};
  tap_ok(agsx_seccomp_compile_json(doc, n, &b, &err) < 0 && strstr(err->msg, "limit is 2000"),
         "more than 2000 entries refused");
  agsx_error_free(&err);
  _cleanup_free_ char *big = xmalloc(AGSX_SECCOMP_JSON_MAX + 2);
  memset(big, ' ', AGSX_SECCOMP_JSON_MAX + 1);
  big[0] = '{';
  big[AGSX_SECCOMP_JSON_MAX] = '}';
  tap_ok(agsx_seccomp_compile_json(big, AGSX_SECCOMP_JSON_MAX + 1, &b, &err) < 0 &&
             strstr(err->msg, "over the limit"),
         "profile over 1 MiB refused");
  agsx_error_free(&err);
}

/* ---- cache ---------------------------------------------------------------------- */

static int count_cache_files(const char *dir, char ret_name[256]) {
  _cleanup_dir_ DIR *d = opendir(dir);
  struct dirent *de;
  int n = 0;
  while (d && (de = readdir(d)) != NULL) {
    if (agsx_str_has_prefix(de->d_name, "seccomp-") && agsx_str_has_suffix(de->d_name, ".bpf")) {
      snprintf(ret_name, 256, "%s", de->d_name);
      n++;
    }
  }
  return n;
}

static double timed_load(const char *dir, const char *json, struct agsx_seccomp_bpf *ret, int *rc) {
  agsx_error_t err = NULL;
  int64_t t0 = agsx_mono_ns();
  *rc = agsx_seccomp_load_cached(dir, json, json ? strlen(json) : 0, ret, &err);
  double ms = (double)(agsx_mono_ns() - t0) / 1e6;
  if (err)
    printf("#   error: %s\n", err->msg);
  agsx_error_free(&err);
  return ms;
}

static void test_cache(void) {
  char tmp[] = "/tmp/agsx-test-seccomp-XXXXXX";
  if (mkdtemp(tmp) == NULL)
    abort();
  _cleanup_free_ char *dir = xasprintf("%s/sub/cache", tmp);
  _cleanup_seccomp_bpf_ struct agsx_seccomp_bpf fresh = {0}, a = {0}, b = {0}, c = {0}, j = {0};
  int rc1, rc2, rc3, rc4;
  agsx_seccomp_compile_default(&fresh, NULL);
  double t_compile = timed_load(dir, NULL, &a, &rc1);
  double t_cached = timed_load(dir, NULL, &b, &rc2);
  printf("# compile %.2f ms, cached %.3f ms\n", t_compile, t_cached);
  char name[256] = "";
  struct stat st;
  tap_ok(rc1 == 0 && bpf_equal(&a, &fresh), "cache miss compiles the default profile");
  tap_ok(rc2 == 0 && bpf_equal(&b, &fresh), "cache hit returns identical bytes");
  tap_ok(stat(dir, &st) == 0 && (st.st_mode & 07777) == 0700, "cache directory created 0700");
  tap_ok(count_cache_files(dir, name) == 1, "one cache file `%s`", name);

  /* A corrupt file (not a multiple of 8 bytes) is ignored and rewritten. */
  _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  agsx_write_file_atomic(dfd, name, "garbage", 7, 0600, NULL);
  enum agsx_log_level saved = agsx_log_level;
  agsx_log_level = AGSX_LOG_ERROR; /* the warning about the corrupt file is expected */
  timed_load(dir, NULL, &c, &rc3);
  agsx_log_level = saved;
  tap_ok(rc3 == 0 && bpf_equal(&c, &fresh), "corrupt cache file ignored");
  tap_ok(fstatat(dfd, name, &st, 0) == 0 && (size_t)st.st_size == fresh.len * 8,
         "corrupt cache file rewritten");

  double t_json = timed_load(dir, small_profile, &j, &rc4);
  tap_ok(rc4 == 0 && j.len > 0 && count_cache_files(dir, name) == 2,
         "a JSON profile gets its own cache file");
  printf("# JSON profile compiled and cached in %.2f ms\n", t_json);
  agsx_rm_rf_at(AT_FDCWD, tmp, NULL);
}

/* ---- installing: checks run in a forked child ------------------------------------- */

/* Each check returns 0 when the call succeeded, else its errno. */
#define CHECK(fn, expr)                                                                            \
  static int fn(void) {                                                                            \
    errno = 0;                                                                                     \
    long r_ = (long)(expr);                                                                        \
    return r_ == -1 ? errno : 0;                                                                   \
  }

static int pipe_fd(void) {
  static int fds[2] = {-1, -1};
  if (fds[0] < 0 && pipe2(fds, O_CLOEXEC) < 0)
    return -1;
  return fds[0];
}

CHECK(c_getpid, syscall(SYS_getpid))
CHECK(c_keyctl, syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -1, 0))
CHECK(c_add_key, syscall(SYS_add_key, NULL, NULL, NULL, 0, -2))
CHECK(c_bpf, syscall(SYS_bpf, -1, NULL, 0))
CHECK(c_perf, syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0))
CHECK(c_userfaultfd, syscall(SYS_userfaultfd, O_CLOEXEC))
CHECK(c_io_uring, syscall(SYS_io_uring_setup, 1, NULL))
CHECK(c_unshare_user, unshare(CLONE_NEWUSER))
CHECK(c_unshare_none, unshare(0))
CHECK(c_setns, setns(-1, 0))
CHECK(c_mount, mount("none", "/nonexistent-agsx", "tmpfs", 0, NULL))
CHECK(c_umount, umount2("/nonexistent-agsx", 0))
CHECK(c_pivot_root, syscall(SYS_pivot_root, "/nonexistent-agsx", "/nonexistent-agsx"))
#ifdef SYS_fsopen
CHECK(c_fsopen, syscall(SYS_fsopen, "agsx-no-such-fs", 0))
#endif
CHECK(c_kexec, syscall(SYS_kexec_load, 0, 0, NULL, 0xdead0000UL))
CHECK(c_delete_module, syscall(SYS_delete_module, "agsx_no_such_module", O_NONBLOCK))
CHECK(c_reboot, syscall(SYS_reboot, 0, 0, 0, NULL)) /* bad magic: harmless either way */
CHECK(c_swapon, syscall(SYS_swapon, "/nonexistent-agsx", 0))
CHECK(c_acct, syscall(SYS_acct, "/nonexistent-agsx"))
CHECK(c_syslog, syscall(SYS_syslog, 10 /* SIZE_BUFFER */, NULL, 0))
CHECK(c_settimeofday, syscall(SYS_settimeofday, NULL, NULL))
CHECK(c_clock_settime, syscall(SYS_clock_settime, CLOCK_REALTIME, NULL))
CHECK(c_ptrace, syscall(SYS_ptrace, 3 /* PTRACE_PEEKUSER */, 1, 0, 0))
CHECK(c_process_vm_readv, syscall(SYS_process_vm_readv, getppid(), NULL, 0, NULL, 0, 0))
CHECK(c_kcmp, syscall(SYS_kcmp, getpid(), getpid(), 0, 0, 0))
CHECK(c_open_by_handle, syscall(SYS_open_by_handle_at, -1, NULL, 0))
CHECK(c_name_to_handle, syscall(SYS_name_to_handle_at, AT_FDCWD, "/", NULL, NULL, 0))
CHECK(c_set_mempolicy, syscall(SYS_set_mempolicy, 0, NULL, 0))
CHECK(c_fanotify, syscall(SYS_fanotify_init, 0, 0))
CHECK(c_clone3, syscall(SYS_clone3, NULL, 0))
CHECK(c_socket_alg, socket(AF_ALG, SOCK_SEQPACKET | SOCK_CLOEXEC, 0))
CHECK(c_socket_vsock, socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0))
CHECK(c_socket_alg_high, syscall(SYS_socket, (1UL << 32) | AF_ALG, SOCK_SEQPACKET, 0))
CHECK(c_socket_inet, socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0))
CHECK(c_socket_unix, socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0))
CHECK(c_socket_netlink, socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0))
CHECK(c_socket_39, socket(39, SOCK_STREAM | SOCK_CLOEXEC, 0))
CHECK(c_socket_102, socket(AF_ALG + 64, SOCK_STREAM | SOCK_CLOEXEC, 0))
CHECK(c_ioctl_tiocsti, ioctl(pipe_fd(), TIOCSTI, "x"))
CHECK(c_ioctl_tioclinux, ioctl(pipe_fd(), 0x541C, "x"))
CHECK(c_ioctl_tiocsti_high, syscall(SYS_ioctl, pipe_fd(), (1UL << 32) | TIOCSTI, "x"))
CHECK(c_ioctl_fionread, ioctl(pipe_fd(), FIONREAD, &(int){0}))
CHECK(c_ioctl_tiocgwinsz, ioctl(pipe_fd(), TIOCGWINSZ, &(struct winsize){0}))
CHECK(c_personality_query, syscall(SYS_personality, 0xffffffffUL))
CHECK(c_personality_linux, syscall(SYS_personality, 0))
CHECK(c_personality_rie, syscall(SYS_personality, 0x0400000 /* READ_IMPLIES_EXEC */))
CHECK(c_chroot, chroot("/"))
CHECK(c_unknown, syscall(1000))
CHECK(c_memfd, memfd_create("agsx-test", MFD_CLOEXEC))
CHECK(c_getrandom, syscall(SYS_getrandom, &(char[8]){0}, 8, 0))
CHECK(c_iopl, syscall(SYS_iopl, 0))
#ifdef __x86_64__
CHECK(c_modify_ldt, syscall(SYS_modify_ldt, 0, &(char[16]){0}, 16))
#endif

static int c_clone_newuser(void) {
  long r = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, NULL, NULL, 0);
  if (r == 0)
    _exit(0);
  if (r > 0)
    waitpid((pid_t)r, NULL, 0);
  return r < 0 ? errno : 0;
}

static int c_clone_newnet(void) {
  long r = syscall(SYS_clone, CLONE_NEWNET | SIGCHLD, 0, NULL, NULL, 0);
  if (r == 0)
    _exit(0);
  if (r > 0)
    waitpid((pid_t)r, NULL, 0);
  return r < 0 ? errno : 0;
}

static int c_fork(void) {
  pid_t pid = fork();
  if (pid == 0)
    _exit(7);
  int status;
  if (pid < 0)
    return errno;
  return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 7 ? 0 : EIO;
}

static void *thread_fn(void *arg) { return arg; }

/* glibc's pthread_create tries clone3 first, gets ENOSYS, falls back to clone. */
static int c_thread(void) {
  pthread_t t;
  int r = pthread_create(&t, NULL, thread_fn, NULL);
  if (r != 0)
    return r;
  pthread_join(t, NULL);
  return 0;
}

struct check {
  const char *what;
  int (*fn)(void);
  int want; /* errno, 0 for success, -E for "anything but E" */
};

static const struct check default_checks[] = {
    {"getpid works", c_getpid, 0},
    {"keyctl denied", c_keyctl, EPERM},
    {"add_key denied", c_add_key, EPERM},
    {"bpf denied", c_bpf, EPERM},
    {"perf_event_open denied", c_perf, EPERM},
    {"userfaultfd denied", c_userfaultfd, EPERM},
    {"io_uring_setup denied", c_io_uring, EPERM},
    {"unshare(CLONE_NEWUSER) denied", c_unshare_user, EPERM},
    {"unshare(0) denied", c_unshare_none, EPERM},
    {"setns denied", c_setns, EPERM},
    {"mount denied", c_mount, EPERM},
    {"umount2 denied", c_umount, EPERM},
    {"pivot_root denied", c_pivot_root, EPERM},
#ifdef SYS_fsopen
    {"fsopen denied", c_fsopen, EPERM},
#endif
    {"kexec_load denied", c_kexec, EPERM},
    {"delete_module denied", c_delete_module, EPERM},
    {"reboot denied", c_reboot, EPERM},
    {"swapon denied", c_swapon, EPERM},
    {"acct denied", c_acct, EPERM},
    {"syslog denied", c_syslog, EPERM},
    {"settimeofday denied", c_settimeofday, EPERM},
    {"clock_settime denied", c_clock_settime, EPERM},
    {"ptrace denied", c_ptrace, EPERM},
    {"process_vm_readv denied", c_process_vm_readv, EPERM},
    {"kcmp denied", c_kcmp, EPERM},
    {"open_by_handle_at denied", c_open_by_handle, EPERM},
    {"name_to_handle_at denied", c_name_to_handle, EPERM},
    {"set_mempolicy denied", c_set_mempolicy, EPERM},
    {"fanotify_init denied", c_fanotify, EPERM},
    {"iopl denied", c_iopl, EPERM},
#ifdef __x86_64__
    {"modify_ldt denied", c_modify_ldt, EPERM},
#endif
    {"clone(CLONE_NEWUSER) denied", c_clone_newuser, EPERM},
    {"clone(CLONE_NEWNET) denied", c_clone_newnet, EPERM},
    {"clone3 fails with ENOSYS", c_clone3, ENOSYS},
    {"fork works", c_fork, 0},
    {"pthread_create works (clone3 falls back to clone)", c_thread, 0},
    {"socket(AF_ALG) denied", c_socket_alg, EPERM},
    {"socket(AF_VSOCK) denied", c_socket_vsock, EPERM},
    {"socket(1<<32 | AF_ALG) denied (the kernel ignores the high bits)", c_socket_alg_high, EPERM},
    {"socket(AF_INET) works", c_socket_inet, 0},
    {"socket(AF_UNIX) works", c_socket_unix, 0},
    {"socket(AF_NETLINK) works", c_socket_netlink, 0},
    {"socket(39) not filtered", c_socket_39, -EPERM},
    {"socket(AF_ALG + 64) not filtered", c_socket_102, -EPERM},
    {"ioctl(TIOCSTI) denied", c_ioctl_tiocsti, EPERM},
    {"ioctl(TIOCLINUX) denied", c_ioctl_tioclinux, EPERM},
    {"ioctl(1<<32 | TIOCSTI) denied (the kernel ignores the high bits)", c_ioctl_tiocsti_high,
     EPERM},
    {"ioctl(FIONREAD) works", c_ioctl_fionread, 0},
    {"ioctl(TIOCGWINSZ) not filtered", c_ioctl_tiocgwinsz, -EPERM},
    {"personality(0xffffffff) works", c_personality_query, 0},
    {"personality(PER_LINUX) works", c_personality_linux, 0},
    {"personality(READ_IMPLIES_EXEC) denied", c_personality_rie, EPERM},
    {"chroot allowed (CAP_SYS_CHROOT is granted)", c_chroot, 0},
    {"unknown syscall 1000 gets EPERM", c_unknown, EPERM},
    {"memfd_create works", c_memfd, 0},
    {"getrandom works", c_getrandom, 0},
};

CHECK(c_getppid, syscall(SYS_getppid))
CHECK(c_getuid, syscall(SYS_getuid))
CHECK(c_getgid, syscall(SYS_getgid))
CHECK(c_getegid, syscall(SYS_getegid))
CHECK(c_geteuid, syscall(SYS_geteuid))
CHECK(c_dup_999, syscall(SYS_dup, 999))
CHECK(c_dup_0, syscall(SYS_dup, 0))
CHECK(c_umask_777, syscall(SYS_umask, 0777))
CHECK(c_umask_022, syscall(SYS_umask, 022))
CHECK(c_kill_0, syscall(SYS_kill, getpid(), 0))
CHECK(c_kill_28, syscall(SYS_kill, getpid(), 28 /* SIGWINCH, ignored */))
CHECK(c_kill_urg, syscall(SYS_kill, getpid(), SIGURG /* ignored */))

static const char user_profile[] =
    "{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":["
    "{\"names\":[\"getpid\"],\"action\":\"SCMP_ACT_ERRNO\",\"errnoRet\":1},"
    "{\"names\":[\"dup\"],\"action\":\"SCMP_ACT_ERRNO\",\"errnoRet\":22,"
    "\"args\":[{\"index\":0,\"value\":999,\"op\":\"SCMP_CMP_EQ\"}]},"
    "{\"names\":[\"agsx_no_such_syscall\"],\"action\":\"SCMP_ACT_ERRNO\"},"
    "{\"names\":[\"getppid\"],\"action\":\"SCMP_ACT_ERRNO\",\"errnoRet\":13,"
    "\"includes\":{\"caps\":[\"CAP_SYS_ADMIN\"]}},"
    "{\"names\":[\"getuid\"],\"action\":\"SCMP_ACT_ERRNO\",\"errnoRet\":13,"
    "\"includes\":{\"caps\":[\"CAP_CHOWN\"],\"arches\":[\"amd64\",\"arm64\"]}},"
    "{\"names\":[\"getgid\"],\"action\":\"SCMP_ACT_ERRNO\",\"errnoRet\":13,"
    "\"excludes\":{\"caps\":[\"CAP_SYS_ADMIN\"]}},"
    "{\"names\":[\"getegid\"],\"action\":\"SCMP_ACT_ERRNO\",\"errnoRet\":13,"
    "\"excludes\":{\"arches\":[\"amd64\",\"arm64\"]}},"
    "{\"names\":[\"geteuid\"],\"action\":\"SCMP_ACT_ERRNO\",\"errnoRet\":13,"
    "\"includes\":{\"minKernel\":\"99.0\"}},"
    "{\"names\":[\"umask\"],\"action\":\"SCMP_ACT_ERRNO\",\"errnoRet\":22,"
    "\"args\":[{\"index\":0,\"value\":448,\"valueTwo\":448,\"op\":\"SCMP_CMP_MASKED_EQ\"}]},"
    "{\"names\":[\"kill\"],\"action\":\"SCMP_ACT_ERRNO\",\"errnoRet\":3,"
    "\"args\":[{\"index\":1,\"value\":0,\"op\":\"SCMP_CMP_EQ\"},"
    "{\"index\":1,\"value\":28,\"op\":\"SCMP_CMP_EQ\"}]}]}";

static const struct check user_checks[] = {
    {"profile: getpid fails with EPERM", c_getpid, EPERM},
    {"profile: dup(999) fails with EINVAL (argument rule)", c_dup_999, EINVAL},
    {"profile: dup(0) works", c_dup_0, 0},
    {"profile: entry needing CAP_SYS_ADMIN skipped", c_getppid, 0},
    {"profile: entry needing CAP_CHOWN on amd64 applied", c_getuid, EACCES},
    {"profile: entry excluded for CAP_SYS_ADMIN applied", c_getgid, EACCES},
    {"profile: entry excluded for amd64 skipped", c_getegid, 0},
    {"profile: entry needing kernel 99.0 skipped", c_geteuid, 0},
    {"profile: umask(0777) fails (MASKED_EQ)", c_umask_777, EINVAL},
    {"profile: umask(022) works", c_umask_022, 0},
    {"profile: kill(sig 0) fails (two conditions on one argument: OR)", c_kill_0, ESRCH},
    {"profile: kill(sig 28) fails (two conditions on one argument: OR)", c_kill_28, ESRCH},
    {"profile: kill(SIGURG) works", c_kill_urg, 0},
};

/* Runs CHECK in a fresh child (so that no check sees what another did), under
 * BPF when it is not NULL. Returns its result, or INT_MIN when the filter
 * could not be installed or the child died. */
static int run_one(const struct agsx_seccomp_bpf *bpf, const struct check *check) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0)
    abort();
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    int res = INT_MIN;
    close(fds[0]);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && (!bpf || agsx_seccomp_install(bpf) == 0))
      res = check->fn();
    agsx_write_all(fds[1], &res, sizeof(res));
    _exit(0);
  }
  close(fds[1]);
  int res = INT_MIN;
  if (agsx_read_all(fds[0], &res, sizeof(res)) != (ssize_t)sizeof(res))
    res = INT_MIN;
  close(fds[0]);
  waitpid(pid, NULL, 0);
  return res;
}

static bool check_passed(const struct check *c, int r) {
  return r != INT_MIN && (c->want >= 0 ? r == c->want : r != -c->want);
}

static const char *result_str(int r) {
  return r == INT_MIN ? "no result" : r ? strerror(r) : "success";
}

/* One TAP line per check, under BPF. Then, as a control, the same checks
 * without a filter: a check that passes there too proves nothing on this
 * host (reported as a comment, since it depends on the host's privileges). */
static void run_checks(const struct agsx_seccomp_bpf *bpf, const struct check *checks, size_t n) {
  size_t weak = 0, denials = 0;
  for (size_t i = 0; i < n; i++) {
    int r = run_one(bpf, &checks[i]), w = checks[i].want;
    if (!tap_ok(check_passed(&checks[i], r), "%s", checks[i].what))
      printf("#   got: %s, expected: %s%s\n", result_str(r), w < 0 ? "anything but " : "",
             w ? strerror(w < 0 ? -w : w) : "success");
    if (w <= 0)
      continue;
    denials++;
    if (check_passed(&checks[i], run_one(NULL, &checks[i]))) {
      printf("# control: `%s` gives the same result without the filter on this host\n",
             checks[i].what);
      weak++;
    }
  }
  printf("# control: %zu of %zu denials differ from the host's own answer\n", denials - weak,
         denials);
}

/* Runs FN in a child under BPF and returns its wait status. */
static int run_status(const struct agsx_seccomp_bpf *bpf, void (*fn)(void)) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    /* A fault is the kernel's answer (int 0x80 without ia32 emulation): it
     * must end the child by its signal, not through ASan's handler. */
    signal(SIGSEGV, SIG_DFL);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || agsx_seccomp_install(bpf) < 0)
      _exit(100);
    fn();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

#ifdef __x86_64__
static void x32_getpid(void) { syscall(0x40000000 | SYS_getpid); }

/* getpid through the i386 ABI. */
static void i386_getpid(void) {
  long ret = 20;
  __asm__ volatile("int $0x80" : "+a"(ret) : : "memory");
}
#endif

static void test_foreign_abis(const struct agsx_seccomp_bpf *bpf) {
#ifdef __x86_64__
  int st = run_status(bpf, x32_getpid);
  tap_ok(WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS, "x32 syscall kills the process (status %#x)",
         st);
  st = run_status(bpf, i386_getpid);
  if (WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV)
    tap_ok(1, "# SKIP i386 syscalls not supported by this kernel");
  else
    tap_ok(WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS,
           "i386 int 0x80 syscall kills the process (status %#x)", st);
#else
  tap_ok(1, "# SKIP foreign ABI checks are for x86_64");
  tap_ok(1, "# SKIP foreign ABI checks are for x86_64");
#endif
}

static void test_install(void) {
  _cleanup_seccomp_bpf_ struct agsx_seccomp_bpf def = {0}, user = {0};
  tap_ok(agsx_seccomp_install(&(struct agsx_seccomp_bpf){0}) == -EINVAL,
         "installing an empty program fails with EINVAL");
  if (agsx_seccomp_compile_default(&def, NULL) < 0 || compile_str(user_profile, &user, NULL) < 0)
    abort();
  run_checks(&def, default_checks, AGSX_ARRAY_SIZE(default_checks));
  test_foreign_abis(&def);
  run_checks(&user, user_checks, AGSX_ARRAY_SIZE(user_checks));
}

int main(void) {
  test_compile_default();
  test_compile_json();
  test_bad_profiles();
  test_bounds();
  test_cache();
  test_install();
  return tap_done();
}
