/* agsx — code: language names, and a bridge line to a checked item and
 * E2B's ASCII-only line. */
#include "config.h"

#include "code/code.h"

#include <ctype.h>
#include <string.h>

struct abuf {
  char *p;
  size_t n, cap;
};

static void put(struct abuf *b, const char *s, size_t len) {
  if (b->n + len + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + len + 1)
      cap *= 2;
    b->p = xrealloc(b->p, cap);
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, len);
  b->n += len;
  b->p[b->n] = '\0';
}

static void puts_(struct abuf *b, const char *s) { put(b, s, strlen(s)); }

/* The length of the valid UTF-8 sequence at P (at most N bytes) and its
 * code point, or 0 when it is invalid (overlong, surrogate, beyond U+10FFFF). */
static size_t utf8_decode(const unsigned char *p, size_t n, uint32_t *cp) {
  if (p[0] < 0x80)
    return *cp = p[0], 1;
  size_t len = p[0] >= 0xf0 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc2 ? 2 : 0;
  if (len == 0 || len > n || p[0] > 0xf4)
    return 0;
  uint32_t c = p[0] & (0x3f >> (len - 1));
  for (size_t i = 1; i < len; i++) {
    if ((p[i] & 0xc0) != 0x80)
      return 0;
    c = (c << 6) | (p[i] & 0x3f);
  }
  if ((len == 3 && c < 0x800) || (len == 4 && (c < 0x10000 || c > 0x10ffff)) ||
      (c >= 0xd800 && c <= 0xdfff))
    return 0;
  return *cp = c, len;
}

static void put_u(struct abuf *b, uint32_t u) {
  char e[16];
  snprintf(e, sizeof(e), "\\u%04x", (unsigned)u);
  put(b, e, 6);
}

static void put_str(struct abuf *b, const char *s, size_t len) {
  const unsigned char *p = (const unsigned char *)s;
  put(b, "\"", 1);
  for (size_t i = 0; i < len;) {
    uint32_t c;
    size_t l = utf8_decode(p + i, len - i, &c);
    if (l == 0) {
      put_u(b, 0xfffd);
      i++;
      continue;
    }
    i += l;
    if (c == '"')
      put(b, "\\\"", 2);
    else if (c == '\\')
      put(b, "\\\\", 2);
    else if (c == '\n')
      put(b, "\\n", 2);
    else if (c == '\t')
      put(b, "\\t", 2);
    else if (c == '\r')
      put(b, "\\r", 2);
    else if (c >= 0x20 && c < 0x7f) {
      char ch = (char)c;
      put(b, &ch, 1);
    } else if (c < 0x10000) {
      put_u(b, c);
    } else {
      c -= 0x10000;
      put_u(b, 0xd800 + (c >> 10));
      put_u(b, 0xdc00 + (c & 0x3ff));
    }
  }
  put(b, "\"", 1);
}

void agsx_code_json_ascii_str(char **buf, size_t *len, size_t *cap, const char *s, size_t slen) {
  struct abuf b = {*buf, *len, *cap};
  put_str(&b, s, slen);
  *buf = b.p, *len = b.n, *cap = b.cap;
}

/* Any parsed value, again (yajl bounded its depth). */
static void put_value(struct abuf *b, yajl_val v) {
  if (v == NULL || YAJL_IS_NULL(v)) {
    puts_(b, "null");
  } else if (YAJL_IS_STRING(v)) {
    put_str(b, v->u.string, strlen(v->u.string));
  } else if (YAJL_IS_NUMBER(v)) {
    puts_(b, v->u.number.r); /* the text yajl validated */
  } else if (YAJL_IS_TRUE(v)) {
    puts_(b, "true");
  } else if (YAJL_IS_FALSE(v)) {
    puts_(b, "false");
  } else if (YAJL_IS_OBJECT(v)) {
    put(b, "{", 1);
    for (size_t i = 0; i < v->u.object.len; i++) {
      if (i)
        put(b, ",", 1);
      put_str(b, v->u.object.keys[i], strlen(v->u.object.keys[i]));
      put(b, ":", 1);
      put_value(b, v->u.object.values[i]);
    }
    put(b, "}", 1);
  } else if (YAJL_IS_ARRAY(v)) {
    put(b, "[", 1);
    for (size_t i = 0; i < v->u.array.len; i++) {
      if (i)
        put(b, ",", 1);
      put_value(b, v->u.array.values[i]);
    }
    put(b, "]", 1);
  }
}

