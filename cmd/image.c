/* agsx image ls | load | rm | inspect | tag | save, and agsx gc. */
#include "config.h"

#include "cmd.h"
#include "image/export.h"
#include "image/import.h"
#include "state/state.h"
#include "image/store.h"

#include <string.h>
#include <time.h>

struct flags {
  bool quiet, digests, json, dry_run, images;
  const char *tag;
  const char *output, *format;
};

static int on_opt(void *data, int id, const char *arg) {
  struct flags *f = data;
  switch (id) {
  case O_QUIET: f->quiet = true; break;
  case O_DIGESTS: f->digests = true; break;
  case O_JSON: f->json = true; break;
  case O_DRY_RUN: f->dry_run = true; break;
  case O_IMAGES: f->images = true; break;
  case O_TAG: f->tag = arg; break;
  case O_OUTPUT: f->output = arg; break;
  case O_FORMAT: f->format = arg; break;
  }
  return 0;
}

static int parse(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv,
                 struct flags *f) {
  memset(f, 0, sizeof(*f));
  f->json = ctx->json;
  return agsx_parse_options(cmd, argc, argv, on_opt, f);
}

static void print_json(yajl_gen g) {
  size_t len;
  _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
  fwrite(s, 1, len, stdout);
  fputc('\n', stdout);
}

/* ---- image ls ---- */

struct row {
  char *ref, *name, *tag, *created;
  char digest[AGSX_DIGEST_LEN];
  int64_t size, created_sec;
};

/* Reads the manifest and config of an image for its size and age. A
 * damaged image is still listed, with what is known. */
static void describe(struct agsx_store *s, const struct agsx_store_image *img, struct row *r) {
  memcpy(r->digest, img->manifest.digest, AGSX_DIGEST_LEN);
  r->ref = img->ref ? xstrdup(img->ref) : NULL;
  const char *at = img->ref ? strchr(img->ref, '@') : NULL;
  if (at) {
    /* "name@sha256:…" (pulled by digest): a name without a tag, as docker */
    r->name = xstrndup(img->ref, (size_t)(at - img->ref));
    char *slash = strrchr(r->name, '/');
    char *colon = strrchr(slash ? slash : r->name, ':');
    if (colon) {
      r->tag = xstrdup(colon + 1);
      *colon = '\0';
    }
  } else if (img->ref) {
    const char *slash = strrchr(img->ref, '/');
    const char *colon = strrchr(slash ? slash : img->ref, ':');
    r->name = colon ? xstrndup(img->ref, (size_t)(colon - img->ref)) : xstrdup(img->ref);
    r->tag = xstrdup(colon ? colon + 1 : "latest");
  }
  _cleanup_free_ char *mbuf = NULL, *cbuf = NULL;
  size_t len;
  struct agsx_manifest m;
  if (agsx_store_read_blob(s, img->manifest.digest, AGSX_IMAGE_JSON_MAX, &mbuf, &len, NULL) < 0 ||
      agsx_manifest_parse(mbuf, len, &m, NULL) < 0)
    return;
  r->size = m.config.size;
  for (size_t i = 0; i < m.n_layers; i++)
    r->size += m.layers[i].size;
  struct agsx_image_config c;
  if (agsx_store_read_blob(s, m.config.digest, AGSX_IMAGE_JSON_MAX, &cbuf, &len, NULL) == 0 &&
      agsx_image_config_parse(cbuf, len, &c, NULL) == 0) {
    /* The Unix epoch is what reproducible builds write for "no date"
     * (SOURCE_DATE_EPOCH=0): shown as none, N/A, as Docker does. */
    if (c.created && agsx_parse_rfc3339(c.created, &r->created_sec) == 0 && r->created_sec > 0)
      r->created = agsx_format_rfc3339(r->created_sec);
    agsx_image_config_clear(&c);
  }
  agsx_manifest_clear(&m);
}

