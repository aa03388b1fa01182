#!/usr/bin/env bats
# test-runner: parallel
# The suite's own rules, checked over test/bats and test/oci:
# - no check in a test's body is written `[ A ] && [ B ]` (or `&& grep`)
#   without an `|| ...` after it: bats fails a test on a failing command
#   only when it is the last of an && list, so a false A passes unseen.
#   Write one check a line. (A loop's `... && break` is a condition.)
# - no check is a bare negation, `! CMD`: bash's errexit ignores a command
#   negated with !, so it could never fail the test. Write `! CMD || false`
#   (or `run ! CMD`).

load helpers

@test "suite: no check hides behind && or a bare ! (bats ignores a failing left side, errexit a negation)" {
  run python3 - "$AGSX_SRCDIR"/test/bats/*.bats "$AGSX_SRCDIR"/test/oci/*.bats \
    "$AGSX_SRCDIR"/test/guest/*.bats <<'PY'
import re, sys

def strip(l):
    """L without its quoted strings and [[ ]] expressions (their && is not a list's)."""
    l = re.sub(r"'[^']*'", "''", l)
    l = re.sub(r'"(\\.|[^"\\])*"', '""', l)
    return re.sub(r'\[\[.*?\]\]', '[[ ]]', l)

def split_and(l):
    return [p.strip() for p in l.split(' && ')]

check = ('[', '[[', 'grep ', '! ')
bad = []
for f in sys.argv[1:]:
    in_test, heredoc, quoted = False, None, False
    for n, raw in enumerate(open(f), 1):
        l = raw.rstrip('\n')
        if heredoc:
            if l.strip() == heredoc:
                heredoc = None
            continue
        if l.startswith('@test '):
            in_test, quoted = True, False
        elif l == '}':
            in_test = False
        if l.lstrip().startswith('#') and not quoted:
            continue  # a comment: its apostrophes open nothing
        s = strip(l)
        was_quoted = quoted
        if s.count("'") % 2:  # a single-quoted string opens or closes here
            quoted = not quoted
        if in_test and not was_quoted and ' && ' in s and '||' not in s \
                and not s.rstrip().endswith('&&') \
                and all(p.startswith(check) for p in split_and(s.strip())):
            bad.append(f"{f.split('/test/')[-1]}:{n}: {l.strip()}")
        if in_test and not was_quoted and re.match(r'\s+! ', s) and '||' not in s \
                and '&&' not in s:
            bad.append(f"{f.split('/test/')[-1]}:{n}: {l.strip()} (a bare !)")
        m = re.search(r"<<-?\s*'?\"?(\w+)'?\"?\s*$", l)
        if m:
            heredoc = m.group(1)
print('\n'.join(bad))
sys.exit(1 if bad else 0)
PY
  [ "$status" -eq 0 ] || { printf '# %s\n' "${lines[@]}" >&3; false; }
}
