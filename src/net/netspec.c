/* agsx — parsers for addresses, CIDR blocks, network modes and
 * security-group rules. */
#include "config.h"

#include "net/netspec.h"
#include "util/lines.h"

#include <ctype.h>
#include <string.h>

/* A decimal number of at most MAXDIGITS digits, no sign, no leading zero
 * (so that "010" is not silently octal to one reader and decimal to another). */
static const char *parse_dec(const char *s, unsigned maxdigits, unsigned long max,
                             unsigned long *ret) {
  if (!isdigit((unsigned char)*s))
    return NULL;
  if (s[0] == '0' && isdigit((unsigned char)s[1]))
    return NULL;
  unsigned long v = 0;
  unsigned n = 0;
  while (isdigit((unsigned char)*s)) {
    if (++n > maxdigits)
      return NULL;
    v = v * 10 + (unsigned long)(*s++ - '0');
  }
  if (v > max)
    return NULL;
  *ret = v;
  return s;
}

static const char *parse_ipv4(const char *s, uint32_t *ret) {
  uint32_t a = 0;
  for (int i = 0; i < 4; i++) {
    unsigned long o;
    s = parse_dec(s, 3, 255, &o);
    if (s == NULL)
      return NULL;
    a = (a << 8) | (uint32_t)o;
    if (i < 3 && *s++ != '.')
      return NULL;
  }
  *ret = a;
  return s;
}

int agsx_ipv4_parse(const char *s, uint32_t *ret, agsx_error_t *err) {
  const char *e = parse_ipv4(s, ret);
  if (e == NULL || *e != '\0')
    return agsx_error_set(err, EINVAL, "invalid IPv4 address `%s`", s), -1;
  return 0;
}

char *agsx_ipv4_format(uint32_t a, char *buf) {
  snprintf(buf, 16, "%u.%u.%u.%u", a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255);
  return buf;
}

uint32_t agsx_cidr_mask(uint8_t prefix) {
  return prefix == 0 ? 0 : (uint32_t)(0xffffffffu << (32 - prefix));
}

int agsx_cidr_parse(const char *s, bool host_ok, bool bare_ok, struct agsx_cidr *ret,
                    agsx_error_t *err) {
  uint32_t a;
  const char *e = parse_ipv4(s, &a);
  unsigned long prefix = 32;
  if (e && *e == '/')
    e = parse_dec(e + 1, 2, 32, &prefix);
  else if (e && (*e != '\0' || !bare_ok))
    e = NULL;
  if (e == NULL || *e != '\0')
    return agsx_error_set_quiet(err, EINVAL, "invalid CIDR `%s` (want A.B.C.D/N)", s), -1;
  ret->prefix = (uint8_t)prefix;
  ret->addr = host_ok ? a : a & agsx_cidr_mask(ret->prefix);
  if (!host_ok && ret->addr != a) {
    char buf[20];
    return agsx_error_set_quiet(err, EINVAL,
                                "invalid CIDR `%s`: host bits are set (did you mean %s?)", s,
                                agsx_cidr_format(ret, buf)),
           -1;
  }
  return 0;
}

char *agsx_cidr_format(const struct agsx_cidr *c, char *buf) { /* buf: >= 20 bytes */
  char a[16];
  snprintf(buf, 20, "%s/%u", agsx_ipv4_format(c->addr, a), c->prefix);
  return buf;
}

bool agsx_cidr_contains(const struct agsx_cidr *c, uint32_t addr) {
  uint32_t m = agsx_cidr_mask(c->prefix);
  return (addr & m) == (c->addr & m);
}

bool agsx_cidr_overlaps(const struct agsx_cidr *a, const struct agsx_cidr *b) {
  uint8_t p = a->prefix < b->prefix ? a->prefix : b->prefix;
  uint32_t m = agsx_cidr_mask(p);
  return (a->addr & m) == (b->addr & m);
}

uint64_t agsx_cidr_size(const struct agsx_cidr *c) { return (uint64_t)1 << (32 - c->prefix); }

