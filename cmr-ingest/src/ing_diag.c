/*
 * ing_diag.c - the report of a diagnosis (docs/DIAGNOSIS.md, "Report"): the traces whose
 * batches carried its id (EventBatch.diagnosis_id, indexed in idx_diagnosis), and, over
 * the call trees of those traces, per method: calls, traces, total and self time, and the
 * p50 / p95 / p99 / max of its calls' durations (cmr/histogram.h).
 *
 * The traces may be narrowed by their transaction data (the root's http method, path and
 * status: cmr_http_filter_t), so that a diagnosis' conditions, http.status=5* say, can be
 * applied to its report; `found` then counts the tagged traces that match.
 *
 * The statistics cover the whole tree of every tagged trace (the callees recorded for the
 * diagnosis and the calls around them). A recursive method's total time counts each
 * level; a call still running counts with the time up to the latest event of its segment,
 * as the tree shows it. The trees are built by cmr_ingest_view_tree, one at a time.
 *
 * Used by `cmr-ingest diagnosis ID` (main.c) and GET /api/diagnoses/ID (ing_http.c);
 * rendering is in ing_print.c.
 *
 * Ownership: a report owns its trace list, its method array and their histograms;
 * cmr_diag_report_free() releases them.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/bytes.h"
#include "cmr/ids.h"
#include "cmr/ingest.h"
#include "cmr/map.h"

int cmr_ingest_parse_diagnosis_id(const char *s, uint64_t *id)
{
    if (!s || cmr_id64_parse(s, strlen(s), id) != 0)
        return -1;
    return *id ? 0 : -1;
}

void cmr_diag_report_free(cmr_diag_report_t *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->nmethods; i++)
        cmr_hist_free(&r->methods[i].durations);
    free(r->methods);
    free(r->traces);
    memset(r, 0, sizeof *r);
}

typedef struct diag_acc {
    cmr_diag_report_t *r;
    size_t cap;         /* of r->methods */
    cmr_u64map_t index; /* method id -> position + 1 in r->methods */
    size_t *last_trace; /* per method: the trace (position + 1) that counted it last */
    size_t last_cap;
} diag_acc_t;

/* Adds one call of a tree to its method's statistics. 0, or -1 when memory ran out. */
static int add_call(diag_acc_t *a, const cmr_tree_node_t *x, size_t trace_no)
{
    bool created;
    void **slot = cmr_u64map_get_slot(&a->index, x->method_id, &created);
    if (!slot)
        return -1;
    cmr_diag_report_t *r = a->r;
    size_t i;
    if (created) {
        if (CMR_ARRAY_GROW(r->methods, a->cap, r->nmethods + 1) != 0 ||
            CMR_ARRAY_GROW(a->last_trace, a->last_cap, r->nmethods + 1) != 0) {
            cmr_u64map_del(&a->index, x->method_id, NULL);
            return -1;
        }
        i = r->nmethods++;
        memset(&r->methods[i], 0, sizeof r->methods[i]);
        r->methods[i].method_id = x->method_id;
        a->last_trace[i] = 0;
        *slot = (void *)(uintptr_t)(i + 1);
    } else {
        i = (size_t)(uintptr_t)*slot - 1;
    }
    cmr_diag_method_t *m = &r->methods[i];
    int64_t total = x->total_ns > 0 ? x->total_ns : 0;
    if (cmr_hist_record(&m->durations, (uint64_t)total, 1) != 0)
        return -1;
    m->calls++;
    m->total_ns += total;
    m->self_ns += x->self_ns > 0 ? x->self_ns : 0;
    if (a->last_trace[i] != trace_no) {
        a->last_trace[i] = trace_no;
        m->traces++;
    }
    return 0;
}

static int by_total(const void *pa, const void *pb)
{
    const cmr_diag_method_t *a = pa, *b = pb;
    if (a->total_ns != b->total_ns)
        return a->total_ns > b->total_ns ? -1 : 1;
    return a->method_id < b->method_id ? -1 : a->method_id > b->method_id;
}

