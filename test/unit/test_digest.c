/* Unit tests: sha256 and digest strings. */
#include "config.h"

#include "util/digest.h"
#include "tap.h"

int main(void) {
  char d[AGSX_DIGEST_LEN];
  agsx_sha256_buf("", 0, d);
  tap_is_str(d, "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
             "sha256 of empty");
  agsx_sha256_buf("abc", 3, d);
  tap_is_str(d, "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
             "sha256 of abc");
  agsx_sha256 *h = agsx_sha256_new();
  agsx_sha256_update(h, "a", 1);
  agsx_sha256_update(h, "bc", 2);
  char d2[AGSX_DIGEST_LEN];
  agsx_sha256_final(h, d2);
  agsx_sha256_free(h);
  tap_is_str(d2, d, "streaming equals one-shot");
  tap_is_int(agsx_digest_validate(d, NULL), 0, "valid digest");
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
  tap_is_str(agsx_digest_hex(d), d + 7, "hex part");
  return tap_done();
}
