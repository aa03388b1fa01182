/* agsx — api: Connect envelopes, codes, query strings, Basic auth, base64. */
#include "config.h"

#include "api/wire.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <string.h>
#include <strings.h>

void agsx_buf_add(struct agsx_buf *b, const void *data, size_t len) {
  if (len == 0)
    return;
  if (b->len + len > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + len)
      cap *= 2;
    b->p = xrealloc(b->p, cap);
    b->cap = cap;
  }
  memcpy(b->p + b->len, data, len);
  b->len += len;
}

void agsx_buf_clear(struct agsx_buf *b) {
  free(b->p);
  *b = (struct agsx_buf){0};
}

size_t agsx_buf_drain(struct agsx_buf *b, size_t *off, char *dst, size_t max) {
  size_t n = b->len - *off;
  if (n > max)
    n = max;
  memcpy(dst, b->p + *off, n);
  *off += n;
  if (*off == b->len)
    *off = b->len = 0;
  return n;
}

/* ---- Connect ---------------------------------------------------------------------------- */

int agsx_connect_envelope(const char *buf, size_t len, const char **ret_msg, size_t *ret_len,
                          agsx_error_t *err) {
  if (len < 5)
    return agsx_error_set(err, EINVAL, "the request is not a Connect envelope");
  const unsigned char *u = (const unsigned char *)buf;
  if (u[0] & AGSX_CONNECT_FLAG_COMPRESSED)
    return agsx_error_set(err, EINVAL, "compressed Connect messages are not supported");
  if (u[0] != 0)
    return agsx_error_set(err, EINVAL, "unexpected Connect envelope flags 0x%02x", u[0]);
  uint32_t n = (uint32_t)u[1] << 24 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 8 | u[4];
  if ((size_t)n != len - 5)
    return agsx_error_set(err, EINVAL, "the Connect envelope says %u bytes, the body has %zu", n,
                          len - 5);
  *ret_msg = buf + 5;
  *ret_len = n;
  return 0;
}

void agsx_connect_frame(struct agsx_buf *out, unsigned flags, const char *json, size_t len) {
  unsigned char h[5] = {(unsigned char)flags, (unsigned char)(len >> 24),
                        (unsigned char)(len >> 16), (unsigned char)(len >> 8), (unsigned char)len};
  agsx_buf_add(out, h, sizeof(h));
  agsx_buf_add(out, json, len);
}

static const struct {
  const char *name;
  int status;
} codes[] = {
    [AGSX_CONNECT_CANCELED] = {"canceled", 499},
    [AGSX_CONNECT_UNKNOWN] = {"unknown", 500},
    [AGSX_CONNECT_INVALID_ARGUMENT] = {"invalid_argument", 400},
    [AGSX_CONNECT_DEADLINE_EXCEEDED] = {"deadline_exceeded", 504},
    [AGSX_CONNECT_NOT_FOUND] = {"not_found", 404},
    [AGSX_CONNECT_ALREADY_EXISTS] = {"already_exists", 409},
    [AGSX_CONNECT_PERMISSION_DENIED] = {"permission_denied", 403},
    [AGSX_CONNECT_RESOURCE_EXHAUSTED] = {"resource_exhausted", 429},
    [AGSX_CONNECT_FAILED_PRECONDITION] = {"failed_precondition", 400},
    [AGSX_CONNECT_ABORTED] = {"aborted", 409},
    [AGSX_CONNECT_OUT_OF_RANGE] = {"out_of_range", 400},
    [AGSX_CONNECT_UNIMPLEMENTED] = {"unimplemented", 501},
    [AGSX_CONNECT_INTERNAL] = {"internal", 500},
    [AGSX_CONNECT_UNAVAILABLE] = {"unavailable", 503},
    [AGSX_CONNECT_DATA_LOSS] = {"data_loss", 500},
    [AGSX_CONNECT_UNAUTHENTICATED] = {"unauthenticated", 401},
};

const char *agsx_connect_code_name(enum agsx_connect_code c) {
  return (size_t)c < AGSX_ARRAY_SIZE(codes) ? codes[c].name : "unknown";
}

