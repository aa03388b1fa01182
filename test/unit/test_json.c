/* Unit tests: json helpers (bounds, accessors, generation). */
#include "config.h"

#include "util/json.h"
#include "tap.h"

/* The bound a caller checks before parsing: never under the tree's count. */
static void values_max(void) {
  tap_is_int(agsx_json_values_max("1", 1), 1, "a scalar: one value");
  const char *d = "{\"a\":[1,2,3],\"b\":{\"c\":null}}";
  tap_is_int(agsx_json_values_max(d, strlen(d)), 7,
             "objects, arrays and commas: the 7 values of its tree");
  d = "[\"a,b,[c\",\"\\\",{\"]";
  tap_is_int(agsx_json_values_max(d, strlen(d)), 3,
             "commas and brackets in strings (escaped quotes too) do not count");
}

int main(void) {
  values_max();
  agsx_error_t err = NULL;
  const char *doc = "{\"a\":\"x\",\"n\":42,\"arr\":[1,2],\"o\":{\"k\":true}}";
  yajl_val v = agsx_json_parse(doc, strlen(doc), 1000, &err);
  tap_ok(v != NULL, "parse object");
  tap_is_str(agsx_json_get_string(v, "a"), "x", "string field");
  int64_t n = 0;
  tap_ok(agsx_json_get_int64(v, "n", &n) && n == 42, "integer field");
  tap_ok(agsx_json_get_array(v, "arr") != NULL, "array field");
  tap_ok(agsx_json_get_object(v, "o") != NULL, "object field");
  tap_ok(agsx_json_get_string(v, "n") == NULL, "type mismatch gives NULL");
  tap_ok(agsx_json_get(v, "missing") == NULL, "missing key gives NULL");

  yajl_gen g = agsx_json_gen_new(false);
  agsx_json_value(g, v);
  size_t len;
  char *out = agsx_json_gen_steal(g, &len);
  tap_is_str(out, doc, "re-emitted unchanged");
  free(out);
  yajl_gen_free(g);
  yajl_tree_free(v);

  tap_ok(agsx_json_parse(doc, strlen(doc), 10, &err) == NULL && strstr(err->msg, "over the limit"),
         "size limit");
  agsx_error_free(&err);
  char deep[400];
  memset(deep, '[', 200);
  memset(deep + 200, ']', 200);
  tap_ok(agsx_json_parse(deep, sizeof(deep), 1000, &err) == NULL && strstr(err->msg, "nested"),
         "depth limit");
  agsx_error_free(&err);
  yajl_val s = agsx_json_parse("{\"a\":\"[[[[\"}", 12, 100, &err);
  tap_ok(s != NULL, "string with brackets parses");
  yajl_tree_free(s);
  tap_ok(agsx_json_parse("{\"a\":1} x", 9, 100, &err) == NULL, "trailing garbage refused");
  agsx_error_free(&err);
  tap_ok(agsx_json_parse("{\"a\":\0}", 7, 100, &err) == NULL && strstr(err->msg, "NUL"),
         "NUL byte refused");
  agsx_error_free(&err);
  tap_ok(agsx_json_parse("{", 1, 100, &err) == NULL && strstr(err->msg, "invalid JSON"),
         "truncated refused");
  agsx_error_free(&err);

  tap_ok(agsx_utf8_text("", 0) && agsx_utf8_text("plain\n", 6) &&
             agsx_utf8_text("\xc3\xa9t\xc3\xa9", 5),
         "utf8_text: text");
  tap_ok(!agsx_utf8_text("a\0b", 3) && !agsx_utf8_text("\xff", 1) && !agsx_utf8_text("\xc3", 1) &&
             !agsx_utf8_text("\xed\xa0\x80", 3),
         "utf8_text: NUL, a bad byte, a cut sequence, a surrogate are not");

  g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "s", "q\"\n");
  agsx_json_kv_str(g, "null", NULL);
  agsx_json_kv_int(g, "i", -7);
  agsx_json_kv_bool(g, "b", true);
  yajl_gen_map_close(g);
  out = agsx_json_gen_steal(g, NULL);
  tap_is_str(out, "{\"s\":\"q\\\"\\n\",\"null\":null,\"i\":-7,\"b\":true}", "generation escapes");
  free(out);
  yajl_gen_free(g);
  return tap_done();
}
