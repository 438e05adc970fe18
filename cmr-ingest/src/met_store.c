/*
 * met_store.c - the metrics time-series store (cmr/metrics_store.h): opening and closing,
 * the value codec, the RocksDB merge operator that does the roll-ups, grouped writes,
 * idempotence marks, the rules' state and retention. Reads are in met_query.c.
 *
 * Column families (keys big endian, so byte order = numeric order):
 *   series   series id (8)                                  -> labels (met_labels_encode)
 *   points   resolution (1) | series id (8) | bucket ms (8)  -> value (cmr_met_value_encode)
 *   applied  agent id (8) | interval start ms (8, ordered)   -> apply wall time ms (8)
 *   state    any bytes                                       -> any bytes
 *
 * Roll-ups. cmr_met_store_add writes the point with RocksDB Merge at all three
 * resolutions; the merge operator (full and partial merge) decodes the operands, merges
 * them with cmr_met_value_merge and re-encodes. A stored operand that does not decode is
 * skipped and counted (stats.corrupt_operands): the merge always succeeds, so a bad
 * value never makes a read or a compaction fail.
 *
 * Retention. A compaction filter on `points` drops a bucket once it ended before
 * now - retention(resolution); one on `applied` drops marks older than the 10 s
 * retention. "now" is the now_ms of the last cmr_met_store_retention call (an atomic the
 * background compactions read): before the first call nothing is dropped, so a worker
 * that replays old data is not surprised by its own clock. The call then runs a manual
 * CompactRange of both CFs. Why not DeleteRange: old data is spread over every series
 * (the time is the last key component), so it would take one range per series and
  * resolution. Merge operands: the C API's compaction filter is not asked about operands;
 * with RocksDB 7.8 a forced bottommost compaction merges them and the result is filtered
 * in the same pass (the unit test checks it with buckets that are still operands). As a
 * safeguard for versions that would not, the retention call looks for the oldest bucket
 * of each resolution afterwards (one seek per series) and compacts once more when an
 * expired one is left. Series whose points are all gone
 * stay in `series` (a few dozen bytes each; list_series still shows them, top-N leaves
 * them out because their window is empty); they count against max_series.
 *
 * Writes. One pending WriteBatch per store (one writer thread). Everything a worker does
 * for a message (merges, the applied mark, rule state) goes into it and is written by
 * cmr_met_store_flush in one atomic, fsynced write. The store keeps in memory the set of
 * series ids (loaded at open, ~40 bytes each) for the cardinality bound, the applied
 * marks and the state writes of the pending batch (so seen and state_get see them).
 *
  * Merging many values. cmr_hist_merge builds a new sorted bin array per merge; the merge
 * operator, windows and top-N merge dozens to hundreds of values at a time, so they go
 * through met_acc_t instead: scalars merged as usual, histogram bins parsed straight from
 * the encoding into a dense array of the 3,776 bucket counts (validated as
 * cmr_hist_decode validates), turned back into a cmr_hist_t once at the end. This reads
 * cmr_hist_encode's documented layout (histogram.h) itself.
 *
 * Ownership: the store owns every RocksDB handle, the pending batch and the in-memory
 * sets; cmr_met_store_close releases them all. The merge operator belongs to the points
 * CF's options (RocksDB frees it); the compaction filters are ours and are destroyed
 * after the database is closed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <xxhash.h>

#include "cmr/bytes.h"
#include "cmr/clock.h"
#include "cmr/log.h"
#include "met_internal.h"

static const char *const cf_names[MET_NCFS] = {"default", "series", "points", "applied", "state"};
static const int64_t res_ms[CMR_MET_NRES] = {10000, 60000, 3600000};
#define RETENTION_KEY "#retention.10s" /* state: the writer's 10 s retention, ms (8 bytes) */
static const int64_t default_retention_ms[CMR_MET_NRES] = {2 * 86400000LL, 14 * 86400000LL, 400 * 86400000LL};

#define VALUE_VERSION 1
#define FLAG_SLOWEST 1

typedef struct met_state_val {
    bool deleted;
    size_t len;
    uint8_t data[];
} met_state_val_t;

int64_t cmr_met_res_ms(cmr_met_res_t res)
{
    return (unsigned)res < CMR_MET_NRES ? res_ms[res] : 0;
}

/* --- labels --------------------------------------------------------------------------- */

static bool env_valid(const void *env, size_t len)
{
    return len <= CMR_MET_ENV_MAX && (len == 0 || memchr(env, 0, len) == NULL);
}

static bool labels_valid(const cmr_met_labels_t *l)
{
    return (l->kind == CMR_MET_METHOD || l->kind == CMR_MET_TRANSACTION) && env_valid(l->env, l->env_len) &&
           l->env[l->env_len] == 0;
}

int cmr_met_labels_set(cmr_met_labels_t *l, cmr_met_kind_t kind, const void *env, size_t env_len, uint64_t subject,
                       int64_t agent_id)
{
    memset(l, 0, sizeof *l);
    if ((kind != CMR_MET_METHOD && kind != CMR_MET_TRANSACTION) || (env_len && !env) || !env_valid(env, env_len))
        return -1;
    l->kind = (uint8_t)kind;
    l->env_len = (uint8_t)env_len;
    if (env_len)
        memcpy(l->env, env, env_len);
    l->subject = subject;
    l->agent_id = agent_id;
    return 0;
}

