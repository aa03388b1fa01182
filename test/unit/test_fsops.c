/* Unit tests: envd's filesystem operations over a tree that stands for a
 * sandbox's root (agsx_fs_open_root), with hostile symlinks planted in it.
 * Needs root (the operations act as the sandbox's user through fsuid). */
#include "config.h"

#include "api/fsops.h"
#include "util/inotify.h"
#include "tap.h"

#include <poll.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <zlib.h>

#define BASE 200000u /* the tree's uid base: host id = BASE + sandbox id */

/* The watchers' hub and bounds, as a server has them (made in main). */
static struct agsx_inotify *hub;
static struct agsx_fs_watch_pool *pool;

static char root[64];
static int rootfd = -1;

static void must(int cond, const char *what) {
  if (!cond) {
    printf("Bail out! %s: %s\n", what, strerror(errno));
    exit(1);
  }
}

static void put(const char *rel, const char *data, mode_t mode, unsigned owner) {
  char p[512];
  snprintf(p, sizeof(p), "%s/%s", root, rel);
  int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
  must(fd >= 0, p);
  must(write(fd, data, strlen(data)) == (ssize_t)strlen(data), p);
  must(fchown(fd, BASE + owner, BASE + owner) == 0, p);
  must(fchmod(fd, mode) == 0, p);
  close(fd);
}

static void dir(const char *rel, unsigned owner) {
  char p[512];
  snprintf(p, sizeof(p), "%s/%s", root, rel);
  must(mkdir(p, 0755) == 0 || errno == EEXIST, p);
  must(chown(p, BASE + owner, BASE + owner) == 0, p);
}

static void link_(const char *target, const char *rel) {
  char p[512];
  snprintf(p, sizeof(p), "%s/%s", root, rel);
  unlink(p);
  must(symlink(target, p) == 0, p);
}

static char *slurp(const char *rel) {
  char p[512];
  snprintf(p, sizeof(p), "%s/%s", root, rel);
  char *buf = NULL;
  size_t n = 0;
  agsx_error_t err = NULL;
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || agsx_read_fd(fd, 1 << 20, &buf, &n, &err) < 0)
    buf = NULL;
  if (fd >= 0)
    close(fd);
  agsx_error_free(&err);
  return buf;
}

static bool exists(const char *rel) {
  char p[512];
  struct stat st;
  snprintf(p, sizeof(p), "%s/%s", root, rel);
  return lstat(p, &st) == 0;
}

static struct stat stat_of(const char *rel) {
  char p[512];
  struct stat st = {0};
  snprintf(p, sizeof(p), "%s/%s", root, rel);
  lstat(p, &st);
  return st;
}

static void setup(void) {
  snprintf(root, sizeof(root), "/tmp/agsx-test-fsops-XXXXXX");
  must(mkdtemp(root) != NULL, "mkdtemp");
  must(chown(root, BASE, BASE) == 0, "chown root");
  must(chmod(root, 0755) == 0, "chmod root");
  dir("etc", 0);
  put("etc/passwd",
      "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n"
      "agent:x:1001:1001::/work:/bin/sh\n",
      0644, 0);
  put("etc/group", "root:x:0:\nuser:x:1000:\nstaff:x:50:\n", 0644, 0);
  dir("home", 0);
  dir("home/user", 1000);
  dir("root", 0);
  dir("tmp", 0);
  put("home/user/hello.txt", "hello\n", 0644, 1000);
  rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  must(rootfd >= 0, "open root");
}

static void teardown(void) {
  agsx_error_t err = NULL;
  int fd = open("/tmp", O_PATH | O_DIRECTORY | O_CLOEXEC);
  agsx_rm_rf_at(fd, root + 5, &err);
  agsx_error_free(&err);
  close(fd);
}

static struct agsx_fs_ctx *ctx_for(const char *user, const char *workdir) {
  struct agsx_fs_ctx *c = NULL;
  agsx_error_t err = NULL;
  struct agsx_fs_opts o = {.user = user, .workdir = workdir};
  int r = agsx_fs_open_root(fcntl(rootfd, F_DUPFD_CLOEXEC, 3), BASE, "sbx", &o, &c, &err);
  if (r < 0)
    printf("# open: %s\n", err->msg);
  agsx_error_free(&err);
  return c;
}

/* Checks that ERR (from a call that returned R) has CODE and MSG inside. */
static void fails(int r, agsx_error_t *err, enum agsx_fs_code code, const char *msg,
                  const char *what) {
  tap_ok(r < 0 && agsx_fs_code(err) == code && (msg == NULL || strstr((*err)->msg, msg)),
         "%s: %s (%s)", what, agsx_fs_code_name(agsx_fs_code(err)),
         *err ? (*err)->msg : "succeeded");
  agsx_error_free(err);
}

static void test_codes(void) {
  struct {
    int e;
    const char *name;
    int connect, rest;
  } t[] = {{ENOENT, "not_found", 404, 404},
           {EEXIST, "already_exists", 409, 400},
           {EISDIR, "invalid_argument", 400, 400},
           {EACCES, "permission_denied", 403, 403},
           {ENOSPC, "resource_exhausted", 429, 507},
           {EDQUOT, "resource_exhausted", 429, 507},
           {EKEYREJECTED, "unauthenticated", 401, 401},
           {ESRCH, "unavailable", 503, 502},
           {EOPNOTSUPP, "unimplemented", 501, 501},
           {EIO, "internal", 500, 500}};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(t); i++) {
    agsx_error_t err = NULL;
    agsx_error_set(&err, t[i].e, "x");
    enum agsx_fs_code c = agsx_fs_code(&err);
    tap_ok(strcmp(agsx_fs_code_name(c), t[i].name) == 0 &&
               agsx_fs_code_connect_status(c) == t[i].connect &&
               agsx_fs_code_rest_status(c) == t[i].rest,
           "%s maps to %s, %d, %d", strerror(t[i].e), t[i].name, t[i].connect, t[i].rest);
    agsx_error_free(&err);
  }
}

static void test_paths(void) {
  struct agsx_fs_ctx *c = ctx_for(NULL, NULL);
  tap_ok(c && strcmp(agsx_fs_user(c), "user") == 0 && agsx_fs_uid(c) == 1000 &&
             strcmp(agsx_fs_home(c), "/home/user") == 0,
         "the default user is `user` when the image has one");
  struct {
    const char *in, *want;
  } t[] = {{"", "/home/user"},          {"~", "/home/user"},
           {"~/a/b", "/home/user/a/b"}, {"rel/x", "/home/user/rel/x"},
           {"/a/./b//c/", "/a/b/c"},    {"/../../etc", "/etc"},
           {"x/../../../..", "/"},      {"/", "/"}};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(t); i++) {
    agsx_error_t err = NULL;
    char *p = agsx_fs_path(c, t[i].in, &err);
    tap_is_str(p, t[i].want, "path `%s`", t[i].in);
    free(p);
    agsx_error_free(&err);
  }
  agsx_error_t err = NULL;
  char *p = agsx_fs_path(c, "~root/x", &err);
  fails(p ? 0 : -1, &err, AGSX_FS_INVALID_ARGUMENT, "user-specific", "`~root/x` is refused");
  free(p);
  char deep[2048] = "";
  for (int i = 0; i < 300; i++)
    strcat(deep, "/d");
  p = agsx_fs_path(c, deep, &err);
  fails(p ? 0 : -1, &err, AGSX_FS_INVALID_ARGUMENT, "components", "a path of 300 components");
  free(p);
  agsx_fs_close(c);
  c = ctx_for("agent", "/srv");
  p = c ? agsx_fs_path(c, "", &err) : NULL;
  tap_is_str(p, "/srv", "\"\" is the default workdir when one is set");
  free(p);
  p = c ? agsx_fs_path(c, "x", &err) : NULL;
  tap_is_str(p, "/work/x", "a relative path is relative to the user's home");
  free(p);
  agsx_fs_close(c);
  struct agsx_fs_ctx *bad = NULL;
  struct agsx_fs_opts o = {.user = "nobody-here"};
  int r = agsx_fs_open_root(fcntl(rootfd, F_DUPFD_CLOEXEC, 3), BASE, "sbx", &o, &bad, &err);
  fails(r, &err, AGSX_FS_UNAUTHENTICATED, "nobody-here", "an unknown user");
}

