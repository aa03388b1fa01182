/* Unit tests: USER[:GROUP] resolution from passwd/group text. */
#include "config.h"

#include "sandbox/passwd.h"
#include "tap.h"

static const char pw[] = "root:x:0:0:root:/root:/bin/sh\n"
                         "# a comment\n"
                         "agent:x:1000:1000:Agent:/home/agent:/bin/sh\n"
                         "broken:x:notanumber:1:::\n"
                         "big:x:70000:70000::/home/big:/bin/sh\n"
                         "short:x:5\n";
static const char gr[] = "root:x:0:\nwheel:x:10:agent,other\nagent:x:1000:\ndocker:x:999:agent\n"
                         "huge:x:99999:\n";

static void ok(const char *spec, unsigned uid, unsigned gid, size_t ngroups, const char *home) {
  struct agsx_user u;
  agsx_error_t err = NULL;
  int r = agsx_user_resolve(spec, pw, sizeof(pw) - 1, gr, sizeof(gr) - 1, &u, &err);
  tap_ok(r == 0 && u.uid == uid && u.gid == gid && u.n_groups == ngroups &&
             (home == NULL || strcmp(u.home, home) == 0),
         "user `%s` -> %u:%u, %zu groups (got %u:%u, %zu, %s%s)", spec ? spec : "(null)", uid, gid,
         ngroups, u.uid, u.gid, u.n_groups, u.home, err ? err->msg : "");
  agsx_error_free(&err);
}

static void bad(const char *spec, const char *why) {
  struct agsx_user u;
  agsx_error_t err = NULL;
  int r = agsx_user_resolve(spec, pw, sizeof(pw) - 1, gr, sizeof(gr) - 1, &u, &err);
  tap_ok(r < 0 && err && strstr(err->msg, why), "user `%s` refused (%s): %s", spec, why,
         err ? err->msg : "accepted");
  agsx_error_free(&err);
}

int main(void) {
  ok(NULL, 0, 0, 1, "/root");
  ok("root", 0, 0, 1, "/root");
  ok("agent", 1000, 1000, 3, "/home/agent"); /* + wheel, docker */
  ok("1000", 1000, 1000, 1, "/home/agent");
  ok("4242", 4242, 4242, 1, "/");
  ok("agent:wheel", 1000, 10, 1, NULL);
  ok("agent:0", 1000, 0, 1, NULL);
  ok("0:1000", 0, 1000, 1, NULL);
  bad("nobody-here", "unknown user");
  bad("agent:nogroup", "unknown group");
  bad("big", "outside");
  bad("70000", "outside");
  bad("agent:huge", "outside");
  bad("agent:99999", "outside");
  ok("", 0, 0, 1, "/root");
  bad(":5", "invalid user");
  bad("broken", "unknown user");
  struct agsx_user u;
  agsx_error_t err = NULL;
  tap_ok(agsx_user_resolve("0", NULL, 0, NULL, 0, &u, &err) == 0 && u.uid == 0,
         "numeric user without /etc/passwd");
  tap_ok(agsx_user_resolve("agent", NULL, 0, NULL, 0, &u, &err) < 0, "name without /etc/passwd");
  agsx_error_free(&err);
  char name[64];
  tap_ok(agsx_passwd_name(pw, sizeof(pw) - 1, 1000, name, sizeof(name)) &&
             strcmp(name, "agent") == 0,
         "uid 1000 is named `agent`");
  tap_ok(agsx_passwd_name(gr, sizeof(gr) - 1, 10, name, sizeof(name)) && strcmp(name, "wheel") == 0,
         "gid 10 is named `wheel`");
  tap_ok(!agsx_passwd_name(pw, sizeof(pw) - 1, 4242, name, sizeof(name)), "uid 4242 has no name");
  tap_ok(!agsx_passwd_name(NULL, 0, 0, name, sizeof(name)), "no file, no name");
  tap_ok(!agsx_passwd_name(pw, sizeof(pw) - 1, 1000, name, 3), "a name that does not fit");
  return tap_done();
}
