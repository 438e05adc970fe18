/*
 * test_event_codec.c - the compact event encoding (cmr/event.h): every sequence the
 * encoder takes comes back exactly (nested calls, exits without entries, explicit depths,
 * deep stacks, more methods than the dictionary holds, clocks going back), in both layouts
 * (the packed one as a message's segments have it: cut into segments, each from its first
 * event's time), the sizes it is for, and the refusal of every damaged block.
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

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static cmr_events_encoder_t enc;

typedef struct seq {
    uint8_t *rec; /* 24-byte records */
    uint32_t n, cap;
    uint32_t depth;
    uint64_t ts;
    uint64_t stack[4096];
} seq_t;

static void seq_add(seq_t *s, uint32_t kind, uint64_t method, uint32_t aux, uint64_t dt)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 256;
        s->rec = realloc(s->rec, (size_t)s->cap * CMR_EVENT_RECORD_SIZE);
        assert_non_null(s->rec);
    }
    s->ts += dt;
    cmr_event_t ev = {.method_id = method, .timestamp_ns = s->ts, .kind = kind, .aux = aux};
    cmr_event_write(s->rec, s->n++, &ev);
}

static void call_enter(seq_t *s, uint64_t method, uint64_t dt)
{
    s->stack[++s->depth] = method;
    seq_add(s, CMR_EVENT_ENTER, method, s->depth, dt);
}

static void call_exit(seq_t *s, uint64_t dt, bool thrown)
{
    seq_add(s, thrown ? CMR_EVENT_EXCEPTION_EXIT : CMR_EVENT_EXIT, s->stack[s->depth], s->depth, dt);
    s->depth--;
}

static size_t packed_len; /* the packed layout's bytes of the last round trip */

/* The packed layout: s cut into segments of 1 - 500 events (`whole`: one segment), each
 * begun at its first event's time as the message writer does; decoded back the same way
 * and compared. Returns the bytes. */
static size_t round_trip_packed(const seq_t *s, bool whole)
{
    uint8_t *packed = malloc((size_t)s->n * CMR_EVENTS_MAX_ENCODED + 1);
    uint32_t *cuts = malloc(((size_t)s->n + 1) * sizeof *cuts), ncuts = 0;
    size_t len = 0;
    cmr_events_encoder_begin_layout(&enc, CMR_EVENTS_LAYOUT_PACKED);
    for (uint32_t i = 0; i < s->n; i++) {
        cmr_event_t ev;
        cmr_event_read(s->rec, i, &ev);
        if (i == 0 || (!whole && next_rand() % 100 == 0)) {
            cuts[ncuts++] = i;
            cmr_events_encoder_segment(&enc, ev.timestamp_ns);
        }
        size_t one = cmr_events_encoder_put(&enc, &ev, packed + len);
        assert_true(one >= 1 && one <= CMR_EVENTS_MAX_ENCODED);
        len += one;
    }
    cuts[ncuts] = s->n;
    cmr_events_decoder_t *d = malloc(sizeof *d);
    cmr_events_decoder_init(d, packed, 0, 0);
    d->layout = CMR_EVENTS_LAYOUT_PACKED;
    const uint8_t *p = packed;
    for (uint32_t c = 0; c < ncuts; c++) {
        cmr_event_t want, ev;
        cmr_event_read(s->rec, cuts[c], &want);
        cmr_events_decoder_segment(d, p, packed + len, cuts[c + 1] - cuts[c], want.timestamp_ns);
        for (uint32_t i = cuts[c]; i < cuts[c + 1]; i++) {
            if (cmr_events_decoder_next(d, &ev) != 1)
                fail_msg("event %u: %s", i, d->error);
            cmr_event_read(s->rec, i, &want);
            assert_true(ev.method_id == want.method_id && ev.timestamp_ns == want.timestamp_ns &&
                        ev.kind == want.kind && ev.aux == want.aux);
        }
        p = d->p;
    }
    assert_ptr_equal(p, packed + len);
    free(d);
    free(cuts);
    free(packed);
    return len;
}

/* Packs, checks the size bound, unpacks, compares; returns the packed length. The packed
 * layout too (its length in packed_len, the sequence as one segment). */
