#!/usr/bin/env bash
# Runs every test of the project: builds (installing Debian packages first when one is
# missing), then ctest over unit, broker, JVM and external-reader tests.
#
#   scripts/test.sh              the formatting check (scripts/format.sh --check), then
#                                all tests, in build/
#   scripts/test.sh --sanitize   the unit tests (no JVM, no broker) built with
#                                AddressSanitizer + UBSan, in build-asan/
#   extra arguments after -- go to ctest (e.g. -- -L unit, -- -R wire)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

mode=all
if [ "${1:-}" = "--sanitize" ]; then mode=sanitize; shift; fi
if [ "${1:-}" = "--" ]; then shift; fi

cmr_install_packages
cmr_install_npm
cd "$CMR_ROOT"
jobs=$(nproc)
if [ "$mode" = sanitize ]; then
    cmr_build build-asan -DCMR_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    cmr_log "unit tests under AddressSanitizer + UBSan"
    ctest --test-dir build-asan -L unit --output-on-failure -j "$jobs" "$@"
else
    "$CMR_ROOT/scripts/format.sh" --check
    cmr_build build
    cmr_log "all tests"
    ctest --test-dir build --output-on-failure -j "$jobs" "$@"
fi
