/* Fuzz target: what a registry (or a credentials file) sends us: the
 * WWW-Authenticate parser, token responses, Docker config.json credentials
 * image references, redirect targets (URL origins) and upload Location
 * headers. The first byte picks the parser. */
#include "config.h"

#include "fuzz.h"
#include "image/image.h"
#include "image/registry/registry.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  const char *buf = (const char *)data + 1;
  size_t len = size - 1;
  agsx_error_t err = NULL;
  switch (data[0] % 6) {
  case 0: {
    struct agsx_auth_challenge c;
    if (agsx_registry_parse_challenge(buf, len, &c, &err) == 0)
      agsx_auth_challenge_clear(&c);
    break;
  }
  case 1: {
    char *t = NULL;
    if (agsx_registry_parse_token(buf, len, &t, &err) == 0)
      free(t);
    break;
  }
  case 2: {
    char *u = NULL, *p = NULL;
    const char *domains[] = {"docker.io", "localhost:5000", "reg.example"};
    agsx_registry_parse_auths(buf, len, domains[len % 3], &u, &p, &err);
    free(u);
    free(p);
    break;
  }
  case 3: {
    char *s = strndup(buf, len);
    char o[AGSX_REGISTRY_ORIGIN_MAX];
    if (s)
      agsx_registry_url_origin(s, o, &err);
    free(s);
    break;
  }
  case 4: {
    char *s = strndup(buf, len), *u = NULL;
    if (s && agsx_registry_resolve_location("http://127.0.0.1:5000/v2/x/blobs/uploads/", s, &u,
                                            &err) == 0)
      free(u);
    free(s);
    break;
  }
  default: {
    char *s = strndup(buf, len);
    struct agsx_image_ref r;
    if (s && agsx_image_ref_parse(s, &r, &err) == 0)
      agsx_image_ref_clear(&r);
    free(s);
    break;
  }
  }
  agsx_error_free(&err);
  return 0;
}
