/* agsx: global options and the command table. */
#include "config.h"

#include "cmd.h"
#include "host/rootless.h"
#include "state/state.h"

#include <string.h>

enum { G_ROOT = 1, G_STATE, G_LOG_LEVEL, G_JSON };

const struct agsx_option agsx_global_options[] = {
    {"root", 0, "DIR",
     "Image store (default $AGSX_ROOT, else /var/lib/agsx; a user's: $XDG_DATA_HOME/agsx)", G_ROOT},
    {"state", 0, "DIR",
     "Sandbox state (default $AGSX_STATE, else /run/agsx; a user's: $XDG_RUNTIME_DIR/agsx)",
     G_STATE},
    {"log-level", 0, "LEVEL", "error, warning (default), info or debug", G_LOG_LEVEL},
    {"json", 0, NULL, "Print results as JSON", G_JSON},
    {0},
};

static const struct agsx_option image_ls_opts[] = {
    {"quiet", 'q', NULL, "Print image ids only", O_QUIET},
    {"digests", 0, NULL, "Show full manifest digests", O_DIGESTS},
    {"json", 0, NULL, "Print a JSON list (see agsx-image(1))", O_JSON},
    {0},
};

static const struct agsx_option image_load_opts[] = {
    {"tag", 't', "NAME[:TAG]", "Name the loaded image (the source must hold one image)", O_TAG},
    {"quiet", 'q', NULL, "Print nothing on success", O_QUIET},
    {"json", 0, NULL, "Print the loaded images as JSON", O_JSON},
    {0},
};

static const struct agsx_option image_rm_opts[] = {
    {"json", 0, NULL, "Print the removed references as JSON", O_JSON},
    {0},
};

static const struct agsx_option image_inspect_opts[] = {{0}};

static const struct agsx_option image_tag_opts[] = {{0}};

static const struct agsx_option image_save_opts[] = {
    {"output", 'o', "FILE", "Write to FILE (atomically) instead of standard output", O_OUTPUT},
    {"format", 0, "FORMAT", "oci-archive (default) or docker-archive", O_FORMAT},
    {0},
};

static const struct agsx_option image_pull_opts[] = {
    {"quiet", 'q', NULL, "Print only the pulled image's name; no progress", O_QUIET},
    {"json", 0, NULL, "Print the result as JSON: name, ref, digest, id", O_JSON},
    {"authfile", 0, "FILE", "Credentials (Docker config.json; default ~/.docker/config.json)",
     O_AUTHFILE},
    {"insecure", 0, NULL, "Allow plain HTTP and unverified TLS for this registry", O_INSECURE},
    {0},
};

static const struct agsx_option image_push_opts[] = {
    {"quiet", 'q', NULL, "Print only the pushed image's name", O_QUIET},
    {"json", 0, NULL, "Print the result as JSON: ref, digest", O_JSON},
    {"authfile", 0, "FILE", "Credentials (Docker config.json; default ~/.docker/config.json)",
     O_AUTHFILE},
    {"insecure", 0, NULL, "Allow plain HTTP and unverified TLS for this registry", O_INSECURE},
    {0},
};

static const struct agsx_option gc_opts[] = {
    {"images", 0, NULL, "Also remove blobs and unpacked layers no image uses", O_IMAGES},
    {"dry-run", 'n', NULL, "List what would be removed, remove nothing", O_DRY_RUN},
    {"json", 0, NULL, "Print what was removed as JSON", O_JSON},
    {0},
};

