/* agsx — fsops: envd's filesystem service over a running sandbox's root, as
 * C operations for the API server (no HTTP, no JSON inside the operations;
 * agsx_fs_entry_gen() gives the server envd's EntryInfo).
 *
 * A context (agsx_fs_open) is one sandbox and one user: the sandbox's root
 * (agsx_copy_open_root: /proc/PID/root of its init, through a pidfd), the
 * user's uid, gid and home from the image's own /etc/passwd read inside that
 * root, and the uid base (host uid = base + sandbox uid). Paths follow envd:
 * "" is the default workdir, "~" and "~/x" the user's home, a relative path
 * is relative to the home; every path is resolved inside the root with
 * openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS), so a symlink planted by
 * sandbox code (to `/`, `/etc`, `../../..`) resolves inside the sandbox.
 * Trees are walked one component at a time with the copy module's
 * fd-relative helpers (sandbox/copy-internal.h), never following a symlink
 * below the top.
 *
 * Privileges: as envd (which runs as root in its sandbox), an operation may
 * touch any file of the sandbox whatever the user; what it creates belongs
 * to the user (it is created with fsuid/fsgid = base + the user's ids). Files
 * on kernel filesystems (proc, sysfs, cgroup, ...) are refused for reading
 * and writing: the server is host root, and host root reads more there
 * (kallsyms, other namespaces' sysctls) than the sandbox's root may.
 *
 * Errors carry an errno that agsx_fs_code() maps to a Connect code, and
 * envd's messages ("file not found: ...", "path '/x' does not exist").
 * Nothing here prints or keeps global state; a context is used by one
 * thread at a time. */
#ifndef AGSX_API_FSOPS_H
#define AGSX_API_FSOPS_H

#include "util/json.h"
#include "util/util.h"

#include <poll.h>
#include <stdbool.h>
#include <stdint.h>

struct agsx_record;

/* ---- bounds ---- */
#define AGSX_FS_LIST_MAX_ENTRIES 100000u  /* ListDir: entries of one answer */
#define AGSX_FS_LIST_MAX_DEPTH 64u        /* ListDir: larger depths are clamped */
#define AGSX_FS_LIST_META_MAX (16u << 20) /* ListDir: file metadata of one answer */
#define AGSX_FS_REMOVE_MAX_ENTRIES 1000000u
#define AGSX_FS_PATH_MAX 4096u       /* a request path, in bytes */
#define AGSX_FS_PATH_DEPTH 256u      /* and in components */
#define AGSX_FS_WATCH_MAX_DIRS 8192u /* inotify watches of one recursive watcher */
#define AGSX_FS_WATCH_QUEUE 4096u    /* events queued per watcher before overflow */

/* ---- error codes ----
 * Connect codes of the filesystem service, from an error's errno:
 * ENOENT not_found; EEXIST already_exists; EINVAL, ENOTDIR, EISDIR, ELOOP,
 * ENAMETOOLONG, EXDEV invalid_argument; EACCES, EPERM, EROFS
 * permission_denied; ENOSPC, EDQUOT, E2BIG, EFBIG, ENOBUFS
 * resource_exhausted; EKEYREJECTED (an unknown user) unauthenticated; ESRCH
 * (the sandbox is not running) unavailable (the server answers envd routes
 * of a gone sandbox with its 502); EOPNOTSUPP (file metadata on a
 * filesystem without user xattrs) unimplemented; anything else internal. */
enum agsx_fs_code {
  AGSX_FS_OK,
  AGSX_FS_NOT_FOUND,
  AGSX_FS_ALREADY_EXISTS,
  AGSX_FS_INVALID_ARGUMENT,
  AGSX_FS_PERMISSION_DENIED,
  AGSX_FS_RESOURCE_EXHAUSTED,
  AGSX_FS_UNAUTHENTICATED,
  AGSX_FS_UNAVAILABLE,
  AGSX_FS_UNIMPLEMENTED,
  AGSX_FS_INTERNAL,
};
enum agsx_fs_code agsx_fs_code(const agsx_error_t *err);
/* "not_found", "already_exists", ... ("" for AGSX_FS_OK). */
const char *agsx_fs_code_name(enum agsx_fs_code code);
/* The HTTP status of a unary Connect error with CODE (404, 409, 400, 403,
 * 429, 401, 503, 501, 500). */
