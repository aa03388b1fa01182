/* Unit tests: a claim's wire form (sandbox/pool.h) and what a claim may
 * not change of its pool's configuration. */
#include "config.h"

#include "net/egress.h"
#include "sandbox/pool.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

static void round_trip(void) {
  char *argv[] = {"sh", "-c", "echo \"a b\"", NULL}, *env[] = {"A=1", "B=", NULL};
  char *labels[] = {"k=v", NULL};
  struct agsx_claim c = {.argv = argv,
                         .env = env,
                         .labels = labels,
                         .cwd = "/tmp",
                         .user = "1000:1000",
                         .name = "job-1",
                         .hostname = "box",
                         .timeout = 90,
                         .rm = true,
                         .detach = true};
  agsx_error_t err = NULL;
  size_t len;
  char *b = agsx_claim_encode(&c, &len, &err);
  struct agsx_claim d;
  tap_ok(b && agsx_claim_decode(b, len, &d, &err) == 0, "a claim encodes and decodes");
  tap_ok(agsx_strv_len(d.argv) == 3 && strcmp(d.argv[2], "echo \"a b\"") == 0, "argv kept");
  tap_ok(agsx_strv_len(d.env) == 2 && strcmp(d.env[1], "B=") == 0, "env kept");
  tap_ok(agsx_strv_len(d.labels) == 1, "labels kept");
  tap_is_str(d.cwd, "/tmp", "cwd");
  tap_is_str(d.user, "1000:1000", "user");
  tap_is_str(d.name, "job-1", "name");
  tap_is_str(d.hostname, "box", "hostname");
  tap_ok(d.timeout == 90 && d.rm && d.detach && !d.idle, "timeout and flags");
  /* Every strict prefix is malformed (nothing half-read passes). */
  int bad = 0;
  for (size_t n = 0; n < len; n++) {
    struct agsx_claim e;
    if (agsx_claim_decode(b, n, &e, &err) == 0) {
      bad++;
      agsx_claim_clear(&e);
    }
    agsx_error_free(&err);
  }
  tap_ok(bad == 0, "no prefix of a claim decodes (%d did)", bad);
  agsx_claim_clear(&d);
  free(b);
  /* An empty claim: the image's Cmd, no strings. */
  struct agsx_claim empty = {0};
  b = agsx_claim_encode(&empty, &len, &err);
  tap_ok(b && agsx_claim_decode(b, len, &d, &err) == 0 && agsx_strv_len(d.argv) == 0 &&
             d.name == NULL && d.cwd == NULL,
         "an empty claim round-trips with NULLs");
  agsx_claim_clear(&d);
  free(b);
}

static void refused(const char *buf, size_t len, const char *what) {
  struct agsx_claim d;
  agsx_error_t err = NULL;
  tap_ok(agsx_claim_decode(buf, len, &d, &err) < 0 && err, "refused: %s", what);
  agsx_error_free(&err);
}

static void hostile(void) {
#define R(s, what) refused(s, sizeof(s) - 1, what)
  R("", "nothing");
  R("XXXXCLAIM1\0\0000\0", "a bad magic");
  R("AGSXCLAIM1\0z\0000\0\0\0\0\0000\0000\0000\0", "an unknown flag");
  R("AGSXCLAIM1\0\0-1\0\0\0\0\0000\0000\0000\0", "a negative timeout");
  R("AGSXCLAIM1\0\00099999\0\0\0\0\0000\0000\0000\0", "a timeout over 24h");
  R("AGSXCLAIM1\0\0000\0bad/name\0\0\0\0000\0000\0000\0", "an invalid name");
  R("AGSXCLAIM1\0\0000\0\0\0rel\0\0000\0000\0000\0", "a relative cwd");
  R("AGSXCLAIM1\0\0000\0\0\0\0\0009999999\0", "an argument count over the bound");
  R("AGSXCLAIM1\0\0000\0\0\0\0\0002\0a\0", "fewer arguments than counted");
  R("AGSXCLAIM1\0\0000\0\0\0\0\0000\0000\0000\0extra", "bytes after the claim");
  R("AGSXCLAIM1\0i\0000\0\0\0\0\0000\0000\0000\0", "an idle claim that is attached");
  R("AGSXCLAIM1\0di\0000\0\0\0\0\0001\0sh\0000\0000\0", "an idle claim with a command");
#undef R
}

static void check(void) {
  struct agsx_pool_config pc = {.name = "p", .image = "busybox", .memory = 64 << 20};
  struct agsx_run_spec s = {.image = "busybox", .memory = 64 << 20, .network = "internal"};
  agsx_error_t err = NULL;
  tap_ok(agsx_pool_check(&pc, &s, &err) == 0, "the pool's own values are no change");
  s.memory = 32 << 20;
  tap_ok(agsx_pool_check(&pc, &s, &err) < 0 && strstr(err->msg, "--memory"), "--memory differs");
  agsx_error_free(&err);
  s.memory = 0;
  s.image = "other";
  tap_ok(agsx_pool_check(&pc, &s, &err) < 0 && strstr(err->msg, "image"), "the image differs");
  agsx_error_free(&err);
  s.image = NULL;
  s.network = "public";
  tap_ok(agsx_pool_check(&pc, &s, &err) < 0 && strstr(err->msg, "--network"), "--network differs");
  agsx_error_free(&err);
  s.network = NULL;
  s.tty = true;
  tap_ok(agsx_pool_check(&pc, &s, &err) < 0 && strstr(err->msg, "--tty"), "a terminal is refused");
  agsx_error_free(&err);
}

int main(void) {
  round_trip();
  hostile();
  check();
  return tap_done();
}
