/*
 * ingest_unit_test.c - cmr-ingest without a broker: stored batches, tree assembly (one
 * thread, across threads and JVMs, synchronous remote calls and their wait time, remote
 * callers, missing parents, out-of-order and duplicate batches, lost batches and exits,
 * running calls), the trace summary's order
 * independence, the store with its indexes, filters and retention, the text / JSON
 * output, the exporters (validated with jansson) and the HTTP answers; diagnoses (the
 * summary's set of diagnosis ids and its encoding, idx_diagnosis, the report's traces and
 * per-method numbers, retention, stores from before idx_diagnosis, HTTP and the CLI: the
 * path of cmr-ingest is the first argument); transaction data (EventBatch.attributes: the
 * root segment's, checks, summary formats, the http filters of lists and reports).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <inttypes.h>
#include <jansson.h>
#include <rocksdb/c.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmr/clock.h"
#include "cmr/event.h"
#include "cmr/http_server.h"
#include "cmr/ids.h"
#include "cmr/buf.h"
#include "cmr/wire.h"
#include "cmr/ingest.h"
#include "cmr/kafka.h"
#include "cmr/rejects.h"
#include "cmr/topics.h"
#include "cmr/log.h"
#include "http_client.h"
#include "ing_synth.h"

static uint64_t A1, A2;        /* the agent ids of shop@host-a and billing@host-b */
static const char *ingest_bin; /* cmr-ingest, for the CLI checks (argv[1]; skipped without) */
#define M_MAIN 0x100
#define M_A 0x200
#define M_B 0x300
#define M_TASK 0x400
#define M_HANDLER 0x500
#define T0 1763760000000000000ull /* 2025-11-21T21:20:00Z */

/* All batches of several segments, flattened into ingest batches. */
typedef struct stream {
    cmr_event_batch_t *msgs[16];
    size_t counts[16];
    int nseg;
    cmr_ingest_batch_t *flat;
    size_t nflat;
} stream_t;

static void stream_add(stream_t *st, const synth_seg_t *s, size_t per_batch)
{
    st->counts[st->nseg] = synth_batches(s, per_batch, &st->msgs[st->nseg]);
    st->nseg++;
}

static void stream_flatten(stream_t *st)
{
    size_t n = 0;
    for (int i = 0; i < st->nseg; i++)
        n += st->counts[i];
    st->flat = calloc(n, sizeof *st->flat);
    st->nflat = 0;
    char err[256];
    for (int i = 0; i < st->nseg; i++)
        for (size_t k = 0; k < st->counts[i]; k++)
            assert_int_equal(cmr_ingest_batch_from_msg(&st->msgs[i][k], &st->flat[st->nflat++], err, sizeof err), 0);
}

static void stream_free(stream_t *st)
{
    for (int i = 0; i < st->nseg; i++)
        synth_batches_free(st->msgs[i], st->counts[i]);
    free(st->flat);
    memset(st, 0, sizeof *st);
}

static const cmr_tree_node_t *child(const cmr_tree_t *t, const cmr_tree_node_t *n, int k)
{
    uint32_t c = n ? n->first_child : t->first_root;
    while (c != CMR_NODE_NONE && k--)
        c = t->nodes[c].next_sibling;
    return c == CMR_NODE_NONE ? NULL : &t->nodes[c];
}

static int nchildren(const cmr_tree_t *t, const cmr_tree_node_t *n)
{
    int k = 0;
    for (uint32_t c = n ? n->first_child : t->first_root; c != CMR_NODE_NONE; c = t->nodes[c].next_sibling)
        k++;
    return k;
}

static char *tree_json(const cmr_tree_t *t)
{
    cmr_names_t *n = cmr_names_new();
    char *j = cmr_ingest_tree_json(n, t);
    cmr_names_free(n);
    return j;
}

/* main { a { b } a } in one thread of JVM agent */
static void build_nested_by(synth_seg_t *s, uint64_t trace_n, uint64_t base, uint64_t agent)
{
    uint8_t tid[16];
    synth_trace_id(trace_n, tid);
    synth_seg_init(s, tid, agent, 1, 1, "main", NULL);
    synth_enter(s, M_MAIN, base);
    synth_enter(s, M_A, base + 100);
    synth_enter(s, M_B, base + 200);
    synth_exit(s, M_B, base + 500);
    synth_exit(s, M_A, base + 600);
    synth_enter(s, M_A, base + 700);
    synth_exit(s, M_A, base + 800);
    synth_exit(s, M_MAIN, base + 1000);
}

static void build_nested_at(synth_seg_t *s, uint64_t trace_n, uint64_t base)
{
    build_nested_by(s, trace_n, base, A1);
}

static void build_nested(synth_seg_t *s, uint64_t trace_n)
{
    build_nested_at(s, trace_n, T0);
}

static void test_nested_one_thread(void **state)
{
    (void)state;
    synth_seg_t s;
    build_nested(&s, 1);
    stream_t st = {0};
    stream_add(&st, &s, 3);
    stream_flatten(&st);
    cmr_tree_t t;
    assert_int_equal(cmr_tree_build(st.flat, st.nflat, &t), 0);
    assert_int_equal(nchildren(&t, NULL), 1);
    const cmr_tree_node_t *m = child(&t, NULL, 0);
    assert_int_equal(m->method_id, M_MAIN);
    assert_int_equal(m->total_ns, 1000);
    assert_int_equal(m->self_ns, 1000 - 500 - 100);
    assert_int_equal(nchildren(&t, m), 2);
    const cmr_tree_node_t *a1 = child(&t, m, 0), *a2 = child(&t, m, 1);
    assert_int_equal(a1->method_id, M_A);
    assert_int_equal(a1->total_ns, 500);
    assert_int_equal(a1->self_ns, 200);
    assert_int_equal(child(&t, a1, 0)->method_id, M_B);
    assert_int_equal(child(&t, a1, 0)->total_ns, 300);
    assert_int_equal(a2->start_ns - (int64_t)T0, 700);
    assert_true(t.complete);
    assert_int_equal(t.events, 8);
    assert_int_equal(t.gaps, 0);
    assert_string_equal(t.names[m->thread_name], "main");
    cmr_tree_free(&t);
    stream_free(&st);
    synth_seg_free(&s);
}

/* main on thread 1 forks to a pool thread (task), and calls B over HTTP in JVM 2 */
static void build_multi(synth_seg_t segs[4], uint64_t trace_n)
{
    uint8_t tid[16];
    synth_trace_id(trace_n, tid);
    synth_seg_t *p = &segs[0], *c = &segs[1], *r = &segs[2], *f = &segs[3];
    synth_seg_init(p, tid, A1, 10, 1, "main", NULL);
    synth_enter(p, M_MAIN, T0);
    synth_enter(p, M_A, T0 + 100);
    int64_t fork1 = synth_fork(p, T0 + 150);
    synth_exit(p, M_A, T0 + 200);
    int64_t fork2 = synth_fork(p, T0 + 300); /* HTTP call to JVM 2 from main */
    synth_exit(p, M_MAIN, T0 + 2000);
    cmr_parent_link_t l1 = {(int64_t)A1, 10, fork1};
    synth_seg_init(c, tid, A1, 11, 21, "pool-1-thread-1", &l1);
    synth_enter(c, M_TASK, T0 + 400);
    synth_enter(c, M_B, T0 + 450);
    synth_exit(c, M_B, T0 + 550);
    synth_exit(c, M_TASK, T0 + 1400);
    cmr_parent_link_t l2 = {(int64_t)A2 ^ 0, 0, 0};
    l2.agent_id = (int64_t)A1;
    l2.segment_id = 10;
    l2.event_seq = fork2;
    synth_seg_init(r, tid, A2, 5, 7, "http-nio-8080-exec-1", &l2);
    synth_enter(r, M_HANDLER, T0 + 500);
    synth_exit(r, M_HANDLER, T0 + 1500);
    /* a request from a foreign tracer into the same trace */
    cmr_parent_link_t l3 = {0, 0x0badcafe, -1};
    synth_seg_init(f, tid, A2, 6, 8, "http-nio-8080-exec-2", &l3);
    synth_enter(f, M_HANDLER, T0 + 3000);
    synth_throw(f, M_HANDLER, T0 + 3500);
}

static void test_across_threads_and_jvms(void **state)
{
    (void)state;
    synth_seg_t segs[4];
    build_multi(segs, 2);
    stream_t st = {0};
    for (int i = 0; i < 4; i++)
        stream_add(&st, &segs[i], 2);
    stream_flatten(&st);
    cmr_tree_t t;
    assert_int_equal(cmr_tree_build(st.flat, st.nflat, &t), 0);
    assert_int_equal(nchildren(&t, NULL), 2); /* main, the remote caller */
    const cmr_tree_node_t *m = child(&t, NULL, 0), *rem = child(&t, NULL, 1);
    assert_int_equal(m->method_id, M_MAIN);
    assert_int_equal(rem->kind, CMR_NODE_REMOTE);
    assert_int_equal(rem->segment_id, 0x0badcafe);
    assert_int_equal(nchildren(&t, rem), 1);
    assert_true(child(&t, rem, 0)->exception);
    assert_true(child(&t, rem, 0)->async);
    assert_false(child(&t, rem, 0)->remote); /* under a remote caller, not under a call */
    /* main: A (sync, with the task forked inside it), the handler in JVM 2: a synchronous
     * remote call (500..1500 lies within main's 0..2000), main waited for it */
    assert_int_equal(nchildren(&t, m), 2);
    const cmr_tree_node_t *a = child(&t, m, 0), *h = child(&t, m, 1);
    assert_int_equal(a->method_id, M_A);
    assert_int_equal(h->method_id, M_HANDLER);
    assert_int_equal(h->agent_id, A2);
    assert_false(h->async);
    assert_true(h->remote);
    assert_int_equal(h->thread_id, 7);
    assert_int_equal(m->wait_ns, 1500 - 500);
    assert_int_equal(m->self_ns, 2000 - 100 - 1000); /* A (sync) and the wait for the handler */
    assert_int_equal(h->wait_ns, 0);
    assert_int_equal(h->self_ns, 1000);
    assert_int_equal(nchildren(&t, a), 1);
    const cmr_tree_node_t *task = child(&t, a, 0);
    assert_true(task->async); /* a FORK in the same JVM: not subtracted from A */
    assert_false(task->remote);
    assert_int_equal(a->wait_ns, 0);
    assert_int_equal(a->self_ns, 100);
    assert_int_equal(task->method_id, M_TASK);
    assert_int_equal(task->thread_id, 21);
    assert_string_equal(t.names[task->thread_name], "pool-1-thread-1");
    assert_int_equal(task->total_ns, 1000);
    assert_int_equal(task->self_ns, 900);
    assert_int_equal(t.agents, 2);
    assert_int_equal(t.threads, 4);
    assert_int_equal(t.segments, 4);
    assert_true(t.complete);
    /* a child lies within its parent for synchronous calls */
    for (size_t i = 0; i < t.count; i++) {
        const cmr_tree_node_t *x = &t.nodes[i];
        if (x->parent != CMR_NODE_NONE && !x->async && t.nodes[x->parent].kind == CMR_NODE_CALL) {
            assert_true(x->start_ns >= t.nodes[x->parent].start_ns);
            assert_true(x->end_ns <= t.nodes[x->parent].end_ns);
        }
    }
    cmr_tree_free(&t);
    stream_free(&st);
    for (int i = 0; i < 4; i++)
        synth_seg_free(&segs[i]);
}

/* Synchronous remote calls: the callee's segment in another JVM hangs under the calling
 * call as a remote child; the caller's wait_ns is the union of such children's intervals
 * clipped to its own, and its self time excludes it. In-JVM hand-offs stay async. */

/* A segment of one call in JVM `agent`, started by the FORK `fork` of `caller`. */
static void remote_call(synth_seg_t *r, const synth_seg_t *caller, int64_t fork, uint64_t agent, uint64_t segment,
                        uint64_t method, uint64_t start, uint64_t end)
{
    cmr_parent_link_t l = {(int64_t)caller->agent_id, (int64_t)caller->segment_id, fork};
    synth_seg_init(r, caller->trace_id, agent, segment, (int64_t)segment + 100, "payment-worker", &l);
    synth_enter(r, method, start);
    synth_exit(r, method, end);
}

static void build_tree(synth_seg_t *segs, int n, stream_t *st, cmr_tree_t *t)
{
    for (int i = 0; i < n; i++)
        stream_add(st, &segs[i], 3);
    stream_flatten(st);
    assert_int_equal(cmr_tree_build(st->flat, st->nflat, t), 0);
}

/* The line of text that contains needle (a copy, or NULL). */
static char *line_with(const char *text, const char *needle)
{
    const char *p = strstr(text, needle);
    if (!p)
        return NULL;
    const char *b = p, *e = strchr(p, '\n');
    while (b > text && b[-1] != '\n')
        b--;
    return strndup(b, e ? (size_t)(e - b) : strlen(b));
}

/* The issue's example: PaymentGateway.charge (28.082 ms) calls the payments JVM over HTTP
 * and waits 22.911 ms for doFilter; charge's self time is 28.082 - 22.911 = 5.171 ms. */
static void test_remote_sync_wait(void **state)
{
    (void)state;
    uint8_t tid[16];
    synth_trace_id(100, tid);
    synth_seg_t segs[2];
    synth_seg_t *p = &segs[0];
    synth_seg_init(p, tid, A1, 50, 1, "http-worker", NULL);
    synth_enter(p, M_MAIN, T0);
    synth_enter(p, M_A, T0 + 1000000); /* charge */
    int64_t fork = synth_fork(p, T0 + 1500000);
    synth_exit(p, M_A, T0 + 29082000);
    synth_exit(p, M_MAIN, T0 + 30000000);
    synth_seg_t *r = &segs[1]; /* doFilter { handle } in the payments JVM */
    cmr_parent_link_t link = {(int64_t)A1, 50, fork};
    synth_seg_init(r, tid, A2, 51, 7, "payment-worker", &link);
    synth_enter(r, M_HANDLER, T0 + 3000000);
    synth_enter(r, M_B, T0 + 3006000);
    synth_exit(r, M_B, T0 + 25904000);
    synth_exit(r, M_HANDLER, T0 + 25911000);
    stream_t st = {0};
    cmr_tree_t t;
    build_tree(segs, 2, &st, &t);
    assert_int_equal(nchildren(&t, NULL), 1);
    const cmr_tree_node_t *m = child(&t, NULL, 0), *charge = child(&t, m, 0);
    const cmr_tree_node_t *filter = child(&t, charge, 0), *handle = child(&t, filter, 0);
    assert_int_equal(charge->method_id, M_A);
    assert_int_equal(charge->total_ns, 28082000);
    assert_int_equal(charge->wait_ns, 22911000);
    assert_int_equal(charge->self_ns, 28082000 - 22911000);
    assert_false(charge->remote);
    assert_false(charge->async);
    assert_int_equal(filter->method_id, M_HANDLER);
    assert_true(filter->remote);
    assert_false(filter->async);
    assert_int_equal(filter->total_ns, 22911000);
    assert_int_equal(filter->self_ns, 22911000 - 22898000);
    assert_int_equal(filter->wait_ns, 0);
    assert_false(handle->remote);
    assert_int_equal(handle->self_ns, 22898000);
    /* the wait is the caller's only: main subtracts charge's total as before */
    assert_int_equal(m->wait_ns, 0);
    assert_int_equal(m->self_ns, 30000000 - 28082000);

    /* text: self without the wait, the wait as a note, the callee marked remote */
    cmr_names_t *n = cmr_names_new();
    char *buf = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&buf, &len);
    cmr_ingest_print_tree(mf, n, &t);
    fclose(mf);
    char *l = line_with(buf, "      28.082      5.171  ");
    assert_non_null(l);
    assert_non_null(strstr(l, "  wait 22.911"));
    assert_null(strstr(l, "remote"));
    free(l);
    l = line_with(buf, "      22.911      0.013  ");
    assert_non_null(l);
    assert_non_null(strstr(l, "] remote"));
    assert_null(strstr(l, "async"));
    assert_null(strstr(l, "wait"));
    free(l);
    free(buf);

    /* JSON: wait_ns on every node, the callee "async": false, "remote": true */
    char *js = cmr_ingest_tree_json(n, &t);
    json_error_t je;
    json_t *j = json_loads(js, 0, &je);
    assert_non_null(j);
    free(js);
    json_t *jm = json_array_get(json_object_get(j, "roots"), 0);
    json_t *jc = json_array_get(json_object_get(jm, "children"), 0);
    json_t *jf = json_array_get(json_object_get(jc, "children"), 0);
    assert_int_equal(json_integer_value(json_object_get(jm, "wait_ns")), 0);
    assert_true(json_is_false(json_object_get(jm, "remote")));
    assert_int_equal(json_integer_value(json_object_get(jc, "wait_ns")), 22911000);
    assert_int_equal(json_integer_value(json_object_get(jc, "self_ns")), 5171000);
    assert_true(json_is_false(json_object_get(jc, "remote")));
    assert_true(json_is_false(json_object_get(jf, "async")));
    assert_true(json_is_true(json_object_get(jf, "remote")));
    assert_int_equal(json_integer_value(json_object_get(jf, "wait_ns")), 0);
    json_decref(j);

    /* Chrome export: still valid; the wait in args, the callee's category */
    char *chrome = cmr_ingest_export_chrome(n, &t);
    j = json_loads(chrome, 0, &je);
    assert_non_null(j);
    free(chrome);
    json_t *evs = json_object_get(j, "traceEvents");
    int waits = 0, remotes = 0;
    for (size_t i = 0; i < json_array_size(evs); i++) {
        json_t *e = json_array_get(evs, i);
        if (strcmp(json_string_value(json_object_get(e, "ph")), "X"))
            continue;
        json_t *args = json_object_get(e, "args");
        assert_true(json_is_integer(json_object_get(args, "wait_ns")));
        waits += json_integer_value(json_object_get(args, "wait_ns")) == 22911000;
        remotes += !strcmp(json_string_value(json_object_get(e, "cat")), "call,remote");
    }
    assert_int_equal(waits, 1);
    assert_int_equal(remotes, 1);
    json_decref(j);
    cmr_names_free(n);
    cmr_tree_free(&t);
    stream_free(&st);
    for (int i = 0; i < 2; i++)
        synth_seg_free(&segs[i]);
}

/* An HTTP client library's call node (it has a url.full attribute) returns with the
 * response: the callee under it was waited for even when its method ran on longer (closing
 * the exchange on a loaded machine), so it is synchronous and the wait is what overlaps the
 * call. The same callee under a plain call that it outlasts is async, as before. */
static void test_remote_client_call_outlasted(void **state)
{
    (void)state;
    for (int with_url = 0; with_url < 2; with_url++) {
        uint8_t tid[16];
        synth_trace_id(110 + (uint64_t)with_url, tid);
        synth_seg_t segs[2];
        synth_seg_t *p = &segs[0];
        synth_seg_init(p, tid, A1, 60, 1, "pricing", NULL);
        synth_enter(p, M_MAIN, T0);                 /* seq 0 */
        synth_enter(p, M_A, T0 + 1000000);          /* seq 1: the client's call */
        int64_t fork = synth_fork(p, T0 + 1100000); /* seq 2 */
        synth_exit(p, M_A, T0 + 4000000);           /* response after 3 ms */
        synth_exit(p, M_MAIN, T0 + 5000000);
        synth_seg_t *r = &segs[1];
        cmr_parent_link_t link = {(int64_t)A1, 60, fork};
        synth_seg_init(r, tid, A2, 61, 7, "price-worker", &link);
        synth_enter(r, M_HANDLER, T0 + 2000000);
        synth_exit(r, M_HANDLER, T0 + 7000000); /* 5 ms: it outlasts the call */
        stream_t st = {0};
        stream_add(&st, &segs[0], 16);
        stream_add(&st, &segs[1], 16);
        cmr_node_attr_t url[] = {{1, CMR_NODE_ATTR_URL, "http://127.0.0.1:1/price"}};
        if (with_url)
            st.msgs[0][0].node_attrs = (cmr_node_attrs_t){url, 1};
        stream_flatten(&st);
        cmr_tree_t t;
        assert_int_equal(cmr_tree_build(st.flat, st.nflat, &t), 0);
        const cmr_tree_node_t *m = child(&t, NULL, 0), *call = child(&t, m, 0), *callee = child(&t, call, 0);
        assert_int_equal(call->method_id, M_A);
        assert_int_equal(callee->method_id, M_HANDLER);
        assert_true(callee->remote);
        if (with_url) {
            assert_false(callee->async);
            assert_int_equal(call->wait_ns, 2000000); /* [2 ms, 4 ms]: clipped to the call */
            assert_int_equal(call->self_ns, 1000000);
        } else {
            assert_true(callee->async);
            assert_int_equal(call->wait_ns, 0);
        }
        cmr_tree_free(&t);
        st.msgs[0][0].node_attrs = (cmr_node_attrs_t){NULL, 0};
        stream_free(&st);
        synth_seg_free(&segs[0]);
        synth_seg_free(&segs[1]);
    }
}

/* Three remote calls from one call, two of them at once: their union counts once. */
static void test_remote_overlap_union(void **state)
{
    (void)state;
    uint8_t tid[16];
    synth_trace_id(101, tid);
    synth_seg_t segs[4];
    synth_seg_t *p = &segs[0];
    synth_seg_init(p, tid, A1, 60, 1, "main", NULL);
    synth_enter(p, M_A, T0);
    int64_t f1 = synth_fork(p, T0 + 100), f2 = synth_fork(p, T0 + 200), f3 = synth_fork(p, T0 + 300);
    synth_enter(p, M_B, T0 + 9200); /* a synchronous call in the same thread */
    synth_exit(p, M_B, T0 + 9700);
    synth_exit(p, M_A, T0 + 10000);
    remote_call(&segs[1], p, f1, A2, 61, M_HANDLER, T0 + 1000, T0 + 5000);
    remote_call(&segs[2], p, f2, A2, 62, M_HANDLER, T0 + 3000, T0 + 7000);
    remote_call(&segs[3], p, f3, A2, 63, M_HANDLER, T0 + 8000, T0 + 9000);
    stream_t st = {0};
    cmr_tree_t t;
    build_tree(segs, 4, &st, &t);
    const cmr_tree_node_t *a = child(&t, NULL, 0);
    assert_int_equal(a->method_id, M_A);
    assert_int_equal(nchildren(&t, a), 4);
    for (int k = 0; k < 3; k++) {
        assert_true(child(&t, a, k)->remote);
        assert_false(child(&t, a, k)->async);
    }
    assert_int_equal(child(&t, a, 3)->method_id, M_B);
    assert_false(child(&t, a, 3)->remote);
    /* 1000..5000 and 3000..7000 are 1000..7000 (6000, not 4000 + 4000), then 8000..9000 */
    assert_int_equal(a->wait_ns, 6000 + 1000);
    assert_int_equal(a->self_ns, 10000 - 500 - 7000);
    cmr_tree_free(&t);
    stream_free(&st);
    for (int i = 0; i < 4; i++)
        synth_seg_free(&segs[i]);
}

/* Clocks of two hosts: a callee that starts before its caller or ends after it is clipped
 * to the caller; one wholly outside adds nothing; one longer than its caller was not
 * waited for (async, remote). Self time never goes negative. */
static void test_remote_clock_skew_clipped(void **state)
{
    (void)state;
    uint8_t tid[16];
    synth_trace_id(102, tid);
    synth_seg_t segs[5];
    synth_seg_t *p = &segs[0];
    synth_seg_init(p, tid, A1, 70, 1, "main", NULL);
    synth_enter(p, M_A, T0 + 1000);
    int64_t f1 = synth_fork(p, T0 + 1100), f2 = synth_fork(p, T0 + 1200), f3 = synth_fork(p, T0 + 1300),
            f4 = synth_fork(p, T0 + 1400);
    synth_exit(p, M_A, T0 + 6000);                                          /* 5000 */
    remote_call(&segs[1], p, f1, A2, 71, M_HANDLER, T0 + 500, T0 + 2500);   /* 2000, from 500 before */
    remote_call(&segs[2], p, f2, A2, 72, M_HANDLER, T0 + 5000, T0 + 7000);  /* 2000, to 1000 after */
    remote_call(&segs[3], p, f3, A2, 73, M_HANDLER, T0 + 7000, T0 + 8000);  /* 1000, wholly after */
    remote_call(&segs[4], p, f4, A2, 74, M_HANDLER, T0 + 2000, T0 + 12000); /* 10000: outlasts it */
    stream_t st = {0};
    cmr_tree_t t;
    build_tree(segs, 5, &st, &t);
    const cmr_tree_node_t *a = child(&t, NULL, 0);
    assert_int_equal(a->method_id, M_A);
    assert_int_equal(a->total_ns, 5000);
    assert_int_equal(nchildren(&t, a), 4);
    int sync = 0, async = 0;
    for (int k = 0; k < 4; k++) {
        const cmr_tree_node_t *c = child(&t, a, k);
        assert_true(c->remote);
        if (c->async) {
            async++;
            assert_int_equal(c->total_ns, 10000);
        } else {
            sync++;
        }
    }
    assert_int_equal(sync, 3);
    assert_int_equal(async, 1);
    /* 1000..2500 (1500) + 5000..6000 (1000); 7000..8000 is outside; the long one is async */
    assert_int_equal(a->wait_ns, 1500 + 1000);
    assert_int_equal(a->self_ns, 5000 - 2500);
    cmr_tree_free(&t);
    stream_free(&st);
    for (int i = 0; i < 5; i++)
        synth_seg_free(&segs[i]);

    /* a callee that overlaps the caller's own synchronous child (skew): 1000 - 800 - 900 */
    synth_trace_id(103, tid);
    synth_seg_init(p, tid, A1, 80, 1, "main", NULL);
    synth_enter(p, M_A, T0);
    int64_t f = synth_fork(p, T0 + 50);
    synth_enter(p, M_B, T0 + 100);
    synth_exit(p, M_B, T0 + 900);
    synth_exit(p, M_A, T0 + 1000);
    remote_call(&segs[1], p, f, A2, 81, M_HANDLER, T0 + 50, T0 + 950);
    st = (stream_t){0};
    build_tree(segs, 2, &st, &t);
    a = child(&t, NULL, 0);
    assert_int_equal(a->wait_ns, 900);
    assert_int_equal(a->self_ns, 0);
    cmr_tree_free(&t);
    stream_free(&st);
    for (int i = 0; i < 2; i++)
        synth_seg_free(&segs[i]);
}

/* A FORK to another thread of the same JVM stays async even when the task lies within
 * its caller: not subtracted, no wait. */
static void test_fork_in_jvm_not_subtracted(void **state)
{
    (void)state;
    uint8_t tid[16];
    synth_trace_id(104, tid);
    synth_seg_t segs[2];
    synth_seg_t *p = &segs[0];
    synth_seg_init(p, tid, A1, 90, 1, "main", NULL);
    synth_enter(p, M_A, T0);
    int64_t f = synth_fork(p, T0 + 100);
    synth_exit(p, M_A, T0 + 10000);
    cmr_parent_link_t l = {(int64_t)A1, 90, f};
    synth_seg_init(&segs[1], tid, A1, 91, 22, "pool-1-thread-2", &l);
    synth_enter(&segs[1], M_TASK, T0 + 200);
    synth_exit(&segs[1], M_TASK, T0 + 5000);
    stream_t st = {0};
    cmr_tree_t t;
    build_tree(segs, 2, &st, &t);
    const cmr_tree_node_t *a = child(&t, NULL, 0), *task = child(&t, a, 0);
    assert_int_equal(task->method_id, M_TASK);
    assert_true(task->async);
    assert_false(task->remote);
    assert_int_equal(a->wait_ns, 0);
    assert_int_equal(a->self_ns, 10000);
    char *js = tree_json(&t);
    json_error_t je;
    json_t *j = json_loads(js, 0, &je);
    assert_non_null(j);
    free(js);
    json_t *jt = json_array_get(json_object_get(json_array_get(json_object_get(j, "roots"), 0), "children"), 0);
    assert_true(json_is_true(json_object_get(jt, "async")));
    assert_true(json_is_false(json_object_get(jt, "remote")));
    json_decref(j);
    cmr_tree_free(&t);
    stream_free(&st);
    for (int i = 0; i < 2; i++)
        synth_seg_free(&segs[i]);
}

