/* agsx — ranges: the layers of an ordinary user's sandbox that has an id
 * range of its own.
 *
 * An ordinary user's namespace (host/rootless.h) maps as many ranges of
 * 65536 ids as the user's subordinate ids hold (up to 64). Image layers
 * are unpacked with range 0's ids, and an unprivileged user may not idmap
 * a host filesystem (the kernel wants CAP_SYS_ADMIN over the filesystem's
 * own user namespace, the host's), so a sandbox in range K > 0 sees each
 * lower layer X/layers/NAME (X: the store, or the state directory for a
 * fork's and a snapshot's layers) through a copy of it, owned by range K:
 *
 *     X/ranges/K/NAME         the copy, made at the first start in K
 *     X/ranges/K/.tmp-NAME    a copy being made (or an interrupted one)
 *
 * Only the holder of range K's lock (sandbox/userns.h) writes X/ranges/K,
 * so making a copy needs no lock of its own. A copy costs the layer's size
 * on disk once per range, and its copying time at the first start of the
 * image in that range; ranges are taken lowest first, so a user's few
 * concurrent sandboxes reuse the same few copies. */
#ifndef AGSX_SANDBOX_RANGES_H
#define AGSX_SANDBOX_RANGES_H

#include "sandbox/userns.h"
#include "util/util.h"

#include <stdbool.h>

/* The lower layers LAYERS (N paths X/layers/NAME) as a sandbox with the
 * ids IDS sees them: LAYERS themselves in the shared range (or as root),
 * else the range's copies, made when missing. *RET: a new vector. */
int agsx_range_layers(const struct agsx_idrange *ids, char *const *layers, size_t n, char ***ret,
                      agsx_error_t *err);

/* Removes, in X/ranges of every range no sandbox holds, the copies whose
 * layer X/layers/NAME is gone and the interrupted ones (all of them for a
 * range the user's namespace no longer maps), reporting each "range copy
 * K/NAME" to REPORT (may be NULL). */
void agsx_range_gc(const char *x, bool dry_run, void (*report)(const char *what, void *data),
                   void *data);

#endif
