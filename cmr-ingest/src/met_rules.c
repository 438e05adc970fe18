/*
 * met_rules.c - the threshold rules of an environment (cmr.config, ThresholdRule) judged
 * against its series: abnormal and back-to-normal events (ThresholdEvent on cmr.alerts).
 *
 * A rule names a scope (transactions or methods), a glob on their display names, a
 * statistic, a limit and a length `for`. At every 10 s boundary t of the environment's
 * data time (met_ingest.c), each matching series is judged over the window [t - for, t):
 *   - ABNORMAL when the statistic over the window is above the limit (and, for latencies
 *     and error rates, the window holds at least min_count calls);
 *   - back to NORMAL when a series that was abnormal is at or below the limit over a whole
 *     window, or has too few calls to judge (the patent's "performance back to normal for
 *     a period": the period is the rule's `for`).
 * Only changes are events. The state (which series are abnormal, since when) lives in the
 * partition store's state column family ("r" keys), written in the same atomic batch as
 * the data, so a restarted or replaying worker continues where the last one stopped. A
 * worker newly assigned a partition restores its data from cmr.metrics, not the state:
 * it judges the restored boundaries again without events (cmr_metrics_restored), which
 * gives it the state the owner before had without sending its events twice.
 * A rule removed from its environment releases its abnormal series silently (logged).
 *
 * An event carries its evidence: the value, the window, its call count, and up to three
 * example traces (the slowest calls of the window's 10 s buckets).
 *
 * Cost: per rule and evaluation, one window read per series of the environment's scope;
 * at most metrics.rules.max_alerts abnormal events per rule and evaluation (the rest are
 * counted and judged again at the next boundary).
 */
#include <fnmatch.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/bytes.h"
#include "cmr/ids.h"
#include "cmr/log.h"
#include "met_module.h"

#define MAX_EXAMPLES 3
#define MAX_RULE_NAME 255
#define STATE_ABNORMAL 1

/* --- state keys: 'r' | env len | env | rule len | rule | subject ------------------------ */

static size_t state_prefix(uint8_t *k, const char *env, const char *rule)
{
    size_t el = strlen(env), rl = rule ? strlen(rule) : 0, at = 0;
    if (rl > 255)
        rl = 255;
    k[at++] = 'r';
    k[at++] = (uint8_t)el;
    memcpy(k + at, env, el);
    at += el;
    if (!rule)
        return at;
    k[at++] = (uint8_t)rl;
    memcpy(k + at, rule, rl);
    return at + rl;
}

#define STATE_KEY_MAX (2 + CMR_MET_ENV_MAX + 1 + 255 + 8)

static size_t state_key(uint8_t *k, const char *env, const char *rule, uint64_t subject)
{
    size_t at = state_prefix(k, env, rule);
    cmr_put_be64(k + at, subject);
    return at + 8;
}

/* --- names ---------------------------------------------------------------------------- */

const char *cmr_metrics_subject_name(const cmr_names_t *names, cmr_met_store_t *const *stores, size_t n,
                                     const cmr_met_labels_t *l, char *buf, size_t len)
{
    if (l->kind == CMR_MET_TRANSACTION) { /* a named transaction (an HTTP route) */
        uint8_t key[9] = {'n'};
        cmr_put_be64(key + 1, l->subject);
        for (size_t i = 0; i < n; i++) {
            void *v = NULL;
            size_t vlen = 0;
            if (cmr_met_state_get(stores[i], key, sizeof key, &v, &vlen) == 1) {
                snprintf(buf, len, "%.*s", (int)vlen, (const char *)v);
                free(v);
                return buf;
            }
            free(v);
        }
    }
    return cmr_names_method(names, l->subject, buf, len);
}

size_t cmr_metrics_root_key(uint8_t key[CMR_METRICS_ROOT_KEY_MAX], const char *env, uint64_t subject)
{
    size_t el = strlen(env) > CMR_MET_ENV_MAX ? CMR_MET_ENV_MAX : strlen(env);
    key[0] = 'm';
    key[1] = (uint8_t)el;
    memcpy(key + 2, env, el);
    cmr_put_be64(key + 2 + el, subject);
    return 2 + el + 8;
}

