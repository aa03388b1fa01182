/* agsx — oci/launch: the namespaces and the clone of the init, P's side
 * (see oci.h for the order): a pod's user namespace, found from the ipc,
 * uts and pid namespaces the container joins (the one another container
 * of the same runtime root runs in: joined instead of a new one, its uid
 * range shared and leased), namespaces joined by path entered around the
 * clone, the new network namespace a helper made meanwhile entered, net.*
 * sysctls written there, clone3 of the init (from inside a joined user
 * namespace: by a helper, after P checked that namespace's maps), and the
 * init's id maps. Invariant: P is back in every namespace of its own when
 * agsx_oci_launch_spawn returns, failed or not; a joined user namespace
 * that maps host root, and an ipc, uts or pid namespace of the host's user
 * namespace, are refused before the init exists. */
#include "config.h"

#include "oci/launch-internal.h"
#include "state/state.h"

#include <fcntl.h>
#include <inttypes.h>
#include <linux/nsfs.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

static int open_ns(const char *path, int type, agsx_error_t *err) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "namespace `%s`", path);
  int t = ioctl(fd, NS_GET_NSTYPE);
  if (t != type) {
    close(fd);
    return agsx_error_set(err, 0, "config: linux.namespaces: `%s` is not a namespace of its type",
                          path);
  }
  return fd;
}

/* Namespaces joined by path (pods share network, ipc, uts and pid this
 * way), entered by P around the clone: what P joins, the init is created
 * in. HOST holds P's own to return to. */
struct joined {
  int type;
  int host, target;
};

static void leave_joined(struct joined *j, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (j[i].host >= 0 && setns(j[i].host, j[i].type) < 0)
      agsx_warn("return to the host's namespace: %s", strerror(errno));
    agsx_closep(&j[i].host);
    agsx_closep(&j[i].target);
  }
}