int agsx_fs_code_connect_status(enum agsx_fs_code code);
/* The status envd's REST /files answers CODE with: 404, 400 (also for
 * already_exists), 403, 507 (no space), 401, 502, 501, 500. */
int agsx_fs_code_rest_status(enum agsx_fs_code code);

/* ---- context ---- */
struct agsx_fs_opts {
  const char *user;         /* a name of the image's /etc/passwd; NULL: default_user */
  const char *default_user; /* NULL: "user" when the image has one, else "root" */
  const char *workdir;      /* what "" means; NULL: the user's home */
};

struct agsx_fs_ctx;

/* Opens a context for the running sandbox REC. EKEYREJECTED when the user
 * is not in the image's /etc/passwd, ESRCH when REC is not running. */
int agsx_fs_open(const struct agsx_record *rec, const struct agsx_fs_opts *opts,
                 struct agsx_fs_ctx **ret, agsx_error_t *err);
/* The same over the tree at ROOTFD (taken: closed by the context, on
 * failure too), whose host ids are UID_BASE + the sandbox's: for tests and
 * for trees that are no running sandbox's. */
int agsx_fs_open_root(int rootfd, uint32_t uid_base, const char *sandbox_id,
                      const struct agsx_fs_opts *opts, struct agsx_fs_ctx **ret, agsx_error_t *err);
void agsx_fs_close(struct agsx_fs_ctx *c);
void agsx_fs_closep(struct agsx_fs_ctx **c);
#define _cleanup_fs_ctx_ _cleanup_(agsx_fs_closep)
/* The user's name, ids and home (for the server's process service too). */
const char *agsx_fs_user(const struct agsx_fs_ctx *c);
uid_t agsx_fs_uid(const struct agsx_fs_ctx *c);
gid_t agsx_fs_gid(const struct agsx_fs_ctx *c);
const char *agsx_fs_home(const struct agsx_fs_ctx *c);

/* The absolute, lexically clean sandbox path PATH names for this context's
 * user ("" → workdir, "~/x" → home/x, "x" → home/x; "." and ".." folded,
 * never above "/"). ENAMETOOLONG over AGSX_FS_PATH_MAX bytes or
 * AGSX_FS_PATH_DEPTH components. */
char *agsx_fs_path(const struct agsx_fs_ctx *c, const char *path, agsx_error_t *err);

/* ---- file metadata (envd 0.6.2) ----
 * User-defined pairs kept as extended attributes `user.e2b.KEY` of a file,
 * where envd keeps them: POST /files takes them from its request's
 * `X-Metadata-KEY: VALUE` headers (KEY lowercased), writes them on each file
 * it uploads (an upload makes a new inode, so a file's old set goes with
 * it, as envd replaces the set), and every EntryInfo carries its file's
 * set (a symlink's: its target's). Keys and values are printable ASCII, a
 * key at most AGSX_FS_META_KEY_MAX bytes, a set at most AGSX_FS_META_MAX
 * bytes of names (with the prefix) and values together (envd's bounds,
 * 400 past them). Sets written inside the sandbox (setfattr) are shown as
 * far as they are valid text within those bounds. A filesystem without
 * user xattrs (a tmpfs before Linux 6.6, the sandbox's writable layer
 * there) cannot keep them: the upload fails (EOPNOTSUPP, 501) and leaves
 * the old file, where envd would write the file and drop the metadata. */
