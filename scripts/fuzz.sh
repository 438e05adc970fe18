#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz/ and runs each for
# SECONDS seconds (default 30): scripts/fuzz.sh [SECONDS] [-- ctest args]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
seconds=${1:-30}
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
cmr_install_packages
cd "$CMR_ROOT"
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMR_FUZZ=ON -DCMR_FUZZ_SECONDS="$seconds" \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
targets=$(cmake --build build-fuzz --target help | sed -n 's/^\.\.\. \(fuzz_[A-Za-z0-9_]*\).*/\1/p')
[ -n "$targets" ] || { echo "no fuzz targets" >&2; exit 1; }
cmake --build build-fuzz -j "$(nproc)" --target $targets
ctest --test-dir build-fuzz -L fuzz --output-on-failure "$@"
