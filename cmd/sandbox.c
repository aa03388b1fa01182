/* agsx ls, kill, update: the commands that act on existing sandboxes. */
#include "config.h"

#include "cmd.h"
#include "sandbox/pool.h"
#include "sandbox/snapshot.h"
#include "net/egress.h"
#include "net/network.h"
#include "sandbox/control.h"
#include "sandbox/freeze.h"
#include "util/json.h"
#include "state/state.h"
#include "table.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>

struct sflags {
  bool all, quiet, json, images, dry_run, no_trunc, force, no_stream;
  const char *signal, *timeout;
  char **filters;            /* ls --filter label=...: the KEY[=VALUE] parts */
  struct agsx_egress egress; /* update: the new egress rules */
  bool egress_set, egress_clear;
};

static int on_sopt(void *data, int id, const char *arg) {
  struct sflags *f = data;
  switch (id) {
  case O_ALL: f->all = true; break;
  case O_IMAGES: f->images = true; break;
  case O_DRY_RUN: f->dry_run = true; break;
  case O_QUIET: f->quiet = true; break;
  case O_JSON: f->json = true; break;
  case O_NO_TRUNC: f->no_trunc = true; break;
  case O_FORCE: f->force = true; break;
  case O_NO_STREAM: f->no_stream = true; break;
  case O_SIGNAL: f->signal = arg; break;
  case O_TIMEOUT: f->timeout = arg; break;
  case O_FILTER: {
    if (!agsx_str_has_prefix(arg, "label=") || arg[6] == '\0' || arg[6] == '=')
      return agsx_failf("ls: unknown filter `%s` (want label=KEY or label=KEY=VALUE)", arg), -1;
    size_t n = agsx_strv_len(f->filters);
    f->filters = xrealloc(f->filters, (n + 2) * sizeof(char *));
    f->filters[n] = xstrdup(arg + 6);
    f->filters[n + 1] = NULL;
    break;
  }
  case O_EGRESS_CLEAR: f->egress_clear = true; break;
  case O_EGRESS_ALLOW:
  case O_EGRESS_DENY:
  case O_EGRESS_RULES: {
    agsx_error_t err = NULL;
    f->egress_set = true;
    if (agsx_cmd_parse_egress_opt(id, arg, &f->egress, &err) < 0)
      return agsx_failf("update: %s", err->msg), agsx_error_free(&err), -1;
    break;
  }
  }
  return 0;
}

static int sparse(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv,
                  struct sflags *f) {
  memset(f, 0, sizeof(*f));
  f->json = ctx->json;
  return agsx_parse_options(cmd, argc, argv, on_sopt, f);
}

static void print_json(yajl_gen g) {
  size_t len;
  _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
  fwrite(s, 1, len, stdout);
  fputc('\n', stdout);
}

static void warn_reap(const char *id, const char *what, void *data) {
  (void)data;
  agsx_info("sandbox %.12s: %s", id, what);
}

static const struct agsx_reap_report reap_log = {warn_reap, NULL};

/* ---- ls ------------------------------------------------------------------------------- */

static const char *status_word(const struct agsx_record *r) { return agsx_record_status(r); }

/* Docker's PORTS column: 127.0.0.1:8080->80/tcp, [::1]:53->53/udp */
static char *ports_column(const struct agsx_record *r) {
  char *s = xstrdup("");
  for (size_t i = 0; i < r->n_ports; i++) {
    char a[80];
    char *t = xasprintf("%s%s%s->%u/%s", s, i ? ", " : "",
                        agsx_sockaddr_format(&r->ports[i].host, a, sizeof(a)), r->ports[i].port,
                        agsx_proto_name(r->ports[i].proto));
    free(s);
    s = t;
  }
  return s;
}

/* One row of the table: nothing is cut but the id (Docker's 12 hex digits,
 * all 32 with --no-trunc). */
