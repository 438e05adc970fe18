/*
 * msg.h - the messages the agent and the CMR workers exchange, as C structs.
 *
 * Every struct here mirrors one Avro record of schemas/ *.avsc field for field; the
 * codec (msg_codec.c) turns a struct into an Avro single-object encoded message and
 * back, driven by the field tables of msg_desc.c. A unit test checks that every table
 * matches its schema, so a struct and its schema cannot drift apart silently.
 *
 * Conventions:
 *   - Avro double -> double.
 *   - Avro long  -> int64_t (ids and hashes are unsigned 64-bit values carried as
 *                  the same bits: cast with (uint64_t)).
 *   - Avro string -> char * (NUL-terminated UTF-8); ["null","string"] -> char * or NULL.
 *   - Avro bytes  -> cmr_bytes_t;  enums -> the C enums below;  arrays -> {items, count}.
 *
 * Ownership: a struct filled by cmr_msg_decode() owns every pointer inside it and is
 * released with cmr_msg_free(). A struct the caller fills for cmr_msg_encode() is only
 * read: the caller keeps ownership of what it points to.
 */
#ifndef CMR_MSG_H
#define CMR_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cmr_bytes {
    uint8_t *data;
    size_t len;
} cmr_bytes_t;

typedef struct cmr_strings {
    char **items;
    size_t count;
} cmr_strings_t;

typedef struct cmr_kv {
    char *key;
    char *value;
} cmr_kv_t;

typedef struct cmr_kvs {
    cmr_kv_t *items;
    size_t count;
} cmr_kvs_t;

/* The message types, one per schema. The order is part of no wire format. */
typedef enum cmr_msg_type {
    CMR_MSG_AGENT_REGISTRATION,
    CMR_MSG_AGENT_CONFIGURATION,
    CMR_MSG_NO_ENVIRONMENT,
    CMR_MSG_CLASS_LOADED,
    CMR_MSG_BYTECODE_RESEND,
    CMR_MSG_REDEFINE,
    CMR_MSG_REDEFINE_RESULT,
    CMR_MSG_AGENT_STATUS,
    CMR_MSG_CONFIG_CHANGE,
    CMR_MSG_METHOD_ENTRY,
    CMR_MSG_EVENT_BATCH,
    CMR_MSG_METRIC_BATCH,
    CMR_MSG_SIGNED_COMMAND,
    CMR_MSG_THRESHOLD_EVENT,
    CMR_MSG_DIAGNOSIS,
    CMR_MSG_DIAGNOSIS_TREE,
    CMR_MSG_INGEST_WORKER,
    CMR_MSG_BUDGET_REMOVAL,
    CMR_MSG_CLASS_GRANTS,
    CMR_MSG__COUNT
} cmr_msg_type_t;

typedef enum cmr_sensor_kind {
    CMR_SENSOR_TIMER,
    CMR_SENSOR_INVOCATION_SEQUENCE,
    CMR_SENSOR_ANCHOR,
    CMR_SENSOR_CONDITIONAL, /* a diagnosis' discovered method: records only inside its anchor */
} cmr_sensor_kind_t;

typedef enum cmr_class_cause {
    CMR_CLASS_LOADED,
    CMR_CLASS_LOADED_BEFORE_REGISTRATION,
    CMR_CLASS_RESEND,
} cmr_class_cause_t;

typedef enum cmr_command_status {
    CMR_COMMAND_APPLIED,
    CMR_COMMAND_FAILED,
    CMR_COMMAND_UNKNOWN_CLASS,
    CMR_COMMAND_DIGEST_MISMATCH, /* no loaded class has the original bytes it was made from */
} cmr_command_status_t;

typedef enum cmr_trace_context_policy {
    CMR_TRACE_CONTEXT_AUTHENTICATED, /* join a trace only on a header with a valid MAC */
    CMR_TRACE_CONTEXT_ANY,           /* join on any header (behind a trusted gateway) */
    CMR_TRACE_CONTEXT_NONE,          /* never join: start a trace linked to the foreign parent */
} cmr_trace_context_policy_t;

typedef enum cmr_agent_state {
    CMR_AGENT_MINIMAL,
    CMR_AGENT_FULL,
    CMR_AGENT_DISCONNECTED,
    CMR_AGENT_RECONNECTED,
    CMR_AGENT_NO_ENVIRONMENT,
    CMR_AGENT_SHUTDOWN,
} cmr_agent_state_t;

