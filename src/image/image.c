/* agsx — image metadata parsing. Everything here reads untrusted JSON. */
#include "config.h"

#include "image/image.h"

#include <ctype.h>
#include <string.h>

void agsx_descriptor_clear(struct agsx_descriptor *d) {
  free(d->media_type);
  free(d->os);
  free(d->architecture);
  free(d->variant);
  free(d->ref_name);
  free(d->image_name);
  memset(d, 0, sizeof(*d));
}

void agsx_manifest_clear(struct agsx_manifest *m) {
  free(m->media_type);
  agsx_descriptor_clear(&m->config);
  for (size_t i = 0; i < m->n_layers; i++)
    agsx_descriptor_clear(&m->layers[i]);
  free(m->layers);
  memset(m, 0, sizeof(*m));
}

void agsx_index_clear(struct agsx_index *ix) {
  for (size_t i = 0; i < ix->n_manifests; i++)
    agsx_descriptor_clear(&ix->manifests[i]);
  free(ix->manifests);
  memset(ix, 0, sizeof(*ix));
}

void agsx_image_config_clear(struct agsx_image_config *c) {
  free(c->os);
  free(c->architecture);
  free(c->variant);
  free(c->created);
  for (size_t i = 0; i < c->n_diff_ids; i++)
    free(c->diff_ids[i]);
  free(c->diff_ids);
  agsx_strv_free(c->env);
  agsx_strv_free(c->entrypoint);
  agsx_strv_free(c->cmd);
  free(c->working_dir);
  free(c->user);
  free(c->stop_signal);
  memset(c, 0, sizeof(*c));
}

static char *dup_opt(const char *s) { return s ? xstrdup(s) : NULL; }

/* Optional string field: missing or null is fine, another type is not. */
static int opt_string(yajl_val obj, const char *key, char **ret, agsx_error_t *err) {
  yajl_val v = agsx_json_get(obj, key);
  if (v == NULL || YAJL_IS_NULL(v))
    return 0;
  if (!YAJL_IS_STRING(v))
    return agsx_error_set(err, 0, "field `%s` is not a string", key);
  *ret = xstrdup(v->u.string);
  return 0;
}

/* Optional array of strings; null or missing gives NULL. */
static int opt_strv(yajl_val obj, const char *key, char ***ret, agsx_error_t *err) {
  yajl_val v = agsx_json_get(obj, key);
  if (v == NULL || YAJL_IS_NULL(v))
    return 0;
  if (!YAJL_IS_ARRAY(v))
    return agsx_error_set(err, 0, "field `%s` is not an array", key);
  _cleanup_strv_ char **out = xzalloc((v->u.array.len + 1) * sizeof(char *));
  for (size_t i = 0; i < v->u.array.len; i++) {
    yajl_val s = v->u.array.values[i];
    if (!YAJL_IS_STRING(s))
      return agsx_error_set(err, 0, "field `%s`: element %zu is not a string", key, i);
    out[i] = xstrdup(s->u.string);
  }
  *ret = steal_ptr(&out);
  return 0;
}

bool agsx_media_type_is_index(const char *mt) {
  return mt && (strcmp(mt, AGSX_MT_OCI_INDEX) == 0 || strcmp(mt, AGSX_MT_DOCKER_LIST) == 0);
}

bool agsx_media_type_is_manifest(const char *mt) {
  return mt && (strcmp(mt, AGSX_MT_OCI_MANIFEST) == 0 || strcmp(mt, AGSX_MT_DOCKER_MANIFEST) == 0);
}

int agsx_layer_media_type_compression(const char *mt, enum agsx_compression *ret,
                                      agsx_error_t *err) {
  static const struct {
    const char *mt;
    enum agsx_compression c;
  } known[] = {
      {AGSX_MT_OCI_LAYER, AGSX_COMPRESSION_NONE},
      {AGSX_MT_OCI_LAYER_GZIP, AGSX_COMPRESSION_GZIP},
      {AGSX_MT_OCI_LAYER_ZSTD, AGSX_COMPRESSION_ZSTD},
      {AGSX_MT_DOCKER_LAYER_GZIP, AGSX_COMPRESSION_GZIP},
      /* Deprecated "non-distributable" variants carry the same content. */
      {"application/vnd.oci.image.layer.nondistributable.v1.tar", AGSX_COMPRESSION_NONE},
      {"application/vnd.oci.image.layer.nondistributable.v1.tar+gzip", AGSX_COMPRESSION_GZIP},
      {"application/vnd.oci.image.layer.nondistributable.v1.tar+zstd", AGSX_COMPRESSION_ZSTD},
      {"application/vnd.docker.image.rootfs.foreign.diff.tar.gzip", AGSX_COMPRESSION_GZIP},
  };
  for (size_t i = 0; mt && i < AGSX_ARRAY_SIZE(known); i++)
    if (strcmp(mt, known[i].mt) == 0) {
#ifndef HAVE_ZSTD
      if (known[i].c == AGSX_COMPRESSION_ZSTD)
        return agsx_error_set(err, 0, "zstd layers are not supported by this build");
#endif
      *ret = known[i].c;
      return 0;
    }
  return agsx_error_set(err, 0, "unsupported layer media type `%.100s`", mt ? mt : "");
}

