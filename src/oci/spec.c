/* agsx — oci/spec: config.json into agsx's terms, refusals, the policy. See
 * spec.h. */
#include "config.h"

#include "oci/spec.h"
#include "util/conf.h"
#include "util/json.h"

#include <ctype.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/capability.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <sched.h>
#include <string.h>
#include <strings.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

const char *const agsx_oci_hook_names[AGSX_OCI_HOOK_KINDS] = {"prestart", "createRuntime",
                                                              "poststart", "poststop"};

/* One line per refusal; never "not found" or "no such file": Podman maps
 * those words to exit 127 ("command not found"). */
#define REFUSE(err, field, why) agsx_error_set(err, 0, "config: %s: %s", field, why)
#define UNSUPPORTED(err, field) REFUSE(err, field, "not supported by agsx")

/* ---- typed access ---------------------------------------------------------------------- */

static int get_string(yajl_val o, const char *key, const char *field, char **ret,
                      agsx_error_t *err) {
  yajl_val v = agsx_json_get(o, key);
  *ret = NULL;
  if (v == NULL || YAJL_IS_NULL(v))
    return 0;
  if (!YAJL_IS_STRING(v))
    return REFUSE(err, field, "expected a string");
  *ret = xstrdup(YAJL_GET_STRING(v));
  return 0;
}

static int get_bool(yajl_val o, const char *key, const char *field, bool *ret, agsx_error_t *err) {
  yajl_val v = agsx_json_get(o, key);
  if (v == NULL || YAJL_IS_NULL(v))
    return 0;
  if (!YAJL_IS_TRUE(v) && !YAJL_IS_FALSE(v))
    return REFUSE(err, field, "expected true or false");
  *ret = YAJL_IS_TRUE(v);
  return 0;
}

/* An integer in [MIN, MAX]; *HAS says whether it was there. */
static int get_int(yajl_val o, const char *key, const char *field, int64_t min, int64_t max,
                   int64_t *ret, bool *has, agsx_error_t *err) {
  yajl_val v = agsx_json_get(o, key);
  if (has)
    *has = false;
  if (v == NULL || YAJL_IS_NULL(v))
    return 0;
  if (!YAJL_IS_INTEGER(v))
    return REFUSE(err, field, "expected an integer");
  int64_t n = YAJL_GET_INTEGER(v);
  if (n < min || n > max)
    return agsx_error_set(err, 0, "config: %s: %" PRId64 " is out of range", field, n);
  *ret = n;
  if (has)
    *has = true;
  return 0;
}

/* uint64 values above INT64_MAX (memory "limit": 18446744073709551615) come
 * as yajl doubles or overflow: treated as "no limit". */
static int get_u64(yajl_val o, const char *key, const char *field, uint64_t *ret,
                   agsx_error_t *err) {
  yajl_val v = agsx_json_get(o, key);
  if (v == NULL || YAJL_IS_NULL(v))
    return 0;
  if (YAJL_IS_INTEGER(v)) {
    if (YAJL_GET_INTEGER(v) < 0)
      return REFUSE(err, field, "must not be negative");
    *ret = (uint64_t)YAJL_GET_INTEGER(v);
    return 0;
  }
  if (YAJL_IS_NUMBER(v) && YAJL_GET_NUMBER(v) && YAJL_GET_NUMBER(v)[0] != '-') {
    *ret = UINT64_MAX;
    return 0;
  }
  return REFUSE(err, field, "expected an unsigned integer");
}

/* A limit: -1 or a value above INT64_MAX mean "none". */
static int get_limit(yajl_val o, const char *key, const char *field, int64_t *ret,
                     agsx_error_t *err) {
  yajl_val v = agsx_json_get(o, key);
  if (v == NULL || YAJL_IS_NULL(v))
    return 0;
  if (YAJL_IS_INTEGER(v) && YAJL_GET_INTEGER(v) >= -1) {
    *ret = YAJL_GET_INTEGER(v);
    return 0;
  }
  uint64_t u = 0;
  if (get_u64(o, key, field, &u, err) < 0)
    return -1;
  *ret = -1;
  return 0;
}

static int get_strv(yajl_val o, const char *key, const char *field, size_t max, char ***ret,
                    agsx_error_t *err) {
  yajl_val v = agsx_json_get(o, key);
  *ret = NULL;
  if (v == NULL || YAJL_IS_NULL(v))
    return 0;
  if (!YAJL_IS_ARRAY(v))
    return REFUSE(err, field, "expected an array of strings");
  if (v->u.array.len > max)
    return agsx_error_set(err, 0, "config: %s: more than %zu entries", field, max);
  char **out = xzalloc((v->u.array.len + 1) * sizeof(char *));
  for (size_t i = 0; i < v->u.array.len; i++) {
    yajl_val s = v->u.array.values[i];
    if (!YAJL_IS_STRING(s)) {
      agsx_strv_free(out);
      return REFUSE(err, field, "expected an array of strings");
    }
    out[i] = xstrdup(YAJL_GET_STRING(s));
  }
  *ret = out;
  return 0;
}

/* A present, non-empty value of a field agsx refuses. */
static bool present(yajl_val o, const char *key) {
  yajl_val v = agsx_json_get(o, key);
  if (v == NULL || YAJL_IS_NULL(v))
    return false;
  if (YAJL_IS_ARRAY(v))
    return v->u.array.len > 0;
  if (YAJL_IS_OBJECT(v))
    return v->u.object.len > 0;
  if (YAJL_IS_STRING(v))
    return YAJL_GET_STRING(v)[0] != '\0';
  return true;
}

static yajl_val get_obj(yajl_val o, const char *key, const char *field, agsx_error_t *err, int *r) {
  yajl_val v = agsx_json_get(o, key);
  *r = 0;
  if (v == NULL || YAJL_IS_NULL(v))
    return NULL;
  if (!YAJL_IS_OBJECT(v))
    *r = REFUSE(err, field, "expected an object");
  return *r < 0 ? NULL : v;
}

static char *serialise(yajl_val v) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  agsx_json_value(g, v);
  return agsx_json_gen_steal(g, NULL);
}

/* ---- capabilities ---------------------------------------------------------------------- */

static const char *const cap_names[] = {
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
};

int agsx_oci_cap_from_name(const char *name) {
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(cap_names); i++)
    if (strcasecmp(cap_names[i], name) == 0 ||
        (strncasecmp(name, "CAP_", 4) != 0 && strcasecmp(cap_names[i] + 4, name) == 0))
      return (int)i;
  return -1;
}

const char *agsx_oci_cap_name(int cap) {
  return cap >= 0 && (size_t)cap < AGSX_ARRAY_SIZE(cap_names) ? cap_names[cap] : "CAP_?";
}

#define CAPBIT(c) (1ull << (c))

/* Docker's default set (src/sandbox/caps.c), the most a container gets. */
uint64_t agsx_oci_caps_max(const struct agsx_oci_policy *pol) {
  uint64_t m = CAPBIT(CAP_CHOWN) | CAPBIT(CAP_DAC_OVERRIDE) | CAPBIT(CAP_FOWNER) |
               CAPBIT(CAP_FSETID) | CAPBIT(CAP_KILL) | CAPBIT(CAP_SETGID) | CAPBIT(CAP_SETUID) |
               CAPBIT(CAP_SETPCAP) | CAPBIT(CAP_NET_BIND_SERVICE) | CAPBIT(CAP_SYS_CHROOT) |
               CAPBIT(CAP_MKNOD) | CAPBIT(CAP_AUDIT_WRITE) | CAPBIT(CAP_SETFCAP);
  if (pol && pol->compat)
    m |= CAPBIT(CAP_NET_RAW);
  return m;
}

/* Capabilities whose presence makes a container privileged: refused, not
 * silently dropped (the engine asked for a privileged container). */
static const uint64_t privileged_caps =
    CAPBIT(CAP_SYS_ADMIN) | CAPBIT(CAP_SYS_MODULE) | CAPBIT(CAP_SYS_RAWIO) |
    CAPBIT(CAP_SYS_PTRACE) | CAPBIT(CAP_SYS_TIME) | CAPBIT(CAP_BPF) | CAPBIT(CAP_PERFMON) |
    CAPBIT(CAP_NET_ADMIN) | CAPBIT(CAP_DAC_READ_SEARCH) | CAPBIT(CAP_MAC_ADMIN) |
    CAPBIT(CAP_MAC_OVERRIDE) | CAPBIT(CAP_SYS_BOOT) | CAPBIT(CAP_LINUX_IMMUTABLE) |
    CAPBIT(CAP_SYSLOG) | CAPBIT(CAP_AUDIT_CONTROL) | CAPBIT(CAP_CHECKPOINT_RESTORE);

