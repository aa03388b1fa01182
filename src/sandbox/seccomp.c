/* agsx — seccomp: default filter, JSON profiles, program cache, install. */
#include "config.h"

#include "sandbox/seccomp.h"
#include "sandbox/caps.h"

#include "util/digest.h"
#include "util/json.h"

#include <ctype.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>

/* libseccomp's header has the same name as ours: src/ is on the quote path
 * only (-iquote), so <seccomp.h> is always libseccomp's. */
#include <seccomp.h>

#ifndef AF_ALG
#define AF_ALG 38
#endif
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#ifndef TIOCLINUX
#define TIOCLINUX 0x541C
#endif

/* Bumped whenever the default profile changes in a way the tables below do
 * not show (the special rules in add_default_special()); it is part of the
 * cache key of the default profile, with the tables themselves. */
#define DEFAULT_PROFILE_REVISION "1"

/* Total syscall names a JSON profile may list (Docker's default has ~450). */
#define MAX_JSON_NAMES 10000

static void seccomp_ctx_freep(scmp_filter_ctx *ctx) {
  if (*ctx)
    seccomp_release(*ctx);
  *ctx = NULL;
}
#define _cleanup_seccomp_ _cleanup_(seccomp_ctx_freep)

/* ---- the default profile ----------------------------------------------------
 *
 * Docker's unconditional allow-list for amd64, plus the entries Docker gates
 * on capabilities agsx grants (Docker's default set: CHOWN, DAC_OVERRIDE,
 * FSETID, FOWNER, MKNOD, NET_RAW, SETGID, SETUID, SETFCAP, SETPCAP,
 * NET_BIND_SERVICE, SYS_CHROOT, KILL, AUDIT_WRITE), minus what deny_names
 * lists. Names libseccomp does not know yet are skipped at compile time. */
/* clang-format off */
static const char *const allow_names[] = {
    /* files and directories */
    "read", "write", "open", "openat", "openat2", "close", "close_range", "creat", "lseek",
    "pread64", "pwrite64", "readv", "writev", "preadv", "pwritev", "preadv2", "pwritev2",
    "stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs", "access", "faccessat",
    "faccessat2", "getdents", "getdents64", "getcwd", "chdir", "fchdir", "chroot", "rename",
    "renameat", "renameat2", "mkdir", "mkdirat", "rmdir", "link", "linkat", "unlink", "unlinkat",
    "symlink", "symlinkat", "readlink", "readlinkat", "chmod", "fchmod", "fchmodat", "fchmodat2",
    "chown", "fchown", "lchown", "fchownat", "umask", "truncate", "ftruncate", "fallocate",
    "fadvise64", "readahead", "fsync", "fdatasync", "sync", "syncfs", "sync_file_range", "flock",
    "fcntl", "dup", "dup2", "dup3", "pipe", "pipe2", "mknod", "mknodat", "utime", "utimes",
    "utimensat", "futimesat", "copy_file_range", "sendfile", "splice", "tee", "vmsplice",
    "setxattr", "lsetxattr", "fsetxattr", "getxattr", "lgetxattr", "fgetxattr", "listxattr",
    "llistxattr", "flistxattr", "removexattr", "lremovexattr", "fremovexattr", "setxattrat",
    "getxattrat", "listxattrat", "removexattrat", "inotify_init", "inotify_init1",
    "inotify_add_watch", "inotify_rm_watch", "cachestat",
    /* polling, events, timers */
    "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl",
    "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "signalfd", "signalfd4",
    "timerfd_create", "timerfd_settime", "timerfd_gettime", "timer_create", "timer_settime",
    "timer_gettime", "timer_getoverrun", "timer_delete", "nanosleep", "clock_nanosleep",
    "clock_gettime", "clock_getres", "gettimeofday", "time", "getitimer", "setitimer", "alarm",
    "pause", "times",
    /* classic AIO (io_uring is denied below) */
    "io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents",
    /* memory */
    "brk", "mmap", "munmap", "mprotect", "mremap", "madvise", "msync", "mincore", "mlock",
    "mlock2", "munlock", "mlockall", "munlockall", "remap_file_pages", "memfd_create",
    "memfd_secret", "membarrier", "pkey_alloc", "pkey_free", "pkey_mprotect", "map_shadow_stack",
    "mseal",
    /* processes, threads, signals */
    "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid", "kill",
    "tkill", "tgkill", "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending",
    "rt_sigsuspend", "rt_sigtimedwait", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "sigaltstack",
    "restart_syscall", "set_tid_address", "set_robust_list", "get_robust_list", "futex",
    "futex_waitv", "futex_wake", "futex_wait", "futex_requeue", "rseq", "set_thread_area",
    "get_thread_area", "arch_prctl", "prctl", "seccomp", "pidfd_open", "pidfd_send_signal",
    "process_mrelease", "getpid", "gettid", "getppid", "getpgid", "setpgid", "getpgrp", "getsid",
    "setsid", "getpriority", "setpriority", "getrlimit", "setrlimit", "prlimit64", "getrusage",
    "ioprio_get", "ioprio_set", "sched_yield", "sched_getaffinity", "sched_setaffinity",
    "sched_getparam", "sched_setparam", "sched_getscheduler", "sched_setscheduler",
    "sched_get_priority_max", "sched_get_priority_min", "sched_rr_get_interval", "sched_getattr",
    "sched_setattr", "getcpu", "landlock_create_ruleset", "landlock_add_rule",
    "landlock_restrict_self",
    /* credentials */
    "getuid", "geteuid", "getgid", "getegid", "setuid", "setgid", "setreuid", "setregid",
    "setresuid", "getresuid", "setresgid", "getresgid", "getgroups", "setgroups", "setfsuid",
    "setfsgid", "capget", "capset",
    /* sockets (socket itself is filtered, see arg_rules) */
    "socketpair", "bind", "connect", "listen", "accept", "accept4", "getsockname", "getpeername",
    "getsockopt", "setsockopt", "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg",
    "recvmmsg", "shutdown",
    /* System V and POSIX IPC: the sandbox has its own ipc namespace */
    "shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semctl", "semtimedop", "msgget",
    "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
    "mq_notify", "mq_getsetattr",
    /* system information */
    "uname", "sysinfo", "getrandom",
};
/* clang-format on */

