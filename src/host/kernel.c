/* agsx — host/kernel: what the running kernel can do (see kernel.h). */
#include "config.h"

#include "host/kernel.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/xattr.h>

#define BIT(f) (1u << (f))
#define CACHE_NAME "kernel"
#define CACHE_FORMAT "agsx-kernel 2"

struct feature {
  const char *name, *what, *since;
  bool required;
  const char *with, *without; /* the path agsx takes */
  bool switchable;            /* AGSX_KERNEL_DISABLE may make agsx take the other path */
};

static const struct feature features[AGSX_KF_N] = {
    [AGSX_KF_USERNS] = {.name = "user-namespaces",
                        .what = "user namespaces (CONFIG_USER_NS)",
                        .since = "3.8",
                        .required = true,
                        .with = "each sandbox's ids map to a host range of its own"},
    [AGSX_KF_MOUNT_API] = {.name = "mount-api",
                           .what = "the new mount API (fsopen, fsmount, move_mount)",
                           .since = "5.2",
                           .required = true,
                           .with = "every mount is made through file descriptors"},
    [AGSX_KF_OPENAT2] = {.name = "openat2",
                         .what = "openat2 with RESOLVE_IN_ROOT",
                         .since = "5.6",
                         .required = true,
                         .with = "sandbox paths are resolved inside the sandbox's root"},
    [AGSX_KF_CLONE3_CGROUP] = {.name = "clone-into-cgroup",
                               .what = "clone3 with CLONE_INTO_CGROUP",
                               .since = "5.7",
                               .required = true,
                               .with = "the sandbox init starts in its cgroup (v2)"},
    [AGSX_KF_IDMAPPED] = {.name = "idmapped-mounts",
                          .what = "idmapped mounts (mount_setattr)",
                          .since = "5.12",
                          .required = true,
                          .with = "image layers are shared, idmapped per sandbox"},
    [AGSX_KF_OVERLAY] = {.name = "overlayfs",
                         .what = "overlayfs (CONFIG_OVERLAY_FS)",
                         .since = "3.18",
                         .required = true,
                         .with = "the writable layer is an overlay over the image's layers"},
    [AGSX_KF_OVERLAY_USERNS] = {.name = "overlayfs-idmapped-layers",
                                .what = "overlayfs in a user namespace over idmapped layers",
                                .since = "5.19",
                                .required = true,
                                .with = "mounted by the sandbox's own root"},
    [AGSX_KF_TMPFS_XATTR] = {.name = "tmpfs-user-xattrs",
                             .what = "user.* extended attributes on tmpfs",
                             .since = "6.6",
                             .with = "programs in a sandbox set user.* xattrs in its writable "
                                     "layer (a tmpfs)",
                             .without = "setting a user.* xattr in a sandbox's writable layer (a "
                                        "tmpfs) fails with EOPNOTSUPP; the image's own are kept "
                                        "and read"},
    [AGSX_KF_DETACHED_MOUNTS] = {.name = "detached-mounts",
                                 .what = "mounting on and cloning detached mount trees",
                                 .since = "6.15",
                                 .with = "the root filesystem is assembled detached, then attached",
                                 .without = "the root filesystem is attached first, then assembled "
                                            "in place (same mounts, same isolation)",
                                 .switchable = true},
};

const char *agsx_kernel_feature_name(enum agsx_kernel_feature f) { return features[f].name; }
const char *agsx_kernel_feature_what(enum agsx_kernel_feature f) { return features[f].what; }
const char *agsx_kernel_feature_since(enum agsx_kernel_feature f) { return features[f].since; }
bool agsx_kernel_feature_required(enum agsx_kernel_feature f) { return features[f].required; }

const char *agsx_kernel_feature_path(enum agsx_kernel_feature f, bool have) {
  if (have)
    return features[f].with;
  return features[f].without ? features[f].without : "no sandbox can start";
}

/* ---- the process-wide answer ------------------------------------------------------------- */

static uint32_t have_bits;

bool agsx_kernel_has(enum agsx_kernel_feature f) { return (have_bits & BIT(f)) != 0; }
void agsx_kernel_set(uint32_t have) { have_bits = have; }
uint32_t agsx_kernel_bits(void) { return have_bits; }

bool agsx_kernel_below_floor(const struct agsx_kernel *k) {
  return k->major < AGSX_KERNEL_FLOOR_MAJOR ||
         (k->major == AGSX_KERNEL_FLOOR_MAJOR && k->minor < AGSX_KERNEL_FLOOR_MINOR);
}

/* ---- probes ------------------------------------------------------------------------------- */

/* A syscall exists when a call with arguments it must refuse fails with
 * something else than ENOSYS. */