static int parse_caps(yajl_val caps, struct agsx_oci_process *p, agsx_error_t *err) {
  static const char *const sets[] = {"bounding", "effective", "inheritable", "permitted",
                                     "ambient"};
  for (int s = 0; s < AGSX_OCI_CAP_SETS; s++) {
    char field[64];
    snprintf(field, sizeof(field), "process.capabilities.%s", sets[s]);
    _cleanup_strv_ char **v = NULL;
    if (get_strv(caps, sets[s], field, 64, &v, err) < 0)
      return -1;
    for (char **c = v; c && *c; c++) {
      int n = agsx_oci_cap_from_name(*c);
      if (n < 0) {
        /* A capability this kernel generation has no name for: none
         * agsx would grant anyway. */
        agsx_debug("config: %s: unknown capability `%s` ignored", field, *c);
        continue;
      }
      p->caps[s] |= CAPBIT(n);
    }
  }
  return 0;
}

/* ---- process ------------------------------------------------------------------------------ */

static const struct {
  const char *name;
  int resource;
} rlimit_names[] = {
    {"RLIMIT_AS", RLIMIT_AS},
    {"RLIMIT_CORE", RLIMIT_CORE},
    {"RLIMIT_CPU", RLIMIT_CPU},
    {"RLIMIT_DATA", RLIMIT_DATA},
    {"RLIMIT_FSIZE", RLIMIT_FSIZE},
    {"RLIMIT_LOCKS", RLIMIT_LOCKS},
    {"RLIMIT_MEMLOCK", RLIMIT_MEMLOCK},
    {"RLIMIT_MSGQUEUE", RLIMIT_MSGQUEUE},
    {"RLIMIT_NICE", RLIMIT_NICE},
    {"RLIMIT_NOFILE", RLIMIT_NOFILE},
    {"RLIMIT_NPROC", RLIMIT_NPROC},
    {"RLIMIT_RSS", RLIMIT_RSS},
    {"RLIMIT_RTPRIO", RLIMIT_RTPRIO},
    {"RLIMIT_RTTIME", RLIMIT_RTTIME},
    {"RLIMIT_SIGPENDING", RLIMIT_SIGPENDING},
    {"RLIMIT_STACK", RLIMIT_STACK},
};

static int parse_rlimits(yajl_val arr, struct agsx_oci_process *p, agsx_error_t *err) {
  if (arr == NULL || YAJL_IS_NULL(arr))
    return 0;
  if (!YAJL_IS_ARRAY(arr) || arr->u.array.len > 32)
    return REFUSE(err, "process.rlimits", "expected an array of at most 32 limits");
  p->rlimits = xzalloc((arr->u.array.len + 1) * sizeof(*p->rlimits));
  for (size_t i = 0; i < arr->u.array.len; i++) {
    yajl_val r = arr->u.array.values[i];
    const char *type = YAJL_IS_OBJECT(r) ? agsx_json_get_string(r, "type") : NULL;
    int res = -1;
    for (size_t k = 0; type && k < AGSX_ARRAY_SIZE(rlimit_names); k++)
      if (strcmp(rlimit_names[k].name, type) == 0)
        res = rlimit_names[k].resource;
    if (res < 0)
      return REFUSE(err, "process.rlimits", "unknown limit type");
    struct agsx_oci_rlimit *l = &p->rlimits[p->n_rlimits++];
    l->resource = res;
    l->soft = l->hard = 0;
    if (get_u64(r, "soft", "process.rlimits.soft", &l->soft, err) < 0 ||
        get_u64(r, "hard", "process.rlimits.hard", &l->hard, err) < 0)
      return -1;
    if (l->soft > l->hard)
      return REFUSE(err, "process.rlimits", "soft limit above the hard limit");
  }
  return 0;
}

static int parse_user(yajl_val u, struct agsx_oci_process *p, agsx_error_t *err) {
  int64_t v = 0;
  bool has;
  if (u == NULL)
    return 0;
  if (present(u, "username"))
    return UNSUPPORTED(err, "process.user.username");
  if (get_int(u, "uid", "process.user.uid", 0, UINT32_MAX - 1, &v, &has, err) < 0)
    return -1;
  p->uid = (uint32_t)v;
  v = 0;
  if (get_int(u, "gid", "process.user.gid", 0, UINT32_MAX - 1, &v, &has, err) < 0)
    return -1;
  p->gid = (uint32_t)v;
  if (get_int(u, "umask", "process.user.umask", 0, 0777, &v, &has, err) < 0)
    return -1;
  p->umask = has ? (int)v : -1;
  yajl_val g = agsx_json_get(u, "additionalGids");
  if (g && !YAJL_IS_NULL(g)) {
    if (!YAJL_IS_ARRAY(g) || g->u.array.len > AGSX_OCI_MAX_GROUPS)
      return REFUSE(err, "process.user.additionalGids", "expected at most 32 group ids");
    for (size_t i = 0; i < g->u.array.len; i++) {
      yajl_val e = g->u.array.values[i];
      if (!YAJL_IS_INTEGER(e) || YAJL_GET_INTEGER(e) < 0 || YAJL_GET_INTEGER(e) >= UINT32_MAX)
        return REFUSE(err, "process.user.additionalGids", "expected group ids");
      /* Each gid once, the primary one not again (the launch puts it
       * first): the kernel keeps duplicates, runc's list has none. */
      gid_t gid = (gid_t)YAJL_GET_INTEGER(e);
      bool seen = gid == p->gid;
      for (size_t k = 0; k < p->n_groups && !seen; k++)
        seen = p->groups[k] == gid;
      if (!seen)
        p->groups[p->n_groups++] = gid;
    }
  }
  return 0;
}

static int process_from(yajl_val o, struct agsx_oci_process *p, agsx_error_t *err) {
  memset(p, 0, sizeof(*p));
  p->umask = -1;
  if (!YAJL_IS_OBJECT(o))
    return REFUSE(err, "process", "expected an object");
  static const char *const refused[] = {"ioPriority", "scheduler", "execCPUAffinity"};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(refused); i++)
    if (present(o, refused[i])) {
      char field[64];
      snprintf(field, sizeof(field), "process.%s", refused[i]);
      return UNSUPPORTED(err, field);
    }
  if (get_strv(o, "args", "process.args", AGSX_OCI_MAX_ARGS, &p->args, err) < 0 ||
      get_strv(o, "env", "process.env", AGSX_OCI_MAX_ENV, &p->env, err) < 0 ||
      get_string(o, "cwd", "process.cwd", &p->cwd, err) < 0 ||
      get_bool(o, "terminal", "process.terminal", &p->terminal, err) < 0 ||
      get_bool(o, "noNewPrivileges", "process.noNewPrivileges", &p->no_new_privileges, err) < 0 ||
      get_string(o, "apparmorProfile", "process.apparmorProfile", &p->apparmor, err) < 0 ||
      get_string(o, "selinuxLabel", "process.selinuxLabel", &p->selinux, err) < 0)
    return -1;
  if (p->args == NULL || p->args[0] == NULL || p->args[0][0] == '\0')
    return REFUSE(err, "process.args", "must name the program to run");
  if (p->cwd == NULL || p->cwd[0] != '/')
    return REFUSE(err, "process.cwd", "must be an absolute path");
  for (char **e = p->env; e && *e; e++)
    if (strchr(*e, '=') == NULL)
      return REFUSE(err, "process.env", "entries must be KEY=VALUE");
  int r;
  yajl_val user = get_obj(o, "user", "process.user", err, &r);
  if (r < 0 || parse_user(user, p, err) < 0)
    return -1;
  yajl_val cs = get_obj(o, "consoleSize", "process.consoleSize", err, &r);
  int64_t v = 0;
  if (r < 0)
    return -1;
  if (cs) {
    if (get_int(cs, "height", "process.consoleSize.height", 0, 65535, &v, NULL, err) < 0)
      return -1;
    p->rows = (unsigned)v;
    v = 0;
    if (get_int(cs, "width", "process.consoleSize.width", 0, 65535, &v, NULL, err) < 0)
      return -1;
    p->cols = (unsigned)v;
  }
  yajl_val caps = get_obj(o, "capabilities", "process.capabilities", err, &r);
  if (r < 0 || (caps && parse_caps(caps, p, err) < 0))
    return -1;
  if (parse_rlimits(agsx_json_get(o, "rlimits"), p, err) < 0)
    return -1;
  if (get_int(o, "oomScoreAdj", "process.oomScoreAdj", -1000, 1000, &v, &p->has_oom_score_adj,
              err) < 0)
    return -1;
  p->oom_score_adj = (int)v;
  return 0;
}

