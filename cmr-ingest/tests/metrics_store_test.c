/*
 * metrics_store_test.c - the metrics time-series store (cmr/metrics_store.h) without a
 * broker: the value codec, roll-ups by the merge operator checked against exact figures
 * computed here from the raw samples (all three resolutions and windows), reopening,
 * queries over two stores, idempotence marks, the cardinality bound, retention per
 * resolution, corrupt stored values, top-N, series listing and the rules' state.
 *
 * Every test works in its own directory under /tmp (mkdtemp), removed by the teardown.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rocksdb/c.h>

#include "cmr/bytes.h"
#include "cmr/metrics_store.h"

#define T0 1763758800000LL /* 2025-11-21T21:00:00Z, ms: a whole hour */
#define DAY 86400000LL

static char tmpdir[256];

static void fixed_value(cmr_met_value_t *v, uint64_t count, uint64_t lat, uint64_t errors);

static int make_tmp(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/metrics-store-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_tmp(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static cmr_met_store_t *open_store(const char *name, const cmr_met_opts_t *o)
{
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    cmr_met_opts_t def = {.no_sync = true};
    cmr_met_store_t *s = cmr_met_store_open(path, o ? o : &def, err, sizeof err);
    if (!s)
        fail_msg("%s", err);
    return s;
}

static void flush(cmr_met_store_t *s)
{
    char err[512];
    if (cmr_met_store_flush(s, err, sizeof err) != 0)
        fail_msg("%s", err);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

static double rnd01(void)
{
    return (double)(rnd() >> 11) / 9007199254740992.0;
}

/* A skewed latency: mostly tens of microseconds, a long tail up to seconds. */
static uint64_t skewed_latency(void)
{
    double u = rnd01();
    return (uint64_t)(2000.0 * exp(13.0 * u * u * u)) + rnd() % 1000;
}

static void labels(cmr_met_labels_t *l, int kind, const char *env, uint64_t subject, int64_t agent)
{
    assert_int_equal(cmr_met_labels_set(l, (cmr_met_kind_t)kind, env, strlen(env), subject, agent), 0);
}

/* --- raw samples: what the exact figures are computed from -------------------------------- */

typedef struct sample {
    int64_t t_ms;
    uint64_t lat;
    bool error;
} sample_t;

typedef struct series_data {
    cmr_met_labels_t l;
    sample_t *s; /* sorted by time */
    size_t n, cap;
    int64_t max_in_flight_max;
    uint64_t stalled_sum;
} series_data_t;

/* One point: k samples at time t, the value the agent would send. */
static void make_point(series_data_t *sd, int64_t t, cmr_met_value_t *v)
{
    cmr_met_value_reset(v);
    int k = 1 + (int)(rnd() % 8);
    for (int i = 0; i < k; i++) {
        uint64_t lat = skewed_latency();
        bool err = rnd() % 10 == 0;
        assert_int_equal(cmr_hist_record(&v->hist, lat, 1), 0);
        if (!v->count || lat < v->min_ns)
            v->min_ns = lat;
        if (!v->count || lat > v->max_ns) {
            v->max_ns = lat;
            v->has_slowest = true;
            cmr_put_be64(v->slowest_trace, lat); /* the trace id names its latency */
            cmr_put_be64(v->slowest_trace + 8, (uint64_t)t);
        }
        v->count++;
        v->errors += err;
        v->sum_ns += lat;
        if (sd) {
            assert_int_equal(CMR_ARRAY_GROW(sd->s, sd->cap, sd->n + 1), 0);
            sd->s[sd->n++] = (sample_t){t, lat, err};
        }
    }
    v->max_in_flight = (int64_t)(rnd() % 50);
    v->stalled = rnd() % 3;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_sample(const void *a, const void *b)
{
    const sample_t *x = a, *y = b;
    return x->t_ms < y->t_ms ? -1 : x->t_ms > y->t_ms;
}

typedef struct exact {
    uint64_t count, errors, min, max, sum;
    uint64_t *lats; /* sorted */
} exact_t;

/* The exact figures of the samples with time in [a, b). */
static void exact_of(const series_data_t *sd, int64_t a, int64_t b, exact_t *e)
{
    memset(e, 0, sizeof *e);
    e->lats = malloc((sd->n + 1) * sizeof *e->lats);
    for (size_t i = 0; i < sd->n; i++) {
        const sample_t *s = &sd->s[i];
        if (s->t_ms < a || s->t_ms >= b)
            continue;
        e->lats[e->count++] = s->lat;
        e->errors += s->error;
        e->sum += s->lat;
    }
    qsort(e->lats, e->count, sizeof *e->lats, cmp_u64);
    if (e->count) {
        e->min = e->lats[0];
        e->max = e->lats[e->count - 1];
    }
}

static uint64_t exact_quantile(const exact_t *e, double q)
{
    uint64_t rank = (uint64_t)ceil(q * (double)e->count);
    if (rank == 0)
        rank = 1;
    return e->lats[rank - 1];
}

static void check_value(const cmr_met_value_t *v, const exact_t *e)
{
    assert_int_equal(v->count, e->count);
    assert_int_equal(v->errors, e->errors);
    assert_int_equal(v->sum_ns, e->sum);
    assert_int_equal(v->hist.count, e->count);
    if (!e->count)
        return;
    assert_int_equal(v->min_ns, e->min);
    assert_int_equal(v->max_ns, e->max);
    assert_int_equal(cmr_met_stat(v, CMR_MET_MAX), (double)e->max);
    assert_true(v->has_slowest);
    assert_int_equal(cmr_be64(v->slowest_trace), e->max);
    static const double qs[] = {0.5, 0.9, 0.99};
    for (int i = 0; i < 3; i++) {
        double got = (double)cmr_hist_quantile(&v->hist, qs[i]), want = (double)exact_quantile(e, qs[i]);
        if (fabs(got - want) > want / 128.0 + 1)
            fail_msg("q%.2f: got %.0f want %.0f (count %llu)", qs[i], got, want, (unsigned long long)e->count);
    }
    double p99 = cmr_met_stat(v, CMR_MET_P99), want = (double)exact_quantile(e, 0.99);
    assert_true(fabs(p99 - want) <= want / 128.0 + 1);
}

/* --- value codec ----------------------------------------------------------------------------- */

static void test_value_codec(void **state)
{
    (void)state;
    cmr_met_value_t v = {0}, w = {0};
    cmr_buf_t b = {0};
    for (int round = 0; round < 50; round++) {
        make_point(NULL, 1000, &v);
        v.has_slowest = round % 2;
        v.max_in_flight = round % 3 ? (int64_t)(rnd() % 1000) : -5;
        cmr_buf_reset(&b);
        cmr_met_value_encode(&v, &b);
        assert_true(cmr_buf_ok(&b));
        assert_int_equal(cmr_met_value_decode(&w, b.data, b.len), 0);
        assert_int_equal(w.count, v.count);
        assert_int_equal(w.errors, v.errors);
        assert_int_equal(w.sum_ns, v.sum_ns);
        assert_int_equal(w.min_ns, v.min_ns);
        assert_int_equal(w.max_ns, v.max_ns);
        assert_int_equal(w.max_in_flight, v.max_in_flight);
        assert_int_equal(w.stalled, v.stalled);
        assert_int_equal(w.has_slowest, v.has_slowest);
        if (v.has_slowest)
            assert_memory_equal(w.slowest_trace, v.slowest_trace, 16);
        assert_int_equal(w.hist.n, v.hist.n);
        assert_memory_equal(w.hist.bins, v.hist.bins, v.hist.n * sizeof *v.hist.bins);
        /* every truncation is rejected, as is a wrong version */
        for (size_t cut = 0; cut < b.len; cut++)
            assert_int_equal(cmr_met_value_decode(&w, b.data, cut), -1);
        b.data[0] = 9;
        assert_int_equal(cmr_met_value_decode(&w, b.data, b.len), -1);
        assert_int_equal(w.count, 0);
    }
    /* empty value round trip; merge keeps min/max/trace and in-flight max */
    cmr_met_value_reset(&v);
    cmr_buf_reset(&b);
    cmr_met_value_encode(&v, &b);
    assert_int_equal(cmr_met_value_decode(&w, b.data, b.len), 0);
    assert_int_equal(w.count, 0);
    cmr_met_value_t a = {0}, c = {0};
    make_point(NULL, 1, &a);
    make_point(NULL, 2, &c);
    a.max_in_flight = 7;
    c.max_in_flight = 3;
    cmr_met_value_t m = {0};
    assert_int_equal(cmr_met_value_copy(&m, &a), 0);
    assert_int_equal(cmr_met_value_merge(&m, &c), 0);
    assert_int_equal(m.count, a.count + c.count);
    assert_int_equal(m.max_ns, a.max_ns > c.max_ns ? a.max_ns : c.max_ns);
    assert_int_equal(m.min_ns, a.min_ns < c.min_ns ? a.min_ns : c.min_ns);
    assert_int_equal(cmr_be64(m.slowest_trace), m.max_ns);
    assert_int_equal(m.max_in_flight, 7);
    assert_int_equal(m.stalled, a.stalled + c.stalled);
    assert_int_equal(cmr_met_stat_parse("p99"), CMR_MET_P99);
    assert_int_equal(cmr_met_stat_parse("error_rate"), CMR_MET_ERROR_RATE);
    assert_int_equal(cmr_met_stat_parse("p42"), -1);
    cmr_met_value_free(&a);
    cmr_met_value_free(&c);
    cmr_met_value_free(&m);
    cmr_met_value_free(&v);
    cmr_met_value_free(&w);
    cmr_buf_free(&b);
}

static void test_labels(void **state)
{
    (void)state;
    cmr_met_labels_t l;
    char env[200];
    memset(env, 'e', sizeof env);
    assert_int_equal(cmr_met_labels_set(&l, CMR_MET_METHOD, env, CMR_MET_ENV_MAX, 1, 0), 0);
    assert_int_equal(l.env_len, CMR_MET_ENV_MAX);
    assert_int_equal(cmr_met_labels_set(&l, CMR_MET_METHOD, env, CMR_MET_ENV_MAX + 1, 1, 0), -1);
    assert_int_equal(cmr_met_labels_set(&l, CMR_MET_METHOD, "a\0b", 3, 1, 0), -1);
    assert_int_equal(cmr_met_labels_set(&l, 3, "a", 1, 1, 0), -1);
    assert_int_equal(cmr_met_labels_set(&l, CMR_MET_TRANSACTION, "\xff\x01 x", 4, 1, 0), 0); /* any bytes */
    cmr_met_labels_t a, b;
    labels(&a, 1, "prod", 5, 0);
    labels(&b, 1, "prod", 5, 1);
    assert_true(cmr_met_series_id(&a) != cmr_met_series_id(&b));
    labels(&b, 2, "prod", 5, 0);
    assert_true(cmr_met_series_id(&a) != cmr_met_series_id(&b));
}

/* --- roll-ups against exact figures ---------------------------------------------------------- */

#define NSERIES 4
#define NPOINTS 2500
#define SPAN_MS (3 * 3600000LL + 1234567) /* a bit over 3 hours, not aligned */

typedef struct bucket_check {
    const series_data_t *sd;
    int64_t res_ms, from, to, last;
    size_t buckets;
    uint64_t total;
} bucket_check_t;

static int check_bucket(int64_t b, const cmr_met_value_t *v, void *opaque)
{
    bucket_check_t *c = opaque;
    assert_true(b > c->last);
    assert_int_equal(b % c->res_ms, 0);
    c->last = b;
    exact_t e;
    exact_of(c->sd, b, b + c->res_ms, &e);
    assert_true(e.count > 0);
    check_value(v, &e);
    free(e.lats);
    c->buckets++;
    c->total += v->count;
    return 0;
}

static void generate(series_data_t *sd)
{
    const char *envs[] = {"prod", "prod", "staging", "prod"};
    for (int i = 0; i < NSERIES; i++)
        labels(&sd[i].l, i == 3 ? 2 : 1, envs[i], 0x1000 + (uint64_t)i, i == 1 ? 42 : 0);
}

static void write_points(cmr_met_store_t **stores, size_t nstores, series_data_t *sd, int npoints)
{
    cmr_met_value_t v = {0};
    for (int p = 0; p < npoints; p++) {
        series_data_t *d = &sd[rnd() % NSERIES];
        int64_t t = T0 + 1 + (int64_t)(rnd() % (uint64_t)SPAN_MS);
        make_point(d, t, &v);
        cmr_met_store_t *s = stores[(size_t)p % nstores];
        assert_int_equal(cmr_met_store_add(s, &d->l, t, &v), 0);
        if (cmr_met_store_pending(s) >= 150)
            flush(s);
    }
    for (size_t i = 0; i < nstores; i++)
        flush(stores[i]);
    for (int i = 0; i < NSERIES; i++)
        qsort(sd[i].s, sd[i].n, sizeof *sd[i].s, cmp_sample);
    cmr_met_value_free(&v);
}

static void check_all(cmr_met_store_t **stores, size_t n, series_data_t *sd)
{
    for (int i = 0; i < NSERIES; i++) {
        for (int r = 0; r < CMR_MET_NRES; r++) {
            bucket_check_t c = {&sd[i], cmr_met_res_ms((cmr_met_res_t)r), 0, 0, -1, 0, 0};
            assert_int_equal(
                cmr_met_series_read(stores, n, &sd[i].l, (cmr_met_res_t)r, T0 - DAY, T0 + DAY, check_bucket, &c), 0);
            assert_int_equal(c.total, sd[i].n); /* every sample in exactly one bucket */
            assert_true(c.buckets > (r == 2 ? 3u : 10u));
        }
        /* windows, aligned and not: exact figures of the 10 s buckets they cover */
        for (int k = 0; k < 12; k++) {
            int64_t a = T0 + (int64_t)(rnd() % (uint64_t)SPAN_MS), b = a + (int64_t)(rnd() % (uint64_t)SPAN_MS);
            if (k == 0)
                a = T0, b = T0 + 3 * 3600000LL; /* whole hours */
            if (k == 1)
                a = T0 - 3600000, b = T0 + 2 * DAY; /* everything */
            cmr_met_value_t v = {0};
            assert_int_equal(cmr_met_window(stores, n, &sd[i].l, a, b, &v), 0);
            exact_t e;
            exact_of(&sd[i], a / 10000 * 10000, (b + 9999) / 10000 * 10000, &e);
            check_value(&v, &e);
            if (k == 1)
                assert_int_equal(v.count, sd[i].n);
            free(e.lats);
            cmr_met_value_free(&v);
        }
    }
}

static void free_data(series_data_t *sd)
{
    for (int i = 0; i < NSERIES; i++)
        free(sd[i].s);
}

static void test_rollups_exact(void **state)
{
    (void)state;
    series_data_t sd[NSERIES] = {0};
    generate(sd);
    cmr_met_store_t *s = open_store("one", NULL);
    write_points(&s, 1, sd, NPOINTS);
    check_all(&s, 1, sd);
    cmr_met_stats_t st;
    cmr_met_store_stats(s, &st);
    assert_int_equal(st.points_written, NPOINTS);
    assert_int_equal(st.series, NSERIES);
    assert_int_equal(st.corrupt_operands, 0);
    assert_true(st.merges > 0);
    assert_true(st.disk_bytes > 0);
    /* reopened, and after a compaction (values merged for good) */
    cmr_met_store_close(s);
    s = open_store("one", NULL);
    check_all(&s, 1, sd);
    rocksdb_compact_range_cf(cmr_met_store_raw_db(s), cmr_met_store_raw_cf(s, "points"), NULL, 0, NULL, 0);
    check_all(&s, 1, sd);
    cmr_met_store_stats(s, &st);
    assert_int_equal(st.series, NSERIES);
    cmr_met_store_close(s);
    /* read-only too */
    cmr_met_opts_t ro = {.read_only = true};
    s = open_store("one", &ro);
    check_all(&s, 1, sd);
    cmr_met_labels_t l;
    labels(&l, 1, "prod", 1, 0);
    assert_int_equal(cmr_met_store_add(s, &l, T0, &(cmr_met_value_t){0}), -1);
    cmr_met_store_close(s);
    free_data(sd);
}

typedef struct collected {
    int64_t b[4096];
    cmr_met_value_t v[4096];
    size_t n;
} collected_t;

static int collect_bucket(int64_t b, const cmr_met_value_t *v, void *opaque)
{
    collected_t *c = opaque;
    assert_true(c->n < 4096);
    c->b[c->n] = b;
    assert_int_equal(cmr_met_value_copy(&c->v[c->n], v), 0);
    c->n++;
    return 0;
}

static void collected_free(collected_t *c)
{
    for (size_t i = 0; i < c->n; i++)
        cmr_met_value_free(&c->v[i]);
}

static void test_two_stores(void **state)
{
    (void)state;
    series_data_t sd[NSERIES] = {0};
    generate(sd);
    cmr_met_store_t *two[2] = {open_store("a", NULL), open_store("b", NULL)};
    uint64_t saved = rng_state;
    write_points(two, 2, sd, 1500);
    check_all(two, 2, sd); /* against the exact figures */
    /* the same points in one store give the same answers */
    free_data(sd);
    memset(sd, 0, sizeof sd);
    generate(sd);
    rng_state = saved;
    cmr_met_store_t *one = open_store("all", NULL);
    write_points(&one, 1, sd, 1500);
    for (int i = 0; i < NSERIES; i++) {
        collected_t *x = calloc(1, sizeof *x), *y = calloc(1, sizeof *y);
        assert_int_equal(cmr_met_series_read(two, 2, &sd[i].l, CMR_MET_RES_10S, T0, T0 + DAY, collect_bucket, x), 0);
        assert_int_equal(cmr_met_series_read(&one, 1, &sd[i].l, CMR_MET_RES_10S, T0, T0 + DAY, collect_bucket, y), 0);
        assert_int_equal(x->n, y->n);
        for (size_t k = 0; k < x->n; k++) {
            assert_int_equal(x->b[k], y->b[k]);
            assert_int_equal(x->v[k].count, y->v[k].count);
            assert_int_equal(x->v[k].max_ns, y->v[k].max_ns);
            assert_int_equal(x->v[k].max_in_flight, y->v[k].max_in_flight);
            assert_int_equal(x->v[k].stalled, y->v[k].stalled);
            assert_int_equal(cmr_met_stat(&x->v[k], CMR_MET_P99), cmr_met_stat(&y->v[k], CMR_MET_P99));
        }
        collected_free(x);
        collected_free(y);
        free(x);
        free(y);
    }
    cmr_met_store_close(two[0]);
    cmr_met_store_close(two[1]);
    cmr_met_store_close(one);
    free_data(sd);
}

/* --- idempotence --------------------------------------------------------------------------------- */

static void test_seen_applied(void **state)
{
    (void)state;
    cmr_met_store_t *s = open_store("s", NULL);
    assert_int_equal(cmr_met_store_seen(s, 7, T0), 0);
    cmr_met_labels_t l;
    labels(&l, 1, "prod", 9, 7);
    cmr_met_value_t v = {0};
    make_point(NULL, T0, &v);
    assert_int_equal(cmr_met_store_add(s, &l, T0, &v), 0);
    assert_int_equal(cmr_met_store_mark_applied(s, 7, T0), 0);
    assert_int_equal(cmr_met_store_seen(s, 7, T0), 1); /* pending */
    assert_int_equal(cmr_met_store_seen(s, 7, T0 + 10000), 0);
    assert_int_equal(cmr_met_store_seen(s, 8, T0), 0);
    flush(s);
    assert_int_equal(cmr_met_store_seen(s, 7, T0), 1);
    /* a worker that sees the redelivery skips it: the point is counted once */
    if (cmr_met_store_seen(s, 7, T0) == 0)
        cmr_met_store_add(s, &l, T0, &v);
    flush(s);
    cmr_met_store_close(s);
    s = open_store("s", NULL);
    assert_int_equal(cmr_met_store_seen(s, 7, T0), 1);
    assert_int_equal(cmr_met_store_seen(s, 7, T0 - 10000), 0);
    cmr_met_value_t w = {0};
    assert_int_equal(cmr_met_window(&s, 1, &l, T0, T0 + 10000, &w), 0);
    assert_int_equal(w.count, v.count);
    /* negative agent ids and times order fine */
    assert_int_equal(cmr_met_store_mark_applied(s, -3, -5), 0);
    flush(s);
    assert_int_equal(cmr_met_store_seen(s, -3, -5), 1);
    assert_int_equal(cmr_met_store_seen(s, -3, 5), 0);
    cmr_met_value_free(&v);
    cmr_met_value_free(&w);
    cmr_met_store_close(s);
}

/* --- cardinality bound ------------------------------------------------------------------------------ */

static void test_cardinality(void **state)
{
    (void)state;
    cmr_met_opts_t o = {.no_sync = true, .max_series = 5};
    cmr_met_store_t *s = open_store("c", &o);
    cmr_met_value_t v = {0};
    make_point(NULL, T0, &v);
    cmr_met_labels_t l;
    for (int i = 0; i < 7; i++) {
        labels(&l, 1, "prod", (uint64_t)i + 1, 0);
        assert_int_equal(cmr_met_store_add(s, &l, T0, &v), i < 5 ? 0 : 1);
    }
    labels(&l, 1, "prod", 1, 0); /* a known series still takes points */
    assert_int_equal(cmr_met_store_add(s, &l, T0 + 10000, &v), 0);
    flush(s);
    cmr_met_stats_t st;
    cmr_met_store_stats(s, &st);
    assert_int_equal(st.series, 5);
    assert_int_equal(st.series_overflow, 2);
    assert_int_equal(st.points_written, 6);
    labels(&l, 1, "prod", 7, 0);
    cmr_met_value_t w = {0};
    assert_int_equal(cmr_met_window(&s, 1, &l, T0, T0 + 60000, &w), 0);
    assert_int_equal(w.count, 0); /* not stored */
    cmr_met_store_close(s);
    s = open_store("c", &o); /* the bound holds across reopening */
    assert_int_equal(cmr_met_store_add(s, &l, T0, &v), 1);
    labels(&l, 1, "prod", 2, 0);
    assert_int_equal(cmr_met_store_add(s, &l, T0, &v), 0);
    cmr_met_store_stats(s, &st);
    assert_int_equal(st.series, 5);
    assert_int_equal(st.series_overflow, 1);
    cmr_met_value_free(&v);
    cmr_met_value_free(&w);
    cmr_met_store_close(s);
}

/* --- retention ------------------------------------------------------------------------------------ */

static void count_raw(cmr_met_store_t *s, size_t per_res[CMR_MET_NRES])
{
    memset(per_res, 0, CMR_MET_NRES * sizeof *per_res);
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(cmr_met_store_raw_db(s), ro, cmr_met_store_raw_cf(s, "points"));
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl;
        const char *k = rocksdb_iter_key(it, &kl);
        assert_int_equal(kl, 17);
        assert_true((uint8_t)k[0] < CMR_MET_NRES);
        per_res[(uint8_t)k[0]]++;
    }
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
}

static uint64_t window_count(cmr_met_store_t *s, const cmr_met_labels_t *l, cmr_met_res_t res, int64_t t)
{
    collected_t *c = calloc(1, sizeof *c);
    assert_int_equal(cmr_met_series_read(&s, 1, l, res, t, t + 1, collect_bucket, c), 0);
    uint64_t n = c->n ? c->v[0].count : 0;
    collected_free(c);
    free(c);
    return n;
}

static void test_retention(void **state)
{
    (void)state;
    cmr_met_store_t *s = open_store("r", NULL);
    int64_t now = T0 + 500 * DAY;
    /* ages: 1 h (all kept), 3 d (10 s gone), 15 d (1 min gone too), 401 d (all gone) */
    const int64_t ages[] = {3600000, 3 * DAY, 15 * DAY, 401 * DAY};
    const bool kept[4][3] = {{1, 1, 1}, {0, 1, 1}, {0, 0, 1}, {0, 0, 0}};
    cmr_met_labels_t l[2];
    labels(&l[0], 1, "prod", 1, 0);
    labels(&l[1], 2, "prod", 2, 5);
    cmr_met_value_t v = {0};
    /* the first batch is flushed and compacted (merged values), the second stays operands */
    for (int round = 0; round < 2; round++) {
        for (int a = 0; a < 4; a++) {
            make_point(NULL, now - ages[a], &v);
            assert_int_equal(cmr_met_store_add(s, &l[round], now - ages[a], &v), 0);
            assert_int_equal(cmr_met_store_mark_applied(s, 5 + round, now - ages[a]), 0);
        }
        flush(s);
        if (round == 0)
            rocksdb_compact_range_cf(cmr_met_store_raw_db(s), cmr_met_store_raw_cf(s, "points"), NULL, 0, NULL, 0);
    }
    size_t per_res[CMR_MET_NRES];
    count_raw(s, per_res);
    for (int r = 0; r < CMR_MET_NRES; r++)
        assert_int_equal(per_res[r], 8);
    assert_int_equal(cmr_met_store_retention(s, now), 0);
    count_raw(s, per_res);
    assert_int_equal(per_res[0], 2);
    assert_int_equal(per_res[1], 4);
    assert_int_equal(per_res[2], 6);
    for (int i = 0; i < 2; i++)
        for (int a = 0; a < 4; a++) {
            for (int r = 0; r < CMR_MET_NRES; r++)
                assert_int_equal(window_count(s, &l[i], (cmr_met_res_t)r, now - ages[a]) > 0, kept[a][r]);
            assert_int_equal(cmr_met_store_seen(s, 5 + i, now - ages[a]), a == 0);
        }
    /* the cut-off stays for later compactions; reopening keeps what was kept */
    cmr_met_store_close(s);
    s = open_store("r", NULL);
    count_raw(s, per_res);
    assert_int_equal(per_res[0] + per_res[1] + per_res[2], 12);
    cmr_met_value_free(&v);
    cmr_met_store_close(s);
}

/* --- corrupt values ----------------------------------------------------------------------------------- */

static void test_corrupt_values(void **state)
{
    (void)state;
    cmr_met_store_t *s = open_store("x", NULL);
    cmr_met_labels_t l;
    labels(&l, 1, "prod", 77, 0);
    cmr_met_value_t v = {0};
    make_point(NULL, T0, &v);
    assert_int_equal(cmr_met_store_add(s, &l, T0, &v), 0);
    flush(s);
    uint64_t sid = cmr_met_series_id(&l);
    rocksdb_t *db = cmr_met_store_raw_db(s);
    rocksdb_column_family_handle_t *cf = cmr_met_store_raw_cf(s, "points");
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    char *e = NULL;
    uint8_t key[17];
    /* a garbage value alone at 10 s (T0 + 10 s), garbage under a later merge at 1 min */
    key[0] = 0;
    cmr_put_be64(key + 1, sid);
    cmr_put_be64(key + 9, (uint64_t)(T0 + 10000));
    rocksdb_put_cf(db, wo, cf, (const char *)key, 17, "\x01\xff\xff garbage", 11, &e);
    assert_null(e);
    key[0] = 1;
    cmr_put_be64(key + 9, (uint64_t)(T0 + 60000));
    rocksdb_put_cf(db, wo, cf, (const char *)key, 17, "\x07zz", 3, &e);
    assert_null(e);
    /* at 1 h: valid scalars, a histogram whose last bin count is wrong (found after its
     * bins were added: they must be taken back) */
    cmr_met_value_t bad = {0};
    fixed_value(&bad, 1000, 5000000, 0);
    cmr_hist_record(&bad.hist, 123456, 10);
    bad.count = 1010;
    cmr_buf_t enc = {0};
    cmr_met_value_encode(&bad, &enc);
    enc.data[enc.len - 1]++;
    key[0] = 2;
    cmr_put_be64(key + 9, (uint64_t)T0);
    rocksdb_put_cf(db, wo, cf, (const char *)key, 17, (const char *)enc.data, enc.len, &e);
    assert_null(e);
    cmr_buf_free(&enc);
    cmr_met_value_free(&bad);
    rocksdb_writeoptions_destroy(wo);
    assert_int_equal(cmr_met_store_add(s, &l, T0 + 60000, &v), 0);
    flush(s);
    collected_t *c = calloc(1, sizeof *c);
    assert_int_equal(cmr_met_series_read(&s, 1, &l, CMR_MET_RES_10S, T0, T0 + 120000, collect_bucket, c), 0);
    assert_int_equal(c->n, 3); /* T0, the garbage one (empty), T0 + 60 s */
    assert_int_equal(c->v[0].count, v.count);
    assert_int_equal(c->v[1].count, 0);
    assert_int_equal(c->v[2].count, v.count);
    collected_free(c);
    c->n = 0;
    assert_int_equal(cmr_met_series_read(&s, 1, &l, CMR_MET_RES_1M, T0, T0 + 120000, collect_bucket, c), 0);
    assert_int_equal(c->n, 2);
    assert_int_equal(c->v[1].count, v.count); /* the merge skipped the garbage base */
    collected_free(c);
    c->n = 0;
    assert_int_equal(cmr_met_series_read(&s, 1, &l, CMR_MET_RES_1H, T0, T0 + 120000, collect_bucket, c), 0);
    assert_int_equal(c->n, 1);
    assert_int_equal(c->v[0].count, v.count);      /* the Put replaced the first point's merge */
    assert_int_equal(c->v[0].hist.count, v.count); /* none of the bad bins left */
    uint64_t binsum = 0;
    for (size_t i = 0; i < c->v[0].hist.n; i++)
        binsum += c->v[0].hist.bins[i].count;
    assert_int_equal(binsum, v.count);
    assert_int_equal(c->v[0].hist.n, v.hist.n);
    assert_int_equal(cmr_met_stat(&c->v[0], CMR_MET_MAX), (double)v.max_ns);
    assert_true(cmr_met_stat(&c->v[0], CMR_MET_P999) <= (double)v.max_ns);
    collected_free(c);
    free(c);
    cmr_met_value_t w = {0};
    assert_int_equal(cmr_met_window(&s, 1, &l, T0, T0 + 120000, &w), 0);
    assert_int_equal(w.count, 2 * v.count);
    cmr_met_stats_t st;
    cmr_met_store_stats(s, &st);
    assert_true(st.corrupt_operands >= 2);
    /* compaction merges over the garbage too, and top-N still works */
    rocksdb_compact_range_cf(db, cf, NULL, 0, NULL, 0);
    cmr_met_top_t top;
    assert_int_equal(cmr_met_top(&s, 1, NULL, T0, T0 + 120000, CMR_MET_P99, 5, &top), 0);
    assert_int_equal(top.n, 1);
    assert_int_equal(top.items[0].value.count, 2 * v.count);
    cmr_met_top_free(&top);
    cmr_met_value_free(&v);
    cmr_met_value_free(&w);
    cmr_met_store_close(s);
}

/* --- top-N and listing --------------------------------------------------------------------------------- */

/* A value of count calls of latency lat (ns), errors of them failed. */
static void fixed_value(cmr_met_value_t *v, uint64_t count, uint64_t lat, uint64_t errors)
{
    cmr_met_value_reset(v);
    cmr_hist_record(&v->hist, lat, count);
    v->count = count;
    v->errors = errors;
    v->sum_ns = lat * count;
    v->min_ns = v->max_ns = lat;
}

static void add_fixed(cmr_met_store_t *s, const cmr_met_labels_t *l, int64_t t, uint64_t count, uint64_t lat,
                      uint64_t errors)
{
    cmr_met_value_t v = {0};
    fixed_value(&v, count, lat, errors);
    assert_int_equal(cmr_met_store_add(s, l, t, &v), 0);
    cmr_met_value_free(&v);
}

static void test_top(void **state)
{
    (void)state;
    cmr_met_store_t *st[2] = {open_store("t1", NULL), open_store("t2", NULL)};
    cmr_met_labels_t l[6];
    for (int i = 0; i < 5; i++)
        labels(&l[i], 1, "prod", 100 + (uint64_t)i, 0);
    labels(&l[5], 2, "staging", 100, 0);
    /* series i: 10 * (i + 1) calls of (i + 1) ms, errors 5 - i; split over both stores */
    for (int i = 0; i < 5; i++) {
        add_fixed(st[0], &l[i], T0 + 5000, 5 * ((uint64_t)i + 1), 1000000 * ((uint64_t)i + 1), 0);
        add_fixed(st[1], &l[i], T0 + 1800000, 5 * ((uint64_t)i + 1), 1000000 * ((uint64_t)i + 1), 5 - (uint64_t)i);
    }
    add_fixed(st[0], &l[5], T0 + 5000, 1000, 50000000, 1);      /* another kind/env */
    add_fixed(st[0], &l[0], T0 - 7200000, 100000, 90000000, 0); /* outside the window */
    flush(st[0]);
    flush(st[1]);
    cmr_met_filter_t f = {.kind = 1, .env = "prod", .agent = -1};
    cmr_met_top_t t;
    assert_int_equal(cmr_met_top(st, 2, &f, T0, T0 + 3600000, CMR_MET_P99, 3, &t), 0);
    assert_int_equal(t.n, 3);
    for (int k = 0; k < 3; k++) {
        assert_int_equal(t.items[k].labels.subject, 104 - (uint64_t)k);
        assert_int_equal(t.items[k].value.count, 10 * (5 - (uint64_t)k));
        assert_true(fabs(t.items[k].stat - 1e6 * (5 - k)) <= 1e6 * (5 - k) / 128);
    }
    cmr_met_top_free(&t);
    assert_int_equal(cmr_met_top(st, 2, &f, T0, T0 + 3600000, CMR_MET_COUNT, 10, &t), 0);
    assert_int_equal(t.n, 5);
    assert_int_equal(t.items[0].stat, 50);
    assert_int_equal(t.items[4].stat, 10);
    assert_int_equal(t.items[4].labels.subject, 100);
    cmr_met_top_free(&t);
    /* errors: 5,4,3,2,1 -> subject 100 first; error rate 5/10, 4/20, ... */
    assert_int_equal(cmr_met_top(st, 2, &f, T0, T0 + 3600000, CMR_MET_ERRORS, 2, &t), 0);
    assert_int_equal(t.n, 2);
    assert_int_equal(t.items[0].labels.subject, 100);
    assert_int_equal(t.items[1].labels.subject, 101);
    cmr_met_top_free(&t);
    assert_int_equal(cmr_met_top(st, 2, &f, T0, T0 + 3600000, CMR_MET_ERROR_RATE, 1, &t), 0);
    assert_int_equal(t.n, 1);
    assert_true(fabs(t.items[0].stat - 0.5) < 1e-9);
    cmr_met_top_free(&t);
    assert_int_equal(cmr_met_top(st, 2, &f, T0, T0 + 3600000, CMR_MET_MEAN, 5, &t), 0);
    for (int k = 0; k < 5; k++)
        assert_true(fabs(t.items[k].stat - 1e6 * (5 - k)) < 1e-3);
    cmr_met_top_free(&t);
    /* the older big point counts when the window includes it */
    assert_int_equal(cmr_met_top(st, 2, &f, T0 - DAY, T0 + 3600000, CMR_MET_MAX, 1, &t), 0);
    assert_int_equal(t.items[0].labels.subject, 100);
    assert_int_equal(t.items[0].stat, 90000000);
    cmr_met_top_free(&t);
    /* any kind: the transaction series wins on p50 */
    assert_int_equal(cmr_met_top(st, 2, NULL, T0, T0 + 3600000, CMR_MET_P50, 1, &t), 0);
    assert_int_equal(t.items[0].labels.kind, 2);
    cmr_met_top_free(&t);
    /* ties: same statistic -> smaller series id first */
    cmr_met_labels_t tie[4];
    for (int i = 0; i < 4; i++) {
        labels(&tie[i], 1, "tie", 500 + (uint64_t)i, 0);
        add_fixed(st[0], &tie[i], T0 + 5000, 7, 3000, 0);
    }
    flush(st[0]);
    cmr_met_filter_t ft = {.env = "tie", .agent = -1};
    assert_int_equal(cmr_met_top(st, 2, &ft, T0, T0 + 60000, CMR_MET_COUNT, 4, &t), 0);
    assert_int_equal(t.n, 4);
    for (int k = 1; k < 4; k++) {
        assert_true(t.items[k - 1].series_id < t.items[k].series_id);
        assert_int_equal(t.items[k].stat, 7);
    }
    cmr_met_top_free(&t);
    /* an empty window: no results */
    assert_int_equal(cmr_met_top(st, 2, &f, T0 + DAY, T0 + 2 * DAY, CMR_MET_P99, 3, &t), 0);
    assert_int_equal(t.n, 0);
    cmr_met_top_free(&t);
    cmr_met_store_close(st[0]);
    cmr_met_store_close(st[1]);
}

typedef struct listed {
    uint64_t ids[64];
    size_t n;
} listed_t;

static int on_series(const cmr_met_labels_t *l, uint64_t sid, void *opaque)
{
    listed_t *ls = opaque;
    assert_int_equal(cmr_met_series_id(l), sid);
    for (size_t i = 0; i < ls->n; i++)
        assert_true(ls->ids[i] != sid); /* once */
    ls->ids[ls->n++] = sid;
    return 0;
}

static size_t list_count(cmr_met_store_t **s, size_t n, const cmr_met_filter_t *f)
{
    listed_t ls = {0};
    assert_int_equal(cmr_met_list_series(s, n, f, on_series, &ls), 0);
    return ls.n;
}

static void test_list_series(void **state)
{
    (void)state;
    cmr_met_store_t *st[2] = {open_store("l1", NULL), open_store("l2", NULL)};
    cmr_met_labels_t l;
    /* methods 1..3 x agents {0, 11, 12} in prod, method 1 agent 0 in dev, transaction 1 in prod */
    for (uint64_t m = 1; m <= 3; m++)
        for (int64_t a = 0; a <= 12; a += (a ? 1 : 11)) {
            labels(&l, 1, "prod", m, a);
            add_fixed(st[0], &l, T0, 1, 1000, 0);
            add_fixed(st[1], &l, T0, 1, 1000, 0); /* in both stores */
        }
    labels(&l, 1, "dev", 1, 0);
    add_fixed(st[1], &l, T0, 1, 1000, 0);
    labels(&l, 2, "prod", 1, 0);
    add_fixed(st[0], &l, T0, 1, 1000, 0);
    flush(st[0]);
    flush(st[1]);
    assert_int_equal(list_count(st, 2, NULL), 11);
    assert_int_equal(list_count(st, 2, &(cmr_met_filter_t){.agent = -1}), 11);
    assert_int_equal(list_count(st, 2, &(cmr_met_filter_t){.agent = 0}), 5);
    assert_int_equal(list_count(st, 2, &(cmr_met_filter_t){.agent = 11}), 3);
    assert_int_equal(list_count(st, 2, &(cmr_met_filter_t){.kind = 2, .agent = -1}), 1);
    assert_int_equal(list_count(st, 2, &(cmr_met_filter_t){.env = "dev", .agent = -1}), 1);
    assert_int_equal(list_count(st, 2, &(cmr_met_filter_t){.env = "pro", .agent = -1}), 0);
    assert_int_equal(list_count(st, 2, &(cmr_met_filter_t){.subject = 2, .agent = -1}), 3);
    assert_int_equal(list_count(st, 2, &(cmr_met_filter_t){.kind = 1, .env = "prod", .subject = 1, .agent = 12}), 1);
    assert_int_equal(list_count(st, 1, &(cmr_met_filter_t){.agent = -1}), 10);
    cmr_met_store_close(st[0]);
    cmr_met_store_close(st[1]);
}

/* --- state ------------------------------------------------------------------------------------------ */

static int on_state(const void *k, size_t kl, const void *v, size_t vl, void *opaque)
{
    (void)k;
    (void)v;
    (void)vl;
    assert_true(kl >= 5 && !memcmp(k, "rule/", 5));
    (*(int *)opaque)++;
    return 0;
}

static void test_state(void **state)
{
    (void)state;
    cmr_met_store_t *s = open_store("st", NULL);
    void *v;
    size_t vl;
    assert_int_equal(cmr_met_state_get(s, "rule/1", 6, &v, &vl), 0);
    assert_null(v);
    assert_int_equal(cmr_met_state_put(s, "rule/1", 6, "firing", 6), 0);
    assert_int_equal(cmr_met_state_put(s, "rule/2", 6, "ok", 2), 0);
    assert_int_equal(cmr_met_state_put(s, "other", 5, "x", 1), 0);
    assert_int_equal(cmr_met_state_get(s, "rule/1", 6, &v, &vl), 1); /* pending */
    assert_int_equal(vl, 6);
    assert_memory_equal(v, "firing", 6);
    free(v);
    flush(s);
    assert_int_equal(cmr_met_state_get(s, "rule/2", 6, &v, &vl), 1);
    assert_memory_equal(v, "ok", 2);
    free(v);
    int n = 0;
    assert_int_equal(cmr_met_state_scan(s, "rule/", 5, on_state, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(cmr_met_state_del(s, "rule/2", 6), 0);
    assert_int_equal(cmr_met_state_get(s, "rule/2", 6, &v, &vl), 0); /* pending delete */
    flush(s);
    cmr_met_store_close(s);
    s = open_store("st", NULL);
    assert_int_equal(cmr_met_state_get(s, "rule/2", 6, &v, &vl), 0);
    assert_int_equal(cmr_met_state_get(s, "rule/1", 6, &v, &vl), 1);
    free(v);
    n = 0;
    assert_int_equal(cmr_met_state_scan(s, "rule/", 5, on_state, &n), 0);
    assert_int_equal(n, 1);
    cmr_met_store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_value_codec),
        cmocka_unit_test(test_labels),
        cmocka_unit_test_setup_teardown(test_rollups_exact, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_two_stores, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_seen_applied, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_cardinality, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_retention, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_corrupt_values, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_top, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_list_series, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_state, make_tmp, remove_tmp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
