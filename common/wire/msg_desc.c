/*
 * msg_desc.c - the field table of every message struct (see msg_desc.h).
 *
 * To add a field: add it to the .avsc file (with a default, for readers of older data),
 * to the struct in msg.h and to the table here, in the same position. The schema check
 * at start-up and the round-trip tests catch a missed step.
 */
#include "msg_desc.h"

#include <assert.h>

#define FIELD(st, f, t)                            \
    {                                              \
#f, CMR_F_##t, offsetof(st, f), NULL, NULL \
    }
#define SUB(st, f, t, d)                         \
    {                                            \
#f, CMR_F_##t, offsetof(st, f), &d, NULL \
    }
#define ENUM(st, f, syms)                           \
    {                                               \
#f, CMR_F_ENUM, offsetof(st, f), NULL, syms \
    }
#define TABLE(n) (sizeof(n) / sizeof((n)[0]))

static_assert(sizeof(cmr_sensor_kind_t) == sizeof(int), "enums are stored as int");
static_assert(offsetof(cmr_strings_t, count) == offsetof(cmr_array_any_t, count), "array layout");
static_assert(offsetof(cmr_kvs_t, count) == offsetof(cmr_array_any_t, count), "array layout");

/* --- enums: symbol names in the order of the C enums of msg.h ----------------------- */

static const char *const sensor_kinds[] = {"TIMER", "INVOCATION_SEQUENCE", "ANCHOR", "CONDITIONAL", NULL};
static const char *const class_causes[] = {"LOADED", "LOADED_BEFORE_REGISTRATION", "RESEND", NULL};
static const char *const command_statuses[] = {"APPLIED", "FAILED", "UNKNOWN_CLASS", "DIGEST_MISMATCH", NULL};
static const char *const trace_context_policies[] = {"AUTHENTICATED", "ANY", "NONE", NULL};
static const char *const agent_states[] = {"MINIMAL",  "FULL", "DISCONNECTED", "RECONNECTED", "NO_ENVIRONMENT",
                                           "SHUTDOWN", NULL};
static const char *const config_kinds[] = {"ENVIRONMENT", "ENVIRONMENT_DELETED", "MAPPINGS", NULL};
static const char *const threshold_scopes[] = {"TRANSACTION", "METHOD", NULL};
static const char *const threshold_statistics[] = {"P50",  "P90",        "P95",     "P99",   "P999", "MAX",
                                                   "MEAN", "ERROR_RATE", "STALLED", "COUNT", NULL};
static const char *const threshold_states[] = {"ABNORMAL", "NORMAL", NULL};
static const char *const diag_condition_kinds[] = {"HTTP_METHOD",    "HTTP_PATH", "HTTP_STATUS", "HTTP_HEADER",
                                                   "HTTP_PARAMETER", "SQL",       "ARGUMENT",    NULL};
static const char *const diag_states[] = {"ACTIVE", "ENDED", NULL};
static const char *const diag_end_reasons[] = {"NONE",   "STOPPED",        "TIME_TO_LIVE",     "HITS",
                                               "BUDGET", "BACK_TO_NORMAL", "ENVIRONMENT_GONE", NULL};
static const char *const diag_causes[] = {"USER", "THRESHOLD", NULL};
static const char *const diag_vias[] = {"ROOT", "STATIC", "SPECIAL", "VIRTUAL", "INTERFACE", "LAMBDA", "DYNAMIC", NULL};
static const char *const diag_probes[] = {"NONE", "ENVIRONMENT", "ANCHOR", "CONDITIONAL", NULL};
static const char *const diag_node_statuses[] = {"FOUND",    "NOT_LOADED", "JDK",      "EXCLUDED", "NO_CODE",
                                                 "REPEATED", "DEPTH",      "TOO_MANY", NULL};

/* --- shared records --------------------------------------------------------------- */

static const cmr_field_desc_t strategy_fields[] = {
    FIELD(cmr_strategy_t, send_interval_ms, INT),   FIELD(cmr_strategy_t, ring_records, INT),
    FIELD(cmr_strategy_t, max_batch_events, INT),   FIELD(cmr_strategy_t, metric_interval_ms, INT),
    FIELD(cmr_strategy_t, max_threads, INT),        FIELD(cmr_strategy_t, stall_threshold_ms, INT),
    FIELD(cmr_strategy_t, max_segment_events, INT),
};
static const cmr_record_desc_t strategy_desc = {"StrategySettings", sizeof(cmr_strategy_t), strategy_fields,
                                                TABLE(strategy_fields)};

static const cmr_field_desc_t trace_context_fields[] = {
    ENUM(cmr_trace_context_t, policy, trace_context_policies),
    FIELD(cmr_trace_context_t, key, BYTES),
};
static const cmr_record_desc_t trace_context_desc = {"TraceContextSettings", sizeof(cmr_trace_context_t),
                                                     trace_context_fields, TABLE(trace_context_fields)};

