/* Unit tests: the shared tar-entry policy (names, link targets, kinds) and
 * the reading loop over in-memory tar streams. */
#include "config.h"

#include "image/tarentry.h"
#include "tap.h"
#include "util/util.h"

#include <archive.h>
#include <archive_entry.h>
#include <string.h>
#include <sys/stat.h>

enum variant { STRICT, CP, ADD };

static void policy(enum variant v, struct agsx_tarentry_policy *p) {
  agsx_tarentry_policy_default(p);
  p->refuse_absolute = v == CP;
  p->collapse = v != STRICT;
}

/* WANT: the cleaned name, or NULL when refused with WHY in the message. */
static void check(enum variant v, const char *raw, const char *want, const char *why) {
  static const char *const names[] = {"strict", "cp", "add"};
  struct agsx_tarentry_policy p;
  policy(v, &p);
  char *got = NULL;
  agsx_error_t err = NULL;
  int r = agsx_tarentry_clean(raw, &p, &got, &err);
  if (want != NULL) {
    if (!tap_ok(r == 0 && got && strcmp(got, want) == 0, "%s: `%s` is `%s`", names[v],
                raw ? raw : "(null)", want))
      printf("#   got: r=%d '%s' %s\n", r, got ? got : "(null)", err ? err->msg : "");
  } else {
    if (!tap_ok(r < 0 && got == NULL && err && strstr(err->msg, why), "%s: `%s` refused (%s)",
                names[v], raw ? raw : "(null)", why))
      printf("#   got: r=%d '%s' %s\n", r, got ? got : "(null)", err ? err->msg : "");
  }
  free(got);
  agsx_error_free(&err);
}

static void test_names(void) {
  for (enum variant v = STRICT; v <= ADD; v++) {
    check(v, "a/b", "a/b", NULL);
    check(v, "./a/b/", "a/b", NULL);
    check(v, "./", "", NULL);
    check(v, ".", "", NULL);
    check(v, "", "", NULL);
    check(v, "a/", "a", NULL);
    check(v, "a///", "a", NULL);
    check(v, NULL, NULL, "cannot be decoded");
    check(v, "..", NULL, "`..`");
    check(v, "../x", NULL, "`..`");
    check(v, "a/../../x", NULL, "`..`");
    check(v, "./../x", NULL, "`..`");
    check(v, "a/..", NULL, "`..`");
    check(v, "a/../b", NULL, "`..`");
    check(v, "...", "...", NULL);
    check(v, "..a", "..a", NULL);
  }
  /* Absolute names: re-rooted for layers and ADD, refused by cp. */
  check(STRICT, "/etc/passwd", "etc/passwd", NULL);
  check(ADD, "//etc/passwd", "etc/passwd", NULL);
  check(CP, "/etc/passwd", NULL, "absolute");
  check(CP, "/", NULL, "absolute");
  check(STRICT, "/../x", NULL, "`..`");
  /* Empty and "." components: refused in layers, dropped by cp and ADD. */
  check(STRICT, "a//b", NULL, "invalid path");
  check(STRICT, "a/./b", NULL, "invalid path");
  check(STRICT, "a//../b", NULL, "`..`");
  check(CP, "a//b", "a/b", NULL);
  check(CP, "./a/./b/.", "a/b", NULL);
  check(ADD, "a/./b//c", "a/b/c", NULL);
  check(ADD, "a//../b", NULL, "`..`");
}

static void test_limits(void) {
  struct agsx_tarentry_policy p;
  agsx_tarentry_policy_default(&p);
  tap_ok(p.max_path == 4096 && p.max_depth == 256 && p.max_entries == 0 && !p.refuse_absolute &&
             !p.collapse,
         "defaults: 4096 bytes, 256 components, strict");
  char *long_name = xmalloc(4098);
  memset(long_name, 'a', 4097);
  long_name[4097] = '\0';
  check(STRICT, long_name, NULL, "longer than 4096 bytes");
  long_name[256] = '\0';
  check(CP, long_name, NULL, "component longer than 255");
  long_name[255] = '\0';
  check(CP, long_name, long_name, NULL);
  free(long_name);
  /* 257 components "d/d/.../d" */
  size_t n = 257 * 2;
  char *deep = xmalloc(n);
  for (size_t i = 0; i < n; i += 2) {
    deep[i] = 'd';
    deep[i + 1] = '/';
  }
  deep[n - 1] = '\0';
  check(ADD, deep, NULL, "deeper than 256 components");
  deep[n - 3] = '\0'; /* 256 */
  check(ADD, deep, deep, NULL);
  free(deep);
  _cleanup_free_ char *q = agsx_tarentry_quote("a\033[2Jb\\");
  tap_is_str(q, "a\\x1b[2Jb\\x5c", "quote escapes control bytes and backslashes");
}

/* ---- the reader --------------------------------------------------------------------------- */

struct ent {
  const char *path;
  mode_t mode;
  const char *link;     /* symlink target */
  const char *hardlink; /* hard link target */
};

