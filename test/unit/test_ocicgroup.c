/* Unit tests: agsx-oci's mapping of systemd's cgroupsPath (slice:prefix:name)
 * to the cgroupfs path systemd would use (oci/cgroup.h). Pure: nothing is
 * created. */
#include "config.h"

#include "oci/cgroup.h"
#include "tap.h"

static void maps(const char *spec, const char *want) {
  agsx_error_t err = NULL;
  char *got = NULL;
  int r = agsx_oci_cgroup_systemd_path(spec, &got, &err);
  tap_ok(r == 0, "%s: accepted%s%s", spec, err ? ": " : "", err ? err->msg : "");
  tap_is_str(got, want, "%s: %s", spec, want);
  free(got);
  agsx_error_free(&err);
}

static void refuses(const char *spec, const char *words) {
  agsx_error_t err = NULL;
  char *got = NULL;
  int r = agsx_oci_cgroup_systemd_path(spec, &got, &err);
  tap_ok(r < 0 && got == NULL && err && strstr(err->msg, words) && strstr(err->msg, "cgroupsPath"),
         "%s: refused (%s)", spec, err ? err->msg : "accepted");
  free(got);
  agsx_error_free(&err);
}

int main(void) {
  maps("system.slice:docker:abc", "system.slice/docker-abc.scope");
  maps("kubepods-burstable-pod1.slice:cri-containerd:ab",
       "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/"
       "cri-containerd-ab.scope");
  maps(":crio:x", "system.slice/crio-x.scope");
  maps("-.slice:p:x", "/p-x.scope");
  maps("user.slice::x", "user.slice/x.scope");
  maps("machine.slice:p:sub.slice", "machine.slice/sub.slice");
  refuses("/plain/path", "slice:prefix:name");
  refuses("a:b", "slice:prefix:name");
  refuses("a:b:c:d", "slice:prefix:name");
  refuses("system:p:x", "invalid systemd form");
  refuses("a--b.slice:p:x", "invalid systemd form");
  refuses("-a.slice:p:x", "invalid systemd form");
  refuses("a/b.slice:p:x", "invalid systemd form");
  refuses("system.slice:p/q:x", "invalid systemd form");
  refuses("system.slice:p:..", "invalid systemd form");
  refuses("system.slice:p:", "invalid systemd form");
  refuses("system.slice:p:a/b", "invalid systemd form");
  return tap_done();
}
