/* agsx — oci/launch: the engine's overlay rebuilt for the init, P's side.
 * Podman's and containerd's rootfs is an overlay mount, which cannot be
 * idmapped; its layers can. With agsx's range (its own or its pod's), P
 * finds the overlay's layers in mountinfo, clones each lower layer
 * idmapped to the container's range and the upper's directory idmapped for overlay's own writes, mounts
 * an overlay of them in a mount namespace of its own and hands the init a
 * detached clone, with a work directory of agsx's beside the engine's
 * (recorded, removed at delete). Invariant: the container writes into the
 * engine's upper layer with the owners the engine expects, and nothing but
 * overlay's private clone of the upper ever sees host root mapped. */
#include "config.h"

#include "oci/launch-internal.h"
#include "sandbox/rootfs.h"

#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

/* The engine's overlay mounted on PATH (Podman's and containerd's
 * drivers): its lowerdir, upperdir and workdir from mountinfo. 0 with
 * *RET_N 0 when PATH is no overlay mount. */
static int overlay_of(const char *path, char ***ret_lower, size_t *ret_n, char **ret_upper,
                      char **ret_work, agsx_error_t *err) {
  *ret_lower = NULL;
  *ret_n = 0;
  *ret_upper = *ret_work = NULL;
  _cleanup_fclose_ FILE *f = fopen("/proc/self/mountinfo", "re");
  if (f == NULL)
    return agsx_error_set(err, errno, "open `/proc/self/mountinfo`");
  _cleanup_free_ char *line = NULL, *found = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, f) > 0) {
    char *tok[64];
    int sep;
    agsx_mountinfo_split(line, tok, 64, &sep);
    if (sep < 0)
      continue;
    if (strcmp(agsx_mountinfo_unescape(tok[4]), path) != 0)
      continue;
    free(found);
    found = strcmp(tok[sep + 1], "overlay") == 0 ? xstrdup(tok[sep + 3]) : NULL;
  }
  if (found == NULL)
    return 0;
  for (char *save = NULL, *o = strtok_r(found, ",", &save); o; o = strtok_r(NULL, ",", &save)) {
    char *v = agsx_mountinfo_unescape(o);
    if (agsx_str_has_prefix(v, "lowerdir=")) {
      for (char *s2 = NULL, *l = strtok_r(v + 9, ":", &s2); l; l = strtok_r(NULL, ":", &s2))
        if (l[0])
          agsx_strv_push(ret_lower, l);
    } else if (agsx_str_has_prefix(v, "upperdir=")) {
      *ret_upper = xstrdup(v + 9);
    } else if (agsx_str_has_prefix(v, "workdir=")) {
      *ret_work = xstrdup(v + 8);
    }
  }
  *ret_n = agsx_strv_len(*ret_lower);
  if (*ret_n == 0 || *ret_upper == NULL || *ret_work == NULL)
    return agsx_error_set(err, 0, "root.path `%s`: an overlay without upper and lower layers",
                          path);
  return 0;
}

void agsx_oci_remove_workdir(const char *path) {
  _cleanup_free_ char *parent = xstrdup(path);
  char *slash = strrchr(parent, '/');
  if (slash == NULL || strcmp(slash, "/agsx-work") != 0)
    return;
  *slash = '\0';
  _cleanup_close_ int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  _cleanup_error_ agsx_error_t e = NULL;
  if (pfd >= 0 && agsx_rm_rf_at(pfd, "agsx-work", &e) < 0)
    agsx_warn("remove `%s`: %s", path, e->msg);
}

/* The user namespace the upper layer is idmapped with: the container's
 * range (on-disk 0..65535 seen as BASE..BASE+65535, so that what the
 * container writes lands with the owners the engine expects: root's file
 * owned by 0) and on-disk AGSX_OCI_UPPER_MOUNTER as host root, the
 * mounter whose credentials overlay creates its work files and whiteouts
 * with (an idmapped mount refuses a creator it cannot map: EOVERFLOW).
 * The mount is overlay's private clone, never the container's: nothing
 * but overlay sees host root there. No process stays in the namespace:
 * the child that holds it while its maps are written exits then. */
#define AGSX_OCI_UPPER_MOUNTER 4294967294u

