/*
 * ing_query.c - read views over a store root: list traces with filters, load one tree.
 *
 * A view opens every partition store read-only (a running worker keeps writing; the view
 * sees what was written when it was opened; a store that a worker is creating at that
 * moment holds nothing yet and is skipped) and merges the method and agent tables of
 * every meta slot (the meta stores stay open with the view: agent statuses). Listing
 * drives one index per partition — the contained method, the agent, the agents of the
 * environment (a few of them), the root method, duration (slowest first) or start time
 * (newest first) — checks the other filters on each candidate, and merges the partitions
 * in a deterministic order (newest or slowest first, ties by trace id). The environment
 * filter is resolved once per query to the agents whose latest AgentStatus names it
 * (ing_agents.c); a candidate matches when one of its JVMs (the agents of its batches) is
 * one of them. The filters on the transaction data
 * (http method, path, status) have no index: they are checked on each candidate's
 * summary. The traces of a diagnosis come from its index (idx_diagnosis), newest first,
 * with the same http filters.
 *
 * Ownership: the view owns its stores and names; results are malloc'd for the caller.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rocksdb/c.h>

#include "cmr/buf.h"
#include "cmr/bytes.h"
#include "cmr/clock.h"
#include "cmr/ingest.h"
#include "cmr/map.h"

struct cmr_ingest_view {
    cmr_store_t **stores;
    size_t nstores;
    cmr_store_t **metas; /* read-only meta slots (names loaded; agent statuses) */
    size_t nmetas;
    cmr_names_t *names;
};

cmr_ingest_view_t *cmr_ingest_view_open(const char *root, char *err, size_t errlen)
{
    cmr_ingest_view_t *v = calloc(1, sizeof *v);
    if (!v || !(v->names = cmr_names_new())) {
        free(v);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    struct stat st;
    if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "no store at %s (give the worker's store root with --store)", root);
        cmr_ingest_view_free(v);
        return NULL;
    }
    cmr_store_opts_t o = {.read_only = true};
    int *ids;
    size_t n = cmr_store_list_meta(root, &ids);
    v->metas = calloc(n + 1, sizeof *v->metas);
    for (size_t i = 0; v->metas && i < n; i++) {
        cmr_store_t *m = cmr_store_open_meta(root, ids[i], &o, err, errlen);
        if (m) {
            cmr_store_load_names(m, v->names);
            v->metas[v->nmetas++] = m;
        }
    }
    free(ids);
    if (!v->metas) {
        cmr_ingest_view_free(v);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    n = cmr_store_list_partitions(root, &ids);
    v->stores = calloc(n + 1, sizeof *v->stores);
    for (size_t i = 0; v->stores && i < n; i++) {
        char current[4200];
        snprintf(current, sizeof current, "%s/p%03d/CURRENT", root, ids[i]);
        if (access(current, F_OK) != 0)
            continue; /* a store a worker is creating right now: nothing in it yet */
        cmr_store_t *s = NULL;
        for (int attempt = 0; !s && attempt < 5; attempt++) {
            if (attempt) /* a file the writer replaced while we opened: try again */
                cmr_sleep_ms(50);
            s = cmr_store_open_partition(root, ids[i], &o, 0, err, errlen);
            if (!s && strstr(err, "Column family not found"))
                break; /* created, its column families not yet: nothing in it yet */
        }
        if (!s && strstr(err, "Column family not found"))
            continue;
        if (!s) {
            free(ids);
            cmr_ingest_view_free(v);
            return NULL;
        }
        v->stores[v->nstores++] = s;
    }
    free(ids);
    if (!v->stores) {
        cmr_ingest_view_free(v);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    return v;
}

void cmr_ingest_view_free(cmr_ingest_view_t *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < v->nstores; i++)
        cmr_store_close(v->stores[i]);
    free(v->stores);
    for (size_t i = 0; i < v->nmetas; i++)
        cmr_store_close(v->metas[i]);
    free(v->metas);
    cmr_names_free(v->names);
    free(v);
}

const cmr_names_t *cmr_ingest_view_names(const cmr_ingest_view_t *v)
{
    return v->names;
}

