/* Unit tests: the DevTools WebSocket client (sandbox/cdpws.h): its parsers
 * (SHA-1, the handshake, frames, reassembly), then the client against a
 * scripted server in a child process (pings, fragments, events, errors,
 * timeouts, close frames, broken frames, refused handshakes). */
#include "config.h"

#include "sandbox/cdpws.h"
#include "api/wire.h"
#include "util/json.h"
#include "tap.h"

#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

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

/* ---- the client, against a scripted server ---- */

static unsigned char sbuf[1 << 16];
static size_t slen;

static void srv_send(int fd, unsigned op, bool fin, const char *p, size_t n) {
  unsigned char h[10];
  size_t k = 0;
  h[k++] = (unsigned char)((fin ? 0x80 : 0) | op);
  if (n < 126) {
    h[k++] = (unsigned char)n;
  } else if (n <= 0xffff) {
    h[k++] = 126;
    h[k++] = (unsigned char)(n >> 8);
    h[k++] = (unsigned char)n;
  } else {
    h[k++] = 127;
    for (int i = 7; i >= 0; i--)
      h[k++] = (unsigned char)((uint64_t)n >> (8 * i));
  }
  if (agsx_write_all(fd, h, k) < 0 || agsx_write_all(fd, p, n) < 0)
    _exit(3);
}

static void srv_text(int fd, const char *s) { srv_send(fd, AGSX_WS_TEXT, true, s, strlen(s)); }

/* The next frame of the client, unmasked, into *RET (NUL-terminated);
 * 0xff at EOF. */
static unsigned srv_frame(int fd, char **ret) {
  for (;;) {
    struct agsx_cdpws_frame f;
    agsx_error_t err = NULL;
    int r = agsx_cdpws_frame_decode(sbuf, slen, true, sizeof(sbuf) - 14, &f, &err);
    if (r < 0)
      _exit(4);
    if (r == 1) {
      *ret = xzalloc(f.payload_len + 1);
      memcpy(*ret, sbuf + f.header_len, f.payload_len);
      agsx_cdpws_unmask(*ret, f.payload_len, f.mask);
      memmove(sbuf, sbuf + f.size, slen - f.size);
      slen -= f.size;
      return f.opcode;
    }
    ssize_t n = read(fd, sbuf + slen, sizeof(sbuf) - slen);
    if (n <= 0)
      return 0xff;
    slen += (size_t)n;
  }
}