typedef enum cmr_threshold_scope {
    CMR_THRESHOLD_TRANSACTION,
    CMR_THRESHOLD_METHOD,
} cmr_threshold_scope_t;

typedef enum cmr_threshold_statistic {
    CMR_STAT_P50,
    CMR_STAT_P90,
    CMR_STAT_P95,
    CMR_STAT_P99,
    CMR_STAT_P999,
    CMR_STAT_MAX,
    CMR_STAT_MEAN,
    CMR_STAT_ERROR_RATE,
    CMR_STAT_STALLED,
    CMR_STAT_COUNT,
} cmr_threshold_statistic_t;

typedef enum cmr_threshold_state {
    CMR_THRESHOLD_ABNORMAL,
    CMR_THRESHOLD_NORMAL,
} cmr_threshold_state_t;

typedef enum cmr_diag_condition_kind {
    CMR_DIAG_HTTP_METHOD,
    CMR_DIAG_HTTP_PATH,
    CMR_DIAG_HTTP_STATUS,
    CMR_DIAG_HTTP_HEADER,
    CMR_DIAG_HTTP_PARAMETER,
    CMR_DIAG_SQL,
    CMR_DIAG_ARGUMENT,
} cmr_diag_condition_kind_t;

typedef enum cmr_diag_probe {
    CMR_DIAG_PROBE_NONE,
    CMR_DIAG_PROBE_ENVIRONMENT,
    CMR_DIAG_PROBE_ANCHOR,
    CMR_DIAG_PROBE_CONDITIONAL,
} cmr_diag_probe_t;

typedef enum cmr_diag_state {
    CMR_DIAG_ACTIVE,
    CMR_DIAG_ENDED,
} cmr_diag_state_t;

typedef enum cmr_diag_end_reason {
    CMR_DIAG_END_NONE,
    CMR_DIAG_END_STOPPED,
    CMR_DIAG_END_TIME_TO_LIVE,
    CMR_DIAG_END_HITS,
    CMR_DIAG_END_BUDGET,
    CMR_DIAG_END_BACK_TO_NORMAL,
    CMR_DIAG_END_ENVIRONMENT_GONE,
} cmr_diag_end_reason_t;

typedef enum cmr_diag_cause {
    CMR_DIAG_CAUSE_USER,
    CMR_DIAG_CAUSE_THRESHOLD,
} cmr_diag_cause_t;

/* the same values as cmr_disc_via_t and cmr_disc_status_t (instr_discover.h) */
typedef enum cmr_diag_via {
    CMR_DIAG_VIA_ROOT,
    CMR_DIAG_VIA_STATIC,
    CMR_DIAG_VIA_SPECIAL,
    CMR_DIAG_VIA_VIRTUAL,
    CMR_DIAG_VIA_INTERFACE,
    CMR_DIAG_VIA_LAMBDA,
    CMR_DIAG_VIA_DYNAMIC,
} cmr_diag_via_t;

typedef enum cmr_diag_node_status {
    CMR_DIAG_NODE_FOUND,
    CMR_DIAG_NODE_NOT_LOADED,
    CMR_DIAG_NODE_JDK,
    CMR_DIAG_NODE_EXCLUDED,
    CMR_DIAG_NODE_NO_CODE,
    CMR_DIAG_NODE_REPEATED,
    CMR_DIAG_NODE_DEPTH,
    CMR_DIAG_NODE_TOO_MANY,
} cmr_diag_node_status_t;

typedef enum cmr_config_kind {
    CMR_CONFIG_ENVIRONMENT,
    CMR_CONFIG_ENVIRONMENT_DELETED,
    CMR_CONFIG_MAPPINGS,
} cmr_config_kind_t;

/* cmr.registrations */
typedef struct cmr_agent_registration {
    char *instance_id;
    char *agent_name;
    char *hostname;
    cmr_strings_t ip_addresses;
    int64_t pid;
    char *jvm_vendor;
    char *jvm_version;
    char *agent_version;
    int64_t start_time_ms;
    int32_t attempt;
} cmr_agent_registration_t;

