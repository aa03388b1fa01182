/* agsx — api: libmicrohttpd through dlopen() (see mhd.h). */
#include "config.h"

#include "api/mhd.h"

#include <dlfcn.h>
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
