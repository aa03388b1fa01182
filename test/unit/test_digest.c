/* Unit tests: sha256 (FIPS 180-4 / NIST vectors, the hand-over to libcrypto),
 * HMAC-SHA256 (RFC 4231) and digest strings. */
#include "config.h"

#include "api/auth.h"
#include "util/digest.h"
#include "tap.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static bool maps_libcrypto(void) {
  FILE *f = fopen("/proc/self/maps", "re");
  char line[512];
  bool found = false;
  if (f == NULL)
    return false;
  while (fgets(line, sizeof(line), f))
    if (strstr(line, "libcrypto"))
      found = true;
  fclose(f);
  return found;
}

/* Hashes LEN bytes of DATA fed in pieces of CHUNK bytes. */
static void hash_chunked(const unsigned char *data, size_t len, size_t chunk,
                         char out[AGSX_DIGEST_LEN], bool *fast) {
  agsx_sha256 *h = agsx_sha256_new();
  for (size_t off = 0; off < len; off += chunk)
    agsx_sha256_update(h, data + off, len - off < chunk ? len - off : chunk);
  *fast = agsx_sha256_is_fast(h);
  agsx_sha256_final(h, out);
  agsx_sha256_free(h);
}

static const char million_a[] =
    "sha256:cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";

static unsigned char *pattern(size_t len) {
  unsigned char *p = malloc(len);
  uint32_t x = 2463534242u;
  for (size_t i = 0; i < len; i++) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    p[i] = (unsigned char)x;
  }
  return p;
}

#define BIG (1024 * 1024 + 13)
static const size_t chunks[] = {1, 63, 64, 65, 4097, 65536, 65537, BIG};

static void hmac_is(const void *key, size_t klen, const char *msg, size_t trunc, const char *want,
                    const char *name) {
  unsigned char md[32];
  char hex[65];
  agsx_hmac_sha256(key, klen, msg, strlen(msg), md);
  for (size_t i = 0; i < trunc; i++)
    snprintf(hex + 2 * i, 3, "%02x", md[i]);
  tap_is_str(hex, want, "HMAC-SHA256 %s", name);
}

