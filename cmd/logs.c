/* agsx logs: a detached sandbox's own output (docker logs semantics): its
 * command's stdout to stdout, stderr to stderr, from the bounded log its
 * supervisor keeps (sandbox/logbuf.h), while it runs and after it ended
 * until it is removed. */
#include "config.h"

#include "cmd.h"
#include "sandbox/processes.h"
#include "sandbox/proc.h"
#include "state/state.h"

#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FOLLOW_CHECK_MS 500 /* -f: how often a silent sandbox is checked for a dead supervisor */

struct lflags {
  bool follow, timestamps;
  bool network, json; /* --network: the blocked log of its egress rules instead */
  const char *exec;   /* --exec PID */
  bool tail_set;
  uint64_t tail;
};

static int on_lopt(void *data, int id, const char *arg) {
  struct lflags *f = data;
  switch (id) {
  case O_FOLLOW: f->follow = true; break;
  case O_NETWORK: f->network = true; break;
  case O_JSON: f->json = true; break;
  case O_TIMESTAMPS: f->timestamps = true; break;
  case O_EXEC: {
    char *end;
    unsigned long v = strtoul(arg, &end, 10);
    if (*arg < '1' || *arg > '9' || *end || v > UINT32_MAX)
      return agsx_failf("invalid --exec `%s`: a process id", arg), -1;
    f->exec = arg;
    break;
  }
  case O_TAIL: {
    char *end;
    if (strcmp(arg, "all") == 0)
      return 0;
    errno = 0;
    unsigned long long v = strtoull(arg, &end, 10);
    if (*arg < '0' || *arg > '9' || *end || errno || v > 1000000000ull)
      return agsx_failf("invalid --tail `%s`: a number of lines or `all`", arg), -1;
    f->tail_set = true;
    f->tail = v;
    break;
  }
  }
  return 0;
}

/* What was printed of each stream: whether the next byte starts a line. */
struct out {
  bool at_line_start[3];
  bool broken; /* a closed stdout (a pipe into head) */
};

static void stamp(int64_t ns, char buf[40]) {
  time_t s = (time_t)(ns / 1000000000LL);
  struct tm tm;
  gmtime_r(&s, &tm);
  size_t n = strftime(buf, 40, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf + n, 40 - n, ".%09" PRId64 "Z ", (int64_t)(ns % 1000000000LL));
}

static void emit(struct out *o, int fd, const char *p, size_t len, int64_t ns, bool timestamps) {
  if (!timestamps) {
    if (agsx_write_all(fd, p, len) < 0 && fd == STDOUT_FILENO)
      o->broken = true;
    return;
  }
  while (len > 0 && !o->broken) {
    if (o->at_line_start[fd]) {
      char ts[40];
      stamp(ns, ts);
      if (agsx_write_all(fd, ts, strlen(ts)) < 0 && fd == STDOUT_FILENO)
        o->broken = true;
    }
    const char *nl = memchr(p, '\n', len);
    size_t n = nl ? (size_t)(nl - p) + 1 : len;
    if (agsx_write_all(fd, p, n) < 0 && fd == STDOUT_FILENO)
      o->broken = true;
    o->at_line_start[fd] = nl != NULL;
    p += n;
    len -= n;
  }
}

static void print_rec(struct out *o, const struct agsx_log_rec *r, bool timestamps) {
  switch (r->kind) {
  case AGSX_LOG_STDOUT:
  case AGSX_LOG_PTY: emit(o, STDOUT_FILENO, r->data, r->len, r->time_ns, timestamps); break;
  case AGSX_LOG_STDERR: emit(o, STDERR_FILENO, r->data, r->len, r->time_ns, timestamps); break;
  case AGSX_LOG_META: agsx_warn("sandbox: %.*s", (int)r->len, r->data); break;
  case AGSX_LOG_LOST:
    agsx_warn("%" PRIu64 " bytes of older output were dropped (the log keeps the newest)", r->lost);
    break;
  default: break;
  }
}

/* The records there now, kept for --tail. */
struct held {
  struct agsx_log_rec *v;
  size_t n, cap;
};

static void hold(struct held *h, const struct agsx_log_rec *r) {
  if (h->n == h->cap) {
    h->cap = h->cap ? 2 * h->cap : 64;
    h->v = xrealloc(h->v, h->cap * sizeof(*h->v));
  }
  h->v[h->n] = *r;
  h->v[h->n].data = r->len ? xstrndup(r->data, r->len) : NULL;
  h->n++;
}

static bool is_output(const struct agsx_log_rec *r) {
  return r->kind == AGSX_LOG_STDOUT || r->kind == AGSX_LOG_STDERR || r->kind == AGSX_LOG_PTY;
}

