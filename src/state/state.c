/* agsx — sandbox records. */
#include "config.h"

#include "state/state.h"

#include "util/json.h"
#include "sandbox/userns.h"

#include <ctype.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <inttypes.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <linux/openat2.h>

static const char *const status_names[] = {"created", "running", "exited"};

void agsx_record_clear(struct agsx_record *r) {
  free(r->name);
  free(r->image);
  free(r->pool);
  free(r->image_digest);
  free(r->stop_reason);
  free(r->network);
  free(r->address);
  free(r->ports);
  agsx_strv_free(r->argv);
  agsx_strv_free(r->env);
  free(r->user);
  free(r->cwd);
  free(r->hostname);
  free(r->seccomp);
  agsx_strv_free(r->layers);
  agsx_strv_free(r->restart_layers);
  free(r->restart_error);
  agsx_strv_free(r->labels);
  agsx_strv_free(r->volumes);
  free(r->damage);
  memset(r, 0, sizeof(*r));
}

/* ---- JSON ----------------------------------------------------------------------------- */

static void gen_strv(yajl_gen g, const char *key, char **v) {
  agsx_json_key(g, key);
  yajl_gen_array_open(g);
  for (size_t i = 0; v && v[i]; i++)
    agsx_json_str(g, v[i]);
  yajl_gen_array_close(g);
}

/* {"KEY": "VALUE", ...} */
static void gen_labels(yajl_gen g, char *const *labels) {
  agsx_json_key(g, "labels");
  yajl_gen_map_open(g);
  for (size_t i = 0; labels && labels[i]; i++) {
    const char *eq = strchr(labels[i], '=');
    if (eq == NULL)
      continue;
    yajl_gen_string(g, (const unsigned char *)labels[i], (size_t)(eq - labels[i]));
    agsx_json_str(g, eq + 1);
  }
  yajl_gen_map_close(g);
}

static void gen_proc(yajl_gen g, const char *key, const struct agsx_proc_ref *p) {
  agsx_json_key(g, key);
  yajl_gen_map_open(g);
  agsx_json_kv_int(g, "pid", p->pid);
  agsx_json_kv_int(g, "start_time", (int64_t)p->start_time);
  yajl_gen_map_close(g);
}

char *agsx_record_to_json(const struct agsx_record *r, size_t *ret_len) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(true);
  yajl_gen_map_open(g);
  agsx_json_kv_int(g, "version", 1);
  agsx_json_kv_str(g, "id", r->id);
  agsx_json_kv_str(g, "name", r->name);
  agsx_json_kv_str(g, "image", r->image);
  agsx_json_kv_str(g, "image_digest", r->image_digest);
  agsx_json_kv_str(g, "status", agsx_record_status_name(r->status));
  agsx_json_kv_str(g, "stop_reason", r->stop_reason);
  agsx_json_kv_int(g, "exit_code", r->exit_code);
  agsx_json_kv_int(g, "created", r->created);
  agsx_json_kv_int(g, "started", r->started);
  agsx_json_kv_int(g, "started_ns", r->started_ns);
  agsx_json_kv_int(g, "ended", r->ended);
  agsx_json_kv_int(g, "deadline", r->deadline);
  agsx_json_kv_int(g, "deadline_ns", r->deadline_ns);
  agsx_json_kv_int(g, "timeout", (int64_t)r->timeout);
  gen_proc(g, "supervisor", &r->supervisor);
  gen_proc(g, "init", &r->init);
  agsx_json_kv_str(g, "network", r->network);
  agsx_json_kv_str(g, "address", r->address);
  agsx_json_key(g, "ports");
  agsx_record_gen_ports(g, r->ports, r->n_ports);
  agsx_json_kv_int(g, "memory", (int64_t)r->memory);
  agsx_json_kv_int(g, "pids", (int64_t)r->pids);
  agsx_json_kv_int(g, "disk", (int64_t)r->disk);
  agsx_json_kv_int(g, "cpu_quota_us", (int64_t)r->cpu_quota_us);
  agsx_json_kv_int(g, "slot", r->slot);
  agsx_json_kv_int(g, "uid_base", r->uid_base);
  gen_strv(g, "argv", r->argv);
  gen_strv(g, "env", r->env);
  agsx_json_kv_str(g, "user", r->user);
  agsx_json_kv_str(g, "cwd", r->cwd);
  agsx_json_kv_str(g, "hostname", r->hostname);
  agsx_json_kv_str(g, "seccomp", r->seccomp);
  if (r->new_privs)
    agsx_json_kv_bool(g, "new_privs", true);
  agsx_json_kv_bool(g, "rm", r->rm);
  if (r->idle)
    agsx_json_kv_bool(g, "idle", true);
  if (r->pool) {
    agsx_json_kv_str(g, "pool", r->pool);
    agsx_json_kv_bool(g, "parked", r->parked);
  }
  agsx_json_kv_bool(g, "stop_request", r->stop_request);
  agsx_json_kv_bool(g, "reported", r->reported);
  agsx_json_kv_bool(g, "paused", r->paused);
  agsx_json_kv_int(g, "paused_at", r->paused_at);
  if (r->pause_on_timeout)
    agsx_json_kv_str(g, "on_timeout", "pause");
  agsx_json_kv_int(g, "tmpfs_fd", r->tmpfs_fd);
  gen_strv(g, "layers", r->layers);
  gen_proc(g, "frozen_by", &r->frozen_by);
  agsx_json_kv_int(g, "restart_seq", r->restart_seq);
  agsx_json_kv_int(g, "restarted_seq", r->restarted_seq);
  gen_strv(g, "restart_layers", r->restart_layers);
  gen_proc(g, "restart_by", &r->restart_by);
  agsx_json_kv_str(g, "restart_error", r->restart_error);
  gen_labels(g, r->labels);
  if (r->volumes)
    gen_strv(g, "volumes", r->volumes);
  yajl_gen_map_close(g);
  return agsx_json_gen_steal(g, ret_len);
}

const char *agsx_record_status_name(enum agsx_status s) {
  if (s == AGSX_STATUS_UNKNOWN)
    return "unknown";
  return (size_t)s < AGSX_ARRAY_SIZE(status_names) ? status_names[s] : "exited";
}

const char *agsx_record_status(const struct agsx_record *r) {
  if (r->status == AGSX_STATUS_RUNNING && r->parked)
    return "parked";
  return r->status == AGSX_STATUS_RUNNING && r->paused ? "paused"
                                                       : agsx_record_status_name(r->status);
}

static void gen_time(yajl_gen g, const char *key, int64_t t) {
  agsx_json_key(g, key);
  if (t <= 0) {
    yajl_gen_null(g);
    return;
  }
  _cleanup_free_ char *s = agsx_format_rfc3339(t);
  agsx_json_str(g, s);
}