int main(int argc, char **argv) {
  /* A child hashes with libcrypto missing: the portable code alone. It
   * prints the big pattern's digest for each chunk size. */
  if (argc > 1 && strcmp(argv[1], "--portable") == 0) {
    unsigned char *p = pattern(BIG);
    char d[AGSX_DIGEST_LEN];
    bool fast;
    for (size_t i = 0; i < AGSX_ARRAY_SIZE(chunks); i++) {
      hash_chunked(p, BIG, chunks[i], d, &fast);
      printf("%s %d\n", d, fast);
    }
    memset(p, 'a', 1000000);
    hash_chunked(p, 1000000, 1000, d, &fast);
    printf("%s %d %d\n", d, fast, maps_libcrypto());
    free(p);
    return 0;
  }

  char d[AGSX_DIGEST_LEN];
  agsx_sha256_buf("", 0, d);
  tap_is_str(d, "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
             "sha256 of empty");
  agsx_sha256_buf("abc", 3, d);
  tap_is_str(d, "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
             "sha256 of abc");
  static const char m448[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  char d448[AGSX_DIGEST_LEN];
  agsx_sha256_buf(m448, strlen(m448), d448);
  tap_is_str(d448, "sha256:248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
             "sha256 of the 448-bit NIST message");
  static const char m896[] = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
                             "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
  agsx_sha256_buf(m896, strlen(m896), d448);
  tap_is_str(d448, "sha256:cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1",
             "sha256 of the 896-bit NIST message");
  /* Every padding length: 55, 56, 63, 64 bytes and around. */
  for (size_t n = 50; n <= 130; n++) {
    char *m = malloc(n);
    memset(m, 'x', n);
    char one[AGSX_DIGEST_LEN], two[AGSX_DIGEST_LEN];
    agsx_sha256_buf(m, n, one);
    agsx_sha256 *h = agsx_sha256_new();
    for (size_t i = 0; i < n; i++)
      agsx_sha256_update(h, m + i, 1);
    agsx_sha256_final(h, two);
    agsx_sha256_free(h);
    free(m);
    if (strcmp(one, two) != 0)
      tap_ok(0, "byte-wise equals one-shot at %zu bytes", n);
  }
  agsx_sha256 *h = agsx_sha256_new();
  agsx_sha256_update(h, "a", 1);
  agsx_sha256_update(h, "bc", 2);
  char d2[AGSX_DIGEST_LEN];
  agsx_sha256_final(h, d2);
  agsx_sha256_free(h);
  tap_is_str(d2, d, "streaming equals one-shot");
  tap_ok(!maps_libcrypto(), "small hashes do not load libcrypto");

  /* The same inputs with libcrypto missing, in a child. */
  int fds[2];
  if (pipe(fds) < 0)
    abort();
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    setenv("AGSX_LIBCRYPTO", "/nonexistent/libcrypto.so.3", 1);
    execl("/proc/self/exe", argv[0], "--portable", (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  FILE *child = fdopen(fds[0], "r");
  char line[256];

  unsigned char *p = pattern(BIG);
  char want[AGSX_DIGEST_LEN];
  bool fast;
  hash_chunked(p, BIG, BIG, want, &fast);
  tap_ok(fast, "a %d-byte input switches to libcrypto", BIG);
  tap_ok(maps_libcrypto(), "libcrypto loaded by the large hash");
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(chunks); i++) {
    hash_chunked(p, BIG, chunks[i], d, &fast);
    tap_is_str(d, want, "chunks of %zu bytes, switching mid-stream, give the same digest",
               chunks[i]);
    tap_ok(fast, "chunks of %zu bytes end in libcrypto", chunks[i]);
    char got[128];
    snprintf(got, sizeof(got), "%s 0\n", want);
    tap_is_str(fgets(line, sizeof(line), child), got,
               "without libcrypto, chunks of %zu bytes: same digest, portable code", chunks[i]);
  }
  memset(p, 'a', 1000000);
  hash_chunked(p, 1000000, 1000, d, &fast);
  tap_is_str(d, million_a, "sha256 of a million `a` (NIST)");
  char want_child[128];
  snprintf(want_child, sizeof(want_child), "%s 0 0\n", million_a);
  tap_is_str(fgets(line, sizeof(line), child), want_child,
             "without libcrypto: a million `a`, portable code, libcrypto not mapped");
  fclose(child);
  int status;
  tap_ok(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
         "portable child exits 0");
  free(p);

  /* RFC 4231 test cases 1-7. */
  unsigned char k[131];
  memset(k, 0x0b, 20);
  hmac_is(k, 20, "Hi There", 32, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
          "RFC 4231 case 1");
  hmac_is("Jefe", 4, "what do ya want for nothing?", 32,
          "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", "RFC 4231 case 2");
  char msg[51];
  memset(k, 0xaa, 20);
  memset(msg, 0xdd, 50);
  msg[50] = '\0';
  hmac_is(k, 20, msg, 32, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe",
          "RFC 4231 case 3");
  for (int i = 0; i < 25; i++)
    k[i] = (unsigned char)(i + 1);
  memset(msg, 0xcd, 50);
  hmac_is(k, 25, msg, 32, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
          "RFC 4231 case 4");
  memset(k, 0x0c, 20);
  hmac_is(k, 20, "Test With Truncation", 16, "a3b6167473100ee06e0c796c2955552b",
          "RFC 4231 case 5 (truncated)");
  memset(k, 0xaa, 131);
  hmac_is(k, 131, "Test Using Larger Than Block-Size Key - Hash Key First", 32,
          "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54", "RFC 4231 case 6");
  hmac_is(k, 131,
          "This is a test using a larger than block-size key and a larger than block-size data."
          " The key needs to be hashed before being used by the HMAC algorithm.",
          32, "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
          "RFC 4231 case 7");
  hmac_is("", 0, "", 32, "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad",
          "empty key and message");

  /* The envd token is derived, never stored: it must stay what OpenSSL's
   * HMAC gave (`openssl dgst -sha256 -hmac e2b_key1`). */
  char tok[65];
  agsx_api_envd_token("e2b_key1", "0123456789abcdef0123456789abcdef", tok);
  tap_is_str(tok, "8e52d3aa554221b601a34b4968b55cad5d3d54e75096c77292760ec42bb63c7e",
             "envd token unchanged");
  tap_is_int(agsx_digest_validate(d2, NULL), 0, "valid digest");
  agsx_error_t err = NULL;
  tap_ok(agsx_digest_validate("sha512:abcd", &err) < 0 && strstr(err->msg, "only sha256"),
         "other algorithm refused");
  agsx_error_free(&err);
  tap_ok(agsx_digest_validate("sha256:ABC", &err) < 0, "short refused");
  agsx_error_free(&err);
  tap_ok(agsx_digest_validate(
             "sha256:BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD", &err) < 0,
         "uppercase refused");
  agsx_error_free(&err);
  tap_ok(agsx_digest_validate(
             "sha256:../16bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", &err) < 0,
         "path characters refused");
  agsx_error_free(&err);
  tap_ok(agsx_digest_validate("nocolon", &err) < 0, "no algorithm refused");
  agsx_error_free(&err);
  tap_ok(agsx_digest_validate(NULL, &err) < 0, "NULL refused");
  agsx_error_free(&err);
  tap_is_str(agsx_digest_hex(d2), d2 + 7, "hex part");
  return tap_done();
}
