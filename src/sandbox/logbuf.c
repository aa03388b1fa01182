/* agsx — sandbox: bounded framed logs (see logbuf.h).
 *
 * Layout on disk, in the log's directory:
 *   0000000000000000  a segment: records from offset 0
 *   00000000003fffd0  the next segment, started once the first held cap/2
 *   end               the end record (exit code, signal, error, final offset)
 * The writer keeps two segments at most (the full previous one and the
 * current one), so a log holds at most CAP bytes plus one record. Records
 * are appended with one write each; a reader that sees part of one waits
 * for the rest (the writer is alive) or, when a later segment or the end
 * exists, takes it as torn and moves on. */
#include "config.h"

#include "sandbox/logbuf.h"
#include "util/conf.h"
#include "util/inotify.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/uio.h>

#define SEG_NAME_LEN 16
#define END_NAME "end"
#define END_TMP "end.tmp"
#define END_FIXED 16              /* u64 final offset, i32 exit code, i32 signal */
#define MAX_SEGMENTS_SCANNED 4096 /* a hostile directory's entries looked at */

struct hdr {
  uint8_t kind, flags;
  uint16_t reserved;
  uint32_t len;
  int64_t time_ns;
};

static void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++)
    v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static void hdr_encode(const struct hdr *h, uint8_t out[AGSX_LOG_HDR]) {
  out[0] = h->kind;
  out[1] = h->flags;
  put_le(out + 2, h->reserved, 2);
  put_le(out + 4, h->len, 4);
  put_le(out + 8, (uint64_t)h->time_ns, 8);
}

static void hdr_decode(const uint8_t in[AGSX_LOG_HDR], struct hdr *h) {
  h->kind = in[0];
  h->flags = in[1];
  h->reserved = (uint16_t)get_le(in + 2, 2);
  h->len = (uint32_t)get_le(in + 4, 4);
  h->time_ns = (int64_t)get_le(in + 8, 8);
}

/* Kinds a segment may hold (END lives in its own file, LOST is the reader's). */
static bool hdr_valid(const struct hdr *h) {
  bool kind = h->kind == AGSX_LOG_STDOUT || h->kind == AGSX_LOG_STDERR || h->kind == AGSX_LOG_PTY ||
              h->kind == AGSX_LOG_META;
  return kind && h->len <= AGSX_LOG_REC_MAX;
}

static bool seg_name_parse(const char *name, uint64_t *ret) {
  if (strlen(name) != SEG_NAME_LEN)
    return false;
  uint64_t v = 0;
  for (int i = 0; i < SEG_NAME_LEN; i++) {
    char c = name[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0)
      return false;
    v = v << 4 | (uint64_t)d;
  }
  *ret = v;
  return true;
}

static void seg_name(uint64_t start, char out[SEG_NAME_LEN + 1]) {
  snprintf(out, SEG_NAME_LEN + 1, "%016" PRIx64, start);
}

/* The segments' first offsets, in one pass over the directory: the oldest,
 * the newest, the smallest above AFTER and the largest at or below AT. */
struct seg_scan {
  bool any;
  uint64_t oldest, newest;
  bool has_next;
  uint64_t next; /* the smallest start > after */
  bool has_floor;
  uint64_t floor; /* the largest start <= at */
};

static int scan_segments(int dirfd, uint64_t after, uint64_t at, struct seg_scan *s) {
  memset(s, 0, sizeof(*s));
  _cleanup_dir_ DIR *d = agsx_dir_stream(dirfd);
  if (d == NULL)
    return -errno;
  struct dirent *e;
  for (int n = 0; (e = readdir(d)) != NULL && n < MAX_SEGMENTS_SCANNED; n++) {
    uint64_t v;
    if (!seg_name_parse(e->d_name, &v))
      continue;
    if (!s->any || v < s->oldest)
      s->oldest = v;
    if (!s->any || v > s->newest)
      s->newest = v;
    s->any = true;
    if (v > after && (!s->has_next || v < s->next)) {
      s->has_next = true;
      s->next = v;
    }
    if (v <= at && (!s->has_floor || v > s->floor)) {
      s->has_floor = true;
      s->floor = v;
    }
  }
  return 0;
}

