/* agsx — public and vpc networks: definitions, leases, bridges, rules. */
#include "config.h"

#include "net/network.h"
#include "host/rootless.h"
#include "net/usernet.h"
#include "util/conf.h"
#include "util/json.h"
#include "net/conntrack.h"
#include "net/dnsfilter.h"
#include "net/egress.h"
#include "net/egress_nl.h"
#include "net/nft.h"
#include "net/relay.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <net/if.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define NET_JSON_MAX (256 * 1024)
#define LEASE_MAX (64 * 1024) /* id, kind, and up to AGSX_MAX_SG_RULES rules */

void agsx_network_clear(struct agsx_network *n) {
  free(n->name);
  free(n->rules);
  memset(n, 0, sizeof(*n));
}

static bool ifname_is_valid(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > 15 || s[0] == '.')
    return false;
  for (size_t i = 0; i < n; i++)
    if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == '.' || s[i] == '-'))
      return false;
  return true;
}

/* A usable subnet: room for the gateway and at least two sandboxes. */
static int check_subnet(const struct agsx_cidr *c, const char *what, agsx_error_t *err) {
  char buf[20];
  if (c->prefix < 8 || c->prefix > 29)
    return agsx_error_set_quiet(err, EINVAL, "%s %s: the prefix must be /8 to /29", what,
                                agsx_cidr_format(c, buf)),
           -1;
  return 0;
}

int agsx_network_public(struct agsx_network *ret, agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  _cleanup_free_ char *subnet = NULL, *bridge = NULL;
  if (agsx_conf_get("public-subnet", "AGSX_PUBLIC_SUBNET", &subnet, err) < 0 ||
      agsx_conf_get("public-bridge", "AGSX_PUBLIC_BRIDGE", &bridge, err) < 0)
    return -1;
  const char *s = subnet ? subnet : AGSX_DEFAULT_PUBLIC_SUBNET;
  if (agsx_cidr_parse(s, false, false, &ret->subnet, err) < 0 ||
      check_subnet(&ret->subnet, "public subnet", err) < 0)
    return agsx_error_wrap(err, "public network");
  const char *b = bridge ? bridge : AGSX_DEFAULT_PUBLIC_BRIDGE;
  if (!ifname_is_valid(b) || agsx_str_has_prefix(b, "agsxv"))
    return agsx_error_set_quiet(err, EINVAL, "public network: invalid bridge name `%s`", b), -1;
  snprintf(ret->bridge, sizeof(ret->bridge), "%s", b);
  ret->name = xstrdup("public");
  ret->public_ = true;
  ret->gateway = ret->subnet.addr + 1;
  return 0;
}

/* ---- DNS -------------------------------------------------------------------------------------- */

static bool is_ip_literal(const char *s) {
  unsigned char buf[16];
  return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

char *agsx_resolv_conf_nameserver(const char *text, size_t len) {
  for (size_t i = 0; i < len;) {
    const char *nl = memchr(text + i, '\n', len - i);
    size_t end = nl ? (size_t)(nl - text) : len;
    _cleanup_free_ char *l = xstrndup(text + i, end - i);
    i = end + 1;
    char *save = NULL, *k = strtok_r(l, " \t\r", &save),
         *v = k ? strtok_r(NULL, " \t\r", &save) : NULL;
    if (k && v && strcmp(k, "nameserver") == 0) {
      v[strcspn(v, "%")] = '\0'; /* a zone index is no use to the relay */
      if (is_ip_literal(v))
        return xstrdup(v);
    }
  }
  return NULL;
}

int agsx_net_dns_upstream(char **ret, agsx_error_t *err) {
  *ret = NULL;
  _cleanup_free_ char *conf = NULL;
  if (agsx_conf_get("dns", "AGSX_DNS", &conf, err) < 0)
    return -1;
  if (conf) {
    char *first = conf + strspn(conf, " \t,");
    first[strcspn(first, " \t,")] = '\0';
    if (!is_ip_literal(first))
      return agsx_error_set_quiet(err, EINVAL, "dns: `%s` is not an IP address", first), -1;
    *ret = xstrdup(first);
    return 0;
  }
  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  if (agsx_read_file_at(AT_FDCWD, "/etc/resolv.conf", 1 << 20, &text, &len, err) < 0)
    return agsx_error_wrap(err, "find the host's name servers");
  *ret = agsx_resolv_conf_nameserver(text, len);
  if (*ret == NULL)
    return agsx_error_set_quiet(err, ENOENT,
                                "the host's /etc/resolv.conf names no name server (set dns in "
                                "agsx.conf)"),
           -1;
  return 0;
}

int agsx_net_dns_listen(struct agsx_relay **relay, int netns, struct agsx_net_attach *a,
                        const char *state_dir, agsx_error_t *err) {
  if (a && agsx_net_egress_wait(a, err) < 0)
    return -1;
  _cleanup_free_ char *upstream = NULL;
  agsx_error_t uerr = NULL;
  if (agsx_net_dns_upstream(&upstream, &uerr) < 0) {
    agsx_warn("no name server for the sandbox: %s%s", uerr->msg,
              a && agsx_egress_has_exact_deny(a->egress)
                  ? " (its denied names cannot be looked up: its egress stays closed)"
                  : "");
    agsx_error_free(&uerr);
    return 0;
  }
  struct sockaddr_storage in, target;
  agsx_sockaddr_from_ip("127.0.0.11", 53, &in);
  if (agsx_sockaddr_from_ip(upstream, 53, &target) < 0)
    return agsx_error_set_quiet(err, EINVAL, "dns: `%s` is not an IP address", upstream), -1;
  if (*relay != NULL)
    return agsx_error_set(err, EEXIST, "the sandbox's DNS relay exists already");
  struct agsx_relay *r = agsx_relay_new(err);
  if (r == NULL)
    return -1;
  /* Every linked sandbox's relay filters: rules may come with an update. */
  if (a) {
    int nflog = a->nflog_fd >= 0 ? fcntl(a->nflog_fd, F_DUPFD_CLOEXEC, 3) : -1;
    struct agsx_dns_filter *df =
        agsx_dns_filter_new(a->egress, a->addr, a->net.public_ ? NULL : &a->net.subnet, state_dir,
                            a->id, nflog, nflog >= 0 ? a->nflog_group : -1, err);
    if (df == NULL) {
      agsx_relay_free(r);
      return agsx_error_wrap(err, "the sandbox's DNS relay");
    }
    agsx_dns_filter_set_upstream(df, &target);
    agsx_relay_set_filter(r, df);
  }
  agsx_relay_set_limits(r, AGSX_DNS_MAX_CONNS, AGSX_DNS_MAX_FLOWS, AGSX_DNS_UDP_IDLE_MS);
  agsx_relay_set_tcp_timeouts(r, AGSX_DNS_TCP_IDLE_MS, AGSX_DNS_HALF_CLOSED_MS);
  if (agsx_relay_listen(r, AGSX_PROTO_UDP, netns, &in, -1, &target, NULL, err) < 0 ||
      agsx_relay_listen(r, AGSX_PROTO_TCP, netns, &in, -1, &target, NULL, err) < 0) {
    agsx_relay_free(r);
    return agsx_error_wrap(err, "the sandbox's DNS relay");
  }
  *relay = r;
  return 0;
}

/* ---- definitions ------------------------------------------------------------------------------ */

static int networks_dir(const char *root, bool create, agsx_error_t *err) {
  _cleanup_free_ char *path = xasprintf("%s/networks", root);
  if (create && agsx_mkdir_p(path, 0700, err) < 0)
    return -1;
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 && !(errno == ENOENT && !create))
    return agsx_error_set(err, errno, "open `%s`", path);
  return fd;
}

