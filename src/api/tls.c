/* agsx — api: TLS for the ports listener through a dlopen()ed libssl (see tls.h). */
#include "config.h"

#include "api/tls.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#define LEAF_CACHE 128                         /* names signed and kept */
#define LEAF_DAYS 7                            /* a leaf's validity */
#define LEAF_FRESH_NS (86400LL * 1000000000LL) /* made again after a day */
#define CA_DAYS 3650

/* ---- the library ----------------------------------------------------------------------- */

static struct {
  void *handle;
  /* libssl */
  const SSL_METHOD *(*TLS_server_method)(void);
  SSL_CTX *(*SSL_CTX_new)(const SSL_METHOD *m);
  void (*SSL_CTX_free)(SSL_CTX *c);
  long (*SSL_CTX_ctrl)(SSL_CTX *c, int cmd, long larg, void *parg);
  long (*SSL_CTX_callback_ctrl)(SSL_CTX *c, int cmd, void (*fp)(void));
  uint64_t (*SSL_CTX_set_options)(SSL_CTX *c, uint64_t op);
  int (*SSL_CTX_use_certificate)(SSL_CTX *c, X509 *x);
  int (*SSL_CTX_use_PrivateKey)(SSL_CTX *c, EVP_PKEY *k);
  int (*SSL_CTX_use_certificate_chain_file)(SSL_CTX *c, const char *file);
  int (*SSL_CTX_use_PrivateKey_file)(SSL_CTX *c, const char *file, int type);
  int (*SSL_CTX_check_private_key)(const SSL_CTX *c);
  SSL *(*SSL_new)(SSL_CTX *c);
  void (*SSL_free)(SSL *s);
  int (*SSL_set_fd)(SSL *s, int fd);
  int (*SSL_accept)(SSL *s);
  int (*SSL_read)(SSL *s, void *buf, int num);
  int (*SSL_write)(SSL *s, const void *buf, int num);
  int (*SSL_get_error)(const SSL *s, int ret);
  int (*SSL_shutdown)(SSL *s);
  int (*SSL_pending)(const SSL *s);
  const char *(*SSL_get_servername)(const SSL *s, int type);
  int (*SSL_use_certificate)(SSL *s, X509 *x);
  int (*SSL_use_PrivateKey)(SSL *s, EVP_PKEY *k);
  /* libcrypto */
  unsigned long (*ERR_get_error)(void);
  unsigned long (*ERR_peek_last_error)(void);
  void (*ERR_error_string_n)(unsigned long e, char *buf, size_t len);
  void (*ERR_clear_error)(void);
  EVP_PKEY *(*EVP_PKEY_Q_keygen)(OSSL_LIB_CTX *l, const char *propq, const char *type, ...);
  void (*EVP_PKEY_free)(EVP_PKEY *k);
  const EVP_MD *(*EVP_sha256)(void);
  X509 *(*X509_new)(void);
  void (*X509_free)(X509 *x);
  int (*X509_set_version)(X509 *x, long v);
  ASN1_INTEGER *(*X509_get_serialNumber)(X509 *x);
  int (*ASN1_INTEGER_set_uint64)(ASN1_INTEGER *a, uint64_t r);
  ASN1_TIME *(*X509_getm_notBefore)(const X509 *x);
  ASN1_TIME *(*X509_getm_notAfter)(const X509 *x);
  ASN1_TIME *(*X509_gmtime_adj)(ASN1_TIME *s, long adj);
  int (*X509_cmp_current_time)(const ASN1_TIME *t);
  int (*X509_set_pubkey)(X509 *x, EVP_PKEY *k);
  X509_NAME *(*X509_get_subject_name)(const X509 *x);
  int (*X509_set_issuer_name)(X509 *x, const X509_NAME *n);
  int (*X509_NAME_add_entry_by_txt)(X509_NAME *n, const char *field, int type,
                                    const unsigned char *bytes, int len, int loc, int set);
  void (*X509V3_set_ctx)(X509V3_CTX *ctx, X509 *issuer, X509 *subject, X509_REQ *req, X509_CRL *crl,
                         int flags);
  X509_EXTENSION *(*X509V3_EXT_conf_nid)(LHASH_OF(CONF_VALUE) * conf, X509V3_CTX *ctx, int nid,
                                         const char *value);
  int (*X509_add_ext)(X509 *x, X509_EXTENSION *ex, int loc);
  void (*X509_EXTENSION_free)(X509_EXTENSION *ex);
  int (*X509_sign)(X509 *x, EVP_PKEY *k, const EVP_MD *md);
  int (*X509_check_private_key)(const X509 *x, const EVP_PKEY *k);
  int (*PEM_write_X509)(FILE *f, const X509 *x);
  int (*PEM_write_PrivateKey)(FILE *f, const EVP_PKEY *k, const EVP_CIPHER *enc,
                              const unsigned char *kstr, int klen, pem_password_cb *cb, void *u);
  X509 *(*PEM_read_X509)(FILE *f, X509 **x, pem_password_cb *cb, void *u);
  EVP_PKEY *(*PEM_read_PrivateKey)(FILE *f, EVP_PKEY **x, pem_password_cb *cb, void *u);
} ossl;

