# fish completion for agsx.
#
# The options are those of `agsx [COMMAND] --help`: global ones under
# `__agsx_cmd` (no command yet), each command's under `__agsx_cmd COMMAND`.
# test/bats/docs.bats checks that they agree with --help, the man pages and
# the bash and zsh completions. Commands that are not implemented yet have
# no options but --help.

# Prints the command typed so far: "" (none yet), "gc", "image", "image ls",
# "network create"...
# Global options and their values are skipped.
function __agsx_command
    set -l tokens (commandline -opc)
    set -e tokens[1]
    set -l cmd
    set -l skip 0
    for t in $tokens
        if test $skip -eq 1
            set skip 0
            continue
        end
        if test (count $cmd) -eq 0
            switch $t
                case --root --state --log-level
                    set skip 1
                    continue
                case '-*'
                    continue
            end
            set cmd $t
        else if test "$cmd" = image; or test "$cmd" = network; or test "$cmd" = pool; or test "$cmd" = volume
            string match -q -- '-*' $t; and continue
            set cmd $cmd $t
            break
        else if test "$cmd" = snapshot; and contains -- $t ls rm
            set cmd $cmd $t
            break
        else
            break
        end
    end
    echo $cmd
end

# True when the command typed so far is exactly ARGV ("" when none).
function __agsx_cmd
    test (__agsx_command) = "$argv"
end

# Warm pools (`agsx pool ls -q`), from the state directory, read only when
# it exists.
function __agsx_pool_names
    set -l tokens (commandline -opc)
    set -l state $AGSX_STATE
    test -n "$state"; or set state /run/agsx
    set -l i (contains -i -- --state $tokens)
    and set -q tokens[(math $i + 1)]
    and set state $tokens[(math $i + 1)]
    test -d "$state"; or return 0
    command agsx --state "$state" pool ls -q 2>/dev/null
end

# Image names from the store, read only when it exists (completing must not
# create it).
function __agsx_image_names
    set -l tokens (commandline -opc)
    set -l root $AGSX_ROOT
    test -n "$root"; or set root /var/lib/agsx
    set -l i (contains -i -- --root $tokens)
    and set -q tokens[(math $i + 1)]
    and set root $tokens[(math $i + 1)]
    test -d "$root"; or return 0
    command agsx --root "$root" image ls --json 2>/dev/null | string match -ar '"ref":"[^"]*"' | string replace -r '^"ref":"(.*)"$' '$1'
end

# Names of the vpc networks (`agsx network ls -q` but `public`), whose
# definitions are in the store, read only when it exists.
function __agsx_vpc_names
    set -l tokens (commandline -opc)
    set -l root $AGSX_ROOT
    test -n "$root"; or set root /var/lib/agsx
    set -l i (contains -i -- --root $tokens)
    and set -q tokens[(math $i + 1)]
    and set root $tokens[(math $i + 1)]
    for t in $tokens
        string match -q -- '--root=*' $t; and set root (string replace -- --root= '' $t)
    end
    test -d "$root"; or return 0
    command agsx --root "$root" network ls -q 2>/dev/null | string match -v -- public
end

# Names of the named volumes (`agsx volume ls -q`), when the store exists.
function __agsx_volume_names
    set -l tokens (commandline -opc)
    set -l root $AGSX_ROOT
    test -n "$root"; or set root /var/lib/agsx
    set -l i (contains -i -- --root $tokens)
    and set -q tokens[(math $i + 1)]
    and set root $tokens[(math $i + 1)]
    for t in $tokens
        string match -q -- '--root=*' $t; and set root (string replace -- --root= '' $t)
    end
    test -d "$root"; or return 0
    command agsx --root "$root" volume ls -q 2>/dev/null
end

# MODE of `agsx run --network`: internal, public or vpc:NAME.
function __agsx_network_modes
    printf '%s\t%s\n' internal 'Loopback only (the default)' public 'The internet through the host, nothing else'
    for n in (__agsx_vpc_names)
        printf 'vpc:%s\t%s\n' $n 'vpc network'
    end
end

# Running sandboxes, by name and id, from the state directory, read only when
# it exists (completing must not create it).
function __agsx_sandbox_names
    set -l tokens (commandline -opc)
    set -l state $AGSX_STATE
    test -n "$state"; or set state /run/agsx
    set -l i (contains -i -- --state $tokens)
    and set -q tokens[(math $i + 1)]
    and set state $tokens[(math $i + 1)]
    for t in $tokens
        string match -q -- '--state=*' $t; and set state (string replace -- --state= '' $t)
    end
    test -d "$state"; or return 0
    # $argv: -a for ended sandboxes too
    command agsx --state "$state" --json ls $argv 2>/dev/null | string match -ar '"(?:name|id)":"[^"]*"' | string replace -r '^"(?:name|id)":"(.*)"$' '$1'
end

# `agsx exec`: the index of SANDBOX in the command line so far (agsx is 1),
# or false while it is not given yet.
function __agsx_exec_sandbox_index
    set -l tokens (commandline -opc)
    set -l i 2
    set -l n (count $tokens)
    while test $i -le $n
        switch $tokens[$i]
            case --root --state --log-level
                set i (math $i + 2)
                continue
            case '-*'
                set i (math $i + 1)
                continue
        end
        break
    end
    test $i -le $n; and test "$tokens[$i]" = exec; or return 1
    set i (math $i + 1)
    while test $i -le $n
        switch $tokens[$i]
            case -e --env -w --workdir -u --user --timeout
                set i (math $i + 2)
                continue
            case '-*'
                set i (math $i + 1)
                continue
        end
        echo $i
        return 0
    end
    return 1
end