char *agsx_network_to_json(const struct agsx_network *n, bool with_users) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  char buf[20];
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "name", n->name);
  if (!n->public_)
    agsx_json_kv_str(g, "id", n->id);
  agsx_json_kv_str(g, "mode", n->public_ ? "public" : "vpc");
  agsx_json_kv_str(g, "subnet", agsx_cidr_format(&n->subnet, buf));
  agsx_json_kv_str(g, "gateway", agsx_ipv4_format(n->gateway, buf));
  agsx_json_kv_str(g, "bridge", n->bridge);
  agsx_json_key(g, "rules");
  yajl_gen_array_open(g);
  for (size_t i = 0; i < n->n_rules; i++) {
    _cleanup_free_ char *r = agsx_sg_rule_format(&n->rules[i]);
    agsx_json_str(g, r);
  }
  yajl_gen_array_close(g);
  if (n->created) {
    _cleanup_free_ char *t = agsx_format_rfc3339(n->created);
    agsx_json_kv_str(g, "created", t);
  }
  if (with_users)
    agsx_json_kv_int(g, "sandboxes", agsx_network_users(n));
  yajl_gen_map_close(g);
  size_t len;
  return agsx_json_gen_steal(g, &len);
}

static int from_json(const char *buf, size_t len, const char *name, struct agsx_network *n,
                     agsx_error_t *err) {
  memset(n, 0, sizeof(*n));
  _cleanup_json_ yajl_val v = agsx_json_parse(buf, len, NET_JSON_MAX, err);
  if (v == NULL)
    return -1;
  const char *jname = agsx_json_get_string(v, "name"), *id = agsx_json_get_string(v, "id"),
             *subnet = agsx_json_get_string(v, "subnet"),
             *bridge = agsx_json_get_string(v, "bridge");
  if (jname == NULL || strcmp(jname, name) != 0 || id == NULL || strlen(id) != 16 ||
      subnet == NULL || bridge == NULL || !ifname_is_valid(bridge))
    return agsx_error_set_quiet(err, EINVAL, "malformed network definition"), -1;
  n->name = xstrdup(jname);
  snprintf(n->id, sizeof(n->id), "%s", id);
  snprintf(n->bridge, sizeof(n->bridge), "%s", bridge);
  if (agsx_cidr_parse(subnet, false, false, &n->subnet, err) < 0 ||
      check_subnet(&n->subnet, "subnet", err) < 0) {
    agsx_network_clear(n);
    return -1;
  }
  n->gateway = n->subnet.addr + 1;
  const char *c = agsx_json_get_string(v, "created");
  if (c)
    agsx_parse_rfc3339(c, &n->created);
  yajl_val rules = agsx_json_get_array(v, "rules");
  for (size_t i = 0; rules && i < rules->u.array.len; i++) {
    const char *s = YAJL_GET_STRING(rules->u.array.values[i]);
    struct agsx_sg_rule r;
    if (s == NULL || agsx_sg_rule_parse_line(s, &r, err) < 0 ||
        agsx_sg_rules_append(&n->rules, &n->n_rules, &r, err) < 0) {
      agsx_network_clear(n);
      return agsx_error_set_quiet(err, EINVAL, "malformed network definition (rules)"), -1;
    }
  }
  return 0;
}

int agsx_network_load(const char *root, const char *name, struct agsx_network *ret,
                      agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  if (!agsx_network_name_is_valid(name))
    return agsx_error_set_quiet(err, EINVAL, "invalid network name `%s`", name), -1;
  _cleanup_close_ int dir = networks_dir(root, false, err);
  if (dir < 0) {
    if (*err)
      return -1;
    return agsx_error_set_quiet(err, ENOENT, "no such network `%s` (agsx network create)", name),
           -1;
  }
  _cleanup_free_ char *file = xasprintf("%s.json", name), *buf = NULL;
  size_t len;
  if (agsx_read_file_at(dir, file, NET_JSON_MAX, &buf, &len, err) < 0) {
    if (agsx_error_errno(err) == ENOENT) {
      agsx_error_free(err);
      return agsx_error_set_quiet(err, ENOENT, "no such network `%s` (agsx network create)", name),
             -1;
    }
    return agsx_error_wrap(err, "network `%s`", name);
  }
  if (from_json(buf, len, name, ret, err) < 0)
    return agsx_error_wrap(err, "network `%s`", name);
  return 0;
}

static int cmp_net(const void *a, const void *b) {
  return strcmp(((const struct agsx_network *)a)->name, ((const struct agsx_network *)b)->name);
}

int agsx_network_list(const char *root, struct agsx_network **ret, size_t *ret_n,
                      agsx_error_t *err) {
  *ret = NULL;
  *ret_n = 0;
  _cleanup_close_ int dir = networks_dir(root, false, err);
  if (dir < 0)
    return *err ? -1 : 0;
  _cleanup_dir_ DIR *d = agsx_dir_stream(dir);
  if (d == NULL)
    return agsx_error_set(err, errno, "list networks");
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l < 6 || !agsx_str_has_suffix(e->d_name, ".json") || e->d_name[0] == '.')
      continue;
    _cleanup_free_ char *name = xstrndup(e->d_name, l - 5);
    struct agsx_network n;
    agsx_error_t lerr = NULL;
    if (agsx_network_load(root, name, &n, &lerr) < 0) {
      agsx_warn("%s", lerr->msg);
      agsx_error_free(&lerr);
      continue;
    }
    *ret = xrealloc(*ret, (*ret_n + 1) * sizeof(**ret));
    (*ret)[(*ret_n)++] = n;
  }
  if (*ret_n)
    qsort(*ret, *ret_n, sizeof(**ret), cmp_net);
  return 0;
}

/* A new subnet must not overlap the public network, another vpc or an
 * address the host has (its own networks). */
static int check_overlaps(const char *root, const struct agsx_network *n, agsx_error_t *err) {
  char a[20], b[20];
  struct agsx_network pub;
  if (agsx_network_public(&pub, err) < 0)
    return -1;
  bool clash = agsx_cidr_overlaps(&pub.subnet, &n->subnet);
  agsx_network_clear(&pub);
  if (clash)
    return agsx_error_set_quiet(err, EEXIST, "subnet %s overlaps the public network's %s",
                                agsx_cidr_format(&n->subnet, a), agsx_cidr_format(&pub.subnet, b)),
           -1;
  /* The host's own networks (not agsx's bridges: their subnets are checked
   * below, through the definitions). */
  struct agsx_net_addr *addrs;
  size_t na;
  if (agsx_net_addrs(&addrs, &na, err) < 0)
    return -1;
  int r = 0;
  for (size_t i = 0; i < na && r == 0; i++) {
    struct agsx_cidr h = {addrs[i].addr & agsx_cidr_mask(addrs[i].prefix), addrs[i].prefix};
    if (agsx_str_has_prefix(addrs[i].ifname, "agsx") || addrs[i].prefix == 32 ||
        (addrs[i].addr >> 24) == 127)
      continue;
    if (agsx_cidr_overlaps(&h, &n->subnet))
      r = agsx_error_set_quiet(err, EEXIST, "subnet %s overlaps the host's network %s on `%s`",
                               agsx_cidr_format(&n->subnet, a), agsx_cidr_format(&h, b),
                               addrs[i].ifname);
  }
  free(addrs);
  if (r < 0)
    return -1;
  struct agsx_network *all;
  size_t count;
  if (agsx_network_list(root, &all, &count, err) < 0)
    return -1;
  for (size_t i = 0; i < count; i++) {
    if (r == 0 && agsx_cidr_overlaps(&all[i].subnet, &n->subnet))
      r = agsx_error_set_quiet(err, EEXIST, "subnet %s overlaps network `%s` (%s)",
                               agsx_cidr_format(&n->subnet, a), all[i].name,
                               agsx_cidr_format(&all[i].subnet, b));
    agsx_network_clear(&all[i]);
  }
  free(all);
  return r;
}

