/* agsx — network namespaces and links through libnl-3. */
#include "config.h"

#include "net/net.h"
#include "host/rootless.h"
#include "net/usernet.h"
#include "net/netspec.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <string.h>

static void nl_sock_freep(struct nl_sock **s) {
  if (*s)
    nl_socket_free(*s);
}
static void rtnl_link_putp(struct rtnl_link **l) {
  if (*l)
    rtnl_link_put(*l);
}
#define _cleanup_nlsock_ _cleanup_(nl_sock_freep)
#define _cleanup_link_ _cleanup_(rtnl_link_putp)

int agsx_net_loopback_up(agsx_error_t *err) {
  _cleanup_nlsock_ struct nl_sock *sk = nl_socket_alloc();
  if (sk == NULL)
    return agsx_error_set(err, ENOMEM, "netlink socket");
  int r = nl_connect(sk, NETLINK_ROUTE);
  if (r < 0)
    return agsx_error_set(err, 0, "netlink connect: %s", nl_geterror(r));
  _cleanup_link_ struct rtnl_link *orig = rtnl_link_alloc();
  _cleanup_link_ struct rtnl_link *change = rtnl_link_alloc();
  if (orig == NULL || change == NULL)
    return agsx_error_set(err, ENOMEM, "netlink link");
  /* lo is always ifindex 1 in a new network namespace. */
  rtnl_link_set_ifindex(orig, 1);
  rtnl_link_set_flags(change, IFF_UP);
  r = rtnl_link_change(sk, orig, change, 0);
  if (r < 0)
    return agsx_error_set(err, 0, "bring `lo` up: %s", nl_geterror(r));
  return 0;
}

/* The sysctls of the current network namespace, through a procfs
 * instance of its own (a detached mount; -1 where procfs cannot be
 * mounted: then /proc/sys). In the host's /proc, a new namespace's first
 * lookup of /proc/sys/net compares the name with the `net` entry of every
 * other namespace that ever looked (proc_sys_compare, under sysctl_lock):
 * ~0.7 ms with 1000 sandboxes, and every later lookup by any process of
 * the host scans past the new entry too. A private instance's entries are
 * its own and go with it. */
