/*
 * metric_agg.c - the agent's per-interval timer aggregation (metric_agg.h).
 */
#include "metric_agg.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void cmr_metric_agg_init(cmr_metric_agg_t *g, size_t max_methods)
{
    memset(g, 0, sizeof *g);
    g->max_methods = max_methods ? max_methods : CMR_METRIC_MAX_METHODS;
    g->epoch = 1;
}

/* The position of method_id's item, created empty when new; SIZE_MAX when it cannot be. */
static size_t item_of(cmr_metric_agg_t *g, uint64_t method_id)
{
    void *v = cmr_u64map_get(&g->index, method_id);
    if (v)
        return (size_t)(uintptr_t)v - 1;
    if (g->n >= g->max_methods || CMR_ARRAY_GROW(g->items, g->cap, g->n + 1) != 0)
        return SIZE_MAX;
    if (g->hists_cap < g->cap) { /* histograms of earlier intervals are kept for reuse */
        size_t old = g->hists_cap;
        if (CMR_ARRAY_GROW(g->hists, g->hists_cap, g->cap) != 0)
            return SIZE_MAX;
        memset(g->hists + old, 0, (g->hists_cap - old) * sizeof *g->hists);
    }
    if (g->dense_cap < g->cap && CMR_ARRAY_GROW(g->dense, g->dense_cap, g->cap) != 0)
        return SIZE_MAX;
    if (g->traces_cap < g->cap && CMR_ARRAY_GROW(g->traces, g->traces_cap, g->cap) != 0)
        return SIZE_MAX;
    if (g->pending_cap < g->cap && CMR_ARRAY_GROW(g->pending, g->pending_cap, g->cap) != 0)
        return SIZE_MAX;
    /* stored as position + 1: a NULL value would read as absent */
    if (cmr_u64map_put(&g->index, method_id, (void *)(uintptr_t)(g->n + 1)) != 0)
        return SIZE_MAX;
    g->items[g->n] = (cmr_method_metric_t){.method_id = (int64_t)method_id, .min_ns = INT64_MAX};
    memset(g->traces[g->n], 0, 16);
    g->pending[g->n].n = 0;
    assert(g->hists[g->n].count == 0);
    memset(&g->dense[g->n], 0, sizeof g->dense[g->n]);
    return g->n++;
}

/* Puts item i's values aside into its histogram, sorted (insertion sort: at most
 * CMR_METRIC_PENDING values). Cannot fail: room for them was reserved when the first was
 * put aside. */
static void pending_flush(cmr_metric_agg_t *g, size_t i)
{
    cmr_metric_pending_t *p = &g->pending[i];
    for (size_t k = 1; k < p->n; k++) {
        uint64_t x = p->v[k];
        size_t j = k;
        for (; j > 0 && p->v[j - 1] > x; j--)
            p->v[j] = p->v[j - 1];
        p->v[j] = x;
    }
    int rc = cmr_hist_record_sorted(&g->hists[i], p->v, p->n);
    assert(rc == 0);
    (void)rc;
    p->n = 0;
}

_Static_assert(CMR_METRIC_PAGES <= 65536, "page numbers are 16 bits");

/* A page of zeroed counters from the pool: its number, or 0 when the pool is used up (or
 * memory ran out: not tried again before the reset). */
static uint16_t page_take(cmr_metric_agg_t *g)
{
    if (g->pages_used == 0)
        g->pages_used = 1; /* page 0: "none" */
    if (g->pages_used >= g->pages_cap) {
        if (g->pages_cap >= CMR_METRIC_PAGES || g->pool_failed)
            return 0;
        size_t cap = g->pages_cap ? g->pages_cap * 2 : 64;
        if (cap > CMR_METRIC_PAGES)
            cap = CMR_METRIC_PAGES;
        void *pool = realloc(g->pool, cap * sizeof *g->pool);
        if (!pool) {
            g->pool_failed = true;
            return 0;
        }
        g->pool = pool;
        g->pages_cap = cap;
    }
    memset(g->pool[g->pages_used], 0, sizeof *g->pool);
    return (uint16_t)g->pages_used++;
}