static int load(agsx_error_t *err) {
  if (ossl.handle)
    return 0;
  const char *lib = getenv("AGSX_LIBSSL");
  void *h = dlopen(lib && *lib ? lib : "libssl.so.3", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL)
    return agsx_error_set(err, 0, "TLS needs libssl (apt-get install libssl3): %s", dlerror());
  static const struct {
    const char *name;
    size_t off;
  } syms[] = {
#define S(f) {#f, offsetof(__typeof__(ossl), f)}
      S(TLS_server_method),
      S(SSL_CTX_new),
      S(SSL_CTX_free),
      S(SSL_CTX_ctrl),
      S(SSL_CTX_callback_ctrl),
      S(SSL_CTX_set_options),
      S(SSL_CTX_use_certificate),
      S(SSL_CTX_use_PrivateKey),
      S(SSL_CTX_use_certificate_chain_file),
      S(SSL_CTX_use_PrivateKey_file),
      S(SSL_CTX_check_private_key),
      S(SSL_new),
      S(SSL_free),
      S(SSL_set_fd),
      S(SSL_accept),
      S(SSL_read),
      S(SSL_write),
      S(SSL_get_error),
      S(SSL_shutdown),
      S(SSL_pending),
      S(SSL_get_servername),
      S(SSL_use_certificate),
      S(SSL_use_PrivateKey),
      S(ERR_get_error),
      S(ERR_peek_last_error),
      S(ERR_error_string_n),
      S(ERR_clear_error),
      S(EVP_PKEY_Q_keygen),
      S(EVP_PKEY_free),
      S(EVP_sha256),
      S(X509_new),
      S(X509_free),
      S(X509_set_version),
      S(X509_get_serialNumber),
      S(ASN1_INTEGER_set_uint64),
      S(X509_getm_notBefore),
      S(X509_getm_notAfter),
      S(X509_gmtime_adj),
      S(X509_cmp_current_time),
      S(X509_set_pubkey),
      S(X509_get_subject_name),
      S(X509_set_issuer_name),
      S(X509_NAME_add_entry_by_txt),
      S(X509V3_set_ctx),
      S(X509V3_EXT_conf_nid),
      S(X509_add_ext),
      S(X509_EXTENSION_free),
      S(X509_sign),
      S(X509_check_private_key),
      S(PEM_write_X509),
      S(PEM_write_PrivateKey),
      S(PEM_read_X509),
      S(PEM_read_PrivateKey),
#undef S
  };
  __typeof__(ossl) t = {.handle = h};
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(syms); i++) {
    void *p = dlsym(h, syms[i].name); /* libcrypto's through libssl's dependency */
    if (p == NULL) {
      dlclose(h);
      return agsx_error_set(err, 0, "TLS needs OpenSSL 3 (libssl3): no %s", syms[i].name);
    }
    memcpy((char *)&t + syms[i].off, &p, sizeof(p));
  }
  ossl = t; /* the handle stays open for the process's life */
  return 0;
}