static int sysctl_root(void) {
  _cleanup_close_ int fs = fsopen("proc", FSOPEN_CLOEXEC);
  if (fs < 0 || fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
    return -1;
  return fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
}

/* Writes VALUE to the sysctl at PATH (below /proc/sys: "net/ipv4/..."),
 * through ROOT (sysctl_root) when it is open. */
static int write_sysctl_at(int root, const char *path, const char *value) {
  char full[256];
  snprintf(full, sizeof(full), "%s/sys/%s", root >= 0 ? "." : "/proc", path);
  _cleanup_close_ int fd = openat(root >= 0 ? root : AT_FDCWD, full, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  return write(fd, value, strlen(value)) == (ssize_t)strlen(value) ? 0 : -1;
}

/* Servers in the sandbox may bind ports below 1024: the sandbox is its own
 * host, and its root has no more power over the namespace than before.
 * And ping without CAP_NET_RAW (ICMP echo sockets), as Docker's default:
 * an allow-list's ICMP rules are then something a sandbox can use. */
static int unprivileged_ports(int sysctls, agsx_error_t *err) {
  if (write_sysctl_at(sysctls, "net/ipv4/ip_unprivileged_port_start", "0\n") < 0)
    return agsx_error_set(err, errno, "set ip_unprivileged_port_start");
  /* Gids of the writer's user namespace: an ordinary user's has only the
   * sandboxes' ids (host/rootless.h). */
  char range[32] = "0 2147483647\n";
  if (agsx_rootless())
    snprintf(range, sizeof(range), "0 %lu\n", agsx_rootless_ids() - 1);
  if (write_sysctl_at(sysctls, "net/ipv4/ping_group_range", range) < 0)
    return agsx_error_set(err, errno, "set ping_group_range");
  return 0;
}

int agsx_net_enter_new(int *ret_hostns, agsx_error_t *err) {
  _cleanup_close_ int host = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (host < 0)
    return agsx_error_set(err, errno, "open the host network namespace");
  if (unshare(CLONE_NEWNET) < 0)
    return agsx_error_set(err, errno, "create a network namespace");
  _cleanup_close_ int sysctls = sysctl_root();
  if (agsx_net_loopback_up(err) < 0 || unprivileged_ports(sysctls, err) < 0) {
    setns(host, CLONE_NEWNET);
    return agsx_error_wrap(err, "sandbox network");
  }
  *ret_hostns = steal_fd(&host);
  return 0;
}

int agsx_net_leave(int hostns) {
  int r = setns(hostns, CLONE_NEWNET);
  int saved = errno;
  close(hostns);
  errno = saved;
  return r;
}

/* ---- links, addresses and routes in raw rtnetlink messages (libnl builds and sends them) ------ */

static void nlmsg_freep(struct nl_msg **m) {
  if (*m)
    nlmsg_free(*m);
}
#define _cleanup_nlmsg_ _cleanup_(nlmsg_freep)

/* A route socket of this namespace, or (HOST) of the host side's
 * (net/usernet.h: the router's, for an ordinary user). */
static int connect_route_in(struct nl_sock **ret, bool host, agsx_error_t *err) {
  struct nl_sock *sk = nl_socket_alloc();
  if (sk == NULL)
    return agsx_error_set(err, ENOMEM, "netlink socket");
  int r;
  if (host && agsx_rootless()) {
    int fd = agsx_host_socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd < 0) {
      int e = errno;
      nl_socket_free(sk);
      return agsx_error_set(err, e, "netlink socket of the user-mode network");
    }
    r = nl_socket_set_fd(sk, NETLINK_ROUTE, fd);
    if (r < 0)
      close(fd);
  } else
    r = nl_connect(sk, NETLINK_ROUTE);
  if (r < 0) {
    nl_socket_free(sk);
    return agsx_error_set(err, 0, "netlink connect: %s", nl_geterror(r));
  }
  *ret = sk;
  return 0;
}

#define connect_route(ret, err) connect_route_in(ret, false, err)
#define connect_host(ret, err) connect_route_in(ret, true, err)

/* An ordinary user's links (bridges and veths in the router, eth0) take
 * the MTU of pasta's tap, 65520 (net/usernet.h): pasta ends every TCP
 * connection itself, so nothing past it sees these frames, and a 1500-byte
 * MTU cost 3.6x in throughput (bench/usernet). Root's keep the default. */
#define USERNET_MTU 65520
static int put_mtu(struct nl_msg *m) {
  return agsx_rootless() ? nla_put_u32(m, IFLA_MTU, USERNET_MTU) : 0;
}

/* Sends M and waits for the kernel's answer. */
static int talk(struct nl_sock *sk, struct nl_msg *m, const char *what, agsx_error_t *err) {
  int r = nl_send_auto(sk, m);
  if (r >= 0)
    r = nl_wait_for_ack(sk);
  if (r < 0)
    return agsx_error_set(err, 0, "%s: %s", what, nl_geterror(r));
  return 0;
}

static struct nl_msg *link_msg(int type, int flags, int ifindex, unsigned up) {
  struct nl_msg *m = nlmsg_alloc_simple(type, NLM_F_REQUEST | NLM_F_ACK | flags);
  if (m == NULL)
    return NULL;
  struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC, .ifi_index = ifindex};
  if (up) {
    ifi.ifi_flags = IFF_UP;
    ifi.ifi_change = IFF_UP;
  }
  if (nlmsg_append(m, &ifi, sizeof(ifi), NLMSG_ALIGNTO) < 0) {
    nlmsg_free(m);
    return NULL;
  }
  return m;
}