int agsx_network_create(const char *root, struct agsx_network *n, agsx_error_t *err) {
  if (!agsx_network_name_is_valid(n->name))
    return agsx_error_set_quiet(err, EINVAL,
                                "invalid network name `%s` (want [a-z0-9][a-z0-9_.-]{0,31}, not "
                                "internal, public, host, none or vpc)",
                                n->name),
           -1;
  if (check_subnet(&n->subnet, "subnet", err) < 0)
    return -1;
  _cleanup_close_ int dir = networks_dir(root, true, err);
  if (dir < 0)
    return -1;
  _cleanup_close_ int lock = agsx_lock_at(dir, ".lock", true, err);
  if (lock < 0)
    return -1;
  _cleanup_free_ char *file = xasprintf("%s.json", n->name);
  if (faccessat(dir, file, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
    return agsx_error_set_quiet(err, EEXIST, "network `%s` already exists", n->name), -1;
  if (check_overlaps(root, n, err) < 0)
    return -1;
  agsx_random_hex(n->id, 8);
  snprintf(n->bridge, sizeof(n->bridge), "agsxv%.10s", n->id);
  n->gateway = n->subnet.addr + 1;
  n->created = agsx_now_ns() / 1000000000LL;
  _cleanup_free_ char *json = agsx_network_to_json(n, false);
  return agsx_write_file_atomic(dir, file, json, strlen(json), 0600, err);
}

/* ---- leases ----------------------------------------------------------------------------------- */

static int lease_dir(const char *bridge, bool create, agsx_error_t *err) {
  _cleanup_free_ char *path = xasprintf("%s/%s", agsx_net_run_dir(), bridge);
  if (create && agsx_mkdir_p(path, 0700, err) < 0)
    return -1;
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 && !(errno == ENOENT && !create))
    return agsx_error_set(err, errno, "open `%s`", path);
  return fd;
}

/* Is the lease file NAME held by a running sandbox? */
static bool lease_held(int dir, const char *name) {
  _cleanup_close_ int fd = openat(dir, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return false;
  if (flock(fd, LOCK_SH | LOCK_NB) == 0)
    return false;
  return errno == EWOULDBLOCK;
}

static bool is_lease_name(const char *s) {
  uint32_t a;
  return agsx_ipv4_parse(s, &a, NULL) == 0;
}

int agsx_network_users(const struct agsx_network *n) {
  _cleanup_close_ int dir = lease_dir(n->bridge, false, NULL);
  if (dir < 0)
    return 0;
  _cleanup_dir_ DIR *d = agsx_dir_stream(dir);
  if (d == NULL)
    return 0;
  int users = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (is_lease_name(e->d_name) && lease_held(dir, e->d_name))
      users++;
  return users;
}

/* Did the last holder of lease FD (its first line is the sandbox id) leave
 * a veth behind? Its namespace, and the pair with it, is torn down by the
 * kernel asynchronously after the sandbox ends: until then its eth0 still
 * answers ARP for the address with the same MAC, which would steal a new
 * holder's traffic. */
static bool previous_still_there(int fd) {
  char buf[64] = "";
  ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  if (n < 33 || buf[32] != '\n')
    return false;
  for (int i = 0; i < 32; i++)
    if (!isxdigit((unsigned char)buf[i]))
      return false;
  char veth[16];
  snprintf(veth, sizeof(veth), "agsx%.11s", buf);
  return agsx_host_ifindex(veth) != 0;
}

/* Takes a free address, from a random place in the subnet so that an
 * address just freed is not handed out again at once; one whose last
 * holder's veth still exists is taken only when nothing else is free. */
/* A lease file: the holder's id, its network kind, "egress" when it has
 * egress rules, then "sg RULE" for each of a vpc member's own rules (for
 * agsx_network_update). */
static char *lease_text(const struct agsx_net_attach *a, const char *id,
                        const struct agsx_sg_rule *rules, size_t n_rules) {
  char *t = xasprintf("%s\n%s\n%s", id, a->net.public_ ? "public" : "vpc",
                      a->egress_on ? "egress\n" : "");
  for (size_t i = 0; i < n_rules; i++) {
    _cleanup_free_ char *r = agsx_sg_rule_format(&rules[i]);
    char *old = t;
    t = xasprintf("%ssg %s\n", old, r);
    free(old);
  }
  return t;
}

static int lease(struct agsx_net_attach *a, int dir, const char *id,
                 const struct agsx_sg_rule *rules, size_t n_rules, agsx_error_t *err) {
  const struct agsx_network *n = &a->net;
  uint64_t size = agsx_cidr_size(&n->subnet);
  uint64_t first = 2, count = size - 3; /* network, gateway and broadcast excluded */
  uint32_t r;
  if (getrandom(&r, sizeof(r), 0) != sizeof(r))
    abort();
  uint64_t start = r % count;
  for (int pass = 0; pass < 2; pass++)
    for (uint64_t k = 0; k < count; k++) {
      uint32_t addr = n->subnet.addr + (uint32_t)(first + (start + k) % count);
      char name[16];
      agsx_ipv4_format(addr, name);
      int fd = openat(dir, name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
      if (fd < 0)
        return agsx_error_set(err, errno, "lease `%s`", name);
      if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        close(fd);
        if (e == EWOULDBLOCK)
          continue;
        return agsx_error_set(err, e, "lease `%s`", name);
      }
      if (pass == 0 && previous_still_there(fd)) {
        close(fd);
        continue;
      }
      _cleanup_free_ char *text = lease_text(a, id, rules, n_rules);
      if (ftruncate(fd, 0) < 0 || pwrite(fd, text, strlen(text), 0) != (ssize_t)strlen(text)) {
        int e = errno;
        close(fd);
        return agsx_error_set(err, e, "lease `%s`", name);
      }
      a->lease_fd = fd;
      a->addr = addr;
      return 0;
    }
  char buf[20];
  return agsx_error_set_quiet(err, ENOSPC,
                              "network `%s` has no free address (subnet %s, %" PRIu64 " in use)",
                              n->name, agsx_cidr_format(&n->subnet, buf), count),
         -1;
}

/* ---- rules ------------------------------------------------------------------------------------ */

#define TABLE "inet agsx"
#define STR_(x) #x
#define STR(x) STR_(x)
/* The last rule of every chain that protects sandboxes carries it: a chain
 * whose rules were flushed (by a host firewall reload) is told apart from
 * an intact one by one listing. */
#define END_MARK "comment \"agsx:end\""
#define MEMBERS_SET "  set members { type ifname . ipv4_addr; }\n"

static const char base_rules[] =
    "table inet agsx {\n"
    "  set bridges { type ifname; }\n"
    "  set public { type ifname; }\n"
    "  set subnets { type ipv4_addr; flags interval; }\n"
    "  set never { type ipv4_addr; flags interval; elements = { 0.0.0.0/8, 127.0.0.0/8, "
    "100.100.100.200, 169.254.0.0/16, 224.0.0.0/3 }; }\n"
    "  set private { type ipv4_addr; flags interval; elements = { 10.0.0.0/8, 100.64.0.0/10, "
    "172.16.0.0/12, 192.168.0.0/16 }; }\n"
    "  map egress { type ifname . ipv4_addr : verdict; }\n"
    "  map ingress { type ifname . ipv4_addr : verdict; }\n"
    /* The keys of egress, as a set: Linux 6.1 refuses `!= @map` (EINVAL). */
    MEMBERS_SET
    /* Sandboxes with egress rules, by address (egress.h). */
    "  map xmap { type ipv4_addr : verdict; }\n"
    /* (Each one's learnt addresses are in sets of its own; this counts them all.) */
    "  set xcount { type ipv4_addr . ipv4_addr . inet_service; flags timeout; size " STR(
        AGSX_EGRESS_LEARNT_TOTAL) "; }\n"
                                  "  chain input {\n"
                                  "    type filter hook input priority filter - 5; policy accept;\n"
                                  "    iifname @bridges ct state established,related accept\n"
                                  "    iifname @bridges drop " END_MARK "\n"
                                  "  }\n"
                                  "  chain forward {\n"
                                  "    type filter hook forward priority filter - 5; policy "
                                  "accept;\n"
                                  "    iifname @bridges meta nfproto ipv6 drop\n"
                                  "    oifname @bridges meta nfproto ipv6 drop\n"
                                  /* Before established flows pass: a live update cuts them (egress.h). */
                                  "    iifname @bridges ip saddr vmap @xmap\n"
                                  "    iifname @bridges ct state established,related accept\n"
                                  "    oifname @bridges ct state established,related accept\n"
                                  "    iifname @bridges ct state invalid drop\n"
                                  "    oifname @bridges ct state invalid drop\n"
                                  "    iifname @bridges ip daddr @never drop\n"
                                  /* A vpc sandbox without its chains (lost, or not made yet) sends nothing. */
                                  "    iifname @bridges iifname != @public iifname . ip saddr != "
                                  "@members drop\n"
                                  "    iifname . ip saddr vmap @egress\n"
                                  "    oifname . ip daddr vmap @ingress\n"
                                  "    oifname @bridges drop\n"
                                  "    iifname @public ip daddr @private drop " END_MARK "\n"
                                  "  }\n"
                                  "  chain postrouting {\n"
                                  "    type nat hook postrouting priority srcnat; policy accept;\n"
                                  "    ip saddr @subnets oifname != @bridges masquerade\n"
                                  "  }\n"
                                  "}\n";

/* ---- keeping the rules in place --------------------------------------------------------------
 * A host firewall reload (`nft flush ruleset`: Debian's nftables.service,
 * firewalld, configuration management) removes the table while bridges
 * and forwarding stay: sandboxes would be attached, and stay, with no
 * rules. So every start checks the table, its base chains and the
 * bridge's membership, and puts them back (a damaged table is made anew);
 * and each supervisor watches the table's changes and cuts its sandbox
 * off when what protects it went (agsx_net_attach_watch). */

/* The checks are targeted netlink looks (egress_nl.h), not libnftables:
 * a `get element` or `list chain` of libnftables first fetches the whole
 * ruleset (every sandbox's chains: thousands of rules with many sandboxes),
 * which made each start cost O(sandboxes). A look asks for one element or
 * one chain's rules; a start costs the same with 0 or 1000 sandboxes. */

/* A set key of N's bridge (an ifname: 16 bytes, zero-padded), followed
 * by address MEMBER (0: none) for the egress and ingress maps. */
static size_t bridge_key(const struct agsx_network *n, uint32_t member, unsigned char key[20]) {
  memset(key, 0, 20);
  memcpy(key, n->bridge, strnlen(n->bridge, 15));
  if (member == 0)
    return 16;
  uint32_t be = htonl(member);
  memcpy(key + 16, &be, 4);
  return 20;
}

/* Does chain NAME of FD's table end in END_MARK? (-1: no answer) */
static int chain_intact_at(int fd, const char *name, agsx_error_t *err) {
  return agsx_nfq_chain_marked(fd, name, "agsx:end", err);
}

static bool chain_intact(const char *name) {
  agsx_error_t e = NULL;
  int fd = agsx_nfq_open(&e);
  int r = fd < 0 ? -1 : chain_intact_at(fd, name, &e);
  if (fd >= 0)
    close(fd);
  agsx_error_free(&e);
  return r == 1;
}

/* With MEMBER 0: are the base chains and N's bridge's set elements in
 * place? Else: vpc member MEMBER's map entries and chains? 1, 0, or -1
 * with ERR (no answer, or EPERM). */
static int guards_at(int fd, const struct agsx_network *n, uint32_t member, agsx_error_t *err) {
  char e_chain[16], i_chain[16];
  unsigned char key[20];
  size_t klen = bridge_key(n, member, key);
  int r;
  if (member == 0) {
    if ((r = agsx_nfq_elem(fd, "bridges", key, klen, err)) != 1 ||
        (n->public_ && (r = agsx_nfq_elem(fd, "public", key, klen, err)) != 1) ||
        (r = agsx_nfq_object(fd, true, "members", err)) != 1)
      return r;
  } else if ((r = agsx_nfq_elem(fd, "egress", key, klen, err)) != 1 ||
             (r = agsx_nfq_elem(fd, "ingress", key, klen, err)) != 1)
    return r;
  snprintf(e_chain, sizeof(e_chain), "e_%08x", member);
  snprintf(i_chain, sizeof(i_chain), "i_%08x", member);
  if ((r = chain_intact_at(fd, member ? e_chain : "input", err)) != 1)
    return r;
  return chain_intact_at(fd, member ? i_chain : "forward", err);
}

static bool guards_present(const struct agsx_network *n, uint32_t member) {
  agsx_error_t e = NULL;
  int fd = agsx_nfq_open(&e);
  int r = fd < 0 ? -1 : guards_at(fd, n, member, &e);
  if (fd >= 0)
    close(fd);
  agsx_error_free(&e);
  return r == 1;
}

/* Why guards_present() said no; -1 (EPERM) when the ruleset is not ours to
 * read (ls by another user): no verdict then. */
static int why_missing(const char **ret_why, agsx_error_t *err) {
  agsx_error_t e = NULL;
  int fd = agsx_nfq_open(&e);
  int r = fd < 0 ? -1 : agsx_nfq_table(fd, &e);
  if (fd >= 0)
    close(fd);
  if (r == 1) {
    *ret_why = "its rules in the firewall table inet agsx are gone (a host firewall reload?)";
    return 0;
  }
  bool eperm = r < 0 && agsx_error_errno(&e) == EPERM;
  if (eperm)
    agsx_error_set_quiet(err, EPERM, "nftables: %s", strerror(EPERM));
  agsx_error_free(&e);
  *ret_why = "the firewall table inet agsx is gone (a host firewall reload?)";
  return eperm ? -1 : 0;
}

/* Are the rules protecting N's sandboxes (and member MEMBER, if not 0) in
 * place? *RET_WHY says what is missing when not. Fails closed: a look
 * that got no answer counts as missing. */
static int firewall_intact(const struct agsx_network *n, uint32_t member, bool *ret_ok,
                           const char **ret_why, agsx_error_t *err) {
  *ret_ok = false;
  *ret_why = NULL;
  agsx_error_t e = NULL;
  int fd = agsx_nfq_open(&e);
  int r = fd < 0 ? -1 : guards_at(fd, n, 0, &e);
  if (r == 1 && !n->public_ && member != 0)
    r = guards_at(fd, n, member, &e);
  if (fd >= 0)
    close(fd);
  agsx_error_free(&e);
  *ret_ok = r == 1;
  return *ret_ok ? 0 : why_missing(ret_why, err);
}

/* Puts back the table and N's membership; the caller holds the global lock.
 * A table whose base chains lost their rules is made anew: the sandboxes
 * it held lost their protection with them and are cut off by their
 * supervisors. */
static int firewall_restore(const struct agsx_network *n, agsx_error_t *err) {
  bool ok;
  const char *why;
  if (firewall_intact(n, 0, &ok, &why, err) < 0)
    return -1;
  if (ok)
    return 0;
  bool base = chain_intact("input") && chain_intact("forward");
  char sub[20];
  /* (add then delete: a delete alone fails on a missing table; the
   * members set is added to a table an older agsx made without it) */
  _cleanup_free_ char *cmds =
      xasprintf("%s%sadd set " TABLE " members { type ifname . ipv4_addr; }\n"
                "add element " TABLE " bridges { \"%s\" }\nadd element " TABLE " subnets { %s }\n",
                base ? "" : "add table " TABLE "\ndelete table " TABLE "\n", base ? "" : base_rules,
                n->bridge, agsx_cidr_format(&n->subnet, sub));
  if (n->public_) {
    char *old = cmds;
    cmds = xasprintf("%sadd element " TABLE " public { \"%s\" }\n", old, n->bridge);
    free(old);
  }
  /* An ordinary user's router: the host's own addresses, which pasta
   * would reach from the host, are refused as the router's are. */
  if (agsx_rootless()) {
    _cleanup_free_ char *more = agsx_usernet_rules();
    char *old = cmds;
    cmds = xasprintf("%s%s%s", old, more,
                     base ? ""
                          : "insert rule " TABLE " forward iifname @bridges ip daddr "
                            "@hostaddrs drop\n");
    free(old);
  }
  return agsx_nft_run(cmds, NULL, err);
}

/* Member A's chains and map elements: one netlink batch (egress_nl.h), not
 * libnftables, whose every call fetches the whole ruleset (O(sandboxes)). */
static int add_member(struct agsx_net_attach *a, const struct agsx_sg_rule *rules, size_t n_rules,
                      agsx_error_t *err) {
  const struct agsx_sg_rule *sets[2] = {a->net.rules, rules};
  const size_t counts[2] = {a->net.n_rules, n_rules};
  struct agsx_nfb b;
  agsx_nfb_init(&b);
  agsx_vpc_nl_member(&b, a->net.bridge, &a->net.subnet, a->addr, sets, counts);
  int r = agsx_nfb_run(&b, err);
  agsx_nfb_clear(&b);
  if (r < 0)
    return agsx_error_wrap(err, "security-group rules");
  a->chains = true;
  return 0;
}

/* What a lease file says a crashed holder left: vpc chains, egress chains. */
static void lease_leftovers(const char *bridge, const char *text, uint32_t addr, bool dry_run) {
  if (dry_run || text == NULL)
    return;
  if (strstr(text, "\nvpc\n")) { /* gone already when the sandbox ended cleanly */
    struct agsx_nfb b;
    agsx_nfb_init(&b);
    agsx_vpc_nl_member_delete(&b, bridge, addr);
    agsx_nfb_run(&b, NULL);
    agsx_nfb_clear(&b);
  }
  if (strstr(text, "\negress\n")) /* (also when an update gave it rules) */
    agsx_egress_remove(addr, NULL);
}

/* ---- bridges ---------------------------------------------------------------------------------- */

static int global_lock(agsx_error_t *err) {
  if (agsx_mkdir_p(agsx_net_run_dir(), 0700, err) < 0)
    return -1;
  _cleanup_close_ int dir = open(agsx_net_run_dir(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0)
    return agsx_error_set(err, errno, "open `%s`", agsx_net_run_dir());
  return agsx_lock_at(dir, ".lock", true, err);
}

static int enable_forwarding(agsx_error_t *err) {
  _cleanup_close_ int fd = agsx_host_sysctl_open("/proc/sys/net/ipv4/ip_forward", O_RDWR);
  char c = 0;
  if (fd < 0 || pread(fd, &c, 1, 0) != 1)
    return agsx_error_set(err, errno, "read net.ipv4.ip_forward");
  if (c == '1')
    return 0;
  if (pwrite(fd, "1\n", 2, 0) != 2)
    return agsx_error_set(err, errno, "enable net.ipv4.ip_forward");
  return 0;
}

/* Makes bridge N->bridge if missing. The caller holds the global lock. */
static int bridge_make(const struct agsx_network *n, int *ret_ifindex, agsx_error_t *err) {
  if (enable_forwarding(err) < 0)
    return -1;
  int ifindex = agsx_net_bridge_create(n->bridge, n->gateway, n->subnet.prefix, err);
  if (ifindex < 0)
    return -1;
  *ret_ifindex = ifindex;
  return 0;
}

/* An existing bridge: made by us for this subnet? */
static int bridge_check(const struct agsx_network *n, agsx_error_t *err) {
  char a[20], b[20];
  uint32_t addr;
  uint8_t prefix;
  if (agsx_net_link_ipv4(n->bridge, &addr, &prefix, err) < 0)
    return -1;
  if (addr != n->gateway || prefix != n->subnet.prefix) {
    struct agsx_cidr have = {addr & agsx_cidr_mask(prefix), prefix};
    return agsx_error_set_quiet(err, EEXIST,
                                "network `%s`: bridge `%s` exists with subnet %s, not %s (agsx gc "
                                "removes it once no sandbox uses it)",
                                n->name, n->bridge, addr ? agsx_cidr_format(&have, b) : "none",
                                agsx_cidr_format(&n->subnet, a)),
           -1;
  }
  return 0;
}

/* The bridge, with its rules in place (checked at every start: see
 * "keeping the rules in place"). */
static int bridge_ensure(const struct agsx_network *n, int *ret_ifindex, agsx_error_t *err) {
  int ifindex = (int)agsx_host_ifindex(n->bridge);
  bool ok = false;
  const char *why;
  /* Without the lock first. A bridge another agsx is still making (under
   * the global lock) has no address yet and fails the check: then look
   * again under the lock, once its maker is done. */
  bool checked = false;
  if (ifindex) {
    checked = bridge_check(n, err) == 0;
    if (!checked)
      agsx_error_free(err);
    else if (agsx_net_bridge_keep_mac(n->bridge, err) < 0 ||
             firewall_intact(n, 0, &ok, &why, err) < 0)
      return -1;
  }
  if (ifindex == 0 || !ok) {
    _cleanup_close_ int lock = global_lock(err);
    if (lock < 0)
      return -1;
    int now = (int)agsx_host_ifindex(n->bridge);
    if (now && !checked && bridge_check(n, err) < 0) /* made meanwhile, or being made */
      return -1;
    if (firewall_restore(n, err) < 0)
      return agsx_error_wrap(err, "network `%s`: restore its firewall rules", n->name);
    if (now == 0 && bridge_make(n, &now, err) < 0)
      return agsx_error_wrap(err, "network `%s`", n->name);
    ifindex = now;
  }
  /* Members of a vpc reach each other through the host (isolated ports). */
  if (!n->public_ && agsx_net_bridge_route_ports(n->bridge, err) < 0)
    return agsx_error_wrap(err, "network `%s`", n->name);
  *ret_ifindex = ifindex;
  return 0;
}

/* ---- attach ----------------------------------------------------------------------------------- */

/* A vpc's rules again, under its lease directory's lock: agsx_network_update
 * changes them under that lock, exclusively, so a member made meanwhile
 * gets the new ones. */
static int reload_rules(const char *root, struct agsx_net_attach *a, agsx_error_t *err) {
  if (a->net.public_)
    return 0;
  struct agsx_network now;
  if (agsx_network_load(root, a->net.name, &now, err) < 0) {
    agsx_net_attach_end(a);
    return -1;
  }
  free(a->net.rules);
  a->net.rules = steal_ptr(&now.rules);
  a->net.n_rules = now.n_rules;
  agsx_network_clear(&now);
  return 0;
}

int agsx_net_attach_begin(const char *root, enum agsx_net_mode mode, const char *name,
                          const struct agsx_sg_rule *rules, size_t n_rules, const char *id,
                          struct agsx_net_attach *a, agsx_error_t *err) {
  a->lease_fd = -1;
  a->watch_fd = -1;
  a->chains = false;
  a->cut = false;
  a->egress_on = a->egress && a->egress->n > 0;
  a->egress_chains = false;
  a->nflog_fd = a->nflog_group = a->egress_pipe = -1;
  /* An ordinary user's networks live in the user's router (net/usernet.h). */
  if (agsx_rootless() && agsx_usernet_ensure(err) < 0)
    return agsx_error_wrap(err, "network `%s`", mode == AGSX_NET_PUBLIC ? "public" : name);
  int r = mode == AGSX_NET_PUBLIC ? agsx_network_public(&a->net, err)
                                  : agsx_network_load(root, name, &a->net, err);
  if (r < 0)
    return -1;
  if (mode == AGSX_NET_PUBLIC && n_rules > 0)
    return agsx_error_set_quiet(err, EINVAL,
                                "--allow, --deny and --rules are for vpc networks (the public "
                                "network's rules are fixed)"),
           -1;
  /* Listening before the rules are checked: no removal goes unheard. */
  _cleanup_close_ int watch = agsx_nft_watch_open(err);
  _cleanup_close_ int dir = watch < 0 ? -1 : lease_dir(a->net.bridge, true, err);
  if (dir < 0)
    return -1;
  /* Shared: gc takes it exclusively to remove a bridge no lease holds. */
  _cleanup_close_ int lock = agsx_lock_at(dir, ".lock", false, err);
  if (lock < 0 || lease(a, dir, id, rules, n_rules, err) < 0 || reload_rules(root, a, err) < 0)
    return -1;
  int ifindex = 0;
  if (bridge_ensure(&a->net, &ifindex, err) < 0 || agsx_usernet_refresh(err) < 0 ||
      (!a->net.public_ && add_member(a, rules, n_rules, err) < 0) ||
      agsx_net_egress_add(a, err) < 0) {
    agsx_net_attach_end(a);
    return -1;
  }
  a->watch_fd = steal_fd(&watch);
  struct agsx_net_link *l = &a->link;
  snprintf(a->id, sizeof(a->id), "%s", id);
  snprintf(l->host_ifname, sizeof(l->host_ifname), "agsx%.11s", id);
  l->bridge_ifindex = ifindex;
  agsx_net_mac_of(a->addr, l->mac);
  l->addr = a->addr;
  l->gateway = a->net.gateway;
  l->prefix = a->net.subnet.prefix;
  return 0;
}

void agsx_net_attach_disown(struct agsx_net_attach *a) {
  a->egress_chains = false;
  agsx_closep(&a->nflog_fd);
  agsx_closep(&a->egress_pipe);
  agsx_closep(&a->lease_fd);
  agsx_closep(&a->watch_fd);
  a->chains = false;
  agsx_network_clear(&a->net);
}

/* Did an update give the sandbox egress rules (agsx_net_egress_update)? */
static bool lease_says_egress(int fd) {
  _cleanup_free_ char *text = NULL;
  size_t len;
  if (fd < 0 || lseek(fd, 0, SEEK_SET) < 0 || agsx_read_fd(fd, LEASE_MAX, &text, &len, NULL) < 0)
    return false;
  return strstr(text, "\negress\n") != NULL;
}

void agsx_net_attach_end(struct agsx_net_attach *a) {
  agsx_net_egress_wait(a, NULL); /* made before it is removed */
  /* The egress deletion's answer is read (and its socket closed) only
   * after the veth went: the first close of a netfilter netlink socket
   * after a deletion waits for the kernel to free what was deleted (an RCU
   * grace period, ~10 ms), which by then has passed meanwhile. */
  int pending = -1;
  bool warn = !a->cut && a->egress_chains;
  bool egress = a->egress_chains || lease_says_egress(a->lease_fd);
  if (egress) {
    agsx_error_t err = NULL;
    /* Its chains and sets, in one transaction that no element expiring
     * meanwhile can fail (egress_nl.h): an address reused must not inherit
     * what it learnt. */
    struct agsx_nfb b;
    agsx_nfb_init(&b);
    agsx_egress_nl_delete(&b, a->addr, AGSX_EGRESS_OBJ_ALL);
    if (agsx_nfb_send(&b, &pending, &err) < 0)
      pending = -1;
    agsx_nfb_clear(&b);
    agsx_error_free(&err);
    a->egress_chains = false;
  }
  /* The vpc member's chains the same way: one batch, read after the veth
   * went. (Cut off: they may be gone already.) */
  int pending_member = -1;
  bool warn_member = a->chains && !a->cut;
  if (a->chains) {
    agsx_error_t err = NULL;
    struct agsx_nfb b;
    agsx_nfb_init(&b);
    agsx_vpc_nl_member_delete(&b, a->net.bridge, a->addr);
    if (agsx_nfb_send(&b, &pending_member, &err) < 0 && warn_member)
      agsx_warn("network `%s`: remove the rules of %08x: %s", a->net.name, a->addr, err->msg);
    agsx_nfb_clear(&b);
    agsx_error_free(&err);
    a->chains = false;
  }
  /* The veth goes now, not whenever the kernel gets round to cleaning up
   * the sandbox's dead namespace (tens of seconds on a loaded host, with
   * the address already leased again). Already gone (cut off): no matter. */
  if (a->link.host_ifname[0])
    agsx_net_link_delete(a->link.host_ifname, NULL);
  if (pending >= 0 || egress) {
    agsx_error_t err = NULL;
    /* Not all there (an update removed them, a cut): what is, one by one. */
    if ((pending < 0 || agsx_nfb_wait(pending, NULL) < 0) &&
        agsx_egress_remove(a->addr, &err) < 0 && warn)
      agsx_warn("network `%s`: remove the egress rules of %08x: %s", a->net.name, a->addr,
                err->msg);
    agsx_error_free(&err);
    agsx_closep(&pending);
  }
  if (pending_member >= 0) {
    agsx_error_t err = NULL;
    if (agsx_nfb_wait(pending_member, &err) < 0 && warn_member)
      agsx_warn("network `%s`: remove the rules of %08x: %s", a->net.name, a->addr, err->msg);
    agsx_error_free(&err);
    close(pending_member);
  }
  /* Free, but the holder's id stays for the next lease to check. */
  if (a->lease_fd >= 0 && a->link.host_ifname[0]) {
    char text[64];
    int len = snprintf(text, sizeof(text), "%.32s\nended\n", a->id);
    if (ftruncate(a->lease_fd, 0) < 0 || pwrite(a->lease_fd, text, (size_t)len, 0) < 0) {
    }
  } else if (a->lease_fd >= 0 && ftruncate(a->lease_fd, 0) < 0) {
  }
  agsx_closep(&a->lease_fd);
  agsx_closep(&a->watch_fd);
  agsx_closep(&a->nflog_fd);
  agsx_network_clear(&a->net);
}

/* Is sandbox ADDR's egress chain hooked in (its xmap element)? */
static bool egress_present(uint32_t addr) {
  uint32_t key = htonl(addr);
  agsx_error_t e = NULL;
  int fd = agsx_nfq_open(&e);
  int r = fd < 0 ? -1 : agsx_nfq_elem(fd, "xmap", &key, sizeof(key), &e);
  if (fd >= 0)
    close(fd);
  agsx_error_free(&e);
  return r == 1;
}

int agsx_net_attach_watch(struct agsx_net_attach *a, char **ret_cut, agsx_error_t *err) {
  *ret_cut = NULL;
  bool removed, ok;
  const char *why;
  if (agsx_nft_watch_read(a->watch_fd, "agsx", a->addr, &removed) < 0)
    return agsx_error_set(err, errno, "network `%s`: watch the firewall rules", a->net.name);
  if (!removed || a->cut)
    return 0;
  /* Twice before the cut: a healthy sandbox is never cut off on a fluke. */
  uint32_t member = a->net.public_ ? 0 : a->addr;
  if (firewall_intact(&a->net, member, &ok, &why, err) < 0 ||
      (!ok && firewall_intact(&a->net, member, &ok, &why, err) < 0))
    return agsx_error_wrap(err, "network `%s`: check the firewall rules", a->net.name);
  if (ok && lease_says_egress(a->lease_fd) && !(egress_present(a->addr) || egress_present(a->addr)))
    why = "its egress rules are gone", ok = false;
  if (ok)
    return 0;
  if (agsx_net_link_delete(a->link.host_ifname, err) < 0)
    return agsx_error_wrap(err, "network `%s`: %s; cut the sandbox off", a->net.name, why);
  a->cut = true;
  *ret_cut = xasprintf("cut off from network `%s`: %s", a->net.name, why);
  return 0;
}

void agsx_net_check_memo_clear(struct agsx_net_check_memo *m) {
  free(m->bridges);
  memset(m, 0, sizeof(*m));
}

/* N's bridge's verdict, from MEMO or worked out (and kept there). */
static int bridge_verdict(const struct agsx_network *n, struct agsx_net_check_memo *m, bool *ret_ok,
                          const char **ret_why, agsx_error_t *err) {
  for (size_t i = 0; i < m->n; i++)
    if (strcmp(m->bridges[i].name, n->bridge) == 0) {
      *ret_ok = m->bridges[i].ok;
      *ret_why = m->bridges[i].why;
      return 0;
    }
  if (firewall_intact(n, 0, ret_ok, ret_why, err) < 0)
    return -1;
  m->bridges = xrealloc(m->bridges, (m->n + 1) * sizeof(*m->bridges));
  snprintf(m->bridges[m->n].name, sizeof(m->bridges[m->n].name), "%s", n->bridge);
  m->bridges[m->n].ok = *ret_ok;
  m->bridges[m->n++].why = *ret_why;
  return 0;
}

int agsx_net_sandbox_check(const char *root, const char *network, const char *id,
                           const char *address, struct agsx_net_check_memo *memo,
                           char **ret_problem, agsx_error_t *err) {
  *ret_problem = NULL;
  enum agsx_net_mode mode;
  const char *name = NULL;
  agsx_error_t perr = NULL;
  if (network == NULL || agsx_net_mode_parse(network, &mode, &name, &perr) < 0 ||
      mode == AGSX_NET_INTERNAL) {
    agsx_error_free(&perr);
    return 0;
  }
  struct agsx_network n;
  if ((mode == AGSX_NET_PUBLIC ? agsx_network_public(&n, err)
                               : agsx_network_load(root, name, &n, err)) < 0)
    return -1;
  char veth[16];
  snprintf(veth, sizeof(veth), "agsx%.11s", id);
  uint32_t addr = 0;
  bool ok = true;
  const char *why = NULL;
  int r = 0;
  if (agsx_host_ifindex(veth) == 0)
    *ret_problem =
        xasprintf("cut off from network `%s` (its firewall rules went): restart it", n.name);
  else if (!n.public_ && (address == NULL || agsx_ipv4_parse(address, &addr, NULL) < 0))
    r = agsx_error_set_quiet(err, EINVAL, "no address recorded on network `%s`", n.name);
  else if ((r = bridge_verdict(&n, memo, &ok, &why, err)) == 0 && ok && addr &&
           !guards_present(&n, addr))
    r = why_missing(&why, err);
  if (r == 0 && why)
    *ret_problem = xasprintf("not protected on network `%s`: %s", n.name, why);
  agsx_network_clear(&n);
  return r;
}

/* ---- removal and gc --------------------------------------------------------------------------- */

/* Deletes BRIDGE, its rules and lease directory. The caller holds the
 * lease directory's lock exclusively and saw no lease held. */
static int bridge_remove(const char *bridge, int dir, bool dry_run,
                         void (*report)(const char *, void *), void *data, agsx_error_t *err) {
  _cleanup_dir_ DIR *d = agsx_dir_stream(dir);
  if (d == NULL)
    return agsx_error_set(err, errno, "list leases");
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!is_lease_name(e->d_name))
      continue;
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    agsx_error_t rerr = NULL;
    agsx_read_file_at(dir, e->d_name, LEASE_MAX, &text, &len, &rerr);
    agsx_error_free(&rerr);
    uint32_t addr;
    if (agsx_ipv4_parse(e->d_name, &addr, NULL) == 0)
      lease_leftovers(bridge, text, addr, dry_run);
    if (!dry_run)
      unlinkat(dir, e->d_name, 0);
  }
  if (agsx_host_ifindex(bridge) == 0)
    return 0;
  if (report) {
    _cleanup_free_ char *what = xasprintf("bridge %s", bridge);
    report(what, data);
  }
  if (dry_run)
    return 0;
  uint32_t addr;
  uint8_t prefix;
  if (agsx_net_link_ipv4(bridge, &addr, &prefix, err) < 0 || agsx_net_link_delete(bridge, err) < 0)
    return -1;
  agsx_error_t nerr = NULL;
  char sub[20];
  struct agsx_cidr c = {addr & agsx_cidr_mask(prefix), prefix};
  _cleanup_free_ char *cmds =
      addr ? xasprintf("delete element " TABLE " bridges { \"%s\" }\ndelete element " TABLE
                       " subnets { %s }\n",
                       bridge, agsx_cidr_format(&c, sub))
           : xasprintf("delete element " TABLE " bridges { \"%s\" }\n", bridge);
  agsx_nft_run(cmds, NULL, &nerr);
  agsx_error_free(&nerr);
  _cleanup_free_ char *pub = xasprintf("delete element " TABLE " public { \"%s\" }\n", bridge);
  agsx_nft_run(pub, NULL, &nerr);
  agsx_error_free(&nerr);
  return 0;
}

/* Locks BRIDGE's lease directory exclusively if no lease in it is held.
 * Returns 1 when idle, with the directory in *RET_DIR and its lock in
 * *RET_LOCK (the caller's); 0 when not: there is no lease directory
 * (*RET_USERS 0) or *RET_USERS sandboxes hold leases; -1 on error. */
static int lock_idle(const char *bridge, int *ret_dir, int *ret_lock, int *ret_users,
                     agsx_error_t *err) {
  *ret_dir = *ret_lock = -1;
  *ret_users = 0;
  _cleanup_free_ char *path = xasprintf("%s/%s", agsx_net_run_dir(), bridge);
  _cleanup_close_ int dir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0)
    return errno == ENOENT ? 0 : agsx_error_set(err, errno, "open `%s`", path);
  _cleanup_close_ int lock = agsx_lock_at(dir, ".lock", true, err);
  if (lock < 0)
    return -1;
  _cleanup_dir_ DIR *d = agsx_dir_stream(dir);
  if (d == NULL)
    return agsx_error_set(err, errno, "list leases");
  struct dirent *e;
  while ((e = readdir(d)))
    if (is_lease_name(e->d_name) && lease_held(dir, e->d_name))
      (*ret_users)++;
  if (*ret_users)
    return 0;
  *ret_dir = steal_fd(&dir);
  *ret_lock = steal_fd(&lock);
  return 1;
}

