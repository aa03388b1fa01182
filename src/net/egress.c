/* agsx — egress allow-lists: rules, matching, the sandbox's nft objects.
 * See egress.h. */
#include "config.h"

#include "net/egress.h"
#include "net/egress_nl.h"
#include "net/nft.h"
#include "util/json.h"
#include "util/lines.h"

#include <ctype.h>
#include <string.h>

#define EGRESS_JSON_MAX (1 << 20)

void agsx_egress_clear(struct agsx_egress *e) {
  free(e->rules);
  e->rules = NULL;
  e->n = 0;
}

bool agsx_egress_has_allow(const struct agsx_egress *e) {
  for (size_t i = 0; e && i < e->n; i++)
    if (e->rules[i].allow)
      return true;
  return false;
}

int agsx_egress_name_canon(const char *name, size_t len, char *buf) {
  if (len > 0 && name[len - 1] == '.')
    len--;
  if (len == 0 || len > AGSX_EGRESS_NAME_MAX)
    return -1;
  size_t label = 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)name[i];
    if (c == '.') {
      if (label == 0 || name[i - 1] == '-')
        return -1;
      label = 0;
    } else if (c == '-' && label == 0) {
      return -1; /* no label starts (or ends) with a hyphen */
    } else if (isalnum(c) || c == '-' || c == '_') {
      if (++label > 63)
        return -1;
    } else {
      return -1;
    }
    buf[i] = (char)tolower(c);
  }
  if (label == 0 || name[len - 1] == '-')
    return -1;
  buf[len] = '\0';
  return 0;
}

/* ":PORT" at the end of S (from *LEN): cut off into *RET (1-65535). */
static int split_port(const char *s, size_t *len, uint16_t *ret) {
  *ret = 0;
  const char *colon = memchr(s, ':', *len);
  if (colon == NULL)
    return 0;
  size_t n = *len - (size_t)(colon - s) - 1;
  if (n == 0 || n > 5)
    return -1;
  unsigned v = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isdigit((unsigned char)colon[1 + i]))
      return -1;
    v = v * 10 + (unsigned)(colon[1 + i] - '0');
  }
  if (v == 0 || v > 65535)
    return -1;
  *ret = (uint16_t)v;
  *len = (size_t)(colon - s);
  return 0;
}

static bool looks_numeric(const char *s, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (!isdigit((unsigned char)s[i]) && s[i] != '.' && s[i] != '/')
      return false;
  return true;
}

int agsx_egress_rule_parse(const char *s, bool allow, struct agsx_egress_rule *ret,
                           agsx_error_t *err) {
  memset(ret, 0, sizeof(*ret));
  ret->allow = allow;
  while (*s == ' ' || *s == '\t')
    s++;
  size_t len = strlen(s);
  while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t'))
    len--;
  if (len > AGSX_EGRESS_NAME_MAX + 8)
    return agsx_error_set_quiet(err, EINVAL, "invalid egress rule: too long"), -1;
  for (size_t i = 0; i < len; i++)
    if (s[i] <= ' ' || s[i] > '~')
      return agsx_error_set_quiet(err, EINVAL,
                                  "invalid egress rule (want NAME, *.NAME or CIDR, with an "
                                  "optional :PORT)"),
             -1;
  if (len == 0 || split_port(s, &len, &ret->port) < 0)
    return agsx_error_set_quiet(err, EINVAL,
                                "invalid egress rule `%s` (want NAME, *.NAME or CIDR, with an "
                                "optional :PORT of 1-65535)",
                                s),
           -1;
  if (looks_numeric(s, len)) {
    _cleanup_free_ char *c = xstrndup(s, len);
    agsx_error_t e = NULL;
    if (agsx_cidr_parse(c, false, true, &ret->cidr, &e) < 0) {
      agsx_error_set_quiet(err, EINVAL, "invalid egress rule `%s`: %s", s, e->msg);
      agsx_error_free(&e);
      return -1;
    }
    ret->kind = AGSX_EGRESS_CIDR;
    return 0;
  }
  ret->kind = AGSX_EGRESS_NAME;
  if (len > 2 && s[0] == '*' && s[1] == '.') {
    ret->kind = AGSX_EGRESS_WILDCARD;
    s += 2;
    len -= 2;
  }
  if (memchr(s, '*', len) || agsx_egress_name_canon(s, len, ret->name) < 0)
    return agsx_error_set_quiet(err, EINVAL,
                                "invalid egress rule `%s` (a name: letters, digits, `-`, `_` and "
                                "dots; a wildcard only as a leading `*.`)",
                                s - (ret->kind == AGSX_EGRESS_WILDCARD ? 2 : 0)),
           -1;
  if (!allow && ret->port)
    return agsx_error_set_quiet(err, EINVAL,
                                "invalid egress rule `%s`: a denied name takes no port (deny a "
                                "CIDR with a port instead)",
                                s - (ret->kind == AGSX_EGRESS_WILDCARD ? 2 : 0)),
           -1;
  return 0;
}

