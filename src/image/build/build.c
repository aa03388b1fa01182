/* agsx — building images from Dockerfiles. See build.h. */
#include "config.h"

#include "image/build/build-internal.h"
#include "image/build/dockerfile.h"
#include "image/build/dockerignore.h"
#include "util/json.h"
#include "net/egress.h"
#include "net/net.h"
#include "net/network.h"
#include "image/registry/registry.h"
#include "net/relay.h"
#include "sandbox/lifecycle.h"
#include "sandbox/passwd.h"
#include "sandbox/sandbox.h"

#include <archive.h>
#include <ctype.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <poll.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <zlib.h>

#define TAIL_MAX 2048

/* ---- small string lists ------------------------------------------------------------------ */

/* Sets KEY=VALUE in a list of "K=V" strings, replacing an earlier KEY. */
static void kv_set(char ***v, const char *key, const char *value) {
  size_t kl = strlen(key);
  _cleanup_free_ char *e = xasprintf("%s=%s", key, value);
  for (size_t i = 0; *v && (*v)[i]; i++)
    if (strncmp((*v)[i], key, kl) == 0 && (*v)[i][kl] == '=') {
      free((*v)[i]);
      (*v)[i] = steal_ptr(&e);
      return;
    }
  agsx_strv_push(v, e);
}

static const char *kv_get(char *const *v, const char *key) {
  size_t kl = strlen(key);
  for (size_t i = 0; v && v[i]; i++)
    if (strncmp(v[i], key, kl) == 0 && v[i][kl] == '=')
      return v[i] + kl + 1;
  return NULL;
}

/* ---- stages ---------------------------------------------------------------------------------- */

void agsx_build_stage_clear(struct stage *st) {
  free(st->name);
  for (size_t i = 0; i < st->n_layers; i++)
    free(st->layers[i].media_type);
  free(st->layers);
  char **lists[] = {st->env,   st->cmd,     st->entrypoint, st->shell,  st->labels,
                    st->ports, st->volumes, st->args,       st->history};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(lists); i++)
    agsx_strv_free(lists[i]);
  free(st->user);
  free(st->workdir);
  free(st->stopsignal);
  if (st->base_history)
    yajl_tree_free(st->base_history);
  memset(st, 0, sizeof(*st));
}

/* A signal on the caller's cancel fd (SIGINT, SIGTERM...) stops the build;
 * everything made so far is removed like for any failure. */
static bool cancelled(struct build *b) {
  if (b->o->cancel_fd < 0)
    return false;
  struct pollfd p = {.fd = b->o->cancel_fd, .events = POLLIN};
  return poll(&p, 1, 0) == 1;
}

int agsx_build_line_err(struct build *b, agsx_error_t *err) {
  return agsx_error_wrap(err, "Dockerfile:%u", b->in->line);
}

void agsx_build_progress(struct build *b, const char *fmt, ...) {
  if (b->o->progress == NULL)
    return;
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  int n = vasprintf(&s, fmt, ap);
  va_end(ap);
  if (n >= 0)
    b->o->progress(s, (size_t)n, b->o->data);
  free(s);
}

/* "Step 3/9 (Dockerfile:4): COPY a /b" on the progress stream. */
void agsx_build_banner(struct build *b) {
  agsx_build_progress(b, "Step %zu/%zu (Dockerfile:%u): %s\n", (size_t)(b->in - b->df.v) + 1,
                      b->df.n, b->in->line, b->in->text);
}

/* The build argument NAME given on the command line, or NULL. */
static const char *build_arg(struct build *b, const char *name) {
  size_t kl = strlen(name);
  for (size_t i = 0; b->o->build_args && b->o->build_args[i]; i++) {
    const char *a = b->o->build_args[i];
    if (strncmp(a, name, kl) == 0 && a[kl] == '=')
      return a + kl + 1;
    if (strcmp(a, name) == 0)
      return getenv(name);
  }
  return NULL;
}

/* Variables for substitution: ENV wins over ARG (as in Docker). */
static const char *stage_lookup(const char *name, void *data) {
  struct build *b = data;
  const char *v = kv_get(b->cur->env, name);
  return v ? v : kv_get(b->cur->args, name);
}

static const char *meta_lookup(const char *name, void *data) {
  struct build *b = data;
  return kv_get(b->meta, name);
}

int agsx_build_expand_word(struct build *b, const char *s, char **ret, agsx_error_t *err) {
  if (agsx_df_expand_word(s, b->df.escape, stage_lookup, b, ret, err) < 0)
    return agsx_build_line_err(b, err);
  return 0;
}

int agsx_build_expand_words(struct build *b, const char *s, char ***ret, agsx_error_t *err) {
  if (agsx_df_expand_words(s, b->df.escape, stage_lookup, b, ret, err) < 0)
    return agsx_build_line_err(b, err);
  return 0;
}

/* The chain key: sha256 over the parent key and the step's description. */
void agsx_build_chain(struct stage *st, const char *what, size_t len) {
  _cleanup_sha256_ agsx_sha256 *h = agsx_sha256_new();
  agsx_sha256_update(h, st->chain, strlen(st->chain));
  agsx_sha256_update(h, "\n", 1);
  agsx_sha256_update(h, what, len);
  agsx_sha256_final(h, st->chain);
}

void agsx_build_history(struct stage *st, const char *created_by, bool empty) {
  _cleanup_free_ char *e = xasprintf("%c%s", empty ? '1' : '0', created_by);
  agsx_strv_push(&st->history, e);
}

/* ---- paths ------------------------------------------------------------------------------------ */

/* Cleans an absolute path into a relative one without "." or ".."
 * (".." at the root stays at the root, as in the image). "" is the root. */
char *agsx_build_clean_abs(const char *path) {
  char *out = xzalloc(strlen(path) + 1);
  size_t len = 0;
  const char *p = path;
  while (*p) {
    size_t k = strcspn(p, "/");
    if (k == 0 || (k == 1 && p[0] == '.')) {
    } else if (k == 2 && p[0] == '.' && p[1] == '.') {
      while (len && out[len - 1] != '/')
        len--;
      if (len)
        len--;
    } else {
      if (len)
        out[len++] = '/';
      memcpy(out + len, p, k);
      len += k;
    }
    p += k;
    if (*p == '/')
      p++;
  }
  out[len] = '\0';
  return out;
}

