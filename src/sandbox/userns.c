/* agsx — uid range reservation and id maps. */
#include "config.h"

#include "sandbox/userns.h"
#include "host/rootless.h"
#include "state/state.h"

#include <inttypes.h>

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>

/* Uid ranges are a host-wide resource: the slot locks live in one place
 * whatever --state says, so sandboxes of different state directories never
 * share a range. */
static int open_slots(int statefd, agsx_error_t *err) {
  (void)statefd;
  int fd = agsx_mkdir_p_open(AGSX_SLOTS_DIR, 0700, err);
  return fd < 0 ? agsx_error_wrap(err, "uid range locks") : fd;
}

/* One lease line, "PID START", names a live process. */
static bool lease_line_is_live(const char *line) {
  int pid = 0;
  uint64_t start = 0;
  if (sscanf(line, "%d %" SCNu64, &pid, &start) != 2)
    return false;
  struct agsx_proc_ref ref = {.pid = pid, .start_time = start};
  return agsx_proc_ref_alive(&ref);
}

/* The slot file's leases, one "PID START\n" line each (a pod's containers
 * share its range: one line per container), at most LEASES_MAX bytes. */
#define LEASES_MAX 4096

static ssize_t read_leases(int fd, char *buf) {
  ssize_t n = pread(fd, buf, LEASES_MAX - 1, 0);
  buf[n > 0 ? n : 0] = '\0';
  return n;
}