static bool has_syscall(long nr, long a, long b, long c, long d, long e) {
  return syscall(nr, a, b, c, d, e) == 0 || errno != ENOSYS;
}

static bool version_at_least(const struct agsx_kernel *k, unsigned major, unsigned minor) {
  return k->major > major || (k->major == major && k->minor >= minor);
}

static bool probe_userns(void) {
  if (access("/proc/self/ns/user", F_OK) < 0)
    return false;
  _cleanup_free_ char *buf = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_read_file_at(AT_FDCWD, "/proc/sys/user/max_user_namespaces", 64, &buf, NULL, &e) < 0)
    return true; /* no such knob: nothing limits them */
  return strtoul(buf, NULL, 10) > 0;
}

static bool probe_overlay(void) {
  /* Loads the module where it is one; no superblock is made. */
  _cleanup_close_ int fs = fsopen("overlay", FSOPEN_CLOEXEC);
  return fs >= 0 || (errno != ENODEV && errno != ENOSYS);
}

/* A tmpfs mounted detached: a user.* xattr on a file of it (6.6:
 * EOPNOTSUPP before); a clone of it (6.15: EINVAL before) mounted on a
 * directory of it (6.15: EINVAL before). Needs CAP_SYS_ADMIN where we are:
 * without it the answers are "no" (the fallback is taken). Closing the two
 * mounts waits for an RCU grace period: a few ms, once per boot. */