/* Joins PATH to the working directory when relative; returns a clean
 * relative path (from /). */
char *agsx_build_in_image_path(struct stage *st, const char *path) {
  _cleanup_free_ char *abs =
      path[0] == '/' ? xstrdup(path) : xasprintf("%s/%s", st->workdir ? st->workdir : "/", path);
  return agsx_build_clean_abs(abs);
}

static char *layer_path(struct build *b, const char *diff_id) {
  if (agsx_store_has_layer(b->s, diff_id))
    return xasprintf("%s/layers/%s", b->s->path, agsx_digest_hex(diff_id));
  return xasprintf("%s/tmp/%s/layers/%s", b->s->path, b->work, agsx_digest_hex(diff_id));
}

int agsx_build_open_layer(struct build *b, const char *diff_id, agsx_error_t *err) {
  _cleanup_free_ char *p = layer_path(b, diff_id);
  int fd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return agsx_error_set(err, errno, "layer `%s`", diff_id);
  return fd;
}

bool agsx_build_is_whiteout(const struct stat *st) {
  return S_ISCHR(st->st_mode) && st->st_rdev == makedev(0, 0);
}

/* Finds PATH (clean, relative) in the stage's layers, top-most first,
 * following symlinks inside each layer. Returns an O_PATH fd and the layer
 * index, or -1 (ENOENT) when no layer has it or a whiteout hides it. */
int agsx_build_lookup_in_layers_x(struct build *b, struct stage *st, const char *path, bool follow,
                                  int *ret_layerfd, agsx_error_t *err) {
  for (size_t i = st->n_layers; i-- > 0;) {
    _cleanup_close_ int lfd = agsx_build_open_layer(b, st->layers[i].diff_id, err);
    if (lfd < 0)
      return -1;
    int fd = *path ? agsx_open_in_root(lfd, path, O_PATH | O_NOFOLLOW, 0)
                   : fcntl(lfd, F_DUPFD_CLOEXEC, 3);
    if (fd < 0 && errno != ENOENT && errno != ENOTDIR)
      return agsx_error_set(err, errno, "`/%s`", path);
    if (fd < 0)
      continue;
    struct stat sb;
    if (fstat(fd, &sb) < 0 || agsx_build_is_whiteout(&sb)) {
      close(fd);
      break;
    }
    if (S_ISLNK(sb.st_mode) && follow) {
      /* A symlink that resolves nowhere in this layer: follow it by name. */
      close(fd);
      fd = agsx_open_in_root(lfd, path, O_PATH, 0);
      if (fd < 0)
        continue;
    }
    if (ret_layerfd)
      *ret_layerfd = steal_fd(&lfd);
    return fd;
  }
  return agsx_error_set_quiet(err, ENOENT, "`/%s` not found", path);
}

int agsx_build_lookup_in_layers(struct build *b, struct stage *st, const char *path,
                                int *ret_layerfd, agsx_error_t *err) {
  return agsx_build_lookup_in_layers_x(b, st, path, true, ret_layerfd, err);
}

/* Resolves the symlinks on the way to REL (clean, relative) in the stage's
 * merged tree, as Docker does for a destination: COPY x /lib/y writes
 * usr/lib/y where lib -> usr/lib. Missing components stay as given. */
char *agsx_build_resolve_dst(struct build *b, struct stage *st, const char *rel) {
  char *cur = xstrdup(rel);
  for (int loops = 0; loops < 40; loops++) {
    bool changed = false;
    for (size_t i = 0; cur[i] && !changed; i++) {
      size_t end = i + strcspn(cur + i, "/");
      _cleanup_free_ char *prefix = xstrndup(cur, end);
      agsx_error_t e = NULL;
      _cleanup_close_ int fd = agsx_build_lookup_in_layers_x(b, st, prefix, false, NULL, &e);
      agsx_error_free(&e);
      struct stat sb;
      if (fd < 0 || fstat(fd, &sb) < 0)
        break;
      if (S_ISLNK(sb.st_mode)) {
        char t[4096];
        ssize_t n = readlinkat(fd, "", t, sizeof(t) - 1);
        if (n <= 0)
          break;
        t[n] = '\0';
        char *slash = strrchr(prefix, '/');
        if (slash)
          *slash = '\0';
        _cleanup_free_ char *joined =
            t[0] == '/' ? xasprintf("%s%s", t, cur + end)
                        : xasprintf("/%s/%s%s", slash ? prefix : "", t, cur + end);
        free(cur);
        cur = agsx_build_clean_abs(joined);
        changed = true;
        break;
      }
      i = end;
      if (cur[i] == '\0')
        break;
    }
    if (!changed)
      return cur;
  }
  return cur;
}

/* A file of the stage's image, such as etc/passwd: absent is not an error
 * (NULL, 0), anything but a regular file of at most AGSX_PASSWD_MAX bytes
 * is. The image is untrusted: its etc/passwd may be a FIFO that would block
 * the open forever, a device, or gigabytes. */
int agsx_build_read_from_layers(struct build *b, struct stage *st, const char *path, char **ret_buf,
                                size_t *ret_len, agsx_error_t *err) {
  agsx_error_t e = NULL;
  _cleanup_close_ int fd = agsx_build_lookup_in_layers(b, st, path, NULL, &e);
  *ret_buf = NULL;
  *ret_len = 0;
  if (fd < 0 && agsx_error_errno(&e) == ENOENT) {
    agsx_error_free(&e);
    return 0;
  }
  if (fd < 0) {
    *err = steal_ptr(&e);
    return -1;
  }
  _cleanup_free_ char *what = xasprintf("the image's `/%s`", path);
  if (agsx_check_regular(fcntl(fd, F_DUPFD_CLOEXEC, 3), what, err) < 0)
    return -1;
  /* The O_PATH fd pins the inode just checked; reopen it for reading. */
  char proc[64];
  snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
  _cleanup_close_ int rfd =
      agsx_check_regular(open(proc, O_RDONLY | O_CLOEXEC | AGSX_O_UNTRUSTED), what, err);
  if (rfd < 0)
    return -1;
  if (agsx_read_fd(rfd, AGSX_PASSWD_MAX, ret_buf, ret_len, err) < 0)
    return agsx_error_wrap(err, "%s", what);
  return 0;
}

