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

/* Brings the loopback link of the current network namespace up. */
int agsx_net_loopback_up(agsx_error_t *err);

#endif
