/*
 * msg_sample.c - realistic sample messages: what the system really sends, with the ids
 * computed as the real components compute them.
 */
#include "msg_sample.h"

#include <stdlib.h>
#include <string.h>

#include "cmr/bytes.h"
#include "cmr/clock.h"
#include "cmr/event.h"
#include "cmr/histogram.h"
#include "cmr/ids.h"
#include "cmr/wire.h"

#define DUP(s) strdup(s)

static cmr_strings_t strings2(const char *a, const char *b)
{
    cmr_strings_t s = {calloc(2, sizeof(char *)), 2};
    s.items[0] = DUP(a);
    s.items[1] = DUP(b);
    return s;
}

static cmr_strategy_t default_strategy(void)
{
    return (cmr_strategy_t){.send_interval_ms = 5,
                            .ring_records = 8192,
                            .max_batch_events = 4096,
                            .metric_interval_ms = 10000,
                            .max_threads = 4096,
                            .stall_threshold_ms = 10000};
}

static const char *const sample_instance = "5f0c7e2a9b8d4c3e8a1b2c3d4e5f6071";
static const char *const sample_class = "com/acme/shop/CheckoutService";

static int64_t sample_agent(void)
{
    return (int64_t)cmr_agent_id("shop-frontend", "app-01.example.net", sample_instance);
}

static void sample_random_bytes(cmr_bytes_t *b, size_t n)
{
    b->data = malloc(n);
    b->len = b->data ? n : 0;
    if (b->data)
        cmr_random_bytes(b->data, n);
}

/* Class-file-looking bytes of the sample class (magic, Java 17); their class hash. */
static int64_t sample_bytecode(cmr_bytes_t *b)
{
    static const uint8_t head[] = {0xCA, 0xFE, 0xBA, 0xBE, 0x00, 0x00, 0x00, 0x3D};
    b->len = 512;
    b->data = calloc(1, b->len);
    memcpy(b->data, head, sizeof head);
    for (size_t i = sizeof head; i < b->len; i++)
        b->data[i] = (uint8_t)(i * 31);
    return (int64_t)cmr_class_hash(b->data, b->len);
}

/* The sample class's instrumented method. */
static const char *const sample_method = "checkout", *const sample_desc = "(Lcom/acme/shop/Cart;)V";

static int64_t sample_method_id(void)
{
    return (int64_t)cmr_method_id(sample_class, sample_method, sample_desc);
}

/* One method's interval: 1520 calls between 0.4 and 8.8 ms, most near 0.9 ms, 3 of them
 * thrown; count, sum, min and max agree with the histogram (the message owns its bytes). */
static cmr_method_metric_t sample_method_metric(void)
{
    cmr_hist_t h = {0};
    for (int i = 0; i < 1519; i++) {
        uint64_t ns = 402000 + (uint64_t)(i % 97) * 9100; /* 0.40 .. 1.28 ms */
        if (i % 100 == 0)
            ns = 2500000 + (uint64_t)i * 4100; /* a slow tail up to 8.7 ms */
        cmr_hist_record(&h, ns, 1);
    }
    cmr_hist_record(&h, 8800000, 1);
    cmr_buf_t enc = {0};
    cmr_hist_encode(&h, &enc);
    cmr_method_metric_t m = {
        .method_id = sample_method_id(),
        .count = (int64_t)h.count,
        .exceptions = 3,
        .sum_ns = (int64_t)h.sum,
        .min_ns = (int64_t)h.min,
        .max_ns = (int64_t)h.max,
        .histogram = {enc.data, enc.len},
    };
    cmr_hist_free(&h);
    return m;
}

