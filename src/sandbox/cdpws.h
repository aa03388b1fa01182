/* agsx — cdpws: a Chrome DevTools Protocol client over WebSocket (RFC 6455),
 * so that agsx can drive a browser sandbox (`agsx browser`) itself.
 *
 * The peer is a browser inside a sandbox: untrusted. Everything it sends
 * goes through the pure parsers below first (the 101 answer, frames,
 * message reassembly), each bounded and fuzzed; messages are JSON parsed by
 * yajl (util/json.h), capped at AGSX_CDP_MESSAGE_MAX bytes and
 * AGSX_CDP_VALUES_MAX values.
 *
 *   agsx_cdp_open      TCP connect, upgrade request, 101 answer checked
 *   agsx_cdp_call      one command, {"id":N,...}; waits for the answer N,
 *                      dropping events and stale answers on the way
 *   agsx_cdp_close     a close frame (best effort), then the fd
 *
 * The client is blocking, every step bounded by the caller's timeout, and
 * not thread-safe: one caller at a time per connection. */
#ifndef AGSX_CDPWS_H
#define AGSX_CDPWS_H

#include "util/json.h"
#include "util/util.h"

#include <sys/socket.h>

/* A whole message (after reassembly); screenshots are base64 PNGs. */
#define AGSX_CDP_MESSAGE_MAX (32u << 20)
/* Values (arrays, objects, members, elements) in one message: what its
 * yajl tree may take is bounded too, not only its text. */
#define AGSX_CDP_VALUES_MAX (1u << 20)
/* The 101 answer's status line and headers. */
#define AGSX_CDPWS_ANSWER_MAX (8u << 10)
/* Sec-WebSocket-Key: base64 of 16 random bytes, and a NUL. */
#define AGSX_CDPWS_KEY_SIZE 25
/* Sec-WebSocket-Accept: base64 of a SHA-1, and a NUL. */
#define AGSX_CDPWS_ACCEPT_SIZE 29
/* A frame header: 2 bytes, 8 of length, 4 of mask. */
#define AGSX_CDPWS_HEADER_MAX 14
/* Control frames carry at most 125 bytes (RFC 6455 5.5). */
#define AGSX_CDPWS_CONTROL_MAX 125

/* ---- SHA-1 (FIPS 180-4), for Sec-WebSocket-Accept only ---- */
struct agsx_sha1 {
  uint32_t h[5];
  uint64_t total; /* bytes hashed */
  unsigned char block[64];
  size_t n; /* bytes in BLOCK */
};
void agsx_sha1_init(struct agsx_sha1 *s);
void agsx_sha1_update(struct agsx_sha1 *s, const void *data, size_t len);
void agsx_sha1_final(struct agsx_sha1 *s, unsigned char md[20]);
void agsx_sha1(const void *data, size_t len, unsigned char md[20]);

/* ---- the opening handshake ---- */
/* base64(SHA-1(KEY "258EAFA5-E914-47DA-95CA-C5AB0DC85B11")) into RET. */
void agsx_cdpws_accept(const char *key, char ret[AGSX_CDPWS_ACCEPT_SIZE]);
/* The upgrade request for GET PATH with a fresh random key (into RET_KEY).
 * HOST and PATH are refused unless printable ASCII without spaces, PATH
 * starting with '/'. */
int agsx_cdpws_request(const char *host, const char *path, char **ret_req,
                       char ret_key[AGSX_CDPWS_KEY_SIZE], agsx_error_t *err);
/* Checks the answer BUF[0..LEN) to the request made with KEY: status 101,
 * Upgrade: websocket, Connection: upgrade, the Sec-WebSocket-Accept of KEY,
 * no extension nor subprotocol (none was asked for). Returns 1 with the
 * length of the status line and headers (blank line included) in
 * *RET_SIZE: the bytes after them are frames already. 0 when more bytes
 * are needed (none when EOF: the peer closed), -1 (ERR set) otherwise,
 * also when no blank line comes within AGSX_CDPWS_ANSWER_MAX bytes. */
int agsx_cdpws_parse_answer(const char *buf, size_t len, bool eof, const char *key,
                            size_t *ret_size, agsx_error_t *err);