function __agsx_exec_has_sandbox
    __agsx_exec_sandbox_index >/dev/null
end

# The command after SANDBOX and its arguments, completed as a command line.
function __agsx_exec_command
    set -l i (__agsx_exec_sandbox_index); or return
    set -l tokens (commandline -opc) (commandline -ct)
    __fish_complete_subcommand --commandline $tokens[(math $i + 1)..-1]
end

# `agsx run`: the index of IMAGE in the command line so far (agsx is 1), or
# false while it is not given yet. Skips global options, run's options and
# their values.
function __agsx_run_image_index
    set -l tokens (commandline -opc)
    set -l i 2
    set -l n (count $tokens)
    # Global options, then `run`.
    while test $i -le $n
        switch $tokens[$i]
            case --root --state --log-level
                set i (math $i + 2)
                continue
            case '-*'
                set i (math $i + 1)
                continue
        end
        break
    end
    test $i -le $n; and test "$tokens[$i]" = run; or return 1
    set i (math $i + 1)
    while test $i -le $n
        switch $tokens[$i]
            case --pool --name -l --label -e --env -w --workdir -u --user --hostname --timeout --network --allow --deny --rules --egress-allow --egress-deny --egress-rules -p --publish --memory --cpus --pids --disk -v --volume --security-opt --pull
                set i (math $i + 2)
                continue
            case '-*'
                set i (math $i + 1)
                continue
        end
        echo $i
        return 0
    end
    return 1
end

function __agsx_run_has_image
    __agsx_run_image_index >/dev/null
end

# The command after IMAGE and its arguments, completed as a command line.
function __agsx_run_command
    set -l i (__agsx_run_image_index); or return
    set -l tokens (commandline -opc) (commandline -ct)
    __fish_complete_subcommand --commandline $tokens[(math $i + 1)..-1]
end

# IMAGE: the built-in host image and the store's images.
function __agsx_run_images
    printf '%s\t%s\n' host "The host's programs and libraries, read-only"
    __agsx_image_names
end

# --security-opt seccomp=FILE|unconfined, no-new-privileges=true|false
function __agsx_security_opt
    set -l cur (commandline -ct)
    if string match -q -- 'seccomp=*' $cur
        echo seccomp=unconfined
        for f in (__fish_complete_path (string replace -- seccomp= '' $cur))
            echo seccomp=$f
        end
    else
        echo seccomp=
        echo no-new-privileges=false
        echo no-new-privileges=true
    end
end

complete -c agsx -f

# Global options and commands.
complete -c agsx -n '__agsx_cmd' -l root -r -a '(__fish_complete_directories)' -d 'Image store'
complete -c agsx -n '__agsx_cmd' -l state -r -a '(__fish_complete_directories)' -d 'Sandbox state'
complete -c agsx -n '__agsx_cmd' -l log-level -x -a 'error warning info debug' -d 'Log level'
complete -c agsx -n '__agsx_cmd' -l json -d 'Print results as JSON'
complete -c agsx -n '__agsx_cmd' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd' -l version -d 'Print the version'

complete -c agsx -n '__agsx_cmd' -a run -d 'Run a command in a new sandbox'
complete -c agsx -n '__agsx_cmd' -a exec -d 'Run a command in a running sandbox'
complete -c agsx -n '__agsx_cmd' -a cp -d 'Copy files between a sandbox and the host'
complete -c agsx -n '__agsx_cmd' -a ls -d 'List sandboxes'
complete -c agsx -n '__agsx_cmd' -a kill -d 'Stop sandboxes or send them a signal'
complete -c agsx -n '__agsx_cmd' -a inspect -d "Show sandboxes' full records as JSON"
complete -c agsx -n '__agsx_cmd' -a wait -d 'Wait for sandboxes to end; print their exit codes'
complete -c agsx -n '__agsx_cmd' -a logs -d "Show a detached sandbox's output"
complete -c agsx -n '__agsx_cmd' -a rm -d "Remove ended sandboxes' records"
complete -c agsx -n '__agsx_cmd' -a stats -d 'Show CPU, memory, pids, disk and network use'
complete -c agsx -n '__agsx_cmd' -a update -d "Change a running sandbox's deadline or egress rules"
complete -c agsx -n '__agsx_cmd' -a netlog -d "Show what a sandbox's egress rules blocked"
complete -c agsx -n '__agsx_cmd' -a port -d "List a sandbox's published ports"
complete -c agsx -n '__agsx_cmd' -a pause -d 'Freeze every process of running sandboxes'
complete -c agsx -n '__agsx_cmd' -a unpause -d 'Resume paused sandboxes'
complete -c agsx -n '__agsx_cmd' -a commit -d "Make an image of a sandbox's filesystem"
complete -c agsx -n '__agsx_cmd' -a snapshot -d "Record a running sandbox's filesystem"
complete -c agsx -n '__agsx_cmd' -a rollback -d 'Restart a sandbox on one of its snapshots'
complete -c agsx -n '__agsx_cmd' -a fork -d "Start new sandboxes from a running sandbox's filesystem"
complete -c agsx -n '__agsx_cmd' -a gc -d 'Remove what ended sandboxes and crashes left behind'
complete -c agsx -n '__agsx_cmd' -a info -d 'Show the kernel features and cgroups agsx finds, and the path it takes'
complete -c agsx -n '__agsx_cmd' -a browser -d 'Start Chromium in a sandbox; print its DevTools WebSocket URL (and a live view\'s)'
complete -c agsx -n '__agsx_cmd' -a serve -d 'Serve the E2B-compatible HTTP API (SDKs run unmodified)'
complete -c agsx -n '__agsx_cmd' -a mcp -d "Serve sandboxes as MCP tools over stdio (for agents' MCP clients)"
complete -c agsx -n '__agsx_cmd' -a code -d "Run code in a sandbox's stateful code context (Python, bash)"
complete -c agsx -n '__agsx_cmd' -a build -d 'Build an image from a Dockerfile'
complete -c agsx -n '__agsx_cmd' -a image -d 'Manage images'
complete -c agsx -n '__agsx_cmd' -a load -d 'Load images (alias of image load)'
complete -c agsx -n '__agsx_cmd' -a pull -d 'Pull an image (alias of image pull)'
complete -c agsx -n '__agsx_cmd' -a push -d 'Push an image (alias of image push)'
complete -c agsx -n '__agsx_cmd' -a network -d 'Manage networks'
complete -c agsx -n '__agsx_cmd' -a pool -d 'Manage warm pools of parked sandboxes'
complete -c agsx -n '__agsx_cmd' -a volume -d 'Manage named volumes'

