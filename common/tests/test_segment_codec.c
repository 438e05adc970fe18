/*
 * test_segment_codec.c - several segment batches in one EventBatch message (cmr/event.h,
 * cmr_segs_writer / cmr_segs_reader): random messages of random segments (traces shared
 * or not, threads repeated or not, parents local and remote, every optional field) come
 * back exactly, each segment as a standalone block; every truncation of a message and
 * every wrong count is refused with a reason; the sizes the layout is for. Messages in the
 * packed event layout (what agents write) and in the basic one (what agents from before
 * event_layout wrote) alike; a layout the reader does not know is refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cmr/event.h"

static uint64_t rng = 0x2545F4914F6CDD1DULL;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

#define MAX_SEGS 24
#define MAX_EV 64

typedef struct sample {
    cmr_event_batch_t b[MAX_SEGS];
    cmr_parent_link_t parent[MAX_SEGS];
    cmr_kv_t attrs[MAX_SEGS][2];
    cmr_node_attr_t node_attrs[MAX_SEGS][3];
    char names[MAX_SEGS][32];
    uint8_t rec[MAX_SEGS][MAX_EV * CMR_EVENT_RECORD_SIZE];
    uint32_t count[MAX_SEGS];
    size_t n;
} sample_t;

static const uint64_t methods[6] = {0x1111, 0x2222222222ULL, 0x3333, 0x4444, 0x5555, 0xdeadbeefcafeULL};

/* Well-formed calls (enter / exit pairs, some forks), timestamps from ts. */
static uint32_t random_events(uint8_t *rec, uint64_t ts)
{
    uint32_t n = (uint32_t)(next_rand() % MAX_EV), depth = 0;
    uint64_t stack[MAX_EV + 1];
    for (uint32_t i = 0; i < n; i++) {
        ts += next_rand() % 5000;
        cmr_event_t ev = {0, ts, CMR_EVENT_ENTER, 0};
        uint64_t r = next_rand() % 10;
        if (r < 1) {
            ev.kind = CMR_EVENT_FORK;
        } else if (depth && (r < 5 || n - i <= depth)) {
            ev.kind = r == 2 ? CMR_EVENT_EXCEPTION_EXIT : CMR_EVENT_EXIT;
            ev.method_id = stack[depth];
            ev.aux = depth--;
        } else {
            ev.method_id = methods[next_rand() % 6];
            ev.aux = ++depth;
            stack[depth] = ev.method_id;
        }
        cmr_event_write(rec, i, &ev);
    }
    return n;
}

static void random_sample(sample_t *s, int64_t agent)
{
    memset(s, 0, sizeof *s);
    s->n = 1 + next_rand() % MAX_SEGS;
    uint64_t ts = 1700000000000000000ULL + next_rand() % 1000000;
    for (size_t i = 0; i < s->n; i++) {
        cmr_event_batch_t *b = &s->b[i];
        bool same_trace = i && next_rand() % 2, same_thread = i && next_rand() % 2;
        uint64_t r = next_rand() % 4;
        if (same_trace) {
            memcpy(b->trace_id, s->b[i - 1].trace_id, 16);
        } else if (i && r < 2) { /* the thread's next trace (a step), or one far off */
            memcpy(b->trace_id, s->b[i - 1].trace_id, 8);
            uint64_t lo = cmr_be64(s->b[i - 1].trace_id + 8);
            uint64_t step = r == 0 ? 1 + next_rand() % 1000 : ((uint64_t)1 << 21) + next_rand() % 7;
            cmr_put_be64(b->trace_id + 8, lo + step);
        } else
            for (int k = 0; k < 16; k++)
                b->trace_id[k] = (uint8_t)next_rand();
        b->thread_id = same_thread ? s->b[i - 1].thread_id : (int64_t)(next_rand() % 3) - 1;
        if (same_thread)
            memcpy(s->names[i], s->names[i - 1], sizeof s->names[i]);
        else
            snprintf(s->names[i], sizeof s->names[i], "t-%d", (int)(next_rand() % 4));
        b->thread_name = s->names[i];
        b->segment_id = next_rand() % 3 ? (int64_t)(0x3000000000000000ULL + next_rand() % 100) : (int64_t)next_rand();
        if (next_rand() % 2) {
            b->batch_seq = (int32_t)(next_rand() % 5);
            b->first_event_seq = (int64_t)(next_rand() % 100000);
        }
        b->last = next_rand() % 2;
        if (next_rand() % 3 == 0) {
            s->parent[i] =
                (cmr_parent_link_t){next_rand() % 2 ? agent : (int64_t)next_rand(),
                                    b->segment_id - (int64_t)(next_rand() % 50), (int64_t)(next_rand() % 20) - 1};
            if (s->parent[i].agent_id == agent && s->parent[i].segment_id == b->segment_id)
                s->parent[i].segment_id++;
            b->parent = &s->parent[i];
        }
        if (next_rand() % 4 == 0) {
            b->dropped = (int32_t)(next_rand() % 10);
            b->diagnosis_id = (int64_t)(next_rand() % 3);
            b->calls_not_recorded = (int64_t)(next_rand() % 3);
            b->truncated_by = (int32_t)(next_rand() % 4);
        }
        if (next_rand() % 4 == 0) {
            s->attrs[i][0] = (cmr_kv_t){"http.method", "GET"};
            s->attrs[i][1] = (cmr_kv_t){"http.path", next_rand() % 2 ? "/" : ""};
            b->attributes = (cmr_kvs_t){s->attrs[i], 1 + next_rand() % 2};
        }
        if (next_rand() % 4 == 0) { /* call attributes, of this batch's calls or earlier ones */
            size_t n = 1 + next_rand() % 3;
            for (size_t k = 0; k < n; k++)
                s->node_attrs[i][k] = (cmr_node_attr_t){
                    b->first_event_seq + (int64_t)(next_rand() % 8) - (b->first_event_seq > 3 ? 3 : 0),
                    k ? CMR_NODE_ATTR_DB_SYSTEM : CMR_NODE_ATTR_DB_STATEMENT, k ? "h2" : "select a from t where b = ?"};
            b->node_attrs = (cmr_node_attrs_t){s->node_attrs[i], n};
        }
        ts += next_rand() % 2 ? next_rand() % 100000 : (uint64_t) - (int64_t)(next_rand() % 100000);
        s->count[i] = random_events(s->rec[i], ts);
        b->event_count = (int32_t)s->count[i];
    }
}

