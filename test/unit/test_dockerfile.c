/* Unit tests: Dockerfile parsing, word processing and .dockerignore. */
#include "config.h"

#include "image/build/dockerfile.h"
#include "image/build/dockerignore.h"
#include "tap.h"

static int parse(const char *text, struct agsx_dockerfile *df, agsx_error_t *err) {
  return agsx_dockerfile_parse(text, strlen(text), df, err);
}

static void bad(const char *text, const char *why) {
  struct agsx_dockerfile df;
  agsx_error_t err = NULL;
  int r = parse(text, &df, &err);
  tap_ok(r < 0 && err && strstr(err->msg, why), "refused (%s): %s", why,
         err ? err->msg : "accepted");
  if (r == 0)
    agsx_dockerfile_clear(&df);
  agsx_error_free(&err);
}

static const char *vars(const char *name, void *data) {
  (void)data;
  if (strcmp(name, "A") == 0)
    return "a";
  if (strcmp(name, "SP") == 0)
    return "x y";
  if (strcmp(name, "EMPTY") == 0)
    return "";
  return NULL;
}

static void word(const char *in, const char *want) {
  char *got = NULL;
  agsx_error_t err = NULL;
  agsx_df_expand_word(in, '\\', vars, NULL, &got, &err);
  tap_is_str(got, want, "word `%s` -> `%s`%s", in, want, err ? err->msg : "");
  free(got);
  agsx_error_free(&err);
}

static void words(const char *in, const char *want_joined) {
  char **v = NULL;
  agsx_error_t err = NULL;
  char buf[512] = "";
  if (agsx_df_expand_words(in, '\\', vars, NULL, &v, &err) == 0)
    for (size_t i = 0; v[i]; i++)
      snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "%s[%s]", i ? "," : "", v[i]);
  tap_is_str(buf, want_joined, "words `%s`%s", in, err ? err->msg : "");
  agsx_strv_free(v);
  agsx_error_free(&err);
}

static void bad_word(const char *in, const char *why) {
  char *got = NULL;
  agsx_error_t err = NULL;
  int r = agsx_df_expand_word(in, '\\', vars, NULL, &got, &err);
  tap_ok(r < 0 && err && strstr(err->msg, why), "word `%s` refused (%s): %s", in, why,
         err ? err->msg : got);
  free(got);
  agsx_error_free(&err);
}

static void test_basic(void) {
  struct agsx_dockerfile df;
  agsx_error_t err = NULL;
  const char *t = "# syntax=docker/dockerfile:1\n"
                  "# a comment\n"
                  "ARG BASE=busybox\n"
                  "FROM $BASE AS build\n"
                  "\n"
                  "run echo a \\\n"
                  "  # inner comment\n"
                  "\n"
                  "  && echo b\n"
                  "COPY --from=build --chmod=755 /a /b\n"
                  "CMD [\"/bin/sh\", \"-c\", \"echo \\\"hi\\\"\"]\r\n"
                  "ENTRYPOINT []\n"
                  "  LABEL a=b\n";
  int r = parse(t, &df, &err);
  tap_ok(r == 0 && df.n == 7, "basic file parses into 7 instructions (%s)", err ? err->msg : "");
  if (r < 0)
    return;
  tap_ok(df.v[0].cmd == AGSX_DF_ARG && df.v[0].line == 3, "ARG on line 3");
  tap_ok(df.v[1].cmd == AGSX_DF_FROM && df.v[1].line == 4, "FROM on line 4");
  tap_ok(df.v[2].cmd == AGSX_DF_RUN && df.v[2].line == 6, "RUN on line 6 (lowercase keyword)");
  tap_is_str(df.v[2].args, "echo a   && echo b", "continuation joined, comment and blank skipped");
  tap_is_str(df.v[3].text, "COPY --from=build --chmod=755 /a /b", "instruction text");
  tap_is_str(agsx_df_flag(&df.v[3], "from", NULL), "build", "--from flag");
  tap_is_str(agsx_df_flag(&df.v[3], "chmod", NULL), "755", "--chmod flag");
  tap_is_str(df.v[3].args, "/a /b", "COPY args after flags");
  tap_ok(df.v[4].json && df.v[4].argc == 3, "CMD exec form");
  tap_is_str(df.v[4].argv[2], "echo \"hi\"", "JSON escapes");
  tap_ok(df.v[5].json && df.v[5].argc == 0, "ENTRYPOINT []");
  tap_ok(df.v[6].cmd == AGSX_DF_LABEL && df.v[6].line == 13, "indented LABEL on line 13");
  agsx_dockerfile_clear(&df);
}