bool cmr_metrics_transaction_root(cmr_met_store_t *const *stores, size_t n, const char *env, uint64_t subject,
                                  uint64_t *root)
{
    uint8_t key[CMR_METRICS_ROOT_KEY_MAX];
    size_t klen = cmr_metrics_root_key(key, env, subject);
    for (size_t i = 0; i < n; i++) {
        void *v = NULL;
        size_t vlen = 0;
        bool found = cmr_met_state_get(stores[i], key, klen, &v, &vlen) == 1 && vlen == 8;
        if (found)
            *root = cmr_be64(v);
        free(v);
        if (found)
            return true;
    }
    return false;
}

/* --- judging -------------------------------------------------------------------------- */

static cmr_met_stat_t store_stat(cmr_threshold_statistic_t s)
{
    switch (s) {
    case CMR_STAT_P50: return CMR_MET_P50;
    case CMR_STAT_P90: return CMR_MET_P90;
    case CMR_STAT_P95: return CMR_MET_P95;
    case CMR_STAT_P99: return CMR_MET_P99;
    case CMR_STAT_P999: return CMR_MET_P999;
    case CMR_STAT_MAX: return CMR_MET_MAX;
    case CMR_STAT_MEAN: return CMR_MET_MEAN;
    case CMR_STAT_ERROR_RATE: return CMR_MET_ERROR_RATE;
    default: return CMR_MET_COUNT;
    }
}

/* The statistic in the rule's unit: ms for latencies, a fraction, or calls. */
double cmr_metrics_rule_value(const cmr_threshold_rule_t *r, const cmr_met_value_t *v)
{
    if (r->statistic == CMR_STAT_STALLED)
        return (double)v->stalled;
    double x = cmr_met_stat(v, store_stat(r->statistic));
    return cmr_stat_is_latency(r->statistic) ? x / 1e6 : x;
}

/* Whether the window holds enough calls to judge: stalled calls and counts are judged
 * on any window. */
static bool enough_calls(const cmr_threshold_rule_t *r, const cmr_met_value_t *v)
{
    if (r->statistic == CMR_STAT_STALLED || r->statistic == CMR_STAT_COUNT)
        return true;
    return v->count > 0 && v->count >= (uint64_t)r->min_count;
}

typedef struct example {
    uint64_t max_ns;
    uint8_t trace[16];
} example_t;

typedef struct examples {
    example_t items[8];
    size_t n;
} examples_t;

/* Keeps the slowest calls of the window's buckets, slowest first, one per trace. */
static int collect_example(int64_t bucket_ms, const cmr_met_value_t *v, void *opaque)
{
    (void)bucket_ms;
    examples_t *x = opaque;
    if (!v->has_slowest)
        return 0;
    for (size_t i = 0; i < x->n; i++)
        if (!memcmp(x->items[i].trace, v->slowest_trace, 16))
            return 0;
    size_t at;
    if (x->n < MAX_EXAMPLES)
        at = x->n++;
    else if (v->max_ns > x->items[MAX_EXAMPLES - 1].max_ns)
        at = MAX_EXAMPLES - 1; /* replaces the fastest kept */
    else
        return 0;
    x->items[at].max_ns = v->max_ns;
    memcpy(x->items[at].trace, v->slowest_trace, 16);
    for (size_t i = at; i > 0 && x->items[i].max_ns > x->items[i - 1].max_ns; i--) {
        example_t t = x->items[i];
        x->items[i] = x->items[i - 1];
        x->items[i - 1] = t;
    }
    return 0;
}

typedef struct judge_ctx {
    cmr_metrics_t *m;
    cmr_met_store_t *st;
    met_env_t *e;
    const cmr_threshold_rule_t *r;
    int64_t from_ms, to_ms;
    cmr_met_value_t v;
    size_t abnormal_sent;
    int rc;
} judge_ctx_t;