static void record_row(struct agsx_table *t, const struct agsx_record *r, int64_t now,
                       bool no_trunc) {
  _cleanup_free_ char *age =
      agsx_format_duration((uint64_t)(now > r->created ? now - r->created : 0));
  _cleanup_free_ char *left = NULL;
  if (r->status == AGSX_STATUS_UNKNOWN) { /* a damaged record tells neither (Docker's N/A) */
    free(age);
    age = xstrdup("N/A");
    left = xstrdup("N/A");
  } else if (r->status == AGSX_STATUS_EXITED) {
    left = xasprintf("exited (%d)%s%s", r->exit_code, r->stop_reason ? " " : "",
                     r->stop_reason ? r->stop_reason : "");
  } else {
    _cleanup_free_ char *l =
        agsx_format_duration((uint64_t)(r->deadline > now ? r->deadline - now : 0));
    left = xasprintf("%s left", l);
  }
  _cleanup_free_ char *ports = ports_column(r);
  _cleanup_free_ char *labels = xstrdup("");
  for (size_t i = 0; r->labels && r->labels[i]; i++) {
    char *l = xasprintf("%s%s%s", labels, i ? "," : "", r->labels[i]);
    free(labels);
    labels = l;
  }
  char id[33];
  snprintf(id, sizeof(id), "%.*s", no_trunc ? 32 : 12, r->id);
  const char *cells[] = {id,    r->name, r->image,   status_word(r),
                         age,   left,    r->network, r->address ? r->address : "-",
                         ports, labels};
  agsx_table_add(t, cells);
}

/* One warning per damaged record, naming its file: ls and kill --all
 * leave it to gc. */
static void warn_damaged(const struct agsx_record *v, size_t n) {
  for (size_t k = 0; k < n; k++)
    if (v[k].status == AGSX_STATUS_UNKNOWN)
      agsx_warn("%s (status unknown: `agsx gc` removes it)", v[k].damage);
}

static int cmp_created(const void *a, const void *b) {
  const struct agsx_record *x = a, *y = b;
  return x->created < y->created ? -1 : x->created > y->created ? 1 : strcmp(x->id, y->id);
}

/* Running sandboxes on public and vpc networks that are cut off, or whose
 * firewall rules went (a host firewall reload), said on stderr. */
static void warn_networks(struct agsx_ctx *ctx, const struct agsx_record *v, size_t n) {
  struct agsx_net_check_memo memo = {0};
  for (size_t k = 0; k < n; k++) {
    if (v[k].status != AGSX_STATUS_RUNNING)
      continue;
    agsx_error_t err = NULL;
    _cleanup_free_ char *problem = NULL;
    int r = agsx_net_sandbox_check(ctx->root, v[k].network, v[k].id, v[k].address, &memo, &problem,
                                   &err);
    if (r < 0 && agsx_error_errno(&err) != EPERM) /* not root: not ours to check */
      agsx_warn("sandbox %.12s: check its network: %s", v[k].id, err->msg);
    else if (problem)
      agsx_warn("sandbox %.12s%s%s: %s", v[k].id, v[k].name ? " " : "", v[k].name ? v[k].name : "",
                problem);
    agsx_error_free(&err);
  }
  agsx_net_check_memo_clear(&memo);
}

