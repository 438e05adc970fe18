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

/* Values put aside (CMR_METRIC_PENDING per method) reach the batch's histograms exactly:
 * each method's histogram is the one a record per call gives, whatever part of its calls
 * is still put aside when the batch is made, interval after interval. */
static void test_values_put_aside_reach_the_batch(void **state)
{
    (void)state;
    enum { METHODS = 7 };
    cmr_metric_agg_t g;
    cmr_metric_agg_init(&g, 0);
    for (int interval = 0; interval < 4; interval++) {
        cmr_hist_t want[METHODS] = {{0}};
        /* 0, 1, a few, exactly the pending size and more calls per method */
        static const int calls[METHODS] = {1, 2, 5, CMR_METRIC_PENDING, CMR_METRIC_PENDING + 1, 100, 1000};
        for (int m = 1; m < METHODS; m++)
            for (int c = 0; c < calls[m] + interval; c++) {
                int64_t ns = sample_ns((uint64_t)m);
                assert_int_equal(cmr_metric_agg_add(&g, (uint64_t)m, ns, false), 0);
                assert_int_equal(cmr_hist_record(&want[m], (uint64_t)ns, 1), 0);
            }
        cmr_metric_batch_t mb;
        assert_int_equal(cmr_metric_agg_batch(&g, 1, 0, 1000, &mb), 0);
        assert_int_equal(mb.metrics.count, METHODS - 1);
        for (size_t i = 0; i < mb.metrics.count; i++) {
            const cmr_method_metric_t *mm = &mb.metrics.items[i];
            cmr_hist_t got = {0};
            assert_int_equal(cmr_hist_decode(&got, mm->histogram.data, mm->histogram.len), 0);
            const cmr_hist_t *w = &want[mm->method_id];
            assert_int_equal(got.count, (uint64_t)mm->count);
            assert_true(got.count == w->count && got.min == w->min && got.max == w->max && got.n == w->n);
            for (size_t b = 0; b < got.n; b++)
                assert_true(got.bins[b].bucket == w->bins[b].bucket && got.bins[b].count == w->bins[b].count);
            cmr_hist_free(&got);
        }
        for (int m = 0; m < METHODS; m++)
            cmr_hist_free(&want[m]);
        cmr_metric_agg_reset(&g);
    }
    cmr_metric_agg_free(&g);
}

/* Compares a batch's decoded histograms with reference histograms (a record per value)
 * of methods 0 .. n-1, and their sums with the exact sums. */
static void expect_histograms(const cmr_metric_batch_t *mb, const cmr_hist_t *want, const double *sums, size_t n)
{
    assert_int_equal(mb->metrics.count, n);
    for (size_t i = 0; i < mb->metrics.count; i++) {
        const cmr_method_metric_t *mm = &mb->metrics.items[i];
        assert_true((uint64_t)mm->method_id < n);
        const cmr_hist_t *w = &want[mm->method_id];
        cmr_hist_t got = {0};
        assert_int_equal(cmr_hist_decode(&got, mm->histogram.data, mm->histogram.len), 0);
        assert_true(got.count == w->count && got.min == w->min && got.max == w->max && got.n == w->n);
        for (size_t b = 0; b < got.n; b++)
            assert_true(got.bins[b].bucket == w->bins[b].bucket && got.bins[b].count == w->bins[b].count);
        double diff = got.sum - sums[mm->method_id];
        assert_true(diff <= 1e-9 * sums[mm->method_id] && -diff <= 1e-9 * sums[mm->method_id]);
        cmr_hist_free(&got);
    }
}

/* Hot methods count their values in pages of the pool; once it is used up, and for calls
 * of 2^37 ns or more, values are put aside as before. Either way the histograms are those
 * of every value, interval after interval, also after an interval reset without a batch
 * (its pages are taken again, and must hold no old counts). */