static void send_event(judge_ctx_t *c, const cmr_met_labels_t *l, const char *name, cmr_threshold_state_t state,
                       double value)
{
    cmr_metrics_t *m = c->m;
    if (c->to_ms <= c->e->quiet_until_ms) { /* a restored partition: the owner before sent it */
        m->stats.alerts_restored++;
        return;
    }
    examples_t ex = {0};
    if (state == CMR_THRESHOLD_ABNORMAL)
        cmr_met_series_read(&c->st, 1, l, CMR_MET_RES_10S, c->from_ms, c->to_ms, collect_example, &ex);
    char hex[MAX_EXAMPLES][33];
    char *traces[MAX_EXAMPLES];
    /* a method's id, or a transaction's root method (threshold_event.avsc): the subject of a
     * transaction named by its route is the name's hash */
    uint64_t subject_id = l->subject;
    if (l->kind == CMR_MET_TRANSACTION)
        cmr_metrics_transaction_root(&c->st, 1, l->env, l->subject, &subject_id);
    for (size_t i = 0; i < ex.n; i++) {
        cmr_hex(ex.items[i].trace, 16, hex[i]);
        traces[i] = hex[i];
    }
    cmr_threshold_event_t ev = {
        .environment_id = c->e->id,
        .rule = c->r->name,
        .state = state,
        .scope = c->r->scope,
        .subject_id = (int64_t)subject_id,
        .subject_name = (char *)name,
        .statistic = c->r->statistic,
        .value = value,
        .threshold = c->r->above,
        .window_start_ms = c->from_ms,
        .window_end_ms = c->to_ms,
        .count = (int64_t)c->v.count,
        .example_traces = {traces, ex.n},
        .diagnose = c->r->diagnose && state == CMR_THRESHOLD_ABNORMAL,
        .time_ms = c->to_ms,
    };
    char ename[512];
    cmr_log(CMR_LOG_INFO, state == CMR_THRESHOLD_ABNORMAL ? "metrics.abnormal" : "metrics.back_to_normal",
            "environment=%s rule=%s %s=\"%s\" %s=%.6g above=%.6g count=%" PRIu64 " window_end_ms=%" PRId64, c->e->id,
            c->r->name, cmr_threshold_scope_name(c->r->scope), cmr_log_escape(name, ename, sizeof ename),
            cmr_stat_name(c->r->statistic), value, c->r->above, c->v.count, c->to_ms);
    if (state == CMR_THRESHOLD_ABNORMAL)
        m->stats.alerts_abnormal++;
    else
        m->stats.alerts_normal++;
    if (m->alert_fn)
        m->alert_fn(m->alert_opaque, &ev);
}

static int judge_series(const cmr_met_labels_t *l, uint64_t series_id, void *opaque)
{
    (void)series_id;
    judge_ctx_t *c = opaque;
    const cmr_threshold_rule_t *r = c->r;
    char name[1024];
    cmr_metrics_subject_name(c->m->names, &c->st, 1, l, name, sizeof name);
    if (fnmatch(r->pattern, name, 0) != 0)
        return 0;
    if (cmr_met_window(&c->st, 1, l, c->from_ms, c->to_ms, &c->v) != 0) {
        c->rc = -1;
        return 1;
    }
    uint8_t key[STATE_KEY_MAX];
    size_t klen = state_key(key, c->e->id, r->name, l->subject);
    void *old = NULL;
    size_t olen = 0;
    int got = cmr_met_state_get(c->st, key, klen, &old, &olen);
    bool was_abnormal = got == 1 && olen >= 1 && ((uint8_t *)old)[0] == STATE_ABNORMAL;
    free(old);
    if (got < 0) {
        c->rc = -1;
        return 1;
    }
    double value = cmr_metrics_rule_value(r, &c->v);
    bool above = enough_calls(r, &c->v) && value > r->above;
    if (above && !was_abnormal) {
        if (c->abnormal_sent >= c->m->o.max_alerts) {
            c->m->stats.alerts_suppressed++;
            return 0; /* judged again at the next boundary */
        }
        uint8_t val[9] = {STATE_ABNORMAL};
        cmr_put_be64(val + 1, (uint64_t)c->to_ms);
        if (cmr_met_state_put(c->st, key, klen, val, sizeof val) != 0) {
            c->rc = -1;
            return 1;
        }
        c->abnormal_sent++;
        send_event(c, l, name, CMR_THRESHOLD_ABNORMAL, value);
    } else if (!above && was_abnormal) {
        if (cmr_met_state_del(c->st, key, klen) != 0) {
            c->rc = -1;
            return 1;
        }
        send_event(c, l, name, CMR_THRESHOLD_NORMAL, value);
    }
    return 0;
}

