/* agsx — host/cgroup: per-sandbox control groups, what every backend
 * shares (see cgroup.h and cgroup-internal.h). */
#include "config.h"

#include "host/cgroup-internal.h"
#include "host/rootless.h"
#include "host/systemd.h"
#include "util/conf.h"

#include <ctype.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>

const char *const cg_ctrl_name[CTRL_N] = {"memory", "cpu", "pids", "cpuacct", "freezer"};

#define KILL_TIMEOUT_NS (2000 * NSEC_PER_MSEC)
#define RMDIR_TIMEOUT_NS (1000 * NSEC_PER_MSEC)
#define NAME_MAX_LEN 64

/* ---- layout: mode, manager and where each controller lives ---------------------------------- */

void cg_layout_free(struct layout *l) {
  if (l == NULL)
    return;
  free(l->asked);
  free(l->root);
  free(l->setting);
  for (int c = 0; c < CTRL_N; c++)
    free(l->mnt[c]);
  free(l);
}

void cg_layout_freep(struct layout **l) {
  cg_layout_free(*l);
  *l = NULL;
}

/* Controller lists: "cpu,cpuacct" (mountinfo), "cpu memory pids" (cgroup.controllers). */
bool cg_list_has(const char *list, const char *word) { return agsx_list_has(list, word, ", \t\n"); }

static struct layout *layout_dup(const struct layout *src) {
  struct layout *l = xzalloc(sizeof(*l));
  l->asked = xstrdup(src->asked);
  l->root = xstrdup(src->root);
  l->v2 = src->v2;
  l->setting = xstrdup(src->setting);
  l->manager = src->manager;
  l->why = src->why;
  for (int c = 0; c < CTRL_N; c++)
    l->mnt[c] = src->mnt[c] ? xstrdup(src->mnt[c]) : NULL;
  return l;
}

/* An ordinary user's agsx (host/rootless.h) makes cgroups only where
 * systemd's user manager delegates them to the user: in user@UID.service,
 * as transient scopes the user manager starts (agsx.slice/agsx-<id>.scope
 * there). The manager must run (a login, or lingering) and be reachable on
 * its private socket. Elsewhere (cgroup v1, no systemd, no user manager)
 * sandboxes get no cgroup: limits are off (AGSX_CGROUP_NONE). */
static void rootless_manager(struct layout *l, const char *setting, bool custom_root) {
  l->manager = AGSX_CGROUP_NONE;
  struct agsx_rootless_info ri;
  agsx_rootless_describe(&ri);
  const char *run = getenv("XDG_RUNTIME_DIR");
  if (strcmp(setting, "cgroupfs") == 0) {
    l->why = "an ordinary user's agsx manages no cgroup itself (cgroup-manager = cgroupfs): "
             "limits are off";
    return;
  }
  if (!l->v2 || custom_root || !agsx_systemd_booted()) {
    l->why = "an ordinary user's agsx makes cgroups only where systemd's user manager "
             "delegates them (systemd on cgroup v2): limits are off";
    return;
  }
  _cleanup_free_ char *sock = run && run[0] == '/' ? xasprintf("%s/systemd/private", run) : NULL;
  _cleanup_free_ char *dir =
      xasprintf("%s/user.slice/user-%lu.slice/user@%lu.service", l->asked, ri.uid, ri.uid);
  struct stat st;
  if (sock == NULL || access(sock, F_OK) < 0 || stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
    l->why = "systemd's user manager of this user is not running (log in, or as root: "
             "loginctl enable-linger USER): limits are off";
    return;
  }
  free(l->root);
  l->root = steal_ptr(&dir);
  for (int c = 0; c < CTRL_N; c++) {
    free(l->mnt[c]);
    l->mnt[c] = xstrdup(l->root);
  }
  l->manager = AGSX_CGROUP_SYSTEMD;
  l->why = "systemd's user manager delegates user@UID.service to the user";
}

static int layout_detect(const char *root, bool restrict_to_root, const char *setting,
                         struct layout **ret, agsx_error_t *err) {
  struct statfs sfs;
  if (statfs(root, &sfs) < 0)
    return agsx_error_set(err, errno, "statfs cgroup root `%s`", root);
  _cleanup_layout_ struct layout *l = xzalloc(sizeof(*l));
  l->asked = xstrdup(root);
  l->root = xstrdup(root);
  l->v2 = sfs.f_type == CGROUP2_SUPER_MAGIC;
  for (int c = 0; c < CTRL_N && l->v2; c++)
    l->mnt[c] = xstrdup(root);
  /* v1 controllers may live anywhere (/cgroup/memory on old systems); only a
   * root given explicitly limits the search to the mounts below it. */
  if (!l->v2 && cg_layout_scan_v1(l, restrict_to_root, err) < 0)
    return -1;
  l->setting = xstrdup(setting);
  if (agsx_cgroup_manager_choose(setting, agsx_systemd_booted(), l->v2, restrict_to_root,
                                 &l->manager, &l->why, err) < 0)
    return -1;
  if (agsx_rootless())
    rootless_manager(l, setting, restrict_to_root);
  agsx_debug("cgroup %s at `%s`, manager %s: %s", l->v2 ? "v2" : "v1", root,
             l->manager == AGSX_CGROUP_SYSTEMD ? "systemd"
             : l->manager == AGSX_CGROUP_NONE  ? "none"
                                               : "cgroupfs",
             l->why);
  *ret = steal_ptr(&l);
  return 0;
}