static uint32_t layout = CMR_EVENTS_LAYOUT_PACKED; /* of the messages write_sample writes */

static void write_sample(cmr_segs_writer_t *w, const sample_t *s, int64_t agent, cmr_event_msg_t *m)
{
    cmr_segs_writer_begin_layout(w, agent, layout);
    for (size_t i = 0; i < s->n; i++)
        assert_int_equal(cmr_segs_writer_add(w, &s->b[i], s->rec[i], s->count[i]), 0);
    cmr_segs_writer_msg(w, m);
}

static void expect_batch(const cmr_event_batch_t *got, const cmr_event_batch_t *want, const uint8_t *rec,
                         uint32_t count, int64_t agent)
{
    assert_int_equal(got->agent_id, agent);
    assert_memory_equal(got->trace_id, want->trace_id, 16);
    assert_int_equal(got->segment_id, want->segment_id);
    assert_int_equal(got->thread_id, want->thread_id);
    assert_string_equal(got->thread_name, want->thread_name);
    assert_int_equal(got->batch_seq, want->batch_seq);
    assert_int_equal(got->first_event_seq, want->first_event_seq);
    assert_int_equal(got->last, want->last);
    assert_int_equal(got->dropped, want->dropped);
    assert_int_equal(got->diagnosis_id, want->diagnosis_id);
    assert_int_equal(got->calls_not_recorded, want->calls_not_recorded);
    assert_int_equal(got->truncated_by, want->truncated_by);
    assert_int_equal(got->parent != NULL, want->parent != NULL);
    if (want->parent)
        assert_memory_equal(got->parent, want->parent, sizeof *want->parent);
    assert_int_equal(got->attributes.count, want->attributes.count);
    for (size_t k = 0; k < want->attributes.count; k++) {
        assert_string_equal(got->attributes.items[k].key, want->attributes.items[k].key);
        assert_string_equal(got->attributes.items[k].value, want->attributes.items[k].value);
    }
    assert_int_equal(got->node_attrs.count, want->node_attrs.count);
    for (size_t k = 0; k < want->node_attrs.count; k++) {
        assert_int_equal(got->node_attrs.items[k].event_seq, want->node_attrs.items[k].event_seq);
        assert_string_equal(got->node_attrs.items[k].key, want->node_attrs.items[k].key);
        assert_string_equal(got->node_attrs.items[k].value, want->node_attrs.items[k].value);
    }
    /* the block stands on its own: the plain decoder reads it */
    assert_int_equal(got->event_count, (int32_t)count);
    static uint8_t back[MAX_EV * CMR_EVENT_RECORD_SIZE];
    char err[128];
    assert_int_equal(cmr_events_unpack(got->packed_events.data, got->packed_events.len, count, back, err, sizeof err),
                     0);
    if (count)
        assert_memory_equal(back, rec, (size_t)count * CMR_EVENT_RECORD_SIZE);
}