/* Whether a line names a live OCI container's init: the range is taken. */
static bool lease_is_live(int fd) {
  char buf[LEASES_MAX];
  if (read_leases(fd, buf) <= 0)
    return false;
  for (char *save = NULL, *l = strtok_r(buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
    if (lease_line_is_live(l))
      return true;
  return false;
}

/* The slot file rewritten with its live lines but DROP, and ADD if not
 * NULL (the caller holds the slot's flock). */
static int rewrite_leases(int fd, const char *drop, const char *add) {
  char buf[LEASES_MAX], out[LEASES_MAX];
  size_t len = 0;
  read_leases(fd, buf);
  for (char *save = NULL, *l = strtok_r(buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
    if ((drop && strcmp(l, drop) == 0) || !lease_line_is_live(l))
      continue;
    if (len + strlen(l) + 1 >= sizeof(out) - 64) {
      errno = ENOSPC;
      return -1;
    }
    len += (size_t)snprintf(out + len, sizeof(out) - len, "%s\n", l);
  }
  if (add)
    len += (size_t)snprintf(out + len, sizeof(out) - len, "%s\n", add);
  if (ftruncate(fd, 0) < 0 || (len && pwrite(fd, out, len, 0) != (ssize_t)len) || fsync(fd) < 0)
    return -1;
  return 0;
}

/* Takes SLOT if free: 1; 0 if taken. Its range starts at BASE0 + slot *
 * 65536. */
static int try_slot(int slotsfd, unsigned slot, uid_t base0, struct agsx_idrange *ret,
                    agsx_error_t *err) {
  char name[16];
  snprintf(name, sizeof(name), "%u", slot);
  _cleanup_close_ int fd = openat(slotsfd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return agsx_error_set(err, errno, "open slot `%s`", name);
  if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
    if (errno == EWOULDBLOCK)
      return 0;
    return agsx_error_set(err, errno, "lock slot `%s`", name);
  }
  if (lease_is_live(fd))
    return 0;
  ret->slot = slot;
  ret->base = base0 + slot * AGSX_UID_RANGE;
  ret->lockfd = steal_fd(&fd);
  return 1;
}

/* An ordinary user's shared range: ids 0 … 65535 of the user's namespace
 * (its first subordinate ids; host/rootless.h), those of its layers on
 * disk. Held by no lock: every sandbox may share it. */
int agsx_userns_reserve_shared(struct agsx_idrange *ret) {
  *ret = (struct agsx_idrange){.slot = 0, .base = 0, .lockfd = -1};
  return 0;
}

int agsx_userns_open_user_slots(agsx_error_t *err) {
  const char *state = agsx_rootless_state();
  if (state == NULL)
    return agsx_error_set(err, EINVAL, "not an ordinary user's agsx");
  _cleanup_free_ char *dir = xasprintf("%s/" AGSX_USER_SLOTS_DIR, state);
  int fd = agsx_mkdir_p_open(dir, 0700, err);
  return fd < 0 ? agsx_error_wrap(err, "uid range locks") : fd;
}

/* An ordinary user's sandbox: a range of its own, the lowest free one
 * (so that few ranges need copies of the layers: sandbox/ranges.h), when
 * the user's namespace has more than one; else, or when all are taken,
 * the shared range. */
static int rootless_reserve(struct agsx_idrange *ret, agsx_error_t *err) {
  agsx_userns_reserve_shared(ret);
  unsigned long n = agsx_rootless_ranges();
  if (n < 2)
    return 0;
  _cleanup_close_ int slots = agsx_userns_open_user_slots(err);
  if (slots < 0)
    return -1;
  for (unsigned slot = 1; slot < n; slot++) {
    int r = try_slot(slots, slot, 0, ret, err);
    if (r != 0)
      return r < 0 ? -1 : 0;
  }
  return 0; /* (RET is still the shared range: try_slot sets it on success only) */
}

int agsx_userns_reserve(int statefd, struct agsx_idrange *ret, agsx_error_t *err) {
  if (agsx_rootless())
    return rootless_reserve(ret, err);
  _cleanup_close_ int slots = open_slots(statefd, err);
  if (slots < 0)
    return -1;
  /* From a random slot: with a thousand sandboxes running, scanning from
   * slot 0 would open and try the lock of every busy slot first. */
  unsigned start = (unsigned)(((uint64_t)agsx_now_ns() / 1000) % AGSX_UID_SLOTS);
  for (unsigned i = 0; i < AGSX_UID_SLOTS; i++) {
    int r = try_slot(slots, (start + i) % AGSX_UID_SLOTS, AGSX_UID_BASE, ret, err);
    if (r != 0)
      return r < 0 ? -1 : 0;
  }
  return agsx_error_set(err, EAGAIN, "all %u uid ranges are in use", AGSX_UID_SLOTS);
}

void agsx_userns_release(struct agsx_idrange *r) { agsx_closep(&r->lockfd); }

static int write_map(pid_t pid, const char *file, uid_t base, agsx_error_t *err) {
  char path[64], line[64];
  snprintf(path, sizeof(path), "/proc/%d/%s", pid, file);
  unsigned long count = agsx_rootless() ? agsx_rootless_ids() : AGSX_UID_RANGE;
  int n = snprintf(line, sizeof(line), "0 %u %lu\n", base, count);
  _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, line, (size_t)n) != n)
    return agsx_error_set(err, errno, "write `%s`", path);
  return 0;
}

int agsx_userns_write_maps(pid_t pid, uid_t base, agsx_error_t *err) {
  if (write_map(pid, "gid_map", base, err) < 0 || write_map(pid, "uid_map", base, err) < 0)
    return -1;
  return 0;
}

int agsx_userns_share_slot(unsigned slot, struct agsx_idrange *ret, agsx_error_t *err) {
  if (slot >= AGSX_UID_SLOTS)
    return agsx_error_set(err, EINVAL, "uid range %u: no such range", slot);
  _cleanup_close_ int slots = open_slots(-1, err);
  if (slots < 0)
    return -1;
  char name[16];
  snprintf(name, sizeof(name), "%u", slot);
  _cleanup_close_ int fd = openat(slots, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "open slot `%s`", name);
  /* Another create holds it for a moment (its lease follows); a native
   * sandbox holds it for its life, and then it is not a pod's. */
  for (int i = 0; flock(fd, LOCK_EX | LOCK_NB) < 0; i++) {
    if (errno != EWOULDBLOCK)
      return agsx_error_set(err, errno, "lock slot `%s`", name);
    if (i == 100)
      return agsx_error_set(err, EBUSY, "uid range %u is held by a sandbox, not leased", slot);
    struct timespec ts = {.tv_nsec = 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  if (!lease_is_live(fd))
    return agsx_error_set(err, ESRCH, "uid range %u is no longer leased", slot);
  ret->slot = slot;
  ret->base = AGSX_UID_BASE + slot * AGSX_UID_RANGE;
  ret->lockfd = steal_fd(&fd);
  return 0;
}

static void lease_line(char *buf, size_t size, pid_t pid, uint64_t start_time) {
  snprintf(buf, size, "%d %" PRIu64, (int)pid, start_time);
}

int agsx_userns_lease(const struct agsx_idrange *r, pid_t pid, uint64_t start_time,
                      agsx_error_t *err) {
  char line[64];
  lease_line(line, sizeof(line), pid, start_time);
  if (rewrite_leases(r->lockfd, NULL, line) < 0)
    return agsx_error_set(err, errno, "write the lease of uid range %u", r->slot);
  return 0;
}

int agsx_userns_unlease(unsigned slot, pid_t pid, uint64_t start_time, agsx_error_t *err) {
  _cleanup_close_ int slots = open_slots(-1, err);
  if (slots < 0)
    return -1;
  char name[16], want[64];
  snprintf(name, sizeof(name), "%u", slot);
  _cleanup_close_ int fd = openat(slots, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? 0 : agsx_error_set(err, errno, "open slot `%s`", name);
  if (flock(fd, LOCK_EX) < 0)
    return agsx_error_set(err, errno, "lock slot `%s`", name);
  lease_line(want, sizeof(want), pid, start_time);
  if (rewrite_leases(fd, want, NULL) < 0)
    return agsx_error_set(err, errno, "clear the lease of uid range %s", name);
  return 0;
}
