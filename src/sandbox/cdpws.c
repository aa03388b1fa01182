/* agsx — cdpws: a DevTools client over WebSocket (see cdpws.h).
 *
 * The first half is pure functions over the untrusted bytes (SHA-1, the
 * handshake, frames, reassembly), the second the blocking client that
 * strings them together with poll(2) deadlines. */
#include "config.h"

#include "sandbox/cdpws.h"
#include "api/wire.h"
#include "net/relay.h"
#include "util/json.h"

#include <ctype.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/random.h>

/* ---- SHA-1 (FIPS 180-4, 6.1) ----------------------------------------------------------------
 * Broken for collisions, but RFC 6455 only uses it to prove that the server
 * read our key; no security rests on it here. */

static uint32_t rol(uint32_t x, int n) { return x << n | x >> (32 - n); }

static void sha1_block(uint32_t h[5], const unsigned char *p) {
  uint32_t w[80];
  for (int t = 0; t < 16; t++)
    w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 | (uint32_t)p[4 * t + 2] << 8 |
           p[4 * t + 3];
  for (int t = 16; t < 80; t++)
    w[t] = rol(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
  for (int t = 0; t < 80; t++) {
    uint32_t f, k;
    if (t < 20)
      f = (b & c) ^ (~b & d), k = 0x5a827999; /* Ch */
    else if (t < 40)
      f = b ^ c ^ d, k = 0x6ed9eba1; /* Parity */
    else if (t < 60)
      f = (b & c) ^ (b & d) ^ (c & d), k = 0x8f1bbcdc; /* Maj */
    else
      f = b ^ c ^ d, k = 0xca62c1d6;
    uint32_t tmp = rol(a, 5) + f + e + k + w[t];
    e = d;
    d = c;
    c = rol(b, 30);
    b = a;
    a = tmp;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
}

void agsx_sha1_init(struct agsx_sha1 *s) {
  static const uint32_t h0[5] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0};
  memcpy(s->h, h0, sizeof(h0));
  s->total = 0;
  s->n = 0;
}

void agsx_sha1_update(struct agsx_sha1 *s, const void *data, size_t len) {
  const unsigned char *p = data;
  s->total += len;
  while (len > 0) {
    size_t k = 64 - s->n < len ? 64 - s->n : len;
    memcpy(s->block + s->n, p, k);
    s->n += k, p += k, len -= k;
    if (s->n == 64) {
      sha1_block(s->h, s->block);
      s->n = 0;
    }
  }
}

void agsx_sha1_final(struct agsx_sha1 *s, unsigned char md[20]) {
  uint64_t bits = s->total * 8;
  unsigned char pad[72] = {0x80};
  size_t padlen = (s->n < 56 ? 56 : 120) - s->n;
  for (int i = 0; i < 8; i++)
    pad[padlen + i] = (unsigned char)(bits >> (56 - 8 * i));
  agsx_sha1_update(s, pad, padlen + 8);
  for (int i = 0; i < 20; i++)
    md[i] = (unsigned char)(s->h[i / 4] >> (24 - 8 * (i % 4)));
}

void agsx_sha1(const void *data, size_t len, unsigned char md[20]) {
  struct agsx_sha1 s;
  agsx_sha1_init(&s);
  agsx_sha1_update(&s, data, len);
  agsx_sha1_final(&s, md);
}

/* ---- the opening handshake (RFC 6455 4.1, 4.2.2) ------------------------------------------- */

void agsx_cdpws_accept(const char *key, char ret[AGSX_CDPWS_ACCEPT_SIZE]) {
  static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
  struct agsx_sha1 s;
  unsigned char md[20];
  agsx_sha1_init(&s);
  agsx_sha1_update(&s, key, strlen(key));
  agsx_sha1_update(&s, guid, sizeof(guid) - 1);
  agsx_sha1_final(&s, md);
  _cleanup_free_ char *b = agsx_base64_encode(md, sizeof(md));
  snprintf(ret, AGSX_CDPWS_ACCEPT_SIZE, "%s", b);
}

/* Printable ASCII without spaces: nothing that could end a request line or
 * header, or start another. */
static bool is_token_text(const char *s) {
  if (*s == '\0' || strlen(s) > 2048)
    return false;
  for (; *s; s++)
    if ((unsigned char)*s <= 0x20 || (unsigned char)*s >= 0x7f)
      return false;
  return true;
}

int agsx_cdpws_request(const char *host, const char *path, char **ret_req,
                       char ret_key[AGSX_CDPWS_KEY_SIZE], agsx_error_t *err) {
  *ret_req = NULL;
  /* Not repeated in the message: they may hold line breaks. */
  if (!is_token_text(host))
    return agsx_error_set(err, 0,
                          "invalid WebSocket Host header (want printable ASCII, no spaces)");
  if (path[0] != '/' || !is_token_text(path))
    return agsx_error_set(err, 0,
                          "invalid WebSocket path (want `/` then printable ASCII, no spaces)");
  unsigned char nonce[16];
  if (getrandom(nonce, sizeof(nonce), 0) != (ssize_t)sizeof(nonce))
    return agsx_error_set(err, errno, "getrandom");
  _cleanup_free_ char *key = agsx_base64_encode(nonce, sizeof(nonce));
  snprintf(ret_key, AGSX_CDPWS_KEY_SIZE, "%s", key);
  *ret_req = xasprintf("GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\n"
                       "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                       "Sec-WebSocket-Version: 13\r\n\r\n",
                       path, host, key);
  return 0;
}

/* Whether S[0..N) is LIT, ignoring ASCII case. */
static bool ieq(const char *s, size_t n, const char *lit) {
  if (n != strlen(lit))
    return false;
  for (size_t i = 0; i < n; i++)
    if (tolower((unsigned char)s[i]) != lit[i])
      return false;
  return true;
}

/* Whether the comma-separated list V[0..N) has TOKEN (lowercase). */
static bool has_token(const char *v, size_t n, const char *token) {
  const char *end = v + n;
  while (v < end) {
    const char *comma = memchr(v, ',', (size_t)(end - v));
    const char *e = comma ? comma : end;
    const char *b = v;
    while (b < e && (*b == ' ' || *b == '\t'))
      b++;
    const char *t = e;
    while (t > b && (t[-1] == ' ' || t[-1] == '\t'))
      t--;
    if (ieq(b, (size_t)(t - b), token))
      return true;
    v = comma ? comma + 1 : end;
  }
  return false;
}

struct answer {
  bool upgrade, connection, accept_ok;
  int n_accept;
  const char *extra; /* a header we did not ask for and cannot honour */
};

/* One header line LINE[0..N) (no CR LF) of the 101 answer. */
static int answer_header(const char *line, size_t n, const char *want, struct answer *a,
                         agsx_error_t *err) {
  const char *colon = memchr(line, ':', n);
  if (colon == NULL || colon == line)
    return agsx_error_set(err, 0, "malformed header line in the WebSocket handshake answer");
  size_t nlen = (size_t)(colon - line);
  const char *v = colon + 1, *end = line + n;
  while (v < end && (*v == ' ' || *v == '\t'))
    v++;
  while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
    end--;
  size_t vlen = (size_t)(end - v);
  if (memchr(v, '\0', vlen))
    return agsx_error_set(err, 0, "NUL byte in the WebSocket handshake answer");
  if (ieq(line, nlen, "upgrade"))
    a->upgrade = ieq(v, vlen, "websocket");
  else if (ieq(line, nlen, "connection"))
    a->connection = has_token(v, vlen, "upgrade");
  else if (ieq(line, nlen, "sec-websocket-accept"))
    a->accept_ok = ++a->n_accept == 1 && vlen == strlen(want) && memcmp(v, want, vlen) == 0;
  else if (ieq(line, nlen, "sec-websocket-extensions"))
    a->extra = "an extension";
  else if (ieq(line, nlen, "sec-websocket-protocol"))
    a->extra = "a subprotocol";
  return 0;
}

/* The status line BUF[0..N): "HTTP/1.x 101 ...". */
static int answer_status(const char *buf, size_t n, agsx_error_t *err) {
  if (n < 12 || memcmp(buf, "HTTP/1.", 7) != 0 || !isdigit((unsigned char)buf[7]) ||
      buf[8] != ' ' || !isdigit((unsigned char)buf[9]) || !isdigit((unsigned char)buf[10]) ||
      !isdigit((unsigned char)buf[11]) || (n > 12 && buf[12] != ' '))
    return agsx_error_set(err, 0, "the WebSocket handshake answer is not an HTTP/1 response");
  if (memcmp(buf + 9, "101", 3) != 0)
    return agsx_error_set(err, 0,
                          "the DevTools endpoint answered HTTP %.3s instead of switching to "
                          "WebSocket%s",
                          buf + 9, memcmp(buf + 9, "404", 3) == 0 ? " (wrong path?)" : "");
  return 0;
}

static int answer_check(const struct answer *a, agsx_error_t *err) {
  const char *what = !a->upgrade        ? "no `Upgrade: websocket`"
                     : !a->connection   ? "no `Connection: Upgrade`"
                     : a->n_accept == 0 ? "no Sec-WebSocket-Accept"
                     : !a->accept_ok    ? "a wrong Sec-WebSocket-Accept"
                                        : NULL;
  if (what)
    return agsx_error_set(err, 0, "the WebSocket handshake answer has %s", what);
  if (a->extra)
    return agsx_error_set(err, 0, "the WebSocket handshake answer chose %s we did not offer",
                          a->extra);
  return 0;
}

int agsx_cdpws_parse_answer(const char *buf, size_t len, bool eof, const char *key,
                            size_t *ret_size, agsx_error_t *err) {
  *ret_size = 0;
  size_t scan = len < AGSX_CDPWS_ANSWER_MAX ? len : AGSX_CDPWS_ANSWER_MAX;
  const char *end = NULL;
  for (size_t i = 0; i + 4 <= scan && end == NULL; i++)
    if (memcmp(buf + i, "\r\n\r\n", 4) == 0)
      end = buf + i;
  if (end == NULL && len >= AGSX_CDPWS_ANSWER_MAX)
    return agsx_error_set(err, 0, "the WebSocket handshake answer has no end within %u bytes",
                          AGSX_CDPWS_ANSWER_MAX);
  if (end == NULL)
    return eof ? agsx_error_set(err, 0, "the WebSocket handshake answer is truncated") : 0;
  const char *eol = memchr(buf, '\n', (size_t)(end + 2 - buf));
  if (eol == buf || eol[-1] != '\r')
    return agsx_error_set(err, 0, "the WebSocket handshake answer is not an HTTP/1 response");
  if (answer_status(buf, (size_t)(eol - 1 - buf), err) < 0)
    return -1;
  char want[AGSX_CDPWS_ACCEPT_SIZE];
  agsx_cdpws_accept(key, want);
  struct answer a = {0};
  for (const char *p = eol + 1; p < end + 2;) {
    const char *nl = memchr(p, '\n', (size_t)(end + 2 - p));
    size_t n = (size_t)(nl - p);
    if (n == 0 || p[n - 1] != '\r')
      return agsx_error_set(err, 0, "malformed header line in the WebSocket handshake answer");
    if (answer_header(p, n - 1, want, &a, err) < 0)
      return -1;
    p = nl + 1;
  }
  if (answer_check(&a, err) < 0)
    return -1;
  *ret_size = (size_t)(end + 4 - buf);
  return 1;
}

/* ---- frames (RFC 6455 5.2) ------------------------------------------------------------------ */

static bool known_opcode(unsigned op) {
  return op == AGSX_WS_CONT || op == AGSX_WS_TEXT || op == AGSX_WS_BINARY || op == AGSX_WS_CLOSE ||
         op == AGSX_WS_PING || op == AGSX_WS_PONG;
}

/* The payload length at P (the second byte on) into *RET and the header
 * bytes so far into *RET_H: 1, 0 (more bytes needed), -1. */
static int frame_length(const unsigned char *p, size_t len, uint64_t *ret, size_t *ret_h,
                        agsx_error_t *err) {
  uint64_t n = p[1] & 0x7f;
  *ret_h = 2;
  if (n == 126) {
    if (len < 4)
      return 0;
    n = (uint64_t)p[2] << 8 | p[3];
    *ret_h = 4;
    if (n < 126)
      return agsx_error_set(err, 0, "WebSocket frame length not in its shortest form");
  } else if (n == 127) {
    if (len < 10)
      return 0;
    n = 0;
    for (int i = 0; i < 8; i++)
      n = n << 8 | p[2 + i];
    *ret_h = 10;
    if (n >> 63)
      return agsx_error_set(err, 0, "WebSocket frame length with the top bit set");
    if (n <= 0xffff)
      return agsx_error_set(err, 0, "WebSocket frame length not in its shortest form");
  }
  *ret = n;
  return 1;
}

int agsx_cdpws_frame_decode(const void *buf, size_t len, bool masked, size_t max,
                            struct agsx_cdpws_frame *ret, agsx_error_t *err) {
  const unsigned char *p = buf;
  memset(ret, 0, sizeof(*ret));
  if (len < 2)
    return 0;
  unsigned op = p[0] & 0x0f;
  bool control = op & 0x8, fin = p[0] & 0x80;
  if (p[0] & 0x70)
    return agsx_error_set(err, 0, "WebSocket frame with reserved bits set (0x%02x)", p[0] & 0x70);
  if (!known_opcode(op))
    return agsx_error_set(err, 0, "WebSocket frame with unknown opcode 0x%x", op);
  if ((bool)(p[1] & 0x80) != masked)
    return agsx_error_set(err, 0,
                          masked ? "unmasked WebSocket frame from a client"
                                 : "masked WebSocket frame from the server");
  if (control && !fin)
    return agsx_error_set(err, 0, "fragmented WebSocket control frame");
  if (control && (p[1] & 0x7f) > AGSX_CDPWS_CONTROL_MAX)
    return agsx_error_set(err, 0, "WebSocket control frame longer than %d bytes",
                          AGSX_CDPWS_CONTROL_MAX);
  uint64_t n = 0;
  size_t h = 0;
  int r = frame_length(p, len, &n, &h, err);
  if (r <= 0)
    return r;
  if (n > max)
    return agsx_error_set(err, 0, "WebSocket frame of %llu bytes (at most %zu)",
                          (unsigned long long)n, max);
  if (masked) {
    if (len < h + 4)
      return 0;
    memcpy(ret->mask, p + h, 4);
    h += 4;
  }
  if (len - h < n)
    return 0;
  ret->fin = fin;
  ret->opcode = op;
  ret->masked = masked;
  ret->header_len = h;
  ret->payload_len = (size_t)n;
  ret->size = h + (size_t)n;
  return 1;
}

void agsx_cdpws_unmask(void *buf, size_t len, const unsigned char mask[4]) {
  unsigned char *p = buf;
  for (size_t i = 0; i < len; i++)
    p[i] ^= mask[i & 3];
}

int agsx_cdpws_frame_encode(unsigned opcode, const void *buf, size_t len, char **ret,
                            size_t *ret_size, agsx_error_t *err) {
  *ret = NULL;
  unsigned char mask[4];
  if (getrandom(mask, sizeof(mask), 0) != (ssize_t)sizeof(mask))
    return agsx_error_set(err, errno, "getrandom");
  unsigned char *out = xmalloc(AGSX_CDPWS_HEADER_MAX + len);
  size_t h = 0;
  out[h++] = (unsigned char)(0x80 | (opcode & 0x0f));
  if (len < 126) {
    out[h++] = (unsigned char)(0x80 | len);
  } else if (len <= 0xffff) {
    out[h++] = 0x80 | 126;
    out[h++] = (unsigned char)(len >> 8);
    out[h++] = (unsigned char)len;
  } else {
    out[h++] = 0x80 | 127;
    for (int i = 7; i >= 0; i--)
      out[h++] = (unsigned char)((uint64_t)len >> (8 * i));
  }
  memcpy(out + h, mask, 4);
  h += 4;
  if (len > 0)
    memcpy(out + h, buf, len);
  agsx_cdpws_unmask(out + h, len, mask);
  *ret = (char *)out;
  *ret_size = h + len;
  return 0;
}

void agsx_cdpws_message_clear(struct agsx_cdpws_message *m) {
  free(m->buf);
  memset(m, 0, sizeof(*m));
}

int agsx_cdpws_message_add(struct agsx_cdpws_message *m, const struct agsx_cdpws_frame *f,
                           const void *payload, size_t max, agsx_error_t *err) {
  if (f->opcode == AGSX_WS_CONT) {
    if (!m->open)
      return agsx_error_set(err, 0, "WebSocket continuation frame without a message to continue");
  } else if (f->opcode == AGSX_WS_TEXT || f->opcode == AGSX_WS_BINARY) {
    if (m->open)
      return agsx_error_set(err, 0, "WebSocket message started inside a fragmented one");
    m->opcode = f->opcode;
    m->len = 0;
    m->open = true;
  } else {
    return agsx_error_set_quiet(err, EINVAL, "WebSocket control frame given as a message part");
  }
  if (f->payload_len > max || m->len > max - f->payload_len)
    return agsx_error_set(err, 0, "WebSocket message over %zu bytes", max);
  m->buf = xrealloc(m->buf, m->len + f->payload_len + 1);
  if (f->payload_len > 0)
    memcpy(m->buf + m->len, payload, f->payload_len);
  m->len += f->payload_len;
  m->buf[m->len] = '\0';
  if (!f->fin)
    return 0;
  m->open = false;
  return 1;
}

char *agsx_cdpws_close_reason(const void *payload, size_t len) {
  const unsigned char *p = payload;
  if (len < 2)
    return xstrdup("no status code");
  unsigned code = (unsigned)p[0] << 8 | p[1];
  for (size_t i = 2; i < len; i++)
    if (p[i] < 0x20 || p[i] > 0x7e)
      return xasprintf("%u", code);
  return len > 2 ? xasprintf("%u %.*s", code, (int)(len - 2), (const char *)p + 2)
                 : xasprintf("%u", code);
}

/* ---- the client ------------------------------------------------------------------------------ */

#define PEER "the browser's DevTools endpoint"
#define IN_INITIAL (64u << 10)
#define IN_MAX (AGSX_CDP_MESSAGE_MAX + AGSX_CDPWS_HEADER_MAX)
#define CDP_ERROR_TEXT_MAX 300 /* of the browser's error messages we repeat */

struct agsx_cdp {
  int fd;
  char *in; /* received, not yet decoded */
  size_t in_len, in_cap;
  struct agsx_cdpws_message msg;
  int64_t last_id;
  bool up;      /* the handshake is done */
  char *broken; /* why no more calls can be made, once so */
};

/* Milliseconds left until UNTIL (monotonic ns), 0 when past. */
static int left_ms(int64_t until) {
  int64_t ns = until - agsx_mono_ns();
  return ns <= 0 ? 0 : (int)((ns + 999999) / 1000000);
}

/* "30 s" or "1500 ms", for timeout messages. */
static char *format_ms(int ms) {
  return ms % 1000 == 0 ? xasprintf("%d s", ms / 1000) : xasprintf("%d ms", ms);
}

static int timed_out(agsx_error_t *err, const char *what, int timeout_ms) {
  _cleanup_free_ char *t = format_ms(timeout_ms);
  return agsx_error_set_quiet(err, ETIMEDOUT, "%s within %s", what, t);
}

/* Waits for EVENTS on FD until UNTIL: 1 ready, 0 timed out, -1 (errno). */
static int wait_fd(int fd, short events, int64_t until) {
  for (;;) {
    struct pollfd p = {.fd = fd, .events = events};
    int r = poll(&p, 1, left_ms(until));
    if (r >= 0 || errno != EINTR)
      return r < 0 ? -1 : r;
  }
}

/* A non-blocking TCP socket connected to A within UNTIL. */
static int dial(const struct sockaddr_storage *a, int64_t until, int timeout_ms,
                agsx_error_t *err) {
  char where[80];
  agsx_sockaddr_format(a, where, sizeof(where));
  _cleanup_close_ int s = socket(a->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  socklen_t alen =
      a->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
  if (s < 0)
    return agsx_error_set(err, errno, "socket");
  if (connect(s, (const struct sockaddr *)a, alen) < 0 && errno != EINPROGRESS && errno != EINTR)
    return agsx_error_set(err, errno, "connect to " PEER " at %s", where);
  int r = wait_fd(s, POLLOUT, until), so = 0;
  socklen_t len = sizeof(so);
  if (r == 0) {
    _cleanup_free_ char *what = xasprintf("no connection to " PEER " at %s", where);
    return timed_out(err, what, timeout_ms);
  }
  if (r < 0 || getsockopt(s, SOL_SOCKET, SO_ERROR, &so, &len) < 0 || so != 0)
    return agsx_error_set(err, so ? so : errno, "connect to " PEER " at %s", where);
  /* Commands are small and each waits for its answer: no Nagle delay. */
  int one = 1;
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return steal_fd(&s);
}

/* Writes BUF[0..LEN) whole before UNTIL; WHAT names it for a timeout. */
static int send_all(struct agsx_cdp *c, const void *buf, size_t len, int64_t until,
                    const char *what, int timeout_ms, agsx_error_t *err) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n, len -= (size_t)n;
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR)
      return agsx_error_set(err, errno, "send %s to " PEER, what);
    int r = wait_fd(c->fd, POLLOUT, until);
    if (r < 0)
      return agsx_error_set(err, errno, "poll");
    if (r == 0) {
      _cleanup_free_ char *w = xasprintf("could not send %s to " PEER, what);
      return timed_out(err, w, timeout_ms);
    }
  }
  return 0;
}

