/* agsx — Dockerfile parsing and word processing. See dockerfile.h. */
#include "config.h"

#include "image/build/dockerfile.h"
#include "util/json.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

static const struct {
  const char *name;
  enum agsx_df_cmd cmd;
  const char *flags; /* allowed --flags, space separated, with a trailing space */
} keywords[] = {
    {"FROM", AGSX_DF_FROM, "platform "},
    {"RUN", AGSX_DF_RUN, "network "},
    {"CMD", AGSX_DF_CMD, ""},
    {"ENTRYPOINT", AGSX_DF_ENTRYPOINT, ""},
    {"COPY", AGSX_DF_COPY, "from chown chmod link "},
    {"ADD", AGSX_DF_ADD, "chown chmod link "},
    {"ENV", AGSX_DF_ENV, ""},
    {"ARG", AGSX_DF_ARG, ""},
    {"WORKDIR", AGSX_DF_WORKDIR, ""},
    {"USER", AGSX_DF_USER, ""},
    {"LABEL", AGSX_DF_LABEL, ""},
    {"EXPOSE", AGSX_DF_EXPOSE, ""},
    {"SHELL", AGSX_DF_SHELL, ""},
    {"STOPSIGNAL", AGSX_DF_STOPSIGNAL, ""},
    {"VOLUME", AGSX_DF_VOLUME, ""},
    {"MAINTAINER", AGSX_DF_MAINTAINER, ""},
};

const char *agsx_df_cmd_name(enum agsx_df_cmd cmd) {
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(keywords); i++)
    if (keywords[i].cmd == cmd)
      return keywords[i].name;
  return "?";
}

const char *agsx_df_flag(const struct agsx_df_instr *i, const char *name, bool *ret_set) {
  const char *v = NULL;
  bool set = false;
  for (size_t k = 0; k < i->n_flags; k++)
    if (strcmp(i->flags[k].name, name) == 0)
      set = true, v = i->flags[k].value;
  if (ret_set)
    *ret_set = set;
  return v;
}

static void instr_clear(struct agsx_df_instr *i) {
  free(i->text);
  for (size_t k = 0; k < i->n_flags; k++) {
    free(i->flags[k].name);
    free(i->flags[k].value);
  }
  free(i->flags);
  agsx_strv_free(i->argv);
  free(i->args);
  memset(i, 0, sizeof(*i));
}

void agsx_dockerfile_clear(struct agsx_dockerfile *df) {
  for (size_t i = 0; i < df->n; i++)
    instr_clear(&df->v[i]);
  free(df->v);
  memset(df, 0, sizeof(*df));
}

/* ---- lines ------------------------------------------------------------------------------- */

struct lines {
  const char *buf;
  size_t len, pos;
  unsigned lineno; /* of the line last returned */
};

/* Returns the next physical line (without its newline, nor a trailing CR). */
static bool next_line(struct lines *l, const char **ret, size_t *ret_len) {
  if (l->pos >= l->len)
    return false;
  const char *s = l->buf + l->pos;
  const char *nl = memchr(s, '\n', l->len - l->pos);
  size_t n = nl ? (size_t)(nl - s) : l->len - l->pos;
  l->pos += n + (nl ? 1 : 0);
  if (n && s[n - 1] == '\r')
    n--;
  l->lineno++;
  *ret = s;
  *ret_len = n;
  return true;
}

static size_t skip_ws(const char *s, size_t n, size_t i) {
  while (i < n && (s[i] == ' ' || s[i] == '\t'))
    i++;
  return i;
}

static size_t trim_right(const char *s, size_t n) {
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
    n--;
  return n;
}

/* "# name=value" at the top of the file. Returns true and the parts when
 * the line is one. */
