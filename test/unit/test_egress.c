/* Unit tests: egress rules (parsing, matching, the nft commands) and the
 * DNS messages of the relay's filter. */
#include "config.h"

#include "net/dnsfilter.h"
#include "net/egress.h"
#include "net/egress_nl.h"
#include "net/nft.h"
#include "tap.h"

#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void rule_ok(const char *line, const char *want) {
  struct agsx_egress_rule r;
  agsx_error_t err = NULL;
  int rc = agsx_egress_rule_parse_line(line, &r, &err);
  char *got = rc == 0 ? agsx_egress_rule_format(&r) : NULL;
  tap_ok(rc == 0 && strcmp(got, want) == 0, "rule `%s` -> `%s` (got `%s` %s)", line, want,
         got ? got : "", err ? err->msg : "");
  free(got);
  agsx_error_free(&err);
}

static void rule_bad(const char *line, const char *why) {
  struct agsx_egress_rule r;
  agsx_error_t err = NULL;
  int rc = agsx_egress_rule_parse_line(line, &r, &err);
  tap_ok(rc < 0 && err && strstr(err->msg, why), "rule `%s` refused: %s (%s)", line, why,
         err ? err->msg : "accepted");
  agsx_error_free(&err);
}

/* Walks a batch: every message and (nested) attribute within its parent. */
struct batch_count {
  bool ok;
  size_t chains, flushes, rules, elems, sets, delelems, delsets;
};

static bool attrs_ok(const char *p, size_t len, int depth) {
  for (size_t off = 0; off < len;) {
    const struct nlattr *a = (const struct nlattr *)(p + off);
    if (len - off < NLA_HDRLEN || a->nla_len < NLA_HDRLEN || a->nla_len > len - off)
      return false;
    if ((a->nla_type & NLA_F_NESTED) &&
        (depth > 8 || !attrs_ok((const char *)a + NLA_HDRLEN, a->nla_len - NLA_HDRLEN, depth + 1)))
      return false;
    off += NLA_ALIGN(a->nla_len);
  }
  return true;
}

static struct batch_count batch_walk(const struct agsx_nfb *b) {
  struct batch_count c = {.ok = true};
  size_t n = 0;
  for (size_t off = 0; off < b->len; n++) {
    const struct nlmsghdr *h = (const struct nlmsghdr *)(b->buf + off);
    size_t hl = NLMSG_LENGTH(sizeof(struct nfgenmsg));
    if (b->len - off < hl || h->nlmsg_len < hl || h->nlmsg_len > b->len - off ||
        !attrs_ok((const char *)h + hl, h->nlmsg_len - hl, 0))
      return (struct batch_count){0};
    int t = h->nlmsg_type & 0xff;
    if (off > 0 && (h->nlmsg_type >> 8) == NFNL_SUBSYS_NFTABLES) {
      c.chains += t == NFT_MSG_NEWCHAIN;
      c.flushes += t == NFT_MSG_DELRULE;
      c.rules += t == NFT_MSG_NEWRULE;
      c.elems += t == NFT_MSG_NEWSETELEM;
      c.sets += t == NFT_MSG_NEWSET;
      c.delelems += t == NFT_MSG_DELSETELEM;
      c.delsets += t == NFT_MSG_DELSET;
    }
    off += NLMSG_ALIGN(h->nlmsg_len);
  }
  c.ok = n == b->n_msgs + 1; /* and the batch's beginning (its end comes with the send) */
  return c;
}

static struct agsx_egress rules(const char *text) {
  struct agsx_egress e = {0};
  agsx_error_t err = NULL;
  if (agsx_egress_parse_file(text, strlen(text), "t", &e, &err) < 0)
    tap_ok(0, "rules parse: %s", err->msg);
  agsx_error_free(&err);
  return e;
}

static bool name_ok(const struct agsx_egress *e, const char *name, bool *any, size_t *nports) {
  uint16_t ports[16];
  return agsx_egress_name_allowed(e, name, any, ports, 16, nports);
}

