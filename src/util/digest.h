/* agsx — digest: SHA-256 (OpenSSL libcrypto) and OCI digest strings. */
#ifndef AGSX_DIGEST_H
#define AGSX_DIGEST_H

#include "util/util.h"

/* "sha256:" + 64 hex + NUL */
#define AGSX_DIGEST_LEN 72

typedef struct agsx_sha256 agsx_sha256;
agsx_sha256 *agsx_sha256_new(void);
void agsx_sha256_update(agsx_sha256 *h, const void *data, size_t len);
/* Writes "sha256:<hex>" into OUT; the context can then be freed. */
void agsx_sha256_final(agsx_sha256 *h, char out[AGSX_DIGEST_LEN]);
void agsx_sha256_free(agsx_sha256 *h);
void agsx_sha256_freep(agsx_sha256 **h);
#define _cleanup_sha256_ _cleanup_(agsx_sha256_freep)

void agsx_sha256_buf(const void *data, size_t len, char out[AGSX_DIGEST_LEN]);

/* A digest agsx accepts: "sha256:" and 64 lowercase hex digits. Other
 * algorithms are refused rather than trusted unverified. */
int agsx_digest_validate(const char *digest, agsx_error_t *err);
/* The hex part of a validated digest. */
const char *agsx_digest_hex(const char *digest);

#endif