/* ---- FROM ------------------------------------------------------------------------------------------ */

static int pull_policy(const struct agsx_build_opts *o, enum agsx_pull_policy *ret,
                       agsx_error_t *err) {
  return o->pull ? agsx_pull_policy_parse(o->pull, ret, err) : agsx_pull_policy_default(ret, err);
}

static int pull_image(const struct agsx_build_opts *o, const char *name, agsx_error_t *err) {
  struct agsx_pull_result res;
  if (o->progress) {
    _cleanup_free_ char *line = xasprintf("Pulling %s\n", name);
    o->progress(line, strlen(line), o->data);
  }
  if (agsx_pull(o->root ? o->root : "/var/lib/agsx", name, NULL, &res, err) < 0)
    return -1;
  agsx_pull_result_clear(&res);
  return 0;
}

int agsx_build_missing_image(const struct agsx_build_opts *o, const char *name, agsx_error_t *err) {
  enum agsx_pull_policy p;
  if (pull_policy(o, &p, err) < 0)
    return -1;
  if (p == AGSX_PULL_NEVER)
    return agsx_error_set(err, ENOENT, "no such image `%s` (and --pull never)", name);
  return pull_image(o, name, err);
}

struct stage *agsx_build_find_stage(struct build *b, const char *name) {
  for (size_t i = 0; i + 1 < b->n_stages; i++)
    if (b->stages[i].name && strcasecmp(b->stages[i].name, name) == 0)
      return &b->stages[i];
  char *end;
  unsigned long n = strtoul(name, &end, 10);
  if (*name && *end == '\0' && n + 1 < b->n_stages)
    return &b->stages[n];
  return NULL;
}

static void copy_stage(struct stage *dst, const struct stage *src) {
  dst->layers = xzalloc((src->n_layers + 1) * sizeof(*dst->layers));
  for (size_t i = 0; i < src->n_layers; i++) {
    dst->layers[i] = src->layers[i];
    dst->layers[i].media_type = xstrdup(src->layers[i].media_type);
  }
  dst->n_layers = src->n_layers;
  dst->env = agsx_strv_concat(src->env, NULL);
  dst->cmd = src->cmd ? agsx_strv_concat(src->cmd, NULL) : NULL;
  dst->entrypoint = src->entrypoint ? agsx_strv_concat(src->entrypoint, NULL) : NULL;
  dst->shell = src->shell ? agsx_strv_concat(src->shell, NULL) : NULL;
  dst->labels = agsx_strv_concat(src->labels, NULL);
  dst->ports = agsx_strv_concat(src->ports, NULL);
  dst->volumes = agsx_strv_concat(src->volumes, NULL);
  dst->history = agsx_strv_concat(src->history, NULL);
  dst->user = src->user ? xstrdup(src->user) : NULL;
  dst->workdir = src->workdir ? xstrdup(src->workdir) : NULL;
  dst->stopsignal = src->stopsignal ? xstrdup(src->stopsignal) : NULL;
  if (src->base_history) {
    /* Re-parse: yajl trees cannot be shared. */
    yajl_gen g = agsx_json_gen_new(false);
    agsx_json_value(g, src->base_history);
    size_t len;
    _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
    yajl_gen_free(g);
    dst->base_history = agsx_json_parse(s, len, AGSX_IMAGE_JSON_MAX, NULL);
  }
  memcpy(dst->chain, src->chain, AGSX_DIGEST_LEN);
}

static char **json_keys(yajl_val obj) {
  char **v = xzalloc(sizeof(char *));
  for (size_t i = 0; obj && YAJL_IS_OBJECT(obj) && i < obj->u.object.len; i++)
    agsx_strv_push(&v, obj->u.object.keys[i]);
  return v;
}

/* Loads what agsx_image_config does not carry: Labels, ExposedPorts,
 * Volumes, Shell and the history. */
static int load_raw_config(struct build *b, struct stage *st, const char *digest,
                           agsx_error_t *err) {
  _cleanup_free_ char *buf = NULL;
  size_t len;
  if (agsx_store_read_blob(b->s, digest, AGSX_IMAGE_JSON_MAX, &buf, &len, err) < 0)
    return -1;
  _cleanup_json_ yajl_val root = agsx_json_parse(buf, len, AGSX_IMAGE_JSON_MAX, err);
  if (root == NULL)
    return -1;
  yajl_val c = agsx_json_get_object(root, "config");
  yajl_val labels = agsx_json_get_object(c, "Labels");
  st->labels = xzalloc(sizeof(char *));
  for (size_t i = 0; labels && i < labels->u.object.len; i++)
    if (YAJL_IS_STRING(labels->u.object.values[i]))
      kv_set(&st->labels, labels->u.object.keys[i], labels->u.object.values[i]->u.string);
  st->ports = json_keys(agsx_json_get_object(c, "ExposedPorts"));
  st->volumes = json_keys(agsx_json_get_object(c, "Volumes"));
  yajl_val shell = agsx_json_get_array(c, "Shell");
  for (size_t i = 0; shell && i < shell->u.array.len; i++)
    if (YAJL_IS_STRING(shell->u.array.values[i]))
      agsx_strv_push(&st->shell, shell->u.array.values[i]->u.string);
  yajl_val h = agsx_json_get_array(root, "history");
  if (h) {
    /* Keep it: steal the array out of the tree. */
    for (size_t i = 0; i < root->u.object.len; i++)
      if (root->u.object.values[i] == h)
        root->u.object.values[i] = NULL;
    st->base_history = h;
    /* yajl_tree_free skips NULL values. */
  }
  return 0;
}

