/* Unit tests: the incremental multipart/form-data parser. */
#include "config.h"

#include "api/multipart.h"
#include "tap.h"

struct got {
  char log[8192]; /* "B(name|filename|type)" "D<len>" "E" per callback */
  char data[8192];
  size_t dlen;
  int fail_at_begin; /* the Nth part_begin fails */
  int begins;
};

static void logf_(struct got *g, const char *fmt, const char *a, const char *b, const char *c) {
  size_t n = strlen(g->log);
  snprintf(g->log + n, sizeof(g->log) - n, fmt, a, b, c);
}

static int on_begin(void *data, const struct agsx_multipart_part *p, agsx_error_t *err) {
  struct got *g = data;
  if (++g->begins == g->fail_at_begin)
    return agsx_error_set(err, 0, "refused by the callback");
  logf_(g, "B(%s|%s|%s)", p->name, p->filename ? p->filename : "-",
        p->content_type ? p->content_type : "-");
  return 0;
}

static int on_data(void *data, const char *buf, size_t len, agsx_error_t *err) {
  (void)err;
  struct got *g = data;
  if (g->dlen + len < sizeof(g->data)) {
    memcpy(g->data + g->dlen, buf, len);
    g->dlen += len;
  }
  return 0;
}

static int on_end(void *data, agsx_error_t *err) {
  (void)err;
  struct got *g = data;
  g->data[g->dlen] = '\0';
  logf_(g, "D[%s]E", g->data, "", "");
  g->dlen = 0;
  return 0;
}

static const struct agsx_multipart_callbacks cb = {on_begin, on_data, on_end};

/* Parses BODY fed in chunks of CHUNK bytes (0: all at once). */
static int parse(const char *boundary, const char *body, size_t len, size_t chunk, struct got *g,
                 agsx_error_t *err) {
  struct agsx_multipart *m = agsx_multipart_new(boundary, &cb, g);
  if (m == NULL)
    return agsx_error_set(err, 0, "bad boundary");
  int r = 0;
  for (size_t i = 0; r == 0 && i < len; i += chunk ? chunk : len)
    r = agsx_multipart_feed(m, body + i, chunk && len - i > chunk ? chunk : len - i, err);
  if (r == 0)
    r = agsx_multipart_finish(m, err);
  agsx_multipart_free(m);
  return r;
}

static void ok_body(const char *what, const char *boundary, const char *body, const char *want) {
  size_t chunks[] = {0, 1, 2, 3, 7, 64};
  for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
    struct got g = {0};
    agsx_error_t err = NULL;
    int r = parse(boundary, body, strlen(body), chunks[i], &g, &err);
    tap_ok(r == 0 && strcmp(g.log, want) == 0, "%s (chunks of %zu)", what, chunks[i]);
    if (r < 0)
      printf("#   error: %s\n", err->msg);
    agsx_error_free(&err);
  }
}

static void bad_body(const char *what, const char *boundary, const char *body, size_t len,
                     const char *why) {
  size_t chunks[] = {0, 1, 5};
  for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
    struct got g = {0};
    agsx_error_t err = NULL;
    int r = parse(boundary, body, len, chunks[i], &g, &err);
    tap_ok(r < 0 && err && strstr(err->msg, why), "%s refused (chunks of %zu): %s", what, chunks[i],
           err ? err->msg : "accepted");
    agsx_error_free(&err);
  }
}

static void boundary_tests(void) {
  struct {
    const char *ct, *want;
  } ok[] = {
      {"multipart/form-data; boundary=abc", "abc"},
      {"multipart/form-data; boundary=\"a b:c\"", "a b:c"},
      {"Multipart/Form-Data;charset=utf-8;BOUNDARY=----formdata-undici-0123456789",
       "----formdata-undici-0123456789"},
      {"multipart/form-data ; boundary = x ; other=1", "x"},
  };
  for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
    char *b = NULL;
    agsx_error_t err = NULL;
    int r = agsx_multipart_boundary(ok[i].ct, &b, &err);
    tap_is_str(r == 0 ? b : err->msg, ok[i].want, "boundary of `%s`", ok[i].ct);
    free(b);
    agsx_error_free(&err);
  }
  const char *bad[] = {
      "text/plain; boundary=abc",
      "multipart/form-data",
      "multipart/form-data; boundary=",
      "multipart/form-data; boundary=\"unterminated",
      "multipart/form-data; boundary=a\x01z",
      "multipart/form-data; boundary="
      "12345678901234567890123456789012345678901234567890123456789012345678901",
      "multipart/form-dataX; boundary=abc",
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char *b = NULL;
    agsx_error_t err = NULL;
    int r = agsx_multipart_boundary(bad[i], &b, &err);
    tap_ok(r < 0 && err && err->errno_ == EINVAL, "boundary of `%s` refused", bad[i]);
    free(b);
    agsx_error_free(&err);
  }
  tap_ok(agsx_multipart_new("", &cb, NULL) == NULL, "an empty boundary makes no parser");
}

