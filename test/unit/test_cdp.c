/* Unit tests: the DevTools /json/version answer read by `agsx browser`. */
#include "config.h"

#include "sandbox/cdp.h"
#include "tap.h"

#include <string.h>

static const char body[] =
    "{\n \"Browser\": \"Chrome/156.0.8078.114\",\n \"Protocol-Version\": \"1.3\",\n"
    " \"webSocketDebuggerUrl\": \"ws://127.0.0.1:9222/devtools/browser/2969-ab\"\n}\n";

static int parse(const char *s, bool eof, struct agsx_cdp_version *v, agsx_error_t *err) {
  return agsx_cdp_parse_version(s, strlen(s), eof, v, err);
}

static void good(const char *what, const char *resp, bool eof) {
  struct agsx_cdp_version v;
  agsx_error_t err = NULL;
  int r = parse(resp, eof, &v, &err);
  tap_ok(r == 1 && v.ws_path && strcmp(v.ws_path, "/devtools/browser/2969-ab") == 0 && v.browser &&
             strcmp(v.browser, "Chrome/156.0.8078.114") == 0,
         "%s: parsed (%s)", what, err ? err->msg : "");
  agsx_cdp_version_clear(&v);
  agsx_error_free(&err);
}

static void more(const char *what, const char *resp) {
  struct agsx_cdp_version v;
  agsx_error_t err = NULL;
  tap_ok(parse(resp, false, &v, &err) == 0 && err == NULL, "%s: needs more bytes", what);
  agsx_error_free(&err);
}

static void bad(const char *what, const char *resp, bool eof, const char *why) {
  struct agsx_cdp_version v;
  agsx_error_t err = NULL;
  int r = parse(resp, eof, &v, &err);
  tap_ok(r < 0 && err && strstr(err->msg, why), "%s: refused (%s): %s", what, why,
         err ? err->msg : "accepted");
  agsx_cdp_version_clear(&v);
  agsx_error_free(&err);
}

int main(void) {
  char ok[1024], s[1024];
  snprintf(ok, sizeof(ok),
           "HTTP/1.1 200 OK\r\nContent-Length:%zu\r\nContent-Type: "
           "application/json\r\n\r\n%s",
           strlen(body), body);
  good("with Content-Length", ok, false);
  snprintf(s, sizeof(s), "HTTP/1.1 200 OK\r\ncontent-length: %zu \r\n\r\n%sJUNK", strlen(body),
           body);
  good("extra bytes after the body ignored", s, false);
  snprintf(s, sizeof(s), "HTTP/1.0 200 OK\r\n\r\n%s", body);
  good("no Content-Length, at EOF", s, true);
  more("no Content-Length, before EOF", s);
  more("headers incomplete", "HTTP/1.1 200 OK\r\nContent-Le");
  snprintf(s, sizeof(s), "%.*s", (int)strlen(ok) - 10, ok);
  more("body incomplete", s);
  bad("body truncated at EOF", s, true, "truncated body");
  bad("headers truncated at EOF", "HTTP/1.1 200 OK\r\n", true, "truncated headers");
  bad("not HTTP", "SSH-2.0-OpenSSH\r\n\r\n", true, "not an HTTP/1");
  bad("status 500", "HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n", false, "HTTP status 500");
  bad("bad length", "HTTP/1.1 200 OK\r\nContent-Length: 12x\r\n\r\n{}", false,
      "invalid Content-Length");
  bad("huge length", "HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n{}", false,
      "invalid Content-Length");
  bad("not JSON", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n{x}", false, "/json/version");
  bad("array", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]", false, "not a JSON object");
  bad("no url", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", false, "no webSocketDebuggerUrl");
  const char *urls[] = {"http://127.0.0.1/devtools/browser/x",
                        "ws://h/devtools/page/x",
                        "ws://h/devtools/browser/",
                        "ws://h/devtools/browser/a/../b",
                        "ws://h/devtools/browser/a\\u0001b",
                        "ws://h/devtools/browser/a b",
                        "ws://h",
                        "ws://h/devtools/browser/"
                        "0123456789012345678901234567890123456789012345678901234567890123456789"};
  for (size_t i = 0; i < sizeof(urls) / sizeof(urls[0]); i++) {
    char b[512];
    snprintf(b, sizeof(b), "{\"webSocketDebuggerUrl\":\"%s\"}", urls[i]);
    snprintf(s, sizeof(s), "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n%s", strlen(b), b);
    bad(urls[i], s, false, "unexpected webSocketDebuggerUrl");
  }
  /* A browser name with control characters is dropped, not printed. */
  snprintf(s, sizeof(s),
           "HTTP/1.1 200 OK\r\n\r\n{\"Browser\":\"\\u001b[31mevil\","
           "\"webSocketDebuggerUrl\":\"ws://h:1/devtools/browser/ab\"}");
  struct agsx_cdp_version v;
  agsx_error_t err = NULL;
  tap_ok(parse(s, true, &v, &err) == 1 && v.browser == NULL &&
             strcmp(v.ws_path, "/devtools/browser/ab") == 0,
         "control characters in Browser: dropped");
  agsx_cdp_version_clear(&v);
  agsx_error_free(&err);
  return tap_done();
}
