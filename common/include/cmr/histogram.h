/*
 * histogram.h - latency distributions that merge exactly: a log-linear histogram with a
 * bounded relative error, in the manner of HdrHistogram.
 *
 * Part of the toolbox (cmr_base). Agents record per-method and per-transaction latencies
 * into these, ship them, and the CMR merges them across JVMs and intervals: since every
 * histogram uses the same buckets, a merge is an exact sum and the percentiles of the
 * merge are what one histogram of every value would give.
 *
 * Buckets: values below 2^(CMR_HIST_SUB_BITS + 1) (128) have a bucket each (exact); above,
 * every power of two is split into 2^CMR_HIST_SUB_BITS (64) equal buckets. A value is
 * reported as the middle of its bucket, so the relative error of any percentile, min or
 * max aside, is at most 1 / 2^(CMR_HIST_SUB_BITS + 1) = 0.78 %. Every uint64 value fits
 * (3,776 buckets in all).
 *
 * Storage is sparse: only buckets that hold values take memory (a sorted array of
 * (bucket, count) pairs), so a method whose calls take similar times costs a few dozen
 * bytes; recording is a binary search, and an insertion when the bucket is new. Values
 * gathered and sorted first are recorded in one pass (cmr_hist_record_sorted).
 *
 * Ownership: a zeroed cmr_hist_t is empty and valid; its owner releases it with
 * cmr_hist_free(). Not thread-safe.
 */
#ifndef CMR_HISTOGRAM_H
#define CMR_HISTOGRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmr/buf.h"

#define CMR_HIST_SUB_BITS 6
#define CMR_HIST_BUCKETS ((64 - CMR_HIST_SUB_BITS + 1) << CMR_HIST_SUB_BITS) /* 3,776 */

typedef struct cmr_hist_bin {
    uint16_t bucket;
    uint64_t count;
} cmr_hist_bin_t;

typedef struct cmr_hist {
    cmr_hist_bin_t *bins; /* owned; sorted by bucket, counts > 0 */
    size_t n, cap;
    size_t last;       /* bin of the last record: tried first (latencies repeat) */
    uint64_t count;    /* values recorded */
    uint64_t min, max; /* exact; meaningful when count > 0 */
    double sum;        /* of the values (for the mean) */
} cmr_hist_t;

/* The bucket of a value, and the smallest and largest value of a bucket. */
uint16_t cmr_hist_bucket(uint64_t v);
uint64_t cmr_hist_bucket_low(uint16_t bucket);
uint64_t cmr_hist_bucket_high(uint16_t bucket);

/* Records n occurrences of v. 0, or -1 when memory ran out (nothing recorded). */
int cmr_hist_record(cmr_hist_t *h, uint64_t v, uint64_t n);
/* Records the n values of v, which are sorted ascending, in one pass over the bins (for a
 * caller that gathers a method's values first: a binary search per value touches a line of
 * a large histogram each step). 0, or -1 when memory ran out (nothing recorded): it
 * reserves room for n new bins first, and cannot run out after cmr_hist_reserve(h, n)
 * when n <= 32. */
int cmr_hist_record_sorted(cmr_hist_t *h, const uint64_t *v, size_t n);
/* Makes room for `extra` more bins. 0, or -1 when memory ran out. */
int cmr_hist_reserve(cmr_hist_t *h, size_t extra);
/* Adds every value of src to dst. 0, or -1 when memory ran out (dst unchanged). */
int cmr_hist_merge(cmr_hist_t *dst, const cmr_hist_t *src);
/* The value at quantile q (0..1): the middle of the bucket that holds the rank, clamped to
 * [min, max] (so q = 0 and q = 1 give them exactly). 0 for an empty histogram. */
uint64_t cmr_hist_quantile(const cmr_hist_t *h, double q);
void cmr_hist_reset(cmr_hist_t *h); /* empties, keeps the memory */
void cmr_hist_free(cmr_hist_t *h);

/* Compact encoding for the wire: count, min, max, sum (as an IEEE double), the number of
 * bins, then each bin as (bucket delta, count), all LEB128 varints. Appends to out. */
void cmr_hist_encode(const cmr_hist_t *h, cmr_buf_t *out);
/* Decodes what cmr_hist_encode wrote (replacing h's content). 0, or -1 when the bytes are
 * not a valid encoding (truncated, buckets out of order or range, counts that do not add
 * up, trailing bytes); h is then empty. */
int cmr_hist_decode(cmr_hist_t *h, const uint8_t *p, size_t len);

#endif