/* Never allowed (they fail with EPERM, the default action), with the reason.
 * compile_default() refuses to build if one of these is also allowed. */
/* clang-format off */
static const char *const deny_names[] = {
    /* kernel keyring: not namespaced, a long CVE history */
    "keyctl", "add_key", "request_key",
    /* attack surface the agents do not need: eBPF, perf, userfaultfd (a
     * classic exploit primitive), io_uring (many LPEs, bypasses seccomp
     * for the operations it performs) */
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register",
    /* mounts and namespaces: the sandbox's view of the system is fixed by agsx
     * (Docker allows these only with CAP_SYS_ADMIN); unshare is denied
     * whole, like Docker without CAP_SYS_ADMIN */
    "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
    "fspick", "mount_setattr", "statmount", "listmount", "setns", "unshare", "sethostname",
    "setdomainname", "quotactl", "quotactl_fd", "fanotify_init", "fanotify_mark",
    "lookup_dcookie",
    /* file handles can name files outside the sandbox's root (the 2014
     * "shocker" container escape); Docker gates them on CAP_DAC_READ_SEARCH */
    "open_by_handle_at", "name_to_handle_at",
    /* kernel, modules, machine */
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot",
    "swapon", "swapoff", "acct", "syslog", "vhangup", "iopl", "ioperm",
    /* time is global: setting it needs CAP_SYS_TIME, which agsx does not grant */
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    /* inspecting other processes: ptrace (Docker allows it on kernels >= 4.8;
     * agents do not need it and it widens the attack surface), and the calls
     * Docker gates on CAP_SYS_PTRACE */
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "kcmp", "pidfd_getfd",
    /* NUMA policy: Docker gates these on CAP_SYS_NICE */
    "mbind", "set_mempolicy", "get_mempolicy", "migrate_pages", "move_pages",
    "set_mempolicy_home_node",
    /* 16-bit segments, for Wine and DOS emulators only, a history of bugs */
    "modify_ldt",
    /* obsolete */
    "nfsservctl", "uselib", "ustat", "sysfs", "_sysctl", "epoll_ctl_old", "epoll_wait_old",
};
/* clang-format on */

/* Syscalls allowed only for some values of one 32-bit argument. The kernel
 * reads these arguments as int / unsigned int, so only the low 32 bits count:
 * a filter comparing all 64 bits (Docker's `socket` rule) lets
 * socket(0x100000000 | AF_VSOCK, ...) through. */
enum arg_rule_kind { ALLOW_ONLY, ALLOW_EXCEPT };
struct arg_rule {
  const char *name;
  unsigned arg;
  enum arg_rule_kind kind;
  size_t n;
  uint32_t values[5];
};
static const struct arg_rule arg_rules[] = {
    /* Docker's safe personalities: PER_LINUX, PER_LINUX32, UNAME26,
     * PER_LINUX32|UNAME26, and 0xffffffff (query). */
    {"personality", 0, ALLOW_ONLY, 5, {0x0, 0x8, 0x20000, 0x20008, 0xffffffff}},
    /* AF_ALG: the kernel crypto API, reached by many LPEs. AF_VSOCK: talks to
     * the hypervisor and host services when agsx runs in a VM, and has had
     * its own use-after-frees. */
    {"socket", 0, ALLOW_EXCEPT, 2, {AF_ALG, AF_VSOCK}},
    /* TIOCSTI pushes input into a terminal that may be shared with the host
     * (CVE-2017-5226), TIOCLINUX does the same on virtual consoles
     * (CVE-2023-28100). */
    {"ioctl", 1, ALLOW_EXCEPT, 2, {TIOCSTI, TIOCLINUX}},
};

/* clone is allowed without namespace flags only (as in Docker); clone3 gets
 * ENOSYS, because seccomp cannot read its flags from memory and glibc then
 * falls back to clone. */
#define CLONE_NS_FLAGS                                                                             \
  (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |    \
   CLONE_NEWNET)

/* ---- building and exporting filters ---------------------------------------- */

static scmp_filter_ctx new_ctx(uint32_t default_action, agsx_error_t *err) {
  scmp_filter_ctx ctx = seccomp_init(default_action);
  if (ctx == NULL) {
    agsx_error_set(err, EINVAL, "create seccomp filter");
    return NULL;
  }
  /* A syscall through another ABI (i386 `int 0x80`, x32 numbers) kills the
   * process: agsx runs native images only, and a foreign ABI is the classic
   * way around a filter written for native syscall numbers. Killing the
   * whole process, not one thread, leaves nothing half-dead behind. */
  int r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  if (r < 0)
    r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL); /* kernels < 4.14 */
  if (r < 0) {
    seccomp_release(ctx);
    agsx_error_set(err, -r, "set seccomp bad-architecture action");
    return NULL;
  }
  /* A binary tree over syscall numbers, not a linear chain: the kernel
   * walks the program once per syscall number when it is installed (its
   * allow-cache), so the tree cuts the install ~3x (470 to 160 us for the
   * default filter), a cost every start and every claim pays. libseccomp
   * before 2.5 has no tree: the chain still works. */
  seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
  return ctx;
}

