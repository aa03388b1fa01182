/* agsx — fsops: inotify watchers (WatchDir, CreateWatcher) and the
 * registry of polling watchers (see fsops.h).
 *
 * A directory is watched through /proc/self/fd/N of an fd opened safely
 * inside the sandbox's root: inotify_add_watch never walks a sandbox path.
 * Watches are subscriptions of the pool's hub (util/inotify.h: instances
 * shared per sandbox, within a part of the host's limits), not instances of
 * their own. Each watch descriptor remembers its directory relative to
 * the watched one, so event names come out relative ("sub/b.txt"). */
#include "config.h"

#include "api/fsops-internal.h"
#include "util/inotify.h"

#include <limits.h>
#include <poll.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#define WATCH_MASK                                                                                 \
  (IN_CREATE | IN_MOVED_TO | IN_MODIFY | IN_DELETE | IN_DELETE_SELF | IN_MOVED_FROM |              \
   IN_MOVE_SELF | IN_ATTRIB | IN_ONLYDIR)
#define WALK_MAX_DEPTH 64 /* directory levels added at once (one fd each) */

struct wdir {
  int wd;
  char *rel; /* "" for the watched directory itself */
  struct agsx_inotify_sub *sub;
};

struct watch_count {
  char id[33];
  unsigned n;
};

struct agsx_fs_watch_pool {
  struct agsx_inotify *hub;
  unsigned per_sandbox, total, watches_per_sandbox;
  unsigned n;
  struct watch_count *v; /* watchers per sandbox */
  size_t nv;
};

struct agsx_fs_watch {
  struct agsx_fs_watch_pool *pool;
  bool counted;
  struct agsx_fs_ctx *c;
  char *abs;
  unsigned flags;
  struct wdir *dirs;
  size_t ndirs, cap;
  struct agsx_fs_event *q; /* a ring of AGSX_FS_WATCH_QUEUE */
  size_t qhead, qlen;
  bool overflow, gone, ended;
  uint32_t upload_cookie; /* an upload's temp file moved away: its rename into place */
};

bool agsx_fs_network_fs(unsigned long f_type) {
  switch (f_type) {
  case 0x6969:     /* NFS */
  case 0xff534d42: /* CIFS */
  case 0x517b:     /* SMB */
  case 0xfe534d42: /* SMB2 */
  case 0x65735546: /* FUSE */ return true;
  }
  return false;
}

const char *agsx_fs_event_type_name(enum agsx_fs_event_type t) {
  switch (t) {
  case AGSX_FS_EVENT_CREATE: return "EVENT_TYPE_CREATE";
  case AGSX_FS_EVENT_WRITE: return "EVENT_TYPE_WRITE";
  case AGSX_FS_EVENT_REMOVE: return "EVENT_TYPE_REMOVE";
  case AGSX_FS_EVENT_RENAME: return "EVENT_TYPE_RENAME";
  case AGSX_FS_EVENT_CHMOD: return "EVENT_TYPE_CHMOD";
  }
  return "EVENT_TYPE_UNSPECIFIED";
}

void agsx_fs_event_clear(struct agsx_fs_event *e) {
  if (e == NULL)
    return;
  free(e->name);
  agsx_fs_entry_clear(&e->entry);
  memset(e, 0, sizeof(*e));
}

void agsx_fs_event_gen(yajl_gen g, const struct agsx_fs_event *e) {
  yajl_gen_map_open(g);
  fs_gen_text(g, "name", e->name);
  agsx_json_kv_str(g, "type", agsx_fs_event_type_name(e->type));
  if (e->has_entry) {
    agsx_json_key(g, "entry");
    agsx_fs_entry_gen(g, &e->entry);
  }
  yajl_gen_map_close(g);
}

static struct watch_count *count_of(struct agsx_fs_watch_pool *p, const char *id, bool make) {
  for (size_t i = 0; i < p->nv; i++)
    if (strcmp(p->v[i].id, id) == 0)
      return &p->v[i];
  if (!make)
    return NULL;
  p->v = xrealloc(p->v, (p->nv + 1) * sizeof(*p->v));
  struct watch_count *c = &p->v[p->nv++];
  snprintf(c->id, sizeof(c->id), "%s", id);
  c->n = 0;
  return c;
}

