/* agsx — registry: OCI distribution API client (pull). */
#include "config.h"

#include "image/registry/registry.h"

#include "image/image.h"
#include "util/json.h"
#include "image/store.h"

#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>
#include <ctype.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pwd.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>

#define CERTS_DIR "/etc/agsx/certs.d"
#define PARTIAL_DIR "partial"
#define NESTING_MAX 4
#define URL_MAX 4096
#define HEADER_MAX 8192
#define REDIRECTS_MAX 5
#define SPACE_CHECK_EVERY (4 << 20)

/* ---- libcurl, loaded at pull time -------------------------------------------------------- */

static struct {
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
} cu;

static int curl_load(agsx_error_t *err) {
  if (cu.handle)
    return 0;
  const char *lib = getenv("AGSX_LIBCURL") ? getenv("AGSX_LIBCURL") : "libcurl.so.4";
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL)
    return agsx_error_set(err, 0, "pull needs libcurl (apt-get install libcurl4): %s", dlerror());
  static const struct {
    const char *name;
    size_t off;
  } syms[] = {
#define S(f, n) {"curl_" n, offsetof(__typeof__(cu), f)}
      S(global_init, "global_init"),     S(easy_init, "easy_init"),
      S(easy_setopt, "easy_setopt"),     S(easy_perform, "easy_perform"),
      S(easy_getinfo, "easy_getinfo"),   S(easy_cleanup, "easy_cleanup"),
      S(easy_strerror, "easy_strerror"), S(easy_escape, "easy_escape"),
      S(free, "free"),                   S(slist_append, "slist_append"),
      S(slist_free_all, "slist_free_all"), S(multi_init, "multi_init"),
      S(multi_add_handle, "multi_add_handle"), S(multi_remove_handle, "multi_remove_handle"),
      S(multi_perform, "multi_perform"), S(multi_poll, "multi_poll"),
      S(multi_info_read, "multi_info_read"), S(multi_cleanup, "multi_cleanup"),
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
    memcpy((char *)&cu + syms[i].off, &p, sizeof(p));
  }
  if (cu.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    dlclose(h);
    return agsx_error_set(err, 0, "libcurl initialisation failed");
  }
  cu.handle = h;
  return 0;
}

/* ---- parsers of untrusted input ------------------------------------------------------------ */

void agsx_auth_challenge_clear(struct agsx_auth_challenge *c) {
  free(c->scheme);
  free(c->realm);
  free(c->service);
  free(c->scope);
  memset(c, 0, sizeof(*c));
}

static bool is_token_char(char c) {
  return isalnum((unsigned char)c) || strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* RFC 7235: scheme 1*SP param *( OWS "," OWS param ), param = token "="
 * ( token / quoted-string ). Only the first challenge is read. */
int agsx_registry_parse_challenge(const char *hdr, size_t len, struct agsx_auth_challenge *ret,
                                  agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  if (len > AGSX_REGISTRY_CHALLENGE_MAX)
    return agsx_error_set(err, 0, "WWW-Authenticate header longer than %u bytes",
                          AGSX_REGISTRY_CHALLENGE_MAX);
  if (memchr(hdr, '\0', len))
    return agsx_error_set(err, 0, "WWW-Authenticate header contains a NUL byte");
  const char *p = hdr, *end = hdr + len;
  while (p < end && (*p == ' ' || *p == '\t'))
    p++;
  const char *s = p;
  while (p < end && is_token_char(*p))
    p++;
  if (p == s)
    return agsx_error_set(err, 0, "WWW-Authenticate header without a scheme");
  ret->scheme = xstrndup(s, (size_t)(p - s));
  for (char *c = ret->scheme; *c; c++)
    *c = (char)tolower((unsigned char)*c);
  _cleanup_free_ char *val = xmalloc(len + 1);
  for (;;) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == ','))
      p++;
    if (p >= end)
      return 0;
    const char *k = p;
    while (p < end && is_token_char(*p))
      p++;
    size_t kn = (size_t)(p - k);
    while (p < end && (*p == ' ' || *p == '\t'))
      p++;
    if (kn == 0 || p >= end || *p != '=')
      goto bad;
    p++;
    while (p < end && (*p == ' ' || *p == '\t'))
      p++;
    size_t vn = 0;
    if (p < end && *p == '"') {
      for (p++;; p++) {
        if (p >= end)
          goto bad;
        if (*p == '"')
          break;
        if (*p == '\\' && ++p >= end)
          goto bad;
        val[vn++] = *p;
      }
      p++;
    } else {
      while (p < end && is_token_char(*p))
        val[vn++] = *p++;
      /* token68 padding ("=="), not a registry parameter but legal */
      while (p < end && *p == '=')
        p++;
    }
    val[vn] = '\0';
    char **dst = kn == 5 && strncasecmp(k, "realm", 5) == 0     ? &ret->realm
                 : kn == 7 && strncasecmp(k, "service", 7) == 0 ? &ret->service
                 : kn == 5 && strncasecmp(k, "scope", 5) == 0   ? &ret->scope
                                                                : NULL;
    if (dst) {
      free(*dst);
      *dst = xstrdup(val);
    }
    while (p < end && (*p == ' ' || *p == '\t'))
      p++;
    if (p < end && *p != ',')
      goto bad;
  }
bad:
  agsx_auth_challenge_clear(ret);
  return agsx_error_set(err, 0, "malformed WWW-Authenticate header");
}

int agsx_registry_parse_token(const char *buf, size_t len, char **ret_token, agsx_error_t *err) {
  _cleanup_json_ yajl_val v = agsx_json_parse(buf, len, AGSX_REGISTRY_TOKEN_MAX, err);
  if (v == NULL)
    return agsx_error_wrap(err, "token response");
  if (!YAJL_IS_OBJECT(v))
    return agsx_error_set(err, 0, "token response: not a JSON object");
  const char *t = agsx_json_get_string(v, "token");
  if (t == NULL || *t == '\0')
    t = agsx_json_get_string(v, "access_token");
  if (t == NULL || *t == '\0')
    return agsx_error_set(err, 0, "token response without a token");
  /* It goes into an HTTP header: visible ASCII only. */
  for (const char *c = t; *c; c++)
    if (*c <= ' ' || *c > '~')
      return agsx_error_set(err, 0, "token response: invalid character in the token");
  if (strlen(t) > 65536)
    return agsx_error_set(err, 0, "token response: token longer than 64 KiB");
  *ret_token = xstrdup(t);
  return 0;
}

static int b64val(unsigned char c) {
  if (c >= 'A' && c <= 'Z')
    return c - 'A';
  if (c >= 'a' && c <= 'z')
    return c - 'a' + 26;
  if (c >= '0' && c <= '9')
    return c - '0' + 52;
  if (c == '+')
    return 62;
  if (c == '/')
    return 63;
  return -1;
}

static char *b64decode(const char *s, size_t *ret_len) {
  size_t n = strlen(s);
  char *out = xmalloc(n / 4 * 3 + 4);
  size_t o = 0;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '=') {
      for (; i < n; i++)
        if (s[i] != '=') {
          free(out);
          return NULL;
        }
      break;
    }
    int v = b64val((unsigned char)s[i]);
    if (v < 0) {
      free(out);
      return NULL;
    }
    acc = (acc << 6) | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (char)((acc >> bits) & 0xff);
    }
  }
  out[o] = '\0';
  *ret_len = o;
  return out;
}

static char *b64encode(const char *s, size_t n) {
  static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  char *out = xmalloc((n + 2) / 3 * 4 + 1), *o = out;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)(unsigned char)s[i] << 16;
    if (i + 1 < n)
      v |= (uint32_t)(unsigned char)s[i + 1] << 8;
    if (i + 2 < n)
      v |= (unsigned char)s[i + 2];
    *o++ = tab[(v >> 18) & 63];
    *o++ = tab[(v >> 12) & 63];
    *o++ = i + 1 < n ? tab[(v >> 6) & 63] : '=';
    *o++ = i + 2 < n ? tab[v & 63] : '=';
  }
  *o = '\0';
  return out;
}

/* "https://index.docker.io/v1/", "http://host:5000/v2", "host:5000" -> host[:port] */
static bool auths_key_matches(const char *key, const char *domain) {
  const char *k = key;
  if (agsx_str_has_prefix(k, "https://"))
    k += 8;
  else if (agsx_str_has_prefix(k, "http://"))
    k += 7;
  size_t n = strcspn(k, "/");
  if (strcmp(domain, "docker.io") == 0)
    return (n == 16 && strncmp(k, "index.docker.io", 15) == 0) ||
           (n == 15 && strncmp(k, "index.docker.io", 15) == 0) ||
           (n == 9 && strncmp(k, "docker.io", 9) == 0) ||
           (n == 20 && strncmp(k, "registry-1.docker.io", 20) == 0);
  return strlen(domain) == n && strncmp(k, domain, n) == 0;
}

static bool printable(const char *s) {
  for (; *s; s++)
    if ((unsigned char)*s < ' ' || *s == 0x7f)
      return false;
  return true;
}