static int add_addr(struct nl_sock *sk, int ifindex, uint32_t addr, uint8_t prefix,
                    agsx_error_t *err) {
  _cleanup_nlmsg_ struct nl_msg *m =
      nlmsg_alloc_simple(RTM_NEWADDR, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL);
  struct ifaddrmsg ifa = {.ifa_family = AF_INET,
                          .ifa_prefixlen = prefix,
                          .ifa_scope = RT_SCOPE_UNIVERSE,
                          .ifa_index = (unsigned)ifindex};
  uint32_t a = htonl(addr), brd = htonl(addr | ~agsx_cidr_mask(prefix));
  if (m == NULL || nlmsg_append(m, &ifa, sizeof(ifa), NLMSG_ALIGNTO) < 0 ||
      nla_put_u32(m, IFA_LOCAL, a) < 0 || nla_put_u32(m, IFA_ADDRESS, a) < 0 ||
      nla_put_u32(m, IFA_BROADCAST, brd) < 0)
    return agsx_error_set(err, ENOMEM, "netlink message");
  return talk(sk, m, "add an address", err);
}

static int add_default_route(struct nl_sock *sk, int ifindex, uint32_t gateway, agsx_error_t *err) {
  _cleanup_nlmsg_ struct nl_msg *m =
      nlmsg_alloc_simple(RTM_NEWROUTE, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL);
  struct rtmsg rt = {.rtm_family = AF_INET,
                     .rtm_table = RT_TABLE_MAIN,
                     .rtm_protocol = RTPROT_BOOT,
                     .rtm_scope = RT_SCOPE_UNIVERSE,
                     .rtm_type = RTN_UNICAST};
  if (m == NULL || nlmsg_append(m, &rt, sizeof(rt), NLMSG_ALIGNTO) < 0 ||
      nla_put_u32(m, RTA_GATEWAY, htonl(gateway)) < 0 ||
      nla_put_u32(m, RTA_OIF, (uint32_t)ifindex) < 0)
    return agsx_error_set(err, ENOMEM, "netlink message");
  return talk(sk, m, "add the default route", err);
}

/* A sysctl of the host side's. */
static int write_sysctl(const char *path, const char *value) {
  _cleanup_close_ int fd = agsx_host_sysctl_open(path, O_WRONLY);
  if (fd < 0)
    return -1;
  return write(fd, value, strlen(value)) == (ssize_t)strlen(value) ? 0 : -1;
}

/* Makes IFNAME (in HOST's namespace, named: its index there is unknown
 * here) an isolated bridge port: isolated ports forward no frame to each
 * other, only to and from the bridge itself. Sandboxes on a bridge then
 * reach each other only through the host's routing, where the inet rules
 * always apply: frames bridged between ports would meet them only with
 * br_netfilter loaded, which stock hosts without Docker lack. */
static int isolate_port(struct nl_sock *host, const char *ifname, agsx_error_t *err) {
  _cleanup_nlmsg_ struct nl_msg *m = link_msg(RTM_NEWLINK, 0, 0, false);
  if (m == NULL || nla_put_string(m, IFLA_IFNAME, ifname) < 0)
    return agsx_error_set(err, ENOMEM, "netlink message");
  struct nlattr *info = nla_nest_start(m, IFLA_LINKINFO);
  if (info == NULL || nla_put_string(m, IFLA_INFO_SLAVE_KIND, "bridge") < 0)
    return agsx_error_set(err, ENOMEM, "netlink message");
  struct nlattr *data = nla_nest_start(m, IFLA_INFO_SLAVE_DATA);
  if (data == NULL || nla_put_u8(m, IFLA_BRPORT_ISOLATED, 1) < 0)
    return agsx_error_set(err, ENOMEM, "netlink message");
  nla_nest_end(m, data);
  nla_nest_end(m, info);
  return talk(host, m, "isolate the sandbox's bridge port", err);
}

/* Runs in the new namespace; HOST is a socket of the host's, SYSCTLS
 * sysctl_root(). */
