/* agsx — api: the spawner, the process that starts the server's sandboxes.
 *
 * Creating a sandbox forks its supervisor (agsx_lifecycle_detach), and a
 * forked supervisor keeps every fd of the process it was forked from: in
 * the server that would be the listening socket, the clients' connections
 * and libmicrohttpd's epoll, held for the sandbox's whole life (a SIGKILLed
 * server could then not listen again, and its clients would never see
 * their connections close). So the server forks, before it opens anything,
 * a small spawner whose only fds are its stdio and one end of a
 * SOCK_SEQPACKET pair; the server sends it a create request, it runs the
 * lifecycle and answers with the new id or the error. Supervisors are the
 * spawner's children, in sessions of their own. The spawner ends when the
 * server does (it reads EOF). */
#ifndef AGSX_API_SPAWN_H
#define AGSX_API_SPAWN_H

#include "util/util.h"

#define AGSX_SPAWN_MSG_MAX (256u << 10)

struct agsx_spawner {
  int fd;    /* the server's end */
  pid_t pid; /* the spawner */
};

/* What to create: strings and vectors borrowed. */
struct agsx_spawn_req {
  const char *root, *state, *image, *network;
  char **env, **labels;
  char **egress;  /* egress rules ("allow pypi.org", net/egress.h), or NULL */
  char **volumes; /* named volumes to mount, NAME:/path (sandbox/volume.h), or NULL */
  char **ports;   /* ports to publish, as -p takes them (net/relay.h), or NULL */
  /* the command (NULL: none, the sandbox idles and its processes come
   * through processes.h), and its user and working directory (NULL: the
   * image's) */
  char **cmd;
  const char *user, *workdir;
  uint64_t timeout;
  uint64_t memory;       /* bytes, 0: the default */
  double cpus;           /* 0: no limit */
  bool pause_on_timeout; /* lifecycle.onTimeout "pause" (agsx_run_spec) */
  bool new_privs;        /* the template's no-new-privileges=false (sandbox/procexec.h) */
};

int agsx_spawner_start(struct agsx_spawner *sp, agsx_error_t *err);
void agsx_spawner_stop(struct agsx_spawner *sp);
/* Creates the sandbox; *RET_STATUS is the HTTP status of a failure (400:
 * the request, e.g. an unknown image; 500: agsx itself). */
int agsx_spawn(struct agsx_spawner *sp, const struct agsx_spawn_req *req, char ret_id[33],
               int *ret_status, agsx_error_t *err);

#endif
