/* Fuzz target: an engine's (hostile) config.json, parsed and put through
 * the strict policy, as `agsx-oci create` does before touching anything;
 * then the same bytes as an exec's process.json and as update's
 * resources. */
#include "config.h"

#include "fuzz.h"
#include "oci/spec.h"

#include <linux/capability.h>
#include <sched.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *buf = (const char *)data;
  agsx_error_t err = NULL;
  struct agsx_oci_spec *s = NULL;
  struct agsx_oci_policy pol = {0};
  agsx_log_level = AGSX_LOG_ERROR;
  if (agsx_oci_spec_parse(buf, size, &s, &err) == 0) {
    if (agsx_oci_policy_apply(&pol, s, &err) == 0) {
      /* What the policy promises, whatever the input. */
      for (int k = 0; k < AGSX_OCI_CAP_SETS; k++)
        if (s->process.caps[k] & ~agsx_oci_caps_max(&pol))
          __builtin_trap();
      if (!s->process.no_new_privileges || agsx_oci_spec_ns(s, CLONE_NEWPID) == NULL ||
          agsx_oci_spec_ns(s, CLONE_NEWNET) == NULL)
        __builtin_trap();
      for (size_t i = 0; i < s->n_uid_maps; i++)
        if (s->uid_maps[i].host == 0)
          __builtin_trap();
    }
    agsx_oci_spec_free(s);
  } else if (err == NULL || err->msg == NULL || err->msg[0] == '\0') {
    __builtin_trap(); /* a failure always says why */
  }
  agsx_error_free(&err);
  struct agsx_oci_process p;
  if (agsx_oci_process_parse(buf, size, &p, &err) == 0)
    agsx_oci_process_clear(&p);
  agsx_error_free(&err);
  struct agsx_oci_resources r;
  if (agsx_oci_resources_parse(buf, size, &r, &err) == 0)
    agsx_oci_resources_clear(&r);
  agsx_error_free(&err);
  return 0;
}
