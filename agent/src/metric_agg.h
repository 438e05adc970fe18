/*
 * metric_agg.h - the agent's latency aggregation of one metric interval: per method (or,
 * in the second instance call_stacks.h keeps, per transaction root), call count,
 * exceptions, sum, min, max, a latency histogram (cmr/histogram.h) and the trace of the
 * slowest call, shipped as one MetricBatch.
 *
 * Used by the publisher thread only (never an application thread), once per timer sample
 * or completed invocation-sequence call: one map lookup, the counters, and the value put
 * aside. A method's values go into its histogram CMR_METRIC_PENDING at a time, sorted, in
 * one pass over its bins (cmr_hist_record_sorted): a histogram of hundreds of bins is
 * then read once per CMR_METRIC_PENDING calls instead of searched per call, which with
 * many methods costs a cache miss per step. Memory is bounded: at most max_methods
 * methods per interval (each with a sparse histogram: a few hundred bytes for a method
 * whose calls take similar times, 60 KB at the very worst, and 256 bytes of values put
 * aside); samples of further methods are not kept and are counted in `overflow`.
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

/* A method's values not in its histogram yet (in arrival order). */
typedef struct cmr_metric_pending {
    uint64_t v[CMR_METRIC_PENDING];
    uint64_t n;
} cmr_metric_pending_t;

typedef struct cmr_metric_agg {
    cmr_method_metric_t *items;    /* owned; one per method of the interval */
    cmr_hist_t *hists;             /* owned; parallel to items, emptied (memory kept) on reset */
    cmr_metric_pending_t *pending; /* owned; parallel to items: values not in hists yet */
    uint8_t (*traces)[16];         /* owned; parallel to items: trace of the slowest call, all
                                   zero when that call had none */
    size_t n, cap, hists_cap, traces_cap, pending_cap;
    size_t max_methods;
    cmr_u64map_t index; /* method id -> position in items (as a uintptr_t) */
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
/* Fills *out with the interval's aggregates (pointing into g), each item's histogram
 * encoded, and the process's CPU time since the previous batch of g (cpu_ns; 0 the first
 * time). 0, or -1 when memory ran out for the encodings (*out is then empty). */
int cmr_metric_agg_batch(cmr_metric_agg_t *g, int64_t agent_id, int64_t interval_start_ms, int32_t interval_ms,
                         cmr_metric_batch_t *out);
/* Empties the aggregate for the next interval (keeps its memory). */
void cmr_metric_agg_reset(cmr_metric_agg_t *g);
void cmr_metric_agg_free(cmr_metric_agg_t *g);

#endif
