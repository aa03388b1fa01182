/* Fuzz target: egress rules and rules files, and the DNS messages the
 * relay's filter reads (questions, answers). Every accepted rule formats
 * to text that parses back to the same rule. */
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
    agsx_egress_nl_chain(&b, &e, 0xc6130005, NULL, true, 20);
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
  int n = 0;
  agsx_dns_answers_a(data, size, on_a, &n);
  free(s);
  return 0;
}