int agsx_descriptor_parse(yajl_val v, struct agsx_descriptor *ret, agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  if (v == NULL || !YAJL_IS_OBJECT(v))
    return agsx_error_set(err, 0, "descriptor is not an object");
  const char *mt = agsx_json_get_string(v, "mediaType");
  const char *digest = agsx_json_get_string(v, "digest");
  int64_t size;
  if (mt == NULL)
    return agsx_error_set(err, 0, "descriptor without a mediaType");
  if (agsx_digest_validate(digest, err) < 0)
    return agsx_error_wrap(err, "descriptor");
  if (!agsx_json_get_int64(v, "size", &size) || size < 0)
    return agsx_error_set(err, 0, "descriptor `%s`: missing or negative size", digest);
  ret->media_type = xstrdup(mt);
  memcpy(ret->digest, digest, AGSX_DIGEST_LEN);
  ret->size = size;
  yajl_val plat = agsx_json_get_object(v, "platform");
  if (plat) {
    ret->os = dup_opt(agsx_json_get_string(plat, "os"));
    ret->architecture = dup_opt(agsx_json_get_string(plat, "architecture"));
    ret->variant = dup_opt(agsx_json_get_string(plat, "variant"));
  }
  yajl_val ann = agsx_json_get_object(v, "annotations");
  if (ann) {
    ret->ref_name = dup_opt(agsx_json_get_string(ann, AGSX_REF_ANNOTATION));
    ret->image_name = dup_opt(agsx_json_get_string(ann, AGSX_CONTAINERD_NAME_ANNOTATION));
  }
  return 0;
}

static int check_schema(yajl_val root, agsx_error_t *err) {
  int64_t sv;
  if (!YAJL_IS_OBJECT(root))
    return agsx_error_set(err, 0, "not a JSON object");
  if (!agsx_json_get_int64(root, "schemaVersion", &sv) || sv != 2)
    return agsx_error_set(err, 0, "missing or unsupported schemaVersion (want 2)");
  return 0;
}

int agsx_manifest_parse(const char *buf, size_t len, struct agsx_manifest *ret, agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  _cleanup_json_ yajl_val root = agsx_json_parse(buf, len, AGSX_IMAGE_JSON_MAX, err);
  if (root == NULL || check_schema(root, err) < 0)
    return agsx_error_wrap(err, "manifest");
  const char *mt = agsx_json_get_string(root, "mediaType");
  /* OCI allows mediaType to be absent in a manifest; Docker requires it. */
  if (mt == NULL)
    mt = AGSX_MT_OCI_MANIFEST;
  if (!agsx_media_type_is_manifest(mt))
    return agsx_error_set(err, 0, "manifest: unsupported media type `%.100s`", mt);
  struct agsx_manifest m = {.media_type = xstrdup(mt)};
  if (agsx_descriptor_parse(agsx_json_get(root, "config"), &m.config, err) < 0)
    goto fail_wrap_config;
  if (strcmp(m.config.media_type, AGSX_MT_OCI_CONFIG) != 0 &&
      strcmp(m.config.media_type, AGSX_MT_DOCKER_CONFIG) != 0) {
    agsx_error_set(err, 0, "manifest: unsupported config media type `%.100s`", m.config.media_type);
    goto fail;
  }
  yajl_val layers = agsx_json_get_array(root, "layers");
  if (layers == NULL) {
    agsx_error_set(err, 0, "manifest: missing `layers` array");
    goto fail;
  }
  if (layers->u.array.len > AGSX_IMAGE_MAX_LAYERS) {
    agsx_error_set(err, 0, "manifest: %zu layers is over the limit of %d", layers->u.array.len,
                   AGSX_IMAGE_MAX_LAYERS);
    goto fail;
  }
  m.layers = xzalloc(layers->u.array.len * sizeof(*m.layers));
  for (size_t i = 0; i < layers->u.array.len; i++) {
    enum agsx_compression c;
    if (agsx_descriptor_parse(layers->u.array.values[i], &m.layers[i], err) < 0) {
      m.n_layers = i + 1;
      agsx_error_wrap(err, "manifest: layer %zu", i);
      goto fail;
    }
    m.n_layers = i + 1;
    if (agsx_layer_media_type_compression(m.layers[i].media_type, &c, err) < 0) {
      agsx_error_wrap(err, "manifest: layer %zu", i);
      goto fail;
    }
  }
  *ret = m;
  return 0;
fail_wrap_config:
  agsx_error_wrap(err, "manifest: config");
fail:
  agsx_manifest_clear(&m);
  return -1;
}

