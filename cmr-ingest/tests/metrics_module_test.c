/*
 * metrics_module_test.c - cmr-ingest's metrics module without a broker: MetricBatches of
 * two JVMs become series whose percentiles match the exact ones of the raw samples; a
 * threshold rule finds a transaction abnormal and back to normal exactly once each, with
 * its evidence, also across a restart of the worker and when replayed; duplicates and
 * malformed batches change nothing; stalled calls are listed and cleared; the queries
 * (top, series, jvms, alerts, stalled) and the Prometheus text say what was sent.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmr/bytes.h"
#include "cmr/clock.h"
#include "cmr/histogram.h"
#include "cmr/ids.h"
#include "cmr/ingest.h"
#include "cmr/metrics.h"
#include "cmr/wire.h"

#define T0 1763760000000LL /* ms, a 10 s boundary */
#define AGENT_A 0xA1
#define AGENT_B 0xB2
#define INTERVALS 14

static uint64_t M_CHECKOUT, M_PAY;
static const char *tx_name_sent = "";                               /* build() names its transaction so */
static const char *alert_subject = "com.shop.Checkout.checkout()V"; /* what on_alert expects */

/* --- test data ---------------------------------------------------------------------------- */

/* The latencies (ns) agent `who` measured for checkout in interval i: B is slow in 4..7. */
static size_t checkout_samples(int who, int i, uint64_t *out)
{
    size_t n = 20;
    for (size_t k = 0; k < n; k++) {
        uint64_t base = (who == AGENT_B && i >= 4 && i <= 7) ? 300000000ULL : 50000000ULL;
        out[k] = base + (uint64_t)((k * 7919 + (size_t)i * 104729 + (size_t)who) % 20) * 1000000ULL;
    }
    return n;
}

typedef struct built {
    cmr_metric_batch_t b;
    cmr_method_metric_t methods[1];
    cmr_transaction_metric_t txs[1];
    cmr_stalled_call_t stalled[1];
    cmr_buf_t hist_m, hist_t;
    uint8_t trace[16], stack[16];
} built_t;

static void build(built_t *x, int who, int i, bool with_stall)
{
    memset(x, 0, sizeof *x);
    uint64_t s[64];
    size_t n = checkout_samples(who, i, s);
    cmr_hist_t h = {0};
    int64_t sum = 0, min = INT64_MAX, max = 0;
    for (size_t k = 0; k < n; k++) {
        cmr_hist_record(&h, s[k], 1);
        sum += (int64_t)s[k];
        min = (int64_t)s[k] < min ? (int64_t)s[k] : min;
        max = (int64_t)s[k] > max ? (int64_t)s[k] : max;
    }
    cmr_hist_encode(&h, &x->hist_t);
    cmr_hist_free(&h);
    cmr_hist_record(&h, 1000000, 3); /* Payment.charge: 1 ms, 3 calls */
    cmr_hist_encode(&h, &x->hist_m);
    cmr_hist_free(&h);
    memset(x->trace, who, 16);
    x->trace[15] = (uint8_t)i;
    x->txs[0] = (cmr_transaction_metric_t){.root_method_id = (int64_t)M_CHECKOUT,
                                           .name = (char *)tx_name_sent,
                                           .count = (int64_t)n,
                                           .exceptions = who == AGENT_A ? 1 : 0,
                                           .sum_ns = sum,
                                           .min_ns = min,
                                           .max_ns = max,
                                           .histogram = {x->hist_t.data, x->hist_t.len},
                                           .max_in_flight = 2,
                                           .slowest_trace = {x->trace, 16}};
    x->methods[0] = (cmr_method_metric_t){.method_id = (int64_t)M_PAY,
                                          .count = 3,
                                          .sum_ns = 3000000,
                                          .min_ns = 1000000,
                                          .max_ns = 1000000,
                                          .histogram = {x->hist_m.data, x->hist_m.len},
                                          .slowest_trace = {NULL, 0}};
    cmr_put_be64(x->stack, M_CHECKOUT);
    cmr_put_be64(x->stack + 8, M_PAY);
    x->stalled[0] = (cmr_stalled_call_t){.thread_id = 7,
                                         .thread_name = "worker-7",
                                         .trace_id = {x->trace, 16},
                                         .method_id = (int64_t)M_PAY,
                                         .started_ms = T0 + i * 10000 - 25000,
                                         .running_ms = 25000,
                                         .stack = {x->stack, 16}};
    x->b = (cmr_metric_batch_t){.agent_id = who,
                                .interval_start_ms = T0 + (int64_t)i * 10000,
                                .interval_ms = 10000,
                                .metrics = {x->methods, 1},
                                .environment_id = "shop",
                                .transactions = {x->txs, 1},
                                .stalled = {x->stalled, with_stall ? 1 : 0}};
}

static void built_free(built_t *x)
{
    cmr_buf_free(&x->hist_m);
    cmr_buf_free(&x->hist_t);
}