static const struct agsx_option run_opts[] = {
    {"detach", 'd', NULL, "Start in the background; print the id once the command runs", O_DETACH},
    {"name", 0, "NAME", "Name the sandbox (unique; usable wherever an id is)", O_NAME},
    {"label", 'l', "KEY=VALUE", "Set a label (repeatable; shown by ls and inspect)", O_LABEL},
    {"rm", 0, NULL, "Remove the sandbox's record when it ends", O_RM},
    {"interactive", 'i', NULL, "Keep stdin open and pass it to the command", O_INTERACTIVE},
    {"tty", 't', NULL, "Give the command a terminal", O_TTY},
    {"json", 0, NULL, "Capture output; print one JSON result (see agsx-run(1))", O_JSON},
    {"env", 'e', "KEY=VALUE", "Set an environment variable (KEY alone: the caller's value)", O_ENV},
    {"workdir", 'w', "DIR", "Working directory inside the sandbox", O_WORKDIR},
    {"user", 'u', "USER[:GROUP]", "Run as this user (name or id, from the image's /etc)", O_USER},
    {"hostname", 0, "NAME", "Host name of the sandbox (default: its short id)", O_HOSTNAME},
    {"timeout", 0, "DURATION", "Lifetime: 300s, 5m, 1h30m (default 5m, at most 24h)", O_TIMEOUT},
    {"network", 0, "MODE", "internal (default: loopback only), public or vpc:NAME", O_NETWORK},
    {"allow", 0, "RULE", "vpc: allow traffic, e.g. \"out tcp/443 0.0.0.0/0\" (see agsx-network(1))",
     O_ALLOW},
    {"deny", 0, "RULE", "vpc: deny traffic, e.g. \"in tcp/22\"", O_DENY},
    {"rules", 0, "FILE", "vpc: read allow/deny rules from FILE, one per line", O_RULES},
    {"egress-allow", 0, "RULE",
     "public, vpc: allow egress only to these: NAME, *.NAME, CIDR, with :PORT (see agsx-run(1))",
     O_EGRESS_ALLOW},
    {"egress-deny", 0, "RULE", "public, vpc: deny egress to NAME, *.NAME or CIDR[:PORT]",
     O_EGRESS_DENY},
    {"egress-rules", 0, "FILE", "Read egress allow/deny rules from FILE, one per line",
     O_EGRESS_RULES},
    {"publish", 'p', "[IP:]HOSTPORT:PORT",
     "Publish PORT[/udp] on the host (IP: 127.0.0.1; PORT alone: a free port)", O_PUBLISH},
    {"memory", 0, "SIZE",
     "Memory limit (e.g. 512m); beyond it the OOM killer kills a process of the sandbox", O_MEMORY},
    {"cpus", 0, "N", "CPU quota in CPUs (e.g. 0.5)", O_CPUS},
    {"pids", 0, "N", "Maximum number of processes (default 4096)", O_PIDS},
    {"disk", 0, "SIZE", "Size of the writable layer (default 1g)", O_DISK},
    {"read-only", 0, NULL, "Make the root filesystem read-only", O_READ_ONLY},
    {"volume", 'v', "SRC:DST[:ro]",
     "Bind-mount a host path, or mount named volume SRC (made if missing), into the sandbox",
     O_VOLUME},
    {"security-opt", 0, "OPT",
     "seccomp=FILE (OCI/Docker JSON) or seccomp=unconfined; no-new-privileges=false: setuid works",
     O_SECURITY_OPT},
    {"pull", 0, "POLICY", "Pull the image: missing (default), always or never", O_PULL},
    {"timing", 0, NULL, "Print the start-up time of each phase on stderr", O_TIMING},
    {"pool", 0, "NAME",
     "Claim a parked sandbox of pool NAME (IMAGE optional; empty pool: a cold start)", O_POOL},
    {0},
};

static const struct agsx_option pool_create_opts[] = {
    {"image", 0, "IMAGE", "The pool's image (required)", O_IMAGE},
    {"size", 0, "N", "How many sandboxes to keep parked (required, 1 to 1024)", O_SIZE},
    {"timeout", 0, "DURATION", "A parked sandbox's lifetime, then replaced (default 1h)",
     O_TIMEOUT},
    {"network", 0, "MODE", "internal (default: loopback only), public or vpc:NAME", O_NETWORK},
    {"memory", 0, "SIZE", "Memory limit of each sandbox (e.g. 512m)", O_MEMORY},
    {"cpus", 0, "N", "CPU quota in CPUs (e.g. 0.5)", O_CPUS},
    {"pids", 0, "N", "Maximum number of processes (default 4096)", O_PIDS},
    {"disk", 0, "SIZE", "Size of the writable layer (default 1g)", O_DISK},
    {"read-only", 0, NULL, "Make the root filesystem read-only", O_READ_ONLY},
    {"volume", 'v', "SRC:DST[:ro]", "Bind-mount a host path into each sandbox", O_VOLUME},
    {"security-opt", 0, "OPT",
     "seccomp=FILE (OCI/Docker JSON) or seccomp=unconfined; no-new-privileges=false: setuid works",
     O_SECURITY_OPT},
    {"env", 'e', "KEY=VALUE", "Default environment variable (a claim's -e come after)", O_ENV},
    {"workdir", 'w', "DIR", "Default working directory (a claim's -w wins)", O_WORKDIR},
    {"user", 'u', "USER[:GROUP]", "Default user (a claim's -u wins)", O_USER},
    {"pull", 0, "POLICY", "Pull the image: missing (default), always or never", O_PULL},
    {"json", 0, NULL, "Print the pool as JSON (see agsx-pool(1))", O_JSON},
    {0},
};

static const struct agsx_option pool_ls_opts[] = {
    {"quiet", 'q', NULL, "Print pool names only", O_QUIET},
    {"json", 0, NULL, "Print a JSON list (see agsx-pool(1))", O_JSON},
    {0},
};

