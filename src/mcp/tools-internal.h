/* agsx — mcp: what the tools' files share (tools.c has the arguments'
 * checks, the sandbox tools and the one list; tools-process.c exec and
 * background processes; tools-files.c the file tools; tools-snapshot.c
 * snapshots, rollback and fork). */
#ifndef AGSX_MCP_TOOLS_INTERNAL_H
#define AGSX_MCP_TOOLS_INTERNAL_H

#include "mcp/mcp-internal.h"
#include "state/state.h"

enum arg_type { A_STR, A_INT, A_NUM, A_BOOL, A_STRV, A_ENV, A_INTV };

struct arg {
  const char *name;
  enum arg_type type;
  bool required;
  int64_t min, max; /* A_INT, A_NUM (when max > 0) */
  const char *desc;
};

/* A tool: its arguments give its inputSchema, OUTPUT is its outputSchema. */
struct tool {
  const char *name, *title, *desc;
  const struct arg *args;
  const char *output;
  bool read_only, destructive;
  int (*call)(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err);
};

/* The tools of tools-process.c, tools-files.c and tools-snapshot.c, each list ended by a
 * zeroed entry. */
extern const struct tool agsx_mcp_process_tools[];
extern const struct tool agsx_mcp_file_tools[];
extern const struct tool agsx_mcp_code_tools[];
extern const struct tool agsx_mcp_snapshot_tools[];
extern const struct tool agsx_mcp_browser_tools[];

/* A call's arguments, checked against the tool's table already. */
static inline const char *arg_str(yajl_val a, const char *k) {
  return a ? agsx_json_get_string(a, k) : NULL;
}
static inline int64_t arg_int(yajl_val a, const char *k, int64_t dflt) {
  int64_t v;
  return a && agsx_json_get_int64(a, k, &v) ? v : dflt;
}
static inline bool arg_bool(yajl_val a, const char *k) {
  yajl_val v = a ? agsx_json_get(a, k) : NULL;
  return YAJL_IS_TRUE(v);
}

/* An array of strings as a vector (NULL when absent). */
char **agsx_mcp_arg_strv(yajl_val a, const char *k);
/* {"K":"V"} as K=V strings into *RET; EINVAL for a key that cannot be one. */
int agsx_mcp_arg_env(yajl_val a, const char *k, char ***ret, agsx_error_t *err);

/* The running sandbox SANDBOX (an id, a prefix or a name) of this session:
 * ENOENT when it is none of the session's, ESRCH when it ended. */
int agsx_mcp_find(struct agsx_mcp *s, const char *sandbox, struct agsx_record *ret,
                  agsx_error_t *err);
/* The session's running sandboxes (not being stopped), as records
 * (agsx_mcp_records_free). */
size_t agsx_mcp_load(struct agsx_mcp *s, struct agsx_record **ret);
void agsx_mcp_records_free(struct agsx_record *v, size_t n);
/* How many sandboxes of the session run; EAGAIN when ADD more would pass
 * --max-sandboxes. */
int agsx_mcp_room(struct agsx_mcp *s, unsigned add, agsx_error_t *err);
/* NET (NULL: internal) unless this server does not allow it (EPERM). */
int agsx_mcp_net_allowed(const struct agsx_mcp_config *cfg, const char *net, agsx_error_t *err);
/* What sandbox_info shows of R. */
void agsx_mcp_gen_info(yajl_gen g, const struct agsx_record *r);
/* A file's entry as file_stat and file_list show it. */
struct agsx_fs_entry;
void agsx_mcp_gen_entry(yajl_gen g, const struct agsx_fs_entry *e);
/* The file P of context C, whole, when it has at most AGSX_MCP_FILE_MAX
 * bytes (EFBIG else): *RET (its bytes), *RET_LEN, *RET_PATH (absolute). */
struct agsx_fs_ctx;
int agsx_mcp_read_file(struct agsx_fs_ctx *c, const char *p, char **ret, size_t *ret_len,
                       char **ret_path, agsx_error_t *err);
/* A sandbox as sandbox_create, sandbox_list and sandbox_info show it. */
void agsx_mcp_gen_sandbox(yajl_gen g, const struct agsx_record *r);
#define SANDBOX_PROPS                                                                              \
  "\"id\":{\"type\":\"string\"},\"name\":{\"type\":\"string\"},\"image\":{\"type\":\"string\"},"   \
  "\"status\":{\"type\":\"string\",\"description\":\"running or paused\"},\"network\":{\"type\":"  \
  "\"string\"},\"deadline\":{\"type\":\"integer\",\"description\":\"when it stops, seconds since " \
  "the epoch\"},\"keep\":{\"type\":\"boolean\",\"description\":\"it outlives the session\"},"      \
  "\"pool\":{\"type\":\"string\",\"description\":\"the pool it was claimed from, empty when "      \
  "none\"},\"ports\":{\"type\":\"array\",\"description\":\"its published ports: port (in the "     \
  "sandbox), host (ADDR:PORT on the host's loopback) and url (http://host)\",\"items\":{\"type\":" \
  "\"object\",\"properties\":{\"port\":{\"type\":\"integer\"},\"host\":{\"type\":\"string\"},"     \
  "\"url\":{\"type\":\"string\"}},\"required\":[\"port\",\"host\",\"url\"]}}"
#define SANDBOX_REQUIRED                                                                           \
  "\"id\",\"name\",\"image\",\"status\",\"network\",\"deadline\",\"keep\",\"pool\",\"ports\""
#define SANDBOX_SCHEMA                                                                             \
  "{\"type\":\"object\",\"properties\":{" SANDBOX_PROPS "},\"required\":[" SANDBOX_REQUIRED "]}"

#endif
