/* agsx — sync: the messages between a sandbox's parent and its init, and
 * between `exec` and its child: one fixed-size struct per SOCK_SEQPACKET
 * message, fds in SCM_RIGHTS. Used by sandbox.c (the parent), init.c (the
 * init), exec.c and procexec.c (an error before exec). */
#ifndef AGSX_SYNC_H
#define AGSX_SYNC_H

#include "util/util.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum agsx_msg_type {
  AGSX_MSG_GO = 1, /* P→C: maps written, cgroup joined; fds: layers, then binds */
  AGSX_MSG_READY,  /* C→P: the command was exec'd; fds (code says which): the pty
                      master with -t, the sandbox's tmpfs (image sandboxes) */
  AGSX_MSG_ERROR,  /* C→P: setup or exec failed; code = 125/126/127, text */
  AGSX_MSG_EXIT,   /* C→P: the command ended; status = its wait status */
  AGSX_MSG_CLAIM,  /* P→C: a parked sandbox's command (sandbox/pool.h); fds: its
                      stdin, stdout, stderr (code = how many: 0 or 3); the next
                      message is the claim (agsx_claim_encode), then C answers
                      READY or ERROR as at a start */
};

/* READY's code: the fds it carries, in this order. */
#define AGSX_READY_PTY 1
#define AGSX_READY_TMPFS 2

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

/* 0, or -errno (-EMSGSIZE: sent short). */
int agsx_msg_send(int sock, const struct agsx_msg *m, const int *fds, size_t nfds);
/* Receives one message and up to MAXFDS fds (CLOEXEC). 0 on EOF, -errno. */
ssize_t agsx_msg_recv(int sock, struct agsx_msg *m, int *fds, size_t maxfds, size_t *ret_nfds);

/* Any one message of LEN bytes (a claim's, pool-claim.c) with up to
 * AGSX_MSG_MAX_FDS fds in SCM_RIGHTS, retried on EINTR, without SIGPIPE:
 * 0 or -errno. The same fd passing as agsx_msg_send's, for messages that
 * are not struct agsx_msg. */
int agsx_send_fds(int sock, const void *buf, size_t len, const int *fds, size_t nfds);
/* Receives one message of at most CAP bytes into BUF (recvmsg FLAGS, plus
 * MSG_CMSG_CLOEXEC), its first MAXFDS fds into FDS (*RET_NFDS of them; the
 * rest are closed) and the message's flags (MSG_TRUNC, MSG_CTRUNC) into
 * *RET_MSG_FLAGS: its length, 0 on EOF, -errno. */
ssize_t agsx_recv_fds(int sock, void *buf, size_t cap, int flags, int *fds, size_t maxfds,
                      size_t *ret_nfds, int *ret_msg_flags);

#endif
