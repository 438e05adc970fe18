/*
 * met_cli.c - reading the metrics: `cmr-ingest metrics WHAT` and GET /api/metrics/WHAT.
 *
 *   top      the transactions (or methods) of an environment ranked by a statistic over a
 *            window: count, rate, errors, p50 / p90 / p95 / p99 / max / mean, stalled
 *   series   one transaction's or method's buckets over time (10 s, 1 min or 1 h)
 *   jvms     one transaction per JVM over a window, slowest first ("which JVMs are slow")
 *   alerts   what the threshold rules find abnormal now (history: topic cmr.alerts)
 *   stalled  the calls the agents last reported as running past their stall threshold (in
 *            the window: an agent that stopped while a call hung is not shown forever)
 *
 * Parameters (HTTP query keys, or the CLI's --env --kind --name --stat --last --from --to
 * --res --limit): env (default: every environment), kind (transaction | method, default
 * transaction), name (part of the display name, or the 16-hex-digit id), stat (p50, p90,
 * p95, p99, p999, max, mean, count, errors, error_rate; default p99), last (window length,
 * default 1h) or from / to (times as `traces` takes them), res (10s | 1m | 1h; default
 * by window length), limit (default 20).
 *
 * A view opens every metrics partition store read-only (what was written when it was
 * opened) and the names of the ingest view. Output is JSON for programs and, for the
 * CLI, a table; latencies are in milliseconds.
 *
 * Ownership: the view owns its stores and the ingest view; JSON texts are malloc'd.
 */
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jansson.h>

#include "cmr/bytes.h"
#include "cmr/clock.h"
#include "cmr/ids.h"
#include "cmr/json.h"
#include "cmr/metrics.h"
#include "cmr/wire.h"

#define MAX_STORES 4096

struct cmr_metrics_view {
    cmr_met_store_t **stores;
    size_t n;
    cmr_ingest_view_t *ingest;
    const cmr_names_t *names;
};

/* --- the view ------------------------------------------------------------------------------ */

static int by_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

cmr_metrics_view_t *cmr_metrics_view_open(const char *root, char *err, size_t errlen)
{
    return cmr_metrics_view_open_only(root, NULL, err, errlen);
}

cmr_metrics_view_t *cmr_metrics_view_open_only(const char *root, const bool *only, char *err, size_t errlen)
{
    cmr_metrics_view_t *v = calloc(1, sizeof *v);
    if (!v || !(v->stores = calloc(MAX_STORES, sizeof *v->stores))) {
        free(v);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    v->ingest = cmr_ingest_view_open(root, err, errlen);
    if (!v->ingest) {
        cmr_metrics_view_free(v);
        return NULL;
    }
    v->names = cmr_ingest_view_names(v->ingest);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/metrics", root);
    DIR *d = opendir(dir);
    int parts[MAX_STORES];
    size_t np = 0;
    for (struct dirent *e; d && (e = readdir(d)) && np < MAX_STORES;) {
        int p;
        char tail;
        if (sscanf(e->d_name, "p%d%c", &p, &tail) == 1 && p >= 0 && (!only || (p < MAX_STORES && only[p])))
            parts[np++] = p;
    }
    if (d)
        closedir(d);
    qsort(parts, np, sizeof parts[0], by_int);
    cmr_met_opts_t o = {.read_only = true};
    for (size_t i = 0; i < np; i++) {
        char path[4300], current[4400];
        snprintf(path, sizeof path, "%s/p%03d", dir, parts[i]);
        snprintf(current, sizeof current, "%s/CURRENT", path);
        struct stat st;
        if (stat(current, &st) != 0)
            continue; /* a store being created right now: nothing in it yet */
        cmr_met_store_t *s = cmr_met_store_open(path, &o, err, errlen);
        if (s)
            v->stores[v->n++] = s;
    }
    return v;
}

void cmr_metrics_view_free(cmr_metrics_view_t *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < v->n; i++)
        cmr_met_store_close(v->stores[i]);
    free(v->stores);
    cmr_ingest_view_free(v->ingest);
    free(v);
}