static bool program_plausible(const void *buf, size_t len) {
  if (len == 0 || len % sizeof(struct sock_filter) != 0 ||
      len / sizeof(struct sock_filter) > BPF_MAXINSNS)
    return false;
  struct sock_filter last;
  memcpy(&last, (const char *)buf + len - sizeof(last), sizeof(last));
  return BPF_CLASS(last.code) == BPF_RET;
}

static void bpf_set(struct agsx_seccomp_bpf *ret, const void *buf, size_t len) {
  ret->insns = xmalloc(len);
  memcpy(ret->insns, buf, len);
  ret->len = len / sizeof(struct sock_filter);
}

/* seccomp_export_bpf() writes to an fd: a memfd keeps it in memory. */
static int export_bpf(scmp_filter_ctx ctx, struct agsx_seccomp_bpf *ret, agsx_error_t *err) {
  _cleanup_close_ int fd = memfd_create("agsx-seccomp", MFD_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "memfd_create");
  int r = seccomp_export_bpf(ctx, fd);
  if (r < 0)
    return agsx_error_set(err, -r, "export seccomp filter");
  if (lseek(fd, 0, SEEK_SET) < 0)
    return agsx_error_set(err, errno, "lseek");
  _cleanup_free_ char *buf = NULL;
  size_t len = 0;
  /* Read one instruction more than the kernel accepts, to report the size. */
  if (agsx_read_fd(fd, (BPF_MAXINSNS + 1) * sizeof(struct sock_filter), &buf, &len, err) < 0)
    return agsx_error_wrap(err, "read exported seccomp filter");
  if (len / sizeof(struct sock_filter) > BPF_MAXINSNS)
    return agsx_error_set(err, E2BIG, "seccomp filter is over the kernel limit of %d instructions",
                          BPF_MAXINSNS);
  if (!program_plausible(buf, len))
    return agsx_error_set(err, 0, "libseccomp exported an invalid program of %zu bytes", len);
  bpf_set(ret, buf, len);
  return 0;
}

/* Adds one rule; a name libseccomp does not know is skipped (newer than the
 * installed libseccomp, or not a syscall of this architecture). */
static int add_rule(scmp_filter_ctx ctx, uint32_t default_action, const char *name, uint32_t action,
                    unsigned nargs, const struct scmp_arg_cmp *args, agsx_error_t *err) {
  int nr = seccomp_syscall_resolve_name(name);
  if (nr == __NR_SCMP_ERROR) {
    agsx_debug("seccomp: skipping unknown syscall `%s`", name);
    return 0;
  }
  /* libseccomp refuses (EACCES) a rule that repeats the default action; it
   * would change nothing anyway. */
  if (action == default_action)
    return 0;
  int r = seccomp_rule_add_array(ctx, action, nr, nargs, args);
  if (r < 0)
    return agsx_error_set(err, -r, "add seccomp rule for `%s`", name);
  return 0;
}

static bool name_in(const char *name, const char *const *list, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(name, list[i]) == 0)
      return true;
  return false;
}

static bool class_holds_any(uint32_t mask, uint32_t datum, const struct arg_rule *rule) {
  for (size_t i = 0; i < rule->n; i++)
    if ((rule->values[i] & mask) == datum)
      return true;
  return false;
}

/* ALLOW_EXCEPT: libseccomp has no masked "not equal", and an unconditional
 * allow would override any conditional denial of the same syscall. So the
 * complement of the denied values is written as allow rules, each matching
 * one prefix class of the low 32 bits: for a denied value v and a bit i, the
 * values agreeing with v above bit i and differing at bit i — kept when no
 * denied value falls in it. Together they cover exactly the other values;
 * with n denied values there are at most 32n rules (34 for two). */
static int add_allow_except(scmp_filter_ctx ctx, int nr, const struct arg_rule *rule,
                            agsx_error_t *err) {
  for (size_t v = 0; v < rule->n; v++) {
    for (int bit = 31; bit >= 0; bit--) {
      uint32_t mask = UINT32_MAX << bit;
      uint32_t datum = (rule->values[v] ^ (UINT32_C(1) << bit)) & mask;
      if (class_holds_any(mask, datum, rule))
        continue;
      /* The same class reached from an earlier value is already added. */
      bool dup = false;
      for (size_t w = 0; w < v && !dup; w++)
        dup = ((rule->values[w] ^ (UINT32_C(1) << bit)) & mask) == datum;
      if (dup)
        continue;
      struct scmp_arg_cmp cmp = SCMP_CMP(rule->arg, SCMP_CMP_MASKED_EQ, mask, datum);
      int r = seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, nr, 1, &cmp);
      if (r < 0)
        return agsx_error_set(err, -r, "add seccomp rule for `%s`", rule->name);
    }
  }
  return 0;
}

static int add_arg_rule(scmp_filter_ctx ctx, const struct arg_rule *rule, agsx_error_t *err) {
  int nr = seccomp_syscall_resolve_name(rule->name);
  if (nr == __NR_SCMP_ERROR)
    return 0;
  if (rule->kind == ALLOW_EXCEPT)
    return add_allow_except(ctx, nr, rule, err);
  for (size_t i = 0; i < rule->n; i++) {
    struct scmp_arg_cmp cmp = SCMP_CMP(rule->arg, SCMP_CMP_MASKED_EQ, UINT32_MAX, rule->values[i]);
    int r = seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, nr, 1, &cmp);
    if (r < 0)
      return agsx_error_set(err, -r, "add seccomp rule for `%s`", rule->name);
  }
  return 0;
}

