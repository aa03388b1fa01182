/* agsx — sandbox: the launch sequence of one sandbox and its lifetime.
 *
 * Processes: the caller (P, `agsx run`, later the supervisor) creates the
 * sandbox init (C) with clone3 in new user, mount, pid, ipc and uts
 * namespaces and in a network namespace P made beforehand (so that it is
 * owned by the host user namespace: sandbox root cannot reconfigure it).
 * C is pid 1 of the sandbox: it builds the root filesystem, forks the
 * command (X), which drops to the sandbox's restrictions and execs, and then
 * reaps zombies and forwards signals until X ends. When C exits the kernel
 * kills everything left in the pid namespace.
 *
 * Launch steps, parent side (sandbox.c) and child side (rootfs.c, init.c):
 *   P: reserve uid range → cgroup → seccomp program (cached) → netns (lo up,
 *      unprivileged ports) → clone3 → back to host netns → id maps → attach
 *      cgroup (v1) → idmapped layer mounts and binds → GO
 *   C: wait GO → become root of the userns → cgroup ns → rootfs (tmpfs,
 *      overlay over idmapped layers, /etc files, /proc with masks, /dev,
 *      /sys ro, binds) → pivot_root → hostname → resolve user → fork X
 *   X: session/tty → cwd → groups, gid, uid (caps kept) → capabilities
 *      (bounding, then sets) → no_new_privs → fd sweep → seccomp → exec
 *   C: report READY (or the exec error) → init loop → report EXIT */
#ifndef AGSX_SANDBOX_H
#define AGSX_SANDBOX_H

#include "host/cgroup.h"
#include "net/net.h"
#include "sandbox/seccomp.h"
#include "sandbox/userns.h"
#include "util/util.h"

#include <sys/ioctl.h>

#define AGSX_ID_HEX 32 /* 128 random bits */
#define AGSX_DEFAULT_DISK (1ull << 30)
#define AGSX_DEFAULT_PIDS 4096 /* agsx.conf `default-pids` / AGSX_DEFAULT_PIDS change it */
#define AGSX_MAX_BINDS 64

struct agsx_bind {
  char *src; /* host path; with volume, a volume's name (sandbox/volume.h) */
  char *dst; /* path inside the sandbox */
  bool ro;
  bool volume; /* src names a volume: the lifecycle resolves it (agsx_volume_attach) */
  bool idmap;  /* mounted idmapped with the sandbox's user namespace (a volume's data) */
};

struct agsx_sandbox_config {
  char id[AGSX_ID_HEX + 1];
  const char *name; /* claimed under STATE/names, or NULL */
  const char *hostname;
  /* root filesystem: the layers (lowest first), or the built-in host image */
  bool host_image;
  char **layers;
  size_t n_layers;
  bool read_only;
  uint64_t disk; /* size of the writable layer (a tmpfs) */
  struct agsx_bind *binds;
  size_t n_binds;
  /* the command */
  char **argv;
  char **env; /* the image's and -e's, in order; later ones win */
  const char *cwd;
  const char *user; /* USER[:GROUP], resolved in the sandbox's /etc */
  bool tty;
  bool has_winsize;
  struct winsize winsize; /* with tty: the terminal's size at start */
  int stdio[3];           /* the command's stdin/out/err when !tty */
  /* limits and security */
  struct agsx_cgroup_limits limits;
  /* The systemd scope's Description (host/cgroup.h): "agsx sandbox <name or
   * short id> (<image>)"; NULL: one from the id. */
  const char *description;
  const struct agsx_seccomp_bpf *seccomp;
  bool seccomp_default; /* SECCOMP is agsx's default filter: a parked command
                           installs it before its claim (init.c) */
  bool new_privs;       /* no no_new_privs for the command (procexec.h) */
  /* host side */
  const char *state_dir;
  uint32_t address; /* on public and vpc networks: eth0's, for /etc/hosts; 0: none */
  int netns, sysfs; /* prepared ahead (agsx_net_prepare), or -1: made here */
  struct agsx_netns_job *netns_job; /* or still being prepared: collected
                                       right before the clone */
  bool timing;                      /* record per-phase times */
  /* Called with the sandbox's network namespace before its command starts
   * (the DNS relay binds in it then); a failure refuses the start. */
  int (*on_netns)(void *data, int netns, agsx_error_t *err);
  void *on_netns_data;
  /* agsx build: the init hands the overlay's upper directory (on the
   * sandbox's tmpfs) over with its EXIT message, as sb->upperfd, so the
   * caller can turn what the command changed into a layer. */
  bool keep_upper;
  /* No command (argv unused): the init only reaps until it is told to stop
   * (SIGTERM, SIGINT, SIGHUP, SIGQUIT: every process gets it, and the init
   * ends, "killed by" it, once none is left) or killed. */
  bool idle;
  /* agsx rollback's restart: STATE/<id> and the name are the sandbox's
   * already (sandbox/snapshot.h). */
  bool restart;
  /* A pool's parked sandbox (sandbox/pool.h): the init does every step,
   * forks the command's process, which waits, reports READY, and waits
   * for a claim (agsx_sandbox_claim), which brings argv, env, cwd, user,
   * hostname and stdio (argv unused until then) and which it passes on. */
  bool park;
};

enum agsx_stop_reason {
  AGSX_STOP_NONE,
  AGSX_STOP_EXIT,
  AGSX_STOP_TIMEOUT,
  AGSX_STOP_KILLED,
  AGSX_STOP_OOM,
  AGSX_STOP_ERROR,
};
const char *agsx_stop_reason_name(enum agsx_stop_reason r);