/* --- AgentRegistration ------------------------------------------------------------- */

static const cmr_field_desc_t registration_fields[] = {
    FIELD(cmr_agent_registration_t, instance_id, STRING), FIELD(cmr_agent_registration_t, agent_name, STRING),
    FIELD(cmr_agent_registration_t, hostname, STRING),    FIELD(cmr_agent_registration_t, ip_addresses, STRINGS),
    FIELD(cmr_agent_registration_t, pid, LONG),           FIELD(cmr_agent_registration_t, jvm_vendor, STRING),
    FIELD(cmr_agent_registration_t, jvm_version, STRING), FIELD(cmr_agent_registration_t, agent_version, STRING),
    FIELD(cmr_agent_registration_t, start_time_ms, LONG), FIELD(cmr_agent_registration_t, attempt, INT),
};
static const cmr_record_desc_t registration_desc = {"AgentRegistration", sizeof(cmr_agent_registration_t),
                                                    registration_fields, TABLE(registration_fields)};

/* --- AgentConfiguration ------------------------------------------------------------ */

static const cmr_field_desc_t sensor_setting_fields[] = {
    ENUM(cmr_sensor_setting_t, kind, sensor_kinds),
    FIELD(cmr_sensor_setting_t, enabled, BOOL),
    FIELD(cmr_sensor_setting_t, properties, MAP),
};
static const cmr_record_desc_t sensor_setting_desc = {"SensorSetting", sizeof(cmr_sensor_setting_t),
                                                      sensor_setting_fields, TABLE(sensor_setting_fields)};

static const cmr_field_desc_t agent_configuration_fields[] = {
    FIELD(cmr_agent_configuration_t, instance_id, STRING),
    FIELD(cmr_agent_configuration_t, agent_id, LONG),
    FIELD(cmr_agent_configuration_t, environment_id, STRING),
    FIELD(cmr_agent_configuration_t, environment_name, STRING),
    FIELD(cmr_agent_configuration_t, revision, LONG),
    SUB(cmr_agent_configuration_t, sensors, RECORDS, sensor_setting_desc),
    SUB(cmr_agent_configuration_t, strategy, RECORD, strategy_desc),
    SUB(cmr_agent_configuration_t, trace_context, RECORD, trace_context_desc),
    FIELD(cmr_agent_configuration_t, request_headers, STRINGS),
};
static const cmr_record_desc_t agent_configuration_desc = {"AgentConfiguration", sizeof(cmr_agent_configuration_t),
                                                           agent_configuration_fields,
                                                           TABLE(agent_configuration_fields)};

/* --- NoEnvironment ----------------------------------------------------------------- */

static const cmr_field_desc_t no_environment_fields[] = {
    FIELD(cmr_no_environment_t, instance_id, STRING), FIELD(cmr_no_environment_t, agent_name, STRING),
    FIELD(cmr_no_environment_t, hostname, STRING),    FIELD(cmr_no_environment_t, ip_addresses, STRINGS),
    FIELD(cmr_no_environment_t, reason, STRING),      FIELD(cmr_no_environment_t, time_ms, LONG),
};
static const cmr_record_desc_t no_environment_desc = {"NoEnvironment", sizeof(cmr_no_environment_t),
                                                      no_environment_fields, TABLE(no_environment_fields)};

/* --- ClassLoaded ------------------------------------------------------------------- */

static const cmr_field_desc_t class_loaded_fields[] = {
    FIELD(cmr_class_loaded_t, agent_id, LONG),          FIELD(cmr_class_loaded_t, instance_id, STRING),
    FIELD(cmr_class_loaded_t, environment_id, STRING),  FIELD(cmr_class_loaded_t, revision, LONG),
    FIELD(cmr_class_loaded_t, class_name, STRING),      FIELD(cmr_class_loaded_t, loader_id, LONG),
    FIELD(cmr_class_loaded_t, loader_name, OPT_STRING), FIELD(cmr_class_loaded_t, class_hash, LONG),
    ENUM(cmr_class_loaded_t, cause, class_causes),      FIELD(cmr_class_loaded_t, request_id, LONG),
    FIELD(cmr_class_loaded_t, bytecode, BYTES),         FIELD(cmr_class_loaded_t, applied_digest, BYTES),
    FIELD(cmr_class_loaded_t, agent_features, LONG),
};
static const cmr_record_desc_t class_loaded_desc = {"ClassLoaded", sizeof(cmr_class_loaded_t), class_loaded_fields,
                                                    TABLE(class_loaded_fields)};

/* --- BytecodeResend ---------------------------------------------------------------- */

