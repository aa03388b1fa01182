/* agsx — host/systemd: transient scopes and unit properties over D-Bus
 * (sd-bus, dlopen()ed). See systemd.h. */
#include "config.h"

#include "host/systemd.h"
#include "host/rootless.h"

#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <systemd/sd-bus.h>

#define DEST "org.freedesktop.systemd1"
#define PATH "/org/freedesktop/systemd1"
#define MANAGER "org.freedesktop.systemd1.Manager"
#define USEC_PER_SEC 1000000ULL
#define CPUSET_MAX 8192

bool agsx_systemd_booted(void) {
  struct stat st;
  return lstat("/run/systemd/system", &st) == 0 && S_ISDIR(st.st_mode);
}

/* ---- libsystemd, loaded once -------------------------------------------------------- */

static struct {
  void *handle;
  __typeof__(sd_bus_new) *bus_new;
  __typeof__(sd_bus_set_address) *set_address;
  __typeof__(sd_bus_start) *start;
  __typeof__(sd_bus_open_system) *open_system;
  __typeof__(sd_bus_flush_close_unref) *close_unref;
  __typeof__(sd_bus_message_new_method_call) *new_call;
  __typeof__(sd_bus_message_append) *append;
  __typeof__(sd_bus_message_append_array) *append_array;
  __typeof__(sd_bus_message_open_container) *open;
  __typeof__(sd_bus_message_close_container) *close;
  __typeof__(sd_bus_message_read) *read;
  __typeof__(sd_bus_message_unref) *msg_unref;
  __typeof__(sd_bus_call) *call;
  __typeof__(sd_bus_match_signal) *match_signal;
  __typeof__(sd_bus_slot_unref) *slot_unref;
  __typeof__(sd_bus_process) *process;
  __typeof__(sd_bus_wait) *wait;
  __typeof__(sd_bus_error_free) *error_free;
  __typeof__(sd_bus_get_property_string) *get_string;
} sd;
static pthread_mutex_t sd_lock = PTHREAD_MUTEX_INITIALIZER;

static int load(agsx_error_t *err) {
  static const struct {
    const char *name;
    size_t off;
  } syms[] = {
#define S(f, field) {"sd_bus_" #f, offsetof(__typeof__(sd), field)}
      S(new, bus_new),
      S(set_address, set_address),
      S(start, start),
      S(open_system, open_system),
      S(flush_close_unref, close_unref),
      S(message_new_method_call, new_call),
      S(message_append, append),
      S(message_append_array, append_array),
      S(message_open_container, open),
      S(message_close_container, close),
      S(message_read, read),
      S(message_unref, msg_unref),
      S(call, call),
      S(match_signal, match_signal),
      S(slot_unref, slot_unref),
      S(process, process),
      S(wait, wait),
      S(error_free, error_free),
      S(get_property_string, get_string),
#undef S
  };
  int r = 0;
  pthread_mutex_lock(&sd_lock);
  if (sd.handle == NULL) {
    void *h = dlopen("libsystemd.so.0", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
      r = agsx_error_set(err, 0, "the systemd cgroup manager needs libsystemd.so.0: %s", dlerror());
    } else {
      __typeof__(sd) t = {.handle = h};
      for (size_t i = 0; r == 0 && i < AGSX_ARRAY_SIZE(syms); i++) {
        void *p = dlsym(h, syms[i].name);
        if (p == NULL)
          r = agsx_error_set(err, 0, "libsystemd.so.0 has no %s (systemd >= 237 is needed)",
                             syms[i].name);
        else
          memcpy((char *)&t + syms[i].off, &p, sizeof(p));
      }
      if (r == 0)
        sd = t;
      else
        dlclose(h);
    }
  }
  pthread_mutex_unlock(&sd_lock);
  return r;
}

/* ---- the bus ---------------------------------------------------------------------------- */

static void busp(sd_bus **b) {
  if (*b)
    sd.close_unref(*b);
  *b = NULL;
}
static void msgp(sd_bus_message **m) {
  if (*m)
    sd.msg_unref(*m);
  *m = NULL;
}
static void slotp(sd_bus_slot **s) {
  if (*s)
    sd.slot_unref(*s);
  *s = NULL;
}
static void errp(sd_bus_error *e) {
  if (sd.error_free)
    sd.error_free(e);
}
#define _cleanup_bus_ _cleanup_(busp)
#define _cleanup_msg_ _cleanup_(msgp)
#define _cleanup_slot_ _cleanup_(slotp)
#define _cleanup_sderr_ _cleanup_(errp)

