/* agsx egress options (run, build, update) and `agsx netlog` (also `agsx
 * logs --network`): the blocked attempts of a sandbox with egress rules
 * (net/egress.h, net/dnsfilter.h). */
#include "config.h"

#include "cmd.h"
#include "net/egress.h"
#include "state/state.h"
#include "util/json.h"

#include <fcntl.h>
#include <inttypes.h>
#include <string.h>

int agsx_cmd_parse_egress_opt(int id, const char *v, struct agsx_egress *e, agsx_error_t *err) {
  if (id == O_EGRESS_RULES) {
    _cleanup_close_ int fd = open(v, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    _cleanup_free_ char *text = NULL;
    size_t len;
    if (fd < 0)
      return agsx_error_set(err, errno, "--egress-rules: open `%s`", v);
    if (agsx_read_fd(fd, 1 << 20, &text, &len, err) < 0)
      return agsx_error_wrap(err, "--egress-rules: `%s`", v);
    return agsx_egress_parse_file(text, len, v, e, err);
  }
  if (agsx_egress_add(e, v, id == O_EGRESS_ALLOW, err) < 0)
    return agsx_error_wrap(err, "--egress-%s", id == O_EGRESS_ALLOW ? "allow" : "deny");
  return 0;
}

/* ---- netlog ----------------------------------------------------------------------------- */

static int on_opt(void *data, int id, const char *v) {
  (void)v;
  if (id == O_JSON)
    *(bool *)data = true;
  return 0;
}

static void print_entry(yajl_val e) {
  const char *kind = agsx_json_get_string(e, "kind"), *last = agsx_json_get_string(e, "last");
  int64_t count = 0, port = 0;
  agsx_json_get_int64(e, "count", &count);
  /* dns: a refused name; limit: a name answered whose addresses a bound
   * kept closed; closed: a denied name whose addresses were not recorded,
   * so that the whole sandbox was closed, and why (egress.h). */
  if (kind && strcmp(kind, "closed") == 0) {
    const char *name = agsx_json_get_string(e, "name"), *why = agsx_json_get_string(e, "reason");
    char what[320];
    snprintf(what, sizeof(what), "%s (%s)", name ? name : "?", why ? why : "?");
    printf("%-20s %-10s %-40s %-6s %" PRId64 "\n", last ? last : "-", kind, what, "-", count);
    return;
  }
  if (kind && (strcmp(kind, "dns") == 0 || strcmp(kind, "limit") == 0)) {
    printf("%-20s %-10s %-40s %-6s %" PRId64 "\n", last ? last : "-", kind,
           agsx_json_get_string(e, "name") ? agsx_json_get_string(e, "name") : "?", "-", count);
    return;
  }
  char where[64];
  const char *addr = agsx_json_get_string(e, "address"),
             *proto = agsx_json_get_string(e, "protocol");
  if (agsx_json_get_int64(e, "port", &port))
    snprintf(where, sizeof(where), "%s:%" PRId64, addr ? addr : "?", port);
  else
    snprintf(where, sizeof(where), "%s", addr ? addr : "?");
  printf("%-20s %-10s %-40s %-6s %" PRId64 "\n", last ? last : "-", "connection", where,
         proto ? proto : "?", count);
}

int agsx_cmd_netlog_show(struct agsx_ctx *ctx, const char *sandbox, bool json) {
  agsx_error_t err = NULL;
  _cleanup_close_ int statefd = agsx_cmd_state_open(ctx);
  char id[33];
  if (agsx_cmd_lookup_id(statefd, sandbox, id, &err) < 0)
    return agsx_fail(&err);
  _cleanup_close_ int dir = openat(statefd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  _cleanup_free_ char *buf = NULL;
  size_t len = 0;
  if (dir < 0)
    return agsx_failf("sandbox `%s`: %s", sandbox, strerror(errno));
  if (agsx_read_file_at(dir, "netlog", 1 << 22, &buf, &len, &err) < 0) {
    if (agsx_error_errno(&err) != ENOENT)
      return agsx_fail(&err);
    agsx_error_free(&err);
    buf = xstrdup("{\"evicted\":0,\"entries\":[]}");
    len = strlen(buf);
  }
  _cleanup_json_ yajl_val v = agsx_json_parse(buf, len, 1 << 22, &err);
  if (v == NULL)
    return agsx_fail(&err);
  if (json) {
    fwrite(buf, 1, len, stdout);
    fputc('\n', stdout);
    return 0;
  }
  yajl_val entries = agsx_json_get_array(v, "entries");
  printf("%-20s %-10s %-40s %-6s %s\n", "LAST", "KIND", "NAME/ADDRESS", "PROTO", "COUNT");
  for (size_t k = 0; entries && k < entries->u.array.len; k++)
    print_entry(entries->u.array.values[k]);
  return 0;
}

int agsx_cmd_netlog(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  bool json = ctx->json;
  int i = agsx_parse_options(cmd, argc, argv, on_opt, &json);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i != argc - 1)
    return agsx_failf("netlog: expected one SANDBOX (see agsx netlog --help)");
  return agsx_cmd_netlog_show(ctx, argv[i], json);
}
