/* agsx — util: inotify instances shared by many watchers (see inotify.h).
 *
 * Structures: the hub has instances and groups; an instance has a table of
 * its kernel watches by wd; a watch has its subscribers. While an instance
 * delivers events (busy), a subscription removed from a callback is only
 * marked dead and the instance dirty; the instance is swept when the
 * delivery is over, so no callback ever sees freed memory. */
#include "config.h"

#include "util/inotify.h"

#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>

#define WD_BUCKETS 1024
#define IDLE_CLOSE_NS (2 * 1000000000LL) /* the kernel has let the marks go by then */
#define READ_ROUNDS 64                   /* reads of one instance per dispatch */

struct inst;
struct group;

struct watch {
  struct watch *hnext; /* in its instance's table, until freed */
  struct inst *in;
  int wd;
  struct agsx_inotify_sub *subs;
  unsigned live; /* subscribers not dead */
  bool gone;     /* IN_IGNORED came: the kernel removed it (its number is not reused) */
};

struct agsx_inotify_sub {
  struct agsx_inotify_sub *next;
  struct watch *w;
  struct group *g;
  agsx_inotify_fn fn;
  void *data;
  uint32_t mask;
  bool dead;
};

struct inst {
  struct inst *next;
  int fd;
  unsigned groups, watches;
  int64_t idle_ns; /* without a watch since (CLOCK_MONOTONIC); 0: has some */
  unsigned busy;
  bool dirty; /* something was removed while busy */
  struct watch *bucket[WD_BUCKETS];
};

struct group {
  struct group *next;
  struct agsx_inotify *h;
  char *key;
  struct inst *in;
  unsigned subs;
};

struct agsx_inotify {
  int efd;
  struct agsx_inotify_budget b;
  struct inst *insts;
  unsigned n_insts, watches;
  struct group *groups;
};

/* ---- the budget ------------------------------------------------------------------------ */

static unsigned read_sysctl(const char *path, unsigned dflt) {
  char buf[32];
  _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
  if (n <= 0)
    return dflt;
  buf[n] = '\0';
  char *end;
  unsigned long v = strtoul(buf, &end, 10);
  return end == buf || v == 0 || v > 1u << 30 ? dflt : (unsigned)v;
}

void agsx_inotify_budget_host(struct agsx_inotify_budget *ret) {
  /* The kernel's defaults: 128 instances, 8192 watches at least. */
  unsigned inst = read_sysctl("/proc/sys/fs/inotify/max_user_instances", 128);
  unsigned watches = read_sysctl("/proc/sys/fs/inotify/max_user_watches", 8192);
  ret->instances = inst / 8 ? inst / 8 : 1;
  ret->watches = watches / 8 > 64 ? watches / 8 : 64;
}

/* ---- instances, groups, the table ------------------------------------------------------ */

static unsigned bucket_of(int wd) { return (unsigned)wd % WD_BUCKETS; }

static struct watch *find(struct inst *in, int wd) {
  for (struct watch *w = in->bucket[bucket_of(wd)]; w; w = w->hnext)
    if (w->wd == wd)
      return w;
  return NULL;
}

static void unlist(struct agsx_inotify *h, struct watch *w) {
  for (struct watch **p = &w->in->bucket[bucket_of(w->wd)]; *p; p = &(*p)->hnext)
    if (*p == w) {
      *p = w->hnext;
      break;
    }
  w->hnext = NULL;
  w->in->watches--;
  h->watches--;
  if (w->in->watches == 0)
    w->in->idle_ns = agsx_mono_ns();
}

static struct inst *inst_new(struct agsx_inotify *h, agsx_error_t *err) {
  int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno,
                          errno == EMFILE ? "inotify: no instance left (the host's "
                                            "fs.inotify.max_user_instances is reached)"
                                          : "inotify_init"),
           NULL;
  struct inst *in = xzalloc(sizeof(*in));
  in->fd = fd;
  in->idle_ns = agsx_mono_ns();
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = in};
  if (epoll_ctl(h->efd, EPOLL_CTL_ADD, fd, &ev) < 0) {
    agsx_error_set(err, errno, "epoll_ctl");
    close(fd);
    free(in);
    return NULL;
  }
  in->next = h->insts;
  h->insts = in;
  h->n_insts++;
  return in;
}

static void inst_close(struct agsx_inotify *h, struct inst *in) {
  for (struct inst **p = &h->insts; *p; p = &(*p)->next)
    if (*p == in) {
      *p = in->next;
      break;
    }
  h->n_insts--;
  epoll_ctl(h->efd, EPOLL_CTL_DEL, in->fd, NULL);
  close(in->fd);
  free(in);
}

/* A group's instance: its own while the budget allows, else the least
 * loaded one. */