static const cmr_field_desc_t bytecode_resend_fields[] = {
    FIELD(cmr_bytecode_resend_t, request_id, LONG),   FIELD(cmr_bytecode_resend_t, agent_id, LONG),
    FIELD(cmr_bytecode_resend_t, class_name, STRING), FIELD(cmr_bytecode_resend_t, loader_id, LONG),
    FIELD(cmr_bytecode_resend_t, class_hash, LONG),
};
static const cmr_record_desc_t bytecode_resend_desc = {"BytecodeResend", sizeof(cmr_bytecode_resend_t),
                                                       bytecode_resend_fields, TABLE(bytecode_resend_fields)};

/* --- Redefine ---------------------------------------------------------------------- */

static const cmr_field_desc_t instrumented_method_fields[] = {
    FIELD(cmr_instrumented_method_t, method_id, LONG),
    FIELD(cmr_instrumented_method_t, name, STRING),
    FIELD(cmr_instrumented_method_t, descriptor, STRING),
    ENUM(cmr_instrumented_method_t, sensor, sensor_kinds),
};
static const cmr_record_desc_t instrumented_method_desc = {"InstrumentedMethod", sizeof(cmr_instrumented_method_t),
                                                           instrumented_method_fields,
                                                           TABLE(instrumented_method_fields)};

static const cmr_field_desc_t diag_condition_fields[] = {
    ENUM(cmr_diag_condition_t, kind, diag_condition_kinds),
    FIELD(cmr_diag_condition_t, name, STRING),
    FIELD(cmr_diag_condition_t, pattern, STRING),
};
static const cmr_record_desc_t diag_condition_desc = {"DiagnosisCondition", sizeof(cmr_diag_condition_t),
                                                      diag_condition_fields, TABLE(diag_condition_fields)};

static const cmr_field_desc_t diagnosis_scope_fields[] = {
    FIELD(cmr_diagnosis_scope_t, id, LONG),
    FIELD(cmr_diagnosis_scope_t, revision, LONG),
    FIELD(cmr_diagnosis_scope_t, end_ms, LONG),
    FIELD(cmr_diagnosis_scope_t, max_hits, LONG),
    FIELD(cmr_diagnosis_scope_t, overhead_budget_pct, DOUBLE),
    SUB(cmr_diagnosis_scope_t, conditions, RECORDS, diag_condition_desc),
    FIELD(cmr_diagnosis_scope_t, restore_bytecode, BYTES),
    FIELD(cmr_diagnosis_scope_t, restore_original, BOOL),
};
static const cmr_record_desc_t diagnosis_scope_desc = {"DiagnosisScope", sizeof(cmr_diagnosis_scope_t),
                                                       diagnosis_scope_fields, TABLE(diagnosis_scope_fields)};

static const cmr_field_desc_t redefine_fields[] = {
    FIELD(cmr_redefine_t, request_id, LONG),
    FIELD(cmr_redefine_t, agent_id, LONG),
    FIELD(cmr_redefine_t, class_name, STRING),
    FIELD(cmr_redefine_t, loader_id, LONG),
    FIELD(cmr_redefine_t, class_hash, LONG),
    FIELD(cmr_redefine_t, original, BOOL),
    FIELD(cmr_redefine_t, revision, LONG),
    FIELD(cmr_redefine_t, bytecode, BYTES),
    FIELD(cmr_redefine_t, original_digest, BYTES),
    SUB(cmr_redefine_t, methods, RECORDS, instrumented_method_desc),
    SUB(cmr_redefine_t, diagnosis, OPT_RECORD, diagnosis_scope_desc),
    FIELD(cmr_redefine_t, grant, BYTES),
};
static const cmr_record_desc_t redefine_desc = {"Redefine", sizeof(cmr_redefine_t), redefine_fields,
                                                TABLE(redefine_fields)};

/* --- RedefineResult ---------------------------------------------------------------- */

static const cmr_field_desc_t redefine_result_fields[] = {
    FIELD(cmr_redefine_result_t, agent_id, LONG),          FIELD(cmr_redefine_result_t, instance_id, STRING),
    FIELD(cmr_redefine_result_t, request_id, LONG),        FIELD(cmr_redefine_result_t, class_name, STRING),
    FIELD(cmr_redefine_result_t, loader_id, LONG),         FIELD(cmr_redefine_result_t, class_hash, LONG),
    ENUM(cmr_redefine_result_t, status, command_statuses), FIELD(cmr_redefine_result_t, jvmti_error, INT),
    FIELD(cmr_redefine_result_t, message, STRING),         FIELD(cmr_redefine_result_t, time_ms, LONG),
};
static const cmr_record_desc_t redefine_result_desc = {"RedefineResult", sizeof(cmr_redefine_result_t),
                                                       redefine_result_fields, TABLE(redefine_result_fields)};

/* --- AgentStatus ------------------------------------------------------------------- */