int agsx_registry_parse_auths(const char *buf, size_t len, const char *domain, char **ret_user,
                              char **ret_password, agsx_error_t *err) {
  _cleanup_json_ yajl_val v = agsx_json_parse(buf, len, AGSX_REGISTRY_AUTHFILE_MAX, err);
  if (v == NULL)
    return -1;
  if (!YAJL_IS_OBJECT(v))
    return agsx_error_set(err, 0, "not a JSON object");
  yajl_val auths = agsx_json_get_object(v, "auths");
  if (auths == NULL)
    return 0;
  for (size_t i = 0; i < auths->u.object.len; i++) {
    if (!auths_key_matches(auths->u.object.keys[i], domain))
      continue;
    yajl_val e = auths->u.object.values[i];
    if (!YAJL_IS_OBJECT(e))
      return agsx_error_set(err, 0, "auths entry `%.100s` is not an object",
                            auths->u.object.keys[i]);
    const char *a = agsx_json_get_string(e, "auth");
    const char *u = agsx_json_get_string(e, "username");
    const char *pw = agsx_json_get_string(e, "password");
    _cleanup_free_ char *dec = NULL;
    if (a && *a) {
      size_t n;
      dec = b64decode(a, &n);
      char *colon = dec ? memchr(dec, ':', n) : NULL;
      if (dec == NULL || colon == NULL || strlen(dec) != n)
        return agsx_error_set(err, 0, "auths entry `%.100s`: `auth` is not base64 of user:password",
                              auths->u.object.keys[i]);
      *colon = '\0';
      u = dec;
      pw = colon + 1;
    }
    if (u == NULL || pw == NULL || *u == '\0')
      continue; /* e.g. a credential helper's entry: nothing usable here */
    if (!printable(u) || !printable(pw))
      return agsx_error_set(err, 0, "auths entry `%.100s`: control characters in credentials",
                            auths->u.object.keys[i]);
    *ret_user = xstrdup(u);
    *ret_password = xstrdup(pw);
    return 1;
  }
  return 0;
}

/* RFC 3986 authority, restricted to what registries use: reg-name or IPv4
 * (letters, digits, '-', '.', '_') or an [IPv6] literal, and a port. */
int agsx_registry_url_origin(const char *url, char ret[AGSX_REGISTRY_ORIGIN_MAX],
                             agsx_error_t *err) {
  const char *scheme, *p;
  if (strncasecmp(url, "https://", 8) == 0)
    scheme = "https", p = url + 8;
  else if (strncasecmp(url, "http://", 7) == 0)
    scheme = "http", p = url + 7;
  else
    return agsx_error_set(err, 0, "not an http(s) URL");
  size_t n = strcspn(p, "/?#");
  if (memchr(p, '@', n))
    return agsx_error_set(err, 0, "URL with user info");
  const char *host = p, *end = p + n, *hend;
  if (*p == '[') {
    hend = memchr(p, ']', n);
    if (hend == NULL || hend == p + 1)
      return agsx_error_set(err, 0, "malformed IPv6 address in URL");
    for (const char *c = p + 1; c < hend; c++)
      if (!isxdigit((unsigned char)*c) && *c != ':' && *c != '.')
        return agsx_error_set(err, 0, "malformed IPv6 address in URL");
    hend++;
  } else {
    hend = host;
    while (hend < end && (isalnum((unsigned char)*hend) || strchr("-._", *hend)))
      hend++;
    if (hend == host)
      return agsx_error_set(err, 0, "URL without a host");
  }
  unsigned long port = strcmp(scheme, "https") == 0 ? 443 : 80;
  if (hend < end) {
    if (*hend != ':' || hend + 1 == end || end - hend > 6)
      return agsx_error_set(err, 0, "malformed host or port in URL");
    port = 0;
    for (const char *c = hend + 1; c < end; c++) {
      if (!isdigit((unsigned char)*c))
        return agsx_error_set(err, 0, "malformed port in URL");
      port = port * 10 + (unsigned long)(*c - '0');
    }
    if (port == 0 || port > 65535)
      return agsx_error_set(err, 0, "port out of range in URL");
  }
  size_t hn = (size_t)(hend - host);
  if (hn > 255)
    return agsx_error_set(err, 0, "host name in URL longer than 255 bytes");
  int k = snprintf(ret, AGSX_REGISTRY_ORIGIN_MAX, "%s://%.*s:%lu", scheme, (int)hn, host, port);
  for (char *c = ret + strlen(scheme) + 3; c < ret + k && *c != '\0'; c++)
    *c = (char)tolower((unsigned char)*c);
  return 0;
}

static bool url_chars_ok(const char *s) {
  for (; *s; s++)
    if ((unsigned char)*s <= ' ' || (unsigned char)*s >= 0x7f)
      return false;
  return true;
}

int agsx_registry_resolve_location(const char *base, const char *loc, char **ret,
                                   agsx_error_t *err) {
  char origin[AGSX_REGISTRY_ORIGIN_MAX];
  if (strlen(loc) >= URL_MAX)
    return agsx_error_set(err, 0, "Location longer than %d bytes", URL_MAX);
  if (*loc == '\0' || !url_chars_ok(loc))
    return agsx_error_set(err, 0, "malformed Location header");
  if (strncasecmp(loc, "http://", 7) == 0 || strncasecmp(loc, "https://", 8) == 0) {
    if (agsx_registry_url_origin(loc, origin, err) < 0)
      return agsx_error_wrap(err, "Location");
    *ret = xstrdup(loc);
    return 0;
  }
  if (loc[0] != '/' || loc[1] == '/')
    return agsx_error_set(err, 0, "Location `%.100s` is neither an absolute URL nor a path", loc);
  if (agsx_registry_url_origin(base, origin, err) < 0)
    return agsx_error_wrap(err, "request URL");
  *ret = xasprintf("%s%s", origin, loc);
  return 0;
}

/* ---- one registry, over HTTP ----------------------------------------------------------------- */

struct registry {
  char *domain;    /* as named in the reference: "docker.io", "host:5000" */
  char *host;      /* API host[:port]: "registry-1.docker.io" */
  char *path;      /* repository: "library/busybox" */
  const char *scheme;
  bool insecure;   /* http allowed, TLS unverified */
  char *cafile;    /* certs.d/HOST/ca.crt */
  char *user, *password;
  char *authz;     /* "Authorization: ..." header, once known */
  bool tried_auth;
  const char *actions; /* token scope: "pull", or "pull,push" */
};

static void registry_clear(struct registry *r) {
  free(r->domain);
  free(r->host);
  free(r->path);
  free(r->cafile);
  free(r->user);
  if (r->password)
    explicit_bzero(r->password, strlen(r->password));
  free(r->password);
  if (r->authz)
    explicit_bzero(r->authz, strlen(r->authz));
  free(r->authz);
}

/* Docker treats these as insecure registries implicitly. */
static bool host_is_loopback(const char *host) {
  size_t n = strcspn(host, ":");
  if (host[0] == '[')
    return agsx_str_has_prefix(host, "[::1]");
  return (n == 9 && strncmp(host, "localhost", 9) == 0) ||
         (n == 9 && strncmp(host, "127.0.0.1", 9) == 0);
}

static bool host_listed(const char *host, const char *list) {
  if (list == NULL)
    return false;
  size_t hn = strlen(host);
  for (const char *p = list; *p;) {
    size_t n = strcspn(p, ", ");
    if (n == hn && strncmp(p, host, n) == 0)
      return true;
    p += n;
    p += strspn(p, ", ");
  }
  return false;
}

static int load_credentials(struct registry *r, const char *authfile, agsx_error_t *err) {
  _cleanup_free_ char *def = NULL;
  bool given = authfile != NULL;
  if (!given) {
    const char *dc = getenv("DOCKER_CONFIG");
    const char *home = getenv("HOME");
    if (dc && *dc)
      def = xasprintf("%s/config.json", dc);
    else if (home && *home)
      def = xasprintf("%s/.docker/config.json", home);
    else
      return 0;
    authfile = def;
  }
  _cleanup_close_ int fd = open(authfile, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    if (!given && errno == ENOENT)
      return 0;
    return agsx_error_set(err, errno, "credentials `%s`", authfile);
  }
  _cleanup_free_ char *buf = NULL;
  size_t len;
  if (agsx_read_fd(fd, AGSX_REGISTRY_AUTHFILE_MAX, &buf, &len, err) < 0 ||
      agsx_registry_parse_auths(buf, len, r->domain, &r->user, &r->password, err) < 0)
    return agsx_error_wrap(err, "credentials `%s`", authfile);
  return 0;
}

static void find_cafile(struct registry *r) {
  const char *dir = getenv("AGSX_CERTS_DIR") ? getenv("AGSX_CERTS_DIR") : CERTS_DIR;
  const char *names[] = {r->domain, r->host};
  for (size_t i = 0; i < 2; i++) {
    if (strchr(names[i], '/') || strcmp(names[i], "..") == 0 || strcmp(names[i], ".") == 0)
      continue;
    char *p = xasprintf("%s/%s/ca.crt", dir, names[i]);
    if (access(p, R_OK) == 0) {
      r->cafile = p;
      return;
    }
    free(p);
  }
}

