/* agsx — api: what the server's modules share (not a public interface). */
#ifndef AGSX_API_INTERNAL_H
#define AGSX_API_INTERNAL_H

#include "api/mhd.h"
#include "api/spawn.h"
#include "api/server.h"
#include "api/wire.h"
#include "state/state.h"
#include "util/json.h"

struct agsx_log_reader;
struct agsx_fs_watch;
struct agsx_fs_watchers;
struct agsx_fs_watch_pool;
struct agsx_inotify;
struct agsx_fs_receive;

/* Where a request's time goes, for `serve --log-level debug` (bench/serve
 * reads it): named marks in CLOCK_MONOTONIC from the request's headers. */
#define AGSX_API_MARKS 12
struct agsx_api_timing {
  int64_t t0;
  unsigned n;
  struct {
    const char *what; /* a string literal */
    int64_t ns;
  } m[AGSX_API_MARKS];
};
/* Marks WHAT now (nothing once the marks are full, or below debug level). */
void agsx_api_mark(struct agsx_api_timing *t, const char *what);

/* E2B ids (20 hex digits) the server has seen, and their sandbox's full
 * id: an envd request then costs one stat, not a listing of every
 * sandbox's directory. Direct-mapped; a miss or a stale entry falls back
 * to the listing. */
#define AGSX_API_ID_CACHE 1024
struct agsx_api_id {
  char e2b[21], id[33];
};

struct agsx_api_conns;

struct server {
  const struct agsx_api_config *cfg;
  struct agsx_api_conns *conns; /* every connection's account (conns.c) */
  struct agsx_api_id *ids;      /* AGSX_API_ID_CACHE of them */
  struct MHD_Daemon *d;
  int epfd, sigfd, statefd;
  char *key;
  struct stream *streams;
  size_t n_streams;
  size_t queued;           /* bytes the streams hold, as of the last pump */
  int64_t streams_peer_ns; /* when suspended streams' clients are next asked */
  struct agsx_fs_watchers *watchers;
  struct agsx_inotify *hub;              /* every inotify watch of the server's (files.c) */
  struct agsx_fs_watch_pool *watch_pool; /* bounds on watchers */
  struct agsx_spawner spawner;
  struct pending *code_ops;     /* code context operations under way (code-routes.c) */
  struct compose_job *composes; /* POST /files/compose under way (files.c) */
  size_t n_composes;
  char **hosts; /* the host names it answers (--host), normalised */
  size_t n_code_ops;
  /* --ports-listen (forward.c): its listener, the server's own network
   * namespace, the connections to sandboxes' ports */
  int ports_lfd, netns;
  struct agsx_tls *tls; /* --ports-tls; NULL: plain */
  char *ports_ca;       /* agsx's CA's certificate, with --ports-tls and no --ports-cert */
  char *ports_domain;   /* NAME:PORT of the ports listener for E2B's `domain`; NULL: none */
  struct fwd *fwds;
  size_t n_fwds;
  bool stopping;
};

/* One HTTP request, from its headers to its response. */
struct req {
  struct server *s;
  struct MHD_Connection *c;
  const char *method;
  char *path;           /* the URL's path, without the query */
  struct agsx_buf body; /* JSON and Connect bodies, at most body_max */
  size_t body_max;      /* AGSX_API_BODY_MAX, or AGSX_API_CODE_BODY_MAX for /execute */
  bool body_dropped;    /* too large: answered already */
  uint64_t body_seen;   /* body bytes received, kept or not */
  uint64_t body_length; /* its Content-Length; UINT64_MAX: none (chunked) */
  bool answered;
  /* a sandbox's request (E2b-Sandbox-Id): the sandbox (a running record),
   * its 20-digit E2B id and the port (E2b-Sandbox-Port), set by admission */
  bool envd;
  char e2b_id[21];
  unsigned port;
  struct agsx_record rec;
  bool has_rec;
  /* POST /files, streamed to the sandbox as it arrives */
  struct agsx_fs_ctx *fs;
  struct agsx_fs_receive *recv;
  bool upload;
  int upload_status;
  char *upload_error;
  unsigned status; /* the response's, once answered */
  struct agsx_api_timing tm;
  /* A route waiting for a component of the loop (a kernel's start): its
   * connection is suspended (waiting) until agsx_req_continue, then CONT
   * answers. */
  void (*cont)(struct req *r);
  bool waiting;
  bool dropped;            /* answered by closing the connection (agsx_req_drop) */
  struct pending *code_op; /* code-routes.c's */
};