void met_labels_encode(const cmr_met_labels_t *l, cmr_buf_t *out)
{
    uint8_t *p = cmr_buf_append(out, 17);
    if (!p)
        return;
    p[0] = l->kind;
    cmr_put_be64(p + 1, l->subject);
    cmr_put_be64(p + 9, (uint64_t)l->agent_id);
    cmr_buf_put(out, l->env, l->env_len);
}

int met_labels_decode(cmr_met_labels_t *l, const uint8_t *p, size_t len)
{
    if (len < 17)
        return -1;
    return cmr_met_labels_set(l, (cmr_met_kind_t)p[0], p + 17, len - 17, cmr_be64(p + 1), (int64_t)cmr_be64(p + 9));
}

uint64_t cmr_met_series_id(const cmr_met_labels_t *l)
{
    uint8_t b[17 + CMR_MET_ENV_MAX];
    size_t n = l->env_len <= CMR_MET_ENV_MAX ? l->env_len : CMR_MET_ENV_MAX;
    b[0] = l->kind;
    cmr_put_be64(b + 1, l->subject);
    cmr_put_be64(b + 9, (uint64_t)l->agent_id);
    memcpy(b + 17, l->env, n);
    return XXH3_64bits(b, 17 + n);
}

void met_point_key(uint8_t key[MET_POINT_KEY_LEN], cmr_met_res_t res, uint64_t sid, int64_t bucket_ms)
{
    key[0] = (uint8_t)res;
    cmr_put_be64(key + 1, sid);
    cmr_put_be64(key + 9, (uint64_t)bucket_ms);
}

static void applied_key(uint8_t key[MET_APPLIED_KEY_LEN], int64_t agent_id, int64_t interval_start_ms)
{
    cmr_put_be64(key, (uint64_t)agent_id);
    cmr_put_be64_ordered(key + 8, interval_start_ms);
}

/* --- values ----------------------------------------------------------------------------- */

void cmr_met_value_init(cmr_met_value_t *v)
{
    memset(v, 0, sizeof *v);
}

void cmr_met_value_reset(cmr_met_value_t *v)
{
    cmr_hist_t h = v->hist;
    cmr_hist_reset(&h);
    memset(v, 0, sizeof *v);
    v->hist = h;
}

void cmr_met_value_free(cmr_met_value_t *v)
{
    cmr_hist_free(&v->hist);
    memset(v, 0, sizeof *v);
}

static void merge_extremes(cmr_met_value_t *dst, const cmr_met_value_t *src)
{
    if (!src->count)
        return;
    dst->min_ns = dst->count && dst->min_ns < src->min_ns ? dst->min_ns : src->min_ns;
    if (!dst->count || src->max_ns > dst->max_ns) {
        dst->max_ns = src->max_ns;
        dst->has_slowest = src->has_slowest;
        memcpy(dst->slowest_trace, src->slowest_trace, 16);
    } else if (src->max_ns == dst->max_ns && !dst->has_slowest && src->has_slowest) {
        dst->has_slowest = true;
        memcpy(dst->slowest_trace, src->slowest_trace, 16);
    }
}

int cmr_met_value_merge(cmr_met_value_t *dst, const cmr_met_value_t *src)
{
    if (cmr_hist_merge(&dst->hist, &src->hist) != 0)
        return -1;
    merge_extremes(dst, src);
    dst->count += src->count;
    dst->errors += src->errors;
    dst->sum_ns += src->sum_ns;
    dst->stalled += src->stalled;
    if (src->max_in_flight > dst->max_in_flight)
        dst->max_in_flight = src->max_in_flight;
    return 0;
}

int cmr_met_value_copy(cmr_met_value_t *dst, const cmr_met_value_t *src)
{
    cmr_met_value_reset(dst);
    if (cmr_met_value_merge(dst, src) != 0)
        return -1;
    dst->max_in_flight = src->max_in_flight; /* the merge kept max(0, it) */
    return 0;
}


