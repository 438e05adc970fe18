/*
 * test_agent_diagnoses.c - the agent's table of running diagnoses (agent_diagnoses.h), as
 * the control thread and the publisher drive it: a diagnosis starts with its first command
 * and puts its anchors in force; the classes carrying its probes keep their restore bytes;
 * it ends by itself at its end time, at its hits, past its budget (only once enough anchor
 * time was seen), handing back the restore bytes; a diagnosis the agent ended refuses later
 * commands; one whose classes all got other bytes ended by the CMR and may start again;
 * the restore budget; the anchors' text the probe reads; the runs kept for AgentStatus.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_diagnoses.h"

static uint8_t restore_bytes[] = {0xCA, 0xFE, 0xBA, 0xBE, 1, 2, 3};
static uint8_t digest[32] = {9};

/* A Redefine of class `name` carrying diagnosis `id`'s probes, anchor method 100. */
static cmr_redefine_t command(const char *name, int64_t id, cmr_diagnosis_scope_t *scope,
                              cmr_instrumented_method_t methods[2])
{
    methods[0] = (cmr_instrumented_method_t){100, "checkout", "()V", CMR_SENSOR_ANCHOR};
    methods[1] = (cmr_instrumented_method_t){101, "tax", "()V", CMR_SENSOR_CONDITIONAL};
    if (!scope->id)
        *scope = (cmr_diagnosis_scope_t){.id = id,
                                         .revision = 1,
                                         .restore_bytecode = {restore_bytes, sizeof restore_bytes},
                                         .restore_original = true};
    cmr_redefine_t r = {.class_name = (char *)name,
                        .loader_id = 1,
                        .class_hash = 77,
                        .original_digest = {digest, sizeof digest},
                        .diagnosis = scope};
    r.methods.items = methods;
    r.methods.count = 2;
    return r;
}

static cmr_diagnosis_run_t run_of(cmr_agent_diags_t *d, int64_t id)
{
    cmr_diagnosis_run_t runs[CMR_DIAG_MAX_RUNS];
    size_t n = cmr_agent_diags_runs(d, runs, CMR_DIAG_MAX_RUNS);
    for (size_t i = 0; i < n; i++)
        if (runs[i].id == id)
            return runs[i];
    fail_msg("no run of %" PRId64, id);
    return runs[0];
}

static uint64_t generation(cmr_agent_diags_t *d)
{
    return *(volatile uint64_t *)cmr_agent_diags_control(d);
}

static void test_start_install_end_by_time(void **state)
{
    (void)state;
    cmr_agent_diags_t *d = cmr_agent_diags_new();
    cmr_diagnosis_scope_t scope = {0};
    cmr_instrumented_method_t m[2];
    cmr_redefine_t cmd = command("shop/Checkout", 0x51, &scope, m);
    scope.end_ms = 5000;
    char why[256];
    uint64_t g0 = generation(d);
    assert_int_equal(cmr_agent_diags_begin(d, &cmd, 1000, why, sizeof why), 0);
    assert_true(generation(d) > g0); /* the probe re-reads its anchors */
    assert_true(cmr_agent_diags_take_changed(d));
    assert_false(cmr_agent_diags_take_changed(d));
    char *text = cmr_agent_diags_anchors_text(d);
    assert_string_equal(text, "64\t51\n"); /* the anchor only, the conditional method is not one */
    free(text);
    assert_int_equal(cmr_agent_diags_installed(d, &cmd, 1, 0xBEF0), 0);
    cmr_diagnosis_run_t r = run_of(d, 0x51);
    assert_int_equal(r.state, CMR_DIAG_ACTIVE);
    assert_int_equal(r.classes, 1);
    assert_int_equal(r.started_ms, 1000);

    int64_t id;
    cmr_diag_end_reason_t why_end;
    assert_int_equal(cmr_agent_diags_due(d, 4999, &id, &why_end), 0);
    assert_int_equal(cmr_agent_diags_due(d, 5000, &id, &why_end), 1);
    assert_int_equal(id, 0x51);
    assert_int_equal(why_end, CMR_DIAG_END_TIME_TO_LIVE);
    text = cmr_agent_diags_anchors_text(d); /* no context opens while it ends */
    assert_string_equal(text, "");
    free(text);
    assert_int_equal(cmr_agent_diags_due(d, 6000, &id, &why_end), 0); /* said once */
    const cmr_agent_diag_restore_t *rs;
    assert_int_equal(cmr_agent_diags_restores(d, 0x51, &rs), 1);
    assert_string_equal(rs[0].class_name, "shop/Checkout");
    assert_int_equal(rs[0].len, sizeof restore_bytes);
    assert_memory_equal(rs[0].bytes, restore_bytes, sizeof restore_bytes);
    assert_true(rs[0].original);
    assert_int_equal(rs[0].before, 0xBEF0);
    assert_memory_equal(rs[0].digest, digest, sizeof digest);
    cmr_agent_diags_ended(d, 0x51, CMR_DIAG_END_TIME_TO_LIVE, 5001);
    r = run_of(d, 0x51);
    assert_int_equal(r.state, CMR_DIAG_ENDED);
    assert_int_equal(r.end_reason, CMR_DIAG_END_TIME_TO_LIVE);
    assert_int_equal(r.ended_ms, 5001);
    assert_int_equal(r.classes, 0);
    assert_true(cmr_agent_diags_take_changed(d));
    /* a late (or replayed) command of it is refused: its probes never come back */
    assert_int_equal(cmr_agent_diags_begin(d, &cmd, 6000, why, sizeof why), -1);
    assert_non_null(strstr(why, "ended in this JVM"));
    cmr_agent_diags_free(d);
}

