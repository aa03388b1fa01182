/* agsx — conntrack entries, dumped and deleted over ctnetlink. See
 * conntrack.h. Plain netlink: two message types, a few attributes. */
#include "config.h"

#include "net/conntrack.h"
#include "net/usernet.h"

#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <linux/netlink.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#define CT_MAX_CUT 65536 /* entries deleted in one call at most */

static const struct nlattr *nla_next(const char *p, size_t *off, size_t end) {
  if (*off + NLA_HDRLEN > end)
    return NULL;
  const struct nlattr *a = (const struct nlattr *)(p + *off);
  if (a->nla_len < NLA_HDRLEN || *off + a->nla_len > end)
    return NULL;
  *off += NLA_ALIGN(a->nla_len);
  return a;
}

#define NLA_DATA(a) ((const char *)(a) + NLA_HDRLEN)
#define NLA_LEN(a) ((size_t)(a)->nla_len - NLA_HDRLEN)

/* The original tuple of one dumped entry: its flow, and the attribute
 * itself (copied into the delete request). */
static bool parse_orig(const struct nlmsghdr *h, struct agsx_ct_flow *f,
                       const struct nlattr **ret) {
  const char *p = (const char *)h;
  size_t off = NLMSG_LENGTH(sizeof(struct nfgenmsg)), end = h->nlmsg_len;
  const struct nlattr *a;
  memset(f, 0, sizeof(*f));
  while ((a = nla_next(p, &off, end))) {
    if ((a->nla_type & NLA_TYPE_MASK) != CTA_TUPLE_ORIG)
      continue;
    *ret = a;
    const char *t = NLA_DATA(a);
    size_t o = 0, tend = NLA_LEN(a);
    const struct nlattr *b;
    bool have_ip = false;
    while ((b = nla_next(t, &o, tend))) {
      const char *q = NLA_DATA(b);
      size_t qo = 0, qend = NLA_LEN(b);
      const struct nlattr *c;
      int type = b->nla_type & NLA_TYPE_MASK;
      while ((type == CTA_TUPLE_IP || type == CTA_TUPLE_PROTO) && (c = nla_next(q, &qo, qend))) {
        int ct = c->nla_type & NLA_TYPE_MASK;
        if (type == CTA_TUPLE_IP && ct == CTA_IP_V4_SRC && NLA_LEN(c) == 4) {
          f->src = ntohl(*(const uint32_t *)NLA_DATA(c));
          have_ip = true;
        } else if (type == CTA_TUPLE_IP && ct == CTA_IP_V4_DST && NLA_LEN(c) == 4) {
          f->dst = ntohl(*(const uint32_t *)NLA_DATA(c));
        } else if (type == CTA_TUPLE_PROTO && ct == CTA_PROTO_NUM && NLA_LEN(c) >= 1) {
          f->proto = *(const uint8_t *)NLA_DATA(c);
        } else if (type == CTA_TUPLE_PROTO && ct == CTA_PROTO_SRC_PORT && NLA_LEN(c) == 2) {
          f->sport = ntohs(*(const uint16_t *)NLA_DATA(c));
        } else if (type == CTA_TUPLE_PROTO && ct == CTA_PROTO_DST_PORT && NLA_LEN(c) == 2) {
          f->dport = ntohs(*(const uint16_t *)NLA_DATA(c));
        }
      }
    }
    return have_ip;
  }
  return false;
}

static int ct_request(int fd, uint16_t type, uint16_t flags, const void *attr, size_t alen,
                      uint32_t seq) {
  char buf[1024];
  if (NLMSG_LENGTH(sizeof(struct nfgenmsg)) + alen > sizeof(buf))
    return -1;
  memset(buf, 0, sizeof(buf));
  struct nlmsghdr *h = (struct nlmsghdr *)buf;
  h->nlmsg_len = (uint32_t)(NLMSG_LENGTH(sizeof(struct nfgenmsg)) + alen);
  h->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | type;
  h->nlmsg_flags = NLM_F_REQUEST | flags;
  h->nlmsg_seq = seq;
  struct nfgenmsg *g = NLMSG_DATA(h);
  g->nfgen_family = AF_INET;
  g->version = NFNETLINK_V0;
  if (alen)
    memcpy(buf + NLMSG_LENGTH(sizeof(struct nfgenmsg)), attr, alen);
  return send(fd, buf, h->nlmsg_len, 0) < 0 ? -1 : 0;
}