int agsx_egress_rule_parse_line(const char *s, struct agsx_egress_rule *ret, agsx_error_t *err) {
  bool allow;
  if (agsx_rule_verb(&s, &allow) < 0)
    return agsx_error_set_quiet(err, EINVAL,
                                "invalid egress rule `%.64s`: it starts with allow or deny",
                                s + strspn(s, " \t")),
           -1;
  return agsx_egress_rule_parse(s, allow, ret, err);
}

char *agsx_egress_rule_format(const struct agsx_egress_rule *r) {
  char cidr[20], port[8] = "";
  if (r->port)
    snprintf(port, sizeof(port), ":%u", r->port);
  if (r->kind == AGSX_EGRESS_CIDR)
    return xasprintf("%s %s%s", r->allow ? "allow" : "deny", agsx_cidr_format(&r->cidr, cidr),
                     port);
  return xasprintf("%s %s%s%s", r->allow ? "allow" : "deny",
                   r->kind == AGSX_EGRESS_WILDCARD ? "*." : "", r->name, port);
}

int agsx_egress_append(struct agsx_egress *e, const struct agsx_egress_rule *r, agsx_error_t *err) {
  if (e->n >= AGSX_EGRESS_MAX_RULES)
    return agsx_error_set_quiet(err, E2BIG, "too many egress rules (at most %d)",
                                AGSX_EGRESS_MAX_RULES),
           -1;
  e->rules = xrealloc(e->rules, (e->n + 1) * sizeof(*e->rules));
  e->rules[e->n++] = *r;
  return 0;
}

int agsx_egress_add(struct agsx_egress *e, const char *s, bool allow, agsx_error_t *err) {
  struct agsx_egress_rule r;
  if (agsx_egress_rule_parse(s, allow, &r, err) < 0)
    return -1;
  return agsx_egress_append(e, &r, err);
}

static int egress_line(char *line, size_t lineno, void *data, agsx_error_t *err) {
  (void)lineno;
  struct agsx_egress_rule r;
  if (agsx_egress_rule_parse_line(line, &r, err) < 0)
    return -1;
  return agsx_egress_append(data, &r, err);
}

int agsx_egress_parse_file(const char *text, size_t len, const char *what, struct agsx_egress *e,
                           agsx_error_t *err) {
  return agsx_lines_each(text, len, what, 1024, AGSX_LINES_HASH_ANYWHERE, egress_line, e, err);
}

char *agsx_egress_to_json(const struct agsx_egress *e) {
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_array_open(g);
  for (size_t i = 0; e && i < e->n; i++) {
    _cleanup_free_ char *s = agsx_egress_rule_format(&e->rules[i]);
    agsx_json_str(g, s);
  }
  yajl_gen_array_close(g);
  size_t len;
  return agsx_json_gen_steal(g, &len);
}

int agsx_egress_from_json(const char *buf, size_t len, struct agsx_egress *e, agsx_error_t *err) {
  memset(e, 0, sizeof(*e));
  _cleanup_json_ yajl_val v = agsx_json_parse(buf, len, EGRESS_JSON_MAX, err);
  if (v == NULL)
    return -1;
  if (!YAJL_IS_ARRAY(v))
    return agsx_error_set_quiet(err, EINVAL, "egress rules: not a list"), -1;
  for (size_t i = 0; i < v->u.array.len; i++) {
    const char *s = YAJL_GET_STRING(v->u.array.values[i]);
    struct agsx_egress_rule r;
    if (s == NULL || agsx_egress_rule_parse_line(s, &r, err) < 0 ||
        agsx_egress_append(e, &r, err) < 0) {
      agsx_egress_clear(e);
      if (*err == NULL)
        agsx_error_set_quiet(err, EINVAL, "egress rules: not a string");
      return -1;
    }
  }
  return 0;
}

/* Does name rule R match canonical NAME? A wildcard: strict subdomains. */
static bool name_matches(const struct agsx_egress_rule *r, const char *name) {
  if (r->kind == AGSX_EGRESS_NAME)
    return strcmp(r->name, name) == 0;
  if (r->kind != AGSX_EGRESS_WILDCARD)
    return false;
  size_t n = strlen(name), s = strlen(r->name);
  return n > s + 1 && name[n - s - 1] == '.' && strcmp(name + n - s, r->name) == 0;
}

bool agsx_egress_name_allowed(const struct agsx_egress *e, const char *name, bool *ret_any,
                              uint16_t *ret_ports, size_t max, size_t *ret_n) {
  bool any = false, allowed = false, has_allow = false;
  size_t n = 0;
  for (size_t i = 0; i < e->n; i++) {
    const struct agsx_egress_rule *r = &e->rules[i];
    has_allow |= r->allow;
    if (!name_matches(r, name))
      continue;
    if (!r->allow) {
      *ret_any = false;
      if (ret_n)
        *ret_n = 0;
      return false; /* denials win */
    }
    allowed = true;
    if (r->port == 0)
      any = true;
    else if (ret_ports && n < max)
      ret_ports[n++] = r->port;
  }
  /* No allow-list: every name not denied resolves (as without rules). */
  if (!has_allow)
    allowed = any = true;
  *ret_any = any;
  if (ret_n)
    *ret_n = n;
  return allowed;
}

