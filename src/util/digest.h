/* agsx — digest: SHA-256, HMAC-SHA256 and OCI digest strings. Small inputs
 * are hashed by agsx's own code; a context given AGSX_SHA256_BULK bytes loads
 * libcrypto.so.3 (dlopen) and goes on with OpenSSL's SHA-NI/AVX2 code, so a
 * process that never hashes much never maps libcrypto (see digest.c). */
#ifndef AGSX_DIGEST_H
#define AGSX_DIGEST_H

#include "util/util.h"

/* "sha256:" + 64 hex + NUL */
#define AGSX_DIGEST_LEN 72

/* Input size from which a context switches to libcrypto. */
#define AGSX_SHA256_BULK (64 * 1024)

typedef struct agsx_sha256 agsx_sha256;
agsx_sha256 *agsx_sha256_new(void);
void agsx_sha256_update(agsx_sha256 *h, const void *data, size_t len);
/* Writes "sha256:<hex>" into OUT; the context can then be freed. */
void agsx_sha256_final(agsx_sha256 *h, char out[AGSX_DIGEST_LEN]);
/* The 32 bytes of the digest. */
void agsx_sha256_final_raw(agsx_sha256 *h, unsigned char md[32]);
void agsx_sha256_free(agsx_sha256 *h);
void agsx_sha256_freep(agsx_sha256 **h);
#define _cleanup_sha256_ _cleanup_(agsx_sha256_freep)

/* Whether the context has switched to libcrypto (for the tests). */
bool agsx_sha256_is_fast(const agsx_sha256 *h);

void agsx_sha256_buf(const void *data, size_t len, char out[AGSX_DIGEST_LEN]);

/* HMAC-SHA256 (RFC 2104) of MSG under KEY into OUT. */
void agsx_hmac_sha256(const void *key, size_t keylen, const void *msg, size_t len,
                      unsigned char out[32]);

/* A digest agsx accepts: "sha256:" and 64 lowercase hex digits. Other
 * algorithms are refused rather than trusted unverified. */
int agsx_digest_validate(const char *digest, agsx_error_t *err);
/* The hex part of a validated digest. */
const char *agsx_digest_hex(const char *digest);

#endif
