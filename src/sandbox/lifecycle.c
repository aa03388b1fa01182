/* agsx — sandbox: the lifecycle, from a spec to the end (see lifecycle.h).
 *
 * Data flow: agsx_lifecycle_create (spec checked, id, network lease and
 * namespace job, image, configuration, seccomp) → start (signals, stdio,
 * published ports bound, the deadline armed, agsx_sandbox_start, the relays
 * pointed into the namespace, the start record) → supervise (one poll loop)
 * → finish (relays closed, agsx_sandbox_destroy, the network lease ended,
 * the end record). A foreground run does it in the caller; a detached one
 * in a forked supervisor in its own session. */
#include "config.h"

#include "sandbox/lifecycle.h"
#include "sandbox/supervisor.h"
#include "sandbox/procs-internal.h"
#include "sandbox/pool.h"
#include "sandbox/volume.h"
#include "image/registry/registry.h"
#include "image/store.h"
#include "net/egress.h"
#include "net/net.h"
#include "net/network.h"
#include "net/relay.h"
#include "sandbox/control.h"
#include "sandbox/seccomp.h"
#include "host/cgroup.h"
#include "sandbox/snapshot.h"
#include "state/state.h"
#include "util/json.h"

#include <ctype.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/wait.h>

/* ---- the spec ----------------------------------------------------------------------------- */

bool agsx_hostname_is_valid(const char *v) {
  /* RFC 1123 labels: letters, digits and inner hyphens. */
  for (const char *q = v; *q; q++)
    if (!(isalnum((unsigned char)*q) || *q == '-' || *q == '.'))
      return false;
  return !(*v == '\0' || *v == '-' || *v == '.' || strlen(v) > 64);
}

int agsx_run_spec_check(const struct agsx_run_spec *o, agsx_error_t *err) {
  if ((o->image == NULL || *o->image == '\0') && o->layers == NULL)
    return agsx_error_set(err, 0, "no image given");
  if (o->name && !agsx_name_is_valid(o->name))
    return agsx_error_set(err, 0,
                          "invalid name `%s`: letters, digits and _.- (at most 64, "
                          "starting with a letter or digit)",
                          o->name);
  if (o->hostname && !agsx_hostname_is_valid(o->hostname))
    return agsx_error_set(err, 0, "invalid hostname `%s`", o->hostname);
  if (agsx_labels_check(o->labels, err) < 0)
    return -1;
  if (o->workdir && o->workdir[0] != '/')
    return agsx_error_set(err, 0, "working directory `%s` must be absolute", o->workdir);
  if (o->n_binds > AGSX_MAX_BINDS)
    return agsx_error_set(err, 0, "at most %d volumes", AGSX_MAX_BINDS);
  for (size_t i = 0; i < o->n_binds; i++) {
    const struct agsx_bind *b = &o->binds[i];
    if (b->volume && !agsx_volume_name_is_valid(b->src))
      return agsx_error_set(err, 0, "invalid volume name `%.100s`", b->src);
    if (b->volume && o->pool)
      return agsx_error_set(err, 0, "a pool's sandboxes take no named volume (`%s`)", b->src);
    if ((!b->volume && b->src[0] != '/') || b->dst[0] != '/' ||
        !agsx_path_is_clean(b->dst + 1, 4096, 64))
      return agsx_error_set(err, 0, "volume `%s:%s`: both paths must be absolute and clean", b->src,
                            b->dst);
  }
  if (o->n_ports > AGSX_MAX_PORTS)
    return agsx_error_set(err, 0, "at most %d published ports", AGSX_MAX_PORTS);
  if (agsx_ports_check(o->ports, o->n_ports, err) < 0)
    return -1;
  if (o->timeout > AGSX_DURATION_MAX_SEC)
    return agsx_error_set(err, 0, "a timeout of at most 24h");
  if (o->tty && o->capture)
    return agsx_error_set(err, 0, "a terminal and captured output do not go together");
  if (o->idle && (agsx_strv_len(o->cmd) || o->tty || o->interactive || o->capture || o->layers))
    return agsx_error_set(err, 0, "an idle sandbox has no command, terminal or output");
  if (o->pool && (o->idle || agsx_strv_len(o->cmd) || o->tty || o->interactive || o->capture ||
                  o->layers || o->name || o->rm))
    return agsx_error_set(err, 0, "a parked sandbox gets its command, name and stdio when claimed");
  enum agsx_net_mode mode;
  const char *net_name;
  if (agsx_net_mode_parse(o->network ? o->network : "internal", &mode, &net_name, err) < 0)
    return -1;
  if (mode == AGSX_NET_INTERNAL && o->n_rules > 0)
    return agsx_error_set(err, 0, "--allow, --deny and --rules are for vpc networks");
  if (mode == AGSX_NET_INTERNAL && o->egress && o->egress->n > 0)
    return agsx_error_set(err, 0, "egress rules are for the public and vpc networks");
  return 0;
}

/* ---- the image and the sandbox configuration --------------------------------------------- */