# agsx image
complete -c agsx -n '__agsx_cmd image' -a ls -d 'List images'
complete -c agsx -n '__agsx_cmd image' -a load -d 'Load images from an OCI layout, an oci-archive or a docker-archive'
complete -c agsx -n '__agsx_cmd image' -a rm -d 'Remove images'
complete -c agsx -n '__agsx_cmd image' -a inspect -d "Show images' manifest and config as JSON"
complete -c agsx -n '__agsx_cmd image' -a pull -d 'Pull an image from a registry'
complete -c agsx -n '__agsx_cmd image' -a tag -d 'Give an image another name'
complete -c agsx -n '__agsx_cmd image' -a save -d 'Write images to an oci-archive or a docker-archive'
complete -c agsx -n '__agsx_cmd image' -a push -d 'Push an image to a registry'
complete -c agsx -n '__agsx_cmd image' -s h -l help -d 'Show this help'

# agsx network
complete -c agsx -n '__agsx_cmd network' -a create -d 'Create a vpc network'
complete -c agsx -n '__agsx_cmd network' -a update -d "Replace a vpc network's rules, live"
complete -c agsx -n '__agsx_cmd network' -a ls -d 'List networks'
complete -c agsx -n '__agsx_cmd network' -a rm -d 'Remove vpc networks no sandbox uses'
complete -c agsx -n '__agsx_cmd network' -a inspect -d 'Show networks as JSON'
complete -c agsx -n '__agsx_cmd network' -s h -l help -d 'Show this help'

# agsx volume
complete -c agsx -n '__agsx_cmd volume' -a create -d 'Create named volumes'
complete -c agsx -n '__agsx_cmd volume' -a ls -d 'List named volumes'
complete -c agsx -n '__agsx_cmd volume' -a rm -d 'Remove named volumes and their data'
complete -c agsx -n '__agsx_cmd volume' -s h -l help -d 'Show this help'

# agsx pool
complete -c agsx -n '__agsx_cmd pool' -a create -d 'Create a warm pool of parked sandboxes'
complete -c agsx -n '__agsx_cmd pool' -a ls -d 'List warm pools'
complete -c agsx -n '__agsx_cmd pool' -a rm -d 'Remove warm pools and their parked sandboxes'
complete -c agsx -n '__agsx_cmd pool' -s h -l help -d 'Show this help'

# agsx pool create: NAME is the user's to choose.
complete -c agsx -n '__agsx_cmd pool create' -l image -x -a '(__agsx_image_names)' -d "The pool's image (required)"
complete -c agsx -n '__agsx_cmd pool create' -l size -x -d 'How many sandboxes to keep parked (required, 1 to 1024)'
complete -c agsx -n '__agsx_cmd pool create' -l timeout -x -d "A parked sandbox's lifetime, then replaced (default 1h)"
complete -c agsx -n '__agsx_cmd pool create' -l network -x -a '(__agsx_network_modes)' -d 'internal (default: loopback only), public or vpc:NAME'
complete -c agsx -n '__agsx_cmd pool create' -l memory -x -d 'Memory limit of each sandbox (e.g. 512m)'
complete -c agsx -n '__agsx_cmd pool create' -l cpus -x -d 'CPU quota in CPUs (e.g. 0.5)'
complete -c agsx -n '__agsx_cmd pool create' -l pids -x -d 'Maximum number of processes (default 4096)'
complete -c agsx -n '__agsx_cmd pool create' -l disk -x -d 'Size of the writable layer (default 1g)'
complete -c agsx -n '__agsx_cmd pool create' -l read-only -d 'Make the root filesystem read-only'
complete -c agsx -n '__agsx_cmd pool create' -s v -l volume -r -F -d 'Bind-mount a host path into each sandbox (SRC:DST[:ro])'
complete -c agsx -n '__agsx_cmd pool create' -l security-opt -x -a '(__agsx_security_opt)' -d 'seccomp=FILE|unconfined, no-new-privileges=false'
complete -c agsx -n '__agsx_cmd pool create' -s e -l env -x -d "Default environment variable (a claim's -e come after)"
complete -c agsx -n '__agsx_cmd pool create' -s w -l workdir -x -d "Default working directory (a claim's -w wins)"
complete -c agsx -n '__agsx_cmd pool create' -s u -l user -x -d "Default user (a claim's -u wins)"
complete -c agsx -n '__agsx_cmd pool create' -l pull -x -a 'missing always never' -d 'Pull the image: missing (default), always or never'
complete -c agsx -n '__agsx_cmd pool create' -l json -d 'Print the pool as JSON'
complete -c agsx -n '__agsx_cmd pool create' -s h -l help -d 'Show this help'

