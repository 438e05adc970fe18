#!/usr/bin/env bash
# What the agent's class pipeline costs a real application's start-up: Debian's Tomcat 10
# starts (with the examples webapp) N times without the agent and N times with it, the
# agent connected to a running CMR (embedded broker, cmr-config, cmr-instrumenter, an
# environment that instruments one servlet). Prints Tomcat's own "Server startup in"
# figures (median) and the load hook's cost per class as the agent measured it.
#   scripts/bench-agent-startup.sh [RUNS]        default 5
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cmr_install_packages
cd "$CMR_ROOT"
cmr_build build
runs=${1:-5}
B=$CMR_ROOT/build
JAVA=${JAVA:-/usr/lib/jvm/java-17-openjdk-amd64/bin/java}
TC_HOME=/usr/share/tomcat10
EXAMPLES=/usr/share/tomcat10-examples/examples
CONF=/etc/tomcat10
[ -f "$TC_HOME/bin/bootstrap.jar" ] || { echo "tomcat10 is not installed (apt-get install tomcat10 tomcat10-examples)"; exit 1; }
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"; }
trap cleanup EXIT

cmr_start_broker "$work"
cmr_make_keys "$work"
cat > "$work/env.yaml" <<YAML
version: 1
environments:
  - id: bench
    name: Start-up benchmark
    sensors:
      - sensor: timer
        class: HelloWorldExample
        method: doGet
mappings:
  - agent: "tomcat-*"
    address: "*"
    environment: bench
YAML
"$B/cmr-config/cmr-config" --bootstrap "$bs" --log-level warn apply "$work/env.yaml" >/dev/null
cmr_start_control_plane "$work" warn
sleep 3

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# tomcat_start NAME [JVM OPTS...]: starts, waits for "Server startup in", prints the ms, stops.
tomcat_start() {
    local name=$1; shift
    local b=$work/$name port; port=$(free_port)
    mkdir -p "$b/conf" "$b/logs" "$b/temp" "$b/work" "$b/webapps"
    cp -r "$CONF"/* "$b/conf/" 2>/dev/null || true
    sed -i -e "s/<Connector port=\"8080\"/<Connector address=\"127.0.0.1\" port=\"$port\"/" \
           -e 's/<Server port="[0-9-]*"/<Server port="-1"/' "$b/conf/server.xml"
    ln -s "$EXAMPLES" "$b/webapps/examples"
    "$JAVA" "$@" -Dcatalina.home=$TC_HOME -Dcatalina.base="$b" -Djava.io.tmpdir="$b/temp" \
        -cp "$TC_HOME/bin/bootstrap.jar:$TC_HOME/bin/tomcat-juli.jar" \
        org.apache.catalina.startup.Bootstrap start >"$b/out.log" 2>&1 &
    local pid=$!
    for _ in $(seq 600); do grep -q "Server startup in" "$b/out.log" 2>/dev/null && break; sleep 0.1; done
    curl -s -o /dev/null "http://127.0.0.1:$port/examples/servlets/servlet/HelloWorldExample" || true
    kill "$pid"; wait "$pid" 2>/dev/null || true
    sed -n 's/.*Server startup in \[\([0-9]*\)\] milliseconds.*/\1/p' "$b/out.log" | head -1
    grep -o 'hook_calls=[0-9]* hook_ns_avg=[0-9]* hook_ms_total=[0-9.]*' "$b/out.log" > "$b/hook" || true
}

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

for i in $(seq "$runs"); do tomcat_start "plain-$i"; done > "$work/plain.txt"
for i in $(seq "$runs"); do tomcat_start "agent-$i" "-agentpath:$B/agent/libcmragent.so=bootstrap=$bs,name=tomcat-$i,trust.keys=$trust_pub"; done > "$work/agent.txt"
plain=$(median < "$work/plain.txt")
agent=$(median < "$work/agent.txt")
echo "Tomcat 10 start-up (Server startup in, median of $runs): without agent ${plain} ms, with agent ${agent} ms"
echo "  runs without: $(tr '\n' ' ' < "$work/plain.txt")"
echo "  runs with:    $(tr '\n' ' ' < "$work/agent.txt")"
for i in $(seq "$runs"); do cat "$work/agent-$i/hook"; done | awk '{
    split($1,c,"="); split($2,a,"="); split($3,t,"="); n++; calls+=c[2]; avg+=a[2]; tot+=t[2]
} END { if (n) printf "  load hook: %d classes per start, %.1f us per class, %.1f ms per start (mean of %d runs)\n", calls/n, avg/n/1000, tot/n, n }'
