/* agsx — cdp: the answer of a Chrome DevTools endpoint to GET /json/version,
 * as read by `agsx browser` while it waits for a browser sandbox. The
 * answer comes from inside a sandbox and is untrusted: bounded, and only
 * the fields we print are kept, checked. */
#ifndef AGSX_CDP_H
#define AGSX_CDP_H

#include "util/util.h"

#define AGSX_CDP_RESPONSE_MAX (64u << 10)
#define AGSX_CDP_BROWSER_MAX 128

struct agsx_cdp_version {
  char *browser; /* "Chrome/156.0.8078.114" (printable ASCII, may be NULL) */
  char *ws_path; /* "/devtools/browser/<id>": the webSocketDebuggerUrl's path */
};

/* Parses the HTTP/1.x response BUF[0..LEN) (EOF: the peer closed, so a body
 * without Content-Length is complete). Returns 1 and fills RET, 0 when more
 * bytes are needed, -1 (ERR set) when the answer is not a usable one. */
int agsx_cdp_parse_version(const char *buf, size_t len, bool eof, struct agsx_cdp_version *ret,
                           agsx_error_t *err);
void agsx_cdp_version_clear(struct agsx_cdp_version *v);

#endif
