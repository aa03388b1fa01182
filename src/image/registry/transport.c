/* agsx — registry: one registry over HTTP: requests, redirects and the origin
 * rule for credentials, authentication after a 401, the /v2/ ping. */
#include "config.h"

#include "image/registry/registry-internal.h"

#include "image/image.h"
#include "image/store.h"
#include "util/json.h"

#include <ctype.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

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

void agsx_registry_clear(struct registry *r) {
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

static void xfer_free_headers(struct xfer *x) {
  free(x->challenge);
  free(x->content_type);
  free(x->content_range);
  free(x->location);
  free(x->content_digest);
  x->challenge = x->content_type = x->content_range = x->location = x->content_digest = NULL;
}

void agsx_registry_xfer_clear(struct xfer *x) {
  if (x->h)
    agsx_curl.easy_cleanup(x->h);
  if (x->hdrs)
    agsx_curl.slist_free_all(x->hdrs);
  xfer_free_headers(x);
  free(x->buf);
  x->h = NULL;
  x->hdrs = NULL;
  x->buf = NULL;
}

/* Readies X for the next hop of a redirect: a new handle, no response. */
void agsx_registry_xfer_reset_hop(struct xfer *x) {
  if (x->h)
    agsx_curl.easy_cleanup(x->h);
  if (x->hdrs)
    agsx_curl.slist_free_all(x->hdrs);
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

size_t agsx_registry_on_data_file(char *data, size_t size, size_t nmemb, void *p) {
  struct xfer *x = p;
  size_t n = size * nmemb;
  if (!x->started) {
    long code = 0;
    agsx_curl.easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &code);
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

int agsx_registry_xfer_setup(struct xfer *x, struct registry *r, const char *accept,
                             agsx_error_t *err) {
  x->reg = r;
  x->h = agsx_curl.easy_init();
  if (x->h == NULL)
    return agsx_error_set(err, ENOMEM, "curl_easy_init");
  CURL *h = x->h;
  agsx_curl.easy_setopt(h, CURLOPT_URL, x->url);
  agsx_curl.easy_setopt(h, CURLOPT_ERRORBUFFER, x->errbuf);
  agsx_curl.easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  agsx_curl.easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  /* Redirects (blob storage) are followed by agsx_registry_xfer_redirect, which decides
   * what credentials go along: curl's own rules depend on its version
   * (before 7.83 it sent them to another port of the same host). */
  agsx_curl.easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  agsx_curl.easy_setopt(h, CURLOPT_UNRESTRICTED_AUTH, 0L);
  agsx_curl.easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 30L);
  agsx_curl.easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  agsx_curl.easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 60L);
  agsx_curl.easy_setopt(h, CURLOPT_USERAGENT, "agsx/" PACKAGE_VERSION);
  agsx_curl.easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  agsx_curl.easy_setopt(h, CURLOPT_HEADERDATA, x);
  if (r->cafile)
    agsx_curl.easy_setopt(h, CURLOPT_CAINFO, r->cafile);
  if (r->insecure && r->cafile == NULL) {
    agsx_curl.easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
    agsx_curl.easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (accept) {
    _cleanup_free_ char *a = xasprintf("Accept: %s", accept);
    x->hdrs = agsx_curl.slist_append(x->hdrs, a);
  }
  if (r->authz && !x->foreign)
    x->hdrs = agsx_curl.slist_append(x->hdrs, r->authz);
  if (x->hdrs)
    agsx_curl.easy_setopt(h, CURLOPT_HTTPHEADER, x->hdrs);
  return 0;
}

int agsx_registry_curl_error(struct xfer *x, CURLcode c, agsx_error_t *err) {
  return agsx_error_set(err, 0, "%s: %s", x->url,
                        x->errbuf[0] ? x->errbuf : agsx_curl.easy_strerror(c));
}

static bool is_redirect(long code) {
  return code == 301 || code == 302 || code == 303 || code == 307 || code == 308;
}

/* After a response: when it is a redirect, points X at its target and
 * returns 1 (the caller sends the request again); 0 when it is none; -1
 * when it is refused (too many, not http(s), https down to http). */
int agsx_registry_xfer_redirect(struct xfer *x, agsx_error_t *err) {
  long code = 0;
  char *to = NULL;
  agsx_curl.easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &code);
  if (!is_redirect(code) || agsx_curl.easy_getinfo(x->h, CURLINFO_REDIRECT_URL, &to) != CURLE_OK ||
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
int agsx_registry_xfer_begin(struct xfer *x, const char *url, bool foreign, agsx_error_t *err) {
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

/* The method and body of Q on X's handle, after agsx_registry_xfer_setup. */
static void set_method(struct xfer *x, const struct req *q) {
  CURL *h = x->h;
  const char *m = q->method ? q->method : "GET";
  x->q = q;
  x->body_off = 0;
  if (strcmp(m, "HEAD") == 0) {
    agsx_curl.easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (strcmp(m, "POST") == 0 || strcmp(m, "PUT") == 0) {
    agsx_curl.easy_setopt(h, CURLOPT_UPLOAD, 1L);
    agsx_curl.easy_setopt(h, CURLOPT_READFUNCTION, on_read);
    agsx_curl.easy_setopt(h, CURLOPT_READDATA, x);
    agsx_curl.easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)q->body_len);
    agsx_curl.easy_setopt(h, CURLOPT_CUSTOMREQUEST, m);
    /* no 100-continue round trip: registries answer at once */
    x->hdrs = agsx_curl.slist_append(x->hdrs, "Expect:");
  }
  if (q->content_type) {
    _cleanup_free_ char *ct = xasprintf("Content-Type: %s", q->content_type);
    x->hdrs = agsx_curl.slist_append(x->hdrs, ct);
  }
  if (x->hdrs)
    agsx_curl.easy_setopt(h, CURLOPT_HTTPHEADER, x->hdrs);
}

/* Sends Q to URL, the response body into memory (at most Q->max bytes);
 * GET and HEAD follow redirects. Returns the HTTP status of the last
 * response. */
static int request(struct registry *r, const char *url, const struct req *q, struct xfer *x,
                   agsx_error_t *err) {
  memset(x, 0, sizeof(*x));
  x->fd = -1;
  x->max = q->max;
  bool follow =
      q->method == NULL || strcmp(q->method, "GET") == 0 || strcmp(q->method, "HEAD") == 0;
  int rc = agsx_registry_xfer_begin(x, url, q->no_credentials, err);
  while (rc == 0) {
    if (agsx_registry_xfer_setup(x, r, q->accept, err) < 0) {
      rc = -1;
      break;
    }
    set_method(x, q);
    agsx_curl.easy_setopt(x->h, CURLOPT_WRITEFUNCTION, on_data_mem);
    agsx_curl.easy_setopt(x->h, CURLOPT_WRITEDATA, x);
    CURLcode c = agsx_curl.easy_perform(x->h);
    if (x->too_big)
      rc = agsx_error_set(err, 0, "%s: response larger than %zu bytes", x->url, q->max);
    else if (c != CURLE_OK)
      rc = agsx_registry_curl_error(x, c, err);
    int rd = rc == 0 && follow ? agsx_registry_xfer_redirect(x, err) : 0;
    if (rd <= 0) {
      rc = rd < 0 ? -1 : rc;
      break;
    }
    agsx_registry_xfer_reset_hop(x);
  }
  if (rc < 0) {
    agsx_registry_xfer_clear(x); /* callers own X only on success */
    return -1;
  }
  agsx_curl.easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &x->status);
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
    basic = agsx_registry_b64encode(up, strlen(up));
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
    if (c.realm == NULL ||
        !(agsx_str_has_prefix(c.realm, "https://") || agsx_str_has_prefix(c.realm, "http://"))) {
      rc = agsx_error_set(err, 0, "bearer challenge without an http(s) realm");
    } else if (agsx_str_has_prefix(c.realm, "http://") && strcmp(r->scheme, "https") == 0) {
      rc = agsx_error_set(err, 0, "refusing a plain http token realm for an https registry");
    } else {
      CURL *e = agsx_curl.easy_init();
      _cleanup_free_ char *scope =
          xasprintf("repository:%s:%s", r->path, r->actions ? r->actions : "pull");
      char *es = agsx_curl.easy_escape(e, scope, 0);
      char *esv = c.service ? agsx_curl.easy_escape(e, c.service, 0) : NULL;
      _cleanup_free_ char *url =
          xasprintf("%s%sscope=%s%s%s", c.realm, strchr(c.realm, '?') ? "&" : "?", es,
                    esv ? "&service=" : "", esv ? esv : "");
      agsx_curl.free(es);
      agsx_curl.free(esv);
      agsx_curl.easy_cleanup(e);
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
      agsx_registry_xfer_clear(&x);
    }
  } else {
    rc = agsx_error_set(err, 0, "unsupported authentication scheme `%.40s`", c.scheme);
  }
  agsx_auth_challenge_clear(&c);
  return rc;
}

/* Sends Q to URL of the registry, authenticating once on 401. */
int agsx_registry_api_req(struct registry *r, const char *url, const struct req *q, struct xfer *x,
                          agsx_error_t *err) {
  int st = request(r, url, q, x, err);
  if ((st == 401 || st == 403) && x->foreign) {
    /* A redirect target (object storage) asking for credentials gets none,
     * nor does the token server it names. */
    char origin[AGSX_REGISTRY_ORIGIN_MAX];
    if (agsx_registry_url_origin(x->url, origin, NULL) < 0)
      snprintf(origin, sizeof(origin), "?");
    agsx_registry_xfer_clear(x);
    return agsx_error_set(err, 0,
                          "%s: HTTP %d from `%s`, where the registry redirected; credentials go "
                          "only to the registry",
                          url, st, origin);
  }
  if (st == 401 && !r->tried_auth) {
    _cleanup_free_ char *ch = x->challenge ? xstrdup(x->challenge) : NULL;
    agsx_registry_xfer_clear(x);
    if (authenticate(r, ch, err) < 0)
      return -1;
    st = request(r, url, q, x, err);
  }
  if (st == 401 || st == 403) {
    agsx_registry_xfer_clear(x);
    return agsx_error_set(err, 0, "%s: access denied (HTTP %d)%s", r->path, st,
                          r->user ? ": check the credentials" : ": no credentials given");
  }
  return st;
}

/* GET a registry API path. */
int agsx_registry_api_get(struct registry *r, const char *path, const char *accept, size_t max,
                          struct xfer *x, agsx_error_t *err) {
  _cleanup_free_ char *url = xasprintf("%s://%s%s", r->scheme, r->host, path);
  struct req q = {.accept = accept, .max = max, .body_fd = -1};
  return agsx_registry_api_req(r, url, &q, x, err);
}

/* Finds the scheme: https, or for an insecure registry http when https
 * does not answer (as Docker does), and authenticates if /v2/ asks. */
int agsx_registry_ping(struct registry *r, agsx_error_t *err) {
  struct xfer x;
  r->scheme = "https";
  agsx_error_t perr = NULL;
  int st = agsx_registry_api_get(r, "/v2/", "application/json", 1u << 20, &x, &perr);
  if (st < 0 && r->insecure && !r->tried_auth) {
    agsx_debug("%s: https failed (%s), trying http", r->host, perr->msg);
    agsx_error_free(&perr);
    r->scheme = "http";
    st = agsx_registry_api_get(r, "/v2/", "application/json", 1u << 20, &x, &perr);
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
  agsx_registry_xfer_clear(&x);
  /* 404: not a v2 registry root, but some proxies; the manifest will tell. */
  if (st != 200 && st != 404)
    return agsx_error_set(err, 0, "%s://%s/v2/: HTTP %d", r->scheme, r->host, st);
  return 0;
}

int agsx_registry_setup(struct registry *reg, const struct agsx_image_ref *ref,
                        const struct agsx_pull_opts *o, agsx_error_t *err) {
  reg->domain = xstrdup(ref->domain);
  reg->path = xstrdup(ref->path);
  reg->host = xstrdup(strcmp(ref->domain, "docker.io") == 0 ? "registry-1.docker.io" : ref->domain);
  reg->insecure = (o && o->insecure) || host_is_loopback(reg->host) ||
                  agsx_list_has(getenv("AGSX_INSECURE_REGISTRIES"), reg->domain, ", ");
  find_cafile(reg);
  return agsx_registry_load_credentials(reg, o ? o->authfile : NULL, err);
}