static const cmr_field_desc_t refusal_count_fields[] = {
    FIELD(cmr_refusal_count_t, reason, STRING),
    FIELD(cmr_refusal_count_t, count, LONG),
};
static const cmr_record_desc_t refusal_count_desc = {"RefusalCount", sizeof(cmr_refusal_count_t), refusal_count_fields,
                                                     TABLE(refusal_count_fields)};

static const cmr_field_desc_t diagnosis_run_fields[] = {
    FIELD(cmr_diagnosis_run_t, id, LONG),
    ENUM(cmr_diagnosis_run_t, state, diag_states),
    ENUM(cmr_diagnosis_run_t, end_reason, diag_end_reasons),
    FIELD(cmr_diagnosis_run_t, hits, LONG),
    FIELD(cmr_diagnosis_run_t, events, LONG),
    FIELD(cmr_diagnosis_run_t, classes, INT),
    FIELD(cmr_diagnosis_run_t, overhead_pct, DOUBLE),
    FIELD(cmr_diagnosis_run_t, started_ms, LONG),
    FIELD(cmr_diagnosis_run_t, ended_ms, LONG),
};
static const cmr_record_desc_t diagnosis_run_desc = {"DiagnosisRun", sizeof(cmr_diagnosis_run_t), diagnosis_run_fields,
                                                     TABLE(diagnosis_run_fields)};

static const cmr_field_desc_t agent_status_fields[] = {
    FIELD(cmr_agent_status_t, agent_id, LONG),
    FIELD(cmr_agent_status_t, instance_id, STRING),
    ENUM(cmr_agent_status_t, state, agent_states),
    FIELD(cmr_agent_status_t, time_ms, LONG),
    FIELD(cmr_agent_status_t, events_recorded, LONG),
    FIELD(cmr_agent_status_t, events_dropped, LONG),
    FIELD(cmr_agent_status_t, batches_sent, LONG),
    FIELD(cmr_agent_status_t, classes_seen, LONG),
    FIELD(cmr_agent_status_t, classes_sent, LONG),
    FIELD(cmr_agent_status_t, messages_failed, LONG),
    FIELD(cmr_agent_status_t, commands_accepted, LONG),
    SUB(cmr_agent_status_t, commands_refused, RECORDS, refusal_count_desc),
    FIELD(cmr_agent_status_t, environment_id, STRING),
    FIELD(cmr_agent_status_t, environment_revision, LONG),
    FIELD(cmr_agent_status_t, classes_instrumented, LONG),
    FIELD(cmr_agent_status_t, redefine_failures, LONG),
    SUB(cmr_agent_status_t, diagnoses, RECORDS, diagnosis_run_desc),
    FIELD(cmr_agent_status_t, traces_dropped, LONG),
};
static const cmr_record_desc_t agent_status_desc = {"AgentStatus", sizeof(cmr_agent_status_t), agent_status_fields,
                                                    TABLE(agent_status_fields)};

/* --- ConfigChange ------------------------------------------------------------------ */

static const cmr_field_desc_t sensor_assignment_fields[] = {
    ENUM(cmr_sensor_assignment_t, sensor, sensor_kinds),
    FIELD(cmr_sensor_assignment_t, class_pattern, STRING),
    FIELD(cmr_sensor_assignment_t, superclass, OPT_STRING),
    FIELD(cmr_sensor_assignment_t, interface, OPT_STRING),
    FIELD(cmr_sensor_assignment_t, annotation, OPT_STRING),
    FIELD(cmr_sensor_assignment_t, method_pattern, STRING),
    FIELD(cmr_sensor_assignment_t, descriptor_pattern, OPT_STRING),
    FIELD(cmr_sensor_assignment_t, modifiers_required, INT),
    FIELD(cmr_sensor_assignment_t, modifiers_excluded, INT),
    FIELD(cmr_sensor_assignment_t, constructors, BOOL),
    FIELD(cmr_sensor_assignment_t, trivial, BOOL),
};
static const cmr_record_desc_t sensor_assignment_desc = {"SensorAssignment", sizeof(cmr_sensor_assignment_t),
                                                         sensor_assignment_fields, TABLE(sensor_assignment_fields)};

static const cmr_field_desc_t threshold_rule_fields[] = {
    FIELD(cmr_threshold_rule_t, name, STRING),    ENUM(cmr_threshold_rule_t, scope, threshold_scopes),
    FIELD(cmr_threshold_rule_t, pattern, STRING), ENUM(cmr_threshold_rule_t, statistic, threshold_statistics),
    FIELD(cmr_threshold_rule_t, above, DOUBLE),   FIELD(cmr_threshold_rule_t, for_ms, LONG),
    FIELD(cmr_threshold_rule_t, min_count, LONG), FIELD(cmr_threshold_rule_t, diagnose, BOOL),
};
static const cmr_record_desc_t threshold_rule_desc = {"ThresholdRule", sizeof(cmr_threshold_rule_t),
                                                      threshold_rule_fields, TABLE(threshold_rule_fields)};