/* A fork's layers (sandbox/snapshot.h) go above the image's. */
static int extra_layers(const struct agsx_run_spec *o, struct prepared *p,
                        struct agsx_sandbox_config *cfg, agsx_error_t *err) {
  size_t n = agsx_strv_len(o->extra_layers);
  if (n == 0)
    return 0;
  if (cfg->n_layers + n > AGSX_IMAGE_MAX_LAYERS)
    return agsx_error_set(err, 0, "more than %d layers", AGSX_IMAGE_MAX_LAYERS);
  p->layers = agsx_strv_concat(cfg->layers, NULL);
  for (size_t i = 0; i < n; i++) {
    if (!agsx_snapshot_layer_id_is_valid(o->extra_layers[i]))
      return agsx_error_set(err, EINVAL, "invalid layer id `%s`", o->extra_layers[i]);
    _cleanup_free_ char *path = xasprintf("%s/layers/%s", o->state, o->extra_layers[i]);
    agsx_strv_push(&p->layers, path);
  }
  cfg->layers = p->layers;
  cfg->n_layers += n;
  return 0;
}

static int prepare_image(const struct agsx_run_spec *o, const char *image, const char *pull,
                         struct prepared *p, struct agsx_sandbox_config *cfg, agsx_error_t *err) {
  if (o->layers) {
    cfg->layers = o->layers;
    cfg->n_layers = o->n_layers;
    return 0;
  }
  if (strcmp(image, "host") == 0) {
    cfg->host_image = true;
    return extra_layers(o, p, cfg, err); /* a fork's: under /tmp and /root */
  }
  enum agsx_pull_policy policy;
  if (pull ? agsx_pull_policy_parse(pull, &policy, err) : agsx_pull_policy_default(&policy, err))
    return -1;
  if (policy == AGSX_PULL_ALWAYS && o->pull_image(o->pull_data, image, err) < 0)
    return -1;
  int r = agsx_store_open(o->root, false, &p->store, err);
  if (r == 0)
    r = agsx_store_prepare_image(p->store, image, &p->info, err);
  if (r < 0 && agsx_error_errno(err) == ENOENT) {
    /* Not here: pulled like Docker's `run` does, unless told not to. */
    agsx_error_free(err);
    if (policy == AGSX_PULL_NEVER)
      return agsx_error_set_quiet(err, ENOENT, "image `%s` not found (and --pull never)", image);
    if (o->pull_image(o->pull_data, image, err) < 0)
      return -1;
    agsx_store_free(p->store);
    p->store = NULL;
    r = agsx_store_open(o->root, false, &p->store, err);
    if (r == 0)
      r = agsx_store_prepare_image(p->store, image, &p->info, err);
  }
  if (r < 0)
    return -1;
  cfg->layers = p->info.layer_paths;
  cfg->n_layers = p->info.n_layers;
  return extra_layers(o, p, cfg, err);
}

static int build_config(const struct agsx_run_spec *o, char **cmd, struct prepared *p,
                        struct agsx_sandbox_config *cfg, agsx_error_t *err) {
  const struct agsx_image_config *ic = &p->info.config;
  char **tail = agsx_strv_len(cmd) ? cmd : ic->cmd;
  p->argv = o->argv ? agsx_strv_concat(o->argv, NULL) : agsx_strv_concat(ic->entrypoint, tail);
  if (o->idle) {
    agsx_strv_free(p->argv);
    p->argv = agsx_strv_concat(NULL, NULL); /* (recorded as no command) */
    cfg->idle = true;
  }
  if (cfg->host_image && agsx_strv_len(p->argv) == 0 && !o->idle) {
    agsx_strv_free(p->argv);
    p->argv = agsx_strv_concat((char *[]){"/bin/sh", NULL}, NULL);
  }
  if (o->pool) {
    agsx_strv_free(p->argv);
    p->argv = agsx_strv_concat(NULL, NULL); /* the claim brings it */
    cfg->park = true;
  }
  if (agsx_strv_len(p->argv) == 0 && !o->idle && !o->pool)
    return agsx_error_set(err, 0, "no command given and the image has no Cmd or Entrypoint");
  p->env = agsx_strv_concat(ic->env, o->env);
  cfg->argv = p->argv;
  cfg->env = p->env;
  cfg->cwd =
      o->workdir ? o->workdir : (ic->working_dir && *ic->working_dir ? ic->working_dir : "/");
  cfg->user = o->user ? o->user : ic->user;
  if (o->hostname && strlen(o->hostname) > 64)
    return agsx_error_set(err, 0, "hostname `%s` is longer than 64 characters", o->hostname);
  snprintf(p->hostname, sizeof(p->hostname), "%s",
           o->hostname ? o->hostname : (o->name ? o->name : cfg->id));
  if (!o->hostname && !o->name)
    p->hostname[12] = '\0';
  cfg->hostname = p->hostname;
  cfg->read_only = o->read_only;
  cfg->new_privs = o->new_privs;
  cfg->disk = o->disk ? o->disk : AGSX_DEFAULT_DISK;
  cfg->binds = o->binds;
  cfg->n_binds = o->n_binds;
  cfg->tty = o->tty;
  cfg->limits.memory = o->memory;
  cfg->limits.pids = o->pids;
  if (o->pids == 0 && !agsx_cgroup_limits_off() &&
      agsx_sandbox_default_pids(&cfg->limits.pids, err) < 0)
    return -1;
  if (o->cpus > 0) {
    cfg->limits.cpu_period_us = AGSX_CGROUP_CPU_PERIOD_US;
    cfg->limits.cpu_quota_us = (uint64_t)(o->cpus * AGSX_CGROUP_CPU_PERIOD_US);
  }
  cfg->timing = o->timing;
  cfg->name = o->name;
  cfg->keep_upper = o->keep_upper;
  /* The name, or the short id as agsx ls shows it. */
  snprintf(p->description, sizeof(p->description), "agsx sandbox %.*s (%.100s)", o->name ? 64 : 12,
           o->name ? o->name : cfg->id, p->image_name ? p->image_name : "host");
  cfg->description = p->description;
  return 0;
}

