/* agsx — sandbox: warm pools (see pool.h), the pool itself: its
 * configuration (pool.json), its directory and its parked/ entries, the
 * fill and the detached refiller, create, ls, rm and gc. The claim is
 * pool-claim.c's, the parked sandbox's supervisor pool-sup.c's. Invariant:
 * a pool's sandboxes are started only under its lock and while its
 * pool.json exists (rm unlinks it, then takes the lock), so a removed pool
 * is never refilled; an entry is dropped only when no claim holds its flock
 * and its supervisor is dead. */
#include "config.h"

#include "sandbox/pool-internal.h"
#include "image/store.h"
#include "net/egress.h"
#include "sandbox/control.h"
#include "state/state.h"
#include "util/json.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define POOL_LOCK "lock"

/* ---- the configuration --------------------------------------------------------------------- */

bool agsx_pool_name_is_valid(const char *name) { return agsx_name_is_valid(name); }

void agsx_pool_config_clear(struct agsx_pool_config *pc) {
  free(pc->name);
  free(pc->image);
  free(pc->image_digest);
  free(pc->network);
  free(pc->seccomp);
  for (size_t i = 0; i < pc->n_binds; i++) {
    free(pc->binds[i].src);
    free(pc->binds[i].dst);
  }
  free(pc->binds);
  agsx_strv_free(pc->env);
  free(pc->user);
  free(pc->workdir);
  memset(pc, 0, sizeof(*pc));
}

static void gen_strv(yajl_gen g, const char *key, char *const *v) {
  agsx_json_key(g, key);
  yajl_gen_array_open(g);
  for (size_t i = 0; v && v[i]; i++)
    agsx_json_str(g, v[i]);
  yajl_gen_array_close(g);
}

static char *config_to_json(const struct agsx_pool_config *pc, size_t *ret_len) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(true);
  yajl_gen_map_open(g);
  agsx_json_kv_int(g, "version", 1);
  agsx_json_kv_str(g, "name", pc->name);
  agsx_json_kv_str(g, "image", pc->image);
  agsx_json_kv_str(g, "image_digest", pc->image_digest);
  agsx_json_kv_int(g, "size", pc->size);
  agsx_json_kv_int(g, "lifetime", (int64_t)pc->lifetime);
  agsx_json_kv_str(g, "network", pc->network);
  agsx_json_kv_int(g, "memory", (int64_t)pc->memory);
  agsx_json_kv_int(g, "pids", (int64_t)pc->pids);
  agsx_json_kv_int(g, "disk", (int64_t)pc->disk);
  agsx_json_kv_int(g, "cpu_millis", (int64_t)(pc->cpus * 1000 + 0.5));
  agsx_json_kv_bool(g, "read_only", pc->read_only);
  agsx_json_kv_str(g, "seccomp", pc->seccomp);
  if (pc->new_privs)
    agsx_json_kv_bool(g, "new_privs", true);
  agsx_json_key(g, "volumes");
  yajl_gen_array_open(g);
  for (size_t i = 0; i < pc->n_binds; i++) {
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "src", pc->binds[i].src);
    agsx_json_kv_str(g, "dst", pc->binds[i].dst);
    agsx_json_kv_bool(g, "ro", pc->binds[i].ro);
    yajl_gen_map_close(g);
  }
  yajl_gen_array_close(g);
  gen_strv(g, "env", pc->env);
  agsx_json_kv_str(g, "user", pc->user);
  agsx_json_kv_str(g, "workdir", pc->workdir);
  agsx_json_kv_int(g, "created", pc->created);
  yajl_gen_map_close(g);
  return agsx_json_gen_steal(g, ret_len);
}

static char *opt_str(yajl_val v, const char *key) {
  const char *s = agsx_json_get_string(v, key);
  return s ? xstrdup(s) : NULL;
}

static uint64_t opt_u64(yajl_val v, const char *key) {
  int64_t n = 0;
  return agsx_json_get_int64(v, key, &n) && n > 0 ? (uint64_t)n : 0;
}

