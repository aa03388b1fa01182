/* Fuzz target: what agsx's DevTools client reads from a sandboxed (hostile)
 * browser: the WebSocket handshake answer, then frames and the messages
 * they make. The first byte picks: bit 0 the answer (bit 1: at EOF) or a
 * frame stream (bit 1: read as a server reads a client's, masked). */
#include "config.h"

#include "sandbox/cdpws.h"
#include "fuzz.h"

#include <string.h>

#define MAX 4096

static void answer(const char *buf, size_t len, bool eof) {
  size_t size = 0;
  agsx_error_t err = NULL;
  int r = agsx_cdpws_parse_answer(buf, len, eof, "dGhlIHNhbXBsZSBub25jZQ==", &size, &err);
  if ((r < 0) != (err != NULL) || (r == 1 && (size == 0 || size > len)) || (r != 1 && size))
    __builtin_trap();
  agsx_error_free(&err);
}

static void frames(const unsigned char *buf, size_t len, bool masked) {
  struct agsx_cdpws_message m = {0};
  unsigned char copy[AGSX_CDPWS_CONTROL_MAX];
  for (size_t off = 0; off < len;) {
    struct agsx_cdpws_frame f;
    agsx_error_t err = NULL;
    int r = agsx_cdpws_frame_decode(buf + off, len - off, masked, MAX, &f, &err);
    if ((r < 0) != (err != NULL))
      __builtin_trap();
    if (r == 1 && (f.size > len - off || f.size != f.header_len + f.payload_len ||
                   f.payload_len > MAX || f.masked != masked))
      __builtin_trap();
    if (r == 1 && (f.opcode & 8)) {
      if (f.payload_len > sizeof(copy) || !f.fin)
        __builtin_trap();
      memcpy(copy, buf + off + f.header_len, f.payload_len);
      agsx_cdpws_unmask(copy, f.payload_len, f.mask);
      if (f.opcode == AGSX_WS_CLOSE)
        free(agsx_cdpws_close_reason(copy, f.payload_len));
    } else if (r == 1) {
      r = agsx_cdpws_message_add(&m, &f, buf + off + f.header_len, MAX, &err);
      if ((r < 0) != (err != NULL) || (r == 1 && (m.len > MAX || m.buf[m.len] != '\0')))
        __builtin_trap();
      if (r == 1)
        agsx_cdpws_message_clear(&m);
      r = r < 0 ? -1 : 1;
    }
    agsx_error_free(&err);
    if (r != 1)
      break;
    off += f.size;
  }
  agsx_cdpws_message_clear(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  if (data[0] & 1)
    answer((const char *)data + 1, size - 1, data[0] & 2);
  else
    frames(data + 1, size - 1, data[0] & 2);
  return 0;
}
