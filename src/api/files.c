/* agsx — api: envd's filesystem routes as thin calls into fsops (see
 * files.h): the Filesystem RPCs, WatchDir (a stream), the polling
 * watchers (a registry in the loop), GET /files (the file's fd handed to
 * libmicrohttpd) and POST /files (fed to fsops as the body arrives). */
#include "config.h"

#include "api/files.h"

#include "api/auth.h"
#include "api/fsops.h"
#include "sandbox/logbuf.h"
#include "util/inotify.h"

#include <string.h>
#include <sys/epoll.h>

#define WATCHER_IDLE_MS (10 * 60 * 1000)

/* ---- contexts and errors -------------------------------------------------------------------- */

/* The request's user: Basic auth (RPC) or ?username= (REST). */
static bool user_of(struct req *r, bool rpc, char **ret) {
  *ret = NULL;
  if (rpc) {
    const char *h = agsx_req_header(r, "Authorization");
    agsx_error_t err = NULL;
    if (h && agsx_basic_auth_user(h, ret, &err) < 0) {
      agsx_respond_connect_error(r, AGSX_CONNECT_UNAUTHENTICATED, "%s", err->msg);
      agsx_error_free(&err);
      return false;
    }
    return true;
  }
  const char *q = agsx_req_query(r, "username");
  if (q && *q) {
    if (!agsx_api_user_is_valid(q)) {
      agsx_respond_error(r, 401, "invalid username: '%.64s'", q);
      return false;
    }
    *ret = xstrdup(q);
  }
  return true;
}

static void rpc_error(struct req *r, agsx_error_t *err) {
  enum agsx_fs_code c = agsx_fs_code(err);
  if (c == AGSX_FS_UNAVAILABLE) {
    agsx_error_free(err);
    agsx_api_respond_gone(r);
    return;
  }
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "code", agsx_fs_code_name(c));
  agsx_json_kv_str(g, "message", (*err)->msg);
  yajl_gen_map_close(g);
  agsx_respond_json(r, (unsigned)agsx_fs_code_connect_status(c), g);
  agsx_error_free(err);
}

static void rest_error(struct req *r, agsx_error_t *err) {
  enum agsx_fs_code c = agsx_fs_code(err);
  if (c == AGSX_FS_UNAVAILABLE) {
    agsx_error_free(err);
    agsx_api_respond_gone(r);
    return;
  }
  agsx_respond_error(r, (unsigned)agsx_fs_code_rest_status(c), "%s", (*err)->msg);
  agsx_error_free(err);
}

static struct agsx_fs_ctx *open_ctx_as(struct req *r, bool rpc, const char *user) {
  struct agsx_fs_opts o = {.user = user, .default_user = r->s->cfg->default_user};
  struct agsx_fs_ctx *c = NULL;
  agsx_error_t err = NULL;
  if (agsx_fs_open(&r->rec, &o, &c, &err) < 0) {
    if (rpc)
      rpc_error(r, &err);
    else
      rest_error(r, &err);
    return NULL;
  }
  return c;
}

static struct agsx_fs_ctx *open_ctx(struct req *r, bool rpc) {
  _cleanup_free_ char *user = NULL;
  if (!user_of(r, rpc, &user))
    return NULL;
  return open_ctx_as(r, rpc, user);
}

/* ---- Filesystem RPCs ------------------------------------------------------------------------- */

static void respond_entry(struct req *r, const char *key, const struct agsx_fs_entry *e) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  if (key) {
    agsx_json_key(g, key);
    agsx_fs_entry_gen(g, e);
  }
  yajl_gen_map_close(g);
  agsx_respond_json(r, 200, g);
}

static const char *str_field(yajl_val body, const char *name, const char *alt) {
  const char *s = agsx_json_get_string(body, name);
  return s ? s : alt ? agsx_json_get_string(body, alt) : NULL;
}

static bool bool_field(yajl_val body, const char *name, const char *alt) {
  yajl_val v = agsx_json_get(body, name);
  if (v == NULL && alt)
    v = agsx_json_get(body, alt);
  return v && YAJL_IS_TRUE(v);
}

