/*
 * cfg_doc.c - parses the environment file (YAML, format version 1; see cfg_doc.h and
 * docs/ENVIRONMENTS.md) with libyaml's document API, so that every node carries its line
 * for error messages. Unknown keys are errors (typos surface); every value is checked.
 *
 * Ownership: every string and array of the result comes from the document's pool
 * (cmr_cfg_pool_t: a list of allocations freed together by cmr_cfg_doc_free()).
 */
#include "cmr/cfg_doc.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "cmr/buf.h"
#include "cmr/clock.h"
#include "cmr/cfg_match.h"
#include "cmr/file.h"
#include "cmr/http_token.h"
#include "cmr/map.h"

/* The largest environment file read (16 MiB: 100,000 environments take about 8). */
#define CFG_FILE_MAX ((size_t)16 << 20)

struct cmr_cfg_pool {
    void **items;
    size_t n, cap;
};

typedef struct parse_ctx {
    yaml_document_t *ydoc;
    const char *origin;
    char *err;
    size_t errlen;
    cmr_cfg_doc_t *doc;
    cmr_cfg_pool_t paths; /* owned: node paths for messages, freed when the parse ends */
} parse_ctx_t;

/* --- pool --------------------------------------------------------------------------- */

static void *pool_alloc(cmr_cfg_pool_t *p, size_t size)
{
    if (CMR_ARRAY_GROW(p->items, p->cap, p->n + 1) != 0)
        return NULL;
    void *m = calloc(1, size ? size : 1);
    if (m)
        p->items[p->n++] = m;
    return m;
}

/* Frees the allocations of the pool (not the pool itself). */
static void pool_clear(cmr_cfg_pool_t *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->items[i]);
    free(p->items);
    memset(p, 0, sizeof *p);
}

static char *pool_strdup(cmr_cfg_pool_t *p, const char *s)
{
    size_t len = strlen(s);
    char *d = pool_alloc(p, len + 1);
    if (d)
        memcpy(d, s, len + 1);
    return d;
}

void cmr_cfg_doc_free(cmr_cfg_doc_t *doc)
{
    if (!doc || !doc->pool)
        return;
    pool_clear(doc->pool);
    free(doc->pool);
    memset(doc, 0, sizeof *doc);
}

/* --- names -------------------------------------------------------------------------- */

static const char *const sensor_names[] = {
    [CMR_SENSOR_TIMER] = "timer",
    [CMR_SENSOR_INVOCATION_SEQUENCE] = "invocation-sequence",
    [CMR_SENSOR_ANCHOR] = "anchor",
};

/* The name of enum value v in a table of n names, "?" when out of range. */
static const char *enum_name(const char *const *names, size_t n, int v)
{
    return v >= 0 && (size_t)v < n ? names[v] : "?";
}

/* The enum value named `name` in a table of n names, -1 when none. */
static int enum_parse(const char *const *names, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(name, names[i]) == 0)
            return (int)i;
    return -1;
}

#define N_NAMES(t) (sizeof(t) / sizeof(t)[0])

const char *cmr_cfg_sensor_name(cmr_sensor_kind_t k)
{
    return enum_name(sensor_names, N_NAMES(sensor_names), (int)k);
}

int cmr_cfg_sensor_parse(const char *name)
{
    return enum_parse(sensor_names, N_NAMES(sensor_names), name);
}

static const char *const trace_context_names[] = {
    [CMR_TRACE_CONTEXT_AUTHENTICATED] = "authenticated",
    [CMR_TRACE_CONTEXT_ANY] = "any",
    [CMR_TRACE_CONTEXT_NONE] = "none",
};

const char *cmr_cfg_trace_context_name(cmr_trace_context_policy_t p)
{
    return enum_name(trace_context_names, N_NAMES(trace_context_names), (int)p);
}

int cmr_cfg_trace_context_parse(const char *name)
{
    return enum_parse(trace_context_names, N_NAMES(trace_context_names), name);
}

static const struct {
    const char *name;
    int flag;
} modifiers[] = {
    {"public", 0x0001}, {"private", 0x0002},      {"protected", 0x0004}, {"static", 0x0008},
    {"final", 0x0010},  {"synchronized", 0x0020}, {"bridge", 0x0040},    {"varargs", 0x0080},
    {"native", 0x0100}, {"abstract", 0x0400},     {"strict", 0x0800},    {"synthetic", 0x1000},
};

int cmr_cfg_modifier_flag(const char *name)
{
    for (size_t i = 0; i < sizeof modifiers / sizeof modifiers[0]; i++)
        if (strcmp(name, modifiers[i].name) == 0)
            return modifiers[i].flag;
    return 0;
}

void cmr_cfg_modifiers_str(int flags, const char *neg, char *buf, size_t len)
{
    assert(len >= CMR_CFG_MODIFIERS_MAX && (!neg || strlen(neg) <= 1));
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof modifiers / sizeof modifiers[0]; i++) {
        if (!(flags & modifiers[i].flag))
            continue;
        int w = snprintf(buf + at, len - at, "%s%s%s", at ? ", " : "", neg ? neg : "", modifiers[i].name);
        assert(w >= 0 && (size_t)w < len - at); /* CMR_CFG_MODIFIERS_MAX holds them all */
        at += (size_t)w;
    }
}