static void test_out_of_order_and_duplicates(void **state)
{
    (void)state;
    synth_seg_t segs[4];
    build_multi(segs, 3);
    stream_t st = {0};
    for (int i = 0; i < 4; i++)
        stream_add(&st, &segs[i], 1);
    stream_flatten(&st);
    cmr_tree_t ref;
    assert_int_equal(cmr_tree_build(st.flat, st.nflat, &ref), 0);
    char *want = tree_json(&ref);
    /* reversed, shuffled, with every batch twice */
    size_t n = st.nflat;
    cmr_ingest_batch_t *mix = calloc(2 * n, sizeof *mix);
    srand(42);
    for (int round = 0; round < 20; round++) {
        for (size_t i = 0; i < n; i++)
            mix[i] = mix[n + i] = st.flat[n - 1 - i];
        for (size_t i = 2 * n - 1; i > 0; i--) {
            size_t j = (size_t)rand() % (i + 1);
            cmr_ingest_batch_t tmp = mix[i];
            mix[i] = mix[j];
            mix[j] = tmp;
        }
        cmr_tree_t t;
        assert_int_equal(cmr_tree_build(mix, 2 * n, &t), 0);
        char *got = tree_json(&t);
        assert_string_equal(got, want);
        free(got);
        assert_int_equal(t.batches, n);
        cmr_tree_free(&t);
    }
    /* the summary is order independent too, and duplicates are refused */
    cmr_trace_state_t *a = cmr_trace_state_new(st.flat[0].trace_id), *b = cmr_trace_state_new(st.flat[0].trace_id);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(cmr_trace_state_apply(a, &st.flat[i], NULL, NULL, NULL), 1);
    for (size_t i = 0; i < 2 * n; i++)
        cmr_trace_state_apply(b, &mix[i], NULL, NULL, NULL);
    assert_int_equal(cmr_trace_state_apply(a, &st.flat[0], NULL, NULL, NULL), 0);
    cmr_trace_summary_t sa, sb;
    cmr_trace_state_summary(a, &sa);
    cmr_trace_state_summary(b, &sb);
    uint8_t ea[CMR_TRACE_SUMMARY_MAX_LEN], eb[CMR_TRACE_SUMMARY_MAX_LEN];
    size_t la = cmr_trace_summary_encode(&sa, ea);
    assert_int_equal(la, CMR_TRACE_SUMMARY_LEN); /* no diagnosis: the old format */
    assert_int_equal(cmr_trace_summary_encode(&sb, eb), la);
    assert_memory_equal(ea, eb, la);
    assert_true(sa.flags & CMR_TRACE_COMPLETE);
    assert_int_equal(sa.root_method, M_MAIN);
    assert_int_equal(sa.agents, 2);
    assert_int_equal(sa.start_ns, (int64_t)T0);
    assert_int_equal(sa.end_ns, (int64_t)T0 + 3500);
    cmr_trace_state_free(a);
    cmr_trace_state_free(b);
    free(mix);
    free(want);
    cmr_tree_free(&ref);
    stream_free(&st);
    for (int i = 0; i < 4; i++)
        synth_seg_free(&segs[i]);
}

static void test_missing_parent_then_arrives(void **state)
{
    (void)state;
    synth_seg_t segs[4];
    build_multi(segs, 4);
    stream_t st = {0};
    stream_add(&st, &segs[1], 8); /* only the pool task: its parent has not arrived */
    stream_flatten(&st);
    cmr_tree_t t;
    assert_int_equal(cmr_tree_build(st.flat, st.nflat, &t), 0);
    assert_int_equal(nchildren(&t, NULL), 1);
    const cmr_tree_node_t *miss = child(&t, NULL, 0);
    assert_int_equal(miss->kind, CMR_NODE_MISSING);
    assert_int_equal(miss->agent_id, A1);
    assert_int_equal(miss->segment_id, 10);
    assert_int_equal(child(&t, miss, 0)->method_id, M_TASK);
    assert_false(t.complete);
    cmr_tree_free(&t);
    cmr_trace_state_t *s = cmr_trace_state_new(st.flat[0].trace_id);
    cmr_trace_state_apply(s, &st.flat[0], NULL, NULL, NULL);
    cmr_trace_summary_t sum;
    cmr_trace_state_summary(s, &sum);
    assert_false(sum.flags & CMR_TRACE_HAS_ROOT);
    assert_false(sum.flags & CMR_TRACE_COMPLETE);
    cmr_trace_state_free(s);
    stream_free(&st);
    /* the parent arrives: linked under A */
    stream_add(&st, &segs[0], 8);
    stream_add(&st, &segs[1], 8);
    stream_flatten(&st);
    assert_int_equal(cmr_tree_build(st.flat, st.nflat, &t), 0);
    assert_int_equal(child(&t, child(&t, child(&t, NULL, 0), 0), 0)->method_id, M_TASK);
    cmr_tree_free(&t);
    stream_free(&st);
    for (int i = 0; i < 4; i++)
        synth_seg_free(&segs[i]);
}

static void test_lost_batch_and_exits(void **state)
{
    (void)state;
    uint8_t tid[16];
    synth_trace_id(5, tid);
    synth_seg_t s;
    synth_seg_init(&s, tid, A1, 1, 1, "main", NULL);
    synth_enter(&s, M_MAIN, T0);
    for (int i = 0; i < 10; i++) {
        synth_enter(&s, M_A + (uint64_t)i, T0 + 10 + (uint64_t)i * 10);
        synth_exit(&s, M_A + (uint64_t)i, T0 + 15 + (uint64_t)i * 10);
    }
    synth_exit(&s, M_MAIN, T0 + 500);
    stream_t st = {0};
    stream_add(&st, &s, 4);
    stream_flatten(&st);
    /* drop batch 2 (events 8..11): a call whose exit is lost, an exit without its enter */
    cmr_ingest_batch_t *v = calloc(st.nflat, sizeof *v);
    size_t n = 0;
    for (size_t i = 0; i < st.nflat; i++)
        if (st.flat[i].batch_seq != 2)
            v[n++] = st.flat[i];
    cmr_tree_t t;
    assert_int_equal(cmr_tree_build(v, n, &t), 0);
    assert_int_equal(t.gaps, 1);
    assert_false(t.complete);
    const cmr_tree_node_t *m = child(&t, NULL, 0);
    assert_int_equal(m->method_id, M_MAIN);
    assert_false(m->running);
    assert_int_equal(m->total_ns, 500);
    int lost = 0;
    for (size_t i = 0; i < t.count; i++)
        lost += t.nodes[i].lost_exit;
    assert_int_equal(lost, 1);
    assert_int_equal(t.unmatched, 1);
    cmr_tree_free(&t);
    /* the root still running: only the first two batches */
    n = 0;
    for (size_t i = 0; i < st.nflat; i++)
        if (st.flat[i].batch_seq < 2)
            v[n++] = st.flat[i];
    assert_int_equal(cmr_tree_build(v, n, &t), 0);
    m = child(&t, NULL, 0);
    assert_true(m->running);
    assert_false(t.complete);
    assert_int_equal(m->end_ns, (int64_t)T0 + 40); /* the latest event seen: A3's enter */
    cmr_tree_free(&t);
    free(v);
    stream_free(&st);
    synth_seg_free(&s);
}

/* Issue 15: a segment that did not record calls (EventBatch.calls_not_recorded, truncated_by)
 * marks its trace truncated with the counts, in the summary (counted once per batch, kept
 * across the encoding, given back to a state rebuilt from stored batches) and in what the
 * list shows; a root segment whose first batch was lost is named as such, never as
 * method#0000000000000000. */
static void test_truncated_and_root_lost(void **state)
{
    (void)state;
    synth_seg_t s;
    build_nested(&s, 15);
    cmr_event_batch_t *b;
    size_t n = synth_batches(&s, 3, &b);
    assert_int_equal(n, 3);
    b[n - 1].calls_not_recorded = 7;
    b[n - 1].truncated_by = CMR_TRUNCATED_BY_LIMIT | 0x40; /* an unknown bit is left out */
    b[1].calls_not_recorded = 2;
    b[1].truncated_by = CMR_TRUNCATED_BY_RING;
    b[0].diagnosis_id = 0x77; /* the parts after the loss stay readable */
    cmr_ingest_batch_t ib[3];
    char err[256];
    cmr_trace_state_t *st = cmr_trace_state_new(b[0].trace_id);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(cmr_ingest_batch_from_msg(&b[i], &ib[i], err, sizeof err), 0);
        assert_int_equal(ib[i].calls_not_recorded, 0); /* the stored batch does not carry it */
        cmr_ingest_batch_loss(&b[i], &ib[i]);
        ib[i].diagnosis_id = (uint64_t)b[i].diagnosis_id;
        assert_int_equal(cmr_trace_state_apply(st, &ib[i], NULL, NULL, NULL), 1);
    }
    assert_int_equal(cmr_trace_state_apply(st, &ib[n - 1], NULL, NULL, NULL), 0); /* counted once */
    cmr_trace_summary_t sum, back;
    cmr_trace_state_summary(st, &sum);
    assert_true(sum.flags & CMR_TRACE_TRUNCATED);
    assert_true(sum.flags & CMR_TRACE_COMPLETE); /* what it recorded is whole: complete and truncated */
    assert_false(sum.flags & CMR_TRACE_ROOT_LOST);
    assert_int_equal(sum.calls_not_recorded, 9);
    assert_int_equal(sum.truncated_by, CMR_TRUNCATED_BY_LIMIT | CMR_TRUNCATED_BY_RING);
    uint8_t enc[CMR_TRACE_SUMMARY_MAX_LEN];
    size_t len = cmr_trace_summary_encode(&sum, enc);
    assert_int_equal(len, CMR_TRACE_SUMMARY_LEN + CMR_TRACE_SUMMARY_LOSS_LEN + 4 + 8);
    assert_int_equal(cmr_trace_summary_decode(enc, len, &back), 0);
    assert_int_equal(back.calls_not_recorded, 9);
    assert_int_equal(back.truncated_by, 3);
    assert_int_equal(back.ndiagnoses, 1);
    assert_int_equal(back.diagnoses[0], 0x77);
    cmr_trace_summary_t cut;
    assert_int_equal(cmr_trace_summary_decode(enc, CMR_TRACE_SUMMARY_LEN + 4, &cut), -1); /* cut in the loss */

    /* rebuilt from the stored batches (no loss in them) and the stored summary: the same */
    cmr_trace_state_t *re = cmr_trace_state_new(b[0].trace_id);
    for (size_t i = 0; i < n; i++) {
        cmr_ingest_batch_t plain = ib[i];
        plain.calls_not_recorded = 0;
        plain.truncated_by = 0;
        plain.diagnosis_id = 0;
        assert_int_equal(cmr_trace_state_apply(re, &plain, NULL, NULL, NULL), 1);
    }
    cmr_trace_state_add_diagnosis(re, 0x77);
    cmr_trace_state_seed_loss(re, &back);
    cmr_trace_summary_t again;
    cmr_trace_state_summary(re, &again);
    uint8_t enc2[CMR_TRACE_SUMMARY_MAX_LEN];
    assert_int_equal(cmr_trace_summary_encode(&again, enc2), len);
    assert_memory_equal(enc, enc2, len);

    /* shown: the list's text and JSON, the tree's header */
    cmr_names_t *names = cmr_names_new();
    char *buf = NULL;
    size_t blen = 0;
    FILE *mf = open_memstream(&buf, &blen);
    cmr_ingest_print_list(mf, names, &sum, 1);
    fclose(mf);
    assert_non_null(strstr(buf, "{truncated: 9 calls not recorded, size limit and ring full}"));
    free(buf);
    char *j = cmr_ingest_list_json(names, &sum, 1);
    assert_non_null(
        strstr(j, "\"truncated\":true,\"calls_not_recorded\":9,\"truncated_by\":[\"size_limit\",\"ring_full\"]"));
    free(j);
    cmr_tree_t t;
    assert_int_equal(cmr_tree_build(ib, n, &t), 0);
    t.calls_not_recorded = sum.calls_not_recorded; /* what cmr_ingest_view_tree copies */
    t.truncated_by = sum.truncated_by;
    buf = NULL;
    mf = open_memstream(&buf, &blen);
    cmr_ingest_print_tree(mf, names, &t);
    fclose(mf);
    assert_non_null(strstr(buf, "truncated: 9 calls not recorded (size limit and ring full)"));
    free(buf);
    j = cmr_ingest_tree_json(names, &t);
    assert_non_null(strstr(j, "\"truncated\":true,\"calls_not_recorded\":9"));
    free(j);
    cmr_tree_free(&t);

    /* the root segment without its first batch: named, not method#0000000000000000 */
    cmr_trace_state_t *lost = cmr_trace_state_new(b[0].trace_id);
    for (size_t i = 1; i < n; i++)
        assert_int_equal(cmr_trace_state_apply(lost, &ib[i], NULL, NULL, NULL), 1);
    cmr_trace_state_summary(lost, &sum);
    assert_true(sum.flags & CMR_TRACE_HAS_ROOT);
    assert_true(sum.flags & CMR_TRACE_ROOT_LOST);
    assert_false(sum.flags & CMR_TRACE_COMPLETE);
    assert_int_equal(sum.root_method, 0);
    buf = NULL;
    mf = open_memstream(&buf, &blen);
    cmr_ingest_print_list(mf, names, &sum, 1);
    fclose(mf);
    assert_non_null(strstr(buf, "(root call lost)"));
    assert_null(strstr(buf, "method#"));
    free(buf);
    j = cmr_ingest_list_json(names, &sum, 1);
    assert_non_null(strstr(j, "\"root_lost\":true,\"root_method\":null"));
    assert_null(strstr(j, "method#"));
    free(j);

    cmr_names_free(names);
    cmr_trace_state_free(lost);
    cmr_trace_state_free(re);
    cmr_trace_state_free(st);
    synth_batches_free(b, n);
    synth_seg_free(&s);
}

/* The value of call attribute `key` of node x, NULL when it has none. */
static const char *node_attr(const cmr_tree_t *t, const cmr_tree_node_t *x, const char *key)
{
    for (uint32_t a = 0; a < x->nattrs; a++)
        if (!strcmp(t->names[t->attrs[x->attrs + a].key], key))
            return t->names[t->attrs[x->attrs + a].value];
    return NULL;
}

/* Call attributes (a JDBC call's db.statement) reach the call whose ENTER they name, also
 * when they travel in a later batch than that ENTER; invalid ones (bad key, a call the
 * segment has not reached, a value that is not UTF-8) are left out and counted, one that
 * names an exit is dropped by the tree; the stored batch (version 3) keeps them, and a
 * store's corrupt block is refused. */
static void test_call_attributes(void **state)
{
    (void)state;
    synth_seg_t s;
    build_nested(&s, 7); /* 0 enter main, 1 enter A, 2 enter B, 3-4 exits, 5 enter A, 6-7 exits */
    cmr_event_batch_t *b;
    size_t n = synth_batches(&s, 3, &b);
    assert_int_equal(n, 3);
    cmr_node_attr_t na[] = {
        {2, CMR_NODE_ATTR_DB_STATEMENT, "select a from t where id = ?"},
        {5, CMR_NODE_ATTR_DB_STATEMENT, "update t set a = ?"},
        {3, CMR_NODE_ATTR_DB_STATEMENT, "an exit's"},
        {9, CMR_NODE_ATTR_DB_STATEMENT, "not reached yet"},
        {5, "Bad Key", "x"},
        {5, "db.system", "\xff"},
    };
    b[1].node_attrs = (cmr_node_attrs_t){na, 6};
    cmr_ingest_batch_t ib[3];
    char err[256];
    for (size_t i = 0; i < n; i++)
        assert_int_equal(cmr_ingest_batch_from_msg(&b[i], &ib[i], err, sizeof err), 0);
    assert_int_equal(ib[1].attrs_dropped, 3);
    assert_string_equal(ib[1].attrs_drop_key, "call attribute");

    cmr_tree_t t;
    assert_int_equal(cmr_tree_build(ib, n, &t), 0);
    const cmr_tree_node_t *m = child(&t, NULL, 0), *a1 = child(&t, m, 0), *bb = child(&t, a1, 0), *a2 = child(&t, m, 1);
    assert_int_equal(bb->method_id, M_B);
    assert_string_equal(node_attr(&t, bb, CMR_NODE_ATTR_DB_STATEMENT), "select a from t where id = ?");
    assert_string_equal(node_attr(&t, a2, CMR_NODE_ATTR_DB_STATEMENT), "update t set a = ?");
    assert_null(node_attr(&t, m, CMR_NODE_ATTR_DB_STATEMENT));
    assert_null(node_attr(&t, a1, CMR_NODE_ATTR_DB_STATEMENT));
    assert_int_equal(t.nattrs, 2);

    /* stored and read back: the same tree */
    uint8_t key[CMR_INGEST_BATCH_KEY_LEN], *val[3];
    size_t vlen[3];
    cmr_ingest_batch_t back[3];
    for (size_t i = 0; i < n; i++) {
        cmr_ingest_batch_key(&ib[i], key);
        assert_int_equal(cmr_ingest_batch_encode(&ib[i], &val[i], &vlen[i]), 0);
        assert_int_equal(val[i][0], i == 1 ? 3 : 2);
        assert_int_equal(cmr_ingest_batch_decode(key, sizeof key, val[i], vlen[i], &back[i]), 0);
        assert_int_equal(back[i].events_len, ib[i].events_len);
    }
    cmr_tree_t t2;
    assert_int_equal(cmr_tree_build(back, n, &t2), 0);
    assert_int_equal(t2.nattrs, 2);
    m = child(&t2, NULL, 0), a1 = child(&t2, m, 0), bb = child(&t2, a1, 0), a2 = child(&t2, m, 1);
    assert_string_equal(node_attr(&t2, bb, CMR_NODE_ATTR_DB_STATEMENT), "select a from t where id = ?");
    assert_string_equal(node_attr(&t2, a2, CMR_NODE_ATTR_DB_STATEMENT), "update t set a = ?");

    /* a block that runs past its length, or a length past the value: refused */
    cmr_ingest_batch_key(&ib[1], key);
    size_t name_end = CMR_INGEST_BATCH_HDR_LEN + ib[1].name_len;
    uint32_t alen = cmr_le32(val[1] + name_end);
    cmr_put_le32(val[1] + name_end, alen - 1);
    assert_int_equal(cmr_ingest_batch_decode(key, sizeof key, val[1], vlen[1], &back[1]), -1);
    cmr_put_le32(val[1] + name_end, (uint32_t)vlen[1]);
    assert_int_equal(cmr_ingest_batch_decode(key, sizeof key, val[1], vlen[1], &back[1]), -1);
    cmr_tree_free(&t);
    cmr_tree_free(&t2);
    for (size_t i = 0; i < n; i++)
        free(val[i]);
    synth_batches_free(b, n);
    synth_seg_free(&s);
}

static void test_batch_validation_and_roundtrip(void **state)
{
    (void)state;
    synth_seg_t s;
    build_nested(&s, 6);
    cmr_event_batch_t *b;
    size_t n = synth_batches(&s, 100, &b);
    assert_int_equal(n, 1);
    cmr_ingest_batch_t ib, back;
    char err[256];
    assert_int_equal(cmr_ingest_batch_from_msg(&b[0], &ib, err, sizeof err), 0);
    uint8_t key[CMR_INGEST_BATCH_KEY_LEN], *val;
    size_t vlen;
    cmr_ingest_batch_key(&ib, key);
    assert_int_equal(cmr_ingest_batch_encode(&ib, &val, &vlen), 0);
    assert_int_equal(cmr_ingest_batch_decode(key, sizeof key, val, vlen, &back), 0);
    assert_int_equal(back.event_count, ib.event_count);
    assert_int_equal(back.events_len, ib.events_len);
    assert_memory_equal(back.events, ib.events, ib.events_len);
    assert_int_equal(back.name_len, 4);
    assert_true(back.last);
    assert_int_equal(cmr_ingest_batch_decode(key, sizeof key, val, CMR_INGEST_BATCH_HDR_LEN - 1, &back), -1);
    assert_int_equal(cmr_ingest_batch_decode(key, sizeof key, val, CMR_INGEST_BATCH_HDR_LEN + 3, &back), -1);
    val[0] = 9;
    assert_int_equal(cmr_ingest_batch_decode(key, sizeof key, val, vlen, &back), -1);
    free(val);
    b[0].event_count = 3; /* does not match the bytes */
    assert_int_equal(cmr_ingest_batch_from_msg(&b[0], &ib, err, sizeof err), -1);
    assert_non_null(strstr(err, "events: bytes after the last event"));
    b[0].event_count = 9;
    assert_int_equal(cmr_ingest_batch_from_msg(&b[0], &ib, err, sizeof err), -1);
    assert_non_null(strstr(err, "events: fewer events"));
    b[0].event_count = 1; /* the bytes hold more than one event */
    assert_int_equal(cmr_ingest_batch_from_msg(&b[0], &ib, err, sizeof err), -1);
    b[0].event_count = 8;
    memset(b[0].trace_id, 0, 16);
    assert_int_equal(cmr_ingest_batch_from_msg(&b[0], &ib, err, sizeof err), -1);
    synth_trace_id(6, b[0].trace_id);
    b[0].batch_seq = -1;
    assert_int_equal(cmr_ingest_batch_from_msg(&b[0], &ib, err, sizeof err), -1);
    b[0].batch_seq = 0;
    b[0].parent = malloc(sizeof *b[0].parent);
    *b[0].parent = (cmr_parent_link_t){(int64_t)A1, 1, 0};
    assert_int_equal(cmr_ingest_batch_from_msg(&b[0], &ib, err, sizeof err), -1);
    synth_batches_free(b, n);
    synth_seg_free(&s);
}

/* n 24-byte records, encoded as an EventBatch carries them (malloc'd, the caller frees). */
static uint8_t *pack_events(const uint8_t *records, uint32_t n, size_t *len)
{
    static cmr_events_encoder_t enc;
    uint8_t *out = malloc((size_t)n * CMR_EVENTS_MAX_ENCODED + 1);
    assert_non_null(out);
    assert_int_equal(cmr_events_pack(&enc, records, n, out, len), 0);
    return out;
}

/* Absurd depths, exits without entries and clocks going back do not break the walk. */
static void test_hostile_events(void **state)
{
    (void)state;
    uint8_t tid[16], ev[24 * 6];
    synth_trace_id(7, tid);
    cmr_event_t e[6] = {{1, T0, CMR_EVENT_FORK, 9},           {2, T0 + 1, CMR_EVENT_EXIT, 7},
                        {3, T0 + 2, CMR_EVENT_ENTER, 100000}, {4, T0 - 5, CMR_EVENT_ENTER, 0},
                        {5, T0 + 3, CMR_EVENT_FORK, 0},       {6, 0, CMR_EVENT_EXIT, 1}};
    for (int i = 0; i < 6; i++)
        cmr_event_write(ev, (size_t)i, &e[i]);
    size_t len;
    uint8_t *packed = pack_events(ev, 6, &len);
    cmr_ingest_batch_t b = {
        .agent_id = A1, .segment_id = 1, .event_count = 6, .events = packed, .events_len = len, .last = true};
    memcpy(b.trace_id, tid, 16);
    cmr_tree_t t;
    assert_int_equal(cmr_tree_build(&b, 1, &t), 0);
    for (size_t i = 0; i < t.count; i++)
        assert_true(t.nodes[i].total_ns >= 0);
    cmr_tree_free(&t);
    free(packed);
}

/* Random events in random batches: the assembly never crashes, and what it builds is
 * consistent (run under ASan and UBSan in CI). */
static void test_random_streams(void **state)
{
    (void)state;
    srand(7);
    for (int round = 0; round < 300; round++) {
        uint8_t tid[16];
        synth_trace_id(900 + (uint64_t)round, tid);
        size_t nb = 1 + (size_t)rand() % 12;
        cmr_ingest_batch_t *b = calloc(nb, sizeof *b);
        uint8_t **ev = calloc(nb, sizeof *ev);
        size_t total = 0;
        for (size_t i = 0; i < nb; i++) {
            uint32_t n = (uint32_t)(rand() % 40);
            ev[i] = malloc((size_t)n * CMR_EVENT_RECORD_SIZE + 1);
            for (uint32_t k = 0; k < n; k++) {
                cmr_event_t e = {(uint64_t)(rand() % 5), T0 + (uint64_t)(rand() % 1000), 1 + (uint32_t)(rand() % 4),
                                 (uint32_t)(rand() % 6)};
                cmr_event_write(ev[i], k, &e);
            }
            uint8_t *records = ev[i];
            ev[i] = pack_events(records, n, &b[i].events_len);
            free(records);
            memcpy(b[i].trace_id, tid, 16);
            b[i].agent_id = (uint64_t)(rand() % 2);
            b[i].segment_id = (uint64_t)(rand() % 4);
            b[i].batch_seq = rand() % 4;
            b[i].first_event_seq = rand() % 50;
            b[i].last = rand() % 2;
            b[i].event_count = n;
            b[i].events = ev[i];
            if (rand() % 2) {
                b[i].has_parent = true;
                b[i].parent_agent = (uint64_t)(rand() % 2);
                b[i].parent_segment = (uint64_t)(rand() % 4);
                b[i].parent_seq = rand() % 20 - 1;
            }
            total += n;
        }
        cmr_tree_t t;
        assert_int_equal(cmr_tree_build(b, nb, &t), 0);
        assert_true(t.count <= total + 2 * nb);
        for (size_t i = 0; i < t.count; i++) {
            assert_true(t.nodes[i].total_ns >= 0);
            assert_true(t.nodes[i].self_ns >= 0 && t.nodes[i].self_ns <= t.nodes[i].total_ns);
            assert_true(t.nodes[i].wait_ns >= 0 && t.nodes[i].wait_ns <= t.nodes[i].total_ns);
        }
        char *j = tree_json(&t);
        assert_non_null(j);
        free(j);
        cmr_trace_state_t *s = cmr_trace_state_new(tid);
        for (size_t i = 0; i < nb; i++)
            assert_true(cmr_trace_state_apply(s, &b[i], NULL, NULL, NULL) >= 0);
        cmr_trace_summary_t sum;
        cmr_trace_state_summary(s, &sum);
        assert_true(sum.end_ns >= sum.start_ns);
        cmr_trace_state_free(s);
        cmr_tree_free(&t);
        for (size_t i = 0; i < nb; i++)
            free(ev[i]);
        free(ev);
        free(b);
    }
}

static void test_exporters(void **state)
{
    (void)state;
    synth_seg_t segs[4];
    build_multi(segs, 8);
    stream_t st = {0};
    for (int i = 0; i < 4; i++)
        stream_add(&st, &segs[i], 4);
    stream_flatten(&st);
    cmr_tree_t t;
    assert_int_equal(cmr_tree_build(st.flat, st.nflat, &t), 0);
    cmr_names_t *n = cmr_names_new();
    cmr_method_entry_t me = {.method_id = M_MAIN,
                             .class_name = "com/example/App",
                             .method_name = "main",
                             .descriptor = "([Ljava/lang/String;)V"};
    cmr_names_put_method(n, &me);
    char *chrome = cmr_ingest_export_chrome(n, &t);
    json_error_t je;
    json_t *c = json_loads(chrome, 0, &je);
    assert_non_null(c);
    json_t *evs = json_object_get(c, "traceEvents");
    assert_true(json_is_array(evs));
    size_t calls = 0, x = 0;
    for (size_t i = 0; i < t.count; i++)
        calls += t.nodes[i].kind == CMR_NODE_CALL;
    bool saw_main = false;
    for (size_t i = 0; i < json_array_size(evs); i++) {
        json_t *e = json_array_get(evs, i);
        const char *ph = json_string_value(json_object_get(e, "ph"));
        assert_non_null(ph);
        if (strcmp(ph, "X"))
            continue;
        x++;
        assert_true(json_is_number(json_object_get(e, "ts")));
        assert_true(json_number_value(json_object_get(e, "dur")) >= 0);
        assert_true(json_is_integer(json_object_get(e, "pid")));
        assert_true(json_is_integer(json_object_get(e, "tid")));
        if (!strcmp(json_string_value(json_object_get(e, "name")), "com.example.App.main([Ljava/lang/String;)V"))
            saw_main = true;
    }
    assert_int_equal(x, calls);
    assert_true(saw_main);
    json_decref(c);
    free(chrome);

    char *otlp = cmr_ingest_export_otlp(n, &t);
    json_t *o = json_loads(otlp, 0, &je);
    assert_non_null(o);
    json_t *rs = json_object_get(o, "resourceSpans");
    assert_int_equal(json_array_size(rs), 2); /* two JVMs */
    char ids[64][17];
    char parents[64][17];
    size_t ns = 0;
    char trace_hex[33];
    cmr_hex(t.trace_id, 16, trace_hex);
    for (size_t r = 0; r < json_array_size(rs); r++) {
        json_t *ss = json_object_get(json_array_get(rs, r), "scopeSpans");
        json_t *spans = json_object_get(json_array_get(ss, 0), "spans");
        for (size_t i = 0; i < json_array_size(spans); i++) {
            json_t *s = json_array_get(spans, i);
            assert_string_equal(json_string_value(json_object_get(s, "traceId")), trace_hex);
            const char *sid = json_string_value(json_object_get(s, "spanId"));
            assert_int_equal(strlen(sid), 16);
            snprintf(ids[ns], 17, "%s", sid);
            snprintf(parents[ns], 17, "%s", json_string_value(json_object_get(s, "parentSpanId")));
            long long st_ns = strtoll(json_string_value(json_object_get(s, "startTimeUnixNano")), NULL, 10);
            long long en_ns = strtoll(json_string_value(json_object_get(s, "endTimeUnixNano")), NULL, 10);
            assert_true(st_ns >= (long long)T0 && en_ns >= st_ns);
            ns++;
        }
    }
    assert_int_equal(ns, calls);
    size_t roots = 0, remote = 0;
    for (size_t i = 0; i < ns; i++) {
        if (!parents[i][0]) {
            roots++;
            continue;
        }
        if (!strcmp(parents[i], "000000000badcafe")) {
            remote++;
            continue;
        }
        bool found = false;
        for (size_t k = 0; k < ns; k++)
            found = found || !strcmp(ids[k], parents[i]);
        assert_true(found);
    }
    assert_int_equal(roots, 1);
    assert_int_equal(remote, 1);
    json_decref(o);
    free(otlp);
    cmr_names_free(n);
    cmr_tree_free(&t);
    stream_free(&st);
    for (int i = 0; i < 4; i++)
        synth_seg_free(&segs[i]);
}