static uint32_t probe_tmpfs(void) {
  uint32_t b = 0;
  _cleanup_close_ int fs = fsopen("tmpfs", FSOPEN_CLOEXEC);
  if (fs < 0 || fsconfig(fs, FSCONFIG_SET_STRING, "size", "64k", 0) < 0 ||
      fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
    return 0;
  _cleanup_close_ int m = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID);
  if (m < 0 || mkdirat(m, "d", 0700) < 0)
    return 0;
  _cleanup_close_ int f = openat(m, "f", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (f >= 0 && fsetxattr(f, "user.agsx", "1", 1, 0) == 0)
    b |= BIT(AGSX_KF_TMPFS_XATTR);
  _cleanup_close_ int c = open_tree(m, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
  if (c >= 0 && move_mount(c, "", m, "d", MOVE_MOUNT_F_EMPTY_PATH) == 0)
    b |= BIT(AGSX_KF_DETACHED_MOUNTS);
  return b;
}

static void parse_release(struct agsx_kernel *k) {
  struct utsname u;
  if (uname(&u) < 0)
    snprintf(u.release, sizeof(u.release), "unknown");
  snprintf(k->release, sizeof(k->release), "%s", u.release);
  if (sscanf(k->release, "%u.%u", &k->major, &k->minor) != 2)
    k->major = k->minor = 0;
}

static uint32_t probe_all(const struct agsx_kernel *k) {
  uint32_t b = 0;
  if (probe_userns())
    b |= BIT(AGSX_KF_USERNS);
  if (has_syscall(SYS_fsopen, 0, 0, 0, 0, 0) && has_syscall(SYS_move_mount, -1, 0, -1, 0, 0))
    b |= BIT(AGSX_KF_MOUNT_API);
  if (has_syscall(SYS_openat2, -1, 0, 0, 0, 0))
    b |= BIT(AGSX_KF_OPENAT2);
  /* clone3 itself is 5.3; CLONE_INTO_CGROUP came in 5.7. */
  if (has_syscall(SYS_clone3, 0, 0, 0, 0, 0) && version_at_least(k, 5, 7))
    b |= BIT(AGSX_KF_CLONE3_CGROUP);
  if (has_syscall(SYS_mount_setattr, -1, 0, 0, 0, 0))
    b |= BIT(AGSX_KF_IDMAPPED);
  if (probe_overlay()) {
    b |= BIT(AGSX_KF_OVERLAY);
    /* Only trying it in a user namespace would tell, on an older kernel
     * with backports; the version is what agsx is tested against. */
    if (version_at_least(k, 5, 19))
      b |= BIT(AGSX_KF_OVERLAY_USERNS);
  }
  b |= probe_tmpfs();
  return b;
}

/* AGSX_KERNEL_DISABLE: better paths to leave unused (only those agsx has
 * a fallback for; required ones and mere abilities cannot be turned off).
 * Unknown names are ignored with a warning. */
static uint32_t disabled_by_env(void) {
  const char *v = getenv("AGSX_KERNEL_DISABLE");
  if (v == NULL || *v == '\0')
    return 0;
  uint32_t d = 0;
  _cleanup_free_ char *copy = xstrdup(v);
  for (char *save = NULL, *t = strtok_r(copy, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
    int f = 0;
    while (f < AGSX_KF_N && strcmp(features[f].name, t) != 0)
      f++;
    if (f == AGSX_KF_N || !features[f].switchable)
      agsx_warn("AGSX_KERNEL_DISABLE: `%s` is not an optional kernel feature, ignored", t);
    else
      d |= BIT(f);
  }
  return d;
}

static void finish(struct agsx_kernel *k, uint32_t probed) {
  uint32_t off = disabled_by_env();
  k->disabled = probed & off;
  k->have = probed & ~off;
  have_bits = k->have;
}

void agsx_kernel_probe(struct agsx_kernel *ret) {
  memset(ret, 0, sizeof(*ret));
  parse_release(ret);
  finish(ret, probe_all(ret));
}

/* ---- the cache ------------------------------------------------------------------------------ */

static void boot_id(char out[64]) {
  _cleanup_free_ char *buf = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  out[0] = '\0';
  if (agsx_read_file_at(AT_FDCWD, "/proc/sys/kernel/random/boot_id", 64, &buf, NULL, &e) == 0)
    snprintf(out, 64, "%.*s", (int)strcspn(buf, "\n"), buf);
}

static char *cache_text(const char *boot, const char *release, uint32_t probed) {
  return xasprintf(CACHE_FORMAT "\nboot %s\nrelease %s\nfeatures %08x\n", boot, release, probed);
}

/* The probed bits of a cache written this boot by this kernel, or false. */
static bool cache_read(int dfd, const char *boot, const char *release, uint32_t *ret) {
  _cleanup_free_ char *buf = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  if (dfd < 0 || agsx_read_file_at(dfd, CACHE_NAME, 512, &buf, NULL, &e) < 0)
    return false;
  const char *f = strstr(buf, "\nfeatures ");
  if (f == NULL)
    return false;
  char *end;
  unsigned long bits = strtoul(f + 10, &end, 16);
  if (*end != '\n')
    return false;
  _cleanup_free_ char *want = cache_text(boot, release, (uint32_t)bits);
  if (strcmp(buf, want) != 0)
    return false;
  *ret = (uint32_t)bits;
  return true;
}

/* CACHE_DIR, made when missing (its parent must exist). */
static int open_cache_dir(const char *cache_dir) {
  if (cache_dir == NULL)
    return -1;
  if (mkdir(cache_dir, 0700) < 0 && errno != EEXIST)
    return -1;
  return open(cache_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

static int check_required(const struct agsx_kernel *k, agsx_error_t *err) {
  for (int f = 0; f < AGSX_KF_N; f++) {
    if (!features[f].required || (k->have & BIT(f)))
      continue;
    return agsx_error_set_quiet(
        err, ENOTSUP,
        "this kernel (Linux %s) lacks %s, which agsx needs (Linux %s has it; "
        "agsx supports Linux %d.%d and later)",
        k->release, features[f].what, features[f].since, AGSX_KERNEL_FLOOR_MAJOR,
        AGSX_KERNEL_FLOOR_MINOR);
  }
  return 0;
}

int agsx_kernel_get(const char *cache_dir, struct agsx_kernel *ret, agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  parse_release(ret);
  char boot[64];
  boot_id(boot);
  _cleanup_close_ int dfd = open_cache_dir(cache_dir);
  uint32_t probed;
  if (cache_read(dfd, boot, ret->release, &probed)) {
    ret->cached = true;
  } else {
    probed = probe_all(ret);
    if (dfd >= 0 && *boot) {
      /* Best effort: the next start probes again if this fails. */
      _cleanup_free_ char *text = cache_text(boot, ret->release, probed);
      _cleanup_error_ agsx_error_t e = NULL;
      if (agsx_write_file_atomic(dfd, CACHE_NAME, text, strlen(text), 0644, &e) < 0)
        agsx_debug("kernel features not cached: %s", e->msg);
    }
  }
  finish(ret, probed);
  return check_required(ret, err);
}

int agsx_kernel_ensure(const char *cache_dir, agsx_error_t *err) {
  static int done; /* 0: not yet, 1: fine, -1: refused (kept in `refused`) */
  static char *refused;
  static int refused_errno;
  if (done == 0) {
    struct agsx_kernel k;
    agsx_error_t e = NULL;
    done = agsx_kernel_get(cache_dir, &k, &e) < 0 ? -1 : 1;
    if (done < 0) {
      refused = xstrdup(e->msg);
      refused_errno = e->errno_;
      agsx_error_free(&e);
    } else if (!k.cached && agsx_kernel_below_floor(&k)) {
      agsx_warn("Linux %s is older than %d.%d, the oldest kernel agsx is tested on", k.release,
                AGSX_KERNEL_FLOOR_MAJOR, AGSX_KERNEL_FLOOR_MINOR);
    }
  }
  if (done < 0)
    return agsx_error_set_quiet(err, refused_errno, "%s", refused);
  return 0;
}