int agsx_cmd_ls(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  struct sflags f;
  int i = sparse(ctx, cmd, argc, argv, &f);
  _cleanup_strv_ char **filters = f.filters;
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i < argc)
    return agsx_failf("ls: unexpected argument `%s`", argv[i]);
  agsx_state_reap_all(ctx->state, true, &reap_log);
  _cleanup_close_ int statefd = open(ctx->state, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct agsx_record *v = NULL;
  size_t n = statefd >= 0 ? agsx_state_load(statefd, AGSX_LOAD_DAMAGED, &v) : 0;
  warn_damaged(v, n);
  qsort(v, n, sizeof(*v), cmp_created);
  int64_t now = agsx_now_ns() / 1000000000LL;
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_array_open(g);
  static const char *const header[] = {"ID",        "NAME",    "IMAGE",   "STATUS", "CREATED",
                                       "TIME LEFT", "NETWORK", "ADDRESS", "PORTS",  "LABELS"};
  struct agsx_table t;
  agsx_table_init(&t, AGSX_ARRAY_SIZE(header), header);
  for (size_t k = 0; k < n; k++) {
    if (!f.all && v[k].status == AGSX_STATUS_EXITED)
      continue;
    bool match = true;
    for (size_t j = 0; filters && filters[j] && match; j++)
      match = agsx_labels_match(v[k].labels, filters[j]);
    if (!match)
      continue;
    if (f.json)
      agsx_record_gen(g, &v[k], now, false);
    else if (f.quiet)
      printf("%.*s\n", f.no_trunc ? 32 : 12, v[k].id);
    else
      record_row(&t, &v[k], now, f.no_trunc);
  }
  yajl_gen_array_close(g);
  if (f.json)
    print_json(g);
  else if (!f.quiet)
    agsx_table_print(&t, stdout);
  agsx_table_clear(&t);
  warn_networks(ctx, v, n);
  for (size_t k = 0; k < n; k++)
    agsx_record_clear(&v[k]);
  free(v);
  return 0;
}

/* ---- kill ------------------------------------------------------------------------------- */

static int parse_signal(const char *s) {
  static const struct {
    const char *name;
    int sig;
  } sigs[] = {{"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT},  {"KILL", SIGKILL},
              {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"TERM", SIGTERM},  {"CONT", SIGCONT},
              {"STOP", SIGSTOP}, {"ALRM", SIGALRM}, {"WINCH", SIGWINCH}};
  if (strncasecmp(s, "SIG", 3) == 0)
    s += 3;
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(sigs); i++)
    if (strcasecmp(s, sigs[i].name) == 0)
      return sigs[i].sig;
  char *end;
  long n = strtol(s, &end, 10);
  if (*s && *end == '\0' && n >= 0 && n < 65)
    return (int)n;
  return -1;
}

static int signal_one(const struct agsx_record *r, int sig, agsx_error_t *err) {
  if (r->status == AGSX_STATUS_EXITED)
    return agsx_error_set_quiet(err, ESRCH, "sandbox `%.12s` is not running (exited with %d)",
                                r->id, r->exit_code);
  /* To the init: it forwards the signal to the command (SIGKILL, which it
   * cannot catch, ends the whole sandbox). */
  if (agsx_proc_ref_signal(&r->init, sig, 0) < 0)
    return agsx_error_set_quiet(err, ESRCH, "sandbox `%.12s` is not running", r->id);
  if (sig == SIGKILL)
    agsx_sandbox_thaw_killed(r->id); /* paused or being captured: die now */
  return 0;
}

/* With --all, a sandbox that ended (or was removed, --rm) between the
 * listing and its turn is no failure: it is what --all asked for. A named
 * one still is, as with docker kill. */
static bool gone_by_itself(const struct sflags *f, agsx_error_t *err) {
  int e = agsx_error_errno(err);
  if (!f->all || (e != ENOENT && e != ESRCH))
    return false;
  agsx_error_free(err);
  return true;
}