static void uncount(struct agsx_fs_watch *w) {
  if (!w->counted)
    return;
  struct agsx_fs_watch_pool *p = w->pool;
  struct watch_count *c = count_of(p, w->c->sandbox_id, false);
  if (c && --c->n == 0)
    *c = p->v[--p->nv];
  p->n--;
  w->counted = false;
}

struct agsx_fs_watch_pool *agsx_fs_watch_pool_new(struct agsx_inotify *hub, unsigned per_sandbox,
                                                  unsigned total, unsigned watches_per_sandbox) {
  struct agsx_fs_watch_pool *p = xzalloc(sizeof(*p));
  p->hub = hub;
  p->per_sandbox = per_sandbox;
  p->total = total;
  p->watches_per_sandbox = watches_per_sandbox;
  return p;
}

void agsx_fs_watch_pool_free(struct agsx_fs_watch_pool *p) {
  if (p == NULL)
    return;
  free(p->v);
  free(p);
}

unsigned agsx_fs_watch_pool_count(const struct agsx_fs_watch_pool *p, const char *sandbox_id) {
  if (sandbox_id == NULL)
    return p->n;
  for (size_t i = 0; i < p->nv; i++)
    if (strcmp(p->v[i].id, sandbox_id) == 0)
      return p->v[i].n;
  return 0;
}

void agsx_fs_watch_free(struct agsx_fs_watch *w) {
  if (w == NULL)
    return;
  for (size_t i = 0; i < w->ndirs; i++) {
    agsx_inotify_rm(w->dirs[i].sub);
    free(w->dirs[i].rel);
  }
  uncount(w);
  free(w->dirs);
  for (size_t i = 0; i < w->qlen; i++)
    agsx_fs_event_clear(&w->q[(w->qhead + i) % AGSX_FS_WATCH_QUEUE]);
  free(w->q);
  free(w->abs);
  agsx_fs_close(w->c);
  free(w);
}

static void watch_freep(struct agsx_fs_watch **w) {
  agsx_fs_watch_free(*w);
  *w = NULL;
}

int agsx_fs_watch_fd(const struct agsx_fs_watch *w) { return agsx_inotify_fd(w->pool->hub); }

/* The sandbox's init exited (its pidfd is readable). */
static bool sandbox_ended(const struct agsx_fs_watch *w) {
  struct pollfd p = {.fd = w->c->pidfd, .events = POLLIN};
  return w->c->pidfd >= 0 && poll(&p, 1, 0) == 1;
}

static struct wdir *find_wd(struct agsx_fs_watch *w, int wd) {
  for (size_t i = 0; i < w->ndirs; i++)
    if (w->dirs[i].wd == wd)
      return &w->dirs[i];
  return NULL;
}

static void drop_wd(struct agsx_fs_watch *w, int wd) {
  struct wdir *d = find_wd(w, wd);
  if (d == NULL)
    return;
  agsx_inotify_rm(d->sub);
  free(d->rel);
  *d = w->dirs[--w->ndirs];
}

static void on_inotify(void *data, const struct inotify_event *ev);

/* Watches the directory FD (opened safely) as REL. */
static int add_dir(struct agsx_fs_watch *w, int fd, const char *rel, agsx_error_t *err) {
  if (w->ndirs >= AGSX_FS_WATCH_MAX_DIRS)
    return agsx_error_set_quiet(err, E2BIG, "watching %s: more than %u directories", w->abs,
                                AGSX_FS_WATCH_MAX_DIRS);
  struct agsx_inotify_sub *sub = NULL;
  _cleanup_error_ agsx_error_t e = NULL;
  if (agsx_inotify_add(w->pool->hub, w->c->sandbox_id, w->pool->watches_per_sandbox, fd, WATCH_MASK,
                       on_inotify, w, &sub, &e) < 0) {
    if (agsx_error_errno(&e) == ENOSPC)
      return agsx_error_set_quiet(err, ENOSPC,
                                  "watching %s: %s (watchers of this sandbox watch %u "
                                  "directories at most)",
                                  w->abs, e->msg, w->pool->watches_per_sandbox);
    return agsx_error_set(err, agsx_error_errno(&e), "error adding path %s to watcher: %s", w->abs,
                          e->msg);
  }
  int wd = agsx_inotify_wd(sub);
  struct wdir *old = find_wd(w, wd); /* the same directory reached twice */
  if (old) {
    agsx_inotify_rm(sub);
    free(old->rel);
    old->rel = xstrdup(rel);
    return 0;
  }
  if (w->ndirs == w->cap) {
    w->cap = w->cap ? w->cap * 2 : 16;
    w->dirs = xrealloc(w->dirs, w->cap * sizeof(*w->dirs));
  }
  w->dirs[w->ndirs++] = (struct wdir){.wd = wd, .rel = xstrdup(rel), .sub = sub};
  return 0;
}

