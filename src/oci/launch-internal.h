/* agsx — oci/launch: what the four files of `create` share (not a public
 * header; the steps and their order are oci.h's). launch.c: the parent's
 * (P's) create sequence and the container's records, from config.json to
 * the hand-over; launch-ns.c: the namespaces P joins or makes and the clone
 * of the init (directly, or from inside a joined user namespace), the id
 * maps; launch-overlay.c: the engine's overlay rebuilt from idmapped
 * layers for the init; launch-init.c: the init (C), its mounts and root
 * filesystem up to the exec of the container's program. P and C talk over
 * the sync socket with sync.h's messages and these. */
#ifndef AGSX_OCI_LAUNCH_INTERNAL_H
#define AGSX_OCI_LAUNCH_INTERNAL_H

#include "net/net.h"
#include "oci/cgroup.h"
#include "oci/oci.h"
#include "sandbox/sync.h"
#include "sandbox/userns.h"

/* Messages on the sync socket beyond sync.h's GO/READY/ERROR. */
enum { MSG_MOUNTED = 100, MSG_CONT, MSG_DONE, MSG_ACK };

/* Fds of GO: the stage dir, the start socket, the rootfs, then one per bind
 * mount (in mount order), then the sysfs if a sysfs mount is asked for. */
struct child {
  const struct agsx_oci_spec *s;
  const struct agsx_oci_create_opts *o;
  int sync;
  int fds[AGSX_MSG_MAX_FDS];
  size_t nfds;
  bool new_cgroupns, new_uts;
  const struct agsx_seccomp_bpf *base, *eng;
  char *stage; /* ROOT/<id>/mnt, opened by the init in its own mount namespace */
  /* cgroup v1: the last N_CG fds of GO are the container's cgroup in each
   * hierarchy (cgroup.h's leaf binds), CG_NAMES their names. */
  size_t n_cg;
  char cg_names[1024];
  /* The engine's overlay to rebuild from idmapped layers (P does it):
   * its lower layers, and the names of upper and work in their parent. */
  size_t n_lower;
  char upper[256], work[256];
};

/* P's state from the config to the hand-over (create_free). */
struct create {
  const struct agsx_oci_global *g;
  const struct agsx_oci_create_opts *o;
  struct agsx_oci_spec *s;
  int rootfd, dirfd, lockfd;
  struct agsx_oci_record rec;
  struct agsx_idrange ids;
  struct agsx_oci_cgroup *cg;
  bool scope_started; /* --systemd-cgroup: the scope is up (create_abort stops it) */
  pid_t pid;
  int pidfd, sync;
  bool dir_made;
  const char *config;
  size_t config_len;
  char **ovl_lower;
  char *ovl_upper, *ovl_work;
  struct agsx_netns_job net; /* a new network namespace, made meanwhile */
  /* A pod's member: ipc, uts or pid joined by path, no user namespace by
   * path: the user namespace that owns them (pod_userns, until the clone)
   * is joined instead of a new one. pod_idmap: the joined user namespace
   * (a pod's, or one by path) is a container's of this root with an agsx
   * range, shared (leased by this container too), through which the
   * rootfs is idmapped as through a range of its own. pod_path names the
   * pod's in errors. */
  bool pod, pod_idmap;
  int pod_userns;
  const char *pod_path;
};

/* A bind mount of the engine's: P opens its source (idmapped) and hands
 * it over at GO, in mount order; C attaches it. */
static inline bool agsx_oci_launch_is_bind(const struct agsx_oci_mount *m) { return m->bind; }

/* launch.c */
int agsx_oci_launch_send_msg(int sock, int type, const int *fds, size_t n);
/* Waits for TYPE; an ERROR message from the other side is returned as the
 * error. */
int agsx_oci_launch_wait_msg(int sock, int type, int *fd, agsx_error_t *err);
/* CR's record written again, after a step of create changed it (what a
 * killed create leaves is what delete --force finds there). */
int agsx_oci_launch_write_record(struct create *cr, agsx_error_t *err);

/* launch-ns.c */
/* Neither the engine's mappings nor a joined user namespace (by path or a
 * pod's): agsx reserves a range, idmaps and leases. */
bool agsx_oci_launch_own_range(const struct create *cr);
/* The rootfs and bind mounts idmapped through the container's user
 * namespace: a range of its own or its pod's agsx range. */
bool agsx_oci_launch_idmapped(const struct create *cr);
/* Before anything is made: whether the container is a pod's member (see
 * struct create), the pod found among the containers under ROOTFD; an ipc,
 * uts or pid namespace of the host's user namespace, or of one no
 * container there runs in, is refused. */
int agsx_oci_launch_pod(struct create *cr, int rootfd, agsx_error_t *err);
/* The init's uid_map and gid_map: agsx's range, the engine's mappings, or
 * none (a joined user namespace has its own). */
int agsx_oci_launch_write_maps(pid_t pid, const struct create *cr, agsx_error_t *err);
/* linux.sysctl's net.ipv4.ping_group_range, if any, once the init's id
 * maps are written: its container gids as host gids (see launch-ns.c). */
int agsx_oci_launch_ping_range(const struct create *cr, agsx_error_t *err);
/* Namespaces → clone, leaving P back in its own (the id maps and limits
 * follow, in go()). */
int agsx_oci_launch_spawn(struct create *cr, struct child *c, int *ret_sysfs, agsx_error_t *err);

/* launch-overlay.c */
/* With agsx's range (its own or its pod's): whether the rootfs is the
 * engine's overlay (its layers then rebuilt idmapped), and that its upper
 * and work directories are siblings. */
int agsx_oci_launch_engine_overlay(struct create *cr, struct child *c, agsx_error_t *err);
/* The engine's overlay again, from idmapped clones of its lower layers: an
 * overlay mount cannot be idmapped (EINVAL), its ext4/xfs/btrfs layers
 * can. P mounts it, as host root (the layers keep their trusted.overlay
 * xattrs' meaning), in a mount namespace of its own on the container's
 * stage, and hands the container a detached clone: the same lower, upper
 * and work directories, so the container writes where the engine expects.
 * index=off: the engine's own mount of the same upper stays (the kernel
 * then only warns). Returns the overlay's fd. */
int agsx_oci_launch_rebuild_overlay(struct create *cr, const struct child *c, int userns,
                                    agsx_error_t *err);

/* launch-init.c */
/* The init from the clone on (C's side of oci.h's steps). Never returns:
 * it execs the container's program or exits (a setup failure is sent to P
 * over C->sync first). */
_Noreturn void agsx_oci_launch_child_main(struct child *c);

#endif