static cmr_segs_writer_t w;
static cmr_segs_reader_t r;

static void test_random_messages_round_trip(void **state)
{
    (void)state;
    static sample_t s;
    for (int round = 0; round < 2000; round++) {
        int64_t agent = (int64_t)next_rand();
        random_sample(&s, agent);
        cmr_event_msg_t m;
        layout = round % 3 ? CMR_EVENTS_LAYOUT_PACKED : CMR_EVENTS_LAYOUT_BASIC;
        write_sample(&w, &s, agent, &m);
        assert_int_equal(m.event_layout, (int32_t)layout);
        assert_int_equal(m.segment_count, (int32_t)s.n);
        assert_memory_equal(m.key_trace_id, s.b[0].trace_id, 16);
        cmr_segs_reader_init(&r, &m);
        cmr_event_batch_t b;
        for (size_t i = 0; i < s.n; i++) {
            int rc = cmr_segs_reader_next(&r, &b);
            if (rc != 1)
                fail_msg("round %d segment %zu: %s", round, i, r.error);
            expect_batch(&b, &s.b[i], s.rec[i], s.count[i], agent);
        }
        assert_int_equal(cmr_segs_reader_next(&r, &b), 0);
    }
}

/* Every prefix of a message, and every wrong count, is refused with a reason. */
static void test_refuses_truncations_and_counts(void **state)
{
    (void)state;
    static sample_t s;
    for (int round = 0; round < 40; round++) {
        int64_t agent = (int64_t)next_rand();
        random_sample(&s, agent);
        cmr_event_msg_t m;
        layout = round % 2 ? CMR_EVENTS_LAYOUT_PACKED : CMR_EVENTS_LAYOUT_BASIC;
        write_sample(&w, &s, agent, &m);
        for (size_t cut = 0; cut < m.segments.len; cut++) {
            cmr_event_msg_t t = m;
            t.segments.len = cut;
            cmr_segs_reader_init(&r, &t);
            cmr_event_batch_t b;
            int rc;
            while ((rc = cmr_segs_reader_next(&r, &b)) == 1)
                ;
            assert_int_equal(rc, -1);
            assert_true(r.error[0] != '\0');
        }
        int32_t deltas[4] = {-1, 1, 1000, INT32_MIN};
        for (int k = 0; k < 4; k++)
            for (int field = 0; field < 2; field++) {
                cmr_event_msg_t t = m;
                if (field)
                    t.event_count = (int32_t)((uint32_t)t.event_count + (uint32_t)deltas[k]);
                else
                    t.segment_count = (int32_t)((uint32_t)t.segment_count + (uint32_t)deltas[k]);
                cmr_segs_reader_init(&r, &t);
                cmr_event_batch_t b;
                int rc;
                while ((rc = cmr_segs_reader_next(&r, &b)) == 1)
                    ;
                assert_int_equal(rc, -1);
            }
    }
}

/* Random damage never crashes (ASan / UBSan builds check the reads); a message that is
 * still read gives standalone blocks. */
static void test_damaged_messages(void **state)
{
    (void)state;
    static sample_t s;
    static uint8_t copy[1 << 16];
    for (int round = 0; round < 3000; round++) {
        int64_t agent = (int64_t)next_rand();
        random_sample(&s, agent);
        cmr_event_msg_t m;
        layout = round % 2 ? CMR_EVENTS_LAYOUT_PACKED : CMR_EVENTS_LAYOUT_BASIC;
        write_sample(&w, &s, agent, &m);
        if (!m.segments.len || m.segments.len > sizeof copy)
            continue;
        memcpy(copy, m.segments.data, m.segments.len);
        for (int k = 0; k < 3; k++)
            copy[next_rand() % m.segments.len] ^= (uint8_t)(1u << (next_rand() % 8));
        cmr_event_msg_t t = m;
        t.segments.data = copy;
        cmr_segs_reader_init(&r, &t);
        cmr_event_batch_t b;
        char err[128];
        int rc;
        while ((rc = cmr_segs_reader_next(&r, &b)) == 1)
            assert_int_equal(
                cmr_events_check(b.packed_events.data, b.packed_events.len, (uint32_t)b.event_count, err, sizeof err),
                0);
        assert_true(rc == 0 || r.error[0]);
    }
}

