/* agsx — host/cgroup: per-sandbox control groups, on cgroup v1 and v2,
 * made by agsx itself (the "cgroupfs" manager) or delegated by systemd
 * (the "systemd" manager).
 *
 * cgroupfs: a sandbox's cgroup is "<parent>/<name>" in each hierarchy its
 * limits need, where <parent> is "agsx" (AGSX_CGROUP_PARENT overrides it,
 * for tests) and <name> is the sandbox id. The mode is detected from the
 * cgroup root, /sys/fs/cgroup (AGSX_CGROUP_ROOT overrides it): cgroup2
 * there means v2, anything else means v1 with one mount per controller,
 * found in /proc/self/mountinfo (only mounts under AGSX_CGROUP_ROOT when
 * it is set).
 *
 * systemd: where systemd is PID 1 and the root is the unified cgroup2
 * hierarchy, each sandbox gets a transient scope of its own,
 * agsx.slice/agsx-<id>.scope, Delegate=yes (host/systemd.h), laid out as
 *   agsx-<id>.scope/sandbox     the sandbox: its init, every process, exec's
 *                               sub-cgroups; the limits, written by agsx
 *   agsx-<id>.scope/supervisor  a detached sandbox's supervisor
 * (v2 allows controllers for children only of a cgroup without processes,
 * so nothing stays in the scope itself). The scope's first process is the
 * detached supervisor (agsx_cgroup_scope_self), or for a foreground sandbox
 * its init (agsx_cgroup_place: the caller stays in its own unit, so the
 * sandbox still dies with it). A sandbox thus outlives the unit that
 * started it, and systemd stops the scope once it is empty. A systemd
 * cgroup is a v2 cgroup for every other call: freeze, kill, stats, exec
 * cgroups, destroy (which removes sandbox/, not the scope). On v1 or
 * hybrid systemd hosts agsx keeps cgroupfs (agsx info says why).
 *
 * Which one: agsx.conf `cgroup-manager = auto|systemd|cgroupfs`, or
 * AGSX_CGROUP_MANAGER; auto is systemd where both hold, else cgroupfs
 * (also whenever AGSX_CGROUP_ROOT names another root).
 *
 * The layout and manager are detected once per process, root and setting
 * (paths only, no fds) and cached until agsx_cgroup_reset(). */
#ifndef AGSX_CGROUP_H
#define AGSX_CGROUP_H

#include "util/util.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define AGSX_CGROUP_DEFAULT_ROOT "/sys/fs/cgroup"
#define AGSX_CGROUP_DEFAULT_PARENT "agsx"
#define AGSX_CGROUP_CPU_PERIOD_US 100000 /* --cpus N → quota = N * period */
#define AGSX_CGROUP_SLICE "agsx.slice"   /* systemd: where the sandboxes' scopes go */

/* NONE: an ordinary user's agsx with no cgroup of its own to manage
 * (host/rootless.h): sandboxes get no cgroup, limits are refused, and the
 * pid namespace alone bounds and ends a sandbox's processes. */
enum agsx_cgroup_manager { AGSX_CGROUP_CGROUPFS, AGSX_CGROUP_SYSTEMD, AGSX_CGROUP_NONE };

/* The manager for SETTING (NULL or "auto", "systemd", "cgroupfs") on a host
 * where systemd is PID 1 (SYSTEMD) or not, whose root is the unified cgroup2
 * hierarchy (UNIFIED) or not, and whose root was given (CUSTOM_ROOT:
 * AGSX_CGROUP_ROOT). *RET_WHY says why, for agsx info. An explicit
 * "systemd" the host cannot honour, and an unknown setting, fail (EINVAL,
 * ENOTSUP) naming what is missing. */
int agsx_cgroup_manager_choose(const char *setting, bool systemd, bool unified, bool custom_root,
                               enum agsx_cgroup_manager *ret, const char **ret_why,
                               agsx_error_t *err);
/* True when this process's sandboxes get no cgroup (AGSX_CGROUP_NONE): no
 * default limit applies, and an asked-for limit fails. */
bool agsx_cgroup_limits_off(void);
/* The manager this process uses (detected once, see above). */
int agsx_cgroup_manager(enum agsx_cgroup_manager *ret, agsx_error_t *err);

struct agsx_cgroup_limits {
  uint64_t memory;        /* bytes; 0 = none */
  uint64_t cpu_quota_us;  /* 0 = none */
  uint64_t cpu_period_us; /* 0 = AGSX_CGROUP_CPU_PERIOD_US */
  uint64_t pids;          /* 0 = none */
  /* Create the cgroup even without a limit (v1: in the pids hierarchy, or
   * the first of memory and cpu that is mounted), only so that a process
   * tree can be found and killed as one (exec --timeout). */
  bool track;
};

struct agsx_cgroup;

