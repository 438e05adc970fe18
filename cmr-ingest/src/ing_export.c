/*
 * ing_export.c - exports one trace:
 *
 *  - Chrome trace-event JSON ({"traceEvents": [...]}, complete events "ph":"X" with
 *    microsecond ts/dur relative to the trace start, pid = JVM, tid = thread, plus
 *    process_name / thread_name metadata): opens in Perfetto and chrome://tracing.
 *  - OTLP JSON (resourceSpans, one resource per JVM with service.name, scopeSpans "cmr",
 *    spans with hex traceId / spanId / parentSpanId and unix-nano start / end as strings,
 *    the protobuf JSON mapping). A span id is derived from (agent, segment, event seq),
 *    so it is stable across exports and replays. Synthetic nodes are not spans: children
 *    of a remote caller name the foreign parent-id as parentSpanId.
 *
 * Ownership: returns malloc'd JSON text.
 */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/event.h"
#include "cmr/ingest.h"
#include "cmr/json.h"

static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

static uint64_t span_id(const cmr_tree_node_t *x)
{
    uint64_t v = mix(x->agent_id ^ mix(x->segment_id ^ mix((uint64_t)x->event_seq + 0x9E3779B97F4A7C15ull)));
    return v ? v : 1;
}

/* Distinct agents of the tree in first-appearance order (pre-order). */
static size_t agents_of(const cmr_tree_t *t, uint64_t **out)
{
    uint64_t *a = malloc((t->count + 1) * sizeof *a);
    size_t n = 0;
    if (!a)
        return 0;
    for (size_t i = 0; i < t->count; i++) {
        if (t->nodes[i].kind != CMR_NODE_CALL)
            continue;
        size_t k = 0;
        while (k < n && a[k] != t->nodes[i].agent_id)
            k++;
        if (k == n)
            a[n++] = t->nodes[i].agent_id;
    }
    *out = a;
    return n;
}

static size_t agent_index(const uint64_t *a, size_t n, uint64_t id)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] == id)
            return i;
    assert(!"agents_of() lists the agent of every call");
    return 0;
}

/* {"ph":"M"} metadata naming a process (a JVM) or a thread. */
static json_t *chrome_meta(const char *what, size_t pid, int64_t tid, const char *name)
{
    return json_pack("{s:s,s:s,s:I,s:I,s:{s:o}}", "name", what, "ph", "M", "pid", (json_int_t)pid, "tid",
                     (json_int_t)tid, "args", "name", cmr_json_str(name));
}

/* A call's categories: "call", then async (not subtracted from its caller) and remote
 * (the callee of a call from another JVM; remote without async: its caller waited). */
static const char *chrome_cat(const cmr_tree_node_t *x)
{
    if (x->remote)
        return x->async ? "call,async,remote" : "call,remote";
    return x->async ? "call,async" : "call";
}

/* Names (methods, JVMs, threads) come from agents: cmr_json_str keeps invalid UTF-8. */
char *cmr_ingest_export_chrome(const cmr_names_t *n, const cmr_tree_t *t)
{
    uint64_t *agents = NULL;
    size_t na = agents_of(t, &agents);
    json_t *ev = json_array();
    char buf[1024];
    for (size_t i = 0; i < na; i++)
        json_array_append_new(ev,
                              chrome_meta("process_name", i + 1, 0, cmr_names_agent(n, agents[i], buf, sizeof buf)));
    for (size_t i = 0; i < t->count; i++) { /* thread names, once per (JVM, thread) */
        const cmr_tree_node_t *x = &t->nodes[i];
        if (x->kind != CMR_NODE_CALL || x->event_seq != 0)
            continue;
        const char *name = x->thread_name != CMR_NODE_NONE ? t->names[x->thread_name] : "thread";
        json_array_append_new(ev,
                              chrome_meta("thread_name", agent_index(agents, na, x->agent_id) + 1, x->thread_id, name));
    }
    for (size_t i = 0; i < t->count; i++) {
        const cmr_tree_node_t *x = &t->nodes[i];
        if (x->kind != CMR_NODE_CALL)
            continue;
        json_t *e = json_object();
        json_object_set_new(e, "name", cmr_json_str(cmr_names_method(n, x->method_id, buf, sizeof buf)));
        json_object_set_new(e, "cat", json_string(chrome_cat(x)));
        json_object_set_new(e, "ph", json_string("X"));
        json_object_set_new(e, "ts", json_real((double)(x->start_ns - t->start_ns) / 1000.0));
        json_object_set_new(e, "dur", json_real((double)x->total_ns / 1000.0));
        json_object_set_new(e, "pid", json_integer((json_int_t)(agent_index(agents, na, x->agent_id) + 1)));
        json_object_set_new(e, "tid", json_integer(x->thread_id));
        json_object_set_new(e, "args",
                            json_pack("{s:I,s:I,s:b,s:b}", "self_ns", (json_int_t)x->self_ns, "wait_ns",
                                      (json_int_t)x->wait_ns, "running", x->running, "exception", x->exception));
        json_array_append_new(ev, e);
    }
    free(agents);
    json_t *o = json_pack("{s:o,s:s,s:{s:o}}", "traceEvents", ev, "displayTimeUnit", "ns", "otherData", "trace_id",
                          cmr_json_hex(t->trace_id, 16));
    return cmr_json_take(o, CMR_JSON_PRETTY);
}