static bool same_file(const struct stat *a, const struct stat *b) {
  return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* Docker's and Podman's `--network host` sends no network entry, which the
 * policy refuses; the same namespace joined by path (the engine's own, as
 * /proc/PID/ns/net of a host process) is host networking all the same.
 * A namespace made for the pod (CNI's, `ip netns add`) is another one. */
static int host_network_joined(int own, int target, const char *path, agsx_error_t *err) {
  struct stat a, b;
  if (fstat(own, &a) < 0 || fstat(target, &b) < 0)
    return agsx_error_set(err, errno, "namespace `%s`", path);
  if (!same_file(&a, &b))
    return 0;
  struct agsx_oci_policy pol;
  if (agsx_oci_policy_load(&pol, err) < 0)
    return -1;
  if (pol.host_network)
    return 0;
  return agsx_error_set(err, 0,
                        "config: linux.namespaces[network].path: `%s` is the host's network "
                        "namespace: host networking is not supported by agsx (a container "
                        "needs its own network namespace)",
                        path);
}

static int enter_joined(const struct agsx_oci_spec *s, struct joined *j, size_t *n,
                        agsx_error_t *err) {
  static const struct {
    int type;
    const char *self;
  } kinds[] = {{CLONE_NEWNET, "net"},
               {CLONE_NEWIPC, "ipc"},
               {CLONE_NEWUTS, "uts"},
               {CLONE_NEWPID, "pid_for_children"},
               {CLONE_NEWCGROUP, "cgroup"}};
  *n = 0;
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(kinds); i++) {
    const struct agsx_oci_ns *ns = agsx_oci_spec_ns(s, kinds[i].type);
    if (ns == NULL || ns->path == NULL)
      continue;
    char self[64];
    snprintf(self, sizeof(self), "/proc/thread-self/ns/%s", kinds[i].self);
    struct joined *e = &j[(*n)++];
    e->type = kinds[i].type;
    e->host = open(self, O_RDONLY | O_CLOEXEC);
    e->target = open_ns(ns->path, kinds[i].type, err);
    if (e->host < 0 || e->target < 0)
      return e->host < 0 ? agsx_error_set(err, errno, "open `%s`", self) : -1;
    if (kinds[i].type == CLONE_NEWNET && host_network_joined(e->host, e->target, ns->path, err) < 0)
      return -1;
    if (setns(e->target, kinds[i].type) < 0) {
      agsx_closep(&e->host);
      return agsx_error_set(err, errno, "join namespace `%s`", ns->path);
    }
  }
  return 0;
}

#define PING_RANGE "net.ipv4.ping_group_range="

/* net.* sysctls, written by P in the container's network namespace (one
 * agsx made is owned by the host user namespace: the container's root
 * could not write them itself). ping_group_range waits for the id maps
 * (agsx_oci_launch_ping_range). */
static int net_sysctls(const struct agsx_oci_spec *s, agsx_error_t *err) {
  for (char **kv = s->sysctl; kv && *kv; kv++) {
    if (!agsx_str_has_prefix(*kv, "net.") || agsx_str_has_prefix(*kv, PING_RANGE))
      continue;
    _cleanup_free_ char *path = xasprintf("/proc/sys/%s", *kv);
    char *eq = strchr(path, '=');
    *eq = '\0';
    for (char *p = path + 10; *p; p++)
      if (*p == '.')
        *p = '/';
    _cleanup_close_ int fd = agsx_openat2(AT_FDCWD, path, O_WRONLY | O_TRUNC, 0,
                                          RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
    if (fd < 0 || agsx_write_all(fd, eq + 1, strlen(eq + 1)) < 0)
      return agsx_error_set(err, errno, "sysctl `%s`", *kv);
  }
  return 0;
}

/* The host gids of container gids [LO, HI] through MAP (a gid_map read
 * from the host's side): the largest part of the range one line covers
 * (the kernel takes one range); *RET_LO > *RET_HI when no line does. */
static void ping_range_host(char *map, uint64_t lo, uint64_t hi, uint64_t *ret_lo,
                            uint64_t *ret_hi) {
  uint64_t best = 0;
  *ret_lo = 1;
  *ret_hi = 0;
  for (char *save = NULL, *l = strtok_r(map, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
    unsigned long in, out, count;
    if (sscanf(l, "%lu %lu %lu", &in, &out, &count) != 3 || count == 0)
      continue;
    uint64_t a = lo > in ? lo : in, b = hi < in + count - 1 ? hi : in + count - 1;
    if (a > b || b - a + 1 <= best)
      continue;
    best = b - a + 1;
    *ret_lo = out + (a - in);
    *ret_hi = out + (b - in);
  }
}

/* linux.sysctl's net.ipv4.ping_group_range names container gids (Docker
 * sends "0 2147483647": every group), the kernel reads the writer's, and
 * P's are host gids: translated through the init's gid map (read from the
 * host's side, however deep the user namespace) and clamped to what it
 * maps, as the kernel does for a runtime inside the user namespace except
 * that it refuses an unmapped gid. None mapped: "1 0", the kernel's "no
 * group". Written in the init's network namespace, P back in its own. */
int agsx_oci_launch_ping_range(const struct create *cr, agsx_error_t *err) {
  const char *v = NULL;
  for (char **kv = cr->s->sysctl; kv && *kv; kv++)
    if (agsx_str_has_prefix(*kv, PING_RANGE))
      v = *kv + strlen(PING_RANGE);
  if (v == NULL)
    return 0;
  char *end, *mid;
  errno = 0;
  unsigned long long lo = strtoull(v, &mid, 10), hi = 0;
  end = mid;
  if (mid != v && (*mid == ' ' || *mid == '\t'))
    hi = strtoull(mid, &end, 10);
  if (errno || mid == v || end == mid || end[strspn(end, " \t")] != '\0' || lo > INT32_MAX ||
      hi > INT32_MAX)
    return agsx_error_set(err, 0,
                          "config: linux.sysctl: net.ipv4.ping_group_range: expected two gids, "
                          "got `%.64s`",
                          v);
  char path[64], val[64];
  snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)cr->pid);
  _cleanup_free_ char *map = NULL;
  if (agsx_read_file_at(AT_FDCWD, path, 65536, &map, NULL, err) < 0)
    return -1;
  uint64_t hlo, hhi;
  ping_range_host(map, lo, hi, &hlo, &hhi);
  snprintf(val, sizeof(val), "%" PRIu64 " %" PRIu64, hlo, hhi);
  snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)cr->pid);
  _cleanup_close_ int net = open(path, O_RDONLY | O_CLOEXEC);
  _cleanup_close_ int host = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (net < 0 || host < 0 || setns(net, CLONE_NEWNET) < 0)
    return agsx_error_set(err, errno, "enter the container's network namespace");
  _cleanup_close_ int fd =
      agsx_openat2(AT_FDCWD, "/proc/sys/net/ipv4/ping_group_range", O_WRONLY | O_TRUNC, 0,
                   RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
  int r = fd < 0 || agsx_write_all(fd, val, strlen(val)) < 0
              ? agsx_error_set(err, errno, "sysctl `net.ipv4.ping_group_range=%s`", val)
              : 0;
  if (setns(host, CLONE_NEWNET) < 0) {
    agsx_error_free(err);
    return agsx_error_set(err, errno, "return to the host network namespace");
  }
  return r;
}