static unsigned watch_flags(yajl_val body) {
  return (bool_field(body, "recursive", NULL) ? AGSX_FS_WATCH_RECURSIVE : 0) |
         (bool_field(body, "includeEntry", "include_entry") ? AGSX_FS_WATCH_ENTRY : 0) |
         (bool_field(body, "allowNetworkMounts", "allow_network_mounts")
              ? AGSX_FS_WATCH_NETWORK_MOUNTS
              : 0);
}

static void gen_events(yajl_gen g, const struct agsx_fs_event *v, size_t n) {
  agsx_json_key(g, "events");
  yajl_gen_array_open(g);
  for (size_t i = 0; i < n; i++)
    agsx_fs_event_gen(g, &v[i]);
  yajl_gen_array_close(g);
}

static void unary(struct req *r, const char *method) {
  _cleanup_json_ yajl_val body = agsx_api_parse_body(r, true);
  if (body == NULL)
    return;
  struct agsx_fs_ctx *c = NULL;
  agsx_error_t err = NULL;
  struct agsx_fs_entry e = {0};
  const char *path = str_field(body, "path", NULL);
  if (strcmp(method, "GetWatcherEvents") == 0 || strcmp(method, "RemoveWatcher") == 0) {
    const char *wid = str_field(body, "watcherId", "watcher_id");
    if (strcmp(method, "RemoveWatcher") == 0) {
      if (agsx_fs_watchers_remove(r->s->watchers, r->rec.id, wid, &err) < 0)
        return rpc_error(r, &err);
      return respond_entry(r, NULL, NULL);
    }
    struct agsx_fs_event *v = NULL;
    size_t n = 0;
    if (agsx_fs_watchers_events(r->s->watchers, r->rec.id, wid, &v, &n, &err) < 0)
      return rpc_error(r, &err);
    _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
    yajl_gen_map_open(g);
    gen_events(g, v, n);
    yajl_gen_map_close(g);
    for (size_t i = 0; i < n; i++)
      agsx_fs_event_clear(&v[i]);
    free(v);
    return agsx_respond_json(r, 200, g);
  }
  c = open_ctx(r, true);
  if (c == NULL)
    return;
  int rc = 0;
  if (strcmp(method, "Stat") == 0) {
    if ((rc = agsx_fs_stat(c, path ? path : "", &e, &err)) == 0)
      respond_entry(r, "entry", &e);
  } else if (strcmp(method, "MakeDir") == 0) {
    if ((rc = agsx_fs_mkdir(c, path ? path : "", &e, &err)) == 0)
      respond_entry(r, "entry", &e);
  } else if (strcmp(method, "Move") == 0) {
    const char *src = str_field(body, "source", NULL), *dst = str_field(body, "destination", NULL);
    if ((rc = agsx_fs_move(c, src ? src : "", dst ? dst : "", &e, &err)) == 0)
      respond_entry(r, "entry", &e);
  } else if (strcmp(method, "Remove") == 0) {
    if ((rc = agsx_fs_remove(c, path ? path : "", &err)) == 0)
      respond_entry(r, NULL, NULL);
  } else if (strcmp(method, "ListDir") == 0) {
    int64_t depth = 1;
    agsx_json_get_int64(body, "depth", &depth);
    struct agsx_fs_entry *v = NULL;
    size_t n = 0;
    if ((rc = agsx_fs_list(c, path ? path : "", depth > 0 ? (unsigned)depth : 1, &v, &n, &err)) ==
        0) {
      _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
      yajl_gen_map_open(g);
      agsx_json_key(g, "entries");
      yajl_gen_array_open(g);
      for (size_t i = 0; i < n; i++)
        agsx_fs_entry_gen(g, &v[i]);
      yajl_gen_array_close(g);
      yajl_gen_map_close(g);
      agsx_fs_entries_free(v, n);
      agsx_respond_json(r, 200, g);
    }
  } else if (strcmp(method, "CreateWatcher") == 0) {
    struct agsx_fs_watch *w = NULL;
    char id[33];
    if ((rc = agsx_fs_watch_open(r->s->watch_pool, c, path ? path : "", watch_flags(body), &w,
                                 &err)) == 0 &&
        (rc = agsx_fs_watchers_add(r->s->watchers, r->rec.id, w, id, &err)) == 0) {
      _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
      yajl_gen_map_open(g);
      agsx_json_kv_str(g, "watcherId", id);
      yajl_gen_map_close(g);
      agsx_respond_json(r, 200, g);
    }
  } else {
    agsx_respond_connect_error(r, AGSX_CONNECT_UNIMPLEMENTED, "no method %s", method);
  }
  agsx_fs_entry_clear(&e);
  agsx_fs_close(c);
  if (rc < 0)
    rpc_error(r, &err);
}

