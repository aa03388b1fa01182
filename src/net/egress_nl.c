/* agsx — an nftables transaction as one netlink batch; the sandbox's egress
 * objects in it. See egress_nl.h. */
#include "config.h"

#include "net/egress.h"
#include "net/egress_nl.h"
#include "net/usernet.h"

#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef NETLINK_CAP_ACK
#define NETLINK_CAP_ACK 10
#endif

/* ---- the batch ------------------------------------------------------------------------------ */

static void *put(struct agsx_nfb *b, size_t n) {
  size_t need = b->len + NLMSG_ALIGN(n);
  if (need > b->cap) {
    b->cap = need * 2 > 4096 ? need * 2 : 4096;
    b->buf = xrealloc(b->buf, b->cap);
  }
  void *p = b->buf + b->len;
  memset(p, 0, NLMSG_ALIGN(n));
  b->len = need;
  return p;
}

static void msg_begin(struct agsx_nfb *b, uint16_t type, uint16_t flags, uint8_t family,
                      uint16_t res_id) {
  b->msg = b->len;
  struct nlmsghdr *h = put(b, NLMSG_HDRLEN);
  h->nlmsg_type = type;
  h->nlmsg_flags = NLM_F_REQUEST | flags;
  h->nlmsg_seq = ++b->seq;
  struct nfgenmsg *g = put(b, sizeof(*g));
  g->nfgen_family = family;
  g->version = NFNETLINK_V0;
  g->res_id = htons(res_id);
}

void agsx_nfb_end(struct agsx_nfb *b) {
  struct nlmsghdr *h = (struct nlmsghdr *)(b->buf + b->msg);
  h->nlmsg_len = (uint32_t)(b->len - b->msg);
  b->last = b->msg;
}

void agsx_nfb_init(struct agsx_nfb *b) {
  memset(b, 0, sizeof(*b));
  uint32_t r;
  if (getrandom(&r, sizeof(r), 0) != sizeof(r))
    r = (uint32_t)getpid();
  b->seq = r >> 1;
  msg_begin(b, NFNL_MSG_BATCH_BEGIN, 0, AF_UNSPEC, NFNL_SUBSYS_NFTABLES);
  agsx_nfb_end(b);
  b->last = 0;
}

void agsx_nfb_clear(struct agsx_nfb *b) {
  free(b->buf);
  memset(b, 0, sizeof(*b));
}

void agsx_nfb_attr(struct agsx_nfb *b, uint16_t type, const void *data, size_t n) {
  struct nlattr *a = put(b, NLA_HDRLEN + n);
  a->nla_type = type;
  a->nla_len = (uint16_t)(NLA_HDRLEN + n);
  memcpy((char *)a + NLA_HDRLEN, data, n);
}

void agsx_nfb_attr_str(struct agsx_nfb *b, uint16_t type, const char *s) {
  agsx_nfb_attr(b, type, s, strlen(s) + 1);
}

static void attr_be32(struct agsx_nfb *b, uint16_t type, uint32_t v) {
  v = htonl(v);
  agsx_nfb_attr(b, type, &v, 4);
}

static void attr_be64(struct agsx_nfb *b, uint16_t type, uint64_t v) {
  uint32_t w[2] = {htonl((uint32_t)(v >> 32)), htonl((uint32_t)v)};
  agsx_nfb_attr(b, type, w, 8);
}

void agsx_nfb_nest(struct agsx_nfb *b, uint16_t type) {
  if (b->depth == AGSX_NFB_NEST_MAX)
    abort(); /* a bug of this file, not of its input */
  b->nest[b->depth++] = b->len;
  struct nlattr *a = put(b, NLA_HDRLEN);
  a->nla_type = type | NLA_F_NESTED;
}

void agsx_nfb_nest_end(struct agsx_nfb *b) {
  struct nlattr *a = (struct nlattr *)(b->buf + b->nest[--b->depth]);
  a->nla_len = (uint16_t)(b->len - b->nest[b->depth]);
}

int agsx_nfb_send(struct agsx_nfb *b, int *ret_fd, agsx_error_t *err) {
  *ret_fd = -1;
  if (b->last == 0)
    return 0;
  /* Only the last message is acknowledged: errors come anyway, and the
   * kernel processes every message of a batch whatever failed before. */
  ((struct nlmsghdr *)(b->buf + b->last))->nlmsg_flags |= NLM_F_ACK;
  msg_begin(b, NFNL_MSG_BATCH_END, 0, AF_UNSPEC, NFNL_SUBSYS_NFTABLES);
  agsx_nfb_end(b);
  int fd = agsx_host_socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (fd < 0)
    return agsx_error_set(err, errno, "nftables: netlink socket");
  int one = 1;
  setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof(one)); /* short answers */
  /* A batch is one message: past the default send buffer (~208 KiB; 512
   * rules with ports come near) it needs a larger one, as nft(8) sets. */
  int size = (int)b->len + 4096;
  if (b->len > (64u << 10) && setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof(size)) < 0)
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
  struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
  ssize_t n;
  do
    n = sendto(fd, b->buf, b->len, 0, (struct sockaddr *)&sa, sizeof(sa));
  while (n < 0 && errno == EINTR);
  if (n != (ssize_t)b->len) {
    int e = n < 0 ? errno : EMSGSIZE;
    close(fd);
    return agsx_error_set(err, e, "nftables: send the transaction");
  }
  *ret_fd = fd;
  return 0;
}

/* The answers were all queued before sendmsg returned (the kernel handles
 * a batch in the sender's call): read them without waiting. Only the last
 * message asked for an acknowledgement; errors come anyway. */
