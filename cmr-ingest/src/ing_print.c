/*
 * ing_print.c - how traces are shown: the list and the indented call tree as text, both
 * as JSON, and the parsing of filters, times and durations.
 *
 * Output is a function of the store content only (no clock, no addresses, deterministic
 * order), so a replayed store prints the same bytes.
 */
#include <assert.h>
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmr/clock.h"
#include "cmr/ids.h"
#include "cmr/ingest.h"
#include "cmr/json.h"

static void fmt_time(int64_t ns, char *buf, size_t len)
{
    time_t sec = (time_t)(ns / 1000000000);
    int64_t frac = ns % 1000000000;
    if (frac < 0) {
        frac += 1000000000;
        sec--;
    }
    struct tm tm;
    gmtime_r(&sec, &tm);
    char d[32];
    strftime(d, sizeof d, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, len, "%s.%09" PRId64 "Z", d, frac);
}

static const char *thread_name(const cmr_tree_t *t, const cmr_tree_node_t *x)
{
    assert(x->thread_name == CMR_NODE_NONE || x->thread_name < t->nnames);
    return x->thread_name != CMR_NODE_NONE ? t->names[x->thread_name] : "";
}

/* The http columns of a trace: method and status ("-" when not known). */
static void http_cols(const cmr_trace_http_t *h, char *method, size_t mlen, char *status, size_t slen)
{
    snprintf(method, mlen, "%s", h->method[0] ? h->method : "-");
    if (h->status)
        snprintf(status, slen, "%u", (unsigned)h->status);
    else
        snprintf(status, slen, "-");
}

/* The root's name; never a method id of 0 shown as a method. */
static const char *root_name(const cmr_names_t *n, const cmr_trace_summary_t *s, char *buf, size_t len)
{
    if (!(s->flags & CMR_TRACE_HAS_ROOT))
        return "(root not arrived)";
    if (s->flags & CMR_TRACE_ROOT_LOST || !s->root_method)
        return "(root call lost)";
    return cmr_names_method(n, s->root_method, buf, len);
}

/* Why a trace is truncated, in words: "size limit", "ring full", both, or "" (unknown). */
static const char *truncated_why(uint32_t by, char *buf, size_t len)
{
    snprintf(buf, len, "%s%s%s", by & CMR_TRUNCATED_BY_LIMIT ? "size limit" : "",
             (by & CMR_TRUNCATED_BY_LIMIT) && (by & CMR_TRUNCATED_BY_RING) ? " and " : "",
             by & CMR_TRUNCATED_BY_RING ? "ring full" : "");
    if (!buf[0])
        snprintf(buf, len, "reason unknown");
    return buf;
}

void cmr_ingest_print_list(FILE *f, const cmr_names_t *n, const cmr_trace_summary_t *s, size_t count)
{
    fprintf(f, "%-32s  %-30s  %12s  %8s  %4s  %-9s  %-7s %6s  %s\n", "TRACE", "START", "DURATION_MS", "EVENTS", "JVMS",
            "STATE", "METHOD", "STATUS", "ROOT  [PATH]");
    for (size_t i = 0; i < count; i++) {
        char id[33], ts[64], m[1024], hm[CMR_TRACE_HTTP_MAX + 1], hs[8];
        cmr_hex(s[i].trace_id, 16, id);
        fmt_time(s[i].start_ns, ts, sizeof ts);
        http_cols(&s[i].http, hm, sizeof hm, hs, sizeof hs);
        const char *state = s[i].flags & CMR_TRACE_COMPLETE ? "complete" : "partial";
        const char *root = root_name(n, &s[i], m, sizeof m);
        fprintf(f, "%s  %-30s  %12.3f  %8" PRIu64 "  %4u  %-9s  %-7s %6s  %s%s", id, ts,
                (double)(s[i].end_ns - s[i].start_ns) / 1e6, s[i].events, s[i].agents, state, hm, hs,
                s[i].flags & CMR_TRACE_REMOTE_ROOT ? "(remote caller) " : "", root);
        if (s[i].http.path[0]) /* validated: no control characters */
            fprintf(f, "  [%s]", s[i].http.path);
        if (s[i].flags & CMR_TRACE_TRUNCATED) {
            char why[64];
            fprintf(f, "  {truncated: %" PRIu64 " calls not recorded, %s}", s[i].calls_not_recorded,
                    truncated_why(s[i].truncated_by, why, sizeof why));
        }
        fputc('\n', f);
    }
}