static struct inst *inst_for_group(struct agsx_inotify *h, agsx_error_t *err) {
  struct inst *spare = NULL, *least = NULL;
  for (struct inst *in = h->insts; in; in = in->next) {
    if (in->groups == 0 && spare == NULL)
      spare = in;
    if (least == NULL || in->watches < least->watches)
      least = in;
  }
  if (spare)
    return spare;
  if (h->n_insts < h->b.instances) {
    _cleanup_error_ agsx_error_t e = NULL;
    struct inst *in = inst_new(h, &e);
    if (in)
      return in;
    if (least == NULL) {
      agsx_error_free(err);
      *err = steal_ptr(&e);
      return NULL;
    }
  }
  if (least == NULL)
    agsx_error_set(err, ENOSPC, "inotify: no instance");
  return least;
}

static struct group *group_get(struct agsx_inotify *h, const char *key) {
  for (struct group *g = h->groups; g; g = g->next)
    if (strcmp(g->key, key) == 0)
      return g;
  struct group *g = xzalloc(sizeof(*g));
  g->h = h;
  g->key = xstrdup(key);
  g->next = h->groups;
  h->groups = g;
  return g;
}

static void group_drop(struct agsx_inotify *h, struct group *g) {
  if (g->subs > 0)
    return;
  for (struct group **p = &h->groups; *p; p = &(*p)->next)
    if (*p == g) {
      *p = g->next;
      break;
    }
  if (g->in)
    g->in->groups--;
  free(g->key);
  free(g);
}

/* ---- subscriptions --------------------------------------------------------------------- */

int agsx_inotify_add(struct agsx_inotify *h, const char *group, unsigned group_max, int fd,
                     uint32_t mask, agsx_inotify_fn fn, void *data, struct agsx_inotify_sub **ret,
                     agsx_error_t *err) {
  struct group *g = group_get(h, group);
  if (group_max && g->subs >= group_max) {
    group_drop(h, g);
    return agsx_error_set_quiet(err, ENOSPC, "inotify: `%s` has %u watches, its most", group,
                                group_max);
  }
  if (h->watches >= h->b.watches) {
    group_drop(h, g);
    return agsx_error_set_quiet(err, ENOSPC,
                                "inotify: this process's share of the host's watches (%u, an "
                                "eighth of fs.inotify.max_user_watches) is used up",
                                h->b.watches);
  }
  if (g->in == NULL) {
    g->in = inst_for_group(h, err);
    if (g->in == NULL) {
      group_drop(h, g);
      return -1;
    }
    g->in->groups++;
  }
  struct inst *in = g->in;
  char proc[64];
  snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
  /* IN_MASK_ADD: another subscriber's events stay asked for. */
  int wd = inotify_add_watch(in->fd, proc, mask | IN_MASK_ADD);
  if (wd < 0) {
    int e = errno;
    group_drop(h, g);
    if (e == ENOSPC)
      return agsx_error_set_quiet(err, ENOSPC,
                                  "inotify: the host's fs.inotify.max_user_watches is reached");
    return agsx_error_set(err, e, "inotify_add_watch");
  }
  struct watch *w = find(in, wd);
  if (w == NULL) {
    w = xzalloc(sizeof(*w));
    w->in = in;
    w->wd = wd;
    w->hnext = in->bucket[bucket_of(wd)];
    in->bucket[bucket_of(wd)] = w;
    in->watches++;
    in->idle_ns = 0;
    h->watches++;
  }
  struct agsx_inotify_sub *s = xzalloc(sizeof(*s));
  s->w = w;
  s->g = g;
  s->fn = fn;
  s->data = data;
  s->mask = mask & IN_ALL_EVENTS;
  s->next = w->subs;
  w->subs = s;
  w->live++;
  g->subs++;
  *ret = s;
  return 0;
}

int agsx_inotify_wd(const struct agsx_inotify_sub *s) { return s->w->wd; }

/* Frees W's dead subscribers and, with no live one left, W itself (its
 * kernel watch removed first unless the kernel did). Not while W's
 * instance delivers. */
static void watch_sweep(struct agsx_inotify *h, struct watch *w) {
  for (struct agsx_inotify_sub **p = &w->subs; *p;) {
    struct agsx_inotify_sub *s = *p;
    if (s->dead) {
      *p = s->next;
      free(s);
    } else {
      p = &s->next;
    }
  }
  if (w->live > 0)
    return;
  if (!w->gone)
    inotify_rm_watch(w->in->fd, w->wd); /* its IN_IGNORED then finds no watch */
  unlist(h, w);
  free(w);
}

void agsx_inotify_rm(struct agsx_inotify_sub *s) {
  if (s == NULL || s->dead)
    return;
  struct watch *w = s->w;
  struct group *g = s->g;
  struct agsx_inotify *h = g->h;
  s->dead = true;
  w->live--;
  g->subs--;
  s->g = NULL;
  if (w->in->busy)
    w->in->dirty = true;
  else
    watch_sweep(h, w);
  group_drop(h, g);
}

/* ---- the hub ---------------------------------------------------------------------------- */