int agsx_nfb_wait(int fd, agsx_error_t *err) {
  union {
    char b[8192];
    struct nlmsghdr align;
  } u;
  int first = 0;
  bool answered = false;
  for (;;) {
    ssize_t n = recv(fd, u.b, sizeof(u.b), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      break;
    if (n < 0) /* ENOBUFS: answers lost, an error perhaps among them */
      return agsx_error_set(err, errno, "nftables: read the answer");
    for (size_t off = 0; off + NLMSG_HDRLEN <= (size_t)n;) {
      const struct nlmsghdr *h = (const struct nlmsghdr *)(u.b + off);
      if (h->nlmsg_len < NLMSG_HDRLEN || off + h->nlmsg_len > (size_t)n)
        break;
      if (h->nlmsg_type == NLMSG_ERROR && h->nlmsg_len >= NLMSG_LENGTH(sizeof(int))) {
        int e = *(const int *)NLMSG_DATA(h);
        answered = true;
        if (e < 0 && first == 0)
          first = -e;
      }
      off += NLMSG_ALIGN(h->nlmsg_len);
    }
  }
  if (first)
    return agsx_error_set(err, first, "nftables"), -1;
  if (!answered)
    return agsx_error_set_quiet(err, EIO, "nftables: the transaction got no answer"), -1;
  return 0;
}

int agsx_nfb_run(struct agsx_nfb *b, agsx_error_t *err) {
  if (b->last == 0)
    return 0;
  int fd;
  if (agsx_nfb_send(b, &fd, err) < 0)
    return -1;
  int r = agsx_nfb_wait(fd, err);
  close(fd);
  return r;
}

/* ---- nf_tables objects ---------------------------------------------------------------------- */

#define TABLE_NAME "agsx" /* family inet */
#define TYPE(m) ((uint16_t)((NFNL_SUBSYS_NFTABLES << 8) | (m)))

void agsx_nfb_begin(struct agsx_nfb *b, int type, uint16_t flags) {
  msg_begin(b, TYPE(type), flags, NFPROTO_INET, 0);
  b->n_msgs++;
}

static void chain_msg(struct agsx_nfb *b, int type, uint16_t flags, const char *chain) {
  agsx_nfb_begin(b, type, flags);
  agsx_nfb_attr_str(b, NFTA_CHAIN_TABLE, TABLE_NAME);
  agsx_nfb_attr_str(b, NFTA_CHAIN_NAME, chain);
  agsx_nfb_end(b);
}

/* A DELRULE without a handle: every rule of the chain. */
static void flush_chain(struct agsx_nfb *b, const char *chain) {
  agsx_nfb_begin(b, NFT_MSG_DELRULE, 0);
  agsx_nfb_attr_str(b, NFTA_RULE_TABLE, TABLE_NAME);
  agsx_nfb_attr_str(b, NFTA_RULE_CHAIN, chain);
  agsx_nfb_end(b);
}

static void rule_begin(struct agsx_nfb *b, const char *chain) {
  agsx_nfb_begin(b, NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND);
  agsx_nfb_attr_str(b, NFTA_RULE_TABLE, TABLE_NAME);
  agsx_nfb_attr_str(b, NFTA_RULE_CHAIN, chain);
  agsx_nfb_nest(b, NFTA_RULE_EXPRESSIONS);
}

static void rule_end(struct agsx_nfb *b) {
  agsx_nfb_nest_end(b);
  agsx_nfb_end(b);
}

static void expr_begin(struct agsx_nfb *b, const char *name) {
  agsx_nfb_nest(b, NFTA_LIST_ELEM);
  agsx_nfb_attr_str(b, NFTA_EXPR_NAME, name);
  agsx_nfb_nest(b, NFTA_EXPR_DATA);
}

static void expr_end(struct agsx_nfb *b) {
  agsx_nfb_nest_end(b);
  agsx_nfb_nest_end(b);
}

static void data_value(struct agsx_nfb *b, uint16_t type, const void *v, size_t n) {
  agsx_nfb_nest(b, type);
  agsx_nfb_attr(b, NFTA_DATA_VALUE, v, n);
  agsx_nfb_nest_end(b);
}

static void data_verdict(struct agsx_nfb *b, uint16_t type, int code, const char *chain) {
  agsx_nfb_nest(b, type);
  agsx_nfb_nest(b, NFTA_DATA_VERDICT);
  attr_be32(b, NFTA_VERDICT_CODE, (uint32_t)code);
  if (chain)
    agsx_nfb_attr_str(b, NFTA_VERDICT_CHAIN, chain);
  agsx_nfb_nest_end(b);
  agsx_nfb_nest_end(b);
}

static void meta(struct agsx_nfb *b, uint32_t key, uint32_t reg) {
  expr_begin(b, "meta");
  attr_be32(b, NFTA_META_DREG, reg);
  attr_be32(b, NFTA_META_KEY, key);
  expr_end(b);
}

static void cmp(struct agsx_nfb *b, uint32_t op, const void *v, size_t n) {
  expr_begin(b, "cmp");
  attr_be32(b, NFTA_CMP_SREG, NFT_REG_1);
  attr_be32(b, NFTA_CMP_OP, op);
  data_value(b, NFTA_CMP_DATA, v, n);
  expr_end(b);
}

static void payload(struct agsx_nfb *b, uint32_t base, uint32_t off, uint32_t len, uint32_t reg) {
  expr_begin(b, "payload");
  attr_be32(b, NFTA_PAYLOAD_DREG, reg);
  attr_be32(b, NFTA_PAYLOAD_BASE, base);
  attr_be32(b, NFTA_PAYLOAD_OFFSET, off);
  attr_be32(b, NFTA_PAYLOAD_LEN, len);
  expr_end(b);
}

static void bitwise(struct agsx_nfb *b, const void *mask, const void * xor, size_t n) {
  expr_begin(b, "bitwise");
  attr_be32(b, NFTA_BITWISE_SREG, NFT_REG_1);
  attr_be32(b, NFTA_BITWISE_DREG, NFT_REG_1);
  attr_be32(b, NFTA_BITWISE_LEN, (uint32_t)n);
  data_value(b, NFTA_BITWISE_MASK, mask, n);
  data_value(b, NFTA_BITWISE_XOR, xor, n);
  expr_end(b);
}

static void verdict(struct agsx_nfb *b, int code, const char *chain) {
  expr_begin(b, "immediate");
  attr_be32(b, NFTA_IMMEDIATE_DREG, NFT_REG_VERDICT);
  data_verdict(b, NFTA_IMMEDIATE_DATA, code, chain);
  expr_end(b);
}

/* A rule of CHAIN matching everything, with verdict CODE (to TARGET) and
 * comment MARK, as nft(8) stores it (so that the looks, agsx_nfq_chain_*,
 * and `nft list` read it). */
static void marked_rule(struct agsx_nfb *b, const char *chain, const char *mark, int code,
                        const char *target) {
  size_t n = strlen(mark) + 1;
  unsigned char ud[2 + 32];
  if (n > sizeof(ud) - 2)
    abort(); /* a bug of this file, not of its input */
  ud[0] = 0; /* NFTNL_UDATA_RULE_COMMENT */
  ud[1] = (unsigned char)n;
  memcpy(ud + 2, mark, n);
  rule_begin(b, chain);
  verdict(b, code, target);
  agsx_nfb_nest_end(b);
  agsx_nfb_attr(b, NFTA_RULE_USERDATA, ud, 2 + n);
  agsx_nfb_end(b);
}

/* `meta nfproto ipv4` (an inet table's `ip` matches imply it). */
static void is_ipv4(struct agsx_nfb *b) {
  uint8_t v = NFPROTO_IPV4;
  meta(b, NFT_META_NFPROTO, NFT_REG_1);
  cmp(b, NFT_CMP_EQ, &v, 1);
}

static void l4proto(struct agsx_nfb *b, uint8_t proto) {
  meta(b, NFT_META_L4PROTO, NFT_REG_1);
  cmp(b, NFT_CMP_EQ, &proto, 1);
}

/* `ip daddr CIDR` */
static void daddr_in(struct agsx_nfb *b, const struct agsx_cidr *c) {
  is_ipv4(b);
  payload(b, NFT_PAYLOAD_NETWORK_HEADER, 16, 4, NFT_REG_1);
  uint32_t net = htonl(c->addr & agsx_cidr_mask(c->prefix));
  if (c->prefix < 32) {
    uint32_t mask = htonl(agsx_cidr_mask(c->prefix)), zero = 0;
    bitwise(b, &mask, &zero, 4);
  }
  cmp(b, NFT_CMP_EQ, &net, 4);
}

/* `tcp dport PORT` (PROTO tcp or udp) */
static void dport(struct agsx_nfb *b, uint8_t proto, uint16_t port) {
  l4proto(b, proto);
  payload(b, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2, NFT_REG_1);
  uint16_t p = htons(port);
  cmp(b, NFT_CMP_EQ, &p, 2);
}

/* ---- the egress objects --------------------------------------------------------------------- */

/* The log's rate (AGSX_EGRESS_LOG_RATE in egress.h says the same). */
#define LOG_RATE 10
#define LOG_BURST 20
#define LOG_SNAPLEN 64

static void names(uint32_t addr, char x[16], char xl[16]) {
  snprintf(x, 16, "x_%08x", addr);
  snprintf(xl, 16, "xl_%08x", addr);
}

void agsx_egress_set_name(uint32_t addr, enum agsx_egress_set set, char name[16]) {
  static const char *const prefix[] = {"xa", "xp", "xd"};
  snprintf(name, 16, "%s_%08x", prefix[set], addr);
}

/* The key of SET's elements: an address, or an address . port (each field
 * of a concatenation in a 32-bit word of its own). */
static size_t set_key(enum agsx_egress_set set, uint32_t addr, uint16_t port, uint32_t key[2]) {
  key[0] = htonl(addr);
  key[1] = 0;
  if (set != AGSX_EGRESS_SET_PORTS)
    return 4;
  uint16_t p = htons(port);
  memcpy(&key[1], &p, 2);
  return 8;
}

/* nft(8)'s datatypes (ipv4_addr, inet_service), a concatenation's as
 * nft(8) writes it (6 bits a field), so that `nft list` shows the sets. */
#define TYPE_IPV4 7
#define TYPE_SERVICE 13
#define TYPE_BITS 6

/* `add set inet agsx NAME { type KEY; flags timeout; size SIZE; }` */
static void set_msg(struct agsx_nfb *b, const char *name, uint32_t type, uint32_t klen,
                    uint32_t size) {
  static uint32_t id;
  agsx_nfb_begin(b, NFT_MSG_NEWSET, NLM_F_CREATE);
  agsx_nfb_attr_str(b, NFTA_SET_TABLE, TABLE_NAME);
  agsx_nfb_attr_str(b, NFTA_SET_NAME, name);
  attr_be32(b, NFTA_SET_FLAGS, NFT_SET_TIMEOUT);
  attr_be32(b, NFTA_SET_KEY_TYPE, type);
  attr_be32(b, NFTA_SET_KEY_LEN, klen);
  attr_be32(b, NFTA_SET_ID, ++id);
  agsx_nfb_nest(b, NFTA_SET_DESC);
  attr_be32(b, NFTA_SET_DESC_SIZE, size);
  agsx_nfb_nest_end(b);
  agsx_nfb_end(b);
}

void agsx_egress_nl_sets(struct agsx_nfb *b, uint32_t addr, uint32_t size) {
  char name[16];
  for (int s = 0; s < AGSX_EGRESS_SETS; s++) {
    agsx_egress_set_name(addr, (enum agsx_egress_set)s, name);
    if (s == AGSX_EGRESS_SET_PORTS)
      set_msg(b, name, TYPE_IPV4 << TYPE_BITS | TYPE_SERVICE, 8, size);
    else
      set_msg(b, name, TYPE_IPV4, 4, size);
  }
  /* The host's count (egress.h): made with the table, and here for a
   * table an older agsx made (the same set again is no change). */
  set_msg(b, "xcount", (TYPE_IPV4 << TYPE_BITS | TYPE_IPV4) << TYPE_BITS | TYPE_SERVICE, 12,
          AGSX_EGRESS_LEARNT_TOTAL);
}

void agsx_egress_nl_flush_set(struct agsx_nfb *b, uint32_t addr, enum agsx_egress_set set) {
  char name[16];
  agsx_egress_set_name(addr, set, name);
  /* A DELSETELEM without elements: all of them, whatever expired meanwhile. */
  agsx_nfb_begin(b, NFT_MSG_DELSETELEM, 0);
  agsx_nfb_attr_str(b, NFTA_SET_ELEM_LIST_TABLE, TABLE_NAME);
  agsx_nfb_attr_str(b, NFTA_SET_ELEM_LIST_SET, name);
  agsx_nfb_end(b);
}

void agsx_egress_nl_log(struct agsx_nfb *b, uint32_t addr, int log_group) {
  char x[16], xl[16];
  names(addr, x, xl);
  flush_chain(b, xl);
  if (log_group >= 0) {
    rule_begin(b, xl);
    expr_begin(b, "limit");
    attr_be64(b, NFTA_LIMIT_RATE, LOG_RATE);
    attr_be64(b, NFTA_LIMIT_UNIT, 1); /* per second */
    attr_be32(b, NFTA_LIMIT_BURST, LOG_BURST);
    attr_be32(b, NFTA_LIMIT_TYPE, NFT_LIMIT_PKTS);
    attr_be32(b, NFTA_LIMIT_FLAGS, 0);
    expr_end(b);
    expr_begin(b, "log");
    uint16_t g = htons((uint16_t)log_group);
    agsx_nfb_attr(b, NFTA_LOG_GROUP, &g, 2);
    attr_be32(b, NFTA_LOG_SNAPLEN, LOG_SNAPLEN);
    expr_end(b);
    rule_end(b);
  }
  /* "Refused": a reset or an ICMP administratively-prohibited. */
  rule_begin(b, xl);
  l4proto(b, IPPROTO_TCP);
  expr_begin(b, "reject");
  attr_be32(b, NFTA_REJECT_TYPE, NFT_REJECT_TCP_RST);
  expr_end(b);
  rule_end(b);
  rule_begin(b, xl);
  expr_begin(b, "reject");
  attr_be32(b, NFTA_REJECT_TYPE, NFT_REJECT_ICMPX_UNREACH);
  uint8_t code = NFT_REJECT_ICMPX_ADMIN_PROHIBITED;
  agsx_nfb_attr(b, NFTA_REJECT_ICMP_CODE, &code, 1);
  expr_end(b);
  rule_end(b);
}

/* A CIDR rule's rules (with a port: one for TCP, one for UDP). No set
 * literals: nothing anonymous that every later transaction has to list. */
static void cidr_rules(struct agsx_nfb *b, const char *x, const struct agsx_egress_rule *r,
                       int code, const char *chain) {
  static const uint8_t protos[] = {IPPROTO_TCP, IPPROTO_UDP};
  for (size_t i = 0; i < (r->port ? 2 : 1); i++) {
    rule_begin(b, x);
    daddr_in(b, &r->cidr);
    if (r->port)
      dport(b, protos[i], r->port);
    verdict(b, code, chain);
    rule_end(b);
  }
}

/* `ip daddr [. PROTO dport] @SET VERDICT`: SET one of sandbox ADDR's. */
static void set_rule(struct agsx_nfb *b, const char *x, uint32_t addr, enum agsx_egress_set set,
                     uint8_t proto, int code, const char *chain) {
  char name[16];
  agsx_egress_set_name(addr, set, name);
  rule_begin(b, x);
  is_ipv4(b);
  if (proto)
    l4proto(b, proto);
  payload(b, NFT_PAYLOAD_NETWORK_HEADER, 16, 4, NFT_REG_1);
  if (proto)
    payload(b, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2, NFT_REG32_01);
  expr_begin(b, "lookup");
  agsx_nfb_attr_str(b, NFTA_LOOKUP_SET, name);
  attr_be32(b, NFTA_LOOKUP_SREG, NFT_REG_1);
  expr_end(b);
  verdict(b, code, chain);
  rule_end(b);
}

static void xmap_elem(struct agsx_nfb *b, bool add, uint32_t addr, const char *x) {
  agsx_nfb_begin(b, add ? NFT_MSG_NEWSETELEM : NFT_MSG_DELSETELEM, add ? NLM_F_CREATE : 0);
  agsx_nfb_attr_str(b, NFTA_SET_ELEM_LIST_TABLE, TABLE_NAME);
  agsx_nfb_attr_str(b, NFTA_SET_ELEM_LIST_SET, "xmap");
  agsx_nfb_nest(b, NFTA_SET_ELEM_LIST_ELEMENTS);
  agsx_nfb_nest(b, NFTA_LIST_ELEM);
  uint32_t key = htonl(addr);
  data_value(b, NFTA_SET_ELEM_KEY, &key, 4);
  if (add)
    data_verdict(b, NFTA_SET_ELEM_DATA, NFT_JUMP, x);
  agsx_nfb_nest_end(b);
  agsx_nfb_nest_end(b);
  agsx_nfb_end(b);
}

void agsx_egress_nl_chain(struct agsx_nfb *b, const struct agsx_egress *e, uint32_t addr,
                          const struct agsx_cidr *subnet, bool fresh, int log_group,
                          uint32_t set_size, bool closed) {
  char x[16], xl[16];
  names(addr, x, xl);
  chain_msg(b, NFT_MSG_NEWCHAIN, NLM_F_CREATE, x);
  flush_chain(b, x);
  chain_msg(b, NFT_MSG_NEWCHAIN, NLM_F_CREATE, xl);
  if (fresh) {
    agsx_egress_nl_log(b, addr, log_group);
    agsx_egress_nl_sets(b, addr, set_size);
  }
  /* Closed (a denied name not recorded, egress.h): everything, established
   * flows too; marked, so that a look finds it. */
  if (closed)
    marked_rule(b, x, AGSX_EGRESS_CLOSED_MARK, NFT_GOTO, xl);
  for (size_t i = 0; i < e->n; i++) /* denials first, even for established flows */
    if (!e->rules[i].allow && e->rules[i].kind == AGSX_EGRESS_CIDR)
      cidr_rules(b, x, &e->rules[i], NFT_GOTO, xl);
  set_rule(b, x, addr, AGSX_EGRESS_SET_DENIED, 0, NFT_GOTO, xl); /* denied names' addresses */
  rule_begin(b, x); /* ct state established,related return */
  expr_begin(b, "ct");
  attr_be32(b, NFTA_CT_DREG, NFT_REG_1);
  attr_be32(b, NFTA_CT_KEY, NFT_CT_STATE);
  expr_end(b);
  uint32_t mask = NF_CT_STATE_BIT(IP_CT_ESTABLISHED) | NF_CT_STATE_BIT(IP_CT_RELATED), zero = 0;
  bitwise(b, &mask, &zero, 4);
  cmp(b, NFT_CMP_NEQ, &zero, 4);
  verdict(b, NFT_RETURN, NULL);
  rule_end(b);
  static const uint16_t dns_ports[] = {53, 853};
  static const uint8_t protos[] = {IPPROTO_TCP, IPPROTO_UDP};
  for (size_t p = 0; p < 2; p++) /* DNS and DoT elsewhere */
    for (size_t i = 0; i < 2; i++) {
      rule_begin(b, x);
      dport(b, protos[i], dns_ports[p]);
      verdict(b, NFT_GOTO, xl);
      rule_end(b);
    }
  if (subnet) {
    rule_begin(b, x);
    daddr_in(b, subnet);
    verdict(b, NFT_RETURN, NULL);
    rule_end(b);
  }
  for (size_t i = 0; i < e->n; i++)
    if (e->rules[i].allow && e->rules[i].kind == AGSX_EGRESS_CIDR)
      cidr_rules(b, x, &e->rules[i], NFT_RETURN, NULL);
  set_rule(b, x, addr, AGSX_EGRESS_SET_ANY, 0, NFT_RETURN, NULL);
  set_rule(b, x, addr, AGSX_EGRESS_SET_PORTS, IPPROTO_TCP, NFT_RETURN, NULL);
  set_rule(b, x, addr, AGSX_EGRESS_SET_PORTS, IPPROTO_UDP, NFT_RETURN, NULL);
  if (agsx_egress_has_allow(e)) {
    rule_begin(b, x);
    verdict(b, NFT_GOTO, xl);
    rule_end(b);
  }
  xmap_elem(b, true, addr, x);
}

void agsx_egress_nl_delete(struct agsx_nfb *b, uint32_t addr, unsigned what) {
  char x[16], xl[16], set[16];
  names(addr, x, xl);
  if (what & AGSX_EGRESS_OBJ_HOOK)
    xmap_elem(b, false, addr, NULL);
  /* The chains before the sets their rules look into. */
  if (what & AGSX_EGRESS_OBJ_CHAIN)
    chain_msg(b, NFT_MSG_DELCHAIN, 0, x);
  if (what & AGSX_EGRESS_OBJ_REFUSE)
    chain_msg(b, NFT_MSG_DELCHAIN, 0, xl);
  for (int s = 0; s < AGSX_EGRESS_SETS; s++) {
    if (!(what & (AGSX_EGRESS_OBJ_SET << s)))
      continue;
    agsx_egress_set_name(addr, (enum agsx_egress_set)s, set);
    agsx_nfb_begin(b, NFT_MSG_DELSET, 0);
    agsx_nfb_attr_str(b, NFTA_SET_TABLE, TABLE_NAME);
    agsx_nfb_attr_str(b, NFTA_SET_NAME, set);
    agsx_nfb_end(b);
  }
}

/* An element of sandbox ADDR's SET (NEWSETELEM, or DELSETELEM when TTL_S < 0). */
static void set_elem(struct agsx_nfb *b, const char *set, const void *key, size_t klen,
                     int64_t ttl_s, const char *comment) {
  agsx_nfb_begin(b, ttl_s < 0 ? NFT_MSG_DELSETELEM : NFT_MSG_NEWSETELEM,
                 ttl_s < 0 ? 0 : NLM_F_CREATE);
  agsx_nfb_attr_str(b, NFTA_SET_ELEM_LIST_TABLE, TABLE_NAME);
  agsx_nfb_attr_str(b, NFTA_SET_ELEM_LIST_SET, set);
  agsx_nfb_nest(b, NFTA_SET_ELEM_LIST_ELEMENTS);
  agsx_nfb_nest(b, NFTA_LIST_ELEM);
  data_value(b, NFTA_SET_ELEM_KEY, key, klen);
  if (ttl_s >= 0) {
    attr_be64(b, NFTA_SET_ELEM_TIMEOUT, (uint64_t)ttl_s * 1000);
    /* The comment as nft(8) stores it (libnftnl's user data: type 0, the
     * length, the text with its NUL), so that `nft list` and
     * agsx_egress_learnt_list read it back. */
    size_t n = comment ? strnlen(comment, 127) : 0;
    unsigned char ud[2 + 128];
    ud[0] = 0; /* NFTNL_UDATA_SET_ELEM_COMMENT */
    ud[1] = (unsigned char)(n + 1);
    if (n)
      memcpy(ud + 2, comment, n);
    ud[2 + n] = '\0';
    if (n)
      agsx_nfb_attr(b, NFTA_SET_ELEM_USERDATA, ud, n + 3);
  }
  agsx_nfb_nest_end(b);
  agsx_nfb_nest_end(b);
  agsx_nfb_end(b);
}

void agsx_egress_nl_learn(struct agsx_nfb *b, uint32_t sandbox, enum agsx_egress_set set,
                          uint32_t addr, uint16_t port, int64_t ttl_s, const char *comment) {
  /* A plain add (no NLM_F_EXCL): Linux 6.10 and later refresh an existing
   * element's timeout this way (before, it keeps its first expiry). */
  char name[16];
  uint32_t key[2];
  agsx_egress_set_name(sandbox, set, name);
  size_t klen = set_key(set, addr, port, key);
  set_elem(b, name, key, klen, ttl_s, comment);
  if (set == AGSX_EGRESS_SET_DENIED) {
    /* A denied address lives exactly as long as said, on every kernel (the
     * relay's closing counts on it): made, removed and made anew in the
     * same transaction. It is not counted in xcount: a sandbox's denials
     * must not depend on what other sandboxes learnt (egress.h). */
    set_elem(b, name, key, klen, -1, NULL);
    set_elem(b, name, key, klen, ttl_s, comment);
    return;
  }
  /* The host's count, for as long (egress.h): sandbox . address . port. */
  uint32_t all[3] = {htonl(sandbox), htonl(addr), 0};
  uint16_t p = htons(set == AGSX_EGRESS_SET_PORTS ? port : 0);
  memcpy(&all[2], &p, 2);
  set_elem(b, "xcount", all, sizeof(all), ttl_s, NULL);
}

/* ---- vpc members' security-group chains --------------------------------------------------- */

/* `ip saddr CIDR` (OFF 12) or `ip daddr CIDR` (OFF 16) */
static void ip_in(struct agsx_nfb *b, uint32_t off, const struct agsx_cidr *c) {
  is_ipv4(b);
  payload(b, NFT_PAYLOAD_NETWORK_HEADER, off, 4, NFT_REG_1);
  uint32_t net = htonl(c->addr & agsx_cidr_mask(c->prefix));
  if (c->prefix < 32) {
    uint32_t mask = htonl(agsx_cidr_mask(c->prefix)), zero = 0;
    bitwise(b, &mask, &zero, 4);
  }
  cmp(b, NFT_CMP_EQ, &net, 4);
}

/* `iifname NAME` (KEY NFT_META_IIFNAME) or `oifname NAME` */
static void ifname_is(struct agsx_nfb *b, uint32_t key, const char *name) {
  char v[16] = {0};
  memcpy(v, name, strnlen(name, 15));
  meta(b, key, NFT_REG_1);
  cmp(b, NFT_CMP_EQ, v, sizeof(v));
}

/* The match of security-group rule R (network.c's rule_match, as
 * expressions). */
static void sg_match(struct agsx_nfb *b, const struct agsx_sg_rule *r) {
  uint32_t off = r->in ? 12 : 16;
  if (r->peer.prefix != 0)
    ip_in(b, off, &r->peer);
  else if (r->allow && !r->in) { /* `ip daddr != @private`: the default peer out */
    is_ipv4(b);
    payload(b, NFT_PAYLOAD_NETWORK_HEADER, off, 4, NFT_REG_1);
    expr_begin(b, "lookup");
    agsx_nfb_attr_str(b, NFTA_LOOKUP_SET, "private");
    attr_be32(b, NFTA_LOOKUP_SREG, NFT_REG_1);
    attr_be32(b, NFTA_LOOKUP_FLAGS, NFT_LOOKUP_F_INV);
    expr_end(b);
  }
  switch (r->proto) {
  case AGSX_SG_TCP:
  case AGSX_SG_UDP:
    l4proto(b, r->proto);
    if (r->port_lo) {
      payload(b, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2, NFT_REG_1);
      uint16_t lo = htons(r->port_lo), hi = htons(r->port_hi ? r->port_hi : r->port_lo);
      if (lo == hi)
        cmp(b, NFT_CMP_EQ, &lo, 2);
      else {
        expr_begin(b, "range");
        attr_be32(b, NFTA_RANGE_SREG, NFT_REG_1);
        attr_be32(b, NFTA_RANGE_OP, NFT_RANGE_EQ);
        data_value(b, NFTA_RANGE_FROM_DATA, &lo, 2);
        data_value(b, NFTA_RANGE_TO_DATA, &hi, 2);
        expr_end(b);
      }
    }
    break;
  case AGSX_SG_ICMP: l4proto(b, IPPROTO_ICMP); break;
  default: is_ipv4(b); break;
  }
}

/* The chain's last rule: `drop comment "agsx:end"` (the comment as nft(8)
 * stores it, so that the checks and `nft list` read it). */
static void end_rule(struct agsx_nfb *b, const char *chain) {
  marked_rule(b, chain, "agsx:end", NF_DROP, NULL);
}

static void sg_chain(struct agsx_nfb *b, const char *chain, bool in, const char *bridge,
                     const struct agsx_cidr *subnet, const struct agsx_sg_rule *const sets[2],
                     const size_t counts[2]) {
  chain_msg(b, NFT_MSG_NEWCHAIN, NLM_F_CREATE, chain);
  flush_chain(b, chain);                 /* a chain a crashed sandbox with this address left */
  for (int pass = 0; pass < 2; pass++) { /* denials first */
    bool allow = pass == 1;
    for (int s = 0; s < 2; s++)
      for (size_t i = 0; i < counts[s]; i++) {
        const struct agsx_sg_rule *r = &sets[s][i];
        if (r->allow != allow || r->in != in)
          continue;
        rule_begin(b, chain);
        sg_match(b, r);
        verdict(b, !allow ? NF_DROP : in ? NF_ACCEPT : NFT_RETURN, NULL);
        rule_end(b);
      }
  }
  /* The vpc's default: its members reach each other. */
  rule_begin(b, chain);
  ifname_is(b, in ? NFT_META_IIFNAME : NFT_META_OIFNAME, bridge);
  ip_in(b, in ? 12 : 16, subnet);
  verdict(b, in ? NF_ACCEPT : NFT_RETURN, NULL);
  rule_end(b);
  end_rule(b, chain);
}

static void member_elem(struct agsx_nfb *b, bool add, const char *map, const char *bridge,
                        uint32_t addr, const char *chain) {
  agsx_nfb_begin(b, add ? NFT_MSG_NEWSETELEM : NFT_MSG_DELSETELEM, add ? NLM_F_CREATE : 0);
  agsx_nfb_attr_str(b, NFTA_SET_ELEM_LIST_TABLE, TABLE_NAME);
  agsx_nfb_attr_str(b, NFTA_SET_ELEM_LIST_SET, map);
  agsx_nfb_nest(b, NFTA_SET_ELEM_LIST_ELEMENTS);
  agsx_nfb_nest(b, NFTA_LIST_ELEM);
  /* ifname . ipv4_addr: 16 bytes of name, zero-padded, then the address */
  unsigned char key[20] = {0};
  memcpy(key, bridge, strnlen(bridge, 15));
  uint32_t be = htonl(addr);
  memcpy(key + 16, &be, 4);
  data_value(b, NFTA_SET_ELEM_KEY, key, sizeof(key));
  if (add && chain)
    data_verdict(b, NFTA_SET_ELEM_DATA, NFT_JUMP, chain);
  agsx_nfb_nest_end(b);
  agsx_nfb_nest_end(b);
  agsx_nfb_end(b);
}

void agsx_vpc_nl_member(struct agsx_nfb *b, const char *bridge, const struct agsx_cidr *subnet,
                        uint32_t addr, const struct agsx_sg_rule *const sets[2],
                        const size_t counts[2]) {
  char e[16], i[16];
  snprintf(e, sizeof(e), "e_%08x", addr);
  snprintf(i, sizeof(i), "i_%08x", addr);
  sg_chain(b, e, false, bridge, subnet, sets, counts);
  sg_chain(b, i, true, bridge, subnet, sets, counts);
  member_elem(b, true, "egress", bridge, addr, e);
  member_elem(b, true, "ingress", bridge, addr, i);
  /* The forward chain drops a vpc address without its chains by this
   * set: Linux 6.1 refuses an inverted lookup in the map itself. */
  member_elem(b, true, "members", bridge, addr, NULL);
}

void agsx_vpc_nl_member_delete(struct agsx_nfb *b, const char *bridge, uint32_t addr) {
  char e[16], i[16];
  snprintf(e, sizeof(e), "e_%08x", addr);
  snprintf(i, sizeof(i), "i_%08x", addr);
  /* (added first: a member an older agsx started has no element there,
   * and one missing element would fail the whole batch) */
  member_elem(b, true, "members", bridge, addr, NULL);
  member_elem(b, false, "members", bridge, addr, NULL);
  member_elem(b, false, "egress", bridge, addr, NULL);
  member_elem(b, false, "ingress", bridge, addr, NULL);
  chain_msg(b, NFT_MSG_DELCHAIN, 0, e);
  chain_msg(b, NFT_MSG_DELCHAIN, 0, i);
}

/* ---- targeted looks --------------------------------------------------------------------------- */

#include <sys/time.h>

int agsx_nfq_open(agsx_error_t *err) {
  int fd = agsx_host_socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (fd < 0)
    return agsx_error_set(err, errno, "nftables: netlink socket");
  int one = 1;
  setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof(one));
  /* The kernel answers in the sender's call; a bound, not a wait. */
  struct timeval tv = {.tv_sec = 2};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

/* What a look at one rule found: does its user data carry comment MARK? */
static bool rule_marked(const struct nlmsghdr *h, const char *mark) {
  size_t off = NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(struct nfgenmsg));
  size_t mlen = strlen(mark) + 1;
  while (off + NLA_HDRLEN <= h->nlmsg_len) {
    const struct nlattr *a = (const struct nlattr *)((const char *)h + off);
    if (a->nla_len < NLA_HDRLEN || off + a->nla_len > h->nlmsg_len)
      return false;
    if ((a->nla_type & NLA_TYPE_MASK) == NFTA_RULE_USERDATA) {
      /* libnftnl's user data: type, length, value; the comment is type 0. */
      const unsigned char *u = (const unsigned char *)a + NLA_HDRLEN;
      size_t n = a->nla_len - NLA_HDRLEN;
      for (size_t i = 0; i + 2 <= n && i + 2 + u[i + 1] <= n; i += 2 + u[i + 1])
        if (u[i] == 0 && u[i + 1] == mlen && memcmp(u + i + 2, mark, mlen) == 0)
          return true;
      return false;
    }
    off += NLA_ALIGN(a->nla_len);
  }
  return false;
}

