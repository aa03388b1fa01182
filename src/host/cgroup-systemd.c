/* agsx — host/cgroup: the systemd manager. A transient scope per sandbox,
 * agsx.slice/agsx-<id>.scope, that systemd delegates to agsx; inside it
 * sandbox/ (the sandbox, its limits) and supervisor/ (a detached
 * sandbox's supervisor). See cgroup.h for who starts the scope when. */
#include "config.h"

#include "host/cgroup-internal.h"
#include "host/systemd.h"
#include "host/rootless.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

/* ---- which manager ----------------------------------------------------------------------- */

int agsx_cgroup_manager_choose(const char *setting, bool systemd, bool unified, bool custom_root,
                               enum agsx_cgroup_manager *ret, const char **ret_why,
                               agsx_error_t *err) {
  *ret = AGSX_CGROUP_CGROUPFS;
  if (setting == NULL || *setting == '\0' || strcmp(setting, "auto") == 0) {
    if (custom_root)
      *ret_why = "auto: AGSX_CGROUP_ROOT names another cgroup root";
    else if (!systemd)
      *ret_why = "auto: systemd is not PID 1";
    else if (!unified)
      *ret_why = "auto: systemd is PID 1, but /sys/fs/cgroup is not the unified cgroup v2 "
                 "hierarchy (v1 or hybrid), where systemd cannot delegate";
    else
      *ret = AGSX_CGROUP_SYSTEMD,
      *ret_why = "auto: systemd is PID 1 on the unified cgroup v2 hierarchy";
    return 0;
  }
  if (strcmp(setting, "cgroupfs") == 0) {
    *ret_why = "cgroup-manager = cgroupfs";
    return 0;
  }
  if (strcmp(setting, "systemd") != 0)
    return agsx_error_set_quiet(err, EINVAL,
                                "invalid cgroup-manager `%s` (auto, systemd or cgroupfs; "
                                "agsx.conf or AGSX_CGROUP_MANAGER)",
                                setting);
  if (!systemd)
    return agsx_error_set_quiet(err, ENOTSUP,
                                "cgroup-manager systemd: systemd is not PID 1 here "
                                "(no /run/systemd/system)");
  if (!unified)
    return agsx_error_set_quiet(
        err, ENOTSUP,
        "cgroup-manager systemd: /sys/fs/cgroup is not the unified cgroup v2 "
        "hierarchy (boot with systemd.unified_cgroup_hierarchy=1)");
  if (custom_root)
    return agsx_error_set_quiet(err, ENOTSUP, "cgroup-manager systemd: not with AGSX_CGROUP_ROOT");
  *ret = AGSX_CGROUP_SYSTEMD;
  *ret_why = "cgroup-manager = systemd";
  return 0;
}

int agsx_cgroup_manager(enum agsx_cgroup_manager *ret, agsx_error_t *err) {
  _cleanup_layout_ struct layout *l = NULL;
  if (cg_layout_get(&l, err) < 0)
    return -1;
  *ret = l->manager;
  return 0;
}

/* ---- the scope ----------------------------------------------------------------------------- */

/* What every sandbox scope gets besides Delegate=yes and its first PID.
 * TasksMax=infinity: agsx's own pids limit applies in sandbox/, and the
 * supervisor must never fail to fork for a limit nobody asked for.
 * CollectMode=inactive-or-failed: a scope that ended badly (a supervisor
 * SIGKILLed) is unloaded anyway; nothing for `systemctl reset-failed`.
 * DefaultDependencies stay on: the scope is then Conflicts= and Before=
 * shutdown.target, so at shutdown systemd stops sandboxes (SIGTERM to the
 * supervisor, which ends the sandbox, records it killed and tears its
 * network down) before file systems go, instead of the final kill. */
static const struct agsx_systemd_prop scope_props[] = {
    {.name = "TasksMax", .type = 't', .t = AGSX_SYSTEMD_INFINITY},
    {.name = "CollectMode", .type = 's', .s = "inactive-or-failed"},
};

static char *unit_of(const char *id) { return xasprintf("agsx-%s.scope", id); }

/* Controllers for sandbox/: enabled in the scope, which systemd made with
 * every controller it delegates (Delegate=yes); the scope itself holds no
 * process (v2's rule for a cgroup with controllers enabled below). */
static int scope_enable(struct agsx_cgroup *cg, struct hier *h, unsigned need, agsx_error_t *err) {
  if (cg_check_available(h->parentfd, cg->parent, need, err) < 0 ||
      cg_enable_controllers(h->parentfd, cg->parent, need, err) < 0)
    return -1;
  _cleanup_error_ agsx_error_t e = NULL;
  if (!(need & BIT(CTRL_MEMORY)) &&
      (cg_check_available(h->parentfd, cg->parent, BIT(CTRL_MEMORY), &e) < 0 ||
       cg_enable_controllers(h->parentfd, cg->parent, BIT(CTRL_MEMORY), &e) < 0))
    agsx_debug("cgroup `%s/%s`: no memory accounting: %s", cg->parent, cg->name, e->msg);
  return 0;
}