static int kill_targets(struct agsx_ctx *ctx, const struct sflags *f, char **names, int n,
                        int statefd) {
  int sig = f->signal ? parse_signal(f->signal) : 0;
  if (f->signal && sig < 0)
    return agsx_failf("kill: unknown signal `%s`", f->signal);
  int rc = 0;
  struct agsx_stopping *waits = xzalloc(((size_t)n + 1) * sizeof(*waits));
  size_t nwait = 0;
  for (int k = 0; k < n; k++) {
    agsx_error_t err = NULL;
    struct agsx_record r;
    if (agsx_state_lookup_at(statefd, names[k], &r, &err) < 0) {
      rc = gone_by_itself(f, &err) ? rc : agsx_fail(&err);
      continue;
    }
    char id[33];
    memcpy(id, r.id, sizeof(id));
    int sr = sig ? signal_one(&r, sig, &err) : 0;
    agsx_record_clear(&r);
    if (sig) {
      if (sr < 0)
        rc = gone_by_itself(f, &err) ? rc : agsx_fail(&err);
      else
        printf("%s\n", names[k]);
      continue;
    }
    int fd;
    if (agsx_control_request_stop(statefd, id, &fd, &err) < 0) {
      rc = gone_by_itself(f, &err) ? rc : agsx_fail(&err);
      continue;
    }
    if (fd >= 0) {
      waits[nwait].pidfd = fd;
      memcpy(waits[nwait++].id, id, sizeof(id));
    }
    printf("%s\n", names[k]);
  }
  agsx_error_t err = NULL;
  if (nwait && agsx_control_wait_stopped(statefd, waits, nwait, &reap_log, &err) < 0)
    rc = agsx_fail(&err);
  for (size_t k = 0; k < nwait; k++)
    agsx_closep(&waits[k].pidfd);
  free(waits);
  (void)ctx;
  return rc;
}

