/* Fuzz target: the network parsers — CIDR blocks, network modes,
 * security-group rules and rules files, agsx.conf. Every accepted rule
 * must format to text that parses back to the same rule. */
#include "config.h"

#include "util/conf.h"
#include "fuzz.h"
#include "net/netspec.h"
#include "net/network.h"

#include <string.h>

static bool same(const struct agsx_sg_rule *a, const struct agsx_sg_rule *b) {
  return a->allow == b->allow && a->in == b->in && a->proto == b->proto &&
         a->port_lo == b->port_lo && a->port_hi == b->port_hi && a->peer.addr == b->peer.addr &&
         a->peer.prefix == b->peer.prefix;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 4096)
    return 0;
  char *s = xstrndup((const char *)data, size);
  agsx_error_t err = NULL;
  struct agsx_cidr c;
  if (agsx_cidr_parse(s, false, true, &c, &err) == 0 &&
      (c.prefix > 32 || (c.addr & ~agsx_cidr_mask(c.prefix))))
    __builtin_trap();
  agsx_error_free(&err);
  enum agsx_net_mode m;
  const char *name;
  agsx_net_mode_parse(s, &m, &name, &err);
  agsx_error_free(&err);
  struct agsx_sg_rule r, back;
  if (agsx_sg_rule_parse_line(s, &r, &err) == 0) {
    char *t = agsx_sg_rule_format(&r);
    if (agsx_sg_rule_parse_line(t, &back, NULL) < 0 || !same(&r, &back))
      __builtin_trap();
    free(t);
  }
  agsx_error_free(&err);
  struct agsx_sg_rule *rules = NULL;
  size_t n = 0;
  if (agsx_sg_rules_parse_file((const char *)data, size, "fuzz", &rules, &n, &err) == 0 &&
      n > AGSX_MAX_SG_RULES)
    __builtin_trap();
  free(rules);
  agsx_error_free(&err);
  free(agsx_resolv_conf_nameserver((const char *)data, size));
  char *v = NULL;
  agsx_conf_parse((const char *)data, size, "fuzz", "public-subnet", &v, &err);
  free(v);
  agsx_error_free(&err);
  free(s);
  return 0;
}