static const struct agsx_option exec_opts[] = {
    {"interactive", 'i', NULL, "Keep stdin open and pass it to the command", O_INTERACTIVE},
    {"tty", 't', NULL, "Give the command a terminal", O_TTY},
    {"json", 0, NULL, "Capture output; print one JSON result (see agsx-exec(1))", O_JSON},
    {"env", 'e', "KEY=VALUE", "Set an environment variable (KEY alone: the caller's value)", O_ENV},
    {"workdir", 'w', "DIR", "Working directory (default: the sandbox's)", O_WORKDIR},
    {"user", 'u', "USER[:GROUP]", "Run as this user (default: the sandbox's)", O_USER},
    {"timeout", 0, "DURATION", "Kill the command's whole process tree after DURATION", O_TIMEOUT},
    {"detach", 'd', NULL, "Run it in the background, owned by the sandbox; print its pid",
     O_DETACH},
    {0},
};

static const struct agsx_option cp_opts[] = {
    {"archive", 'a', NULL, "Keep uids and gids (mapped into and out of the sandbox's range)",
     O_ARCHIVE},
    {"follow-link", 'L', NULL, "Follow SRC itself if it is a symlink", O_FOLLOW_LINK},
    {0},
};

static const struct agsx_option ls_opts[] = {
    {"all", 'a', NULL, "Also list ended sandboxes, with stop reason and exit code", O_ALL},
    {"quiet", 'q', NULL, "Print short ids only", O_QUIET},
    {"no-trunc", 0, NULL, "Print full 32-digit ids (names and images are never cut)", O_NO_TRUNC},
    {"filter", 'f', "label=KEY[=VALUE]",
     "Only sandboxes with this label (repeatable: all must match)", O_FILTER},
    {"json", 0, NULL, "Print a JSON list (see agsx-ls(1))", O_JSON},
    {0},
};

static const struct agsx_option kill_opts[] = {
    {"signal", 's', "SIGNAL", "Only send SIGNAL (name or number) to the command", O_SIGNAL},
    {"all", 'a', NULL, "Every running sandbox", O_ALL},
    {0},
};

static const struct agsx_option inspect_opts[] = {
    {"json", 0, NULL, "Print JSON (the only format; for symmetry with other commands)", O_JSON},
    {0},
};

static const struct agsx_option wait_opts[] = {
    {"json", 0, NULL, "Print a JSON list of id, name, exit_code, stop_reason", O_JSON},
    {0},
};

static const struct agsx_option logs_opts[] = {
    {"follow", 'f', NULL, "Follow the log until the sandbox ends", O_FOLLOW},
    {"tail", 'n', "N", "Only the last N lines (default: all)", O_TAIL},
    {"timestamps", 't', NULL, "Prefix each line with its time (RFC 3339, UTC)", O_TIMESTAMPS},
    {"exec", 0, "PID", "The output of the process `agsx exec -d` started as PID instead", O_EXEC},
    {"network", 0, NULL, "What its egress rules blocked instead (as agsx netlog)", O_NETWORK},
    {"json", 0, NULL, "With --network: print the log as JSON", O_JSON},
    {0},
};

static const struct agsx_option rm_opts[] = {
    {"force", 'f', NULL, "Stop running sandboxes first (as kill does), then remove them", O_FORCE},
    {"json", 0, NULL, "Print the removed ids as a JSON list", O_JSON},
    {0},
};

static const struct agsx_option stats_opts[] = {
    {"no-stream", 0, NULL, "Print one sample (over 1 s) and exit", O_NO_STREAM},
    {"json", 0, NULL, "Print a JSON list per sample (see agsx-stats(1))", O_JSON},
    {0},
};

static const struct agsx_option update_opts[] = {
    {"timeout", 0, "DURATION", "New lifetime, counted from now (at most 24h)", O_TIMEOUT},
    {"egress-allow", 0, "RULE",
     "New egress rules: allow NAME, *.NAME or CIDR[:PORT] (replaces all)", O_EGRESS_ALLOW},
    {"egress-deny", 0, "RULE", "New egress rules: deny NAME, *.NAME or CIDR[:PORT]", O_EGRESS_DENY},
    {"egress-rules", 0, "FILE", "New egress rules from FILE, one per line", O_EGRESS_RULES},
    {"egress-clear", 0, NULL, "Remove every egress rule (the network's default egress again)",
     O_EGRESS_CLEAR},
    {"json", 0, NULL, "Print the new deadline as JSON", O_JSON},
    {0},
};

static const struct agsx_option network_create_opts[] = {
    {"subnet", 0, "CIDR", "The network's IPv4 subnet (required), e.g. 10.20.0.0/24", O_SUBNET},
    {"allow", 0, "RULE", "Allow traffic, e.g. \"out tcp/443 0.0.0.0/0\" (see agsx-network(1))",
     O_ALLOW},
    {"deny", 0, "RULE", "Deny traffic, e.g. \"in tcp/22\"", O_DENY},
    {"rules", 0, "FILE", "Read allow/deny rules from FILE, one per line", O_RULES},
    {"json", 0, NULL, "Print the new network as JSON", O_JSON},
    {0},
};