/* ---- WatchDir --------------------------------------------------------------------------------- */

void agsx_api_files_watch_pump(struct stream *st, int64_t now) {
  agsx_fs_watch_dispatch(st->watch);
  for (int i = 0; i < 256 && agsx_stream_has_room(st); i++) {
    struct agsx_fs_event e;
    agsx_error_t err = NULL;
    int rc = agsx_fs_watch_next(st->watch, &e, &err);
    if (rc == 0)
      break;
    if (rc < 0) {
      if (agsx_error_errno(&err) == ENOBUFS)
        agsx_stream_end(st, AGSX_CONNECT_RESOURCE_EXHAUSTED, err->msg);
      else
        agsx_stream_end(st, -1, NULL); /* the watched directory went */
      agsx_error_free(&err);
      return;
    }
    _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
    yajl_gen_map_open(g);
    agsx_json_key(g, "filesystem");
    agsx_fs_event_gen(g, &e);
    yajl_gen_map_close(g);
    agsx_fs_event_clear(&e);
    size_t len;
    _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
    agsx_stream_event(st, s);
  }
  if (!st->ended && st->deadline_ns > 0 && now >= st->deadline_ns)
    agsx_stream_end(st, AGSX_CONNECT_DEADLINE_EXCEEDED, "context deadline exceeded");
}

void agsx_api_files_watch_free(struct stream *st) {
  agsx_fs_watch_free(st->watch);
  st->watch = NULL;
}

static void watch_dir(struct req *r, struct stream *st) {
  const char *msg;
  size_t len;
  agsx_error_t err = NULL;
  if (agsx_connect_envelope(r->body.p ? r->body.p : "", r->body.len, &msg, &len, &err) < 0) {
    agsx_stream_free(st);
    agsx_respond_connect_error(r, AGSX_CONNECT_INVALID_ARGUMENT, "%s", err->msg);
    agsx_error_free(&err);
    return;
  }
  _cleanup_json_ yajl_val body = agsx_json_parse(len ? msg : "{}", len ? len : 2, len + 2, &err);
  if (body == NULL || !YAJL_IS_OBJECT(body)) {
    agsx_stream_free(st);
    agsx_respond_connect_error(r, AGSX_CONNECT_INVALID_ARGUMENT, "invalid request: %s",
                               err ? err->msg : "not a JSON object");
    agsx_error_free(&err);
    return;
  }
  st->keepalive_json = "{\"keepalive\":{}}";
  struct agsx_fs_ctx *c = open_ctx(r, true);
  if (c == NULL) {
    agsx_stream_free(st);
    return;
  }
  const char *path = str_field(body, "path", NULL);
  int rc = agsx_fs_watch_open(r->s->watch_pool, c, path ? path : "", watch_flags(body), &st->watch,
                              &err);
  agsx_fs_close(c);
  if (rc < 0) {
    enum agsx_fs_code code = agsx_fs_code(&err);
    agsx_stream_end(st,
                    code == AGSX_FS_NOT_FOUND          ? AGSX_CONNECT_NOT_FOUND
                    : code == AGSX_FS_INVALID_ARGUMENT ? AGSX_CONNECT_INVALID_ARGUMENT
                                                       : AGSX_CONNECT_INTERNAL,
                    err->msg);
    agsx_error_free(&err);
  } else {
    /* Its events come through the hub, whose fd the loop polls; the
     * sandbox's end is the loop's once-a-second look. */
    agsx_stream_event(st, "{\"start\":{}}");
  }
  agsx_respond_stream(r, st);
}