typedef struct cmr_strategy {
    int32_t send_interval_ms;
    int32_t ring_records;
    int32_t max_batch_events;
    int32_t metric_interval_ms;
    int32_t max_threads;
    int32_t stall_threshold_ms; /* 0: no stalled-call reports */
    int32_t max_segment_events; /* 0: the agent's agent.segment.max.events */
} cmr_strategy_t;

typedef struct cmr_trace_context {
    cmr_trace_context_policy_t policy;
    cmr_bytes_t key; /* 32 bytes: MAC key of the cmr-parent header */
} cmr_trace_context_t;

typedef struct cmr_sensor_setting {
    cmr_sensor_kind_t kind;
    bool enabled;
    cmr_kvs_t properties;
} cmr_sensor_setting_t;

/* cmr.cmd.<instance id> */
typedef struct cmr_agent_configuration {
    char *instance_id;
    int64_t agent_id;
    char *environment_id;
    char *environment_name;
    int64_t revision;
    struct {
        cmr_sensor_setting_t *items;
        size_t count;
    } sensors;
    cmr_strategy_t strategy;
    cmr_trace_context_t trace_context;
    cmr_strings_t request_headers; /* lower-case names (Environment.request_headers) */
} cmr_agent_configuration_t;

/* cmr.cmd.<instance id> */
typedef struct cmr_no_environment {
    char *instance_id;
    char *agent_name;
    char *hostname;
    cmr_strings_t ip_addresses;
    char *reason;
    int64_t time_ms;
} cmr_no_environment_t;

/* cmr.classes */
typedef struct cmr_class_loaded {
    int64_t agent_id;
    char *instance_id;
    char *environment_id;
    int64_t revision;
    char *class_name;
    int64_t loader_id;
    char *loader_name; /* optional */
    int64_t class_hash;
    cmr_class_cause_t cause;
    int64_t request_id;
    cmr_bytes_t bytecode;
    cmr_bytes_t applied_digest; /* BLAKE2b-256 of instrumented bytes applied from the agent's cache; empty: none */
    int64_t agent_features;     /* CMR_AGENT_READS_* bits; 0: an agent from before them */
} cmr_class_loaded_t;

/* ClassLoaded.agent_features: the commands an agent reads beyond those every agent reads.
 * The instrumenter sends a command of such a type only to agents that say they read it;
 * agents from before a type refuse it as an unknown schema (docs/ARCHITECTURE.md, "Schema
 * versions"). */
#define CMR_AGENT_READS_CLASS_GRANTS 1 /* ClassGrants: classes granted ahead */

/* cmr.cmd.<instance id> */
typedef struct cmr_bytecode_resend {
    int64_t request_id;
    int64_t agent_id;
    char *class_name;
    int64_t loader_id;
    int64_t class_hash;
} cmr_bytecode_resend_t;

typedef struct cmr_instrumented_method {
    int64_t method_id;
    char *name;
    char *descriptor;
    cmr_sensor_kind_t sensor;
} cmr_instrumented_method_t;

/* cmr.cmd.<instance id> */
typedef struct cmr_redefine {
    int64_t request_id;
    int64_t agent_id;
    char *class_name;
    int64_t loader_id;
    int64_t class_hash;
    bool original;
    int64_t revision;
    cmr_bytes_t bytecode;
    cmr_bytes_t original_digest; /* BLAKE2b-256 of the original class bytes */
    struct {
        cmr_instrumented_method_t *items;
        size_t count;
    } methods;
    struct cmr_diagnosis_scope *diagnosis; /* optional: the bytes carry a diagnosis' probes */
    cmr_bytes_t grant;                     /* an encoded class grant (cmr/grant.h); empty: none */
} cmr_redefine_t;

/* One class of a ClassGrants: the instrumented bytes and the grant that lets the agent run
 * them in place of the original bytes with this digest. */
typedef struct cmr_granted_class {
    char *class_name;
    cmr_bytes_t original_digest; /* BLAKE2b-256 of the original class bytes */
    cmr_bytes_t grant;           /* an encoded class grant (cmr/grant.h) */
    cmr_bytes_t bytecode;        /* the instrumented class */
} cmr_granted_class_t;

