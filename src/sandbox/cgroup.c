/* agsx — cgroup: per-sandbox control groups on cgroup v1 and v2. */
#include "config.h"

#include "sandbox/cgroup.h"

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

/* CTRL_FREEZER (v1) is never made at creation: agsx_cgroup_freeze makes it
 * when a sandbox is first paused, so sandboxes that are never paused pay
 * nothing for it (open, destroy and gc find it like the others). */
enum ctrl { CTRL_MEMORY, CTRL_CPU, CTRL_PIDS, CTRL_CPUACCT, CTRL_FREEZER, CTRL_N };
static const char *const ctrl_name[CTRL_N] = {"memory", "cpu", "pids", "cpuacct", "freezer"};
#define BIT(c) (1u << (c))
/* v1 hierarchies made for `agsx stats` even without a limit: CPU time and
 * memory use. A convenience: one that cannot be made is skipped. (v2 has
 * cpu.stat in every cgroup; memory is enabled there when available.) */
#define ACCOUNTING (BIT(CTRL_CPUACCT) | BIT(CTRL_MEMORY))

#define NSEC_PER_MSEC 1000000LL
#define KILL_TIMEOUT_NS (2000 * NSEC_PER_MSEC)
#define RMDIR_TIMEOUT_NS (1000 * NSEC_PER_MSEC)
#define SMALL_FILE_MAX 65536     /* memory.events, cgroup.controllers, ... */
#define PROCS_FILE_MAX (8 << 20) /* cgroup.procs: ~7 bytes a pid, 4M pids max */
#define TREE_DEPTH_MAX 16        /* nested cgroups a sandbox may have made */
#define NAME_MAX_LEN 64

/* ---- layout: mode and where each controller lives ------------------------------------------- */

struct layout {
  char *root; /* the cgroup root this layout was detected for */
  bool v2;
  char *mnt[CTRL_N]; /* v1: mount point of each controller or NULL; v2: the root */
};

static void layout_free(struct layout *l) {
  if (l == NULL)
    return;
  free(l->root);
  for (int c = 0; c < CTRL_N; c++)
    free(l->mnt[c]);
  free(l);
}

static void layout_freep(struct layout **l) {
  layout_free(*l);
  *l = NULL;
}
#define _cleanup_layout_ _cleanup_(layout_freep)

/* Controller lists: "cpu,cpuacct" (mountinfo), "cpu memory pids" (cgroup.controllers). */
static bool list_has(const char *list, const char *word) {
  return agsx_list_has(list, word, ", \t\n");
}

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static char *mountinfo_unescape(const char *s) {
  char *out = xmalloc(strlen(s) + 1), *o = out;
  for (; *s; s++) {
    if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' && s[3] >= '0' &&
        s[3] <= '7') {
      *o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
      s += 3;
    } else {
      *o++ = *s;
    }
  }
  *o = '\0';
  return out;
}

static bool path_is_under(const char *path, const char *root) {
  size_t n = strlen(root);
  while (n > 1 && root[n - 1] == '/')
    n--;
  return strncmp(path, root, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

/* One mountinfo line: "36 25 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory". */
static void layout_add_mount(struct layout *l, char *line, bool restrict_to_root) {
  char *tok[64], *save = NULL;
  int n = 0, sep = -1;
  for (char *t = strtok_r(line, " \n", &save); t && n < 64; t = strtok_r(NULL, " \n", &save)) {
    if (sep < 0 && n >= 6 && strcmp(t, "-") == 0)
      sep = n;
    tok[n++] = t;
  }
  if (sep < 0 || sep + 3 >= n || strcmp(tok[sep + 1], "cgroup") != 0)
    return;
  _cleanup_free_ char *mnt = mountinfo_unescape(tok[4]);
  if (restrict_to_root && !path_is_under(mnt, l->root))
    return;
  for (int c = 0; c < CTRL_N; c++)
    if (l->mnt[c] == NULL && list_has(tok[sep + 3], ctrl_name[c]))
      l->mnt[c] = xstrdup(mnt);
}

static int layout_scan_v1(struct layout *l, bool restrict_to_root, agsx_error_t *err) {
  _cleanup_fclose_ FILE *f = fopen("/proc/self/mountinfo", "re");
  if (f == NULL)
    return agsx_error_set(err, errno, "open `/proc/self/mountinfo`");
  _cleanup_free_ char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, f) > 0)
    layout_add_mount(l, line, restrict_to_root);
  if (ferror(f))
    return agsx_error_set(err, EIO, "read `/proc/self/mountinfo`");
  return 0;
}

