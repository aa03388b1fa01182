/* agsx — api: TLS for the listener of sandboxes' ports (serve --ports-tls).
 *
 * E2B's SDKs build a sandbox port's URL as https://PORT-ID.DOMAIN (the
 * desktop SDK's stream URL among them), so a browser given one speaks TLS
 * to the ports listener (forward.c). The TLS ends there; the sandbox's port
 * gets the plain bytes, as E2B's proxy gives them.
 *
 * The certificate is the user's (--ports-cert, --ports-key: a chain and
 * its key, PEM, for *.DOMAIN) or, without them, one agsx makes per name
 * from a CA of its own:
 *
 *   ROOT/tls/ca-key.pem  the CA's key, then its certificate (0600)
 *   ROOT/tls/ca.pem      its certificate, to trust once (0644)
 *
 * made at the first start (EC P-256, ten years) and kept, so that a
 * browser trusts it across restarts. Its name constraints confine it to
 * localhost, the names under localhost and loopback addresses: a client
 * that trusts it trusts nothing else it could sign, should its key leak.
 * A name is signed when a client asks for it (TLS SNI) and only if it is
 * localhost or under it; the leaves (a week's validity, one key per
 * server) are kept in memory and made again after a day.
 *
 * libssl.so.3 is loaded with dlopen() when the server starts with TLS
 * (as libcrypto for large hashes, util/digest.c); `agsx run` never loads
 * it. The types and constants come from OpenSSL's headers. */
#ifndef AGSX_API_TLS_H
#define AGSX_API_TLS_H

#include "util/util.h"

#include <stdint.h>
#include <sys/types.h>

struct agsx_tls;

/* A server context: with CERT and KEY (files, both or neither) the user's
 * certificate, else agsx's CA under ROOT (made if missing), whose
 * certificate's path is then *RET_CA (the caller frees it). */
struct agsx_tls *agsx_tls_server_new(const char *root, const char *cert, const char *key,
                                     char **ret_ca, agsx_error_t *err);
void agsx_tls_server_free(struct agsx_tls *t);

/* Whether agsx's CA signs NAME (SNI): localhost or a name under it, of
 * letters, digits and hyphens, at most 253 characters, any case. */
bool agsx_tls_name_signable(const char *name);

/* One connection on FD (non-blocking; the caller keeps and closes it). */
struct agsx_tls_conn *agsx_tls_conn_new(struct agsx_tls *t, int fd, agsx_error_t *err);
void agsx_tls_conn_free(struct agsx_tls_conn *c);

/* The handshake, one step: 1 done, 0 not yet (*WANT: EPOLLIN, EPOLLOUT),
 * -1 failed. */
int agsx_tls_handshake(struct agsx_tls_conn *c, uint32_t *want);

/* As recv and send: bytes moved, 0 at the peer's end (read), or -1 with
 * errno EAGAIN (*WANT says on what) or EIO. */
ssize_t agsx_tls_read(struct agsx_tls_conn *c, void *buf, size_t len, uint32_t *want);
ssize_t agsx_tls_write(struct agsx_tls_conn *c, const void *buf, size_t len, uint32_t *want);

/* Bytes decrypted and not yet read (epoll does not see them). */
size_t agsx_tls_pending(struct agsx_tls_conn *c);

/* Says the end of what this side sends (close_notify), once. */
void agsx_tls_close_notify(struct agsx_tls_conn *c);

#endif