/* Reads what has come into C->in, growing it up to IN_MAX; waits until
 * UNTIL for something to come. 1 read, 0 EOF, -1 (ERR set; ETIMEDOUT
 * after WHAT within TIMEOUT_MS). */
static int recv_some(struct agsx_cdp *c, int64_t until, const char *what, int timeout_ms,
                     agsx_error_t *err) {
  if (c->in_len == c->in_cap) {
    if (c->in_cap >= IN_MAX)
      return agsx_error_set(err, 0, PEER " sent more than %u bytes in one frame", IN_MAX);
    c->in_cap = c->in_cap == 0 ? IN_INITIAL : c->in_cap * 2 < IN_MAX ? c->in_cap * 2 : IN_MAX;
    c->in = xrealloc(c->in, c->in_cap);
  }
  for (;;) {
    ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
    if (n >= 0) {
      c->in_len += (size_t)n;
      return n > 0;
    }
    if (errno != EAGAIN && errno != EINTR)
      return agsx_error_set(err, errno, "read from " PEER);
    int r = wait_fd(c->fd, POLLIN, until);
    if (r < 0)
      return agsx_error_set(err, errno, "poll");
    if (r == 0)
      return timed_out(err, what, timeout_ms);
  }
}

/* Drops the first N bytes of C->in. */
static void consume(struct agsx_cdp *c, size_t n) {
  memmove(c->in, c->in + n, c->in_len - n);
  c->in_len -= n;
  if (c->in_len == 0 && c->in_cap > IN_INITIAL) { /* a screenshot's buffer, not kept */
    free(c->in);
    c->in = NULL;
    c->in_cap = 0;
  }
}

