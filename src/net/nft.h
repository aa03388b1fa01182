/* agsx — nft: nftables rules through libnftables.
 *
 * libnftables is loaded with dlopen() when a network needs rules, not
 * linked: its shared dependencies would cost every `agsx` invocation
 * ~0.6 ms of dynamic loading, and `internal` sandboxes never need it. */
#ifndef AGSX_NFT_H
#define AGSX_NFT_H

#include "util/util.h"

/* Runs nft commands (the nft(8) language) as one atomic transaction. With
 * RET_OUT, the output (for list commands) is returned. Errors carry the
 * first line nft reported. */
int agsx_nft_run(const char *cmds, char **ret_out, agsx_error_t *err);
/* The same with JSON output (libnftables-json(5)), for list commands. */
int agsx_nft_run_json(const char *cmds, char **ret_out, agsx_error_t *err);
/* Loads libnftables (done by agsx_nft_run): tells "no library" apart from
 * a command that failed. */
int agsx_nft_load(agsx_error_t *err);

/* A socket (non-blocking) that hears every change to the nftables ruleset
 * of the current network namespace, for a poll loop. */
int agsx_nft_watch_open(agsx_error_t *err);
/* Reads what FD heard so far: *RET_REMOVED when anything was removed from
 * table inet TABLE (or messages were lost, so it may have been), other
 * sandboxes' egress objects aside for the sandbox at address SELF (0: none). */
int agsx_nft_watch_read(int fd, const char *table, uint32_t self, bool *ret_removed);

#endif
