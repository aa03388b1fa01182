/* agsx — json: bounded parsing and typed access on yajl trees, and output
 * through yajl_gen. Untrusted JSON (manifests, configs, state records) is
 * size- and depth-capped before yajl sees it. */
#ifndef AGSX_JSON_H
#define AGSX_JSON_H

#include "util/util.h"

#include <yajl/yajl_gen.h>
#include <yajl/yajl_tree.h>

#define AGSX_JSON_MAX_DEPTH 64

void agsx_json_freep(yajl_val *v);
void agsx_json_gen_freep(yajl_gen *g);
#define _cleanup_json_ _cleanup_(agsx_json_freep)
#define _cleanup_gen_ _cleanup_(agsx_json_gen_freep)

/* Parses BUF[0..LEN) (LEN <= MAX, no NUL inside, nesting <= 64). */
yajl_val agsx_json_parse(const char *buf, size_t len, size_t max, agsx_error_t *err);
/* How many values a yajl tree of BUF[0..LEN) would hold at most (its
 * arrays, objects and commas outside strings): a bound on its memory a
 * caller can check before parsing. */
size_t agsx_json_values_max(const char *buf, size_t len);

/* Typed accessors: NULL / false when the key is missing or of another type. */
yajl_val agsx_json_get(yajl_val obj, const char *key);
const char *agsx_json_get_string(yajl_val obj, const char *key);
bool agsx_json_get_int64(yajl_val obj, const char *key, int64_t *ret);
yajl_val agsx_json_get_array(yajl_val obj, const char *key);
yajl_val agsx_json_get_object(yajl_val obj, const char *key);

/* Generation. */
yajl_gen agsx_json_gen_new(bool pretty);
void agsx_json_str(yajl_gen g, const char *s); /* NULL -> null */
void agsx_json_key(yajl_gen g, const char *key);
/* Bytes that may hold NULs or invalid UTF-8 (a command's output): invalid
 * sequences become U+FFFD, so the document stays valid JSON. */
void agsx_json_bytes(yajl_gen g, const char *buf, size_t len);
/* Whether BUF is text: valid UTF-8 without NUL bytes. */
bool agsx_utf8_text(const char *buf, size_t len);
void agsx_json_kv_str(yajl_gen g, const char *key, const char *value);
void agsx_json_kv_int(yajl_gen g, const char *key, int64_t value);
void agsx_json_kv_bool(yajl_gen g, const char *key, bool value);
/* Re-emits a parsed value (for carrying unknown fields through). */
void agsx_json_value(yajl_gen g, yajl_val v);
/* Copies out the generated text (NUL-terminated). */
char *agsx_json_gen_steal(yajl_gen g, size_t *ret_len);

#endif
