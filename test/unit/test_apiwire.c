/* Unit tests: the API server's wire formats, bodies, credentials and the
 * sandbox labels they map E2B metadata to. */
#include "config.h"

#include "api/auth.h"
#include "api/body.h"
#include "api/server.h"
#include "api/tls.h"
#include "api/wire.h"
#include "state/state.h"
#include "tap.h"

#include <string.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <sys/stat.h>

static void envelopes(void) {
  struct agsx_buf b = {0};
  agsx_connect_frame(&b, 0, "{\"a\":1}", 7);
  const char *msg;
  size_t len;
  tap_ok(b.len == 12 && memcmp(b.p, "\0\0\0\0\7", 5) == 0, "a frame: flags, big-endian length");
  tap_ok(agsx_connect_envelope(b.p, b.len, &msg, &len, NULL) == 0 && len == 7 &&
             memcmp(msg, "{\"a\":1}", 7) == 0,
         "the envelope reads back");
  agsx_error_t err = NULL;
  tap_ok(agsx_connect_envelope(b.p, b.len - 1, &msg, &len, &err) < 0, "a short body: %s",
         err ? err->msg : "");
  agsx_error_free(&err);
  b.p[0] = 1;
  tap_ok(agsx_connect_envelope(b.p, b.len, &msg, &len, &err) < 0 && strstr(err->msg, "compressed"),
         "a compressed message is refused");
  agsx_error_free(&err);
  tap_ok(agsx_connect_envelope("", 0, &msg, &len, NULL) < 0, "an empty body is refused");
  agsx_buf_clear(&b);
  tap_is_str(agsx_connect_code_name(AGSX_CONNECT_NOT_FOUND), "not_found", "not_found's name");
  tap_is_int(agsx_connect_code_status(AGSX_CONNECT_UNAUTHENTICATED), 401, "unauthenticated 401");
  tap_is_int(agsx_connect_code_status(AGSX_CONNECT_DEADLINE_EXCEEDED), 504, "deadline 504");
}

static void filters(void) {
  /* What e2b 2.51 sends for {user:'a b', app:'x&y'} after the query level
   * is decoded: each part encodeURIComponent-ed, then the form. */
  char **v = NULL;
  tap_ok(agsx_api_metadata_filter("user=a%2520b&app=x%2526y", &v, NULL) == 0 && v &&
             strcmp(v[0], "user=a b") == 0 && strcmp(v[1], "app=x&y") == 0 && !v[2],
         "the metadata filter decodes each part twice");
  agsx_strv_free(v);
  v = NULL;
  agsx_error_t err = NULL;
  tap_ok(agsx_api_metadata_filter("novalue", &v, &err) < 0, "a part without = is refused");
  agsx_error_free(&err);
  tap_ok(agsx_api_metadata_filter("a=%zz", &v, &err) < 0, "a bad escape is refused");
  agsx_error_free(&err);
  tap_ok(agsx_api_metadata_filter("a=%2500", &v, &err) < 0, "a NUL is refused");
  agsx_error_free(&err);
  tap_ok(agsx_api_list_has("running,paused", "paused") && !agsx_api_list_has("running", "paus"),
         "state lists");
}

static void users(void) {
  char *u = NULL;
  tap_ok(agsx_basic_auth_user("Basic cm9vdDo=", &u, NULL) == 0 && strcmp(u, "root") == 0,
         "Basic root: is root");
  free(u);
  agsx_error_t err = NULL;
  tap_ok(agsx_basic_auth_user("Bearer x", &u, &err) < 0, "another scheme is refused");
  agsx_error_free(&err);
  tap_ok(agsx_basic_auth_user("Basic Li4vZXRjOg==", &u, &err) < 0, "the user ../etc is refused");
  agsx_error_free(&err);
  tap_ok(agsx_basic_auth_user("Basic cm9vdA==", &u, &err) < 0, "no colon is refused");
  agsx_error_free(&err);
  char *d = NULL;
  size_t n;
  tap_ok(agsx_base64_decode("aGkK", 100, &d, &n, NULL) == 0 && n == 3 && memcmp(d, "hi\n", 3) == 0,
         "base64 decodes");
  free(d);
  _cleanup_free_ char *e = agsx_base64_encode("hi\n\xff", 4);
  tap_is_str(e, "aGkK/w==", "base64 encodes with padding");
}

