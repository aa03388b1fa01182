/* agsx — net: network namespaces and links (libnl-3). For now the
 * `internal` mode: a fresh network namespace with only `lo`, up. */
#ifndef AGSX_NET_H
#define AGSX_NET_H

#include "util.h"

/* Moves the calling thread into a new network namespace owned by the
 * current (host) user namespace, brings `lo` up and lets unprivileged
 * processes bind low ports in it. *RET_HOSTNS is the namespace to return
 * to with agsx_net_leave(). On failure the thread is back where it was. */
int agsx_net_enter_new(int *ret_hostns, agsx_error_t *err);
int agsx_net_leave(int hostns);

/* The sandbox's network namespace, made by a forked helper while the
 * caller prepares everything else (a new network namespace costs ~0.6 ms,
 * a tenth of a sandbox's start): agsx_net_prepare() forks, the helper
 * creates and configures the namespace and a sysfs of it, hands both back
 * as fds and exits; agsx_net_collect() receives them. */
struct agsx_netns_job {
  pid_t pid;
  int sock;
};
int agsx_net_prepare(struct agsx_netns_job *job, agsx_error_t *err);
int agsx_net_collect(struct agsx_netns_job *job, int *ret_netns, int *ret_sysfs,
                     agsx_error_t *err);
void agsx_net_job_cancel(struct agsx_netns_job *job);
/* A read-only sysfs of the current network namespace, as a detached mount. */
int agsx_net_new_sysfs(agsx_error_t *err);

/* Brings the loopback link of the current network namespace up. */
int agsx_net_loopback_up(agsx_error_t *err);

#endif