/* Sends request B (one message, no batch) on FD and reads its answers:
 * with DUMP, until its end. *RET_MARKED (may be NULL): does the last rule
 * answered carry comment MARK (with ANY: does any)?
 * 1: answered with objects (or a dump's end), 0: ENOENT, -1: error. */
static int ask(int fd, struct agsx_nfb *b, bool dump, const char *mark, bool any, bool *ret_marked,
               agsx_error_t *err) {
  struct nlmsghdr *q = (struct nlmsghdr *)(b->buf + b->msg);
  uint32_t seq = q->nlmsg_seq;
  struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
  ssize_t n;
  do
    n = sendto(fd, b->buf + b->msg, q->nlmsg_len, 0, (struct sockaddr *)&sa, sizeof(sa));
  while (n < 0 && errno == EINTR);
  if (n != (ssize_t)q->nlmsg_len)
    return agsx_error_set(err, n < 0 ? errno : EMSGSIZE, "nftables: send a look"), -1;
  union {
    char b[32768];
    struct nlmsghdr align;
  } u;
  for (;;) {
    do
      n = recv(fd, u.b, sizeof(u.b), 0);
    while (n < 0 && errno == EINTR);
    if (n < 0)
      return agsx_error_set(err, errno == EAGAIN ? ETIMEDOUT : errno, "nftables: read a look"), -1;
    for (size_t off = 0; off + NLMSG_HDRLEN <= (size_t)n;) {
      const struct nlmsghdr *h = (const struct nlmsghdr *)(u.b + off);
      if (h->nlmsg_len < NLMSG_HDRLEN || off + h->nlmsg_len > (size_t)n)
        break;
      off += NLMSG_ALIGN(h->nlmsg_len);
      if (h->nlmsg_seq != seq)
        continue; /* (an earlier look's late answer) */
      if (h->nlmsg_type == NLMSG_ERROR && h->nlmsg_len >= NLMSG_LENGTH(sizeof(int))) {
        int e = -*(const int *)NLMSG_DATA(h);
        if (e == 0)
          return 1;
        if (e == ENOENT)
          return 0;
        return agsx_error_set(err, e, "nftables"), -1;
      }
      if (h->nlmsg_type == NLMSG_DONE)
        return 1;
      if (ret_marked) /* (the last rule's, or with ANY: any rule's) */
        *ret_marked = (any && *ret_marked) || rule_marked(h, mark);
      if (!dump)
        return 1;
    }
  }
}

