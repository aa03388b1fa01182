/* agsx — mcp: snapshots, rollback and fork (sandbox/snapshot.h), so that an
 * agent can try something and go back. A fork is a new sandbox of the
 * session: it carries its source's labels (the session's, and keep), and
 * counts against --max-sandboxes. */
#include "config.h"

#include "mcp/tools-internal.h"
#include "sandbox/snapshot.h"

#include <string.h>

#define SNAPSHOT_SCHEMA                                                                            \
  "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"created\":{\"type\":"     \
  "\"integer\",\"description\":\"seconds since the epoch\"},\"bytes\":{\"type\":\"integer\","      \
  "\"description\":\"what it holds beyond the image and the snapshots before it\"},\"files\":"     \
  "{\"type\":\"integer\"}},\"required\":[\"name\",\"created\",\"bytes\",\"files\"]}"

static void gen_snapshot(yajl_gen g, const struct agsx_snapshot *v) {
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "name", v->name);
  agsx_json_kv_int(g, "created", v->created);
  agsx_json_kv_int(g, "bytes", (int64_t)v->bytes);
  agsx_json_kv_int(g, "files", (int64_t)v->files);
  yajl_gen_map_close(g);
}

/* ---- snapshot_create, snapshot_list ---------------------------------------------------------- */

static const struct arg create_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The sandbox's id"},
    {"name", A_STR, false, 0, 0, "The snapshot's name (letters, digits, . _ -; default snap-N)"},
    {0},
};

static const struct arg list_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The sandbox's id"},
    {0},
};

static int snapshot_create(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  const char *name = arg_str(a, "name");
  if (name && !agsx_snapshot_name_is_valid(name))
    return agsx_error_set_quiet(
        err, EINVAL, "invalid snapshot name `%.64s`: letters, digits, '.', '_' and '-'", name);
  struct agsx_record rec;
  if (agsx_mcp_find(s, arg_str(a, "sandbox"), &rec, err) < 0)
    return -1;
  struct agsx_snapshot v = {0};
  int64_t frozen = 0;
  int r = agsx_snapshot_create(s->statefd, rec.id, name, &v, &frozen, err);
  if (r == 0) {
    agsx_info("mcp: session %s: snapshot %s of %.12s (frozen %lld ms)", s->session, v.name, rec.id,
              (long long)(frozen / 1000000));
    gen_snapshot(g, &v);
  }
  agsx_snapshot_clear(&v);
  agsx_record_clear(&rec);
  return r;
}

static int snapshot_list(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  struct agsx_record rec;
  if (agsx_mcp_find(s, arg_str(a, "sandbox"), &rec, err) < 0)
    return -1;
  struct agsx_snapshot *v = NULL;
  size_t n = 0;
  int r = agsx_snapshot_list(s->statefd, rec.id, &v, &n, err);
  agsx_record_clear(&rec);
  if (r < 0)
    return -1;
  yajl_gen_map_open(g);
  agsx_json_key(g, "snapshots");
  yajl_gen_array_open(g);
  for (size_t i = 0; i < n; i++)
    gen_snapshot(g, &v[i]);
  yajl_gen_array_close(g);
  yajl_gen_map_close(g);
  agsx_snapshot_list_free(v, n);
  return 0;
}

/* ---- sandbox_rollback, sandbox_fork ----------------------------------------------------------- */

static const struct arg rollback_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The sandbox's id"},
    {"snapshot", A_STR, true, 0, 0, "The snapshot's name (snapshot_list shows them)"},
    {"confirm", A_BOOL, false, 0, 0,
     "Must be true: every process of the sandbox is killed and what changed since the snapshot "
     "is lost"},
    {0},
};

static const struct arg fork_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The sandbox copied"},
    {"timeout", A_INT, false, 1, 86400, "The fork's lifetime in seconds (default: its source's)"},
    {0},
};