/* The encoded ConfigChange of environment shop with one rule. */
static void shop_config(cmr_buf_t *out)
{
    cmr_threshold_rule_t rule = {.name = "slow-checkout",
                                 .scope = CMR_THRESHOLD_TRANSACTION,
                                 .pattern = "*Checkout.checkout*",
                                 .statistic = CMR_STAT_P99,
                                 .above = 200.0,
                                 .for_ms = 30000,
                                 .min_count = 5,
                                 .diagnose = true};
    cmr_environment_t env = {.id = "shop", .name = "shop", .description = "", .thresholds = {&rule, 1}};
    cmr_config_change_t cc = {.kind = CMR_CONFIG_ENVIRONMENT, .revision = 1, .author = "t", .environment = &env};
    char err[256];
    assert_int_equal(cmr_msg_encode(CMR_MSG_CONFIG_CHANGE, &cc, out, err, sizeof err), CMR_WIRE_OK);
}

/* --- a module over a temporary store -------------------------------------------------------- */

typedef struct seen_event {
    cmr_threshold_state_t state;
    uint64_t subject;
    int64_t time_ms, count;
    double value;
    size_t examples;
    bool diagnose;
} seen_event_t;

typedef struct rig {
    char root[64];
    cmr_ingest_engine_t *engine;
    cmr_metrics_t *m;
    seen_event_t events[16];
    size_t nevents;
} rig_t;

static void on_alert(void *opaque, const cmr_threshold_event_t *ev)
{
    rig_t *r = opaque;
    assert_true(r->nevents < 16);
    r->events[r->nevents++] = (seen_event_t){ev->state, (uint64_t)ev->subject_id, ev->time_ms, ev->count,
                                             ev->value, ev->example_traces.count, ev->diagnose};
    assert_string_equal(ev->environment_id, "shop");
    assert_string_equal(ev->rule, "slow-checkout");
    assert_string_equal(ev->subject_name, alert_subject);
}

static int64_t rig_retention_10s_ms; /* 0: the store's default */

static void rig_open(rig_t *r)
{
    char err[512];
    cmr_store_opts_t o = {.sync = false};
    r->engine = cmr_ingest_engine_new(r->root, &o, err, sizeof err);
    assert_non_null(r->engine);
    cmr_method_entry_t m1 = {(int64_t)M_CHECKOUT, "com/shop/Checkout", "checkout", "()V", 1, NULL, 0};
    cmr_method_entry_t m2 = {(int64_t)M_PAY, "com/shop/Payment", "charge", "()V", 1, NULL, 0};
    cmr_ingest_engine_add_method(r->engine, &m1);
    cmr_ingest_engine_add_method(r->engine, &m2);
    assert_int_equal(cmr_ingest_engine_flush(r->engine), 0);
    cmr_metrics_opts_t mo = {.store = {.no_sync = true, .retention_ms = {rig_retention_10s_ms}},
                             .lateness_ms = 0,
                             .prom_max_series = 100,
                             .max_alerts = 10};
    r->m = cmr_metrics_new(r->root, &mo, cmr_ingest_engine_names(r->engine), err, sizeof err);
    assert_non_null(r->m);
    cmr_metrics_on_alert(r->m, on_alert, r);
    assert_int_equal(cmr_metrics_open_partition(r->m, 0, 0), 0);
    cmr_buf_t cfg = {0};
    shop_config(&cfg);
    assert_int_equal(cmr_metrics_add_config(r->m, cfg.data, cfg.len), 0);
    cmr_buf_free(&cfg);
}

static void rig_close(rig_t *r)
{
    cmr_metrics_free(r->m);
    cmr_ingest_engine_free(r->engine);
    r->m = NULL;
    r->engine = NULL;
}

static void rig_new(rig_t *r)
{
    memset(r, 0, sizeof *r);
    snprintf(r->root, sizeof r->root, "/tmp/cmr-met-XXXXXX");
    assert_non_null(mkdtemp(r->root));
    rig_open(r);
}

static void rig_free(rig_t *r)
{
    rig_close(r);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", r->root);
    assert_int_equal(system(cmd), 0);
}

/* Interval i from both agents (A reports a stalled call in interval 5), then a commit
 * (unless commit is false: a replay commits rarely). */
static void feed_commit(rig_t *r, int i, bool commit)
{
    char err[256];
    for (int who = AGENT_A; who <= AGENT_B; who += AGENT_B - AGENT_A) {
        built_t x;
        build(&x, who, i, who == AGENT_A && i == 5);
        assert_int_equal(cmr_metrics_add(r->m, 0, &x.b, err, sizeof err), 1);
        built_free(&x);
    }
    if (!commit)
        return;
    assert_int_equal(cmr_metrics_flush(r->m), 0);
    cmr_metrics_evaluate(r->m); /* on what is written */
    assert_int_equal(cmr_metrics_flush(r->m), 0);
}