/* Sets ERR from OpenSSL's newest error: "WHAT: OPENSSL'S REASON". */
static int ossl_fail(agsx_error_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int ossl_fail(agsx_error_t *err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  _cleanup_free_ char *what = xvasprintf(fmt, ap);
  va_end(ap);
  char why[256] = "";
  unsigned long e, last = 0;
  while ((e = ossl.ERR_get_error()) != 0)
    last = e;
  if (last)
    ossl.ERR_error_string_n(last, why, sizeof(why));
  return agsx_error_set(err, 0, "%s%s%s", what, why[0] ? ": " : "", why);
}

/* ---- certificates -------------------------------------------------------------------------- */

struct leaf {
  char name[254];
  X509 *x;
  int64_t made;
};

struct agsx_tls {
  SSL_CTX *ctx;
  EVP_PKEY *ca_key, *leaf_key; /* agsx's CA: NULL with the user's certificate */
  X509 *ca;
  struct leaf leaves[LEAF_CACHE];
  size_t next; /* the slot a new name takes */
};

struct agsx_tls_conn {
  SSL *ssl;
  bool notified;
};

bool agsx_tls_name_signable(const char *name) {
  size_t n = name ? strlen(name) : 0, label = 0;
  if (n == 0 || n > 253)
    return false;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)name[i];
    if (ch == '.') {
      if (label == 0 || name[i - 1] == '-')
        return false;
      label = 0;
      continue;
    }
    if (!(isalnum(ch) || (ch == '-' && label > 0)) || ++label > 63)
      return false;
  }
  return strcasecmp(name, "localhost") == 0 ||
         (n > 10 && strcasecmp(name + n - 10, ".localhost") == 0);
}

static int add_ext(X509 *x, X509 *issuer, int nid, const char *value, agsx_error_t *err) {
  X509V3_CTX v3;
  ossl.X509V3_set_ctx(&v3, issuer, x, NULL, NULL, 0);
  X509_EXTENSION *ex = ossl.X509V3_EXT_conf_nid(NULL, &v3, nid, value);
  if (ex == NULL)
    return ossl_fail(err, "certificate extension `%s`", value);
  int ok = ossl.X509_add_ext(x, ex, -1);
  ossl.X509_EXTENSION_free(ex);
  return ok ? 0 : ossl_fail(err, "certificate extension `%s`", value);
}

/* A certificate for KEY named CN, signed by ISSUER_KEY (ISSUER NULL:
 * itself), valid from an hour ago for DAYS, with EXTS (nid, value) pairs. */
static X509 *make_cert(EVP_PKEY *key, const char *cn, X509 *issuer, EVP_PKEY *issuer_key, long days,
                       const int *nids, const char *const *values, size_t n, agsx_error_t *err) {
  X509 *x = ossl.X509_new();
  if (x == NULL)
    return ossl_fail(err, "X509_new"), NULL;
  uint64_t serial;
  if (getrandom(&serial, sizeof(serial), 0) != sizeof(serial))
    serial = (uint64_t)agsx_now_ns();
  serial = (serial >> 1) | 1; /* positive, nonzero */
  X509_NAME *name = ossl.X509_get_subject_name(x);
  if (!ossl.X509_set_version(x, 2) ||
      !ossl.ASN1_INTEGER_set_uint64(ossl.X509_get_serialNumber(x), serial) ||
      !ossl.X509_gmtime_adj(ossl.X509_getm_notBefore(x), -3600) ||
      !ossl.X509_gmtime_adj(ossl.X509_getm_notAfter(x), days * 86400) ||
      !ossl.X509_set_pubkey(x, key) ||
      !ossl.X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1, -1,
                                       0) ||
      !ossl.X509_set_issuer_name(x, issuer ? ossl.X509_get_subject_name(issuer) : name)) {
    ossl_fail(err, "a certificate for `%s`", cn);
    ossl.X509_free(x);
    return NULL;
  }
  for (size_t i = 0; i < n; i++)
    if (add_ext(x, issuer ? issuer : x, nids[i], values[i], err) < 0) {
      ossl.X509_free(x);
      return NULL;
    }
  if (!ossl.X509_sign(x, issuer_key, ossl.EVP_sha256())) {
    ossl_fail(err, "sign the certificate for `%s`", cn);
    ossl.X509_free(x);
    return NULL;
  }
  return x;
}

static EVP_PKEY *new_key(agsx_error_t *err) {
  EVP_PKEY *k = ossl.EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
  if (k == NULL)
    ossl_fail(err, "make an EC P-256 key");
  return k;
}

/* A leaf for NAME (a DNS name, or localhost with its loopback addresses). */
static X509 *make_leaf(struct agsx_tls *t, const char *name, agsx_error_t *err) {
  _cleanup_free_ char *san = strcasecmp(name, "localhost") == 0
                                 ? xstrdup("DNS:localhost,IP:127.0.0.1,IP:::1")
                                 : xasprintf("DNS:%s", name);
  static const int nids[] = {NID_basic_constraints,      NID_key_usage,
                             NID_ext_key_usage,          NID_subject_alt_name,
                             NID_subject_key_identifier, NID_authority_key_identifier};
  const char *values[] = {
      "critical,CA:FALSE", "critical,digitalSignature", "serverAuth", san, "hash", "keyid:always"};
  return make_cert(t->leaf_key, name, t->ca, t->ca_key, LEAF_DAYS, nids, values,
                   AGSX_ARRAY_SIZE(nids), err);
}

