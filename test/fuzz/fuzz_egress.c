/* Fuzz target: egress rules and rules files, and the DNS messages the
 * relay's filter reads (questions, answers as CNAME chains). Every
 * accepted rule formats to text that parses back to the same rule. */
#include "config.h"

#include "fuzz.h"
#include "net/dnsfilter.h"
#include "net/egress.h"
#include "net/egress_nl.h"

#include <string.h>

static void on_a(void *data, uint32_t addr, uint32_t ttl) {
  (void)addr;
  (void)ttl;
  (*(int *)data)++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 8192)
    return 0;
  char *s = xstrndup((const char *)data, size);
  agsx_error_t err = NULL;
  struct agsx_egress_rule r, back;
  if (agsx_egress_rule_parse_line(s, &r, &err) == 0) {
    char *t = agsx_egress_rule_format(&r);
    if (agsx_egress_rule_parse_line(t, &back, NULL) < 0 || back.allow != r.allow ||
        back.kind != r.kind || back.port != r.port || strcmp(back.name, r.name) != 0 ||
        back.cidr.addr != r.cidr.addr || back.cidr.prefix != r.cidr.prefix)
      __builtin_trap();
    free(t);
  }
  agsx_error_free(&err);
  struct agsx_egress e = {0};
  if (agsx_egress_parse_file((const char *)data, size, "fuzz", &e, &err) == 0) {
    if (e.n > AGSX_EGRESS_MAX_RULES)
      __builtin_trap();
    struct agsx_nfb b;
    agsx_nfb_init(&b);
    agsx_egress_nl_chain(&b, &e, 0xc6130005, NULL, true, 20, 1024, agsx_egress_has_exact_deny(&e));
    agsx_nfb_clear(&b);
    bool any;
    uint16_t ports[16];
    size_t np;
    agsx_egress_name_allowed(&e, "a.example.com", &any, ports, 16, &np);
  }
  agsx_error_free(&err);
  agsx_egress_clear(&e);
  char name[AGSX_EGRESS_NAME_MAX + 1];
  uint16_t type;
  size_t end;
  if (agsx_dns_question(data, size, name, &type, &end) == 0 &&
      (end > size || strlen(name) > AGSX_EGRESS_NAME_MAX))
    __builtin_trap();
  /* An answer's chain, as the filter reads it (its TTLs cut first): from
   * the question, every name canonical, bounded, each once. */
  int n = 0;
  struct agsx_dns_chain c;
  unsigned char *copy = xmalloc(size ? size : 1);
  memcpy(copy, data, size);
  if (agsx_dns_cap_ttl(copy, size, 60) == 0 &&
      agsx_dns_answer_chain(copy, size, &c, on_a, &n) == 0) {
    if (c.n < 1 || c.n > AGSX_DNS_CHAIN_MAX || strcmp(c.names[0], name) != 0)
      __builtin_trap();
    for (size_t i = 0; i < c.n; i++) {
      char canon[AGSX_EGRESS_NAME_MAX + 1];
      if (agsx_egress_name_canon(c.names[i], strlen(c.names[i]), canon) < 0 ||
          strcmp(canon, c.names[i]) != 0)
        __builtin_trap();
      for (size_t k = 0; k < i; k++)
        if (strcmp(c.names[k], c.names[i]) == 0)
          __builtin_trap();
    }
  }
  free(copy);
  agsx_dns_answer_chain(data, size, &c, on_a, &n);
  free(s);
  return 0;
}
