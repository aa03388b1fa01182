/* Unit tests: registry input parsers (WWW-Authenticate, token responses,
 * Docker config.json credentials) and reference splitting. */
#include "config.h"

#include "image/image.h"
#include "image/registry/registry.h"
#include "tap.h"

static void challenge_ok(const char *h, const char *scheme, const char *realm, const char *service,
                         const char *scope) {
  struct agsx_auth_challenge c;
  agsx_error_t err = NULL;
  int r = agsx_registry_parse_challenge(h, strlen(h), &c, &err);
  tap_ok(r == 0, "challenge parses: %s%s%s", h, err ? ": " : "", err ? err->msg : "");
  if (r == 0) {
    tap_is_str(c.scheme, scheme, "scheme");
    tap_ok((realm == NULL && c.realm == NULL) || (realm && c.realm && !strcmp(realm, c.realm)),
           "realm %s", c.realm ? c.realm : "(null)");
    tap_ok((service == NULL && c.service == NULL) ||
               (service && c.service && !strcmp(service, c.service)),
           "service %s", c.service ? c.service : "(null)");
    tap_ok((scope == NULL && c.scope == NULL) || (scope && c.scope && !strcmp(scope, c.scope)),
           "scope %s", c.scope ? c.scope : "(null)");
    agsx_auth_challenge_clear(&c);
  }
  agsx_error_free(&err);
}

static void challenge_bad(const char *h, size_t len, const char *why) {
  struct agsx_auth_challenge c;
  agsx_error_t err = NULL;
  int r = agsx_registry_parse_challenge(h, len, &c, &err);
  tap_ok(r < 0 && err && strstr(err->msg, why), "challenge refused (%s): %s", why,
         err ? err->msg : "accepted");
  if (r == 0)
    agsx_auth_challenge_clear(&c);
  agsx_error_free(&err);
}

static void test_challenge(void) {
  challenge_ok("Bearer realm=\"https://auth.docker.io/token\",service=\"registry.docker.io\","
               "scope=\"repository:library/busybox:pull\"",
               "bearer", "https://auth.docker.io/token", "registry.docker.io",
               "repository:library/busybox:pull");
  challenge_ok("Basic realm=\"Registry Realm\"", "basic", "Registry Realm", NULL, NULL);
  challenge_ok("BEARER Realm=x , SERVICE = \"a\\\"b\"", "bearer", "x", "a\"b", NULL);
  challenge_ok("Bearer", "bearer", NULL, NULL, NULL);
  challenge_ok("Bearer realm=\"\",error=\"invalid_token\"", "bearer", "", NULL, NULL);
  challenge_ok("Bearer realm=a,realm=b", "bearer", "b", NULL, NULL);
  challenge_bad("", 0, "without a scheme");
  challenge_bad("Bearer realm=\"unterminated", 26, "malformed");
  challenge_bad("Bearer realm", 12, "malformed");
  challenge_bad("Bearer realm=a b=c", 18, "malformed");
  challenge_bad("Bearer realm=\"a\\", 16, "malformed");
  challenge_bad("Bearer realm=\"a\0b\"", 18, "NUL");
  static char big[AGSX_REGISTRY_CHALLENGE_MAX + 2];
  memset(big, 'a', sizeof(big) - 1);
  challenge_bad(big, sizeof(big) - 1, "longer than");
}

static void token(const char *doc, const char *want, const char *why) {
  char *t = NULL;
  agsx_error_t err = NULL;
  int r = agsx_registry_parse_token(doc, strlen(doc), &t, &err);
  if (want)
    tap_ok(r == 0 && t && strcmp(t, want) == 0, "token from %s", doc);
  else
    tap_ok(r < 0 && err && strstr(err->msg, why), "token refused (%s): %s", why,
           err ? err->msg : "accepted");
  free(t);
  agsx_error_free(&err);
}

static void test_token(void) {
  token("{\"token\":\"abc.def\",\"expires_in\":300}", "abc.def", NULL);
  token("{\"access_token\":\"xyz\"}", "xyz", NULL);
  token("{\"token\":\"\",\"access_token\":\"xyz\"}", "xyz", NULL);
  token("{}", NULL, "without a token");
  token("[]", NULL, "not a JSON object");
  token("{\"token\":\"a b\"}", NULL, "invalid character");
  token("{\"token\":\"a\\r\\nX-Evil: 1\"}", NULL, "invalid character");
  token("{\"token\":1}", NULL, "without a token");
  token("{\"token\":", NULL, "token response");
}