void agsx_oci_process_clear(struct agsx_oci_process *p) {
  agsx_strv_free(p->args);
  agsx_strv_free(p->env);
  free(p->cwd);
  free(p->rlimits);
  free(p->apparmor);
  free(p->selinux);
  memset(p, 0, sizeof(*p));
}

int agsx_oci_process_parse(const char *buf, size_t len, struct agsx_oci_process *ret,
                           agsx_error_t *err) {
  _cleanup_json_ yajl_val root = agsx_json_parse(buf, len, AGSX_OCI_CONFIG_MAX, err);
  memset(ret, 0, sizeof(*ret));
  if (root == NULL)
    return agsx_error_wrap(err, "process");
  if (process_from(root, ret, err) < 0) {
    agsx_oci_process_clear(ret);
    return -1;
  }
  return 0;
}

/* ---- mounts ---------------------------------------------------------------------------------- */

static const struct {
  const char *name;
  unsigned long set, clear;
} mount_flags[] = {
    {"ro", MS_RDONLY, 0},
    {"rw", 0, MS_RDONLY},
    {"nosuid", MS_NOSUID, 0},
    {"suid", 0, MS_NOSUID},
    {"nodev", MS_NODEV, 0},
    {"dev", 0, MS_NODEV},
    {"noexec", MS_NOEXEC, 0},
    {"exec", 0, MS_NOEXEC},
    {"relatime", MS_RELATIME, 0},
    {"norelatime", 0, MS_RELATIME},
    {"noatime", MS_NOATIME, 0},
    {"atime", 0, MS_NOATIME},
    {"strictatime", MS_STRICTATIME, 0},
    {"nodiratime", MS_NODIRATIME, 0},
    {"diratime", 0, MS_NODIRATIME},
    {"sync", MS_SYNCHRONOUS, 0},
    {"async", 0, MS_SYNCHRONOUS},
    {"dirsync", MS_DIRSYNC, 0},
    {"remount", 0, 0},
    {"defaults", 0, 0},
};

static const struct {
  const char *name;
  unsigned long flags;
} propagations[] = {
    {"private", MS_PRIVATE},       {"rprivate", MS_PRIVATE | MS_REC},
    {"slave", MS_SLAVE},           {"rslave", MS_SLAVE | MS_REC},
    {"unbindable", MS_UNBINDABLE}, {"runbindable", MS_UNBINDABLE | MS_REC},
};

/* linux.rootfsPropagation. Shared would let mounts travel between the
 * container's root and the host's: refused (a stricter runtime keeps the
 * container's tree its own; a mount's own shared option is honoured). */
static int propagation_of(const char *s, const char *field, unsigned long *ret, agsx_error_t *err) {
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(propagations); i++)
    if (strcmp(propagations[i].name, s) == 0) {
      *ret = propagations[i].flags;
      return 0;
    }
  if (strcmp(s, "shared") == 0 || strcmp(s, "rshared") == 0)
    return REFUSE(err, field, "shared propagation is not supported by agsx");
  return agsx_error_set(err, 0, "config: %s: unknown propagation `%s`", field, s);
}

static const char *const mount_types[] = {"bind",   "rbind",  "tmpfs",  "proc",    "sysfs",
                                          "devpts", "mqueue", "cgroup", "cgroup2", "none"};

/* One mounts[].options word into OUT: bind/rbind, a flag, a propagation,
 * a crun extension (ignored), else kept for the filesystem's data. */
static int mount_option(const char *o, struct agsx_oci_mount *out, size_t cap, size_t *len,
                        agsx_error_t *err) {
  if (strcmp(o, "bind") == 0 || strcmp(o, "rbind") == 0) {
    out->bind = true;
    out->recursive |= o[0] == 'r';
    return 0;
  }
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(mount_flags); i++)
    if (strcmp(mount_flags[i].name, o) == 0) {
      out->flags = (out->flags & ~mount_flags[i].clear) | mount_flags[i].set;
      out->clear = (out->clear & ~mount_flags[i].set) | mount_flags[i].clear;
      return 0;
    }
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(propagations); i++)
    if (strcmp(propagations[i].name, o) == 0) {
      out->propagation = propagations[i].flags;
      return 0;
    }
  /* A mount's own: shared with its copies inside the container only
   * (launch-init.c), never with the host's. */
  if (strcmp(o, "shared") == 0 || strcmp(o, "rshared") == 0) {
    out->propagation = MS_SHARED | (o[0] == 'r' ? MS_REC : 0);
    return 0;
  }
  if (strcmp(o, "idmap") == 0 || strcmp(o, "ridmap") == 0)
    return REFUSE(err, "mounts.options",
                  "`idmap` requested by the engine is not supported by "
                  "agsx yet");
  if (strncmp(o, "tmpcopyup", 9) == 0 || strcmp(o, "copy-symlink") == 0 ||
      strcmp(o, "notmpcopyup") == 0 || strncmp(o, "U", 2) == 0)
    return 0; /* crun extensions: nothing to copy up on fresh tmpfs here */
  if (strchr(o, ',') != NULL)
    return REFUSE(err, "mounts.options", "an option holds a comma");
  *len += (size_t)snprintf(out->data + *len, cap - *len, "%s%s", *len ? "," : "", o);
  return 0;
}

static int parse_mount(yajl_val m, struct agsx_oci_mount *out, agsx_error_t *err) {
  if (!YAJL_IS_OBJECT(m))
    return REFUSE(err, "mounts", "expected objects");
  if (get_string(m, "destination", "mounts.destination", &out->destination, err) < 0 ||
      get_string(m, "type", "mounts.type", &out->type, err) < 0 ||
      get_string(m, "source", "mounts.source", &out->source, err) < 0)
    return -1;
  if (out->destination == NULL || out->destination[0] != '/' || strlen(out->destination) > 4096)
    return REFUSE(err, "mounts.destination", "must be an absolute path");
  if (present(m, "uidMappings") || present(m, "gidMappings"))
    return REFUSE(err, "mounts.uidMappings",
                  "idmapped mounts requested by the engine are not "
                  "supported by agsx yet");
  _cleanup_strv_ char **opts = NULL;
  if (get_strv(m, "options", "mounts.options", 64, &opts, err) < 0)
    return -1;
  size_t cap = 1, len = 0;
  for (char **o = opts; o && *o; o++)
    cap += strlen(*o) + 1;
  out->data = xzalloc(cap);
  for (char **o = opts; o && *o; o++)
    if (mount_option(*o, out, cap, &len, err) < 0)
      return -1;
  if (out->type == NULL || out->type[0] == '\0')
    out->type = xstrdup(out->bind ? "bind" : "none");
  if (strcmp(out->type, "bind") == 0 || strcmp(out->type, "rbind") == 0) {
    out->recursive |= out->type[0] == 'r';
    out->bind = true;
  }
  bool ok = false;
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(mount_types) && !ok; i++)
    ok = strcmp(mount_types[i], out->type) == 0;
  if (!ok || (strcmp(out->type, "none") == 0 && !out->bind)) {
    char field[96];
    snprintf(field, sizeof(field), "mounts[%s].type", out->destination);
    return agsx_error_set(err, 0, "config: %s: mount type `%.32s` is not supported by agsx", field,
                          out->type);
  }
  if (out->bind && (out->source == NULL || out->source[0] != '/'))
    return REFUSE(err, "mounts.source", "a bind mount needs an absolute source");
  return 0;
}

/* ---- linux ----------------------------------------------------------------------------------- */

static const struct {
  const char *name;
  int type;
} ns_names[] = {
    {"pid", CLONE_NEWPID},       {"network", CLONE_NEWNET}, {"mount", CLONE_NEWNS},
    {"ipc", CLONE_NEWIPC},       {"uts", CLONE_NEWUTS},     {"user", CLONE_NEWUSER},
    {"cgroup", CLONE_NEWCGROUP},
};