/* Named volumes: resolved on a copy of the spec's binds and locked in use
 * (sandbox/volume.h) until the supervisor ends. */
static int prepare_volumes(const struct agsx_run_spec *o, struct prepared *p,
                           struct agsx_sandbox_config *cfg, agsx_error_t *err) {
  bool any = false;
  for (size_t i = 0; i < o->n_binds; i++)
    any |= o->binds[i].volume;
  if (!any)
    return 0;
  p->binds = xzalloc(o->n_binds * sizeof(*p->binds));
  for (; p->n_binds < o->n_binds; p->n_binds++) {
    p->binds[p->n_binds] = o->binds[p->n_binds];
    p->binds[p->n_binds].src = xstrdup(o->binds[p->n_binds].src);
    p->binds[p->n_binds].dst = xstrdup(o->binds[p->n_binds].dst);
  }
  if (agsx_volume_attach(o->root, p->binds, p->n_binds, &p->volume_lock, err) < 0)
    return -1;
  cfg->binds = p->binds;
  return 0;
}

static int prepare_seccomp(const struct agsx_run_spec *o, struct prepared *p,
                           struct agsx_sandbox_config *cfg, agsx_error_t *err) {
  if (o->seccomp && strcmp(o->seccomp, "unconfined") == 0)
    return 0;
  _cleanup_free_ char *json = NULL;
  size_t len = 0;
  if (o->seccomp &&
      agsx_read_file_at(AT_FDCWD, o->seccomp, AGSX_SECCOMP_JSON_MAX, &json, &len, err) < 0)
    return agsx_error_wrap(err, "seccomp profile");
  /* (compile errors already name the profile) */
  _cleanup_free_ char *cache = xasprintf("%s/cache", o->state);
  if (agsx_mkdir_p(o->state, 0711, err) < 0 ||
      agsx_seccomp_load_cached(cache, json, len, &p->bpf, err) < 0)
    return -1;
  cfg->seccomp = &p->bpf;
  cfg->seccomp_default = json == NULL;
  return 0;
}

static int setup_signals(struct sup *f, agsx_error_t *err) {
  sigset_t set;
  sigemptyset(&set);
  int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, AGSX_SIG_CONTROL};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(sigs); i++)
    sigaddset(&set, sigs[i]);
  if (!f->o->no_signals) {
    sigprocmask(SIG_BLOCK, &set, NULL);
    f->sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  }
  f->timerfd = timerfd_create(CLOCK_REALTIME, TFD_CLOEXEC | TFD_NONBLOCK);
  if ((!f->o->no_signals && f->sigfd < 0) || f->timerfd < 0)
    return agsx_error_set(err, errno, "signalfd/timerfd");
  return 0;
}

/* The command's stdio: the caller's (stdin only with -i), pipes with --json,
 * pipes into the sandbox's log when detached (stdin /dev/null). */
static int setup_stdio(struct sup *f, int pipes[2][2], agsx_error_t *err) {
  struct agsx_sandbox_config *cfg = f->cfg;
  f->out[0].fd = f->out[1].fd = -1;
  int devnull = f->devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0)
    return agsx_error_set(err, errno, "open /dev/null");
  cfg->stdio[0] = f->o->interactive && !f->detached ? STDIN_FILENO : devnull;
  cfg->stdio[1] = f->detached ? devnull : STDOUT_FILENO;
  cfg->stdio[2] = f->detached ? devnull : STDERR_FILENO;
  if (f->o->on_output && !f->detached) {
    /* One stream, in the order the command wrote it. */
    if (pipe2(pipes[0], O_CLOEXEC) < 0)
      return agsx_error_set(err, errno, "pipe");
    cfg->stdio[1] = cfg->stdio[2] = pipes[0][1];
    f->out[0].fd = pipes[0][0];
    fcntl(pipes[0][0], F_SETFL, O_NONBLOCK);
    return 0;
  }
  if (!f->o->capture && !f->detached)
    return 0;
  for (int i = 0; i < 2; i++) {
    if (pipe2(pipes[i], O_CLOEXEC) < 0)
      return agsx_error_set(err, errno, "pipe");
    cfg->stdio[1 + i] = pipes[i][1];
    f->out[i].fd = pipes[i][0];
    fcntl(pipes[i][0], F_SETFL, O_NONBLOCK);
  }
  return 0;
}