static void bodies(void) {
  struct agsx_api_create c;
  int st;
  agsx_error_t err = NULL;
  const char *ok = "{\"templateID\":\"base\",\"timeout\":60,\"secure\":true,"
                   "\"allow_internet_access\":false,\"metadata\":{\"k\":\"v\"},\"envVars\":{}}";
  tap_ok(agsx_api_create_parse(ok, strlen(ok), &c, &st, &err) == 0 && c.timeout == 60 &&
             !c.internet && strcmp(c.metadata[0], "k=v") == 0,
         "the v1 create body of JS 2.50 and Python");
  agsx_api_create_clear(&c);
  {
    /* E2B: allowed entries win over denied ones; denyOut alone denies. */
    static const struct {
      const char *net, *want;
    } eg[] = {
        {"{\"denyOut\":[\"0.0.0.0/0\",\"198.19.3.0/24\"],\"allowOut\":[\"198.19.3.4\",\"x.org\"]}",
         "allow 198.19.3.4/32,allow x.org,"},
        {"{\"denyOut\":[\"198.19.3.0/24\"],\"allowOut\":[\"198.19.3.4\"]}", "allow 198.19.3.4/32,"},
        {"{\"denyOut\":[\"0.0.0.0/0\"]}", "deny 0.0.0.0/0,"},
        {"{\"denyOut\":[\"198.18.8.8\"]}", "deny 198.18.8.8/32,"},
        {"{}", ""},
    };
    for (size_t i = 0; i < AGSX_ARRAY_SIZE(eg); i++) {
      _cleanup_json_ yajl_val v = agsx_json_parse(eg[i].net, strlen(eg[i].net), 1 << 16, &err);
      char **rules = NULL;
      int r = agsx_api_egress_parse(v, &rules, &st, &err);
      char got[256] = "";
      for (size_t k = 0; rules && rules[k]; k++)
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s,", rules[k]);
      tap_ok(r == 0 && strcmp(got, eg[i].want) == 0, "network %s: %s", eg[i].net,
             err ? err->msg : got);
      agsx_strv_free(rules);
      agsx_error_free(&err);
    }
  }
  const char *life =
      "{\"autoPause\":true,\"autoPauseMemory\":true,\"autoResume\":{\"enabled\":true}}";
  tap_ok(agsx_api_create_parse(life, strlen(life), &c, &st, &err) == 0 && c.pause_on_timeout &&
             c.auto_resume,
         "lifecycle.onTimeout pause with autoResume (the latest SDK's body)");
  agsx_api_create_clear(&c);
  static const struct {
    const char *body;
    int status;
  } bad[] = {{"{\"mcp\":{\"a\":{}}}", 501},
             {"{\"volumeMounts\":[{}]}", 400},
             {"{\"network\":{\"maskRequestHost\":\"x\"}}", 501},
             {"{\"network\":{\"allowOut\":[\"a*b\"]}}", 400},
             {"{\"network\":{\"denyOut\":\"x\"}}", 400},
             {"{\"network\":{\"denyOut\":[\"x.org\"]}}", 400},
             {"{\"network\":{\"denyOut\":[\"*.x.org\"]}}", 400},
             {"{\"autoPause\":true,\"autoPauseMemory\":false}", 501},
             {"{\"autoPause\":\"x\"}", 400},
             {"{\"autoResume\":{\"enabled\":true}}", 400},
             {"{\"autoResume\":true}", 400},
             {"{\"timeout\":0}", 400},
             {"{\"timeout\":1.5}", 400},
             {"{\"x\":1}", 400},
             {"{\"metadata\":{\"e2b.t\":\"x\"}}", 400},
             {"{\"envVars\":{\"A=B\":\"c\"}}", 400},
             {"[", 400}};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(bad); i++) {
    int r = agsx_api_create_parse(bad[i].body, strlen(bad[i].body), &c, &st, &err);
    tap_ok(r < 0 && st == bad[i].status, "create %s: %d (%s)", bad[i].body, st,
           err ? err->msg : "accepted");
    agsx_error_free(&err);
  }
  struct agsx_api_start s;
  const char *start = "{\"process\":{\"cmd\":\"/bin/bash\",\"args\":[\"-l\",\"-c\",\"echo hi\"],"
                      "\"envs\":{\"X\":\"1\"}},\"stdin\":false}";
  tap_ok(agsx_api_start_parse(start, strlen(start), &s, NULL) == 0 && !s.stdin_open && !s.pty &&
             strcmp(s.args[2], "echo hi") == 0 && strcmp(s.envs[0], "X=1") == 0,
         "commands.run's Start");
  agsx_api_start_clear(&s);
  const char *pty = "{\"process\":{\"cmd\":\"/bin/bash\",\"args\":[\"-i\",\"-l\"]},"
                    "\"pty\":{\"size\":{\"cols\":100,\"rows\":30}}}";
  tap_ok(agsx_api_start_parse(pty, strlen(pty), &s, NULL) == 0 && s.pty && s.cols == 100 &&
             s.rows == 30 && s.stdin_open,
         "pty.create's Start (stdin absent: open)");
  agsx_api_start_clear(&s);
  tap_ok(agsx_api_start_parse("{\"process\":{}}", 14, &s, &err) < 0, "no cmd is refused");
  agsx_error_free(&err);
  tap_ok(agsx_api_start_parse("{\"process\":{\"cmd\":\"x\",\"bogus\":1}}", 33, &s, &err) < 0,
         "an unknown field is refused: %s", err ? err->msg : "");
  agsx_error_free(&err);
}

