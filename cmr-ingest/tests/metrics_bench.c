/*
 * metrics_bench.c - figures of the metrics store (cmr/metrics_store.h): ingest rate,
 * one series' 24 h read, top-20 over 10,000 series, bytes on disk per series and day.
 *
  *   metrics_bench DIR [SERIES_FOR_TOP]     (DIR must not exist or be empty; kept after)
 *   metrics_bench DIR SERIES_FOR_TOP query  only the top-N queries, on the top/ store a
 *                                           former run left in DIR (for profiling)

 *
 * Built with cmr-ingest, not a ctest test. Two stores under DIR:
 *   day/  DAY_SERIES series with a point every 10 s for 24 h (what an environment's
 *         aggregate per method gets): ingest rate in grouped, fsynced flushes of 2,000
 *         points, bytes on disk per series per day after a manual compaction, and one
 *         series' 24 h read at 1 min and at 10 s.
 *   top/  10,000 method series (SERIES_FOR_TOP) that hold a point in every bucket the
 *         1 h and 24 h windows read (each window is covered by whole hours, whole minutes
 *         at the edges and 10 s buckets at the very edges: ~150 buckets per series for
 *         24 h), not a point every 10 s for 24 h: the same reads for a tenth of the
 *         loading time. top-20 by p99 and by count, before and after a compaction (before:
 *         the hour buckets are still a pile of merge operands).
 * Every point carries a histogram of ~30 bins (100 samples of a skewed latency).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rocksdb/c.h>

#include "cmr/clock.h"
#include "cmr/metrics_store.h"

#define DAY_MS 86400000LL
#define HOUR_MS 3600000LL
#define MIN_MS 60000LL
#define DAY_SERIES 20
#define POOL 64
#define FLUSH_EVERY 2000

static uint64_t rng = 0x2545f4914f6cdd1dULL;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static double secs_since(int64_t t0)
{
    return (double)(cmr_mono_ns() - t0) / 1e9;
}

/* A pool of realistic point values: 100 calls, skewed latencies, ~30 histogram bins. */
static void make_pool(cmr_met_value_t *pool)
{
    for (int p = 0; p < POOL; p++) {
        cmr_met_value_t *v = &pool[p];
        cmr_met_value_init(v);
        for (int i = 0; i < 100; i++) {
            double u = (double)(rnd() >> 11) / 9007199254740992.0;
            uint64_t lat = (uint64_t)(300000.0 * exp(0.7 * u * u * u));
            cmr_hist_record(&v->hist, lat, 1);
            if (!v->count || lat < v->min_ns)
                v->min_ns = lat;
            if (lat > v->max_ns)
                v->max_ns = lat;
            v->count++;
            v->errors += rnd() % 50 == 0;
            v->sum_ns += lat;
        }
        v->has_slowest = true;
        memset(v->slowest_trace, p, 16);
        v->max_in_flight = (int64_t)(rnd() % 20);
    }
}

static cmr_met_store_t *open_store(const char *dir, const char *name, bool sync)
{
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    cmr_met_opts_t o = {.no_sync = !sync, .max_series = 200000};
    cmr_met_store_t *s = cmr_met_store_open(path, &o, err, sizeof err);
    if (!s) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    return s;
}

typedef struct loader {
    cmr_met_store_t *s;
    const cmr_met_value_t *pool;
    uint64_t points;
} loader_t;