int agsx_nfq_table(int fd, agsx_error_t *err) {
  struct agsx_nfb b;
  agsx_nfb_init(&b);
  agsx_nfb_begin(&b, NFT_MSG_GETTABLE, 0);
  agsx_nfb_attr_str(&b, NFTA_TABLE_NAME, TABLE_NAME);
  agsx_nfb_end(&b);
  int r = ask(fd, &b, false, NULL, false, NULL, err);
  agsx_nfb_clear(&b);
  return r;
}

int agsx_nfq_elem(int fd, const char *set, const void *key, size_t n, agsx_error_t *err) {
  struct agsx_nfb b;
  agsx_nfb_init(&b);
  agsx_nfb_begin(&b, NFT_MSG_GETSETELEM, 0);
  agsx_nfb_attr_str(&b, NFTA_SET_ELEM_LIST_TABLE, TABLE_NAME);
  agsx_nfb_attr_str(&b, NFTA_SET_ELEM_LIST_SET, set);
  agsx_nfb_nest(&b, NFTA_SET_ELEM_LIST_ELEMENTS);
  agsx_nfb_nest(&b, NFTA_LIST_ELEM);
  data_value(&b, NFTA_SET_ELEM_KEY, key, n);
  agsx_nfb_nest_end(&b);
  agsx_nfb_nest_end(&b);
  agsx_nfb_end(&b);
  int r = ask(fd, &b, false, NULL, false, NULL, err);
  agsx_nfb_clear(&b);
  return r;
}