int agsx_connect_code_status(enum agsx_connect_code c) {
  return (size_t)c < AGSX_ARRAY_SIZE(codes) ? codes[c].status : 500;
}

enum agsx_connect_code agsx_connect_code_of_errno(int e) {
  switch (e) {
  case ENOENT: return AGSX_CONNECT_NOT_FOUND;
  case EEXIST: return AGSX_CONNECT_ALREADY_EXISTS;
  case EINVAL:
  case ENOTDIR:
  case EISDIR:
  case ELOOP:
  case ENAMETOOLONG:
  case E2BIG: return AGSX_CONNECT_INVALID_ARGUMENT;
  case EPERM:
  case EACCES: return AGSX_CONNECT_PERMISSION_DENIED;
  case ENOSPC:
  case EDQUOT:
  case EMFILE:
  case ENFILE:
  case EAGAIN: return AGSX_CONNECT_RESOURCE_EXHAUSTED;
  case EKEYREJECTED: return AGSX_CONNECT_UNAUTHENTICATED;
  case ESRCH:
  case ECONNREFUSED: return AGSX_CONNECT_UNAVAILABLE;
  case ETIMEDOUT: return AGSX_CONNECT_DEADLINE_EXCEEDED;
  case EPIPE: return AGSX_CONNECT_FAILED_PRECONDITION;
  default: return AGSX_CONNECT_INTERNAL;
  }
}

/* ---- query strings ------------------------------------------------------------------------ */

static int hexval(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  c = (char)tolower((unsigned char)c);
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

char *agsx_url_decode(const char *s, size_t n, bool plus_space) {
  char *out = xmalloc(n + 1), *o = out;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (c == '%') {
      int a = i + 1 < n ? hexval(s[i + 1]) : -1, b = i + 2 < n ? hexval(s[i + 2]) : -1;
      if (a < 0 || b < 0 || (a == 0 && b == 0)) {
        free(out);
        return NULL;
      }
      *o++ = (char)(a << 4 | b);
      i += 2;
    } else if (c == '\0') {
      free(out);
      return NULL;
    } else {
      *o++ = plus_space && c == '+' ? ' ' : c;
    }
  }
  *o = '\0';
  return out;
}

int agsx_api_metadata_filter(const char *q, char ***ret, agsx_error_t *err) {
  *ret = NULL;
  _cleanup_strv_ char **v = NULL;
  size_t n = 0;
  for (const char *p = q; *p;) {
    const char *amp = strchr(p, '&');
    size_t len = amp ? (size_t)(amp - p) : strlen(p);
    if (len > 0) {
      if (++n > AGSX_API_FILTER_MAX)
        return agsx_error_set(err, EINVAL, "a metadata filter of at most %d pairs",
                              AGSX_API_FILTER_MAX);
      const char *eq = memchr(p, '=', len);
      if (eq == NULL || eq == p)
        return agsx_error_set(err, EINVAL, "invalid metadata filter `%.*s` (want key=value)",
                              (int)(len > 64 ? 64 : len), p);
      /* The form level, then the SDK's own encodeURIComponent of each part. */
      _cleanup_free_ char *k1 = agsx_url_decode(p, (size_t)(eq - p), true);
      _cleanup_free_ char *v1 = agsx_url_decode(eq + 1, len - (size_t)(eq - p) - 1, true);
      _cleanup_free_ char *k2 = k1 ? agsx_url_decode(k1, strlen(k1), false) : NULL;
      _cleanup_free_ char *v2 = v1 ? agsx_url_decode(v1, strlen(v1), false) : NULL;
      if (k2 == NULL || v2 == NULL || *k2 == '\0' || strchr(k2, '='))
        return agsx_error_set(err, EINVAL, "invalid metadata filter `%.*s`",
                              (int)(len > 64 ? 64 : len), p);
      _cleanup_free_ char *kv = xasprintf("%s=%s", k2, v2);
      agsx_strv_push(&v, kv);
    }
    if (amp == NULL)
      break;
    p = amp + 1;
  }
  *ret = steal_ptr(&v);
  return 0;
}