static void node_label(const cmr_names_t *n, const cmr_tree_node_t *x, char *buf, size_t len)
{
    switch (x->kind) {
    case CMR_NODE_REMOTE: snprintf(buf, len, "(remote caller %016" PRIx64 ")", x->segment_id); break;
    case CMR_NODE_MISSING:
        snprintf(buf, len, "(missing parent %016" PRIx64 ":%016" PRIx64 ":%" PRId64 ")", x->agent_id, x->segment_id,
                 x->event_seq);
        break;
    default: cmr_names_method(n, x->method_id, buf, len);
    }
}

void cmr_ingest_print_tree(FILE *f, const cmr_names_t *n, const cmr_tree_t *t)
{
    char id[33], ts[64];
    cmr_hex(t->trace_id, 16, id);
    fmt_time(t->start_ns, ts, sizeof ts);
    fprintf(f, "trace %s\n", id);
    fprintf(f, "  start %s  duration %.3f ms  events %" PRIu64 "  segments %u  threads %u  jvms %u  %s\n", ts,
            (double)(t->end_ns - t->start_ns) / 1e6, t->events, t->segments, t->threads, t->agents,
            t->complete ? "complete" : "partial");
    if (cmr_trace_http_known(&t->http)) {
        char hm[CMR_TRACE_HTTP_MAX + 1], hs[8];
        http_cols(&t->http, hm, sizeof hm, hs, sizeof hs);
        fprintf(f, "  http %s %s %s\n", hm, t->http.path[0] ? t->http.path : "-", hs);
    }
    if (t->dropped || t->gaps || t->unmatched)
        fprintf(f, "  dropped events %" PRIu64 "  missing batches %u  unmatched exits %u\n", t->dropped, t->gaps,
                t->unmatched);
    if (t->calls_not_recorded || t->truncated_by) {
        char why[64];
        fprintf(f, "  truncated: %" PRIu64 " calls not recorded (%s), with everything they called\n",
                t->calls_not_recorded, truncated_why(t->truncated_by, why, sizeof why));
    }
    fprintf(f, "  %10s %10s  %s\n", "TOTAL_MS", "SELF_MS", "CALL  [thread #id @ jvm]");
    /* iterative pre-order walk */
    uint32_t *stack = malloc((t->count + 1) * sizeof *stack);
    uint32_t *rev = malloc((t->count + 1) * sizeof *rev);
    if (!stack || !rev) {
        free(stack), free(rev);
        return;
    }
    size_t ns = 0, nr = 0;
    for (uint32_t r = t->first_root; r != CMR_NODE_NONE; r = t->nodes[r].next_sibling)
        rev[nr++] = r;
    while (nr)
        stack[ns++] = rev[--nr];
    char label[1024], jvm[512];
    while (ns) {
        const cmr_tree_node_t *x = &t->nodes[stack[--ns]];
        node_label(n, x, label, sizeof label);
        fprintf(f, "  %10.3f %10.3f  %*s%s", (double)x->total_ns / 1e6, (double)x->self_ns / 1e6, (int)(x->depth * 2),
                "", label);
        if (x->kind == CMR_NODE_CALL)
            fprintf(f, "  [%s #%" PRId64 " @ %s]", thread_name(t, x), x->thread_id,
                    cmr_names_agent(n, x->agent_id, jvm, sizeof jvm));
        for (uint32_t a = 0; a < x->nattrs; a++)
            fprintf(f, "  %s=%s", t->names[t->attrs[x->attrs + a].key], t->names[t->attrs[x->attrs + a].value]);
        if (x->async)
            fprintf(f, " async");
        if (x->remote)
            fprintf(f, " remote");
        if (x->running)
            fprintf(f, " running");
        if (x->exception)
            fprintf(f, " exception");
        if (x->lost_exit)
            fprintf(f, " exit-lost");
        if (x->wait_ns > 0) /* part of TOTAL_MS, not of SELF_MS */
            fprintf(f, "  wait %.3f", (double)x->wait_ns / 1e6);
        fputc('\n', f);
        nr = 0;
        for (uint32_t c = x->first_child; c != CMR_NODE_NONE; c = t->nodes[c].next_sibling)
            rev[nr++] = c;
        while (nr)
            stack[ns++] = rev[--nr];
    }
    free(rev);
    free(stack);
}