static char *rel_join(const char *rel, const char *name) {
  return *rel ? xasprintf("%s/%s", rel, name) : xstrdup(name);
}

/* Watches FD's subdirectories, depth first, never following a symlink. */
static int add_tree(struct agsx_fs_watch *w, int fd, const char *rel, unsigned depth,
                    agsx_error_t *err) {
  if (depth >= WALK_MAX_DEPTH)
    return 0;
  _cleanup_dir_ DIR *d = agsx_dir_stream(fd);
  if (d == NULL)
    return 0; /* vanished meanwhile */
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN)
      continue;
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    _cleanup_close_ int sub = agsx_copy_open_child(fd, de->d_name, O_RDONLY | O_DIRECTORY, 0);
    struct stat st;
    if (sub < 0 || fstat(sub, &st) < 0 || !fs_sandbox_may(w->c, &st, R_OK | X_OK))
      continue; /* a host directory the sandbox may not read is not watched */
    _cleanup_free_ char *r = rel_join(rel, de->d_name);
    if (add_dir(w, sub, r, err) < 0 || add_tree(w, sub, r, depth + 1, err) < 0)
      return -1;
  }
  return 0;
}

/* The pool's bounds on watchers, checked before anything is opened. */
static int count_in(struct agsx_fs_watch *w, agsx_error_t *err) {
  struct agsx_fs_watch_pool *p = w->pool;
  struct watch_count *c = count_of(p, w->c->sandbox_id, false);
  if (p->n >= p->total)
    return agsx_error_set_quiet(
        err, ENOSPC, "too many watchers on this server (at most %u): remove some", p->total);
  if (c && c->n >= p->per_sandbox)
    return agsx_error_set_quiet(
        err, ENOSPC, "too many watchers of this sandbox (at most %u): remove some", p->per_sandbox);
  count_of(p, w->c->sandbox_id, true)->n++;
  p->n++;
  w->counted = true;
  return 0;
}

int agsx_fs_watch_open(struct agsx_fs_watch_pool *pool, struct agsx_fs_ctx *c, const char *path,
                       unsigned flags, struct agsx_fs_watch **ret, agsx_error_t *err) {
  _cleanup_(watch_freep) struct agsx_fs_watch *w = xzalloc(sizeof(*w));
  w->pool = pool;
  w->c = fs_ctx_ref(c);
  if (count_in(w, err) < 0)
    return -1;
  w->flags = flags;
  w->abs = agsx_fs_path(c, path, err);
  if (w->abs == NULL)
    return -1;
  _cleanup_close_ int fd = fs_open(c, w->abs, O_RDONLY | O_DIRECTORY | AGSX_O_UNTRUSTED);
  if (fd < 0 && errno == ENOTDIR) {
    _cleanup_close_ int any = fs_open(c, w->abs, O_PATH);
    if (any >= 0)
      return agsx_error_set_quiet(err, EINVAL, "path %s not a directory", w->abs);
  }
  if (fd < 0 && (errno == ENOENT || errno == ENOTDIR))
    return agsx_error_set_quiet(err, ENOENT, "path %s not found", w->abs);
  if (fd < 0)
    return agsx_error_set(err, errno, "error statting path %s", w->abs);
  if (fs_check_may(c, fd, R_OK | X_OK, w->abs, err) < 0 || fs_check_search(c, w->abs, err) < 0)
    return -1;
  struct statfs sfs;
  if (!(flags & AGSX_FS_WATCH_NETWORK_MOUNTS) && fstatfs(fd, &sfs) == 0 &&
      agsx_fs_network_fs((unsigned long)sfs.f_type))
    return agsx_error_set_quiet(err, EINVAL, "cannot watch path on network filesystem: %s", w->abs);
  w->q = xzalloc(AGSX_FS_WATCH_QUEUE * sizeof(*w->q));
  if (add_dir(w, fd, "", err) < 0)
    return -1;
  if ((flags & AGSX_FS_WATCH_RECURSIVE) && add_tree(w, fd, "", 0, err) < 0)
    return -1;
  *ret = steal_ptr(&w);
  return 0;
}

