/* agsx — json helpers over yajl. */
#include "config.h"

#include "util/json.h"

#include <string.h>

void agsx_json_freep(yajl_val *v) {
  if (*v)
    yajl_tree_free(*v);
  *v = NULL;
}

void agsx_json_gen_freep(yajl_gen *g) {
  if (*g)
    yajl_gen_free(*g);
  *g = NULL;
}

/* One pass over BUF[0..LEN) outside its strings: the deepest nesting,
 * and how many values a yajl tree of it would have at most (its arrays,
 * objects and commas). */
static void scan(const char *buf, size_t len, int *ret_depth, size_t *ret_values) {
  int depth = 0, deepest = 0;
  size_t values = 1;
  bool in_str = false;
  for (size_t i = 0; i < len; i++) {
    char c = buf[i];
    if (in_str) {
      if (c == '\\')
        i++;
      else if (c == '"')
        in_str = false;
    } else if (c == '"') {
      in_str = true;
    } else if (c == '{' || c == '[') {
      values++;
      if (++depth > deepest)
        deepest = depth;
    } else if (c == '}' || c == ']') {
      depth--;
    } else if (c == ',') {
      values++;
    }
  }
  *ret_depth = deepest;
  *ret_values = values;
}

size_t agsx_json_values_max(const char *buf, size_t len) {
  int depth;
  size_t values;
  scan(buf, len, &depth, &values);
  return values;
}

yajl_val agsx_json_parse(const char *buf, size_t len, size_t max, agsx_error_t *err) {
  if (len > max) {
    agsx_error_set(err, 0, "JSON document of %zu bytes is over the limit of %zu bytes", len, max);
    return NULL;
  }
  if (memchr(buf, '\0', len) != NULL) {
    agsx_error_set(err, 0, "invalid JSON: NUL byte inside the document");
    return NULL;
  }
  /* yajl_tree_free() recurses, so a document nested a million levels deep
   * would overflow the stack when freed: refuse deep nesting before parsing. */
  int depth;
  size_t values;
  scan(buf, len, &depth, &values);
  if (depth > AGSX_JSON_MAX_DEPTH) {
    agsx_error_set(err, 0, "invalid JSON: nested deeper than %d levels", AGSX_JSON_MAX_DEPTH);
    return NULL;
  }
  _cleanup_free_ char *copy = xstrndup(buf, len);
  char ebuf[256] = "";
  yajl_val v = yajl_tree_parse(copy, ebuf, sizeof(ebuf));
  if (v == NULL) {
    char *nl = strchr(ebuf, '\n');
    if (nl)
      *nl = '\0';
    agsx_error_set(err, 0, "invalid JSON: %s", ebuf[0] ? ebuf : "parse error");
    return NULL;
  }
  return v;
}

yajl_val agsx_json_get(yajl_val obj, const char *key) {
  if (obj == NULL || !YAJL_IS_OBJECT(obj))
    return NULL;
  for (size_t i = 0; i < obj->u.object.len; i++)
    if (strcmp(obj->u.object.keys[i], key) == 0)
      return obj->u.object.values[i];
  return NULL;
}

const char *agsx_json_get_string(yajl_val obj, const char *key) {
  yajl_val v = agsx_json_get(obj, key);
  return v && YAJL_IS_STRING(v) ? v->u.string : NULL;
}

bool agsx_json_get_int64(yajl_val obj, const char *key, int64_t *ret) {
  yajl_val v = agsx_json_get(obj, key);
  if (v == NULL || !YAJL_IS_INTEGER(v))
    return false;
  *ret = YAJL_GET_INTEGER(v);
  return true;
}

yajl_val agsx_json_get_array(yajl_val obj, const char *key) {
  yajl_val v = agsx_json_get(obj, key);
  return v && YAJL_IS_ARRAY(v) ? v : NULL;
}

yajl_val agsx_json_get_object(yajl_val obj, const char *key) {
  yajl_val v = agsx_json_get(obj, key);
  return v && YAJL_IS_OBJECT(v) ? v : NULL;
}

