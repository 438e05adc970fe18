#!/usr/bin/env bash
# The main job: the whole system on this machine. Starts the embedded Kafka broker, the
# three CMR workers (cmr-config, cmr-instrumenter, cmr-ingest), applies the demo
# environment, runs a multi-threaded sample shop (demo/java/shop) that calls a payment
# service in a second JVM over HTTP (demo/java/payments), both with the agent, and prints
# the slowest call trees with their timings: across threads and JVMs. It ends with a
# diagnosis round (docs/DIAGNOSIS.md). Builds first (installing Debian packages when one is
# missing).
#   scripts/demo.sh [--serve] [SECONDS]
#                                   SECONDS: how long the shop runs at least (default 10);
#                                   --serve: after the report, keep the whole stack and both
#                                   JVMs running with the web UI (cmr-ui, docs/UI.md) and print
#                                   its address, until Ctrl-C
#   CMR_DEMO_OUT=DIR                where the slowest trace is exported (default a new
#                                   directory under $TMPDIR or /tmp, printed at the end)
#   CMR_UI_PORT=PORT                --serve: the web UI's port (default: a free one)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

serve=""
if [ "${1:-}" = "--serve" ]; then serve=1; shift; fi
seconds=${1:-10}
cmr_install_packages
cmr_install_npm
cd "$CMR_ROOT"
cmr_build build
B=$CMR_ROOT/build
JAVA=${JAVA:-/usr/lib/jvm/java-17-openjdk-amd64/bin/java}

