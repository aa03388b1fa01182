/* agsx — api: the server's credentials.
 *
 * The API key guards the control plane (X-API-KEY). It is the one secret
 * the server keeps: given (--api-key, $AGSX_API_KEY) or read from a file
 * (default /etc/agsx/api-key), which is generated on first start as
 * `e2b_` + 40 hex digits (the SDKs' format; Python checks it), mode 0600,
 * and refused when anyone but root may read or write it.
 *
 * Each sandbox's envd access token (X-Access-Token on its envd routes) and
 * traffic access token (its other ports) are derived, not stored:
 * HMAC-SHA256 of a label and the sandbox id under the API key, hex. So the server keeps no table of tokens and a restarted server knows
 * them all; a new API key revokes every token (clients get fresh ones from
 * Sandbox.connect). Comparisons take constant time. */
#ifndef AGSX_API_AUTH_H
#define AGSX_API_AUTH_H

#include "util/util.h"

#define AGSX_API_KEY_FILE "/etc/agsx/api-key"
#define AGSX_API_KEY_MIN 8
#define AGSX_API_KEY_MAX 256

/* An acceptable key: 8 to 256 printable ASCII characters, no spaces. */
bool agsx_api_key_is_valid(const char *key);
/* Reads the key from PATH, generating the file when it does not exist.
 * *RET_CREATED: it was generated now. */
int agsx_api_key_load(const char *path, char **ret_key, bool *ret_created, agsx_error_t *err);
/* The envd access token of sandbox ID (its 32 hex digits) under KEY. */
void agsx_api_envd_token(const char *key, const char *id, char ret[65]);
/* Its traffic access token (E2B's trafficAccessToken: E2B-Traffic-Access-
 * Token on the sandbox's ports other than envd's), derived the same way
 * under another label: it opens those ports, not envd. */
void agsx_api_traffic_token(const char *key, const char *id, char ret[65]);
/* A and B are equal (time independent of where they differ; NULL is
 * never equal). */
bool agsx_api_secret_equal(const char *a, const char *b);

#endif