static void feed(rig_t *r, int i)
{
    feed_commit(r, i, true);
}

static void init_ids(void)
{
    M_CHECKOUT = cmr_method_id("com/shop/Checkout", "checkout", "()V");
    M_PAY = cmr_method_id("com/shop/Payment", "charge", "()V");
}

/* --- tests ------------------------------------------------------------------------------- */

/* The rule: abnormal once B's slowness fills a window, back to normal once a window is
 * clean again; across a restart of the module in between; and a replay decides the same. */
static void test_rule_abnormal_and_back(void **state)
{
    (void)state;
    init_ids();
    rig_t r;
    rig_new(&r);
    for (int i = 0; i < 7; i++)
        feed(&r, i);
    assert_int_equal(r.nevents, 1);
    assert_int_equal(r.events[0].state, CMR_THRESHOLD_ABNORMAL);
    assert_int_equal(r.events[0].subject, M_CHECKOUT);
    assert_true(r.events[0].value > 200.0 && r.events[0].value < 330.0);
    assert_true(r.events[0].examples >= 1 && r.events[0].examples <= 3);
    assert_true(r.events[0].diagnose);
    int64_t abnormal_at = r.events[0].time_ms;
    /* B became slow in interval 4 (t0+40 s): the first boundary whose 30 s window holds
     * enough slow calls for a p99 above 200 ms is t0+50 s */
    assert_int_equal(abnormal_at, T0 + 50000);

    rig_close(&r); /* a restarted worker continues from the stored state */
    rig_open(&r);
    for (int i = 7; i < INTERVALS; i++)
        feed(&r, i);
    assert_int_equal(r.nevents, 2);
    assert_int_equal(r.events[1].state, CMR_THRESHOLD_NORMAL);
    assert_false(r.events[1].diagnose);
    assert_true(r.events[1].value <= 200.0);
    /* B's last slow interval is 7 (ends t0+80 s): the first clean 30 s window ends t0+110 s */
    assert_int_equal(r.events[1].time_ms, T0 + 110000);

    /* a replay (another store, the same records, one commit at the end) decides the same,
     * at the same times */
    rig_t again;
    rig_new(&again);
    for (int i = 0; i < INTERVALS; i++)
        feed_commit(&again, i, i == INTERVALS - 1);
    assert_int_equal(again.nevents, 2);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(again.events[k].state, r.events[k].state);
        assert_int_equal(again.events[k].time_ms, r.events[k].time_ms);
        assert_true(again.events[k].value == r.events[k].value);
    }
    rig_free(&again);
    rig_free(&r);
}

/* A partition moved to a worker with an empty store: it restores the data from the topic,
 * not the rules' state; judged again without events up to the restored data, the state is
 * the old owner's: the abnormal event it sent is not sent twice, the back-to-normal event
 * that follows comes from the new owner, once. */
static void test_rule_state_restored(void **state)
{
    (void)state;
    init_ids();
    rig_t old, moved;
    rig_new(&old);
    for (int i = 0; i < 7; i++)
        feed(&old, i);
    assert_int_equal(old.nevents, 1);
    assert_int_equal(old.events[0].state, CMR_THRESHOLD_ABNORMAL);

    rig_new(&moved); /* another host: the same records, read back by the restore */
    for (int i = 0; i < 7; i++)
        feed_commit(&moved, i, false);
    assert_int_equal(cmr_metrics_flush(moved.m), 0);
    cmr_metrics_restored(moved.m, 0);
    for (int i = 7; i < INTERVALS; i++)
        feed(&moved, i);
    assert_int_equal(moved.nevents, 1);
    assert_int_equal(moved.events[0].state, CMR_THRESHOLD_NORMAL);
    assert_int_equal(moved.events[0].time_ms, T0 + 110000);
    cmr_metrics_stats_t s;
    cmr_metrics_stats(moved.m, &s);
    assert_int_equal(s.alerts_restored, 1);
    assert_int_equal(s.alerts_abnormal, 0);
    assert_int_equal(s.alerts_normal, 1);
    cmr_metrics_restored(moved.m, 3); /* a partition without environments: nothing */
    rig_free(&moved);
    rig_free(&old);
}

/* Redelivered intervals change nothing; malformed batches are refused with a reason. */
/* The applied offset of a metrics partition goes into the store with the points of the
 * group it ends (what a newly assigned worker restores from), survives a reopen, never
 * goes back, and is flushed even when the group added no point. */
