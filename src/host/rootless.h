/* agsx — host/rootless: agsx run by an ordinary user, without root and
 * without a setuid helper of agsx's own.
 *
 * An ordinary user's agsx runs every command inside a user namespace of
 * that user's own (the "user's namespace"), kept alive by a small holder
 * process, as rootless Podman keeps its pause process. Its id map is
 * written by the distribution's setuid newuidmap/newgidmap from
 * /etc/subuid and /etc/subgid:
 *
 *     namespace ids 0 … N-1  →  the user's subordinate ids S … S+N-1
 *     namespace id  N        →  the user's own uid (and gid)
 *
 * (N = 65536, or fewer when the user has fewer; when the user has more, N
 * is as many whole ranges of 65536 as the user has, up to 64.) agsx joins it with
 * setns(2), which gives it every capability there while it keeps the
 * user's own ids (so what it creates stays the user's): it creates the
 * namespaces, mounts and network namespaces of sandboxes as it does as
 * root on the host, with nothing the user could not do without it. A sandbox's user namespace maps its ids
 * 0 … N-1 onto the same ids of the user's namespace, so that a sandbox's
 * root is the user's first subordinate id on the host, never the user; the
 * user's own files are reachable by agsx (id N) and are "nobody"'s inside
 * a sandbox. Image layers are unpacked with their own ids, which are then
 * the user's first subordinate ids on disk (range 0): no idmapped mount is
 * needed (an unprivileged user may not idmap a host filesystem). With one
 * range every sandbox of the user shares it; with more, each sandbox gets
 * a range of its own while one is free, and sees the layers through copies
 * shifted to its range (sandbox/ranges.h).
 *
 * A user with no subordinate ids gets a one-id namespace (0 → the user):
 * simple commands run as the user, and what needs other ids fails naming
 * `usermod --add-subuids`. */
#ifndef AGSX_HOST_ROOTLESS_H
#define AGSX_HOST_ROOTLESS_H

#include "util/util.h"

#include <stdbool.h>
#include <sys/types.h>

struct agsx_subid {
  unsigned long start, count; /* count 0: none */
};

/* The largest range of USER (by name, or by the number UID) in TEXT, the
 * contents of /etc/subuid or /etc/subgid ("NAME:START:COUNT" lines; '#'
 * comments, malformed lines skipped), the first of equals. *RET's count is
 * 0 when the user has none. */
void agsx_subid_find(const char *text, size_t len, const char *user, unsigned long uid,
                     struct agsx_subid *ret);

/* Whether this process is an ordinary user's agsx (agsx_rootless_enter
 * has run, or it inherited the namespace from one that did). */
bool agsx_rootless(void);
/* The user's state directory agsx_rootless_enter was given (NULL when
 * not rootless): the holder's and the user-mode network's records. */
const char *agsx_rootless_state(void);
/* How many ids a sandbox gets in rootless mode (65536, fewer, or 1). */
unsigned long agsx_rootless_ids(void);
/* How many whole ranges of 65536 ids the user's namespace maps (0 when
 * it maps fewer): range 0 is the layers' and the shared one, 1 … n-1 are
 * per-sandbox ranges (sandbox/ranges.h). */
unsigned long agsx_rootless_ranges(void);

/* An ordinary user's default paths: the store ($XDG_DATA_HOME/agsx, else
 * ~/.local/share/agsx), the state ($XDG_RUNTIME_DIR/agsx) and the
 * configuration file ($XDG_CONFIG_HOME/agsx/agsx.conf, else
 * ~/.config/agsx/agsx.conf). Fails when there is no runtime directory. */
int agsx_rootless_paths(char **ret_root, char **ret_state, char **ret_config, agsx_error_t *err);

/* Whether this process is an ordinary user's agsx that must run in the
 * user's namespace: euid not 0, or agsx run again there as the one-id
 * namespace's root. */
bool agsx_rootless_wanted(void);
/* For an ordinary user (agsx_rootless_wanted): joins the user's namespace (and its
 * mount namespace), making it and its holder first when it is not there.
 * STATE: the user's state directory (the holder's pid file and lock).
 * The first time, agsx is executed again from its start inside the
 * namespace; this call then returns there. */
int agsx_rootless_enter(const char *state, agsx_error_t *err);

/* True when setgroups(2) is denied in this process's user namespace:
 * a one-id namespace (a user without subordinate ids), where the
 * sandbox's processes keep the user's supplementary groups (shown as
 * nogroup). Then a failed setgroups(0, NULL) is not an error. */
bool agsx_setgroups_denied(void);

/* What agsx info says of it, read off this process's id maps. */
struct agsx_rootless_info {
  bool active;
  unsigned long uid, gid;  /* the user, on the host */
  unsigned long ids;       /* ids a sandbox gets: 0 … ids-1 */
  unsigned long ranges;    /* whole ranges mapped (agsx_rootless_ranges) */
  unsigned long host_uid0; /* the host uid of a sandbox's uid 0 */
  unsigned long host_gid0;
  bool one_id; /* no subordinate ids: a sandbox's 0 is the user */
};
void agsx_rootless_describe(struct agsx_rootless_info *ret);

#endif