int agsx_inotify_new(const struct agsx_inotify_budget *budget, struct agsx_inotify **ret,
                     agsx_error_t *err) {
  struct agsx_inotify *h = xzalloc(sizeof(*h));
  if (budget)
    h->b = *budget;
  else
    agsx_inotify_budget_host(&h->b);
  if (h->b.instances == 0)
    h->b.instances = 1;
  h->efd = epoll_create1(EPOLL_CLOEXEC);
  if (h->efd < 0) {
    free(h);
    return agsx_error_set(err, errno, "epoll_create1");
  }
  *ret = h;
  return 0;
}

void agsx_inotify_free(struct agsx_inotify *h) {
  if (h == NULL)
    return;
  while (h->insts) {
    struct inst *in = h->insts;
    for (unsigned i = 0; i < WD_BUCKETS; i++)
      while (in->bucket[i]) {
        struct watch *w = in->bucket[i];
        in->bucket[i] = w->hnext;
        while (w->subs) {
          struct agsx_inotify_sub *s = w->subs;
          w->subs = s->next;
          free(s);
        }
        free(w);
      }
    inst_close(h, in);
  }
  while (h->groups) {
    struct group *g = h->groups;
    h->groups = g->next;
    free(g->key);
    free(g);
  }
  close(h->efd);
  free(h);
}

int agsx_inotify_fd(const struct agsx_inotify *h) { return h->efd; }

/* Every live subscriber of W whose mask asks for EV. */
static void deliver(struct watch *w, const struct inotify_event *ev) {
  uint32_t always = IN_IGNORED | IN_Q_OVERFLOW | IN_UNMOUNT;
  for (struct agsx_inotify_sub *s = w->subs; s; s = s->next)
    if (!s->dead && s->fn && (ev->mask & (s->mask | always)))
      s->fn(s->data, ev);
}

/* After a delivery: what callbacks removed meanwhile goes now. */
static void sweep(struct agsx_inotify *h, struct inst *in) {
  in->dirty = false;
  for (unsigned i = 0; i < WD_BUCKETS; i++)
    for (struct watch *w = in->bucket[i], *next; w; w = next) {
      next = w->hnext;
      struct agsx_inotify_sub *s = w->subs;
      while (s && !s->dead)
        s = s->next;
      if (s || w->live == 0)
        watch_sweep(h, w);
    }
}

static void on_event(struct agsx_inotify *h, struct inst *in, const struct inotify_event *ev) {
  if (ev->mask & IN_Q_OVERFLOW) {
    for (unsigned i = 0; i < WD_BUCKETS; i++)
      for (struct watch *w = in->bucket[i]; w; w = w->hnext)
        deliver(w, ev);
    return;
  }
  struct watch *w = find(in, ev->wd);
  if (w == NULL)
    return;
  deliver(w, ev);
  /* The kernel removed it (its inode went): not ours to remove any more;
   * it stays listed until its last subscriber lets go. */
  if (ev->mask & IN_IGNORED)
    w->gone = true;
  (void)h;
}

static void read_inst(struct agsx_inotify *h, struct inst *in) {
  char buf[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
  in->busy++;
  for (int rounds = 0; rounds < READ_ROUNDS; rounds++) {
    ssize_t n = read(in->fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    for (ssize_t off = 0; off + (ssize_t)sizeof(struct inotify_event) <= n;) {
      const struct inotify_event *ev = (const struct inotify_event *)(buf + off);
      on_event(h, in, ev);
      off += (ssize_t)(sizeof(*ev) + ev->len);
    }
  }
  in->busy--;
  if (in->dirty)
    sweep(h, in);
}

void agsx_inotify_dispatch(struct agsx_inotify *h) {
  struct epoll_event evs[16];
  int n = epoll_wait(h->efd, evs, AGSX_ARRAY_SIZE(evs), 0);
  for (int i = 0; i < n; i++)
    read_inst(h, evs[i].data.ptr);
  int64_t now = agsx_mono_ns();
  for (struct inst *in = h->insts, *next; in; in = next) {
    next = in->next;
    if (in->groups == 0 && in->watches == 0 && in->idle_ns && now - in->idle_ns >= IDLE_CLOSE_NS)
      inst_close(h, in);
  }
}

int agsx_inotify_timeout_ms(const struct agsx_inotify *h) {
  int64_t now = agsx_mono_ns(), best = -1;
  for (const struct inst *in = h->insts; in; in = in->next) {
    if (in->groups || in->watches || in->idle_ns == 0)
      continue;
    int64_t left = in->idle_ns + IDLE_CLOSE_NS - now;
    if (left < 0)
      left = 0;
    if (best < 0 || left < best)
      best = left;
  }
  return best < 0 ? -1 : (int)((best + 999999) / 1000000);
}

void agsx_inotify_usage(const struct agsx_inotify *h, const char *group, unsigned *ret_instances,
                        unsigned *ret_watches, unsigned *ret_group_watches) {
  if (ret_instances)
    *ret_instances = h->n_insts;
  if (ret_watches)
    *ret_watches = h->watches;
  if (ret_group_watches) {
    *ret_group_watches = 0;
    for (const struct group *g = h->groups; group && g; g = g->next)
      if (strcmp(g->key, group) == 0)
        *ret_group_watches = g->subs;
  }
}
