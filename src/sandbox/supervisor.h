/* agsx — sandbox: the supervisor's state and its poll loop (internal to
 * lifecycle.c and supervisor.c).
 *
 * The supervisor is one poll loop of components. Each has the shape of the
 * relay's poll API (net/relay.h): an upper bound of its pollfds, fill,
 * dispatch (with the same slice of the array back after poll), a poll
 * timeout, and a drain run once the sandbox's command has ended. They are
 * dispatched in table order; the sync socket comes last, so what the others
 * read in a round is handled before the loop ends on the command's exit. */
#ifndef AGSX_SANDBOX_SUPERVISOR_H
#define AGSX_SANDBOX_SUPERVISOR_H

#include "net/net.h"
#include "net/relay.h"
#include "sandbox/lifecycle.h"
#include "sandbox/logbuf.h"
#include "sandbox/output.h"
#include "sandbox/sandbox.h"
#include "sandbox/seccomp.h"
#include "image/store.h"

#include <poll.h>

struct agsx_store;
struct agsx_procs;
struct agsx_pool_sup;

struct prepared {
  const char *image_name;
  struct agsx_store *store;
  struct agsx_image_info info;
  char **argv, **env;
  struct agsx_seccomp_bpf bpf;
  char hostname[65];
  char **layers; /* the image's and spec->extra_layers, when there are extra ones */
  /* The spec's binds with its named volumes resolved (sandbox/volume.h),
   * when it has any; volume_lock holds them in use for the sandbox's life. */
  struct agsx_bind *binds;
  size_t n_binds;
  int volume_lock;
  /* The systemd scope's description (host/cgroup.h), for a person reading
   * systemd-cgls or systemctl status. */
  char description[192];
};

struct sup {
  const struct agsx_run_spec *o;
  struct prepared *p;
  struct agsx_sandbox_config *cfg;
  struct agsx_sandbox *sb;
  struct agsx_net_attach *net;
  struct agsx_relay *relay; /* published ports, or NULL */
  struct agsx_relay *dns;   /* the DNS relay (public, vpc), or NULL */
  struct pollfd *pfd;       /* the loop's, grown with the components' needs */
  size_t pfd_cap;
  int sigfd, timerfd, devnull;
  struct agsx_output out[2];
  struct agsx_log_writer *log; /* detached: the command's output (STATE/<id>/log) */
  struct agsx_procs *procs;    /* detached: the control socket and owned processes */
  struct agsx_pool_sup *pool;  /* a pool's sandbox: its claim (sandbox/pool.h) */
  bool detached, handed_off;
  int64_t teardown_ns, release_ns; /* release: the sandbox's mounts (--timing) */
  int64_t starting_ns;             /* agsx_mono_ns when the sandbox's own start began (--timing) */
  bool cancelled;
  char *cut; /* cut_kills: why the firewall cut the sandbox off */
  bool stopping, killed, recorded;
  bool reload_pending; /* an update's record could not be read yet */
  int64_t restart_seq; /* the last rollback done (agsx_sup_restart) */
  enum agsx_stop_reason stop_reason;
  int64_t started, deadline; /* deadline: seconds, as recorded (rounded up) */
  int64_t deadline_ns;       /* the timer's: exact */
  /* the loop's */
  int stdin_closed, master_closed;
  bool done;             /* the command ended */
  agsx_error_t loop_err; /* the loop failed */
};

/* Runs until the command ends; returns 0 or -1 (err set). */
int agsx_supervise(struct sup *f, agsx_error_t *err);
/* Arms the deadline timer at f->deadline_ns. */
void agsx_sup_arm_deadline(struct sup *f);
/* The relays' share of the fds (see supervisor.c). */
void agsx_sup_budget_relays(struct sup *f);

#endif