int agsx_cmd_kill(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  struct sflags f;
  int i = sparse(ctx, cmd, argc, argv, &f);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (f.all == (i < argc))
    return agsx_failf("kill: give SANDBOX... or --all (not both)");
  agsx_state_reap_all(ctx->state, true, &reap_log);
  _cleanup_close_ int statefd = open(ctx->state, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (statefd < 0 && f.all)
    return 0; /* no state directory: no sandbox */
  if (!f.all)
    return kill_targets(ctx, &f, argv + i, argc - i, statefd);
  struct agsx_record *v = NULL;
  size_t n = agsx_state_load(statefd, AGSX_LOAD_DAMAGED, &v);
  warn_damaged(v, n);
  char **names = xzalloc((n + 1) * sizeof(char *));
  int m = 0;
  for (size_t k = 0; k < n; k++)
    if (v[k].status != AGSX_STATUS_EXITED && v[k].status != AGSX_STATUS_UNKNOWN)
      names[m++] = xstrdup(v[k].id);
  int rc = kill_targets(ctx, &f, names, m, statefd);
  agsx_strv_free(names);
  for (size_t k = 0; k < n; k++)
    agsx_record_clear(&v[k]);
  free(v);
  return rc;
}

/* ---- inspect, wait, rm --------------------------------------------------------------------
 * Each takes SANDBOX... and goes on after one that fails (printed as
 * `agsx: ...`), exiting 125 then, as kill does. */

int agsx_cmd_state_open(struct agsx_ctx *ctx) {
  agsx_state_reap_all(ctx->state, true, &reap_log);
  return open(ctx->state, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

int agsx_cmd_lookup_id(int statefd, const char *sandbox, char ret_id[33], agsx_error_t *err) {
  struct agsx_record r;
  if (agsx_state_lookup_at(statefd, sandbox, &r, err) < 0)
    return -1;
  memcpy(ret_id, r.id, 33);
  agsx_record_clear(&r);
  return 0;
}

int agsx_cmd_inspect(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  struct sflags f;
  int i = sparse(ctx, cmd, argc, argv, &f);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i >= argc)
    return agsx_failf("inspect: expected SANDBOX... (see agsx inspect --help)");
  _cleanup_close_ int statefd = agsx_cmd_state_open(ctx);
  int rc = 0;
  int64_t now = agsx_now_ns() / 1000000000LL;
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(true);
  yajl_gen_array_open(g);
  for (; i < argc; i++) {
    agsx_error_t err = NULL;
    struct agsx_record r;
    if (agsx_state_lookup_at(statefd, argv[i], &r, &err) < 0) {
      rc = agsx_fail(&err);
      continue;
    }
    agsx_record_gen(g, &r, now, true);
    agsx_record_clear(&r);
  }
  yajl_gen_array_close(g);
  print_json(g);
  return rc;
}

int agsx_cmd_wait(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  struct sflags f;
  int i = sparse(ctx, cmd, argc, argv, &f);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i >= argc)
    return agsx_failf("wait: expected SANDBOX... (see agsx wait --help)");
  _cleanup_close_ int statefd = agsx_cmd_state_open(ctx);
  int rc = 0, last = 0;
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_array_open(g);
  /* One after the other, in order: the last one's code is the exit status. */
  for (; i < argc; i++) {
    agsx_error_t err = NULL;
    char id[33];
    struct agsx_record r;
    if (agsx_cmd_lookup_id(statefd, argv[i], id, &err) < 0 ||
        agsx_state_wait(statefd, id, -1, &r, &err) < 0) {
      rc = agsx_fail(&err);
      continue;
    }
    last = r.exit_code;
    if (f.json) {
      yajl_gen_map_open(g);
      agsx_json_kv_str(g, "id", r.id);
      agsx_json_kv_str(g, "name", r.name);
      agsx_json_kv_int(g, "exit_code", r.exit_code);
      agsx_json_kv_str(g, "stop_reason", r.stop_reason);
      yajl_gen_map_close(g);
    } else {
      printf("%d\n", r.exit_code);
      fflush(stdout);
    }
    agsx_record_clear(&r);
  }
  yajl_gen_array_close(g);
  if (f.json)
    print_json(g);
  return rc ? rc : last;
}

/* rm -f of a running sandbox: stop it as kill does and wait for its end. */
#define RM_STOP_TIMEOUT_MS 15000
static int stop_for_rm(int statefd, const char *id, agsx_error_t *err) {
  int fd;
  if (agsx_control_request_stop(statefd, id, &fd, err) < 0) {
    if (agsx_error_errno(err) != ESRCH)
      return -1;
    agsx_error_free(err); /* it ended meanwhile */
  }
  if (fd >= 0)
    close(fd);
  /* As long as kill waits: a supervisor that does not answer is not
   * waited for until its deadline. */
  struct agsx_record r;
  if (agsx_state_wait(statefd, id, RM_STOP_TIMEOUT_MS, &r, err) < 0)
    return -1;
  agsx_record_clear(&r);
  return 0;
}

int agsx_cmd_rm(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  struct sflags f;
  int i = sparse(ctx, cmd, argc, argv, &f);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i >= argc)
    return agsx_failf("rm: expected SANDBOX... (see agsx rm --help)");
  _cleanup_close_ int statefd = agsx_cmd_state_open(ctx);
  int rc = 0;
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_array_open(g);
  for (; i < argc; i++) {
    agsx_error_t err = NULL;
    char id[33];
    if (agsx_cmd_lookup_id(statefd, argv[i], id, &err) < 0) {
      rc = agsx_fail(&err);
      continue;
    }
    int r = agsx_state_remove_ended(statefd, id, &err);
    if (r < 0 && f.force && agsx_error_errno(&err) == EBUSY) {
      agsx_error_free(&err);
      r = stop_for_rm(statefd, id, &err);
      /* A run --rm sandbox removes its record itself as it ends. */
      if (r == 0 || agsx_error_errno(&err) == ENOENT) {
        agsx_error_free(&err);
        r = agsx_state_remove_ended(statefd, id, &err);
        if (r < 0 && agsx_error_errno(&err) == ENOENT) {
          agsx_error_free(&err);
          r = 0;
        }
      }
    }
    if (r < 0) {
      rc = agsx_fail(&err);
      continue;
    }
    if (f.json)
      agsx_json_str(g, id);
    else
      printf("%s\n", argv[i]);
  }
  yajl_gen_array_close(g);
  if (f.json)
    print_json(g);
  return rc;
}

