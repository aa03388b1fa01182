/* agsx — api: the filesystem routes; see files.h. Until the fsops library
 * is in, they answer unimplemented. */
#include "config.h"

#include "api/files.h"

#include <string.h>

void agsx_api_files_rest(struct req *r) {
  if (strcmp(r->method, "GET") == 0 && !agsx_api_envd_admit(r, false))
    return;
  agsx_respond_error(r, 501, "agsx: files are not supported yet");
}

void agsx_api_files_rpc(struct req *r, const char *method) {
  agsx_respond_connect_error(r, AGSX_CONNECT_UNIMPLEMENTED, "%s is not supported yet", method);
}

void agsx_api_files_watch_pump(struct stream *st, int64_t now) {
  (void)st;
  (void)now;
}

void agsx_api_files_watch_free(struct stream *st) { (void)st; }

int agsx_api_upload_begin(struct req *r) {
  (void)r;
  return 0;
}

void agsx_api_upload_data(struct req *r, const char *buf, size_t len) {
  (void)r;
  (void)buf;
  (void)len;
}

void agsx_api_upload_finish(struct req *r) {
  if (agsx_api_envd_admit(r, false))
    agsx_respond_error(r, 501, "agsx: files are not supported yet");
}

void agsx_api_req_free_parts(struct req *r) { (void)r; }

int agsx_api_envd_init(struct server *s, agsx_error_t *err) {
  (void)s;
  (void)err;
  return 0;
}

void agsx_api_envd_fini(struct server *s) { (void)s; }
