/* Unit tests: addresses, CIDR blocks, network modes, security-group rules
 * and agsx.conf parsing. */
#include "config.h"

#include "util/conf.h"
#include "net/netspec.h"
#include "net/network.h"
#include "tap.h"

#include <string.h>

static void cidr_ok(const char *s, bool host_ok, const char *want) {
  struct agsx_cidr c;
  agsx_error_t err = NULL;
  char buf[20] = "";
  int r = agsx_cidr_parse(s, host_ok, true, &c, &err);
  if (r == 0)
    agsx_cidr_format(&c, buf);
  tap_ok(r == 0 && strcmp(buf, want) == 0, "cidr `%s` -> %s (got %s %s)", s, want, buf,
         err ? err->msg : "");
  agsx_error_free(&err);
}

static void cidr_bad(const char *s, const char *why) {
  struct agsx_cidr c;
  agsx_error_t err = NULL;
  int r = agsx_cidr_parse(s, false, false, &c, &err);
  tap_ok(r < 0 && err && strstr(err->msg, why), "cidr `%s` refused: %s (%s)", s, why,
         err ? err->msg : "accepted");
  agsx_error_free(&err);
}

static void rule_ok(const char *line, const char *want) {
  struct agsx_sg_rule r;
  agsx_error_t err = NULL;
  int rc = agsx_sg_rule_parse_line(line, &r, &err);
  char *got = rc == 0 ? agsx_sg_rule_format(&r) : NULL;
  tap_ok(rc == 0 && strcmp(got, want) == 0, "rule `%s` -> `%s` (got `%s` %s)", line, want,
         got ? got : "", err ? err->msg : "");
  free(got);
  agsx_error_free(&err);
}

static void rule_bad(const char *line, const char *why) {
  struct agsx_sg_rule r;
  agsx_error_t err = NULL;
  int rc = agsx_sg_rule_parse_line(line, &r, &err);
  tap_ok(rc < 0 && err && strstr(err->msg, why), "rule `%s` refused: %s (%s)", line, why,
         err ? err->msg : "accepted");
  agsx_error_free(&err);
}

