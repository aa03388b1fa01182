/* agsx — nftables through a dlopen()ed libnftables. */
#include "config.h"

#include "nft.h"

#include <dlfcn.h>
#include <string.h>

/* The few entry points used, with the types of <nftables/libnftables.h>
 * (a stable ABI: libnftables.so.1). */
struct nft_ctx;
#define NFT_CTX_DEFAULT 0
static struct {
  void *dl;
  struct nft_ctx *(*ctx_new)(uint32_t flags);
  void (*ctx_free)(struct nft_ctx *ctx);
  int (*buffer_output)(struct nft_ctx *ctx);
  int (*buffer_error)(struct nft_ctx *ctx);
  const char *(*get_output)(struct nft_ctx *ctx);
  const char *(*get_error)(struct nft_ctx *ctx);
  int (*run_cmd)(struct nft_ctx *nft, const char *buf);
} lib;

static int load(agsx_error_t *err) {
  if (lib.dl)
    return 0;
  void *dl = dlopen("libnftables.so.1", RTLD_NOW | RTLD_LOCAL);
  if (dl == NULL)
    return agsx_error_set(err, 0, "this network needs libnftables (apt-get install libnftables1): %s",
                          dlerror());
  struct {
    const char *name;
    void **fn;
  } syms[] = {
      {"nft_ctx_new", (void **)&lib.ctx_new},
      {"nft_ctx_free", (void **)&lib.ctx_free},
      {"nft_ctx_buffer_output", (void **)&lib.buffer_output},
      {"nft_ctx_buffer_error", (void **)&lib.buffer_error},
      {"nft_ctx_get_output_buffer", (void **)&lib.get_output},
      {"nft_ctx_get_error_buffer", (void **)&lib.get_error},
      {"nft_run_cmd_from_buffer", (void **)&lib.run_cmd},
  };
  for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
    *syms[i].fn = dlsym(dl, syms[i].name);
    if (*syms[i].fn == NULL) {
      dlclose(dl);
      return agsx_error_set(err, 0, "libnftables lacks %s", syms[i].name);
    }
  }
  lib.dl = dl;
  return 0;
}

/* The first line of nft's error text, without the "Error: " prefix. */
static char *first_error(const char *e) {
  if (e == NULL || *e == '\0')
    return xstrdup("unknown error");
  const char *p = strstr(e, "Error: ");
  p = p ? p + 7 : e;
  return xstrndup(p, strcspn(p, "\n"));
}

int agsx_nft_run(const char *cmds, char **ret_out, agsx_error_t *err) {
  if (ret_out)
    *ret_out = NULL;
  if (load(err) < 0)
    return -1;
  struct nft_ctx *ctx = lib.ctx_new(NFT_CTX_DEFAULT);
  if (ctx == NULL)
    return agsx_error_set(err, ENOMEM, "nftables context");
  lib.buffer_output(ctx);
  lib.buffer_error(ctx);
  int r = lib.run_cmd(ctx, cmds);
  if (r != 0) {
    _cleanup_free_ char *e = first_error(lib.get_error(ctx));
    agsx_error_set(err, 0, "nftables: %s", e);
  } else if (ret_out) {
    const char *o = lib.get_output(ctx);
    *ret_out = xstrdup(o ? o : "");
  }
  lib.ctx_free(ctx);
  return r != 0 ? -1 : 0;
}