static void gen_full(yajl_gen g, const struct agsx_record *r) {
  bool ended = r->status == AGSX_STATUS_EXITED;
  gen_time(g, "started", r->started);
  gen_time(g, "ended", ended ? r->ended : 0);
  agsx_json_kv_int(g, "timeout", (int64_t)r->timeout);
  agsx_json_kv_int(g, "deadline_ns", r->deadline_ns);
  gen_proc(g, "supervisor", &r->supervisor);
  gen_proc(g, "init", &r->init);
  agsx_json_key(g, "uid_range");
  yajl_gen_map_open(g);
  agsx_json_kv_int(g, "slot", r->slot);
  agsx_json_kv_int(g, "base", r->uid_base);
  agsx_json_kv_int(g, "size", AGSX_UID_RANGE);
  yajl_gen_map_close(g);
  gen_strv(g, "argv", r->argv);
  gen_strv(g, "env", r->env);
  agsx_json_kv_str(g, "user", r->user);
  agsx_json_kv_str(g, "cwd", r->cwd);
  agsx_json_kv_str(g, "hostname", r->hostname);
  agsx_json_kv_str(g, "seccomp", r->seccomp);
  agsx_json_kv_bool(g, "no_new_privileges", !r->new_privs);
  agsx_json_kv_bool(g, "rm", r->rm);
  agsx_json_kv_bool(g, "stop_requested", r->stop_request);
  gen_strv(g, "volumes", r->volumes);
  gen_time(g, "paused_at", r->status == AGSX_STATUS_RUNNING && r->paused ? r->paused_at : 0);
}

/* A damaged record: ls --json's keys, null where the record would have
 * said (nothing of it can be trusted), and why. */
static void gen_damaged(yajl_gen g, const struct agsx_record *r) {
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "id", r->id);
  agsx_json_kv_str(g, "name", r->name);
  static const char *const none[] = {"image", "image_digest"};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(none); i++)
    agsx_json_kv_str(g, none[i], NULL);
  agsx_json_kv_str(g, "status", "unknown");
  agsx_json_kv_bool(g, "paused", false);
  static const char *const unknown[] = {"created",   "deadline", "time_left", "stop_reason",
                                        "exit_code", "network",  "address",   "pid"};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(unknown); i++)
    agsx_json_kv_str(g, unknown[i], NULL);
  agsx_json_key(g, "ports");
  agsx_record_gen_ports(g, NULL, 0);
  agsx_json_key(g, "limits");
  yajl_gen_map_open(g);
  static const char *const limits[] = {"memory", "pids", "disk", "cpu_quota_us"};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(limits); i++)
    agsx_json_kv_str(g, limits[i], NULL);
  yajl_gen_map_close(g);
  gen_labels(g, NULL);
  agsx_json_kv_str(g, "damage", r->damage);
  yajl_gen_map_close(g);
}

void agsx_record_gen(yajl_gen g, const struct agsx_record *r, int64_t now, bool full) {
  if (r->status == AGSX_STATUS_UNKNOWN) {
    gen_damaged(g, r);
    return;
  }
  bool ended = r->status == AGSX_STATUS_EXITED;
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "id", r->id);
  agsx_json_kv_str(g, "name", r->name);
  agsx_json_kv_str(g, "image", r->image);
  agsx_json_kv_str(g, "image_digest", r->image_digest);
  agsx_json_kv_str(g, "status", agsx_record_status(r));
  agsx_json_kv_bool(g, "paused", r->status == AGSX_STATUS_RUNNING && r->paused);
  if (r->pool) /* sandbox/pool.h: started for this pool */
    agsx_json_kv_str(g, "pool", r->pool);
  _cleanup_free_ char *created = agsx_format_rfc3339(r->created);
  _cleanup_free_ char *deadline = agsx_format_rfc3339(r->deadline);
  agsx_json_kv_str(g, "created", created);
  agsx_json_kv_str(g, "deadline", deadline);
  agsx_json_key(g, "time_left");
  if (ended)
    yajl_gen_null(g);
  else
    yajl_gen_integer(g, r->deadline > now ? r->deadline - now : 0);
  agsx_json_kv_str(g, "stop_reason", r->stop_reason);
  agsx_json_key(g, "exit_code");
  if (ended)
    yajl_gen_integer(g, r->exit_code);
  else
    yajl_gen_null(g);
  agsx_json_kv_str(g, "network", r->network);
  agsx_json_kv_str(g, "address", r->address);
  agsx_json_key(g, "ports");
  agsx_record_gen_ports(g, r->ports, r->n_ports);
  agsx_json_kv_int(g, "pid", ended ? 0 : r->init.pid);
  agsx_json_key(g, "limits");
  yajl_gen_map_open(g);
  agsx_json_kv_int(g, "memory", (int64_t)r->memory);
  agsx_json_kv_int(g, "pids", (int64_t)r->pids);
  agsx_json_kv_int(g, "disk", (int64_t)r->disk);
  agsx_json_kv_int(g, "cpu_quota_us", (int64_t)r->cpu_quota_us);
  yajl_gen_map_close(g);
  gen_labels(g, r->labels);
  if (full)
    gen_full(g, r);
  yajl_gen_map_close(g);
}

/* "ports": [{"host_ip": "127.0.0.1", "host_port": 8080, "port": 80, "proto": "tcp"}] */
void agsx_record_gen_ports(yajl_gen g, const struct agsx_port *v, size_t n) {
  yajl_gen_array_open(g);
  for (size_t i = 0; i < n; i++) {
    char ip[INET6_ADDRSTRLEN];
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "host_ip", agsx_sockaddr_ip(&v[i].host, ip, sizeof(ip)));
    agsx_json_kv_int(g, "host_port", agsx_sockaddr_port(&v[i].host));
    agsx_json_kv_int(g, "port", v[i].port);
    agsx_json_kv_str(g, "proto", agsx_proto_name(v[i].proto));
    yajl_gen_map_close(g);
  }
  yajl_gen_array_close(g);
}

/* Old records have no "ports"; malformed entries are skipped. */
static void opt_ports(yajl_val v, struct agsx_record *r) {
  yajl_val a = agsx_json_get_array(v, "ports");
  if (a == NULL || a->u.array.len == 0)
    return;
  size_t n = a->u.array.len < AGSX_MAX_PORTS ? a->u.array.len : AGSX_MAX_PORTS;
  r->ports = xzalloc(n * sizeof(*r->ports));
  for (size_t i = 0; i < n; i++) {
    yajl_val e = a->u.array.values[i];
    const char *ip = agsx_json_get_string(e, "host_ip");
    const char *proto = agsx_json_get_string(e, "proto");
    int64_t hp = -1, port = -1;
    struct agsx_port *p = &r->ports[r->n_ports];
    if (ip == NULL || proto == NULL || !agsx_json_get_int64(e, "host_port", &hp) ||
        !agsx_json_get_int64(e, "port", &port) || hp < 0 || hp > 65535 || port < 1 ||
        port > 65535 || agsx_proto_parse(proto, &p->proto) < 0 ||
        agsx_sockaddr_from_ip(ip, (uint16_t)hp, &p->host) < 0)
      continue;
    p->port = (uint16_t)port;
    r->n_ports++;
  }
}

static char *opt_str(yajl_val v, const char *key) {
  const char *s = agsx_json_get_string(v, key);
  return s ? xstrdup(s) : NULL;
}