void cmr_msg_sample(cmr_msg_type_t type, cmr_msg_t *out)
{
    memset(out, 0, sizeof *out);
    out->type = type;
    int64_t agent = sample_agent();
    switch (type) {
    case CMR_MSG_AGENT_REGISTRATION: {
        cmr_agent_registration_t *m = &out->u.registration;
        m->instance_id = DUP(sample_instance);
        m->agent_name = DUP("shop-frontend");
        m->hostname = DUP("app-01.example.net");
        m->ip_addresses = strings2("10.1.2.3", "fe80::1");
        m->pid = 4711;
        m->jvm_vendor = DUP("Debian");
        m->jvm_version = DUP("17.0.15+6-Debian-1deb12u1");
        m->agent_version = DUP("0.1.0");
        m->start_time_ms = cmr_wall_ms() - 1500;
        m->attempt = 1;
        break;
    }
    case CMR_MSG_AGENT_CONFIGURATION: {
        cmr_agent_configuration_t *m = &out->u.agent_configuration;
        m->instance_id = DUP(sample_instance);
        m->agent_id = agent;
        m->environment_id = DUP("production");
        m->environment_name = DUP("Production shop");
        m->revision = 7;
        m->sensors.count = 2;
        m->sensors.items = calloc(2, sizeof *m->sensors.items);
        m->sensors.items[0] = (cmr_sensor_setting_t){CMR_SENSOR_INVOCATION_SEQUENCE, true, {0}};
        m->sensors.items[1].kind = CMR_SENSOR_TIMER;
        m->sensors.items[1].enabled = true;
        m->sensors.items[1].properties.count = 1;
        m->sensors.items[1].properties.items = calloc(1, sizeof(cmr_kv_t));
        m->sensors.items[1].properties.items[0] = (cmr_kv_t){DUP("charting"), DUP("true")};
        m->strategy = default_strategy();
        m->trace_context.policy = CMR_TRACE_CONTEXT_AUTHENTICATED;
        sample_random_bytes(&m->trace_context.key, 32);
        m->request_headers = strings2("x-request-id", "user-agent");
        break;
    }
    case CMR_MSG_NO_ENVIRONMENT: {
        cmr_no_environment_t *m = &out->u.no_environment;
        m->instance_id = DUP(sample_instance);
        m->agent_name = DUP("batch-import");
        m->hostname = DUP("batch-07.example.net");
        m->ip_addresses = strings2("10.9.8.7", "127.0.0.1");
        m->reason = DUP("no agent mapping matches name batch-import at 10.9.8.7");
        m->time_ms = cmr_wall_ms();
        break;
    }
    case CMR_MSG_CLASS_LOADED: {
        cmr_class_loaded_t *m = &out->u.class_loaded;
        m->agent_id = agent;
        m->instance_id = DUP(sample_instance);
        m->environment_id = DUP("production");
        m->revision = 7;
        m->class_name = DUP(sample_class);
        m->loader_id = 2;
        m->loader_name = DUP("app");
        m->class_hash = sample_bytecode(&m->bytecode);
        m->cause = CMR_CLASS_LOADED;
        m->agent_features = CMR_AGENT_READS_CLASS_GRANTS;
        break;
    }
    case CMR_MSG_BYTECODE_RESEND: {
        cmr_bytecode_resend_t *m = &out->u.bytecode_resend;
        m->request_id = 1001;
        m->agent_id = agent;
        m->class_name = DUP(sample_class);
        m->loader_id = 2;
        m->class_hash = 0;
        break;
    }
    case CMR_MSG_REDEFINE: {
        cmr_redefine_t *m = &out->u.redefine;
        m->request_id = 1002;
        m->agent_id = agent;
        m->class_name = DUP(sample_class);
        m->loader_id = 2;
        m->class_hash = sample_bytecode(&m->bytecode);
        m->original = false;
        m->revision = 7;
        sample_random_bytes(&m->original_digest, 32);
        m->methods.count = 1;
        m->methods.items = calloc(1, sizeof *m->methods.items);
        m->methods.items[0] = (cmr_instrumented_method_t){sample_method_id(), DUP(sample_method), DUP(sample_desc),
                                                          CMR_SENSOR_INVOCATION_SEQUENCE};
        break;
    }
    case CMR_MSG_CLASS_GRANTS: {
        cmr_class_grants_t *m = &out->u.class_grants;
        m->agent_id = agent;
        m->environment_id = DUP("production");
        m->revision = 7;
        m->part = 1;
        m->parts = 1;
        m->classes.count = 1;
        m->classes.items = calloc(1, sizeof *m->classes.items);
        cmr_granted_class_t *g = &m->classes.items[0];
        g->class_name = DUP(sample_class);
        sample_random_bytes(&g->original_digest, 32);
        sample_random_bytes(&g->grant, 400);
        sample_bytecode(&g->bytecode);
        break;
    }
    case CMR_MSG_REDEFINE_RESULT: {
        cmr_redefine_result_t *m = &out->u.redefine_result;
        m->agent_id = agent;
        m->instance_id = DUP(sample_instance);
        m->request_id = 1002;
        m->class_name = DUP(sample_class);
        m->loader_id = 2;
        m->status = CMR_COMMAND_APPLIED;
        m->message = DUP("redefined");
        m->time_ms = cmr_wall_ms();
        break;
    }
    case CMR_MSG_AGENT_STATUS: {
        cmr_agent_status_t *m = &out->u.agent_status;
        m->agent_id = agent;
        m->instance_id = DUP(sample_instance);
        m->state = CMR_AGENT_FULL;
        m->time_ms = cmr_wall_ms();
        m->events_recorded = 1200345;
        m->events_dropped = 12;
        m->batches_sent = 4211;
        m->classes_seen = 5120;
        m->classes_sent = 611;
        m->commands_accepted = 611;
        m->commands_refused.count = 1;
        m->commands_refused.items = calloc(1, sizeof *m->commands_refused.items);
        m->commands_refused.items[0] = (cmr_refusal_count_t){DUP("bad_signature"), 2};
        m->environment_id = DUP("production");
        m->environment_revision = 7;
        m->classes_instrumented = 598;
        m->redefine_failures = 1;
        break;
    }
    case CMR_MSG_CONFIG_CHANGE: {
        cmr_config_change_t *m = &out->u.config_change;
        m->kind = CMR_CONFIG_ENVIRONMENT;
        m->revision = 7;
        m->time_ms = cmr_wall_ms();
        m->author = DUP("ops@example.net");
        m->environment = calloc(1, sizeof *m->environment);
        m->environment->id = DUP("production");
        m->environment->name = DUP("Production shop");
        m->environment->description = DUP("Everything under com.acme.shop, HTTP entry points");
        m->environment->assignments.count = 1;
        m->environment->assignments.items = calloc(1, sizeof(cmr_sensor_assignment_t));
        cmr_sensor_assignment_t *a = m->environment->assignments.items;
        a->sensor = CMR_SENSOR_INVOCATION_SEQUENCE;
        a->class_pattern = DUP("com/acme/shop/*");
        a->interface = DUP("jakarta/servlet/Servlet");
        a->method_pattern = DUP("*");
        a->modifiers_required = 0x0001; /* ACC_PUBLIC */
        m->environment->strategy = default_strategy();
        m->environment->thresholds.count = 1;
        m->environment->thresholds.items = calloc(1, sizeof(cmr_threshold_rule_t));
        *m->environment->thresholds.items = (cmr_threshold_rule_t){.name = DUP("slow-checkout"),
                                                                   .scope = CMR_THRESHOLD_TRANSACTION,
                                                                   .pattern = DUP("*CheckoutServlet*"),
                                                                   .statistic = CMR_STAT_P99,
                                                                   .above = 250.0,
                                                                   .for_ms = 60000,
                                                                   .min_count = 20,
                                                                   .diagnose = true};
        m->environment->request_headers = strings2("x-request-id", "user-agent");
        break;
    }
    case CMR_MSG_METHOD_ENTRY: {
        cmr_method_entry_t *m = &out->u.method_entry;
        m->class_name = DUP(sample_class);
        m->method_name = DUP(sample_method);
        m->descriptor = DUP(sample_desc);
        m->method_id = sample_method_id();
        m->access_flags = 0x0001;
        m->source_file = DUP("CheckoutService.java");
        m->first_line = 42;
        break;
    }
    case CMR_MSG_EVENT_BATCH: {
        /* two segment batches of one trace: a request thread's root call that handed the
         * context to a pool thread (FORK, event 2), and the pool thread's segment */
        cmr_event_msg_t *m = &out->u.event_batch;
        uint64_t outer = (uint64_t)sample_method_id();
        uint64_t inner = cmr_method_id("com/acme/shop/PriceService", "total", "(Lcom/acme/shop/Cart;)J");
        uint64_t t0 = (uint64_t)cmr_wall_ms() * 1000000ULL;
        cmr_event_t evs[7] = {{outer, t0, CMR_EVENT_ENTER, 1},         {inner, t0 + 1200, CMR_EVENT_ENTER, 2},
                              {0, t0 + 1300, CMR_EVENT_FORK, 0},       {inner, t0 + 850000, CMR_EVENT_EXIT, 2},
                              {outer, t0 + 910000, CMR_EVENT_EXIT, 1}, {inner, t0 + 2000, CMR_EVENT_ENTER, 1},
                              {inner, t0 + 400000, CMR_EVENT_EXIT, 1}};
        uint8_t rec[7 * CMR_EVENT_RECORD_SIZE];
        for (int i = 0; i < 7; i++)
            cmr_event_write(rec, (size_t)i, &evs[i]);
        cmr_event_batch_t seg[2] = {
            {.thread_id = 31, .thread_name = "http-nio-8080-exec-3", .segment_id = 77, .last = true},
            {.thread_id = 40, .thread_name = "pool-1-thread-2", .segment_id = 78, .last = true},
        };
        cmr_parent_link_t parent = {agent, 77, 2};
        seg[1].parent = &parent;
        cmr_random_bytes(seg[0].trace_id, 16);
        memcpy(seg[1].trace_id, seg[0].trace_id, 16);
        static cmr_segs_writer_t w; /* large: not on the stack */
        cmr_segs_writer_begin(&w, agent);
        if (cmr_segs_writer_add(&w, &seg[0], rec, 5) == 0 &&
            cmr_segs_writer_add(&w, &seg[1], rec + 5 * CMR_EVENT_RECORD_SIZE, 2) == 0) {
            cmr_segs_writer_msg(&w, m);
            m->segments.data = w.out.data; /* taken from the writer: the message owns it */
            w.out = (cmr_buf_t){0};
        }
        m->agent_id = agent;
        break;
    }
    case CMR_MSG_SIGNED_COMMAND: {
        /* A Redefine inside an envelope; the signature is random bytes (a sample, made
         * without a key: real ones come from cmr/trust.h). */
        cmr_signed_command_t *m = &out->u.signed_command;
        cmr_msg_t inner;
        cmr_buf_t enc = {0};
        char err[128];
        cmr_msg_sample(CMR_MSG_REDEFINE, &inner);
        if (cmr_msg_encode(CMR_MSG_REDEFINE, &inner.u.redefine, &enc, err, sizeof err) == CMR_WIRE_OK) {
            m->payload.data = enc.data; /* taken from enc */
            m->payload.len = enc.len;
        }
        cmr_msg_free(&inner);
        m->target_instance = DUP(sample_instance);
        cmr_random_bytes(m->command_id, sizeof m->command_id);
        m->issued_ms = cmr_wall_ms();
        m->not_after_ms = m->issued_ms + 600000;
        m->key_id = DUP("3f2a9c0d11e4b5a7");
        sample_random_bytes(&m->signature, 64);
        break;
    }
    case CMR_MSG_METRIC_BATCH: {
        cmr_metric_batch_t *m = &out->u.metric_batch;
        m->agent_id = agent;
        m->interval_start_ms = cmr_wall_ms() - 10000;
        m->interval_ms = 10000;
        m->metrics.count = 1;
        m->metrics.items = calloc(1, sizeof *m->metrics.items);
        m->metrics.items[0] = sample_method_metric();
        m->metrics.items[0].max_in_flight = 6;
        m->environment_id = DUP("production");
        /* the checkout transaction: the same latencies, its slowest call's trace */
        cmr_method_metric_t tm = sample_method_metric();
        m->transactions.count = 1;
        m->transactions.items = calloc(1, sizeof *m->transactions.items);
        cmr_transaction_metric_t *t = m->transactions.items;
        *t = (cmr_transaction_metric_t){.root_method_id = tm.method_id,
                                        .name = DUP(""),
                                        .count = tm.count,
                                        .exceptions = tm.exceptions,
                                        .sum_ns = tm.sum_ns,
                                        .min_ns = tm.min_ns,
                                        .max_ns = tm.max_ns,
                                        .histogram = tm.histogram,
                                        .max_in_flight = 6,
                                        .slowest_trace = {calloc(1, 16), 16}};
        memset(t->slowest_trace.data, 0x4b, 16);
        /* one call stuck in the database for 42 s */
        m->stalled.count = 1;
        m->stalled.items = calloc(1, sizeof *m->stalled.items);
        cmr_stalled_call_t *s = m->stalled.items;
        s->thread_id = 57;
        s->thread_name = DUP("http-nio-8080-exec-7");
        s->trace_id = (cmr_bytes_t){calloc(1, 16), 16};
        memset(s->trace_id.data, 0x5a, 16);
        s->method_id =
            (int64_t)cmr_method_id("org/h2/command/Command", "executeQuery", "(JZ)Lorg/h2/result/ResultInterface;");
        s->started_ms = m->interval_start_ms - 32000;
        s->running_ms = 42000;
        s->stack = (cmr_bytes_t){calloc(1, 16), 16};
        cmr_put_be64(s->stack.data, (uint64_t)tm.method_id);
        cmr_put_be64(s->stack.data + 8, (uint64_t)s->method_id);
        m->cpu_ns = 9600000000;     /* 0.96 of a core's 10 s */
        m->calls_dropped = 380;     /* calls the rings had no room for */
        m->probe_ps = 41500;        /* 41.5 ns per recorded call's probes */
        m->agent_cpu_ns = 21000000; /* the publisher thread's 21 ms */
        break;
    }
    case CMR_MSG_DIAGNOSIS: {
        cmr_diagnosis_t *m = &out->u.diagnosis;
        m->id = DUP("3f9a1c2b7d4e6f80");
        m->revision = 1;
        m->environment_id = DUP("production");
        m->agents = (cmr_bytes_t){calloc(1, 8), 8};
        cmr_put_be64(m->agents.data, (uint64_t)agent);
        m->class_name = DUP(sample_class);
        m->method_name = DUP("checkout");
        m->descriptor = DUP("(I)Ljava/lang/String;");
        m->method_id = (int64_t)cmr_method_id(m->class_name, m->method_name, m->descriptor);
        m->depth = 3;
        m->exclude.count = 1;
        m->exclude.items = calloc(1, sizeof(char *));
        m->exclude.items[0] = DUP("com/acme/shop/generated/");
        m->conditions.count = 1;
        m->conditions.items = calloc(1, sizeof *m->conditions.items);
        m->conditions.items[0] = (cmr_diag_condition_t){CMR_DIAG_HTTP_PATH, DUP(""), DUP("/checkout*")};
        m->ttl_ms = 600000;
        m->max_hits = 1000;
        m->overhead_budget_pct = 2.0;
        m->end_after_normal_ms = 120000;
        m->state = CMR_DIAG_ACTIVE;
        m->end_reason = CMR_DIAG_END_NONE;
        m->cause = CMR_DIAG_CAUSE_THRESHOLD;
        m->rule = DUP("slow-checkout");
        m->trace_id = DUP("4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b");
        m->author = DUP("cmr-config (threshold slow-checkout)");
        m->started_ms = cmr_wall_ms();
        m->time_ms = m->started_ms;
        break;
    }
    case CMR_MSG_DIAGNOSIS_TREE: {
        cmr_diagnosis_tree_t *m = &out->u.diagnosis_tree;
        m->diagnosis_id = DUP("3f9a1c2b7d4e6f80");
        m->revision = 1;
        m->agent_id = agent;
        m->environment_id = DUP("production");
        m->time_ms = cmr_wall_ms();
        m->classes_read = 2;
        m->error = DUP("");
        m->nodes.count = 2;
        m->nodes.items = calloc(2, sizeof *m->nodes.items);
        m->nodes.items[0] = (cmr_diag_node_t){(int64_t)cmr_method_id(sample_class, "checkout", "(I)Ljava/lang/String;"),
                                              DUP(sample_class),
                                              DUP("checkout"),
                                              DUP("(I)Ljava/lang/String;"),
                                              -1,
                                              0,
                                              CMR_DIAG_VIA_ROOT,
                                              CMR_DIAG_NODE_FOUND,
                                              0,
                                              CMR_DIAG_PROBE_ANCHOR,
                                              DUP("")};
        m->nodes.items[1] = (cmr_diag_node_t){(int64_t)cmr_method_id("com/acme/shop/Cart", "total", "()J"),
                                              DUP("com/acme/shop/Cart"),
                                              DUP("total"),
                                              DUP("()J"),
                                              0,
                                              1,
                                              CMR_DIAG_VIA_INTERFACE,
                                              CMR_DIAG_NODE_DEPTH,
                                              2,
                                              CMR_DIAG_PROBE_NONE,
                                              DUP("")};
        break;
    }
    case CMR_MSG_INGEST_WORKER: {
        cmr_ingest_worker_t *m = &out->u.ingest_worker;
        m->worker_id = DUP("ingest-a");
        m->url = DUP("http://10.0.0.5:8470");
        m->started_ms = cmr_wall_ms() - 60000;
        m->time_ms = cmr_wall_ms();
        m->partition_count = 16;
        m->partitions.count = 2;
        m->partitions.items = calloc(2, sizeof *m->partitions.items);
        m->partitions.items[0] = (cmr_owned_partition_t){3, 1041};
        m->partitions.items[1] = (cmr_owned_partition_t){7, -1};
        m->metrics_partition_count = 16;
        m->metrics_partitions.count = 1;
        m->metrics_partitions.items = calloc(1, sizeof *m->metrics_partitions.items);
        m->metrics_partitions.items[0] = (cmr_owned_partition_t){5, -1};
        break;
    }
    case CMR_MSG_BUDGET_REMOVAL: {
        cmr_budget_removal_msg_t *m = &out->u.budget_removal;
        m->environment_id = DUP("production");
        m->revision = 4;
        m->method_id = (int64_t)cmr_method_id("com/acme/shop/Cart", "size", "()I");
        m->agent_id = sample_agent();
        m->time_ms = cmr_wall_ms();
        m->calls = 12000000;
        m->self_ns_per_call = 4.5;
        m->cost_pct = 18.2;
        m->reason = DUP("probes 50 ns per call > self time 4.5 ns; 12000000 calls, 18.2% of CPU");
        break;
    }
    case CMR_MSG_THRESHOLD_EVENT: {
        cmr_threshold_event_t *m = &out->u.threshold_event;
        m->environment_id = DUP("production");
        m->rule = DUP("slow-checkout");
        m->state = CMR_THRESHOLD_ABNORMAL;
        m->scope = CMR_THRESHOLD_TRANSACTION;
        m->subject_id = (int64_t)sample_method_id();
        m->subject_name = DUP("com.acme.shop.CheckoutServlet.doPost(Ljakarta/servlet/http/HttpServletRequest;"
                              "Ljakarta/servlet/http/HttpServletResponse;)V");
        m->statistic = CMR_STAT_P99;
        m->value = 412.5;
        m->threshold = 250.0;
        m->time_ms = cmr_wall_ms() / 10000 * 10000;
        m->window_end_ms = m->time_ms;
        m->window_start_ms = m->time_ms - 60000;
        m->count = 1519;
        m->example_traces.count = 1;
        m->example_traces.items = calloc(1, sizeof(char *));
        m->example_traces.items[0] = DUP("4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b");
        m->diagnose = true;
        break;
    }
    default: break;
    }
}
