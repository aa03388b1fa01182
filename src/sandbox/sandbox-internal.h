/* agsx — the protocol between a sandbox's parent and its init, and the
 * child-side context. Private to sandbox.c, rootfs.c and init.c. */
#ifndef AGSX_SANDBOX_INTERNAL_H
#define AGSX_SANDBOX_INTERNAL_H

#include "sandbox/passwd.h"
#include "sandbox/sandbox.h"

#include <limits.h>

enum agsx_msg_type {
  AGSX_MSG_GO = 1, /* P→C: maps written, cgroup joined; fds: layers, then binds */
  AGSX_MSG_READY,  /* C→P: the command was exec'd; fd: pty master with -t */
  AGSX_MSG_ERROR,  /* C→P: setup or exec failed; code = 125/126/127, text */
  AGSX_MSG_EXIT,   /* C→P: the command ended; status = its wait status */
};

/* One SCM_RIGHTS message carries at most 253 fds (SCM_MAX_FD): the layers,
 * the volumes and the sysfs of a sandbox must fit in the GO message. */
#define AGSX_MSG_MAX_FDS 250

#define AGSX_CHILD_PHASES 6
struct agsx_msg {
  int type;
  int code;
  int status;
  int err;
  int64_t phase_ns[AGSX_CHILD_PHASES]; /* READY: monotonic times of the init's steps */
  char text[1024];
};

int agsx_msg_send(int sock, const struct agsx_msg *m, const int *fds, size_t nfds);
/* Receives one message and up to MAXFDS fds (CLOEXEC). 0 on EOF. */
ssize_t agsx_msg_recv(int sock, struct agsx_msg *m, int *fds, size_t maxfds, size_t *ret_nfds);

struct agsx_child_ctx {
  const struct agsx_sandbox_config *cfg;
  int sync;
  char stage[PATH_MAX]; /* STATE/<id>/mnt: where the sandbox's tmpfs goes */
  int stagefd;          /* opened while still host root (0700 directories) */
  int fds[AGSX_MSG_MAX_FDS]; /* from GO: idmapped layers, then binds */
  size_t nfds;
  int rootfd; /* the new root, before pivot_root */
  struct agsx_user user;
  char **env;
  int pty_master, pty_slave;
  int64_t phase_ns[AGSX_CHILD_PHASES];
  int cgroup_fds[8]; /* v1 `tasks` files the init writes itself into */
  size_t n_cgroup_fds;
  int upperfd; /* cfg->keep_upper: sent with EXIT */
};

/* The last steps of a command inside a sandbox (run's command and exec's):
 * session and terminal, cwd, groups and ids, capabilities, no_new_privs,
 * fd sweep, signal state, seccomp, exec. On failure an AGSX_MSG_ERROR goes
 * to ERRFD (code 126/127/125). */
struct agsx_proc_spec {
  char **argv, **env;
  const char *cwd;
  const struct agsx_user *user;
  int tty_slave; /* -1: none */
  const struct agsx_seccomp_bpf *seccomp;
};
_Noreturn void agsx_proc_exec(const struct agsx_proc_spec *p, int errfd);
char **agsx_child_build_env(char **in, const char *hostname, const struct agsx_user *u, bool tty);
int agsx_child_open_pty(int *ret_master, int *ret_slave, agsx_error_t *err);
/* Resolves SPEC against the /etc of the current root (inside the sandbox). */
int agsx_child_read_user(const char *spec, struct agsx_user *ret, agsx_error_t *err);

/* Reports a setup failure to the parent and exits. */
_Noreturn void agsx_child_fail(struct agsx_child_ctx *c, int code, agsx_error_t *err);

#endif