static uint64_t zigzag(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static int64_t unzigzag(uint64_t v)
{
    return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

void cmr_met_value_encode(const cmr_met_value_t *v, cmr_buf_t *out)
{
    uint8_t head[2] = {VALUE_VERSION, v->has_slowest ? FLAG_SLOWEST : 0};
    cmr_buf_put(out, head, 2);
    cmr_buf_put_varint(out, v->count);
    cmr_buf_put_varint(out, v->errors);
    cmr_buf_put_varint(out, v->sum_ns);
    cmr_buf_put_varint(out, v->count ? v->min_ns : 0);
    cmr_buf_put_varint(out, v->count ? v->max_ns : 0);
    cmr_buf_put_varint(out, zigzag(v->max_in_flight));
    cmr_buf_put_varint(out, v->stalled);
    if (v->has_slowest)
        cmr_buf_put(out, v->slowest_trace, 16);
    cmr_hist_encode(&v->hist, out);
}

/* The scalars of an encoded value into v (its histogram untouched); *hist: where the
 * histogram's bytes start. 0 or -1. */
static int decode_scalars(cmr_met_value_t *v, const uint8_t *p, size_t len, const uint8_t **hist)
{
    const uint8_t *end = p + len;
    uint64_t f[7];
    if (len < 2 || p[0] != VALUE_VERSION || (p[1] & ~FLAG_SLOWEST))
        return -1;
    v->has_slowest = p[1] & FLAG_SLOWEST;
    p += 2;
    for (int i = 0; i < 7; i++)
        if (cmr_get_varint(&p, end, &f[i]))
            return -1;
    if (f[1] > f[0] || f[3] > f[4])
        return -1;
    v->count = f[0];
    v->errors = f[1];
    v->sum_ns = f[2];
    v->min_ns = f[3];
    v->max_ns = f[4];
    v->max_in_flight = unzigzag(f[5]);
    v->stalled = f[6];
    if (v->has_slowest) {
        if (end - p < 16)
            return -1;
        memcpy(v->slowest_trace, p, 16);
        p += 16;
    } else {
        memset(v->slowest_trace, 0, 16);
    }
    *hist = p;
    return 0;
}

int met_value_decode(cmr_met_value_t *v, const uint8_t *p, size_t len, bool with_hist)
{
    const uint8_t *hist;
    cmr_met_value_reset(v);
    if (decode_scalars(v, p, len, &hist) != 0 ||
        (with_hist && cmr_hist_decode(&v->hist, hist, (size_t)(p + len - hist)) != 0)) {
        cmr_met_value_reset(v);
        return -1;
    }
    return 0;
}

int cmr_met_value_decode(cmr_met_value_t *v, const uint8_t *p, size_t len)
{
    return met_value_decode(v, p, len, true);
}

/* --- dense accumulator (met_internal.h) ------------------------------------------------------ */

/* Takes back the first n bins that dense_hist added (from the bin list at p). */
static void dense_undo(met_acc_t *a, const uint8_t *p, const uint8_t *end, uint64_t n)
{
    uint64_t bucket = 0, delta, c;
    for (uint64_t i = 0; i < n && !cmr_get_varint(&p, end, &delta) && !cmr_get_varint(&p, end, &c); i++) {
        bucket += delta;
        a->bins[bucket] -= c;
    }
}

/* Adds the bins of an encoded histogram (cmr_hist_encode: count, min, max, 8-byte sum,
 * number of bins, (bucket delta, count) pairs) to the dense array, checked as
 * cmr_hist_decode checks them, in one pass: a bad one is taken back. 0 or -1. */
static int dense_hist(met_acc_t *a, const uint8_t *p, size_t len)
{
    const uint8_t *end = p + len;
    uint64_t count, min, max, nbins, bucket = 0, total = 0, first = 0, i = 0;
    if (cmr_get_varint(&p, end, &count) || cmr_get_varint(&p, end, &min) || cmr_get_varint(&p, end, &max) ||
        end - p < 8)
        return -1;
    uint64_t bits = cmr_le64(p);
    p += 8;
    if (cmr_get_varint(&p, end, &nbins) || nbins > CMR_HIST_BUCKETS || (count == 0) != (nbins == 0) || min > max)
        return -1;
    const uint8_t *list = p;
    for (; i < nbins; i++) {
        uint64_t delta, c;
        if (cmr_get_varint(&p, end, &delta) || cmr_get_varint(&p, end, &c) || c == 0 || (i > 0 && delta == 0))
            goto undo;
        if (delta >= CMR_HIST_BUCKETS - bucket || total + c < total) /* also: no wrap-around */
            goto undo;
        bucket += delta;
        if (i == 0)
            first = bucket;
        total += c;
        a->bins[bucket] += c;
    }
    if (p != end || total != count || (count && (cmr_hist_bucket(min) != first || cmr_hist_bucket(max) != bucket)))
        goto undo;
    if (!count)
        return 0;
    double sum;
    memcpy(&sum, &bits, sizeof sum);
    if (!a->hcount || first < a->lo)
        a->lo = (uint16_t)first;
    if (!a->hcount || bucket > a->hi)
        a->hi = (uint16_t)bucket;
    if (!a->hcount || min < a->hmin)
        a->hmin = min;
    if (!a->hcount || max > a->hmax)
        a->hmax = max;
    a->hcount += count;
    a->hsum += sum;
    return 0;
undo:
    dense_undo(a, list, end, i);
    return -1;
}

int met_acc_add(met_acc_t *a, const uint8_t *p, size_t len, bool with_hist)
{
    cmr_met_value_t v = {0}; /* scalars only: no memory to free */
    const uint8_t *hist;
    if (decode_scalars(&v, p, len, &hist) != 0)
        return -1;
    if (with_hist) {
        if (!a->bins && !(a->bins = calloc(CMR_HIST_BUCKETS, sizeof *a->bins)))
            return -1;
        if (dense_hist(a, hist, (size_t)(p + len - hist)) != 0)
            return -1;
    }
    return cmr_met_value_merge(&a->v, &v);
}

void met_acc_reset(met_acc_t *a)
{
    if (a->bins && a->hcount)
        memset(a->bins + a->lo, 0, (size_t)(a->hi - a->lo + 1) * sizeof *a->bins);
    cmr_met_value_reset(&a->v);
    a->hcount = a->hmin = a->hmax = 0;
    a->hsum = 0;
    a->lo = a->hi = 0;
}

void met_acc_free(met_acc_t *a)
{
    cmr_met_value_free(&a->v);
    free(a->bins);
    memset(a, 0, sizeof *a);
}

int met_acc_value(const met_acc_t *a, cmr_met_value_t *out)
{
    if (cmr_met_value_copy(out, &a->v) != 0)
        return -1;
    cmr_hist_t *h = &out->hist;
    if (!a->hcount)
        return 0;
    size_t need = 0;
    for (unsigned b = a->lo; b <= a->hi; b++)
        need += a->bins[b] != 0;
    if (cmr_array_grow(&h->bins, &h->cap, need, sizeof *h->bins, 8) != 0)
        return -1;
    for (unsigned b = a->lo; b <= a->hi; b++)
        if (a->bins[b])
            h->bins[h->n++] = (cmr_hist_bin_t){(uint16_t)b, a->bins[b]};
    h->count = a->hcount;
    h->min = a->hmin;
    h->max = a->hmax;
    h->sum = a->hsum;
    return 0;
}

/* As cmr_hist_quantile, over the dense bins. */
static double acc_quantile(const met_acc_t *a, double q)
{
    if (!a->hcount)
        return 0;
    uint64_t rank = (uint64_t)(q * (double)a->hcount);
    if ((double)rank < q * (double)a->hcount)
        rank++;
    if (rank == 0)
        rank = 1;
    uint64_t seen = 0;
    for (unsigned b = a->lo; b <= a->hi; b++) {
        seen += a->bins[b];
        if (seen >= rank) {
            uint64_t lo = cmr_hist_bucket_low((uint16_t)b), hi = cmr_hist_bucket_high((uint16_t)b);
            uint64_t v = lo + (hi - lo) / 2;
            return (double)(v < a->hmin ? a->hmin : v > a->hmax ? a->hmax : v);
        }
    }
    return (double)a->hmax;
}

double met_acc_stat(const met_acc_t *a, cmr_met_stat_t stat)
{
    static const double q[] = {0.5, 0.9, 0.95, 0.99, 0.999};
    return stat <= CMR_MET_P999 ? acc_quantile(a, q[stat]) : cmr_met_stat(&a->v, stat);
}

/* --- statistics ------------------------------------------------------------------------ */

static const char *const stat_names[] = {"p50", "p90",  "p95",   "p99",    "p999",
                                         "max", "mean", "count", "errors", "error_rate"};

double cmr_met_stat(const cmr_met_value_t *v, cmr_met_stat_t stat)
{
    static const double q[] = {0.5, 0.9, 0.95, 0.99, 0.999};
    switch (stat) {
    case CMR_MET_P50:
    case CMR_MET_P90:
    case CMR_MET_P95:
    case CMR_MET_P99:
    case CMR_MET_P999: return (double)cmr_hist_quantile(&v->hist, q[stat]);
    case CMR_MET_MAX: return v->count ? (double)v->max_ns : 0;
    case CMR_MET_MEAN: return v->count ? (double)v->sum_ns / (double)v->count : 0;
    case CMR_MET_COUNT: return (double)v->count;
    case CMR_MET_ERRORS: return (double)v->errors;
    case CMR_MET_ERROR_RATE: return v->count ? (double)v->errors / (double)v->count : 0;
    }
    return 0;
}

const char *cmr_met_stat_name(cmr_met_stat_t stat)
{
    return (size_t)stat < sizeof stat_names / sizeof *stat_names ? stat_names[stat] : "?";
}

int cmr_met_stat_parse(const char *name)
{
    for (size_t i = 0; i < sizeof stat_names / sizeof *stat_names; i++)
        if (!strcmp(name, stat_names[i]))
            return (int)i;
    return -1;
}

/* --- merge operator --------------------------------------------------------------------- */

void met_count_corrupt(cmr_met_store_t *s)
{
    atomic_fetch_add_explicit(&s->corrupt, 1, memory_order_relaxed);
}

/* Merges one encoded operand into acc; a corrupt one is counted and skipped. */
static void merge_operand(cmr_met_store_t *s, met_acc_t *acc, const char *p, size_t len)
{
    if (met_acc_add(acc, (const uint8_t *)p, len, true) != 0) {
        met_count_corrupt(s); /* (or out of memory: the operand is lost either way) */
        return;
    }
    atomic_fetch_add_explicit(&s->merges, 1, memory_order_relaxed);
}

/* The merged encoding, malloc'd (freed by merge_delete), or NULL. */
static char *merge_all(cmr_met_store_t *s, const char *existing, size_t elen, const char *const *ops,
                       const size_t *lens, int n, unsigned char *success, size_t *outlen)
{
    met_acc_t acc = {0};
    cmr_met_value_t v = {0};
    if (existing)
        merge_operand(s, &acc, existing, elen);
    for (int i = 0; i < n; i++)
        merge_operand(s, &acc, ops[i], lens[i]);
    cmr_buf_t out = {0};
    if (met_acc_value(&acc, &v) == 0)
        cmr_met_value_encode(&v, &out);
    else
        out.oom = true;
    met_acc_free(&acc);
    cmr_met_value_free(&v);
    *outlen = out.len;
    char *r = cmr_buf_take(&out);
    *success = r != NULL; /* only out of memory fails a merge */
    return r;
}

static char *merge_full(void *state, const char *key, size_t klen, const char *existing, size_t elen,
                        const char *const *ops, const size_t *lens, int n, unsigned char *success, size_t *outlen)
{
    (void)key;
    (void)klen;
    return merge_all(state, existing, elen, ops, lens, n, success, outlen);
}

static char *merge_partial(void *state, const char *key, size_t klen, const char *const *ops, const size_t *lens, int n,
                           unsigned char *success, size_t *outlen)
{
    (void)key;
    (void)klen;
    return merge_all(state, NULL, 0, ops, lens, n, success, outlen);
}

static void merge_delete(void *state, const char *value, size_t len)
{
    (void)state;
    (void)len;
    free((void *)value);
}

static void no_destroy(void *state)
{
    (void)state; /* the store outlives the database */
}

static const char *merge_name(void *state)
{
    (void)state;
    return "cmr.met.merge.v1";
}

/* --- retention: compaction filters ------------------------------------------------------ */

/* now - retention of res, or INT64_MIN when retention has not run yet. */
static int64_t cutoff_ms(cmr_met_store_t *s, int res)
{
    int64_t now = atomic_load_explicit(&s->cutoff_now_ms, memory_order_relaxed);
    return now > 0 ? now - s->o.retention_ms[res] : INT64_MIN;
}

static unsigned char filter_points(void *state, int level, const char *key, size_t klen, const char *val, size_t vlen,
                                   char **nv, size_t *nvlen, unsigned char *changed)
{
    (void)level, (void)val, (void)vlen, (void)nv, (void)nvlen;
    *changed = 0;
    const uint8_t *k = (const uint8_t *)key;
    if (klen != MET_POINT_KEY_LEN || k[0] >= CMR_MET_NRES)
        return 0;
    int64_t bucket = (int64_t)cmr_be64(k + 9);
    return bucket + res_ms[k[0]] <= cutoff_ms(state, k[0]);
}

static unsigned char filter_applied(void *state, int level, const char *key, size_t klen, const char *val, size_t vlen,
                                    char **nv, size_t *nvlen, unsigned char *changed)
{
    (void)level, (void)val, (void)vlen, (void)nv, (void)nvlen;
    *changed = 0;
    if (klen != MET_APPLIED_KEY_LEN)
        return 0;
    return cmr_be64_ordered((const uint8_t *)key + 8) < cutoff_ms(state, CMR_MET_RES_10S);
}

static const char *filter_name(void *state)
{
    (void)state;
    return "cmr.met.retention.v1";
}

/* --- open / close ----------------------------------------------------------------------- */

static int mkdirs(const char *path)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(tmp, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

static void fill_defaults(cmr_met_opts_t *o)
{
    if (!o->max_series)
        o->max_series = CMR_MET_DEFAULT_MAX_SERIES;
    for (int r = 0; r < CMR_MET_NRES; r++)
        if (o->retention_ms[r] <= 0)
            o->retention_ms[r] = default_retention_ms[r];
    if (!o->write_buffer_bytes)
        o->write_buffer_bytes = 16u << 20;
    if (!o->cache_bytes)
        o->cache_bytes = 32u << 20;
}

static rocksdb_options_t *points_options(cmr_met_store_t *s)
{
    rocksdb_options_t *o = rocksdb_options_create();
    rocksdb_options_set_write_buffer_size(o, s->o.write_buffer_bytes);
    rocksdb_options_set_compression(o, rocksdb_lz4_compression);
    /* 16 KiB blocks: a series' hour of minute buckets is one or two blocks */
    s->cache = rocksdb_cache_create_lru(s->o.cache_bytes);
    s->table = rocksdb_block_based_options_create();
    rocksdb_block_based_options_set_block_size(s->table, 16u << 10);
    rocksdb_block_based_options_set_block_cache(s->table, s->cache);
    rocksdb_options_set_block_based_table_factory(o, s->table);
    rocksdb_options_set_merge_operator(
        o, rocksdb_mergeoperator_create(s, no_destroy, merge_full, merge_partial, merge_delete, merge_name));
    s->points_filter = rocksdb_compactionfilter_create(s, no_destroy, filter_points, filter_name);
    rocksdb_options_set_compaction_filter(o, s->points_filter);
    return o;
}

static rocksdb_options_t *small_cf_options(rocksdb_compactionfilter_t *filter)
{
    rocksdb_options_t *o = rocksdb_options_create();
    rocksdb_options_set_write_buffer_size(o, 2u << 20);
    rocksdb_options_set_compression(o, rocksdb_lz4_compression);
    if (filter)
        rocksdb_options_set_compaction_filter(o, filter);
    return o;
}

static int load_series(cmr_met_store_t *s)
{
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, s->ro, s->cfs[MET_CF_SERIES]);
    int rc = 0;
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it) && rc == 0; rocksdb_iter_next(it)) {
        size_t kl;
        const char *k = rocksdb_iter_key(it, &kl);
        if (kl == MET_SERIES_KEY_LEN)
            rc = cmr_u64map_put(&s->series, cmr_be64((const uint8_t *)k), NULL);
    }
    rocksdb_iter_destroy(it);
    return rc;
}