/* cmr.cmd.<instance id>: classes of the agent's environment granted ahead of their load. */
typedef struct cmr_class_grants {
    int64_t agent_id;
    char *environment_id;
    int64_t revision;
    int32_t part, parts;
    struct {
        cmr_granted_class_t *items;
        size_t count;
    } classes;
} cmr_class_grants_t;

/* cmr.agent-events */
typedef struct cmr_redefine_result {
    int64_t agent_id;
    char *instance_id;
    int64_t request_id;
    char *class_name;
    int64_t loader_id;
    int64_t class_hash;
    cmr_command_status_t status;
    int32_t jvmti_error;
    char *message;
    int64_t time_ms;
} cmr_redefine_result_t;

typedef struct cmr_refusal_count {
    char *reason;
    int64_t count;
} cmr_refusal_count_t;

/* cmr.agent-events */
typedef struct cmr_agent_status {
    int64_t agent_id;
    char *instance_id;
    cmr_agent_state_t state;
    int64_t time_ms;
    int64_t events_recorded;
    int64_t events_dropped;
    int64_t batches_sent;
    int64_t classes_seen;
    int64_t classes_sent;
    int64_t messages_failed;
    int64_t commands_accepted;
    struct {
        cmr_refusal_count_t *items;
        size_t count;
    } commands_refused;
    char *environment_id; /* "" before the agent has one */
    int64_t environment_revision;
    int64_t classes_instrumented;
    int64_t redefine_failures;
    struct {
        struct cmr_diagnosis_run *items;
        size_t count;
    } diagnoses;
    int64_t traces_dropped; /* segments not recorded at all (their root found the ring full) */
} cmr_agent_status_t;

typedef struct cmr_sensor_assignment {
    cmr_sensor_kind_t sensor;
    char *class_pattern;
    char *superclass; /* optional */
    char *interface;  /* optional */
    char *annotation; /* optional */
    char *method_pattern;
    char *descriptor_pattern; /* optional */
    int32_t modifiers_required;
    int32_t modifiers_excluded;
    bool constructors;
    bool trivial; /* accessors and tiny leaf methods may match too (classfile.h, cf_method_trivial) */
} cmr_sensor_assignment_t;

/* A threshold rule of an environment (docs/METRICS.md). */
typedef struct cmr_threshold_rule {
    char *name;
    cmr_threshold_scope_t scope;
    char *pattern; /* glob on the display name */
    cmr_threshold_statistic_t statistic;
    double above;   /* ms for latencies, 0..1 for ERROR_RATE, calls for STALLED and COUNT */
    int64_t for_ms; /* window length, and how long it must hold */
    int64_t min_count;
    bool diagnose;
} cmr_threshold_rule_t;

typedef struct cmr_environment {
    char *id;
    char *name;
    char *description;
    struct {
        cmr_sensor_assignment_t *items;
        size_t count;
    } assignments;
    cmr_strategy_t strategy;
    cmr_trace_context_policy_t trace_context;
    struct {
        cmr_threshold_rule_t *items;
        size_t count;
    } thresholds;
    cmr_strings_t request_headers; /* lower-case names an entry trace keeps the values of */
    double overhead_budget_pct;    /* the overhead budget, % of a JVM's CPU; 0: the instrumenter's
                                    * instrumenter.budget.pct; < 0: off (CMR_BUDGET_OFF) */
} cmr_environment_t;

/* Environment.overhead_budget_pct of an environment whose budget is off ("0" in its YAML). */
#define CMR_BUDGET_OFF (-1.0)

/* Request headers an environment may name (cmr-config refuses more; an agent keeps the
 * first ones of a configuration that has more), each name at most 64 bytes. */
#define CMR_MAX_REQUEST_HEADERS 16
#define CMR_MAX_REQUEST_HEADER_NAME 64

typedef struct cmr_agent_mapping {
    char *agent_pattern;
    char *address;
    char *environment_id;
} cmr_agent_mapping_t;

/* cmr.config */
typedef struct cmr_config_change {
    cmr_config_kind_t kind;
    int64_t revision;
    int64_t time_ms;
    char *author;
    cmr_environment_t *environment; /* optional */
    struct {
        cmr_agent_mapping_t *items;
        size_t count;
    } mappings;
} cmr_config_change_t;

