/* agsx — host/cgroup: what the backends share (not installed, not for
 * other modules). cgroup.c has the object and everything that works the
 * same on every backend (files, freezing v2, killing, removal, stats, gc,
 * info); cgroup-v1.c the cgroupfs v1 hierarchies (mountinfo, one directory
 * per controller, the freezer hierarchy); cgroup-v2.c cgroupfs on the
 * unified hierarchy (<root>/agsx/<id>, controllers enabled on the way
 * down); cgroup-systemd.c the systemd manager (a delegated transient scope
 * per sandbox: <root>/agsx.slice/agsx-<id>.scope/{sandbox,supervisor}).
 * A systemd cgroup is a v2 one whose parent is the scope: freezing,
 * killing, stats and removal are v2's. */
#ifndef AGSX_HOST_CGROUP_INTERNAL_H
#define AGSX_HOST_CGROUP_INTERNAL_H

#include "host/cgroup.h"

/* CTRL_FREEZER (v1) is never made at creation: agsx_cgroup_freeze makes it
 * when a sandbox is first paused, so sandboxes that are never paused pay
 * nothing for it (open, destroy and gc find it like the others). */
enum ctrl { CTRL_MEMORY, CTRL_CPU, CTRL_PIDS, CTRL_CPUACCT, CTRL_FREEZER, CTRL_N };
extern const char *const cg_ctrl_name[CTRL_N];
#define BIT(c) (1u << (c))
/* v1 hierarchies made for `agsx stats` even without a limit: CPU time and
 * memory use. A convenience: one that cannot be made is skipped. (v2 has
 * cpu.stat in every cgroup; memory is enabled there when available.) */
#define ACCOUNTING (BIT(CTRL_CPUACCT) | BIT(CTRL_MEMORY))
#define V2_CTRLS (BIT(CTRL_MEMORY) | BIT(CTRL_CPU) | BIT(CTRL_PIDS) | BIT(CTRL_CPUACCT))

#define NSEC_PER_MSEC 1000000LL
#define SMALL_FILE_MAX 65536     /* memory.events, cgroup.controllers, ... */
#define PROCS_FILE_MAX (8 << 20) /* cgroup.procs: ~7 bytes a pid, 4M pids max */
#define TREE_DEPTH_MAX 16        /* nested cgroups a sandbox may have made */
#define FREEZE_TIMEOUT_NS (5000 * NSEC_PER_MSEC)

struct layout {
  char *asked; /* the cgroup root this layout was detected for */
  /* The root of the cgroups agsx makes: ASKED, or for an ordinary user's
   * agsx the cgroup systemd's user manager delegates to the user. */
  char *root;
  bool v2;
  char *mnt[CTRL_N]; /* v1: mount point of each controller or NULL; v2: the root */
  char *setting;     /* cgroup-manager as configured ("auto" when unset) */
  enum agsx_cgroup_manager manager;
  const char *why; /* why this manager (agsx info) */
};

struct hier {
  unsigned ctrls; /* BIT(CTRL_*) this hierarchy carries for us */
  char *mnt;      /* mount point, for messages */
  int parentfd;   /* <mnt>/<parent> */
  int fd;         /* <mnt>/<parent>/<name>, -1 until opened */
  bool owned; /* the leaf exists because of us (create) or was found (open): destroy removes it */
};

struct agsx_cgroup {
  bool v2;
  char *name;   /* cgroupfs: the sandbox id; systemd: "sandbox" */
  char *parent; /* cgroupfs: "agsx"; systemd: "agsx.slice/agsx-<id>.scope" */
  size_t n;
  struct hier h[CTRL_N];
  /* systemd: the scope, and while it is not there yet (a foreground
   * sandbox: agsx_cgroup_place starts it with the init) the limits and
   * controllers place applies. */
  char *unit;
  bool pending;
  bool placed; /* the scope started with the init: it goes with the sandbox */
  unsigned need;
  struct agsx_cgroup_limits lim;
};

/* cgroup.c */
void cg_layout_free(struct layout *l);
void cg_layout_freep(struct layout **l);
#define _cleanup_layout_ _cleanup_(cg_layout_freep)
int cg_layout_get(struct layout **ret, agsx_error_t *err);
bool cg_list_has(const char *list, const char *word);
int cg_write_file(int dfd, const char *file, const char *val, bool optional, agsx_error_t *err);
bool cg_kv_get(const char *buf, const char *key, uint64_t *ret);
void cg_sleep_ns(int64_t ns);
int cg_open_dir_at(int dfd, const char *name);
struct agsx_cgroup *cg_new(bool v2, const char *parent, const char *name);
struct hier *cg_hier_get(struct agsx_cgroup *cg, const char *mnt, enum ctrl c);
int cg_hier_open_parent(struct agsx_cgroup *cg, struct hier *h, agsx_error_t *err);
int cg_hier_make_leaf(struct agsx_cgroup *cg, struct hier *h, agsx_error_t *err);
int cg_apply_limits(struct agsx_cgroup *cg, const struct agsx_cgroup_limits *lim,
                    agsx_error_t *err);
int cg_freeze_wait(struct agsx_cgroup *cg, int dfd, int64_t deadline, agsx_error_t *err);
int cg_destroy_one(const char *name, agsx_error_t *err);

/* cgroup-v1.c */
int cg_layout_scan_v1(struct layout *l, bool restrict_to_root, agsx_error_t *err);
int cg_create_v1(struct agsx_cgroup *cg, const struct layout *l, unsigned need, agsx_error_t *err);
struct hier *cg_freezer_hier(struct agsx_cgroup *cg);
int cg_freeze_v1(struct agsx_cgroup *cg, agsx_error_t *err);

/* cgroup-v2.c */
int cg_enable_controllers(int dfd, const char *where, unsigned need, agsx_error_t *err);
int cg_check_available(int rootfd, const char *root, unsigned need, agsx_error_t *err);
int cg_create_v2(struct agsx_cgroup *cg, const struct layout *l, unsigned need, agsx_error_t *err);

/* cgroup-systemd.c */
int cg_manager_detect(struct layout *l, agsx_error_t *err);
int cg_create_systemd(struct agsx_cgroup *cg, const struct layout *l, unsigned need,
                      const struct agsx_cgroup_limits *lim, agsx_error_t *err);
int cg_open_systemd(const struct layout *l, const char *id, struct agsx_cgroup **ret,
                    agsx_error_t *err);
int cg_gc_systemd(const struct layout *l, bool (*keep)(const char *name, void *data),
                  void (*report)(const char *what, void *data), void *data, bool dry_run,
                  agsx_error_t *err);

#endif
