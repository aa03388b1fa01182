/* agsx image pull (and its alias agsx pull), agsx image push. */
#include "config.h"

#include "cmd.h"
#include "util/json.h"
#include "image/registry/registry.h"

#include <string.h>

struct pull_flags {
  bool quiet, json, insecure;
  const char *authfile;
};

static int on_opt(void *data, int id, const char *arg) {
  struct pull_flags *f = data;
  switch (id) {
  case O_QUIET: f->quiet = true; break;
  case O_JSON: f->json = true; break;
  case O_INSECURE: f->insecure = true; break;
  case O_AUTHFILE: f->authfile = arg; break;
  }
  return 0;
}

/* One status line, redrawn in place (stderr is a terminal). */
static void progress(const struct agsx_pull_progress *p, void *data) {
  (void)data;
  _cleanup_free_ char *done = agsx_format_size((uint64_t)p->bytes_done);
  _cleanup_free_ char *total = agsx_format_size((uint64_t)p->bytes_total);
  fprintf(stderr, "\r\033[Klayers %zu/%zu", p->layers_done, p->layers_total);
  if (p->layers_skipped)
    fprintf(stderr, " (%zu already present)", p->layers_skipped);
  if (p->bytes_total > 0)
    fprintf(stderr, "  %s / %s (%d%%)", done, total, (int)(p->bytes_done * 100 / p->bytes_total));
  fflush(stderr);
}

int agsx_cmd_image_pull(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc,
                        char **argv) {
  struct pull_flags f = {.json = ctx->json};
  int i = agsx_parse_options(cmd, argc, argv, on_opt, &f);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (argc - i != 1)
    return agsx_failf("usage: agsx %s %s", cmd->name, cmd->usage);
  bool tty = !f.quiet && !f.json && isatty(STDERR_FILENO);
  struct agsx_pull_opts o = {
      .authfile = f.authfile, .insecure = f.insecure, .progress = tty ? progress : NULL};
  struct agsx_pull_result res;
  agsx_error_t err = NULL;
  int r = agsx_pull(ctx->root, argv[i], &o, &res, &err);
  if (tty)
    fputs("\r\033[K", stderr);
  if (r < 0)
    return agsx_fail(&err);
  if (f.json) {
    _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "name", res.name);
    agsx_json_kv_str(g, "ref", res.ref);
    agsx_json_kv_str(g, "digest", res.digest);
    agsx_json_kv_str(g, "id", agsx_digest_hex(res.manifest_digest));
    yajl_gen_map_close(g);
    size_t len;
    _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
    printf("%s\n", s);
  } else if (f.quiet) {
    printf("%s\n", res.name);
  } else {
    printf("Digest: %s\n%s\n", res.digest, res.name);
  }
  agsx_pull_result_clear(&res);
  return 0;
}

/* agsx image push IMAGE [DEST]: DEST defaults to IMAGE's own name, which
 * then names the registry (docker push's form); a DEST pushes the image
 * under another name without tagging it locally first (podman's). */
int agsx_cmd_image_push(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc,
                        char **argv) {
  struct pull_flags f = {.json = ctx->json};
  int i = agsx_parse_options(cmd, argc, argv, on_opt, &f);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (argc - i != 1 && argc - i != 2)
    return agsx_failf("usage: agsx %s %s", cmd->name, cmd->usage);
  struct agsx_push_opts o = {.authfile = f.authfile, .insecure = f.insecure};
  struct agsx_push_result res;
  agsx_error_t err = NULL;
  if (agsx_push(ctx->root, argv[i], argc - i == 2 ? argv[i + 1] : NULL, &o, &res, &err) < 0)
    return agsx_fail(&err);
  if (f.json) {
    _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "ref", res.name);
    agsx_json_kv_str(g, "digest", res.digest);
    yajl_gen_map_close(g);
    size_t len;
    _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
    printf("%s\n", s);
  } else if (f.quiet) {
    printf("%s\n", res.name);
  } else {
    printf("Digest: %s\n%s\n", res.digest, res.name);
  }
  agsx_push_result_clear(&res);
  return 0;
}

/* The pull `run` does when the store lacks IMAGE: one line on stderr (and
 * progress on a terminal), nothing on stdout, which may be --json's. */
int agsx_cmd_pull_quietly(struct agsx_ctx *ctx, const char *image, agsx_error_t *err) {
  bool tty = isatty(STDERR_FILENO);
  fprintf(stderr, "agsx: image `%s` not found locally: pulling it\n", image);
  struct agsx_pull_opts o = {.progress = tty ? progress : NULL};
  struct agsx_pull_result res;
  int r = agsx_pull(ctx->root, image, &o, &res, err);
  if (tty)
    fprintf(stderr, "\r\033[K");
  if (r == 0)
    agsx_pull_result_clear(&res);
  return r;
}
