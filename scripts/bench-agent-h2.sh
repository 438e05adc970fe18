#!/usr/bin/env bash
# The agent's overhead on a real database workload (docs/benchmarks.md, "Agent: every method
# of a database"): H2 (Debian's /usr/share/java/h2.jar) in memory, driven by
# scripts/bench/H2Bench.java (tables, batched inserts, point reads, joins, aggregates).
# Runs the embedded broker, cmr-config and cmr-instrumenter, then per JDK (17, and 25 when
# /usr/lib/jvm/temurin-25-jdk-amd64 exists) and mode:
#   base      no agent
#   trivial   agent, environment asking for every org.h2.* method (invocation sequences)
#             with trivial: true: every method, as before trivial methods were left out
#   default   the same without trivial: true: accessors and tiny leaves left out (the
#             default); the overhead budget off
#   budget    as default, with the overhead budget on (3 %, metric interval 1 s, judged
#             every 2 intervals); budgetN: the same with a budget of N % (e.g. budget1,
#             budget10: the environment's overhead_budget_pct)
# Every run does one warm-up round, waits WAIT_MS (agent runs: the redefinitions arrive),
# works untimed for SETTLE_MS (the JIT settles; the budget acts), then times ROUNDS rounds.
# and prints the timed phase of each run, its ratio to the median of the base runs, its
# quickest timed round and that one's ratio to the base runs' (best_round_ms, best_ratio: what a
# late recompilation or redefinition landing in one round does not move), the
# events the agent recorded and dropped, and (budget*) the methods the budget removed in that
# run (budget_removed) and in its environment so far (env_removed).
#   scripts/bench-agent-h2.sh [ROWS] [ROUNDS] [REPEAT] [MODES]
#     defaults: 20000 rows, 3 rounds, 3 runs per mode, MODES "base trivial default budget"
#   CMR_BUILD=DIR: use that build instead of building build/; JDKS="DIR ...": these JDKs;
#   AGENT_EXTRA=,key=value...: more agent options (e.g. ,agent.events.linger.ms=0)
#   AGENT_LIB=FILE: another build's libcmragent.so (its probe jar next to it), e.g. to compare agents
#   WAIT_MS: pause after the warm-up round (default 15000); SETTLE_MS: untimed work (default 45000)
#   PROFILE=DIR: perf samples each run's timed phase (every thread of the JVM, 999 Hz, JIT
#   code named through -XX:+DumpPerfMapAtExit) and prints where its CPU went: the
#   application's threads, the JIT compilers, the GC, the agent's own threads (cmr-*),
#   librdkafka's (rdk:*) and the JVM's others; DIR keeps each run's perf data and report
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$CMR_ROOT"
if [ -z "${CMR_BUILD:-}" ]; then
    cmr_install_packages
    cmr_build build
