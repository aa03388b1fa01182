/* Unit tests: the DevTools WebSocket client's parsers (sandbox/cdpws.h):
 * SHA-1, the handshake, frames, reassembly. */
#include "config.h"

#include "sandbox/cdpws.h"
#include "api/wire.h"
#include "tap.h"

#include <string.h>

/* ---- SHA-1 ---- */

static char *hex(const unsigned char *md, size_t n) {
  static char out[64];
  for (size_t i = 0; i < n; i++)
    snprintf(out + 2 * i, 3, "%02x", md[i]);
  return out;
}

static void sha1_is(const char *in, const char *want) {
  unsigned char md[20];
  agsx_sha1(in, strlen(in), md);
  tap_is_str(hex(md, 20), want, "SHA-1 of \"%.20s\" (%zu bytes)", in, strlen(in));
}

static void test_sha1(void) {
  sha1_is("", "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  sha1_is("abc", "a9993e364706816aba3e25717850c26c9cd0d89d");
  sha1_is("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
          "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
  /* A million 'a', in pieces of 997: blocks split at every offset. */
  struct agsx_sha1 s;
  char a[997];
  memset(a, 'a', sizeof(a));
  agsx_sha1_init(&s);
  size_t left = 1000000;
  while (left > 0) {
    size_t k = left < sizeof(a) ? left : sizeof(a);
    agsx_sha1_update(&s, a, k);
    left -= k;
  }
  unsigned char md[20], md2[20];
  agsx_sha1_final(&s, md);
  tap_is_str(hex(md, 20), "34aa973cd4c4daa4f61eeb2bdbad27316534016f", "SHA-1 of a million 'a'");
  /* Every length around the padding boundaries, whole and in two parts. */
  unsigned char buf[200];
  for (size_t i = 0; i < sizeof(buf); i++)
    buf[i] = (unsigned char)(i * 7 + 3);
  int bad = 0;
  for (size_t n = 0; n <= sizeof(buf); n++) {
    agsx_sha1(buf, n, md);
    for (size_t cut = 0; cut <= n; cut += 13) {
      agsx_sha1_init(&s);
      agsx_sha1_update(&s, buf, cut);
      agsx_sha1_update(&s, buf + cut, n - cut);
      agsx_sha1_final(&s, md2);
      bad += memcmp(md, md2, 20) != 0;
    }
  }
  tap_is_int(bad, 0, "SHA-1 in parts equals SHA-1 whole, lengths 0..200");
}

/* ---- the handshake ---- */

static const char key[] = "dGhlIHNhbXBsZSBub25jZQ==";

static void test_request(void) {
  char acc[AGSX_CDPWS_ACCEPT_SIZE];
  agsx_cdpws_accept(key, acc);
  tap_is_str(acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", "RFC 6455's example key and accept");
  char *req = NULL, k1[AGSX_CDPWS_KEY_SIZE], k2[AGSX_CDPWS_KEY_SIZE];
  agsx_error_t err = NULL;
  int r = agsx_cdpws_request("127.0.0.1:9222", "/devtools/browser/ab-1", &req, k1, &err);
  tap_ok(
      r == 0 && req && agsx_str_has_prefix(req, "GET /devtools/browser/ab-1 HTTP/1.1\r\n") &&
          strstr(req, "\r\nHost: 127.0.0.1:9222\r\n") &&
          strstr(req, "\r\nUpgrade: websocket\r\n") && strstr(req, "\r\nConnection: Upgrade\r\n") &&
          strstr(req, "\r\nSec-WebSocket-Version: 13\r\n") && agsx_str_has_suffix(req, "\r\n\r\n"),
      "upgrade request (%s)", err ? err->msg : "");
  char line[64];
  snprintf(line, sizeof(line), "\r\nSec-WebSocket-Key: %s\r\n", k1);
  char *dec = NULL;
  size_t dlen = 0;
  tap_ok(req && strstr(req, line) && strlen(k1) == 24 &&
             agsx_base64_decode(k1, 16, &dec, &dlen, &err) == 0 && dlen == 16,
         "the key is base64 of 16 bytes: %s", k1);
  free(dec);
  free(req);
  agsx_cdpws_request("h", "/", &req, k2, &err);
  tap_ok(strcmp(k1, k2) != 0, "each request has a fresh key");
  free(req);
  const char *bad[][2] = {{"", "/"},  {"a b", "/"},   {"h\r\nX: y", "/"},
                          {"h", "x"}, {"h", "/a b"},  {"h", "/a\r\nX: y"},
                          {"h", ""},  {"h\x7f", "/"}, {"h", "/\xc3\xa9"}};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(bad); i++) {
    err = NULL;
    req = NULL;
    r = agsx_cdpws_request(bad[i][0], bad[i][1], &req, k1, &err);
    tap_ok(r < 0 && req == NULL && err && strstr(err->msg, "invalid WebSocket"),
           "request refused for host/path %zu: %s", i, err ? err->msg : "accepted");
    agsx_error_free(&err);
  }
}

#define ACCEPT "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"
static const char good_answer[] = "HTTP/1.1 101 WebSocket Protocol Handshake\r\n"
                                  "Upgrade: WebSocket\r\n"
                                  "Connection: Upgrade\r\n" ACCEPT "\r\n";

static int answer(const char *s, size_t len, bool eof, size_t *size, agsx_error_t *err) {
  return agsx_cdpws_parse_answer(s, len, eof, key, size, err);
}

static void answer_bad(const char *what, const char *s, bool eof, const char *why) {
  agsx_error_t err = NULL;
  size_t size = 99;
  int r = answer(s, strlen(s), eof, &size, &err);
  tap_ok(r < 0 && size == 0 && err && strstr(err->msg, why), "answer refused, %s: %s", what,
         err ? err->msg : "accepted");
  agsx_error_free(&err);
}

static void test_answer(void) {
  agsx_error_t err = NULL;
  size_t size = 0, n = strlen(good_answer);
  char buf[512];
  snprintf(buf, sizeof(buf), "%s\x81\x02hi", good_answer);
  int r = answer(buf, strlen(buf), false, &size, &err);
  tap_ok(r == 1 && size == n, "Chrome's 101 answer, a frame after it: %zu header bytes (%s)", size,
         err ? err->msg : "");
  agsx_error_free(&err);
  int more = 0;
  for (size_t i = 0; i < n; i++)
    more += answer(good_answer, i, false, &size, &err) == 0 && err == NULL;
  tap_is_int(more, (int)n, "every prefix of the answer: more bytes needed");
  const char *alt = "HTTP/1.1 101 Switching Protocols\r\nupgrade:websocket\r\nCONNECTION: "
                    "keep-alive, upgrade \r\nX-Other: 1\r\nsec-websocket-accept:  "
                    "s3pPLMBiTxaQ9kYGzzhZRbK+xOo= \r\n\r\n";
  r = answer(alt, strlen(alt), true, &size, &err);
  tap_ok(r == 1 && size == strlen(alt), "header names and tokens in any case, spaces around (%s)",
         err ? err->msg : "");
  agsx_error_free(&err);

  answer_bad("wrong accept",
             "HTTP/1.1 101 x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOp=\r\n\r\n",
             false, "a wrong Sec-WebSocket-Accept");
  answer_bad("accept twice",
             "HTTP/1.1 101 x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" ACCEPT ACCEPT "\r\n",
             false, "a wrong Sec-WebSocket-Accept");
  answer_bad("no accept", "HTTP/1.1 101 x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
             false, "no Sec-WebSocket-Accept");
  answer_bad("no upgrade", "HTTP/1.1 101 x\r\nConnection: Upgrade\r\n" ACCEPT "\r\n", false,
             "no `Upgrade: websocket`");
  answer_bad("upgrade to h2c",
             "HTTP/1.1 101 x\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n" ACCEPT "\r\n", false,
             "no `Upgrade: websocket`");
  answer_bad("no connection", "HTTP/1.1 101 x\r\nUpgrade: websocket\r\n" ACCEPT "\r\n", false,
             "no `Connection: Upgrade`");
  answer_bad("connection: upgraded",
             "HTTP/1.1 101 x\r\nUpgrade: websocket\r\nConnection: upgraded\r\n" ACCEPT "\r\n",
             false, "no `Connection: Upgrade`");
  answer_bad("an extension",
             "HTTP/1.1 101 x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" ACCEPT
             "Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n",
             false, "an extension we did not offer");
  answer_bad("a subprotocol",
             "HTTP/1.1 101 x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" ACCEPT
             "Sec-WebSocket-Protocol: chat\r\n\r\n",
             false, "a subprotocol we did not offer");
  answer_bad("400", "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", false,
             "answered HTTP 400 instead of switching to WebSocket");
  answer_bad("404", "HTTP/1.1 404 Not Found\r\n\r\n", false,
             "HTTP 404 instead of switching to "
             "WebSocket (wrong path?)");
  answer_bad("200", "HTTP/1.0 200 OK\r\n\r\n", true, "answered HTTP 200");
  answer_bad("not HTTP", "SSH-2.0-OpenSSH_9.2\r\n\r\n", false, "not an HTTP/1 response");
  answer_bad("status 1010", "HTTP/1.1 1010 x\r\n\r\n", false, "not an HTTP/1 response");
  answer_bad("bare LF status line", "HTTP/1.1 101 x\n\r\n\r\n", false, "not an HTTP/1 response");
  answer_bad("bare LF header", "HTTP/1.1 101 x\r\nUpgrade: websocket\n" ACCEPT "\r\n", false,
             "malformed header line");
  answer_bad("no colon", "HTTP/1.1 101 x\r\nUpgrade websocket\r\n\r\n", false,
             "malformed header line");
  answer_bad("truncated", "HTTP/1.1 101 x\r\nUpgrade: websocket\r\n", true, "truncated");
  answer_bad("nothing at all", "", true, "truncated");
  static char longer[AGSX_CDPWS_ANSWER_MAX + 200];
  snprintf(longer, sizeof(longer), "HTTP/1.1 101 x\r\nX-Pad: ");
  size_t l = strlen(longer);
  memset(longer + l, 'p', sizeof(longer) - l - 1);
  answer_bad("headers too long, no end", longer, false, "no end within 8192 bytes");
  memcpy(longer + sizeof(longer) - 5, "\r\n\r\n", 4);
  answer_bad("headers end past the bound", longer, false, "no end within 8192 bytes");
  err = NULL;
  r = answer("HTTP/1.1 101 x\r\nUpgrade: web\0socket\r\n\r\n", 39, false, &size, &err);
  tap_ok(r < 0 && err, "NUL in a header: refused (%s)", err ? err->msg : "accepted");
  agsx_error_free(&err);
}

/* ---- frames ---- */

static int decode(const void *buf, size_t len, bool masked, size_t max, struct agsx_cdpws_frame *f,
                  agsx_error_t *err) {
  return agsx_cdpws_frame_decode(buf, len, masked, max, f, err);
}

/* A server frame: header of OPCODE (with FIN) and N bytes of X. */
static size_t server_frame(unsigned char *out, bool fin, unsigned op, size_t n) {
  size_t h = 0;
  out[h++] = (unsigned char)((fin ? 0x80 : 0) | op);
  if (n < 126) {
    out[h++] = (unsigned char)n;
  } else if (n <= 0xffff) {
    out[h++] = 126;
    out[h++] = (unsigned char)(n >> 8);
    out[h++] = (unsigned char)n;
  } else {
    out[h++] = 127;
    for (int i = 7; i >= 0; i--)
      out[h++] = (unsigned char)((uint64_t)n >> (8 * i));
  }
  memset(out + h, 'x', n);
  return h + n;
}

static void frame_good(const char *what, size_t n, size_t want_header) {
  unsigned char *buf = malloc(n + 14);
  size_t total = server_frame(buf, true, AGSX_WS_TEXT, n);
  struct agsx_cdpws_frame f;
  agsx_error_t err = NULL;
  int r = decode(buf, total, false, 1 << 20, &f, &err);
  tap_ok(r == 1 && f.fin && f.opcode == AGSX_WS_TEXT && !f.masked && f.header_len == want_header &&
             f.payload_len == n && f.size == total && (n == 0 || buf[f.header_len] == 'x'),
         "%s: %zu bytes, header of %zu (%s)", what, n, want_header, err ? err->msg : "");
  agsx_error_free(&err);
  int more = 0, tries = 0;
  for (size_t i = 0; i < total; i += i < 20 ? 1 : 997, tries++)
    more += decode(buf, i, false, 1 << 20, &f, &err) == 0 && err == NULL;
  tap_is_int(more, tries, "%s: every prefix needs more bytes", what);
  free(buf);
}

static void frame_bad(const char *what, const unsigned char *buf, size_t len, bool masked,
                      const char *why) {
  struct agsx_cdpws_frame f;
  agsx_error_t err = NULL;
  int r = decode(buf, len, masked, 1000, &f, &err);
  tap_ok(r < 0 && err && strstr(err->msg, why), "frame refused, %s: %s", what,
         err ? err->msg : "accepted");
  agsx_error_free(&err);
}

static void test_decode(void) {
  frame_good("7-bit length", 5, 2);
  frame_good("7-bit length, empty", 0, 2);
  frame_good("7-bit length, 125", 125, 2);
  frame_good("16-bit length, 126", 126, 4);
  frame_good("16-bit length, 65535", 65535, 4);
  frame_good("64-bit length, 65536", 65536, 10);
  frame_good("64-bit length, 300000", 300000, 10);

  /* Frames in a row: each consumes its own bytes only. */
  const unsigned char two[] = {0x81, 0x02, 'h',  'i',  0x89, 0x01, 'p', 0x8a,
                               0x00, 0x88, 0x04, 0x03, 0xe9, 'b',  'y'};
  struct agsx_cdpws_frame f;
  agsx_error_t err = NULL;
  size_t off = 0;
  unsigned ops[4] = {0};
  int k = 0;
  while (off < sizeof(two) && k < 4 &&
         decode(two + off, sizeof(two) - off, false, 100, &f, &err) == 1) {
    ops[k++] = f.opcode;
    off += f.size;
  }
  tap_ok(k == 4 && off == sizeof(two) && ops[0] == AGSX_WS_TEXT && ops[1] == AGSX_WS_PING &&
             ops[2] == AGSX_WS_PONG && ops[3] == AGSX_WS_CLOSE,
         "text, ping, pong, close in a row");
  char *why = agsx_cdpws_close_reason(two + 11, 4);
  tap_is_str(why, "1001 by", "close frame: code and reason");
  free(why);
  why = agsx_cdpws_close_reason("", 0);
  tap_is_str(why, "no status code", "close frame without a code");
  free(why);
  why = agsx_cdpws_close_reason("\x03\xe8\x1b[31m", 7);
  tap_is_str(why, "1000", "close frame with an unprintable reason: the code alone");
  free(why);

  /* A client's (masked) frame, read as a server would. */
  const unsigned char masked[] = {0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58};
  unsigned char p[5];
  int r = decode(masked, sizeof(masked), true, 100, &f, &err);
  memcpy(p, masked + 6, 5);
  agsx_cdpws_unmask(p, 5, f.mask);
  tap_ok(r == 1 && f.masked && f.header_len == 6 && memcmp(p, "Hello", 5) == 0,
         "RFC 6455's masked \"Hello\"");
  for (size_t i = 0; i < sizeof(masked); i++)
    if (decode(masked, i, true, 100, &f, &err) != 0)
      tap_ok(0, "masked frame prefix %zu", i);

  unsigned char b[16];
  frame_bad("masked from the server", masked, sizeof(masked), false, "masked WebSocket frame from");
  frame_bad("unmasked from a client", two, sizeof(two), true, "unmasked WebSocket frame from a");
  for (unsigned rsv = 0x10; rsv <= 0x40; rsv <<= 1) {
    b[0] = (unsigned char)(0x81 | rsv), b[1] = 0;
    frame_bad("a reserved bit", b, 2, false, "reserved bits set");
  }
  for (unsigned op = 3; op <= 0xf; op++) {
    if (op >= 8 && op <= 0xa)
      continue;
    b[0] = (unsigned char)(0x80 | op), b[1] = 0;
    char w[32];
    snprintf(w, sizeof(w), "opcode 0x%x", op);
    frame_bad(w, b, 2, false, "unknown opcode");
  }
  b[0] = 0x09, b[1] = 0;
  frame_bad("fragmented ping", b, 2, false, "fragmented WebSocket control frame");
  b[0] = 0x08, b[1] = 0;
  frame_bad("fragmented close", b, 2, false, "fragmented WebSocket control frame");
  b[0] = 0x89, b[1] = 126, b[2] = 0, b[3] = 126;
  frame_bad("ping of 126 bytes", b, 4, false, "control frame longer than 125");
  b[0] = 0x88, b[1] = 127;
  frame_bad("close with a 64-bit length", b, 2, false, "control frame longer than 125");
  b[0] = 0x81, b[1] = 126, b[2] = 0x03, b[3] = 0xe9;
  frame_bad("over the bound (16-bit), before its payload", b, 4, false,
            "1001 bytes (at most 1000)");
  b[0] = 0x82, b[1] = 127;
  memcpy(b + 2, "\x00\x00\x00\x01\x00\x00\x00\x00", 8);
  frame_bad("over the bound (64-bit)", b, 10, false, "4294967296 bytes (at most 1000)");
  memcpy(b + 2, "\x80\x00\x00\x00\x00\x00\x00\x01", 8);
  frame_bad("64-bit length with the top bit", b, 10, false, "top bit set");
  memcpy(b + 2, "\x00\x00\x00\x00\x00\x00\x00\x7d", 8);
  frame_bad("64-bit form of 125", b, 10, false, "not in its shortest form");
  memcpy(b + 2, "\x00\x00\x00\x00\x00\x00\xff\xff", 8);
  frame_bad("64-bit form of 65535", b, 10, false, "not in its shortest form");
  b[0] = 0x81, b[1] = 126, b[2] = 0, b[3] = 125;
  frame_bad("16-bit form of 125", b, 4, false, "not in its shortest form");
}

static void test_messages(void) {
  /* "Hello, world" in three frames with a ping between. */
  unsigned char s[64];
  size_t n = 0;
  s[n++] = 0x01, s[n++] = 3, memcpy(s + n, "Hel", 3), n += 3;
  s[n++] = 0x00, s[n++] = 4, memcpy(s + n, "lo, ", 4), n += 4;
  s[n++] = 0x89, s[n++] = 2, memcpy(s + n, "pi", 2), n += 2;
  s[n++] = 0x80, s[n++] = 5, memcpy(s + n, "world", 5), n += 5;
  struct agsx_cdpws_message m = {0};
  agsx_error_t err = NULL;
  int r = 0, pings = 0, parts = 0;
  for (size_t off = 0; off < n;) {
    struct agsx_cdpws_frame f;
    if (agsx_cdpws_frame_decode(s + off, n - off, false, 100, &f, &err) != 1)
      break;
    if (f.opcode == AGSX_WS_PING)
      pings++;
    else
      r = agsx_cdpws_message_add(&m, &f, s + off + f.header_len, 100, &err), parts++;
    off += f.size;
  }
  tap_ok(r == 1 && pings == 1 && parts == 3 && m.opcode == AGSX_WS_TEXT && m.len == 12 &&
             strcmp(m.buf, "Hello, world") == 0 && !m.open,
         "fragmented text with a ping inside: \"%s\"", m.buf ? m.buf : "");
  agsx_cdpws_message_clear(&m);

  struct agsx_cdpws_frame cont = {.opcode = AGSX_WS_CONT, .fin = true, .payload_len = 1};
  struct agsx_cdpws_frame first = {.opcode = AGSX_WS_TEXT, .fin = false, .payload_len = 60};
  struct agsx_cdpws_frame ping = {.opcode = AGSX_WS_PING, .fin = true};
  r = agsx_cdpws_message_add(&m, &cont, "x", 100, &err);
  tap_ok(r < 0 && err && strstr(err->msg, "continuation frame without a message"),
         "continuation without a message: refused (%s)", err ? err->msg : "");
  agsx_error_free(&err);
  char big[64] = {0};
  r = agsx_cdpws_message_add(&m, &first, big, 100, &err);
  tap_ok(r == 0 && m.open, "first part of a message: more to come");
  r = agsx_cdpws_message_add(&m, &first, big, 100, &err);
  tap_ok(r < 0 && err && strstr(err->msg, "started inside a fragmented one"),
         "new message inside one: refused (%s)", err ? err->msg : "");
  agsx_error_free(&err);
  agsx_cdpws_message_clear(&m);
  agsx_cdpws_message_add(&m, &first, big, 100, &err);
  r = agsx_cdpws_message_add(
      &m, &(struct agsx_cdpws_frame){.opcode = AGSX_WS_CONT, .payload_len = 41}, big, 100, &err);
  tap_ok(r < 0 && err && strstr(err->msg, "message over 100 bytes"),
         "message growing over its bound: refused (%s)", err ? err->msg : "");
  agsx_error_free(&err);
  agsx_cdpws_message_clear(&m);
  r = agsx_cdpws_message_add(&m, &ping, "", 100, &err);
  tap_ok(r < 0 && err, "control frame as a message part: refused");
  agsx_error_free(&err);
  agsx_cdpws_message_clear(&m);
}

static void test_roundtrip(void) {
  const size_t sizes[] = {0, 1, 125, 126, 65535, 65536, 200000};
  const size_t headers[] = {6, 6, 6, 8, 8, 14, 14};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(sizes); i++) {
    size_t n = sizes[i];
    unsigned char *in = malloc(n + 1);
    for (size_t j = 0; j < n; j++)
      in[j] = (unsigned char)(j * 31 + 7);
    char *frame = NULL;
    size_t size = 0;
    agsx_error_t err = NULL;
    struct agsx_cdpws_frame f;
    int r = agsx_cdpws_frame_encode(AGSX_WS_BINARY, in, n, &frame, &size, &err);
    if (r == 0)
      r = agsx_cdpws_frame_decode(frame, size, true, 1 << 20, &f, &err);
    if (r == 1)
      agsx_cdpws_unmask(frame + f.header_len, f.payload_len, f.mask);
    tap_ok(r == 1 && f.fin && f.opcode == AGSX_WS_BINARY && f.header_len == headers[i] &&
               f.payload_len == n && f.size == size &&
               (n == 0 || memcmp(frame + f.header_len, in, n) == 0),
           "encode -> decode, %zu bytes (%s)", n, err ? err->msg : "");
    agsx_error_free(&err);
    free(frame);
    free(in);
  }
}

int main(void) {
  test_sha1();
  test_request();
  test_answer();
  test_decode();
  test_messages();
  test_roundtrip();
  return tap_done();
}