void cmr_cfg_default_strategy(cmr_strategy_t *s)
{
    s->send_interval_ms = 1000;
    s->ring_records = 65536;
    s->max_batch_events = 4096;
    s->metric_interval_ms = 10000;
    s->max_threads = 1024;
    s->stall_threshold_ms = 10000;
    s->max_segment_events = 100000;
}

/* --- errors and node access --------------------------------------------------------- */

static int fail(parse_ctx_t *c, const yaml_node_t *node, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(parse_ctx_t *c, const yaml_node_t *node, const char *fmt, ...)
{
    cmr_buf_t msg = {0};
    if (node)
        cmr_buf_printf(&msg, "%s:%zu: ", c->origin, node->start_mark.line + 1);
    else
        cmr_buf_printf(&msg, "%s: ", c->origin);
    va_list ap;
    va_start(ap, fmt);
    cmr_buf_vprintf(&msg, fmt, ap);
    va_end(ap);
    /* a message: cut to the caller's buffer when longer (the caller chose its size) */
    (void)snprintf(c->err, c->errlen, "%s", cmr_buf_ok(&msg) ? cmr_buf_str(&msg) : "out of memory");
    cmr_buf_free(&msg);
    return -1;
}

/* The path of a node for messages ("environments[0].sensors[2].class"), whole whatever
 * its length; it lives until the parse ends. NULL when memory ran out. */
static const char *node_path(parse_ctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static const char *node_path(parse_ctx_t *c, const char *fmt, ...)
{
    cmr_buf_t b = {0};
    va_list ap;
    va_start(ap, fmt);
    cmr_buf_vprintf(&b, fmt, ap);
    va_end(ap);
    char *s = cmr_buf_take(&b);
    if (s && CMR_ARRAY_GROW(c->paths.items, c->paths.cap, c->paths.n + 1) == 0) {
        c->paths.items[c->paths.n++] = s;
        return s;
    }
    free(s);
    return NULL;
}

static int line_of(const yaml_node_t *n)
{
    return n ? (int)n->start_mark.line + 1 : 0;
}

static yaml_node_t *node_at(parse_ctx_t *c, int index)
{
    return yaml_document_get_node(c->ydoc, index);
}

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* One key of a mapping at `where`: its nodes, and the path of its value ("where.key") in
 * *w. NULL (error reported) when the key is not a plain name or memory ran out. */
static const char *pair_key(parse_ctx_t *c, const yaml_node_pair_t *p, const char *where, yaml_node_t **k,
                            yaml_node_t **v, const char **w)
{
    *k = node_at(c, p->key);
    *v = node_at(c, p->value);
    const char *key = scalar(*k);
    if (!key) {
        fail(c, *k, "%s: keys must be plain names", where);
        return NULL;
    }
    *w = node_path(c, "%s.%s", where, key);
    if (!*w) {
        fail(c, *k, "out of memory");
        return NULL;
    }
    return key;
}

static int want_scalar(parse_ctx_t *c, const yaml_node_t *n, const char *where, const char **out)
{
    const char *s = scalar(n);
    if (!s)
        return fail(c, n, "%s: expected a single value (a string or number)", where);
    *out = s;
    return 0;
}

static int want_string(parse_ctx_t *c, const yaml_node_t *n, const char *where, char **out)
{
    const char *s = NULL;
    if (want_scalar(c, n, where, &s) != 0)
        return -1;
    *out = pool_strdup(c->doc->pool, s);
    return *out ? 0 : fail(c, n, "out of memory");
}

/* A glob value: a string that fnmatch can match (cmr_cfg_glob_check). */
static int check_glob(parse_ctx_t *c, const yaml_node_t *n, const char *where, const char *pattern)
{
    char why[200];
    if (cmr_cfg_glob_check(pattern, why, sizeof why) != 0)
        return fail(c, n, "%s: glob \"%s\" can never match: %s", where, pattern, why);
    return 0;
}

static int want_int(parse_ctx_t *c, const yaml_node_t *n, const char *where, long min, long max, int32_t *out)
{
    const char *s = NULL;
    if (want_scalar(c, n, where, &s) != 0)
        return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end)
        return fail(c, n, "%s: \"%s\" is not an integer", where, s);
    if (v < min || v > max)
        return fail(c, n, "%s: %ld is outside %ld..%ld", where, v, min, max);
    *out = (int32_t)v;
    return 0;
}

static int want_bool(parse_ctx_t *c, const yaml_node_t *n, const char *where, bool *out)
{
    const char *s = NULL;
    if (want_scalar(c, n, where, &s) != 0)
        return -1;
    if (!strcmp(s, "true") || !strcmp(s, "yes") || !strcmp(s, "on"))
        *out = true;
    else if (!strcmp(s, "false") || !strcmp(s, "no") || !strcmp(s, "off"))
        *out = false;
    else
        return fail(c, n, "%s: \"%s\" is not a boolean (true or false)", where, s);
    return 0;
}

static int want_mapping(parse_ctx_t *c, const yaml_node_t *n, const char *where)
{
    if (!n || n->type != YAML_MAPPING_NODE)
        return fail(c, n, "%s: expected a mapping (key: value lines)", where);
    return 0;
}

static int want_sequence(parse_ctx_t *c, const yaml_node_t *n, const char *where)
{
    if (!n || n->type != YAML_SEQUENCE_NODE)
        return fail(c, n, "%s: expected a list (\"- \" items)", where);
    return 0;
}

static size_t seq_len(const yaml_node_t *n)
{
    return (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
}

/* Identifiers: environment ids are topic keys and file names. */
static int valid_id(const char *s)
{
    if (!*s || strlen(s) > 64 || strcmp(s, "mappings") == 0)
        return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
              *p == '_' || *p == '.'))
            return 0;
    return 1;
}

