/* agsx — oci/state: containers under the runtime's --root.
 *
 *   ROOT/                 0700, default /run/agsx-oci
 *     <id>/               0700, made by create (EEXIST: the id is taken)
 *       lock              flock: create, start, kill, delete, update serialise
 *       state.json        agsx's record (temp + rename, no fsync: see below)
 *       config.json       the config as create read it (exec, delete use it)
 *       start.sock        exists while the container is `created`: the init
 *                         waits on it for `start`
 *       mnt/              where the init stages the root (its own mount ns)
 *
 * A directory without state.json is a create that did not finish (killed):
 * `state` calls it missing, `delete` (and `delete --force`) removes it with
 * whatever it recorded. The status is derived, never stored: the init gone,
 * a zombie, or its pid reused (start time differs) → stopped; start.sock
 * present → created; frozen → paused; else running. */
#ifndef AGSX_OCI_STATE_H
#define AGSX_OCI_STATE_H

#include "util/util.h"

#include <stdint.h>

#define AGSX_OCI_DEFAULT_ROOT "/run/agsx-oci"
#define AGSX_OCI_ID_MAX 1024

enum agsx_oci_status {
  AGSX_OCI_CREATING,
  AGSX_OCI_CREATED,
  AGSX_OCI_RUNNING,
  AGSX_OCI_PAUSED,
  AGSX_OCI_STOPPED
};
const char *agsx_oci_status_name(enum agsx_oci_status s);

struct agsx_oci_record {
  char *id, *bundle, *rootfs, *created, *owner;
  char *annotations; /* JSON object text or NULL */
  pid_t pid;
  uint64_t start_time;
  char *cgroup; /* the cgroupsPath agsx used */
  bool cgroup_owned;
  /* --systemd-cgroup where systemd manages the cgroups: the container's
   * transient scope ("prefix-name.scope") and its slice; delete stops it. */
  char *unit, *slice;
  int slot;      /* agsx uid range slot, -1: the engine's mappings */
  bool complete; /* create finished: pid and everything recorded */
  char *workdir; /* the overlay work directory agsx made beside the engine's */
  int64_t poststop_done;
};

void agsx_oci_record_clear(struct agsx_oci_record *r);

/* ids: runc's rule, ^[\w+.-]+$, at most 1024 bytes, not "." or "..". */
bool agsx_oci_id_is_valid(const char *id);
/* The root directory (created 0700 with CREATE); the runtime's default
 * when PATH is NULL: /run/agsx-oci for root, $XDG_RUNTIME_DIR/agsx-oci
 * otherwise (an empty XDG_RUNTIME_DIR counts as unset). */
char *agsx_oci_default_root(void);
int agsx_oci_root_open(const char *path, bool create, agsx_error_t *err);
/* The container's directory; ENOENT → "container does not exist". */
int agsx_oci_dir_open(int rootfd, const char *id, agsx_error_t *err);
int agsx_oci_record_write(int dirfd, const struct agsx_oci_record *r, agsx_error_t *err);
/* NAME in DIRFD replaced atomically (temp + rename), without fsync: the
 * state root, pid files and the copy of config.json are runtime state
 * (/run), meaningless after a reboot, and a killed agsx-oci loses nothing
 * that reached the page cache. runc and crun do not fsync them either; 14
 * fsyncs were 50 ms of every create on an ext4 /run. */
int agsx_oci_write_file(int dirfd, const char *name, const void *data, size_t len, mode_t mode,
                        agsx_error_t *err);
int agsx_oci_record_read(int dirfd, struct agsx_oci_record *r, agsx_error_t *err);
/* The derived status (see above). */
enum agsx_oci_status agsx_oci_record_status(int dirfd, const struct agsx_oci_record *r);
/* runc's state JSON (pretty, no trailing newline). */
char *agsx_oci_state_json(const struct agsx_oci_record *r, enum agsx_oci_status st);

#endif