static int rollback(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  if (!arg_bool(a, "confirm"))
    return agsx_error_set_quiet(
        err, EPERM,
        "sandbox_rollback kills every process of the sandbox and drops what "
        "changed since the snapshot: call it again with confirm: true if that "
        "is meant");
  const char *name = arg_str(a, "snapshot");
  if (!agsx_snapshot_name_is_valid(name))
    return agsx_error_set_quiet(err, EINVAL, "invalid snapshot name `%.64s`", name);
  struct agsx_record rec;
  if (agsx_mcp_find(s, arg_str(a, "sandbox"), &rec, err) < 0)
    return -1;
  int r = agsx_snapshot_rollback(s->statefd, rec.id, name, err);
  if (r < 0 && agsx_error_errno(err) == ENOENT)
    agsx_error_wrap(err, "snapshot_list shows the sandbox's snapshots");
  if (r == 0) {
    agsx_info("mcp: session %s: rolled %.12s back to %s", s->session, rec.id, name);
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "id", rec.id);
    agsx_json_kv_str(g, "snapshot", name);
    agsx_json_kv_bool(g, "rolled_back", true);
    yajl_gen_map_close(g);
  }
  agsx_record_clear(&rec);
  return r;
}

static int fork_sandbox(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  struct agsx_record rec;
  if (agsx_mcp_find(s, arg_str(a, "sandbox"), &rec, err) < 0)
    return -1;
  if (agsx_mcp_room(s, 1, err) < 0) {
    agsx_record_clear(&rec);
    return -1;
  }
  struct agsx_fork_opts o = {.root = s->cfg->root,
                             .state = s->cfg->state,
                             .source = rec.id,
                             .count = 1,
                             .timeout = (uint64_t)arg_int(a, "timeout", 0)};
  struct agsx_fork *v = NULL;
  size_t n = 0;
  int64_t frozen = 0;
  int r = agsx_sandbox_fork(&o, &v, &n, &frozen, err);
  struct agsx_record made;
  if (r == 0 && n == 1 && agsx_record_read(s->statefd, v[0].id, &made, err) == 0) {
    agsx_info("mcp: session %s: forked %.12s into %.12s (frozen %lld ms)", s->session, rec.id,
              v[0].id, (long long)(frozen / 1000000));
    agsx_mcp_gen_sandbox(g, &made);
    agsx_record_clear(&made);
  } else if (r == 0) {
    r = -1;
  }
  agsx_forks_free(v, n);
  agsx_record_clear(&rec);
  return r < 0 ? agsx_error_wrap(err, "fork") : 0;
}

/* ---- the list -------------------------------------------------------------------------------- */

const struct tool agsx_mcp_snapshot_tools[] = {
    {"snapshot_create", "Snapshot a sandbox",
     "Save a running sandbox's files under a name (its processes are frozen for the copy), to "
     "roll back to or to compare with later.",
     create_args, SNAPSHOT_SCHEMA, false, false, snapshot_create},
    {"snapshot_list", "List a sandbox's snapshots", "The snapshots of a sandbox, oldest first.",
     list_args,
     "{\"type\":\"object\",\"properties\":{\"snapshots\":{\"type\":\"array\",\"items\":"
     "" SNAPSHOT_SCHEMA "}},\"required\":[\"snapshots\"]}",
     true, false, snapshot_list},
    {"sandbox_rollback", "Roll a sandbox back",
     "Return a sandbox to a snapshot: its processes are killed, its files become the "
     "snapshot's and its command starts again (same id, network and deadline). Needs confirm: "
     "true.",
     rollback_args,
     "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"},\"snapshot\":{\"type\":"
     "\"string\"},\"rolled_back\":{\"type\":\"boolean\"}},\"required\":[\"id\",\"snapshot\","
     "\"rolled_back\"]}",
     false, true, rollback},
    {"sandbox_fork", "Fork a sandbox",
     "A new sandbox of this session with a copy of another's files as they are now (its "
     "processes are not copied; it has its own id, network address and lifetime).",
     fork_args, SANDBOX_SCHEMA, false, false, fork_sandbox},
    {0},
};
