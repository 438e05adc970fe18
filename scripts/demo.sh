#!/usr/bin/env bash
# The main job: starts the embedded Kafka broker on loopback and shows every message type
# of the system produced through the transport and consumed back, intact, by a consumer
# group. Builds first (installing Debian packages when one is missing).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

cmr_install_packages
cd "$CMR_ROOT"
cmr_build build
bin=$CMR_ROOT/build

work=$(mktemp -d)
broker_pid=""
cleanup() {
    [ -n "$broker_pid" ] && kill "$broker_pid" 2>/dev/null && wait "$broker_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

cmr_log "starting the embedded broker (in memory, loopback only)"
"$bin/cmr-broker/cmr-broker" --bootstrap-file "$work/bootstrap" >/dev/null 2>"$work/broker.log" &
broker_pid=$!
for _ in $(seq 100); do [ -s "$work/bootstrap" ] && break; sleep 0.1; done
[ -s "$work/bootstrap" ] || { cat "$work/broker.log" >&2; echo "broker did not start" >&2; exit 1; }
bootstrap=$(cat "$work/bootstrap")
cmr_log "broker at $bootstrap"

echo
echo "== The wire contracts (schemas/*.avsc, Avro single-object encoding)"
"$bin/tools/cmr-wire" list
echo
echo "== One message of each type through Kafka and back"
"$bin/tools/cmr-wire" roundtrip --bootstrap "$bootstrap" --log-level warn
