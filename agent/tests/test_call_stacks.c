/*
 * test_call_stacks.c - per-method metrics, transactions, in-flight maxima and stalled
 * calls from invocation-sequence records (call_stacks.h), as the publisher feeds them:
 * durations with exceptions and lost records, transactions only for roots that start a
 * trace, concurrency across simulated threads, the stalled scan's threshold and stack,
 * histograms that agree with the counts, a full MetricBatch through the wire codec, and
 * what an enter/exit pair costs the publisher.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "call_stacks.h"
#include "cmr/bytes.h"
#include "cmr/event.h"
#include "cmr/histogram.h"
#include "cmr/wire.h"
#include "metric_agg.h"

#define MS INT64_C(1000000)

typedef struct fixture {
    cmr_metric_agg_t methods;
    cmr_call_stacks_t cs;
} fixture_t;

static int setup(void **state)
{
    static fixture_t f;
    cmr_metric_agg_init(&f.methods, 0);
    cmr_cs_init(&f.cs, &f.methods);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    cmr_cs_free(&f->cs);
    cmr_metric_agg_free(&f->methods);
    return 0;
}

static const uint8_t trace_a[16] = {0xA1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
static const uint8_t trace_b[16] = {0xB2, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

/* The aggregate of method m in the per-method aggregate (NULL when it has none). */
static const cmr_method_metric_t *metric_of(const cmr_metric_batch_t *mb, uint64_t m)
{
    for (size_t i = 0; i < mb->metrics.count; i++)
        if ((uint64_t)mb->metrics.items[i].method_id == m)
            return &mb->metrics.items[i];
    return NULL;
}

static const cmr_transaction_metric_t *tx_of(const cmr_metric_batch_t *mb, uint64_t m)
{
    for (size_t i = 0; i < mb->transactions.count; i++)
        if ((uint64_t)mb->transactions.items[i].root_method_id == m)
            return &mb->transactions.items[i];
    return NULL;
}

static void batch(fixture_t *f, cmr_metric_batch_t *mb)
{
    assert_int_equal(cmr_metric_agg_batch(&f->methods, 7, 1000, 10000, mb), 0);
    assert_int_equal(cmr_cs_batch(&f->cs, mb), 0);
}

static void hist_agrees(cmr_bytes_t enc, int64_t count, int64_t min, int64_t max)
{
    cmr_hist_t h = {0};
    assert_int_equal(cmr_hist_decode(&h, enc.data, enc.len), 0);
    assert_int_equal((int64_t)h.count, count);
    assert_int_equal((int64_t)h.min, min);
    assert_int_equal((int64_t)h.max, max);
    cmr_hist_free(&h);
}

static void test_durations_per_method(void **state)
{
    fixture_t *f = *state;
    cmr_cs_thread_t t = {0};
    cmr_cs_enter(&f->cs, &t, 1, 0, 1, trace_a, true);
    cmr_cs_enter(&f->cs, &t, 2, 10, 2, trace_a, false);
    assert_true(cmr_cs_exit(&f->cs, &t, 2, 30, 2, false)); /* 20 ns */
    cmr_cs_enter(&f->cs, &t, 2, 40, 2, trace_a, false);
    assert_true(cmr_cs_exit(&f->cs, &t, 2, 100, 2, true)); /* 60 ns, thrown */
    assert_true(cmr_cs_exit(&f->cs, &t, 1, 200, 1, false));
    assert_int_equal(t.n, 0);

    cmr_metric_batch_t mb;
    batch(f, &mb);
    const cmr_method_metric_t *b = metric_of(&mb, 2), *a = metric_of(&mb, 1);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(b->count, 2);
    assert_int_equal(b->exceptions, 1);
    assert_int_equal(b->sum_ns, 80);
    assert_int_equal(b->min_ns, 20);
    assert_int_equal(b->max_ns, 60);
    assert_int_equal(b->max_in_flight, 1);
    hist_agrees(b->histogram, 2, 20, 60);
    assert_int_equal(b->slowest_trace.len, 16);
    assert_memory_equal(b->slowest_trace.data, trace_a, 16);
    assert_int_equal(a->count, 1);
    assert_int_equal(a->sum_ns, 200);
    assert_int_equal(a->exceptions, 0);
    /* self time: the callees' 80 ns are not the root's own (the overhead budget's input) */
    assert_int_equal(a->self_ns, 120);
    assert_int_equal(b->self_ns, 80);
    cmr_metric_agg_reset(&f->methods);
    cmr_cs_interval_reset(&f->cs);
    cmr_cs_thread_end(&f->cs, &t);
}

