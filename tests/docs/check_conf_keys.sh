#!/usr/bin/env bash
# check_conf_keys.sh - every configuration key the code reads is in its program's key
# table, with the default the code uses.
#
#   tests/docs/check_conf_keys.sh SOURCE_DIR BUILD_DIR
#
# Greps the sources (not tests) for cmr_conf_get / cmr_conf_get_int / cmr_conf_get_bool /
# cmr_conf_origin with a literal key, and looks the key up in the table the program
# prints with --help-keys (scripts/gen-docs.sh knows where each program is). A file in
# agent/, cmr-config/, cmr-instrumenter/, cmr-ingest/, cmr-broker/ or tools/ belongs to
# that program; common/program/metrics_http.c to the three workers (GET /metrics),
# common/trust/command.c to the two that sign commands (cmr-config, cmr-instrumenter); any
# other file in common/ to every program. Fails, naming file, key and program,
# for a key no table has, and for a default (a literal: string, true/false, integer
# expression) that is not the table's. Keys built at run time are not seen.
set -euo pipefail

src=${1:?usage: check_conf_keys.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: check_conf_keys.sh SOURCE_DIR BUILD_DIR}
all_programs=(cmr-config cmr-instrumenter cmr-ingest cmr-ui cmr-broker cmr-wire agent)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
fail() {
    echo "check_conf_keys: $*" >&2
    status=1
}

# Each program's table as "key<TAB>default" lines (default empty when none).
for p in "${all_programs[@]}"; do
    case "$p" in
    cmr-wire) bin=$build/tools/cmr-wire ;;
    agent) bin=$build/agent/tests/cmr-agent-keys ;;
    *) bin=$build/$p/$p ;;
    esac
    if ! "$bin" --help-keys >"$tmp/$p.md"; then
        fail "$p: '$bin --help-keys' failed (is it built?)"
        continue
    fi
    awk -F'|' '
        NR == 1 { for (i = 2; i < NF; i++) { h = $i; gsub(/^ +| +$/, "", h); if (h == "default") col = i } next }
        /^\| `/ {
            k = $2; d = $col
            gsub(/^ +| +$|`/, "", k); gsub(/^ +| +$|`/, "", d)
            print k "\t" d
        }' "$tmp/$p.md" >"$tmp/$p.keys"
done
[ "$status" = 0 ] || exit 1

# The programs a source file belongs to.
programs_of() {
    case "$1" in
    agent/*) echo agent ;;
    cmr-config/* | cmr-instrumenter/* | cmr-ingest/* | cmr-ui/* | cmr-broker/*) echo "${1%%/*}" ;;
    tools/*) echo cmr-wire ;;
    common/program/metrics_http.c) echo cmr-config cmr-instrumenter cmr-ingest ;;
    common/trust/command.c) echo cmr-config cmr-instrumenter ;;
    common/*) echo "${all_programs[@]}" ;;
    *) echo "" ;;
    esac
}

# The value of a literal default as text, or nothing (and status 1) when it is not one.
literal_value() {
    local d=$1
    d=${d#"${d%%[![:space:]]*}"}
    d=${d%"${d##*[![:space:]]}"}
    if [[ $d =~ ^\"([^\"]*)\"$ ]]; then
        [ -n "${BASH_REMATCH[1]}" ] || return 1 # "": a placeholder, not a default
        echo "${BASH_REMATCH[1]}"
    elif [ "$d" = true ] || [ "$d" = false ]; then
        echo "$d"
    else
        d=$(sed -E 's/([0-9])([uU]?[lL]{1,2}|[uU])\b/\1/g' <<<"$d")
        [[ $d =~ ^[-0-9\ ()*+\<]+$ ]] || return 1
        echo $((d))
    fi
}

# Looks key up in program's table: prints "=DEFAULT" for its row (DEFAULT empty when
# none), "*" when a ".*" row accepts it; status 1 when no row does.
table_row() {
    local key=$1 table=$2 k d
    while IFS=$'\t' read -r k d; do
        if [ "$k" = "$key" ]; then
            echo "=$d"
            return 0
        fi
    done <"$table"
    while IFS=$'\t' read -r k d; do
        if [[ $k == *.\* && $key == "${k%\*}"* ]]; then
            echo "*"
            return 0
        fi
    done <"$table"
    return 1
}

cd "$src"
nreads=0
while IFS= read -r file; do
    # One line per file, so that calls spread over lines are seen whole.
    grep -oE 'cmr_conf_(get_int|get_bool|get|origin)\([^,()]*, *"[^"]*"( *, *[^,)]*)?' <(tr '\n' ' ' <"$file") \
        >"$tmp/calls" || continue
    progs=$(programs_of "$file")
    if [ -z "$progs" ]; then
        fail "$file reads configuration keys but belongs to no program (add it to programs_of)"
        continue
    fi
    while IFS= read -r call; do
        [[ $call =~ \"([^\"]*)\"(\ *,\ *(.*))?$ ]] || continue
        key=${BASH_REMATCH[1]}
        code_def=${BASH_REMATCH[3]:-}
        nreads=$((nreads + 1))
        for p in $progs; do
            if ! row=$(table_row "$key" "$tmp/$p.keys"); then
                fail "$file reads \"$key\", which is in no row of $p's key table ($p --help-keys)"
                continue
            fi
            [[ $call == cmr_conf_origin* || $row == "*" ]] && continue
            if value=$(literal_value "$code_def") && [ "$value" != "${row#=}" ]; then
                fail "$file reads \"$key\" with default \"$value\", but $p's key table says \"${row#=}\""
            fi
        done
    done <"$tmp/calls"
done < <(find . \( -name 'build*' -o -name .git -o -name tests \) -prune -o -name '*.c' -type f -print | sed 's|^\./||' | sort)

if [ "$nreads" -lt 20 ]; then
    fail "only $nreads configuration reads found in $src: is it the source tree?"
fi
[ "$status" = 0 ] && echo "check_conf_keys: $nreads configuration reads, all in their programs' key tables"
exit $status