/* The name tables (cmr_u64map_t): growth past any initial size, replacement, unknown ids,
 * search by part of the name or by hex id (sorted). */
static void test_names_table(void **state)
{
    (void)state;
    cmr_names_t *n = cmr_names_new();
    char cls[64], buf[256];
    /* the nodes the agent writes itself are named from the start (cmr/ids.h) */
    assert_int_equal(cmr_names_count(n), 2);
    assert_string_equal(cmr_names_method(n, cmr_async_completion_id(true), buf, sizeof buf),
                        "jakarta.servlet.AsyncListener.onComplete(Ljakarta/servlet/AsyncEvent;)V");
    assert_true(cmr_method_is_async_completion(cmr_async_completion_id(false)));
    assert_false(cmr_method_is_async_completion(0x42));
    for (uint64_t i = 1; i <= 1000; i++) {
        snprintf(cls, sizeof cls, "com/ex/C%" PRIu64, i);
        cmr_method_entry_t m = {
            .method_id = (int64_t)(i * 0x10001), .class_name = cls, .method_name = "m", .descriptor = "()V"};
        assert_int_equal(cmr_names_put_method(n, &m), 0);
    }
    assert_int_equal(cmr_names_count(n), 1002);
    assert_string_equal(cmr_names_method(n, 7 * 0x10001, buf, sizeof buf), "com.ex.C7.m()V");
    assert_string_equal(cmr_names_method(n, 0x42, buf, sizeof buf), "method#0000000000000042");
    cmr_method_entry_t again = {
        .method_id = 7 * 0x10001, .class_name = "a/B", .method_name = "x", .descriptor = "(I)V"};
    assert_int_equal(cmr_names_put_method(n, &again), 0); /* replaces */
    assert_int_equal(cmr_names_count(n), 1002);
    assert_string_equal(cmr_names_method(n, 7 * 0x10001, buf, sizeof buf), "a.B.x(I)V");
    uint64_t *ids;
    size_t k = cmr_names_find_methods(n, "com.ex.C99", &ids); /* C99, C990 .. C999 */
    assert_int_equal(k, 11);
    for (size_t i = 1; i < k; i++)
        assert_true(ids[i - 1] < ids[i]);
    free(ids);
    k = cmr_names_find_methods(n, "00000000deadbeef", &ids); /* an id, known or not */
    assert_int_equal(k, 1);
    assert_int_equal(ids[0], 0xdeadbeef);
    free(ids);
    cmr_agent_registration_t r = {.agent_name = "shop", .hostname = "host-a", .pid = 42};
    assert_int_equal(cmr_names_put_agent(n, &r), 0);
    uint64_t a = cmr_agent_id("shop", "host-a", NULL);
    assert_string_equal(cmr_names_agent(n, a, buf, sizeof buf), "shop@host-a pid 42");
    assert_string_equal(cmr_names_agent(n, 5, buf, sizeof buf), "agent#0000000000000005");
    k = cmr_names_find_agents(n, "@host-a", &ids);
    assert_int_equal(k, 1);
    assert_int_equal(ids[0], a);
    free(ids);
    size_t len;
    char *v = cmr_names_agent_value(&r, &len);
    assert_int_equal(len, strlen("shop") + 1 + strlen("host-a") + 1 + 2 + 1 + 1); /* "shop\0host-a\042\0 " */
    assert_memory_equal(v, "shop\0host-a\00042\0 ", len);
    free(v);
    cmr_names_free(n);
}

/* The per-trace method set (cmr_u64map_t): every new method reported once, in any order. */
static void count_id(void *opaque, uint64_t id)
{
    (void)id;
    (*(int *)opaque)++;
}

static void test_state_method_set(void **state)
{
    (void)state;
    uint8_t tid[16];
    synth_trace_id(40, tid);
    synth_seg_t s;
    synth_seg_init(&s, tid, A1, 1, 1, "main", NULL);
    synth_enter(&s, 1, T0);
    for (uint64_t m = 2; m < 3000; m++) { /* 2998 distinct methods, each entered twice */
        synth_enter(&s, m, T0 + m * 10);
        synth_exit(&s, m, T0 + m * 10 + 1);
        synth_enter(&s, m, T0 + m * 10 + 2);
        synth_exit(&s, m, T0 + m * 10 + 3);
    }
    synth_exit(&s, 1, T0 + 40000);
    stream_t st = {0};
    stream_add(&st, &s, 100);
    stream_flatten(&st);
    cmr_trace_state_t *fw = cmr_trace_state_new(tid), *bw = cmr_trace_state_new(tid);
    int nfw = 0, nbw = 0, agents = 0;
    for (size_t i = 0; i < st.nflat; i++)
        assert_int_equal(cmr_trace_state_apply(fw, &st.flat[i], count_id, count_id, &nfw), 1);
    for (size_t i = st.nflat; i-- > 0;)
        assert_int_equal(cmr_trace_state_apply(bw, &st.flat[i], count_id, count_id, &nbw), 1);
    for (size_t i = 0; i < st.nflat; i++) /* all duplicates now */
        assert_int_equal(cmr_trace_state_apply(fw, &st.flat[i], count_id, count_id, &agents), 0);
    assert_int_equal(agents, 0);
    assert_int_equal(nfw, 2999 + 1); /* methods + one agent */
    assert_int_equal(nbw, 2999 + 1);
    assert_true(cmr_trace_state_bytes(fw) > 2999 * sizeof(uint64_t));
    cmr_trace_summary_t a, b;
    cmr_trace_state_summary(fw, &a);
    cmr_trace_state_summary(bw, &b);
    assert_memory_equal(&a, &b, sizeof a);
    assert_true(a.flags & CMR_TRACE_COMPLETE);
    cmr_trace_state_free(fw);
    cmr_trace_state_free(bw);
    stream_free(&st);
    synth_seg_free(&s);
}

/* Names from agents that are not valid UTF-8 stay in every JSON output (as U+FFFD),
 * and quotes and backslashes are escaped. */
static void test_json_untrusted_names(void **state)
{
    (void)state;
    uint8_t tid[16];
    synth_trace_id(41, tid);
    uint64_t agent = cmr_agent_id("sh\x80p", "host-a", NULL);
    synth_seg_t s;
    synth_seg_init(&s, tid, agent, 1, 1,
                   "th\xff"
                   "read",
                   NULL);
    synth_enter(&s, M_MAIN, T0);
    synth_exit(&s, M_MAIN, T0 + 10);
    stream_t st = {0};
    stream_add(&st, &s, 10);
    stream_flatten(&st);
    cmr_tree_t t;
    assert_int_equal(cmr_tree_build(st.flat, st.nflat, &t), 0);
    cmr_names_t *n = cmr_names_new();
    cmr_method_entry_t me = {
        .method_id = M_MAIN, .class_name = "a/B\"q\\", .method_name = "r\xc3", .descriptor = "()V"};
    cmr_names_put_method(n, &me);
    cmr_agent_registration_t r = {.agent_name = "sh\x80p", .hostname = "host-a", .pid = 42};
    cmr_names_put_agent(n, &r);
    json_error_t je;

    char *tj = cmr_ingest_tree_json(n, &t);
    json_t *j = json_loads(tj, 0, &je);
    assert_non_null(j);
    json_t *root = json_array_get(json_object_get(j, "roots"), 0);
    assert_string_equal(json_string_value(json_object_get(root, "thread")), "th\xef\xbf\xbdread");
    assert_string_equal(json_string_value(json_object_get(root, "method")), "a.B\"q\\.r\xef\xbf\xbd()V");
    assert_string_equal(json_string_value(json_object_get(root, "jvm")), "sh\xef\xbf\xbdp@host-a pid 42");
    json_decref(j);
    free(tj);

    cmr_trace_summary_t sum = {.start_ns = (int64_t)T0,
                               .end_ns = (int64_t)T0 + 10,
                               .root_method = M_MAIN,
                               .root_agent = agent,
                               .flags = CMR_TRACE_HAS_ROOT};
    memcpy(sum.trace_id, tid, 16);
    char *lj = cmr_ingest_list_json(n, &sum, 1);
    j = json_loads(lj, 0, &je);
    assert_non_null(j);
    json_t *item = json_array_get(json_object_get(j, "traces"), 0);
    assert_string_equal(json_string_value(json_object_get(item, "root_jvm")), "sh\xef\xbf\xbdp@host-a pid 42");
    assert_string_equal(json_string_value(json_object_get(item, "trace_id")), "7a000000000000000000000000000029");
    json_decref(j);
    free(lj);

    char *chrome = cmr_ingest_export_chrome(n, &t);
    assert_non_null(strstr(chrome, "\"th\xef\xbf\xbdread\""));
    assert_non_null(strstr(chrome, "\"sh\xef\xbf\xbdp@host-a pid 42\""));
    j = json_loads(chrome, 0, &je);
    assert_non_null(j);
    json_decref(j);
    free(chrome);
    char *otlp = cmr_ingest_export_otlp(n, &t);
    j = json_loads(otlp, 0, &je);
    assert_non_null(j);
    assert_non_null(strstr(otlp, "\"stringValue\": \"th\xef\xbf\xbdread\""));
    assert_non_null(strstr(otlp, "\"stringValue\": \"sh\xef\xbf\xbdp@host-a pid 42\""));
    json_decref(j);
    free(otlp);

    cmr_names_free(n);
    cmr_tree_free(&t);
    stream_free(&st);
    synth_seg_free(&s);
}

static char tmpdir[256];

static int make_tmp(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ingest-unit-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_tmp(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static char *capture_list(cmr_ingest_view_t *v, const cmr_trace_filter_t *f, long *count)
{
    cmr_trace_summary_t *s;
    *count = cmr_ingest_view_list(v, f, &s);
    assert_true(*count >= 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    cmr_ingest_print_list(m, cmr_ingest_view_names(v), s, (size_t)*count);
    fclose(m);
    free(s);
    return buf;
}

static void feed(cmr_ingest_engine_t *e, int partition, const synth_seg_t *segs, int nseg, size_t per_batch, int twice)
{
    char err[256];
    for (int i = 0; i < nseg; i++) {
        cmr_event_batch_t *b;
        size_t n = synth_batches(&segs[i], per_batch, &b);
        for (int r = 0; r <= twice; r++)
            for (size_t k = 0; k < n; k++)
                assert_true(cmr_ingest_engine_add_batch(e, partition, &b[k], err, sizeof err) >= 0);
        synth_batches_free(b, n);
    }
}

/* Threads asking the list and one tree for 2.5 s (the server replaces its view every
 * second): every answer must be the expected one. */
typedef struct side_ctx {
    int port;
    const char *list, *tree;
    const char *want_list, *want_tree;
    _Atomic int wrong;
} side_ctx_t;

static void *side_by_side(void *arg)
{
    side_ctx_t *c = arg;
    int64_t end = cmr_mono_ms() + 2500;
    for (int k = 0; cmr_mono_ms() < end; k++) {
        char *got = NULL;
        const char *target = k % 2 ? c->tree : c->list, *want = k % 2 ? c->want_tree : c->want_list;
        if (hc_get("127.0.0.1", c->port, target, &got) != 200 || strcmp(strstr(got, "\r\n\r\n") + 4, want) != 0)
            c->wrong++;
        free(got);
    }
    return NULL;
}

/* The tree's JSON written in pieces: any piece size gives the same text as the whole, a
 * tree deeper than the old recursive writer went (6,000 levels; it stopped at 2,000) and a
 * wide one are written whole, every node opened and closed once. */
static void build_chain_tree(cmr_tree_t *t, uint32_t n, bool deep)
{
    memset(t, 0, sizeof *t);
    t->nodes = calloc(n, sizeof *t->nodes);
    assert_non_null(t->nodes);
    t->count = t->cap = n;
    t->first_root = 0;
    t->start_ns = 1000;
    t->end_ns = 1000 + n;
    for (uint32_t i = 0; i < n; i++) {
        cmr_tree_node_t *x = &t->nodes[i];
        x->kind = CMR_NODE_CALL;
        x->method_id = 0x1000 + (i % 7);
        x->thread_name = CMR_NODE_NONE;
        x->start_ns = 1000 + i;
        x->end_ns = 1000 + n;
        x->total_ns = n - i;
        x->first_child = CMR_NODE_NONE;
        x->next_sibling = CMR_NODE_NONE;
        x->parent = CMR_NODE_NONE;
        if (i == 0)
            continue;
        uint32_t parent = deep ? i - 1 : 0;
        x->parent = parent;
        x->depth = deep ? i : 1;
        if (deep)
            t->nodes[parent].first_child = i;
        else if (i == 1)
            t->nodes[0].first_child = 1;
        else
            t->nodes[i - 1].next_sibling = i;
    }
}

static size_t count_of(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

static void test_tree_json_stream(void **state)
{
    (void)state;
    cmr_names_t *names = cmr_names_new();
    for (int deep = 0; deep < 2; deep++) {
        uint32_t n = deep ? 6000 : 3000;
        cmr_tree_t t;
        build_chain_tree(&t, n, deep);
        char *whole = cmr_ingest_tree_json(names, &t);
        assert_non_null(whole);
        assert_int_equal(count_of(whole, "\"children\":["), n);
        size_t len = strlen(whole);
        assert_memory_equal(whole + len - 4, "]}]}", 4);
        if (!deep) { /* jansson parses it (it refuses nesting deeper than 2048) */
            json_t *j = json_loads(whole, 0, NULL);
            assert_non_null(j);
            assert_int_equal(
                json_array_size(json_object_get(json_array_get(json_object_get(j, "roots"), 0), "children")), n - 1);
            json_decref(j);
        }
        static const size_t pieces[] = {3, 4096, 1u << 20};
        for (size_t k = 0; k < sizeof pieces / sizeof *pieces; k++) {
            cmr_tree_json_stream_t *s = cmr_tree_json_stream_over(names, &t);
            assert_non_null(s);
            char *buf = malloc(pieces[k]);
            cmr_buf_t got = {0};
            long r;
            while ((r = cmr_tree_json_stream_read(s, buf, pieces[k])) > 0) {
                assert_true((size_t)r <= pieces[k]);
                cmr_buf_put(&got, buf, (size_t)r);
            }
            assert_int_equal(r, 0);
            assert_int_equal(got.len, len);
            assert_memory_equal(got.data, whole, len);
            cmr_buf_free(&got);
            free(buf);
            cmr_tree_json_stream_free(s);
        }
        free(whole);
        cmr_tree_free(&t);
    }
    cmr_names_free(names);
}

/* A tree of 20,001 calls over the wire: sent as it is written (chunked), the same JSON as
 * the whole rendering; a small one still comes whole (Content-Length). */
static void test_http_large_tree(void **state)
{
    (void)state;
    char err[512];
    cmr_store_opts_t o = {.sync = false};
    cmr_ingest_engine_t *e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    uint8_t tid[16];
    synth_trace_id(77, tid);
    synth_seg_t big, small;
    synth_seg_init(&big, tid, A1, 1, 1, "main", NULL);
    synth_enter(&big, M_MAIN, T0);
    for (uint64_t k = 0; k < 20000; k++) {
        synth_enter(&big, k % 2 ? M_A : M_B, T0 + 10 + 4 * k);
        synth_exit(&big, k % 2 ? M_A : M_B, T0 + 12 + 4 * k);
    }
    synth_exit(&big, M_MAIN, T0 + 200000);
    build_nested_at(&small, 78, T0 + 300000);
    feed(e, 0, &big, 1, 4096, 0);
    feed(e, 0, &small, 1, 16, 0);
    assert_int_equal(cmr_ingest_engine_flush(e), 0);
    cmr_ingest_engine_free(e);

    cmr_ingest_http_t *srv = cmr_ingest_http_start(tmpdir, "127.0.0.1", 0, NULL, err, sizeof err);
    assert_non_null(srv);
    for (int round = 0; round < 3; round++) { /* the large tree twice: assembled, then kept */
        int which = round == 2;
        char hex[33], target[64];
        uint8_t id[16];
        synth_trace_id(which ? 78 : 77, id);
        cmr_hex(id, 16, hex);
        snprintf(target, sizeof target, "/api/traces/%s", hex);
        char *want = NULL, *got = NULL;
        assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", target, &want), 200);
        /* keep-alive (chunked); hc_get asks Connection: close */
        char req[160];
        snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", target);
        int fd = hc_connect("127.0.0.1", cmr_ingest_http_port(srv));
        assert_int_equal(hc_request(fd, req, false, &got), 200);
        close(fd);
        const char *head_end = strstr(got, "\r\n\r\n");
        bool chunked =
            strstr(got, "Transfer-Encoding: chunked") && strstr(got, "Transfer-Encoding: chunked") < head_end;
        if (chunked != (which == 0))
            fprintf(stderr, "%.*s\n", (int)(head_end - got), got);
        assert_int_equal(chunked, which == 0);
        assert_string_equal(head_end + 4, want);
        if (which == 0)
            assert_int_equal(count_of(want, "\"children\":["), 20001);
        free(want);
        free(got);
    }
    cmr_ingest_http_stop(srv);
    synth_seg_free(&big);
    synth_seg_free(&small);
}

static void test_store_engine_queries(void **state)
{
    (void)state;
    char err[512];
    cmr_store_opts_t o = {.sync = true};
    cmr_ingest_engine_t *e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 3, 0), 0);
    cmr_method_entry_t m1 = {
        .method_id = M_MAIN, .class_name = "com/example/App", .method_name = "main", .descriptor = "()V"};
    cmr_method_entry_t m2 = {
        .method_id = M_TASK, .class_name = "com/example/Task", .method_name = "run", .descriptor = "()V"};
    cmr_ingest_engine_add_method(e, &m1);
    cmr_ingest_engine_add_method(e, &m2);
    cmr_agent_registration_t reg = {.agent_name = "shop", .hostname = "host-a", .pid = 42};
    cmr_ingest_engine_add_agent(e, &reg);
    synth_seg_t multi[4], nested;
    build_multi(multi, 20);
    build_nested_at(&nested, 21, T0 + 10000);
    feed(e, 0, multi, 4, 2, 1); /* every batch twice */
    feed(e, 3, &nested, 1, 3, 0);
    assert_int_equal(cmr_ingest_engine_flush(e), 0);
    feed(e, 3, &nested, 1, 3, 0); /* redelivered after the flush */
    assert_int_equal(cmr_ingest_engine_flush(e), 0);
    cmr_ingest_stats_t stats;
    cmr_ingest_engine_stats(e, &stats);
    assert_true(stats.duplicates > 0);
    cmr_ingest_view_t *busy = cmr_ingest_view_open(tmpdir, err, sizeof err); /* while the engine has it open */
    assert_non_null(busy);
    cmr_ingest_view_free(busy);
    cmr_ingest_engine_free(e);

    assert_null(cmr_ingest_view_open("/nonexistent/store", err, sizeof err));
    assert_non_null(strstr(err, "no store at"));
    cmr_ingest_view_t *v = cmr_ingest_view_open(tmpdir, err, sizeof err);
    assert_non_null(v);
    cmr_trace_filter_t f = {0};
    long n;
    char *all = capture_list(v, &f, &n);
    assert_int_equal(n, 2);
    f.slowest = true;
    char *slow = capture_list(v, &f, &n);
    assert_int_equal(n, 2);
    assert_string_not_equal(all, slow); /* different order */
    assert_true(strstr(all, "7a000000000000000000000000000015") < strstr(all, "7a000000000000000000000000000014"));
    assert_true(strstr(slow, "7a000000000000000000000000000014") < strstr(slow, "7a000000000000000000000000000015"));
    free(slow);
    free(all);
    cmr_trace_filter_t g = {0};
    assert_int_equal(cmr_trace_filter_set(&g, "contains", "Task.run", err, sizeof err), 0);
    free(capture_list(v, &g, &n));
    assert_int_equal(n, 1);
    cmr_trace_filter_t h = {0};
    assert_int_equal(cmr_trace_filter_set(&h, "agent", "shop@host-a", err, sizeof err), 0);
    free(capture_list(v, &h, &n));
    assert_int_equal(n, 2);
    char a2hex[17];
    snprintf(a2hex, sizeof a2hex, "%016" PRIx64, A2);
    assert_int_equal(cmr_trace_filter_set(&h, "agent", a2hex, err, sizeof err), 0);
    free(capture_list(v, &h, &n));
    assert_int_equal(n, 1);
    cmr_trace_filter_t i2 = {0};
    assert_int_equal(cmr_trace_filter_set(&i2, "min-duration", "2us", err, sizeof err), 0);
    free(capture_list(v, &i2, &n));
    assert_int_equal(n, 1);
    cmr_trace_filter_t r = {0};
    assert_int_equal(cmr_trace_filter_set(&r, "root", "App.main", err, sizeof err), 0);
    free(capture_list(v, &r, &n));
    assert_int_equal(n, 2);
    assert_int_equal(cmr_trace_filter_set(&r, "root", "Task.run", err, sizeof err), 0); /* not a root */
    free(capture_list(v, &r, &n));
    assert_int_equal(n, 0);
    cmr_trace_filter_t none = {0};
    assert_int_equal(cmr_trace_filter_set(&none, "contains", "NoSuch.method", err, sizeof err), 0);
    free(capture_list(v, &none, &n));
    assert_int_equal(n, 0);
    cmr_trace_filter_t bad = {0};
    assert_int_equal(cmr_trace_filter_set(&bad, "from", "yesterday", err, sizeof err), -1);
    assert_int_equal(cmr_trace_filter_set(&bad, "colour", "red", err, sizeof err), -1);
    assert_int_equal(cmr_trace_filter_set(&bad, "limit", "-3", err, sizeof err), -1);

    /* show: the text tree has thread and JVM of every call */
    uint8_t tid[16];
    synth_trace_id(20, tid);
    cmr_tree_t t;
    assert_int_equal(cmr_ingest_view_tree(v, tid, &t), 1);
    char *buf = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&buf, &len);
    cmr_ingest_print_tree(mf, cmr_ingest_view_names(v), &t);
    fclose(mf);
    assert_non_null(strstr(buf, "com.example.App.main()V  [main #1 @ shop@host-a pid 42]"));
    assert_non_null(strstr(buf, "com.example.Task.run()V  [pool-1-thread-1 #21 @ shop@host-a pid 42] async"));
    assert_non_null(strstr(buf, "(remote caller 000000000badcafe)"));
    assert_non_null(strstr(buf, "complete"));
    free(buf);
    cmr_tree_free(&t);
    synth_trace_id(99, tid);
    assert_int_equal(cmr_ingest_view_tree(v, tid, &t), 0);
    cmr_ingest_view_free(v);

    /* HTTP answers */
    char *body;
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", "/api/traces?slowest=1&limit=5", &body), 200);
    json_error_t je;
    json_t *j = json_loads(body, 0, &je);
    assert_int_equal(json_array_size(json_object_get(j, "traces")), 2);
    json_decref(j);
    free(body);
    char target[128], hex[33];
    synth_trace_id(20, tid);
    cmr_hex(tid, 16, hex);
    snprintf(target, sizeof target, "/api/traces/%s", hex);
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", target, &body), 200);
    j = json_loads(body, 0, &je);
    assert_non_null(j);
    assert_int_equal(json_array_size(json_object_get(j, "roots")), 2);
    json_decref(j);
    free(body);
    snprintf(target, sizeof target, "/api/traces/%s/export?format=otlp", hex);
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", target, &body), 200);
    assert_non_null(strstr(body, "resourceSpans"));
    free(body);
    snprintf(target, sizeof target, "/api/traces/%s/export?format=svg", hex);
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", target, &body), 400);
    free(body);
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", "/api/traces/xyz", &body), 400);
    free(body);
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", "/api/traces/00000000000000000000000000000001", &body), 404);
    free(body);
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "POST", "/api/traces", &body), 405);
    free(body);
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", "/api/traces?from=soon", &body), 400);
    assert_non_null(strstr(body, "error"));
    free(body);
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", "/api/traces?root=%zz", &body), 400);
    free(body);
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", "/nothing", &body), 404);
    free(body);

    /* the same answers over the wire, by the server (libmicrohttpd): status and body */
    char herr[256];
    cmr_ingest_http_t *srv = cmr_ingest_http_start(tmpdir, "127.0.0.1", 0, NULL, herr, sizeof herr);
    assert_non_null(srv);
    const char *same[] = {"/api/traces?slowest=1&limit=5",
                          target,
                          "/api/traces/xyz",
                          "/api/traces/00000000000000000000000000000001",
                          "/api/traces?from=soon",
                          "/api/traces?root=%zz",
                          "/nothing",
                          "/health",
                          "/api/traces?root=com.example.App.main%28%29V"};
    snprintf(target, sizeof target, "/api/traces/%s", hex);
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        char *want, *got;
        int status = cmr_ingest_http_answer(tmpdir, "GET", same[i], &want);
        assert_int_equal(hc_get("127.0.0.1", cmr_ingest_http_port(srv), same[i], &got), status);
        assert_non_null(strstr(got, "Content-Type: application/json\r\n"));
        assert_string_equal(strstr(got, "\r\n\r\n") + 4, want);
        free(want);
        free(got);
    }
    /* queries side by side, across the view's replacement (every second): the same answers */
    char *want_list = NULL, *want_tree = NULL;
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", same[0], &want_list), 200);
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", target, &want_tree), 200);
    side_ctx_t side = {cmr_ingest_http_port(srv), same[0], target, want_list, want_tree, 0};
    pthread_t th[6];
    for (int i = 0; i < 6; i++)
        assert_int_equal(pthread_create(&th[i], NULL, side_by_side, &side), 0);
    for (int i = 0; i < 6; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(side.wrong, 0);
    free(want_list);
    free(want_tree);
    cmr_ingest_http_stop(srv);

    /* retention by size: the oldest go first */
    cmr_store_opts_t so = {.sync = true, .retention_bytes = 1};
    e = cmr_ingest_engine_new(tmpdir, &so, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 3, 0), 0); /* trace 21 only */
    assert_int_equal(cmr_ingest_engine_retention(e, NULL), 1);
    cmr_ingest_engine_free(e);
    v = cmr_ingest_view_open(tmpdir, err, sizeof err);
    char *left = capture_list(v, &f, &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(left, "7a000000000000000000000000000014"));
    free(left);
    cmr_ingest_view_free(v);
    /* retention by age: everything is older than a day */
    o.retention_age_ms = 24LL * 3600 * 1000;
    e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 3, 0), 0);
    assert_int_equal(cmr_ingest_engine_retention(e, NULL), 1);
    cmr_ingest_engine_free(e);
    v = cmr_ingest_view_open(tmpdir, err, sizeof err);
    free(capture_list(v, &f, &n));
    assert_int_equal(n, 0);
    cmr_ingest_view_free(v);
    for (int k = 0; k < 4; k++)
        synth_seg_free(&multi[k]);
    synth_seg_free(&nested);
}

/* --- postings (idx_agent, idx_method) ------------------------------------------------------ */

/* Entries of an index column family by key length: [0] postings (16 bytes), [1] entries
 * of a store written before postings (24 bytes); *named: the trace ids the postings name. */
static void count_index(cmr_store_t *s, int cf, size_t n[2], size_t *named)
{
    n[0] = n[1] = 0;
    if (named)
        *named = 0;
    rocksdb_readoptions_t *o = rocksdb_readoptions_create();
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(cmr_store_db(s), o, cmr_store_cf(s, cf));
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl, vl;
        rocksdb_iter_key(it, &kl);
        rocksdb_iter_value(it, &vl);
        assert_true(kl == 16 || kl == 24);
        n[kl == 24]++;
        if (named && kl == 16)
            *named += vl / 16;
    }
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(o);
}

/* Rewrites a partition store's postings as a store written before them had its entries
 * (id | trace -> ""), without the markers of the postings format. */