int agsx_build_from_image(struct build *b, struct stage *st, const char *name, agsx_error_t *err) {
  struct agsx_image_info info;
  enum agsx_pull_policy p;
  if (pull_policy(b->o, &p, err) < 0 || (p == AGSX_PULL_ALWAYS && pull_image(b->o, name, err) < 0))
    return -1;
  int r = agsx_store_prepare_image(b->s, name, &info, err);
  if (r < 0 && agsx_error_errno(err) == ENOENT && p == AGSX_PULL_MISSING) {
    agsx_error_free(err);
    if (agsx_build_missing_image(b->o, name, err) < 0)
      return -1;
    r = agsx_store_prepare_image(b->s, name, &info, err);
  }
  if (r < 0) {
    if (agsx_error_errno(err) == ENOENT && p == AGSX_PULL_NEVER) {
      agsx_error_free(err);
      return agsx_error_set_quiet(err, ENOENT, "no such image `%s` (and --pull never)", name);
    }
    return -1;
  }
  r = 0;
  const struct agsx_image_config *c = &info.config;
  if (!agsx_platform_is_supported(c->os, c->architecture))
    r = agsx_error_set(err, 0, "image `%s` is for %s/%s: agsx builds only " AGSX_PLATFORM " images",
                       name, c->os ? c->os : "?", c->architecture ? c->architecture : "?");
  st->layers = xzalloc((info.manifest.n_layers + 1) * sizeof(*st->layers));
  for (size_t i = 0; r == 0 && i < info.manifest.n_layers; i++) {
    struct blayer *l = &st->layers[st->n_layers++];
    memcpy(l->diff_id, c->diff_ids[i], AGSX_DIGEST_LEN);
    memcpy(l->digest, info.manifest.layers[i].digest, AGSX_DIGEST_LEN);
    l->size = info.manifest.layers[i].size;
    l->media_type = xstrdup(info.manifest.layers[i].media_type);
  }
  if (r == 0) {
    st->env = agsx_strv_concat(c->env, NULL);
    st->cmd = c->cmd ? agsx_strv_concat(c->cmd, NULL) : NULL;
    st->entrypoint = c->entrypoint ? agsx_strv_concat(c->entrypoint, NULL) : NULL;
    st->user = c->user && *c->user ? xstrdup(c->user) : NULL;
    st->workdir = c->working_dir && *c->working_dir ? xstrdup(c->working_dir) : NULL;
    st->stopsignal = c->stop_signal ? xstrdup(c->stop_signal) : NULL;
    memcpy(st->chain, info.img.manifest.digest, AGSX_DIGEST_LEN);
    r = load_raw_config(b, st, info.manifest.config.digest, err);
  }
  agsx_image_info_clear(&info);
  return r;
}

static const char *lower_dup(char *s) {
  for (char *p = s; *p; p++)
    *p = (char)tolower((unsigned char)*p);
  return s;
}

static int do_from(struct build *b, agsx_error_t *err) {
  const struct agsx_df_instr *in = b->in;
  if (b->n_stages >= MAX_STAGES)
    return agsx_error_set(err, 0, "Dockerfile:%u: more than %d stages", in->line, MAX_STAGES);
  const char *platform = agsx_df_flag(in, "platform", NULL);
  _cleanup_strv_ char **w = NULL;
  if (agsx_df_expand_words(in->args, b->df.escape, meta_lookup, b, &w, err) < 0)
    return agsx_build_line_err(b, err);
  size_t n = agsx_strv_len(w);
  if (!(n == 1 || (n == 3 && strcasecmp(w[1], "as") == 0)))
    return agsx_error_set(err, 0, "Dockerfile:%u: FROM takes IMAGE [AS NAME]", in->line);
  if (platform) {
    _cleanup_free_ char *p = NULL;
    if (agsx_df_expand_word(platform, b->df.escape, meta_lookup, b, &p, err) < 0)
      return agsx_build_line_err(b, err);
    if (strcmp(p, "linux/amd64") != 0)
      return agsx_error_set(err, 0, "Dockerfile:%u: unsupported platform `%s` (only linux/amd64)",
                            in->line, p);
  }
  struct stage *st = &b->stages[b->n_stages++];
  b->cur = st;
  if (n == 3) {
    st->name = xstrdup(lower_dup(w[2]));
    for (size_t i = 0; i + 1 < b->n_stages; i++)
      if (b->stages[i].name && strcmp(b->stages[i].name, st->name) == 0)
        return agsx_error_set(err, 0, "Dockerfile:%u: duplicate stage name `%s`", in->line,
                              st->name);
  }
  agsx_build_banner(b);
  struct stage *from = agsx_build_find_stage(b, w[0]);
  if (from) {
    copy_stage(st, from);
  } else if (strcmp(w[0], "scratch") == 0) {
    snprintf(st->chain, sizeof(st->chain), "scratch");
    st->env = xzalloc(sizeof(char *));
    st->labels = xzalloc(sizeof(char *));
    st->ports = xzalloc(sizeof(char *));
    st->volumes = xzalloc(sizeof(char *));
  } else if (agsx_build_from_image(b, st, w[0], err) < 0) {
    return agsx_build_line_err(b, err);
  }
  st->args = xzalloc(sizeof(char *));
  if (st->env == NULL)
    st->env = xzalloc(sizeof(char *));
  /* Docker gives every image a PATH when its base has none. */
  if (!kv_get(st->env, "PATH"))
    kv_set(&st->env, "PATH", DEFAULT_PATH);
  return 0;
}

/* ---- metadata instructions ------------------------------------------------------------------------ */

static int do_env_label(struct build *b, char ***list, bool is_env, agsx_error_t *err) {
  _cleanup_strv_ char **w = NULL;
  if (agsx_build_expand_words(b, b->in->args, &w, err) < 0)
    return -1;
  size_t n = agsx_strv_len(w);
  if (n >= 1 && strchr(w[0], '=') == NULL) {
    /* ENV KEY VALUE: the rest of the line is the value. */
    if (!is_env || n < 2)
      return agsx_error_set(err, 0, "Dockerfile:%u: %s needs KEY=VALUE", b->in->line,
                            is_env ? "ENV" : "LABEL");
    const char *rest = b->in->args + strcspn(b->in->args, " \t");
    rest += strspn(rest, " \t");
    _cleanup_free_ char *v = NULL;
    if (agsx_build_expand_word(b, rest, &v, err) < 0)
      return -1;
    kv_set(list, w[0], v);
    return 0;
  }
  /* Every pair is expanded with the values before this instruction. */
  for (size_t i = 0; i < n; i++) {
    char *eq = strchr(w[i], '=');
    if (eq == NULL || eq == w[i])
      return agsx_error_set(err, 0, "Dockerfile:%u: `%s` is not KEY=VALUE", b->in->line, w[i]);
    *eq = '\0';
    kv_set(list, w[i], eq + 1);
  }
  return 0;
}

