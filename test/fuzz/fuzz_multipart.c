/* Fuzz target: the multipart/form-data parser on a hostile upload body.
 * Input: the Content-Type value, a newline, one byte that picks the chunk
 * size the body is fed in, then the body. */
#include "config.h"

#include "api/multipart.h"
#include "fuzz.h"

#include <string.h>

struct seen {
  size_t begins, ends, bytes;
  bool in_part;
};

static int on_begin(void *data, const struct agsx_multipart_part *p, agsx_error_t *err) {
  struct seen *s = data;
  (void)err;
  if (s->in_part || p->name == NULL || (p->filename && strlen(p->filename) > 16384))
    __builtin_trap();
  s->in_part = true;
  s->begins++;
  return 0;
}

static int on_data(void *data, const char *buf, size_t len, agsx_error_t *err) {
  struct seen *s = data;
  (void)err;
  (void)buf;
  if (!s->in_part || len == 0)
    __builtin_trap();
  s->bytes += len;
  return 0;
}

static int on_end(void *data, agsx_error_t *err) {
  struct seen *s = data;
  (void)err;
  if (!s->in_part)
    __builtin_trap();
  s->in_part = false;
  s->ends++;
  return 0;
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
  static const struct agsx_multipart_callbacks cb = {on_begin, on_data, on_end};
  struct seen s = {0};
  struct agsx_multipart *m = agsx_multipart_new(boundary, &cb, &s);
  if (m == NULL)
    __builtin_trap(); /* a boundary agsx_multipart_boundary gave must make a parser */
  int r = 0;
  for (size_t i = 0; r == 0 && i < len; i += chunk)
    r = agsx_multipart_feed(m, body + i, len - i < chunk ? len - i : chunk, &err);
  if (r == 0)
    r = agsx_multipart_finish(m, &err);
  if ((r < 0) != (err != NULL) || s.begins > AGSX_MULTIPART_MAX_PARTS || s.bytes > len ||
      (r == 0 && (s.in_part || s.begins != s.ends)))
    __builtin_trap();
  agsx_error_free(&err);
  agsx_multipart_free(m);
  free(boundary);
  return 0;
}