static void make_legacy(int partition)
{
    char err[512];
    cmr_store_opts_t o = {.sync = true};
    cmr_store_t *s = cmr_store_open_partition(tmpdir, partition, &o, 0, err, sizeof err);
    assert_non_null(s);
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    const int cfs[] = {CMR_CF_IDX_AGENT, CMR_CF_IDX_METHOD};
    for (int c = 0; c < 2; c++) {
        rocksdb_column_family_handle_t *cf = cmr_store_cf(s, cfs[c]);
        rocksdb_iterator_t *it = rocksdb_create_iterator_cf(cmr_store_db(s), ro, cf);
        for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
            size_t kl, vl;
            const char *k = rocksdb_iter_key(it, &kl);
            const char *v = rocksdb_iter_value(it, &vl);
            for (size_t i = 0; i + 16 <= vl; i += 16) {
                char old[24];
                memcpy(old, k, 8);
                memcpy(old + 8, v + i, 16);
                rocksdb_writebatch_put_cf(wb, cf, old, 24, "", 0);
            }
            rocksdb_writebatch_delete_cf(wb, cf, k, kl);
        }
        rocksdb_iter_destroy(it);
    }
    rocksdb_writebatch_delete(wb, "index_format", 12); /* the default column family */
    rocksdb_writebatch_delete(wb, "postings_group", 14);
    assert_int_equal(cmr_store_write(s, wb, err, sizeof err), 0);
    rocksdb_writebatch_destroy(wb);
    rocksdb_readoptions_destroy(ro);
    cmr_store_close(s);
}

static char *list_of(const char *contains, const char *agent, long *n)
{
    char err[512];
    cmr_ingest_view_t *v = cmr_ingest_view_open(tmpdir, err, sizeof err);
    assert_non_null(v);
    cmr_trace_filter_t f = {.contains = contains, .agent = agent, .limit = 100};
    char *out = capture_list(v, &f, n);
    cmr_ingest_view_free(v);
    return out;
}

/* idx_agent / idx_method hold one posting per JVM or method and group commit, naming the
 * group's traces; queries find every trace through them; a store written before postings
 * (one key per trace and id) answers the same, and its retention deletes those keys;
 * after retention, postings that name only deleted traces are dropped by compaction. */
static void test_postings_index(void **state)
{
    (void)state;
    char err[512], m_a[20], a2[20];
    snprintf(m_a, sizeof m_a, "%016" PRIx64, (uint64_t)M_A);
    snprintf(a2, sizeof a2, "%016" PRIx64, A2);
    uint64_t recent = (uint64_t)cmr_wall_ns() - 60000000000ull;
    synth_seg_t segs[6];
    cmr_store_opts_t o = {.sync = false};
    cmr_ingest_engine_t *e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    for (int part = 0; part < 2; part++) { /* 0 becomes a store from before postings */
        assert_int_equal(cmr_ingest_engine_open_partition(e, part, 0), 0);
        for (int i = 0; i < 6; i++) { /* 3 old traces in one group, 3 recent in the next */
            build_nested_by(&segs[i], 400 + 10 * part + i, i < 3 ? T0 + i * 10000u : recent + i * 10000u,
                            i % 2 ? A2 : A1);
            feed(e, part, &segs[i], 1, 3, i == 4); /* one record twice */
            if (i == 2)
                assert_int_equal(cmr_ingest_engine_flush(e), 0);
        }
        assert_int_equal(cmr_ingest_engine_flush(e), 0);
        for (int i = 0; i < 6; i++)
            synth_seg_free(&segs[i]);
    }
    cmr_ingest_engine_free(e);

    cmr_store_opts_t ro = {.read_only = true};
    cmr_store_t *s = cmr_store_open_partition(tmpdir, 1, &ro, 0, err, sizeof err);
    size_t n[2], named;
    count_index(s, CMR_CF_IDX_METHOD, n, &named);
    assert_int_equal(n[0], 3 * 2); /* M_MAIN, M_A, M_B x 2 groups */
    assert_int_equal(n[1], 0);
    assert_int_equal(named, 3 * 6);
    count_index(s, CMR_CF_IDX_AGENT, n, &named);
    assert_int_equal(n[0], 2 * 2);
    assert_int_equal(named, 6);
    cmr_store_close(s);

    long count;
    char *all_a = list_of(m_a, NULL, &count);
    assert_int_equal(count, 12);
    char *by_a2 = list_of(NULL, a2, &count);
    assert_int_equal(count, 6);
    char *both = list_of(m_a, a2, &count);
    assert_int_equal(count, 6);
    assert_string_equal(both, by_a2);

    /* partition 0 as a store written before postings: the same answers */
    make_legacy(0);
    s = cmr_store_open_partition(tmpdir, 0, &ro, 0, err, sizeof err);
    count_index(s, CMR_CF_IDX_METHOD, n, NULL);
    assert_int_equal(n[0], 0);
    assert_int_equal(n[1], 3 * 6);
    cmr_store_close(s);
    char *again = list_of(m_a, NULL, &count);
    assert_string_equal(again, all_a);
    free(again);
    again = list_of(m_a, a2, &count);
    assert_string_equal(again, both);
    free(again);
    free(all_a);
    free(by_a2);
    free(both);

    /* retention by age deletes the 3 old traces of each partition: the old entries of
     * partition 0 with them; in partition 1 compaction drops the old group's postings */
    o.retention_age_ms = 24LL * 3600 * 1000;
    e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    assert_int_equal(cmr_ingest_engine_retention(e, NULL), 3);
    cmr_ingest_engine_free(e);
    s = cmr_store_open_partition(tmpdir, 0, &ro, 0, err, sizeof err);
    count_index(s, CMR_CF_IDX_METHOD, n, NULL);
    assert_int_equal(n[1], 3 * 3);
    count_index(s, CMR_CF_IDX_AGENT, n, NULL);
    assert_int_equal(n[1], 3);
    cmr_store_close(s);
    s = cmr_store_open_partition(tmpdir, 1, &o, 0, err, sizeof err);
    assert_non_null(s);
    bool more;
    assert_int_equal(cmr_store_retention(s, cmr_wall_ns(), &more), 3);
    assert_false(more); /* fewer than a step */
    for (int cf = CMR_CF_IDX_AGENT; cf <= CMR_CF_IDX_METHOD; cf++)
        rocksdb_compact_range_cf(cmr_store_db(s), cmr_store_cf(s, cf), NULL, 0, NULL, 0);
    count_index(s, CMR_CF_IDX_METHOD, n, &named);
    assert_int_equal(n[0], 3);
    assert_int_equal(named, 3 * 3);
    count_index(s, CMR_CF_IDX_AGENT, n, &named);
    assert_int_equal(n[0], 2);
    assert_int_equal(named, 3);
    cmr_store_close(s);
    char *left = list_of(m_a, NULL, &count);
    assert_int_equal(count, 6);
    free(left);
}

/* --- time groups ---------------------------------------------------------------------- */

static int cmp_latest(const void *a, const void *b)
{
    const cmr_trace_summary_t *x = a, *y = b;
    if (x->start_ns != y->start_ns)
        return x->start_ns > y->start_ns ? -1 : 1;
    return memcmp(x->trace_id, y->trace_id, 16);
}

/* Every stored trace of the partition stores under tmpdir, read from `traces` (not from
 * an index), latest start first: what a newest-first list must agree with. */
static long all_summaries(cmr_trace_summary_t **out)
{
    char err[512];
    cmr_store_opts_t ro = {.read_only = true};
    int *parts;
    size_t np = cmr_store_list_partitions(tmpdir, &parts);
    cmr_trace_summary_t *v = NULL;
    size_t n = 0, cap = 0;
    rocksdb_readoptions_t *o = rocksdb_readoptions_create();
    rocksdb_readoptions_set_total_order_seek(o, 1);
    for (size_t i = 0; i < np; i++) {
        cmr_store_t *st = cmr_store_open_partition(tmpdir, parts[i], &ro, 0, err, sizeof err);
        assert_non_null(st);
        rocksdb_iterator_t *it = rocksdb_create_iterator_cf(cmr_store_db(st), o, cmr_store_cf(st, CMR_CF_TRACES));
        for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
            size_t kl, vl;
            const char *k = rocksdb_iter_key(it, &kl);
            const char *val = rocksdb_iter_value(it, &vl);
            assert_int_equal(CMR_ARRAY_GROW(v, cap, n + 1), 0);
            assert_int_equal(cmr_trace_summary_decode((const uint8_t *)val, vl, &v[n]), 0);
            memcpy(v[n++].trace_id, k, 16);
        }
        rocksdb_iter_destroy(it);
        cmr_store_close(st);
    }
    rocksdb_readoptions_destroy(o);
    free(parts);
    qsort(v, n, sizeof *v, cmp_latest);
    *out = v;
    return (long)n;
}

/* A newest-first list (limit, start range, root) gives the first `limit` of every stored
 * trace that matches, in order. */
static void check_latest(size_t limit, int64_t from, int64_t to, uint64_t root)
{
    cmr_trace_summary_t *all;
    long nall = all_summaries(&all);
    char err[512], root_hex[20];
    snprintf(root_hex, sizeof root_hex, "%016" PRIx64, root);
    cmr_trace_filter_t f = {.limit = limit, .from_ns = from, .to_ns = to, .root_method = root ? root_hex : NULL};
    cmr_ingest_view_t *v = cmr_ingest_view_open(tmpdir, err, sizeof err);
    assert_non_null(v);
    cmr_trace_summary_t *got;
    long n = cmr_ingest_view_list(v, &f, &got);
    cmr_ingest_view_free(v);
    long want = 0;
    for (long i = 0; i < nall && (size_t)want < limit; i++) {
        if ((from && all[i].start_ns < from) || (to && all[i].start_ns > to) || (root && all[i].root_method != root))
            continue;
        assert_true(want < n);
        assert_memory_equal(got[want].trace_id, all[i].trace_id, 16);
        assert_int_equal(got[want].start_ns, all[i].start_ns);
        want++;
    }
    assert_int_equal(n, want);
    free(got);
    free(all);
}

/* Counts a partition store's idx_time entries: time groups (and the traces they list,
 * and of those the ones that started earlier since they were posted) and per-trace keys. */
static void count_time(int partition, size_t *groups, size_t *listed, size_t *moved, size_t *per_trace)
{
    char err[512];
    cmr_store_opts_t ro = {.read_only = true};
    cmr_store_t *st = cmr_store_open_partition(tmpdir, partition, &ro, 0, err, sizeof err);
    assert_non_null(st);
    *groups = *listed = *moved = *per_trace = 0;
    rocksdb_readoptions_t *o = rocksdb_readoptions_create();
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(cmr_store_db(st), o, cmr_store_cf(st, CMR_CF_IDX_TIME));
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl, vl;
        const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
        const uint8_t *val = (const uint8_t *)rocksdb_iter_value(it, &vl);
        if (kl == 24) {
            (*per_trace)++;
            continue;
        }
        assert_int_equal(kl, CMR_TIME_GROUP_KEY);
        assert_int_equal(k[0], CMR_TIME_GROUP_TAG);
        assert_int_equal(vl % CMR_TIME_REC, 0);
        (*groups)++;
        for (size_t i = 0; i < vl; i += CMR_TIME_REC) {
            cmr_trace_summary_t sum;
            if (cmr_store_get_summary(st, val + i, &sum) != 1)
                continue;
            (*listed)++;
            int64_t posted = cmr_be64_ordered(val + i + 16);
            assert_true(sum.start_ns <= posted);                                                /* only moves earlier */
            assert_true(sum.start_ns <= cmr_store_time_group_end_ns((int64_t)cmr_be64(k + 1))); /* the bound */
            *moved += sum.start_ns < posted;
        }
    }
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(o);
    cmr_store_close(st);
}

/* Rewrites a partition store's time groups and root postings as a store written before
 * time groups had them (start | trace and root | start | trace, from the summaries), and
 * marks it as of the postings format. */
static void make_legacy_time(int partition)
{
    char err[512];
    cmr_store_opts_t o = {.sync = true};
    cmr_store_t *st = cmr_store_open_partition(tmpdir, partition, &o, 0, err, sizeof err);
    assert_non_null(st);
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    const int cfs[] = {CMR_CF_IDX_TIME, CMR_CF_IDX_ROOT};
    for (int c = 0; c < 2; c++) {
        rocksdb_column_family_handle_t *cf = cmr_store_cf(st, cfs[c]);
        rocksdb_iterator_t *it = rocksdb_create_iterator_cf(cmr_store_db(st), ro, cf);
        for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
            size_t kl, vl;
            const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
            const uint8_t *v = (const uint8_t *)rocksdb_iter_value(it, &vl);
            size_t rec = c == 0 ? CMR_TIME_REC : 16;
            for (size_t i = 0; i + rec <= vl; i += rec) {
                cmr_trace_summary_t sum;
                assert_int_equal(cmr_store_get_summary(st, v + i, &sum), 1);
                if (c == 1 && sum.root_method != cmr_be64(k))
                    continue; /* posted before its root changed */
                uint8_t tk[24], dk[24], rk[32];
                cmr_store_index_keys(&sum, tk, dk, rk);
                if (c == 0)
                    rocksdb_writebatch_put_cf(wb, cf, (const char *)tk, 24, "", 0);
                else
                    rocksdb_writebatch_put_cf(wb, cf, (const char *)rk, 32, "", 0);
            }
            rocksdb_writebatch_delete_cf(wb, cf, (const char *)k, kl);
        }
        rocksdb_iter_destroy(it);
    }
    uint8_t stray[24]; /* an old key whose trace has no summary: retention deletes it too */
    cmr_put_be64_ordered(stray, (int64_t)T0);
    memset(stray + 8, 0xee, 16);
    rocksdb_writebatch_put_cf(wb, cmr_store_cf(st, CMR_CF_IDX_TIME), (const char *)stray, 24, "", 0);
    rocksdb_writebatch_put(wb, "index_format", 12, "postings", 8); /* the default column family */
    assert_int_equal(cmr_store_write(st, wb, err, sizeof err), 0);
    rocksdb_writebatch_destroy(wb);
    rocksdb_readoptions_destroy(ro);
    cmr_store_close(st);
}

/* Adds `count` traces (numbers from first_n) to a partition, 2 batches each, with starts
 * 1 ms apart from base in a scrambled order, a group commit every 10 traces. Every 5th
 * trace gets its second batch only (so it starts later and has no root yet): *held keeps
 * its first batch, for the caller to add later. */
static size_t feed_scrambled(cmr_ingest_engine_t *e, int partition, uint64_t first_n, uint32_t count, uint64_t base,
                             cmr_event_batch_t **held, size_t *nheld)
{
    char err[256];
    size_t added = 0;
    for (uint32_t i = 0; i < count; i++) {
        synth_seg_t s;
        build_nested_by(&s, first_n + i, base + (uint64_t)((i * 37u) % count) * 1000000u, i % 2 ? A2 : A1);
        cmr_event_batch_t *b;
        size_t nb = synth_batches(&s, 4, &b);
        assert_int_equal(nb, 2);
        for (size_t k = i % 5 == 0 ? 1 : 0; k < nb; k++)
            assert_int_equal(cmr_ingest_engine_add_batch(e, partition, &b[k], err, sizeof err), 1);
        if (i % 5 == 0)
            held[(*nheld)++] = b; /* b[0] comes later; the caller frees b (2 batches) */
        else
            synth_batches_free(b, nb);
        synth_seg_free(&s);
        added++;
        if (i % 10 == 9)
            assert_int_equal(cmr_ingest_engine_flush(e), 0);
    }
    assert_int_equal(cmr_ingest_engine_flush(e), 0);
    return added;
}

/* Adds the held first batches (feed_scrambled), frees them and empties *held. */
static void add_held(cmr_ingest_engine_t *e, int partition, cmr_event_batch_t **held, size_t *nheld)
{
    char err[256];
    for (size_t i = 0; i < *nheld; i++) {
        assert_int_equal(cmr_ingest_engine_add_batch(e, partition, &held[i][0], err, sizeof err), 1);
        synth_batches_free(held[i], 2);
    }
    *nheld = 0;
    assert_int_equal(cmr_ingest_engine_flush(e), 0);
}

/* feed_scrambled, then its held first batches at once: every trace stored whole. */
static void feed_whole(cmr_ingest_engine_t *e, int partition, uint64_t first_n, uint32_t count, uint64_t base)
{
    cmr_event_batch_t *held[40];
    size_t nheld = 0;
    assert_true(count <= 5 * 40); /* one held per 5 traces */
    feed_scrambled(e, partition, first_n, count, base, held, &nheld);
    add_held(e, partition, held, &nheld);
}

static void check_lists(uint64_t recent)
{
    const size_t limits[] = {1, 7, 50, 100000};
    for (size_t i = 0; i < 4; i++) {
        check_latest(limits[i], 0, 0, 0);
        check_latest(limits[i], 0, 0, M_MAIN);
    }
    check_latest(10, (int64_t)T0 + 30000000, (int64_t)T0 + 90000000, 0); /* inside the old traces */
    check_latest(5, (int64_t)T0 + 30000000, 0, 0);
    check_latest(100000, (int64_t)recent, 0, M_MAIN);
}

/* idx_time holds one time group per group commit that had new traces, listing them with
 * their starts; idx_root holds postings. Newest-first lists (limits, start ranges, roots)
 * agree with the summaries although starts come in scrambled and some move earlier
 * after they were posted; a store written before time groups (per-trace keys) answers
 * the same, keeps its changed traces' keys exact and takes new traces into groups;
 * retention by age deletes whole groups and the older keys, the store is marked of the
 * new format once none of those is left, and compaction drops the root postings of
 * deleted groups, also after a restart. */
static void test_time_groups(void **state)
{
    (void)state;
    char err[512];
    uint64_t recent = (uint64_t)cmr_wall_ns() - 60000000000ull;
    cmr_store_opts_t o = {.sync = false};
    cmr_ingest_engine_t *e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    cmr_event_batch_t *held[2][40];
    size_t nheld[2] = {0, 0};
    for (int part = 0; part < 2; part++) { /* 0 becomes a store from before time groups */
        assert_int_equal(cmr_ingest_engine_open_partition(e, part, 0), 0);
        feed_scrambled(e, part, 1000 + 1000 * (uint64_t)part, 120, T0, held[part], &nheld[part]);
    }
    add_held(e, 1, held[1], &nheld[1]); /* partition 1: these traces now start earlier */
    for (int part = 0; part < 2; part++)
        feed_scrambled(e, part, 5000 + 1000 * (uint64_t)part, 60, recent, held[part], &nheld[part]);
    cmr_ingest_engine_free(e);

    size_t groups, listed, moved, per_trace;
    count_time(1, &groups, &listed, &moved, &per_trace);
    assert_int_equal(groups, 12 + 6);
    assert_int_equal(listed, 180);
    assert_int_equal(moved, 24); /* the held traces of the old ones */
    assert_int_equal(per_trace, 0);
    char err2[512];
    cmr_store_opts_t ro = {.read_only = true};
    cmr_store_t *st = cmr_store_open_partition(tmpdir, 1, &ro, 0, err2, sizeof err2);
    size_t n[2], named;
    count_index(st, CMR_CF_IDX_ROOT, n, &named);
    assert_true(n[0] > 0);
    assert_int_equal(n[1], 0);
    assert_int_equal(named, 180 + 24); /* the held ones again, under their root now */
    cmr_store_close(st);
    check_lists(recent);

    /* partition 0 as a store from before time groups: the same answers; then its held
     * batches (36 traces start earlier: they lose their per-trace keys and join a time
     * group with all their postings) and new traces (into groups) */
    make_legacy_time(0);
    check_lists(recent);
    e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    add_held(e, 0, held[0], &nheld[0]);
    feed_scrambled(e, 0, 9000, 30, recent + 500000000u, held[0], &nheld[0]);
    cmr_ingest_engine_free(e);
    count_time(0, &groups, &listed, &moved, &per_trace);
    assert_int_equal(per_trace, 180 - 36 + 1); /* and the stray key */
    assert_int_equal(groups, 1 + 3);
    assert_int_equal(listed, 36 + 30);
    check_lists(recent);
    for (size_t i = 0; i < nheld[0]; i++) /* the 6 held in the last feed */
        synth_batches_free(held[0][i], 2);
    for (size_t i = 0; i < nheld[1]; i++) /* the 12 held of partition 1's recent traces */
        synth_batches_free(held[1][i], 2);

    /* retention by age: the old traces of each partition (in partition 0 the 24 old ones
     * that joined a recent group stay: retention goes by their group); in partition 1
     * compaction then drops the root postings of the deleted groups */
    o.retention_age_ms = 24LL * 3600 * 1000;
    e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    assert_int_equal(cmr_ingest_engine_retention(e, NULL), 120 - 24);
    cmr_ingest_engine_free(e);
    /* partition 0's postings older than its oldest per-trace key or group go at the next
     * compaction: the traces that joined a group are still found by their methods */
    st = cmr_store_open_partition(tmpdir, 0, &o, 0, err2, sizeof err2);
    assert_non_null(st);
    for (int cf = CMR_CF_IDX_ROOT; cf <= CMR_CF_IDX_METHOD; cf++)
        rocksdb_compact_range_cf(cmr_store_db(st), cmr_store_cf(st, cf), NULL, 0, NULL, 0);
    count_index(st, CMR_CF_IDX_METHOD, n, &named);
    cmr_store_close(st);
    char m_a[20];
    snprintf(m_a, sizeof m_a, "%016" PRIx64, (uint64_t)M_A);
    cmr_ingest_view_t *view = cmr_ingest_view_open(tmpdir, err, sizeof err);
    assert_non_null(view);
    cmr_trace_filter_t by_method = {.contains = m_a, .limit = 100000};
    cmr_trace_summary_t *found;
    assert_int_equal(cmr_ingest_view_list(view, &by_method, &found), (180 + 30 - 96) + 180);
    free(found);
    cmr_ingest_view_free(view);
    st = cmr_store_open_partition(tmpdir, 1, &o, 0, err2, sizeof err2);
    assert_non_null(st);
    bool more;
    assert_int_equal(cmr_store_retention(st, cmr_wall_ns(), &more), 120);
    assert_false(more);  /* fewer than a step */
    cmr_store_close(st); /* a restart: the cutoff comes from the store again */
    st = cmr_store_open_partition(tmpdir, 1, &o, 0, err2, sizeof err2);
    assert_non_null(st);
    rocksdb_compact_range_cf(cmr_store_db(st), cmr_store_cf(st, CMR_CF_IDX_ROOT), NULL, 0, NULL, 0);
    count_index(st, CMR_CF_IDX_ROOT, n, &named);
    assert_int_equal(named, 60);
    cmr_store_close(st);
    count_time(0, &groups, &listed, &moved, &per_trace);
    assert_int_equal(per_trace, 60 - 12);
    count_time(1, &groups, &listed, &moved, &per_trace);
    assert_int_equal(groups, 6);
    assert_int_equal(listed, 60);
    check_lists(recent);

    /* partition 0's older keys go with its recent traces (by size): then it is marked */
    o.retention_age_ms = 0;
    o.retention_bytes = 1;
    e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    assert_true(cmr_ingest_engine_retention(e, NULL) >= 60);
    assert_int_equal(cmr_ingest_engine_close_partition(e, 0), 0);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    cmr_ingest_engine_free(e);
    o.retention_bytes = 0;
    st = cmr_store_open_partition(tmpdir, 0, &o, 0, err2, sizeof err2);
    assert_non_null(st);
    char *fmt;
    size_t fl;
    char *re = NULL;
    rocksdb_readoptions_t *rdo = rocksdb_readoptions_create();
    fmt = rocksdb_get(cmr_store_db(st), rdo, "index_format", 12, &fl, &re);
    rocksdb_readoptions_destroy(rdo);
    assert_null(re);
    assert_non_null(fmt);
    assert_true(fl == 6 && !memcmp(fmt, "groups", 6));
    rocksdb_free(fmt);
    assert_false(cmr_store_time_legacy(st));
    cmr_store_close(st);
}

/* Retention and a summary that cannot be read (a damaged store, a bug of an older
 * version): the trace's batches and summary go with the others all the same, and
 * retention does not stop there. A retention age too large for nanoseconds means forever,
 * not "everything is old". */
static size_t count_cf(const char *root, int partition, int cf);

/* Nothing of any trace is left in a partition: batches, summaries, time and duration keys. */
static void expect_no_traces(int partition)
{
    assert_int_equal(count_cf(tmpdir, partition, CMR_CF_TRACES), 0);
    assert_int_equal(count_cf(tmpdir, partition, CMR_CF_BATCHES), 0);
    assert_int_equal(count_cf(tmpdir, partition, CMR_CF_IDX_TIME), 0);
    assert_int_equal(count_cf(tmpdir, partition, CMR_CF_IDX_DURATION), 0);
}

static void test_retention_unreadable_summary(void **state)
{
    (void)state;
    char err[512];
    uint64_t now = (uint64_t)cmr_wall_ns();
    cmr_store_opts_t o = {.sync = false};
    cmr_ingest_engine_t *e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    feed_whole(e, 0, 100, 40, now - 2 * 24 * 3600 * 1000000000ull);
    cmr_ingest_engine_free(e);
    assert_int_equal(count_cf(tmpdir, 0, CMR_CF_TRACES), 40);
    size_t batches = count_cf(tmpdir, 0, CMR_CF_BATCHES);
    assert_true(batches >= 40);

    /* damage three summaries: cut short, garbage, empty */
    cmr_store_t *st = cmr_store_open_partition(tmpdir, 0, &o, 0, err, sizeof err);
    assert_non_null(st);
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(cmr_store_db(st), ro, cmr_store_cf(st, CMR_CF_TRACES));
    int damaged = 0;
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it) && damaged < 3; rocksdb_iter_next(it), damaged++) {
        size_t kl, vl;
        const char *k = rocksdb_iter_key(it, &kl);
        const char *v = rocksdb_iter_value(it, &vl);
        char key[16], bad[8] = "\xff\xfe\x01garb";
        assert_int_equal(kl, 16);
        memcpy(key, k, 16);
        size_t badlen = damaged == 0 ? vl / 2 : damaged == 1 ? sizeof bad : 0;
        char *put = damaged == 0 ? memcpy(malloc(vl), v, vl) : NULL;
        char *rerr = NULL;
        rocksdb_put_cf(cmr_store_db(st), wo, cmr_store_cf(st, CMR_CF_TRACES), key, 16, put ? put : bad, badlen, &rerr);
        assert_null(rerr);
        free(put);
    }
    rocksdb_iter_destroy(it);
    rocksdb_writeoptions_destroy(wo);
    rocksdb_readoptions_destroy(ro);
    cmr_store_close(st);
    assert_int_equal(damaged, 3);

    /* an age whose nanoseconds overflow: kept forever */
    o.retention_age_ms = INT64_MAX / 1000;
    e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    assert_int_equal(cmr_ingest_engine_retention(e, NULL), 0);
    cmr_ingest_engine_free(e);
    assert_int_equal(count_cf(tmpdir, 0, CMR_CF_TRACES), 40);

    /* a day: every trace goes, the three damaged ones too, with their batches */
    o.retention_age_ms = 24LL * 3600 * 1000;
    e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    long deleted = cmr_ingest_engine_retention(e, NULL);
    assert_true(deleted >= 37 && deleted <= 40); /* the damaged ones may not be counted */
    cmr_ingest_engine_free(e);
    expect_no_traces(0);
}

/* A trace whose first stored summary had no events (a batch of a segment without events
 * came first: start 0) joins a time group again when its events come, so newest-first
 * lists find it although groups came after the one that first listed it. */
static void test_time_group_empty_first(void **state)
{
    (void)state;
    char err[512];
    uint64_t now = (uint64_t)cmr_wall_ns();
    cmr_store_opts_t o = {.sync = false};
    cmr_ingest_engine_t *e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    feed_whole(e, 0, 100, 60, now - 120000000000ull);
    synth_seg_t s;
    build_nested_by(&s, 999, now - 1000000000ull, A1); /* the newest trace of all */
    cmr_event_batch_t *b;
    size_t nb = synth_batches(&s, 8, &b);
    assert_int_equal(nb, 1);
    cmr_event_batch_t empty = b[0]; /* another segment of the trace, without events */
    empty.segment_id += 77;
    empty.event_count = 0;
    empty.packed_events.len = 0;
    assert_int_equal(cmr_ingest_engine_add_batch(e, 0, &empty, err, sizeof err), 1);
    assert_int_equal(cmr_ingest_engine_flush(e), 0);
    feed_whole(e, 0, 300, 20, now - 60000000000ull);
    assert_int_equal(cmr_ingest_engine_add_batch(e, 0, &b[0], err, sizeof err), 1);
    assert_int_equal(cmr_ingest_engine_flush(e), 0);
    feed_whole(e, 0, 500, 20, now - 30000000000ull);
    cmr_ingest_engine_free(e);
    synth_batches_free(b, nb);
    synth_seg_free(&s);
    check_latest(1, 0, 0, 0);
    check_latest(10, 0, 0, 0);
    check_latest(100000, 0, 0, 0);

    /* a start a year ahead (a wrong clock) raises the group key a minute past the wall
     * clock at most; the trace is listed first while its group is the newest */
    e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    feed_whole(e, 0, 700, 1, now + 365ull * 24 * 3600 * 1000000000ull);
    cmr_ingest_engine_free(e);
    int64_t bound = cmr_wall_ns() / 1000000 + 60000, newest = 0;
    cmr_store_opts_t ro = {.read_only = true};
    cmr_store_t *st = cmr_store_open_partition(tmpdir, 0, &ro, 0, err, sizeof err);
    assert_non_null(st);
    rocksdb_readoptions_t *rdo = rocksdb_readoptions_create();
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(cmr_store_db(st), rdo, cmr_store_cf(st, CMR_CF_IDX_TIME));
    rocksdb_iter_seek_to_last(it);
    assert_true(rocksdb_iter_valid(it));
    size_t kl;
    const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
    assert_int_equal(kl, CMR_TIME_GROUP_KEY);
    newest = (int64_t)cmr_be64(k + 1);
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(rdo);
    cmr_store_close(st);
    assert_true(newest <= bound);
    assert_true(newest > bound - 70000);
    check_latest(1, 0, 0, 0);
}

