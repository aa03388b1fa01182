/* agsx — registry: parsers of untrusted authentication input (WWW-Authenticate
 * challenges, token answers, auth files) and the credentials of a registry. */
#include "config.h"

#include "image/registry/registry-internal.h"

#include "image/image.h"
#include "image/store.h"
#include "util/json.h"

#include <ctype.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

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

char *agsx_registry_b64encode(const char *s, size_t n) {
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
int agsx_registry_load_credentials(struct registry *r, const char *authfile, agsx_error_t *err) {
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
