/* agsx — registry: libcurl, loaded with dlopen at pull or push time. */
#include "config.h"

#include "image/registry/registry-internal.h"

#include "image/image.h"
#include "image/store.h"
#include "util/json.h"

#include <ctype.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <dlfcn.h>
#include <pthread.h>

/* Filled once, then only read: a pull or push that got 0 from agsx_curl_load
 * sees the whole table (the lock orders the loading before it). */
struct registry_curl agsx_curl;

static int load(agsx_error_t *err) {
  if (agsx_curl.handle)
    return 0;
  const char *lib = getenv("AGSX_LIBCURL") ? getenv("AGSX_LIBCURL") : "libcurl.so.4";
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL)
    return agsx_error_set(err, 0, "pull needs libcurl (apt-get install libcurl4): %s", dlerror());
  static const struct {
    const char *name;
    size_t off;
  } syms[] = {
#define S(f, n) {"curl_" n, offsetof(__typeof__(agsx_curl), f)}
      S(global_init, "global_init"),
      S(easy_init, "easy_init"),
      S(easy_setopt, "easy_setopt"),
      S(easy_perform, "easy_perform"),
      S(easy_getinfo, "easy_getinfo"),
      S(easy_cleanup, "easy_cleanup"),
      S(easy_strerror, "easy_strerror"),
      S(easy_escape, "easy_escape"),
      S(free, "free"),
      S(slist_append, "slist_append"),
      S(slist_free_all, "slist_free_all"),
      S(multi_init, "multi_init"),
      S(multi_add_handle, "multi_add_handle"),
      S(multi_remove_handle, "multi_remove_handle"),
      S(multi_perform, "multi_perform"),
      S(multi_poll, "multi_poll"),
      S(multi_info_read, "multi_info_read"),
      S(multi_cleanup, "multi_cleanup"),
      S(multi_strerror, "multi_strerror"),
#undef S
  };
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(syms); i++) {
    void *p = dlsym(h, syms[i].name);
    if (p == NULL) {
      dlclose(h);
      return agsx_error_set(err, 0, "pull needs libcurl >= 7.66 (apt-get install libcurl4): no %s",
                            syms[i].name);
    }
    memcpy((char *)&agsx_curl + syms[i].off, &p, sizeof(p));
  }
  if (agsx_curl.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    dlclose(h);
    return agsx_error_set(err, 0, "libcurl initialisation failed");
  }
  agsx_curl.handle = h;
  return 0;
}

/* Pulls may run on several threads of one process (the API server): one
 * loads libcurl, the others wait for it. */
int agsx_curl_load(agsx_error_t *err) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&lock);
  int r = load(err);
  pthread_mutex_unlock(&lock);
  return r;
}