static void test_applied_offset(void **state)
{
    (void)state;
    init_ids();
    rig_t r;
    rig_new(&r);
    assert_int_equal(cmr_metrics_applied(r.m, 0), -1);
    char err[256];
    built_t x;
    build(&x, AGENT_A, 0, false);
    assert_int_equal(cmr_metrics_add(r.m, 0, &x.b, err, sizeof err), 1);
    built_free(&x);
    cmr_metrics_set_applied(r.m, 0, 17);
    assert_int_equal(cmr_metrics_applied(r.m, 0), -1); /* not durable yet */
    assert_int_equal(cmr_metrics_flush(r.m), 0);
    assert_int_equal(cmr_metrics_applied(r.m, 0), 17);
    cmr_metrics_set_applied(r.m, 0, 18); /* a record that added nothing (a duplicate) */
    cmr_metrics_set_applied(r.m, 0, 3);  /* never back */
    assert_int_equal(cmr_metrics_flush(r.m), 0);
    assert_int_equal(cmr_metrics_applied(r.m, 0), 18);
    assert_int_equal(cmr_metrics_applied(r.m, 1), -1); /* not open */
    rig_close(&r);
    rig_open(&r);
    assert_int_equal(cmr_metrics_applied(r.m, 0), 18);
    rig_free(&r);
}

static void test_duplicates_and_malformed(void **state)
{
    (void)state;
    init_ids();
    rig_t r;
    rig_new(&r);
    feed(&r, 0);
    char err[256];
    built_t x;
    build(&x, AGENT_A, 0, false);
    assert_int_equal(cmr_metrics_add(r.m, 0, &x.b, err, sizeof err), 0); /* flushed before */
    built_free(&x);
    build(&x, AGENT_A, 1, false);
    assert_int_equal(cmr_metrics_add(r.m, 0, &x.b, err, sizeof err), 1);
    assert_int_equal(cmr_metrics_add(r.m, 0, &x.b, err, sizeof err), 0); /* pending */
    built_free(&x);

    build(&x, AGENT_A, 2, false);
    x.txs[0].count = 21; /* the histogram holds 20 */
    assert_int_equal(cmr_metrics_add(r.m, 0, &x.b, err, sizeof err), -1);
    assert_non_null(strstr(err, "the histogram holds 20 calls, the item says 21"));
    x.txs[0].count = 20;
    x.b.environment_id = "";
    assert_int_equal(cmr_metrics_add(r.m, 0, &x.b, err, sizeof err), -1);
    assert_non_null(strstr(err, "environment id"));
    x.b.environment_id = "shop";
    x.stalled[0].stack.len = 7;
    x.b.stalled.count = 1;
    assert_int_equal(cmr_metrics_add(r.m, 0, &x.b, err, sizeof err), -1);
    assert_non_null(strstr(err, "stalled[0]"));
    x.b.stalled.count = 0;
    x.hist_t.data[0] ^= 0xFF; /* a histogram that does not decode */
    assert_int_equal(cmr_metrics_add(r.m, 0, &x.b, err, sizeof err), -1);
    x.hist_t.data[0] ^= 0xFF;
    x.b.interval_ms = 0;
    assert_int_equal(cmr_metrics_add(r.m, 0, &x.b, err, sizeof err), -1);
    x.b.interval_ms = 10000;
    int64_t start = x.b.interval_start_ms;
    x.b.interval_start_ms = cmr_wall_ms() + 3600000; /* an agent whose clock runs an hour ahead */
    assert_int_equal(cmr_metrics_add(r.m, 0, &x.b, err, sizeof err), -1);
    assert_non_null(strstr(err, "in the future"));
    x.b.interval_start_ms = start;
    x.txs[0].min_ns = x.txs[0].max_ns + 1;
    assert_int_equal(cmr_metrics_add(r.m, 0, &x.b, err, sizeof err), -1);
    assert_non_null(strstr(err, "impossible values"));
    x.txs[0].min_ns = 1;
    x.txs[0].max_in_flight = -1;
    assert_int_equal(cmr_metrics_add(r.m, 0, &x.b, err, sizeof err), -1);
    x.txs[0].max_in_flight = 2;
    built_free(&x);
    build(&x, AGENT_A, 2, false);                                         /* fresh values (min was changed above) */
    assert_int_equal(cmr_metrics_add(r.m, 7, &x.b, err, sizeof err), -2); /* partition not open */
    assert_int_equal(cmr_metrics_add(r.m, 0, &x.b, err, sizeof err), 1);  /* all good again */
    built_free(&x);
    assert_int_equal(cmr_metrics_flush(r.m), 0);
    cmr_metrics_stats_t s;
    cmr_metrics_stats(r.m, &s);
    assert_int_equal(s.batches, 4);
    assert_int_equal(s.duplicates, 2);
    assert_int_equal(s.rejected, 8);
    rig_free(&r);
}