int cmr_ingest_view_diagnosis(cmr_ingest_view_t *v, uint64_t diagnosis, const cmr_http_filter_t *http, size_t limit,
                              cmr_diag_report_t *out)
{
    memset(out, 0, sizeof *out);
    out->diagnosis_id = diagnosis;
    if (http)
        out->http = *http;
    out->limit = limit ? limit : CMR_DIAG_DEFAULT_LIMIT;
    long n = cmr_ingest_view_diagnosis_traces(v, diagnosis, http, out->limit, &out->traces, &out->found);
    if (n < 0)
        return -1;
    out->ntraces = (size_t)n;
    diag_acc_t a = {.r = out};
    int rc = 0;
    for (size_t k = 0; k < out->ntraces && rc == 0; k++) {
        cmr_tree_t t;
        int r = cmr_ingest_view_tree(v, out->traces[k].trace_id, &t);
        if (r < 0)
            rc = -1;
        if (r != 1) {
            out->unreadable += r == 0;
            continue;
        }
        for (size_t i = 0; i < t.count && rc == 0; i++)
            if (t.nodes[i].kind == CMR_NODE_CALL)
                rc = add_call(&a, &t.nodes[i], k + 1);
        cmr_tree_free(&t);
    }
    cmr_u64map_free(&a.index);
    free(a.last_trace);
    if (rc != 0) {
        cmr_diag_report_free(out);
        return -1;
    }
    if (out->nmethods)
        qsort(out->methods, out->nmethods, sizeof *out->methods, by_total);
    return 0;
}

int cmr_ingest_diagnosis_params(const char *id, const char *const *keys, const char *const *values, size_t n,
                                uint64_t *diag, size_t *limit, cmr_http_filter_t *http, char *err, size_t errlen)
{
    if (cmr_ingest_parse_diagnosis_id(id, diag) != 0) {
        snprintf(err, errlen, "\"%s\" is not a diagnosis id (16 hex digits, not all zero)", id ? id : "");
        return -1;
    }
    *limit = CMR_DIAG_DEFAULT_LIMIT;
    cmr_http_filter_t ignored = {0};
    if (http)
        memset(http, 0, sizeof *http);
    for (size_t i = 0; i < n; i++) {
        int h = cmr_http_filter_set(http ? http : &ignored, keys[i], values[i], err, errlen);
        if (h < 0)
            return -1;
        if (h > 0)
            continue;
        if (strcmp(keys[i], "limit")) {
            snprintf(err, errlen, "unknown parameter \"%s\" (limit, http_method, http_path, http_status)", keys[i]);
            return -1;
        }
        char *end;
        long l = strtol(values[i], &end, 10);
        if (end == values[i] || *end || l <= 0 || l > CMR_DIAG_MAX_LIMIT) {
            snprintf(err, errlen, "limit: \"%s\" is not a number in 1..%d", values[i], CMR_DIAG_MAX_LIMIT);
            return -1;
        }
        *limit = (size_t)l;
    }
    return 0;
}

int cmr_ingest_diagnosis_query(cmr_ingest_view_t *v, const char *id, const char *const *keys, const char *const *values,
                               size_t n, char **json, FILE *text, char *err, size_t errlen)
{
    *json = NULL;
    uint64_t diag;
    size_t limit;
    cmr_http_filter_t http;
    if (cmr_ingest_diagnosis_params(id, keys, values, n, &diag, &limit, &http, err, errlen) != 0)
        return 2;
    cmr_diag_report_t r;
    if (cmr_ingest_view_diagnosis(v, diag, &http, limit, &r) != 0) {
        snprintf(err, errlen, "cannot read the diagnosis' traces");
        return 1;
    }
    const cmr_names_t *names = cmr_ingest_view_names(v);
    if (text)
        cmr_ingest_print_diagnosis(text, names, &r);
    else
        *json = cmr_ingest_diagnosis_json(names, &r);
    cmr_diag_report_free(&r);
    if (!text && !*json) {
        snprintf(err, errlen, "out of memory");
        return 1;
    }
    return 0;
}