static int open_db(cmr_met_store_t *s, char *err, size_t errlen)
{
    s->opts = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(s->opts, 1);
    rocksdb_options_set_create_missing_column_families(s->opts, 1);
    rocksdb_options_set_max_background_jobs(s->opts, 2);
    rocksdb_options_set_keep_log_file_num(s->opts, 2);
    rocksdb_options_set_max_total_wal_size(s->opts, 128u << 20);
    rocksdb_options_set_db_write_buffer_size(s->opts, s->o.write_buffer_bytes * 2);
    s->applied_filter = rocksdb_compactionfilter_create(s, no_destroy, filter_applied, filter_name);
    s->cf_opts[MET_CF_DEFAULT] = small_cf_options(NULL);
    s->cf_opts[MET_CF_SERIES] = small_cf_options(NULL);
    s->cf_opts[MET_CF_POINTS] = points_options(s);
    s->cf_opts[MET_CF_APPLIED] = small_cf_options(s->applied_filter);
    s->cf_opts[MET_CF_STATE] = small_cf_options(NULL);
    const rocksdb_options_t *cfo[MET_NCFS];
    for (int i = 0; i < MET_NCFS; i++)
        cfo[i] = s->cf_opts[i];
    char *e = NULL;
    if (s->o.read_only)
        s->db = rocksdb_open_for_read_only_column_families(s->opts, s->path, MET_NCFS, cf_names, cfo, s->cfs, 0, &e);
    else
        s->db = rocksdb_open_column_families(s->opts, s->path, MET_NCFS, cf_names, cfo, s->cfs, &e);
    if (!s->db) {
        snprintf(err, errlen, "cannot open metrics store %s: %s", s->path, e ? e : "unknown error");
        free(e);
        memset(s->cfs, 0, sizeof s->cfs);
        return -1;
    }
    return 0;
}

