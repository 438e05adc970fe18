/*
 * test_rejects.c - rejected messages are counted per topic and reason, logged with their
 * values escaped and rate-limited, bounded in the number of pairs kept, and summarised.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cmr/clock.h"
#include "cmr/log.h"
#include "cmr/rejects.h"

static int lines_rejected, lines_summary, lines_with_newline;
static char last_line[1024];

static void sink(cmr_log_level_t level, const char *line, void *opaque)
{
    (void)level;
    (void)opaque;
    if (strstr(line, "event=wire.message_rejected"))
        lines_rejected++;
    if (strstr(line, "event=wire.rejected_total"))
        lines_summary++;
    if (strchr(line, '\n'))
        lines_with_newline++;
    snprintf(last_line, sizeof last_line, "%s", line);
}

static void test_counts_and_escaping(void **state)
{
    (void)state;
    cmr_log_set_sink(sink, NULL);
    uint64_t before = cmr_rejects_total();
    cmr_reject("cmr.methods", "corrupt", 2, 77, "body ends early\nts=forged level=error");
    assert_int_equal(cmr_rejects_count("cmr.methods", "corrupt"), 1);
    assert_int_equal(lines_with_newline, 0); /* the detail could not forge a second line */
    assert_non_null(strstr(last_line, "detail=\"body ends early\\nts=forged"));
    cmr_reject("cmr.methods", "corrupt", 2, 78, NULL);
    cmr_reject("cmr.registrations", "unexpected_type", 0, 1, "ClassLoaded");
    assert_int_equal(cmr_rejects_count("cmr.methods", "corrupt"), 2);
    assert_int_equal(cmr_rejects_count("cmr.registrations", "unexpected_type"), 1);
    assert_int_equal(cmr_rejects_count("cmr.events", "corrupt"), 0);
    assert_int_equal(cmr_rejects_total() - before, 3);
    /* A summary names each changed pair once; an unchanged one is not repeated. */
    lines_summary = 0;
    cmr_rejects_log_summary();
    assert_true(lines_summary >= 2);
    lines_summary = 0;
    cmr_rejects_log_summary();
    assert_int_equal(lines_summary, 0);
    cmr_log_set_sink(NULL, NULL);
}

static void test_decode_rejects(void **state)
{
    (void)state;
    cmr_msg_t m;
    static const uint8_t junk[] = {0xc3, 0x01, 1, 2, 3};
    assert_int_equal(cmr_reject_decode("cmr.methods", 0, 5, junk, sizeof junk, &m), -1);
    assert_int_equal(cmr_rejects_count("cmr.methods", "truncated"), 1);
    assert_int_equal(cmr_reject_decode("cmr.methods", 0, 6, "hello, not a message", 20, &m), -1);
    assert_int_equal(cmr_rejects_count("cmr.methods", "bad_magic"), 1);
}

static void test_bounded_and_rate_limited(void **state)
{
    (void)state;
    cmr_log_set_sink(sink, NULL);
    lines_rejected = 0;
    int64_t t0 = cmr_mono_ns();
    char topic[64];
    /* Many topics (say, one per agent): the table stays bounded, nothing is lost. */
    for (int i = 0; i < 2 * CMR_REJECTS_MAX_KEYS; i++) {
        snprintf(topic, sizeof topic, "cmr.cmd.%04d", i);
        cmr_reject(topic, "flood", 0, i, NULL);
    }
    size_t pairs = 0;
    uint64_t counted = 0;
    void count_pairs(const char *t, const char *r, uint64_t c, void *o);
    cmr_rejects_each(count_pairs, &pairs);
    (void)counted;
    assert_true(pairs <= CMR_REJECTS_MAX_KEYS + 8);
    assert_true(cmr_rejects_count("(other)", "flood") > 0);
    /* 512 rejections: at most 5 lines a second (each second the loop touched) */
    int64_t seconds = (cmr_mono_ns() - t0) / 1000000000 + 2;
    assert_true(lines_rejected <= 5 * seconds);
    assert_true(lines_rejected < 2 * CMR_REJECTS_MAX_KEYS);
    cmr_log_set_sink(NULL, NULL);
}

void count_pairs(const char *t, const char *r, uint64_t c, void *o)
{
    (void)t;
    (void)r;
    (void)c;
    (*(size_t *)o)++;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts_and_escaping),
        cmocka_unit_test(test_decode_rejects),
        cmocka_unit_test(test_bounded_and_rate_limited),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