void agsx_api_files_rpc(struct req *r, const char *method) {
  const char *ct = agsx_req_header(r, "Content-Type");
  bool stream = strcmp(method, "WatchDir") == 0;
  const char *want = stream ? "application/connect+json" : "application/json";
  if (ct == NULL || strncasecmp(ct, want, strlen(want)) != 0)
    return agsx_respond(r, 415, NULL, "", 0);
  if (!stream)
    return unary(r, method);
  struct stream *st = agsx_stream_new(r->s, r->c);
  snprintf(st->id, sizeof(st->id), "%s", r->rec.id);
  const char *to = agsx_req_header(r, "Connect-Timeout-Ms");
  long long ms = to ? strtoll(to, NULL, 10) : 0;
  if (ms > AGSX_API_TIMEOUT_MAX * 1000LL)
    ms = AGSX_API_TIMEOUT_MAX * 1000LL;
  if (ms > 0)
    st->deadline_ns = agsx_mono_ns() + ms * 1000000LL;
  const char *ka = agsx_req_header(r, "Keepalive-Ping-Interval");
  if (ka && strtoll(ka, NULL, 10) > 0 && strtoll(ka, NULL, 10) <= 3600)
    st->keepalive_ns = strtoll(ka, NULL, 10) * 1000000000LL;
  watch_dir(r, st);
}

/* ---- GET and POST /files ---------------------------------------------------------------------- */

static void download(struct req *r) {
  _cleanup_fs_ctx_ struct agsx_fs_ctx *c = open_ctx(r, false);
  if (c == NULL)
    return;
  const char *path = agsx_req_query(r, "path");
  int fd = -1;
  uint64_t size = 0;
  _cleanup_free_ char *abs = NULL;
  agsx_error_t err = NULL;
  if (agsx_fs_download_open(c, path ? path : "", &fd, &size, &abs, &err) < 0)
    return rest_error(r, &err);
  /* libmicrohttpd sends from the fd (sendfile) and closes it. */
  struct MHD_Response *resp = agsx_mhd.create_response_from_fd_at_offset64(size, fd, 0);
  if (resp == NULL) {
    close(fd);
    return agsx_respond_error(r, 500, "out of memory");
  }
  const char *name = strrchr(abs, '/');
  _cleanup_free_ char *disp = xasprintf("inline; filename=\"%s\"", name ? name + 1 : abs);
  for (char *q = disp + 18; *q; q++)
    if (*q == '"' || *q == '\\' || (unsigned char)*q < 0x20)
      *q = '_';
  disp[strlen(disp) - 1] = '"';
  agsx_mhd.add_response_header(resp, "Content-Type", "application/octet-stream");
  agsx_mhd.add_response_header(resp, "Content-Disposition", disp);
  agsx_respond_queue(r, 200, resp);
}

void agsx_api_files_rest(struct req *r) {
  if (strcmp(r->method, "GET") == 0)
    return download(r);
  agsx_respond_error(r, 405, "method %s not allowed on /files", r->method);
}

static void upload_fail(struct req *r, agsx_error_t *err) {
  enum agsx_fs_code c = agsx_fs_code(err);
  r->upload_status = c == AGSX_FS_UNAVAILABLE ? 502 : agsx_fs_code_rest_status(c);
  free(r->upload_error);
  r->upload_error = xstrdup((*err)->msg);
  agsx_error_free(err);
  agsx_fs_receive_free(r->recv);
  r->recv = NULL;
}

struct meta_scan {
  struct agsx_fs_meta meta;
  agsx_error_t err; /* the first refusal */
};

static enum MHD_Result meta_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value) {
  struct meta_scan *m = cls;
  (void)kind;
  if (m->err == NULL)
    agsx_fs_meta_header(&m->meta, key, value, &m->err);
  return MHD_YES;
}

int agsx_api_upload_begin(struct req *r) {
  r->fs = open_ctx(r, false);
  if (r->fs == NULL)
    return -1;
  /* X-Metadata-* headers: checked before a byte of the body is written,
   * as envd's */
  struct meta_scan m = {0};
  agsx_mhd.get_connection_values(r->c, MHD_HEADER_KIND, meta_header, &m);
  if (m.err) {
    agsx_fs_meta_clear(&m.meta);
    agsx_respond_error(r, 400, "%s", m.err->msg);
    agsx_error_free(&m.err);
    return -1;
  }
  const char *ct = agsx_req_header(r, "Content-Type");
  const char *enc = agsx_req_header(r, "Content-Encoding");
  agsx_error_t err = NULL;
  if (agsx_fs_receive_open(r->fs, ct ? ct : "", agsx_req_query(r, "path"),
                           enc && strcasecmp(enc, "gzip") == 0, &r->recv, &err) < 0) {
    agsx_fs_meta_clear(&m.meta);
    rest_error(r, &err);
    return -1;
  }
  agsx_fs_receive_set_meta(r->recv, &m.meta);
  return 0;
}

