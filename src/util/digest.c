/* agsx — SHA-256 and HMAC-SHA256; OCI digest strings.
 *
 * Two implementations behind one context. Every hash starts in the small
 * portable code below (FIPS 180-4): the seccomp cache key, build cache keys,
 * manifests and API tokens are a few KiB, and the run path must not load
 * libcrypto — linked in, its relocated tables were a fifth of each
 * supervisor's and init's private memory, and its constructor probes the CPU
 * at every exec. Once a context has been given AGSX_SHA256_BULK bytes (a
 * layer, a blob), it loads libcrypto.so.3 with dlopen, moves its state at a
 * block boundary into OpenSSL's SHA256_CTX and goes on with OpenSSL's
 * SHA-NI/AVX2 code, several times faster on GiB layers.
 *
 * The low-level SHA256_* functions, not EVP: EVP's first use initialises
 * OpenSSL (providers, reading openssl.cnf), about 0.8 ms. OpenSSL 3 marks
 * them deprecated, not removed. SHA256_CTX's layout is public (sha.h) and
 * has been the same since OpenSSL 0.9.8.
 *
 * Without libcrypto (Debian's libssl3) large inputs are hashed by the
 * portable code, correctly but slower, after one warning. */
#include "config.h"

#include "util/digest.h"

#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

/* ---- libcrypto, loaded at the first large hash ------------------------------------------- */

static struct {
  int (*init)(SHA256_CTX *c);
  int (*update)(SHA256_CTX *c, const void *data, size_t len);
  int (*final)(unsigned char *md, SHA256_CTX *c);
  bool ok;
} ossl;

static void ossl_load(void) {
  const char *lib = getenv("AGSX_LIBCRYPTO") ? getenv("AGSX_LIBCRYPTO") : "libcrypto.so.3";
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    agsx_warn("fast SHA-256 needs libcrypto (apt-get install libssl3): %s; hashing with "
              "agsx's slower portable code",
              dlerror());
    return;
  }
  void *i = dlsym(h, "SHA256_Init"), *u = dlsym(h, "SHA256_Update"), *f = dlsym(h, "SHA256_Final");
  if (i == NULL || u == NULL || f == NULL) {
    agsx_warn("`%s` has no SHA256_Init/Update/Final; hashing with agsx's slower portable code",
              lib);
    dlclose(h);
    return;
  }
  memcpy(&ossl.init, &i, sizeof(i));
  memcpy(&ossl.update, &u, sizeof(u));
  memcpy(&ossl.final, &f, sizeof(f));
  ossl.ok = true; /* the handle stays open for the process's life */
}

static bool ossl_ready(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, ossl_load);
  return ossl.ok;
}

/* ---- portable SHA-256 (FIPS 180-4, section 6.2) ------------------------------------------ */

struct agsx_sha256 {
  uint32_t h[8];
  uint64_t bytes; /* given so far */
  unsigned char block[64];
  size_t n;  /* bytes in block */
  bool fast; /* OpenSSL's ctx holds the state from now on */
  SHA256_CTX ctx;
};

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static inline uint32_t ror(uint32_t x, unsigned n) { return (x >> n) | (x << (32 - n)); }