/* Whether item i counts value v in its pages (and counts it): hot, a value of a bucket
 * that has a page, and a page for it left in the pool. */
static bool dense_count(cmr_metric_agg_t *g, size_t i, uint64_t v)
{
    cmr_metric_dense_t *d = &g->dense[i];
    if (!d->hot || v >= (UINT64_C(128) << 30) || d->n == UINT32_MAX) /* 2^37: bucket 2048 */
        return false;
    uint16_t b = cmr_hist_bucket(v), k = b / CMR_METRIC_PAGE_BUCKETS;
    if (!d->page[k] && !(d->page[k] = page_take(g)))
        return false;
    g->pool[d->page[k]][b % CMR_METRIC_PAGE_BUCKETS]++;
    d->n++;
    return true;
}

/* Item i's counters into its histogram (its pages stay taken until the reset). 0, or -1
 * when memory ran out (the counters then stay as they are). */
static int dense_fold(cmr_metric_agg_t *g, size_t i)
{
    cmr_metric_dense_t *d = &g->dense[i];
    if (d->n == 0)
        return 0;
    if (!g->fold && !(g->fold = malloc(CMR_METRIC_PAGED * CMR_METRIC_PAGE_BUCKETS * sizeof *g->fold)))
        return -1;
    size_t nb = 0;
    for (size_t k = 0; k < CMR_METRIC_PAGED; k++) {
        if (!d->page[k])
            continue;
        const uint32_t *c = g->pool[d->page[k]];
        for (size_t j = 0; j < CMR_METRIC_PAGE_BUCKETS; j++)
            if (c[j])
                g->fold[nb++] = (cmr_hist_bin_t){(uint16_t)(k * CMR_METRIC_PAGE_BUCKETS + j), c[j]};
    }
    const cmr_method_metric_t *m = &g->items[i];
    /* min and max: the item's, which every value of the histogram is within */
    cmr_hist_t counted = {
        .bins = g->fold, .n = nb, .count = d->n, .min = (uint64_t)m->min_ns, .max = (uint64_t)m->max_ns};
    if (cmr_hist_merge(&g->hists[i], &counted) != 0)
        return -1;
    d->n = 0; /* in the histogram now: a later batch of the interval counts them once */
    memset(d->page, 0, sizeof d->page);
    g->hists[i].sum = (double)m->sum_ns; /* every value of the item is in the histogram now */
    return 0;
}

int cmr_metric_agg_add(cmr_metric_agg_t *g, uint64_t method_id, int64_t ns, bool thrown)
{
    return cmr_metric_agg_add_traced(g, method_id, ns, thrown, NULL);
}

int cmr_metric_agg_add_traced(cmr_metric_agg_t *g, uint64_t method_id, int64_t ns, bool thrown, const uint8_t *trace)
{
    return cmr_metric_agg_add_call(g, method_id, ns, ns, thrown, trace);
}

int cmr_metric_agg_add_call(cmr_metric_agg_t *g, uint64_t method_id, int64_t ns, int64_t self_ns, bool thrown,
                            const uint8_t *trace)
{
    return cmr_metric_agg_add_hinted(g, NULL, method_id, ns, self_ns, thrown, trace);
}