static bool directive(const char *s, size_t n, char *name, size_t name_cap, const char **ret_val,
                      size_t *ret_vlen) {
  size_t i = skip_ws(s, n, 0);
  if (i >= n || s[i] != '#')
    return false;
  i = skip_ws(s, n, i + 1);
  size_t k = 0;
  while (i < n && (isalnum((unsigned char)s[i]) || s[i] == '_') && k + 1 < name_cap)
    name[k++] = (char)tolower((unsigned char)s[i++]);
  name[k] = '\0';
  if (k == 0)
    return false;
  i = skip_ws(s, n, i);
  if (i >= n || s[i] != '=')
    return false;
  i = skip_ws(s, n, i + 1);
  *ret_val = s + i;
  *ret_vlen = trim_right(s + i, n - i);
  return true;
}

static int parse_directives(struct lines *l, char *escape, agsx_error_t *err) {
  bool seen_escape = false, seen_syntax = false;
  for (;;) {
    size_t save = l->pos;
    unsigned save_no = l->lineno;
    const char *s, *v;
    size_t n, vn;
    char name[32];
    if (!next_line(l, &s, &n) || !directive(s, n, name, sizeof(name), &v, &vn)) {
      l->pos = save, l->lineno = save_no;
      return 0;
    }
    if (strcmp(name, "escape") == 0) {
      if (seen_escape)
        return agsx_error_set(err, 0, "Dockerfile:%u: the escape directive is given twice",
                              l->lineno);
      if (vn != 1 || (v[0] != '\\' && v[0] != '`'))
        return agsx_error_set(err, 0, "Dockerfile:%u: invalid escape character `%.*s` (\\ or `)",
                              l->lineno, (int)(vn > 16 ? 16 : vn), v);
      *escape = v[0];
      seen_escape = true;
    } else if (strcmp(name, "syntax") == 0) {
      if (seen_syntax)
        return agsx_error_set(err, 0, "Dockerfile:%u: the syntax directive is given twice",
                              l->lineno);
      /* agsx has one built-in frontend: the syntax image is not used. */
      seen_syntax = true;
    } else if (strcmp(name, "check") != 0) {
      /* Not a directive Docker knows: an ordinary comment, which ends the
       * directives. */
      l->pos = save, l->lineno = save_no;
      return 0;
    }
  }
}

/* A comment line: '#' as its first non-blank character. */
static bool is_comment(const char *s, size_t n) {
  size_t i = skip_ws(s, n, 0);
  return i < n && s[i] == '#';
}

static bool is_blank(const char *s, size_t n) { return skip_ws(s, n, 0) == n; }

/* Appends S[0..N) to the logical line; true when it continues on the next. */
static bool append_part(char **buf, size_t *len, const char *s, size_t n, char escape) {
  size_t t = trim_right(s, n);
  bool cont = t > 0 && s[t - 1] == escape;
  size_t take = cont ? t - 1 : n;
  *buf = xrealloc(*buf, *len + take + 1);
  memcpy(*buf + *len, s, take);
  *len += take;
  (*buf)[*len] = '\0';
  return cont;
}

/* ---- one instruction ----------------------------------------------------------------------- */

static bool flag_allowed(const char *allowed, const char *name) {
  size_t n = strlen(name);
  for (const char *p = allowed; (p = strstr(p, name)) != NULL; p++)
    if ((p == allowed || p[-1] == ' ') && p[n] == ' ')
      return true;
  return false;
}

static int parse_flags(struct agsx_df_instr *in, const char *allowed, const char **rest,
                       agsx_error_t *err) {
  const char *p = *rest;
  while (p[0] == '-' && p[1] == '-') {
    const char *end = p + strcspn(p, " \t");
    const char *eq = memchr(p, '=', (size_t)(end - p));
    _cleanup_free_ char *name = xstrndup(p + 2, (size_t)((eq ? eq : end) - p - 2));
    if (*name == '\0')
      return agsx_error_set(err, 0, "Dockerfile:%u: empty flag name", in->line);
    if (!flag_allowed(allowed, name)) {
      if (in->cmd == AGSX_DF_RUN && (strcmp(name, "mount") == 0 || strcmp(name, "security") == 0))
        return agsx_error_set(err, 0, "Dockerfile:%u: RUN --%s is not supported", in->line, name);
      return agsx_error_set(err, 0, "Dockerfile:%u: unknown flag --%.64s for %s", in->line, name,
                            agsx_df_cmd_name(in->cmd));
    }
    if (in->n_flags >= 16)
      return agsx_error_set(err, 0, "Dockerfile:%u: too many flags", in->line);
    in->flags = xrealloc(in->flags, (in->n_flags + 1) * sizeof(*in->flags));
    struct agsx_df_flag *f = &in->flags[in->n_flags++];
    f->name = steal_ptr(&name);
    f->value = eq ? xstrndup(eq + 1, (size_t)(end - eq - 1)) : NULL;
    if (f->value == NULL && strcmp(f->name, "link") != 0)
      return agsx_error_set(err, 0, "Dockerfile:%u: flag --%s needs a value (--%s=VALUE)", in->line,
                            f->name, f->name);
    p = end;
    while (*p == ' ' || *p == '\t')
      p++;
  }
  *rest = p;
  return 0;
}