fi
B=${CMR_BUILD:-$CMR_ROOT/build}
ROWS=${1:-20000}
ROUNDS=${2:-3}
REPEAT=${3:-3}
MODES=${4:-base trivial default budget}
WAIT_MS=${WAIT_MS:-15000}
SETTLE_MS=${SETTLE_MS:-45000}
JAR=/usr/share/java/h2.jar
[ -f "$JAR" ] || { echo "$JAR missing (apt-get install libh2-java)"; exit 1; }
jdks=(/usr/lib/jvm/java-17-openjdk-amd64)
[ -x /usr/lib/jvm/temurin-25-jdk-amd64/bin/java ] && jdks+=(/usr/lib/jvm/temurin-25-jdk-amd64)
[ -n "${JDKS:-}" ] && read -r -a jdks <<< "$JDKS"
work=$(mktemp -d)
pids=()
instr_pid=
cleanup() {
    [ -n "$instr_pid" ] && kill "$instr_pid" 2>/dev/null
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
"${jdks[0]}/bin/javac" -d "$work/classes" "$CMR_ROOT/scripts/bench/H2Bench.java"
"$B/cmr-broker/cmr-broker" --bootstrap-file "$work/bootstrap" >/dev/null 2>"$work/broker.log" &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/bootstrap" ] && break; sleep 0.1; done
bs=$(cat "$work/bootstrap")
"$B/cmr-config/cmr-config" keygen --dir "$work" --name cmr >/dev/null
cat > "$work/env.yaml" <<YAML
version: 1
environments:
  - id: h2
    name: every org.h2 method, trivial ones left out
    sensors:
      - {sensor: invocation-sequence, class: "org.h2.*", method: "*"}
$(for mode in $MODES; do
    case $mode in
    budget*)
        pct=${mode#budget}
        printf '  - id: h2-%s\n    name: every org.h2 method, trivial ones left out, a budget of %s %%\n' "$mode" "${pct:-3}"
        printf '    overhead_budget_pct: %s\n    strategy:\n      metric_interval_ms: 1000\n' "${pct:-3}"
        printf '    sensors:\n      - {sensor: invocation-sequence, class: "org.h2.*", method: "*"}\n'
        ;;
    esac
done)
  - id: h2-trivial
    name: every org.h2 method
    sensors:
      - {sensor: invocation-sequence, class: "org.h2.*", method: "*", trivial: true}
mappings:
  - {agent: "h2-default-*", address: "*", environment: h2}
$(for mode in $MODES; do
    case $mode in budget*) printf '  - {agent: "h2-%s-*", address: "*", environment: h2-%s}\n' "$mode" "$mode" ;; esac
done)
  - {agent: "h2-trivial-*", address: "*", environment: h2-trivial}
YAML
"$B/cmr-config/cmr-config" --bootstrap "$bs" --log-level warn apply "$work/env.yaml" >/dev/null
"$B/cmr-config/cmr-config" --bootstrap "$bs" --log-level warn -X "trust.signing_key=$work/cmr.key" run \
    >"$work/config.log" 2>&1 &
pids+=($!)

# start_instrumenter: starts cmr-instrumenter, the overhead budget off but where an
# environment sets one (the budget* modes' environments)
start_instrumenter() {
    if [ -n "$instr_pid" ]; then kill "$instr_pid"; wait "$instr_pid" 2>/dev/null || true; fi
    : > "$work/instrumenter.log"
    "$B/cmr-instrumenter/cmr-instrumenter" --bootstrap "$bs" --log-level "${INSTR_LOG:-info}" \
        -X "trust.signing_key=$work/cmr.key" -X kafka.fetch.wait.max.ms=5 --db "$work/instrumenter" \
        -X instrumenter.budget.pct=0 -X instrumenter.budget.intervals=2 run >>"$work/instrumenter.log" 2>&1 &
    instr_pid=$!
    for _ in $(seq 300); do grep -q instr.partitions_assigned "$work/instrumenter.log" && break; sleep 0.1; done
}

# run_jvm JDK RUN ARGS...: runs the JVM (stdout to $work/out, stderr to $work/jvm.log); with
# PROFILE, perf records its timed phase and profile_summary writes where the CPU went to
# $work/profile
run_jvm() {
    local jdk=$1 run=$2
    shift 2
    if [ -z "${PROFILE:-}" ]; then
        "$jdk/bin/java" "$@" >"$work/out" 2>"$work/jvm.log"
        return
    fi
    local data
    data="$PROFILE/$(basename "$jdk")-$run.data"
    : > "$work/out"
    "$jdk/bin/java" -XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit "$@" >"$work/out" 2>"$work/jvm.log" &
    local jpid=$! ppid= rc=0
    pids+=("$jpid")
    while kill -0 "$jpid" 2>/dev/null && ! grep -q timed_start "$work/out"; do sleep 0.05; done
    if kill -0 "$jpid" 2>/dev/null; then
        perf record -q -F 999 -p "$jpid" -o "$data" >/dev/null 2>&1 &
        ppid=$!
    fi
    wait "$jpid" || rc=$?
    [ -z "$ppid" ] || wait "$ppid" || true
    [ "$rc" = 0 ] && [ -n "$ppid" ] && profile_summary "$data" > "$work/profile"
    return "$rc"
}

