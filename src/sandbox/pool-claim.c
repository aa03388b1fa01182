/* agsx — sandbox: warm pools (see pool.h), the claimer's side: the
 * claim's wire form (encoded by a claimer, and by the supervisor for its
 * init; decoded by the supervisor, bounded by AGSX_CLAIM_MAX and
 * AGSX_CONTROL_ARGS_MAX: fuzzed, test/fuzz/fuzz_claim.c), the claim of a
 * parked sandbox (run --pool, serve) and an attached claim's wait for its
 * command's end. Invariant: the claimer holds the exclusive flock of the
 * parked/<id> entry it claims, checked still linked and running the
 * image's current digest, from before its request until the answer, and
 * the supervisor unlinks the entry before it answers: two claimers never
 * get the same sandbox. */
#include "config.h"

#include "sandbox/pool-internal.h"
#include "sandbox/control.h"
#include "sandbox/sync.h"
#include "state/state.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define CLAIM_MAGIC "AGSXCLAIM1"
#define CLAIM_REPLY_MS 60000 /* a claim's exec on a loaded machine */

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

void agsx_pool_claim_addr(int dirfd, struct sockaddr_un *a) {
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
  agsx_pool_claim_addr(dir, &a);
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
  _cleanup_close_ int pooldir = agsx_pool_open_dir(state, pc->name, err);
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
  _cleanup_free_ char *digest = agsx_pool_resolve_digest(root, pc->image, &e);
  agsx_error_free(&e);
  _cleanup_strv_ char **ids = agsx_pool_list_entries(parked);
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