complete -c agsx -n '__agsx_cmd pool ls' -s q -l quiet -d 'Print pool names only'
complete -c agsx -n '__agsx_cmd pool ls' -l json -d 'Print a JSON list'
complete -c agsx -n '__agsx_cmd pool ls' -s h -l help -d 'Show this help'

complete -c agsx -n '__agsx_cmd pool rm' -a '(__agsx_pool_names)' -d Pool
complete -c agsx -n '__agsx_cmd pool rm' -s h -l help -d 'Show this help'

# agsx run: options until IMAGE, then IMAGE, then a command line.
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -s d -l detach -d 'Start in the background; print the id once the command runs'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -l name -x -d 'Name the sandbox (unique; usable wherever an id is)'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -s l -l label -x -d 'Set a label KEY=VALUE (repeatable)'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -l rm -d "Remove the sandbox's record when it ends"
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -s i -l interactive -d 'Keep stdin open and pass it to the command'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -s t -l tty -d 'Give the command a terminal'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -l json -d 'Capture output; print one JSON result'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -s e -l env -x -d "Set an environment variable (KEY alone: the caller's value)"
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -s w -l workdir -x -a '(__fish_complete_directories)' -d 'Working directory inside the sandbox'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -s u -l user -x -d "Run as this user (name or id, from the image's /etc)"
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -l hostname -x -d 'Host name of the sandbox (default: its short id)'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -l timeout -x -d 'Lifetime: 300s, 5m, 1h30m (default 5m, at most 24h)'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -l network -x -a '(__agsx_network_modes)' -d 'internal (default: loopback only), public or vpc:NAME'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -l allow -x -d 'vpc: allow traffic, e.g. "out tcp/443 0.0.0.0/0"'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -l deny -x -d 'vpc: deny traffic, e.g. "in tcp/22"'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -l rules -r -F -d 'vpc: read allow/deny rules from FILE, one per line'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -l egress-allow -x -d 'public, vpc: allow egress only to these (NAME, *.NAME, CIDR, :PORT)'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -l egress-deny -x -d 'public, vpc: deny egress to NAME, *.NAME or CIDR[:PORT]'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -l egress-rules -r -F -d 'Read egress allow/deny rules from FILE, one per line'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -s p -l publish -x -d 'Publish a sandbox port on the host ([IP:]HOSTPORT:PORT[/tcp|udp], default IP 127.0.0.1)'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -l memory -x -d 'Memory limit (e.g. 512m); beyond it the OOM killer kills a process of the sandbox'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -l cpus -x -d 'CPU quota in CPUs (e.g. 0.5)'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -l pids -x -d 'Maximum number of processes (default 4096)'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -l disk -x -d 'Size of the writable layer (default 1g)'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -l read-only -d 'Make the root filesystem read-only'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -s v -l volume -r -F -d 'Bind-mount a host path into the sandbox (SRC:DST[:ro])'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -l pull -x -a 'missing always never' -d 'Pull the image: missing (default), always or never'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -l security-opt -x -a '(__agsx_security_opt)' -d 'seccomp=FILE|unconfined, no-new-privileges=false'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -l timing -d 'Print the start-up time of each phase on stderr'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -l pool -x -a '(__agsx_pool_names)' -d 'Claim a parked sandbox of pool NAME (IMAGE optional)'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd run' -n 'not __agsx_run_has_image' -a '(__agsx_run_images)' -d Image
complete -c agsx -n '__agsx_cmd run' -n __agsx_run_has_image -a '(__agsx_run_command)'

# agsx exec: options until SANDBOX, then SANDBOX, then a command line.
complete -c agsx -n '__agsx_cmd exec' -n 'not __agsx_exec_has_sandbox' -s i -l interactive -d 'Keep stdin open and pass it to the command'
complete -c agsx -n '__agsx_cmd exec' -n 'not __agsx_exec_has_sandbox' -s t -l tty -d 'Give the command a terminal'
complete -c agsx -n '__agsx_cmd exec' -n 'not __agsx_exec_has_sandbox' -l json -d 'Capture output; print one JSON result'
complete -c agsx -n '__agsx_cmd exec' -n 'not __agsx_exec_has_sandbox' -s e -l env -x -d "Set an environment variable (KEY alone: the caller's value)"
complete -c agsx -n '__agsx_cmd exec' -n 'not __agsx_exec_has_sandbox' -s w -l workdir -x -d "Working directory (default: the sandbox's)"
complete -c agsx -n '__agsx_cmd exec' -n 'not __agsx_exec_has_sandbox' -s u -l user -x -d "Run as this user (default: the sandbox's)"
complete -c agsx -n '__agsx_cmd exec' -n 'not __agsx_exec_has_sandbox' -l timeout -x -d "Kill the command's whole process tree after DURATION"
complete -c agsx -n '__agsx_cmd exec' -n 'not __agsx_exec_has_sandbox' -s d -l detach -d 'Run it in the background, owned by the sandbox; print its pid'
complete -c agsx -n '__agsx_cmd exec' -n 'not __agsx_exec_has_sandbox' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd exec' -n 'not __agsx_exec_has_sandbox' -a '(__agsx_sandbox_names)' -d Sandbox
complete -c agsx -n '__agsx_cmd exec' -n __agsx_exec_has_sandbox -a '(__agsx_exec_command)'

# agsx ls
complete -c agsx -n '__agsx_cmd ls' -s a -l all -d 'Also list ended sandboxes, with stop reason and exit code'
complete -c agsx -n '__agsx_cmd ls' -s q -l quiet -d 'Print short ids only'
complete -c agsx -n '__agsx_cmd ls' -l no-trunc -d 'Print full 32-digit ids'
complete -c agsx -n '__agsx_cmd ls' -s f -l filter -x -d 'Only sandboxes with a label: label=KEY[=VALUE]'
complete -c agsx -n '__agsx_cmd ls' -l json -d 'Print a JSON list'
complete -c agsx -n '__agsx_cmd ls' -s h -l help -d 'Show this help'

