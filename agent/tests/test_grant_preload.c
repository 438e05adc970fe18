/*
 * test_grant_preload.c - classes granted ahead of their load (agent/src/grant_preload.c):
 * a class is kept only when its grant verifies for the agent's environment, its class name,
 * its original digest and its instrumented bytes, under a pinned key and within its
 * validity; a lookup hands it out only to a load of those original bytes under that name;
 * a new environment drops everything; the byte bound holds; a class granted again replaces
 * the one held; an expired grant is dropped at lookup; trimming drops only the classes no
 * load used; the copy for the disk cache is the grant and the bytes as received.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/clock.h"
#include "cmr/grant.h"
#include "grant_preload.h"
#include "test_keys.h"

#define DAY_MS INT64_C(86400000)

static test_keys_t keys, other; /* the pinned key, and one the agent does not pin */
static cmr_signer_t *signer, *other_signer;
static cmr_verifier_t *verifier;
static const uint8_t original[] = {0xCA, 0xFE, 0xBA, 0xBE, 0, 0, 0, 55, 1, 2, 3};
static const uint8_t instrumented[] = {0xCA, 0xFE, 0xBA, 0xBE, 0, 0, 0, 55, 9, 9, 9, 9};
static const uint8_t instrumented2[] = {0xCA, 0xFE, 0xBA, 0xBE, 0, 0, 0, 55, 8, 8, 8, 8, 8};
static uint8_t orig_digest[CMR_TRUST_DIGEST_BYTES], instr_digest[CMR_TRUST_DIGEST_BYTES];

static int setup(void **state)
{
    (void)state;
    if (test_keys_make(&keys) != 0 || test_keys_make(&other) != 0)
        return -1;
    signer = keys.signer;
    verifier = keys.verifier;
    other_signer = other.signer;
    cmr_trust_digest(original, sizeof original, orig_digest);
    cmr_trust_digest(instrumented, sizeof instrumented, instr_digest);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    test_keys_free(&keys);
    test_keys_free(&other);
    return 0;
}

static void sign_for(const cmr_signer_t *s, const char *env, const char *name, const uint8_t *bytes, size_t len,
                     int64_t lifetime_ms, cmr_buf_t *out)
{
    char err[256];
    assert_int_equal(cmr_grant_sign(s, env, 7, name, orig_digest, bytes, len, lifetime_ms, out, err, sizeof err), 0);
}

static cmr_grant_preload_add_t add(cmr_grant_preload_t *p, const cmr_buf_t *g, const char *name, const uint8_t *bytes,
                                   size_t len, cmr_grant_verdict_t *why)
{
    return cmr_grant_preload_add(p, name, orig_digest, sizeof orig_digest, g->data, g->len, bytes, len, cmr_wall_ms(),
                                 why);
}

/* Looks demo/Work up with the original digest; true on a hit, whose bytes must be `want`. */
static bool served(cmr_grant_preload_t *p, const char *name, const uint8_t *want, size_t want_len, int64_t now)
{
    uint8_t *bytes = NULL, applied[CMR_TRUST_DIGEST_BYTES];
    size_t len = 0;
    int64_t revision = 0;
    if (!cmr_grant_preload_lookup(p, name, orig_digest, now, &bytes, &len, applied, &revision))
        return false;
    assert_int_equal(len, want_len);
    assert_memory_equal(bytes, want, len);
    uint8_t d[CMR_TRUST_DIGEST_BYTES];
    cmr_trust_digest(want, want_len, d);
    assert_memory_equal(applied, d, sizeof d);
    assert_int_equal(revision, 7);
    free(bytes);
    return true;
}

/* A set for environment "shop" holding demo/Work, granted by the pinned key (*g). */
static cmr_grant_preload_t *set_with_work(cmr_buf_t *g)
{
    cmr_grant_preload_t *p = cmr_grant_preload_new(verifier, 1 << 20);
    cmr_grant_preload_expect(p, "shop");
    sign_for(signer, "shop", "demo/Work", instrumented, sizeof instrumented, DAY_MS, g);
    cmr_grant_verdict_t why;
    assert_int_equal(add(p, g, "demo/Work", instrumented, sizeof instrumented, &why), CMR_GRANT_PRELOAD_KEPT);
    assert_int_equal(why, CMR_GRANT_OK);
    return p;
}