/* --- parameters ---------------------------------------------------------------------------- */

typedef struct params {
    const char *env, *name, *agent;
    uint8_t kind;
    cmr_met_stat_t stat;
    int64_t from_ms, to_ms;
    int res; /* -1: by window length */
    size_t limit;
} params_t;

static int parse_params(const char *const *keys, const char *const *values, size_t n, params_t *p, char *err,
                        size_t errlen)
{
    int64_t now = cmr_wall_ms(), last_ns = 3600LL * 1000000000, from_ns = 0, to_ns = 0;
    *p = (params_t){.kind = CMR_MET_TRANSACTION, .stat = CMR_MET_P99, .res = -1, .limit = 20};
    for (size_t i = 0; i < n; i++) {
        const char *k = keys[i], *val = values[i];
        if (!strcmp(k, "env"))
            p->env = *val ? val : NULL;
        else if (!strcmp(k, "name"))
            p->name = *val ? val : NULL;
        else if (!strcmp(k, "agent"))
            p->agent = *val ? val : NULL;
        else if (!strcmp(k, "kind")) {
            if (strcmp(val, "transaction") && strcmp(val, "method")) {
                snprintf(err, errlen, "kind is transaction or method, not \"%s\"", val);
                return -1;
            }
            p->kind = val[0] == 't' ? CMR_MET_TRANSACTION : CMR_MET_METHOD;
        } else if (!strcmp(k, "stat")) {
            int s = cmr_met_stat_parse(val);
            if (s < 0) {
                snprintf(err, errlen,
                         "unknown stat \"%s\" (p50, p90, p95, p99, p999, max, mean, count, errors, "
                         "error_rate)",
                         val);
                return -1;
            }
            p->stat = (cmr_met_stat_t)s;
        } else if (!strcmp(k, "last")) {
            if (cmr_ingest_parse_duration(val, &last_ns) != 0 || last_ns <= 0) {
                snprintf(err, errlen, "last is a duration (15m, 1h, 24h), not \"%s\"", val);
                return -1;
            }
        } else if (!strcmp(k, "from") || !strcmp(k, "to")) {
            if (cmr_ingest_parse_time(val, k[0] == 'f' ? &from_ns : &to_ns) != 0) {
                snprintf(err, errlen, "%s is a time (ISO 8601 UTC, unix time, or -10m), not \"%s\"", k, val);
                return -1;
            }
        } else if (!strcmp(k, "res")) {
            p->res = !strcmp(val, "10s")  ? CMR_MET_RES_10S
                     : !strcmp(val, "1m") ? CMR_MET_RES_1M
                     : !strcmp(val, "1h") ? CMR_MET_RES_1H
                                          : -2;
            if (p->res == -2) {
                snprintf(err, errlen, "res is 10s, 1m or 1h, not \"%s\"", val);
                return -1;
            }
        } else if (!strcmp(k, "limit")) {
            char *end;
            long l = strtol(val, &end, 10);
            if (*end || l < 1 || l > 10000) {
                snprintf(err, errlen, "limit is 1..10000, not \"%s\"", val);
                return -1;
            }
            p->limit = (size_t)l;
        } else if (strcmp(k, "json")) {
            snprintf(err, errlen, "unknown parameter \"%s\" (env, kind, name, agent, stat, last, from, to, res, limit)",
                     k);
            return -1;
        }
    }
    p->to_ms = to_ns ? to_ns / 1000000 : now;
    p->from_ms = from_ns ? from_ns / 1000000 : p->to_ms - last_ns / 1000000;
    if (p->from_ms >= p->to_ms) {
        snprintf(err, errlen, "the window is empty (from is not before to)");
        return -1;
    }
    if (p->env && strlen(p->env) > CMR_MET_ENV_MAX) {
        snprintf(err, errlen, "env is at most %d bytes", CMR_MET_ENV_MAX);
        return -1;
    }
    return 0;
}

