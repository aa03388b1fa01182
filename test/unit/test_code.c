/* Unit tests: code items (bridge lines checked and re-written as E2B's
 * ASCII-only lines) and language names. */
#include "config.h"

#include "code/code.h"
#include "tap.h"

#define RID "00112233445566778899aabbccddeeff"

static int parse(const char *line, struct agsx_code_item *it) {
  agsx_error_t err = NULL;
  int r = agsx_code_item_parse(line, strlen(line), RID, it, &err);
  agsx_error_free(&err);
  return r;
}

static void test_items(void) {
  struct agsx_code_item it;
  tap_is_int(parse("{\"id\":\"" RID "\",\"type\":\"stdout\",\"text\":\"h\\u00e9\\ud83d\\ude00\\n\","
                   "\"timestamp\":\"T\"}",
                   &it),
             1, "stdout line parsed");
  tap_is_str(it.line,
             "{\"type\":\"stdout\",\"text\":\"h\\u00e9\\ud83d\\ude00\\n\",\"timestamp\":\"T\"}",
             "stdout re-written ASCII-only, non-BMP as a surrogate pair");
  tap_is_str(it.text, "h\xc3\xa9\xf0\x9f\x98\x80\n", "text decoded");
  agsx_code_item_clear(&it);

  tap_is_int(parse("{\"id\":\"" RID "\",\"type\":\"result\",\"png\":\"iVBO\",\"text\":\"2\","
                   "\"extra\":{},\"evil\":1,\"is_main_result\":true}",
                   &it),
             1, "result parsed");
  tap_is_str(
      it.line,
      "{\"type\":\"result\",\"text\":\"2\",\"png\":\"iVBO\",\"extra\":{},\"is_main_result\":true}",
      "result: known keys only, E2B's order");
  tap_ok(it.is_main_result, "main result");
  agsx_code_item_clear(&it);

  tap_is_int(parse("{\"id\":\"" RID "\",\"type\":\"result\",\"json\":{\"a\":[1,2.5,null]}}", &it),
             1, "json result");
  tap_is_str(
      it.line,
      "{\"type\":\"result\",\"json\":{\"a\":[1,2.5,null]},\"extra\":{},\"is_main_result\":false}",
      "json kept as a value, extra always there");
  agsx_code_item_clear(&it);

  tap_is_int(parse("{\"id\":\"" RID "\",\"type\":\"result\",\"html\":5}", &it), -1,
             "a result field of the wrong type is refused");
  tap_is_int(parse("{\"id\":\"" RID "\",\"type\":\"error\",\"name\":\"ZeroDivisionError\"}", &it),
             1, "error");
  tap_is_str(
      it.line,
      "{\"type\":\"error\",\"name\":\"ZeroDivisionError\",\"value\":\"\",\"traceback\":\"\"}",
      "error: missing strings are empty");
  agsx_code_item_clear(&it);
  tap_is_int(
      parse("{\"id\":\"ffff2233445566778899aabbccddeeff\",\"type\":\"stdout\",\"text\":\"x\"}",
            &it),
      0, "another request's line is skipped");
  tap_is_int(parse("{\"id\":\"" RID "\",\"type\":\"pong\",\"ok\":true}", &it), 0,
             "unknown types ignored");
  tap_is_int(parse("{\"id\":\"" RID "\",\"type\":\"end_of_execution\"}", &it), 1, "end");
  tap_is_int(it.type, AGSX_CODE_END, "end type");
  agsx_code_item_clear(&it);
  tap_is_int(parse("{\"id\":\"" RID "\",\"type\":\"truncated\",\"bytes\":12}", &it), 1,
             "truncated");
  tap_is_int(it.dropped, 12, "dropped bytes");
  tap_ok(it.line == NULL, "truncated has no E2B line");
  agsx_code_item_clear(&it);
  tap_is_int(parse("{\"id\":\"" RID "\",\"type\":\"stdout\",\"text\":\"a\"", &it), -1,
             "broken JSON refused");

  char *b = NULL;
  size_t n = 0, cap = 0;
  agsx_code_json_ascii_str(&b, &n, &cap,
                           "\xff"
                           "a\x01\"\\",
                           5);
  tap_is_str(b, "\"\\ufffda\\u0001\\\"\\\\\"", "invalid UTF-8 and controls escaped");
  free(b);
}

static void test_language(void) {
  char *l = NULL;
  agsx_error_t err = NULL;
  tap_ok(agsx_code_language(NULL, &l, &err) == 0 && strcmp(l, "python") == 0, "default python");
  free(l);
  tap_ok(agsx_code_language(" Bash ", &l, &err) == 0 && strcmp(l, "bash") == 0, "Bash -> bash");
  free(l);
  tap_ok(agsx_code_language("js", &l, &err) == 0 && strcmp(l, "javascript") == 0,
         "js -> javascript");
  free(l);
  tap_ok(agsx_code_language("ts", &l, &err) == 0 && strcmp(l, "typescript") == 0,
         "ts -> typescript");
  free(l);
  tap_ok(agsx_code_language("R", &l, &err) == 0 && strcmp(l, "r") == 0, "R -> r");
  free(l);
  tap_ok(agsx_code_language("java", &l, &err) < 0 && agsx_error_errno(&err) == ENOTSUP &&
             strstr(err->msg, "java"),
         "java refused: %s", err ? err->msg : "");
  agsx_error_free(&err);
  tap_ok(agsx_code_language("a b", &l, &err) < 0 && agsx_error_errno(&err) == EINVAL,
         "junk refused");
  agsx_error_free(&err);
}

int main(void) {
  test_items();
  test_language();
  return tap_done();
}