/* The slowest call's trace is the one kept, whichever came first. */
static void test_slowest_trace_is_the_slowest_calls(void **state)
{
    fixture_t *f = *state;
    cmr_cs_thread_t t = {0};
    cmr_cs_enter(&f->cs, &t, 5, 0, 1, trace_a, true);
    cmr_cs_exit(&f->cs, &t, 5, 100, 1, false);
    cmr_cs_enter(&f->cs, &t, 5, 1000, 1, trace_b, true);
    cmr_cs_exit(&f->cs, &t, 5, 1500, 1, false); /* slowest: 500 */
    cmr_cs_enter(&f->cs, &t, 5, 2000, 1, trace_a, true);
    cmr_cs_exit(&f->cs, &t, 5, 2200, 1, false);
    cmr_cs_enter(&f->cs, &t, 5, 3000, 1, NULL, false); /* no trace: not a candidate */
    cmr_cs_exit(&f->cs, &t, 5, 3100, 1, false);
    cmr_metric_batch_t mb;
    batch(f, &mb);
    assert_memory_equal(metric_of(&mb, 5)->slowest_trace.data, trace_b, 16);
    assert_memory_equal(tx_of(&mb, 5)->slowest_trace.data, trace_b, 16);
    assert_int_equal(tx_of(&mb, 5)->count, 3);
    cmr_metric_agg_reset(&f->methods);
    cmr_cs_interval_reset(&f->cs);
    cmr_cs_thread_end(&f->cs, &t);
}

static void test_lost_records(void **state)
{
    fixture_t *f = *state;
    cmr_cs_thread_t t = {0};
    uint32_t max;
    cmr_cs_enter(&f->cs, &t, 1, 0, 1, trace_a, false);
    cmr_cs_enter(&f->cs, &t, 2, 10, 2, trace_a, false);
    cmr_cs_enter(&f->cs, &t, 3, 20, 3, trace_a, false);
    assert_int_equal(cmr_cs_in_flight(&f->cs, 3, NULL), 1);
    /* the exits of 3 and 2 were lost: an enter at depth 2 discards both */
    cmr_cs_enter(&f->cs, &t, 4, 50, 2, trace_a, false);
    assert_int_equal(t.n, 2);
    assert_int_equal(cmr_cs_in_flight(&f->cs, 2, &max), 0);
    assert_int_equal(max, 1);
    assert_int_equal(cmr_cs_in_flight(&f->cs, 3, NULL), 0);
    /* an exit whose enter was lost (depth 3 while the innermost frame is at 2) */
    assert_false(cmr_cs_exit(&f->cs, &t, 9, 55, 3, false));
    /* an exit of a call redefined while it ran (aux 0) */
    assert_false(cmr_cs_exit(&f->cs, &t, 4, 56, 0, false));
    assert_true(cmr_cs_exit(&f->cs, &t, 4, 60, 2, false));
    /* the exit at depth 1 of another method: both records lost, nothing recorded */
    cmr_cs_enter(&f->cs, &t, 6, 70, 2, trace_a, false);
    assert_false(cmr_cs_exit(&f->cs, &t, 7, 80, 1, false)); /* discards 6 (deeper) and 1 (mismatch) */
    assert_int_equal(t.n, 0);
    assert_int_equal(cmr_cs_in_flight(&f->cs, 1, NULL), 0);
    assert_int_equal(cmr_cs_in_flight(&f->cs, 6, NULL), 0);

    cmr_metric_batch_t mb;
    batch(f, &mb);
    assert_int_equal(mb.metrics.count, 1); /* only method 4 completed */
    assert_int_equal(metric_of(&mb, 4)->count, 1);
    assert_int_equal(metric_of(&mb, 4)->sum_ns, 10);
    assert_int_equal(mb.transactions.count, 0);
    cmr_metric_agg_reset(&f->methods);
    cmr_cs_interval_reset(&f->cs);
    cmr_cs_thread_end(&f->cs, &t);
}

