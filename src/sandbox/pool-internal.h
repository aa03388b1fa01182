/* agsx — sandbox: warm pools, what pool.c (the pool: configuration,
 * entries, fill and refill, create, ls, rm, gc), pool-claim.c (the claim's
 * wire form and the claimer) and pool-sup.c (the parked sandbox's
 * supervisor) share. Not a public header: the layout under STATE/pools and
 * the claim protocol are pool.h's. */
#ifndef AGSX_SANDBOX_POOL_INTERNAL_H
#define AGSX_SANDBOX_POOL_INTERNAL_H

#include "sandbox/pool.h"

#include <sys/un.h>

#define POOL_JSON "pool.json" /* STATE/pools/<name>/pool.json */
#define PARKED "parked"       /* STATE/pools/<name>/parked/<id> */
#define CLAIM_SOCKET "claim"  /* STATE/<id>/claim */

/* pool.c */
/* STATE/pools/NAME (a claimer's and a parking supervisor's way in as
 * well); ENOENT "no such pool". */
int agsx_pool_open_dir(const char *state, const char *name, agsx_error_t *err);
/* The ids of PARKED's entries (at most AGSX_POOL_MAX_SIZE * 2): counted by
 * a fill, stopped by rm, tried in turn by a claimer. */
char **agsx_pool_list_entries(int parked);
/* The manifest digest IMAGE resolves to now ("" for the host image), or
 * NULL (ERR: why): recorded at create, compared with an entry's by a
 * claimer. */
char *agsx_pool_resolve_digest(const char *root, const char *image, agsx_error_t *err);

/* pool-claim.c */
/* The address of the claim socket in DIRFD (STATE/<id>), through
 * /proc/self/fd (a sun_path holds 107 bytes, a state path may be longer):
 * the claimer connects to it, the supervisor binds it. */
void agsx_pool_claim_addr(int dirfd, struct sockaddr_un *a);

#endif