static cmr_met_res_t auto_res(const params_t *p)
{
    if (p->res >= 0)
        return (cmr_met_res_t)p->res;
    int64_t span = p->to_ms - p->from_ms;
    return span <= 2 * 3600000LL ? CMR_MET_RES_10S : span <= 2 * 86400000LL ? CMR_MET_RES_1M : CMR_MET_RES_1H;
}

/* --- values as JSON and text ------------------------------------------------------------- */

static double ms(double ns)
{
    return ns / 1e6;
}

/* The seconds a rate over the window divides by: the window, or its part since the JVMs
 * (or the one JVM) began to report when that came later (a fresh deployment, a JVM
 * started within the window: 140 calls/s over its 3 minutes, not 8.6/s over an hour);
 * at least 10 s (one bucket), at most the window. since_ms: cmr_met_reporting_since. */
static double rate_seconds(const params_t *p, int64_t since_ms)
{
    int64_t window = p->to_ms - p->from_ms;
    int64_t span = since_ms > p->from_ms ? p->to_ms - since_ms : window;
    if (span < 10000)
        span = 10000;
    return (double)(span < window ? span : window) / 1000.0;
}

static json_t *value_json(const cmr_met_value_t *v, double seconds)
{
    char trace[33] = "";
    if (v->has_slowest)
        cmr_hex(v->slowest_trace, 16, trace);
    return json_pack("{s:I, s:f, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:s, s:f}", "count",
                     (json_int_t)v->count, "rate", seconds > 0 ? (double)v->count / seconds : 0.0, "errors",
                     (json_int_t)v->errors, "error_rate", cmr_met_stat(v, CMR_MET_ERROR_RATE), "p50_ms",
                     ms(cmr_met_stat(v, CMR_MET_P50)), "p90_ms", ms(cmr_met_stat(v, CMR_MET_P90)), "p95_ms",
                     ms(cmr_met_stat(v, CMR_MET_P95)), "p99_ms", ms(cmr_met_stat(v, CMR_MET_P99)), "max_ms",
                     ms(cmr_met_stat(v, CMR_MET_MAX)), "mean_ms", ms(cmr_met_stat(v, CMR_MET_MEAN)), "stalled",
                     (json_int_t)v->stalled, "max_in_flight", (json_int_t)v->max_in_flight, "slowest_trace", trace,
                     "rate_seconds", seconds);
}

#define NAME_COLUMN 56

static void value_header(FILE *f, const char *first)
{
    fprintf(f, "%-*s %9s %8s %6s %9s %9s %9s %9s %7s\n", NAME_COLUMN, first, "COUNT", "RATE/s", "ERR", "P50 ms",
            "P95 ms", "P99 ms", "MAX ms", "STALLED");
}

/* A name that fits the column: a method's descriptor becomes "(..)" when the whole does
 * not fit, then the tail is cut. */
static const char *column_name(const char *name, char *buf, size_t len)
{
    const char *paren = strchr(name, '(');
    if (strlen(name) <= NAME_COLUMN || !paren)
        snprintf(buf, len, "%.*s", NAME_COLUMN, name);
    else
        snprintf(buf, len, "%.*s(..)", (int)((size_t)(paren - name) < NAME_COLUMN - 4 ? paren - name : NAME_COLUMN - 4),
                 name);
    return buf;
}

static void value_text(FILE *f, const char *first, const cmr_met_value_t *v, double seconds)
{
    char col[NAME_COLUMN + 8];
    first = column_name(first, col, sizeof col);
    fprintf(f, "%-*s %9" PRIu64 " %8.2f %6" PRIu64 " %9.2f %9.2f %9.2f %9.2f %7" PRIu64 "\n", NAME_COLUMN, first,
            v->count, seconds > 0 ? (double)v->count / seconds : 0.0, v->errors, ms(cmr_met_stat(v, CMR_MET_P50)),
            ms(cmr_met_stat(v, CMR_MET_P95)), ms(cmr_met_stat(v, CMR_MET_P99)), ms(cmr_met_stat(v, CMR_MET_MAX)),
            v->stalled);
}

