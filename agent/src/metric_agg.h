/*
 * metric_agg.h - the agent's latency aggregation of one metric interval: per method (or,
 * in the second instance call_stacks.h keeps, per transaction root), call count,
 * exceptions, sum, min, max, a latency histogram (cmr/histogram.h) and the trace of the
 * slowest call, shipped as one MetricBatch.
 *
 * Used by the publisher thread only (never an application thread), once per timer sample
 * or completed invocation-sequence call: one map lookup (none with a caller's hint), the
 * counters, and the value put aside or counted. A method's values go into its histogram CMR_METRIC_PENDING at a time, sorted, in
 * one pass over its bins (cmr_hist_record_sorted): a histogram of hundreds of bins is
 * then read once per CMR_METRIC_PENDING calls instead of searched per call, which with
 * many methods costs a cache miss per step.
 *
 * A hot method (one whose values filled its pending array this interval) counts instead:
 * a value is then its bucket computed and a counter incremented. The counters are kept in
 * pages of 64 buckets (a power of two of values), taken as the method's values first hit
 * them from the aggregate's pool of at most CMR_METRIC_PAGES pages, for the buckets of
 * values below 2^37 ns (137 s; a longer call is put aside as before). A method whose calls
 * take similar times uses a page or two, one whose calls spread over a factor 10 four or
 * five. The pages go into the sparse histograms when the interval's batch is made, and
 * back to the pool at the reset; while the pool is used up, values are put aside as before.
 *
 * Memory is bounded: at most max_methods methods per interval (each with a sparse
 * histogram: a few hundred bytes for a method whose calls take similar times, 60 KB at the
 * very worst, 256 bytes of values put aside and 72 bytes of page table), and
 * CMR_METRIC_PAGES x 256 bytes (1 MB) of counters with 32 KB to fold a method's pages; samples of further methods are not
 * kept and are counted in `overflow`.
 *
 * Ownership: the aggregate owns its items, histograms and encodings; a batch filled by
 * cmr_metric_agg_batch() points into it and is valid until the next add, reset or free.
 * Not thread-safe.
 */
#ifndef CMR_METRIC_AGG_H
#define CMR_METRIC_AGG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmr/buf.h"
#include "cmr/histogram.h"
#include "cmr/map.h"
#include "cmr/msg.h"

#define CMR_METRIC_MAX_METHODS 2048 /* methods per interval and agent */
#define CMR_METRIC_PENDING 31       /* values put aside per method before its histogram */
#define CMR_METRIC_PAGES 4096       /* pages of counters per aggregate (256 bytes each) */
#define CMR_METRIC_PAGE_BUCKETS 64  /* buckets per page: those of one power of two */
#define CMR_METRIC_PAGED 32         /* pages a method can use: buckets 0 - 2047, values below 2^37 ns */

/* A method's values not in its histogram yet (in arrival order). */
typedef struct cmr_metric_pending {
    uint64_t v[CMR_METRIC_PENDING];
    uint64_t n;
} cmr_metric_pending_t;

/* A method's counters this interval: hot once its values filled its pending array; page[k]:
 * the pool page of buckets 64k .. 64k + 63 (0: none yet); n: values counted (at most
 * UINT32_MAX, so that no counter overflows). */
typedef struct cmr_metric_dense {
    uint32_t n;
    bool hot;
    uint16_t page[CMR_METRIC_PAGED];
} cmr_metric_dense_t;

/* Where a method's item is in an aggregate, for a caller that keeps it per method (the
 * shadow stacks' method records): valid while epoch is the aggregate's. Zeroed: unknown. */
typedef struct cmr_metric_hint {
    uint64_t epoch;
    size_t pos;
} cmr_metric_hint_t;

typedef struct cmr_metric_agg {
    cmr_method_metric_t *items;    /* owned; one per method of the interval */
    cmr_hist_t *hists;             /* owned; parallel to items, emptied (memory kept) on reset */
    cmr_metric_pending_t *pending; /* owned; parallel to items: values not in hists yet */
    uint8_t (*traces)[16];         /* owned; parallel to items: trace of the slowest call, all
                                   zero when that call had none */
    cmr_metric_dense_t *dense;     /* owned; parallel to items: their counters */
    size_t n, cap, hists_cap, traces_cap, pending_cap, dense_cap;
    /* the pool of pages (owned): pages 1 .. pages_used - 1 are taken this interval (page 0
     * is never used: "none"), zeroed as they are taken; pages_cap grows to CMR_METRIC_PAGES */
    uint32_t (*pool)[CMR_METRIC_PAGE_BUCKETS];
    size_t pages_used, pages_cap;
    bool pool_failed;     /* the pool could not grow (no memory): not tried again before the reset */
    cmr_hist_bin_t *fold; /* owned: CMR_METRIC_PAGED x CMR_METRIC_PAGE_BUCKETS bins, for a fold */
    size_t max_methods;
    cmr_u64map_t index; /* method id -> position in items (as a uintptr_t) */
    uint64_t epoch;     /* the interval's number (from 1): positions are valid within one */
    cmr_buf_t enc;      /* the histograms' encodings of the last batch */
    uint64_t overflow;  /* samples not kept since the last reset: too many methods, or memory */
    int64_t cpu_ns;     /* the process's CPU time at the last batch (0: none yet) */
} cmr_metric_agg_t;

/* An empty aggregate of at most max_methods methods (0: CMR_METRIC_MAX_METHODS). */
void cmr_metric_agg_init(cmr_metric_agg_t *g, size_t max_methods);
/* Adds one sample: ns the call took (negative counts as 0), thrown when it ended with an
 * exception. 0, or -1 when the sample was not kept (counted in overflow). */
int cmr_metric_agg_add(cmr_metric_agg_t *g, uint64_t method_id, int64_t ns, bool thrown);
/* Same, for a call of a trace (trace: 16 bytes, or NULL): the trace is kept when the call
 * is the slowest of its method in the interval (the batch's slowest_trace). */
int cmr_metric_agg_add_traced(cmr_metric_agg_t *g, uint64_t method_id, int64_t ns, bool thrown, const uint8_t *trace);
/* Same, with the call's self time (ns outside its recorded callees; the two above count
 * the whole call as self time). */
int cmr_metric_agg_add_call(cmr_metric_agg_t *g, uint64_t method_id, int64_t ns, int64_t self_ns, bool thrown,
                            const uint8_t *trace);
/* Same, with the method's hint (read, and set when it was not valid): no map lookup while
 * it is. hint NULL: as cmr_metric_agg_add_call. */
int cmr_metric_agg_add_hinted(cmr_metric_agg_t *g, cmr_metric_hint_t *hint, uint64_t method_id, int64_t ns,
                              int64_t self_ns, bool thrown, const uint8_t *trace);
/* Fills *out with the interval's aggregates (pointing into g), each item's histogram
 * encoded, and the process's CPU time since the previous batch of g (cpu_ns; 0 the first
 * time). 0, or -1 when memory ran out for the histograms or their encodings (*out is then
 * empty). */
int cmr_metric_agg_batch(cmr_metric_agg_t *g, int64_t agent_id, int64_t interval_start_ms, int32_t interval_ms,
                         cmr_metric_batch_t *out);
/* Empties the aggregate for the next interval (keeps its memory). */
void cmr_metric_agg_reset(cmr_metric_agg_t *g);
void cmr_metric_agg_free(cmr_metric_agg_t *g);

#endif