static void test_counted_pages_and_the_pool_bound(void **state)
{
    (void)state;
    enum { METHODS = 1200, CALLS = 120 };
    cmr_metric_agg_t g;
    cmr_metric_agg_init(&g, 0);
    static cmr_hist_t want[METHODS];
    static double sums[METHODS];
    for (int interval = 0; interval < 4; interval++) {
        for (int c = 0; c < CALLS; c++)
            for (uint64_t m = 0; m < METHODS; m++) {
                /* spread over five or six powers of two; a few of 2^37 ns and more; a few
                 * of no time (a clock step) */
                uint64_t r = rnd();
                int64_t ns = (int64_t)(40 + (r % 4000) * (1 + (r >> 20) % 16));
                if (r % 97 == 0)
                    ns = (int64_t)(UINT64_C(1) << 37) + (int64_t)(r % 1000);
                if (r % 89 == 0)
                    ns = -5;
                assert_int_equal(cmr_metric_agg_add(&g, m, ns, false), 0);
                if (interval == 2)
                    continue; /* reset without a batch */
                assert_int_equal(cmr_hist_record(&want[m], (uint64_t)(ns < 0 ? 0 : ns), 1), 0);
                sums[m] += (double)(ns < 0 ? 0 : ns);
            }
        assert_int_equal(g.pages_cap, CMR_METRIC_PAGES); /* used up: some values put aside */
        assert_int_equal(g.pages_used, CMR_METRIC_PAGES);
        if (interval != 2) {
            cmr_metric_batch_t mb;
            assert_int_equal(cmr_metric_agg_batch(&g, 1, 0, 1000, &mb), 0);
            expect_histograms(&mb, want, sums, METHODS);
        }
        for (int m = 0; m < METHODS; m++) {
            cmr_hist_reset(&want[m]);
            sums[m] = 0;
        }
        cmr_metric_agg_reset(&g);
    }
    for (int m = 0; m < METHODS; m++)
        cmr_hist_free(&want[m]);
    cmr_metric_agg_free(&g);
}

/* A caller's hint of where a method's item is: used while the interval lasts, found again
 * after a reset (where the positions are given anew), and never mixed up between methods. */