static void fill_record(struct sup *f, struct agsx_record *r) {
  const struct agsx_sandbox_config *cfg = f->cfg;
  memset(r, 0, sizeof(*r));
  memcpy(r->id, f->sb->id, sizeof(r->id));
  r->name = f->o->name ? xstrdup(f->o->name) : NULL;
  r->image = xstrdup(f->p->image_name);
  r->image_digest = cfg->host_image ? NULL : xstrdup(f->p->info.img.manifest.digest);
  r->status = AGSX_STATUS_RUNNING;
  r->exit_code = -1;
  r->started_ns = agsx_now_ns();
  r->created = r->started = r->started_ns / 1000000000LL;
  r->timeout = f->o->timeout ? f->o->timeout : AGSX_DEFAULT_TIMEOUT_SEC;
  r->deadline = f->deadline;
  r->deadline_ns = f->deadline_ns;
  agsx_proc_ref_self(&r->supervisor);
  r->init.pid = f->sb->init_pid;
  r->init.start_time = agsx_proc_start_time(f->sb->init_pid);
  r->network = xstrdup(f->o->network ? f->o->network : "internal");
  if (f->net && f->net->addr) {
    char a[16];
    r->address = xstrdup(agsx_ipv4_format(f->net->addr, a));
  }
  if (f->o->n_ports) {
    r->ports = xmalloc(f->o->n_ports * sizeof(*r->ports));
    memcpy(r->ports, f->o->ports, f->o->n_ports * sizeof(*r->ports));
    r->n_ports = f->o->n_ports;
  }
  r->memory = cfg->limits.memory;
  r->pids = cfg->limits.pids;
  r->disk = cfg->disk;
  r->cpu_quota_us = cfg->limits.cpu_quota_us;
  r->slot = f->sb->ids.slot;
  r->uid_base = f->sb->ids.base;
  r->argv = agsx_strv_concat(cfg->argv, NULL);
  r->env = agsx_strv_concat(cfg->env, NULL);
  r->user = cfg->user ? xstrdup(cfg->user) : NULL;
  r->cwd = xstrdup(cfg->cwd);
  r->hostname = xstrdup(cfg->hostname);
  r->seccomp = xstrdup(f->o->seccomp ? f->o->seccomp : "default");
  r->new_privs = f->o->new_privs;
  r->rm = f->o->rm;
  r->idle = f->o->idle;
  r->pause_on_timeout = f->o->pause_on_timeout && f->detached;
  r->pool = f->o->pool ? xstrdup(f->o->pool) : NULL;
  r->parked = f->o->pool != NULL && !(f->pool && agsx_pool_sup_claimed(f));
  r->tmpfs_fd = f->sb->tmpfsfd; /* sandbox/snapshot.h */
  r->layers = agsx_strv_concat(f->o->extra_layers, NULL);
  r->labels = f->o->labels ? agsx_strv_concat(f->o->labels, NULL) : NULL;
  for (size_t i = 0; i < f->o->n_binds; i++) {
    const struct agsx_bind *b = &f->o->binds[i];
    if (!b->volume)
      continue;
    _cleanup_free_ char *v = xasprintf("%s:%s%s", b->src, b->dst, b->ro ? ":ro" : "");
    agsx_strv_push(&r->volumes, v);
  }
}

static int write_start_record(struct sup *f, agsx_error_t *err) {
  struct agsx_record r;
  fill_record(f, &r);
  _cleanup_close_ int lock = agsx_record_lock(f->sb->statefd, f->sb->id, err);
  int ret = lock < 0 ? -1 : agsx_record_write(f->sb->statefd, &r, err);
  agsx_record_clear(&r);
  return ret;
}

/* The end, in the record (or the record removed with --rm). */
static void write_end_record(struct sup *f) {
  agsx_error_t err = NULL;
  struct agsx_sandbox *sb = f->sb;
  if (sb->statefd < 0)
    return;
  /* A sandbox that never started has no record: the caller got the error.
   * With --rm the record goes at once, unless `agsx wait` waits for it: it
   * gets the end first (see agsx_state_wait). */
  if (!f->recorded || (f->o->rm && !agsx_state_has_waiters(sb->dirfd))) {
    if (agsx_sandbox_remove_record(sb, &err) < 0)
      agsx_warn("%s", err->msg);
    agsx_error_free(&err);
    return;
  }
  {
    _cleanup_close_ int lock = agsx_record_lock(sb->statefd, sb->id, &err);
    struct agsx_record r;
    if (lock < 0 || agsx_record_read(sb->statefd, sb->id, &r, &err) < 0) {
      agsx_error_free(&err);
      fill_record(f, &r);
    }
    r.status = AGSX_STATUS_EXITED;
    free(r.stop_reason);
    r.stop_reason = xstrdup(agsx_stop_reason_name(sb->reason));
    r.exit_code = sb->exit_code;
    r.ended = agsx_now_ns() / 1000000000LL;
    if (agsx_record_write(sb->statefd, &r, &err) < 0)
      agsx_warn("%s", err->msg);
    agsx_error_free(&err);
    agsx_record_clear(&r);
  }
  if (f->o->rm) {
    agsx_state_await_waiters(sb->dirfd);
    if (agsx_sandbox_remove_record(sb, &err) < 0)
      agsx_warn("%s", err->msg);
    agsx_error_free(&err);
  }
}

/* Binds the published ports on the host before the sandbox exists: a port
 * in use refuses the start with nothing made. Connections wait in the
 * listen queue until the supervisor's loop runs. */