static void credentials(void) {
  char a[65], b[65], c[65];
  agsx_api_envd_token("e2b_key1", "0123456789abcdef0123456789abcdef", a);
  agsx_api_envd_token("e2b_key1", "0123456789abcdef0123456789abcdef", b);
  agsx_api_envd_token("e2b_key2", "0123456789abcdef0123456789abcdef", c);
  tap_ok(strlen(a) == 64 && strcmp(a, b) == 0 && strcmp(a, c) != 0,
         "tokens: derived, stable, keyed");
  tap_ok(agsx_api_secret_equal("abc", "abc") && !agsx_api_secret_equal("abd", "abc") &&
             !agsx_api_secret_equal("ab", "abc") && !agsx_api_secret_equal(NULL, "abc"),
         "secret comparison");
  tap_ok(agsx_api_key_is_valid("e2b_0123456789") && !agsx_api_key_is_valid("short") &&
             !agsx_api_key_is_valid("e2b_with space"),
         "key format");
  char dir[] = "/tmp/agsx-test-apiwire.XXXXXX";
  if (mkdtemp(dir) == NULL)
    return;
  _cleanup_free_ char *path = xasprintf("%s/sub/api-key", dir);
  char *key = NULL, *key2 = NULL;
  bool created = false;
  agsx_error_t err = NULL;
  int r = agsx_api_key_load(path, &key, &created, &err);
  struct stat st;
  tap_ok(r == 0 && created && strlen(key) == 44 && strncmp(key, "e2b_", 4) == 0 &&
             stat(path, &st) == 0 && (st.st_mode & 0777) == 0600,
         "the key file is generated: e2b_ + 40 hex, 0600 (%s)", err ? err->msg : "");
  agsx_error_free(&err);
  tap_ok(agsx_api_key_load(path, &key2, &created, NULL) == 0 && !created && strcmp(key, key2) == 0,
         "and read back");
  chmod(path, 0640);
  free(key2);
  tap_ok(agsx_api_key_load(path, &key2, &created, &err) < 0, "a key file others read is refused");
  agsx_error_free(&err);
  free(key);
  unlink(path);
  _cleanup_free_ char *sub = xasprintf("%s/sub", dir);
  rmdir(sub);
  rmdir(dir);
}

static void listen_addrs(void) {
  struct sockaddr_storage ss;
  unsigned len;
  bool lo;
  tap_ok(agsx_api_listen_parse("127.0.0.1:3000", &ss, &len, &lo, NULL) == 0 && lo, "127.0.0.1");
  tap_ok(agsx_api_listen_parse("[::1]:3000", &ss, &len, &lo, NULL) == 0 && lo, "[::1]");
  tap_ok(agsx_api_listen_parse("0.0.0.0:3000", &ss, &len, &lo, NULL) == 0 && !lo, "0.0.0.0");
  tap_ok(agsx_api_listen_parse("localhost:1", &ss, &len, &lo, NULL) == 0 && lo, "localhost");
  agsx_error_t err = NULL;
  tap_ok(agsx_api_listen_parse("198.18.0.4", &ss, &len, &lo, &err) < 0, "no port");
  agsx_error_free(&err);
  tap_ok(agsx_api_listen_parse("198.18.0.4:70000", &ss, &len, &lo, &err) < 0, "a port too large");
  agsx_error_free(&err);
}