#define AGSX_FS_META_PREFIX "user.e2b."
#define AGSX_FS_META_MAX 4096u                                         /* a set, as envd */
#define AGSX_FS_META_KEY_MAX (255u - sizeof(AGSX_FS_META_PREFIX) + 1u) /* 246: the VFS's 255 */

struct agsx_fs_meta {
  char **keys, **values; /* sorted by key (agsx_fs_meta_header keeps them so) */
  size_t n;
  size_t bytes; /* the names with their prefix and the values, together */
};
void agsx_fs_meta_clear(struct agsx_fs_meta *m);
/* Takes the request header NAME: VALUE into M when NAME is X-Metadata-KEY
 * (any case; KEY lowercased): 1 when taken, 0 when NAME is no metadata
 * header, KEY is empty or already in M (the first value wins, as Go's
 * Header.Get). -1 with EINVAL for a key or value that is not printable
 * ASCII or a key over AGSX_FS_META_KEY_MAX, E2BIG past AGSX_FS_META_MAX. */
int agsx_fs_meta_header(struct agsx_fs_meta *m, const char *name, const char *value,
                        agsx_error_t *err);

/* ---- entries (envd's EntryInfo) ---- */
enum agsx_fs_type {
  AGSX_FS_TYPE_UNSPECIFIED,
  AGSX_FS_TYPE_FILE,
  AGSX_FS_TYPE_DIRECTORY,
  AGSX_FS_TYPE_SYMLINK, /* only a symlink whose target is missing or outside reach */
};

struct agsx_fs_entry {
  char *name;             /* the last component ("/" for the root) */
  char *path;             /* absolute, as the sandbox sees it */
  enum agsx_fs_type type; /* a symlink's: its target's (as envd) */
  uint64_t size;          /* the entry's own (lstat) */
  uint32_t mode;          /* permission bits as envd reports them: a symlink's target's */
  uint32_t st_mode;       /* the entry's own st_mode (lstat): for "permissions" */
  char *owner, *group;    /* names from the sandbox's /etc/passwd and /etc/group, else the number */
  int64_t mtime_sec;
  long mtime_nsec;
  char *symlink_target;     /* NULL unless the entry is a symlink: where it leads, absolute */
  struct agsx_fs_meta meta; /* its file's metadata (n == 0: none) */
};
void agsx_fs_entry_clear(struct agsx_fs_entry *e);
void agsx_fs_entries_free(struct agsx_fs_entry *v, size_t n);
/* EntryInfo as envd emits it: {"name","type":"FILE_TYPE_FILE","path",
 * "size":"12","mode":420,"permissions":"-rw-r--r--","owner","group",
 * "modifiedTime":"2026-12-01T13:22:00.123456789Z","symlinkTarget"?,
 * "metadata"?:{"key":"value"}}. */
void agsx_fs_entry_gen(yajl_gen g, const struct agsx_fs_entry *e);
/* "metadata":{...} of M into the open map G; nothing when M is empty. */
void agsx_fs_meta_gen(yajl_gen g, const struct agsx_fs_meta *m);
/* Go's FileMode.String() of MODE (an st_mode) into BUF: "-rw-r--r--",
 * "drwxr-xr-x", "Lrwxrwxrwx", "dtrwxrwxrwx" (sticky), "urwxr-xr-x" (set-uid),
 * "Dcrw-rw-rw-" (a character device), "prw-r--r--" (a FIFO). */
void agsx_fs_mode_string(uint32_t mode, char buf[static 16]);

/* ---- operations (envd's Filesystem service) ---- */
/* Stat: not_found when missing. */
int agsx_fs_stat(struct agsx_fs_ctx *c, const char *path, struct agsx_fs_entry *ret,
                 agsx_error_t *err);
/* ListDir: entries below PATH up to DEPTH levels (0 means 1), the root
 * excluded, in lexical (WalkDir) order; a symlink to a directory is
 * followed at the top only; entry paths are built from the requested path;
 * entries that vanish meanwhile are skipped. not_found for a missing PATH,
 * invalid_argument when it is no directory, resource_exhausted past
 * AGSX_FS_LIST_MAX_ENTRIES. */