bool agsx_network_name_is_valid(const char *name) {
  static const char *const reserved[] = {"internal", "public", "host", "none", "vpc"};
  size_t n = strlen(name);
  if (n == 0 || n > 32 || !(islower((unsigned char)name[0]) || isdigit((unsigned char)name[0])))
    return false;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)name[i];
    if (!(islower(c) || isdigit(c) || c == '_' || c == '.' || c == '-'))
      return false;
  }
  for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
    if (strcmp(name, reserved[i]) == 0)
      return false;
  return true;
}

int agsx_net_mode_parse(const char *s, enum agsx_net_mode *ret, const char **ret_name,
                        agsx_error_t *err) {
  *ret_name = NULL;
  if (strcmp(s, "internal") == 0) {
    *ret = AGSX_NET_INTERNAL;
    return 0;
  }
  if (strcmp(s, "public") == 0) {
    *ret = AGSX_NET_PUBLIC;
    return 0;
  }
  if (agsx_str_has_prefix(s, "vpc:")) {
    if (!agsx_network_name_is_valid(s + 4))
      return agsx_error_set_quiet(err, EINVAL, "invalid network name `%s`", s + 4), -1;
    *ret = AGSX_NET_VPC;
    *ret_name = s + 4;
    return 0;
  }
  return agsx_error_set_quiet(err, EINVAL,
                              "invalid network `%s` (want internal, public or vpc:NAME)", s),
         -1;
}

/* ---- security-group rules ---------------------------------------------------------------------- */

#define MAX_WORDS 4

/* Splits S (a copy) at blanks; returns the count, or -1 for too many. */
static int split_words(char *s, char *w[MAX_WORDS]) {
  int n = 0;
  for (char *p = s;;) {
    while (*p == ' ' || *p == '\t')
      p++;
    if (*p == '\0')
      return n;
    if (n == MAX_WORDS)
      return -1;
    w[n++] = p;
    while (*p && *p != ' ' && *p != '\t')
      p++;
    if (*p)
      *p++ = '\0';
  }
}

static int parse_proto(const char *s, struct agsx_sg_rule *r) {
  static const struct {
    const char *name;
    uint8_t proto;
  } protos[] = {{"tcp", AGSX_SG_TCP},
                {"udp", AGSX_SG_UDP},
                {"icmp", AGSX_SG_ICMP},
                {"all", AGSX_SG_ALL},
                {"any", AGSX_SG_ALL}};
  for (size_t i = 0; i < sizeof(protos) / sizeof(protos[0]); i++)
    if (strcmp(s, protos[i].name) == 0) {
      r->proto = protos[i].proto;
      return 0;
    }
  return -1;
}

static int parse_ports(const char *s, struct agsx_sg_rule *r) {
  unsigned long lo, hi;
  const char *e = parse_dec(s, 5, 65535, &lo);
  if (e == NULL || lo == 0)
    return -1;
  hi = lo;
  if (*e == '-') {
    e = parse_dec(e + 1, 5, 65535, &hi);
    if (e == NULL || hi < lo)
      return -1;
  }
  if (*e != '\0')
    return -1;
  r->port_lo = (uint16_t)lo;
  r->port_hi = (uint16_t)hi;
  return 0;
}