static int attach_link(struct nl_sock *host, int netns, int sysctls, const struct agsx_net_link *l,
                       agsx_error_t *err) {
  /* eth0 is born without IPv6: the rules cover IPv4 only. */
  if (write_sysctl_at(sysctls, "net/ipv6/conf/default/disable_ipv6", "1\n") < 0 && errno != ENOENT)
    return agsx_error_set(err, errno, "disable IPv6");
  _cleanup_nlmsg_ struct nl_msg *m = link_msg(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, 0, true);
  if (m == NULL || nla_put_string(m, IFLA_IFNAME, l->host_ifname) < 0 || put_mtu(m) < 0 ||
      nla_put_u32(m, IFLA_MASTER, (uint32_t)l->bridge_ifindex) < 0)
    return agsx_error_set(err, ENOMEM, "netlink message");
  struct nlattr *info = nla_nest_start(m, IFLA_LINKINFO);
  if (info == NULL || nla_put_string(m, IFLA_INFO_KIND, "veth") < 0)
    return agsx_error_set(err, ENOMEM, "netlink message");
  struct nlattr *data = nla_nest_start(m, IFLA_INFO_DATA);
  struct nlattr *peer = data ? nla_nest_start(m, VETH_INFO_PEER) : NULL;
  /* Not up yet: a veth cannot open before its pair is complete (ENOTCONN). */
  struct ifinfomsg pifi = {.ifi_family = AF_UNSPEC};
  void *hdr = peer ? nlmsg_reserve(m, sizeof(pifi), NLMSG_ALIGNTO) : NULL;
  if (hdr == NULL)
    return agsx_error_set(err, ENOMEM, "netlink message");
  memcpy(hdr, &pifi, sizeof(pifi));
  if (nla_put_string(m, IFLA_IFNAME, "eth0") < 0 ||
      nla_put_u32(m, IFLA_NET_NS_FD, (uint32_t)netns) < 0 ||
      nla_put(m, IFLA_ADDRESS, 6, l->mac) < 0 || put_mtu(m) < 0)
    return agsx_error_set(err, ENOMEM, "netlink message");
  nla_nest_end(m, peer);
  nla_nest_end(m, data);
  nla_nest_end(m, info);
  /* Isolated before eth0 is up: until then the port has no carrier and
   * forwards nothing. */
  if (talk(host, m, "create the sandbox's veth pair", err) < 0 ||
      isolate_port(host, l->host_ifname, err) < 0)
    return -1;
  _cleanup_nlsock_ struct nl_sock *in = NULL;
  if (connect_route(&in, err) < 0)
    return -1;
  int eth0 = (int)if_nametoindex("eth0");
  if (eth0 == 0)
    return agsx_error_set(err, errno, "find eth0");
  _cleanup_nlmsg_ struct nl_msg *up = link_msg(RTM_NEWLINK, 0, eth0, true);
  if (up == NULL)
    return agsx_error_set(err, ENOMEM, "netlink message");
  if (talk(in, up, "bring eth0 up", err) < 0 || add_addr(in, eth0, l->addr, l->prefix, err) < 0 ||
      add_default_route(in, eth0, l->gateway, err) < 0)
    return agsx_error_wrap(err, "configure eth0");
  return 0;
}

void agsx_net_mac_of(uint32_t addr, uint8_t mac[6]) {
  mac[0] = 0x02; /* locally administered, unicast */
  mac[1] = 0x41;
  for (int i = 0; i < 4; i++)
    mac[2 + i] = (uint8_t)(addr >> (24 - 8 * i));
}