static int handshake(struct agsx_cdp *c, const char *key, int64_t until, int timeout_ms,
                     agsx_error_t *err) {
  for (;;) {
    int r = recv_some(c, until, "no WebSocket handshake answer from " PEER, timeout_ms, err);
    if (r < 0)
      return -1;
    size_t size;
    int p = agsx_cdpws_parse_answer(c->in, c->in_len, r == 0, key, &size, err);
    if (p < 0)
      return -1;
    if (p > 0) {
      consume(c, size);
      c->up = true;
      return 0;
    }
  }
}

int agsx_cdp_open(const struct sockaddr_storage *addr, const char *host_header, const char *path,
                  int timeout_ms, struct agsx_cdp **ret, agsx_error_t *err) {
  *ret = NULL;
  if (timeout_ms <= 0)
    return agsx_error_set_quiet(err, EINVAL, "DevTools connection: no time given");
  int64_t until = agsx_mono_ns() + (int64_t)timeout_ms * 1000000;
  _cleanup_free_ char *req = NULL;
  char key[AGSX_CDPWS_KEY_SIZE];
  if (agsx_cdpws_request(host_header, path, &req, key, err) < 0)
    return -1;
  _cleanup_cdp_ struct agsx_cdp *c = xzalloc(sizeof(*c));
  c->fd = dial(addr, until, timeout_ms, err);
  if (c->fd < 0 ||
      send_all(c, req, strlen(req), until, "the WebSocket upgrade", timeout_ms, err) < 0 ||
      handshake(c, key, until, timeout_ms, err) < 0)
    return -1;
  *ret = steal_ptr(&c);
  return 0;
}

