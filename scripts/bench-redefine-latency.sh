#!/usr/bin/env bash
# Time from a class being loaded in the JVM to its instrumented version being active
# (docs/benchmarks.md, "Control plane"): the embedded broker, cmr-config and
# cmr-instrumenter, and a JVM with the agent that loads every class of Guava (about 2,000)
# after the JDK's own; the environment instruments every method of Guava's collect
# package. The agent measures load -> redefined per class and prints the distribution.
#   scripts/bench-redefine-latency.sh [RATE] [JAVA]   RATE: classes loaded per second (0: all at once)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cmr_install_packages
cd "$CMR_ROOT"
cmr_build build
B=$CMR_ROOT/build
RATE=${1:-0}
JAVA=${2:-/usr/lib/jvm/java-17-openjdk-amd64/bin/java}
JAR=/usr/share/java/guava.jar
[ -f "$JAR" ] || { echo "$JAR missing (apt-get install libguava-java)"; exit 1; }
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
cmr_start_broker "$work"
cmr_make_keys "$work"
cat > "$work/env.yaml" <<YAML
version: 1
environments:
  - id: latency
    name: Redefine latency
    sensors:
      - sensor: invocation-sequence
        class: "com.google.common.collect.*"
        method: "*"
mappings:
  - agent: "latency-*"
    address: "*"
    environment: latency
YAML
"$B/cmr-config/cmr-config" --bootstrap "$bs" --log-level warn apply "$work/env.yaml" >/dev/null
cmr_start_control_plane "$work" warn
sleep 3
# Wait for the registration to be answered before loading Guava, so that what is measured
# is the steady state (classes loaded while the agent is connected).
wait_s=$(( RATE > 0 ? 2100 / RATE + 15 : 20 ))
{ sleep 8; echo "loadjar $JAR $RATE"; sleep "$wait_s"; echo exit; } |
    "$JAVA" "-agentpath:$B/agent/libcmragent.so=bootstrap=$bs,name=latency-1,trust.keys=$trust_pub,kafka.fetch.wait.max.ms=5" -cp "$B/tests/agent/classes:$JAR" AgentTestApp \
        2>"$work/jvm.log" | grep -E "loadjar" || true
grep -o 'event=agent.redefine_latency.*' "$work/jvm.log" || { echo "no latency line (see logs)"; tail -5 "$work/jvm.log"; exit 1; }
grep -o 'classes_seen=[0-9]* classes_sent=[0-9]*.*commands_failed=[0-9]*' "$work/jvm.log"