cmr_met_store_t *cmr_met_store_open(const char *path, const cmr_met_opts_t *o, char *err, size_t errlen)
{
    cmr_met_store_t *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->o = o ? *o : (cmr_met_opts_t){0};
    fill_defaults(&s->o);
    snprintf(s->path, sizeof s->path, "%s", path);
    if (!s->o.read_only && mkdirs(path) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
        cmr_met_store_close(s);
        return NULL;
    }
    if (open_db(s, err, errlen) != 0) {
        cmr_met_store_close(s);
        return NULL;
    }
    s->wo = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(s->wo, !s->o.no_sync);
    s->ro = rocksdb_readoptions_create();
    s->batch = rocksdb_writebatch_create();
    if (!s->o.read_only) { /* for readers with other options (met_applied_retention_ms) */
        uint8_t v[8];
        cmr_put_be64(v, (uint64_t)s->o.retention_ms[CMR_MET_RES_10S]);
        char *e = NULL;
        rocksdb_put_cf(s->db, s->wo, s->cfs[MET_CF_STATE], RETENTION_KEY, sizeof RETENTION_KEY - 1, (const char *)v,
                       sizeof v, &e);
        free(e); /* not kept: readers take their own options */
    }
    if (load_series(s) != 0) {
        snprintf(err, errlen, "out of memory loading the series of %s", path);
        cmr_met_store_close(s);
        return NULL;
    }
    return s;
}