static struct layout *layout_dup(const struct layout *src) {
  struct layout *l = xzalloc(sizeof(*l));
  l->root = xstrdup(src->root);
  l->v2 = src->v2;
  for (int c = 0; c < CTRL_N; c++)
    l->mnt[c] = src->mnt[c] ? xstrdup(src->mnt[c]) : NULL;
  return l;
}

static int layout_detect(const char *root, bool restrict_to_root, struct layout **ret,
                         agsx_error_t *err) {
  struct statfs sfs;
  if (statfs(root, &sfs) < 0)
    return agsx_error_set(err, errno, "statfs cgroup root `%s`", root);
  _cleanup_layout_ struct layout *l = xzalloc(sizeof(*l));
  l->root = xstrdup(root);
  l->v2 = sfs.f_type == CGROUP2_SUPER_MAGIC;
  for (int c = 0; c < CTRL_N && l->v2; c++)
    l->mnt[c] = xstrdup(root);
  /* v1 controllers may live anywhere (/cgroup/memory on old systems); only a
   * root given explicitly limits the search to the mounts below it. */
  if (!l->v2 && layout_scan_v1(l, restrict_to_root, err) < 0)
    return -1;
  agsx_debug("cgroup %s at `%s`", l->v2 ? "v2" : "v1", root);
  *ret = steal_ptr(&l);
  return 0;
}

/* The layout of the last root asked for, detected once (a statfs, and a
 * mountinfo read on v1: ~50 us, twice per sandbox otherwise). Paths only, no
 * fds: a cached fd would be inherited by every sandbox init. A root change
 * (AGSX_CGROUP_ROOT: tests switch roots) detects again; agsx_cgroup_reset
 * forgets it (a long-lived process after a remount). Callers get a copy. */
static pthread_mutex_t layout_lock = PTHREAD_MUTEX_INITIALIZER;
static struct layout *layout_cache;

void agsx_cgroup_reset(void) {
  pthread_mutex_lock(&layout_lock);
  layout_free(layout_cache);
  layout_cache = NULL;
  pthread_mutex_unlock(&layout_lock);
}