/* 100 traces of 10 calls on one thread in one message, in `how`'s event layout: bytes per call. */
static double small_traces(uint32_t how)
{
    static uint8_t rec[20 * CMR_EVENT_RECORD_SIZE];
    uint64_t ts = 1700000000000000000ULL;
    cmr_segs_writer_begin_layout(&w, 42, how);
    uint32_t segs = 100;
    for (uint32_t i = 0; i < segs; i++) {
        /* 10 calls: a root and 9 children, each a few µs */
        uint32_t n = 0;
        cmr_event_write(rec, n++, &(cmr_event_t){methods[0], ts += 700, CMR_EVENT_ENTER, 1});
        for (int c = 0; c < 9; c++) {
            cmr_event_write(rec, n++, &(cmr_event_t){methods[1 + c % 5], ts += 300, CMR_EVENT_ENTER, 2});
            cmr_event_write(rec, n++, &(cmr_event_t){methods[1 + c % 5], ts += 900, CMR_EVENT_EXIT, 2});
        }
        cmr_event_write(rec, n++, &(cmr_event_t){methods[0], ts += 100, CMR_EVENT_EXIT, 1});
        cmr_event_batch_t b = {.thread_id = 7, .thread_name = "main", .segment_id = 1000 + i, .last = true};
        /* as the probe makes them: the thread's prefix, the next number */
        cmr_put_be64(b.trace_id, 0x9e3779b97f4a7c15ULL);
        cmr_put_be64(b.trace_id + 8, 0x1234567890ULL + i);
        assert_int_equal(cmr_segs_writer_add(&w, &b, rec, n), 0);
    }
    cmr_event_msg_t m;
    cmr_segs_writer_msg(&w, &m);
    return (double)m.segments.len / (segs * 10);
}

/* Small traces of a few calls on one thread, many per message: what the layout is for. */
static void test_small_traces_are_small(void **state)
{
    (void)state;
    double basic = small_traces(CMR_EVENTS_LAYOUT_BASIC), packed = small_traces(CMR_EVENTS_LAYOUT_PACKED);
    print_message("100 traces of 10 calls: %.2f bytes per call, basic event layout %.2f\n", packed, basic);
    assert_true(basic < 7.0); /* 8.06 with whole trace ids; a step costs 1 byte of the 16 */
    assert_true(packed < basic - 0.5);
}

/* A message in an event layout this reader does not know is refused, not misread. */
static void test_unknown_layout_is_refused(void **state)
{
    (void)state;
    static sample_t s;
    random_sample(&s, 5);
    cmr_event_msg_t m;
    layout = CMR_EVENTS_LAYOUT_PACKED;
    write_sample(&w, &s, 5, &m);
    int32_t unknown[] = {-1, 2, INT32_MAX};
    for (size_t i = 0; i < 3; i++) {
        m.event_layout = unknown[i];
        cmr_segs_reader_init(&r, &m);
        cmr_event_batch_t b;
        assert_int_equal(cmr_segs_reader_next(&r, &b), -1);
        assert_non_null(strstr(r.error, "unknown event_layout"));
    }
}

/* A trace id is sent whole unless it follows the previous one by a small step: the same
 * first 8 bytes, the last 8 (big endian) 1 .. 2^21 - 1 above. */