/* One HTTP request of the API: GET (the default), HEAD, POST or PUT, with a
 * body from memory or a file (uploads). */
struct req {
  const char *method;
  const char *accept, *content_type;
  const char *body; /* memory body of BODY_LEN bytes */
  size_t body_len;
  int body_fd; /* >= 0: a file body of BODY_LEN bytes instead */
  size_t max;  /* response body bound */
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

static void xfer_free_headers(struct xfer *x) {
  free(x->challenge);
  free(x->content_type);
  free(x->content_range);
  free(x->location);
  free(x->content_digest);
  x->challenge = x->content_type = x->content_range = x->location = x->content_digest = NULL;
}

static void xfer_clear(struct xfer *x) {
  if (x->h)
    cu.easy_cleanup(x->h);
  if (x->hdrs)
    cu.slist_free_all(x->hdrs);
  xfer_free_headers(x);
  free(x->buf);
  x->h = NULL;
  x->hdrs = NULL;
  x->buf = NULL;
}

/* Readies X for the next hop of a redirect: a new handle, no response. */
static void xfer_reset_hop(struct xfer *x) {
  if (x->h)
    cu.easy_cleanup(x->h);
  if (x->hdrs)
    cu.slist_free_all(x->hdrs);
  x->h = NULL;
  x->hdrs = NULL;
  xfer_free_headers(x);
  x->len = 0;
  x->too_big = false;
  x->status = 0;
  x->errbuf[0] = '\0';
}

static char *header_value(const char *line, size_t n, const char *name) {
  size_t nn = strlen(name);
  if (n <= nn || strncasecmp(line, name, nn) != 0 || line[nn] != ':')
    return NULL;
  const char *v = line + nn + 1;
  const char *end = line + n;
  while (v < end && (*v == ' ' || *v == '\t'))
    v++;
  while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
    end--;
  return xstrndup(v, (size_t)(end - v));
}

static size_t on_header(char *line, size_t size, size_t nmemb, void *data) {
  struct xfer *x = data;
  size_t n = size * nmemb;
  if (n > HEADER_MAX)
    return n; /* ignored; no header we need is that long */
  if (n >= 5 && strncmp(line, "HTTP/", 5) == 0) {
    xfer_free_headers(x); /* a new response (after a redirect) */
    return n;
  }
  char *v;
  if ((v = header_value(line, n, "www-authenticate"))) {
    if (x->challenge == NULL)
      x->challenge = v;
    else
      free(v);
  } else if ((v = header_value(line, n, "content-type"))) {
    free(x->content_type);
    x->content_type = v;
  } else if ((v = header_value(line, n, "content-range"))) {
    free(x->content_range);
    x->content_range = v;
  } else if ((v = header_value(line, n, "location"))) {
    free(x->location);
    x->location = v;
  } else if ((v = header_value(line, n, "docker-content-digest"))) {
    free(x->content_digest);
    x->content_digest = v;
  }
  return n;
}

static size_t on_data_mem(char *data, size_t size, size_t nmemb, void *p) {
  struct xfer *x = p;
  size_t n = size * nmemb;
  if (n > x->max - x->len) {
    x->too_big = true;
    return 0;
  }
  if (x->buf == NULL || x->len + n + 1 > x->cap) {
    size_t cap = x->cap ? x->cap : 16384;
    while (cap < x->len + n + 1)
      cap *= 2;
    x->buf = xrealloc(x->buf, cap);
    x->cap = cap;
  }
  memcpy(x->buf + x->len, data, n);
  x->len += n;
  x->buf[x->len] = '\0';
  return n;
}

/* "bytes START-END/TOTAL" must start where our file ends. */
static bool range_ok(const char *cr, int64_t offset) {
  long long start;
  return cr && sscanf(cr, "bytes %lld-", &start) == 1 && start == offset;
}

static size_t on_data_file(char *data, size_t size, size_t nmemb, void *p) {
  struct xfer *x = p;
  size_t n = size * nmemb;
  if (!x->started) {
    long code = 0;
    cu.easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &code);
    x->status = code;
    if (code >= 300 && code < 400)
      return n; /* a redirect's body: followed once the response ends */
    if (code == 200 && x->offset > 0) {
      /* The server ignored our Range: start over. */
      if (ftruncate(x->fd, 0) < 0)
        return 0;
      x->offset = 0;
    } else if (code == 206) {
      if (!range_ok(x->content_range, x->offset)) {
        x->bad_range = true;
        return 0;
      }
    } else if (code != 200) {
      x->bad_status = true;
      return 0;
    }
    x->started = true;
  }
  if ((int64_t)n > x->size - x->offset) {
    x->too_big = true;
    return 0;
  }
  if (x->space_reserve > 0 && x->offset >= x->space_next) {
    x->space_next = x->offset + SPACE_CHECK_EVERY;
    if (agsx_store_check_space_fd(x->fd, n, x->space_reserve, NULL) < 0) {
      x->no_space = true;
      return 0;
    }
  }
  if (pwrite(x->fd, data, n, x->offset) != (ssize_t)n)
    return 0;
  x->offset += (int64_t)n;
  return n;
}

static int xfer_setup(struct xfer *x, struct registry *r, const char *accept, agsx_error_t *err) {
  x->reg = r;
  x->h = cu.easy_init();
  if (x->h == NULL)
    return agsx_error_set(err, ENOMEM, "curl_easy_init");
  CURL *h = x->h;
  cu.easy_setopt(h, CURLOPT_URL, x->url);
  cu.easy_setopt(h, CURLOPT_ERRORBUFFER, x->errbuf);
  cu.easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  cu.easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  /* Redirects (blob storage) are followed by xfer_redirect, which decides
   * what credentials go along: curl's own rules depend on its version
   * (before 7.83 it sent them to another port of the same host). */
  cu.easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  cu.easy_setopt(h, CURLOPT_UNRESTRICTED_AUTH, 0L);
  cu.easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 30L);
  cu.easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  cu.easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 60L);
  cu.easy_setopt(h, CURLOPT_USERAGENT, "agsx/" PACKAGE_VERSION);
  cu.easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  cu.easy_setopt(h, CURLOPT_HEADERDATA, x);
  if (r->cafile)
    cu.easy_setopt(h, CURLOPT_CAINFO, r->cafile);
  if (r->insecure && r->cafile == NULL) {
    cu.easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
    cu.easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (accept) {
    _cleanup_free_ char *a = xasprintf("Accept: %s", accept);
    x->hdrs = cu.slist_append(x->hdrs, a);
  }
  if (r->authz && !x->foreign)
    x->hdrs = cu.slist_append(x->hdrs, r->authz);
  if (x->hdrs)
    cu.easy_setopt(h, CURLOPT_HTTPHEADER, x->hdrs);
  return 0;
}

static int curl_error(struct xfer *x, CURLcode c, agsx_error_t *err) {
  return agsx_error_set(err, 0, "%s: %s", x->url, x->errbuf[0] ? x->errbuf : cu.easy_strerror(c));
}

static bool is_redirect(long code) {
  return code == 301 || code == 302 || code == 303 || code == 307 || code == 308;
}

/* After a response: when it is a redirect, points X at its target and
 * returns 1 (the caller sends the request again); 0 when it is none; -1
 * when it is refused (too many, not http(s), https down to http). */
static int xfer_redirect(struct xfer *x, agsx_error_t *err) {
  long code = 0;
  char *to = NULL;
  cu.easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &code);
  if (!is_redirect(code) || cu.easy_getinfo(x->h, CURLINFO_REDIRECT_URL, &to) != CURLE_OK ||
      to == NULL)
    return 0;
  if (++x->hops > REDIRECTS_MAX)
    return agsx_error_set(err, 0, "%s: more than %d redirects", x->url, REDIRECTS_MAX);
  char origin[AGSX_REGISTRY_ORIGIN_MAX];
  if (strlen(to) >= URL_MAX || agsx_registry_url_origin(to, origin, err) < 0)
    return agsx_error_wrap(err, "%s: redirect refused", x->url);
  if (agsx_str_has_prefix(x->url, "https:") && !agsx_str_has_prefix(origin, "https:"))
    return agsx_error_set(err, 0, "%s: redirect from https to plain http refused", x->url);
  x->foreign = x->foreign || strcmp(origin, x->origin0) != 0;
  agsx_debug("redirect to %s%s", origin, x->foreign ? " (without credentials)" : "");
  snprintf(x->url, sizeof(x->url), "%s", to);
  return 1;
}

/* Starts X at URL: the origin credentials belong to (unless FOREIGN). */
static int xfer_begin(struct xfer *x, const char *url, bool foreign, agsx_error_t *err) {
  if (strlen(url) >= sizeof(x->url))
    return agsx_error_set(err, 0, "URL longer than %d bytes", URL_MAX);
  snprintf(x->url, sizeof(x->url), "%s", url);
  x->foreign = foreign;
  x->hops = 0;
  return agsx_registry_url_origin(url, x->origin0, err);
}

