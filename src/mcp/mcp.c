/* agsx — mcp: the server's loop, the protocol's lifecycle methods and
 * the session's end (see mcp.h). */
#include "config.h"

#include "mcp/mcp-internal.h"
#include "mcp/rpc.h"
#include "sandbox/control.h"
#include "state/state.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>

/* The newest first: the revision answered when the client's is unknown.
 * The current revision of the official TypeScript SDK and the older ones
 * it still accepts. */
static const char *const versions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05",
                                       "2024-10-07"};

static void send_line(struct agsx_mcp *s, const char *line, size_t len) {
  /* OUT_FD is blocking: a client that reads nothing holds us up, as any
   * pipe would; a client that is gone ends the session. */
  if (agsx_write_all(s->cfg->out_fd, line, len) < 0 ||
      agsx_write_all(s->cfg->out_fd, "\n", 1) < 0) {
    agsx_warn("mcp: write an answer: %s", strerror(errno));
    s->stop = true;
  }
}

static void send_result(struct agsx_mcp *s, const char *id, const char *result) {
  size_t len;
  _cleanup_free_ char *line = agsx_rpc_result(id, result, &len);
  send_line(s, line, len);
}

static void send_error(struct agsx_mcp *s, const char *id, int code, const char *msg) {
  size_t len;
  _cleanup_free_ char *line = agsx_rpc_error(id, code, msg, &len);
  send_line(s, line, len);
}

void agsx_mcp_progress(struct agsx_mcp *s, int64_t progress, int64_t total, const char *message) {
  int64_t now = agsx_mono_ns();
  if (s->progress_token == NULL || now - s->progress_at < 1000000000LL || progress <= s->progress)
    return;
  s->progress_at = now;
  s->progress = progress;
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  agsx_json_str(g, message);
  size_t mlen;
  _cleanup_free_ char *msg = agsx_json_gen_steal(g, &mlen);
  _cleanup_free_ char *tot = total > 0 ? xasprintf(",\"total\":%lld", (long long)total) : NULL;
  _cleanup_free_ char *line = xasprintf(
      "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":"
      "%s,\"progress\":%lld%s,\"message\":%s}}",
      s->progress_token, (long long)progress, tot ? tot : "", msg);
  send_line(s, line, strlen(line));
}

static void initialize(struct agsx_mcp *s, const struct agsx_rpc_msg *m) {
  const char *want = agsx_json_get_string(m->params, "protocolVersion");
  if (want == NULL)
    return send_error(s, m->id, AGSX_RPC_INVALID_PARAMS,
                      "invalid params: initialize needs \"protocolVersion\"");
  const char *version = versions[0];
  for (size_t i = 0; i < AGSX_ARRAY_SIZE(versions); i++)
    if (strcmp(want, versions[i]) == 0)
      version = versions[i];
  _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "protocolVersion", version);
  agsx_json_key(g, "capabilities");
  yajl_gen_map_open(g);
  agsx_json_key(g, "tools");
  yajl_gen_map_open(g);
  agsx_json_kv_bool(g, "listChanged", false);
  yajl_gen_map_close(g);
  agsx_json_key(g, "resources");
  yajl_gen_map_open(g);
  agsx_json_kv_bool(g, "listChanged", false);
  agsx_json_kv_bool(g, "subscribe", false);
  yajl_gen_map_close(g);
  yajl_gen_map_close(g);
  agsx_json_key(g, "serverInfo");
  yajl_gen_map_open(g);
  agsx_json_kv_str(g, "name", "agsx");
  agsx_json_kv_str(g, "version", PACKAGE_VERSION);
  yajl_gen_map_close(g);
  agsx_json_kv_str(g, "instructions",
                   "Sandboxes for running untrusted code. sandbox_create gives an id; exec runs "
                   "commands in it (process_start in the background), the file_ tools work on "
                   "its files, snapshot_create and sandbox_rollback go back, sandbox_fork "
                   "branches. Sandboxes of this session are stopped when it ends unless created "
                   "with keep: true.");
  yajl_gen_map_close(g);
  size_t len;
  _cleanup_free_ char *res = agsx_json_gen_steal(g, &len);
  send_result(s, m->id, res);
  agsx_info("mcp: session %s: client speaks %s, answered %s", s->session, want, version);
}

