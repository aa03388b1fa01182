/* agsx — mcp: the file tools. Every path goes through api/fsops.h, which
 * resolves it with openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS) in the
 * sandbox's root, as the sandbox's user sees it; nothing here touches a
 * host path. Answers are bounded: 1 MiB of content, FILES_MAX entries. */
#include "config.h"

#include "api/fsops.h"
#include "mcp/tools-internal.h"
#include "sandbox/copy.h"

#include <fnmatch.h>
#include <string.h>
#include <unistd.h>

#define FILES_MAX 5000u             /* entries of one file_list or file_search answer */
#define COPY_MAX_BYTES (1ull << 30) /* data of one file_copy_in or file_copy_out */
#define COPY_MAX_ENTRIES 100000u
#define SEARCH_DEPTH_DEFAULT 16

static const struct arg read_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The sandbox's id"},
    {"path", A_STR, true, 0, 0, "The file's path in the sandbox (relative: to the user's home)"},
    {"user", A_STR, false, 0, 0, "Whose home a relative path is in (default: the image's user)"},
    {0},
};

static const struct arg write_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The sandbox's id"},
    {"path", A_STR, true, 0, 0,
     "The file's path in the sandbox (parents are created; relative: to the user's home)"},
    {"content", A_STR, true, 0, 0, "The file's new content, text (at most 1 MiB)"},
    {"user", A_STR, false, 0, 0, "Who owns the file (default: the image's user)"},
    {0},
};

#define FILE_SCHEMA(extra, req)                                                                    \
  "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\",\"description\":\"absolute," \
  " "                                                                                              \
  "in the sandbox\"},\"size\":{\"type\":\"integer\"}" extra                                        \
  "},\"required\":[\"path\",\"size\"" req "]}"

static int fs_open(struct agsx_mcp *s, yajl_val a, struct agsx_fs_ctx **ret, agsx_error_t *err) {
  struct agsx_record rec;
  if (agsx_mcp_find(s, arg_str(a, "sandbox"), &rec, err) < 0)
    return -1;
  struct agsx_fs_opts o = {.user = arg_str(a, "user")};
  int r = agsx_fs_open(&rec, &o, ret, err);
  agsx_record_clear(&rec);
  return r;
}

int agsx_mcp_read_file(struct agsx_fs_ctx *c, const char *p, char **ret, size_t *ret_len,
                       char **ret_path, agsx_error_t *err) {
  _cleanup_close_ int fd = -1;
  uint64_t size;
  _cleanup_free_ char *path = NULL;
  if (agsx_fs_download_open(c, p, &fd, &size, &path, err) < 0)
    return -1;
  if (size > AGSX_MCP_FILE_MAX)
    return agsx_error_set_quiet(
        err, EFBIG,
        "`%.200s` has %llu bytes, more than 1 MiB: read part of it with exec "
        "(head -c, tail -c, sed -n)",
        path, (unsigned long long)size);
  _cleanup_free_ char *buf = xmalloc(AGSX_MCP_FILE_MAX + 1);
  size_t len = 0;
  for (;;) {
    ssize_t n = read(fd, buf + len, AGSX_MCP_FILE_MAX + 1 - len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return agsx_error_set(err, errno, "read `%.200s`", path);
    if (n == 0 || (len += (size_t)n) > AGSX_MCP_FILE_MAX)
      break;
  }
  if (len > AGSX_MCP_FILE_MAX)
    return agsx_error_set_quiet(err, EFBIG, "`%.200s` grew past 1 MiB while read", path);
  *ret = steal_ptr(&buf);
  *ret_len = len;
  *ret_path = steal_ptr(&path);
  return 0;
}

static int file_read(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  _cleanup_fs_ctx_ struct agsx_fs_ctx *c = NULL;
  if (fs_open(s, a, &c, err) < 0)
    return -1;
  _cleanup_free_ char *buf = NULL, *path = NULL;
  size_t len;
  if (agsx_mcp_read_file(c, arg_str(a, "path"), &buf, &len, &path, err) < 0)
    return -1;
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "path", path);
  agsx_json_kv_int(g, "size", (int64_t)len);
  agsx_json_key(g, "content");
  agsx_json_bytes(g, buf, len);
  yajl_gen_map_close(g);
  return 0;
}

