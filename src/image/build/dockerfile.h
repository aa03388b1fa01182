/* agsx — dockerfile: parsing a Dockerfile (untrusted input) into a list of
 * instructions, and Docker's word processing (quotes, escapes, $VAR,
 * ${VAR}, ${VAR:-x}, ${VAR:+x}) that the builder applies where Docker does.
 *
 * The parser knows the grammar, not the meaning: parser directives
 * (`# syntax=`, `# escape=`), comments, line continuations, instruction
 * keywords, `--flag=value` options, JSON (exec) form. Heredocs are refused
 * with a clear error. Every error names the line: "Dockerfile:N: ...". */
#ifndef AGSX_DOCKERFILE_H
#define AGSX_DOCKERFILE_H

#include "util/util.h"

#define AGSX_DOCKERFILE_MAX (1u << 20) /* bytes of one Dockerfile */
#define AGSX_DF_MAX_INSTRUCTIONS 4096
#define AGSX_DF_MAX_WORD (1u << 20) /* bytes of one word after substitution */
#define AGSX_DF_MAX_WORDS 4096

enum agsx_df_cmd {
  AGSX_DF_FROM,
  AGSX_DF_RUN,
  AGSX_DF_CMD,
  AGSX_DF_ENTRYPOINT,
  AGSX_DF_COPY,
  AGSX_DF_ADD,
  AGSX_DF_ENV,
  AGSX_DF_ARG,
  AGSX_DF_WORKDIR,
  AGSX_DF_USER,
  AGSX_DF_LABEL,
  AGSX_DF_EXPOSE,
  AGSX_DF_SHELL,
  AGSX_DF_STOPSIGNAL,
  AGSX_DF_VOLUME,
  AGSX_DF_MAINTAINER,
};

struct agsx_df_flag {
  char *name;  /* "from" for --from=x */
  char *value; /* "x"; NULL for a bare --link */
};

struct agsx_df_instr {
  enum agsx_df_cmd cmd;
  unsigned line; /* of the keyword */
  char *text;    /* "COPY --from=a /x /y": keyword, flags and arguments, continuations joined */
  struct agsx_df_flag *flags;
  size_t n_flags;
  bool json;   /* exec (JSON array) form: argv holds the strings */
  char **argv; /* NULL-terminated, json form only */
  size_t argc;
  char *args; /* the arguments after the flags, as written (shell form) */
};

struct agsx_dockerfile {
  struct agsx_df_instr *v;
  size_t n;
  char escape; /* '\\' or '`' */
};

int agsx_dockerfile_parse(const char *buf, size_t len, struct agsx_dockerfile *ret,
                          agsx_error_t *err);
void agsx_dockerfile_clear(struct agsx_dockerfile *df);
const char *agsx_df_cmd_name(enum agsx_df_cmd cmd);
/* The value of flag NAME of I, or NULL; *RET_SET tells a bare flag apart. */
const char *agsx_df_flag(const struct agsx_df_instr *i, const char *name, bool *ret_set);

/* Variable lookup for substitution: NULL when unset. */
typedef const char *(*agsx_df_lookup_fn)(const char *name, void *data);

/* Docker's word processing of S: quotes removed, escapes applied, variables
 * substituted. _words splits at unquoted whitespace (COPY, EXPOSE, ENV
 * pairs); _word keeps one word (WORKDIR, USER, FROM's image). */
int agsx_df_expand_words(const char *s, char escape, agsx_df_lookup_fn lookup, void *data,
                         char ***ret, agsx_error_t *err);
int agsx_df_expand_word(const char *s, char escape, agsx_df_lookup_fn lookup, void *data,
                        char **ret, agsx_error_t *err);

#endif