static void test_escape(void) {
  struct agsx_dockerfile df;
  agsx_error_t err = NULL;
  const char *t = "# escape=`\n"
                  "FROM scratch\n"
                  "COPY c:\\dir\\ /x\n"
                  "RUN echo a `\n"
                  "    b\n";
  int r = parse(t, &df, &err);
  tap_ok(r == 0 && df.n == 3, "escape directive (%s)", err ? err->msg : "");
  if (r < 0)
    return;
  tap_ok(df.escape == '`', "escape is backtick");
  tap_is_str(df.v[1].args, "c:\\dir\\ /x", "backslash is ordinary with escape=`");
  tap_is_str(df.v[2].args, "echo a     b", "backtick continues the line");
  agsx_dockerfile_clear(&df);
  /* A directive after an instruction is a comment. */
  r = parse("FROM scratch\n# escape=`\nRUN a \\\n b\n", &df, &err);
  tap_ok(r == 0 && df.n == 2 && df.escape == '\\', "late directive is a comment");
  if (r == 0)
    agsx_dockerfile_clear(&df);
  /* A comment ends the directives. */
  r = parse("# hello\n# escape=`\nFROM scratch\n", &df, &err);
  tap_ok(r == 0 && df.escape == '\\', "directive after a comment is a comment");
  if (r == 0)
    agsx_dockerfile_clear(&df);
}

static void test_errors(void) {
  bad("FROM scratch\nFOO bar\n", "Dockerfile:2: unknown instruction \"FOO\"");
  bad("FROM scratch\n\n\n\n\n\nFOO bar\n", "Dockerfile:7: unknown instruction");
  bad("RUN x\n", "Dockerfile:1: the first instruction must be FROM");
  bad("", "no instructions");
  bad("# just a comment\n\n", "no instructions");
  bad("FROM scratch\nCMD [\"a\", b]\n", "Dockerfile:2: CMD: invalid JSON array");
  bad("FROM scratch\nCMD [\"a\", 1]\n", "element 1 is not a string");
  bad("FROM scratch\nSHELL /bin/bash -c\n", "SHELL needs a JSON array");
  bad("FROM scratch\nRUN <<EOF\necho\nEOF\n", "Dockerfile:2: heredocs");
  bad("FROM scratch\nCOPY <<-\"EOF\" /x\nEOF\n", "heredocs");
  bad("FROM scratch\nCOPY --bogus=1 a b\n", "unknown flag --bogus for COPY");
  bad("FROM scratch\nCOPY --from a b\n", "--from needs a value");
  bad("FROM scratch\nRUN --mount=type=cache,target=/x true\n", "RUN --mount is not supported");
  bad("FROM scratch\nWORKDIR\n", "Dockerfile:2: WORKDIR needs an argument");
  bad("FROM scratch\nHEALTHCHECK CMD true\n", "HEALTHCHECK is not supported");
  bad("# escape=x\nFROM scratch\n", "invalid escape character");
  bad("# escape=`\n# escape=\\\nFROM scratch\n", "given twice");
  struct agsx_dockerfile df;
  agsx_error_t err = NULL;
  tap_ok(agsx_dockerfile_parse("FROM x\0", 7, &df, &err) < 0 && strstr(err->msg, "NUL"),
         "NUL byte refused");
  agsx_error_free(&err);
}

