/*
 * met_ingest.c - the metrics module's intake: MetricBatch messages become points of the
 * time-series store, one store per cmr.metrics partition (cmr/metrics.h).
 *
 * For each batch: check it (the message is untrusted: sizes, counts, histograms that must
 * decode and agree with their counts, a sane interval), drop it when this agent's interval
 * was applied before (the store records applied intervals in the same atomic write as
 * the points, so a redelivered record changes nothing), then add
 *   - each MethodMetric to the method series of the environment,
 *   - each TransactionMetric to the transaction series of the environment and of the JVM,
 *   - each stalled call to the stalled count of its innermost method and of its
 *     transaction (the root of its stack), with a point of its own when the method had no
 *     call that ended in the interval,
 * and move the environment's watermark (newest interval end) on, which drives the
 * threshold rules (met_rules.c).
 *
 * Ownership: the module owns its stores (opened per partition by the worker's rebalance),
 * its environment table and its scratch values.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/bytes.h"
#include "cmr/clock.h"
#include "cmr/log.h"
#include "cmr/topics.h"
#include "cmr/wire.h"
#include "met_module.h"

#define MAX_INTERVAL_MS (3600 * 1000)
#define MAX_ITEMS 100000        /* methods + transactions of one batch */
#define MAX_STALLED 1000        /* stalled calls of one batch (agents send at most 64) */
#define MAX_SKEW_MS (5 * 60000) /* an interval may start this far in the worker's future (clocks) */
#define MAX_ENVS 10000          /* environments per worker */
#define MAX_COUNT (1LL << 44)   /* calls of one item in one interval */
#define MAX_IN_FLIGHT 100000000

int cmr_metrics_opts_from_conf(const cmr_conf_t *conf, const cmr_store_opts_t *ingest, cmr_metrics_opts_t *o, char *err,
                               size_t errlen)
{
    int64_t r10, r1m, r1h, series, late, prom, alerts;
    if (cmr_conf_get_int(conf, "metrics.retention.10s_ms", 2LL * 86400000, 60000, INT64_MAX, &r10, err, errlen) ||
        cmr_conf_get_int(conf, "metrics.retention.1m_ms", 14LL * 86400000, 60000, INT64_MAX, &r1m, err, errlen) ||
        cmr_conf_get_int(conf, "metrics.retention.1h_ms", 400LL * 86400000, 3600000, INT64_MAX, &r1h, err, errlen) ||
        cmr_conf_get_int(conf, "metrics.max_series", CMR_MET_DEFAULT_MAX_SERIES, 1, 100000000, &series, err, errlen) ||
        cmr_conf_get_int(conf, "metrics.lateness_ms", 15000, 0, 3600000, &late, err, errlen) ||
        cmr_conf_get_int(conf, "metrics.prometheus.max_series", 500, 0, 100000, &prom, err, errlen) ||
        cmr_conf_get_int(conf, "metrics.rules.max_alerts", 100, 1, 100000, &alerts, err, errlen))
        return -1;
    *o = (cmr_metrics_opts_t){
        .store = {.no_sync = !ingest->sync,
                  .max_series = (size_t)series,
                  .retention_ms = {r10, r1m, r1h},
                  .write_buffer_bytes = 8u << 20},
        .lateness_ms = late,
        .prom_max_series = (size_t)prom,
        .max_alerts = (size_t)alerts,
    };
    return 0;
}

