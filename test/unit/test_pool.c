/* Unit tests: a claim's wire form (sandbox/pool.h), what a claim may not
 * change of its pool's configuration, and that agsx's default seccomp
 * filter, which a parked command installs before its claim, lets every
 * syscall of the claim's path through (procexec.h). */
#include "config.h"

#include "net/egress.h"
#include "sandbox/pool.h"
#include "sandbox/procexec.h"
#include "sandbox/seccomp.h"
#include "tap.h"

#include <linux/audit.h>
#include <sched.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

static void round_trip(void) {
  char *argv[] = {"sh", "-c", "echo \"a b\"", NULL}, *env[] = {"A=1", "B=", NULL};
  char *labels[] = {"k=v", NULL};
  struct agsx_claim c = {.argv = argv,
                         .env = env,
                         .labels = labels,
                         .cwd = "/tmp",
                         .user = "1000:1000",
                         .name = "job-1",
                         .hostname = "box",
                         .timeout = 90,
                         .rm = true,
                         .detach = true};
  agsx_error_t err = NULL;
  size_t len;
  char *b = agsx_claim_encode(&c, &len, &err);
  struct agsx_claim d;
  tap_ok(b && agsx_claim_decode(b, len, &d, &err) == 0, "a claim encodes and decodes");
  tap_ok(agsx_strv_len(d.argv) == 3 && strcmp(d.argv[2], "echo \"a b\"") == 0, "argv kept");
  tap_ok(agsx_strv_len(d.env) == 2 && strcmp(d.env[1], "B=") == 0, "env kept");
  tap_ok(agsx_strv_len(d.labels) == 1, "labels kept");
  tap_is_str(d.cwd, "/tmp", "cwd");
  tap_is_str(d.user, "1000:1000", "user");
  tap_is_str(d.name, "job-1", "name");
  tap_is_str(d.hostname, "box", "hostname");
  tap_ok(d.timeout == 90 && d.rm && d.detach && !d.idle, "timeout and flags");
  /* Every strict prefix is malformed (nothing half-read passes). */
  int bad = 0;
  for (size_t n = 0; n < len; n++) {
    struct agsx_claim e;
    if (agsx_claim_decode(b, n, &e, &err) == 0) {
      bad++;
      agsx_claim_clear(&e);
    }
    agsx_error_free(&err);
  }
  tap_ok(bad == 0, "no prefix of a claim decodes (%d did)", bad);
  agsx_claim_clear(&d);
  free(b);
  /* An empty claim: the image's Cmd, no strings. */
  struct agsx_claim empty = {0};
  b = agsx_claim_encode(&empty, &len, &err);
  tap_ok(b && agsx_claim_decode(b, len, &d, &err) == 0 && agsx_strv_len(d.argv) == 0 &&
             d.name == NULL && d.cwd == NULL,
         "an empty claim round-trips with NULLs");
  agsx_claim_clear(&d);
  free(b);
}

static void refused(const char *buf, size_t len, const char *what) {
  struct agsx_claim d;
  agsx_error_t err = NULL;
  tap_ok(agsx_claim_decode(buf, len, &d, &err) < 0 && err, "refused: %s", what);
  agsx_error_free(&err);
}

static void hostile(void) {
#define R(s, what) refused(s, sizeof(s) - 1, what)
  R("", "nothing");
  R("XXXXCLAIM1\0\0000\0", "a bad magic");
  R("AGSXCLAIM1\0z\0000\0\0\0\0\0000\0000\0000\0", "an unknown flag");
  R("AGSXCLAIM1\0\0-1\0\0\0\0\0000\0000\0000\0", "a negative timeout");
  R("AGSXCLAIM1\0\00099999\0\0\0\0\0000\0000\0000\0", "a timeout over 24h");
  R("AGSXCLAIM1\0\0000\0bad/name\0\0\0\0000\0000\0000\0", "an invalid name");
  R("AGSXCLAIM1\0\0000\0\0\0rel\0\0000\0000\0000\0", "a relative cwd");
  R("AGSXCLAIM1\0\0000\0\0\0\0\0009999999\0", "an argument count over the bound");
  R("AGSXCLAIM1\0\0000\0\0\0\0\0002\0a\0", "fewer arguments than counted");
  R("AGSXCLAIM1\0\0000\0\0\0\0\0000\0000\0000\0extra", "bytes after the claim");
  R("AGSXCLAIM1\0i\0000\0\0\0\0\0000\0000\0000\0", "an idle claim that is attached");
  R("AGSXCLAIM1\0di\0000\0\0\0\0\0001\0sh\0000\0000\0", "an idle claim with a command");
#undef R
}