/* Java names may be written with dots; the CMR works with internal names (slashes). */
static void to_internal(char *s)
{
    for (; *s; s++)
        if (*s == '.')
            *s = '/';
}

/* --- sensor assignments ------------------------------------------------------------- */

static int parse_modifiers(parse_ctx_t *c, const yaml_node_t *n, const char *where, int32_t *req, int32_t *excl)
{
    if (want_sequence(c, n, where) != 0)
        return -1;
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
        yaml_node_t *m = node_at(c, *it);
        const char *s = NULL;
        if (want_scalar(c, m, where, &s) != 0)
            return -1;
        int neg = s[0] == '!';
        int flag = cmr_cfg_modifier_flag(s + neg);
        if (!flag)
            return fail(c, m,
                        "%s: unknown modifier \"%s\" (public, private, protected, static, final, "
                        "synchronized, bridge, varargs, native, abstract, strict, synthetic; '!' negates)",
                        where, s);
        if ((neg ? *req : *excl) & flag)
            return fail(c, m, "%s: modifier %s is both required and excluded", where, s + neg);
        *(neg ? excl : req) |= flag;
    }
    return 0;
}

static int parse_assignment(parse_ctx_t *c, const yaml_node_t *n, const char *where, cmr_sensor_assignment_t *a)
{
    if (want_mapping(c, n, where) != 0)
        return -1;
    int have_sensor = 0, have_class = 0;
    a->method_pattern = pool_strdup(c->doc->pool, "*");
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k, *v;
        const char *w, *key = pair_key(c, p, where, &k, &v, &w);
        if (!key)
            return -1;
        if (!strcmp(key, "sensor")) {
            const char *s = NULL;
            if (want_scalar(c, v, w, &s) != 0)
                return -1;
            int kind = cmr_cfg_sensor_parse(s);
            if (kind < 0)
                return fail(c, v, "%s: unknown sensor \"%s\" (timer, invocation-sequence, anchor)", w, s);
            a->sensor = (cmr_sensor_kind_t)kind;
            have_sensor = 1;
        } else if (!strcmp(key, "class")) {
            if (want_string(c, v, w, &a->class_pattern) != 0)
                return -1;
            to_internal(a->class_pattern);
            if (check_glob(c, v, w, a->class_pattern) != 0)
                return -1;
            have_class = 1;
        } else if (!strcmp(key, "superclass") || !strcmp(key, "interface") || !strcmp(key, "annotation")) {
            char **dst = key[0] == 's' ? &a->superclass : key[0] == 'i' ? &a->interface : &a->annotation;
            if (want_string(c, v, w, dst) != 0)
                return -1;
            if (!**dst)
                return fail(c, v, "%s: empty name", w);
            to_internal(*dst);
        } else if (!strcmp(key, "method")) {
            if (want_string(c, v, w, &a->method_pattern) != 0 || check_glob(c, v, w, a->method_pattern) != 0)
                return -1;
        } else if (!strcmp(key, "descriptor")) {
            if (want_string(c, v, w, &a->descriptor_pattern) != 0)
                return -1;
            if (a->descriptor_pattern[0] != '(' && a->descriptor_pattern[0] != '*')
                return fail(c, v, "%s: a method descriptor starts with '(' (e.g. \"(Ljava/lang/String;)V\")", w);
            if (check_glob(c, v, w, a->descriptor_pattern) != 0)
                return -1;
        } else if (!strcmp(key, "modifiers")) {
            if (parse_modifiers(c, v, w, &a->modifiers_required, &a->modifiers_excluded) != 0)
                return -1;
        } else if (!strcmp(key, "constructors")) {
            if (want_bool(c, v, w, &a->constructors) != 0)
                return -1;
        } else if (!strcmp(key, "trivial")) {
            if (want_bool(c, v, w, &a->trivial) != 0)
                return -1;
        } else {
            return fail(c, k,
                        "%s: unknown key \"%s\" (sensor, class, superclass, interface, annotation, method, "
                        "descriptor, modifiers, constructors, trivial)",
                        where, key);
        }
    }
    if (!have_sensor)
        return fail(c, n, "%s: missing \"sensor\"", where);
    if (!have_class)
        return fail(c, n, "%s: missing \"class\" (use \"*\" with superclass/interface/annotation)", where);
    return a->method_pattern ? 0 : fail(c, n, "out of memory");
}

/* --- environments ------------------------------------------------------------------- */