static int upper_userns(uid_t base, agsx_error_t *err) {
  int pp[2];
  if (pipe2(pp, O_CLOEXEC) < 0)
    return agsx_error_set(err, errno, "pipe");
  pid_t pid = (pid_t)syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, NULL);
  if (pid == 0) {
    char b;
    close(pp[1]);
    while (read(pp[0], &b, 1) < 0 && errno == EINTR) {
    }
    _exit(0);
  }
  close(pp[0]);
  _cleanup_close_ int hold = pp[1];
  if (pid < 0)
    return agsx_error_set(err, errno, "a user namespace for the overlay's upper layer");
  char map[96], path[64];
  int n =
      snprintf(map, sizeof(map), "0 %u 65536\n%u 0 1\n", (unsigned)base, AGSX_OCI_UPPER_MOUNTER);
  int fd = -1;
  for (int i = 0; i < 2 && n > 0; i++) {
    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, i ? "gid_map" : "uid_map");
    _cleanup_close_ int mf = open(path, O_WRONLY | O_CLOEXEC);
    if (mf < 0 || write(mf, map, (size_t)n) != n)
      n = -1;
  }
  snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
  if (n > 0)
    fd = open(path, O_RDONLY | O_CLOEXEC);
  int saved = errno;
  agsx_closep(&hold);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
  if (fd < 0)
    return agsx_error_set(err, saved, "the id map of the overlay's upper layer");
  return fd;
}

/* The upper layer's directory (the engine's upper and agsx's work
 * directory beside it: overlay wants both on one mount) cloned, idmapped
 * with upper_userns, at STAGE/u. */
static int attach_upper(int st, const char *parent, uid_t base, agsx_error_t *err) {
  _cleanup_close_ int uns = upper_userns(base, err);
  if (uns < 0)
    return -1;
  _cleanup_close_ int fd = open_tree(AT_FDCWD, parent, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "overlay upper `%s`", parent);
  struct mount_attr a = {.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NODEV,
                         .userns_fd = (uint64_t)uns};
  if (mount_setattr(fd, "", AT_EMPTY_PATH, &a, sizeof(a)) < 0)
    return agsx_error_set_quiet(err, errno,
                                "overlay upper `%s`: cannot idmap it for agsx's user namespace "
                                "(%s); put the engine's storage on a filesystem with idmapped "
                                "mounts (ext4, xfs, btrfs), or give the container a user "
                                "namespace (podman --userns=auto, ctr --uidmap)",
                                parent, strerror(errno));
  if (mkdirat(st, "u", 0700) < 0 || move_mount(fd, "", st, "u", MOVE_MOUNT_F_EMPTY_PATH) < 0)
    return agsx_error_set(err, errno, "attach overlay upper `%s`", parent);
  return 0;
}