bool agsx_api_list_has(const char *list, const char *word) {
  size_t wl = strlen(word);
  for (const char *p = list; p && *p;) {
    const char *c = strchr(p, ',');
    size_t len = c ? (size_t)(c - p) : strlen(p);
    if (len == wl && strncmp(p, word, wl) == 0)
      return true;
    p = c ? c + 1 : NULL;
  }
  return false;
}

/* ---- times and list positions ------------------------------------------------------------- */

int agsx_api_time_parse(const char *s, int64_t *ret_ns) {
  int64_t sec;
  if (s == NULL || strlen(s) > 64 || agsx_parse_rfc3339(s, &sec) < 0 || sec < 0 ||
      sec > INT64_MAX / 1000000000LL - 1)
    return -1;
  /* agsx_parse_rfc3339 skips the fraction: its first nine digits here. */
  int64_t frac = 0;
  const char *dot = strchr(s, '.');
  if (dot) {
    int digits = 0;
    for (const char *p = dot + 1; isdigit((unsigned char)*p); p++)
      if (digits < 9) {
        frac = frac * 10 + (*p - '0');
        digits++;
      }
    for (; digits < 9; digits++)
      frac *= 10;
  }
  *ret_ns = sec * 1000000000LL + frac;
  return 0;
}

void agsx_api_list_token(int64_t started_ns, const char *id,
                         char ret[AGSX_API_LIST_TOKEN_LEN + 1]) {
  snprintf(ret, AGSX_API_LIST_TOKEN_LEN + 1, "%016llx%.32s", (unsigned long long)started_ns, id);
}

int agsx_api_list_token_parse(const char *token, int64_t *ret_ns, char ret_id[33]) {
  if (token == NULL || strlen(token) != AGSX_API_LIST_TOKEN_LEN ||
      strspn(token, "0123456789abcdef") != AGSX_API_LIST_TOKEN_LEN)
    return -1;
  uint64_t ns = 0;
  for (size_t i = 0; i < 16; i++)
    ns = ns << 4 |
         (uint64_t)(isdigit((unsigned char)token[i]) ? token[i] - '0' : token[i] - 'a' + 10);
  if (ns > INT64_MAX)
    return -1;
  *ret_ns = (int64_t)ns;
  memcpy(ret_id, token + 16, 32);
  ret_id[32] = '\0';
  return 0;
}

/* ---- users --------------------------------------------------------------------------------- */

bool agsx_api_user_is_valid(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > AGSX_API_USER_MAX || s[0] == '-')
    return false;
  for (size_t i = 0; i < n; i++)
    if (!(isalnum((unsigned char)s[i]) || s[i] == '.' || s[i] == '_' || s[i] == '-'))
      return false;
  return true;
}

int agsx_basic_auth_user(const char *h, char **ret_user, agsx_error_t *err) {
  *ret_user = NULL;
  if (strncasecmp(h, "Basic ", 6) != 0)
    return agsx_error_set(err, EINVAL, "only Basic authorization is supported");
  h += 6;
  while (*h == ' ')
    h++;
  _cleanup_free_ char *dec = NULL;
  size_t len;
  if (agsx_base64_decode(h, 2 * AGSX_API_USER_MAX, &dec, &len, err) < 0)
    return agsx_error_wrap(err, "the Basic authorization header");
  char *colon = memchr(dec, ':', len);
  if (colon == NULL)
    return agsx_error_set(err, EINVAL, "the Basic authorization has no `user:` part");
  *colon = '\0';
  if (!agsx_api_user_is_valid(dec))
    return agsx_error_set(err, EINVAL, "invalid user name in the Basic authorization");
  *ret_user = xstrdup(dec);
  return 0;
}