/* The summary's diagnosis set: the smallest CMR_TRACE_MAX_DIAGNOSES ids whatever the
 * order, encoded after the old 84 bytes only when there are some; both lengths decode. */
static void test_summary_diagnoses(void **state)
{
    (void)state;
    uint8_t tid[16];
    synth_trace_id(41, tid);
    cmr_trace_state_t *fw = cmr_trace_state_new(tid), *bw = cmr_trace_state_new(tid);
    const uint64_t ids[] = {0x50, 0x10, 0, 0x40, 0x30, 0x20, 0x10};
    for (size_t i = 0; i < 7; i++) {
        cmr_trace_state_add_diagnosis(fw, ids[i]);
        cmr_trace_state_add_diagnosis(bw, ids[6 - i]);
    }
    assert_int_equal(cmr_trace_state_add_diagnosis(fw, 0x60), 0); /* larger than a full set's */
    assert_int_equal(cmr_trace_state_add_diagnosis(fw, 0x20), 0); /* known */
    assert_int_equal(cmr_trace_state_add_diagnosis(fw, 0), 0);
    cmr_trace_summary_t a, b, d;
    cmr_trace_state_summary(fw, &a);
    cmr_trace_state_summary(bw, &b);
    assert_int_equal(a.ndiagnoses, 4);
    assert_memory_equal(&a, &b, sizeof a);
    const uint64_t want[] = {0x10, 0x20, 0x30, 0x40};
    assert_memory_equal(a.diagnoses, want, sizeof want);
    uint8_t enc[CMR_TRACE_SUMMARY_MAX_LEN];
    size_t len = cmr_trace_summary_encode(&a, enc);
    assert_int_equal(len, CMR_TRACE_SUMMARY_LEN + 4 + 8 * CMR_TRACE_MAX_DIAGNOSES);
    assert_int_equal(cmr_trace_summary_decode(enc, len, &d), 0);
    assert_memory_equal(&a, &d, sizeof a);
    /* the old format (no diagnoses) reads as none; bad lengths, counts and orders do not */
    assert_int_equal(cmr_trace_summary_decode(enc, CMR_TRACE_SUMMARY_LEN, &d), 0);
    assert_int_equal(d.ndiagnoses, 0);
    assert_int_equal(d.start_ns, a.start_ns);
    assert_int_equal(cmr_trace_summary_decode(enc, len - 8, &d), -1);
    assert_int_equal(cmr_trace_summary_decode(enc, CMR_TRACE_SUMMARY_LEN + 2, &d), -1);
    assert_int_equal(cmr_trace_summary_decode(enc, CMR_TRACE_SUMMARY_LEN - 1, &d), -1);
    uint8_t bad[CMR_TRACE_SUMMARY_MAX_LEN];
    memcpy(bad, enc, len);
    bad[CMR_TRACE_SUMMARY_LEN] = 5; /* more than the maximum */
    assert_int_equal(cmr_trace_summary_decode(bad, len, &d), -1);
    memcpy(bad, enc, len);
    memcpy(bad + CMR_TRACE_SUMMARY_LEN + 4, enc + CMR_TRACE_SUMMARY_LEN + 12, 8); /* not ascending */
    assert_int_equal(cmr_trace_summary_decode(bad, len, &d), -1);
    cmr_trace_state_free(fw);
    cmr_trace_state_free(bw);
}

#define D1 0xdd857cc97ac20a14ull
#define D2 0x0000000000000abcull

/* An EventBatch message of several segment batches of two traces (a root with a child on
 * another thread, and a second root cut into two batches): split into the stored batches
 * each would have been alone; the same message again is all duplicates, each segment
 * batch counted once; a message cut short is rejected with a reason. */
static void test_engine_splits_messages(void **state)
{
    (void)state;
    char err[512];
    cmr_store_opts_t o = {.sync = false};
    cmr_ingest_engine_t *e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 3, 0), 0);
    uint8_t t1[16], t2[16];
    synth_trace_id(501, t1);
    synth_trace_id(502, t2);
    synth_seg_t root, child, other;
    synth_seg_init(&root, t1, A1, 10, 1, "main", NULL);
    synth_enter(&root, M_MAIN, T0);
    int64_t fork = synth_fork(&root, T0 + 5);
    synth_exit(&root, M_MAIN, T0 + 90);
    cmr_parent_link_t link = {(int64_t)A1, 10, fork};
    synth_seg_init(&child, t1, A1, 11, 2, "pool-1", &link);
    synth_enter(&child, M_A, T0 + 20);
    synth_exit(&child, M_A, T0 + 40);
    synth_seg_init(&other, t2, A1, 12, 1, "main", NULL);
    synth_enter(&other, M_MAIN, T0 + 100);
    for (uint64_t k = 0; k < 6; k++) {
        synth_enter(&other, M_B, T0 + 101 + 2 * k);
        synth_exit(&other, M_B, T0 + 102 + 2 * k);
    }
    synth_exit(&other, M_MAIN, T0 + 200);
    cmr_event_batch_t *b1, *b2, *b3;
    size_t n1 = synth_batches(&root, 100, &b1), n2 = synth_batches(&child, 100, &b2),
           n3 = synth_batches(&other, 8, &b3);
    assert_int_equal(n3, 2);
    cmr_event_batch_t all[4] = {b1[0], b2[0], b3[0], b3[1]};
    static cmr_segs_writer_t w;
    cmr_event_msg_t m;
    assert_int_equal(cmr_segs_join(&w, (int64_t)A1, all, 4, &m), 0);
    cmr_ingest_stats_t st;
    assert_int_equal(cmr_ingest_engine_add(e, 3, &m, err, sizeof err), 1);
    cmr_ingest_engine_stats(e, &st);
    assert_int_equal(st.batches, 4);
    assert_int_equal(st.events,
                     (uint64_t)(b1[0].event_count + b2[0].event_count + b3[0].event_count + b3[1].event_count));
    assert_int_equal(cmr_ingest_engine_add(e, 3, &m, err, sizeof err), 0); /* redelivered */
    cmr_ingest_engine_stats(e, &st);
    assert_int_equal(st.batches, 4);
    assert_int_equal(st.duplicates, 4);
    /* one segment batch again, inside a message of a new one: only the new one applies */
    synth_seg_t late;
    synth_seg_init(&late, t2, A1, 13, 3, "late", NULL);
    synth_enter(&late, M_A, T0 + 300);
    synth_exit(&late, M_A, T0 + 301);
    cmr_event_batch_t *b4;
    size_t n4 = synth_batches(&late, 100, &b4);
    cmr_event_batch_t mixed[2] = {b3[1], b4[0]};
    assert_int_equal(cmr_segs_join(&w, (int64_t)A1, mixed, 2, &m), 0);
    assert_int_equal(cmr_ingest_engine_add(e, 3, &m, err, sizeof err), 1);
    cmr_ingest_engine_stats(e, &st);
    assert_int_equal(st.batches, 5);
    assert_int_equal(st.duplicates, 5);
    /* cut short: rejected with a reason, counted */
    m.segments.len -= 3;
    assert_int_equal(cmr_ingest_engine_add(e, 3, &m, err, sizeof err), -1);
    assert_true(err[0] != '\0');
    cmr_ingest_engine_stats(e, &st);
    assert_int_equal(st.rejected, 1);
    assert_int_equal(st.messages, 4); /* every message read counts once, whatever became of it */
    assert_int_equal(cmr_ingest_engine_flush(e), 0);
    cmr_ingest_engine_free(e);
    /* the stored batches are the standalone ones, byte for byte */
    cmr_store_t *store = cmr_store_open_partition(tmpdir, 3, &o, 0, err, sizeof err);
    assert_non_null(store);
    cmr_ingest_batch_t *sb;
    void *vals;
    int n = cmr_store_trace_batches(store, t1, &sb, &vals);
    assert_int_equal(n, 2);
    assert_int_equal(sb[0].segment_id, 10);
    assert_int_equal(sb[1].segment_id, 11);
    assert_true(sb[1].has_parent && sb[1].parent_segment == 10 && sb[1].parent_seq == fork);
    assert_int_equal(sb[0].events_len, b1[0].packed_events.len);
    assert_memory_equal(sb[0].events, b1[0].packed_events.data, b1[0].packed_events.len);
    assert_memory_equal(sb[1].events, b2[0].packed_events.data, b2[0].packed_events.len);
    cmr_store_batches_free(sb, vals);
    n = cmr_store_trace_batches(store, t2, &sb, &vals);
    assert_int_equal(n, 3);
    assert_int_equal(sb[0].batch_seq, 0);
    assert_int_equal(sb[1].batch_seq, 1);
    assert_int_equal(sb[1].first_event_seq, b3[1].first_event_seq);
    assert_memory_equal(sb[1].events, b3[1].packed_events.data, b3[1].packed_events.len);
    assert_true(sb[2].name_len == 4 && !memcmp(sb[2].thread_name, "late", 4)); /* stored without a NUL */
    cmr_store_batches_free(sb, vals);
    cmr_store_close(store);
    cmr_segs_writer_free(&w);
    synth_batches_free(b1, n1);
    synth_batches_free(b2, n2);
    synth_batches_free(b3, n3);
    synth_batches_free(b4, n4);
    synth_seg_free(&root);
    synth_seg_free(&child);
    synth_seg_free(&other);
    synth_seg_free(&late);
}

/* Feeds a segment in batches of per_batch events; batch k carries tags[k] (0 beyond ntags). */

static void feed_tagged(cmr_ingest_engine_t *e, int partition, const synth_seg_t *s, size_t per_batch,
                        const uint64_t *tags, size_t ntags, size_t from, size_t to)
{
    char err[256];
    cmr_event_batch_t *b;
    size_t n = synth_batches(s, per_batch, &b);
    for (size_t k = from; k < n && k < to; k++) {
        b[k].diagnosis_id = k < ntags ? (int64_t)tags[k] : 0;
        assert_int_equal(cmr_ingest_engine_add_batch(e, partition, &b[k], err, sizeof err), 1);
    }
    synth_batches_free(b, n);
}

/* A request across two JVMs (A1's root calls A2) whose callee segment comes after the
 * caller's was written: the partition's engine gets the root, flushes, then the child,
 * flushes; returns how many states were rebuilt from the store meanwhile. */
static uint64_t late_callee(cmr_ingest_engine_t *e, int partition, uint64_t n, bool sleep_between)
{
    uint8_t tid[16];
    synth_trace_id(n, tid);
    synth_seg_t root, callee;
    synth_seg_init(&root, tid, A1, 1, 1, "http-1", NULL);
    synth_enter(&root, M_MAIN, T0);
    int64_t fork = synth_fork(&root, T0 + 5);
    synth_exit(&root, M_MAIN, T0 + 90);
    cmr_parent_link_t link = {(int64_t)A1, 1, fork};
    synth_seg_init(&callee, tid, A2, 7, 3, "http-2", &link);
    synth_enter(&callee, M_HANDLER, T0 + 20);
    synth_exit(&callee, M_HANDLER, T0 + 60);
    cmr_ingest_stats_t before, after;
    cmr_ingest_engine_stats(e, &before);
    feed_tagged(e, partition, &root, 100, NULL, 0, 0, 100);
    assert_int_equal(cmr_ingest_engine_flush(e), 0); /* complete on its own: the caller's JVM sent first */
    if (sleep_between)
        cmr_sleep_ms(1200);                          /* past a window of 1 s */
    assert_int_equal(cmr_ingest_engine_flush(e), 0); /* an idle round */
    feed_tagged(e, partition, &callee, 100, NULL, 0, 0, 100);
    assert_int_equal(cmr_ingest_engine_flush(e), 0);
    cmr_ingest_engine_stats(e, &after);
    synth_seg_free(&root);
    synth_seg_free(&callee);
    return after.traces_reloaded - before.traces_reloaded;
}

/* Complete traces that await children (a hand-off no segment continues yet) stay in
 * memory for a while (ingest.trace.keep_ms / keep_max): a callee's segment that comes
 * after its caller's was written applies to the kept state, without reading the trace
 * back from the store, and gives the same summary as the rebuild did; past the window or
 * the bound (oldest first), with none kept, and for a trace whose hand-offs all have
 * their segments, the state is rebuilt. */
static void test_complete_traces_kept(void **state)
{
    (void)state;
    char err[512];
    cmr_store_opts_t kept = {.sync = false}, none = {.sync = false, .trace_keep_ms = -1},
                     one = {.sync = false, .trace_keep_max = 1}, brief = {.sync = false, .trace_keep_ms = 1000};
    cmr_trace_summary_t a, b;
    cmr_ingest_engine_t *e = cmr_ingest_engine_new(tmpdir, &kept, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    assert_int_equal(late_callee(e, 0, 801, false), 0); /* kept: applied in memory */
    cmr_ingest_engine_free(e);
    e = cmr_ingest_engine_new(tmpdir, &none, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    assert_int_equal(late_callee(e, 0, 802, false), 1); /* the behaviour before: rebuilt */
    cmr_ingest_engine_free(e);
    /* the same trace either way */
    cmr_ingest_view_t *v = cmr_ingest_view_open(tmpdir, err, sizeof err);
    assert_non_null(v);
    uint8_t t801[16], t802[16];
    synth_trace_id(801, t801);
    synth_trace_id(802, t802);
    assert_int_equal(cmr_ingest_view_summary(v, t801, &a), 1);
    assert_int_equal(cmr_ingest_view_summary(v, t802, &b), 1);
    cmr_ingest_view_free(v);
    assert_true(a.flags & CMR_TRACE_COMPLETE);
    assert_int_equal(a.segments, 2);
    assert_int_equal(a.agents, 2);
    memcpy(b.trace_id, a.trace_id, 16);
    assert_memory_equal(&a, &b, sizeof a);
    /* past the window (1 s here): rebuilt */
    e = cmr_ingest_engine_new(tmpdir, &brief, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    assert_int_equal(late_callee(e, 0, 803, true), 1);
    assert_int_equal(late_callee(e, 0, 804, false), 0); /* within it */
    cmr_ingest_engine_free(e);
    /* beyond the bound, the oldest go first */
    e = cmr_ingest_engine_new(tmpdir, &one, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    uint8_t t1[16], t2[16];
    synth_trace_id(805, t1);
    synth_trace_id(806, t2);
    synth_seg_t r1, r2;
    synth_seg_init(&r1, t1, A1, 1, 1, "http-1", NULL);
    synth_enter(&r1, M_MAIN, T0);
    int64_t f1 = synth_fork(&r1, T0 + 2);
    synth_exit(&r1, M_MAIN, T0 + 9);
    synth_seg_init(&r2, t2, A1, 2, 1, "http-1", NULL);
    synth_enter(&r2, M_MAIN, T0 + 10);
    int64_t f2 = synth_fork(&r2, T0 + 12);
    synth_exit(&r2, M_MAIN, T0 + 19);
    feed_tagged(e, 0, &r1, 100, NULL, 0, 0, 100);
    assert_int_equal(cmr_ingest_engine_flush(e), 0);
    feed_tagged(e, 0, &r2, 100, NULL, 0, 0, 100);
    assert_int_equal(cmr_ingest_engine_flush(e), 0);
    cmr_ingest_stats_t st;
    cmr_ingest_engine_stats(e, &st);
    assert_int_equal(st.traces_reloaded, 0);
    cmr_parent_link_t l1 = {(int64_t)A1, 1, f1}, l2 = {(int64_t)A1, 2, f2};
    synth_seg_t c1, c2, again;
    synth_seg_init(&c1, t1, A2, 1, 1, "async", &l1); /* the child of each */
    synth_enter(&c1, M_A, T0 + 3);
    synth_exit(&c1, M_A, T0 + 4);
    synth_seg_init(&c2, t2, A2, 2, 1, "async", &l2);
    synth_enter(&c2, M_A, T0 + 13);
    synth_exit(&c2, M_A, T0 + 14);
    feed_tagged(e, 0, &c2, 100, NULL, 0, 0, 100); /* the newer one is still kept */
    cmr_ingest_engine_stats(e, &st);
    assert_int_equal(st.traces_reloaded, 0);
    feed_tagged(e, 0, &c1, 100, NULL, 0, 0, 100); /* the older one was dropped for it */
    cmr_ingest_engine_stats(e, &st);
    assert_int_equal(st.traces_reloaded, 1);
    assert_int_equal(cmr_ingest_engine_flush(e), 0);
    /* trace 2 has its child now: it awaits nothing and has left memory; one more segment
     * under the same hand-off (a followed redirect's second request) rebuilds it */
    synth_seg_init(&again, t2, A2, 3, 1, "async", &l2);
    synth_enter(&again, M_A, T0 + 15);
    synth_exit(&again, M_A, T0 + 16);
    feed_tagged(e, 0, &again, 100, NULL, 0, 0, 100);
    cmr_ingest_engine_stats(e, &st);
    assert_int_equal(st.traces_reloaded, 2);
    assert_int_equal(cmr_ingest_engine_flush(e), 0);
    cmr_ingest_engine_free(e);
    synth_seg_free(&r1);
    synth_seg_free(&r2);
    synth_seg_free(&c1);
    synth_seg_free(&c2);
    synth_seg_free(&again);
}


static const json_t *method_entry(const json_t *methods, uint64_t id)
{
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, id);
    for (size_t i = 0; i < json_array_size(methods); i++) {
        const json_t *m = json_array_get(methods, i);
        if (!strcmp(json_string_value(json_object_get(m, "method_id")), hex))
            return m;
    }
    fail_msg("method %s not in the report", hex);
    return NULL;
}

static void check_method(const json_t *methods, uint64_t id, int calls, int traces, int total, int self)
{
    const json_t *m = method_entry(methods, id);
    assert_int_equal(json_integer_value(json_object_get(m, "calls")), calls);
    assert_int_equal(json_integer_value(json_object_get(m, "traces")), traces);
    assert_int_equal(json_integer_value(json_object_get(m, "total_ns")), total);
    assert_int_equal(json_integer_value(json_object_get(m, "self_ns")), self);
}

static size_t count_cf(const char *root, int partition, int cf)
{
    char err[512];
    cmr_store_opts_t ro = {.read_only = true};
    cmr_store_t *s = cmr_store_open_partition(root, partition, &ro, 0, err, sizeof err);
    assert_non_null(s);
    size_t n = 0;
    if (cmr_store_cf(s, cf)) {
        rocksdb_readoptions_t *o = rocksdb_readoptions_create();
        rocksdb_readoptions_set_total_order_seek(o, 1); /* across traces: batches and traces seek by trace */
        rocksdb_iterator_t *it = rocksdb_create_iterator_cf(cmr_store_db(s), o, cmr_store_cf(s, cf));
        for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it))
            n++;
        rocksdb_iter_destroy(it);
        rocksdb_readoptions_destroy(o);
    }
    cmr_store_close(s);
    return n;
}

static char *run_cli(const char *args, int *status)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' --store '%s' %s 2>&1", ingest_bin, tmpdir, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char *out = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&out, &len);
    char buf[4096];
    size_t r;
    while ((r = fread(buf, 1, sizeof buf, p)) > 0)
        fwrite(buf, 1, r, m);
    fclose(m);
    int st = pclose(p);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

/* Traces tagged with diagnoses: the tag only on a segment's second batch (also after the
 * state was rebuilt from the store), a trace in two diagnoses, one without a tag; the
 * index, the report's traces and per-method numbers (by hand from the events fed: see
 * build_nested_at and build_multi), HTTP and CLI answers, retention, and a store from
 * before idx_diagnosis. */
static void test_diagnosis_report(void **state)
{
    (void)state;
    char err[512];
    cmr_store_opts_t o = {.sync = true};
    cmr_ingest_engine_t *e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 3, 0), 0);
    cmr_method_entry_t m1 = {
        .method_id = M_A, .class_name = "com/example/Pay", .method_name = "a", .descriptor = "()V"};
    cmr_ingest_engine_add_method(e, &m1);
    cmr_agent_registration_t reg = {.agent_name = "shop", .hostname = "host-a", .pid = 42};
    cmr_ingest_engine_add_agent(e, &reg);
    /* nested (8 events; batches of 3: seq 0, 1, 2): main 1000/400, a 500/200 + 100/100, b 300/300 */
    synth_seg_t n30, n31, n32, multi[4];
    build_nested_at(&n30, 30, T0 + 20000);
    build_nested_at(&n31, 31, T0 + 30000);
    build_nested_at(&n32, 32, T0 + 40000);
    build_multi(multi, 33);                      /* starts at T0 */
    const uint64_t second[] = {0, D1};           /* the tag only on the second batch */
    const uint64_t both[] = {D1, D2, D1};        /* two diagnoses in one trace */
    const uint64_t task_second[] = {0, D2};      /* the pool thread's segment, second batch */
    feed_tagged(e, 0, &n30, 3, second, 2, 0, 2); /* batches 0 and 1 now, 2 after a restart */
    feed_tagged(e, 3, &n31, 3, both, 3, 0, 100);
    feed_tagged(e, 0, &n32, 3, NULL, 0, 0, 100);
    feed_tagged(e, 0, &multi[0], 2, NULL, 0, 0, 100);
    feed_tagged(e, 0, &multi[1], 2, task_second, 2, 0, 100);
    feed_tagged(e, 0, &multi[2], 2, NULL, 0, 0, 100);
    feed_tagged(e, 0, &multi[3], 2, NULL, 0, 0, 100);
    cmr_ingest_engine_free(e); /* flushes */
    /* the last batch of trace 30 to a new engine: its state comes from the store, whose
     * batches carry no tag: the summary's D1 must stay */
    e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    feed_tagged(e, 0, &n30, 3, NULL, 0, 2, 100);
    cmr_ingest_engine_free(e);

    assert_int_equal(count_cf(tmpdir, 0, CMR_CF_IDX_DIAGNOSIS), 2); /* D1|30, D2|33 */
    assert_int_equal(count_cf(tmpdir, 3, CMR_CF_IDX_DIAGNOSIS), 2); /* D1|31, D2|31 */
    cmr_ingest_view_t *v = cmr_ingest_view_open(tmpdir, err, sizeof err);
    assert_non_null(v);
    uint8_t tid[16];
    cmr_trace_summary_t sum;
    synth_trace_id(30, tid);
    assert_int_equal(cmr_ingest_view_summary(v, tid, &sum), 1);
    assert_int_equal(sum.ndiagnoses, 1);
    assert_int_equal(sum.diagnoses[0], D1);
    assert_true(sum.flags & CMR_TRACE_COMPLETE);
    synth_trace_id(31, tid);
    assert_int_equal(cmr_ingest_view_summary(v, tid, &sum), 1);
    assert_int_equal(sum.ndiagnoses, 2);
    assert_int_equal(sum.diagnoses[0], D2);
    assert_int_equal(sum.diagnoses[1], D1);
    synth_trace_id(32, tid);
    assert_int_equal(cmr_ingest_view_summary(v, tid, &sum), 1);
    assert_int_equal(sum.ndiagnoses, 0);

    /* the report of D1: traces 31, 30 (newest first); a: 4 calls 1200/600 over 2 traces */
    cmr_diag_report_t r;
    assert_int_equal(cmr_ingest_view_diagnosis(v, D1, NULL, 0, &r), 0);
    assert_int_equal(r.limit, CMR_DIAG_DEFAULT_LIMIT);
    assert_int_equal(r.ntraces, 2);
    assert_int_equal(r.found, 2);
    synth_trace_id(31, tid);
    assert_memory_equal(r.traces[0].trace_id, tid, 16);
    synth_trace_id(30, tid);
    assert_memory_equal(r.traces[1].trace_id, tid, 16);
    assert_int_equal(r.nmethods, 3);
    assert_int_equal(r.methods[0].method_id, M_MAIN); /* longest total first */
    assert_int_equal(r.methods[0].calls, 2);
    assert_int_equal(r.methods[0].total_ns, 2000);
    assert_int_equal(r.methods[0].self_ns, 800);
    assert_int_equal(r.methods[1].method_id, M_A);
    assert_int_equal(r.methods[1].calls, 4);
    assert_int_equal(r.methods[1].traces, 2);
    assert_int_equal(r.methods[1].total_ns, 1200);
    assert_int_equal(r.methods[1].self_ns, 600);
    assert_int_equal(r.methods[1].durations.max, 500);
    assert_int_equal(r.methods[1].durations.min, 100);
    assert_int_equal(r.methods[2].method_id, M_B);
    assert_int_equal(r.methods[2].calls, 2);
    assert_int_equal(r.methods[2].total_ns, 600);
    assert_int_equal(r.methods[2].self_ns, 600);
    assert_int_equal(cmr_hist_quantile(&r.methods[2].durations, 0.5), 300);
    assert_int_equal(cmr_hist_quantile(&r.methods[2].durations, 0.99), 300);
    char *text = NULL;
    size_t tlen = 0;
    FILE *mf = open_memstream(&text, &tlen);
    cmr_ingest_print_diagnosis(mf, cmr_ingest_view_names(v), &r);
    fclose(mf);
    assert_non_null(strstr(text, "diagnosis dd857cc97ac20a14: 2 traces\n"));
    assert_non_null(strstr(text, "7a00000000000000000000000000001f  2025-11-21T21:20:00.000030000Z"));
    assert_non_null(strstr(text, "shop@host-a pid 42"));
    assert_non_null(strstr(text, "       4      2       0.001       0.001"));
    assert_non_null(strstr(text, "com.example.Pay.a()V"));
    free(text);
    cmr_diag_report_free(&r);
    /* limit 1: the newest only */
    assert_int_equal(cmr_ingest_view_diagnosis(v, D1, NULL, 1, &r), 0);
    assert_int_equal(r.ntraces, 1);
    assert_int_equal(r.found, 2);
    assert_int_equal(r.methods[1].calls, 2);
    cmr_diag_report_free(&r);
    /* an id nothing carried: empty, not an error */
    assert_int_equal(cmr_ingest_view_diagnosis(v, 0x1234, NULL, 0, &r), 0);
    assert_int_equal(r.ntraces, 0);
    assert_int_equal(r.nmethods, 0);
    cmr_diag_report_free(&r);
    cmr_ingest_view_free(v);

    /* D2 over HTTP: trace 31 (nested) and 33 (multi, tagged on the pool thread's second batch) */
    char *body, target[128];
    snprintf(target, sizeof target, "/api/diagnoses/%016llx", D2);
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", target, &body), 200);
    json_error_t je;
    json_t *j = json_loads(body, 0, &je);
    assert_non_null(j);
    free(body);
    assert_string_equal(json_string_value(json_object_get(j, "diagnosis_id")), "0000000000000abc");
    json_t *traces = json_object_get(j, "traces");
    assert_int_equal(json_array_size(traces), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(traces, 0), "trace_id")),
                        "7a00000000000000000000000000001f");
    assert_string_equal(json_string_value(json_object_get(json_array_get(traces, 1), "trace_id")),
                        "7a000000000000000000000000000021");
    json_t *d31 = json_object_get(json_array_get(traces, 0), "diagnoses");
    assert_int_equal(json_array_size(d31), 2);
    assert_string_equal(json_string_value(json_array_get(d31, 1)), "dd857cc97ac20a14");
    json_t *methods = json_object_get(j, "methods");
    assert_int_equal(json_array_size(methods), 5);
    /* main 1000/400 + 2000/900 (in multi it waited 1000 for the handler in JVM 2);
     * handler 1000/1000 + 500/500 (the remote caller's, with a throw); task 1000/900;
     * a 500/200 + 100/100 + 100/100 (in multi the task is async); b 300/300 + 100/100 */
    check_method(methods, M_MAIN, 2, 2, 3000, 1300);
    check_method(methods, M_HANDLER, 2, 1, 1500, 1500);
    check_method(methods, M_TASK, 1, 1, 1000, 900);
    check_method(methods, M_A, 3, 2, 700, 400);
    check_method(methods, M_B, 2, 2, 400, 400);
    const json_t *first = json_array_get(methods, 0);
    assert_string_equal(json_string_value(json_object_get(first, "method_id")), "0000000000000100");
    assert_int_equal(json_integer_value(json_object_get(first, "max_ns")), 2000);
    assert_int_equal(json_integer_value(json_object_get(first, "p99_ns")), 2000);
    assert_int_equal(json_integer_value(json_object_get(method_entry(methods, M_B), "p50_ns")), 100);
    json_decref(j);
    snprintf(target, sizeof target, "/api/diagnoses/%016llx?limit=1", D2);
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", target, &body), 200);
    j = json_loads(body, 0, &je);
    assert_int_equal(json_array_size(json_object_get(j, "traces")), 1);
    assert_int_equal(json_integer_value(json_object_get(j, "found")), 2);
    json_decref(j);
    free(body);
    const char *bad[] = {"/api/diagnoses/xyz",
                         "/api/diagnoses/0000000000000000",
                         "/api/diagnoses/dd857cc97ac20a14ff",
                         "/api/diagnoses/",
                         "/api/diagnoses/dd857cc97ac20a14?limit=0",
                         "/api/diagnoses/dd857cc97ac20a14?limit=ten",
                         "/api/diagnoses/dd857cc97ac20a14?colour=red"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", bad[i], &body), 400);
        assert_non_null(strstr(body, "\"error\""));
        free(body);
    }
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", "/api/diagnoses/dd857cc97ac20a14?limit=0", &body), 400);
    assert_non_null(strstr(body, "limit"));
    free(body);
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", "/api/diagnoses/xyz", &body), 400);
    assert_non_null(strstr(body, "16 hex digits"));
    free(body);

    /* the CLI: the same JSON as the route, a table, bad input is bad usage (2) */
    if (ingest_bin) {
        int st;
        char *out = run_cli("diagnosis dd857cc97ac20a14 --json", &st);
        assert_int_equal(st, 0);
        assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", "/api/diagnoses/dd857cc97ac20a14", &body), 200);
        assert_true(strlen(out) == strlen(body) + 1 && !strncmp(out, body, strlen(body)));
        free(body);
        free(out);
        out = run_cli("diagnosis 0000000000000abc --limit 1", &st);
        assert_int_equal(st, 0);
        assert_non_null(strstr(out, "diagnosis 0000000000000abc: 1 traces (the newest; 2 tagged, --limit)"));
        assert_non_null(strstr(out, "CALLS TRACES"));
        free(out);
        out = run_cli("diagnosis not-an-id", &st);
        assert_int_equal(st, 2);
        assert_non_null(strstr(out, "not a diagnosis id (16 hex digits"));
        free(out);
        out = run_cli("diagnosis dd857cc97ac20a14 --limit 0", &st);
        assert_int_equal(st, 2);
        free(out);
        out = run_cli("diagnosis", &st);
        assert_int_equal(st, 2);
        free(out);
    }

    /* a store from before idx_diagnosis: read-only views still list it (the report is
     * empty there); a worker opening it adds the column family */
    for (int part = 0; part <= 3; part += 3) {
        char path[512];
        snprintf(path, sizeof path, "%s/p%03d", tmpdir, part);
        rocksdb_options_t *opts = rocksdb_options_create();
        const char *names[] = {"default",  "batches",   "traces",     "idx_time",     "idx_duration",
                               "idx_root", "idx_agent", "idx_method", "idx_diagnosis"};
        const rocksdb_options_t *cfo[9] = {opts, opts, opts, opts, opts, opts, opts, opts, opts};
        rocksdb_column_family_handle_t *h[9];
        char *re = NULL;
        rocksdb_t *db = rocksdb_open_column_families(opts, path, 9, names, cfo, h, &re);
        assert_null(re);
        rocksdb_drop_column_family(db, h[8], &re);
        assert_null(re);
        for (int i = 0; i < 9; i++)
            rocksdb_column_family_handle_destroy(h[i]);
        rocksdb_close(db);
        rocksdb_options_destroy(opts);
    }
    v = cmr_ingest_view_open(tmpdir, err, sizeof err);
    assert_non_null(v);
    cmr_trace_filter_t f = {0};
    long n;
    free(capture_list(v, &f, &n));
    assert_int_equal(n, 4);
    assert_int_equal(cmr_ingest_view_diagnosis(v, D1, NULL, 0, &r), 0);
    assert_int_equal(r.ntraces, 0);
    cmr_diag_report_free(&r);
    cmr_ingest_view_free(v);
    e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    cmr_ingest_engine_free(e);
    v = cmr_ingest_view_open(tmpdir, err, sizeof err);
    assert_non_null(v);
    cmr_ingest_view_free(v);
    assert_int_equal(count_cf(tmpdir, 0, CMR_CF_IDX_DIAGNOSIS), 0);

    /* retention deletes the index entries with the traces (re-tag trace 30 first: the
     * dropped column family took its entry) */
    e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    synth_seg_free(&n32);
    build_nested_at(&n32, 34, T0 + 50000);
    const uint64_t tag[] = {D1};
    feed_tagged(e, 0, &n32, 100, tag, 1, 0, 100);
    cmr_ingest_engine_free(e);
    assert_int_equal(count_cf(tmpdir, 0, CMR_CF_IDX_DIAGNOSIS), 1);
    o.retention_age_ms = 24LL * 3600 * 1000;
    e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 3, 0), 0);
    assert_int_equal(cmr_ingest_engine_retention(e, NULL), 5);
    cmr_ingest_engine_free(e);
    assert_int_equal(count_cf(tmpdir, 0, CMR_CF_IDX_DIAGNOSIS), 0);
    assert_int_equal(count_cf(tmpdir, 3, CMR_CF_IDX_DIAGNOSIS), 0);
    assert_int_equal(count_cf(tmpdir, 0, CMR_CF_TRACES), 0);
    synth_seg_free(&n30);
    synth_seg_free(&n31);
    synth_seg_free(&n32);
    for (int k = 0; k < 4; k++)
        synth_seg_free(&multi[k]);
}

