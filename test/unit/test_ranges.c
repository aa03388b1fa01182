/* Unit tests: a lower layer copied into a per-sandbox id range
 * (agsx_layer_copy_to_range, sandbox/ranges.h): owners shifted, modes,
 * contents, hard links, symlinks, whiteouts, FIFOs, overlay's opaque mark
 * and file capabilities kept, ids past the range made nobody's. Runs as
 * root (chown, mknod, security.capability). */
#include "config.h"

#include "sandbox/snapshot.h"
#include "tap.h"
#include "util/util.h"

#include <endian.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#define BASE 131072u

static void bail(const char *what) {
  printf("Bail out! %s: %s\n", what, strerror(errno));
  exit(1);
}

static void put(int dir, const char *name, const char *data, mode_t mode, uid_t uid, gid_t gid) {
  int fd = openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 || write(fd, data, strlen(data)) != (ssize_t)strlen(data) ||
      fchown(fd, uid, gid) < 0 || fchmod(fd, mode) < 0)
    bail(name);
  close(fd);
}

static bool owned(int dir, const char *name, uid_t uid, gid_t gid) {
  struct stat st;
  return fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_uid == uid && st.st_gid == gid;
}

int main(void) {
  if (geteuid() != 0) {
    printf("1..0 # SKIP range copy tests need root (chown, mknod, security.capability)\n");
    return 0;
  }
  char tmpl[] = "/tmp/agsx-test-ranges.XXXXXX";
  if (!mkdtemp(tmpl))
    bail("mkdtemp");
  int top = open(tmpl, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (mkdirat(top, "src", 0755) < 0 || mkdirat(top, "dst", 0700) < 0)
    bail("mkdir");
  int src = openat(top, "src", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int dst = openat(top, "dst", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

  /* The layer, as unpacked with range 0's ids. */
  if (fchown(src, 0, 0) < 0 || mkdirat(src, "etc", 0755) < 0 || mkdirat(src, "opaque", 0750) < 0 ||
      fchownat(src, "opaque", 1000, 1000, 0) < 0)
    bail("layer directories");
  int etc = openat(src, "etc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  put(etc, "passwd", "root:x:0:0::/root:/bin/sh\n", 0644, 0, 0);
  put(src, "suid", "#!/bin/sh\n", 04755, 0, 0);
  put(src, "agent", "mine\n", 0600, 1000, 1001);
  put(src, "big", "far\n", 0644, 70000, 70000);
  put(src, "capped",
      "\x7f"
      "ELF",
      0755, 0, 0);
  if (linkat(src, "agent", etc, "agent-link", 0) < 0 || symlinkat("passwd", etc, "pw") < 0 ||
      fchownat(etc, "pw", 5, 6, AT_SYMLINK_NOFOLLOW) < 0 ||
      mknodat(src, "whiteout", S_IFCHR | 0000, makedev(0, 0)) < 0 ||
      mknodat(src, "fifo", S_IFIFO | 0640, 0) < 0 || fchownat(src, "fifo", 7, 8, 0) < 0)
    bail("layer entries");
  int od = openat(src, "opaque", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fsetxattr(od, "user.overlay.opaque", "y", 1, 0) < 0 ||
      fsetxattr(od, "user.overlay.origin", "z", 1, 0) < 0)
    bail("xattrs");
  /* cap_net_raw, effective: a version 2 capability (owned by the
   * namespace's root, range 0's). */
  struct vfs_cap_data v2 = {.magic_etc = htole32(VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE)};
  v2.data[0].permitted = htole32(1u << CAP_NET_RAW);
  int cf = openat(src, "capped", O_RDONLY | O_CLOEXEC);
  if (fsetxattr(cf, "security.capability", &v2, XATTR_CAPS_SZ_2, 0) < 0)
    bail("setcap");
  close(cf);

  agsx_error_t err = NULL;
  uint64_t bytes = 0;
  int r = agsx_layer_copy_to_range(src, dst, BASE, &bytes, &err);
  tap_ok(r == 0, "the copy succeeds%s%s", err ? ": " : "", err ? err->msg : "");
  agsx_error_free(&err);
  tap_ok(bytes > 0, "it copied data (%llu bytes)", (unsigned long long)bytes);

  tap_ok(owned(dst, ".", BASE, BASE), "the root is owned by the range's root");
  tap_ok(owned(dst, "etc", BASE, BASE), "a directory of root's: the range's root");
  tap_ok(owned(dst, "etc/passwd", BASE, BASE), "a file of root's: the range's root");
  tap_ok(owned(dst, "agent", BASE + 1000, BASE + 1001), "a user's file: uid and gid shifted");
  tap_ok(owned(dst, "opaque", BASE + 1000, BASE + 1000), "a user's directory: shifted");
  tap_ok(owned(dst, "big", BASE + 65534, BASE + 65534), "an id past the range: the range's nobody");
  tap_ok(owned(dst, "etc/pw", BASE + 5, BASE + 6), "a symlink: its own owner, shifted");
  tap_ok(owned(dst, "fifo", BASE + 7, BASE + 8), "a FIFO: shifted");

  struct stat st, st2;
  tap_ok(fstatat(dst, "suid", &st, 0) == 0 && (st.st_mode & 07777) == 04755,
         "setuid survives the chown");
  tap_ok(fstatat(dst, "whiteout", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISCHR(st.st_mode) &&
             st.st_rdev == makedev(0, 0),
         "a whiteout stays a 0:0 character device");
  tap_ok(fstatat(dst, "fifo", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISFIFO(st.st_mode) &&
             (st.st_mode & 0777) == 0640,
         "a FIFO stays one, with its mode");
  tap_ok(fstatat(dst, "agent", &st, 0) == 0 && fstatat(dst, "etc/agent-link", &st2, 0) == 0 &&
             st.st_ino == st2.st_ino && st.st_nlink == 2,
         "a hard link stays one inode");
  char buf[64] = {0};
  ssize_t n = readlinkat(dst, "etc/pw", buf, sizeof(buf) - 1);
  tap_ok(n == 6 && strcmp(buf, "passwd") == 0, "a symlink keeps its target");
  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  tap_ok(agsx_read_file_at(dst, "agent", 64, &text, &len, NULL) == 0 && len == 5 &&
             memcmp(text, "mine\n", 5) == 0,
         "a file's content is copied");
  int d2 = openat(dst, "opaque", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  n = fgetxattr(d2, "user.overlay.opaque", buf, sizeof(buf));
  tap_ok(n == 1 && buf[0] == 'y', "overlay's opaque mark is kept");
  n = fgetxattr(d2, "user.overlay.origin", buf, sizeof(buf));
  tap_ok(n < 0 && errno == ENODATA, "overlay's bookkeeping is not");
  close(d2);

  /* As read here (the initial namespace), a capability owned by another
   * root than ours is version 3, with that root. */
  struct vfs_ns_cap_data v3 = {0};
  cf = openat(dst, "capped", O_RDONLY | O_CLOEXEC);
  n = fgetxattr(cf, "security.capability", &v3, sizeof(v3));
  close(cf);
  tap_ok(n == XATTR_CAPS_SZ_3 &&
             (le32toh(v3.magic_etc) & VFS_CAP_REVISION_MASK) == VFS_CAP_REVISION_3 &&
             le32toh(v3.rootid) == BASE,
         "a file capability belongs to the range's root (rootid %u)", le32toh(v3.rootid));
  tap_ok((le32toh(v3.magic_etc) & VFS_CAP_FLAGS_EFFECTIVE) &&
             le32toh(v3.data[0].permitted) == (1u << CAP_NET_RAW),
         "its sets and effective flag are kept");

  /* Nothing outside DST was touched, and the source is as it was. */
  tap_ok(owned(src, "agent", 1000, 1001) && owned(src, ".", 0, 0), "the layer is unchanged");

  agsx_rm_rf_at(AT_FDCWD, tmpl, &err);
  agsx_error_free(&err);
  close(etc);
  close(od);
  close(src);
  close(dst);
  close(top);
  return tap_done();
}