static void test_stat(struct agsx_fs_ctx *c) {
  struct agsx_fs_entry e;
  agsx_error_t err = NULL;
  int r = agsx_fs_stat(c, "hello.txt", &e, &err);
  tap_ok(r == 0 && strcmp(e.name, "hello.txt") == 0 &&
             strcmp(e.path, "/home/user/hello.txt") == 0 && e.type == AGSX_FS_TYPE_FILE &&
             e.size == 6 && e.mode == 0644 && strcmp(e.owner, "user") == 0 &&
             strcmp(e.group, "user") == 0 && e.symlink_target == NULL,
         "stat of a file: name, path, type, size, mode, owner, group");
  e.mtime_sec = 1764595320; /* 2025-12-01T13:22:00Z */
  e.mtime_nsec = 120000000;
  yajl_gen g = agsx_json_gen_new(false);
  agsx_fs_entry_gen(g, &e);
  char *json = agsx_json_gen_steal(g, NULL);
  tap_is_str(json,
             "{\"name\":\"hello.txt\",\"type\":\"FILE_TYPE_FILE\",\"path\":\"/home/user/"
             "hello.txt\",\"size\":\"6\",\"mode\":420,\"permissions\":\"-rw-r--r--\",\"owner\":"
             "\"user\",\"group\":\"user\",\"modifiedTime\":\"2025-12-01T13:22:00.120Z\"}",
             "EntryInfo JSON as envd emits it");
  free(json);
  yajl_gen_free(g);
  agsx_fs_entry_clear(&e);

  struct agsx_fs_entry bad = {.name = "a\xff\xfe", .path = "/x/a\xff\xfe", .st_mode = S_IFREG};
  g = agsx_json_gen_new(false);
  agsx_fs_entry_gen(g, &bad);
  json = agsx_json_gen_steal(g, NULL);
  yajl_gen_free(g);
  agsx_error_t jerr = NULL;
  yajl_val parsed = agsx_json_parse(json, strlen(json), 1 << 16, &jerr);
  tap_ok(parsed && strstr(json, "\"a\xef\xbf\xbd"), "invalid UTF-8 in a name stays valid JSON");
  if (parsed)
    yajl_tree_free(parsed);
  agsx_error_free(&jerr);
  free(json);
  link_("/etc", "home/user/etc-link");
  r = agsx_fs_stat(c, "~/etc-link", &e, &err);
  char perm[16] = "";
  if (r == 0)
    agsx_fs_mode_string(e.st_mode, perm);
  tap_ok(r == 0 && e.type == AGSX_FS_TYPE_DIRECTORY && strcmp(perm, "Lrwxrwxrwx") == 0 &&
             e.mode == 0755 && e.symlink_target && strcmp(e.symlink_target, "/etc") == 0,
         "a symlink: its target's type and mode, Lrwxrwxrwx, symlinkTarget (%s)",
         r == 0 && e.symlink_target ? e.symlink_target : "");
  agsx_fs_entry_clear(&e);
  link_("../../../../../../../etc/passwd", "home/user/up");
  r = agsx_fs_stat(c, "~/up", &e, &err);
  tap_ok(r == 0 && e.type == AGSX_FS_TYPE_FILE && e.symlink_target &&
             strcmp(e.symlink_target, "/etc/passwd") == 0,
         "`../../..` resolves inside the root (%s)", r == 0 ? e.symlink_target : err->msg);
  agsx_fs_entry_clear(&e);
  /* Relative targets go on from the link's directory: once doubled
   * ("/home/user/home/user/hello.txt"), which a `../..` target hid. */
  link_("hello.txt", "home/user/rel");
  r = agsx_fs_stat(c, "~/rel", &e, &err);
  tap_is_str(r == 0 && e.symlink_target ? e.symlink_target : "", "/home/user/hello.txt",
             "a relative symlink's target is absolute, not doubled");
  agsx_fs_entry_clear(&e);
  dir("home/user/d1", 1000);
  link_("../rel", "home/user/d1/rel2");
  link_("d1/./rel2", "home/user/chain");
  r = agsx_fs_stat(c, "~/chain", &e, &err);
  tap_is_str(r == 0 && e.symlink_target ? e.symlink_target : "", "/home/user/hello.txt",
             "a chain of relative links, with . and .., ends at the file");
  tap_ok(r == 0 && e.type == AGSX_FS_TYPE_FILE, "and has the file's type");
  agsx_fs_entry_clear(&e);
  link_("/nonexistent", "home/user/dangling");
  r = agsx_fs_stat(c, "~/dangling", &e, &err);
  tap_ok(r == 0 && e.type == AGSX_FS_TYPE_SYMLINK, "a dangling symlink is a symlink");
  agsx_fs_entry_clear(&e);
  r = agsx_fs_stat(c, "/missing", &e, &err);
  fails(r, &err, AGSX_FS_NOT_FOUND, "file not found", "stat of a missing path");
  r = agsx_fs_stat(c, "/home/user/hello.txt/x", &e, &err);
  fails(r, &err, AGSX_FS_NOT_FOUND, NULL, "stat below a file");

  struct {
    mode_t m;
    const char *want;
  } modes[] = {{S_IFREG | 0644, "-rw-r--r--"},   {S_IFDIR | 0755, "drwxr-xr-x"},
               {S_IFDIR | 01777, "dtrwxrwxrwx"}, {S_IFREG | 04755, "urwxr-xr-x"},
               {S_IFDIR | 02775, "dgrwxrwxr-x"}, {S_IFCHR | 0666, "Dcrw-rw-rw-"},
               {S_IFBLK | 0660, "Drw-rw----"},   {S_IFIFO | 0644, "prw-r--r--"},
               {S_IFSOCK | 0755, "Srwxr-xr-x"},  {S_IFLNK | 0777, "Lrwxrwxrwx"}};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(modes); i++) {
    char b[16];
    agsx_fs_mode_string(modes[i].m, b);
    tap_is_str(b, modes[i].want, "FileMode.String() of 0%o", (unsigned)modes[i].m);
  }
}