void agsx_api_upload_data(struct req *r, const char *buf, size_t len) {
  agsx_error_t err = NULL;
  if (r->answered || r->recv == NULL)
    return; /* refused or failed: the rest of the body is read and dropped */
  if (agsx_fs_receive_feed(r->recv, buf, len, &err) < 0)
    upload_fail(r, &err);
}

void agsx_api_upload_finish(struct req *r) {
  if (r->answered)
    return;
  if (r->recv == NULL)
    return agsx_respond_error(r, (unsigned)(r->upload_status ? r->upload_status : 500), "%s",
                              r->upload_error ? r->upload_error : "upload failed");
  struct agsx_fs_entry *v = NULL;
  size_t n = 0;
  agsx_error_t err = NULL;
  if (agsx_fs_receive_finish(r->recv, &v, &n, &err) < 0)
    return rest_error(r, &err);
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_array_open(g);
  for (size_t i = 0; i < n; i++) {
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "path", v[i].path);
    agsx_json_kv_str(g, "name", v[i].name);
    agsx_json_kv_str(g, "type", v[i].type == AGSX_FS_TYPE_DIRECTORY ? "dir" : "file");
    agsx_fs_meta_gen(g, &v[i].meta);
    yajl_gen_map_close(g);
  }
  yajl_gen_array_close(g);
  agsx_fs_entries_free(v, n);
  agsx_respond_json(r, 200, g);
}

/* ---- POST /files/compose ---------------------------------------------------------------------- */

struct compose_job {
  struct compose_job *next;
  struct req *r;
  struct agsx_fs_compose *k; /* NULL once done */
  int rc;                    /* 0 under way, 1 done, -1 failed (ERR) */
  agsx_error_t err;
  struct agsx_fs_entry entry;
};

static struct compose_job *compose_unlink(struct server *s, struct req *r) {
  for (struct compose_job **p = &s->composes; *p; p = &(*p)->next)
    if ((*p)->r == r) {
      struct compose_job *j = *p;
      *p = j->next;
      s->n_composes--;
      return j;
    }
  return NULL;
}

static void compose_free(struct compose_job *j) {
  if (j == NULL)
    return;
  agsx_fs_compose_free(j->k);
  agsx_error_free(&j->err);
  agsx_fs_entry_clear(&j->entry);
  free(j);
}

static void compose_answer(struct req *r) {
  struct compose_job *j = compose_unlink(r->s, r);
  if (j == NULL)
    return agsx_respond_error(r, 500, "compose: lost");
  if (j->rc < 0) {
    rest_error(r, &j->err);
  } else {
    _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "path", j->entry.path);
    agsx_json_kv_str(g, "name", j->entry.name);
    agsx_json_kv_str(g, "type", "file");
    yajl_gen_map_close(g);
    agsx_respond_json(r, 200, g);
  }
  compose_free(j);
}

void agsx_api_files_compose(struct req *r) {
  struct agsx_fs_compose_req q;
  agsx_error_t err = NULL;
  if (agsx_fs_compose_parse(r->body.p ? r->body.p : "", r->body.len, &q, &err) < 0)
    return rest_error(r, &err);
  if (q.user && *q.user && !agsx_api_user_is_valid(q.user)) {
    agsx_respond_error(r, 401, "invalid username: '%.64s'", q.user);
    return agsx_fs_compose_req_clear(&q);
  }
  if (r->s->n_composes >= AGSX_API_COMPOSES) {
    agsx_respond_error(r, 429, "%u composes are under way", AGSX_API_COMPOSES);
    return agsx_fs_compose_req_clear(&q);
  }
  _cleanup_fs_ctx_ struct agsx_fs_ctx *c = open_ctx_as(r, false, q.user);
  struct agsx_fs_compose *k = NULL;
  int rc = c ? agsx_fs_compose_open(c, q.sources, q.n, q.dest, &k, &err) : 0;
  agsx_fs_compose_req_clear(&q);
  if (c == NULL)
    return; /* answered */
  if (rc < 0)
    return rest_error(r, &err);
  struct compose_job *j = xzalloc(sizeof(*j));
  j->r = r;
  j->k = k;
  j->next = r->s->composes;
  r->s->composes = j;
  r->s->n_composes++;
  agsx_req_wait(r, compose_answer);
}