int agsx_fs_list(struct agsx_fs_ctx *c, const char *path, unsigned depth,
                 struct agsx_fs_entry **ret, size_t *ret_n, agsx_error_t *err);
/* MakeDir: with parents, owned by the user; already_exists if the
 * directory exists, invalid_argument if PATH (or a parent) is no directory. */
int agsx_fs_mkdir(struct agsx_fs_ctx *c, const char *path, struct agsx_fs_entry *ret,
                  agsx_error_t *err);
/* Move: rename(2) inside the sandbox (replacing DST as rename does; a
 * missing DST parent is created); not_found for a missing SRC. RET is the
 * entry at DST. Both directories must be the sandbox's root's to write,
 * and a directory that changes parent its own (its ".."). */
int agsx_fs_move(struct agsx_fs_ctx *c, const char *src, const char *dst, struct agsx_fs_entry *ret,
                 agsx_error_t *err);
/* Remove: recursive, a missing path is no error; "/" is refused
 * (invalid_argument). Every entry removed, at every level, passes what the
 * sandbox's root would need (fs_check_unlink, and no mount point): the
 * first one that does not stops the removal (permission_denied or
 * invalid_argument), what was removed before it stays removed. */
int agsx_fs_remove(struct agsx_fs_ctx *c, const char *path, agsx_error_t *err);

/* ---- uploads (POST /files) ----
 * Streamed: the data goes to an unnamed file (O_TMPFILE; a hidden
 * `.agsx-upload-*` temp where the filesystem lacks it) in PATH's directory,
 * and agsx_fs_upload_commit() renames it over PATH. So a failed or aborted
 * upload leaves no half file and the old content stays — unlike envd, which
 * truncates in place; the price is that an upload replaces the inode (hard
 * links to the old file keep the old content) and inotify users in the
 * sandbox see the temp's name (agsx's own watchers hide it). A symlink at PATH is
 * followed (inside the root), as envd's open would. Parents are created,
 * owned by the user; the file is the user's, mode 0644 or the mode of the
 * file it replaces. ENOSPC/EDQUOT map to resource_exhausted (REST 507). */
struct agsx_fs_upload;
int agsx_fs_upload_open(struct agsx_fs_ctx *c, const char *path, struct agsx_fs_upload **ret,
                        agsx_error_t *err);
int agsx_fs_upload_write(struct agsx_fs_upload *u, const void *buf, size_t len, agsx_error_t *err);
/* Puts the file in place; RET (may be NULL) gets its entry. */
int agsx_fs_upload_commit(struct agsx_fs_upload *u, struct agsx_fs_entry *ret, agsx_error_t *err);
/* Frees U; an upload not committed is thrown away. */
void agsx_fs_upload_free(struct agsx_fs_upload *u);

/* A whole POST /files body, as envd takes it: any multipart type (every part
 * named `file` is a file, other parts are skipped; its destination is
 * QUERY_PATH when given, else the part's raw filename, resolved as above)
 * or application/octet-stream (the raw body to QUERY_PATH, required then);
 * other content types are invalid_argument. GZIP: the body is
 * gzip-encoded (Content-Encoding: gzip). The same destination twice is
 * invalid_argument (400), as envd. Files are committed as their part ends;
 * a failure leaves the ones before it. */
struct agsx_fs_receive;
int agsx_fs_receive_open(struct agsx_fs_ctx *c, const char *content_type, const char *query_path,
                         bool gzip, struct agsx_fs_receive **ret, agsx_error_t *err);
int agsx_fs_receive_feed(struct agsx_fs_receive *r, const void *buf, size_t len, agsx_error_t *err);
/* Writes META (taken: M is left empty) on each file of the body, before it
 * is put in place. */
