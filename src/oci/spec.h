/* agsx — oci/spec: an OCI runtime-spec config.json (1.0.x–1.2.x, as Podman,
 * containerd and CRI-O send it) parsed into agsx's terms, and the refusal
 * table: what agsx cannot or will not apply fails the parse with one line
 * naming the field, before anything is created (runtime-spec config.md,
 * "Extensibility": unknown keys are ignored, unsupported values are errors).
 *
 * The policy (agsx_oci_policy_apply) then makes the spec stricter, never
 * looser: capabilities clamped to agsx's maximum (Docker's default set; the
 * privileged ones refused), no_new_privs forced, host pid/ipc/uts/mount
 * namespaces and host networking refused, mappings onto host root refused.
 *
 * Input is untrusted and bounded: AGSX_OCI_CONFIG_MAX bytes, and at most
 * the counts below of each list. */
#ifndef AGSX_OCI_SPEC_H
#define AGSX_OCI_SPEC_H

#include "util/util.h"

#include <stdint.h>

#define AGSX_OCI_CONFIG_MAX (4u << 20)
#define AGSX_OCI_MAX_ARGS 4096
#define AGSX_OCI_MAX_ENV 4096
#define AGSX_OCI_MAX_MOUNTS 128
#define AGSX_OCI_MAX_PATHS 256 /* masked and read-only paths, devices, sysctls */
#define AGSX_OCI_MAX_HOOKS 32  /* of each kind */
#define AGSX_OCI_MAX_MAPS 16   /* uid and gid map lines (the kernel takes 340) */
#define AGSX_OCI_MAX_GROUPS 32

/* Capability sets, in the spec's order. */
enum {
  AGSX_OCI_CAP_BOUNDING,
  AGSX_OCI_CAP_EFFECTIVE,
  AGSX_OCI_CAP_INHERITABLE,
  AGSX_OCI_CAP_PERMITTED,
  AGSX_OCI_CAP_AMBIENT,
  AGSX_OCI_CAP_SETS
};

struct agsx_oci_idmap {
  uint32_t container, host, size;
};

struct agsx_oci_ns {
  int type;   /* CLONE_NEW* */
  char *path; /* join this one, or NULL: a new one */
};

struct agsx_oci_mount {
  char *destination, *type, *source;
  unsigned long flags;       /* MS_RDONLY, MS_NOSUID, ... (set) */
  unsigned long clear;       /* rw, suid, ...: cleared explicitly */
  unsigned long propagation; /* MS_PRIVATE | MS_REC, ... or 0 */
  bool bind, recursive;
  char *data; /* the remaining options, comma-separated, for the filesystem */
};

struct agsx_oci_rlimit {
  int resource;
  uint64_t soft, hard;
};

struct agsx_oci_hook {
  char *path;
  char **args, **env;
  int timeout; /* seconds, 0: none */
};

enum {
  AGSX_OCI_HOOK_PRESTART,
  AGSX_OCI_HOOK_CREATE_RUNTIME,
  AGSX_OCI_HOOK_POSTSTART,
  AGSX_OCI_HOOK_POSTSTOP,
  AGSX_OCI_HOOK_KINDS
};
extern const char *const agsx_oci_hook_names[AGSX_OCI_HOOK_KINDS];

struct agsx_oci_device {
  char type; /* 'c', 'b', 'u', 'p' */
  int64_t major, minor;
  char *path;
  uint32_t mode, uid, gid;
  bool has_mode, has_uid, has_gid;
};

struct agsx_oci_device_rule {
  bool allow;
  char type;            /* 'a', 'c', 'b' */
  int64_t major, minor; /* -1: any */
  char access[4];
};

/* linux.resources.blockIO's throttles: one device's rate. */
enum { AGSX_OCI_READ_BPS, AGSX_OCI_WRITE_BPS, AGSX_OCI_READ_IOPS, AGSX_OCI_WRITE_IOPS };
struct agsx_oci_throttle {
  int kind; /* AGSX_OCI_READ_BPS... */
  int64_t major, minor;
  uint64_t rate; /* 0: no limit */
};

/* linux.resources.hugepageLimits: one page size's limit. */
#define AGSX_OCI_MAX_HUGEPAGES 16
struct agsx_oci_hugepage {
  char size[16]; /* "2MB", "1GB", "64KB": as the kernel names its files */
  uint64_t limit;
};

struct agsx_oci_resources {
  int64_t memory_limit, memory_reservation, memory_swap; /* -1: unset */
  bool has_swappiness;                                   /* cgroup v1 only, as runc */
  unsigned swappiness;                                   /* 0..100 */
  bool disable_oom_killer;                               /* likewise */
  uint64_t cpu_shares, cpu_period;
  int64_t cpu_quota; /* -1: unset */
  char *cpus, *mems;
  int64_t pids_limit; /* 0: unset, -1: unlimited */
  struct agsx_oci_device_rule *devices;
  size_t n_devices;
  uint64_t blkio_weight; /* 10..1000, 0: unset */
  struct agsx_oci_throttle *throttle;
  size_t n_throttle;
  struct agsx_oci_hugepage *hugepages;
  size_t n_hugepages;
};

