/* agsx — oci/state: container records under --root. See state.h. */
#include "config.h"

#include "oci/cgroup.h"
#include "oci/state.h"
#include "state/state.h"
#include "util/json.h"

#include <ctype.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

const char *agsx_oci_status_name(enum agsx_oci_status s) {
  static const char *const n[] = {"creating", "created", "running", "paused", "stopped"};
  return s <= AGSX_OCI_STOPPED ? n[s] : "stopped";
}

void agsx_oci_record_clear(struct agsx_oci_record *r) {
  free(r->id);
  free(r->bundle);
  free(r->rootfs);
  free(r->created);
  free(r->owner);
  free(r->annotations);
  free(r->cgroup);
  free(r->unit);
  free(r->slice);
  free(r->workdir);
  memset(r, 0, sizeof(*r));
  r->slot = -1;
}

bool agsx_oci_id_is_valid(const char *id) {
  size_t n = strlen(id);
  if (n == 0 || n > AGSX_OCI_ID_MAX || strcmp(id, ".") == 0 || strcmp(id, "..") == 0)
    return false;
  for (const char *c = id; *c; c++)
    if (!isalnum((unsigned char)*c) && *c != '_' && *c != '+' && *c != '-' && *c != '.')
      return false;
  return true;
}

char *agsx_oci_default_root(void) {
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  if (geteuid() != 0 && xdg && *xdg)
    return xasprintf("%s/agsx-oci", xdg);
  return xstrdup(AGSX_OCI_DEFAULT_ROOT);
}

int agsx_oci_root_open(const char *path, bool create, agsx_error_t *err) {
  _cleanup_free_ char *def = path ? NULL : agsx_oci_default_root();
  const char *p = path ? path : def;
  if (create && agsx_mkdir_p(p, 0700, err) < 0)
    return agsx_error_wrap(err, "state root");
  int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "state root `%s`", p);
  return fd;
}

int agsx_oci_dir_open(int rootfd, const char *id, agsx_error_t *err) {
  if (!agsx_oci_id_is_valid(id))
    return agsx_error_set(err, EINVAL, "invalid container ID format");
  int fd = openat(rootfd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT)
    return agsx_error_set_quiet(err, ENOENT, "container does not exist");
  if (fd < 0)
    return agsx_error_set(err, errno, "container `%s`", id);
  return fd;
}

int agsx_oci_record_write(int dirfd, const struct agsx_oci_record *r, agsx_error_t *err) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "id", r->id);
  agsx_json_kv_str(g, "bundle", r->bundle);
  agsx_json_kv_str(g, "rootfs", r->rootfs);
  agsx_json_kv_str(g, "created", r->created);
  agsx_json_kv_str(g, "owner", r->owner ? r->owner : "");
  agsx_json_kv_int(g, "pid", r->pid);
  agsx_json_kv_int(g, "start_time", (int64_t)r->start_time);
  agsx_json_kv_str(g, "cgroup", r->cgroup);
  agsx_json_kv_bool(g, "cgroup_owned", r->cgroup_owned);
  agsx_json_kv_int(g, "slot", r->slot);
  agsx_json_kv_bool(g, "complete", r->complete);
  if (r->unit) {
    agsx_json_kv_str(g, "unit", r->unit);
    agsx_json_kv_str(g, "slice", r->slice ? r->slice : "");
  }
  if (r->workdir)
    agsx_json_kv_str(g, "workdir", r->workdir);
  agsx_json_kv_int(g, "poststop_done", r->poststop_done);
  if (r->annotations) {
    _cleanup_error_ agsx_error_t e = NULL;
    _cleanup_json_ yajl_val a =
        agsx_json_parse(r->annotations, strlen(r->annotations), 1u << 20, &e);
    if (a) {
      agsx_json_key(g, "annotations");
      agsx_json_value(g, a);
    }
  }
  yajl_gen_map_close(g);
  size_t len;
  _cleanup_free_ char *text = agsx_json_gen_steal(g, &len);
  return agsx_oci_write_file(dirfd, "state.json", text, len, 0600, err);
}

int agsx_oci_write_file(int dirfd, const char *name, const void *data, size_t len, mode_t mode,
                        agsx_error_t *err) {
  _cleanup_free_ char *tmp = xasprintf(".%s.tmp-%d-%lx", name, getpid(), (long)agsx_mono_ns());
  _cleanup_close_ int fd =
      openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0)
    return agsx_error_set(err, errno, "create `%s`", tmp);
  if (agsx_write_all(fd, data, len) < 0 || renameat(dirfd, tmp, dirfd, name) < 0) {
    agsx_error_set(err, errno, "write `%s`", name);
    unlinkat(dirfd, tmp, 0);
    return -1;
  }
  return 0;
}

