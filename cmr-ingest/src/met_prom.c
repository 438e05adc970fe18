/*
 * met_prom.c - the metrics module on GET /metrics: the application's latency histograms,
 * error counters, in-flight and stalled gauges per environment and transaction or method,
 * and the module's own health (points, series, store size, rules).
 *
 * Prometheus wants counters that only grow, so the exported series are accumulated here,
 * in memory, from every point this worker stores (since it started; a restart is a
 * counter reset, which Prometheus handles): cumulative histograms rendered on fixed `le`
 * bounds from 100 us to 60 s, so that histogram_quantile() and sums across workers work.
 * At most metrics.prometheus.max_series series (the first seen); points of further series
 * are counted in cmr_metrics_prometheus_overflow_total. Only the aggregates over the JVMs
 * of an environment are exported (per-JVM series stay in the store).
 *
 * The worker's loop renders the text (cmr_metrics_publish, at most every refresh_ms) and
 * swaps it in under prom_lock; server threads only copy it (cmr_metrics_prometheus).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/clock.h"
#include "cmr/metrics_http.h"
#include "met_module.h"

/* Bucket bounds in seconds (le). */
static const double bounds_s[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                  0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30,    60};
#define NBOUNDS (sizeof bounds_s / sizeof bounds_s[0])

void met_prom_add(cmr_metrics_t *m, const cmr_met_labels_t *l, int64_t t_ms, const cmr_met_value_t *v)
{
    uint64_t sid = cmr_met_series_id(l);
    met_prom_series_t *p = cmr_u64map_get(&m->prom, sid);
    if (!p) {
        if (cmr_u64map_count(&m->prom) >= m->o.prom_max_series || !(p = calloc(1, sizeof *p))) {
            m->stats.prom_overflow++;
            return;
        }
        p->labels = *l;
        if (cmr_u64map_put(&m->prom, sid, p) != 0) {
            free(p);
            m->stats.prom_overflow++;
            return;
        }
    }
    p->count += v->count;
    p->errors += v->errors;
    if (cmr_hist_merge(&p->hist, &v->hist) != 0)
        m->stats.prom_overflow++;
    t_ms = t_ms / 10000 * 10000; /* agents' intervals start anywhere: one 10 s bucket is one "newest" */
    if (t_ms > p->last_ms) {     /* gauges: the newest bucket, summed over its JVMs */
        p->last_ms = t_ms;
        p->in_flight = 0;
        p->stalled = 0;
    }
    if (t_ms == p->last_ms) {
        p->in_flight += v->max_in_flight;
        p->stalled += v->stalled;
    }
}

void met_prom_forget_env(cmr_metrics_t *m, const char *env)
{
    for (size_t it = 0;;) {
        uint64_t sid;
        void *val;
        if (!cmr_u64map_next(&m->prom, &it, &sid, &val))
            break;
        met_prom_series_t *p = val;
        if (strcmp(p->labels.env, env))
            continue;
        cmr_u64map_del(&m->prom, sid, NULL);
        cmr_hist_free(&p->hist);
        free(p);
        it = 0; /* deletion moves entries: start over (a rebalance: rare) */
    }
}

void met_prom_free(cmr_metrics_t *m)
{
    size_t it = 0;
    void *val;
    while (cmr_u64map_next(&m->prom, &it, NULL, &val)) {
        met_prom_series_t *p = val;
        cmr_hist_free(&p->hist);
        free(p);
    }
    cmr_u64map_free(&m->prom);
}

/* Values <= bound (each bin counted at its middle, as quantiles do), continuing from the
 * previous bound: *bin and *acc carry the walk over the sorted bins. */
static uint64_t count_le(const cmr_hist_t *h, double bound_ns, size_t *bin, uint64_t *acc)
{
    while (*bin < h->n) {
        uint16_t b = h->bins[*bin].bucket;
        double mid = ((double)cmr_hist_bucket_low(b) + (double)cmr_hist_bucket_high(b)) / 2;
        if (mid > bound_ns)
            break;
        *acc += h->bins[(*bin)++].count;
    }
    return *acc;
}

/* The open stores (named transactions keep their names there). */
typedef struct render_ctx {
    const cmr_metrics_t *m;
    cmr_met_store_t *stores[64];
    size_t n;
} render_ctx_t;

static const char *series_name(const render_ctx_t *r, const met_prom_series_t *p, char *buf, size_t len)
{
    return cmr_metrics_subject_name(r->m->names, r->stores, r->n, &p->labels, buf, len);
}

static void render_series(cmr_buf_t *out, const render_ctx_t *r, const met_prom_series_t *p)
{
    char name[1024], le[32];
    series_name(r, p, name, sizeof name);
    cmr_prom_label_t lb[4] = {
        {"environment", p->labels.env},
        {"kind", p->labels.kind == CMR_MET_TRANSACTION ? "transaction" : "method"},
        {"name", name},
        {"le", le},
    };
    size_t bin = 0;
    uint64_t acc = 0;
    for (size_t i = 0; i < NBOUNDS; i++) {
        snprintf(le, sizeof le, "%g", bounds_s[i]);
        cmr_prom_sample_u64(out, "cmr_app_latency_seconds_bucket", lb, 4,
                            count_le(&p->hist, bounds_s[i] * 1e9, &bin, &acc));
    }
    snprintf(le, sizeof le, "+Inf");
    cmr_prom_sample_u64(out, "cmr_app_latency_seconds_bucket", lb, 4, p->hist.count);
    cmr_prom_sample_double(out, "cmr_app_latency_seconds_sum", lb, 3, p->hist.sum / 1e9);
    cmr_prom_sample_u64(out, "cmr_app_latency_seconds_count", lb, 3, p->hist.count);
}