/* The members a trace summary and a tree share, in the order both print them. */
static void set_span(json_t *o, int64_t start_ns, int64_t end_ns, uint64_t events, uint64_t dropped, uint32_t segments)
{
    json_object_set_new(o, "start_ns", json_integer(start_ns));
    json_object_set_new(o, "duration_ns", json_integer(end_ns - start_ns));
    json_object_set_new(o, "events", json_integer((json_int_t)events));
    json_object_set_new(o, "dropped", json_integer((json_int_t)dropped));
    json_object_set_new(o, "segments", json_integer(segments));
}

/* "truncated", "calls_not_recorded", "truncated_by": ["size_limit", "ring_full"]. */
static void loss_json(json_t *o, uint64_t calls, uint32_t by)
{
    json_object_set_new(o, "truncated", json_boolean(calls || by));
    json_object_set_new(o, "calls_not_recorded", json_integer((json_int_t)calls));
    json_t *why = json_array();
    if (by & CMR_TRUNCATED_BY_LIMIT)
        json_array_append_new(why, json_string("size_limit"));
    if (by & CMR_TRUNCATED_BY_RING)
        json_array_append_new(why, json_string("ring_full"));
    json_object_set_new(o, "truncated_by", why);
}

/* {"method", "path", "status"} (null for what is not known), or null when nothing is. */
static json_t *http_json(const cmr_trace_http_t *h)
{
    if (!cmr_trace_http_known(h))
        return json_null();
    json_t *o = json_object();
    json_object_set_new(o, "method", h->method[0] ? cmr_json_str(h->method) : json_null());
    json_object_set_new(o, "path", h->path[0] ? cmr_json_str(h->path) : json_null());
    json_object_set_new(o, "status", h->status ? json_integer(h->status) : json_null());
    return o;
}

/* Names (methods, JVMs, threads) come from agents: cmr_json_str keeps invalid UTF-8. */
static json_t *summary_json(const cmr_names_t *n, const cmr_trace_summary_t *s)
{
    char m[1024], a[512], ts[64];
    fmt_time(s->start_ns, ts, sizeof ts);
    json_t *o = json_object();
    json_object_set_new(o, "trace_id", cmr_json_hex(s->trace_id, 16));
    json_object_set_new(o, "start", json_string(ts));
    set_span(o, s->start_ns, s->end_ns, s->events, s->dropped, s->segments);
    json_object_set_new(o, "jvms", json_integer(s->agents));
    json_object_set_new(o, "complete", json_boolean(s->flags & CMR_TRACE_COMPLETE));
    json_object_set_new(o, "remote_root", json_boolean(s->flags & CMR_TRACE_REMOTE_ROOT));
    loss_json(o, s->calls_not_recorded, s->truncated_by);
    json_object_set_new(o, "root_lost", json_boolean(s->flags & CMR_TRACE_ROOT_LOST));
    if (s->flags & CMR_TRACE_HAS_ROOT && !(s->flags & CMR_TRACE_ROOT_LOST) && s->root_method) {
        json_object_set_new(o, "root_method", cmr_json_str(cmr_names_method(n, s->root_method, m, sizeof m)));
        json_object_set_new(o, "root_jvm", cmr_json_str(cmr_names_agent(n, s->root_agent, a, sizeof a)));
    } else {
        json_object_set_new(o, "root_method", json_null());
        json_object_set_new(o, "root_jvm", json_null());
    }
    json_t *diags = json_array();
    for (uint32_t i = 0; i < s->ndiagnoses; i++)
        json_array_append_new(diags, cmr_json_id64(s->diagnoses[i]));
    json_object_set_new(o, "diagnoses", diags);
    json_object_set_new(o, "http", http_json(&s->http));
    return o;
}

char *cmr_ingest_list_json(const cmr_names_t *n, const cmr_trace_summary_t *s, size_t count)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < count; i++)
        json_array_append_new(arr, summary_json(n, &s[i]));
    return cmr_json_take(json_pack("{s:o}", "traces", arr), CMR_JSON_COMPACT);
}

static const char *kind_name(cmr_tree_node_kind_t k)
{
    switch (k) {
    case CMR_NODE_CALL: return "call";
    case CMR_NODE_REMOTE: return "remote_caller";
    case CMR_NODE_MISSING: return "missing_parent";
    }
    assert(!"unknown node kind");
    return "call";
}