/* Deeper than the bound: the frames are counted, not kept; the ones above still time. */
static void test_depth_bound(void **state)
{
    fixture_t *f = *state;
    cmr_cs_thread_t t = {0};
    enum { DEPTH = CMR_CS_MAX_DEPTH + 44 };
    for (uint32_t d = 1; d <= DEPTH; d++)
        cmr_cs_enter(&f->cs, &t, 100, (int64_t)d, d, trace_a, d == 1);
    assert_int_equal(t.n, CMR_CS_MAX_DEPTH);
    assert_int_equal(t.deep, 44);
    assert_int_equal(f->cs.not_kept, 44);
    assert_int_equal(cmr_cs_in_flight(&f->cs, 100, NULL), CMR_CS_MAX_DEPTH);
    int recorded = 0;
    for (uint32_t d = DEPTH; d >= 1; d--)
        recorded += cmr_cs_exit(&f->cs, &t, 100, 1000, d, false);
    assert_int_equal(recorded, CMR_CS_MAX_DEPTH);
    assert_int_equal(t.n, 0);
    assert_int_equal(t.deep, 0);
    cmr_metric_batch_t mb;
    batch(f, &mb);
    assert_int_equal(metric_of(&mb, 100)->count, CMR_CS_MAX_DEPTH);
    assert_int_equal(metric_of(&mb, 100)->max_in_flight, CMR_CS_MAX_DEPTH);
    assert_int_equal(tx_of(&mb, 100)->count, 1);
    cmr_metric_agg_reset(&f->methods);
    cmr_cs_interval_reset(&f->cs);
    cmr_cs_thread_end(&f->cs, &t);
}

/* Roots of segments without a parent are transactions; continuations are not; neither are
 * inner calls of the same method. */
static void test_transactions_only_for_trace_roots(void **state)
{
    fixture_t *f = *state;
    cmr_cs_thread_t starts = {0}, continues = {0};
    enum { ROOTS = 25 };
    for (int i = 0; i < ROOTS; i++) {
        int64_t t0 = i * 1000;
        cmr_cs_enter(&f->cs, &starts, 10, t0, 1, trace_a, true);
        cmr_cs_enter(&f->cs, &starts, 10, t0 + 1, 2, trace_a, true); /* recursion: not a root */
        cmr_cs_exit(&f->cs, &starts, 10, t0 + 2, 2, false);
        cmr_cs_exit(&f->cs, &starts, 10, t0 + 100 + i, 1, i % 5 == 0);
        /* the same entry point continuing another thread's trace */
        cmr_cs_enter(&f->cs, &continues, 10, t0, 1, trace_b, false);
        cmr_cs_exit(&f->cs, &continues, 10, t0 + 5000, 1, false);
    }
    cmr_metric_batch_t mb;
    batch(f, &mb);
    assert_int_equal(mb.transactions.count, 1);
    const cmr_transaction_metric_t *tx = tx_of(&mb, 10);
    assert_non_null(tx);
    assert_int_equal(tx->count, ROOTS);
    assert_int_equal(tx->exceptions, ROOTS / 5);
    assert_int_equal(tx->min_ns, 100);
    assert_int_equal(tx->max_ns, 100 + ROOTS - 1);
    assert_string_equal(tx->name, "");
    assert_int_equal(tx->max_in_flight, 1);
    hist_agrees(tx->histogram, tx->count, tx->min_ns, tx->max_ns);
    assert_int_equal(metric_of(&mb, 10)->count, 3 * ROOTS); /* every call of the method */
    hist_agrees(metric_of(&mb, 10)->histogram, 3 * ROOTS, 1, 5000);
    cmr_metric_agg_reset(&f->methods);
    cmr_cs_interval_reset(&f->cs);
    batch(f, &mb);
    assert_int_equal(mb.transactions.count, 0); /* the next interval starts empty */
    cmr_cs_thread_end(&f->cs, &starts);
    cmr_cs_thread_end(&f->cs, &continues);
}

static const cmr_transaction_metric_t *tx_named(const cmr_metric_batch_t *mb, const char *name)
{
    for (size_t i = 0; i < mb->transactions.count; i++)
        if (!strcmp(mb->transactions.items[i].name, name))
            return &mb->transactions.items[i];
    return NULL;
}