size_t cmr_ingest_view_metas(cmr_ingest_view_t *v, cmr_store_t *const **metas)
{
    *metas = v->metas;
    return v->nmetas;
}

int cmr_ingest_view_summary(cmr_ingest_view_t *v, const uint8_t trace_id[16], cmr_trace_summary_t *out)
{
    for (size_t i = 0; i < v->nstores; i++) {
        int r = cmr_store_get_summary(v->stores[i], trace_id, out);
        if (r != 0)
            return r;
    }
    return 0;
}

int cmr_ingest_view_tree(cmr_ingest_view_t *v, const uint8_t trace_id[16], cmr_tree_t *out)
{
    for (size_t i = 0; i < v->nstores; i++) {
        cmr_trace_summary_t s;
        if (cmr_store_get_summary(v->stores[i], trace_id, &s) != 1)
            continue;
        cmr_ingest_batch_t *b;
        void *vals;
        int n = cmr_store_trace_batches(v->stores[i], trace_id, &b, &vals);
        if (n < 0)
            return -1;
        int rc = cmr_tree_build(b, (size_t)n, out);
        cmr_store_batches_free(b, vals);
        if (rc != 0)
            return -1;
        memcpy(out->trace_id, trace_id, 16);
        out->http = s.http;
        out->calls_not_recorded = s.calls_not_recorded;
        out->truncated_by = s.truncated_by;
        return 1;
    }
    return 0;
}

/* An environment of at most this many JVMs drives the list through their idx_agent
 * entries; a larger one is checked on the candidates of the time / duration index. */
#define ENV_INDEX_MAX 16

typedef struct results {
    cmr_trace_summary_t *items;
    size_t count, cap;
    cmr_map_t seen; /* trace ids in items (a trace found through two ids counts once) */
} results_t;

typedef struct qctx {
    cmr_ingest_view_t *v;
    const cmr_trace_filter_t *f;
    cmr_store_t *s;
    uint64_t *roots, *agents, *methods, *env_agents; /* agents and env_agents sorted */
    size_t nroots, nagents, nmethods, nenv_agents;
    results_t *r;
    size_t matched; /* in this partition */
    bool failed;    /* out of memory: the list fails rather than come back short */
} qctx_t;

static bool in_set(const uint64_t *v, size_t n, uint64_t id)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] == id)
            return true;
    return false;
}

/* true when one of the JVMs of the trace (the agents of its batches: key trace | agent |
 * segment | batch_seq) is in the sorted set: one seek per JVM of the trace. */
static bool any_agent_in(cmr_store_t *s, const uint64_t *set, size_t n, const uint8_t trace[16])
{
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(cmr_store_db(s), ro, cmr_store_cf(s, CMR_CF_BATCHES));
    uint8_t k[24];
    memcpy(k, trace, 16);
    bool found = false;
    for (rocksdb_iter_seek(it, (const char *)k, 16); !found && rocksdb_iter_valid(it);) {
        size_t kl;
        const uint8_t *key = (const uint8_t *)rocksdb_iter_key(it, &kl);
        if (kl < 24 || memcmp(key, trace, 16))
            break;
        uint64_t agent = cmr_be64(key + 16);
        found = bsearch(&agent, set, n, sizeof *set, cmr_u64_cmp) != NULL;
        if (agent == UINT64_MAX)
            break;
        cmr_put_be64(k + 16, agent + 1); /* the trace's next JVM */
        rocksdb_iter_seek(it, (const char *)k, 24);
    }
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
    return found;
}

/* Checks every filter on one candidate and keeps it. */
static void consider(qctx_t *q, const uint8_t trace[16])
{
    const cmr_trace_filter_t *f = q->f;
    cmr_trace_summary_t s;
    if (cmr_store_get_summary(q->s, trace, &s) != 1)
        return;
    if ((f->from_ns && s.start_ns < f->from_ns) || (f->to_ns && s.start_ns > f->to_ns))
        return;
    if (f->min_duration_ns && s.end_ns - s.start_ns < f->min_duration_ns)
        return;
    if (f->root_method && !in_set(q->roots, q->nroots, s.root_method))
        return;
    /* `contains` drives the scan when set (every candidate called one of the methods);
     * `agent` does unless `contains` is set, and is then checked on the batches' JVMs */
    if (f->agent && f->contains && !any_agent_in(q->s, q->agents, q->nagents, trace))
        return;
    if (f->env && !any_agent_in(q->s, q->env_agents, q->nenv_agents, trace))
        return;
    if (!cmr_http_filter_match(&f->http, &s.http))
        return;
    results_t *r = q->r;
    bool created;
    void **slot = cmr_map_get_slot(&r->seen, trace, 16, &created);
    if (!slot || !created || CMR_ARRAY_GROW(r->items, r->cap, r->count + 1) != 0)
        return;
    *slot = r; /* any non-NULL value */
    r->items[r->count++] = s;
    q->matched++;
}