/* A transaction named by its request (an HTTP route: docs/METRICS.md) gets the root method
 * it was seen with, as "root_method". */
static void add_root_method(cmr_metrics_view_t *v, const cmr_met_labels_t *l, json_t *j)
{
    uint64_t root;
    if (l->kind == CMR_MET_TRANSACTION && cmr_metrics_transaction_root(v->stores, v->n, l->env, l->subject, &root)) {
        char rname[1024];
        cmr_names_method(v->names, root, rname, sizeof rname);
        json_object_set_new(j, "root_method", cmr_json_str(rname));
    }
}

static json_t *labels_json(cmr_metrics_view_t *v, const cmr_met_labels_t *l)
{
    char name[1024], id[17], agent[512];
    cmr_metrics_subject_name(v->names, v->stores, v->n, l, name, sizeof name);
    snprintf(id, sizeof id, "%016" PRIx64, l->subject);
    json_t *j =
        json_pack("{s:o, s:s, s:o, s:s}", "env", cmr_json_str(l->env), "kind",
                  l->kind == CMR_MET_TRANSACTION ? "transaction" : "method", "name", cmr_json_str(name), "subject", id);
    add_root_method(v, l, j);
    if (l->agent_id) {
        char aid[17];
        snprintf(aid, sizeof aid, "%016" PRIx64, (uint64_t)l->agent_id);
        cmr_names_agent(v->names, (uint64_t)l->agent_id, agent, sizeof agent);
        json_object_set_new(j, "agent", json_string(aid));
        json_object_set_new(j, "agent_name", cmr_json_str(agent));
    }
    return j;
}

/* --- finding a series by name -------------------------------------------------------------- */

typedef struct find_ctx {
    cmr_metrics_view_t *v;
    const char *name;
    cmr_met_labels_t found[8];
    size_t n;
    bool exact;
} find_ctx_t;

static int find_one(const cmr_met_labels_t *l, uint64_t sid, void *opaque)
{
    (void)sid;
    find_ctx_t *c = opaque;
    char name[1024], id[17];
    cmr_metrics_subject_name(c->v->names, c->v->stores, c->v->n, l, name, sizeof name);
    snprintf(id, sizeof id, "%016" PRIx64, l->subject);
    bool exact = !strcmp(name, c->name) || !strcmp(id, c->name);
    if (!exact && !strstr(name, c->name))
        return 0;
    if (exact && !c->exact) { /* an exact match wins over every partial one */
        c->n = 0;
        c->exact = true;
    } else if (!exact && c->exact) {
        return 0;
    }
    for (size_t i = 0; i < c->n; i++)
        if (c->found[i].subject == l->subject && !strcmp(c->found[i].env, l->env))
            return 0;
    if (c->n < sizeof c->found / sizeof c->found[0])
        c->found[c->n++] = *l;
    return 0;
}

/* The one aggregate series named by p->name (and p->env, p->kind). */
static int find_series(cmr_metrics_view_t *v, const params_t *p, cmr_met_labels_t *out, char *err, size_t errlen)
{
    if (!p->name) {
        snprintf(err, errlen, "name is required (part of the transaction's or method's name, or its hex id)");
        return -1;
    }
    find_ctx_t c = {.v = v, .name = p->name};
    cmr_met_filter_t f = {.kind = p->kind, .env = p->env, .agent = 0};
    cmr_met_list_series(v->stores, v->n, &f, find_one, &c);
    if (c.n == 1) {
        *out = c.found[0];
        return 0;
    }
    if (c.n == 0) {
        snprintf(err, errlen, "no %s matches \"%s\"%s%s", p->kind == CMR_MET_TRANSACTION ? "transaction" : "method",
                 p->name, p->env ? " in environment " : "", p->env ? p->env : "");
        return -1;
    }
    char a[256], b[256];
    cmr_metrics_subject_name(v->names, v->stores, v->n, &c.found[0], a, sizeof a);
    cmr_metrics_subject_name(v->names, v->stores, v->n, &c.found[1], b, sizeof b);
    snprintf(err, errlen, "\"%s\" matches %s%zu series (%s, %s, ...): give more of the name, or env", p->name,
             c.n == 8 ? "at least " : "", c.n, a, b);
    return -1;
}