static char *dup_or_null(yajl_val o, const char *key) {
  const char *s = agsx_json_get_string(o, key);
  return s ? xstrdup(s) : NULL;
}

int agsx_oci_record_read(int dirfd, struct agsx_oci_record *r, agsx_error_t *err) {
  memset(r, 0, sizeof(*r));
  r->slot = -1;
  _cleanup_free_ char *buf = NULL;
  size_t len;
  if (agsx_read_file_at(dirfd, "state.json", 1u << 20, &buf, &len, err) < 0)
    return -1;
  _cleanup_json_ yajl_val o = agsx_json_parse(buf, len, 1u << 20, err);
  if (o == NULL)
    return agsx_error_wrap(err, "state.json");
  r->id = dup_or_null(o, "id");
  r->bundle = dup_or_null(o, "bundle");
  r->rootfs = dup_or_null(o, "rootfs");
  r->created = dup_or_null(o, "created");
  r->owner = dup_or_null(o, "owner");
  r->cgroup = dup_or_null(o, "cgroup");
  r->workdir = dup_or_null(o, "workdir");
  r->unit = dup_or_null(o, "unit");
  r->slice = dup_or_null(o, "slice");
  int64_t v = 0;
  if (agsx_json_get_int64(o, "pid", &v))
    r->pid = (pid_t)v;
  if (agsx_json_get_int64(o, "start_time", &v))
    r->start_time = (uint64_t)v;
  if (agsx_json_get_int64(o, "slot", &v))
    r->slot = (int)v;
  if (agsx_json_get_int64(o, "poststop_done", &v))
    r->poststop_done = v;
  yajl_val b = agsx_json_get(o, "cgroup_owned");
  r->cgroup_owned = b && YAJL_IS_TRUE(b);
  b = agsx_json_get(o, "complete");
  r->complete = b && YAJL_IS_TRUE(b);
  yajl_val a = agsx_json_get_object(o, "annotations");
  if (a) {
    _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
    agsx_json_value(g, a);
    r->annotations = agsx_json_gen_steal(g, NULL);
  }
  if (r->id == NULL || r->bundle == NULL)
    return agsx_error_set(err, EINVAL, "state.json: incomplete record");
  return 0;
}

enum agsx_oci_status agsx_oci_record_status(int dirfd, const struct agsx_oci_record *r) {
  if (!r->complete)
    return AGSX_OCI_CREATING;
  struct agsx_proc_ref ref = {.pid = r->pid, .start_time = r->start_time};
  if (!agsx_proc_ref_alive(&ref))
    return AGSX_OCI_STOPPED;
  if (faccessat(dirfd, "start.sock", F_OK, AT_SYMLINK_NOFOLLOW) == 0)
    return AGSX_OCI_CREATED;
  if (r->cgroup) {
    _cleanup_oci_cgroup_ struct agsx_oci_cgroup *cg = NULL;
    _cleanup_error_ agsx_error_t e = NULL;
    bool frozen = false;
    if (agsx_oci_cgroup_open(r->cgroup, false, &cg, &e) == 0 &&
        agsx_oci_cgroup_is_frozen(cg, &frozen, &e) == 0 && frozen)
      return AGSX_OCI_PAUSED;
  }
  return AGSX_OCI_RUNNING;
}

char *agsx_oci_state_json(const struct agsx_oci_record *r, enum agsx_oci_status st) {
  if (st == AGSX_OCI_CREATING)
    st = AGSX_OCI_STOPPED; /* Podman rejects "creating" */
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(true);
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "ociVersion", "1.0.2");
  agsx_json_kv_str(g, "id", r->id);
  agsx_json_kv_int(g, "pid", st == AGSX_OCI_STOPPED ? 0 : r->pid);
  agsx_json_kv_str(g, "status", agsx_oci_status_name(st));
  agsx_json_kv_str(g, "bundle", r->bundle);
  agsx_json_kv_str(g, "rootfs", r->rootfs);
  agsx_json_kv_str(g, "created", r->created);
  if (r->annotations) {
    _cleanup_error_ agsx_error_t e = NULL;
    _cleanup_json_ yajl_val a =
        agsx_json_parse(r->annotations, strlen(r->annotations), 1u << 20, &e);
    if (a) {
      agsx_json_key(g, "annotations");
      agsx_json_value(g, a);
    }
  }
  agsx_json_kv_str(g, "owner", r->owner ? r->owner : "");
  yajl_gen_map_close(g);
  size_t len;
  char *s = agsx_json_gen_steal(g, &len);
  while (len > 0 && s[len - 1] == '\n')
    s[--len] = '\0';
  return s;
}
