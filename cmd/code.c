/* agsx code: stateful code contexts in a running sandbox (src/code/). */
#include "config.h"

#include "cmd.h"
#include "code/code.h"
#include "state/state.h"

#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>

/* Ids of this command's options only (its table is below, not in agsx.c). */
enum {
  C_CONTEXT = 1000,
  C_LANGUAGE,
  C_JSON,
  C_SAVE,
  C_TIMEOUT,
  C_ENV,
  C_WORKDIR,
  C_LIST,
  C_CREATE,
  C_RESTART,
  C_RM,
  C_OUTPUT_LIMIT,
  C_QUIET,
};

const struct agsx_option agsx_code_opts[] = {
    {"context", 'c', "ID", "Run in context ID (an id or a unique prefix)", C_CONTEXT},
    {"language", 'l', "LANG",
     "Use LANG's default context: python (default), bash, javascript, typescript or r", C_LANGUAGE},
    {"json", 0, NULL, "Print the whole execution as one JSON document (see agsx-code(1))", C_JSON},
    {"save", 0, "DIR", "Write image results (png, jpeg, svg, pdf) as files into DIR", C_SAVE},
    {"timeout", 0, "DURATION", "Interrupt the cell after DURATION (the context survives)",
     C_TIMEOUT},
    {"env", 'e', "KEY=VALUE", "Set an environment variable for this execution only", C_ENV},
    {"output-limit", 0, "SIZE", "Keep at most SIZE of stdout+stderr (default 32m)", C_OUTPUT_LIMIT},
    {"list", 0, NULL, "List the sandbox's contexts", C_LIST},
    {"create", 0, NULL, "Create a context (--language, --workdir); print its id", C_CREATE},
    {"workdir", 'w', "DIR", "Working directory of a context made with --create", C_WORKDIR},
    {"restart", 0, NULL, "Restart the --context's kernel: fresh state", C_RESTART},
    {"rm", 0, NULL, "Remove the --context (its kernel stops)", C_RM},
    {"quiet", 'q', NULL, "With --list: print ids only", C_QUIET},
    {0},
};

enum action { RUN, LIST, CREATE, RESTART, RM };

struct code_opts {
  const char *context, *language, *save, *workdir;
  bool json, quiet;
  enum action action;
  int n_actions;
  uint64_t timeout_ms, output_max;
  char **env;
};

static int on_code_opt(void *data, int id, const char *v) {
  struct code_opts *o = data;
  agsx_error_t err = NULL;
  uint64_t n;
  switch (id) {
  case C_CONTEXT: o->context = v; return 0;
  case C_LANGUAGE: o->language = v; return 0;
  case C_JSON: o->json = true; return 0;
  case C_QUIET: o->quiet = true; return 0;
  case C_SAVE: o->save = v; return 0;
  case C_WORKDIR:
    if (v[0] != '/')
      return agsx_failf("code: working directory `%s` must be absolute", v), -1;
    o->workdir = v;
    return 0;
  case C_TIMEOUT:
    if (agsx_parse_duration(v, &n, &err) < 0)
      return agsx_failf("code: --timeout: %s", err->msg), agsx_error_free(&err), -1;
    o->timeout_ms = n * 1000;
    return 0;
  case C_OUTPUT_LIMIT:
    if (agsx_parse_size(v, &o->output_max, &err) < 0)
      return agsx_failf("code: --output-limit: %s", err->msg), agsx_error_free(&err), -1;
    return 0;
  case C_ENV:
    if (*v == '\0' || *v == '=')
      return agsx_failf("code: invalid environment variable `%s` (want KEY=VALUE)", v), -1;
    if (strchr(v, '='))
      agsx_strv_push(&o->env, v);
    else if (getenv(v)) {
      _cleanup_free_ char *kv = xasprintf("%s=%s", v, getenv(v));
      agsx_strv_push(&o->env, kv);
    }
    return 0;
  case C_LIST: o->action = LIST, o->n_actions++; return 0;
  case C_CREATE: o->action = CREATE, o->n_actions++; return 0;
  case C_RESTART: o->action = RESTART, o->n_actions++; return 0;
  case C_RM: o->action = RM, o->n_actions++; return 0;
  }
  return 0;
}

/* ---- output ------------------------------------------------------------- */

