/* agsx — SHA-256 through OpenSSL's libcrypto.
 *
 * The low-level SHA256_* functions, not EVP: EVP's first use initialises
 * OpenSSL (providers, reading openssl.cnf), about 0.8 ms, which would be a
 * sixth of a sandbox's start-up. SHA256_* is the same SHA-NI/AVX code
 * without that. OpenSSL 3 marks it deprecated, not removed. */
#include "config.h"

#include "util/digest.h"

#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>
#include <string.h>

struct agsx_sha256 {
  SHA256_CTX ctx;
};

agsx_sha256 *agsx_sha256_new(void) {
  agsx_sha256 *h = xzalloc(sizeof(*h));
  if (SHA256_Init(&h->ctx) != 1)
    abort();
  return h;
}

void agsx_sha256_update(agsx_sha256 *h, const void *data, size_t len) {
  if (len && SHA256_Update(&h->ctx, data, len) != 1)
    abort();
}

void agsx_sha256_final(agsx_sha256 *h, char out[AGSX_DIGEST_LEN]) {
  static const char hex[] = "0123456789abcdef";
  unsigned char md[SHA256_DIGEST_LENGTH];
  if (SHA256_Final(md, &h->ctx) != 1)
    abort();
  memcpy(out, "sha256:", 7);
  for (int i = 0; i < 32; i++) {
    out[7 + 2 * i] = hex[md[i] >> 4];
    out[8 + 2 * i] = hex[md[i] & 15];
  }
  out[71] = '\0';
}

void agsx_sha256_free(agsx_sha256 *h) {
  if (h == NULL)
    return;
  free(h);
}

void agsx_sha256_freep(agsx_sha256 **h) {
  agsx_sha256_free(*h);
  *h = NULL;
}

void agsx_sha256_buf(const void *data, size_t len, char out[AGSX_DIGEST_LEN]) {
  _cleanup_sha256_ agsx_sha256 *h = agsx_sha256_new();
  agsx_sha256_update(h, data, len);
  agsx_sha256_final(h, out);
}

int agsx_digest_validate(const char *digest, agsx_error_t *err) {
  if (digest == NULL)
    return agsx_error_set(err, 0, "missing digest");
  const char *colon = strchr(digest, ':');
  if (colon == NULL)
    return agsx_error_set(err, 0, "invalid digest `%.80s`: no algorithm", digest);
  if (strncmp(digest, "sha256:", 7) != 0)
    return agsx_error_set(err, 0, "unsupported digest algorithm in `%.80s` (only sha256)", digest);
  const char *hex = digest + 7;
  if (strlen(hex) != 64)
    return agsx_error_set(err, 0, "invalid digest `%.80s`: expected 64 hex digits", digest);
  for (int i = 0; i < 64; i++)
    if (!((hex[i] >= '0' && hex[i] <= '9') || (hex[i] >= 'a' && hex[i] <= 'f')))
      return agsx_error_set(err, 0, "invalid digest `%.80s`: not lowercase hex", digest);
  return 0;
}

const char *agsx_digest_hex(const char *digest) { return digest + 7; }