int main(void) {
  uint32_t a;
  tap_ok(agsx_ipv4_parse("198.18.0.1", &a, NULL) == 0 && a == 0xc6120001, "ipv4 parse");
  tap_ok(agsx_ipv4_parse("198.18.0", &a, NULL) < 0, "three octets refused");
  tap_ok(agsx_ipv4_parse("198.18.0.01", &a, NULL) < 0, "leading zero refused");
  tap_ok(agsx_ipv4_parse("198.18.0.256", &a, NULL) < 0, "octet > 255 refused");
  tap_ok(agsx_ipv4_parse("198.18.1.1 ", &a, NULL) < 0, "trailing space refused");
  tap_ok(agsx_ipv4_parse("", &a, NULL) < 0, "empty refused");

  cidr_ok("198.19.20.0/24", false, "198.19.20.0/24");
  cidr_ok("0.0.0.0/0", false, "0.0.0.0/0");
  cidr_ok("198.18.0.5", false, "198.18.0.5/32");
  cidr_ok("198.19.20.7/24", true, "198.19.20.7/24");
  cidr_bad("198.19.20.7/24", "did you mean 198.19.20.0/24");
  cidr_bad("198.19.20.0/33", "invalid CIDR");
  cidr_bad("198.19.20.0/", "invalid CIDR");
  cidr_bad("198.19.20.0/024", "invalid CIDR");
  cidr_bad("198.19.20.0", "invalid CIDR");
  cidr_bad("198.19.20.0/8x", "invalid CIDR");
  cidr_bad("fe80::/64", "invalid CIDR");

  struct agsx_cidr x = {0x0a140000, 16}, y = {0x0a148000, 17}, z = {0x0a150000, 16};
  tap_ok(agsx_cidr_overlaps(&x, &y) && agsx_cidr_overlaps(&y, &x), "/16 overlaps its /17");
  tap_ok(!agsx_cidr_overlaps(&x, &z), "neighbouring /16s do not overlap");
  tap_ok(agsx_cidr_contains(&x, 0x0a14ffff) && !agsx_cidr_contains(&x, 0x0a150000), "contains");
  tap_ok(agsx_cidr_size(&y) == 32768, "size of a /17");

  tap_ok(agsx_network_name_is_valid("team-a.prod_1"), "network name ok");
  tap_ok(!agsx_network_name_is_valid("public"), "public is reserved");
  tap_ok(!agsx_network_name_is_valid("Upper"), "upper case refused");
  tap_ok(!agsx_network_name_is_valid("-x"), "leading dash refused");
  tap_ok(!agsx_network_name_is_valid("a234567890123456789012345678901234"), "too long refused");
  enum agsx_net_mode m;
  const char *name;
  tap_ok(agsx_net_mode_parse("vpc:team", &m, &name, NULL) == 0 && m == AGSX_NET_VPC &&
             strcmp(name, "team") == 0,
         "vpc:team");
  tap_ok(agsx_net_mode_parse("public", &m, &name, NULL) == 0 && m == AGSX_NET_PUBLIC, "public");
  tap_ok(agsx_net_mode_parse("vpc:", &m, &name, NULL) < 0, "vpc: without a name refused");
  tap_ok(agsx_net_mode_parse("host", &m, &name, NULL) < 0, "host refused");

  rule_ok("allow out tcp/443 0.0.0.0/0", "allow out tcp/443 0.0.0.0/0");
  rule_ok("allow out tcp/443", "allow out tcp/443 0.0.0.0/0");
  rule_ok("deny in tcp/22 any", "deny in tcp/22 0.0.0.0/0");
  rule_ok("  allow\tingress udp/1000-2000 198.18.0.0/15", "allow in udp/1000-2000 198.18.0.0/15");
  rule_ok("deny egress all 169.254.169.254", "deny out all 169.254.169.254/32");
  rule_ok("allow in icmp", "allow in icmp 0.0.0.0/0");
  rule_ok("allow out any 198.19.0.0/16", "allow out all 198.19.0.0/16");
  rule_bad("permit out tcp/443", "allow or deny");
  rule_bad("allow up tcp/443", "direction");
  rule_bad("allow out sctp/443", "protocol");
  rule_bad("allow out icmp/8", "ports go only with tcp or udp");
  rule_bad("allow out tcp/0", "is not a port");
  rule_bad("allow out tcp/65536", "is not a port");
  rule_bad("allow out tcp/20-10", "is not a port");
  rule_bad("allow out tcp/1-", "is not a port");
  rule_bad("allow out tcp/443 198.18.0.1/15", "host bits");
  rule_bad("allow out tcp/443 0.0.0.0/0 extra", "want in|out");
  rule_bad("allow out", "want in|out");

  const char file[] = "# rules\n\nallow out tcp/443   # https\ndeny in all 198.18.0.0/15\r\n";
  struct agsx_sg_rule *rules = NULL;
  size_t n = 0;
  agsx_error_t err = NULL;
  tap_ok(agsx_sg_rules_parse_file(file, sizeof(file) - 1, "f", &rules, &n, &err) == 0 && n == 2 &&
             rules[0].allow && !rules[1].allow && rules[1].in,
         "rules file: comments, blank lines, CRLF");
  agsx_error_free(&err);
  const char badfile[] = "allow out tcp/443\nallow out tcp/99999\n";
  tap_ok(agsx_sg_rules_parse_file(badfile, sizeof(badfile) - 1, "f", &rules, &n, &err) < 0 &&
             strstr(err->msg, "f:2:"),
         "rules file error names its line (%s)", err ? err->msg : "");
  agsx_error_free(&err);
  free(rules);

  const char rc[] = "# resolv\nsearch x\nnameserver  fe80::1%eth0\nnameserver 127.0.0.53\n";
  char *ns = agsx_resolv_conf_nameserver(rc, sizeof(rc) - 1);
  tap_ok(ns && strcmp(ns, "fe80::1") == 0, "resolv.conf: first nameserver, zone index dropped (%s)",
         ns ? ns : "none");
  free(ns);
  const char rc2[] = "nameserver not-an-ip\nnameserver 198.18.2.1";
  ns = agsx_resolv_conf_nameserver(rc2, sizeof(rc2) - 1);
  tap_ok(ns && strcmp(ns, "198.18.2.1") == 0, "resolv.conf: a malformed entry is skipped");
  free(ns);
  tap_ok(agsx_resolv_conf_nameserver("search x\n", 9) == NULL, "resolv.conf: none");

  char *v = NULL;
  const char conf[] = "# agsx.conf\npublic-subnet = 198.19.99.0/16\n\n  dns=198.18.2.53 \n";
  tap_ok(agsx_conf_parse(conf, sizeof(conf) - 1, "c", "public-subnet", &v, NULL) == 0 && v &&
             strcmp(v, "198.19.99.0/16") == 0,
         "conf: key = value");
  free(v);
  tap_ok(agsx_conf_parse(conf, sizeof(conf) - 1, "c", "dns", &v, NULL) == 0 && v &&
             strcmp(v, "198.18.2.53") == 0,
         "conf: blanks trimmed");
  free(v);
  tap_ok(agsx_conf_parse(conf, sizeof(conf) - 1, "c", "nope", &v, NULL) == 0 && v == NULL,
         "conf: missing key is NULL");
  const char badconf[] = "ok = 1\nno equals sign\n";
  tap_ok(agsx_conf_parse(badconf, sizeof(badconf) - 1, "c", "ok", &v, &err) < 0 &&
             strstr(err->msg, "c:2:"),
         "conf: a malformed line is an error with its line");
  free(v);
  agsx_error_free(&err);
  return tap_done();
}