static size_t round_trip(const seq_t *s)
{
    if (s->n) {
        round_trip_packed(s, false);
        packed_len = round_trip_packed(s, true);
    }
    uint8_t *packed = malloc((size_t)s->n * CMR_EVENTS_MAX_ENCODED + 1);
    uint8_t *back = malloc((size_t)s->n * CMR_EVENT_RECORD_SIZE + 1);
    size_t len = 0;
    assert_int_equal(cmr_events_pack(&enc, s->rec, s->n, packed, &len), 0);
    assert_true(len <= (size_t)s->n * CMR_EVENTS_MAX_ENCODED);
    char err[128];
    assert_int_equal(cmr_events_check(packed, len, s->n, err, sizeof err), 0);
    assert_int_equal(cmr_events_unpack(packed, len, s->n, back, err, sizeof err), 0);
    if (s->n)
        assert_memory_equal(back, s->rec, (size_t)s->n * CMR_EVENT_RECORD_SIZE);
    /* the streaming decoder gives the same, then 0 */
    cmr_events_decoder_t *d = malloc(sizeof *d);
    cmr_events_decoder_init(d, packed, len, s->n);
    cmr_event_t ev;
    for (uint32_t i = 0; i < s->n; i++) {
        assert_int_equal(cmr_events_decoder_next(d, &ev), 1);
        cmr_event_t want;
        cmr_event_read(s->rec, i, &want);
        assert_true(ev.method_id == want.method_id && ev.timestamp_ns == want.timestamp_ns && ev.kind == want.kind &&
                    ev.aux == want.aux);
    }
    assert_int_equal(cmr_events_decoder_next(d, &ev), 0);
    free(d);
    free(packed);
    free(back);
    return len;
}

/* MooBench's shape: a recursion 10 deep of one method, a few ns apart. */
static void test_recursion_is_small(void **state)
{
    (void)state;
    seq_t s = {.ts = 1763900000000000000ULL};
    for (int call = 0; call < 400; call++) {
        for (int i = 0; i < 10; i++)
            call_enter(&s, 0x1234567890abcdefULL, 20 + next_rand() % 40);
        for (int i = 0; i < 10; i++)
            call_exit(&s, 20 + next_rand() % 40, false);
    }
    size_t len = round_trip(&s);
    double per_call = (double)len / (s.n / 2), packed = (double)packed_len / (s.n / 2);
    printf("recursion: %u events in %zu bytes, %.2f bytes per call; packed %.2f\n", s.n, len, per_call, packed);
    assert_true(per_call <= 4.1);
    assert_true(packed <= 3.1); /* an exit 20 - 60 ns after the event before it: its tag alone */
    free(s.rec);
}

/* Many methods, calls of every length: what a database's call tree looks like. */
static void test_mixed_workload_size(void **state)
{
    (void)state;
    seq_t s = {.ts = 1763900000000000000ULL};
    uint64_t methods[300];
    for (int i = 0; i < 300; i++)
        methods[i] = next_rand();
    call_enter(&s, methods[0], 0);
    while (s.n < 4000) {
        uint64_t r = next_rand();
        uint64_t dt = 1ULL << (3 + (r >> 30) % 10); /* 8 ns .. 4 us, log-uniform */
        dt += (r >> 44) % dt;
        if ((r % 3 != 0 || s.depth < 2) && s.depth < 40) /* skewed: a few methods most often */
            call_enter(&s, methods[(r >> 8) % ((r >> 20) % 4 == 0 ? 300 : 20)], dt);
        else
            call_exit(&s, dt, (r >> 40) % 50 == 0);
    }
    while (s.depth)
        call_exit(&s, 100, false);
    size_t len = round_trip(&s);
    double per_call = (double)len / (s.n / 2), packed = (double)packed_len / (s.n / 2);
    printf("mixed: %u events in %zu bytes, %.2f bytes per call; packed %.2f\n", s.n, len, per_call, packed);
    assert_true(packed < per_call - 0.3);
    /* 250 or so first appearances (9 bytes each) in 4,000 events, deltas up to 4 us: a
     * harsher mix than a real program's batch, whose figures are in docs/benchmarks.md */
    assert_true(per_call <= 7.0);
    free(s.rec);
}

/* Whatever the encoder is given (valid kinds), it gives back: random depths, exits of
 * other methods than the open call's, exits without entries, forks, deep stacks, time
 * going backwards, more methods than the dictionary holds. */