/* A query for NAME (type A), as a resolver sends it. */
static size_t query(unsigned char *m, const char *name) {
  memset(m, 0, 12);
  m[0] = 0x12, m[1] = 0x34, m[2] = 0x01, m[5] = 1;
  size_t off = 12;
  for (const char *p = name; *p;) {
    size_t l = strcspn(p, ".");
    m[off++] = (unsigned char)l;
    memcpy(m + off, p, l);
    off += l;
    p += l + (p[l] == '.');
  }
  m[off++] = 0;
  m[off++] = 0, m[off++] = 1, m[off++] = 0, m[off++] = 1;
  return off;
}

static uint32_t got_addr[8], got_ttl[8];
static int got_n;
static void on_a(void *data, uint32_t addr, uint32_t ttl) {
  (void)data;
  if (got_n < 8) {
    got_addr[got_n] = addr;
    got_ttl[got_n++] = ttl;
  }
}

/* ---- answers as chains ---- */

/* An answer to QNAME (type A) under construction: records are added
 * uncompressed, or with a pointer to the question's name ("@"). */
struct ans {
  unsigned char m[2048];
  size_t n;
};

static void ans_name(struct ans *a, const char *name) {
  if (strcmp(name, "@") == 0) {
    a->m[a->n++] = 0xc0, a->m[a->n++] = 12;
    return;
  }
  for (const char *p = name; *p;) {
    size_t l = strcspn(p, ".");
    a->m[a->n++] = (unsigned char)l;
    memcpy(a->m + a->n, p, l);
    a->n += l;
    p += l + (p[l] == '.');
  }
  a->m[a->n++] = 0;
}

static void ans_begin(struct ans *a, const char *qname) {
  a->n = query(a->m, qname);
  a->m[2] = 0x81, a->m[3] = 0x80;
}

/* A record: TYPE 1 (DATA an address "a.b.c.d") or 5 (DATA a name). */
static void ans_rr(struct ans *a, const char *owner, int type, uint32_t ttl, const char *data) {
  a->m[7]++;
  ans_name(a, owner);
  unsigned char h[10] = {0,
                         (unsigned char)type,
                         0,
                         1,
                         (unsigned char)(ttl >> 24),
                         (unsigned char)(ttl >> 16),
                         (unsigned char)(ttl >> 8),
                         (unsigned char)ttl};
  memcpy(a->m + a->n, h, 10);
  size_t len_at = a->n + 8;
  a->n += 10;
  size_t start = a->n;
  if (type == 1) {
    struct in_addr in;
    inet_pton(AF_INET, data, &in);
    memcpy(a->m + a->n, &in, 4);
    a->n += 4;
  } else {
    ans_name(a, data);
  }
  a->m[len_at] = (unsigned char)((a->n - start) >> 8);
  a->m[len_at + 1] = (unsigned char)(a->n - start);
}

/* The addresses of A's chain, "a.b.c.d a.b.c.d" (or "malformed"), into BUF. */
static const char *chain_addrs(struct ans *a, struct agsx_dns_chain *c, char *buf, size_t len) {
  got_n = 0;
  if (agsx_dns_answer_chain(a->m, a->n, c, on_a, NULL) < 0)
    return "malformed";
  buf[0] = '\0';
  for (int i = 0; i < got_n; i++) {
    char ip[16];
    snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", i ? " " : "",
             agsx_ipv4_format(got_addr[i], ip));
  }
  return buf;
}

