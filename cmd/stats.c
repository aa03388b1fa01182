/* agsx stats: what running sandboxes use, sampled once a second. */
#include "config.h"

#include "cmd.h"
#include "util/json.h"
#include "state/state.h"
#include "sandbox/stats.h"
#include "table.h"

#include <fcntl.h>
#include <string.h>
#include <time.h>

#define INTERVAL_NS 1000000000LL

struct stats_opts {
  bool no_stream, json;
};

static int on_stats_opt(void *data, int id, const char *arg) {
  struct stats_opts *o = data;
  (void)arg;
  if (id == O_NO_STREAM)
    o->no_stream = true;
  else if (id == O_JSON)
    o->json = true;
  return 0;
}

/* One sandbox in one frame. */
struct entry {
  char id[33];
  char *name;
  bool running; /* and sampled */
  struct agsx_stats s;
};

struct frame {
  struct entry *v;
  size_t n;
};

static void frame_clear(struct frame *f) {
  for (size_t i = 0; i < f->n; i++)
    free(f->v[i].name);
  free(f->v);
  memset(f, 0, sizeof(*f));
}

static void add_entry(struct frame *f, int statefd, const char *id) {
  struct entry *e = &f->v[f->n++];
  memset(e, 0, sizeof(*e));
  snprintf(e->id, sizeof(e->id), "%s", id);
  struct agsx_record r;
  agsx_error_t err = NULL;
  if (agsx_record_read(statefd, id, &r, &err) < 0) {
    agsx_error_free(&err);
    return;
  }
  e->name = r.name ? xstrdup(r.name) : NULL;
  e->running = agsx_stats_sample(&r, &e->s, &err) == 0;
  agsx_error_free(&err);
  agsx_record_clear(&r);
}

/* Samples IDS, or without them every sandbox running now. */
static void sample(int statefd, char **ids, struct frame *f) {
  memset(f, 0, sizeof(*f));
  _cleanup_strv_ char **all = NULL;
  agsx_error_t err = NULL;
  if (ids == NULL && statefd >= 0 && agsx_state_list(statefd, &all, &err) < 0)
    agsx_error_free(&err);
  char **list = ids ? ids : all;
  f->v = xzalloc((agsx_strv_len(list) + 1) * sizeof(*f->v));
  for (char **id = list; id && *id; id++) {
    add_entry(f, statefd, *id);
    if (ids == NULL && !f->v[f->n - 1].running)
      free(f->v[--f->n].name); /* not running: not listed */
  }
}

static const struct entry *find(const struct frame *f, const char *id) {
  for (size_t i = 0; i < f->n; i++)
    if (strcmp(f->v[i].id, id) == 0)
      return &f->v[i];
  return NULL;
}

static double cpu_percent(const struct entry *e, const struct frame *prev) {
  const struct entry *p = find(prev, e->id);
  return p && p->running && e->running ? agsx_stats_cpu_percent(&p->s, &e->s) : -1;
}

static char *pair(bool known, uint64_t a, uint64_t b, bool b_known) {
  if (!known)
    return xstrdup("-");
  _cleanup_free_ char *x = agsx_format_size(a), *y = b_known ? agsx_format_size(b) : NULL;
  return xasprintf("%s / %s", x, y ? y : "-");
}

static void row(struct agsx_table *t, const struct entry *e, const struct frame *prev) {
  const struct agsx_stats *s = &e->s;
  double cpu = cpu_percent(e, prev);
  char id[13], cpus[32] = "-", memp[32] = "-", pids[32] = "-";
  snprintf(id, sizeof(id), "%.12s", e->id);
  if (cpu >= 0)
    snprintf(cpus, sizeof(cpus), "%.2f%%", cpu);
  if (e->running && s->has_memory && s->memory_limit)
    snprintf(memp, sizeof(memp), "%.2f%%", 100.0 * (double)s->memory / (double)s->memory_limit);
  if (e->running && s->has_pids)
    snprintf(pids, sizeof(pids), "%llu", (unsigned long long)s->pids);
  _cleanup_free_ char *mem =
      pair(e->running && s->has_memory, s->memory, s->memory_limit, s->memory_limit > 0);
  _cleanup_free_ char *disk = pair(e->running && s->has_disk, s->disk_used, s->disk_size, true);
  _cleanup_free_ char *net = pair(e->running && s->has_net, s->rx_bytes, s->tx_bytes, true);
  const char *cells[] = {id, e->name ? e->name : "", cpus, mem, memp, pids, disk, net};
  agsx_table_add(t, cells);
}

static void kv_u64(yajl_gen g, const char *key, bool known, uint64_t v) {
  agsx_json_key(g, key);
  if (known)
    yajl_gen_integer(g, (long long)v);
  else
    yajl_gen_null(g);
}

