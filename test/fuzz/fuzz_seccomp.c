/* Fuzz target: seccomp JSON profiles (Docker and OCI formats), compiled with
 * libseccomp but never installed. */
#include "config.h"

#include "fuzz.h"
#include "sandbox/seccomp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > AGSX_SECCOMP_JSON_MAX + 1)
    return 0;
  struct agsx_seccomp_bpf b = {0};
  agsx_error_t err = NULL;
  int r = agsx_seccomp_compile_json((const char *)data, size, &b, &err);
  /* Success gives a program the kernel could load and no error; failure
   * gives an error message and no program. */
  if (r == 0 && (err != NULL || b.insns == NULL || b.len == 0 || b.len > BPF_MAXINSNS))
    __builtin_trap();
  if (r < 0 && (err == NULL || err->msg == NULL || b.insns != NULL))
    __builtin_trap();
  agsx_error_free(&err);
  agsx_seccomp_bpf_clear(&b);
  return 0;
}