static size_t on_read(char *buf, size_t size, size_t nitems, void *data) {
  struct xfer *x = data;
  size_t n = size * nitems;
  int64_t left = (int64_t)x->q->body_len - x->body_off;
  if (left <= 0)
    return 0;
  if ((int64_t)n > left)
    n = (size_t)left;
  if (x->q->body_fd >= 0) {
    ssize_t k;
    do
      k = pread(x->q->body_fd, buf, n, x->body_off);
    while (k < 0 && errno == EINTR);
    if (k <= 0)
      return CURL_READFUNC_ABORT;
    n = (size_t)k;
  } else {
    memcpy(buf, x->q->body + x->body_off, n);
  }
  x->body_off += (int64_t)n;
  return n;
}

/* The method and body of Q on X's handle, after xfer_setup. */
static void set_method(struct xfer *x, const struct req *q) {
  CURL *h = x->h;
  const char *m = q->method ? q->method : "GET";
  x->q = q;
  x->body_off = 0;
  if (strcmp(m, "HEAD") == 0) {
    cu.easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (strcmp(m, "POST") == 0 || strcmp(m, "PUT") == 0) {
    cu.easy_setopt(h, CURLOPT_UPLOAD, 1L);
    cu.easy_setopt(h, CURLOPT_READFUNCTION, on_read);
    cu.easy_setopt(h, CURLOPT_READDATA, x);
    cu.easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)q->body_len);
    cu.easy_setopt(h, CURLOPT_CUSTOMREQUEST, m);
    /* no 100-continue round trip: registries answer at once */
    x->hdrs = cu.slist_append(x->hdrs, "Expect:");
  }
  if (q->content_type) {
    _cleanup_free_ char *ct = xasprintf("Content-Type: %s", q->content_type);
    x->hdrs = cu.slist_append(x->hdrs, ct);
  }
  if (x->hdrs)
    cu.easy_setopt(h, CURLOPT_HTTPHEADER, x->hdrs);
}

/* Sends Q to URL, the response body into memory (at most Q->max bytes);
 * GET and HEAD follow redirects. Returns the HTTP status of the last
 * response. */
static int request(struct registry *r, const char *url, const struct req *q, struct xfer *x,
                   agsx_error_t *err) {
  memset(x, 0, sizeof(*x));
  x->fd = -1;
  x->max = q->max;
  bool follow = q->method == NULL || strcmp(q->method, "GET") == 0 ||
                strcmp(q->method, "HEAD") == 0;
  int rc = xfer_begin(x, url, q->no_credentials, err);
  while (rc == 0) {
    if (xfer_setup(x, r, q->accept, err) < 0) {
      rc = -1;
      break;
    }
    set_method(x, q);
    cu.easy_setopt(x->h, CURLOPT_WRITEFUNCTION, on_data_mem);
    cu.easy_setopt(x->h, CURLOPT_WRITEDATA, x);
    CURLcode c = cu.easy_perform(x->h);
    if (x->too_big)
      rc = agsx_error_set(err, 0, "%s: response larger than %zu bytes", x->url, q->max);
    else if (c != CURLE_OK)
      rc = curl_error(x, c, err);
    int rd = rc == 0 && follow ? xfer_redirect(x, err) : 0;
    if (rd <= 0) {
      rc = rd < 0 ? -1 : rc;
      break;
    }
    xfer_reset_hop(x);
  }
  if (rc < 0) {
    xfer_clear(x); /* callers own X only on success */
    return -1;
  }
  cu.easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &x->status);
  return (int)x->status;
}

static int get_mem(struct registry *r, const char *url, const char *accept, size_t max,
                   struct xfer *x, agsx_error_t *err) {
  struct req q = {.accept = accept, .max = max, .body_fd = -1};
  return request(r, url, &q, x, err);
}

/* Authenticates after a 401 with challenge CH. */
static int authenticate(struct registry *r, const char *ch, agsx_error_t *err) {
  r->tried_auth = true;
  struct agsx_auth_challenge c;
  if (ch == NULL)
    return agsx_error_set(err, 0, "authentication required, but the registry sent no challenge");
  if (agsx_registry_parse_challenge(ch, strlen(ch), &c, err) < 0)
    return -1;
  int rc = 0;
  _cleanup_free_ char *basic = NULL;
  if (r->user) {
    _cleanup_free_ char *up = xasprintf("%s:%s", r->user, r->password);
    basic = b64encode(up, strlen(up));
    explicit_bzero(up, strlen(up));
  }
  if (strcmp(c.scheme, "basic") == 0) {
    if (basic == NULL)
      rc = agsx_error_set(err, 0,
                          "authentication required: no credentials for `%s` (docker login, or "
                          "--authfile)",
                          r->domain);
    else
      r->authz = xasprintf("Authorization: Basic %s", basic);
  } else if (strcmp(c.scheme, "bearer") == 0) {
    if (c.realm == NULL || !(agsx_str_has_prefix(c.realm, "https://") ||
                             agsx_str_has_prefix(c.realm, "http://"))) {
      rc = agsx_error_set(err, 0, "bearer challenge without an http(s) realm");
    } else if (agsx_str_has_prefix(c.realm, "http://") && strcmp(r->scheme, "https") == 0) {
      rc = agsx_error_set(err, 0, "refusing a plain http token realm for an https registry");
    } else {
      CURL *e = cu.easy_init();
      _cleanup_free_ char *scope =
          xasprintf("repository:%s:%s", r->path, r->actions ? r->actions : "pull");
      char *es = cu.easy_escape(e, scope, 0);
      char *esv = c.service ? cu.easy_escape(e, c.service, 0) : NULL;
      _cleanup_free_ char *url =
          xasprintf("%s%sscope=%s%s%s", c.realm, strchr(c.realm, '?') ? "&" : "?", es,
                    esv ? "&service=" : "", esv ? esv : "");
      cu.free(es);
      cu.free(esv);
      cu.easy_cleanup(e);
      if (basic)
        r->authz = xasprintf("Authorization: Basic %s", basic);
      struct xfer x;
      int st = get_mem(r, url, "application/json", AGSX_REGISTRY_TOKEN_MAX, &x, err);
      free(r->authz);
      r->authz = NULL;
      _cleanup_free_ char *token = NULL;
      if (st < 0)
        rc = agsx_error_wrap(err, "token");
      else if (st == 401 || st == 403)
        rc = agsx_error_set(err, 0, "authentication failed: the token server refused %s (HTTP %d)",
                            basic ? "the credentials" : "anonymous access", st);
      else if (st != 200)
        rc = agsx_error_set(err, 0, "token server: HTTP %d", st);
      else if (agsx_registry_parse_token(x.buf ? x.buf : "", x.len, &token, err) < 0)
        rc = -1;
      else
        r->authz = xasprintf("Authorization: Bearer %s", token);
      if (token)
        explicit_bzero(token, strlen(token));
      xfer_clear(&x);
    }
  } else {
    rc = agsx_error_set(err, 0, "unsupported authentication scheme `%.40s`", c.scheme);
  }
  agsx_auth_challenge_clear(&c);
  return rc;
}

/* Sends Q to URL of the registry, authenticating once on 401. */
static int api_req(struct registry *r, const char *url, const struct req *q, struct xfer *x,
                   agsx_error_t *err) {
  int st = request(r, url, q, x, err);
  if ((st == 401 || st == 403) && x->foreign) {
    /* A redirect target (object storage) asking for credentials gets none,
     * nor does the token server it names. */
    char origin[AGSX_REGISTRY_ORIGIN_MAX];
    if (agsx_registry_url_origin(x->url, origin, NULL) < 0)
      snprintf(origin, sizeof(origin), "?");
    xfer_clear(x);
    return agsx_error_set(err, 0,
                          "%s: HTTP %d from `%s`, where the registry redirected; credentials go "
                          "only to the registry",
                          url, st, origin);
  }
  if (st == 401 && !r->tried_auth) {
    _cleanup_free_ char *ch = x->challenge ? xstrdup(x->challenge) : NULL;
    xfer_clear(x);
    if (authenticate(r, ch, err) < 0)
      return -1;
    st = request(r, url, q, x, err);
  }
  if (st == 401 || st == 403) {
    xfer_clear(x);
    return agsx_error_set(err, 0, "%s: access denied (HTTP %d)%s", r->path, st,
                          r->user ? ": check the credentials" : ": no credentials given");
  }
  return st;
}

/* GET a registry API path. */
static int api_get(struct registry *r, const char *path, const char *accept, size_t max,
                   struct xfer *x, agsx_error_t *err) {
  _cleanup_free_ char *url = xasprintf("%s://%s%s", r->scheme, r->host, path);
  struct req q = {.accept = accept, .max = max, .body_fd = -1};
  return api_req(r, url, &q, x, err);
}

/* Finds the scheme: https, or for an insecure registry http when https
 * does not answer (as Docker does), and authenticates if /v2/ asks. */
