/* agsx — dnsfilter: the DNS relay's half of egress rules (egress.h), in the
 * sandbox's supervisor.
 *
 * Queries: a name the rules do not allow is answered REFUSED at once (not
 * forwarded: no name leaves the sandbox, so DNS cannot carry data out);
 * a malformed query or one with several questions gets FORMERR. Answers
 * (with name rules): read as a chain from the question name through its
 * CNAMEs (agsx_dns_answer_chain; what cannot be read gets SERVFAIL). A
 * denied name in the chain: REFUSED, logged, and the chain's addresses
 * into the sandbox's deny set. Otherwise, with an allow-list, the A
 * records of the chain's owners go into the sandbox's sets for the ports
 * of each allowed name of the chain, with their TTL, bounded, in one nft
 * transaction, before the answer is released, and the answer's TTLs are
 * cut to the bound; when a bound refuses an element (ENFILE) the answer
 * is released unopened and logged ("limit"); when the transaction fails
 * otherwise the client gets SERVFAIL (the connect would fail anyway). An
 * address written with more than half its TTL left is not written again
 * (no nft call): a client's repeated lookups cost no transaction.
 *
 * Denied names (exact ones): looked up by the filter itself, on a socket
 * of its own to the relay's name server, when the rules (re)load and
 * again before the answer's TTL runs out (a query unanswered is sent
 * again, a second apart, three times, then a new round two seconds
 * later); their chains' addresses go into the deny set, for their TTL
 * (bounded) and ten seconds more, the time to look them up again. The
 * sandbox is closed (egress.h: its chain's closing rule) while any is not
 * recorded: not yet resolved (only NOERROR and NXDOMAIN answers, not cut
 * short, resolve), its addresses refused by the set's bound or a failed
 * transaction, or their time run out without a new answer. So is it, for
 * the answer's TTL, when a sandbox's answer through a denied name (an
 * alias, a wildcard) brings addresses that cannot be recorded. The log
 * says so ("closed", with the name and the reason: unresolved, limit,
 * error). An update keeps what was known of the names still denied.
 *
 * The blocked log: denied queries (name, type), refused connections
 * (address, port, protocol, read from the nflog group of the sandbox's
 * refusing chain, rate-limited there), answers a bound kept closed
 * ("limit") and the closings above are counted per distinct entry with
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
#include <sys/socket.h>

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

/* The name server the relay forwards to, SS: the filter looks up each
 * name its rules deny (not a wildcard) there itself, and closes its
 * addresses (xd_ADDR, egress.h) for their TTL, asking again before it runs
 * out; the first answers are waited for here, at most a second, so that
 * they are closed before the sandbox's command runs, and the sandbox's
 * egress, closed by its start, opens (or stays closed, logged). */
void agsx_dns_filter_set_upstream(struct agsx_dns_filter *f, const struct sockaddr_storage *ss);

/* A poll component (relay.h's shape): the nflog socket, the denied names'
 * lookups (their socket and due times), the log's flush. */
size_t agsx_dns_filter_nfds(const struct agsx_dns_filter *f);
size_t agsx_dns_filter_fill(struct agsx_dns_filter *f, struct pollfd *p);
void agsx_dns_filter_dispatch(struct agsx_dns_filter *f, const struct pollfd *p, size_t n);
int agsx_dns_filter_timeout_ms(const struct agsx_dns_filter *f);

/* Counters, for tests and the benchmark. */
struct agsx_dns_filter_stats {
  uint64_t refused, answered, nft_calls, nft_failed, logged;
  uint64_t limited; /* answers released with addresses a bound kept closed */
  int log_group;    /* -1: none */
};
void agsx_dns_filter_stats(const struct agsx_dns_filter *f, struct agsx_dns_filter_stats *ret);

/* Is a sandbox closed at NOW_MS, whose N denied names' addresses are
 * recorded until OK_UNTIL_MS[i] (0: not yet; INT64_MAX: none to record),
 * and a denied chain's unrecorded until BROKEN_UNTIL_MS? *RET_NEXT_MS: the
 * next time the answer changes by itself (INT64_MAX: never). Pure. */
bool agsx_dns_deny_closed(const int64_t *ok_until_ms, size_t n, int64_t broken_until_ms,
                          int64_t now_ms, int64_t *ret_next_ms);

/* ---- DNS messages (pure; fuzzed) ---- */
/* The question of MSG: its canonical name into NAME (AGSX_EGRESS_NAME_MAX
 * + 1), type and the offset just past it. -1 unless exactly one question. */
int agsx_dns_question(const unsigned char *msg, size_t len, char *name, uint16_t *ret_type,
                      size_t *ret_end);
/* The names an answer is for: its question's, then the CNAME targets it
 * leads to, in order. */
#define AGSX_DNS_CHAIN_MAX 8
struct agsx_dns_chain {
  char names[AGSX_DNS_CHAIN_MAX][AGSX_EGRESS_NAME_MAX + 1];
  size_t n;
};
/* Walks MSG's answer section as a chain from its question name: the CNAME
 * of the chain's last name (class IN, wherever it is in the section) adds
 * its target, until a name has none; then calls FN for each A record (IN)
 * whose owner is in the chain, and for no other. -1 if malformed, or for a
 * name with two CNAMEs, a loop, a chain longer than AGSX_DNS_CHAIN_MAX, or
 * a target that is no name a rule can match. */
int agsx_dns_answer_chain(const unsigned char *msg, size_t len, struct agsx_dns_chain *c,
                          void (*fn)(void *data, uint32_t addr, uint32_t ttl), void *data);
/* Cuts the TTL of every record of MSG's answer section to at most MAX
 * (clients then ask again before the addresses close). -1 if malformed. */
int agsx_dns_cap_ttl(unsigned char *msg, size_t len, uint32_t max);

#endif