static int do_arg(struct build *b, bool meta, agsx_error_t *err) {
  _cleanup_strv_ char **w = NULL;
  if (agsx_df_expand_words(b->in->args, b->df.escape, meta ? meta_lookup : stage_lookup, b, &w,
                           err) < 0)
    return agsx_build_line_err(b, err);
  for (size_t i = 0; w[i]; i++) {
    char *eq = strchr(w[i], '=');
    if (eq)
      *eq = '\0';
    const char *name = w[i];
    if (*name == '\0')
      return agsx_error_set(err, 0, "Dockerfile:%u: ARG needs a name", b->in->line);
    const char *given = build_arg(b, name);
    const char *val = given ? given : eq ? eq + 1 : NULL;
    if (!meta && val == NULL && agsx_strv_contains(b->meta_decl, name))
      val = kv_get(b->meta, name);
    if (given && !agsx_strv_contains(b->used_args, name))
      agsx_strv_push(&b->used_args, name);
    if (meta) {
      if (!agsx_strv_contains(b->meta_decl, name))
        agsx_strv_push(&b->meta_decl, name);
      if (val)
        kv_set(&b->meta, name, val);
    } else if (val) {
      kv_set(&b->cur->args, name, val);
    }
    if (!meta) {
      _cleanup_free_ char *d = xasprintf("ARG %s=%s", name, val ? val : "");
      agsx_build_chain(b->cur, d, strlen(d));
    }
  }
  return 0;
}

static int json_or_shell(struct build *b, char ***ret) {
  if (b->in->json) {
    *ret = agsx_strv_concat(b->in->argv, NULL);
    return 0;
  }
  char **sh = b->cur->shell ? b->cur->shell : (char *[]){"/bin/sh", "-c", NULL};
  *ret = agsx_strv_concat(sh, NULL);
  agsx_strv_push(ret, b->in->args);
  return 0;
}

static int do_meta(struct build *b, agsx_error_t *err) {
  struct stage *st = b->cur;
  const struct agsx_df_instr *in = b->in;
  _cleanup_free_ char *one = NULL;
  switch (in->cmd) {
  case AGSX_DF_ENV: return do_env_label(b, &st->env, true, err);
  case AGSX_DF_LABEL: return do_env_label(b, &st->labels, false, err);
  case AGSX_DF_MAINTAINER: kv_set(&st->labels, "maintainer", in->args); return 0;
  case AGSX_DF_ARG: return do_arg(b, false, err);
  case AGSX_DF_CMD: agsx_strv_free(st->cmd); return json_or_shell(b, &st->cmd);
  case AGSX_DF_ENTRYPOINT:
    agsx_strv_free(st->entrypoint);
    json_or_shell(b, &st->entrypoint);
    /* Docker: an ENTRYPOINT resets the CMD inherited from the base. */
    agsx_strv_free(st->cmd);
    st->cmd = NULL;
    return 0;
  case AGSX_DF_SHELL:
    agsx_strv_free(st->shell);
    st->shell = agsx_strv_concat(in->argv, NULL);
    return 0;
  case AGSX_DF_USER:
    if (agsx_build_expand_word(b, in->args, &one, err) < 0)
      return -1;
    free(st->user);
    st->user = steal_ptr(&one);
    return 0;
  case AGSX_DF_STOPSIGNAL:
    if (agsx_build_expand_word(b, in->args, &one, err) < 0)
      return -1;
    free(st->stopsignal);
    st->stopsignal = steal_ptr(&one);
    return 0;
  case AGSX_DF_WORKDIR: {
    if (agsx_build_expand_word(b, in->args, &one, err) < 0)
      return -1;
    _cleanup_free_ char *rel = agsx_build_in_image_path(st, one);
    free(st->workdir);
    st->workdir = xasprintf("/%s", rel);
    return 0;
  }
  case AGSX_DF_EXPOSE:
  case AGSX_DF_VOLUME: {
    _cleanup_strv_ char **w = NULL;
    if (in->json)
      w = agsx_strv_concat(in->argv, NULL);
    else if (agsx_build_expand_words(b, in->args, &w, err) < 0)
      return -1;
    for (size_t i = 0; w[i]; i++) {
      if (in->cmd == AGSX_DF_VOLUME) {
        if (!agsx_strv_contains(st->volumes, w[i]))
          agsx_strv_push(&st->volumes, w[i]);
        continue;
      }
      _cleanup_free_ char *p = strchr(w[i], '/') ? xstrdup(w[i]) : xasprintf("%s/tcp", w[i]);
      char *end;
      unsigned long port = strtoul(p, &end, 10);
      if (end == p || port == 0 || port > 65535 ||
          (strcmp(end, "/tcp") != 0 && strcmp(end, "/udp") != 0 && strcmp(end, "/sctp") != 0))
        return agsx_error_set(err, 0, "Dockerfile:%u: invalid port `%s`", in->line, w[i]);
      if (!agsx_strv_contains(st->ports, p))
        agsx_strv_push(&st->ports, p);
    }
    return 0;
  }
  default: return agsx_error_set(err, 0, "Dockerfile:%u: internal error", in->line);
  }
}

/* ---- RUN -------------------------------------------------------------------------------------------- */

/* Files agsx itself writes into every sandbox's root: never part of a
 * layer (Docker bind-mounts them for RUN). */
static bool agsx_made(const char *path) {
  return strcmp(path, "etc/hosts") == 0 || strcmp(path, "etc/hostname") == 0 ||
         strcmp(path, "etc/resolv.conf") == 0;
}

static uid_t shift(uid_t id, uid_t base) {
  return id >= base && id - base < AGSX_UID_RANGE ? id - base : 0;
}

/* Walks the upper directory DIRFD (on the sandbox's tmpfs, never through a
 * symlink) into the layer. */