static const cmr_field_desc_t environment_fields[] = {
    FIELD(cmr_environment_t, id, STRING),
    FIELD(cmr_environment_t, name, STRING),
    FIELD(cmr_environment_t, description, STRING),
    SUB(cmr_environment_t, assignments, RECORDS, sensor_assignment_desc),
    SUB(cmr_environment_t, strategy, RECORD, strategy_desc),
    ENUM(cmr_environment_t, trace_context, trace_context_policies),
    SUB(cmr_environment_t, thresholds, RECORDS, threshold_rule_desc),
    FIELD(cmr_environment_t, request_headers, STRINGS),
    FIELD(cmr_environment_t, overhead_budget_pct, DOUBLE),
};
static const cmr_record_desc_t environment_desc = {"Environment", sizeof(cmr_environment_t), environment_fields,
                                                   TABLE(environment_fields)};

static const cmr_field_desc_t agent_mapping_fields[] = {
    FIELD(cmr_agent_mapping_t, agent_pattern, STRING),
    FIELD(cmr_agent_mapping_t, address, STRING),
    FIELD(cmr_agent_mapping_t, environment_id, STRING),
};
static const cmr_record_desc_t agent_mapping_desc = {"AgentMapping", sizeof(cmr_agent_mapping_t), agent_mapping_fields,
                                                     TABLE(agent_mapping_fields)};

static const cmr_field_desc_t config_change_fields[] = {
    ENUM(cmr_config_change_t, kind, config_kinds),
    FIELD(cmr_config_change_t, revision, LONG),
    FIELD(cmr_config_change_t, time_ms, LONG),
    FIELD(cmr_config_change_t, author, STRING),
    SUB(cmr_config_change_t, environment, OPT_RECORD, environment_desc),
    SUB(cmr_config_change_t, mappings, RECORDS, agent_mapping_desc),
};
static const cmr_record_desc_t config_change_desc = {"ConfigChange", sizeof(cmr_config_change_t), config_change_fields,
                                                     TABLE(config_change_fields)};

/* --- MethodEntry ------------------------------------------------------------------- */

static const cmr_field_desc_t method_entry_fields[] = {
    FIELD(cmr_method_entry_t, method_id, LONG),     FIELD(cmr_method_entry_t, class_name, STRING),
    FIELD(cmr_method_entry_t, method_name, STRING), FIELD(cmr_method_entry_t, descriptor, STRING),
    FIELD(cmr_method_entry_t, access_flags, INT),   FIELD(cmr_method_entry_t, source_file, OPT_STRING),
    FIELD(cmr_method_entry_t, first_line, INT),
};
static const cmr_record_desc_t method_entry_desc = {"MethodEntry", sizeof(cmr_method_entry_t), method_entry_fields,
                                                    TABLE(method_entry_fields)};

/* --- EventBatch -------------------------------------------------------------------- */

static const cmr_field_desc_t event_batch_fields[] = {
    FIELD(cmr_event_msg_t, agent_id, LONG),    FIELD(cmr_event_msg_t, segment_count, INT),
    FIELD(cmr_event_msg_t, event_count, INT),  FIELD(cmr_event_msg_t, segments, BYTES),
    FIELD(cmr_event_msg_t, event_layout, INT),
};
static const cmr_record_desc_t event_batch_desc = {"EventBatch", sizeof(cmr_event_msg_t), event_batch_fields,
                                                   TABLE(event_batch_fields)};

/* --- MetricBatch ------------------------------------------------------------------- */

static const cmr_field_desc_t method_metric_fields[] = {
    FIELD(cmr_method_metric_t, method_id, LONG),      FIELD(cmr_method_metric_t, count, LONG),
    FIELD(cmr_method_metric_t, exceptions, LONG),     FIELD(cmr_method_metric_t, sum_ns, LONG),
    FIELD(cmr_method_metric_t, min_ns, LONG),         FIELD(cmr_method_metric_t, max_ns, LONG),
    FIELD(cmr_method_metric_t, histogram, BYTES),     FIELD(cmr_method_metric_t, max_in_flight, LONG),
    FIELD(cmr_method_metric_t, slowest_trace, BYTES), FIELD(cmr_method_metric_t, self_ns, LONG),
};
static const cmr_record_desc_t method_metric_desc = {"MethodMetric", sizeof(cmr_method_metric_t), method_metric_fields,
                                                     TABLE(method_metric_fields)};