/* The leaf for NAME, from the cache or made now; NULL on an error (logged). */
static X509 *leaf_for(struct agsx_tls *t, const char *name) {
  int64_t now = agsx_mono_ns();
  char lower[254];
  size_t n = strlen(name);
  for (size_t i = 0; i <= n; i++)
    lower[i] = (char)tolower((unsigned char)name[i]);
  for (size_t i = 0; i < LEAF_CACHE; i++)
    if (t->leaves[i].x && strcmp(t->leaves[i].name, lower) == 0 &&
        now - t->leaves[i].made < LEAF_FRESH_NS)
      return t->leaves[i].x;
  agsx_error_t err = NULL;
  X509 *x = make_leaf(t, lower, &err);
  if (x == NULL) {
    agsx_warn("serve: TLS: %s", err->msg);
    agsx_error_free(&err);
    return NULL;
  }
  struct leaf *l = NULL;
  for (size_t i = 0; i < LEAF_CACHE && l == NULL; i++)
    if (t->leaves[i].x && strcmp(t->leaves[i].name, lower) == 0)
      l = &t->leaves[i]; /* a stale one of the same name */
  if (l == NULL) {
    l = &t->leaves[t->next];
    t->next = (t->next + 1) % LEAF_CACHE;
  }
  if (l->x)
    ossl.X509_free(l->x); /* connections using it hold their own reference */
  memcpy(l->name, lower, n + 1);
  l->x = x;
  l->made = now;
  return x;
}

/* The SNI callback: the client's name's leaf, or a fatal alert for a name
 * agsx's CA does not sign. No name (an address): localhost's. */
