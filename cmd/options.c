/* agsx CLI: option parsing and help, driven by the option tables. */
#include "config.h"

#include "cmd.h"

#include <string.h>

int agsx_failf(const char *fmt, ...) {
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  fflush(stdout);
  dprintf(STDERR_FILENO, "agsx: %s\n", buf);
  return AGSX_EXIT_FAILURE;
}

int agsx_fail(agsx_error_t *err) {
  int r = agsx_failf("%s", err && *err ? (*err)->msg : "unknown error");
  agsx_error_free(err);
  return r;
}

static const struct agsx_option *find_long(const struct agsx_option *opts, const char *name,
                                           size_t len) {
  for (const struct agsx_option *o = opts; o && o->long_name; o++)
    if (strlen(o->long_name) == len && strncmp(o->long_name, name, len) == 0)
      return o;
  return NULL;
}

static const struct agsx_option *find_short(const struct agsx_option *opts, char c) {
  for (const struct agsx_option *o = opts; o && o->long_name; o++)
    if (o->short_name == c)
      return o;
  return NULL;
}

static void help_exit(const struct agsx_command *cmd) {
  agsx_print_command_help(cmd, stdout);
  fflush(stdout);
  exit(0);
}

/* Handles one "--name[=value]" argument; returns how many argv it used. */
static int parse_long(const struct agsx_command *cmd, int argc, char **argv, int i,
                      agsx_opt_fn on_opt, void *data) {
  const char *name = argv[i] + 2;
  const char *eq = strchr(name, '=');
  size_t len = eq ? (size_t)(eq - name) : strlen(name);
  if (len == 4 && strncmp(name, "help", 4) == 0)
    help_exit(cmd);
  const struct agsx_option *o = find_long(cmd->options, name, len);
  if (o == NULL)
    return agsx_failf("%s: unknown option `--%.*s` (see agsx %s --help)", cmd->name, (int)len, name,
                      cmd->name),
           -1;
  if (o->arg == NULL) {
    if (eq)
      return agsx_failf("%s: option `--%s` takes no value", cmd->name, o->long_name), -1;
    return on_opt(data, o->id, NULL) < 0 ? -1 : 1;
  }
  if (eq)
    return on_opt(data, o->id, eq + 1) < 0 ? -1 : 1;
  if (i + 1 >= argc)
    return agsx_failf("%s: option `--%s` needs a value (%s)", cmd->name, o->long_name, o->arg), -1;
  return on_opt(data, o->id, argv[i + 1]) < 0 ? -1 : 2;
}

/* Handles a cluster of short options ("-it", "-tfoo", "-t foo"). */
static int parse_short(const struct agsx_command *cmd, int argc, char **argv, int i,
                       agsx_opt_fn on_opt, void *data) {
  for (const char *p = argv[i] + 1; *p; p++) {
    if (*p == 'h')
      help_exit(cmd);
    const struct agsx_option *o = find_short(cmd->options, *p);
    if (o == NULL)
      return agsx_failf("%s: unknown option `-%c` (see agsx %s --help)", cmd->name, *p, cmd->name),
             -1;
    if (o->arg == NULL) {
      if (on_opt(data, o->id, NULL) < 0)
        return -1;
      continue;
    }
    if (p[1])
      return on_opt(data, o->id, p + 1) < 0 ? -1 : 1;
    if (i + 1 >= argc)
      return agsx_failf("%s: option `-%c` needs a value (%s)", cmd->name, *p, o->arg), -1;
    return on_opt(data, o->id, argv[i + 1]) < 0 ? -1 : 2;
  }
  return 1;
}

int agsx_parse_options(const struct agsx_command *cmd, int argc, char **argv, agsx_opt_fn on_opt,
                       void *data) {
  int i = 1;
  while (i < argc) {
    const char *a = argv[i];
    int used;
    if (strcmp(a, "--") == 0)
      return i + 1;
    if (a[0] != '-' || a[1] == '\0')
      return i; /* first operand ("-" is an operand: stdin) */
    if (a[1] == '-')
      used = parse_long(cmd, argc, argv, i, on_opt, data);
    else
      used = parse_short(cmd, argc, argv, i, on_opt, data);
    if (used < 0)
      return -1;
    i += used;
  }
  return i;
}

static void print_options(const struct agsx_option *opts, FILE *out) {
  for (const struct agsx_option *o = opts; o && o->long_name; o++) {
    char left[80], shortpart[8] = "    ";
    if (o->short_name)
      snprintf(shortpart, sizeof(shortpart), "-%c, ", o->short_name);
    snprintf(left, sizeof(left), "%s--%s%s%s", shortpart, o->long_name, o->arg ? " " : "",
             o->arg ? o->arg : "");
    fprintf(out, "  %-28s %s\n", left, o->help);
  }
}

void agsx_print_command_help(const struct agsx_command *cmd, FILE *out) {
  fprintf(out, "Usage: agsx %s %s\n\n%s\n", cmd->name, cmd->usage, cmd->summary);
  if (cmd->alias_of)
    fprintf(out, "(An alias of `agsx %s`.)\n", cmd->alias_of);
  if (cmd->run == agsx_cmd_not_yet)
    fprintf(out, "\nNot implemented yet: this command exits with status 125.\n");
  if (cmd->notes)
    fprintf(out, "\n%s", cmd->notes);
  fprintf(out, "\nOptions:\n");
  print_options(cmd->options, out);
  fprintf(out, "  %-28s %s\n", "-h, --help", "Show this help");
}

void agsx_print_main_help(FILE *out) {
  fprintf(out, "Usage: agsx [GLOBAL OPTIONS] COMMAND [ARGS...]\n\n"
               "Run untrusted code in isolated, time-limited sandboxes built from OCI images.\n\n"
               "Commands:\n");
  for (const struct agsx_command *c = agsx_commands; c->name; c++)
    fprintf(out, "  %-16s %s%s\n", c->name, c->summary,
            c->run == agsx_cmd_not_yet ? " (not implemented yet)" : "");
  fprintf(out, "\nGlobal options:\n");
  print_options(agsx_global_options, out);
  fprintf(out, "  %-28s %s\n", "-h, --help", "Show this help");
  fprintf(out, "  %-28s %s\n", "    --version", "Print the version");
  fprintf(out, "\nRun `agsx COMMAND --help` for a command's options; man agsx-COMMAND for more.\n");
}
