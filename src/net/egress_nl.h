/* agsx — egress_nl: an nftables transaction written as one netlink batch.
 *
 * libnftables parses the nft(8) language, fetches the kernel's ruleset into
 * its cache (the chains and sets of every sandbox on the host: O(sandboxes)
 * per call), then commits: a few milliseconds per sandbox start. A
 * sandbox's egress objects (egress.h) need none of it: their names are
 * known, the sets and maps they use exist (network.c's base rules), and the
 * kernel resolves names inside the batch. So they are encoded here, directly
 * as nf_tables netlink messages, and sent in one sendmsg(): the kernel
 * processes (and commits or aborts) the whole batch before sendmsg returns,
 * and queues its answers on the socket to be read whenever convenient
 * (agsx_nfb_wait), for instance after the rest of the start-up.
 *
 * The batch is atomic as an nft transaction is: every message or none. */
#ifndef AGSX_NET_EGRESS_NL_H
#define AGSX_NET_EGRESS_NL_H

#include "util/util.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AGSX_NFB_NEST_MAX 8

struct agsx_nfb {
  char *buf;
  size_t len, cap;
  size_t msg;  /* offset of the message being written */
  size_t last; /* of the last one ended (0: none yet) */
  size_t nest[AGSX_NFB_NEST_MAX];
  int depth;
  uint32_t seq;
  size_t n_msgs; /* messages, batch begin and end aside */
};

void agsx_nfb_init(struct agsx_nfb *b);
void agsx_nfb_clear(struct agsx_nfb *b);
/* Sends the batch: the socket holding the kernel's answers is *RET_FD, for
 * agsx_nfb_wait (an empty batch sends nothing: -1). */
int agsx_nfb_send(struct agsx_nfb *b, int *ret_fd, agsx_error_t *err);
/* Reads the answers to the batch sent on FD (and closes nothing): 0 when it
 * was committed. */
int agsx_nfb_wait(int fd, agsx_error_t *err);
/* Send and wait. An empty batch succeeds. */
int agsx_nfb_run(struct agsx_nfb *b, agsx_error_t *err);

/* A message of nf_tables type TYPE (NFT_MSG_*, family inet) with FLAGS
 * (beyond NLM_F_REQUEST), its attributes (NLA_F_NESTED nests), its end. */
void agsx_nfb_begin(struct agsx_nfb *b, int type, uint16_t flags);
void agsx_nfb_attr(struct agsx_nfb *b, uint16_t type, const void *data, size_t n);
void agsx_nfb_attr_str(struct agsx_nfb *b, uint16_t type, const char *s); /* with its NUL */
void agsx_nfb_nest(struct agsx_nfb *b, uint16_t type);
void agsx_nfb_nest_end(struct agsx_nfb *b);
void agsx_nfb_end(struct agsx_nfb *b);

/* ---- the egress objects of sandbox ADDR (egress.h) ---- */
struct agsx_egress;
struct agsx_cidr;
/* Its three sets, each of at most SIZE elements with a timeout. */
enum agsx_egress_set {
  AGSX_EGRESS_SET_ANY,    /* xa_ADDR: addresses learnt for every port */
  AGSX_EGRESS_SET_PORTS,  /* xp_ADDR: address . port, learnt for one port */
  AGSX_EGRESS_SET_DENIED, /* xd_ADDR: denied names' addresses */
  AGSX_EGRESS_SETS
};
void agsx_egress_set_name(uint32_t addr, enum agsx_egress_set set, char name[16]);
/* (Re)makes chain x_ADDR from E and hooks it into xmap (egress.h says
 * what FRESH, SUBNET and LOG_GROUP do). FRESH also makes its sets, of at
 * most SET_SIZE elements each (they must not exist: agsx_egress_nl_delete
 * them first; else they are kept as they are). CLOSED: its first rule
 * refuses everything, marked AGSX_EGRESS_CLOSED_MARK (egress.h: a denied
 * name whose addresses are not recorded). */
#define AGSX_EGRESS_CLOSED_MARK "agsx:closed"
void agsx_egress_nl_chain(struct agsx_nfb *b, const struct agsx_egress *e, uint32_t addr,
                          const struct agsx_cidr *subnet, bool fresh, int log_group,
                          uint32_t set_size, bool closed);