static const struct agsx_option network_update_opts[] = {
    {"allow", 0, "RULE", "Allow traffic, e.g. \"out tcp/443 0.0.0.0/0\" (replaces every rule)",
     O_ALLOW},
    {"deny", 0, "RULE", "Deny traffic, e.g. \"in tcp/22\"", O_DENY},
    {"rules", 0, "FILE", "Read allow/deny rules from FILE, one per line (/dev/null: none)",
     O_RULES},
    {"json", 0, NULL, "Print the network as JSON, with what the update touched", O_JSON},
    {0},
};

static const struct agsx_option network_ls_opts[] = {
    {"quiet", 'q', NULL, "Print names only", O_QUIET},
    {"json", 0, NULL, "Print a JSON list", O_JSON},
    {0},
};

static const struct agsx_option volume_ls_opts[] = {
    {"quiet", 'q', NULL, "Print names only", O_QUIET},
    {"json", 0, NULL, "Print a JSON list", O_JSON},
    {0},
};

static const struct agsx_option build_opts[] = {
    {"tag", 't', "NAME[:TAG]", "Name the image (repeatable)", O_TAG},
    {"file", 'f', "FILE", "The Dockerfile (default CONTEXT/Dockerfile)", O_FILE},
    {"build-arg", 0, "KEY=VALUE", "Set a build argument (KEY alone: the caller's value)",
     O_BUILD_ARG},
    {"network", 0, "MODE", "Network of RUN steps: internal, public (default) or vpc:NAME",
     O_NETWORK},
    {"egress-allow", 0, "RULE", "RUN steps may reach only these: NAME, *.NAME, CIDR[:PORT]",
     O_EGRESS_ALLOW},
    {"egress-deny", 0, "RULE", "RUN steps may not reach NAME, *.NAME or CIDR[:PORT]",
     O_EGRESS_DENY},
    {"egress-rules", 0, "FILE", "Read RUN steps' egress rules from FILE, one per line",
     O_EGRESS_RULES},
    {"no-cache", 0, NULL, "Do not use the build cache", O_NO_CACHE},
    {"pull", 0, "POLICY", "Pull FROM images: missing (default), always or never", O_PULL},
    {"platform", 0, "PLATFORM", "Target platform: only linux/amd64", O_PLATFORM},
    {"quiet", 'q', NULL, "Print only the image id", O_QUIET},
    {0},
};

static const struct agsx_option browser_opts[] = {
    {"name", 0, "NAME", "Name the sandbox (unique; usable wherever an id is)", O_NAME},
    {"network", 0, "MODE", "Network mode, as for run (default internal: loopback only)", O_NETWORK},
    {"publish", 'p', "[IP:]HOSTPORT",
     "Host address of the DevTools endpoint (default "
     "127.0.0.1 and a free port)",
     O_PUBLISH},
    {"timeout", 0, "DURATION", "Lifetime: 300s, 5m, 1h30m (default 5m, at most 24h)", O_TIMEOUT},
    {"memory", 0, "SIZE",
     "Memory limit of the whole browser (default 2g; none where limits are off)", O_MEMORY},
    {"image", 0, "IMAGE", "Image with Chromium (default: host, the host's Chromium)", O_IMAGE},
    {"user", 'u', "USER[:GROUP]", "Run Chromium as this user (default 1000:1000)", O_USER},
    {"view", 0, NULL, "Run Chromium headed, with a live view a person opens in a browser (noVNC)",
     O_VIEW},
    {"takeover", 0, NULL, "With --view: also a takeover URL, whose view takes mouse and keyboard",
     O_TAKEOVER},
    {"json", 0, NULL, "Print id, ws_url, http_url... as JSON (see agsx-browser(1))", O_JSON},
    {0},
};

static const struct agsx_option snapshot_opts[] = {
    {"json", 0, NULL, "Print the snapshot as JSON (with how long the sandbox was frozen)", O_JSON},
    {0},
};

static const struct agsx_option snapshot_ls_opts[] = {
    {"quiet", 'q', NULL, "Print snapshot names only", O_QUIET},
    {"json", 0, NULL, "Print a JSON list (see agsx-snapshot(1))", O_JSON},
    {0},
};

static const struct agsx_option commit_opts[] = {
    {"snapshot", 0, "NAME", "Commit this snapshot of the sandbox instead of its current state",
     O_SNAPSHOT},
    {"quiet", 'q', NULL, "Print only the image id (not how long the sandbox was frozen)", O_QUIET},
    {"json", 0, NULL, "Print id, sandbox, image, frozen_ms, duration_ms as JSON", O_JSON},
    {0},
};

static const struct agsx_option fork_opts[] = {
    {"name", 0, "NAME", "Name the fork (with -n: NAME-1, NAME-2, ...)", O_NAME},
    {"count", 'n', "COUNT", "Start COUNT forks (default 1, at most 64)", O_COUNT},
    {"timeout", 0, "DURATION", "Lifetime of each fork (default: the source's)", O_TIMEOUT},
    {"json", 0, NULL, "Print a JSON list of the forks (id, name, address)", O_JSON},
    {0},
};