/* The layout of the last root and manager setting asked for, detected once
 * (a statfs, and a mountinfo read on v1: ~50 us, twice per sandbox
 * otherwise). Paths only, no fds: a cached fd would be inherited by every
 * sandbox init. A root or setting change (AGSX_CGROUP_ROOT,
 * AGSX_CGROUP_MANAGER: tests switch) detects again; agsx_cgroup_reset
 * forgets it (a long-lived process after a remount). Callers get a copy. */
static pthread_mutex_t layout_lock = PTHREAD_MUTEX_INITIALIZER;
static struct layout *layout_cache;

void agsx_cgroup_reset(void) {
  pthread_mutex_lock(&layout_lock);
  cg_layout_free(layout_cache);
  layout_cache = NULL;
  pthread_mutex_unlock(&layout_lock);
}

int cg_layout_get(struct layout **ret, agsx_error_t *err) {
  const char *env = getenv("AGSX_CGROUP_ROOT");
  const char *root = env && *env ? env : AGSX_CGROUP_DEFAULT_ROOT;
  _cleanup_free_ char *setting = NULL;
  if (agsx_conf_get("cgroup-manager", "AGSX_CGROUP_MANAGER", &setting, err) < 0)
    return -1;
  const char *set = setting ? setting : "auto";
  int r = 0;
  pthread_mutex_lock(&layout_lock);
  if (layout_cache == NULL || strcmp(layout_cache->asked, root) != 0 ||
      strcmp(layout_cache->setting, set) != 0) {
    struct layout *l = NULL;
    r = layout_detect(root, env && *env, set, &l, err);
    if (r == 0) {
      cg_layout_free(layout_cache);
      layout_cache = l;
    }
  }
  if (r == 0)
    *ret = layout_dup(layout_cache);
  pthread_mutex_unlock(&layout_lock);
  return r;
}

/* The directory inside each hierarchy that holds the sandbox cgroups. */
static int parent_get(const char **ret, agsx_error_t *err) {
  const char *p = getenv("AGSX_CGROUP_PARENT");
  if (p == NULL || *p == '\0')
    p = AGSX_CGROUP_DEFAULT_PARENT;
  bool ok = strlen(p) <= NAME_MAX_LEN && strcmp(p, ".") != 0 && strcmp(p, "..") != 0;
  for (const char *s = p; *s && ok; s++)
    ok = isalnum((unsigned char)*s) || *s == '_' || *s == '.' || *s == '-';
  if (!ok)
    return agsx_error_set(err, EINVAL, "invalid cgroup parent `%s` (AGSX_CGROUP_PARENT)", p);
  *ret = p;
  return 0;
}

bool agsx_cgroup_name_is_valid(const char *name) {
  size_t n = strlen(name);
  if (n < 8 || n > 64)
    return false;
  for (const char *s = name; *s; s++)
    if (!isdigit((unsigned char)*s) && !(*s >= 'a' && *s <= 'f'))
      return false;
  return true;
}

/* ---- small file helpers ------------------------------------------------------------------ */

/* Writes VAL to DFD/FILE in one write(2): cgroup files take one value per
 * write. With OPTIONAL, a missing file is not an error (returns 0). */
int cg_write_file(int dfd, const char *file, const char *val, bool optional, agsx_error_t *err) {
  _cleanup_close_ int fd = openat(dfd, file, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0 && optional && errno == ENOENT) {
    agsx_debug("cgroup file `%s` missing, skipped", file);
    return 0;
  }
  if (fd < 0)
    return agsx_error_set(err, errno, "open `%s`", file);
  if (agsx_write_all(fd, val, strlen(val)) < 0)
    return agsx_error_set(err, errno, "write `%s` to `%s`", val, file);
  return 0;
}

/* Reads "KEY VALUE" from the lines of BUF (memory.events, memory.oom_control). */
bool cg_kv_get(const char *buf, const char *key, uint64_t *ret) {
  size_t kl = strlen(key);
  for (const char *p = buf; *p; p += strcspn(p, "\n"), p += *p == '\n') {
    if (strncmp(p, key, kl) == 0 && p[kl] == ' ') {
      *ret = strtoull(p + kl + 1, NULL, 10);
      return true;
    }
  }
  return false;
}

static uint64_t read_u64(int dfd, const char *file) {
  _cleanup_free_ char *buf = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  if (dfd < 0 || agsx_read_file_at(dfd, file, SMALL_FILE_MAX, &buf, NULL, &e) < 0)
    return 0;
  return strtoull(buf, NULL, 10);
}

void cg_sleep_ns(int64_t ns) {
  struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
    ;
}

int cg_open_dir_at(int dfd, const char *name) {
  return openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
}

/* ---- the cgroup object --------------------------------------------------------------------- */

struct agsx_cgroup *cg_new(bool v2, const char *parent, const char *name) {
  struct agsx_cgroup *cg = xzalloc(sizeof(*cg));
  cg->v2 = v2;
  cg->parent = xstrdup(parent);
  cg->name = xstrdup(name);
  for (int i = 0; i < CTRL_N; i++)
    cg->h[i].parentfd = cg->h[i].fd = -1;
  return cg;
}

void agsx_cgroup_free(struct agsx_cgroup *cg) {
  if (cg == NULL)
    return;
  for (size_t i = 0; i < cg->n; i++) {
    agsx_closep(&cg->h[i].parentfd);
    agsx_closep(&cg->h[i].fd);
    free(cg->h[i].mnt);
  }
  free(cg->name);
  free(cg->parent);
  free(cg->unit);
  free(cg);
}

void agsx_cgroup_freep(struct agsx_cgroup **cg) {
  agsx_cgroup_free(*cg);
  *cg = NULL;
}