static void test_any_sequence_round_trips(void **state)
{
    (void)state;
    for (int round = 0; round < 300; round++) {
        seq_t s = {.ts = next_rand()};
        uint32_t n = (uint32_t)(next_rand() % 3000);
        int distinct = round % 3 == 0 ? 5000 : 40;
        for (uint32_t i = 0; i < n; i++) {
            uint64_t r = next_rand();
            uint64_t method = (r % 7 == 0) ? next_rand() : (uint64_t)((r >> 3) % (uint64_t)distinct) * 0x9E3779B1ULL;
            uint64_t dt = (r >> 50) % 5 == 0 ? next_rand() : (r >> 30) % 500;
            switch ((r >> 12) % 10) {
            case 0: seq_add(&s, CMR_EVENT_FORK, method, 0, dt); break;
            case 1: seq_add(&s, CMR_EVENT_EXIT, method, (uint32_t)next_rand(), dt); break;
            case 2: seq_add(&s, CMR_EVENT_ENTER, method, (uint32_t)(next_rand() % 600), dt); break;
            case 3: seq_add(&s, CMR_EVENT_EXCEPTION_EXIT, method, 0, dt); break;
            case 4:
            case 5:
                if (s.depth < 4000) {
                    call_enter(&s, method, dt);
                    break;
                }
                /* fall through */
            default:
                if (s.depth)
                    call_exit(&s, dt, r % 2);
                else
                    call_enter(&s, method, dt);
            }
        }
        round_trip(&s);
        free(s.rec);
    }
}

static void test_refuses_other_kinds(void **state)
{
    (void)state;
    seq_t s = {0};
    call_enter(&s, 1, 10);
    seq_add(&s, 5, 1, 0, 1);
    uint8_t out[64];
    size_t len;
    assert_int_equal(cmr_events_pack(&enc, s.rec, s.n, out, &len), -1);
    free(s.rec);
}

static void expect_corrupt(const uint8_t *p, size_t len, uint32_t count, const char *why)
{
    char err[128] = "";
    assert_int_equal(cmr_events_check(p, len, count, err, sizeof err), -1);
    if (why && !strstr(err, why))
        fail_msg("expected \"%s\", got \"%s\"", why, err);
}