/* A JSON array of strings; -1 when ARGS is not one (even if it starts
 * with '['). */
static int parse_json(struct agsx_df_instr *in, agsx_error_t *err) {
  _cleanup_json_ yajl_val v = agsx_json_parse(in->args, strlen(in->args), AGSX_DOCKERFILE_MAX, err);
  if (v == NULL)
    return -1;
  if (!YAJL_IS_ARRAY(v))
    return agsx_error_set(err, 0, "not an array");
  size_t n = v->u.array.len;
  if (n > AGSX_DF_MAX_WORDS)
    return agsx_error_set(err, 0, "more than %d elements", AGSX_DF_MAX_WORDS);
  in->argv = xzalloc((n + 1) * sizeof(char *));
  for (size_t i = 0; i < n; i++) {
    yajl_val e = v->u.array.values[i];
    if (!YAJL_IS_STRING(e))
      return agsx_error_set(err, 0, "element %zu is not a string", i);
    in->argv[i] = xstrdup(e->u.string);
    in->argc++;
  }
  in->json = true;
  return 0;
}

/* "<<EOF", "<<-EOF", "<<'EOF'" at the start of a word. */
static bool has_heredoc(const char *s) {
  for (const char *p = s; (p = strstr(p, "<<")) != NULL; p += 2) {
    if (p != s && p[-1] != ' ' && p[-1] != '\t')
      continue;
    const char *q = p + 2;
    if (*q == '-')
      q++;
    if (*q == '"' || *q == '\'')
      q++;
    if (isalpha((unsigned char)*q) || *q == '_')
      return true;
  }
  return false;
}

static bool json_allowed(enum agsx_df_cmd c) {
  return c == AGSX_DF_RUN || c == AGSX_DF_CMD || c == AGSX_DF_ENTRYPOINT || c == AGSX_DF_SHELL ||
         c == AGSX_DF_COPY || c == AGSX_DF_ADD || c == AGSX_DF_VOLUME;
}

