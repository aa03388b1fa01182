/* agsx — api: admission, the one door of every request (see api-internal.h).
 *
 * Every request passes here once its headers are in, before a byte of its
 * body is read and before any route runs; a route never checks a
 * credential itself. So a route added later, on any port, is guarded by
 * the rule below and not by whether its handler remembered to check.
 *
 *   control plane (no E2b-Sandbox-Id)   X-API-KEY
 *   a sandbox's port 49983 (envd)       X-Access-Token (its envd token)
 *   a sandbox's other ports (49999)     X-Access-Token, or
 *                                       E2B-Traffic-Access-Token (its traffic token)
 *   exceptions                          GET /health on every port: none;
 *                                       GET and POST /files on 49983: the token
 *                                       or a signed URL (e2b-protocol.md §3.2);
 *                                       a signed /files URL without
 *                                       E2b-Sandbox-Id: the sandbox whose
 *                                       token signs it
 *
 * Before the credentials, the Host and any Origin must be this server's
 * (wire.h): a web page reaching a loopback server through DNS rebinding
 * sends neither its token nor a Host of ours.
 *
 * The traffic token is what E2B gives for a sandbox's ports other than
 * envd's (the code interpreter's SDK sends it with every request, the
 * envd token only with /execute); it opens those ports and not envd.
 *
 * Admitted, a request to a paused sandbox created with autoResume resumes
 * it (agsx_api_autoresume): only a request with credentials does. */
#include "config.h"

#include "api/api-internal.h"
#include "api/auth.h"
#include "api/fsops.h"

#include <string.h>

#define TOKEN_MSG                                                                                  \
  "unauthorized access, please provide a valid access token or method signing if supported"

/* The port a sandbox request is for: E2b-Sandbox-Port, 49983 when absent. */
static unsigned request_port(struct req *r) {
  const char *p = agsx_req_header(r, "E2b-Sandbox-Port");
  if (p == NULL)
    return AGSX_API_PORT_ENVD;
  char *end;
  errno = 0;
  unsigned long n = strtoul(p, &end, 10);
  return errno || *end || p[0] == '\0' || n == 0 || n > 65535 ? 0 : (unsigned)n;
}

static void respond_port_closed(struct req *r) {
  const char *port = agsx_req_header(r, "E2b-Sandbox-Port");
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "sandboxId", r->e2b_id);
  agsx_json_kv_str(g, "message", "The sandbox is running but port is not open");
  agsx_json_kv_str(g, "port", port ? port : "");
  agsx_json_kv_int(g, "code", 502);
  yajl_gen_map_close(g);
  agsx_respond_json(r, 502, g);
}

/* GET and POST /files of envd: the token when one is sent, else a signed URL. */
static bool files_signed(struct req *r, const char *token) {
  const char *operation = strcmp(r->method, "GET") == 0 ? "read" : "write";
  const char *sig = agsx_req_query(r, "signature");
  const char *path = agsx_req_query(r, "path"), *user = agsx_req_query(r, "username");
  agsx_error_t err = NULL;
  if (sig && agsx_fs_signature_check(path ? path : "", operation, user ? user : "", token, sig,
                                     agsx_req_query(r, "signature_expiration"),
                                     agsx_now_ns() / 1000000000LL, &err) == 0)
    return true;
  agsx_respond_error(r, 401, "%s", err ? err->msg : TOKEN_MSG);
  agsx_error_free(&err);
  return false;
}

/* A signed /files URL without E2b-Sandbox-Id: the SDK's downloadUrl() and
 * uploadUrl() build it on E2B_SANDBOX_URL, one base for every sandbox,
 * and a plain fetch() of it sends no E2b-Sandbox-Id. Its sandbox is the
 * one whose envd token signs it: one hash per sandbox directory (a
 * readdir), and only the record of the one found is read, so a bad
 * signature from anyone costs hashes, never a read of every record. Then
 * the request is that sandbox's if it is a running API sandbox, admitted
 * or refused as envd would (401: an invalid or expired signature). */