static int file_write(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  const char *content = arg_str(a, "content");
  size_t len = strlen(content);
  if (len > AGSX_MCP_FILE_MAX)
    return agsx_error_set_quiet(err, EFBIG, "content: at most 1 MiB per file_write");
  _cleanup_fs_ctx_ struct agsx_fs_ctx *c = NULL;
  if (fs_open(s, a, &c, err) < 0)
    return -1;
  struct agsx_fs_upload *u = NULL;
  struct agsx_fs_entry e = {0};
  int r = -1;
  if (agsx_fs_upload_open(c, arg_str(a, "path"), &u, err) == 0 &&
      agsx_fs_upload_write(u, content, len, err) == 0 && agsx_fs_upload_commit(u, &e, err) == 0) {
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "path", e.path);
    agsx_json_kv_int(g, "size", (int64_t)len);
    yajl_gen_map_close(g);
    r = 0;
  }
  agsx_fs_upload_free(u);
  agsx_fs_entry_clear(&e);
  return r;
}

/* ---- entries -------------------------------------------------------------------------------- */

#define ENTRY_SCHEMA                                                                               \
  "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"path\":{\"type\":"        \
  "\"string\"},\"type\":{\"type\":\"string\",\"enum\":[\"file\",\"directory\",\"symlink\","        \
  "\"other\"]},\"size\":{\"type\":\"integer\"},\"permissions\":{\"type\":\"string\",\"description" \
  "\":\"as ls -l shows them\"},\"owner\":{\"type\":\"string\"},\"group\":{\"type\":\"string\"},"   \
  "\"modified\":{\"type\":\"integer\",\"description\":\"seconds since the epoch\"},"               \
  "\"symlink_target\":{\"type\":\"string\"}},\"required\":[\"name\",\"path\",\"type\",\"size\","   \
  "\"permissions\",\"owner\",\"group\",\"modified\"]}"
#define ENTRIES_SCHEMA                                                                             \
  "{\"type\":\"object\",\"properties\":{\"entries\":{\"type\":\"array\",\"items\":" ENTRY_SCHEMA   \
  "},\"truncated\":{\"type\":\"boolean\",\"description\":\"more than 5000 entries: the rest was "  \
  "left out\"}},\"required\":[\"entries\",\"truncated\"]}"

static const char *type_name(enum agsx_fs_type t) {
  switch (t) {
  case AGSX_FS_TYPE_FILE: return "file";
  case AGSX_FS_TYPE_DIRECTORY: return "directory";
  case AGSX_FS_TYPE_SYMLINK: return "symlink";
  default: return "other";
  }
}

void agsx_mcp_gen_entry(yajl_gen g, const struct agsx_fs_entry *e) {
  char perm[16];
  agsx_fs_mode_string(e->st_mode, perm);
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "name", e->name);
  agsx_json_kv_str(g, "path", e->path);
  agsx_json_kv_str(g, "type", type_name(e->type));
  agsx_json_kv_int(g, "size", (int64_t)e->size);
  agsx_json_kv_str(g, "permissions", perm);
  agsx_json_kv_str(g, "owner", e->owner ? e->owner : "");
  agsx_json_kv_str(g, "group", e->group ? e->group : "");
  agsx_json_kv_int(g, "modified", e->mtime_sec);
  if (e->symlink_target)
    agsx_json_kv_str(g, "symlink_target", e->symlink_target);
  yajl_gen_map_close(g);
}

/* {"entries":[those of V that match PATTERN (NULL: all)],"truncated"} */
static void gen_entries(yajl_gen g, const struct agsx_fs_entry *v, size_t n, const char *base,
                        const char *pattern) {
  size_t shown = 0, blen = strlen(base);
  bool truncated = false;
  yajl_gen_map_open(g);
  agsx_json_key(g, "entries");
  yajl_gen_array_open(g);
  for (size_t i = 0; i < n; i++) {
    if (pattern) {
      /* a pattern with a slash matches the path below BASE, else the name */
      const char *rel = v[i].path;
      if (strncmp(rel, base, blen) == 0)
        rel += blen;
      while (*rel == '/')
        rel++;
      bool deep = strchr(pattern, '/') != NULL;
      if (fnmatch(pattern, deep ? rel : v[i].name, deep ? FNM_PATHNAME | FNM_PERIOD : FNM_PERIOD))
        continue;
    }
    if (shown == FILES_MAX) {
      truncated = true;
      break;
    }
    agsx_mcp_gen_entry(g, &v[i]);
    shown++;
  }
  yajl_gen_array_close(g);
  agsx_json_kv_bool(g, "truncated", truncated);
  yajl_gen_map_close(g);
}