/* --- transaction data (EventBatch.attributes) --------------------------------------------- */

/* Batch k of a segment's batches gets the attributes kv[0..n). */
static void set_attrs(cmr_event_batch_t *b, cmr_kv_t *kv, size_t n)
{
    b->attributes.items = kv;
    b->attributes.count = n;
}

static void flatten_all(cmr_event_batch_t *const *msgs, const size_t *counts, int nseg, cmr_ingest_batch_t *out,
                        size_t *n)
{
    char err[256];
    *n = 0;
    for (int i = 0; i < nseg; i++)
        for (size_t k = 0; k < counts[i]; k++)
            assert_int_equal(cmr_ingest_batch_from_msg(&msgs[i][k], &out[(*n)++], err, sizeof err), 0);
}

static void apply_all(cmr_trace_state_t *st, const cmr_ingest_batch_t *b, size_t n, bool reverse)
{
    for (size_t i = 0; i < n; i++)
        assert_int_equal(cmr_trace_state_apply(st, &b[reverse ? n - 1 - i : i], NULL, NULL, NULL), 1);
}

/* The root segment's data, sent over several batches (method on the first, path on the
 * second, status on the last), is the trace's whatever the order; a child segment's (an
 * HTTP call into another JVM) and a foreign-parent segment's do not override it; without
 * the root, the foreign-parent segment is the root and its data is shown; a state rebuilt
 * from batches without attributes gets the summary's back; the summary's encoding, and the
 * formats before it. */
static void test_http_attributes_summary(void **state)
{
    (void)state;
    synth_seg_t segs[4];
    build_multi(segs, 60);
    cmr_event_batch_t *msgs[4];
    size_t counts[4];
    for (int i = 0; i < 4; i++)
        counts[i] = synth_batches(&segs[i], 2, &msgs[i]);
    assert_int_equal(counts[0], 3);
    cmr_kv_t p0[] = {{"http.method", "GET"}, {"x.tenant", "acme"}}, p1[] = {{"http.path", "/checkout/\xc3\xbc"}},
             p2[] = {{"http.status", "200"}};
    set_attrs(&msgs[0][0], p0, 2);
    set_attrs(&msgs[0][1], p1, 1);
    set_attrs(&msgs[0][2], p2, 1);
    cmr_kv_t child[] = {{"http.method", "POST"}, {"http.path", "/child"}, {"http.status", "500"}};
    set_attrs(&msgs[2][0], child, 3);
    cmr_kv_t remote[] = {{"http.method", "PUT"}, {"http.path", "/remote"}, {"http.status", "201"}};
    set_attrs(&msgs[3][0], remote, 3);

    cmr_ingest_batch_t flat[16];
    size_t n;
    flatten_all(msgs, counts, 4, flat, &n);
    uint8_t tid[16];
    synth_trace_id(60, tid);
    cmr_trace_state_t *fw = cmr_trace_state_new(tid), *bw = cmr_trace_state_new(tid), *rm = cmr_trace_state_new(tid);
    apply_all(fw, flat, n, false);
    apply_all(bw, flat, n, true);
    cmr_trace_summary_t a, b, d;
    cmr_trace_state_summary(fw, &a);
    cmr_trace_state_summary(bw, &b);
    assert_memory_equal(&a, &b, sizeof a);
    assert_string_equal(a.http.method, "GET");
    assert_string_equal(a.http.path, "/checkout/\xc3\xbc");
    assert_int_equal(a.http.status, 200);

    /* only the child and the foreign-parent segments: the remote root's data */
    size_t from = counts[0] + counts[1];
    apply_all(rm, flat + from, n - from, false);
    cmr_trace_state_summary(rm, &d);
    assert_true(d.flags & CMR_TRACE_REMOTE_ROOT);
    assert_string_equal(d.http.method, "PUT");
    assert_int_equal(d.http.status, 201);
    apply_all(rm, flat, from, false); /* the root arrives: its data wins */
    cmr_trace_state_summary(rm, &d);
    assert_memory_equal(&a, &d, sizeof a);

    /* rebuilt from stored batches (no attributes) plus the summary's data */
    cmr_trace_state_t *rb = cmr_trace_state_new(tid);
    cmr_ingest_batch_t bare[16];
    memcpy(bare, flat, n * sizeof *flat);
    for (size_t i = 0; i < n; i++) {
        bare[i].http_method = bare[i].http_path = NULL;
        bare[i].http_status = 0;
    }
    apply_all(rb, bare, n - 1, false);
    assert_int_equal(cmr_trace_state_seed_http(rb, &a.http), 0);
    apply_all(rb, bare + n - 1, 1, false);
    cmr_trace_state_summary(rb, &d);
    assert_memory_equal(&a, &d, sizeof a);

    /* encoding: http data alone, with diagnoses, and the formats before */
    uint8_t enc[CMR_TRACE_SUMMARY_MAX_LEN], bad[CMR_TRACE_SUMMARY_MAX_LEN];
    size_t len = cmr_trace_summary_encode(&a, enc);
    size_t plen = strlen(a.http.path);
    assert_int_equal(len, CMR_TRACE_SUMMARY_LEN + 4 + 1 + 2 + 2 + 3 + 2 + plen);
    assert_int_equal(cmr_trace_summary_decode(enc, len, &d), 0);
    assert_memory_equal(&a, &d, sizeof a);
    assert_int_equal(cmr_trace_summary_decode(enc, CMR_TRACE_SUMMARY_LEN, &d), 0); /* before diagnoses */
    assert_false(cmr_trace_http_known(&d.http));
    assert_int_equal(d.start_ns, a.start_ns);
    cmr_trace_state_add_diagnosis(fw, 0x77);
    cmr_trace_state_summary(fw, &b);
    len = cmr_trace_summary_encode(&b, enc);
    assert_int_equal(len, CMR_TRACE_SUMMARY_LEN + 4 + 8 + 1 + 2 + 2 + 3 + 2 + plen);
    assert_int_equal(cmr_trace_summary_decode(enc, len, &d), 0);
    assert_memory_equal(&b, &d, sizeof b);
    assert_int_equal(cmr_trace_summary_decode(enc, CMR_TRACE_SUMMARY_LEN + 4 + 8, &d), 0); /* before http data */
    assert_int_equal(d.ndiagnoses, 1);
    assert_false(cmr_trace_http_known(&d.http));
    size_t h = CMR_TRACE_SUMMARY_LEN + 4 + 8; /* where the http data starts */
    assert_int_equal(cmr_trace_summary_decode(enc, len - 1, &d), -1);
    assert_int_equal(cmr_trace_summary_decode(enc, h + 3, &d), -1);
    memcpy(bad, enc, len);
    bad[h] = 2; /* an unknown version */
    assert_int_equal(cmr_trace_summary_decode(bad, len, &d), -1);
    memcpy(bad, enc, len);
    bad[h + 1] = 99; /* status 99 */
    bad[h + 2] = 0;
    assert_int_equal(cmr_trace_summary_decode(bad, len, &d), -1);
    memcpy(bad, enc, len);
    bad[len - 2] = 0x0a; /* a control character in the path */
    assert_int_equal(cmr_trace_summary_decode(bad, len, &d), -1);
    memcpy(bad, enc, len);
    bad[h + 5] = ' '; /* "G T": not a method */
    assert_int_equal(cmr_trace_summary_decode(bad, len, &d), -1);
    memcpy(bad, enc, CMR_TRACE_SUMMARY_LEN);
    memset(bad + CMR_TRACE_SUMMARY_LEN, 0, 4); /* no diagnoses and nothing after */
    assert_int_equal(cmr_trace_summary_decode(bad, CMR_TRACE_SUMMARY_LEN + 4, &d), -1);
    bad[CMR_TRACE_SUMMARY_LEN + 4] = 1; /* version, status 0, no method, no path: nothing known */
    memset(bad + CMR_TRACE_SUMMARY_LEN + 5, 0, 6);
    assert_int_equal(cmr_trace_summary_decode(bad, CMR_TRACE_SUMMARY_LEN + 11, &d), -1);

    cmr_trace_state_free(fw);
    cmr_trace_state_free(bw);
    cmr_trace_state_free(rm);
    cmr_trace_state_free(rb);
    for (int i = 0; i < 4; i++) {
        synth_batches_free(msgs[i], counts[i]);
        synth_seg_free(&segs[i]);
    }
}

/* An async servlet request: the root segment (the servlet's service) carries method and
 * path but no status; the segment of its completion (the agent's own node, cmr/ids.h)
 * under the root carries the status, which becomes the trace's, in any order and after a
 * rebuild; a completion under another segment (a grandchild: another request's) and an
 * ordinary child's status do not. */
static void test_http_async_completion(void **state)
{
    (void)state;
    uint8_t tid[16];
    synth_trace_id(61, tid);
    synth_seg_t segs[4];
    synth_seg_t *root = &segs[0], *done = &segs[1], *task = &segs[2], *other = &segs[3];
    synth_seg_init(root, tid, A1, 10, 1, "http-nio-1", NULL);
    synth_enter(root, M_HANDLER, T0);
    int64_t fork_task = synth_fork(root, T0 + 50);
    int64_t fork_done = synth_fork(root, T0 + 90);
    synth_exit(root, M_HANDLER, T0 + 100);
    cmr_parent_link_t to_done = {(int64_t)A1, 10, fork_done}, to_task = {(int64_t)A1, 10, fork_task};
    uint64_t completion = cmr_async_completion_id(true);
    synth_seg_init(done, tid, A1, 11, 2, "http-nio-2", &to_done);
    synth_enter(done, completion, T0 + 100);
    synth_exit(done, completion, T0 + 5000);
    synth_seg_init(task, tid, A1, 12, 3, "http-nio-3", &to_task);
    synth_enter(task, M_TASK, T0 + 60);
    int64_t fork_inner = synth_fork(task, T0 + 70);
    synth_exit(task, M_TASK, T0 + 4000);
    cmr_parent_link_t to_inner = {(int64_t)A1, 12, fork_inner};
    synth_seg_init(other, tid, A1, 13, 4, "http-nio-4", &to_inner);
    synth_enter(other, completion, T0 + 80);
    synth_exit(other, completion, T0 + 90);
    cmr_event_batch_t *msgs[4];
    size_t counts[4];
    for (int i = 0; i < 4; i++)
        counts[i] = synth_batches(&segs[i], 100, &msgs[i]);
    cmr_kv_t req[] = {{"http.method", "GET"}, {"http.path", "/orders/async"}}, st503[] = {{"http.status", "503"}},
             st201[] = {{"http.status", "201"}}, st404[] = {{"http.status", "404"}};
    set_attrs(&msgs[0][0], req, 2);
    set_attrs(&msgs[1][0], st503, 1);
    set_attrs(&msgs[2][0], st201, 1);
    set_attrs(&msgs[3][0], st404, 1);
    cmr_ingest_batch_t flat[16];
    size_t n;
    flatten_all(msgs, counts, 4, flat, &n);
    cmr_trace_summary_t a, b;
    for (int reverse = 0; reverse < 2; reverse++) {
        cmr_trace_state_t *st = cmr_trace_state_new(tid);
        apply_all(st, flat, n, reverse);
        cmr_trace_state_summary(st, &a);
        assert_string_equal(a.http.method, "GET");
        assert_string_equal(a.http.path, "/orders/async");
        assert_int_equal(a.http.status, 503);
        cmr_trace_state_free(st);
    }
    /* without the completion: no status (service's return did not answer the request) */
    cmr_trace_state_t *st = cmr_trace_state_new(tid);
    apply_all(st, flat, counts[0], false);
    apply_all(st, flat + counts[0] + counts[1], n - counts[0] - counts[1], false);
    cmr_trace_state_summary(st, &b);
    assert_int_equal(b.http.status, 0);
    /* the completion arrives late, into a state rebuilt from the store */
    cmr_trace_state_t *rb = cmr_trace_state_new(tid);
    apply_all(rb, flat, counts[0], false);
    assert_int_equal(cmr_trace_state_seed_http(rb, &b.http), 0);
    apply_all(rb, flat + counts[0], counts[1], false);
    cmr_trace_state_summary(rb, &b);
    assert_int_equal(b.http.status, 503);
    cmr_trace_state_free(st);
    cmr_trace_state_free(rb);
    for (int i = 0; i < 4; i++) {
        synth_batches_free(msgs[i], counts[i]);
        synth_seg_free(&segs[i]);
    }
}

/* What a batch's attributes may carry: the kept values, invalid ones left out and counted
 * (the batch itself is applied), empty values and unknown keys ignored; the globs and the
 * filters' checks. */
static void test_http_attributes_checks(void **state)
{
    (void)state;
    synth_seg_t s;
    build_nested(&s, 61);
    cmr_event_batch_t *msgs;
    size_t nb = synth_batches(&s, 100, &msgs);
    char err[256], long_path[300];
    memset(long_path, 'a', sizeof long_path - 1);
    long_path[0] = '/';
    long_path[sizeof long_path - 1] = '\0';
    char path256[CMR_TRACE_HTTP_MAX + 1];
    memcpy(path256, long_path, CMR_TRACE_HTTP_MAX);
    path256[CMR_TRACE_HTTP_MAX] = '\0';
    static const struct {
        const char *key, *value;
        bool kept;
    } cases[] = {
        {"http.method", "GET", true},
        {"http.method", "M-SEARCH", true},
        {"http.method", "GE T", false},
        {"http.method", "GET\r\n", false},
        {"http.method", "", true}, /* empty: not known, not counted */
        {"http.path", "/a b/\xe2\x82\xac", true},
        {"http.path", "/a\x01", false},
        {"http.path", "/a\x7f", false},
        {"http.path", "/a\xc2\x85", false},     /* C1 control (NEL) */
        {"http.path", "/a\xc0\xaf", false},     /* overlong */
        {"http.path", "/a\xed\xa0\x80", false}, /* surrogate */
        {"http.path", "/a\xff", false},
        {"http.path", "/a\xe2\x82", false}, /* cut */
        {"http.status", "200", true},
        {"http.status", "999", true},
        {"http.status", "099", false},
        {"http.status", "1000", false},
        {"http.status", "20", false},
        {"http.status", "2x0", false},
        {"http.status", "-200", false},
        {"http.other", "\x01", true}, /* unknown: ignored whatever it holds */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cmr_kv_t kv[] = {{(char *)cases[i].key, (char *)cases[i].value}};
        set_attrs(&msgs[0], kv, 1);
        cmr_ingest_batch_t b;
        assert_int_equal(cmr_ingest_batch_from_msg(&msgs[0], &b, err, sizeof err), 0);
        if (b.attrs_dropped != (cases[i].kept ? 0u : 1u))
            fail_msg("%s=\"%s\": dropped %u", cases[i].key, cases[i].value, b.attrs_dropped);
        bool set = b.http_method || b.http_path || b.http_status;
        assert_int_equal(set, cases[i].kept && cases[i].value[0] && strcmp(cases[i].key, "http.other"));
    }
    cmr_kv_t many[] = {{"http.path", path256},
                       {"http.path", "/second"},
                       {"http.method", long_path},
                       {"http.status", "404"},
                       {"http.path", NULL}};
    set_attrs(&msgs[0], many, 4);
    cmr_ingest_batch_t b;
    assert_int_equal(cmr_ingest_batch_from_msg(&msgs[0], &b, err, sizeof err), 0);
    assert_int_equal(b.attrs_dropped, 2); /* the repeated path, the method over 256 bytes */
    assert_string_equal(b.attrs_drop_key, "http.path");
    assert_string_equal(b.http_path, path256);
    assert_int_equal(b.http_status, 404);
    assert_null(b.http_method);
    long_path[CMR_TRACE_HTTP_MAX + 1] = '\0';
    cmr_kv_t longer[] = {{"http.path", long_path}};
    set_attrs(&msgs[0], longer, 1);
    assert_int_equal(cmr_ingest_batch_from_msg(&msgs[0], &b, err, sizeof err), 0);
    assert_int_equal(b.attrs_dropped, 1);

    /* globs: as the agent's Probe.glob */
    assert_true(cmr_http_glob("5*", "503"));
    assert_false(cmr_http_glob("5*", "200"));
    assert_true(cmr_http_glob("?0?", "404"));
    assert_false(cmr_http_glob("?0?", "4040"));
    assert_true(cmr_http_glob("/checkout*", "/checkout/cart"));
    assert_true(cmr_http_glob("*cart", "/checkout/cart"));
    assert_true(cmr_http_glob("/a*b*c", "/axxbyyc"));
    assert_false(cmr_http_glob("/a*b*c", "/axxbyy"));
    assert_true(cmr_http_glob("*", ""));
    assert_false(cmr_http_glob("GET", "GETX"));
    assert_true(cmr_http_glob("/\xc3\xbc?", "/\xc3\xbc\xe2\x82\xac")); /* '?' is one character */
    assert_false(cmr_http_glob("/??", "/\xe2\x82\xac"));
    assert_true(cmr_http_glob("/[a]", "/[a]")); /* no brackets */
    assert_false(cmr_http_glob("*a", "*ba"));   /* the agent's quirk: a '*' of the text is itself first */

    cmr_trace_filter_t f = {0};
    assert_int_equal(cmr_trace_filter_set(&f, "http-status", "5*", err, sizeof err), 0);
    assert_int_equal(cmr_trace_filter_set(&f, "http_method", "GET", err, sizeof err), 0);
    assert_int_equal(cmr_trace_filter_set(&f, "http_path", "/a b*", err, sizeof err), 0);
    assert_string_equal(f.http.status, "5*");
    assert_string_equal(f.http.method, "GET");
    cmr_trace_http_t h = {.method = "GET", .path = "/a b/c", .status = 503};
    assert_true(cmr_http_filter_match(&f.http, &h));
    h.status = 0;
    assert_false(cmr_http_filter_match(&f.http, &h)); /* not known: no match */
    const char *bad[][2] = {{"http-status", "abc"},  {"http-status", "5 "}, {"http-path", ""},
                            {"http-method", "\x01"}, {"http_path", "\xff"}, {"http-path", long_path}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char big[CMR_HTTP_FILTER_MAX + 2];
        const char *v = bad[i][1];
        if (v == long_path) {
            memset(big, 'x', sizeof big - 1);
            big[sizeof big - 1] = '\0';
            v = big;
        }
        err[0] = '\0';
        assert_int_equal(cmr_trace_filter_set(&f, bad[i][0], v, err, sizeof err), -1);
        assert_non_null(strstr(err, "bad glob"));
    }
    synth_batches_free(msgs, nb);
    synth_seg_free(&s);
}

/* Feeds batches [from, to) of a segment cut in per_batch events; batch attrs[k].batch gets
 * attrs[k]'s values; every batch carries tag. 1, or 2 when values were left out (err: the
 * engine's words for the first batch that did). */
typedef struct batch_attrs {
    size_t batch;
    cmr_kv_t kv[3];
    size_t n;
} batch_attrs_t;

static int feed_attrs(cmr_ingest_engine_t *e, int partition, const synth_seg_t *s, size_t per_batch,
                      batch_attrs_t *attrs, size_t nattrs, uint64_t tag, size_t from, size_t to, char *err,
                      size_t errlen)
{
    cmr_event_batch_t *b;
    size_t n = synth_batches(s, per_batch, &b);
    int rc = 1;
    for (size_t k = from; k < n && k < to; k++) {
        for (size_t i = 0; i < nattrs; i++)
            if (attrs[i].batch == k)
                set_attrs(&b[k], attrs[i].kv, attrs[i].n);
        b[k].diagnosis_id = (int64_t)tag;
        char why[256];
        int r = cmr_ingest_engine_add_batch(e, partition, &b[k], why, sizeof why);
        assert_int_equal(r, 1);
        if (why[0] && rc == 1) { /* the first batch that left values out */
            rc = 2;
            snprintf(err, errlen, "%s", why);
        }
    }
    synth_batches_free(b, n);
    return rc;
}

static size_t stored_summary_len(const char *root, int partition, uint64_t trace_n)
{
    char err[512];
    cmr_store_opts_t ro = {.read_only = true};
    cmr_store_t *s = cmr_store_open_partition(root, partition, &ro, 0, err, sizeof err);
    assert_non_null(s);
    uint8_t tid[16];
    synth_trace_id(trace_n, tid);
    rocksdb_readoptions_t *o = rocksdb_readoptions_create();
    char *e = NULL;
    size_t len = 0;
    char *v = rocksdb_get_cf(cmr_store_db(s), o, cmr_store_cf(s, CMR_CF_TRACES), (const char *)tid, 16, &len, &e);
    assert_null(e);
    assert_non_null(v);
    rocksdb_free(v);
    rocksdb_readoptions_destroy(o);
    cmr_store_close(s);
    return len;
}

/* The ids of a list, as one string "70,71," for comparisons. */
static void list_ids(cmr_ingest_view_t *v, const char *key, const char *value, const char *key2, const char *value2,
                     char *out, size_t len)
{
    cmr_trace_filter_t f = {0};
    char err[256];
    assert_int_equal(cmr_trace_filter_set(&f, key, value, err, sizeof err), 0);
    if (key2)
        assert_int_equal(cmr_trace_filter_set(&f, key2, value2, err, sizeof err), 0);
    cmr_trace_summary_t *s;
    long n = cmr_ingest_view_list(v, &f, &s);
    assert_true(n >= 0);
    out[0] = '\0';
    for (long i = n - 1; i >= 0; i--) /* oldest first */
        snprintf(out + strlen(out), len - strlen(out), "%u,", (unsigned)s[i].trace_id[15]);
    free(s);
}

/* Stored traces with transaction data: on the root over several batches (also across a
 * state rebuilt from the store), a child's that must not count, none (the summary stays in
 * the format before http data), data added to a summary of that format, invalid values
 * (counted, the batch applied); the filters of the list (view, HTTP, CLI) and of a
 * diagnosis' report, the JSON and text output, and bad filters (400, exit 2). */