static void compress(uint32_t h[8], const unsigned char *p) {
  uint32_t w[64];
  for (int t = 0; t < 16; t++)
    w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 | (uint32_t)p[4 * t + 2] << 8 |
           p[4 * t + 3];
  for (int t = 16; t < 64; t++) {
    uint32_t s0 = ror(w[t - 15], 7) ^ ror(w[t - 15], 18) ^ (w[t - 15] >> 3);
    uint32_t s1 = ror(w[t - 2], 17) ^ ror(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int t = 0; t < 64; t++) {
    uint32_t t1 = k + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K[t] + w[t];
    uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
  h[5] += f;
  h[6] += g;
  h[7] += k;
}

static void portable_update(agsx_sha256 *s, const unsigned char *p, size_t len) {
  s->bytes += len;
  if (s->n) {
    size_t take = 64 - s->n < len ? 64 - s->n : len;
    memcpy(s->block + s->n, p, take);
    s->n += take;
    p += take;
    len -= take;
    if (s->n < 64)
      return;
    compress(s->h, s->block);
    s->n = 0;
  }
  for (; len >= 64; p += 64, len -= 64)
    compress(s->h, p);
  memcpy(s->block, p, len);
  s->n = len;
}

static void portable_final(agsx_sha256 *s, unsigned char md[32]) {
  uint64_t bits = s->bytes * 8;
  unsigned char pad[72] = {0x80};
  size_t padlen = (s->n < 56 ? 56 : 120) - s->n;
  for (int i = 0; i < 8; i++)
    pad[padlen + i] = (unsigned char)(bits >> (56 - 8 * i));
  portable_update(s, pad, padlen + 8);
  for (int i = 0; i < 8; i++) {
    md[4 * i] = (unsigned char)(s->h[i] >> 24);
    md[4 * i + 1] = (unsigned char)(s->h[i] >> 16);
    md[4 * i + 2] = (unsigned char)(s->h[i] >> 8);
    md[4 * i + 3] = (unsigned char)s->h[i];
  }
}

/* Hands the state over to OpenSSL: the chaining value and the length of the
 * whole blocks hashed go into its context, then the partial block is fed to
 * it as input. */
static void go_fast(agsx_sha256 *s) {
  if (ossl.init(&s->ctx) != 1)
    abort();
  uint64_t bits = (s->bytes - s->n) * 8;
  for (int i = 0; i < 8; i++)
    s->ctx.h[i] = s->h[i];
  s->ctx.Nl = (SHA_LONG)bits;
  s->ctx.Nh = (SHA_LONG)(bits >> 32);
  s->ctx.num = 0;
  if (s->n && ossl.update(&s->ctx, s->block, s->n) != 1)
    abort();
  s->fast = true;
}

/* ---- the API ----------------------------------------------------------------------------- */

agsx_sha256 *agsx_sha256_new(void) {
  static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  agsx_sha256 *h = xzalloc(sizeof(*h));
  memcpy(h->h, iv, sizeof(iv));
  return h;
}

void agsx_sha256_update(agsx_sha256 *h, const void *data, size_t len) {
  if (len == 0)
    return;
  if (!h->fast && h->bytes + len >= AGSX_SHA256_BULK && ossl_ready())
    go_fast(h);
  if (h->fast) {
    if (ossl.update(&h->ctx, data, len) != 1)
      abort();
    return;
  }
  portable_update(h, data, len);
}

void agsx_sha256_final_raw(agsx_sha256 *h, unsigned char md[32]) {
  if (h->fast) {
    if (ossl.final(md, &h->ctx) != 1)
      abort();
    return;
  }
  portable_final(h, md);
}

void agsx_sha256_final(agsx_sha256 *h, char out[AGSX_DIGEST_LEN]) {
  static const char hex[] = "0123456789abcdef";
  unsigned char md[32];
  agsx_sha256_final_raw(h, md);
  memcpy(out, "sha256:", 7);
  for (int i = 0; i < 32; i++) {
    out[7 + 2 * i] = hex[md[i] >> 4];
    out[8 + 2 * i] = hex[md[i] & 15];
  }
  out[71] = '\0';
}

bool agsx_sha256_is_fast(const agsx_sha256 *h) { return h->fast; }

void agsx_sha256_free(agsx_sha256 *h) {
  if (h == NULL)
    return;
  explicit_bzero(h, sizeof(*h)); /* HMAC keys pass through */
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

/* RFC 2104: H((K ^ opad) || H((K ^ ipad) || msg)), K padded to a block. */
void agsx_hmac_sha256(const void *key, size_t keylen, const void *msg, size_t len,
                      unsigned char out[32]) {
  unsigned char k[64] = {0}, pad[64];
  if (keylen > 64) {
    _cleanup_sha256_ agsx_sha256 *h = agsx_sha256_new();
    agsx_sha256_update(h, key, keylen);
    agsx_sha256_final_raw(h, k);
  } else if (keylen) {
    memcpy(k, key, keylen);
  }
  _cleanup_sha256_ agsx_sha256 *in = agsx_sha256_new();
  for (int i = 0; i < 64; i++)
    pad[i] = k[i] ^ 0x36;
  agsx_sha256_update(in, pad, 64);
  agsx_sha256_update(in, msg, len);
  unsigned char inner[32];
  agsx_sha256_final_raw(in, inner);
  _cleanup_sha256_ agsx_sha256 *outer = agsx_sha256_new();
  for (int i = 0; i < 64; i++)
    pad[i] = k[i] ^ 0x5c;
  agsx_sha256_update(outer, pad, 64);
  agsx_sha256_update(outer, inner, 32);
  agsx_sha256_final_raw(outer, out);
  explicit_bzero(k, sizeof(k));
  explicit_bzero(pad, sizeof(pad));
  explicit_bzero(inner, sizeof(inner));
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