/* Walks the complete, valid records of FD from POS; returns the position
 * after the last one, or the first record boundary at or after STOP. */
static uint64_t walk_records(int fd, uint64_t pos, uint64_t stop) {
  struct stat st;
  if (fstat(fd, &st) < 0)
    return pos;
  uint64_t size = (uint64_t)st.st_size;
  while (pos < stop && pos + AGSX_LOG_HDR <= size) {
    uint8_t b[AGSX_LOG_HDR];
    if (pread(fd, b, sizeof(b), (off_t)pos) != (ssize_t)sizeof(b))
      break;
    struct hdr h;
    hdr_decode(b, &h);
    if (!hdr_valid(&h) || size - pos - AGSX_LOG_HDR < h.len)
      break;
    pos += AGSX_LOG_HDR + h.len;
  }
  return pos;
}

static int open_log_dir(int dirfd, const char *name, bool create, agsx_error_t *err) {
  if (create && mkdirat(dirfd, name, 0700) < 0 && errno != EEXIST)
    return agsx_error_set(err, errno, "create log `%s`", name);
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "open log `%s`", name);
  return fd;
}

/* ---- the writer --------------------------------------------------------------------------- */

struct agsx_log_writer {
  int dirfd, segfd;
  uint64_t cap;
  uint64_t seg_start, seg_len; /* the current segment */
  bool has_prev;
  uint64_t prev_start;
  bool ended;
};

static int open_segment(struct agsx_log_writer *w, uint64_t start, bool create, agsx_error_t *err) {
  char name[SEG_NAME_LEN + 1];
  seg_name(start, name);
  int fd =
      openat(w->dirfd, name,
             O_RDWR | O_APPEND | O_NOFOLLOW | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0), 0600);
  if (fd < 0)
    return agsx_error_set(err, errno, "log segment `%s`", name);
  agsx_closep(&w->segfd);
  w->segfd = fd;
  w->seg_start = start;
  return 0;
}

/* Continues a log: the newest segment, a torn last record cut off, and
 * segments older than the one before it dropped (as the writer would have). */
static int writer_continue(struct agsx_log_writer *w, agsx_error_t *err) {
  struct seg_scan s;
  int r = scan_segments(w->dirfd, UINT64_MAX, UINT64_MAX, &s);
  if (r < 0)
    return agsx_error_set(err, -r, "read log directory");
  unlinkat(w->dirfd, END_NAME, 0); /* a new writer: not ended any more */
  if (!s.any)
    return open_segment(w, 0, true, err);
  if (open_segment(w, s.newest, false, err) < 0)
    return -1;
  w->seg_len = walk_records(w->segfd, 0, UINT64_MAX);
  if (ftruncate(w->segfd, (off_t)w->seg_len) < 0)
    return agsx_error_set(err, errno, "truncate log segment");
  struct seg_scan p;
  if (s.newest == 0 || scan_segments(w->dirfd, UINT64_MAX, s.newest - 1, &p) < 0 || !p.has_floor)
    return 0;
  w->has_prev = true;
  w->prev_start = p.floor;
  _cleanup_dir_ DIR *d = agsx_dir_stream(w->dirfd);
  struct dirent *e;
  for (int n = 0; d && (e = readdir(d)) != NULL && n < MAX_SEGMENTS_SCANNED; n++) {
    uint64_t v;
    if (seg_name_parse(e->d_name, &v) && v < p.floor)
      unlinkat(w->dirfd, e->d_name, 0);
  }
  return 0;
}