static bool files_signed_any(struct req *r) {
  const char *operation = strcmp(r->method, "GET") == 0 ? "read" : "write";
  const char *sig = agsx_req_query(r, "signature");
  const char *path = agsx_req_query(r, "path"), *user = agsx_req_query(r, "username");
  const char *exp = agsx_req_query(r, "signature_expiration");
  _cleanup_strv_ char **ids = NULL;
  agsx_error_t err = NULL;
  if (agsx_state_list(r->s->statefd, &ids, &err) < 0)
    agsx_error_free(&err);
  const char *found = NULL;
  for (char **id = ids; id && *id && !found; id++) {
    char token[65];
    agsx_api_envd_token(r->s->key, *id, token);
    /* At time 0 no expiration has passed: whether it is this token's. */
    if (agsx_fs_signature_check(path ? path : "", operation, user ? user : "", token, sig, exp, 0,
                                NULL) == 0)
      found = *id;
  }
  /* (a running API sandbox: find_sandbox's rule) */
  if (found)
    snprintf(r->e2b_id, sizeof(r->e2b_id), "%.20s", found);
  if (!found || agsx_api_find_sandbox(r->s, r->e2b_id, &r->rec, &err) < 0) {
    agsx_error_free(&err);
    agsx_respond_error(r, 401, "invalid signature");
    return false;
  }
  r->has_rec = true;
  r->envd = true;
  r->port = AGSX_API_PORT_ENVD;
  char envd[65];
  agsx_api_envd_token(r->s->key, r->rec.id, envd);
  return files_signed(r, envd); /* now with the time: expired or not */
}

/* The token rule of a sandbox's route (the table above). */
static bool sandbox_credentials(struct req *r) {
  bool get = strcmp(r->method, "GET") == 0;
  if (get && strcmp(r->path, "/health") == 0)
    return true;
  char envd[65];
  agsx_api_envd_token(r->s->key, r->rec.id, envd);
  const char *given = agsx_req_header(r, "X-Access-Token");
  if (agsx_api_secret_equal(given, envd))
    return true;
  if (r->port == AGSX_API_PORT_ENVD) {
    bool files = strcmp(r->path, "/files") == 0 && (get || strcmp(r->method, "POST") == 0);
    if (files && given == NULL)
      return files_signed(r, envd);
  } else {
    char traffic[65];
    agsx_api_traffic_token(r->s->key, r->rec.id, traffic);
    if (agsx_api_secret_equal(agsx_req_header(r, "E2B-Traffic-Access-Token"), traffic))
      return true;
  }
  agsx_respond_error(r, 401, TOKEN_MSG);
  return false;
}

/* Against DNS rebinding (wire.h): the Host is this server's and an Origin,
 * when a browser sends one, is too. */
static bool host_admitted(struct req *r) {
  bool origin;
  const char *v;
  if (agsx_mhd_host_allowed(r->c, r->s->hosts, &origin, &v))
    return true;
  if (origin)
    agsx_respond_error(r, 403, "cross-site request refused (origin `%.64s`)", v);
  else
    agsx_respond_error(r, 403,
                       "host `%.64s` is not this server's (its listen address, localhost, or a "
                       "name of serve --host)",
                       v);
  return false;
}

bool agsx_api_admit(struct req *r) {
  if (!host_admitted(r))
    return false;
  if (!r->envd) {
    if (agsx_api_secret_equal(agsx_req_header(r, "X-API-KEY"), r->s->key))
      return true;
    if (strcmp(r->path, "/files") == 0 && agsx_req_query(r, "signature") &&
        (strcmp(r->method, "GET") == 0 || strcmp(r->method, "POST") == 0))
      return files_signed_any(r);
    agsx_respond_error(r, 401, "invalid API key");
    return false;
  }
  const char *id = agsx_req_header(r, "E2b-Sandbox-Id");
  snprintf(r->e2b_id, sizeof(r->e2b_id), "%.20s", id ? id : "");
  agsx_error_t err = NULL;
  if (agsx_api_find_sandbox(r->s, id ? id : "", &r->rec, &err) < 0) {
    agsx_error_free(&err);
    agsx_api_respond_gone(r);
    return false;
  }
  r->has_rec = true;
  r->port = request_port(r);
  if (r->port != AGSX_API_PORT_ENVD && r->port != AGSX_API_PORT_CODE) {
    respond_port_closed(r);
    return false;
  }
  return sandbox_credentials(r) && agsx_api_autoresume(r);
}