static int parse_strategy(parse_ctx_t *c, const yaml_node_t *n, const char *where, cmr_strategy_t *s)
{
    if (want_mapping(c, n, where) != 0)
        return -1;
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k, *v;
        const char *w, *key = pair_key(c, p, where, &k, &v, &w);
        if (!key)
            return -1;
        int rc;
        if (!strcmp(key, "send_interval_ms"))
            rc = want_int(c, v, w, 10, 3600000, &s->send_interval_ms);
        else if (!strcmp(key, "ring_records"))
            rc = want_int(c, v, w, 64, 1 << 24, &s->ring_records);
        else if (!strcmp(key, "max_batch_events"))
            rc = want_int(c, v, w, 1, 1 << 20, &s->max_batch_events);
        else if (!strcmp(key, "metric_interval_ms"))
            rc = want_int(c, v, w, 100, 3600000, &s->metric_interval_ms);
        else if (!strcmp(key, "max_threads"))
            rc = want_int(c, v, w, 1, 1 << 20, &s->max_threads);
        else if (!strcmp(key, "stall_threshold_ms"))
            rc = want_int(c, v, w, 0, 86400000, &s->stall_threshold_ms);
        else if (!strcmp(key, "max_segment_events"))
            rc = want_int(c, v, w, 100, 1 << 30, &s->max_segment_events);
        else
            return fail(c, k,
                        "%s: unknown key \"%s\" (send_interval_ms, ring_records, max_batch_events, "
                        "metric_interval_ms, max_threads, stall_threshold_ms, max_segment_events)",
                        where, key);
        if (rc != 0)
            return -1;
    }
    return 0;
}

static int parse_sensors(parse_ctx_t *c, const yaml_node_t *n, const char *where, cmr_environment_t *env)
{
    if (want_sequence(c, n, where) != 0)
        return -1;
    size_t count = seq_len(n);
    env->assignments.items = pool_alloc(c->doc->pool, count * sizeof *env->assignments.items);
    if (!env->assignments.items)
        return fail(c, n, "out of memory");
    for (size_t i = 0; i < count; i++) {
        const char *w = node_path(c, "%s[%zu]", where, i);
        if (!w)
            return fail(c, n, "out of memory");
        if (parse_assignment(c, node_at(c, n->data.sequence.items.start[i]), w, &env->assignments.items[i]) != 0)
            return -1;
    }
    env->assignments.count = count;
    return 0;
}

/* --- threshold rules (docs/METRICS.md, "Thresholds") ------------------------------------ */

/* A duration: an integer of milliseconds, or a number with a unit (ms, s, m, h). */
static int want_duration_ms(parse_ctx_t *c, const yaml_node_t *n, const char *where, int64_t min, int64_t *out)
{
    const char *s = NULL;
    if (want_scalar(c, n, where, &s) != 0)
        return -1;
    int64_t ms;
    if (cmr_duration_parse_ms(s, &ms) != 0)
        return fail(c, n, "%s: \"%s\" is not a duration (e.g. 500ms, 30s, 5m, 1h, or milliseconds)", where, s);
    if (ms < min || ms > 30LL * 86400000)
        return fail(c, n, "%s: %s is outside %" PRId64 "ms..30 days", where, s, min);
    *out = ms;
    return 0;
}

/* The limit of a rule: a duration for latencies (stored in ms), a fraction or a
 * percentage for error_rate, a count for stalled and count. */
static int want_limit(parse_ctx_t *c, const yaml_node_t *n, const char *where, cmr_threshold_statistic_t stat,
                      double *out)
{
    const char *s = NULL;
    if (want_scalar(c, n, where, &s) != 0)
        return -1;
    if (cmr_stat_is_latency(stat)) {
        int64_t ms;
        if (want_duration_ms(c, n, where, 0, &ms) != 0)
            return -1;
        *out = (double)ms;
        return 0;
    }
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    bool pct = stat == CMR_STAT_ERROR_RATE && !strcmp(end, "%");
    if (errno || end == s || (*end && !pct) || !(v >= 0))
        return fail(c, n, "%s: \"%s\" is not a %s", where, s,
                    stat == CMR_STAT_ERROR_RATE ? "rate (0.05 or 5%)" : "number of calls");
    if (pct)
        v /= 100;
    if (stat == CMR_STAT_ERROR_RATE && v > 1)
        return fail(c, n, "%s: an error rate is at most 1 (100%%)", where);
    *out = v;
    return 0;
}