static void compose_tick(struct server *s) {
  for (struct compose_job *j = s->composes; j; j = j->next) {
    if (j->rc != 0)
      continue;
    j->rc = agsx_fs_compose_step(j->k, AGSX_API_COMPOSE_STEP, &j->err);
    if (j->rc == 1 && agsx_fs_compose_commit(j->k, &j->entry, &j->err) < 0)
      j->rc = -1;
    if (j->rc != 0) {
      agsx_fs_compose_free(j->k);
      j->k = NULL;
      agsx_req_continue(j->r);
    }
  }
}

void agsx_api_files_stop(struct server *s) {
  for (struct compose_job *j = s->composes; j; j = j->next)
    if (j->rc == 0) {
      j->rc = -1;
      agsx_error_set_quiet(&j->err, EIO, "the server is stopping");
      agsx_fs_compose_free(j->k);
      j->k = NULL;
      agsx_req_continue(j->r);
    }
}

void agsx_api_req_free_parts(struct req *r) {
  compose_free(compose_unlink(r->s, r)); /* its client went away: the temp file goes */
  agsx_fs_receive_free(r->recv);
  r->recv = NULL;
  agsx_fs_close(r->fs);
  r->fs = NULL;
}

/* ---- inotify, and the polling watchers' registry ----------------------------------------------- */

/* Every watcher and every followed log is a subscription of one hub
 * (util/inotify.h): a few instances, shared, within an eighth of host
 * root's limits, instead of an instance each (128 instances is the whole
 * host's default). The hub's fd is in the loop's epoll. */
int agsx_api_envd_init(struct server *s, agsx_error_t *err) {
  struct agsx_inotify_budget b;
  agsx_inotify_budget_host(&b);
  if (agsx_inotify_new(&b, &s->hub, err) < 0)
    return -1;
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
  if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, agsx_inotify_fd(s->hub), &ev) < 0)
    return agsx_error_set(err, errno, "epoll_ctl");
  agsx_log_readers_share(s->hub);
  /* A sandbox's watchers share at most a quarter of the hub's watches. */
  s->watch_pool = agsx_fs_watch_pool_new(s->hub, AGSX_API_WATCHERS_SANDBOX, AGSX_API_WATCHERS_MAX,
                                         b.watches / 4 ? b.watches / 4 : 1);
  s->watchers = agsx_fs_watchers_new(AGSX_API_WATCHERS_MAX, WATCHER_IDLE_MS);
  return 0;
}

/* After the daemon stopped (its streams, their watchers and logs, freed). */
void agsx_api_envd_fini(struct server *s) {
  while (s->composes) { /* their requests are gone with the daemon */
    struct compose_job *j = s->composes;
    s->composes = j->next;
    compose_free(j);
  }
  s->n_composes = 0;
  agsx_fs_watchers_free(s->watchers);
  s->watchers = NULL;
  agsx_fs_watch_pool_free(s->watch_pool);
  s->watch_pool = NULL;
  agsx_log_readers_share(NULL);
  agsx_inotify_free(s->hub);
  s->hub = NULL;
}

void agsx_api_envd_tick(struct server *s) {
  agsx_inotify_dispatch(s->hub);
  agsx_fs_watchers_tick(s->watchers);
  compose_tick(s);
}

int agsx_api_envd_timeout_ms(struct server *s) {
  for (struct compose_job *j = s->composes; j; j = j->next)
    if (j->rc == 0)
      return 0; /* a copy goes on */
  int a = agsx_inotify_timeout_ms(s->hub), b = agsx_fs_watchers_timeout_ms(s->watchers);
  return a < 0 ? b : b < 0 || a < b ? a : b;
}

void agsx_api_envd_drop_sandbox(struct server *s, const char *id) {
  agsx_fs_watchers_drop_sandbox(s->watchers, id);
}
