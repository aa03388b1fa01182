/* Unit tests: the pure helpers of the systemd cgroup manager — unit-name
 * checks and escaping (host/systemd.h), slice paths, the CPU masks of
 * AllowedCPUs, D-Bus errors as errnos, the manager's choice (host/cgroup.h)
 * and agsx-oci's resources as unit properties (oci/cgroup.h). Nothing
 * talks to systemd. */
#include "config.h"

#include "host/cgroup.h"
#include "host/systemd.h"
#include "oci/cgroup.h"
#include "tap.h"

static void escapes(const char *in, const char *want) {
  char *got = agsx_systemd_escape(in);
  tap_is_str(got, want, "escape '%s'", in);
  free(got);
}

static void slice(const char *in, const char *want) {
  agsx_error_t err = NULL;
  char *got = NULL;
  int r = agsx_systemd_slice_path(in, &got, &err);
  if (want == NULL)
    tap_ok(r < 0 && got == NULL && err && strstr(err->msg, "invalid systemd slice"),
           "slice '%s' refused (%s)", in, err ? err->msg : "accepted");
  else
    tap_is_str(got, want, "slice '%s' → '%s'", in, want);
  free(got);
  agsx_error_free(&err);
}

static void mask(const char *list, const char *want_hex) {
  agsx_error_t err = NULL;
  uint8_t *m = NULL;
  size_t n = 0;
  int r = agsx_systemd_cpuset_mask(list, &m, &n, &err);
  if (want_hex == NULL) {
    tap_ok(r < 0 && m == NULL && err && strstr(err->msg, list), "mask '%s' refused (%s)", list,
           err ? err->msg : "accepted");
  } else {
    char hex[64] = "";
    for (size_t i = 0; r == 0 && i < n && i < 30; i++)
      sprintf(hex + 2 * i, "%02x", m[i]);
    tap_is_str(hex, want_hex, "mask '%s'", list);
  }
  free(m);
  agsx_error_free(&err);
}

static void choose(const char *setting, bool systemd, bool unified, bool custom,
                   enum agsx_cgroup_manager want, const char *why_has) {
  agsx_error_t err = NULL;
  enum agsx_cgroup_manager got = 99;
  const char *why = NULL;
  int r = agsx_cgroup_manager_choose(setting, systemd, unified, custom, &got, &why, &err);
  tap_ok(r == 0 && got == want && why && strstr(why, why_has),
         "manager for %s (systemd %d, unified %d, root given %d): %s (%s)",
         setting ? setting : "(unset)", systemd, unified, custom,
         want == AGSX_CGROUP_SYSTEMD ? "systemd" : "cgroupfs", r == 0 ? why : err->msg);
  agsx_error_free(&err);
}

static void choose_fails(const char *setting, bool systemd, bool unified, const char *words) {
  agsx_error_t err = NULL;
  enum agsx_cgroup_manager got;
  const char *why = NULL;
  int r = agsx_cgroup_manager_choose(setting, systemd, unified, false, &got, &why, &err);
  tap_ok(r < 0 && err && strstr(err->msg, words) && !strstr(err->msg, ": Invalid") &&
             !strchr(err->msg, '\n'),
         "manager %s (systemd %d, unified %d) refused: %s", setting, systemd, unified,
         err ? err->msg : "accepted");
  agsx_error_free(&err);
}

static const struct agsx_systemd_prop *prop(const struct agsx_systemd_prop *p, size_t n,
                                            const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(p[i].name, name) == 0)
      return &p[i];
  return NULL;
}

static void oci_props(void) {
  struct agsx_oci_resources res = {.memory_limit = 256 << 20,
                                   .memory_reservation = 128 << 20,
                                   .memory_swap = 512 << 20,
                                   .cpu_quota = 50000,
                                   .cpu_period = 100000,
                                   .cpu_shares = 1024,
                                   .cpus = "0-1",
                                   .pids_limit = 100,
                                   .blkio_weight = 500};
  struct agsx_oci_systemd_props sp;
  agsx_error_t err = NULL;
  int r = agsx_oci_cgroup_systemd_props(&res, &sp, &err);
  tap_ok(r == 0, "oci resources as properties%s%s", err ? ": " : "", err ? err->msg : "");
  const struct agsx_systemd_prop *p;
  tap_ok((p = prop(sp.p, sp.n, "MemoryMax")) && p->type == 't' && p->t == 256u << 20,
         "MemoryMax 256M");
  tap_ok((p = prop(sp.p, sp.n, "MemoryLow")) && p->t == 128u << 20, "MemoryLow: the reservation");
  tap_ok((p = prop(sp.p, sp.n, "MemorySwapMax")) && p->type == 't' && p->t == 256u << 20,
         "MemorySwapMax: swap less memory (v2's meaning)");
  tap_ok((p = prop(sp.p, sp.n, "CPUQuotaPerSecUSec")) && p->t == 500000,
         "CPUQuotaPerSecUSec: 50000/100000 of a second per second");
  tap_ok((p = prop(sp.p, sp.n, "CPUQuotaPeriodUSec")) && p->t == 100000, "CPUQuotaPeriodUSec");
  tap_ok((p = prop(sp.p, sp.n, "CPUWeight")) && p->t == agsx_oci_cgroup_cpu_weight(1024),
         "CPUWeight from shares, as on v2");
  tap_ok((p = prop(sp.p, sp.n, "TasksMax")) && p->t == 100, "TasksMax");
  tap_ok((p = prop(sp.p, sp.n, "AllowedCPUs")) && p->type == 'y' && p->n_bytes == 1 &&
             p->bytes[0] == 0x3,
         "AllowedCPUs as a byte mask");
  tap_ok((p = prop(sp.p, sp.n, "IOWeight")) && p->t == agsx_oci_cgroup_io_weight(500),
         "IOWeight from blkio.weight");
  tap_ok(prop(sp.p, sp.n, "AllowedMemoryNodes") == NULL, "no mems: no AllowedMemoryNodes");
  agsx_oci_systemd_props_clear(&sp);

  /* A quota systemd would round (10 ms steps) is rounded up, as runc does. */
  struct agsx_oci_resources odd = {.memory_limit = -1,
                                   .memory_reservation = -1,
                                   .memory_swap = -1,
                                   .cpu_quota = 12345,
                                   .pids_limit = -1};
  r = agsx_oci_cgroup_systemd_props(&odd, &sp, &err);
  tap_ok(r == 0 && (p = prop(sp.p, sp.n, "CPUQuotaPerSecUSec")) && p->t == 130000,
         "quota 12345/100000 → 130 ms per second");
  tap_ok((p = prop(sp.p, sp.n, "TasksMax")) && p->t == AGSX_SYSTEMD_INFINITY,
         "pids -1: TasksMax infinity");
  tap_ok(prop(sp.p, sp.n, "MemoryMax") == NULL && prop(sp.p, sp.n, "CPUWeight") == NULL,
         "unset: no property");
  agsx_oci_systemd_props_clear(&sp);

  struct agsx_oci_resources bad = {.memory_limit = -1,
                                   .memory_reservation = -1,
                                   .memory_swap = -1,
                                   .cpu_quota = -1,
                                   .cpus = "1-0"};
  r = agsx_oci_cgroup_systemd_props(&bad, &sp, &err);
  tap_ok(r < 0 && err && strstr(err->msg, "cpus"), "a bad cpuset is refused: %s",
         err ? err->msg : "accepted");
  agsx_error_free(&err);
}

