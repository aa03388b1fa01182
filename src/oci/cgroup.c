/* agsx — oci/cgroup: the engine's cgroupsPath on v1 and v2. See cgroup.h. */
#include "config.h"

#include "oci/cgroup.h"

#include "host/systemd.h"

#include <ctype.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>

#define MAX_HIER 16
#define SMALL_MAX 65536
#define PROCS_MAX (8 << 20)

struct hier {
  char *mnt;
  char *opts; /* v1 super options: "rw,memory" */
  int fd;     /* the leaf */
};

struct agsx_oci_cgroup {
  bool v2;
  bool owned;
  char *path; /* relative to each hierarchy's root */
  struct hier h[MAX_HIER];
  size_t n;
  const struct agsx_oci_device *devices; /* linux.devices: allowed too */
  size_t n_devices;
};

bool agsx_oci_cgroup_path_is_valid(const char *path) {
  while (*path == '/')
    path++;
  return *path && agsx_path_is_clean(path, 1024, 16);
}

static bool slice_is_valid(const char *s, size_t n) {
  /* systemd: "NAME.slice", NAME of [A-Za-z0-9:_.\-] parts joined by '-' (no
   * empty part), or "-.slice". */
  if (n < 7 || strncmp(s + n - 6, ".slice", 6) != 0)
    return false;
  if (n == 7 && s[0] == '-')
    return true;
  n -= 6;
  if (s[0] == '-' || s[n - 1] == '-')
    return false;
  for (size_t i = 0; i < n; i++)
    if (!(isalnum((unsigned char)s[i]) || strchr("_.-", s[i])) || (s[i] == '-' && s[i + 1] == '-'))
      return false;
  return true;
}

static bool unit_part_is_valid(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!(isalnum((unsigned char)s[i]) || strchr("_.-@", s[i])))
      return false;
  return n < 256;
}