static int remove_loaded(const char *root, const struct agsx_network *n, agsx_error_t *err) {
  _cleanup_close_ int netdir = networks_dir(root, true, err);
  if (netdir < 0)
    return -1;
  _cleanup_close_ int nlock = agsx_lock_at(netdir, ".lock", true, err);
  if (nlock < 0)
    return -1;
  int users = 0;
  _cleanup_close_ int lock = -1, dir = -1;
  int idle = lock_idle(n->bridge, &dir, &lock, &users, err);
  if (idle < 0)
    return -1;
  if (users > 0)
    return agsx_error_set_quiet(err, EBUSY, "network `%s` is in use by %d sandbox%s", n->name,
                                users, users == 1 ? "" : "es");
  if (idle) {
    _cleanup_close_ int glock = global_lock(err);
    if (glock < 0 || bridge_remove(n->bridge, dir, false, NULL, NULL, err) < 0)
      return -1;
    _cleanup_free_ char *path = xasprintf("%s/%s", agsx_net_run_dir(), n->bridge);
    agsx_rm_rf_at(AT_FDCWD, path, NULL);
  } else if (agsx_host_ifindex(n->bridge)) {
    agsx_net_link_delete(n->bridge, NULL);
  }
  _cleanup_free_ char *file = xasprintf("%s.json", n->name);
  if (unlinkat(netdir, file, 0) < 0)
    return agsx_error_set(err, errno, "remove network `%s`", n->name);
  return 0;
}

