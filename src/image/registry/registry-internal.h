/* agsx — registry internals shared by curl.c (the libcurl shim), auth.c
 * (parsers of untrusted authentication input), transport.c (requests,
 * redirects, authentication), pull.c and push.c. Not a public header. */
#ifndef AGSX_REGISTRY_INTERNAL_H
#define AGSX_REGISTRY_INTERNAL_H

#include "image/registry/registry.h"

#include "image/image.h"

#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>

#define CERTS_DIR "/etc/agsx/certs.d"
#define PARTIAL_DIR "partial"
#define NESTING_MAX 4
#define URL_MAX 4096
#define HEADER_MAX 8192
#define REDIRECTS_MAX 5
#define SPACE_CHECK_EVERY (4 << 20)

/* ---- libcurl, loaded at pull time -------------------------------------------------------- */

/* The libcurl functions agsx uses, resolved by agsx_curl_load (curl.c): agsx
 * runs without libcurl installed until a pull or push needs it. */
struct registry_curl {
  void *handle;
  CURLcode (*global_init)(long);
  CURL *(*easy_init)(void);
  CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
  CURLcode (*easy_perform)(CURL *);
  CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
  void (*easy_cleanup)(CURL *);
  const char *(*easy_strerror)(CURLcode);
  char *(*easy_escape)(CURL *, const char *, int);
  void (*free)(void *);
  struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
  void (*slist_free_all)(struct curl_slist *);
  CURLM *(*multi_init)(void);
  CURLMcode (*multi_add_handle)(CURLM *, CURL *);
  CURLMcode (*multi_remove_handle)(CURLM *, CURL *);
  CURLMcode (*multi_perform)(CURLM *, int *);
  CURLMcode (*multi_poll)(CURLM *, struct curl_waitfd *, unsigned int, int, int *);
  CURLMsg *(*multi_info_read)(CURLM *, int *);
  CURLMcode (*multi_cleanup)(CURLM *);
  const char *(*multi_strerror)(CURLMcode);
};
extern struct registry_curl agsx_curl;

int agsx_curl_load(agsx_error_t *err);

/* ---- one registry, over HTTP ----------------------------------------------------------------- */

struct registry {
  char *domain; /* as named in the reference: "docker.io", "host:5000" */
  char *host;   /* API host[:port]: "registry-1.docker.io" */
  char *path;   /* repository: "library/busybox" */
  const char *scheme;
  bool insecure; /* http allowed, TLS unverified */
  char *cafile;  /* certs.d/HOST/ca.crt */
  char *user, *password;
  char *authz; /* "Authorization: ..." header, once known */
  bool tried_auth;
  const char *actions; /* token scope: "pull", or "pull,push" */
};

/* One HTTP request of the API: GET (the default), HEAD, POST or PUT, with a
 * body from memory or a file (uploads). */
struct req {
  const char *method;
  const char *accept, *content_type;
  const char *body; /* memory body of BODY_LEN bytes */
  size_t body_len;
  int body_fd;         /* >= 0: a file body of BODY_LEN bytes instead */
  size_t max;          /* response body bound */
  bool no_credentials; /* the URL is not the registry's (an upload Location) */
};

/* What one transfer receives: a bounded body in memory, or a file. */
struct xfer {
  struct registry *reg;
  CURL *h;
  struct curl_slist *hdrs;
  char url[URL_MAX];
  char errbuf[CURL_ERROR_SIZE];
  /* Redirects are followed here, not by curl: credentials (the
   * Authorization header) and 401 challenges belong to the origin of the
   * first URL only; once a redirect leaves it, the transfer is foreign. */
  char origin0[AGSX_REGISTRY_ORIGIN_MAX];
  bool foreign;
  int hops;
  /* response headers (of the last response) */
  char *challenge, *content_type, *content_range, *location, *content_digest;
  /* request body (uploads) */
  const struct req *q;
  int64_t body_off;
  long status;
  /* memory sink */
  char *buf;
  size_t len, cap, max;
  bool too_big;
  /* file sink (blobs) */
  int fd;
  int64_t offset, size; /* bytes already in the file; expected total */
  bool started, bad_status, bad_range;
  /* the store's free space, watched while the blob arrives */
  uint64_t space_reserve;
  int64_t space_next;
  bool no_space;
  const struct agsx_descriptor *desc;
  bool done;
};

/* auth.c */
char *agsx_registry_b64encode(const char *s, size_t n);
int agsx_registry_load_credentials(struct registry *r, const char *authfile, agsx_error_t *err);

/* transport.c */
int agsx_registry_setup(struct registry *reg, const struct agsx_image_ref *ref,
                        const struct agsx_pull_opts *o, agsx_error_t *err);
void agsx_registry_clear(struct registry *r);
void agsx_registry_xfer_clear(struct xfer *x);
void agsx_registry_xfer_reset_hop(struct xfer *x);
size_t agsx_registry_on_data_file(char *data, size_t size, size_t nmemb, void *p);
int agsx_registry_xfer_setup(struct xfer *x, struct registry *r, const char *accept,
                             agsx_error_t *err);
int agsx_registry_curl_error(struct xfer *x, CURLcode c, agsx_error_t *err);
int agsx_registry_xfer_redirect(struct xfer *x, agsx_error_t *err);
int agsx_registry_xfer_begin(struct xfer *x, const char *url, bool foreign, agsx_error_t *err);
int agsx_registry_api_req(struct registry *r, const char *url, const struct req *q, struct xfer *x,
                          agsx_error_t *err);
int agsx_registry_api_get(struct registry *r, const char *path, const char *accept, size_t max,
                          struct xfer *x, agsx_error_t *err);
int agsx_registry_ping(struct registry *r, agsx_error_t *err);

#endif