static int ping(struct registry *r, agsx_error_t *err) {
  struct xfer x;
  r->scheme = "https";
  agsx_error_t perr = NULL;
  int st = api_get(r, "/v2/", "application/json", 1u << 20, &x, &perr);
  if (st < 0 && r->insecure && !r->tried_auth) {
    agsx_debug("%s: https failed (%s), trying http", r->host, perr->msg);
    agsx_error_free(&perr);
    r->scheme = "http";
    st = api_get(r, "/v2/", "application/json", 1u << 20, &x, &perr);
  }
  if (st < 0) {
    if (!r->insecure && !r->tried_auth &&
        (strstr(perr->msg, "SSL") || strstr(perr->msg, "TLS") || strstr(perr->msg, "ssl"))) {
      agsx_error_set(err, 0, "%s (a plain http registry needs --insecure)", perr->msg);
      agsx_error_free(&perr);
      return -1;
    }
    *err = perr;
    return -1;
  }
  xfer_clear(&x);
  /* 404: not a v2 registry root, but some proxies; the manifest will tell. */
  if (st != 200 && st != 404)
    return agsx_error_set(err, 0, "%s://%s/v2/: HTTP %d", r->scheme, r->host, st);
  return 0;
}

/* ---- manifests ------------------------------------------------------------------------------- */

#define ACCEPT_MANIFESTS                                                                           \
  AGSX_MT_OCI_INDEX ", " AGSX_MT_OCI_MANIFEST ", " AGSX_MT_DOCKER_LIST                             \
                    ", " AGSX_MT_DOCKER_MANIFEST

/* Fetches manifest REFERENCE (tag or digest), verified against EXPECT
 * (digest, or NULL for a tag) and SIZE (< 0: unknown). */
static int get_manifest(struct registry *r, const char *reference, const char *expect,
                        int64_t size, char **ret_buf, size_t *ret_len, char **ret_mt,
                        char ret_digest[AGSX_DIGEST_LEN], agsx_error_t *err) {
  _cleanup_free_ char *path = xasprintf("/v2/%s/manifests/%s", r->path, reference);
  struct xfer x;
  int st = api_get(r, path, ACCEPT_MANIFESTS, AGSX_IMAGE_JSON_MAX, &x, err);
  if (st < 0)
    return -1;
  int rc = 0;
  if (st == 404)
    rc = agsx_error_set(err, 0, "manifest `%s` not found in `%s`", reference, r->path);
  else if (st != 200)
    rc = agsx_error_set(err, 0, "manifest `%s`: HTTP %d", reference, st);
  else if (x.buf == NULL)
    rc = agsx_error_set(err, 0, "manifest `%s`: empty response", reference);
  if (rc < 0) {
    xfer_clear(&x);
    return -1;
  }
  agsx_sha256_buf(x.buf, x.len, ret_digest);
  if (expect && strcmp(expect, ret_digest) != 0)
    rc = agsx_error_set(err, 0, "manifest `%s` is corrupt (content has digest `%s`)", expect,
                        ret_digest);
  else if (size >= 0 && (int64_t)x.len != size)
    rc = agsx_error_set(err, 0, "manifest `%s` has %zu bytes, expected %lld", reference, x.len,
                        (long long)size);
  /* The media type: the document's own, else the Content-Type. */
  _cleanup_json_ yajl_val v =
      rc == 0 ? agsx_json_parse(x.buf, x.len, AGSX_IMAGE_JSON_MAX, err) : NULL;
  const char *mt = v ? agsx_json_get_string(v, "mediaType") : NULL;
  if (rc == 0 && v == NULL)
    rc = agsx_error_wrap(err, "manifest `%s`", reference);
  if (rc == 0 && mt == NULL && x.content_type)
    mt = x.content_type;
  if (rc == 0 && mt == NULL)
    rc = agsx_error_set(err, 0, "manifest `%s` has no media type", reference);
  if (rc == 0) {
    *ret_mt = xstrndup(mt, strcspn(mt, "; "));
    *ret_len = x.len;
    *ret_buf = steal_ptr(&x.buf);
  }
  xfer_clear(&x);
  return rc;
}

/* ---- blobs ----------------------------------------------------------------------------------- */

static int get_small_blob(struct registry *r, const struct agsx_descriptor *d, char **ret_buf,
                          size_t *ret_len, agsx_error_t *err) {
  if (d->size > (int64_t)AGSX_IMAGE_JSON_MAX)
    return agsx_error_set(err, 0, "blob `%s`: %lld bytes is too large", d->digest,
                          (long long)d->size);
  _cleanup_free_ char *path = xasprintf("/v2/%s/blobs/%s", r->path, d->digest);
  struct xfer x;
  int st = api_get(r, path, NULL, AGSX_IMAGE_JSON_MAX, &x, err);
  if (st < 0)
    return -1;
  int rc = 0;
  if (st != 200)
    rc = agsx_error_set(err, 0, "blob `%s`: HTTP %d", d->digest, st);
  char got[AGSX_DIGEST_LEN];
  agsx_sha256_buf(x.buf ? x.buf : "", x.len, got);
  if (rc == 0 && ((int64_t)x.len != d->size || strcmp(got, d->digest) != 0))
    rc = agsx_error_set(err, 0, "blob `%s` is corrupt (%zu bytes with digest `%s`)", d->digest,
                        x.len, got);
  if (rc == 0) {
    *ret_buf = x.buf ? steal_ptr(&x.buf) : xstrdup("");
    *ret_len = x.len;
  }
  xfer_clear(&x);
  return rc;
}

/* ---- the pull -------------------------------------------------------------------------------- */

struct pull {
  struct agsx_store *store;
  struct registry reg;
  const struct agsx_pull_opts *o;
  int workfd, partialfd;
  struct agsx_pull_progress prog;
  int64_t last_report;
};

static void report(struct pull *p, bool force) {
  if (p->o == NULL || p->o->progress == NULL)
    return;
  int64_t now = agsx_mono_ns();
  if (!force && now - p->last_report < 200 * 1000000LL)
    return;
  p->last_report = now;
  p->o->progress(&p->prog, p->o->data);
}

/* Opens (and locks: a concurrent pull of the same blob waits) the partial
 * file of blob D. The lock holder may have moved the file on meanwhile:
 * then the name is opened again. */
static int open_partial(struct pull *p, const struct agsx_descriptor *d, int64_t *ret_have,
                        agsx_error_t *err) {
  const char *hex = agsx_digest_hex(d->digest);
  for (int tries = 0;; tries++) {
    _cleanup_close_ int fd =
        openat(p->partialfd, hex, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
      return agsx_error_set(err, errno, "partial blob `%s`", d->digest);
    if (flock(fd, LOCK_EX) < 0)
      return agsx_error_set(err, errno, "lock partial blob `%s`", d->digest);
    struct stat st, now;
    if (fstat(fd, &st) < 0)
      return agsx_error_set(err, errno, "partial blob `%s`", d->digest);
    if (fstatat(p->partialfd, hex, &now, AT_SYMLINK_NOFOLLOW) < 0 || now.st_ino != st.st_ino ||
        now.st_dev != st.st_dev) {
      if (tries < 8)
        continue;
      return agsx_error_set(err, 0, "partial blob `%s` keeps changing", d->digest);
    }
    if (!S_ISREG(st.st_mode) || st.st_nlink != 1)
      return agsx_error_set(err, 0, "partial blob `%s` is not a plain file", d->digest);
    if (st.st_size > d->size) {
      if (ftruncate(fd, 0) < 0)
        return agsx_error_set(err, errno, "partial blob `%s`", d->digest);
      st.st_size = 0;
    }
    *ret_have = st.st_size;
    return steal_fd(&fd);
  }
}

/* Moves a downloaded blob from partial/ into the work dir, which verifies
 * its digest and size; a bad one is deleted, so nothing of it stays and
 * the next pull fetches it afresh. */
static int verify_blob(struct pull *p, const struct agsx_descriptor *d, agsx_error_t *err) {
  const char *hex = agsx_digest_hex(d->digest);
  if (agsx_store_stage_blob_move(p->store, p->workfd, p->partialfd, hex, d->digest, d->size,
                                 err) == 0)
    return 0;
  unlinkat(p->partialfd, hex, 0);
  return -1;
}

static int launch_blob(struct pull *p, CURLM *m, struct xfer *x, agsx_error_t *err) {
  if (xfer_setup(x, &p->reg, NULL, err) < 0)
    return -1;
  cu.easy_setopt(x->h, CURLOPT_WRITEFUNCTION, on_data_file);
  cu.easy_setopt(x->h, CURLOPT_WRITEDATA, x);
  cu.easy_setopt(x->h, CURLOPT_PRIVATE, x);
  if (x->offset > 0) {
    char range[64];
    snprintf(range, sizeof(range), "%lld-", (long long)x->offset);
    cu.easy_setopt(x->h, CURLOPT_RANGE, range);
    agsx_debug("resuming blob %s at byte %lld", x->desc->digest, (long long)x->offset);
  }
  CURLMcode mc = cu.multi_add_handle(m, x->h);
  if (mc != CURLM_OK)
    return agsx_error_set(err, 0, "curl: %s", cu.multi_strerror(mc));
  return 0;
}

static int start_blob(struct pull *p, CURLM *m, struct xfer *x, const struct agsx_descriptor *d,
                      agsx_error_t *err) {
  _cleanup_free_ char *url =
      xasprintf("%s://%s/v2/%s/blobs/%s", p->reg.scheme, p->reg.host, p->reg.path, d->digest);
  if (xfer_begin(x, url, false, err) < 0)
    return -1;
  return launch_blob(p, m, x, err);
}

static int no_space_error(struct pull *p, struct xfer *x, agsx_error_t *err) {
  if (agsx_store_check_space(p->store, 0, err) < 0)
    return agsx_error_wrap(err, "blob `%s`", x->desc->digest);
  return agsx_error_set(err, 0, "blob `%s`: the image store is running out of space",
                        x->desc->digest);
}

static int finish_blob(struct pull *p, struct xfer *x, CURLcode c, agsx_error_t *err) {
  const char *dg = x->desc->digest;
  if (x->too_big)
    return agsx_error_set(err, 0, "blob `%s`: the registry sent more than its %lld bytes", dg,
                          (long long)x->size);
  if (x->no_space)
    return no_space_error(p, x, err);
  if (x->bad_range)
    return agsx_error_set(err, 0, "blob `%s`: the registry answered a range request wrongly", dg);
  if (x->bad_status || (c == CURLE_OK && !x->started)) {
    long code = x->status;
    if (code == 0)
      cu.easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &code);
    /* An empty body is right only when nothing was missing. */
    bool complete = x->offset == x->size && (code == 200 || code == 206 || code == 416);
    if (!complete)
      return agsx_error_set(err, 0, "blob `%s`: HTTP %ld", dg, code);
  } else if (c != CURLE_OK) {
    return curl_error(x, c, err);
  }
  if (x->offset != x->size)
    return agsx_error_set(err, 0, "blob `%s`: the registry sent %lld of %lld bytes", dg,
                          (long long)x->offset, (long long)x->size);
  (void)p;
  return 0;
}

