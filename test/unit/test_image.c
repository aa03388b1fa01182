/* Unit tests: manifest, index and config parsing; references. */
#include "config.h"

#include "image/image.h"
#include "tap.h"

#define D1 "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define D2 "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"

static int manifest(const char *doc, struct agsx_manifest *m, agsx_error_t *err) {
  return agsx_manifest_parse(doc, strlen(doc), m, err);
}

static void manifest_bad(const char *doc, const char *why) {
  struct agsx_manifest m;
  agsx_error_t err = NULL;
  int r = manifest(doc, &m, &err);
  tap_ok(r < 0 && err && strstr(err->msg, why), "manifest refused (%s): %s", why,
         err ? err->msg : "accepted");
  if (r == 0)
    agsx_manifest_clear(&m);
  agsx_error_free(&err);
}

static void test_manifest(void) {
  struct agsx_manifest m;
  agsx_error_t err = NULL;
  const char *ok =
      "{\"schemaVersion\":2,\"mediaType\":\"" AGSX_MT_OCI_MANIFEST "\","
      "\"config\":{\"mediaType\":\"" AGSX_MT_OCI_CONFIG "\",\"digest\":\"" D1 "\",\"size\":2},"
      "\"layers\":[{\"mediaType\":\"" AGSX_MT_OCI_LAYER_GZIP "\",\"digest\":\"" D2
      "\",\"size\":100},{\"mediaType\":\"" AGSX_MT_DOCKER_LAYER_GZIP "\",\"digest\":\"" D1
      "\",\"size\":0}]}";
  tap_is_int(manifest(ok, &m, &err), 0, "OCI manifest parses");
  tap_is_int(m.n_layers, 2, "two layers");
  tap_is_str(m.layers[0].digest, D2, "layer digest");
  tap_is_int(m.layers[0].size, 100, "layer size");
  tap_is_str(m.config.digest, D1, "config digest");
  agsx_manifest_clear(&m);

  manifest_bad("[]", "not a JSON object");
  manifest_bad("{\"schemaVersion\":1}", "schemaVersion");
  manifest_bad("{\"schemaVersion\":2,\"mediaType\":\"x\"}", "unsupported media type");
  manifest_bad("{\"schemaVersion\":2,\"config\":{\"mediaType\":\"" AGSX_MT_OCI_CONFIG
               "\",\"digest\":\"sha256:zz\",\"size\":1},\"layers\":[]}",
               "expected 64 hex digits");
  manifest_bad("{\"schemaVersion\":2,\"config\":{\"mediaType\":\"" AGSX_MT_OCI_CONFIG
               "\",\"digest\":\"" D1 "\",\"size\":-1},\"layers\":[]}",
               "negative size");
  manifest_bad("{\"schemaVersion\":2,\"config\":{\"mediaType\":\"text/plain\",\"digest\":\"" D1
               "\",\"size\":1},\"layers\":[]}",
               "config media type");
  manifest_bad("{\"schemaVersion\":2,\"config\":{\"mediaType\":\"" AGSX_MT_OCI_CONFIG
               "\",\"digest\":\"" D1 "\",\"size\":1},\"layers\":[{\"mediaType\":\"application/"
               "x-unknown\",\"digest\":\"" D1 "\",\"size\":1}]}",
               "unsupported layer media type");
  manifest_bad("{\"schemaVersion\":2,\"config\":{\"mediaType\":\"" AGSX_MT_OCI_CONFIG
               "\",\"digest\":\"" D1 "\",\"size\":1}}",
               "missing `layers`");
  /* 5 MiB of padding is over the 4 MiB limit */
  size_t big = 5u << 20;
  char *huge = xmalloc(big + 64);
  int n = snprintf(huge, 64, "{\"schemaVersion\":2,\"x\":\"");
  memset(huge + n, 'a', big);
  strcpy(huge + n + big, "\"}");
  manifest_bad(huge, "over the limit");
  free(huge);
}

static void test_index(void) {
  const char *doc = "{\"schemaVersion\":2,\"manifests\":["
                    "{\"mediaType\":\"" AGSX_MT_OCI_MANIFEST "\",\"digest\":\"" D1
                    "\",\"size\":1,\"platform\":{\"os\":\"linux\",\"architecture\":\"arm64\"}},"
                    "{\"mediaType\":\"" AGSX_MT_OCI_MANIFEST "\",\"digest\":\"" D2
                    "\",\"size\":2,\"platform\":{\"os\":\"linux\",\"architecture\":\"amd64\"},"
                    "\"annotations\":{\"" AGSX_REF_ANNOTATION "\":\"busybox:1\"}}]}";
  struct agsx_index ix;
  agsx_error_t err = NULL;
  tap_is_int(agsx_index_parse(doc, strlen(doc), &ix, &err), 0, "index parses");
  tap_is_int(agsx_index_select_platform(&ix, &err), 1, "linux/amd64 selected");
  tap_is_str(ix.manifests[1].ref_name, "busybox:1", "ref.name annotation");
  agsx_index_clear(&ix);
  const char *arm = "{\"schemaVersion\":2,\"manifests\":["
                    "{\"mediaType\":\"" AGSX_MT_OCI_MANIFEST "\",\"digest\":\"" D1
                    "\",\"size\":1,\"platform\":{\"os\":\"linux\",\"architecture\":\"arm64\"}}]}";
  tap_is_int(agsx_index_parse(arm, strlen(arm), &ix, &err), 0, "arm-only index parses");
  tap_ok(agsx_index_select_platform(&ix, &err) < 0 && strstr(err->msg, "linux/arm64"),
         "no amd64: error names the platforms (%s)", err ? err->msg : "");
  agsx_error_free(&err);
  agsx_index_clear(&ix);
}

