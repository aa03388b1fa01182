/* agsx info: what this host gives agsx — the kernel's features and the path
 * agsx takes for each, the cgroups sandboxes get, where state and images
 * live. Probed now, not read from the per-boot cache (host/kernel.h). */
#include "config.h"

#include "cmd.h"
#include "host/kernel.h"
#include "host/cgroup.h"
#include "host/rootless.h"
#include "net/usernet.h"
#include "util/json.h"

#include <string.h>
#include <sys/utsname.h>

static int on_info_opt(void *data, int id, const char *arg) {
  (void)arg;
  if (id == O_JSON)
    *(bool *)data = true;
  return 0;
}

static void print_json(struct agsx_ctx *ctx, const struct agsx_kernel *k, const char *machine,
                       const struct agsx_cgroup_info *cg, const char *cg_error) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "version", PACKAGE_VERSION);
  agsx_json_key(g, "kernel");
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "release", k->release);
  agsx_json_kv_str(g, "machine", machine);
  agsx_json_kv_bool(g, "below_floor", agsx_kernel_below_floor(k));
  _cleanup_free_ char *floor = xasprintf("%d.%d", AGSX_KERNEL_FLOOR_MAJOR, AGSX_KERNEL_FLOOR_MINOR);
  agsx_json_kv_str(g, "floor", floor);
  agsx_json_key(g, "features");
  yajl_gen_array_open(g);
  for (int f = 0; f < AGSX_KF_N; f++) {
    bool have = (k->have >> f) & 1, off = (k->disabled >> f) & 1;
    yajl_gen_map_open(g);
    agsx_json_kv_str(g, "name", agsx_kernel_feature_name(f));
    agsx_json_kv_str(g, "what", agsx_kernel_feature_what(f));
    agsx_json_kv_str(g, "since", agsx_kernel_feature_since(f));
    agsx_json_kv_bool(g, "required", agsx_kernel_feature_required(f));
    agsx_json_kv_bool(g, "present", have || off);
    agsx_json_kv_bool(g, "used", have);
    agsx_json_kv_str(g, "path", agsx_kernel_feature_path(f, have));
    yajl_gen_map_close(g);
  }
  yajl_gen_array_close(g);
  yajl_gen_map_close(g);
  agsx_json_key(g, "cgroup");
  yajl_gen_map_open(g);
  if (cg_error) {
    agsx_json_kv_str(g, "error", cg_error);
  } else {
    agsx_json_kv_int(g, "version", cg->v2 ? 2 : 1);
    agsx_json_kv_str(g, "root", cg->root);
    agsx_json_kv_str(g, "controllers", cg->controllers);
    agsx_json_kv_str(g, "manager", cg->manager);
    agsx_json_kv_str(g, "manager_reason", cg->why);
    agsx_json_kv_str(g, "parent", cg->parent);
    agsx_json_kv_str(g, "path", cg->path);
  }
  yajl_gen_map_close(g);
  agsx_json_kv_str(g, "store", ctx->root);
  agsx_json_kv_str(g, "state", ctx->state);
  struct agsx_rootless_info ri;
  agsx_rootless_describe(&ri);
  agsx_json_key(g, "rootless");
  yajl_gen_map_open(g);
  agsx_json_kv_bool(g, "active", ri.active);
  if (ri.active) {
    agsx_json_kv_int(g, "uid", (int64_t)ri.uid);
    agsx_json_kv_int(g, "gid", (int64_t)ri.gid);
    agsx_json_kv_int(g, "ids", (int64_t)ri.ids);
    agsx_json_kv_int(g, "host_uid0", (int64_t)ri.host_uid0);
    agsx_json_kv_int(g, "host_gid0", (int64_t)ri.host_gid0);
    agsx_json_kv_bool(g, "one_id", ri.one_id);
    /* Ranges of a sandbox's own (sandbox/ranges.h); beyond them, the
     * shared one. */
    agsx_json_kv_str(g, "ranges", ri.ranges >= 2 ? "per-sandbox" : "shared");
    agsx_json_kv_int(g, "own_ranges", ri.ranges >= 2 ? (int64_t)ri.ranges - 1 : 0);
    _cleanup_free_ char *pasta = agsx_usernet_pasta();
    agsx_json_key(g, "usernet");
    yajl_gen_map_open(g);
    if (pasta)
      agsx_json_kv_str(g, "pasta", pasta);
    else {
      agsx_json_key(g, "pasta");
      yajl_gen_null(g);
    }
    agsx_json_kv_bool(g, "running", agsx_usernet_running());
    yajl_gen_map_close(g);
  }
  yajl_gen_map_close(g);
  yajl_gen_map_close(g);
  size_t len;
  _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
  printf("%s\n", s);
}