int64_t met_applied_retention_ms(cmr_met_store_t *s)
{
    char *e = NULL;
    size_t vl = 0;
    char *v = rocksdb_get_cf(s->db, s->ro, s->cfs[MET_CF_STATE], RETENTION_KEY, sizeof RETENTION_KEY - 1, &vl, &e);
    int64_t r = v && vl == 8 ? (int64_t)cmr_be64((const uint8_t *)v) : s->o.retention_ms[CMR_MET_RES_10S];
    rocksdb_free(v);
    free(e);
    return r > 0 ? r : s->o.retention_ms[CMR_MET_RES_10S];
}

static void clear_pending_state(cmr_met_store_t *s)
{
    size_t it = 0;
    const void *k;
    size_t kl;
    void *v;
    while (cmr_map_next(&s->pending_state, &it, &k, &kl, &v))
        free(v);
    cmr_map_clear(&s->pending_state);
}

void cmr_met_store_close(cmr_met_store_t *s)
{
    if (!s)
        return;
    for (int i = 0; i < MET_NCFS; i++)
        if (s->cfs[i])
            rocksdb_column_family_handle_destroy(s->cfs[i]);
    if (s->db)
        rocksdb_close(s->db);
    for (int i = 0; i < MET_NCFS; i++)
        if (s->cf_opts[i])
            rocksdb_options_destroy(s->cf_opts[i]);
    if (s->opts)
        rocksdb_options_destroy(s->opts);
    if (s->points_filter)
        rocksdb_compactionfilter_destroy(s->points_filter);
    if (s->applied_filter)
        rocksdb_compactionfilter_destroy(s->applied_filter);
    if (s->table)
        rocksdb_block_based_options_destroy(s->table);
    if (s->cache)
        rocksdb_cache_destroy(s->cache);
    if (s->wo)
        rocksdb_writeoptions_destroy(s->wo);
    if (s->ro)
        rocksdb_readoptions_destroy(s->ro);
    if (s->batch)
        rocksdb_writebatch_destroy(s->batch);
    clear_pending_state(s);
    cmr_map_free(&s->pending_state);
    cmr_map_free(&s->pending_applied);
    cmr_u64map_free(&s->series);
    cmr_buf_free(&s->new_series);
    cmr_buf_free(&s->scratch);
    free(s);
}

/* --- writes ------------------------------------------------------------------------------ */

/* 0 when the series is known or was recorded now, 1 when the bound refuses it, -1 oom. */
static int admit_series(cmr_met_store_t *s, const cmr_met_labels_t *l, uint64_t sid)
{
    if (cmr_u64map_has(&s->series, sid))
        return 0;
    if (cmr_u64map_count(&s->series) >= s->o.max_series) {
        s->overflow++;
        return 1;
    }
    if (cmr_u64map_put(&s->series, sid, NULL) != 0)
        return -1;
    cmr_buf_put(&s->new_series, &sid, sizeof sid);
    uint8_t k[8];
    cmr_put_be64(k, sid);
    cmr_buf_reset(&s->scratch);
    met_labels_encode(l, &s->scratch);
    if (!cmr_buf_ok(&s->new_series) || !cmr_buf_ok(&s->scratch))
        return -1;
    rocksdb_writebatch_put_cf(s->batch, s->cfs[MET_CF_SERIES], (const char *)k, 8, (const char *)s->scratch.data,
                              s->scratch.len);
    return 0;
}

