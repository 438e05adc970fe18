#!/usr/bin/env bash
# The agents' overhead per request on the fleet test's three JVMs (docs/benchmarks.md, "A
# fleet of three JVMs"): Tomcat 10 -> OkHttp -> Jetty 9 (JDBC on PostgreSQL through
# HikariCP, a pool fan-out) -> Apache HttpClient -> the JDK's HttpServer, loaded with wrk
# (closed loop, CONNS connections) for SECONDS, on fresh JVMs warmed with as much load, with
# and without the agents, ROUNDS times each; prints requests/s, p50 and p99, and the CPU per
# request of each JVM and of each CMR process (which run on the same machine). 60 s by
# default: with 20 s the JIT is still compiling the instrumented classes again (they were
# redefined during the warm-up) and that, not the agents, dominates the difference.
#   scripts/bench-fleet.sh [SECONDS] [ROUNDS] [CONNS]     defaults: 60 s, 2 rounds, 8
#   CMR_BUILD=DIR: use that build instead of building build/; JAVA=path: the JVM
#   CMR_BENCH_PERF=DIR: a perf profile of each JVM and CMR process with the agents, into DIR;
#   CMR_BENCH_CMR_NICE=19: the CMR's processes (broker, workers) at that nice value during
#   the measured load, so that they run on what the JVMs leave of the cores, the nearest
#   this machine comes to a CMR on other hosts (what the agents cost inside the JVMs)
#   CMR_BENCH_PIN=0/1: during the measured load the application (JVMs, PostgreSQL) on the
#   first CPU list, the CMR and wrk on the second, with and without the agents alike: the
#   agents' cost inside the JVMs, with the CMR off the application's CPUs as on other hosts
#   CMR_BENCH_JVM_FLAGS="...": more JVM options (for names of JIT-compiled code in those
#   profiles: -XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit -XX:+PreserveFramePointer)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$CMR_ROOT"
if [ -z "${CMR_BUILD:-}" ]; then
    cmr_install_packages
    cmr_build build
fi
B=${CMR_BUILD:-$CMR_ROOT/build}
JAVA=${JAVA:-/usr/lib/jvm/java-17-openjdk-amd64/bin/java}
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)"; exit 1; }
exec python3 tests/fleet/test_fleet.py --broker "$B/cmr-broker/cmr-broker" --config "$B/cmr-config/cmr-config" \
    --instrumenter "$B/cmr-instrumenter/cmr-instrumenter" --ingest "$B/cmr-ingest/cmr-ingest" --java "$JAVA" \
    --agent "$B/agent/libcmragent.so" --webapp "$B/tests/fleet/front" --stock "$B/tests/fleet/stock" \
    --price "$B/tests/fleet/price" --environment "${CMR_FLEET_ENVIRONMENT:-tests/fleet/environment-default.yaml}" \
    --bench "${1:-60}" --rounds "${2:-2}" --concurrency "${3:-8}"