/* A streamed response (Connect server-streaming). The loop pumps it; the
 * reader callback hands MHD what is queued or suspends the connection. */
struct stream {
  struct stream *next, **pprev;
  struct server *s;
  struct MHD_Connection *c;
  struct agsx_buf out;
  size_t off;
  bool ended, suspended;
  bool aborted; /* ended by a dropped connection (agsx_stream_abort) */
  int64_t deadline_ns, keepalive_ns, last_ns; /* CLOCK_MONOTONIC; 0: none */
  int pollfd;                                 /* registered in the loop's epoll, or -1 */
  /* the process (Start, Connect) */
  char id[33];
  uint32_t pid;
  struct agsx_log_reader *log;
  bool started_here;          /* Start: the deadline is the process's own timeout */
  bool pty;                   /* its output is the pty's */
  const char *keepalive_json; /* the service's keepalive message */
  int64_t next_check_ns;      /* when to check the sandbox still runs */
  /* the watcher (WatchDir) */
  struct agsx_fs_watch *watch;
  /* a code execution (port 49999's /execute, code-routes.c) */
  struct agsx_api_code_stream *code;
  /* its request's marks, and the frames' (logged when it is freed) */
  struct agsx_api_timing tm;
  char what[48];
  bool first_marked;
};

/* ---- responses (server.c) ---- */
const char *agsx_req_header(struct req *r, const char *name);
const char *agsx_req_query(struct req *r, const char *name);
/* Queues RESP (and drops our reference), logging the request at debug level. */
void agsx_respond_queue(struct req *r, unsigned status, struct MHD_Response *resp);
void agsx_respond(struct req *r, unsigned status, const char *ctype, const char *body, size_t len);
void agsx_respond_json(struct req *r, unsigned status, yajl_gen g);
/* {"code": STATUS, "message": MSG}, the control plane's and envd REST's error. */
void agsx_respond_error(struct req *r, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void agsx_respond_connect_error(struct req *r, enum agsx_connect_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Suspends R's connection until agsx_req_continue(R); then libmicrohttpd
 * calls the request's handler again, which calls CONT to answer. For a
 * route whose work takes long: the loop serves everyone else meanwhile. */
void agsx_req_wait(struct req *r, void (*cont)(struct req *r));
void agsx_req_continue(struct req *r);
/* Answers R by closing its connection without a response: what E2B's proxy
 * does to a request in flight when its sandbox is killed (the SDKs turn a
 * dropped connection to a sandbox that is gone into their "killed while
 * the request was in progress" error). */
void agsx_req_drop(struct req *r);
/* 200 application/connect+json streaming from ST (which the response owns). */
void agsx_respond_stream(struct req *r, struct stream *st);
struct stream *agsx_stream_new(struct server *s, struct MHD_Connection *c);
void agsx_stream_event(struct stream *st, const char *json);
/* Whether ST may queue more frames now (AGSX_API_STREAM_QUEUE). */
bool agsx_stream_has_room(const struct stream *st);
/* The end-stream frame: {} or {"error":{"code","message"}}; CODE < 0: success. */
void agsx_stream_end(struct stream *st, int code, const char *message);
/* Ends ST as E2B's proxy does when the sandbox goes away under a request:
 * what is queued is sent, then the connection is closed with no end (no
 * end-stream frame, no last chunk). The SDKs read that as a dropped
 * connection, ask /health, get 502, and throw their TimeoutError ("the
 * sandbox was killed"); an end frame would read as the command's end. */
void agsx_stream_abort(struct stream *st);
int agsx_stream_watch_fd(struct stream *st, int fd);
/* Frees a stream never given to agsx_respond_stream. */
void agsx_stream_free(struct stream *st);

/* ---- routes ---- */
void agsx_api_control_plane(struct req *r);                /* plane.c */
void agsx_api_envd(struct req *r);                         /* envd.c */
void agsx_api_stream_pump(struct stream *st, int64_t now); /* envd.c */
void agsx_api_stream_free_parts(struct stream *st);        /* envd.c */
int agsx_api_upload_begin(struct req *r); /* envd.c: POST /files, 0 or -1 (answered) */
void agsx_api_upload_data(struct req *r, const char *buf, size_t len);
void agsx_api_upload_finish(struct req *r);
void agsx_api_req_free_parts(struct req *r); /* envd.c */
/* files.c: the inotify hub (watchers and followed logs), the watchers'
 * bounds and the polling watchers' registry */
#define AGSX_API_WATCHERS_SANDBOX 64u /* WatchDir streams and polling watchers of a sandbox */
#define AGSX_API_WATCHERS_MAX 1024u   /* and of the server */
int agsx_api_envd_init(struct server *s, agsx_error_t *err);
void agsx_api_envd_fini(struct server *s);
void agsx_api_envd_tick(struct server *s);      /* each turn of the loop */
int agsx_api_envd_timeout_ms(struct server *s); /* -1: none */
/* The sandbox ID was killed: its polling watchers go. */
void agsx_api_envd_drop_sandbox(struct server *s, const char *id);
/* POST /files/compose: the copy goes on in the loop's turns (at most
 * AGSX_API_COMPOSE_STEP bytes each) while the request waits; at most
 * AGSX_API_COMPOSES at once (then 429). At the server's stop each is
 * answered 500 "the server is stopping". */
#define AGSX_API_COMPOSE_STEP (32u << 20)
#define AGSX_API_COMPOSES 64u
void agsx_api_files_compose(struct req *r);
void agsx_api_files_stop(struct server *s);

/* ---- port 49999: the code interpreter (code-routes.c) ---- */
/* Context operations under way at once (kernel starts, restarts, removals). */
#define AGSX_API_CODE_OPS_SANDBOX 8u
#define AGSX_API_CODE_OPS_MAX 64u
void agsx_api_code(struct req *r);
void agsx_api_code_pump(struct stream *st, int64_t now);
void agsx_api_code_free(struct stream *st);
/* The operations under way: each turn of the loop, its timeout (-1: none),
 * the server's stop (each is answered 500 "the server is stopping"), and a
 * request freed with one. */
void agsx_api_code_tick(struct server *s);
int agsx_api_code_timeout_ms(struct server *s);
void agsx_api_code_stop(struct server *s);
void agsx_api_code_req_free(struct req *r);

/* ---- connections (conns.c): per-client limits, header deadlines ---- */
struct agsx_api_conns *agsx_api_conns_new(void);
void agsx_api_conns_free(struct agsx_api_conns *a);
/* MHD's MHD_OPTION_NOTIFY_CONNECTION (CLS: the server): a connection
 * starts waiting for headers, and makes room past a bound; or it ended. */
void agsx_api_conn_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe);
/* C's request's headers are in; its request completed (it waits again). */
void agsx_api_conn_request(struct server *s, struct MHD_Connection *c);
void agsx_api_conn_idle(struct server *s, struct MHD_Connection *c);
/* Whether C's client has closed its end (POLLRDHUP, HUP or an error on
 * the socket, asked without waiting). libmicrohttpd's edge-triggered epoll
 * misses an end that came in with the last bytes it read, so the server
 * asks: after each piece of a body that is not complete, and for waiting
 * connections at each sweep. */
bool agsx_api_conn_peer_gone(struct MHD_Connection *c);
#define AGSX_API_SWEEP_MS 1000
/* Each turn of the loop: closes what waited past AGSX_API_HEADER_SEC, and
 * (once a second: AGSX_API_SWEEP_MS) the waiting connections whose client
 * has gone; when the next one is due (-1: none). */
void agsx_api_conns_tick(struct server *s);
/* ---- a sandbox's ports by host name (forward.c) ---- */
/* The label of a sandbox made with network.allowPublicTraffic false. */
#define AGSX_API_LABEL_PRIVATE "e2b.private-ports"
/* ... with lifecycle autoResume: a request to it (the API's, or one to its
 * ports) resumes it when paused */
#define AGSX_API_LABEL_AUTORESUME "e2b.autoresume"
/* The listener of cfg->ports_listen, if any, in the server's epoll. */
int agsx_api_ports_start(struct server *s, agsx_error_t *err);
/* Accepts, routes and moves bytes; never blocks. */
void agsx_api_ports_tick(struct server *s);
/* When a connection's head or connect times out next: ms, -1 none. */
int agsx_api_ports_timeout_ms(struct server *s);
/* Closes every connection and the listener. */
void agsx_api_ports_stop(struct server *s);
int agsx_api_conns_timeout_ms(struct server *s);
size_t agsx_api_conns_count(struct server *s);

/* ---- admission (admit.c) ---- */
#define AGSX_API_PORT_ENVD 49983u
#define AGSX_API_PORT_CODE 49999u
/* The one check of every request's credentials, once its headers are in
 * and before its body is read or a route runs: the API key on the control
 * plane; on a sandbox's ports its sandbox running (else 502), the port one
 * the server serves (else 502) and the port's token (else 401); see
 * admit.c for the rule and its exceptions. Fills the request's sandbox
 * (rec, e2b_id, port). false after answering. */
bool agsx_api_admit(struct req *r);

/* ---- envd (envd.c) ---- */
/* The 502 of a sandbox that is not running (E2B's proxy's words). */
void agsx_api_respond_gone(struct req *r);

/* ---- sandboxes (plane.c) ---- */
/* The running sandbox of an E2B id (20 hex digits; 32 also accepted):
 * 0 and *RET, or -1 with ENOENT (none, ended or being stopped). */
int agsx_api_find_sandbox(struct server *s, const char *e2b_id, struct agsx_record *ret,
                          agsx_error_t *err);
/* Puts a sandbox the server made in the E2B id cache. */
void agsx_api_remember_id(struct server *s, const char id[33]);
/* An envd request (credentials checked) to a paused sandbox created with
 * autoResume resumes it, as E2B's proxy does; not GET /health, which tells
 * whether it runs. False after answering (the resume failed). */
bool agsx_api_autoresume(struct req *r);
/* A JSON body of a control-plane request: NULL after answering 400. */
yajl_val agsx_api_parse_body(struct req *r, bool connect);
/* The `Sandbox` object of a create or connect answer. */
void agsx_api_gen_sandbox(struct server *s, yajl_gen g, const struct agsx_record *r);

/* ---- fork and snapshots (snapshots.c, over sandbox/snapshot.h) ---- */
void agsx_api_fork(struct req *r, const char *e2b_id);            /* POST /sandboxes/ID/fork */
void agsx_api_create_snapshot(struct req *r, const char *e2b_id); /* POST /sandboxes/ID/snapshots */
void agsx_api_list_snapshots(struct req *r);                      /* GET /snapshots */
void agsx_api_delete_snapshot(struct req *r, const char *id);     /* DELETE /templates/ID */

/* ---- volumes (volumes.c, over sandbox/volume.h) ---- */
/* /volumes[/ID]: SEG the path's N segments. */
void agsx_api_volumes(struct req *r, char **seg, size_t n);
/* Every volume of VOLUMES (NAME:/path, body.h) exists: ENOENT otherwise. */
int agsx_api_volumes_check(const char *root, char *const *volumes, agsx_error_t *err);
/* "volumeMounts" (SandboxDetail, ListedSandbox): the record's volumes
 * (state.h: NAME:/path[:ro]) as [{"name", "path"}]. */
void agsx_api_gen_volume_mounts(yajl_gen g, char *const *volumes);

#endif
