/* agsx — api: the wire formats of the E2B protocol that are not HTTP itself,
 * as pure functions over untrusted bytes (each has a fuzz target):
 *
 *   Connect-RPC envelopes   flags (0 message, 2 end-stream), u32 big-endian
 *                           length, the JSON (e2b-protocol.md §3.3)
 *   Connect error codes     "not_found" ... and their HTTP statuses
 *   query strings           percent-decoding, forms, and the list route's
 *                           `metadata` filter (k=v&k2=v2, each part encoded
 *                           once more by the SDK)
 *   Basic auth              envd's user: "Basic base64(user:)"
 *   base64                  standard, with padding (protobuf-JSON bytes)
 *   Host and Origin         the host a request names, and whether it is
 *                           this server's (against DNS rebinding)
 *   a request's head        for the ports listener (forward.c): where it
 *                           ends, its Host and Origin; PORT-ID hosts
 *
 * Nothing here allocates without a bound. */
#ifndef AGSX_API_WIRE_H
#define AGSX_API_WIRE_H

#include "util/util.h"

#define AGSX_CONNECT_FLAG_COMPRESSED 0x01
#define AGSX_CONNECT_FLAG_END 0x02
#define AGSX_API_FILTER_MAX 64 /* key=value pairs of a metadata filter */
#define AGSX_API_USER_MAX 256  /* bytes of a user name */

/* A growing byte buffer. */
struct agsx_buf {
  char *p;
  size_t len, cap;
};
void agsx_buf_add(struct agsx_buf *b, const void *data, size_t len);
void agsx_buf_clear(struct agsx_buf *b);
/* Copies at most MAX bytes of B from *OFF into DST and moves *OFF on; B is
 * emptied (and *OFF reset) once all of it is taken. Returns the count. */
size_t agsx_buf_drain(struct agsx_buf *b, size_t *off, char *dst, size_t max);

/* The one message envelope of a server-streaming request body: its JSON in
 * *RET_MSG and *RET_LEN (pointing into BUF). EINVAL for a short, compressed,
 * end-stream or trailing-garbage body. */
int agsx_connect_envelope(const char *buf, size_t len, const char **ret_msg, size_t *ret_len,
                          agsx_error_t *err);
/* Appends an envelope with FLAGS around JSON. */
void agsx_connect_frame(struct agsx_buf *out, unsigned flags, const char *json, size_t len);

/* Connect's codes (canceled ... unauthenticated). */
enum agsx_connect_code {
  AGSX_CONNECT_CANCELED,
  AGSX_CONNECT_UNKNOWN,
  AGSX_CONNECT_INVALID_ARGUMENT,
  AGSX_CONNECT_DEADLINE_EXCEEDED,
  AGSX_CONNECT_NOT_FOUND,
  AGSX_CONNECT_ALREADY_EXISTS,
  AGSX_CONNECT_PERMISSION_DENIED,
  AGSX_CONNECT_RESOURCE_EXHAUSTED,
  AGSX_CONNECT_FAILED_PRECONDITION,
  AGSX_CONNECT_ABORTED,
  AGSX_CONNECT_OUT_OF_RANGE,
  AGSX_CONNECT_UNIMPLEMENTED,
  AGSX_CONNECT_INTERNAL,
  AGSX_CONNECT_UNAVAILABLE,
  AGSX_CONNECT_DATA_LOSS,
  AGSX_CONNECT_UNAUTHENTICATED,
};
const char *agsx_connect_code_name(enum agsx_connect_code c);
/* The HTTP status of a unary error with code C (not_found 404, ...). */
int agsx_connect_code_status(enum agsx_connect_code c);
/* The Connect code of a library error's errno (ENOENT not_found, EINVAL
 * invalid_argument, EPERM/EACCES permission_denied, ESRCH unavailable, ...). */
enum agsx_connect_code agsx_connect_code_of_errno(int e);

/* Percent-decodes S[0..N) (with PLUS_SPACE, '+' is a space, as in forms).
 * NULL for a malformed escape or a decoded NUL. */
char *agsx_url_decode(const char *s, size_t n, bool plus_space);
/* The metadata filter of GET /v2/sandboxes: Q is the `metadata` query
 * value as the HTTP layer decoded it once ("k=v&k2=v2" with each key and
 * value still percent-encoded by the SDK); *RET a vector of "KEY=VALUE"
 * fully decoded (agsx_labels_match filters). EINVAL for a malformed part,
 * an empty key or more than AGSX_API_FILTER_MAX parts. */
int agsx_api_metadata_filter(const char *q, char ***ret, agsx_error_t *err);
/* A comma-separated list of QUERY (`state=running,paused`): whether WORD
 * is in it. */
bool agsx_api_list_has(const char *list, const char *word);

/* An RFC 3339 time with an optional fraction (`startedAfter`, the SDK's
 * Date.toISOString()) in nanoseconds since the epoch; -1 for anything
 * else or a time before 1970. */