static const struct agsx_option mcp_opts[] = {
    {"network", 0, "MODE",
     "A network sandbox_create may ask for besides internal (default: internal only): "
     "public or vpc:NAME",
     O_NETWORK},
    {"max-sandboxes", 0, "N", "Running sandboxes per session at most (default 8, at most 256)",
     O_MAX_SANDBOXES},
    {"allow-host-path", 0, "DIR",
     "A host directory file_copy_in and file_copy_out may use, and what is below it "
     "(repeatable; default: none)",
     O_ALLOW_HOST_PATH},
    {"listen", 0, "ADDR:PORT",
     "Serve MCP over Streamable HTTP at http://ADDR:PORT/mcp instead of stdio (loopback only; "
     "bearer token $AGSX_MCP_TOKEN, else a new one, printed)",
     O_LISTEN},
    {0},
};

static const struct agsx_option serve_opts[] = {
    {"listen", 0, "ADDR:PORT",
     "Listen here (default 127.0.0.1:3000; loopback unless --listen-public)", O_LISTEN},
    {"listen-public", 0, NULL,
     "Allow a non-loopback --listen (risky: plain HTTP, and whoever reaches it with the key "
     "runs code on this host)",
     O_LISTEN_PUBLIC},
    {"host", 0, "NAME",
     "Also answer requests for host NAME and one label below it (E2B_DOMAIN; repeatable; "
     "the listen address and localhost always)",
     O_SERVE_HOST},
    {"ports-listen", 0, "ADDR:PORT",
     "Also forward sandboxes' own ports, by E2B's host names PORT-ID.DOMAIN, from this "
     "listener (the sandboxes' domain: localhost:PORT; loopback unless --listen-public)",
     O_PORTS_LISTEN},
    {"ports-tls", 0, NULL,
     "Speak TLS on --ports-listen (the SDKs' https:// URLs) with a certificate from agsx's own "
     "CA, which signs localhost names only (ROOT/tls/ca.pem: trust it once)",
     O_PORTS_TLS},
    {"ports-cert", 0, "FILE", "Speak TLS on --ports-listen with this certificate chain (PEM)",
     O_PORTS_CERT},
    {"ports-key", 0, "FILE", "The key of --ports-cert (PEM)", O_PORTS_KEY},
    {"api-key", 0, "KEY", "The API key (default $AGSX_API_KEY, else the key file's)", O_API_KEY},
    {"api-key-file", 0, "FILE", "Read (or generate) the key here (default /etc/agsx/api-key)",
     O_API_KEY_FILE},
    {"network", 0, "MODE",
     "Network of sandboxes allowed internet access: internal (default), "
     "public or vpc:NAME",
     O_NETWORK},
    {"template", 0, "NAME=IMAGE[,OPT]",
     "Map a templateID to an image (repeatable; base: e2b-base once built, "
     "code-interpreter-v1: code-interpreter, else host); OPT no-new-privileges=false: sudo works",
     O_TEMPLATE},
    {"default-user", 0, "USER",
     "envd's default user (default: user if the image has it, else root)", O_DEFAULT_USER},
    {"pool", 0, "TEMPLATE=POOL",
     "Sandbox.create() of TEMPLATE claims a parked sandbox of warm pool POOL (repeatable)", O_POOL},
    {0},
};

static const struct agsx_option netlog_opts[] = {
    {"json", 0, NULL, "Print the log as JSON (see agsx-netlog(1))", O_JSON},
    {0},
};

static const struct agsx_option info_opts[] = {
    {"json", 0, NULL, "Print the same as one JSON object (see agsx-info(1))", O_JSON},
    {0},
};

static const struct agsx_option none[] = {{0}};