static void test_hits_and_budget(void **state)
{
    (void)state;
    cmr_agent_diags_t *d = cmr_agent_diags_new();
    char why[256];
    cmr_instrumented_method_t m[2];
    cmr_diagnosis_scope_t s1 = {0}, s2 = {0};
    cmr_redefine_t a = command("shop/A", 1, &s1, m);
    s1.max_hits = 3;
    assert_int_equal(cmr_agent_diags_begin(d, &a, 0, why, sizeof why), 0);
    cmr_instrumented_method_t m2[2];
    cmr_redefine_t b = command("shop/B", 2, &s2, m2);
    s2.overhead_budget_pct = 1.0;
    assert_int_equal(cmr_agent_diags_begin(d, &b, 0, why, sizeof why), 0);
    int64_t id;
    cmr_diag_end_reason_t reason;
    cmr_agent_diags_hit(d, 1);
    cmr_agent_diags_hit(d, 1);
    cmr_agent_diags_hit(d, 99); /* unknown: ignored */
    assert_int_equal(cmr_agent_diags_due(d, 1, &id, &reason), 0);
    cmr_agent_diags_hit(d, 1);
    assert_int_equal(cmr_agent_diags_due(d, 1, &id, &reason), 1);
    assert_int_equal(id, 1);
    assert_int_equal(reason, CMR_DIAG_END_HITS);
    cmr_agent_diags_ended(d, 1, reason, 2);
    /* budget: 1000 calls x CMR_DIAG_PROBE_PAIR_NS over 1 ms of anchor time is far over 1 %,
     * but too little anchor time was seen to judge */
    cmr_agent_diags_hit(d, 2);
    cmr_agent_diags_done(d, 2, 1000, 1000000);
    assert_true(run_of(d, 2).overhead_pct > 1.0);
    assert_int_equal(cmr_agent_diags_due(d, 3, &id, &reason), 0);
    /* enough anchor time at a modest rate: under the budget */
    cmr_agent_diags_done(d, 2, 0, CMR_DIAG_BUDGET_MIN_NS * 100);
    double pct = run_of(d, 2).overhead_pct;
    assert_true(pct > 0 && pct < 1.0);
    assert_int_equal(cmr_agent_diags_due(d, 3, &id, &reason), 0);
    /* many calls per anchor: over it */
    cmr_agent_diags_done(d, 2, 4000000000u, CMR_DIAG_BUDGET_MIN_NS);
    assert_int_equal(cmr_agent_diags_due(d, 4, &id, &reason), 1);
    assert_int_equal(id, 2);
    assert_int_equal(reason, CMR_DIAG_END_BUDGET);
    assert_int_equal(run_of(d, 1).hits, 3);
    cmr_agent_diags_free(d);
}

