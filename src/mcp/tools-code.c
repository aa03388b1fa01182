/* agsx — mcp: code cells in a sandbox's stateful code contexts (src/code:
 * the contexts of `agsx code` and of the server's port 49999, an IPython
 * kernel, a shell or node). code_run runs a cell and waits for it; what the
 * kernel returns is untrusted and arrives checked by code/item.c. PNG
 * results also go back as MCP image content (checked again: base64 that
 * decodes to a PNG). */
#include "config.h"

#include "api/wire.h"
#include "code/code.h"
#include "mcp/tools-internal.h"

#include <poll.h>
#include <string.h>

#define CODE_TIMEOUT_DEFAULT 300
#define IMAGES_MAX 8
#define IMAGES_BYTES_MAX (8u << 20) /* base64 of the images of one answer */

struct cell {
  struct agsx_mcp *s;
  char *out[2];
  size_t len[2];
  bool truncated;
  int64_t count;
  char *main_text;
  char *err_name, *err_value, *err_traceback;
  char **texts;  /* results' text/plain, in order */
  char **images; /* PNG results, base64 */
  size_t image_bytes;
  unsigned images_dropped;
};

static void cell_clear(struct cell *c) {
  free(c->out[0]);
  free(c->out[1]);
  free(c->main_text);
  free(c->err_name);
  free(c->err_value);
  free(c->err_traceback);
  agsx_strv_free(c->texts);
  agsx_strv_free(c->images);
}

static void append(struct cell *c, int i, const char *text) {
  size_t n = strlen(text), room = AGSX_MCP_OUTPUT_CAP - c->len[i];
  if (n > room) {
    c->truncated = true;
    n = room;
  }
  c->out[i] = xrealloc(c->out[i], c->len[i] + n + 1);
  memcpy(c->out[i] + c->len[i], text, n);
  c->len[i] += n;
  c->out[i][c->len[i]] = '\0';
}

/* B64 without the line breaks Jupyter puts in it. */
static char *unwrap(const char *b64) {
  char *out = xmalloc(strlen(b64) + 1), *o = out;
  for (const char *p = b64; *p; p++)
    if (*p != '\n' && *p != '\r')
      *o++ = *p;
  *o = '\0';
  return out;
}

/* Whether B64 is base64 (nothing else: it goes into JSON as it is) of a PNG. */
static bool is_png(const char *b64) {
  if (strpbrk(b64, "-_"))
    return false; /* the URL alphabet, which the decoder takes too */
  char *bytes = NULL;
  size_t n = 0;
  agsx_error_t err = NULL;
  bool ok = agsx_base64_decode(b64, IMAGES_BYTES_MAX, &bytes, &n, &err) == 0 && n >= 8 &&
            memcmp(bytes, "\x89PNG\r\n\x1a\n", 8) == 0;
  agsx_error_free(&err);
  free(bytes);
  return ok;
}

static int on_item(const struct agsx_code_item *it, void *data) {
  struct cell *c = data;
  switch (it->type) {
  case AGSX_CODE_COUNT: c->count = it->execution_count; break;
  case AGSX_CODE_STDOUT: append(c, 0, it->text); break;
  case AGSX_CODE_STDERR: append(c, 1, it->text); break;
  case AGSX_CODE_TRUNCATED: c->truncated = true; break;
  case AGSX_CODE_ERROR:
    free(c->err_name), free(c->err_value), free(c->err_traceback);
    c->err_name = xstrdup(it->name);
    c->err_value = xstrdup(it->value);
    c->err_traceback = xstrdup(it->traceback);
    break;
  case AGSX_CODE_RESULT: {
    if (it->is_main_result && it->text) {
      free(c->main_text);
      c->main_text = xstrdup(it->text);
    }
    if (it->text && agsx_strv_len(c->texts) < 64)
      agsx_strv_push(&c->texts, it->text);
    const char *raw = agsx_json_get_string(it->obj, "png");
    if (raw == NULL)
      break;
    _cleanup_free_ char *png = unwrap(raw);
    size_t n = strlen(png);
    if (agsx_strv_len(c->images) < IMAGES_MAX && c->image_bytes + n <= IMAGES_BYTES_MAX &&
        is_png(png)) {
      agsx_strv_push(&c->images, png);
      c->image_bytes += n;
    } else {
      c->images_dropped++;
    }
    break;
  }
  default: break;
  }
  return 0;
}

/* Runs SPEC in context CTX of sandbox ID, watching the input for the
 * call's cancellation (the cell is interrupted; the context lives on).
 * 1: cancelled. */