/* ---- frames ---- */
enum agsx_cdpws_opcode {
  AGSX_WS_CONT = 0x0,
  AGSX_WS_TEXT = 0x1,
  AGSX_WS_BINARY = 0x2,
  AGSX_WS_CLOSE = 0x8,
  AGSX_WS_PING = 0x9,
  AGSX_WS_PONG = 0xa,
};

struct agsx_cdpws_frame {
  bool fin;
  unsigned opcode;
  bool masked;
  unsigned char mask[4];
  size_t header_len;  /* the payload starts there */
  size_t payload_len; /* <= the caller's bound */
  size_t size;        /* header_len + payload_len: the bytes the frame takes */
};

/* Decodes the frame at the start of BUF[0..LEN). MASKED says which side
 * sent it: true for a client's frames (which must be masked), false for a
 * server's (which must not be). Refused: reserved bits (no extension was
 * negotiated), the wrong masking, unknown opcodes, control frames that are
 * fragmented or longer than 125 bytes, lengths over MAX (known from the
 * header alone, before the payload arrives) or not in their shortest form,
 * 64-bit lengths with the top bit set. Returns 1 and fills RET, 0 when the
 * frame is not whole yet, -1 (ERR set). The payload of a masked frame is
 * left masked: see agsx_cdpws_unmask. */
int agsx_cdpws_frame_decode(const void *buf, size_t len, bool masked, size_t max,
                            struct agsx_cdpws_frame *ret, agsx_error_t *err);
/* XORs BUF[0..LEN) with MASK (in place). */
void agsx_cdpws_unmask(void *buf, size_t len, const unsigned char mask[4]);
/* A client frame (FIN set, masked with a random key) of OPCODE with the
 * payload BUF[0..LEN): header and payload in *RET, RET_SIZE bytes. */
int agsx_cdpws_frame_encode(unsigned opcode, const void *buf, size_t len, char **ret,
                            size_t *ret_size, agsx_error_t *err);

/* A data message being put together from its frames (zeroed: empty). */
struct agsx_cdpws_message {
  char *buf; /* NUL-terminated when whole */
  size_t len;
  unsigned opcode; /* AGSX_WS_TEXT or AGSX_WS_BINARY */
  bool open;       /* a first frame came, its last not yet */
};
/* Adds the data frame F with its (unmasked) PAYLOAD to M. Refused: a
 * continuation with no message open, a new message while one is open, a
 * message over MAX bytes. Returns 1 when M holds a whole message (read it,
 * then agsx_cdpws_message_clear), 0 when more frames are to come, -1. */
int agsx_cdpws_message_add(struct agsx_cdpws_message *m, const struct agsx_cdpws_frame *f,
                           const void *payload, size_t max, agsx_error_t *err);
void agsx_cdpws_message_clear(struct agsx_cdpws_message *m);

/* The status code and reason of a close frame's PAYLOAD, for messages:
 * "1001 going away"; the reason only when printable ASCII. */
char *agsx_cdpws_close_reason(const void *payload, size_t len);

/* ---- the client ---- */
struct agsx_cdp;

/* Connects to ADDR and upgrades GET PATH (with Host: HOST_HEADER, e.g.
 * "127.0.0.1:9222", as a browser checks it) to a WebSocket, all within
 * TIMEOUT_MS (> 0). */
int agsx_cdp_open(const struct sockaddr_storage *addr, const char *host_header, const char *path,
                  int timeout_ms, struct agsx_cdp **ret, agsx_error_t *err);
/* Sends METHOD with PARAMS_JSON (an object; NULL: {}) to the target
 * attached as SESSION_ID (NULL: the browser) and waits up to TIMEOUT_MS
 * (> 0) for its answer: its "result" object, parsed, in *RET_RESULT (the
 * caller's: yajl_tree_free). An "error" answer fails with the browser's
 * message.
 * After a timeout the connection stays usable (the late answer is
 * dropped); after a protocol error or a close frame every call fails. */
int agsx_cdp_call(struct agsx_cdp *c, const char *session_id, const char *method,
                  const char *params_json, int timeout_ms, yajl_val *ret_result, agsx_error_t *err);
/* Sends a close frame if the connection is still up (without waiting),
 * closes the socket and frees C. NULL is fine. */
void agsx_cdp_close(struct agsx_cdp *c);
void agsx_cdp_closep(struct agsx_cdp **c);
#define _cleanup_cdp_ _cleanup_(agsx_cdp_closep)

#endif