static void push(struct agsx_fs_watch *w, const char *name, enum agsx_fs_event_type t) {
  if (w->qlen >= AGSX_FS_WATCH_QUEUE) {
    w->overflow = true;
    return;
  }
  struct agsx_fs_event *e = &w->q[(w->qhead + w->qlen++) % AGSX_FS_WATCH_QUEUE];
  memset(e, 0, sizeof(*e));
  e->name = xstrdup(name);
  e->type = t;
  /* A removed or renamed path's entry is gone: a stat now could show what
   * took its place (envd's opCarriesEntry). */
  if (!(w->flags & AGSX_FS_WATCH_ENTRY) || t == AGSX_FS_EVENT_REMOVE || t == AGSX_FS_EVENT_RENAME)
    return;
  _cleanup_free_ char *abs = strcmp(name, ".") == 0
                                 ? xstrdup(w->abs)
                                 : xasprintf("%s/%s", strcmp(w->abs, "/") ? w->abs : "", name);
  _cleanup_error_ agsx_error_t e2 = NULL;
  e->has_entry = fs_stat_abs(w->c, abs, &e->entry, &e2) == 0;
}

/* A directory created or moved in below a recursive watch: watch it and
 * what it holds. Opened by its path in the root, never through a symlink
 * at its end. */
static void watch_new_dir(struct agsx_fs_watch *w, const char *rel) {
  _cleanup_free_ char *abs = xasprintf("%s/%s", strcmp(w->abs, "/") ? w->abs : "", rel);
  _cleanup_close_ int fd = fs_open(w->c, abs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0 || !fs_sandbox_may(w->c, &st, R_OK | X_OK))
    return;
  _cleanup_error_ agsx_error_t err = NULL;
  if (add_dir(w, fd, rel, &err) < 0 || add_tree(w, fd, rel, 0, &err) < 0) {
    agsx_warn("watch %s: %s", w->abs, err->msg);
    w->overflow = true; /* events below it would be lost silently otherwise */
  }
}

/* An unnamed (O_TMPFILE) file's events carry the name "#INODE"; one that
 * names no entry is an upload's data, not to be shown. */
static bool tmpfile_name(const struct agsx_fs_watch *w, const char *rel) {
  const char *base = strrchr(rel, '/') ? strrchr(rel, '/') + 1 : rel;
  if (base[0] != '#' || base[1] == '\0' || strspn(base + 1, "0123456789") != strlen(base + 1))
    return false;
  _cleanup_free_ char *abs = xasprintf("%s/%s", strcmp(w->abs, "/") ? w->abs : "", rel);
  _cleanup_close_ int fd = fs_open(w->c, abs, O_PATH | O_NOFOLLOW);
  return fd < 0 && errno == ENOENT;
}

/* The hub's callback: one event of one of W's directories (or an
 * overflow of W's instance, which lost events of W's too). */
static void on_inotify(void *data, const struct inotify_event *ev) {
  struct agsx_fs_watch *w = data;
  if (ev->mask & IN_Q_OVERFLOW) {
    w->overflow = true;
    return;
  }
  struct wdir *d = find_wd(w, ev->wd);
  if (d == NULL)
    return;
  bool top = d->rel[0] == '\0';
  if (ev->mask & IN_IGNORED) {
    if (top)
      w->gone = true;
    drop_wd(w, ev->wd);
    return;
  }
  bool self = ev->len == 0 || ev->name[0] == '\0';
  if (self && !top) { /* its parent reports it; a moved directory is re-added there */
    if (ev->mask & IN_MOVE_SELF)
      drop_wd(w, ev->wd);
    return;
  }
  _cleanup_free_ char *name = self ? xstrdup(".") : rel_join(d->rel, ev->name);
  if (!self && (fs_is_upload_temp(ev->name) || tmpfile_name(w, name))) {
    /* An upload's temp: only its rename into place shows. */
    if (ev->mask & IN_MOVED_FROM)
      w->upload_cookie = ev->cookie;
    return;
  }
  if ((ev->mask & IN_MOVED_TO) && ev->cookie && ev->cookie == w->upload_cookie) {
    /* An upload put in place: what envd's write in place shows. */
    w->upload_cookie = 0;
    push(w, name, AGSX_FS_EVENT_CREATE);
    push(w, name, AGSX_FS_EVENT_WRITE);
    return;
  }
  if (ev->mask & (IN_CREATE | IN_MOVED_TO))
    push(w, name, AGSX_FS_EVENT_CREATE);
  if (ev->mask & (IN_MOVED_FROM | IN_MOVE_SELF))
    push(w, name, AGSX_FS_EVENT_RENAME);
  if (ev->mask & IN_ATTRIB)
    push(w, name, AGSX_FS_EVENT_CHMOD);
  if (ev->mask & IN_MODIFY)
    push(w, name, AGSX_FS_EVENT_WRITE);
  if (ev->mask & (IN_DELETE | IN_DELETE_SELF))
    push(w, name, AGSX_FS_EVENT_REMOVE);
  if ((w->flags & AGSX_FS_WATCH_RECURSIVE) && (ev->mask & IN_ISDIR) &&
      (ev->mask & (IN_CREATE | IN_MOVED_TO)))
    watch_new_dir(w, name);
}