# profile_summary DATA: CPU seconds of the timed phase by kind of thread, and the report of
# the hottest symbols next to DATA
profile_summary() {
    perf report -q -i "$1" --stdio --sort dso,sym 2>/dev/null | head -60 > "${1%.data}.top" || true
    perf script -i "$1" -F comm 2>/dev/null | awk '
        { n++
          sub(/^ +/, ""); sub(/ +$/, "")
          if ($0 ~ /^cmr-/) k = "agent"
          else if ($0 ~ /^rdk:/) k = "rdkafka"
          else if ($0 ~ /^C[12] CompilerThre/) k = "jit"
          else if ($0 ~ /^(GC Thread|G1 |VM Periodic|VM Thread)/) k = "gc_vm"
          else if ($0 == "java" || $0 == "main") k = "app"
          else k = "other"
          c[k]++ }
        END { printf "  profile: cpu_s=%.2f", n / 999
              split("app jit gc_vm agent rdkafka other", ks, " ")
              for (i = 1; i <= 6; i++) printf " %s=%.2f", ks[i], c[ks[i]] / 999
              printf "\n" }' || true
}

echo "uptime: $(uptime)"
[ -z "${PROFILE:-}" ] || mkdir -p "$PROFILE"
echo "rows=$ROWS rounds=$ROUNDS runs=$REPEAT wait_ms=$WAIT_MS settle_ms=$SETTLE_MS"
median() { sort -n | awk '{v[NR]=$1} END {print NR ? v[int((NR+1)/2)] : 0}'; }
for jdk in "${jdks[@]}"; do
    ver=$("$jdk/bin/java" -version 2>&1 | head -1 | sed 's/.*"\(.*\)".*/\1/')
    base_ms=
    base_best=
    for mode in $MODES; do
        [ "$mode" = base ] || [ -n "$instr_pid" ] || start_instrumenter
        : > "$work/times"
        : > "$work/bests"
        for r in $(seq "$REPEAT"); do
            agent=()
            [ "$mode" = base ] ||
                agent=("-agentpath:${AGENT_LIB:-$B/agent/libcmragent.so}=bootstrap=$bs,name=h2-$mode-$r,trust.keys=$work/cmr.pub,kafka.fetch.wait.max.ms=5${AGENT_EXTRA:-}")
            wait_ms=$([ "$mode" = base ] && echo 0 || echo "$WAIT_MS")
            settle_ms=$SETTLE_MS
            removed_before=$(grep -c 'event=instr.budget_removed' "$work/instrumenter.log" 2>/dev/null || true)
            log_before=0
            [ ! -f "$work/instrumenter.log" ] || log_before=$(wc -l < "$work/instrumenter.log")
            jvm_start=$(date +%s.%N)
            : > "$work/profile"
            run_jvm "$jdk" "$mode-$r" "${agent[@]}" -cp "$work/classes:$JAR" H2Bench "$ROWS" "$ROUNDS" "$wait_ms" "$settle_ms" ||
                { tail -20 "$work/jvm.log"; exit 1; }
            ms=$(sed -n 's/.*work_ms=\([0-9]*\).*/\1/p' "$work/out")
            best=$(sed -n 's/.*best_round_ms=\([0-9]*\).*/\1/p' "$work/out")
            echo "$ms" >> "$work/times"
            echo "$best" >> "$work/bests"
            ev=$(grep -o 'events_recorded=[0-9]* events_dropped=[0-9]*' "$work/jvm.log" || echo "events_recorded=- events_dropped=-")
            applied=$(grep -o 'commands_applied=[0-9]*' "$work/jvm.log" || echo "commands_applied=-")
            # what the events cost on the wire: encoded bytes per call (an enter and an exit;
            # an agent with several segments per message counts their segment headers too),
            # events and segment batches per EventBatch message (an agent without
            # event_messages sent one segment batch per message)
            ev="$ev $({ grep 'event=agent.stopped' "$work/jvm.log" || true; } | tr ' ' '\n' | awk -F= '
                {v[$1] = $2}
                END {
                    m = ("event_messages" in v) ? v["event_messages"] : v["event_batches"]
                    if (v["events_sent"] > 0 && m > 0)
                        printf "bytes_per_call=%.2f events_per_message=%.0f segments_per_message=%.1f",
                               2 * v["event_bytes"] / v["events_sent"], v["events_sent"] / m, v["event_batches"] / m
                }')"
            removed=$(( $(grep -c 'event=instr.budget_removed' "$work/instrumenter.log" 2>/dev/null || true) - removed_before ))
            # how the budget learned this JVM: its judgements that removed methods, and when
            # the last of them came (seconds after the JVM started)
            learn=$( { [ ! -f "$work/instrumenter.log" ] || tail -n +"$((log_before + 1))" "$work/instrumenter.log"; } |
                { grep 'event=instr.budget ' || true; } | { grep -v ' removed=0 ' || true; } |
                sed -n 's/^ts=\([^ ]*\) .*/\1/p' | while read -r ts; do date -d "$ts" +%s.%N; done |
                awk -v s="$jvm_start" '{n++; last = $1} END {printf "budget_rounds=%d learned_s=%s", n, n ? sprintf("%.1f", last - s) : "-"}')
            ratio=$([ -n "$base_ms" ] && awk -v a="$ms" -v b="$base_ms" 'BEGIN {printf "%.2fx", a / b}' || echo "-")
            best_ratio=$([ -n "$base_best" ] && awk -v a="$best" -v b="$base_best" 'BEGIN {printf "%.2fx", a / b}' || echo "-")
            env_removed=$(grep -c "event=instr.budget_removed environment=h2-$mode " "$work/instrumenter.log" 2>/dev/null || true)
            printf 'jdk=%s mode=%-8s run=%d work_ms=%-7s ratio=%-7s best_round_ms=%-6s best_ratio=%-6s %s %s budget_removed=%d %s\n' \
                "$ver" "$mode" "$r" "$ms" "$ratio" "$best" "$best_ratio" "$ev" "$applied" "$removed" \
                "$(case $mode in budget*) echo "env_removed=$env_removed $learn" ;; esac)"
            cat "$work/profile"
        done
        med=$(median < "$work/times")
        med_best=$(median < "$work/bests")
        [ "$mode" = base ] && base_ms=$med && base_best=$med_best
        printf 'jdk=%s mode=%-8s median_ms=%s ratio=%s median_best_round_ms=%s best_ratio=%s\n' "$ver" "$mode" "$med" \
            "$([ -n "$base_ms" ] && awk -v a="$med" -v b="$base_ms" 'BEGIN {printf "%.2fx", a / b}' || echo -)" "$med_best" \
            "$([ -n "$base_best" ] && awk -v a="$med_best" -v b="$base_best" 'BEGIN {printf "%.2fx", a / b}' || echo -)"
        case $mode in budget*) grep -o "event=instr.budget .* environment=h2-$mode .*" "$work/instrumenter.log" | tail -3 ;; esac
    done
done
if [ "${INSTR_LOG:-info}" = debug ]; then
    echo "instrumenter (last mode): trivial methods left out over all decisions:" \
        "$(grep -o 'event=instr.trivial_skipped.* methods=[0-9]*' "$work/instrumenter.log" | sed 's/.* methods=//' | awk '{s += $1} END {print s + 0}')"
fi
if [ -n "${KEEP_LOGS:-}" ]; then mkdir -p "$KEEP_LOGS" && cp "$work"/*.log "$KEEP_LOGS"/; fi