static void test_trace_id_steps(void **state)
{
    (void)state;
    static const struct {
        uint64_t hi, lo;
        size_t header; /* bytes of the segment's header (no events) */
    } ids[] = {
        {7, 100, 1 + 1 + 6 + 16 + 1},               /* flags, segment id, thread (3, "main"), trace, count */
        {7, 101, 1 + 1 + 1 + 1},                    /* a step of 1 */
        {7, 101 + 2097151, 1 + 1 + 3 + 1},          /* the largest step */
        {7, 101 + 2 * 2097151 + 1, 1 + 1 + 16 + 1}, /* too far: whole */
        {8, 5, 1 + 1 + 16 + 1},                     /* another prefix: whole */
        {8, 4, 1 + 1 + 16 + 1},                     /* backwards: whole */
        {8, 4, 1 + 1 + 1},                          /* the same trace: nothing */
    };
    size_t n = sizeof ids / sizeof ids[0];
    cmr_segs_writer_begin(&w, 42);
    size_t before = 0;
    for (size_t i = 0; i < n; i++) {
        cmr_event_batch_t b = {.thread_id = 3, .thread_name = "main", .segment_id = 9, .last = true};
        cmr_put_be64(b.trace_id, ids[i].hi);
        cmr_put_be64(b.trace_id + 8, ids[i].lo);
        assert_int_equal(cmr_segs_writer_add(&w, &b, NULL, 0), 0);
        size_t after = w.out.len;
        if (after - before != ids[i].header)
            fail_msg("id %zu: %zu header bytes, want %zu", i, after - before, ids[i].header);
        before = after;
    }
    cmr_event_msg_t m;
    cmr_segs_writer_msg(&w, &m);
    cmr_event_batch_t *v;
    char err[128];
    assert_int_equal(cmr_segs_split(&m, &v, err, sizeof err), (long)n);
    for (size_t i = 0; i < n; i++) {
        assert_true(cmr_be64(v[i].trace_id) == ids[i].hi);
        assert_true(cmr_be64(v[i].trace_id + 8) == ids[i].lo);
    }
    cmr_segs_batches_free(v, n);
    /* a step of 0, or a flag byte with both a whole id and a step, is refused */
    cmr_segs_writer_begin(&w, 42);
    for (size_t i = 0; i < 2; i++) {
        cmr_event_batch_t b = {.thread_id = 3, .thread_name = "main", .segment_id = 9, .last = true};
        cmr_put_be64(b.trace_id, ids[i].hi);
        cmr_put_be64(b.trace_id + 8, ids[i].lo);
        assert_int_equal(cmr_segs_writer_add(&w, &b, NULL, 0), 0);
    }
    cmr_segs_writer_msg(&w, &m);
    assert_int_equal(m.segments.len, ids[0].header + ids[1].header);
    uint8_t bad[64];
    memcpy(bad, m.segments.data, m.segments.len);
    cmr_event_msg_t bm = m;
    bm.segments.data = bad;
    bad[ids[0].header + 2] = 0; /* the step */
    assert_true(cmr_segs_split(&bm, &v, err, sizeof err) < 0);
    assert_non_null(strstr(err, "trace id step"));
    bad[ids[0].header + 2] = 1;
    bad[ids[0].header] |= 4; /* and a whole trace id */
    assert_true(cmr_segs_split(&bm, &v, err, sizeof err) < 0);
    assert_non_null(strstr(err, "both whole and as a step"));
}

static void test_split_and_join(void **state)
{
    (void)state;
    static sample_t s;
    random_sample(&s, 5);
    cmr_event_msg_t m;
    write_sample(&w, &s, 5, &m);
    cmr_event_batch_t *v;
    char err[128];
    long n = cmr_segs_split(&m, &v, err, sizeof err);
    assert_int_equal(n, (long)s.n);
    static cmr_segs_writer_t w2;
    cmr_event_msg_t m2;
    assert_int_equal(cmr_segs_join(&w2, 5, v, (size_t)n, &m2), 0);
    assert_int_equal(m2.segments.len, m.segments.len);
    assert_memory_equal(m2.segments.data, m.segments.data, m.segments.len);
    cmr_segs_batches_free(v, (size_t)n);
    cmr_segs_writer_free(&w2);
}

/* A segment batch without events (the last batch of a segment whose events went out
 * before) comes out of a fresh reader as an empty block, maybe without a buffer: the
 * plain decoder takes it (found by fuzz_event_decode under UBSan). */
static void test_segment_without_events(void **state)
{
    (void)state;
    cmr_event_batch_t b = {
        .thread_id = 3, .thread_name = "main", .segment_id = 9, .batch_seq = 2, .first_event_seq = 40, .last = true};
    b.trace_id[0] = 1;
    cmr_segs_writer_begin(&w, 42);
    assert_int_equal(cmr_segs_writer_add(&w, &b, NULL, 0), 0);
    cmr_event_msg_t m;
    cmr_segs_writer_msg(&w, &m);
    cmr_segs_reader_t *r = calloc(1, sizeof *r); /* fresh: no buffers yet */
    assert_non_null(r);
    cmr_segs_reader_init(r, &m);
    cmr_event_batch_t got;
    assert_int_equal(cmr_segs_reader_next(r, &got), 1);
    assert_int_equal(got.event_count, 0);
    assert_true(got.last);
    char err[128];
    assert_int_equal(cmr_events_check(got.packed_events.data, got.packed_events.len, 0, err, sizeof err), 0);
    assert_int_equal(cmr_segs_reader_next(r, &got), 0);
    cmr_segs_reader_free(r);
    free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_messages_round_trip),     cmocka_unit_test(test_trace_id_steps),
        cmocka_unit_test(test_refuses_truncations_and_counts), cmocka_unit_test(test_damaged_messages),
        cmocka_unit_test(test_small_traces_are_small),         cmocka_unit_test(test_split_and_join),
        cmocka_unit_test(test_segment_without_events),         cmocka_unit_test(test_unknown_layout_is_refused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    cmr_segs_writer_free(&w);
    cmr_segs_reader_free(&r);
    return rc;
}