# agsx inspect, wait, rm, stats
complete -c agsx -n '__agsx_cmd inspect' -l json -d 'Print JSON (the only format)'
complete -c agsx -n '__agsx_cmd inspect' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd inspect' -a '(__agsx_sandbox_names -a)' -d Sandbox
complete -c agsx -n '__agsx_cmd wait' -l json -d 'Print a JSON list of id, name, exit_code, stop_reason'
complete -c agsx -n '__agsx_cmd wait' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd wait' -a '(__agsx_sandbox_names -a)' -d Sandbox
complete -c agsx -n '__agsx_cmd logs' -s f -l follow -d 'Follow the log until the sandbox ends'
complete -c agsx -n '__agsx_cmd logs' -s n -l tail -r -d 'Only the last N lines'
complete -c agsx -n '__agsx_cmd logs' -s t -l timestamps -d 'Prefix each line with its time'
complete -c agsx -n '__agsx_cmd logs' -l exec -x -d 'The output of the process agsx exec -d started as PID'
complete -c agsx -n '__agsx_cmd logs' -l network -d 'What its egress rules blocked instead'
complete -c agsx -n '__agsx_cmd logs' -l json -d 'With --network: print the log as JSON'
complete -c agsx -n '__agsx_cmd logs' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd logs' -a '(__agsx_sandbox_names -a)' -d Sandbox
complete -c agsx -n '__agsx_cmd rm' -s f -l force -d 'Stop running sandboxes first, then remove them'
complete -c agsx -n '__agsx_cmd rm' -l json -d 'Print the removed ids as a JSON list'
complete -c agsx -n '__agsx_cmd rm' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd rm' -a '(__agsx_sandbox_names -a)' -d Sandbox
complete -c agsx -n '__agsx_cmd stats' -l no-stream -d 'Print one sample (over 1 s) and exit'
complete -c agsx -n '__agsx_cmd stats' -l json -d 'Print a JSON list per sample'
complete -c agsx -n '__agsx_cmd stats' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd stats' -a '(__agsx_sandbox_names)' -d Sandbox

# agsx kill
complete -c agsx -n '__agsx_cmd kill' -s s -l signal -x -a 'HUP INT QUIT KILL USR1 USR2 TERM CONT STOP ALRM WINCH' -d 'Only send SIGNAL (name or number) to the command'
complete -c agsx -n '__agsx_cmd kill' -s a -l all -d 'Every running sandbox'
complete -c agsx -n '__agsx_cmd kill' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd kill' -a '(__agsx_sandbox_names)' -d Sandbox

# agsx update
complete -c agsx -n '__agsx_cmd update' -l timeout -x -d 'New lifetime, counted from now (at most 24h)'
complete -c agsx -n '__agsx_cmd update' -l json -d 'Print the new deadline as JSON'
complete -c agsx -n '__agsx_cmd update' -l egress-allow -x -d 'New egress rules: allow NAME, *.NAME or CIDR[:PORT] (replaces all)'
complete -c agsx -n '__agsx_cmd update' -l egress-deny -x -d 'New egress rules: deny NAME, *.NAME or CIDR[:PORT]'
complete -c agsx -n '__agsx_cmd update' -l egress-rules -r -F -d 'New egress rules from FILE, one per line'
complete -c agsx -n '__agsx_cmd update' -l egress-clear -d 'Remove every egress rule'
complete -c agsx -n '__agsx_cmd update' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd update' -a '(__agsx_sandbox_names)' -d Sandbox

# agsx netlog
complete -c agsx -n '__agsx_cmd netlog' -l json -d 'Print the log as JSON'
complete -c agsx -n '__agsx_cmd netlog' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd netlog' -a '(__agsx_sandbox_names -a)' -d Sandbox

# agsx pause, unpause
complete -c agsx -n '__agsx_cmd pause' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd pause' -a '(__agsx_sandbox_names)' -d Sandbox
complete -c agsx -n '__agsx_cmd unpause' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd unpause' -a '(__agsx_sandbox_names)' -d Sandbox

# agsx commit
complete -c agsx -n '__agsx_cmd commit' -l snapshot -x -d 'Commit this snapshot of the sandbox instead of its current state'
complete -c agsx -n '__agsx_cmd commit' -s q -l quiet -d 'Print only the image id'
complete -c agsx -n '__agsx_cmd commit' -l json -d 'Print id, sandbox, image, frozen_ms, duration_ms as JSON'
complete -c agsx -n '__agsx_cmd commit' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd commit' -a '(__agsx_sandbox_names)' -d Sandbox

# agsx fork
complete -c agsx -n '__agsx_cmd fork' -l name -x -d 'Name the fork (with -n: NAME-1, NAME-2, ...)'
complete -c agsx -n '__agsx_cmd fork' -s n -l count -x -d 'Start COUNT forks (1-64)'
complete -c agsx -n '__agsx_cmd fork' -l timeout -x -d 'Lifetime of each fork'
complete -c agsx -n '__agsx_cmd fork' -l json -d 'Print a JSON list of the forks'
complete -c agsx -n '__agsx_cmd fork' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd fork' -a '(__agsx_sandbox_names)' -d Sandbox