static void chain_tests(void) {
  struct ans a;
  struct agsx_dns_chain c;
  char buf[256];
  ans_begin(&a, "q.test");
  ans_rr(&a, "@", 1, 30, "198.18.0.1");
  ans_rr(&a, "other.test", 1, 30, "198.18.0.2");
  tap_is_str(chain_addrs(&a, &c, buf, sizeof(buf)), "198.18.0.1",
             "chain: an unrelated owner's A record is not the question's");
  ans_begin(&a, "q.test");
  ans_rr(&a, "@", 5, 30, "alias.test");
  ans_rr(&a, "alias.test", 5, 30, "cdn.test");
  ans_rr(&a, "cdn.test", 1, 30, "198.18.0.3");
  ans_rr(&a, "q.test", 1, 30, "198.18.0.4"); /* (beside a CNAME: still its owner's) */
  ans_rr(&a, "elsewhere.test", 1, 30, "198.18.0.5");
  tap_is_str(chain_addrs(&a, &c, buf, sizeof(buf)), "198.18.0.3 198.18.0.4",
             "chain: through two aliases, not the unrelated owner");
  tap_ok(c.n == 3 && strcmp(c.names[0], "q.test") == 0 && strcmp(c.names[1], "alias.test") == 0 &&
             strcmp(c.names[2], "cdn.test") == 0,
         "chain: the names in order");
  ans_begin(&a, "q.test");
  ans_rr(&a, "cdn.test", 1, 30, "198.18.0.3");
  ans_rr(&a, "alias.test", 5, 30, "CDN.test.");
  ans_rr(&a, "@", 5, 30, "alias.test");
  tap_is_str(chain_addrs(&a, &c, buf, sizeof(buf)), "198.18.0.3",
             "chain: records in any order, names in any case");
  ans_begin(&a, "q.test");
  ans_rr(&a, "@", 5, 30, "a.test");
  ans_rr(&a, "@", 5, 30, "b.test");
  tap_is_str(chain_addrs(&a, &c, buf, sizeof(buf)), "malformed", "chain: two CNAMEs of one name");
  ans_begin(&a, "q.test");
  ans_rr(&a, "@", 5, 30, "a.test");
  ans_rr(&a, "a.test", 5, 30, "q.test");
  tap_is_str(chain_addrs(&a, &c, buf, sizeof(buf)), "malformed", "chain: a loop");
  for (int len = AGSX_DNS_CHAIN_MAX; len <= AGSX_DNS_CHAIN_MAX + 1; len++) {
    ans_begin(&a, "n0.test");
    for (int i = 0; i + 1 < len; i++) {
      char o[16], t[16];
      snprintf(o, sizeof(o), "n%d.test", i);
      snprintf(t, sizeof(t), "n%d.test", i + 1);
      ans_rr(&a, o, 5, 30, t);
    }
    char last[16];
    snprintf(last, sizeof(last), "n%d.test", len - 1);
    ans_rr(&a, last, 1, 30, "198.18.0.9");
    tap_is_str(chain_addrs(&a, &c, buf, sizeof(buf)),
               len == AGSX_DNS_CHAIN_MAX ? "198.18.0.9" : "malformed", "chain: %d names", len);
  }
  ans_begin(&a, "q.test");
  ans_rr(&a, "@", 5, 30, "bad name.test");
  tap_is_str(chain_addrs(&a, &c, buf, sizeof(buf)), "malformed",
             "chain: an alias no rule could match");
  /* A pointer forward, and one to itself: malformed, no loop. */
  ans_begin(&a, "q.test");
  size_t at = a.n;
  ans_rr(&a, "@", 1, 30, "198.18.0.1");
  a.m[at + 1] = (unsigned char)(at + 2);
  tap_is_str(chain_addrs(&a, &c, buf, sizeof(buf)), "malformed", "chain: a pointer forward");
  a.m[at + 1] = (unsigned char)at;
  tap_is_str(chain_addrs(&a, &c, buf, sizeof(buf)), "malformed", "chain: a pointer to itself");
  /* TTLs cut to the bound in the released answer. */
  ans_begin(&a, "q.test");
  ans_rr(&a, "@", 5, 86400, "cdn.test");
  ans_rr(&a, "cdn.test", 1, 20, "198.18.0.3");
  tap_ok(agsx_dns_cap_ttl(a.m, a.n, 300) == 0 && chain_addrs(&a, &c, buf, sizeof(buf)) &&
             got_n == 1 && got_ttl[0] == 20 && memmem(a.m, a.n, "\0\0\x01\x2c", 4),
         "ttl: cut to the bound, a shorter one kept");
}

