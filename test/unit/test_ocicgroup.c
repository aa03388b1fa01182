/* Unit tests: agsx-oci's mapping of systemd's cgroupsPath (slice:prefix:name)
 * to the cgroupfs path systemd would use (oci/cgroup.h). Pure: nothing is
 * created. */
#include "config.h"

#include "oci/cgroup.h"
#include "tap.h"

#include <inttypes.h>

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

static void swap_is(int64_t swap, int64_t mem, int64_t want) {
  agsx_error_t err = NULL;
  int64_t got = 12345;
  int r = agsx_oci_cgroup_swap_v2(swap, mem, &got, &err);
  tap_ok(r == 0 && got == want,
         "swap %" PRId64 " memory %" PRId64 ": v2 %" PRId64 " (got %" PRId64 "%s%s)", swap, mem,
         want, got, err ? ": " : "", err ? err->msg : "");
  agsx_error_free(&err);
}

static void swap_refused(int64_t swap, int64_t mem) {
  agsx_error_t err = NULL;
  int64_t got = 0;
  int r = agsx_oci_cgroup_swap_v2(swap, mem, &got, &err);
  tap_ok(r < 0 && err && strstr(err->msg, "linux.resources.memory.swap"),
         "swap %" PRId64 " memory %" PRId64 ": refused (%s)", swap, mem,
         err ? err->msg : "accepted");
  agsx_error_free(&err);
}

/* v1 → v2 as runc (libcontainer/cgroups ConvertCPUSharesToCgroupV2Value,
 * ConvertBlkIOToIOWeightValue, ConvertMemorySwapToCgroupV2Value) and crun
 * convert; the figures are
 * theirs: Docker's default 1024 shares is weight 39, not 100. */
static void conversions(void) {
  static const struct {
    uint64_t shares, weight;
  } w[] = {{0, 0},         {1, 1},          {2, 1},          {3, 1},
           {100, 4},       {512, 20},       {1024, 39},      {2048, 79},
           {262143, 9999}, {262144, 10000}, {262145, 10000}, {UINT64_MAX, 10000}};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(w); i++)
    tap_ok(agsx_oci_cgroup_cpu_weight(w[i].shares) == w[i].weight,
           "cpu.shares %" PRIu64 " is cpu.weight %" PRIu64 " (got %" PRIu64 ")", w[i].shares,
           w[i].weight, agsx_oci_cgroup_cpu_weight(w[i].shares));
  static const struct {
    uint64_t blkio, io;
  } io[] = {{0, 0}, {10, 1}, {100, 910}, {500, 4950}, {1000, 10000}, {5000, 10000}};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(io); i++)
    tap_ok(agsx_oci_cgroup_io_weight(io[i].blkio) == io[i].io,
           "blkio.weight %" PRIu64 " is io.weight %" PRIu64 " (got %" PRIu64 ")", io[i].blkio,
           io[i].io, agsx_oci_cgroup_io_weight(io[i].blkio));
  swap_is(-1, 100, -1);   /* unlimited stays unlimited */
  swap_is(0, 100, 0);     /* unset */
  swap_is(100, -1, 100);  /* unlimited memory: swap as it is */
  swap_is(200, 100, 100); /* memory+swap 200 with memory 100: swap 100 */
  swap_is(100, 100, 0);   /* no swap at all */
  swap_is(1073741824, 536870912, 536870912);
  swap_refused(50, 100); /* below the memory limit */
  swap_refused(100, 0);  /* no memory limit to subtract */
}

int main(void) {
  conversions();
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