/* The lower layers, idmapped clones at STAGE/l0..: their lowerdir= list. */
static char *attach_lowers(const struct create *cr, const struct child *c, int st, int userns,
                           agsx_error_t *err) {
  size_t cap = strlen(c->stage) * (c->n_lower + 1) + c->n_lower * 16 + 16, len = 0;
  _cleanup_free_ char *lower = xzalloc(cap);
  for (size_t i = 0; i < c->n_lower; i++) {
    const char *path = cr->ovl_lower[i];
    char name[32];
    snprintf(name, sizeof(name), "l%zu", i);
    _cleanup_close_ int fd = open_tree(AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (fd < 0)
      return agsx_error_set(err, errno, "overlay layer `%s`", path), NULL;
    struct mount_attr a = {.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NODEV | MOUNT_ATTR_RDONLY,
                           .userns_fd = (uint64_t)userns};
    if (mount_setattr(fd, "", AT_EMPTY_PATH, &a, sizeof(a)) < 0)
      return agsx_error_set_quiet(
                 err, errno,
                 "overlay layer `%s`: cannot idmap it for agsx's user namespace (%s); put the "
                 "engine's storage on a filesystem with idmapped mounts (ext4, xfs, btrfs), or "
                 "give the container a user namespace (podman --userns=auto, ctr --uidmap)",
                 path, strerror(errno)),
             NULL;
    if (mkdirat(st, name, 0700) < 0 || move_mount(fd, "", st, name, MOVE_MOUNT_F_EMPTY_PATH) < 0)
      return agsx_error_set(err, errno, "attach overlay layer `%s`", path), NULL;
    len += (size_t)snprintf(lower + len, cap - len, "%s%s/%s", len ? ":" : "", c->stage, name);
  }
  return steal_ptr(&lower);
}

/* A work directory of agsx's own beside the engine's (overlay wants it on
 * the upper's mount): the engine's is in use by its own mount, and a
 * volatile one (Podman's --rm) cannot be shared at all. Recorded (removed
 * at delete); its parent, the upper's too, in *RET_PARENT. */
static int make_workdir(struct create *cr, char **ret_parent, agsx_error_t *err) {
  _cleanup_free_ char *parent = xstrdup(cr->ovl_work);
  *strrchr(parent, '/') = '\0';
  _cleanup_close_ int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  _cleanup_error_ agsx_error_t e = NULL;
  if (pfd < 0)
    return agsx_error_set(err, errno, "overlay `%s`", parent);
  agsx_rm_rf_at(pfd, "agsx-work", &e);
  if (mkdirat(pfd, "agsx-work", 0700) < 0)
    return agsx_error_set(err, errno, "overlay work directory in `%s`", parent);
  free(cr->rec.workdir);
  cr->rec.workdir = xasprintf("%s/agsx-work", parent);
  if (agsx_oci_launch_write_record(cr, err) < 0)
    return -1;
  *ret_parent = steal_ptr(&parent);
  return 0;
}

int agsx_oci_launch_rebuild_overlay(struct create *cr, const struct child *c, int userns,
                                    agsx_error_t *err) {
  if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
    return agsx_error_set(err, errno, "a mount namespace for the overlay");
  const char *topts[] = {"size", "64k", "mode", "0700", NULL};
  _cleanup_close_ int t = agsx_rootfs_fs_new("tmpfs", topts, MOUNT_ATTR_NODEV, err);
  if (t < 0 || move_mount(t, "", AT_FDCWD, c->stage, MOVE_MOUNT_F_EMPTY_PATH) < 0)
    return err && *err ? -1 : agsx_error_set(err, errno, "mount the overlay stage");
  _cleanup_close_ int st = open(c->stage, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (st < 0)
    return agsx_error_set(err, errno, "open the overlay stage");
  _cleanup_free_ char *lower = attach_lowers(cr, c, st, userns, err), *parent = NULL;
  /* The upper layer idmapped too (attach_upper). */
  if (lower == NULL || make_workdir(cr, &parent, err) < 0 ||
      attach_upper(st, parent, cr->ids.base, err) < 0)
    return -1;
  /* mount(2), as the engines mount it: fsconfig's CMD_CREATE of the same
   * options fails here with ENODATA on 6.x kernels. */
  _cleanup_free_ char *opts =
      xasprintf("lowerdir=%s,upperdir=%s/u/%s,workdir=%s/u/agsx-work,index=off", lower, c->stage,
                c->upper, c->stage);
  _cleanup_free_ char *mnt = xasprintf("%s/root", c->stage);
  if (mkdirat(st, "root", 0700) < 0 || mount("overlay", mnt, "overlay", MS_NODEV, opts) < 0)
    return agsx_error_set(err, errno, "rebuild the engine's overlay");
  int ovl = open_tree(AT_FDCWD, mnt, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (ovl < 0)
    return agsx_error_set(err, errno, "rebuild the engine's overlay");
  return ovl;
}

int agsx_oci_launch_engine_overlay(struct create *cr, struct child *c, agsx_error_t *err) {
  if (!agsx_oci_launch_idmapped(cr))
    return 0;
  if (overlay_of(cr->rec.rootfs, &cr->ovl_lower, &c->n_lower, &cr->ovl_upper, &cr->ovl_work, err) <
      0)
    return -1;
  if (c->n_lower == 0)
    return 0;
  const char *us = strrchr(cr->ovl_upper, '/'), *ws = strrchr(cr->ovl_work, '/');
  size_t ul = (size_t)(us - cr->ovl_upper), wl = ws ? (size_t)(ws - cr->ovl_work) : 0;
  if (ws == NULL || ul != wl || strncmp(cr->ovl_upper, cr->ovl_work, ul) != 0 ||
      strlen(us + 1) >= sizeof(c->upper) || strlen(ws + 1) >= sizeof(c->work) ||
      c->n_lower + 8 > AGSX_MSG_MAX_FDS / 2)
    return agsx_error_set(err, 0,
                          "root.path `%s`: an overlay whose upper and work "
                          "directories are not siblings is not supported by agsx",
                          cr->rec.rootfs);
  snprintf(c->upper, sizeof(c->upper), "%s", us + 1);
  snprintf(c->work, sizeof(c->work), "%s", ws + 1);
  return 0;
}