static int layout_get(struct layout **ret, agsx_error_t *err) {
  const char *env = getenv("AGSX_CGROUP_ROOT");
  const char *root = env && *env ? env : AGSX_CGROUP_DEFAULT_ROOT;
  int r = 0;
  pthread_mutex_lock(&layout_lock);
  if (layout_cache == NULL || strcmp(layout_cache->root, root) != 0) {
    struct layout *l = NULL;
    r = layout_detect(root, env && *env, &l, err);
    if (r == 0) {
      layout_free(layout_cache);
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
static int write_file(int dfd, const char *file, const char *val, bool optional,
                      agsx_error_t *err) {
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
static bool kv_get(const char *buf, const char *key, uint64_t *ret) {
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

static void sleep_ns(int64_t ns) {
  struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
    ;
}

static int open_dir_at(int dfd, const char *name) {
  return openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
}

/* ---- the cgroup object --------------------------------------------------------------------- */

struct hier {
  unsigned ctrls; /* BIT(CTRL_*) this hierarchy carries for us */
  char *mnt;      /* mount point, for messages */
  int parentfd;   /* <mnt>/<parent> */
  int fd;         /* <mnt>/<parent>/<name>, -1 until opened */
  bool owned; /* the leaf exists because of us (create) or was found (open): destroy removes it */
};

struct agsx_cgroup {
  bool v2;
  char *name;
  char *parent;
  size_t n;
  struct hier h[CTRL_N];
};

static struct agsx_cgroup *cg_new(bool v2, const char *parent, const char *name) {
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
  free(cg);
}

void agsx_cgroup_freep(struct agsx_cgroup **cg) {
  agsx_cgroup_free(*cg);
  *cg = NULL;
}

/* The hierarchy for controller C, sharing one entry between controllers
 * mounted together (cpu,cpuacct,memory on some systems). */
static struct hier *hier_get(struct agsx_cgroup *cg, const char *mnt, enum ctrl c) {
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
  return BIT(CTRL_PIDS); /* none mounted: create_v1 says so */
}

/* Opens <mnt>/<parent>, making it first if it is missing (racing agsx
 * processes are fine). The mount point comes from mountinfo (or the root
 * agsx was given), not from a sandbox: one path open, and in the usual case
 * (the parent exists) one syscall. */
static int hier_open_parent(struct agsx_cgroup *cg, struct hier *h, agsx_error_t *err) {
  _cleanup_free_ char *path = xasprintf("%s/%s", h->mnt, cg->parent);
  h->parentfd = open_dir_at(AT_FDCWD, path);
  if (h->parentfd < 0 && errno == ENOENT) {
    if (mkdir(path, 0755) < 0 && errno != EEXIST)
      return agsx_error_set(err, errno, "mkdir `%s` in `%s`", cg->parent, h->mnt);
    h->parentfd = open_dir_at(AT_FDCWD, path);
  }
  if (h->parentfd < 0)
    return agsx_error_set(err, errno, "open `%s` in `%s`", cg->parent, h->mnt);
  return 0;
}

static int hier_make_leaf(struct agsx_cgroup *cg, struct hier *h, agsx_error_t *err) {
  if (mkdirat(h->parentfd, cg->name, 0755) < 0)
    return agsx_error_set(err, errno, "mkdir `%s/%s` in `%s`", cg->parent, cg->name, h->mnt);
  h->owned = true;
  h->fd = open_dir_at(h->parentfd, cg->name);
  if (h->fd < 0)
    return agsx_error_set(err, errno, "open `%s/%s` in `%s`", cg->parent, cg->name, h->mnt);
  return 0;
}

static int apply_memory(int fd, bool v2, uint64_t bytes, agsx_error_t *err) {
  _cleanup_free_ char *v = xasprintf("%" PRIu64, bytes);
  if (v2) {
    if (write_file(fd, "memory.max", v, false, err) < 0)
      return -1;
    return write_file(fd, "memory.swap.max", "0", true, err); /* absent without CONFIG_SWAP */
  }
  /* memsw (memory + swap) must stay >= limit_in_bytes, so it goes second;
   * equal values leave no swap escape. Absent without swap accounting. */
  if (write_file(fd, "memory.limit_in_bytes", v, false, err) < 0)
    return -1;
  return write_file(fd, "memory.memsw.limit_in_bytes", v, true, err);
}

static int apply_cpu(int fd, bool v2, uint64_t quota, uint64_t period, agsx_error_t *err) {
  if (v2) {
    _cleanup_free_ char *v = xasprintf("%" PRIu64 " %" PRIu64, quota, period);
    return write_file(fd, "cpu.max", v, false, err);
  }
  _cleanup_free_ char *p = xasprintf("%" PRIu64, period), *q = xasprintf("%" PRIu64, quota);
  if (write_file(fd, "cpu.cfs_period_us", p, false, err) < 0)
    return -1;
  return write_file(fd, "cpu.cfs_quota_us", q, false, err);
}

static int apply_pids(int fd, uint64_t n, agsx_error_t *err) {
  _cleanup_free_ char *v = xasprintf("%" PRIu64, n);
  return write_file(fd, "pids.max", v, false, err);
}

static int apply_limits(struct agsx_cgroup *cg, const struct agsx_cgroup_limits *lim,
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

static int create_v1(struct agsx_cgroup *cg, const struct layout *l, unsigned need,
                     agsx_error_t *err) {
  for (int c = 0; c < CTRL_N; c++) {
    if (!(need & BIT(c)))
      continue;
    if (l->mnt[c] == NULL)
      return agsx_error_set(err, 0,
                            "cannot apply %s limit: cgroup v1 controller `%s` is not mounted",
                            ctrl_name[c], ctrl_name[c]);
    hier_get(cg, l->mnt[c], c);
  }
  for (int c = 0; c < CTRL_N; c++)
    if ((ACCOUNTING & BIT(c)) && !(need & BIT(c)) && l->mnt[c])
      hier_get(cg, l->mnt[c], c);
  for (size_t i = 0; i < cg->n; i++) {
    struct hier *h = &cg->h[i];
    if (hier_open_parent(cg, h, err) == 0 && hier_make_leaf(cg, h, err) == 0)
      continue;
    if (h->ctrls & need)
      return -1;
    agsx_debug("cgroup `%s/%s`: no accounting in `%s`: %s", cg->parent, cg->name, h->mnt,
               (*err)->msg);
    agsx_error_free(err);
    if (!h->owned)
      agsx_closep(&h->parentfd); /* fd -1, not owned: every user skips it */
  }
  return 0;
}

/* Makes sure every controller of NEED is in DFD/cgroup.subtree_control. Other
 * agsx processes may enable the same ones at the same time: "+memory" twice
 * is harmless. */
static int enable_controllers(int dfd, const char *where, unsigned need, agsx_error_t *err) {
  _cleanup_free_ char *cur = NULL;
  if (agsx_read_file_at(dfd, "cgroup.subtree_control", SMALL_FILE_MAX, &cur, NULL, err) < 0)
    return agsx_error_wrap(err, "`%s`", where);
  for (int c = 0; c < CTRL_N; c++) {
    if (!(need & BIT(c)) || list_has(cur, ctrl_name[c]))
      continue;
    _cleanup_free_ char *v = xasprintf("+%s", ctrl_name[c]);
    if (write_file(dfd, "cgroup.subtree_control", v, false, err) < 0)
      return agsx_error_wrap(err, "cannot apply %s limit: enable controller in `%s`", ctrl_name[c],
                             where);
  }
  return 0;
}

static int check_available_v2(int rootfd, const char *root, unsigned need, agsx_error_t *err) {
  _cleanup_free_ char *avail = NULL;
  if (agsx_read_file_at(rootfd, "cgroup.controllers", SMALL_FILE_MAX, &avail, NULL, err) < 0)
    return agsx_error_wrap(err, "`%s`", root);
  for (int c = 0; c < CTRL_N; c++)
    if ((need & BIT(c)) && !list_has(avail, ctrl_name[c]))
      return agsx_error_set(err, 0,
                            "cannot apply %s limit: cgroup v2 controller `%s` is not available "
                            "in `%s` (bound to cgroup v1?)",
                            ctrl_name[c], ctrl_name[c], root);
  return 0;
}

static int create_v2(struct agsx_cgroup *cg, const struct layout *l, unsigned need,
                     agsx_error_t *err) {
  struct hier *h = hier_get(cg, l->root, CTRL_MEMORY);
  h->ctrls = BIT(CTRL_MEMORY) | BIT(CTRL_CPU) | BIT(CTRL_PIDS) | BIT(CTRL_CPUACCT);
  _cleanup_close_ int rootfd = open(l->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0)
    return agsx_error_set(err, errno, "open cgroup root `%s`", l->root);
  if (check_available_v2(rootfd, l->root, need, err) < 0 ||
      enable_controllers(rootfd, l->root, need, err) < 0 || hier_open_parent(cg, h, err) < 0 ||
      enable_controllers(h->parentfd, cg->parent, need, err) < 0)
    return -1;
  /* Memory accounting for `agsx stats`, where the host has the controller. */
  _cleanup_error_ agsx_error_t e = NULL;
  if (!(need & BIT(CTRL_MEMORY)) &&
      check_available_v2(rootfd, l->root, BIT(CTRL_MEMORY), &e) == 0 &&
      (enable_controllers(rootfd, l->root, BIT(CTRL_MEMORY), &e) < 0 ||
       enable_controllers(h->parentfd, cg->parent, BIT(CTRL_MEMORY), &e) < 0))
    agsx_debug("cgroup `%s/%s`: no memory accounting: %s", cg->parent, cg->name, e->msg);
  return hier_make_leaf(cg, h, err);
}

int agsx_cgroup_create(const char *name, const struct agsx_cgroup_limits *lim,
                       struct agsx_cgroup **ret, agsx_error_t *err) {
  if (!agsx_cgroup_name_is_valid(name))
    return agsx_error_set(err, EINVAL, "invalid cgroup name `%s`", name);
  _cleanup_layout_ struct layout *l = NULL;
  const char *parent = NULL;
  if (layout_get(&l, err) < 0 || parent_get(&parent, err) < 0)
    return agsx_error_wrap(err, "create cgroup `%s`", name);
  _cleanup_cgroup_ struct agsx_cgroup *cg = cg_new(l->v2, parent, name);
  unsigned need = needed_ctrls(lim, l);
  int r = l->v2 ? create_v2(cg, l, need, err) : create_v1(cg, l, need, err);
  if (r == 0)
    r = apply_limits(cg, lim, err);
  if (r < 0) {
    _cleanup_error_ agsx_error_t e2 = NULL;
    if (agsx_cgroup_destroy(cg, &e2) < 0)
      agsx_warn("remove half-created cgroup `%s/%s`: %s", parent, name, e2->msg);
    return agsx_error_wrap(err, "create cgroup `%s/%s`", parent, name);
  }
  agsx_debug("created cgroup `%s/%s` in %zu hierarchies", parent, name, cg->n);
  *ret = steal_ptr(&cg);
  return 0;
}

int agsx_cgroup_open(const char *name, struct agsx_cgroup **ret, agsx_error_t *err) {
  if (!agsx_cgroup_name_is_valid(name))
    return agsx_error_set(err, EINVAL, "invalid cgroup name `%s`", name);
  _cleanup_layout_ struct layout *l = NULL;
  const char *parent = NULL;
  if (layout_get(&l, err) < 0 || parent_get(&parent, err) < 0)
    return agsx_error_wrap(err, "open cgroup `%s`", name);
  _cleanup_cgroup_ struct agsx_cgroup *cg = cg_new(l->v2, parent, name);
  for (int c = 0; c < CTRL_N; c++) {
    if (l->mnt[c] == NULL || hier_has(cg, l->mnt[c], c))
      continue; /* controllers mounted together: already looked there */
    /* The leaf first: where it is missing (most hierarchies) one syscall. */
    _cleanup_free_ char *leaf = xasprintf("%s/%s/%s", l->mnt[c], parent, name);
    _cleanup_close_ int fd = open_dir_at(AT_FDCWD, leaf);
    _cleanup_free_ char *up = fd < 0 ? NULL : xasprintf("%s/%s", l->mnt[c], parent);
    _cleanup_close_ int pfd = fd < 0 ? -1 : open_dir_at(AT_FDCWD, up);
    if (pfd < 0)
      continue;
    struct hier *h = hier_get(cg, l->mnt[c], c);
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
    h->fd = open_dir_at(cg->h[i].fd, name);
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
    if (write_file(cg->h[i].fd, "cgroup.procs", v, false, err) < 0)
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
  if (kv_get(buf, "oom_kill", &v))
    return v > 0;
  /* Kernels before 4.13 have no v1 oom_kill counter. under_oom is only true
   * while the OOM killer is busy; failcnt is no evidence (page cache alone
   * hits the limit and is reclaimed). */
  return !cg->v2 && kv_get(buf, "under_oom", &v) && v > 0;
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
    kv_get(buf, v2 ? "inactive_file" : "total_inactive_file", &cache);
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
             kv_get(buf, "usage_usec", &usec)) {
    ret->has_cpu = true;
    ret->cpu_ns = usec * 1000;
  }
  return 0;
}

/* ---- freezing ----------------------------------------------------------------------------------
 * v2: cgroup.freeze of the sandbox's cgroup (its exec cgroups are below it:
 * one write freezes the tree, the kernel moves forks along). v1: the
 * freezer hierarchy's "<parent>/<name>", made at the first pause; the
 * sandbox's processes (listed in its other hierarchies, exec cgroups
 * included) are moved in, frozen, and the lists are read again until a
 * pass finds nobody left out: a child inherits its parent's cgroup, so
 * once every process is in a frozen cgroup nothing new can appear. */

#define FREEZE_TIMEOUT_NS (5000 * NSEC_PER_MSEC)
#define FREEZE_PASSES 64

static struct hier *freezer_hier(struct agsx_cgroup *cg) {
  for (size_t i = 0; i < cg->n; i++)
    if ((cg->h[i].ctrls & BIT(CTRL_FREEZER)) && cg->h[i].fd >= 0)
      return &cg->h[i];
  return NULL;
}

static int freezer_make(struct agsx_cgroup *cg, struct hier **ret, agsx_error_t *err) {
  if ((*ret = freezer_hier(cg)))
    return 0;
  _cleanup_layout_ struct layout *l = NULL;
  if (layout_get(&l, err) < 0)
    return -1;
  if (l->mnt[CTRL_FREEZER] == NULL)
    return agsx_error_set(err, ENOTSUP, "cgroup v1 controller `freezer` is not mounted");
  if (cg->n >= CTRL_N)
    return agsx_error_set(err, E2BIG, "too many cgroup hierarchies");
  struct hier *h = hier_get(cg, l->mnt[CTRL_FREEZER], CTRL_FREEZER);
  if (h->fd >= 0) /* mounted with another controller we already have */
    return *ret = h, 0;
  if (h->parentfd < 0 && hier_open_parent(cg, h, err) < 0)
    return -1;
  if (mkdirat(h->parentfd, cg->name, 0755) < 0 && errno != EEXIST)
    return agsx_error_set(err, errno, "mkdir `%s/%s` in `%s`", cg->parent, cg->name, h->mnt);
  h->owned = true;
  h->fd = open_dir_at(h->parentfd, cg->name);
  if (h->fd < 0)
    return agsx_error_set(err, errno, "open `%s/%s` in `%s`", cg->parent, cg->name, h->mnt);
  *ret = h;
  return 0;
}

/* The pids of DFD/cgroup.procs and of the cgroups below, into SET. */
static void collect_pids(int dfd, int depth, struct agsx_strset *set) {
  _cleanup_free_ char *buf = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_read_file_at(dfd, "cgroup.procs", PROCS_FILE_MAX, &buf, NULL, &e) == 0)
    for (char *save = NULL, *p = strtok_r(buf, "\n", &save); p; p = strtok_r(NULL, "\n", &save))
      agsx_strset_add(set, p);
  if (depth >= TREE_DEPTH_MAX)
    return;
  _cleanup_dir_ DIR *d = agsx_dir_stream(dfd);
  for (struct dirent *de; d && (de = readdir(d));) {
    if (de->d_type != DT_DIR || de->d_name[0] == '.')
      continue;
    _cleanup_close_ int sub = open_dir_at(dfd, de->d_name);
    if (sub >= 0)
      collect_pids(sub, depth + 1, set);
  }
}

/* A zombie (or a task being torn down) runs nothing: no need to freeze it,
 * and hierarchies may list it when the freezer's no longer does. */
static bool is_dead(const char *pid) {
  _cleanup_free_ char *path = xasprintf("/proc/%s/stat", pid), *buf = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_read_file_at(AT_FDCWD, path, SMALL_FILE_MAX, &buf, NULL, &e) < 0)
    return true;
  const char *p = strrchr(buf, ')');
  return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

/* Moves into FZ every process of CG's other hierarchies that is in no
 * freezer cgroup of the sandbox yet; *RET_MOVED counts them. */
static int freezer_gather(struct agsx_cgroup *cg, struct hier *fz, size_t *ret_moved,
                          agsx_error_t *err) {
  _cleanup_strset_ struct agsx_strset in = {0}, all = {0};
  collect_pids(fz->fd, 0, &in);
  for (size_t i = 0; i < cg->n; i++)
    if (&cg->h[i] != fz && cg->h[i].fd >= 0)
      collect_pids(cg->h[i].fd, 0, &all);
  *ret_moved = 0;
  for (size_t i = 0; i < all.n; i++) {
    if (agsx_strset_has(&in, all.v[i]) || is_dead(all.v[i]))
      continue;
    _cleanup_error_ agsx_error_t e = NULL;
    if (write_file(fz->fd, "cgroup.procs", all.v[i], false, &e) < 0) {
      if (agsx_error_errno(&e) == ESRCH)
        continue; /* it ended meanwhile */
      *err = steal_ptr(&e);
      return agsx_error_wrap(err, "freeze cgroup `%s/%s`", cg->parent, cg->name);
    }
    (*ret_moved)++;
  }
  return 0;
}

/* Waits until DFD/FILE says the freeze is complete (v1 freezer.state
 * FROZEN, v2 cgroup.events "frozen 1"). */
static int freeze_wait(struct agsx_cgroup *cg, int dfd, int64_t deadline, agsx_error_t *err) {
  int64_t pause = NSEC_PER_MSEC / 8;
  for (;;) {
    _cleanup_free_ char *buf = NULL;
    uint64_t v = 0;
    if (agsx_read_file_at(dfd, cg->v2 ? "cgroup.events" : "freezer.state", SMALL_FILE_MAX, &buf,
                          NULL, err) < 0)
      return agsx_error_wrap(err, "freeze cgroup `%s/%s`", cg->parent, cg->name);
    if (cg->v2 ? kv_get(buf, "frozen", &v) && v == 1 : strncmp(buf, "FROZEN", 6) == 0)
      return 0;
    if (!cg->v2 && strncmp(buf, "THAWED", 6) == 0)
      return agsx_error_set(err, EBUSY, "freeze cgroup `%s/%s`: thawed meanwhile (stopping?)",
                            cg->parent, cg->name);
    if (agsx_mono_ns() > deadline)
      return agsx_error_set(err, EBUSY, "freeze cgroup `%s/%s`: not frozen after 5 s", cg->parent,
                            cg->name);
    sleep_ns(pause);
    pause = pause < 8 * NSEC_PER_MSEC ? pause * 2 : pause;
  }
}

/* One deadline for all the passes: a sandbox that is being killed meanwhile
 * may never be frozen (its dying tasks are not), and the caller thaws it. */
static int freeze_v1(struct agsx_cgroup *cg, agsx_error_t *err) {
  int64_t deadline = agsx_mono_ns() + FREEZE_TIMEOUT_NS;
  struct hier *fz;
  if (freezer_make(cg, &fz, err) < 0)
    return agsx_error_wrap(err, "freeze cgroup `%s/%s`", cg->parent, cg->name);
  if (cg->n < 2)
    return agsx_error_set(err, ENOENT,
                          "freeze cgroup `%s/%s`: the sandbox has no other cgroup "
                          "to find its processes in",
                          cg->parent, cg->name);
  for (int pass = 0; pass < FREEZE_PASSES; pass++) {
    size_t moved;
    /* Thawed under our hands (a stop thaws: sandbox.c): never freeze again
     * what is being killed. */
    _cleanup_free_ char *state = NULL;
    if (pass > 0 &&
        (agsx_read_file_at(fz->fd, "freezer.state", SMALL_FILE_MAX, &state, NULL, err) < 0 ||
         strncmp(state, "THAWED", 6) == 0))
      return *err
                 ? -1
                 : agsx_error_set(err, EBUSY, "freeze cgroup `%s/%s`: thawed meanwhile (stopping?)",
                                  cg->parent, cg->name);
    if (freezer_gather(cg, fz, &moved, err) < 0)
      return -1;
    if (pass > 0 && moved == 0)
      return 0;
    if (write_file(fz->fd, "freezer.state", "FROZEN", false, err) < 0)
      return agsx_error_wrap(err, "freeze cgroup `%s/%s`", cg->parent, cg->name);
    if (freeze_wait(cg, fz->fd, deadline, err) < 0)
      return -1;
  }
  return agsx_error_set(err, EBUSY, "freeze cgroup `%s/%s`: processes kept appearing", cg->parent,
                        cg->name);
}

int agsx_cgroup_freeze(struct agsx_cgroup *cg, agsx_error_t *err) {
  int r;
  if (cg->v2) {
    if (cg->n == 0 || cg->h[0].fd < 0)
      return agsx_error_set(err, EBADF, "cgroup `%s/%s` is not open", cg->parent, cg->name);
    r = write_file(cg->h[0].fd, "cgroup.freeze", "1", false, err);
    if (r < 0)
      agsx_error_wrap(err, "freeze cgroup `%s/%s`", cg->parent, cg->name);
    else
      r = freeze_wait(cg, cg->h[0].fd, agsx_mono_ns() + FREEZE_TIMEOUT_NS, err);
  } else {
    r = freeze_v1(cg, err);
  }
  if (r < 0) /* fail open for the processes: a half-frozen sandbox helps nobody */
    agsx_cgroup_thaw_quiet(cg);
  return r;
}

int agsx_cgroup_thaw(struct agsx_cgroup *cg, agsx_error_t *err) {
  if (cg->v2) {
    if (cg->n == 0 || cg->h[0].fd < 0)
      return 0;
    if (write_file(cg->h[0].fd, "cgroup.freeze", "0", true, err) < 0)
      return agsx_error_wrap(err, "thaw cgroup `%s/%s`", cg->parent, cg->name);
    return 0;
  }
  struct hier *fz = freezer_hier(cg);
  if (fz && write_file(fz->fd, "freezer.state", "THAWED", false, err) < 0)
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
  struct hier *fz = freezer_hier(cg);
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
    _cleanup_close_ int sub = open_dir_at(dfd, de->d_name);
    if (sub >= 0)
      kill_tree(sub, depth + 1, any);
  }
}

static int kill_all(struct agsx_cgroup *cg, agsx_error_t *err) {
  if (cg->v2 && cg->n > 0 && cg->h[0].owned && cg->h[0].fd >= 0) {
    _cleanup_error_ agsx_error_t e = NULL;
    if (write_file(cg->h[0].fd, "cgroup.kill", "1", true, &e) < 0)
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
    sleep_ns(pause);
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
  _cleanup_close_ int fd = depth < TREE_DEPTH_MAX ? open_dir_at(dfd, name) : -1;
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
    sleep_ns(5 * NSEC_PER_MSEC);
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

static int gc_one(const char *name, agsx_error_t *err) {
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
  if (layout_get(&l, err) < 0 || parent_get(&parent, err) < 0)
    return agsx_error_wrap(err, "gc cgroups");
  _cleanup_strset_ struct agsx_strset names = {0};
  for (int c = 0; c < CTRL_N; c++) {
    _cleanup_close_ int root = l->mnt[c] ? open(l->mnt[c], O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    _cleanup_close_ int pfd = root < 0 ? -1 : open_dir_at(root, parent);
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
    if (!dry_run && gc_one(name, &e) < 0) {
      r = -1;
      if (err && *err == NULL)
        *err = steal_ptr(&e);
    }
  }
  return r;
}

/* ---- info ---------------------------------------------------------------------------------- */

int agsx_cgroup_info(struct agsx_cgroup_info *ret, agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  _cleanup_layout_ struct layout *l = NULL;
  const char *parent = NULL;
  if (layout_get(&l, err) < 0 || parent_get(&parent, err) < 0)
    return -1;
  ret->v2 = l->v2;
  ret->root = xstrdup(l->root);
  ret->manager = "cgroupfs";
  ret->parent = xstrdup(parent);
  if (l->v2) {
    _cleanup_error_ agsx_error_t e = NULL;
    _cleanup_free_ char *path = xasprintf("%s/cgroup.controllers", l->root);
    if (agsx_read_file_at(AT_FDCWD, path, SMALL_FILE_MAX, &ret->controllers, NULL, &e) == 0)
      ret->controllers[strcspn(ret->controllers, "\n")] = '\0';
  } else {
    _cleanup_free_ char *list = xstrdup("");
    for (int c = 0; c < CTRL_N; c++)
      if (l->mnt[c]) {
        char *next = xasprintf("%s%s%s", list, *list ? " " : "", ctrl_name[c]);
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
  free(i->parent);
  memset(i, 0, sizeof(*i));
}
