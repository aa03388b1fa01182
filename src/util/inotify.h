/* agsx — util: inotify instances shared by many watchers, within a budget.
 *
 * Every inotify instance counts against its user's fs.inotify.
 * max_user_instances (128 by default, for the whole host) and every watch
 * against max_user_watches. A server that gave each watcher and each
 * followed log an instance of its own, as host root, could use up root's
 * instances for every other program on the host (systemd, udev, editors:
 * their inotify_init fails). A hub shares a few instances among any number
 * of subscriptions and never takes more than a bounded part of the host's
 * limits, read when it is made:
 *
 *   instances  at most max_user_instances / 8 (at least 1), created as
 *              groups need them and closed a while after their last watch
 *              went (closing one that just had watches waits for the
 *              kernel: tens of ms)
 *   watches    at most max_user_watches / 8 in all, and a per-group bound
 *              given with each subscription
 *
 * A group (a sandbox's id, "logs") gets an instance of its own while the
 * budget allows, so one group's flood of events (a queue overflow) is
 * its own; beyond that groups share the least loaded instance. The same
 * inode watched twice in an instance is one kernel watch with several
 * subscribers: each gets every event of it that its mask asks for, and
 * the watch goes with its last subscriber. IN_Q_OVERFLOW (wd -1) goes to
 * every subscriber of the instance, IN_IGNORED to every subscriber of the
 * watch (which is gone then: the subscriber still calls agsx_inotify_rm).
 *
 * The hub is a poll component: its one fd (an epoll over its instances)
 * is readable when events wait; agsx_inotify_dispatch() delivers them and
 * closes idle instances (agsx_inotify_timeout_ms says when). One thread:
 * subscriptions may be removed from inside a callback. */
#ifndef AGSX_UTIL_INOTIFY_H
#define AGSX_UTIL_INOTIFY_H

#include "util/util.h"

#include <stdint.h>
#include <sys/inotify.h>

struct agsx_inotify;
struct agsx_inotify_sub;

/* Called for each event of a subscription; NULL: none (a subscriber that
 * only needs the hub's fd to wake its loop, as a log follower). */
typedef void (*agsx_inotify_fn)(void *data, const struct inotify_event *ev);

/* The budget from the host's limits (fs.inotify.max_user_instances and
 * max_user_watches, their defaults when unreadable). */
struct agsx_inotify_budget {
  unsigned instances, watches;
};
void agsx_inotify_budget_host(struct agsx_inotify_budget *ret);

/* A hub within BUDGET (agsx_inotify_budget_host's when NULL). */
int agsx_inotify_new(const struct agsx_inotify_budget *budget, struct agsx_inotify **ret,
                     agsx_error_t *err);
/* Closes the instances; subscriptions left are freed too. */
void agsx_inotify_free(struct agsx_inotify *h);

/* Watches the inode at FD (as /proc/self/fd/FD: no path is walked) for
 * MASK (IN_* events, plus IN_ONLYDIR and the like) in GROUP, which holds
 * at most GROUP_MAX watches (0: no bound but the hub's). ENOSPC with a
 * message that says which bound when the budget is used up; the kernel's
 * errors otherwise. */
int agsx_inotify_add(struct agsx_inotify *h, const char *group, unsigned group_max, int fd,
                     uint32_t mask, agsx_inotify_fn fn, void *data, struct agsx_inotify_sub **ret,
                     agsx_error_t *err);
/* Ends a subscription (NULL: nothing); the kernel's watch goes with its
 * last subscriber. */
void agsx_inotify_rm(struct agsx_inotify_sub *s);
/* The watch descriptor of S in its instance (events carry it). */
int agsx_inotify_wd(const struct agsx_inotify_sub *s);

int agsx_inotify_fd(const struct agsx_inotify *h);
/* Delivers what the instances hold (never blocks) and closes instances
 * idle long enough. */
void agsx_inotify_dispatch(struct agsx_inotify *h);
/* Until the next idle instance may be closed; -1: none. */
int agsx_inotify_timeout_ms(const struct agsx_inotify *h);

/* What the hub holds now: instances, watches (kernel marks), and GROUP's
 * watches (NULL: 0). */
void agsx_inotify_usage(const struct agsx_inotify *h, const char *group, unsigned *ret_instances,
                        unsigned *ret_watches, unsigned *ret_group_watches);

#endif
