/* agsx — the DNS relay's egress filter. See dnsfilter.h. */
#include "config.h"

#include "net/dnsfilter.h"
#include "net/usernet.h"
#include "net/egress_nl.h"
#include "net/nft.h"
#include "util/conf.h"
#include "util/json.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netlink.h>
#include <netinet/ip.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>

/* ---- DNS messages --------------------------------------------------------------------------- */

static uint16_t be16(const unsigned char *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int agsx_dns_question(const unsigned char *msg, size_t len, char *name, uint16_t *ret_type,
                      size_t *ret_end) {
  if (len < 12 || be16(msg + 4) != 1)
    return -1;
  char raw[AGSX_EGRESS_NAME_MAX + 2];
  size_t off = 12, n = 0;
  for (;;) {
    if (off >= len)
      return -1;
    unsigned l = msg[off++];
    if (l == 0)
      break;
    if (l > 63 || off + l > len || n + l + 1 > AGSX_EGRESS_NAME_MAX + 1)
      return -1; /* (compression has no place in a question) */
    if (n)
      raw[n++] = '.';
    memcpy(raw + n, msg + off, l);
    n += l;
    off += l;
  }
  if (off + 4 > len || agsx_egress_name_canon(raw, n, name) < 0)
    return -1;
  *ret_type = be16(msg + off);
  *ret_end = off + 4;
  return 0;
}

/* Reads the (possibly compressed) name at *OFF into BUF (AGSX_EGRESS_NAME_MAX
 * + 1) in canonical form, or "" when it is none a rule can match (too long,
 * odd bytes); *OFF moves past it. -1 if malformed. Pointers must point
 * back, and a name has at most 128 labels and pointers: no loop, however
 * the message is made. */
static int read_name(const unsigned char *msg, size_t len, size_t *off, char *buf) {
  char raw[AGSX_EGRESS_NAME_MAX + 2];
  size_t pos = *off, n = 0;
  bool jumped = false, ok = true;
  for (int steps = 0;; steps++) {
    if (pos >= len || steps > 128)
      return -1;
    unsigned l = msg[pos];
    if ((l & 0xc0) == 0xc0) {
      if (pos + 2 > len)
        return -1;
      size_t to = (size_t)(l & 0x3f) << 8 | msg[pos + 1];
      if (to >= pos)
        return -1;
      if (!jumped)
        *off = pos + 2;
      jumped = true;
      pos = to;
      continue;
    }
    if (l > 63 || pos + 1 + l > len)
      return -1;
    if (l == 0)
      break;
    if (n + l + 1 > AGSX_EGRESS_NAME_MAX + 1 || memchr(msg + pos + 1, '.', l))
      ok = false;
    else {
      if (n)
        raw[n++] = '.';
      memcpy(raw + n, msg + pos + 1, l);
      n += l;
    }
    pos += 1 + l;
  }
  if (!jumped)
    *off = pos + 1;
  if (!ok || agsx_egress_name_canon(raw, n, buf) < 0)
    buf[0] = '\0';
  return 0;
}

/* One resource record at *OFF: its owner (read_name's form), type, class,
 * TTL and data; *OFF moves past it. */
struct rr {
  char owner[AGSX_EGRESS_NAME_MAX + 1];
  uint16_t type, class;
  uint32_t ttl;
  size_t ttl_off, data, dlen;
};

static int read_rr(const unsigned char *msg, size_t len, size_t *off, struct rr *r) {
  if (read_name(msg, len, off, r->owner) < 0 || *off + 10 > len)
    return -1;
  r->type = be16(msg + *off);
  r->class = be16(msg + *off + 2);
  r->ttl_off = *off + 4;
  r->ttl = be32(msg + *off + 4);
  r->dlen = be16(msg + *off + 8);
  r->data = *off + 10;
  if (r->data + r->dlen > len)
    return -1;
  *off = r->data + r->dlen;
  return 0;
}

#define TYPE_A 1
#define TYPE_CNAME 5
#define CLASS_IN 1

/* The CNAME of NAME in the answer section (AN records from START) into
 * TARGET: 1, or 0 when there is none. -1 if malformed, with two, or with
 * a target that is no name a rule can match. */
static int cname_of(const unsigned char *msg, size_t len, size_t start, unsigned an,
                    const char *name, char *target) {
  int found = 0;
  struct rr r;
  for (unsigned i = 0; i < an; i++) {
    if (read_rr(msg, len, &start, &r) < 0)
      return -1;
    if (r.type != TYPE_CNAME || r.class != CLASS_IN || strcmp(r.owner, name) != 0)
      continue;
    size_t t = r.data;
    if (found || read_name(msg, len, &t, target) < 0 || t != r.data + r.dlen || !target[0])
      return -1;
    found = 1;
  }
  return found;
}

static bool in_chain(const struct agsx_dns_chain *c, const char *name) {
  for (size_t i = 0; name[0] && i < c->n; i++)
    if (strcmp(c->names[i], name) == 0)
      return true;
  return false;
}

int agsx_dns_answer_chain(const unsigned char *msg, size_t len, struct agsx_dns_chain *c,
                          void (*fn)(void *data, uint32_t addr, uint32_t ttl), void *data) {
  uint16_t type;
  size_t start;
  c->n = 0;
  if (agsx_dns_question(msg, len, c->names[0], &type, &start) < 0)
    return -1;
  c->n = 1;
  unsigned an = be16(msg + 6);
  for (;;) {
    char target[AGSX_EGRESS_NAME_MAX + 1];
    int r = cname_of(msg, len, start, an, c->names[c->n - 1], target);
    if (r < 0)
      return -1;
    if (r == 0)
      break;
    if (in_chain(c, target) || c->n == AGSX_DNS_CHAIN_MAX)
      return -1; /* a loop, or longer than a client follows */
    snprintf(c->names[c->n++], sizeof(c->names[0]), "%s", target);
  }
  size_t off = start;
  struct rr r;
  for (unsigned i = 0; i < an; i++) {
    if (read_rr(msg, len, &off, &r) < 0)
      return -1;
    if (r.type == TYPE_A && r.class == CLASS_IN && r.dlen == 4 && in_chain(c, r.owner))
      fn(data, be32(msg + r.data), r.ttl);
  }
  return 0;
}

int agsx_dns_cap_ttl(unsigned char *msg, size_t len, uint32_t max) {
  char name[AGSX_EGRESS_NAME_MAX + 1];
  uint16_t type;
  size_t off;
  if (agsx_dns_question(msg, len, name, &type, &off) < 0)
    return -1;
  unsigned an = be16(msg + 6);
  struct rr r;
  for (unsigned i = 0; i < an; i++) {
    if (read_rr(msg, len, &off, &r) < 0)
      return -1;
    if (r.ttl > max) {
      uint32_t t = htonl(max);
      memcpy(msg + r.ttl_off, &t, 4);
    }
  }
  return 0;
}

/* Rewrites MSG into a reply with RCODE carrying the question only. */
static size_t make_reply(unsigned char *msg, size_t qend, unsigned rcode) {
  msg[2] = (unsigned char)(0x80 | (msg[2] & 0x79)); /* QR, the opcode and RD kept */
  msg[3] = (unsigned char)(0x80 | rcode);           /* RA */
  memset(msg + 6, 0, 6);                            /* no answer, authority, additional */
  return qend;
}

/* ---- the filter ----------------------------------------------------------------------------- */

#define CACHE_MAX 4096
/* Addresses of one answer looked at: the rest of an allowed name's stay
 * closed; a denied name's close the sandbox (egress.h). */
#define ADDRS_MAX 256
#define RESOLVE_TRIES 3       /* sends of one query for a denied name, a second apart */
#define RESOLVE_WAIT_MS 1000  /* for the first answers, at the start */
#define RESOLVE_RETRY_MS 2000 /* the next round, after one unanswered or unrecorded */
/* A denied name's addresses outlive their TTL by this much: time to look
 * the name up again (two rounds) before the sandbox has to be closed. */
#define DENY_GRACE_S 10

struct learnt {
  uint32_t addr;
  uint16_t port; /* 0: every port */
  uint8_t set;   /* enum agsx_egress_set */
  int64_t until_ms;
};

enum log_kind { LOG_DNS, LOG_CONNECTION, LOG_LIMIT, LOG_CLOSED };

/* Why a denied name's addresses are not recorded (the sandbox closed). */
enum closed_why { WHY_NONE, WHY_UNRESOLVED, WHY_LIMIT, WHY_ERROR };
static const char *const why_names[] = {"", "unresolved", "limit", "error"};

struct log_entry {
  enum log_kind kind;
  char what[AGSX_EGRESS_NAME_MAX + 1]; /* the name, or the address */
  uint16_t port, type;                 /* port (connections), query type */
  uint8_t proto;
  uint8_t why;         /* enum closed_why (LOG_CLOSED) */
  int64_t first, last; /* wall clock, s */
  uint64_t count;
};

/* A denied name the relay resolves itself, so that its addresses are
 * closed before the sandbox looks it up, or without it ever doing so. */
struct denied {
  char name[AGSX_EGRESS_NAME_MAX + 1];
  uint16_t id; /* of the query out (the same for a round's tries), while WAITING */
  bool waiting;
  int tries;
  int64_t due_ms;      /* the next send */
  int64_t ok_until_ms; /* its addresses are recorded until then (0: not yet) */
  uint8_t why;         /* enum closed_why: why the last round recorded nothing */
  bool logged;         /* the sandbox's closing for it is in the log */
};

struct agsx_dns_filter {
  struct agsx_egress e;
  uint32_t addr;
  bool has_subnet;
  struct agsx_cidr subnet;
  char *dir_path; /* STATE/ID, or NULL */
  int dirfd, lockfd;
  dev_t rules_dev;
  ino_t rules_ino;
  struct timespec rules_mtime;
  int64_t ttl_min, ttl_max;
  struct learnt *cache;
  size_t ncache;
  struct log_entry *log;
  size_t nlog;
  uint64_t log_evicted;
  bool dirty;
  int64_t flushed_ms;
  int nflog;
  bool active; /* it had rules: nflog bound */
  struct agsx_dns_filter_stats st;
  /* the denied names it resolves, on a socket of its own to UPSTREAM */
  struct denied *denied;
  size_t ndenied;
  struct sockaddr_storage upstream;
  bool has_upstream;
  int rfd;
  /* whether its chain is closed (egress.h), as last written (-1: not
   * known, after a reload or a failed write), the next try of a failed
   * write, and how long a denied chain's addresses that went unrecorded
   * keep it closed */
  int closed;
  int64_t closed_retry_ms;
  int64_t broken_until_ms;
  /* one answer's addresses, while it is looked at */
  struct agsx_nfb batch;
  struct {
    uint32_t addr, ttl;
  } addrs[ADDRS_MAX];
  size_t naddrs;
  bool addrs_over; /* it had more than ADDRS_MAX */
  int64_t now_ms;
};

static int64_t mono_ms(void) { return agsx_mono_ns() / 1000000; }
static void denied_reload(struct agsx_dns_filter *f);
static void closed_sync(struct agsx_dns_filter *f);

static int64_t conf_secs(const char *key, const char *env, int64_t def) {
  _cleanup_free_ char *v = NULL;
  agsx_error_t err = NULL;
  uint64_t s;
  if (agsx_conf_get(key, env, &v, &err) < 0 || v == NULL || agsx_parse_duration(v, &s, &err) < 0) {
    if (err)
      agsx_warn("%s: %s (using %llds)", key, err->msg, (long long)def);
    agsx_error_free(&err);
    return def;
  }
  return (int64_t)s;
}

/* Binds a free nflog group for the refused connections: the kernel says
 * EBUSY for one bound already (another sandbox's), so try a few. */
static int nflog_send(int fd, uint16_t group, uint8_t cmd, bool mode) {
  struct {
    struct nlmsghdr h;
    struct nfgenmsg g;
    char attrs[64];
  } m;
  memset(&m, 0, sizeof(m));
  m.h.nlmsg_type = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_CONFIG;
  m.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  m.g.nfgen_family = AF_UNSPEC;
  m.g.version = NFNETLINK_V0;
  m.g.res_id = htons(group);
  struct nlattr *a = (struct nlattr *)m.attrs;
  size_t alen;
  if (!mode) {
    a->nla_type = NFULA_CFG_CMD;
    a->nla_len = NLA_HDRLEN + sizeof(struct nfulnl_msg_config_cmd);
    ((struct nfulnl_msg_config_cmd *)((char *)a + NLA_HDRLEN))->command = cmd;
  } else {
    a->nla_type = NFULA_CFG_MODE;
    a->nla_len = NLA_HDRLEN + sizeof(struct nfulnl_msg_config_mode);
    struct nfulnl_msg_config_mode *md = (void *)((char *)a + NLA_HDRLEN);
    md->copy_range = htonl(64);
    md->copy_mode = NFULNL_COPY_PACKET;
    /* Each packet at once (the default batches 100 or waits 1 s). */
    struct nlattr *q = (struct nlattr *)(m.attrs + NLA_ALIGN(a->nla_len));
    q->nla_type = NFULA_CFG_QTHRESH;
    q->nla_len = NLA_HDRLEN + 4;
    uint32_t one = htonl(1);
    memcpy((char *)q + NLA_HDRLEN, &one, 4);
  }
  alen = NLA_ALIGN(a->nla_len);
  if (mode)
    alen += NLA_ALIGN(NLA_HDRLEN + 4);
  m.h.nlmsg_len = (uint32_t)(NLMSG_LENGTH(sizeof(m.g)) + alen);
  if (send(fd, &m, m.h.nlmsg_len, 0) < 0)
    return -errno;
  struct pollfd p = {.fd = fd, .events = POLLIN};
  if (poll(&p, 1, 1000) <= 0)
    return -ETIMEDOUT;
  union {
    char b[512];
    struct nlmsghdr h;
  } r;
  ssize_t n = recv(fd, r.b, sizeof(r.b), MSG_DONTWAIT);
  if (n < (ssize_t)NLMSG_LENGTH(sizeof(struct nlmsgerr)) || r.h.nlmsg_type != NLMSG_ERROR)
    return -EPROTO;
  return ((struct nlmsgerr *)NLMSG_DATA(&r.h))->error;
}

int agsx_dns_filter_nflog_open(int *ret_group) {
  *ret_group = -1;
  int fd = agsx_host_socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_NETFILTER);
  if (fd < 0)
    return -1;
  struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
  if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
    close(fd);
    return -1;
  }
  for (int i = 0; i < 16; i++) {
    uint16_t g;
    if (getrandom(&g, sizeof(g), 0) != sizeof(g))
      break;
    g = (uint16_t)(0x4000 | (g & 0x3fff));
    int r = nflog_send(fd, g, NFULNL_CFG_CMD_BIND, false);
    if (r == -EBUSY || r == -EEXIST)
      continue;
    if (r < 0 || nflog_send(fd, g, 0, true) < 0)
      break;
    *ret_group = g;
    return fd;
  }
  close(fd);
  return -1;
}