static void out_write(int fd, const char *s, size_t n) {
  if (agsx_write_all(fd, s, n) < 0 && errno == EPIPE)
    _exit(AGSX_EXIT_FAILURE);
}

static void jstr(char **b, size_t *n, size_t *cap, const char *s) {
  agsx_code_json_ascii_str(b, n, cap, s, strlen(s));
}

static void jraw(char **b, size_t *n, size_t *cap, const char *s, size_t len) {
  if (*n + len + 1 > *cap)
    *b = xrealloc(*b, *cap = 2 * (*n + len + 1));
  memcpy(*b + *n, s, len);
  *n += len;
  (*b)[*n] = '\0';
}
#define JRAW(s) jraw(&d->b[0], &d->n[0], &d->cap[0], s, strlen(s))

static int b64_val(unsigned char c) {
  if (c >= 'A' && c <= 'Z')
    return c - 'A';
  if (c >= 'a' && c <= 'z')
    return c - 'a' + 26;
  if (c >= '0' && c <= '9')
    return c - '0' + 52;
  return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Standard base64 (whitespace skipped); -1 on anything else. */
static ssize_t b64_decode(const char *s, unsigned char *out) {
  size_t k = 0;
  uint32_t acc = 0;
  int bits = 0;
  for (; *s && *s != '='; s++) {
    if (*s == '\n' || *s == '\r' || *s == ' ')
      continue;
    int v = b64_val((unsigned char)*s);
    if (v < 0)
      return -1;
    acc = (acc << 6) | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[k++] = (unsigned char)(acc >> bits);
    }
  }
  return (ssize_t)k;
}

/* What a run collects: for --json the document's parts (results, stdout,
 * stderr as JSON arrays), the error, and the files --save wrote. */
struct run {
  struct code_opts *o;
  int savefd;
  char *b[4]; /* results, stdout, stderr, files */
  size_t n[4], cap[4];
  char *error; /* the error object's JSON */
  char *main_text;
  int64_t count;
  int results;
  bool failed_save;
};

static void push(struct run *d, int k, const char *json, size_t len) {
  if (d->n[k])
    jraw(&d->b[k], &d->n[k], &d->cap[k], ",", 1);
  jraw(&d->b[k], &d->n[k], &d->cap[k], json, len);
}

static void save_images(struct run *d, const struct agsx_code_item *it) {
  static const char *const kinds[] = {"png", "jpeg", "svg", "pdf"};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(kinds); i++) {
    const char *v = agsx_json_get_string(it->obj, kinds[i]);
    if (v == NULL)
      continue;
    size_t len = strlen(v);
    _cleanup_free_ unsigned char *bytes = xmalloc(len + 1);
    ssize_t n = (ssize_t)len;
    if (strcmp(kinds[i], "svg") == 0)
      memcpy(bytes, v, len);
    else if ((n = b64_decode(v, bytes)) < 0) {
      agsx_warn("code: result %d: %s is not base64; not saved", d->results, kinds[i]);
      continue;
    }
    _cleanup_free_ char *name =
        xasprintf("result-%lld-%d.%s", (long long)(d->count < 0 ? 0 : d->count), d->results,
                  strcmp(kinds[i], "jpeg") ? kinds[i] : "jpg");
    _cleanup_close_ int fd =
        openat(d->savefd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 || agsx_write_all(fd, bytes, (size_t)n) < 0) {
      dprintf(STDERR_FILENO, "agsx: code: save %s/%s: %s\n", d->o->save, name, strerror(errno));
      d->failed_save = true;
      continue;
    }
    _cleanup_free_ char *path = xasprintf("%s/%s", d->o->save, name);
    if (d->o->json) {
      char *b = NULL;
      size_t bn = 0, bc = 0;
      jstr(&b, &bn, &bc, path);
      push(d, 3, b, bn);
      free(b);
    } else {
      dprintf(STDERR_FILENO, "agsx: saved %s\n", path);
    }
  }
}