/* cmr.methods */
typedef struct cmr_method_entry {
    int64_t method_id;
    char *class_name;
    char *method_name;
    char *descriptor;
    int32_t access_flags;
    char *source_file; /* optional */
    int32_t first_line;
} cmr_method_entry_t;

typedef struct cmr_parent_link {
    int64_t agent_id;
    int64_t segment_id;
    int64_t event_seq;
} cmr_parent_link_t;

/* An attribute of one call of a segment (a JDBC statement's SQL, an outgoing request's URL):
 * event_seq names the call's ENTER event in its segment (it may be in an earlier batch of
 * the segment than the attribute). Keys are short names (CMR_NODE_ATTR_* in cmr/event.h). */
typedef struct cmr_node_attr {
    int64_t event_seq;
    char *key;
    char *value;
} cmr_node_attr_t;

typedef struct cmr_node_attrs {
    cmr_node_attr_t *items;
    size_t count;
} cmr_node_attrs_t;

/* One batch of one thread segment: what an EventBatch message carries per segment
 * (cmr/event.h, cmr_segs_reader / cmr_segs_writer), and what cmr-ingest applies and stores.
 * Not a message of its own since several segments travel in one (cmr_event_msg_t). */
typedef struct cmr_event_batch {
    int64_t agent_id;
    int64_t thread_id;
    char *thread_name;
    int64_t segment_id;
    uint8_t trace_id[16];
    cmr_parent_link_t *parent; /* optional */
    int32_t batch_seq;
    int64_t first_event_seq;
    bool last;
    int32_t dropped;
    int32_t event_count;
    cmr_bytes_t packed_events;   /* event_count events, compact encoding (cmr/event.h) */
    int64_t diagnosis_id;        /* 0: the segment ran in no diagnosis' context */
    cmr_kvs_t attributes;        /* transaction data captured since the previous batch */
    int64_t calls_not_recorded;  /* truncated: calls not recorded (with their callees) */
    int32_t truncated_by;        /* CMR_TRUNCATED_BY_* bits */
    cmr_node_attrs_t node_attrs; /* attributes of calls, captured since the previous batch */
} cmr_event_batch_t;

/* cmr.events (schema EventBatch): segment_count segment batches of agent_id's, all of one
 * partition, event_count events in all, in the compact layout of cmr/event.h. */
typedef struct cmr_event_msg {
    int64_t agent_id;
    int32_t segment_count;
    int32_t event_count;
    cmr_bytes_t segments;
    int32_t event_layout; /* CMR_EVENTS_LAYOUT_* of the segments' events (cmr/event.h);
                             0 in the messages of agents from before it */
    /* not on the wire: the message's key (the first segment's trace id) when sending; a
     * decoded message has it zero */
    uint8_t key_trace_id[16];
} cmr_event_msg_t;

enum {
    CMR_TRUNCATED_BY_LIMIT = 1, /* the segment reached max_segment_events */
    CMR_TRUNCATED_BY_RING = 2,  /* the thread's ring was full */
};

typedef struct cmr_method_metric {
    int64_t method_id;
    int64_t count;
    int64_t exceptions;
    int64_t sum_ns;
    int64_t min_ns;
    int64_t max_ns;
    cmr_bytes_t histogram; /* cmr_hist_encode() of the latencies (ns); the source of percentiles */
    int64_t max_in_flight;
    cmr_bytes_t slowest_trace; /* 16 bytes, or empty */
    int64_t self_ns;           /* time outside recorded callees (sum); timer samples: whole */
} cmr_method_metric_t;

typedef struct cmr_transaction_metric {
    int64_t root_method_id;
    char *name; /* "" : the root method names it */
    int64_t count;
    int64_t exceptions;
    int64_t sum_ns;
    int64_t min_ns;
    int64_t max_ns;
    cmr_bytes_t histogram;
    int64_t max_in_flight;
    cmr_bytes_t slowest_trace;
} cmr_transaction_metric_t;

typedef struct cmr_stalled_call {
    int64_t thread_id;
    char *thread_name;
    cmr_bytes_t trace_id; /* 16 bytes, or empty */
    int64_t method_id;
    int64_t started_ms;
    int64_t running_ms;
    cmr_bytes_t stack; /* 8-byte big-endian method ids, root first */
} cmr_stalled_call_t;