yajl_gen agsx_json_gen_new(bool pretty) {
  yajl_gen g = yajl_gen_alloc(NULL);
  if (g == NULL)
    abort();
  yajl_gen_config(g, yajl_gen_beautify, pretty ? 1 : 0);
  yajl_gen_config(g, yajl_gen_validate_utf8, 0);
  return g;
}

void agsx_json_str(yajl_gen g, const char *s) {
  if (s == NULL)
    yajl_gen_null(g);
  else
    yajl_gen_string(g, (const unsigned char *)s, strlen(s));
}

void agsx_json_key(yajl_gen g, const char *key) { agsx_json_str(g, key); }

/* Length of the valid UTF-8 sequence at P (at most N bytes), 0 if invalid. */
static size_t utf8_len(const unsigned char *p, size_t n) {
  if (p[0] < 0x80)
    return 1;
  size_t len = p[0] >= 0xf0 && p[0] <= 0xf4  ? 4
               : p[0] >= 0xe0                ? 3
               : p[0] >= 0xc2 && p[0] < 0xe0 ? 2
                                             : 0;
  if (len == 0 || len > n)
    return 0;
  for (size_t i = 1; i < len; i++)
    if ((p[i] & 0xc0) != 0x80)
      return 0;
  /* overlong 3/4-byte forms, surrogates, beyond U+10FFFF */
  if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0) ||
      (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))
    return 0;
  return len;
}

void agsx_json_bytes(yajl_gen g, const char *buf, size_t len) {
  const unsigned char *p = (const unsigned char *)buf;
  char *out = xmalloc(len * 3 + 1);
  size_t k = 0;
  for (size_t i = 0; i < len;) {
    size_t l = utf8_len(p + i, len - i);
    if (l == 0) {
      memcpy(out + k, "\xef\xbf\xbd", 3); /* U+FFFD */
      k += 3;
      i++;
      continue;
    }
    memcpy(out + k, p + i, l);
    k += l;
    i += l;
  }
  yajl_gen_string(g, (const unsigned char *)out, k);
  free(out);
}

bool agsx_utf8_text(const char *buf, size_t len) {
  const unsigned char *p = (const unsigned char *)buf;
  for (size_t i = 0; i < len;) {
    size_t l = p[i] == 0 ? 0 : utf8_len(p + i, len - i);
    if (l == 0)
      return false;
    i += l;
  }
  return true;
}

void agsx_json_kv_str(yajl_gen g, const char *key, const char *value) {
  agsx_json_key(g, key);
  agsx_json_str(g, value);
}

void agsx_json_kv_int(yajl_gen g, const char *key, int64_t value) {
  agsx_json_key(g, key);
  yajl_gen_integer(g, value);
}

void agsx_json_kv_bool(yajl_gen g, const char *key, bool value) {
  agsx_json_key(g, key);
  yajl_gen_bool(g, value);
}

void agsx_json_value(yajl_gen g, yajl_val v) {
  if (v == NULL || YAJL_IS_NULL(v)) {
    yajl_gen_null(g);
  } else if (YAJL_IS_STRING(v)) {
    agsx_json_str(g, v->u.string);
  } else if (YAJL_IS_NUMBER(v)) {
    yajl_gen_number(g, v->u.number.r, strlen(v->u.number.r));
  } else if (YAJL_IS_TRUE(v)) {
    yajl_gen_bool(g, 1);
  } else if (YAJL_IS_FALSE(v)) {
    yajl_gen_bool(g, 0);
  } else if (YAJL_IS_ARRAY(v)) {
    yajl_gen_array_open(g);
    for (size_t i = 0; i < v->u.array.len; i++)
      agsx_json_value(g, v->u.array.values[i]);
    yajl_gen_array_close(g);
  } else if (YAJL_IS_OBJECT(v)) {
    yajl_gen_map_open(g);
    for (size_t i = 0; i < v->u.object.len; i++) {
      agsx_json_key(g, v->u.object.keys[i]);
      agsx_json_value(g, v->u.object.values[i]);
    }
    yajl_gen_map_close(g);
  }
}

char *agsx_json_gen_steal(yajl_gen g, size_t *ret_len) {
  const unsigned char *buf;
  size_t len;
  yajl_gen_get_buf(g, &buf, &len);
  if (ret_len)
    *ret_len = len;
  return xstrndup((const char *)buf, len);
}