/* A node's own fields (everything but its children), in the order of the API. */
static json_t *node_fields_json(const cmr_names_t *n, const cmr_tree_t *t, uint32_t i)
{
    const cmr_tree_node_t *x = &t->nodes[i];
    char label[1024], jvm[512];
    node_label(n, x, label, sizeof label);
    json_t *o = json_object();
    json_object_set_new(o, "kind", json_string(kind_name(x->kind)));
    json_object_set_new(o, "method", cmr_json_str(label));
    json_object_set_new(o, "method_id", cmr_json_id64(x->method_id));
    json_object_set_new(o, "start_ns", json_integer(x->start_ns));
    json_object_set_new(o, "end_ns", json_integer(x->end_ns));
    json_object_set_new(o, "total_ns", json_integer(x->total_ns));
    json_object_set_new(o, "self_ns", json_integer(x->self_ns));
    json_object_set_new(o, "wait_ns", json_integer(x->wait_ns));
    if (x->kind == CMR_NODE_CALL) {
        json_object_set_new(o, "thread", cmr_json_str(thread_name(t, x)));
        json_object_set_new(o, "thread_id", json_integer(x->thread_id));
        json_object_set_new(o, "jvm", cmr_json_str(cmr_names_agent(n, x->agent_id, jvm, sizeof jvm)));
        json_object_set_new(o, "agent_id", cmr_json_id64(x->agent_id));
        json_object_set_new(o, "segment_id", cmr_json_id64(x->segment_id));
    }
    json_object_set_new(o, "async", json_boolean(x->async));
    json_object_set_new(o, "remote", json_boolean(x->remote));
    json_object_set_new(o, "running", json_boolean(x->running));
    json_object_set_new(o, "exception", json_boolean(x->exception));
    json_object_set_new(o, "exit_lost", json_boolean(x->lost_exit));
    if (x->nattrs) { /* a key given twice keeps its last value */
        json_t *attrs = json_object();
        for (uint32_t a = 0; a < x->nattrs; a++)
            json_object_set_new(attrs, t->names[t->attrs[x->attrs + a].key],
                                cmr_json_str(t->names[t->attrs[x->attrs + a].value]));
        json_object_set_new(o, "attributes", attrs);
    }
    return o;
}

/* Appends an object without its closing '}' (the caller adds the last member and closes it). */
static void put_open_object(cmr_buf_t *b, json_t *o)
{
    size_t before = b->len;
    if (cmr_json_append(b, o, CMR_JSON_COMPACT) == 0 && b->len > before && b->data[b->len - 1] == '}')
        b->len--;
    else
        b->oom = true;
    json_decref(o);
}

/* The tree's JSON is written a node at a time, depth first without recursion, so that a
 * tree of any size and depth is answered without building its whole document (the old
 * jansson object graph took several hundred bytes per node and stopped at depth 2000). */
struct cmr_tree_json_stream {
    const cmr_names_t *names; /* borrowed */
    const cmr_tree_t *tp;     /* borrowed: the tree written */
    cmr_buf_t out;            /* written, not yet read */
    size_t pos;               /* read up to here */
    uint32_t cur;             /* the next node to write at this level, or CMR_NODE_NONE */
    bool first;               /* cur is the first of its siblings */
    bool started, done;
    uint32_t *resume; /* per open level: the sibling to go on with once it is closed */
    size_t depth, cap;
};

cmr_tree_json_stream_t *cmr_tree_json_stream_over(const cmr_names_t *n, const cmr_tree_t *t)
{
    cmr_tree_json_stream_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->names = n;
    s->tp = t;
    s->cur = t->first_root;
    s->first = true;
    return s;
}

void cmr_tree_json_stream_free(cmr_tree_json_stream_t *s)
{
    if (!s)
        return;
    cmr_buf_free(&s->out);
    free(s->resume);
    free(s);
}

static void write_head(cmr_tree_json_stream_t *s)
{
    const cmr_tree_t *t = s->tp;
    json_t *o = json_object();
    json_object_set_new(o, "trace_id", cmr_json_hex(t->trace_id, 16));
    set_span(o, t->start_ns, t->end_ns, t->events, t->dropped, t->segments);
    json_object_set_new(o, "threads", json_integer(t->threads));
    json_object_set_new(o, "jvms", json_integer(t->agents));
    json_object_set_new(o, "missing_batches", json_integer(t->gaps));
    json_object_set_new(o, "complete", json_boolean(t->complete));
    loss_json(o, t->calls_not_recorded, t->truncated_by);
    json_object_set_new(o, "http", http_json(&t->http));
    put_open_object(&s->out, o);
    cmr_buf_puts(&s->out, ",\"roots\":[");
}