static void labels(void) {
  char *ok[] = {"a=1", "b=x=y", "c=", NULL};
  tap_ok(agsx_labels_check(ok, NULL) == 0, "labels: KEY=VALUE, = in values, empty values");
  tap_ok(agsx_labels_match(ok, "a") && agsx_labels_match(ok, "b=x=y") &&
             !agsx_labels_match(ok, "a=2") && agsx_labels_match(ok, "c=") &&
             !agsx_labels_match(ok, "d"),
         "label filters");
  char *dup[] = {"a=1", "a=2", NULL}, *nokey[] = {"=1", NULL}, *ctl[] = {"a=\n", NULL};
  agsx_error_t err = NULL;
  tap_ok(agsx_labels_check(dup, &err) < 0, "a key twice is refused");
  agsx_error_free(&err);
  tap_ok(agsx_labels_check(nokey, &err) < 0, "an empty key is refused");
  agsx_error_free(&err);
  tap_ok(agsx_labels_check(ctl, &err) < 0, "control characters are refused");
  agsx_error_free(&err);
  char **many = NULL;
  for (int i = 0; i <= AGSX_LABELS_MAX; i++) {
    _cleanup_free_ char *k = xasprintf("k%d", i);
    agsx_labels_set(&many, k, "v");
  }
  tap_ok(agsx_labels_check(many, &err) < 0, "more than %d labels are refused", AGSX_LABELS_MAX);
  agsx_error_free(&err);
  agsx_labels_set(&many, "k1", "new");
  tap_is_str(agsx_label_get(many, "k1"), "new", "labels_set replaces");
  agsx_strv_free(many);
}

/* Host and Origin against DNS rebinding. */
static bool host_ok(const char *header, const char *local, char *const *names) {
  char h[AGSX_API_HOST_MAX + 1];
  return agsx_api_host_parse(header, h, NULL) == 0 && agsx_api_host_allowed(h, local, names);
}

static bool origin_ok(const char *header, const char *local, char *const *names) {
  char h[AGSX_API_HOST_MAX + 1];
  return agsx_api_origin_parse(header, h, NULL) == 0 && agsx_api_host_allowed(h, local, names);
}

