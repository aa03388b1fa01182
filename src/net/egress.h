/* agsx — egress: a sandbox's allow-list of destinations by name and CIDR,
 * enforced in the kernel.
 *
 * Rules (text form, as on the command line; a rules file has one per line
 * after `allow` or `deny`, `#` comments):
 *   pypi.org              the name itself
 *   *.example.com         every name under example.com, not example.com
 *   api.example.com:443   a name on one port (TCP and UDP)
 *   10.20.0.0/24          a CIDR (or a bare address), any port and protocol
 *   198.18.0.0/15:80      a CIDR on one port
 * Deny rules win over allow rules. With at least one allow rule the
 * sandbox is default-deny: it reaches the allowed CIDRs and the addresses
 * its DNS relay answered for allowed names, nothing else. With deny rules
 * only, the network's usual egress stays, minus the denied CIDRs and names.
 * Either way DNS goes through the sandbox's relay only: DNS (53) and DNS
 * over TLS (853), UDP and TCP, to anywhere else are refused.
 *
 * Enforcement (nftables, table inet agsx): the forward chain sends every
 * packet from the sandbox's address through its chain x_ADDR (a verdict
 * map keyed by source address: subnets never overlap):
 *   closed (comment "agsx:closed")       → refused (everything, established too)
 *   denied CIDRs, @xd_ADDR               → refused (even established flows)
 *   established, related                 → on to the network's rules
 *   DNS/DoT elsewhere                    → refused
 *   allowed CIDRs, own vpc subnet        → on
 *   @xa_ADDR (address), @xp_ADDR (address . port): learnt → on
 *   the rest (with an allow-list)        → refused (logged, rate-limited)
 * "Refused" is a TCP reset or an ICMP administratively-prohibited, so
 * tools fail at once rather than time out.
 *
 * Names (dnsfilter.h): the relay walks each answer as a chain from the
 * question name through its CNAMEs (at most AGSX_DNS_CHAIN_MAX names).
 * A denied name anywhere in the chain refuses the answer; otherwise the
 * answer's A records whose owner is in the chain (no other) go into
 * xa_ADDR (or xp_ADDR, per allowed port: the ports of every name of the
 * chain) before the answer is released, with the record's TTL bounded to
 * [AGSX_EGRESS_TTL_MIN, AGSX_EGRESS_TTL_MAX] (agsx.conf egress-ttl-min,
 * egress-ttl-max; AGSX_EGRESS_TTL_MIN/MAX), and the released answer's TTLs
 * are cut to that maximum. Denied names' addresses go into xd_ADDR, with
 * and without an allow-list: the relay resolves each denied name (not a
 * wildcard) itself, when the rules load and again before its TTL runs out,
 * and adds the addresses of any chain a denied name is part of (for their
 * bounded TTL; its own lookups' for ten seconds more, time to look again).
 *
 * Denials fail closed. While a denied name's addresses are not recorded
 * (not resolved yet, its lookup unanswered or failed, an address refused
 * by the bound or by a failed transaction, or their time run out without
 * a new answer) the sandbox is closed: its chain's first rule (comment
 * "agsx:closed") refuses everything it sends (its DNS relay is inside its
 * namespace: lookups go on). A rule, not a set element: no bound can keep
 * it out. A start with denied names makes its chain closed, so does an
 * update that denies names, and the relay makes the chain anew without
 * that rule once every denied name is recorded (a start waits up to a
 * second for that, agsx update two), and with it again when one is not.
 * The same, for the bounded TTL of the answer, when the
 * addresses of a sandbox's answer through a denied name (an alias, a
 * wildcard) cannot all be recorded. The netlog says why ("closed", with
 * the name and unresolved, limit or error).
 *
 * Bounds: each set of a sandbox holds at most egress-learnt-max elements
 * (AGSX_EGRESS_LEARNT_MAX). Every
 * allowed element is also counted, with the same timeout, in the shared
 * set xcount (sandbox . address . port) of AGSX_EGRESS_LEARNT_TOTAL
 * elements; denied ones are not (a sandbox's denials never depend on what
 * other sandboxes learnt). At a bound the kernel refuses the element
 * (ENFILE): an allowed address stays closed (the answer is released, the
 * netlog says "limit"); a denied one closes the sandbox, as above. Either
 * way it fails closed.
 *
 * A sandbox's sets are its own (xa_, xp_, xd_ADDR), made with its chains
 * and removed with them in one transaction: no element by element, so an
 * element expiring meanwhile cannot fail the clean-up; a start removes
 * (and logs) whatever a previous holder of the address left.
 * The egress list narrows the network's rules and never widens them (the
 * host, metadata services and, on public, private ranges stay blocked). */
#ifndef AGSX_NET_EGRESS_H
#define AGSX_NET_EGRESS_H

#include "net/netspec.h"
#include "util/util.h"

#include <stdbool.h>
#include <stdint.h>

#define AGSX_EGRESS_MAX_RULES 512
#define AGSX_EGRESS_NAME_MAX 253
#define AGSX_EGRESS_TTL_MIN 60         /* s: clients reuse an answer for a while */
#define AGSX_EGRESS_TTL_MAX 300        /* s: a stale answer closes within minutes */
#define AGSX_EGRESS_LEARNT_MAX 1024    /* elements in each of a sandbox's sets */
#define AGSX_EGRESS_LEARNT_HARD 65536  /* the most egress-learnt-max may say */
#define AGSX_EGRESS_LEARNT_TOTAL 65536 /* learnt elements on the host (set xcount) */
#define AGSX_EGRESS_LOG_MAX 256        /* distinct entries kept in the blocked log */
#define AGSX_EGRESS_LOG_RATE "10/second burst 20 packets" /* of dropped packets logged */