static void test_list(struct agsx_fs_ctx *c) {
  dir("home/user/tree", 1000);
  dir("home/user/tree/b", 1000);
  dir("home/user/tree/b/deep", 1000);
  put("home/user/tree/a.txt", "a", 0644, 1000);
  put("home/user/tree/b/c.txt", "c", 0644, 1000);
  put("home/user/tree/b/deep/d.txt", "d", 0644, 1000);
  put("home/user/tree/z.txt", "z", 0644, 1000);
  link_("/etc", "home/user/tree/to-etc");
  link_("tree", "home/user/tree-link");
  struct agsx_fs_entry *v = NULL;
  size_t n = 0;
  agsx_error_t err = NULL;
  char got[1024] = "";
  int r = agsx_fs_list(c, "~/tree", 0, &v, &n, &err);
  for (size_t i = 0; r == 0 && i < n; i++)
    snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%s", i ? " " : "", v[i].path);
  tap_is_str(r == 0 ? got : err->msg,
             "/home/user/tree/a.txt /home/user/tree/b /home/user/tree/to-etc /home/user/tree/z.txt",
             "depth 0 lists one level, lexically");
  tap_ok(r == 0 && n == 4 && v[2].type == AGSX_FS_TYPE_DIRECTORY && v[2].symlink_target,
         "a symlink in a listing has its target's type");
  agsx_fs_entries_free(v, n);
  got[0] = '\0';
  r = agsx_fs_list(c, "~/tree-link", 2, &v, &n, &err);
  for (size_t i = 0; r == 0 && i < n; i++)
    snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%s", i ? " " : "", v[i].name);
  tap_is_str(r == 0 ? got : err->msg, "a.txt b c.txt deep to-etc z.txt",
             "depth 2 through a symlinked top, symlinks below not followed");
  tap_ok(r == 0 && n > 2 && strcmp(v[2].path, "/home/user/tree-link/b/c.txt") == 0,
         "paths are built from the requested path");
  agsx_fs_entries_free(v, n);
  r = agsx_fs_list(c, "~/nope", 1, &v, &n, &err);
  fails(r, &err, AGSX_FS_NOT_FOUND, "not found", "listing a missing directory");
  r = agsx_fs_list(c, "~/hello.txt", 1, &v, &n, &err);
  fails(r, &err, AGSX_FS_INVALID_ARGUMENT, "not a directory", "listing a file");
  link_("/", "home/user/to-root");
  r = agsx_fs_list(c, "~/to-root", 1, &v, &n, &err);
  bool in_root = r == 0;
  for (size_t i = 0; r == 0 && i < n; i++)
    if (strcmp(v[i].name, "proc") == 0 || strcmp(v[i].name, "usr") == 0)
      in_root = false; /* the host's / has them; the test root does not */
  tap_ok(in_root && n == 4, "a symlink to `/` lists the sandbox's root (%zu entries)", n);
  agsx_fs_entries_free(v, n);
}

static int write_all(struct agsx_fs_ctx *c, const char *path, const char *data, agsx_error_t *err);

static void test_mkdir_move_remove(struct agsx_fs_ctx *c) {
  struct agsx_fs_entry e;
  agsx_error_t err = NULL;
  int r = agsx_fs_mkdir(c, "~/m/n/o", &e, &err);
  struct stat st = stat_of("home/user/m/n");
  tap_ok(r == 0 && e.type == AGSX_FS_TYPE_DIRECTORY && strcmp(e.path, "/home/user/m/n/o") == 0 &&
             st.st_uid == BASE + 1000 && st.st_gid == BASE + 1000 && (st.st_mode & 0777) == 0755,
         "mkdir makes parents, owned by the user (%u)", st.st_uid);
  agsx_fs_entry_clear(&e);
  r = agsx_fs_mkdir(c, "~/m/n/o", &e, &err);
  fails(r, &err, AGSX_FS_ALREADY_EXISTS, "directory already exists", "mkdir of an existing dir");
  r = agsx_fs_mkdir(c, "~/hello.txt", &e, &err);
  fails(r, &err, AGSX_FS_INVALID_ARGUMENT, "not a directory", "mkdir over a file");
  r = agsx_fs_mkdir(c, "~/hello.txt/sub", &e, &err);
  fails(r, &err, AGSX_FS_INVALID_ARGUMENT, "path is a file", "mkdir below a file");
  dir("home/user/sgid", 0);
  char sg[512];
  snprintf(sg, sizeof(sg), "%s/home/user/sgid", root);
  must(chmod(sg, 02777) == 0, "chmod");
  r = agsx_fs_mkdir(c, "~/sgid/d", &e, &err);
  st = stat_of("home/user/sgid/d");
  tap_ok(r == 0 && st.st_gid == BASE + 1000, "below a set-group-ID directory: the user's group");
  agsx_fs_entry_clear(&e);
  r = write_all(c, "~/sgid/f", "x", &err);
  st = stat_of("home/user/sgid/f");
  tap_ok(r == 0 && st.st_gid == BASE + 1000 && st.st_uid == BASE + 1000, "an upload there too");
  link_("/tmp", "home/user/tmp-link");
  r = agsx_fs_mkdir(c, "~/tmp-link/made", &e, &err);
  tap_ok(r == 0 && exists("tmp/made"), "mkdir through a symlink stays in the root");
  agsx_fs_entry_clear(&e);

  put("home/user/mv.txt", "move me", 0600, 1000);
  r = agsx_fs_move(c, "mv.txt", "~/moved/here.txt", &e, &err);
  char *s = slurp("home/user/moved/here.txt");
  tap_ok(r == 0 && s && strcmp(s, "move me") == 0 && !exists("home/user/mv.txt") &&
             strcmp(e.path, "/home/user/moved/here.txt") == 0 && e.mode == 0600,
         "move renames, creating the destination's parent");
  free(s);
  agsx_fs_entry_clear(&e);
  r = agsx_fs_move(c, "nothing", "~/x", &e, &err);
  fails(r, &err, AGSX_FS_NOT_FOUND, "source file not found", "move of a missing source");
  r = agsx_fs_move(c, "nodir/nothing", "~/x", &e, &err);
  fails(r, &err, AGSX_FS_NOT_FOUND, "source file not found", "move from a missing directory");
  link_("/etc/passwd", "home/user/pw-link");
  r = agsx_fs_move(c, "~/pw-link", "~/pw-link2", &e, &err);
  tap_ok(r == 0 && exists("home/user/pw-link2") && exists("etc/passwd"),
         "move of a symlink moves the link, not its target");
  agsx_fs_entry_clear(&e);

  r = agsx_fs_remove(c, "~/m", &err);
  tap_ok(r == 0 && !exists("home/user/m"), "remove is recursive");
  r = agsx_fs_remove(c, "~/m", &err);
  tap_ok(r == 0, "remove of a missing path is no error");
  r = agsx_fs_remove(c, "~/no/such/dir/x", &err);
  tap_ok(r == 0, "remove below a missing directory is no error");
  r = agsx_fs_remove(c, "~/pw-link2", &err);
  tap_ok(r == 0 && !exists("home/user/pw-link2") && exists("etc/passwd"),
         "remove of a symlink removes the link only");
  r = agsx_fs_remove(c, "/", &err);
  fails(r, &err, AGSX_FS_INVALID_ARGUMENT, "'/'", "remove of `/` is refused");
  agsx_error_free(&err);
}

static int write_all(struct agsx_fs_ctx *c, const char *path, const char *data, agsx_error_t *err) {
  struct agsx_fs_upload *u = NULL;
  if (agsx_fs_upload_open(c, path, &u, err) < 0)
    return -1;
  int r = agsx_fs_upload_write(u, data, strlen(data), err);
  if (r == 0)
    r = agsx_fs_upload_commit(u, NULL, err);
  agsx_fs_upload_free(u);
  return r;
}

static size_t count_entries(const char *rel) {
  char p[512];
  snprintf(p, sizeof(p), "%s/%s", root, rel);
  DIR *d = opendir(p);
  size_t n = 0;
  for (struct dirent *de; d && (de = readdir(d));)
    n += de->d_name[0] != '.' || strncmp(de->d_name, ".agsx", 5) == 0;
  if (d)
    closedir(d);
  return n;
}

