/* agsx — api: the JSON request bodies that carry more than a field or two,
 * parsed and checked as pure functions (fuzzed: test/fuzz/fuzz_apibody.c).
 * A failure sets *RET_STATUS to the HTTP status the client gets (400 for
 * bad input, 501 for what agsx does not do) and ERR to the message. */
#ifndef AGSX_API_BODY_H
#define AGSX_API_BODY_H

#include "util/json.h"
#include "util/util.h"

/* NewSandbox / NewSandboxV2 (e2b-protocol.md §2.1). */
struct agsx_api_create {
  char *template_id;     /* default "base" */
  int64_t timeout;       /* seconds; 0: the default */
  bool internet;         /* allow_internet_access (default true) */
  char **env;            /* envVars as KEY=VALUE */
  char **metadata;       /* as KEY=VALUE; keys starting with e2b. refused */
  char **egress;         /* network.allowOut/denyOut as egress rule lines (net/egress.h) */
  char **volumes;        /* volumeMounts as NAME:/path (a valid volume name, a clean path) */
  bool pause_on_timeout; /* autoPause: paused, not killed, at the timeout */
  bool auto_resume;      /* autoResume.enabled: a request to it resumes it */
  bool private_ports;    /* network.allowPublicTraffic false: its ports need its traffic token */
};
void agsx_api_create_clear(struct agsx_api_create *c);
/* NET ({"allowOut": [...], "denyOut": [...]}, or null) as egress rule lines
 * ("allow pypi.org"); NULL when there are none. */
int agsx_api_egress_parse(yajl_val net, char ***ret_rules, int *ret_status, agsx_error_t *err);
/* volumeMounts ([{"name": "v", "path": "/mnt"}], or null) as NAME:/path
 * strings: names valid (sandbox/volume.h), paths absolute, clean, unique
 * and not /, /proc, /dev or /sys. */
int agsx_api_volume_mounts_parse(yajl_val v, char ***ret, int *ret_status, agsx_error_t *err);
int agsx_api_create_parse(const char *buf, size_t len, struct agsx_api_create *ret, int *ret_status,
                          agsx_error_t *err);

/* process.Process/Start's StartRequest. */
struct agsx_api_start {
  char *cmd;
  char **args;
  char **envs; /* KEY=VALUE */
  char *cwd;   /* NULL: none */
  char *tag;   /* NULL: none */
  bool pty;
  unsigned cols, rows;
  bool stdin_open; /* absent: true, as envd for old clients */
};
void agsx_api_start_clear(struct agsx_api_start *s);
int agsx_api_start_parse(const char *buf, size_t len, struct agsx_api_start *ret,
                         agsx_error_t *err);

#endif
