/* agsx — the protocol between a sandbox's parent and its init, and the
 * child-side context. Private to sandbox.c, rootfs.c and init.c. */
#ifndef AGSX_SANDBOX_INTERNAL_H
#define AGSX_SANDBOX_INTERNAL_H

#include "sandbox/passwd.h"
#include "sandbox/sandbox.h"

#include <limits.h>

#include "sandbox/procexec.h"
#include "sandbox/sync.h"

struct agsx_child_ctx {
  const struct agsx_sandbox_config *cfg;
  int sync;
  char stage[PATH_MAX];      /* STATE/<id>/mnt: where the sandbox's tmpfs goes */
  int stagefd;               /* opened while still host root (0700 directories) */
  int fds[AGSX_MSG_MAX_FDS]; /* from GO: idmapped layers, then binds */
  size_t nfds;
  int rootfd; /* the new root, before pivot_root */
  struct agsx_user user;
  char **env;
  int pty_master, pty_slave;
  int64_t phase_ns[AGSX_CHILD_PHASES];
  int cgroup_fds[8]; /* v1 `tasks` files the init writes itself into */
  size_t n_cgroup_fds;
  /* After EXIT, wait for the parent's word (or its end) before exiting: a
   * foreground sandbox's systemd scope, whose last process the init is,
   * must outlive the parent's reading of it (OOM; host/cgroup.h). */
  bool exit_ack;
  int upperfd; /* cfg->keep_upper: sent with EXIT */
  int tmpfsfd; /* the sandbox's tmpfs (upper, work, layers): sent with READY */
};

/* Reports a setup failure to the parent and exits. */
_Noreturn void agsx_child_fail(struct agsx_child_ctx *c, int code, agsx_error_t *err);

#endif