/* Commands of DESIGN.md §3 that later work fills in say so and exit 125. */
const struct agsx_command agsx_commands[] = {
    {"run", "[OPTIONS] IMAGE [CMD [ARG...]]", "Run a command in a new sandbox", run_opts,
     agsx_cmd_run, NULL, NULL},
    {"exec", "[OPTIONS] SANDBOX CMD [ARG...]", "Run a command in a running sandbox", exec_opts,
     agsx_cmd_exec, NULL, NULL},
    {"cp", "[OPTIONS] SANDBOX:PATH HOSTPATH|-  or  HOSTPATH|- SANDBOX:PATH",
     "Copy files between a sandbox and the host", cp_opts, agsx_cmd_cp, NULL, NULL},
    {"ls", "[OPTIONS]", "List sandboxes", ls_opts, agsx_cmd_ls, NULL, NULL},
    {"kill", "[OPTIONS] SANDBOX...", "Stop sandboxes or send them a signal", kill_opts,
     agsx_cmd_kill, NULL, NULL},
    {"inspect", "SANDBOX...", "Show sandboxes' full records as JSON", inspect_opts,
     agsx_cmd_inspect, NULL, NULL},
    {"wait", "SANDBOX...", "Wait for sandboxes to end; print their exit codes", wait_opts,
     agsx_cmd_wait, NULL, NULL},
    {"logs", "[OPTIONS] SANDBOX", "Show a detached sandbox's output", logs_opts, agsx_cmd_logs,
     NULL, NULL},
    {"rm", "[OPTIONS] SANDBOX...", "Remove ended sandboxes' records", rm_opts, agsx_cmd_rm, NULL,
     NULL},
    {"stats", "[OPTIONS] [SANDBOX...]", "Show CPU, memory, pids, disk and network use", stats_opts,
     agsx_cmd_stats, NULL, NULL},
    {"update", "[--timeout DURATION] [--egress-… RULE] SANDBOX",
     "Change a running sandbox's deadline or egress rules", update_opts, agsx_cmd_update, NULL,
     NULL},
    {"netlog", "[--json] SANDBOX", "Show what a sandbox's egress rules blocked", netlog_opts,
     agsx_cmd_netlog, NULL, NULL},
    {"pause", "SANDBOX...", "Freeze every process of running sandboxes", none, agsx_cmd_pause, NULL,
     NULL},
    {"unpause", "SANDBOX...", "Resume paused sandboxes", none, agsx_cmd_unpause, NULL, NULL},
    {"commit", "[OPTIONS] SANDBOX [IMAGE[:TAG]]", "Make an image of a sandbox's filesystem",
     commit_opts, agsx_cmd_commit, NULL, NULL},
    {"fork", "[OPTIONS] SANDBOX [CMD [ARG...]]",
     "Start new sandboxes from a running sandbox's current filesystem", fork_opts, agsx_cmd_fork,
     NULL, NULL},
    {"snapshot", "[OPTIONS] SANDBOX [NAME]", "Record a running sandbox's filesystem", snapshot_opts,
     agsx_cmd_snapshot, NULL, NULL},
    {"snapshot ls", "[OPTIONS] [SANDBOX]", "List the snapshots of running sandboxes",
     snapshot_ls_opts, agsx_cmd_snapshot_ls, NULL, NULL},
    {"snapshot rm", "SANDBOX NAME...", "Remove snapshots", none, agsx_cmd_snapshot_rm, NULL, NULL},
    {"rollback", "SANDBOX NAME",
     "Restart a sandbox's command on the filesystem of one of its snapshots", none,
     agsx_cmd_rollback, NULL, NULL},
    {"port", "SANDBOX [PORT[/PROTO]]", "List a sandbox's published ports", none, agsx_cmd_port,
     NULL, NULL},
    {"gc", "[OPTIONS]", "Remove what ended sandboxes and crashes left behind", gc_opts, agsx_cmd_gc,
     NULL, NULL},
    {"info", "[--json]", "Show the kernel features and cgroups agsx finds, and the path it takes",
     info_opts, agsx_cmd_info, NULL, NULL},
    {"browser", "[OPTIONS] [-- CHROMIUM-FLAG...]",
     "Start Chromium in a sandbox; print its DevTools WebSocket URL (and a live view's)",
     browser_opts, agsx_cmd_browser, NULL, NULL},
    {"code", "[OPTIONS] SANDBOX [CODE|-]",
     "Run code in a sandbox's stateful code context (Python, bash)", agsx_code_opts, agsx_cmd_code,
     NULL, NULL},
    {"build", "[OPTIONS] CONTEXT", "Build an image from a Dockerfile", build_opts, agsx_cmd_build,
     NULL, NULL},
    {"serve", "[OPTIONS]", "Serve the E2B-compatible HTTP API (SDKs run unmodified)", serve_opts,
     agsx_cmd_serve, NULL, NULL},
    {"mcp", "[OPTIONS]",
     "Serve sandboxes as MCP tools over stdio or HTTP (for agents' MCP clients)", mcp_opts,
     agsx_cmd_mcp, NULL,
     "What an agent can do through it, whatever its prompt says (agsx-mcp(1), SAFE DEFAULTS):\n"
     "start at most --max-sandboxes running sandboxes (8, forks and browsers included) from\n"
     "images already in the store; only the internal network (no way out of the sandbox)\n"
     "unless --network allows one more; each lives 30 min unless the agent asks for up to\n"
     "24 h (and again: sandbox_extend), and stops when the session ends (stdin closes; over\n"
     "HTTP: DELETE, an hour idle, or the server's stop) unless created with keep; publish\n"
     "their ports on the host's loopback only; run commands, read, write, move and remove\n"
     "files, snapshot and roll back only\n"
     "inside its own session's sandboxes, under agsx's isolation; get back at most 1 MiB of\n"
     "stdout and of stderr per exec and 1 MiB per file. No host path is read, written or\n"
     "mounted, but below each --allow-host-path DIR (file_copy_in, file_copy_out).\n"},
    {"image ls", "[OPTIONS]", "List images", image_ls_opts, agsx_cmd_image_ls, NULL, NULL},
    {"image load", "[OPTIONS] PATH|-",
     "Load images from an OCI layout, an oci-archive or a docker-archive", image_load_opts,
     agsx_cmd_image_load, NULL, NULL},
    {"image rm", "[OPTIONS] IMAGE...", "Remove images", image_rm_opts, agsx_cmd_image_rm, NULL,
     NULL},
    {"image inspect", "IMAGE...", "Show images' manifest and config as JSON", image_inspect_opts,
     agsx_cmd_image_inspect, NULL, NULL},
    {"image pull", "[OPTIONS] REF", "Pull an image from a registry", image_pull_opts,
     agsx_cmd_image_pull, NULL, NULL},
    {"image tag", "SOURCE TARGET", "Give an image another name", image_tag_opts, agsx_cmd_image_tag,
     NULL, NULL},
    {"image save", "[OPTIONS] IMAGE...", "Write images to an oci-archive or a docker-archive",
     image_save_opts, agsx_cmd_image_save, NULL, NULL},
    {"image push", "[OPTIONS] IMAGE [[REGISTRY/]REPO[:TAG]]", "Push an image to a registry",
     image_push_opts, agsx_cmd_image_push, NULL, NULL},
    {"load", "[OPTIONS] PATH|-", "Load images (alias of image load)", image_load_opts,
     agsx_cmd_image_load, "image load", NULL},
    {"pull", "[OPTIONS] REF", "Pull an image (alias of image pull)", image_pull_opts,
     agsx_cmd_image_pull, "image pull", NULL},
    {"push", "[OPTIONS] IMAGE [[REGISTRY/]REPO[:TAG]]", "Push an image (alias of image push)",
     image_push_opts, agsx_cmd_image_push, "image push", NULL},
    {"pool create", "NAME --image IMAGE --size N [OPTIONS]",
     "Create a warm pool of parked sandboxes (claimed by run --pool)", pool_create_opts,
     agsx_cmd_pool_create, NULL, NULL},
    {"pool ls", "[OPTIONS]", "List warm pools", pool_ls_opts, agsx_cmd_pool_ls, NULL, NULL},
    {"pool rm", "NAME...", "Remove warm pools and their parked sandboxes", none, agsx_cmd_pool_rm,
     NULL, NULL},
    {"network create", "[OPTIONS] --subnet CIDR NAME", "Create a vpc network", network_create_opts,
     agsx_cmd_network_create, NULL, NULL},
    {"network update", "[OPTIONS] NAME", "Replace a vpc network's rules, live", network_update_opts,
     agsx_cmd_network_update, NULL, NULL},
    {"network ls", "[OPTIONS]", "List networks", network_ls_opts, agsx_cmd_network_ls, NULL, NULL},
    {"network rm", "NAME...", "Remove vpc networks no sandbox uses", none, agsx_cmd_network_rm,
     NULL, NULL},
    {"network inspect", "NAME...", "Show networks as JSON", none, agsx_cmd_network_inspect, NULL,
     NULL},
    {"volume create", "NAME...", "Create named volumes (run -v NAME:/path mounts one)", none,
     agsx_cmd_volume_create, NULL, NULL},
    {"volume ls", "[OPTIONS]", "List named volumes", volume_ls_opts, agsx_cmd_volume_ls, NULL,
     NULL},
    {"volume rm", "NAME...", "Remove named volumes and their data (none a sandbox uses)", none,
     agsx_cmd_volume_rm, NULL, NULL},
    {0},
};