static void print_text(struct agsx_ctx *ctx, const struct agsx_kernel *k, const char *machine,
                       const struct agsx_cgroup_info *cg, const char *cg_error) {
  printf("agsx %s\n", PACKAGE_VERSION);
  printf("kernel: Linux %s (%s)%s\n", k->release, machine,
         agsx_kernel_below_floor(k) ? ", older than the oldest agsx is tested on" : "");
  printf("  agsx supports Linux %d.%d and later\n", AGSX_KERNEL_FLOOR_MAJOR,
         AGSX_KERNEL_FLOOR_MINOR);
  for (int f = 0; f < AGSX_KF_N; f++) {
    bool have = (k->have >> f) & 1, off = (k->disabled >> f) & 1;
    const char *state = have ? "yes" : off ? "off" : "no";
    printf("  %-26s %-3s  %s (Linux %s)%s\n", agsx_kernel_feature_name(f), state,
           agsx_kernel_feature_what(f), agsx_kernel_feature_since(f),
           agsx_kernel_feature_required(f) ? ", required" : "");
    printf("  %-26s      -> %s%s\n", "", agsx_kernel_feature_path(f, have),
           off ? " (AGSX_KERNEL_DISABLE)" : "");
  }
  if (cg_error)
    printf("cgroup: %s\n", cg_error);
  else
    printf("cgroup: v%d at %s, manager %s; sandboxes in %s\n  manager: %s\n  controllers: %s\n",
           cg->v2 ? 2 : 1, cg->root, cg->manager, cg->path, cg->why,
           cg->controllers && *cg->controllers ? cg->controllers : "(none)");
  printf("store: %s\nstate: %s\n", ctx->root, ctx->state);
  struct agsx_rootless_info ri;
  agsx_rootless_describe(&ri);
  if (!ri.active) {
    printf("rootless: no (agsx runs as root)\n");
    return;
  }
  printf("rootless: yes, user %lu, in a user namespace of the user's own\n", ri.uid);
  if (ri.one_id)
    printf("  ids: a sandbox has one id, 0, which is the user itself: the user has no subordinate\n"
           "       ids (as root: usermod --add-subuids 100000-165535 --add-subgids 100000-165535 "
           "USER)\n");
  else if (ri.ranges < 2)
    printf("  ids: a sandbox's ids 0-%lu are the host's %lu-%lu (uids, /etc/subuid) and %lu-%lu\n"
           "       (gids, /etc/subgid); the user's sandboxes share this one range, so one\n"
           "       sandbox's root is the same host id as another's (a range of its own per\n"
           "       sandbox needs 131072 subordinate ids or more)\n",
           ri.ids - 1, ri.host_uid0, ri.host_uid0 + ri.ids - 1, ri.host_gid0,
           ri.host_gid0 + ri.ids - 1);
  else
    printf("  ids: %lu ranges of 65536 from the host's uid %lu and gid %lu (/etc/subuid,\n"
           "       /etc/subgid): each sandbox gets one of its own while one is free (ranges\n"
           "       1-%lu), and sees the image's layers through copies owned by its range\n"
           "       (STORE/ranges/N, made at its first start there); a sandbox that mounts a\n"
           "       named volume, and any sandbox while all are taken, shares range 0, the\n"
           "       layers' own\n",
           ri.ranges, ri.host_uid0, ri.host_gid0, ri.ranges - 1);
  if (agsx_cgroup_limits_off())
    printf("  limits: off (see cgroup above): --memory, --cpus, --pids and pause are refused\n");
  else
    printf("  limits: in the cgroups systemd's user manager delegates (see cgroup above)\n");
  _cleanup_free_ char *pasta = agsx_usernet_pasta();
  printf("  networks: internal; -p on the host's loopback; public and vpc in a network namespace\n"
         "       of the user's own (its router), connected to the host by pasta: %s\n",
         pasta == NULL            ? "pasta is not installed (apt-get install passt)"
         : agsx_usernet_running() ? "running"
                                  : "made at the first public or vpc start");
}

int agsx_cmd_info(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  bool json = ctx->json;
  int i = agsx_parse_options(cmd, argc, argv, on_info_opt, &json);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i < argc)
    return agsx_failf("info: unexpected argument `%s`", argv[i]);
  struct agsx_kernel k;
  agsx_kernel_probe(&k);
  struct utsname u;
  if (uname(&u) < 0)
    snprintf(u.machine, sizeof(u.machine), "unknown");
  struct agsx_cgroup_info cg;
  agsx_error_t err = NULL;
  int r = agsx_cgroup_info(&cg, &err);
  if (json)
    print_json(ctx, &k, u.machine, &cg, r < 0 ? err->msg : NULL);
  else
    print_text(ctx, &k, u.machine, &cg, r < 0 ? err->msg : NULL);
  agsx_error_free(&err);
  agsx_cgroup_info_clear(&cg);
  return 0;
}