static int open_ports(struct sup *f, agsx_error_t *err) {
  if (f->o->n_ports == 0)
    return 0;
  f->relay = agsx_relay_new(err);
  if (f->relay == NULL)
    return -1;
  for (size_t i = 0; i < f->o->n_ports; i++) {
    struct agsx_port *p = &f->o->ports[i];
    struct sockaddr_storage target;
    agsx_sockaddr_from_ip("127.0.0.1", p->port, &target);
    if (agsx_relay_listen(f->relay, p->proto, -1, &p->host, AGSX_RELAY_NS_LATER, &target, &p->host,
                          err) < 0)
      return -1;
  }
  return 0;
}

/* Starts the sandbox and writes its record. READY_FD (detached) gets the id
 * or the error once the command runs. */
/* Public and vpc sandboxes resolve names through 127.0.0.11:53 in their
 * own namespace, relayed by the supervisor to the host's name server from
 * the host's namespace: it works when the host's resolver listens on
 * 127.0.0.53, and the sandbox needs no way to the host. */
static int open_dns(void *data, int netns, agsx_error_t *err) {
  struct sup *f = data;
  return agsx_net_dns_listen(&f->dns, netns, f->net, f->o->ephemeral ? NULL : f->o->state, err);
}

/* A detached sandbox's control socket and the processes it starts. */
static int open_procs(struct sup *f, uint64_t log_cap, agsx_error_t *err) {
  struct agsx_record r;
  fill_record(f, &r);
  int ret =
      agsx_procs_new(f->sb->statefd, f->sb->dirfd, &r, f->cfg->seccomp, log_cap, &f->procs, err);
  agsx_record_clear(&r);
  return ret < 0 ? agsx_error_wrap(err, "control socket") : 0;
}

/* A detached sandbox's log: its command's output, and the supervisor's
 * warnings as META records (nobody else would see them). */
static void log_sink(enum agsx_log_level level, const char *msg, void *data) {
  struct sup *f = data;
  int e = errno;
  _cleanup_free_ char *text = xasprintf("%s%s",
                                        level == AGSX_LOG_ERROR     ? "error: "
                                        : level == AGSX_LOG_WARNING ? "warning: "
                                                                    : "",
                                        msg);
  agsx_error_t err = NULL;
  agsx_log_write(f->log, AGSX_LOG_META, text, strlen(text), &err);
  agsx_error_free(&err);
  errno = e;
}

static int open_log(struct sup *f, uint64_t cap, agsx_error_t *err) {
  if (agsx_log_writer_open(f->sb->dirfd, "log", cap, &f->log, err) < 0)
    return agsx_error_wrap(err, "sandbox log");
  agsx_log_set_sink(log_sink, f);
  return 0;
}

static void add_phase(struct agsx_timing *t, const char *name, int64_t ns) {
  if (t->n < AGSX_MAX_PHASES) {
    t->name[t->n] = name;
    t->ns[t->n++] = ns;
  }
}

static int start(struct sup *f, int pipes[2][2], agsx_error_t *err) {
  uint64_t log_cap = 0;
  if (f->detached && agsx_log_cap_conf(&log_cap, err) < 0)
    return -1;
  f->deadline_ns =
      agsx_now_ns() +
      (int64_t)(f->o->timeout ? f->o->timeout : AGSX_DEFAULT_TIMEOUT_SEC) * 1000000000LL;
  f->deadline = (f->deadline_ns + 500000000LL) / 1000000000LL;
  if (setup_signals(f, err) < 0 || setup_stdio(f, pipes, err) < 0 || open_ports(f, err) < 0)
    return -1;
  if (!f->o->no_timeout)
    agsx_sup_arm_deadline(f);
  f->cfg->state_dir = f->o->state;
  if (f->net) {
    f->cfg->on_netns = open_dns;
    f->cfg->on_netns_data = f;
  }
  /* The terminal's size is set before the command starts: a command that
   * asks at once must not see 0x0. */
  if (f->o->tty && ioctl(STDIN_FILENO, TIOCGWINSZ, &f->cfg->winsize) == 0)
    f->cfg->has_winsize = true;
  f->starting_ns = agsx_mono_ns();
  int r = agsx_sandbox_start(f->cfg, &f->sb, err);
  int64_t t = agsx_mono_ns();
  for (int i = 0; i < 2; i++)
    agsx_closep(&pipes[i][1]);
  if (r < 0 || (f->detached && open_log(f, log_cap, err) < 0))
    return -1;
  if (f->relay && agsx_relay_set_connect_ns(f->relay, f->sb->netns, err) < 0)
    return -1;
  agsx_sup_budget_relays(f);
  /* An ephemeral sandbox has no record: removed at the end (write_end_record). */
  if (!f->o->ephemeral) {
    if (write_start_record(f, err) < 0)
      return -1;
    f->recorded = true;
    if (f->detached && open_procs(f, log_cap, err) < 0)
      return -1;
  }
  add_phase(&f->sb->timing, "record", agsx_mono_ns() - t);
  return 0;
}

/* The log's end: how the command ended, and why agsx failed if it did. */
static void end_log(struct sup *f, agsx_error_t failure) {
  if (f->log == NULL)
    return;
  agsx_error_t err = NULL;
  agsx_log_set_sink(NULL, NULL);
  if (agsx_log_end(f->log, f->sb->exit_code, f->sb->term_signal, failure ? failure->msg : NULL,
                   &err) < 0)
    agsx_warn("%s", err->msg);
  agsx_error_free(&err);
}