const struct agsx_command *agsx_command_find(const char *name) {
  for (const struct agsx_command *c = agsx_commands; c->name; c++)
    if (strcmp(c->name, name) == 0)
      return c;
  return NULL;
}

int agsx_cmd_not_yet(struct agsx_ctx *ctx, const struct agsx_command *cmd, int argc, char **argv) {
  (void)ctx;
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      agsx_print_command_help(cmd, stdout);
      return 0;
    }
  return agsx_failf("`%s` is not implemented yet", cmd->name);
}

/* Global options come before the command. */
static int parse_globals(struct agsx_ctx *ctx, int argc, char **argv) {
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      agsx_print_main_help(stdout);
      exit(0);
    }
    if (strcmp(a, "--version") == 0) {
      printf("agsx version %s\n", PACKAGE_VERSION);
      exit(0);
    }
    if (strcmp(a, "--json") == 0) {
      ctx->json = true;
      continue;
    }
    const char *eq = strchr(a, '=');
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    const struct agsx_option *o = NULL;
    for (const struct agsx_option *g = agsx_global_options; g->long_name; g++)
      if (len == strlen(g->long_name) + 2 && strncmp(a + 2, g->long_name, len - 2) == 0 &&
          a[1] == '-')
        o = g;
    if (o == NULL || o->arg == NULL)
      return agsx_failf("unknown global option `%s` (see agsx --help)", a), -1;
    const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
    if (v == NULL || *v == '\0')
      return agsx_failf("option `--%s` needs a value (%s)", o->long_name, o->arg), -1;
    if (o->id == G_ROOT)
      ctx->root = v;
    else if (o->id == G_STATE)
      ctx->state = v;
    else if (agsx_log_level_parse(v, &agsx_log_level) < 0)
      return agsx_failf("invalid log level `%s` (error, warning, info or debug)", v), -1;
  }
  return i;
}

