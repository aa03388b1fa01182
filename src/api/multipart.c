/* agsx — multipart: incremental multipart/form-data parsing (see
 * multipart.h).
 *
 * The delimiter is CR LF "--" BOUNDARY; a boundary holds no CR (RFC 2046's
 * bchars), so CR occurs in the delimiter only at its start and a partial
 * match that fails can only restart at the failing byte: the scan needs no
 * lookbehind beyond the matched prefix, which is data when the match
 * fails. The body's first delimiter may lack its CR LF: the scan starts as
 * if one had just been seen. */
#include "config.h"

#include "api/multipart.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

enum state { PREAMBLE, AFTER_DELIM, AFTER_DASH, AFTER_CR, HEADERS, BODY, DONE, FAILED };

struct agsx_multipart {
  struct agsx_multipart_callbacks cb;
  void *data;
  char delim[AGSX_MULTIPART_MAX_BOUNDARY + 5]; /* "\r\n--" BOUNDARY */
  size_t dlen;
  size_t match; /* bytes of DELIM matched at the end of what was seen */
  enum state state;
  size_t preamble; /* bytes skipped before the first delimiter */
  size_t padding;  /* linear white space after a delimiter */
  char *hbuf;      /* the part's header block so far */
  size_t hlen;
  size_t parts;
  bool in_part;
  int fail_errno;
  char *fail_msg;
};

/* RFC 2046 bchars. */
static bool bchar(char c) {
  return isalnum((unsigned char)c) || strchr("'()+_,-./:=? ", c) != NULL;
}

static bool valid_boundary(const char *b, size_t n) {
  if (n == 0 || n > AGSX_MULTIPART_MAX_BOUNDARY || b[n - 1] == ' ')
    return false;
  for (size_t i = 0; i < n; i++)
    if (b[i] == '\0' || !bchar(b[i]))
      return false;
  return true;
}

static const char *skip_ws(const char *p) {
  while (*p == ' ' || *p == '\t')
    p++;
  return p;
}

/* One parameter value at P (a token or a quoted-string, backslash escapes
 * undone); P is moved past it. NULL when malformed. */
static char *param_value(const char **pp) {
  const char *p = *pp;
  size_t cap = strlen(p) + 1, n = 0;
  _cleanup_free_ char *out = xmalloc(cap);
  if (*p == '"') {
    for (p++; *p != '"'; p++) {
      if (*p == '\0')
        return NULL;
      if (*p == '\\' && p[1] != '\0')
        p++;
      out[n++] = *p;
    }
    p++;
  } else {
    while (*p && *p != ';' && *p != ' ' && *p != '\t')
      out[n++] = *p++;
  }
  out[n] = '\0';
  *pp = p;
  return steal_ptr(&out);
}

/* Calls FN for each `; name=value` parameter after the media type in V. */
typedef void (*param_fn)(const char *name, size_t nlen, char *value, void *data);

static bool each_param(const char *v, param_fn fn, void *data) {
  const char *p = strchr(v, ';');
  while (p && *p == ';') {
    p = skip_ws(p + 1);
    if (*p == '\0')
      break;
    const char *name = p;
    while (*p && *p != '=' && *p != ';' && *p != ' ' && *p != '\t')
      p++;
    size_t nlen = (size_t)(p - name);
    p = skip_ws(p);
    if (*p != '=') { /* a parameter without value: skip it */
      p = strchr(p, ';');
      continue;
    }
    p = skip_ws(p + 1);
    char *value = param_value(&p);
    if (value == NULL)
      return false;
    fn(name, nlen, value, data);
    p = skip_ws(p);
    if (*p && *p != ';')
      p = strchr(p, ';');
  }
  return true;
}

static bool media_type_is(const char *v, const char *type) {
  v = skip_ws(v);
  size_t n = strlen(type);
  if (strncasecmp(v, type, n) != 0)
    return false;
  const char *p = skip_ws(v + n);
  return *p == '\0' || *p == ';';
}

static void take_boundary(const char *name, size_t nlen, char *value, void *data) {
  char **b = data;
  if (nlen == 8 && strncasecmp(name, "boundary", 8) == 0 && *b == NULL)
    *b = value;
  else
    free(value);
}

int agsx_multipart_boundary(const char *content_type, char **ret, agsx_error_t *err) {
  if (content_type == NULL || !media_type_is(content_type, "multipart/form-data"))
    return agsx_error_set(err, EINVAL, "content type `%.100s` is not multipart/form-data",
                          content_type ? content_type : "");
  char *b = NULL;
  if (!each_param(content_type, take_boundary, &b)) {
    free(b);
    return agsx_error_set(err, EINVAL, "malformed content type parameters");
  }
  if (b == NULL || !valid_boundary(b, strlen(b))) {
    free(b);
    return agsx_error_set(err, EINVAL, "multipart content type without a valid boundary");
  }
  *ret = b;
  return 0;
}

