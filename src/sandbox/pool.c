/* agsx — sandbox: warm pools (see pool.h): the configuration, fills and
 * refills, claims (both sides), rm and gc. */
#include "config.h"

#include "sandbox/pool.h"
#include "image/store.h"
#include "net/egress.h"
#include "sandbox/sync.h"
#include "sandbox/control.h"
#include "sandbox/supervisor.h"
#include "state/state.h"
#include "util/json.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define POOL_JSON "pool.json"
#define POOL_LOCK "lock"
#define PARKED "parked"
#define CLAIM_SOCKET "claim"
#define CLAIM_MAGIC "AGSXCLAIM1"
#define CLAIM_REPLY_MS 60000 /* a claim's exec on a loaded machine */
#define CLAIM_REQUEST_MS 2000
/* A claim's refill waits this long, or for the command's end if that comes
 * first: the refiller's fork (and the wait for its first child) is then
 * not between a quick command's end and its answer. */
#define REFILL_DEFER_NS (10 * 1000000LL)

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
        (struct agsx_bind){xstrdup(src), xstrdup(dst), ro && YAJL_IS_TRUE(ro)};
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

/* STATE/pools/NAME; ENOENT "no such pool". */
static int open_pool(const char *state, const char *name, agsx_error_t *err) {
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
  _cleanup_close_ int pooldir = open_pool(state, name, err);
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
  else if (s->seccomp && !same_str(s->seccomp, pc->seccomp, ""))
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

/* The ids of PARKED's entries (at most AGSX_POOL_MAX_SIZE * 2). */
static char **list_entries(int parked) {
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
  _cleanup_strv_ char **ids = list_entries(parked);
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
  _cleanup_close_ int pooldir = open_pool(state, name, err);
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
    for (int sig = 1; sig < NSIG; sig++)
      if (sig != SIGKILL && sig != SIGSTOP)
        signal(sig, SIG_DFL);
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

/* The manifest digest IMAGE resolves to now ("" for the host image), or
 * NULL (ERR: why). */
static char *resolve_digest(const char *root, const char *image, agsx_error_t *err) {
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
  _cleanup_free_ char *digest = resolve_digest(s->root, s->image, err);
  if (digest == NULL && agsx_error_errno(err) == ENOENT && s->pull_image) {
    agsx_error_free(err);
    if (s->pull_image(s->pull_data, s->image, err) < 0)
      return -1;
    digest = resolve_digest(s->root, s->image, err);
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
      .env = s->env ? agsx_strv_concat(s->env, NULL) : NULL,
      .user = s->user ? xstrdup(s->user) : NULL,
      .workdir = s->workdir ? xstrdup(s->workdir) : NULL,
      .created = agsx_now_ns() / 1000000000LL,
  };
  pc.binds = s->n_binds ? xzalloc(s->n_binds * sizeof(*pc.binds)) : NULL;
  for (size_t i = 0; i < s->n_binds; i++)
    pc.binds[pc.n_binds++] =
        (struct agsx_bind){xstrdup(s->binds[i].src), xstrdup(s->binds[i].dst), s->binds[i].ro};
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
  _cleanup_strv_ char **ids = list_entries(parked);
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
    _cleanup_strv_ char **before = parked < 0 ? NULL : list_entries(parked);
    if (parked >= 0)
      count_live(statefd, parked, dry_run);
    _cleanup_strv_ char **after = parked < 0 ? NULL : list_entries(parked);
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

/* ---- the claim's wire form ---------------------------------------------------------------------- */

struct wbuf {
  char *b;
  size_t len, cap;
  bool over;
};

static void put_str(struct wbuf *w, const char *s) {
  size_t n = strlen(s ? s : "") + 1;
  if (w->len + n > AGSX_CLAIM_MAX) {
    w->over = true;
    return;
  }
  if (w->len + n > w->cap) {
    w->cap = (w->len + n) * 2;
    w->b = xrealloc(w->b, w->cap);
  }
  memcpy(w->b + w->len, s ? s : "", n);
  w->len += n;
}

static void put_strv(struct wbuf *w, char *const *v) {
  char num[24];
  snprintf(num, sizeof(num), "%zu", agsx_strv_len(v));
  put_str(w, num);
  for (size_t i = 0; v && v[i]; i++)
    put_str(w, v[i]);
}

char *agsx_claim_encode(const struct agsx_claim *c, size_t *ret_len, agsx_error_t *err) {
  struct wbuf w = {0};
  char num[24];
  put_str(&w, CLAIM_MAGIC);
  char flags[4], *fl = flags;
  if (c->detach)
    *fl++ = 'd';
  if (c->rm)
    *fl++ = 'r';
  if (c->idle)
    *fl++ = 'i';
  *fl = '\0';
  put_str(&w, flags);
  snprintf(num, sizeof(num), "%llu", (unsigned long long)c->timeout);
  put_str(&w, num);
  put_str(&w, c->name);
  put_str(&w, c->hostname);
  put_str(&w, c->cwd);
  put_str(&w, c->user);
  put_strv(&w, c->argv);
  put_strv(&w, c->env);
  put_strv(&w, c->labels);
  if (w.over || agsx_strv_len(c->argv) > AGSX_CONTROL_ARGS_MAX ||
      agsx_strv_len(c->env) > AGSX_CONTROL_ARGS_MAX) {
    free(w.b);
    agsx_error_set(err, E2BIG, "the command, environment and labels exceed %u KiB",
                   AGSX_CLAIM_MAX >> 10);
    return NULL;
  }
  *ret_len = w.len;
  return w.b;
}

struct rbuf {
  const char *b;
  size_t len, at;
};

static const char *get_str(struct rbuf *r) {
  if (r->at >= r->len)
    return NULL;
  const char *s = r->b + r->at;
  const char *nul = memchr(s, '\0', r->len - r->at);
  if (nul == NULL)
    return NULL;
  r->at += (size_t)(nul - s) + 1;
  return s;
}

static char *get_opt(struct rbuf *r, bool *bad) {
  const char *s = get_str(r);
  if (s == NULL)
    *bad = true;
  return s && *s ? xstrdup(s) : NULL;
}

static char **get_strv(struct rbuf *r, bool *bad) {
  const char *num = get_str(r);
  char *end;
  unsigned long n = num ? strtoul(num, &end, 10) : 0;
  if (num == NULL || *num == '\0' || *end || n > AGSX_CONTROL_ARGS_MAX) {
    *bad = true;
    return NULL;
  }
  char **v = xzalloc((n + 1) * sizeof(char *));
  for (size_t i = 0; i < n; i++) {
    const char *s = get_str(r);
    if (s == NULL) {
      *bad = true;
      return v;
    }
    v[i] = xstrdup(s);
  }
  return v;
}

void agsx_claim_clear(struct agsx_claim *c) {
  agsx_strv_free(c->argv);
  agsx_strv_free(c->env);
  agsx_strv_free(c->labels);
  free(c->cwd);
  free(c->user);
  free(c->name);
  free(c->hostname);
  memset(c, 0, sizeof(*c));
}

int agsx_claim_decode(const char *buf, size_t len, struct agsx_claim *c, agsx_error_t *err) {
  memset(c, 0, sizeof(*c));
  struct rbuf r = {buf, len, 0};
  bool bad = false;
  const char *magic = get_str(&r), *flags = get_str(&r), *timeout = get_str(&r);
  if (magic == NULL || strcmp(magic, CLAIM_MAGIC) != 0 || flags == NULL || timeout == NULL)
    return agsx_error_set(err, EBADMSG, "not a claim");
  for (const char *f = flags; *f; f++)
    if (*f == 'd')
      c->detach = true;
    else if (*f == 'r')
      c->rm = true;
    else if (*f == 'i')
      c->idle = true;
    else
      bad = true;
  char *end;
  errno = 0;
  unsigned long long t = strtoull(timeout, &end, 10);
  if (errno || *end || *timeout == '\0' || t > AGSX_DURATION_MAX_SEC)
    bad = true;
  c->timeout = t;
  c->name = get_opt(&r, &bad);
  c->hostname = get_opt(&r, &bad);
  c->cwd = get_opt(&r, &bad);
  c->user = get_opt(&r, &bad);
  if (!bad)
    c->argv = get_strv(&r, &bad);
  if (!bad)
    c->env = get_strv(&r, &bad);
  if (!bad)
    c->labels = get_strv(&r, &bad);
  if (!bad && r.at != r.len)
    bad = true;
  if (!bad && c->idle && (!c->detach || agsx_strv_len(c->argv)))
    bad = true; /* an idle sandbox has no command and no claimer's stdio */
  if (!bad &&
      ((c->name && !agsx_name_is_valid(c->name)) ||
       (c->hostname && !agsx_hostname_is_valid(c->hostname)) || (c->cwd && c->cwd[0] != '/')))
    bad = true;
  if (bad) {
    agsx_claim_clear(c);
    return agsx_error_set(err, EBADMSG, "malformed claim");
  }
  return 0;
}

/* ---- the claimer ---------------------------------------------------------------------------------- */

static void claim_addr(int dirfd, struct sockaddr_un *a) {
  memset(a, 0, sizeof(*a));
  a->sun_family = AF_UNIX;
  snprintf(a->sun_path, sizeof(a->sun_path), "/proc/self/fd/%d/%s", dirfd, CLAIM_SOCKET);
}

/* The connection to parked sandbox ID's claim socket, or -1. */
static int connect_claim(int statefd, const char *id) {
  _cleanup_close_ int dir = openat(statefd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir < 0)
    return -1;
  _cleanup_close_ int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  struct sockaddr_un a;
  claim_addr(dir, &a);
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
    return -1;
  return steal_fd(&fd);
}

/* One attempt on entry ID (locked by us): 1 claimed, 0 try another, -1 the
 * claim failed (ERR, *RET_CODE). */
static int claim_one(int statefd, const char *id, const char *req, size_t len, const int fds[3],
                     bool detach, struct agsx_pool_claimed *ret, int *ret_code, agsx_error_t *err) {
  /* Stamped before the connect: the supervisor may accept before we send,
   * and its "accept to exec" must lie within our "request to answer". */
  ret->sent_ns = agsx_mono_ns();
  _cleanup_close_ int conn = connect_claim(statefd, id);
  if (conn < 0)
    return -2; /* its supervisor is gone */
  if (agsx_send_fds(conn, req, len, fds, fds ? 3 : 0) < 0)
    return 0;
  struct pollfd p = {.fd = conn, .events = POLLIN};
  if (poll(&p, 1, CLAIM_REPLY_MS) <= 0)
    return 0;
  struct agsx_msg m;
  ssize_t n = agsx_msg_recv(conn, &m, NULL, 0, NULL);
  if (n <= 0)
    return 0; /* the supervisor died during the claim */
  if (m.type == AGSX_CLAIM_FAIL) {
    *ret_code = m.code ? m.code : 125;
    return agsx_error_set_quiet(err, m.err, "%s", m.text);
  }
  if (m.type != AGSX_CLAIM_OK)
    return 0;
  ret->answered_ns = agsx_mono_ns();
  ret->supervisor_us = m.status > 0 ? m.status : 0;
  ret->exec_ns = m.phase_ns[0] > 0 ? m.phase_ns[0] : 0;
  snprintf(ret->id, sizeof(ret->id), "%.32s", m.text);
  ret->conn = detach ? -1 : steal_fd(&conn);
  return 1;
}

/* Whether entry FD (locked) runs DIGEST ("": the host image's). */
static bool entry_digest_is(int fd, const char *digest) {
  char buf[128];
  ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  if (n < 0 || digest == NULL)
    return false;
  buf[n] = '\0';
  return strcmp(buf, digest) == 0;
}

/* The signals an attached claimer forwards to the command. */
static void claim_signals(sigset_t *set) {
  static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
  sigemptyset(set);
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(sigs); i++)
    sigaddset(set, sigs[i]);
}

static int claim(const char *root, const char *state, const struct agsx_pool_config *pc,
                 const struct agsx_claim *cl, const int fds[3], bool *ret_claimed,
                 struct agsx_pool_claimed *ret, int *ret_code, agsx_error_t *err);

int agsx_pool_claim(const char *root, const char *state, const struct agsx_pool_config *pc,
                    const struct agsx_claim *cl, const int fds[3], bool *ret_claimed,
                    struct agsx_pool_claimed *ret, int *ret_code, agsx_error_t *err) {
  /* Attached, the command may run (and a ^C come) before the answer does:
   * from the claim on, the signals wait for agsx_pool_claim_wait. */
  sigset_t set, old;
  claim_signals(&set);
  if (fds)
    sigprocmask(SIG_BLOCK, &set, &old);
  int r = claim(root, state, pc, cl, fds, ret_claimed, ret, ret_code, err);
  if (fds && !(r == 0 && *ret_claimed))
    sigprocmask(SIG_SETMASK, &old, NULL);
  return r;
}

static int claim(const char *root, const char *state, const struct agsx_pool_config *pc,
                 const struct agsx_claim *cl, const int fds[3], bool *ret_claimed,
                 struct agsx_pool_claimed *ret, int *ret_code, agsx_error_t *err) {
  *ret_claimed = false;
  *ret_code = 125;
  memset(ret, 0, sizeof(*ret));
  ret->conn = -1;
  size_t len;
  _cleanup_free_ char *req = agsx_claim_encode(cl, &len, err);
  if (req == NULL)
    return -1;
  _cleanup_close_ int pooldir = open_pool(state, pc->name, err);
  if (pooldir < 0)
    return -1;
  _cleanup_close_ int statefd = agsx_state_open(state, false, err);
  _cleanup_close_ int parked =
      openat(pooldir, PARKED, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (statefd < 0 || parked < 0) {
    agsx_error_free(err);
    return 0;
  }
  /* A parked sandbox runs the image its tag named when it started: one
   * whose image was removed or re-tagged since is not handed out. */
  agsx_error_t e = NULL;
  _cleanup_free_ char *digest = resolve_digest(root, pc->image, &e);
  agsx_error_free(&e);
  _cleanup_strv_ char **ids = list_entries(parked);
  size_t n = agsx_strv_len(ids);
  uint32_t start = 0;
  if (n > 1 && getrandom(&start, sizeof(start), GRND_NONBLOCK) < 0)
    start = (uint32_t)getpid();
  for (size_t k = 0; k < n; k++) {
    const char *id = ids[(start + k) % n];
    _cleanup_close_ int fd = openat(parked, id, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0 || fstat(fd, &st) < 0 || st.st_nlink == 0)
      continue;
    if (!entry_digest_is(fd, digest)) {
      /* Stopped: its supervisor then starts one of the current image. */
      int pidfd = -1;
      if (agsx_control_request_stop(statefd, id, &pidfd, &e) == 0)
        agsx_closep(&pidfd);
      agsx_error_free(&e);
      unlinkat(parked, id, 0);
      continue;
    }
    int r = claim_one(statefd, id, req, len, fds, cl->detach, ret, ret_code, err);
    if (r == -2) {
      unlinkat(parked, id, 0); /* gc reaps its record */
      continue;
    }
    if (r == 0)
      continue;
    *ret_claimed = true;
    return r < 0 ? -1 : 0;
  }
  return 0;
}

int agsx_pool_claim_wait(int conn, struct agsx_output out[2], struct agsx_claim_end *ret,
                         agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  ret->exit_code = 125;
  sigset_t set;
  claim_signals(&set);
  sigprocmask(SIG_BLOCK, &set, NULL);
  _cleanup_close_ int sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  int r = 1;
  while (r > 0) {
    struct pollfd p[4] = {{.fd = conn, .events = POLLIN},
                          {.fd = sigfd, .events = POLLIN},
                          {.fd = out ? out[0].fd : -1, .events = POLLIN},
                          {.fd = out ? out[1].fd : -1, .events = POLLIN}};
    if (poll(p, 4, -1) < 0) {
      if (errno == EINTR)
        continue;
      r = agsx_error_set(err, errno, "poll");
      break;
    }
    for (int i = 0; i < 2 && out; i++)
      if (p[2 + i].revents)
        agsx_output_read(&out[i]);
    struct signalfd_siginfo si;
    if (p[1].revents && read(sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
      struct agsx_msg m = {.type = AGSX_CLAIM_SIGNAL, .code = (int)si.ssi_signo};
      agsx_msg_send(conn, &m, NULL, 0);
    }
    if (!p[0].revents)
      continue;
    struct agsx_msg m;
    ssize_t n = agsx_msg_recv(conn, &m, NULL, 0, NULL);
    if (n <= 0 || m.type != AGSX_CLAIM_END) {
      r = agsx_error_set(err, n < 0 ? (int)-n : ESRCH,
                         "the sandbox's supervisor ended without telling how its command ended");
      break;
    }
    ret->exit_code = m.code;
    ret->signal = m.status;
    snprintf(ret->stop_reason, sizeof(ret->stop_reason), "%s",
             agsx_stop_reason_name((enum agsx_stop_reason)m.err));
    ret->error = m.text[0] ? xstrdup(m.text) : NULL;
    r = 0;
  }
  for (int i = 0; i < 2 && out; i++)
    while (out[i].fd >= 0 && !agsx_output_drain(&out[i])) {
      struct pollfd p = {.fd = out[i].fd, .events = POLLIN};
      if (poll(&p, 1, 5000) <= 0)
        break;
    }
  close(conn);
  return r;
}

/* ---- the supervisor's side -------------------------------------------------------------------------- */

struct agsx_pool_sup {
  char *name;
  int pooldir, parked, listen_fd, conn;
  int utsfd; /* the supervisor's own UTS namespace (set_hostname comes back to it) */
  bool claimed;
  bool record_due;   /* attached: the claim's record is still to be written (settle_record) */
  bool ended;        /* the command's end is known, the supervisor's loop ended without error */
  int64_t refill_at; /* monotonic ns of the claim's deferred refill; 0: none */
  int64_t accepted_ns, exec_ns; /* the claim's connection accepted; its command's exec */
  struct agsx_claim claim;      /* what the sandbox now runs (owned: the spec points in) */
};

static void ps_free(struct agsx_pool_sup *ps) {
  if (ps == NULL)
    return;
  free(ps->name);
  agsx_closep(&ps->pooldir);
  agsx_closep(&ps->parked);
  agsx_closep(&ps->listen_fd);
  agsx_closep(&ps->conn);
  agsx_closep(&ps->utsfd);
  agsx_claim_clear(&ps->claim);
  free(ps);
}

void agsx_pool_sup_free(struct sup *f) {
  ps_free(f->pool);
  f->pool = NULL;
}

static int listen_claims(struct sup *f, struct agsx_pool_sup *ps, agsx_error_t *err) {
  ps->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (ps->listen_fd < 0)
    return agsx_error_set(err, errno, "claim socket");
  struct sockaddr_un a;
  claim_addr(f->sb->dirfd, &a);
  unlinkat(f->sb->dirfd, CLAIM_SOCKET, 0);
  mode_t old = umask(0177);
  int r = bind(ps->listen_fd, (struct sockaddr *)&a, sizeof(a));
  umask(old);
  if (r < 0 || listen(ps->listen_fd, 64) < 0)
    return agsx_error_set(err, errno, "claim socket");
  return 0;
}

/* parked/<id>, holding the manifest digest, made whole then renamed in. */
static int register_entry(struct sup *f, struct agsx_pool_sup *ps, agsx_error_t *err) {
  const char *id = f->sb->id;
  const char *digest = f->p->info.img.manifest.digest;
  if (faccessat(ps->pooldir, POOL_JSON, F_OK, 0) < 0)
    return agsx_error_set(err, ENOENT, "pool `%s` was removed", ps->name);
  _cleanup_free_ char *tmp = xasprintf(".%s.tmp", id);
  _cleanup_close_ int fd =
      openat(ps->parked, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0 || agsx_write_all(fd, digest ? digest : "", strlen(digest ? digest : "")) < 0 ||
      renameat(ps->parked, tmp, ps->parked, id) < 0) {
    int e = errno;
    unlinkat(ps->parked, tmp, 0);
    return agsx_error_set(err, e, "pool `%s`: register the sandbox", ps->name);
  }
  return 0;
}

static void on_dead(void *data);

int agsx_pool_sup_park(struct sup *f, agsx_error_t *err) {
  if (f->o->pool == NULL)
    return 0;
  /* Until claimed, its record is the pool's: it goes when the sandbox
   * ends (the claim sets the claimer's --rm). */
  ((struct agsx_run_spec *)f->o)->rm = true;
  struct agsx_pool_sup *ps = f->pool = xzalloc(sizeof(*ps));
  ps->pooldir = ps->parked = ps->listen_fd = ps->conn = -1;
  ps->name = xstrdup(f->o->pool);
  ps->utsfd = open("/proc/thread-self/ns/uts", O_RDONLY | O_CLOEXEC);
  if (ps->utsfd < 0)
    return agsx_error_set(err, errno, "open /proc/thread-self/ns/uts");
  ps->pooldir = open_pool(f->o->state, ps->name, err);
  if (ps->pooldir < 0)
    return -1;
  ps->parked = openat(ps->pooldir, PARKED, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (ps->parked < 0)
    return agsx_error_set(err, errno, "pool `%s`", ps->name);
  if (listen_claims(f, ps, err) < 0)
    return -1;
  f->sb->on_dead = on_dead;
  f->sb->on_dead_data = f;
  return register_entry(f, ps, err);
}

bool agsx_pool_sup_claimed(const struct sup *f) { return f->pool && f->pool->claimed; }

size_t agsx_pool_sup_nfds(const struct sup *f) { return f->pool ? 2 : 0; }

size_t agsx_pool_sup_fill(struct sup *f, struct pollfd *p) {
  struct agsx_pool_sup *ps = f->pool;
  if (ps == NULL)
    return 0;
  p[0] = (struct pollfd){.fd = ps->claimed ? -1 : ps->listen_fd, .events = POLLIN};
  p[1] = (struct pollfd){.fd = ps->conn, .events = POLLIN};
  return 2;
}

static void reply(int fd, int type, int code, int e, const char *text) {
  struct agsx_msg m = {.type = type, .code = code, .err = e};
  snprintf(m.text, sizeof(m.text), "%s", text ? text : "");
  agsx_msg_send(fd, &m, NULL, 0);
}

static bool peer_allowed(int fd) {
  struct ucred c;
  socklen_t len = sizeof(c);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &len) < 0)
    return false;
  return c.uid == 0 || c.uid == geteuid();
}

/* The request: the claim and 0 or 3 fds (FDS; more are closed). */
static ssize_t recv_request(int fd, char *buf, size_t cap, int fds[3], size_t *ret_nfds) {
  *ret_nfds = 0;
  struct pollfd p = {.fd = fd, .events = POLLIN};
  if (poll(&p, 1, CLAIM_REQUEST_MS) <= 0)
    return -1;
  int flags = 0;
  ssize_t n = agsx_recv_fds(fd, buf, cap, MSG_DONTWAIT, fds, 3, ret_nfds, &flags);
  if (n > 0 && (flags & (MSG_TRUNC | MSG_CTRUNC)))
    return -1;
  return n;
}

/* The sandbox's command line: the image's Entrypoint, then the claim's
 * command or the image's Cmd (as build_config does for a start; the host
 * image's default is /bin/sh). */
static char **claim_argv(struct sup *f, const struct agsx_claim *c) {
  const struct agsx_image_config *ic = &f->p->info.config;
  if (f->cfg->host_image && agsx_strv_len(c->argv) == 0)
    return agsx_strv_concat((char *[]){"/bin/sh", NULL}, NULL);
  return agsx_strv_concat(ic->entrypoint, agsx_strv_len(c->argv) ? c->argv : ic->cmd);
}

/* The record as the claimed sandbox's: a fresh run's, started now. */
static void record_claim(struct sup *f, const struct agsx_claim *c, const char *hostname) {
  agsx_error_t err = NULL;
  struct agsx_sandbox *sb = f->sb;
  _cleanup_close_ int lock = agsx_record_lock(sb->statefd, sb->id, &err);
  struct agsx_record r;
  if (lock < 0 || agsx_record_read(sb->statefd, sb->id, &r, &err) < 0) {
    agsx_warn("sandbox %.12s: claim: %s", sb->id, err->msg);
    agsx_error_free(&err);
    return;
  }
  free(r.name);
  r.name = c->name ? xstrdup(c->name) : NULL;
  agsx_strv_free(r.argv);
  r.argv = agsx_strv_concat(c->argv, NULL);
  agsx_strv_free(r.env);
  r.env = agsx_strv_concat(c->env, NULL);
  free(r.user);
  r.user = c->user ? xstrdup(c->user) : NULL;
  free(r.cwd);
  r.cwd = xstrdup(c->cwd ? c->cwd : "/");
  if (hostname) {
    free(r.hostname);
    r.hostname = xstrdup(hostname);
  }
  if (c->labels && *c->labels) {
    agsx_strv_free(r.labels);
    r.labels = agsx_strv_concat(c->labels, NULL);
  }
  r.rm = c->rm;
  r.idle = c->idle;
  r.parked = false;
  r.timeout = f->o->timeout;
  r.deadline = f->deadline;
  r.deadline_ns = f->deadline_ns;
  r.started = agsx_now_ns() / 1000000000LL;
  if (agsx_record_write(sb->statefd, &r, &err) < 0) {
    agsx_warn("sandbox %.12s: claim: %s", sb->id, err->msg);
    agsx_error_free(&err);
  }
  agsx_record_clear(&r);
}

/* The claim's host name, set from here in the sandbox's UTS namespace
 * (entered through the init's pidfd; the supervisor then returns to its
 * own): the parked command may run under agsx's filter already, which
 * denies sethostname (init.c, prepare_parked). Nothing is opened or
 * resolved meanwhile. Not coming back is an error: the claim fails, and
 * the supervisor does nothing that reads its host name before it ends. */
static int set_hostname(struct agsx_pool_sup *ps, int pidfd, const char *name, agsx_error_t *err) {
  if (setns(pidfd, CLONE_NEWUTS) < 0)
    return agsx_error_set(err, errno, "enter the sandbox's UTS namespace");
  int r = sethostname(name, strlen(name)) < 0 ? -errno : 0;
  if (setns(ps->utsfd, CLONE_NEWUTS) < 0)
    return agsx_error_set(err, errno, "return to the supervisor's UTS namespace");
  return r < 0 ? agsx_error_set(err, -r, "set the hostname") : 0;
}

/* Takes the claim C (FDS: the claimer's stdio, or none): 0 claimed, -1
 * refused (still parked: *RET_PARKED) or failed (ERR, *RET_CODE). */
static int take_claim(struct sup *f, struct agsx_claim *c, const int *fds, bool *ret_parked,
                      int *ret_code, agsx_error_t *err) {
  struct agsx_pool_sup *ps = f->pool;
  struct agsx_sandbox *sb = f->sb;
  struct agsx_run_spec *o = (struct agsx_run_spec *)f->o; /* the supervisor's own copy */
  *ret_parked = true;
  *ret_code = 125;
  _cleanup_strv_ char **argv = c->idle ? agsx_strv_concat(NULL, NULL) : claim_argv(f, c);
  if (agsx_strv_len(argv) == 0 && !c->idle)
    return agsx_error_set(err, 0, "no command given and the image has no Cmd or Entrypoint");
  if (c->labels && agsx_labels_check(c->labels, err) < 0)
    return -1;
  if (c->name && agsx_name_claim(sb->statefd, c->name, sb->id, err) < 0)
    return -1;
  if (c->name)
    sb->name = xstrdup(c->name);
  /* Out of the pool: no other claimer can take it from here on. */
  *ret_parked = false;
  ps->claimed = true;
  unlinkat(ps->parked, sb->id, 0);
  agsx_closep(&ps->listen_fd);
  unlinkat(sb->dirfd, CLAIM_SOCKET, 0);
  /* The environment, user and directory as a start computes them. */
  struct agsx_claim to_init = {
      .argv = argv,
      .env = agsx_strv_concat(f->cfg->env, c->env),
      .cwd = c->cwd ? c->cwd : (char *)f->cfg->cwd,
      .user = c->user ? c->user : (char *)f->cfg->user,
      .hostname = c->hostname ? c->hostname : c->name,
      .idle = c->idle,
      .detach = c->idle,
  };
  size_t len;
  _cleanup_free_ char *buf = agsx_claim_encode(&to_init, &len, err);
  int r = buf ? 0 : -1;
  if (r == 0 && to_init.hostname && *to_init.hostname)
    r = set_hostname(ps, sb->pidfd, to_init.hostname, err);
  if (r < 0)
    agsx_sandbox_kill(sb); /* the command never got its claim: it must not wait on */
  else
    r = agsx_sandbox_claim(sb, buf, len, fds, err);
  ps->exec_ns = agsx_mono_ns();
  /* What the record and the end tell: the claim as run. */
  agsx_strv_free(c->argv);
  c->argv = steal_ptr(&argv);
  agsx_strv_free(c->env);
  c->env = to_init.env;
  if (c->cwd == NULL && to_init.cwd)
    c->cwd = xstrdup(to_init.cwd);
  if (c->user == NULL && to_init.user)
    c->user = xstrdup(to_init.user);
  o->name = c->name;
  o->rm = c->rm;
  o->idle = c->idle;
  f->cfg->idle = c->idle;
  o->timeout = c->timeout ? c->timeout : AGSX_DEFAULT_TIMEOUT_SEC;
  if (r < 0) {
    *ret_code = sb->exit_code;
    f->recorded = false; /* as a start that failed: no record stays */
    return -1;
  }
  f->deadline_ns = agsx_now_ns() + (int64_t)o->timeout * 1000000000LL;
  f->deadline = (f->deadline_ns + 500000000LL) / 1000000000LL;
  agsx_sup_arm_deadline(f);
  /* Detached, the record is the claimer's answer (it may exec into the
   * sandbox at once); attached, it follows the answer (on_claim). */
  if (c->detach)
    record_claim(f, c, to_init.hostname);
  return 0;
}

static void on_claim(struct sup *f, int fd) {
  struct agsx_pool_sup *ps = f->pool;
  agsx_error_t err = NULL;
  int fds[3] = {-1, -1, -1};
  size_t nfds = 0;
  _cleanup_free_ char *buf = xmalloc(AGSX_CLAIM_MAX);
  ssize_t n = recv_request(fd, buf, AGSX_CLAIM_MAX, fds, &nfds);
  struct agsx_claim c;
  bool parked = true;
  int code = 125;
  if (n <= 0) {
    /* The claimer died before its claim: still parked. */
  } else if (nfds != 0 && nfds != 3) {
    reply(fd, AGSX_CLAIM_FAIL, 125, EINVAL, "a claim passes 0 or 3 fds");
  } else if (agsx_claim_decode(buf, (size_t)n, &c, &err) < 0) {
    reply(fd, AGSX_CLAIM_FAIL, 125, err->errno_, err->msg);
  } else if (take_claim(f, &c, nfds ? fds : NULL, &parked, &code, &err) < 0) {
    reply(fd, AGSX_CLAIM_FAIL, code, err ? err->errno_ : EIO, err ? err->msg : "claim failed");
    if (parked)
      agsx_claim_clear(&c);
    else
      ps->claim = c; /* the spec points into it */
  } else {
    ps->claim = c;
    struct agsx_msg m = {.type = AGSX_CLAIM_OK,
                         .status = (int)((ps->exec_ns - ps->accepted_ns) / 1000)};
    m.phase_ns[0] = f->sb->child_ns[4]; /* the init's stamp of the command's exec */
    snprintf(m.text, sizeof(m.text), "%s", f->sb->id);
    agsx_msg_send(fd, &m, NULL, 0); /* status: the claimer's --timing */
    if (!c.detach) {
      ps->conn = fcntl(fd, F_DUPFD_CLOEXEC, 3);
      ps->record_due = true; /* settle_record, after any event already pending */
    }
  }
  for (size_t i = 0; i < nfds; i++)
    close(fds[i]); /* the init has them */
  agsx_error_free(&err);
  close(fd);
  if (!parked)
    ps->refill_at = agsx_mono_ns() + REFILL_DEFER_NS;
}

/* The claim's refill, if one is due (NOW: 0, whenever it is pending). */
static void refill_due(struct sup *f, int64_t now) {
  struct agsx_pool_sup *ps = f->pool;
  if (ps->refill_at == 0 || (now && now < ps->refill_at))
    return;
  ps->refill_at = 0;
  if (faccessat(ps->pooldir, POOL_JSON, F_OK, 0) == 0)
    agsx_pool_refill_async(f->o->root, f->o->state, ps->name);
}

/* An attached claim's record (the claimed command, name, user...): written
 * once the supervisor has nothing else to do, not between the answer and a
 * quick command's end (a record read, parse and rewrite: ~0.1 ms). When the
 * command's end is already pending, it is written before the end is
 * handled (ENDING), unless that end removes the record at once (--rm, no
 * `agsx wait` waiter): then nobody could read it. Meanwhile `agsx ls`
 * shows the sandbox as it was parked, for less than a round of the loop. */
static void settle_record(struct sup *f, bool ending) {
  struct agsx_pool_sup *ps = f->pool;
  if (ps == NULL || !ps->record_due)
    return;
  if (!ending) {
    struct pollfd p = {.fd = f->sb->sync, .events = POLLIN};
    if (f->sb->sync >= 0 && poll(&p, 1, 0) > 0)
      return; /* the end (or another event) first: this same round handles it */
  }
  ps->record_due = false;
  if (ending && f->o->rm && f->sb->dirfd >= 0 && !agsx_state_has_waiters(f->sb->dirfd))
    return;
  record_claim(f, &ps->claim, ps->claim.hostname ? ps->claim.hostname : ps->claim.name);
}

int agsx_pool_sup_timeout_ms(const struct sup *f) {
  const struct agsx_pool_sup *ps = f->pool;
  if (ps && ps->record_due)
    return 0;
  if (ps == NULL || ps->refill_at == 0)
    return -1;
  int64_t left = ps->refill_at - agsx_mono_ns();
  return left <= 0 ? 0 : (int)((left + 999999) / 1000000);
}

/* The attached claimer: its signals for the command, or its death (the
 * sandbox dies with it, as with a foreground run's agsx). */
static void on_claimer(struct sup *f) {
  struct agsx_pool_sup *ps = f->pool;
  struct agsx_msg m;
  ssize_t n = agsx_msg_recv(ps->conn, &m, NULL, 0, NULL);
  if (n == -EAGAIN || n == -EINTR)
    return;
  if (n <= 0) {
    agsx_closep(&ps->conn);
    if (!f->stopping) {
      f->stopping = true;
      f->stop_reason = AGSX_STOP_KILLED;
    }
    agsx_sandbox_kill(f->sb);
    return;
  }
  if (m.type == AGSX_CLAIM_SIGNAL && m.code > 0 && m.code < NSIG)
    agsx_sandbox_signal(f->sb, m.code);
}

void agsx_pool_sup_dispatch(struct sup *f, const struct pollfd *p, size_t n) {
  struct agsx_pool_sup *ps = f->pool;
  if (ps == NULL || n < 2)
    return;
  if (ps->record_due)
    settle_record(f, false);
  if (ps->refill_at)
    refill_due(f, agsx_mono_ns());
  if (p[1].revents && ps->conn >= 0)
    on_claimer(f);
  if (!p[0].revents || ps->claimed || f->stopping)
    return;
  int fd = accept4(ps->listen_fd, NULL, NULL, SOCK_CLOEXEC);
  if (fd < 0)
    return;
  ps->accepted_ns = agsx_mono_ns();
  if (!peer_allowed(fd)) {
    close(fd);
    return;
  }
  on_claim(f, fd);
}

/* The attached claimer's answer: how the command ended. */
static void send_end(struct sup *f, int exit_code, const char *error) {
  struct agsx_pool_sup *ps = f->pool;
  struct agsx_msg m = {.type = AGSX_CLAIM_END,
                       .code = exit_code,
                       .status = f->sb->term_signal,
                       .err = (int)f->sb->reason};
  snprintf(m.text, sizeof(m.text), "%s", error ? error : "");
  agsx_msg_send(ps->conn, &m, NULL, 0);
  agsx_closep(&ps->conn);
}

void agsx_pool_sup_ended(struct sup *f) {
  settle_record(f, true);
  if (f->pool)
    f->pool->ended = true;
}

/* sb->on_dead: every process of the claimed sandbox is gone and its end is
 * final. An attached --rm claim is answered now, before the teardown
 * (cgroups, the record's directory: ~10 ms of a claim's 15), once the
 * sandbox is out of every listing: its record file is unlinked (under the
 * record lock: `agsx ls` right after the claimer returns never shows it,
 * `agsx wait` finds it gone as after any --rm) and its name is free again.
 * Not with a waiter (`agsx wait` gets the end record first, as always), nor
 * when the supervisor failed (its error is the answer's). */
static void on_dead(void *data) {
  struct sup *f = data;
  struct agsx_pool_sup *ps = f->pool;
  struct agsx_sandbox *sb = f->sb;
  settle_record(f, true); /* (the loop failed: agsx_pool_sup_ended was not called) */
  if (ps == NULL || !ps->ended || !ps->claimed || ps->conn < 0 || !f->o->rm || !sb->exited ||
      sb->statefd < 0 || sb->dirfd < 0 || agsx_state_has_waiters(sb->dirfd))
    return;
  {
    agsx_error_t err = NULL;
    _cleanup_close_ int lock = agsx_record_lock(sb->statefd, sb->id, &err);
    agsx_error_free(&err);
    if (lock < 0 || (unlinkat(sb->dirfd, "state.json", 0) < 0 && errno != ENOENT))
      return;
  }
  if (sb->name) {
    agsx_name_release(sb->statefd, sb->name, sb->id);
    free(sb->name);
    sb->name = NULL;
  }
  send_end(f, sb->exit_code, NULL);
}

void agsx_pool_sup_end(struct sup *f, int exit_code, const char *error) {
  struct agsx_pool_sup *ps = f->pool;
  if (ps == NULL)
    return;
  if (ps->conn >= 0 && f->sb)
    send_end(f, exit_code, error);
  refill_due(f, 0); /* a claimed command that ended before its refill was due */
  if (!ps->claimed && f->sb) {
    /* Ended unclaimed: replaced at its lifetime's end or its init's death;
     * stopped on request (agsx kill, pool rm) it is not (the next claim of
     * an empty pool refills it). */
    unlinkat(ps->parked, f->sb->id, 0);
    if (f->sb->dirfd >= 0)
      unlinkat(f->sb->dirfd, CLAIM_SOCKET, 0);
    if (f->sb->reason != AGSX_STOP_KILLED && faccessat(ps->pooldir, POOL_JSON, F_OK, 0) == 0)
      agsx_pool_refill_async(f->o->root, f->o->state, ps->name);
  }
}