int agsx_log_writer_open(int dirfd, const char *name, uint64_t cap, struct agsx_log_writer **ret,
                         agsx_error_t *err) {
  struct agsx_log_writer *w = xzalloc(sizeof(*w));
  w->segfd = -1;
  w->cap = cap < AGSX_LOG_CAP_MIN ? AGSX_LOG_CAP_MIN : cap;
  w->dirfd = open_log_dir(dirfd, name, true, err);
  if (w->dirfd < 0 || writer_continue(w, err) < 0) {
    agsx_log_writer_free(w);
    return -1;
  }
  *ret = w;
  return 0;
}

/* A new segment at the current end; the one before the previous goes. */
static int rotate(struct agsx_log_writer *w, agsx_error_t *err) {
  uint64_t start = w->seg_start + w->seg_len, old = w->seg_start;
  if (open_segment(w, start, true, err) < 0)
    return -1;
  w->seg_len = 0;
  if (w->has_prev) {
    char name[SEG_NAME_LEN + 1];
    seg_name(w->prev_start, name);
    if (unlinkat(w->dirfd, name, 0) < 0 && errno != ENOENT)
      return agsx_error_set(err, errno, "drop log segment `%s`", name);
  }
  w->has_prev = true;
  w->prev_start = old;
  return 0;
}

static int write_record(struct agsx_log_writer *w, enum agsx_log_kind kind, const void *buf,
                        size_t len, agsx_error_t *err) {
  if (w->seg_len > 0 && w->seg_len + AGSX_LOG_HDR + len > w->cap / 2 && rotate(w, err) < 0)
    return -1;
  struct hdr h = {.kind = (uint8_t)kind, .len = (uint32_t)len, .time_ns = agsx_now_ns()};
  uint8_t b[AGSX_LOG_HDR];
  hdr_encode(&h, b);
  struct iovec iov[2] = {{b, sizeof(b)}, {(void *)buf, len}};
  size_t want = sizeof(b) + len;
  ssize_t n;
  do
    n = writev(w->segfd, iov, 2);
  while (n < 0 && errno == EINTR);
  if (n != (ssize_t)want) {
    /* A short write (the tmpfs is full): cut it off again so that the
     * segment stays a sequence of whole records. */
    int e = n < 0 ? errno : ENOSPC;
    if (n > 0 && ftruncate(w->segfd, (off_t)w->seg_len) < 0) {
    }
    return agsx_error_set(err, e, "write log record");
  }
  w->seg_len += want;
  return 0;
}

int agsx_log_write(struct agsx_log_writer *w, enum agsx_log_kind kind, const void *buf, size_t len,
                   agsx_error_t *err) {
  if (w->ended)
    return agsx_error_set(err, EPIPE, "the log has ended");
  if (kind == AGSX_LOG_END || kind == AGSX_LOG_LOST || kind < AGSX_LOG_STDOUT ||
      kind > AGSX_LOG_META)
    return agsx_error_set(err, EINVAL, "log record kind %d cannot be written", (int)kind);
  const char *p = buf;
  do {
    size_t n = len < AGSX_LOG_REC_MAX ? len : AGSX_LOG_REC_MAX;
    if (write_record(w, kind, p, n, err) < 0)
      return -1;
    p += n;
    len -= n;
  } while (len > 0);
  return 0;
}

int agsx_log_end(struct agsx_log_writer *w, int exit_code, int term_signal, const char *error,
                 agsx_error_t *err) {
  if (w->ended)
    return 0;
  size_t elen = error ? strnlen(error, AGSX_LOG_ERROR_MAX) : 0;
  uint8_t b[AGSX_LOG_HDR + END_FIXED + AGSX_LOG_ERROR_MAX];
  struct hdr h = {
      .kind = AGSX_LOG_END, .len = (uint32_t)(END_FIXED + elen), .time_ns = agsx_now_ns()};
  hdr_encode(&h, b);
  put_le(b + AGSX_LOG_HDR, w->seg_start + w->seg_len, 8);
  put_le(b + AGSX_LOG_HDR + 8, (uint32_t)exit_code, 4);
  put_le(b + AGSX_LOG_HDR + 12, (uint32_t)term_signal, 4);
  if (elen)
    memcpy(b + AGSX_LOG_HDR + END_FIXED, error, elen);
  /* Not agsx_write_file_atomic: the state tmpfs needs no fsync, and the
   * supervisor ends hundreds of logs at a sandbox's stop. */
  _cleanup_close_ int fd =
      openat(w->dirfd, END_TMP, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 || agsx_write_all(fd, b, AGSX_LOG_HDR + h.len) < 0 ||
      renameat(w->dirfd, END_TMP, w->dirfd, END_NAME) < 0)
    return agsx_error_set(err, errno, "write the log's end");
  w->ended = true;
  return 0;
}