/* Makes its sets (and the host's count xcount, if missing). */
void agsx_egress_nl_sets(struct agsx_nfb *b, uint32_t addr, uint32_t size);
/* Rewrites xl_ADDR to log to nflog group LOG_GROUP (-1: none), rate-limited. */
void agsx_egress_nl_log(struct agsx_nfb *b, uint32_t addr, int log_group);
/* Removes WHAT of sandbox ADDR's objects (AGSX_EGRESS_OBJ_*): the xmap
 * element, then the chains, then the sets. Never element by element, so
 * that no element expiring meanwhile can fail the removal. */
#define AGSX_EGRESS_OBJ_HOOK 1u   /* its xmap element */
#define AGSX_EGRESS_OBJ_CHAIN 2u  /* x_ADDR */
#define AGSX_EGRESS_OBJ_REFUSE 4u /* xl_ADDR */
#define AGSX_EGRESS_OBJ_SET 8u    /* << enum agsx_egress_set: xa_, xp_, xd_ADDR */
#define AGSX_EGRESS_OBJ_ALL 63u
void agsx_egress_nl_delete(struct agsx_nfb *b, uint32_t addr, unsigned what);
/* Empties set SET of sandbox ADDR (every element, however many expired). */
void agsx_egress_nl_flush_set(struct agsx_nfb *b, uint32_t addr, enum agsx_egress_set set);
/* Adds (or refreshes) ADDR (with PORT in AGSX_EGRESS_SET_PORTS) to set SET
 * of sandbox SANDBOX for TTL_S seconds, with COMMENT (the name; at most 127
 * bytes are kept); an allowed one is counted in the host's count xcount for
 * as long, a denied one is not (and its timeout is set anew on every
 * kernel: added, removed and added again). */
void agsx_egress_nl_learn(struct agsx_nfb *b, uint32_t sandbox, enum agsx_egress_set set,
                          uint32_t addr, uint16_t port, int64_t ttl_s, const char *comment);

/* ---- the security-group chains of vpc member ADDR (network.c) ---- */
struct agsx_sg_rule;
/* (Re)makes chains e_ADDR (out) and i_ADDR (in) of the rules of SETS[0]
 * (COUNTS[0] of them: the vpc's) and SETS[1] (the member's own), denials
 * first, then allowances, then the vpc's default (its own SUBNET on
 * BRIDGE) and a drop marked "agsx:end"; and hooks them into maps egress
 * and ingress under BRIDGE . ADDR, which set members lists too (the forward
 * chain's `!= @members`: Linux 6.1 refuses `!=` on a map). The same
 * rules nft(8) would make of the text network.c wrote before, without
 * libnftables' ruleset cache. */
void agsx_vpc_nl_member(struct agsx_nfb *b, const char *bridge, const struct agsx_cidr *subnet,
                        uint32_t addr, const struct agsx_sg_rule *const sets[2],
                        const size_t counts[2]);
/* Removes them: the members element, the two map elements, then the two chains. */
void agsx_vpc_nl_member_delete(struct agsx_nfb *b, const char *bridge, uint32_t addr);

/* ---- targeted looks at table inet agsx (no ruleset dump) ----
 * libnftables' `get element` and `list chain` fetch the whole ruleset into
 * their cache first (every sandbox's chains and sets): a check at each
 * start would cost O(sandboxes). These ask the kernel for one object each,
 * on a socket of agsx_nfq_open (blocking, bounded by a receive timeout).
 * Each returns 1 (there), 0 (not there: no such element, set, chain or
 * table) or -1 with ERR (EPERM: not ours to read; else no answer). */
int agsx_nfq_open(agsx_error_t *err);
/* Does table inet agsx exist? */
int agsx_nfq_table(int fd, agsx_error_t *err);
/* Does set (or map) SET hold the element of key KEY (N bytes, the set's
 * key length: an ifname is 16 bytes, zero-padded; a concatenation's fields
 * each take whole 32-bit words)? */
int agsx_nfq_elem(int fd, const char *set, const void *key, size_t n, agsx_error_t *err);
/* Does chain (SET false) or set (SET true) NAME exist? */
int agsx_nfq_object(int fd, bool set, const char *name, agsx_error_t *err);
/* Does CHAIN's last rule carry comment MARK (nft's `comment "MARK"`)? A
 * chain whose rules were flushed says 0. */
int agsx_nfq_chain_marked(int fd, const char *chain, const char *mark, agsx_error_t *err);
/* Does any rule of CHAIN carry comment MARK? */
int agsx_nfq_chain_has(int fd, const char *chain, const char *mark, agsx_error_t *err);

#endif