static void auths(const char *doc, const char *domain, int want, const char *user, const char *pass,
                  const char *why) {
  char *u = NULL, *p = NULL;
  agsx_error_t err = NULL;
  int r = agsx_registry_parse_auths(doc, strlen(doc), domain, &u, &p, &err);
  if (want < 0)
    tap_ok(r < 0 && err && strstr(err->msg, why), "auths refused (%s): %s", why,
           err ? err->msg : "accepted");
  else if (want == 0)
    tap_ok(r == 0 && u == NULL, "no credentials for %s", domain);
  else
    tap_ok(r == 1 && u && p && !strcmp(u, user) && !strcmp(p, pass), "credentials for %s: %s",
           domain, u ? u : "(none)");
  free(u);
  free(p);
  agsx_error_free(&err);
}

static void test_auths(void) {
  /* dXNlcjpwYXNz = user:pass, YTpiOmM= = a:b:c */
  const char *doc = "{\"auths\":{\"https://index.docker.io/v1/\":{\"auth\":\"dXNlcjpwYXNz\"},"
                    "\"localhost:5000\":{\"auth\":\"YTpiOmM=\"},"
                    "\"http://reg.example:8080/v2\":{\"username\":\"u\",\"password\":\"p\"},"
                    "\"helper.example\":{}}}";
  auths(doc, "docker.io", 1, "user", "pass", NULL);
  auths(doc, "localhost:5000", 1, "a", "b:c", NULL);
  auths(doc, "reg.example:8080", 1, "u", "p", NULL);
  auths(doc, "reg.example", 0, NULL, NULL, NULL);
  auths(doc, "localhost", 0, NULL, NULL, NULL);
  auths(doc, "helper.example", 0, NULL, NULL, NULL);
  auths("{}", "docker.io", 0, NULL, NULL, NULL);
  auths("{\"auths\":{\"docker.io\":{\"auth\":\"!!!\"}}}", "docker.io", -1, NULL, NULL, "base64");
  auths("{\"auths\":{\"docker.io\":{\"auth\":\"bm9jb2xvbg==\"}}}", "docker.io", -1, NULL, NULL,
        "user:password");
  /* "a:\0b" */
  auths("{\"auths\":{\"docker.io\":{\"auth\":\"YToAYg==\"}}}", "docker.io", -1, NULL, NULL,
        "base64");
  /* "a:b\r\n" */
  auths("{\"auths\":{\"docker.io\":{\"auth\":\"YTpiDQo=\"}}}", "docker.io", -1, NULL, NULL,
        "control characters");
  auths("{\"auths\":{\"docker.io\":1}}", "docker.io", -1, NULL, NULL, "not an object");
  auths("[1]", "docker.io", -1, NULL, NULL, "not a JSON object");
}

static void ref(const char *in, const char *domain, const char *path, const char *tag,
                const char *digest, const char *familiar) {
  struct agsx_image_ref r;
  agsx_error_t err = NULL;
  int rc = agsx_image_ref_parse(in, &r, &err);
  tap_ok(rc == 0, "ref %s parses%s%s", in, err ? ": " : "", err ? err->msg : "");
  if (rc == 0) {
    tap_is_str(r.domain, domain, "domain of %s", in);
    tap_is_str(r.path, path, "path of %s", in);
    tap_ok((tag == NULL && r.tag == NULL) || (tag && r.tag && !strcmp(r.tag, tag)), "tag of %s",
           in);
    tap_ok((digest == NULL && r.digest == NULL) ||
               (digest && r.digest && !strcmp(r.digest, digest)),
           "digest of %s", in);
    tap_is_str(r.familiar, familiar, "familiar form of %s", in);
    agsx_image_ref_clear(&r);
  }
  agsx_error_free(&err);
}

#define D "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static void test_refs(void) {
  ref("python:3.12", "docker.io", "library/python", "3.12", NULL, "python:3.12");
  ref("user/x", "docker.io", "user/x", "latest", NULL, "user/x:latest");
  ref("docker.io/library/python:3.12", "docker.io", "library/python", "3.12", NULL, "python:3.12");
  ref("docker.io/busybox", "docker.io", "library/busybox", "latest", NULL, "busybox:latest");
  ref("index.docker.io/user/x:1", "docker.io", "user/x", "1", NULL, "user/x:1");
  ref("docker.io/library/a/b", "docker.io", "library/a/b", "latest", NULL, "library/a/b:latest");
  ref("localhost:5000/a/b:2", "localhost:5000", "a/b", "2", NULL, "localhost:5000/a/b:2");
  ref("ghcr.io/o/r@" D, "ghcr.io", "o/r", NULL, D, "ghcr.io/o/r@" D);
  ref("ghcr.io/o/r:t@" D, "ghcr.io", "o/r", "t", D, "ghcr.io/o/r:t@" D);
  ref("localhost/x", "localhost", "x", "latest", NULL, "localhost/x:latest");
  struct agsx_image_ref r;
  agsx_error_t err = NULL;
  tap_ok(agsx_image_ref_parse("UPPER/x", &r, &err) < 0 && err, "bad reference refused");
  agsx_error_free(&err);
}