/* linux.namespaces[user].path: the container joins it (pods), with its
 * mappings and no idmap: the rootfs's owners are the engine's business, as
 * with mappings it sends. */
static bool joins_user(const struct agsx_oci_spec *s) {
  const struct agsx_oci_ns *u = agsx_oci_spec_ns(s, CLONE_NEWUSER);
  return u && u->path;
}

bool agsx_oci_launch_own_range(const struct create *cr) {
  return cr->s->n_uid_maps == 0 && !joins_user(cr->s) && !cr->pod;
}

bool agsx_oci_launch_idmapped(const struct create *cr) {
  return agsx_oci_launch_own_range(cr) || cr->pod_idmap;
}

/* ---- pods ---------------------------------------------------------------------------------- */

/* The user namespace that owns the namespace at PATH (NS_GET_USERNS). */
static int owner_userns(const char *path, int type, struct stat *st, agsx_error_t *err) {
  _cleanup_close_ int ns = open_ns(path, type, err);
  if (ns < 0)
    return -1;
  _cleanup_close_ int u = ioctl(ns, NS_GET_USERNS);
  if (u < 0)
    return agsx_error_set(err, errno, "namespace `%s`: its user namespace", path);
  if (fstat(u, st) < 0)
    return agsx_error_set(err, errno, "namespace `%s`: its user namespace", path);
  return steal_fd(&u);
}

/* Whether a complete container under ROOTFD has its init, alive (the
 * start time checked around the look), in the user namespace ST; its uid
 * slot then in *SLOT (-1: the engine's mappings). */
static bool pod_member_of(int rootfd, const struct stat *st, int *slot) {
  _cleanup_dir_ DIR *d = agsx_dir_stream(rootfd);
  for (struct dirent *de; d && (de = readdir(d));) {
    if (de->d_name[0] == '.' || !agsx_oci_id_is_valid(de->d_name))
      continue;
    _cleanup_error_ agsx_error_t e = NULL;
    _cleanup_close_ int dfd = agsx_oci_dir_open(rootfd, de->d_name, &e);
    struct agsx_oci_record r = {.slot = -1};
    if (dfd < 0 || agsx_oci_record_read(dfd, &r, &e) < 0) {
      agsx_oci_record_clear(&r);
      continue;
    }
    char path[64];
    struct stat us;
    snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)r.pid);
    bool hit = r.complete && r.pid > 0 && agsx_proc_start_time(r.pid) == r.start_time &&
               stat(path, &us) == 0 && same_file(&us, st) &&
               agsx_proc_start_time(r.pid) == r.start_time;
    *slot = r.slot;
    agsx_oci_record_clear(&r);
    if (hit)
      return true;
  }
  return false;
}

/* The pod's range (SLOT; -1: the engine's mappings), leased by this
 * container too: it stays taken while any container of the pod lives; the
 * rootfs is idmapped through it unless the engine sent mappings. */