static json_t *query(const char *root, const char *what, const char *const *keys, const char *const *vals, size_t n)
{
    char err[512], *text;
    cmr_metrics_view_t *v = cmr_metrics_view_open(root, err, sizeof err);
    assert_non_null(v);
    FILE *sink = fopen("/dev/null", "w");
    int rc = cmr_metrics_query(v, what, keys, vals, n, &text, sink, err, sizeof err);
    fclose(sink);
    cmr_metrics_view_free(v);
    if (rc != 0)
        fail_msg("query %s: %s", what, err);
    json_t *j = json_loads(text, 0, NULL);
    free(text);
    assert_non_null(j);
    return j;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The queries answer with the numbers that were sent: exact counts, percentiles within the
 * histogram's error of the exact ones over every raw sample. */
static void test_queries(void **state)
{
    (void)state;
    init_ids();
    rig_t r;
    rig_new(&r);
    for (int i = 0; i < 8; i++)
        feed(&r, i);
    char from[32], to[32];
    snprintf(from, sizeof from, "%lld", (long long)T0 / 1000);
    snprintf(to, sizeof to, "%lld", (long long)(T0 + 80000) / 1000);
    /* exact percentiles of checkout over both agents and intervals 0..7 */
    uint64_t all[1024];
    size_t n = 0;
    for (int i = 0; i < 8; i++)
        for (int who = AGENT_A; who <= AGENT_B; who += AGENT_B - AGENT_A)
            n += checkout_samples(who, i, all + n);
    qsort(all, n, sizeof all[0], cmp_u64);
    double p99 = (double)all[(size_t)ceil(0.99 * (double)n) - 1] / 1e6,
           p50 = (double)all[(size_t)ceil(0.5 * n) - 1] / 1e6;

    const char *k1[] = {"env", "from", "to"}, *v1[] = {"shop", from, to};
    json_t *top = query(r.root, "top", k1, v1, 3);
    json_t *items = json_object_get(top, "items");
    assert_int_equal(json_array_size(items), 1);
    json_t *it = json_array_get(items, 0);
    assert_string_equal(json_string_value(json_object_get(it, "name")), "com.shop.Checkout.checkout()V");
    assert_int_equal(json_integer_value(json_object_get(it, "count")), (json_int_t)n);
    assert_int_equal(json_integer_value(json_object_get(it, "errors")), 8); /* one per interval from A */
    assert_true(fabs(json_real_value(json_object_get(it, "p99_ms")) - p99) <= p99 * 0.0078 + 1e-9);
    assert_true(fabs(json_real_value(json_object_get(it, "p50_ms")) - p50) <= p50 * 0.0078 + 1e-9);
    assert_int_equal(json_integer_value(json_object_get(it, "stalled")), 1);
    assert_true(fabs(json_real_value(json_object_get(it, "rate_seconds")) - 80.0) < 1e-9);
    assert_true(fabs(json_real_value(json_object_get(it, "rate")) - (double)n / 80.0) < 1e-9);
    json_decref(top);
    /* a window that began 40 s before the first report, a year ago: beyond the marks'
     * retention nothing tells when reports began, so the window divides */
    char from40[32];
    snprintf(from40, sizeof from40, "%lld", (long long)(T0 - 40000) / 1000);
    const char *v1b[] = {"shop", from40, to};
    top = query(r.root, "top", k1, v1b, 3);
    it = json_array_get(json_object_get(top, "items"), 0);
    assert_true(fabs(json_real_value(json_object_get(it, "rate_seconds")) - 120.0) < 1e-9);
    json_decref(top);

    const char *k2[] = {"env", "from", "to", "kind"}, *v2[] = {"shop", from, to, "method"};
    top = query(r.root, "top", k2, v2, 4);
    it = json_array_get(json_object_get(top, "items"), 0);
    assert_string_equal(json_string_value(json_object_get(it, "name")), "com.shop.Payment.charge()V");
    assert_int_equal(json_integer_value(json_object_get(it, "count")), 8 * 2 * 3);
    json_decref(top);

    /* which JVMs are slow: B during its slow intervals */
    char from4[32];
    snprintf(from4, sizeof from4, "%lld", (long long)(T0 + 40000) / 1000);
    const char *k3[] = {"name", "from", "to"}, *v3[] = {"Checkout.checkout", from4, to};
    json_t *jvms = query(r.root, "jvms", k3, v3, 3);
    items = json_object_get(jvms, "items");
    assert_int_equal(json_array_size(items), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(items, 0), "agent")), "00000000000000b2");
    assert_true(json_real_value(json_object_get(json_array_get(items, 0), "p99_ms")) > 250.0);
    assert_true(json_real_value(json_object_get(json_array_get(items, 1), "p99_ms")) < 100.0);
    json_decref(jvms);

    /* the series: one point per 10 s, counts of both agents */
    const char *k4[] = {"name", "from", "to", "res"}, *v4[] = {"Checkout.checkout", from, to, "10s"};
    json_t *series = query(r.root, "series", k4, v4, 4);
    json_t *pts = json_object_get(series, "points");
    assert_int_equal(json_array_size(pts), 8);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(pts, 3), "t")), T0 + 30000);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(pts, 3), "count")), 40);
    json_decref(series);

    /* abnormal now (B slow in 4..7, so at t0+80 s) */
    json_t *alerts = query(r.root, "alerts", NULL, NULL, 0);
    items = json_object_get(alerts, "abnormal");
    assert_int_equal(json_array_size(items), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(items, 0), "rule")), "slow-checkout");
    json_decref(alerts);

    /* interval 5's stalled call was cleared by interval 6 */
    const char *kw[] = {"from", "to"}, *vw[] = {from, to};
    json_t *stalled = query(r.root, "stalled", kw, vw, 2);
    assert_int_equal(json_array_size(json_object_get(stalled, "stalled")), 0);
    json_decref(stalled);
    char err[256];
    built_t x;
    build(&x, AGENT_A, 8, true);
    assert_int_equal(cmr_metrics_add(r.m, 0, &x.b, err, sizeof err), 1);
    built_free(&x);
    assert_int_equal(cmr_metrics_flush(r.m), 0);
    char to9[32];
    snprintf(to9, sizeof to9, "%lld", (long long)(T0 + 90000) / 1000);
    const char *vw9[] = {from, to9};
    stalled = query(r.root, "stalled", kw, vw9, 2);
    items = json_object_get(stalled, "stalled");
    assert_int_equal(json_array_size(items), 1);
    json_t *s0 = json_array_get(items, 0);
    assert_string_equal(json_string_value(json_object_get(s0, "thread")), "worker-7");
    assert_string_equal(json_string_value(json_object_get(s0, "method")), "com.shop.Payment.charge()V");
    assert_int_equal(json_array_size(json_object_get(s0, "stack")), 2);
    json_decref(stalled);

    /* the HTTP API answers the same queries; bad parameters are 400, unknown ones 404 */
    char *body = NULL;
    assert_int_equal(cmr_ingest_http_answer(r.root, "GET", "/api/metrics/alerts", &body), 200);
    assert_non_null(strstr(body, "slow-checkout"));
    free(body);
    assert_int_equal(cmr_ingest_http_answer(r.root, "GET", "/api/metrics/top?stat=p42", &body), 400);
    assert_non_null(strstr(body, "unknown stat"));
    free(body);
    assert_int_equal(cmr_ingest_http_answer(r.root, "GET", "/api/metrics/top?limit=0", &body), 400);
    free(body);
    assert_int_equal(cmr_ingest_http_answer(r.root, "GET", "/api/metrics/everything", &body), 404);
    free(body);
    assert_int_equal(cmr_ingest_http_answer(r.root, "GET", "/api/agents/zz", &body), 400);
    free(body);
    assert_int_equal(cmr_ingest_http_answer(r.root, "GET", "/api/agents", &body), 200);
    assert_non_null(strstr(body, "\"agents\":[]"));
    free(body);

    /* bad parameters are errors, not empty answers */
    cmr_metrics_view_t *v = cmr_metrics_view_open(r.root, err, sizeof err);
    char *text;
    const char *kb[] = {"stat"}, *vb[] = {"p42"};
    assert_int_equal(cmr_metrics_query(v, "top", kb, vb, 1, &text, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "unknown stat"));
    assert_int_equal(cmr_metrics_query(v, "everything", NULL, NULL, 0, &text, NULL, err, sizeof err), -1);
    const char *kn[] = {"name"}, *vn[] = {"nosuch"};
    assert_int_equal(cmr_metrics_query(v, "series", kn, vn, 1, &text, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "no transaction matches"));
    cmr_metrics_view_free(v);
    rig_free(&r);
}

