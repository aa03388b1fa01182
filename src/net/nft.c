/* agsx — nftables through a dlopen()ed libnftables. */
#include "config.h"

#include "net/nft.h"
#include "net/usernet.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <string.h>

/* The few entry points used, with the types of <nftables/libnftables.h>
 * (a stable ABI: libnftables.so.1). Process-wide but load-once: set by the
 * first successful agsx_nft_load and read-only after, so nothing in it goes
 * stale in a long-lived process (a threaded server loads it at start-up). */
struct nft_ctx;
#define NFT_CTX_DEFAULT 0
static struct {
  void *dl;
  struct nft_ctx *(*ctx_new)(uint32_t flags);
  void (*ctx_free)(struct nft_ctx *ctx);
  int (*buffer_output)(struct nft_ctx *ctx);
  int (*buffer_error)(struct nft_ctx *ctx);
  const char *(*get_output)(struct nft_ctx *ctx);
  const char *(*get_error)(struct nft_ctx *ctx);
  int (*run_cmd)(struct nft_ctx *nft, const char *buf);
  void (*output_set_flags)(struct nft_ctx *ctx, unsigned int flags);
} lib;
#define NFT_CTX_OUTPUT_JSON (1 << 4)

int agsx_nft_load(agsx_error_t *err) {
  if (lib.dl)
    return 0;
  void *dl = dlopen("libnftables.so.1", RTLD_NOW | RTLD_LOCAL);
  if (dl == NULL)
    return agsx_error_set(
        err, 0, "this network needs libnftables (apt-get install libnftables1): %s", dlerror());
  struct {
    const char *name;
    void **fn;
  } syms[] = {
      {"nft_ctx_new", (void **)&lib.ctx_new},
      {"nft_ctx_free", (void **)&lib.ctx_free},
      {"nft_ctx_buffer_output", (void **)&lib.buffer_output},
      {"nft_ctx_buffer_error", (void **)&lib.buffer_error},
      {"nft_ctx_get_output_buffer", (void **)&lib.get_output},
      {"nft_ctx_get_error_buffer", (void **)&lib.get_error},
      {"nft_run_cmd_from_buffer", (void **)&lib.run_cmd},
      {"nft_ctx_output_set_flags", (void **)&lib.output_set_flags},
  };
  for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
    *syms[i].fn = dlsym(dl, syms[i].name);
    if (*syms[i].fn == NULL) {
      dlclose(dl);
      return agsx_error_set(err, 0, "libnftables lacks %s", syms[i].name);
    }
  }
  lib.dl = dl;
  return 0;
}

/* The first line of nft's error text, without the "Error: " prefix. */
static char *first_error(const char *e) {
  if (e == NULL || *e == '\0')
    return xstrdup("unknown error");
  const char *p = strstr(e, "Error: ");
  p = p ? p + 7 : e;
  return xstrndup(p, strcspn(p, "\n"));
}

static int run(const char *cmds, bool json, char **ret_out, agsx_error_t *err) {
  if (ret_out)
    *ret_out = NULL;
  if (agsx_nft_load(err) < 0)
    return -1;
  struct nft_ctx *ctx = lib.ctx_new(NFT_CTX_DEFAULT);
  if (ctx == NULL)
    return agsx_error_set(err, ENOMEM, "nftables context");
  if (json)
    lib.output_set_flags(ctx, NFT_CTX_OUTPUT_JSON);
  lib.buffer_output(ctx);
  lib.buffer_error(ctx);
  int r = lib.run_cmd(ctx, cmds);
  if (r != 0) {
    _cleanup_free_ char *e = first_error(lib.get_error(ctx));
    agsx_error_set(err, 0, "nftables: %s", e);
  } else if (ret_out) {
    const char *o = lib.get_output(ctx);
    *ret_out = xstrdup(o ? o : "");
  }
  lib.ctx_free(ctx);
  return r != 0 ? -1 : 0;
}

/* libnftables opens its own socket: the whole run happens on the host
 * side (net/usernet.h). */
struct run_args {
  const char *cmds;
  bool json;
  char **ret_out;
  agsx_error_t *err;
};
static int do_run(void *p) {
  struct run_args *a = p;
  return run(a->cmds, a->json, a->ret_out, a->err);
}