static uint64_t timeout_usec(void) {
  const char *v = getenv("AGSX_SYSTEMD_TIMEOUT");
  long s = v && *v ? strtol(v, NULL, 10) : 0;
  return (uint64_t)(s > 0 && s <= 3600 ? s : AGSX_SYSTEMD_TIMEOUT_SEC) * USEC_PER_SEC;
}

static int open_address(const char *address, sd_bus **ret) {
  _cleanup_bus_ sd_bus *b = NULL;
  int r = sd.bus_new(&b);
  if (r >= 0)
    r = sd.set_address(b, address);
  if (r >= 0)
    r = sd.start(b);
  if (r < 0)
    return r;
  *ret = steal_ptr(&b);
  return 0;
}

/* The one place that chooses the bus. Root talks to PID 1 directly on its
 * private socket, which needs no dbus-daemon (a minimal host may have
 * none) and no polkit; anyone else, or a host without that socket, uses
 * the system bus. AGSX_SYSTEMD_BUS names another address (tests: a bus
 * that is not there). *RET_DIRECT: a connection to systemd itself, not
 * through a bus daemon. */
/* Set by agsx_systemd_start_user_scope for its call: the user's manager
 * before agsx is in the user's namespace. */
static __thread bool user_bus;

static int bus_open(sd_bus **ret, bool *ret_direct, agsx_error_t *err) {
  if (load(err) < 0)
    return -1;
  const char *env = getenv("AGSX_SYSTEMD_BUS");
  int r;
  *ret_direct = true;
  if (env && *env) {
    if ((r = open_address(env, ret)) < 0)
      return agsx_error_set(err, -r, "connect to systemd at `%s`", env);
    return 0;
  }
  if (agsx_rootless() || user_bus) {
    /* An ordinary user's agsx talks to the user's own manager, directly
     * (host/cgroup.h). */
    const char *run = getenv("XDG_RUNTIME_DIR");
    _cleanup_free_ char *addr =
        run && run[0] == '/' ? xasprintf("unix:path=%s/systemd/private", run) : NULL;
    if (addr == NULL || (r = open_address(addr, ret)) < 0)
      return agsx_error_set(err, addr ? -r : ENOENT, "connect to systemd's user manager at `%s`",
                            addr ? addr + 10 : "$XDG_RUNTIME_DIR/systemd/private");
    return 0;
  }
  if (geteuid() == 0 && open_address(AGSX_SYSTEMD_PRIVATE_BUS, ret) == 0)
    return 0;
  *ret_direct = false;
  if ((r = sd.open_system(ret)) < 0)
    return agsx_error_set(err, -r, "connect to systemd (%s, then the system bus)",
                          AGSX_SYSTEMD_PRIVATE_SOCKET);
  return 0;
}

int agsx_systemd_errno(const char *name) {
  static const struct {
    const char *suffix;
    int e;
  } map[] = {
      {".UnitExists", EEXIST},
      {".AccessDenied", EACCES},
      {".NoSuchUnit", ENOENT},
      {".InteractiveAuthorizationRequired", EACCES},
      {".NotSupported", ENOTSUP},
      {".InvalidArgs", EINVAL},
      {".PropertyReadOnly", EROFS},
      {".NoReply", ETIMEDOUT},
      {".Timeout", ETIMEDOUT},
      {".ServiceUnknown", ENOENT},
      {".UnitMasked", EPERM},
      {".JobTypeNotApplicable", EINVAL},
      {".TransactionIsDestructive", EBUSY},
  };
  size_t n = name ? strlen(name) : 0;
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(map); i++) {
    size_t k = strlen(map[i].suffix);
    if (n >= k && strcmp(name + n - k, map[i].suffix) == 0)
      return map[i].e;
  }
  return EIO;
}

