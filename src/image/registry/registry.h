/* agsx — registry: pulling and pushing images over the OCI distribution API.
 *
 * libcurl is not linked: agsx links its libraries statically for a fast
 * start, and libcurl's ~30 shared dependencies would cost milliseconds at
 * every `agsx run`. It is dlopen()ed ("libcurl.so.4") the first time a pull
 * needs it.
 *
 * Every registry response is untrusted: sizes are bounded, JSON goes through
 * the bounded parsers of json.h/image.h, every blob is checked against its
 * digest and size and every layer against its diff_id before the image is
 * named. Layer blobs are downloaded into ROOT/partial/ (kept when a pull is
 * interrupted, resumed with an HTTP Range request by the next pull), then
 * staged and committed like an import: an image is listed only once it is
 * complete, its ref written last. */
#ifndef AGSX_REGISTRY_H
#define AGSX_REGISTRY_H

#include "util/digest.h"
#include "util/util.h"

/* Bounds on registry responses. */
#define AGSX_REGISTRY_TOKEN_MAX (1u << 20)    /* token response */
#define AGSX_REGISTRY_AUTHFILE_MAX (1u << 20) /* config.json */
#define AGSX_REGISTRY_CHALLENGE_MAX 4096      /* WWW-Authenticate */
#define AGSX_REGISTRY_PARALLEL 4              /* concurrent layer downloads */
#define AGSX_REGISTRY_ORIGIN_MAX 300          /* "https://" host ":" port */

/* Progress of a pull, reported a few times a second while layers download
 * (and once at the end). */
struct agsx_pull_progress {
  size_t layers_total, layers_done, layers_skipped; /* skipped: already in the store */
  int64_t bytes_total, bytes_done;                  /* of the layers being downloaded */
};

struct agsx_pull_opts {
  /* Docker config.json with credentials; NULL: $DOCKER_CONFIG/config.json,
   * else ~/.docker/config.json (a missing default file means anonymous). */
  const char *authfile;
  /* Allow plain HTTP (and unverified TLS) to this registry. Registries in
   * $AGSX_INSECURE_REGISTRIES (host:port,...) and localhost/127.0.0.1/[::1]
   * are insecure anyway. */
  bool insecure;
  void (*progress)(const struct agsx_pull_progress *p, void *data);
  void *data;
};

struct agsx_pull_result {
  char *name;                            /* fully qualified: "docker.io/library/busybox:latest" */
  char *ref;                             /* the store's name for it: "busybox:latest" */
  char digest[AGSX_DIGEST_LEN];          /* what the registry resolved REF to (index or manifest) */
  char manifest_digest[AGSX_DIGEST_LEN]; /* the linux/amd64 manifest: the image's id in the store */
};
void agsx_pull_result_clear(struct agsx_pull_result *r);

/* When `run` and `build` pull an image: missing (the default: only when
 * the store lacks it, as Docker does), always (a fresh pull first) or
 * never. */
enum agsx_pull_policy { AGSX_PULL_MISSING, AGSX_PULL_ALWAYS, AGSX_PULL_NEVER };
int agsx_pull_policy_parse(const char *s, enum agsx_pull_policy *ret, agsx_error_t *err);
/* $AGSX_PULL if set (an error when it names no policy), else missing. */
int agsx_pull_policy_default(enum agsx_pull_policy *ret, agsx_error_t *err);

/* Pulls REF ("python:3.12", "user/x", "host:5000/a/b@sha256:…") into the
 * store at ROOT (created if needed) and names it RET->ref. Manifest lists
 * and OCI indexes resolve to linux/amd64; other platforms are refused by
 * name. Blobs already in the store are not downloaded. O may be NULL.
 * Errors: "pull `REF`: ..." (no registry contact needed to fail cleanly
 * when libcurl is missing: "pull needs libcurl (apt-get install libcurl4)"). */
int agsx_pull(const char *root, const char *ref, const struct agsx_pull_opts *o,
              struct agsx_pull_result *ret, agsx_error_t *err);

/* ---- push ---- */
struct agsx_push_opts {
  const char *authfile; /* as for pull */
  bool insecure;
};

struct agsx_push_result {
  char *name;                   /* fully qualified: "host:5000/team/tool:1" */
  char digest[AGSX_DIGEST_LEN]; /* the manifest's, as the registry stores it */
};
void agsx_push_result_clear(struct agsx_push_result *r);

/* Pushes IMAGE (a name or id in the store at ROOT) to DEST
 * ("[REGISTRY/]REPO[:TAG]"; NULL: IMAGE's own name, which then names the
 * registry, as with docker push) over the OCI distribution API: each blob
 * is checked with HEAD and uploaded (POST, then PUT with its digest) when
 * the registry lacks it, then the manifest is PUT under TAG with its media
 * type, byte for byte (the digest stays the image's id). Authentication
 * (token scope pull,push), TLS, insecure registries and credentials are
 * those of pull. Errors: "push `IMAGE`: ...". */
int agsx_push(const char *root, const char *image, const char *dest, const struct agsx_push_opts *o,
              struct agsx_push_result *ret, agsx_error_t *err);

/* ---- parsers of untrusted input, exposed for tests and fuzzing ---- */

/* A WWW-Authenticate challenge: `Bearer realm="…",service="…",scope="…"` or
 * `Basic realm="…"`. SCHEME is lowercased; absent parameters are NULL. */
struct agsx_auth_challenge {
  char *scheme, *realm, *service, *scope;
};
int agsx_registry_parse_challenge(const char *hdr, size_t len, struct agsx_auth_challenge *ret,
                                  agsx_error_t *err);
void agsx_auth_challenge_clear(struct agsx_auth_challenge *c);

/* The bearer token of a token-server response ({"token": …} or
 * {"access_token": …}). */
int agsx_registry_parse_token(const char *buf, size_t len, char **ret_token, agsx_error_t *err);

/* Credentials for DOMAIN ("docker.io", "host:5000") from a Docker
 * config.json: `auths` entries keyed by host or URL, with a base64 `auth`
 * ("user:password") or `username`/`password`. Returns 1 and fills
 * RET_USER/RET_PASSWORD when found, 0 when the file has none for DOMAIN. */
int agsx_registry_parse_auths(const char *buf, size_t len, const char *domain, char **ret_user,
                              char **ret_password, agsx_error_t *err);

/* The origin of an absolute http(s) URL, "SCHEME://HOST:PORT", lowercased
 * and with the default port made explicit: what decides where credentials
 * may go. URLs with user info, without a host or with a bad port are
 * refused. */
int agsx_registry_url_origin(const char *url, char ret[AGSX_REGISTRY_ORIGIN_MAX],
                             agsx_error_t *err);

/* The URL an upload's Location header LOC names, relative to the request's
 * URL BASE: absolute http(s), or an absolute path on BASE's origin. */
int agsx_registry_resolve_location(const char *base, const char *loc, char **ret,
                                   agsx_error_t *err);

#endif
