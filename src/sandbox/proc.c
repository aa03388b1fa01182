/* agsx — proc: pidfds and /proc entries proven by start time (see proc.h). */
#include "config.h"

#include "sandbox/proc.h"

#include "sandbox/sync.h"

#include <limits.h>
#include <linux/sched.h>
#include <sched.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>

int agsx_proc_ref_pidfd(const struct agsx_proc_ref *ref) {
  if (ref->pid <= 0) {
    errno = ESRCH;
    return -1;
  }
  int fd = (int)syscall(SYS_pidfd_open, ref->pid, 0);
  if (fd < 0)
    return -1;
  if (!agsx_proc_ref_alive(ref)) {
    close(fd);
    errno = ESRCH;
    return -1;
  }
  return fd;
}

int agsx_proc_ref_open(const struct agsx_proc_ref *ref, const char *sub, int flags) {
  _cleanup_close_ int pidfd = agsx_proc_ref_pidfd(ref);
  if (pidfd < 0)
    return -1;
  char path[64 + NAME_MAX];
  if ((size_t)snprintf(path, sizeof(path), "/proc/%d%s%s", (int)ref->pid, *sub ? "/" : "", sub) >=
      sizeof(path)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  _cleanup_close_ int fd = open(path, flags | O_CLOEXEC);
  if (fd < 0)
    return -1;
  /* Still alive after the open: /proc/PID was this process's. */
  if (syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) < 0) {
    errno = ESRCH;
    return -1;
  }
  return steal_fd(&fd);
}

int agsx_pidfd_signal(int pidfd, int sig, int value) {
  siginfo_t si;
  memset(&si, 0, sizeof(si));
  si.si_signo = sig;
  si.si_code = SI_QUEUE;
  si.si_pid = getpid();
  si.si_uid = getuid();
  si.si_value.sival_int = value;
  return syscall(SYS_pidfd_send_signal, pidfd, sig, value ? &si : NULL, 0) < 0 ? -errno : 0;
}

int agsx_proc_ref_signal(const struct agsx_proc_ref *ref, int sig, int value) {
  _cleanup_close_ int fd = agsx_proc_ref_pidfd(ref);
  if (fd < 0)
    return -ESRCH;
  return agsx_pidfd_signal(fd, sig, value);
}

/* clone3 with CLONE_PARENT, which takes no exit signal: the child gets
 * the caller's own (SIGCHLD: agsx_clone_in_ns's helper was forked). */
static pid_t clone_parent(uint64_t flags, int cgroupfd, int *ret_pidfd) {
  struct clone_args args = {
      .flags = flags | CLONE_PARENT | CLONE_PIDFD,
      .pidfd = (uint64_t)(uintptr_t)ret_pidfd,
  };
  if (cgroupfd >= 0) {
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = (uint64_t)cgroupfd;
  }
  return (pid_t)syscall(SYS_clone3, &args, sizeof(args));
}

/* What agsx_clone_in_ns's helper says: the child's pid, or an errno. */
struct clone_word {
  pid_t pid;
  int e;
};

pid_t agsx_clone_in_ns(int nsfd, int nstype, uint64_t flags, int cgroupfd, int *ret_pidfd) {
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
    return -1;
  pid_t h = fork();
  if (h == 0) {
    close(sp[0]);
    int pidfd = -1;
    struct clone_word w = {-1, 0};
    if (setns(nsfd, nstype) < 0) {
      w.e = errno;
    } else {
      w.pid = clone_parent(flags, cgroupfd, &pidfd);
      if (w.pid == 0) {
        close(sp[1]);
        return 0;
      }
      if (w.pid < 0)
        w.e = errno;
    }
    _exit(agsx_send_fds(sp[1], &w, sizeof(w), &pidfd, pidfd >= 0 ? 1 : 0) < 0);
  }
  int saved = errno;
  close(sp[1]);
  if (h < 0) {
    close(sp[0]);
    return errno = saved, -1;
  }
  struct clone_word w = {-1, EIO};
  int fd = -1, mflags = 0;
  size_t n = 0;
  ssize_t r = agsx_recv_fds(sp[0], &w, sizeof(w), 0, &fd, 1, &n, &mflags);
  close(sp[0]);
  while (waitpid(h, NULL, 0) < 0 && errno == EINTR)
    ;
  if (r != (ssize_t)sizeof(w) || (w.pid > 0 && n != 1)) {
    if (w.pid > 0)
      kill(w.pid, SIGKILL);
    if (fd >= 0)
      close(fd);
    return errno = EIO, -1;
  }
  if (w.pid < 0)
    return errno = w.e, -1;
  *ret_pidfd = fd;
  return w.pid;
}