int agsx_network_remove(const char *root, const char *name, agsx_error_t *err) {
  struct agsx_network n;
  if (agsx_network_load(root, name, &n, err) < 0)
    return -1;
  int r = remove_loaded(root, &n, err);
  agsx_network_clear(&n);
  return r;
}

/* Is there any agsx bridge left in this namespace? */
static bool any_bridge(void) {
  _cleanup_dir_ DIR *d = opendir(agsx_net_run_dir());
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (e->d_name[0] != '.' && agsx_host_ifindex(e->d_name))
      return true;
  return false;
}

/* gc goes on after a failure: the first one becomes *ERR, later ones are
 * warnings. Takes *E; returns -1. */
static int keep_first_error(agsx_error_t *err, agsx_error_t *e) {
  if (err && *err == NULL)
    *err = steal_ptr(e);
  else
    agsx_warn("%s", (*e)->msg);
  agsx_error_free(e);
  return -1;
}

int agsx_net_gc(bool dry_run, void (*report)(const char *what, void *data), void *data,
                agsx_error_t *err) {
  /* An ordinary user's bridges are in the router (net/usernet.h): none
   * when it is not running. */
  if (agsx_rootless() && !agsx_usernet_running())
    return 0;
  _cleanup_dir_ DIR *d = opendir(agsx_net_run_dir());
  if (d == NULL)
    return errno == ENOENT ? 0 : agsx_error_set(err, errno, "open `%s`", agsx_net_run_dir());
  _cleanup_close_ int glock = dry_run ? -1 : global_lock(err);
  if (!dry_run && glock < 0)
    return -1;
  struct dirent *e;
  int r = 0;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.' || !ifname_is_valid(e->d_name))
      continue;
    int dir, lock, users;
    agsx_error_t lerr = NULL;
    int idle = lock_idle(e->d_name, &dir, &lock, &users, &lerr);
    if (idle < 0) {
      agsx_error_wrap(&lerr, "gc: network bridge `%s`", e->d_name);
      r = keep_first_error(err, &lerr);
      continue;
    }
    if (!idle) { /* in use: only the stale leases go */
      _cleanup_close_ int ldir = lease_dir(e->d_name, false, NULL);
      _cleanup_dir_ DIR *ld = ldir >= 0 ? agsx_dir_stream(ldir) : NULL;
      struct dirent *le;
      while (ld && (le = readdir(ld))) {
        if (!is_lease_name(le->d_name))
          continue;
        _cleanup_close_ int fd = openat(ldir, le->d_name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0)
          continue;
        _cleanup_free_ char *text = NULL;
        size_t len = 0;
        agsx_read_fd(fd, LEASE_MAX, &text, &len, NULL);
        uint32_t addr;
        if (text && (strstr(text, "\nvpc\n") || strstr(text, "\negress\n")) &&
            agsx_ipv4_parse(le->d_name, &addr, NULL) == 0) {
          if (report) {
            _cleanup_free_ char *what = xasprintf("rules of %s on %s", le->d_name, e->d_name);
            report(what, data);
          }
          lease_leftovers(e->d_name, text, addr, dry_run);
        }
        if (!dry_run && ftruncate(fd, 0) < 0) {
        }
      }
      continue;
    }
    if (bridge_remove(e->d_name, dir, dry_run, report, data, &lerr) < 0) {
      agsx_error_wrap(&lerr, "gc");
      r = keep_first_error(err, &lerr);
    }
    close(dir);
    close(lock);
    if (!dry_run) {
      _cleanup_free_ char *path = xasprintf("%s/%s", agsx_net_run_dir(), e->d_name);
      agsx_rm_rf_at(AT_FDCWD, path, NULL);
    }
  }
  if (!dry_run && !any_bridge()) {
    agsx_error_t nerr = NULL;
    if (agsx_nft_run("list table " TABLE "\n", NULL, &nerr) == 0) {
      if (report)
        report("nftables table inet agsx", data);
      agsx_nft_run("delete table " TABLE "\n", NULL, NULL);
    }
    agsx_error_free(&nerr);
    /* Nothing uses the user's router any more: it goes, and its pasta. */
    if (agsx_rootless()) {
      if (report)
        report("the user-mode network (router and pasta)", data);
      agsx_usernet_stop();
    }
  }
  return r;
}

