/* agsx — api: TRANSITIONAL. The process API (sandbox/processes.h) is being
 * written on the `procs` branch; until it is merged these answer ENOSYS so
 * the server builds and its control plane can be tested. This file goes
 * when sandbox/processes.c lands. */
#include "config.h"

#include "sandbox/processes.h"

#include <string.h>

#define PENDING(err) agsx_error_set(err, ENOSYS, "processes are not available in this build")

void agsx_process_info_clear(struct agsx_process_info *p) {
  free(p->tag);
  agsx_strv_free(p->argv);
  agsx_strv_free(p->env);
  free(p->cwd);
  free(p->user);
  memset(p, 0, sizeof(*p));
}
void agsx_process_list_free(struct agsx_process_info *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    agsx_process_info_clear(&v[i]);
  free(v);
}
int agsx_process_start(int statefd, const char *id, const struct agsx_process_spec *spec,
                       struct agsx_process_info *ret, int *ret_code, agsx_error_t *err) {
  (void)statefd, (void)id, (void)spec, (void)ret;
  *ret_code = 125;
  return PENDING(err);
}
int agsx_process_list(int statefd, const char *id, bool include_ended,
                      struct agsx_process_info **ret, size_t *ret_n, agsx_error_t *err) {
  (void)statefd, (void)id, (void)include_ended;
  *ret = NULL;
  *ret_n = 0;
  return PENDING(err);
}
int agsx_process_get(int statefd, const char *id, uint32_t pid, struct agsx_process_info *ret,
                     agsx_error_t *err) {
  (void)statefd, (void)id, (void)pid, (void)ret;
  return PENDING(err);
}
int agsx_process_find_tag(int statefd, const char *id, const char *tag,
                          struct agsx_process_info *ret, agsx_error_t *err) {
  (void)statefd, (void)id, (void)tag, (void)ret;
  return PENDING(err);
}
int agsx_process_input(int statefd, const char *id, uint32_t pid, const void *buf, size_t len,
                       bool pty, agsx_error_t *err) {
  (void)statefd, (void)id, (void)pid, (void)buf, (void)len, (void)pty;
  return PENDING(err);
}
int agsx_process_close_stdin(int statefd, const char *id, uint32_t pid, agsx_error_t *err) {
  (void)statefd, (void)id, (void)pid;
  return PENDING(err);
}
int agsx_process_signal(int statefd, const char *id, uint32_t pid, int sig, agsx_error_t *err) {
  (void)statefd, (void)id, (void)pid, (void)sig;
  return PENDING(err);
}
int agsx_process_resize(int statefd, const char *id, uint32_t pid, unsigned cols, unsigned rows,
                        agsx_error_t *err) {
  (void)statefd, (void)id, (void)pid, (void)cols, (void)rows;
  return PENDING(err);
}
int agsx_process_log_open(int statefd, const char *id, uint32_t pid, uint64_t from,
                          struct agsx_log_reader **ret, agsx_error_t *err) {
  (void)statefd, (void)id, (void)pid, (void)from;
  *ret = NULL;
  return PENDING(err);
}