static int parse_instruction(const char *line, unsigned lineno, struct agsx_df_instr *in,
                             agsx_error_t *err) {
  in->line = lineno;
  const char *p = line + strspn(line, " \t");
  size_t kl = strcspn(p, " \t");
  ssize_t k = -1;
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(keywords) && k < 0; i++)
    if (strlen(keywords[i].name) == kl && strncasecmp(keywords[i].name, p, kl) == 0)
      k = (ssize_t)i;
  if (k < 0) {
    size_t show = kl > 64 ? 64 : kl;
    if (kl == 11 && strncasecmp(p, "HEALTHCHECK", 11) == 0)
      return agsx_error_set(err, 0, "Dockerfile:%u: HEALTHCHECK is not supported", lineno);
    if (kl == 6 && strncasecmp(p, "ONBUILD", 6) == 0)
      return agsx_error_set(err, 0, "Dockerfile:%u: ONBUILD is not supported", lineno);
    return agsx_error_set(err, 0, "Dockerfile:%u: unknown instruction \"%.*s\"", lineno, (int)show,
                          p);
  }
  in->cmd = keywords[k].cmd;
  const char *rest = p + kl;
  rest += strspn(rest, " \t");
  if (parse_flags(in, keywords[k].flags, &rest, err) < 0)
    return -1;
  size_t rl = trim_right(rest, strlen(rest));
  in->args = xstrndup(rest, rl);
  const char *after = p + kl + strspn(p + kl, " \t");
  in->text = xasprintf("%s%s%s", keywords[k].name, *after ? " " : "", after);
  in->text[trim_right(in->text, strlen(in->text))] = '\0';
  if ((in->cmd == AGSX_DF_RUN || in->cmd == AGSX_DF_COPY || in->cmd == AGSX_DF_ADD) &&
      has_heredoc(in->args))
    return agsx_error_set(err, 0, "Dockerfile:%u: heredocs (<<WORD) are not supported", lineno);
  if (json_allowed(in->cmd) && in->args[0] == '[') {
    agsx_error_t jerr = NULL;
    if (parse_json(in, &jerr) < 0) {
      agsx_error_set(err, 0, "Dockerfile:%u: %s: invalid JSON array: %s", lineno, keywords[k].name,
                     jerr ? jerr->msg : "?");
      agsx_error_free(&jerr);
      return -1;
    }
  }
  if (in->cmd == AGSX_DF_SHELL && !in->json)
    return agsx_error_set(err, 0, "Dockerfile:%u: SHELL needs a JSON array ([\"/bin/sh\", \"-c\"])",
                          lineno);
  bool empty = in->json ? in->argc == 0 : in->args[0] == '\0';
  if (empty && in->cmd != AGSX_DF_CMD && in->cmd != AGSX_DF_ENTRYPOINT)
    return agsx_error_set(err, 0, "Dockerfile:%u: %s needs an argument", lineno, keywords[k].name);
  return 0;
}

int agsx_dockerfile_parse(const char *buf, size_t len, struct agsx_dockerfile *ret,
                          agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  ret->escape = '\\';
  if (len > AGSX_DOCKERFILE_MAX)
    return agsx_error_set(err, 0, "Dockerfile is larger than %u bytes", AGSX_DOCKERFILE_MAX);
  if (memchr(buf, '\0', len))
    return agsx_error_set(err, 0, "Dockerfile holds a NUL byte");
  struct lines l = {.buf = buf, .len = len};
  /* A UTF-8 byte order mark is allowed. */
  if (len >= 3 && memcmp(buf, "\xef\xbb\xbf", 3) == 0)
    l.pos = 3;
  if (parse_directives(&l, &ret->escape, err) < 0)
    return -1;
  const char *s;
  size_t n;
  while (next_line(&l, &s, &n)) {
    if (is_blank(s, n) || is_comment(s, n))
      continue;
    unsigned start = l.lineno;
    _cleanup_free_ char *logical = NULL;
    size_t llen = 0;
    bool cont = append_part(&logical, &llen, s, n, ret->escape);
    while (cont && next_line(&l, &s, &n)) {
      /* Comments and blank lines inside a continued instruction are
       * skipped, as Docker does. */
      if (is_comment(s, n) || is_blank(s, n))
        continue;
      cont = append_part(&logical, &llen, s, n, ret->escape);
    }
    if (is_blank(logical, llen))
      continue;
    if (ret->n >= AGSX_DF_MAX_INSTRUCTIONS) {
      agsx_dockerfile_clear(ret);
      return agsx_error_set(err, 0, "Dockerfile:%u: more than %d instructions", start,
                            AGSX_DF_MAX_INSTRUCTIONS);
    }
    ret->v = xrealloc(ret->v, (ret->n + 1) * sizeof(*ret->v));
    struct agsx_df_instr *in = &ret->v[ret->n++];
    memset(in, 0, sizeof(*in));
    if (parse_instruction(logical, start, in, err) < 0) {
      agsx_dockerfile_clear(ret);
      return -1;
    }
  }
  if (ret->n == 0)
    return agsx_error_set(err, 0, "Dockerfile has no instructions");
  if (ret->v[0].cmd != AGSX_DF_FROM && ret->v[0].cmd != AGSX_DF_ARG) {
    unsigned line = ret->v[0].line;
    agsx_dockerfile_clear(ret);
    return agsx_error_set(err, 0, "Dockerfile:%u: the first instruction must be FROM (or ARG)",
                          line);
  }
  return 0;
}