static int add_default_special(scmp_filter_ctx ctx, uint32_t def, agsx_error_t *err) {
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(arg_rules); i++)
    if (add_arg_rule(ctx, &arg_rules[i], err) < 0)
      return -1;
  struct scmp_arg_cmp no_ns = SCMP_A0(SCMP_CMP_MASKED_EQ, (uint64_t)CLONE_NS_FLAGS, 0);
  if (add_rule(ctx, def, "clone", SCMP_ACT_ALLOW, 1, &no_ns, err) < 0)
    return -1;
  return add_rule(ctx, def, "clone3", SCMP_ACT_ERRNO(ENOSYS), 0, NULL, err);
}

static int check_default_tables(agsx_error_t *err) {
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(allow_names); i++)
    if (name_in(allow_names[i], deny_names, AGSX_ARRAY_SIZE(deny_names)))
      return agsx_error_set(err, 0, "internal error: `%s` is both allowed and denied",
                            allow_names[i]);
  return 0;
}

int agsx_seccomp_compile_default(struct agsx_seccomp_bpf *ret, agsx_error_t *err) {
  const uint32_t def = SCMP_ACT_ERRNO(EPERM);
  if (check_default_tables(err) < 0)
    return -1;
  _cleanup_seccomp_ scmp_filter_ctx ctx = new_ctx(def, err);
  if (ctx == NULL)
    return agsx_error_wrap(err, "default seccomp profile");
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(allow_names); i++)
    if (add_rule(ctx, def, allow_names[i], SCMP_ACT_ALLOW, 0, NULL, err) < 0)
      return agsx_error_wrap(err, "default seccomp profile");
  if (add_default_special(ctx, def, err) < 0 || export_bpf(ctx, ret, err) < 0)
    return agsx_error_wrap(err, "default seccomp profile");
  return 0;
}

/* ---- JSON profiles ------------------------------------------------------------ */

static int get_errno_ret(yajl_val obj, const char *key, int fallback, int *ret, agsx_error_t *err) {
  yajl_val v = agsx_json_get(obj, key);
  if (v == NULL || YAJL_IS_NULL(v)) {
    *ret = fallback;
    return 0;
  }
  if (!YAJL_IS_INTEGER(v) || YAJL_GET_INTEGER(v) < 0 || YAJL_GET_INTEGER(v) > 4095)
    return agsx_error_set(err, 0, "`%s` must be an integer from 0 to 4095", key);
  *ret = (int)YAJL_GET_INTEGER(v);
  return 0;
}

static const struct {
  const char *name;
  uint32_t action;
} plain_actions[] = {
    {"SCMP_ACT_ALLOW", SCMP_ACT_ALLOW},
    {"SCMP_ACT_KILL", SCMP_ACT_KILL},
    {"SCMP_ACT_KILL_THREAD", SCMP_ACT_KILL_THREAD},
    {"SCMP_ACT_KILL_PROCESS", SCMP_ACT_KILL_PROCESS},
    {"SCMP_ACT_TRAP", SCMP_ACT_TRAP},
    {"SCMP_ACT_LOG", SCMP_ACT_LOG},
};

/* OBJ's action (key ACTION_KEY) and, for SCMP_ACT_ERRNO, its errno (ERRNO_KEY,
 * EPERM when absent, like runc). */
static int parse_action(yajl_val obj, const char *action_key, const char *errno_key, uint32_t *ret,
                        agsx_error_t *err) {
  const char *name = agsx_json_get_string(obj, action_key);
  if (name == NULL)
    return agsx_error_set(err, 0, "missing string `%s`", action_key);
  bool has_errno = agsx_json_get(obj, errno_key) && !YAJL_IS_NULL(agsx_json_get(obj, errno_key));
  if (strcasecmp(name, "SCMP_ACT_ERRNO") == 0) {
    int e = EPERM;
    if (get_errno_ret(obj, errno_key, EPERM, &e, err) < 0)
      return -1;
    *ret = SCMP_ACT_ERRNO((uint32_t)e);
    return 0;
  }
  if (strcasecmp(name, "SCMP_ACT_TRACE") == 0)
    return agsx_error_set(err, 0, "action `%s` needs a tracer, and agsx runs none", name);
  if (strcasecmp(name, "SCMP_ACT_NOTIFY") == 0)
    return agsx_error_set(err, 0, "action `%s` needs a listener, which agsx does not support",
                          name);
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(plain_actions); i++) {
    if (strcasecmp(name, plain_actions[i].name) != 0)
      continue;
    if (has_errno)
      return agsx_error_set(err, 0, "`%s` is only valid with SCMP_ACT_ERRNO", errno_key);
    *ret = plain_actions[i].action;
    return 0;
  }
  return agsx_error_set(err, 0, "unknown action `%s`", name);
}

/* Architectures by their SCMP_ARCH_* suffix, lowercased, as libseccomp names
 * them. Knowing the full list tells a typo from an architecture this
 * libseccomp (or host) cannot handle. */
static const char *const known_arches[] = {
    "x86",    "x86_64",    "x32",    "arm",      "aarch64",     "loongarch64", "m68k",  "mips",
    "mips64", "mips64n32", "mipsel", "mipsel64", "mipsel64n32", "ppc",         "ppc64", "ppc64le",
    "s390",   "s390x",     "parisc", "parisc64", "riscv64",     "sh",          "sheb",
};

/* ABIs that can run beside the native one on the same kernel. */
static const struct {
  uint32_t native, companion;
} companion_arches[] = {
    {SCMP_ARCH_X86_64, SCMP_ARCH_X86},
    {SCMP_ARCH_X86_64, SCMP_ARCH_X32},
    {SCMP_ARCH_AARCH64, SCMP_ARCH_ARM},
    {SCMP_ARCH_S390X, SCMP_ARCH_S390},
};

/* Resolves "SCMP_ARCH_X86_64" to a libseccomp token; 0 when the name is a
 * real architecture this libseccomp does not support. */