int agsx_api_time_parse(const char *s, int64_t *ret_ns);
/* The position of GET /v2/sandboxes's pages (`nextToken`, X-Next-Token):
 * the last listed sandbox's start (16 hex digits of ns) and full id (32),
 * so a page goes on after it even once that sandbox is gone. Parse: -1
 * for anything but such a token. */
#define AGSX_API_LIST_TOKEN_LEN 48
void agsx_api_list_token(int64_t started_ns, const char *id, char ret[AGSX_API_LIST_TOKEN_LEN + 1]);
int agsx_api_list_token_parse(const char *token, int64_t *ret_ns, char ret_id[33]);

/* The user of an `Authorization: Basic base64(user:password)` header; the
 * password is ignored (envd's is empty). EINVAL for another scheme, bad
 * base64, no colon, an empty or overlong name, or a name with characters
 * other than letters, digits and ._-. */
int agsx_basic_auth_user(const char *header, char **ret_user, agsx_error_t *err);
/* A user name as envd and /etc/passwd accept it: 1 to 256 bytes of
 * letters, digits, '.', '_', '-' (not starting with '-'). */
bool agsx_api_user_is_valid(const char *name);

/* Standard base64 with padding. Decode: EINVAL for malformed input (also
 * accepts unpadded input and the URL-safe alphabet, as protobuf-JSON
 * parsers do); *RET_LEN the decoded size; at most MAX decoded bytes. */
char *agsx_base64_encode(const void *buf, size_t len);
int agsx_base64_decode(const char *s, size_t max, char **ret, size_t *ret_len, agsx_error_t *err);

/* ---- Host and Origin ----
 * A web page can reach a server on loopback through DNS rebinding: its own
 * name, resolved again to 127.0.0.1, makes the browser send the page's
 * requests here, with the page's name as Host and its origin as Origin.
 * The server therefore answers only the hosts it is (see server.h's
 * hosts) and no cross-site Origin. */
#define AGSX_API_HOST_MAX 253 /* a DNS name's longest text */
/* The host of a Host header ("name", "name:port", "1.2.3.4:port",
 * "[v6]:port"): lowercased, without port, brackets or a final dot; an IPv6
 * address in its canonical text. EINVAL for anything else (an empty or
 * overlong name, a character outside letters, digits, '-', '.', '_', an
 * empty label, a bad port). */
int agsx_api_host_parse(const char *value, char ret[static AGSX_API_HOST_MAX + 1],
                        agsx_error_t *err);
/* The host of an Origin header ("http[s]://host[:port]"); EINVAL for
 * "null", another scheme, a path, a query or user info. */
int agsx_api_origin_parse(const char *value, char ret[static AGSX_API_HOST_MAX + 1],
                          agsx_error_t *err);
/* Whether HOST (as parsed above) is this server's: an address equal to
 * LOCAL (the address the client reached, NULL: none) or to one of NAMES;
 * "localhost"; or a name of NAMES, or one label below one ("api.NAME",
 * "sandbox.NAME" and "PORT-ID.NAME", as E2B's SDKs build them from
 * E2B_DOMAIN), and the same below "localhost". Ports do not matter: a
 * rebinding page's name is what gives it away. */
bool agsx_api_host_allowed(const char *host, const char *local, char *const *names);

/* ---- a request's head, read raw (the ports listener, forward.c) ---- */
#define AGSX_API_HEAD_MAX 16384     /* bytes of a head, through its blank line */
#define AGSX_API_HEAD_VALUE_MAX 512 /* bytes of its Host or Origin value */
struct agsx_api_head {
  size_t len; /* through the blank line */
  /* the values of Host, Origin and E2B-Traffic-Access-Token, trimmed; ""
   * when absent */
  char host[AGSX_API_HEAD_VALUE_MAX + 1], origin[AGSX_API_HEAD_VALUE_MAX + 1],
      traffic[AGSX_API_HEAD_VALUE_MAX + 1];
};
/* Scans the LEN bytes of BUF received so far for an HTTP/1.x request
 * head: 1 when it is complete, with *RET filled; 0 when more is needed; -1
 * with EINVAL for what is not one (a request line that is not METHOD SP
 * TARGET SP HTTP/1.x, a NUL, a header line without a name and colon, a
 * folded line, one of those three headers repeated, an overlong value) and
 * EMSGSIZE when no head ends within AGSX_API_HEAD_MAX bytes. Lines end in
 * CRLF or LF. */
int agsx_api_head_scan(const char *buf, size_t len, struct agsx_api_head *ret, agsx_error_t *err);
/* The sandbox port a host (as agsx_api_host_parse gives it) names, as
 * E2B's SDKs build it (getHost): "PORT-ID.DOMAIN", PORT 1 to 65535 without
 * a leading zero, ID 20 or 32 lowercase letters and digits. 0 with
 * *RET_PORT and RET_ID, or -1 with EINVAL. */
int agsx_api_port_host(const char *host, unsigned *ret_port, char ret_id[static 33],
                       agsx_error_t *err);

#endif
