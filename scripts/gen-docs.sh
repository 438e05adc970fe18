#!/usr/bin/env bash
# Writes the generated tables of the docs from the code: every block
#
#     <!-- BEGIN generated: PROGRAM keys -->
#     ...
#     <!-- END generated -->
#
# in docs/CONFIGURATION.md and docs/AGENT.md is replaced by what `PROGRAM --help-keys`
# prints (the program's key table; for the agent, the host tool cmr-agent-keys prints
# agent_options.c's table). The prose around the blocks is left as it is.
#
#   scripts/gen-docs.sh [BUILD_DIR]           rewrite the blocks (BUILD_DIR: build/)
#   scripts/gen-docs.sh --check [BUILD_DIR]   change nothing; fail naming the file and the
#                                             program of every block that differs, and every
#                                             program that has no block (tests/docs runs it)
#
# The programs must be built (cmake --build BUILD_DIR).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
build=${1:-$root/build}
case "$build" in /*) ;; *) build=$(pwd)/$build ;; esac

docs=(docs/CONFIGURATION.md docs/AGENT.md)
programs=(cmr-config cmr-instrumenter cmr-ingest cmr-ui cmr-broker cmr-wire agent)

# The executable that prints PROGRAM's key table.
program_binary() {
    case "$1" in
    cmr-config | cmr-instrumenter | cmr-ingest | cmr-ui | cmr-broker) echo "$build/$1/$1" ;;
    cmr-wire) echo "$build/tools/cmr-wire" ;;
    agent) echo "$build/agent/tests/cmr-agent-keys" ;;
    *) return 1 ;;
    esac
}

status=0
fail() {
    echo "gen-docs: $*" >&2
    status=1
}

declare -A seen=()
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for doc in "${docs[@]}"; do
    out=$tmp/out.md
    : >"$out"
    program= # inside a block: its program
    lineno=0
    while IFS= read -r line || [ -n "$line" ]; do
        lineno=$((lineno + 1))
        if [ -z "$program" ]; then
            printf '%s\n' "$line" >>"$out"
            if [[ $line =~ ^'<!-- BEGIN generated: '([A-Za-z0-9_-]+)' keys -->'$ ]]; then
                program=${BASH_REMATCH[1]}
                : >"$tmp/old"
            fi
            continue
        fi
        if [ "$line" != "<!-- END generated -->" ]; then
            printf '%s\n' "$line" >>"$tmp/old"
            continue
        fi
        # End of the block of $program: its table, from the code.
        seen[$program]=1
        if ! bin=$(program_binary "$program"); then
            fail "$doc:$lineno: no program \"$program\" (one of: ${programs[*]})"
            cat "$tmp/old" >>"$out"
        elif [ ! -x "$bin" ]; then
            fail "$doc: $program: $bin is not built (cmake --build $build)"
            cat "$tmp/old" >>"$out"
        elif ! "$bin" --help-keys >"$tmp/new"; then
            fail "$doc: $program: '$bin --help-keys' failed"
            cat "$tmp/old" >>"$out"
        else
            cat "$tmp/new" >>"$out"
            if [ "$check" = 1 ] && ! cmp -s "$tmp/old" "$tmp/new"; then
                fail "$doc: the table of $program differs from '$program --help-keys' (run scripts/gen-docs.sh):"
                diff -u --label "$doc ($program, committed)" --label "$program --help-keys" "$tmp/old" "$tmp/new" >&2 || true
            fi
        fi
        printf '%s\n' "$line" >>"$out"
        program=
    done <"$root/$doc"
    if [ -n "$program" ]; then
        fail "$doc: the block of $program has no '<!-- END generated -->'"
    elif [ "$check" = 0 ] && ! cmp -s "$out" "$root/$doc"; then
        cp "$out" "$root/$doc"
        echo "gen-docs: wrote $doc"
    fi
done

for p in "${programs[@]}"; do
    [ -n "${seen[$p]:-}" ] || fail "$p: no '<!-- BEGIN generated: $p keys -->' block in ${docs[*]}"
done
exit $status