static int parse_threshold(parse_ctx_t *c, const yaml_node_t *n, const char *where, cmr_threshold_rule_t *r)
{
    if (want_mapping(c, n, where) != 0)
        return -1;
    const yaml_node_t *above = NULL;
    const char *above_where = NULL;
    bool have_stat = false, have_for = false;
    r->min_count = 1;
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k, *v;
        const char *w, *key = pair_key(c, p, where, &k, &v, &w);
        if (!key)
            return -1;
        int rc = 0;
        if (!strcmp(key, "name")) {
            rc = want_string(c, v, w, &r->name);
        } else if (!strcmp(key, "transaction") || !strcmp(key, "method")) {
            if (r->pattern)
                return fail(c, k, "%s: a rule watches either transactions or methods, not both", where);
            r->scope = key[0] == 't' ? CMR_THRESHOLD_TRANSACTION : CMR_THRESHOLD_METHOD;
            rc = want_string(c, v, w, &r->pattern) == 0 ? check_glob(c, v, w, r->pattern) : -1;
        } else if (!strcmp(key, "statistic")) {
            const char *s = NULL;
            if (want_scalar(c, v, w, &s) != 0)
                return -1;
            int stat = cmr_stat_parse(s);
            if (stat < 0)
                return fail(c, v,
                            "%s: unknown statistic \"%s\" (p50, p90, p95, p99, p99.9, max, mean, error_rate, "
                            "stalled, count)",
                            w, s);
            r->statistic = (cmr_threshold_statistic_t)stat;
            have_stat = true;
        } else if (!strcmp(key, "above")) {
            above = v; /* read once the statistic, which gives its unit, is known */
            above_where = w;
        } else if (!strcmp(key, "for")) {
            rc = want_duration_ms(c, v, w, 1000, &r->for_ms);
            have_for = true;
        } else if (!strcmp(key, "min_count")) {
            int32_t mc;
            rc = want_int(c, v, w, 1, 1 << 30, &mc);
            r->min_count = mc;
        } else if (!strcmp(key, "diagnose")) {
            rc = want_bool(c, v, w, &r->diagnose);
        } else {
            return fail(c, k,
                        "%s: unknown key \"%s\" (name, transaction, method, statistic, above, for, min_count, "
                        "diagnose)",
                        where, key);
        }
        if (rc != 0)
            return -1;
    }
    if (!r->name)
        return fail(c, n, "%s: missing \"name\"", where);
    if (!*r->name || strlen(r->name) > 128)
        return fail(c, n, "%s: a rule's name is 1 to 128 bytes", where);
    if (!r->pattern)
        return fail(c, n, "%s: missing \"transaction\" or \"method\" (a glob on its name, \"*\" for all)", where);
    if (!have_stat)
        return fail(c, n, "%s: missing \"statistic\"", where);
    if (!above)
        return fail(c, n, "%s: missing \"above\"", where);
    if (want_limit(c, above, above_where, r->statistic, &r->above) != 0)
        return -1;
    if (!have_for)
        r->for_ms = 60000;
    return 0;
}

static int parse_thresholds(parse_ctx_t *c, const yaml_node_t *n, const char *where, cmr_environment_t *env)
{
    if (want_sequence(c, n, where) != 0)
        return -1;
    size_t count = seq_len(n);
    env->thresholds.items = pool_alloc(c->doc->pool, count * sizeof *env->thresholds.items);
    if (count && !env->thresholds.items)
        return fail(c, n, "out of memory");
    memset(env->thresholds.items, 0, count * sizeof *env->thresholds.items);
    for (size_t i = 0; i < count; i++) {
        const char *w = node_path(c, "%s[%zu]", where, i);
        if (!w)
            return fail(c, n, "out of memory");
        const yaml_node_t *item = node_at(c, n->data.sequence.items.start[i]);
        if (parse_threshold(c, item, w, &env->thresholds.items[i]) != 0)
            return -1;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(env->thresholds.items[j].name, env->thresholds.items[i].name))
                return fail(c, item, "%s: rule \"%s\" is defined twice", w, env->thresholds.items[i].name);
    }
    env->thresholds.count = count;
    return 0;
}

/* trace_context: authenticated | any | none (docs/SECURITY.md, "Trace context"). */
static int parse_trace_context(parse_ctx_t *c, const yaml_node_t *v, const char *where, cmr_trace_context_policy_t *out)
{
    const char *s = NULL;
    if (want_scalar(c, v, where, &s) != 0)
        return -1;
    int policy = cmr_cfg_trace_context_parse(s);
    if (policy < 0)
        return fail(c, v, "%s: unknown trace-context policy \"%s\" (authenticated, any, none)", where, s);
    *out = (cmr_trace_context_policy_t)policy;
    return 0;
}

/* request_headers: [name, ...]: the incoming request headers an entry trace keeps. Names
 * are RFC 9110 tokens (kept lower-case), at most CMR_MAX_REQUEST_HEADERS of them, each
 * at most 64 bytes, once; headers that carry credentials are refused: a trace store is no
 * place for them. */
static int parse_request_headers(parse_ctx_t *c, const yaml_node_t *n, const char *where, cmr_environment_t *env)
{
    static const char *const credentials[] = {"authorization", "proxy-authorization", "cookie", "set-cookie"};
    if (want_sequence(c, n, where) != 0)
        return -1;
    size_t count = seq_len(n);
    if (count > CMR_MAX_REQUEST_HEADERS)
        return fail(c, n, "%s: %zu headers, at most %d", where, count, CMR_MAX_REQUEST_HEADERS);
    env->request_headers.items = pool_alloc(c->doc->pool, (count ? count : 1) * sizeof *env->request_headers.items);
    if (!env->request_headers.items)
        return fail(c, n, "out of memory");
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *item = node_at(c, n->data.sequence.items.start[i]);
        const char *w = node_path(c, "%s[%zu]", where, i), *s = NULL;
        if (!w)
            return fail(c, n, "out of memory");
        if (want_scalar(c, item, w, &s) != 0)
            return -1;
        size_t len = strlen(s);
        if (len == 0 || len > 64)
            return fail(c, item, "%s: a header name is 1 to 64 bytes", w);
        char *name = pool_strdup(c->doc->pool, s);
        if (!name)
            return fail(c, item, "out of memory");
        for (size_t k = 0; k < len; k++) {
            unsigned char ch = (unsigned char)name[k];
            if (!cmr_http_tchar(ch))
                return fail(c, item, "%s: \"%s\" is not a header name (an RFC 9110 token)", w, s);
            name[k] = (char)tolower(ch);
        }
        for (size_t k = 0; k < sizeof credentials / sizeof credentials[0]; k++)
            if (!strcmp(name, credentials[k]))
                return fail(c, item, "%s: \"%s\" carries credentials: its values are never kept", w, s);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(env->request_headers.items[j], name))
                return fail(c, item, "%s: \"%s\" is listed twice", w, s);
        env->request_headers.items[i] = name;
        env->request_headers.count = i + 1;
    }
    return 0;
}

