/* agsx — conntrack: cutting a sandbox's tracked connections (ctnetlink).
 *
 * After a live change of rules, connections already established would go
 * on under the old ones (the rules let established flows through). So the
 * change deletes the conntrack entries of the sandbox's connections that
 * the new rules refuse: their next packet is new again, is checked, and is
 * refused (a TCP reset). Entries the new rules allow are left alone. */
#ifndef AGSX_NET_CONNTRACK_H
#define AGSX_NET_CONNTRACK_H

#include "util/util.h"

#include <stdint.h>

struct agsx_ct_flow {
  uint32_t src, dst; /* the original direction, host byte order */
  uint8_t proto;
  uint16_t sport, dport;
};

/* Deletes every IPv4 entry whose original direction matches FROM (source
 * address FROM, or destination address when BY_DST) and that KEEP (may be
 * NULL: none) does not keep. *RET_CUT (optional) counts them. */
int agsx_conntrack_cut(uint32_t addr, bool by_dst,
                       bool (*keep)(void *data, const struct agsx_ct_flow *f), void *data,
                       size_t *ret_cut, agsx_error_t *err);

#endif