/* One command of the client, answered as its method says; false to hang up. */
static bool srv_command(int fd, const char *msg, int64_t *slow_id) {
  _cleanup_json_ yajl_val v = agsx_json_parse(msg, strlen(msg), 1 << 16, NULL);
  int64_t id = 0;
  agsx_json_get_int64(v, "id", &id);
  const char *m = agsx_json_get_string(v, "method");
  char out[512];
  if (m == NULL) {
    _exit(5);
  } else if (strcmp(m, "T.events") == 0) {
    /* Events, a stale answer, a ping, then the answer in three parts with a
     * ping between: ok only if the pong came back first. */
    srv_text(fd, "{\"method\":\"Page.loadEventFired\",\"params\":{}}");
    srv_text(fd, "{\"id\":999999,\"result\":{\"stale\":true}}");
    srv_text(fd, "[1,2]");
    srv_send(fd, AGSX_WS_BINARY, true, "\x00\x01", 2);
    srv_send(fd, AGSX_WS_PING, true, "pp", 2);
    _cleanup_free_ char *pong = NULL;
    bool ok = srv_frame(fd, &pong) == AGSX_WS_PONG && strcmp(pong, "pp") == 0;
    snprintf(out, sizeof(out), "{\"id\":%lld,\"result\":{\"ok\":%s}}", (long long)id,
             ok ? "true" : "false");
    srv_send(fd, AGSX_WS_TEXT, false, out, 5);
    srv_send(fd, AGSX_WS_PING, true, "", 0);
    srv_send(fd, AGSX_WS_CONT, false, out + 5, 5);
    srv_send(fd, AGSX_WS_CONT, true, out + 10, strlen(out + 10));
    free(pong);
    srv_frame(fd, &pong); /* the second pong */
  } else if (strcmp(m, "T.error") == 0) {
    snprintf(out, sizeof(out),
             "{\"id\":%lld,\"error\":{\"code\":-32000,\"message\":\"No\\u001b such thing\","
             "\"data\":\"detail\"}}",
             (long long)id);
    srv_text(fd, out);
  } else if (strcmp(m, "T.slow") == 0) {
    *slow_id = id;
  } else if (strcmp(m, "T.after") == 0) {
    snprintf(out, sizeof(out), "{\"id\":%lld,\"result\":{\"late\":1}}", (long long)*slow_id);
    srv_text(fd, out);
    snprintf(out, sizeof(out), "{\"id\":%lld,\"result\":{\"after\":1}}", (long long)id);
    srv_text(fd, out);
  } else if (strcmp(m, "T.echo") == 0) {
    _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
    size_t n;
    yajl_gen_map_open(g);
    agsx_json_kv_int(g, "id", id);
    agsx_json_key(g, "result");
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "method", m);
    agsx_json_kv_str(g, "session", agsx_json_get_string(v, "sessionId"));
    agsx_json_key(g, "params");
    agsx_json_value(g, agsx_json_get(v, "params"));
    yajl_gen_map_close(g);
    yajl_gen_map_close(g);
    _cleanup_free_ char *s = agsx_json_gen_steal(g, &n);
    srv_text(fd, s);
  } else if (strcmp(m, "T.close") == 0) {
    srv_send(fd, AGSX_WS_CLOSE, true, "\x03\xe9going away", 12);
  } else if (strcmp(m, "T.many") == 0) {
    /* Just over the values a client parses into a tree: 2 MiB of "0,". */
    size_t n = AGSX_CDP_VALUES_MAX;
    char *big = xmalloc(2 * n + 64);
    int k = snprintf(big, 64, "{\"id\":%lld,\"result\":{\"a\":[", (long long)id);
    for (size_t i = 0; i < n; i++)
      memcpy(big + k + 2 * i, "0,", 2);
    memcpy(big + k + 2 * n - 1, "]}}", 4);
    srv_text(fd, big);
    free(big);
  } else if (strcmp(m, "T.rsv") == 0) {
    srv_send(fd, 0x40 | AGSX_WS_TEXT, true, "{}", 2);
  } else if (strcmp(m, "T.eof") == 0) {
    return false;
  }
  return true;
}

/* One connection: the handshake as PATH asks, then commands. */
static void srv_conn(int fd) {
  char req[4096] = "";
  size_t n = 0;
  while (n < sizeof(req) - 1 && !strstr(req, "\r\n\r\n")) {
    ssize_t k = read(fd, req + n, sizeof(req) - 1 - n);
    if (k <= 0)
      _exit(6);
    req[n += (size_t)k] = '\0';
  }
  const char *k = strstr(req, "Sec-WebSocket-Key: ");
  char ckey[AGSX_CDPWS_KEY_SIZE] = "", acc[AGSX_CDPWS_ACCEPT_SIZE], ans[512];
  if (k)
    snprintf(ckey, sizeof(ckey), "%.24s", k + 19);
  agsx_cdpws_accept(ckey, acc);
  if (agsx_str_has_prefix(req, "GET /404 ")) {
    agsx_write_all(fd, "HTTP/1.1 404 Not Found\r\n\r\n", 26);
    return;
  }
  if (agsx_str_has_prefix(req, "GET /cut ")) {
    agsx_write_all(fd, "HTTP/1.1 101 Switching", 22);
    return;
  }
  if (agsx_str_has_prefix(req, "GET /mute "))
    sleep(2);
  snprintf(ans, sizeof(ans),
           "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Accept: %s\r\n\r\n",
           acc);
  agsx_write_all(fd, ans, strlen(ans));
  int64_t slow_id = 0;
  slen = 0;
  for (;;) {
    char *msg = NULL;
    unsigned op = srv_frame(fd, &msg);
    bool more = op != AGSX_WS_CLOSE && op != 0xff;
    if (op == AGSX_WS_TEXT)
      more = srv_command(fd, msg, &slow_id);
    free(msg);
    if (!more)
      return;
  }
}