struct victims {
  char *attrs; /* the CTA_TUPLE_ORIG attributes, back to back */
  size_t len, n;
};

/* Reads the dump, keeping the tuples to delete. */
static int read_dump(int fd, uint32_t addr, bool by_dst,
                     bool (*keep)(void *, const struct agsx_ct_flow *), void *data,
                     struct victims *v, agsx_error_t *err) {
  static char buf[65536];
  for (;;) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 5000) <= 0)
      return agsx_error_set(err, ETIMEDOUT, "conntrack: list the connections");
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0)
      return agsx_error_set(err, errno, "conntrack: list the connections");
    for (size_t off = 0; off + sizeof(struct nlmsghdr) <= (size_t)n;) {
      const struct nlmsghdr *h = (const struct nlmsghdr *)(buf + off);
      if (h->nlmsg_len < sizeof(*h) || off + h->nlmsg_len > (size_t)n)
        break;
      off += NLMSG_ALIGN(h->nlmsg_len);
      if (h->nlmsg_type == NLMSG_DONE)
        return 0;
      if (h->nlmsg_type == NLMSG_ERROR) {
        int e = -((const struct nlmsgerr *)NLMSG_DATA(h))->error;
        if (e == 0)
          continue;
        return agsx_error_set(err, e, "conntrack: list the connections");
      }
      struct agsx_ct_flow f;
      const struct nlattr *orig = NULL;
      if (!parse_orig(h, &f, &orig) || (by_dst ? f.dst : f.src) != addr || v->n >= CT_MAX_CUT)
        continue;
      if (keep && keep(data, &f))
        continue;
      size_t al = NLA_ALIGN(orig->nla_len);
      v->attrs = xrealloc(v->attrs, v->len + al);
      memcpy(v->attrs + v->len, orig, orig->nla_len);
      memset(v->attrs + v->len + orig->nla_len, 0, al - orig->nla_len);
      v->len += al;
      v->n++;
    }
  }
}

int agsx_conntrack_cut(uint32_t addr, bool by_dst,
                       bool (*keep)(void *data, const struct agsx_ct_flow *f), void *data,
                       size_t *ret_cut, agsx_error_t *err) {
  if (ret_cut)
    *ret_cut = 0;
  _cleanup_close_ int fd = agsx_host_socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (fd < 0)
    return agsx_error_set(err, errno, "conntrack: netlink socket");
  struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
  if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
    return agsx_error_set(err, errno, "conntrack: bind");
  struct victims v = {0};
  if (ct_request(fd, IPCTNL_MSG_CT_GET, NLM_F_DUMP, NULL, 0, 1) < 0) {
    int e = errno;
    return agsx_error_set(err, e, "conntrack: list the connections");
  }
  int r = read_dump(fd, addr, by_dst, keep, data, &v, err);
  size_t cut = 0;
  for (size_t off = 0; r == 0 && off < v.len;) {
    const struct nlattr *a = (const struct nlattr *)(v.attrs + off);
    size_t al = NLA_ALIGN(a->nla_len);
    /* Without an ack: an entry that ended meanwhile (ENOENT) is no matter. */
    if (ct_request(fd, IPCTNL_MSG_CT_DELETE, 0, a, al, (uint32_t)(2 + cut)) == 0)
      cut++;
    off += al;
  }
  free(v.attrs);
  if (ret_cut)
    *ret_cut = cut;
  return r;
}