void agsx_fs_receive_set_meta(struct agsx_fs_receive *r, struct agsx_fs_meta *meta);
/* The body ended: checks it was complete and returns the written files
 * (path, name, type and meta filled; the caller frees with
 * agsx_fs_entries_free). */
int agsx_fs_receive_finish(struct agsx_fs_receive *r, struct agsx_fs_entry **ret, size_t *ret_n,
                           agsx_error_t *err);
void agsx_fs_receive_free(struct agsx_fs_receive *r);

/* ---- compose (POST /files/compose, envd's) ----
 * Concatenates SOURCES (N absolute or envd-style paths, each a regular
 * file the sandbox's root may read; symlinks followed inside the root) into
 * DEST, written as an upload (above: an unnamed file put in place at the
 * end, parents created, the user's), then unlinks each source's own name
 * (a symlink, not its target; as envd, a source that cannot be removed
 * stays, and no directory is ever removed). A source that is DEST (by
 * path, or by inode through a symlink) is invalid_argument, as is an
 * empty list or more than AGSX_FS_COMPOSE_MAX; a missing source is
 * not_found ("source file not found: ..."). The copy goes in steps
 * (copy_file_range), so a server's loop can interleave other work. */
#define AGSX_FS_COMPOSE_MAX 10000u
struct agsx_fs_compose;
int agsx_fs_compose_open(struct agsx_fs_ctx *c, char *const *sources, size_t n, const char *dest,
                         struct agsx_fs_compose **ret, agsx_error_t *err);
/* Copies at most MAX bytes: 1 when every source is copied, 0 when more is
 * left, -1 on failure (ENOSPC: resource_exhausted). */
int agsx_fs_compose_step(struct agsx_fs_compose *k, uint64_t max, agsx_error_t *err);
/* Puts DEST in place and removes the sources; RET (path, name, type) may be NULL. */
int agsx_fs_compose_commit(struct agsx_fs_compose *k, struct agsx_fs_entry *ret, agsx_error_t *err);
void agsx_fs_compose_free(struct agsx_fs_compose *k);
/* The JSON body of POST /files/compose: {"source_paths":[...],
 * "destination":"...","username"?:"..."}; invalid_argument when it is no
 * such object (envd's messages), within AGSX_FS_COMPOSE_MAX sources. */
struct agsx_fs_compose_req {
  char **sources; /* NULL-terminated */
  size_t n;
  char *dest, *user; /* user NULL: the default */
};
int agsx_fs_compose_parse(const char *body, size_t len, struct agsx_fs_compose_req *ret,
                          agsx_error_t *err);
void agsx_fs_compose_req_clear(struct agsx_fs_compose_req *q);

/* ---- downloads (GET /files) ----
 * A read-only fd of the regular file at PATH (symlinks followed inside the
 * root), its size when opened, and its absolute path. not_found with envd's
 * message "path '/x' does not exist" (REST 404); invalid_argument for a
 * directory or anything that is not a regular file (REST 400). Range and
 * Content-Disposition are the server's. */
int agsx_fs_download_open(struct agsx_fs_ctx *c, const char *path, int *ret_fd, uint64_t *ret_size,
                          char **ret_path, agsx_error_t *err);

/* ---- signed URLs (e2b-protocol.md §3.2) ----
 * "v1_" + base64 (standard, unpadded) of sha256("PATH:OPERATION:USER:TOKEN")
 * or, with an expiration, "PATH:OPERATION:USER:TOKEN:EXPIRATION". PATH is
 * the query's path as sent, OPERATION "read" or "write", USER the query's
 * username or "". */
char *agsx_fs_signature(const char *path, const char *operation, const char *user,
                        const char *token, int64_t expiration /* 0: none */);
/* Checks a request's SIGNATURE and EXPIRATION text (NULL when absent)
 * against TOKEN at time NOW (seconds): 0 when valid, -1 with EACCES
 * ("invalid signature", "signature is already expired") otherwise. The
 * comparison takes constant time. */