static void name_tx(fixture_t *f, cmr_cs_thread_t *t, const char *name)
{
    cmr_cs_name_transaction(&f->cs, t, name, strlen(name));
}

/* A request's route names its transaction: transactions of two root methods with the same
 * name are one, timed and counted in flight under the name, reported with the root method
 * seen first; an unnamed one of the same root stays apart; a root call that continues
 * another thread's trace, or a call below the root, is named nothing; a name still open at
 * the interval's end is reported in the next one; past the bound on the names ever given,
 * new ones stay under their root method while the names given go on. */
static void test_named_transactions(void **state)
{
    fixture_t *f = *state;
    cmr_cs_thread_t a = {0}, b = {0}, c = {0}, d = {0}, e = {0};
    cmr_cs_enter(&f->cs, &a, 10, 0, 1, trace_a, true);
    name_tx(f, &a, "GET /shop/cart");
    name_tx(f, &a, "GET /elsewhere"); /* the first name stays */
    cmr_cs_enter(&f->cs, &b, 20, 1, 1, trace_b, true);
    cmr_cs_enter(&f->cs, &b, 21, 2, 2, trace_b, true);
    name_tx(f, &b, "GET /shop/cart");
    cmr_cs_enter(&f->cs, &c, 10, 3, 1, trace_a, true);  /* unnamed, same root as a */
    cmr_cs_enter(&f->cs, &d, 10, 4, 1, trace_b, false); /* continues a trace: no transaction */
    name_tx(f, &d, "GET /shop/cart");
    cmr_cs_enter(&f->cs, &e, 30, 5, 2, trace_a, true); /* no root frame */
    name_tx(f, &e, "GET /nowhere");
    assert_int_equal(cmr_u64map_count(&f->cs.names), 1);
    assert_true(cmr_cs_exit(&f->cs, &a, 10, 100, 1, false));
    assert_true(cmr_cs_exit(&f->cs, &b, 21, 50, 2, false));
    assert_true(cmr_cs_exit(&f->cs, &b, 20, 201, 1, true));
    assert_true(cmr_cs_exit(&f->cs, &c, 10, 53, 1, false));
    assert_true(cmr_cs_exit(&f->cs, &d, 10, 404, 1, false));
    cmr_cs_thread_end(&f->cs, &e);
    cmr_cs_enter(&f->cs, &a, 40, 300, 1, trace_a, true); /* open across the interval's end */
    name_tx(f, &a, "POST /shop/order");
    cmr_metric_batch_t mb;
    batch(f, &mb);
    assert_int_equal(mb.transactions.count, 2);
    const cmr_transaction_metric_t *cart = tx_named(&mb, "GET /shop/cart");
    assert_non_null(cart);
    assert_int_equal(cart->root_method_id, 10);
    assert_int_equal(cart->count, 2);
    assert_int_equal(cart->exceptions, 1);
    assert_int_equal(cart->min_ns, 100);
    assert_int_equal(cart->max_ns, 200);
    assert_int_equal(cart->max_in_flight, 2);
    hist_agrees(cart->histogram, 2, 100, 200);
    const cmr_transaction_metric_t *plain = tx_named(&mb, "");
    assert_non_null(plain);
    assert_int_equal(plain->root_method_id, 10);
    assert_int_equal(plain->count, 1);
    assert_int_equal(plain->max_in_flight, 1); /* a was counted under its name once named */
    cmr_metric_agg_reset(&f->methods);
    cmr_cs_interval_reset(&f->cs);
    assert_true(cmr_cs_exit(&f->cs, &a, 40, 350, 1, false));
    batch(f, &mb);
    assert_int_equal(mb.transactions.count, 1);
    assert_int_equal(tx_named(&mb, "POST /shop/order")->root_method_id, 40);
    assert_int_equal(tx_named(&mb, "POST /shop/order")->count, 1);
    cmr_metric_agg_reset(&f->methods);
    cmr_cs_interval_reset(&f->cs);

    /* the bound: names past CMR_CS_MAX_NAMES (the 2 given above count) leave their
     * transactions by root method, in later intervals too; a name given goes on */
    cmr_cs_thread_t many[CMR_CS_MAX_NAMES + 1];
    memset(many, 0, sizeof many);
    char name[32];
    for (int i = 0; i <= CMR_CS_MAX_NAMES; i++) {
        cmr_cs_enter(&f->cs, &many[i], 50, i, 1, trace_a, true);
        snprintf(name, sizeof name, "GET /r%d", i);
        name_tx(f, &many[i], name);
    }
    assert_int_equal(cmr_u64map_count(&f->cs.names), CMR_CS_MAX_NAMES);
    assert_int_equal(f->cs.unnamed, 3);
    for (int i = 0; i <= CMR_CS_MAX_NAMES; i++)
        assert_true(cmr_cs_exit(&f->cs, &many[i], 50, 10000 + i, 1, false));
    batch(f, &mb);
    assert_int_equal(mb.transactions.count, CMR_CS_MAX_NAMES - 2 + 1);
    assert_int_equal(tx_named(&mb, "")->root_method_id, 50);
    assert_int_equal(tx_named(&mb, "")->count, 3);
    assert_int_equal(tx_named(&mb, "GET /r7")->root_method_id, 50);
    cmr_metric_agg_reset(&f->methods);
    cmr_cs_interval_reset(&f->cs);
    cmr_cs_enter(&f->cs, &many[0], 60, 20000, 1, trace_a, true); /* given before: still named */
    name_tx(f, &many[0], "GET /shop/cart");
    cmr_cs_enter(&f->cs, &many[1], 60, 20000, 1, trace_a, true); /* new: not any more */
    name_tx(f, &many[1], "GET /r9999");
    assert_true(cmr_cs_exit(&f->cs, &many[0], 60, 20100, 1, false));
    assert_true(cmr_cs_exit(&f->cs, &many[1], 60, 20100, 1, false));
    batch(f, &mb);
    assert_int_equal(mb.transactions.count, 2);
    assert_int_equal(tx_named(&mb, "GET /shop/cart")->root_method_id, 10); /* first seen with */
    assert_int_equal(tx_named(&mb, "")->root_method_id, 60);
    cmr_metric_agg_reset(&f->methods);
    cmr_cs_interval_reset(&f->cs);
    for (int i = 0; i <= CMR_CS_MAX_NAMES; i++)
        cmr_cs_thread_end(&f->cs, &many[i]);
    cmr_cs_thread_end(&f->cs, &a);
    cmr_cs_thread_end(&f->cs, &b);
    cmr_cs_thread_end(&f->cs, &c);
    cmr_cs_thread_end(&f->cs, &d);
}