static char *ago(int64_t sec) {
  int64_t d = agsx_now_ns() / 1000000000LL - sec;
  if (d < 0)
    d = 0;
  if (d < 60)
    return xasprintf("%lld seconds ago", (long long)d);
  if (d < 3600)
    return xasprintf("%lld minutes ago", (long long)(d / 60));
  if (d < 2 * 86400)
    return xasprintf("%lld hours ago", (long long)(d / 3600));
  if (d < 60 * 86400)
    return xasprintf("%lld days ago", (long long)(d / 86400));
  if (d < 730 * 86400)
    return xasprintf("%lld months ago", (long long)(d / (30 * 86400)));
  return xasprintf("%lld years ago", (long long)(d / (365 * 86400)));
}

static void rows_json(const struct row *rows, size_t n) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_array_open(g);
  for (size_t i = 0; i < n; i++) {
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "ref", rows[i].ref);
    agsx_json_kv_str(g, "name", rows[i].name);
    agsx_json_kv_str(g, "tag", rows[i].tag);
    agsx_json_kv_str(g, "id", agsx_digest_hex(rows[i].digest));
    agsx_json_kv_str(g, "digest", rows[i].digest);
    agsx_json_kv_int(g, "size", rows[i].size);
    agsx_json_kv_str(g, "created", rows[i].created);
    yajl_gen_map_close(g);
  }
  yajl_gen_array_close(g);
  print_json(g);
}

static void rows_table(const struct row *rows, size_t n, const struct flags *f) {
  if (!f->quiet)
    printf("%-40s %-16s %-*s %-16s %s\n", "REPOSITORY", "TAG", f->digests ? 71 : 12,
           f->digests ? "DIGEST" : "IMAGE ID", "CREATED", "SIZE");
  for (size_t i = 0; i < n; i++) {
    const char *hex = agsx_digest_hex(rows[i].digest);
    if (f->quiet) {
      printf("%.12s\n", hex);
      continue;
    }
    _cleanup_free_ char *size = agsx_format_size((uint64_t)rows[i].size);
    _cleanup_free_ char *age = rows[i].created ? ago(rows[i].created_sec) : xstrdup("N/A");
    printf("%-40s %-16s %-*.*s %-16s %s\n", rows[i].name ? rows[i].name : "<none>",
           rows[i].tag ? rows[i].tag : "<none>", f->digests ? 71 : 12, f->digests ? 71 : 12,
           f->digests ? rows[i].digest : hex, age, size);
  }
}

static int cmp_rows(const void *a, const void *b) {
  const struct row *x = a, *y = b;
  return strcmp(x->ref ? x->ref : "~", y->ref ? y->ref : "~");
}

int agsx_cmd_image_ls(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  struct flags f;
  int i = parse(ctx, cmd, argc, argv, &f);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i < argc)
    return agsx_failf("image ls: unexpected argument `%s`", argv[i]);
  agsx_error_t err = NULL;
  _cleanup_store_ struct agsx_store *s = NULL;
  /* Listing never creates a store (completions call it). */
  if (agsx_store_open(ctx->root, false, &s, &err) < 0) {
    if (agsx_error_errno(&err) != ENOENT)
      return agsx_fail(&err);
    agsx_error_free(&err);
    if (f.json)
      printf("[]\n");
    else
      rows_table(NULL, 0, &f);
    return 0;
  }
  struct agsx_store_image *imgs = NULL;
  size_t n = 0;
  if (agsx_store_list(s, &imgs, &n, &err) < 0)
    return agsx_fail(&err);
  struct row *rows = xzalloc((n + 1) * sizeof(*rows));
  for (size_t k = 0; k < n; k++)
    describe(s, &imgs[k], &rows[k]);
  qsort(rows, n, sizeof(*rows), cmp_rows);
  if (f.json)
    rows_json(rows, n);
  else
    rows_table(rows, n, &f);
  for (size_t k = 0; k < n; k++) {
    free(rows[k].ref);
    free(rows[k].name);
    free(rows[k].tag);
    free(rows[k].created);
  }
  free(rows);
  agsx_store_images_free(imgs, n);
  return 0;
}

/* ---- image load ---- */

struct load_out {
  struct flags *f;
  yajl_gen g;
};