static const struct agsx_manifest *sort_ctx;
static int cmp_layer_digest(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  int c = strcmp(sort_ctx->layers[x].digest, sort_ctx->layers[y].digest);
  return c ? c : (x > y) - (x < y);
}

/* Downloads the blobs of LAYERS not yet in the store into partial/, up to
 * AGSX_REGISTRY_PARALLEL at a time. */
static int download_layers(struct pull *p, const struct agsx_manifest *mf, agsx_error_t *err) {
  size_t n = mf->n_layers;
  struct xfer *xs = xzalloc(n * sizeof(*xs));
  size_t *todo = xmalloc((n + 1) * sizeof(*todo)), ntodo = 0;
  for (size_t i = 0; i < n; i++) {
    xs[i].fd = -1;
    xs[i].desc = &mf->layers[i];
    xs[i].space_reserve = p->store->reserve;
  }
  p->prog.layers_total = n;
  /* Partial files are locked in digest order, so two pulls sharing layers
   * in different orders cannot wait on each other. */
  size_t *order = xmalloc((n + 1) * sizeof(*order));
  for (size_t i = 0; i < n; i++)
    order[i] = i;
  sort_ctx = mf;
  qsort(order, n, sizeof(*order), cmp_layer_digest);
  int rc = 0;
  for (size_t k = 0; k < n && rc == 0; k++) {
    size_t i = order[k];
    const struct agsx_descriptor *d = &mf->layers[i];
    bool dup = k > 0 && strcmp(mf->layers[order[k - 1]].digest, d->digest) == 0;
    if (dup || agsx_store_has_blob(p->store, d->digest)) {
      p->prog.layers_skipped++;
      p->prog.layers_done++;
      xs[i].done = true;
      continue;
    }
    xs[i].size = d->size;
    xs[i].fd = open_partial(p, d, &xs[i].offset, err);
    if (xs[i].fd < 0) {
      rc = -1;
      break;
    }
    if (agsx_store_has_blob(p->store, d->digest)) {
      /* A concurrent pull committed it while we waited for the lock. */
      if (xs[i].offset == 0)
        unlinkat(p->partialfd, agsx_digest_hex(d->digest), 0);
      agsx_closep(&xs[i].fd);
      p->prog.layers_skipped++;
      p->prog.layers_done++;
      xs[i].done = true;
      continue;
    }
    p->prog.bytes_total += d->size;
    p->prog.bytes_done += xs[i].offset;
    if (xs[i].offset == d->size) {
      xs[i].done = true;
      p->prog.layers_done++;
      rc = verify_blob(p, d, err);
      continue;
    }
    todo[ntodo++] = i;
  }
  free(order);
  /* What is still to come must fit, with the reserve kept free. */
  if (rc == 0)
    rc = agsx_store_check_space(p->store, (uint64_t)(p->prog.bytes_total - p->prog.bytes_done),
                                err);
  CURLM *m = rc == 0 ? cu.multi_init() : NULL;
  size_t next = 0, running_n = 0;
  while (rc == 0 && (next < ntodo || running_n > 0)) {
    while (next < ntodo && running_n < AGSX_REGISTRY_PARALLEL && rc == 0) {
      struct xfer *x = &xs[todo[next++]];
      rc = start_blob(p, m, x, x->desc, err);
      running_n++;
    }
    if (rc < 0)
      break;
    int still;
    CURLMcode mc = cu.multi_perform(m, &still);
    if (mc == CURLM_OK)
      mc = cu.multi_poll(m, NULL, 0, 200, NULL);
    if (mc != CURLM_OK) {
      rc = agsx_error_set(err, 0, "curl: %s", cu.multi_strerror(mc));
      break;
    }
    CURLMsg *msg;
    int left;
    while (rc == 0 && (msg = cu.multi_info_read(m, &left)) != NULL) {
      if (msg->msg != CURLMSG_DONE)
        continue;
      struct xfer *x = NULL;
      cu.easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
      CURLcode c = msg->data.result;
      cu.multi_remove_handle(m, x->h);
      int rd = c == CURLE_OK && !x->started ? xfer_redirect(x, err) : 0;
      if (rd > 0) {
        xfer_reset_hop(x);
        rc = launch_blob(p, m, x, err);
        continue;
      }
      running_n--;
      rc = rd < 0 ? -1 : finish_blob(p, x, c, err);
      if (rc == 0)
        rc = verify_blob(p, x->desc, err);
      x->done = true;
      p->prog.layers_done++;
    }
    int64_t live = 0;
    for (size_t i = 0; i < n; i++)
      if (xs[i].fd >= 0)
        live += xs[i].offset;
    p->prog.bytes_done = live;
    report(p, false);
  }
  if (m) {
    for (size_t i = 0; i < n; i++)
      if (xs[i].h)
        cu.multi_remove_handle(m, xs[i].h);
    cu.multi_cleanup(m);
  }
  for (size_t i = 0; i < n; i++) {
    xfer_clear(&xs[i]);
    agsx_closep(&xs[i].fd);
  }
  if (rc == 0)
    report(p, true);
  free(xs);
  free(todo);
  return rc;
}

static int check_platform(const struct agsx_image_config *c, agsx_error_t *err) {
  if (strcmp(c->os, "linux") != 0 || strcmp(c->architecture, "amd64") != 0)
    return agsx_error_set(err, 0, "image is for %s/%s: agsx runs only linux/amd64 images", c->os,
                          c->architecture);
  return 0;
}

/* Unpacks each layer, checking its diff_id. */
static int stage_layers(struct pull *p, const struct agsx_manifest *mf,
                        const struct agsx_image_config *c, agsx_error_t *err) {
  for (size_t i = 0; i < mf->n_layers; i++)
    if (agsx_store_stage_layer(p->store, p->workfd, &mf->layers[i], c->diff_ids[i], err) < 0)
      return -1;
  return 0;
}

/* The sizes the manifest declares are refused before anything is
 * downloaded when they exceed the image budget (each, and together). */
static int check_declared_sizes(struct pull *p, const struct agsx_manifest *mf,
                                agsx_error_t *err) {
  uint64_t max = p->store->budget_max, total = (uint64_t)mf->config.size;
  for (size_t i = 0; i < mf->n_layers; i++) {
    uint64_t sz = (uint64_t)mf->layers[i].size;
    if (sz > max || total + sz > max) {
      _cleanup_free_ char *m = agsx_format_size(max);
      return agsx_error_set(err, 0,
                            "layer `%s`: the manifest declares more than the image budget of %s "
                            "(max-image-size in agsx.conf, AGSX_MAX_IMAGE_SIZE)",
                            mf->layers[i].digest, m);
    }
    total += sz;
  }
  return 0;
}

