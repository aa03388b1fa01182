/* agsx cp: copy files and directory trees between the host and a running
 * sandbox; `-` is a tar stream on stdin (as SRC) or stdout (as DST). */
#include "config.h"

#include "cmd.h"
#include "sandbox/copy.h"
#include "state/state.h"

#include <fcntl.h>
#include <string.h>

static int on_cp_opt(void *data, int id, const char *arg) {
  unsigned *flags = data;
  (void)arg;
  if (id == O_ARCHIVE)
    *flags |= AGSX_COPY_ARCHIVE;
  else if (id == O_FOLLOW_LINK)
    *flags |= AGSX_COPY_FOLLOW;
  return 0;
}

/* Docker's rule: SANDBOX:PATH has a colon before any slash (a host path
 * with a colon is written ./a:b or /abs/a:b). */
static char *sandbox_part(const char *arg, const char **ret_path) {
  const char *colon = strchr(arg, ':');
  if (colon == NULL || colon == arg || memchr(arg, '/', (size_t)(colon - arg)))
    return NULL;
  *ret_path = colon + 1;
  return xstrndup(arg, (size_t)(colon - arg));
}

static int open_sandbox(struct agsx_ctx *ctx, const char *name, struct agsx_copy_sandbox *ret,
                        agsx_error_t *err) {
  struct agsx_record rec;
  if (agsx_state_lookup(ctx->state, name, &rec, err) < 0)
    return -1;
  ret->uid_base = rec.uid_base;
  ret->rootfd = agsx_copy_open_root(&rec, err);
  agsx_record_clear(&rec);
  return ret->rootfd < 0 ? -1 : 0;
}

static int cp_fail(agsx_error_t *err) {
  agsx_error_wrap(err, "cp");
  return agsx_fail(err);
}

int agsx_cmd_cp(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  unsigned flags = 0;
  int i = agsx_parse_options(cmd, argc, argv, on_cp_opt, &flags);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (argc - i != 2)
    return agsx_failf("cp: expected SRC and DST (see agsx cp --help)");
  const char *src = argv[i], *dst = argv[i + 1], *spath = NULL, *dpath = NULL;
  _cleanup_free_ char *ssb = sandbox_part(src, &spath), *dsb = sandbox_part(dst, &dpath);
  if ((ssb != NULL) == (dsb != NULL))
    return agsx_failf("cp: exactly one of SRC and DST must be SANDBOX:PATH");
  if ((ssb && strcmp(dst, "-") != 0 && *dst == '\0') || (dsb && *src == '\0'))
    return agsx_failf("cp: empty host path");
  agsx_error_t err = NULL;
  struct agsx_copy_sandbox sb = {.rootfd = -1};
  if (open_sandbox(ctx, ssb ? ssb : dsb, &sb, &err) < 0)
    return cp_fail(&err);
  /* The sandbox's root fd is ours to close, whatever happens below. */
  _cleanup_close_ int rootfd = sb.rootfd;
  (void)rootfd;
  int r;
  if (dsb && strcmp(src, "-") == 0)
    r = agsx_copy_in_tar(&sb, STDIN_FILENO, dpath, flags, &err);
  else if (dsb)
    r = agsx_copy_in(&sb, src, dpath, flags, &err);
  else if (strcmp(dst, "-") == 0)
    r = agsx_copy_out_tar(&sb, spath, STDOUT_FILENO, flags, &err);
  else
    r = agsx_copy_out(&sb, spath, dst, flags, &err);
  return r < 0 ? cp_fail(&err) : 0;
}
