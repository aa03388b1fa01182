/* agsx port: a sandbox's published ports, like `docker port` (scripts use
 * it to find the host port picked for `-p PORT`). */
#include "config.h"

#include "cmd.h"
#include "util/json.h"
#include "net/relay.h"
#include "state/state.h"

#include <fcntl.h>
#include <string.h>

static int on_port_opt(void *data, int id, const char *arg) {
  (void)data, (void)id, (void)arg;
  return 0;
}

/* PORT[/PROTO] → port and proto (tcp when not given). */
static int parse_filter(const char *s, uint16_t *ret_port, enum agsx_proto *ret_proto) {
  const char *slash = strchr(s, '/');
  size_t len = slash ? (size_t)(slash - s) : strlen(s);
  *ret_proto = AGSX_PROTO_TCP;
  if (slash && agsx_proto_parse(slash + 1, ret_proto) < 0)
    return -1;
  if (len == 0 || len > 5 || strspn(s, "0123456789") != len)
    return -1;
  unsigned long v = strtoul(s, NULL, 10);
  if (v == 0 || v > 65535)
    return -1;
  *ret_port = (uint16_t)v;
  return 0;
}

static int print_ports(const struct agsx_record *r, bool json, bool filter, uint16_t port,
                       enum agsx_proto proto) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  struct agsx_port *sel = xzalloc((r->n_ports + 1) * sizeof(*sel));
  size_t n = 0;
  for (size_t i = 0; i < r->n_ports; i++)
    if (!filter || (r->ports[i].port == port && r->ports[i].proto == proto))
      sel[n++] = r->ports[i];
  if (filter && n == 0) {
    free(sel);
    return agsx_failf("sandbox `%.12s` has no published port %u/%s", r->id, port,
                      agsx_proto_name(proto));
  }
  if (json) {
    agsx_record_gen_ports(g, sel, n);
    size_t len;
    _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
    printf("%s\n", s);
  }
  for (size_t i = 0; i < n && !json; i++) {
    char a[80];
    agsx_sockaddr_format(&sel[i].host, a, sizeof(a));
    if (filter)
      printf("%s\n", a);
    else
      printf("%u/%s -> %s\n", sel[i].port, agsx_proto_name(sel[i].proto), a);
  }
  free(sel);
  return 0;
}

int agsx_cmd_port(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  int i = agsx_parse_options(cmd, argc, argv, on_port_opt, NULL);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i >= argc || argc - i > 2)
    return agsx_failf("port: expected SANDBOX [PORT[/PROTO]]");
  uint16_t port = 0;
  enum agsx_proto proto = AGSX_PROTO_TCP;
  bool filter = argc - i == 2;
  if (filter && parse_filter(argv[i + 1], &port, &proto) < 0)
    return agsx_failf("port: invalid port `%s` (PORT[/tcp|udp], 1 to 65535)", argv[i + 1]);
  agsx_error_t err = NULL;
  struct agsx_record r;
  if (agsx_state_lookup(ctx->state, argv[i], &r, &err) < 0)
    return agsx_fail(&err);
  int code;
  if (r.status == AGSX_STATUS_EXITED)
    code = agsx_failf("sandbox `%s` is not running", argv[i]);
  else
    code = print_ports(&r, ctx->json, filter, port, proto);
  agsx_record_clear(&r);
  return code;
}