int agsx_index_parse(const char *buf, size_t len, struct agsx_index *ret, agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  _cleanup_json_ yajl_val root = agsx_json_parse(buf, len, AGSX_IMAGE_JSON_MAX, err);
  if (root == NULL || check_schema(root, err) < 0)
    return agsx_error_wrap(err, "index");
  const char *mt = agsx_json_get_string(root, "mediaType");
  if (mt != NULL && !agsx_media_type_is_index(mt))
    return agsx_error_set(err, 0, "index: unsupported media type `%.100s`", mt);
  yajl_val list = agsx_json_get_array(root, "manifests");
  if (list == NULL)
    return agsx_error_set(err, 0, "index: missing `manifests` array");
  if (list->u.array.len > AGSX_IMAGE_MAX_MANIFESTS)
    return agsx_error_set(err, 0, "index: %zu manifests is over the limit of %d", list->u.array.len,
                          AGSX_IMAGE_MAX_MANIFESTS);
  struct agsx_index ix = {.manifests = xzalloc(list->u.array.len * sizeof(*ix.manifests))};
  for (size_t i = 0; i < list->u.array.len; i++) {
    if (agsx_descriptor_parse(list->u.array.values[i], &ix.manifests[i], err) < 0) {
      ix.n_manifests = i + 1;
      agsx_index_clear(&ix);
      return agsx_error_wrap(err, "index: entry %zu", i);
    }
    ix.n_manifests = i + 1;
  }
  *ret = ix;
  return 0;
}

static int parse_config_body(yajl_val root, struct agsx_image_config *c, agsx_error_t *err) {
  if (opt_string(root, "os", &c->os, err) < 0 ||
      opt_string(root, "architecture", &c->architecture, err) < 0 ||
      opt_string(root, "variant", &c->variant, err) < 0 ||
      opt_string(root, "created", &c->created, err) < 0)
    return -1;
  if (c->os == NULL || c->architecture == NULL)
    return agsx_error_set(err, 0, "missing `os` or `architecture`");
  yajl_val rootfs = agsx_json_get_object(root, "rootfs");
  const char *type = agsx_json_get_string(rootfs, "type");
  yajl_val ids = agsx_json_get_array(rootfs, "diff_ids");
  if (type == NULL || strcmp(type, "layers") != 0 || ids == NULL)
    return agsx_error_set(err, 0, "missing or invalid `rootfs` (want type `layers` and diff_ids)");
  if (ids->u.array.len > AGSX_IMAGE_MAX_LAYERS)
    return agsx_error_set(err, 0, "%zu diff_ids is over the limit of %d", ids->u.array.len,
                          AGSX_IMAGE_MAX_LAYERS);
  c->diff_ids = xzalloc((ids->u.array.len + 1) * sizeof(char *));
  for (size_t i = 0; i < ids->u.array.len; i++) {
    yajl_val s = ids->u.array.values[i];
    if (!YAJL_IS_STRING(s) || agsx_digest_validate(s->u.string, err) < 0)
      return agsx_error_set(err, 0, "diff_id %zu is not a sha256 digest", i);
    c->diff_ids[i] = xstrdup(s->u.string);
    c->n_diff_ids = i + 1;
  }
  yajl_val cfg = agsx_json_get(root, "config");
  if (cfg == NULL || YAJL_IS_NULL(cfg))
    return 0;
  if (!YAJL_IS_OBJECT(cfg))
    return agsx_error_set(err, 0, "field `config` is not an object");
  if (opt_strv(cfg, "Env", &c->env, err) < 0 ||
      opt_strv(cfg, "Entrypoint", &c->entrypoint, err) < 0 ||
      opt_strv(cfg, "Cmd", &c->cmd, err) < 0 ||
      opt_string(cfg, "WorkingDir", &c->working_dir, err) < 0 ||
      opt_string(cfg, "User", &c->user, err) < 0 ||
      opt_string(cfg, "StopSignal", &c->stop_signal, err) < 0)
    return -1;
  return 0;
}