/* The first rules (at the start, or by an update): the refusing chain
 * logs to an nflog group of ours from now on. */
static int activate(struct agsx_dns_filter *f, agsx_error_t *err) {
  if (f->active)
    return 0;
  f->active = true;
  f->nflog = agsx_dns_filter_nflog_open(&f->st.log_group);
  if (f->nflog < 0) {
    agsx_warn("egress: refused connections are not logged (no free nflog group)");
    return 0;
  }
  struct agsx_nfb b;
  agsx_nfb_init(&b);
  agsx_egress_nl_log(&b, f->addr, f->st.log_group);
  int r = agsx_nfb_run(&b, err);
  agsx_nfb_clear(&b);
  return r;
}

struct agsx_dns_filter *agsx_dns_filter_new(const struct agsx_egress *e, uint32_t addr,
                                            const struct agsx_cidr *subnet, const char *state_dir,
                                            const char *id, int nflog, int log_group,
                                            agsx_error_t *err) {
  struct agsx_dns_filter *f = xzalloc(sizeof(*f));
  if (e && e->n) {
    f->e.rules = xmalloc(e->n * sizeof(*e->rules));
    memcpy(f->e.rules, e->rules, e->n * sizeof(*e->rules));
    f->e.n = e->n;
  }
  f->addr = addr;
  if (subnet) {
    f->has_subnet = true;
    f->subnet = *subnet;
  }
  f->dirfd = f->lockfd = f->nflog = f->rfd = -1;
  if (state_dir && id)
    f->dir_path = xasprintf("%s/%s", state_dir, id);
  f->ttl_min = conf_secs("egress-ttl-min", "AGSX_EGRESS_TTL_MIN", AGSX_EGRESS_TTL_MIN);
  f->ttl_max = conf_secs("egress-ttl-max", "AGSX_EGRESS_TTL_MAX", AGSX_EGRESS_TTL_MAX);
  if (f->ttl_max < f->ttl_min)
    f->ttl_max = f->ttl_min;
  f->flushed_ms = mono_ms();
  f->st.log_group = -1;
  if (nflog >= 0 && log_group >= 0) { /* made with the chain already */
    f->nflog = nflog;
    f->st.log_group = log_group;
    f->active = true;
  } else if (nflog >= 0) {
    close(nflog);
  }
  if (f->e.n && activate(f, err) < 0) {
    agsx_dns_filter_free(f);
    return NULL;
  }
  denied_reload(f);
  /* As the start made it (agsx_net_egress_add): closed with a denied name. */
  f->closed = agsx_egress_has_exact_deny(&f->e) ? 1 : 0;
  return f;
}