static void test_upload(struct agsx_fs_ctx *c) {
  agsx_error_t err = NULL;
  int r = write_all(c, "~/upl/dir/f.txt", "data", &err);
  struct stat st = stat_of("home/user/upl/dir/f.txt"), dst = stat_of("home/user/upl");
  char *s = slurp("home/user/upl/dir/f.txt");
  tap_ok(r == 0 && s && strcmp(s, "data") == 0 && st.st_uid == BASE + 1000 &&
             (st.st_mode & 07777) == 0644 && dst.st_uid == BASE + 1000,
         "upload creates parents and the file, owned by the user, 0644: %s", err ? err->msg : "ok");
  free(s);
  agsx_error_free(&err);
  put("home/user/keep.txt", "old content", 0640, 1000);
  struct agsx_fs_upload *u = NULL;
  r = agsx_fs_upload_open(c, "~/keep.txt", &u, &err);
  if (r == 0)
    r = agsx_fs_upload_write(u, "half", 4, &err);
  size_t during = count_entries("home/user");
  agsx_fs_upload_free(u); /* aborted */
  s = slurp("home/user/keep.txt");
  tap_ok(r == 0 && s && strcmp(s, "old content") == 0, "an aborted upload leaves the old file");
  free(s);
  tap_ok(count_entries("home/user") == during, "and no temporary file behind");
  r = write_all(c, "~/keep.txt", "new", &err);
  st = stat_of("home/user/keep.txt");
  s = slurp("home/user/keep.txt");
  tap_ok(r == 0 && s && strcmp(s, "new") == 0 && (st.st_mode & 0777) == 0640,
         "an upload over a file replaces it, keeping its mode");
  free(s);
  r = write_all(c, "~/upl", "x", &err);
  fails(r, &err, AGSX_FS_INVALID_ARGUMENT, "is a directory", "an upload onto a directory");
  r = write_all(c, "~/hello.txt/x", "x", &err);
  fails(r, &err, AGSX_FS_INVALID_ARGUMENT, "path is a file", "an upload below a file");

  /* Symlinks planted by sandbox code lead only inside the root. */
  link_("/etc/agsx-test-planted", "home/user/abs-link");
  r = write_all(c, "~/abs-link", "inside", &err);
  s = slurp("etc/agsx-test-planted");
  tap_ok(r == 0 && s && strcmp(s, "inside") == 0 && access("/etc/agsx-test-planted", F_OK) < 0,
         "an upload through an absolute symlink writes inside the root");
  free(s);
  link_("../../../../../../../../tmp", "home/user/up-link");
  r = write_all(c, "~/up-link/agsx-fsops-host-x", "inside", &err);
  tap_ok(r == 0 && exists("tmp/agsx-fsops-host-x") && access("/tmp/agsx-fsops-host-x", F_OK) < 0,
         "an upload through `../../..` stays in the root");
  agsx_error_free(&err);
  char fifo[512];
  snprintf(fifo, sizeof(fifo), "%s/home/user/fifo", root);
  must(mkfifo(fifo, 0644) == 0, "mkfifo");
  r = write_all(c, "~/fifo", "x", &err);
  fails(r, &err, AGSX_FS_INVALID_ARGUMENT, "not a regular file", "an upload onto a FIFO");
}

static void test_download(struct agsx_fs_ctx *c) {
  int fd = -1;
  uint64_t size = 0;
  char *abs = NULL;
  agsx_error_t err = NULL;
  int r = agsx_fs_download_open(c, "hello.txt", &fd, &size, &abs, &err);
  char buf[16] = "";
  tap_ok(r == 0 && size == 6 && read(fd, buf, sizeof(buf)) == 6 &&
             strcmp(abs, "/home/user/hello.txt") == 0,
         "download opens the file with its size");
  if (fd >= 0)
    close(fd);
  free(abs);
  r = agsx_fs_download_open(c, "/nothing/here", &fd, &size, NULL, &err);
  fails(r, &err, AGSX_FS_NOT_FOUND, "path '/nothing/here' does not exist", "download, missing");
  r = agsx_fs_download_open(c, "~", &fd, &size, NULL, &err);
  fails(r, &err, AGSX_FS_INVALID_ARGUMENT, "is a directory", "download of a directory");
  r = agsx_fs_download_open(c, "~/fifo", &fd, &size, NULL, &err);
  fails(r, &err, AGSX_FS_INVALID_ARGUMENT, "not a regular file", "download of a FIFO");
  char dev[512];
  snprintf(dev, sizeof(dev), "%s/home/user/ptmx", root);
  if (mknod(dev, S_IFCHR | 0666, makedev(5, 2)) == 0) { /* opening it would make a pty */
    r = agsx_fs_download_open(c, "~/ptmx", &fd, &size, NULL, &err);
    fails(r, &err, AGSX_FS_INVALID_ARGUMENT, "not a regular file", "download of a device");
    link_("/home/user/ptmx", "etc/group"); /* and the context never opens it either */
    struct agsx_fs_ctx *c2 = ctx_for(NULL, NULL);
    struct agsx_fs_entry e;
    r = c2 ? agsx_fs_stat(c2, "~/hello.txt", &e, &err) : -1;
    tap_ok(r == 0 && strcmp(e.group, "1000") == 0, "a device as /etc/group: groups unnamed");
    if (r == 0)
      agsx_fs_entry_clear(&e);
    agsx_fs_close(c2);
    char grp[512];
    snprintf(grp, sizeof(grp), "%s/etc/group", root);
    unlink(grp);
    put("etc/group", "root:x:0:\nuser:x:1000:\nstaff:x:50:\n", 0644, 0);
  }
  link_("/etc/shadow", "home/user/shadow");
  r = agsx_fs_download_open(c, "~/shadow", &fd, &size, NULL, &err);
  fails(r, &err, AGSX_FS_NOT_FOUND, NULL, "a symlink to the host's /etc/shadow reads nothing");
  link_("/../../../../etc/hostname", "home/user/hn");
  r = agsx_fs_download_open(c, "~/hn", &fd, &size, NULL, &err);
  fails(r, &err, AGSX_FS_NOT_FOUND, NULL, "nor one to `/../../../../etc/hostname`");
  link_("/proc/self/root/etc/hostname", "home/user/magic");
  r = agsx_fs_download_open(c, "~/magic", &fd, &size, NULL, &err);
  tap_ok(r < 0, "nor a path through /proc/self/root");
  agsx_error_free(&err);
}

/* Files of the host in the tree (owner 0: outside the sandbox's ids, as a
 * host image's /usr or /etc/ssl): only what "other" may, never host root's
 * privileges. */
static void host_owned(const char *rel, mode_t mode, bool is_dir) {
  char p[512];
  snprintf(p, sizeof(p), "%s/%s", root, rel);
  if (is_dir)
    must(mkdir(p, mode) == 0 || errno == EEXIST, p);
  else
    close(open(p, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, mode));
  must(chown(p, 0, 0) == 0 && chmod(p, mode) == 0, p);
}