static int host_run(const char *cmds, bool json, char **ret_out, agsx_error_t *err) {
  if (ret_out)
    *ret_out = NULL;
  struct run_args a = {cmds, json, ret_out, err};
  errno = 0;
  int r = agsx_hostnet_call(do_run, &a);
  if (r < 0 && errno == ENETDOWN && (err == NULL || *err == NULL))
    return agsx_error_set(err, ENETDOWN, "nftables: the user-mode network is not running");
  return r;
}

int agsx_nft_run(const char *cmds, char **ret_out, agsx_error_t *err) {
  return host_run(cmds, false, ret_out, err);
}

int agsx_nft_run_json(const char *cmds, char **ret_out, agsx_error_t *err) {
  return host_run(cmds, true, ret_out, err);
}

/* ---- changes to the ruleset ------------------------------------------------------------------- */

/* Plain netlink, not libnftables: this is a multicast listener, and it
 * only reads each message's type and table name. */
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <sys/socket.h>

/* A socket filter that lets through only what may be a removal: every
 * supervisor listens, so without it each start of a vpc or allow-listed
 * sandbox (its chains and rules made: additions only) woke every supervisor
 * on the host, an O(sandboxes) cost in CPU and in the starter's commit. The
 * kernel coalesces a commit's notifications into one buffer of several
 * messages: the filter walks them (unrolled: classic BPF has no loops) and
 * accepts the buffer when any message is a removal of nf_tables (the types
 * removes_from() reads), is not of nf_tables, looks malformed, or lies past
 * the walk's reach; it drops only a buffer made entirely of other nf_tables
 * messages (additions, the generation's end). The message fields are in
 * host order: little-endian hosts only (else no filter; removes_from()
 * decides alone either way). */
#include <linux/filter.h>

#define WALK_MSGS 120
#define WALK_INSNS 33

static void walk_filter(struct sock_filter *f) {
  static const uint8_t removals[] = {NFT_MSG_DELTABLE, NFT_MSG_DELCHAIN, NFT_MSG_DELRULE,
                                     NFT_MSG_DELSET, NFT_MSG_DELSETELEM};
  for (int m = 0; m < WALK_MSGS; m++) {
    struct sock_filter *p = f + m * WALK_INSNS;
    /* ACC is the iteration's last instruction (index 32): jumps to it are
     * relative to the next instruction. */
#define TO_ACC(i) ((uint8_t)(WALK_INSNS - 1 - (i)-1))
    int i = 0;
    p[i++] = (struct sock_filter)BPF_STMT(BPF_STX, 2);                   /* M[2] = X (offset) */
    p[i++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_LEN, 0);  /* A = length */
    p[i++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_SUB | BPF_X, 0); /* A -= X */
    p[i] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 20, 1, 0);
    i++;
    p[i++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, 0);          /* no more messages: drop */
    p[i++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_B | BPF_IND, 5); /* subsystem */
    p[i] =
        (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NFNL_SUBSYS_NFTABLES, 0, TO_ACC(i));
    i++;
    p[i++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_B | BPF_IND, 4); /* message type */
    for (size_t r = 0; r < sizeof(removals); r++, i++)
      p[i] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, removals[r], TO_ACC(i), 0);
    for (int b = 2; b <= 3; b++) { /* a length of 64 KiB or more: accept */
      p[i++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_B | BPF_IND, (uint32_t)b);
      p[i] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, TO_ACC(i));
      i++;
    }
    /* A = the length's low 16 bits (little-endian: bytes 0 and 1 swapped) */
    p[i++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_H | BPF_IND, 0);
    p[i++] = (struct sock_filter)BPF_STMT(BPF_ST, 0);
    p[i++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0xff);
    p[i++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_LSH | BPF_K, 8);
    p[i++] = (struct sock_filter)BPF_STMT(BPF_MISC | BPF_TAX, 0);
    p[i++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_MEM, 0);
    p[i++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_RSH | BPF_K, 8);
    p[i++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_OR | BPF_X, 0);
    p[i] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 20, 0, TO_ACC(i));
    i++;
    p[i++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_ADD | BPF_K, 3); /* NLMSG_ALIGN */
    p[i++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_AND | BPF_K, ~3u);
    p[i++] = (struct sock_filter)BPF_STMT(BPF_LDX | BPF_MEM, 2);
    p[i++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_ADD | BPF_X, 0);
    p[i++] = (struct sock_filter)BPF_STMT(BPF_MISC | BPF_TAX, 0); /* X = the next message */
    p[i++] = (struct sock_filter)BPF_STMT(BPF_JMP | BPF_JA, 1);
    p[i++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, 0xffffffff); /* ACC */