static int resolve_arch(const char *name, uint32_t *ret, agsx_error_t *err) {
  if (strncasecmp(name, "SCMP_ARCH_", 10) != 0 || strlen(name) > 32)
    return agsx_error_set(err, 0, "unknown architecture `%s`", name);
  char lower[33];
  size_t i = 0;
  for (const char *p = name + 10; *p; p++)
    lower[i++] = (char)tolower((unsigned char)*p);
  lower[i] = '\0';
  if (!name_in(lower, known_arches, AGSX_ARRAY_SIZE(known_arches)))
    return agsx_error_set(err, 0, "unknown architecture `%s`", name);
  *ret = seccomp_arch_resolve_name(lower);
  return 0;
}

/* Adds NAME to the filter when its ABI can run on this host; other
 * architectures can never reach the filter and are skipped. */
static int add_arch(scmp_filter_ctx ctx, const char *name, agsx_error_t *err) {
  uint32_t arch;
  if (resolve_arch(name, &arch, err) < 0)
    return -1;
  uint32_t native = seccomp_arch_native();
  if (arch == native)
    return 0;
  for (size_t i = 0; arch != 0 && i < AGSX_ARRAY_SIZE(companion_arches); i++) {
    if (companion_arches[i].native != native || companion_arches[i].companion != arch)
      continue;
    int r = seccomp_arch_add(ctx, arch);
    if (r < 0 && r != -EEXIST)
      return agsx_error_set(err, -r, "add architecture `%s`", name);
    return 0;
  }
  agsx_debug("seccomp: skipping architecture `%s`: cannot run on this host", name);
  return 0;
}

static int json_strings(yajl_val v, const char *what, yajl_val *ret, agsx_error_t *err) {
  *ret = NULL;
  if (v == NULL || YAJL_IS_NULL(v))
    return 0;
  if (!YAJL_IS_ARRAY(v))
    return agsx_error_set(err, 0, "`%s` is not an array", what);
  for (size_t i = 0; i < v->u.array.len; i++)
    if (!YAJL_IS_STRING(v->u.array.values[i]))
      return agsx_error_set(err, 0, "`%s` holds a non-string", what);
  *ret = v;
  return 0;
}

/* Docker's archMap: the entry for the native architecture gives the list. */
static int add_arch_map(scmp_filter_ctx ctx, yajl_val map, agsx_error_t *err) {
  if (!YAJL_IS_ARRAY(map))
    return agsx_error_set(err, 0, "`archMap` is not an array");
  for (size_t i = 0; i < map->u.array.len; i++) {
    yajl_val e = map->u.array.values[i], subs;
    const char *name = agsx_json_get_string(e, "architecture");
    uint32_t arch;
    if (name == NULL)
      return agsx_error_set(err, 0, "`archMap` entry without `architecture`");
    if (resolve_arch(name, &arch, err) < 0 ||
        json_strings(agsx_json_get(e, "subArchitectures"), "subArchitectures", &subs, err) < 0)
      return -1;
    for (size_t j = 0; subs && j < subs->u.array.len; j++) {
      uint32_t sub;
      const char *s = subs->u.array.values[j]->u.string;
      if (resolve_arch(s, &sub, err) < 0 ||
          (arch == seccomp_arch_native() && add_arch(ctx, s, err) < 0))
        return -1;
    }
  }
  return 0;
}

static int add_json_arches(scmp_filter_ctx ctx, yajl_val root, agsx_error_t *err) {
  yajl_val list, map = agsx_json_get(root, "archMap");
  if (json_strings(agsx_json_get(root, "architectures"), "architectures", &list, err) < 0)
    return -1;
  for (size_t i = 0; list && i < list->u.array.len; i++)
    if (add_arch(ctx, list->u.array.values[i]->u.string, err) < 0)
      return -1;
  if (map && !YAJL_IS_NULL(map))
    return add_arch_map(ctx, map, err);
  return 0;
}

/* A filter's flags cannot be carried by a bare program: TSYNC does not
 * matter (the child is single-threaded), LOG only changes audit logging, and
 * ignoring SPEC_ALLOW keeps the speculation mitigations on. */
static const char *const known_flags[] = {
    "SECCOMP_FILTER_FLAG_TSYNC",
    "SECCOMP_FILTER_FLAG_LOG",
    "SECCOMP_FILTER_FLAG_SPEC_ALLOW",
    "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV",
};

static int check_flags(yajl_val root, agsx_error_t *err) {
  yajl_val flags;
  if (json_strings(agsx_json_get(root, "flags"), "flags", &flags, err) < 0)
    return -1;
  for (size_t i = 0; flags && i < flags->u.array.len; i++) {
    const char *f = flags->u.array.values[i]->u.string;
    if (!name_in(f, known_flags, AGSX_ARRAY_SIZE(known_flags)))
      return agsx_error_set(err, 0, "unknown flag `%s`", f);
    agsx_debug("seccomp: ignoring flag `%s`", f);
  }
  const char *listener = agsx_json_get_string(root, "listenerPath");
  if (listener && listener[0])
    return agsx_error_set(err, 0, "`listenerPath` is not supported");
  return 0;
}

/* ---- includes / excludes ------------------------------------------------------- */

static const char *native_goarch(void) {
  switch (seccomp_arch_native()) {
  case SCMP_ARCH_X86_64: return "amd64";
  case SCMP_ARCH_X86: return "386";
  case SCMP_ARCH_AARCH64: return "arm64";
  case SCMP_ARCH_ARM: return "arm";
  case SCMP_ARCH_PPC64LE: return "ppc64le";
  case SCMP_ARCH_S390X: return "s390x";
  case SCMP_ARCH_RISCV64: return "riscv64";
  default: return "";
  }
}