int agsx_fs_signature_check(const char *path, const char *operation, const char *user,
                            const char *token, const char *signature, const char *expiration,
                            int64_t now, agsx_error_t *err);

/* ---- watchers (WatchDir, CreateWatcher) ----
 * inotify on PATH (a directory), and with RECURSIVE on every directory
 * below it, present or created later (up to AGSX_FS_WATCH_MAX_DIRS, and
 * the pool's bound on the watches of a sandbox).
 * inotify_add_watch only ever sees /proc/self/fd/N of a directory opened
 * safely inside the root. Events: IN_CREATE, IN_MOVED_TO → CREATE;
 * IN_MODIFY → WRITE; IN_DELETE, IN_DELETE_SELF → REMOVE;
 * IN_MOVED_FROM, IN_MOVE_SELF → RENAME; IN_ATTRIB → CHMOD; names are
 * relative to PATH ("a.txt", "sub/b.txt"). An upload's temporary file is
 * not shown; its rename into place is CREATE then WRITE of the file, what
 * envd's write in place shows (for a file that existed too: envd would
 * show WRITE only). Watchers take no inotify instance of their own: their
 * watches are subscriptions of the pool's hub (util/inotify.h), whose
 * instances are shared (one per sandbox while the hub's part of the host's
 * limit allows), and the pool bounds the watchers of a sandbox and of the
 * process (past either, or past the sandbox's share of watches: ENOSPC,
 * resource_exhausted, with a message that says which). The watcher never
 * blocks: the hub's dispatch (the server's loop, or
 * agsx_fs_watch_dispatch) moves kernel events into its bounded queue; past
 * AGSX_FS_WATCH_QUEUE events (or the kernel's queue overflowing) the
 * watcher is marked overflowed and agsx_fs_watch_next() fails with ENOBUFS
 * (resource_exhausted, "events were lost"). The watcher keeps its own
 * reference to the sandbox's root, so it outlives the request's context;
 * that reference pins the sandbox's mounts, so a watcher ends with its
 * sandbox: agsx_fs_watch_next() fails with ESRCH (unavailable) once the
 * sandbox's init is gone, and the registry drops such watchers. */
enum agsx_fs_event_type {
  AGSX_FS_EVENT_CREATE = 1,
  AGSX_FS_EVENT_WRITE,
  AGSX_FS_EVENT_REMOVE,
  AGSX_FS_EVENT_RENAME,
  AGSX_FS_EVENT_CHMOD,
};
/* "EVENT_TYPE_CREATE", ... */
const char *agsx_fs_event_type_name(enum agsx_fs_event_type t);

struct agsx_fs_event {
  char *name;
  enum agsx_fs_event_type type;
  bool has_entry; /* with AGSX_FS_WATCH_ENTRY, when the entry could be stat'ed */
  struct agsx_fs_entry entry;
};
void agsx_fs_event_clear(struct agsx_fs_event *e);
/* FilesystemEvent: {"name","type":"EVENT_TYPE_CREATE","entry"?:EntryInfo}. */
void agsx_fs_event_gen(yajl_gen g, const struct agsx_fs_event *e);

enum {
  AGSX_FS_WATCH_RECURSIVE = 1 << 0,
  AGSX_FS_WATCH_ENTRY = 1 << 1, /* include_entry: stat each CREATE, WRITE or CHMOD's entry */
  /* allow_network_mounts: without it a PATH on NFS, CIFS, SMB or FUSE is
   * invalid_argument, as envd (whose inotify misses remote changes there) */
  AGSX_FS_WATCH_NETWORK_MOUNTS = 1 << 2,
};
/* F_TYPE (statfs) is one of those network filesystems. */
bool agsx_fs_network_fs(unsigned long f_type);