cmr_metrics_t *cmr_metrics_new(const char *root, const cmr_metrics_opts_t *o, const cmr_names_t *names, char *err,
                               size_t errlen)
{
    cmr_metrics_t *m = calloc(1, sizeof *m);
    if (!m || !(m->config = cmr_cfg_state_new())) {
        free(m);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    int n = snprintf(m->root, sizeof m->root, "%s/metrics", root);
    if (n < 0 || (size_t)n >= sizeof m->root) {
        cmr_cfg_state_free(m->config);
        free(m);
        snprintf(err, errlen, "store path too long");
        return NULL;
    }
    m->o = *o;
    m->names = names;
    pthread_mutex_init(&m->prom_lock, NULL);
    cmr_met_value_init(&m->scratch);
    return m;
}

void cmr_metrics_free(cmr_metrics_t *m)
{
    if (!m)
        return;
    for (int p = 0; p < MET_MAX_PARTITIONS; p++)
        if (m->parts[p])
            cmr_metrics_close_partition(m, p);
    size_t it = 0;
    void *val;
    while (cmr_map_next(&m->envs, &it, NULL, NULL, &val))
        free(val);
    cmr_map_free(&m->envs);
    cmr_cfg_state_free(m->config);
    met_prom_free(m);
    cmr_buf_free(&m->prom_text);
    pthread_mutex_destroy(&m->prom_lock);
    cmr_met_value_free(&m->scratch);
    free(m);
}

void cmr_metrics_on_alert(cmr_metrics_t *m, cmr_metrics_alert_fn *fn, void *opaque)
{
    m->alert_fn = fn;
    m->alert_opaque = opaque;
}

int cmr_metrics_add_config(cmr_metrics_t *m, const void *payload, size_t len)
{
    char err[256];
    return cmr_cfg_state_apply(m->config, payload, len, NULL, err, sizeof err) < 0 ? -1 : 0;
}

/* --- partitions ---------------------------------------------------------------------- */

/* State keys: "o" the applied offset; "r"... rules' state, "s"... stalled calls, "n"...
 * and "m"... named transactions' names and root methods (below), "#..." the store's own. */
#define APPLIED_KEY "o"

/* The applied offset a store holds, -1 when none (or unreadable: restored from the start). */
static int64_t read_applied(cmr_met_store_t *st)
{
    void *v;
    size_t len;
    int64_t off = -1;
    if (cmr_met_state_get(st, APPLIED_KEY, 1, &v, &len) == 1) {
        if (len == 8)
            off = (int64_t)cmr_be64(v);
        free(v);
    }
    return off;
}

int cmr_metrics_open_partition(cmr_metrics_t *m, int partition, int wait_ms)
{
    if (partition < 0 || partition >= MET_MAX_PARTITIONS)
        return -1;
    if (m->parts[partition])
        return 0;
    char path[4200], err[512];
    snprintf(path, sizeof path, "%s/p%03d", m->root, partition);
    for (int waited = 0;; waited += 100) { /* the previous owner may still hold the lock */
        m->parts[partition] = cmr_met_store_open(path, &m->o.store, err, sizeof err);
        if (m->parts[partition] || waited >= wait_ms || !strstr(err, "lock"))
            break;
        cmr_sleep_ms(100);
    }
    if (!m->parts[partition]) {
        cmr_log(CMR_LOG_ERROR, "metrics.store_failed", "partition=%d error=\"%s\"", partition, err);
        return -1;
    }
    m->stats.partitions++;
    m->applied[partition] = m->applied_pending[partition] = read_applied(m->parts[partition]);
    cmr_log(CMR_LOG_INFO, "metrics.partition_opened", "partition=%d path=%s applied_offset=%" PRId64, partition, path,
            m->applied[partition]);
    return 0;
}

void cmr_metrics_set_applied(cmr_metrics_t *m, int partition, int64_t offset)
{
    if (partition >= 0 && partition < MET_MAX_PARTITIONS && m->parts[partition] &&
        offset > m->applied_pending[partition])
        m->applied_pending[partition] = offset;
}

int64_t cmr_metrics_applied(const cmr_metrics_t *m, int partition)
{
    return partition >= 0 && partition < MET_MAX_PARTITIONS && m->parts[partition] ? m->applied[partition] : -1;
}

/* Puts the partition's handled offset into its pending batch when it moved. 0 or -1. */
static int put_applied(cmr_metrics_t *m, int partition)
{
    if (m->applied_pending[partition] == m->applied[partition])
        return 0;
    uint8_t v[8];
    cmr_put_be64(v, (uint64_t)m->applied_pending[partition]);
    return cmr_met_state_put(m->parts[partition], APPLIED_KEY, 1, v, sizeof v);
}

/* After a flush of the partition: what was put is durable (ok) or dropped (!ok). */
static void applied_flushed(cmr_metrics_t *m, int partition, bool ok)
{
    if (ok)
        m->applied[partition] = m->applied_pending[partition];
    else
        m->applied_pending[partition] = m->applied[partition];
}

/* Forgets the environments of a partition (their watermarks come back with the data). */
static void forget_envs(cmr_metrics_t *m, int partition)
{
    size_t it = 0;
    const void *key;
    size_t klen;
    void *val;
    while (cmr_map_next(&m->envs, &it, &key, &klen, &val)) {
        met_env_t *e = val;
        if (e->partition != partition)
            continue;
        char id[CMR_MET_ENV_MAX + 1];
        memcpy(id, key, klen); /* the map owns key: deleting frees it */
        id[klen] = '\0';
        met_prom_forget_env(m, id);
        cmr_map_del(&m->envs, id, klen, NULL);
        free(e);
        it = 0; /* deletion moves entries: start over (rare: a rebalance) */
    }
}

int cmr_metrics_close_partition(cmr_metrics_t *m, int partition)
{
    if (partition < 0 || partition >= MET_MAX_PARTITIONS || !m->parts[partition])
        return 0;
    char err[512];
    /* after a failed add the pending batch holds part of a batch: closing drops it, the
     * record comes again */
    int rc =
        m->failed || put_applied(m, partition) != 0 ? -1 : cmr_met_store_flush(m->parts[partition], err, sizeof err);
    if (rc != 0 && !m->failed)
        cmr_log(CMR_LOG_ERROR, "metrics.flush_failed", "partition=%d error=\"%s\"", partition, err);
    cmr_met_store_close(m->parts[partition]);
    m->parts[partition] = NULL;
    m->stats.partitions--;
    forget_envs(m, partition);
    cmr_log(CMR_LOG_INFO, "metrics.partition_closed", "partition=%d", partition);
    return rc;
}

/* --- checks -------------------------------------------------------------------------- */

/* Decodes an item's histogram and checks it against the item's own counts. */
static int check_hist(cmr_hist_t *h, const cmr_bytes_t *b, int64_t count, const char *what, size_t i, char *err,
                      size_t errlen)
{
    if (cmr_hist_decode(h, b->data, b->len) != 0) {
        snprintf(err, errlen, "%s[%zu]: the histogram does not decode", what, i);
        return -1;
    }
    if (h->count != (uint64_t)count) {
        snprintf(err, errlen, "%s[%zu]: the histogram holds %" PRIu64 " calls, the item says %" PRId64, what, i,
                 h->count, count);
        return -1;
    }
    return 0;
}

static int check_trace(const cmr_bytes_t *t, const char *what, size_t i, char *err, size_t errlen)
{
    if (t->len != 0 && t->len != 16) {
        snprintf(err, errlen, "%s[%zu]: a trace id has 16 bytes, not %zu", what, i, t->len);
        return -1;
    }
    return 0;
}

static int check_counts(int64_t count, int64_t errors, int64_t sum, int64_t min, int64_t max, int64_t in_flight,
                        const char *what, size_t i, char *err, size_t errlen)
{
    if (count < 0 || count > MAX_COUNT || errors < 0 || errors > count || sum < 0 ||
        (count > 0 && (min < 0 || min > max)) || in_flight < 0 || in_flight > MAX_IN_FLIGHT) {
        snprintf(err, errlen,
                 "%s[%zu]: impossible values (count %" PRId64 ", errors %" PRId64 ", sum %" PRId64 ", min %" PRId64
                 ", max %" PRId64 ", in flight %" PRId64 ")",
                 what, i, count, errors, sum, min, max, in_flight);
        return -1;
    }
    return 0;
}

/* Everything about a batch that can be checked before anything is written. */
static int check_batch(cmr_metrics_t *m, const cmr_metric_batch_t *b, cmr_met_labels_t *env_labels, char *err,
                       size_t errlen)
{
    const char *env = b->environment_id ? b->environment_id : "";
    if (!*env || cmr_met_labels_set(env_labels, CMR_MET_METHOD, env, strlen(env), 0, 0) != 0) {
        snprintf(err, errlen, "environment id missing or invalid (%zu bytes)", strlen(env));
        return -1;
    }
    if (b->agent_id == 0 || b->interval_start_ms <= 0 || b->interval_ms <= 0 || b->interval_ms > MAX_INTERVAL_MS) {
        snprintf(err, errlen, "bad agent or interval (agent %" PRId64 ", start %" PRId64 ", length %" PRId32 " ms)",
                 b->agent_id, b->interval_start_ms, b->interval_ms);
        return -1;
    }
    /* a future interval would move the environment's data clock past every real one */
    if (b->interval_start_ms > cmr_wall_ms() + MAX_SKEW_MS) {
        snprintf(err, errlen, "the interval starts %" PRId64 " s in the future (the agent's clock?)",
                 (b->interval_start_ms - cmr_wall_ms()) / 1000);
        return -1;
    }
    if (b->metrics.count + b->transactions.count > MAX_ITEMS || b->stalled.count > MAX_STALLED) {
        snprintf(err, errlen, "too many items (%zu methods and transactions, %zu stalled calls)",
                 b->metrics.count + b->transactions.count, b->stalled.count);
        return -1;
    }
    cmr_hist_t *h = &m->scratch.hist;
    for (size_t i = 0; i < b->metrics.count; i++) {
        const cmr_method_metric_t *x = &b->metrics.items[i];
        if (check_counts(x->count, x->exceptions, x->sum_ns, x->min_ns, x->max_ns, x->max_in_flight, "metrics", i, err,
                         errlen) ||
            check_hist(h, &x->histogram, x->count, "metrics", i, err, errlen) ||
            check_trace(&x->slowest_trace, "metrics", i, err, errlen))
            return -1;
    }
    for (size_t i = 0; i < b->transactions.count; i++) {
        const cmr_transaction_metric_t *x = &b->transactions.items[i];
        if (check_counts(x->count, x->exceptions, x->sum_ns, x->min_ns, x->max_ns, x->max_in_flight, "transactions", i,
                         err, errlen) ||
            check_hist(h, &x->histogram, x->count, "transactions", i, err, errlen) ||
            check_trace(&x->slowest_trace, "transactions", i, err, errlen))
            return -1;
        const char *why = *x->name ? cmr_http_value_check(CMR_HTTP_PATH, x->name, strlen(x->name)) : NULL;
        if (why) { /* a name is an HTTP method and route: text, as a trace's http.path */
            snprintf(err, errlen, "transactions[%zu]: the name is %s", i, why);
            return -1;
        }
    }
    for (size_t i = 0; i < b->stalled.count; i++) {
        const cmr_stalled_call_t *x = &b->stalled.items[i];
        if (x->stack.len % 8 != 0 || check_trace(&x->trace_id, "stalled", i, err, errlen)) {
            snprintf(err, errlen, "stalled[%zu]: a stack is 8 bytes per frame and a trace id 16 bytes", i);
            return -1;
        }
    }
    return 0;
}

/* --- points -------------------------------------------------------------------------- */

/* scratch = one item's value. The histogram was checked: it decodes. */
static void item_value(cmr_met_value_t *v, int64_t count, int64_t errors, int64_t sum, int64_t min, int64_t max,
                       int64_t in_flight, const cmr_bytes_t *hist, const cmr_bytes_t *trace)
{
    cmr_met_value_reset(v);
    v->count = (uint64_t)count;
    v->errors = (uint64_t)errors;
    v->sum_ns = (uint64_t)sum;
    v->min_ns = count ? (uint64_t)(min < 0 ? 0 : min) : 0;
    v->max_ns = count ? (uint64_t)(max < 0 ? 0 : max) : 0;
    v->max_in_flight = in_flight;
    v->has_slowest = trace->len == 16;
    if (v->has_slowest)
        memcpy(v->slowest_trace, trace->data, 16);
    (void)cmr_hist_decode(&v->hist, hist->data, hist->len);
}

/* The stalled calls of a batch counted per innermost method and per root (the
 * transaction), once per batch: maps of id -> count (as uintptr_t). */
typedef struct stalled_counts {
    cmr_u64map_t by_method, by_root;
} stalled_counts_t;

static uint64_t stall_root(const cmr_stalled_call_t *s)
{
    return s->stack.len >= 8 ? cmr_be64(s->stack.data) : 0;
}

static int count_stalled(const cmr_metric_batch_t *b, stalled_counts_t *c)
{
    for (size_t i = 0; i < b->stalled.count; i++) {
        const cmr_stalled_call_t *s = &b->stalled.items[i];
        cmr_u64map_t *maps[2] = {&c->by_method, &c->by_root};
        uint64_t ids[2] = {(uint64_t)s->method_id, stall_root(s)};
        for (int k = 0; k < 2; k++) {
            if (k == 1 && !ids[1])
                continue;
            void **slot = cmr_u64map_get_slot(maps[k], ids[k], NULL);
            if (!slot)
                return -1;
            *slot = (void *)((uintptr_t)*slot + 1);
        }
    }
    return 0;
}

static void stalled_counts_free(stalled_counts_t *c)
{
    cmr_u64map_free(&c->by_method);
    cmr_u64map_free(&c->by_root);
}

static uint64_t stalled_on(const stalled_counts_t *c, uint64_t subject, bool by_root)
{
    return (uint64_t)(uintptr_t)cmr_u64map_get(by_root ? &c->by_root : &c->by_method, subject);
}

/* The subject of a transaction: its root method, or the hash of its name when the agent
 * named it (an HTTP route), whose text the state keeps for display ("n" | subject). */
static uint64_t transaction_subject(const cmr_transaction_metric_t *x)
{
    if (!x->name || !*x->name)
        return (uint64_t)x->root_method_id;
    return cmr_hash_bytes(x->name, strlen(x->name));
}

/* Keeps a named transaction's name for display ("n" | subject), and the root method it was
 * first reported with in its environment ("m" | env length | env | subject: where a
 * threshold's diagnosis starts), once its series was admitted. */
static void keep_transaction_name(cmr_met_store_t *st, const char *env, uint64_t subject, const char *name,
                                  int64_t root_method_id)
{
    uint8_t key[9] = {'n'};
    cmr_put_be64(key + 1, subject);
    void *old = NULL;
    size_t olen = 0;
    if (cmr_met_state_get(st, key, sizeof key, &old, &olen) == 0)
        cmr_met_state_put(st, key, sizeof key, name, strlen(name) > 512 ? 512 : strlen(name));
    free(old);
    old = NULL;
    uint8_t mkey[CMR_METRICS_ROOT_KEY_MAX];
    size_t mlen = cmr_metrics_root_key(mkey, env, subject);
    if (cmr_met_state_get(st, mkey, mlen, &old, &olen) == 0) {
        uint8_t v[8];
        cmr_put_be64(v, (uint64_t)root_method_id);
        cmr_met_state_put(st, mkey, mlen, v, sizeof v);
    }
    free(old);
}

/* 0 stored, 1 not stored (more series than the store's bound; counted there), -1 error. */
static int add_point(cmr_metrics_t *m, cmr_met_store_t *st, const cmr_met_labels_t *l, int64_t t_ms,
                     const cmr_met_value_t *v)
{
    int rc = cmr_met_store_add(st, l, t_ms, v);
    if (rc < 0)
        return -1;
    if (rc == 0) {
        m->stats.points++;
        if (l->agent_id == 0)
            met_prom_add(m, l, t_ms, v);
    }
    return rc;
}

static met_env_t *env_of(cmr_metrics_t *m, const char *id, int partition)
{
    size_t len = strlen(id);
    if (!cmr_map_has(&m->envs, id, len) && cmr_map_count(&m->envs) >= MAX_ENVS)
        return NULL;
    bool created;
    void **slot = cmr_map_get_slot(&m->envs, id, len, &created);
    if (!slot)
        return NULL;
    if (created) {
        met_env_t *e = calloc(1, sizeof *e);
        if (!e) {
            cmr_map_del(&m->envs, id, len, NULL);
            return NULL;
        }
        snprintf(e->id, sizeof e->id, "%s", id);
        e->partition = partition;
        *slot = e;
    }
    return *slot;
}

static int add_methods(cmr_metrics_t *m, cmr_met_store_t *st, const cmr_metric_batch_t *b, const char *env,
                       const stalled_counts_t *sc)
{
    cmr_met_labels_t l;
    cmr_met_value_t *v = &m->scratch;
    for (size_t i = 0; i < b->metrics.count; i++) {
        const cmr_method_metric_t *x = &b->metrics.items[i];
        item_value(v, x->count, x->exceptions, x->sum_ns, x->min_ns, x->max_ns, x->max_in_flight, &x->histogram,
                   &x->slowest_trace);
        v->stalled = stalled_on(sc, (uint64_t)x->method_id, false);
        if (cmr_met_labels_set(&l, CMR_MET_METHOD, env, strlen(env), (uint64_t)x->method_id, 0) != 0 ||
            add_point(m, st, &l, b->interval_start_ms, v) < 0)
            return -1;
    }
    return 0;
}

static int add_transactions(cmr_metrics_t *m, cmr_met_store_t *st, const cmr_metric_batch_t *b, const char *env,
                            const stalled_counts_t *sc)
{
    cmr_met_labels_t l;
    cmr_met_value_t *v = &m->scratch;
    for (size_t i = 0; i < b->transactions.count; i++) {
        const cmr_transaction_metric_t *x = &b->transactions.items[i];
        uint64_t subject = transaction_subject(x);
        item_value(v, x->count, x->exceptions, x->sum_ns, x->min_ns, x->max_ns, x->max_in_flight, &x->histogram,
                   &x->slowest_trace);
        v->stalled = *x->name ? 0 : stalled_on(sc, (uint64_t)x->root_method_id, true);
        for (int per_agent = 0; per_agent < 2; per_agent++) {
            int rc =
                cmr_met_labels_set(&l, CMR_MET_TRANSACTION, env, strlen(env), subject, per_agent ? b->agent_id : 0) != 0
                    ? -1
                    : add_point(m, st, &l, b->interval_start_ms, v);
            if (rc < 0)
                return -1;
            if (rc == 0 && !per_agent && *x->name)
                keep_transaction_name(st, env, subject, x->name, x->root_method_id);
        }
    }
    return 0;
}

/* Ids of the batch's methods, or of its transactions named by their root method. */
static int ids_of(const cmr_metric_batch_t *b, bool transactions, cmr_u64map_t *out)
{
    size_t n = transactions ? b->transactions.count : b->metrics.count;
    for (size_t i = 0; i < n; i++) {
        if (transactions && *b->transactions.items[i].name)
            continue;
        uint64_t id =
            transactions ? (uint64_t)b->transactions.items[i].root_method_id : (uint64_t)b->metrics.items[i].method_id;
        if (cmr_u64map_put(out, id, (void *)1) != 0)
            return -1;
    }
    return 0;
}

/* A point holding only `stalled`, for a subject that had no call end in the interval. */
static int add_stalled_point(cmr_metrics_t *m, cmr_met_store_t *st, const cmr_metric_batch_t *b, const char *env,
                             cmr_met_kind_t kind, uint64_t subject, uint64_t stalled)
{
    cmr_met_labels_t l;
    cmr_met_value_t *v = &m->scratch;
    cmr_met_value_reset(v);
    v->stalled = stalled;
    /* a transaction also per JVM: "which JVMs are slow" sees a JVM whose requests all hang */
    for (int per_agent = 0; per_agent < (kind == CMR_MET_TRANSACTION ? 2 : 1); per_agent++)
        if (cmr_met_labels_set(&l, kind, env, strlen(env), subject, per_agent ? b->agent_id : 0) != 0 ||
            add_point(m, st, &l, b->interval_start_ms, v) < 0)
            return -1;
    return 0;
}

/* Stalled calls whose method (or transaction) had no call that ended in the interval. */
static int add_stalled_only(cmr_metrics_t *m, cmr_met_store_t *st, const cmr_metric_batch_t *b, const char *env,
                            const stalled_counts_t *sc)
{
    if (!b->stalled.count)
        return 0;
    m->stats.stalled_calls += b->stalled.count;
    cmr_u64map_t methods = {0}, roots = {0};
    int rc = ids_of(b, false, &methods) || ids_of(b, true, &roots) ? -1 : 0;
    size_t it = 0;
    uint64_t id;
    void *count;
    while (rc == 0 && cmr_u64map_next(&sc->by_method, &it, &id, &count))
        if (!cmr_u64map_has(&methods, id))
            rc = add_stalled_point(m, st, b, env, CMR_MET_METHOD, id, (uint64_t)(uintptr_t)count);
    it = 0;
    while (rc == 0 && cmr_u64map_next(&sc->by_root, &it, &id, &count))
        if (!cmr_u64map_has(&roots, id))
            rc = add_stalled_point(m, st, b, env, CMR_MET_TRANSACTION, id, (uint64_t)(uintptr_t)count);
    cmr_u64map_free(&methods);
    cmr_u64map_free(&roots);
    return rc;
}

/* The newest stalled calls of an agent, for `metrics stalled`: state 's' | env len | env |
 * agent -> a MetricBatch holding only them; removed when the agent reports none. */
static int keep_stalled(cmr_metrics_t *m, cmr_met_store_t *st, const cmr_metric_batch_t *b, const char *env)
{
    uint8_t key[2 + CMR_MET_ENV_MAX + 8];
    size_t el = strlen(env);
    key[0] = 's';
    key[1] = (uint8_t)el;
    memcpy(key + 2, env, el);
    cmr_put_be64(key + 2 + el, (uint64_t)b->agent_id);
    size_t klen = 2 + el + 8;
    (void)m;
    if (!b->stalled.count) { /* a read (memtable, bloom filter) rather than a tombstone per batch */
        void *old = NULL;
        size_t olen = 0;
        int got = cmr_met_state_get(st, key, klen, &old, &olen);
        free(old);
        return got == 1 ? cmr_met_state_del(st, key, klen) : got < 0 ? -1 : 0;
    }
    cmr_metric_batch_t only = {.agent_id = b->agent_id,
                               .interval_start_ms = b->interval_start_ms,
                               .interval_ms = b->interval_ms,
                               .environment_id = (char *)env,
                               .stalled = b->stalled};
    cmr_buf_t enc = {0};
    char err[128];
    int rc = cmr_msg_encode(CMR_MSG_METRIC_BATCH, &only, &enc, err, sizeof err) == CMR_WIRE_OK
                 ? cmr_met_state_put(st, key, klen, enc.data, enc.len)
                 : -1;
    cmr_buf_free(&enc);
    return rc;
}

int cmr_metrics_add(cmr_metrics_t *m, int partition, const cmr_metric_batch_t *b, char *err, size_t errlen)
{
    cmr_met_store_t *st = partition >= 0 && partition < MET_MAX_PARTITIONS ? m->parts[partition] : NULL;
    if (!st) {
        snprintf(err, errlen, "partition %d is not open", partition);
        return -2;
    }
    cmr_met_labels_t env_labels;
    if (check_batch(m, b, &env_labels, err, errlen) != 0) {
        m->stats.rejected++;
        return -1;
    }
    int seen = cmr_met_store_seen(st, b->agent_id, b->interval_start_ms);
    if (seen < 0) {
        snprintf(err, errlen, "cannot read the store");
        return -2;
    }
    if (seen) {
        m->stats.duplicates++;
        return 0;
    }
    const char *env = env_labels.env;
    met_env_t *e = env_of(m, env, partition);
    if (!e && cmr_map_count(&m->envs) >= MAX_ENVS) {
        snprintf(err, errlen, "more than %d environments", MAX_ENVS);
        m->stats.rejected++;
        return -1;
    }
    stalled_counts_t sc = {0};
    int rc = !e || count_stalled(b, &sc) || add_methods(m, st, b, env, &sc) || add_transactions(m, st, b, env, &sc) ||
                     add_stalled_only(m, st, b, env, &sc) || keep_stalled(m, st, b, env) ||
                     cmr_met_store_mark_applied(st, b->agent_id, b->interval_start_ms)
                 ? -2
                 : 0;
    stalled_counts_free(&sc);
    if (rc) {
        snprintf(err, errlen, "out of memory or store error");
        m->failed = true; /* part of the batch is pending: it must not be written */
        return -2;
    }
    int64_t end = b->interval_start_ms + b->interval_ms;
    if (end > e->watermark_ms)
        e->watermark_ms = end;
    if (!e->first_ms || b->interval_start_ms < e->first_ms)
        e->first_ms = b->interval_start_ms;
    m->stats.batches++;
    return 1;
}

/* --- flush, evaluate, retention, stats -------------------------------------------------- */

int cmr_metrics_flush(cmr_metrics_t *m)
{
    char err[512];
    if (m->failed)
        return -1;
    for (int p = 0; p < MET_MAX_PARTITIONS; p++) {
        if (!m->parts[p] || (cmr_met_store_pending(m->parts[p]) == 0 && m->applied_pending[p] == m->applied[p]))
            continue;
        if (put_applied(m, p) != 0 || cmr_met_store_flush(m->parts[p], err, sizeof err) != 0) {
            cmr_log(CMR_LOG_ERROR, "metrics.flush_failed", "partition=%d error=\"%s\"", p, err);
            applied_flushed(m, p, false);
            return -1;
        }
        applied_flushed(m, p, true);
    }
    return 0;
}

size_t cmr_metrics_pending(const cmr_metrics_t *m)
{
    size_t n = 0;
    for (int p = 0; p < MET_MAX_PARTITIONS; p++)
        if (m->parts[p])
            n += cmr_met_store_pending(m->parts[p]);
    return n;
}

/* The last boundary e's rules can be judged at now: its data time less the lateness. */
static int64_t judgeable_until(const cmr_metrics_t *m, const met_env_t *e)
{
    return (e->watermark_ms - m->o.lateness_ms) / MET_EVAL_STEP_MS * MET_EVAL_STEP_MS;
}

void cmr_metrics_restored(cmr_metrics_t *m, int partition)
{
    size_t it = 0;
    void *val;
    while (cmr_map_next(&m->envs, &it, NULL, NULL, &val)) {
        met_env_t *e = val;
        if (e->partition != partition)
            continue;
        int64_t t = judgeable_until(m, e);
        if (t > e->quiet_until_ms)
            e->quiet_until_ms = t;
        cmr_log(CMR_LOG_INFO, "metrics.rules_restored",
                "environment=%s partition=%d quiet_until_ms=%" PRId64
                " action=\"the rules' state is judged again from the data up to here, without events\"",
                e->id, partition, e->quiet_until_ms);
    }
}

int cmr_metrics_evaluate(cmr_metrics_t *m)
{
    int n = 0;
    size_t it = 0;
    void *val;
    while (cmr_map_next(&m->envs, &it, NULL, NULL, &val)) {
        met_env_t *e = val;
        int64_t t = judgeable_until(m, e);
        if (!e->judged_ms) /* from the oldest data seen: what a previous owner judged is judged again,
                            * with its state, so nothing is sent twice */
            e->judged_ms = e->first_ms / MET_EVAL_STEP_MS * MET_EVAL_STEP_MS;
        /* every boundary in turn, so that what is decided does not depend on how often the
         * worker commits (a replay commits far less often); after a longer gap, the last day */
        if (t - e->judged_ms > MET_EVAL_MAX_GAP * MET_EVAL_STEP_MS)
            e->judged_ms = t - MET_EVAL_MAX_GAP * MET_EVAL_STEP_MS;
        int steps = 0;
        for (int64_t b = e->judged_ms + MET_EVAL_STEP_MS; b <= t && steps < MET_EVAL_PER_CALL;
             b += MET_EVAL_STEP_MS, steps++) {
            if (met_rules_judge(m, e, b) < 0)
                break;
            e->judged_ms = b;
            n++;
        }
    }
    m->stats.evaluations += (uint64_t)n;
    return n;
}

void cmr_metrics_retention(cmr_metrics_t *m, int64_t now_ms)
{
    for (int p = 0; p < MET_MAX_PARTITIONS; p++)
        if (m->parts[p])
            cmr_met_store_retention(m->parts[p], now_ms);
}

void cmr_metrics_stats(cmr_metrics_t *m, cmr_metrics_stats_t *out)
{
    *out = m->stats;
    out->series = out->series_overflow = out->corrupt = out->disk_bytes = 0;
    for (int p = 0; p < MET_MAX_PARTITIONS; p++) {
        if (!m->parts[p])
            continue;
        cmr_met_stats_t s;
        cmr_met_store_stats(m->parts[p], &s);
        out->series += s.series;
        out->series_overflow += s.series_overflow;
        out->corrupt += s.corrupt_operands;
        out->disk_bytes += s.disk_bytes;
    }
}