static int pull_image(struct pull *p, const char *mbuf, size_t mlen, agsx_error_t *err) {
  struct agsx_manifest mf;
  if (agsx_manifest_parse(mbuf, mlen, &mf, err) < 0)
    return -1;
  _cleanup_free_ char *cbuf = NULL;
  size_t clen;
  struct agsx_image_config c = {0};
  bool have_c = false;
  char cdigest[AGSX_DIGEST_LEN], mdigest[AGSX_DIGEST_LEN];
  int rc = agsx_store_has_blob(p->store, mf.config.digest)
               ? agsx_store_read_blob(p->store, mf.config.digest, AGSX_IMAGE_JSON_MAX, &cbuf,
                                      &clen, err)
               : get_small_blob(&p->reg, &mf.config, &cbuf, &clen, err);
  if (rc < 0)
    agsx_error_wrap(err, "config");
  if (rc == 0 && (rc = agsx_image_config_parse(cbuf, clen, &c, err)) == 0)
    have_c = true;
  if (rc == 0)
    rc = check_platform(&c, err);
  if (rc == 0 && c.n_diff_ids != mf.n_layers)
    rc = agsx_error_set(err, 0, "the manifest has %zu layers but the config %zu diff_ids",
                        mf.n_layers, c.n_diff_ids);
  if (rc == 0)
    rc = check_declared_sizes(p, &mf, err);
  if (rc == 0)
    rc = download_layers(p, &mf, err);
  if (rc == 0)
    rc = stage_layers(p, &mf, &c, err);
  if (rc == 0)
    rc = agsx_store_stage_blob_mem(p->store, p->workfd, cbuf, clen, cdigest, err);
  if (rc == 0)
    rc = agsx_store_stage_blob_mem(p->store, p->workfd, mbuf, mlen, mdigest, err);
  if (have_c)
    agsx_image_config_clear(&c);
  agsx_manifest_clear(&mf);
  return rc;
}

/* Resolves REFERENCE to an image manifest, through indexes. */
static int resolve(struct pull *p, const struct agsx_image_ref *ref, char **ret_buf,
                   size_t *ret_len, char **ret_mt, struct agsx_pull_result *res,
                   agsx_error_t *err) {
  const char *reference = ref->digest ? ref->digest : ref->tag;
  if (get_manifest(&p->reg, reference, ref->digest, -1, ret_buf, ret_len, ret_mt, res->digest,
                   err) < 0)
    return -1;
  memcpy(res->manifest_digest, res->digest, AGSX_DIGEST_LEN);
  for (int depth = 0; agsx_media_type_is_index(*ret_mt); depth++) {
    if (depth >= NESTING_MAX)
      return agsx_error_set(err, 0, "image indexes nested too deeply");
    struct agsx_index ix;
    if (agsx_index_parse(*ret_buf, *ret_len, &ix, err) < 0)
      return -1;
    int sel = agsx_index_select_platform(&ix, err);
    struct agsx_descriptor d = {0};
    if (sel >= 0) {
      d = ix.manifests[sel];
      ix.manifests[sel] = (struct agsx_descriptor){0};
    }
    agsx_index_clear(&ix);
    if (sel < 0)
      return -1;
    if (d.size > (int64_t)AGSX_IMAGE_JSON_MAX) {
      agsx_descriptor_clear(&d);
      return agsx_error_set(err, 0, "the index declares a manifest larger than %u bytes",
                            (unsigned)AGSX_IMAGE_JSON_MAX);
    }
    free(*ret_buf);
    free(*ret_mt);
    *ret_buf = *ret_mt = NULL;
    int r = get_manifest(&p->reg, d.digest, d.digest, d.size, ret_buf, ret_len, ret_mt,
                         res->manifest_digest, err);
    agsx_descriptor_clear(&d);
    if (r < 0)
      return -1;
  }
  if (!agsx_media_type_is_manifest(*ret_mt))
    return agsx_error_set(err, 0, "unsupported manifest media type `%.100s`", *ret_mt);
  return 0;
}

int agsx_pull_policy_parse(const char *s, enum agsx_pull_policy *ret, agsx_error_t *err) {
  static const char *const names[] = {"missing", "always", "never"};
  for (int i = 0; i < 3; i++)
    if (strcmp(s, names[i]) == 0) {
      *ret = (enum agsx_pull_policy)i;
      return 0;
    }
  return agsx_error_set_quiet(err, EINVAL, "invalid pull policy `%s` (missing, always or never)", s),
         -1;
}

int agsx_pull_policy_default(enum agsx_pull_policy *ret, agsx_error_t *err) {
  *ret = AGSX_PULL_MISSING;
  const char *e = getenv("AGSX_PULL");
  if (e && *e && agsx_pull_policy_parse(e, ret, err) < 0)
    return agsx_error_wrap(err, "AGSX_PULL");
  return 0;
}

void agsx_pull_result_clear(struct agsx_pull_result *r) {
  free(r->name);
  free(r->ref);
  memset(r, 0, sizeof(*r));
}

static int setup_registry(struct registry *reg, const struct agsx_image_ref *ref,
                          const struct agsx_pull_opts *o, agsx_error_t *err) {
  reg->domain = xstrdup(ref->domain);
  reg->path = xstrdup(ref->path);
  reg->host = xstrdup(strcmp(ref->domain, "docker.io") == 0 ? "registry-1.docker.io"
                                                            : ref->domain);
  reg->insecure = (o && o->insecure) || host_is_loopback(reg->host) ||
                  host_listed(reg->domain, getenv("AGSX_INSECURE_REGISTRIES"));
  find_cafile(reg);
  return load_credentials(reg, o ? o->authfile : NULL, err);
}

/* Partial downloads nobody resumed for a week are dropped (a pull holding
 * one has it locked). */
#define PARTIAL_MAX_AGE_SEC (7 * 86400)
static void clean_partials(int dirfd) {
  int dup = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
  _cleanup_dir_ DIR *d = dup >= 0 ? fdopendir(dup) : NULL;
  if (d == NULL) {
    if (dup >= 0)
      close(dup);
    return;
  }
  time_t now = time(NULL);
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    struct stat st;
    if (de->d_name[0] == '.' ||
        fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        now - st.st_mtime < PARTIAL_MAX_AGE_SEC)
      continue;
    _cleanup_close_ int fd =
        openat(dirfd, de->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0)
      unlinkat(dirfd, de->d_name, 0);
  }
}

static int do_pull(struct pull *p, const struct agsx_image_ref *ref, struct agsx_pull_result *res,
                   agsx_error_t *err) {
  if (ping(&p->reg, err) < 0)
    return -1;
  _cleanup_free_ char *mbuf = NULL, *mt = NULL;
  size_t mlen;
  if (resolve(p, ref, &mbuf, &mlen, &mt, res, err) < 0)
    return -1;
  if (mkdirat(p->store->rootfd, PARTIAL_DIR, 0700) < 0 && errno != EEXIST)
    return agsx_error_set(err, errno, "create `%s`", PARTIAL_DIR);
  p->partialfd = openat(p->store->rootfd, PARTIAL_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                                                            O_CLOEXEC);
  if (p->partialfd < 0)
    return agsx_error_set(err, errno, "open `%s`", PARTIAL_DIR);
  clean_partials(p->partialfd);
  _cleanup_free_ char *work = NULL;
  p->workfd = agsx_store_mkwork(p->store, "pull", &work, err);
  if (p->workfd < 0)
    return -1;
  int rc = pull_image(p, mbuf, mlen, err);
  if (rc == 0)
    rc = agsx_store_commit(p->store, p->workfd, err);
  struct agsx_descriptor md = {.media_type = mt, .size = (int64_t)mlen};
  memcpy(md.digest, res->manifest_digest, AGSX_DIGEST_LEN);
  if (rc == 0)
    rc = agsx_store_tag(p->store, ref->familiar, &md, err);
  agsx_error_t cerr = NULL;
  if (agsx_rm_rf_at(p->store->tmpfd, work, &cerr) < 0) {
    agsx_warn("%s", cerr->msg);
    agsx_error_free(&cerr);
  }
  return rc;
}

int agsx_pull(const char *root, const char *refstr, const struct agsx_pull_opts *o,
              struct agsx_pull_result *ret, agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  struct agsx_image_ref ref;
  if (agsx_image_ref_parse(refstr, &ref, err) < 0)
    return -1;
  struct pull p = {.o = o, .workfd = -1, .partialfd = -1};
  int rc = curl_load(err);
  if (rc == 0)
    rc = setup_registry(&p.reg, &ref, o, err);
  if (rc == 0)
    rc = agsx_store_open(root, true, &p.store, err);
  if (rc == 0) {
    agsx_error_t cerr = NULL;
    if (agsx_store_clean_tmp(p.store, &cerr) < 0) {
      agsx_warn("%s", cerr->msg);
      agsx_error_free(&cerr);
    }
    rc = do_pull(&p, &ref, ret, err);
  }
  if (rc == 0) {
    ret->ref = xstrdup(ref.familiar);
    ret->name = ref.digest ? xasprintf("%s/%s@%s", ref.domain, ref.path, ref.digest)
                           : xasprintf("%s/%s:%s", ref.domain, ref.path, ref.tag);
  } else {
    agsx_error_wrap(err, "pull `%s`", refstr);
  }
  agsx_closep(&p.workfd);
  agsx_closep(&p.partialfd);
  agsx_store_free(p.store);
  registry_clear(&p.reg);
  agsx_image_ref_clear(&ref);
  return rc;
}

/* ---- push ------------------------------------------------------------------------------------ */

void agsx_push_result_clear(struct agsx_push_result *r) {
  free(r->name);
  memset(r, 0, sizeof(*r));
}