static void test_config(void) {
  const char *doc = "{\"architecture\":\"amd64\",\"os\":\"linux\",\"created\":\"2024-01-02T03:04:"
                    "05Z\",\"config\":{\"Env\":[\"PATH=/bin\"],\"Cmd\":[\"/bin/sh\"],"
                    "\"WorkingDir\":\"/w\",\"User\":\"1000\"},\"rootfs\":{\"type\":\"layers\","
                    "\"diff_ids\":[\"" D1 "\"]}}";
  struct agsx_image_config c;
  agsx_error_t err = NULL;
  tap_is_int(agsx_image_config_parse(doc, strlen(doc), &c, &err), 0, "config parses");
  tap_is_int(c.n_diff_ids, 1, "one diff_id");
  tap_is_str(c.env[0], "PATH=/bin", "Env");
  tap_is_str(c.cmd[0], "/bin/sh", "Cmd");
  tap_ok(c.entrypoint == NULL, "no Entrypoint");
  tap_is_str(c.working_dir, "/w", "WorkingDir");
  tap_is_str(c.user, "1000", "User");
  agsx_image_config_clear(&c);
  const char *bad = "{\"architecture\":\"amd64\",\"os\":\"linux\",\"rootfs\":{\"type\":\"layers\","
                    "\"diff_ids\":[\"md5:abc\"]}}";
  tap_ok(agsx_image_config_parse(bad, strlen(bad), &c, &err) < 0, "bad diff_id refused");
  agsx_error_free(&err);
  const char *env = "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Env\":[1]},"
                    "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}";
  tap_ok(agsx_image_config_parse(env, strlen(env), &c, &err) < 0 && strstr(err->msg, "Env"),
         "non-string Env refused");
  agsx_error_free(&err);
}

static void ref_ok(const char *in, const char *want) {
  agsx_error_t err = NULL;
  char *r = agsx_image_ref_normalize(in, &err);
  tap_is_str(r, want, "ref `%s`", in);
  free(r);
  agsx_error_free(&err);
}

static void ref_bad(const char *in) {
  agsx_error_t err = NULL;
  char *r = agsx_image_ref_normalize(in, &err);
  tap_ok(r == NULL && err != NULL, "ref `%s` refused", in);
  free(r);
  agsx_error_free(&err);
}

static void test_refs(void) {
  ref_ok("busybox", "busybox:latest");
  ref_ok("busybox:1.36", "busybox:1.36");
  ref_ok("library/python:3.12-slim", "library/python:3.12-slim");
  ref_ok("localhost:5000/x/y:t", "localhost:5000/x/y:t");
  ref_ok("registry.example.com/a_b/c-d", "registry.example.com/a_b/c-d:latest");
  ref_ok("busybox@" D1, "busybox@" D1);
  ref_ok("docker.io/library/busybox:1", "busybox:1");
  ref_ok("docker.io/user/x", "user/x:latest");
  ref_ok("index.docker.io/library/x", "x:latest");
  /* what remains would read as a host: kept whole (idempotent) */
  ref_ok("docker.io/docker.io/5g", "docker.io/docker.io/5g:latest");
  ref_ok("docker.io/localhost/x", "docker.io/localhost/x:latest");
  ref_bad("");
  ref_bad("BusyBox");
  ref_bad("busy box");
  ref_bad("../etc");
  ref_bad("a//b");
  ref_bad("busybox:");
  ref_bad("busybox:-x");
  ref_bad("busybox@sha256:1234");
  ref_bad("-busybox");
}

static void test_platform(void) {
  tap_ok(agsx_platform_is_supported("linux", "amd64"), "platform: linux/amd64");
  tap_ok(!agsx_platform_is_supported("linux", "arm64") &&
             !agsx_platform_is_supported("windows", "amd64") &&
             !agsx_platform_is_supported(NULL, "amd64") &&
             !agsx_platform_is_supported("linux", NULL),
         "platform: nothing else, NULL included");
  struct agsx_image_config c = {.os = (char *)"linux", .architecture = (char *)"arm64"};
  agsx_error_t err = NULL;
  int r = agsx_image_config_check_platform(&c, &err);
  tap_ok(r < 0 && err, "platform: a linux/arm64 config is refused");
  tap_is_str(err ? err->msg : NULL, "image is for linux/arm64: agsx runs only linux/amd64 images",
             "platform: the refusal names both platforms");
  agsx_error_free(&err);
  c.architecture = (char *)"amd64";
  tap_ok(agsx_image_config_check_platform(&c, &err) == 0 && err == NULL,
         "platform: a linux/amd64 config passes");
}

int main(void) {
  test_manifest();
  test_index();
  test_config();
  test_refs();
  test_platform();
  return tap_done();
}