static const cmr_field_desc_t transaction_metric_fields[] = {
    FIELD(cmr_transaction_metric_t, root_method_id, LONG), FIELD(cmr_transaction_metric_t, name, STRING),
    FIELD(cmr_transaction_metric_t, count, LONG),          FIELD(cmr_transaction_metric_t, exceptions, LONG),
    FIELD(cmr_transaction_metric_t, sum_ns, LONG),         FIELD(cmr_transaction_metric_t, min_ns, LONG),
    FIELD(cmr_transaction_metric_t, max_ns, LONG),         FIELD(cmr_transaction_metric_t, histogram, BYTES),
    FIELD(cmr_transaction_metric_t, max_in_flight, LONG),  FIELD(cmr_transaction_metric_t, slowest_trace, BYTES),
};
static const cmr_record_desc_t transaction_metric_desc = {"TransactionMetric", sizeof(cmr_transaction_metric_t),
                                                          transaction_metric_fields, TABLE(transaction_metric_fields)};

static const cmr_field_desc_t stalled_call_fields[] = {
    FIELD(cmr_stalled_call_t, thread_id, LONG),  FIELD(cmr_stalled_call_t, thread_name, STRING),
    FIELD(cmr_stalled_call_t, trace_id, BYTES),  FIELD(cmr_stalled_call_t, method_id, LONG),
    FIELD(cmr_stalled_call_t, started_ms, LONG), FIELD(cmr_stalled_call_t, running_ms, LONG),
    FIELD(cmr_stalled_call_t, stack, BYTES),
};
static const cmr_record_desc_t stalled_call_desc = {"StalledCall", sizeof(cmr_stalled_call_t), stalled_call_fields,
                                                    TABLE(stalled_call_fields)};

static const cmr_field_desc_t metric_batch_fields[] = {
    FIELD(cmr_metric_batch_t, agent_id, LONG),
    FIELD(cmr_metric_batch_t, interval_start_ms, LONG),
    FIELD(cmr_metric_batch_t, interval_ms, INT),
    SUB(cmr_metric_batch_t, metrics, RECORDS, method_metric_desc),
    FIELD(cmr_metric_batch_t, environment_id, STRING),
    SUB(cmr_metric_batch_t, transactions, RECORDS, transaction_metric_desc),
    SUB(cmr_metric_batch_t, stalled, RECORDS, stalled_call_desc),
    FIELD(cmr_metric_batch_t, samples_dropped, LONG),
    FIELD(cmr_metric_batch_t, cpu_ns, LONG),
    FIELD(cmr_metric_batch_t, calls_dropped, LONG),
    FIELD(cmr_metric_batch_t, probe_ps, LONG),
    FIELD(cmr_metric_batch_t, agent_cpu_ns, LONG),
};
static const cmr_record_desc_t metric_batch_desc = {"MetricBatch", sizeof(cmr_metric_batch_t), metric_batch_fields,
                                                    TABLE(metric_batch_fields)};

/* --- SignedCommand ----------------------------------------------------------------- */

static const cmr_field_desc_t signed_command_fields[] = {
    FIELD(cmr_signed_command_t, target_instance, STRING), FIELD(cmr_signed_command_t, command_id, FIXED16),
    FIELD(cmr_signed_command_t, issued_ms, LONG),         FIELD(cmr_signed_command_t, not_after_ms, LONG),
    FIELD(cmr_signed_command_t, key_id, STRING),          FIELD(cmr_signed_command_t, signature, BYTES),
    FIELD(cmr_signed_command_t, payload, BYTES),
};
static const cmr_record_desc_t signed_command_desc = {"SignedCommand", sizeof(cmr_signed_command_t),
                                                      signed_command_fields, TABLE(signed_command_fields)};

/* --- ThresholdEvent ---------------------------------------------------------------- */

static const cmr_field_desc_t threshold_event_fields[] = {
    FIELD(cmr_threshold_event_t, environment_id, STRING),
    FIELD(cmr_threshold_event_t, rule, STRING),
    ENUM(cmr_threshold_event_t, state, threshold_states),
    ENUM(cmr_threshold_event_t, scope, threshold_scopes),
    FIELD(cmr_threshold_event_t, subject_id, LONG),
    FIELD(cmr_threshold_event_t, subject_name, STRING),
    ENUM(cmr_threshold_event_t, statistic, threshold_statistics),
    FIELD(cmr_threshold_event_t, value, DOUBLE),
    FIELD(cmr_threshold_event_t, threshold, DOUBLE),
    FIELD(cmr_threshold_event_t, window_start_ms, LONG),
    FIELD(cmr_threshold_event_t, window_end_ms, LONG),
    FIELD(cmr_threshold_event_t, count, LONG),
    FIELD(cmr_threshold_event_t, example_traces, STRINGS),
    FIELD(cmr_threshold_event_t, diagnose, BOOL),
    FIELD(cmr_threshold_event_t, time_ms, LONG),
};
static const cmr_record_desc_t threshold_event_desc = {"ThresholdEvent", sizeof(cmr_threshold_event_t),
                                                       threshold_event_fields, TABLE(threshold_event_fields)};