static void hosts(void) {
  char *names[] = {"e2b.test", "198.18.2.3", NULL};
  char h[AGSX_API_HOST_MAX + 1];
  tap_ok(agsx_api_host_parse("API.E2B.Test.:443", h, NULL) == 0 && strcmp(h, "api.e2b.test") == 0,
         "host: lowercased, final dot and port dropped");
  tap_ok(agsx_api_host_parse("[::FFFF:127.0.0.1]:80", h, NULL) == 0 &&
             strcmp(h, "::ffff:127.0.0.1") == 0,
         "host: IPv6 in brackets, canonical");
  const char *bad[] = {"",     ":80", "a:",     "a:123456", "a:8x", "a b", "a..b", ".a",
                       "[::1", "::1", "[::1]x", "[zz]:1",   "a/b",  "a@b", "%61",  NULL};
  bool all = true;
  for (size_t i = 0; bad[i]; i++)
    if (agsx_api_host_parse(bad[i], h, NULL) == 0) {
      printf("#   accepted `%s`\n", bad[i]);
      all = false;
    }
  tap_ok(all, "host: malformed ones refused");
  tap_ok(host_ok("127.0.0.1:3000", "127.0.0.1", NULL), "the address reached");
  tap_ok(host_ok("198.19.2.4", "::ffff:198.19.2.4", NULL), "the address reached, v4-mapped");
  tap_ok(!host_ok("127.0.0.2", "127.0.0.1", NULL), "another address");
  tap_ok(!host_ok("127.0.0.1", NULL, NULL), "no address known: none");
  tap_ok(host_ok("198.18.2.3:80", "127.0.0.1", names), "an address of --host");
  tap_ok(host_ok("localhost", NULL, NULL) && host_ok("49999-abc.localhost", NULL, NULL),
         "localhost and one label below");
  tap_ok(!host_ok("a.b.localhost", NULL, NULL) && !host_ok("localhost.evil", NULL, NULL),
         "not two labels below, nor a suffix");
  tap_ok(host_ok("e2b.test", NULL, names) &&
             host_ok("49983-0123456789abcdef0123.e2b.test", NULL, names),
         "a --host name and one label below (E2B's per-port hosts)");
  tap_ok(!host_ok("xe2b.test", NULL, names) && !host_ok("e2b.test.evil", NULL, names) &&
             !host_ok("a.b.e2b.test", NULL, names) && !host_ok(".e2b.test", NULL, names),
         "not a longer label, a suffix, two labels, an empty label");
  tap_ok(!host_ok("sub.198.18.2.3", NULL, names), "an address of --host is no domain");
  tap_ok(!host_ok("rebind.example", "127.0.0.1", names), "a rebinding page's name");
  tap_ok(origin_ok("http://localhost:5173", NULL, NULL) &&
             origin_ok("HTTPS://API.e2b.test", NULL, names),
         "origins of this server's sites");
  tap_ok(!origin_ok("null", NULL, NULL) && !origin_ok("file://", NULL, NULL) &&
             !origin_ok("ftp://localhost", NULL, NULL) &&
             !origin_ok("http://localhost/", NULL, NULL) &&
             !origin_ok("http://u@localhost", NULL, NULL) &&
             !origin_ok("http://rebind.example", "127.0.0.1", NULL),
         "null, other schemes, paths, user info, other sites");
}

/* startedAfter's times and the list's page tokens. */
static void list_params(void) {
  int64_t ns = 0;
  tap_ok(agsx_api_time_parse("2026-12-03T17:02:25.123Z", &ns) == 0 && ns == 1796317345123000000LL,
         "a time with ms (Date.toISOString)");
  tap_ok(agsx_api_time_parse("2026-12-03T17:02:25.1234567891Z", &ns) == 0 &&
             ns == 1796317345123456789LL,
         "digits past ns are ignored");
  tap_ok(agsx_api_time_parse("2026-12-03T18:02:25+01:00", &ns) == 0 && ns == 1796317345000000000LL,
         "an offset, no fraction");
  tap_ok(agsx_api_time_parse("yesterday", &ns) < 0, "junk is refused");
  tap_ok(agsx_api_time_parse("1969-12-31T23:59:59Z", &ns) < 0, "before 1970 is refused");
  char tok[AGSX_API_LIST_TOKEN_LEN + 1], id[33];
  agsx_api_list_token(1796317345123456789LL, "0123456789abcdef0123456789abcdef", tok);
  tap_is_str(tok, "18edcd1babf4d7150123456789abcdef0123456789abcdef", "a page token");
  tap_ok(agsx_api_list_token_parse(tok, &ns, id) == 0 && ns == 1796317345123456789LL &&
             strcmp(id, "0123456789abcdef0123456789abcdef") == 0,
         "reads back");
  tap_ok(agsx_api_list_token_parse("ffffffffffffffff0123456789abcdef0123456789abcdef", &ns, id) < 0,
         "a start past int64 is refused");
  tap_ok(agsx_api_list_token_parse("0123456789abcdef", &ns, id) < 0, "a short one is refused");
  tap_ok(agsx_api_list_token_parse("18EDCD1BABF4D7150123456789abcdef0123456789abcdef", &ns, id) < 0,
         "upper case is refused");
}

/* A stream's buffer, handed out in pieces. */
static void buf_drain(void) {
  struct agsx_buf b = {0};
  size_t off = 0;
  char out[8];
  agsx_buf_add(&b, "abcdefghij", 10);
  tap_is_int(agsx_buf_drain(&b, &off, out, 4), 4, "at most MAX bytes");
  tap_ok(memcmp(out, "abcd", 4) == 0 && off == 4 && b.len == 10, "from the start, the offset on");
  agsx_buf_add(&b, "kl", 2);
  tap_is_int(agsx_buf_drain(&b, &off, out, 8), 8, "then the rest, bytes added meanwhile too");
  tap_ok(memcmp(out, "efghijkl", 8) == 0 && off == 0 && b.len == 0, "all taken: emptied, reset");
  tap_is_int(agsx_buf_drain(&b, &off, out, 8), 0, "nothing more");
  agsx_buf_clear(&b);
}

