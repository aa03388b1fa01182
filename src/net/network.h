/* agsx — network: the `public` network and named `vpc` networks.
 *
 * A network is a host bridge with a subnet; its gateway address is on the
 * bridge. Sandboxes join it through a veth pair (see net.h) with an
 * address leased from the subnet. Rules live in one nftables table,
 * `inet agsx`, that agsx alone writes:
 *   - nothing from a sandbox reaches the host itself (input);
 *   - nothing reaches 0/8, 127/8, 169.254/16 and 100.100.100.200 (metadata
 *     services) or multicast and broadcast;
 *   - public sandboxes reach the internet (masqueraded) but no other
 *     sandbox and no private range (10/8, 100.64/10, 172.16/12, 192.168/16);
 *     nothing new reaches them (published ports come through a relay);
 *   - each vpc member gets an egress and an ingress chain, reached through
 *     verdict maps keyed by bridge and address: its network's and its own
 *     rules, denials first, then allowances, then the default — members of
 *     the same vpc reach each other, nothing else does; an allowance out
 *     to the default peer (0.0.0.0/0) skips the private ranges, as public
 *     does; a vpc sandbox with no chains sends nothing. Stateful: replies
 *     pass. IPv6 is off on sandbox links and dropped on agsx bridges.
 * Sandboxes' bridge ports are isolated (net.h): traffic between two
 * sandboxes is routed by the host (vpc: proxy ARP), so the rules apply
 * without br_netfilter. The rules fail closed: every start checks and
 * restores them, and each supervisor cuts its sandbox off when they go
 * (agsx_net_attach_watch).
 * A sandbox cannot send from another address: its network namespace is
 * owned by the host user namespace, so it has no CAP_NET_RAW or
 * CAP_NET_ADMIN there (no raw or packet sockets, no new addresses).
 *
 * Definitions of vpc networks are ROOT/networks/NAME.json. Leases are
 * flocked files /run/agsx-net/BRIDGE/ADDRESS (agsx_net_run_dir), held by the sandbox's
 * supervisor: a crashed supervisor frees its address with its last fd. */
#ifndef AGSX_NETWORK_H
#define AGSX_NETWORK_H

#include "net/net.h"
#include "net/netspec.h"
#include "util/util.h"

struct agsx_network {
  char *name; /* "public", or the vpc's name */
  char id[17];
  bool public_;
  struct agsx_cidr subnet;
  uint32_t gateway;
  char bridge[16];
  struct agsx_sg_rule *rules;
  size_t n_rules;
  int64_t created;
};
void agsx_network_clear(struct agsx_network *n);

/* The public network, from agsx.conf / AGSX_PUBLIC_SUBNET / AGSX_PUBLIC_BRIDGE. */
int agsx_network_public(struct agsx_network *ret, agsx_error_t *err);
int agsx_network_load(const char *root, const char *name, struct agsx_network *ret,
                      agsx_error_t *err);
/* Creates vpc N (name, subnet and rules set by the caller). Refuses a
 * subnet that overlaps another network's or an address of the host. */
int agsx_network_create(const char *root, struct agsx_network *n, agsx_error_t *err);
int agsx_network_list(const char *root, struct agsx_network **ret, size_t *ret_n,
                      agsx_error_t *err);
/* Removes vpc NAME, its bridge and its rules; refused while a sandbox uses it. */
int agsx_network_remove(const char *root, const char *name, agsx_error_t *err);
/* Replaces the rules of vpc NAME by RULES, live: the definition, then one
 * nft transaction rewriting the chains of every running member (with its
 * own rules kept), then the members' tracked connections the new rules
 * refuse are cut (conntrack.h). *RET_MEMBERS: sandboxes updated; *RET_CUT:
 * connections cut. */
int agsx_network_update(const char *root, const char *name, const struct agsx_sg_rule *rules,
                        size_t n_rules, size_t *ret_members, size_t *ret_cut, agsx_error_t *err);
/* Sandboxes on a network now (leases held). */
int agsx_network_users(const struct agsx_network *n);
char *agsx_network_to_json(const struct agsx_network *n, bool with_users);

/* The name server a sandbox's DNS relay forwards to: agsx.conf `dns` (or
 * AGSX_DNS; the first of a comma or blank separated list), else the first
 * nameserver of the host's /etc/resolv.conf. An IPv4 or IPv6 literal. */
int agsx_net_dns_upstream(char **ret, agsx_error_t *err);
/* The first "nameserver ADDR" of resolv.conf text (NULL if none). */
char *agsx_resolv_conf_nameserver(const char *text, size_t len);

/* Makes the DNS relay of a sandbox on a public or vpc network in *RELAY
 * (which must be NULL: a relay of its own, so the sandbox's queries never
 * share caps, fds or timeouts with published ports): UDP and TCP
 * 127.0.0.11:53 bound in NETNS, forwarded from the caller's namespace to
 * agsx_net_dns_upstream(), with the caps and timeouts of DNS (few TCP
 * connections, short-lived flows and connections). With no name server
 * known it warns and makes nothing. */
#define AGSX_DNS_MAX_CONNS 64      /* TCP (truncated answers, zone transfers) */
#define AGSX_DNS_MAX_FLOWS 256     /* UDP: one per query's source port */
#define AGSX_DNS_UDP_IDLE_MS 5000  /* a resolver gives up after 5 s */
#define AGSX_DNS_TCP_IDLE_MS 10000 /* RFC 7766 6.2.3: servers close idle ones after seconds */
#define AGSX_DNS_HALF_CLOSED_MS 5000
/* With egress rules on A (NULL: none), the relay filters (dnsfilter.h),
 * keeping its log and reading live updates under STATE_DIR/ID; it first
 * waits for A's egress rules to be in place (agsx_net_egress_wait). */
