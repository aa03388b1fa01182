/* agsx — dnsfilter: the DNS relay's half of egress rules (egress.h), in the
 * sandbox's supervisor.
 *
 * Queries: a name the rules do not allow is answered REFUSED at once (not
 * forwarded: no name leaves the sandbox, so DNS cannot carry data out);
 * a malformed query or one with several questions gets FORMERR. Answers:
 * the A records of an allowed name's answer section (CNAME targets
 * included) go into the sandbox's sets with their TTL, bounded, in one nft
 * transaction, before the answer is released; when that fails the client
 * gets SERVFAIL (the connect would fail anyway). An address written with
 * more than half its TTL left is not written again (no nft call): a
 * client's repeated lookups cost no transaction.
 *
 * The blocked log: denied queries (name, type) and refused connections
 * (address, port, protocol, read from the nflog group of the sandbox's
 * refusing chain, rate-limited there) are counted per distinct entry with
 * their first and last time, at most AGSX_EGRESS_LOG_MAX entries (the least
 * recently seen goes), and written to STATE/ID/netlog (JSON, atomically, at
 * most once a second) where `agsx logs --network` reads them.
 *
 * Live updates: `agsx update --egress…` writes STATE/ID/egress.json under
 * the lock STATE/ID/egress.lock; the filter reloads it when it changed, and
 * holds the lock (shared) while it checks a name and adds its addresses, so
 * no address of a name just denied slips in after the update. */
#ifndef AGSX_NET_DNSFILTER_H
#define AGSX_NET_DNSFILTER_H

#include "net/egress.h"
#include "util/util.h"

#include <poll.h>

#define AGSX_DNS_FILTER_FLUSH_MS 1000

struct agsx_dns_filter;

/* For sandbox ID at ADDR with rules E (copied), its vpc SUBNET (or NULL),
 * its state under STATE_DIR (NULL: no log, no live updates). NFLOG (taken
 * over) is the socket bound to LOG_GROUP, the group the refusing chain was
 * made with (agsx_dns_filter_nflog_open), or -1: then, with rules, the
 * filter binds one and points the chain at it (without one, connections
 * are still refused, only not logged). */
struct agsx_dns_filter *agsx_dns_filter_new(const struct agsx_egress *e, uint32_t addr,
                                            const struct agsx_cidr *subnet, const char *state_dir,
                                            const char *id, int nflog, int log_group,
                                            agsx_error_t *err);
/* A non-blocking nflog socket bound to a free group (*RET_GROUP), or -1. */
int agsx_dns_filter_nflog_open(int *ret_group);
void agsx_dns_filter_free(struct agsx_dns_filter *f);

enum agsx_dns_verdict { AGSX_DNS_PASS, AGSX_DNS_REPLY, AGSX_DNS_DROP };
/* A query from the sandbox, MSG of *LEN bytes in a buffer of CAP: PASS (to
 * forward), or REPLY: MSG now holds the answer to send back. */
enum agsx_dns_verdict agsx_dns_filter_query(struct agsx_dns_filter *f, char *msg, size_t *len,
                                            size_t cap);
/* An answer from the name server: PASS (release it), REPLY (MSG is now a
 * SERVFAIL) or DROP (not an answer to pass on). */
enum agsx_dns_verdict agsx_dns_filter_answer(struct agsx_dns_filter *f, char *msg, size_t *len);

/* A poll component (relay.h's shape): the nflog socket, the log's flush. */
size_t agsx_dns_filter_nfds(const struct agsx_dns_filter *f);
size_t agsx_dns_filter_fill(struct agsx_dns_filter *f, struct pollfd *p);
void agsx_dns_filter_dispatch(struct agsx_dns_filter *f, const struct pollfd *p, size_t n);
int agsx_dns_filter_timeout_ms(const struct agsx_dns_filter *f);

/* Counters, for tests and the benchmark. */
struct agsx_dns_filter_stats {
  uint64_t refused, answered, nft_calls, nft_failed, logged;
  int log_group; /* -1: none */
};
void agsx_dns_filter_stats(const struct agsx_dns_filter *f, struct agsx_dns_filter_stats *ret);

/* ---- DNS messages (pure; fuzzed) ---- */
/* The question of MSG: its canonical name into NAME (AGSX_EGRESS_NAME_MAX
 * + 1), type and the offset just past it. -1 unless exactly one question. */
int agsx_dns_question(const unsigned char *msg, size_t len, char *name, uint16_t *ret_type,
                      size_t *ret_end);
/* Calls FN for each A record (IN) of MSG's answer section. -1 if malformed. */
int agsx_dns_answers_a(const unsigned char *msg, size_t len,
                       void (*fn)(void *data, uint32_t addr, uint32_t ttl), void *data);

#endif