static pid_t srv_start(struct sockaddr_storage *ret) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(a);
  if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(s, 8) < 0 ||
      getsockname(s, (struct sockaddr *)&a, &len) < 0)
    abort();
  memset(ret, 0, sizeof(*ret));
  memcpy(ret, &a, sizeof(a));
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGPIPE, SIG_IGN); /* the client may be gone (/mute) */
    for (;;) {
      int c = accept4(s, NULL, NULL, SOCK_CLOEXEC);
      if (c < 0)
        _exit(7);
      srv_conn(c);
      close(c);
    }
  }
  close(s);
  return pid;
}

static void call_is(struct agsx_cdp *c, const char *sid, const char *method, const char *params,
                    int ms, const char *want, const char *why) {
  _cleanup_json_ yajl_val res = NULL;
  agsx_error_t err = NULL;
  int r = agsx_cdp_call(c, sid, method, params, ms, &res, &err);
  _cleanup_free_ char *text = NULL;
  if (res) { /* the tree as JSON text, to compare */
    _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
    agsx_json_value(g, res);
    size_t len;
    text = agsx_json_gen_steal(g, &len);
  }
  if (want)
    tap_ok(r == 0 && text && strcmp(text, want) == 0, "%s: %s -> %s (%s)", why, method,
           text ? text : "", err ? err->msg : "");
  else
    tap_ok(r < 0 && res == NULL && err, "%s: %s fails: %s", why, method, err ? err->msg : "");
  agsx_error_free(&err);
}

static void err_has(int r, agsx_error_t *err, const char *want, const char *why) {
  tap_ok(r < 0 && *err && strstr((*err)->msg, want), "%s: %s", why,
         *err ? (*err)->msg : "no error");
  agsx_error_free(err);
}