static size_t make_tar(const struct ent *e, size_t n, char *buf, size_t cap) {
  struct archive *a = archive_write_new();
  size_t used = 0;
  archive_write_set_format_pax_restricted(a);
  archive_write_open_memory(a, buf, cap, &used);
  for (size_t i = 0; i < n; i++) {
    struct archive_entry *ae = archive_entry_new();
    archive_entry_set_pathname(ae, e[i].path);
    archive_entry_set_mode(ae, e[i].mode ? e[i].mode : S_IFREG | 0644);
    if (e[i].link)
      archive_entry_set_symlink(ae, e[i].link);
    if (e[i].hardlink)
      archive_entry_set_hardlink(ae, e[i].hardlink);
    archive_entry_set_size(ae, 0);
    archive_write_header(a, ae);
    archive_entry_free(ae);
  }
  archive_write_close(a);
  archive_write_free(a);
  return used;
}

/* Reads the stream of E with policy P: the kinds read, then the error. */
static int read_all(const struct ent *e, size_t n, const struct agsx_tarentry_policy *p,
                    char *kinds, size_t cap, agsx_error_t *err) {
  static char buf[1 << 16];
  size_t len = make_tar(e, n, buf, sizeof(buf));
  struct archive *a = archive_read_new();
  archive_read_support_format_tar(a);
  archive_read_open_memory(a, buf, len);
  struct agsx_tar_reader rd = {.a = a, .policy = p, .what = "entry", .root = "top"};
  size_t k = 0;
  int r;
  struct agsx_tarentry *t;
  while ((r = agsx_tar_reader_next(&rd, &t, err)) > 0 && k + 1 < cap)
    kinds[k++] = "fdshpbo"[t->kind];
  kinds[k] = '\0';
  agsx_tar_reader_clear(&rd);
  archive_read_free(a);
  return r;
}

static void test_reader(void) {
  struct agsx_tarentry_policy p;
  agsx_tarentry_policy_default(&p);
  char kinds[16];
  agsx_error_t err = NULL;
  const struct ent all[] = {
      {.path = "f"},
      {.path = "d/", .mode = S_IFDIR | 0755},
      {.path = "s", .mode = S_IFLNK | 0777, .link = "/anywhere/../at/all"},
      {.path = "h", .hardlink = "f"},
      {.path = "p", .mode = S_IFIFO | 0644},
      {.path = "b", .mode = S_IFBLK | 0644},
  };
  int r = read_all(all, 6, &p, kinds, sizeof(kinds), &err);
  tap_ok(r == 0 && strcmp(kinds, "fdshpb") == 0,
         "kinds: file, dir, symlink, hardlink, fifo, "
         "device (%s)",
         kinds);
  agsx_error_free(&err);

  p.max_entries = 3;
  r = read_all(all, 3, &p, kinds, sizeof(kinds), &err);
  tap_ok(r == 0 && strlen(kinds) == 3, "3 entries, limit 3: read");
  r = read_all(all, 4, &p, kinds, sizeof(kinds), &err);
  tap_ok(r < 0 && err && strstr(err->msg, "more than 3 entries"), "4 entries, limit 3: %s",
         err ? err->msg : "accepted");
  agsx_error_free(&err);
  p.max_entries = 0;

  const struct ent bad[][2] = {
      {{.path = "f"}, {.path = "../x"}},
      {{.path = "f"}, {.path = "h", .hardlink = "../../etc/passwd"}},
      {{.path = "f"}, {.path = "h", .hardlink = "./"}},
      {{.path = "f"}, {.path = "s", .mode = S_IFLNK | 0777, .link = ""}},
  };
  const char *why[] = {"entry `../x`: path contains `..`",
                       "entry `h`: hardlink target: path contains `..`",
                       "entry `h`: hardlink target is the top", "entry `s`: symlink without"};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(bad); i++) {
    r = read_all(bad[i], 2, &p, kinds, sizeof(kinds), &err);
    tap_ok(r < 0 && strcmp(kinds, "f") == 0 && err && strstr(err->msg, why[i]),
           "refused after the first entry: %s", err ? err->msg : "accepted");
    agsx_error_free(&err);
  }

  /* Garbage is a read failure, told apart from a refused entry. */
  struct archive *a = archive_read_new();
  archive_read_support_format_tar(a);
  static const char junk[1024] = "not a tar stream at all";
  archive_read_open_memory(a, junk, sizeof(junk));
  struct agsx_tar_reader rd = {.a = a, .policy = &p};
  struct agsx_tarentry *t;
  r = agsx_tar_reader_next(&rd, &t, &err);
  tap_ok(r < 0 && rd.read_failed && err && strstr(err->msg, "read tar"), "junk: %s",
         err ? err->msg : "accepted");
  agsx_error_free(&err);
  agsx_tar_reader_clear(&rd);
  archive_read_free(a);
}

int main(void) {
  test_names();
  test_limits();
  test_reader();
  return tap_done();
}