struct agsx_inotify;
/* Watchers of one process: their hub, and at most PER_SANDBOX watchers of
 * a sandbox, TOTAL in all, WATCHES_PER_SANDBOX inotify watches of a
 * sandbox's watchers together. Freed after its watchers. */
struct agsx_fs_watch_pool;
struct agsx_fs_watch_pool *agsx_fs_watch_pool_new(struct agsx_inotify *hub, unsigned per_sandbox,
                                                  unsigned total, unsigned watches_per_sandbox);
void agsx_fs_watch_pool_free(struct agsx_fs_watch_pool *p);
/* Its watchers of SANDBOX_ID (NULL: all). */
unsigned agsx_fs_watch_pool_count(const struct agsx_fs_watch_pool *p, const char *sandbox_id);

struct agsx_fs_watch;
/* not_found for a missing PATH, invalid_argument for a file (or a
 * network filesystem, see above), resource_exhausted past the pool's
 * bounds. */
int agsx_fs_watch_open(struct agsx_fs_watch_pool *pool, struct agsx_fs_ctx *c, const char *path,
                       unsigned flags, struct agsx_fs_watch **ret, agsx_error_t *err);
void agsx_fs_watch_free(struct agsx_fs_watch *w);
/* The hub's fd: readable when events wait (for W or another watcher). */
int agsx_fs_watch_fd(const struct agsx_fs_watch *w);
/* Delivers what the hub has into the queues (never blocks); notes the
 * sandbox's end. */
void agsx_fs_watch_dispatch(struct agsx_fs_watch *w);
/* The next queued event into *RET (agsx_fs_event_clear it): 1, or 0 when
 * none is queued; -1 with ENOBUFS after an overflow, ENOENT once the
 * watched directory itself is gone (after its REMOVE event was returned),
 * ESRCH once the sandbox ended. */
int agsx_fs_watch_next(struct agsx_fs_watch *w, struct agsx_fs_event *ret, agsx_error_t *err);

/* The polling watchers of one server process (CreateWatcher,
 * GetWatcherEvents, RemoveWatcher): a table by random id (32 hex digits),
 * bounded in count, each bound to its sandbox id, removed after IDLE_MS
 * without a GetWatcherEvents or once its sandbox ended. Their events come
 * through the hub; the server's loop calls agsx_fs_watchers_tick each turn
 * and waits at most agsx_fs_watchers_timeout_ms. */
struct agsx_fs_watchers;
struct agsx_fs_watchers *agsx_fs_watchers_new(size_t max, int idle_ms);
void agsx_fs_watchers_free(struct agsx_fs_watchers *r);
/* Takes W (freed on failure too); RET_ID gets its id. resource_exhausted
 * when MAX watchers exist. */
int agsx_fs_watchers_add(struct agsx_fs_watchers *r, const char *sandbox_id,
                         struct agsx_fs_watch *w, char ret_id[33], agsx_error_t *err);
/* Drains the events of watcher ID of SANDBOX_ID (not_found for an unknown
 * id or another sandbox's). A watcher that overflowed fails once with
 * ENOBUFS and is removed. */
int agsx_fs_watchers_events(struct agsx_fs_watchers *r, const char *sandbox_id, const char *id,
                            struct agsx_fs_event **ret, size_t *ret_n, agsx_error_t *err);
int agsx_fs_watchers_remove(struct agsx_fs_watchers *r, const char *sandbox_id, const char *id,
                            agsx_error_t *err);
/* Removes every watcher of SANDBOX_ID (it was killed). */
void agsx_fs_watchers_drop_sandbox(struct agsx_fs_watchers *r, const char *sandbox_id);
size_t agsx_fs_watchers_count(const struct agsx_fs_watchers *r);
/* Removes the idle ones, and those whose sandbox ended. */
void agsx_fs_watchers_tick(struct agsx_fs_watchers *r);
/* Until the next idle expiry; -1 when there is no watcher. */
int agsx_fs_watchers_timeout_ms(const struct agsx_fs_watchers *r);

#endif