typedef void render_fn(cmr_buf_t *out, const render_ctx_t *r, const met_prom_series_t *p, const char *family);

static void render_counter(cmr_buf_t *out, const render_ctx_t *r, const met_prom_series_t *p, const char *family)
{
    char name[1024];
    series_name(r, p, name, sizeof name);
    cmr_prom_label_t lb[3] = {
        {"environment", p->labels.env},
        {"kind", p->labels.kind == CMR_MET_TRANSACTION ? "transaction" : "method"},
        {"name", name},
    };
    uint64_t v = !strcmp(family, "cmr_app_errors_total") ? p->errors
                 : !strcmp(family, "cmr_app_in_flight")  ? (uint64_t)(p->in_flight < 0 ? 0 : p->in_flight)
                                                         : p->stalled;
    cmr_prom_sample_u64(out, family, lb, 3, v);
}

static void render_family(cmr_buf_t *out, const render_ctx_t *r, const char *family, const char *type, const char *help,
                          render_fn *fn)
{
    if (!cmr_u64map_count(&r->m->prom))
        return;
    cmr_prom_family(out, family, type, help);
    size_t it = 0;
    void *val;
    while (cmr_u64map_next(&r->m->prom, &it, NULL, &val))
        fn(out, r, val, family);
}

static void render_histogram(cmr_buf_t *out, const render_ctx_t *r, const met_prom_series_t *p, const char *family)
{
    (void)family;
    render_series(out, r, p);
}

static void render_health(cmr_buf_t *out, cmr_metrics_t *m)
{
    cmr_metrics_stats_t s;
    cmr_metrics_stats(m, &s);
    const cmr_prom_row_t rows[] = {
        {"cmr_metrics_batches_total", "counter", "MetricBatch messages applied", s.batches},
        {"cmr_metrics_duplicates_total", "counter", "MetricBatch messages whose interval was applied before",
         s.duplicates},
        {"cmr_metrics_batches_rejected_total", "counter", "MetricBatch messages refused as malformed", s.rejected},
        {"cmr_metrics_points_total", "counter", "points stored (one per series and interval)", s.points},
        {"cmr_metrics_stalled_calls_total", "counter", "stalled-call reports received", s.stalled_calls},
        {"cmr_metrics_series", "gauge", "series in the open stores", s.series},
        {"cmr_metrics_series_overflow_total", "counter", "points dropped: more series than metrics.max_series",
         s.series_overflow},
        {"cmr_metrics_corrupt_values_total", "counter", "stored values that did not decode (skipped)", s.corrupt},
        {"cmr_metrics_store_bytes", "gauge", "disk and memtable bytes of the open metrics stores", s.disk_bytes},
        {"cmr_metrics_partitions", "gauge", "cmr.metrics partitions this worker owns", s.partitions},
        {"cmr_metrics_evaluations_total", "counter", "threshold-rule evaluations", s.evaluations},
        {"cmr_metrics_alerts_abnormal_total", "counter", "abnormal events sent", s.alerts_abnormal},
        {"cmr_metrics_alerts_normal_total", "counter", "back-to-normal events sent", s.alerts_normal},
        {"cmr_metrics_alerts_suppressed_total", "counter", "abnormal events over metrics.rules.max_alerts (retried)",
         s.alerts_suppressed},
        {"cmr_metrics_alerts_restored_total", "counter",
         "state changes a newly assigned partition judged again without events (the owner before sent them)",
         s.alerts_restored},
        {"cmr_metrics_prometheus_overflow_total", "counter",
         "points not exported here: more series than metrics.prometheus.max_series", s.prom_overflow},
    };
    cmr_prom_rows(out, rows, sizeof rows / sizeof rows[0]);
}

void cmr_metrics_publish(cmr_metrics_t *m, int64_t refresh_ms)
{
    int64_t now = cmr_mono_ms();
    if (m->prom_rendered_ms && now - m->prom_rendered_ms < refresh_ms)
        return;
    m->prom_rendered_ms = now;
    cmr_buf_t text = {0};
    render_ctx_t r = {.m = m};
    for (int p = 0; p < MET_MAX_PARTITIONS && r.n < sizeof r.stores / sizeof r.stores[0]; p++)
        if (m->parts[p])
            r.stores[r.n++] = m->parts[p];
    render_health(&text, m);
    render_family(&text, &r, "cmr_app_latency_seconds", "histogram",
                  "latency of the application's transactions and methods over every JVM of an environment, from "
                  "the agents' histograms, since this worker started",
                  render_histogram);
    render_family(&text, &r, "cmr_app_errors_total", "counter", "calls that ended with an exception", render_counter);
    render_family(&text, &r, "cmr_app_in_flight", "gauge",
                  "most calls running at once in the newest interval, summed over the JVMs", render_counter);
    render_family(&text, &r, "cmr_app_stalled_calls", "gauge",
                  "calls running longer than the stall threshold at the end of the newest interval", render_counter);
    pthread_mutex_lock(&m->prom_lock);
    cmr_buf_t old = m->prom_text;
    m->prom_text = text;
    pthread_mutex_unlock(&m->prom_lock);
    cmr_buf_free(&old);
}

void cmr_metrics_prometheus(cmr_metrics_t *m, cmr_buf_t *out)
{
    pthread_mutex_lock(&m->prom_lock);
    if (m->prom_text.len)
        cmr_buf_put(out, m->prom_text.data, m->prom_text.len);
    pthread_mutex_unlock(&m->prom_lock);
}
