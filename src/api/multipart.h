/* agsx — multipart: an incremental multipart/form-data (RFC 7578) parser
 * for upload bodies. It is fed the body in chunks of any size (one byte at
 * a time works) and calls back per part: its headers parsed (field name,
 * the raw `filename` parameter with its directories, content type), then
 * the part's data as it arrives (never buffered whole), then its end.
 *
 * The body is untrusted: a part's header block is capped
 * (AGSX_MULTIPART_MAX_HEADER), so are the parts of one body
 * (AGSX_MULTIPART_MAX_PARTS) and the preamble; a malformed body fails with
 * EINVAL and a message, never a crash. The filename is kept as sent, except
 * that the escapes browsers and undici apply to it (%22 for `"`, %0D CR,
 * %0A LF, and a backslash before `"` or `\`) are undone; a filename holding
 * a NUL is refused. */
#ifndef AGSX_API_MULTIPART_H
#define AGSX_API_MULTIPART_H

#include "util/util.h"

#define AGSX_MULTIPART_MAX_BOUNDARY 70   /* RFC 2046 */
#define AGSX_MULTIPART_MAX_HEADER 16384u /* one part's header block */
#define AGSX_MULTIPART_MAX_PARTS 1000u
#define AGSX_MULTIPART_MAX_PREAMBLE 65536u

/* The boundary of a Content-Type `multipart/form-data; boundary=...`
 * (quoted or not; parameters in any order, names in any case). EINVAL when
 * it is another type or the boundary is missing, empty, too long or holds
 * characters RFC 2046 does not allow. */
int agsx_multipart_boundary(const char *content_type, char **ret, agsx_error_t *err);

struct agsx_multipart_part {
  const char *name;         /* Content-Disposition's name, "" when absent */
  const char *filename;     /* the raw filename parameter, NULL when absent */
  const char *content_type; /* NULL when absent */
};

/* Callbacks return 0 to go on, -1 (with *ERR set) to stop the parse: the
 * error is then what agsx_multipart_feed() returns. */
struct agsx_multipart_callbacks {
  int (*part_begin)(void *data, const struct agsx_multipart_part *part, agsx_error_t *err);
  int (*part_data)(void *data, const char *buf, size_t len, agsx_error_t *err);
  int (*part_end)(void *data, agsx_error_t *err);
};

struct agsx_multipart;
/* A parser for BOUNDARY (copied). CB and DATA are kept. */
struct agsx_multipart *agsx_multipart_new(const char *boundary,
                                          const struct agsx_multipart_callbacks *cb, void *data);
void agsx_multipart_free(struct agsx_multipart *m);
/* Feeds the next LEN bytes of the body. After a failure every further feed
 * fails the same way. Bytes after the closing boundary are ignored. */
int agsx_multipart_feed(struct agsx_multipart *m, const char *buf, size_t len, agsx_error_t *err);
/* The body ended: EINVAL unless the closing boundary was seen. */
int agsx_multipart_finish(struct agsx_multipart *m, agsx_error_t *err);
/* Parts begun so far. */
size_t agsx_multipart_parts(const struct agsx_multipart *m);

#endif
