/* Unit tests: /etc/subuid and /etc/subgid lines, as an ordinary user's agsx
 * reads them to map the user's namespace (host/rootless.h). */
#include "config.h"

#include "host/rootless.h"
#include "tap.h"

#include <string.h>

static void find(const char *text, const char *user, unsigned long uid, unsigned long start,
                 unsigned long count, const char *what) {
  struct agsx_subid r = {7, 7};
  agsx_subid_find(text, strlen(text), user, uid, &r);
  tap_ok(r.start == start && r.count == count, "%s: %lu:%lu (got %lu:%lu)", what, start, count,
         r.start, r.count);
}

int main(void) {
  find("", "dev", 1000, 0, 0, "empty file");
  find("dev:100000:65536\n", "dev", 1000, 100000, 65536, "by name");
  find("1000:200000:65536\n", "dev", 1000, 200000, 65536, "by uid");
  find("dev:100000:65536", "dev", 1000, 100000, 65536, "no final newline");
  find("other:100000:65536\ndev:165536:65536\n", "dev", 1000, 165536, 65536, "another user first");
  find("deve:100000:65536\nde:1:65536\n", "dev", 1000, 0, 0,
       "a prefix or an extension of the name");
  find("# dev:100000:65536\n", "dev", 1000, 0, 0, "a comment");
  find("dev:100000\ndev:x:65536\ndev:100000:\ndev::65536\n", "dev", 1000, 0, 0, "malformed lines");
  find("dev:100000:0\n", "dev", 1000, 0, 0, "an empty range");
  find("dev:4294967295:2\n", "dev", 1000, 0, 0, "a range past the last id");
  find("dev:99999999999:1\n", "dev", 1000, 0, 0, "a start that is no 32-bit id");
  find("dev:100000:1000\ndev:200000:70000\ndev:300000:65536\n", "dev", 1000, 200000, 70000,
       "the largest range wins");
  find("dev:100000:65536\ndev:300000:65536\n", "dev", 1000, 100000, 65536,
       "the first of equal ranges wins");
  find("dev:100000:1000\ndev:200000:2000\n", "dev", 1000, 200000, 2000, "else the largest");
  find("dev:100000:65536\ndev:200000:900000\n", "dev", 1000, 200000, 900000,
       "a larger later range wins (per-sandbox ranges)");
  find("dev:100000:65536\n", NULL, 1000, 0, 0, "no name, and the uid has no line");
  find("1000:5:65536\n", NULL, 1000, 5, 65536, "no name: the uid's line");
  find("dev:100000:65536\r\n", "dev", 1000, 0, 0, "a carriage return is not a digit");
  return tap_done();
}