int agsx_nfq_object(int fd, bool set, const char *name, agsx_error_t *err) {
  struct agsx_nfb b;
  agsx_nfb_init(&b);
  agsx_nfb_begin(&b, set ? NFT_MSG_GETSET : NFT_MSG_GETCHAIN, 0);
  agsx_nfb_attr_str(&b, set ? NFTA_SET_TABLE : NFTA_CHAIN_TABLE, TABLE_NAME);
  agsx_nfb_attr_str(&b, set ? NFTA_SET_NAME : NFTA_CHAIN_NAME, name);
  agsx_nfb_end(&b);
  int r = ask(fd, &b, false, NULL, false, NULL, err);
  agsx_nfb_clear(&b);
  return r;
}

static int chain_marked(int fd, const char *chain, const char *mark, bool any, agsx_error_t *err) {
  struct agsx_nfb b;
  agsx_nfb_init(&b);
  /* A dump filtered by table and chain: the kernel looks the chain up by
   * name and lists its rules only. */
  agsx_nfb_begin(&b, NFT_MSG_GETRULE, NLM_F_DUMP);
  agsx_nfb_attr_str(&b, NFTA_RULE_TABLE, TABLE_NAME);
  agsx_nfb_attr_str(&b, NFTA_RULE_CHAIN, chain);
  agsx_nfb_end(&b);
  bool marked = false;
  int r = ask(fd, &b, true, mark, any, &marked, err);
  agsx_nfb_clear(&b);
  return r < 0 ? -1 : r == 1 && marked;
}

int agsx_nfq_chain_marked(int fd, const char *chain, const char *mark, agsx_error_t *err) {
  return chain_marked(fd, chain, mark, false, err);
}

int agsx_nfq_chain_has(int fd, const char *chain, const char *mark, agsx_error_t *err) {
  return chain_marked(fd, chain, mark, true, err);
}