/* A transaction the agent names by its HTTP method and route: its series is the name's,
 * the API shows the name and the root method it came with, a threshold rule judges it by
 * the name and its event names the root method (where a diagnosis starts); a name that is
 * not text is refused with the batch. */
static void test_named_transactions(void **state)
{
    (void)state;
    init_ids();
    tx_name_sent = alert_subject = "GET /Checkout.checkout"; /* the rule's pattern matches it */
    rig_t r;
    rig_new(&r);
    for (int i = 0; i < 7; i++)
        feed(&r, i);
    assert_int_equal(r.nevents, 1);
    assert_int_equal(r.events[0].state, CMR_THRESHOLD_ABNORMAL);
    assert_int_equal(r.events[0].subject, M_CHECKOUT); /* the root method, not the name's hash */
    assert_true(r.events[0].diagnose);
    char from[32], to[32];
    snprintf(from, sizeof from, "%lld", (long long)T0 / 1000);
    snprintf(to, sizeof to, "%lld", (long long)(T0 + 70000) / 1000);
    const char *k[] = {"env", "from", "to"}, *v[] = {"shop", from, to};
    json_t *top = query(r.root, "top", k, v, 3);
    json_t *items = json_object_get(top, "items");
    assert_int_equal(json_array_size(items), 1);
    json_t *it = json_array_get(items, 0);
    assert_string_equal(json_string_value(json_object_get(it, "name")), "GET /Checkout.checkout");
    assert_string_equal(json_string_value(json_object_get(it, "root_method")), "com.shop.Checkout.checkout()V");
    char sub[17];
    snprintf(sub, sizeof sub, "%016" PRIx64, cmr_hash_bytes("GET /Checkout.checkout", 22));
    assert_string_equal(json_string_value(json_object_get(it, "subject")), sub);
    json_decref(top);
    /* a transaction named by its root method has no root_method of its own (B's slow
     * interval makes it abnormal too, by its own name) */
    tx_name_sent = "";
    alert_subject = "com.shop.Checkout.checkout()V";
    feed(&r, 7);
    snprintf(to, sizeof to, "%lld", (long long)(T0 + 80000) / 1000);
    top = query(r.root, "top", k, v, 3);
    items = json_object_get(top, "items");
    assert_int_equal(json_array_size(items), 2);
    size_t by_root = 0;
    for (size_t i = 0; i < 2; i++)
        if (!strcmp(json_string_value(json_object_get(json_array_get(items, i), "name")),
                    "com.shop.Checkout.checkout()V")) {
            assert_null(json_object_get(json_array_get(items, i), "root_method"));
            by_root++;
        }
    assert_int_equal(by_root, 1);
    json_decref(top);
    /* another environment's transaction of the same name keeps its own root method */
    char err[256];
    built_t x;
    build(&x, AGENT_A, 8, false);
    x.b.environment_id = "other";
    x.txs[0].root_method_id = (int64_t)M_PAY;
    x.txs[0].name = "GET /Checkout.checkout";
    assert_int_equal(cmr_metrics_add(r.m, 0, &x.b, err, sizeof err), 1);
    built_free(&x);
    assert_int_equal(cmr_metrics_flush(r.m), 0);
    snprintf(to, sizeof to, "%lld", (long long)(T0 + 90000) / 1000);
    const char *vo[] = {"other", from, to};
    top = query(r.root, "top", k, vo, 3);
    it = json_array_get(json_object_get(top, "items"), 0);
    assert_string_equal(json_string_value(json_object_get(it, "root_method")), "com.shop.Payment.charge()V");
    json_decref(top);
    top = query(r.root, "top", k, v, 3);
    items = json_object_get(top, "items");
    for (size_t i = 0; i < json_array_size(items); i++)
        if (json_object_get(json_array_get(items, i), "root_method"))
            assert_string_equal(json_string_value(json_object_get(json_array_get(items, i), "root_method")),
                                "com.shop.Checkout.checkout()V");
    json_decref(top);
    build(&x, AGENT_A, 8, false);
    x.txs[0].name = "GET /\x01";
    assert_int_equal(cmr_metrics_add(r.m, 0, &x.b, err, sizeof err), -1);
    assert_non_null(strstr(err, "transactions[0]: the name is"));
    built_free(&x);
    rig_free(&r);
}