static int64_t opt_int(yajl_val v, const char *key) {
  int64_t n = 0;
  agsx_json_get_int64(v, key, &n);
  return n;
}

static char **opt_strv(yajl_val v, const char *key) {
  yajl_val a = agsx_json_get_array(v, key);
  if (a == NULL)
    return NULL;
  char **out = xzalloc((a->u.array.len + 1) * sizeof(char *));
  size_t k = 0;
  for (size_t i = 0; i < a->u.array.len; i++)
    if (YAJL_IS_STRING(a->u.array.values[i]))
      out[k++] = xstrdup(a->u.array.values[i]->u.string);
  return out;
}

/* Labels as written by gen_labels; a record whose labels fail the check
 * keeps none (they are shown, never trusted for more). */
static char **opt_labels(yajl_val v) {
  yajl_val o = agsx_json_get_object(v, "labels");
  if (o == NULL || o->u.object.len == 0)
    return NULL;
  char **out = xzalloc((o->u.object.len + 1) * sizeof(char *));
  size_t k = 0;
  for (size_t i = 0; i < o->u.object.len; i++)
    if (YAJL_IS_STRING(o->u.object.values[i]))
      out[k++] = xasprintf("%s=%s", o->u.object.keys[i], o->u.object.values[i]->u.string);
  agsx_error_t err = NULL;
  if (agsx_labels_check(out, &err) < 0) {
    agsx_error_free(&err);
    agsx_strv_free(out);
    return NULL;
  }
  return out;
}

static void opt_proc(yajl_val v, const char *key, struct agsx_proc_ref *p) {
  yajl_val o = agsx_json_get_object(v, key);
  p->pid = (pid_t)opt_int(o, "pid");
  p->start_time = (uint64_t)opt_int(o, "start_time");
}

static bool valid_id(const char *s) {
  if (s == NULL || strlen(s) != 32)
    return false;
  return strspn(s, "0123456789abcdef") == 32;
}

int agsx_record_from_json(const char *buf, size_t len, struct agsx_record *r, agsx_error_t *err) {
  memset(r, 0, sizeof(*r));
  _cleanup_json_ yajl_val v = agsx_json_parse(buf, len, AGSX_RECORD_MAX, err);
  if (v == NULL)
    return -1;
  const char *id = agsx_json_get_string(v, "id");
  const char *status = agsx_json_get_string(v, "status");
  if (!YAJL_IS_OBJECT(v) || !valid_id(id) || status == NULL)
    return agsx_error_set(err, 0, "not a sandbox record");
  memcpy(r->id, id, 33);
  r->status = AGSX_STATUS_EXITED;
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(status_names); i++)
    if (strcmp(status, status_names[i]) == 0)
      r->status = (enum agsx_status)i;
  r->name = opt_str(v, "name");
  r->image = opt_str(v, "image");
  r->image_digest = opt_str(v, "image_digest");
  r->stop_reason = opt_str(v, "stop_reason");
  r->exit_code = (int)opt_int(v, "exit_code");
  r->created = opt_int(v, "created");
  r->started = opt_int(v, "started");
  r->started_ns = opt_int(v, "started_ns");
  r->ended = opt_int(v, "ended");
  r->deadline = opt_int(v, "deadline");
  r->deadline_ns = opt_int(v, "deadline_ns");
  r->timeout = (uint64_t)opt_int(v, "timeout");
  opt_proc(v, "supervisor", &r->supervisor);
  opt_proc(v, "init", &r->init);
  r->network = opt_str(v, "network");
  r->address = opt_str(v, "address");
  opt_ports(v, r);
  r->memory = (uint64_t)opt_int(v, "memory");
  r->pids = (uint64_t)opt_int(v, "pids");
  r->disk = (uint64_t)opt_int(v, "disk");
  r->cpu_quota_us = (uint64_t)opt_int(v, "cpu_quota_us");
  r->slot = (unsigned)opt_int(v, "slot");
  r->uid_base = (uint32_t)opt_int(v, "uid_base");
  r->argv = opt_strv(v, "argv");
  r->env = opt_strv(v, "env");
  r->user = opt_str(v, "user");
  r->cwd = opt_str(v, "cwd");
  r->hostname = opt_str(v, "hostname");
  r->seccomp = opt_str(v, "seccomp");
  yajl_val np = agsx_json_get(v, "new_privs");
  r->new_privs = np && YAJL_IS_TRUE(np);
  r->labels = opt_labels(v);
  yajl_val b = agsx_json_get(v, "rm");
  r->rm = b && YAJL_IS_TRUE(b);
  b = agsx_json_get(v, "idle");
  r->idle = b && YAJL_IS_TRUE(b);
  r->pool = opt_str(v, "pool");
  b = agsx_json_get(v, "parked");
  r->parked = b && YAJL_IS_TRUE(b);
  b = agsx_json_get(v, "stop_request");
  r->stop_request = b && YAJL_IS_TRUE(b);
  b = agsx_json_get(v, "reported");
  r->reported = b && YAJL_IS_TRUE(b);
  b = agsx_json_get(v, "paused");
  r->paused = b && YAJL_IS_TRUE(b);
  r->paused_at = opt_int(v, "paused_at");
  yajl_val ot = agsx_json_get(v, "on_timeout");
  r->pause_on_timeout = ot && YAJL_IS_STRING(ot) && strcmp(ot->u.string, "pause") == 0;
  r->tmpfs_fd = agsx_json_get(v, "tmpfs_fd") ? (int)opt_int(v, "tmpfs_fd") : -1;
  r->layers = opt_strv(v, "layers");
  opt_proc(v, "frozen_by", &r->frozen_by);
  r->restart_seq = opt_int(v, "restart_seq");
  r->restarted_seq = opt_int(v, "restarted_seq");
  r->restart_layers = opt_strv(v, "restart_layers");
  r->volumes = opt_strv(v, "volumes");
  opt_proc(v, "restart_by", &r->restart_by);
  r->restart_error = opt_str(v, "restart_error");
  return 0;
}

/* ---- labels ----------------------------------------------------------------------------- */

static bool has_control(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
      return true;
  return false;
}

int agsx_labels_check(char *const *labels, agsx_error_t *err) {
  size_t n = 0, total = 0;
  for (; labels && labels[n]; n++) {
    const char *l = labels[n], *eq = strchr(l, '=');
    if (n >= AGSX_LABELS_MAX)
      return agsx_error_set(err, EINVAL, "at most %d labels", AGSX_LABELS_MAX);
    size_t klen = eq ? (size_t)(eq - l) : strlen(l);
    if (eq == NULL || klen == 0)
      return agsx_error_set(err, EINVAL, "invalid label `%.64s` (want KEY=VALUE)", l);
    if (klen > AGSX_LABEL_KEY_MAX || has_control(l, klen))
      return agsx_error_set(err, EINVAL,
                            "invalid label key `%.64s`: 1 to %d bytes, no control characters", l,
                            AGSX_LABEL_KEY_MAX);
    size_t vlen = strlen(eq + 1);
    if (vlen > AGSX_LABEL_VALUE_MAX || has_control(eq + 1, vlen))
      return agsx_error_set(
          err, EINVAL, "invalid value of label `%.*s`: at most %d bytes, no control characters",
          (int)(klen > 64 ? 64 : klen), l, AGSX_LABEL_VALUE_MAX);
    total += klen + vlen + 1;
    if (total > AGSX_LABELS_SIZE_MAX)
      return agsx_error_set(err, EINVAL, "labels of at most %d bytes in all", AGSX_LABELS_SIZE_MAX);
    for (size_t j = 0; j < n; j++)
      if (strncmp(labels[j], l, klen + 1) == 0)
        return agsx_error_set(err, EINVAL, "label `%.*s` given twice", (int)klen, l);
  }
  return 0;
}

