/* Fuzz target: a pool claim's wire form (sandbox/pool.h), as a claimer
 * sends it over a parked sandbox's claim socket and its supervisor passes
 * it to the init. A decoded claim must be within the bounds the decoder
 * promises and encode back to bytes that decode the same. */
#include "config.h"

#include "sandbox/control.h"
#include "sandbox/pool.h"
#include "state/state.h"
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

static bool same(const char *a, const char *b) {
  return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

static bool same_v(char *const *a, char *const *b) {
  size_t n = agsx_strv_len(a);
  if (n != agsx_strv_len(b))
    return false;
  for (size_t i = 0; i < n; i++)
    if (strcmp(a[i], b[i]) != 0)
      return false;
  return true;
}

static void check(const struct agsx_claim *c) {
  if ((c->name && !agsx_name_is_valid(c->name)) || (c->cwd && c->cwd[0] != '/') ||
      (c->idle && (!c->detach || agsx_strv_len(c->argv))))
    __builtin_trap();
  agsx_error_t err = NULL;
  size_t len;
  char *b = agsx_claim_encode(c, &len, &err);
  if (b == NULL) {
    agsx_error_free(&err);
    return;
  }
  struct agsx_claim again;
  if (agsx_claim_decode(b, len, &again, &err) < 0)
    __builtin_trap();
  if (again.timeout != c->timeout || again.rm != c->rm || again.detach != c->detach ||
      again.idle != c->idle || !same(again.name, c->name) || !same(again.hostname, c->hostname) ||
      !same(again.cwd, c->cwd) || !same(again.user, c->user) || !same_v(again.argv, c->argv) ||
      !same_v(again.env, c->env) || !same_v(again.labels, c->labels))
    __builtin_trap();
  agsx_claim_clear(&again);
  free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > AGSX_CLAIM_MAX + 16)
    return 0;
  agsx_error_t err = NULL;
  struct agsx_claim c;
  if (agsx_claim_decode((const char *)data, size, &c, &err) < 0) {
    agsx_error_free(&err);
    return 0;
  }
  check(&c);
  agsx_claim_clear(&c);
  return 0;
}