/* The hierarchy for controller C, sharing one entry between controllers
 * mounted together (cpu,cpuacct,memory on some systems). */
struct hier *cg_hier_get(struct agsx_cgroup *cg, const char *mnt, enum ctrl c) {
  for (size_t i = 0; i < cg->n; i++)
    if (strcmp(cg->h[i].mnt, mnt) == 0) {
      cg->h[i].ctrls |= BIT(c);
      return &cg->h[i];
    }
  struct hier *h = &cg->h[cg->n++];
  h->mnt = xstrdup(mnt);
  h->ctrls = BIT(c);
  return h;
}

/* True when CG already has the hierarchy mounted at MNT (then noting that it
 * carries C too). */
static bool hier_has(struct agsx_cgroup *cg, const char *mnt, enum ctrl c) {
  for (size_t i = 0; i < cg->n; i++)
    if (strcmp(cg->h[i].mnt, mnt) == 0) {
      cg->h[i].ctrls |= BIT(c);
      return true;
    }
  return false;
}

/* The leaf fd that carries controller C, or -1. v2 has one directory for all. */
static int hier_fd(struct agsx_cgroup *cg, enum ctrl c) {
  for (size_t i = 0; i < cg->n; i++)
    if (cg->v2 || (cg->h[i].ctrls & BIT(c)))
      return cg->h[i].fd;
  return -1;
}

int agsx_cgroup_fd(struct agsx_cgroup *cg) { return cg->v2 && cg->n > 0 ? cg->h[0].fd : -1; }

/* ---- creation -------------------------------------------------------------------------------- */

static unsigned needed_ctrls(const struct agsx_cgroup_limits *lim, const struct layout *l) {
  unsigned need = (lim->memory ? BIT(CTRL_MEMORY) : 0) | (lim->cpu_quota_us ? BIT(CTRL_CPU) : 0) |
                  (lim->pids ? BIT(CTRL_PIDS) : 0);
  if (need || !lim->track || l->v2)
    return need;
  static const enum ctrl pref[] = {CTRL_PIDS, CTRL_MEMORY, CTRL_CPU};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(pref); i++)
    if (l->mnt[pref[i]])
      return BIT(pref[i]);
  return BIT(CTRL_PIDS); /* none mounted: cg_create_v1 says so */
}

/* Opens <mnt>/<parent>, making it first if it is missing (racing agsx
 * processes are fine). The mount point comes from mountinfo (or the root
 * agsx was given), not from a sandbox: one path open, and in the usual case
 * (the parent exists) one syscall. */
int cg_hier_open_parent(struct agsx_cgroup *cg, struct hier *h, agsx_error_t *err) {
  _cleanup_free_ char *path = xasprintf("%s/%s", h->mnt, cg->parent);
  h->parentfd = cg_open_dir_at(AT_FDCWD, path);
  if (h->parentfd < 0 && errno == ENOENT) {
    if (mkdir(path, 0755) < 0 && errno != EEXIST)
      return agsx_error_set(err, errno, "mkdir `%s` in `%s`", cg->parent, h->mnt);
    h->parentfd = cg_open_dir_at(AT_FDCWD, path);
  }
  if (h->parentfd < 0)
    return agsx_error_set(err, errno, "open `%s` in `%s`", cg->parent, h->mnt);
  return 0;
}

int cg_hier_make_leaf(struct agsx_cgroup *cg, struct hier *h, agsx_error_t *err) {
  if (mkdirat(h->parentfd, cg->name, 0755) < 0)
    return agsx_error_set(err, errno, "mkdir `%s/%s` in `%s`", cg->parent, cg->name, h->mnt);
  h->owned = true;
  h->fd = cg_open_dir_at(h->parentfd, cg->name);
  if (h->fd < 0)
    return agsx_error_set(err, errno, "open `%s/%s` in `%s`", cg->parent, cg->name, h->mnt);
  return 0;
}

static int apply_memory(int fd, bool v2, uint64_t bytes, agsx_error_t *err) {
  _cleanup_free_ char *v = xasprintf("%" PRIu64, bytes);
  if (v2) {
    if (cg_write_file(fd, "memory.max", v, false, err) < 0)
      return -1;
    return cg_write_file(fd, "memory.swap.max", "0", true, err); /* absent without CONFIG_SWAP */
  }
  /* memsw (memory + swap) must stay >= limit_in_bytes, so it goes second;
   * equal values leave no swap escape. Absent without swap accounting. */
  if (cg_write_file(fd, "memory.limit_in_bytes", v, false, err) < 0)
    return -1;
  return cg_write_file(fd, "memory.memsw.limit_in_bytes", v, true, err);
}

static int apply_cpu(int fd, bool v2, uint64_t quota, uint64_t period, agsx_error_t *err) {
  if (v2) {
    _cleanup_free_ char *v = xasprintf("%" PRIu64 " %" PRIu64, quota, period);
    return cg_write_file(fd, "cpu.max", v, false, err);
  }
  _cleanup_free_ char *p = xasprintf("%" PRIu64, period), *q = xasprintf("%" PRIu64, quota);
  if (cg_write_file(fd, "cpu.cfs_period_us", p, false, err) < 0)
    return -1;
  return cg_write_file(fd, "cpu.cfs_quota_us", q, false, err);
}

static int apply_pids(int fd, uint64_t n, agsx_error_t *err) {
  _cleanup_free_ char *v = xasprintf("%" PRIu64, n);
  return cg_write_file(fd, "pids.max", v, false, err);
}