static void test_host_files(struct agsx_fs_ctx *c) {
  host_owned("hostdir", 0755, true);
  host_owned("hostdir/secret", 0600, false);
  host_owned("hostdir/pub", 0644, false);
  host_owned("hostpriv", 0700, true);
  host_owned("hostopen", 01777, true);
  host_owned("hostopen/theirs", 0644, false);
  int fd = -1;
  uint64_t size;
  agsx_error_t err = NULL;
  int r = agsx_fs_download_open(c, "/hostdir/secret", &fd, &size, NULL, &err);
  fails(r, &err, AGSX_FS_PERMISSION_DENIED, "permission denied", "a host file of mode 0600");
  r = agsx_fs_download_open(c, "/hostdir/pub", &fd, &size, NULL, &err);
  tap_ok(r == 0, "a host file of mode 0644 reads");
  if (r == 0)
    close(fd);
  struct agsx_fs_entry *v = NULL, e;
  size_t n = 0;
  r = agsx_fs_list(c, "/hostdir", 1, &v, &n, &err);
  tap_ok(r == 0 && n == 2, "a host directory of mode 0755 lists");
  agsx_fs_entries_free(v, n);
  r = agsx_fs_list(c, "/hostpriv", 1, &v, &n, &err);
  fails(r, &err, AGSX_FS_PERMISSION_DENIED, NULL, "a host directory of mode 0700 does not");
  r = agsx_fs_watch_open(pool, c, "/hostpriv", 0, &(struct agsx_fs_watch *){NULL}, &err);
  fails(r, &err, AGSX_FS_PERMISSION_DENIED, NULL, "nor is it watched");
  host_owned("hostpriv/readable", 0644, false);
  host_owned("hostpriv/sub", 0755, true);
  r = agsx_fs_download_open(c, "/hostpriv/readable", &fd, &size, NULL, &err);
  fails(r, &err, AGSX_FS_PERMISSION_DENIED, NULL, "nor a readable file below it");
  r = agsx_fs_list(c, "/hostpriv/sub", 1, &v, &n, &err);
  fails(r, &err, AGSX_FS_PERMISSION_DENIED, NULL, "nor a directory below it");
  link_("/hostpriv/readable", "tmp/to-priv");
  r = agsx_fs_download_open(c, "/tmp/to-priv", &fd, &size, NULL, &err);
  fails(r, &err, AGSX_FS_PERMISSION_DENIED, NULL, "nor through a symlink from elsewhere");
  r = write_all(c, "/hostdir/new", "x", &err);
  fails(r, &err, AGSX_FS_PERMISSION_DENIED, NULL, "no upload into a host directory of 0755");
  tap_ok(!exists("hostdir/new"), "and nothing is left there");
  r = write_all(c, "/hostdir/pub", "x", &err);
  fails(r, &err, AGSX_FS_PERMISSION_DENIED, NULL, "nor over a host file there");
  r = agsx_fs_mkdir(c, "/hostdir/sub/deeper", &e, &err);
  fails(r, &err, AGSX_FS_PERMISSION_DENIED, NULL, "no mkdir there");
  r = agsx_fs_remove(c, "/hostdir/pub", &err);
  fails(r, &err, AGSX_FS_PERMISSION_DENIED, NULL, "no remove there");
  r = agsx_fs_move(c, "/hostdir/pub", "/tmp/stolen", &e, &err);
  fails(r, &err, AGSX_FS_PERMISSION_DENIED, NULL, "no move out of there");
  tap_ok(exists("hostdir/pub") && !exists("tmp/stolen"), "the host files stay");
  r = write_all(c, "/hostopen/mine", "x", &err);
  tap_ok(r == 0, "an upload into a host directory of 1777 is allowed");
  r = agsx_fs_remove(c, "/hostopen/mine", &err);
  tap_ok(r == 0, "and removing the sandbox's own file there");
  r = agsx_fs_remove(c, "/hostopen/theirs", &err);
  fails(r, &err, AGSX_FS_PERMISSION_DENIED, NULL, "but not a host file in that sticky directory");
}

static void multipart_body(char *out, size_t n, const char *f1, const char *f2) {
  snprintf(out, n,
           "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n\r\n"
           "one\r\n--B\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\nskip\r\n"
           "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n\r\n"
           "two\r\n--B--\r\n",
           f1, f2);
}