int cmr_metric_agg_add_hinted(cmr_metric_agg_t *g, cmr_metric_hint_t *hint, uint64_t method_id, int64_t ns,
                              int64_t self_ns, bool thrown, const uint8_t *trace)
{
    if (ns < 0)
        ns = 0; /* a clock step: the call took no measurable time */
    if (self_ns < 0)
        self_ns = 0;
    if (self_ns > ns)
        self_ns = ns;
    size_t i;
    if (hint && hint->epoch && hint->epoch == g->epoch) {
        i = hint->pos;
        assert(i < g->n && g->items[i].method_id == (int64_t)method_id);
    } else if ((i = item_of(g, method_id)) != SIZE_MAX && hint) {
        hint->epoch = g->epoch;
        hint->pos = i;
    }
    if (i == SIZE_MAX) {
        g->overflow++;
        return -1;
    }
    if (!dense_count(g, i, (uint64_t)ns)) {
        cmr_metric_pending_t *p = &g->pending[i];
        if (p->n == 0 && cmr_hist_reserve(&g->hists[i], CMR_METRIC_PENDING) != 0) {
            g->overflow++;
            return -1;
        }
        p->v[p->n++] = (uint64_t)ns;
        if (p->n == CMR_METRIC_PENDING) {
            pending_flush(g, i);
            g->dense[i].hot = true;
        }
    }
    cmr_method_metric_t *m = &g->items[i];
    m->count++;
    m->exceptions += thrown;
    m->sum_ns += ns;
    m->self_ns += self_ns;
    if (ns < m->min_ns)
        m->min_ns = ns;
    if (ns > m->max_ns || m->count == 1) {
        m->max_ns = ns;
        if (trace)
            memcpy(g->traces[i], trace, 16);
        else
            memset(g->traces[i], 0, 16);
    }
    return 0;
}

int cmr_metric_agg_batch(cmr_metric_agg_t *g, int64_t agent_id, int64_t interval_start_ms, int32_t interval_ms,
                         cmr_metric_batch_t *out)
{
    *out = (cmr_metric_batch_t){.agent_id = agent_id,
                                .interval_start_ms = interval_start_ms,
                                .interval_ms = interval_ms,
                                .environment_id = "",
                                .samples_dropped = (int64_t)g->overflow};
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) == 0) {
        int64_t now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
        out->cpu_ns = g->cpu_ns > 0 && now > g->cpu_ns ? now - g->cpu_ns : 0;
        g->cpu_ns = now;
    }
    cmr_buf_reset(&g->enc);
    /* encode everything first (the buffer moves while it grows), noting where each ends */
    for (size_t i = 0; i < g->n; i++) {
        pending_flush(g, i);
        if (dense_fold(g, i) != 0)
            return -1;
        assert(g->hists[i].count == (uint64_t)g->items[i].count);
        cmr_hist_encode(&g->hists[i], &g->enc);
        g->items[i].histogram = (cmr_bytes_t){NULL, g->enc.len};
    }
    if (!cmr_buf_ok(&g->enc))
        return -1;
    for (size_t i = 0, start = 0; i < g->n; i++) {
        size_t end = g->items[i].histogram.len;
        g->items[i].histogram = (cmr_bytes_t){g->enc.data + start, end - start};
        start = end;
        static const uint8_t none[16];
        bool traced = memcmp(g->traces[i], none, 16) != 0;
        g->items[i].slowest_trace = (cmr_bytes_t){traced ? g->traces[i] : NULL, traced ? 16 : 0};
    }
    out->metrics.items = g->items;
    out->metrics.count = g->n;
    return 0;
}

void cmr_metric_agg_reset(cmr_metric_agg_t *g)
{
    for (size_t i = 0; i < g->n; i++) {
        cmr_hist_reset(&g->hists[i]);
        g->pending[i].n = 0;
    }
    g->pages_used = 0; /* every page back to the pool (each item's table is cleared when made) */
    g->pool_failed = false;
    g->epoch++; /* every hint of this interval is stale */
    g->n = 0;
    g->overflow = 0;
    cmr_u64map_clear(&g->index);
}

void cmr_metric_agg_free(cmr_metric_agg_t *g)
{
    for (size_t i = 0; i < g->hists_cap; i++)
        cmr_hist_free(&g->hists[i]);
    free(g->hists);
    free(g->dense);
    free(g->pool);
    free(g->fold);
    free(g->traces);
    free(g->pending);
    free(g->items);
    cmr_u64map_free(&g->index);
    cmr_buf_free(&g->enc);
    memset(g, 0, sizeof *g);
}
