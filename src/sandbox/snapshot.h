/* agsx — snapshot: a running sandbox's filesystem as layers: commit,
 * snapshots and rollback, fork.
 *
 * A sandbox's root is an overlay: the image's layers (shared, read-only),
 * then the layers of STATE/layers/<lid> its record lists (a fork's, a
 * rollback's), then its writable upper directory on its own tmpfs. The
 * supervisor holds that tmpfs for the sandbox's life (the init hands it
 * over at READY); a client takes it with pidfd_getfd (the record's
 * tmpfs_fd), so nothing is ever resolved through the sandbox's mounts.
 *
 * Capturing (agsx_snapshot_capture) freezes the sandbox (unless paused),
 * copies the upper directory into a new layer directory STATE/layers/<lid>
 * and thaws it: one walk, entry by entry through directory fds with
 * O_NOFOLLOW (no path is ever resolved, so symlinks in the sandbox point at
 * nothing of the host), regular files copied by their data segments (holes
 * kept: a huge sparse file costs its data), hard links kept, whiteouts and
 * opaque directories kept as overlay's, user.* xattrs kept, ids shifted
 * from the sandbox's range back to 0-65535 (other ids become 0), devices,
 * sockets and agsx's own /etc files (hosts, hostname, resolv.conf) left
 * out. The copy is made under a temporary name and renamed into place only
 * once complete and only if the sandbox stayed frozen and running
 * throughout; otherwise it is removed and the call fails (the copy checks
 * that as it goes and gives up at once when a stop thaws the sandbox). The cost is one
 * copy of what changed, on the state directory's filesystem (tmpfs on most
 * hosts, so memory): about a memcpy per MiB, not charged to --disk.
 *
 *   commit    capture, thaw, then the layers (record's and captured) become
 *             gzip layers on the sandbox's image, through the layer writer
 *             of `agsx build` (image/build/build.h agsx_build_commit)
 *   snapshot  capture; STATE/<id>/snapshots/<name>.json lists the layers
 *   rollback  the supervisor restarts the sandbox on the snapshot's layers
 *             with an empty upper (same id, name, address, ports, deadline)
 *   fork      capture once, then COUNT new sandboxes on the record's
 *             layers plus the captured one
 *
 * Snapshots die with their sandbox (agsx_snapshot_drop_all at its end); a
 * layer directory no running sandbox's record or snapshot names is removed
 * by agsx_snapshot_layers_gc. */
#ifndef AGSX_SANDBOX_SNAPSHOT_H
#define AGSX_SANDBOX_SNAPSHOT_H

#include "state/state.h"
#include "util/util.h"

#define AGSX_SNAPSHOTS_MAX 64 /* per sandbox */
/* A layer tar holds files whole: commit refuses more holes than this (a
 * sandbox's `truncate -s 1T` would be a terabyte of zeros to compress). */
#define AGSX_COMMIT_HOLES_MAX (1ull << 30)

/* A layer id: 32 hex digits. */
bool agsx_snapshot_layer_id_is_valid(const char *s);
/* A snapshot name: a sandbox name's rules. */
bool agsx_snapshot_name_is_valid(const char *s);

/* The sandbox's tmpfs, taken from its supervisor (pidfd_getfd of the
 * record's tmpfs_fd, checked to be a tmpfs holding upper and work). */
int agsx_snapshot_open_tmpfs(const struct agsx_record *rec, agsx_error_t *err);

struct agsx_capture {
  char lid[33];           /* the new layer */
  char **layers;          /* the record's layers, then LID */
  struct agsx_record rec; /* the record as read at the start */
  int64_t frozen_ns;      /* how long the sandbox was frozen (0: it was paused) */
  uint64_t bytes, files;  /* what the copy wrote */
  uint64_t holes;         /* and the holes of sparse files it kept */
};
void agsx_capture_clear(struct agsx_capture *c);

/* Freezes sandbox ID (unless paused), copies its writable layer into a new
 * layer and thaws it (the host image's: its /tmp and /root, upper/tmp and
 * upper/root of its tmpfs). ESRCH: not running (also: ended during the
 * copy); ENOTSUP: started by an agsx that did not keep its tmpfs. */
int agsx_snapshot_capture(int statefd, const char *id, struct agsx_capture *ret, agsx_error_t *err);

