/* Fuzz target: the API server's wire parsers over untrusted request bytes.
 * The first byte picks one: 0 the Connect envelope reader, 1 the metadata
 * filter of GET /v2/sandboxes, 2 Basic auth, 3 base64, 4 percent-decoding,
 * 5 the listen address, 6 a Host header, 7 an Origin header (each then
 * judged against the names a server may have), 8 a list's startedAfter
 * time, 9 its page token (which must read back as it was written), 10 a
 * raw request head as the ports listener reads it (fed whole, and in two
 * parts, which must agree), 11 a PORT-ID host. The rest is the input. */
#include "config.h"

#include "api/server.h"
#include "api/wire.h"
#include "fuzz.h"
#include "state/state.h"

#include <string.h>
#include <sys/socket.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  const char *p = (const char *)data + 1;
  size_t n = size - 1;
  _cleanup_free_ char *s = xstrndup(p, n); /* NUL-terminated, as headers are */
  agsx_error_t err = NULL;
  switch (data[0] % 12) {
  case 0: {
    const char *msg;
    size_t len;
    if (agsx_connect_envelope(p, n, &msg, &len, &err) == 0 && (msg != p + 5 || len != n - 5))
      __builtin_trap();
    struct agsx_buf b = {0};
    agsx_connect_frame(&b, 0, p, n);
    if (b.len != n + 5 || agsx_connect_envelope(b.p, b.len, &msg, &len, NULL) != 0 || len != n)
      __builtin_trap();
    agsx_buf_clear(&b);
    break;
  }
  case 1: {
    char **v = NULL;
    if (agsx_api_metadata_filter(s, &v, &err) == 0) {
      if (agsx_strv_len(v) > AGSX_API_FILTER_MAX)
        __builtin_trap();
      for (size_t i = 0; v && v[i]; i++)
        if (v[i][0] == '=' || !strchr(v[i], '='))
          __builtin_trap();
      agsx_labels_match(NULL, v && v[0] ? v[0] : "x");
    }
    agsx_strv_free(v);
    break;
  }
  case 2: {
    char *user = NULL;
    if (agsx_basic_auth_user(s, &user, &err) == 0 && !agsx_api_user_is_valid(user))
      __builtin_trap();
    free(user);
    break;
  }
  case 3: {
    char *out = NULL;
    size_t len;
    if (agsx_base64_decode(s, 1 << 16, &out, &len, &err) == 0) {
      _cleanup_free_ char *enc = agsx_base64_encode(out, len);
      _cleanup_free_ char *back = NULL;
      size_t blen;
      if (agsx_base64_decode(enc, 1 << 16, &back, &blen, NULL) != 0 || blen != len ||
          memcmp(back, out, len) != 0)
        __builtin_trap();
    }
    free(out);
    break;
  }
  case 4: {
    char *d = agsx_url_decode(p, n, data[0] & 8);
    if (d && strlen(d) > n)
      __builtin_trap();
    free(d);
    break;
  }
  case 5: {
    struct sockaddr_storage ss;
    unsigned len;
    bool lo;
    agsx_api_listen_parse(s, &ss, &len, &lo, &err);
    break;
  }
  case 6:
  case 7: {
    char h[AGSX_API_HOST_MAX + 1];
    memset(h, 'x', sizeof(h));
    int r = data[0] % 12 == 6 ? agsx_api_host_parse(s, h, &err) : agsx_api_origin_parse(s, h, &err);
    if (r == 0) {
      size_t hl = strnlen(h, sizeof(h));
      if (hl == 0 || hl > AGSX_API_HOST_MAX)
        __builtin_trap();
      for (size_t i = 0; i < hl; i++)
        if (h[i] >= 'A' && h[i] <= 'Z')
          __builtin_trap(); /* compared lowercased */
      char *names[] = {"e2b.test", "10.0.0.1", "::1", NULL};
      /* An oracle of its own: allowed is one of the addresses, or a name
       * that is localhost or e2b.test or one label below one of them. */
      if (agsx_api_host_allowed(h, "127.0.0.1", names)) {
        bool addr = strcmp(h, "127.0.0.1") == 0 || strcmp(h, "10.0.0.1") == 0 ||
                    strcmp(h, "::1") == 0 || strcmp(h, "::ffff:127.0.0.1") == 0 ||
                    strcmp(h, "::ffff:10.0.0.1") == 0 || strcmp(h, "::ffff:a00:1") == 0 ||
                    strcmp(h, "::ffff:7f00:1") == 0;
        bool name = false;
        const char *bases[] = {"localhost", "e2b.test"};
        for (size_t b = 0; b < 2 && !addr && !name; b++) {
          size_t bl = strlen(bases[b]);
          if (strcmp(h, bases[b]) == 0)
            name = true;
          else if (hl > bl + 1 && h[hl - bl - 1] == '.' && strcmp(h + hl - bl, bases[b]) == 0 &&
                   memchr(h, '.', hl - bl - 1) == NULL)
            name = true;
        }
        if (!addr && !name)
          __builtin_trap();
      }
    }
    break;
  }
  case 8: {
    int64_t ns;
    if (agsx_api_time_parse(s, &ns) == 0 && ns < 0)
      __builtin_trap();
    break;
  }
  case 9: {
    int64_t ns;
    char id[33], tok[AGSX_API_LIST_TOKEN_LEN + 1];
    if (agsx_api_list_token_parse(s, &ns, id) == 0) {
      agsx_api_list_token(ns, id, tok);
      if (ns < 0 || strlen(id) != 32 || strcmp(tok, s) != 0)
        __builtin_trap();
    }
    break;
  }
  case 10: {
    static struct agsx_api_head hd, hd2;
    int r = agsx_api_head_scan(p, n, &hd, &err);
    if (r == 1 && (hd.len == 0 || hd.len > n || hd.len > AGSX_API_HEAD_MAX ||
                   strlen(hd.host) > 512 || strlen(hd.origin) > 512 || strlen(hd.traffic) > 512))
      __builtin_trap();
    /* A prefix is a head received in part: complete only if the whole
     * one ends there already, never an error the whole one is not. */
    int r2 = agsx_api_head_scan(p, n / 2, &hd2, NULL);
    if (r2 == 1 && (r != 1 || hd2.len != hd.len || strcmp(hd2.host, hd.host) != 0 ||
                    strcmp(hd2.origin, hd.origin) != 0 || strcmp(hd2.traffic, hd.traffic) != 0))
      __builtin_trap();
    if (r2 < 0 && r == 1)
      __builtin_trap();
    break;
  }
  case 11: {
    unsigned port = 0;
    char id[33];
    if (agsx_api_port_host(s, &port, id, &err) == 0 &&
        (port == 0 || port > 65535 || (strlen(id) != 20 && strlen(id) != 32)))
      __builtin_trap();
    break;
  }
  }
  agsx_error_free(&err);
  return 0;
}