/* Agent `who`'s interval at base_ms + i * 10 s, without a stalled call. */
static void feed_at(rig_t *r, int who, int i, int64_t base_ms)
{
    char err[256];
    built_t x;
    build(&x, who, i, false);
    x.b.interval_start_ms = base_ms + (int64_t)i * 10000;
    assert_int_equal(cmr_metrics_add(r->m, 0, &x.b, err, sizeof err), 1);
    built_free(&x);
}

static double num(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    assert_true(json_is_number(v));
    return json_number_value(v);
}

/* A rate over a window that began before the JVMs reported divides by the time since they
 * did: the 6 intervals of the last minute over "the last hour" are per second of that
 * minute, not of the hour; a JVM that joined later is per second of its own time; a
 * window that starts after the first report divides by the whole window. */
static void test_rate_since_reporting(void **state)
{
    (void)state;
    init_ids();
    rig_t r;
    rig_new(&r);
    int64_t base = cmr_wall_ms() / 10000 * 10000 - 60000;
    for (int i = 0; i < 6; i++) {
        feed_at(&r, AGENT_A, i, base);
        if (i >= 3)
            feed_at(&r, AGENT_B, i, base);
    }
    assert_int_equal(cmr_metrics_flush(r.m), 0);

    const char *k1[] = {"env", "last"}, *v1[] = {"shop", "1h"};
    json_t *top = query(r.root, "top", k1, v1, 2);
    json_t *it = json_array_get(json_object_get(top, "items"), 0);
    assert_non_null(it);
    double secs = num(it, "rate_seconds"), count = num(it, "count");
    assert_true(secs >= 60.0 && secs < 75.0); /* from base to the query's now */
    assert_true(fabs(num(it, "rate") - count / secs) < 1e-6);
    json_decref(top);

    const char *k2[] = {"name", "last"}, *v2[] = {"Checkout.checkout", "1h"};
    json_t *jvms = query(r.root, "jvms", k2, v2, 2);
    json_t *items = json_object_get(jvms, "items");
    assert_int_equal(json_array_size(items), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *row = json_array_get(items, i);
        bool b = !strcmp(json_string_value(json_object_get(row, "agent")), "00000000000000b2");
        double s = num(row, "rate_seconds");
        if (b)
            assert_true(s >= 30.0 && s < 45.0); /* B reported from base + 30 s */
        else
            assert_true(s >= 60.0 && s < 75.0);
        assert_true(fabs(num(row, "rate") - num(row, "count") / s) < 1e-6);
    }
    json_decref(jvms);

    /* a window that starts after the first report: the window */
    char from[32], to[32];
    snprintf(from, sizeof from, "%lld", (long long)(base + 20000) / 1000);
    snprintf(to, sizeof to, "%lld", (long long)(base + 60000) / 1000);
    const char *k3[] = {"env", "from", "to"}, *v3[] = {"shop", from, to};
    top = query(r.root, "top", k3, v3, 3);
    it = json_array_get(json_object_get(top, "items"), 0);
    assert_true(fabs(num(it, "rate_seconds") - 40.0) < 1e-9);
    assert_true(fabs(num(it, "rate") - num(it, "count") / 40.0) < 1e-6);
    json_decref(top);
    rig_free(&r);

    /* a worker that keeps its marks 20 minutes: "the last hour" reaches where they may be
     * gone, so the window divides (the query's view has the default options: it reads the
     * writer's retention from the store) */
    rig_retention_10s_ms = 20 * 60000;
    rig_new(&r);
    for (int i = 0; i < 6; i++)
        feed_at(&r, AGENT_A, i, base);
    assert_int_equal(cmr_metrics_flush(r.m), 0);
    top = query(r.root, "top", k1, v1, 2);
    it = json_array_get(json_object_get(top, "items"), 0);
    assert_true(fabs(num(it, "rate_seconds") - 3600.0) < 1.0);
    json_decref(top);
    const char *v4[] = {"shop", "15m"}; /* within the 20 minutes, less the hour's margin: still the window */
    top = query(r.root, "top", k1, v4, 2);
    assert_true(fabs(num(json_array_get(json_object_get(top, "items"), 0), "rate_seconds") - 900.0) < 1.0);
    json_decref(top);
    rig_free(&r);
    rig_retention_10s_ms = 0;
}