int main(void) {
  tap_ok(agsx_systemd_unit_name_is_valid("agsx-0123abcd.scope", ".scope"), "agsx-<id>.scope");
  tap_ok(agsx_systemd_unit_name_is_valid("libpod-ab_c:d.scope", ".scope"), "libpod-…scope");
  tap_ok(!agsx_systemd_unit_name_is_valid("a/b.scope", ".scope"), "no '/'");
  tap_ok(!agsx_systemd_unit_name_is_valid(".scope", ".scope"), "no empty name");
  tap_ok(!agsx_systemd_unit_name_is_valid("a.scope", ".slice"), "the type is checked");
  tap_ok(!agsx_systemd_unit_name_is_valid("a b.scope", ".scope"), "no space");
  char longname[300];
  memset(longname, 'a', 256);
  strcpy(longname + 256, ".scope");
  tap_ok(!agsx_systemd_unit_name_is_valid(longname, ".scope"), "at most 255 bytes");

  escapes("abc", "abc");
  escapes("a-b", "a\\x2db");
  escapes("/var/lib", "-var-lib");
  escapes(".hidden", "\\x2ehidden");
  escapes("a b:c_d.e", "a\\x20b:c_d.e");
  escapes("ü", "\\xc3\\xbc");

  slice("agsx.slice", "agsx.slice");
  slice("a-b.slice", "a.slice/a-b.slice");
  slice("machine-x-y.slice", "machine.slice/machine-x.slice/machine-x-y.slice");
  slice("-.slice", "");
  slice("a--b.slice", NULL);
  slice("-a.slice", NULL);
  slice("a-.slice", NULL);
  slice("a.scope", NULL);
  slice("a/b.slice", NULL);
  slice("a@b.slice", NULL);

  mask("0", "01");
  mask("0-3", "0f");
  mask("1,3,8", "0a01");
  mask("0-1,9-10", "0306");
  mask("63", "0000000000000080");
  mask("", NULL);
  mask("3-1", NULL);
  mask("a", NULL);
  mask("1,", NULL);
  mask("1-", NULL);
  mask("8192", NULL);
  mask("0 1", NULL);

  tap_is_int(agsx_systemd_errno("org.freedesktop.systemd1.UnitExists"), EEXIST, "UnitExists");
  tap_is_int(agsx_systemd_errno("org.freedesktop.DBus.Error.AccessDenied"), EACCES, "AccessDenied");
  tap_is_int(agsx_systemd_errno("org.freedesktop.systemd1.NoSuchUnit"), ENOENT, "NoSuchUnit");
  tap_is_int(agsx_systemd_errno("org.example.Whatever"), EIO, "unknown: EIO");
  tap_is_int(agsx_systemd_errno(NULL), EIO, "none: EIO");

  choose(NULL, true, true, false, AGSX_CGROUP_SYSTEMD, "systemd is PID 1");
  choose("auto", true, true, false, AGSX_CGROUP_SYSTEMD, "unified");
  choose("auto", true, false, false, AGSX_CGROUP_CGROUPFS, "not the unified");
  choose("auto", false, true, false, AGSX_CGROUP_CGROUPFS, "not PID 1");
  choose("auto", true, true, true, AGSX_CGROUP_CGROUPFS, "AGSX_CGROUP_ROOT");
  choose("cgroupfs", true, true, false, AGSX_CGROUP_CGROUPFS, "cgroup-manager = cgroupfs");
  choose("systemd", true, true, false, AGSX_CGROUP_SYSTEMD, "cgroup-manager = systemd");
  choose_fails("systemd", false, true, "not PID 1");
  choose_fails("systemd", true, false, "unified");
  choose_fails("bogus", true, true, "invalid cgroup-manager `bogus`");

  oci_props();
  return tap_done();
}