/* "image ls" is two words; "images" style single words map directly. */
static const struct agsx_command *lookup(int argc, char **argv, int *ret_words) {
  if (argc >= 2) {
    char two[128];
    snprintf(two, sizeof(two), "%s %s", argv[0], argv[1]);
    const struct agsx_command *c = agsx_command_find(two);
    if (c) {
      *ret_words = 2;
      return c;
    }
  }
  *ret_words = 1;
  return agsx_command_find(argv[0]);
}

static int group_help(const char *group, FILE *out) {
  size_t n = strlen(group);
  int found = 0;
  fprintf(out, "Usage: agsx %s COMMAND\n\nCommands:\n", group);
  for (const struct agsx_command *c = agsx_commands; c->name; c++)
    if (strncmp(c->name, group, n) == 0 && c->name[n] == ' ') {
      fprintf(out, "  %-12s %s%s\n", c->name + n + 1, c->summary,
              c->run == agsx_cmd_not_yet ? " (not implemented yet)" : "");
      found = 1;
    }
  return found;
}

int main(int argc, char **argv) {
  agsx_proc_title_init(argc, argv);
  /* The library's messages go where the CLI's own go: "agsx: ..." on fd 2. */
  agsx_log_set_sink(agsx_log_sink_stderr, NULL);
  /* An ordinary user's defaults are per user (host/rootless.h); a missing
   * runtime directory is an error only if no --state or AGSX_STATE says
   * where the state goes. */
  const char *def_root = "/var/lib/agsx", *def_state = "/run/agsx";
  _cleanup_free_ char *uroot = NULL, *ustate = NULL, *uconf = NULL;
  agsx_error_t perr = NULL;
  bool user = agsx_rootless_wanted();
  if (user && agsx_rootless_paths(&uroot, &ustate, &uconf, &perr) == 0) {
    def_root = uroot;
    def_state = ustate;
    if (getenv("AGSX_CONFIG") == NULL)
      setenv("AGSX_CONFIG", uconf, 1);
  }
  struct agsx_ctx ctx = {
      .root = getenv("AGSX_ROOT") ? getenv("AGSX_ROOT") : def_root,
      .state = getenv("AGSX_STATE") ? getenv("AGSX_STATE") : def_state,
  };
  int i = parse_globals(&ctx, argc, argv);
  if (i < 0)
    return AGSX_EXIT_FAILURE;
  if (i >= argc) {
    agsx_print_main_help(stderr);
    return AGSX_EXIT_FAILURE;
  }
  int words;
  const struct agsx_command *c = lookup(argc - i, argv + i, &words);
  if (c == NULL && (strcmp(argv[i], "image") == 0 || strcmp(argv[i], "network") == 0 ||
                    strcmp(argv[i], "pool") == 0 || strcmp(argv[i], "volume") == 0)) {
    const char *group = argv[i];
    bool help =
        i + 1 >= argc || strcmp(argv[i + 1], "--help") == 0 || strcmp(argv[i + 1], "-h") == 0;
    group_help(group, help ? stdout : stderr);
    if (help && i + 1 < argc)
      return 0;
    return i + 1 < argc ? agsx_failf("unknown command `%s %s` (see agsx %s --help)", group,
                                     argv[i + 1], group)
                        : AGSX_EXIT_FAILURE;
  }
  if (c == NULL)
    return agsx_failf("unknown command `%s` (see agsx --help)", argv[i]);
  if (user && !(i + words < argc &&
                (strcmp(argv[i + words], "--help") == 0 || strcmp(argv[i + words], "-h") == 0))) {
    agsx_error_t err = NULL;
    if (ustate == NULL && ctx.state == def_state)
      return agsx_fail(&perr);
    agsx_error_free(&perr);
    /* agsx runs again inside the user's namespace (host/rootless.h),
     * where the user's ids are not the host's: the paths go along. */
    setenv("AGSX_ROOT", ctx.root, 0);
    setenv("AGSX_STATE", ctx.state, 0);
    if (agsx_rootless_enter(ctx.state, &err) < 0)
      return agsx_fail(&err);
  }
  agsx_error_free(&perr);
  /* Sandboxes past their deadline are reaped by any agsx invocation (at
   * most once a second; never creates the state directory). */
  agsx_state_reap_all(ctx.state, false, NULL);
  /* The command sees argv[0] = its (last) name word. */
  int first = i + words - 1;
  return c->run(&ctx, c, argc - first, argv + first);
}