/* ---- base64 --------------------------------------------------------------------------------- */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *agsx_base64_encode(const void *buf, size_t len) {
  const unsigned char *u = buf;
  char *out = xmalloc((len + 2) / 3 * 4 + 1), *o = out;
  size_t i = 0;
  for (; i + 2 < len; i += 3) {
    uint32_t v = (uint32_t)u[i] << 16 | (uint32_t)u[i + 1] << 8 | u[i + 2];
    *o++ = b64[v >> 18];
    *o++ = b64[(v >> 12) & 63];
    *o++ = b64[(v >> 6) & 63];
    *o++ = b64[v & 63];
  }
  if (i < len) {
    uint32_t v = (uint32_t)u[i] << 16 | (i + 1 < len ? (uint32_t)u[i + 1] << 8 : 0);
    *o++ = b64[v >> 18];
    *o++ = b64[(v >> 12) & 63];
    *o++ = i + 1 < len ? b64[(v >> 6) & 63] : '=';
    *o++ = '=';
  }
  *o = '\0';
  return out;
}

static int b64val(char c) {
  if (c >= 'A' && c <= 'Z')
    return c - 'A';
  if (c >= 'a' && c <= 'z')
    return c - 'a' + 26;
  if (c >= '0' && c <= '9')
    return c - '0' + 52;
  if (c == '+' || c == '-')
    return 62;
  if (c == '/' || c == '_')
    return 63;
  return -1;
}

int agsx_base64_decode(const char *s, size_t max, char **ret, size_t *ret_len, agsx_error_t *err) {
  *ret = NULL;
  size_t n = strlen(s);
  while (n > 0 && s[n - 1] == '=')
    n--;
  if (n % 4 == 1 || strlen(s) - n > 2)
    return agsx_error_set(err, EINVAL, "invalid base64");
  size_t outlen = n / 4 * 3 + (n % 4 ? n % 4 - 1 : 0);
  if (outlen > max)
    return agsx_error_set(err, E2BIG, "more than %zu bytes", max);
  unsigned char *out = xmalloc(outlen + 1);
  size_t o = 0;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; i++) {
    int v = b64val(s[i]);
    if (v < 0) {
      free(out);
      return agsx_error_set(err, EINVAL, "invalid base64");
    }
    acc = acc << 6 | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (unsigned char)(acc >> bits);
    }
  }
  out[o] = '\0';
  *ret = (char *)out;
  *ret_len = o;
  return 0;
}

/* ---- Host and Origin ---------------------------------------------------------------------- */

/* A port after a host: 1 to 5 digits, 0 to 65535. */
static bool port_ok(const char *s, size_t n) {
  if (n == 0 || n > 5)
    return false;
  unsigned long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return false;
    v = v * 10 + (unsigned long)(s[i] - '0');
  }
  return v <= 65535;
}

/* S[0..N) as RFC 3986's host: "[v6]" (the brackets dropped), or a name or
 * IPv4 address of letters, digits, '-', '.', '_' (lowercased; one final
 * dot, a fully qualified name's, dropped). */
static int host_part(const char *s, size_t n, char ret[static AGSX_API_HOST_MAX + 1],
                     agsx_error_t *err) {
  if (n > 0 && s[0] == '[') {
    if (n < 3 || s[n - 1] != ']' || n - 2 > AGSX_API_HOST_MAX)
      return agsx_error_set_quiet(err, EINVAL, "invalid IPv6 host");
    char v6[AGSX_API_HOST_MAX + 1];
    memcpy(v6, s + 1, n - 2);
    v6[n - 2] = '\0';
    struct in6_addr a;
    if (inet_pton(AF_INET6, v6, &a) != 1)
      return agsx_error_set_quiet(err, EINVAL, "invalid IPv6 host");
    inet_ntop(AF_INET6, &a, ret, AGSX_API_HOST_MAX + 1);
    return 0;
  }
  if (n > 0 && s[n - 1] == '.')
    n--;
  if (n == 0 || n > AGSX_API_HOST_MAX)
    return agsx_error_set_quiet(err, EINVAL, "empty or overlong host");
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!isalnum(c) && c != '-' && c != '.' && c != '_')
      return agsx_error_set_quiet(err, EINVAL, "invalid character in host");
    if (c == '.' && (i == 0 || s[i - 1] == '.'))
      return agsx_error_set_quiet(err, EINVAL, "empty label in host");
    ret[i] = (char)tolower(c);
  }
  ret[n] = '\0';
  return 0;
}