void agsx_log_writer_free(struct agsx_log_writer *w) {
  if (w == NULL)
    return;
  agsx_closep(&w->segfd);
  agsx_closep(&w->dirfd);
  free(w);
}

/* ---- the reader --------------------------------------------------------------------------- */

/* Readers follow their writer through inotify: an instance each, or, in a
 * process that shares a hub (agsx_log_readers_share: a server following
 * many logs), a subscription of the hub's "logs" group, whose events only
 * wake its loop (every reader reads to the end of its log anyway). A
 * forked child forgets its parent's hub: it is not its to use. */
static struct {
  pthread_mutex_t lock;
  pid_t owner;
  struct agsx_inotify *hub;
} share = {.lock = PTHREAD_MUTEX_INITIALIZER};

void agsx_log_readers_share(struct agsx_inotify *hub) {
  pthread_mutex_lock(&share.lock);
  share.owner = getpid();
  share.hub = hub;
  pthread_mutex_unlock(&share.lock);
}

static struct agsx_inotify *shared_hub(void) {
  pthread_mutex_lock(&share.lock);
  struct agsx_inotify *h = share.owner == getpid() ? share.hub : NULL;
  pthread_mutex_unlock(&share.lock);
  return h;
}

static void drain_fd(int fd) {
  char buf[4096];
  while (fd >= 0 && read(fd, buf, sizeof(buf)) > 0) {
  }
}

struct agsx_log_reader {
  int dirfd, inofd, segfd;      /* inofd: its own instance, or -1 */
  struct agsx_inotify_sub *sub; /* or its subscription of the shared hub */
  uint64_t seg_start;           /* of the open segment */
  uint64_t offset;              /* of the next record */
  bool positioned, from_end;
  bool ended;
  struct agsx_log_rec end;
  char *buf;
  char error[AGSX_LOG_ERROR_MAX + 1];
};

static int position(struct agsx_log_reader *r, uint64_t *ret_lost);

int agsx_log_reader_open(int dirfd, const char *name, uint64_t from, struct agsx_log_reader **ret,
                         agsx_error_t *err) {
  struct agsx_log_reader *r = xzalloc(sizeof(*r));
  r->segfd = r->inofd = -1;
  r->buf = xmalloc(AGSX_LOG_REC_MAX);
  r->dirfd = open_log_dir(dirfd, name, false, err);
  if (r->dirfd < 0) {
    agsx_log_reader_free(r);
    return -1;
  }
  const uint32_t mask = IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_DELETE;
  struct agsx_inotify *hub = shared_hub();
  if (hub) {
    if (agsx_inotify_add(hub, "logs", 0, r->dirfd, mask, NULL, NULL, &r->sub, err) < 0) {
      agsx_error_wrap(err, "follow log `%s`", name);
      agsx_log_reader_free(r);
      return -1;
    }
  } else {
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", r->dirfd);
    r->inofd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (r->inofd < 0 || inotify_add_watch(r->inofd, path, mask) < 0) {
      agsx_error_set(err, errno, "watch log `%s`", name);
      agsx_log_reader_free(r);
      return -1;
    }
  }
  r->from_end = from == AGSX_LOG_FROM_END;
  r->offset = r->from_end ? 0 : from;
  uint64_t lost;
  if (r->from_end && position(r, &lost) == 0)
    r->from_end = false; /* nothing written yet: everything comes after */
  *ret = r;
  return 0;
}