/* ---- the firewall watch: whose removals wake whom ---- */

static void del_chain(struct agsx_nfb *b, const char *name) {
  agsx_nfb_begin(b, NFT_MSG_DELCHAIN, 0);
  agsx_nfb_attr_str(b, NFTA_CHAIN_TABLE, "agsx");
  agsx_nfb_attr_str(b, NFTA_CHAIN_NAME, name);
  agsx_nfb_end(b);
}

/* The removal of a vpc member's element of map egress or ingress. */
static void del_member_elem(struct agsx_nfb *b, const char *map, uint32_t addr) {
  agsx_nfb_begin(b, NFT_MSG_DELSETELEM, 0);
  agsx_nfb_attr_str(b, NFTA_SET_ELEM_LIST_TABLE, "agsx");
  agsx_nfb_attr_str(b, NFTA_SET_ELEM_LIST_SET, map);
  agsx_nfb_nest(b, NFTA_SET_ELEM_LIST_ELEMENTS);
  agsx_nfb_nest(b, NFTA_LIST_ELEM);
  agsx_nfb_nest(b, NFTA_SET_ELEM_KEY);
  char key[20] = "agsxv-test"; /* ifname . address */
  uint32_t a = htonl(addr);
  memcpy(key + 16, &a, 4);
  agsx_nfb_attr(b, NFTA_DATA_VALUE, key, sizeof(key));
  agsx_nfb_nest_end(b);
  agsx_nfb_nest_end(b);
  agsx_nfb_nest_end(b);
  agsx_nfb_end(b);
}

/* Does SELF's watch wake on the messages in BUF? */
static bool wakes(uint32_t self, const void *buf, size_t len) {
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sp) < 0 || send(sp[1], buf, len, 0) < 0)
    return tap_ok(0, "socketpair"), true;
  bool removed = false;
  int r = agsx_nft_watch_read(sp[0], "agsx", self, &removed);
  close(sp[0]);
  close(sp[1]);
  return r < 0 || removed;
}

static void watch_tests(void) {
  uint32_t self = 0xc6130005, other = 0xc6130006;
  struct agsx_nfb b;
  agsx_nfb_init(&b);
  agsx_egress_nl_delete(&b, other, AGSX_EGRESS_OBJ_ALL);
  agsx_egress_nl_flush_set(&b, other, AGSX_EGRESS_SET_PORTS);
  tap_ok(!wakes(self, b.buf, b.len),
         "watch: another sandbox's egress chains and sets going: no alarm");
  agsx_nfb_clear(&b);
  agsx_nfb_init(&b);
  agsx_egress_nl_delete(&b, self, AGSX_EGRESS_OBJ_ALL);
  tap_ok(wakes(self, b.buf, b.len), "watch: its own egress objects going: alarm");
  agsx_nfb_clear(&b);
  agsx_nfb_init(&b);
  agsx_egress_nl_delete(&b, self, AGSX_EGRESS_OBJ_SET << AGSX_EGRESS_SET_DENIED);
  tap_ok(wakes(self, b.buf, b.len), "watch: its own deny set going: alarm");
  agsx_nfb_clear(&b);
  agsx_nfb_init(&b);
  agsx_egress_nl_flush_set(&b, self, AGSX_EGRESS_SET_ANY);
  tap_ok(!wakes(self, b.buf, b.len), "watch: its learnt addresses emptied (an update): no alarm");
  agsx_nfb_clear(&b);
#define AGAIN() (agsx_nfb_clear(&b), agsx_nfb_init(&b))
  AGAIN();
  del_member_elem(&b, "egress", other);
  del_member_elem(&b, "ingress", other);
  del_chain(&b, "e_c6130006");
  del_chain(&b, "i_c6130006");
  tap_ok(!wakes(self, b.buf, b.len),
         "watch: another vpc member's chains and map elements: no alarm");
  tap_ok(wakes(other, b.buf, b.len), "watch: that member's own: alarm");
  AGAIN();
  del_member_elem(&b, "egress", self);
  tap_ok(wakes(self, b.buf, b.len), "watch: its own egress map element: alarm");
  AGAIN();
  del_chain(&b, "i_c6130005");
  tap_ok(wakes(self, b.buf, b.len), "watch: its own ingress chain: alarm");
  AGAIN();
  del_chain(&b, "forward");
  tap_ok(wakes(self, b.buf, b.len), "watch: a base chain: alarm");
  AGAIN();
  del_chain(&b, "e_c613000g");
  tap_ok(wakes(self, b.buf, b.len), "watch: a chain like a member's but not one: alarm");
  agsx_nfb_clear(&b);
#undef AGAIN
}

