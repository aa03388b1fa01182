/* Unit tests: an ordinary user's router (net/usernet.h): the rules that
 * refuse the host's own addresses, and the host-side calls as root (the
 * plain ones). */
#include "config.h"

#include "net/net.h"
#include "net/usernet.h"
#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void rules(const struct agsx_net_addr *a, size_t n, const char *want_elems,
                  const char *what) {
  char *got = agsx_usernet_rules_for(a, n);
  const char *head = "add set inet agsx hostaddrs { type ipv4_addr; }\n"
                     "flush set inet agsx hostaddrs\n";
  char *want = want_elems[0]
                   ? xasprintf("%sadd element inet agsx hostaddrs { %s }\n", head, want_elems)
                   : xstrdup(head);
  tap_ok(strcmp(got, want) == 0, "%s", what);
  if (strcmp(got, want) != 0)
    printf("#   got: %s\n", got);
  free(got);
  free(want);
}

static int answer(void *p) {
  *(int *)p += 1;
  errno = EXDEV;
  return 42;
}

int main(void) {
  rules(NULL, 0, "", "no address: an empty set");
  struct agsx_net_addr a[5];
  memset(a, 0, sizeof(a));
  a[0].addr = 0x7f000001; /* 127.0.0.1 */
  a[1].addr = 0xc6120001; /* 198.18.0.1 */
  a[2].addr = 0x0a000205; /* 10.0.2.5 */
  a[3].addr = 0xc6120001; /* the same on another link */
  a[4].addr = 0xc612000b; /* 198.18.0.11: 198.18.0.1 is a prefix of it */
  rules(a, 1, "", "loopback is left out (the never set has it)");
  rules(a, 5, "198.18.0.1, 10.0.2.5, 198.18.0.11",
        "every other address once, a longer one after its prefix");
  struct agsx_net_addr b[2] = {{.addr = 0xc612000b}, {.addr = 0xc6120001}};
  rules(b, 2, "198.18.0.11, 198.18.0.1", "a prefix after the longer one");

  /* As root (this process never entered a user's namespace). */
  tap_ok(!agsx_usernet_running(), "root has no router");
  tap_ok(strcmp(agsx_net_run_dir(), "/run/agsx-net") == 0, "root's leases: /run/agsx-net");
  char *none = agsx_usernet_rules();
  tap_ok(none[0] == '\0', "root's table gets no more rules");
  free(none);
  int calls = 0;
  errno = 0;
  tap_ok(agsx_hostnet_call(answer, &calls) == 42 && calls == 1 && errno == EXDEV,
         "a host-side call runs here, its result and errno kept");
  tap_ok(agsx_host_ifindex("lo") == if_nametoindex("lo"), "ifindex: this namespace's");
  int s = agsx_host_socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  tap_ok(s >= 0 && (fcntl(s, F_GETFD) & FD_CLOEXEC), "a socket, close-on-exec");
  if (s >= 0)
    close(s);
  int fd = agsx_host_sysfs_open("class/net/lo/ifindex", O_RDONLY);
  char buf[16] = "";
  tap_ok(fd >= 0 && read(fd, buf, sizeof(buf) - 1) > 0 && atoi(buf) == (int)if_nametoindex("lo"),
         "sysfs: /sys's");
  if (fd >= 0)
    close(fd);
  fd = agsx_host_sysctl_open("/proc/sys/net/ipv4/ip_forward", O_RDONLY);
  tap_ok(fd >= 0 && (fcntl(fd, F_GETFD) & FD_CLOEXEC), "a sysctl, close-on-exec");
  if (fd >= 0)
    close(fd);
  return tap_done();
}