/* Encodes and sends a frame of OPCODE; WHAT for messages. */
static int send_frame(struct agsx_cdp *c, unsigned opcode, const void *buf, size_t len,
                      int64_t until, const char *what, int timeout_ms, agsx_error_t *err) {
  _cleanup_free_ char *frame = NULL;
  size_t size;
  if (agsx_cdpws_frame_encode(opcode, buf, len, &frame, &size, err) < 0)
    return -1;
  return send_all(c, frame, size, until, what, timeout_ms, err);
}

/* A close frame from the peer: answered (best effort, RFC 6455 5.5.1),
 * and the end of this connection. */
static int on_close(struct agsx_cdp *c, const char *payload, size_t len, agsx_error_t *err) {
  _cleanup_free_ char *frame = NULL;
  size_t size;
  if (agsx_cdpws_frame_encode(AGSX_WS_CLOSE, payload, len < 2 ? 0 : 2, &frame, &size, NULL) == 0)
    (void)send(c->fd, frame, size, MSG_NOSIGNAL | MSG_DONTWAIT);
  c->up = false;
  _cleanup_free_ char *why = agsx_cdpws_close_reason(payload, len);
  return agsx_error_set(err, 0, PEER " closed the connection (%s)", why);
}

/* Reads frames until C->msg holds a whole data message, answering pings
 * on the way. WHAT (and TIMEOUT_MS) make the timeout's message. */