/* The most frames of a method open at once across threads; the maximum restarts from the
 * current level each interval; a thread that ends inside a call no longer counts. */
static void test_max_in_flight_across_threads(void **state)
{
    fixture_t *f = *state;
    enum { THREADS = 6 };
    cmr_cs_thread_t t[THREADS] = {0};
    /* threads 0..5 enter M at times 0..5; 0..2 leave before 3..5 come in: at most 3 open */
    for (int i = 0; i < THREADS; i++) {
        if (i >= 3)
            assert_true(cmr_cs_exit(&f->cs, &t[i - 3], 50, 10 + i, 1, false));
        cmr_cs_enter(&f->cs, &t[i], 50, i, 1, trace_a, true);
    }
    uint32_t max;
    assert_int_equal(cmr_cs_in_flight(&f->cs, 50, &max), 3);
    assert_int_equal(max, 3);
    /* thread 3 also runs M recursively: 4 open */
    cmr_cs_enter(&f->cs, &t[3], 50, 20, 2, trace_a, false);
    assert_true(cmr_cs_exit(&f->cs, &t[3], 50, 21, 2, false));
    assert_true(cmr_cs_exit(&f->cs, &t[4], 50, 30, 1, false));
    cmr_metric_batch_t mb;
    batch(f, &mb);
    assert_int_equal(metric_of(&mb, 50)->max_in_flight, 4);
    assert_int_equal(tx_of(&mb, 50)->max_in_flight, 3); /* the recursion is no transaction */
    cmr_metric_agg_reset(&f->methods);
    cmr_cs_interval_reset(&f->cs);

    /* next interval: 2 still open (threads 3 and 5); thread 5 ends inside its call */
    assert_int_equal(cmr_cs_in_flight(&f->cs, 50, &max), 2);
    assert_int_equal(max, 2);
    cmr_cs_thread_end(&f->cs, &t[5]);
    assert_int_equal(cmr_cs_in_flight(&f->cs, 50, NULL), 1);
    assert_true(cmr_cs_exit(&f->cs, &t[3], 50, 100, 1, false));
    batch(f, &mb);
    assert_int_equal(metric_of(&mb, 50)->max_in_flight, 2);
    assert_int_equal(tx_of(&mb, 50)->max_in_flight, 2);
    cmr_metric_agg_reset(&f->methods);
    cmr_cs_interval_reset(&f->cs);
    assert_int_equal(cmr_u64map_count(&f->cs.open), 0); /* nothing open: forgotten */
    for (int i = 0; i < THREADS; i++)
        cmr_cs_thread_end(&f->cs, &t[i]);
}

