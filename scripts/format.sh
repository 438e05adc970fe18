#!/usr/bin/env bash
# One formatting tool decides layout: clang-format with the project's .clang-format (its C
# section, and its JavaScript section for the web UI's modules).
#
#   scripts/format.sh           formats every C source and header, and every JavaScript
#                               module, that git tracks
#   scripts/format.sh --check   changes nothing; lists the files that are not formatted
#                               and exits 1 when there is one (scripts/test.sh runs this)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$CMR_ROOT"

command -v clang-format >/dev/null || { echo "clang-format is missing (Debian package clang-format)" >&2; exit 2; }
mapfile -t files < <(git ls-files -- '*.c' '*.h' '*.js' '*.mjs' 2>/dev/null || find . -name '*.[ch]' -not -path './build*')
if [ "${1:-}" = "--check" ]; then
    bad=0
    for f in "${files[@]}"; do
        [ -f "$f" ] || continue
        if ! clang-format --style=file "$f" | cmp -s - "$f"; then
            echo "not formatted: $f (run scripts/format.sh)" >&2
            bad=1
        fi
    done
    [ $bad -eq 0 ] && cmr_log "formatting: ${#files[@]} files match .clang-format"
    exit $bad
fi
clang-format --style=file -i "${files[@]}"
cmr_log "formatted ${#files[@]} files"