static int next_message(struct agsx_cdp *c, int64_t until, const char *what, int timeout_ms,
                        agsx_error_t *err) {
  for (;;) {
    struct agsx_cdpws_frame f;
    int r = agsx_cdpws_frame_decode(c->in, c->in_len, false, AGSX_CDP_MESSAGE_MAX, &f, err);
    if (r < 0)
      return agsx_error_wrap(err, PEER " broke the WebSocket protocol");
    if (r == 0) {
      r = recv_some(c, until, what, timeout_ms, err);
      if (r == 0)
        return agsx_error_set(err, 0, PEER " closed the connection");
      if (r < 0)
        return -1;
      continue;
    }
    const char *payload = c->in + f.header_len;
    if (f.opcode == AGSX_WS_CLOSE)
      return on_close(c, payload, f.payload_len, err);
    if (f.opcode == AGSX_WS_PING)
      r = send_frame(c, AGSX_WS_PONG, payload, f.payload_len, until, "a pong", timeout_ms, err);
    else if (f.opcode != AGSX_WS_PONG)
      r = agsx_cdpws_message_add(&c->msg, &f, payload, AGSX_CDP_MESSAGE_MAX, err);
    consume(c, f.size);
    if (r < 0)
      return agsx_error_wrap(err, PEER);
    if (r == 1)
      return 0;
  }
}

