/* agsx — sync: the messages between a sandbox's parent and its init (and
 * between exec and its child). See sync.h. */
#include "config.h"

#include "sandbox/sync.h"

#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

int agsx_send_fds(int sock, const void *buf, size_t len, const int *fds, size_t nfds) {
  union {
    char buf[CMSG_SPACE(sizeof(int) * AGSX_MSG_MAX_FDS)];
    struct cmsghdr align;
  } u;
  struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
  if (nfds > AGSX_MSG_MAX_FDS)
    return -E2BIG;
  if (nfds) {
    memset(u.buf, 0, CMSG_SPACE(sizeof(int) * nfds));
    mh.msg_control = u.buf;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
  }
  ssize_t n;
  do
    n = sendmsg(sock, &mh, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    return -errno;
  return n == (ssize_t)len ? 0 : -EMSGSIZE;
}

int agsx_msg_send(int sock, const struct agsx_msg *m, const int *fds, size_t nfds) {
  return agsx_send_fds(sock, m, sizeof(*m), fds, nfds);
}

ssize_t agsx_recv_fds(int sock, void *buf, size_t cap, int flags, int *fds, size_t maxfds,
                      size_t *ret_nfds, int *ret_msg_flags) {
  union {
    char buf[CMSG_SPACE(sizeof(int) * AGSX_MSG_MAX_FDS)];
    struct cmsghdr align;
  } u;
  struct iovec iov = {.iov_base = buf, .iov_len = cap};
  struct msghdr mh = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
  ssize_t n;
  do
    n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | flags);
  while (n < 0 && errno == EINTR);
  size_t got = 0;
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); n >= 0 && cm; cm = CMSG_NXTHDR(&mh, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
      continue;
    size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    int *in = (int *)CMSG_DATA(cm);
    for (size_t i = 0; i < k; i++) {
      if (got < maxfds)
        fds[got++] = in[i];
      else
        close(in[i]);
    }
  }
  if (ret_nfds)
    *ret_nfds = got;
  if (ret_msg_flags)
    *ret_msg_flags = n >= 0 ? mh.msg_flags : 0;
  return n < 0 ? -errno : n;
}

ssize_t agsx_msg_recv(int sock, struct agsx_msg *m, int *fds, size_t maxfds, size_t *ret_nfds) {
  ssize_t n = agsx_recv_fds(sock, m, sizeof(*m), 0, fds, maxfds, ret_nfds, NULL);
  if (n > 0 && n != (ssize_t)sizeof(*m))
    return -EBADMSG;
  m->text[sizeof(m->text) - 1] = '\0';
  return n;
}
