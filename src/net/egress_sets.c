/* agsx — a sandbox's egress objects in the ruleset: made at its start
 * (after removing what a previous holder of its address left), removed at
 * its end, replaced by a live update. See egress.h and network.h. */
#include "config.h"

#include "net/conntrack.h"
#include "net/dnsfilter.h"
#include "net/egress.h"
#include "net/usernet.h"
#include "net/egress_nl.h"
#include "net/network.h"
#include "net/nft.h"
#include "util/conf.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LEASE_MAX (64 * 1024) /* network.c's */

uint32_t agsx_egress_set_size(void) {
  _cleanup_free_ char *v = NULL;
  agsx_error_t err = NULL;
  if (agsx_conf_get("egress-learnt-max", "AGSX_EGRESS_LEARNT_MAX", &v, &err) < 0 || v == NULL) {
    agsx_error_free(&err);
    return AGSX_EGRESS_LEARNT_MAX;
  }
  char *end;
  errno = 0;
  unsigned long n = strtoul(v, &end, 10);
  if (errno || end == v || *end || n < 1 || n > AGSX_EGRESS_LEARNT_HARD) {
    agsx_warn("egress-learnt-max: `%s` is not a number of 1-%d (using %d)", v,
              AGSX_EGRESS_LEARNT_HARD, AGSX_EGRESS_LEARNT_MAX);
    return AGSX_EGRESS_LEARNT_MAX;
  }
  return (uint32_t)n;
}

int agsx_egress_objects(uint32_t addr, unsigned *ret, agsx_error_t *err) {
  *ret = 0;
  _cleanup_close_ int fd = agsx_nfq_open(err);
  if (fd < 0)
    return -1;
  char x[16], xl[16], set[16];
  snprintf(x, sizeof(x), "x_%08x", addr);
  snprintf(xl, sizeof(xl), "xl_%08x", addr);
  uint32_t key = htonl(addr);
  int r = agsx_nfq_elem(fd, "xmap", &key, sizeof(key), err);
  if (r < 0)
    return -1;
  *ret |= r ? AGSX_EGRESS_OBJ_HOOK : 0;
  if ((r = agsx_nfq_object(fd, false, x, err)) < 0)
    return -1;
  *ret |= r ? AGSX_EGRESS_OBJ_CHAIN : 0;
  if ((r = agsx_nfq_object(fd, false, xl, err)) < 0)
    return -1;
  *ret |= r ? AGSX_EGRESS_OBJ_REFUSE : 0;
  for (int s = 0; s < AGSX_EGRESS_SETS; s++) {
    agsx_egress_set_name(addr, (enum agsx_egress_set)s, set);
    if ((r = agsx_nfq_object(fd, true, set, err)) < 0)
      return -1;
    *ret |= r ? AGSX_EGRESS_OBJ_SET << s : 0;
  }
  return 0;
}

static int delete_objects(uint32_t addr, unsigned what, agsx_error_t *err) {
  struct agsx_nfb b;
  agsx_nfb_init(&b);
  agsx_egress_nl_delete(&b, addr, what);
  int r = agsx_nfb_run(&b, err);
  agsx_nfb_clear(&b);
  return r;
}

int agsx_egress_remove(uint32_t addr, agsx_error_t *err) {
  unsigned what;
  if (agsx_egress_objects(addr, &what, err) < 0)
    return -1;
  if (what == 0 || delete_objects(addr, what, NULL) == 0)
    return 0;
  /* (Something changed between the look and the removal: one object at a
   * time, in order, then look again.) */
  for (unsigned bit = 1; bit <= AGSX_EGRESS_OBJ_ALL; bit <<= 1)
    if (what & bit)
      delete_objects(addr, bit, NULL);
  if (agsx_egress_objects(addr, &what, err) < 0)
    return -1;
  if (what)
    return agsx_error_set_quiet(err, EBUSY, "egress objects of %08x stay (%#x)", addr, what), -1;
  return 0;
}

/* ---- a start ---------------------------------------------------------------------------------- */