static void test_http_store_filters(void **state)
{
    (void)state;
    char err[512];
    cmr_store_opts_t o = {.sync = true};
    cmr_ingest_engine_t *e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);

    /* 70: GET /checkout/cart 200 over three batches of the root; the child in JVM 2 was
     * POST /child 500 */
    synth_seg_t multi[4];
    build_multi(multi, 70);
    batch_attrs_t root70[] = {
        {0, {{"http.method", "GET"}}, 1}, {1, {{"http.path", "/checkout/cart"}}, 1}, {2, {{"http.status", "200"}}, 1}};
    batch_attrs_t child70[] = {{0, {{"http.method", "POST"}, {"http.path", "/child"}, {"http.status", "500"}}, 3}};
    assert_int_equal(feed_attrs(e, 0, &multi[2], 2, child70, 1, 0, 0, 99, err, sizeof err), 1);
    assert_int_equal(feed_attrs(e, 0, &multi[0], 2, root70, 3, D1, 0, 99, err, sizeof err), 1);
    assert_int_equal(feed_attrs(e, 0, &multi[1], 2, NULL, 0, 0, 0, 99, err, sizeof err), 1);

    /* 71: POST /pay on the first batch; the status on the last, after the partition was
     * closed (the state is rebuilt from the store) */
    synth_seg_t n71, n72, n73, n74;
    build_nested_at(&n71, 71, T0 + 10000);
    batch_attrs_t a71[] = {{0, {{"http.method", "POST"}, {"http.path", "/pay"}}, 2}, {2, {{"http.status", "503"}}, 1}};
    assert_int_equal(feed_attrs(e, 0, &n71, 3, a71, 2, D1, 0, 2, err, sizeof err), 1);
    /* 72: none; 73: none at first (both stored in the format before http data) */
    build_nested_at(&n72, 72, T0 + 20000);
    build_nested_at(&n73, 73, T0 + 30000);
    feed_attrs(e, 0, &n72, 3, NULL, 0, 0, 0, 99, err, sizeof err);
    feed_attrs(e, 0, &n73, 3, NULL, 0, 0, 0, 2, err, sizeof err);
    assert_int_equal(cmr_ingest_engine_close_partition(e, 0), 0);
    assert_int_equal(stored_summary_len(tmpdir, 0, 72), CMR_TRACE_SUMMARY_LEN);
    assert_int_equal(stored_summary_len(tmpdir, 0, 73), CMR_TRACE_SUMMARY_LEN);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    assert_int_equal(feed_attrs(e, 0, &n71, 3, a71, 2, D1, 2, 99, err, sizeof err), 1);
    batch_attrs_t a73[] = {{2, {{"http.status", "404"}}, 1}};
    assert_int_equal(feed_attrs(e, 0, &n73, 3, a73, 1, 0, 2, 99, err, sizeof err), 1);
    /* 74: invalid method and path, left out and counted; the status kept */
    build_nested_at(&n74, 74, T0 + 40000);
    batch_attrs_t a74[] = {{0, {{"http.method", "GE T"}, {"http.path", "/a\x01"}, {"http.status", "200"}}, 3}};
    assert_int_equal(feed_attrs(e, 0, &n74, 3, a74, 1, 0, 0, 99, err, sizeof err), 2);
    assert_non_null(strstr(err, "2 attribute value(s) left out: http.method"));
    cmr_ingest_stats_t stats;
    cmr_ingest_engine_stats(e, &stats);
    assert_int_equal(stats.attributes_rejected, 2);
    assert_int_equal(stats.rejected, 0);
    cmr_ingest_engine_free(e);

    cmr_ingest_view_t *v = cmr_ingest_view_open(tmpdir, err, sizeof err);
    assert_non_null(v);
    uint8_t tid[16];
    cmr_trace_summary_t s;
    synth_trace_id(70, tid);
    assert_int_equal(cmr_ingest_view_summary(v, tid, &s), 1);
    assert_string_equal(s.http.method, "GET");
    assert_string_equal(s.http.path, "/checkout/cart");
    assert_int_equal(s.http.status, 200);
    synth_trace_id(71, tid);
    assert_int_equal(cmr_ingest_view_summary(v, tid, &s), 1);
    assert_string_equal(s.http.method, "POST");
    assert_string_equal(s.http.path, "/pay");
    assert_int_equal(s.http.status, 503);
    synth_trace_id(73, tid);
    assert_int_equal(cmr_ingest_view_summary(v, tid, &s), 1);
    assert_string_equal(s.http.method, "");
    assert_int_equal(s.http.status, 404);
    synth_trace_id(74, tid);
    assert_int_equal(cmr_ingest_view_summary(v, tid, &s), 1);
    assert_string_equal(s.http.method, "");
    assert_string_equal(s.http.path, "");
    assert_int_equal(s.http.status, 200);
    assert_int_equal(stored_summary_len(tmpdir, 0, 72), CMR_TRACE_SUMMARY_LEN);

    char ids[256];
    list_ids(v, "limit", "100", NULL, NULL, ids, sizeof ids);
    assert_string_equal(ids, "70,71,72,73,74,");
    list_ids(v, "http-method", "GET", NULL, NULL, ids, sizeof ids);
    assert_string_equal(ids, "70,");
    list_ids(v, "http-method", "P*", NULL, NULL, ids, sizeof ids);
    assert_string_equal(ids, "71,"); /* the child's POST is not the trace's */
    list_ids(v, "http-status", "5*", NULL, NULL, ids, sizeof ids);
    assert_string_equal(ids, "71,");
    list_ids(v, "http-status", "200", NULL, NULL, ids, sizeof ids);
    assert_string_equal(ids, "70,74,");
    list_ids(v, "http-status", "4??", NULL, NULL, ids, sizeof ids);
    assert_string_equal(ids, "73,");
    list_ids(v, "http-path", "/checkout*", "http-status", "2*", ids, sizeof ids);
    assert_string_equal(ids, "70,");
    list_ids(v, "http-path", "/child", NULL, NULL, ids, sizeof ids);
    assert_string_equal(ids, "");
    list_ids(v, "http-status", "*", "slowest", "1", ids, sizeof ids);
    assert_int_equal(strlen(ids), strlen("70,71,73,74,"));

    /* text */
    cmr_trace_filter_t f = {0};
    long cnt;
    char *text = capture_list(v, &f, &cnt);
    assert_non_null(strstr(text, "METHOD  STATUS  ROOT  [PATH]"));
    assert_non_null(strstr(text, "POST       503  "));
    assert_non_null(strstr(text, "  [/checkout/cart]\n"));
    assert_non_null(strstr(text, " complete   -            -  ")); /* 72: nothing known */
    free(text);
    cmr_tree_t t;
    synth_trace_id(71, tid);
    assert_int_equal(cmr_ingest_view_tree(v, tid, &t), 1);
    char *buf = NULL;
    size_t blen = 0;
    FILE *m = open_memstream(&buf, &blen);
    cmr_ingest_print_tree(m, cmr_ingest_view_names(v), &t);
    fclose(m);
    assert_non_null(strstr(buf, "\n  http POST /pay 503\n"));
    free(buf);
    cmr_tree_free(&t);

    /* the diagnosis' report with the filters */
    cmr_diag_report_t r;
    cmr_http_filter_t hf = {.status = "5*"};
    assert_int_equal(cmr_ingest_view_diagnosis(v, D1, &hf, 0, &r), 0);
    assert_int_equal(r.found, 1);
    assert_int_equal(r.ntraces, 1);
    assert_int_equal(r.traces[0].http.status, 503);
    cmr_diag_report_free(&r);
    assert_int_equal(cmr_ingest_view_diagnosis(v, D1, NULL, 0, &r), 0);
    assert_int_equal(r.found, 2);
    cmr_diag_report_free(&r);
    cmr_ingest_view_free(v);

    /* HTTP */
    char *body;
    json_error_t je;
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", "/api/traces?http_status=5*&http_method=POST", &body), 200);
    json_t *j = json_loads(body, 0, &je);
    assert_non_null(j);
    json_t *arr = json_object_get(j, "traces");
    assert_int_equal(json_array_size(arr), 1);
    json_t *http = json_object_get(json_array_get(arr, 0), "http");
    assert_string_equal(json_string_value(json_object_get(http, "method")), "POST");
    assert_string_equal(json_string_value(json_object_get(http, "path")), "/pay");
    assert_int_equal(json_integer_value(json_object_get(http, "status")), 503);
    json_decref(j);
    free(body);
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", "/api/traces?http_path=%2Fcheckout%2A", &body), 200);
    assert_non_null(strstr(body, "\"http\":{\"method\":\"GET\",\"path\":\"/checkout/cart\",\"status\":200}"));
    free(body);
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", "/api/traces?limit=100", &body), 200);
    assert_non_null(strstr(body, "\"http\":null")); /* 72 */
    assert_non_null(strstr(body, "\"http\":{\"method\":null,\"path\":null,\"status\":404}"));
    free(body);
    char target[128], hex[33];
    synth_trace_id(70, tid);
    cmr_hex(tid, 16, hex);
    snprintf(target, sizeof target, "/api/traces/%s", hex);
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", target, &body), 200);
    assert_non_null(strstr(body, "\"http\":{\"method\":\"GET\",\"path\":\"/checkout/cart\",\"status\":200}"));
    free(body);
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", "/api/diagnoses/dd857cc97ac20a14?http_status=5%2A", &body),
                     200);
    j = json_loads(body, 0, &je);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "found")), 1);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "filter"), "http_status")), "5*");
    json_decref(j);
    free(body);
    const char *bad[] = {"/api/traces?http_status=abc",
                         "/api/traces?http_path=",
                         "/api/traces?http_method=%01",
                         "/api/traces?http_path=%FF",
                         "/api/diagnoses/dd857cc97ac20a14?http_status=5x",
                         "/api/diagnoses/dd857cc97ac20a14?http_method="};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", bad[i], &body), 400);
        assert_non_null(strstr(body, "bad glob"));
        free(body);
    }

    /* the CLI */
    if (ingest_bin) {
        int st;
        char *out = run_cli("traces --http-status '5*' --json", &st);
        assert_int_equal(st, 0);
        assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", "/api/traces?http_status=5*", &body), 200);
        assert_true(strlen(out) == strlen(body) + 1 && !strncmp(out, body, strlen(body)));
        free(body);
        free(out);
        out = run_cli("traces --http-method GET --http-path '/check*'", &st);
        assert_int_equal(st, 0);
        assert_non_null(strstr(out, "[/checkout/cart]"));
        assert_null(strstr(out, "/pay"));
        free(out);
        snprintf(target, sizeof target, "show %s", hex);
        out = run_cli(target, &st);
        assert_int_equal(st, 0);
        assert_non_null(strstr(out, "\n  http GET /checkout/cart 200\n"));
        free(out);
        out = run_cli("diagnosis dd857cc97ac20a14 --http-status '5*'", &st);
        assert_int_equal(st, 0);
        assert_non_null(strstr(out, "diagnosis dd857cc97ac20a14: 1 traces with http.status=5*\n"));
        assert_non_null(strstr(out, "[/pay]"));
        free(out);
        const char *bad_cli[] = {"traces --http-status abc", "traces --http-path ''",
                                 "traces --http-method \"$(printf '\\001')\"",
                                 "diagnosis dd857cc97ac20a14 --http-status x"};
        for (size_t i = 0; i < sizeof bad_cli / sizeof bad_cli[0]; i++) {
            out = run_cli(bad_cli[i], &st);
            if (st != 2)
                fail_msg("%s: exit %d: %s", bad_cli[i], st, out);
            assert_non_null(strstr(out, "bad glob"));
            free(out);
        }
    }
    for (int k = 0; k < 4; k++)
        synth_seg_free(&multi[k]);
    synth_seg_free(&n71);
    synth_seg_free(&n72);
    synth_seg_free(&n73);
    synth_seg_free(&n74);
}

/* The engine's trace states (cmr_map_t keyed by trace id) past the point where a
 * partition drops them (20,000 traces): every redelivered batch is still recognised,
 * from memory or from the store. */
/* An AgentStatus as cmr.agent-events delivers it, through the engine's table records. */
static int add_status_rc(cmr_ingest_engine_t *e, uint64_t agent, const char *env, cmr_agent_state_t state,
                         int64_t time_ms)
{
    char err[256];
    cmr_agent_status_t st = {.agent_id = (int64_t)agent,
                             .instance_id = "i-1",
                             .state = state,
                             .time_ms = time_ms,
                             .environment_id = (char *)env};
    cmr_buf_t b = {0};
    assert_int_equal(cmr_msg_encode(CMR_MSG_AGENT_STATUS, &st, &b, err, sizeof err), CMR_WIRE_OK);
    cmr_reader_rec_t rec = {.payload = b.data, .len = b.len};
    int rc = cmr_ingest_engine_add_table_record(e, cmr_topic_name(CMR_TOPIC_AGENT_EVENTS), &rec);
    cmr_buf_free(&b);
    return rc;
}

static void add_status(cmr_ingest_engine_t *e, uint64_t agent, const char *env, cmr_agent_state_t state,
                       int64_t time_ms)
{
    assert_int_equal(add_status_rc(e, agent, env, state, time_ms), 1);
}

/* Agent statuses over time: the first of each minute and every change of state are kept,
 * and within a minute the newest replaces the one before, so the list of agents shows the
 * newest counters (a status every 30 s used to leave it a minute behind). */
static void test_status_history_keeps_the_newest(void **state)
{
    (void)state;
    char err[512];
    cmr_store_opts_t o = {.sync = true};
    cmr_ingest_engine_t *e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    uint64_t agent = 0x5151;
    int64_t t = 1763760000000;
    add_status(e, agent, "prod", CMR_AGENT_FULL, t);                                 /* kept: the first */
    add_status(e, agent, "prod", CMR_AGENT_FULL, t + 30000);                         /* kept, then replaced */
    add_status(e, agent, "prod", CMR_AGENT_FULL, t + 45000);                         /* the newest of that minute */
    assert_int_equal(add_status_rc(e, agent, "prod", CMR_AGENT_FULL, t + 40000), 0); /* older: not kept */
    add_status(e, agent, "prod", CMR_AGENT_FULL, t + 61000);                         /* a new minute */
    add_status(e, agent, "prod", CMR_AGENT_DISCONNECTED, t + 62000);                 /* a change of state */
    add_status(e, agent, "prod", CMR_AGENT_DISCONNECTED, t + 70000);                 /* the newest */
    assert_int_equal(cmr_ingest_engine_flush(e), 0);
    cmr_ingest_engine_free(e);
    char *json = NULL;
    assert_int_equal(cmr_ingest_agents(tmpdir, agent, 0, 0, &json, NULL, err, sizeof err), 0);
    json_error_t je;
    json_t *doc = json_loads(json, 0, &je);
    assert_non_null(doc);
    json_t *h = json_object_get(doc, "history");
    const int64_t want[] = {t, t + 45000, t + 61000, t + 62000, t + 70000};
    assert_int_equal(json_array_size(h), 5);
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(json_integer_value(json_object_get(json_array_get(h, i), "time_ms")), want[i]);
    json_decref(doc);
    free(json);
    assert_int_equal(cmr_ingest_agents(tmpdir, 0, 0, 0, &json, NULL, err, sizeof err), 0);
    doc = json_loads(json, 0, &je);
    assert_non_null(doc);
    json_t *a = json_array_get(json_object_get(doc, "agents"), 0);
    assert_int_equal(json_integer_value(json_object_get(a, "time_ms")), t + 70000);
    json_decref(doc);
    free(json);
}

/* The env filter: traces of JVMs in two environments (one trace spans both), an agent
 * whose latest status moved it to the other environment (that status only in the second
 * meta slot), an agent without a status, an environment of many JVMs (checked on the
 * time index's candidates), combined with another filter; unknown and bad values over
 * the view, HTTP and the CLI. */
static void test_env_filter(void **state)
{
    (void)state;
    char err[512];
    cmr_store_opts_t o = {.sync = true};
    cmr_ingest_engine_t *e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 3, 0), 0);
    cmr_agent_registration_t r1 = {.agent_name = "shop", .hostname = "host-a"},
                             r2 = {.agent_name = "billing", .hostname = "host-b"},
                             r3 = {.agent_name = "cart", .hostname = "host-c"},
                             r4 = {.agent_name = "batch", .hostname = "host-d"};
    cmr_ingest_engine_add_agent(e, &r1);
    cmr_ingest_engine_add_agent(e, &r2);
    cmr_ingest_engine_add_agent(e, &r3);
    cmr_ingest_engine_add_agent(e, &r4);
    uint64_t A3 = cmr_agent_id("cart", "host-c", NULL), A4 = cmr_agent_id("batch", "host-d", NULL);
    int64_t t = 1763760000000;
    /* A1 prod; A2 was prod, then stage; A3 stage (slot 0); A4 reports nothing */
    add_status(e, A1, "prod", CMR_AGENT_FULL, t);
    add_status(e, A2, "prod", CMR_AGENT_FULL, t);
    add_status(e, A2, "stage", CMR_AGENT_FULL, t + 60000);
    add_status(e, A3, "stage", CMR_AGENT_FULL, t);
    /* 80: A1 alone; 81: A1 and A2; 82: A2 alone; 83: A3 alone; 84: A4 alone */
    synth_seg_t multi[4], n80, n82, n83, n84;
    build_nested_by(&n80, 80, T0 + 10000, A1);
    build_multi(multi, 81);
    build_nested_by(&n82, 82, T0 + 20000, A2);
    build_nested_by(&n83, 83, T0 + 30000, A3);
    build_nested_by(&n84, 84, T0 + 40000, A4);
    feed(e, 0, &n80, 1, 3, 0);
    feed(e, 0, multi, 4, 2, 0);
    feed(e, 3, &n82, 1, 3, 0);
    feed(e, 3, &n83, 1, 3, 0);
    feed(e, 0, &n84, 1, 3, 0);
    assert_int_equal(cmr_ingest_engine_flush(e), 0);
    /* a second worker (meta slot 1) read further: A3 moved to prod; and 20 JVMs of env
     * "many" with A4 among them */
    cmr_ingest_engine_t *e2 = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e2);
    add_status(e2, A3, "stage", CMR_AGENT_FULL, t);
    add_status(e2, A3, "prod", CMR_AGENT_RECONNECTED, t + 1000);
    add_status(e2, A4, "many", CMR_AGENT_FULL, t);
    for (uint64_t k = 0; k < 20; k++)
        add_status(e2, 0x9000 + k, "many", CMR_AGENT_FULL, t);
    assert_int_equal(cmr_ingest_engine_flush(e2), 0);
    cmr_ingest_engine_free(e2);
    cmr_ingest_engine_free(e);

    cmr_ingest_view_t *v = cmr_ingest_view_open(tmpdir, err, sizeof err);
    assert_non_null(v);
    cmr_store_t *const *metas;
    assert_int_equal(cmr_ingest_view_metas(v, &metas), 2);
    uint64_t *ids;
    assert_int_equal(cmr_ingest_status_env_agents(metas, 2, "stage", &ids), 1);
    assert_true(ids[0] == A2); /* A3's newest status (slot 1) is prod's */
    free(ids);
    assert_int_equal(cmr_ingest_status_env_agents(metas, 2, "many", &ids), 21);
    free(ids);
    char list[256];
    list_ids(v, "env", "prod", NULL, NULL, list, sizeof list);
    assert_string_equal(list, "81,80,83,"); /* 81 spans prod and stage; A3 moved to prod */
    list_ids(v, "env", "stage", NULL, NULL, list, sizeof list);
    assert_string_equal(list, "81,82,"); /* A2 was prod before: no longer counts there */
    list_ids(v, "env", "many", NULL, NULL, list, sizeof list);
    assert_string_equal(list, "84,"); /* 21 JVMs: through the time index */
    list_ids(v, "env", "many", "slowest", "1", list, sizeof list);
    assert_string_equal(list, "84,");
    list_ids(v, "env", "prod", "agent", "billing", list, sizeof list);
    assert_string_equal(list, "81,");
    list_ids(v, "env", "prod", "limit", "1", list, sizeof list);
    assert_string_equal(list, "83,");
    list_ids(v, "env", "nowhere", NULL, NULL, list, sizeof list);
    assert_string_equal(list, "");
    list_ids(v, "env", "pro", NULL, NULL, list, sizeof list); /* exact, not a part */
    assert_string_equal(list, "");
    cmr_trace_filter_t f = {0};
    char longid[CMR_ENV_ID_MAX + 2];
    memset(longid, 'e', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    assert_int_equal(cmr_trace_filter_set(&f, "env", "", err, sizeof err), -1);
    assert_non_null(strstr(err, "env: "));
    assert_int_equal(cmr_trace_filter_set(&f, "env", longid, err, sizeof err), -1);
    assert_int_equal(cmr_trace_filter_set(&f, "env", "a\tb", err, sizeof err), -1);
    assert_int_equal(cmr_trace_filter_set(&f, "env", "a\x7f", err, sizeof err), -1);
    longid[CMR_ENV_ID_MAX] = '\0';
    assert_int_equal(cmr_trace_filter_set(&f, "env", longid, err, sizeof err), 0);
    cmr_ingest_view_free(v);
    synth_seg_free(&n80);
    synth_seg_free(&n82);
    synth_seg_free(&n83);
    synth_seg_free(&n84);
    for (int i = 0; i < 4; i++)
        synth_seg_free(&multi[i]);

    /* HTTP */
    char *body;
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", "/api/traces?env=stage", &body), 200);
    json_t *doc = json_loads(body, 0, NULL);
    assert_non_null(doc);
    json_t *traces = json_object_get(doc, "traces");
    assert_int_equal(json_array_size(traces), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(traces, 0), "trace_id")),
                        "7a000000000000000000000000000052");
    json_decref(doc);
    free(body);
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", "/api/traces?env=nowhere", &body), 200);
    assert_string_equal(body, "{\"traces\":[]}");
    free(body);
    const char *bad[] = {"/api/traces?env=", "/api/traces?env", "/api/traces?env=a%01b", "/api/traces?env=a%7Fb"};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", bad[i], &body), 400);
        assert_non_null(strstr(body, "env: an environment id"));
        free(body);
    }
    char target[256];
    snprintf(target, sizeof target, "/api/traces?env=%s", longid);
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", target, &body), 200);
    free(body);
    snprintf(target, sizeof target, "/api/traces?env=%se", longid);
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", target, &body), 400);
    free(body);

    /* CLI */
    if (ingest_bin) {
        int st;
        char *out = run_cli("traces --env prod --json", &st);
        assert_int_equal(st, 0);
        doc = json_loads(out, 0, NULL);
        assert_non_null(doc);
        assert_int_equal(json_array_size(json_object_get(doc, "traces")), 3);
        json_decref(doc);
        free(out);
        out = run_cli("traces --env nowhere", &st);
        assert_int_equal(st, 0);
        assert_non_null(strstr(out, "TRACE"));
        assert_null(strstr(out, "7a0000"));
        free(out);
        out = run_cli("traces --env ''", &st);
        assert_int_equal(st, 2);
        assert_non_null(strstr(out, "env: an environment id"));
        free(out);
    }
}

static void test_engine_many_traces(void **state)
{
    (void)state;
    enum { NTRACES = 20500 };
    char err[512];
    cmr_store_opts_t o = {.sync = false};
    cmr_ingest_engine_t *e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 1, 0), 0);
    synth_seg_t s;
    uint8_t tid[16];
    synth_trace_id(5000, tid);
    synth_seg_init(&s, tid, A1, 1, 1, "main", NULL);
    synth_enter(&s, M_MAIN, T0);
    synth_enter(&s, M_A, T0 + 1);
    synth_exit(&s, M_A, T0 + 2);
    synth_exit(&s, M_MAIN, T0 + 3);
    cmr_event_batch_t *b;
    size_t nb = synth_batches(&s, 2, &b);
    assert_int_equal(nb, 2);
    for (int round = 0; round < 3; round++) { /* first half, everything, everything again */
        for (uint32_t i = 0; i < NTRACES; i++) {
            for (size_t k = 0; k < nb; k++) {
                if (round == 0 && k == 1)
                    continue;
                memcpy(b[k].trace_id + 12, &i, 4);
                b[k].trace_id[0] = 0x7b;
                int r = cmr_ingest_engine_add_batch(e, 1, &b[k], err, sizeof err);
                assert_int_equal(r, round == 0 || (round == 1 && k == 1) ? 1 : 0);
            }
            if (i % 1000 == 999)
                assert_int_equal(cmr_ingest_engine_flush(e), 0);
        }
        assert_int_equal(cmr_ingest_engine_flush(e), 0);
    }
    cmr_ingest_stats_t st;
    cmr_ingest_engine_stats(e, &st);
    assert_int_equal(st.batches, 2 * NTRACES);
    assert_int_equal(st.duplicates, 3 * NTRACES);
    cmr_ingest_engine_free(e);
    synth_batches_free(b, nb);
    synth_seg_free(&s);

    cmr_ingest_view_t *v = cmr_ingest_view_open(tmpdir, err, sizeof err);
    assert_non_null(v);
    cmr_trace_filter_t f = {.limit = 100000};
    cmr_trace_summary_t *sum;
    long n = cmr_ingest_view_list(v, &f, &sum);
    assert_int_equal(n, NTRACES);
    for (long i = 0; i < n; i++)
        assert_true(sum[i].flags & CMR_TRACE_COMPLETE);
    free(sum);
    cmr_ingest_view_free(v);

    /* an HTTP error repeats the request's bytes: control characters become spaces */
    char *body;
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", "/api/traces?from=%22x%0Ay%5C", &body), 400);
    json_error_t je;
    json_t *j = json_loads(body, 0, &je);
    assert_non_null(j);
    assert_non_null(strstr(json_string_value(json_object_get(j, "error")), "from: bad time \"\"x y\\\""));
    json_decref(j);
    free(body);
    assert_int_equal(cmr_ingest_http_answer(tmpdir, "GET", "/health", &body), 200);
    assert_string_equal(body, "{\"status\":\"ok\"}");
    free(body);

    /* retention of them all (a backlog): one call takes step after step, not one */
    o.retention_age_ms = 24LL * 3600 * 1000;
    e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 1, 0), 0);
    bool behind;
    long deleted = cmr_ingest_engine_retention(e, &behind), calls = 1;
    assert_true(deleted > 1024); /* more than one step in the call */
    while (behind && calls < 100) {
        long more = cmr_ingest_engine_retention(e, &behind);
        assert_true(more > 0);
        deleted += more;
        calls++;
    }
    assert_false(behind);
    assert_int_equal(deleted, NTRACES);
    assert_int_equal(cmr_ingest_engine_retention(e, &behind), 0);
    assert_false(behind);
    cmr_ingest_engine_free(e);
    v = cmr_ingest_view_open(tmpdir, err, sizeof err);
    assert_non_null(v);
    assert_int_equal(cmr_ingest_view_list(v, &f, &sum), 0);
    free(sum);
    cmr_ingest_view_free(v);
    expect_no_traces(1);
}

/* cmr.methods and cmr.registrations are writable by every agent host: what does not
 * decode, or is of another type, is rejected and counted, never applied. */
static void test_table_records_rejected(void **state)
{
    (void)state;
    char err[512], dir[600];
    snprintf(dir, sizeof dir, "%s/tables", tmpdir);
    cmr_store_opts_t o = {0};
    cmr_ingest_engine_t *e = cmr_ingest_engine_new(dir, &o, err, sizeof err);
    assert_non_null(e);
    const char *methods = cmr_topic_name(CMR_TOPIC_METHODS), *regs = cmr_topic_name(CMR_TOPIC_REGISTRATIONS);
    cmr_buf_t b = {0};
    cmr_method_entry_t me = {.method_id = 77, .class_name = "a/B", .method_name = "m", .descriptor = "()V"};
    assert_int_equal(cmr_msg_encode(CMR_MSG_METHOD_ENTRY, &me, &b, err, sizeof err), CMR_WIRE_OK);
    cmr_reader_rec_t rec = {.payload = b.data, .len = b.len, .partition = 1, .offset = 10};
    assert_int_equal(cmr_ingest_engine_add_table_record(e, methods, &rec), 1);
    /* a MethodEntry on cmr.registrations: wrong type */
    uint64_t before = cmr_rejects_count(regs, "unexpected_type");
    assert_int_equal(cmr_ingest_engine_add_table_record(e, regs, &rec), 0);
    assert_int_equal(cmr_rejects_count(regs, "unexpected_type"), before + 1);
    /* bytes that do not decode */
    before = cmr_rejects_count(methods, "corrupt") + cmr_rejects_count(methods, "truncated");
    rec.len = b.len - 3;
    assert_int_equal(cmr_ingest_engine_add_table_record(e, methods, &rec), 0);
    assert_int_equal(cmr_rejects_count(methods, "corrupt") + cmr_rejects_count(methods, "truncated"), before + 1);
    cmr_buf_free(&b);
    cmr_ingest_stats_t st;
    cmr_ingest_engine_stats(e, &st);
    assert_int_equal(st.methods, 1);
    assert_int_equal(st.agents, 0);
    cmr_ingest_engine_free(e);

    /* GET /api/methods names what was applied (null for an id it does not know), and
     * refuses ids that are not 16 hex digits and more than 100 at a time */
    char *body = NULL;
    assert_int_equal(cmr_ingest_http_answer(dir, "GET", "/api/methods?ids=000000000000004d,0000000000000001", &body),
                     200);
    assert_string_equal(body, "{\"methods\":{\"000000000000004d\":\"a.B.m()V\",\"0000000000000001\":null}}");
    free(body);
    assert_int_equal(cmr_ingest_http_answer(dir, "GET", "/api/methods?ids=000000000000004d,00000000000000zz", &body),
                     400);
    assert_non_null(strstr(body, "16 hex digits"));
    free(body);
    cmr_buf_t many = {0};
    cmr_buf_puts(&many, "/api/methods?ids=");
    for (int i = 0; i < 101; i++) /* 1.7 KB: within the 2 KB a target may have */
        cmr_buf_puts(&many, i ? ",000000000000004d" : "000000000000004d");
    cmr_buf_putc(&many, '\0');
    assert_true(cmr_buf_ok(&many));
    assert_int_equal(cmr_ingest_http_answer(dir, "GET", (const char *)many.data, &body), 400);
    assert_non_null(strstr(body, "at most 100"));
    free(body);
    cmr_buf_free(&many);
    assert_int_equal(cmr_ingest_http_answer(dir, "GET", "/api/methods", &body), 400);
    free(body);
}