static void test_ended_by_cmr_and_started_again(void **state)
{
    (void)state;
    cmr_agent_diags_t *d = cmr_agent_diags_new();
    char why[256];
    cmr_instrumented_method_t m[2], m2[2];
    cmr_diagnosis_scope_t s = {0};
    cmr_redefine_t a = command("shop/A", 7, &s, m), b = command("shop/B", 7, &s, m2);
    assert_int_equal(cmr_agent_diags_begin(d, &a, 0, why, sizeof why), 0);
    assert_int_equal(cmr_agent_diags_installed(d, &a, 1, 11), 0);
    assert_int_equal(cmr_agent_diags_begin(d, &b, 0, why, sizeof why), 0);
    assert_int_equal(cmr_agent_diags_installed(d, &b, 1, 12), 0);
    assert_int_equal(cmr_agent_diags_installed(d, &b, 2, 13), 0); /* another loader's B */
    assert_int_equal(run_of(d, 7).classes, 3);
    (void)cmr_agent_diags_take_changed(d);
    /* the CMR gives the classes other bytes, one by one; another loader's A is not ours */
    cmr_agent_diags_replaced(d, "shop/A", 9, 0, 11, 10);
    assert_int_equal(run_of(d, 7).classes, 3);
    cmr_agent_diags_replaced(d, "shop/A", 1, 0, 11, 10);
    cmr_agent_diags_replaced(d, "shop/B", 1, 7, 12, 10); /* its own diagnosis' bytes: kept */
    assert_int_equal(run_of(d, 7).classes, 2);
    cmr_agent_diags_replaced(d, "shop/B", 1, 0, 12, 11);
    assert_int_equal(run_of(d, 7).state, CMR_DIAG_ACTIVE);
    cmr_agent_diags_replaced(d, "shop/B", 2, 0, 13, 12);
    cmr_diagnosis_run_t r = run_of(d, 7);
    assert_int_equal(r.state, CMR_DIAG_ENDED);
    assert_int_equal(r.end_reason, CMR_DIAG_END_NONE); /* by the CMR */
    assert_true(cmr_agent_diags_take_changed(d));
    char *text = cmr_agent_diags_anchors_text(d);
    assert_string_equal(text, "");
    free(text);
    /* the CMR may start it again (a restarted instrumenter) */
    assert_int_equal(cmr_agent_diags_begin(d, &a, 20, why, sizeof why), 0);
    assert_int_equal(run_of(d, 7).state, CMR_DIAG_ACTIVE);
    cmr_agent_diags_free(d);
}

static void test_bounds_and_conditions(void **state)
{
    (void)state;
    cmr_agent_diags_t *d = cmr_agent_diags_new();
    char why[256];
    cmr_instrumented_method_t m[2];
    /* no restore bytes: refused (the agent could not end it by itself) */
    cmr_diagnosis_scope_t s = {.id = 5, .revision = 1};
    cmr_redefine_t a = command("shop/A", 5, &s, m);
    assert_int_equal(cmr_agent_diags_begin(d, &a, 0, why, sizeof why), -1);
    assert_non_null(strstr(why, "restore"));
    /* over the restore budget: refused */
    static uint8_t big[1];
    cmr_diagnosis_scope_t h = {.id = 6, .revision = 1, .restore_bytecode = {big, CMR_DIAG_RESTORE_BUDGET + 1}};
    cmr_redefine_t hb = command("shop/H", 6, &h, m);
    assert_int_equal(cmr_agent_diags_begin(d, &hb, 0, why, sizeof why), -1);
    assert_non_null(strstr(why, "MiB"));
    /* conditions go to the probe's text; tabs and line ends cannot split it */
    cmr_diag_condition_t conds[2] = {{CMR_DIAG_HTTP_METHOD, "", "POST"},
                                     {CMR_DIAG_HTTP_HEADER, "X-T\tx", "a\nb\xF0\x9F\x98\x80"}};
    cmr_diagnosis_scope_t c = {.id = 0xabc,
                               .revision = 1,
                               .conditions = {conds, 2},
                               .restore_bytecode = {restore_bytes, sizeof restore_bytes}};
    cmr_redefine_t cb = command("shop/C", 0xabc, &c, m);
    assert_int_equal(cmr_agent_diags_begin(d, &cb, 0, why, sizeof why), 0);
    char *text = cmr_agent_diags_anchors_text(d);
    assert_string_equal(text, "64\tabc\t0\t\tPOST\t3\tX-Tx\tab??\n"); /* (an emoji: two UTF-16 units) */
    free(text);
    /* at most CMR_DIAG_MAX_RUNS running at once; an ended run makes room */
    for (int64_t id = 100; id < 100 + CMR_DIAG_MAX_RUNS - 1; id++) {
        cmr_diagnosis_scope_t x = {0};
        cmr_redefine_t xc = command("shop/X", id, &x, m);
        assert_int_equal(cmr_agent_diags_begin(d, &xc, 0, why, sizeof why), 0);
    }
    cmr_diagnosis_scope_t y = {0};
    cmr_redefine_t yc = command("shop/Y", 500, &y, m);
    assert_int_equal(cmr_agent_diags_begin(d, &yc, 0, why, sizeof why), -1);
    assert_non_null(strstr(why, "too many"));
    cmr_agent_diags_ended(d, 100, CMR_DIAG_END_HITS, 1);
    assert_int_equal(cmr_agent_diags_begin(d, &yc, 0, why, sizeof why), 0);
    cmr_agent_diags_free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_start_install_end_by_time),
        cmocka_unit_test(test_hits_and_budget),
        cmocka_unit_test(test_ended_by_cmr_and_started_again),
        cmocka_unit_test(test_bounds_and_conditions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