/* The candidates of one index entry: the trace id that ends its key, or, for a posting
 * (idx_agent / idx_method, a 16-byte key id | group), every trace id of its value. */
static void consider_entry(qctx_t *q, rocksdb_iterator_t *it, const uint8_t *k, size_t kl)
{
    if (kl >= 24) {
        consider(q, k + kl - 16);
        return;
    }
    size_t vl;
    const uint8_t *v = (const uint8_t *)rocksdb_iter_value(it, &vl);
    for (size_t i = 0; i + 16 <= vl; i += 16)
        consider(q, v + i);
}

/* Scans an index: entries with the 8-byte prefix (or all when prefix is NULL), in
 * reverse when `reverse`; the trace id is the last 16 bytes of each key, or the value
 * of a posting. Stops after `stop_after` matches when non-zero. */
static void scan(qctx_t *q, int cf, const uint64_t *prefix, bool reverse, size_t stop_after)
{
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(cmr_store_db(q->s), ro, cmr_store_cf(q->s, cf));
    uint8_t pk[8];
    size_t start = q->matched;
    if (prefix) {
        cmr_put_be64(pk, *prefix);
        rocksdb_iter_seek(it, (const char *)pk, 8);
    } else if (reverse) {
        rocksdb_iter_seek_to_last(it);
    } else {
        rocksdb_iter_seek_to_first(it);
    }
    while (rocksdb_iter_valid(it)) {
        size_t kl;
        const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
        if (kl < 16 || (prefix && memcmp(k, pk, 8)))
            break;
        consider_entry(q, it, k, kl);
        if (stop_after && q->matched - start >= stop_after)
            break;
        if (reverse)
            rocksdb_iter_prev(it);
        else
            rocksdb_iter_next(it);
    }
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
}

/* The `limit` latest starts among one partition's matches of a newest-first scan, in a
 * min-heap: once it is full, a candidate that started before its least cannot be among
 * the partition's first `limit`. */
typedef struct latest {
    int64_t *v;
    size_t n, limit;
} latest_t;

static bool latest_full(const latest_t *l)
{
    return l->n == l->limit;
}

static void latest_add(latest_t *l, int64_t start)
{
    size_t i;
    if (l->n < l->limit) {
        i = l->n++;
        for (; i > 0 && l->v[(i - 1) / 2] > start; i = (i - 1) / 2) /* up */
            l->v[i] = l->v[(i - 1) / 2];
        l->v[i] = start;
        return;
    }
    if (start <= l->v[0])
        return;
    for (i = 0;;) { /* the least leaves, start sinks from the top */
        size_t c = 2 * i + 1;
        if (c >= l->n)
            break;
        if (c + 1 < l->n && l->v[c + 1] < l->v[c])
            c++;
        if (l->v[c] >= start)
            break;
        l->v[i] = l->v[c];
        i = c;
    }
    l->v[i] = start;
}

/* Considers one candidate of a newest-first scan, and adds its start to the heap when it
 * matched. */
static void consider_latest(qctx_t *q, latest_t *l, const uint8_t trace[16])
{
    size_t before = q->r->count;
    consider(q, trace);
    if (q->r->count > before)
        latest_add(l, q->r->items[q->r->count - 1].start_ns);
}

static int cmp_rec_start_desc(const void *a, const void *b)
{
    int64_t x = cmr_be64_ordered(*(const uint8_t *const *)a + 16);
    int64_t y = cmr_be64_ordered(*(const uint8_t *const *)b + 16);
    return x > y ? -1 : x < y;
}