/* ---- live security-group updates -------------------------------------------------------------- */

struct member {
  uint32_t addr;
  struct agsx_sg_rule *rules; /* its own (the lease's "sg" lines) */
  size_t n_rules;
};

/* The running members of N's bridge (held leases of vpc sandboxes). */
static int members_of(const struct agsx_network *n, int dir, struct member **ret, size_t *ret_n,
                      agsx_error_t *err) {
  *ret = NULL;
  *ret_n = 0;
  _cleanup_dir_ DIR *d = agsx_dir_stream(dir);
  if (d == NULL)
    return agsx_error_set(err, errno, "list the leases of network `%s`", n->name);
  struct dirent *e;
  while ((e = readdir(d))) {
    uint32_t addr;
    if (!is_lease_name(e->d_name) || !lease_held(dir, e->d_name) ||
        agsx_ipv4_parse(e->d_name, &addr, NULL) < 0)
      continue;
    _cleanup_free_ char *text = NULL;
    size_t len;
    agsx_error_t rerr = NULL;
    if (agsx_read_file_at(dir, e->d_name, LEASE_MAX, &text, &len, &rerr) < 0 ||
        !strstr(text, "\nvpc\n")) {
      agsx_error_free(&rerr);
      continue;
    }
    struct member m = {.addr = addr};
    for (char *l = strstr(text, "\nsg "); l; l = strstr(l + 1, "\nsg ")) {
      char *end = strchr(l + 4, '\n');
      _cleanup_free_ char *line = end ? xstrndup(l + 4, (size_t)(end - l - 4)) : xstrdup(l + 4);
      struct agsx_sg_rule r;
      if (agsx_sg_rule_parse_line(line, &r, NULL) == 0)
        agsx_sg_rules_append(&m.rules, &m.n_rules, &r, NULL);
    }
    *ret = xrealloc(*ret, (*ret_n + 1) * sizeof(**ret));
    (*ret)[(*ret_n)++] = m;
  }
  return 0;
}

