/* agsx — api: the spawner (see spawn.h). Requests and replies are one
 * SOCK_SEQPACKET message each, JSON. */
#include "config.h"

#include "api/spawn.h"
#include "net/egress.h"
#include "net/relay.h"

#include "sandbox/lifecycle.h"
#include "util/json.h"

#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

static void gen_strv(yajl_gen g, const char *key, char **v) {
  agsx_json_key(g, key);
  yajl_gen_array_open(g);
  for (size_t i = 0; v && v[i]; i++)
    agsx_json_str(g, v[i]);
  yajl_gen_array_close(g);
}

static char **get_strv(yajl_val v, const char *key) {
  yajl_val a = agsx_json_get_array(v, key);
  char **out = NULL;
  for (size_t i = 0; a && i < a->u.array.len; i++)
    if (YAJL_IS_STRING(a->u.array.values[i]))
      agsx_strv_push(&out, a->u.array.values[i]->u.string);
  return out;
}

static void reply(int fd, const char *id, int status, const char *error) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "id", id);
  agsx_json_kv_int(g, "status", status);
  agsx_json_kv_str(g, "error", error);
  yajl_gen_map_close(g);
  size_t len;
  _cleanup_free_ char *s = agsx_json_gen_steal(g, &len);
  if (send(fd, s, len, MSG_NOSIGNAL) < 0)
    agsx_warn("serve: spawner: reply: %s", strerror(errno));
}

static void handle(int fd, const char *buf, size_t len) {
  agsx_error_t err = NULL;
  _cleanup_json_ yajl_val v = agsx_json_parse(buf, len, AGSX_SPAWN_MSG_MAX, &err);
  if (v == NULL) {
    reply(fd, NULL, 500, err->msg);
    agsx_error_free(&err);
    return;
  }
  _cleanup_strv_ char **env = get_strv(v, "env"), **labels = get_strv(v, "labels"),
                      **rules = get_strv(v, "egress");
  struct agsx_egress egress = {0};
  for (size_t i = 0; rules && rules[i]; i++) {
    struct agsx_egress_rule er;
    if (agsx_egress_rule_parse_line(rules[i], &er, &err) < 0 ||
        agsx_egress_append(&egress, &er, &err) < 0) {
      reply(fd, NULL, 400, err->msg);
      agsx_error_free(&err);
      agsx_egress_clear(&egress);
      return;
    }
  }
  _cleanup_strv_ char **volumes = get_strv(v, "volumes");
  size_t nv = agsx_strv_len(volumes);
  struct agsx_bind *binds = nv ? xzalloc(nv * sizeof(*binds)) : NULL;
  for (size_t i = 0; i < nv; i++) {
    char *colon = strchr(volumes[i], ':'); /* NAME:/path (body.h: no ':' in NAME) */
    if (colon)
      *colon = '\0';
    binds[i] = (struct agsx_bind){.src = volumes[i],
                                  .dst = colon ? colon + 1 : volumes[i] + strlen(volumes[i]),
                                  .volume = true};
  }
  _cleanup_strv_ char **pspecs = get_strv(v, "ports"), **cmd = get_strv(v, "cmd");
  size_t nports = agsx_strv_len(pspecs);
  _cleanup_free_ struct agsx_port *ports = nports ? xzalloc(nports * sizeof(*ports)) : NULL;
  for (size_t i = 0; i < nports; i++)
    if (agsx_port_parse(pspecs[i], &ports[i], &err) < 0 ||
        (i + 1 == nports && agsx_ports_check(ports, nports, &err) < 0)) {
      reply(fd, NULL, 400, err->msg);
      agsx_error_free(&err);
      agsx_egress_clear(&egress);
      free(binds);
      return;
    }
  int64_t timeout = 0, memory = 0;
  agsx_json_get_int64(v, "timeout", &timeout);
  agsx_json_get_int64(v, "memory", &memory);
  yajl_val cpus = agsx_json_get(v, "cpus");
  yajl_val pause_on_timeout = agsx_json_get(v, "pause_on_timeout");
  struct agsx_run_spec spec = {
      .root = agsx_json_get_string(v, "root"),
      .state = agsx_json_get_string(v, "state"),
      .image = agsx_json_get_string(v, "image"),
      .pull = "never",
      .env = env,
      .labels = labels,
      .network = agsx_json_get_string(v, "network"),
      .egress = &egress,
      .binds = binds,
      .n_binds = nv,
      .ports = ports,
      .n_ports = nports,
      .timeout = (uint64_t)(timeout > 0 ? timeout : 0),
      .memory = (uint64_t)(memory > 0 ? memory : 0),
      .cpus = YAJL_IS_DOUBLE(cpus) && cpus->u.number.d > 0 ? cpus->u.number.d : 0,
      .rm = true,
      .cmd = cmd && cmd[0] ? cmd : NULL,
      .idle = !(cmd && cmd[0]),
      .user = agsx_json_get_string(v, "user"),
      .workdir = agsx_json_get_string(v, "workdir"),
      .pause_on_timeout = pause_on_timeout && YAJL_IS_TRUE(pause_on_timeout),
  };
  yajl_val np = agsx_json_get(v, "new_privs");
  spec.new_privs = np && YAJL_IS_TRUE(np);
  struct agsx_lifecycle *lc = NULL;
  if (agsx_lifecycle_create(&spec, &lc, &err) < 0) {
    reply(fd, NULL, 400, err->msg);
    agsx_error_free(&err);
    agsx_egress_clear(&egress);
    free(binds);
    return;
  }
  struct agsx_run_started st;
  int rc = agsx_lifecycle_detach(lc, &st, &err);
  agsx_lifecycle_free(lc);
  agsx_egress_clear(&egress);
  free(binds);
  if (rc < 0) {
    reply(fd, NULL, 500, err->msg);
    agsx_error_free(&err);
    return;
  }
  reply(fd, st.id, 0, NULL);
}

