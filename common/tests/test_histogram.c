/*
 * test_histogram.c - the toolbox's histogram (cmr/histogram.h) against exact percentiles:
 * bucket layout, relative error on several distributions, exact merges, sorted runs
 * recorded in one pass, the wire encoding and its refusal of damaged bytes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cmr/histogram.h"

static uint64_t rng = 88172645463325252ULL;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_bucket_layout(void **state)
{
    (void)state;
    for (uint64_t v = 0; v < 128; v++) /* small values are exact */
        assert_int_equal(cmr_hist_bucket_low(cmr_hist_bucket(v)), v);
    for (unsigned b = 0; b + 1 < CMR_HIST_BUCKETS; b++) {
        assert_true(cmr_hist_bucket_high((uint16_t)b) + 1 == cmr_hist_bucket_low((uint16_t)(b + 1)));
        assert_int_equal(cmr_hist_bucket(cmr_hist_bucket_low((uint16_t)b)), b);
        assert_int_equal(cmr_hist_bucket(cmr_hist_bucket_high((uint16_t)b)), b);
        /* half a bucket is at most 0.78 % of its values */
        uint64_t lo = cmr_hist_bucket_low((uint16_t)b), hi = cmr_hist_bucket_high((uint16_t)b);
        if (lo)
            assert_true((double)(hi - lo) / 2 / (double)lo <= 1.0 / 128 + 1e-12);
    }
    assert_true(cmr_hist_bucket_high(CMR_HIST_BUCKETS - 1) == UINT64_MAX);
    assert_int_equal(cmr_hist_bucket(UINT64_MAX), CMR_HIST_BUCKETS - 1);
}

/* Records n values from gen, then checks every percentile against the sorted values. */
static void check_distribution(uint64_t (*gen)(void), size_t n)
{
    uint64_t *v = malloc(n * sizeof *v);
    cmr_hist_t h = {0};
    for (size_t i = 0; i < n; i++) {
        v[i] = gen();
        assert_int_equal(cmr_hist_record(&h, v[i], 1), 0);
    }
    qsort(v, n, sizeof *v, cmp_u64);
    assert_true(h.count == n);
    assert_true(h.min == v[0] && h.max == v[n - 1]);
    static const double qs[] = {0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999};
    for (size_t k = 0; k < sizeof qs / sizeof qs[0]; k++) {
        size_t rank = (size_t)(qs[k] * (double)n);
        if ((double)rank < qs[k] * (double)n)
            rank++;
        uint64_t exact = v[rank - 1], est = cmr_hist_quantile(&h, qs[k]);
        double err = exact ? ((double)est - (double)exact) / (double)exact : (double)est;
        if (err < 0)
            err = -err;
        if (err > 1.0 / 128 + 1e-9)
            fail_msg("q=%.3f exact=%llu estimate=%llu error=%.4f", qs[k], (unsigned long long)exact,
                     (unsigned long long)est, err);
    }
    assert_true(cmr_hist_quantile(&h, 0) == v[0]);
    assert_true(cmr_hist_quantile(&h, 1) == v[n - 1]);
    cmr_hist_free(&h);
    free(v);
}

static uint64_t gen_log_uniform(void) /* 1 ns .. 2^40 ns, every scale equally */
{
    unsigned e = (unsigned)(next_rand() % 40);
    return (1ULL << e) + next_rand() % (1ULL << e);
}
static uint64_t gen_narrow(void) /* a fast method: 180..220 ns */
{
    return 180 + next_rand() % 41;
}
static uint64_t gen_bimodal(void) /* cache hits and misses */
{
    return next_rand() % 10 ? 50000 + next_rand() % 5000 : 20000000 + next_rand() % 3000000;
}
static uint64_t gen_small(void) /* exact range */
{
    return next_rand() % 128;
}