/* ---- update ------------------------------------------------------------------------------ */

/* update --egress-…: the new rules, live (agsx_net_egress_update). */
static int update_egress(struct agsx_ctx *ctx, const char *sandbox, const char *id,
                         const struct agsx_egress *e, size_t *ret_cut, agsx_error_t *err) {
  struct agsx_record r;
  if (agsx_state_lookup(ctx->state, id, &r, err) < 0)
    return -1;
  int rc = 0;
  if (r.status != AGSX_STATUS_RUNNING) {
    agsx_error_set_quiet(err, EINVAL, "sandbox `%s` is not running", sandbox);
    rc = -1;
  } else if (agsx_net_egress_update(ctx->root, ctx->state, r.id, r.network, r.address, e,
                                    AGSX_EGRESS_UPDATE_WAIT_MS, ret_cut, err) < 0)
    rc = agsx_error_wrap(err, "sandbox `%s`", sandbox);
  agsx_record_clear(&r);
  return rc;
}

static int update_cmd(struct agsx_ctx *ctx, struct sflags *f, int i, int argc, char **argv) {
  if (i != argc - 1 || (f->timeout == NULL && !f->egress_set && !f->egress_clear))
    return agsx_failf(
        "update: expected --timeout DURATION and/or --egress-… rules, and one SANDBOX");
  if (f->egress_set && f->egress_clear)
    return agsx_failf("update: --egress-clear goes alone, without --egress-allow/deny/rules");
  agsx_error_t err = NULL;
  uint64_t sec = 0;
  if (f->timeout && agsx_parse_duration(f->timeout, &sec, &err) < 0)
    return agsx_failf("update: --timeout: %s", err->msg), agsx_error_free(&err), AGSX_EXIT_FAILURE;
  agsx_state_reap_all(ctx->state, true, &reap_log);
  _cleanup_close_ int statefd = open(ctx->state, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  char id[33];
  if (agsx_cmd_lookup_id(statefd, argv[i], id, &err) < 0)
    return agsx_fail(&err);
  size_t cut = 0;
  if ((f->egress_set || f->egress_clear) &&
      update_egress(ctx, argv[i], id, &f->egress, &cut, &err) < 0)
    return agsx_fail(&err);
  struct agsx_record r = {0};
  bool gone = false;
  if (f->timeout && agsx_control_set_timeout(statefd, id, argv[i], sec, &r, &gone, &err) < 0)
    return agsx_fail(&err);
  if (f->json) {
    _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "id", id);
    if (f->timeout) {
      _cleanup_free_ char *when = agsx_format_rfc3339(r.deadline);
      agsx_json_kv_str(g, "deadline", when);
      agsx_json_kv_int(g, "time_left", (int64_t)sec);
    }
    if (f->egress_set || f->egress_clear) {
      agsx_json_key(g, "egress");
      yajl_gen_array_open(g);
      for (size_t k = 0; k < f->egress.n; k++) {
        _cleanup_free_ char *t = agsx_egress_rule_format(&f->egress.rules[k]);
        agsx_json_str(g, t);
      }
      yajl_gen_array_close(g);
      agsx_json_kv_int(g, "connections_cut", (int64_t)cut);
    }
    yajl_gen_map_close(g);
    print_json(g);
  } else {
    printf("%s\n", argv[i]);
  }
  agsx_record_clear(&r);
  if (gone)
    return agsx_failf("sandbox `%s`: its supervisor is gone", argv[i]);
  return 0;
}

int agsx_cmd_update(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  struct sflags f;
  int i = sparse(ctx, cmd, argc, argv, &f);
  int rc = i < 0 ? AGSX_EXIT_FAILURE : update_cmd(ctx, &f, i, argc, argv);
  agsx_egress_clear(&f.egress);
  return rc;
}

/* ---- gc ---------------------------------------------------------------------------------- */