# agsx snapshot, snapshot ls, snapshot rm, rollback
complete -c agsx -n '__agsx_cmd snapshot' -a ls -d 'List the snapshots of running sandboxes'
complete -c agsx -n '__agsx_cmd snapshot' -a rm -d 'Remove snapshots'
complete -c agsx -n '__agsx_cmd snapshot' -l json -d 'Print the snapshot as JSON'
complete -c agsx -n '__agsx_cmd snapshot' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd snapshot' -a '(__agsx_sandbox_names)' -d Sandbox
complete -c agsx -n '__agsx_cmd snapshot ls' -s q -l quiet -d 'Print snapshot names only'
complete -c agsx -n '__agsx_cmd snapshot ls' -l json -d 'Print a JSON list'
complete -c agsx -n '__agsx_cmd snapshot ls' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd snapshot ls' -a '(__agsx_sandbox_names)' -d Sandbox
complete -c agsx -n '__agsx_cmd snapshot rm' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd snapshot rm' -a '(__agsx_sandbox_names)' -d Sandbox
complete -c agsx -n '__agsx_cmd rollback' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd rollback' -a '(__agsx_sandbox_names)' -d Sandbox

# agsx port
complete -c agsx -n '__agsx_cmd port' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd port' -a '(__agsx_sandbox_names)' -d Sandbox

# agsx mcp
complete -c agsx -n '__agsx_cmd mcp' -l network -x -a 'internal public' -d 'A network sandbox_create may ask for besides internal'
complete -c agsx -n '__agsx_cmd mcp' -l max-sandboxes -x -d 'Running sandboxes per session at most (default 8)'
complete -c agsx -n '__agsx_cmd mcp' -l allow-host-path -x -a '(__fish_complete_directories)' -d 'A host directory file_copy_in/file_copy_out may use'
complete -c agsx -n '__agsx_cmd mcp' -l listen -x -d 'Serve MCP over Streamable HTTP on this loopback ADDR:PORT'
complete -c agsx -n '__agsx_cmd mcp' -s h -l help -d 'Show this help'

# agsx serve
complete -c agsx -n '__agsx_cmd serve' -l listen -x -d 'Listen here (default 127.0.0.1:3000)'
complete -c agsx -n '__agsx_cmd serve' -l listen-public -d 'Allow a non-loopback --listen (risky)'
complete -c agsx -n '__agsx_cmd serve' -l ports-listen -x -d 'Also forward sandboxes\' own ports by host name PORT-ID.DOMAIN from ADDR:PORT'
complete -c agsx -n '__agsx_cmd serve' -l ports-tls -d 'Speak TLS on --ports-listen, certificates signed by a CA agsx makes'
complete -c agsx -n '__agsx_cmd serve' -l ports-cert -r -F -d 'Speak TLS on --ports-listen with this certificate chain'
complete -c agsx -n '__agsx_cmd serve' -l ports-key -r -F -d 'The key of --ports-cert'
complete -c agsx -n '__agsx_cmd serve' -l host -x -a '(__fish_print_hostnames)' -d 'Also answer requests for host NAME and one label below it'
complete -c agsx -n '__agsx_cmd serve' -l api-key -x -d 'The API key (default $AGSX_API_KEY, else the key file)'
complete -c agsx -n '__agsx_cmd serve' -l api-key-file -r -F -d 'Read (or generate) the key here'
complete -c agsx -n '__agsx_cmd serve' -l network -x -a 'internal public' -d 'Network of sandboxes allowed internet access'
complete -c agsx -n '__agsx_cmd serve' -l template -x -d 'Map a templateID to an image: NAME=IMAGE[,no-new-privileges=false]'
complete -c agsx -n '__agsx_cmd serve' -l pool -x -d 'Sandbox.create() of TEMPLATE claims from warm pool POOL: TEMPLATE=POOL'
complete -c agsx -n '__agsx_cmd serve' -l default-user -x -d "envd's default user"
complete -c agsx -n '__agsx_cmd serve' -s h -l help -d 'Show this help'

# agsx code
complete -c agsx -n '__agsx_cmd code' -s c -l context -x -d 'Run in context ID (an id or a unique prefix)'
complete -c agsx -n '__agsx_cmd code' -s l -l language -x -a 'python bash javascript typescript r' -d "Use LANG's default context"
complete -c agsx -n '__agsx_cmd code' -l json -d 'Print the whole execution as one JSON document'
complete -c agsx -n '__agsx_cmd code' -l save -x -a '(__fish_complete_directories)' -d 'Write image results as files into DIR'
complete -c agsx -n '__agsx_cmd code' -l timeout -x -d 'Interrupt the cell after DURATION'
complete -c agsx -n '__agsx_cmd code' -s e -l env -x -d 'Set an environment variable for this execution only'
complete -c agsx -n '__agsx_cmd code' -l output-limit -x -d 'Keep at most SIZE of stdout+stderr'
complete -c agsx -n '__agsx_cmd code' -l list -d "List the sandbox's contexts"
complete -c agsx -n '__agsx_cmd code' -l create -d 'Create a context; print its id'
complete -c agsx -n '__agsx_cmd code' -s w -l workdir -x -d 'Working directory of a context made with --create'
complete -c agsx -n '__agsx_cmd code' -l restart -d "Restart the --context's kernel: fresh state"
complete -c agsx -n '__agsx_cmd code' -l rm -d 'Remove the --context'
complete -c agsx -n '__agsx_cmd code' -s q -l quiet -d 'With --list: print ids only'
complete -c agsx -n '__agsx_cmd code' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd code' -a '(__agsx_sandbox_names)' -d Sandbox