static int parse_kernel_version(const char *s, unsigned *major, unsigned *minor) {
  int n = 0;
  if (sscanf(s, "%u.%u%n", major, minor, &n) != 2 || !isdigit((unsigned char)s[0]))
    return -1;
  return s[n] == '\0' || s[n] == '.' || s[n] == '-' ? 0 : -1;
}

/* Whether the running kernel is at least MIN ("4.8"). */
static int kernel_at_least(const char *min, bool *ret, agsx_error_t *err) {
  unsigned maj, minr, kmaj, kmin;
  struct utsname u;
  if (parse_kernel_version(min, &maj, &minr) < 0)
    return agsx_error_set(err, 0, "invalid `minKernel` `%s`", min);
  if (uname(&u) < 0 || parse_kernel_version(u.release, &kmaj, &kmin) < 0)
    return agsx_error_set(err, 0, "cannot parse the kernel release");
  *ret = kmaj > maj || (kmaj == maj && kmin >= minr);
  return 0;
}

/* Evaluates one `includes` or `excludes` object: *RET tells whether every
 * condition it names holds (INCLUDES) or whether any does (!INCLUDES). */
static int filter_matches(yajl_val f, bool includes, bool *ret, agsx_error_t *err) {
  yajl_val arches, caps;
  const char *goarch = native_goarch();
  if (json_strings(agsx_json_get(f, "arches"), "arches", &arches, err) < 0 ||
      json_strings(agsx_json_get(f, "caps"), "caps", &caps, err) < 0)
    return -1;
  bool all = true, any = false;
  if (arches && arches->u.array.len > 0) {
    bool in = false;
    for (size_t i = 0; i < arches->u.array.len; i++)
      in = in || strcmp(arches->u.array.values[i]->u.string, goarch) == 0;
    all = all && in, any = any || in;
  }
  for (size_t i = 0; caps && i < caps->u.array.len; i++) {
    bool granted = agsx_cap_name_is_default(caps->u.array.values[i]->u.string);
    all = all && granted, any = any || granted;
  }
  const char *min = agsx_json_get_string(f, "minKernel");
  if (min && min[0]) {
    bool ok;
    if (kernel_at_least(min, &ok, err) < 0)
      return -1;
    all = all && ok, any = any || ok;
  }
  *ret = includes ? all : any;
  return 0;
}

static int entry_applies(yajl_val entry, bool *ret, agsx_error_t *err) {
  yajl_val inc = agsx_json_get(entry, "includes"), exc = agsx_json_get(entry, "excludes");
  bool m = false;
  *ret = true;
  if (exc && !YAJL_IS_NULL(exc)) {
    if (!YAJL_IS_OBJECT(exc))
      return agsx_error_set(err, 0, "`excludes` is not an object");
    if (filter_matches(exc, false, &m, err) < 0)
      return agsx_error_wrap(err, "excludes");
    *ret = !m;
  }
  if (*ret && inc && !YAJL_IS_NULL(inc)) {
    if (!YAJL_IS_OBJECT(inc))
      return agsx_error_set(err, 0, "`includes` is not an object");
    if (filter_matches(inc, true, &m, err) < 0)
      return agsx_error_wrap(err, "includes");
    *ret = m;
  }
  return 0;
}

/* ---- syscall entries -------------------------------------------------------------- */

static const struct {
  const char *name;
  enum scmp_compare op;
} ops[] = {
    {"SCMP_CMP_NE", SCMP_CMP_NE},
    {"SCMP_CMP_LT", SCMP_CMP_LT},
    {"SCMP_CMP_LE", SCMP_CMP_LE},
    {"SCMP_CMP_EQ", SCMP_CMP_EQ},
    {"SCMP_CMP_GE", SCMP_CMP_GE},
    {"SCMP_CMP_GT", SCMP_CMP_GT},
    {"SCMP_CMP_MASKED_EQ", SCMP_CMP_MASKED_EQ},
};

/* A uint64 from the number's own text: yajl keeps only int64. */
static int json_u64(yajl_val obj, const char *key, uint64_t *ret, agsx_error_t *err) {
  yajl_val v = agsx_json_get(obj, key);
  *ret = 0;
  if (v == NULL || YAJL_IS_NULL(v))
    return 0;
  const char *s = YAJL_IS_NUMBER(v) ? YAJL_GET_NUMBER(v) : NULL;
  if (s == NULL || !isdigit((unsigned char)s[0]))
    return agsx_error_set(err, 0, "`%s` must be an integer from 0 to 2^64-1", key);
  char *end;
  errno = 0;
  unsigned long long n = strtoull(s, &end, 10);
  if (errno != 0 || *end != '\0')
    return agsx_error_set(err, 0, "`%s` must be an integer from 0 to 2^64-1", key);
  *ret = n;
  return 0;
}

static int parse_arg(yajl_val a, struct scmp_arg_cmp *ret, agsx_error_t *err) {
  int64_t index;
  if (!YAJL_IS_OBJECT(a))
    return agsx_error_set(err, 0, "argument is not an object");
  if (!agsx_json_get_int64(a, "index", &index) || index < 0 || index > 5)
    return agsx_error_set(err, 0, "`index` must be an integer from 0 to 5");
  const char *op = agsx_json_get_string(a, "op");
  if (op == NULL)
    return agsx_error_set(err, 0, "missing string `op`");
  size_t i = 0;
  while (i < AGSX_ARRAY_SIZE(ops) && strcasecmp(op, ops[i].name) != 0)
    i++;
  if (i == AGSX_ARRAY_SIZE(ops))
    return agsx_error_set(err, 0, "unknown operator `%s`", op);
  uint64_t v1, v2;
  if (json_u64(a, "value", &v1, err) < 0 || json_u64(a, "valueTwo", &v2, err) < 0)
    return -1;
  *ret =
      (struct scmp_arg_cmp){.arg = (unsigned)index, .op = ops[i].op, .datum_a = v1, .datum_b = v2};
  return 0;
}