/* The traces of one time group, latest start (as posted) first. A trace's start only
 * moves earlier, so once the heap is full, a record posted before its least ends the
 * group. 0, or -1 out of memory. */
static int consider_group(qctx_t *q, latest_t *l, const uint8_t *v, size_t vl)
{
    size_t n = vl / CMR_TIME_REC;
    const uint8_t **recs = malloc((n ? n : 1) * sizeof *recs);
    if (!recs)
        return -1;
    for (size_t i = 0; i < n; i++)
        recs[i] = v + i * CMR_TIME_REC;
    qsort(recs, n, sizeof *recs, cmp_rec_start_desc);
    for (size_t i = 0; i < n; i++) {
        if (latest_full(l) && cmr_be64_ordered(recs[i] + 16) < l->v[0])
            break;
        consider_latest(q, l, recs[i]);
    }
    free(recs);
    return 0;
}

/* The newest-first scan of idx_time for one partition: its first `limit` matches by
 * start. Time groups, newest first, until the heap is full and its least start is later
 * than the end of the next group's millisecond (that group's traces, and every older
 * group's, started before it) or the group ended before the `from` bound; then the
 * per-trace keys of the older format, which are in start order. */
static void scan_latest(qctx_t *q, size_t limit)
{
    latest_t l = {.v = malloc(limit * sizeof *l.v), .limit = limit};
    if (!l.v) {
        q->failed = true;
        return;
    }
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(cmr_store_db(q->s), ro, cmr_store_cf(q->s, CMR_CF_IDX_TIME));
    for (rocksdb_iter_seek_to_last(it); rocksdb_iter_valid(it); rocksdb_iter_prev(it)) {
        size_t kl, vl;
        const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
        if (!cmr_store_is_time_group_key(k, kl)) {
            if (!kl || k[0] != CMR_TIME_GROUP_TAG)
                break; /* the older keys: below */
            continue;
        }
        int64_t end = cmr_store_time_group_end_ns((int64_t)cmr_be64(k + 1));
        if ((latest_full(&l) && l.v[0] > end) || (q->f->from_ns && end < q->f->from_ns))
            break;
        const uint8_t *v = (const uint8_t *)rocksdb_iter_value(it, &vl);
        if (consider_group(q, &l, v, vl) != 0) {
            q->failed = true;
            break;
        }
    }
    const char tag = (char)CMR_TIME_GROUP_TAG;
    for (rocksdb_iter_seek_for_prev(it, &tag, 1); rocksdb_iter_valid(it); rocksdb_iter_prev(it)) {
        size_t kl;
        const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
        if (kl != 24)
            continue;
        int64_t start = cmr_be64_ordered(k);
        if ((latest_full(&l) && start < l.v[0]) || (q->f->from_ns && start < q->f->from_ns))
            break;
        consider_latest(q, &l, k + 8);
    }
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
    free(l.v);
}

static int cmp_summary(const void *a, const void *b, void *slowest)
{
    const cmr_trace_summary_t *x = a, *y = b;
    bool slow = *(const bool *)slowest;
    int64_t kx = slow ? x->end_ns - x->start_ns : x->start_ns;
    int64_t ky = slow ? y->end_ns - y->start_ns : y->start_ns;
    if (kx != ky)
        return kx > ky ? -1 : 1;
    return memcmp(x->trace_id, y->trace_id, 16);
}