int cg_apply_limits(struct agsx_cgroup *cg, const struct agsx_cgroup_limits *lim,
                    agsx_error_t *err) {
  uint64_t period = lim->cpu_period_us ? lim->cpu_period_us : AGSX_CGROUP_CPU_PERIOD_US;
  if (lim->memory && apply_memory(hier_fd(cg, CTRL_MEMORY), cg->v2, lim->memory, err) < 0)
    return agsx_error_wrap(err, "cannot apply memory limit");
  if (lim->cpu_quota_us &&
      apply_cpu(hier_fd(cg, CTRL_CPU), cg->v2, lim->cpu_quota_us, period, err) < 0)
    return agsx_error_wrap(err, "cannot apply cpu limit");
  if (lim->pids && apply_pids(hier_fd(cg, CTRL_PIDS), lim->pids, err) < 0)
    return agsx_error_wrap(err, "cannot apply pids limit");
  return 0;
}

int agsx_cgroup_create(const char *name, const struct agsx_cgroup_limits *lim,
                       struct agsx_cgroup **ret, agsx_error_t *err) {
  if (!agsx_cgroup_name_is_valid(name))
    return agsx_error_set(err, EINVAL, "invalid cgroup name `%s`", name);
  _cleanup_layout_ struct layout *l = NULL;
  const char *parent = NULL;
  if (cg_layout_get(&l, err) < 0 || parent_get(&parent, err) < 0)
    return agsx_error_wrap(err, "create cgroup `%s`", name);
  if (l->manager == AGSX_CGROUP_NONE) {
    if (lim->memory || lim->cpu_quota_us || lim->pids)
      return agsx_error_set(err, EPERM,
                            "limits (memory, cpus, pids) need a cgroup, and %s; run without them, "
                            "or as root",
                            l->why);
    static bool warned;
    if (!warned)
      agsx_warn("this sandbox has no memory, CPU or pids limit: %s", l->why);
    warned = true;
    *ret = cg_new(false, parent, name);
    return 0;
  }
  bool systemd = l->manager == AGSX_CGROUP_SYSTEMD;
  _cleanup_free_ char *scope = systemd ? xasprintf(AGSX_CGROUP_SLICE "/agsx-%s.scope", name) : NULL;
  _cleanup_cgroup_ struct agsx_cgroup *cg =
      systemd ? cg_new(true, scope, "sandbox") : cg_new(l->v2, parent, name);
  unsigned need = needed_ctrls(lim, l);
  int r = systemd ? cg_create_systemd(cg, l, need, lim, err)
          : l->v2 ? cg_create_v2(cg, l, need, err)
                  : cg_create_v1(cg, l, need, err);
  if (r == 0 && !cg->pending)
    r = cg_apply_limits(cg, lim, err);
  if (r < 0) {
    _cleanup_error_ agsx_error_t e2 = NULL;
    if (agsx_cgroup_destroy(cg, &e2) < 0)
      agsx_warn("remove half-created cgroup `%s/%s`: %s", cg->parent, cg->name, e2->msg);
    return agsx_error_wrap(err, "create cgroup `%s/%s`", cg->parent, cg->name);
  }
  agsx_debug("created cgroup `%s/%s` in %zu hierarchies%s", cg->parent, cg->name, cg->n,
             cg->pending ? " (its scope comes with the init)" : "");
  *ret = steal_ptr(&cg);
  return 0;
}

int agsx_cgroup_open(const char *name, struct agsx_cgroup **ret, agsx_error_t *err) {
  if (!agsx_cgroup_name_is_valid(name))
    return agsx_error_set(err, EINVAL, "invalid cgroup name `%s`", name);
  _cleanup_layout_ struct layout *l = NULL;
  const char *parent = NULL;
  if (cg_layout_get(&l, err) < 0 || parent_get(&parent, err) < 0)
    return agsx_error_wrap(err, "open cgroup `%s`", name);
  if (l->manager == AGSX_CGROUP_SYSTEMD)
    return cg_open_systemd(l, name, ret, err);
  if (l->manager == AGSX_CGROUP_NONE)
    return agsx_error_set(err, ENOENT, "open cgroup `%s/%s` (%s)", parent, name, l->why);
  _cleanup_cgroup_ struct agsx_cgroup *cg = cg_new(l->v2, parent, name);
  for (int c = 0; c < CTRL_N; c++) {
    if (l->mnt[c] == NULL || hier_has(cg, l->mnt[c], c))
      continue; /* controllers mounted together: already looked there */
    /* The leaf first: where it is missing (most hierarchies) one syscall. */
    _cleanup_free_ char *leaf = xasprintf("%s/%s/%s", l->mnt[c], parent, name);
    _cleanup_close_ int fd = cg_open_dir_at(AT_FDCWD, leaf);
    _cleanup_free_ char *up = fd < 0 ? NULL : xasprintf("%s/%s", l->mnt[c], parent);
    _cleanup_close_ int pfd = fd < 0 ? -1 : cg_open_dir_at(AT_FDCWD, up);
    if (pfd < 0)
      continue;
    struct hier *h = cg_hier_get(cg, l->mnt[c], c);
    h->parentfd = steal_fd(&pfd);
    h->fd = steal_fd(&fd);
    h->owned = true;
  }
  if (cg->n == 0)
    return agsx_error_set(err, ENOENT, "open cgroup `%s/%s`", parent, name);
  *ret = steal_ptr(&cg);
  return 0;
}

