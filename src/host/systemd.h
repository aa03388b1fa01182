/* agsx — host/systemd: the few calls agsx makes to systemd, PID 1, over
 * D-Bus (sd-bus of libsystemd, loaded with dlopen() the first time one is
 * made: a CLI start where systemd plays no part pays nothing for it).
 *
 * What for: a sandbox's cgroup is a transient scope of its own that
 * systemd delegates to agsx (host/cgroup.h, manager "systemd"), and
 * agsx-oci's --systemd-cgroup puts a container in the scope the engine
 * names, with its resources as unit properties.
 *
 * The bus: as root, systemd's private socket (unix:path=/run/systemd/private:
 * no dbus-daemon, no polkit in the way), else the system bus. The choice is
 * one function (bus_open in systemd.c): a rootless agsx will talk to the
 * user's manager there. Each call opens its own connection and closes it:
 * a forked supervisor never shares one with its parent, and none is left
 * open (the fd would otherwise reach a sandbox).
 *
 * Every call is bounded (AGSX_SYSTEMD_TIMEOUT_SEC, AGSX_SYSTEMD_TIMEOUT
 * overrides it) and fails with one line that says what systemd said: the
 * bus unreachable, access denied, the unit already there, the job failed.
 * A scope whose job failed is stopped again: nothing is left behind. */
#ifndef AGSX_HOST_SYSTEMD_H
#define AGSX_HOST_SYSTEMD_H

#include "util/util.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define AGSX_SYSTEMD_TIMEOUT_SEC 30 /* a job on a slow (emulated) host */
#define AGSX_SYSTEMD_PRIVATE_SOCKET "/run/systemd/private"
#define AGSX_SYSTEMD_PRIVATE_BUS "unix:path=" AGSX_SYSTEMD_PRIVATE_SOCKET
#define AGSX_SYSTEMD_INFINITY UINT64_MAX

/* One unit property as StartTransientUnit and SetUnitProperties take it
 * (a(sv)). TYPE is the D-Bus signature of the value: 's' (S), 'b' (B),
 * 't' (T), 'u' (U: a uint32), 'U' (an array of one uint32, "au": PIDs)
 * or 'y' (an array of bytes, "ay": BYTES/N_BYTES, the CPU and NUMA node
 * masks of AllowedCPUs and AllowedMemoryNodes). */
struct agsx_systemd_prop {
  const char *name;
  char type;
  const char *s;
  bool b;
  uint64_t t;
  uint32_t u;
  const uint8_t *bytes;
  size_t n_bytes;
};

/* systemd is PID 1 here: /run/systemd/system exists (sd_booted()'s test). */
bool agsx_systemd_booted(void);

/* Starts the transient scope UNIT ("<name>.scope") in SLICE with PID as its
 * first process, Delegate=yes and PROPS, and waits for its job. Errors:
 * EEXIST the unit is there already (a name taken), EACCES/EPERM denied,
 * ENOENT/ECONNREFUSED no bus, EIO the job did not end "done" (the scope is
 * then stopped again), ETIMEDOUT no answer in time. */
int agsx_systemd_start_scope(const char *unit, const char *slice, const char *description,
                             pid_t pid, const struct agsx_systemd_prop *props, size_t n_props,
                             agsx_error_t *err);
/* The same in the user's own manager ($XDG_RUNTIME_DIR/systemd/private),
 * for an ordinary user's agsx before it is in the user's namespace. */
int agsx_systemd_start_user_scope(const char *unit, const char *slice, const char *description,
                                  pid_t pid, const struct agsx_systemd_prop *props, size_t n_props,
                                  agsx_error_t *err);
/* Stops UNIT; with WAIT, until its job has ended. A unit that is not
 * loaded (gone already) is not an error. */
int agsx_systemd_stop_unit(const char *unit, bool wait, agsx_error_t *err);
/* Sets PROPS on UNIT at run time (SetUnitProperties, runtime=true). */
int agsx_systemd_set_properties(const char *unit, const struct agsx_systemd_prop *props, size_t n,
                                agsx_error_t *err);
/* Moves PID into SUBCGROUP ("/sandbox/exec-…", or "") of UNIT, a
 * delegated unit (AttachProcessesToUnit): for a process the caller may not
 * move itself, as an ordinary user's process outside the user manager's
 * tree; the user manager asks the system manager when it may not either. */
int agsx_systemd_attach(const char *unit, const char *subcgroup, pid_t pid, agsx_error_t *err);
/* The version of the running systemd (its Version property: "252.38-1~…"
 * gives 252); 0 when it cannot be asked. */
int agsx_systemd_version(unsigned *ret, agsx_error_t *err);

/* ---- pure helpers (unit-tested) ---------------------------------------------- */

/* True when NAME is a valid unit name of TYPE (".scope", ".slice"): at most
 * 255 bytes of [A-Za-z0-9:_.\-@\\], not starting with '.' , the suffix
 * once at the end. */
bool agsx_systemd_unit_name_is_valid(const char *name, const char *type);
/* systemd's escaping of a string for a unit name part (systemd-escape):
 * '/' becomes '-', every byte outside [A-Za-z0-9:_.] (and a leading '.')
 * becomes \xNN. */
char *agsx_systemd_escape(const char *s);
/* The cgroup path (relative to the cgroup root) of SLICE as systemd lays
 * it out: "a-b.slice" → "a.slice/a-b.slice"; "-.slice" → "" (the root).
 * EINVAL for a name that is not a valid slice. */
int agsx_systemd_slice_path(const char *slice, char **ret, agsx_error_t *err);
/* A cpuset list ("0-3,8") as systemd's AllowedCPUs/AllowedMemoryNodes byte
 * mask (bit N of byte N/8). EINVAL naming the list when malformed; at most
 * 8192 CPUs. */
int agsx_systemd_cpuset_mask(const char *list, uint8_t **ret, size_t *ret_n, agsx_error_t *err);
/* A D-Bus error name as an errno (UnitExists → EEXIST, AccessDenied → EACCES,
 * NoSuchUnit → ENOENT...); EIO when unknown. */
int agsx_systemd_errno(const char *name);

#endif