static int share_range(struct create *cr, int slot, const char *kind, const char *path,
                       agsx_error_t *err) {
  if (slot >= 0 && agsx_userns_share_slot((unsigned)slot, &cr->ids, err) < 0)
    return agsx_error_wrap(err, "config: linux.namespaces[%s].path: `%s`", kind, path);
  cr->rec.slot = slot;
  cr->pod_idmap = slot >= 0 && cr->s->n_uid_maps == 0;
  return 0;
}

int agsx_oci_launch_pod(struct create *cr, int rootfd, agsx_error_t *err) {
  static const struct {
    int type;
    const char *name;
  } kinds[] = {{CLONE_NEWIPC, "ipc"}, {CLONE_NEWUTS, "uts"}, {CLONE_NEWPID, "pid"}};
  const struct agsx_oci_spec *s = cr->s;
  _cleanup_close_ int owner = -1;
  struct stat ost = {0}, st;
  const char *first = NULL, *kind = NULL;
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(kinds); i++) {
    const struct agsx_oci_ns *ns = agsx_oci_spec_ns(s, kinds[i].type);
    if (ns == NULL || ns->path == NULL)
      continue;
    _cleanup_close_ int u = owner_userns(ns->path, kinds[i].type, &st, err);
    if (u < 0)
      return -1;
    if (owner < 0) {
      owner = steal_fd(&u);
      ost = st;
      first = ns->path;
      kind = kinds[i].name;
    } else if (!same_file(&st, &ost))
      return agsx_error_set(err, 0,
                            "config: linux.namespaces: `%s` and `%s` belong to different user "
                            "namespaces (a pod's namespaces are one user namespace's)",
                            first, ns->path);
  }
  if (owner >= 0) {
    /* The host's own ipc, uts or pid namespace (or another of the host
     * user namespace's): the container would share it with the host, and
     * could not mount for it (its root is never host root). */
    if (stat("/proc/self/ns/user", &st) < 0)
      return agsx_error_set(err, errno, "stat `/proc/self/ns/user`");
    if (same_file(&st, &ost))
      return agsx_error_set(err, 0,
                            "config: linux.namespaces[%s].path: `%s` belongs to the host's user "
                            "namespace: agsx joins only the namespaces of its own containers "
                            "(their root is never host root)",
                            kind, first);
  }
  int slot = -1;
  if (joins_user(s)) {
    /* Joined by path as well: the others must be its. If it is one of
     * this root's containers', its range is shared as a pod's; another
     * (the engine's own) is checked at the clone. */
    const char *up = agsx_oci_spec_ns(s, CLONE_NEWUSER)->path;
    if (stat(up, &st) < 0)
      return agsx_error_set(err, errno, "namespace `%s`", up);
    if (owner >= 0 && !same_file(&st, &ost))
      return agsx_error_set(err, 0,
                            "config: linux.namespaces[%s].path: `%s` belongs to another user "
                            "namespace than `%s`",
                            kind, first, up);
    if (!pod_member_of(rootfd, &st, &slot))
      return 0;
    return share_range(cr, slot, "user", up, err);
  }
  if (owner < 0)
    return 0;
  if (!pod_member_of(rootfd, &ost, &slot))
    return agsx_error_set(err, 0,
                          "config: linux.namespaces[%s].path: `%s` belongs to a user namespace "
                          "no container of this runtime root runs in: agsx joins only the "
                          "namespaces of its own containers",
                          kind, first);
  if (share_range(cr, slot, kind, first, err) < 0)
    return -1;
  cr->pod = true;
  cr->pod_path = first;
  cr->pod_userns = steal_fd(&owner);
  return 0;
}