int agsx_sg_rule_parse(const char *s, bool allow, struct agsx_sg_rule *ret, agsx_error_t *err) {
  _cleanup_free_ char *copy = xstrdup(s);
  char *w[MAX_WORDS];
  int n = split_words(copy, w);
  struct agsx_sg_rule r = {.allow = allow};
#define BAD(...) return agsx_error_set_quiet(err, EINVAL, __VA_ARGS__), -1
  if (n < 2 || n > 3)
    BAD("invalid rule `%s` (want in|out PROTO[/PORT[-PORT]] [CIDR], e.g. `out tcp/443 0.0.0.0/0`)",
        s);
  if (strcmp(w[0], "in") == 0 || strcmp(w[0], "ingress") == 0)
    r.in = true;
  else if (strcmp(w[0], "out") == 0 || strcmp(w[0], "egress") == 0)
    r.in = false;
  else
    BAD("invalid rule `%s`: direction `%s` is not in or out", s, w[0]);
  char *slash = strchr(w[1], '/');
  if (slash)
    *slash++ = '\0';
  if (parse_proto(w[1], &r) < 0)
    BAD("invalid rule `%s`: protocol `%s` is not tcp, udp, icmp or all", s, w[1]);
  if (slash) {
    if (r.proto != AGSX_SG_TCP && r.proto != AGSX_SG_UDP)
      BAD("invalid rule `%s`: ports go only with tcp or udp", s);
    if (parse_ports(slash, &r) < 0)
      BAD("invalid rule `%s`: `%s` is not a port (1-65535) or range (LO-HI)", s, slash);
  }
  if (n == 3 && strcmp(w[2], "any") != 0) {
    agsx_error_t e = NULL;
    if (agsx_cidr_parse(w[2], false, true, &r.peer, &e) < 0) {
      agsx_error_set_quiet(err, EINVAL, "invalid rule `%s`: %s", s, e->msg);
      agsx_error_free(&e);
      return -1;
    }
  }
#undef BAD
  *ret = r;
  return 0;
}

int agsx_rule_verb(const char **s, bool *ret_allow) {
  const char *p = *s + strspn(*s, " \t");
  size_t n = strcspn(p, " \t");
  if (n == 5 && strncmp(p, "allow", 5) == 0)
    *ret_allow = true;
  else if (n == 4 && strncmp(p, "deny", 4) == 0)
    *ret_allow = false;
  else
    return -1;
  *s = p + n;
  return 0;
}

int agsx_sg_rule_parse_line(const char *s, struct agsx_sg_rule *ret, agsx_error_t *err) {
  bool allow;
  if (agsx_rule_verb(&s, &allow) < 0)
    return agsx_error_set_quiet(err, EINVAL, "invalid rule `%s`: it starts with allow or deny",
                                s + strspn(s, " \t")),
           -1;
  return agsx_sg_rule_parse(s, allow, ret, err);
}

char *agsx_sg_rule_format(const struct agsx_sg_rule *r) {
  const char *proto = r->proto == AGSX_SG_TCP    ? "tcp"
                      : r->proto == AGSX_SG_UDP  ? "udp"
                      : r->proto == AGSX_SG_ICMP ? "icmp"
                                                 : "all";
  char ports[16] = "", cidr[20];
  if (r->port_lo && r->port_lo == r->port_hi)
    snprintf(ports, sizeof(ports), "/%u", r->port_lo);
  else if (r->port_lo)
    snprintf(ports, sizeof(ports), "/%u-%u", r->port_lo, r->port_hi);
  return xasprintf("%s %s %s%s %s", r->allow ? "allow" : "deny", r->in ? "in" : "out", proto, ports,
                   agsx_cidr_format(&r->peer, cidr));
}

int agsx_sg_rules_append(struct agsx_sg_rule **rules, size_t *n, const struct agsx_sg_rule *r,
                         agsx_error_t *err) {
  if (*n >= AGSX_MAX_SG_RULES)
    return agsx_error_set_quiet(err, E2BIG, "too many rules (at most %d)", AGSX_MAX_SG_RULES), -1;
  *rules = xrealloc(*rules, (*n + 1) * sizeof(**rules));
  (*rules)[(*n)++] = *r;
  return 0;
}

struct sg_lines {
  struct agsx_sg_rule **rules;
  size_t *n;
};

static int sg_line(char *line, size_t lineno, void *data, agsx_error_t *err) {
  (void)lineno;
  struct sg_lines *d = data;
  struct agsx_sg_rule r;
  if (agsx_sg_rule_parse_line(line, &r, err) < 0)
    return -1;
  return agsx_sg_rules_append(d->rules, d->n, &r, err);
}

int agsx_sg_rules_parse_file(const char *text, size_t len, const char *what,
                             struct agsx_sg_rule **rules, size_t *n, agsx_error_t *err) {
  struct sg_lines d = {rules, n};
  return agsx_lines_each(text, len, what, 1024, AGSX_LINES_HASH_ANYWHERE, sg_line, &d, err);
}
