/* agsx — host/cgroup: cgroupfs on the unified cgroup v2 hierarchy: one
 * directory <root>/<parent>/<id>, the controllers the limits need enabled
 * in each cgroup.subtree_control on the way down (see cgroup.h). */
#include "config.h"

#include "host/cgroup-internal.h"

#include <fcntl.h>
#include <string.h>

/* Makes sure every controller of NEED is in DFD/cgroup.subtree_control. Other
 * agsx processes may enable the same ones at the same time: "+memory" twice
 * is harmless. */
int cg_enable_controllers(int dfd, const char *where, unsigned need, agsx_error_t *err) {
  _cleanup_free_ char *cur = NULL;
  if (agsx_read_file_at(dfd, "cgroup.subtree_control", SMALL_FILE_MAX, &cur, NULL, err) < 0)
    return agsx_error_wrap(err, "`%s`", where);
  for (int c = 0; c < CTRL_N; c++) {
    if (!(need & BIT(c)) || cg_list_has(cur, cg_ctrl_name[c]))
      continue;
    _cleanup_free_ char *v = xasprintf("+%s", cg_ctrl_name[c]);
    if (cg_write_file(dfd, "cgroup.subtree_control", v, false, err) < 0)
      return agsx_error_wrap(err, "cannot apply %s limit: enable controller in `%s`",
                             cg_ctrl_name[c], where);
  }
  return 0;
}

int cg_check_available(int rootfd, const char *root, unsigned need, agsx_error_t *err) {
  _cleanup_free_ char *avail = NULL;
  if (agsx_read_file_at(rootfd, "cgroup.controllers", SMALL_FILE_MAX, &avail, NULL, err) < 0)
    return agsx_error_wrap(err, "`%s`", root);
  for (int c = 0; c < CTRL_N; c++)
    if ((need & BIT(c)) && !cg_list_has(avail, cg_ctrl_name[c]))
      return agsx_error_set(err, 0,
                            "cannot apply %s limit: cgroup v2 controller `%s` is not available "
                            "in `%s` (bound to cgroup v1?)",
                            cg_ctrl_name[c], cg_ctrl_name[c], root);
  return 0;
}

int cg_create_v2(struct agsx_cgroup *cg, const struct layout *l, unsigned need, agsx_error_t *err) {
  struct hier *h = cg_hier_get(cg, l->root, CTRL_MEMORY);
  h->ctrls = BIT(CTRL_MEMORY) | BIT(CTRL_CPU) | BIT(CTRL_PIDS) | BIT(CTRL_CPUACCT);
  _cleanup_close_ int rootfd = open(l->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0)
    return agsx_error_set(err, errno, "open cgroup root `%s`", l->root);
  if (cg_check_available(rootfd, l->root, need, err) < 0 ||
      cg_enable_controllers(rootfd, l->root, need, err) < 0 ||
      cg_hier_open_parent(cg, h, err) < 0 ||
      cg_enable_controllers(h->parentfd, cg->parent, need, err) < 0)
    return -1;
  /* Memory accounting for `agsx stats`, where the host has the controller. */
  _cleanup_error_ agsx_error_t e = NULL;
  if (!(need & BIT(CTRL_MEMORY)) &&
      cg_check_available(rootfd, l->root, BIT(CTRL_MEMORY), &e) == 0 &&
      (cg_enable_controllers(rootfd, l->root, BIT(CTRL_MEMORY), &e) < 0 ||
       cg_enable_controllers(h->parentfd, cg->parent, BIT(CTRL_MEMORY), &e) < 0))
    agsx_debug("cgroup `%s/%s`: no memory accounting: %s", cg->parent, cg->name, e->msg);
  return cg_hier_make_leaf(cg, h, err);
}