int agsx_oci_launch_write_maps(pid_t pid, const struct create *cr, agsx_error_t *err) {
  const struct agsx_oci_spec *s = cr->s;
  if (joins_user(s) || cr->pod)
    return 0;
  if (s->n_uid_maps == 0)
    return agsx_userns_write_maps(pid, cr->ids.base, err);
  static const char *const files[] = {"gid_map", "uid_map"};
  for (int f = 0; f < 2; f++) {
    const struct agsx_oci_idmap *m = f ? s->uid_maps : s->gid_maps;
    size_t n = f ? s->n_uid_maps : s->n_gid_maps;
    char buf[64 * AGSX_OCI_MAX_MAPS], path[64];
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
      len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%u %u %u\n", m[i].container, m[i].host,
                              m[i].size);
    snprintf(path, sizeof(path), "/proc/%d/%s", pid, files[f]);
    _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, buf, len) != (ssize_t)len)
      return agsx_error_set(err, errno, "write `%s`", path);
  }
  return 0;
}

static int clone_init(struct create *cr, struct child *c, uint64_t flags, agsx_error_t *err) {
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
    return agsx_error_set(err, errno, "socketpair");
  struct clone_args args = {
      .flags = flags | CLONE_PIDFD,
      .pidfd = (uint64_t)(uintptr_t)&cr->pidfd,
      .exit_signal = SIGCHLD,
  };
  pid_t pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));
  if (pid == 0) {
    close(sp[0]);
    c->sync = sp[1];
    agsx_oci_launch_child_main(c);
  }
  int saved = errno;
  close(sp[1]);
  if (pid < 0) {
    close(sp[0]);
    return agsx_error_set(err, saved, "clone3");
  }
  cr->pid = pid;
  cr->sync = sp[0];
  return 0;
}

/* Whether the user namespace H (the helper) is in maps host uid or gid 0,
 * read from the host's side (ids as the host sees them, however deep). */
static int check_joined_maps(const struct agsx_oci_spec *s, pid_t h, const char *path,
                             agsx_error_t *err) {
  static const char *const files[] = {"uid_map", "gid_map"};
  for (int f = 0; f < 2; f++) {
    const struct agsx_oci_idmap *want = f ? s->gid_maps : s->uid_maps;
    size_t nwant = f ? s->n_gid_maps : s->n_uid_maps, n_lines = 0, matched = 0;
    char p[64];
    snprintf(p, sizeof(p), "/proc/%d/%s", (int)h, files[f]);
    _cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
    char buf[4096];
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
    if (n < 0)
      return agsx_error_set(err, errno, "read the %s of `%s`", files[f], path);
    buf[n] = '\0';
    bool any = false;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
      unsigned long in, out, count;
      if (sscanf(line, "%lu %lu %lu", &in, &out, &count) != 3)
        continue;
      any = true;
      n_lines++;
      for (size_t i = 0; i < nwant; i++)
        matched += want[i].container == in && want[i].host == out && want[i].size == count;
      if (out == 0 && count > 0)
        return agsx_error_set(err, 0,
                              "config: linux.namespaces[user].path: `%s` maps host root (%s); "
                              "agsx never runs a container as host root",
                              path, files[f]);
    }
    if (!any)
      return agsx_error_set(err, 0, "config: linux.namespaces[user].path: `%s` has no %s yet", path,
                            files[f]);
    if (nwant && (matched != n_lines || nwant != n_lines))
      return agsx_error_set(err, 0, "config: linux.%s: not the mappings of the user namespace `%s`",
                            f ? "gidMappings" : "uidMappings", path);
  }
  return 0;
}

/* H: in the joined user namespace (full capabilities there, host root's
 * ids unmapped), once P has checked its mappings, clones the init with the
 * other new namespaces, owned by it, as P's child (CLONE_PARENT: the
 * engine's child in the end, as always), and hands P its pidfd. */