/* {"id":ID,"method":METHOD,"params":PARAMS[,"sessionId":SESSION]}; the
 * caller's params are parsed and re-emitted, so the message is JSON. */
static int build_command(int64_t id, const char *session, const char *method, const char *params,
                         char **ret, size_t *ret_len, agsx_error_t *err) {
  _cleanup_json_ yajl_val p = NULL;
  if (params != NULL) {
    p = agsx_json_parse(params, strlen(params), AGSX_CDP_MESSAGE_MAX, err);
    if (p == NULL)
      return agsx_error_wrap(err, "%s: parameters", method);
    if (!YAJL_IS_OBJECT(p))
      return agsx_error_set(err, 0, "%s: the parameters are not a JSON object", method);
  }
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_int(g, "id", id);
  agsx_json_kv_str(g, "method", method);
  agsx_json_key(g, "params");
  if (p != NULL) {
    agsx_json_value(g, p);
  } else {
    yajl_gen_map_open(g);
    yajl_gen_map_close(g);
  }
  if (session != NULL)
    agsx_json_kv_str(g, "sessionId", session);
  yajl_gen_map_close(g);
  *ret = agsx_json_gen_steal(g, ret_len);
  return 0;
}

/* Reads messages until the answer with ID, into *RET; events and the late
 * answers of timed-out calls go by. */