int agsx_net_egress_add(struct agsx_net_attach *a, agsx_error_t *err) {
  /* What a previous holder of the address left (a crash; an end whose
   * removal failed) must not pass to this sandbox, with or without rules. */
  unsigned left;
  if (agsx_egress_objects(a->addr, &left, err) < 0)
    return agsx_error_wrap(err, "egress rules: look for what a previous sandbox left");
  if (left) {
    char ip[16];
    agsx_warn("network `%s`: %s: removed the egress chains and learnt addresses a previous "
              "sandbox left (%#x)",
              a->net.name, agsx_ipv4_format(a->addr, ip), left);
    if (agsx_egress_remove(a->addr, err) < 0)
      return agsx_error_wrap(err, "egress rules: what a previous sandbox left");
  }
  if (!a->egress_on)
    return 0;
  /* The log's nflog group is bound here, so that one transaction makes
   * everything (the supervisor's relay takes the socket over). */
  a->nflog_fd = agsx_dns_filter_nflog_open(&a->nflog_group);
  struct agsx_nfb b;
  agsx_nfb_init(&b);
  /* Closed until the relay recorded the denied names' addresses (it opens
   * it: agsx_dns_filter_set_upstream). */
  agsx_egress_nl_chain(&b, a->egress, a->addr, a->net.public_ ? NULL : &a->net.subnet, true,
                       a->nflog_group, agsx_egress_set_size(),
                       agsx_egress_has_exact_deny(a->egress));
  int r = agsx_nfb_send(&b, &a->egress_pipe, err);
  agsx_nfb_clear(&b);
  if (r < 0)
    return agsx_error_wrap(err, "egress rules");
  a->egress_chains = true; /* (removing what failed to be made fails quietly) */
  return 0;
}

int agsx_net_egress_wait(struct agsx_net_attach *a, agsx_error_t *err) {
  if (a->egress_pipe < 0)
    return 0;
  int r = agsx_nfb_wait(a->egress_pipe, err);
  agsx_closep(&a->egress_pipe);
  return r < 0 ? agsx_error_wrap(err, "egress rules") : 0;
}

/* ---- live updates ----------------------------------------------------------------------------- */

/* Is learnt element K still allowed by E? (A truncated name is not.) */
static bool learnt_allowed(const struct agsx_egress *e, const char *name, uint16_t port) {
  bool any;
  uint16_t ports[16];
  size_t n = 0;
  if (name[0] == '~' || name[0] == '\0' ||
      !agsx_egress_name_allowed(e, name, &any, ports, 16, &n) || !agsx_egress_has_allow(e))
    return false;
  if (port == 0)
    return any;
  for (size_t i = 0; i < n; i++)
    if (ports[i] == port)
      return true;
  return false;
}

/* Does element K of L stay under rules E? A denied name's address stays
 * while the name is denied (the relay adds it anew after the reload). */
static bool learnt_stays(const struct agsx_egress *e, const struct agsx_egress_learnt *l,
                         size_t k) {
  if (l->v[k].expires <= 0)
    return false;
  if (l->v[k].denied)
    return l->v[k].name[0] != '~' && agsx_egress_name_denied(e, l->v[k].name);
  return learnt_allowed(e, l->v[k].name, l->v[k].port);
}

struct keep_ctx {
  const struct agsx_egress *e;
  const struct agsx_network *net;
  struct agsx_egress_learnt *l; /* what stays */
};

static bool keep_flow(void *data, const struct agsx_ct_flow *f) {
  const struct keep_ctx *k = data;
  bool tcpudp = f->proto == 6 || f->proto == 17, denied;
  bool allowed = agsx_egress_cidr_allowed(k->e, f->dst, tcpudp ? f->dport : 0, &denied);
  for (size_t i = 0; i < k->l->n; i++)
    denied |= k->l->v[i].denied && k->l->v[i].addr == f->dst;
  if (denied)
    return false;
  if (!agsx_egress_has_allow(k->e) || allowed ||
      (!k->net->public_ && agsx_cidr_contains(&k->net->subnet, f->dst)))
    return true;
  for (size_t i = 0; i < k->l->n; i++)
    if (!k->l->v[i].denied && k->l->v[i].addr == f->dst &&
        (k->l->v[i].port == 0 || (tcpudp && k->l->v[i].port == f->dport)))
      return true;
  return false;
}