int agsx_cgroup_create_sub(struct agsx_cgroup *cg, const char *name, struct agsx_cgroup **ret,
                           agsx_error_t *err) {
  _cleanup_free_ char *parent = xasprintf("%s/%s", cg->parent, cg->name);
  _cleanup_cgroup_ struct agsx_cgroup *sub = cg_new(cg->v2, parent, name);
  for (size_t i = 0; i < cg->n; i++) {
    if (cg->h[i].fd < 0)
      continue;
    struct hier *h = &sub->h[sub->n++];
    h->mnt = xstrdup(cg->h[i].mnt);
    h->ctrls = cg->h[i].ctrls;
    h->parentfd = fcntl(cg->h[i].fd, F_DUPFD_CLOEXEC, 3);
    if (h->parentfd < 0 || mkdirat(cg->h[i].fd, name, 0755) < 0)
      return agsx_error_set(err, errno, "create cgroup `%s/%s` in `%s`", parent, name, h->mnt);
    h->owned = true;
    h->fd = cg_open_dir_at(cg->h[i].fd, name);
    if (h->fd < 0)
      return agsx_error_set(err, errno, "open cgroup `%s/%s` in `%s`", parent, name, h->mnt);
  }
  *ret = steal_ptr(&sub);
  return 0;
}

/* ---- using it ----------------------------------------------------------------------------------
 */

int agsx_cgroup_attach(struct agsx_cgroup *cg, pid_t pid, agsx_error_t *err) {
  char v[32];
  snprintf(v, sizeof(v), "%d", (int)pid);
  for (size_t i = 0; i < cg->n; i++) {
    if (cg->h[i].fd < 0)
      continue;
    if (cg_write_file(cg->h[i].fd, "cgroup.procs", v, false, err) < 0)
      return agsx_error_wrap(err, "attach pid %d to cgroup `%s/%s` in `%s`", (int)pid, cg->parent,
                             cg->name, cg->h[i].mnt);
  }
  return 0;
}

int64_t agsx_cgroup_age(struct agsx_cgroup *cg) {
  struct stat st;
  int64_t now = agsx_now_ns() / 1000000000LL;
  for (size_t i = 0; i < cg->n; i++)
    if (cg->h[i].fd >= 0 && fstat(cg->h[i].fd, &st) == 0)
      return now - st.st_ctime;
  return 0;
}

int agsx_cgroup_self_attach_fds(struct agsx_cgroup *cg, int *fds, size_t max, agsx_error_t *err) {
  size_t n = 0;
  for (size_t i = 0; cg && !cg->v2 && i < cg->n; i++) {
    if (cg->h[i].fd < 0)
      continue;
    if (n == max) {
      agsx_cgroup_close_fds(fds, n);
      return agsx_error_set(err, E2BIG, "too many cgroup hierarchies");
    }
    fds[n] = openat(cg->h[i].fd, "tasks", O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fds[n] < 0) {
      agsx_error_set(err, errno, "open `tasks` of cgroup `%s/%s` in `%s`", cg->parent, cg->name,
                     cg->h[i].mnt);
      agsx_cgroup_close_fds(fds, n);
      return -1;
    }
    n++;
  }
  return (int)n;
}

int agsx_cgroup_join_fds(struct agsx_cgroup *cg, int *fds, size_t max, agsx_error_t *err) {
  if (!cg->v2)
    return agsx_cgroup_self_attach_fds(cg, fds, max, err);
  if (cg->n == 0 || cg->h[0].fd < 0 || max == 0)
    return agsx_error_set(err, EBADF, "cgroup `%s/%s` is not open", cg->parent, cg->name);
  fds[0] = openat(cg->h[0].fd, "cgroup.procs", O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fds[0] < 0)
    return agsx_error_set(err, errno, "open `cgroup.procs` of cgroup `%s/%s` in `%s`", cg->parent,
                          cg->name, cg->h[0].mnt);
  return 1;
}

int agsx_cgroup_self_attach(const int *fds, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (write(fds[i], "0", 1) != 1)
      return -errno;
  return 0;
}

void agsx_cgroup_close_fds(int *fds, size_t n) {
  for (size_t i = 0; i < n; i++)
    agsx_closep(&fds[i]);
}

bool agsx_cgroup_oom_killed(struct agsx_cgroup *cg) {
  int fd = hier_fd(cg, CTRL_MEMORY);
  _cleanup_free_ char *buf = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  const char *file = cg->v2 ? "memory.events" : "memory.oom_control";
  if (fd < 0 || agsx_read_file_at(fd, file, SMALL_FILE_MAX, &buf, NULL, &e) < 0)
    return false;
  uint64_t v = 0;
  if (cg_kv_get(buf, "oom_kill", &v))
    return v > 0;
  /* Kernels before 4.13 have no v1 oom_kill counter. under_oom is only true
   * while the OOM killer is busy; failcnt is no evidence (page cache alone
   * hits the limit and is reclaimed). */
  return !cg->v2 && cg_kv_get(buf, "under_oom", &v) && v > 0;
}

static uint64_t count_lines(int dfd, const char *file) {
  _cleanup_free_ char *buf = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  if (dfd < 0 || agsx_read_file_at(dfd, file, PROCS_FILE_MAX, &buf, NULL, &e) < 0)
    return 0;
  uint64_t n = 0;
  for (const char *p = buf; *p; p++)
    n += *p == '\n';
  return n;
}

uint64_t agsx_cgroup_tasks(struct agsx_cgroup *cg) {
  return read_u64(hier_fd(cg, CTRL_PIDS), "pids.current");
}

