/* agsx — SHA-256 through OpenSSL's EVP interface. */
#include "config.h"

#include "digest.h"

#include <openssl/evp.h>
#include <string.h>

struct agsx_sha256 {
  EVP_MD_CTX *ctx;
};

agsx_sha256 *agsx_sha256_new(void) {
  agsx_sha256 *h = xzalloc(sizeof(*h));
  h->ctx = EVP_MD_CTX_new();
  if (h->ctx == NULL || EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1)
    abort();
  return h;
}

void agsx_sha256_update(agsx_sha256 *h, const void *data, size_t len) {
  if (len && EVP_DigestUpdate(h->ctx, data, len) != 1)
    abort();
}

void agsx_sha256_final(agsx_sha256 *h, char out[AGSX_DIGEST_LEN]) {
  static const char hex[] = "0123456789abcdef";
  unsigned char md[32];
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(h->ctx, md, &n) != 1 || n != 32)
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
  EVP_MD_CTX_free(h->ctx);
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