struct agsx_oci_process {
  char **args, **env;
  char *cwd;
  uint32_t uid, gid;
  gid_t groups[AGSX_OCI_MAX_GROUPS]; /* additionalGids: each once, never gid */
  size_t n_groups;
  int umask; /* -1: unset */
  bool terminal;
  unsigned rows, cols; /* consoleSize, 0: unset */
  uint64_t caps[AGSX_OCI_CAP_SETS];
  struct agsx_oci_rlimit *rlimits;
  size_t n_rlimits;
  bool no_new_privileges;
  bool has_oom_score_adj;
  int oom_score_adj;
  char *apparmor; /* NULL after the policy where AppArmor is not enabled */
  char *selinux;  /* selinuxLabel: likewise for SELinux */
};

struct agsx_oci_spec {
  char *oci_version;
  char *root_path;
  bool root_readonly;
  char *hostname, *domainname;
  bool has_process;
  struct agsx_oci_process process;
  struct agsx_oci_mount *mounts;
  size_t n_mounts;
  struct agsx_oci_ns *namespaces;
  size_t n_namespaces;
  struct agsx_oci_idmap uid_maps[AGSX_OCI_MAX_MAPS], gid_maps[AGSX_OCI_MAX_MAPS];
  size_t n_uid_maps, n_gid_maps;
  struct agsx_oci_device *devices;
  size_t n_devices;
  char **masked, **readonly; /* string vectors */
  char **sysctl;             /* "key=value" */
  char *cgroups_path;
  bool has_resources;
  struct agsx_oci_resources resources;
  char *seccomp; /* linux.seccomp, re-serialised, or NULL */
  unsigned long rootfs_propagation;
  struct agsx_oci_hook *hooks[AGSX_OCI_HOOK_KINDS];
  size_t n_hooks[AGSX_OCI_HOOK_KINDS];
  char *annotations; /* the object, re-serialised, or NULL */
  char *mount_label; /* linux.mountLabel: ignored without SELinux, else refused */
};

/* Parses BUF[0..LEN). On failure *ERR is one line naming the field:
 * "config: linux.intelRdt: not supported by agsx". */
int agsx_oci_spec_parse(const char *buf, size_t len, struct agsx_oci_spec **ret, agsx_error_t *err);
/* An exec's process.json: the `process` object alone. */
int agsx_oci_process_parse(const char *buf, size_t len, struct agsx_oci_process *ret,
                           agsx_error_t *err);
/* linux.resources alone (update --resources). */
int agsx_oci_resources_parse(const char *buf, size_t len, struct agsx_oci_resources *ret,
                             agsx_error_t *err);
void agsx_oci_process_clear(struct agsx_oci_process *p);
void agsx_oci_resources_clear(struct agsx_oci_resources *r);
void agsx_oci_spec_free(struct agsx_oci_spec *s);
void agsx_oci_spec_freep(struct agsx_oci_spec **s);
#define _cleanup_oci_spec_ _cleanup_(agsx_oci_spec_freep)

/* The namespace of TYPE in the spec, or NULL when the container shares the
 * runtime's. */
const struct agsx_oci_ns *agsx_oci_spec_ns(const struct agsx_oci_spec *s, int type);

/* The strict policy (agsx.conf `oci-policy = strict`, the default) or the
 * operator's `compat` relaxations. Never host root in a mapping, never a
 * privileged capability, never a host pid/ipc/uts/mount namespace. */
struct agsx_oci_policy {
  bool compat;       /* oci-policy = compat: keep CAP_NET_RAW */
  bool host_network; /* oci-host-network = allow (compat only) */
};
int agsx_oci_policy_load(struct agsx_oci_policy *ret, agsx_error_t *err);
/* Checks and tightens S in place. Warnings (a dropped NET_RAW, forced
 * no_new_privs) go to the log at warning level. */
int agsx_oci_policy_apply(const struct agsx_oci_policy *pol, struct agsx_oci_spec *s,
                          agsx_error_t *err);
/* The process part of the policy alone (exec's process.json). */
int agsx_oci_policy_process(const struct agsx_oci_policy *pol, struct agsx_oci_process *p,
                            agsx_error_t *err);
/* Whether the host enforces AppArmor (/sys/module/apparmor/parameters/
 * enabled is "Y") or SELinux (selinuxfs mounted), as runc decides. */
bool agsx_oci_apparmor_enabled(void);
bool agsx_oci_selinux_enabled(void);
/* In the process about to exec, inside the container (its /proc): the
 * AppArmor profile (`exec PROFILE` to /proc/self/attr/apparmor/exec, else
 * /proc/self/attr/exec) and SELinux label (/proc/self/attr/exec) the exec
 * transitions to; each NULL: nothing. The file must be on a procfs. Done
 * before no_new_privs, as runc. */
int agsx_oci_lsm_exec(const char *apparmor, const char *selinux, agsx_error_t *err);
/* The capabilities agsx grants at most (a bit per capability). */
uint64_t agsx_oci_caps_max(const struct agsx_oci_policy *pol);
/* Capability number from "CAP_SYS_ADMIN" (or -1). */
int agsx_oci_cap_from_name(const char *name);
const char *agsx_oci_cap_name(int cap);

#endif