static int parse_namespaces(yajl_val arr, struct agsx_oci_spec *s, agsx_error_t *err) {
  if (arr == NULL || YAJL_IS_NULL(arr))
    return 0;
  if (!YAJL_IS_ARRAY(arr) || arr->u.array.len > 16)
    return REFUSE(err, "linux.namespaces", "expected an array");
  s->namespaces = xzalloc((arr->u.array.len + 1) * sizeof(*s->namespaces));
  for (size_t i = 0; i < arr->u.array.len; i++) {
    yajl_val n = arr->u.array.values[i];
    const char *type = YAJL_IS_OBJECT(n) ? agsx_json_get_string(n, "type") : NULL;
    int t = 0;
    for (size_t k = 0; type && k < AGSX_ARRAY_SIZE(ns_names); k++)
      if (strcmp(ns_names[k].name, type) == 0)
        t = ns_names[k].type;
    if (t == 0) {
      if (type && strcmp(type, "time") == 0)
        return UNSUPPORTED(err, "linux.namespaces[time]");
      return REFUSE(err, "linux.namespaces", "unknown namespace type");
    }
    if (agsx_oci_spec_ns(s, t))
      return agsx_error_set(err, 0, "config: linux.namespaces: `%s` appears twice", type);
    struct agsx_oci_ns *ns = &s->namespaces[s->n_namespaces++];
    ns->type = t;
    if (get_string(n, "path", "linux.namespaces.path", &ns->path, err) < 0)
      return -1;
    if (ns->path && (ns->path[0] != '/' || strlen(ns->path) > 4096))
      return REFUSE(err, "linux.namespaces.path", "must be an absolute path");
  }
  return 0;
}

const struct agsx_oci_ns *agsx_oci_spec_ns(const struct agsx_oci_spec *s, int type) {
  for (size_t i = 0; i < s->n_namespaces; i++)
    if (s->namespaces[i].type == type)
      return &s->namespaces[i];
  return NULL;
}

static int parse_maps(yajl_val arr, const char *field, struct agsx_oci_idmap *out, size_t *n,
                      agsx_error_t *err) {
  if (arr == NULL || YAJL_IS_NULL(arr))
    return 0;
  if (!YAJL_IS_ARRAY(arr) || arr->u.array.len > AGSX_OCI_MAX_MAPS)
    return agsx_error_set(err, 0, "config: %s: expected at most %d mappings", field,
                          AGSX_OCI_MAX_MAPS);
  for (size_t i = 0; i < arr->u.array.len; i++) {
    yajl_val m = arr->u.array.values[i];
    int64_t c = -1, h = -1, sz = -1;
    if (!YAJL_IS_OBJECT(m) ||
        get_int(m, "containerID", field, 0, UINT32_MAX - 1, &c, NULL, err) < 0 ||
        get_int(m, "hostID", field, 0, UINT32_MAX - 1, &h, NULL, err) < 0 ||
        get_int(m, "size", field, 1, UINT32_MAX, &sz, NULL, err) < 0)
      return err && *err ? -1 : REFUSE(err, field, "expected containerID, hostID and size");
    if (c < 0 || h < 0 || sz < 1 || c + sz > (int64_t)UINT32_MAX || h + sz > (int64_t)UINT32_MAX)
      return REFUSE(err, field, "expected containerID, hostID and size");
    out[*n].container = (uint32_t)c;
    out[*n].host = (uint32_t)h;
    out[*n].size = (uint32_t)sz;
    (*n)++;
  }
  return 0;
}

static int parse_devices(yajl_val arr, struct agsx_oci_spec *s, agsx_error_t *err) {
  if (arr == NULL || YAJL_IS_NULL(arr))
    return 0;
  if (!YAJL_IS_ARRAY(arr) || arr->u.array.len > AGSX_OCI_MAX_PATHS)
    return REFUSE(err, "linux.devices", "expected an array of at most 256 devices");
  s->devices = xzalloc((arr->u.array.len + 1) * sizeof(*s->devices));
  for (size_t i = 0; i < arr->u.array.len; i++) {
    yajl_val d = arr->u.array.values[i];
    struct agsx_oci_device *dev = &s->devices[s->n_devices++];
    char *type = NULL;
    int64_t v;
    if (!YAJL_IS_OBJECT(d))
      return REFUSE(err, "linux.devices", "expected objects");
    if (get_string(d, "path", "linux.devices.path", &dev->path, err) < 0 ||
        get_string(d, "type", "linux.devices.type", &type, err) < 0)
      return -1;
    dev->type = type && strlen(type) == 1 ? type[0] : '?';
    free(type);
    if (dev->path == NULL || strncmp(dev->path, "/dev/", 5) != 0 || strstr(dev->path, "/../"))
      return REFUSE(err, "linux.devices.path", "must be a path under /dev");
    if (!strchr("cbup", dev->type))
      return REFUSE(err, "linux.devices.type", "expected c, b, u or p");
    if (get_int(d, "major", "linux.devices.major", 0, UINT32_MAX, &dev->major, NULL, err) < 0 ||
        get_int(d, "minor", "linux.devices.minor", 0, UINT32_MAX, &dev->minor, NULL, err) < 0 ||
        get_int(d, "fileMode", "linux.devices.fileMode", 0, 0177777, &v, &dev->has_mode, err) < 0)
      return -1;
    dev->mode = (uint32_t)v;
    if (get_int(d, "uid", "linux.devices.uid", 0, UINT32_MAX - 1, &v, &dev->has_uid, err) < 0)
      return -1;
    dev->uid = (uint32_t)v;
    if (get_int(d, "gid", "linux.devices.gid", 0, UINT32_MAX - 1, &v, &dev->has_gid, err) < 0)
      return -1;
    dev->gid = (uint32_t)v;
  }
  return 0;
}

/* Keys the kernel namespaces with ipc, uts or net: the rest would change
 * the host (runc's and the spec's rule). */
static bool sysctl_is_namespaced(const char *key) {
  static const char *const ipc[] = {"kernel.msgmax", "kernel.msgmnb",         "kernel.msgmni",
                                    "kernel.sem",    "kernel.shmall",         "kernel.shmmax",
                                    "kernel.shmmni", "kernel.shm_rmid_forced"};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(ipc); i++)
    if (strcmp(key, ipc[i]) == 0)
      return true;
  return agsx_str_has_prefix(key, "fs.mqueue.") || agsx_str_has_prefix(key, "net.") ||
         strcmp(key, "kernel.hostname") == 0 || strcmp(key, "kernel.domainname") == 0;
}

static int parse_sysctl(yajl_val o, struct agsx_oci_spec *s, agsx_error_t *err) {
  if (o == NULL || YAJL_IS_NULL(o))
    return 0;
  if (!YAJL_IS_OBJECT(o) || o->u.object.len > AGSX_OCI_MAX_PATHS)
    return REFUSE(err, "linux.sysctl", "expected an object of at most 256 keys");
  for (size_t i = 0; i < o->u.object.len; i++) {
    const char *k = o->u.object.keys[i];
    yajl_val v = o->u.object.values[i];
    if (!YAJL_IS_STRING(v))
      return REFUSE(err, "linux.sysctl", "values must be strings");
    bool clean = k[0] != '\0' && strlen(k) < 128 && strstr(k, "..") == NULL && k[0] != '.';
    for (const char *c = k; *c && clean; c++)
      clean = isalnum((unsigned char)*c) || *c == '.' || *c == '_' || *c == '-' || *c == '/';
    if (!clean || !sysctl_is_namespaced(k))
      return agsx_error_set(err, 0,
                            "config: linux.sysctl: `%.128s` is not a namespaced sysctl (not "
                            "supported by agsx)",
                            k);
    const char *val = YAJL_GET_STRING(v);
    if (val == NULL || strlen(val) > 1024 || strchr(val, '\n'))
      return REFUSE(err, "linux.sysctl", "value too long or multi-line");
    _cleanup_free_ char *kv = xasprintf("%s=%s", k, val);
    agsx_strv_push(&s->sysctl, kv);
  }
  return 0;
}

