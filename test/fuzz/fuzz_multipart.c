/* Fuzz target: the multipart/form-data parser on a hostile upload body.
 * Input: the Content-Type value, a newline, one byte that picks the chunk
 * size the body is fed in, then the body. The body is parsed twice, whole
 * and in chunks: both parses must see the same parts and the same bytes. */
#include "config.h"

#include "api/multipart.h"
#include "fuzz.h"

#include <string.h>

struct seen {
  size_t begins, ends, bytes;
  bool in_part;
  uint64_t sum; /* of the events and the bytes, in order */
};

static void mix(struct seen *s, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    s->sum = (s->sum ^ b[i]) * 1099511628211ULL;
}

static int on_begin(void *data, const struct agsx_multipart_part *p, agsx_error_t *err) {
  struct seen *s = data;
  (void)err;
  if (s->in_part || p->name == NULL || (p->filename && strlen(p->filename) > 16384))
    __builtin_trap();
  s->in_part = true;
  s->begins++;
  mix(s, "B", 1);
  mix(s, p->name, strlen(p->name) + 1);
  if (p->filename)
    mix(s, p->filename, strlen(p->filename) + 1);
  return 0;
}

static int on_data(void *data, const char *buf, size_t len, agsx_error_t *err) {
  struct seen *s = data;
  (void)err;
  (void)buf;
  if (!s->in_part || len == 0)
    __builtin_trap();
  s->bytes += len;
  mix(s, buf, len);
  return 0;
}

static int on_end(void *data, agsx_error_t *err) {
  struct seen *s = data;
  (void)err;
  if (!s->in_part)
    __builtin_trap();
  s->in_part = false;
  s->ends++;
  mix(s, "E", 1);
  return 0;
}

static int parse(const char *boundary, const char *body, size_t len, size_t chunk, struct seen *s) {
  static const struct agsx_multipart_callbacks cb = {on_begin, on_data, on_end};
  struct agsx_multipart *m = agsx_multipart_new(boundary, &cb, s);
  if (m == NULL)
    __builtin_trap(); /* a boundary agsx_multipart_boundary gave must make a parser */
  agsx_error_t err = NULL;
  int r = 0;
  for (size_t i = 0; r == 0 && i < len; i += chunk)
    r = agsx_multipart_feed(m, body + i, len - i < chunk ? len - i : chunk, &err);
  if (r == 0)
    r = agsx_multipart_finish(m, &err);
  if ((r < 0) != (err != NULL) || s->begins > AGSX_MULTIPART_MAX_PARTS || s->bytes > len ||
      (r == 0 && (s->in_part || s->begins != s->ends)))
    __builtin_trap();
  agsx_error_free(&err);
  agsx_multipart_free(m);
  return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *p = (const char *)data;
  const char *nl = memchr(p, '\n', size);
  if (nl == NULL || (size_t)(nl - p) > 1024 || (size_t)(nl - p) + 2 > size)
    return 0;
  char ct[1025];
  memcpy(ct, p, (size_t)(nl - p));
  ct[nl - p] = '\0';
  size_t chunk = (unsigned char)nl[1] % 17 + 1;
  const char *body = nl + 2;
  size_t len = size - (size_t)(body - p);
  char *boundary = NULL;
  agsx_error_t err = NULL;
  if (memchr(ct, '\0', (size_t)(nl - p)) != NULL ||
      agsx_multipart_boundary(ct, &boundary, &err) < 0) {
    agsx_error_free(&err);
    boundary = strdup("b");
  }
  struct seen whole = {0}, s = {0};
  int rw = parse(boundary, body, len, len ? len : 1, &whole);
  int r = parse(boundary, body, len, chunk, &s);
  if (r != rw || whole.sum != s.sum || whole.begins != s.begins || whole.bytes != s.bytes)
    __builtin_trap(); /* chunking changed the result */
  free(boundary);
  return 0;
}