static _Noreturn void joined_helper(struct child *c, uint64_t flags, int userns, int hs, int sync) {
  char b = 0;
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (setns(userns, CLONE_NEWUSER) < 0) {
    struct agsx_msg m = {.type = AGSX_MSG_ERROR, .err = errno};
    snprintf(m.text, sizeof(m.text), "join the user namespace: %s", strerror(errno));
    agsx_msg_send(hs, &m, NULL, 0);
    _exit(1);
  }
  close(userns);
  struct agsx_msg m = {.type = AGSX_MSG_READY};
  if (agsx_msg_send(hs, &m, NULL, 0) < 0 || read(hs, &b, 1) != 1)
    _exit(1);
  int pidfd = -1;
  struct clone_args args = {
      .flags = flags | CLONE_PIDFD | CLONE_PARENT,
      .pidfd = (uint64_t)(uintptr_t)&pidfd,
      .exit_signal = 0, /* with CLONE_PARENT: H's own (SIGCHLD), to P */
  };
  pid_t pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));
  if (pid == 0) {
    close(hs);
    c->sync = sync;
    agsx_oci_launch_child_main(c);
  }
  struct agsx_msg r = {.type = pid < 0 ? AGSX_MSG_ERROR : AGSX_MSG_GO, .status = pid, .err = errno};
  if (pid < 0)
    snprintf(r.text, sizeof(r.text), "clone3: %s", strerror(errno));
  agsx_msg_send(hs, &r, &pidfd, pid < 0 ? 0 : 1);
  _exit(pid < 0);
}

/* The pid of PIDFD's process in P's pid namespace (fdinfo's "Pid:"): H's
 * clone3 returns it in H's, which is a pod's when the pid namespace is
 * joined. */
static pid_t pidfd_pid(int pidfd) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pidfd);
  _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
  if (n <= 0)
    return -1;
  buf[n] = '\0';
  const char *p = strstr(buf, "\nPid:");
  long v = p ? strtol(p + 5, NULL, 10) : -1;
  return v > 0 && v <= INT32_MAX ? (pid_t)v : -1;
}

static int clone_init_joined(struct create *cr, struct child *c, uint64_t flags,
                             agsx_error_t *err) {
  const char *path = cr->pod ? cr->pod_path : agsx_oci_spec_ns(cr->s, CLONE_NEWUSER)->path;
  /* A pod's: the one its namespaces belong to (P keeps no copy: the init
   * is forked with none). */
  _cleanup_close_ int userns =
      cr->pod ? steal_fd(&cr->pod_userns) : open_ns(path, CLONE_NEWUSER, err);
  int sp[2], hs[2];
  if (userns < 0)
    return -1;
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
    return agsx_error_set(err, errno, "socketpair");
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, hs) < 0) {
    close(sp[0]);
    close(sp[1]);
    return agsx_error_set(err, errno, "socketpair");
  }
  pid_t h = fork();
  if (h == 0) {
    close(sp[0]);
    close(hs[0]);
    joined_helper(c, flags, userns, hs[1], sp[1]);
  }
  close(sp[1]);
  close(hs[1]);
  cr->sync = sp[0];
  _cleanup_close_ int hsock = hs[0];
  if (h < 0)
    return agsx_error_set(err, errno, "fork");
  struct agsx_msg m = {0};
  int fd = -1;
  size_t nfds = 0;
  int r = 0;
  ssize_t got = agsx_msg_recv(hsock, &m, &fd, 1, &nfds);
  m.text[sizeof(m.text) - 1] = '\0';
  if (got <= 0 || m.type != AGSX_MSG_READY)
    r = agsx_error_set(err, m.err, "%s",
                       m.type == AGSX_MSG_ERROR ? m.text : "join the user namespace");
  else if (check_joined_maps(cr->s, h, path, err) < 0)
    r = -1;
  else if (write(hsock, "g", 1) != 1 || agsx_msg_recv(hsock, &m, &fd, 1, &nfds) <= 0 ||
           m.type != AGSX_MSG_GO || nfds != 1 || m.status <= 0) {
    m.text[sizeof(m.text) - 1] = '\0';
    r = agsx_error_set(err, m.err, "%s", m.type == AGSX_MSG_ERROR ? m.text : "clone the init");
  } else if ((cr->pid = pidfd_pid(fd)) <= 0) {
    r = agsx_error_set(err, errno, "the init's pid");
    /* P's child (CLONE_PARENT), known by its pidfd only. */
    syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0);
    siginfo_t si;
    while (waitid(P_PIDFD, (id_t)fd, &si, WEXITED) < 0 && errno == EINTR) {
    }
    close(fd);
  } else
    cr->pidfd = fd;
  if (r < 0)
    kill(h, SIGKILL);
  while (waitpid(h, NULL, 0) < 0 && errno == EINTR) {
  }
  return r;
}

