/* agsx — net: network namespaces and links (libnl-3). For now the
 * `internal` mode: a fresh network namespace with only `lo`, up. */
#ifndef AGSX_NET_H
#define AGSX_NET_H

#include "util/util.h"

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
/* A link of the sandbox into a host bridge (public and vpc modes): a veth
 * pair made in one message from the host side, its sandbox end created
 * directly inside the new namespace as eth0 with ADDR/PREFIX, MAC and a
 * default route via GATEWAY; its host end HOST_IFNAME enslaved to the
 * bridge and up. IPv6 is off on eth0. The pair goes away with the
 * namespace: no per-sandbox teardown (deleting veths costs ~20 ms each). */
struct agsx_net_link {
  char host_ifname[16];
  int bridge_ifindex;
  uint8_t mac[6];
  uint32_t addr, gateway; /* host byte order */
  uint8_t prefix;
};
/* LINK may be NULL (internal: only lo). */
int agsx_net_prepare(struct agsx_netns_job *job, const struct agsx_net_link *link,
                     agsx_error_t *err);
int agsx_net_collect(struct agsx_netns_job *job, int *ret_netns, int *ret_sysfs, agsx_error_t *err);
void agsx_net_job_cancel(struct agsx_netns_job *job);
/* A read-only sysfs of the current network namespace, as a detached mount. */
int agsx_net_new_sysfs(agsx_error_t *err);

/* Brings the loopback link of the current network namespace up. */
int agsx_net_loopback_up(agsx_error_t *err);

/* A bridge NAME in the current network namespace, up, with GATEWAY/PREFIX,
 * IPv6 off. Sandboxes' ports on it are isolated (they exchange no frame),
 * so traffic between sandboxes is routed by the host, through the inet
 * rules, whether br_netfilter is loaded or not; where it is, bridged IPv4
 * is passed through the netfilter hooks too (per bridge nf_call_iptables).
 * Returns its ifindex. */
int agsx_net_bridge_create(const char *name, uint32_t gateway, uint8_t prefix, agsx_error_t *err);
/* The MAC address of a link with IPv4 address ADDR: 02:41 and the address
 * (a reused address keeps its neighbour entries valid, as Docker does). */
void agsx_net_mac_of(uint32_t addr, uint8_t mac[6]);
/* Makes bridge NAME keep its present MAC address (a bridge made without
 * one follows its ports' lowest, which changes the gateway's address under
 * every sandbox when a port goes). 0 at once when it does already. */
int agsx_net_bridge_keep_mac(const char *name, agsx_error_t *err);
/* Lets the sandboxes of bridge NAME (isolated ports) reach each other
 * through the host: it answers their ARP queries for each other's
 * addresses with its own (private VLAN proxy ARP, RFC 3069), at once.
 * For vpc networks, whose members talk to each other. */
int agsx_net_bridge_route_ports(const char *name, agsx_error_t *err);
/* Deletes link NAME; 0 when it does not exist. */
int agsx_net_link_delete(const char *name, agsx_error_t *err);
/* Every IPv4 address of the current namespace with its prefix and link
 * name: *RET is an array of *RET_N. */
struct agsx_net_addr {
  uint32_t addr;
  uint8_t prefix;
  char ifname[16];
};
int agsx_net_addrs(struct agsx_net_addr **ret, size_t *ret_n, agsx_error_t *err);
/* The address of IFNAME if it has exactly an IPv4 address; 0 when none. */
int agsx_net_link_ipv4(const char *ifname, uint32_t *ret_addr, uint8_t *ret_prefix,
                       agsx_error_t *err);

#endif