# agsx browser
complete -c agsx -n '__agsx_cmd browser' -l name -x -d 'Name the sandbox (unique; usable wherever an id is)'
complete -c agsx -n '__agsx_cmd browser' -l network -x -a 'internal public' -d 'Network mode, as for run (default internal)'
complete -c agsx -n '__agsx_cmd browser' -s p -l publish -x -d 'Host address of the DevTools endpoint ([IP:]HOSTPORT)'
complete -c agsx -n '__agsx_cmd browser' -l timeout -x -d 'Lifetime: 300s, 5m, 1h30m (default 5m, at most 24h)'
complete -c agsx -n '__agsx_cmd browser' -l memory -x -d 'Memory limit of the whole browser (default 2g)'
complete -c agsx -n '__agsx_cmd browser' -l image -x -a 'host (__agsx_image_names)' -d 'Image with Chromium (default: host)'
complete -c agsx -n '__agsx_cmd browser' -s u -l user -x -d 'Run Chromium as this user (default 1000:1000)'
complete -c agsx -n '__agsx_cmd browser' -l view -d 'Run Chromium headed, with a live view a person opens in a browser (noVNC)'
complete -c agsx -n '__agsx_cmd browser' -l takeover -d 'With --view: also a takeover URL, whose view takes mouse and keyboard'
complete -c agsx -n '__agsx_cmd browser' -l json -d 'Print id, ws_url, http_url... as JSON'
complete -c agsx -n '__agsx_cmd browser' -s h -l help -d 'Show this help'

# agsx info
complete -c agsx -n '__agsx_cmd info' -l json -d 'Print the same as one JSON object'
complete -c agsx -n '__agsx_cmd info' -s h -l help -d 'Show this help'

# agsx gc
complete -c agsx -n '__agsx_cmd gc' -l images -d 'Also remove blobs and unpacked layers no image uses'
complete -c agsx -n '__agsx_cmd gc' -s n -l dry-run -d 'List what would be removed, remove nothing'
complete -c agsx -n '__agsx_cmd gc' -l json -d 'Print what was removed as JSON'
complete -c agsx -n '__agsx_cmd gc' -s h -l help -d 'Show this help'

# agsx image ls
complete -c agsx -n '__agsx_cmd image ls' -s q -l quiet -d 'Print image ids only'
complete -c agsx -n '__agsx_cmd image ls' -l digests -d 'Show full manifest digests'
complete -c agsx -n '__agsx_cmd image ls' -l json -d 'Print a JSON list'
complete -c agsx -n '__agsx_cmd image ls' -s h -l help -d 'Show this help'

# agsx image load (and its alias agsx load): PATH is a file or directory.
complete -c agsx -n '__agsx_cmd image load' -s t -l tag -x -d 'Name the loaded image (the source must hold one image)'
complete -c agsx -n '__agsx_cmd image load' -s q -l quiet -d 'Print nothing on success'
complete -c agsx -n '__agsx_cmd image load' -l json -d 'Print the loaded images as JSON'
complete -c agsx -n '__agsx_cmd image load' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd image load' -F
complete -c agsx -n '__agsx_cmd load' -s t -l tag -x -d 'Name the loaded image (the source must hold one image)'
complete -c agsx -n '__agsx_cmd load' -s q -l quiet -d 'Print nothing on success'
complete -c agsx -n '__agsx_cmd load' -l json -d 'Print the loaded images as JSON'
complete -c agsx -n '__agsx_cmd load' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd load' -F

# agsx image rm
complete -c agsx -n '__agsx_cmd image rm' -l json -d 'Print the removed references as JSON'
complete -c agsx -n '__agsx_cmd image rm' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd image rm' -a '(__agsx_image_names)' -d Image

# agsx image inspect
complete -c agsx -n '__agsx_cmd image inspect' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd image inspect' -a '(__agsx_image_names)' -d Image

# agsx image tag SOURCE TARGET
complete -c agsx -n '__agsx_cmd image tag' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd image tag' -a '(__agsx_image_names)' -d Image

# agsx image save
complete -c agsx -n '__agsx_cmd image save' -s o -l output -r -F -d 'Write to FILE (atomically) instead of standard output'
complete -c agsx -n '__agsx_cmd image save' -l format -x -a 'oci-archive docker-archive' -d 'Archive format'
complete -c agsx -n '__agsx_cmd image save' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd image save' -a '(__agsx_image_names)' -d Image

# agsx network create: NAME is the user's to choose.
complete -c agsx -n '__agsx_cmd network create' -l subnet -x -d "The network's IPv4 subnet (required), e.g. 10.20.0.0/24"
complete -c agsx -n '__agsx_cmd network create' -l allow -x -d 'Allow traffic, e.g. "out tcp/443 0.0.0.0/0"'
complete -c agsx -n '__agsx_cmd network create' -l deny -x -d 'Deny traffic, e.g. "in tcp/22"'
complete -c agsx -n '__agsx_cmd network create' -l rules -r -F -d 'Read allow/deny rules from FILE, one per line'
complete -c agsx -n '__agsx_cmd network create' -l json -d 'Print the new network as JSON'
complete -c agsx -n '__agsx_cmd network create' -s h -l help -d 'Show this help'

# agsx network update
complete -c agsx -n '__agsx_cmd network update' -l allow -x -d 'Allow traffic (replaces every rule)'
complete -c agsx -n '__agsx_cmd network update' -l deny -x -d 'Deny traffic, e.g. "in tcp/22"'
complete -c agsx -n '__agsx_cmd network update' -l rules -r -F -d 'Read allow/deny rules from FILE, one per line'
complete -c agsx -n '__agsx_cmd network update' -l json -d 'Print the network as JSON'
complete -c agsx -n '__agsx_cmd network update' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd network update' -a '(__agsx_vpc_names)' -d Network