static void test_stalled_scan(void **state)
{
    fixture_t *f = *state;
    cmr_cs_thread_t t = {0}, idle = {0};
    int64_t offset = INT64_C(1700000000000) * MS;
    cmr_cs_enter(&f->cs, &t, 0x1111, 0, 1, trace_a, true);
    cmr_cs_enter(&f->cs, &t, 0x2222, 500 * MS, 2, trace_a, false);
    cmr_cs_enter(&f->cs, &t, 0x3333, 600 * MS, 3, trace_a, false);
    cmr_cs_exit(&f->cs, &t, 0x3333, 700 * MS, 3, false);
    cmr_cs_enter(&f->cs, &t, 0x0102030405060708, 1000 * MS, 3, trace_a, false);
    uint8_t stack[CMR_CS_STACK_BYTES];
    cmr_stalled_call_t sc;
    int64_t now = 12000 * MS;
    assert_true(cmr_cs_stalled(&t, now, 10000 * MS, offset, &sc, stack));
    assert_int_equal(sc.method_id, 0x0102030405060708);
    assert_int_equal(sc.running_ms, 11000);
    assert_int_equal(sc.started_ms, 1700000000000 + 1000);
    assert_int_equal(sc.trace_id.len, 16);
    assert_memory_equal(sc.trace_id.data, trace_a, 16);
    assert_int_equal(sc.stack.len, 24);
    assert_int_equal(cmr_be64(sc.stack.data), 0x1111);
    assert_int_equal(cmr_be64(sc.stack.data + 8), 0x2222);
    assert_int_equal(cmr_be64(sc.stack.data + 16), 0x0102030405060708);
    /* the innermost frame decides: the root has run 12 s, the innermost call 11 s */
    assert_false(cmr_cs_stalled(&t, now, 11500 * MS, offset, &sc, stack));
    assert_false(cmr_cs_stalled(&t, now, 0, offset, &sc, stack)); /* 0: disabled */
    assert_false(cmr_cs_stalled(&idle, now, 1, offset, &sc, stack));
    /* still running an interval later: reported again, longer */
    cmr_metric_agg_reset(&f->methods);
    cmr_cs_interval_reset(&f->cs);
    assert_true(cmr_cs_stalled(&t, now + 10000 * MS, 10000 * MS, offset, &sc, stack));
    assert_int_equal(sc.running_ms, 21000);
    /* once it ended, its caller is the innermost frame (started at 500 ms) */
    cmr_cs_exit(&f->cs, &t, 0x0102030405060708, now + 10001 * MS, 3, false);
    assert_true(cmr_cs_stalled(&t, now + 10001 * MS, 10000 * MS, offset, &sc, stack));
    assert_int_equal(sc.method_id, 0x2222);
    assert_int_equal(sc.stack.len, 16);
    cmr_cs_thread_end(&f->cs, &t);
    assert_false(cmr_cs_stalled(&t, now, 1, offset, &sc, stack));
    cmr_metric_agg_reset(&f->methods);
    cmr_cs_interval_reset(&f->cs);
}

