/*
 * met_query.c - reads of the metrics store (cmr/metrics_store.h): one series' buckets,
 * a value over a window, the list of series and the top-N series by a statistic.
 *
 * Every query takes an array of stores (a worker's partitions, possibly opened
 * read-only) and merges what they hold: the same series may have points in several
 * stores, and values of the same bucket merge exactly (cmr_met_value_merge).
 *
 * Windows (cmr_met_window, cmr_met_top) are covered with the coarsest buckets that fit:
 * [from, to) widened to 10 s boundaries is split recursively into whole hours in the
 * middle, whole minutes next to them and 10 s buckets at the edges (cover()). Since
 * every point is in all three resolutions, the sum is exact, and a 24 h window reads at
 * most 23 + 2 * 59 + 2 * 5 buckets per series instead of 8,640.
 *
 * Top-N: the matching series are listed once (deduplicated across stores); for each,
 * the window is merged with one iterator per store (created once per query, reused by
 * seeks). Statistics that need no histogram (MAX, MEAN, COUNT, ERRORS, ERROR_RATE) decode
 * only the scalars. Only (statistic, series) pairs are kept; the winners' full values are
 * read again at the end, so memory stays small with 10^5 series.
 *
 * Since when JVMs report (cmr_met_reporting_since, for rates over a window that began
 * before the data): the earliest idempotence mark, one seek per agent until one is at or
 * before the window's start (on a fleet that reported before the window: one seek); a
 * new fleet of 10^4 JVMs costs 10^4 seeks per top-N query; beyond 10^5 it is not told.
 *
 * Ownership: values handed to callbacks are the query's, valid during the call; top-N
 * results belong to the caller (cmr_met_top_free). Stored values that do not decode are
 * skipped and counted in their store's corrupt_operands.
 */
#include <stdlib.h>
#include <string.h>

#include "cmr/bytes.h"
#include "met_internal.h"

#define MET_SINCE_MAX_AGENTS 100000   /* cmr_met_reporting_since gives up beyond: seeks per query */
#define MET_SINCE_MARGIN_MS 3600000LL /* marks this close to their retention horizon tell nothing */

/* --- iterators over the points of the stores --------------------------------------------- */

typedef struct points_iters {
    rocksdb_iterator_t **it; /* owned; one per store */
    size_t n;
} points_iters_t;

static int iters_open(points_iters_t *pi, cmr_met_store_t *const *stores, size_t n)
{
    pi->n = 0;
    pi->it = calloc(n ? n : 1, sizeof *pi->it);
    if (!pi->it)
        return -1;
    for (size_t i = 0; i < n; i++)
        pi->it[pi->n++] = rocksdb_create_iterator_cf(stores[i]->db, stores[i]->ro, stores[i]->cfs[MET_CF_POINTS]);
    return 0;
}

static void iters_close(points_iters_t *pi)
{
    for (size_t i = 0; i < pi->n; i++)
        rocksdb_iter_destroy(pi->it[i]);
    free(pi->it);
    pi->it = NULL;
    pi->n = 0;
}

/* The bucket the iterator is on when it is still in (res, sid) and before to_ms; else -1. */
static int64_t iter_bucket(rocksdb_iterator_t *it, cmr_met_res_t res, uint64_t sid, int64_t to_ms)
{
    if (!rocksdb_iter_valid(it))
        return -1;
    size_t kl;
    const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
    if (kl != MET_POINT_KEY_LEN || k[0] != res || cmr_be64(k + 1) != sid)
        return -1;
    int64_t b = (int64_t)cmr_be64(k + 9);
    return b < to_ms ? b : -1;
}

static void iter_seek(rocksdb_iterator_t *it, cmr_met_res_t res, uint64_t sid, int64_t from_ms)
{
    uint8_t key[MET_POINT_KEY_LEN];
    met_point_key(key, res, sid, from_ms);
    rocksdb_iter_seek(it, (const char *)key, sizeof key);
}

/* Merges the value under the iterator into acc; a corrupt value is counted and skipped. */
static void merge_current(cmr_met_store_t *s, rocksdb_iterator_t *it, met_acc_t *acc, bool with_hist)
{
    size_t vl;
    const uint8_t *v = (const uint8_t *)rocksdb_iter_value(it, &vl);
    if (met_acc_add(acc, v, vl, with_hist) != 0)
        met_count_corrupt(s);
}

/* --- one series, bucket by bucket ----------------------------------------------------------- */