int agsx_api_host_parse(const char *value, char ret[static AGSX_API_HOST_MAX + 1],
                        agsx_error_t *err) {
  size_t n = strlen(value);
  /* The port is what follows the last colon after any "]". */
  const char *close = memchr(value, ']', n);
  const char *colon = strrchr(close ? close : value, ':');
  size_t hn = colon ? (size_t)(colon - value) : n;
  if (colon && !port_ok(colon + 1, n - hn - 1))
    return agsx_error_set_quiet(err, EINVAL, "invalid port in host");
  if (close && close != value + hn - 1)
    return agsx_error_set_quiet(err, EINVAL, "invalid IPv6 host");
  return host_part(value, hn, ret, err);
}

int agsx_api_origin_parse(const char *value, char ret[static AGSX_API_HOST_MAX + 1],
                          agsx_error_t *err) {
  size_t skip = strncasecmp(value, "http://", 7) == 0    ? 7
                : strncasecmp(value, "https://", 8) == 0 ? 8
                                                         : 0;
  if (skip == 0) /* "null" (a sandboxed frame, a file:), other schemes */
    return agsx_error_set_quiet(err, EINVAL, "not an http(s) origin");
  if (strpbrk(value + skip, "/?#@\\"))
    return agsx_error_set_quiet(err, EINVAL, "an origin has no path, query or user");
  return agsx_api_host_parse(value + skip, ret, err);
}

/* A as an address (IPv4-mapped IPv6 taken as IPv4): its family, 0 for a name. */
static int ip_of(const char *s, unsigned char out[16]) {
  struct in6_addr a6;
  if (inet_pton(AF_INET, s, out) == 1)
    return AF_INET;
  if (inet_pton(AF_INET6, s, &a6) != 1)
    return 0;
  if (IN6_IS_ADDR_V4MAPPED(&a6)) {
    memcpy(out, a6.s6_addr + 12, 4);
    return AF_INET;
  }
  memcpy(out, a6.s6_addr, 16);
  return AF_INET6;
}

/* HOST is NAME, or one label below it (LABEL.NAME). */
static bool name_or_below(const char *host, const char *name) {
  size_t h = strlen(host), n = strlen(name);
  if (h == n)
    return strcasecmp(host, name) == 0;
  if (h < n + 2 || host[h - n - 1] != '.' || strcasecmp(host + h - n, name) != 0)
    return false;
  return memchr(host, '.', h - n - 1) == NULL;
}

bool agsx_api_host_allowed(const char *host, const char *local, char *const *names) {
  unsigned char a[16], b[16];
  int fa = ip_of(host, a);
  if (fa) {
    if (local && ip_of(local, b) == fa && memcmp(a, b, fa == AF_INET ? 4 : 16) == 0)
      return true;
    for (size_t i = 0; names && names[i]; i++)
      if (ip_of(names[i], b) == fa && memcmp(a, b, fa == AF_INET ? 4 : 16) == 0)
        return true;
    return false;
  }
  if (name_or_below(host, "localhost"))
    return true;
  for (size_t i = 0; names && names[i]; i++)
    if (!ip_of(names[i], b) && name_or_below(host, names[i]))
      return true;
  return false;
}

/* ---- a request's head ---- */

static bool is_tchar(unsigned char c) { return isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c)); }

/* The request line: METHOD SP TARGET SP HTTP/1.x. */
static bool request_line_ok(const char *s, size_t n) {
  size_t m = 0;
  while (m < n && is_tchar((unsigned char)s[m]))
    m++;
  if (m == 0 || m >= n || s[m] != ' ' || n < m + 1 + 1 + 9)
    return false;
  const char *v = s + n - 9;
  if (memcmp(v, " HTTP/1.", 8) != 0 || (v[8] != '0' && v[8] != '1'))
    return false;
  for (const char *t = s + m + 1; t < v; t++)
    if ((unsigned char)*t <= ' ' || *t == 0x7f)
      return false;
  return true;
}

