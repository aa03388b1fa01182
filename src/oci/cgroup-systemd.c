/* agsx — oci/cgroup: --systemd-cgroup where systemd manages the cgroups:
 * the container's transient scope and its resources as unit properties.
 * See cgroup.h. */
#include "config.h"

#include "host/systemd.h"
#include "oci/cgroup.h"

#include <inttypes.h>
#include <linux/magic.h>
#include <string.h>
#include <sys/vfs.h>

#define USEC_PER_SEC 1000000ULL
#define QUOTA_STEP_USEC 10000ULL /* systemd keeps CPU quotas in 10 ms steps */

bool agsx_oci_systemd_manages(void) {
  const char *root = getenv("AGSX_CGROUP_ROOT");
  struct statfs sfs;
  return (root == NULL || *root == '\0') && agsx_systemd_booted() &&
         statfs("/sys/fs/cgroup", &sfs) == 0 && sfs.f_type == CGROUP2_SUPER_MAGIC;
}

int agsx_oci_cgroup_systemd_unit(const char *spec, char **ret_unit, char **ret_slice,
                                 agsx_error_t *err) {
  _cleanup_free_ char *path = NULL;
  if (agsx_oci_cgroup_systemd_path(spec, &path, err) < 0) /* checks every part */
    return -1;
  const char *c1 = strchr(spec, ':'), *c2 = strchr(c1 + 1, ':'), *name = c2 + 1;
  size_t nl = strlen(name), pl = (size_t)(c2 - c1 - 1);
  if (nl > 6 && strcmp(name + nl - 6, ".slice") == 0)
    return agsx_error_set(err, 0,
                          "config: linux.cgroupsPath: a container in a slice of its own "
                          "(\"%s\") is not supported; name a scope",
                          spec);
  *ret_unit = pl ? xasprintf("%.*s-%s.scope", (int)pl, c1 + 1, name) : xasprintf("%s.scope", name);
  *ret_slice = c1 == spec ? xstrdup("system.slice") : xstrndup(spec, (size_t)(c1 - spec));
  if (!agsx_systemd_unit_name_is_valid(*ret_unit, ".scope")) {
    free(steal_ptr(ret_unit));
    free(steal_ptr(ret_slice));
    return agsx_error_set(err, 0, "config: linux.cgroupsPath: invalid systemd unit in \"%s\"",
                          spec);
  }
  return 0;
}

static void add_t(struct agsx_oci_systemd_props *sp, const char *name, uint64_t v) {
  sp->p[sp->n++] = (struct agsx_systemd_prop){.name = name, .type = 't', .t = v};
}

static int add_mask(struct agsx_oci_systemd_props *sp, const char *name, const char *list,
                    const char *field, uint8_t **store, agsx_error_t *err) {
  size_t n;
  if (agsx_systemd_cpuset_mask(list, store, &n, err) < 0)
    return agsx_error_wrap(err, "config: linux.resources.cpu.%s", field);
  sp->p[sp->n++] =
      (struct agsx_systemd_prop){.name = name, .type = 'y', .bytes = *store, .n_bytes = n};
  return 0;
}

/* As runc's systemd driver maps them, for the properties systemd 252 has;
 * the rest (device rules, throttles, swap on v1 terms) only go to
 * cgroupfs, where agsx writes every resource anyway. */
int agsx_oci_cgroup_systemd_props(const struct agsx_oci_resources *r,
                                  struct agsx_oci_systemd_props *sp, agsx_error_t *err) {
  memset(sp, 0, sizeof(*sp));
  if (r->memory_limit > 0)
    add_t(sp, "MemoryMax", (uint64_t)r->memory_limit);
  if (r->memory_reservation > 0)
    add_t(sp, "MemoryLow", (uint64_t)r->memory_reservation);
  if (r->memory_swap != -1 && r->memory_swap != 0) {
    int64_t swap;
    if (agsx_oci_cgroup_swap_v2(r->memory_swap, r->memory_limit, &swap, err) < 0)
      return -1;
    add_t(sp, "MemorySwapMax", swap < 0 ? AGSX_SYSTEMD_INFINITY : (uint64_t)swap);
  }
  if (r->cpu_shares)
    add_t(sp, "CPUWeight", agsx_oci_cgroup_cpu_weight(r->cpu_shares));
  uint64_t period = r->cpu_period ? r->cpu_period : 100000;
  if (r->cpu_period)
    add_t(sp, "CPUQuotaPeriodUSec", r->cpu_period);
  if (r->cpu_quota > 0) {
    uint64_t per_sec = (uint64_t)r->cpu_quota * USEC_PER_SEC / period;
    /* Rounded up as runc does: never less CPU than asked for. */
    if (per_sec % QUOTA_STEP_USEC)
      per_sec = (per_sec / QUOTA_STEP_USEC + 1) * QUOTA_STEP_USEC;
    add_t(sp, "CPUQuotaPerSecUSec", per_sec);
  } else if (r->cpu_quota == -1 && r->cpu_period) {
    add_t(sp, "CPUQuotaPerSecUSec", AGSX_SYSTEMD_INFINITY);
  }
  if (r->cpus && *r->cpus && add_mask(sp, "AllowedCPUs", r->cpus, "cpus", &sp->cpus, err) < 0)
    return -1;
  if (r->mems && *r->mems &&
      add_mask(sp, "AllowedMemoryNodes", r->mems, "mems", &sp->mems, err) < 0) {
    agsx_oci_systemd_props_clear(sp);
    return -1;
  }
  if (r->pids_limit > 0)
    add_t(sp, "TasksMax", (uint64_t)r->pids_limit);
  else if (r->pids_limit == -1)
    add_t(sp, "TasksMax", AGSX_SYSTEMD_INFINITY);
  if (r->blkio_weight)
    add_t(sp, "IOWeight", agsx_oci_cgroup_io_weight(r->blkio_weight));
  return 0;
}

void agsx_oci_systemd_props_clear(struct agsx_oci_systemd_props *sp) {
  free(sp->cpus);
  free(sp->mems);
  memset(sp, 0, sizeof(*sp));
}

int agsx_oci_cgroup_systemd_start(const char *unit, const char *slice, const char *id, pid_t pid,
                                  const struct agsx_oci_resources *res, agsx_error_t *err) {
  struct agsx_oci_systemd_props sp;
  if (agsx_oci_cgroup_systemd_props(res, &sp, err) < 0)
    return -1;
  _cleanup_free_ char *desc = xasprintf("agsx-oci container %.64s", id);
  int r = agsx_systemd_start_scope(unit, slice, desc, pid, sp.p, sp.n, err);
  agsx_oci_systemd_props_clear(&sp);
  return r;
}

int agsx_oci_cgroup_systemd_update(const char *unit, const struct agsx_oci_resources *res,
                                   agsx_error_t *err) {
  struct agsx_oci_systemd_props sp;
  if (agsx_oci_cgroup_systemd_props(res, &sp, err) < 0)
    return -1;
  int r = sp.n ? agsx_systemd_set_properties(unit, sp.p, sp.n, err) : 0;
  agsx_oci_systemd_props_clear(&sp);
  return r;
}