work=$(mktemp -d)
pids=()
cleanup() {
    # the JVMs and workers first, newest first, the broker (pids[0]) last: they flush to it
    # on their way out, and would wait for it if it were gone
    local i
    for ((i = ${#pids[@]} - 1; i >= 1; i--)); do
        kill "${pids[i]}" 2>/dev/null || true
        wait "${pids[i]}" 2>/dev/null || true
    done
    [ ${#pids[@]} -gt 0 ] && kill "${pids[0]}" 2>/dev/null || true
    wait 2>/dev/null || true
    [ -n "${CMR_DEMO_KEEP:-}" ] && echo "logs and store kept in $work" || rm -rf "$work"
}
trap cleanup EXIT INT TERM
step() { printf '\n== %s\n' "$*"; }

step "Embedded Kafka broker (in memory, loopback only)"
cmr_start_broker "$work"
echo "bootstrap $bs"

step "The CMR's command signing key (cmr-config keygen; the agents pin its public half)"
cmr_make_keys "$work"
echo "secret key $signing_key, public key $trust_pub"

step "Environment and agent mapping (demo/environment.yaml)"
"$B/cmr-config/cmr-config" --bootstrap "$bs" --log-level warn apply demo/environment.yaml

step "CMR workers: cmr-config, cmr-instrumenter, cmr-ingest"
cmr_start_control_plane "$work"
# metrics.lateness_ms: the demo's JVMs report every 2 s; judge the rules 2 s behind them
"$B/cmr-ingest/cmr-ingest" --bootstrap "$bs" --store "$work/ingest" --http-port 0 -X metrics.lateness_ms=2000 run \
    >"$work/ingest.log" 2>&1 &
ingest_pid=$!
pids+=($ingest_pid)
if [ -n "$serve" ]; then
    for _ in $(seq 100); do grep -q "event=ingest.http_listening" "$work/ingest.log" && break; sleep 0.1; done
    ingest_port=$(grep "event=ingest.http_listening" "$work/ingest.log" | grep -o ' port=[0-9]*' | cut -d= -f2)
    "$B/cmr-ui/cmr-ui" --bootstrap "$bs" --port "${CMR_UI_PORT:-0}" --ingest-url "http://127.0.0.1:$ingest_port" \
        run >"$work/ui.log" 2>&1 &
    pids+=($!)
fi
sleep 2
echo "running (logs in the work directory; CMR_DEMO_KEEP=1 keeps them)"

agent="$B/agent/libcmragent.so=bootstrap=$bs,trust.keys=$trust_pub,kafka.fetch.wait.max.ms=5"
run_start=$(date +%s)
step "The payment service (a second JVM, HTTP on loopback), with the agent"
"$JAVA" "-agentpath:$agent,name=payments-demo" -cp "$B/demo/classes:/usr/share/java/h2.jar" payments.PaymentService "$work/payments.port" \
    >"$work/payments.out" 2>"$work/payments.log" &
payments_pid=$!
pids+=($payments_pid)
for _ in $(seq 150); do [ -s "$work/payments.port" ] && break; sleep 0.1; done
[ -s "$work/payments.port" ] || { cat "$work/payments.log" >&2; echo "the payment service did not start" >&2; exit 1; }
payment_url="http://127.0.0.1:$(cat "$work/payments.port")/charge"
echo "listening on $payment_url"
# once its agent is configured, a few requests load the HTTP server's classes, so that the
# instrumenter has instrumented them (the entry point of incoming requests among them)
# before the shop starts
for _ in $(seq 300); do grep -q "event=agent.configured" "$work/payments.log" && break; sleep 0.1; done
python3 -c 'import sys, urllib.request
for i in range(20): urllib.request.urlopen(sys.argv[1] + "?order=1&amount=1", timeout=10).read()' "$payment_url"
sleep 2

step "The shop application, with the agent: ${seconds}s, and until the diagnosis round below is over"
# --serve: the shop keeps running after the report (a year at most)
shop_seconds=180
[ -z "$serve" ] || shop_seconds=31536000
"$JAVA" "-agentpath:$agent,name=shop-demo" -cp "$B/demo/classes" shop.ShopDemo "$shop_seconds" \
    "$payment_url" "$work/shop.stop" \
    2>"$work/jvm.log" &
shop_pid=$!
pids+=($shop_pid)
# the shop's checkouts are traced once its agent is configured; the JDK classes it uses (its
# HTTP client among them) are instrumented in the next moments: the steady state starts 2 s
# after the configuration
for _ in $(seq 600); do grep -q "event=agent.configured" "$work/jvm.log" && break; sleep 0.1; done
steady=$(($(date +%s) + 2))
shop_until=$(($(date +%s) + seconds))

step "A diagnosis, from start to end (docs/DIAGNOSIS.md)"
config_q() { "$B/cmr-config/cmr-config" --bootstrap "$bs" --log-level warn "$@"; }
agent_lines() { grep -E "event=agent\.diagnosis_$1" "$work/payments.log" | sed -e 's/^ts=[^ ]* level=[a-z]* prog=[^ ]* //'; }
echo "The payment service's bank calls are slow every tenth time; the demo environment's slow-bank rule"
echo "(p99 of payments.Bank.authorize above 10 ms for 10 s) asks for a diagnosis when it fires. Waiting for it..."
diag=""
for _ in $(seq 450); do
    diag=$(config_q diagnose list | sed -n 's/^\([0-9a-f]\{16\}\) .*(threshold slow-bank)$/\1/p' | head -1)
    [ -n "$diag" ] && break
    sleep 0.2
done
diag_done=""
if [ -n "$diag" ]; then
    echo "cmr-config started diagnosis $diag; the instrumenter discovered the callees of Bank.authorize in the"
    echo "payment service's JVM and sent them conditional probes (recording only inside Bank.authorize):"
    for _ in $(seq 300); do agent_lines class | grep -q "action=installed" && break; sleep 0.1; done
    agent_lines started
    agent_lines class
    echo "... recording for 6 s, then stopping it as an operator would (cmr-config diagnose stop $diag):"
    sleep 6
    config_q diagnose stop "$diag"
    for _ in $(seq 300); do agent_lines ended | grep -q . && break; sleep 0.1; done
    agent_lines ended
    agent_lines class | grep "action=removed" || true
    diag_done=1
else
    echo "(the slow-bank rule did not fire in time: no diagnosis in this run)"
fi
while [ "$(date +%s)" -lt "$shop_until" ]; do sleep 0.2; done
if [ -z "$serve" ]; then
    touch "$work/shop.stop"
    wait "$shop_pid"
    grep -E "event=agent\.(configured|stopped)" "$work/jvm.log" | sed -e 's/^ts=[^ ]* //' || true
    echo "classes instrumented and redefined in the running JVM: $(sed -n 's/.*event=agent.stopped.*commands_applied=\([0-9]*\).*/\1/p' "$work/jvm.log")"
    kill "$payments_pid" 2>/dev/null || true
    wait "$payments_pid" 2>/dev/null || true

    step "Waiting for cmr-ingest to store the last batches"
    sleep 3
    kill "$ingest_pid"; wait "$ingest_pid" 2>/dev/null || true
else
    sleep 3 # the report below reads the store while cmr-ingest keeps writing it
fi

step "The slowest checkouts"
ingest_q() { "$B/cmr-ingest/cmr-ingest" --store "$work/ingest" traces --slowest --root shop.ShopDemo "$@"; }
first_id() { python3 -c 'import json,sys; t=json.load(sys.stdin).get("traces",[]); print(t[0]["trace_id"] if t else "")'; }
window=(--from "$steady")
# with --serve the JVMs keep running: leave out the last seconds, whose checkouts may not
# have arrived from both JVMs yet (they would be listed as partial)
recent=()
[ -n "$serve" ] && recent=(--to "$(($(date +%s) - 5))")
window+=("${recent[@]}")
slowest=$(ingest_q --limit 1 "${window[@]}" --json | first_id)
if [ -n "$slowest" ]; then
    echo "(from $(date -u -d "@$steady" +%H:%M:%SZ) on: in the first 2 s after the shop's agent was configured, the JDK"
    echo " classes it uses were still being instrumented; its first payment calls went out without trace headers)"
else
    window=("${recent[@]}")
    slowest=$(ingest_q --limit 1 "${window[@]}" --json | first_id)
    echo "(the run ended before the steady state, 2 s after the shop's agent was configured: all checkouts;"
    echo " run longer, e.g. scripts/demo.sh 10, to see every payment call cross into the payment service)"
fi
[ -n "$slowest" ] || {
    echo "no checkout was traced: the run may have ended before the shop's agent was configured"
    echo "(about 3 s on the embedded broker); run longer, e.g. scripts/demo.sh 10, or see $work/*.log"
    CMR_DEMO_KEEP=1
    exit 1
}
ingest_q --limit 5 "${window[@]}"

step "Transactions and methods of the run (cmr-ingest metrics: histograms merged over the JVMs)"
metrics_q() { "$B/cmr-ingest/cmr-ingest" --store "$work/ingest" metrics "$@" --env demo --from "$run_start"; }
metrics_q top --kind transaction --limit 8
echo
metrics_q top --kind method --limit 8
echo
echo "Threshold rules (demo/environment.yaml) that found something abnormal (events on cmr.alerts):"
grep -E "event=metrics\.(abnormal|back_to_normal)" "$work/ingest.log" | sed -e 's/^ts=[^ ]* level=[a-z]* prog=[^ ]* //' || echo "(none)"
metrics_q alerts

step "The diagnosis: what was discovered, where the time went, and the bytes given back"
if [ -n "$diag_done" ]; then
    config_q diagnose list --all
    config_q diagnose show "$diag"
    echo
    echo "Where Bank.authorize's time went, from the traces tagged with the diagnosis (cmr-ingest diagnosis $diag;"
    echo "the selected method and the callees discovered under it; times in ms):"
    "$B/cmr-ingest/cmr-ingest" --store "$work/ingest" diagnosis "$diag" --limit 1000 --json | python3 -c '
import json, sys
r = json.load(sys.stdin)
print("  %d traces tagged (%d read)" % (r["found"], len(r["traces"])))
print("  %8s %10s %10s %8s %8s %8s  %s" % ("CALLS", "TOTAL", "SELF", "P50", "P99", "MAX", "METHOD"))
for m in r["methods"]:
    if m["method"].startswith(("acquirer.", "payments.Bank.")):
        print("  %8d %10.1f %10.1f %8.3f %8.3f %8.3f  %s" % (m["calls"], m["total_ns"] / 1e6, m["self_ns"] / 1e6,
              m["p50_ns"] / 1e6, m["p99_ns"] / 1e6, m["max_ns"] / 1e6, m["method"]))' || true
    echo
    echo "What the agents reported (cmr-ingest agents: AgentStatus, with the diagnoses each JVM took part in):"
    "$B/cmr-ingest/cmr-ingest" --store "$work/ingest" agents
    echo
    echo "The classes' bytes after the diagnosis are those they ran before it (the agent's check, matches_before),"
    echo "and for the acquirer's classes (not instrumented by the environment) the class files' own bytes:"
    agent_lines class | grep "action=removed" | while read -r line; do
        cls=$(sed -n 's/.*class="\([^"]*\)".*/\1/p' <<<"$line")
        digest=$(sed -n 's/.* digest=\([0-9a-f]*\).*/\1/p' <<<"$line")
        file="$B/demo/classes/$cls.class"
        own=$(python3 -c 'import hashlib,sys; print(hashlib.blake2b(open(sys.argv[1],"rb").read(), digest_size=32).hexdigest()[:16])' "$file")
        if [ "$digest" = "$own" ]; then same="= the class file"; else same="(the environment's instrumented bytes)"; fi
        printf '  %-28s %s %s, %s\n' "$cls" "$digest" "$same" "$(sed -n 's/.*\(matches_before=[a-z]*\).*/\1/p' <<<"$line")"
    done
else
    echo "(no diagnosis in this run)"
fi

step "Where the time went in the slowest checkout"
"$B/cmr-ingest/cmr-ingest" --store "$work/ingest" show "$slowest"
# the export outlives the run's work directory (which the demo removes)
out_dir="${CMR_DEMO_OUT:-${TMPDIR:-/tmp}/cmr-demo-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$out_dir"
"$B/cmr-ingest/cmr-ingest" --store "$work/ingest" export "$slowest" "$out_dir/slowest-trace.json" --format chrome \
    >/dev/null &&
    echo "exported as Chrome trace-event JSON: $out_dir/slowest-trace.json (open it in https://ui.perfetto.dev)"

if [ -n "$serve" ]; then
    step "The web UI (cmr-ui): the stack and both JVMs keep running"
    for _ in $(seq 100); do grep -q "event=ui.listening" "$work/ui.log" && break; sleep 0.1; done
    ui_port=$(grep "event=ui.listening" "$work/ui.log" | grep -o ' port=[0-9]*' | cut -d= -f2)
    [ -n "$ui_port" ] || { cat "$work/ui.log" >&2; echo "cmr-ui did not start" >&2; exit 1; }
    echo "UI: http://127.0.0.1:$ui_port/"
    echo "(Ctrl-C stops everything; the exported trace above stays)"
    wait "$shop_pid" || true
fi