static void on_loaded(const struct agsx_loaded_image *img, void *data) {
  struct load_out *o = data;
  if (o->f->json) {
    yajl_gen_map_open(o->g);
    agsx_json_kv_str(o->g, "ref", img->ref);
    agsx_json_kv_str(o->g, "digest", img->digest);
    yajl_gen_map_close(o->g);
  } else if (!o->f->quiet) {
    if (img->ref)
      printf("Loaded image: %s\n", img->ref);
    else
      printf("Loaded image ID: %s\n", img->digest);
  }
}

int agsx_cmd_image_load(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc,
                        char **argv) {
  struct flags f;
  int i = parse(ctx, cmd, argc, argv, &f);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i != argc - 1)
    return agsx_failf("%s: expected one PATH, or - for standard input (see agsx %s --help)",
                      cmd->name, cmd->name);
  if (strcmp(argv[i], "-") == 0 && isatty(STDIN_FILENO))
    return agsx_failf("%s: refusing to read an image archive from a terminal (pipe one in)",
                      cmd->name);
  agsx_error_t err = NULL;
  _cleanup_free_ char *tag = NULL;
  if (f.tag && (tag = agsx_image_ref_normalize(f.tag, &err)) == NULL)
    return agsx_fail(&err);
  if (tag && strchr(tag, '@'))
    return agsx_failf("%s: --tag takes NAME[:TAG], not a digest", cmd->name);
  _cleanup_store_ struct agsx_store *s = NULL;
  if (agsx_store_open(ctx->root, true, &s, &err) < 0)
    return agsx_fail(&err);
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  struct load_out out = {&f, g};
  struct agsx_import_opts opts = {.tag = tag, .loaded = on_loaded, .data = &out};
  yajl_gen_array_open(g);
  if (agsx_import(s, argv[i], &opts, &err) < 0)
    return agsx_fail(&err);
  yajl_gen_array_close(g);
  if (f.json)
    print_json(g);
  return 0;
}

/* ---- image rm ---- */

static void report_quiet(const char *what, void *data) {
  (void)data;
  agsx_debug("removed %s", what);
}

int agsx_cmd_image_rm(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  struct flags f;
  int i = parse(ctx, cmd, argc, argv, &f);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i >= argc)
    return agsx_failf("image rm: expected at least one IMAGE");
  agsx_error_t err = NULL;
  _cleanup_store_ struct agsx_store *s = NULL;
  if (agsx_store_open(ctx->root, true, &s, &err) < 0)
    return agsx_fail(&err);
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_array_open(g);
  int rc = 0;
  for (; i < argc; i++) {
    if (agsx_store_remove(s, argv[i], &err) < 0) {
      rc = agsx_fail(&err);
      continue;
    }
    if (f.json)
      agsx_json_str(g, argv[i]);
    else
      printf("Untagged: %s\n", argv[i]);
  }
  yajl_gen_array_close(g);
  /* Content no image names any more goes with it, as with docker rmi —
   * except what running sandboxes use: it stays until they end. */
  _cleanup_strv_ char **inuse = agsx_state_running_images(ctx->state);
  if (agsx_store_gc(s, inuse, false, report_quiet, NULL, &err) < 0)
    rc = agsx_fail(&err);
  if (f.json)
    print_json(g);
  return rc;
}

/* ---- image inspect ---- */

static int inspect_one(struct agsx_store *s, const char *name, yajl_gen g, agsx_error_t *err) {
  struct agsx_store_image img = {0};
  if (agsx_store_resolve(s, name, &img, err) < 0)
    return -1;
  _cleanup_free_ char *mbuf = NULL, *cbuf = NULL;
  size_t mlen, clen;
  struct agsx_manifest m = {0};
  int r = agsx_store_read_blob(s, img.manifest.digest, AGSX_IMAGE_JSON_MAX, &mbuf, &mlen, err);
  if (r == 0)
    r = agsx_manifest_parse(mbuf, mlen, &m, err);
  if (r == 0)
    r = agsx_store_read_blob(s, m.config.digest, AGSX_IMAGE_JSON_MAX, &cbuf, &clen, err);
  if (r == 0) {
    _cleanup_json_ yajl_val mv = agsx_json_parse(mbuf, mlen, AGSX_IMAGE_JSON_MAX, NULL);
    _cleanup_json_ yajl_val cv = agsx_json_parse(cbuf, clen, AGSX_IMAGE_JSON_MAX, NULL);
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "ref", img.ref);
    agsx_json_kv_str(g, "id", agsx_digest_hex(img.manifest.digest));
    agsx_json_kv_str(g, "digest", img.manifest.digest);
    agsx_json_key(g, "manifest");
    agsx_json_value(g, mv);
    agsx_json_key(g, "config");
    agsx_json_value(g, cv);
    yajl_gen_map_close(g);
  }
  agsx_manifest_clear(&m);
  free(img.ref);
  agsx_descriptor_clear(&img.manifest);
  return r;
}