const char *agsx_label_get(char *const *labels, const char *key) {
  size_t klen = strlen(key);
  for (size_t i = 0; labels && labels[i]; i++)
    if (strncmp(labels[i], key, klen) == 0 && labels[i][klen] == '=')
      return labels[i] + klen + 1;
  return NULL;
}

bool agsx_labels_match(char *const *labels, const char *filter) {
  const char *eq = strchr(filter, '=');
  if (eq == NULL)
    return agsx_label_get(labels, filter) != NULL;
  _cleanup_free_ char *key = xstrndup(filter, (size_t)(eq - filter));
  const char *v = agsx_label_get(labels, key);
  return v && strcmp(v, eq + 1) == 0;
}

void agsx_labels_set(char ***labels, const char *key, const char *value) {
  size_t klen = strlen(key), n = 0;
  char *kv = xasprintf("%s=%s", key, value);
  for (; *labels && (*labels)[n]; n++)
    if (strncmp((*labels)[n], key, klen) == 0 && (*labels)[n][klen] == '=') {
      free((*labels)[n]);
      (*labels)[n] = kv;
      return;
    }
  *labels = xrealloc(*labels, (n + 2) * sizeof(char *));
  (*labels)[n] = kv;
  (*labels)[n + 1] = NULL;
}

/* ---- files ------------------------------------------------------------------------------ */

int agsx_state_open(const char *path, bool create, agsx_error_t *err) {
  if (create && agsx_mkdir_p(path, 0711, err) < 0)
    return agsx_error_wrap(err, "state directory");
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "state directory `%s`", path);
  return fd;
}

static int open_record_dir(int statefd, const char *id, agsx_error_t *err) {
  if (!valid_id(id))
    return agsx_error_set(err, EINVAL, "invalid sandbox id `%.40s`", id);
  int fd = openat(statefd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "sandbox `%.12s`", id);
  return fd;
}

/* The record is written with temp + rename, without fsync: a crash of agsx
 * never leaves a half record, and after a host crash every sandbox of the
 * record is gone anyway (state lives in /run); skipping fsync keeps disk
 * latency out of a sandbox's start. */
int agsx_record_write(int statefd, const struct agsx_record *r, agsx_error_t *err) {
  if (r->status == AGSX_STATUS_UNKNOWN) /* it would replace the damaged file with nothing true */
    return agsx_error_set(err, EINVAL, "the damaged record of `%.12s` is not rewritten", r->id);
  _cleanup_close_ int dir = open_record_dir(statefd, r->id, err);
  if (dir < 0)
    return -1;
  size_t len;
  _cleanup_free_ char *json = agsx_record_to_json(r, &len);
  _cleanup_close_ int fd =
      openat(dir, ".state.json.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0 || agsx_write_all(fd, json, len) < 0)
    return agsx_error_set(err, errno, "write record of `%.12s`", r->id);
  if (renameat(dir, ".state.json.tmp", dir, "state.json") < 0)
    return agsx_error_set(err, errno, "write record of `%.12s`", r->id);
  return 0;
}

int agsx_record_read(int statefd, const char *id, struct agsx_record *r, agsx_error_t *err) {
  _cleanup_close_ int dir = open_record_dir(statefd, id, err);
  if (dir < 0)
    return -1;
  _cleanup_free_ char *buf = NULL;
  size_t len;
  if (agsx_read_file_at(dir, "state.json", AGSX_RECORD_MAX, &buf, &len, err) < 0 ||
      agsx_record_from_json(buf, len, r, err) < 0)
    return agsx_error_wrap(err, "record of `%.12s`", id);
  if (strcmp(r->id, id) != 0) {
    agsx_record_clear(r);
    return agsx_error_set(err, 0, "record of `%.12s` names another sandbox", id);
  }
  return 0;
}

/* The lock is an flock on the record directory itself: no lock file to
 * create and remove for every sandbox. */
int agsx_record_lock(int statefd, const char *id, agsx_error_t *err) {
  _cleanup_close_ int dir = open_record_dir(statefd, id, err);
  if (dir < 0)
    return -1;
  int r;
  do
    r = flock(dir, LOCK_EX);
  while (r < 0 && errno == EINTR);
  if (r < 0)
    return agsx_error_set(err, errno, "lock the record of `%.12s`", id);
  return steal_fd(&dir);
}

int agsx_record_remove(int statefd, const struct agsx_record *r, agsx_error_t *err) {
  if (r->name)
    agsx_name_release(statefd, r->name, r->id);
  if (!valid_id(r->id))
    return agsx_error_set(err, EINVAL, "invalid sandbox id");
  return agsx_rm_rf_at(statefd, r->id, err);
}

/* ---- names ---------------------------------------------------------------------------------- */

bool agsx_name_is_valid(const char *name) {
  size_t n = strlen(name);
  if (n == 0 || n > AGSX_NAME_MAX || !isalnum((unsigned char)name[0]))
    return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)name[i]) && !strchr("_.-", name[i]))
      return false;
  return true;
}

static int open_names(int statefd, agsx_error_t *err) {
  if (mkdirat(statefd, "names", 0700) < 0 && errno != EEXIST)
    return agsx_error_set(err, errno, "mkdir `names`");
  int fd = openat(statefd, "names", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "open `names`");
  return fd;
}

int agsx_name_claim(int statefd, const char *name, const char *id, agsx_error_t *err) {
  if (!agsx_name_is_valid(name))
    return agsx_error_set(err, EINVAL,
                          "invalid name `%.80s`: use letters, digits and _.- (at most %d, "
                          "starting with a letter or digit)",
                          name, AGSX_NAME_MAX);
  if (valid_id(name))
    return agsx_error_set(err, EINVAL, "invalid name `%s`: it looks like a sandbox id", name);
  _cleanup_close_ int dir = open_names(statefd, err);
  if (dir < 0)
    return -1;
  for (int attempt = 0; attempt < 2; attempt++) {
    /* symlinkat() is atomic: of two racing claims exactly one succeeds. */
    if (symlinkat(id, dir, name) == 0)
      return 0;
    if (errno != EEXIST)
      return agsx_error_set(err, errno, "claim name `%s`", name);
    /* A name whose sandbox record is gone is free again. */
    char target[64];
    ssize_t n = readlinkat(dir, name, target, sizeof(target) - 1);
    if (n <= 0)
      break;
    target[n] = '\0';
    struct stat st;
    if (!valid_id(target) || fstatat(statefd, target, &st, AT_SYMLINK_NOFOLLOW) == 0)
      break;
    unlinkat(dir, name, 0);
  }
  return agsx_error_set_quiet(err, EEXIST, "the name `%s` is already in use by another sandbox",
                              name);
}