int agsx_cgroup_stats(struct agsx_cgroup *cg, uint64_t *ret_mem, uint64_t *ret_pids) {
  int mfd = hier_fd(cg, CTRL_MEMORY), pfd = hier_fd(cg, CTRL_PIDS);
  if (ret_mem)
    *ret_mem = read_u64(mfd, cg->v2 ? "memory.current" : "memory.usage_in_bytes");
  if (ret_pids) {
    *ret_pids = read_u64(pfd, "pids.current");
    if (*ret_pids == 0 && cg->n > 0) /* no pids controller: count the processes */
      *ret_pids = count_lines(cg->h[0].fd, "cgroup.procs");
  }
  return 0;
}

/* Docker's memory usage: what the cgroup charges less the inactive page
 * cache, which the kernel reclaims first. */
static uint64_t memory_in_use(int fd, bool v2) {
  uint64_t use = read_u64(fd, v2 ? "memory.current" : "memory.usage_in_bytes"), cache = 0;
  _cleanup_free_ char *buf = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_read_file_at(fd, "memory.stat", SMALL_FILE_MAX, &buf, NULL, &e) == 0)
    cg_kv_get(buf, v2 ? "inactive_file" : "total_inactive_file", &cache);
  return cache < use ? use - cache : use;
}

int agsx_cgroup_usage(struct agsx_cgroup *cg, struct agsx_cgroup_usage *ret) {
  memset(ret, 0, sizeof(*ret));
  agsx_cgroup_stats(cg, NULL, &ret->pids);
  int mfd = hier_fd(cg, CTRL_MEMORY), cfd = hier_fd(cg, CTRL_CPUACCT);
  const char *mfile = cg->v2 ? "memory.current" : "memory.usage_in_bytes";
  if (mfd >= 0 && faccessat(mfd, mfile, F_OK, 0) == 0) {
    ret->has_memory = true;
    ret->memory = memory_in_use(mfd, cg->v2);
  }
  _cleanup_free_ char *buf = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  uint64_t usec = 0;
  if (cfd >= 0 && !cg->v2 && faccessat(cfd, "cpuacct.usage", F_OK, 0) == 0) {
    ret->has_cpu = true;
    ret->cpu_ns = read_u64(cfd, "cpuacct.usage");
  } else if (cfd >= 0 && cg->v2 &&
             agsx_read_file_at(cfd, "cpu.stat", SMALL_FILE_MAX, &buf, NULL, &e) == 0 &&
             cg_kv_get(buf, "usage_usec", &usec)) {
    ret->has_cpu = true;
    ret->cpu_ns = usec * 1000;
  }
  return 0;
}

/* ---- freezing ----------------------------------------------------------------------------------
 * v2 (and systemd): cgroup.freeze of the sandbox's cgroup (its exec cgroups
 * are below it: one write freezes the tree, the kernel moves forks along).
 * v1: cgroup-v1.c. */

/* Waits until DFD/FILE says the freeze is complete (v1 freezer.state
 * FROZEN, v2 cgroup.events "frozen 1"). */
int cg_freeze_wait(struct agsx_cgroup *cg, int dfd, int64_t deadline, agsx_error_t *err) {
  int64_t pause = NSEC_PER_MSEC / 8;
  for (;;) {
    _cleanup_free_ char *buf = NULL;
    uint64_t v = 0;
    if (agsx_read_file_at(dfd, cg->v2 ? "cgroup.events" : "freezer.state", SMALL_FILE_MAX, &buf,
                          NULL, err) < 0)
      return agsx_error_wrap(err, "freeze cgroup `%s/%s`", cg->parent, cg->name);
    if (cg->v2 ? cg_kv_get(buf, "frozen", &v) && v == 1 : strncmp(buf, "FROZEN", 6) == 0)
      return 0;
    if (!cg->v2 && strncmp(buf, "THAWED", 6) == 0)
      return agsx_error_set(err, EBUSY, "freeze cgroup `%s/%s`: thawed meanwhile (stopping?)",
                            cg->parent, cg->name);
    if (agsx_mono_ns() > deadline)
      return agsx_error_set(err, EBUSY, "freeze cgroup `%s/%s`: not frozen after 5 s", cg->parent,
                            cg->name);
    cg_sleep_ns(pause);
    pause = pause < 8 * NSEC_PER_MSEC ? pause * 2 : pause;
  }
}

int agsx_cgroup_freeze(struct agsx_cgroup *cg, agsx_error_t *err) {
  int r;
  if (cg->v2) {
    if (cg->n == 0 || cg->h[0].fd < 0)
      return agsx_error_set(err, EBADF, "cgroup `%s/%s` is not open", cg->parent, cg->name);
    r = cg_write_file(cg->h[0].fd, "cgroup.freeze", "1", false, err);
    if (r < 0)
      agsx_error_wrap(err, "freeze cgroup `%s/%s`", cg->parent, cg->name);
    else
      r = cg_freeze_wait(cg, cg->h[0].fd, agsx_mono_ns() + FREEZE_TIMEOUT_NS, err);
  } else {
    r = cg_freeze_v1(cg, err);
  }
  if (r < 0) /* fail open for the processes: a half-frozen sandbox helps nobody */
    agsx_cgroup_thaw_quiet(cg);
  return r;
}

int agsx_cgroup_thaw(struct agsx_cgroup *cg, agsx_error_t *err) {
  if (cg->v2) {
    if (cg->n == 0 || cg->h[0].fd < 0)
      return 0;
    if (cg_write_file(cg->h[0].fd, "cgroup.freeze", "0", true, err) < 0)
      return agsx_error_wrap(err, "thaw cgroup `%s/%s`", cg->parent, cg->name);
    return 0;
  }
  struct hier *fz = cg_freezer_hier(cg);
  if (fz && cg_write_file(fz->fd, "freezer.state", "THAWED", false, err) < 0)
    return agsx_error_wrap(err, "thaw cgroup `%s/%s`", cg->parent, cg->name);
  return 0;
}