static void test_meta_headers(void) {
  struct agsx_fs_meta m = {0};
  agsx_error_t err = NULL;
  tap_ok(agsx_fs_meta_header(&m, "X-Metadata-Zeta", "last", &err) == 1 &&
             agsx_fs_meta_header(&m, "x-metadata-Author", "me, myself", &err) == 1 &&
             agsx_fs_meta_header(&m, "X-METADATA-AUTHOR", "second", &err) == 0 &&
             agsx_fs_meta_header(&m, "X-Metadata-", "empty key", &err) == 0 &&
             agsx_fs_meta_header(&m, "Content-Type", "text/plain", &err) == 0 &&
             agsx_fs_meta_header(&m, "X-Metadata-e", "", &err) == 1,
         "X-Metadata-* headers are taken, keys lowercased, the first of a key wins");
  tap_ok(m.n == 3 && strcmp(m.keys[0], "author") == 0 && strcmp(m.values[0], "me, myself") == 0 &&
             strcmp(m.keys[1], "e") == 0 && strcmp(m.keys[2], "zeta") == 0 &&
             m.bytes == 3 * 9 + strlen("authorme, myselfezetalast"),
         "sorted by key, sized as envd counts (%zu)", m.bytes);
  tap_ok(agsx_fs_meta_header(&m, "X-Metadata-bad", "tab\there", &err) < 0 && err &&
             err->errno_ == EINVAL && strstr(err->msg, "non-printable"),
         "a value that is not printable ASCII is refused");
  agsx_error_free(&err);
  char key[300] = "X-Metadata-";
  memset(key + 11, 'k', 247);
  tap_ok(agsx_fs_meta_header(&m, key, "v", &err) < 0 && err && err->errno_ == EINVAL,
         "a key of 247 bytes is refused");
  agsx_error_free(&err);
  key[11 + 246] = '\0';
  tap_ok(agsx_fs_meta_header(&m, key, "v", &err) == 1, "one of 246 is taken");
  char big[4096];
  memset(big, 'v', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  tap_ok(agsx_fs_meta_header(&m, "X-Metadata-big", big, &err) < 0 && err && err->errno_ == E2BIG,
         "a set over 4096 bytes is refused");
  agsx_error_free(&err);
  agsx_fs_meta_clear(&m);
  tap_ok(agsx_fs_network_fs(0x6969) && agsx_fs_network_fs(0x65735546) &&
             agsx_fs_network_fs(0xfe534d42) && !agsx_fs_network_fs(0xef53) &&
             !agsx_fs_network_fs(0x01021994),
         "NFS, FUSE and SMB2 are network filesystems; ext4 and tmpfs are not");
}

/* user.* xattrs where the test's tree lives (a tmpfs before 6.6 has none). */
static bool tree_has_xattrs(void) {
  int fd = openat(rootfd, "tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int t = fd < 0 ? -1 : openat(fd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  bool ok = t >= 0 && fsetxattr(t, "user.agsx-probe", "1", 1, 0) == 0;
  if (t >= 0)
    close(t);
  if (fd >= 0)
    close(fd);
  return ok;
}

static void test_receive_meta(struct agsx_fs_ctx *c) {
  if (!tree_has_xattrs()) {
    for (int i = 0; i < 3; i++)
      tap_ok(1, "# SKIP the test tree's filesystem keeps no user xattrs");
    return;
  }
  struct agsx_fs_meta m = {0};
  agsx_error_t err = NULL;
  must(agsx_fs_meta_header(&m, "X-Metadata-Owner", "team a", &err) == 1, "meta");
  struct agsx_fs_receive *rx = NULL;
  struct agsx_fs_entry *v = NULL;
  size_t n = 0;
  int r = agsx_fs_receive_open(c, "application/octet-stream", "~/meta.txt", false, &rx, &err);
  if (r == 0) {
    agsx_fs_receive_set_meta(rx, &m);
    r = agsx_fs_receive_feed(rx, "m", 1, &err);
  }
  if (r == 0)
    r = agsx_fs_receive_finish(rx, &v, &n, &err);
  tap_ok(r == 0 && n == 1 && v[0].meta.n == 1 && strcmp(v[0].meta.keys[0], "owner") == 0 &&
             strcmp(v[0].meta.values[0], "team a") == 0,
         "an upload writes its metadata and answers it: %s", err ? err->msg : "ok");
  agsx_fs_entries_free(v, n);
  agsx_fs_receive_free(rx);
  agsx_error_free(&err);
  link_("meta.txt", "home/user/meta-link");
  struct agsx_fs_entry e;
  r = agsx_fs_stat(c, "~/meta-link", &e, &err);
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  if (r == 0)
    agsx_fs_entry_gen(g, &e);
  _cleanup_free_ char *json = agsx_json_gen_steal(g, NULL);
  tap_ok(r == 0 && strstr(json, "\"metadata\":{\"owner\":\"team a\"}"),
         "Stat of a link to it shows the target's metadata: %s", r == 0 ? json : err->msg);
  agsx_fs_entry_clear(&e);
  agsx_error_free(&err);
  /* a new upload without metadata replaces the set */
  r = agsx_fs_receive_open(c, "application/octet-stream", "~/meta.txt", false, &rx, &err);
  if (r == 0)
    r = agsx_fs_receive_feed(rx, "n", 1, &err);
  if (r == 0)
    r = agsx_fs_receive_finish(rx, &v, &n, &err);
  agsx_fs_entries_free(v, n);
  agsx_fs_receive_free(rx);
  r = r == 0 ? agsx_fs_stat(c, "~/meta.txt", &e, &err) : r;
  tap_ok(r == 0 && e.meta.n == 0, "an upload without metadata leaves the file none");
  agsx_fs_entry_clear(&e);
  agsx_error_free(&err);
}

/* A filesystem without user xattrs (ramfs; a tmpfs before Linux 6.6):
 * an upload with metadata fails (unimplemented, 501) and the old file
 * stays. The ramfs is mounted in a mount namespace of this process only. */
static void test_receive_meta_unsupported(void) {
  char mnt[512];
  snprintf(mnt, sizeof(mnt), "%s/home/user/ram", root);
  dir("home/user/ram", 1000);
  if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
      mount("none", mnt, "ramfs", 0, "mode=0755") < 0) {
    for (int i = 0; i < 2; i++)
      tap_ok(1, "# SKIP no ramfs in a mount namespace of our own: %s", strerror(errno));
    return;
  }
  must(chown(mnt, BASE + 1000, BASE + 1000) == 0, "chown ramfs");
  put("home/user/ram/old.txt", "old", 0644, 1000);
  /* a root opened in this namespace, where the ramfs is */
  struct agsx_fs_ctx *c = NULL;
  agsx_error_t oerr = NULL;
  must(agsx_fs_open_root(open(root, O_PATH | O_DIRECTORY | O_CLOEXEC), BASE, "sbx", NULL, &c,
                         &oerr) == 0,
       "context");
  struct agsx_fs_meta m = {0};
  agsx_error_t err = NULL;
  must(agsx_fs_meta_header(&m, "X-Metadata-k", "v", &err) == 1, "meta");
  struct agsx_fs_receive *rx = NULL;
  struct agsx_fs_entry *v = NULL;
  size_t n = 0;
  int r = agsx_fs_receive_open(c, "application/octet-stream", "~/ram/old.txt", false, &rx, &err);
  if (r == 0) {
    agsx_fs_receive_set_meta(rx, &m);
    r = agsx_fs_receive_feed(rx, "new", 3, &err);
  }
  if (r == 0)
    r = agsx_fs_receive_finish(rx, &v, &n, &err);
  enum agsx_fs_code code = agsx_fs_code(&err);
  tap_ok(r < 0 && code == AGSX_FS_UNIMPLEMENTED && agsx_fs_code_rest_status(code) == 501 &&
             strstr(err->msg, "extended attributes"),
         "metadata on a filesystem without user xattrs: 501 (%s)", err ? err->msg : "no error");
  agsx_fs_entries_free(v, n);
  agsx_fs_receive_free(rx);
  agsx_error_free(&err);
  char *old = slurp("home/user/ram/old.txt");
  DIR *d = opendir(mnt);
  int entries = 0;
  for (struct dirent *de; d && (de = readdir(d));)
    entries += de->d_name[0] != '.';
  if (d)
    closedir(d);
  tap_ok(old && strcmp(old, "old") == 0 && entries == 1, "the old file stays, and no temp");
  free(old);
  agsx_fs_close(c);
  must(umount2(mnt, MNT_DETACH) == 0, "umount ramfs");
}

static void test_compose(struct agsx_fs_ctx *c) {
  put("home/user/c1", "ab", 0644, 1000);
  put("home/user/c2", "", 0644, 1000);
  put("home/user/c3", "cde", 0644, 1000);
  char *src[] = {"c1", "~/c2", "/home/user/c3", NULL};
  struct agsx_fs_compose *k = NULL;
  agsx_error_t err = NULL;
  struct agsx_fs_entry e = {0};
  int r = agsx_fs_compose_open(c, src, 3, "~/cdir/out", &k, &err), steps = 0;
  while (r == 0 && (r = agsx_fs_compose_step(k, 1, &err)) == 0)
    steps++;
  if (r == 1)
    r = agsx_fs_compose_commit(k, &e, &err);
  agsx_fs_compose_free(k);
  char *out = slurp("home/user/cdir/out"), *gone = slurp("home/user/c1");
  tap_ok(r == 0 && out && strcmp(out, "abcde") == 0 && steps >= 5 && !gone &&
             strcmp(e.path, "/home/user/cdir/out") == 0,
         "compose of three sources, one byte a step (%d), the sources removed: %s", steps,
         err ? err->msg : "ok");
  free(out);
  free(gone);
  agsx_fs_entry_clear(&e);
  agsx_error_free(&err);
  put("home/user/keep", "keep", 0644, 1000);
  link_("keep", "home/user/to-keep");
  char *same[] = {"keep", NULL};
  r = agsx_fs_compose_open(c, same, 1, "~/to-keep", &k, &err);
  fails(r, &err, AGSX_FS_INVALID_ARGUMENT, "cannot be the same as destination",
        "a destination that is the source through a symlink");
  r = agsx_fs_compose_open(c, same, 1, "~/keep", &k, &err);
  fails(r, &err, AGSX_FS_INVALID_ARGUMENT, "cannot be the same", "the source as destination");
  char *missing[] = {"keep", "nope", NULL}, *isdir[] = {"cdir", NULL};
  r = agsx_fs_compose_open(c, missing, 2, "~/new/x", &k, &err);
  fails(r, &err, AGSX_FS_NOT_FOUND, "source file not found: nope", "a missing source");
  r = agsx_fs_compose_open(c, isdir, 1, "~/x", &k, &err);
  fails(r, &err, AGSX_FS_INVALID_ARGUMENT, "not a regular file", "a directory source");
  char *k_ = slurp("home/user/keep");
  struct stat st;
  tap_ok(k_ && strcmp(k_, "keep") == 0 && fstatat(rootfd, "home/user/new", &st, 0) < 0,
         "refusals change nothing, and make no directory");
  free(k_);
  struct agsx_fs_compose_req q;
  const char *ok = "{\"source_paths\":[\"a\",\"b\"],\"destination\":\"d\",\"username\":\"u\"}";
  r = agsx_fs_compose_parse(ok, strlen(ok), &q, &err);
  tap_ok(r == 0 && q.n == 2 && strcmp(q.sources[1], "b") == 0 && q.sources[2] == NULL &&
             strcmp(q.dest, "d") == 0 && strcmp(q.user, "u") == 0,
         "a compose body parses");
  agsx_fs_compose_req_clear(&q);
  const char *bad[] = {"",
                       "[]",
                       "{\"source_paths\":[],\"destination\":\"d\"}",
                       "{\"source_paths\":[\"a\"]}",
                       "{\"source_paths\":[1],\"destination\":\"d\"}",
                       "{\"source_paths\":\"a\",\"destination\":\"d\"}"};
  int refused = 0;
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(bad); i++) {
    refused +=
        agsx_fs_compose_parse(bad[i], strlen(bad[i]), &q, &err) < 0 && err && err->errno_ == EINVAL;
    agsx_error_free(&err);
  }
  tap_is_int(refused, (int)AGSX_ARRAY_SIZE(bad), "bad compose bodies are invalid_argument");
}