int main(void) {
  rule_ok("allow pypi.org", "allow pypi.org");
  rule_ok("allow  PyPI.Org.", "allow pypi.org");
  rule_ok("allow *.githubusercontent.com", "allow *.githubusercontent.com");
  rule_ok("allow api.example.com:443", "allow api.example.com:443");
  rule_ok("allow 198.19.20.0/24", "allow 198.19.20.0/24");
  rule_ok("allow 198.18.0.0/15:80", "allow 198.18.0.0/15:80");
  rule_ok("allow 198.18.0.7", "allow 198.18.0.7/32");
  rule_ok("deny 198.18.0.0/16:22", "deny 198.18.0.0/16:22");
  rule_ok("deny *.ads.example", "deny *.ads.example");
  rule_bad("permit x.org", "allow or deny");
  rule_bad("allow a*.b", "wildcard only as a leading");
  rule_bad("allow *", "invalid egress rule");
  rule_bad("allow x.org:0", "1-65535");
  rule_bad("allow x.org:65536", "1-65535");
  rule_bad("allow x..org", "a name");
  rule_bad("allow 198.18.0.1/24", "198.18.0.0/24");
  rule_bad("deny x.org:443", "takes no port");
  rule_bad("allow -", "a name");

  struct agsx_egress e = rules("# comment\nallow pypi.org\nallow *.gh.io\nallow api.x.com:443\n"
                               "allow api.x.com:8443\ndeny bad.gh.io\nallow 198.19.20.0/24\n"
                               "deny 198.19.20.9\nallow 198.18.0.0/15:80\n");
  bool any = false, denied = false;
  size_t np = 0;
  tap_ok(e.n == 8 && agsx_egress_has_allow(&e), "rules file: 8 rules, an allow-list");
  tap_ok(name_ok(&e, "pypi.org", &any, &np) && any && np == 0, "a name: every port");
  tap_ok(!name_ok(&e, "www.pypi.org", &any, &np), "a name does not cover its subdomains");
  tap_ok(name_ok(&e, "a.gh.io", &any, &np) && name_ok(&e, "a.b.gh.io", &any, &np),
         "a wildcard: subdomains at any depth");
  tap_ok(!name_ok(&e, "gh.io", &any, &np), "a wildcard: not the apex");
  tap_ok(!name_ok(&e, "xgh.io", &any, &np), "a wildcard: a label boundary");
  tap_ok(!name_ok(&e, "bad.gh.io", &any, &np), "deny wins over a wildcard");
  tap_ok(name_ok(&e, "api.x.com", &any, &np) && !any && np == 2, "ports: only those");
  tap_ok(!name_ok(&e, "example.com", &any, &np), "anything else: refused");
  tap_ok(agsx_egress_cidr_allowed(&e, 0xc6131405, 0, &denied) && !denied, "cidr allow");
  tap_ok(!agsx_egress_cidr_allowed(&e, 0xc6131409, 0, &denied) && denied, "cidr deny wins");
  tap_ok(agsx_egress_cidr_allowed(&e, 0xc6120001, 80, &denied) &&
             !agsx_egress_cidr_allowed(&e, 0xc6120001, 443, &denied),
         "cidr with a port");
  struct agsx_nfb nb;
  agsx_nfb_init(&nb);
  agsx_egress_nl_chain(&nb, &e, 0xc6130005, NULL, true, 20, 100, false);
  struct batch_count c = batch_walk(&nb);
  /* x, flush x, xl, flush xl, log, 2 rejects, its 3 sets and the host's
   * count, deny 198.19.20.9, the deny set, ct, 4 DNS, allowed CIDRs
   * (198.19.20.0/24, 198.18.0.0/15:80 tcp and udp), 3 learnt, the final
   * goto, the xmap element */
  tap_ok(c.ok && c.chains == 2 && c.flushes == 2 && c.rules == 17 && c.elems == 1 && c.sets == 4 &&
             nb.n_msgs == 26 && !memmem(nb.buf, nb.len, AGSX_EGRESS_CLOSED_MARK, 11),
         "nl: a well-formed batch: 2 chains, 2 flushes, 4 sets, 17 rules, the hook, open (%d %zu "
         "%zu %zu %zu %zu %zu)",
         c.ok, c.chains, c.flushes, c.sets, c.rules, c.elems, nb.n_msgs);
  tap_ok(memmem(nb.buf, nb.len, "xl_c6130005", 12) && memmem(nb.buf, nb.len, "xa_c6130005", 12) &&
             memmem(nb.buf, nb.len, "xp_c6130005", 12) &&
             memmem(nb.buf, nb.len, "xd_c6130005", 12) && memmem(nb.buf, nb.len, "xcount", 7) &&
             memmem(nb.buf, nb.len, "reject", 7) && memmem(nb.buf, nb.len, "log", 4),
         "nl: the refusing chain, the sandbox's own sets, the host's count, the log");
  agsx_nfb_clear(&nb);
  agsx_nfb_init(&nb);
  agsx_egress_nl_chain(&nb, &e, 0xc6130005, NULL, false, -1, 0, false);
  c = batch_walk(&nb);
  tap_ok(c.ok && c.flushes == 1 && c.rules == 14 && c.sets == 0,
         "nl: a live update keeps the refusing chain and the sets");
  agsx_nfb_clear(&nb);
  agsx_nfb_init(&nb);
  agsx_egress_nl_chain(&nb, &e, 0xc6130005, NULL, false, -1, 0, true);
  c = batch_walk(&nb);
  tap_ok(c.ok && c.flushes == 1 && c.rules == 15 && c.sets == 0 && c.elems == 1 &&
             memmem(nb.buf, nb.len, AGSX_EGRESS_CLOSED_MARK, 12),
         "nl: closed: one more rule, marked (a rule: no set's bound can refuse it)");
  agsx_nfb_clear(&nb);
  agsx_nfb_init(&nb);
  agsx_egress_nl_delete(&nb, 0xc6130005, AGSX_EGRESS_OBJ_ALL);
  c = batch_walk(&nb);
  tap_ok(c.ok && nb.n_msgs == 6 && c.elems == 0 && c.delelems == 1 && c.delsets == 3,
         "nl: the end: the hook, 2 chains, 3 whole sets, no element one by one (%zu %zu %zu)",
         nb.n_msgs, c.delelems, c.delsets);
  agsx_nfb_clear(&nb);
  agsx_nfb_init(&nb);
  agsx_egress_nl_learn(&nb, 0xc6130005, AGSX_EGRESS_SET_PORTS, 0xc612000a, 443, 60, "a.test");
  c = batch_walk(&nb);
  tap_ok(c.ok && c.elems == 2 && memmem(nb.buf, nb.len, "xp_c6130005", 12) &&
             memmem(nb.buf, nb.len, "xcount", 7) && memmem(nb.buf, nb.len, "a.test", 7),
         "nl: a learnt address: its set and the host's count");
  agsx_nfb_clear(&nb);
  agsx_nfb_init(&nb);
  agsx_egress_nl_learn(&nb, 0xc6130005, AGSX_EGRESS_SET_DENIED, 0xc612000b, 0, 70, "d.test");
  c = batch_walk(&nb);
  tap_ok(c.ok && c.elems == 2 && c.delelems == 1 && memmem(nb.buf, nb.len, "xd_c6130005", 12) &&
             !memmem(nb.buf, nb.len, "xcount", 6) && memmem(nb.buf, nb.len, "d.test", 7),
         "nl: a denied address: made anew in its own set (its timeout exact), not counted in "
         "the host's count (%zu %zu)",
         c.elems, c.delelems);
  agsx_nfb_clear(&nb);
  {
    /* When the relay closes the sandbox: a denied name not recorded (yet,
     * or any more), a denied chain unrecorded for a while. */
    int64_t next, none[1] = {0};
    int64_t ok[3] = {5000, INT64_MAX, 9000};
    tap_ok(!agsx_dns_deny_closed(ok, 3, 0, 1000, &next) && next == 5000,
           "closed: every denied name recorded: open until the first runs out (%lld)",
           (long long)next);
    tap_ok(agsx_dns_deny_closed(ok, 3, 0, 5000, &next) && next == 9000,
           "closed: at a name's end (no new answer): closed");
    tap_ok(agsx_dns_deny_closed(none, 1, 0, 1000, &next) && next == INT64_MAX,
           "closed: a name never resolved: closed, with nothing to wait for");
    tap_ok(agsx_dns_deny_closed(ok, 3, 3000, 1000, &next) && next == 3000 &&
               !agsx_dns_deny_closed(ok, 3, 3000, 3000, &next),
           "closed: a denied chain unrecorded: until its time");
    tap_ok(!agsx_dns_deny_closed(NULL, 0, 0, 1000, &next) && next == INT64_MAX,
           "closed: no denied name: open");
  }
  agsx_nfb_init(&nb);
  tap_ok(agsx_nfb_run(&nb, NULL) == 0, "nl: an empty batch sends nothing");
  agsx_nfb_clear(&nb);
  {
    /* A vpc member's chains: the vpc's rules and its own. */
    struct agsx_sg_rule vpc[3], own[1];
    bool parsed = agsx_sg_rule_parse("out udp/53", false, &vpc[0], NULL) == 0 &&
                  agsx_sg_rule_parse("out tcp/80 198.18.0.0/24", true, &vpc[1], NULL) == 0 &&
                  agsx_sg_rule_parse("in tcp/22", true, &vpc[2], NULL) == 0 &&
                  agsx_sg_rule_parse("in tcp/8000-8080 198.18.0.0/16", true, &own[0], NULL) == 0;
    const struct agsx_sg_rule *sets[2] = {vpc, own};
    const size_t counts[2] = {3, 1};
    struct agsx_cidr sub = {0xc6131400, 24};
    agsx_nfb_init(&nb);
    agsx_vpc_nl_member(&nb, "agsxv0123456789", &sub, 0xc6131405, sets, counts);
    c = batch_walk(&nb);
    /* e: the denial, the allowance, the vpc default, the end; i: two
     * allowances, the default, the end; the two map elements and the
     * members set's (the forward chain's `!= @members`: Linux 6.1) */
    tap_ok(parsed && c.ok && c.chains == 2 && c.flushes == 2 && c.rules == 8 && c.elems == 3 &&
               nb.n_msgs == 15 && memmem(nb.buf, nb.len, "members", 8) &&
               memmem(nb.buf, nb.len, "e_c6131405", 11) &&
               memmem(nb.buf, nb.len, "i_c6131405", 11) && memmem(nb.buf, nb.len, "agsx:end", 9) &&
               memmem(nb.buf, nb.len, "range", 6),
           "nl: a vpc member's chains (%d %zu %zu %zu %zu %zu)", c.ok, c.chains, c.flushes, c.rules,
           c.elems, nb.n_msgs);
    agsx_nfb_clear(&nb);
    agsx_nfb_init(&nb);
    agsx_vpc_nl_member_delete(&nb, "agsxv0123456789", 0xc6131405);
    c = batch_walk(&nb);
    /* (members' element is added before its removal: a member an older
     * agsx started has none) */
    tap_ok(c.ok && nb.n_msgs == 6 && c.rules == 0 && c.elems == 1 &&
               memmem(nb.buf, nb.len, "members", 8),
           "nl: a vpc member's removal: 3 elements, 2 chains (%d %zu %zu %zu)", c.ok, nb.n_msgs,
           c.rules, c.elems);
    agsx_nfb_clear(&nb);
  }
  char *json = agsx_egress_to_json(&e);
  struct agsx_egress back;
  tap_ok(agsx_egress_from_json(json, strlen(json), &back, NULL) == 0 && back.n == e.n,
         "json round trip");
  free(json);
  agsx_egress_clear(&back);
  agsx_egress_clear(&e);

  struct agsx_egress deny_only = rules("deny evil.example\ndeny 198.18.0.0/24\n");
  tap_ok(name_ok(&deny_only, "pypi.org", &any, &np) && any, "deny-only: other names resolve");
  tap_ok(!name_ok(&deny_only, "evil.example", &any, &np), "deny-only: the denied name not");
  tap_ok(agsx_egress_name_denied(&deny_only, "evil.example") &&
             !agsx_egress_name_denied(&deny_only, "pypi.org") &&
             agsx_egress_has_name_deny(&deny_only) && agsx_egress_has_exact_deny(&deny_only),
         "deny-only: the denied name is told apart");
  agsx_egress_clear(&deny_only);
  struct agsx_egress wild = rules("deny *.evil.example\nallow pypi.org\ndeny 198.18.0.0/24\n");
  tap_ok(agsx_egress_has_name_deny(&wild) && !agsx_egress_has_exact_deny(&wild),
         "a denied wildcard is no name to look up (nothing to wait for)");
  agsx_egress_clear(&wild);

  unsigned char m[512];
  char name[AGSX_EGRESS_NAME_MAX + 1];
  uint16_t type;
  size_t end, n = query(m, "Files.PyPI.org");
  tap_ok(agsx_dns_question(m, n, name, &type, &end) == 0 && strcmp(name, "files.pypi.org") == 0 &&
             type == 1 && end == n,
         "question: canonical name, type A");
  m[5] = 2;
  tap_ok(agsx_dns_question(m, n, name, &type, &end) < 0, "question: two questions refused");
  m[5] = 1;
  tap_ok(agsx_dns_question(m, n - 1, name, &type, &end) < 0, "question: truncated refused");
  /* An answer: a CNAME then two A records, compressed names. */
  unsigned char a[512];
  memcpy(a, m, n);
  a[2] = 0x81, a[3] = 0x80, a[7] = 3;
  size_t off = n;
  static const unsigned char cname[] = {0xc0, 0x0c, 0, 5, 0, 1,   0,    0,
                                        0,    30,   0, 4, 1, 'x', 0xc0, 0x12};
  memcpy(a + off, cname, sizeof(cname));
  off += sizeof(cname);
  for (int i = 0; i < 2; i++) {
    static const unsigned char rr[] = {0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 1, 0, 0, 4, 198, 18, 0};
    memcpy(a + off, rr, sizeof(rr));
    off += sizeof(rr);
    a[off++] = (unsigned char)(10 + i);
  }
  struct agsx_dns_chain ch;
  int rc = agsx_dns_answer_chain(a, off, &ch, on_a, NULL);
  tap_ok(rc == 0 && got_n == 2 && got_addr[0] == 0xc612000a && got_addr[1] == 0xc612000b &&
             got_ttl[0] == 256 && ch.n == 2 && strcmp(ch.names[1], "x.pypi.org") == 0,
         "answers: a compressed CNAME, the A records of the chain (%d, %zu)", got_n, ch.n);
  got_n = 0;
  tap_ok(agsx_dns_answer_chain(a, off - 3, &ch, on_a, NULL) < 0,
         "answers: a cut record is malformed");
  chain_tests();
  watch_tests();
  return tap_done();
}
