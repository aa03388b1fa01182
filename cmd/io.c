/* agsx CLI: terminal and output plumbing shared by run and exec. */
#include "config.h"

#include "io.h"
#include "util/json.h"

#include <string.h>
#include <sys/ioctl.h>

void agsx_term_winsize(int master) {
  struct winsize ws;
  if (master >= 0 && ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0)
    ioctl(master, TIOCSWINSZ, &ws);
}

void agsx_term_raw(struct agsx_term *t) {
  if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &t->saved) < 0)
    return;
  struct termios raw = t->saved;
  cfmakeraw(&raw);
  if (tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0)
    t->raw = true;
}

void agsx_term_restore(struct agsx_term *t) {
  if (t->raw)
    tcsetattr(STDIN_FILENO, TCSANOW, &t->saved);
  t->raw = false;
}

void agsx_print_result(const struct agsx_result *r) {
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
  size_t len;
  _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
  fwrite(s, 1, len, stdout);
  fputc('\n', stdout);
  fflush(stdout);
}
