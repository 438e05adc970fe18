#!/usr/bin/env bash
# Time to first instrumented call (docs/benchmarks.md, "Time to first instrumented call"):
# the embedded broker, cmr-config and cmr-instrumenter (warm: running, environment applied,
# one JVM already served), then RUNS short JVMs with the agent, each running ShortJob
# (tests/agent/java/app/ShortJob.java: an in-memory H2 database from Debian's h2.jar, SQL
# for RUN_MS ms). The environment instruments every method of org.h2.* (invocation
# sequence). Per JVM it prints:
#   configured_ms  agent start (its first log line) -> agent.configured (log timestamps)
#   redefine p50/p99 of class load -> redefined, counted from the agent being configured
#                  for classes loaded before it (agent.redefine_latency's since_configured
#                  figures; builds before them print only load -> redefined)
#   instrumented   every class instrumented: redefined, and at load (granted ahead by the
#                  CMR, or from the cache) counted as 0 (agent.redefine_latency's at_load
#                  and instrumented_* figures; AGENT_EXTRA=,agent.preload.max.bytes=0 runs
#                  the agents without the classes granted ahead, for the comparison)
# With BASE=DIR (a build of another commit, e.g. main), the same runs against that build
# first, for the comparison in the same conditions.
# With AGENT_LIB=PATH (libcmragent.so of another build), the JVMs run that agent against
# this build's CMR: e.g. an agent from before ClassGrants, as during an upgrade.
# With CACHE=1 (a build with the agent's cache of instrumented classes, agent.cache.dir),
# each of the RUNS is a pair of JVMs of one agent name and one fresh cache directory: the
# first gets its classes by Redefine (and caches them), then its restart; per pair it prints
#   first:   redefined (classes), load->redefined p50/p99, grants written
#   restart: load_hits (classes instrumented at load from the cache, of the first's
#            redefined), hook time per hit (agent.cache_stats hit_hook_us_avg/max), the
#            classes still redefined and their load->redefined p50/p99
# and the medians over the pairs. (BASE is ignored: main's agent has no cache.)
#   scripts/bench-first-call.sh [RUNS] [RUN_MS]        (BUILD=DIR to use another build dir)
#   CACHE=1 scripts/bench-first-call.sh [RUNS] [RUN_MS]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$CMR_ROOT"
RUNS=${1:-5}
RUN_MS=${2:-3000}
JAVA=${JAVA:-/usr/lib/jvm/java-17-openjdk-amd64/bin/java}
JAR=/usr/share/java/h2.jar
[ -f "$JAR" ] || { echo "$JAR missing (apt-get install libh2-java)"; exit 1; }
if [ -z "${BUILD:-}" ]; then
    cmr_install_packages
    cmr_build build >/dev/null
    BUILD=$CMR_ROOT/build
fi