long cmr_ingest_view_list(cmr_ingest_view_t *v, const cmr_trace_filter_t *f, cmr_trace_summary_t **out)
{
    *out = NULL;
    size_t limit = f->limit ? f->limit : 50;
    results_t r = {0};
    qctx_t q = {.v = v, .f = f, .r = &r};
    if (f->root_method)
        q.nroots = cmr_names_find_methods(v->names, f->root_method, &q.roots);
    if (f->agent) {
        q.nagents = cmr_names_find_agents(v->names, f->agent, &q.agents);
        if (q.nagents)
            qsort(q.agents, q.nagents, sizeof *q.agents, cmr_u64_cmp); /* any_agent_in's set */
    }
    if (f->contains)
        q.nmethods = cmr_names_find_methods(v->names, f->contains, &q.methods);
    if (f->env) {
        long n = cmr_ingest_status_env_agents(v->metas, v->nmetas, f->env, &q.env_agents);
        if (n < 0) {
            free(q.roots);
            free(q.agents);
            free(q.methods);
            return -1;
        }
        q.nenv_agents = (size_t)n;
    }
    bool empty = (f->root_method && !q.nroots) || (f->agent && !q.nagents) || (f->contains && !q.nmethods) ||
                 (f->env && !q.nenv_agents);
    for (size_t i = 0; i < v->nstores && !empty; i++) {
        q.s = v->stores[i];
        int part = cmr_store_partition(q.s);
        if (f->partitions && (part < 0 || (size_t)part >= f->npartitions || !f->partitions[part]))
            continue; /* a partition this worker does not own (a stale copy) */
        q.matched = 0;
        if (f->contains)
            for (size_t k = 0; k < q.nmethods; k++)
                scan(&q, CMR_CF_IDX_METHOD, &q.methods[k], false, 0);
        else if (f->agent)
            for (size_t k = 0; k < q.nagents; k++)
                scan(&q, CMR_CF_IDX_AGENT, &q.agents[k], false, 0);
        else if (f->env && q.nenv_agents <= ENV_INDEX_MAX)
            for (size_t k = 0; k < q.nenv_agents; k++)
                scan(&q, CMR_CF_IDX_AGENT, &q.env_agents[k], false, 0);
        else if (f->root_method)
            for (size_t k = 0; k < q.nroots; k++)
                scan(&q, CMR_CF_IDX_ROOT, &q.roots[k], false, 0);
        else if (f->slowest)
            scan(&q, CMR_CF_IDX_DURATION, NULL, true, limit);
        else
            scan_latest(&q, limit);
    }
    free(q.roots);
    free(q.agents);
    free(q.methods);
    free(q.env_agents);
    if (q.failed) {
        cmr_map_free(&r.seen);
        free(r.items);
        return -1;
    }
    bool slowest = f->slowest;
    if (r.count)
        qsort_r(r.items, r.count, sizeof *r.items, cmp_summary, &slowest);
    if (r.count > limit)
        r.count = limit;
    cmr_map_free(&r.seen);
    *out = r.items;
    return (long)r.count;
}

long cmr_ingest_view_diagnosis_traces(cmr_ingest_view_t *v, uint64_t diagnosis, const cmr_http_filter_t *http,
                                      size_t limit, cmr_trace_summary_t **out, size_t *found)
{
    *out = NULL;
    *found = 0;
    results_t r = {0};
    uint8_t pk[8];
    cmr_put_be64(pk, diagnosis);
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    for (size_t i = 0; i < v->nstores; i++) {
        rocksdb_column_family_handle_t *cf = cmr_store_cf(v->stores[i], CMR_CF_IDX_DIAGNOSIS);
        if (!cf)
            continue; /* a store written before diagnoses: no tagged trace */
        rocksdb_iterator_t *it = rocksdb_create_iterator_cf(cmr_store_db(v->stores[i]), ro, cf);
        for (rocksdb_iter_seek(it, (const char *)pk, 8); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
            size_t kl;
            const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
            if (kl != 24 || memcmp(k, pk, 8))
                break;
            cmr_trace_summary_t s;
            if (cmr_store_get_summary(v->stores[i], k + 8, &s) != 1)
                continue; /* deleted by retention since the view opened */
            if (!cmr_http_filter_match(http, &s.http))
                continue;
            if (CMR_ARRAY_GROW(r.items, r.cap, r.count + 1) != 0) {
                rocksdb_iter_destroy(it);
                rocksdb_readoptions_destroy(ro);
                free(r.items);
                return -1;
            }
            r.items[r.count++] = s;
        }
        rocksdb_iter_destroy(it);
    }
    rocksdb_readoptions_destroy(ro);
    bool slowest = false;
    if (r.count)
        qsort_r(r.items, r.count, sizeof *r.items, cmp_summary, &slowest);
    *found = r.count;
    if (r.count > limit)
        r.count = limit;
    *out = r.items;
    return (long)r.count;
}