static void request(struct agsx_mcp *s, const struct agsx_rpc_msg *m) {
  if (strcmp(m->method, "initialize") == 0)
    return initialize(s, m);
  if (strcmp(m->method, "ping") == 0)
    return send_result(s, m->id, "{}");
  if (strcmp(m->method, "tools/list") == 0) {
    _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
    agsx_mcp_tools_list(g);
    size_t len;
    _cleanup_free_ char *res = agsx_json_gen_steal(g, &len);
    return send_result(s, m->id, res);
  }
  if (strcmp(m->method, "resources/list") == 0 ||
      strcmp(m->method, "resources/templates/list") == 0) {
    _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
    if (strcmp(m->method, "resources/list") == 0)
      agsx_mcp_resources_list(s, g);
    else
      agsx_mcp_resource_templates(g);
    size_t len;
    _cleanup_free_ char *res = agsx_json_gen_steal(g, &len);
    return send_result(s, m->id, res);
  }
  if (strcmp(m->method, "resources/read") == 0) {
    const char *uri = m->params ? agsx_json_get_string(m->params, "uri") : NULL;
    if (uri == NULL)
      return send_error(s, m->id, AGSX_RPC_INVALID_PARAMS,
                        "invalid params: resources/read needs \"uri\"");
    _cleanup_gen_ yajl_gen g = agsx_json_gen_new(false);
    agsx_error_t err = NULL;
    int code;
    if (agsx_mcp_resource_read(s, uri, g, &code, &err) < 0) {
      send_error(s, m->id, code, err->msg);
      agsx_error_free(&err);
      return;
    }
    size_t len;
    _cleanup_free_ char *res = agsx_json_gen_steal(g, &len);
    return send_result(s, m->id, res);
  }
  if (strcmp(m->method, "tools/call") == 0) {
    _cleanup_free_ char *res = NULL;
    agsx_error_t err = NULL;
    int code = AGSX_RPC_INTERNAL_ERROR;
    s->current_id = m->id;
    s->cancelled = false;
    yajl_val meta = m->params ? agsx_json_get(m->params, "_meta") : NULL;
    s->progress_token = YAJL_IS_OBJECT(meta) ? agsx_rpc_id_of(meta, "progressToken") : NULL;
    s->progress_at = agsx_mono_ns();
    s->progress = 0;
    int r = agsx_mcp_tools_call(s, m->params, &res, &code, &err);
    s->current_id = NULL;
    free(s->progress_token);
    s->progress_token = NULL;
    if (r < 0)
      send_error(s, m->id, code, err ? err->msg : "internal error");
    else if (r == 0)
      send_result(s, m->id, res);
    agsx_error_free(&err);
    return;
  }
  _cleanup_free_ char *msg = xasprintf("method not found: %.100s", m->method);
  send_error(s, m->id, AGSX_RPC_METHOD_NOT_FOUND, msg);
}