/* Writes one step: a node opened (and closed when it has no children), or a level closed. */
static void write_step(cmr_tree_json_stream_t *s)
{
    const cmr_tree_t *t = s->tp;
    if (s->cur != CMR_NODE_NONE) {
        const cmr_tree_node_t *x = &t->nodes[s->cur];
        if (!s->first)
            cmr_buf_putc(&s->out, ',');
        put_open_object(&s->out, node_fields_json(s->names, t, s->cur));
        cmr_buf_puts(&s->out, ",\"children\":[");
        if (x->first_child == CMR_NODE_NONE) {
            cmr_buf_puts(&s->out, "]}");
            s->cur = x->next_sibling;
            s->first = false;
            return;
        }
        if (s->depth == s->cap) {
            size_t cap = s->cap ? s->cap * 2 : 64;
            uint32_t *p = realloc(s->resume, cap * sizeof *p);
            if (!p) {
                s->out.oom = true;
                return;
            }
            s->resume = p;
            s->cap = cap;
        }
        s->resume[s->depth++] = x->next_sibling;
        s->cur = x->first_child;
        s->first = true;
    } else {
        cmr_buf_puts(&s->out, "]}"); /* a node's children and the node; at the top: roots, the trace */
        if (s->depth) {
            s->cur = s->resume[--s->depth];
            s->first = false;
        } else {
            s->done = true;
        }
    }
}

long cmr_tree_json_stream_read(cmr_tree_json_stream_t *s, char *buf, size_t max)
{
    if (s->pos == s->out.len) { /* all read: start a new piece */
        s->out.len = 0;
        s->pos = 0;
    }
    if (!s->started) {
        write_head(s);
        s->started = true;
    }
    while (!s->done && !s->out.oom && s->out.len - s->pos < max)
        write_step(s);
    if (s->out.oom)
        return -1;
    size_t n = s->out.len - s->pos < max ? s->out.len - s->pos : max;
    memcpy(buf, s->out.data + s->pos, n);
    s->pos += n;
    return (long)n;
}

char *cmr_ingest_tree_json(const cmr_names_t *n, const cmr_tree_t *t)
{
    cmr_tree_json_stream_t *s = cmr_tree_json_stream_over(n, t);
    if (!s)
        return NULL;
    cmr_buf_t all = {0};
    char chunk[65536];
    long got;
    while ((got = cmr_tree_json_stream_read(s, chunk, sizeof chunk)) > 0)
        cmr_buf_put(&all, chunk, (size_t)got);
    cmr_tree_json_stream_free(s);
    if (got < 0 || all.oom) {
        cmr_buf_free(&all);
        return NULL;
    }
    return cmr_buf_take(&all);
}