/* --- the queries --------------------------------------------------------------------------- */

static int q_top(cmr_metrics_view_t *v, const params_t *p, json_t *out, FILE *text)
{
    cmr_met_filter_t f = {.kind = p->kind, .env = p->env, .agent = 0};
    cmr_met_top_t top;
    size_t want = p->name ? 100000 : p->limit; /* a name filter looks at every series */
    if (cmr_met_top(v->stores, v->n, &f, p->from_ms, p->to_ms, p->stat, want, &top) != 0)
        return -1;
    double seconds = rate_seconds(p, cmr_met_reporting_since(v->stores, v->n, 0, p->from_ms, cmr_wall_ms()));
    json_t *items = json_array();
    if (text)
        value_header(text, p->kind == CMR_MET_TRANSACTION ? "TRANSACTION" : "METHOD");
    size_t shown = 0;
    for (size_t i = 0; i < top.n && shown < p->limit; i++) {
        char name[1024];
        cmr_metrics_subject_name(v->names, v->stores, v->n, &top.items[i].labels, name, sizeof name);
        if (p->name && !strstr(name, p->name))
            continue;
        json_t *it = labels_json(v, &top.items[i].labels);
        json_object_update_new(it, value_json(&top.items[i].value, seconds));
        /* the ranked statistic (latencies in ms), by which answers of several workers merge */
        double value = cmr_met_stat(&top.items[i].value, p->stat);
        json_object_set_new(it, "value", json_real(p->stat <= CMR_MET_MEAN ? ms(value) : value));
        json_array_append_new(items, it);
        if (text)
            value_text(text, name, &top.items[i].value, seconds);
        shown++;
    }
    cmr_met_top_free(&top);
    json_object_set_new(out, "items", items);
    return 0;
}

typedef struct series_ctx {
    json_t *points;
    FILE *text;
    int64_t res_ms;
} series_ctx_t;

static int series_point(int64_t bucket_ms, const cmr_met_value_t *val, void *opaque)
{
    series_ctx_t *c = opaque;
    json_t *pt = value_json(val, (double)c->res_ms / 1000.0);
    json_object_set_new(pt, "t", json_integer(bucket_ms));
    json_array_append_new(c->points, pt);
    if (c->text) {
        char when[32];
        time_t t = (time_t)(bucket_ms / 1000);
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
        value_text(c->text, when, val, (double)c->res_ms / 1000.0);
    }
    return 0;
}

static int q_series(cmr_metrics_view_t *v, const params_t *p, json_t *out, FILE *text, char *err, size_t errlen)
{
    cmr_met_labels_t l;
    if (find_series(v, p, &l, err, errlen) != 0)
        return -2;
    if (p->agent) {
        uint64_t agent;
        if (cmr_id64_parse(p->agent, strlen(p->agent), &agent) != 0) {
            snprintf(err, errlen, "agent is a 16-hex-digit agent id");
            return -2;
        }
        l.agent_id = (int64_t)agent;
    }
    cmr_met_res_t res = auto_res(p);
    series_ctx_t c = {.points = json_array(), .text = text, .res_ms = cmr_met_res_ms(res)};
    json_object_set_new(out, "series", labels_json(v, &l));
    json_object_set_new(out, "res_ms", json_integer(c.res_ms));
    if (text) {
        char name[1024];
        fprintf(text, "%s (%s, every %" PRId64 " s)\n",
                cmr_metrics_subject_name(v->names, v->stores, v->n, &l, name, sizeof name), l.env, c.res_ms / 1000);
        value_header(text, "TIME");
    }
    int rc = cmr_met_series_read(v->stores, v->n, &l, res, p->from_ms, p->to_ms, series_point, &c);
    json_object_set_new(out, "points", c.points);
    return rc;
}