static void check(void) {
  struct agsx_pool_config pc = {.name = "p", .image = "busybox", .memory = 64 << 20};
  struct agsx_run_spec s = {.image = "busybox", .memory = 64 << 20, .network = "internal"};
  agsx_error_t err = NULL;
  tap_ok(agsx_pool_check(&pc, &s, &err) == 0, "the pool's own values are no change");
  s.memory = 32 << 20;
  tap_ok(agsx_pool_check(&pc, &s, &err) < 0 && strstr(err->msg, "--memory"), "--memory differs");
  agsx_error_free(&err);
  s.memory = 0;
  s.image = "other";
  tap_ok(agsx_pool_check(&pc, &s, &err) < 0 && strstr(err->msg, "image"), "the image differs");
  agsx_error_free(&err);
  s.image = NULL;
  s.network = "public";
  tap_ok(agsx_pool_check(&pc, &s, &err) < 0 && strstr(err->msg, "--network"), "--network differs");
  agsx_error_free(&err);
  s.network = NULL;
  s.tty = true;
  tap_ok(agsx_pool_check(&pc, &s, &err) < 0 && strstr(err->msg, "--tty"), "a terminal is refused");
  agsx_error_free(&err);
}

/* ---- the default filter over the claim's path ---------------------------------------- */

/* A classic-BPF interpreter for seccomp programs (what the kernel runs on
 * each syscall): the seccomp_data of syscall NR with arguments ARGS, the
 * program's return value. 0 (SECCOMP_RET_KILL_THREAD) on a malformed program. */
static uint32_t bpf_run(const struct agsx_seccomp_bpf *prog, uint32_t arch, int nr,
                        const uint64_t args[6]) {
  struct seccomp_data d = {.nr = nr, .arch = arch};
  for (int i = 0; i < 6; i++)
    d.args[i] = args ? args[i] : 0;
  uint32_t a = 0, x = 0, mem[BPF_MEMWORDS] = {0};
  for (size_t pc = 0; pc < prog->len; pc++) {
    const struct sock_filter *f = &prog->insns[pc];
    uint32_t src = BPF_SRC(f->code) == BPF_X ? x : f->k;
    switch (BPF_CLASS(f->code)) {
    case BPF_LD:
      if (BPF_MODE(f->code) == BPF_ABS && BPF_SIZE(f->code) == BPF_W && f->k + 4 <= sizeof(d) &&
          f->k % 4 == 0)
        memcpy(&a, (const char *)&d + f->k, 4);
      else if (BPF_MODE(f->code) == BPF_IMM)
        a = f->k;
      else if (BPF_MODE(f->code) == BPF_MEM && f->k < BPF_MEMWORDS)
        a = mem[f->k];
      else if (BPF_MODE(f->code) == BPF_LEN)
        a = sizeof(d);
      else
        return 0;
      break;
    case BPF_LDX:
      if (BPF_MODE(f->code) == BPF_IMM)
        x = f->k;
      else if (BPF_MODE(f->code) == BPF_MEM && f->k < BPF_MEMWORDS)
        x = mem[f->k];
      else if (BPF_MODE(f->code) == BPF_LEN)
        x = sizeof(d);
      else
        return 0;
      break;
    case BPF_ST:
    case BPF_STX:
      if (f->k >= BPF_MEMWORDS)
        return 0;
      mem[f->k] = BPF_CLASS(f->code) == BPF_ST ? a : x;
      break;
    case BPF_ALU:
      switch (BPF_OP(f->code)) {
      case BPF_ADD: a += src; break;
      case BPF_SUB: a -= src; break;
      case BPF_MUL: a *= src; break;
      case BPF_DIV:
        if (src == 0)
          return 0;
        a /= src;
        break;
      case BPF_MOD:
        if (src == 0)
          return 0;
        a %= src;
        break;
      case BPF_AND: a &= src; break;
      case BPF_OR: a |= src; break;
      case BPF_XOR: a ^= src; break;
      case BPF_LSH: a = src < 32 ? a << src : 0; break;
      case BPF_RSH: a = src < 32 ? a >> src : 0; break;
      case BPF_NEG: a = -a; break;
      default: return 0;
      }
      break;
    case BPF_JMP: {
      bool t;
      switch (BPF_OP(f->code)) {
      case BPF_JA: pc += f->k; continue;
      case BPF_JEQ: t = a == src; break;
      case BPF_JGT: t = a > src; break;
      case BPF_JGE: t = a >= src; break;
      case BPF_JSET: t = (a & src) != 0; break;
      default: return 0;
      }
      pc += t ? f->jt : f->jf;
      break;
    }
    case BPF_RET: return BPF_RVAL(f->code) == BPF_A ? a : f->k;
    case BPF_MISC:
      if (BPF_MISCOP(f->code) == BPF_TAX)
        x = a;
      else
        a = x;
      break;
    default: return 0;
    }
  }
  return 0; /* ran off the end: the kernel refuses such a program */
}

