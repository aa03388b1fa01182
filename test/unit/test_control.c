/* Unit tests: the messages of a supervisor's control socket (control.h). */
#include "config.h"

#include "sandbox/control.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

/* A message around JSON text and a payload. */
static char *framed(const char *json, const char *payload, size_t *ret_len) {
  size_t j = strlen(json), p = payload ? strlen(payload) : 0;
  char *b = malloc(8 + j + p);
  memcpy(b, "AGC1", 4);
  for (int i = 0; i < 4; i++)
    b[4 + i] = (char)(j >> (8 * i));
  memcpy(b + 8, json, j);
  if (p)
    memcpy(b + 8 + j, payload, p);
  *ret_len = 8 + j + p;
  return b;
}

static void refused(const char *json, const char *payload, const char *why) {
  size_t len;
  char *b = framed(json, payload, &len);
  struct agsx_control_msg m;
  agsx_error_t err = NULL;
  int r = agsx_control_msg_parse(b, len, &m, &err);
  tap_ok(r < 0 && err && strstr(err->msg, why), "refused: %s (%s)", json, err ? err->msg : "ok");
  agsx_error_free(&err);
  free(b);
}

static void round_trip(void) {
  char *argv[] = {"sh", "-c", "echo \"hi\"", NULL}, *env[] = {"A=1", NULL};
  struct agsx_control_msg m = {.op = AGSX_OP_START,
                               .spec = {.argv = argv,
                                        .env = env,
                                        .cwd = "/tmp",
                                        .tag = "t",
                                        .pty = true,
                                        .cols = 80,
                                        .rows = 24,
                                        .timeout_ms = 1500}};
  agsx_error_t err = NULL;
  size_t len;
  char *b = agsx_control_msg_encode(&m, &len, &err);
  struct agsx_control_msg got;
  int r = b ? agsx_control_msg_parse(b, len, &got, &err) : -1;
  tap_ok(r == 0 && got.op == AGSX_OP_START && agsx_strv_len(got.spec.argv) == 3 &&
             strcmp(got.spec.argv[2], "echo \"hi\"") == 0 && strcmp(got.spec.env[0], "A=1") == 0 &&
             strcmp(got.spec.cwd, "/tmp") == 0 && got.spec.pty && got.spec.cols == 80 &&
             got.spec.timeout_ms == 1500 && got.spec.user == NULL,
         "a start request round-trips");
  agsx_control_msg_clear(&got);
  free(b);
  struct agsx_control_msg in = {.op = AGSX_OP_INPUT, .pid = 42, .data = "a\0b", .len = 3};
  b = agsx_control_msg_encode(&in, &len, &err);
  r = b ? agsx_control_msg_parse(b, len, &got, &err) : -1;
  tap_ok(r == 0 && got.op == AGSX_OP_INPUT && got.pid == 42 && got.len == 3 &&
             memcmp(got.data, "a\0b", 3) == 0,
         "input bytes (with a NUL) round-trip");
  agsx_control_msg_clear(&got);
  free(b);
  struct agsx_control_reply rep = {.errno_ = 2, .code = 127, .error = "exec `x`: not found"}, back;
  b = agsx_control_reply_encode(&rep, &len);
  r = agsx_control_reply_parse(b, len, &back, &err);
  tap_ok(r == 0 && !back.ok && back.errno_ == 2 && back.code == 127 &&
             strcmp(back.error, "exec `x`: not found") == 0,
         "an error reply round-trips");
  agsx_control_reply_clear(&back);
  free(b);
  agsx_error_free(&err);
}

int main(void) {
  round_trip();
  refused("{\"op\":\"start\",\"argv\":[\"true\"],\"extra\":1}", NULL, "unknown field");
  refused("{\"op\":\"start\",\"argv\":[]}", NULL, "no command");
  refused("{\"op\":\"start\",\"argv\":[\"true\"],\"cwd\":\"rel\"}", NULL, "absolute");
  refused("{\"op\":\"start\",\"argv\":[\"true\"],\"env\":[\"NOEQUALS\"]}", NULL, "KEY=VALUE");
  refused("{\"op\":\"start\",\"argv\":[\"true\"],\"cols\":70000}", NULL, "bad `cols`");
  refused("{\"op\":\"start\",\"argv\":[1]}", NULL, "bad `argv`");
  refused("{\"op\":\"start\",\"argv\":[\"true\"],\"timeout_ms\":-1}", NULL, "bad `timeout_ms`");
  refused("{\"op\":\"start\",\"argv\":[\"true\"]}", "payload", "payload");
  refused("{\"op\":\"signal\",\"pid\":3}", NULL, "no signal");
  refused("{\"op\":\"signal\",\"pid\":3,\"signal\":65}", NULL, "bad `signal`");
  refused("{\"op\":\"resize\",\"pid\":3,\"cols\":0,\"rows\":5}", NULL, "at least 1x1");
  refused("{\"op\":\"input\"}", "x", "no pid");
  refused("{\"op\":\"close_stdin\",\"pid\":3}", "x", "unexpected payload");
  refused("{\"op\":\"launch\"}", NULL, "unknown op");
  refused("[1,2]", NULL, "not an object");
  struct agsx_control_msg m;
  agsx_error_t err = NULL;
  tap_ok(agsx_control_msg_parse("AGC1\xff\xff\xff\x7f{}", 10, &m, &err) < 0 && err,
         "a length beyond the message is refused");
  agsx_error_free(&err);
  tap_ok(agsx_control_msg_parse("XXXX\0\0\0\0", 8, &m, &err) < 0 && err, "a bad magic is refused");
  agsx_error_free(&err);
  size_t big = AGSX_PROCESS_INPUT_MAX + 1, len;
  char *payload = malloc(big + 1);
  memset(payload, 'x', big);
  payload[big] = '\0';
  char *b = framed("{\"op\":\"input\",\"pid\":1}", payload, &len);
  tap_ok(agsx_control_msg_parse(b, len, &m, &err) < 0 && agsx_error_errno(&err) == EFBIG,
         "more input than AGSX_PROCESS_INPUT_MAX is refused");
  agsx_error_free(&err);
  free(b);
  free(payload);
  return tap_done();
}
