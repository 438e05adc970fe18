#!/usr/bin/env bash
# Creates the Kafka ACLs of docs/SECURITY.md ("Principals") with Kafka's kafka-acls.sh: one
# principal per role, each allowed exactly the topics and consumer groups it needs.
#
#   deploy/acls.sh --bootstrap-server kafka1:9093 [--command-config admin.properties]
#                  [--prefix cmr] [--agent User:cmr-agent] [--config User:cmr-config]
#                  [--instrumenter User:cmr-instrumenter] [--ingest User:cmr-ingest]
#                  [--operator User:cmr-operator] [--ui User:cmr-ui] [--dry-run]
#
# --dry-run prints the kafka-acls.sh commands instead of running them. The cluster must run
# with an authorizer (authorizer.class.name) and allow.everyone.if.no.acl.found=false, or
# these ACLs restrict nothing.
set -euo pipefail
prefix=cmr dry=0 args=()
agent=User:cmr-agent config=User:cmr-config instr=User:cmr-instrumenter ingest=User:cmr-ingest op=User:cmr-operator
ui=User:cmr-ui
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix=$2; shift 2 ;;
        --agent) agent=$2; shift 2 ;;
        --config) config=$2; shift 2 ;;
        --instrumenter) instr=$2; shift 2 ;;
        --ingest) ingest=$2; shift 2 ;;
        --operator) op=$2; shift 2 ;;
        --ui) ui=$2; shift 2 ;;
        --dry-run) dry=1; shift ;;
        --bootstrap-server|--command-config) args+=("$1" "$2"); shift 2 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
[ $dry -eq 1 ] || command -v kafka-acls.sh >/dev/null || { echo "kafka-acls.sh (Apache Kafka) is not on PATH" >&2; exit 2; }

acl() { # principal operation resource-kind name [pattern]; kind "cluster" takes no name
    local cmd=(kafka-acls.sh "${args[@]}" --add --allow-principal "$1" --operation "$2" "--$3")
    [ "$3" = cluster ] || cmd+=("$4")
    [ -n "${5:-}" ] && cmd+=(--resource-pattern-type "$5")
    if [ $dry -eq 1 ]; then echo "${cmd[*]}"; else "${cmd[@]}" >/dev/null; fi
}
topic() { acl "$1" "$2" topic "$prefix.$3" "${4:-}"; }

# Agents: write their data, create and read command topics, their own consumer groups.
for t in registrations classes events metrics agent-events; do
    topic "$agent" Write "$t"
    topic "$agent" Describe "$t"
done
topic "$agent" Create cmd. prefixed
topic "$agent" Read cmd. prefixed
topic "$agent" Describe cmd. prefixed
acl "$agent" Read group cmr-agent- prefixed
acl "$agent" IdempotentWrite cluster kafka-cluster

# cmr-config: answers registrations, owns the configuration and the diagnoses (started by
# threshold events, ended on time to live, or when an agent reports it reached its hits or
# budget on cmr.agent-events).
for t in registrations config diagnoses diagnosis-trees alerts agent-events; do topic "$config" Read "$t"; topic "$config" Describe "$t"; done
topic "$config" Write config
topic "$config" Write diagnoses
topic "$config" Write cmd. prefixed
topic "$config" Create cmd. prefixed
topic "$config" Describe cmd. prefixed
acl "$config" Read group cmr-config prefixed
acl "$config" IdempotentWrite cluster kafka-cluster
acl "$config" Write transactional-id cmr-config-apply prefixed
acl "$config" Describe transactional-id cmr-config-apply prefixed

# cmr-instrumenter: reads classes, configuration and diagnoses, and the JVMs' metrics (the
# overhead budget), writes commands, the method table, the diagnoses' discovered trees,
# the overhead budget's removals and the class grants sent ahead to new JVMs (both of which
# it reads back: only it may write them).
for t in classes config methods diagnoses metrics budget grants; do topic "$instr" Read "$t"; topic "$instr" Describe "$t"; done
topic "$instr" Write methods
topic "$instr" Write budget
topic "$instr" Write grants
topic "$instr" Write diagnosis-trees
topic "$instr" Describe diagnosis-trees
topic "$instr" Write cmd. prefixed
topic "$instr" Create cmd. prefixed
topic "$instr" Describe cmd. prefixed
acl "$instr" Read group cmr-instrumenter prefixed
acl "$instr" IdempotentWrite cluster kafka-cluster

# cmr-ingest: reads what it assembles and shows (and the environments' threshold rules);
# writes the threshold events, and its workers' announcements (which partitions each owns,
# where its HTTP API answers: the queries' fan-out), which only it may write.
for t in events methods registrations agent-events metrics config ingest-workers; do topic "$ingest" Read "$t"; topic "$ingest" Describe "$t"; done
topic "$ingest" Write alerts
topic "$ingest" Describe alerts
topic "$ingest" Write ingest-workers
acl "$ingest" Read group cmr-ingest prefixed
acl "$ingest" IdempotentWrite cluster kafka-cluster

# Operators: apply environments.
topic "$op" Read config
topic "$op" Write config
topic "$op" Describe config
# ... and start and stop diagnoses (cmr-config diagnose)
topic "$op" Read diagnoses
topic "$op" Read diagnosis-trees
topic "$op" Describe diagnosis-trees
topic "$op" Write diagnoses
topic "$op" Describe diagnoses
acl "$op" IdempotentWrite cluster kafka-cluster
# cmr-config apply publishes all changes of a file in one transaction (config.transactional_id)
acl "$op" Write transactional-id cmr-config-apply prefixed
acl "$op" Describe transactional-id cmr-config-apply prefixed

# cmr-ui (the web UI): reads what its pages show, and writes what an operator writes from
# them: diagnoses (start, narrow, stop) and, unless it runs with ui.writable = false,
# environments in one transaction of its own (config.transactional_id = cmr-ui-apply).
for t in config diagnoses diagnosis-trees budget; do topic "$ui" Read "$t"; topic "$ui" Describe "$t"; done
topic "$ui" Write config
topic "$ui" Write diagnoses
acl "$ui" IdempotentWrite cluster kafka-cluster
acl "$ui" Write transactional-id cmr-ui-apply prefixed
acl "$ui" Describe transactional-id cmr-ui-apply prefixed
[ $dry -eq 1 ] || echo "ACLs created for $agent, $config, $instr, $ingest, $op, $ui"