enum agsx_egress_kind { AGSX_EGRESS_NAME, AGSX_EGRESS_WILDCARD, AGSX_EGRESS_CIDR };

struct agsx_egress_rule {
  bool allow;
  enum agsx_egress_kind kind;
  char name[AGSX_EGRESS_NAME_MAX + 1]; /* lowercase, no final dot; a wildcard's without "*." */
  struct agsx_cidr cidr;
  uint16_t port; /* 0: every port and protocol */
};

struct agsx_egress {
  struct agsx_egress_rule *rules;
  size_t n;
};
void agsx_egress_clear(struct agsx_egress *e);
bool agsx_egress_has_allow(const struct agsx_egress *e);

/* "pypi.org", "*.x.org:443", "10.0.0.0/8:80" (no action). */
int agsx_egress_rule_parse(const char *s, bool allow, struct agsx_egress_rule *ret,
                           agsx_error_t *err);
/* "allow pypi.org" — the form of a rules file line. */
int agsx_egress_rule_parse_line(const char *s, struct agsx_egress_rule *ret, agsx_error_t *err);
char *agsx_egress_rule_format(const struct agsx_egress_rule *r); /* "allow pypi.org:443" */
int agsx_egress_append(struct agsx_egress *e, const struct agsx_egress_rule *r, agsx_error_t *err);
/* Appends allow or deny rule S (as agsx_egress_rule_parse). */
int agsx_egress_add(struct agsx_egress *e, const char *s, bool allow, agsx_error_t *err);
/* A rules file: appends its rules; errors name WHAT and the line. */
int agsx_egress_parse_file(const char *text, size_t len, const char *what, struct agsx_egress *e,
                           agsx_error_t *err);

/* ["allow pypi.org", ...] and back (the state record, the relay's file). */
char *agsx_egress_to_json(const struct agsx_egress *e);
int agsx_egress_from_json(const char *buf, size_t len, struct agsx_egress *e, agsx_error_t *err);

/* Canonical form of query name NAME (lowercase, no final dot) into BUF
 * (AGSX_EGRESS_NAME_MAX + 1); -1 if it is no valid name. */
int agsx_egress_name_canon(const char *name, size_t len, char *buf);
/* May NAME (canonical) be resolved? *RET_ANY: its addresses on every port;
 * RET_PORTS (at most MAX, may be NULL) the single ports allowed. */
bool agsx_egress_name_allowed(const struct agsx_egress *e, const char *name, bool *ret_any,
                              uint16_t *ret_ports, size_t max, size_t *ret_n);
/* Does a deny rule of E match NAME (canonical)? */
bool agsx_egress_name_denied(const struct agsx_egress *e, const char *name);
/* Does E deny any name (not a CIDR)? */
bool agsx_egress_has_name_deny(const struct agsx_egress *e);
/* Does E deny a name itself (not a wildcard: a name the relay looks up,
 * and the sandbox stays closed until it did)? */
bool agsx_egress_has_exact_deny(const struct agsx_egress *e);
/* Does E let a new connection to ADDR:PORT (PORT 0: not TCP/UDP) through
 * by its CIDR rules alone? *RET_DENIED: a deny rule matched. */
bool agsx_egress_cidr_allowed(const struct agsx_egress *e, uint32_t addr, uint16_t port,
                              bool *ret_denied);

/* ---- the sandbox's nftables objects (network.c makes and removes them) ---- */
/* Written as netlink messages (egress_nl.h: agsx_egress_nl_chain and the
 * rest), not as nft commands, so that a start pays no libnftables cache.
 * agsx_egress_nl_chain (re)makes sandbox ADDR's chain x_ADDR from E and
 * hooks it into the forward chain. SUBNET: its vpc's (reachable), or NULL.
 * FRESH (a start): the refusing chain xl_ADDR is made anew (what a crashed
 * sandbox with the address left goes); else (a live update) it is kept.
 * LOG_GROUP: the nflog group refused packets go to (FRESH only; -1: none),
 * at AGSX_EGRESS_LOG_RATE. */

/* The elements of sandbox ADDR's sets. */
struct agsx_egress_learnt {
  struct {
    uint32_t addr;
    uint16_t port;   /* 0: any port (xa_, xd_) */
    bool denied;     /* of xd_ */
    int64_t expires; /* s left */
    char *name;      /* the element's comment: the name it was learnt for */
  } * v;
  size_t n;
};
void agsx_egress_learnt_clear(struct agsx_egress_learnt *l);
int agsx_egress_learnt_list(uint32_t sandbox, struct agsx_egress_learnt *l, agsx_error_t *err);

/* ---- a sandbox's objects in the ruleset (egress_sets.c) ---- */
struct agsx_nfb;
/* egress-learnt-max (AGSX_EGRESS_LEARNT_MAX): the size of a new sandbox's sets. */
uint32_t agsx_egress_set_size(void);
/* Which of sandbox ADDR's objects exist (AGSX_EGRESS_OBJ_* of
 * egress_nl.h), by targeted looks (no ruleset dump). */
int agsx_egress_objects(uint32_t addr, unsigned *ret, agsx_error_t *err);
/* Removes every object of sandbox ADDR that exists: one transaction;
 * should that fail, one per object. 0 once none is left. */
int agsx_egress_remove(uint32_t addr, agsx_error_t *err);

#endif