void cmr_ingest_print_diagnosis(FILE *f, const cmr_names_t *n, const cmr_diag_report_t *r)
{
    fprintf(f, "diagnosis %016" PRIx64 ": %zu traces", r->diagnosis_id, r->ntraces);
    if (r->http.method)
        fprintf(f, " with http.method=%s", r->http.method);
    if (r->http.path)
        fprintf(f, "%s http.path=%s", r->http.method ? "," : " with", r->http.path);
    if (r->http.status)
        fprintf(f, "%s http.status=%s", r->http.method || r->http.path ? "," : " with", r->http.status);
    if (r->found > r->ntraces)
        fprintf(f, " (the newest; %zu tagged, --limit)", r->found);
    if (r->unreadable)
        fprintf(f, ", %zu gone since listed", r->unreadable);
    fputc('\n', f);
    if (!r->ntraces)
        return;
    fprintf(f, "%-32s  %-30s  %12s  %-30s  %-7s %6s  %s\n", "TRACE", "START", "DURATION_MS", "ROOT JVM", "METHOD",
            "STATUS", "ROOT  [PATH]");
    for (size_t i = 0; i < r->ntraces; i++) {
        const cmr_trace_summary_t *s = &r->traces[i];
        char id[33], ts[64], m[1024], a[512], hm[CMR_TRACE_HTTP_MAX + 1], hs[8];
        cmr_hex(s->trace_id, 16, id);
        fmt_time(s->start_ns, ts, sizeof ts);
        http_cols(&s->http, hm, sizeof hm, hs, sizeof hs);
        bool root = s->flags & CMR_TRACE_HAS_ROOT;
        fprintf(f, "%s  %-30s  %12.3f  %-30s  %-7s %6s  %s", id, ts, (double)(s->end_ns - s->start_ns) / 1e6,
                root ? cmr_names_agent(n, s->root_agent, a, sizeof a) : "-", hm, hs,
                root ? cmr_names_method(n, s->root_method, m, sizeof m) : "(root not arrived)");
        if (s->http.path[0])
            fprintf(f, "  [%s]", s->http.path);
        fputc('\n', f);
    }
    fprintf(f, "\nmethods in these traces (ms):\n");
    fprintf(f, "%8s %6s %11s %11s %10s %10s %10s %10s  %s\n", "CALLS", "TRACES", "TOTAL", "SELF", "P50", "P95", "P99",
            "MAX", "METHOD");
    for (size_t i = 0; i < r->nmethods; i++) {
        const cmr_diag_method_t *x = &r->methods[i];
        char m[1024];
        fprintf(
            f, "%8" PRIu64 " %6u %11.3f %11.3f %10.3f %10.3f %10.3f %10.3f  %s\n", x->calls, x->traces,
            (double)x->total_ns / 1e6, (double)x->self_ns / 1e6, (double)cmr_hist_quantile(&x->durations, 0.50) / 1e6,
            (double)cmr_hist_quantile(&x->durations, 0.95) / 1e6, (double)cmr_hist_quantile(&x->durations, 0.99) / 1e6,
            (double)x->durations.max / 1e6, cmr_names_method(n, x->method_id, m, sizeof m));
    }
}

char *cmr_ingest_diagnosis_json(const cmr_names_t *n, const cmr_diag_report_t *r)
{
    json_t *o = json_object();
    json_object_set_new(o, "diagnosis_id", cmr_json_id64(r->diagnosis_id));
    json_object_set_new(o, "limit", json_integer((json_int_t)r->limit));
    json_object_set_new(o, "found", json_integer((json_int_t)r->found));
    json_t *filter = json_object();
    json_object_set_new(filter, "http_method", r->http.method ? cmr_json_str(r->http.method) : json_null());
    json_object_set_new(filter, "http_path", r->http.path ? cmr_json_str(r->http.path) : json_null());
    json_object_set_new(filter, "http_status", r->http.status ? cmr_json_str(r->http.status) : json_null());
    json_object_set_new(o, "filter", filter);
    json_object_set_new(o, "unreadable", json_integer((json_int_t)r->unreadable));
    json_t *traces = json_array();
    for (size_t i = 0; i < r->ntraces; i++)
        json_array_append_new(traces, summary_json(n, &r->traces[i]));
    json_object_set_new(o, "traces", traces);
    json_t *methods = json_array();
    for (size_t i = 0; i < r->nmethods; i++) {
        const cmr_diag_method_t *x = &r->methods[i];
        char m[1024];
        json_t *e = json_object();
        json_object_set_new(e, "method", cmr_json_str(cmr_names_method(n, x->method_id, m, sizeof m)));
        json_object_set_new(e, "method_id", cmr_json_id64(x->method_id));
        json_object_set_new(e, "calls", json_integer((json_int_t)x->calls));
        json_object_set_new(e, "traces", json_integer(x->traces));
        json_object_set_new(e, "total_ns", json_integer(x->total_ns));
        json_object_set_new(e, "self_ns", json_integer(x->self_ns));
        json_object_set_new(e, "p50_ns", json_integer((json_int_t)cmr_hist_quantile(&x->durations, 0.50)));
        json_object_set_new(e, "p95_ns", json_integer((json_int_t)cmr_hist_quantile(&x->durations, 0.95)));
        json_object_set_new(e, "p99_ns", json_integer((json_int_t)cmr_hist_quantile(&x->durations, 0.99)));
        json_object_set_new(e, "max_ns", json_integer((json_int_t)x->durations.max));
        json_array_append_new(methods, e);
    }
    json_object_set_new(o, "methods", methods);
    return cmr_json_take(o, CMR_JSON_COMPACT);
}