static void test_relative_error(void **state)
{
    (void)state;
    check_distribution(gen_log_uniform, 200000);
    check_distribution(gen_narrow, 50000);
    check_distribution(gen_bimodal, 100000);
    check_distribution(gen_small, 10000);
    cmr_hist_t empty = {0};
    assert_int_equal(cmr_hist_quantile(&empty, 0.5), 0);
}

static void test_merge_is_exact(void **state)
{
    (void)state;
    cmr_hist_t a = {0}, b = {0}, all = {0};
    for (int i = 0; i < 50000; i++) {
        uint64_t v = gen_log_uniform();
        assert_int_equal(cmr_hist_record(i % 3 ? &a : &b, v, 1), 0);
        assert_int_equal(cmr_hist_record(&all, v, 1), 0);
    }
    assert_int_equal(cmr_hist_merge(&a, &b), 0);
    assert_true(a.count == all.count && a.min == all.min && a.max == all.max && a.n == all.n);
    for (size_t i = 0; i < a.n; i++)
        assert_true(a.bins[i].bucket == all.bins[i].bucket && a.bins[i].count == all.bins[i].count);
    for (double q = 0; q <= 1.0; q += 0.05)
        assert_true(cmr_hist_quantile(&a, q) == cmr_hist_quantile(&all, q));
    cmr_hist_t empty = {0};
    assert_int_equal(cmr_hist_merge(&empty, &a), 0); /* into an empty one */
    assert_true(empty.count == a.count && empty.min == a.min);
    cmr_hist_reset(&b);
    assert_int_equal(cmr_hist_merge(&a, &b), 0); /* an empty one changes nothing */
    assert_true(a.count == all.count);
    assert_int_equal(cmr_hist_record(&a, 5, 0), 0);
    assert_true(a.count == all.count);
    cmr_hist_free(&a);
    cmr_hist_free(&b);
    cmr_hist_free(&all);
    cmr_hist_free(&empty);
}

/* Sorted runs recorded in one pass give exactly what one record per value gives: runs
 * of 1 to 40 values (past the 32 kept on the stack), into empty and full histograms,
 * repeated values, new buckets below, between and above the existing ones. */
static void test_record_sorted_is_record(void **state)
{
    (void)state;
    cmr_hist_t one = {0}, runs = {0};
    uint64_t v[40];
    for (int round = 0; round < 3000; round++) {
        size_t n = 1 + next_rand() % 40;
        for (size_t i = 0; i < n; i++)
            v[i] = round % 7 == 0 ? 1000 : gen_log_uniform(); /* some runs of one value */
        qsort(v, n, sizeof v[0], cmp_u64);
        for (size_t i = 0; i < n; i++)
            assert_int_equal(cmr_hist_record(&one, v[i], 1), 0);
        assert_int_equal(cmr_hist_record_sorted(&runs, v, n), 0);
        assert_true(one.count == runs.count && one.min == runs.min && one.max == runs.max && one.n == runs.n);
        for (size_t i = 0; i < one.n; i++)
            assert_true(one.bins[i].bucket == runs.bins[i].bucket && one.bins[i].count == runs.bins[i].count);
        assert_true(one.sum == runs.sum || __builtin_fabs(one.sum - runs.sum) / one.sum < 1e-12);
    }
    assert_int_equal(cmr_hist_record_sorted(&runs, v, 0), 0); /* nothing: nothing changes */
    assert_true(runs.count == one.count);
    /* after a reserve of n, a record of n cannot need memory: the bins do not move */
    cmr_hist_t h = {0};
    assert_int_equal(cmr_hist_reserve(&h, 32), 0);
    cmr_hist_bin_t *at = h.bins;
    for (size_t i = 0; i < 32; i++)
        v[i] = (uint64_t)1 << (i + 8); /* 32 new buckets */
    assert_int_equal(cmr_hist_record_sorted(&h, v, 32), 0);
    assert_ptr_equal(h.bins, at);
    assert_int_equal(h.n, 32);
    cmr_hist_free(&h);
    cmr_hist_free(&one);
    cmr_hist_free(&runs);
}