#undef TO_ACC
    if (i != WALK_INSNS)
      abort(); /* a bug of this file */
  }
  f[WALK_MSGS * WALK_INSNS] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, 0xffffffff);
}

static void attach_walk_filter(int fd) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  size_t n = WALK_MSGS * WALK_INSNS + 1;
  struct sock_filter *f = xmalloc(n * sizeof(*f));
  walk_filter(f);
  struct sock_fprog prog = {.len = (unsigned short)n, .filter = f};
  setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)); /* (else: unfiltered) */
  free(f);
#else
  (void)fd;
#endif
}

int agsx_nft_watch_open(agsx_error_t *err) {
  int fd = agsx_host_socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_NETFILTER);
  if (fd < 0)
    return agsx_error_set(err, errno, "watch the nftables ruleset: netlink socket");
  struct sockaddr_nl sa = {.nl_family = AF_NETLINK, .nl_groups = 1u << (NFNLGRP_NFTABLES - 1)};
  if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
    int e = errno;
    close(fd);
    return agsx_error_set(err, e, "watch the nftables ruleset");
  }
  attach_walk_filter(fd);
  return fd;
}

/* Does message H remove something from table inet TABLE? Every removal's
 * first attribute (NFTA_TABLE_NAME, NFTA_CHAIN_TABLE, NFTA_RULE_TABLE,
 * NFTA_SET_TABLE, NFTA_SET_ELEM_LIST_TABLE) is its table's name.
 *
 * Removals that concern another sandbox's own objects are no alarm for
 * sandbox SELF (its address): its egress chains x_ADDR and xl_ADDR
 * (egress.h), a vpc member's security-group chains e_ADDR and i_ADDR, and
 * their rules; their elements of xmap and of the egress and ingress maps;
 * its sets xa_, xp_ and xd_ADDR; the learnt sets' elements that come and
 * go. Otherwise every sandbox's end
 * would set every supervisor on the host checking its firewall. (A chain a
 * map element jumps to cannot be removed before the element, whose removal
 * is heard.) */
static bool chain_of_other(const char *name, size_t n, uint32_t self) {
  static const char *const prefixes[] = {"x_", "xl_", "e_", "i_", "xa_", "xp_", "xd_"};
  size_t len = strnlen(name, n);
  for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
    size_t p = strlen(prefixes[i]);
    if (len != p + 8 || memcmp(name, prefixes[i], p) != 0)
      continue;
    uint32_t addr = 0;
    for (size_t k = p; k < len; k++) {
      int c = name[k];
      int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (v < 0)
        return false;
      addr = addr << 4 | (uint32_t)v;
    }
    return addr != self;
  }
  return false;
}

/* Does the element list LIST (NFTA_SET_ELEM_LIST_ELEMENTS) hold keys of
 * other sandboxes than SELF only? The address is at KEY_OFF of each key
 * (xmap: 0; egress and ingress, ifname . address: 16). (Unreadable: no.) */
static bool elems_of_others(const char *p, size_t len, uint32_t self, size_t key_off) {
  bool any = false;
  for (size_t off = 0; off + NLA_HDRLEN <= len;) {
    const struct nlattr *e = (const struct nlattr *)(p + off);
    if (e->nla_len < NLA_HDRLEN || off + e->nla_len > len)
      return false;
    const char *ep = (const char *)e + NLA_HDRLEN;
    size_t elen = e->nla_len - NLA_HDRLEN;
    bool found = false;
    for (size_t o = 0; o + NLA_HDRLEN <= elen;) {
      const struct nlattr *k = (const struct nlattr *)(ep + o);
      if (k->nla_len < NLA_HDRLEN || o + k->nla_len > elen)
        return false;
      if ((k->nla_type & NLA_TYPE_MASK) == NFTA_SET_ELEM_KEY &&
          k->nla_len >= 2 * NLA_HDRLEN + key_off + 4) {
        const struct nlattr *v = (const struct nlattr *)((const char *)k + NLA_HDRLEN);
        if (v->nla_len < NLA_HDRLEN + key_off + 4)
          return false;
        uint32_t key;
        memcpy(&key, (const char *)v + NLA_HDRLEN + key_off, 4);
        if (ntohl(key) == self)
          return false;
        found = true;
      }
      o += NLA_ALIGN(k->nla_len);
    }
    if (!found)
      return false;
    any = true;
    off += NLA_ALIGN(e->nla_len);
  }
  return any;
}