static void test_receive(struct agsx_fs_ctx *c) {
  char body[1024];
  multipart_body(body, sizeof(body), "rx/one.txt", "/tmp/rx-two.txt");
  struct agsx_fs_receive *rx = NULL;
  agsx_error_t err = NULL;
  struct agsx_fs_entry *v = NULL;
  size_t n = 0;
  int r = agsx_fs_receive_open(c, "multipart/form-data; boundary=B", NULL, false, &rx, &err);
  for (size_t i = 0; r == 0 && i < strlen(body); i += 3)
    r = agsx_fs_receive_feed(rx, body + i, strlen(body) - i < 3 ? strlen(body) - i : 3, &err);
  if (r == 0)
    r = agsx_fs_receive_finish(rx, &v, &n, &err);
  char *a = slurp("home/user/rx/one.txt"), *b = slurp("tmp/rx-two.txt");
  tap_ok(r == 0 && n == 2 && strcmp(v[0].path, "/home/user/rx/one.txt") == 0 &&
             strcmp(v[1].name, "rx-two.txt") == 0 && v[1].type == AGSX_FS_TYPE_FILE && a &&
             strcmp(a, "one") == 0 && b && strcmp(b, "two") == 0,
         "a multipart body of two files (and a field) fed 3 bytes at a time: %s",
         err ? err->msg : "ok");
  free(a);
  free(b);
  agsx_fs_entries_free(v, n);
  agsx_fs_receive_free(rx);
  agsx_error_free(&err);

  multipart_body(body, sizeof(body), "dup.txt", "~/dup.txt");
  r = agsx_fs_receive_open(c, "multipart/form-data; boundary=B", NULL, false, &rx, &err);
  if (r == 0)
    r = agsx_fs_receive_feed(rx, body, strlen(body), &err);
  fails(r, &err, AGSX_FS_INVALID_ARGUMENT, "multiple files to the same path",
        "the same path twice in one body");
  agsx_fs_receive_free(rx);

  r = agsx_fs_receive_open(c, "application/octet-stream", NULL, false, &rx, &err);
  fails(r, &err, AGSX_FS_INVALID_ARGUMENT, "path query parameter is required",
        "a raw body needs a path");
  r = agsx_fs_receive_open(c, "text/plain", "~/x", false, &rx, &err);
  fails(r, &err, AGSX_FS_INVALID_ARGUMENT, "unsupported content type", "a text/plain body");

  /* gzip-encoded raw body, two members */
  char plain[] = "compressed content", gz[256];
  z_stream z = {0};
  must(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK, "deflate");
  z.next_in = (Bytef *)plain;
  z.avail_in = (uInt)strlen(plain);
  z.next_out = (Bytef *)gz;
  z.avail_out = sizeof(gz);
  must(deflate(&z, Z_FINISH) == Z_STREAM_END, "deflate");
  size_t gzlen = sizeof(gz) - z.avail_out;
  deflateEnd(&z);
  r = agsx_fs_receive_open(c, "application/octet-stream", "~/gz.txt", true, &rx, &err);
  for (size_t i = 0; r == 0 && i < gzlen; i++)
    r = agsx_fs_receive_feed(rx, gz + i, 1, &err);
  if (r == 0)
    r = agsx_fs_receive_finish(rx, &v, &n, &err);
  a = slurp("home/user/gz.txt");
  tap_ok(r == 0 && n == 1 && a && strcmp(a, plain) == 0, "a gzip-encoded raw body: %s",
         err ? err->msg : "ok");
  free(a);
  agsx_fs_entries_free(v, n);
  agsx_fs_receive_free(rx);
  agsx_error_free(&err);
  r = agsx_fs_receive_open(c, "application/octet-stream", "~/gz2.txt", true, &rx, &err);
  if (r == 0)
    r = agsx_fs_receive_feed(rx, gz, gzlen / 2, &err);
  if (r == 0)
    r = agsx_fs_receive_finish(rx, &v, &n, &err);
  fails(r, &err, AGSX_FS_INVALID_ARGUMENT, "truncated", "a truncated gzip body");
  agsx_fs_receive_free(rx);
  tap_ok(!exists("home/user/gz2.txt"), "and it leaves no file");
}

static void test_signature(void) {
  char *s = agsx_fs_signature("/home/user/a.txt", "read", NULL, "tok123", 0);
  tap_is_str(s, "v1_byj2OB/vujgbES/1KAKCaR27E+9eOrB6PzeTnIL8L6M", "signature without expiry");
  free(s);
  s = agsx_fs_signature("/home/user/a.txt", "write", "user", "tok123", 1900000000);
  tap_is_str(s, "v1_+nUuws2VX5xpy4tsMnaozOR+52Yl70dmJINQwA4bvCg", "signature with expiry");
  agsx_error_t err = NULL;
  int r = agsx_fs_signature_check("/home/user/a.txt", "write", "user", "tok123", s, "1900000000",
                                  1800000000, &err);
  tap_ok(r == 0, "a valid signature passes");
  r = agsx_fs_signature_check("/home/user/a.txt", "write", "user", "tok123", s, "1900000000",
                              1900000001, &err);
  fails(r, &err, AGSX_FS_PERMISSION_DENIED, "already expired", "an expired signature");
  r = agsx_fs_signature_check("/home/user/a.txt", "read", "user", "tok123", s, "1900000000",
                              1800000000, &err);
  fails(r, &err, AGSX_FS_PERMISSION_DENIED, "invalid signature", "the other operation's");
  r = agsx_fs_signature_check("/home/user/a.txt", "write", "user", "tok123", s, "1900000001",
                              1800000000, &err);
  fails(r, &err, AGSX_FS_PERMISSION_DENIED, "invalid signature", "another expiry");
  r = agsx_fs_signature_check("/home/user/a.txt", "write", "user", "tok123", NULL, NULL, 0, &err);
  fails(r, &err, AGSX_FS_PERMISSION_DENIED, "missing signature", "no signature");
  free(s);
}

static size_t drain(struct agsx_fs_watch *w, char *log, size_t n) {
  struct pollfd p = {.fd = agsx_fs_watch_fd(w), .events = POLLIN};
  size_t got = 0;
  while (poll(&p, 1, 200) > 0) {
    agsx_fs_watch_dispatch(w);
    struct agsx_fs_event e;
    agsx_error_t err = NULL;
    while (agsx_fs_watch_next(w, &e, &err) == 1) {
      snprintf(log + strlen(log), n - strlen(log), "%s%s:%s", log[0] ? " " : "",
               agsx_fs_event_type_name(e.type) + 11, e.name);
      agsx_fs_event_clear(&e);
      got++;
    }
    agsx_error_free(&err);
  }
  return got;
}