struct agsx_multipart *agsx_multipart_new(const char *boundary,
                                          const struct agsx_multipart_callbacks *cb, void *data) {
  size_t n = strlen(boundary);
  if (!valid_boundary(boundary, n))
    return NULL;
  struct agsx_multipart *m = xzalloc(sizeof(*m));
  m->cb = *cb;
  m->data = data;
  memcpy(m->delim, "\r\n--", 4);
  memcpy(m->delim + 4, boundary, n);
  m->dlen = n + 4;
  m->match = 2; /* the first delimiter may start the body */
  m->state = PREAMBLE;
  m->hbuf = xmalloc(AGSX_MULTIPART_MAX_HEADER + 1);
  return m;
}

void agsx_multipart_free(struct agsx_multipart *m) {
  if (m == NULL)
    return;
  free(m->hbuf);
  free(m->fail_msg);
  free(m);
}

size_t agsx_multipart_parts(const struct agsx_multipart *m) { return m->parts; }

/* Records the failure in *ERR (set by a callback, or set here from FMT). */
static int fail(struct agsx_multipart *m, agsx_error_t *err, int e, const char *msg) {
  if (err && *err == NULL)
    agsx_error_set_quiet(err, e, "multipart body: %s", msg);
  m->state = FAILED;
  m->fail_errno = err && *err ? (*err)->errno_ : e;
  m->fail_msg = xstrdup(err && *err ? (*err)->msg : msg);
  return -1;
}

/* ---- headers ---- */

struct disposition {
  char *name, *filename;
  bool has_filename;
};

/* undici escapes `"`, CR and LF in a filename as %22, %0D and %0A. */
static void unescape_filename(char *s) {
  char *o = s;
  for (char *p = s; *p;) {
    if (p[0] == '%' && (strncasecmp(p + 1, "22", 2) == 0 || strncasecmp(p + 1, "0d", 2) == 0 ||
                        strncasecmp(p + 1, "0a", 2) == 0)) {
      *o++ = p[1] == '2' ? '"' : (p[2] == 'd' || p[2] == 'D') ? '\r' : '\n';
      p += 3;
    } else {
      *o++ = *p++;
    }
  }
  *o = '\0';
}

static void take_disposition(const char *name, size_t nlen, char *value, void *data) {
  struct disposition *d = data;
  if (nlen == 4 && strncasecmp(name, "name", 4) == 0 && d->name == NULL) {
    d->name = value;
  } else if (nlen == 8 && strncasecmp(name, "filename", 8) == 0 && !d->has_filename) {
    unescape_filename(value);
    d->filename = value;
    d->has_filename = true;
  } else {
    free(value);
  }
}

/* Parses the header block (NUL-terminated, CR LF separated lines). */
static int parse_headers(struct agsx_multipart *m, agsx_error_t *err) {
  if (memchr(m->hbuf, '\0', m->hlen))
    return fail(m, err, EINVAL, "NUL byte in a part's headers");
  struct disposition d = {0};
  _cleanup_free_ char *ctype = NULL;
  bool have_disposition = false;
  for (char *line = m->hbuf; *line;) {
    char *end = strstr(line, "\r\n");
    if (end == NULL)
      break;
    *end = '\0';
    char *colon = strchr(line, ':');
    if (colon && line[0] != ' ' && line[0] != '\t') {
      *colon = '\0';
      const char *value = skip_ws(colon + 1);
      if (strcasecmp(line, "content-disposition") == 0 && !have_disposition) {
        have_disposition = true;
        if (!media_type_is(value, "form-data") && !media_type_is(value, "attachment") &&
            !media_type_is(value, "inline")) {
          free(d.name);
          return fail(m, err, EINVAL, "a part's Content-Disposition is not form-data");
        }
        if (!each_param(value, take_disposition, &d)) {
          free(d.name);
          free(d.filename);
          return fail(m, err, EINVAL, "malformed Content-Disposition parameters");
        }
      } else if (strcasecmp(line, "content-type") == 0 && ctype == NULL) {
        ctype = xstrdup(value);
      }
    }
    line = end + 2;
  }
  if (!have_disposition)
    return fail(m, err, EINVAL, "a part without Content-Disposition");
  _cleanup_free_ char *name = d.name, *filename = d.filename;
  if (m->parts >= AGSX_MULTIPART_MAX_PARTS)
    return fail(m, err, E2BIG, "more parts than the limit of 1000");
  m->parts++;
  struct agsx_multipart_part part = {
      .name = name ? name : "", .filename = filename, .content_type = ctype};
  m->in_part = true;
  if (m->cb.part_begin && m->cb.part_begin(m->data, &part, err) < 0)
    return fail(m, err, EIO, "part rejected");
  return 0;
}

/* ---- the scan ---- */

static int deliver(struct agsx_multipart *m, const char *buf, size_t n, agsx_error_t *err) {
  if (n == 0)
    return 0;
  if (m->state == PREAMBLE) {
    m->preamble += n;
    if (m->preamble > AGSX_MULTIPART_MAX_PREAMBLE)
      return fail(m, err, EINVAL, "no boundary in the first 64 KiB");
    return 0;
  }
  if (m->cb.part_data && m->cb.part_data(m->data, buf, n, err) < 0)
    return fail(m, err, EIO, "part data rejected");
  return 0;
}