/* ---- file_list, file_search, file_stat ------------------------------------------------------- */

static const struct arg list_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The sandbox's id"},
    {"path", A_STR, true, 0, 0, "A directory of the sandbox (relative: to the user's home)"},
    {"depth", A_INT, false, 1, 64, "Levels below it to list (default 1: its own entries)"},
    {"user", A_STR, false, 0, 0, "Whose home a relative path is in (default: the image's user)"},
    {0},
};

static const struct arg search_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The sandbox's id"},
    {"path", A_STR, true, 0, 0, "The directory searched (relative: to the user's home)"},
    {"pattern", A_STR, true, 0, 0,
     "A shell glob (*, ?, [...]): matched against each name, or against the path below the "
     "directory when it has a slash (src/*.py); hidden files only when it says so (.*)"},
    {"depth", A_INT, false, 1, 64, "Levels searched (default 16)"},
    {"user", A_STR, false, 0, 0, "Whose home a relative path is in (default: the image's user)"},
    {0},
};

static const struct arg stat_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The sandbox's id"},
    {"path", A_STR, true, 0, 0, "The path in the sandbox (relative: to the user's home)"},
    {"user", A_STR, false, 0, 0, "Whose home a relative path is in (default: the image's user)"},
    {0},
};

static int list_or_search(struct agsx_mcp *s, yajl_val a, yajl_gen g, const char *pattern,
                          int64_t depth, agsx_error_t *err) {
  _cleanup_fs_ctx_ struct agsx_fs_ctx *c = NULL;
  if (fs_open(s, a, &c, err) < 0)
    return -1;
  _cleanup_free_ char *base = agsx_fs_path(c, arg_str(a, "path"), err);
  if (base == NULL)
    return -1;
  struct agsx_fs_entry *v = NULL;
  size_t n = 0;
  if (agsx_fs_list(c, base, (unsigned)depth, &v, &n, err) < 0)
    return -1;
  gen_entries(g, v, n, base, pattern);
  agsx_fs_entries_free(v, n);
  return 0;
}

static int file_list(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  return list_or_search(s, a, g, NULL, arg_int(a, "depth", 1), err);
}

static int file_search(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  const char *pattern = arg_str(a, "pattern");
  if (*pattern == '\0')
    return agsx_error_set_quiet(err, EINVAL, "pattern: empty");
  return list_or_search(s, a, g, pattern, arg_int(a, "depth", SEARCH_DEPTH_DEFAULT), err);
}

static int file_stat(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  _cleanup_fs_ctx_ struct agsx_fs_ctx *c = NULL;
  if (fs_open(s, a, &c, err) < 0)
    return -1;
  struct agsx_fs_entry e = {0};
  if (agsx_fs_stat(c, arg_str(a, "path"), &e, err) < 0)
    return -1;
  agsx_mcp_gen_entry(g, &e);
  agsx_fs_entry_clear(&e);
  return 0;
}

/* ---- file_move, file_remove --------------------------------------------------------------------- */

static const struct arg move_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The sandbox's id"},
    {"from", A_STR, true, 0, 0, "The path moved (relative: to the user's home)"},
    {"to", A_STR, true, 0, 0,
     "Its new path (its parents are created; an existing file there is replaced, as mv does)"},
    {"user", A_STR, false, 0, 0, "Who moves it (default: the image's user)"},
    {0},
};

static const struct arg remove_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The sandbox's id"},
    {"path", A_STR, true, 0, 0, "The path removed, a directory with all it holds"},
    {"confirm", A_BOOL, false, 0, 0, "Must be true: what is removed is gone for good"},
    {"user", A_STR, false, 0, 0, "Whose home a relative path is in (default: the image's user)"},
    {0},
};

static int file_move(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  _cleanup_fs_ctx_ struct agsx_fs_ctx *c = NULL;
  if (fs_open(s, a, &c, err) < 0)
    return -1;
  struct agsx_fs_entry e = {0};
  if (agsx_fs_move(c, arg_str(a, "from"), arg_str(a, "to"), &e, err) < 0)
    return -1;
  agsx_mcp_gen_entry(g, &e);
  agsx_fs_entry_clear(&e);
  return 0;
}