/* A failed call as one line: systemd's own words where it gave some. */
static int call_error(agsx_error_t *err, int r, const sd_bus_error *e, const char *what) {
  if (e && e->name) {
    int en = agsx_systemd_errno(e->name);
    if (en == EACCES)
      return agsx_error_set_quiet(err, en, "%s: systemd denied it: %s", what,
                                  e->message ? e->message : e->name);
    return agsx_error_set_quiet(err, en, "%s: %s", what, e->message ? e->message : e->name);
  }
  return agsx_error_set(err, r < 0 ? -r : EIO, "%s", what);
}

static int append_prop(sd_bus_message *m, const struct agsx_systemd_prop *p) {
  switch (p->type) {
  case 's': return sd.append(m, "(sv)", p->name, "s", p->s);
  case 'b': return sd.append(m, "(sv)", p->name, "b", (int)p->b);
  case 't': return sd.append(m, "(sv)", p->name, "t", p->t);
  case 'u': return sd.append(m, "(sv)", p->name, "u", p->u);
  case 'U': return sd.append(m, "(sv)", p->name, "au", 1, p->u);
  case 'y': {
    int r = sd.open(m, 'r', "sv");
    if (r >= 0)
      r = sd.append(m, "s", p->name);
    if (r >= 0)
      r = sd.open(m, 'v', "ay");
    if (r >= 0)
      r = sd.append_array(m, 'y', p->bytes, p->n_bytes);
    if (r >= 0)
      r = sd.close(m);
    if (r >= 0)
      r = sd.close(m);
    return r;
  }
  default: return -EINVAL;
  }
}

static int append_props(sd_bus_message *m, const struct agsx_systemd_prop *p, size_t n) {
  int r = 0;
  for (size_t i = 0; r >= 0 && i < n; i++)
    r = append_prop(m, &p[i]);
  return r;
}

/* ---- jobs ---------------------------------------------------------------------------- */

struct job_wait {
  char *path; /* the job, once the call has answered */
  char *result;
  struct agsx_strset early; /* "path result" of jobs removed before that */
};

static int on_job_removed(sd_bus_message *m, void *data, sd_bus_error *e) {
  (void)e;
  struct job_wait *w = data;
  uint32_t id;
  const char *path, *unit, *result;
  if (sd.read(m, "uoss", &id, &path, &unit, &result) < 0)
    return 0;
  if (w->path == NULL) {
    /* The signal may be read while the call waits for its answer. */
    _cleanup_free_ char *s = xasprintf("%s %s", path, result);
    agsx_strset_add(&w->early, s);
  } else if (w->result == NULL && strcmp(path, w->path) == 0) {
    w->result = xstrdup(result);
  }
  return 0;
}

static void job_wait_clear(struct job_wait *w) {
  free(w->path);
  free(w->result);
  agsx_strset_clear(&w->early);
}

/* Watches JobRemoved from before the call that makes the job. A direct
 * connection gets every signal systemd sends (it sends them to each of its
 * private connections unconditionally); on the system bus systemd sends
 * them only once someone subscribed (one more round trip). */
static int job_watch(sd_bus *bus, bool direct, struct job_wait *w, sd_bus_slot **slot,
                     agsx_error_t *err) {
  int r = sd.match_signal(bus, slot, NULL, PATH, MANAGER, "JobRemoved", on_job_removed, w);
  if (r < 0)
    return agsx_error_set(err, -r, "watch systemd's jobs");
  if (direct)
    return 0;
  _cleanup_sderr_ sd_bus_error e = SD_BUS_ERROR_NULL;
  _cleanup_msg_ sd_bus_message *m = NULL, *reply = NULL;
  if ((r = sd.new_call(bus, &m, DEST, PATH, MANAGER, "Subscribe")) < 0 ||
      (r = sd.call(bus, m, timeout_usec(), &e, &reply)) < 0)
    return call_error(err, r, &e, "subscribe to systemd's jobs");
  return 0;
}

