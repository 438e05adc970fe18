/*
 * test_diagnoses.c - the projection of cmr.diagnoses (cmr/diagnoses.h): revisions apply in
 * order, an older or repeated one changes nothing (two workers ending the same diagnosis,
 * a replay), the history keeps every revision, the active diagnosis of a method is found,
 * and records that are not diagnoses are refused; durations people type
 * (cmr_duration_parse_ms).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "cmr/clock.h"
#include "cmr/diagnoses.h"
#include "cmr/wire.h"

static cmr_diagnosis_t make(const char *id, int64_t revision, cmr_diag_state_t st, int64_t method)
{
    return (cmr_diagnosis_t){.id = (char *)id,
                             .revision = revision,
                             .environment_id = "shop",
                             .method_id = method,
                             .class_name = "com/shop/Cart",
                             .method_name = "add",
                             .descriptor = "(I)V",
                             .depth = 3,
                             .ttl_ms = 60000,
                             .state = st,
                             .end_reason = st == CMR_DIAG_ENDED ? CMR_DIAG_END_STOPPED : CMR_DIAG_END_NONE,
                             .rule = "",
                             .trace_id = "",
                             .author = "t",
                             .started_ms = 1000,
                             .time_ms = 1000 + revision};
}

static void test_revisions_and_history(void **state)
{
    (void)state;
    cmr_diagnoses_t *s = cmr_diagnoses_new();
    cmr_diagnosis_t a1 = make("00000000000000a1", 1, CMR_DIAG_ACTIVE, 7),
                    a2 = make("00000000000000a1", 2, CMR_DIAG_ENDED, 7);
    cmr_diagnosis_t b1 = make("00000000000000b1", 1, CMR_DIAG_ACTIVE, 8);
    assert_int_equal(cmr_diagnoses_apply_msg(s, &a1), 1);
    assert_int_equal(cmr_diagnoses_apply_msg(s, &b1), 1);
    assert_int_equal(cmr_diagnoses_apply_msg(s, &a1), 0); /* repeated */
    assert_non_null(cmr_diagnoses_active_for(s, "shop", 7));
    assert_null(cmr_diagnoses_active_for(s, "billing", 7));
    assert_int_equal(cmr_diagnoses_apply_msg(s, &a2), 1);
    assert_int_equal(cmr_diagnoses_apply_msg(s, &a1), 0); /* older: the ended state stays */
    assert_int_equal(cmr_diagnoses_get(s, "00000000000000a1")->state, CMR_DIAG_ENDED);
    assert_null(cmr_diagnoses_active_for(s, "shop", 7));
    assert_int_equal(cmr_diagnoses_count(s), 2);
    assert_string_equal(cmr_diagnoses_at(s, 0)->id, "00000000000000a1"); /* first seen first */
    const cmr_diagnosis_t *revs[4];
    assert_int_equal(cmr_diagnoses_history(s, "00000000000000a1", revs, 4), 2);
    assert_int_equal(revs[0]->revision, 1);
    assert_int_equal(revs[1]->revision, 2);
    assert_string_equal(cmr_diag_end_reason_name(revs[1]->end_reason), "stopped");
    assert_int_equal(cmr_diagnoses_history(s, "ffffffffffffffff", revs, 4), 0);
    cmr_diagnoses_free(s);
}

static void test_refused_records(void **state)
{
    (void)state;
    cmr_diagnoses_t *s = cmr_diagnoses_new();
    char err[256];
    assert_int_equal(cmr_diagnoses_apply(s, "garbage", 7, err, sizeof err), -1);
    cmr_diagnosis_t bad = make("not-hex!", 1, CMR_DIAG_ACTIVE, 7);
    assert_int_equal(cmr_diagnoses_apply_msg(s, &bad), -1);
    bad = make("00000000000000a1", 0, CMR_DIAG_ACTIVE, 7); /* revisions start at 1 */
    assert_int_equal(cmr_diagnoses_apply_msg(s, &bad), -1);
    assert_int_equal(cmr_diagnoses_count(s), 0);
    assert_true(cmr_diag_id_valid("0123456789abcdef"));
    assert_false(cmr_diag_id_valid("0123456789ABCDEF"));
    assert_false(cmr_diag_id_valid("0123"));
    /* the number the agents get: the digits as written, 0 for an id that is not valid */
    assert_true(cmr_diag_id_number("d1a9000000000004") == UINT64_C(0xd1a9000000000004));
    assert_true(cmr_diag_id_number("ffffffffffffffff") == UINT64_MAX);
    assert_true(cmr_diag_id_number("0123456789ABCDEF") == 0);
    assert_true(cmr_diag_id_number("0123") == 0);
    cmr_diagnoses_free(s);
}

static void test_durations(void **state)
{
    (void)state;
    int64_t ms;
    assert_int_equal(cmr_duration_parse_ms("250", &ms), 0);
    assert_int_equal(ms, 250);
    assert_int_equal(cmr_duration_parse_ms("1.5s", &ms), 0);
    assert_int_equal(ms, 1500);
    assert_int_equal(cmr_duration_parse_ms("10m", &ms), 0);
    assert_int_equal(ms, 600000);
    assert_int_equal(cmr_duration_parse_ms("2h", &ms), 0);
    assert_int_equal(ms, 7200000);
    assert_int_equal(cmr_duration_parse_ms("7d", &ms), 0);
    assert_int_equal(ms, 604800000);
    assert_int_equal(cmr_duration_parse_ms("", &ms), -1);
    assert_int_equal(cmr_duration_parse_ms("-1s", &ms), -1);
    assert_int_equal(cmr_duration_parse_ms("10 min", &ms), -1);
    assert_int_equal(cmr_duration_parse_ms("nan", &ms), -1);
    assert_int_equal(cmr_duration_parse_ms("1e30h", &ms), -1);
}

/* The names of the enums and of methods, as the CLI, the web UI and the logs show them. */
static void test_names(void **state)
{
    (void)state;
    assert_string_equal(cmr_diag_cause_name(CMR_DIAG_CAUSE_THRESHOLD), "threshold");
    assert_string_equal(cmr_diag_condition_name(CMR_DIAG_HTTP_PARAMETER), "http.param");
    assert_string_equal(cmr_diag_condition_name(CMR_DIAG_ARGUMENT), "arg");
    assert_string_equal(cmr_diag_via_name(CMR_DIAG_VIA_DYNAMIC), "dynamic");
    assert_string_equal(cmr_diag_node_status_name(CMR_DIAG_NODE_NOT_LOADED), "not_loaded");
    assert_string_equal(cmr_diag_node_status_name(CMR_DIAG_NODE_TOO_MANY), "too_many");
    assert_string_equal(cmr_diag_probe_name(CMR_DIAG_PROBE_NONE), "none");
    assert_string_equal(cmr_diag_probe_name(CMR_DIAG_PROBE_CONDITIONAL), "conditional");
    assert_string_equal(cmr_diag_via_name((cmr_diag_via_t)99), "?"); /* not on the wire */
    char buf[64];
    assert_string_equal(cmr_diag_method_text("com/shop/Cart", "add", "(Lcom/shop/Item;)V", buf, sizeof buf),
                        "com.shop.Cart.add(Lcom/shop/Item;)V");
    char entry[] = "com/shop/Cart.add";
    assert_string_equal(cmr_diag_dotted(entry), "com.shop.Cart.add");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_revisions_and_history),
        cmocka_unit_test(test_refused_records),
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