/* --- Diagnosis ---------------------------------------------------------------------- */

static const cmr_field_desc_t diagnosis_fields[] = {
    FIELD(cmr_diagnosis_t, id, STRING),
    FIELD(cmr_diagnosis_t, revision, LONG),
    FIELD(cmr_diagnosis_t, environment_id, STRING),
    FIELD(cmr_diagnosis_t, agents, BYTES),
    FIELD(cmr_diagnosis_t, method_id, LONG),
    FIELD(cmr_diagnosis_t, class_name, STRING),
    FIELD(cmr_diagnosis_t, method_name, STRING),
    FIELD(cmr_diagnosis_t, descriptor, STRING),
    FIELD(cmr_diagnosis_t, depth, INT),
    FIELD(cmr_diagnosis_t, include_jdk, BOOL),
    FIELD(cmr_diagnosis_t, exclude, STRINGS),
    SUB(cmr_diagnosis_t, conditions, RECORDS, diag_condition_desc),
    FIELD(cmr_diagnosis_t, ttl_ms, LONG),
    FIELD(cmr_diagnosis_t, max_hits, LONG),
    FIELD(cmr_diagnosis_t, overhead_budget_pct, DOUBLE),
    FIELD(cmr_diagnosis_t, end_after_normal_ms, LONG),
    ENUM(cmr_diagnosis_t, state, diag_states),
    ENUM(cmr_diagnosis_t, end_reason, diag_end_reasons),
    ENUM(cmr_diagnosis_t, cause, diag_causes),
    FIELD(cmr_diagnosis_t, rule, STRING),
    FIELD(cmr_diagnosis_t, trace_id, STRING),
    FIELD(cmr_diagnosis_t, author, STRING),
    FIELD(cmr_diagnosis_t, started_ms, LONG),
    FIELD(cmr_diagnosis_t, ended_ms, LONG),
    FIELD(cmr_diagnosis_t, time_ms, LONG),
};
static const cmr_record_desc_t diagnosis_desc = {"Diagnosis", sizeof(cmr_diagnosis_t), diagnosis_fields,
                                                 TABLE(diagnosis_fields)};

/* --- DiagnosisTree ------------------------------------------------------------------ */

static const cmr_field_desc_t diag_node_fields[] = {
    FIELD(cmr_diag_node_t, method_id, LONG),     FIELD(cmr_diag_node_t, class_name, STRING),
    FIELD(cmr_diag_node_t, method_name, STRING), FIELD(cmr_diag_node_t, descriptor, STRING),
    FIELD(cmr_diag_node_t, parent, INT),         FIELD(cmr_diag_node_t, depth, INT),
    ENUM(cmr_diag_node_t, via, diag_vias),       ENUM(cmr_diag_node_t, status, diag_node_statuses),
    FIELD(cmr_diag_node_t, call_sites, INT),     ENUM(cmr_diag_node_t, probe, diag_probes),
    FIELD(cmr_diag_node_t, note, STRING),
};
static const cmr_record_desc_t diag_node_desc = {"DiagnosisNode", sizeof(cmr_diag_node_t), diag_node_fields,
                                                 TABLE(diag_node_fields)};

static const cmr_field_desc_t diagnosis_tree_fields[] = {
    FIELD(cmr_diagnosis_tree_t, diagnosis_id, STRING),
    FIELD(cmr_diagnosis_tree_t, revision, LONG),
    FIELD(cmr_diagnosis_tree_t, agent_id, LONG),
    FIELD(cmr_diagnosis_tree_t, environment_id, STRING),
    FIELD(cmr_diagnosis_tree_t, time_ms, LONG),
    FIELD(cmr_diagnosis_tree_t, classes_read, INT),
    FIELD(cmr_diagnosis_tree_t, truncated, BOOL),
    FIELD(cmr_diagnosis_tree_t, error, STRING),
    SUB(cmr_diagnosis_tree_t, nodes, RECORDS, diag_node_desc),
};
static const cmr_record_desc_t diagnosis_tree_desc = {"DiagnosisTree", sizeof(cmr_diagnosis_tree_t),
                                                      diagnosis_tree_fields, TABLE(diagnosis_tree_fields)};

/* --- IngestWorker ---------------------------------------------------------------------- */

static const cmr_field_desc_t owned_partition_fields[] = {
    FIELD(cmr_owned_partition_t, partition, INT),
    FIELD(cmr_owned_partition_t, applied_offset, LONG),
};
static const cmr_record_desc_t owned_partition_desc = {"OwnedPartition", sizeof(cmr_owned_partition_t),
                                                       owned_partition_fields, TABLE(owned_partition_fields)};