int agsx_cmd_image_inspect(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc,
                           char **argv) {
  struct flags f;
  int i = parse(ctx, cmd, argc, argv, &f);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i >= argc)
    return agsx_failf("image inspect: expected at least one IMAGE");
  agsx_error_t err = NULL;
  _cleanup_store_ struct agsx_store *s = NULL;
  if (agsx_store_open(ctx->root, false, &s, &err) < 0) {
    if (agsx_error_errno(&err) != ENOENT)
      return agsx_fail(&err);
    agsx_error_free(&err);
    return agsx_failf("image `%s` not found", argv[i]);
  }
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(true);
  yajl_gen_array_open(g);
  for (; i < argc; i++)
    if (inspect_one(s, argv[i], g, &err) < 0)
      return agsx_fail(&err);
  yajl_gen_array_close(g);
  print_json(g);
  return 0;
}

/* Opens an existing store for reading content out: no store, no image. */
static int open_existing(struct agsx_ctx *ctx, const char *image, struct agsx_store **ret) {
  agsx_error_t err = NULL;
  if (agsx_store_open(ctx->root, false, ret, &err) < 0) {
    if (agsx_error_errno(&err) != ENOENT)
      return agsx_fail(&err);
    agsx_error_free(&err);
    return agsx_failf("image `%s` not found", image);
  }
  if (agsx_store_hold(*ret, &err) < 0)
    return agsx_fail(&err);
  return 0;
}

/* ---- image tag ---- */

int agsx_cmd_image_tag(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc,
                       char **argv) {
  struct flags f;
  int i = parse(ctx, cmd, argc, argv, &f);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (argc - i != 2)
    return agsx_failf("image tag: expected SOURCE and TARGET (see agsx image tag --help)");
  _cleanup_store_ struct agsx_store *s = NULL;
  if (open_existing(ctx, argv[i], &s) != 0)
    return AGSX_EXIT_FAILURE;
  agsx_error_t err = NULL;
  if (agsx_store_tag_image(s, argv[i], argv[i + 1], NULL, &err) < 0)
    return agsx_fail(&err);
  return 0;
}

/* ---- image save ---- */

int agsx_cmd_image_save(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc,
                        char **argv) {
  struct flags f;
  int i = parse(ctx, cmd, argc, argv, &f);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i >= argc)
    return agsx_failf("image save: expected at least one IMAGE");
  /* Options end at the first IMAGE; say so rather than look `-o` up. */
  for (int k = i; k < argc; k++)
    if (argv[k][0] == '-')
      return agsx_failf("image save: options go before the images (`%s`)", argv[k]);
  agsx_error_t err = NULL;
  enum agsx_export_format format = AGSX_EXPORT_OCI_ARCHIVE;
  if (f.format && agsx_export_format_parse(f.format, &format, &err) < 0)
    return agsx_fail(&err);
  if (f.output == NULL && isatty(STDOUT_FILENO))
    return agsx_failf("image save: refusing to write an image archive to a terminal (use -o FILE "
                      "or redirect the output)");
  _cleanup_store_ struct agsx_store *s = NULL;
  if (open_existing(ctx, argv[i], &s) != 0)
    return AGSX_EXIT_FAILURE;
  size_t n = (size_t)(argc - i);
  int r = f.output ? agsx_export_file(s, argv + i, n, format, f.output, &err)
                   : agsx_export_fd(s, argv + i, n, format, STDOUT_FILENO, &err);
  if (r < 0)
    return agsx_fail(&err);
  return 0;
}
