/* Fuzz target: the messages of a sandbox's control socket (control.h), as
 * any local client may send them to its supervisor, and the replies a
 * client reads. A parsed request must be within the bounds and encode
 * back to a message that parses the same. */
#include "config.h"

#include "sandbox/control.h"
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

static void check_request(const struct agsx_control_msg *m) {
  if (m->op < AGSX_OP_START || m->op > AGSX_OP_RESIZE || m->len > AGSX_PROCESS_INPUT_MAX)
    __builtin_trap();
  if (m->op == AGSX_OP_START &&
      (agsx_strv_len(m->spec.argv) == 0 || agsx_strv_len(m->spec.argv) > AGSX_CONTROL_ARGS_MAX ||
       (m->spec.cwd && m->spec.cwd[0] != '/')))
    __builtin_trap();
  if (m->op != AGSX_OP_START && m->pid == 0)
    __builtin_trap();
  agsx_error_t err = NULL;
  size_t len;
  char *b = agsx_control_msg_encode(m, &len, &err);
  if (b == NULL) {
    agsx_error_free(&err);
    return;
  }
  struct agsx_control_msg again;
  if (agsx_control_msg_parse(b, len, &again, &err) < 0 || again.op != m->op ||
      again.pid != m->pid || again.len != m->len ||
      agsx_strv_len(again.spec.argv) != agsx_strv_len(m->spec.argv))
    __builtin_trap();
  agsx_control_msg_clear(&again);
  free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  agsx_error_t err = NULL;
  struct agsx_control_msg m;
  int r = agsx_control_msg_parse((const char *)data, size, &m, &err);
  if ((r < 0) != (err != NULL))
    __builtin_trap();
  if (r == 0)
    check_request(&m);
  agsx_control_msg_clear(&m);
  agsx_error_free(&err);
  struct agsx_control_reply rep;
  r = agsx_control_reply_parse((const char *)data, size, &rep, &err);
  if ((r < 0) != (err != NULL) || (r == 0 && !rep.ok && rep.error == NULL))
    __builtin_trap();
  agsx_control_reply_clear(&rep);
  agsx_error_free(&err);
  return 0;
}