/* overhead_budget_pct: 3, 2.5 or "0.5%": the share of each JVM's CPU time its monitoring
 * may cost (0 < pct <= 100), or 0: the budget is off in this environment
 * (CMR_BUDGET_OFF on the wire; absent: cmr-instrumenter's instrumenter.budget.pct). */
static int want_budget_pct(parse_ctx_t *c, const yaml_node_t *n, const char *where, double *out)
{
    const char *s = NULL;
    if (want_scalar(c, n, where, &s) != 0)
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || (*end && strcmp(end, "%") != 0) || !(v >= 0 && v <= 100))
        return fail(c, n, "%s: \"%s\" is not a percentage of CPU time from 0 (off) to 100", where, s);
    *out = v > 0 ? v : CMR_BUDGET_OFF;
    return 0;
}

static int parse_env(parse_ctx_t *c, const yaml_node_t *n, const char *where, cmr_environment_t *env)
{
    if (want_mapping(c, n, where) != 0)
        return -1;
    cmr_cfg_default_strategy(&env->strategy);
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k, *v;
        const char *w, *key = pair_key(c, p, where, &k, &v, &w);
        if (!key)
            return -1;
        int rc;
        if (!strcmp(key, "id"))
            rc = want_string(c, v, w, &env->id);
        else if (!strcmp(key, "name"))
            rc = want_string(c, v, w, &env->name);
        else if (!strcmp(key, "description"))
            rc = want_string(c, v, w, &env->description);
        else if (!strcmp(key, "sensors"))
            rc = parse_sensors(c, v, w, env);
        else if (!strcmp(key, "strategy"))
            rc = parse_strategy(c, v, w, &env->strategy);
        else if (!strcmp(key, "trace_context"))
            rc = parse_trace_context(c, v, w, &env->trace_context);
        else if (!strcmp(key, "thresholds"))
            rc = parse_thresholds(c, v, w, env);
        else if (!strcmp(key, "request_headers"))
            rc = parse_request_headers(c, v, w, env);
        else if (!strcmp(key, "overhead_budget_pct"))
            rc = want_budget_pct(c, v, w, &env->overhead_budget_pct);
        else
            return fail(c, k,
                        "%s: unknown key \"%s\" (id, name, description, sensors, strategy, trace_context, "
                        "thresholds, request_headers, overhead_budget_pct)",
                        where, key);
        if (rc != 0)
            return -1;
        if (!strcmp(key, "id") && !valid_id(env->id))
            return fail(c, v, "%s: \"%s\" is not a valid environment id (1-64 of A-Z a-z 0-9 - _ ., not \"mappings\")",
                        w, env->id);
    }
    if (!env->id)
        return fail(c, n, "%s: missing \"id\"", where);
    if (!env->name)
        env->name = env->id;
    if (!env->description)
        env->description = pool_strdup(c->doc->pool, "");
    return env->description ? 0 : fail(c, n, "out of memory");
}

static int parse_envs(parse_ctx_t *c, const yaml_node_t *n)
{
    if (want_sequence(c, n, "environments") != 0)
        return -1;
    size_t count = seq_len(n);
    cmr_cfg_doc_t *d = c->doc;
    d->envs = pool_alloc(d->pool, count * sizeof *d->envs);
    d->env_lines = pool_alloc(d->pool, count * sizeof *d->env_lines);
    if (!d->envs || !d->env_lines)
        return fail(c, n, "out of memory");
    cmr_map_t seen = {0}; /* environment id -> its index + 1 */
    int rc = 0;
    for (size_t i = 0; i < count && rc == 0; i++) {
        yaml_node_t *e = node_at(c, n->data.sequence.items.start[i]);
        const char *w = node_path(c, "environments[%zu]", i);
        if (!w)
            return fail(c, e, "out of memory");
        rc = parse_env(c, e, w, &d->envs[i]);
        if (rc != 0)
            break;
        d->env_lines[i] = line_of(e);
        bool created;
        void **slot = cmr_map_get_slot(&seen, d->envs[i].id, strlen(d->envs[i].id), &created);
        if (!slot)
            rc = fail(c, e, "out of memory");
        else if (!created)
            rc = fail(c, e, "%s: environment \"%s\" is defined twice (first at line %d)", w, d->envs[i].id,
                      d->env_lines[(uintptr_t)*slot - 1]);
        else
            *slot = (void *)(uintptr_t)(i + 1);
        d->n_envs = i + 1;
    }
    cmr_map_free(&seen);
    return rc;
}

/* --- mappings ----------------------------------------------------------------------- */