static void test_verified_class_is_served_to_its_load_only(void **state)
{
    (void)state;
    cmr_buf_t g = {0};
    cmr_grant_preload_t *p = set_with_work(&g);
    int64_t now = cmr_wall_ms();
    assert_true(served(p, "demo/Work", instrumented, sizeof instrumented, now));
    assert_false(served(p, "demo/Other", instrumented, sizeof instrumented, now)); /* another class name */
    uint8_t *bytes = NULL, applied[CMR_TRUST_DIGEST_BYTES];
    size_t len;
    int64_t rev;
    assert_false(cmr_grant_preload_lookup(p, "demo/Work", instr_digest, now, &bytes, &len, applied, &rev));
    assert_null(bytes); /* other original bytes */

    /* the copy for the disk cache: the grant and bytes as received */
    uint8_t *gc = NULL, *bc = NULL;
    size_t gl = 0, bl = 0;
    assert_true(cmr_grant_preload_copy(p, orig_digest, &gc, &gl, &bc, &bl));
    assert_int_equal(gl, g.len);
    assert_memory_equal(gc, g.data, gl);
    assert_int_equal(bl, sizeof instrumented);
    assert_memory_equal(bc, instrumented, bl);
    free(gc);
    free(bc);
    assert_false(cmr_grant_preload_copy(p, instr_digest, &gc, &gl, &bc, &bl));

    cmr_grant_preload_stats_t st;
    cmr_grant_preload_stats(p, &st);
    assert_int_equal(st.received, 1);
    assert_int_equal(st.kept, 1);
    assert_int_equal(st.hits, 1);
    assert_int_equal(st.classes, 1);
    assert_int_equal(st.bytes, sizeof instrumented);

    /* the expired grant is dropped at lookup */
    assert_false(served(p, "demo/Work", instrumented, sizeof instrumented, now + 2 * DAY_MS));
    cmr_grant_preload_stats(p, &st);
    assert_int_equal(st.expired, 1);
    assert_int_equal(st.classes, 0);
    assert_false(served(p, "demo/Work", instrumented, sizeof instrumented, now));
    cmr_buf_free(&g);
    cmr_grant_preload_free(p);
}

static void test_refusals(void **state)
{
    (void)state;
    cmr_grant_preload_t *p = cmr_grant_preload_new(verifier, 1 << 20);
    cmr_buf_t g = {0}, other_env = {0}, other_key = {0};
    sign_for(signer, "shop", "demo/Work", instrumented, sizeof instrumented, DAY_MS, &g);
    sign_for(signer, "billing", "demo/Work", instrumented, sizeof instrumented, DAY_MS, &other_env);
    sign_for(other_signer, "shop", "demo/Work", instrumented, sizeof instrumented, DAY_MS, &other_key);
    cmr_grant_verdict_t why;
    /* not configured yet: nothing is kept */
    assert_int_equal(add(p, &g, "demo/Work", instrumented, sizeof instrumented, &why), CMR_GRANT_PRELOAD_REFUSED);
    assert_int_equal(why, CMR_GRANT_WRONG_ENVIRONMENT);
    cmr_grant_preload_expect(p, "shop");
    assert_int_equal(add(p, &other_env, "demo/Work", instrumented, sizeof instrumented, &why),
                     CMR_GRANT_PRELOAD_REFUSED);
    assert_int_equal(why, CMR_GRANT_WRONG_ENVIRONMENT);
    assert_int_equal(add(p, &other_key, "demo/Work", instrumented, sizeof instrumented, &why),
                     CMR_GRANT_PRELOAD_REFUSED);
    assert_int_equal(why, CMR_GRANT_UNKNOWN_KEY);
    assert_int_equal(add(p, &g, "demo/Other", instrumented, sizeof instrumented, &why), CMR_GRANT_PRELOAD_REFUSED);
    assert_int_equal(why, CMR_GRANT_WRONG_CLASS);
    assert_int_equal(add(p, &g, "demo/Work", instrumented2, sizeof instrumented2, &why), CMR_GRANT_PRELOAD_REFUSED);
    assert_int_equal(why, CMR_GRANT_BYTES_MISMATCH);
    g.data[g.len / 2] ^= 1;
    assert_int_equal(add(p, &g, "demo/Work", instrumented, sizeof instrumented, &why), CMR_GRANT_PRELOAD_REFUSED);
    assert_int_not_equal(why, CMR_GRANT_OK);
    assert_int_equal(cmr_grant_preload_add(p, "demo/Work", orig_digest, sizeof orig_digest, g.data, g.len / 2,
                                           instrumented, sizeof instrumented, cmr_wall_ms(), &why),
                     CMR_GRANT_PRELOAD_REFUSED);
    assert_int_equal(why, CMR_GRANT_MALFORMED);
    g.data[g.len / 2] ^= 1;
    cmr_grant_preload_stats_t st;
    cmr_grant_preload_stats(p, &st);
    assert_int_equal(st.received, 7);
    assert_int_equal(st.refused, 7);
    assert_int_equal(st.refusals[CMR_GRANT_WRONG_ENVIRONMENT], 2);
    assert_int_equal(st.classes, 0);
    assert_false(served(p, "demo/Work", instrumented, sizeof instrumented, cmr_wall_ms()));
    /* an original digest that is not 32 bytes: refused and counted like the others */
    assert_int_equal(cmr_grant_preload_add(p, "demo/Work", orig_digest, 16, g.data, g.len, instrumented,
                                           sizeof instrumented, cmr_wall_ms(), &why),
                     CMR_GRANT_PRELOAD_REFUSED);
    assert_int_equal(why, CMR_GRANT_MALFORMED);
    cmr_grant_preload_stats(p, &st);
    assert_int_equal(st.received, 8);
    assert_int_equal(st.refused, 8);
    cmr_buf_free(&g);
    cmr_buf_free(&other_env);
    cmr_buf_free(&other_key);
    cmr_grant_preload_free(p);
}

