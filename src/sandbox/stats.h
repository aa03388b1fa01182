/* agsx — stats: what a running sandbox uses, for `agsx stats`.
 *
 * One sample reads the sandbox's cgroup (CPU time, memory less inactive
 * page cache, processes; see agsx_cgroup_usage), its writable layer (a
 * statfs of its root, which overlayfs answers from the upper layer: the
 * tmpfs of --disk bytes) and its network namespace's interface counters
 * (/proc/<init>/net/dev, every interface but lo). /proc/<init> is opened
 * through a pidfd checked against the init's start time, and checked
 * again after the open: a recycled pid never lends its numbers. CPU use is
 * a rate, the difference of two samples. */
#ifndef AGSX_STATS_H
#define AGSX_STATS_H

#include "state/state.h"
#include "util/util.h"

struct agsx_stats {
  int64_t at_ns; /* CLOCK_MONOTONIC time of the sample */
  /* has_cpu, has_memory, has_pids: what the sandbox's cgroup told (none
   * without one: an ordinary user's agsx where no cgroup is delegated). */
  bool has_cpu, has_memory, has_disk, has_net, has_pids;
  uint64_t cpu_ns;       /* CPU time used by every process, ever */
  uint64_t memory;       /* bytes in use */
  uint64_t memory_limit; /* --memory, 0: none */
  uint64_t pids, pids_limit;
  uint64_t disk_used, disk_size; /* of the writable layer */
  uint64_t rx_bytes, tx_bytes;   /* received and sent, all interfaces but lo */
};

/* Samples the running sandbox of record R. ESRCH when it is not running. */
int agsx_stats_sample(const struct agsx_record *r, struct agsx_stats *ret, agsx_error_t *err);
/* CPU use between two samples of one sandbox, in percent of one CPU (200
 * is two CPUs busy, as in `docker stats`); -1 when unknown. */
double agsx_stats_cpu_percent(const struct agsx_stats *before, const struct agsx_stats *after);
/* Sums the byte counters of /proc/net/dev's text BUF, lo excepted. Returns
 * the number of interfaces counted. */
int agsx_stats_parse_net_dev(const char *buf, uint64_t *ret_rx, uint64_t *ret_tx);

#endif
