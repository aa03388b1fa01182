/* agsx — proc: pidfds and /proc entries proven by start time (see proc.h). */
#include "config.h"

#include "sandbox/proc.h"

#include <limits.h>
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
