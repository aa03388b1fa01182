/* Fuzz target: an engine's (hostile) config.json, parsed and put through
 * the strict policy, as `agsx-oci create` does before touching anything;
 * its cgroupsPath in systemd's form (scope, slice, path) and its resources
 * as systemd unit properties (--systemd-cgroup); then the same bytes as an
 * exec's process.json and as update's resources. */
#include "config.h"

#include "fuzz.h"
#include "oci/cgroup.h"
#include "oci/spec.h"

#include <linux/capability.h>
#include <sched.h>
#include <string.h>

/* The resources as systemd unit properties: bounded, every mask backed. */
static void systemd_props(const struct agsx_oci_resources *r) {
  struct agsx_oci_systemd_props sp;
  agsx_error_t err = NULL;
  if (agsx_oci_cgroup_systemd_props(r, &sp, &err) == 0) {
    if (sp.n > AGSX_ARRAY_SIZE(sp.p))
      __builtin_trap();
    for (size_t i = 0; i < sp.n; i++)
      if (sp.p[i].type == 'y' && (sp.p[i].bytes == NULL || sp.p[i].n_bytes == 0))
        __builtin_trap();
    agsx_oci_systemd_props_clear(&sp);
  } else if (err == NULL || err->msg[0] == '\0') {
    __builtin_trap();
  }
  agsx_error_free(&err);
}

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
    if (s->cgroups_path) {
      char *unit = NULL, *slice = NULL, *path = NULL;
      if (agsx_oci_cgroup_systemd_unit(s->cgroups_path, &unit, &slice, &err) == 0 &&
          (!agsx_systemd_unit_name_is_valid(unit, ".scope") || slice == NULL))
        __builtin_trap();
      agsx_error_free(&err);
      if (agsx_oci_cgroup_systemd_path(s->cgroups_path, &path, &err) == 0 &&
          (strstr(path, "..") || !agsx_oci_cgroup_path_is_valid(path[0] ? path : "x")))
        __builtin_trap();
      agsx_error_free(&err);
      free(unit);
      free(slice);
      free(path);
    }
    systemd_props(&s->resources);
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
  if (agsx_oci_resources_parse(buf, size, &r, &err) == 0) {
    systemd_props(&r);
    agsx_oci_resources_clear(&r);
  }
  agsx_error_free(&err);
  return 0;
}