/* Waits for the job of the answer REPLY (an object path) to end. */
static int job_wait(sd_bus *bus, sd_bus_message *reply, struct job_wait *w, const char *unit,
                    agsx_error_t *err) {
  const char *path;
  int r = sd.read(reply, "o", &path);
  if (r < 0)
    return agsx_error_set(err, -r, "read systemd's job for `%s`", unit);
  w->path = xstrdup(path);
  size_t pl = strlen(path);
  for (size_t i = 0; i < w->early.n && !w->result; i++)
    if (strncmp(w->early.v[i], path, pl) == 0 && w->early.v[i][pl] == ' ')
      w->result = xstrdup(w->early.v[i] + pl + 1);
  int64_t deadline = agsx_mono_ns() + (int64_t)timeout_usec() * 1000;
  while (w->result == NULL) {
    if ((r = sd.process(bus, NULL)) < 0)
      return agsx_error_set(err, -r, "wait for systemd's job for `%s`", unit);
    if (r > 0)
      continue;
    int64_t left = deadline - agsx_mono_ns();
    if (left <= 0)
      return agsx_error_set(err, ETIMEDOUT, "wait for systemd's job for `%s`", unit);
    if ((r = sd.wait(bus, (uint64_t)left / 1000 + 1)) < 0)
      return agsx_error_set(err, -r, "wait for systemd's job for `%s`", unit);
  }
  if (strcmp(w->result, "done") != 0)
    return agsx_error_set(err, EIO, "systemd's job for `%s` ended `%s`, not `done`", unit,
                          w->result);
  return 0;
}

/* ---- the calls ------------------------------------------------------------------------- */

static int stop_unit(sd_bus *bus, bool direct, const char *unit, bool wait, agsx_error_t *err) {
  struct job_wait w = {0};
  _cleanup_slot_ sd_bus_slot *slot = NULL;
  _cleanup_sderr_ sd_bus_error e = SD_BUS_ERROR_NULL;
  _cleanup_msg_ sd_bus_message *m = NULL, *reply = NULL;
  int r = 0;
  if (wait && job_watch(bus, direct, &w, &slot, err) < 0)
    r = -1;
  else if ((r = sd.new_call(bus, &m, DEST, PATH, MANAGER, "StopUnit")) < 0 ||
           (r = sd.append(m, "ss", unit, "replace")) < 0 ||
           (r = sd.call(bus, m, timeout_usec(), &e, &reply)) < 0) {
    if (e.name && agsx_systemd_errno(e.name) == ENOENT)
      r = 0; /* not loaded: gone already */
    else
      r = call_error(err, r, &e, "stop systemd unit");
  } else if (wait && job_wait(bus, reply, &w, unit, err) < 0) {
    r = -1;
  } else {
    r = 0;
  }
  job_wait_clear(&w);
  return r < 0 ? agsx_error_wrap(err, "`%s`", unit) : 0;
}

int agsx_systemd_stop_unit(const char *unit, bool wait, agsx_error_t *err) {
  _cleanup_bus_ sd_bus *bus = NULL;
  bool direct;
  if (bus_open(&bus, &direct, err) < 0)
    return agsx_error_wrap(err, "stop `%s`", unit);
  return stop_unit(bus, direct, unit, wait, err);
}

int agsx_systemd_start_scope(const char *unit, const char *slice, const char *description,
                             pid_t pid, const struct agsx_systemd_prop *props, size_t n_props,
                             agsx_error_t *err) {
  int64_t t0 = agsx_mono_ns();
  _cleanup_bus_ sd_bus *bus = NULL;
  bool direct;
  if (bus_open(&bus, &direct, err) < 0)
    return agsx_error_wrap(err, "start scope `%s`", unit);
  int64_t t1 = agsx_mono_ns();
  struct job_wait w = {0};
  _cleanup_slot_ sd_bus_slot *slot = NULL;
  _cleanup_sderr_ sd_bus_error e = SD_BUS_ERROR_NULL;
  _cleanup_msg_ sd_bus_message *m = NULL, *reply = NULL;
  const struct agsx_systemd_prop base[] = {
      {.name = "Description", .type = 's', .s = description},
      {.name = "Slice", .type = 's', .s = slice},
      {.name = "Delegate", .type = 'b', .b = true},
      {.name = "PIDs", .type = 'U', .u = (uint32_t)pid},
  };
  int r;
  if (job_watch(bus, direct, &w, &slot, err) < 0) {
    job_wait_clear(&w);
    return agsx_error_wrap(err, "start scope `%s`", unit);
  }
  if ((r = sd.new_call(bus, &m, DEST, PATH, MANAGER, "StartTransientUnit")) < 0 ||
      (r = sd.append(m, "ss", unit, "fail")) < 0 || (r = sd.open(m, 'a', "(sv)")) < 0 ||
      (r = append_props(m, base, AGSX_ARRAY_SIZE(base))) < 0 ||
      (r = append_props(m, props, n_props)) < 0 || (r = sd.close(m)) < 0 ||
      (r = sd.append(m, "a(sa(sv))", 0)) < 0) {
    job_wait_clear(&w);
    return agsx_error_set(err, -r, "start scope `%s`: build the call", unit);
  }
  int64_t t2 = agsx_mono_ns();
  if ((r = sd.call(bus, m, timeout_usec(), &e, &reply)) < 0) {
    job_wait_clear(&w);
    call_error(err, r, &e, "start");
    return agsx_error_wrap(err, "scope `%s`", unit);
  }
  int64_t t3 = agsx_mono_ns();
  r = job_wait(bus, reply, &w, unit, err);
  job_wait_clear(&w);
  int64_t t4 = agsx_mono_ns();
  agsx_debug("systemd: scope `%s`: connect %.3f ms, watch %.3f ms, start %.3f ms, job %.3f ms",
             unit, (double)(t1 - t0) / 1e6, (double)(t2 - t1) / 1e6, (double)(t3 - t2) / 1e6,
             (double)(t4 - t3) / 1e6);
  if (r < 0) {
    /* A scope whose job failed or never answered may still come up: it
     * must not outlive the failure. */
    _cleanup_error_ agsx_error_t e2 = NULL;
    if (stop_unit(bus, direct, unit, false, &e2) < 0)
      agsx_debug("%s", e2->msg);
    return agsx_error_wrap(err, "start scope");
  }
  return 0;
}