/* Tears down; returns the exit code for the caller. */
static int finish(struct sup *f, agsx_error_t *err) {
  /* The host ports are free as soon as the sandbox ends. */
  agsx_relay_free(f->relay);
  f->relay = NULL;
  agsx_relay_free(f->dns);
  f->dns = NULL;
  int code = f->sb ? f->sb->exit_code : 125;
  if (f->sb == NULL)
    return code;
  if (f->stopping)
    f->sb->reason = f->stop_reason;
  int64_t td = agsx_mono_ns();
  /* The processes it owns are reaped first, their ends recorded before its
   * own: they are in the sandbox's pid namespace, whose init cannot finish
   * exiting while one of them is an unreaped zombie of ours (and the
   * destroy waits for the init). */
  agsx_procs_end(f->procs, "the sandbox ended");
  agsx_error_t derr = NULL;
  if (agsx_sandbox_destroy(f->sb, &derr) < 0 && *err == NULL)
    *err = derr;
  else
    agsx_error_free(&derr);
  /* The namespace, and the veth with it, went with the sandbox. */
  if (f->net)
    agsx_net_attach_end(f->net);
  end_log(f, *err);
  write_end_record(f);
  /* (--timing: the mounts' release apart, see agsx_sandbox.mntns) */
  f->release_ns = f->sb->release_ns;
  f->teardown_ns = agsx_mono_ns() - td - f->release_ns;
  return *err ? (f->sb->exited ? f->sb->exit_code : 125) : f->sb->exit_code;
}

static void sup_clear(struct sup *f) {
  agsx_pool_sup_free(f);
  agsx_procs_free(f->procs);
  f->procs = NULL;
  if (f->log)
    agsx_log_set_sink(NULL, NULL);
  agsx_log_writer_free(f->log);
  f->log = NULL;
  agsx_relay_free(f->relay);
  f->relay = NULL;
  agsx_relay_free(f->dns);
  f->dns = NULL;
  free(f->pfd);
  agsx_closep(&f->sigfd);
  agsx_closep(&f->timerfd);
  agsx_closep(&f->devnull);
  free(f->cut);
  f->cut = NULL;
  for (int i = 0; i < 2; i++)
    agsx_output_clear(&f->out[i]);
  agsx_sandbox_free(f->sb);
}

/* run -d: what the supervisor reports through the pipe once the command
 * runs (or why it could not start). */
struct report {
  int ok;
  struct agsx_proc_ref supervisor;
  char text[1024];
  /* With --timing: when the supervisor began, and its phases (their names
   * are literals of this same program: the caller's pointers too). */
  int64_t began_ns, starting_ns;
  struct agsx_timing timing;
};

static _Noreturn void detached_supervisor(struct sup *f, int report) {
  agsx_error_t err = NULL;
  int pipes[2][2] = {{-1, -1}, {-1, -1}};
  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull >= 0)
    for (int i = 0; i < 3; i++)
      dup2(devnull, i);
  /* It writes to its processes' stdin pipes: a reader gone is EPIPE, not
   * its death (the command's dispositions are reset before exec). */
  signal(SIGPIPE, SIG_IGN);
  int64_t began = agsx_mono_ns();
  /* systemd: a scope of its own, so that the sandbox outlives the unit that
   * started it (its stop kills the whole of that unit's cgroup). */
  int r = agsx_cgroup_scope_self(f->cfg->id, f->p->description, &err);
  if (r == 0)
    r = start(f, pipes, &err);
  if (r == 0 && agsx_pool_sup_park(f, &err) < 0)
    r = -1;
  struct report m = {.ok = r == 0, .began_ns = began, .starting_ns = f->starting_ns};
  if (r == 0 && f->o->timing)
    m.timing = f->sb->timing;
  agsx_proc_ref_self(&m.supervisor);
  snprintf(m.text, sizeof(m.text), "%s", r == 0 ? f->sb->id : err->msg);
  if (write(report, &m, sizeof(m)) < 0) {
  }
  close(report);
  if (r == 0 && agsx_supervise(f, &err) == 0)
    agsx_pool_sup_ended(f);
  int code = finish(f, &err);
  agsx_pool_sup_end(f, code, err ? err->msg : NULL);
  agsx_error_free(&err);
  sup_clear(f);
  _exit(0);
}

static void prepared_clear(struct prepared *p) {
  agsx_store_free(p->store);
  agsx_image_info_clear(&p->info);
  agsx_strv_free(p->argv);
  agsx_strv_free(p->env);
  agsx_strv_free(p->layers);
  agsx_seccomp_bpf_clear(&p->bpf);
  for (size_t i = 0; i < p->n_binds; i++) {
    free(p->binds[i].src);
    free(p->binds[i].dst);
  }
  free(p->binds);
  agsx_closep(&p->volume_lock);
}

/* ---- the API ------------------------------------------------------------------------------ */