static int parse_device_rules(yajl_val arr, struct agsx_oci_resources *r, agsx_error_t *err) {
  if (arr == NULL || YAJL_IS_NULL(arr))
    return 0;
  if (!YAJL_IS_ARRAY(arr) || arr->u.array.len > AGSX_OCI_MAX_PATHS)
    return REFUSE(err, "linux.resources.devices", "expected an array of at most 256 rules");
  r->devices = xzalloc((arr->u.array.len + 1) * sizeof(*r->devices));
  for (size_t i = 0; i < arr->u.array.len; i++) {
    yajl_val d = arr->u.array.values[i];
    struct agsx_oci_device_rule *rule = &r->devices[r->n_devices++];
    bool has;
    rule->major = rule->minor = -1;
    if (!YAJL_IS_OBJECT(d))
      return REFUSE(err, "linux.resources.devices", "expected objects");
    yajl_val allow = agsx_json_get(d, "allow");
    if (allow == NULL || (!YAJL_IS_TRUE(allow) && !YAJL_IS_FALSE(allow)))
      return REFUSE(err, "linux.resources.devices.allow", "expected true or false");
    rule->allow = YAJL_IS_TRUE(allow);
    const char *type = agsx_json_get_string(d, "type");
    rule->type = type == NULL || type[0] == '\0' ? 'a' : type[0];
    if (!strchr("acb", rule->type) || (type && strlen(type) > 1))
      return REFUSE(err, "linux.resources.devices.type", "expected a, c or b");
    if (get_int(d, "major", "linux.resources.devices.major", -1, UINT32_MAX, &rule->major, &has,
                err) < 0 ||
        get_int(d, "minor", "linux.resources.devices.minor", -1, UINT32_MAX, &rule->minor, &has,
                err) < 0)
      return -1;
    const char *access = agsx_json_get_string(d, "access");
    if (access == NULL || access[0] == '\0')
      access = "rwm";
    if (strlen(access) > 3 || strspn(access, "rwm") != strlen(access))
      return REFUSE(err, "linux.resources.devices.access", "expected r, w and m");
    snprintf(rule->access, sizeof(rule->access), "%s", access);
  }
  return 0;
}

/* linux.resources.blockIO: the weight and the four throttle lists; per-device
 * weights and leafWeight are refused. */
static int parse_blockio(yajl_val b, struct agsx_oci_resources *r, agsx_error_t *err) {
  if (!YAJL_IS_OBJECT(b))
    return REFUSE(err, "linux.resources.blockIO", "expected an object");
  if (present(b, "weightDevice"))
    return UNSUPPORTED(err, "linux.resources.blockIO.weightDevice");
  if (present(b, "leafWeight"))
    return UNSUPPORTED(err, "linux.resources.blockIO.leafWeight");
  if (get_u64(b, "weight", "linux.resources.blockIO.weight", &r->blkio_weight, err) < 0)
    return -1;
  if (r->blkio_weight && (r->blkio_weight < 10 || r->blkio_weight > 1000))
    return REFUSE(err, "linux.resources.blockIO.weight", "must be 10 to 1000");
  static const char *const keys[] = {"throttleReadBpsDevice", "throttleWriteBpsDevice",
                                     "throttleReadIOPSDevice", "throttleWriteIOPSDevice"};
  for (int k = 0; k < 4; k++) {
    char field[64];
    snprintf(field, sizeof(field), "linux.resources.blockIO.%s", keys[k]);
    yajl_val a = agsx_json_get(b, keys[k]);
    if (a == NULL || YAJL_IS_NULL(a))
      continue;
    if (!YAJL_IS_ARRAY(a) || r->n_throttle + a->u.array.len > 64)
      return REFUSE(err, field, "expected an array of at most 64 devices");
    r->throttle =
        xrealloc(r->throttle, (r->n_throttle + a->u.array.len + 1) * sizeof(*r->throttle));
    for (size_t i = 0; i < a->u.array.len; i++) {
      yajl_val d = a->u.array.values[i];
      struct agsx_oci_throttle *t = &r->throttle[r->n_throttle++];
      bool has_major = false, has_minor = false;
      memset(t, 0, sizeof(*t));
      t->kind = k;
      if (!YAJL_IS_OBJECT(d))
        return REFUSE(err, field, "expected objects");
      if (get_int(d, "major", field, 0, UINT32_MAX, &t->major, &has_major, err) < 0 ||
          get_int(d, "minor", field, 0, UINT32_MAX, &t->minor, &has_minor, err) < 0 ||
          get_u64(d, "rate", field, &t->rate, err) < 0)
        return -1;
      if (!has_major || !has_minor)
        return REFUSE(err, field, "a device needs major and minor");
    }
  }
  return 0;
}

/* linux.resources.memory's swappiness (-1 or above INT64_MAX: unset, as
 * runc takes Docker's default) and disableOOMKiller. */
static int parse_memory_v1(yajl_val mem, struct agsx_oci_resources *r, agsx_error_t *err) {
  int64_t sw = -1;
  if (get_limit(mem, "swappiness", "linux.resources.memory.swappiness", &sw, err) < 0 ||
      get_bool(mem, "disableOOMKiller", "linux.resources.memory.disableOOMKiller",
               &r->disable_oom_killer, err) < 0)
    return -1;
  if (sw > 100)
    return REFUSE(err, "linux.resources.memory.swappiness", "must be 0 to 100");
  r->has_swappiness = sw >= 0;
  r->swappiness = sw >= 0 ? (unsigned)sw : 0;
  return 0;
}

/* linux.resources.hugepageLimits: a page size as the kernel names its
 * files (digits, then KB, MB or GB), a limit in bytes. */
static int parse_hugepages(yajl_val a, struct agsx_oci_resources *r, agsx_error_t *err) {
  const char *field = "linux.resources.hugepageLimits";
  if (a == NULL || YAJL_IS_NULL(a))
    return 0;
  if (!YAJL_IS_ARRAY(a) || a->u.array.len > AGSX_OCI_MAX_HUGEPAGES)
    return REFUSE(err, field, "expected an array of at most 16 page sizes");
  r->hugepages = xzalloc((a->u.array.len + 1) * sizeof(*r->hugepages));
  for (size_t i = 0; i < a->u.array.len; i++) {
    yajl_val h = a->u.array.values[i];
    struct agsx_oci_hugepage *hp = &r->hugepages[r->n_hugepages++];
    const char *size = YAJL_IS_OBJECT(h) ? agsx_json_get_string(h, "pageSize") : NULL;
    size_t digits = size ? strspn(size, "0123456789") : 0;
    if (size == NULL || digits == 0 || digits > 6 || strlen(size) != digits + 2 ||
        !strchr("KMG", size[digits]) || size[digits + 1] != 'B')
      return REFUSE(err, field, "expected a pageSize such as 2MB");
    snprintf(hp->size, sizeof(hp->size), "%s", size);
    hp->limit = UINT64_MAX;
    if (get_u64(h, "limit", field, &hp->limit, err) < 0)
      return -1;
  }
  return 0;
}