struct json_entry {
  uint32_t action;
  unsigned nargs;
  bool same_index; /* two conditions on one argument: OR them, like runc */
  struct scmp_arg_cmp args[AGSX_SECCOMP_MAX_ARGS];
};

static int parse_args(yajl_val entry, struct json_entry *e, agsx_error_t *err) {
  yajl_val args = agsx_json_get(entry, "args");
  e->nargs = 0;
  e->same_index = false;
  if (args == NULL || YAJL_IS_NULL(args))
    return 0;
  if (!YAJL_IS_ARRAY(args))
    return agsx_error_set(err, 0, "`args` is not an array");
  if (args->u.array.len > AGSX_SECCOMP_MAX_ARGS)
    return agsx_error_set(err, 0, "%zu arguments, the limit is %d", args->u.array.len,
                          AGSX_SECCOMP_MAX_ARGS);
  for (size_t i = 0; i < args->u.array.len; i++) {
    if (parse_arg(args->u.array.values[i], &e->args[i], err) < 0)
      return agsx_error_wrap(err, "argument %zu", i);
    for (size_t j = 0; j < i; j++)
      e->same_index = e->same_index || e->args[j].arg == e->args[i].arg;
  }
  e->nargs = (unsigned)args->u.array.len;
  return 0;
}

/* Docker's current `names` list, or the older single `name`. */
static int entry_names(yajl_val entry, yajl_val *ret_list, const char **ret_name,
                       agsx_error_t *err) {
  *ret_name = agsx_json_get_string(entry, "name");
  if (json_strings(agsx_json_get(entry, "names"), "names", ret_list, err) < 0)
    return -1;
  if (*ret_name && *ret_list && (*ret_list)->u.array.len > 0)
    return agsx_error_set(err, 0, "both `name` and `names` given");
  if (agsx_json_get(entry, "name") && *ret_name == NULL)
    return agsx_error_set(err, 0, "`name` is not a string");
  return 0;
}

static int add_json_name(scmp_filter_ctx ctx, uint32_t def, const char *name,
                         const struct json_entry *e, agsx_error_t *err) {
  if (!e->same_index)
    return add_rule(ctx, def, name, e->action, e->nargs, e->args, err);
  for (unsigned i = 0; i < e->nargs; i++)
    if (add_rule(ctx, def, name, e->action, 1, &e->args[i], err) < 0)
      return -1;
  return 0;
}

static int add_json_entry(scmp_filter_ctx ctx, uint32_t def, yajl_val entry, size_t *nnames,
                          agsx_error_t *err) {
  struct json_entry e;
  yajl_val names;
  const char *name;
  bool applies;
  if (!YAJL_IS_OBJECT(entry))
    return agsx_error_set(err, 0, "not an object");
  if (entry_names(entry, &names, &name, err) < 0 || entry_applies(entry, &applies, err) < 0 ||
      parse_action(entry, "action", "errnoRet", &e.action, err) < 0 ||
      parse_args(entry, &e, err) < 0)
    return -1;
  size_t n = names ? names->u.array.len : 0;
  *nnames += n + (name != NULL);
  if (*nnames > MAX_JSON_NAMES)
    return agsx_error_set(err, 0, "more than %d syscall names", MAX_JSON_NAMES);
  if (!applies)
    return 0;
  if (name && add_json_name(ctx, def, name, &e, err) < 0)
    return -1;
  for (size_t i = 0; i < n; i++)
    if (add_json_name(ctx, def, names->u.array.values[i]->u.string, &e, err) < 0)
      return -1;
  return 0;
}

static int add_json_syscalls(scmp_filter_ctx ctx, uint32_t def, yajl_val root, agsx_error_t *err) {
  yajl_val calls = agsx_json_get(root, "syscalls");
  size_t nnames = 0;
  if (calls == NULL || YAJL_IS_NULL(calls))
    return 0;
  if (!YAJL_IS_ARRAY(calls))
    return agsx_error_set(err, 0, "`syscalls` is not an array");
  if (calls->u.array.len > AGSX_SECCOMP_MAX_ENTRIES)
    return agsx_error_set(err, 0, "%zu syscall entries, the limit is %d", calls->u.array.len,
                          AGSX_SECCOMP_MAX_ENTRIES);
  for (size_t i = 0; i < calls->u.array.len; i++)
    if (add_json_entry(ctx, def, calls->u.array.values[i], &nnames, err) < 0)
      return agsx_error_wrap(err, "syscall entry %zu", i);
  return 0;
}

static int compile_json(const char *buf, size_t len, struct agsx_seccomp_bpf *ret,
                        agsx_error_t *err) {
  _cleanup_json_ yajl_val root = agsx_json_parse(buf, len, AGSX_SECCOMP_JSON_MAX, err);
  uint32_t def;
  if (root == NULL)
    return -1;
  if (!YAJL_IS_OBJECT(root))
    return agsx_error_set(err, 0, "not a JSON object");
  if (parse_action(root, "defaultAction", "defaultErrnoRet", &def, err) < 0 ||
      check_flags(root, err) < 0)
    return -1;
  _cleanup_seccomp_ scmp_filter_ctx ctx = new_ctx(def, err);
  if (ctx == NULL || add_json_arches(ctx, root, err) < 0 ||
      add_json_syscalls(ctx, def, root, err) < 0)
    return -1;
  return export_bpf(ctx, ret, err);
}