int agsx_oci_cgroup_systemd_path(const char *spec, char **ret, agsx_error_t *err) {
  const char *c1 = strchr(spec, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
  if (c1 == NULL || c2 == NULL || strchr(c2 + 1, ':'))
    return agsx_error_set(err, 0,
                          "config: linux.cgroupsPath: expected the form \"slice:prefix:name\" "
                          "for systemd cgroups, got \"%s\"",
                          spec);
  size_t sl = (size_t)(c1 - spec), pl = (size_t)(c2 - c1 - 1);
  const char *name = c2 + 1;
  size_t nl = strlen(name);
  if ((sl && !slice_is_valid(spec, sl)) || !unit_part_is_valid(c1 + 1, pl) || nl == 0 ||
      !unit_part_is_valid(name, nl) || strcmp(name, ".") == 0 || strstr(name, ".."))
    return agsx_error_set(err, 0, "config: linux.cgroupsPath: invalid systemd form \"%s\"", spec);
  char *path = NULL;
  if (sl == 0) {
    path = xstrdup("system.slice");
  } else {
    _cleanup_free_ char *sname = xstrndup(spec, sl);
    if (agsx_systemd_slice_path(sname, &path, err) < 0)
      return agsx_error_wrap(err, "config: linux.cgroupsPath");
  }
  bool slice = nl > 6 && strcmp(name + nl - 6, ".slice") == 0;
  char *p = slice ? xasprintf("%s/%s", path, name)
            : pl  ? xasprintf("%s/%.*s-%s.scope", path, (int)pl, c1 + 1, name)
                  : xasprintf("%s/%s.scope", path, name);
  free(path);
  *ret = p;
  return 0;
}

bool agsx_oci_systemd_running(void) { return agsx_systemd_booted(); }

static const char *cg_root(void) {
  const char *env = getenv("AGSX_CGROUP_ROOT");
  return env && *env ? env : "/sys/fs/cgroup";
}

/* Tests only (test/oci/oci-cgroup2.bats): AGSX_OCI_CGROUP_LAYOUT=v2 takes
 * AGSX_CGROUP_ROOT as a v2 hierarchy whatever its filesystem, so that the
 * v2 resource files can be checked on a v1 host whose cgroup2 mount has no
 * controllers (a directory tree the test made: the engine's leaf). */
static bool forced_v2(void) {
  const char *l = getenv("AGSX_OCI_CGROUP_LAYOUT");
  const char *env = getenv("AGSX_CGROUP_ROOT");
  return l && strcmp(l, "v2") == 0 && env && *env;
}

uint64_t agsx_oci_cgroup_cpu_weight(uint64_t shares) {
  /* runc's and crun's linear map of [2, 262144] onto [1, 10000]. */
  if (shares == 0)
    return 0;
  if (shares <= 2)
    return 1;
  if (shares >= 262144)
    return 10000;
  return 1 + (shares - 2) * 9999 / 262142;
}

uint64_t agsx_oci_cgroup_io_weight(uint64_t weight) {
  /* runc's and crun's linear map of blkio's [10, 1000] onto io's [1, 10000]. */
  if (weight == 0)
    return 0;
  if (weight <= 10)
    return 1;
  if (weight >= 1000)
    return 10000;
  return 1 + (weight - 10) * 9999 / 990;
}

int agsx_oci_cgroup_swap_v2(int64_t swap, int64_t memory, int64_t *ret, agsx_error_t *err) {
  /* The spec's swap is memory+swap (v1's memsw); v2 counts swap alone. */
  if (swap <= 0 || memory == -1) {
    *ret = swap;
    return 0;
  }
  if (memory <= 0)
    return agsx_error_set(err, EINVAL,
                          "config: linux.resources.memory.swap: a swap limit needs a memory "
                          "limit on cgroup v2");
  if (swap < memory)
    return agsx_error_set(err, EINVAL,
                          "config: linux.resources.memory.swap: %" PRId64
                          " is below the memory limit %" PRId64 " (swap counts memory+swap)",
                          swap, memory);
  *ret = swap - memory;
  return 0;
}

static bool has_opt(const char *opts, const char *word) {
  size_t wl = strlen(word);
  for (const char *p = opts; *p;) {
    size_t n = strcspn(p, ",");
    if (n == wl && strncmp(p, word, wl) == 0)
      return true;
    p += n;
    p += *p == ',';
  }
  return false;
}

/* WORD in a space-separated list (cgroup.controllers). */
static bool has_word(const char *list, const char *word) {
  size_t wl = strlen(word);
  for (const char *p = list; *p;) {
    p += strspn(p, " \n");
    size_t n = strcspn(p, " \n");
    if (n == wl && strncmp(p, word, wl) == 0)
      return true;
    p += n;
  }
  return false;
}

/* The hierarchies: v2 the root alone; v1 every cgroup (v1) mount below the
 * root, one per superblock. */
static int layout(struct agsx_oci_cgroup *cg, agsx_error_t *err) {
  const char *root = cg_root();
  struct statfs sfs;
  if (statfs(root, &sfs) < 0)
    return agsx_error_set(err, errno, "statfs cgroup root `%s`", root);
  if (sfs.f_type == CGROUP2_SUPER_MAGIC || forced_v2()) {
    cg->v2 = true;
    cg->h[0].mnt = xstrdup(root);
    cg->h[0].opts = xstrdup("");
    cg->h[0].fd = -1;
    cg->n = 1;
    return 0;
  }
  _cleanup_fclose_ FILE *f = fopen("/proc/self/mountinfo", "re");
  if (f == NULL)
    return agsx_error_set(err, errno, "open `/proc/self/mountinfo`");
  _cleanup_free_ char *line = NULL;
  size_t cap = 0;
  size_t rl = strlen(root);
  while (getline(&line, &cap, f) > 0 && cg->n < MAX_HIER) {
    char *tok[64];
    int sep;
    agsx_mountinfo_split(line, tok, 64, &sep);
    if (sep < 0 || strcmp(tok[sep + 1], "cgroup") != 0)
      continue;
    agsx_mountinfo_unescape(tok[4]);
    if (strncmp(tok[4], root, rl) != 0 || tok[4][rl] != '/')
      continue;
    bool dup = false;
    for (size_t i = 0; i < cg->n && !dup; i++)
      dup = strcmp(cg->h[i].mnt, tok[4]) == 0;
    if (dup)
      continue;
    cg->h[cg->n].mnt = xstrdup(tok[4]);
    cg->h[cg->n].opts = xstrdup(tok[sep + 3]);
    cg->h[cg->n].fd = -1;
    cg->n++;
  }
  if (cg->n == 0)
    return agsx_error_set(err, ENOENT, "no cgroup hierarchy under `%s`", root);
  return 0;
}

int agsx_oci_cgroup_leaf_binds(struct agsx_oci_cgroup *cg, int *fds, size_t max, char *names,
                               size_t size, agsx_error_t *err) {
  size_t n = 0, used = 0;
  names[0] = '\0';
  for (size_t i = 0; !cg->v2 && i < cg->n && n < max; i++) {
    const char *name = strrchr(cg->h[i].mnt, '/');
    name = name ? name + 1 : cg->h[i].mnt;
    /* A name the container's tmpfs could not hold as one directory. */
    if (cg->h[i].fd < 0 || !*name || strchr(name, ' ') || strlen(name) + 2 > size - used)
      continue;
    /* The leaf again, in the current mount namespace: create may have
     * moved to one of its own (the overlay rebuild), and a mount of
     * another namespace does not clone (EINVAL). Checked to be the same
     * directory as the leaf agsx holds. */
    _cleanup_close_ int top = open(cg->h[i].mnt, O_PATH | O_DIRECTORY | O_CLOEXEC);
    _cleanup_close_ int leaf =
        top < 0 ? -1
                : agsx_openat2(top, cg->path, O_PATH | O_DIRECTORY, 0,
                               RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV);
    struct stat a1, a2;
    if (leaf >= 0 && (fstat(leaf, &a1) < 0 || fstat(cg->h[i].fd, &a2) < 0 ||
                      a1.st_dev != a2.st_dev || a1.st_ino != a2.st_ino)) {
      agsx_closep(&leaf);
      errno = ESTALE;
    }
    int fd =
        leaf < 0 ? -1 : open_tree(leaf, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
    struct mount_attr ro = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                                        MOUNT_ATTR_NOEXEC};
    if (fd < 0 || mount_setattr(fd, "", AT_EMPTY_PATH, &ro, sizeof(ro)) < 0) {
      int e = errno;
      if (fd >= 0)
        close(fd);
      for (size_t k = 0; k < n; k++)
        close(fds[k]);
      return agsx_error_set(err, e, "bind the container's cgroup of `%s`%s", cg->h[i].mnt,
                            fd < 0 ? "" : ": read-only");
    }
    fds[n++] = fd;
    used += (size_t)snprintf(names + used, size - used, "%s%s", used ? " " : "", name);
  }
  return (int)n;
}

static struct hier *find(struct agsx_oci_cgroup *cg, const char *ctrl) {
  for (size_t i = 0; i < cg->n; i++)
    if (cg->h[i].fd >= 0 && (cg->v2 || has_opt(cg->h[i].opts, ctrl)))
      return &cg->h[i];
  return NULL;
}

static int write_at(int dfd, const char *file, const char *val, agsx_error_t *err) {
  _cleanup_close_ int fd = openat(dfd, file, O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return agsx_error_set(err, errno, "open `%s`", file);
  ssize_t n;
  do
    n = write(fd, val, strlen(val));
  while (n < 0 && errno == EINTR);
  if (n != (ssize_t)strlen(val))
    return agsx_error_set(err, n < 0 ? errno : EIO, "write `%s` to `%s`", val, file);
  return 0;
}

static int write_ctrl(struct agsx_oci_cgroup *cg, const char *ctrl, const char *file,
                      const char *val, agsx_error_t *err) {
  struct hier *h = find(cg, ctrl);
  if (h == NULL)
    return agsx_error_set(
        err, 0, "cannot apply linux.resources: the `%s` controller is not available", ctrl);
  if (cg->v2) {
    /* v2: a controller the parent does not delegate has no files here. */
    _cleanup_free_ char *avail = NULL;
    _cleanup_error_ agsx_error_t e = NULL;
    if (agsx_read_file_at(h->fd, "cgroup.controllers", SMALL_MAX, &avail, NULL, &e) < 0 ||
        !has_word(avail, ctrl))
      return agsx_error_set(err, 0,
                            "cannot apply linux.resources: the `%s` controller is not enabled "
                            "for cgroup v2 `%s` (see cgroup.subtree_control of its parent)",
                            ctrl, cg->path);
  }
  if (write_at(h->fd, file, val, err) < 0)
    return agsx_error_wrap(err, "cgroup `%s`", cg->path);
  return 0;
}

/* v1 cpuset: a cgroup's cpus and mems start empty, and no task can join
 * a cgroup whose are (ENOSPC). Each level of the path gets its parent's
 * where they are empty: the levels made here, and those another create
 * made and was killed before it filled them in (a leaf made below an empty
 * level would copy its emptiness), as runc's cpusetEnsureParent does. */
static void cpuset_fill(int parent, int dir) {
  static const char *const files[] = {"cpuset.cpus", "cpuset.mems"};
  for (size_t i = 0; i < 2; i++) {
    _cleanup_free_ char *have = NULL, *v = NULL;
    _cleanup_error_ agsx_error_t e = NULL;
    if (agsx_read_file_at(dir, files[i], SMALL_MAX, &have, NULL, &e) < 0 ||
        (have[0] && have[0] != '\n'))
      continue;
    if (agsx_read_file_at(parent, files[i], SMALL_MAX, &v, NULL, &e) == 0 && v[0] && v[0] != '\n')
      write_at(dir, files[i], v, &e);
  }
}

/* mkdir -p PATH below DFD; the leaf's creation is reported in *CREATED.
 * V1_CPUSET: DFD is a v1 cpuset hierarchy's root (cpuset_fill). */
static int mkdir_tree(int dfd, const char *path, bool v1_cpuset, bool *created, agsx_error_t *err) {
  _cleanup_free_ char *p = xstrdup(path);
  _cleanup_close_ int cur = fcntl(dfd, F_DUPFD_CLOEXEC, 3);
  *created = false;
  for (char *save = NULL, *c = strtok_r(p, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
    bool made = mkdirat(cur, c, 0755) == 0;
    if (!made && errno != EEXIST)
      return agsx_error_set(err, errno, "mkdir cgroup `%s`", path);
    int next = openat(cur, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0)
      return agsx_error_set(err, errno, "open cgroup `%s`", path);
    *created = made;
    if (v1_cpuset)
      cpuset_fill(cur, next);
    agsx_closep(&cur);
    cur = next;
  }
  return steal_fd(&cur);
}

/* HUGETLB: hugepageLimits asked for (only then is that controller enabled). */
static int enable_v2(struct agsx_oci_cgroup *cg, bool hugetlb, agsx_error_t *err) {
  static const char *const want[] = {"cpu", "cpuset", "io", "memory", "pids", "hugetlb"};
  size_t n_want = AGSX_ARRAY_SIZE(want) - (hugetlb ? 0 : 1);
  _cleanup_close_ int cur = open(cg->h[0].mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (cur < 0)
    return agsx_error_set(err, errno, "open `%s`", cg->h[0].mnt);
  _cleanup_free_ char *p = xstrdup(cg->path);
  char *save = NULL;
  for (char *c = strtok_r(p, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
    _cleanup_free_ char *avail = NULL;
    _cleanup_error_ agsx_error_t e = NULL;
    /* One write for all (the kernel applies the list or none of it), then
     * one by one when that failed (a controller busy in this ancestor). */
    char list[64] = "";
    if (agsx_read_file_at(cur, "cgroup.controllers", SMALL_MAX, &avail, NULL, &e) == 0)
      for (size_t i = 0; i < n_want; i++)
        if (has_word(avail, want[i]))
          snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s+%s", *list ? " " : "",
                   want[i]);
    _cleanup_error_ agsx_error_t e2 = NULL;
    if (*list && write_at(cur, "cgroup.subtree_control", list, &e2) < 0)
      for (char *save2 = NULL, *w = strtok_r(list, " ", &save2); w;
           w = strtok_r(NULL, " ", &save2)) {
        _cleanup_error_ agsx_error_t e3 = NULL;
        write_at(cur, "cgroup.subtree_control", w, &e3);
      }
    /* The leaf is mkdir_tree's: whether agsx made it decides delete. */
    if (save == NULL || save[strspn(save, "/")] == '\0')
      break;
    if (mkdirat(cur, c, 0755) < 0 && errno != EEXIST)
      return agsx_error_set(err, errno, "mkdir cgroup `%s`", cg->path);
    int next = openat(cur, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0)
      return agsx_error_set(err, errno, "open cgroup `%s`", cg->path);
    agsx_closep(&cur);
    cur = next;
  }
  return 0;
}

static char *norm(const char *path) {
  while (*path == '/')
    path++;
  return xstrdup(path);
}

int agsx_oci_cgroup_create(const char *path, const struct agsx_oci_resources *res,
                           const struct agsx_oci_device *devices, size_t n_devices,
                           struct agsx_oci_cgroup **ret, agsx_error_t *err) {
  if (!agsx_oci_cgroup_path_is_valid(path))
    return agsx_error_set(err, EINVAL, "invalid cgroupsPath `%s`", path);
  _cleanup_oci_cgroup_ struct agsx_oci_cgroup *cg = xzalloc(sizeof(*cg));
  cg->devices = devices;
  cg->n_devices = n_devices;
  cg->path = norm(path);
  if (layout(cg, err) < 0)
    return -1;
  bool any_created = false;
  if (cg->v2 && enable_v2(cg, res && res->n_hugepages, err) < 0)
    return -1;
  for (size_t i = 0; i < cg->n; i++) {
    _cleanup_close_ int root = open(cg->h[i].mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    bool created;
    if (root < 0)
      return agsx_error_set(err, errno, "open `%s`", cg->h[i].mnt);
    bool v1_cpuset = !cg->v2 && faccessat(root, "cpuset.cpus", F_OK, 0) == 0;
    cg->h[i].fd = mkdir_tree(root, cg->path, v1_cpuset, &created, err);
    if (cg->h[i].fd < 0) {
      agsx_oci_cgroup_destroy(cg, NULL);
      return -1;
    }
    any_created |= created;
  }
  cg->owned = any_created;
  if (res && agsx_oci_cgroup_update(cg, res, err) < 0) {
    _cleanup_error_ agsx_error_t e = NULL;
    if (cg->owned)
      agsx_oci_cgroup_destroy(cg, &e);
    return -1;
  }
  *ret = steal_ptr(&cg);
  return 0;
}

int agsx_oci_cgroup_open(const char *path, bool owned, struct agsx_oci_cgroup **ret,
                         agsx_error_t *err) {
  _cleanup_oci_cgroup_ struct agsx_oci_cgroup *cg = xzalloc(sizeof(*cg));
  cg->path = norm(path);
  cg->owned = owned;
  if (layout(cg, err) < 0)
    return -1;
  bool any = false;
  for (size_t i = 0; i < cg->n; i++) {
    _cleanup_close_ int root = open(cg->h[i].mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root >= 0)
      cg->h[i].fd = agsx_openat2(root, cg->path, O_RDONLY | O_DIRECTORY, 0,
                                 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
    any |= cg->h[i].fd >= 0;
  }
  if (!any)
    return agsx_error_set(err, ENOENT, "cgroup `%s`", cg->path);
  *ret = steal_ptr(&cg);
  return 0;
}

bool agsx_oci_cgroup_owned(const struct agsx_oci_cgroup *cg) { return cg->owned; }

/* v1's limit and memsw (memory+swap), which the kernel keeps at or above
 * the limit (EINVAL otherwise): in runc's order, memsw first when it grows
 * past the current limit (or is unlimited), else the limit first; a limit
 * with no swap makes memsw unlimited first. */
static int update_memory_v1(struct agsx_oci_cgroup *cg, const struct agsx_oci_resources *r,
                            agsx_error_t *err) {
  struct hier *h = find(cg, "memory");
  bool memsw = h && faccessat(h->fd, "memory.memsw.limit_in_bytes", F_OK, 0) == 0;
  bool limit = r->memory_limit > 0, swap = r->memory_swap > 0 && memsw;
  char lv[32], sv[32];
  snprintf(lv, sizeof(lv), "%" PRId64, r->memory_limit);
  snprintf(sv, sizeof(sv), "%" PRId64, r->memory_swap);
  if (limit && memsw && r->memory_swap <= 0) {
    _cleanup_error_ agsx_error_t e = NULL;
    write_at(h->fd, "memory.memsw.limit_in_bytes", "-1", &e);
  }
  bool swap_first = false;
  if (limit && swap) {
    _cleanup_free_ char *cur = NULL;
    if (agsx_read_file_at(h->fd, "memory.limit_in_bytes", SMALL_MAX, &cur, NULL, err) < 0)
      return agsx_error_wrap(err, "cgroup `%s`", cg->path);
    swap_first = strtoull(cur, NULL, 10) < (uint64_t)r->memory_swap;
  }
  if (swap && swap_first && write_ctrl(cg, "memory", "memory.memsw.limit_in_bytes", sv, err) < 0)
    return -1;
  if (limit && write_ctrl(cg, "memory", "memory.limit_in_bytes", lv, err) < 0)
    return -1;
  if (swap && !swap_first && write_ctrl(cg, "memory", "memory.memsw.limit_in_bytes", sv, err) < 0)
    return -1;
  /* Only v1 has them; v2 ignores them, as runc does. */
  if (r->has_swappiness) {
    snprintf(sv, sizeof(sv), "%u", r->swappiness);
    if (write_ctrl(cg, "memory", "memory.swappiness", sv, err) < 0)
      return -1;
  }
  if (r->disable_oom_killer && write_ctrl(cg, "memory", "memory.oom_control", "1", err) < 0)
    return -1;
  return 0;
}

static int update_memory(struct agsx_oci_cgroup *cg, const struct agsx_oci_resources *r,
                         agsx_error_t *err) {
  char v[32];
  if (!cg->v2 && update_memory_v1(cg, r, err) < 0)
    return -1;
  /* v2's swap first: a value that cannot be converted changes nothing. */
  int64_t swap = r->memory_swap;
  if (cg->v2 && swap > 0 &&
      agsx_oci_cgroup_swap_v2(r->memory_swap, r->memory_limit, &swap, err) < 0)
    return -1;
  if (cg->v2 && r->memory_limit > 0) {
    snprintf(v, sizeof(v), "%" PRId64, r->memory_limit);
    if (write_ctrl(cg, "memory", "memory.max", v, err) < 0)
      return -1;
  }
  if (cg->v2 && r->memory_swap > 0) {
    snprintf(v, sizeof(v), "%" PRId64, swap);
    if (write_ctrl(cg, "memory", "memory.swap.max", v, err) < 0)
      return -1;
  }
  if (cg->v2 && (r->has_swappiness || r->disable_oom_killer))
    agsx_debug("cgroup `%s`: memory.swappiness and disableOOMKiller ignored on cgroup v2",
               cg->path);
  if (r->memory_reservation > 0) {
    snprintf(v, sizeof(v), "%" PRId64, r->memory_reservation);
    if (write_ctrl(cg, "memory", cg->v2 ? "memory.low" : "memory.soft_limit_in_bytes", v, err) < 0)
      return -1;
  }
  return 0;
}

static int update_cpu(struct agsx_oci_cgroup *cg, const struct agsx_oci_resources *r,
                      agsx_error_t *err) {
  char v[64];
  if (r->cpu_shares) {
    snprintf(v, sizeof(v), "%" PRIu64,
             cg->v2 ? agsx_oci_cgroup_cpu_weight(r->cpu_shares) : r->cpu_shares);
    if (write_ctrl(cg, "cpu", cg->v2 ? "cpu.weight" : "cpu.shares", v, err) < 0)
      return -1;
  }
  if (r->cpu_quota != -1 || r->cpu_period) {
    uint64_t period = r->cpu_period ? r->cpu_period : 100000;
    if (cg->v2) {
      if (r->cpu_quota > 0)
        snprintf(v, sizeof(v), "%" PRId64 " %" PRIu64, r->cpu_quota, period);
      else
        snprintf(v, sizeof(v), "max %" PRIu64, period);
      if (write_ctrl(cg, "cpu", "cpu.max", v, err) < 0)
        return -1;
    } else {
      snprintf(v, sizeof(v), "%" PRIu64, period);
      if (write_ctrl(cg, "cpu", "cpu.cfs_period_us", v, err) < 0)
        return -1;
      snprintf(v, sizeof(v), "%" PRId64, r->cpu_quota > 0 ? r->cpu_quota : -1);
      if (write_ctrl(cg, "cpu", "cpu.cfs_quota_us", v, err) < 0)
        return -1;
    }
  }
  if (r->cpus && r->cpus[0] && write_ctrl(cg, "cpuset", "cpuset.cpus", r->cpus, err) < 0)
    return -1;
  if (r->mems && r->mems[0] && write_ctrl(cg, "cpuset", "cpuset.mems", r->mems, err) < 0)
    return -1;
  return 0;
}

static int update_devices(struct agsx_oci_cgroup *cg, const struct agsx_oci_resources *r,
                          const struct agsx_oci_device *extra, size_t n_extra, agsx_error_t *err) {
  if (r->n_devices == 0)
    return 0;

  /* v2 has no device files (an eBPF program would be needed); the
   * container cannot make device nodes in its user namespace and /dev
   * holds only what agsx binds, so the rules add nothing there. */
  struct hier *h = cg->v2 ? NULL : find(cg, "devices");
  if (h == NULL) {
    agsx_debug("cgroup `%s`: device rules not written (no devices controller)", cg->path);
    return 0;
  }
  for (size_t i = 0; i < r->n_devices; i++) {
    const struct agsx_oci_device_rule *d = &r->devices[i];
    char maj[24] = "*", min[24] = "*", rule[80];
    if (d->major >= 0)
      snprintf(maj, sizeof(maj), "%" PRId64, d->major);
    if (d->minor >= 0)
      snprintf(min, sizeof(min), "%" PRId64, d->minor);
    if (d->type == 'a')
      snprintf(rule, sizeof(rule), "a");
    else
      snprintf(rule, sizeof(rule), "%c %s:%s %s", d->type, maj, min, d->access);
    if (write_at(h->fd, d->allow ? "devices.allow" : "devices.deny", rule, err) < 0)
      return agsx_error_wrap(err, "cgroup `%s`: device rule", cg->path);
  }
  /* The spec's default devices stay usable whatever the rules (runc adds
   * the same): null, zero, full, random, urandom, tty, ptmx, the ptys. */
  static const char *const defaults[] = {"c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm",
                                         "c 1:9 rwm", "c 5:0 rwm", "c 5:2 rwm", "c 136:* rwm"};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(defaults); i++)
    if (write_at(h->fd, "devices.allow", defaults[i], err) < 0)
      return agsx_error_wrap(err, "cgroup `%s`: device rule", cg->path);
  for (size_t i = 0; extra && i < n_extra; i++) {
    const struct agsx_oci_device *d = &extra[i];
    char rule[80];
    snprintf(rule, sizeof(rule), "%c %" PRId64 ":%" PRId64 " rwm", d->type == 'u' ? 'c' : d->type,
             d->major, d->minor);
    if (d->type != 'p' && write_at(h->fd, "devices.allow", rule, err) < 0)
      return agsx_error_wrap(err, "cgroup `%s`: device rule", cg->path);
  }
  return 0;
}

/* blockIO: the weight (BFQ's file when the kernel has it, as runc) and
 * the throttles, v1 blkio.throttle.* or v2 io.max. */
static int update_io(struct agsx_oci_cgroup *cg, const struct agsx_oci_resources *r,
                     agsx_error_t *err) {
  const char *ctrl = cg->v2 ? "io" : "blkio";
  char v[64];
  if (r->blkio_weight) {
    struct hier *h = find(cg, ctrl);
    const char *bfq = cg->v2 ? "io.bfq.weight" : "blkio.bfq.weight";
    const char *plain = cg->v2 ? "io.weight" : "blkio.weight";
    bool has_bfq = h && faccessat(h->fd, bfq, F_OK, 0) == 0;
    if (h && !has_bfq && faccessat(h->fd, plain, F_OK, 0) < 0)
      return agsx_error_set(err, 0,
                            "cannot apply linux.resources.blockIO.weight: no `%s` or `%s` in "
                            "cgroup `%s` (the disk's I/O scheduler has no weights: BFQ)",
                            bfq, plain, cg->path);
    uint64_t w = cg->v2 && !has_bfq ? agsx_oci_cgroup_io_weight(r->blkio_weight) : r->blkio_weight;
    snprintf(v, sizeof(v), cg->v2 && !has_bfq ? "default %" PRIu64 : "%" PRIu64, w);
    if (write_ctrl(cg, ctrl, has_bfq ? bfq : plain, v, err) < 0)
      return -1;
  }
  static const char *const v1[] = {
      "blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device",
      "blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device"};
  static const char *const v2[] = {"rbps", "wbps", "riops", "wiops"};
  for (size_t i = 0; i < r->n_throttle; i++) {
    const struct agsx_oci_throttle *t = &r->throttle[i];
    if (cg->v2)
      snprintf(v, sizeof(v), "%" PRId64 ":%" PRId64 " %s=%s", t->major, t->minor, v2[t->kind],
               t->rate ? "" : "max");
    else
      snprintf(v, sizeof(v), "%" PRId64 ":%" PRId64 " %" PRIu64, t->major, t->minor, t->rate);
    if (cg->v2 && t->rate)
      snprintf(v + strlen(v), sizeof(v) - strlen(v), "%" PRIu64, t->rate);
    if (write_ctrl(cg, ctrl, cg->v2 ? "io.max" : v1[t->kind], v, err) < 0)
      return -1;
  }
  return 0;
}

/* Whether the host can hand out huge pages of SIZE ("2MB"): a pool or an
 * overcommit allowance for it in /sys/kernel/mm/hugepages. A file that
 * cannot be read but exists counts as yes (fail closed). */
static bool hugepages_available(const char *size) {
  size_t digits = strspn(size, "0123456789");
  uint64_t kb = strtoull(size, NULL, 10) << (size[digits] == 'G'   ? 20
                                             : size[digits] == 'M' ? 10
                                                                   : 0);
  static const char *const files[] = {"nr_hugepages", "nr_overcommit_hugepages"};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(files); i++) {
    char path[128];
    snprintf(path, sizeof(path), "/sys/kernel/mm/hugepages/hugepages-%" PRIu64 "kB/%s", kb,
             files[i]);
    _cleanup_free_ char *v = NULL;
    _cleanup_error_ agsx_error_t e = NULL;
    if (agsx_read_file_at(AT_FDCWD, path, SMALL_MAX, &v, NULL, &e) < 0 ? e->errno_ != ENOENT
                                                                       : strtoull(v, NULL, 10) > 0)
      return true;
  }
  return false;
}

/* hugepageLimits where the hugetlb controller is (v1 its hierarchy, v2
 * in the leaf's cgroup.controllers). Without it a limit is skipped only
 * where the host has no huge pages of that size to give, so that it
 * limits nothing; else refused: agsx never applies less than asked (runc
 * 1.1 refuses every limit there). A page size the kernel has no file for
 * is an error. */
static int update_hugetlb(struct agsx_oci_cgroup *cg, const struct agsx_oci_resources *r,
                          agsx_error_t *err) {
  if (r->n_hugepages == 0)
    return 0;
  struct hier *h = find(cg, "hugetlb");
  _cleanup_free_ char *avail = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  if (h && cg->v2 &&
      (agsx_read_file_at(h->fd, "cgroup.controllers", SMALL_MAX, &avail, NULL, &e) < 0 ||
       !has_word(avail, "hugetlb")))
    h = NULL;
  for (size_t i = 0; h == NULL && i < r->n_hugepages; i++)
    if (hugepages_available(r->hugepages[i].size))
      return agsx_error_set(err, 0,
                            "cannot apply linux.resources.hugepageLimits: the host has %s huge "
                            "pages and cgroup `%s` no hugetlb controller to limit them",
                            r->hugepages[i].size, cg->path);
  if (h == NULL) {
    agsx_debug("cgroup `%s`: hugepageLimits not written (no hugetlb controller, and no such "
               "huge pages on the host)",
               cg->path);
    return 0;
  }
  for (size_t i = 0; i < r->n_hugepages; i++) {
    const struct agsx_oci_hugepage *hp = &r->hugepages[i];
    char file[64], v[32];
    snprintf(file, sizeof(file), cg->v2 ? "hugetlb.%s.max" : "hugetlb.%s.limit_in_bytes", hp->size);
    if (hp->limit == UINT64_MAX || hp->limit > INT64_MAX)
      snprintf(v, sizeof(v), "%s", cg->v2 ? "max" : "-1");
    else
      snprintf(v, sizeof(v), "%" PRIu64, hp->limit);
    if (faccessat(h->fd, file, F_OK, 0) < 0)
      return agsx_error_set(err, 0,
                            "cannot apply linux.resources.hugepageLimits: page size `%s` is not "
                            "one the kernel offers (cgroup `%s` has no `%s`)",
                            hp->size, cg->path, file);
    if (write_at(h->fd, file, v, err) < 0)
      return agsx_error_wrap(err, "cgroup `%s`: linux.resources.hugepageLimits", cg->path);
  }
  return 0;
}

int agsx_oci_cgroup_update(struct agsx_oci_cgroup *cg, const struct agsx_oci_resources *r,
                           agsx_error_t *err) {
  if (update_memory(cg, r, err) < 0 || update_cpu(cg, r, err) < 0 || update_io(cg, r, err) < 0 ||
      update_hugetlb(cg, r, err) < 0 || update_devices(cg, r, cg->devices, cg->n_devices, err) < 0)
    return -1;
  if (r->pids_limit != 0) {
    char v[32];
    if (r->pids_limit > 0)
      snprintf(v, sizeof(v), "%" PRId64, r->pids_limit);
    else
      snprintf(v, sizeof(v), "max");
    if (write_ctrl(cg, "pids", "pids.max", v, err) < 0)
      return -1;
  }
  return 0;
}

int agsx_oci_cgroup_attach(struct agsx_oci_cgroup *cg, pid_t pid, agsx_error_t *err) {
  if (pid <= 0) /* "0" would move the writer itself */
    return agsx_error_set(err, EINVAL, "join cgroup `%s`: no process", cg->path);
  char v[32];
  snprintf(v, sizeof(v), "%d", (int)pid);
  for (size_t i = 0; i < cg->n; i++)
    if (cg->h[i].fd >= 0 && write_at(cg->h[i].fd, "cgroup.procs", v, err) < 0)
      return agsx_error_wrap(err, "join cgroup `%s` in `%s`", cg->path, cg->h[i].mnt);
  return 0;
}

static void collect(int dfd, int depth, pid_t **v, size_t *n, size_t *cap) {
  _cleanup_free_ char *buf = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_read_file_at(dfd, "cgroup.procs", PROCS_MAX, &buf, NULL, &e) == 0)
    for (char *p = buf, *end; *p; p = end) {
      long pid = strtol(p, &end, 10);
      if (end == p)
        break;
      if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 16;
        *v = xrealloc(*v, *cap * sizeof(pid_t));
      }
      (*v)[(*n)++] = (pid_t)pid;
    }
  if (depth >= 16)
    return;
  _cleanup_dir_ DIR *d = agsx_dir_stream(dfd);
  for (struct dirent *de; d && (de = readdir(d));) {
    if (de->d_type != DT_DIR || de->d_name[0] == '.')
      continue;
    _cleanup_close_ int sub = openat(dfd, de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (sub >= 0)
      collect(sub, depth + 1, v, n, cap);
  }
}

int agsx_oci_cgroup_pids(struct agsx_oci_cgroup *cg, pid_t **ret, size_t *ret_n,
                         agsx_error_t *err) {
  *ret = NULL;
  *ret_n = 0;
  size_t cap = 0;
  /* One hierarchy is enough: every process is in each (pids, else the first). */
  struct hier *h = find(cg, "pids");
  if (h == NULL)
    for (size_t i = 0; i < cg->n && h == NULL; i++)
      if (cg->h[i].fd >= 0)
        h = &cg->h[i];
  if (h == NULL)
    return agsx_error_set(err, ENOENT, "cgroup `%s`", cg->path);
  collect(h->fd, 0, ret, ret_n, &cap);
  return 0;
}

static void sleep_ms(int ms) {
  struct timespec ts = {0, ms * 1000000L};
  nanosleep(&ts, NULL);
}

int agsx_oci_cgroup_freeze(struct agsx_oci_cgroup *cg, bool frozen, agsx_error_t *err) {
  struct hier *h = find(cg, "freezer");
  if (h == NULL)
    return agsx_error_set(err, 0, "cgroup `%s`: no freezer", cg->path);
  const char *file = cg->v2 ? "cgroup.freeze" : "freezer.state";
  const char *val = cg->v2 ? (frozen ? "1" : "0") : (frozen ? "FROZEN" : "THAWED");
  for (int i = 0; i < 1000; i++) {
    if (write_at(h->fd, file, val, err) < 0)
      return -1;
    bool now;
    if (agsx_oci_cgroup_is_frozen(cg, &now, err) < 0)
      return -1;
    if (now == frozen)
      return 0;
    sleep_ms(1);
  }
  return agsx_error_set(err, EBUSY, "cgroup `%s`: the freezer did not settle", cg->path);
}

int agsx_oci_cgroup_is_frozen(struct agsx_oci_cgroup *cg, bool *ret, agsx_error_t *err) {
  *ret = false;
  struct hier *h = find(cg, "freezer");
  if (h == NULL)
    return 0;
  _cleanup_free_ char *buf = NULL;
  if (cg->v2) {
    if (agsx_read_file_at(h->fd, "cgroup.events", SMALL_MAX, &buf, NULL, err) < 0)
      return -1;
    *ret = strstr(buf, "frozen 1") != NULL;
    return 0;
  }
  if (agsx_read_file_at(h->fd, "freezer.state", SMALL_MAX, &buf, NULL, err) < 0)
    return -1;
  *ret = strncmp(buf, "FROZEN", 6) == 0;
  return 0;
}

int agsx_oci_cgroup_signal(struct agsx_oci_cgroup *cg, int sig, agsx_error_t *err) {
  _cleanup_free_ pid_t *pids = NULL;
  size_t n;
  if (agsx_oci_cgroup_pids(cg, &pids, &n, err) < 0)
    return -1;
  for (size_t i = 0; i < n; i++)
    kill(pids[i], sig);
  return 0;
}

static int rmdir_leaf(int mntfd, const char *path, agsx_error_t *err) {
  for (int i = 0; i < 200; i++) {
    if (unlinkat(mntfd, path, AT_REMOVEDIR) == 0 || errno == ENOENT)
      return 0;
    if (errno != EBUSY)
      break;
    sleep_ms(5);
  }
  return agsx_error_set(err, errno, "rmdir cgroup `%s`", path);
}

int agsx_oci_cgroup_destroy(struct agsx_oci_cgroup *cg, agsx_error_t *err) {
  if (cg == NULL)
    return 0;
  /* A cgroup agsx found (the engine's, or shared) is not agsx's to empty:
   * the container's own processes died with its pid namespace's init. */
  if (!cg->owned)
    return 0;
  bool frozen = false;
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_oci_cgroup_is_frozen(cg, &frozen, &e) == 0 && frozen)
    agsx_oci_cgroup_freeze(cg, false, &e);
  for (int round = 0; round < 400; round++) {
    _cleanup_free_ pid_t *pids = NULL;
    size_t n = 0;
    _cleanup_error_ agsx_error_t e2 = NULL;
    if (agsx_oci_cgroup_pids(cg, &pids, &n, &e2) < 0 || n == 0)
      break;
    for (size_t i = 0; i < n; i++)
      kill(pids[i], SIGKILL);
    sleep_ms(5);
  }
  int r = 0;
  for (size_t i = 0; i < cg->n; i++) {
    if (cg->h[i].fd < 0)
      continue;
    agsx_closep(&cg->h[i].fd);
    _cleanup_close_ int root = open(cg->h[i].mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root >= 0 && rmdir_leaf(root, cg->path, err) < 0)
      r = -1;
  }
  return r;
}

void agsx_oci_cgroup_free(struct agsx_oci_cgroup *cg) {
  if (cg == NULL)
    return;
  for (size_t i = 0; i < cg->n; i++) {
    agsx_closep(&cg->h[i].fd);
    free(cg->h[i].mnt);
    free(cg->h[i].opts);
  }
  free(cg->path);
  free(cg);
}

void agsx_oci_cgroup_freep(struct agsx_oci_cgroup **cg) {
  agsx_oci_cgroup_free(*cg);
  *cg = NULL;
}