static int parse_mapping(parse_ctx_t *c, const yaml_node_t *n, const char *where, cmr_agent_mapping_t *m)
{
    if (want_mapping(c, n, where) != 0)
        return -1;
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k, *v;
        const char *w, *key = pair_key(c, p, where, &k, &v, &w);
        if (!key)
            return -1;
        int rc;
        if (!strcmp(key, "agent"))
            rc = want_string(c, v, w, &m->agent_pattern) == 0 ? check_glob(c, v, w, m->agent_pattern) : -1;
        else if (!strcmp(key, "address"))
            rc = want_string(c, v, w, &m->address);
        else if (!strcmp(key, "environment"))
            rc = want_string(c, v, w, &m->environment_id);
        else
            return fail(c, k, "%s: unknown key \"%s\" (agent, address, environment)", where, key);
        if (rc != 0)
            return -1;
        if (!strcmp(key, "address")) {
            cmr_cfg_addr_t a;
            char why[200];
            if (cmr_cfg_addr_parse(m->address, &a, why, sizeof why) != 0)
                return fail(c, v, "%s: %s", w, why);
        }
    }
    if (!m->environment_id)
        return fail(c, n, "%s: missing \"environment\"", where);
    if (!m->agent_pattern)
        m->agent_pattern = pool_strdup(c->doc->pool, "*");
    if (!m->address)
        m->address = pool_strdup(c->doc->pool, "*");
    return m->agent_pattern && m->address ? 0 : fail(c, n, "out of memory");
}

static int parse_mappings(parse_ctx_t *c, const yaml_node_t *n)
{
    cmr_cfg_doc_t *d = c->doc;
    d->has_mappings = true;
    if (n->type == YAML_SCALAR_NODE && (!strcmp(scalar(n), "") || !strcmp(scalar(n), "[]")))
        return 0;
    if (want_sequence(c, n, "mappings") != 0)
        return -1;
    size_t count = seq_len(n);
    d->mappings = pool_alloc(d->pool, count * sizeof *d->mappings);
    d->mapping_lines = pool_alloc(d->pool, count * sizeof *d->mapping_lines);
    if (!d->mappings || !d->mapping_lines)
        return fail(c, n, "out of memory");
    for (size_t i = 0; i < count; i++) {
        yaml_node_t *m = node_at(c, n->data.sequence.items.start[i]);
        const char *w = node_path(c, "mappings[%zu]", i);
        if (!w)
            return fail(c, m, "out of memory");
        if (parse_mapping(c, m, w, &d->mappings[i]) != 0)
            return -1;
        d->mapping_lines[i] = line_of(m);
        d->n_mappings = i + 1;
    }
    return 0;
}

/* --- the document ------------------------------------------------------------------- */

/* Is this an environment file at all? Until the top level is a mapping with "version: 1",
 * the file may be anything the user mistyped a path to (a password database parses as YAML
 * too), so no message quotes a word of it. */
static int check_format(parse_ctx_t *c)
{
    yaml_node_t *root = yaml_document_get_root_node(c->ydoc);
    if (!root)
        return fail(c, NULL, "empty file: expected \"version: %d\" and \"environments:\"", CMR_CFG_FORMAT_VERSION);
    if (root->type != YAML_MAPPING_NODE)
        return fail(c, root, "not an environment file: the top level is not a mapping (key: value lines)");
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        const char *key = scalar(node_at(c, p->key));
        if (!key || strcmp(key, "version") != 0)
            continue;
        yaml_node_t *v = node_at(c, p->value);
        const char *val = scalar(v);
        char *end = NULL;
        long ver = val ? strtol(val, &end, 10) : 0;
        if (!val || end == val || *end || ver < 1)
            return fail(c, v, "version: not a format version number (this cmr-config reads version %d)",
                        CMR_CFG_FORMAT_VERSION);
        if (ver != CMR_CFG_FORMAT_VERSION)
            return fail(c, v, "version: this cmr-config reads format version %d, the file has %ld",
                        CMR_CFG_FORMAT_VERSION, ver);
        return 0;
    }
    return fail(c, root, "top level: missing \"version: %d\" (not an environment file?)", CMR_CFG_FORMAT_VERSION);
}

/* Every mapping of the document, at any depth, names each key once: YAML says keys are
 * unique, and libyaml keeps both, so "id: a" then "id: b" would silently mean b. */
static int check_duplicate_keys(parse_ctx_t *c)
{
    cmr_map_t keys = {0}; /* key -> line + 1, one mapping at a time */
    int rc = 0;
    for (yaml_node_t *n = c->ydoc->nodes.start; n < c->ydoc->nodes.top && rc == 0; n++) {
        if (n->type != YAML_MAPPING_NODE)
            continue;
        cmr_map_clear(&keys);
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top && rc == 0; p++) {
            yaml_node_t *k = node_at(c, p->key);
            const char *key = scalar(k);
            if (!key)
                continue; /* refused where the mapping is read */
            bool created;
            void **slot = cmr_map_get_slot(&keys, key, k->data.scalar.length, &created);
            if (!slot)
                rc = fail(c, k, "out of memory");
            else if (!created)
                rc = fail(c, k, "key \"%s\" appears twice in the same mapping (first at line %d)", key,
                          (int)(uintptr_t)*slot - 1);
            else
                *slot = (void *)(uintptr_t)(line_of(k) + 1);
        }
    }
    cmr_map_free(&keys);
    return rc;
}