static bool wants_sysfs(const struct agsx_oci_spec *s) {
  for (size_t i = 0; i < s->n_mounts; i++)
    if (!s->mounts[i].bind && strcmp(s->mounts[i].type, "sysfs") == 0)
      return true;
  return false;
}

/* The network namespace the helper made while P prepared (creating one
 * waits for the kernel's cleanup of dead ones: from 1 to 700 ms here under
 * load), entered; its sysfs if a sysfs mount is asked for. */
static int enter_new_net(struct create *cr, int *ret_hostns, int *ret_sysfs, agsx_error_t *err) {
  _cleanup_close_ int netns = -1, sysfs = -1;
  if (agsx_net_collect(&cr->net, &netns, &sysfs, err) < 0)
    return -1;
  _cleanup_close_ int host = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (host < 0)
    return agsx_error_set(err, errno, "open the host network namespace");
  if (setns(netns, CLONE_NEWNET) < 0)
    return agsx_error_set(err, errno, "enter the container's network namespace");
  *ret_hostns = steal_fd(&host);
  if (wants_sysfs(cr->s))
    *ret_sysfs = steal_fd(&sysfs);
  return 0;
}

int agsx_oci_launch_spawn(struct create *cr, struct child *c, int *ret_sysfs, agsx_error_t *err) {
  const struct agsx_oci_spec *s = cr->s;
  struct joined j[8];
  size_t nj = 0;
  int hostnet = -1, r = -1, here = -1;
  const struct agsx_oci_ns *net = agsx_oci_spec_ns(s, CLONE_NEWNET);
  bool join_user = joins_user(s) || cr->pod;
  uint64_t flags = join_user ? CLONE_NEWNS : CLONE_NEWUSER | CLONE_NEWNS;
  static const int maybe[] = {CLONE_NEWPID, CLONE_NEWIPC, CLONE_NEWUTS};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(maybe); i++) {
    const struct agsx_oci_ns *ns = agsx_oci_spec_ns(s, maybe[i]);
    if (ns && ns->path == NULL)
      flags |= (uint64_t)maybe[i];
  }
  const struct agsx_oci_ns *uts = agsx_oci_spec_ns(s, CLONE_NEWUTS);
  const struct agsx_oci_ns *cgns = agsx_oci_spec_ns(s, CLONE_NEWCGROUP);
  c->new_uts = uts && uts->path == NULL;
  c->new_cgroupns = cgns && cgns->path == NULL;
  if (enter_joined(s, j, &nj, err) < 0)
    goto out;
  if (net && net->path == NULL && enter_new_net(cr, &hostnet, ret_sysfs, err) < 0)
    goto out;
  if (net_sysctls(s, err) < 0)
    goto out;
  if (wants_sysfs(s) && *ret_sysfs < 0 && (*ret_sysfs = agsx_net_new_sysfs(err)) < 0)
    goto out;
  /* The init finds its stage as its working directory: the clone gives
   * it the copy of P's in its own mount namespace, where a lookup by path
   * would need search permission, as its user namespace's root, on every
   * directory above the state root (containerd's shim makes
   * /run/containerd 0600; runc, in the host's user namespace, never
   * noticed). P's own directory is back right after. */
  here = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  {
    _cleanup_close_ int stage = open(c->stage, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (here < 0 || stage < 0 || fchdir(stage) < 0) {
      r = agsx_error_set(err, errno, "the stage `%s`", c->stage);
      goto out;
    }
  }
  r = join_user ? clone_init_joined(cr, c, flags, err) : clone_init(cr, c, flags, err);
out:
  if (here >= 0 && fchdir(here) < 0 && r == 0)
    r = agsx_error_set(err, errno, "return to the working directory");
  if (here >= 0)
    close(here);
  if (hostnet >= 0 && agsx_net_leave(hostnet) < 0 && r == 0)
    r = agsx_error_set(err, errno, "return to the host network namespace");
  leave_joined(j, nj);
  return r;
}