/* Everything the publisher puts in a MetricBatch survives the wire. */
static void test_full_batch_round_trip(void **state)
{
    fixture_t *f = *state;
    cmr_cs_thread_t t = {0}, stuck = {0};
    cmr_cs_enter(&f->cs, &stuck, 1, 0, 1, trace_b, true); /* open while the other thread runs */
    cmr_cs_enter(&f->cs, &stuck, 4, 1 * MS, 2, trace_b, false);
    for (int i = 0; i < 100; i++) {
        int64_t t0 = i * 10000;
        cmr_cs_enter(&f->cs, &t, 1, t0, 1, trace_a, true);
        cmr_cs_enter(&f->cs, &t, 2, t0 + 10, 2, trace_a, false);
        cmr_cs_exit(&f->cs, &t, 2, t0 + 10 + 37 * (i % 7), 2, i % 10 == 0);
        cmr_cs_exit(&f->cs, &t, 1, t0 + 2000 + i, 1, false);
    }
    cmr_metric_agg_add(&f->methods, 3, 12345, false); /* a timer sample alongside */
    cmr_metric_batch_t mb;
    batch(f, &mb);
    uint8_t stack[CMR_CS_STACK_BYTES];
    cmr_stalled_call_t sc;
    assert_true(cmr_cs_stalled(&stuck, 5000 * MS, 1000 * MS, 0, &sc, stack));
    sc.thread_id = 77;
    sc.thread_name = "stuck-thread";
    mb.stalled.items = &sc;
    mb.stalled.count = 1;
    mb.environment_id = "prod";
    mb.samples_dropped = 3;

    cmr_buf_t wire = {0};
    char err[256];
    cmr_msg_t msg;
    assert_int_equal(cmr_msg_encode(CMR_MSG_METRIC_BATCH, &mb, &wire, err, sizeof err), CMR_WIRE_OK);
    assert_int_equal(cmr_msg_decode(wire.data, wire.len, &msg, err, sizeof err), CMR_WIRE_OK);
    cmr_buf_free(&wire);
    const cmr_metric_batch_t *d = &msg.u.metric_batch;
    assert_string_equal(d->environment_id, "prod");
    assert_int_equal(d->samples_dropped, 3);
    assert_int_equal(d->metrics.count, 3);
    for (size_t i = 0; i < d->metrics.count; i++) {
        const cmr_method_metric_t *m = &d->metrics.items[i];
        hist_agrees(m->histogram, m->count, m->min_ns, m->max_ns);
        assert_int_equal(m->max_in_flight, m->method_id == 3 ? 0 : m->method_id == 1 ? 2 : 1);
        assert_int_equal(m->slowest_trace.len, m->method_id == 3 ? 0 : 16);
    }
    assert_int_equal(metric_of(d, 2)->count, 100);
    assert_int_equal(metric_of(d, 2)->exceptions, 10);
    assert_int_equal(d->transactions.count, 1);
    const cmr_transaction_metric_t *tx = &d->transactions.items[0];
    assert_int_equal(tx->root_method_id, 1);
    assert_int_equal(tx->count, 100);
    assert_int_equal(tx->min_ns, 2000);
    assert_int_equal(tx->max_ns, 2099);
    assert_int_equal(tx->max_in_flight, 2);
    assert_memory_equal(tx->slowest_trace.data, trace_a, 16);
    hist_agrees(tx->histogram, 100, 2000, 2099);
    assert_int_equal(d->stalled.count, 1);
    const cmr_stalled_call_t *s = &d->stalled.items[0];
    assert_int_equal(s->thread_id, 77);
    assert_string_equal(s->thread_name, "stuck-thread");
    assert_int_equal(s->method_id, 4);
    assert_int_equal(s->running_ms, 4999);
    assert_memory_equal(s->trace_id.data, trace_b, 16);
    assert_int_equal(s->stack.len, 16);
    assert_int_equal(cmr_be64(s->stack.data), 1);
    assert_int_equal(cmr_be64(s->stack.data + 8), 4);
    cmr_msg_free(&msg);
    cmr_metric_agg_reset(&f->methods);
    cmr_cs_interval_reset(&f->cs);
    cmr_cs_thread_end(&f->cs, &t);
    cmr_cs_thread_end(&f->cs, &stuck);
}

/* --- cost per enter/exit pair ---------------------------------------------------------------- */

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* The records of TREES call trees of 8 threads, 1000 methods, depth 10 (a MooBench-like
 * shape), as a ring holds them; `spread`: durations spread over 0..100 us (many histogram
 * bins per method) instead of nearly constant ones. */
enum { B_THREADS = 8, B_METHODS = 1000, B_TREES = 100000, B_DEPTH = 10, B_RECORDS = B_TREES * B_DEPTH * 2 };