/* Prints the last TAIL lines of what is held (a last line without its
 * newline counts), stdout's and stderr's together as docker does. */
static void print_tail(struct out *o, struct held *h, uint64_t tail, bool timestamps) {
  uint64_t total = 0;
  const struct agsx_log_rec *last = NULL;
  for (size_t i = 0; i < h->n; i++)
    if (is_output(&h->v[i])) {
      for (size_t k = 0; k < h->v[i].len; k++)
        total += h->v[i].data[k] == '\n';
      last = &h->v[i];
    }
  if (last && last->len && last->data[last->len - 1] != '\n')
    total++;
  uint64_t skip = total > tail ? total - tail : 0;
  for (size_t i = 0; i < h->n; i++) {
    struct agsx_log_rec r = h->v[i];
    if (r.kind == AGSX_LOG_LOST || (!is_output(&r) && skip > 0))
      continue;
    while (skip > 0 && r.len > 0) {
      skip -= r.data[0] == '\n';
      r.data++;
      r.len--;
    }
    if (r.len > 0 || !is_output(&r))
      print_rec(o, &r, timestamps);
  }
}

static void held_clear(struct held *h) {
  for (size_t i = 0; i < h->n; i++)
    free((char *)h->v[i].data);
  free(h->v);
}

/* -f: the sandbox is still there to write (its supervisor lives). */
static bool supervisor_alive(int statefd, const char *id) {
  agsx_error_t err = NULL;
  struct agsx_record r;
  if (agsx_record_read(statefd, id, &r, &err) < 0) {
    agsx_error_free(&err);
    return false;
  }
  int fd = r.status == AGSX_STATUS_RUNNING ? agsx_proc_ref_pidfd(&r.supervisor) : -1;
  agsx_record_clear(&r);
  if (fd < 0)
    return false;
  close(fd);
  return true;
}

static int follow(int statefd, const char *id, struct agsx_log_reader *rd, struct out *o,
                  const struct lflags *f) {
  for (;;) {
    agsx_error_t err = NULL;
    struct agsx_log_rec r;
    int n = agsx_log_next(rd, &r, &err);
    if (n < 0)
      return agsx_fail(&err);
    if (n == 2 || o->broken)
      return 0;
    if (n == 1) {
      print_rec(o, &r, f->timestamps);
      continue;
    }
    if (!f->follow)
      return 0;
    struct pollfd p = {.fd = agsx_log_reader_fd(rd), .events = POLLIN};
    if (poll(&p, 1, FOLLOW_CHECK_MS) == 0 && !supervisor_alive(statefd, id)) {
      /* Gone without an end (killed): what it wrote is all there is. */
      while (agsx_log_next(rd, &r, &err) == 1)
        print_rec(o, &r, f->timestamps);
      agsx_error_free(&err);
      return 0;
    }
  }
}

int agsx_cmd_logs(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  struct lflags f = {0};
  int i = agsx_parse_options(cmd, argc, argv, on_lopt, &f);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i + 1 != argc)
    return agsx_failf("logs: expected one SANDBOX (see agsx logs --help)");
  if (f.network && (f.follow || f.tail_set || f.exec || f.timestamps))
    return agsx_failf("logs: --network goes alone (with --json at most)");
  if (f.network)
    return agsx_cmd_netlog_show(ctx, argv[i], f.json || ctx->json);
  if (f.json)
    return agsx_failf("logs: --json goes with --network");
  agsx_error_t err = NULL;
  _cleanup_close_ int statefd = agsx_cmd_state_open(ctx);
  char id[33];
  struct agsx_log_reader *rd = NULL;
  if (agsx_cmd_lookup_id(statefd, argv[i], id, &err) < 0)
    return agsx_fail(&err);
  int opened = f.exec ? agsx_process_log_open(statefd, id, (uint32_t)strtoul(f.exec, NULL, 10),
                                              AGSX_LOG_FROM_START, &rd, &err)
                      : agsx_sandbox_log_open(statefd, id, AGSX_LOG_FROM_START, &rd, &err);
  if (opened < 0)
    return agsx_fail(&err);
  struct out o = {.at_line_start = {true, true, true}};
  int rc = 0;
  if (f.tail_set) {
    struct held h = {0};
    struct agsx_log_rec r;
    int n;
    while ((n = agsx_log_next(rd, &r, &err)) == 1)
      hold(&h, &r);
    print_tail(&o, &h, f.tail, f.timestamps);
    held_clear(&h);
    if (n < 0)
      rc = agsx_fail(&err);
    else if (n == 0 && f.follow)
      rc = follow(statefd, id, rd, &o, &f);
  } else {
    rc = follow(statefd, id, rd, &o, &f);
  }
  agsx_log_reader_free(rd);
  return rc;
}