static void origin_ok(const char *url, const char *want) {
  char o[AGSX_REGISTRY_ORIGIN_MAX];
  agsx_error_t err = NULL;
  int r = agsx_registry_url_origin(url, o, &err);
  tap_ok(r == 0 && strcmp(o, want) == 0, "origin of %s: %s", url, r == 0 ? o : err->msg);
  agsx_error_free(&err);
}

static void origin_bad(const char *url, const char *why) {
  char o[AGSX_REGISTRY_ORIGIN_MAX];
  agsx_error_t err = NULL;
  int r = agsx_registry_url_origin(url, o, &err);
  tap_ok(r < 0 && err && strstr(err->msg, why), "origin of %s refused (%s): %s", url, why,
         err ? err->msg : o);
  agsx_error_free(&err);
}

/* Credentials go only to the first URL's origin: every spelling of one
 * origin compares equal, and nothing can make another look like it. */
static void test_origin(void) {
  origin_ok("https://Registry-1.Docker.IO/v2/", "https://registry-1.docker.io:443");
  origin_ok("https://registry-1.docker.io:443/v2/x", "https://registry-1.docker.io:443");
  origin_ok("HTTP://127.0.0.1:5000", "http://127.0.0.1:5000");
  origin_ok("http://127.0.0.1?x=1", "http://127.0.0.1:80");
  origin_ok("http://[::1]:5000/v2/", "http://[::1]:5000");
  origin_ok("https://s3.amazonaws.com#frag", "https://s3.amazonaws.com:443");
  origin_bad("ftp://host/x", "not an http(s) URL");
  origin_bad("/v2/x", "not an http(s) URL");
  origin_bad("http://user:pw@127.0.0.1:5000/", "user info");
  origin_bad("http://127.0.0.1:5000@evil/", "user info");
  origin_bad("http:///x", "without a host");
  origin_bad("http://host:0/", "port out of range");
  origin_bad("http://host:65536/", "port out of range");
  origin_bad("http://host:5x/", "malformed port");
  origin_bad("http://host:/", "malformed host or port");
  origin_bad("http://ho st/", "malformed host or port");
  origin_bad("http://[::1/", "malformed IPv6");
  origin_bad("http://[]:5/", "malformed IPv6");
}

static void location_ok(const char *base, const char *loc, const char *want) {
  char *u = NULL;
  agsx_error_t err = NULL;
  int r = agsx_registry_resolve_location(base, loc, &u, &err);
  tap_ok(r == 0 && strcmp(u, want) == 0, "Location %s: %s", loc, r == 0 ? u : err->msg);
  free(u);
  agsx_error_free(&err);
}

static void location_bad(const char *loc, const char *why) {
  char *u = NULL;
  agsx_error_t err = NULL;
  int r =
      agsx_registry_resolve_location("http://127.0.0.1:5000/v2/x/blobs/uploads/", loc, &u, &err);
  tap_ok(r < 0 && err && strstr(err->msg, why), "Location %s refused (%s): %s", loc, why,
         err ? err->msg : u);
  free(u);
  agsx_error_free(&err);
}

static void test_location(void) {
  const char *base = "http://127.0.0.1:5000/v2/x/blobs/uploads/";
  location_ok(base, "/v2/x/blobs/uploads/u1?_state=a",
              "http://127.0.0.1:5000/v2/x/blobs/uploads/u1?_state=a");
  location_ok(base, "http://127.0.0.1:5000/v2/x/blobs/uploads/u2",
              "http://127.0.0.1:5000/v2/x/blobs/uploads/u2");
  location_ok("https://r.example/v2/", "/up", "https://r.example:443/up");
  location_bad("", "malformed Location");
  location_bad("/a b", "malformed Location");
  location_bad("//evil/x", "neither an absolute URL nor a path");
  location_bad("uploads/u1", "neither an absolute URL nor a path");
  location_bad("http://u@evil/x", "user info");
}

int main(void) {
  test_origin();
  test_location();
  test_challenge();
  test_token();
  test_auths();
  test_refs();
  return tap_done();
}