static void test_environment_change_bound_and_replacement(void **state)
{
    (void)state;
    cmr_grant_preload_t *p = cmr_grant_preload_new(verifier, sizeof instrumented2);
    cmr_grant_preload_expect(p, "shop");
    cmr_buf_t g = {0}, g2 = {0};
    sign_for(signer, "shop", "demo/Work", instrumented, sizeof instrumented, DAY_MS, &g);
    sign_for(signer, "shop", "demo/Work", instrumented2, sizeof instrumented2, DAY_MS, &g2);
    cmr_grant_verdict_t why;
    assert_int_equal(add(p, &g, "demo/Work", instrumented, sizeof instrumented, &why), CMR_GRANT_PRELOAD_KEPT);
    /* granted again with other bytes: replaces the first (the bound counts it once) */
    assert_int_equal(add(p, &g2, "demo/Work", instrumented2, sizeof instrumented2, &why), CMR_GRANT_PRELOAD_KEPT);
    assert_true(served(p, "demo/Work", instrumented2, sizeof instrumented2, cmr_wall_ms()));
    cmr_grant_preload_stats_t st;
    cmr_grant_preload_stats(p, &st);
    assert_int_equal(st.classes, 1);
    assert_int_equal(st.bytes, sizeof instrumented2);

    /* the same environment again changes nothing; another drops everything */
    cmr_grant_preload_expect(p, "shop");
    assert_true(served(p, "demo/Work", instrumented2, sizeof instrumented2, cmr_wall_ms()));
    cmr_grant_preload_expect(p, "billing");
    assert_false(served(p, "demo/Work", instrumented2, sizeof instrumented2, cmr_wall_ms()));
    cmr_grant_preload_stats(p, &st);
    assert_int_equal(st.classes, 0);
    assert_int_equal(st.bytes, 0);

    /* the bound: a class larger than what is left is not kept */
    cmr_grant_preload_t *none = cmr_grant_preload_new(verifier, sizeof instrumented - 1);
    cmr_grant_preload_expect(none, "shop");
    assert_int_equal(add(none, &g, "demo/Work", instrumented, sizeof instrumented, &why),
                     CMR_GRANT_PRELOAD_OVER_BUDGET);
    assert_int_equal(why, CMR_GRANT_OK);
    cmr_grant_preload_stats(none, &st);
    assert_int_equal(st.over_budget, 1);
    assert_int_equal(st.classes, 0);
    cmr_grant_preload_free(none);
    cmr_buf_free(&g);
    cmr_buf_free(&g2);
    cmr_grant_preload_free(p);
}

static void test_trim_drops_only_unused(void **state)
{
    (void)state;
    cmr_buf_t g = {0};
    cmr_grant_preload_t *p = set_with_work(&g);
    cmr_grant_verdict_t why;
    assert_int_equal(cmr_grant_preload_trim(p), 1); /* never loaded */
    assert_false(served(p, "demo/Work", instrumented, sizeof instrumented, cmr_wall_ms()));
    assert_int_equal(add(p, &g, "demo/Work", instrumented, sizeof instrumented, &why), CMR_GRANT_PRELOAD_KEPT);
    assert_true(served(p, "demo/Work", instrumented, sizeof instrumented, cmr_wall_ms()));
    assert_int_equal(cmr_grant_preload_trim(p), 0); /* loaded: kept for a retransform */
    assert_true(served(p, "demo/Work", instrumented, sizeof instrumented, cmr_wall_ms()));
    cmr_grant_preload_stats_t st;
    cmr_grant_preload_stats(p, &st);
    assert_int_equal(st.trimmed, 1);
    assert_int_equal(st.classes, 1);
    cmr_buf_free(&g);
    cmr_grant_preload_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verified_class_is_served_to_its_load_only),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_environment_change_bound_and_replacement),
        cmocka_unit_test(test_trim_drops_only_unused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
