/* agsx — stats of a running sandbox. */
#include "config.h"

#include "sandbox/stats.h"

#include "host/cgroup.h"
#include "sandbox/proc.h"

#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/statfs.h>

#define NET_DEV_MAX (1u << 20) /* a line per interface: the sandbox can make many */

int agsx_stats_parse_net_dev(const char *buf, uint64_t *ret_rx, uint64_t *ret_tx) {
  uint64_t rx = 0, tx = 0;
  int n = 0;
  /* "  eth0: RXBYTES packets errs drop fifo frame compressed multicast
   *  TXBYTES ...": two header lines, then one line per interface. */
  for (const char *p = buf; *p; p += strcspn(p, "\n"), p += *p == '\n') {
    const char *colon = memchr(p, ':', strcspn(p, "\n"));
    if (colon == NULL)
      continue;
    const char *name = p + strspn(p, " ");
    if (colon - name == 2 && strncmp(name, "lo", 2) == 0)
      continue;
    uint64_t v[9];
    const char *q = colon + 1;
    int k = 0;
    for (; k < 9; k++) {
      char *end;
      errno = 0;
      v[k] = strtoull(q, &end, 10);
      if (end == q || errno)
        break;
      q = end;
    }
    if (k < 9)
      continue;
    rx += v[0];
    tx += v[8];
    n++;
  }
  *ret_rx = rx;
  *ret_tx = tx;
  return n;
}

/* /proc/<init> of R, proven to be its init (see the header). */
static int open_init_proc(const struct agsx_record *r, agsx_error_t *err) {
  int fd = agsx_proc_ref_open(&r->init, "", O_RDONLY | O_DIRECTORY);
  if (fd < 0)
    return agsx_error_set_quiet(err, ESRCH, "sandbox `%.12s` is not running", r->id);
  return fd;
}

static void sample_proc(int procfd, struct agsx_stats *s) {
  struct statfs sfs;
  _cleanup_close_ int root = openat(procfd, "root", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root >= 0 && fstatfs(root, &sfs) == 0) {
    s->has_disk = true;
    s->disk_size = (uint64_t)sfs.f_blocks * (uint64_t)sfs.f_bsize;
    s->disk_used = (uint64_t)(sfs.f_blocks - sfs.f_bfree) * (uint64_t)sfs.f_bsize;
  }
  _cleanup_free_ char *buf = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_read_file_at(procfd, "net/dev", NET_DEV_MAX, &buf, NULL, &e) == 0) {
    agsx_stats_parse_net_dev(buf, &s->rx_bytes, &s->tx_bytes);
    s->has_net = true;
  }
}

int agsx_stats_sample(const struct agsx_record *r, struct agsx_stats *ret, agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  if (r->status != AGSX_STATUS_RUNNING)
    return agsx_error_set_quiet(err, ESRCH, "sandbox `%.12s` is not running", r->id);
  _cleanup_close_ int procfd = open_init_proc(r, err);
  if (procfd < 0)
    return -1;
  ret->at_ns = agsx_mono_ns();
  ret->memory_limit = r->memory;
  ret->pids_limit = r->pids;
  _cleanup_cgroup_ struct agsx_cgroup *cg = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_cgroup_open(r->id, &cg, &e) == 0) {
    struct agsx_cgroup_usage u;
    agsx_cgroup_usage(cg, &u);
    ret->has_cpu = u.has_cpu;
    ret->has_memory = u.has_memory;
    ret->cpu_ns = u.cpu_ns;
    ret->memory = u.memory;
    ret->pids = u.pids;
    ret->has_pids = true;
  }
  sample_proc(procfd, ret);
  return 0;
}

double agsx_stats_cpu_percent(const struct agsx_stats *before, const struct agsx_stats *after) {
  if (!before->has_cpu || !after->has_cpu || after->at_ns <= before->at_ns ||
      after->cpu_ns < before->cpu_ns)
    return -1;
  return 100.0 * (double)(after->cpu_ns - before->cpu_ns) / (double)(after->at_ns - before->at_ns);
}