struct agsx_relay;
struct agsx_net_attach;
int agsx_net_dns_listen(struct agsx_relay **relay, int netns, struct agsx_net_attach *a,
                        const char *state_dir, agsx_error_t *err);

/* One sandbox on a network. */
struct agsx_net_attach {
  struct agsx_network net;
  int lease_fd;
  uint32_t addr;
  bool chains; /* vpc: its chains are in the ruleset */
  bool cut;    /* cut off: its rules went (agsx_net_attach_watch) */
  /* Egress rules (net/egress.h), set before agsx_net_attach_begin, borrowed. */
  const struct agsx_egress *egress;
  bool egress_on, egress_chains; /* it has some; its chain and sets are in place */
  int nflog_fd, nflog_group;     /* the blocked log's nflog socket and group, or -1 */
  int egress_pipe;               /* the egress batch's netlink socket (its answer), until read */
  int watch_fd;                  /* hears changes to the ruleset */
  char id[33];                   /* the sandbox's */
  struct agsx_net_link link;
};
#define AGSX_NET_ATTACH_INIT                                                                       \
  { .lease_fd = -1, .watch_fd = -1, .nflog_fd = -1, .nflog_group = -1, .egress_pipe = -1 }

/* Leases an address on network MODE/NAME for sandbox ID, makes sure the
 * bridge and the base rules exist and, on a vpc, adds the sandbox's chains
 * with the network's rules plus RULES. On failure nothing is left. */
int agsx_net_attach_begin(const char *root, enum agsx_net_mode mode, const char *name,
                          const struct agsx_sg_rule *rules, size_t n_rules, const char *id,
                          struct agsx_net_attach *a, agsx_error_t *err);
/* (egress_sets.c) Removes what a previous holder of A's address left in
 * the ruleset (and warns that it was there); then, when A has egress
 * rules, sends the batch that makes its chains and sets. */
int agsx_net_egress_add(struct agsx_net_attach *a, agsx_error_t *err);
/* Reads the answer to the egress rules' batch agsx_net_attach_begin sent
 * (the kernel committed it then; the answer waits on A->egress_pipe);
 * fails if they could not be made. Done at most once; 0 without egress
 * rules. */
int agsx_net_egress_wait(struct agsx_net_attach *a, agsx_error_t *err);
/* For the supervisor's poll loop, when A->watch_fd is readable: if the
 * ruleset lost what protects the sandbox (the table, its base chains, the
 * bridge's membership or, on a vpc, the sandbox's chains), cuts the
 * sandbox off its network: the host end of its veth pair is deleted, so
 * its eth0 goes and nothing more passes; the sandbox runs on, offline
 * (restart it once the host's firewall is back). *RET_CUT then says why
 * (free it). Fails (-1) if it could not tell or could not cut: the caller
 * must stop the sandbox. */
int agsx_net_attach_watch(struct agsx_net_attach *a, char **ret_cut, agsx_error_t *err);
/* What agsx_net_sandbox_check learnt of each bridge, for the next sandbox
 * on it (zeroed to start; one listing's worth, not to be kept). */
struct agsx_net_check_memo {
  struct {
    char name[16];
    bool ok;
    const char *why;
  } * bridges;
  size_t n;
};
void agsx_net_check_memo_clear(struct agsx_net_check_memo *m);
/* For ls and gc: the trouble of running sandbox ID, recorded on NETWORK
 * ("public", "vpc:NAME") with ADDRESS: cut off, or its rules missing.
 * *RET_PROBLEM is NULL when there is none (and for other networks). Fails
 * with EPERM when the caller may not read the ruleset. */
int agsx_net_sandbox_check(const char *root, const char *network, const char *id,
                           const char *address, struct agsx_net_check_memo *memo,
                           char **ret_problem, agsx_error_t *err);
/* Removes the sandbox's chains and frees its address (the veth pair went
 * with the namespace). Safe on a cleared attach. */
void agsx_net_attach_end(struct agsx_net_attach *a);
/* Lets go of A in a process that handed it to another (run -d's parent). */
void agsx_net_attach_disown(struct agsx_net_attach *a);

/* (egress_sets.c) Replaces the egress rules (net/egress.h) of running
 * sandbox ID, recorded on NETWORK at ADDRESS with its state under
 * STATE_DIR, by E (none: the network's default egress again), live:
 * STATE_DIR/ID/egress.json for its DNS relay, then one nft transaction (its
 * chain rebuilt, its sets emptied and what E still allows added back),
 * then its tracked connections that E refuses are cut (conntrack.h;
 * *RET_CUT of them). When E denies names, the sandbox is closed until its
 * relay recorded them (egress.h): WAIT_MS (0: none) is how long to wait
 * for that, with a warning when it is still closed after it (the CLI
 * waits; the API server's loop must not). */
struct agsx_egress;
#define AGSX_EGRESS_UPDATE_WAIT_MS 2000
int agsx_net_egress_update(const char *root, const char *state_dir, const char *id,
                           const char *network, const char *address, const struct agsx_egress *e,
                           int wait_ms, size_t *ret_cut, agsx_error_t *err);

/* Removes what crashed sandboxes left (stale leases and their chains) and
 * bridges no sandbox uses; the table when no bridge is left. A bridge that
 * cannot be checked or removed does not stop the others: the first failure
 * is *ERR (later ones are logged as warnings) and -1 is returned. */
int agsx_net_gc(bool dry_run, void (*report)(const char *what, void *data), void *data,
                agsx_error_t *err);

#endif