/* Creates "<parent>/<name>" in only the hierarchies the limits need (v1:
 * memory, cpu and pids each only when its limit is set; v2: one directory,
 * the needed controllers enabled in <parent>/cgroup.subtree_control) and
 * writes the limits. v1 memory sets memory.memsw.limit_in_bytes too when the
 * kernel has it; v2 memory sets memory.swap.max=0: no swap escape. A limit
 * that cannot be applied fails the call, naming the limit; whatever was
 * created is removed again. An existing cgroup fails with EEXIST and is left
 * alone. NAME must match [0-9a-f]{8,64}. For `agsx stats`, v1 also gets
 * cpuacct and memory directories without a limit, and v2 the memory
 * controller where the host has it; these are best effort (skipped when
 * they cannot be made). On v1 with no limit, no track and none of those
 * controllers nothing is created (attach and destroy are then no-ops; the
 * pid namespace still bounds the sandbox's processes). */
int agsx_cgroup_create(const char *name, const struct agsx_cgroup_limits *lim,
                       struct agsx_cgroup **ret, agsx_error_t *err);
/* systemd: the scope of sandbox NAME for a detached supervisor, the caller:
 * starts agsx.slice/agsx-NAME.scope with the caller as its first process
 * (DESCRIPTION: "agsx sandbox <name> (<image>)") and moves the caller into
 * its supervisor/; agsx_cgroup_create then makes sandbox/ beside it. The
 * caller must be single-threaded. Nothing to do under cgroupfs. */
int agsx_cgroup_scope_self(const char *name, const char *description, agsx_error_t *err);
/* systemd, a foreground sandbox: agsx_cgroup_create found no scope (the
 * caller is not in one), so CG is pending: no directory yet, fd -1 (clone
 * the init without CLONE_INTO_CGROUP). This starts the scope with PID (the
 * init, stopped before its GO) as first process, makes sandbox/, moves PID
 * there and applies the limits. A no-op for any other cgroup. On failure
 * the scope is stopped again; PID is the caller's to kill. */
int agsx_cgroup_place(struct agsx_cgroup *cg, pid_t pid, const char *description,
                      agsx_error_t *err);
/* True when CG waits for agsx_cgroup_place (NULL: false). */
bool agsx_cgroup_is_pending(const struct agsx_cgroup *cg);
/* True when CG's scope was started with the sandbox's init
 * (agsx_cgroup_place): systemd removes it, files and all, as soon as the
 * sandbox's last process is gone, so what is to be read of it at the end
 * (OOM) is read before the init is reaped. */
bool agsx_cgroup_goes_with_sandbox(const struct agsx_cgroup *cg);
/* Re-opens an existing sandbox cgroup in every hierarchy that has it (for
 * exec, ls, kill and gc). ENOENT when no hierarchy has it. */
int agsx_cgroup_open(const char *name, struct agsx_cgroup **ret, agsx_error_t *err);
/* Creates a child cgroup NAME of CG in each of its hierarchies (limits are
 * inherited: they apply to the whole subtree). For `exec`: its process tree
 * can be killed as one. Destroying the child leaves CG alone. */
int agsx_cgroup_create_sub(struct agsx_cgroup *cg, const char *name, struct agsx_cgroup **ret,
                           agsx_error_t *err);
/* An ordinary user's systemd cgroup (host/rootless.h): a process outside
 * the user manager's tree may not move itself in (the common ancestor's
 * cgroup.procs is root's), nor be cloned into it. Then
 * agsx_cgroup_attach_by_manager asks systemd to move PID in. */
bool agsx_cgroup_attach_needs_manager(const struct agsx_cgroup *cg);
int agsx_cgroup_attach_by_manager(struct agsx_cgroup *cg, pid_t pid, agsx_error_t *err);
/* Moves PID into the cgroup, in every hierarchy it has. */
int agsx_cgroup_attach(struct agsx_cgroup *cg, pid_t pid, agsx_error_t *err);
/* v2: an O_DIRECTORY fd of the leaf for clone3(CLONE_INTO_CGROUP), owned by
 * CG. v1, and a pending systemd cgroup: -1. */
int agsx_cgroup_fd(struct agsx_cgroup *cg);
/* Seconds since the cgroup's directory was created (or last changed). */
int64_t agsx_cgroup_age(struct agsx_cgroup *cg);
/* v1: opens the `tasks` file of each hierarchy of CG for writing, into FDS
 * (at most MAX); returns how many (0 on v2). A single-threaded process that
 * writes "0" (itself) to `tasks` migrates without taking the global
 * threadgroup lock, whose RCU grace period makes a cgroup.procs write of
 * another pid cost 5–25 ms on v1: the sandbox init moves itself this way. */
int agsx_cgroup_self_attach_fds(struct agsx_cgroup *cg, int *fds, size_t max, agsx_error_t *err);
/* The files through which a forked child joins CG before it runs anything:
 * v1 the `tasks` of each hierarchy (as above), v2 the leaf's cgroup.procs.
 * Returns how many fds are in FDS. */