static int on_item(const struct agsx_code_item *it, void *data) {
  struct run *d = data;
  bool json = d->o->json;
  switch (it->type) {
  case AGSX_CODE_COUNT: d->count = it->execution_count; break;
  case AGSX_CODE_STDOUT:
  case AGSX_CODE_STDERR:
    if (json) {
      char *b = NULL;
      size_t bn = 0, bc = 0;
      jstr(&b, &bn, &bc, it->text);
      push(d, it->type == AGSX_CODE_STDOUT ? 1 : 2, b, bn);
      free(b);
    } else {
      out_write(it->type == AGSX_CODE_STDOUT ? STDOUT_FILENO : STDERR_FILENO, it->text,
                strlen(it->text));
    }
    break;
  case AGSX_CODE_RESULT:
    d->results++;
    /* LINE is {"type":"result",...}: the result object without its type. */
    if (json) {
      const char *rest = it->line + strlen("{\"type\":\"result\",");
      char *b = xasprintf("{%s", rest);
      push(d, 0, b, strlen(b));
      free(b);
    } else if (it->text) {
      out_write(STDOUT_FILENO, it->text, strlen(it->text));
      out_write(STDOUT_FILENO, "\n", 1);
    }
    if (it->is_main_result && it->text && d->main_text == NULL)
      d->main_text = xstrdup(it->text);
    if (d->savefd >= 0)
      save_images(d, it);
    break;
  case AGSX_CODE_ERROR:
    free(d->error);
    d->error = xstrdup(it->line + strlen("{\"type\":\"error\","));
    if (!json) {
      if (*it->traceback)
        out_write(STDERR_FILENO, it->traceback, strlen(it->traceback));
      else
        dprintf(STDERR_FILENO, "%s%s%s", it->name, *it->name ? ": " : "", it->value);
      out_write(STDERR_FILENO, "\n", 1);
    }
    break;
  case AGSX_CODE_TRUNCATED:
    if (!json)
      dprintf(STDERR_FILENO, "agsx: code: output over the limit: %llu bytes dropped\n",
              (unsigned long long)it->dropped);
    break;
  default: break;
  }
  return 0;
}

static void print_json(struct run *d, const struct agsx_code_context *c,
                       const struct agsx_code_exec_result *res, int64_t duration_ms) {
  char *b = NULL;
  size_t n = 0, cap = 0;
  jraw(&b, &n, &cap, "{\"context\":{\"id\":", 17);
  jstr(&b, &n, &cap, c->id);
  jraw(&b, &n, &cap, ",\"language\":", 12);
  jstr(&b, &n, &cap, c->language);
  jraw(&b, &n, &cap, ",\"cwd\":", 7);
  jstr(&b, &n, &cap, c->cwd);
  char num[160];
  snprintf(num, sizeof(num), "},\"execution_count\":%lld,\"results\":[", (long long)d->count);
  jraw(&b, &n, &cap, d->count < 0 ? "},\"execution_count\":null,\"results\":[" : num,
       strlen(d->count < 0 ? "},\"execution_count\":null,\"results\":[" : num));
  jraw(&b, &n, &cap, d->b[0] ? d->b[0] : "", d->n[0]);
  jraw(&b, &n, &cap, "],\"text\":", 9);
  if (d->main_text)
    jstr(&b, &n, &cap, d->main_text);
  else
    jraw(&b, &n, &cap, "null", 4);
  jraw(&b, &n, &cap, ",\"logs\":{\"stdout\":[", 19);
  jraw(&b, &n, &cap, d->b[1] ? d->b[1] : "", d->n[1]);
  jraw(&b, &n, &cap, "],\"stderr\":[", 12);
  jraw(&b, &n, &cap, d->b[2] ? d->b[2] : "", d->n[2]);
  jraw(&b, &n, &cap, "]},\"error\":", 11);
  if (d->error) {
    jraw(&b, &n, &cap, "{", 1);
    jraw(&b, &n, &cap, d->error, strlen(d->error));
  } else {
    jraw(&b, &n, &cap, "null", 4);
  }
  snprintf(num, sizeof(num),
           ",\"timed_out\":%s,\"cancelled\":%s,\"truncated\":%s,\"dropped_bytes\":%llu,"
           "\"duration_ms\":%lld,\"files\":[",
           res->timed_out ? "true" : "false", res->cancelled ? "true" : "false",
           res->truncated ? "true" : "false", (unsigned long long)res->dropped,
           (long long)duration_ms);
  jraw(&b, &n, &cap, num, strlen(num));
  jraw(&b, &n, &cap, d->b[3] ? d->b[3] : "", d->n[3]);
  jraw(&b, &n, &cap, "]}\n", 3);
  out_write(STDOUT_FILENO, b, n);
  free(b);
}