/* Every cut of a valid block, every wrong count, and hand-made bad blocks. */
static void test_refuses_damaged_blocks(void **state)
{
    (void)state;
    seq_t s = {.ts = 1000};
    uint64_t m[40];
    for (int i = 0; i < 40; i++)
        m[i] = next_rand();
    for (int i = 0; i < 40; i++)
        call_enter(&s, m[i], 300);
    seq_add(&s, CMR_EVENT_FORK, 0, 0, 5);
    while (s.depth)
        call_exit(&s, 70000, false);
    uint8_t *packed = malloc((size_t)s.n * CMR_EVENTS_MAX_ENCODED);
    size_t len;
    assert_int_equal(cmr_events_pack(&enc, s.rec, s.n, packed, &len), 0);
    for (size_t cut = 0; cut < len; cut++)
        expect_corrupt(packed, cut, s.n, NULL);
    expect_corrupt(packed, len, s.n + 1, "fewer events");
    expect_corrupt(packed, len, s.n - 1, "bytes after");
    char err[64];
    assert_int_equal(cmr_events_check(packed, len, s.n, err, sizeof err), 0);
    free(packed);
    free(s.rec);

    uint8_t implied_exit[] = {0x01 /* exit, implied method */, 0x02};
    expect_corrupt(implied_exit, sizeof implied_exit, 1, "implied method");
    uint8_t implied_enter[] = {0x00 /* enter, implied */, 0x02};
    expect_corrupt(implied_enter, sizeof implied_enter, 1, "implied method");
    uint8_t undefined_entry[] = {0x08 /* enter, dictionary entry 0 */, 0x02};
    expect_corrupt(undefined_entry, sizeof undefined_entry, 1, "not defined");
    uint8_t far_entry[] = {29 << 3, 0x05, 0x02};
    expect_corrupt(far_entry, sizeof far_entry, 1, "not defined");
    uint8_t huge_depth[] = {0x04 | 30 << 3, 0xff, 0xff, 0xff, 0xff, 0x7f, 1, 2, 3, 4, 5, 6, 7, 8, 0};
    expect_corrupt(huge_depth, sizeof huge_depth, 1, "bad depth");
    uint8_t long_varint[] = {30 << 3, 1,    2,    3,    4,    5,    6,    7,    8,   0xff,
                             0xff,    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
    expect_corrupt(long_varint, sizeof long_varint, 1, "timestamp");
    expect_corrupt(NULL, 0, 1, "fewer events");
    assert_int_equal(cmr_events_check(NULL, 0, 0, err, sizeof err), 0);

    /* a dictionary over its size */
    size_t big = (CMR_EVENTS_DICT_MAX + 1) * 10;
    uint8_t *over = malloc(big), *q = over;
    for (int i = 0; i <= CMR_EVENTS_DICT_MAX; i++) {
        *q++ = 2 | 31 << 3; /* exception exit, new entry */
        cmr_put_le64(q, (uint64_t)i + 1), q += 8;
        *q++ = 0;
    }
    expect_corrupt(over, (size_t)(q - over), CMR_EVENTS_DICT_MAX + 1, "dictionary over");
    assert_int_equal(cmr_events_check(over, (size_t)(q - over) - 10, CMR_EVENTS_DICT_MAX, err, sizeof err), 0);
    free(over);
}

/* Decodes len bytes as one packed segment of count events from base: 0 or -1 (d->error). */
static int check_packed(const uint8_t *p, size_t len, uint32_t count, uint64_t base, const char **why)
{
    static cmr_events_decoder_t d;
    cmr_events_decoder_init(&d, p, 0, 0);
    d.layout = CMR_EVENTS_LAYOUT_PACKED;
    cmr_events_decoder_segment(&d, p, p + len, count, base);
    cmr_event_t ev;
    int rc;
    while ((rc = cmr_events_decoder_next(&d, &ev)) == 1)
        ;
    *why = d.error;
    return rc;
}

static void expect_packed_corrupt(const uint8_t *p, size_t len, uint32_t count, const char *why)
{
    const char *got = NULL;
    assert_int_equal(check_packed(p, len, count, 1000, &got), -1);
    if (why && (!got || !strstr(got, why)))
        fail_msg("expected \"%s\", got \"%s\"", why, got ? got : "(none)");
}

/* The packed layout refuses what the basic one does, and what is its own: an exit of no
 * open call in the tag's form, a time that overflows, a segment's first event off its
 * base (which the encoder will not write either). */
static void test_packed_refuses_damaged_segments(void **state)
{
    (void)state;
    uint8_t exit_alone[] = {0x80};
    expect_packed_corrupt(exit_alone, sizeof exit_alone, 1, "implied method");
    uint8_t undefined_entry[] = {5}; /* enter of entry 5 of an empty dictionary */
    expect_packed_corrupt(undefined_entry, sizeof undefined_entry, 1, "not defined");
    /* enter (new entry 0, no time: the segment's first), exit with 64 + 2^63 ns: too long */
    uint8_t huge_exit[] = {96 | 3 << 3, 1,    2,    3,    4,    5,    6,    7,    8,   0x80 | 0x40,
                           0xff,        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
    expect_packed_corrupt(huge_exit, sizeof huge_exit, 2, "oversized time");
    uint8_t ok[] = {96 | 3 << 3, 1, 2, 3, 4, 5, 6, 7, 8, 0x80 | 0x40 | 5, 0x02};
    const char *why;
    assert_int_equal(check_packed(ok, sizeof ok, 2, 1000, &why), 0);
    for (size_t cut = 0; cut < sizeof ok; cut++)
        expect_packed_corrupt(ok, cut, 2, NULL);
    expect_packed_corrupt(ok, sizeof ok, 3, "fewer events");
    expect_packed_corrupt(ok, sizeof ok, 1, "bytes after");
    uint8_t implied_enter[] = {96 | 0 /* enter, implied method */};
    expect_packed_corrupt(implied_enter, sizeof implied_enter, 1, "implied method");

    /* the encoder: a segment's first event at its base, nothing else */
    cmr_events_encoder_begin_layout(&enc, CMR_EVENTS_LAYOUT_PACKED);
    cmr_events_encoder_segment(&enc, 1000);
    uint8_t out[CMR_EVENTS_MAX_ENCODED];
    assert_int_equal(cmr_events_encoder_put(&enc, &(cmr_event_t){7, 1001, CMR_EVENT_ENTER, 1}, out), 0);
    assert_int_equal(cmr_events_encoder_put(&enc, &(cmr_event_t){7, 1000, CMR_EVENT_ENTER, 1}, out), 9); /* no time */
    assert_int_equal(cmr_events_encoder_put(&enc, &(cmr_event_t){7, 1030, CMR_EVENT_EXIT, 1}, out), 1);
    assert_int_equal(out[0], 0x80 | 30);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recursion_is_small),       cmocka_unit_test(test_mixed_workload_size),
        cmocka_unit_test(test_any_sequence_round_trips), cmocka_unit_test(test_refuses_other_kinds),
        cmocka_unit_test(test_refuses_damaged_blocks),   cmocka_unit_test(test_packed_refuses_damaged_segments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