typedef struct jvm_ctx {
    cmr_metrics_view_t *v;
    const params_t *p;
    cmr_met_top_item_t *items;
    size_t n, cap;
    int rc;
} jvm_ctx_t;

static int jvm_one(const cmr_met_labels_t *l, uint64_t sid, void *opaque)
{
    jvm_ctx_t *c = opaque;
    if (l->agent_id == 0)
        return 0;
    if (CMR_ARRAY_GROW(c->items, c->cap, c->n + 1) != 0) {
        c->rc = -1;
        return 1;
    }
    cmr_met_top_item_t *it = &c->items[c->n];
    memset(it, 0, sizeof *it);
    it->labels = *l;
    it->series_id = sid;
    if (cmr_met_window(c->v->stores, c->v->n, l, c->p->from_ms, c->p->to_ms, &it->value) != 0) {
        cmr_met_value_free(&it->value);
        c->rc = -1;
        return 1;
    }
    it->stat = cmr_met_stat(&it->value, c->p->stat);
    if (it->value.count == 0 && it->value.stalled == 0) {
        cmr_met_value_free(&it->value);
        return 0;
    }
    c->n++;
    return 0;
}

static int by_stat_desc(const void *a, const void *b)
{
    const cmr_met_top_item_t *x = a, *y = b;
    return x->stat < y->stat ? 1 : x->stat > y->stat ? -1 : x->labels.agent_id < y->labels.agent_id ? -1 : 1;
}

static int q_jvms(cmr_metrics_view_t *v, const params_t *p, json_t *out, FILE *text, char *err, size_t errlen)
{
    cmr_met_labels_t l;
    if (find_series(v, p, &l, err, errlen) != 0)
        return -2;
    jvm_ctx_t c = {.v = v, .p = p};
    cmr_met_filter_t f = {.kind = l.kind, .env = l.env, .subject = l.subject, .agent = -1};
    cmr_met_list_series(v->stores, v->n, &f, jvm_one, &c);
    qsort(c.items, c.n, sizeof *c.items, by_stat_desc);
    json_t *items = json_array();
    if (text)
        value_header(text, "JVM");
    for (size_t i = 0; i < c.n; i++) {
        if (i < p->limit) {
            double seconds = rate_seconds(
                p, cmr_met_reporting_since(v->stores, v->n, c.items[i].labels.agent_id, p->from_ms, cmr_wall_ms()));
            json_t *it = labels_json(v, &c.items[i].labels);
            json_object_update_new(it, value_json(&c.items[i].value, seconds));
            json_array_append_new(items, it);
            if (text) {
                char agent[512];
                cmr_names_agent(v->names, (uint64_t)c.items[i].labels.agent_id, agent, sizeof agent);
                value_text(text, agent, &c.items[i].value, seconds);
            }
        }
        cmr_met_value_free(&c.items[i].value);
    }
    free(c.items);
    json_object_set_new(out, "series", labels_json(v, &l));
    json_object_set_new(out, "items", items);
    return c.rc;
}

/* Abnormal state entries: 'r' | env len | env | rule len | rule | subject -> state | since. */
typedef struct alerts_ctx {
    cmr_metrics_view_t *v;
    const params_t *p;
    json_t *items;
    FILE *text;
} alerts_ctx_t;