int agsx_build_upper_dir(struct upper_walk *u, int dirfd, const char *prefix, int depth,
                         agsx_error_t *err) {
  if (depth > 256)
    return agsx_error_set(err, 0, "RUN made a tree deeper than 256 levels");
  _cleanup_strv_ char **names = NULL;
  if (agsx_build_list_dir(dirfd, "", &names, err) < 0)
    return -1;
  for (size_t i = 0; names[i]; i++) {
    _cleanup_free_ char *path = *prefix ? xasprintf("%s/%s", prefix, names[i]) : xstrdup(names[i]);
    if (agsx_made(path))
      continue;
    struct stat st;
    if (fstatat(dirfd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
      return agsx_error_set(err, errno, "`%s`", path);
    struct lentry le = {.path = path,
                        .mode = st.st_mode,
                        .uid = shift(st.st_uid, u->base),
                        .gid = shift(st.st_gid, u->base),
                        .mtime = st.st_mtime,
                        .size = st.st_size,
                        .fd = -1};
    _cleanup_free_ char *wh = NULL, *target = NULL;
    _cleanup_close_ int fd = -1;
    if (agsx_build_is_whiteout(&st)) {
      wh = *prefix ? xasprintf("%s/.wh.%s", prefix, names[i]) : xasprintf(".wh.%s", names[i]);
      le.path = wh, le.mode = S_IFREG | 0644, le.uid = le.gid = 0, le.size = 0, le.whiteout = true;
    } else if (S_ISLNK(st.st_mode)) {
      target = xzalloc(4096);
      ssize_t n = readlinkat(dirfd, names[i], target, 4095);
      if (n < 0)
        return agsx_error_set(err, errno, "readlink `%s`", path);
      le.link = target;
    } else if (S_ISREG(st.st_mode)) {
      if (st.st_nlink > 1) {
        for (size_t k = 0; k < u->n_links && !le.hardlink; k++)
          if (u->links[k].dev == st.st_dev && u->links[k].ino == st.st_ino)
            le.hardlink = u->links[k].path;
        if (!le.hardlink) {
          u->links = xrealloc(u->links, (u->n_links + 1) * sizeof(*u->links));
          u->links[u->n_links].dev = st.st_dev;
          u->links[u->n_links].ino = st.st_ino;
          u->links[u->n_links++].path = xstrdup(path);
        }
      }
      if (!le.hardlink) {
        _cleanup_free_ char *what = xasprintf("`%s`", path);
        fd = agsx_check_regular(
            openat(dirfd, names[i], O_RDONLY | O_NOFOLLOW | O_CLOEXEC | AGSX_O_UNTRUSTED), what,
            err);
        if (fd < 0)
          return -1;
        le.fd = fd;
      }
    } else if (!S_ISDIR(st.st_mode) && !S_ISFIFO(st.st_mode)) {
      continue; /* sockets, devices: not in layers */
    }
    if (agsx_lw_add(u->w, &le, err) < 0)
      return -1;
    if (!S_ISDIR(st.st_mode))
      continue;
    _cleanup_close_ int sub =
        openat(dirfd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0)
      return agsx_error_set(err, errno, "open `%s`", path);
    char v[8];
    ssize_t xl = fgetxattr(sub, "user.overlay.opaque", v, sizeof(v));
    if (xl == 1 && v[0] == 'y') {
      _cleanup_free_ char *opq = xasprintf("%s/.wh..wh..opq", path);
      struct lentry oe = {
          .path = opq, .mode = S_IFREG | 0644, .mtime = st.st_mtime, .fd = -1, .whiteout = true};
      if (agsx_lw_add(u->w, &oe, err) < 0)
        return -1;
    }
    if (agsx_build_upper_dir(u, sub, path, depth + 1, err) < 0)
      return -1;
  }
  return 0;
}

/* The network of this RUN: `RUN --network=none` is internal, `default`
 * the build's --network; `host` is never given to a sandbox. */
static int run_network_mode(struct build *b, const char **ret, agsx_error_t *err) {
  const char *flag = agsx_df_flag(b->in, "network", NULL);
  *ret = b->o->network;
  if (flag == NULL || strcmp(flag, "default") == 0)
    return 0;
  if (strcmp(flag, "none") == 0) {
    *ret = "internal";
    return 0;
  }
  return agsx_error_set(err, 0,
                        "Dockerfile:%u: RUN --network=%s is not supported (none or default)",
                        b->in->line, flag);
}

/* The sandbox's network for RUN: its mode must parse (it was checked on
 * the command line; RUN --network may only narrow it). */
static int run_network(struct build *b, const char *mode, agsx_error_t *err) {
  enum agsx_net_mode m;
  const char *name;
  if (agsx_net_mode_parse(mode, &m, &name, err) < 0)
    return agsx_error_wrap(err, "Dockerfile:%u: RUN", b->in->line);
  return 0;
}

static void keep_tail(char *tail, size_t *len, const char *buf, size_t n) {
  if (n >= TAIL_MAX) {
    memcpy(tail, buf + n - TAIL_MAX, TAIL_MAX);
    *len = TAIL_MAX;
    return;
  }
  if (*len + n > TAIL_MAX) {
    size_t drop = *len + n - TAIL_MAX;
    memmove(tail, tail + drop, *len - drop);
    *len -= drop;
  }
  memcpy(tail + *len, buf, n);
  *len += n;
}

/* The last lines of the output, on one line for the error message. */
static char *tail_lines(const char *tail, size_t len) {
  while (len && (tail[len - 1] == '\n' || tail[len - 1] == '\r'))
    len--;
  size_t start = len, lines = 0;
  while (start > 0 && lines < 5)
    if (tail[--start] == '\n')
      lines++;
  if (tail[start] == '\n')
    start++;
  char *s = xstrndup(tail + start, len - start);
  for (char *p = s; *p; p++)
    if (*p == '\n')
      *p = '|';
    else if ((unsigned char)*p < 0x20)
      *p = ' ';
  return s;
}

/* The step's output: the tail kept for the error message, the rest shown. */
struct run_out {
  struct build *b;
  char tail[TAIL_MAX];
  size_t tlen;
};

static void run_output(void *data, const char *buf, size_t n) {
  struct run_out *o = data;
  keep_tail(o->tail, &o->tlen, buf, n);
  if (o->b->o->progress)
    o->b->o->progress(buf, n, o->b->o->data);
}

/* The egress rules of a RUN on network NET (RUN --network=none is
 * internal: no egress to filter). */
static const struct agsx_egress *run_egress(const struct build *b, const char *net) {
  return net && strcmp(net, "internal") != 0 ? b->o->egress : NULL;
}

/* Runs the step in a sandbox of the lifecycle library (network, DNS relay,
 * firewall watch, seccomp as for `agsx run`), on the stage's layers, its
 * upper directory handed back in *RET_LC's sandbox. */
static int run_sandbox(struct build *b, char **argv, char **env, const char *net,
                       struct agsx_lifecycle **ret_lc, agsx_error_t *err) {
  struct stage *st = b->cur;
  _cleanup_strv_ char **paths = xzalloc((st->n_layers + 1) * sizeof(char *));
  for (size_t i = 0; i < st->n_layers; i++)
    paths[i] = layer_path(b, st->layers[i].diff_id);
  struct run_out *out = xzalloc(sizeof(*out));
  out->b = b;
  struct agsx_run_spec spec = {
      .root = b->o->root ? b->o->root : "/var/lib/agsx",
      .state = b->o->state_dir,
      .layers = paths,
      .n_layers = st->n_layers,
      .cmd = argv,
      .env = env,
      .user = st->user,
      .workdir = st->workdir,
      .hostname = "buildkitsandbox",
      .network = net,
      .egress = run_egress(b, net),
      .disk = 8ull << 30,
      .keep_upper = true,
      .ephemeral = true,
      .no_timeout = true,
      .no_signals = true,
      .cut_kills = true,
      .on_output = run_output,
      .output_data = out,
      .cancel_fd = b->o->cancel_fd >= 0 ? &b->o->cancel_fd : NULL,
  };
  struct agsx_lifecycle *lc = NULL;
  int r = agsx_lifecycle_create(&spec, &lc, err);
  if (r == 0)
    agsx_lifecycle_run(lc, NULL, err);
  *ret_lc = lc;
  const struct agsx_sandbox *sb = lc ? agsx_lifecycle_sandbox(lc) : NULL;
  if (sb == NULL) {
    free(out);
    return agsx_error_wrap(err, "Dockerfile:%u: RUN", b->in->line);
  }
  agsx_error_free(err); /* the teardown's: the step's result is what counts */
  _cleanup_free_ char *t = tail_lines(out->tail, out->tlen);
  free(out);
  if (agsx_lifecycle_cancelled(lc))
    return agsx_error_set(err, 0, "Dockerfile:%u: RUN: the build was interrupted", b->in->line);
  if (agsx_lifecycle_cut(lc))
    return agsx_error_set(err, 0, "Dockerfile:%u: RUN: %s", b->in->line, agsx_lifecycle_cut(lc));
  if (sb->exit_code != 0 || !sb->exited)
    return agsx_error_set(err, 0, "Dockerfile:%u: RUN failed with exit code %d%s%s", b->in->line,
                          sb->exit_code, *t ? ": " : "", t);
  return 0;
}

static int do_run(struct build *b, agsx_error_t *err) {
  struct stage *st = b->cur;
  const struct agsx_df_instr *in = b->in;
  _cleanup_strv_ char **argv = NULL;
  json_or_shell(b, &argv);
  /* ARGs go to the environment, under ENV (which wins). */
  _cleanup_strv_ char **env = agsx_strv_concat(st->args, NULL);
  for (size_t i = 0; st->env && st->env[i]; i++) {
    char *eq = strchr(st->env[i], '=');
    if (eq) {
      _cleanup_free_ char *k = xstrndup(st->env[i], (size_t)(eq - st->env[i]));
      kv_set(&env, k, eq + 1);
    }
  }
  if (!kv_get(env, "PATH"))
    kv_set(&env, "PATH", DEFAULT_PATH);
  /* The key: the instruction with the args it sees, under the parent. */
  _cleanup_sha256_ agsx_sha256 *h = agsx_sha256_new();
  for (size_t i = 0; argv[i]; i++)
    agsx_sha256_update(h, argv[i], strlen(argv[i]) + 1);
  for (size_t i = 0; env[i]; i++)
    agsx_sha256_update(h, env[i], strlen(env[i]) + 1);
  const char *net;
  if (run_network_mode(b, &net, err) < 0)
    return -1;
  _cleanup_free_ char *ctx =
      xasprintf("U %s W %s N %s", st->user ? st->user : "", st->workdir ? st->workdir : "", net);
  agsx_sha256_update(h, ctx, strlen(ctx));
  /* And the egress rules it runs under: a step that could reach a name must
   * not reuse what a step under other rules made (nor the reverse). Without
   * rules the key is what it was. */
  const struct agsx_egress *egress = run_egress(b, net);
  if (egress && egress->n) {
    _cleanup_free_ char *rules = agsx_egress_to_json(egress);
    agsx_sha256_update(h, "\0E ", 4);
    agsx_sha256_update(h, rules, strlen(rules));
  }
  char key[AGSX_DIGEST_LEN];
  agsx_sha256_final(h, key);
  agsx_build_chain(st, key, strlen(key));
  agsx_build_banner(b);
  _cleanup_free_ char *created = xasprintf("RUN %s", in->json ? in->args : in->args);
  if (agsx_build_cache_hit(b, st, created))
    return 0;
  if (run_network(b, net, err) < 0)
    return -1;
  struct agsx_lifecycle *lc = NULL;
  int r = run_sandbox(b, argv, env, net, &lc, err);
  const struct agsx_sandbox *sb = lc ? agsx_lifecycle_sandbox(lc) : NULL;
  if (r == 0 && (sb == NULL || sb->upperfd < 0))
    r = agsx_error_set(err, 0, "Dockerfile:%u: RUN: the sandbox did not hand back its changes",
                       in->line);
  struct lw lw = {.fd = -1};
  char record[256];
  if (r == 0 && (r = agsx_lw_open(b, &lw, err)) < 0)
    agsx_build_line_err(b, err);
  if (r == 0) {
    struct upper_walk u = {.b = b, .w = &lw, .base = sb->ids.base};
    r = agsx_build_upper_dir(&u, sb->upperfd, "", 0, err);
    for (size_t i = 0; i < u.n_links; i++)
      free(u.links[i].path);
    free(u.links);
    if (r < 0)
      agsx_build_line_err(b, err);
    else if ((r = agsx_lw_commit(b, &lw, st, created, record, err)) == 0)
      agsx_build_cache_later(b, st->chain, record);
  }
  agsx_lw_free(&lw);
  agsx_lifecycle_free(lc);
  return r;
}

/* ---- the driver ----------------------------------------------------------------------------------- */

static int read_inputs(struct build *b, agsx_error_t *err) {
  b->ctxfd = open(b->o->context, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (b->ctxfd < 0)
    return agsx_error_set(err, errno, "build context `%s`", b->o->context);
  _cleanup_free_ char *buf = NULL;
  size_t len;
  int r = b->o->dockerfile
              ? agsx_read_file_at(AT_FDCWD, b->o->dockerfile, AGSX_DOCKERFILE_MAX, &buf, &len, err)
              : agsx_read_file_at(b->ctxfd, "Dockerfile", AGSX_DOCKERFILE_MAX, &buf, &len, err);
  if (r < 0)
    return agsx_error_wrap(err, "Dockerfile");
  if (agsx_dockerfile_parse(buf, len, &b->df, err) < 0)
    return -1;
  _cleanup_free_ char *ig = NULL;
  _cleanup_close_ int igfd = agsx_open_beneath_nofollow(b->ctxfd, ".dockerignore", O_RDONLY, 0);
  if (igfd >= 0) {
    if (agsx_read_fd(igfd, AGSX_DOCKERIGNORE_MAX, &ig, &len, err) < 0 ||
        agsx_dockerignore_parse(ig, len, &b->ignore, err) < 0)
      return agsx_error_wrap(err, ".dockerignore");
  }
  return 0;
}

static int step(struct build *b, agsx_error_t *err) {
  const struct agsx_df_instr *in = b->in;
  if (b->cur == NULL && in->cmd != AGSX_DF_FROM)
    return do_arg(b, true, err);
  switch (in->cmd) {
  case AGSX_DF_FROM: return do_from(b, err);
  case AGSX_DF_RUN: return do_run(b, err);
  case AGSX_DF_COPY:
  case AGSX_DF_ADD: return agsx_build_copy(b, err);
  default: {
    agsx_build_banner(b);
    if (do_meta(b, err) < 0)
      return -1;
    if (in->cmd != AGSX_DF_ARG) {
      /* The state after substitution is what later steps depend on. */
      _cleanup_free_ char *d = xasprintf("%s|%s|%s", in->text, b->cur->user ? b->cur->user : "",
                                         b->cur->workdir ? b->cur->workdir : "");
      agsx_build_chain(b->cur, d, strlen(d));
      for (size_t i = 0; b->cur->env && b->cur->env[i]; i++)
        agsx_build_chain(b->cur, b->cur->env[i], strlen(b->cur->env[i]));
    }
    agsx_build_history(b->cur, in->text, true);
    return in->cmd == AGSX_DF_WORKDIR ? agsx_build_workdir_layer(b, err) : 0;
  }
  }
}

int agsx_build(struct agsx_store *s, const struct agsx_build_opts *o, struct agsx_build_result *ret,
               agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  agsx_error_t cerr = NULL;
  if (agsx_store_clean_tmp(s, &cerr) < 0) {
    agsx_warn("%s", cerr->msg);
    agsx_error_free(&cerr);
  }
  struct build b = {.s = s, .o = o, .workfd = -1, .ctxfd = -1, .cachefd = -1, .res = ret};
  /* Docker's automatic platform arguments, global scope. */
  static const char *const platform_args[][2] = {
      {"BUILDPLATFORM", AGSX_PLATFORM},  {"BUILDOS", "linux"},  {"BUILDARCH", "amd64"},
      {"TARGETPLATFORM", AGSX_PLATFORM}, {"TARGETOS", "linux"}, {"TARGETARCH", "amd64"}};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(platform_args); i++) {
    kv_set(&b.meta, platform_args[i][0], platform_args[i][1]);
    agsx_strv_push(&b.meta_decl, platform_args[i][0]);
  }
  int r = read_inputs(&b, err);
  if (r == 0) {
    b.workfd = agsx_store_mkwork(s, "build", &b.work, err);
    r = b.workfd < 0 ? -1 : 0;
  }
  if (r == 0) {
    if (mkdirat(s->rootfd, "cache", 0700) < 0 && errno != EEXIST)
      agsx_warn("build cache: %s", strerror(errno));
    b.cachefd = openat(s->rootfd, "cache", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  }
  for (size_t i = 0; r == 0 && i < b.df.n; i++) {
    b.in = &b.df.v[i];
    r = cancelled(&b) ? agsx_error_set(err, 0, "the build was interrupted") : step(&b, err);
  }
  if (r == 0 && b.cur == NULL)
    r = agsx_error_set(err, 0, "Dockerfile has no FROM");
  if (r == 0)
    r = agsx_build_write_image(&b, b.cur, err);
  for (size_t i = 0; o->build_args && o->build_args[i] && r == 0; i++) {
    _cleanup_free_ char *k = xstrndup(o->build_args[i], strcspn(o->build_args[i], "="));
    if (!agsx_strv_contains(b.used_args, k))
      agsx_warn("build argument `%s` was not consumed by any ARG", k);
  }
  for (size_t i = 0; i < b.n_stages; i++)
    agsx_build_stage_clear(&b.stages[i]);
  agsx_dockerfile_clear(&b.df);
  agsx_dockerignore_clear(&b.ignore);
  agsx_strv_free(b.meta);
  agsx_strv_free(b.meta_decl);
  agsx_strv_free(b.used_args);
  agsx_strv_free(b.pending_cache);
  agsx_closep(&b.ctxfd);
  agsx_closep(&b.cachefd);
  agsx_closep(&b.workfd);
  if (b.work && agsx_rm_rf_at(s->tmpfd, b.work, &cerr) < 0) {
    agsx_warn("%s", cerr->msg);
    agsx_error_free(&cerr);
  }
  free(b.work);
  return r;
}