int agsx_cgroup_join_fds(struct agsx_cgroup *cg, int *fds, size_t max, agsx_error_t *err);
/* Moves the calling (single-threaded) process through FDS. Returns -errno. */
int agsx_cgroup_self_attach(const int *fds, size_t n);
void agsx_cgroup_close_fds(int *fds, size_t n);
/* True when the memory controller OOM-killed a process of this cgroup
 * (v2: memory.events oom_kill; v1: memory.oom_control oom_kill, under_oom on
 * kernels older than 4.13). False without a memory hierarchy. */
bool agsx_cgroup_oom_killed(struct agsx_cgroup *cg);
/* The pids controller's count of the cgroup's tasks, its child cgroups'
 * included (an exec's); 0 without a pids hierarchy or when unreadable. */
uint64_t agsx_cgroup_tasks(struct agsx_cgroup *cg);
/* Reads current usage: memory bytes and number of processes. What cannot be
 * read is reported as 0. Returns 0. */
int agsx_cgroup_stats(struct agsx_cgroup *cg, uint64_t *ret_mem, uint64_t *ret_pids);
/* What `agsx stats` shows: CPU time (v1 cpuacct.usage, v2 cpu.stat
 * usage_usec), memory in use less the inactive page cache (as Docker counts
 * it) and processes. has_* is false where the cgroup has no such file. */
struct agsx_cgroup_usage {
  uint64_t cpu_ns, memory, pids;
  bool has_cpu, has_memory;
};
int agsx_cgroup_usage(struct agsx_cgroup *cg, struct agsx_cgroup_usage *ret);
/* Pauses every process of the cgroup and of the cgroups below (its exec
 * cgroups) and returns once all are frozen (at most ~5 s, else EBUSY and
 * thawed again). v2: cgroup.freeze. v1: the freezer hierarchy's cgroup is
 * made now (not at create: sandboxes never paused pay nothing for it) and
 * the processes found in the other hierarchies are moved in, until none is
 * left out; ENOTSUP without a freezer mount, ENOENT when the sandbox has no
 * other hierarchy to find them in. */
int agsx_cgroup_freeze(struct agsx_cgroup *cg, agsx_error_t *err);
/* Thaws it (nothing to do when never frozen). */
int agsx_cgroup_thaw(struct agsx_cgroup *cg, agsx_error_t *err);
void agsx_cgroup_thaw_quiet(struct agsx_cgroup *cg);
/* True while frozen or freezing. */
bool agsx_cgroup_frozen(struct agsx_cgroup *cg);
/* Kills every process in the cgroup (v2 cgroup.kill when present; otherwise
 * SIGKILL to each pid of cgroup.procs until empty, for at most ~2 s), then
 * removes the directories (rmdir retried briefly on EBUSY). Idempotent; safe
 * on a half-created cgroup. A frozen cgroup is thawed after the first
 * SIGKILL, so that nothing is left frozen. The parent directory stays. */
int agsx_cgroup_destroy(struct agsx_cgroup *cg, agsx_error_t *err);
/* Closes the fds and frees CG; does not remove anything. NULL is fine. */
void agsx_cgroup_free(struct agsx_cgroup *cg);
void agsx_cgroup_freep(struct agsx_cgroup **cg);
#define _cleanup_cgroup_ _cleanup_(agsx_cgroup_freep)

/* Destroys every leftover "<parent>/<name>" (in any hierarchy agsx uses) for
 * which KEEP(name, data) returns false, reporting each one through
 * REPORT("cgroup `<parent>/<name>`", data) — also with DRY_RUN, which removes
 * nothing. Entries that are not sandbox ids are left alone. Keeps going after
 * a failure; returns -1 with the first error. systemd: each stale
 * agsx.slice/agsx-<name>.scope ("cgroup `agsx.slice/agsx-<name>.scope`"):
 * its sandbox/ destroyed, then the scope stopped. */
int agsx_cgroup_gc(bool (*keep)(const char *name, void *data),
                   void (*report)(const char *what, void *data), void *data, bool dry_run,
                   agsx_error_t *err);

/* What `agsx info` shows of the cgroups sandboxes get. */
struct agsx_cgroup_info {
  bool v2;
  char *root;          /* the cgroup root (v1: where the controllers are mounted) */
  char *controllers;   /* v2: the root's cgroup.controllers; v1: the mounted ones agsx uses */
  const char *manager; /* "cgroupfs" or "systemd" */
  const char *why;     /* why that manager: the setting, or what auto found */
  char *parent;        /* cgroupfs: the directory of sandboxes' cgroups; systemd: the slice */
  char *path;          /* where a sandbox goes, "<id>" standing for its id */
};
int agsx_cgroup_info(struct agsx_cgroup_info *ret, agsx_error_t *err);
void agsx_cgroup_info_clear(struct agsx_cgroup_info *i);

/* Forgets the cached layout: the next call detects it again (a long-lived
 * process after cgroup mounts changed). Thread-safe. */
void agsx_cgroup_reset(void);

/* True when NAME is a valid cgroup name for a sandbox: [0-9a-f]{8,64}. */
bool agsx_cgroup_name_is_valid(const char *name);

#endif
