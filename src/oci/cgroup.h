/* agsx — oci/cgroup: an OCI container's cgroup at the engine's
 * linux.cgroupsPath, cgroupfs driver, v1 and v2.
 *
 * Not src/sandbox/cgroup.c's job: a native sandbox's cgroup is
 * agsx/<id> in the hierarchies its limits need, while an engine names the
 * path and expects the container in every hierarchy (it reads stats, OOM
 * events and the freezer of the init's cgroup: /proc/PID/cgroup), with the
 * spec's resources (shares, cpusets, reservations, device rules).
 *
 * v1: the path is made in every mounted controller hierarchy (named ones
 * such as name=systemd included, as runc does), cpuset.cpus/mems copied
 * from the parent; v2: one directory, the controllers the resources need
 * enabled in each ancestor. Only the leaf is agsx's: delete removes it
 * (after killing what is left), never the parents. A relative path is
 * taken from the hierarchy's root. */
#ifndef AGSX_OCI_CGROUP_H
#define AGSX_OCI_CGROUP_H

#include "host/systemd.h"
#include "oci/spec.h"
#include "util/util.h"

struct agsx_oci_cgroup;

/* Creates PATH (an existing leaf is fine: an engine may have made it, and
 * it is then not removed at delete) and writes RES. */
int agsx_oci_cgroup_create(const char *path, const struct agsx_oci_resources *res,
                           const struct agsx_oci_device *devices, size_t n_devices,
                           struct agsx_oci_cgroup **ret, agsx_error_t *err);
/* Opens PATH in every hierarchy that has it; OWNED says whether delete may
 * remove it. ENOENT when none has it. */
int agsx_oci_cgroup_open(const char *path, bool owned, struct agsx_oci_cgroup **ret,
                         agsx_error_t *err);
bool agsx_oci_cgroup_owned(const struct agsx_oci_cgroup *cg);
/* Writes the resources again (update). */
int agsx_oci_cgroup_update(struct agsx_oci_cgroup *cg, const struct agsx_oci_resources *res,
                           agsx_error_t *err);
/* Moves PID into the cgroup in every hierarchy. */
int agsx_oci_cgroup_attach(struct agsx_oci_cgroup *cg, pid_t pid, agsx_error_t *err);
/* The processes in the cgroup (and below it), host pids; *RET owned. */
int agsx_oci_cgroup_pids(struct agsx_oci_cgroup *cg, pid_t **ret, size_t *ret_n, agsx_error_t *err);
/* Freezes or thaws (v1 freezer.state, v2 cgroup.freeze) and waits until
 * the kernel reports it done. */
int agsx_oci_cgroup_freeze(struct agsx_oci_cgroup *cg, bool frozen, agsx_error_t *err);
/* 1 when frozen, 0 when not, -1 on error. */
int agsx_oci_cgroup_is_frozen(struct agsx_oci_cgroup *cg, bool *ret, agsx_error_t *err);
/* Signals every process in the cgroup. */
int agsx_oci_cgroup_signal(struct agsx_oci_cgroup *cg, int sig, agsx_error_t *err);
/* cgroup v1: the leaf of each hierarchy, as a detached read-only bind
 * (fds into FDS, at most MAX), for the container's /sys/fs/cgroup: a v1
 * hierarchy cannot be mounted from a user namespace, so it shows, as
 * runc's, a tmpfs with the container's own cgroup bound in per hierarchy.
 * NAMES (SIZE bytes) gets the hierarchies' directory names ("memory",
 * "cpu,cpuacct"), space-separated. Returns how many; 0 on v2. */
int agsx_oci_cgroup_leaf_binds(struct agsx_oci_cgroup *cg, int *fds, size_t max, char *names,
                               size_t size, agsx_error_t *err);
/* Thaws, kills what is left and removes the leaf if it is agsx's. */
int agsx_oci_cgroup_destroy(struct agsx_oci_cgroup *cg, agsx_error_t *err);
void agsx_oci_cgroup_free(struct agsx_oci_cgroup *cg);
void agsx_oci_cgroup_freep(struct agsx_oci_cgroup **cg);
#define _cleanup_oci_cgroup_ _cleanup_(agsx_oci_cgroup_freep)