/* State entries of rules the environment no longer has. */
typedef struct stale_ctx {
    const cmr_environment_t *env;
    size_t prefix_len;
    cmr_buf_t keys; /* u16 length | key, ... */
} stale_ctx_t;

static int find_stale(const void *key, size_t klen, const void *val, size_t vlen, void *opaque)
{
    (void)val;
    (void)vlen;
    stale_ctx_t *c = opaque;
    const uint8_t *k = key;
    if (klen < c->prefix_len + 1 + 8)
        return 0;
    size_t rl = k[c->prefix_len];
    if (klen != c->prefix_len + 1 + rl + 8)
        return 0;
    for (size_t i = 0; i < c->env->thresholds.count; i++) {
        const char *name = c->env->thresholds.items[i].name;
        if (strlen(name) == rl && !memcmp(name, k + c->prefix_len + 1, rl))
            return 0;
    }
    uint8_t len[2];
    cmr_put_be16(len, (uint16_t)klen);
    cmr_buf_put(&c->keys, len, 2);
    cmr_buf_put(&c->keys, key, klen);
    return 0;
}

static void release_removed_rules(cmr_metrics_t *m, cmr_met_store_t *st, met_env_t *e, const cmr_environment_t *env)
{
    uint8_t prefix[STATE_KEY_MAX];
    stale_ctx_t c = {.env = env, .prefix_len = state_prefix(prefix, e->id, NULL)};
    (void)m;
    cmr_met_state_scan(st, prefix, c.prefix_len, find_stale, &c);
    size_t released = 0;
    for (size_t at = 0; at + 2 <= c.keys.len; released++) {
        size_t klen = cmr_be16(c.keys.data + at);
        cmr_met_state_del(st, c.keys.data + at + 2, klen);
        at += 2 + klen;
    }
    if (released)
        cmr_log(CMR_LOG_INFO, "metrics.rule_removed", "environment=%s released=%zu", e->id, released);
    cmr_buf_free(&c.keys);
}

int met_rules_judge(cmr_metrics_t *m, met_env_t *e, int64_t t_ms)
{
    const cmr_environment_t *env = cmr_cfg_state_env(m->config, e->id, NULL);
    cmr_met_store_t *st = m->parts[e->partition];
    if (!st)
        return -1;
    static const cmr_environment_t none = {0};
    release_removed_rules(m, st, e, env ? env : &none);
    if (!env)
        return 0;
    int rc = 0;
    for (size_t i = 0; i < env->thresholds.count && rc == 0; i++) {
        const cmr_threshold_rule_t *r = &env->thresholds.items[i];
        if (strlen(r->name) > MAX_RULE_NAME)
            continue; /* cmr-config refuses them; the state key holds 255 bytes of a name */
        judge_ctx_t c = {.m = m, .st = st, .e = e, .r = r, .from_ms = t_ms - r->for_ms, .to_ms = t_ms};
        cmr_met_value_init(&c.v);
        cmr_met_filter_t f = {
            .kind = r->scope == CMR_THRESHOLD_TRANSACTION ? CMR_MET_TRANSACTION : CMR_MET_METHOD,
            .env = e->id,
            .agent = 0,
        };
        if (cmr_met_list_series(&st, 1, &f, judge_series, &c) != 0 || c.rc != 0) {
            cmr_log(CMR_LOG_WARN, "metrics.rule_failed", "environment=%s rule=%s", e->id, r->name);
            rc = -1;
        }
        cmr_met_value_free(&c.v);
    }
    return rc;
}
