# shellcheck shell=bash
# Shared by scripts/demo.sh, scripts/test.sh and the benchmarks: install the Debian packages
# listed in scripts/packages.txt (only when one is missing), configure + build with CMake,
# start the embedded broker, make the run's command signing keys.
set -euo pipefail

CMR_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export CMR_ROOT

cmr_log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# cmr_packages: the package names of scripts/packages.txt (comments and blanks removed).
cmr_packages() { sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$CMR_ROOT/scripts/packages.txt"; }

cmr_install_packages() {
    local missing=() p
    for p in $(cmr_packages); do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        cmr_log "all Debian packages present; skipping apt-get"
        return 0
    fi
    cmr_log "installing Debian packages: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# cmr_install_npm: Node.js and npm (Debian's, when the machine has none), then the web UI's
# npm packages (uPlot; playwright-core for the browser tests) from cmr-ui/web's lockfile with
# `npm ci`, only when the lockfile changed since the last install: offline once installed.
cmr_install_npm() {
    local web=$CMR_ROOT/cmr-ui/web sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
        cmr_log "installing Debian packages: nodejs npm"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
    fi
    local want have=""
    want=$(sha256sum "$web/package-lock.json" | cut -d' ' -f1)
    [ -f "$web/node_modules/.cmr-lock-sha256" ] && have=$(cat "$web/node_modules/.cmr-lock-sha256")
    if [ "$want" = "$have" ]; then
        cmr_log "web UI npm packages present; skipping npm ci"
        return 0
    fi
    cmr_log "installing the web UI's npm packages (npm ci, cmr-ui/web/package-lock.json)"
    (cd "$web" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    echo "$want" >"$web/node_modules/.cmr-lock-sha256"
}

# cmr_build DIR [cmake args...]: configure (once) and build the whole tree into DIR.
cmr_build() {
    local dir=$1; shift
    cmake -S "$CMR_ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
    cmake --build "$dir" -j "$(nproc)"
}

# cmr_start_broker DIR: starts the embedded broker (build/cmr-broker) in the background,
# its log in DIR/broker.log, its pid appended to the caller's `pids` array; sets `bs` to its
# bootstrap address. Fails, with the broker's log, if it does not come up within 10 s.
cmr_start_broker() {
    "$CMR_ROOT/build/cmr-broker/cmr-broker" --bootstrap-file "$1/bootstrap" >/dev/null 2>"$1/broker.log" &
    pids+=($!)
    for _ in $(seq 100); do [ -s "$1/bootstrap" ] && break; sleep 0.1; done
    [ -s "$1/bootstrap" ] || { cat "$1/broker.log" >&2; echo "the broker did not start" >&2; return 1; }
    bs=$(cat "$1/bootstrap")
}

# cmr_make_keys DIR: makes this run's command signing key pair in DIR with the built
# `cmr-config keygen` (docs/SECURITY.md); sets `signing_key` (the secret key: the workers'
# -X trust.signing_key=...) and `trust_pub` (the public key: the agents' trust.keys=...).
# DIR is the caller's temporary work directory, removed with it.
cmr_make_keys() {
    "$CMR_ROOT/build/cmr-config/cmr-config" keygen --dir "$1" --name cmr >/dev/null
    signing_key=$1/cmr.key
    trust_pub=$1/cmr.pub
}

# cmr_start_control_plane DIR [LOG_LEVEL]: with the broker of cmr_start_broker (`bs`) and
# the key of cmr_make_keys (`signing_key`), starts cmr-config and cmr-instrumenter in the
# background (logs DIR/config.log and DIR/instrumenter.log, the class cache in
# DIR/instrumenter), their pids appended to the caller's `pids` array, and waits (up to
# 30 s) until the instrumenter reads cmr.classes. Their consumers fetch every 5 ms: the
# embedded broker answers a fetch only when its wait is over, which at librdkafka's 500 ms
# caps a partition's reading at 1 MB per wait, less than JVMs starting at once send.
cmr_start_control_plane() {
    local level=${2:-info} ilevel=${2:-info}
    case $level in warn | error) ilevel=info ;; esac # its few info lines: the wait below reads one
    "$CMR_ROOT/build/cmr-config/cmr-config" --bootstrap "$bs" --log-level "$level" \
        -X "trust.signing_key=$signing_key" -X kafka.fetch.wait.max.ms=5 run >"$1/config.log" 2>&1 &
    pids+=($!)
    "$CMR_ROOT/build/cmr-instrumenter/cmr-instrumenter" --bootstrap "$bs" --log-level "$ilevel" \
        -X "trust.signing_key=$signing_key" -X kafka.fetch.wait.max.ms=5 --db "$1/instrumenter" run \
        >"$1/instrumenter.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 300); do
        grep -q "event=instr.partitions_assigned" "$1/instrumenter.log" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "cmr-instrumenter was not assigned its partitions within 30 s (see $1/instrumenter.log)" >&2
}