static int config_from_json(const char *buf, size_t len, struct agsx_pool_config *pc,
                            agsx_error_t *err) {
  memset(pc, 0, sizeof(*pc));
  _cleanup_json_ yajl_val v = agsx_json_parse(buf, len, 1u << 20, err);
  if (v == NULL)
    return -1;
  pc->name = opt_str(v, "name");
  pc->image = opt_str(v, "image");
  pc->image_digest = opt_str(v, "image_digest");
  pc->size = (unsigned)opt_u64(v, "size");
  pc->lifetime = opt_u64(v, "lifetime");
  pc->network = opt_str(v, "network");
  pc->memory = opt_u64(v, "memory");
  pc->pids = opt_u64(v, "pids");
  pc->disk = opt_u64(v, "disk");
  pc->cpus = (double)opt_u64(v, "cpu_millis") / 1000.0;
  yajl_val b = agsx_json_get(v, "read_only");
  pc->read_only = b && YAJL_IS_TRUE(b);
  pc->seccomp = opt_str(v, "seccomp");
  yajl_val np = agsx_json_get(v, "new_privs");
  pc->new_privs = np && YAJL_IS_TRUE(np);
  yajl_val vols = agsx_json_get_array(v, "volumes");
  size_t nv = vols ? vols->u.array.len : 0;
  if (nv > AGSX_MAX_BINDS)
    nv = AGSX_MAX_BINDS;
  pc->binds = nv ? xzalloc(nv * sizeof(*pc->binds)) : NULL;
  for (size_t i = 0; i < nv; i++) {
    yajl_val e = vols->u.array.values[i];
    const char *src = agsx_json_get_string(e, "src"), *dst = agsx_json_get_string(e, "dst");
    if (src == NULL || dst == NULL)
      continue;
    yajl_val ro = agsx_json_get(e, "ro");
    pc->binds[pc->n_binds++] =
        (struct agsx_bind){.src = xstrdup(src), .dst = xstrdup(dst), .ro = ro && YAJL_IS_TRUE(ro)};
  }
  yajl_val env = agsx_json_get_array(v, "env");
  for (size_t i = 0; env && i < env->u.array.len; i++)
    if (YAJL_IS_STRING(env->u.array.values[i]))
      agsx_strv_push(&pc->env, YAJL_GET_STRING(env->u.array.values[i]));
  pc->user = opt_str(v, "user");
  pc->workdir = opt_str(v, "workdir");
  int64_t created = 0;
  agsx_json_get_int64(v, "created", &created);
  pc->created = created;
  if (pc->name == NULL || pc->image == NULL || pc->size == 0)
    return agsx_error_set(err, EINVAL, "pool configuration without name, image or size");
  return 0;
}