void agsx_cgroup_thaw_quiet(struct agsx_cgroup *cg) {
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_cgroup_thaw(cg, &e) < 0)
    agsx_debug("%s", e->msg);
}

bool agsx_cgroup_frozen(struct agsx_cgroup *cg) {
  _cleanup_free_ char *buf = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  if (cg->v2)
    return cg->n > 0 && cg->h[0].fd >= 0 &&
           agsx_read_file_at(cg->h[0].fd, "cgroup.freeze", SMALL_FILE_MAX, &buf, NULL, &e) == 0 &&
           buf[0] == '1';
  struct hier *fz = cg_freezer_hier(cg);
  return fz && agsx_read_file_at(fz->fd, "freezer.state", SMALL_FILE_MAX, &buf, NULL, &e) == 0 &&
         strncmp(buf, "THAWED", 6) != 0;
}

/* ---- destruction -------------------------------------------------------------------------------
 */

/* False when the cgroup directory DFD certainly has no child cgroup: kernfs
 * (cgroup v1 and v2) and tmpfs count a directory's links as 2 + its
 * subdirectories. Saves listing the ~30 control files of a leaf, twice per
 * hierarchy at each teardown. A file system that reports another count
 * (1: "not counted") is listed. */
static bool may_have_children(int dfd) {
  struct stat st;
  return fstat(dfd, &st) < 0 || st.st_nlink != 2;
}

/* SIGKILLs every process listed in DFD/cgroup.procs and in the cgroups below
 * (cgroup.procs does not list descendants). Sets *any when it found one.
 * A pid can be recycled between the read and the kill; v2's cgroup.kill has
 * no such window, so it runs first where the kernel has it. */
static void kill_tree(int dfd, int depth, bool *any) {
  _cleanup_free_ char *buf = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_read_file_at(dfd, "cgroup.procs", PROCS_FILE_MAX, &buf, NULL, &e) == 0) {
    for (char *p = buf, *end; *p; p = end) {
      long pid = strtol(p, &end, 10);
      if (end == p)
        break;
      if (pid > 0 && kill((pid_t)pid, SIGKILL) == 0)
        *any = true;
    }
  }
  if (depth >= TREE_DEPTH_MAX || !may_have_children(dfd))
    return;
  _cleanup_dir_ DIR *d = agsx_dir_stream(dfd);
  for (struct dirent *de; d && (de = readdir(d));) {
    if (de->d_type != DT_DIR || de->d_name[0] == '.')
      continue;
    _cleanup_close_ int sub = cg_open_dir_at(dfd, de->d_name);
    if (sub >= 0)
      kill_tree(sub, depth + 1, any);
  }
}

static int kill_all(struct agsx_cgroup *cg, agsx_error_t *err) {
  if (cg->v2 && cg->n > 0 && cg->h[0].owned && cg->h[0].fd >= 0) {
    _cleanup_error_ agsx_error_t e = NULL;
    if (cg_write_file(cg->h[0].fd, "cgroup.kill", "1", true, &e) < 0)
      agsx_debug("cgroup `%s/%s`: %s", cg->parent, cg->name, e->msg);
  }
  int64_t deadline = agsx_mono_ns() + KILL_TIMEOUT_NS, pause = NSEC_PER_MSEC / 4;
  for (;;) {
    bool any = false;
    for (size_t i = 0; i < cg->n; i++)
      if (cg->h[i].owned && cg->h[i].fd >= 0)
        kill_tree(cg->h[i].fd, 0, &any);
    if (!any)
      return 0;
    if (agsx_mono_ns() > deadline)
      return agsx_error_set(err, EBUSY, "kill processes of cgroup `%s/%s`: still running after 2 s",
                            cg->parent, cg->name);
    cg_sleep_ns(pause);
    pause = pause < 16 * NSEC_PER_MSEC ? pause * 2 : pause;
  }
}

/* rmdir DFD/NAME after the cgroups below it; a cgroup directory holds only
 * control files (which rmdir ignores) and child cgroups. */