static void handle_line(struct agsx_mcp *s, const char *line, size_t len) {
  while (len && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
    len--;
  if (len == 0)
    return;
  struct agsx_rpc_msg m;
  int code;
  agsx_error_t err = NULL;
  if (agsx_rpc_parse(line, len, &m, &code, &err) < 0) {
    agsx_debug("mcp: %s", err->msg);
    send_error(s, m.id, code, err->msg);
    agsx_error_free(&err);
  } else if (m.kind == AGSX_RPC_REQUEST) {
    request(s, &m);
  } else if (m.kind == AGSX_RPC_NOTIFICATION) {
    /* notifications/initialized, notifications/cancelled of a request
     * already answered, anything unknown: no answer is ever due. */
    agsx_debug("mcp: notification %.100s", m.method);
  }
  agsx_rpc_msg_clear(&m);
}

bool agsx_mcp_input_room(const struct agsx_mcp *s) { return s->in_len < AGSX_MCP_INPUT_MAX; }

bool agsx_mcp_read_input(struct agsx_mcp *s) {
  while (agsx_mcp_input_room(s)) {
    if (s->in_cap - s->in_len < 65536) {
      s->in_cap = s->in_cap ? s->in_cap * 2 : 131072;
      s->in = xrealloc(s->in, s->in_cap);
    }
    ssize_t n = read(s->cfg->in_fd, s->in + s->in_len, s->in_cap - s->in_len);
    if (n > 0) {
      s->in_len += (size_t)n;
      continue; /* up to the bound; the rest waits in the pipe */
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      return true;
    if (n < 0)
      agsx_warn("mcp: read the input: %s", strerror(errno));
    s->eof = true;
    return false;
  }
  return true;
}

void agsx_mcp_scan_cancel(struct agsx_mcp *s) {
  while (s->scanned < s->in_len) {
    char *nl = memchr(s->in + s->scanned, '\n', s->in_len - s->scanned);
    if (nl == NULL)
      return;
    const char *line = s->in + s->scanned;
    size_t len = (size_t)(nl - line);
    s->scanned += len + 1;
    if (len > AGSX_RPC_LINE_MAX || memmem(line, len, "notifications/cancelled", 23) == NULL)
      continue;
    struct agsx_rpc_msg m;
    int code;
    agsx_error_t err = NULL;
    if (agsx_rpc_parse(line, len, &m, &code, &err) == 0 && m.kind == AGSX_RPC_NOTIFICATION &&
        strcmp(m.method, "notifications/cancelled") == 0 && s->current_id) {
      _cleanup_free_ char *id = agsx_rpc_id_of(m.params, "requestId");
      if (id && strcmp(id, s->current_id) == 0)
        s->cancelled = true;
    }
    agsx_error_free(&err);
    agsx_rpc_msg_clear(&m);
  }
}

/* Handles every complete line of the input. A line over the bound is
 * answered with a parse error and skipped up to its newline. */
static void handle_input(struct agsx_mcp *s) {
  size_t off = 0;
  while (!s->stop) {
    char *start = s->in + off, *nl = memchr(start, '\n', s->in_len - off);
    size_t avail = s->in_len - off;
    if (nl == NULL) {
      if (avail > AGSX_RPC_LINE_MAX && !s->discarding) {
        send_error(s, NULL, AGSX_RPC_PARSE_ERROR, AGSX_RPC_TOO_LONG);
        s->discarding = true;
      }
      if (s->discarding)
        off = s->in_len;
      break;
    }
    size_t len = (size_t)(nl - start);
    off += len + 1;
    if (s->discarding) {
      s->discarding = false;
      continue;
    }
    /* The line is copied out: a call reads more input meanwhile. */
    _cleanup_free_ char *line = xstrndup(start, len);
    size_t consumed = off;
    memmove(s->in, s->in + consumed, s->in_len - consumed);
    s->in_len -= consumed;
    s->scanned = 0;
    off = 0;
    handle_line(s, line, len);
  }
  memmove(s->in, s->in + off, s->in_len - off);
  s->in_len -= off;
  s->scanned = 0;
}

void agsx_mcp_end_session(struct agsx_mcp *s) {
  struct agsx_record *recs = NULL;
  size_t n = agsx_state_load(s->statefd, 0, &recs);
  for (size_t i = 0; i < n; i++) {
    const char *sess = agsx_label_get(recs[i].labels, AGSX_MCP_LABEL_SESSION);
    if (sess && strcmp(sess, s->session) == 0 && recs[i].status != AGSX_STATUS_EXITED &&
        !agsx_label_get(recs[i].labels, AGSX_MCP_LABEL_KEEP)) {
      agsx_error_t err = NULL;
      int pidfd = -1;
      if (agsx_control_request_stop(s->statefd, recs[i].id, &pidfd, &err) < 0 &&
          agsx_error_errno(&err) != ESRCH)
        agsx_warn("mcp: stop sandbox %.12s: %s", recs[i].id, err->msg);
      else
        agsx_info("mcp: session %s ended: stopped sandbox %.12s", s->session, recs[i].id);
      agsx_error_free(&err);
      agsx_closep(&pidfd);
    }
    agsx_record_clear(&recs[i]);
  }
  free(recs);
}

static void loop(struct agsx_mcp *s) {
  while (!s->stop && !s->eof) {
    struct pollfd p[2] = {{.fd = s->cfg->in_fd, .events = POLLIN},
                          {.fd = s->sigfd, .events = POLLIN}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR)
        continue;
      agsx_warn("mcp: poll: %s", strerror(errno));
      break;
    }
    if (p[1].revents)
      break; /* SIGINT, SIGTERM, SIGHUP: the session ends */
    if (p[0].revents)
      agsx_mcp_read_input(s);
    handle_input(s);
  }
}

int agsx_mcp_serve(const struct agsx_mcp_config *cfg, agsx_error_t *err) {
  struct agsx_mcp s = {.cfg = cfg, .statefd = -1, .sigfd = -1, .spawner = {-1, 0}};
  /* The spawner first: supervisors forked later keep nothing of ours. */
  agsx_random_hex(s.session, 8);
  if (agsx_spawner_start(&s.spawner, err) < 0)
    return -1;
  int rc = -1;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigprocmask(SIG_BLOCK, &set, NULL);
  signal(SIGPIPE, SIG_IGN);
  s.sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  /* O_NONBLOCK is the open file description's: a terminal shared with the
   * shell gets its flags back at the end. */
  int fl = fcntl(cfg->in_fd, F_GETFL);
  if (s.sigfd < 0 || fl < 0 || fcntl(cfg->in_fd, F_SETFL, fl | O_NONBLOCK) < 0) {
    agsx_error_set(err, errno, "set up the input");
    goto out;
  }
  if ((s.statefd = agsx_state_open(cfg->state, true, err)) < 0)
    goto out;
  for (size_t i = 0; cfg->host_paths && cfg->host_paths[i] && i < AGSX_MCP_HOST_PATHS_MAX; i++) {
    int fd = open(cfg->host_paths[i], O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
      agsx_error_set(err, errno, "--allow-host-path `%s`", cfg->host_paths[i]);
      goto out;
    }
    s.host_fds[s.n_host++] = fd;
  }
  agsx_info("mcp: session %s: serving MCP on stdio", s.session);
  loop(&s);
  agsx_mcp_end_session(&s);
  rc = 0;
out:
  if (fl >= 0)
    fcntl(cfg->in_fd, F_SETFL, fl);
  agsx_spawner_stop(&s.spawner);
  agsx_closep(&s.statefd);
  agsx_closep(&s.sigfd);
  for (size_t i = 0; i < s.n_host; i++)
    close(s.host_fds[i]);
  free(s.in);
  return rc;
}