static void log_flush(struct agsx_dns_filter *f);

void agsx_dns_filter_free(struct agsx_dns_filter *f) {
  if (f == NULL)
    return;
  if (f->dirty)
    log_flush(f);
  agsx_egress_clear(&f->e);
  free(f->dir_path);
  free(f->cache);
  free(f->log);
  agsx_nfb_clear(&f->batch);
  agsx_closep(&f->dirfd);
  agsx_closep(&f->lockfd);
  agsx_closep(&f->nflog);
  agsx_closep(&f->rfd);
  free(f->denied);
  free(f);
}

void agsx_dns_filter_stats(const struct agsx_dns_filter *f, struct agsx_dns_filter_stats *ret) {
  *ret = f->st;
}

/* STATE/ID, once it exists (the record is written after the start). */
static int state_dir(struct agsx_dns_filter *f) {
  if (f->dirfd < 0 && f->dir_path)
    f->dirfd = open(f->dir_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  return f->dirfd;
}

/* Takes the rules lock (shared) and reloads the rules if an update changed
 * them. Returns the lock fd to unlock, or -1 (no state: no updates). */
static int rules_lock(struct agsx_dns_filter *f) {
  int dir = state_dir(f);
  if (dir < 0)
    return -1;
  if (f->lockfd < 0) {
    f->lockfd = openat(dir, "egress.lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (f->lockfd < 0)
      return -1;
  }
  if (flock(f->lockfd, LOCK_SH) < 0)
    return -1;
  struct stat st;
  if (fstatat(dir, "egress.json", &st, AT_SYMLINK_NOFOLLOW) < 0)
    return f->lockfd;
  if (st.st_ino == f->rules_ino && st.st_dev == f->rules_dev &&
      st.st_mtim.tv_sec == f->rules_mtime.tv_sec && st.st_mtim.tv_nsec == f->rules_mtime.tv_nsec)
    return f->lockfd;
  _cleanup_free_ char *buf = NULL;
  size_t len;
  struct agsx_egress e;
  agsx_error_t err = NULL;
  if (agsx_read_file_at(dir, "egress.json", 1 << 20, &buf, &len, &err) < 0 ||
      agsx_egress_from_json(buf, len, &e, &err) < 0) {
    agsx_warn("sandbox egress rules: %s (keeping the previous ones)", err->msg);
    agsx_error_free(&err);
    return f->lockfd;
  }
  agsx_egress_clear(&f->e);
  f->e = e;
  f->ncache = 0; /* the update may have removed addresses */
  denied_reload(f);
  f->closed = -1; /* (the update set it, or failed to) */
  if (e.n && activate(f, &err) < 0) {
    agsx_warn("egress: %s", err->msg);
    agsx_error_free(&err);
  }
  f->rules_ino = st.st_ino;
  f->rules_dev = st.st_dev;
  f->rules_mtime = st.st_mtim;
  return f->lockfd;
}

static void rules_unlock(int fd) {
  if (fd >= 0)
    flock(fd, LOCK_UN);
}

/* ---- the blocked log ---- */

static void log_add_why(struct agsx_dns_filter *f, enum log_kind kind, const char *what,
                        uint16_t type, uint16_t port, uint8_t proto, uint8_t why) {
  int64_t now = agsx_now_ns() / 1000000000LL;
  struct log_entry *e = NULL;
  for (size_t i = 0; i < f->nlog && e == NULL; i++) {
    struct log_entry *x = &f->log[i];
    if (x->kind == kind && x->port == port && x->proto == proto && x->type == type &&
        x->why == why && strcmp(x->what, what) == 0)
      e = x;
  }
  if (e == NULL && f->nlog < AGSX_EGRESS_LOG_MAX) {
    f->log = xrealloc(f->log, (f->nlog + 1) * sizeof(*f->log));
    e = &f->log[f->nlog++];
    memset(e, 0, sizeof(*e));
  } else if (e == NULL) { /* full: the least recently seen goes */
    e = &f->log[0];
    for (size_t i = 1; i < f->nlog; i++)
      if (f->log[i].last < e->last)
        e = &f->log[i];
    memset(e, 0, sizeof(*e));
    f->log_evicted++;
  }
  if (e->count == 0) {
    e->kind = kind;
    snprintf(e->what, sizeof(e->what), "%s", what);
    e->type = type;
    e->port = port;
    e->proto = proto;
    e->why = why;
    e->first = now;
  }
  e->last = now;
  e->count++;
  f->dirty = true;
  f->st.logged++;
}

static void log_add(struct agsx_dns_filter *f, enum log_kind kind, const char *what, uint16_t type,
                    uint16_t port, uint8_t proto) {
  log_add_why(f, kind, what, type, port, proto, WHY_NONE);
}

static const char *proto_name(uint8_t p) {
  return p == IPPROTO_TCP ? "tcp" : p == IPPROTO_UDP ? "udp" : p == IPPROTO_ICMP ? "icmp" : "ip";
}

static void log_flush(struct agsx_dns_filter *f) {
  f->flushed_ms = mono_ms();
  int dir = state_dir(f);
  if (dir < 0)
    return;
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_int(g, "evicted", (int64_t)f->log_evicted);
  agsx_json_key(g, "entries");
  yajl_gen_array_open(g);
  for (size_t i = 0; i < f->nlog; i++) {
    const struct log_entry *e = &f->log[i];
    yajl_gen_map_open(g);
    static const char *const kinds[] = {"dns", "connection", "limit", "closed"};
    agsx_json_kv_str(g, "kind", kinds[e->kind]);
    if (e->kind == LOG_CLOSED) {
      agsx_json_kv_str(g, "name", e->what);
      agsx_json_kv_str(g, "reason", why_names[e->why]);
    } else if (e->kind != LOG_CONNECTION) {
      agsx_json_kv_str(g, "name", e->what);
      agsx_json_kv_int(g, "qtype", e->type);
    } else {
      agsx_json_kv_str(g, "address", e->what);
      agsx_json_kv_str(g, "protocol", proto_name(e->proto));
      if (e->port)
        agsx_json_kv_int(g, "port", e->port);
    }
    _cleanup_free_ char *first = agsx_format_rfc3339(e->first),
                        *last = agsx_format_rfc3339(e->last);
    agsx_json_kv_str(g, "first", first);
    agsx_json_kv_str(g, "last", last);
    agsx_json_kv_int(g, "count", (int64_t)e->count);
    yajl_gen_map_close(g);
  }
  yajl_gen_array_close(g);
  yajl_gen_map_close(g);
  size_t len;
  _cleanup_free_ char *json = agsx_json_gen_steal(g, &len);
  agsx_error_t err = NULL;
  if (agsx_write_file_atomic(dir, "netlog", json, len, 0600, &err) == 0)
    f->dirty = false;
  agsx_error_free(&err);
}

/* ---- queries and answers ---- */

enum agsx_dns_verdict agsx_dns_filter_query(struct agsx_dns_filter *f, char *msg, size_t *len,
                                            size_t cap) {
  (void)cap; /* replies are never longer than the query */
  unsigned char *m = (unsigned char *)msg;
  char name[AGSX_EGRESS_NAME_MAX + 1];
  uint16_t type;
  size_t end;
  if (*len < 12 || (m[2] & 0x80))
    return AGSX_DNS_DROP; /* not a query */
  if (agsx_dns_question(m, *len, name, &type, &end) < 0 || (m[2] & 0x78) != 0) {
    f->st.refused++;
    *len = make_reply(m, 12, 1); /* FORMERR, without the question */
    m[4] = m[5] = 0;
    return AGSX_DNS_REPLY;
  }
  int lock = rules_lock(f);
  bool any;
  bool ok = agsx_egress_name_allowed(&f->e, name, &any, NULL, 0, NULL);
  rules_unlock(lock);
  if (ok)
    return AGSX_DNS_PASS;
  f->st.refused++;
  log_add(f, LOG_DNS, name, type, 0, 0);
  *len = make_reply(m, end, 5); /* REFUSED */
  return AGSX_DNS_REPLY;
}

/* Is ADDR (PORT) in SET for at least half of TTL_MS more? If not it is
 * (re)written, and remembered as good until UNTIL. */
static bool cached(struct agsx_dns_filter *f, enum agsx_egress_set set, uint32_t addr,
                   uint16_t port, int64_t ttl_ms, int64_t until) {
  for (size_t i = 0; i < f->ncache; i++)
    if (f->cache[i].addr == addr && f->cache[i].port == port && f->cache[i].set == set) {
      if (f->cache[i].until_ms - f->now_ms >= ttl_ms / 2)
        return true;
      f->cache[i].until_ms = until;
      return false;
    }
  if (f->ncache == CACHE_MAX) { /* the one expiring first goes */
    size_t k = 0;
    for (size_t i = 1; i < f->ncache; i++)
      if (f->cache[i].until_ms < f->cache[k].until_ms)
        k = i;
    f->cache[k] = f->cache[--f->ncache];
  }
  f->cache = xrealloc(f->cache, (f->ncache + 1) * sizeof(*f->cache));
  f->cache[f->ncache++] = (struct learnt){addr, port, (uint8_t)set, until};
  return false;
}

/* The element comment: the name (the update matches it against new rules);
 * nft takes at most 128 bytes, so a longer one keeps its tail after "~". */
static void comment_of(const char *name, char *buf, size_t len) {
  size_t n = strlen(name);
  if (n <= 120)
    snprintf(buf, len, "%s", name);
  else
    snprintf(buf, len, "~%s", name + n - 119);
}

static void on_a(void *data, uint32_t addr, uint32_t ttl) {
  struct agsx_dns_filter *f = data;
  if (f->naddrs < ADDRS_MAX)
    f->addrs[f->naddrs++].addr = addr, f->addrs[f->naddrs - 1].ttl = ttl;
  else
    f->addrs_over = true;
}

static int64_t bounded_ttl(const struct agsx_dns_filter *f, uint32_t ttl) {
  return (int64_t)ttl < f->ttl_min ? f->ttl_min : (int64_t)ttl > f->ttl_max ? f->ttl_max : ttl;
}

/* Adds the answer's addresses (f->addrs) to SET (on PORT), for NAME.
 * REFRESH (a denied name's own lookup): each written, whatever the cache
 * says, to last DENY_GRACE_S past its TTL. */
static void learn(struct agsx_dns_filter *f, enum agsx_egress_set set, uint16_t port,
                  const char *name, bool refresh) {
  char comment[128];
  comment_of(name, comment, sizeof(comment));
  for (size_t i = 0; i < f->naddrs; i++) {
    int64_t t = bounded_ttl(f, f->addrs[i].ttl);
    /* Due again a little before the element expires. */
    if (!cached(f, set, f->addrs[i].addr, port, t * 1000, f->now_ms + t * 1000 - 2000) || refresh)
      agsx_egress_nl_learn(&f->batch, f->addr, set, f->addrs[i].addr, port,
                           refresh ? t + DENY_GRACE_S : t, comment);
  }
}

/* What an allow-list lets the chain's addresses reach: for each name of
 * the chain it allows (the question's, and any alias's), its ports. */
static void learn_allowed(struct agsx_dns_filter *f, const struct agsx_dns_chain *c) {
  for (size_t k = 0; k < c->n; k++) {
    bool any;
    uint16_t ports[16];
    size_t np = 0;
    if (!agsx_egress_name_allowed(&f->e, c->names[k], &any, ports, 16, &np))
      continue;
    if (any)
      learn(f, AGSX_EGRESS_SET_ANY, 0, c->names[k], false);
    for (size_t i = 0; i < np; i++)
      learn(f, AGSX_EGRESS_SET_PORTS, ports[i], c->names[k], false);
  }
}

/* Sends f->batch: 0, or 1 when a bound refused an element (ENFILE: the
 * sandbox's set, or for allowed addresses the host's count, is full), or
 * -1. Either way the cache forgets, since the transaction may have
 * half-applied nothing. Allowed addresses at a bound are logged here
 * ("limit"); denied ones close the sandbox, which its callers log. */
static int batch_run(struct agsx_dns_filter *f, const char *name, uint16_t type, bool denied) {
  if (f->batch.n_msgs == 0)
    return 0;
  agsx_error_t err = NULL;
  f->st.nft_calls++;
  if (agsx_nfb_run(&f->batch, &err) == 0)
    return 0;
  int r = err->errno_ == ENFILE ? 1 : -1;
  if (r == 1) {
    f->st.limited++;
    if (!denied)
      log_add(f, LOG_LIMIT, name, type, 0, 0);
  } else {
    agsx_warn("egress: add the addresses of `%s`: %s", name, err->msg);
    f->st.nft_failed++;
  }
  agsx_error_free(&err);
  f->ncache = 0;
  return r;
}

/* The addresses of a chain through denied NAME (f->addrs) could not all be
 * recorded (WHY): the sandbox is closed for as long as they would have
 * been, and the log says why. */
static void broken(struct agsx_dns_filter *f, const char *name, uint8_t why) {
  int64_t t = f->ttl_min;
  for (size_t i = 0; i < f->naddrs; i++)
    t = bounded_ttl(f, f->addrs[i].ttl) > t ? bounded_ttl(f, f->addrs[i].ttl) : t;
  if (f->now_ms + t * 1000 > f->broken_until_ms)
    f->broken_until_ms = f->now_ms + t * 1000;
  log_add_why(f, LOG_CLOSED, name, 0, 0, 0, why);
  closed_sync(f);
}

/* Does rule set E look at names at all (an allow-list, or a denied name)? */
static bool by_name(const struct agsx_egress *e) {
  return agsx_egress_has_allow(e) || agsx_egress_has_name_deny(e);
}

enum agsx_dns_verdict agsx_dns_filter_answer(struct agsx_dns_filter *f, char *msg, size_t *len) {
  unsigned char *m = (unsigned char *)msg;
  char name[AGSX_EGRESS_NAME_MAX + 1];
  uint16_t type;
  size_t end;
  if (*len < 12 || !(m[2] & 0x80) || agsx_dns_question(m, *len, name, &type, &end) < 0)
    return AGSX_DNS_DROP;
  int lock = rules_lock(f);
  enum agsx_dns_verdict v = AGSX_DNS_PASS;
  bool any;
  f->now_ms = mono_ms();
  f->naddrs = 0;
  f->addrs_over = false;
  agsx_nfb_init(&f->batch);
  struct agsx_dns_chain c;
  const char *denied = NULL;
  /* The rules again: they may have changed since the query went out. */
  if (!agsx_egress_name_allowed(&f->e, name, &any, NULL, 0, NULL)) {
    *len = make_reply(m, end, 5);
    v = AGSX_DNS_REPLY;
  } else if (!by_name(&f->e)) {
    /* no name rules: nothing to open or close (the network's own rules apply) */
  } else if (agsx_dns_cap_ttl(m, *len, (uint32_t)f->ttl_max) < 0 ||
             agsx_dns_answer_chain(m, *len, &c, on_a, f) < 0) {
    /* (The TTLs first: a crafted answer's names may point into them, so
     * the chain is read from the bytes the client gets.) */
    *len = make_reply(m, end, 2); /* SERVFAIL: what we cannot read we do not open */
    v = AGSX_DNS_REPLY;
  } else {
    for (size_t k = 1; k < c.n && denied == NULL; k++)
      if (agsx_egress_name_denied(&f->e, c.names[k]))
        denied = c.names[k];
    if (denied) { /* an alias of a denied name: refused, and its addresses closed */
      f->st.refused++;
      log_add(f, LOG_DNS, denied, type, 0, 0);
      learn(f, AGSX_EGRESS_SET_DENIED, 0, denied, false);
      int r = batch_run(f, denied, type, true);
      if (r != 0 || f->addrs_over)
        broken(f, denied, r < 0 ? WHY_ERROR : WHY_LIMIT);
      *len = make_reply(m, end, 5);
      v = AGSX_DNS_REPLY;
    } else {
      if (agsx_egress_has_allow(&f->e))
        learn_allowed(f, &c);
      /* At a bound the answer goes out unopened (logged); on a failure a
       * SERVFAIL (the connect would fail anyway). */
      if (batch_run(f, name, type, false) < 0) {
        *len = make_reply(m, end, 2);
        v = AGSX_DNS_REPLY;
      }
    }
  }
  rules_unlock(lock);
  agsx_nfb_clear(&f->batch);
  if (v == AGSX_DNS_PASS)
    f->st.answered++;
  return v;
}

/* ---- the denied names' own lookups ---- */

/* The exact names E denies (a wildcard's names are not known ahead). What
 * was known of a name denied before (an update) is kept: its addresses
 * stay recorded. */
static void denied_reload(struct agsx_dns_filter *f) {
  struct denied *old = f->denied;
  size_t nold = f->ndenied;
  f->denied = NULL;
  f->ndenied = 0;
  int64_t now = mono_ms();
  for (size_t i = 0; i < f->e.n; i++) {
    const struct agsx_egress_rule *r = &f->e.rules[i];
    if (r->allow || r->kind != AGSX_EGRESS_NAME)
      continue;
    f->denied = xrealloc(f->denied, (f->ndenied + 1) * sizeof(*f->denied));
    struct denied *d = &f->denied[f->ndenied++];
    memset(d, 0, sizeof(*d));
    snprintf(d->name, sizeof(d->name), "%s", r->name);
    d->due_ms = now;
    for (size_t k = 0; k < nold; k++)
      if (strcmp(old[k].name, d->name) == 0)
        *d = old[k];
  }
  free(old);
}

/* An A query for D's name: a fresh id for a round's first try, the same
 * for its retries (a late answer to an earlier one counts). EDNS0 asks
 * for answers of up to 4096 bytes: one cut short (TC) records nothing. */
static void denied_send(struct agsx_dns_filter *f, struct denied *d) {
  unsigned char q[AGSX_EGRESS_NAME_MAX + 2 + 32];
  if (d->tries == 0 && getrandom(&d->id, sizeof(d->id), 0) != sizeof(d->id))
    d->id = (uint16_t)(d->id * 31 + 7);
  memset(q, 0, 12);
  q[0] = (unsigned char)(d->id >> 8), q[1] = (unsigned char)d->id;
  q[2] = 0x01; /* RD */
  q[5] = 1;
  q[11] = 1; /* the OPT record */
  size_t off = 12;
  for (const char *p = d->name; *p;) {
    size_t l = strcspn(p, ".");
    q[off++] = (unsigned char)l;
    memcpy(q + off, p, l);
    off += l;
    p += l + (p[l] == '.');
  }
  q[off++] = 0;
  q[off++] = 0, q[off++] = TYPE_A, q[off++] = 0, q[off++] = CLASS_IN;
  static const unsigned char opt[11] = {0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0};
  memcpy(q + off, opt, sizeof(opt));
  off += sizeof(opt);
  if (send(f->rfd, q, off, MSG_DONTWAIT) < 0) {
  } /* (lost: sent again) */
  d->waiting = true;
  d->tries++;
  d->due_ms = mono_ms() + 1000;
}

/* Sends what is due: the first query, a retry, or the next round. */
static void denied_tick(struct agsx_dns_filter *f) {
  if (f->ndenied == 0 || !f->has_upstream)
    return;
  if (f->rfd < 0) {
    f->rfd = socket(f->upstream.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    socklen_t sl = f->upstream.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                     : sizeof(struct sockaddr_in);
    if (f->rfd >= 0 && connect(f->rfd, (struct sockaddr *)&f->upstream, sl) < 0)
      agsx_closep(&f->rfd);
    if (f->rfd < 0) {
      agsx_warn("egress: look up the denied names: %s (the sandbox's egress stays closed)",
                strerror(errno));
      f->has_upstream = false;
      return;
    }
  }
  int64_t now = mono_ms();
  for (size_t i = 0; i < f->ndenied; i++) {
    struct denied *d = &f->denied[i];
    if (d->due_ms > now)
      continue;
    if (d->waiting && d->tries >= RESOLVE_TRIES) { /* no answer: again shortly */
      d->waiting = false;
      d->tries = 0;
      d->why = WHY_UNRESOLVED;
      d->due_ms = now + RESOLVE_RETRY_MS;
      continue;
    }
    denied_send(f, d);
  }
}

/* An answer to one of the denied names' queries: its chain's addresses
 * recorded (closed) until DENY_GRACE_S past their TTL, and the name asked
 * again before the TTL runs out. An answer that resolves nothing (not
 * NOERROR or NXDOMAIN, cut short, unreadable) is no answer. */
static void denied_answer(struct agsx_dns_filter *f, unsigned char *m, size_t len) {
  char name[AGSX_EGRESS_NAME_MAX + 1];
  uint16_t type;
  size_t end;
  if (len < 12 || !(m[2] & 0x80) || agsx_dns_question(m, len, name, &type, &end) < 0)
    return;
  struct denied *d = NULL;
  for (size_t i = 0; i < f->ndenied && d == NULL; i++)
    if (f->denied[i].waiting && f->denied[i].id == be16(m) && strcmp(f->denied[i].name, name) == 0)
      d = &f->denied[i];
  unsigned rcode = m[3] & 0x0f;
  if (d == NULL || (rcode != 0 && rcode != 3) || (m[2] & 0x02))
    return;
  struct agsx_dns_chain c;
  f->now_ms = mono_ms();
  f->naddrs = 0;
  f->addrs_over = false;
  if (agsx_dns_answer_chain(m, len, &c, on_a, f) < 0)
    return;
  d->waiting = false;
  d->tries = 0;
  if (f->naddrs == 0 && !f->addrs_over) { /* no address: nothing to close */
    d->ok_until_ms = INT64_MAX;
    d->why = WHY_NONE;
    d->logged = false;
    d->due_ms = f->now_ms + f->ttl_min * 1000;
    return;
  }
  int64_t t = f->ttl_max;
  for (size_t i = 0; i < f->naddrs; i++)
    t = bounded_ttl(f, f->addrs[i].ttl) < t ? bounded_ttl(f, f->addrs[i].ttl) : t;
  agsx_nfb_init(&f->batch);
  learn(f, AGSX_EGRESS_SET_DENIED, 0, d->name, true);
  int r = batch_run(f, d->name, TYPE_A, true);
  agsx_nfb_clear(&f->batch);
  if (r != 0 || f->addrs_over) {
    d->why = r < 0 ? WHY_ERROR : WHY_LIMIT;
    d->due_ms = f->now_ms + RESOLVE_RETRY_MS;
    return;
  }
  /* Open until a second before the first address closes; asked again
   * before its TTL runs out (halfway at the latest). */
  d->ok_until_ms = f->now_ms + (t + DENY_GRACE_S) * 1000 - 1000;
  d->why = WHY_NONE;
  d->logged = false;
  d->due_ms = f->now_ms + (t * 1000 - 2000 > t * 500 ? t * 1000 - 2000 : t * 500);
}

static void denied_read(struct agsx_dns_filter *f) {
  unsigned char buf[4096];
  for (int k = 0; k < 64; k++) {
    ssize_t n = recv(f->rfd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0)
      return;
    int lock = rules_lock(f); /* (may reload: then the answer matches nothing) */
    denied_answer(f, buf, (size_t)n);
    closed_sync(f);
    rules_unlock(lock);
  }
}

bool agsx_dns_deny_closed(const int64_t *ok_until_ms, size_t n, int64_t broken_until_ms,
                          int64_t now_ms, int64_t *ret_next_ms) {
  bool closed = now_ms < broken_until_ms;
  int64_t next = closed ? broken_until_ms : INT64_MAX;
  for (size_t i = 0; i < n; i++)
    if (now_ms >= ok_until_ms[i])
      closed = true;
    else if (ok_until_ms[i] < next)
      next = ok_until_ms[i];
  *ret_next_ms = next;
  return closed;
}

/* Is the sandbox to be closed now (*RET_NEXT: until when that holds)? */
static bool want_closed(const struct agsx_dns_filter *f, int64_t now, int64_t *ret_next) {
  int64_t until[AGSX_EGRESS_MAX_RULES];
  size_t n = 0;
  for (size_t i = 0; i < f->ndenied && n < AGSX_EGRESS_MAX_RULES; i++)
    until[n++] = f->denied[i].ok_until_ms;
  return agsx_dns_deny_closed(until, n, f->broken_until_ms, now, ret_next);
}

/* Closes or opens the sandbox's chain as it must be (egress.h: the chain
 * made anew, with or without its closing rule, from the rules this filter
 * holds under the rules lock), and logs the names it is closed for. A
 * failed write is tried again shortly; until then the chain stays as it
 * was (closed, unless a denial went away). */
static void closed_sync(struct agsx_dns_filter *f) {
  if (f->e.n == 0) { /* (no rules: no objects) */
    f->closed_retry_ms = 0;
    return;
  }
  int64_t now = mono_ms(), next;
  bool want = want_closed(f, now, &next);
  for (size_t i = 0; want && i < f->ndenied; i++) {
    struct denied *d = &f->denied[i];
    /* (not while its first round still waits: the start's wait marks what
     * it left unresolved) */
    if (now < d->ok_until_ms || d->logged || (d->why == WHY_NONE && d->ok_until_ms == 0))
      continue;
    log_add_why(f, LOG_CLOSED, d->name, 0, 0, 0, d->why ? d->why : WHY_UNRESOLVED);
    d->logged = true;
  }
  if (f->closed == (want ? 1 : 0) || now < f->closed_retry_ms)
    return;
  struct agsx_nfb b;
  agsx_nfb_init(&b);
  agsx_egress_nl_chain(&b, &f->e, f->addr, f->has_subnet ? &f->subnet : NULL, false, -1, 0, want);
  agsx_error_t err = NULL;
  f->st.nft_calls++;
  if (agsx_nfb_run(&b, &err) == 0) {
    f->closed = want ? 1 : 0;
    f->closed_retry_ms = 0;
  } else {
    if (f->closed_retry_ms == 0)
      agsx_warn("egress: %s the sandbox's egress: %s", want ? "close" : "open", err->msg);
    f->st.nft_failed++;
    f->closed = -1;
    f->closed_retry_ms = now + RESOLVE_RETRY_MS;
  }
  agsx_error_free(&err);
  agsx_nfb_clear(&b);
}

void agsx_dns_filter_set_upstream(struct agsx_dns_filter *f, const struct sockaddr_storage *ss) {
  f->upstream = *ss;
  f->has_upstream = true;
  denied_tick(f);
  /* The first answers before the sandbox's command runs (bounded): its
   * denied names are closed from its first instant, and the rest opens. */
  int64_t until = mono_ms() + RESOLVE_WAIT_MS;
  for (;;) {
    bool waiting = false;
    for (size_t i = 0; i < f->ndenied; i++)
      waiting |= f->denied[i].waiting;
    int left = (int)(until - mono_ms());
    if (!waiting || f->rfd < 0 || left <= 0)
      break;
    struct pollfd p = {.fd = f->rfd, .events = POLLIN};
    if (poll(&p, 1, left) > 0)
      denied_read(f);
  }
  for (size_t i = 0; i < f->ndenied; i++)
    if (f->denied[i].ok_until_ms == 0 && f->denied[i].why == WHY_NONE)
      f->denied[i].why = WHY_UNRESOLVED;
  closed_sync(f);
}

/* ---- nflog: refused connections ---- */

static void nflog_packet(struct agsx_dns_filter *f, const struct nlmsghdr *h) {
  size_t off = NLMSG_LENGTH(sizeof(struct nfgenmsg)), end = h->nlmsg_len;
  while (off + NLA_HDRLEN <= end) {
    const struct nlattr *a = (const struct nlattr *)((const char *)h + off);
    if (a->nla_len < NLA_HDRLEN || off + a->nla_len > end)
      return;
    if ((a->nla_type & NLA_TYPE_MASK) == NFULA_PAYLOAD) {
      const unsigned char *p = (const unsigned char *)a + NLA_HDRLEN;
      size_t n = a->nla_len - NLA_HDRLEN;
      if (n < 20 || (p[0] >> 4) != 4)
        return;
      size_t ihl = (size_t)(p[0] & 15) * 4;
      uint8_t proto = p[9];
      uint16_t port = 0;
      if ((proto == IPPROTO_TCP || proto == IPPROTO_UDP) && n >= ihl + 4)
        port = be16(p + ihl + 2);
      char ip[16];
      agsx_ipv4_format(be32(p + 16), ip);
      log_add(f, LOG_CONNECTION, ip, 0, port, proto);
      return;
    }
    off += NLA_ALIGN(a->nla_len);
  }
}

static void nflog_read(struct agsx_dns_filter *f) {
  union {
    char b[8192];
    struct nlmsghdr h;
  } u;
  for (int k = 0; k < 64; k++) {
    ssize_t n = recv(f->nflog, u.b, sizeof(u.b), MSG_DONTWAIT);
    if (n <= 0)
      return;
    for (size_t off = 0; off + sizeof(struct nlmsghdr) <= (size_t)n;) {
      const struct nlmsghdr *h = (const struct nlmsghdr *)(u.b + off);
      if (h->nlmsg_len < sizeof(*h) || off + h->nlmsg_len > (size_t)n)
        break;
      if (h->nlmsg_type == ((NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET))
        nflog_packet(f, h);
      off += NLMSG_ALIGN(h->nlmsg_len);
    }
  }
}

size_t agsx_dns_filter_nfds(const struct agsx_dns_filter *f) { return f ? 2 : 0; }

size_t agsx_dns_filter_fill(struct agsx_dns_filter *f, struct pollfd *p) {
  if (f == NULL)
    return 0;
  p[0] = (struct pollfd){.fd = f->nflog, .events = POLLIN};
  p[1] = (struct pollfd){.fd = f->rfd, .events = POLLIN};
  return 2;
}

void agsx_dns_filter_dispatch(struct agsx_dns_filter *f, const struct pollfd *p, size_t n) {
  if (f == NULL || n != 2)
    return;
  if (p[0].revents && f->nflog >= 0)
    nflog_read(f);
  if (p[1].revents && f->rfd >= 0)
    denied_read(f);
  /* (An update's new denied names are looked up at once: its transaction
   * woke the supervisor's firewall watch.) */
  int lock = rules_lock(f);
  denied_tick(f);
  closed_sync(f);
  rules_unlock(lock);
  if (f->dirty && mono_ms() - f->flushed_ms >= AGSX_DNS_FILTER_FLUSH_MS)
    log_flush(f);
}

int agsx_dns_filter_timeout_ms(const struct agsx_dns_filter *f) {
  if (f == NULL)
    return -1;
  int64_t now = mono_ms(), at = INT64_MAX;
  if (f->dirty)
    at = f->flushed_ms + AGSX_DNS_FILTER_FLUSH_MS;
  for (size_t i = 0; f->has_upstream && i < f->ndenied; i++)
    at = f->denied[i].due_ms < at ? f->denied[i].due_ms : at;
  if (f->e.n) { /* the next closing or opening by itself, or a write's retry */
    int64_t next;
    want_closed(f, now, &next);
    at = next < at ? next : at;
    at = f->closed_retry_ms && f->closed_retry_ms < at ? f->closed_retry_ms : at;
  }
  if (at == INT64_MAX)
    return -1;
  int64_t left = at - now;
  return left <= 0 ? 0 : left > INT32_MAX ? INT32_MAX : (int)left + 1;
}
