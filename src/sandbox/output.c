/* agsx — sandbox: bounded output capture (see output.h). */
#include "config.h"

#include "sandbox/output.h"
#include "util/json.h"

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

void agsx_output_read(struct agsx_output *o) { output_read(o); }

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

char *agsx_result_json(const struct agsx_result *r, size_t *ret_len) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_int(g, "exit_code", r->exit_code);
  static const char *const names[] = {"stdout", "stderr"};
  for (int i = 0; i < 2; i++) {
    agsx_json_key(g, names[i]);
    agsx_json_bytes(g, r->out[i].buf ? r->out[i].buf : "", r->out[i].len);
  }
  agsx_json_kv_int(g, "duration_ms", r->duration_ms);
  agsx_json_kv_str(g, "stop_reason", r->stop_reason);
  agsx_json_kv_bool(g, "truncated", r->out[0].truncated || r->out[1].truncated);
  agsx_json_kv_bool(g, "stdout_truncated", r->out[0].truncated);
  agsx_json_kv_bool(g, "stderr_truncated", r->out[1].truncated);
  agsx_json_key(g, "signal");
  if (r->signal)
    yajl_gen_integer(g, r->signal);
  else
    yajl_gen_null(g);
  agsx_json_kv_str(g, "id", r->id);
  agsx_json_kv_str(g, "name", r->name);
  agsx_json_kv_str(g, "error", r->error);
  yajl_gen_map_close(g);
  return agsx_json_gen_steal(g, ret_len);
}

char *agsx_started_json(const char *id, const char *name, size_t *ret_len) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "id", id);
  agsx_json_kv_str(g, "name", name);
  yajl_gen_map_close(g);
  return agsx_json_gen_steal(g, ret_len);
}
