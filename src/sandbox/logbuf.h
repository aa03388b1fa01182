/* agsx — sandbox: a bounded log of framed records.
 *
 * A log is a directory: segments <dir>/<first-offset> (16 hex digits) of
 * framed records (u8 kind, u8 flags, u16 reserved, u32 len, i64 time_ns,
 * then LEN bytes; little-endian, the header is AGSX_LOG_HDR bytes).
 * Offsets count record bytes from the log's start and only ever grow. The
 * writer starts a new segment once the current one holds cap/2 and drops
 * the oldest, so at most CAP bytes (plus one record) are kept; a reader
 * that fell behind gets AGSX_LOG_LOST with the bytes skipped. <dir>/end
 * holds the end record once the writer finished (written atomically: a
 * temporary file renamed). One writer per log; any number of readers,
 * each following the writer through inotify, so a reader never blocks the
 * writer and output written while no reader exists is kept.
 *
 * A reader trusts nothing in the directory: a bad record (unknown kind,
 * length beyond AGSX_LOG_REC_MAX, a segment name that is not an offset, a
 * record running past its segment's successor) ends the segment as if it
 * were torn, and a torn final record after a crash is waited for, never
 * returned. */
#ifndef AGSX_SANDBOX_LOGBUF_H
#define AGSX_SANDBOX_LOGBUF_H

#include "util/util.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AGSX_LOG_HDR 16
#define AGSX_LOG_REC_MAX (64u << 10)    /* payload bytes per record; longer writes are split */
#define AGSX_LOG_CAP_MIN (64u << 10)    /* smaller caps are raised to this */
#define AGSX_LOG_DEFAULT_CAP (8u << 20) /* agsx.conf `log-size` */
#define AGSX_LOG_CAP_MAX (1u << 30)     /* and larger ones refused (log-size) */
#define AGSX_LOG_ERROR_MAX 4096         /* bytes of an end record's error text */

enum agsx_log_kind {
  AGSX_LOG_STDOUT = 1,
  AGSX_LOG_STDERR,
  AGSX_LOG_PTY,
  AGSX_LOG_END,
  AGSX_LOG_LOST,
  AGSX_LOG_META /* the writer's own warnings */
};

struct agsx_log_writer;
/* Creates (or continues) the log NAME under DIRFD, keeping at most CAP bytes. */
int agsx_log_writer_open(int dirfd, const char *name, uint64_t cap, struct agsx_log_writer **ret,
                         agsx_error_t *err);
/* Appends a record (split into AGSX_LOG_REC_MAX pieces); after the end: EPIPE. */
int agsx_log_write(struct agsx_log_writer *w, enum agsx_log_kind kind, const void *buf, size_t len,
                   agsx_error_t *err);
/* The end: EXIT_CODE (>= 0) or TERM_SIGNAL (> 0), and an error text or NULL. */
int agsx_log_end(struct agsx_log_writer *w, int exit_code, int term_signal, const char *error,
                 agsx_error_t *err);
void agsx_log_writer_free(struct agsx_log_writer *w);
/* The cap of sandbox and process logs: agsx.conf `log-size` (env
 * AGSX_LOG_SIZE; 64k to 1g), else AGSX_LOG_DEFAULT_CAP. */
int agsx_log_cap_conf(uint64_t *ret, agsx_error_t *err);

struct agsx_log_rec {
  enum agsx_log_kind kind;
  int64_t time_ns;  /* CLOCK_REALTIME */
  uint64_t offset;  /* of this record */
  const char *data; /* valid until the next call */
  size_t len;
  int exit_code, term_signal; /* AGSX_LOG_END */
  const char *error;          /* AGSX_LOG_END, or NULL */
  uint64_t lost;              /* AGSX_LOG_LOST: bytes skipped */
};

struct agsx_log_reader;
/* FROM: AGSX_LOG_FROM_START, AGSX_LOG_FROM_END (only what comes after), or an offset. */
#define AGSX_LOG_FROM_START 0
#define AGSX_LOG_FROM_END UINT64_MAX
int agsx_log_reader_open(int dirfd, const char *name, uint64_t from, struct agsx_log_reader **ret,
                         agsx_error_t *err);
/* The next record: 1 (filled), 0 (nothing yet: poll agsx_log_reader_fd, then
 * call again), 2 (the end was read: no more records), -1 error. Never blocks. */
int agsx_log_next(struct agsx_log_reader *r, struct agsx_log_rec *ret, agsx_error_t *err);
/* An inotify fd: readable when more may be there; -1 for a reader of a
 * shared hub (agsx_log_readers_share). */
int agsx_log_reader_fd(const struct agsx_log_reader *r);
/* The offset of the next record to read (a resume point). */
uint64_t agsx_log_reader_offset(const struct agsx_log_reader *r);
void agsx_log_reader_free(struct agsx_log_reader *r);
/* From now on this process's new readers subscribe to HUB (util/inotify.h,
 * group "logs") instead of making an inotify instance each: a server that
 * follows many logs at once would otherwise spend host root's instances
 * (128 for the whole host by default). Their agsx_log_reader_fd() is then
 * -1: the hub's fd wakes the process's loop, which calls agsx_log_next()
 * of its readers. NULL: an instance each again. One thread uses the hub. */
struct agsx_inotify;
void agsx_log_readers_share(struct agsx_inotify *hub);

#endif