static int file_remove(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  if (!arg_bool(a, "confirm"))
    return agsx_error_set_quiet(
        err, EPERM,
        "file_remove deletes the path and everything under it: call it again "
        "with confirm: true if that is meant");
  _cleanup_fs_ctx_ struct agsx_fs_ctx *c = NULL;
  if (fs_open(s, a, &c, err) < 0)
    return -1;
  _cleanup_free_ char *path = agsx_fs_path(c, arg_str(a, "path"), err);
  if (path == NULL)
    return -1;
  /* as rm without -f: a path that is not there is an error */
  struct agsx_fs_entry e = {0};
  int r = agsx_fs_stat(c, path, &e, err);
  agsx_fs_entry_clear(&e);
  if (r < 0 || agsx_fs_remove(c, path, err) < 0)
    return -1;
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "path", path);
  agsx_json_kv_bool(g, "removed", true);
  yajl_gen_map_close(g);
  return 0;
}

/* ---- file_copy_in, file_copy_out ------------------------------------------------------------- */

static const struct arg copy_in_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The sandbox's id"},
    {"host_path", A_STR, true, 0, 0,
     "An absolute host path below a directory agsx mcp --allow-host-path allows: a file or a "
     "directory, copied whole (DIR/. copies its contents)"},
    {"path", A_STR, true, 0, 0,
     "Where in the sandbox (relative: to the user's home); into it when it is a directory"},
    {"user", A_STR, false, 0, 0, "Whose home a relative path is in (default: the image's user)"},
    {0},
};

static const struct arg copy_out_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The sandbox's id"},
    {"path", A_STR, true, 0, 0,
     "A file or directory of the sandbox (relative: to the user's home)"},
    {"host_path", A_STR, true, 0, 0,
     "Where on the host, an absolute path below a directory agsx mcp --allow-host-path allows; "
     "into it when it is a directory"},
    {"user", A_STR, false, 0, 0, "Whose home a relative path is in (default: the image's user)"},
    {0},
};

#define COPY_SCHEMA                                                                                \
  "{\"type\":\"object\",\"properties\":{\"host_path\":{\"type\":\"string\"},\"path\":{\"type\":"   \
  "\"string\"},\"copied\":{\"type\":\"boolean\"}},\"required\":[\"host_path\",\"path\","           \
  "\"copied\"]}"

/* HOST, an absolute host path, as a directory fd of --allow-host-path and
 * the path below it (*RET_REL, "." for the directory itself, a trailing
 * slash kept). The copy resolves it inside that directory: a symlink or a
 * `..` there cannot lead out. A `..` in HOST is refused outright. */
static int host_path(struct agsx_mcp *s, const char *host, int *ret_fd, char **ret_rel,
                     agsx_error_t *err) {
  if (s->n_host == 0)
    return agsx_error_set_quiet(
        err, EPERM,
        "no host path is allowed: the user can start the server with agsx mcp "
        "--allow-host-path DIR");
  if (host[0] != '/')
    return agsx_error_set_quiet(err, EINVAL, "host_path `%.200s` must be an absolute path", host);
  for (const char *p = host; (p = strstr(p, "..")) != NULL; p += 2)
    if (p[-1] == '/' && (p[2] == '/' || p[2] == '\0'))
      return agsx_error_set_quiet(err, EINVAL, "host_path `%.200s`: `..` is not allowed", host);
  for (size_t i = 0; i < s->n_host; i++) {
    const char *dir = s->cfg->host_paths[i];
    size_t n = strlen(dir);
    if (strncmp(host, dir, n) != 0 || (host[n] != '/' && host[n] != '\0'))
      continue;
    const char *rel = host + n;
    while (*rel == '/' && rel[1] == '/')
      rel++;
    *ret_fd = s->host_fds[i];
    *ret_rel = xstrdup(*rel == '\0' || strcmp(rel, "/") == 0 ? "." : rel + 1);
    return 0;
  }
  return agsx_error_set_quiet(err, EPERM,
                              "host_path `%.200s` is not below a directory this server allows "
                              "(agsx mcp --allow-host-path)",
                              host);
}

