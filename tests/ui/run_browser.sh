#!/usr/bin/env bash
# The web UI in a real browser, on the real stack: the embedded broker, cmr-config,
# cmr-instrumenter, cmr-ingest and cmr-ui, the demo's two JVMs (a shop calling a payment
# service over HTTP) with the agent, then Debian's chromium driven headless by
# playwright-core (tests/ui/browser.test.mjs): every view loads and shows what the API
# answers, a click on a trace opens its tree, a diagnosis is started, narrowed and stopped
# from the page, and the console stays free of errors. Loopback only, free ports, bounded.
#
#   run_browser.sh BUILD_DIR JAVA [SCREENSHOT_DIR]
set -euo pipefail
B=$1
JAVA=$2
shots=${3:-}
root=$(cd "$(dirname "$0")/../.." && pwd)
web=$root/cmr-ui/web
chromium=${CMR_CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$chromium" ] || [ ! -d "$web/node_modules/playwright-core" ] || ! command -v node >/dev/null; then
    echo "skipped: needs $chromium, node and cmr-ui/web/node_modules (scripts/lib.sh installs them)"
    exit 77
fi
work=$(mktemp -d)
pids=()
cleanup() {
    # newest first, one at a time, the broker (pids[0]) last: the JVMs and workers flush to it
    # on their way out and would wait for it if it were gone
    local i
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        kill "${pids[i]}" 2>/dev/null || true
        wait "${pids[i]}" 2>/dev/null || true
    done
    if [ "${failed:-1}" != 0 ]; then
        for f in "$work"/*.log; do echo "--- $f (last lines)"; tail -n 15 "$f"; done
    fi
    rm -rf "$work"
}
trap cleanup EXIT
# waits (at most $2 tenths of a second) for a "port=N" in log $1 after event $3; prints N
port_of() {
    local n
    for _ in $(seq "$2"); do
        n=$(grep "event=$3 " "$1" 2>/dev/null | grep -o ' port=[0-9]*' | head -1 | cut -d= -f2)
        [ -n "$n" ] && { echo "$n"; return 0; }
        sleep 0.1
    done
    echo "no $3 in $1" >&2
    return 1
}

t0=$SECONDS
"$B/cmr-broker/cmr-broker" --bootstrap-file "$work/bootstrap" >/dev/null 2>"$work/broker.log" &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/bootstrap" ] && break; sleep 0.1; done
bs=$(cat "$work/bootstrap")
"$B/cmr-config/cmr-config" keygen --dir "$work" --name cmr >/dev/null
"$B/cmr-config/cmr-config" --bootstrap "$bs" --log-level warn apply "$root/tests/ui/environment.yaml" >/dev/null
"$B/cmr-config/cmr-config" --bootstrap "$bs" -X "trust.signing_key=$work/cmr.key" run >"$work/config.log" 2>&1 &
pids+=($!)
"$B/cmr-instrumenter/cmr-instrumenter" --bootstrap "$bs" -X "trust.signing_key=$work/cmr.key" --db "$work/instr" \
    run >"$work/instrumenter.log" 2>&1 &
pids+=($!)
"$B/cmr-ingest/cmr-ingest" --bootstrap "$bs" --store "$work/ingest" --http-port 0 -X metrics.lateness_ms=2000 \
    -X metrics.port=-1 run >"$work/ingest.log" 2>&1 &
pids+=($!)
ingest_port=$(port_of "$work/ingest.log" 200 ingest.http_listening)
"$B/cmr-ui/cmr-ui" --bootstrap "$bs" --port 0 --ingest-url "http://127.0.0.1:$ingest_port" run >"$work/ui.log" 2>&1 &
pids+=($!)
ui_port=$(port_of "$work/ui.log" 200 ui.listening)

agent="$B/agent/libcmragent.so=bootstrap=$bs,trust.keys=$work/cmr.pub,kafka.fetch.wait.max.ms=5"
"$JAVA" "-agentpath:$agent,name=payments-ui" -cp "$B/demo/classes:/usr/share/java/h2.jar" payments.PaymentService "$work/payments.port" \
    >"$work/payments.out" 2>"$work/payments.log" &
pids+=($!)
for _ in $(seq 300); do [ -s "$work/payments.port" ] && break; sleep 0.1; done
payment_url="http://127.0.0.1:$(cat "$work/payments.port")/charge"
for _ in $(seq 300); do grep -q "event=agent.configured" "$work/payments.log" && break; sleep 0.1; done
"$JAVA" "-agentpath:$agent,name=shop-ui" -cp "$B/demo/classes" shop.ShopDemo 240 "$payment_url" "$work/shop.stop" \
    2>"$work/shop.log" >/dev/null &
pids+=($!)
# traces that cross both JVMs, started at least 6 s ago, before the browser starts (at most
# 90 s): the test's first list asks for traces that ended 4 s before it loads (complete ones)
for _ in $(seq 180); do
    if curl -sf "http://127.0.0.1:$ui_port/api/traces?limit=200&to=-6s" |
        python3 -c 'import json,sys; sys.exit(0 if any(t["jvms"]==2 for t in json.load(sys.stdin)["traces"]) else 1)'; then
        break
    fi
    sleep 0.5
done
echo "stack up with traces across both JVMs after $((SECONDS - t0)) s"
failed=1
node "$root/tests/ui/browser.test.mjs" "http://127.0.0.1:$ui_port/" "$chromium" ${shots:+"$shots"}
failed=0
t1=$SECONDS
cleanup
trap - EXIT
echo "stopped in $((SECONDS - t1)) s"