struct agsx_lifecycle {
  struct agsx_run_spec spec;
  struct prepared p;
  struct agsx_sandbox_config cfg;
  struct agsx_netns_job job; /* the network namespace, made by a helper meanwhile */
  struct agsx_net_attach net;
  struct sup f;
  int64_t prepare_ns, command_ns;
  struct agsx_timing detach_timing; /* run -d --timing: the supervisor's phases */
};

int agsx_lifecycle_create(const struct agsx_run_spec *spec, struct agsx_lifecycle **ret,
                          agsx_error_t *err) {
  enum agsx_net_mode mode;
  const char *net_name;
  /* A kernel that cannot run sandboxes fails before anything is made. */
  if (agsx_run_spec_check(spec, err) < 0 ||
      agsx_net_mode_parse(spec->network ? spec->network : "internal", &mode, &net_name, err) < 0 ||
      (agsx_mkdir_p(spec->state, 0711, err) < 0 || agsx_sandbox_kernel_check(spec->state, err) < 0))
    return -1;
  struct agsx_lifecycle *lc = xzalloc(sizeof(*lc));
  lc->spec = *spec;
  if (lc->spec.t0 == 0)
    lc->spec.t0 = agsx_mono_ns();
  lc->p.image_name = spec->image_name ? spec->image_name : spec->image;
  lc->p.volume_lock = -1;
  lc->cfg.netns = lc->cfg.sysfs = -1;
  agsx_sandbox_new_id(lc->cfg.id);
  lc->job = (struct agsx_netns_job){-1, -1};
  lc->net = (struct agsx_net_attach)AGSX_NET_ATTACH_INIT;
  bool linked = mode != AGSX_NET_INTERNAL;
  lc->f = (struct sup){.o = &lc->spec,
                       .p = &lc->p,
                       .cfg = &lc->cfg,
                       .sigfd = -1,
                       .timerfd = -1,
                       .devnull = -1,
                       .started = lc->spec.t0,
                       .out = {{.fd = -1}, {.fd = -1}},
                       .net = linked ? &lc->net : NULL};
  lc->net.egress = spec->egress;
  /* On public and vpc networks an address is leased first (see net.h). */
  if ((linked && agsx_net_attach_begin(spec->root, mode, net_name, spec->rules, spec->n_rules,
                                       lc->cfg.id, &lc->net, err) < 0) ||
      agsx_net_prepare(&lc->job, linked ? &lc->net.link : NULL, err) < 0 ||
      prepare_image(&lc->spec, spec->image, spec->pull, &lc->p, &lc->cfg, err) < 0 ||
      build_config(&lc->spec, spec->cmd, &lc->p, &lc->cfg, err) < 0 ||
      prepare_volumes(&lc->spec, &lc->p, &lc->cfg, err) < 0 ||
      prepare_seccomp(&lc->spec, &lc->p, &lc->cfg, err) < 0) {
    agsx_net_job_cancel(&lc->job);
    agsx_lifecycle_free(lc);
    return -1;
  }
  /* Collected by the sandbox's start, right before it is needed. */
  lc->cfg.netns_job = &lc->job;
  lc->cfg.address = lc->net.addr;
  *ret = lc;
  return 0;
}

void agsx_lifecycle_free(struct agsx_lifecycle *lc) {
  if (lc == NULL)
    return;
  sup_clear(&lc->f);
  if (lc->f.handed_off)
    agsx_net_attach_disown(&lc->net); /* the supervisor has it */
  else
    agsx_net_attach_end(&lc->net);
  agsx_net_job_cancel(&lc->job);
  prepared_clear(&lc->p);
  agsx_closep(&lc->cfg.netns);
  agsx_closep(&lc->cfg.sysfs);
  free(lc);
}

int agsx_lifecycle_run(struct agsx_lifecycle *lc, const struct agsx_run_hooks *hooks,
                       agsx_error_t *err) {
  struct sup *f = &lc->f;
  int pipes[2][2] = {{-1, -1}, {-1, -1}};
  int r = start(f, pipes, err);
  /* Up to the sandbox's start: the image, the config, the supervisor's
   * signals, stdio and ports. */
  lc->prepare_ns = f->starting_ns ? f->starting_ns - lc->spec.t0 : 0;
  if (r == 0) {
    int64_t t = agsx_mono_ns();
    if (hooks && hooks->started)
      hooks->started(hooks->data, lc);
    agsx_supervise(f, err);
    lc->command_ns = agsx_mono_ns() - t;
  }
  if (hooks && hooks->ended)
    hooks->ended(hooks->data, lc);
  return finish(f, err);
}

/* The fds a detached supervisor keeps of its caller's: the report pipe and
 * what the lifecycle prepared (the network namespace and its helper, the
 * address lease and the firewall watch, the image store). A caller that is
 * a server has listeners, client connections and logs open: none of them
 * may live on in a supervisor (or, through it, in a sandbox). */