int cg_create_systemd(struct agsx_cgroup *cg, const struct layout *l, unsigned need,
                      const struct agsx_cgroup_limits *lim, agsx_error_t *err) {
  struct hier *h = cg_hier_get(cg, l->root, CTRL_MEMORY);
  h->ctrls = V2_CTRLS;
  const char *base = strrchr(cg->parent, '/');
  cg->unit = xstrdup(base ? base + 1 : cg->parent);
  _cleanup_free_ char *scope = xasprintf("%s/%s", l->root, cg->parent);
  h->parentfd = cg_open_dir_at(AT_FDCWD, scope);
  if (h->parentfd < 0 && errno == ENOENT) {
    /* The caller is not a supervisor in its scope: the scope comes with
     * the init (agsx_cgroup_place). */
    cg->pending = true;
    cg->need = need;
    cg->lim = *lim;
    return 0;
  }
  if (h->parentfd < 0)
    return agsx_error_set(err, errno, "open scope `%s`", cg->parent);
  if (cg_hier_make_leaf(cg, h, err) < 0)
    return -1;
  return scope_enable(cg, h, need, err);
}

bool agsx_cgroup_is_pending(const struct agsx_cgroup *cg) { return cg && cg->pending; }

bool agsx_cgroup_goes_with_sandbox(const struct agsx_cgroup *cg) { return cg && cg->placed; }

int agsx_cgroup_place(struct agsx_cgroup *cg, pid_t pid, const char *description,
                      agsx_error_t *err) {
  if (cg == NULL || !cg->pending)
    return 0;
  struct hier *h = &cg->h[0];
  if (agsx_systemd_start_scope(cg->unit, AGSX_CGROUP_SLICE, description, pid, scope_props,
                               AGSX_ARRAY_SIZE(scope_props), err) < 0)
    return -1;
  cg->pending = false;
  cg->placed = true;
  _cleanup_free_ char *scope = xasprintf("%s/%s", h->mnt, cg->parent);
  char v[24];
  snprintf(v, sizeof(v), "%d", (int)pid);
  int r = 0;
  if ((h->parentfd = cg_open_dir_at(AT_FDCWD, scope)) < 0)
    r = agsx_error_set(err, errno, "open scope `%s`", cg->parent);
  /* The init first, then the controllers: the scope may enable them only
   * once no process is left in it. */
  if (r == 0 && cg_hier_make_leaf(cg, h, err) < 0)
    r = -1;
  if (r == 0 && cg_write_file(h->fd, "cgroup.procs", v, false, err) < 0)
    r = agsx_error_wrap(err, "move the init into `%s/%s`", cg->parent, cg->name);
  if (r == 0 && scope_enable(cg, h, cg->need, err) < 0)
    r = -1;
  if (r == 0 && cg_apply_limits(cg, &cg->lim, err) < 0)
    r = -1;
  if (r < 0) {
    _cleanup_error_ agsx_error_t e = NULL;
    if (agsx_systemd_stop_unit(cg->unit, false, &e) < 0)
      agsx_debug("%s", e->msg);
    return agsx_error_wrap(err, "cgroup");
  }
  return 0;
}

int agsx_cgroup_scope_self(const char *name, const char *description, agsx_error_t *err) {
  _cleanup_layout_ struct layout *l = NULL;
  if (cg_layout_get(&l, err) < 0)
    return -1;
  if (l->manager != AGSX_CGROUP_SYSTEMD)
    return 0;
  if (!agsx_cgroup_name_is_valid(name))
    return agsx_error_set(err, EINVAL, "invalid cgroup name `%s`", name);
  _cleanup_free_ char *unit = unit_of(name);
  if (agsx_systemd_start_scope(unit, AGSX_CGROUP_SLICE, description, getpid(), scope_props,
                               AGSX_ARRAY_SIZE(scope_props), err) < 0)
    return -1;
  /* From here on a failure needs no undo: the caller exits, the scope
   * empties and systemd ends it. */
  _cleanup_free_ char *path = xasprintf("%s/" AGSX_CGROUP_SLICE "/%s", l->root, unit);
  _cleanup_close_ int scope = cg_open_dir_at(AT_FDCWD, path);
  if (scope < 0)
    return agsx_error_set(err, errno, "open scope `%s`", path);
  if (mkdirat(scope, "supervisor", 0755) < 0 && errno != EEXIST)
    return agsx_error_set(err, errno, "mkdir `%s/supervisor`", unit);
  _cleanup_close_ int sup = cg_open_dir_at(scope, "supervisor");
  if (sup < 0 || cg_write_file(sup, "cgroup.procs", "0", false, err) < 0)
    return sup < 0 ? agsx_error_set(err, errno, "open `%s/supervisor`", unit)
                   : agsx_error_wrap(err, "move the supervisor into `%s/supervisor`", unit);
  return 0;
}