struct agsx_snapshot {
  char *name;
  int64_t created;    /* seconds since the epoch */
  int64_t created_ns; /* the same, exact (for the order) */
  uint64_t bytes, files, holes;
  char **layers; /* lowest first, above the image's */
};
void agsx_snapshot_clear(struct agsx_snapshot *s);
void agsx_snapshot_list_free(struct agsx_snapshot *v, size_t n);

/* agsx snapshot SANDBOX [NAME]: NAME NULL makes one up (snap-N). EEXIST:
 * the name is taken; ENOSPC: AGSX_SNAPSHOTS_MAX. *RET: the new snapshot,
 * *RET_FROZEN_NS: the freeze's length. */
int agsx_snapshot_create(int statefd, const char *id, const char *name, struct agsx_snapshot *ret,
                         int64_t *ret_frozen_ns, agsx_error_t *err);
/* The snapshots of running sandbox ID, oldest first. */
int agsx_snapshot_list(int statefd, const char *id, struct agsx_snapshot **ret, size_t *ret_n,
                       agsx_error_t *err);
/* One snapshot; ENOENT when ID has none of that name. */
int agsx_snapshot_get(int statefd, const char *id, const char *name, struct agsx_snapshot *ret,
                      agsx_error_t *err);
int agsx_snapshot_remove(int statefd, const char *id, const char *name, agsx_error_t *err);
/* Removes every snapshot of ID (its end), then the layers nobody uses. */
void agsx_snapshot_drop_all(int statefd, const char *id);

/* Rolls sandbox ID back to snapshot NAME: every process is killed and the
 * command started again on the snapshot's filesystem (same id, name,
 * network address, ports and deadline), by its supervisor; returns once it
 * runs again. ENOENT: no such snapshot. */
int agsx_snapshot_rollback(int statefd, const char *id, const char *name, agsx_error_t *err);

/* agsx fork: COUNT new detached sandboxes from sandbox SOURCE's current
 * filesystem (one capture shared by all: the record's layers and the
 * captured one under each fork's own writable layer), with its image,
 * command (or CMD), environment, user, working directory, limits, network
 * mode and seccomp profile, each with its own id, uid range, address and
 * deadline (TIMEOUT, 0: the source's lifetime), its labels, --rm and
 * pause_on_timeout, listed by
 * the source's image name. Published ports are copied with new host ports
 * (as -p 0:PORT); volumes are not (as docker commit: host data, and a
 * read-write one shared by forks would be changed by all of them). A
 * host-image source passes on its /tmp and /root. NAME names a single fork, NAME-1... several. A
 * paused source is copied as it is and stays paused. */
#define AGSX_FORK_MAX 64
struct agsx_fork_opts {
  const char *root, *state;
  const char *source; /* an id */
  const char *name;
  unsigned count; /* 0: 1 */
  uint64_t timeout;
  char **cmd; /* NULL: the source's command line */
  /* Pulls nothing: the source's image is in the store. */
};
struct agsx_fork {
  char id[33];
  char *name;
};
/* *RET: the forks started (also on a failure after some started: *RET_N
 * says how many; ERR says why the next could not). */
int agsx_sandbox_fork(const struct agsx_fork_opts *o, struct agsx_fork **ret, size_t *ret_n,
                      int64_t *ret_frozen_ns, agsx_error_t *err);
void agsx_forks_free(struct agsx_fork *v, size_t n);

/* The bytes of holes in the sparse files of layers LIDS (for commit,
 * which writes files whole: AGSX_COMMIT_HOLES_MAX). */
uint64_t agsx_snapshot_layers_holes(int statefd, char *const *lids);

/* Copies the lower layer directory SRC into the empty directory DST for
 * a sandbox whose ids start at BASE (sandbox/ranges.h): every file, owned
 * by its id + BASE (ids past 65535 become nobody's), file capabilities
 * owned by the range's root, overlay's whiteouts and opaque marks kept.
 * RET_BYTES: the bytes copied. On failure DST holds a partial tree. */
int agsx_layer_copy_to_range(int src, int dst, uint32_t base, uint64_t *ret_bytes,
                             agsx_error_t *err);

/* Removes layer directories (and interrupted copies) that no running
 * sandbox's record or snapshot names, older than the gc grace
 * (agsx_state_gc_min_age); REPORT names each. */
void agsx_snapshot_layers_gc(int statefd, bool dry_run,
                             void (*report)(const char *what, void *data), void *data);

/* Thaws sandbox ID when a capture froze it and died (record frozen_by
 * names a process that is gone). For the reaper. */
void agsx_snapshot_thaw_orphan(int statefd, const char *id);

#endif