/* True when PATH is acceptable as a cgroupsPath (no "..", no empty or "."
 * component, at most 16 deep). */
bool agsx_oci_cgroup_path_is_valid(const char *path);

/* systemd's cgroupsPath `slice:prefix:name` (--systemd-cgroup) as the
 * cgroupfs path systemd would give it, as runc's fs fallback does:
 * the slice expanded ("a-b.slice" → "a.slice/a-b.slice"; empty:
 * system.slice; "-.slice": the root), then `prefix-name.scope` (or the
 * name itself when it is a .slice). EINVAL with a line naming the field. */
int agsx_oci_cgroup_systemd_path(const char *spec, char **ret, agsx_error_t *err);
/* v1's cpu.shares as v2's cpu.weight, as runc and crun convert
 * (2..262144 onto 1..10000; 0 stays 0: unset). */
uint64_t agsx_oci_cgroup_cpu_weight(uint64_t shares);
/* v1's blkio.weight as v2's io.weight, as runc and crun convert (10..1000
 * onto 1..10000; 0 stays 0: unset). */
uint64_t agsx_oci_cgroup_io_weight(uint64_t weight);
/* The spec's memory.swap (memory+swap, v1's memsw) as v2's memory.swap.max
 * (swap alone): SWAP - MEMORY; -1 and 0 as they are, and SWAP as it is
 * when MEMORY is unlimited (-1). EINVAL naming the field when there is no
 * memory limit to subtract or SWAP is below it. */
int agsx_oci_cgroup_swap_v2(int64_t swap, int64_t memory, int64_t *ret, agsx_error_t *err);

/* A systemd manages this host's cgroups (/run/systemd/system exists). */
bool agsx_oci_systemd_running(void);

/* ---- --systemd-cgroup where systemd runs (cgroup-systemd.c) -------------------------------
 * The container's cgroup is a transient scope, `prefix-name.scope` in the
 * slice (empty: system.slice), started with the container's init as its
 * first process, Delegate=yes, and the resources as unit properties where
 * systemd has them (as runc's systemd driver sets them); agsx then writes
 * every resource to the scope's cgroupfs files too, as with cgroupfs.
 * update sets both; delete stops the unit. */

/* systemd runs here on the unified cgroup2 hierarchy (and no
 * AGSX_CGROUP_ROOT stands in for it): --systemd-cgroup means a scope. On a
 * v1 or hybrid systemd host the path is mapped to cgroupfs as where no
 * systemd runs. */
bool agsx_oci_systemd_manages(void);
/* `slice:prefix:name` → the scope's unit name and its slice. */
int agsx_oci_cgroup_systemd_unit(const char *spec, char **ret_unit, char **ret_slice,
                                 agsx_error_t *err);
/* linux.resources as unit properties (MemoryMax, MemoryLow, MemorySwapMax,
 * CPUWeight, CPUQuotaPerSecUSec rounded up to systemd's 10 ms steps,
 * CPUQuotaPeriodUSec, AllowedCPUs, AllowedMemoryNodes, TasksMax, IOWeight);
 * -1 (unlimited) as infinity; unset ones left out. */
struct agsx_oci_systemd_props {
  struct agsx_systemd_prop p[16];
  size_t n;
  uint8_t *cpus, *mems; /* the masks' storage */
};
int agsx_oci_cgroup_systemd_props(const struct agsx_oci_resources *res,
                                  struct agsx_oci_systemd_props *ret, agsx_error_t *err);
void agsx_oci_systemd_props_clear(struct agsx_oci_systemd_props *p);
/* Starts UNIT in SLICE with PID and the properties of RES; waits for it. */
int agsx_oci_cgroup_systemd_start(const char *unit, const char *slice, const char *id, pid_t pid,
                                  const struct agsx_oci_resources *res, agsx_error_t *err);
/* SetUnitProperties with the properties of RES (update). */
int agsx_oci_cgroup_systemd_update(const char *unit, const struct agsx_oci_resources *res,
                                   agsx_error_t *err);

#endif