/* An OTLP attribute {"key": k, "value": {kind: v}}; steals v. */
static json_t *attr(const char *k, const char *kind, json_t *v)
{
    return json_pack("{s:s,s:{s:o}}", "key", k, "value", kind, v);
}

static json_t *attr_str(const char *k, const char *v)
{
    return attr(k, "stringValue", cmr_json_str(v));
}

static json_t *attr_int(const char *k, int64_t v)
{
    char s[32];
    snprintf(s, sizeof s, "%" PRId64, v);
    return attr(k, "intValue", json_string(s));
}

static json_t *otlp_span(const cmr_names_t *n, const cmr_tree_t *t, const cmr_tree_node_t *x)
{
    char buf[1024], ts[32], te[32];
    json_t *parent = NULL;
    if (x->parent != CMR_NODE_NONE) {
        const cmr_tree_node_t *p = &t->nodes[x->parent];
        if (p->kind == CMR_NODE_CALL)
            parent = cmr_json_id64(span_id(p));
        else if (p->kind == CMR_NODE_REMOTE)
            parent = cmr_json_id64(p->segment_id);
    }
    snprintf(ts, sizeof ts, "%" PRId64, x->start_ns);
    snprintf(te, sizeof te, "%" PRId64, x->end_ns);
    json_t *attrs = json_array();
    json_array_append_new(attrs,
                          attr_str("thread.name", x->thread_name != CMR_NODE_NONE ? t->names[x->thread_name] : ""));
    json_array_append_new(attrs, attr_int("thread.id", x->thread_id));
    json_array_append_new(attrs, attr_int("cmr.self_ns", x->self_ns));
    if (x->wait_ns > 0)
        json_array_append_new(attrs, attr_int("cmr.wait_ns", x->wait_ns));
    if (x->running)
        json_array_append_new(attrs, attr_str("cmr.state", "running"));
    for (uint32_t a = 0; a < x->nattrs; a++) /* db.statement, url.full ...: OpenTelemetry's names */
        json_array_append_new(attrs,
                              attr_str(t->names[t->attrs[x->attrs + a].key], t->names[t->attrs[x->attrs + a].value]));
    bool client = false;
    for (uint32_t a = 0; a < x->nattrs; a++)
        client |= !strncmp(t->names[t->attrs[x->attrs + a].key], "db.", 3) ||
                  !strcmp(t->names[t->attrs[x->attrs + a].key], CMR_NODE_ATTR_URL);
    json_t *s = json_object();
    json_object_set_new(s, "traceId", cmr_json_hex(t->trace_id, 16));
    json_object_set_new(s, "spanId", cmr_json_id64(span_id(x)));
    json_object_set_new(s, "parentSpanId", parent ? parent : json_string(""));
    json_object_set_new(s, "name", cmr_json_str(cmr_names_method(n, x->method_id, buf, sizeof buf)));
    json_object_set_new(s, "kind", json_integer(client ? 3 : 1)); /* SPAN_KIND_CLIENT / _INTERNAL */
    json_object_set_new(s, "startTimeUnixNano", json_string(ts));
    json_object_set_new(s, "endTimeUnixNano", json_string(te));
    json_object_set_new(s, "attributes", attrs);
    json_object_set_new(s, "status",
                        x->exception ? json_pack("{s:i,s:s}", "code", 2, "message", "exception")
                                     : json_pack("{s:i}", "code", 0));
    return s;
}

char *cmr_ingest_export_otlp(const cmr_names_t *n, const cmr_tree_t *t)
{
    uint64_t *agents = NULL;
    size_t na = agents_of(t, &agents);
    char buf[1024];
    json_t *rs = json_array();
    for (size_t a = 0; a < na; a++) {
        json_t *spans = json_array();
        for (size_t i = 0; i < t->count; i++)
            if (t->nodes[i].kind == CMR_NODE_CALL && t->nodes[i].agent_id == agents[a])
                json_array_append_new(spans, otlp_span(n, t, &t->nodes[i]));
        json_t *attrs = json_array();
        json_array_append_new(attrs, attr_str("service.name", cmr_names_agent(n, agents[a], buf, sizeof buf)));
        json_array_append_new(attrs, attr("cmr.agent_id", "stringValue", cmr_json_id64(agents[a])));
        json_array_append_new(rs, json_pack("{s:{s:o},s:[{s:{s:s,s:s},s:o}]}", "resource", "attributes", attrs,
                                            "scopeSpans", "scope", "name", "cmr", "version", "0.1.0", "spans", spans));
    }
    free(agents);
    return cmr_json_take(json_pack("{s:o}", "resourceSpans", rs), CMR_JSON_PRETTY);
}