static int on_servername(SSL *ssl, int *alert, void *arg) {
  struct agsx_tls *t = arg;
  const char *name = ossl.SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  if (name == NULL)
    return SSL_TLSEXT_ERR_OK; /* the context's: localhost */
  if (!agsx_tls_name_signable(name)) {
    *alert = SSL_AD_UNRECOGNIZED_NAME;
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  X509 *x = leaf_for(t, name);
  if (x == NULL || !ossl.SSL_use_certificate(ssl, x) ||
      !ossl.SSL_use_PrivateKey(ssl, t->leaf_key)) {
    *alert = SSL_AD_INTERNAL_ERROR;
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  return SSL_TLSEXT_ERR_OK;
}

/* PEM text of X (and KEY before it, when given). */
static char *pem_of(X509 *x, EVP_PKEY *key, size_t *len) {
  char *buf = NULL;
  FILE *f = open_memstream(&buf, len);
  if (f == NULL)
    return NULL;
  bool ok = (key == NULL || ossl.PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL)) &&
            ossl.PEM_write_X509(f, x);
  if (fclose(f) != 0 || !ok) {
    free(buf);
    return NULL;
  }
  return buf;
}

/* Reads ROOT/tls/ca-key.pem into T, or makes it, under the directory's
 * lock (two servers starting at once make one CA); writes ca.pem. */
static int ca_open(struct agsx_tls *t, const char *root, char **ret_ca, agsx_error_t *err) {
  _cleanup_free_ char *dir = xasprintf("%s/tls", root);
  if (agsx_mkdir_p(dir, 0755, err) < 0)
    return agsx_error_wrap(err, "agsx's CA");
  _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (dfd < 0)
    return agsx_error_set(err, errno, "open %s", dir);
  _cleanup_close_ int lock = agsx_lock_at(dfd, ".lock", true, err);
  if (lock < 0)
    return -1;
  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  int fd = openat(dfd, "ca-key.pem", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd >= 0) {
    struct stat st;
    int r = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
                    (st.st_mode & 077) == 0
                ? agsx_read_fd(fd, 1 << 20, &text, &len, err)
                : agsx_error_set(err, EPERM,
                                 "%s/ca-key.pem is not a file of this user's that only it can read",
                                 dir);
    close(fd);
    if (r < 0)
      return -1;
    FILE *f = fmemopen(text, len, "r");
    if (f == NULL)
      return agsx_error_set(err, errno, "fmemopen");
    t->ca_key = ossl.PEM_read_PrivateKey(f, NULL, NULL, NULL);
    t->ca = t->ca_key ? ossl.PEM_read_X509(f, NULL, NULL, NULL) : NULL;
    fclose(f);
    if (t->ca == NULL || !ossl.X509_check_private_key(t->ca, t->ca_key))
      return ossl_fail(err,
                       "%s/ca-key.pem holds no key and matching certificate (remove the "
                       "directory to make a new CA)",
                       dir);
    if (ossl.X509_cmp_current_time(ossl.X509_getm_notAfter(t->ca)) <= 0)
      return agsx_error_set(err, 0,
                            "agsx's CA (%s/ca.pem) has expired: remove %s to make a new one, "
                            "and trust that",
                            dir, dir);
  } else if (errno != ENOENT) {
    return agsx_error_set(err, errno, "open %s/ca-key.pem", dir);
  } else {
    char host[64] = "";
    gethostname(host, sizeof(host) - 1);
    _cleanup_free_ char *cn = xasprintf("agsx serve local CA (%s)", host);
    static const int nids[] = {NID_basic_constraints, NID_key_usage, NID_name_constraints,
                               NID_subject_key_identifier};
    static const char *const values[] = {
        "critical,CA:TRUE,pathlen:0", "critical,keyCertSign,cRLSign",
        ("critical,permitted;DNS:localhost,permitted;IP:127.0.0.0/255.0.0.0,"
         "permitted;IP:::1/ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
        "hash"};
    if ((t->ca_key = new_key(err)) == NULL ||
        (t->ca = make_cert(t->ca_key, cn, NULL, t->ca_key, CA_DAYS, nids, values,
                           AGSX_ARRAY_SIZE(nids), err)) == NULL)
      return agsx_error_wrap(err, "agsx's CA");
    text = pem_of(t->ca, t->ca_key, &len);
    if (text == NULL)
      return agsx_error_set(err, ENOMEM, "agsx's CA as PEM");
    if (agsx_write_file_atomic(dfd, "ca-key.pem", text, len, 0600, err) < 0)
      return agsx_error_wrap(err, "%s/ca-key.pem", dir);
    agsx_info("serve: made agsx's CA %s/ca.pem: trust it once (agsx-serve(1), TLS)", dir);
  }
  _cleanup_free_ char *pub = pem_of(t->ca, NULL, &len);
  if (pub == NULL)
    return agsx_error_set(err, ENOMEM, "agsx's CA as PEM");
  if (agsx_write_file_atomic(dfd, "ca.pem", pub, len, 0644, err) < 0)
    return agsx_error_wrap(err, "%s/ca.pem", dir);
  *ret_ca = xasprintf("%s/ca.pem", dir);
  return 0;
}

struct agsx_tls *agsx_tls_server_new(const char *root, const char *cert, const char *key,
                                     char **ret_ca, agsx_error_t *err) {
  *ret_ca = NULL;
  if ((cert == NULL) != (key == NULL))
    return agsx_error_set(err, EINVAL, "a certificate needs its key: give both files or neither"),
           NULL;
  if (load(err) < 0)
    return NULL;
  ossl.ERR_clear_error();
  struct agsx_tls *t = xzalloc(sizeof(*t));
  t->ctx = ossl.SSL_CTX_new(ossl.TLS_server_method());
  if (t->ctx == NULL) {
    ossl_fail(err, "SSL_CTX_new");
    goto fail;
  }
  ossl.SSL_CTX_ctrl(t->ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_2_VERSION, NULL);
  ossl.SSL_CTX_ctrl(t->ctx, SSL_CTRL_MODE,
                    SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER, NULL);
  /* A browser closes without close_notify; that is an end, not an error. */
  ossl.SSL_CTX_set_options(t->ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
  if (cert) {
    if (ossl.SSL_CTX_use_certificate_chain_file(t->ctx, cert) != 1) {
      ossl_fail(err, "certificate `%s`", cert);
      goto fail;
    }
    if (ossl.SSL_CTX_use_PrivateKey_file(t->ctx, key, SSL_FILETYPE_PEM) != 1 ||
        ossl.SSL_CTX_check_private_key(t->ctx) != 1) {
      unsigned long e = ossl.ERR_peek_last_error();
      if (ERR_GET_LIB(e) != ERR_LIB_X509 || ERR_GET_REASON(e) != X509_R_KEY_VALUES_MISMATCH) {
        ossl_fail(err, "key `%s`", key);
        goto fail;
      }
      ossl_fail(err, "key `%s` is not the certificate's (`%s`)", key, cert);
      goto fail;
    }
    return t;
  }
  if (ca_open(t, root, ret_ca, err) < 0 || (t->leaf_key = new_key(err)) == NULL)
    goto fail;
  X509 *x = leaf_for(t, "localhost");
  if (x == NULL || !ossl.SSL_CTX_use_certificate(t->ctx, x) ||
      !ossl.SSL_CTX_use_PrivateKey(t->ctx, t->leaf_key)) {
    ossl_fail(err, "localhost's certificate");
    goto fail;
  }
  ossl.SSL_CTX_callback_ctrl(t->ctx, SSL_CTRL_SET_TLSEXT_SERVERNAME_CB,
                             (void (*)(void))on_servername);
  ossl.SSL_CTX_ctrl(t->ctx, SSL_CTRL_SET_TLSEXT_SERVERNAME_ARG, 0, t);
  return t;
fail:
  free(*ret_ca);
  *ret_ca = NULL;
  agsx_tls_server_free(t);
  return NULL;
}

void agsx_tls_server_free(struct agsx_tls *t) {
  if (t == NULL)
    return;
  for (size_t i = 0; i < LEAF_CACHE; i++)
    if (t->leaves[i].x)
      ossl.X509_free(t->leaves[i].x);
  if (t->ca)
    ossl.X509_free(t->ca);
  if (t->ca_key)
    ossl.EVP_PKEY_free(t->ca_key);
  if (t->leaf_key)
    ossl.EVP_PKEY_free(t->leaf_key);
  if (t->ctx)
    ossl.SSL_CTX_free(t->ctx);
  free(t);
}

/* ---- connections ---------------------------------------------------------------------------- */

struct agsx_tls_conn *agsx_tls_conn_new(struct agsx_tls *t, int fd, agsx_error_t *err) {
  SSL *ssl = ossl.SSL_new(t->ctx);
  if (ssl == NULL || !ossl.SSL_set_fd(ssl, fd)) {
    if (ssl)
      ossl.SSL_free(ssl);
    return ossl_fail(err, "SSL_new"), NULL;
  }
  struct agsx_tls_conn *c = xzalloc(sizeof(*c));
  c->ssl = ssl;
  return c;
}

void agsx_tls_conn_free(struct agsx_tls_conn *c) {
  if (c == NULL)
    return;
  ossl.SSL_free(c->ssl);
  free(c);
}

/* What R (an SSL call's result) means: -1 with errno EAGAIN and *WANT, or
 * -1 with EIO (0 at a clean end, for reads). */
static int outcome(struct agsx_tls_conn *c, int r, uint32_t *want) {
  int e = ossl.SSL_get_error(c->ssl, r);
  ossl.ERR_clear_error(); /* this connection's errors are not the next one's */
  switch (e) {
  case SSL_ERROR_WANT_READ:
    *want = EPOLLIN;
    errno = EAGAIN;
    return -1;
  case SSL_ERROR_WANT_WRITE:
    *want = EPOLLOUT;
    errno = EAGAIN;
    return -1;
  case SSL_ERROR_ZERO_RETURN: return 0;
  default: errno = EIO; return -1;
  }
}

int agsx_tls_handshake(struct agsx_tls_conn *c, uint32_t *want) {
  *want = 0;
  int r = ossl.SSL_accept(c->ssl);
  if (r == 1)
    return 1;
  return outcome(c, r, want) < 0 && errno == EAGAIN ? 0 : -1;
}

ssize_t agsx_tls_read(struct agsx_tls_conn *c, void *buf, size_t len, uint32_t *want) {
  int r = ossl.SSL_read(c->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
  if (r > 0)
    return r;
  return outcome(c, r, want); /* 0 also at a TCP end without close_notify */
}

ssize_t agsx_tls_write(struct agsx_tls_conn *c, const void *buf, size_t len, uint32_t *want) {
  if (len == 0)
    return 0;
  int r = ossl.SSL_write(c->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
  if (r > 0)
    return r;
  r = outcome(c, r, want);
  if (r == 0)
    errno = EPIPE;
  return -1;
}

size_t agsx_tls_pending(struct agsx_tls_conn *c) {
  int n = ossl.SSL_pending(c->ssl);
  return n > 0 ? (size_t)n : 0;
}

void agsx_tls_close_notify(struct agsx_tls_conn *c) {
  if (c->notified)
    return;
  c->notified = true;
  ossl.SSL_shutdown(c->ssl); /* sends close_notify; the peer's may come later */
  ossl.ERR_clear_error();
}