static int copy_tool(struct agsx_mcp *s, yajl_val a, yajl_gen g, bool in, agsx_error_t *err) {
  int hostfd = -1;
  _cleanup_free_ char *rel = NULL;
  if (host_path(s, arg_str(a, "host_path"), &hostfd, &rel, err) < 0 || hostfd < 0)
    return -1;
  struct agsx_record rec;
  if (agsx_mcp_find(s, arg_str(a, "sandbox"), &rec, err) < 0)
    return -1;
  _cleanup_free_ char *path = NULL;
  {
    _cleanup_fs_ctx_ struct agsx_fs_ctx *c = NULL;
    struct agsx_fs_opts o = {.user = arg_str(a, "user")};
    if (agsx_fs_open(&rec, &o, &c, err) == 0)
      path = agsx_fs_path(c, arg_str(a, "path"), err);
  }
  _cleanup_close_ int rootfd = path ? agsx_copy_open_root(&rec, err) : -1;
  struct agsx_copy_limits lim = {.max_bytes = COPY_MAX_BYTES, .max_entries = COPY_MAX_ENTRIES};
  struct agsx_copy_sandbox sb = {.rootfd = rootfd, .uid_base = rec.uid_base, .limits = &lim};
  int r = -1;
  if (rootfd >= 0)
    r = in ? agsx_copy_in_at(&sb, hostfd, rel, path, 0, err)
           : agsx_copy_out_at(&sb, hostfd, path, rel, 0, err);
  if (r == 0) {
    agsx_info("mcp: session %s: copied %s %.12s:%s", s->session, in ? "into" : "out of", rec.id,
              path);
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "host_path", arg_str(a, "host_path"));
    agsx_json_kv_str(g, "path", path);
    agsx_json_kv_bool(g, "copied", true);
    yajl_gen_map_close(g);
  }
  agsx_record_clear(&rec);
  return r;
}

static int file_copy_in(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  return copy_tool(s, a, g, true, err);
}

static int file_copy_out(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  return copy_tool(s, a, g, false, err);
}

/* ---- the list -------------------------------------------------------------------------------- */

const struct tool agsx_mcp_file_tools[] = {
    {"file_read", "Read a file", "Read a text file of a sandbox (at most 1 MiB).", read_args,
     FILE_SCHEMA(",\"content\":{\"type\":\"string\"}", ",\"content\""), true, false, file_read},
    {"file_write", "Write a file",
     "Write a text file in a sandbox, replacing it atomically (parents created).", write_args,
     FILE_SCHEMA("", ""), false, false, file_write},
    {"file_list", "List a directory",
     "The entries of a directory of a sandbox (depth levels down), with type, size, "
     "permissions, owner and time; at most 5000.",
     list_args, ENTRIES_SCHEMA, true, false, file_list},
    {"file_search", "Find files by name",
     "Find the entries under a directory of a sandbox whose name (or path, when the pattern has "
     "a slash) matches a shell glob; at most 5000.",
     search_args, ENTRIES_SCHEMA, true, false, file_search},
    {"file_stat", "Describe a file",
     "Type, size, permissions, owner and time of a path of a sandbox (a symlink: where it "
     "leads).",
     stat_args, ENTRY_SCHEMA, true, false, file_stat},
    {"file_move", "Move or rename a file",
     "Rename a file or directory of a sandbox (rename(2): an existing file at the target is "
     "replaced).",
     move_args, ENTRY_SCHEMA, false, true, file_move},
    {"file_remove", "Remove a file or directory",
     "Delete a path of a sandbox, a directory with everything in it. Needs confirm: true.",
     remove_args,
     "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"removed\":{\"type\":"
     "\"boolean\"}},\"required\":[\"path\",\"removed\"]}",
     false, true, file_remove},
    {"file_copy_in", "Copy from the host into a sandbox",
     "Copy a host file or directory into a sandbox, only from below the directories agsx mcp "
     "--allow-host-path allows (none by default).",
     copy_in_args, COPY_SCHEMA, false, false, file_copy_in},
    {"file_copy_out", "Copy from a sandbox to the host",
     "Copy a file or directory of a sandbox to the host, only to below the directories agsx mcp "
     "--allow-host-path allows (none by default); what is there is replaced.",
     copy_out_args, COPY_SCHEMA, false, true, file_copy_out},
    {0},
};
