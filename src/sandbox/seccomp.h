/* agsx — seccomp: the default filter (modelled on Docker's default profile),
 * OCI/Docker JSON profiles, a compiled-program cache, and installation.
 *
 * Filters are compiled with libseccomp in the parent (where allocation and
 * error reporting are cheap) into a plain classic-BPF program; the forked
 * child only installs that program, last, just before execve (STYLE.md,
 * "Process setup"). */
#ifndef AGSX_SECCOMP_H
#define AGSX_SECCOMP_H

#include "util/util.h"

#include <linux/filter.h>

/* A compiled program: LEN instructions (1..BPF_MAXINSNS), owned. */
struct agsx_seccomp_bpf {
  struct sock_filter *insns;
  size_t len;
};

void agsx_seccomp_bpf_clear(struct agsx_seccomp_bpf *b);
#define _cleanup_seccomp_bpf_ _cleanup_(agsx_seccomp_bpf_clear)

/* Upper bounds on user profiles (STYLE.md, "Bounded input"). */
#define AGSX_SECCOMP_JSON_MAX (1u << 20)
#define AGSX_SECCOMP_MAX_ENTRIES 2000
#define AGSX_SECCOMP_MAX_ARGS 6

/* The default profile: an allow-list modelled on Docker's default (anything
 * else fails with EPERM), for a sandbox holding Docker's default capability
 * set, with agsx's extra denials (see the tables in seccomp.c). Only the
 * native ABI is allowed: a syscall through another ABI (i386 `int 0x80`,
 * x32) kills the process. */
int agsx_seccomp_compile_default(struct agsx_seccomp_bpf *ret, agsx_error_t *err);

/* Compiles an OCI runtime-spec `linux.seccomp` object or a Docker seccomp
 * profile (BUF[0..LEN), at most AGSX_SECCOMP_JSON_MAX bytes). The profile
 * replaces the default one entirely: none of agsx's own denials are added.
 * Entries gated on capabilities (`includes.caps`) apply only when agsx grants
 * every capability named (Docker's default set); `excludes.caps` drops an
 * entry when agsx grants any of them; `arches` compare against the host
 * (`amd64`), `minKernel` against the running kernel. Unknown syscall names
 * are skipped (logged at debug level), as Docker does; unknown actions,
 * operators, architectures and fields out of range are errors. */
int agsx_seccomp_compile_json(const char *buf, size_t len, struct agsx_seccomp_bpf *ret,
                              agsx_error_t *err);

/* Like the compile functions, through a cache: CACHEDIR/seccomp-<hex>.bpf,
 * where <hex> is the SHA-256 of the agsx version, the libseccomp version,
 * the kernel release and the profile source (PROFILE_JSON, or the default
 * profile's tables when PROFILE_JSON is NULL). A miss compiles and writes the
 * file atomically; CACHEDIR is created (mode 0700) when missing. A cache file
 * that is not a plausible program (size not a multiple of 8, empty, over
 * BPF_MAXINSNS, not ending in a return) is ignored and rewritten. Failing to
 * create or write the cache is only a warning: the cache is an optimisation.
 * The cache directory must be writable by root only: whoever can write it
 * chooses the filter. */
int agsx_seccomp_load_cached(const char *cachedir, const char *profile_json, size_t len,
                             struct agsx_seccomp_bpf *ret, agsx_error_t *err);

/* Installs BPF as a seccomp filter of the calling thread with
 * seccomp(SECCOMP_SET_MODE_FILTER) (prctl(PR_SET_SECCOMP) on kernels without
 * the syscall). The caller must have set PR_SET_NO_NEW_PRIVS already (or hold
 * CAP_SYS_ADMIN), otherwise this fails with -EACCES. Call it last before
 * execve: from here on the filter applies to every syscall of the caller,
 * execve included. Async-signal-safe, allocates nothing: made for a forked
 * child. Returns 0 or -errno. */
int agsx_seccomp_install(const struct agsx_seccomp_bpf *bpf);

#endif