static int resources_from(yajl_val o, struct agsx_oci_resources *r, agsx_error_t *err) {
  memset(r, 0, sizeof(*r));
  r->memory_limit = r->memory_reservation = r->memory_swap = r->cpu_quota = -1;
  if (!YAJL_IS_OBJECT(o))
    return REFUSE(err, "linux.resources", "expected an object");
  static const char *const refused[] = {"rdma", "network", "unified"};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(refused); i++)
    if (present(o, refused[i])) {
      char field[64];
      snprintf(field, sizeof(field), "linux.resources.%s", refused[i]);
      return UNSUPPORTED(err, field);
    }
  int rr;
  yajl_val mem = get_obj(o, "memory", "linux.resources.memory", err, &rr);
  if (rr < 0)
    return -1;
  if (mem) {
    /* Deprecated by the spec, still sent (Docker's update always sends
     * kernel: 0): checked as numbers and ignored, as runc does. */
    int64_t ignored;
    if (get_limit(mem, "kernel", "linux.resources.memory.kernel", &ignored, err) < 0 ||
        get_limit(mem, "kernelTCP", "linux.resources.memory.kernelTCP", &ignored, err) < 0)
      return -1;
    if (get_limit(mem, "limit", "linux.resources.memory.limit", &r->memory_limit, err) < 0 ||
        get_limit(mem, "reservation", "linux.resources.memory.reservation", &r->memory_reservation,
                  err) < 0 ||
        get_limit(mem, "swap", "linux.resources.memory.swap", &r->memory_swap, err) < 0 ||
        parse_memory_v1(mem, r, err) < 0)
      return -1;
    if (r->memory_limit == 0)
      r->memory_limit = -1;
  }
  yajl_val cpu = get_obj(o, "cpu", "linux.resources.cpu", err, &rr);
  if (rr < 0)
    return -1;
  if (cpu) {
    if (present(cpu, "realtimeRuntime") || present(cpu, "realtimePeriod"))
      return UNSUPPORTED(err, "linux.resources.cpu.realtimeRuntime");
    if (get_u64(cpu, "shares", "linux.resources.cpu.shares", &r->cpu_shares, err) < 0 ||
        get_u64(cpu, "period", "linux.resources.cpu.period", &r->cpu_period, err) < 0 ||
        get_int(cpu, "quota", "linux.resources.cpu.quota", -1, INT64_MAX, &r->cpu_quota, NULL,
                err) < 0 ||
        get_string(cpu, "cpus", "linux.resources.cpu.cpus", &r->cpus, err) < 0 ||
        get_string(cpu, "mems", "linux.resources.cpu.mems", &r->mems, err) < 0)
      return -1;
    for (char *c = r->cpus; c && *c; c++)
      if (!isdigit((unsigned char)*c) && *c != ',' && *c != '-')
        return REFUSE(err, "linux.resources.cpu.cpus", "expected a cpu list");
    for (char *c = r->mems; c && *c; c++)
      if (!isdigit((unsigned char)*c) && *c != ',' && *c != '-')
        return REFUSE(err, "linux.resources.cpu.mems", "expected a node list");
    if (r->cpu_period && (r->cpu_period < 1000 || r->cpu_period > 1000000))
      return REFUSE(err, "linux.resources.cpu.period", "must be 1000 to 1000000");
  }
  yajl_val pids = get_obj(o, "pids", "linux.resources.pids", err, &rr);
  if (rr < 0)
    return -1;
  if (pids && get_int(pids, "limit", "linux.resources.pids.limit", INT64_MIN, INT64_MAX,
                      &r->pids_limit, NULL, err) < 0)
    return -1;
  if (r->pids_limit < 0)
    r->pids_limit = -1;
  yajl_val bio = agsx_json_get(o, "blockIO");
  if ((bio && !YAJL_IS_NULL(bio) && parse_blockio(bio, r, err) < 0) ||
      parse_hugepages(agsx_json_get(o, "hugepageLimits"), r, err) < 0)
    return -1;
  return parse_device_rules(agsx_json_get(o, "devices"), r, err);
}

void agsx_oci_resources_clear(struct agsx_oci_resources *r) {
  free(r->cpus);
  free(r->mems);
  free(r->devices);
  free(r->throttle);
  free(r->hugepages);
  memset(r, 0, sizeof(*r));
}

int agsx_oci_resources_parse(const char *buf, size_t len, struct agsx_oci_resources *ret,
                             agsx_error_t *err) {
  _cleanup_json_ yajl_val root = agsx_json_parse(buf, len, AGSX_OCI_CONFIG_MAX, err);
  memset(ret, 0, sizeof(*ret));
  if (root == NULL)
    return agsx_error_wrap(err, "resources");
  if (resources_from(root, ret, err) < 0) {
    agsx_oci_resources_clear(ret);
    return -1;
  }
  return 0;
}

static int parse_hooks(yajl_val o, struct agsx_oci_spec *s, agsx_error_t *err) {
  if (o == NULL || YAJL_IS_NULL(o))
    return 0;
  if (!YAJL_IS_OBJECT(o))
    return REFUSE(err, "hooks", "expected an object");
  if (present(o, "createContainer"))
    return UNSUPPORTED(err, "hooks.createContainer");
  if (present(o, "startContainer"))
    return UNSUPPORTED(err, "hooks.startContainer");
  for (int k = 0; k < AGSX_OCI_HOOK_KINDS; k++) {
    yajl_val arr = agsx_json_get(o, agsx_oci_hook_names[k]);
    char field[64];
    snprintf(field, sizeof(field), "hooks.%s", agsx_oci_hook_names[k]);
    if (arr == NULL || YAJL_IS_NULL(arr))
      continue;
    if (!YAJL_IS_ARRAY(arr) || arr->u.array.len > AGSX_OCI_MAX_HOOKS)
      return REFUSE(err, field, "expected an array of at most 32 hooks");
    s->hooks[k] = xzalloc((arr->u.array.len + 1) * sizeof(struct agsx_oci_hook));
    for (size_t i = 0; i < arr->u.array.len; i++) {
      yajl_val h = arr->u.array.values[i];
      struct agsx_oci_hook *hook = &s->hooks[k][s->n_hooks[k]++];
      int64_t t = 0;
      bool has;
      if (!YAJL_IS_OBJECT(h))
        return REFUSE(err, field, "expected objects");
      if (get_string(h, "path", field, &hook->path, err) < 0 ||
          get_strv(h, "args", field, 1024, &hook->args, err) < 0 ||
          get_strv(h, "env", field, 1024, &hook->env, err) < 0 ||
          get_int(h, "timeout", field, 1, 3600, &t, &has, err) < 0)
        return -1;
      if (hook->path == NULL || hook->path[0] != '/')
        return REFUSE(err, field, "path must be absolute");
      hook->timeout = (int)t;
    }
  }
  return 0;
}

/* maskedPaths and readonlyPaths absolute, cgroupsPath bounded. */
static int check_linux_paths(const struct agsx_oci_spec *s, agsx_error_t *err) {
  for (char **p = s->masked; p && *p; p++)
    if ((*p)[0] != '/')
      return REFUSE(err, "linux.maskedPaths", "paths must be absolute");
  for (char **p = s->readonly; p && *p; p++)
    if ((*p)[0] != '/')
      return REFUSE(err, "linux.readonlyPaths", "paths must be absolute");
  /* systemd's slice:prefix:name (--systemd-cgroup) is checked and mapped
   * by create (cgroup.h). */
  if (s->cgroups_path && (strlen(s->cgroups_path) > 1024 || strstr(s->cgroups_path, "..") ||
                          strchr(s->cgroups_path, '\n')))
    return REFUSE(err, "linux.cgroupsPath", "invalid path");
  return 0;
}

static int parse_linux_resources(yajl_val l, struct agsx_oci_spec *s, agsx_error_t *err) {
  int r;
  yajl_val res = get_obj(l, "resources", "linux.resources", err, &r);
  if (r < 0)
    return -1;
  if (res) {
    s->has_resources = true;
    return resources_from(res, &s->resources, err);
  }
  s->resources.memory_limit = s->resources.memory_reservation = s->resources.memory_swap =
      s->resources.cpu_quota = -1;
  return 0;
}

static int parse_linux(yajl_val l, struct agsx_oci_spec *s, agsx_error_t *err) {
  if (l == NULL)
    return 0;
  static const struct {
    const char *key, *why;
  } refused[] = {
      {"intelRdt", "not supported by agsx"},     {"personality", "not supported by agsx"},
      {"timeOffsets", "not supported by agsx"},  {"netDevices", "not supported by agsx"},
      {"memoryPolicy", "not supported by agsx"},
  };
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(refused); i++)
    if (present(l, refused[i].key)) {
      char field[64];
      snprintf(field, sizeof(field), "linux.%s", refused[i].key);
      return REFUSE(err, field, refused[i].why);
    }
  if (parse_namespaces(agsx_json_get(l, "namespaces"), s, err) < 0 ||
      parse_maps(agsx_json_get(l, "uidMappings"), "linux.uidMappings", s->uid_maps, &s->n_uid_maps,
                 err) < 0 ||
      parse_maps(agsx_json_get(l, "gidMappings"), "linux.gidMappings", s->gid_maps, &s->n_gid_maps,
                 err) < 0 ||
      parse_devices(agsx_json_get(l, "devices"), s, err) < 0 ||
      get_strv(l, "maskedPaths", "linux.maskedPaths", AGSX_OCI_MAX_PATHS, &s->masked, err) < 0 ||
      get_strv(l, "readonlyPaths", "linux.readonlyPaths", AGSX_OCI_MAX_PATHS, &s->readonly, err) <
          0 ||
      parse_sysctl(agsx_json_get(l, "sysctl"), s, err) < 0 ||
      get_string(l, "cgroupsPath", "linux.cgroupsPath", &s->cgroups_path, err) < 0 ||
      get_string(l, "mountLabel", "linux.mountLabel", &s->mount_label, err) < 0)
    return -1;
  if (check_linux_paths(s, err) < 0 || parse_linux_resources(l, s, err) < 0)
    return -1;
  int r;
  yajl_val sec = get_obj(l, "seccomp", "linux.seccomp", err, &r);
  if (r < 0)
    return -1;
  if (sec) {
    if (present(sec, "listenerPath") || present(sec, "listenerMetadata"))
      return UNSUPPORTED(err, "linux.seccomp.listenerPath");
    s->seccomp = serialise(sec);
  }
  const char *prop = agsx_json_get_string(l, "rootfsPropagation");
  if (prop && prop[0] &&
      propagation_of(prop, "linux.rootfsPropagation", &s->rootfs_propagation, err) < 0)
    return -1;
  return 0;
}