static bool private_addr(uint32_t a) {
  static const struct agsx_cidr priv[] = {
      {0x0a000000, 8}, {0x64400000, 10}, {0xac100000, 12}, {0xc0a80000, 16}};
  for (size_t i = 0; i < 4; i++)
    if (agsx_cidr_contains(&priv[i], a))
      return true;
  return false;
}

/* A rule's match (egress_nl.c's sg_match), for one flow: PEER is the remote end. */
static bool rule_hits(const struct agsx_sg_rule *r, uint8_t proto, uint16_t port, uint32_t peer) {
  if (r->peer.prefix != 0 ? !agsx_cidr_contains(&r->peer, peer)
                          : (r->allow && !r->in && private_addr(peer)))
    return false;
  if (r->proto != AGSX_SG_ALL && r->proto != proto)
    return false;
  if (r->port_lo && (proto != AGSX_SG_TCP && proto != AGSX_SG_UDP))
    return false;
  return !r->port_lo || (port >= r->port_lo && port <= r->port_hi);
}

/* The verdict of a member's chain (agsx_vpc_nl_member) on a new flow. */
static bool sg_allows(const struct agsx_network *n, const struct member *m, bool in, uint8_t proto,
                      uint16_t port, uint32_t peer) {
  const struct agsx_sg_rule *sets[2] = {n->rules, m->rules};
  const size_t counts[2] = {n->n_rules, m->n_rules};
  for (int pass = 0; pass < 2; pass++)
    for (int s = 0; s < 2; s++)
      for (size_t i = 0; i < counts[s]; i++) {
        const struct agsx_sg_rule *r = &sets[s][i];
        if (r->allow == (pass == 1) && r->in == in && rule_hits(r, proto, port, peer))
          return r->allow;
      }
  return agsx_cidr_contains(&n->subnet, peer);
}