int agsx_seccomp_compile_json(const char *buf, size_t len, struct agsx_seccomp_bpf *ret,
                              agsx_error_t *err) {
  if (compile_json(buf, len, ret, err) < 0)
    return agsx_error_wrap(err, "seccomp profile");
  return 0;
}

/* ---- cache ---------------------------------------------------------------------------- */

static void hash_str(agsx_sha256 *h, const char *s) {
  agsx_sha256_update(h, s, strlen(s) + 1); /* with the NUL: no ambiguous joins */
}

/* Everything the default profile is made of. */
static void hash_default_profile(agsx_sha256 *h) {
  hash_str(h, "default profile " DEFAULT_PROFILE_REVISION);
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(allow_names); i++)
    hash_str(h, allow_names[i]);
  hash_str(h, "-");
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(deny_names); i++)
    hash_str(h, deny_names[i]);
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(arg_rules); i++) {
    const struct arg_rule *r = &arg_rules[i];
    char line[128];
    snprintf(line, sizeof(line), "%s %u %d", r->name, r->arg, (int)r->kind);
    hash_str(h, line);
    agsx_sha256_update(h, r->values, r->n * sizeof(r->values[0]));
  }
}

/* seccomp-<hex>.bpf: the key covers whatever changes the compiled program —
 * agsx, libseccomp (new syscall names), the kernel (`minKernel`, supported
 * actions) and the profile. */
static void cache_name(const char *json, size_t len, char ret[128]) {
  _cleanup_sha256_ agsx_sha256 *h = agsx_sha256_new();
  const struct scmp_version *v = seccomp_version();
  struct utsname u;
  char line[128];
  hash_str(h, "agsx " PACKAGE_VERSION);
  hash_str(h, "tree"); /* the program's layout (new_ctx): older caches hold chains */
  snprintf(line, sizeof(line), "libseccomp %u.%u.%u", v->major, v->minor, v->micro);
  hash_str(h, line);
  hash_str(h, uname(&u) == 0 ? u.release : "");
  if (json) {
    hash_str(h, "json");
    agsx_sha256_update(h, json, len);
  } else {
    hash_default_profile(h);
  }
  char digest[AGSX_DIGEST_LEN];
  agsx_sha256_final(h, digest);
  snprintf(ret, 128, "seccomp-%s.bpf", agsx_digest_hex(digest));
}

/* The cache directory, created when missing; -1 (with a warning) when it
 * cannot be used. */
static int open_cachedir(const char *cachedir) {
  agsx_error_t e = NULL;
  if (agsx_mkdir_p(cachedir, 0700, &e) < 0) {
    agsx_warn("seccomp cache `%s`: %s", cachedir, e->msg);
    agsx_error_free(&e);
    return -1;
  }
  _cleanup_close_ int fd = open(cachedir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0) {
    agsx_warn("seccomp cache `%s`: %s", cachedir, strerror(errno));
    return -1;
  }
  /* Whoever can write the cache chooses the filter. */
  if (st.st_uid != geteuid() || (st.st_mode & 022) != 0) {
    agsx_warn("seccomp cache `%s`: not used, it is writable by others", cachedir);
    return -1;
  }
  return steal_fd(&fd);
}

static int cache_read(int dfd, const char *name, struct agsx_seccomp_bpf *ret) {
  agsx_error_t e = NULL;
  _cleanup_free_ char *buf = NULL;
  size_t len = 0;
  if (agsx_read_file_at(dfd, name, BPF_MAXINSNS * sizeof(struct sock_filter), &buf, &len, &e) < 0) {
    if (e->errno_ != ENOENT)
      agsx_warn("seccomp cache: %s", e->msg);
    agsx_error_free(&e);
    return -1;
  }
  if (!program_plausible(buf, len)) {
    agsx_warn("seccomp cache: ignoring corrupt `%s` (%zu bytes)", name, len);
    return -1;
  }
  bpf_set(ret, buf, len);
  return 0;
}

static void cache_write(int dfd, const char *name, const struct agsx_seccomp_bpf *bpf) {
  agsx_error_t e = NULL;
  if (agsx_write_file_atomic(dfd, name, bpf->insns, bpf->len * sizeof(struct sock_filter), 0600,
                             &e) < 0) {
    agsx_warn("seccomp cache: %s", e->msg);
    agsx_error_free(&e);
  }
}

int agsx_seccomp_load_cached(const char *cachedir, const char *profile_json, size_t len,
                             struct agsx_seccomp_bpf *ret, agsx_error_t *err) {
  char name[128];
  cache_name(profile_json, len, name);
  _cleanup_close_ int dfd = open_cachedir(cachedir);
  if (dfd >= 0 && cache_read(dfd, name, ret) == 0)
    return 0;
  int r = profile_json ? agsx_seccomp_compile_json(profile_json, len, ret, err)
                       : agsx_seccomp_compile_default(ret, err);
  if (r < 0)
    return -1;
  if (dfd >= 0)
    cache_write(dfd, name, ret);
  return 0;
}

/* ---- install -------------------------------------------------------------------------- */

int agsx_seccomp_install(const struct agsx_seccomp_bpf *bpf) {
  if (bpf == NULL || bpf->insns == NULL || bpf->len == 0 || bpf->len > BPF_MAXINSNS)
    return -EINVAL;
  struct sock_fprog prog = {.len = (unsigned short)bpf->len, .filter = bpf->insns};
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) == 0)
    return 0;
  if (errno != ENOSYS)
    return -errno;
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) == 0)
    return 0;
  return -errno;
}

void agsx_seccomp_bpf_clear(struct agsx_seccomp_bpf *b) {
  if (b == NULL)
    return;
  free(b->insns);
  b->insns = NULL;
  b->len = 0;
}