/* cmr.metrics (key: environment id) */
typedef struct cmr_metric_batch {
    int64_t agent_id;
    int64_t interval_start_ms;
    int32_t interval_ms;
    struct {
        cmr_method_metric_t *items;
        size_t count;
    } metrics;
    char *environment_id;
    struct {
        cmr_transaction_metric_t *items;
        size_t count;
    } transactions;
    struct {
        cmr_stalled_call_t *items;
        size_t count;
    } stalled;
    int64_t samples_dropped;
    int64_t cpu_ns;        /* the process's CPU time since the previous batch (0: unknown) */
    int64_t calls_dropped; /* calls of the interval the probes ran but the agent did not record */
    int64_t probe_ps;      /* one recorded call's probes, as this JVM measured them (0: not measured) */
    int64_t agent_cpu_ns;  /* the agent's publisher thread's CPU time since the previous batch */
} cmr_metric_batch_t;

typedef struct cmr_diag_condition {
    cmr_diag_condition_kind_t kind;
    char *name;
    char *pattern;
} cmr_diag_condition_t;

/* Redefine.diagnosis: the diagnosis whose probes the bytes carry, and what to restore. */
typedef struct cmr_diagnosis_scope {
    int64_t id; /* the diagnosis id's 16 hex digits as a number */
    int64_t revision;
    int64_t end_ms; /* wall clock */
    int64_t max_hits;
    double overhead_budget_pct;
    struct {
        cmr_diag_condition_t *items;
        size_t count;
    } conditions;
    cmr_bytes_t restore_bytecode;
    bool restore_original;
} cmr_diagnosis_scope_t;

/* AgentStatus.diagnoses: one diagnosis in one JVM. */
typedef struct cmr_diagnosis_run {
    int64_t id;
    cmr_diag_state_t state;
    cmr_diag_end_reason_t end_reason; /* NONE: ended by the CMR (its revision says why) */
    int64_t hits;
    int64_t events;
    int32_t classes;
    double overhead_pct;
    int64_t started_ms;
    int64_t ended_ms;
} cmr_diagnosis_run_t;

/* cmr.diagnoses (key: diagnosis id; every revision kept) */
typedef struct cmr_diagnosis {
    char *id;
    int64_t revision;
    char *environment_id;
    cmr_bytes_t agents; /* 8-byte big-endian agent ids; empty: all of the environment */
    int64_t method_id;
    char *class_name;
    char *method_name;
    char *descriptor;
    int32_t depth;
    bool include_jdk;
    cmr_strings_t exclude;
    struct {
        cmr_diag_condition_t *items;
        size_t count;
    } conditions;
    int64_t ttl_ms;
    int64_t max_hits;
    double overhead_budget_pct;
    int64_t end_after_normal_ms;
    cmr_diag_state_t state;
    cmr_diag_end_reason_t end_reason;
    cmr_diag_cause_t cause;
    char *rule;
    char *trace_id;
    char *author;
    int64_t started_ms;
    int64_t ended_ms;
    int64_t time_ms;
} cmr_diagnosis_t;

typedef struct cmr_diag_node {
    int64_t method_id;
    char *class_name;
    char *method_name;
    char *descriptor;
    int32_t parent; /* -1 for a root */
    int32_t depth;
    cmr_diag_via_t via;
    cmr_diag_node_status_t status;
    int32_t call_sites;
    cmr_diag_probe_t probe;
    char *note; /* '' unless a found method gets no probe */
} cmr_diag_node_t;

/* cmr.diagnosis-trees (key: "<diagnosis id>/<agent id hex>") */
typedef struct cmr_diagnosis_tree {
    char *diagnosis_id;
    int64_t revision;
    int64_t agent_id;
    char *environment_id;
    int64_t time_ms;
    int32_t classes_read;
    bool truncated;
    char *error; /* '' when the discovery ran */
    struct {
        cmr_diag_node_t *items;
        size_t count;
    } nodes;
} cmr_diagnosis_tree_t;

/* cmr.ingest-workers (compacted; key: worker id): a cmr-ingest worker's HTTP API and the
 * cmr.events partitions it owns, for the queries' fan-out (docs/INGEST.md). */
typedef struct cmr_owned_partition {
    int32_t partition;
    int64_t applied_offset; /* the last offset its store applied, -1 when none */
} cmr_owned_partition_t;