static int alert_one(const void *key, size_t klen, const void *val, size_t vlen, void *opaque)
{
    alerts_ctx_t *c = opaque;
    const uint8_t *k = key;
    if (klen < 2 || vlen < 9)
        return 0;
    size_t el = k[1];
    if (klen < 2 + el + 1)
        return 0;
    size_t rl = k[2 + el];
    if (klen != 2 + el + 1 + rl + 8)
        return 0;
    char env[CMR_MET_ENV_MAX + 1], rule[256], name[1024], id[17];
    snprintf(env, sizeof env, "%.*s", (int)el, (const char *)k + 2);
    snprintf(rule, sizeof rule, "%.*s", (int)rl, (const char *)k + 3 + el);
    if (c->p->env && strcmp(env, c->p->env))
        return 0;
    uint64_t subject = cmr_be64(k + 3 + el + rl);
    int64_t since = (int64_t)cmr_be64((const uint8_t *)val + 1);
    cmr_met_labels_t l;
    cmr_met_labels_set(&l, CMR_MET_TRANSACTION, env, strlen(env), subject, 0);
    cmr_metrics_subject_name(c->v->names, c->v->stores, c->v->n, &l, name, sizeof name);
    snprintf(id, sizeof id, "%016" PRIx64, subject);
    json_t *item = json_pack("{s:o, s:o, s:o, s:s, s:I}", "env", cmr_json_str(env), "rule", cmr_json_str(rule), "name",
                             cmr_json_str(name), "subject", id, "since_ms", (json_int_t)since);
    add_root_method(c->v, &l, item);
    json_array_append_new(c->items, item);
    if (c->text) {
        char when[32];
        time_t t = (time_t)(since / 1000);
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
        fprintf(c->text, "ABNORMAL  %-12s %-20s %s  (since %s)\n", env, rule, name, when);
    }
    return 0;
}

static int q_alerts(cmr_metrics_view_t *v, const params_t *p, json_t *out, FILE *text)
{
    alerts_ctx_t c = {.v = v, .p = p, .items = json_array(), .text = text};
    for (size_t i = 0; i < v->n; i++)
        cmr_met_state_scan(v->stores[i], "r", 1, alert_one, &c);
    if (text && json_array_size(c.items) == 0)
        fprintf(text, "nothing is abnormal%s%s\n", p->env ? " in " : "", p->env ? p->env : "");
    json_object_set_new(out, "abnormal", c.items);
    return 0;
}

/* Stalled calls: 's' | env len | env | agent -> a MetricBatch holding the newest ones. */
static int stalled_one(const void *key, size_t klen, const void *val, size_t vlen, void *opaque)
{
    alerts_ctx_t *c = opaque;
    const uint8_t *k = key;
    if (klen < 2 || klen != 2 + (size_t)k[1] + 8)
        return 0;
    char env[CMR_MET_ENV_MAX + 1];
    snprintf(env, sizeof env, "%.*s", (int)k[1], (const char *)k + 2);
    if (c->p->env && strcmp(env, c->p->env))
        return 0;
    cmr_msg_t m;
    char err[128];
    if (cmr_msg_decode(val, vlen, &m, err, sizeof err) != CMR_WIRE_OK)
        return 0;
    if (m.type != CMR_MSG_METRIC_BATCH) {
        cmr_msg_free(&m);
        return 0;
    }
    const cmr_metric_batch_t *b = &m.u.metric_batch;
    int64_t reported = b->interval_start_ms + b->interval_ms;
    if (reported < c->p->from_ms || reported > c->p->to_ms + 60000) { /* an agent that went away while stalled */
        cmr_msg_free(&m);
        return 0;
    }
    char agent[512], method[1024], trace[33];
    cmr_names_agent(c->v->names, (uint64_t)b->agent_id, agent, sizeof agent);
    for (size_t i = 0; i < b->stalled.count; i++) {
        const cmr_stalled_call_t *s = &b->stalled.items[i];
        cmr_names_method(c->v->names, (uint64_t)s->method_id, method, sizeof method);
        trace[0] = '\0';
        if (s->trace_id.len == 16)
            cmr_hex(s->trace_id.data, 16, trace);
        json_t *stack = json_array();
        for (size_t f = 0; f + 8 <= s->stack.len; f += 8) {
            char frame[1024];
            cmr_names_method(c->v->names, cmr_be64(s->stack.data + f), frame, sizeof frame);
            json_array_append_new(stack, cmr_json_str(frame));
        }
        json_array_append_new(
            c->items, json_pack("{s:o, s:o, s:I, s:o, s:o, s:s, s:I, s:I, s:I, s:o}", "env", cmr_json_str(env),
                                "agent_name", cmr_json_str(agent), "thread_id", (json_int_t)s->thread_id, "thread",
                                cmr_json_str(s->thread_name), "method", cmr_json_str(method), "trace", trace,
                                "started_ms", (json_int_t)s->started_ms, "running_ms", (json_int_t)s->running_ms,
                                "reported_ms", (json_int_t)(b->interval_start_ms + b->interval_ms), "stack", stack));
        if (c->text)
            fprintf(c->text, "STALLED %8.1fs  %s  thread \"%s\"  in %s  (%zu frames)  trace %s\n",
                    (double)s->running_ms / 1000.0, agent, s->thread_name, method, s->stack.len / 8,
                    *trace ? trace : "-");
    }
    cmr_msg_free(&m);
    return 0;
}