/* The sandbox's init exited: W stops, and lets go of the sandbox's inodes
 * at its free; what was queued is still returned. */
static void check_end(struct agsx_fs_watch *w) {
  if (!w->ended && sandbox_ended(w))
    w->ended = true;
}

void agsx_fs_watch_dispatch(struct agsx_fs_watch *w) {
  check_end(w);
  agsx_inotify_dispatch(w->pool->hub);
}

int agsx_fs_watch_next(struct agsx_fs_watch *w, struct agsx_fs_event *ret, agsx_error_t *err) {
  if (w->qlen > 0) {
    *ret = w->q[w->qhead];
    memset(&w->q[w->qhead], 0, sizeof(w->q[w->qhead]));
    w->qhead = (w->qhead + 1) % AGSX_FS_WATCH_QUEUE;
    w->qlen--;
    return 1;
  }
  if (w->overflow)
    return agsx_error_set_quiet(err, ENOBUFS, "watcher of %s overflowed: events were lost", w->abs);
  if (w->ended)
    return agsx_error_set_quiet(err, ESRCH, "sandbox `%.12s` is not running", w->c->sandbox_id);
  if (w->gone)
    return agsx_error_set_quiet(err, ENOENT, "watched directory %s was removed", w->abs);
  return 0;
}

/* ---- the registry of polling watchers ------------------------------------------------------ */

struct slot {
  char id[33];
  char sandbox_id[33];
  struct agsx_fs_watch *w;
  int64_t used_ns; /* monotonic */
};

struct agsx_fs_watchers {
  struct slot *v;
  size_t n, max;
  int idle_ms;
  int64_t next_end_check_ns;
};

struct agsx_fs_watchers *agsx_fs_watchers_new(size_t max, int idle_ms) {
  struct agsx_fs_watchers *r = xzalloc(sizeof(*r));
  r->max = max ? max : 1;
  r->idle_ms = idle_ms > 0 ? idle_ms : 1;
  r->v = xzalloc(r->max * sizeof(*r->v));
  return r;
}

static void slot_drop(struct agsx_fs_watchers *r, size_t i) {
  agsx_fs_watch_free(r->v[i].w);
  r->v[i] = r->v[--r->n];
  memset(&r->v[r->n], 0, sizeof(r->v[r->n]));
}

void agsx_fs_watchers_free(struct agsx_fs_watchers *r) {
  if (r == NULL)
    return;
  while (r->n > 0)
    slot_drop(r, r->n - 1);
  free(r->v);
  free(r);
}

size_t agsx_fs_watchers_count(const struct agsx_fs_watchers *r) { return r->n; }

static int new_id(char ret[33], agsx_error_t *err) {
  unsigned char raw[16];
  size_t got = 0;
  while (got < sizeof(raw)) {
    ssize_t k = getrandom(raw + got, sizeof(raw) - got, 0);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0)
      return agsx_error_set(err, errno, "getrandom");
    got += (size_t)k;
  }
  for (size_t i = 0; i < sizeof(raw); i++)
    snprintf(ret + 2 * i, 3, "%02x", raw[i]);
  return 0;
}