/* HEAD the blob: 1 when the registry has it, 0 when not. */
static int blob_exists(struct registry *r, const struct agsx_descriptor *d, bool *ret,
                       agsx_error_t *err) {
  _cleanup_free_ char *url =
      xasprintf("%s://%s/v2/%s/blobs/%s", r->scheme, r->host, r->path, d->digest);
  struct req q = {.method = "HEAD", .max = 0, .body_fd = -1};
  struct xfer x;
  int st = api_req(r, url, &q, &x, err);
  if (st < 0)
    return -1;
  xfer_clear(&x);
  if (st != 200 && st != 404)
    return agsx_error_set(err, 0, "blob `%s`: HTTP %d to HEAD", d->digest, st);
  *ret = st == 200;
  return 0;
}

/* Where the registry's answer to a POST/PATCH says the upload goes on. */
static int upload_location(struct registry *r, struct xfer *x, char **ret, bool *ret_foreign,
                           agsx_error_t *err) {
  if (x->location == NULL)
    return agsx_error_set(err, 0, "upload: HTTP %ld without a Location", x->status);
  if (agsx_registry_resolve_location(x->url, x->location, ret, err) < 0)
    return agsx_error_wrap(err, "upload");
  char mine[AGSX_REGISTRY_ORIGIN_MAX], theirs[AGSX_REGISTRY_ORIGIN_MAX];
  _cleanup_free_ char *base = xasprintf("%s://%s/", r->scheme, r->host);
  if (agsx_registry_url_origin(base, mine, err) < 0 ||
      agsx_registry_url_origin(*ret, theirs, err) < 0) {
    free(steal_ptr(ret));
    return agsx_error_wrap(err, "upload");
  }
  if (strcmp(r->scheme, "https") == 0 && !agsx_str_has_prefix(theirs, "https:")) {
    free(steal_ptr(ret));
    return agsx_error_set(err, 0, "upload: the registry sent it to plain http");
  }
  *ret_foreign = strcmp(mine, theirs) != 0;
  return 0;
}

/* A monolithic upload: POST for a session, PUT of the whole blob with its
 * digest (OCI distribution spec, "POST then PUT"). */
static int upload_blob(struct registry *r, int fd, const struct agsx_descriptor *d,
                       agsx_error_t *err) {
  _cleanup_free_ char *url = xasprintf("%s://%s/v2/%s/blobs/uploads/", r->scheme, r->host, r->path);
  struct req post = {.method = "POST", .max = 1u << 20, .body_fd = -1, .body = ""};
  struct xfer x;
  int st = api_req(r, url, &post, &x, err);
  if (st < 0)
    return -1;
  _cleanup_free_ char *loc = NULL;
  bool foreign = false;
  int rc = st == 202 ? upload_location(r, &x, &loc, &foreign, err)
                     : agsx_error_set(err, 0, "start upload: HTTP %d", st);
  xfer_clear(&x);
  if (rc < 0)
    return -1;
  _cleanup_free_ char *put =
      xasprintf("%s%sdigest=%s", loc, strchr(loc, '?') ? "&" : "?", d->digest);
  struct req q = {.method = "PUT",
                  .content_type = "application/octet-stream",
                  .body_fd = fd,
                  .body_len = (size_t)d->size,
                  .max = 1u << 20,
                  .no_credentials = foreign};
  st = api_req(r, put, &q, &x, err);
  if (st < 0)
    return -1;
  xfer_clear(&x);
  if (st != 201)
    return agsx_error_set(err, 0, "upload: HTTP %d", st);
  return 0;
}

static int push_blob(struct registry *r, struct agsx_store *s, const struct agsx_descriptor *d,
                     agsx_error_t *err) {
  bool have;
  if (blob_exists(r, d, &have, err) < 0)
    return agsx_error_wrap(err, "blob `%s`", d->digest);
  if (have) {
    agsx_debug("blob %s: already in the registry", d->digest);
    return 0;
  }
  _cleanup_close_ int fd = agsx_store_open_blob(s, d->digest, err);
  if (fd < 0)
    return -1;
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size != d->size)
    return agsx_error_set(err, 0, "blob `%s` in the store is not its %lld bytes", d->digest,
                          (long long)d->size);
  if (upload_blob(r, fd, d, err) < 0)
    return agsx_error_wrap(err, "blob `%s`", d->digest);
  return 0;
}

static int put_manifest(struct registry *r, const char *tag, const char *mt, const char *buf,
                        size_t len, const char *digest, agsx_error_t *err) {
  _cleanup_free_ char *url =
      xasprintf("%s://%s/v2/%s/manifests/%s", r->scheme, r->host, r->path, tag);
  struct req q = {.method = "PUT",
                  .content_type = mt,
                  .body = buf,
                  .body_len = len,
                  .body_fd = -1,
                  .max = 1u << 20};
  struct xfer x;
  int st = api_req(r, url, &q, &x, err);
  if (st < 0)
    return -1;
  int rc = 0;
  if (st != 201 && st != 200)
    rc = agsx_error_set(err, 0, "manifest: HTTP %d%s%.200s", st, x.buf ? ": " : "",
                        x.buf ? x.buf : "");
  else if (x.content_digest && strcmp(x.content_digest, digest) != 0)
    rc = agsx_error_set(err, 0, "manifest: the registry stored digest `%.80s`, not `%s`",
                        x.content_digest, digest);
  xfer_clear(&x);
  return rc;
}

/* The manifest of IMAGE in the store: bytes, media type, parsed. */
static int read_local_manifest(struct agsx_store *s, const struct agsx_store_image *img,
                               char **ret_buf, size_t *ret_len, char **ret_mt,
                               struct agsx_manifest *ret_m, agsx_error_t *err) {
  if (agsx_store_read_blob(s, img->manifest.digest, AGSX_IMAGE_JSON_MAX, ret_buf, ret_len, err) <
      0)
    return -1;
  _cleanup_json_ yajl_val v = agsx_json_parse(*ret_buf, *ret_len, AGSX_IMAGE_JSON_MAX, err);
  if (v == NULL)
    return agsx_error_wrap(err, "manifest");
  const char *mt = agsx_json_get_string(v, "mediaType");
  if (mt == NULL)
    mt = img->manifest.media_type;
  if (mt == NULL || !agsx_media_type_is_manifest(mt))
    return agsx_error_set(err, 0, "manifest media type `%.100s` cannot be pushed",
                          mt ? mt : "");
  if (agsx_manifest_parse(*ret_buf, *ret_len, ret_m, err) < 0)
    return -1;
  *ret_mt = xstrdup(mt);
  return 0;
}

static int do_push(struct registry *reg, struct agsx_store *s, const struct agsx_store_image *img,
                   const char *tag, struct agsx_push_result *ret, agsx_error_t *err) {
  _cleanup_free_ char *mbuf = NULL, *mt = NULL;
  size_t mlen;
  struct agsx_manifest m;
  if (read_local_manifest(s, img, &mbuf, &mlen, &mt, &m, err) < 0)
    return -1;
  int rc = ping(reg, err);
  /* Layers first, the config last, then the manifest that names them. */
  for (size_t i = 0; rc == 0 && i < m.n_layers; i++)
    rc = push_blob(reg, s, &m.layers[i], err);
  if (rc == 0)
    rc = push_blob(reg, s, &m.config, err);
  if (rc == 0)
    rc = put_manifest(reg, tag, mt, mbuf, mlen, img->manifest.digest, err);
  if (rc == 0)
    memcpy(ret->digest, img->manifest.digest, AGSX_DIGEST_LEN);
  agsx_manifest_clear(&m);
  return rc;
}

int agsx_push(const char *root, const char *image, const char *dest,
              const struct agsx_push_opts *o, struct agsx_push_result *ret, agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  _cleanup_store_ struct agsx_store *s = NULL;
  struct agsx_store_image img = {0};
  struct agsx_image_ref ref = {0};
  struct registry reg = {.actions = "pull,push"};
  int rc = curl_load(err);
  if (rc == 0)
    rc = agsx_store_open(root, false, &s, err);
  if (rc == 0)
    rc = agsx_store_resolve(s, image, &img, err);
  if (rc == 0 && dest == NULL && (img.ref == NULL || strchr(img.ref, '@')))
    rc = agsx_error_set(err, 0, "image `%s` has no tag to push to: name a destination", image);
  if (rc == 0)
    rc = agsx_image_ref_parse(dest ? dest : img.ref, &ref, err);
  if (rc == 0 && ref.digest)
    rc = agsx_error_set(err, 0, "destination `%s` names a digest: push to a tag", dest);
  struct agsx_pull_opts po = {.authfile = o ? o->authfile : NULL, .insecure = o && o->insecure};
  if (rc == 0)
    rc = setup_registry(&reg, &ref, &po, err);
  if (rc == 0)
    rc = do_push(&reg, s, &img, ref.tag, ret, err);
  if (rc == 0)
    ret->name = xasprintf("%s/%s:%s", ref.domain, ref.path, ref.tag);
  else
    agsx_error_wrap(err, "push `%s`", image);
  free(img.ref);
  agsx_descriptor_clear(&img.manifest);
  agsx_image_ref_clear(&ref);
  registry_clear(&reg);
  return rc;
}