int agsx_systemd_set_properties(const char *unit, const struct agsx_systemd_prop *props, size_t n,
                                agsx_error_t *err) {
  _cleanup_bus_ sd_bus *bus = NULL;
  bool direct;
  if (bus_open(&bus, &direct, err) < 0)
    return agsx_error_wrap(err, "set properties of `%s`", unit);
  _cleanup_sderr_ sd_bus_error e = SD_BUS_ERROR_NULL;
  _cleanup_msg_ sd_bus_message *m = NULL, *reply = NULL;
  int r;
  if ((r = sd.new_call(bus, &m, DEST, PATH, MANAGER, "SetUnitProperties")) < 0 ||
      (r = sd.append(m, "sb", unit, 1)) < 0 || (r = sd.open(m, 'a', "(sv)")) < 0 ||
      (r = append_props(m, props, n)) < 0 || (r = sd.close(m)) < 0)
    return agsx_error_set(err, -r, "set properties of `%s`: build the call", unit);
  if ((r = sd.call(bus, m, timeout_usec(), &e, &reply)) < 0) {
    call_error(err, r, &e, "set properties");
    return agsx_error_wrap(err, "`%s`", unit);
  }
  return 0;
}

int agsx_systemd_attach(const char *unit, const char *subcgroup, pid_t pid, agsx_error_t *err) {
  _cleanup_bus_ sd_bus *bus = NULL;
  bool direct;
  if (bus_open(&bus, &direct, err) < 0)
    return agsx_error_wrap(err, "attach to `%s`", unit);
  _cleanup_sderr_ sd_bus_error e = SD_BUS_ERROR_NULL;
  _cleanup_msg_ sd_bus_message *m = NULL, *reply = NULL;
  int r;
  if ((r = sd.new_call(bus, &m, DEST, PATH, MANAGER, "AttachProcessesToUnit")) < 0 ||
      (r = sd.append(m, "ss", unit, subcgroup)) < 0 ||
      (r = sd.append(m, "au", 1, (uint32_t)pid)) < 0)
    return agsx_error_set(err, -r, "attach to `%s`: build the call", unit);
  if ((r = sd.call(bus, m, timeout_usec(), &e, &reply)) < 0) {
    call_error(err, r, &e, "attach a process");
    return agsx_error_wrap(err, "`%s%s`", unit, subcgroup);
  }
  return 0;
}

