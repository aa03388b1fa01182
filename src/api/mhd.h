/* agsx — api: libmicrohttpd, loaded with dlopen() when `agsx serve` starts.
 *
 * Debian's libmicrohttpd12 pulls GnuTLS and a dozen libraries with it;
 * linking it into the agsx binary would load them at every `agsx run`,
 * whose start-up is measured in milliseconds (see configure.ac). So only
 * the server loads it, as the registry loads libcurl. The types and
 * constants come from <microhttpd.h>; the calls go through agsx_mhd. */
#ifndef AGSX_API_MHD_H
#define AGSX_API_MHD_H

#include "util/util.h"

#include <sys/socket.h>
#include <microhttpd.h>

struct agsx_mhd {
  void *handle;
  struct MHD_Daemon *(*start_daemon)(unsigned int flags, uint16_t port,
                                     MHD_AcceptPolicyCallback apc, void *apc_cls,
                                     MHD_AccessHandlerCallback dh, void *dh_cls, ...);
  void (*stop_daemon)(struct MHD_Daemon *d);
  const union MHD_DaemonInfo *(*get_daemon_info)(struct MHD_Daemon *d,
                                                 enum MHD_DaemonInfoType info_type, ...);
  enum MHD_Result (*run)(struct MHD_Daemon *d);
  enum MHD_Result (*get_timeout)(struct MHD_Daemon *d, MHD_UNSIGNED_LONG_LONG *timeout);
  const char *(*lookup_connection_value)(struct MHD_Connection *c, enum MHD_ValueKind kind,
                                         const char *key);
  int (*get_connection_values)(struct MHD_Connection *c, enum MHD_ValueKind kind,
                               MHD_KeyValueIterator it, void *cls);
  struct MHD_Response *(*create_response_from_buffer)(size_t size, void *buffer,
                                                      enum MHD_ResponseMemoryMode mode);
  struct MHD_Response *(*create_response_from_callback)(uint64_t size, size_t block_size,
                                                        MHD_ContentReaderCallback crc,
                                                        void *crc_cls,
                                                        MHD_ContentReaderFreeCallback crfc);
  struct MHD_Response *(*create_response_from_fd_at_offset64)(uint64_t size, int fd,
                                                              uint64_t offset);
  enum MHD_Result (*add_response_header)(struct MHD_Response *r, const char *header,
                                         const char *content);
  enum MHD_Result (*queue_response)(struct MHD_Connection *c, unsigned int status,
                                    struct MHD_Response *r);
  void (*destroy_response)(struct MHD_Response *r);
  void (*suspend_connection)(struct MHD_Connection *c);
  void (*resume_connection)(struct MHD_Connection *c);
  const union MHD_ConnectionInfo *(*get_connection_info)(struct MHD_Connection *c,
                                                         enum MHD_ConnectionInfoType info_type,
                                                         ...);
};
extern struct agsx_mhd agsx_mhd;

/* Loads the library once ($AGSX_LIBMICROHTTPD names another file). */
int agsx_mhd_load(agsx_error_t *err);

/* Against DNS rebinding (api/wire.h): whether the Host of C's request is
 * this server's (the address the client reached, localhost, or NAMES) and
 * its Origin, when a browser sends one, too. When not, *RET_ORIGIN says
 * which header failed and *RET_VALUE is its value. */
bool agsx_mhd_host_allowed(struct MHD_Connection *c, char *const *names, bool *ret_origin,
                           const char **ret_value);

#endif