static uint8_t *bench_records(bool spread)
{
    uint8_t *recs = malloc((size_t)B_RECORDS * CMR_EVENT_RECORD_SIZE);
    assert_non_null(recs);
    uint64_t ids[B_METHODS];
    for (int i = 0; i < B_METHODS; i++)
        ids[i] = cmr_hash_u64((uint64_t)i + 1);
    size_t n = 0;
    uint64_t ts = 0;
    for (size_t k = 0; k < B_TREES; k++) {
        for (uint32_t d = 1; d <= B_DEPTH; d++)
            cmr_event_write(recs, n++, &(cmr_event_t){ids[(k * 7 + d) % B_METHODS], ts += 37, CMR_EVENT_ENTER, d});
        for (uint32_t d = B_DEPTH; d >= 1; d--) {
            ts += 41 + (spread ? k * 2654435761u % 100000 : k % 3);
            cmr_event_write(recs, n++, &(cmr_event_t){ids[(k * 7 + d) % B_METHODS], ts, CMR_EVENT_EXIT, d});
        }
    }
    return recs;
}

/* Drains the records as the publisher does: each one copied into an event batch (what it
 * did before), and, with_stacks, fed to the call stacks too (what it does now). */
static double bench_drain(fixture_t *f, const uint8_t *recs, bool with_stacks)
{
    static uint8_t batch[4096 * CMR_EVENT_RECORD_SIZE];
    cmr_cs_thread_t t[B_THREADS] = {0};
    double t0 = now_ns();
    for (size_t i = 0; i < B_RECORDS; i++) {
        cmr_event_t ev;
        cmr_event_read(recs, i, &ev);
        cmr_event_write(batch, i % 4096, &ev);
        if (!with_stacks)
            continue;
        cmr_cs_thread_t *th = &t[i / (B_DEPTH * 2) % B_THREADS]; /* one tree per thread in turn */
        if (ev.kind == CMR_EVENT_ENTER)
            cmr_cs_enter(&f->cs, th, ev.method_id, (int64_t)ev.timestamp_ns, ev.aux, trace_a, ev.aux == 1);
        else
            cmr_cs_exit(&f->cs, th, ev.method_id, (int64_t)ev.timestamp_ns, ev.aux, false);
    }
    double ns = (now_ns() - t0) / (B_RECORDS / 2);
    assert_int_equal(batch[16] != 0xFF, 1); /* keep the copies */
    for (int i = 0; i < B_THREADS; i++)
        cmr_cs_thread_end(&f->cs, &t[i]);
    return ns;
}

/* What an enter/exit pair costs the publisher before and after the call stacks, in the
 * first interval (histogram bins allocated) and a later one. Printed, not asserted
 * (beyond the counts). */
static void test_cost_per_pair(void **state)
{
    fixture_t *f = *state;
    for (int spread = 0; spread <= 1; spread++) {
        uint8_t *recs = bench_records(spread);
        double before = bench_drain(f, recs, false);
        double first = bench_drain(f, recs, true);
        cmr_metric_batch_t mb;
        batch(f, &mb);
        int64_t total = 0;
        for (size_t i = 0; i < mb.metrics.count; i++)
            total += mb.metrics.items[i].count;
        assert_int_equal(total, B_RECORDS / 2);
        assert_int_equal(mb.transactions.count, B_METHODS); /* roots ids[(7k + 1) % 1000]: every one */
        cmr_metric_agg_reset(&f->methods);
        cmr_cs_interval_reset(&f->cs);
        double later = bench_drain(f, recs, true);
        cmr_metric_agg_reset(&f->methods);
        cmr_cs_interval_reset(&f->cs);
        print_message("publisher per enter/exit pair (%s durations): before %.1f ns, with call stacks %.1f ns (first "
                      "interval), %.1f ns (later intervals); %d pairs, %zu methods\n",
                      spread ? "spread" : "constant", before, first, later, B_RECORDS / 2, mb.metrics.count);
        free(recs);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_durations_per_method, setup, teardown),
        cmocka_unit_test_setup_teardown(test_slowest_trace_is_the_slowest_calls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lost_records, setup, teardown),
        cmocka_unit_test_setup_teardown(test_depth_bound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_transactions_only_for_trace_roots, setup, teardown),
        cmocka_unit_test_setup_teardown(test_named_transactions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_max_in_flight_across_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stalled_scan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_batch_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cost_per_pair, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