int agsx_image_config_parse(const char *buf, size_t len, struct agsx_image_config *ret,
                            agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  _cleanup_json_ yajl_val root = agsx_json_parse(buf, len, AGSX_IMAGE_JSON_MAX, err);
  if (root == NULL)
    return agsx_error_wrap(err, "image config");
  if (!YAJL_IS_OBJECT(root))
    return agsx_error_set(err, 0, "image config: not a JSON object");
  struct agsx_image_config c = {0};
  if (parse_config_body(root, &c, err) < 0) {
    agsx_image_config_clear(&c);
    return agsx_error_wrap(err, "image config");
  }
  *ret = c;
  return 0;
}

bool agsx_platform_is_supported(const char *os, const char *architecture) {
  return os && architecture && strcmp(os, "linux") == 0 && strcmp(architecture, "amd64") == 0;
}

int agsx_image_config_check_platform(const struct agsx_image_config *c, agsx_error_t *err) {
  if (!agsx_platform_is_supported(c->os, c->architecture))
    return agsx_error_set(err, 0, "image is for %s/%s: agsx runs only " AGSX_PLATFORM " images",
                          c->os ? c->os : "?", c->architecture ? c->architecture : "?");
  return 0;
}

int agsx_index_select_platform(const struct agsx_index *ix, agsx_error_t *err) {
  char seen[512] = "";
  size_t n = 0;
  for (size_t i = 0; i < ix->n_manifests; i++) {
    const struct agsx_descriptor *d = &ix->manifests[i];
    if (!agsx_media_type_is_manifest(d->media_type))
      continue;
    /* An entry without a platform in a single-image index is taken as is;
     * its config is checked for linux/amd64 afterwards. */
    if (d->os == NULL && d->architecture == NULL && ix->n_manifests == 1)
      return (int)i;
    if (agsx_platform_is_supported(d->os, d->architecture))
      return (int)i;
    if (n < sizeof(seen) - 64)
      n += (size_t)snprintf(seen + n, sizeof(seen) - n, "%s%.20s/%.20s", n ? ", " : "",
                            d->os ? d->os : "?", d->architecture ? d->architecture : "?");
  }
  return agsx_error_set(err, 0, "no " AGSX_PLATFORM " image in the index (it has: %s)",
                        n ? seen : "no image manifests");
}

/* Docker's reference grammar, simplified: [host[:port]/]path[:tag|@digest]
 * with lowercase path components of [a-z0-9] separated by ., _, __ or -. */
static bool valid_component(const char *s, size_t n) {
  if (n == 0 || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[n - 1]))
    return false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))
      continue;
    if (c == '.' || c == '-' || c == '_')
      continue;
    return false;
  }
  return true;
}

/* host[:port]: dot-separated labels of letters, digits and inner dashes. */
static bool valid_host(const char *s, size_t n) {
  const char *colon = memchr(s, ':', n);
  size_t hn = colon ? (size_t)(colon - s) : n;
  if (hn == 0 || hn > 253)
    return false;
  if (colon) {
    size_t pn = n - hn - 1;
    if (pn == 0 || pn > 5)
      return false;
    for (size_t i = 0; i < pn; i++)
      if (!isdigit((unsigned char)colon[1 + i]))
        return false;
  }
  size_t label = 0;
  for (size_t i = 0; i < hn; i++) {
    char c = s[i];
    if (c == '.') {
      if (label == 0 || s[i - 1] == '-')
        return false;
      label = 0;
    } else if (isalnum((unsigned char)c) || (c == '-' && label > 0)) {
      label++;
    } else {
      return false;
    }
  }
  return label > 0 && s[hn - 1] != '-';
}

static bool valid_tag(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > 128 || !(isalnum((unsigned char)s[0]) || s[0] == '_'))
    return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '.' && s[i] != '-')
      return false;
  return true;
}