int agsx_systemd_version(unsigned *ret, agsx_error_t *err) {
  *ret = 0;
  _cleanup_bus_ sd_bus *bus = NULL;
  bool direct;
  if (bus_open(&bus, &direct, err) < 0)
    return -1;
  _cleanup_sderr_ sd_bus_error e = SD_BUS_ERROR_NULL;
  _cleanup_free_ char *v = NULL;
  int r = sd.get_string(bus, DEST, PATH, MANAGER, "Version", &e, &v);
  if (r < 0)
    return call_error(err, r, &e, "systemd's version");
  /* "252.38-1~deb12u1", "v255", "256~rc1" */
  const char *p = v;
  while (*p && !isdigit((unsigned char)*p))
    p++;
  *ret = (unsigned)strtoul(p, NULL, 10);
  return 0;
}

/* ---- pure helpers ------------------------------------------------------------------------ */

static bool unit_char(char c) { return isalnum((unsigned char)c) || strchr(":_.-\\@", c) != NULL; }

bool agsx_systemd_unit_name_is_valid(const char *name, const char *type) {
  size_t n = strlen(name), t = strlen(type);
  if (n <= t || n > 255 || name[0] == '.' || strcmp(name + n - t, type) != 0)
    return false;
  for (size_t i = 0; i < n - t; i++)
    if (!unit_char(name[i]))
      return false;
  return true;
}

char *agsx_systemd_escape(const char *s) {
  char *out = xmalloc(strlen(s) * 4 + 1), *o = out;
  for (const char *p = s; *p; p++) {
    unsigned char c = (unsigned char)*p;
    if (c == '/')
      *o++ = '-';
    else if ((p == s && c == '.') || !(isalnum(c) || c == ':' || c == '_' || c == '.'))
      o += snprintf(o, 5, "\\x%02x", c); /* \\xNN: the 4 bytes allotted a character */
    else
      *o++ = (char)c;
  }
  *o = '\0';
  return out;
}

int agsx_systemd_slice_path(const char *slice, char **ret, agsx_error_t *err) {
  size_t n = strlen(slice);
  if (strcmp(slice, "-.slice") == 0) {
    *ret = xstrdup("");
    return 0;
  }
  bool ok = agsx_systemd_unit_name_is_valid(slice, ".slice") && slice[0] != '-' &&
            slice[n - 7] != '-' && strstr(slice, "--") == NULL && !strchr(slice, '@');
  if (!ok)
    return agsx_error_set(err, EINVAL, "invalid systemd slice `%s`", slice);
  /* Each prefix up to a '-' is a parent slice: "a-b-c.slice" lives in
   * "a.slice/a-b.slice/a-b-c.slice". */
  char *path = xstrdup("");
  for (size_t i = 0; i < n - 6; i++)
    if (slice[i] == '-') {
      char *p = xasprintf("%s%s%.*s.slice", path, *path ? "/" : "", (int)i, slice);
      free(path);
      path = p;
    }
  char *p = xasprintf("%s%s%s", path, *path ? "/" : "", slice);
  free(path);
  *ret = p;
  return 0;
}

int agsx_systemd_cpuset_mask(const char *list, uint8_t **ret, size_t *ret_n, agsx_error_t *err) {
  _cleanup_free_ uint8_t *mask = xzalloc(CPUSET_MAX / 8);
  size_t used = 0;
  const char *p = list;
  while (*p) {
    char *end;
    if (!isdigit((unsigned char)*p))
      goto bad;
    unsigned long a = strtoul(p, &end, 10), b = a;
    p = end;
    if (*p == '-') {
      if (!isdigit((unsigned char)p[1]))
        goto bad;
      b = strtoul(p + 1, &end, 10);
      p = end;
    }
    if (a > b || b >= CPUSET_MAX || (*p && *p != ','))
      goto bad;
    for (unsigned long i = a; i <= b; i++)
      mask[i / 8] |= (uint8_t)(1u << (i % 8));
    used = used > b / 8 + 1 ? used : b / 8 + 1;
    if (*p == ',' && *++p == '\0')
      goto bad;
  }
  if (used == 0)
    goto bad;
  *ret = steal_ptr(&mask);
  *ret_n = used;
  return 0;
bad:
  return agsx_error_set(err, EINVAL, "invalid cpu or memory node list `%s`", list);
}

int agsx_systemd_start_user_scope(const char *unit, const char *slice, const char *description,
                                  pid_t pid, const struct agsx_systemd_prop *props, size_t n_props,
                                  agsx_error_t *err) {
  user_bus = true;
  int r = agsx_systemd_start_scope(unit, slice, description, pid, props, n_props, err);
  user_bus = false;
  return r;
}
