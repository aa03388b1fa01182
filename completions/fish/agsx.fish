# fish completion for agsx.
#
# The options are those of `agsx [COMMAND] --help`: global ones under
# `__agsx_cmd` (no command yet), each command's under `__agsx_cmd COMMAND`.
# test/bats/docs.bats checks that they agree with --help, the man pages and
# the bash and zsh completions. Commands that are not implemented yet have
# no options but --help.

# Prints the command typed so far: "" (none yet), "gc", "image", "image ls"...
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
        else if test "$cmd" = image
            string match -q -- '-*' $t; and continue
            set cmd image $t
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

complete -c agsx -f

# Global options and commands.
complete -c agsx -n '__agsx_cmd' -l root -r -a '(__fish_complete_directories)' -d 'Image store'
complete -c agsx -n '__agsx_cmd' -l state -r -a '(__fish_complete_directories)' -d 'Sandbox state'
complete -c agsx -n '__agsx_cmd' -l log-level -x -a 'error warning info debug' -d 'Log level'
complete -c agsx -n '__agsx_cmd' -l json -d 'Print results as JSON'
complete -c agsx -n '__agsx_cmd' -s h -l help -d 'Show this help'
complete -c agsx -n '__agsx_cmd' -l version -d 'Print the version'

complete -c agsx -n '__agsx_cmd' -a run -d 'Run a command in a new sandbox (not implemented yet)'
complete -c agsx -n '__agsx_cmd' -a exec -d 'Run a command in a running sandbox (not implemented yet)'
complete -c agsx -n '__agsx_cmd' -a cp -d 'Copy files between a sandbox and the host (not implemented yet)'
complete -c agsx -n '__agsx_cmd' -a ls -d 'List sandboxes (not implemented yet)'
complete -c agsx -n '__agsx_cmd' -a kill -d 'Stop sandboxes or send them a signal (not implemented yet)'
complete -c agsx -n '__agsx_cmd' -a update -d "Change a running sandbox's deadline (not implemented yet)"
complete -c agsx -n '__agsx_cmd' -a gc -d 'Remove what ended sandboxes and crashes left behind'
complete -c agsx -n '__agsx_cmd' -a build -d 'Build an image from a Dockerfile (not implemented yet)'
complete -c agsx -n '__agsx_cmd' -a image -d 'Manage images'
complete -c agsx -n '__agsx_cmd' -a load -d 'Load images (alias of image load)'
complete -c agsx -n '__agsx_cmd' -a pull -d 'Pull an image (alias of image pull) (not implemented yet)'
complete -c agsx -n '__agsx_cmd' -a network -d 'Manage vpc networks (not implemented yet)'

# agsx image
complete -c agsx -n '__agsx_cmd image' -a ls -d 'List images'
complete -c agsx -n '__agsx_cmd image' -a load -d 'Load images from an OCI layout, an oci-archive or a docker-archive'
complete -c agsx -n '__agsx_cmd image' -a rm -d 'Remove images'
complete -c agsx -n '__agsx_cmd image' -a inspect -d "Show images' manifest and config as JSON"
complete -c agsx -n '__agsx_cmd image' -a pull -d 'Pull an image from a registry (not implemented yet)'
complete -c agsx -n '__agsx_cmd image' -s h -l help -d 'Show this help'

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

# Commands that are not implemented yet: --help only.
for c in run exec cp ls kill update build pull network 'image pull'
    complete -c agsx -n "__agsx_cmd $c" -s h -l help -d 'Show this help'
end