static int run_cell(struct cell *c, const char *id, const struct agsx_code_context *ctx,
                    const struct agsx_code_exec_spec *spec, struct agsx_code_exec_result *res,
                    agsx_error_t *err) {
  struct agsx_mcp *s = c->s;
  struct agsx_code_exec *e = NULL;
  if (agsx_code_exec_start(s->statefd, id, ctx, spec, &e, err) < 0)
    return -1;
  int64_t t0 = agsx_mono_ns();
  int rc;
  for (;;) {
    rc = agsx_code_exec_dispatch(e, 256, on_item, c, err);
    if (rc != 0)
      break;
    if (agsx_code_exec_more(e))
      continue;
    int ms = agsx_code_exec_timeout_ms(e);
    bool room = !s->eof && agsx_mcp_input_room(s);
    struct pollfd p[3] = {{.fd = agsx_code_exec_fd(e), .events = POLLIN},
                          {.fd = room ? s->cfg->in_fd : -1, .events = POLLIN},
                          {.fd = s->sigfd, .events = POLLIN}};
    if (poll(p, 3, ms < 0 || ms > 1000 ? 1000 : ms) < 0 && errno != EINTR) {
      rc = agsx_error_set(err, errno, "poll");
      break;
    }
    if (p[1].revents && !agsx_mcp_read_input(s))
      s->cancelled = true;
    if (p[2].revents)
      s->cancelled = s->stop = true;
    agsx_mcp_scan_cancel(s);
    if (s->cancelled) {
      agsx_error_t e2 = NULL;
      if (agsx_code_exec_cancel(e, &e2) < 0)
        agsx_error_free(&e2);
      agsx_info("mcp: code cell in %.12s cancelled: interrupted", id);
      agsx_code_exec_free(e);
      return 1;
    }
    int64_t secs = (agsx_mono_ns() - t0) / 1000000000LL;
    _cleanup_free_ char *msg = xasprintf("cell running for %llds, %zu bytes of output",
                                         (long long)secs, c->len[0] + c->len[1]);
    agsx_mcp_progress(s, secs, 0, msg);
  }
  if (rc > 0) {
    *res = *agsx_code_exec_result(e);
    rc = 0;
  }
  agsx_code_exec_free(e);
  return rc;
}

static const struct arg run_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The sandbox's id (its image needs the language's kernel)"},
    {"code", A_STR, true, 0, 0, "The cell's code (at most 1 MiB)"},
    {"language", A_STR, false, 0, 0,
     "python (default), bash or javascript; ignored when context is given"},
    {"context", A_STR, false, 0, 0,
     "A context id from code_context_create (default: the language's default context, "
     "created on first use); variables live on from one cell to the next"},
    {"timeout", A_INT, false, 1, 86400,
     "Seconds before the cell is interrupted (default 300); the context's state survives"},
    {0},
};

static const struct arg context_args[] = {
    {"sandbox", A_STR, true, 0, 0, "The sandbox's id"},
    {"language", A_STR, false, 0, 0, "python (default), bash or javascript"},
    {"cwd", A_STR, false, 0, 0, "Its working directory (default: the sandbox's)"},
    {0},
};

#define CELL_SCHEMA                                                                                \
  "{\"type\":\"object\",\"properties\":{\"context\":{\"type\":\"string\"},\"language\":{\"type\":" \
  "\"string\"},\"execution_count\":{\"type\":\"integer\"},\"text\":{\"type\":\"string\","          \
  "\"description\":\"the cell's main result as text, empty when none\"},\"results\":{\"type\":"    \
  "\"array\",\"items\":{\"type\":\"string\"},\"description\":\"every result's text\"},"            \
  "\"stdout\":{\"type\":\"string\"},\"stderr\":{\"type\":\"string\"},\"error\":{\"type\":"         \
  "\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"value\":{\"type\":\"string\"},"     \
  "\"traceback\":{\"type\":\"string\"}},\"required\":[\"name\",\"value\",\"traceback\"]},"         \
  "\"images\":{\"type\":\"integer\",\"description\":\"PNG results, sent as image content\"},"      \
  "\"images_dropped\":{\"type\":\"integer\"},\"truncated\":{\"type\":\"boolean\"},\"timed_out\":"  \
  "{\"type\":\"boolean\"}},\"required\":[\"context\",\"language\",\"text\",\"results\","           \
  "\"stdout\",\"stderr\",\"images\",\"images_dropped\",\"truncated\",\"timed_out\"]}"

static int context_of(struct agsx_mcp *s, const char *id, yajl_val a, struct agsx_code_context *ret,
                      agsx_error_t *err) {
  const char *ctx = arg_str(a, "context");
  if (ctx)
    return agsx_code_context_get(s->statefd, id, ctx, ret, err);
  _cleanup_free_ char *lang = NULL;
  if (agsx_code_language(arg_str(a, "language"), &lang, err) < 0)
    return -1;
  return agsx_code_context_default(s->statefd, id, lang, ret, err);
}

