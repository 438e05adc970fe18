#!/usr/bin/env bash
# Requests per second and latency of the web UI's JSON API (docs/benchmarks.md, "Web UI and
# JSON API"; issue #14): the trace list and one trace of 100,000 calls through cmr-ui and,
# as the peer in the same run, straight from cmr-ingest's HTTP API, under 50 keep-alive
# clients while a worker ingests and 1,000 idle connections stay open on cmr-ui.
#   scripts/bench-ui.sh [SECONDS [CLIENTS [IDLE [SMALL_TRACES]]]]   default 10 50 1000 3000
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cmr_install_packages
cmr_install_npm # cmr-ui serves its front end from cmr-ui/web (uPlot from node_modules)
cd "$CMR_ROOT"
cmr_build build
exec build/cmr-ui/cmr-ui-bench build/cmr-broker/cmr-broker build/cmr-ingest/cmr-ingest \
    "${1:-10}" "${2:-50}" "${3:-1000}" "${4:-3000}"