static int q_stalled(cmr_metrics_view_t *v, const params_t *p, json_t *out, FILE *text)
{
    alerts_ctx_t c = {.v = v, .p = p, .items = json_array(), .text = text};
    for (size_t i = 0; i < v->n; i++)
        cmr_met_state_scan(v->stores[i], "s", 1, stalled_one, &c);
    if (text && json_array_size(c.items) == 0)
        fprintf(text, "no stalled calls reported\n");
    json_object_set_new(out, "stalled", c.items);
    return 0;
}

int cmr_metrics_query(cmr_metrics_view_t *v, const char *what, const char *const *keys, const char *const *values,
                      size_t n, char **json, FILE *text, char *err, size_t errlen)
{
    *json = NULL;
    params_t p;
    if (parse_params(keys, values, n, &p, err, errlen) != 0)
        return -1;
    json_t *out = json_pack("{s:s, s:I, s:I, s:s}", "query", what, "from_ms", (json_int_t)p.from_ms, "to_ms",
                            (json_int_t)p.to_ms, "stat", cmr_met_stat_name(p.stat));
    int rc;
    if (!strcmp(what, "top"))
        rc = q_top(v, &p, out, text);
    else if (!strcmp(what, "series"))
        rc = q_series(v, &p, out, text, err, errlen);
    else if (!strcmp(what, "jvms"))
        rc = q_jvms(v, &p, out, text, err, errlen);
    else if (!strcmp(what, "alerts"))
        rc = q_alerts(v, &p, out, text);
    else if (!strcmp(what, "stalled"))
        rc = q_stalled(v, &p, out, text);
    else {
        snprintf(err, errlen, "unknown query \"%s\" (top, series, jvms, alerts, stalled)", what);
        rc = -2;
    }
    if (rc == -1)
        snprintf(err, errlen, "cannot read the metrics store");
    if (rc == 0)
        *json = json_dumps(out, JSON_COMPACT);
    json_decref(out);
    return rc == 0 ? 0 : -1;
}

int cmr_metrics_cli(const char *root, const char *what, const char *const *keys, const char *const *values, size_t n,
                    bool as_json)
{
    char err[1024], *json;
    cmr_metrics_view_t *v = cmr_metrics_view_open(root, err, sizeof err);
    if (!v) {
        fprintf(stderr, "cmr-ingest: %s\n", err);
        return 1;
    }
    int rc = cmr_metrics_query(v, what, keys, values, n, &json, as_json ? NULL : stdout, err, sizeof err);
    cmr_metrics_view_free(v);
    if (rc != 0) {
        fprintf(stderr, "cmr-ingest: metrics %s: %s\n", what, err);
        return 2;
    }
    if (as_json)
        printf("%s\n", json);
    free(json);
    return 0;
}