static int delimiter_seen(struct agsx_multipart *m, agsx_error_t *err) {
  if (m->state == BODY) {
    m->in_part = false;
    if (m->cb.part_end && m->cb.part_end(m->data, err) < 0)
      return fail(m, err, EIO, "part end rejected");
  }
  m->state = AFTER_DELIM;
  m->padding = 0;
  return 0;
}

/* Scans BUF for the delimiter in PREAMBLE or BODY; returns bytes used.
 * Data goes out in the longest runs BUF holds (one write per run, not one
 * per CR: random data has a CR every 256 bytes). A match begun in an
 * earlier BUF ("carried") is a prefix of the delimiter: when it fails,
 * those bytes are handed over from DELIM first. */
static ssize_t scan(struct agsx_multipart *m, const char *buf, size_t len, agsx_error_t *err) {
  size_t i = 0, run = 0, mstart = 0;
  bool carried = m->match > 0;
  while (i < len) {
    if (m->match == 0) {
      const char *cr = memchr(buf + i, '\r', len - i);
      if (cr == NULL) {
        i = len;
        break;
      }
      mstart = (size_t)(cr - buf);
      i = mstart + 1;
      m->match = 1;
      continue;
    }
    if (buf[i] == m->delim[m->match]) {
      i++;
      if (++m->match < m->dlen)
        continue;
      m->match = 0;
      if (deliver(m, buf + run, (carried ? run : mstart) - run, err) < 0 ||
          delimiter_seen(m, err) < 0)
        return -1;
      return (ssize_t)i;
    }
    /* The matched prefix was data; BUF[i] is looked at again. */
    if (carried && deliver(m, m->delim, m->match, err) < 0)
      return -1;
    if (carried)
      run = i;
    carried = false;
    m->match = 0;
  }
  size_t end = m->match > 0 ? (carried ? run : mstart) : len;
  if (deliver(m, buf + run, end - run, err) < 0)
    return -1;
  return (ssize_t)i;
}

static int header_byte(struct agsx_multipart *m, char c, agsx_error_t *err) {
  if (m->hlen >= AGSX_MULTIPART_MAX_HEADER)
    return fail(m, err, E2BIG, "a part's headers are longer than 16 KiB");
  m->hbuf[m->hlen++] = c;
  m->hbuf[m->hlen] = '\0';
  bool end = (m->hlen == 2 && memcmp(m->hbuf, "\r\n", 2) == 0) ||
             (m->hlen >= 4 && memcmp(m->hbuf + m->hlen - 4, "\r\n\r\n", 4) == 0);
  if (!end)
    return 0;
  if (parse_headers(m, err) < 0)
    return -1;
  m->hlen = 0;
  m->state = BODY;
  return 0;
}

/* One byte after a delimiter: "--" ends the body, LWSP then CR LF starts
 * a part. */
static int after_delim(struct agsx_multipart *m, char c, agsx_error_t *err) {
  switch (m->state) {
  case AFTER_DELIM:
    if (c == '-')
      m->state = AFTER_DASH;
    else if (c == '\r')
      m->state = AFTER_CR;
    else if ((c == ' ' || c == '\t') && ++m->padding < 256)
      return 0;
    else
      return fail(m, err, EINVAL, "garbage after a boundary");
    return 0;
  case AFTER_DASH:
    if (c != '-')
      return fail(m, err, EINVAL, "garbage after a boundary");
    m->state = DONE;
    return 0;
  default: /* AFTER_CR */
    if (c != '\n')
      return fail(m, err, EINVAL, "garbage after a boundary");
    m->state = HEADERS;
    m->hlen = 0;
    return 0;
  }
}

int agsx_multipart_feed(struct agsx_multipart *m, const char *buf, size_t len, agsx_error_t *err) {
  size_t i = 0;
  while (i < len) {
    switch (m->state) {
    case FAILED: return agsx_error_set_quiet(err, m->fail_errno, "%s", m->fail_msg);
    case DONE: return 0; /* the epilogue */
    case PREAMBLE:
    case BODY: {
      ssize_t n = scan(m, buf + i, len - i, err);
      if (n < 0)
        return -1;
      i += (size_t)n;
      break;
    }
    case HEADERS:
      if (header_byte(m, buf[i++], err) < 0)
        return -1;
      break;
    default:
      if (after_delim(m, buf[i++], err) < 0)
        return -1;
      break;
    }
  }
  if (m->state == FAILED)
    return agsx_error_set_quiet(err, m->fail_errno, "%s", m->fail_msg);
  return 0;
}

int agsx_multipart_finish(struct agsx_multipart *m, agsx_error_t *err) {
  if (m->state == FAILED)
    return agsx_error_set_quiet(err, m->fail_errno, "%s", m->fail_msg);
  if (m->state != DONE)
    return fail(m, err, EINVAL, "the body ended before its closing boundary");
  return 0;
}