static const char *str_or_empty(yajl_val obj, const char *key) {
  const char *s = agsx_json_get_string(obj, key);
  return s ? s : "";
}

static void kv_str(struct abuf *b, const char *key, const char *value) {
  put(b, ",\"", 2);
  puts_(b, key);
  put(b, "\":", 2);
  put_str(b, value, strlen(value));
}

/* Result fields in E2B's order; strings except json, data and chart. */
static const struct {
  const char *key;
  bool any;
} result_fields[] = {
    {"text", false}, {"html", false},       {"markdown", false}, {"svg", false},
    {"png", false},  {"jpeg", false},       {"pdf", false},      {"latex", false},
    {"json", true},  {"javascript", false}, {"data", true},      {"chart", true},
};

static int parse_result(struct abuf *b, yajl_val obj, struct agsx_code_item *it,
                        agsx_error_t *err) {
  puts_(b, "{\"type\":\"result\"");
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(result_fields); i++) {
    yajl_val v = agsx_json_get(obj, result_fields[i].key);
    if (v == NULL || YAJL_IS_NULL(v))
      continue;
    if (!result_fields[i].any && !YAJL_IS_STRING(v))
      return agsx_error_set(err, 0, "result field `%s` is not a string", result_fields[i].key);
    put(b, ",\"", 2);
    puts_(b, result_fields[i].key);
    put(b, "\":", 2);
    put_value(b, v);
  }
  yajl_val extra = agsx_json_get(obj, "extra");
  put(b, ",\"extra\":", 9);
  if (extra && YAJL_IS_OBJECT(extra))
    put_value(b, extra);
  else
    put(b, "{}", 2);
  yajl_val main = agsx_json_get(obj, "is_main_result");
  it->is_main_result = main && YAJL_IS_TRUE(main);
  puts_(b, it->is_main_result ? ",\"is_main_result\":true}" : ",\"is_main_result\":false}");
  it->text = agsx_json_get_string(obj, "text");
  return 0;
}

static int build(struct abuf *b, const char *type, yajl_val obj, struct agsx_code_item *it,
                 agsx_error_t *err) {
  int64_t n = 0;
  if (strcmp(type, "number_of_executions") == 0) {
    if (!agsx_json_get_int64(obj, "execution_count", &n) || n < 0)
      return agsx_error_set(err, 0, "number_of_executions without a count");
    it->type = AGSX_CODE_COUNT;
    it->execution_count = n;
    char s[80];
    snprintf(s, sizeof(s), "{\"type\":\"number_of_executions\",\"execution_count\":%lld}",
             (long long)n);
    puts_(b, s);
  } else if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0) {
    it->type = type[3] == 'o' ? AGSX_CODE_STDOUT : AGSX_CODE_STDERR;
    it->text = agsx_json_get_string(obj, "text");
    if (it->text == NULL)
      return agsx_error_set(err, 0, "%s without text", type);
    puts_(b, "{\"type\":\"");
    puts_(b, type);
    put(b, "\"", 1);
    kv_str(b, "text", it->text);
    const char *ts = agsx_json_get_string(obj, "timestamp");
    if (ts)
      kv_str(b, "timestamp", ts);
    put(b, "}", 1);
  } else if (strcmp(type, "error") == 0) {
    it->type = AGSX_CODE_ERROR;
    it->name = str_or_empty(obj, "name");
    it->value = str_or_empty(obj, "value");
    it->traceback = str_or_empty(obj, "traceback");
    puts_(b, "{\"type\":\"error\"");
    kv_str(b, "name", it->name);
    kv_str(b, "value", it->value);
    kv_str(b, "traceback", it->traceback);
    put(b, "}", 1);
  } else if (strcmp(type, "result") == 0) {
    it->type = AGSX_CODE_RESULT;
    if (parse_result(b, obj, it, err) < 0)
      return -1;
  } else if (strcmp(type, "truncated") == 0) {
    it->type = AGSX_CODE_TRUNCATED;
    it->dropped = agsx_json_get_int64(obj, "bytes", &n) && n > 0 ? (uint64_t)n : 0;
  } else if (strcmp(type, "end_of_execution") == 0) {
    it->type = AGSX_CODE_END;
  } else {
    return 0; /* pong, restarted and what a newer bridge may add */
  }
  return 1;
}