/* Bucket deltas that wrap around 2^64 (10, +290, +2^64-100: back to bucket 200) are
 * refused: the bins would be out of order while count, min and max still agree. */
static void test_decode_refuses_wrapping_deltas(void **state)
{
    (void)state;
    cmr_buf_t b = {0};
    uint64_t min = cmr_hist_bucket_low(10), max = cmr_hist_bucket_low(200);
    cmr_buf_put_varint(&b, 3);
    cmr_buf_put_varint(&b, min);
    cmr_buf_put_varint(&b, max);
    double sum = (double)(min + max + cmr_hist_bucket_low(300));
    uint8_t bits[8];
    memcpy(bits, &sum, 8);
    cmr_buf_put(&b, bits, 8);
    cmr_buf_put_varint(&b, 3);
    cmr_buf_put_varint(&b, 10);
    cmr_buf_put_varint(&b, 1);
    cmr_buf_put_varint(&b, 290);
    cmr_buf_put_varint(&b, 1);
    cmr_buf_put_varint(&b, UINT64_MAX - 99); /* 300 + this wraps to 200 */
    cmr_buf_put_varint(&b, 1);
    cmr_hist_t h = {0};
    assert_int_equal(cmr_hist_decode(&h, b.data, b.len), -1);
    assert_int_equal(h.count, 0);
    cmr_hist_free(&h);
    cmr_buf_free(&b);
}

static void test_encoding(void **state)
{
    (void)state;
    cmr_hist_t h = {0}, back = {0};
    for (int i = 0; i < 10000; i++)
        assert_int_equal(cmr_hist_record(&h, gen_bimodal(), 1 + (uint64_t)(i % 3)), 0);
    assert_int_equal(cmr_hist_record(&h, UINT64_MAX, 1), 0);
    assert_int_equal(cmr_hist_record(&h, 0, 7), 0);
    cmr_buf_t b = {0};
    cmr_hist_encode(&h, &b);
    assert_int_equal(cmr_hist_decode(&back, b.data, b.len), 0);
    assert_true(back.count == h.count && back.min == h.min && back.max == h.max && back.sum == h.sum && back.n == h.n);
    for (size_t i = 0; i < h.n; i++)
        assert_true(back.bins[i].bucket == h.bins[i].bucket && back.bins[i].count == h.bins[i].count);
    /* a few hundred bins of a wide distribution: a few bytes each */
    assert_true(b.len < 8 + 30 + h.n * 5);
    /* every truncation, and trailing bytes, are refused */
    for (size_t len = 0; len < b.len; len++)
        assert_int_equal(cmr_hist_decode(&back, b.data, len), -1);
    cmr_buf_putc(&b, 0);
    assert_int_equal(cmr_hist_decode(&back, b.data, b.len), -1);
    assert_true(back.count == 0 && back.n == 0);
    /* random damage: refused or a consistent histogram, never a crash */
    for (int round = 0; round < 20000; round++) {
        uint8_t junk[64];
        size_t n = next_rand() % sizeof junk;
        for (size_t i = 0; i < n; i++)
            junk[i] = (uint8_t)next_rand();
        if (cmr_hist_decode(&back, junk, n) == 0) {
            uint64_t total = 0;
            for (size_t i = 0; i < back.n; i++)
                total += back.bins[i].count;
            assert_true(total == back.count);
        }
    }
    /* an empty histogram encodes and decodes */
    cmr_hist_t empty = {0};
    cmr_buf_reset(&b);
    cmr_hist_encode(&empty, &b);
    assert_int_equal(cmr_hist_decode(&back, b.data, b.len), 0);
    assert_true(back.count == 0);
    cmr_buf_free(&b);
    cmr_hist_free(&h);
    cmr_hist_free(&back);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bucket_layout),  cmocka_unit_test(test_relative_error),
        cmocka_unit_test(test_merge_is_exact), cmocka_unit_test(test_record_sorted_is_record),
        cmocka_unit_test(test_encoding),       cmocka_unit_test(test_decode_refuses_wrapping_deltas),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