static int rmdir_tree(int dfd, const char *name, int depth) {
  if (unlinkat(dfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
    return 0; /* no child cgroups: the usual case, one syscall */
  /* cgroupfs says EBUSY for child cgroups (and for tasks still exiting), a
   * plain directory ENOTEMPTY. */
  if (errno != EBUSY && errno != ENOTEMPTY && errno != EEXIST)
    return -1;
  _cleanup_close_ int fd = depth < TREE_DEPTH_MAX ? cg_open_dir_at(dfd, name) : -1;
  _cleanup_dir_ DIR *d = fd < 0 || !may_have_children(fd) ? NULL : agsx_dir_stream(fd);
  for (struct dirent *de; d && (de = readdir(d));)
    if (de->d_type == DT_DIR && de->d_name[0] != '.')
      rmdir_tree(fd, de->d_name, depth + 1);
  if (unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
    return -1;
  return 0;
}

/* A cgroup whose last task just died can stay busy for a moment. */
static int hier_remove(struct agsx_cgroup *cg, struct hier *h, agsx_error_t *err) {
  int64_t deadline = agsx_mono_ns() + RMDIR_TIMEOUT_NS;
  while (rmdir_tree(h->parentfd, cg->name, 0) < 0) {
    if (errno != EBUSY || agsx_mono_ns() > deadline)
      return agsx_error_set(err, errno, "rmdir `%s/%s` in `%s`", cg->parent, cg->name, h->mnt);
    cg_sleep_ns(5 * NSEC_PER_MSEC);
  }
  h->owned = false;
  agsx_closep(&h->fd);
  return 0;
}

int agsx_cgroup_destroy(struct agsx_cgroup *cg, agsx_error_t *err) {
  if (cg == NULL)
    return 0;
  /* Frozen processes do not die of SIGKILL (v1) until thawed: the first
   * kill pass queues the signal, the thaw lets them act on nothing else. */
  bool any = false;
  for (size_t i = 0; i < cg->n; i++)
    if (cg->h[i].owned && cg->h[i].fd >= 0)
      kill_tree(cg->h[i].fd, 0, &any);
  agsx_cgroup_thaw_quiet(cg);
  int r = kill_all(cg, err);
  for (size_t i = 0; i < cg->n; i++)
    if (cg->h[i].owned && cg->h[i].parentfd >= 0 && hier_remove(cg, &cg->h[i], err) < 0)
      r = -1;
  return r;
}

/* ---- gc
 * ------------------------------------------------------------------------------------------ */

static void collect_names(int pfd, struct agsx_strset *names) {
  _cleanup_dir_ DIR *d = agsx_dir_stream(pfd);
  for (struct dirent *de; d && (de = readdir(d));)
    if (de->d_type == DT_DIR && agsx_cgroup_name_is_valid(de->d_name))
      agsx_strset_add(names, de->d_name);
}

int cg_destroy_one(const char *name, agsx_error_t *err) {
  _cleanup_cgroup_ struct agsx_cgroup *cg = NULL;
  if (agsx_cgroup_open(name, &cg, err) < 0)
    return agsx_error_errno(err) == ENOENT ? 0 : -1; /* gone meanwhile */
  return agsx_cgroup_destroy(cg, err);
}

int agsx_cgroup_gc(bool (*keep)(const char *name, void *data),
                   void (*report)(const char *what, void *data), void *data, bool dry_run,
                   agsx_error_t *err) {
  _cleanup_layout_ struct layout *l = NULL;
  const char *parent = NULL;
  if (cg_layout_get(&l, err) < 0 || parent_get(&parent, err) < 0)
    return agsx_error_wrap(err, "gc cgroups");
  if (l->manager == AGSX_CGROUP_SYSTEMD)
    return cg_gc_systemd(l, keep, report, data, dry_run, err);
  _cleanup_strset_ struct agsx_strset names = {0};
  for (int c = 0; c < CTRL_N; c++) {
    _cleanup_close_ int root = l->mnt[c] ? open(l->mnt[c], O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    _cleanup_close_ int pfd = root < 0 ? -1 : cg_open_dir_at(root, parent);
    if (pfd >= 0)
      collect_names(pfd, &names);
  }
  int r = 0;
  for (size_t i = 0; i < names.n; i++) {
    const char *name = names.v[i];
    if (keep && keep(name, data))
      continue;
    if (report) {
      _cleanup_free_ char *what = xasprintf("cgroup `%s/%s`", parent, name);
      report(what, data);
    }
    _cleanup_error_ agsx_error_t e = NULL;
    if (!dry_run && cg_destroy_one(name, &e) < 0) {
      r = -1;
      if (err && *err == NULL)
        *err = steal_ptr(&e);
    }
  }
  return r;
}

/* ---- info ---------------------------------------------------------------------------------- */

bool agsx_cgroup_limits_off(void) {
  _cleanup_layout_ struct layout *l = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  return cg_layout_get(&l, &e) == 0 && l->manager == AGSX_CGROUP_NONE;
}

int agsx_cgroup_info(struct agsx_cgroup_info *ret, agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  _cleanup_layout_ struct layout *l = NULL;
  const char *parent = NULL;
  if (cg_layout_get(&l, err) < 0 || parent_get(&parent, err) < 0)
    return -1;
  ret->v2 = l->v2;
  ret->root = xstrdup(l->root);
  ret->why = l->why;
  if (l->manager == AGSX_CGROUP_SYSTEMD) {
    ret->manager = "systemd";
    ret->parent = xstrdup(AGSX_CGROUP_SLICE);
    ret->path = xstrdup(AGSX_CGROUP_SLICE "/agsx-<id>.scope/sandbox");
  } else if (l->manager == AGSX_CGROUP_NONE) {
    ret->manager = "none";
    ret->parent = xstrdup("");
    ret->path = xstrdup("");
  } else {
    ret->manager = "cgroupfs";
    ret->parent = xstrdup(parent);
    ret->path = xasprintf("%s/<id>", parent);
  }
  if (l->v2) {
    _cleanup_error_ agsx_error_t e = NULL;
    _cleanup_free_ char *path = xasprintf("%s/cgroup.controllers", l->root);
    if (agsx_read_file_at(AT_FDCWD, path, SMALL_FILE_MAX, &ret->controllers, NULL, &e) == 0)
      ret->controllers[strcspn(ret->controllers, "\n")] = '\0';
  } else {
    _cleanup_free_ char *list = xstrdup("");
    for (int c = 0; c < CTRL_N; c++)
      if (l->mnt[c]) {
        char *next = xasprintf("%s%s%s", list, *list ? " " : "", cg_ctrl_name[c]);
        free(list);
        list = next;
      }
    ret->controllers = steal_ptr(&list);
  }
  return 0;
}

void agsx_cgroup_info_clear(struct agsx_cgroup_info *i) {
  free(i->root);
  free(i->controllers);
  free(i->path);
  free(i->parent);
  memset(i, 0, sizeof(*i));
}
