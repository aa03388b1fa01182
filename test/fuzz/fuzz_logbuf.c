/* Fuzz target: a log directory (sandbox/logbuf.h) as a hostile sandbox or a
 * crash may leave it. The input is a list of files, each one byte naming it
 * (from a table of segment names, the end file and bad names), two bytes of
 * length and its bytes. Readers from the start, from the end and from an
 * offset in the input must never crash, loop or return a record beyond the
 * bounds. */
#include "config.h"

#include "sandbox/logbuf.h"
#include "util/inotify.h"
#include "fuzz.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const names[] = {
    "0000000000000000",
    "0000000000000010",
    "0000000000000020",
    "0000000000000100",
    "0000000000010000",
    "ffffffffffffffff",
    "end",
    "end.tmp",
    "000000000000000G",
    "00000000000000000",
};

static void drain(int dirfd, uint64_t from, size_t size) {
  struct agsx_log_reader *r = NULL;
  agsx_error_t err = NULL;
  if (agsx_log_reader_open(dirfd, "log", from, &r, &err) < 0) {
    agsx_error_free(&err);
    return;
  }
  /* Every record consumes input bytes or a segment: more is a loop. */
  size_t bound = size / AGSX_LOG_HDR + 2 * AGSX_ARRAY_SIZE(names) + 4, n = 0;
  struct agsx_log_rec rec;
  int ret;
  while ((ret = agsx_log_next(r, &rec, &err)) == 1) {
    if (++n > bound || rec.len > AGSX_LOG_REC_MAX || (rec.len && rec.data == NULL))
      __builtin_trap();
    if (rec.len)
      (void)((volatile const char *)rec.data)[rec.len - 1];
  }
  if (ret == 2 &&
      (rec.kind != AGSX_LOG_END || (rec.error && strlen(rec.error) > AGSX_LOG_ERROR_MAX)))
    __builtin_trap();
  agsx_error_free(&err);
  agsx_log_reader_free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* Readers of a shared hub, as in the server: its instance stays open
   * (a close per input would make it 20x slower). */
  static struct agsx_inotify *hub;
  if (hub == NULL && agsx_inotify_new(&(struct agsx_inotify_budget){1, 64}, &hub, NULL) == 0)
    agsx_log_readers_share(hub);
  if (hub)
    agsx_inotify_dispatch(hub); /* the last input's IN_IGNORED */
  /* $TMPDIR (a tmpfs such as /dev/shm makes fuzzing much faster) or /tmp. */
  char dir[4096];
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof(dir), "%s/fuzz_logbuf.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (size < 8 || !mkdtemp(dir))
    return 0;
  int top = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  mkdirat(top, "log", 0700);
  int d = openat(top, "log", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  uint64_t from = 0;
  memcpy(&from, data, 8);
  size_t i = 8;
  while (i + 3 <= size) {
    const char *name = names[data[i] % AGSX_ARRAY_SIZE(names)];
    size_t len = (size_t)data[i + 1] | (size_t)data[i + 2] << 8;
    i += 3;
    len = len > size - i ? size - i : len;
    int fd = openat(d, name, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) {
      if (write(fd, data + i, len) < 0) {
      }
      close(fd);
    }
    i += len;
  }
  drain(top, AGSX_LOG_FROM_START, size);
  drain(top, AGSX_LOG_FROM_END, size);
  drain(top, from % (size * 2 + 1), size);
  close(d);
  close(top);
  agsx_error_t err = NULL;
  agsx_rm_rf_at(AT_FDCWD, dir, &err);
  agsx_error_free(&err);
  return 0;
}