int cmr_met_store_add(cmr_met_store_t *s, const cmr_met_labels_t *l, int64_t t_ms, const cmr_met_value_t *value)
{
    if (s->o.read_only || !labels_valid(l) || t_ms < 0)
        return -1;
    uint64_t sid = cmr_met_series_id(l);
    int rc = admit_series(s, l, sid);
    if (rc != 0)
        return rc;
    cmr_buf_reset(&s->scratch);
    cmr_met_value_encode(value, &s->scratch);
    if (!cmr_buf_ok(&s->scratch))
        return -1;
    for (int r = 0; r < CMR_MET_NRES; r++) {
        uint8_t key[MET_POINT_KEY_LEN];
        met_point_key(key, (cmr_met_res_t)r, sid, t_ms / res_ms[r] * res_ms[r]);
        rocksdb_writebatch_merge_cf(s->batch, s->cfs[MET_CF_POINTS], (const char *)key, sizeof key,
                                    (const char *)s->scratch.data, s->scratch.len);
    }
    s->points_written++;
    s->pending_points++;
    return 0;
}

int cmr_met_store_mark_applied(cmr_met_store_t *s, int64_t agent_id, int64_t interval_start_ms)
{
    if (s->o.read_only)
        return -1;
    uint8_t k[MET_APPLIED_KEY_LEN], v[8];
    applied_key(k, agent_id, interval_start_ms);
    cmr_put_be64(v, (uint64_t)cmr_wall_ms());
    if (cmr_map_put(&s->pending_applied, k, sizeof k, NULL) != 0)
        return -1;
    rocksdb_writebatch_put_cf(s->batch, s->cfs[MET_CF_APPLIED], (const char *)k, sizeof k, (const char *)v, sizeof v);
    return 0;
}

int cmr_met_store_seen(cmr_met_store_t *s, int64_t agent_id, int64_t interval_start_ms)
{
    uint8_t k[MET_APPLIED_KEY_LEN];
    applied_key(k, agent_id, interval_start_ms);
    if (cmr_map_has(&s->pending_applied, k, sizeof k))
        return 1;
    char *e = NULL;
    size_t vl;
    char *v = rocksdb_get_cf(s->db, s->ro, s->cfs[MET_CF_APPLIED], (const char *)k, sizeof k, &vl, &e);
    if (e) {
        free(e);
        return -1;
    }
    rocksdb_free(v);
    return v != NULL;
}

static void forget_pending(cmr_met_store_t *s, bool written)
{
    if (!written)
        for (size_t i = 0; i + 8 <= s->new_series.len; i += 8) {
            uint64_t sid;
            memcpy(&sid, s->new_series.data + i, 8);
            cmr_u64map_del(&s->series, sid, NULL);
        }
    cmr_buf_reset(&s->new_series);
    cmr_map_clear(&s->pending_applied);
    clear_pending_state(s);
    rocksdb_writebatch_clear(s->batch);
    s->pending_points = 0;
}

int cmr_met_store_flush(cmr_met_store_t *s, char *err, size_t errlen)
{
    if (s->o.read_only) {
        snprintf(err, errlen, "metrics store %s is read-only", s->path);
        return -1;
    }
    if (rocksdb_writebatch_count(s->batch) == 0)
        return 0;
    char *e = NULL;
    rocksdb_write(s->db, s->wo, s->batch, &e);
    if (e) {
        snprintf(err, errlen, "write %s: %s", s->path, e);
        free(e);
        forget_pending(s, false);
        return -1;
    }
    forget_pending(s, true);
    return 0;
}

size_t cmr_met_store_pending(const cmr_met_store_t *s)
{
    return s->pending_points;
}

/* --- state --------------------------------------------------------------------------------- */

static int remember_state(cmr_met_store_t *s, const void *key, size_t klen, const void *val, size_t vlen, bool deleted)
{
    met_state_val_t *sv = malloc(sizeof *sv + vlen);
    if (!sv)
        return -1;
    sv->deleted = deleted;
    sv->len = vlen;
    if (vlen)
        memcpy(sv->data, val, vlen);
    bool created;
    void **slot = cmr_map_get_slot(&s->pending_state, key, klen, &created);
    if (!slot) {
        free(sv);
        return -1;
    }
    free(*slot);
    *slot = sv;
    return 0;
}

int cmr_met_state_put(cmr_met_store_t *s, const void *key, size_t klen, const void *val, size_t vlen)
{
    if (s->o.read_only || remember_state(s, key, klen, val, vlen, false) != 0)
        return -1;
    rocksdb_writebatch_put_cf(s->batch, s->cfs[MET_CF_STATE], key, klen, val, vlen);
    return 0;
}

int cmr_met_state_del(cmr_met_store_t *s, const void *key, size_t klen)
{
    if (s->o.read_only || remember_state(s, key, klen, NULL, 0, true) != 0)
        return -1;
    rocksdb_writebatch_delete_cf(s->batch, s->cfs[MET_CF_STATE], key, klen);
    return 0;
}