/* ---- the actions --------------------------------------------------------- */

static int read_code(int argc, char **argv, int i, char **ret, size_t *ret_len) {
  if (i < argc && strcmp(argv[i], "-") != 0) {
    *ret = xstrdup(argv[i]);
    *ret_len = strlen(argv[i]);
    return 0;
  }
  agsx_error_t err = NULL;
  if (agsx_read_fd(STDIN_FILENO, AGSX_CODE_CODE_MAX, ret, ret_len, &err) < 0)
    return agsx_error_wrap(&err, "code: read the code from stdin"), agsx_fail(&err), -1;
  return 0;
}

static int find_context(int statefd, const char *id, struct code_opts *o,
                        struct agsx_code_context *c, agsx_error_t *err) {
  if (o->context)
    return agsx_code_context_get(statefd, id, o->context, c, err);
  return agsx_code_context_default(statefd, id, o->language, c, err);
}

static int do_run(struct code_opts *o, int statefd, const char *id, int argc, char **argv, int i) {
  _cleanup_free_ char *code = NULL;
  size_t len = 0;
  if (read_code(argc, argv, i, &code, &len) < 0)
    return AGSX_EXIT_FAILURE;
  struct run d = {.o = o, .savefd = -1, .count = -1};
  if (o->save) {
    if (mkdir(o->save, 0755) < 0 && errno != EEXIST)
      return agsx_failf("code: --save: create `%s`: %s", o->save, strerror(errno));
    d.savefd = open(o->save, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d.savefd < 0)
      return agsx_failf("code: --save: open `%s`: %s", o->save, strerror(errno));
  }
  agsx_error_t err = NULL;
  struct agsx_code_context c = {0};
  int rc = AGSX_EXIT_FAILURE;
  /* Signals are blocked (and read from a signalfd, to interrupt the cell)
   * only once the context is there: waiting for a default context's lock
   * or its kernel's start, Ctrl-C still ends agsx code. */
  sigset_t mask, old;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGHUP);
  sigprocmask(SIG_BLOCK, NULL, &old);
  _cleanup_close_ int sigfd = -1;
  if (find_context(statefd, id, o, &c, &err) < 0) {
    rc = agsx_fail(&err);
    goto out;
  }
  sigprocmask(SIG_BLOCK, &mask, NULL);
  sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  struct agsx_code_exec_spec spec = {.code = code,
                                     .code_len = len,
                                     .env = o->env,
                                     .timeout_ms = o->timeout_ms,
                                     .output_max = o->output_max};
  struct agsx_code_exec_result res = {0};
  int64_t t0 = agsx_mono_ns();
  if (agsx_code_run(statefd, id, &c, &spec, sigfd, on_item, &d, &res, &err) < 0) {
    rc = agsx_fail(&err);
    goto out;
  }
  if (o->json)
    print_json(&d, &c, &res, (agsx_mono_ns() - t0) / 1000000);
  /* 0; 1 when the cell raised; 124 after --timeout, 130 when interrupted. */
  rc = res.timed_out ? 124 : res.cancelled ? 130 : (d.error || d.failed_save) ? 1 : 0;
out:
  sigprocmask(SIG_SETMASK, &old, NULL);
  agsx_code_context_clear(&c);
  for (int k = 0; k < 4; k++)
    free(d.b[k]);
  free(d.error);
  free(d.main_text);
  agsx_closep(&d.savefd);
  return rc;
}

static void print_context_json(const struct agsx_code_context *c, char **b, size_t *n,
                               size_t *cap) {
  jraw(b, n, cap, "{\"id\":", 6);
  jstr(b, n, cap, c->id);
  jraw(b, n, cap, ",\"language\":", 12);
  jstr(b, n, cap, c->language);
  jraw(b, n, cap, ",\"cwd\":", 7);
  jstr(b, n, cap, c->cwd);
  jraw(b, n, cap, c->is_default ? ",\"default\":true}" : ",\"default\":false}",
       c->is_default ? 16 : 17);
}