/* Marks the lease (MARK) or unmarks it: its egress objects go with it
 * (agsx_net_attach_end, gc). Unmarked before the rules go, so that the
 * supervisor's watch does not take their removal for an attack. */
static void lease_mark_egress(const struct agsx_network *n, uint32_t addr, const char *id,
                              bool mark) {
  char ip[16];
  _cleanup_free_ char *path =
      xasprintf("%s/%s/%s", agsx_net_run_dir(), n->bridge, agsx_ipv4_format(addr, ip));
  _cleanup_close_ int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  if (fd < 0 || agsx_read_fd(fd, LEASE_MAX, &text, &len, NULL) < 0 || len < 33 ||
      strncmp(text, id, 32) != 0)
    return;
  char *e = strstr(text, "\negress\n");
  if (mark && e == NULL && pwrite(fd, "egress\n", 7, (off_t)len) != 7) {
  } else if (!mark && e) {
    memmove(e + 1, e + 8, strlen(e + 8) + 1);
    if (pwrite(fd, text, strlen(text), 0) < 0 || ftruncate(fd, (off_t)strlen(text)) < 0) {
    }
  }
}

/* The transaction of an update to E of sandbox ADDR whose objects WHAT
 * exist: its chain remade, its sets emptied (never element by element: one
 * expiring meanwhile would fail it all) and what stays (into KEEP) added
 * back for the time it had left. */
static int update_batch(const struct agsx_egress *e, const struct agsx_network *n, uint32_t addr,
                        unsigned what, struct agsx_nfb *b, struct agsx_egress_learnt *keep,
                        agsx_error_t *err) {
  bool exists = (what & AGSX_EGRESS_OBJ_CHAIN) && (what >> 3) == (1u << AGSX_EGRESS_SETS) - 1;
  if (!exists) { /* (made anew: what a crashed holder of the address left goes) */
    if (what && agsx_egress_remove(addr, err) < 0)
      return -1;
    agsx_egress_nl_chain(b, e, addr, n->public_ ? NULL : &n->subnet, true, -1,
                         agsx_egress_set_size(), agsx_egress_has_exact_deny(e));
    return 0;
  }
  struct agsx_egress_learnt old;
  if (agsx_egress_learnt_list(addr, &old, err) < 0)
    return -1;
  /* A name newly denied is not recorded yet: closed until the relay did
   * (it reloads the rules, keeps what it knew of the names still denied,
   * and opens the chain again). */
  agsx_egress_nl_chain(b, e, addr, n->public_ ? NULL : &n->subnet, false, -1, 0,
                       agsx_egress_has_exact_deny(e));
  for (int s = 0; s < AGSX_EGRESS_SETS; s++)
    agsx_egress_nl_flush_set(b, addr, (enum agsx_egress_set)s);
  for (size_t i = 0; i < old.n; i++) {
    if (!learnt_stays(e, &old, i))
      continue;
    enum agsx_egress_set set = old.v[i].denied ? AGSX_EGRESS_SET_DENIED
                               : old.v[i].port ? AGSX_EGRESS_SET_PORTS
                                               : AGSX_EGRESS_SET_ANY;
    agsx_egress_nl_learn(b, addr, set, old.v[i].addr, old.v[i].port, old.v[i].expires,
                         old.v[i].name);
    keep->v = xrealloc(keep->v, (keep->n + 1) * sizeof(*keep->v));
    keep->v[keep->n] = old.v[i];
    keep->v[keep->n++].name = NULL;
  }
  agsx_egress_learnt_clear(&old);
  return 0;
}

/* Waits (WAIT_MS at most) for sandbox ADDR's relay to open its chain
 * after an update: what a start does too, so that the update's caller
 * finds the sandbox as the new rules say. Still closed after it: said, not
 * an error (the relay goes on trying; agsx netlog says why). */
