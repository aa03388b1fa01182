/* agsx — api: envd's filesystem routes (the Filesystem service's RPCs, GET and POST
 * /files, WatchDir and the polling watchers) as thin calls into the fsops
 * library (api/fsops.h, api/multipart.h). */
#ifndef AGSX_API_FILES_H
#define AGSX_API_FILES_H

#include "api/api-internal.h"

void agsx_api_files_rest(struct req *r);
void agsx_api_files_rpc(struct req *r, const char *method);
void agsx_api_files_watch_pump(struct stream *st, int64_t now);
void agsx_api_files_watch_free(struct stream *st);

#endif