int agsx_fs_watchers_add(struct agsx_fs_watchers *r, const char *sandbox_id,
                         struct agsx_fs_watch *w, char ret_id[33], agsx_error_t *err) {
  if (r->n >= r->max) {
    agsx_fs_watch_free(w);
    return agsx_error_set_quiet(err, E2BIG, "too many watchers (at most %zu)", r->max);
  }
  struct slot *s = &r->v[r->n];
  if (new_id(s->id, err) < 0) {
    agsx_fs_watch_free(w);
    return -1;
  }
  snprintf(s->sandbox_id, sizeof(s->sandbox_id), "%s", sandbox_id);
  s->w = w;
  s->used_ns = agsx_mono_ns();
  r->n++;
  memcpy(ret_id, s->id, 33);
  return 0;
}

static ssize_t find_slot(const struct agsx_fs_watchers *r, const char *sandbox_id, const char *id) {
  for (size_t i = 0; id && i < r->n; i++)
    if (strcmp(r->v[i].id, id) == 0 && strcmp(r->v[i].sandbox_id, sandbox_id) == 0)
      return (ssize_t)i;
  return -1;
}

int agsx_fs_watchers_events(struct agsx_fs_watchers *r, const char *sandbox_id, const char *id,
                            struct agsx_fs_event **ret, size_t *ret_n, agsx_error_t *err) {
  ssize_t i = find_slot(r, sandbox_id, id);
  if (i < 0)
    return agsx_error_set_quiet(err, ENOENT, "watcher with id %.64s not found", id ? id : "");
  struct slot *s = &r->v[i];
  s->used_ns = agsx_mono_ns();
  agsx_fs_watch_dispatch(s->w);
  struct agsx_fs_event *v = NULL;
  size_t n = 0;
  for (;;) {
    struct agsx_fs_event e;
    _cleanup_error_ agsx_error_t e2 = NULL;
    int k = agsx_fs_watch_next(s->w, &e, &e2);
    if (k == 1) {
      v = xrealloc(v, (n + 1) * sizeof(*v));
      v[n++] = e;
      continue;
    }
    if (k < 0 && (n == 0 || agsx_error_errno(&e2) == ENOBUFS)) {
      for (size_t j = 0; j < n; j++)
        agsx_fs_event_clear(&v[j]);
      free(v);
      slot_drop(r, (size_t)i);
      return fs_pass_error(err, &e2);
    }
    break;
  }
  *ret = v;
  *ret_n = n;
  return 0;
}

int agsx_fs_watchers_remove(struct agsx_fs_watchers *r, const char *sandbox_id, const char *id,
                            agsx_error_t *err) {
  ssize_t i = find_slot(r, sandbox_id, id);
  if (i < 0)
    return agsx_error_set_quiet(err, ENOENT, "watcher with id %.64s not found", id ? id : "");
  slot_drop(r, (size_t)i);
  return 0;
}

void agsx_fs_watchers_drop_sandbox(struct agsx_fs_watchers *r, const char *sandbox_id) {
  for (size_t i = r->n; i-- > 0;)
    if (strcmp(r->v[i].sandbox_id, sandbox_id) == 0)
      slot_drop(r, i);
}

void agsx_fs_watchers_tick(struct agsx_fs_watchers *r) {
  int64_t now = agsx_mono_ns();
  /* Their events come through the hub; their sandboxes' ends are looked
   * at once a second (a pidfd poll each). */
  bool look = now >= r->next_end_check_ns;
  if (look)
    r->next_end_check_ns = now + 1000000000LL;
  for (size_t i = r->n; i-- > 0;) {
    if (look)
      check_end(r->v[i].w);
    if (now - r->v[i].used_ns >= (int64_t)r->idle_ms * 1000000 || r->v[i].w->ended)
      slot_drop(r, i); /* idle, or its sandbox ended: its inodes are let go */
  }
}

int agsx_fs_watchers_timeout_ms(const struct agsx_fs_watchers *r) {
  if (r->n == 0)
    return -1;
  int64_t now = agsx_mono_ns(), soonest = INT64_MAX;
  for (size_t i = 0; i < r->n; i++) {
    int64_t left = r->v[i].used_ns + (int64_t)r->idle_ms * 1000000 - now;
    if (left < soonest)
      soonest = left;
  }
  if (soonest <= 0)
    return 0;
  return (int)((soonest + 999999) / 1000000);
}