static int code_run(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  const char *code = arg_str(a, "code");
  if (strlen(code) > AGSX_MCP_FILE_MAX)
    return agsx_error_set_quiet(err, E2BIG, "code: at most 1 MiB");
  struct agsx_record rec;
  if (agsx_mcp_find(s, arg_str(a, "sandbox"), &rec, err) < 0)
    return -1;
  struct agsx_code_context ctx = {0};
  struct cell c = {.s = s, .count = -1};
  struct agsx_code_exec_result res = {0};
  int rc = context_of(s, rec.id, a, &ctx, err);
  if (rc == 0) {
    struct agsx_code_exec_spec spec = {
        .code = code,
        .code_len = strlen(code),
        .timeout_ms = (uint64_t)arg_int(a, "timeout", CODE_TIMEOUT_DEFAULT) * 1000,
        .output_max = 2 * (uint64_t)AGSX_MCP_OUTPUT_CAP};
    rc = run_cell(&c, rec.id, &ctx, &spec, &res, err);
  }
  if (rc == 0) {
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "context", ctx.id);
    agsx_json_kv_str(g, "language", ctx.language ? ctx.language : "");
    if (c.count >= 0)
      agsx_json_kv_int(g, "execution_count", c.count);
    agsx_json_kv_str(g, "text", c.main_text ? c.main_text : "");
    agsx_json_key(g, "results");
    yajl_gen_array_open(g);
    for (size_t i = 0; c.texts && c.texts[i]; i++)
      agsx_json_str(g, c.texts[i]);
    yajl_gen_array_close(g);
    for (int i = 0; i < 2; i++) {
      agsx_json_key(g, i ? "stderr" : "stdout");
      agsx_json_bytes(g, c.out[i] ? c.out[i] : "", c.len[i]);
    }
    if (c.err_name) {
      agsx_json_key(g, "error");
      yajl_gen_map_open(g);
      agsx_json_kv_str(g, "name", c.err_name);
      agsx_json_kv_str(g, "value", c.err_value);
      agsx_json_kv_str(g, "traceback", c.err_traceback);
      yajl_gen_map_close(g);
    }
    agsx_json_kv_int(g, "images", (int64_t)agsx_strv_len(c.images));
    agsx_json_kv_int(g, "images_dropped", c.images_dropped);
    agsx_json_kv_bool(g, "truncated", c.truncated || res.truncated);
    agsx_json_kv_bool(g, "timed_out", res.timed_out);
    yajl_gen_map_close(g);
    /* the images, as content beside the text */
    for (size_t i = 0; c.images && c.images[i]; i++) {
      _cleanup_free_ char *item = xasprintf(
          ",{\"type\":\"image\",\"mimeType\":\"image/png\",\"data\":\"%s\"}", c.images[i]);
      agsx_mcp_add_content(s, item);
    }
  }
  cell_clear(&c);
  agsx_code_context_clear(&ctx);
  agsx_record_clear(&rec);
  return rc;
}

static int context_create(struct agsx_mcp *s, yajl_val a, yajl_gen g, agsx_error_t *err) {
  const char *cwd = arg_str(a, "cwd");
  if (cwd && cwd[0] != '/')
    return agsx_error_set_quiet(err, EINVAL, "cwd `%.100s` must be an absolute path", cwd);
  _cleanup_free_ char *lang = NULL;
  if (agsx_code_language(arg_str(a, "language"), &lang, err) < 0)
    return -1;
  struct agsx_record rec;
  if (agsx_mcp_find(s, arg_str(a, "sandbox"), &rec, err) < 0)
    return -1;
  struct agsx_code_context ctx = {0};
  int rc = agsx_code_context_create(s->statefd, rec.id, lang, cwd, &ctx, err);
  if (rc == 0) {
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "context", ctx.id);
    agsx_json_kv_str(g, "language", ctx.language);
    agsx_json_kv_str(g, "cwd", ctx.cwd ? ctx.cwd : "");
    yajl_gen_map_close(g);
  }
  agsx_code_context_clear(&ctx);
  agsx_record_clear(&rec);
  return rc;
}

const struct tool agsx_mcp_code_tools[] = {
    {"code_run", "Run a code cell",
     "Run code in a stateful context of a sandbox (an IPython kernel for python: variables and "
     "imports live on between cells, like a notebook); returns its output, its results (plots "
     "as images) and its error with traceback.",
     run_args, CELL_SCHEMA, false, false, code_run},
    {"code_context_create", "Create a code context",
     "A new context (its own kernel and state) in a sandbox, for code_run's context.", context_args,
     "{\"type\":\"object\",\"properties\":{\"context\":{\"type\":\"string\"},\"language\":{"
     "\"type\":\"string\"},\"cwd\":{\"type\":\"string\"}},\"required\":[\"context\",\"language\","
     "\"cwd\"]}",
     false, false, context_create},
    {0},
};
