/* agsx — api: libmicrohttpd through dlopen() (see mhd.h). */
#include "config.h"

#include "api/mhd.h"
#include "api/wire.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stddef.h>
#include <string.h>

struct agsx_mhd agsx_mhd;

int agsx_mhd_load(agsx_error_t *err) {
  if (agsx_mhd.handle)
    return 0;
  const char *lib = getenv("AGSX_LIBMICROHTTPD");
  void *h = dlopen(lib && *lib ? lib : "libmicrohttpd.so.12", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL)
    return agsx_error_set(err, 0, "serve needs libmicrohttpd (apt-get install libmicrohttpd12): %s",
                          dlerror());
  static const struct {
    const char *name;
    size_t off;
  } syms[] = {
#define S(f) {"MHD_" #f, offsetof(struct agsx_mhd, f)}
      S(start_daemon),
      S(stop_daemon),
      S(get_daemon_info),
      S(run),
      S(get_timeout),
      S(lookup_connection_value),
      S(get_connection_values),
      S(create_response_from_buffer),
      S(create_response_from_callback),
      S(create_response_from_fd_at_offset64),
      S(add_response_header),
      S(queue_response),
      S(destroy_response),
      S(suspend_connection),
      S(resume_connection),
      S(get_connection_info),
#undef S
  };
  struct agsx_mhd t = {.handle = h};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(syms); i++) {
    void *p = dlsym(h, syms[i].name);
    if (p == NULL) {
      dlclose(h);
      return agsx_error_set(err, 0, "libmicrohttpd >= 0.9.71 is needed: no %s", syms[i].name);
    }
    memcpy((char *)&t + syms[i].off, &p, sizeof(p));
  }
  agsx_mhd = t;
  return 0;
}

/* The address the client reached (the listen address, or the one of the
 * host's that a wildcard listener was reached on), as text; NULL if unknown. */
static const char *local_address(struct MHD_Connection *c, char buf[static INET6_ADDRSTRLEN]) {
  const union MHD_ConnectionInfo *ci =
      agsx_mhd.get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  if (ci == NULL || getsockname(ci->connect_fd, (struct sockaddr *)&ss, &len) < 0)
    return NULL;
  const void *a = ss.ss_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
                                           : (const void *)&((struct sockaddr_in *)&ss)->sin_addr;
  return inet_ntop(ss.ss_family, a, buf, INET6_ADDRSTRLEN);
}

bool agsx_mhd_host_allowed(struct MHD_Connection *c, char *const *names, bool *ret_origin,
                           const char **ret_value) {
  char host[AGSX_API_HOST_MAX + 1], local[INET6_ADDRSTRLEN];
  const char *h = agsx_mhd.lookup_connection_value(c, MHD_HEADER_KIND, "Host");
  *ret_origin = false;
  *ret_value = h;
  if (h && (agsx_api_host_parse(h, host, NULL) < 0 ||
            !agsx_api_host_allowed(host, local_address(c, local), names)))
    return false;
  const char *o = agsx_mhd.lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
  *ret_origin = true;
  *ret_value = o;
  return !o || (agsx_api_origin_parse(o, host, NULL) == 0 &&
                agsx_api_host_allowed(host, local_address(c, local), names));
}
