#!/usr/bin/env bash
# The agent's overhead on a MooBench-style workload (docs/benchmarks.md, "Agent"):
#   scripts/bench-agent.sh [CALLS] [DEPTH]      default 20000000 calls, depth 10
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cmr_install_packages
cd "$CMR_ROOT"
cmr_build build
j25=/usr/lib/jvm/temurin-25-jdk-amd64/bin/java
[ -x "$j25" ] || j25=-
exec build/agent/agent_bench build/cmr-broker/cmr-broker /usr/lib/jvm/java-17-openjdk-amd64/bin/java "$j25" \
    build/agent/libcmragent.so build/agent/bench-classes "${1:-20000000}" "${2:-10}"
