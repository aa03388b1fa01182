/* agsx — util: errors, cleanup attributes, fd and path helpers, logging,
 * parsing of durations and sizes. Every other module builds on this one. */
#ifndef AGSX_UTIL_H
#define AGSX_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

/* ---- errors -------------------------------------------------------------
 * A function that can fail returns < 0 (or NULL) and fills *err: every
 * failure path sets it (the CLI has no message to invent). Callers add
 * context on the way up with agsx_error_wrap(); the CLI prints the final
 * message once. A question with three answers returns -1 (failed), 0 or 1,
 * the values in out parameters: no other negative sentinels.
 * Ownership on failure: out parameters (ret_*) then hold nothing to free
 * or close (they are untouched, or reset to NULL, 0 or -1); what a caller
 * passes in (fds, buffers, objects) stays the caller's, failure or not,
 * unless a comment says the function takes it (agsx_check_regular). */
typedef struct agsx_error_s {
  int errno_; /* 0 when the failure has no errno */
  char *msg;
} * agsx_error_t;

/* Sets *err (if err is not NULL and *err is still empty) and returns -1.
 * With errno_ != 0, ": strerror(errno_)" is appended. */
int agsx_error_set(agsx_error_t *err, int errno_, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefixes the message of *err with "context: ". Returns -1. */
int agsx_error_wrap(agsx_error_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Like agsx_error_set, but the message is complete as given: ERRNO_ is
 * recorded for callers (agsx_error_errno) without its text appended. */
int agsx_error_set_quiet(agsx_error_t *err, int errno_, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void agsx_error_free(agsx_error_t *err);
/* errno_ of *err, or EIO when unknown. */
int agsx_error_errno(const agsx_error_t *err);

/* ---- cleanup ------------------------------------------------------------ */
#define _cleanup_(f) __attribute__((cleanup(f)))
void agsx_freep(void *p);
void agsx_closep(int *fd);
void agsx_fclosep(FILE **f);
void agsx_closedirp(DIR **d);
void agsx_strvfreep(char ***v);
#define _cleanup_free_ _cleanup_(agsx_freep)
#define _cleanup_close_ _cleanup_(agsx_closep)
#define _cleanup_fclose_ _cleanup_(agsx_fclosep)
#define _cleanup_dir_ _cleanup_(agsx_closedirp)
#define _cleanup_strv_ _cleanup_(agsx_strvfreep)
#define _cleanup_strset_ _cleanup_(agsx_strset_clear)
#define _cleanup_error_ _cleanup_(agsx_error_free)

static inline int steal_fd(int *fd) {
  int r = *fd;
  *fd = -1;
  return r;
}
#define steal_ptr(pp)                                                                              \
  ({                                                                                               \
    __typeof__(*(pp)) _p = *(pp);                                                                  \
    *(pp) = NULL;                                                                                  \
    _p;                                                                                            \
  })

/* ---- memory and strings (abort on OOM: there is no sane recovery) -------- */
void *xmalloc(size_t n);
void *xzalloc(size_t n);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *xvasprintf(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

/* String vectors: NULL-terminated arrays of owned strings; NULL is empty. */
void agsx_strv_free(char **v);
size_t agsx_strv_len(char *const *v);
/* Appends a copy of S to *V (which may be NULL). */
void agsx_strv_push(char ***v, const char *s);
bool agsx_strv_contains(char *const *v, const char *s);
/* A new vector: copies of A's strings, then B's (either may be NULL).
 * Never NULL itself (an empty vector is one NULL): a copy of V is
 * agsx_strv_concat(V, NULL). */
char **agsx_strv_concat(char *const *a, char *const *b);

/* A set of strings that keeps the order they came in: V[0..N) are the
 * members, NULL-terminated (a string vector the set owns; NULL when empty).
 * Lookups hash, so a set of a hundred thousand paths stays fast. Zeroed is
 * empty; agsx_strset_clear frees it and leaves it empty. */
struct agsx_strset {
  char **v;
  size_t n;
  size_t *slots; /* open addressing: 1 + the member's index in V; 0 free */
  size_t cap;    /* number of slots, a power of two */
};
/* Adds a copy of S; false when it was a member already. */
bool agsx_strset_add(struct agsx_strset *set, const char *s);
bool agsx_strset_has(const struct agsx_strset *set, const char *s);
void agsx_strset_clear(struct agsx_strset *set);
bool agsx_str_has_prefix(const char *s, const char *prefix);
bool agsx_str_has_suffix(const char *s, const char *suffix);
/* True when WORD is one of the items of LIST (NULL: none), items separated
 * by any run of the characters in SEPS ("a, b" with ", "). */
bool agsx_list_has(const char *list, const char *word, const char *seps);

/* ---- logging --------------------------------------------------------------
 * The library never prints to the user; it logs through a sink that the
 * front end installs. A sink gets each message that passes the level,
 * formatted, without prefix or newline, and must keep errno. The sink and
 * the level are the front end's settings, made once at start-up (before any
 * thread): a server installs its own sink instead of reading fd 2. */
enum agsx_log_level { AGSX_LOG_ERROR, AGSX_LOG_WARNING, AGSX_LOG_INFO, AGSX_LOG_DEBUG };
typedef void (*agsx_log_sink_fn)(enum agsx_log_level level, const char *msg, void *data);
/* Installs FN with its DATA; NULL restores the default, agsx_log_sink_stderr. */
void agsx_log_set_sink(agsx_log_sink_fn fn, void *data);
/* The default sink: "agsx: [error: |warning: |debug: ]MSG\n" on fd 2, in one
 * write so that concurrent agsx processes do not interleave. */
void agsx_log_sink_stderr(enum agsx_log_level level, const char *msg, void *data);
/* Messages above it are dropped before they are formatted (default: warning). */
extern enum agsx_log_level agsx_log_level;
int agsx_log_level_parse(const char *s, enum agsx_log_level *ret);
void agsx_log(enum agsx_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
#define agsx_warn(...) agsx_log(AGSX_LOG_WARNING, __VA_ARGS__)
#define agsx_info(...) agsx_log(AGSX_LOG_INFO, __VA_ARGS__)
#define agsx_debug(...) agsx_log(AGSX_LOG_DEBUG, __VA_ARGS__)

/* ---- fds and paths ------------------------------------------------------- */
/* openat2(2) with RESOLVE_* flags; no fallback (see STYLE.md). */
int agsx_openat2(int dirfd, const char *path, int flags, mode_t mode, uint64_t resolve);
/* Opens PATH inside the tree at ROOTFD: RESOLVE_IN_ROOT|NO_MAGICLINKS|NO_XDEV. */
int agsx_open_in_root(int rootfd, const char *path, int flags, mode_t mode);
/* Like agsx_open_in_root but refuses any symlink on the way. */
int agsx_open_beneath_nofollow(int dirfd, const char *path, int flags, mode_t mode);

/* Files of untrusted trees (image layers and layouts, sandboxes) are opened
 * with AGSX_O_UNTRUSTED added to O_RDONLY: a FIFO or device planted where a
 * file was expected must not block the open (O_NONBLOCK) nor become our
 * terminal (O_NOCTTY). agsx_check_regular then refuses (and closes) an fd
 * that is not a regular file; it returns FD otherwise. */
#define AGSX_O_UNTRUSTED (O_NONBLOCK | O_NOCTTY)
int agsx_check_regular(int fd, const char *what, agsx_error_t *err);

ssize_t agsx_read_all(int fd, void *buf, size_t len);    /* loops; 0 at EOF */
int agsx_write_all(int fd, const void *buf, size_t len); /* loops; -1 on error */
/* Reads a whole file at (dirfd, path) of at most MAX bytes. The buffer is
 * NUL-terminated; files larger than MAX fail with EFBIG. */
int agsx_read_file_at(int dirfd, const char *path, size_t max, char **ret_buf, size_t *ret_len,
                      agsx_error_t *err);
int agsx_read_fd(int fd, size_t max, char **ret_buf, size_t *ret_len, agsx_error_t *err);

/* Writes DATA to DIRFD/NAME atomically: temp file, fsync, rename, fsync(dir). */
int agsx_write_file_atomic(int dirfd, const char *name, const void *data, size_t len, mode_t mode,
                           agsx_error_t *err);
/* mkdir -p of a plain host path (for state and store roots given by the user). */
int agsx_mkdir_p(const char *path, mode_t mode, agsx_error_t *err);
/* agsx_mkdir_p, then the directory opened (O_DIRECTORY, O_NOFOLLOW,
 * O_CLOEXEC): its fd. */
int agsx_mkdir_p_open(const char *path, mode_t mode, agsx_error_t *err);
/* Removes NAME under DIRFD and everything below it without following symlinks. */
int agsx_rm_rf_at(int dirfd, const char *name, agsx_error_t *err);
/* The same for a tree that is not all ours to remove (a sandbox's, by the
 * API on its root's behalf): every entry below NAME, at every level, first
 * passes MAY(DATA, the fd of its directory, its name), which fails (< 0,
 * ERR set) to refuse it; the first refusal stops the removal, leaving what
 * was not removed yet. NAME itself is the caller's to check. */
struct agsx_rm_gate {
  int (*may)(void *data, int dirfd, const char *name, agsx_error_t *err);
  void *data;
};
int agsx_rm_rf_gated_at(int dirfd, const char *name, const struct agsx_rm_gate *gate,
                        agsx_error_t *err);
/* Empties the directory NAME under DIRFD (everything below it, as
 * agsx_rm_rf_at), leaving the directory itself; a missing NAME is empty. */
int agsx_rm_children_at(int dirfd, const char *name, agsx_error_t *err);
/* Creates a fresh directory NAME-XXXXXX under DIRFD; returns its fd. */
int agsx_mkdtemp_at(int dirfd, const char *prefix, mode_t mode, char **ret_name, agsx_error_t *err);
/* Names the file open as FD (an O_TMPFILE, or a hard link's target)
 * DIRFD/NAME: linkat(2) with AT_EMPTY_PATH, which before Linux 6.10 needs
 * CAP_DAC_READ_SEARCH in the initial user namespace (an ordinary user's
 * agsx lacks it: ENOENT), then through /proc/self/fd/FD, which does not.
 * -1 with errno. */
int agsx_link_fd(int fd, int dirfd, const char *name);
/* An fd made by MAKE(DATA) (an fd, or -1 with errno) in a child process
 * that first joins namespace NSFD of type NSTYPE (CLONE_NEWNET…): for an
 * ordinary user's agsx (host/rootless.h), which may enter a sandbox's
 * namespaces but never return to the host's. The child runs only MAKE and
 * async-signal-safe calls (the caller may have threads). -1 with errno. */
int agsx_fd_from_ns(int nsfd, int nstype, int (*make)(void *data), void *data);
/* Takes an flock on DIRFD/NAME (created 0600) and returns the lock fd. */
int agsx_lock_at(int dirfd, const char *name, bool exclusive, agsx_error_t *err);
/* A directory stream over a CLOEXEC duplicate of DIRFD, rewound to the first
 * entry. DIRFD stays open and the caller's (closedir closes the duplicate
 * only), for the *at() calls on the entries. The two share one offset: do
 * not read DIRFD's entries otherwise meanwhile. NULL with errno on failure,
 * with nothing left open. */
DIR *agsx_dir_stream(int dirfd);
/* Marks every fd >= FROM close-on-exec (close_range(CLOEXEC) or /proc walk). */
int agsx_cloexec_from(int from);
/* Closes every fd from 3 up except the N fds of KEEP (negative entries are
 * ignored; at most 16). For a process about to resolve sandbox paths: a host directory
 * fd it still holds is reachable from inside through /proc/self/fd
 * (CVE-2024-21626). close_range(2); where it is missing, each fd up to the
 * RLIMIT_NOFILE limit (no /proc walk: /proc may be the sandbox's). */
void agsx_close_all_except(const int *keep, size_t n);
/* Points stdin, stdout and stderr at /dev/null (a daemon's, before it
 * closes the rest); left as they are when /dev/null cannot be opened. */
void agsx_stdio_null(void);
/* Every signal's action back to its default (SIG_DFL; SIGKILL and SIGSTOP
 * have no other), for a process that leaves its caller's handlers and
 * ignored signals behind: a server that ignores SIGCHLD would otherwise
 * have the kernel reap a child before its status is read. The mask is the
 * caller's to set. */
void agsx_signal_defaults(void);

/* A relative path is "clean" when it has no empty, "." or ".." component,
 * is not absolute, and stays within the given limits. */
bool agsx_path_is_clean(const char *path, size_t max_len, size_t max_depth);

/* One line of /proc/PID/mountinfo ("36 25 0:32 / /sys/fs/cgroup/memory rw
 * - cgroup cgroup rw,memory"), split in place into at most MAX fields
 * (TOK); returns how many, with *RET_SEP the index of the "-" that ends
 * the optional fields, or -1 when the line has none (then it is no mount
 * line to use: the caller skips it). The mount point is TOK[4], the type
 * TOK[*RET_SEP + 1], the source + 2, the super options + 3. */
int agsx_mountinfo_split(char *line, char **tok, int max, int *ret_sep);
/* Undoes mountinfo's \ooo escapes (space, tab, newline, backslash) of S
 * in place; returns S. */
char *agsx_mountinfo_unescape(char *s);

/* ---- parsing ------------------------------------------------------------- */
#define AGSX_DURATION_MAX_SEC (24 * 3600)
/* "300", "300s", "5m", "1h", "1h30m", "2h5m10s", "1500ms"? no: whole seconds.
 * Refuses zero, negatives, unknown units, overflow and values over 24h. */
int agsx_parse_duration(const char *s, uint64_t *ret_sec, agsx_error_t *err);
/* Formats seconds as "1h30m", "5m", "42s". */
char *agsx_format_duration(uint64_t sec);
/* "512", "512k", "64m", "1g", "1.5g", "10MiB", "2GB" (binary multiples,
 * Docker style). Refuses zero, negatives, unknown suffixes and overflow. */
int agsx_parse_size(const char *s, uint64_t *ret_bytes, agsx_error_t *err);
/* Formats bytes for humans: "12.3MB" (decimal, like `docker images`). */
char *agsx_format_size(uint64_t bytes);

/* Current time, wall clock, in nanoseconds since the epoch. */
int64_t agsx_now_ns(void);
/* Monotonic clock in nanoseconds. */
int64_t agsx_mono_ns(void);
/* N random bytes from the kernel's CSPRNG as 2N lowercase hex digits and a
 * NUL in OUT (ids, tokens, nonces). getrandom() of at most 256 bytes, once
 * the pool is initialised, cannot fail: it aborts if it ever does. */
void agsx_random_hex(char *out, size_t n);
/* RFC 3339 UTC time ("2026-11-30T11:51:45Z") from seconds since the epoch. */
char *agsx_format_rfc3339(int64_t sec);
/* Parses RFC 3339 (with optional fraction and offset) to seconds. */
int agsx_parse_rfc3339(const char *s, int64_t *ret_sec);

/* Docker's exit code for a wait(2) status: the process's own code, or
 * 128 + N after a death by signal N (N in *RET_SIGNAL, else 0 there; may be
 * NULL). -1 when the status is no end (stopped or continued). */
int agsx_wait_status_exit_code(int status, int *ret_signal);

/* The caller's terminal size (stdin's) to the pty MASTER (SIGWINCH);
 * nothing when either is no terminal or MASTER is -1. */
void agsx_term_winsize(int master);

/* The process title: the sandbox init overwrites agsx's command line (which
 * names host paths) with its own title, as seen in the sandbox's /proc.
 * _init points ARGV's strings at heap copies, so the original area may be
 * overwritten at any time. */
void agsx_proc_title_init(int argc, char **argv);
void agsx_proc_title_set(const char *title);

#define AGSX_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif
