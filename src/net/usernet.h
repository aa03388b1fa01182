/* agsx — net/usernet: the host side of an ordinary user's public and vpc
 * networks.
 *
 * As root, a network's host side (its bridge, the sandboxes' veths, the
 * `inet agsx` nftables table with its NAT, the address leases' checks)
 * lives in the host's network namespace. An ordinary user may not touch
 * that namespace, so agsx gives the user a "router": a network namespace
 * of the user's namespace (src/host/rootless.h), kept by a small process
 * (`agsx-usernet`) and connected to the host by pasta(1), Debian's
 * user-mode network stack (package passt), which carries the router's
 * traffic on ordinary sockets of the user. Everything network.c does as
 * root happens there, unchanged: the same bridges, rules, security groups
 * and egress filter, so the same guarantees, inside a namespace the user
 * owns. Two more rules apply there (agsx_usernet_rules): the host's own
 * addresses, which pasta would reach from the host, are refused like the
 * router's; and pasta runs with no port forwarding and without mapping its
 * gateway to the host's loopback (--no-map-gw).
 *
 * Every host-side socket, sysctl and sysfs look of src/net goes through
 * the calls below: as root they are the plain ones; for an ordinary user
 * they are made by a short-lived thread that entered the router's
 * namespace (setns(2) is per thread, and a socket keeps the namespace it
 * was made in). A process never leaves the host's own namespace (it could
 * not come back: src/host/rootless.h).
 *
 * The router is made at the first public or vpc start and stopped by
 * `agsx gc` once no bridge is left; its record is STATE/usernet ("PID
 * START"), pasta's messages STATE/usernet.log, and pasta opens it through
 * a bind mount, /run/user/UID/netns/agsx-router-PID (usernet.c says why). */
#ifndef AGSX_NET_USERNET_H
#define AGSX_NET_USERNET_H

#include "util/util.h"

#include <stdbool.h>

/* Makes the user's router (and its pasta) unless it runs. Rootless only. */
int agsx_usernet_ensure(agsx_error_t *err);
/* Whether the user's router runs (false as root). */
bool agsx_usernet_running(void);
/* pasta's path (PATH, then /usr/bin, /usr/sbin, /bin), or NULL. */
char *agsx_usernet_pasta(void);
/* Stops the user's router: its bridges and every sandbox link go with it. */
void agsx_usernet_stop(void);
/* Where address leases live: /run/agsx-net, or STATE/net for a user. */
const char *agsx_net_run_dir(void);
/* The rules of the router's table on top of network.c's (none as root):
 * nftables commands that put the host's present addresses in the set of
 * what sandboxes never reach. */
char *agsx_usernet_rules(void);
/* The same, for the addresses ADDRS (loopback's and 0.0.0.0 left out). */
struct agsx_net_addr;
char *agsx_usernet_rules_for(const struct agsx_net_addr *addrs, size_t n);
/* Puts the host's present addresses in that set when they changed since
 * the last time (one netlink dump of the host's addresses per start). */
int agsx_usernet_refresh(agsx_error_t *err);

/* Runs FN(ARG) in the host side's network namespace (as root: here) and
 * returns its result, errno kept; -1 with errno ENETDOWN when an ordinary
 * user's router is not running. */
int agsx_hostnet_call(int (*fn)(void *), void *arg);
/* socket(2), if_nametoindex(3) and open(2) of a /proc/sys/net path on the
 * host side. */
int agsx_host_socket(int domain, int type, int protocol);
unsigned agsx_host_ifindex(const char *name);
int agsx_host_sysctl_open(const char *path, int flags);
/* A file of the host side's sysfs, REL relative to its root ("class/net/…"). */
int agsx_host_sysfs_open(const char *rel, int flags);

#endif