static void wait_open(uint32_t addr, int wait_ms) {
  char x[16];
  snprintf(x, sizeof(x), "x_%08x", addr);
  agsx_error_t err = NULL;
  _cleanup_close_ int fd = agsx_nfq_open(&err);
  int64_t until = agsx_mono_ns() / 1000000 + wait_ms;
  int r = -1;
  while (fd >= 0 && (r = agsx_nfq_chain_has(fd, x, AGSX_EGRESS_CLOSED_MARK, &err)) == 1 &&
         agsx_mono_ns() / 1000000 < until) {
    struct timespec ts = {0, 20 * 1000000};
    nanosleep(&ts, NULL);
  }
  if (r != 0) {
    char ip[16];
    agsx_warn("egress: %s: the denied names are not recorded yet: its egress stays closed until "
              "they are (see agsx netlog)",
              agsx_ipv4_format(addr, ip));
  }
  agsx_error_free(&err);
}

int agsx_net_egress_update(const char *root, const char *state_dir, const char *id,
                           const char *network, const char *address, const struct agsx_egress *e,
                           int wait_ms, size_t *ret_cut, agsx_error_t *err) {
  *ret_cut = 0;
  enum agsx_net_mode mode;
  const char *name = NULL;
  uint32_t addr;
  if (network == NULL || agsx_net_mode_parse(network, &mode, &name, err) < 0 ||
      mode == AGSX_NET_INTERNAL)
    return agsx_error_set_quiet(err, EINVAL,
                                "egress rules are for sandboxes on the public or a vpc network"),
           -1;
  if (address == NULL || agsx_ipv4_parse(address, &addr, err) < 0)
    return agsx_error_set_quiet(err, EINVAL, "the sandbox has no address recorded"), -1;
  struct agsx_network n;
  if ((mode == AGSX_NET_PUBLIC ? agsx_network_public(&n, err)
                               : agsx_network_load(root, name, &n, err)) < 0)
    return -1;
  _cleanup_free_ char *dpath = xasprintf("%s/%s", state_dir, id);
  _cleanup_close_ int dir = open(dpath, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int r = -1;
  struct agsx_egress_learnt keep = {0};
  _cleanup_free_ char *json = agsx_egress_to_json(e);
  struct agsx_nfb b;
  agsx_nfb_init(&b);
  unsigned what = 0;
  _cleanup_close_ int lock = dir < 0 ? -1 : agsx_lock_at(dir, "egress.lock", true, err);
  if (dir < 0)
    agsx_error_set(err, errno, "open `%s`", dpath);
  if (lock < 0)
    goto out;
  /* The relay reads the rules from here: first, so that no name the new
   * rules deny gets addresses after the sets are cleaned. */
  if (agsx_write_file_atomic(dir, "egress.json", json, strlen(json), 0600, err) < 0 ||
      agsx_egress_objects(addr, &what, err) < 0)
    goto out;
  if (e->n == 0) {
    lease_mark_egress(&n, addr, id, false);
    if (agsx_egress_remove(addr, err) < 0)
      goto out;
  } else if (update_batch(e, &n, addr, what, &b, &keep, err) < 0) {
    goto out;
  }
  if (agsx_nfb_run(&b, err) < 0) {
    agsx_error_wrap(err, "egress rules");
    goto out;
  }
  if (e->n)
    lease_mark_egress(&n, addr, id, true);
  struct keep_ctx k = {e, &n, &keep};
  r = e->n == 0 ? 0 : agsx_conntrack_cut(addr, false, keep_flow, &k, ret_cut, err);
  if (r == 0 && wait_ms > 0 && agsx_egress_has_exact_deny(e)) {
    agsx_closep(&lock); /* (the relay reloads the rules under it) */
    wait_open(addr, wait_ms);
  }
out:
  agsx_nfb_clear(&b);
  agsx_egress_learnt_clear(&keep);
  agsx_network_clear(&n);
  return r;
}
