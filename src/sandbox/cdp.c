/* agsx — cdp: parsing a DevTools /json/version answer (see cdp.h). */
#include "config.h"

#include "sandbox/cdp.h"
#include "util/json.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

void agsx_cdp_version_clear(struct agsx_cdp_version *v) {
  free(v->browser);
  free(v->ws_path);
  v->browser = v->ws_path = NULL;
}

/* Finds "\r\n\r\n" within BUF[0..LEN). */
static const char *header_end(const char *buf, size_t len) {
  for (size_t i = 0; i + 4 <= len; i++)
    if (memcmp(buf + i, "\r\n\r\n", 4) == 0)
      return buf + i;
  return NULL;
}

/* The Content-Length header among HDR[0..LEN) (after the status line):
 * 1 with its value in *RET, 0 when absent, -1 when malformed. */
static int content_length(const char *hdr, size_t len, long long *ret) {
  static const char name[] = "content-length:";
  const char *p = hdr, *end = hdr + len;
  while (p < end) {
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    const char *next = eol ? eol + 1 : end;
    size_t n = (size_t)(next - p);
    if (n > sizeof(name) - 1 && strncasecmp(p, name, sizeof(name) - 1) == 0) {
      const char *q = p + sizeof(name) - 1;
      while (q < next && (*q == ' ' || *q == '\t'))
        q++;
      long long v = 0;
      int digits = 0;
      for (; q < next && isdigit((unsigned char)*q); q++, digits++) {
        if (digits >= 9)
          return -1;
        v = v * 10 + (*q - '0');
      }
      while (q < next && (*q == '\r' || *q == '\n' || *q == ' '))
        q++;
      if (!digits || q != next)
        return -1;
      *ret = v;
      return 1;
    }
    p = next;
  }
  return 0;
}

/* "ws://HOST[:PORT]/devtools/browser/ID" -> "/devtools/browser/ID". */
static char *ws_path(const char *url) {
  static const char prefix[] = "/devtools/browser/";
  if (!agsx_str_has_prefix(url, "ws://"))
    return NULL;
  const char *path = strchr(url + 5, '/');
  if (path == NULL || !agsx_str_has_prefix(path, prefix))
    return NULL;
  const char *id = path + sizeof(prefix) - 1;
  size_t n = strlen(id);
  if (n == 0 || n > 64)
    return NULL;
  for (const char *q = id; *q; q++)
    if (!(isalnum((unsigned char)*q) || *q == '-'))
      return NULL;
  return xstrdup(path);
}

static char *printable(const char *s) {
  if (s == NULL || strlen(s) > AGSX_CDP_BROWSER_MAX)
    return NULL;
  for (const char *q = s; *q; q++)
    if ((unsigned char)*q < 0x20 || (unsigned char)*q > 0x7e)
      return NULL;
  return xstrdup(s);
}

static int parse_body(const char *body, size_t len, struct agsx_cdp_version *ret,
                      agsx_error_t *err) {
  _cleanup_json_ yajl_val v = agsx_json_parse(body, len, AGSX_CDP_RESPONSE_MAX, err);
  if (v == NULL)
    return agsx_error_wrap(err, "DevTools /json/version");
  if (!YAJL_IS_OBJECT(v))
    return agsx_error_set(err, 0, "DevTools /json/version: not a JSON object");
  const char *url = agsx_json_get_string(v, "webSocketDebuggerUrl");
  if (url == NULL)
    return agsx_error_set(err, 0, "DevTools /json/version: no webSocketDebuggerUrl");
  char *path = ws_path(url);
  if (path == NULL)
    return agsx_error_set(err, 0, "DevTools /json/version: unexpected webSocketDebuggerUrl");
  ret->ws_path = path;
  ret->browser = printable(agsx_json_get_string(v, "Browser"));
  return 1;
}

int agsx_cdp_parse_version(const char *buf, size_t len, bool eof, struct agsx_cdp_version *ret,
                           agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  if (len > AGSX_CDP_RESPONSE_MAX)
    return agsx_error_set(err, 0, "DevTools answer larger than %u bytes", AGSX_CDP_RESPONSE_MAX);
  const char *he = header_end(buf, len);
  if (he == NULL)
    return eof ? agsx_error_set(err, 0, "DevTools answer: truncated headers") : 0;
  static const char http[] = "HTTP/1.";
  if (len < 12 || memcmp(buf, http, sizeof(http) - 1) != 0 || !isdigit((unsigned char)buf[7]) ||
      buf[8] != ' ')
    return agsx_error_set(err, 0, "DevTools answer: not an HTTP/1 response");
  if (memcmp(buf + 9, "200", 3) != 0)
    return agsx_error_set(err, 0, "DevTools /json/version: HTTP status %.3s", buf + 9);
  const char *body = he + 4;
  size_t have = (size_t)(buf + len - body);
  long long cl = 0;
  int has_cl = content_length(buf, (size_t)(he + 2 - buf), &cl);
  if (has_cl < 0)
    return agsx_error_set(err, 0, "DevTools answer: invalid Content-Length");
  if (has_cl) {
    if ((size_t)cl > have)
      return eof ? agsx_error_set(err, 0, "DevTools answer: truncated body") : 0;
    have = (size_t)cl;
  } else if (!eof) {
    return 0;
  }
  return parse_body(body, have, ret, err);
}
