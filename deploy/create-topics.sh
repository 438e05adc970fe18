#!/usr/bin/env bash
# Creates the CMR's shared topics on an Apache Kafka cluster with Kafka's kafka-topics.sh.
#
#   deploy/create-topics.sh --bootstrap-server kafka1:9093 [--command-config admin.properties]
#                           [--prefix cmr] [--replication-factor 3] [--events-partitions 16]
#
# Existing topics are left as they are (--if-not-exists).
set -euo pipefail
prefix=cmr rf=3 events=16 args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix=$2; shift 2 ;;
        --replication-factor) rf=$2; shift 2 ;;
        --events-partitions) events=$2; shift 2 ;;
        --bootstrap-server|--command-config) args+=("$1" "$2"); shift 2 ;;
        -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
command -v kafka-topics.sh >/dev/null || { echo "kafka-topics.sh (Apache Kafka) is not on PATH" >&2; exit 2; }
day=86400000
create() { # name partitions config...
    local name=$1 parts=$2; shift 2
    local cfg=(--config max.message.bytes=16777216)
    for c in "$@"; do cfg+=(--config "$c"); done
    kafka-topics.sh "${args[@]}" --create --if-not-exists --topic "$prefix.$name" \
        --partitions "$parts" --replication-factor "$rf" "${cfg[@]}"
}
create registrations 4 cleanup.policy=delete retention.ms=$((7 * day))
create classes 8 cleanup.policy=delete retention.ms=$((30 * day))
create agent-events 4 cleanup.policy=delete retention.ms=$((7 * day))
create config 1 cleanup.policy=compact retention.ms=-1
create methods 4 cleanup.policy=compact retention.ms=-1
create events "$events" cleanup.policy=delete retention.ms=$((3 * day))
create metrics 4 cleanup.policy=delete retention.ms=$((7 * day))
create alerts 4 cleanup.policy=delete retention.ms=$((90 * day))
create diagnoses 1 cleanup.policy=delete retention.ms=$((90 * day))
create diagnosis-trees 1 cleanup.policy=delete retention.ms=$((90 * day))
create ingest-workers 1 cleanup.policy=compact retention.ms=-1
create budget 1 cleanup.policy=compact retention.ms=-1
# compacted, and a grant older than the longest validity there is (trust.grant.lifetime.ms:
# 30 days at most) is of no use: the segments past it go (classes no JVM loads any more)
create grants 4 cleanup.policy=compact,delete retention.ms=$((30 * day))
