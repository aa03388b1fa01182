/* Fuzz target: `agsx run -p` specs ([IP:]HOSTPORT:PORT[/PROTO]) and the
 * PORT[/PROTO] filter's pieces. A parsed spec, written back in its canonical
 * form, parses to the same thing. */
#include "config.h"

#include "fuzz.h"
#include "net/relay.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 4096)
    return 0;
  char *s = xstrndup((const char *)data, size);
  agsx_error_t err = NULL;
  struct agsx_port p;
  if (agsx_port_parse(s, &p, &err) == 0) {
    if (p.port == 0 || (p.host.ss_family != AF_INET && p.host.ss_family != AF_INET6) ||
        (p.proto != AGSX_PROTO_TCP && p.proto != AGSX_PROTO_UDP))
      __builtin_trap(); /* the parser promised a port 1-65535 and an address */
    char ip[64], again[160];
    agsx_sockaddr_ip(&p.host, ip, sizeof(ip));
    snprintf(again, sizeof(again), p.host.ss_family == AF_INET6 ? "[%s]:%u:%u/%s" : "%s:%u:%u/%s",
             ip, agsx_sockaddr_port(&p.host), p.port, agsx_proto_name(p.proto));
    struct agsx_port q;
    if (agsx_port_parse(again, &q, NULL) < 0 || q.port != p.port || q.proto != p.proto ||
        memcmp(&q.host, &p.host, sizeof(q.host)) != 0)
      __builtin_trap();
    struct agsx_port two[2] = {p, q};
    if (agsx_ports_check(two, 2, &err) == 0 && agsx_sockaddr_port(&p.host) != 0)
      __builtin_trap(); /* the same host port twice */
  } else if (err == NULL || err->msg == NULL || strchr(err->msg, '\n')) {
    __builtin_trap(); /* one line, always */
  }
  agsx_error_free(&err);
  free(s);
  return 0;
}
