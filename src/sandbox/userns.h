/* agsx — userns: per-sandbox host uid/gid ranges and id maps.
 *
 * Each sandbox maps its ids 0–65535 onto a host range of its own:
 * AGSX_UID_BASE + slot * 65536. A slot is owned by whoever holds the flock
 * on AGSX_SLOTS_DIR/<slot> (host-wide, whatever --state is): the lock dies
 * with its holder, so a crash frees
 * the slot and two sandboxes can never share a range. The ranges sit above
 * systemd's container range (0x80000–0x6fffffff) and never include host
 * root. */
#ifndef AGSX_USERNS_H
#define AGSX_USERNS_H

#include "util/util.h"

#define AGSX_UID_BASE 0x70000000u
#define AGSX_UID_RANGE 65536u
#define AGSX_UID_SLOTS 4095u
#define AGSX_SLOTS_DIR "/run/agsx-uid-ranges"

struct agsx_idrange {
  unsigned slot;
  uid_t base; /* host id of sandbox id 0 */
  int lockfd; /* held for the sandbox's life */
};

/* Takes a free slot: as root, any of AGSX_SLOTS_DIR's. */
int agsx_userns_reserve(int statefd, struct agsx_idrange *ret, agsx_error_t *err);
/* An ordinary user's agsx (host/rootless.h) takes, for a sandbox, the
 * lowest free range of the user's namespace but range 0, whose flock is
 * STATE/uid-ranges/<slot> (STATE: the user's, agsx_rootless_state), at
 * base slot * 65536 of the user's namespace; when the user's namespace
 * has one range, or all are taken, the shared range 0 (no lock). */
#define AGSX_USER_SLOTS_DIR "uid-ranges"
int agsx_userns_reserve_shared(struct agsx_idrange *ret);
/* The user's slot locks directory (made when missing). */
int agsx_userns_open_user_slots(agsx_error_t *err);
void agsx_userns_release(struct agsx_idrange *r);
/* OCI containers outlive the process that reserved their range (the
 * engine, not an agsx supervisor, is their init's parent): the holder
 * writes a lease, the init's pid and start time, into the slot file before
 * it lets the flock go. A slot with a lease naming a live process stays
 * taken; an empty (native sandboxes write none) or stale lease is free.
 * A pod's containers share one range: each adds its own lease line
 * (agsx_userns_share_slot, then agsx_userns_lease), so that the range
 * stays taken while any of them lives. agsx_userns_lease drops dead lines
 * as it adds; agsx_userns_unlease removes SLOT's line for PID, if there. */
/* Takes SLOT's flock (retrying for up to 5 s while a create holds it) for
 * one more lease on a range that is leased now; EBUSY if a native sandbox
 * holds it, ESRCH if no lease is live. The caller checked that the range
 * is the one of the user namespace it joins. */
int agsx_userns_share_slot(unsigned slot, struct agsx_idrange *ret, agsx_error_t *err);
int agsx_userns_lease(const struct agsx_idrange *r, pid_t pid, uint64_t start_time,
                      agsx_error_t *err);
int agsx_userns_unlease(unsigned slot, pid_t pid, uint64_t start_time, agsx_error_t *err);
/* Writes uid_map and gid_map of PID: "0 BASE 65536". setgroups stays
 * allowed: the maps are written by host root and hold no host group the
 * sandbox could drop to escape a negative ACL. */
int agsx_userns_write_maps(pid_t pid, uid_t base, agsx_error_t *err);

#endif