/* ---- the whole config ------------------------------------------------------------------------ */

static int check_version(const char *v, agsx_error_t *err) {
  /* 1.0.x (engines send "1.0.2-dev") to 1.2.x. */
  if (v == NULL)
    return REFUSE(err, "ociVersion", "missing");
  if (strncmp(v, "1.", 2) != 0 || !isdigit((unsigned char)v[2]) ||
      (v[2] > '2' || isdigit((unsigned char)v[3])))
    return agsx_error_set(err, 0,
                          "config: ociVersion: `%.32s` is not supported by agsx (1.0 to 1.2)", v);
  return 0;
}

/* root (path, readonly), hostname, domainname. */
static int parse_root_and_names(yajl_val root, struct agsx_oci_spec *s, agsx_error_t *err) {
  int r;
  yajl_val rootobj = get_obj(root, "root", "root", err, &r);
  if (r < 0)
    return -1;
  if (rootobj == NULL)
    return REFUSE(err, "root", "missing");
  if (get_string(rootobj, "path", "root.path", &s->root_path, err) < 0 ||
      get_bool(rootobj, "readonly", "root.readonly", &s->root_readonly, err) < 0)
    return -1;
  if (s->root_path == NULL || s->root_path[0] == '\0')
    return REFUSE(err, "root.path", "missing");
  if (get_string(root, "hostname", "hostname", &s->hostname, err) < 0 ||
      get_string(root, "domainname", "domainname", &s->domainname, err) < 0)
    return -1;
  if ((s->hostname && strlen(s->hostname) > 64) || (s->domainname && strlen(s->domainname) > 64))
    return REFUSE(err, "hostname", "longer than 64 bytes");
  return 0;
}

static int spec_from(yajl_val root, struct agsx_oci_spec *s, agsx_error_t *err) {
  if (!YAJL_IS_OBJECT(root))
    return REFUSE(err, "config", "expected an object");
  static const char *const refused[] = {"solaris", "windows", "vm", "zos"};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(refused); i++)
    if (present(root, refused[i]))
      return UNSUPPORTED(err, refused[i]);
  if (get_string(root, "ociVersion", "ociVersion", &s->oci_version, err) < 0 ||
      check_version(s->oci_version, err) < 0)
    return -1;
  int r;
  if (parse_root_and_names(root, s, err) < 0)
    return -1;
  yajl_val proc = get_obj(root, "process", "process", err, &r);
  if (r < 0)
    return -1;
  if (proc) {
    s->has_process = true;
    if (process_from(proc, &s->process, err) < 0)
      return -1;
  }
  yajl_val mounts = agsx_json_get(root, "mounts");
  if (mounts && !YAJL_IS_NULL(mounts)) {
    if (!YAJL_IS_ARRAY(mounts) || mounts->u.array.len > AGSX_OCI_MAX_MOUNTS)
      return REFUSE(err, "mounts", "expected an array of at most 128 mounts");
    s->mounts = xzalloc((mounts->u.array.len + 1) * sizeof(*s->mounts));
    for (size_t i = 0; i < mounts->u.array.len; i++)
      if (parse_mount(mounts->u.array.values[i], &s->mounts[s->n_mounts++], err) < 0)
        return -1;
  }
  if (parse_hooks(agsx_json_get(root, "hooks"), s, err) < 0)
    return -1;
  yajl_val linux_ = get_obj(root, "linux", "linux", err, &r);
  if (r < 0 || parse_linux(linux_, s, err) < 0)
    return -1;
  if (linux_ == NULL)
    s->resources.memory_limit = s->resources.memory_reservation = s->resources.memory_swap =
        s->resources.cpu_quota = -1;
  yajl_val ann = get_obj(root, "annotations", "annotations", err, &r);
  if (r < 0)
    return -1;
  if (ann) {
    for (size_t i = 0; i < ann->u.object.len; i++)
      if (!YAJL_IS_STRING(ann->u.object.values[i]))
        return REFUSE(err, "annotations", "values must be strings");
    s->annotations = serialise(ann);
  }
  return 0;
}

int agsx_oci_spec_parse(const char *buf, size_t len, struct agsx_oci_spec **ret,
                        agsx_error_t *err) {
  *ret = NULL;
  _cleanup_json_ yajl_val root = agsx_json_parse(buf, len, AGSX_OCI_CONFIG_MAX, err);
  if (root == NULL)
    return agsx_error_wrap(err, "config.json");
  _cleanup_oci_spec_ struct agsx_oci_spec *s = xzalloc(sizeof(*s));
  if (spec_from(root, s, err) < 0)
    return -1;
  *ret = steal_ptr(&s);
  return 0;
}

void agsx_oci_spec_free(struct agsx_oci_spec *s) {
  if (s == NULL)
    return;
  free(s->oci_version);
  free(s->root_path);
  free(s->hostname);
  free(s->domainname);
  agsx_oci_process_clear(&s->process);
  for (size_t i = 0; i < s->n_mounts; i++) {
    free(s->mounts[i].destination);
    free(s->mounts[i].type);
    free(s->mounts[i].source);
    free(s->mounts[i].data);
  }
  free(s->mounts);
  for (size_t i = 0; i < s->n_namespaces; i++)
    free(s->namespaces[i].path);
  free(s->namespaces);
  for (size_t i = 0; i < s->n_devices; i++)
    free(s->devices[i].path);
  free(s->devices);
  agsx_strv_free(s->masked);
  agsx_strv_free(s->readonly);
  agsx_strv_free(s->sysctl);
  free(s->cgroups_path);
  agsx_oci_resources_clear(&s->resources);
  free(s->seccomp);
  for (int k = 0; k < AGSX_OCI_HOOK_KINDS; k++) {
    for (size_t i = 0; i < s->n_hooks[k]; i++) {
      free(s->hooks[k][i].path);
      agsx_strv_free(s->hooks[k][i].args);
      agsx_strv_free(s->hooks[k][i].env);
    }
    free(s->hooks[k]);
  }
  free(s->annotations);
  free(s->mount_label);
  free(s);
}

void agsx_oci_spec_freep(struct agsx_oci_spec **s) {
  agsx_oci_spec_free(*s);
  *s = NULL;
}

/* ---- the policy --------------------------------------------------------------------------- */

int agsx_oci_policy_load(struct agsx_oci_policy *ret, agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  _cleanup_free_ char *v = NULL, *net = NULL;
  if (agsx_conf_get("oci-policy", "AGSX_OCI_POLICY", &v, err) < 0 ||
      agsx_conf_get("oci-host-network", "AGSX_OCI_HOST_NETWORK", &net, err) < 0)
    return -1;
  if (v && strcmp(v, "compat") == 0)
    ret->compat = true;
  else if (v && strcmp(v, "strict") != 0)
    return agsx_error_set(err, EINVAL, "agsx.conf: oci-policy `%s`: expected strict or compat", v);
  if (net && strcmp(net, "allow") == 0)
    ret->host_network = true;
  else if (net && strcmp(net, "deny") != 0)
    return agsx_error_set(err, EINVAL, "agsx.conf: oci-host-network `%s`: expected deny or allow",
                          net);
  if (ret->host_network && !ret->compat)
    return agsx_error_set(err, EINVAL,
                          "agsx.conf: oci-host-network = allow needs oci-policy = "
                          "compat");
  return 0;
}

static int check_maps(const struct agsx_oci_idmap *m, size_t n, const char *field,
                      agsx_error_t *err) {
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) {
    if (m[i].host == 0)
      return agsx_error_set(err, 0,
                            "config: %s: a mapping onto host root is not supported by agsx "
                            "(use a range above 0, e.g. podman --userns=auto)",
                            field);
    total += m[i].size;
  }
  if (n && total > 65536 * 64)
    return REFUSE(err, field, "maps more than 4194304 ids");
  return 0;
}