static void heads(void) {
  struct agsx_api_head hd;
  const char *h = "GET /vnc.html?x=1 HTTP/1.1\r\nHost:  6080-abc.localhost:3001 \r\n"
                  "Origin: http://x\r\nUpgrade: websocket\r\nE2B-Traffic-Access-Token: t0k\r\n"
                  "\r\nBODY";
  tap_is_int(agsx_api_head_scan(h, strlen(h), &hd, NULL), 1, "a whole head");
  tap_is_int((int)hd.len, (int)(strlen(h) - 4), "its length, through the blank line");
  tap_is_str(hd.host, "6080-abc.localhost:3001", "Host, trimmed");
  tap_is_str(hd.origin, "http://x", "Origin");
  tap_is_str(hd.traffic, "t0k", "E2B-Traffic-Access-Token");
  tap_is_int(agsx_api_head_scan(h, 30, &hd, NULL), 0, "a part: more is needed");
  const char *lf = "GET / HTTP/1.0\nhost: a\n\n";
  tap_is_int(agsx_api_head_scan(lf, strlen(lf), &hd, NULL), 1, "LF lines");
  tap_ok(strcmp(hd.host, "a") == 0 && hd.origin[0] == '\0' && hd.traffic[0] == '\0',
         "host in lowercase, no Origin or token: empty");
  const char *bad[] = {"GET / HTTP/2.0\r\n\r\n",
                       "GET /\r\n\r\n",
                       " GET / HTTP/1.1\r\n\r\n",
                       "GET / HTTP/1.1\r\nno colon\r\n\r\n",
                       "GET / HTTP/1.1\r\n folded: x\r\n\r\n",
                       "GET / HTTP/1.1\r\nHost: a\r\nHOST: b\r\n\r\n",
                       "GET / HTTP/1.1\r\ne2b-traffic-access-token: a\r\n"
                       "E2B-Traffic-Access-Token: b\r\n\r\n",
                       "GET /a b HTTP/1.1\r\n\r\n"};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(bad); i++)
    tap_is_int(agsx_api_head_scan(bad[i], strlen(bad[i]), &hd, NULL), -1, "refused: %zu", i);
  char nul[] = "GET / HTTP/1.1\r\nX: a\0b\r\n\r\n";
  tap_is_int(agsx_api_head_scan(nul, sizeof(nul) - 1, &hd, NULL), -1, "a NUL");
  char *big = xzalloc(AGSX_API_HEAD_MAX + 100);
  memcpy(big, "GET / HTTP/1.1\r\nX: ", 20);
  memset(big + 20, 'a', AGSX_API_HEAD_MAX + 50);
  agsx_error_t err = NULL;
  tap_is_int(agsx_api_head_scan(big, AGSX_API_HEAD_MAX + 70, &hd, &err), -1,
             "no end within the bound");
  tap_is_int(agsx_error_errno(&err), EMSGSIZE, "EMSGSIZE");
  agsx_error_free(&err);
  char longhost[700] = "GET / HTTP/1.1\r\nHost: ";
  memset(longhost + strlen(longhost), 'h', 600);
  strcat(longhost, "\r\n\r\n");
  tap_is_int(agsx_api_head_scan(longhost, strlen(longhost), &hd, NULL), -1, "an overlong Host");
  free(big);

  unsigned port = 0;
  char id[33];
  tap_is_int(agsx_api_port_host("6080-0123456789abcdefghij.localhost", &port, id, NULL), 0,
             "PORT-ID.DOMAIN");
  tap_ok(port == 6080 && strcmp(id, "0123456789abcdefghij") == 0, "its port and id");
  tap_is_int(agsx_api_port_host("65535-0123456789abcdef0123456789abcdef.e2b.test", &port, id, NULL),
             0, "a 32-character id, the highest port");
  const char *nope[] = {"6080-0123456789abcdefghij",     "0-0123456789abcdefghij.x",
                        "65536-0123456789abcdefghij.x",  "08-0123456789abcdefghij.x",
                        "6080-0123456789abcdefghi.x",    "6080-0123456789ABCDEFGHIJ.x",
                        "-0123456789abcdefghij.x",       "localhost",
                        "a.6080-0123456789abcdefghij.x", "123456-0123456789abcdefghij.x"};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(nope); i++)
    tap_is_int(agsx_api_port_host(nope[i], &port, id, NULL), -1, "not a port host: %s", nope[i]);
}