void agsx_code_item_clear(struct agsx_code_item *it) {
  free(it->line);
  agsx_json_freep(&it->obj);
  memset(it, 0, sizeof(*it));
}

int agsx_code_item_parse(const char *line, size_t len, const char *rid, struct agsx_code_item *ret,
                         agsx_error_t *err) {
  /* The bridge writes the id first: other requests' lines (most of a busy
   * context's stream) are skipped without parsing them. */
  char prefix[64];
  int pl = snprintf(prefix, sizeof(prefix), "{\"id\":\"%s\"", rid);
  if (pl < 0 || (size_t)pl >= sizeof(prefix) || len < (size_t)pl || memcmp(line, prefix, pl) != 0)
    return 0;
  memset(ret, 0, sizeof(*ret));
  yajl_val obj = agsx_json_parse(line, len, AGSX_CODE_LINE_MAX, err);
  if (obj == NULL)
    return agsx_error_wrap(err, "a line from the code context");
  const char *id = agsx_json_get_string(obj, "id");
  const char *type = agsx_json_get_string(obj, "type");
  if (id == NULL || strcmp(id, rid) != 0 || type == NULL) {
    yajl_tree_free(obj);
    return 0;
  }
  struct abuf b = {0};
  int r = build(&b, type, obj, ret, err);
  if (r <= 0) {
    free(b.p);
    yajl_tree_free(obj);
    memset(ret, 0, sizeof(*ret));
    return r < 0 ? agsx_error_wrap(err, "a line from the code context") : 0;
  }
  ret->obj = obj;
  ret->line = b.p;
  ret->line_len = b.n;
  return 1;
}

static const char *const languages[] = {"python", "bash", "javascript", "typescript", "r"};

int agsx_code_language(const char *in, char **ret, agsx_error_t *err) {
  if (in == NULL)
    in = "";
  while (isspace((unsigned char)*in))
    in++;
  size_t n = strlen(in);
  while (n && isspace((unsigned char)in[n - 1]))
    n--;
  if (n > 64)
    return agsx_error_set(err, EINVAL, "invalid language: too long");
  char l[65];
  for (size_t i = 0; i < n; i++)
    l[i] = (char)tolower((unsigned char)in[i]);
  l[n] = '\0';
  const char *norm = n == 0                 ? "python"
                     : strcmp(l, "js") == 0 ? "javascript"
                     : strcmp(l, "ts") == 0 ? "typescript"
                                            : l;
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(languages); i++)
    if (strcmp(norm, languages[i]) == 0)
      return *ret = xstrdup(norm), 0;
  for (const char *p = norm; *p; p++)
    if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '+')
      return agsx_error_set_quiet(err, EINVAL, "invalid language");
  return agsx_error_set_quiet(
      err, ENOTSUP,
      "no kernel for language `%s` (agsx has python, bash, javascript, typescript and r)", norm);
}