/* ---- word processing ------------------------------------------------------------------------ */

struct out {
  char *buf;
  size_t len, cap;
};

static int out_add(struct out *o, const char *s, size_t n, agsx_error_t *err) {
  if (o->len + n > AGSX_DF_MAX_WORD)
    return agsx_error_set(err, 0, "a word is longer than %u bytes after substitution",
                          AGSX_DF_MAX_WORD);
  if (o->len + n + 1 > o->cap) {
    o->cap = (o->len + n + 1) * 2;
    o->buf = xrealloc(o->buf, o->cap);
  }
  memcpy(o->buf + o->len, s, n);
  o->len += n;
  o->buf[o->len] = '\0';
  return 0;
}

struct lexer {
  char escape;
  agsx_df_lookup_fn lookup;
  void *data;
  int depth;
};

static int process(struct lexer *lx, const char *s, size_t n, bool split, char ***words,
                   size_t *n_words, struct out *cur, agsx_error_t *err);

static bool name_start(char c) { return isalpha((unsigned char)c) || c == '_'; }
static bool name_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* Expands "${...}" starting at S (S[0] == '{'); returns the bytes used. */
static ssize_t brace_var(struct lexer *lx, const char *s, size_t n, struct out *o,
                         agsx_error_t *err) {
  size_t i = 1, depth = 1;
  while (i < n && depth) {
    if (s[i] == lx->escape && i + 1 < n)
      i++;
    else if (s[i] == '{')
      depth++;
    else if (s[i] == '}')
      depth--;
    i++;
  }
  if (depth)
    return agsx_error_set(err, 0, "missing '}' in `${%.*s`", (int)(n > 32 ? 32 : n - 1), s + 1);
  const char *body = s + 1;
  size_t blen = i - 2, k = 0;
  if (blen == 0 || !name_start(body[0]))
    return agsx_error_set(err, 0, "bad substitution `${%.*s}`", (int)(blen > 32 ? 32 : blen), body);
  while (k < blen && name_char(body[k]))
    k++;
  _cleanup_free_ char *name = xstrndup(body, k);
  const char *val = lx->lookup(name, lx->data);
  if (k == blen)
    return val && out_add(o, val, strlen(val), err) < 0 ? -1 : (ssize_t)i;
  bool colon = body[k] == ':';
  char mod = body[k + (colon ? 1 : 0)];
  if (colon && k + 1 >= blen)
    return agsx_error_set(err, 0, "bad substitution `${%.*s}`", (int)(blen > 32 ? 32 : blen), body);
  if (mod != '-' && mod != '+' && mod != '?')
    return agsx_error_set(err, 0, "unsupported modifier `%c` in `${%.*s}`", mod,
                          (int)(blen > 32 ? 32 : blen), body);
  const char *word = body + k + (colon ? 2 : 1);
  size_t wlen = blen - k - (colon ? 2 : 1);
  bool set = val != NULL && (!colon || *val);
  if (mod == '?' && !set)
    return agsx_error_set(err, 0, "%s: %.*s", name, (int)(wlen > 200 ? 200 : wlen),
                          wlen ? word : "is not set");
  bool use_word = (mod == '-' && !set) || (mod == '+' && set);
  if (!use_word)
    return (mod != '+' && val && out_add(o, val, strlen(val), err) < 0) ? -1 : (ssize_t)i;
  if (++lx->depth > 16)
    return agsx_error_set(err, 0, "substitutions nested too deeply");
  int r = process(lx, word, wlen, false, NULL, NULL, o, err);
  lx->depth--;
  return r < 0 ? -1 : (ssize_t)i;
}

static void push_word(char ***words, size_t *n_words, struct out *cur) {
  *words = xrealloc(*words, (*n_words + 2) * sizeof(char *));
  (*words)[(*n_words)++] = cur->buf ? steal_ptr(&cur->buf) : xstrdup("");
  (*words)[*n_words] = NULL;
  cur->len = cur->cap = 0;
}

