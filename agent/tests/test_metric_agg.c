/*
 * test_metric_agg.c - the agent's per-interval timer aggregation (metric_agg.h): the
 * MetricBatch the publisher sends survives the wire with a histogram per method that
 * agrees with its count, min and max; the method bound; reset; and what a sample costs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cmr/histogram.h"
#include "cmr/map.h"
#include "cmr/wire.h"
#include "metric_agg.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15u;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

/* A call of method m: around (m + 1) x 10 us, spread over a factor 10, 1 % slow tail. */
static int64_t sample_ns(uint64_t m)
{
    uint64_t base = (m % 50 + 1) * 10000;
    uint64_t ns = base + base * (rnd() % 1000) / 100;
    if (rnd() % 100 == 0)
        ns *= 50;
    return (int64_t)ns;
}

/* Encodes the batch as the producer would, decodes it as a consumer would. */
static void round_trip(const cmr_metric_batch_t *mb, cmr_msg_t *out)
{
    cmr_buf_t wire = {0};
    char err[256];
    assert_int_equal(cmr_msg_encode(CMR_MSG_METRIC_BATCH, mb, &wire, err, sizeof err), CMR_WIRE_OK);
    assert_int_equal(cmr_msg_decode(wire.data, wire.len, out, err, sizeof err), CMR_WIRE_OK);
    assert_int_equal(out->type, CMR_MSG_METRIC_BATCH);
    cmr_buf_free(&wire);
}

static void test_batch_histograms_decode(void **state)
{
    (void)state;
    cmr_metric_agg_t g;
    cmr_metric_agg_init(&g, 0);
    enum { METHODS = 40, SAMPLES = 20000 };
    for (int i = 0; i < SAMPLES; i++) {
        uint64_t m = rnd() % METHODS;
        assert_int_equal(cmr_metric_agg_add(&g, 1000 + m, sample_ns(m), i % 17 == 0), 0);
    }
    assert_int_equal(cmr_metric_agg_add(&g, 7, -5, false), 0); /* a clock step counts as 0 ns */
    cmr_metric_batch_t mb;
    assert_int_equal(cmr_metric_agg_batch(&g, 42, 1000, 10000, &mb), 0);
    assert_int_equal(mb.metrics.count, METHODS + 1);
    assert_int_equal(mb.cpu_ns, 0); /* the first batch: no earlier reading of the CPU time */

    cmr_msg_t msg;
    round_trip(&mb, &msg);
    const cmr_metric_batch_t *d = &msg.u.metric_batch;
    assert_int_equal(d->agent_id, 42);
    assert_int_equal(d->metrics.count, METHODS + 1);
    int64_t total = 0;
    for (size_t i = 0; i < d->metrics.count; i++) {
        const cmr_method_metric_t *mm = &d->metrics.items[i];
        cmr_hist_t h = {0};
        assert_int_equal(cmr_hist_decode(&h, mm->histogram.data, mm->histogram.len), 0);
        assert_int_equal((int64_t)h.count, mm->count);
        assert_int_equal((int64_t)h.min, mm->min_ns);
        assert_int_equal((int64_t)h.max, mm->max_ns);
        assert_true(h.sum == (double)mm->sum_ns);
        uint64_t p50 = cmr_hist_quantile(&h, 0.5), p99 = cmr_hist_quantile(&h, 0.99);
        assert_true((int64_t)p50 >= mm->min_ns && (int64_t)p50 <= mm->max_ns);
        assert_true(p50 <= p99 && (int64_t)p99 <= mm->max_ns);
        total += mm->count;
        cmr_hist_free(&h);
    }
    assert_int_equal(total, SAMPLES + 1);
    cmr_msg_free(&msg);

    /* the next interval starts empty and reuses the histograms */
    cmr_metric_agg_reset(&g);
    assert_int_equal(cmr_metric_agg_batch(&g, 42, 11000, 10000, &mb), 0);
    assert_int_equal(mb.metrics.count, 0);
    assert_int_equal(cmr_metric_agg_add(&g, 5, 100, true), 0);
    assert_int_equal(cmr_metric_agg_add(&g, 5, 300, false), 0);
    volatile uint64_t spin = 0;
    for (int i = 0; i < 2000000; i++) /* some CPU time between two batches */
        spin += (uint64_t)i;
    assert_int_equal(cmr_metric_agg_batch(&g, 42, 11000, 10000, &mb), 0);
    assert_true(mb.cpu_ns > 0);
    round_trip(&mb, &msg);
    assert_int_equal(msg.u.metric_batch.cpu_ns, mb.cpu_ns);
    const cmr_method_metric_t *one = &msg.u.metric_batch.metrics.items[0];
    assert_int_equal(one->count, 2);
    assert_int_equal(one->exceptions, 1);
    cmr_hist_t h = {0};
    assert_int_equal(cmr_hist_decode(&h, one->histogram.data, one->histogram.len), 0);
    assert_int_equal(h.count, 2);
    assert_int_equal(cmr_hist_quantile(&h, 0), 100);
    assert_int_equal(cmr_hist_quantile(&h, 1), 300);
    cmr_hist_free(&h);
    cmr_msg_free(&msg);
    cmr_metric_agg_free(&g);
}