int agsx_api_head_scan(const char *buf, size_t len, struct agsx_api_head *ret, agsx_error_t *err) {
  size_t lim = len < AGSX_API_HEAD_MAX ? len : AGSX_API_HEAD_MAX;
  bool have_host = false, have_origin = false, have_traffic = false;
  ret->host[0] = ret->origin[0] = ret->traffic[0] = '\0';
  for (size_t pos = 0, line = 0; pos < lim; line++) {
    const char *nl = memchr(buf + pos, '\n', lim - pos);
    if (nl == NULL)
      break;
    const char *s = buf + pos;
    size_t end = (size_t)(nl - buf), n = end - pos;
    if (n > 0 && s[n - 1] == '\r')
      n--;
    if (memchr(s, '\0', n))
      return agsx_error_set_quiet(err, EINVAL, "a NUL in the request's head");
    pos = end + 1;
    if (line == 0) {
      if (!request_line_ok(s, n))
        return agsx_error_set_quiet(err, EINVAL, "not an HTTP/1.x request line");
      continue;
    }
    if (n == 0) {
      ret->len = pos;
      return 1;
    }
    size_t k = 0;
    while (k < n && is_tchar((unsigned char)s[k]))
      k++;
    if (k == 0 || k >= n || s[k] != ':')
      return agsx_error_set_quiet(err, EINVAL, "a header line without a name and a colon");
    size_t v = k + 1, w = n;
    while (v < w && (s[v] == ' ' || s[v] == '\t'))
      v++;
    while (w > v && (s[w - 1] == ' ' || s[w - 1] == '\t'))
      w--;
    char *dst = NULL;
    bool *seen = NULL;
    if (k == 4 && strncasecmp(s, "host", 4) == 0)
      dst = ret->host, seen = &have_host;
    else if (k == 6 && strncasecmp(s, "origin", 6) == 0)
      dst = ret->origin, seen = &have_origin;
    else if (k == 24 && strncasecmp(s, "e2b-traffic-access-token", 24) == 0)
      dst = ret->traffic, seen = &have_traffic;
    if (dst == NULL)
      continue;
    if (*seen)
      return agsx_error_set_quiet(err, EINVAL, "a repeated %.*s header", (int)k, s);
    if (w - v > AGSX_API_HEAD_VALUE_MAX)
      return agsx_error_set_quiet(err, EINVAL, "an overlong %.*s header", (int)k, s);
    memcpy(dst, s + v, w - v);
    dst[w - v] = '\0';
    *seen = true;
  }
  if (len >= AGSX_API_HEAD_MAX)
    return agsx_error_set_quiet(err, EMSGSIZE, "a request head over %d bytes", AGSX_API_HEAD_MAX);
  return 0;
}

int agsx_api_port_host(const char *host, unsigned *ret_port, char ret_id[static 33],
                       agsx_error_t *err) {
  const char *dot = strchr(host, '.');
  const char *dash = dot ? memchr(host, '-', (size_t)(dot - host)) : NULL;
  if (dash == NULL || dash == host || dash - host > 5 || host[0] == '0')
    return agsx_error_set_quiet(err, EINVAL, "not a sandbox port's host (PORT-ID.DOMAIN)");
  unsigned port = 0;
  for (const char *p = host; p < dash; p++) {
    if (!isdigit((unsigned char)*p))
      return agsx_error_set_quiet(err, EINVAL, "not a sandbox port's host (PORT-ID.DOMAIN)");
    port = port * 10 + (unsigned)(*p - '0');
  }
  size_t idn = (size_t)(dot - dash - 1);
  if (port == 0 || port > 65535 || (idn != 20 && idn != 32))
    return agsx_error_set_quiet(err, EINVAL, "not a sandbox port's host (PORT-ID.DOMAIN)");
  for (size_t i = 0; i < idn; i++) {
    unsigned char c = (unsigned char)dash[1 + i];
    if (!isdigit(c) && !(c >= 'a' && c <= 'z'))
      return agsx_error_set_quiet(err, EINVAL, "not a sandbox port's host (PORT-ID.DOMAIN)");
  }
  memcpy(ret_id, dash + 1, idn);
  ret_id[idn] = '\0';
  *ret_port = port;
  return 0;
}
