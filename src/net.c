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

/* ---- a namespace made ahead ------------------------------------------------------------------- */

#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

int agsx_net_new_sysfs(agsx_error_t *err) {
  _cleanup_close_ int fs = fsopen("sysfs", FSOPEN_CLOEXEC);
  if (fs < 0 || fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
    return agsx_error_set(err, errno, "create the sandbox's sysfs");
  int m = fsmount(fs, FSMOUNT_CLOEXEC,
                  MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
  if (m < 0)
    return agsx_error_set(err, errno, "mount the sandbox's sysfs");
  return m;
}

static _Noreturn void netns_helper(int sock) {
  agsx_error_t err = NULL;
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  int fds[2] = {-1, -1};
  if (unshare(CLONE_NEWNET) < 0 || agsx_net_loopback_up(&err) < 0 ||
      unprivileged_ports(&err) < 0 ||
      (fds[0] = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)) < 0 ||
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
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                      .msg_controllen = sizeof(u.buf)};
  struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(fds));
  memcpy(CMSG_DATA(cm), fds, sizeof(fds));
  _exit(sendmsg(sock, &mh, 0) == 1 ? 0 : 1);
}

int agsx_net_prepare(struct agsx_netns_job *job, agsx_error_t *err) {
  int sp[2];
  job->pid = -1;
  job->sock = -1;
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
    return agsx_error_set(err, errno, "socketpair");
  pid_t pid = fork();
  if (pid == 0) {
    close(sp[0]);
    netns_helper(sp[1]);
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
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                      .msg_controllen = sizeof(u.buf)};
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