static int policy_caps(const struct agsx_oci_policy *pol, struct agsx_oci_process *p,
                       agsx_error_t *err) {
  uint64_t all = 0;
  for (int s = 0; s < AGSX_OCI_CAP_SETS; s++)
    all |= p->caps[s];
  if (all & privileged_caps) {
    for (int c = 0; c < 64; c++)
      if ((all & privileged_caps) & CAPBIT(c))
        return agsx_error_set(err, 0,
                              "config: process.capabilities: %s: privileged containers are not "
                              "supported by agsx",
                              agsx_oci_cap_name(c));
  }
  uint64_t max = agsx_oci_caps_max(pol);
  if ((all & CAPBIT(CAP_NET_RAW)) && !(max & CAPBIT(CAP_NET_RAW)))
    agsx_warn("config: process.capabilities: CAP_NET_RAW dropped (agsx's strict policy)");
  uint64_t dropped = all & ~max & ~CAPBIT(CAP_NET_RAW);
  if (dropped)
    agsx_warn("config: process.capabilities: capabilities outside agsx's set dropped (%#" PRIx64
              ")",
              dropped);
  for (int s = 0; s < AGSX_OCI_CAP_SETS; s++)
    p->caps[s] &= max;
  /* Every set within the bounding set: exec and setuid programs can never
   * gain what the init was bounded to. */
  for (int s = 1; s < AGSX_OCI_CAP_SETS; s++)
    p->caps[s] &= p->caps[AGSX_OCI_CAP_BOUNDING];
  return 0;
}

int agsx_oci_policy_process(const struct agsx_oci_policy *pol, struct agsx_oci_process *p,
                            agsx_error_t *err) {
  if (policy_caps(pol, p, err) < 0)
    return -1;
  /* Forced under both policies: agsx's seccomp baseline needs it. */
  if (!p->no_new_privileges) {
    agsx_debug("config: process.noNewPrivileges forced on");
    p->no_new_privileges = true;
  }
  /* As runc: a profile or label the host cannot enforce is ignored; one
   * it can is applied at exec (agsx_oci_lsm_exec). */
  if (p->apparmor && (p->apparmor[0] == '\0' || !agsx_oci_apparmor_enabled())) {
    if (p->apparmor[0])
      agsx_debug("config: process.apparmorProfile `%s` ignored: AppArmor is not enabled on "
                 "this host",
                 p->apparmor);
    free(p->apparmor);
    p->apparmor = NULL;
  }
  if (p->apparmor && strlen(p->apparmor) > 1024)
    return REFUSE(err, "process.apparmorProfile", "longer than 1024 bytes");
  if (p->selinux && (p->selinux[0] == '\0' || !agsx_oci_selinux_enabled())) {
    if (p->selinux[0])
      agsx_debug("config: process.selinuxLabel `%s` ignored: SELinux is not enabled on this host",
                 p->selinux);
    free(p->selinux);
    p->selinux = NULL;
  }
  if (p->selinux && strlen(p->selinux) > 1024)
    return REFUSE(err, "process.selinuxLabel", "longer than 1024 bytes");
  return 0;
}

bool agsx_oci_apparmor_enabled(void) {
  char v[4] = {0};
  _cleanup_close_ int fd =
      open("/sys/module/apparmor/parameters/enabled", O_RDONLY | O_CLOEXEC | O_NOCTTY);
  return fd >= 0 && read(fd, v, sizeof(v) - 1) > 0 && v[0] == 'Y';
}

bool agsx_oci_selinux_enabled(void) {
  struct statfs f;
  return statfs("/sys/fs/selinux", &f) == 0 && f.f_type == SELINUX_MAGIC;
}

/* NAME under the container's /proc/self/attr, opened for writing inside
 * the current root, and only if it is procfs's (CVE-2019-16884: a
 * container's own mount over /proc must not take the write). */
static int open_attr(const char *name) {
  _cleanup_close_ int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  struct open_how how = {.flags = O_WRONLY | O_CLOEXEC | O_NOFOLLOW,
                         .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
  _cleanup_free_ char *path = xasprintf("/proc/self/attr/%s", name);
  int fd = root < 0 ? -1 : (int)syscall(SYS_openat2, root, path, &how, sizeof(how));
  struct statfs f;
  if (fd >= 0 && (fstatfs(fd, &f) < 0 || f.f_type != PROC_SUPER_MAGIC)) {
    close(fd);
    errno = EXDEV;
    return -1;
  }
  return fd;
}

static int write_attr(const char *name, const char *fallback, const char *v, agsx_error_t *err) {
  _cleanup_close_ int fd = open_attr(name);
  if (fd < 0 && errno == ENOENT && fallback)
    fd = open_attr(fallback);
  if (fd < 0)
    return agsx_error_set(err, errno, "open /proc/self/attr/%s", name);
  if (agsx_write_all(fd, v, strlen(v)) < 0)
    return agsx_error_set(err, errno, "write /proc/self/attr/%s", name);
  return 0;
}

int agsx_oci_lsm_exec(const char *apparmor, const char *selinux, agsx_error_t *err) {
  if (apparmor) {
    _cleanup_free_ char *v = xasprintf("exec %s", apparmor);
    if (write_attr("apparmor/exec", "exec", v, err) < 0)
      return agsx_error_wrap(err, "AppArmor profile `%s`", apparmor);
  }
  if (selinux && write_attr("exec", NULL, selinux, err) < 0)
    return agsx_error_wrap(err, "SELinux label `%s`", selinux);
  return 0;
}

int agsx_oci_policy_apply(const struct agsx_oci_policy *pol, struct agsx_oci_spec *s,
                          agsx_error_t *err) {
  if (!s->has_process)
    return REFUSE(err, "process", "missing (agsx runs one program per container)");
  if (agsx_oci_policy_process(pol, &s->process, err) < 0)
    return -1;
  if (s->mount_label && s->mount_label[0]) {
    if (agsx_oci_selinux_enabled())
      return REFUSE(err, "linux.mountLabel", "SELinux mount labels are not supported by agsx");
    agsx_debug("config: linux.mountLabel `%s` ignored: SELinux is not enabled on this host",
               s->mount_label);
  }
  static const struct {
    int type;
    const char *name;
  } required[] = {
      {CLONE_NEWNS, "mount"}, {CLONE_NEWPID, "pid"}, {CLONE_NEWIPC, "ipc"}, {CLONE_NEWUTS, "uts"}};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(required); i++)
    if (agsx_oci_spec_ns(s, required[i].type) == NULL)
      return agsx_error_set(err, 0,
                            "config: linux.namespaces: the host's %s namespace is not supported "
                            "by agsx (a container needs its own)",
                            required[i].name);
  const struct agsx_oci_ns *mnt = agsx_oci_spec_ns(s, CLONE_NEWNS);
  if (mnt->path)
    return REFUSE(err, "linux.namespaces[mount].path",
                  "joining a mount namespace is not "
                  "supported by agsx");
  const struct agsx_oci_ns *user = agsx_oci_spec_ns(s, CLONE_NEWUSER);
  /* A user namespace by path (pods): create checks that it does not map
   * host root, and that mappings sent with it (runc 1.1 wants them) are
   * its own. */
  if (agsx_oci_spec_ns(s, CLONE_NEWNET) == NULL && !pol->host_network)
    return REFUSE(err, "linux.namespaces",
                  "host networking is not supported by agsx (a container needs its own network "
                  "namespace)");
  if (user == NULL && (s->n_uid_maps || s->n_gid_maps))
    return REFUSE(err, "linux.uidMappings", "mappings without a user namespace");
  if (user && (s->n_uid_maps == 0) != (s->n_gid_maps == 0))
    return REFUSE(err, "linux.gidMappings", "uid and gid mappings must come together");
  if (check_maps(s->uid_maps, s->n_uid_maps, "linux.uidMappings", err) < 0 ||
      check_maps(s->gid_maps, s->n_gid_maps, "linux.gidMappings", err) < 0)
    return -1;
  /* hostname with a uts namespace joined by path (a pod's: Podman sends the
   * pod's name) is set in it, as runc does (its validation asks only for a
   * uts namespace, new or joined). */
  for (size_t i = 0; i < s->n_devices; i++)
    if (s->devices[i].type == 'b')
      return agsx_error_set(err, 0,
                            "config: linux.devices: block device `%.256s` is not supported by "
                            "agsx",
                            s->devices[i].path);
  return 0;
}