static int wait_answer(struct agsx_cdp *c, int64_t id, const char *method, int64_t until,
                       int timeout_ms, yajl_val *ret, agsx_error_t *err) {
  _cleanup_free_ char *what = xasprintf("no answer to %s from " PEER, method);
  for (;;) {
    if (next_message(c, until, what, timeout_ms, err) < 0)
      return -1;
    if (c->msg.opcode != AGSX_WS_TEXT) {
      agsx_cdpws_message_clear(&c->msg);
      continue;
    }
    /* 32 MiB of "[0,0,..." would be 16 million tree nodes, a GiB. */
    if (agsx_json_values_max(c->msg.buf, c->msg.len) > AGSX_CDP_VALUES_MAX)
      return agsx_error_set(err, 0, PEER " sent a message of more than %u JSON values",
                            AGSX_CDP_VALUES_MAX);
    yajl_val v = agsx_json_parse(c->msg.buf, c->msg.len, AGSX_CDP_MESSAGE_MAX, err);
    agsx_cdpws_message_clear(&c->msg);
    if (v == NULL)
      return agsx_error_wrap(err, PEER " sent a message that is not JSON");
    int64_t got;
    if (YAJL_IS_OBJECT(v) && agsx_json_get_int64(v, "id", &got) && got == id) {
      *ret = v;
      return 0;
    }
    yajl_tree_free(v);
  }
}