static void test_parse_time_and_duration(void **state)
{
    (void)state;
    int64_t ns;
    assert_int_equal(cmr_ingest_parse_time("2026-11-21T21:40:00Z", &ns), 0);
    assert_int_equal(ns, 1795297200LL * 1000000000LL);
    assert_int_equal(cmr_ingest_parse_time("2026-11-21T21:40:00.5Z", &ns), 0);
    assert_int_equal(ns % 1000000000LL, 500000000LL);
    assert_int_equal(cmr_ingest_parse_time("1795297200", &ns), 0);
    assert_int_equal(ns, 1795297200LL * 1000000000LL);
    assert_int_equal(cmr_ingest_parse_time("1795297200000", &ns), 0);
    assert_int_equal(ns, 1795297200LL * 1000000000LL);
    assert_int_equal(cmr_ingest_parse_time("-10m", &ns), 0);
    assert_int_equal(cmr_ingest_parse_time("tomorrow", &ns), -1);
    assert_int_equal(cmr_ingest_parse_time("2026-11-21T21:40:00+02:00", &ns), -1);
    assert_int_equal(cmr_ingest_parse_duration("1.5s", &ns), 0);
    assert_int_equal(ns, 1500000000LL);
    assert_int_equal(cmr_ingest_parse_duration("300us", &ns), 0);
    assert_int_equal(ns, 300000);
    assert_int_equal(cmr_ingest_parse_duration("12", &ns), 0);
    assert_int_equal(ns, 12000000);
    assert_int_equal(cmr_ingest_parse_duration("12 parsecs", &ns), -1);
    assert_int_equal(cmr_ingest_parse_duration("-1s", &ns), -1);
}

/* The server: keep-alive, HEAD, 405 with the JSON error and Allow, /health answered
 * while 50 idle connections are open (within the client's 5 s timeout), IPv6 loopback. */
static void test_http_server(void **state)
{
    (void)state;
    char err[256];
    assert_null(cmr_ingest_http_start(tmpdir, "not-an-address", 0, NULL, err, sizeof err));
    assert_non_null(strstr(err, "ingest.http.address"));
    cmr_ingest_http_t *h = cmr_ingest_http_start(tmpdir, "127.0.0.1", 0, NULL, err, sizeof err);
    assert_non_null(h);
    int port = cmr_ingest_http_port(h);
    int idle[50];
    for (int i = 0; i < 50; i++) {
        idle[i] = hc_connect("127.0.0.1", port);
        assert_true(idle[i] >= 0);
    }
    int fd = hc_connect("127.0.0.1", port);
    char *r;
    for (int i = 0; i < 2; i++) { /* keep-alive: two requests on one connection */
        assert_int_equal(hc_request(fd, "GET /health HTTP/1.1\r\nHost: t\r\n\r\n", false, &r), 200);
        assert_string_equal(strstr(r, "\r\n\r\n"), "\r\n\r\n{\"status\":\"ok\"}");
        free(r);
    }
    assert_int_equal(hc_request(fd, "HEAD /health HTTP/1.1\r\nHost: t\r\n\r\n", true, &r), 200);
    assert_string_equal(strstr(r, "\r\n\r\n"), "\r\n\r\n");
    free(r);
    assert_int_equal(hc_request(fd, "DELETE /api/traces HTTP/1.1\r\nHost: t\r\n\r\n", false, &r), 405);
    assert_non_null(strstr(r, "Allow: GET, HEAD\r\n"));
    assert_string_equal(strstr(r, "\r\n\r\n"), "\r\n\r\n{\"error\":\"only GET is supported\"}");
    free(r);
    close(fd);
    for (int i = 0; i < 50; i++)
        close(idle[i]);
    cmr_ingest_http_stop(h);

    h = cmr_ingest_http_start(tmpdir, "::1", 0, NULL, err, sizeof err);
    if (!h) {
        fprintf(stderr, "test_http_server: no IPv6 loopback here (%s), skipped\n", err);
        return;
    }
    assert_int_equal(hc_get("::1", cmr_ingest_http_port(h), "/health", NULL), 200);
    cmr_ingest_http_stop(h);
}

/* --- restore of newly assigned partitions (ing_restore.c) --------------------------------- */

static void test_restore_range(void **state)
{
    (void)state;
    cmr_reader_range_t r;
    assert_true(cmr_restore_range(3, -1, 100, &r)); /* new store: everything committed */
    assert_int_equal(r.partition, 3);
    assert_int_equal(r.from, 0);
    assert_int_equal(r.until, 100);
    assert_true(cmr_restore_range(3, 49, 100, &r)); /* an old owner: what came since */
    assert_int_equal(r.from, 50);
    assert_false(cmr_restore_range(3, 99, 100, &r));   /* up to date */
    assert_false(cmr_restore_range(3, 150, 100, &r));  /* ahead: the rest comes again */
    assert_false(cmr_restore_range(3, -1, -1001, &r)); /* nothing committed (CMR_OFFSET_INVALID) */
    assert_false(cmr_restore_range(3, -1, 0, &r));
}

static void test_restore_gaps(void **state)
{
    (void)state;
    cmr_restore_gaps_t g;
    cmr_reader_range_t r = {.partition = 1, .from = 10, .until = 20};
    cmr_restore_gaps_init(&g, &r);
    cmr_restore_gaps_see(&g, 10);
    cmr_restore_gaps_see(&g, 11);
    cmr_restore_gaps_see(&g, 13); /* 12 missing */
    cmr_restore_gaps_see(&g, 13); /* twice: counted once */
    cmr_restore_gaps_see(&g, 25); /* past the range */
    assert_int_equal(g.seen, 3);
    assert_int_equal(g.missing, 1);
    assert_int_equal(cmr_restore_gaps_end(&g), 7); /* and 14..19 */
    cmr_reader_range_t late = {.partition = 1, .from = 0, .until = 100};
    cmr_restore_gaps_init(&g, &late); /* retention deleted 0..39 */
    cmr_restore_gaps_see(&g, 40);
    assert_int_equal(g.missing, 40);
}

/* The applied offset is written with the group and read back at the next open; it never
 * goes back. */
static void test_applied_offset_durable(void **state)
{
    (void)state;
    char err[512];
    cmr_store_opts_t o = {.sync = false};
    cmr_ingest_engine_t *e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 2, 0), 0);
    assert_int_equal(cmr_ingest_engine_applied(e, 2), -1);
    cmr_ingest_engine_set_applied(e, 2, 41);
    assert_int_equal(cmr_ingest_engine_applied(e, 2), -1); /* not durable yet */
    assert_int_equal(cmr_ingest_engine_flush(e), 0);
    assert_int_equal(cmr_ingest_engine_applied(e, 2), 41);
    cmr_ingest_engine_set_applied(e, 2, 7); /* never back */
    assert_int_equal(cmr_ingest_engine_flush(e), 0);
    assert_int_equal(cmr_ingest_engine_applied(e, 2), 41);
    cmr_ingest_engine_set_applied(e, 9, 3); /* a partition not open: nothing */
    assert_int_equal(cmr_ingest_engine_applied(e, 9), -1);
    cmr_ingest_engine_free(e);
    e = cmr_ingest_engine_new(tmpdir, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 2, 0), 0);
    assert_int_equal(cmr_ingest_engine_applied(e, 2), 41);
    cmr_ingest_engine_free(e);
}

/* --- peers: announcements and the fan-out's bad answers (ing_peers.c) --------------------- */

/* An IngestWorker encoded, owning parts[0..n). */
static void encode_worker(cmr_buf_t *out, const char *id, const char *url, int64_t time_ms, const int32_t *parts,
                          size_t n, int32_t count, bool leaving)
{
    char err[256];
    cmr_owned_partition_t op[16];
    for (size_t i = 0; i < n; i++)
        op[i] = (cmr_owned_partition_t){parts[i], -1};
    cmr_ingest_worker_t a = {.worker_id = (char *)id,
                             .url = (char *)url,
                             .started_ms = 1,
                             .time_ms = time_ms,
                             .partition_count = count,
                             .partitions = {op, n},
                             .leaving = leaving};
    cmr_buf_reset(out);
    assert_int_equal(cmr_msg_encode(CMR_MSG_INGEST_WORKER, &a, out, err, sizeof err), CMR_WIRE_OK);
}

static cmr_ingest_peers_t *new_peers(const char *url_of_self)
{
    char err[256];
    cmr_ingest_peers_opts_t o = {.worker_id = "me",
                                 .url = url_of_self,
                                 .timeout_ms = 2000,
                                 .stale_ms = 60000,
                                 .partition_count = 4,
                                 .metrics_partition_count = 4};
    cmr_ingest_peers_t *p = cmr_ingest_peers_new(&o, err, sizeof err);
    assert_non_null(p);
    return p;
}

static void test_peers_announcements(void **state)
{
    (void)state;
    char err[256];
    cmr_ingest_peers_opts_t bad = {.worker_id = "has space", .url = "http://h:1", .partition_count = 4};
    assert_null(cmr_ingest_peers_new(&bad, err, sizeof err));
    assert_non_null(strstr(err, "ingest.worker_id"));
    bad.worker_id = "ok";
    bad.url = "http://user@h:1";
    assert_null(cmr_ingest_peers_new(&bad, err, sizeof err));
    assert_non_null(strstr(err, "advertise_url"));

    cmr_ingest_peers_t *p = new_peers("http://127.0.0.1:1");
    cmr_ingest_peers_set_owned(p, CMR_TOPIC_EVENTS, 0, true);
    int64_t now = cmr_wall_ms();
    cmr_buf_t b = {0};
    assert_int_equal(cmr_ingest_peers_add(p, "garbage", 7, err, sizeof err), -1); /* does not decode */
    const int32_t one_two[] = {1, 2}, three[] = {3}, out_of_range[] = {9};
    struct {
        const char *id, *url;
        const int32_t *parts;
        size_t n;
        const char *why;
    } rejected[] = {{"a b", "http://h:1", one_two, 2, "worker_id"},
                    {"a", "ftp://h:1", one_two, 2, "url"},
                    {"a", "http://h:1/", one_two, 2, "url"},
                    {"a", "http://h:1?x=1", one_two, 2, "url"},
                    {"a", "http://h:1", out_of_range, 1, "out of range"}};
    for (size_t i = 0; i < sizeof rejected / sizeof *rejected; i++) {
        encode_worker(&b, rejected[i].id, rejected[i].url, now, rejected[i].parts, rejected[i].n, 4, false);
        assert_int_equal(cmr_ingest_peers_add(p, b.data, b.len, err, sizeof err), -1);
        assert_non_null(strstr(err, rejected[i].why));
    }
    cmr_method_entry_t m = {.method_id = 1, .class_name = "X", .method_name = "y", .descriptor = "()V"};
    cmr_buf_reset(&b);
    assert_int_equal(cmr_msg_encode(CMR_MSG_METHOD_ENTRY, &m, &b, err, sizeof err), CMR_WIRE_OK);
    assert_int_equal(cmr_ingest_peers_add(p, b.data, b.len, err, sizeof err), -1);
    assert_non_null(strstr(err, "not an IngestWorker"));

    encode_worker(&b, "a", "http://127.0.0.1:9", now, one_two, 2, 4, false);
    assert_int_equal(cmr_ingest_peers_add(p, b.data, b.len, err, sizeof err), 0);
    encode_worker(&b, "a", "http://127.0.0.1:9", now - 1000, three, 1, 4, false); /* older: ignored */
    assert_int_equal(cmr_ingest_peers_add(p, b.data, b.len, err, sizeof err), 0);
    encode_worker(&b, "me", "http://127.0.0.1:7", now, three, 1, 4, false); /* our own: not a peer */
    assert_int_equal(cmr_ingest_peers_add(p, b.data, b.len, err, sizeof err), 0);
    cmr_ingest_plan_t plan;
    assert_int_equal(cmr_ingest_peers_plan(p, CMR_TOPIC_EVENTS, NULL, &plan), 0);
    assert_true(plan.local[0]);
    assert_int_equal(plan.ngroups, 1);
    assert_string_equal(plan.groups[0].url, "http://127.0.0.1:9");
    assert_int_equal(plan.groups[0].npartitions, 2);
    assert_int_equal(plan.nunowned, 1); /* 3 */
    assert_int_equal(plan.unowned[0], 3);
    cmr_ingest_plan_free(&plan);
    encode_worker(&b, "a", "http://127.0.0.1:9", now + 1, NULL, 0, 4, true); /* it leaves */
    assert_int_equal(cmr_ingest_peers_add(p, b.data, b.len, err, sizeof err), 0);
    assert_int_equal(cmr_ingest_peers_plan(p, CMR_TOPIC_EVENTS, NULL, &plan), 0);
    assert_int_equal(plan.ngroups, 0);
    assert_int_equal(plan.nunowned, 3);
    cmr_ingest_plan_free(&plan);
    cmr_ingest_worker_t mine;
    assert_int_equal(cmr_ingest_peers_announcement(p, false, &mine), 0);
    assert_string_equal(mine.worker_id, "me");
    assert_int_equal(mine.partitions.count, 1);
    assert_int_equal(mine.partitions.items[0].partition, 0);
    cmr_msg_body_free(CMR_MSG_INGEST_WORKER, &mine);
    cmr_buf_free(&b);
    cmr_ingest_peers_free(p);
}

/* A peer that answers what peer_body says. */
static const char *peer_body;
static int peer_status = 200;

static void peer_handler(void *opaque, const cmr_http_request_t *req, cmr_http_response_t *res)
{
    (void)opaque;
    (void)req;
    res->status = peer_status;
    res->content_type = "application/json";
    res->body = strdup(peer_body);
    res->len = strlen(peer_body);
}

/* A peer on a free loopback port that answers peer_status and peer_body; its base URL into url. */
static cmr_http_server_t *start_peer(char url[64])
{
    char err[256];
    cmr_http_server_opts_t o = {.name = "peer", .address = "127.0.0.1"};
    cmr_http_server_t *srv;
    assert_int_equal(cmr_http_server_start(&o, peer_handler, NULL, &srv, err, sizeof err), 0);
    snprintf(url, 64, "http://127.0.0.1:%d", cmr_http_server_port(srv));
    return srv;
}

/* The fan-out names every partition it could not get, with why; a bad answer never
 * crashes it nor lands in the list. */
static void test_peers_bad_answers(void **state)
{
    (void)state;
    char err[256], url[64];
    cmr_http_server_t *srv = start_peer(url);
    cmr_ingest_peers_t *p = new_peers("http://127.0.0.1:1");
    cmr_ingest_peers_set_owned(p, CMR_TOPIC_EVENTS, 0, true);
    cmr_buf_t b = {0};
    const int32_t parts[] = {1, 2};
    encode_worker(&b, "peer", url, cmr_wall_ms(), parts, 2, 4, false);
    assert_int_equal(cmr_ingest_peers_add(p, b.data, b.len, err, sizeof err), 0);
    cmr_buf_free(&b);
    cmr_ingest_plan_t plan;
    assert_int_equal(cmr_ingest_peers_plan(p, CMR_TOPIC_EVENTS, NULL, &plan), 0);
    const char *local = "{\"traces\":[{\"trace_id\":\"bb\",\"start_ns\":5,\"duration_ns\":1}]}";
    struct {
        const char *body;
        int status;
        const char *want;
    } cases[] = {
        {"not json at all", 200, "not a JSON object"},
        {"{\"traces\":[{\"trace_id\":1}]}", 200, "a trace without"},
        {"{\"traces\":{}}", 200, "no \\\"traces\\\" array"},
        {"{\"traces\":[],\"partitions_not_owned\":[\"x\"]}", 200, "not a partition number"},
        {"{\"error\":\"boom\"}", 500, "HTTP 500"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        peer_body = cases[i].body;
        peer_status = cases[i].status;
        char *out = cmr_ingest_peers_gather(p, &plan, "/api/traces", "", local, false, 50);
        assert_non_null(out);
        if (!strstr(out, cases[i].want))
            fprintf(stderr, "case %zu: %s\n", i, out);
        assert_non_null(strstr(out, cases[i].want));
        assert_non_null(strstr(out, "\"partial\":true"));
        assert_non_null(strstr(out, "\"partitions_unreachable\":[3,1,2]"));
        assert_non_null(strstr(out, "\"trace_id\":\"bb\"")); /* the local part is there */
        free(out);
    }
    /* a good answer: merged newest first; a partition it no longer owns is named */
    peer_status = 200;
    peer_body = "{\"traces\":[{\"trace_id\":\"aa\",\"start_ns\":9,\"duration_ns\":1}],"
                "\"partitions_not_owned\":[2]}";
    char *out = cmr_ingest_peers_gather(p, &plan, "/api/traces", "limit=5", local, false, 50);
    assert_non_null(out);
    assert_non_null(strstr(out, "\"traces\":[{\"trace_id\":\"aa\""));
    assert_non_null(strstr(out, "\"partitions_unreachable\":[3,2]"));
    free(out);
    cmr_ingest_plan_free(&plan);
    cmr_http_server_stop(srv);
    /* the peer is gone: unreachable, within the time bound */
    assert_int_equal(cmr_ingest_peers_plan(p, CMR_TOPIC_EVENTS, NULL, &plan), 0);
    int64_t t0 = cmr_mono_ms();
    out = cmr_ingest_peers_gather(p, &plan, "/api/traces", "", local, false, 50);
    assert_true(cmr_mono_ms() - t0 < 5000);
    assert_non_null(strstr(out, "\"partitions_unreachable\":[3,1,2]"));
    free(out);
    cmr_ingest_plan_free(&plan);
    cmr_ingest_peers_free(p);
}

/* An IngestWorker encoded that owns cmr.metrics partitions mparts[0..n) (of 4), no events. */
static void encode_metrics_worker(cmr_buf_t *out, const char *id, const char *url, const int32_t *mparts, size_t n)
{
    char err[256];
    cmr_owned_partition_t op[16];
    for (size_t i = 0; i < n; i++)
        op[i] = (cmr_owned_partition_t){mparts[i], -1};
    cmr_ingest_worker_t a = {.worker_id = (char *)id,
                             .url = (char *)url,
                             .started_ms = 1,
                             .time_ms = cmr_wall_ms(),
                             .partition_count = 4,
                             .metrics_partition_count = 4,
                             .metrics_partitions = {op, n}};
    cmr_buf_reset(out);
    assert_int_equal(cmr_msg_encode(CMR_MSG_INGEST_WORKER, &a, out, err, sizeof err), CMR_WIRE_OK);
}

/* The metrics queries' fan-out: owners of cmr.metrics partitions (apart from cmr.events'),
 * an environment's query to its partition's owner alone, lists merged by their statistic,
 * one series from the one owner that has it, and bad or missing answers named. */
static void test_peers_metrics(void **state)
{
    (void)state;
    char err[256], url[64];
    cmr_http_server_t *srv = start_peer(url);
    cmr_ingest_peers_t *p = new_peers("http://127.0.0.1:1");
    cmr_ingest_peers_set_owned(p, CMR_TOPIC_EVENTS, 0, true);
    cmr_ingest_peers_set_owned(p, CMR_TOPIC_METRICS, 3, true);
    cmr_buf_t b = {0};
    const int32_t bad[] = {4};
    encode_metrics_worker(&b, "peer", url, bad, 1);
    assert_int_equal(cmr_ingest_peers_add(p, b.data, b.len, err, sizeof err), -1);
    assert_non_null(strstr(err, "metrics partition number out of range"));
    const int32_t parts[] = {0, 1};
    encode_metrics_worker(&b, "peer", url, parts, 2);
    assert_int_equal(cmr_ingest_peers_add(p, b.data, b.len, err, sizeof err), 0);
    cmr_buf_free(&b);
    /* events and metrics have their own owners */
    cmr_ingest_plan_t plan;
    assert_int_equal(cmr_ingest_peers_plan(p, CMR_TOPIC_EVENTS, NULL, &plan), 0);
    assert_int_equal(plan.ngroups, 0);
    assert_int_equal(plan.nunowned, 3);
    cmr_ingest_plan_free(&plan);
    assert_int_equal(cmr_ingest_peers_plan(p, CMR_TOPIC_METRICS, NULL, &plan), 0);
    assert_true(plan.local[3]);
    assert_int_equal(plan.ngroups, 1);
    assert_int_equal(plan.groups[0].npartitions, 2);
    assert_int_equal(plan.nunowned, 1);
    assert_int_equal(plan.unowned[0], 2);
    cmr_ingest_plan_free(&plan);
    /* one environment: only the partition its key goes to */
    int32_t want = cmr_key_partition(NULL, "shop", 4, 4);
    assert_int_equal(cmr_ingest_peers_plan(p, CMR_TOPIC_METRICS, "shop", &plan), 0);
    size_t asked = plan.nunowned + (plan.ngroups ? plan.groups[0].npartitions : 0);
    for (int i = 0; i < 4; i++)
        asked += plan.local[i];
    assert_int_equal(asked, 1);
    assert_true(plan.local[want] || (plan.nunowned && plan.unowned[0] == want) ||
                (plan.ngroups && plan.groups[0].partitions[0] == want));
    cmr_ingest_plan_free(&plan);
    cmr_ingest_worker_t mine;
    assert_int_equal(cmr_ingest_peers_announcement(p, false, &mine), 0);
    assert_int_equal(mine.metrics_partition_count, 4);
    assert_int_equal(mine.metrics_partitions.count, 1);
    assert_int_equal(mine.metrics_partitions.items[0].partition, 3);
    cmr_msg_body_free(CMR_MSG_INGEST_WORKER, &mine);

    /* partition 2 has no owner: take it on, so that complete answers can be seen */
    cmr_ingest_peers_set_owned(p, CMR_TOPIC_METRICS, 2, true);
    assert_int_equal(cmr_ingest_peers_plan(p, CMR_TOPIC_METRICS, NULL, &plan), 0);
    const char *local = "{\"query\":\"top\",\"items\":[{\"env\":\"a\",\"value\":5.0},{\"env\":\"a\",\"value\":1.0}]}";
    peer_status = 200;
    peer_body = "{\"query\":\"top\",\"items\":[{\"env\":\"b\",\"value\":3.0}]}";
    char *out;
    assert_int_equal(cmr_ingest_peers_gather_metrics(p, &plan, "top", "", 200, local, 2, &out), 200);
    assert_string_equal(out, "{\"query\":\"top\",\"items\":[{\"env\":\"a\",\"value\":5.0},"
                             "{\"env\":\"b\",\"value\":3.0}]}");
    free(out);
    /* alerts: by environment, each owner's order kept */
    local = "{\"abnormal\":[{\"env\":\"c\",\"rule\":\"z\"},{\"env\":\"c\",\"rule\":\"a\"}]}";
    peer_body = "{\"abnormal\":[{\"env\":\"b\",\"rule\":\"r\"}],\"partitions_not_owned\":[1]}";
    assert_int_equal(cmr_ingest_peers_gather_metrics(p, &plan, "alerts", "", 200, local, 20, &out), 200);
    assert_non_null(strstr(out, "{\"abnormal\":[{\"env\":\"b\",\"rule\":\"r\"},{\"env\":\"c\",\"rule\":\"z\"},"
                                "{\"env\":\"c\",\"rule\":\"a\"}],\"partial\":true"));
    assert_non_null(strstr(out, "\"partitions_unreachable\":[1]"));
    free(out);
    /* a bad answer: named, the local part kept */
    peer_body = "{\"stalled\":[1]}";
    assert_int_equal(cmr_ingest_peers_gather_metrics(p, &plan, "stalled", "", 200, "{\"stalled\":[]}", 20, &out), 200);
    assert_non_null(strstr(out, "an item that is not an object"));
    assert_non_null(strstr(out, "\"partitions_unreachable\":[0,1]"));
    free(out);
    /* a wrong query is the local answer's error */
    assert_int_equal(cmr_ingest_peers_gather_metrics(p, &plan, "top", "", 400, "{\"error\":\"bad stat\"}", 20, &out),
                     400);
    assert_string_equal(out, "{\"error\":\"bad stat\"}");
    free(out);
    /* one series: from whichever owner found it; found twice is ambiguous */
    const char *none = "{\"error\":\"no transaction matches \\\"x\\\"\"}",
               *found = "{\"series\":{\"env\":\"b\"},\"points\":[]}";
    peer_body = found;
    assert_int_equal(cmr_ingest_peers_gather_metrics(p, &plan, "series", "", 400, none, 20, &out), 200);
    assert_string_equal(out, found);
    free(out);
    assert_int_equal(cmr_ingest_peers_gather_metrics(p, &plan, "series", "", 200, found, 20, &out), 400);
    assert_non_null(strstr(out, "give env"));
    free(out);
    peer_status = 400;
    peer_body = none;
    assert_int_equal(cmr_ingest_peers_gather_metrics(p, &plan, "series", "", 400, none, 20, &out), 400);
    assert_string_equal(out, none);
    free(out);
    peer_body = "{\"error\":\"\\\"x\\\" matches 2 series (a, b, ...): give more of the name, or env\"}";
    assert_int_equal(cmr_ingest_peers_gather_metrics(p, &plan, "series", "", 400, none, 20, &out), 400);
    assert_non_null(strstr(out, "give env")); /* ambiguous at a peer: not "not found" */
    free(out);
    /* a wrong question is answered here, without asking */
    peer_body = found;
    peer_status = 200;
    const char *wrong = "{\"error\":\"name is required\"}";
    assert_int_equal(cmr_ingest_peers_gather_metrics(p, &plan, "series", "", 400, wrong, 20, &out), 400);
    assert_string_equal(out, wrong);
    free(out);
    peer_status = 500; /* not found here, and an owner could not say: not "no such series" */
    peer_body = "{\"error\":\"boom\"}";
    assert_int_equal(cmr_ingest_peers_gather_metrics(p, &plan, "jvms", "", 400, none, 20, &out), 503);
    assert_non_null(strstr(out, "\"partitions_unreachable\":[0,1]"));
    free(out);
    peer_status = 200;
    cmr_ingest_plan_free(&plan);
    cmr_http_server_stop(srv);
    cmr_ingest_peers_free(p);
}

int main(int argc, char **argv)
{
    cmr_log_set_level(CMR_LOG_WARN);
    ingest_bin = argc > 1 ? argv[1] : NULL;
    A1 = cmr_agent_id("shop", "host-a", NULL); /* registrations without an instance id */
    A2 = cmr_agent_id("billing", "host-b", NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nested_one_thread),
        cmocka_unit_test(test_tree_json_stream),
        cmocka_unit_test(test_across_threads_and_jvms),
        cmocka_unit_test(test_remote_sync_wait),
        cmocka_unit_test(test_remote_client_call_outlasted),
        cmocka_unit_test(test_remote_overlap_union),
        cmocka_unit_test(test_remote_clock_skew_clipped),
        cmocka_unit_test(test_fork_in_jvm_not_subtracted),
        cmocka_unit_test(test_out_of_order_and_duplicates),
        cmocka_unit_test(test_missing_parent_then_arrives),
        cmocka_unit_test(test_truncated_and_root_lost),
        cmocka_unit_test(test_lost_batch_and_exits),
        cmocka_unit_test(test_batch_validation_and_roundtrip),
        cmocka_unit_test(test_call_attributes),
        cmocka_unit_test(test_hostile_events),
        cmocka_unit_test(test_random_streams),
        cmocka_unit_test(test_exporters),
        cmocka_unit_test(test_names_table),
        cmocka_unit_test(test_state_method_set),
        cmocka_unit_test(test_json_untrusted_names),
        cmocka_unit_test_setup_teardown(test_store_engine_queries, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_http_large_tree, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_engine_splits_messages, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_engine_many_traces, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_complete_traces_kept, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_postings_index, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_time_groups, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_time_group_empty_first, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_retention_unreadable_summary, make_tmp, remove_tmp),
        cmocka_unit_test(test_summary_diagnoses),
        cmocka_unit_test_setup_teardown(test_diagnosis_report, make_tmp, remove_tmp),
        cmocka_unit_test(test_http_attributes_summary),
        cmocka_unit_test(test_http_async_completion),
        cmocka_unit_test(test_http_attributes_checks),
        cmocka_unit_test_setup_teardown(test_http_store_filters, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_status_history_keeps_the_newest, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_env_filter, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_table_records_rejected, make_tmp, remove_tmp),
        cmocka_unit_test(test_parse_time_and_duration),
        cmocka_unit_test_setup_teardown(test_http_server, make_tmp, remove_tmp),
        cmocka_unit_test(test_restore_range),
        cmocka_unit_test(test_restore_gaps),
        cmocka_unit_test_setup_teardown(test_applied_offset_durable, make_tmp, remove_tmp),
        cmocka_unit_test(test_peers_announcements),
        cmocka_unit_test(test_peers_bad_answers),
        cmocka_unit_test(test_peers_metrics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