static _Noreturn void spawner_main(int fd) {
  /* The server's parent may have blocked or ignored signals: supervisors
   * and sandboxes start from the defaults. */
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  signal(SIGPIPE, SIG_DFL);
  signal(SIGCHLD, SIG_DFL);
  prctl(PR_SET_NAME, "agsx-spawner");
  char *buf = xmalloc(AGSX_SPAWN_MSG_MAX);
  for (;;) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int n = poll(&p, 1, 1000);
    /* Supervisors are ours until they end: reap them between requests
     * (the lifecycle waits for its own helpers inside its calls). */
    while (waitpid(-1, NULL, WNOHANG) > 0)
      ;
    if (n <= 0)
      continue;
    ssize_t len = recv(fd, buf, AGSX_SPAWN_MSG_MAX, 0);
    if (len == 0 || (len < 0 && errno != EINTR))
      _exit(0); /* the server is gone */
    if (len > 0)
      handle(fd, buf, (size_t)len);
  }
}

int agsx_spawner_start(struct agsx_spawner *sp, agsx_error_t *err) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
    return agsx_error_set(err, errno, "socketpair");
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(sv[0]);
    close(sv[1]);
    return agsx_error_set(err, e, "fork the spawner");
  }
  if (pid == 0) {
    close(sv[0]);
    spawner_main(sv[1]);
  }
  close(sv[1]);
  sp->fd = sv[0];
  sp->pid = pid;
  return 0;
}

void agsx_spawner_stop(struct agsx_spawner *sp) {
  if (sp->fd >= 0)
    close(sp->fd); /* EOF: it exits */
  sp->fd = -1;
  if (sp->pid > 0)
    waitpid(sp->pid, NULL, 0);
  sp->pid = 0;
}

int agsx_spawn(struct agsx_spawner *sp, const struct agsx_spawn_req *req, char ret_id[33],
               int *ret_status, agsx_error_t *err) {
  *ret_status = 500;
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "root", req->root);
  agsx_json_kv_str(g, "state", req->state);
  agsx_json_kv_str(g, "image", req->image);
  agsx_json_kv_str(g, "network", req->network);
  agsx_json_kv_int(g, "timeout", (int64_t)req->timeout);
  agsx_json_kv_bool(g, "pause_on_timeout", req->pause_on_timeout);
  if (req->memory)
    agsx_json_kv_int(g, "memory", (int64_t)req->memory);
  if (req->cpus > 0) {
    agsx_json_key(g, "cpus");
    yajl_gen_double(g, req->cpus);
  }
  if (req->new_privs)
    agsx_json_kv_bool(g, "new_privs", true);
  gen_strv(g, "env", req->env);
  gen_strv(g, "labels", req->labels);
  gen_strv(g, "egress", req->egress);
  gen_strv(g, "volumes", req->volumes);
  gen_strv(g, "ports", req->ports);
  gen_strv(g, "cmd", req->cmd);
  if (req->user)
    agsx_json_kv_str(g, "user", req->user);
  if (req->workdir)
    agsx_json_kv_str(g, "workdir", req->workdir);
  yajl_gen_map_close(g);
  size_t len;
  _cleanup_free_ char *msg = agsx_json_gen_steal(g, &len);
  if (len > AGSX_SPAWN_MSG_MAX)
    return *ret_status = 400, agsx_error_set(err, E2BIG, "the sandbox's settings are too large");
  if (send(sp->fd, msg, len, MSG_NOSIGNAL) < 0)
    return agsx_error_set(err, errno, "the spawner is gone");
  _cleanup_free_ char *buf = xmalloc(AGSX_SPAWN_MSG_MAX);
  ssize_t n;
  do
    n = recv(sp->fd, buf, AGSX_SPAWN_MSG_MAX, 0);
  while (n < 0 && errno == EINTR);
  if (n <= 0)
    return agsx_error_set(err, n < 0 ? errno : EPIPE, "the spawner is gone");
  _cleanup_json_ yajl_val v = agsx_json_parse(buf, (size_t)n, AGSX_SPAWN_MSG_MAX, err);
  if (v == NULL)
    return agsx_error_wrap(err, "the spawner's answer");
  const char *id = agsx_json_get_string(v, "id"), *e = agsx_json_get_string(v, "error");
  int64_t status = 500;
  agsx_json_get_int64(v, "status", &status);
  if (id == NULL || strlen(id) != 32) {
    *ret_status = status == 400 ? 400 : 500;
    return agsx_error_set(err, EINVAL, "%s", e ? e : "the spawner gave no id");
  }
  memcpy(ret_id, id, 33);
  *ret_status = 0;
  return 0;
}