/* The names agsx's CA signs (SNI), and its files under ROOT/tls. */
static void tls(void) {
  static const char *const yes[] = {"localhost", "LocalHost", "8080-abcdefghijklmnopqrst.localhost",
                                    "a.b.localhost", "x-1.localhost"};
  static const char *const no[] = {"",
                                   "example.com",
                                   "localhost.example",
                                   "xlocalhost",
                                   ".localhost",
                                   "a..localhost",
                                   "-a.localhost",
                                   "a-.localhost",
                                   "a_b.localhost",
                                   "a b.localhost",
                                   "localhost.",
                                   "127.0.0.1",
                                   "évil.localhost"};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(yes); i++)
    tap_ok(agsx_tls_name_signable(yes[i]), "the CA signs `%s`", yes[i]);
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(no); i++)
    tap_ok(!agsx_tls_name_signable(no[i]), "the CA does not sign `%s`", no[i]);
  char label[70], long_name[300];
  memset(label, 'a', 64);
  label[64] = '\0';
  snprintf(long_name, sizeof(long_name), "%s.localhost", label);
  tap_ok(!agsx_tls_name_signable(long_name), "a label of 64 characters is refused");
  tap_ok(!agsx_tls_name_signable(NULL), "no name is refused");

  char dir[] = "/tmp/agsx-tls-XXXXXX";
  if (!tap_ok(mkdtemp(dir) != NULL, "a temporary directory"))
    return; /* libssl.so.3 is libssl-dev's dependency: the build has it */
  agsx_error_t err = NULL;
  char *ca = NULL, *ca2 = NULL;
  struct agsx_tls *t = agsx_tls_server_new(dir, NULL, NULL, &ca, &err);
  tap_ok(t && ca && strstr(ca, "/tls/ca.pem"), "agsx's CA is made: %s", err ? err->msg : ca);
  agsx_error_free(&err);
  agsx_tls_server_free(t);
  char *key = xasprintf("%s/tls/ca-key.pem", dir);
  struct stat st;
  tap_ok(stat(key, &st) == 0 && (st.st_mode & 0777) == 0600, "its key is 0600");
  _cleanup_free_ char *pem1 = NULL, *pem2 = NULL;
  size_t l1 = 0, l2 = 0;
  agsx_read_file_at(AT_FDCWD, ca, 1 << 16, &pem1, &l1, NULL);
  t = agsx_tls_server_new(dir, NULL, NULL, &ca2, &err);
  agsx_read_file_at(AT_FDCWD, ca, 1 << 16, &pem2, &l2, NULL);
  tap_ok(t && pem1 && pem2 && l1 == l2 && memcmp(pem1, pem2, l1) == 0,
         "a second start keeps the CA");
  agsx_tls_server_free(t);
  free(ca2);
  ca2 = NULL;
  chmod(key, 0644);
  t = agsx_tls_server_new(dir, NULL, NULL, &ca2, &err);
  tap_ok(t == NULL && err && strstr(err->msg, "only it can read"),
         "a key others can read is refused: %s", err ? err->msg : "");
  agsx_error_free(&err);
  t = agsx_tls_server_new(dir, "/nonexistent", NULL, &ca2, &err);
  tap_ok(t == NULL && err && strstr(err->msg, "both"), "a certificate without its key: %s",
         err ? err->msg : "");
  agsx_error_free(&err);
  agsx_rm_rf_at(AT_FDCWD, dir, NULL);
  free(key);
  free(ca);
}

int main(void) {
  buf_drain();
  tls();
  heads();
  envelopes();
  filters();
  list_params();
  users();
  bodies();
  credentials();
  listen_addrs();
  labels();
  hosts();
  return tap_done();
}