#define AGSX_MAX_PHASES 16
struct agsx_timing {
  const char *name[AGSX_MAX_PHASES];
  int64_t ns[AGSX_MAX_PHASES];
  size_t n;
};

struct agsx_sandbox {
  char id[AGSX_ID_HEX + 1];
  char *name;
  pid_t init_pid;
  int pidfd;      /* of the init */
  int sync;       /* socket to the init */
  int pty_master; /* -t: the terminal's master side, else -1 */
  int sysfs;      /* a detached sysfs of the sandbox's network namespace */
  int netns;      /* the sandbox's network namespace (published ports) */
  /* The sandbox's mount namespace, held from GO until destroy has
   * answered (on_dead): the init's exit then does not tear its mounts
   * down (the tmpfs, the overlay, /proc, /dev: their superblocks) on the
   * way to the answer. Never resolved through: only held, then closed. */
  int mntns;
  int statefd; /* STATE */
  int dirfd;   /* STATE/<id> */
  struct agsx_cgroup *cg;
  struct agsx_idrange ids;
  /* The lower layers as mounted: cfg's, or an ordinary user's range's
   * copies of them (sandbox/ranges.h). */
  char **layers;
  struct agsx_timing timing;
  int64_t child_ns[6];
  int64_t release_ns; /* destroy: the mount namespace's release (--timing) */
  /* filled by agsx_sandbox_wait */
  int exit_code;
  int term_signal; /* the command died of this signal, 0 if not */
  bool exited;     /* the init reported the command's end */
  /* The OOM killer struck, as read when the init reported the end: a
   * foreground sandbox's systemd scope (host/cgroup.h) goes away with its
   * last process, so its init waits for that read (exit_ack). */
  bool oom_seen;
  enum agsx_stop_reason reason;
  int upperfd; /* with cfg->keep_upper: the upper directory, after EXIT */
  /* The sandbox's tmpfs (upper, work; not for the host image), held for
   * its whole life: agsx commit, snapshot and fork take it from the
   * supervisor with pidfd_getfd (the record's tmpfs_fd). */
  int tmpfsfd;
  bool keep_snapshots; /* destroy for a restart: its snapshots stay */
  /* Called by agsx_sandbox_destroy once every process of the sandbox is
   * gone and how it ended is final (exit_code, term_signal, reason), before
   * its cgroups are removed (a claimed pool sandbox's early answer). */
  void (*on_dead)(void *data);
  void *on_dead_data;
};

/* The pids limit of a sandbox whose caller gave none: AGSX_DEFAULT_PIDS, or
 * agsx.conf `default-pids` (env AGSX_DEFAULT_PIDS): a count, or `none`/0. */
int agsx_sandbox_default_pids(uint64_t *ret, agsx_error_t *err);
/* The kernel's features (host/kernel.h), probed once per process, cached
 * for the boot in STATE/cache beside the seccomp programs: what a kernel
 * lacks that agsx needs fails here, naming it. agsx_sandbox_start calls it
 * first; a front end may call it earlier, to fail before anything is made. */
int agsx_sandbox_kernel_check(const char *state_dir, agsx_error_t *err);
/* Starts the sandbox; returns once the command has been exec'd (or its
 * exec failed: then ret_exec_error holds 126/127 and *err says why). */
int agsx_sandbox_start(const struct agsx_sandbox_config *cfg, struct agsx_sandbox **ret,
                       agsx_error_t *err);

/* A parked sandbox (cfg->park) is given its command: CLAIM (agsx_claim_encode's
 * bytes) and, when FDS is not NULL, the command's stdin, stdout and stderr go
 * to the init, which starts it; returns once it was exec'd, or -1 with the
 * exec error's 126/127 (or 125) in sb->exit_code, as agsx_sandbox_start. */
int agsx_sandbox_claim(struct agsx_sandbox *sb, const char *claim, size_t len, const int fds[3],
                       agsx_error_t *err);

/* Reads one message from the init after READY: returns 1 when the command
 * has ended (exit_code/term_signal set), 0 when nothing final came, -1 on
 * error. Called when sb->sync or sb->pidfd is readable. */
int agsx_sandbox_handle_event(struct agsx_sandbox *sb, agsx_error_t *err);

/* Sends SIG to the command (SIGTERM and SIGKILL go to every process). */
int agsx_sandbox_signal(struct agsx_sandbox *sb, int sig);
/* Kills the whole sandbox now. */
void agsx_sandbox_kill(struct agsx_sandbox *sb);
/* Reaps the init, decides the stop reason, removes cgroup, ids and state
 * directory. Safe to call on a half-started sandbox. */
int agsx_sandbox_destroy(struct agsx_sandbox *sb, agsx_error_t *err);
/* Removes STATE/<id> and the name (destroy keeps them for the record). */
int agsx_sandbox_remove_record(struct agsx_sandbox *sb, agsx_error_t *err);
void agsx_sandbox_free(struct agsx_sandbox *sb);

void agsx_sandbox_new_id(char out[AGSX_ID_HEX + 1]);

/* Internal: the child side (rootfs.c, init.c). */
struct agsx_child_ctx;
int agsx_child_rootfs(struct agsx_child_ctx *c, agsx_error_t *err);
_Noreturn void agsx_child_main(struct agsx_child_ctx *c);

#endif