/* S (the browser's) as printable ASCII, cut at CDP_ERROR_TEXT_MAX. */
static char *printable(const char *s) {
  size_t n = strnlen(s, CDP_ERROR_TEXT_MAX + 1);
  char *out = xstrndup(s, n > CDP_ERROR_TEXT_MAX ? CDP_ERROR_TEXT_MAX : n);
  for (char *q = out; *q; q++)
    if ((unsigned char)*q < 0x20 || (unsigned char)*q > 0x7e)
      *q = '?';
  return out;
}

/* An answer's "result", taken out of it (the tree parsed once, handed
 * over), or its "error" as ERR. */
static int answer_result(yajl_val v, const char *method, yajl_val *ret, agsx_error_t *err) {
  yajl_val e = agsx_json_get_object(v, "error");
  if (e != NULL) {
    const char *m = agsx_json_get_string(e, "message"), *d = agsx_json_get_string(e, "data");
    _cleanup_free_ char *msg = printable(m ? m : "an error without a message");
    _cleanup_free_ char *data = d ? printable(d) : NULL;
    int64_t code = 0;
    agsx_json_get_int64(e, "code", &code);
    return agsx_error_set(err, 0, "%s: the browser answered: %s%s%s (%lld)", method, msg,
                          data ? ": " : "", data ? data : "", (long long)code);
  }
  for (size_t i = 0; YAJL_IS_OBJECT(v) && i < v->u.object.len; i++)
    if (strcmp(v->u.object.keys[i], "result") == 0 && YAJL_IS_OBJECT(v->u.object.values[i])) {
      *ret = v->u.object.values[i];
      v->u.object.values[i] = NULL; /* yajl_tree_free passes over it */
      return 0;
    }
  return agsx_error_set(err, 0, "%s: the browser's answer has no result", method);
}

/* After a failed exchange: unless it only timed out while waiting (the
 * stream is still whole then), the connection is unusable from now on. */
static int fail(struct agsx_cdp *c, bool waiting, agsx_error_t *err) {
  if (c->broken == NULL && !(waiting && agsx_error_errno(err) == ETIMEDOUT))
    c->broken = xstrdup(*err ? (*err)->msg : "the DevTools connection failed");
  return -1;
}

int agsx_cdp_call(struct agsx_cdp *c, const char *session_id, const char *method,
                  const char *params_json, int timeout_ms, yajl_val *ret_result,
                  agsx_error_t *err) {
  *ret_result = NULL;
  if (c->broken != NULL)
    return agsx_error_set_quiet(err, EPIPE, "%s: the DevTools connection is down: %s", method,
                                c->broken);
  if (timeout_ms <= 0)
    return agsx_error_set_quiet(err, EINVAL, "%s: no time given", method);
  int64_t until = agsx_mono_ns() + (int64_t)timeout_ms * 1000000;
  _cleanup_free_ char *cmd = NULL;
  size_t len;
  if (build_command(c->last_id + 1, session_id, method, params_json, &cmd, &len, err) < 0)
    return -1;
  int64_t id = ++c->last_id;
  if (send_frame(c, AGSX_WS_TEXT, cmd, len, until, method, timeout_ms, err) < 0)
    return fail(c, false, err);
  _cleanup_json_ yajl_val answer = NULL;
  if (wait_answer(c, id, method, until, timeout_ms, &answer, err) < 0)
    return fail(c, true, err);
  return answer_result(answer, method, ret_result, err);
}

void agsx_cdp_close(struct agsx_cdp *c) {
  if (c == NULL)
    return;
  if (c->up && c->broken == NULL) {
    static const unsigned char normal[2] = {0x03, 0xe8}; /* 1000 */
    _cleanup_free_ char *frame = NULL;
    size_t size;
    if (agsx_cdpws_frame_encode(AGSX_WS_CLOSE, normal, sizeof(normal), &frame, &size, NULL) == 0)
      (void)send(c->fd, frame, size, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  if (c->fd >= 0)
    close(c->fd);
  agsx_cdpws_message_clear(&c->msg);
  free(c->in);
  free(c->broken);
  free(c);
}

void agsx_cdp_closep(struct agsx_cdp **c) {
  agsx_cdp_close(*c);
  *c = NULL;
}
