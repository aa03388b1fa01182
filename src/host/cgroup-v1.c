/* agsx — host/cgroup: cgroupfs on cgroup v1: the controllers' mounts from
 * mountinfo, "<parent>/<id>" in each hierarchy a limit needs, and the
 * freezer hierarchy a pause makes (see cgroup.h). */
#include "config.h"

#include "host/cgroup-internal.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

static bool path_is_under(const char *path, const char *root) {
  size_t n = strlen(root);
  while (n > 1 && root[n - 1] == '/')
    n--;
  return strncmp(path, root, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

/* One mountinfo line: "36 25 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory". */
static void layout_add_mount(struct layout *l, char *line, bool restrict_to_root) {
  char *tok[64];
  int sep;
  agsx_mountinfo_split(line, tok, 64, &sep);
  if (sep < 0 || strcmp(tok[sep + 1], "cgroup") != 0)
    return;
  const char *mnt = agsx_mountinfo_unescape(tok[4]);
  if (restrict_to_root && !path_is_under(mnt, l->root))
    return;
  for (int c = 0; c < CTRL_N; c++)
    if (l->mnt[c] == NULL && cg_list_has(tok[sep + 3], cg_ctrl_name[c]))
      l->mnt[c] = xstrdup(mnt);
}

int cg_layout_scan_v1(struct layout *l, bool restrict_to_root, agsx_error_t *err) {
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

int cg_create_v1(struct agsx_cgroup *cg, const struct layout *l, unsigned need, agsx_error_t *err) {
  for (int c = 0; c < CTRL_N; c++) {
    if (!(need & BIT(c)))
      continue;
    if (l->mnt[c] == NULL)
      return agsx_error_set(err, 0,
                            "cannot apply %s limit: cgroup v1 controller `%s` is not mounted",
                            cg_ctrl_name[c], cg_ctrl_name[c]);
    cg_hier_get(cg, l->mnt[c], c);
  }
  for (int c = 0; c < CTRL_N; c++)
    if ((ACCOUNTING & BIT(c)) && !(need & BIT(c)) && l->mnt[c])
      cg_hier_get(cg, l->mnt[c], c);
  for (size_t i = 0; i < cg->n; i++) {
    struct hier *h = &cg->h[i];
    if (cg_hier_open_parent(cg, h, err) == 0 && cg_hier_make_leaf(cg, h, err) == 0)
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

/* ---- freezing ----------------------------------------------------------------------------------
 * v1: the freezer hierarchy's "<parent>/<name>", made at the first pause;
 * the sandbox's processes (listed in its other hierarchies, exec cgroups
 * included) are moved in, frozen, and the lists are read again until a
 * pass finds nobody left out: a child inherits its parent's cgroup, so
 * once every process is in a frozen cgroup nothing new can appear. */

#define FREEZE_PASSES 64

struct hier *cg_freezer_hier(struct agsx_cgroup *cg) {
  for (size_t i = 0; i < cg->n; i++)
    if ((cg->h[i].ctrls & BIT(CTRL_FREEZER)) && cg->h[i].fd >= 0)
      return &cg->h[i];
  return NULL;
}

static int freezer_make(struct agsx_cgroup *cg, struct hier **ret, agsx_error_t *err) {
  if ((*ret = cg_freezer_hier(cg)))
    return 0;
  _cleanup_layout_ struct layout *l = NULL;
  if (cg_layout_get(&l, err) < 0)
    return -1;
  if (l->mnt[CTRL_FREEZER] == NULL)
    return agsx_error_set(err, ENOTSUP, "cgroup v1 controller `freezer` is not mounted");
  if (cg->n >= CTRL_N)
    return agsx_error_set(err, E2BIG, "too many cgroup hierarchies");
  struct hier *h = cg_hier_get(cg, l->mnt[CTRL_FREEZER], CTRL_FREEZER);
  if (h->fd >= 0) /* mounted with another controller we already have */
    return *ret = h, 0;
  if (h->parentfd < 0 && cg_hier_open_parent(cg, h, err) < 0)
    return -1;
  if (mkdirat(h->parentfd, cg->name, 0755) < 0 && errno != EEXIST)
    return agsx_error_set(err, errno, "mkdir `%s/%s` in `%s`", cg->parent, cg->name, h->mnt);
  h->owned = true;
  h->fd = cg_open_dir_at(h->parentfd, cg->name);
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
    _cleanup_close_ int sub = cg_open_dir_at(dfd, de->d_name);
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
    if (cg_write_file(fz->fd, "cgroup.procs", all.v[i], false, &e) < 0) {
      if (agsx_error_errno(&e) == ESRCH)
        continue; /* it ended meanwhile */
      *err = steal_ptr(&e);
      return agsx_error_wrap(err, "freeze cgroup `%s/%s`", cg->parent, cg->name);
    }
    (*ret_moved)++;
  }
  return 0;
}

/* One deadline for all the passes: a sandbox that is being killed meanwhile
 * may never be frozen (its dying tasks are not), and the caller thaws it. */
int cg_freeze_v1(struct agsx_cgroup *cg, agsx_error_t *err) {
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
    if (cg_write_file(fz->fd, "freezer.state", "FROZEN", false, err) < 0)
      return agsx_error_wrap(err, "freeze cgroup `%s/%s`", cg->parent, cg->name);
    if (cg_freeze_wait(cg, fz->fd, deadline, err) < 0)
      return -1;
  }
  return agsx_error_set(err, EBUSY, "freeze cgroup `%s/%s`: processes kept appearing", cg->parent,
                        cg->name);
}