static void load_point(loader_t *ld, const cmr_met_labels_t *l, int64_t t)
{
    char err[512];
    if (cmr_met_store_add(ld->s, l, t, &ld->pool[ld->points % POOL]) != 0) {
        fprintf(stderr, "add failed\n");
        exit(1);
    }
    ld->points++;
    if (cmr_met_store_pending(ld->s) >= FLUSH_EVERY && cmr_met_store_flush(ld->s, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
}

static void load_done(loader_t *ld)
{
    char err[512];
    if (cmr_met_store_flush(ld->s, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
}

static void compact_points(cmr_met_store_t *s)
{
    rocksdb_compact_range_cf(cmr_met_store_raw_db(s), cmr_met_store_raw_cf(s, "points"), NULL, 0, NULL, 0);
}

static void method_labels(cmr_met_labels_t *l, uint64_t method)
{
    cmr_met_labels_set(l, CMR_MET_METHOD, "production", 10, 0x5000000000000000ULL + method, 0);
}

static int count_bucket(int64_t b, const cmr_met_value_t *v, void *opaque)
{
    (void)b;
    (void)v;
    (*(size_t *)opaque)++;
    return 0;
}

/* --- day/: ingest, disk, one series ------------------------------------------------------- */

static void bench_day(const char *dir, const cmr_met_value_t *pool, int64_t day0)
{
    loader_t ld = {open_store(dir, "day", true), pool, 0};
    cmr_met_labels_t l[DAY_SERIES];
    for (int i = 0; i < DAY_SERIES; i++)
        method_labels(&l[i], (uint64_t)i);
    int64_t t0 = cmr_mono_ns();
    for (int64_t t = day0; t < day0 + DAY_MS; t += 10000)
        for (int i = 0; i < DAY_SERIES; i++)
            load_point(&ld, &l[i], t + 1234);
    load_done(&ld);
    double dt = secs_since(t0);
    printf("ingest (fsync per %d points): %llu points in %.2f s = %.0f points/s\n", FLUSH_EVERY,
           (unsigned long long)ld.points, dt, (double)ld.points / dt);
    t0 = cmr_mono_ns();
    compact_points(ld.s);
    printf("manual compaction of the points CF: %.2f s\n", secs_since(t0));
    cmr_met_stats_t st;
    cmr_met_store_stats(ld.s, &st);
    printf("disk: %llu bytes for %d series x 1 day at 10 s = %.0f bytes per series per day "
           "(10 s + 1 min + 1 h buckets)\n",
           (unsigned long long)st.disk_bytes, DAY_SERIES, (double)st.disk_bytes / DAY_SERIES);
    for (int r = CMR_MET_RES_1M; r >= CMR_MET_RES_10S; r--) {
        size_t n = 0;
        t0 = cmr_mono_ns();
        cmr_met_series_read(&ld.s, 1, &l[3], (cmr_met_res_t)r, day0, day0 + DAY_MS, count_bucket, &n);
        printf("one series, 24 h at %s: %zu buckets in %.2f ms\n", r ? "1 min" : "10 s", n, secs_since(t0) * 1e3);
    }
    cmr_met_value_t w = {0};
    t0 = cmr_mono_ns();
    cmr_met_window(&ld.s, 1, &l[3], day0 + 1000, day0 + DAY_MS - 1000, &w);
    printf("one series, 24 h window value: %.3f ms (count %llu, p99 %.0f ns)\n", secs_since(t0) * 1e3,
           (unsigned long long)w.count, cmr_met_stat(&w, CMR_MET_P99));
    cmr_met_value_free(&w);
    cmr_met_store_close(ld.s);
}

/* --- top/: 10,000 series ------------------------------------------------------------------ */

/* Points in every bucket the 1 h and 24 h windows ending at `now` read. */
static void load_series_for_windows(loader_t *ld, const cmr_met_labels_t *l, int64_t now)
{
    int64_t from24 = now - DAY_MS, from1 = now - HOUR_MS;
    for (int64_t t = from24 / HOUR_MS * HOUR_MS; t < now; t += HOUR_MS)
        load_point(ld, l, t + 1); /* every hour bucket */
    for (int64_t t = from24 / MIN_MS * MIN_MS; t < (from24 / HOUR_MS + 1) * HOUR_MS; t += MIN_MS)
        load_point(ld, l, t + 1); /* minutes of the 24 h window's first partial hour */
    for (int64_t t = from1 / HOUR_MS * HOUR_MS; t < now; t += MIN_MS)
        load_point(ld, l, t + 1); /* minutes of the last two partial hours */
    for (int64_t t = from24 / MIN_MS * MIN_MS; t < from24 / MIN_MS * MIN_MS + MIN_MS; t += 10000)
        load_point(ld, l, t + 1); /* 10 s buckets of the partial minutes */
    for (int64_t t = from1 / MIN_MS * MIN_MS; t < from1 / MIN_MS * MIN_MS + MIN_MS; t += 10000)
        load_point(ld, l, t + 1);
    for (int64_t t = now / MIN_MS * MIN_MS; t < now; t += 10000)
        load_point(ld, l, t + 1);
}

static void run_top(cmr_met_store_t *s, int64_t now, const char *when)
{
    static const struct {
        cmr_met_stat_t stat;
        const char *name;
    } stats[] = {{CMR_MET_P99, "p99"}, {CMR_MET_COUNT, "count"}};
    cmr_met_filter_t f = {.kind = CMR_MET_METHOD, .env = "production", .agent = 0};
    for (int w = 0; w < 2; w++)
        for (int k = 0; k < 2; k++) {
            int64_t span = w ? DAY_MS : HOUR_MS;
            cmr_met_top_t top;
            int64_t t0 = cmr_mono_ns();
            int rc = cmr_met_top(&s, 1, &f, now - span, now, stats[k].stat, 20, &top);
            printf("top-20 by %-5s over %2s window, %s: %.3f s (rc %d, %zu results, first %.0f)\n", stats[k].name,
                   w ? "24 h" : "1 h", when, secs_since(t0), rc, top.n, top.n ? top.items[0].stat : 0.0);
            cmr_met_top_free(&top);
        }
}

static void bench_top(const char *dir, const cmr_met_value_t *pool, int64_t now, int nseries)
{
    loader_t ld = {open_store(dir, "top", false), pool, 0};
    int64_t t0 = cmr_mono_ns();
    for (int i = 0; i < nseries; i++) {
        cmr_met_labels_t l;
        method_labels(&l, 1000000 + (uint64_t)i);
        load_series_for_windows(&ld, &l, now);
    }
    load_done(&ld);
    double dt = secs_since(t0);
    printf("top store: %d series, %llu points in %.2f s = %.0f points/s (no fsync)\n", nseries,
           (unsigned long long)ld.points, dt, (double)ld.points / dt);
    run_top(ld.s, now, "fresh");
    t0 = cmr_mono_ns();
    compact_points(ld.s);
    printf("manual compaction: %.2f s\n", secs_since(t0));
    run_top(ld.s, now, "compacted");
    cmr_met_store_close(ld.s);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: metrics_bench DIR [SERIES_FOR_TOP]\n");
        return 2;
    }
    int nseries = argc > 2 ? atoi(argv[2]) : 10000;
    int64_t day0 = 1763683200000LL; /* 2025-11-21T00:00:00Z */
    int64_t now = day0 + 2 * DAY_MS + 30 * MIN_MS + 25000;
    if (argc > 3 && !strcmp(argv[3], "query")) {
        cmr_met_store_t *s = open_store(argv[1], "top", false);
        run_top(s, now, "again");
        cmr_met_store_close(s);
        return 0;
    }
    cmr_met_value_t pool[POOL];
    make_pool(pool);
    size_t bins = 0;
    for (int i = 0; i < POOL; i++)
        bins += pool[i].hist.n;
    printf("point values: %.1f histogram bins on average\n", (double)bins / POOL);
    bench_day(argv[1], pool, day0);
    bench_top(argv[1], pool, now, nseries);
    for (int i = 0; i < POOL; i++)
        cmr_met_value_free(&pool[i]);
    return 0;
}
