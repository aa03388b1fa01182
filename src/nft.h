/* agsx — nft: nftables rules through libnftables.
 *
 * libnftables is loaded with dlopen() when a network needs rules, not
 * linked: its shared dependencies would cost every `agsx` invocation
 * ~0.6 ms of dynamic loading, and `internal` sandboxes never need it. */
#ifndef AGSX_NFT_H
#define AGSX_NFT_H

#include "util.h"

/* Runs nft commands (the nft(8) language) as one atomic transaction. With
 * RET_OUT, the output (for list commands) is returned. Errors carry the
 * first line nft reported. */
int agsx_nft_run(const char *cmds, char **ret_out, agsx_error_t *err);

#endif