int agsx_net_bridge_create(const char *name, uint32_t gateway, uint8_t prefix, agsx_error_t *err) {
  _cleanup_nlsock_ struct nl_sock *sk = NULL;
  if (connect_host(&sk, err) < 0)
    return -1;
  /* Its own address (else it takes its ports' lowest, which changes under
   * every sandbox that learnt it when that port goes): the gateway's,
   * derived as a sandbox's is from its own, so a bridge made again has the
   * same one. Given at creation, the kernel keeps it (NET_ADDR_SET). */
  uint8_t mac[6];
  agsx_net_mac_of(gateway, mac);
  _cleanup_nlmsg_ struct nl_msg *m = link_msg(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, 0, false);
  if (m == NULL || nla_put_string(m, IFLA_IFNAME, name) < 0 ||
      nla_put(m, IFLA_ADDRESS, sizeof(mac), mac) < 0 || put_mtu(m) < 0)
    return agsx_error_set(err, ENOMEM, "netlink message");
  struct nlattr *info = nla_nest_start(m, IFLA_LINKINFO);
  if (info == NULL || nla_put_string(m, IFLA_INFO_KIND, "bridge") < 0)
    return agsx_error_set(err, ENOMEM, "netlink message");
  struct nlattr *data = nla_nest_start(m, IFLA_INFO_DATA);
  if (data == NULL || nla_put_u8(m, IFLA_BR_NF_CALL_IPTABLES, 1) < 0)
    return agsx_error_set(err, ENOMEM, "netlink message");
  nla_nest_end(m, data);
  nla_nest_end(m, info);
  if (talk(sk, m, "create bridge", err) < 0)
    return agsx_error_wrap(err, "bridge `%s`", name);
  _cleanup_nlmsg_ struct nl_msg *up = NULL;
  int ifindex = (int)agsx_host_ifindex(name);
  if (ifindex == 0)
    return agsx_error_set(err, errno, "bridge `%s`", name);
  _cleanup_free_ char *v6 = xasprintf("/proc/sys/net/ipv6/conf/%s/disable_ipv6", name);
  if (write_sysctl(v6, "1\n") < 0 && errno != ENOENT) {
    agsx_error_set(err, errno, "bridge `%s`: disable IPv6", name);
    goto fail;
  }
  if (add_addr(sk, ifindex, gateway, prefix, err) < 0)
    goto fail;
  up = link_msg(RTM_NEWLINK, 0, ifindex, true);
  if (up == NULL) {
    agsx_error_set(err, ENOMEM, "netlink message");
    goto fail;
  }
  if (talk(sk, up, "bring it up", err) < 0)
    goto fail;
  return ifindex;
fail:
  agsx_net_link_delete(name, NULL);
  return agsx_error_wrap(err, "bridge `%s`", name);
}

/* An attribute of link NAME in /sys/class/net, as a number; -1 when
 * unreadable. */
static long sysfs_link_attr(const char *name, const char *attr) {
  _cleanup_free_ char *path = xasprintf("class/net/%s/%s", name, attr);
  _cleanup_free_ char *text = NULL;
  agsx_error_t e = NULL;
  _cleanup_close_ int fd = agsx_host_sysfs_open(path, O_RDONLY);
  if (fd < 0 || agsx_read_fd(fd, 64, &text, NULL, &e) < 0) {
    agsx_error_free(&e);
    return -1;
  }
  char *end;
  long v = strtol(text, &end, 10);
  return end != text ? v : -1;
}

int agsx_net_bridge_keep_mac(const char *name, agsx_error_t *err) {
  /* 3: NET_ADDR_SET, as every bridge agsx makes now (one read per start). */
  if (sysfs_link_attr(name, "addr_assign_type") == 3)
    return 0;
  int ifindex = (int)agsx_host_ifindex(name);
  if (ifindex == 0)
    return agsx_error_set(err, errno, "bridge `%s`", name);
  /* This /sys shows another network namespace's links (agsx run through
   * nsenter --net): we cannot tell. */
  if (sysfs_link_attr(name, "ifindex") != ifindex)
    return 0;
  /* A bridge an older agsx made still follows its ports: give it its
   * present address, which it then keeps. */
  struct ifreq ifr = {0};
  snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
  _cleanup_close_ int s = agsx_host_socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0 || ioctl(s, SIOCGIFHWADDR, &ifr) < 0)
    return agsx_error_set(err, errno, "bridge `%s`: read its address", name);
  _cleanup_nlsock_ struct nl_sock *sk = NULL;
  if (connect_host(&sk, err) < 0)
    return -1;
  _cleanup_nlmsg_ struct nl_msg *m = link_msg(RTM_NEWLINK, 0, ifindex, false);
  if (m == NULL || nla_put(m, IFLA_ADDRESS, 6, ifr.ifr_hwaddr.sa_data) < 0)
    return agsx_error_set(err, ENOMEM, "netlink message");
  if (talk(sk, m, "keep its address", err) < 0)
    return agsx_error_wrap(err, "bridge `%s`", name);
  return 0;
}