int main(void) {
  boundary_tests();
  ok_body("one file part", "XyZ",
          "--XyZ\r\n"
          "Content-Disposition: form-data; name=\"file\"; filename=\"dir/a.txt\"\r\n"
          "Content-Type: application/octet-stream\r\n\r\n"
          "hello\r\nworld\r\n"
          "--XyZ--\r\n",
          "B(file|dir/a.txt|application/octet-stream)D[hello\r\nworld]E");
  ok_body("several parts, preamble and epilogue", "b",
          "preamble text\r\n--b\r\n"
          "content-disposition: form-data; name=file; filename=/tmp/x\r\n\r\n"
          "\r\n--\r\n-b-\r\n--c\r\n"
          "--b  \r\n"
          "Content-Disposition: form-data; name=\"field\"\r\n\r\n"
          "v\r\n"
          "--b\r\n"
          "Content-Disposition: form-data; name=\"file\"; filename=\"empty\"\r\n\r\n"
          "\r\n--b--epilogue --b\r\n",
          "B(file|/tmp/x|-)D[\r\n--\r\n-b-\r\n--c]EB(field|-|-)D[v]EB(file|empty|-)D[]E");
  ok_body("undici's escapes in the filename are undone", "u",
          "--u\r\nContent-Disposition: form-data; name=\"file\"; "
          "filename=\"we%22ird%0D%0Aname %41.txt\"\r\n\r\nx\r\n--u--",
          "B(file|we\"ird\r\nname %41.txt|-)D[x]E");
  ok_body("backslash escapes in a quoted filename", "u",
          "--u\r\nContent-Disposition: form-data; name=\"file\"; "
          "filename=\"a\\\"b\\\\c\"\r\n\r\nx\r\n--u--",
          "B(file|a\"b\\c|-)D[x]E");
  const char *b0 = "--u\r\n\r\nbare\r\n--u--";
  bad_body("a part with no headers", "u", b0, strlen(b0), "Content-Disposition");
  ok_body("no parts at all", "u", "--u--\r\n", "");

  static const char nul_body[] = "--u\r\nContent-Disposition: form-data; name=\"f\0\"\r\n\r\nx\r\n"
                                 "--u--";
  bad_body("a NUL in the headers", "u", nul_body, sizeof(nul_body) - 1, "NUL");
  const char *b1 = "--u\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nabc";
  bad_body("a body without its closing boundary", "u", b1, strlen(b1), "closing boundary");
  const char *b2 = "--u\r\nContent-Type: text/plain\r\n\r\nabc\r\n--u--";
  bad_body("a part without Content-Disposition", "u", b2, strlen(b2), "Content-Disposition");
  const char *b3 = "--uX\r\n";
  bad_body("garbage after a boundary", "u", b3, strlen(b3), "garbage");
  const char *b4 = "--u\r\nContent-Disposition: form-data; name=\"a\r\n\r\nx\r\n--u--";
  bad_body("an unterminated quoted parameter", "u", b4, strlen(b4), "malformed");
  const char *b5 = "--u\r\nContent-Disposition: form-data; name=a\r\n\r\nx\r\n--u--";
  {
    struct got g = {.fail_at_begin = 1};
    agsx_error_t err = NULL;
    int r = parse("u", b5, strlen(b5), 1, &g, &err);
    tap_ok(r < 0 && err && strstr(err->msg, "refused by the callback"),
           "a callback's error stops the parse: %s", err ? err->msg : "accepted");
    agsx_error_free(&err);
  }

  /* Bounds: a huge header block, too many parts, no boundary at all. */
  size_t big = AGSX_MULTIPART_MAX_HEADER + 100;
  char *hdr = malloc(big + 64);
  strcpy(hdr, "--u\r\nX-Pad: ");
  memset(hdr + strlen(hdr), 'a', big);
  hdr[big] = '\0';
  bad_body("a header block over 16 KiB", "u", hdr, strlen(hdr), "16 KiB");
  free(hdr);
  size_t per = strlen("--u\r\nContent-Disposition: form-data; name=a\r\n\r\n\r\n");
  char *many = malloc(per * (AGSX_MULTIPART_MAX_PARTS + 2) + 8);
  many[0] = '\0';
  for (unsigned i = 0; i <= AGSX_MULTIPART_MAX_PARTS; i++)
    strcat(many, "--u\r\nContent-Disposition: form-data; name=a\r\n\r\n\r\n");
  bad_body("more than 1000 parts", "u", many, strlen(many), "parts");
  free(many);
  char *nob = malloc(AGSX_MULTIPART_MAX_PREAMBLE + 2);
  memset(nob, 'z', AGSX_MULTIPART_MAX_PREAMBLE + 1);
  bad_body("no boundary in 64 KiB", "u", nob, AGSX_MULTIPART_MAX_PREAMBLE + 1, "no boundary");
  free(nob);

  /* Data is delivered as it comes: a part of 1 MiB fed in 4 KiB chunks is
   * never held whole (the parser keeps at most a delimiter's worth). */
  {
    struct agsx_multipart *m = agsx_multipart_new("bnd", &cb, &(struct got){0});
    const char *head = "--bnd\r\nContent-Disposition: form-data; name=file; filename=f\r\n\r\n";
    agsx_error_t err = NULL;
    int r = agsx_multipart_feed(m, head, strlen(head), &err);
    char chunk[4096];
    memset(chunk, '\r', sizeof(chunk)); /* worst case: every byte starts a match */
    for (int i = 0; r == 0 && i < 256; i++)
      r = agsx_multipart_feed(m, chunk, sizeof(chunk), &err);
    if (r == 0)
      r = agsx_multipart_feed(m, "\r\n--bnd--", 9, &err);
    if (r == 0)
      r = agsx_multipart_finish(m, &err);
    tap_ok(r == 0 && agsx_multipart_parts(m) == 1, "1 MiB of CRs streamed through: %s",
           err ? err->msg : "ok");
    agsx_error_free(&err);
    agsx_multipart_free(m);
  }
  return tap_done();
}