static void test_client(void) {
  struct sockaddr_storage a;
  pid_t pid = srv_start(&a);
  agsx_error_t err = NULL;
  struct agsx_cdp *c = NULL;
  int r = agsx_cdp_open(&a, "127.0.0.1", "/ok", 5000, &c, &err);
  tap_ok(r == 0 && c, "open: handshake done (%s)", err ? err->msg : "");
  agsx_error_free(&err);
  call_is(c, NULL, "T.events", NULL, 5000, "{\"ok\":true}",
          "events, a stale answer, a non-object, binary and pings skipped, fragments joined");
  yajl_val res = NULL; /* every call below fails: nothing to free */
  r = agsx_cdp_call(c, NULL, "T.error", "{}", 5000, &res, &err);
  err_has(r, &err, "T.error: the browser answered: No? such thing: detail (-32000)",
          "an error answer: the browser's message, made printable");
  int64_t t0 = agsx_mono_ns();
  r = agsx_cdp_call(c, NULL, "T.slow", NULL, 200, &res, &err);
  int64_t ms = (agsx_mono_ns() - t0) / 1000000;
  tap_ok(r < 0 && err && agsx_error_errno(&err) == ETIMEDOUT && ms >= 190 && ms < 2000,
         "no answer: times out after %lld ms: %s", (long long)ms, err ? err->msg : "");
  tap_ok(err && strstr(err->msg, "no answer to T.slow from the browser's DevTools endpoint within "
                                 "200 ms"),
         "the timeout names the method and the time");
  agsx_error_free(&err);
  call_is(c, NULL, "T.after", NULL, 5000, "{\"after\":1}",
          "after a timeout the connection works, the late answer dropped");
  call_is(c, "s\"1\n", "T.echo", "{\"url\":\"data:text/html,<p>\\\"x\\\"</p>\",\"n\":[1,2.5]}",
          5000,
          "{\"method\":\"T.echo\",\"session\":\"s\\\"1\\n\",\"params\":{\"url\":\"data:text/"
          "html,<p>\\\"x\\\"</p>\",\"n\":[1,2.5]}}",
          "sessionId escaped, params carried through");
  r = agsx_cdp_call(c, NULL, "T.echo", "{\"a\":", 5000, &res, &err);
  err_has(r, &err, "T.echo: parameters: invalid JSON", "parameters that are not JSON: refused");
  r = agsx_cdp_call(c, NULL, "T.echo", "[1]", 5000, &res, &err);
  err_has(r, &err, "not a JSON object", "parameters that are not an object: refused");
  call_is(c, NULL, "T.echo", NULL, 5000, "{\"method\":\"T.echo\",\"session\":null,\"params\":{}}",
          "still usable after refused parameters");
  r = agsx_cdp_call(c, NULL, "T.close", NULL, 5000, &res, &err);
  err_has(r, &err, "the browser's DevTools endpoint closed the connection (1001 going away)",
          "a close frame ends the connection");
  r = agsx_cdp_call(c, NULL, "T.echo", NULL, 5000, &res, &err);
  err_has(r, &err,
          "T.echo: the DevTools connection is down: the browser's DevTools endpoint "
          "closed the connection",
          "calls after the close fail at once");
  agsx_cdp_close(c);

  c = NULL;
  r = agsx_cdp_open(&a, "127.0.0.1", "/ok", 5000, &c, &err);
  tap_ok(r == 0, "open again (%s)", err ? err->msg : "");
  if (r < 0)
    return;
  r = agsx_cdp_call(c, NULL, "T.rsv", NULL, 5000, &res, &err);
  err_has(r, &err, "broke the WebSocket protocol: WebSocket frame with reserved bits set",
          "a frame with a reserved bit breaks the connection");
  agsx_cdp_close(c);
  c = NULL;
  r = agsx_cdp_open(&a, "127.0.0.1", "/ok", 5000, &c, &err);
  tap_ok(r == 0, "open again (%s)", err ? err->msg : "");
  if (r < 0)
    return;
  r = agsx_cdp_call(c, NULL, "T.eof", NULL, 5000, &res, &err);
  err_has(r, &err, "the browser's DevTools endpoint closed the connection",
          "the peer going away mid-call");
  agsx_cdp_close(c);

  c = NULL;
  r = agsx_cdp_open(&a, "127.0.0.1", "/ok", 5000, &c, &err);
  tap_ok(r == 0, "open again (%s)", err ? err->msg : "");
  if (r < 0)
    return;
  r = agsx_cdp_call(c, NULL, "T.many", NULL, 5000, &res, &err);
  err_has(r, &err, "sent a message of more than 1048576 JSON values",
          "a message that would make too big a tree: refused");
  agsx_cdp_close(c);

  c = NULL;
  r = agsx_cdp_open(&a, "127.0.0.1", "/404", 5000, &c, &err);
  err_has(r == 0 ? 0 : -1, &err,
          "answered HTTP 404 instead of switching to WebSocket (wrong path?)",
          "open: a 404 answer");
  tap_ok(c == NULL, "open: nothing returned on failure");
  r = agsx_cdp_open(&a, "127.0.0.1", "/cut", 5000, &c, &err);
  err_has(r, &err, "the WebSocket handshake answer is truncated", "open: the answer cut short");
  r = agsx_cdp_open(&a, "127.0.0.1", "/mute", 300, &c, &err);
  err_has(r, &err,
          "no WebSocket handshake answer from the browser's DevTools endpoint within 300 ms",
          "open: no answer in time");
  r = agsx_cdp_open(&a, "127.0.0.1", "/ok", 0, &c, &err);
  err_has(r, &err, "no time given", "open: a timeout of 0 refused");

  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  /* Nothing listens there now. */
  r = agsx_cdp_open(&a, "127.0.0.1", "/ok", 2000, &c, &err);
  err_has(r, &err, "connect to the browser's DevTools endpoint at 127.0.0.1:", "open: refused");
}

int main(void) {
  test_sha1();
  test_request();
  test_answer();
  test_decode();
  test_messages();
  test_roundtrip();
  test_client();
  return tap_done();
}
