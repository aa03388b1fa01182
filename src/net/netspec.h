/* agsx — netspec: parsers for network specifications given by users:
 * IPv4 addresses and CIDR blocks, network names, network modes and
 * security-group rules. All pure functions, fuzzed. */
#ifndef AGSX_NETSPEC_H
#define AGSX_NETSPEC_H

#include "util/util.h"

#include <stdbool.h>
#include <stdint.h>

struct agsx_cidr {
  uint32_t addr; /* host byte order, host bits zero */
  uint8_t prefix;
};

/* "a.b.c.d" in dotted-quad form only (no "10.1", no octal, no spaces). */
int agsx_ipv4_parse(const char *s, uint32_t *ret, agsx_error_t *err);
/* Writes "a.b.c.d" into BUF (at least 16 bytes). */
char *agsx_ipv4_format(uint32_t addr, char *buf);

/* "a.b.c.d/n". With HOST_OK, host bits may be set (they are kept, for an
 * address with its prefix); without it they must be zero, and the message
 * names the network that was probably meant. A bare address is /32 when
 * BARE_OK. */
int agsx_cidr_parse(const char *s, bool host_ok, bool bare_ok, struct agsx_cidr *ret,
                    agsx_error_t *err);
char *agsx_cidr_format(const struct agsx_cidr *c, char *buf); /* >= 20 bytes */
uint32_t agsx_cidr_mask(uint8_t prefix);
bool agsx_cidr_contains(const struct agsx_cidr *c, uint32_t addr);
bool agsx_cidr_overlaps(const struct agsx_cidr *a, const struct agsx_cidr *b);
/* Number of addresses in C (2^(32-prefix)), as 64 bits. */
uint64_t agsx_cidr_size(const struct agsx_cidr *c);

/* Network names: [a-z0-9][a-z0-9_.-]{0,31}; "internal", "public", "host"
 * and "none" are reserved. */
bool agsx_network_name_is_valid(const char *name);

enum agsx_net_mode { AGSX_NET_INTERNAL, AGSX_NET_PUBLIC, AGSX_NET_VPC };
/* "internal", "public" or "vpc:NAME". *RET_NAME points into S. */
int agsx_net_mode_parse(const char *s, enum agsx_net_mode *ret, const char **ret_name,
                        agsx_error_t *err);

/* A security-group rule. Text form (the part after allow/deny):
 *   in|out PROTO[/PORT[-PORT]] [CIDR]
 * PROTO is tcp, udp, icmp or all; CIDR (default 0.0.0.0/0, also "any") is
 * the peer: the source of incoming traffic, the destination of outgoing. */
enum { AGSX_SG_ALL = 0, AGSX_SG_ICMP = 1, AGSX_SG_TCP = 6, AGSX_SG_UDP = 17 };
struct agsx_sg_rule {
  bool allow;
  bool in;                   /* ingress (traffic to the sandbox) or egress */
  uint8_t proto;             /* AGSX_SG_* */
  uint16_t port_lo, port_hi; /* 0 = every port */
  struct agsx_cidr peer;
};
#define AGSX_MAX_SG_RULES 256

/* Parses "in tcp/443 198.18.0.0/15" (without the action). */
int agsx_sg_rule_parse(const char *s, bool allow, struct agsx_sg_rule *ret, agsx_error_t *err);
/* "allow in tcp/443 198.18.0.0/15" — the form a rules file has. */
int agsx_sg_rule_parse_line(const char *s, struct agsx_sg_rule *ret, agsx_error_t *err);
/* The verb of a rules-file line (security groups, egress): "allow" or
 * "deny" first, after blanks; *S is moved past it. -1: neither. */
int agsx_rule_verb(const char **s, bool *ret_allow);
/* The canonical text, with the action ("allow in tcp/443 198.18.0.0/15"). */
char *agsx_sg_rule_format(const struct agsx_sg_rule *r);
/* A rules file: one rule per line, `#` comments and blank lines ignored.
 * Appends to *RULES (at most AGSX_MAX_SG_RULES in all). Errors name the line. */
int agsx_sg_rules_parse_file(const char *text, size_t len, const char *what,
                             struct agsx_sg_rule **rules, size_t *n, agsx_error_t *err);
int agsx_sg_rules_append(struct agsx_sg_rule **rules, size_t *n, const struct agsx_sg_rule *r,
                         agsx_error_t *err);

#endif