char *agsx_image_ref_normalize(const char *ref, agsx_error_t *err) {
  if (ref == NULL || *ref == '\0' || strlen(ref) > 255) {
    agsx_error_set(err, 0, "invalid image reference `%.80s`", ref ? ref : "");
    return NULL;
  }
  _cleanup_free_ char *name = xstrdup(ref);
  const char *digest = NULL, *tag = NULL;
  char *at = strchr(name, '@');
  if (at) {
    *at = '\0';
    digest = at + 1;
    if (agsx_digest_validate(digest, err) < 0) {
      agsx_error_wrap(err, "invalid image reference `%s`", ref);
      return NULL;
    }
  }
  char *slash = strrchr(name, '/');
  char *colon = strrchr(slash ? slash : name, ':');
  if (colon) {
    *colon = '\0';
    tag = colon + 1;
    if (!valid_tag(tag)) {
      agsx_error_set(err, 0, "invalid image reference `%s`: bad tag `%s`", ref, tag);
      return NULL;
    }
  }
  /* Check the path components; the first may be a registry host. */
  const char *p = name;
  bool first = true;
  for (;;) {
    const char *s = strchr(p, '/');
    size_t n = s ? (size_t)(s - p) : strlen(p);
    bool is_host =
        first && s != NULL &&
        (memchr(p, '.', n) || memchr(p, ':', n) || (n == 9 && strncmp(p, "localhost", 9) == 0));
    if (!(is_host ? valid_host(p, n) : valid_component(p, n))) {
      agsx_error_set(err, 0,
                     "invalid image reference `%s`: names are lowercase letters, digits and "
                     "separators (. _ -)",
                     ref);
      return NULL;
    }
    first = false;
    if (s == NULL)
      break;
    p = s + 1;
  }
  /* Docker's familiar form: docker.io/library/x is x, docker.io/u/x is u/x,
   * so a name pulled in either spelling is found in both. */
  const char *short_name = name;
  if (agsx_str_has_prefix(short_name, "docker.io/"))
    short_name += strlen("docker.io/");
  else if (agsx_str_has_prefix(short_name, "index.docker.io/"))
    short_name += strlen("index.docker.io/");
  /* Not when what remains would read as a registry host of its own
   * (docker.io/docker.io/x): it must stay idempotent. */
  const char *rest_slash = strchr(short_name, '/');
  if (short_name != name && rest_slash) {
    size_t n = (size_t)(rest_slash - short_name);
    if (memchr(short_name, '.', n) || memchr(short_name, ':', n) ||
        (n == 9 && strncmp(short_name, "localhost", 9) == 0))
      short_name = name;
  }
  if (short_name != name && agsx_str_has_prefix(short_name, "library/") &&
      strchr(short_name + strlen("library/"), '/') == NULL)
    short_name += strlen("library/");
  char *out = digest && !tag ? xasprintf("%s@%s", short_name, digest)
              : digest       ? xasprintf("%s:%s@%s", short_name, tag, digest)
                             : xasprintf("%s:%s", short_name, tag ? tag : "latest");
  /* The normalised form obeys the same bound (normalising is idempotent). */
  if (strlen(out) > 255) {
    free(out);
    agsx_error_set(err, 0, "invalid image reference `%.80s…`: longer than 255 characters", ref);
    return NULL;
  }
  return out;
}

void agsx_image_ref_clear(struct agsx_image_ref *r) {
  free(r->domain);
  free(r->path);
  free(r->tag);
  free(r->digest);
  free(r->familiar);
  memset(r, 0, sizeof(*r));
}

int agsx_image_ref_parse(const char *ref, struct agsx_image_ref *ret, agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  _cleanup_free_ char *norm = agsx_image_ref_normalize(ref, err);
  if (norm == NULL)
    return -1;
  ret->familiar = xstrdup(norm);
  char *at = strchr(norm, '@');
  if (at) {
    *at = '\0';
    ret->digest = xstrdup(at + 1);
  }
  char *slash = strrchr(norm, '/');
  char *colon = strrchr(slash ? slash : norm, ':');
  if (colon) {
    *colon = '\0';
    ret->tag = xstrdup(colon + 1);
  }
  /* The first component is a registry when it looks like a host (as the
   * normaliser decided); else the image is on Docker Hub. */
  char *first = strchr(norm, '/');
  size_t n = first ? (size_t)(first - norm) : 0;
  if (first && (memchr(norm, '.', n) || memchr(norm, ':', n) ||
                (n == 9 && strncmp(norm, "localhost", 9) == 0))) {
    ret->domain = xstrndup(norm, n);
    ret->path = xstrdup(first + 1);
  } else {
    ret->domain = xstrdup("docker.io");
    ret->path = first ? xstrdup(norm) : xasprintf("library/%s", norm);
  }
  return 0;
}