/* The file holds one YAML document: a second one ("---" and more) would be ignored. */
static int check_single_document(yaml_parser_t *parser, const char *origin, char *err, size_t errlen)
{
    yaml_document_t next;
    if (!yaml_parser_load(parser, &next)) {
        snprintf(err, errlen, "%s:%zu: YAML syntax: %s%s%s", origin, parser->problem_mark.line + 1,
                 parser->problem ? parser->problem : "unreadable", parser->context ? " " : "",
                 parser->context ? parser->context : "");
        return -1;
    }
    yaml_node_t *root = yaml_document_get_root_node(&next);
    int rc = 0;
    if (root) {
        snprintf(err, errlen,
                 "%s:%zu: a second YAML document starts here: an environment file holds one document (remove the "
                 "\"---\" and merge the lists)",
                 origin, next.start_mark.line + 1);
        rc = -1;
    }
    yaml_document_delete(&next);
    return rc;
}

static int parse_root(parse_ctx_t *c)
{
    yaml_node_t *root = yaml_document_get_root_node(c->ydoc);
    if (!root)
        return fail(c, NULL, "empty file: expected \"version: 1\" and \"environments:\"");
    if (want_mapping(c, root, "top level") != 0)
        return -1;
    int version = 0;
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node_at(c, p->key), *v = node_at(c, p->value);
        const char *key = scalar(k);
        if (!key)
            return fail(c, k, "top level: keys must be plain names");
        if (!strcmp(key, "version")) {
            int32_t ver;
            if (want_int(c, v, "version", 1, 1000, &ver) != 0)
                return -1;
            if (ver != CMR_CFG_FORMAT_VERSION)
                return fail(c, v, "version: this cmr-config reads format version %d, the file has %d",
                            CMR_CFG_FORMAT_VERSION, ver);
            version = ver;
        } else if (!strcmp(key, "environments")) {
            if (parse_envs(c, v) != 0)
                return -1;
        } else if (!strcmp(key, "mappings")) {
            if (parse_mappings(c, v) != 0)
                return -1;
        } else {
            return fail(c, k, "top level: unknown key \"%s\" (version, environments, mappings)", key);
        }
    }
    if (!version)
        return fail(c, root, "top level: missing \"version: %d\"", CMR_CFG_FORMAT_VERSION);
    return 0;
}

int cmr_cfg_doc_parse(const char *text, size_t len, const char *origin, cmr_cfg_doc_t *doc, char *err, size_t errlen)
{
    memset(doc, 0, sizeof *doc);
    doc->pool = calloc(1, sizeof *doc->pool);
    if (!doc->pool) {
        snprintf(err, errlen, "%s: out of memory", origin);
        return -1;
    }
    yaml_parser_t parser;
    yaml_document_t ydoc;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int rc;
    if (!yaml_parser_load(&parser, &ydoc)) {
        snprintf(err, errlen, "%s:%zu: YAML syntax: %s%s%s", origin, parser.problem_mark.line + 1,
                 parser.problem ? parser.problem : "unreadable", parser.context ? " " : "",
                 parser.context ? parser.context : "");
        rc = -1;
    } else {
        parse_ctx_t c = {&ydoc, origin, err, errlen, doc, {0}};
        rc = check_format(&c);
        if (rc == 0)
            rc = check_duplicate_keys(&c);
        if (rc == 0)
            rc = parse_root(&c);
        pool_clear(&c.paths);
        yaml_document_delete(&ydoc);
        if (rc == 0)
            rc = check_single_document(&parser, origin, err, errlen);
    }
    yaml_parser_delete(&parser);
    if (rc != 0)
        cmr_cfg_doc_free(doc);
    return rc;
}

/* Standard input, read whole up to CFG_FILE_MAX bytes (cmr_file_read takes regular files
 * only; a pipe is what the user gave us here). */
static int read_stdin(cmr_buf_t *buf, char *err, size_t errlen)
{
    for (;;) {
        if (buf->len > CFG_FILE_MAX) {
            snprintf(err, errlen, "-: standard input is larger than %zu bytes", CFG_FILE_MAX);
            return -1;
        }
        if (!cmr_buf_reserve(buf, 65536)) {
            snprintf(err, errlen, "-: out of memory");
            return -1;
        }
        size_t got = fread(buf->data + buf->len, 1, buf->cap - buf->len - 1, stdin);
        buf->len += got;
        buf->data[buf->len] = 0;
        if (got == 0)
            break;
    }
    if (ferror(stdin)) {
        snprintf(err, errlen, "-: cannot read standard input: %s", strerror(errno));
        return -1;
    }
    return 0;
}

int cmr_cfg_doc_load(const char *path, cmr_cfg_doc_t *doc, char *err, size_t errlen)
{
    memset(doc, 0, sizeof *doc);
    cmr_buf_t buf = {0};
    int rc =
        strcmp(path, "-") == 0 ? read_stdin(&buf, err, errlen) : cmr_file_read(path, CFG_FILE_MAX, &buf, err, errlen);
    if (rc == 0)
        rc = cmr_cfg_doc_parse(buf.len ? (const char *)buf.data : "", buf.len, path, doc, err, errlen);
    cmr_buf_free(&buf);
    return rc;
}