static int copy_out(const void *p, size_t len, void **val, size_t *vlen)
{
    *val = malloc(len ? len : 1);
    if (!*val)
        return -1;
    if (len)
        memcpy(*val, p, len);
    *vlen = len;
    return 1;
}

int cmr_met_state_get(cmr_met_store_t *s, const void *key, size_t klen, void **val, size_t *vlen)
{
    *val = NULL;
    *vlen = 0;
    met_state_val_t *sv = cmr_map_get(&s->pending_state, key, klen);
    if (sv)
        return sv->deleted ? 0 : copy_out(sv->data, sv->len, val, vlen);
    char *e = NULL;
    size_t len;
    char *v = rocksdb_get_cf(s->db, s->ro, s->cfs[MET_CF_STATE], key, klen, &len, &e);
    if (e) {
        free(e);
        return -1;
    }
    if (!v)
        return 0;
    int rc = copy_out(v, len, val, vlen);
    rocksdb_free(v);
    return rc;
}

int cmr_met_state_scan(cmr_met_store_t *s, const void *prefix, size_t plen, cmr_met_state_cb *cb, void *opaque)
{
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, s->ro, s->cfs[MET_CF_STATE]);
    rocksdb_iter_seek(it, prefix, plen);
    for (; rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl, vl;
        const char *k = rocksdb_iter_key(it, &kl);
        if (kl < plen || memcmp(k, prefix, plen))
            break;
        const char *v = rocksdb_iter_value(it, &vl);
        if (cb(k, kl, v, vl, opaque))
            break;
    }
    char *e = NULL;
    rocksdb_iter_get_error(it, &e);
    rocksdb_iter_destroy(it);
    if (e) {
        free(e);
        return -1;
    }
    return 0;
}

/* --- retention ----------------------------------------------------------------------------- */

/* The time of the oldest point of resolution res still stored, or INT64_MAX: one seek
 * per series (the first key of a series is its oldest bucket). */
static int64_t oldest_bucket(cmr_met_store_t *s, int res)
{
    int64_t oldest = INT64_MAX;
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, s->ro, s->cfs[MET_CF_POINTS]);
    uint8_t start = (uint8_t)res;
    rocksdb_iter_seek(it, (const char *)&start, 1);
    while (rocksdb_iter_valid(it)) {
        size_t kl;
        const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
        if (kl != MET_POINT_KEY_LEN || k[0] != res)
            break;
        int64_t b = (int64_t)cmr_be64(k + 9);
        if (b < oldest)
            oldest = b;
        uint8_t next[MET_POINT_KEY_LEN]; /* past every bucket of this series */
        met_point_key(next, (cmr_met_res_t)res, cmr_be64(k + 1), INT64_MAX);
        rocksdb_iter_seek(it, (const char *)next, sizeof next);
    }
    rocksdb_iter_destroy(it);
    return oldest;
}

static bool points_expired_left(cmr_met_store_t *s)
{
    for (int r = 0; r < CMR_MET_NRES; r++)
        if (oldest_bucket(s, r) + res_ms[r] <= cutoff_ms(s, r))
            return true;
    return false;
}

static void compact_cf(cmr_met_store_t *s, int cf)
{
    rocksdb_compactoptions_t *co = rocksdb_compactoptions_create();
    rocksdb_compactoptions_set_bottommost_level_compaction(co, 2 /* kForce */);
    rocksdb_compact_range_cf_opt(s->db, s->cfs[cf], co, NULL, 0, NULL, 0);
    rocksdb_compactoptions_destroy(co);
}

int cmr_met_store_retention(cmr_met_store_t *s, int64_t now_ms)
{
    if (s->o.read_only || now_ms <= 0)
        return -1;
    atomic_store(&s->cutoff_now_ms, now_ms);
    compact_cf(s, MET_CF_POINTS);
    if (points_expired_left(s)) /* buckets that were merge operands: merged now, dropped now */
        compact_cf(s, MET_CF_POINTS);
    compact_cf(s, MET_CF_APPLIED);
    return 0;
}

/* --- stats --------------------------------------------------------------------------------- */

static uint64_t cf_property(cmr_met_store_t *s, int cf, const char *name)
{
    char *v = rocksdb_property_value_cf(s->db, s->cfs[cf], name);
    uint64_t n = v ? strtoull(v, NULL, 10) : 0;
    free(v);
    return n;
}

void cmr_met_store_stats(cmr_met_store_t *s, cmr_met_stats_t *out)
{
    memset(out, 0, sizeof *out);
    out->points_written = s->points_written;
    out->merges = atomic_load(&s->merges);
    out->series = cmr_u64map_count(&s->series);
    out->series_overflow = s->overflow;
    out->corrupt_operands = atomic_load(&s->corrupt);
    for (int i = 0; i < MET_NCFS; i++)
        out->disk_bytes +=
            cf_property(s, i, "rocksdb.total-sst-files-size") + cf_property(s, i, "rocksdb.cur-size-all-mem-tables");
}

void *cmr_met_store_raw_db(cmr_met_store_t *s)
{
    return s->db;
}

void *cmr_met_store_raw_cf(cmr_met_store_t *s, const char *name)
{
    for (int i = 0; i < MET_NCFS; i++)
        if (!strcmp(cf_names[i], name))
            return s->cfs[i];
    return NULL;
}