bool agsx_egress_name_denied(const struct agsx_egress *e, const char *name) {
  for (size_t i = 0; i < e->n; i++)
    if (!e->rules[i].allow && name_matches(&e->rules[i], name))
      return true;
  return false;
}

bool agsx_egress_has_name_deny(const struct agsx_egress *e) {
  for (size_t i = 0; e && i < e->n; i++)
    if (!e->rules[i].allow && e->rules[i].kind != AGSX_EGRESS_CIDR)
      return true;
  return false;
}

bool agsx_egress_has_exact_deny(const struct agsx_egress *e) {
  for (size_t i = 0; e && i < e->n; i++)
    if (!e->rules[i].allow && e->rules[i].kind == AGSX_EGRESS_NAME)
      return true;
  return false;
}

bool agsx_egress_cidr_allowed(const struct agsx_egress *e, uint32_t addr, uint16_t port,
                              bool *ret_denied) {
  bool allowed = false;
  *ret_denied = false;
  for (size_t i = 0; i < e->n; i++) {
    const struct agsx_egress_rule *r = &e->rules[i];
    if (r->kind != AGSX_EGRESS_CIDR || !agsx_cidr_contains(&r->cidr, addr) ||
        (r->port && r->port != port))
      continue;
    if (!r->allow) {
      *ret_denied = true;
      return false;
    }
    allowed = true;
  }
  return allowed;
}

/* ---- the learnt addresses ------------------------------------------------------------------- */

void agsx_egress_learnt_clear(struct agsx_egress_learnt *l) {
  for (size_t i = 0; i < l->n; i++)
    free(l->v[i].name);
  free(l->v);
  memset(l, 0, sizeof(*l));
}

#define TABLE "inet agsx"

/* The elements of sandbox SANDBOX's set SET, from nft's JSON (its own
 * set: no other sandbox's elements to read past). */
static int learnt_add(uint32_t sandbox, enum agsx_egress_set set, struct agsx_egress_learnt *l,
                      agsx_error_t *err) {
  char name[16];
  agsx_egress_set_name(sandbox, set, name);
  _cleanup_free_ char *cmd = xasprintf("list set " TABLE " %s\n", name), *out = NULL;
  if (agsx_nft_run_json(cmd, &out, err) < 0)
    return -1;
  _cleanup_json_ yajl_val v = agsx_json_parse(out, strlen(out), 64 << 20, err);
  if (v == NULL)
    return -1;
  bool ports = set == AGSX_EGRESS_SET_PORTS;
  yajl_val list = agsx_json_get_array(v, "nftables");
  for (size_t i = 0; list && i < list->u.array.len; i++) {
    yajl_val s = agsx_json_get_object(list->u.array.values[i], "set");
    yajl_val elems = s ? agsx_json_get_array(s, "elem") : NULL;
    for (size_t k = 0; elems && k < elems->u.array.len; k++) {
      yajl_val e = agsx_json_get_object(elems->u.array.values[k], "elem");
      yajl_val val = e ? agsx_json_get(e, "val") : NULL;
      yajl_val cc = ports && val && YAJL_IS_OBJECT(val) ? agsx_json_get_array(val, "concat") : NULL;
      const char *ip = ports ? NULL : val ? YAJL_GET_STRING(val) : NULL;
      int64_t port = 0;
      if (ports) {
        if (cc == NULL || cc->u.array.len != 2 || !YAJL_IS_STRING(cc->u.array.values[0]) ||
            !YAJL_IS_INTEGER(cc->u.array.values[1]))
          continue;
        ip = YAJL_GET_STRING(cc->u.array.values[0]);
        port = YAJL_GET_INTEGER(cc->u.array.values[1]);
      }
      uint32_t a;
      if (ip == NULL || agsx_ipv4_parse(ip, &a, NULL) < 0 || port < 0 || port > 65535)
        continue;
      yajl_val ex = agsx_json_get(e, "expires");
      const char *c = agsx_json_get_string(e, "comment");
      l->v = xrealloc(l->v, (l->n + 1) * sizeof(*l->v));
      l->v[l->n].addr = a;
      l->v[l->n].port = (uint16_t)port;
      l->v[l->n].denied = set == AGSX_EGRESS_SET_DENIED;
      l->v[l->n].expires = ex && YAJL_IS_INTEGER(ex) ? YAJL_GET_INTEGER(ex) : 0;
      l->v[l->n++].name = xstrdup(c ? c : "");
    }
  }
  return 0;
}

int agsx_egress_learnt_list(uint32_t sandbox, struct agsx_egress_learnt *l, agsx_error_t *err) {
  memset(l, 0, sizeof(*l));
  for (int s = 0; s < AGSX_EGRESS_SETS; s++)
    if (learnt_add(sandbox, (enum agsx_egress_set)s, l, err) < 0) {
      agsx_egress_learnt_clear(l);
      return -1;
    }
  return 0;
}
