/* agsx — network namespaces and links through libnl-3. */
#include "config.h"

#include "net.h"

#include <fcntl.h>
#include <net/if.h>
#include <netlink/netlink.h>
#include <netlink/route/link.h>
#include <sched.h>
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

/* Servers in the sandbox may bind ports below 1024: the sandbox is its own
 * host, and its root has no more power over the namespace than before. */
static int unprivileged_ports(agsx_error_t *err) {
  _cleanup_close_ int fd =
      open("/proc/sys/net/ipv4/ip_unprivileged_port_start", O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, "0\n", 2) != 2)
    return agsx_error_set(err, errno, "set ip_unprivileged_port_start");
  return 0;
}

int agsx_net_enter_new(int *ret_hostns, agsx_error_t *err) {
  _cleanup_close_ int host = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (host < 0)
    return agsx_error_set(err, errno, "open the host network namespace");
  if (unshare(CLONE_NEWNET) < 0)
    return agsx_error_set(err, errno, "create a network namespace");
  if (agsx_net_loopback_up(err) < 0 || unprivileged_ports(err) < 0) {
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