static int64_t floor_to(int64_t t, int64_t r)
{
    int64_t q = t / r;
    if (t % r < 0)
        q--;
    return q * r;
}

static int64_t ceil_to(int64_t t, int64_t r)
{
    return -floor_to(-t, r);
}

/* The smallest current bucket over the stores, or -1 when all are done. */
static int64_t min_bucket(const int64_t *cur, size_t n)
{
    int64_t m = -1;
    for (size_t i = 0; i < n; i++)
        if (cur[i] >= 0 && (m < 0 || cur[i] < m))
            m = cur[i];
    return m;
}

int cmr_met_series_read(cmr_met_store_t *const *stores, size_t n, const cmr_met_labels_t *l, cmr_met_res_t res,
                        int64_t from_ms, int64_t to_ms, cmr_met_bucket_cb *cb, void *opaque)
{
    if ((unsigned)res >= CMR_MET_NRES)
        return -1;
    uint64_t sid = cmr_met_series_id(l);
    int64_t from = floor_to(from_ms < 0 ? 0 : from_ms, cmr_met_res_ms(res));
    points_iters_t pi;
    int64_t *cur = calloc(n ? n : 1, sizeof *cur);
    if (!cur || iters_open(&pi, stores, n) != 0) {
        free(cur);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        iter_seek(pi.it[i], res, sid, from);
        cur[i] = iter_bucket(pi.it[i], res, sid, to_ms);
    }
    met_acc_t acc = {0};
    cmr_met_value_t v = {0};
    int rc = 0;
    for (int64_t b; rc == 0 && (b = min_bucket(cur, n)) >= 0;) {
        met_acc_reset(&acc);
        for (size_t i = 0; i < n; i++) {
            if (cur[i] != b)
                continue;
            merge_current(stores[i], pi.it[i], &acc, true);
            rocksdb_iter_next(pi.it[i]);
            cur[i] = iter_bucket(pi.it[i], res, sid, to_ms);
        }
        rc = met_acc_value(&acc, &v);
        if (rc == 0 && cb(b, &v, opaque))
            break;
    }
    met_acc_free(&acc);
    cmr_met_value_free(&v);
    iters_close(&pi);
    free(cur);
    return rc;
}

/* --- windows --------------------------------------------------------------------------------- */

typedef struct window_ctx {
    cmr_met_store_t *const *stores;
    points_iters_t *pi;
    uint64_t sid;
    bool with_hist;
    met_acc_t *acc;
} window_ctx_t;

/* Merges the buckets of resolution res starting in [a, b) of every store into out. */
static int merge_range(window_ctx_t *w, cmr_met_res_t res, int64_t a, int64_t b)
{
    for (size_t i = 0; i < w->pi->n; i++) {
        rocksdb_iterator_t *it = w->pi->it[i];
        for (iter_seek(it, res, w->sid, a); iter_bucket(it, res, w->sid, b) >= 0; rocksdb_iter_next(it))
            merge_current(w->stores[i], it, w->acc, w->with_hist);
    }
    return 0;
}

/* Covers [a, b) (10 s aligned) with buckets of resolution `level` or finer: the part that
 * whole buckets of `level` fill, and the two edges recursively with finer ones. */
static int cover(window_ctx_t *w, int level, int64_t a, int64_t b)
{
    if (a >= b)
        return 0;
    int64_t r = cmr_met_res_ms((cmr_met_res_t)level);
    int64_t lo = ceil_to(a, r), hi = floor_to(b, r);
    if (level == 0 || lo >= hi)
        return level == 0 ? merge_range(w, CMR_MET_RES_10S, a, b) : cover(w, level - 1, a, b);
    if (merge_range(w, (cmr_met_res_t)level, lo, hi) != 0)
        return -1;
    return cover(w, level - 1, a, lo) || cover(w, level - 1, hi, b) ? -1 : 0;
}

/* The window's merge into acc (reset first). */
static int window_with(cmr_met_store_t *const *stores, points_iters_t *pi, uint64_t sid, int64_t from_ms, int64_t to_ms,
                       bool with_hist, met_acc_t *acc)
{
    met_acc_reset(acc);
    int64_t r0 = cmr_met_res_ms(CMR_MET_RES_10S);
    window_ctx_t w = {stores, pi, sid, with_hist, acc};
    return cover(&w, CMR_MET_NRES - 1, floor_to(from_ms < 0 ? 0 : from_ms, r0), ceil_to(to_ms, r0));
}