#include "image/store.h"
#include "sandbox/ranges.h"

#include <sys/stat.h>

struct gc_out {
  bool dry_run, json;
  yajl_gen g;
};

static void gc_report(const char *what, void *data) {
  struct gc_out *o = data;
  if (o->json)
    agsx_json_str(o->g, what);
  else
    printf("%s%s\n", o->dry_run ? "would remove " : "removed ", what);
}

int agsx_cmd_gc(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  struct sflags f;
  int i = sparse(ctx, cmd, argc, argv, &f);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i < argc)
    return agsx_failf("gc: unexpected argument `%s`", argv[i]);
  bool images = f.images, dry_run = f.dry_run;
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  struct gc_out o = {dry_run, f.json, g};
  yajl_gen_array_open(g);
  agsx_error_t err = NULL;
  /* Sandboxes: reap the dead, remove ended records and crash leftovers. */
  if (!dry_run)
    agsx_state_reap_all(ctx->state, true, &reap_log);
  _cleanup_close_ int statefd = open(ctx->state, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct agsx_record *v = NULL;
  size_t n = statefd >= 0 ? agsx_state_load(statefd, AGSX_LOAD_DAMAGED, &v) : 0;
  char **running = xzalloc((n + 1) * sizeof(char *));
  char **digests = xzalloc((n + 1) * sizeof(char *));
  size_t nr = 0, nd = 0;
  /* A damaged record is not a running sandbox: agsx_state_gc_records
   * stops what is left of it and removes it. */
  for (size_t k = 0; k < n; k++)
    if (v[k].status != AGSX_STATUS_EXITED && v[k].status != AGSX_STATUS_UNKNOWN) {
      running[nr++] = xstrdup(v[k].id);
      if (v[k].image_digest)
        digests[nd++] = xstrdup(v[k].image_digest);
    }
  if (statefd >= 0) {
    /* Layers of forks, rollbacks and snapshots nobody uses any more, and
     * copies a killed agsx left (sandbox/snapshot.h); before the records
     * go, which tell the layers ended sandboxes used. */
    agsx_snapshot_layers_gc(statefd, dry_run, gc_report, &o);
    /* An ordinary user's range copies of them (sandbox/ranges.h). */
    agsx_range_gc(ctx->state, dry_run, gc_report, &o);
    /* Pools: entries of dead supervisors, what a crashed create or rm left. */
    agsx_pool_gc(ctx->state, dry_run, gc_report, &o);
    agsx_state_gc_records(statefd, v, n, dry_run, gc_report, &o);
    agsx_state_prune_names(statefd, gc_report, &o, dry_run);
  }
  int rc = 0;
  if (agsx_state_gc_cgroups(running, dry_run, gc_report, &o, &err) < 0)
    rc = agsx_fail(&err);
  /* Networks: leases and rules crashed sandboxes left, unused bridges. */
  if (agsx_net_gc(dry_run, gc_report, &o, &err) < 0)
    rc = agsx_fail(&err);
  warn_networks(ctx, v, n);
  /* The store: work dirs of crashed imports; with --images, content that no
   * image and no running sandbox uses. */
  _cleanup_store_ struct agsx_store *s = NULL;
  if (agsx_store_open(ctx->root, false, &s, &err) == 0) {
    if (!dry_run && agsx_store_clean_tmp(s, &err) < 0)
      rc = agsx_fail(&err);
    if (images && agsx_store_gc(s, digests, dry_run, gc_report, &o, &err) < 0)
      rc = agsx_fail(&err);
    agsx_range_gc(ctx->root, dry_run, gc_report, &o);
  } else {
    agsx_error_free(&err);
  }
  yajl_gen_array_close(g);
  if (f.json)
    print_json(g);
  agsx_strv_free(running);
  agsx_strv_free(digests);
  for (size_t k = 0; k < n; k++)
    agsx_record_clear(&v[k]);
  free(v);
  return rc;
}