# agsx network ls
complete -c agsx -n '__agsx_cmd network ls' -s q -l quiet -d 'Print names only'
complete -c agsx -n '__agsx_cmd network ls' -l json -d 'Print a JSON list'
complete -c agsx -n '__agsx_cmd network ls' -s h -l help -d 'Show this help'

# agsx network rm: vpcs only (public cannot be removed)
complete -c agsx -n '__agsx_cmd network rm' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd network rm' -a '(__agsx_vpc_names)' -d Network

# agsx network inspect
complete -c agsx -n '__agsx_cmd network inspect' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd network inspect' -a 'public (__agsx_vpc_names)' -d Network

# agsx volume create: NAME is the user's to choose.
complete -c agsx -n '__agsx_cmd volume create' -s h -l help -d 'Show this help'

# agsx volume ls
complete -c agsx -n '__agsx_cmd volume ls' -s q -l quiet -d 'Print names only'
complete -c agsx -n '__agsx_cmd volume ls' -l json -d 'Print a JSON list'
complete -c agsx -n '__agsx_cmd volume ls' -s h -l help -d 'Show this help'

# agsx volume rm
complete -c agsx -n '__agsx_cmd volume rm' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd volume rm' -a '(__agsx_volume_names)' -d Volume

# agsx cp
complete -c agsx -n '__agsx_cmd cp' -s a -l archive -d 'Keep uids and gids (mapped into and out of the sandbox'"'"'s range)'
complete -c agsx -n '__agsx_cmd cp' -s L -l follow-link -d 'Follow SRC itself if it is a symlink'
complete -c agsx -n '__agsx_cmd cp' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd cp' -F

# agsx build
complete -c agsx -n '__agsx_cmd build' -s t -l tag -x -d 'Name the image (repeatable)'
complete -c agsx -n '__agsx_cmd build' -s f -l file -r -F -d 'The Dockerfile (default CONTEXT/Dockerfile)'
complete -c agsx -n '__agsx_cmd build' -l build-arg -x -d 'Set a build argument (KEY alone: the caller'"'"'s value)'
complete -c agsx -n '__agsx_cmd build' -l network -x -a 'internal public vpc:' -d 'Network of RUN steps'
complete -c agsx -n '__agsx_cmd build' -l egress-allow -x -d 'RUN steps may reach only these: NAME, *.NAME, CIDR[:PORT]'
complete -c agsx -n '__agsx_cmd build' -l egress-deny -x -d 'RUN steps may not reach NAME, *.NAME or CIDR[:PORT]'
complete -c agsx -n '__agsx_cmd build' -l egress-rules -r -F -d 'Read RUN steps'"'"' egress rules from FILE, one per line'
complete -c agsx -n '__agsx_cmd build' -l no-cache -d 'Do not use the build cache'
complete -c agsx -n '__agsx_cmd build' -l pull -x -a 'missing always never' -d 'Pull FROM images: missing (default), always or never'
complete -c agsx -n '__agsx_cmd build' -l platform -x -a 'linux/amd64' -d 'Target platform: only linux/amd64'
complete -c agsx -n '__agsx_cmd build' -s q -l quiet -d 'Print only the image id'
complete -c agsx -n '__agsx_cmd build' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd build' -a '(__fish_complete_directories)'


# agsx image pull (and its alias agsx pull): REF is typed, not completed.
complete -c agsx -n '__agsx_cmd image pull' -s q -l quiet -d "Print only the pulled image's name; no progress"
complete -c agsx -n '__agsx_cmd image pull' -l json -d 'Print the result as JSON: name, ref, digest, id'
complete -c agsx -n '__agsx_cmd image pull' -l authfile -r -F -d 'Credentials (Docker config.json)'
complete -c agsx -n '__agsx_cmd image pull' -l insecure -d 'Allow plain HTTP and unverified TLS for this registry'
complete -c agsx -n '__agsx_cmd image pull' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd image pull' -f

# agsx image push IMAGE [DEST] (and its alias agsx push): a local image,
# then a typed destination.
complete -c agsx -n '__agsx_cmd image push' -s q -l quiet -d "Print only the pushed image's name"
complete -c agsx -n '__agsx_cmd image push' -l json -d 'Print the result as JSON: ref, digest'
complete -c agsx -n '__agsx_cmd image push' -l authfile -r -F -d 'Credentials (Docker config.json)'
complete -c agsx -n '__agsx_cmd image push' -l insecure -d 'Allow plain HTTP and unverified TLS for this registry'
complete -c agsx -n '__agsx_cmd image push' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd image push' -f -a '(__agsx_image_names)' -d Image
complete -c agsx -n '__agsx_cmd push' -s q -l quiet -d "Print only the pushed image's name"
complete -c agsx -n '__agsx_cmd push' -l json -d 'Print the result as JSON: ref, digest'
complete -c agsx -n '__agsx_cmd push' -l authfile -r -F -d 'Credentials (Docker config.json)'
complete -c agsx -n '__agsx_cmd push' -l insecure -d 'Allow plain HTTP and unverified TLS for this registry'
complete -c agsx -n '__agsx_cmd push' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd push' -f -a '(__agsx_image_names)' -d Image
complete -c agsx -n '__agsx_cmd pull' -s q -l quiet -d "Print only the pulled image's name; no progress"
complete -c agsx -n '__agsx_cmd pull' -l json -d 'Print the result as JSON: name, ref, digest, id'
complete -c agsx -n '__agsx_cmd pull' -l authfile -r -F -d 'Credentials (Docker config.json)'
complete -c agsx -n '__agsx_cmd pull' -l insecure -d 'Allow plain HTTP and unverified TLS for this registry'
complete -c agsx -n '__agsx_cmd pull' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd pull' -f