int cmr_met_window(cmr_met_store_t *const *stores, size_t n, const cmr_met_labels_t *l, int64_t from_ms, int64_t to_ms,
                   cmr_met_value_t *out)
{
    points_iters_t pi;
    if (iters_open(&pi, stores, n) != 0)
        return -1;
    met_acc_t acc = {0};
    int rc = window_with(stores, &pi, cmr_met_series_id(l), from_ms, to_ms, true, &acc);
    if (rc == 0)
        rc = met_acc_value(&acc, out);
    met_acc_free(&acc);
    iters_close(&pi);
    return rc;
}

/* --- since when JVMs report --------------------------------------------------------------------- */

/* The earliest interval of one store's marks, of agent_id or (0) of every agent: one seek
 * per agent (the marks are agent | interval start, so an agent's first key is its
 * earliest). Updates *min, and stops once it is at or before stop_ms; counts the agents
 * visited in *agents. */
static void earliest_marks(cmr_met_store_t *s, int64_t agent_id, int64_t stop_ms, int64_t *min, size_t *agents)
{
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, s->ro, s->cfs[MET_CF_APPLIED]);
    uint8_t seek[8];
    cmr_put_be64(seek, (uint64_t)agent_id);
    for (rocksdb_iter_seek(it, (const char *)seek, sizeof seek); rocksdb_iter_valid(it);) {
        size_t kl;
        const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
        uint64_t agent = cmr_be64(k);
        if (kl != MET_APPLIED_KEY_LEN || (agent_id != 0 && agent != (uint64_t)agent_id))
            break;
        int64_t start = cmr_be64_ordered(k + 8);
        if (start < *min)
            *min = start;
        if (agent_id != 0 || *min <= stop_ms || agent == UINT64_MAX || ++*agents > MET_SINCE_MAX_AGENTS)
            break;
        cmr_put_be64(seek, agent + 1);
        rocksdb_iter_seek(it, (const char *)seek, sizeof seek);
    }
    rocksdb_iter_destroy(it);
}

int64_t cmr_met_reporting_since(cmr_met_store_t *const *stores, size_t n, int64_t agent_id, int64_t from_ms,
                                int64_t now_ms)
{
    /* the marks of the whole window must still be there: none dropped after from_ms */
    for (size_t i = 0; i < n; i++)
        if (from_ms < now_ms - met_applied_retention_ms(stores[i]) + MET_SINCE_MARGIN_MS)
            return INT64_MIN;
    int64_t min = INT64_MAX;
    size_t agents = 0;
    for (size_t i = 0; i < n && min > from_ms; i++)
        earliest_marks(stores[i], agent_id, from_ms, &min, &agents);
    return min == INT64_MAX || min <= from_ms || agents > MET_SINCE_MAX_AGENTS ? INT64_MIN : min;
}

/* --- listing series -------------------------------------------------------------------------- */

static bool filter_match(const cmr_met_filter_t *f, const cmr_met_labels_t *l)
{
    if (!f)
        return true;
    if (f->kind && f->kind != l->kind)
        return false;
    if (f->env && (strlen(f->env) != l->env_len || memcmp(f->env, l->env, l->env_len)))
        return false;
    if (f->subject && f->subject != l->subject)
        return false;
    if (f->agent == 0 ? l->agent_id != 0 : f->agent > 0 && f->agent != l->agent_id)
        return false;
    return true;
}

/* Visits the matching series of one store not in `seen` (and adds them to it). */
static int list_store(cmr_met_store_t *s, const cmr_met_filter_t *f, cmr_u64map_t *seen, cmr_met_series_cb *cb,
                      void *opaque, bool *stopped)
{
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, s->ro, s->cfs[MET_CF_SERIES]);
    int rc = 0;
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it) && !*stopped; rocksdb_iter_next(it)) {
        size_t kl, vl;
        const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
        const uint8_t *v = (const uint8_t *)rocksdb_iter_value(it, &vl);
        cmr_met_labels_t l;
        if (kl != MET_SERIES_KEY_LEN || met_labels_decode(&l, v, vl) != 0) {
            met_count_corrupt(s);
            continue;
        }
        uint64_t sid = cmr_be64(k);
        if (!filter_match(f, &l) || cmr_u64map_has(seen, sid))
            continue;
        if (cmr_u64map_put(seen, sid, NULL) != 0) {
            rc = -1;
            break;
        }
        *stopped = cb(&l, sid, opaque) != 0;
    }
    rocksdb_iter_destroy(it);
    return rc;
}