static int open_pools(const char *state, bool create, agsx_error_t *err) {
  _cleanup_close_ int statefd = agsx_state_open(state, create, err);
  if (statefd < 0)
    return -1;
  if (create && mkdirat(statefd, AGSX_POOL_DIR, 0700) < 0 && errno != EEXIST)
    return agsx_error_set(err, errno, "create `%s/%s`", state, AGSX_POOL_DIR);
  int fd = openat(statefd, AGSX_POOL_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return agsx_error_set_quiet(err, errno, "open `%s/%s`", state, AGSX_POOL_DIR);
  return fd;
}

int agsx_pool_open_dir(const char *state, const char *name, agsx_error_t *err) {
  if (!agsx_pool_name_is_valid(name))
    return agsx_error_set(err, EINVAL, "invalid pool name `%s`", name);
  _cleanup_close_ int pools = open_pools(state, false, err);
  if (pools < 0) {
    if (agsx_error_errno(err) == ENOENT) {
      agsx_error_free(err);
      return agsx_error_set_quiet(err, ENOENT, "no such pool `%s`", name);
    }
    return -1;
  }
  int fd = openat(pools, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return agsx_error_set_quiet(err, errno, errno == ENOENT ? "no such pool `%s`" : "pool `%s`",
                                name);
  return fd;
}

static int read_config_at(int pooldir, const char *name, struct agsx_pool_config *ret,
                          agsx_error_t *err) {
  _cleanup_free_ char *buf = NULL;
  size_t len;
  if (agsx_read_file_at(pooldir, POOL_JSON, 1u << 20, &buf, &len, err) < 0) {
    if (agsx_error_errno(err) == ENOENT) {
      agsx_error_free(err);
      return agsx_error_set_quiet(err, ENOENT, "no such pool `%s`", name);
    }
    return -1;
  }
  if (config_from_json(buf, len, ret, err) < 0) {
    agsx_pool_config_clear(ret);
    return agsx_error_wrap(err, "pool `%s`", name);
  }
  return 0;
}

int agsx_pool_read(const char *state, const char *name, struct agsx_pool_config *ret,
                   agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  _cleanup_close_ int pooldir = agsx_pool_open_dir(state, name, err);
  if (pooldir < 0)
    return -1;
  return read_config_at(pooldir, name, ret, err);
}

static int no_pull(void *data, const char *image, agsx_error_t *err) {
  (void)data;
  return agsx_error_set_quiet(err, ENOENT, "image `%s` not found", image);
}

void agsx_pool_spec(const struct agsx_pool_config *pc, const char *root, const char *state,
                    struct agsx_run_spec *ret) {
  *ret = (struct agsx_run_spec){
      .root = root,
      .state = state,
      .image = pc->image,
      .pull = "never",
      .pull_image = no_pull,
      .env = pc->env,
      .user = pc->user,
      .workdir = pc->workdir,
      .seccomp = pc->seccomp,
      .new_privs = pc->new_privs,
      .binds = pc->binds,
      .n_binds = pc->n_binds,
      .network = pc->network,
      .timeout = pc->lifetime,
      .memory = pc->memory,
      .pids = pc->pids,
      .disk = pc->disk,
      .cpus = pc->cpus,
      .read_only = pc->read_only,
  };
}

static bool same_str(const char *a, const char *b, const char *dflt) {
  return strcmp(a ? a : dflt, b ? b : dflt) == 0;
}

static bool same_binds(const struct agsx_pool_config *pc, const struct agsx_run_spec *s) {
  if (pc->n_binds != s->n_binds)
    return false;
  for (size_t i = 0; i < s->n_binds; i++)
    if (strcmp(pc->binds[i].src, s->binds[i].src) || strcmp(pc->binds[i].dst, s->binds[i].dst) ||
        pc->binds[i].ro != s->binds[i].ro)
      return false;
  return true;
}

int agsx_pool_check(const struct agsx_pool_config *pc, const struct agsx_run_spec *s,
                    agsx_error_t *err) {
  const char *what = NULL;
  if (s->image && strcmp(s->image, pc->image) != 0)
    what = "the image";
  else if (s->network && !same_str(s->network, pc->network, "internal"))
    what = "--network";
  else if (s->memory && s->memory != pc->memory)
    what = "--memory";
  else if (s->pids && s->pids != pc->pids)
    what = "--pids";
  else if (s->disk && s->disk != pc->disk)
    what = "--disk";
  else if (s->cpus > 0 && (int64_t)(s->cpus * 1000 + 0.5) != (int64_t)(pc->cpus * 1000 + 0.5))
    what = "--cpus";
  else if (s->read_only && !pc->read_only)
    what = "--read-only";
  else if (s->n_binds && !same_binds(pc, s))
    what = "--volume";
  else if ((s->seccomp && !same_str(s->seccomp, pc->seccomp, "")) ||
           (s->new_privs && !pc->new_privs))
    what = "--security-opt";
  else if (s->n_ports)
    what = "--publish";
  else if (s->n_rules)
    what = "--allow/--deny/--rules";
  else if (s->egress && s->egress->n)
    what = "--egress-*";
  else if (s->tty)
    what = "--tty";
  if (what)
    return agsx_error_set(err, EINVAL,
                          "pool `%s`: %s cannot be changed when a sandbox is claimed (it differs "
                          "from the pool's; see agsx pool ls --json)",
                          pc->name, what);
  return 0;
}

/* ---- entries ---------------------------------------------------------------------------------- */

/* Whether the entry ID (locked by us) is a live parked sandbox. */
static bool entry_alive(int statefd, const char *id) {
  struct agsx_record r;
  agsx_error_t e = NULL;
  if (agsx_record_read(statefd, id, &r, &e) < 0) {
    agsx_error_free(&e);
    return false;
  }
  bool ok = r.status == AGSX_STATUS_RUNNING && r.parked && agsx_proc_ref_alive(&r.supervisor);
  agsx_record_clear(&r);
  return ok;
}

static bool is_id(const char *s) {
  size_t n = strlen(s);
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
      return false;
  return n == AGSX_ID_HEX;
}

char **agsx_pool_list_entries(int parked) {
  char **v = NULL;
  size_t n = 0;
  DIR *d = agsx_dir_stream(parked);
  if (d == NULL)
    return agsx_strv_concat(NULL, NULL);
  struct dirent *de;
  while ((de = readdir(d)) && n < 2 * AGSX_POOL_MAX_SIZE)
    if (is_id(de->d_name))
      agsx_strv_push(&v, de->d_name), n++;
  closedir(d);
  return v ? v : agsx_strv_concat(NULL, NULL);
}

/* Live entries; stale ones (a dead supervisor) are removed. */
static unsigned count_live(int statefd, int parked, bool dry_run) {
  _cleanup_strv_ char **ids = agsx_pool_list_entries(parked);
  unsigned live = 0;
  for (size_t i = 0; ids[i]; i++) {
    _cleanup_close_ int fd = openat(parked, ids[i], O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
      continue;
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
      live++; /* a claim under way: its supervisor refills if it succeeds */
      continue;
    }
    if (entry_alive(statefd, ids[i]))
      live++;
    else if (!dry_run)
      unlinkat(parked, ids[i], 0);
  }
  return live;
}

/* ---- fill, create ------------------------------------------------------------------------------ */

/* A background refill (refill_async) starts its sandboxes at a lower
 * priority, so that claims and the commands they run go first; a parked
 * sandbox is put back to the normal one before it can be claimed. */
static bool background_refill;
#define REFILL_NICE 10

static int start_parked(const struct agsx_pool_config *pc, const char *root, const char *state,
                        agsx_error_t *err) {
  struct agsx_run_spec spec;
  agsx_pool_spec(pc, root, state, &spec);
  spec.pool = pc->name;
  struct agsx_lifecycle *lc = NULL;
  if (agsx_lifecycle_create(&spec, &lc, err) < 0)
    return -1;
  struct agsx_run_started st;
  int r = agsx_lifecycle_detach(lc, &st, err);
  agsx_lifecycle_free(lc);
  /* The supervisor, its init and the waiting command share a process
   * group (the supervisor's session's). */
  pid_t pg = r == 0 && background_refill ? getpgid(st.supervisor) : -1;
  if (pg > 1)
    setpriority(PRIO_PGRP, (id_t)pg, 0);
  return r;
}

static int fill_at(const char *root, const char *state, const char *name, int pooldir,
                   agsx_error_t *err) {
  _cleanup_close_ int lock = agsx_lock_at(pooldir, POOL_LOCK, true, err);
  if (lock < 0)
    return -1;
  struct agsx_pool_config pc;
  if (read_config_at(pooldir, name, &pc, err) < 0) {
    if (agsx_error_errno(err) != ENOENT)
      return -1;
    agsx_error_free(err); /* removed meanwhile */
    return 0;
  }
  _cleanup_close_ int statefd = agsx_state_open(state, true, err);
  _cleanup_close_ int parked =
      openat(pooldir, PARKED, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  int r = 0;
  if (statefd < 0)
    r = -1;
  else if (parked < 0)
    r = agsx_error_set(err, errno, "pool `%s`", name);
  for (unsigned live = r ? 0 : count_live(statefd, parked, false); r == 0 && live < pc.size;
       live++) {
    /* rm takes the lock after removing pool.json: checked before each. */
    if (faccessat(pooldir, POOL_JSON, F_OK, 0) < 0)
      break;
    r = start_parked(&pc, root, state, err);
  }
  agsx_pool_config_clear(&pc);
  return r;
}

int agsx_pool_fill(const char *root, const char *state, const char *name, agsx_error_t *err) {
  _cleanup_close_ int pooldir = agsx_pool_open_dir(state, name, err);
  if (pooldir < 0) {
    if (agsx_error_errno(err) != ENOENT)
      return -1;
    agsx_error_free(err);
    return 0;
  }
  return fill_at(root, state, name, pooldir, err) < 0 ? agsx_error_wrap(err, "pool `%s`", name) : 0;
}

/* A detached refiller (a grandchild in its own session, holding nothing of
 * the caller's): the caller is a supervisor, which must not wait for it. */
void agsx_pool_refill_async(const char *root, const char *state, const char *name) {
  pid_t pid = fork();
  if (pid < 0)
    return;
  if (pid == 0) {
    agsx_log_set_sink(NULL, NULL);
    agsx_close_all_except(NULL, 0);
    agsx_signal_defaults();
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (setsid() < 0 || fork() != 0)
      _exit(0);
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int i = 0; devnull >= 0 && i < 3; i++)
      dup2(devnull, i);
    /* (No title of its own: its command line, and its supervisors', stays
     * the one that started the pool's sandbox, naming --state.) */
    background_refill = true;
    if (setpriority(PRIO_PROCESS, 0, REFILL_NICE) < 0) {
    } /* (best effort: then it refills at the normal priority) */
    agsx_error_t err = NULL;
    agsx_pool_fill(root, state, name, &err);
    agsx_error_free(&err);
    _exit(0);
  }
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
}

static int check_create_spec(const struct agsx_run_spec *s, const char *name, unsigned size,
                             agsx_error_t *err) {
  if (!agsx_pool_name_is_valid(name))
    return agsx_error_set(err, EINVAL,
                          "invalid pool name `%s`: letters, digits and _.- (at most 64, starting "
                          "with a letter or digit)",
                          name);
  if (size == 0 || size > AGSX_POOL_MAX_SIZE)
    return agsx_error_set(err, EINVAL, "a pool's size is 1 to %d", AGSX_POOL_MAX_SIZE);
  if (s->image == NULL)
    return agsx_error_set(err, EINVAL, "a pool needs an image (--image IMAGE)");
  const char *what = agsx_strv_len(s->cmd)       ? "a command"
                     : s->n_ports                ? "--publish"
                     : s->n_rules                ? "--allow/--deny/--rules"
                     : s->egress && s->egress->n ? "--egress-*"
                     : s->name                   ? "--name"
                     : s->hostname               ? "--hostname"
                     : s->labels                 ? "--label"
                     : s->tty || s->interactive  ? "--tty/--interactive"
                     : s->rm                     ? "--rm"
                                                 : NULL;
  if (what)
    return agsx_error_set(err, EINVAL,
                          "pool create: %s is not a pool option (give it to run --pool)", what);
  return agsx_run_spec_check(s, err);
}

/* The host image (sandbox/lifecycle.h) is no image of the store: it has no
 * manifest, so its parked sandboxes' entries hold the empty digest. */
static bool is_host(const char *image) { return strcmp(image, "host") == 0; }

char *agsx_pool_resolve_digest(const char *root, const char *image, agsx_error_t *err) {
  if (is_host(image))
    return xstrdup("");
  _cleanup_store_ struct agsx_store *s = NULL;
  if (agsx_store_open(root, false, &s, err) < 0)
    return NULL;
  struct agsx_store_image img = {0};
  if (agsx_store_resolve(s, image, &img, err) < 0)
    return NULL;
  char *d = xstrdup(img.manifest.digest);
  free(img.ref);
  agsx_descriptor_clear(&img.manifest);
  return d;
}

static int write_config(int pools, const char *name, const struct agsx_pool_config *pc,
                        agsx_error_t *err) {
  if (mkdirat(pools, name, 0700) < 0)
    return agsx_error_set(err, errno, errno == EEXIST ? "pool `%s` exists" : "create pool `%s`",
                          name);
  _cleanup_close_ int dir = openat(pools, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir < 0 || mkdirat(dir, PARKED, 0700) < 0)
    return agsx_error_set(err, errno, "create pool `%s`", name);
  size_t len;
  _cleanup_free_ char *json = config_to_json(pc, &len);
  return agsx_write_file_atomic(dir, POOL_JSON, json, len, 0600, err);
}

int agsx_pool_create(const struct agsx_run_spec *s, const char *name, unsigned size,
                     agsx_error_t *err) {
  if (check_create_spec(s, name, size, err) < 0)
    return -1;
  _cleanup_free_ char *digest = agsx_pool_resolve_digest(s->root, s->image, err);
  if (digest == NULL && agsx_error_errno(err) == ENOENT && s->pull_image) {
    agsx_error_free(err);
    if (s->pull_image(s->pull_data, s->image, err) < 0)
      return -1;
    digest = agsx_pool_resolve_digest(s->root, s->image, err);
  }
  if (digest == NULL)
    return -1;
  struct agsx_pool_config pc = {
      .name = xstrdup(name),
      .image = xstrdup(s->image),
      .image_digest = *digest ? steal_ptr(&digest) : NULL,
      .size = size,
      .lifetime = s->timeout ? s->timeout : AGSX_POOL_DEFAULT_LIFETIME,
      .network = s->network ? xstrdup(s->network) : NULL,
      .memory = s->memory,
      .pids = s->pids,
      .disk = s->disk,
      .cpus = s->cpus,
      .read_only = s->read_only,
      .seccomp = s->seccomp ? xstrdup(s->seccomp) : NULL,
      .new_privs = s->new_privs,
      .env = s->env ? agsx_strv_concat(s->env, NULL) : NULL,
      .user = s->user ? xstrdup(s->user) : NULL,
      .workdir = s->workdir ? xstrdup(s->workdir) : NULL,
      .created = agsx_now_ns() / 1000000000LL,
  };
  pc.binds = s->n_binds ? xzalloc(s->n_binds * sizeof(*pc.binds)) : NULL;
  for (size_t i = 0; i < s->n_binds; i++)
    pc.binds[pc.n_binds++] = (struct agsx_bind){
        .src = xstrdup(s->binds[i].src), .dst = xstrdup(s->binds[i].dst), .ro = s->binds[i].ro};
  _cleanup_close_ int pools = open_pools(s->state, true, err);
  int r = pools < 0 ? -1 : write_config(pools, name, &pc, err);
  agsx_pool_config_clear(&pc);
  if (r < 0)
    return -1;
  _cleanup_close_ int dir = openat(pools, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir < 0 || fill_at(s->root, s->state, name, dir, err) < 0) {
    if (dir < 0)
      agsx_error_set(err, errno, "pool `%s`", name);
    agsx_error_t e = NULL;
    agsx_pool_remove(s->state, name, &e);
    agsx_error_free(&e);
    return agsx_error_wrap(err, "pool `%s`", name);
  }
  return 0;
}

/* ---- ls, rm, gc --------------------------------------------------------------------------------- */

static char **list_pools(int pools) {
  char **v = NULL;
  DIR *d = agsx_dir_stream(pools);
  struct dirent *de;
  while (d && (de = readdir(d)))
    if (de->d_name[0] != '.' && agsx_pool_name_is_valid(de->d_name))
      agsx_strv_push(&v, de->d_name);
  if (d)
    closedir(d);
  return v ? v : agsx_strv_concat(NULL, NULL);
}

static int cmp_info(const void *a, const void *b) {
  return strcmp(((const struct agsx_pool_info *)a)->config.name,
                ((const struct agsx_pool_info *)b)->config.name);
}

int agsx_pool_list(const char *state, struct agsx_pool_info **ret, size_t *ret_n,
                   agsx_error_t *err) {
  *ret = NULL;
  *ret_n = 0;
  _cleanup_close_ int pools = open_pools(state, false, err);
  if (pools < 0) {
    if (agsx_error_errno(err) != ENOENT)
      return -1;
    agsx_error_free(err);
    return 0;
  }
  _cleanup_close_ int statefd = agsx_state_open(state, false, err);
  if (statefd < 0)
    return -1;
  _cleanup_strv_ char **names = list_pools(pools);
  struct agsx_pool_info *v = xzalloc((agsx_strv_len(names) + 1) * sizeof(*v));
  size_t n = 0;
  for (size_t i = 0; names[i]; i++) {
    _cleanup_close_ int dir =
        openat(pools, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    agsx_error_t e = NULL;
    if (dir < 0 || read_config_at(dir, names[i], &v[n].config, &e) < 0) {
      agsx_error_free(&e); /* being created or removed */
      continue;
    }
    _cleanup_close_ int parked = openat(dir, PARKED, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    v[n].parked = parked < 0 ? 0 : count_live(statefd, parked, true);
    n++;
  }
  qsort(v, n, sizeof(*v), cmp_info);
  *ret = v;
  *ret_n = n;
  return 0;
}

void agsx_pool_list_free(struct agsx_pool_info *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    agsx_pool_config_clear(&v[i].config);
  free(v);
}

/* Stops every entry's sandbox and waits for them. */
static int stop_entries(int statefd, int parked, agsx_error_t *err) {
  _cleanup_strv_ char **ids = agsx_pool_list_entries(parked);
  size_t n = agsx_strv_len(ids), k = 0;
  struct agsx_stopping *v = xzalloc((n + 1) * sizeof(*v));
  for (size_t i = 0; i < n; i++) {
    agsx_error_t e = NULL;
    int pidfd = -1;
    if (agsx_control_request_stop(statefd, ids[i], &pidfd, &e) == 0 && pidfd >= 0) {
      v[k].pidfd = pidfd;
      snprintf(v[k].id, sizeof(v[k].id), "%s", ids[i]);
      k++;
    }
    agsx_error_free(&e);
  }
  int r = k ? agsx_control_wait_stopped(statefd, v, k, NULL, err) : 0;
  for (size_t i = 0; i < k; i++)
    agsx_closep(&v[i].pidfd);
  free(v);
  for (size_t i = 0; i < n; i++)
    unlinkat(parked, ids[i], 0);
  return r;
}

static int remove_at(int statefd, int pools, const char *name, agsx_error_t *err) {
  _cleanup_close_ int dir = openat(pools, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir < 0)
    return agsx_error_set_quiet(err, errno, errno == ENOENT ? "no such pool `%s`" : "pool `%s`",
                                name);
  /* No refill starts a sandbox once pool.json is gone (checked under the
   * lock); the lock waits for one under way. */
  if (unlinkat(dir, POOL_JSON, 0) < 0 && errno != ENOENT)
    return agsx_error_set(err, errno, "pool `%s`", name);
  _cleanup_close_ int lock = agsx_lock_at(dir, POOL_LOCK, true, err);
  if (lock < 0)
    return -1;
  _cleanup_close_ int parked = openat(dir, PARKED, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (parked >= 0 && stop_entries(statefd, parked, err) < 0)
    return agsx_error_wrap(err, "pool `%s`", name);
  return agsx_rm_rf_at(pools, name, err);
}

int agsx_pool_remove(const char *state, const char *name, agsx_error_t *err) {
  if (!agsx_pool_name_is_valid(name))
    return agsx_error_set(err, EINVAL, "invalid pool name `%s`", name);
  _cleanup_close_ int pools = open_pools(state, false, err);
  if (pools < 0) {
    if (agsx_error_errno(err) == ENOENT) {
      agsx_error_free(err);
      return agsx_error_set_quiet(err, ENOENT, "no such pool `%s`", name);
    }
    return -1;
  }
  _cleanup_close_ int statefd = agsx_state_open(state, false, err);
  if (statefd < 0)
    return -1;
  if (remove_at(statefd, pools, name, err) < 0)
    return -1;
  unlinkat(statefd, AGSX_POOL_DIR, AT_REMOVEDIR); /* the last pool's: nothing stays */
  return 0;
}

/* Parked sandboxes whose pool is gone (a crash between rm's steps). */
static void gc_orphans(int statefd, int pools, bool dry_run,
                       void (*report)(const char *what, void *data), void *data) {
  struct agsx_record *v = NULL;
  size_t n = agsx_state_load(statefd, 0, &v);
  for (size_t i = 0; i < n; i++) {
    if (v[i].status == AGSX_STATUS_RUNNING && v[i].parked && v[i].pool &&
        agsx_pool_name_is_valid(v[i].pool) && faccessat(pools, v[i].pool, F_OK, 0) < 0) {
      _cleanup_free_ char *what =
          xasprintf("parked sandbox %.12s of removed pool %s", v[i].id, v[i].pool);
      report(what, data);
      agsx_error_t e = NULL;
      int pidfd = -1;
      if (!dry_run && agsx_control_request_stop(statefd, v[i].id, &pidfd, &e) == 0)
        agsx_closep(&pidfd);
      agsx_error_free(&e);
    }
    agsx_record_clear(&v[i]);
  }
  free(v);
}

void agsx_pool_gc(const char *state, bool dry_run, void (*report)(const char *what, void *data),
                  void *data) {
  agsx_error_t err = NULL;
  _cleanup_close_ int pools = open_pools(state, false, &err);
  _cleanup_close_ int statefd = pools < 0 ? -1 : agsx_state_open(state, false, &err);
  agsx_error_free(&err);
  if (statefd < 0)
    return;
  _cleanup_strv_ char **names = list_pools(pools);
  for (size_t i = 0; names[i]; i++) {
    _cleanup_close_ int dir =
        openat(pools, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir < 0)
      continue;
    if (faccessat(dir, POOL_JSON, F_OK, 0) < 0) {
      /* A create or an rm that crashed (a create under way holds the lock). */
      _cleanup_close_ int lock = openat(dir, POOL_LOCK, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
      struct stat st;
      if ((lock >= 0 && flock(lock, LOCK_EX | LOCK_NB) < 0) ||
          (fstat(dir, &st) == 0 &&
           st.st_mtime > agsx_now_ns() / 1000000000LL - agsx_state_gc_min_age()))
        continue;
      _cleanup_free_ char *what = xasprintf("pool %s (a crashed create or rm)", names[i]);
      report(what, data);
      if (!dry_run && remove_at(statefd, pools, names[i], &err) < 0)
        agsx_error_free(&err);
      continue;
    }
    _cleanup_close_ int parked = openat(dir, PARKED, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    _cleanup_strv_ char **before = parked < 0 ? NULL : agsx_pool_list_entries(parked);
    if (parked >= 0)
      count_live(statefd, parked, dry_run);
    _cleanup_strv_ char **after = parked < 0 ? NULL : agsx_pool_list_entries(parked);
    for (size_t k = 0; before && before[k]; k++)
      if (!agsx_strv_contains(after, before[k]) || dry_run) {
        if (dry_run && entry_alive(statefd, before[k]))
          continue;
        _cleanup_free_ char *what = xasprintf("stale entry %.12s of pool %s", before[k], names[i]);
        report(what, data);
      }
  }
  gc_orphans(statefd, pools, dry_run, report, data);
}