static void close_callers_fds(struct agsx_lifecycle *lc, int report) {
  int keep[16];
  size_t n = 0;
  keep[n++] = report;
  keep[n++] = lc->cfg.netns;
  keep[n++] = lc->cfg.sysfs;
  keep[n++] = lc->job.sock;
  keep[n++] = lc->net.lease_fd;
  keep[n++] = lc->net.watch_fd;
  keep[n++] = lc->net.nflog_fd;    /* egress: the blocked log's socket */
  keep[n++] = lc->net.egress_pipe; /* egress: its rules' transaction result */
  keep[n++] = lc->p.volume_lock;   /* its volumes in use (sandbox/volume.h) */
  if (lc->p.store) {
    struct agsx_store *s = lc->p.store;
    keep[n++] = s->rootfd;
    keep[n++] = s->blobsfd;
    keep[n++] = s->layersfd;
    keep[n++] = s->tmpfd;
    keep[n++] = s->gc_lock;
  }
  agsx_close_all_except(keep, n);
}

/* The supervisor is a grandchild in a session of its own: the caller has
 * no child to reap, its signals and its death (a SIGKILLed server) do not
 * reach it, and it holds nothing of the caller's. (With caller_exits, a
 * child in a session of its own, until the caller's exit reparents it.) */
static _Noreturn void detach_child(struct agsx_lifecycle *lc, int report) {
  agsx_log_set_sink(NULL, NULL); /* the caller's sink may write to its fds */
  close_callers_fds(lc, report);
  /* Nor its signal state: a server that ignores SIGCHLD would have the
   * kernel reap the sandbox's init before we read its status. */
  agsx_signal_defaults();
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  if (setsid() < 0)
    _exit(125);
  if (!lc->spec.caller_exits) {
    pid_t pid = fork();
    if (pid != 0)
      _exit(pid < 0 ? 125 : 0);
  }
  lc->f.detached = true;
  detached_supervisor(&lc->f, report);
}

int agsx_lifecycle_detach(struct agsx_lifecycle *lc, struct agsx_run_started *ret,
                          agsx_error_t *err) {
  struct sup *f = &lc->f;
  int pfd[2];
  int64_t forking = agsx_mono_ns();
  lc->prepare_ns = forking - lc->spec.t0;
  if (pipe2(pfd, O_CLOEXEC) < 0)
    return agsx_error_set(err, errno, "pipe");
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(pfd[0]);
    close(pfd[1]);
    return agsx_error_set(err, e, "fork the supervisor");
  }
  if (pid == 0) {
    close(pfd[0]);
    detach_child(lc, pfd[1]);
  }
  close(pfd[1]);
  f->handed_off = true;
  int status;
  while (!lc->spec.caller_exits && waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  struct report m = {0};
  ssize_t n = agsx_read_all(pfd[0], &m, sizeof(m));
  close(pfd[0]);
  if (n != (ssize_t)sizeof(m))
    return agsx_error_set(err, 0, "the sandbox supervisor died during start-up");
  m.text[sizeof(m.text) - 1] = '\0';
  if (!m.ok)
    return agsx_error_set(err, 0, "%s", m.text);
  snprintf(ret->id, sizeof(ret->id), "%.32s", m.text);
  if (lc->spec.timing) {
    /* The supervisor's phases between its own start and the report. */
    struct agsx_timing *t = &lc->detach_timing;
    add_phase(t, "detach", m.began_ns - forking);
    add_phase(t, "setup", m.starting_ns - m.began_ns);
    int64_t sum = m.starting_ns;
    for (size_t i = 0; i < m.timing.n && i < AGSX_MAX_PHASES; i++) {
      add_phase(t, m.timing.name[i], m.timing.ns[i]);
      sum += m.timing.ns[i];
    }
    add_phase(t, "report", agsx_mono_ns() - sum);
  }
  ret->supervisor = m.supervisor.pid;
  ret->supervisor_ref = m.supervisor;
  return 0;
}

const struct agsx_sandbox *agsx_lifecycle_sandbox(const struct agsx_lifecycle *lc) {
  return lc->f.sb;
}

const struct agsx_timing *agsx_lifecycle_timing(const struct agsx_lifecycle *lc) {
  return lc->f.handed_off ? &lc->detach_timing : lc->f.sb ? &lc->f.sb->timing : NULL;
}

int64_t agsx_lifecycle_prepare_ns(const struct agsx_lifecycle *lc) { return lc->prepare_ns; }

int64_t agsx_lifecycle_teardown_ns(const struct agsx_lifecycle *lc) { return lc->f.teardown_ns; }

int64_t agsx_lifecycle_release_ns(const struct agsx_lifecycle *lc) { return lc->f.release_ns; }

int64_t agsx_lifecycle_command_ns(const struct agsx_lifecycle *lc) { return lc->command_ns; }

char *agsx_lifecycle_result_json(const struct agsx_lifecycle *lc, int exit_code, const char *error,
                                 size_t *ret_len) {
  const struct sup *f = &lc->f;
  const struct agsx_sandbox *sb = f->sb;
  struct agsx_result r = {
      .exit_code = exit_code,
      .out = f->out,
      .duration_ms = (agsx_mono_ns() - f->started) / 1000000,
      .stop_reason = sb ? agsx_stop_reason_name(sb->reason) : "error",
      .signal = sb ? sb->term_signal : 0,
      .id = sb ? sb->id : NULL,
      .name = f->o->name,
      .error = error,
  };
  return agsx_result_json(&r, ret_len);
}

bool agsx_lifecycle_cancelled(const struct agsx_lifecycle *lc) { return lc->f.cancelled; }

const char *agsx_lifecycle_cut(const struct agsx_lifecycle *lc) { return lc->f.cut; }