static void test_method_bound_counts_overflow(void **state)
{
    (void)state;
    cmr_metric_agg_t g;
    cmr_metric_agg_init(&g, 3);
    for (uint64_t m = 0; m < 5; m++)
        for (int k = 0; k < 4; k++)
            assert_int_equal(cmr_metric_agg_add(&g, m, 1000, false), m < 3 ? 0 : -1);
    assert_int_equal(g.n, 3);
    assert_int_equal(g.overflow, 8);
    cmr_metric_batch_t mb;
    assert_int_equal(cmr_metric_agg_batch(&g, 1, 0, 1000, &mb), 0);
    assert_int_equal(mb.metrics.count, 3);
    cmr_metric_agg_reset(&g);
    assert_int_equal(g.overflow, 0);
    assert_int_equal(cmr_metric_agg_add(&g, 4, 1000, false), 0); /* a new interval, room again */
    cmr_metric_agg_free(&g);
}

/* --- cost per sample --------------------------------------------------------------------- */

/* What the publisher did per sample before histograms: a map lookup and the counters. */
typedef struct {
    cmr_method_metric_t items[1024];
    size_t n;
    cmr_u64map_t index;
} counters_only_t;

static void counters_add(counters_only_t *c, uint64_t method_id, int64_t ns, bool thrown)
{
    bool created = false;
    void **slot = cmr_u64map_get_slot(&c->index, method_id, &created);
    assert_non_null(slot);
    if (created) {
        *slot = (void *)(uintptr_t)c->n;
        c->items[c->n++] = (cmr_method_metric_t){.method_id = (int64_t)method_id, .min_ns = ns, .max_ns = ns};
    }
    cmr_method_metric_t *m = &c->items[(uintptr_t)*slot];
    m->count++;
    m->exceptions += thrown;
    m->sum_ns += ns;
    if (ns < m->min_ns)
        m->min_ns = ns;
    if (ns > m->max_ns)
        m->max_ns = ns;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void test_cost_per_sample(void **state)
{
    (void)state;
    enum { METHODS = 1000, N = 2000000 };
    static uint64_t ids[N];
    static int64_t ns[N];
    for (size_t i = 0; i < N; i++) {
        ids[i] = cmr_hash_u64(rnd() % METHODS);
        ns[i] = sample_ns(ids[i]);
    }
    static counters_only_t c;
    double t0 = now_ns();
    for (size_t i = 0; i < N; i++)
        counters_add(&c, ids[i], ns[i], false);
    double t1 = now_ns();
    cmr_metric_agg_t g;
    cmr_metric_agg_init(&g, 0);
    for (size_t i = 0; i < N; i++)
        cmr_metric_agg_add(&g, ids[i], ns[i], false);
    double t2 = now_ns();
    cmr_metric_batch_t mb;
    assert_int_equal(cmr_metric_agg_batch(&g, 1, 0, 10000, &mb), 0);
    double t3 = now_ns();
    /* a later interval: the histograms' bins are allocated already */
    cmr_metric_agg_reset(&g);
    for (size_t i = 0; i < N; i++)
        cmr_metric_agg_add(&g, ids[i], ns[i], false);
    double t4 = now_ns();
    assert_int_equal(cmr_metric_agg_batch(&g, 1, 0, 10000, &mb), 0);
    assert_int_equal(mb.metrics.count, METHODS);
    assert_int_equal(g.overflow, 0);
    size_t bins = 0;
    for (size_t i = 0; i < g.n; i++)
        bins += g.hists[i].n;
    print_message("per sample: counters only %.1f ns, with histogram %.1f ns (first interval), %.1f ns (later "
                  "intervals); %d methods, %.0f bins per method, batch encoding %.2f ms (%zu bytes)\n",
                  (t1 - t0) / N, (t2 - t1) / N, (t4 - t3) / N, METHODS, (double)bins / METHODS, (t3 - t2) / 1e6,
                  g.enc.len);
    cmr_u64map_free(&c.index);
    cmr_metric_agg_free(&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_histograms_decode),
        cmocka_unit_test(test_method_bound_counts_overflow),
        cmocka_unit_test(test_cost_per_sample),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