int agsx_net_bridge_route_ports(const char *name, agsx_error_t *err) {
  _cleanup_free_ char *pvlan = xasprintf("/proc/sys/net/ipv4/conf/%s/proxy_arp_pvlan", name);
  /* A proxied answer to a broadcast query waits up to 0.8 s by default,
   * which every first packet between two members would pay. */
  _cleanup_free_ char *delay = xasprintf("/proc/sys/net/ipv4/neigh/%s/proxy_delay", name);
  if (write_sysctl(pvlan, "1\n") < 0 || write_sysctl(delay, "0\n") < 0)
    return agsx_error_set(err, errno, "bridge `%s`: route between its ports", name);
  return 0;
}

int agsx_net_link_delete(const char *name, agsx_error_t *err) {
  int ifindex = (int)agsx_host_ifindex(name);
  if (ifindex == 0)
    return 0;
  _cleanup_nlsock_ struct nl_sock *sk = NULL;
  if (connect_host(&sk, err) < 0)
    return -1;
  _cleanup_nlmsg_ struct nl_msg *m = link_msg(RTM_DELLINK, 0, ifindex, false);
  if (m == NULL)
    return agsx_error_set(err, ENOMEM, "netlink message");
  if (talk(sk, m, "delete link", err) < 0)
    return agsx_error_wrap(err, "`%s`", name);
  return 0;
}

int agsx_net_addrs(struct agsx_net_addr **ret, size_t *ret_n, agsx_error_t *err) {
  *ret = NULL;
  *ret_n = 0;
  _cleanup_nlsock_ struct nl_sock *sk = NULL;
  if (connect_route(&sk, err) < 0)
    return -1;
  struct nl_cache *cache = NULL;
  int r = rtnl_addr_alloc_cache(sk, &cache);
  if (r < 0)
    return agsx_error_set(err, 0, "list addresses: %s", nl_geterror(r));
  for (struct nl_object *o = nl_cache_get_first(cache); o; o = nl_cache_get_next(o)) {
    struct rtnl_addr *a = (struct rtnl_addr *)o;
    struct nl_addr *local = rtnl_addr_get_local(a);
    if (rtnl_addr_get_family(a) != AF_INET || local == NULL || nl_addr_get_len(local) != 4)
      continue;
    uint32_t v;
    memcpy(&v, nl_addr_get_binary_addr(local), 4);
    *ret = xrealloc(*ret, (*ret_n + 1) * sizeof(**ret));
    struct agsx_net_addr *e = &(*ret)[(*ret_n)++];
    memset(e, 0, sizeof(*e));
    e->addr = ntohl(v);
    e->prefix = (uint8_t)rtnl_addr_get_prefixlen(a);
    if (if_indextoname((unsigned)rtnl_addr_get_ifindex(a), e->ifname) == NULL)
      e->ifname[0] = '\0';
  }
  nl_cache_free(cache);
  return 0;
}

/* Two ioctls: much cheaper than a netlink dump of every address, and this
 * runs at every start on a public or vpc network. */
int agsx_net_link_ipv4(const char *ifname, uint32_t *ret_addr, uint8_t *ret_prefix,
                       agsx_error_t *err) {
  *ret_addr = 0;
  *ret_prefix = 0;
  _cleanup_close_ int fd = agsx_host_socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return agsx_error_set(err, errno, "socket");
  struct ifreq ifr = {0};
  snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
  if (ioctl(fd, SIOCGIFADDR, &ifr) < 0)
    return errno == EADDRNOTAVAIL || errno == ENODEV
               ? 0
               : agsx_error_set(err, errno, "address of `%s`", ifname);
  struct sockaddr_in sin;
  memcpy(&sin, &ifr.ifr_addr, sizeof(sin));
  uint32_t addr = ntohl(sin.sin_addr.s_addr);
  if (ioctl(fd, SIOCGIFNETMASK, &ifr) < 0)
    return agsx_error_set(err, errno, "netmask of `%s`", ifname);
  memcpy(&sin, &ifr.ifr_netmask, sizeof(sin));
  uint32_t mask = ntohl(sin.sin_addr.s_addr);
  *ret_addr = addr;
  *ret_prefix = (uint8_t)__builtin_popcount(mask);
  return 0;
}

/* ---- a namespace made ahead ------------------------------------------------------------------- */