/* Reads the end file: 1 when the log has ended (R->end filled). */
static int read_end(struct agsx_log_reader *r) {
  _cleanup_close_ int fd =
      openat(r->dirfd, END_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | AGSX_O_UNTRUSTED);
  if (fd < 0)
    return 0;
  uint8_t b[AGSX_LOG_HDR + END_FIXED + AGSX_LOG_ERROR_MAX];
  ssize_t n = pread(fd, b, sizeof(b), 0);
  if (n < AGSX_LOG_HDR + END_FIXED)
    return 0; /* not (yet) a valid end: the writer renames whole files */
  struct hdr h;
  hdr_decode(b, &h);
  if (h.kind != AGSX_LOG_END || h.len < END_FIXED || h.len > (size_t)n - AGSX_LOG_HDR)
    return 0;
  size_t elen = h.len - END_FIXED;
  memcpy(r->error, b + AGSX_LOG_HDR + END_FIXED, elen);
  r->error[elen] = '\0';
  r->end = (struct agsx_log_rec){
      .kind = AGSX_LOG_END,
      .time_ns = h.time_ns,
      .offset = get_le(b + AGSX_LOG_HDR, 8),
      .exit_code = (int32_t)get_le(b + AGSX_LOG_HDR + 8, 4),
      .term_signal = (int32_t)get_le(b + AGSX_LOG_HDR + 12, 4),
      .error = elen ? r->error : NULL,
  };
  return 1;
}

static int open_reader_segment(struct agsx_log_reader *r, uint64_t start) {
  char name[SEG_NAME_LEN + 1];
  seg_name(start, name);
  int fd = openat(r->dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | AGSX_O_UNTRUSTED);
  if (fd < 0)
    return -errno;
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return -EINVAL;
  }
  agsx_closep(&r->segfd);
  r->segfd = fd;
  r->seg_start = start;
  return 0;
}

/* Finds the segment holding R->offset (or the first after it: LOST).
 * 1: positioned; 0: no segment yet; 2: a gap of *RET_LOST bytes. */
static int position(struct agsx_log_reader *r, uint64_t *ret_lost) {
  for (int tries = 0; tries < 8; tries++) {
    struct seg_scan s;
    if (scan_segments(r->dirfd, r->offset, r->from_end ? UINT64_MAX : r->offset, &s) < 0 || !s.any)
      return 0;
    uint64_t start;
    bool gap = false;
    if (r->from_end)
      start = s.newest;
    else if (s.has_floor)
      start = s.floor;
    else
      start = s.oldest, gap = true;
    int e = open_reader_segment(r, start);
    if (e == -ENOENT)
      continue; /* dropped meanwhile */
    if (e < 0)
      return 0;
    uint64_t within = r->from_end ? UINT64_MAX : gap ? 0 : r->offset - start;
    uint64_t pos = walk_records(r->segfd, 0, within);
    r->from_end = false;
    r->positioned = true;
    if (gap) {
      *ret_lost = start - r->offset;
      r->offset = start;
      return 2;
    }
    r->offset = start + pos;
    return 1;
  }
  return 0;
}

/* At the end of the open segment: moved to the next one (1), none yet (0),
 * a gap (2), or a record that completed meanwhile (3, RET filled). */
static int read_record(struct agsx_log_reader *r, struct agsx_log_rec *ret);

static int advance(struct agsx_log_reader *r, struct agsx_log_rec *ret, uint64_t *ret_lost) {
  struct seg_scan s;
  if (scan_segments(r->dirfd, r->seg_start, r->offset, &s) < 0 || !s.has_next)
    return 0;
  /* The writer starts a segment only after its last write to the one
   * before: a record seen in part a moment ago is whole now. */
  if (read_record(r, ret) == 1)
    return 3;
  int e = open_reader_segment(r, s.next);
  if (e == -ENOENT) {
    r->positioned = false;
    return position(r, ret_lost);
  }
  if (e < 0)
    return 0; /* unreadable (not a file): wait, without looping */
  if (s.next > r->offset) {
    *ret_lost = s.next - r->offset;
    r->offset = s.next;
    return 2;
  }
  r->offset = s.next; /* (below ours only in a hostile log: taken from its start) */
  return 1;
}