static void test_hints(void **state)
{
    (void)state;
    cmr_metric_agg_t g;
    cmr_metric_agg_init(&g, 0);
    cmr_metric_hint_t h7 = {0}, h9 = {0};
    for (int interval = 0; interval < 3; interval++) {
        if (interval == 1) /* method 9 comes first now: it takes position 0 */
            assert_int_equal(cmr_metric_agg_add_hinted(&g, &h9, 9, 100, 100, false, NULL), 0);
        for (int c = 0; c < 50; c++) {
            assert_int_equal(cmr_metric_agg_add_hinted(&g, &h7, 7, 1000 + c, 1000 + c, false, NULL), 0);
            assert_int_equal(cmr_metric_agg_add_hinted(&g, &h9, 9, 2000 + c, 1500, true, NULL), 0);
        }
        assert_int_equal(h7.epoch, g.epoch);
        cmr_metric_batch_t mb;
        assert_int_equal(cmr_metric_agg_batch(&g, 1, 0, 1000, &mb), 0);
        assert_int_equal(mb.metrics.count, 2);
        for (size_t i = 0; i < 2; i++) {
            const cmr_method_metric_t *mm = &mb.metrics.items[i];
            bool seven = mm->method_id == 7;
            assert_true(seven || mm->method_id == 9);
            assert_int_equal(mm->count, seven ? 50 : 50 + (interval == 1));
            assert_int_equal(mm->exceptions, seven ? 0 : 50);
            assert_int_equal(mm->min_ns, seven ? 1000 : interval == 1 ? 100 : 2000);
            assert_int_equal(mm->max_ns, seven ? 1049 : 2049);
        }
        cmr_metric_agg_reset(&g);
    }
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

/* The same with a histogram record per call (cmr_hist_record): the aggregate before it put
 * values aside. */
typedef struct {
    counters_only_t c;
    cmr_hist_t hists[1024];
} record_per_call_t;

static void record_per_call_add(record_per_call_t *r, uint64_t method_id, int64_t ns)
{
    counters_add(&r->c, method_id, ns, false);
    void *slot = cmr_u64map_get(&r->c.index, method_id);
    assert_int_equal(cmr_hist_record(&r->hists[(uintptr_t)slot], (uint64_t)ns, 1), 0);
}

/* A call of method m whose calls take similar times: m's time within 2 %. */
static int64_t sample_narrow_ns(uint64_t m)
{
    uint64_t base = (m % 50 + 1) * 10000;
    return (int64_t)(base + base * (rnd() % 20) / 1000);
}

/* Prints what a sample costs the publisher: counters only, a histogram record per call,
 * and the aggregate (values put aside), on the same samples of 1,000 methods in random
 * order. Wide: latencies spread over a factor 10 and a slow tail (about 236 bins per
 * method); narrow: within 2 % (a few bins). */
static void cost_per_sample(const char *label, bool narrow)
{
    enum { METHODS = 1000, N = 2000000 };
    static uint64_t ids[N];
    static int64_t ns[N];
    for (size_t i = 0; i < N; i++) {
        ids[i] = cmr_hash_u64(rnd() % METHODS);
        ns[i] = narrow ? sample_narrow_ns(ids[i]) : sample_ns(ids[i]);
    }
    static counters_only_t c;
    memset(&c, 0, sizeof c);
    double t0 = now_ns();
    for (size_t i = 0; i < N; i++)
        counters_add(&c, ids[i], ns[i], false);
    double t1 = now_ns();
    static record_per_call_t r;
    memset(&r, 0, sizeof r);
    for (size_t i = 0; i < N; i++) /* first interval: the bins are allocated */
        record_per_call_add(&r, ids[i], ns[i]);
    for (size_t m = 0; m < r.c.n; m++) {
        cmr_hist_reset(&r.hists[m]);
        r.c.items[m].count = 0;
    }
    double t2 = now_ns();
    for (size_t i = 0; i < N; i++)
        record_per_call_add(&r, ids[i], ns[i]);
    double t3 = now_ns();
    cmr_metric_agg_t g;
    cmr_metric_agg_init(&g, 0);
    for (size_t i = 0; i < N; i++)
        cmr_metric_agg_add(&g, ids[i], ns[i], false);
    cmr_metric_batch_t mb;
    assert_int_equal(cmr_metric_agg_batch(&g, 1, 0, 10000, &mb), 0);
    /* a later interval: the histograms' bins are allocated already */
    cmr_metric_agg_reset(&g);
    double t4 = now_ns();
    for (size_t i = 0; i < N; i++)
        cmr_metric_agg_add(&g, ids[i], ns[i], false);
    double t5 = now_ns();
    assert_int_equal(cmr_metric_agg_batch(&g, 1, 0, 10000, &mb), 0);
    double t6 = now_ns();
    assert_int_equal(mb.metrics.count, METHODS);
    assert_int_equal(g.overflow, 0);
    size_t bins = 0;
    for (size_t i = 0; i < g.n; i++) {
        bins += g.hists[i].n;
        const cmr_hist_t *want = &r.hists[(uintptr_t)cmr_u64map_get(&r.c.index, (uint64_t)g.items[i].method_id)];
        assert_true(g.hists[i].count == want->count && g.hists[i].n == want->n); /* the same histograms */
    }
    print_message("per sample, %s: counters only %.1f ns, a histogram record per call %.1f ns, the aggregate "
                  "%.1f ns; %d methods, %.0f bins per method, batch encoding %.2f ms (%zu bytes)\n",
                  label, (t1 - t0) / N, (t3 - t2) / N, (t5 - t4) / N, METHODS, (double)bins / METHODS, (t6 - t5) / 1e6,
                  g.enc.len);
    cmr_u64map_free(&c.index);
    cmr_u64map_free(&r.c.index);
    for (size_t m = 0; m < 1024; m++)
        cmr_hist_free(&r.hists[m]);
    cmr_metric_agg_free(&g);
}

static void test_cost_per_sample(void **state)
{
    (void)state;
    cost_per_sample("wide", false);
    cost_per_sample("narrow", true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_histograms_decode),
        cmocka_unit_test(test_values_put_aside_reach_the_batch),
        cmocka_unit_test(test_counted_pages_and_the_pool_bound),
        cmocka_unit_test(test_hints),
        cmocka_unit_test(test_method_bound_counts_overflow),
        cmocka_unit_test(test_cost_per_sample),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
