#!/bin/sh
# jvm_latency.sh - the class-load latency end to end: a JVM running the agent loads N
# generated application classes (every one matches the environment's rule); the agent
# measures, per class, the time from its load (ClassFileLoadHook) to its redefinition with
# the instrumented bytes (RedefineClasses done) and prints median/p90/p99 at shutdown
# (event=agent.redefine_latency). Runs the embedded broker, cmr-config and cmr-instrumenter.
#
# Usage: tests/control-plane/jvm_latency.sh BUILD_DIR [CLASSES] [JAVA_HOME]
set -eu
build=$(cd "${1:?usage: jvm_latency.sh BUILD_DIR [CLASSES] [JAVA_HOME]}" && pwd)
n=${2:-2000}
jhome=${3:-/usr/lib/jvm/java-17-openjdk-amd64}
tmp=$(mktemp -d /tmp/cmr-cp-jvm-XXXXXX)
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    for p in $pids; do wait "$p" 2>/dev/null || true; done
    if [ -n "${CP_KEEP:-}" ]; then echo "logs: $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT INT TERM

# N classes with one method each, and a main that loads them at a steady pace
mkdir -p "$tmp/src/gen" "$tmp/classes"
i=0
while [ "$i" -lt "$n" ]; do
    printf 'package gen;\npublic class C%d {\n  public int m(int x) {\n    return x + %d;\n  }\n}\n' "$i" "$i" > "$tmp/src/gen/C$i.java"
    i=$((i + 1))
done
cat > "$tmp/src/gen/Main.java" <<JAVA
package gen;
public class Main {
  public static void main(String[] a) throws Exception {
    int n = Integer.parseInt(a[0]);
    Thread.sleep(8000); // registration done, classes loaded before it processed
    long sum = 0;
    for (int i = 0; i < n; i++) {
      Class<?> c = Class.forName("gen.C" + i);
      sum += (Integer) c.getMethod("m", int.class).invoke(c.getDeclaredConstructor().newInstance(), i);
      if (i % 2 == 1) Thread.sleep(1); // about 1,000 classes/s at most
    }
    Thread.sleep(5000); // let the last redefinitions arrive
    System.out.println("loaded " + n + " classes, sum " + sum);
  }
}
JAVA
"$jhome/bin/javac" -d "$tmp/classes" "$tmp"/src/gen/*.java

"$build/cmr-broker/cmr-broker" --bootstrap-file "$tmp/bootstrap" --log-level warn > "$tmp/broker.log" 2>&1 &
pids="$!"
for _ in $(seq 100); do [ -s "$tmp/bootstrap" ] && break; sleep 0.1; done
bs=$(cat "$tmp/bootstrap")
cat > "$tmp/env.yaml" <<YAML
version: 1
environments:
  - id: lat
    sensors:
      - {sensor: timer, class: "gen.C*", method: m}
mappings:
  - {agent: "lat-*", address: "*", environment: lat}
YAML
"$build/cmr-config/cmr-config" --bootstrap "$bs" --log-level warn apply "$tmp/env.yaml"
"$build/cmr-config/cmr-config" keygen --dir "$tmp" --name cmr > /dev/null
"$build/cmr-config/cmr-config" --bootstrap "$bs" -X "trust.signing_key=$tmp/cmr.key" run > "$tmp/config.log" 2>&1 &
pids="$pids $!"
"$build/cmr-instrumenter/cmr-instrumenter" --bootstrap "$bs" --db "$tmp/db" -X "trust.signing_key=$tmp/cmr.key" \
    -X kafka.fetch.wait.max.ms=5 --log-level "${CP_LOG_LEVEL:-info}" > "$tmp/instr.log" 2>&1 &
pids="$pids $!"
for _ in $(seq 300); do grep -q instr.partitions_assigned "$tmp/instr.log" && break; sleep 0.1; done

"$jhome/bin/java" -Xshare:auto \
    "-agentpath:$build/agent/libcmragent.so=bootstrap=$bs,name=lat-1,trust.keys=$tmp/cmr.pub,kafka.fetch.wait.max.ms=5" \
    -cp "$tmp/classes" gen.Main "$n" > "$tmp/jvm.log" 2>&1 || { tail -20 "$tmp/jvm.log"; exit 1; }
grep "loaded " "$tmp/jvm.log"
grep -o 'event=agent.redefine_latency.*' "$tmp/jvm.log" || { echo "no latency line"; tail -20 "$tmp/jvm.log"; exit 1; }