static int do_list(struct code_opts *o, int statefd, const char *id) {
  agsx_error_t err = NULL;
  struct agsx_code_context *v = NULL;
  size_t n = 0;
  if (agsx_code_context_list(statefd, id, &v, &n, &err) < 0)
    return agsx_fail(&err);
  char *b = NULL;
  size_t bn = 0, cap = 0;
  if (o->json) {
    jraw(&b, &bn, &cap, "[", 1);
    for (size_t i = 0; i < n; i++) {
      if (i)
        jraw(&b, &bn, &cap, ",", 1);
      print_context_json(&v[i], &b, &bn, &cap);
    }
    jraw(&b, &bn, &cap, "]\n", 2);
    out_write(STDOUT_FILENO, b, bn);
  } else if (o->quiet) {
    for (size_t i = 0; i < n; i++)
      printf("%s\n", v[i].id);
  } else {
    printf("%-32s  %-8s  %-7s  %s\n", "CONTEXT ID", "LANGUAGE", "DEFAULT", "CWD");
    for (size_t i = 0; i < n; i++)
      printf("%-32s  %-8s  %-7s  %s\n", v[i].id, v[i].language, v[i].is_default ? "yes" : "",
             v[i].cwd);
  }
  free(b);
  agsx_code_context_list_free(v, n);
  return 0;
}

static int do_context(struct code_opts *o, int statefd, const char *id) {
  agsx_error_t err = NULL;
  struct agsx_code_context c = {0};
  int r;
  if (o->action == CREATE)
    r = agsx_code_context_create(statefd, id, o->language, o->workdir, &c, &err);
  else if ((r = agsx_code_context_get(statefd, id, o->context, &c, &err)) == 0)
    r = o->action == RESTART ? agsx_code_context_restart(statefd, id, &c, &err)
                             : agsx_code_context_remove(statefd, id, &c, &err);
  if (r < 0) {
    agsx_code_context_clear(&c);
    return agsx_fail(&err);
  }
  if (o->json) {
    char *b = NULL;
    size_t n = 0, cap = 0;
    print_context_json(&c, &b, &n, &cap);
    jraw(&b, &n, &cap, "\n", 1);
    out_write(STDOUT_FILENO, b, n);
    free(b);
  } else {
    printf("%s\n", c.id);
  }
  agsx_code_context_clear(&c);
  return 0;
}

static int check_opts(const struct code_opts *o, int operands) {
  if (o->n_actions > 1)
    return agsx_failf("code: --list, --create, --restart and --rm do not go together");
  if (o->context && o->language)
    return agsx_failf("code: only one of --context and --language can be given");
  if ((o->action == RESTART || o->action == RM) && !o->context)
    return agsx_failf("code: --%s needs --context ID", o->action == RM ? "rm" : "restart");
  if (o->action == CREATE && o->context)
    return agsx_failf("code: --create makes a new context: no --context");
  if (o->workdir && o->action != CREATE)
    return agsx_failf("code: --workdir is for --create");
  if (o->action != RUN && operands > 1)
    return agsx_failf("code: no CODE with --list, --create, --restart or --rm");
  if (operands < 1)
    return agsx_failf("code: expected SANDBOX (see agsx code --help)");
  if (operands > 2)
    return agsx_failf("code: expected SANDBOX and at most one CODE (use - or stdin for more)");
  return 0;
}

int agsx_cmd_code(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  struct code_opts o = {.json = ctx->json};
  int i = agsx_parse_options(cmd, argc, argv, on_code_opt, &o);
  if (i < 0 || check_opts(&o, argc - i) != 0) {
    agsx_strv_free(o.env);
    return AGSX_EXIT_FAILURE;
  }
  agsx_error_t err = NULL;
  struct agsx_record rec;
  int code;
  if (agsx_state_lookup(ctx->state, argv[i], &rec, &err) < 0) {
    agsx_strv_free(o.env);
    return agsx_fail(&err);
  }
  _cleanup_close_ int statefd = -1;
  if (rec.status == AGSX_STATUS_EXITED)
    code = agsx_failf("sandbox `%s` is not running", argv[i]);
  else if ((statefd = agsx_state_open(ctx->state, false, &err)) < 0)
    code = agsx_fail(&err);
  else if (o.action == RUN)
    code = do_run(&o, statefd, rec.id, argc, argv, i + 1);
  else if (o.action == LIST)
    code = do_list(&o, statefd, rec.id);
  else
    code = do_context(&o, statefd, rec.id);
  agsx_record_clear(&rec);
  agsx_strv_free(o.env);
  return code;
}
