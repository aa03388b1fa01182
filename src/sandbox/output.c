/* agsx — sandbox: bounded output capture (see output.h). */
#include "config.h"

#include "sandbox/output.h"

#include <string.h>

/* Returns the bytes read, 0 at EOF or on an error (FD closed), -1 when
 * nothing is there now (EAGAIN, EINTR). */
static ssize_t output_read(struct agsx_output *o) {
  char buf[65536];
  ssize_t n = read(o->fd, buf, sizeof(buf));
  if (n <= 0) {
    if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      agsx_closep(&o->fd);
      return 0;
    }
    return -1;
  }
  size_t room = AGSX_OUTPUT_CAP - o->len, k = (size_t)n < room ? (size_t)n : room;
  if (k < (size_t)n)
    o->truncated = true;
  if (k) {
    o->buf = xrealloc(o->buf, o->len + k + 1);
    memcpy(o->buf + o->len, buf, k);
    o->len += k;
    o->buf[o->len] = '\0';
  }
  return n;
}

void agsx_output_read(struct agsx_output *o) {
  output_read(o);
}

bool agsx_output_drain(struct agsx_output *o) {
  /* What is there now: a pipe another process still holds open gives
   * EAGAIN, never EOF, and must not make this spin. */
  for (int i = 0; o->fd >= 0 && i < 1024; i++)
    if (output_read(o) <= 0)
      break;
  return o->fd < 0;
}

void agsx_output_clear(struct agsx_output *o) {
  agsx_closep(&o->fd);
  free(o->buf);
  o->buf = NULL;
  o->len = 0;
}

void agsx_copy_fd(int from, int to, int *closed) {
  char buf[16384];
  ssize_t n = read(from, buf, sizeof(buf));
  if (n <= 0) {
    if (n == 0 || (errno != EINTR && errno != EAGAIN))
      *closed = 1;
    return;
  }
  if (agsx_write_all(to, buf, (size_t)n) < 0)
    *closed = 1;
}