int cmr_met_list_series(cmr_met_store_t *const *stores, size_t n, const cmr_met_filter_t *f, cmr_met_series_cb *cb,
                        void *opaque)
{
    cmr_u64map_t seen = {0};
    bool stopped = false;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0 && !stopped; i++)
        rc = list_store(stores[i], f, &seen, cb, opaque, &stopped);
    cmr_u64map_free(&seen);
    return rc;
}

/* --- top-N ------------------------------------------------------------------------------------- */

typedef struct candidate {
    cmr_met_labels_t labels;
    uint64_t sid;
    double stat;
} candidate_t;

typedef struct candidates {
    candidate_t *items; /* owned */
    size_t n, cap;
    bool oom; /* the list is incomplete */
} candidates_t;

static int collect_candidate(const cmr_met_labels_t *l, uint64_t sid, void *opaque)
{
    candidates_t *c = opaque;
    if (CMR_ARRAY_GROW(c->items, c->cap, c->n + 1) != 0) {
        c->oom = true;
        return -1;
    }
    c->items[c->n++] = (candidate_t){*l, sid, 0};
    return 0;
}

static bool stat_needs_hist(cmr_met_stat_t stat)
{
    return stat <= CMR_MET_P999;
}

static int by_stat_desc(const void *a, const void *b)
{
    const candidate_t *x = a, *y = b;
    if (x->stat != y->stat)
        return x->stat > y->stat ? -1 : 1;
    return x->sid < y->sid ? -1 : x->sid > y->sid;
}

/* Computes every candidate's statistic; those without calls in the window are removed. */
static int rank_candidates(cmr_met_store_t *const *stores, points_iters_t *pi, candidates_t *c, int64_t from_ms,
                           int64_t to_ms, cmr_met_stat_t stat)
{
    met_acc_t acc = {0};
    size_t kept = 0;
    int rc = 0;
    for (size_t i = 0; i < c->n && rc == 0; i++) {
        rc = window_with(stores, pi, c->items[i].sid, from_ms, to_ms, stat_needs_hist(stat), &acc);
        if (rc == 0 && acc.v.count > 0) {
            c->items[kept] = c->items[i];
            c->items[kept++].stat = met_acc_stat(&acc, stat);
        }
    }
    c->n = kept;
    met_acc_free(&acc);
    return rc;
}

/* Fills out with the first `limit` candidates (sorted) and their full window values. */
static int build_results(cmr_met_store_t *const *stores, points_iters_t *pi, const candidates_t *c, size_t limit,
                         int64_t from_ms, int64_t to_ms, cmr_met_top_t *out)
{
    size_t n = c->n < limit ? c->n : limit;
    out->items = calloc(n ? n : 1, sizeof *out->items);
    if (!out->items)
        return -1;
    met_acc_t acc = {0};
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++, out->n++) {
        cmr_met_top_item_t *it = &out->items[i];
        it->labels = c->items[i].labels;
        it->series_id = c->items[i].sid;
        it->stat = c->items[i].stat;
        rc = window_with(stores, pi, it->series_id, from_ms, to_ms, true, &acc);
        if (rc == 0)
            rc = met_acc_value(&acc, &it->value);
    }
    met_acc_free(&acc);
    return rc;
}

int cmr_met_top(cmr_met_store_t *const *stores, size_t n, const cmr_met_filter_t *f, int64_t from_ms, int64_t to_ms,
                cmr_met_stat_t stat, size_t limit, cmr_met_top_t *out)
{
    *out = (cmr_met_top_t){0};
    candidates_t c = {0};
    points_iters_t pi = {0};
    int rc = cmr_met_list_series(stores, n, f, collect_candidate, &c) == 0 && !c.oom ? 0 : -1;
    if (rc == 0)
        rc = iters_open(&pi, stores, n);
    if (rc == 0)
        rc = rank_candidates(stores, &pi, &c, from_ms, to_ms, stat);
    if (rc == 0 && c.n > 1)
        qsort(c.items, c.n, sizeof *c.items, by_stat_desc);
    if (rc == 0)
        rc = build_results(stores, &pi, &c, limit, from_ms, to_ms, out);
    if (pi.it)
        iters_close(&pi);
    free(c.items);
    if (rc != 0)
        cmr_met_top_free(out);
    return rc;
}

void cmr_met_top_free(cmr_met_top_t *t)
{
    for (size_t i = 0; i < t->n; i++)
        cmr_met_value_free(&t->items[i].value);
    free(t->items);
    *t = (cmr_met_top_t){0};
}