int cmr_ingest_parse_duration(const char *s, int64_t *ns)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0)
        return -1;
    double mul = 1e6; /* default unit: ms */
    if (!strcmp(end, "ns"))
        mul = 1;
    else if (!strcmp(end, "us"))
        mul = 1e3;
    else if (!strcmp(end, "ms") || !*end)
        mul = 1e6;
    else if (!strcmp(end, "s"))
        mul = 1e9;
    else if (!strcmp(end, "m"))
        mul = 60e9;
    else if (!strcmp(end, "h"))
        mul = 3600e9;
    else
        return -1;
    *ns = (int64_t)(v * mul);
    return 0;
}

int cmr_ingest_parse_time(const char *s, int64_t *ns)
{
    if (s[0] == '-') { /* relative to now */
        int64_t d;
        if (cmr_ingest_parse_duration(s + 1, &d) != 0)
            return -1;
        *ns = cmr_wall_ns() - d;
        return 0;
    }
    bool digits = *s != '\0';
    for (const char *p = s; *p; p++)
        digits = digits && isdigit((unsigned char)*p);
    if (digits) {
        long long v = strtoll(s, NULL, 10);
        size_t len = strlen(s);
        *ns = len <= 10 ? v * 1000000000LL : len <= 13 ? v * 1000000LL : len <= 16 ? v * 1000LL : v;
        return 0;
    }
    struct tm tm = {0};
    const char *rest = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!rest)
        return -1;
    int64_t frac = 0;
    if (*rest == '.') {
        int digits_n = 0;
        for (rest++; isdigit((unsigned char)*rest); rest++, digits_n++)
            if (digits_n < 9)
                frac = frac * 10 + (*rest - '0');
        for (; digits_n < 9; digits_n++)
            frac *= 10;
    }
    if (*rest && strcmp(rest, "Z"))
        return -1;
    *ns = (int64_t)timegm(&tm) * 1000000000 + frac;
    return 0;
}

int cmr_trace_filter_set(cmr_trace_filter_t *f, const char *key, const char *value, char *err, size_t errlen)
{
    int http;
    if (!strcmp(key, "from") || !strcmp(key, "to")) {
        int64_t ns;
        if (cmr_ingest_parse_time(value, &ns) != 0) {
            snprintf(err, errlen, "%s: bad time \"%s\" (ISO 8601 UTC like 2026-11-21T21:40:00Z, unix time, or -10m)",
                     key, value);
            return -1;
        }
        if (!strcmp(key, "from"))
            f->from_ns = ns;
        else
            f->to_ns = ns;
    } else if (!strcmp(key, "min-duration") || !strcmp(key, "min_duration")) {
        if (cmr_ingest_parse_duration(value, &f->min_duration_ns) != 0) {
            snprintf(err, errlen, "%s: bad duration \"%s\" (like 250ms, 1.5s, 300us)", key, value);
            return -1;
        }
    } else if ((http = cmr_http_filter_set(&f->http, key, value, err, errlen)) != 0) {
        return http > 0 ? 0 : -1;
    } else if (!strcmp(key, "root")) {
        f->root_method = value;
    } else if (!strcmp(key, "agent")) {
        f->agent = value;
    } else if (!strcmp(key, "contains")) {
        f->contains = value;
    } else if (!strcmp(key, "env")) {
        size_t len = strlen(value);
        bool ctl = false;
        for (const unsigned char *p = (const unsigned char *)value; *p && !ctl; p++)
            ctl = *p < 0x20 || *p == 0x7f;
        if (!len || len > CMR_ENV_ID_MAX || ctl) {
            snprintf(err, errlen, "env: an environment id is 1 to %d bytes without control characters", CMR_ENV_ID_MAX);
            return -1;
        }
        f->env = value;
    } else if (!strcmp(key, "slowest")) {
        f->slowest = !strcmp(value, "true") || !strcmp(value, "1") || !*value;
    } else if (!strcmp(key, "limit")) {
        char *end;
        long v = strtol(value, &end, 10);
        if (*end || v <= 0 || v > 100000) {
            snprintf(err, errlen, "limit: \"%s\" is not a number in 1..100000", value);
            return -1;
        }
        f->limit = (size_t)v;
    } else {
        snprintf(err, errlen,
                 "unknown filter \"%s\" (from, to, min-duration, root, agent, contains, env, http-method, "
                 "http-path, http-status, slowest, limit)",
                 key);
        return -1;
    }
    return 0;
}