static void kv_pct(yajl_gen g, const char *key, double v) {
  agsx_json_key(g, key);
  char num[32];
  if (v >= 0)
    yajl_gen_number(g, num, (size_t)snprintf(num, sizeof(num), "%.2f", v));
  else
    yajl_gen_null(g);
}

static void entry_json(yajl_gen g, const struct entry *e, const struct frame *prev) {
  const struct agsx_stats *s = &e->s;
  bool r = e->running;
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "id", e->id);
  agsx_json_kv_str(g, "name", e->name);
  agsx_json_kv_str(g, "status", r ? "running" : "exited");
  kv_pct(g, "cpu_percent", cpu_percent(e, prev));
  kv_u64(g, "cpu_ns", r && s->has_cpu, s->cpu_ns);
  kv_u64(g, "memory", r && s->has_memory, s->memory);
  kv_u64(g, "memory_limit", r && s->memory_limit, s->memory_limit);
  kv_pct(g, "memory_percent",
         r && s->has_memory && s->memory_limit ? 100.0 * (double)s->memory / (double)s->memory_limit
                                               : -1);
  kv_u64(g, "pids", r && s->has_pids, s->pids);
  kv_u64(g, "pids_limit", r && s->pids_limit, s->pids_limit);
  kv_u64(g, "disk_used", r && s->has_disk, s->disk_used);
  kv_u64(g, "disk_size", r && s->has_disk, s->disk_size);
  kv_u64(g, "net_rx", r && s->has_net, s->rx_bytes);
  kv_u64(g, "net_tx", r && s->has_net, s->tx_bytes);
  yajl_gen_map_close(g);
}

static void print_frame(const struct frame *cur, const struct frame *prev, bool json, bool redraw) {
  if (json) {
    _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
    yajl_gen_array_open(g);
    for (size_t i = 0; i < cur->n; i++)
      entry_json(g, &cur->v[i], prev);
    yajl_gen_array_close(g);
    size_t len;
    _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
    fwrite(s, 1, len, stdout);
    fputc('\n', stdout);
  } else {
    static const char *const header[] = {"ID",    "NAME", "CPU %", "MEM USAGE / LIMIT",
                                         "MEM %", "PIDS", "DISK",  "NET RX / TX"};
    struct agsx_table t;
    agsx_table_init(&t, AGSX_ARRAY_SIZE(header), header);
    for (size_t i = 0; i < cur->n; i++)
      row(&t, &cur->v[i], prev);
    if (redraw)
      fputs("\033[2J\033[H", stdout); /* clear, home: as docker stats redraws */
    agsx_table_print(&t, stdout);
    agsx_table_clear(&t);
  }
  fflush(stdout);
}

static void sleep_interval(void) {
  struct timespec ts = {.tv_sec = INTERVAL_NS / 1000000000LL};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
    ;
}

static bool any_running(const struct frame *f) {
  for (size_t i = 0; i < f->n; i++)
    if (f->v[i].running)
      return true;
  return false;
}

/* Resolves SANDBOX... to ids (NULL-terminated) or fails on the first
 * unknown one. */
static int resolve_all(int statefd, char **names, int n, char ***ret) {
  char **ids = xzalloc(((size_t)n + 1) * sizeof(char *));
  for (int k = 0; k < n; k++) {
    agsx_error_t err = NULL;
    struct agsx_record r;
    if (agsx_state_lookup_at(statefd, names[k], &r, &err) < 0) {
      agsx_strv_free(ids);
      return agsx_fail(&err);
    }
    ids[k] = xstrdup(r.id);
    agsx_record_clear(&r);
  }
  *ret = ids;
  return 0;
}

int agsx_cmd_stats(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  struct stats_opts o = {.json = ctx->json};
  int i = agsx_parse_options(cmd, argc, argv, on_stats_opt, &o);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  agsx_state_reap_all(ctx->state, true, NULL);
  _cleanup_close_ int statefd = open(ctx->state, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  _cleanup_strv_ char **ids = NULL;
  if (i < argc && resolve_all(statefd, argv + i, argc - i, &ids) != 0)
    return AGSX_EXIT_FAILURE;
  bool redraw = !o.no_stream && !o.json && isatty(STDOUT_FILENO);
  /* CPU use is a rate: every frame, --no-stream's one too, compares two
   * samples a second apart. */
  struct frame prev, cur;
  sample(statefd, ids, &prev);
  for (;;) {
    sleep_interval();
    sample(statefd, ids, &cur);
    print_frame(&cur, &prev, o.json, redraw);
    bool done = o.no_stream || (ids && !any_running(&cur));
    frame_clear(&prev);
    prev = cur;
    if (done)
      break;
  }
  frame_clear(&prev);
  return 0;
}