# run_set LABEL BUILD_DIR: the whole stack of BUILD_DIR, RUNS JVMs; prints one line per JVM
# and a summary.
run_set() {
    local label=$1 B=$2 work pids=() i
    work=$(mktemp -d)
    "$B/cmr-broker/cmr-broker" --bootstrap-file "$work/bootstrap" >/dev/null 2>"$work/broker.log" &
    pids+=($!)
    for _ in $(seq 100); do [ -s "$work/bootstrap" ] && break; sleep 0.1; done
    local bs; bs=$(cat "$work/bootstrap")
    "$B/cmr-config/cmr-config" keygen --dir "$work" --name cmr >/dev/null
    cat > "$work/env.yaml" <<YAML
version: 1
environments:
  - id: firstcall
    name: Time to first instrumented call
    sensors:
      - sensor: invocation-sequence
        class: "org.h2.*"
        method: "*"
mappings:
  - agent: "firstcall-*"
    address: "*"
    environment: firstcall
YAML
    "$B/cmr-config/cmr-config" --bootstrap "$bs" --log-level warn apply "$work/env.yaml" >/dev/null
    "$B/cmr-config/cmr-config" --bootstrap "$bs" --log-level info -X "trust.signing_key=$work/cmr.key" \
        -X kafka.fetch.wait.max.ms=5 run >"$work/config.log" 2>&1 &
    pids+=($!)
    "$B/cmr-instrumenter/cmr-instrumenter" --bootstrap "$bs" --log-level "${INSTR_LOG:-info}" -X "trust.signing_key=$work/cmr.key" \
        -X kafka.fetch.wait.max.ms=5 --db "$work/instrumenter" run >"$work/instrumenter.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 300); do grep -q instr.partitions_assigned "$work/instrumenter.log" 2>/dev/null && break; sleep 0.1; done
    for _ in $(seq 300); do grep -q config.started "$work/config.log" 2>/dev/null && break; sleep 0.1; done
    local agent="${AGENT_LIB:-$B/agent/libcmragent.so}=bootstrap=$bs,trust.keys=$work/cmr.pub,kafka.fetch.wait.max.ms=5${AGENT_EXTRA:-}"
    # warm-up: one JVM served before the measured ones (CMR caches, consumer groups settled)
    # (WARM=0: none, the first JVM is measured against a CMR that has served nobody yet)
    if [ "${WARM:-1}" != 0 ]; then
        "$JAVA" "-agentpath:$agent,name=firstcall-warm" -cp "$BUILD/tests/agent/classes:$JAR" ShortJob "$RUN_MS" \
            >"$work/warm.out" 2>"$work/warm.log" || true
    fi
    local all="$work/summary"
    : > "$all"
    if [ -n "${CACHE:-}" ]; then
        cache_pairs "$label" "$work" "$agent"
        stop_stack "${pids[@]}"
        if [ -n "${KEEP:-}" ]; then echo "logs: $work" >&2; else rm -rf "$work"; fi
        return 0
    fi
    for i in $(seq "$RUNS"); do
        "$JAVA" "-agentpath:$agent,name=firstcall-$i" -cp "$BUILD/tests/agent/classes:$JAR" ShortJob "$RUN_MS" \
            >"$work/jvm$i.out" 2>"$work/jvm$i.log" || { echo "JVM $i failed:"; tail -5 "$work/jvm$i.log"; }
        local t0 t1 conf lat
        t0=$(grep -m1 -o '^ts=[^ ]*' "$work/jvm$i.log" | cut -c4-)
        t1=$(grep -m1 'event=agent.configured' "$work/jvm$i.log" | grep -o '^ts=[^ ]*' | cut -c4- || true)
        conf=NA
        if [ -n "$t1" ]; then
            conf=$(( ($(date -d "$t1" +%s%3N) - $(date -d "$t0" +%s%3N)) ))
        fi
        lat=$(grep -o 'event=agent.redefine_latency.*' "$work/jvm$i.log" | sed 's/event=agent.redefine_latency //' || true)
        printf '%s run %d: configured_ms=%s %s | %s\n' "$label" "$i" "$conf" "${lat:-no redefines}" \
            "$(cat "$work/jvm$i.out")"
        echo "$conf ${lat:-}" >> "$all"
    done
    # medians over the runs of configured_ms and of each run's p99
    awk -v label="$label" '
        { c[NR] = $1; for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1], NR] = kv[2] } }
        function med(name,   a, n, i, j, t) {
            n = 0; for (i = 1; i <= NR; i++) if ((name, i) in v) a[++n] = v[name, i] + 0
            if (n == 0) return "NA"
            for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
            return a[int((n + 1) / 2)]
        }
        END {
            n = 0; for (i = 1; i <= NR; i++) if (c[i] != "NA") a[++n] = c[i] + 0
            for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
            printf "%s median of %d runs: configured_ms=%s load->redefined p50_ms=%s p99_ms=%s", label, NR,
                n ? a[int((n + 1) / 2)] : "NA", med("p50_ms"), med("p99_ms")
            if (med("since_configured_p99_ms") != "NA")
                printf " since_configured p50_ms=%s p99_ms=%s", med("since_configured_p50_ms"), med("since_configured_p99_ms")
            if (med("instrumented") != "NA")
                printf " | instrumented classes=%s at_load=%s p50_ms=%s p99_ms=%s", med("instrumented"), med("at_load"),
                    med("instrumented_p50_ms"), med("instrumented_p99_ms")
            printf "\n"
        }' "$all"
    stop_stack "${pids[@]}"
    if [ -n "${KEEP:-}" ]; then echo "logs: $work" >&2; else rm -rf "$work"; fi
}