static bool removes_from(const struct nlmsghdr *h, const char *table, uint32_t self) {
  if (NFNL_SUBSYS_ID(h->nlmsg_type) != NFNL_SUBSYS_NFTABLES)
    return false;
  int type = NFNL_MSG_TYPE(h->nlmsg_type);
  switch (type) {
  case NFT_MSG_DELTABLE:
  case NFT_MSG_DELCHAIN:
  case NFT_MSG_DELRULE:
  case NFT_MSG_DELSET:
  case NFT_MSG_DELSETELEM: break;
  default: return false;
  }
  if (h->nlmsg_len < NLMSG_LENGTH(sizeof(struct nfgenmsg)))
    return false;
  const struct nfgenmsg *g = NLMSG_DATA(h);
  if (g->nfgen_family != NFPROTO_INET)
    return false;
  size_t off = NLMSG_LENGTH(NLMSG_ALIGN(sizeof(*g))), end = h->nlmsg_len;
  bool ours = false;
  long key_off = -1; /* of a map keyed by sandbox address */
  while (off + NLA_HDRLEN <= end) {
    const struct nlattr *a = (const struct nlattr *)((const char *)h + off);
    if (a->nla_len < NLA_HDRLEN || off + a->nla_len > end)
      return false;
    size_t n = a->nla_len - NLA_HDRLEN;
    const char *name = (const char *)a + NLA_HDRLEN;
    int at = a->nla_type & NLA_TYPE_MASK;
    if (at == 1) {
      ours = strnlen(name, n) == strlen(table) && memcmp(name, table, strlen(table)) == 0;
      if (!ours || type == NFT_MSG_DELTABLE)
        return ours;
    } else if (type == NFT_MSG_DELSET && at == NFTA_SET_NAME) {
      return !chain_of_other(name, n, self); /* (a sandbox's own sets: egress.h) */
    } else if (type == NFT_MSG_DELCHAIN && at == NFTA_CHAIN_NAME) {
      return !chain_of_other(name, n, self);
    } else if (type == NFT_MSG_DELRULE && at == NFTA_RULE_CHAIN) {
      return !chain_of_other(name, n, self);
    } else if (type == NFT_MSG_DELSETELEM && at == NFTA_SET_ELEM_LIST_SET) {
      /* Addresses learnt from DNS come and go (egress.h): no alarm. */
      size_t l = strnlen(name, n);
      if ((l == 6 && memcmp(name, "xcount", 6) == 0) ||
          (l == 11 && name[0] == 'x' && strchr("apd", name[1]) && name[2] == '_'))
        return false;
      if (l == 4 && memcmp(name, "xmap", 4) == 0)
        key_off = 0;
      else if ((l == 6 && memcmp(name, "egress", 6) == 0) ||
               (l == 7 && memcmp(name, "ingress", 7) == 0) ||
               (l == 7 && memcmp(name, "members", 7) == 0))
        key_off = 16; /* IFNAMSIZ */
      else
        return true;
    } else if (type == NFT_MSG_DELSETELEM && at == NFTA_SET_ELEM_LIST_ELEMENTS && key_off >= 0) {
      return !elems_of_others(name, n, self, (size_t)key_off);
    }
    off += NLA_ALIGN(a->nla_len);
  }
  return ours;
}

#define WATCH_MAX_READS 256

int agsx_nft_watch_read(int fd, const char *table, uint32_t self, bool *ret_removed) {
  *ret_removed = false;
  union {
    char b[32768];
    struct nlmsghdr align;
  } u;
  for (int i = 0; i < WATCH_MAX_READS; i++) {
    ssize_t n = recv(fd, u.b, sizeof(u.b), MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0 && errno == EINTR)
      continue;
    /* Lost (ENOBUFS) or cut (longer than the buffer) messages could have
     * been removals. */
    if ((n < 0 && errno == ENOBUFS) || n > (ssize_t)sizeof(u.b)) {
      *ret_removed = true;
      continue;
    }
    if (n <= 0)
      return n < 0 && errno != EAGAIN ? -1 : 0;
    for (size_t off = 0; off + sizeof(struct nlmsghdr) <= (size_t)n;) {
      const struct nlmsghdr *h = (const struct nlmsghdr *)(u.b + off);
      if (h->nlmsg_len < sizeof(*h) || off + h->nlmsg_len > (size_t)n)
        break;
      if (removes_from(h, table, self))
        *ret_removed = true;
      off += NLMSG_ALIGN(h->nlmsg_len);
    }
  }
  *ret_removed = true; /* still more: look anyway */
  return 0;
}