static int process(struct lexer *lx, const char *s, size_t n, bool split, char ***words,
                   size_t *n_words, struct out *cur, agsx_error_t *err) {
  bool sq = false, dq = false, started = false;
  size_t i = 0;
  while (i < n) {
    char c = s[i];
    if (sq) {
      if (c == '\'')
        sq = false;
      else if (out_add(cur, &c, 1, err) < 0)
        return -1;
      i++;
      continue;
    }
    if (c == lx->escape) {
      if (i + 1 >= n) {
        if (out_add(cur, &c, 1, err) < 0)
          return -1;
        i++, started = true;
        continue;
      }
      char d = s[i + 1];
      /* Inside double quotes only quote, dollar and the escape itself are
       * escaped; elsewhere the escape is kept, like the shell. */
      if (dq && d != '"' && d != '$' && d != lx->escape && out_add(cur, &c, 1, err) < 0)
        return -1;
      if (out_add(cur, &d, 1, err) < 0)
        return -1;
      i += 2, started = true;
      continue;
    }
    if (c == '\'' && !dq) {
      sq = true, started = true, i++;
      continue;
    }
    if (c == '"') {
      dq = !dq, started = true, i++;
      continue;
    }
    if (c == '$' && i + 1 < n && s[i + 1] == '{') {
      ssize_t used = brace_var(lx, s + i + 1, n - i - 1, cur, err);
      if (used < 0)
        return -1;
      i += 1 + (size_t)used, started = true;
      continue;
    }
    if (c == '$' && i + 1 < n && name_start(s[i + 1])) {
      size_t k = i + 1;
      while (k < n && name_char(s[k]))
        k++;
      _cleanup_free_ char *name = xstrndup(s + i + 1, k - i - 1);
      const char *val = lx->lookup(name, lx->data);
      if (val && out_add(cur, val, strlen(val), err) < 0)
        return -1;
      i = k, started = true;
      continue;
    }
    if (split && !dq && (c == ' ' || c == '\t' || c == '\n')) {
      if (started) {
        if (*n_words >= AGSX_DF_MAX_WORDS)
          return agsx_error_set(err, 0, "more than %d words", AGSX_DF_MAX_WORDS);
        push_word(words, n_words, cur);
      }
      started = false, i++;
      continue;
    }
    if (out_add(cur, &c, 1, err) < 0)
      return -1;
    i++, started = true;
  }
  if (sq || dq)
    return agsx_error_set(err, 0, "unterminated %s quote", sq ? "single" : "double");
  if (split && started) {
    if (*n_words >= AGSX_DF_MAX_WORDS)
      return agsx_error_set(err, 0, "more than %d words", AGSX_DF_MAX_WORDS);
    push_word(words, n_words, cur);
  }
  return 0;
}

static const char *no_vars(const char *name, void *data) {
  (void)name, (void)data;
  return NULL;
}

int agsx_df_expand_words(const char *s, char escape, agsx_df_lookup_fn lookup, void *data,
                         char ***ret, agsx_error_t *err) {
  struct lexer lx = {.escape = escape, .lookup = lookup ? lookup : no_vars, .data = data};
  struct out cur = {0};
  char **words = xzalloc(sizeof(char *));
  size_t n = 0;
  int r = process(&lx, s, strlen(s), true, &words, &n, &cur, err);
  free(cur.buf);
  if (r < 0) {
    agsx_strv_free(words);
    return -1;
  }
  *ret = words;
  return 0;
}

int agsx_df_expand_word(const char *s, char escape, agsx_df_lookup_fn lookup, void *data,
                        char **ret, agsx_error_t *err) {
  struct lexer lx = {.escape = escape, .lookup = lookup ? lookup : no_vars, .data = data};
  struct out cur = {0};
  if (process(&lx, s, strlen(s), false, NULL, NULL, &cur, err) < 0) {
    free(cur.buf);
    return -1;
  }
  *ret = cur.buf ? cur.buf : xstrdup("");
  return 0;
}