/* The Prometheus families: cumulative histograms whose +Inf bucket is the call count. */
static void test_prometheus(void **state)
{
    (void)state;
    init_ids();
    rig_t r;
    rig_new(&r);
    for (int i = 0; i < 3; i++)
        feed(&r, i);
    cmr_metrics_publish(r.m, 0);
    cmr_buf_t out = {0};
    cmr_metrics_prometheus(r.m, &out);
    const char *t = cmr_buf_str(&out);
    assert_non_null(strstr(t, "# TYPE cmr_app_latency_seconds histogram\n"));
    assert_non_null(strstr(t, "cmr_app_latency_seconds_bucket{environment=\"shop\",kind=\"transaction\","
                              "name=\"com.shop.Checkout.checkout()V\",le=\"+Inf\"} 120\n"));
    assert_non_null(strstr(t, "cmr_app_latency_seconds_bucket{environment=\"shop\",kind=\"transaction\","
                              "name=\"com.shop.Checkout.checkout()V\",le=\"0.05\"} 0\n"));
    assert_non_null(strstr(t, "cmr_app_latency_seconds_bucket{environment=\"shop\",kind=\"transaction\","
                              "name=\"com.shop.Checkout.checkout()V\",le=\"0.1\"} 120\n"));
    assert_non_null(strstr(t, "cmr_app_errors_total{environment=\"shop\",kind=\"transaction\","
                              "name=\"com.shop.Checkout.checkout()V\"} 3\n"));
    assert_non_null(strstr(t, "cmr_metrics_batches_total 6\n"));
    /* promtool, when the machine has it, agrees that this is the exposition format */
    if (access("/usr/bin/promtool", X_OK) == 0) {
        char path[128], cmd[256];
        snprintf(path, sizeof path, "%s/metrics.txt", r.root);
        FILE *f = fopen(path, "w");
        fputs(t, f);
        fclose(f);
        snprintf(cmd, sizeof cmd, "promtool check metrics < %s > /dev/null 2>&1", path);
        assert_int_equal(system(cmd), 0);
    }
    cmr_buf_free(&out);
    rig_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rule_abnormal_and_back),
        cmocka_unit_test(test_rule_state_restored),
        cmocka_unit_test(test_duplicates_and_malformed),
        cmocka_unit_test(test_applied_offset),
        cmocka_unit_test(test_queries),
        cmocka_unit_test(test_rate_since_reporting),
        cmocka_unit_test(test_named_transactions),
        cmocka_unit_test(test_prometheus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