# stop_stack BROKER WORKER...: the workers first (stopped while the broker still answers
# they end at once; after it they wait out their flush and commit timeouts), then the broker.
stop_stack() {
    local broker=$1 p
    shift
    for p in "$@"; do kill "$p" 2>/dev/null || true; done
    for p in "$@"; do wait "$p" 2>/dev/null || true; done
    kill "$broker" 2>/dev/null || true
    wait 2>/dev/null || true
}

# kv LOG EVENT KEY: the value of KEY= in the first line of LOG with event=EVENT ("" if none)
kv() { grep -m1 "event=$2 " "$1" | grep -o " $3=[^ ]*" | cut -d= -f2 || true; }

# cache_pairs LABEL WORK AGENT: RUNS pairs (first JVM, its restart) with agent.cache.dir.
cache_pairs() {
    local label=$1 work=$2 agent=$3 i name opts f r
    local sum="$work/cache_summary"
    : > "$sum"
    for i in $(seq "$RUNS"); do
        name=firstcall-cache-$i-$$
        opts="$agent,name=$name,agent.cache.dir=$work/cache$i"
        for r in first restart; do
            f="$work/cache$i-$r"
            "$JAVA" "-agentpath:$opts" -cp "$BUILD/tests/agent/classes:$JAR" ShortJob "$RUN_MS" \
                >"$f.out" 2>"$f.log" || { echo "JVM $i $r failed:"; tail -5 "$f.log"; }
        done
        local fr fp50 fp99 w lh hav hmax rr rp50 rp99 refused
        fr=$(kv "$work/cache$i-first.log" agent.redefine_latency classes)
        fp50=$(kv "$work/cache$i-first.log" agent.redefine_latency p50_ms)
        fp99=$(kv "$work/cache$i-first.log" agent.redefine_latency p99_ms)
        w=$(kv "$work/cache$i-first.log" agent.cache_stats written)
        lh=$(kv "$work/cache$i-restart.log" agent.cache_stats load_hits)
        hav=$(kv "$work/cache$i-restart.log" agent.cache_stats hit_hook_us_avg)
        hmax=$(kv "$work/cache$i-restart.log" agent.cache_stats hit_hook_us_max)
        refused=$(kv "$work/cache$i-restart.log" agent.cache_stats refused)
        rr=$(kv "$work/cache$i-restart.log" agent.redefine_latency classes)
        rp50=$(kv "$work/cache$i-restart.log" agent.redefine_latency p50_ms)
        rp99=$(kv "$work/cache$i-restart.log" agent.redefine_latency p99_ms)
        printf '%s pair %d: first: redefined=%s p50_ms=%s p99_ms=%s written=%s | restart: load_hits=%s/%s refused=%s hit_hook_us_avg=%s hit_hook_us_max=%s still_redefined=%s p50_ms=%s p99_ms=%s | %s\n' \
            "$label" "$i" "${fr:-0}" "${fp50:-NA}" "${fp99:-NA}" "${w:-NA}" "${lh:-NA}" "${fr:-0}" "${refused:-NA}" \
            "${hav:-NA}" "${hmax:-NA}" "${rr:-0}" "${rp50:-NA}" "${rp99:-NA}" "$(cat "$work/cache$i-restart.out")"
        echo "${fp50:-NA} ${fp99:-NA} ${lh:-NA} ${hav:-NA} ${rr:-0} ${rp50:-NA} ${rp99:-NA}" >> "$sum"
    done
    awk -v label="$label" '
        function med(col,   a, n, i, j, t) {
            n = 0; for (i = 1; i <= NR; i++) if (v[i, col] != "NA") a[++n] = v[i, col] + 0
            if (n == 0) return "NA"
            for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
            return a[int((n + 1) / 2)]
        }
        { for (c = 1; c <= NF; c++) v[NR, c] = $c }
        END {
            printf "%s median of %d pairs: first load->redefined p50_ms=%s p99_ms=%s | restart load_hits=%s hit_hook_us_avg=%s still_redefined=%s p50_ms=%s p99_ms=%s\n",
                label, NR, med(1), med(2), med(3), med(4), med(5), med(6), med(7)
        }' "$sum"
}

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
if [ -n "${BASE:-}" ] && [ -z "${CACHE:-}" ]; then
    run_set before "$BASE"
fi
run_set after "$BUILD"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