static void test_json_fallback(void) {
  struct agsx_dockerfile df;
  agsx_error_t err = NULL;
  int r = parse("FROM scratch\nRUN echo [a]\nCMD echo \"x\"\nEXPOSE [80]\n", &df, &err);
  tap_ok(r == 0 && !df.v[1].json && !df.v[2].json, "shell form stays shell form");
  tap_ok(r == 0 && !df.v[3].json, "EXPOSE has no JSON form");
  if (r == 0)
    agsx_dockerfile_clear(&df);
  agsx_error_free(&err);
}

static void test_words(void) {
  word("$A", "a");
  word("${A}", "a");
  word("x${A}y", "xay");
  word("$UNSET", "");
  word("${UNSET:-def}", "def");
  word("${EMPTY:-def}", "def");
  word("${EMPTY-def}", "");
  word("${A:-def}", "a");
  word("${A:+alt}", "alt");
  word("${UNSET:+alt}", "");
  word("${UNSET:-${A}b}", "ab");
  word("'$A'", "$A");
  word("\"$A\"", "a");
  word("\\$A", "$A");
  word("a\\ b", "a b");
  word("$", "$");
  word("$1", "$1");
  word("\"a\\nb\"", "a\\nb");
  words("a b  c", "[a],[b],[c]");
  words("\"a b\" 'c d'", "[a b],[c d]");
  words("k=\"x y\" z=$A", "[k=x y],[z=a]");
  words("x=$SP", "[x=x y]");
  words("\"\" a", "[],[a]");
  bad_word("${A", "missing '}'");
  bad_word("${A:x}", "unsupported modifier");
  bad_word("${}", "bad substitution");
  bad_word("${UNSET:?needs a value}", "needs a value");
  bad_word("\"abc", "unterminated double quote");
  bad_word("'abc", "unterminated single quote");
}

static void ignored(const char *patterns, const char *path, bool want) {
  struct agsx_dockerignore di;
  agsx_error_t err = NULL;
  int r = agsx_dockerignore_parse(patterns, strlen(patterns), &di, &err);
  bool got = r == 0 && agsx_dockerignore_excluded(&di, path);
  tap_ok(r == 0 && got == want, "ignore `%s` with [%s]: %s", path, patterns,
         want ? "excluded" : "kept");
  agsx_dockerignore_clear(&di);
  agsx_error_free(&err);
}

static void test_dockerignore(void) {
  ignored("*.log", "a.log", true);
  ignored("*.log", "dir/a.log", false);
  ignored("**/*.log", "dir/sub/a.log", true);
  ignored("**/*.log", "a.log", true);
  ignored("dir", "dir/sub/file", true);
  ignored("/dir/", "dir/file", true);
  ignored("./dir/../other", "other/x", true);
  ignored("dir/**", "dir/a/b", true);
  ignored("dir/**", "dirx/a", false);
  ignored("*\n!keep.txt", "keep.txt", false);
  ignored("*\n!keep.txt", "other.txt", true);
  ignored("!keep.txt\n*", "keep.txt", true);
  ignored("docs\n!docs/README.md", "docs/README.md", false);
  ignored("docs\n!docs/README.md", "docs/other.md", true);
  ignored("# comment\n\n  \na?c", "abc", true);
  ignored("a[0-9]", "a5", true);
  ignored("a[0-9]", "ab", false);
  ignored("**", "anything/at/all", true);
  ignored("a/**/b", "a/b", true);
  ignored("a/**/b", "a/x/y/b", true);
  ignored("a/**/b", "a/x/y/c", false);
  ignored("**/**/**/**/**/**/**/**/**/**/**/**/**/**/z", "a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q",
          false);
}

int main(void) {
  test_basic();
  test_escape();
  test_errors();
  test_json_fallback();
  test_words();
  test_dockerignore();
  return tap_done();
}