struct sg_keep {
  const struct agsx_network *n;
  const struct member *m;
  bool in;
};

static bool sg_keep_flow(void *data, const struct agsx_ct_flow *f) {
  const struct sg_keep *k = data;
  return sg_allows(k->n, k->m, k->in, f->proto, f->dport, k->in ? f->src : f->dst);
}

int agsx_network_update(const char *root, const char *name, const struct agsx_sg_rule *rules,
                        size_t n_rules, size_t *ret_members, size_t *ret_cut, agsx_error_t *err) {
  *ret_members = *ret_cut = 0;
  struct agsx_network n;
  if (agsx_network_load(root, name, &n, err) < 0)
    return -1;
  struct member *ms = NULL;
  size_t nm = 0;
  int r = -1;
  _cleanup_free_ char *json = NULL, *file = xasprintf("%s.json", n.name);
  _cleanup_close_ int netdir = networks_dir(root, true, err);
  _cleanup_close_ int nlock = netdir < 0 ? -1 : agsx_lock_at(netdir, ".lock", true, err);
  _cleanup_close_ int dir = nlock < 0 ? -1 : lease_dir(n.bridge, true, err);
  /* Exclusive: no member joins with the old rules meanwhile (reload_rules). */
  _cleanup_close_ int lock = dir < 0 ? -1 : agsx_lock_at(dir, ".lock", true, err);
  if (lock < 0)
    goto out;
  free(n.rules);
  n.rules = NULL;
  n.n_rules = 0;
  for (size_t i = 0; i < n_rules; i++)
    if (agsx_sg_rules_append(&n.rules, &n.n_rules, &rules[i], err) < 0)
      goto out;
  json = agsx_network_to_json(&n, false);
  if (members_of(&n, dir, &ms, &nm, err) < 0)
    goto out;
  /* One batch for every member (egress_nl.h): the chains remade with the
   * new rules, all or none. */
  struct agsx_nfb b;
  agsx_nfb_init(&b);
  for (size_t i = 0; i < nm; i++) {
    const struct agsx_sg_rule *sets[2] = {n.rules, ms[i].rules};
    const size_t counts[2] = {n.n_rules, ms[i].n_rules};
    agsx_vpc_nl_member(&b, n.bridge, &n.subnet, ms[i].addr, sets, counts);
  }
  /* The definition first: a sandbox started from now on gets the new rules. */
  if (agsx_write_file_atomic(netdir, file, json, strlen(json), 0600, err) < 0) {
    agsx_nfb_clear(&b);
    goto out;
  }
  int sent = agsx_nfb_run(&b, err);
  agsx_nfb_clear(&b);
  if (sent < 0) {
    agsx_error_wrap(err, "network `%s`: apply the rules to its %zu sandbox%s", n.name, nm,
                    nm == 1 ? "" : "es");
    goto out;
  }
  *ret_members = nm;
  r = 0;
  for (size_t i = 0; i < nm && r == 0; i++)
    for (int in = 0; in < 2 && r == 0; in++) {
      struct sg_keep k = {&n, &ms[i], in == 1};
      size_t cut = 0;
      r = agsx_conntrack_cut(ms[i].addr, in == 1, sg_keep_flow, &k, &cut, err);
      *ret_cut += cut;
    }
out:
  for (size_t i = 0; i < nm; i++)
    free(ms[i].rules);
  free(ms);
  agsx_network_clear(&n);
  return r;
}