int cg_open_systemd(const struct layout *l, const char *id, struct agsx_cgroup **ret,
                    agsx_error_t *err) {
  _cleanup_free_ char *unit = unit_of(id);
  _cleanup_free_ char *parent = xasprintf(AGSX_CGROUP_SLICE "/%s", unit);
  _cleanup_cgroup_ struct agsx_cgroup *cg = cg_new(true, parent, "sandbox");
  cg->unit = steal_ptr(&unit);
  _cleanup_free_ char *up = xasprintf("%s/%s", l->root, parent);
  _cleanup_close_ int pfd = cg_open_dir_at(AT_FDCWD, up);
  _cleanup_close_ int fd = pfd < 0 ? -1 : cg_open_dir_at(pfd, "sandbox");
  if (fd < 0)
    return agsx_error_set(err, ENOENT, "open cgroup `%s/sandbox`", parent);
  struct hier *h = cg_hier_get(cg, l->root, CTRL_MEMORY);
  h->ctrls = V2_CTRLS;
  h->parentfd = steal_fd(&pfd);
  h->fd = steal_fd(&fd);
  h->owned = true;
  *ret = steal_ptr(&cg);
  return 0;
}

/* ---- gc ---------------------------------------------------------------------------------- */

/* "agsx-<id>.scope" → id, when it is one of ours. */
static bool scope_id(const char *entry, char *id, size_t size) {
  size_t n = strlen(entry);
  if (n < 5 + 6 || strncmp(entry, "agsx-", 5) != 0 || strcmp(entry + n - 6, ".scope") != 0 ||
      n - 11 >= size)
    return false;
  memcpy(id, entry + 5, n - 11);
  id[n - 11] = '\0';
  return agsx_cgroup_name_is_valid(id);
}

int cg_gc_systemd(const struct layout *l, bool (*keep)(const char *name, void *data),
                  void (*report)(const char *what, void *data), void *data, bool dry_run,
                  agsx_error_t *err) {
  _cleanup_free_ char *path = xasprintf("%s/" AGSX_CGROUP_SLICE, l->root);
  _cleanup_close_ int sfd = cg_open_dir_at(AT_FDCWD, path);
  if (sfd < 0)
    return errno == ENOENT ? 0 : agsx_error_set(err, errno, "gc cgroups: open `%s`", path);
  _cleanup_strset_ struct agsx_strset ids = {0};
  _cleanup_dir_ DIR *d = agsx_dir_stream(sfd);
  char id[72];
  for (struct dirent *de; d && (de = readdir(d));)
    if (de->d_type == DT_DIR && scope_id(de->d_name, id, sizeof(id)))
      agsx_strset_add(&ids, id);
  int r = 0;
  for (size_t i = 0; i < ids.n; i++) {
    if (keep && keep(ids.v[i], data))
      continue;
    _cleanup_free_ char *unit = unit_of(ids.v[i]);
    if (report) {
      _cleanup_free_ char *what = xasprintf("cgroup `" AGSX_CGROUP_SLICE "/%s`", unit);
      report(what, data);
    }
    if (dry_run)
      continue;
    /* The sandbox's processes first (a stale scope's supervisor is gone,
     * or gc would keep it), then the scope itself. */
    _cleanup_error_ agsx_error_t e = NULL;
    if (cg_destroy_one(ids.v[i], &e) < 0 || agsx_systemd_stop_unit(unit, false, &e) < 0) {
      r = -1;
      if (err && *err == NULL)
        *err = steal_ptr(&e);
    }
  }
  return r;
}

/* ---- an ordinary user's processes ------------------------------------------------------------ */

/* "agsx.slice/agsx-<id>.scope/sandbox" + NAME → the unit and the path below
 * it; false for a cgroup that is no systemd scope's. */
static bool unit_and_sub(const struct agsx_cgroup *cg, char **ret_unit, char **ret_sub) {
  const char *p = cg->parent;
  size_t n = strlen(AGSX_CGROUP_SLICE);
  if (!cg->v2 || strncmp(p, AGSX_CGROUP_SLICE "/", n + 1) != 0)
    return false;
  p += n + 1;
  const char *slash = strchr(p, '/');
  *ret_unit = slash ? xstrndup(p, (size_t)(slash - p)) : xstrdup(p);
  *ret_sub = xasprintf("%s/%s", slash ? slash : "", cg->name);
  return true;
}

bool agsx_cgroup_attach_needs_manager(const struct agsx_cgroup *cg) {
  _cleanup_free_ char *unit = NULL, *sub = NULL;
  return cg && agsx_rootless() && unit_and_sub(cg, &unit, &sub);
}

int agsx_cgroup_attach_by_manager(struct agsx_cgroup *cg, pid_t pid, agsx_error_t *err) {
  _cleanup_free_ char *unit = NULL, *sub = NULL;
  if (!unit_and_sub(cg, &unit, &sub))
    return agsx_error_set(err, EINVAL, "cgroup `%s/%s` is no systemd scope's", cg->parent,
                          cg->name);
  return agsx_systemd_attach(unit, sub, pid, err);
}