static void drain_inotify(struct agsx_log_reader *r) { drain_fd(r->inofd); }

static int lost_record(struct agsx_log_reader *r, uint64_t lost, struct agsx_log_rec *ret) {
  *ret = (struct agsx_log_rec){
      .kind = AGSX_LOG_LOST, .time_ns = agsx_now_ns(), .offset = r->offset - lost, .lost = lost};
  return 1;
}

/* One record of the open segment at R->offset: 1, or 0 (none complete there). */
static int read_record(struct agsx_log_reader *r, struct agsx_log_rec *ret) {
  uint64_t pos = r->offset - r->seg_start;
  uint8_t b[AGSX_LOG_HDR];
  if (pread(r->segfd, b, sizeof(b), (off_t)pos) != (ssize_t)sizeof(b))
    return 0;
  struct hdr h;
  hdr_decode(b, &h);
  if (!hdr_valid(&h))
    return 0;
  if (h.len > 0 && pread(r->segfd, r->buf, h.len, (off_t)(pos + AGSX_LOG_HDR)) != (ssize_t)h.len)
    return 0;
  *ret = (struct agsx_log_rec){
      .kind = h.kind, .time_ns = h.time_ns, .offset = r->offset, .data = r->buf, .len = h.len};
  r->offset += AGSX_LOG_HDR + h.len;
  return 1;
}

int agsx_log_next(struct agsx_log_reader *r, struct agsx_log_rec *ret, agsx_error_t *err) {
  (void)err;
  if (r->ended) {
    *ret = r->end;
    return 2;
  }
  drain_inotify(r);
  /* The end is checked before the records: a writer writes it after its
   * last record, so what is read after seeing it is complete. */
  bool ended = read_end(r) == 1;
  uint64_t lost = 0;
  int p = 1;
  if (!r->positioned)
    p = position(r, &lost);
  /* Each pass either returns or moves to a segment with a larger start. */
  for (int guard = 0; p != 0 && guard < MAX_SEGMENTS_SCANNED; guard++) {
    if (p == 2)
      return lost_record(r, lost, ret);
    if (read_record(r, ret) == 1)
      return 1;
    p = advance(r, ret, &lost);
    if (p == 3)
      return 1;
  }
  if (!ended)
    return 0;
  r->ended = true;
  *ret = r->end;
  return 2;
}

int agsx_log_reader_fd(const struct agsx_log_reader *r) { return r->inofd; }

uint64_t agsx_log_reader_offset(const struct agsx_log_reader *r) {
  return r->ended ? r->end.offset : r->offset;
}

void agsx_log_reader_free(struct agsx_log_reader *r) {
  if (r == NULL)
    return;
  agsx_closep(&r->segfd);
  agsx_inotify_rm(r->sub);
  agsx_closep(&r->inofd);
  agsx_closep(&r->dirfd);
  free(r->buf);
  free(r);
}

int agsx_log_cap_conf(uint64_t *ret, agsx_error_t *err) {
  _cleanup_free_ char *v = NULL;
  *ret = AGSX_LOG_DEFAULT_CAP;
  if (agsx_conf_get("log-size", "AGSX_LOG_SIZE", &v, err) < 0)
    return -1;
  if (v == NULL)
    return 0;
  if (agsx_parse_size(v, ret, err) < 0)
    return agsx_error_wrap(err, "log-size");
  if (*ret < AGSX_LOG_CAP_MIN || *ret > AGSX_LOG_CAP_MAX)
    return agsx_error_set(err, EINVAL, "invalid log-size `%s` (64k to 1g)", v);
  return 0;
}