typedef struct cmr_ingest_worker {
    char *worker_id;
    char *url; /* base URL of its HTTP API, "http://host:port" */
    int64_t started_ms;
    int64_t time_ms;
    int32_t partition_count; /* of cmr.events, as the worker sees it */
    struct {
        cmr_owned_partition_t *items;
        size_t count;
    } partitions;
    bool leaving;                    /* the worker stops: it owns nothing any more */
    int32_t metrics_partition_count; /* of cmr.metrics, as the worker sees it (0: unknown) */
    struct {
        cmr_owned_partition_t *items;
        size_t count;
    } metrics_partitions; /* the cmr.metrics partitions it owns and has restored */
} cmr_ingest_worker_t;

/* cmr.budget (compacted; key: environment id/method id in hex): a method the overhead
 * budget took the probes of in one revision of an environment (docs/ARCHITECTURE.md, "The
 * overhead budget"). */
typedef struct cmr_budget_removal_msg {
    char *environment_id;
    int64_t revision; /* of the environment: a newer one starts without removals */
    int64_t method_id;
    int64_t agent_id; /* the JVM whose measurements decided it */
    int64_t time_ms;
    int64_t calls; /* over the judged window, scaled by the JVM's dropped calls */
    double self_ns_per_call;
    double cost_pct; /* its probes, in % of the JVM's CPU time */
    char *reason;
} cmr_budget_removal_msg_t;

/* cmr.alerts (key: environment id) */
typedef struct cmr_threshold_event {
    char *environment_id;
    char *rule;
    cmr_threshold_state_t state;
    cmr_threshold_scope_t scope;
    int64_t subject_id;
    char *subject_name;
    cmr_threshold_statistic_t statistic;
    double value;
    double threshold;
    int64_t window_start_ms;
    int64_t window_end_ms;
    int64_t count;
    cmr_strings_t example_traces; /* 32 hex digits each */
    bool diagnose;
    int64_t time_ms;
} cmr_threshold_event_t;

/* cmr.cmd.<instance id>: the envelope of every command (cmr/trust.h, docs/SECURITY.md). */
typedef struct cmr_signed_command {
    char *target_instance;
    uint8_t command_id[16];
    int64_t issued_ms;
    int64_t not_after_ms;
    char *key_id;
    cmr_bytes_t signature;
    cmr_bytes_t payload; /* one command, single-object encoded */
} cmr_signed_command_t;

/* A decoded message of any type: what consumers hand out. */
typedef struct cmr_msg {
    cmr_msg_type_t type;
    union {
        cmr_agent_registration_t registration;
        cmr_agent_configuration_t agent_configuration;
        cmr_no_environment_t no_environment;
        cmr_class_loaded_t class_loaded;
        cmr_bytecode_resend_t bytecode_resend;
        cmr_redefine_t redefine;
        cmr_redefine_result_t redefine_result;
        cmr_agent_status_t agent_status;
        cmr_config_change_t config_change;
        cmr_method_entry_t method_entry;
        cmr_event_msg_t event_batch;
        cmr_metric_batch_t metric_batch;
        cmr_signed_command_t signed_command;
        cmr_threshold_event_t threshold_event;
        cmr_diagnosis_t diagnosis;
        cmr_diagnosis_tree_t diagnosis_tree;
        cmr_ingest_worker_t ingest_worker;
        cmr_budget_removal_msg_t budget_removal;
        cmr_class_grants_t class_grants;
    } u;
} cmr_msg_t;

/* Names of threshold statistics and scopes as people type them ("p99", "error_rate",
 * "p99.9" too; case-insensitive), stat_names.c. cmr_stat_parse: the statistic, or -1.
 * cmr_stat_quantile: 0.5 .. 1 for the percentiles and MAX, -1 for the others. */
const char *cmr_stat_name(cmr_threshold_statistic_t s);
int cmr_stat_parse(const char *name);
double cmr_stat_quantile(cmr_threshold_statistic_t s);
bool cmr_stat_is_latency(cmr_threshold_statistic_t s); /* P50 .. MEAN: values in ns (ms in rules) */
const char *cmr_threshold_scope_name(cmr_threshold_scope_t s);

#endif /* CMR_MSG_H */