#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

int agsx_net_new_sysfs(agsx_error_t *err) {
  _cleanup_close_ int fs = fsopen("sysfs", FSOPEN_CLOEXEC);
  /* "sysfs" as mountinfo's source, as mount(8) and runc give it. */
  if (fs < 0 || fsconfig(fs, FSCONFIG_SET_STRING, "source", "sysfs", 0) < 0 ||
      fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
    return agsx_error_set(err, errno, "create the sandbox's sysfs");
  int m = fsmount(fs, FSMOUNT_CLOEXEC,
                  MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
  if (m < 0)
    return agsx_error_set(err, errno, "mount the sandbox's sysfs");
  return m;
}

static _Noreturn void netns_helper(int sock, const struct agsx_net_link *link) {
  agsx_error_t err = NULL;
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  int fds[2] = {-1, -1}, sysctls = -1;
  /* A netlink socket keeps the namespace it was opened in: this one talks
   * to the host's, after the unshare. */
  _cleanup_nlsock_ struct nl_sock *host = NULL;
  if ((link && connect_host(&host, &err) < 0) || unshare(CLONE_NEWNET) < 0 ||
      agsx_net_loopback_up(&err) < 0 || unprivileged_ports(sysctls = sysctl_root(), &err) < 0 ||
      (fds[0] = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)) < 0 ||
      (link && attach_link(host, fds[0], sysctls, link, &err) < 0) ||
      (fds[1] = agsx_net_new_sysfs(&err)) < 0) {
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", err ? err->msg : strerror(errno));
    if (write(sock, msg, strlen(msg)) < 0) {
    }
    _exit(1);
  }
  union {
    char buf[CMSG_SPACE(sizeof(fds))];
    struct cmsghdr align;
  } u;
  memset(u.buf, 0, sizeof(u.buf));
  char ok = 0;
  struct iovec iov = {&ok, 1};
  struct msghdr mh = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
  struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(fds));
  memcpy(CMSG_DATA(cm), fds, sizeof(fds));
  _exit(sendmsg(sock, &mh, 0) == 1 ? 0 : 1);
}

int agsx_net_prepare(struct agsx_netns_job *job, const struct agsx_net_link *link,
                     agsx_error_t *err) {
  int sp[2];
  job->pid = -1;
  job->sock = -1;
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
    return agsx_error_set(err, errno, "socketpair");
  pid_t pid = fork();
  if (pid == 0) {
    close(sp[0]);
    netns_helper(sp[1], link);
  }
  close(sp[1]);
  if (pid < 0) {
    close(sp[0]);
    return agsx_error_set(err, errno, "fork");
  }
  job->pid = pid;
  job->sock = sp[0];
  return 0;
}

int agsx_net_collect(struct agsx_netns_job *job, int *ret_netns, int *ret_sysfs,
                     agsx_error_t *err) {
  union {
    char buf[CMSG_SPACE(sizeof(int) * 2)];
    struct cmsghdr align;
  } u;
  char msg[512];
  struct iovec iov = {msg, sizeof(msg) - 1};
  struct msghdr mh = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
  ssize_t n;
  do
    n = recvmsg(job->sock, &mh, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  struct cmsghdr *cm = n > 0 ? CMSG_FIRSTHDR(&mh) : NULL;
  int r = 0;
  if (cm && cm->cmsg_type == SCM_RIGHTS && cm->cmsg_len == CMSG_LEN(sizeof(int) * 2)) {
    int fds[2];
    memcpy(fds, CMSG_DATA(cm), sizeof(fds));
    *ret_netns = fds[0];
    *ret_sysfs = fds[1];
  } else {
    msg[n > 0 ? n : 0] = '\0';
    r = agsx_error_set(err, 0, "sandbox network: %s", n > 0 ? msg : "the helper died");
  }
  agsx_net_job_cancel(job);
  return r;
}

void agsx_net_job_cancel(struct agsx_netns_job *job) {
  agsx_closep(&job->sock);
  if (job->pid > 0) {
    kill(job->pid, SIGKILL);
    waitpid(job->pid, NULL, 0);
  }
  job->pid = -1;
}