void agsx_name_release(int statefd, const char *name, const char *id) {
  agsx_error_t err = NULL;
  _cleanup_close_ int dir = open_names(statefd, &err);
  agsx_error_free(&err);
  if (dir < 0 || !agsx_name_is_valid(name))
    return;
  char target[64];
  ssize_t n = readlinkat(dir, name, target, sizeof(target) - 1);
  if (n <= 0)
    return;
  target[n] = '\0';
  if (strcmp(target, id) == 0)
    unlinkat(dir, name, 0);
}

/* ---- lookup ------------------------------------------------------------------------------------ */

int agsx_state_list(int statefd, char ***ret_ids, agsx_error_t *err) {
  _cleanup_dir_ DIR *d = agsx_dir_stream(statefd);
  if (d == NULL)
    return agsx_error_set(err, errno, "read the state directory");
  size_t n = 0, cap = 16;
  char **ids = xzalloc(cap * sizeof(char *));
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (!valid_id(de->d_name))
      continue;
    if (n + 1 >= cap)
      ids = xrealloc(ids, (cap *= 2) * sizeof(char *));
    ids[n++] = xstrdup(de->d_name);
    ids[n] = NULL;
  }
  *ret_ids = ids;
  return 0;
}

int agsx_state_resolve(int statefd, const char *sandbox, char ret_id[33], agsx_error_t *err) {
  if (valid_id(sandbox)) {
    struct stat st;
    if (fstatat(statefd, sandbox, &st, AT_SYMLINK_NOFOLLOW) == 0) {
      memcpy(ret_id, sandbox, 33);
      return 0;
    }
  }
  if (agsx_name_is_valid(sandbox)) {
    char target[64];
    _cleanup_free_ char *link = xasprintf("names/%s", sandbox);
    ssize_t n = readlinkat(statefd, link, target, sizeof(target) - 1);
    struct stat st;
    if (n == 32) {
      target[n] = '\0';
      if (valid_id(target) && fstatat(statefd, target, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        memcpy(ret_id, target, 33);
        return 0;
      }
    }
  }
  size_t plen = strlen(sandbox);
  if (plen >= 4 && plen < 32 && strspn(sandbox, "0123456789abcdef") == plen) {
    _cleanup_strv_ char **ids = NULL;
    if (agsx_state_list(statefd, &ids, err) < 0)
      return -1;
    const char *found = NULL;
    for (char **i = ids; *i; i++)
      if (strncmp(*i, sandbox, plen) == 0) {
        if (found)
          return agsx_error_set_quiet(
              err, EINVAL, "sandbox `%s` is ambiguous: more than one id starts with it", sandbox);
        found = *i;
      }
    if (found) {
      memcpy(ret_id, found, 33);
      return 0;
    }
  }
  return agsx_error_set_quiet(err, ENOENT, "no such sandbox `%.80s`", sandbox);
}

int agsx_state_lookup_at(int statefd, const char *sandbox, struct agsx_record *ret,
                         agsx_error_t *err) {
  char id[33];
  if (statefd < 0)
    return agsx_error_set_quiet(err, ENOENT, "no such sandbox `%.80s`", sandbox);
  if (agsx_state_resolve(statefd, sandbox, id, err) < 0)
    return -1;
  return agsx_record_read(statefd, id, ret, err);
}

int agsx_state_lookup(const char *state_dir, const char *sandbox, struct agsx_record *ret,
                      agsx_error_t *err) {
  _cleanup_close_ int statefd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  return agsx_state_lookup_at(statefd, sandbox, ret, err);
}

/* ---- processes ---------------------------------------------------------------------------------- */

uint64_t agsx_proc_start_time(pid_t pid) {
  if (pid <= 0)
    return 0;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  char buf[1024];
  ssize_t n = agsx_read_all(fd, buf, sizeof(buf) - 1);
  if (n <= 0)
    return 0;
  buf[n] = '\0';
  /* The command name may hold spaces and parentheses: fields start after
   * the last ')'. starttime is field 22; field 3 is the first after it. */
  char *p = strrchr(buf, ')');
  if (p == NULL)
    return 0;
  p++;
  for (int field = 3; field < 22 && p; field++) {
    p = strchr(p + 1, ' ');
  }
  if (p == NULL)
    return 0;
  /* A zombie is not alive for our purposes. */
  char *state = strrchr(buf, ')') + 2;
  if (*state == 'Z' || *state == 'X')
    return 0;
  return strtoull(p + 1, NULL, 10);
}

bool agsx_proc_ref_alive(const struct agsx_proc_ref *ref) {
  return ref->pid > 0 && ref->start_time != 0 && agsx_proc_start_time(ref->pid) == ref->start_time;
}

int agsx_proc_ref_self(struct agsx_proc_ref *ret) {
  ret->pid = getpid();
  ret->start_time = agsx_proc_start_time(ret->pid);
  return ret->start_time ? 0 : -1;
}

/* ---- reaping ----------------------------------------------------------------------------------- */

#include "host/cgroup.h"
#include "sandbox/proc.h"
#include "sandbox/snapshot.h"

#include <signal.h>
#include <utime.h>

static void kill_ref(const struct agsx_proc_ref *ref) {
  /* pidfd first, then the start time check (proc.h): the signal cannot
   * reach a recycled pid. */
  agsx_proc_ref_signal(ref, SIGKILL, 0);
}

static void report(const struct agsx_reap_report *rep, const char *id, const char *what) {
  if (rep && rep->fn)
    rep->fn(id, what, rep->data);
}

/* A sandbox paused at its deadline (pause_on_timeout) has none until it is
 * unpaused: its supervisor is not stuck. */
static bool deadline_off(const struct agsx_record *r) { return r->pause_on_timeout && r->paused; }

/* Alive past the deadline and the grace: the supervisor is stuck. */
static bool past_deadline(const struct agsx_record *r, int64_t now) {
  return r->deadline > 0 && !deadline_off(r) && now > r->deadline + AGSX_STUCK_GRACE_SEC;
}

int agsx_state_reap_one(int statefd, const char *id, const struct agsx_reap_report *rep,
                        agsx_error_t *err) {
  _cleanup_close_ int lock = agsx_record_lock(statefd, id, err);
  if (lock < 0)
    return -1;
  struct agsx_record r;
  if (agsx_record_read(statefd, id, &r, err) < 0)
    return -1;
  int64_t now = agsx_now_ns() / 1000000000LL;
  int reaped = 0;
  if (r.status != AGSX_STATUS_EXITED) {
    bool alive = agsx_proc_ref_alive(&r.supervisor);
    if (alive && past_deadline(&r, now)) {
      kill_ref(&r.supervisor);
      report(rep, id, "supervisor stuck past the deadline: killed");
      for (int i = 0; i < 100 && agsx_proc_ref_alive(&r.supervisor); i++)
        usleep(10000);
      alive = agsx_proc_ref_alive(&r.supervisor);
    }
    if (!alive) {
      kill_ref(&r.init); /* it dies with its supervisor; make sure */
      struct agsx_cgroup *cg = NULL;
      agsx_error_t e = NULL;
      if (agsx_cgroup_open(id, &cg, &e) == 0)
        agsx_cgroup_destroy(cg, &e);
      agsx_cgroup_free(cg);
      agsx_error_free(&e);
      r.status = AGSX_STATUS_EXITED;
      free(r.stop_reason);
      r.stop_reason = xstrdup(r.deadline > 0 && now >= r.deadline ? "timeout" : "killed");
      r.exit_code = 137;
      r.ended = now;
      report(rep, id, "supervisor gone: sandbox reaped");
      if (r.rm)
        agsx_record_remove(statefd, &r, err);
      else
        agsx_record_write(statefd, &r, err);
      reaped = 1;
    }
  }
  agsx_record_clear(&r);
  return reaped;
}

/* Whether agsx_state_reap_one would act on R: running, and its supervisor
 * gone or alive past the deadline and the grace. */
static bool reap_due(const struct agsx_record *r, int64_t now) {
  if (r->status == AGSX_STATUS_EXITED)
    return false;
  if (past_deadline(r, now))
    return true;
  return !agsx_proc_ref_alive(&r->supervisor);
}

/* Reads ID's record without its lock, in one open: records are replaced
 * by rename, so what is read is a whole record, never half of one. 0 and
 * *R filled; ENOENT (no state.json yet: starting) or another errno. */
static int read_unlocked(int statefd, const char *id, struct agsx_record *r) {
  char path[48];
  snprintf(path, sizeof(path), "%s/state.json", id);
  _cleanup_close_ int fd =
      agsx_openat2(statefd, path, O_RDONLY | O_CLOEXEC, 0, RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH);
  if (fd < 0)
    return errno;
  _cleanup_free_ char *buf = NULL;
  size_t len;
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_read_fd(fd, AGSX_RECORD_MAX, &buf, &len, &e) < 0 ||
      agsx_record_from_json(buf, len, r, &e) < 0)
    return EINVAL;
  if (strcmp(r->id, id) != 0) {
    agsx_record_clear(r);
    return EINVAL;
  }
  return 0;
}