static void default_filter_allows_the_claim(void) {
  struct agsx_seccomp_bpf prog = {0};
  agsx_error_t err = NULL;
  tap_ok(agsx_seccomp_compile_default(&prog, &err) == 0, "the default filter compiles");
  if (prog.len == 0)
    return;
  /* The interpreter itself, against what the default profile says. */
  const uint32_t x86_64 = AUDIT_ARCH_X86_64;
  tap_ok(bpf_run(&prog, x86_64, SYS_getpid, NULL) == SECCOMP_RET_ALLOW, "getpid is allowed");
  tap_ok(bpf_run(&prog, x86_64, SYS_sethostname, NULL) == (SECCOMP_RET_ERRNO | EPERM),
         "sethostname fails with EPERM (the claim's host name is set from outside)");
  tap_ok(bpf_run(&prog, x86_64, SYS_unshare, NULL) == (SECCOMP_RET_ERRNO | EPERM),
         "unshare fails with EPERM");
  tap_ok(bpf_run(&prog, x86_64, SYS_setns, NULL) == (SECCOMP_RET_ERRNO | EPERM),
         "setns fails with EPERM");
  tap_ok(bpf_run(&prog, x86_64, SYS_clone3, NULL) == (SECCOMP_RET_ERRNO | ENOSYS),
         "clone3 fails with ENOSYS");
  tap_ok((bpf_run(&prog, AUDIT_ARCH_I386, SYS_getpid, NULL) & SECCOMP_RET_ACTION_FULL) ==
             SECCOMP_RET_KILL_PROCESS,
         "a foreign ABI kills the process");
  uint64_t ns_clone[6] = {CLONE_NEWUSER};
  tap_ok(bpf_run(&prog, x86_64, SYS_clone, ns_clone) == (SECCOMP_RET_ERRNO | EPERM),
         "clone with a namespace flag fails");
  /* Every syscall between the pre-installed filter and the exec. */
  size_t n = 0, denied = 0;
  for (const int *nr = agsx_proc_after_filter; *nr >= 0; nr++, n++) {
    if (bpf_run(&prog, x86_64, *nr, NULL) != SECCOMP_RET_ALLOW) {
      printf("# syscall %d is not allowed by the default filter\n", *nr);
      denied++;
    }
  }
  tap_ok(n >= 30 && denied == 0,
         "the default filter allows all %zu syscalls of a claim after its pre-installation", n);
  /* With the arguments the claim's path passes where a rule looks at them. */
  uint64_t ioctl_args[6] = {0, 0x540E /* TIOCSCTTY */};
  tap_ok(bpf_run(&prog, x86_64, SYS_ioctl, ioctl_args) == SECCOMP_RET_ALLOW,
         "ioctl TIOCSCTTY is allowed");
  agsx_seccomp_bpf_clear(&prog);
}

int main(void) {
  round_trip();
  hostile();
  check();
  default_filter_allows_the_claim();
  return tap_done();
}