static void test_watch(struct agsx_fs_ctx *c) {
  dir("home/user/w", 1000);
  struct agsx_fs_watch *w = NULL;
  agsx_error_t err = NULL;
  int r = agsx_fs_watch_open(pool, c, "~/w", AGSX_FS_WATCH_RECURSIVE, &w, &err);
  tap_ok(r == 0, "watch a directory recursively: %s", err ? err->msg : "ok");
  agsx_error_free(&err);
  if (r < 0)
    return;
  write_all(c, "~/w/a.txt", "1", &err);
  char p[512];
  snprintf(p, sizeof(p), "%s/home/user/w/sub", root);
  mkdir(p, 0755);
  char log[4096] = "";
  drain(w, log, sizeof(log)); /* the watch on sub/ is added as its CREATE is read */
  put("home/user/w/sub/b.txt", "2", 0644, 1000);
  snprintf(p, sizeof(p), "%s/home/user/w/sub/b.txt", root);
  chmod(p, 0600);
  unlink(p);
  drain(w, log, sizeof(log));
  tap_ok(strstr(log, "CREATE:sub") && strstr(log, "CREATE:sub/b.txt") &&
             strstr(log, "WRITE:sub/b.txt") && strstr(log, "CHMOD:sub/b.txt") &&
             strstr(log, "REMOVE:sub/b.txt") && strstr(log, "CREATE:a.txt WRITE:a.txt") &&
             !strstr(log, "agsx-upload") && !strstr(log, "#"),
         "events with names relative to the watched directory: %s", log);
  agsx_fs_watch_free(w);

  r = agsx_fs_watch_open(pool, c, "~/w", 0, &w, &err);
  for (unsigned i = 0; r == 0 && i < AGSX_FS_WATCH_QUEUE + 10; i++) {
    snprintf(p, sizeof(p), "%s/home/user/w/n%u", root, i);
    close(open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644)); /* distinct names: never merged */
    if (i % 512 == 0)
      agsx_fs_watch_dispatch(w);
  }
  agsx_fs_watch_dispatch(w);
  struct agsx_fs_event e;
  size_t n = 0;
  int k1 = r;
  while (k1 == 0 && (k1 = agsx_fs_watch_next(w, &e, &err)) == 1) {
    n++;
    agsx_fs_event_clear(&e);
    k1 = 0;
  }
  r = k1;
  fails(r, &err, AGSX_FS_RESOURCE_EXHAUSTED, "events were lost", "a full queue overflows");
  tap_ok(n == AGSX_FS_WATCH_QUEUE, "after the %zu events it held", n);
  agsx_fs_watch_free(w);

  r = agsx_fs_watch_open(pool, c, "~/hello.txt", 0, &w, &err);
  fails(r, &err, AGSX_FS_INVALID_ARGUMENT, "not a directory", "watching a file");
  r = agsx_fs_watch_open(pool, c, "~/none", 0, &w, &err);
  fails(r, &err, AGSX_FS_NOT_FOUND, "not found", "watching a missing directory");

  /* The registry of polling watchers. */
  struct agsx_fs_watchers *reg = agsx_fs_watchers_new(2, 300);
  char id[33], id2[33], id3[33];
  struct agsx_fs_watch *w1 = NULL, *w2 = NULL, *w3 = NULL;
  agsx_fs_watch_open(pool, c, "~/w", 0, &w1, &err);
  agsx_fs_watch_open(pool, c, "~/w", 0, &w2, &err);
  agsx_fs_watch_open(pool, c, "~/w", 0, &w3, &err);
  r = agsx_fs_watchers_add(reg, "sbx", w1, id, &err);
  r |= agsx_fs_watchers_add(reg, "sbx", w2, id2, &err);
  tap_ok(r == 0 && strlen(id) == 32 && strcmp(id, id2) != 0, "watchers get random ids");
  r = agsx_fs_watchers_add(reg, "sbx", w3, id3, &err);
  fails(r, &err, AGSX_FS_RESOURCE_EXHAUSTED, "too many watchers", "the registry is bounded");
  write_all(c, "~/w/polled.txt", "x", &err);
  struct pollfd pf = {.fd = agsx_inotify_fd(hub), .events = POLLIN};
  poll(&pf, 1, 100);
  agsx_inotify_dispatch(hub);
  agsx_fs_watchers_tick(reg);
  struct agsx_fs_event *v = NULL;
  r = agsx_fs_watchers_events(reg, "sbx", id, &v, &n, &err);
  bool seen = false;
  for (size_t i = 0; r == 0 && i < n; i++)
    seen |= strcmp(v[i].name, "polled.txt") == 0 && v[i].type == AGSX_FS_EVENT_CREATE;
  for (size_t i = 0; r == 0 && i < n; i++)
    agsx_fs_event_clear(&v[i]);
  free(v);
  tap_ok(r == 0 && seen, "GetWatcherEvents returns the events since (%zu)", n);
  r = agsx_fs_watchers_events(reg, "other-sandbox", id, &v, &n, &err);
  fails(r, &err, AGSX_FS_NOT_FOUND, "not found", "another sandbox's watcher id");
  r = agsx_fs_watchers_remove(reg, "sbx", id2, &err);
  tap_ok(r == 0 && agsx_fs_watchers_count(reg) == 1, "RemoveWatcher");
  r = agsx_fs_watchers_remove(reg, "sbx", id2, &err);
  fails(r, &err, AGSX_FS_NOT_FOUND, NULL, "removing it twice");
  tap_ok(agsx_fs_watchers_timeout_ms(reg) > 0 && agsx_fs_watchers_timeout_ms(reg) <= 300,
         "the registry's timeout is the next idle expiry");
  usleep(350000);
  agsx_fs_watchers_tick(reg);
  tap_ok(agsx_fs_watchers_count(reg) == 0 && agsx_fs_watchers_timeout_ms(reg) == -1,
         "an idle watcher expires");
  agsx_fs_watchers_free(reg);

  /* Watchers share the hub's instances, within the pool's bounds. */
  struct agsx_fs_watch_pool *small = agsx_fs_watch_pool_new(hub, 2, 3, 1000);
  struct agsx_fs_watch *a = NULL, *b = NULL, *x = NULL;
  r = agsx_fs_watch_open(small, c, "~/w", AGSX_FS_WATCH_RECURSIVE, &a, &err);
  r |= agsx_fs_watch_open(small, c, "~/w", 0, &b, &err);
  unsigned insts = 0, watches = 0;
  agsx_inotify_usage(hub, NULL, &insts, &watches, NULL);
  tap_ok(r == 0 && insts == 1, "two watchers (and the same directory twice): one instance (%u)",
         insts);
  r = agsx_fs_watch_open(small, c, "~/w", 0, &x, &err);
  fails(r, &err, AGSX_FS_RESOURCE_EXHAUSTED, "too many watchers of this sandbox (at most 2)",
        "a sandbox's watchers are bounded");
  agsx_fs_watch_free(b);
  struct agsx_fs_watch_pool *few = agsx_fs_watch_pool_new(hub, 8, 8, 1);
  r = agsx_fs_watch_open(few, c, "~/w", AGSX_FS_WATCH_RECURSIVE, &x, &err);
  fails(r, &err, AGSX_FS_RESOURCE_EXHAUSTED, "directories at most",
        "and so are the watches of a sandbox's watchers");
  tap_ok(agsx_fs_watch_pool_count(few, NULL) == 0, "a refused watcher is not counted");
  agsx_fs_watch_free(a);
  agsx_inotify_usage(hub, NULL, NULL, &watches, NULL);
  tap_ok(watches == 0 && agsx_fs_watch_pool_count(small, NULL) == 0,
         "freed watchers leave no watch (%u)", watches);
  agsx_fs_watch_pool_free(few);
  agsx_fs_watch_pool_free(small);
}

static int count_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  for (struct dirent *de; d && (de = readdir(d));)
    n += de->d_name[0] != '.';
  if (d)
    closedir(d);
  return n;
}

int main(void) {
  if (geteuid() != 0) {
    printf("1..0 # SKIP needs root (fsuid, chown)\n");
    return 0;
  }
  int fds = count_fds();
  setup();
  test_codes();
  test_paths();
  test_meta_headers();
  struct agsx_inotify_budget budget;
  agsx_inotify_budget_host(&budget);
  agsx_error_t herr = NULL;
  must(agsx_inotify_new(&budget, &hub, &herr) == 0, "inotify hub");
  pool = agsx_fs_watch_pool_new(hub, 64, 1024, budget.watches / 4);
  struct agsx_fs_ctx *c = ctx_for(NULL, NULL);
  must(c != NULL, "context");
  test_stat(c);
  test_list(c);
  test_mkdir_move_remove(c);
  test_upload(c);
  test_download(c);
  test_host_files(c);
  test_receive(c);
  test_receive_meta(c);
  test_compose(c);
  test_receive_meta_unsupported();
  test_signature();
  test_watch(c);
  agsx_fs_watch_pool_free(pool);
  agsx_inotify_free(hub);
  agsx_fs_close(c);
  close(rootfd);
  tap_is_int(count_fds(), fds, "no fd is left open");
  teardown();
  return tap_done();
}