static const cmr_field_desc_t ingest_worker_fields[] = {
    FIELD(cmr_ingest_worker_t, worker_id, STRING),
    FIELD(cmr_ingest_worker_t, url, STRING),
    FIELD(cmr_ingest_worker_t, started_ms, LONG),
    FIELD(cmr_ingest_worker_t, time_ms, LONG),
    FIELD(cmr_ingest_worker_t, partition_count, INT),
    SUB(cmr_ingest_worker_t, partitions, RECORDS, owned_partition_desc),
    FIELD(cmr_ingest_worker_t, leaving, BOOL),
    FIELD(cmr_ingest_worker_t, metrics_partition_count, INT),
    SUB(cmr_ingest_worker_t, metrics_partitions, RECORDS, owned_partition_desc),
};
static const cmr_record_desc_t ingest_worker_desc = {"IngestWorker", sizeof(cmr_ingest_worker_t), ingest_worker_fields,
                                                     TABLE(ingest_worker_fields)};

static const cmr_field_desc_t budget_removal_fields[] = {
    FIELD(cmr_budget_removal_msg_t, environment_id, STRING),
    FIELD(cmr_budget_removal_msg_t, revision, LONG),
    FIELD(cmr_budget_removal_msg_t, method_id, LONG),
    FIELD(cmr_budget_removal_msg_t, agent_id, LONG),
    FIELD(cmr_budget_removal_msg_t, time_ms, LONG),
    FIELD(cmr_budget_removal_msg_t, calls, LONG),
    FIELD(cmr_budget_removal_msg_t, self_ns_per_call, DOUBLE),
    FIELD(cmr_budget_removal_msg_t, cost_pct, DOUBLE),
    FIELD(cmr_budget_removal_msg_t, reason, STRING),
};
static const cmr_record_desc_t budget_removal_desc = {"BudgetRemoval", sizeof(cmr_budget_removal_msg_t),
                                                      budget_removal_fields, TABLE(budget_removal_fields)};

static const cmr_field_desc_t granted_class_fields[] = {
    FIELD(cmr_granted_class_t, class_name, STRING),
    FIELD(cmr_granted_class_t, original_digest, BYTES),
    FIELD(cmr_granted_class_t, grant, BYTES),
    FIELD(cmr_granted_class_t, bytecode, BYTES),
};
static const cmr_record_desc_t granted_class_desc = {"GrantedClass", sizeof(cmr_granted_class_t), granted_class_fields,
                                                     TABLE(granted_class_fields)};

static const cmr_field_desc_t class_grants_fields[] = {
    FIELD(cmr_class_grants_t, agent_id, LONG), FIELD(cmr_class_grants_t, environment_id, STRING),
    FIELD(cmr_class_grants_t, revision, LONG), FIELD(cmr_class_grants_t, part, INT),
    FIELD(cmr_class_grants_t, parts, INT),     SUB(cmr_class_grants_t, classes, RECORDS, granted_class_desc),
};
static const cmr_record_desc_t class_grants_desc = {"ClassGrants", sizeof(cmr_class_grants_t), class_grants_fields,
                                                    TABLE(class_grants_fields)};

const cmr_record_desc_t *const cmr_msg_descs[CMR_MSG__COUNT] = {
    [CMR_MSG_AGENT_REGISTRATION] = &registration_desc,
    [CMR_MSG_AGENT_CONFIGURATION] = &agent_configuration_desc,
    [CMR_MSG_NO_ENVIRONMENT] = &no_environment_desc,
    [CMR_MSG_CLASS_LOADED] = &class_loaded_desc,
    [CMR_MSG_BYTECODE_RESEND] = &bytecode_resend_desc,
    [CMR_MSG_REDEFINE] = &redefine_desc,
    [CMR_MSG_REDEFINE_RESULT] = &redefine_result_desc,
    [CMR_MSG_AGENT_STATUS] = &agent_status_desc,
    [CMR_MSG_CONFIG_CHANGE] = &config_change_desc,
    [CMR_MSG_METHOD_ENTRY] = &method_entry_desc,
    [CMR_MSG_EVENT_BATCH] = &event_batch_desc,
    [CMR_MSG_METRIC_BATCH] = &metric_batch_desc,
    [CMR_MSG_SIGNED_COMMAND] = &signed_command_desc,
    [CMR_MSG_THRESHOLD_EVENT] = &threshold_event_desc,
    [CMR_MSG_DIAGNOSIS] = &diagnosis_desc,
    [CMR_MSG_DIAGNOSIS_TREE] = &diagnosis_tree_desc,
    [CMR_MSG_INGEST_WORKER] = &ingest_worker_desc,
    [CMR_MSG_BUDGET_REMOVAL] = &budget_removal_desc,
    [CMR_MSG_CLASS_GRANTS] = &class_grants_desc,
};