/* Claims this second's reaping of the state directory: the stamp, -2 when it was
 * reaped less than a second ago, or another invocation reaps it right now
 * (it holds the stamp's lock until it is done), -1 when the stamp cannot
 * be written (reap anyway). */
static int claim_reaping(int statefd, bool force) {
  struct stat st;
  int64_t now = agsx_now_ns() / 1000000000LL;
  if (!force && fstatat(statefd, ".reaped", &st, 0) == 0 && st.st_mtime >= now - 1 &&
      st.st_mtime <= now)
    return -2;
  int stamp = openat(statefd, ".reaped", O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (stamp < 0)
    return -1; /* a state directory we cannot write: reap what we can */
  if (!force && (flock(stamp, LOCK_EX | LOCK_NB) < 0 ||
                 (fstat(stamp, &st) == 0 && st.st_mtime >= now - 1 && st.st_mtime <= now))) {
    close(stamp);
    return -2;
  }
  futimens(stamp, NULL);
  return stamp;
}

/* Every agsx invocation calls this, so with many sandboxes it must stay
 * cheap: each record is read once, without its lock, and only one that
 * is due (agsx_state_reap_one, which checks again under the lock) or has
 * a capture's freeze on it (agsx_snapshot_thaw_orphan) is looked at
 * further. One invocation at a time reaps a state directory without
 * FORCE; the others go on meanwhile. */
void agsx_state_reap_all(const char *state_dir, bool force, const struct agsx_reap_report *rep) {
  agsx_error_t err = NULL;
  _cleanup_close_ int statefd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (statefd < 0)
    return;
  _cleanup_close_ int stamp = claim_reaping(statefd, force);
  if (stamp == -2)
    return;
  _cleanup_strv_ char **ids = NULL;
  if (agsx_state_list(statefd, &ids, &err) < 0) {
    agsx_error_free(&err);
    return;
  }
  for (char **id = ids; *id; id++) {
    struct agsx_record r;
    int e = read_unlocked(statefd, *id, &r);
    if (e == ENOENT)
      continue; /* starting, or not a record: gc's business */
    if (e != 0) {
      agsx_debug("reap `%.12s`: unreadable record", *id);
      continue;
    }
    int64_t now = agsx_now_ns() / 1000000000LL;
    bool due = reap_due(&r, now), frozen = r.frozen_by.pid > 0;
    agsx_record_clear(&r);
    int reaped = 0;
    if (due) {
      reaped = agsx_state_reap_one(statefd, *id, rep, &err);
      if (reaped < 0)
        agsx_debug("reap `%.12s`: %s", *id, err->msg);
      agsx_error_free(&err);
    }
    /* Snapshots die with their sandbox; a capture that died thaws. */
    if (reaped == 1)
      agsx_snapshot_drop_all(statefd, *id);
    else if (frozen)
      agsx_snapshot_thaw_orphan(statefd, *id);
  }
}

/* ---- waiting ----------------------------------------------------------------------------- */

#include <poll.h>
#include <sys/inotify.h>

#define WAIT_POLL_MS 100        /* without pidfds, and while a record is being written */
#define WAIT_MAX_SLEEP_MS 60000 /* re-read at least this often (clock changes, update) */

static int removed_error(const char *id, agsx_error_t *err) {
  return agsx_error_set_quiet(err, ENOENT,
                              "sandbox `%.12s` is gone: its record was removed when it ended (run "
                              "--rm) or by rm",
                              id);
}

bool agsx_state_has_waiters(int dirfd) {
  return dirfd >= 0 && faccessat(dirfd, "waiters", F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

void agsx_state_await_waiters(int dirfd) {
  _cleanup_close_ int fd = openat(dirfd, "waiters", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  int64_t end = agsx_mono_ns() + AGSX_WAITERS_MS * 1000000LL;
  while (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK &&
         agsx_mono_ns() < end)
    usleep(5000);
}

/* What a waiter holds while it waits (see the header): the directory, a
 * shared lock of its waiters file, an inotify watch of it. */
struct waiter {
  int dir, lock, ino;
};

static void waiter_close(struct waiter *w) {
  agsx_closep(&w->ino);
  agsx_closep(&w->lock);
  agsx_closep(&w->dir);
}

static void waiter_open(int statefd, const char *id, struct waiter *w) {
  w->dir = openat(statefd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  w->lock = w->ino = -1;
  if (w->dir < 0)
    return;
  w->lock = openat(w->dir, "waiters", O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  /* Not blocking: an exclusive holder is a supervisor about to remove. */
  if (w->lock >= 0 && flock(w->lock, LOCK_SH | LOCK_NB) < 0)
    agsx_closep(&w->lock);
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/fd/%d", w->dir);
  w->ino = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (w->ino >= 0 && inotify_add_watch(w->ino, path, IN_MOVED_TO | IN_DELETE_SELF | IN_ONLYDIR) < 0)
    agsx_closep(&w->ino);
}

/* Sleeps until the supervisor SUP ends, the record changes, or for at most
 * MS. */
static void sleep_on(const struct agsx_proc_ref *sup, const struct waiter *w, int64_t ms) {
  _cleanup_close_ int fd = agsx_proc_ref_pidfd(sup);
  if (fd < 0) {
    if (errno != ENOSYS)
      return; /* gone already */
    ms = ms < WAIT_POLL_MS ? ms : WAIT_POLL_MS;
  }
  struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = w->ino, .events = POLLIN}};
  int64_t end = agsx_mono_ns() + ms * 1000000LL;
  for (;;) {
    int left = (int)((end - agsx_mono_ns()) / 1000000LL);
    int r = left > 0 ? poll(p, 2, left) : 0;
    if (r < 0 && errno == EINTR)
      continue;
    break;
  }
  char buf[4096];
  while (w->ino >= 0 && read(w->ino, buf, sizeof(buf)) > 0)
    ;
}

int agsx_state_wait(int statefd, const char *id, int64_t timeout_ms, struct agsx_record *ret,
                    agsx_error_t *err) {
  _cleanup_(waiter_close) struct waiter w = {-1, -1, -1};
  int64_t until = timeout_ms < 0 ? INT64_MAX : agsx_mono_ns() + timeout_ms * 1000000LL;
  for (;;) {
    if (agsx_mono_ns() >= until)
      return agsx_error_set_quiet(err, ETIMEDOUT, "sandbox `%.12s` did not end in time", id);
    _cleanup_free_ char *rec = xasprintf("%s/state.json", id);
    struct stat st;
    if (fstatat(statefd, rec, &st, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno != ENOENT || fstatat(statefd, id, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return removed_error(id, err);
      usleep(WAIT_POLL_MS * 1000); /* being started: the record comes next */
      continue;
    }
    /* Held before the record is read: no end can slip between the two. */
    if (w.dir < 0)
      waiter_open(statefd, id, &w);
    struct agsx_record r;
    if (agsx_record_read(statefd, id, &r, err) < 0) {
      if (agsx_error_errno(err) != ENOENT)
        return -1;
      agsx_error_free(err);
      return removed_error(id, err);
    }
    if (r.status == AGSX_STATUS_EXITED) {
      *ret = r;
      return 0;
    }
    int64_t now = agsx_now_ns() / 1000000000LL;
    /* (a record without a deadline is never stuck: reap_one leaves it) */
    int64_t wake =
        r.deadline > 0 && !deadline_off(&r) ? r.deadline + AGSX_STUCK_GRACE_SEC + 1 : INT64_MAX / 2;
    if (agsx_proc_ref_alive(&r.supervisor) && now < wake) {
      int64_t ms =
          (wake - now) < WAIT_MAX_SLEEP_MS / 1000 ? (wake - now) * 1000 : WAIT_MAX_SLEEP_MS;
      int64_t left = (until - agsx_mono_ns()) / 1000000LL + 1;
      sleep_on(&r.supervisor, &w, ms < left ? ms : left);
    }
    agsx_record_clear(&r);
    /* Ended, stuck past the deadline, or killed without a word: the record
     * says so after this (a no-op while the supervisor does its job). */
    if (agsx_state_reap_one(statefd, id, NULL, err) < 0) {
      if (agsx_error_errno(err) != ENOENT)
        return -1;
      agsx_error_free(err);
    }
  }
}

int agsx_state_remove_ended(int statefd, const char *id, agsx_error_t *err) {
  _cleanup_close_ int lock = agsx_record_lock(statefd, id, err);
  if (lock < 0)
    return -1;
  struct agsx_record r;
  if (agsx_record_read(statefd, id, &r, err) < 0)
    return -1;
  if (r.status != AGSX_STATUS_EXITED) {
    agsx_record_clear(&r);
    return agsx_error_set_quiet(err, EBUSY,
                                "sandbox `%.12s` is running: stop it first (agsx kill), or use "
                                "rm -f",
                                id);
  }
  struct agsx_cgroup *cg = NULL;
  agsx_error_t e = NULL;
  if (agsx_cgroup_open(id, &cg, &e) == 0)
    agsx_cgroup_destroy(cg, &e);
  agsx_cgroup_free(cg);
  agsx_error_free(&e);
  int ret = agsx_record_remove(statefd, &r, err);
  agsx_record_clear(&r);
  return ret;
}

char **agsx_state_running_images(const char *state_dir) {
  agsx_error_t err = NULL;
  _cleanup_close_ int statefd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  _cleanup_strv_ char **ids = NULL;
  char **out = xzalloc(sizeof(char *));
  size_t n = 0;
  if (statefd < 0 || agsx_state_list(statefd, &ids, &err) < 0) {
    agsx_error_free(&err);
    return out;
  }
  for (char **id = ids; *id; id++) {
    struct agsx_record r;
    if (agsx_record_read(statefd, *id, &r, &err) < 0) {
      agsx_error_free(&err);
      continue;
    }
    if (r.status != AGSX_STATUS_EXITED && r.image_digest) {
      out = xrealloc(out, (n + 2) * sizeof(char *));
      out[n++] = xstrdup(r.image_digest);
      out[n] = NULL;
    }
    agsx_record_clear(&r);
  }
  return out;
}

int agsx_state_remove_corrupt(int statefd, const char *id, agsx_error_t *err) {
  /* Under the record's lock, and only if it is still damaged: a live
   * supervisor may have replaced it with a whole one meanwhile. */
  _cleanup_close_ int lock = agsx_record_lock(statefd, id, err);
  if (lock < 0)
    return -1;
  struct agsx_record now;
  agsx_error_t e = NULL;
  if (agsx_record_read(statefd, id, &now, &e) == 0) {
    agsx_record_clear(&now);
    return 0;
  }
  agsx_error_free(&e);
  struct agsx_cgroup *cg = NULL;
  if (agsx_cgroup_open(id, &cg, &e) == 0)
    agsx_cgroup_destroy(cg, &e);
  agsx_cgroup_free(cg);
  agsx_error_free(&e);
  struct agsx_record dead = {0};
  memcpy(dead.id, id, 33);
  int r = agsx_record_remove(statefd, &dead, err);
  agsx_state_prune_names(statefd, NULL, NULL, false);
  return r;
}

void agsx_state_prune_names(int statefd, void (*report_fn)(const char *what, void *data),
                            void *data, bool dry_run) {
  _cleanup_close_ int dir =
      openat(statefd, "names", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  _cleanup_dir_ DIR *d = dir >= 0 ? agsx_dir_stream(dir) : NULL;
  struct dirent *de;
  while (d && (de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.')
      continue;
    char target[64];
    ssize_t n = readlinkat(dir, de->d_name, target, sizeof(target) - 1);
    struct stat st;
    if (n > 0) {
      target[n] = '\0';
      if (valid_id(target) && fstatat(statefd, target, &st, AT_SYMLINK_NOFOLLOW) == 0)
        continue;
    }
    if (report_fn) {
      _cleanup_free_ char *what = xasprintf("dangling name %s", de->d_name);
      report_fn(what, data);
    }
    if (!dry_run)
      unlinkat(dir, de->d_name, 0);
  }
}

/* ---- listing and gc policy ---------------------------------------------------------------- */

/* The name whose names/ link points at ID, or NULL: a damaged record
 * cannot say its own. */
static char *name_of(int statefd, const char *id) {
  _cleanup_close_ int dir =
      openat(statefd, "names", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  _cleanup_dir_ DIR *d = dir >= 0 ? agsx_dir_stream(dir) : NULL;
  struct dirent *de;
  while (d && (de = readdir(d)) != NULL) {
    char target[64];
    ssize_t n = de->d_name[0] == '.' ? -1 : readlinkat(dir, de->d_name, target, sizeof(target) - 1);
    if (n == 32 && memcmp(target, id, 32) == 0)
      return xstrdup(de->d_name);
  }
  return NULL;
}

/* A damaged record as ls shows it: the path of its file is what a person
 * needs to look at it (the state directory's, as this process sees it). */
static void damaged_record(int statefd, const char *id, const char *why, struct agsx_record *r) {
  memset(r, 0, sizeof(*r));
  memcpy(r->id, id, 33);
  r->status = AGSX_STATUS_UNKNOWN;
  r->name = name_of(statefd, id);
  char link[64], dir[PATH_MAX];
  snprintf(link, sizeof(link), "/proc/self/fd/%d", statefd);
  ssize_t n = readlink(link, dir, sizeof(dir) - 1);
  dir[n > 0 ? n : 0] = '\0';
  r->damage = xasprintf("damaged record `%s%s%s/state.json`: %s", dir, n > 0 ? "/" : "", id, why);
}

/* Reads every record; a damaged one is left for gc (agsx_state_gc_records). */
size_t agsx_state_load(int statefd, unsigned flags, struct agsx_record **ret) {
  agsx_error_t err = NULL;
  _cleanup_strv_ char **ids = NULL;
  *ret = NULL;
  if (agsx_state_list(statefd, &ids, &err) < 0) {
    agsx_warn("%s", err->msg);
    agsx_error_free(&err);
    return 0;
  }
  size_t n = 0, cap = agsx_strv_len(ids) + 1;
  struct agsx_record *v = xzalloc(cap * sizeof(*v));
  for (char **id = ids; *id; id++) {
    _cleanup_free_ char *path = xasprintf("%s/state.json", *id);
    if (faccessat(statefd, path, F_OK, AT_SYMLINK_NOFOLLOW) < 0)
      continue; /* still starting */
    if (agsx_record_read(statefd, *id, &v[n], &err) == 0) {
      n++;
      continue;
    }
    if (flags & AGSX_LOAD_DAMAGED)
      damaged_record(statefd, *id, err->msg, &v[n++]);
    else
      agsx_debug("sandbox %.12s: damaged record skipped: %s", *id, err->msg);
    agsx_error_free(&err);
  }
  *ret = v;
  return n;
}

int64_t agsx_state_gc_min_age(void) {
  const char *v = getenv("AGSX_GC_MIN_AGE");
  char *end;
  long n = v ? strtol(v, &end, 10) : -1;
  return v && *v && *end == '\0' && n >= 0 ? n : 60;
}

/* Ended records, and record directories that never got a record (a start
 * that crashed) once they are a minute old. */
void agsx_state_gc_records(int statefd, const struct agsx_record *v, size_t n, bool dry_run,
                           void (*on_item)(const char *what, void *data), void *data) {
  agsx_error_t err = NULL;
  for (size_t k = 0; k < n; k++) {
    bool damaged = v[k].status == AGSX_STATUS_UNKNOWN;
    if (v[k].status != AGSX_STATUS_EXITED && !damaged)
      continue;
    const char *name = v[k].name ? v[k].name : "";
    _cleanup_free_ char *what =
        damaged ? xasprintf("damaged record of sandbox %.12s%s%s", v[k].id, *name ? " " : "", name)
                : xasprintf("sandbox %.12s%s%s (%s)", v[k].id, *name ? " " : "", name,
                            v[k].stop_reason ? v[k].stop_reason : "exited");
    on_item(what, data);
    if (dry_run)
      continue;
    int r = damaged ? agsx_state_remove_corrupt(statefd, v[k].id, &err)
                    : agsx_record_remove(statefd, &v[k], &err);
    if (r < 0) {
      agsx_warn("%s", err->msg);
      agsx_error_free(&err);
    }
  }
  _cleanup_strv_ char **ids = NULL;
  if (agsx_state_list(statefd, &ids, &err) < 0) {
    agsx_error_free(&err);
    return;
  }
  int64_t now = agsx_now_ns() / 1000000000LL;
  for (char **id = ids; *id; id++) {
    _cleanup_free_ char *rec = xasprintf("%s/state.json", *id);
    struct stat st;
    if (faccessat(statefd, rec, F_OK, AT_SYMLINK_NOFOLLOW) == 0 ||
        fstatat(statefd, *id, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        st.st_mtime > now - agsx_state_gc_min_age())
      continue;
    _cleanup_free_ char *what = xasprintf("unfinished sandbox directory %.12s", *id);
    on_item(what, data);
    if (!dry_run && agsx_rm_rf_at(statefd, *id, &err) < 0)
      agsx_error_free(&err);
  }
}

/* A cgroup is a leftover when no process lives in it. One with processes
 * may be a sandbox of another state directory: never ours to kill. */
struct cgroup_gc {
  char *const *running;
  void (*on_item)(const char *what, void *data);
  void *data;
};

static bool keep_cgroup(const char *name, void *data) {
  char *const *running = ((struct cgroup_gc *)data)->running;
  for (char *const *r = running; r && *r; r++)
    if (strcmp(*r, name) == 0)
      return true;
  struct agsx_cgroup *cg = NULL;
  agsx_error_t err = NULL;
  uint64_t mem = 0, pids = 0;
  int64_t age = 0;
  if (agsx_cgroup_open(name, &cg, &err) == 0) {
    agsx_cgroup_stats(cg, &mem, &pids);
    age = agsx_cgroup_age(cg);
  }
  agsx_cgroup_free(cg);
  agsx_error_free(&err);
  /* A young empty one may be a sandbox being started right now. */
  return pids > 0 || age < agsx_state_gc_min_age();
}

static void cgroup_item(const char *what, void *data) {
  struct cgroup_gc *g = data;
  g->on_item(what, g->data);
}

int agsx_state_gc_cgroups(char *const *running, bool dry_run,
                          void (*on_item)(const char *what, void *data), void *data,
                          agsx_error_t *err) {
  struct cgroup_gc g = {running, on_item, data};
  return agsx_cgroup_gc(keep_cgroup, cgroup_item, &g, dry_run, err);
}
