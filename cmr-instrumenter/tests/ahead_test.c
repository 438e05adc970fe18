/*
 * ahead_test.c - classes granted ahead (cmr-instrumenter/src/instr_ahead.c): grants are
 * kept per environment at its latest revision, one per original digest, in the order they
 * were first kept; a newer revision drops the older grants, an older one is not kept; the
 * byte bound holds; the ClassGrants messages carry every class once, in order (the classes
 * JVMs loaded most first), within the message size (a larger class alone) and the bound
 * per JVM, numbered part 1..parts, and decode as they were made; the same bytes signed
 * again are not news unless the held grant is about to expire, and a grant valid for less
 * than an hour is not sent; a record of cmr.grants is kept only for the worker's own key,
 * its class and its bytes; grants near their end are signed again, never one that does not
 * verify under the worker's own key.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmr/clock.h"
#include "cmr/grant.h"
#include "cmr/instr_ahead.h"
#include "cmr/wire.h"
#include "test_keys.h"

static test_keys_t keys;
static cmr_signer_t *signer;

static int setup(void **state)
{
    (void)state;
    if (test_keys_make(&keys) != 0)
        return -1;
    signer = keys.signer;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    test_keys_free(&keys);
    return 0;
}

#define DAY_MS (INT64_C(86400000))

/* Class i of an environment: `size` instrumented bytes, original digest from i, a grant
 * valid for lifetime_ms. */
static int put_for(cmr_instr_ahead_t *x, const char *env, int64_t revision, int i, size_t size, uint8_t fill,
                   int64_t lifetime_ms)
{
    char name[64], err[256];
    snprintf(name, sizeof name, "demo/C%d", i);
    uint8_t orig[CMR_TRUST_DIGEST_BYTES] = {0};
    orig[0] = (uint8_t)i;
    orig[1] = (uint8_t)(i >> 8);
    uint8_t *bytes = malloc(size);
    memset(bytes, fill, size);
    cmr_buf_t g = {0};
    assert_int_equal(cmr_grant_sign(signer, env, revision, name, orig, bytes, size, lifetime_ms, &g, err, sizeof err),
                     0);
    int kept = (int)cmr_instr_ahead_put(x, g.data, g.len, bytes, size);
    cmr_buf_free(&g);
    free(bytes);
    return kept;
}

static int put(cmr_instr_ahead_t *x, const char *env, int64_t revision, int i, size_t size, uint8_t fill)
{
    return put_for(x, env, revision, i, size, fill, 2 * DAY_MS);
}

typedef struct seen {
    int parts, last_part, classes;
    char names[64][16];
    size_t max_bytes, largest_message;
} seen_t;

static int collect(const cmr_class_grants_t *m, void *ud)
{
    seen_t *s = ud;
    assert_int_equal(m->part, s->last_part + 1);
    s->last_part = m->part;
    s->parts = m->parts;
    assert_string_equal(m->environment_id, "shop");
    /* it goes on the wire as it is */
    cmr_buf_t enc = {0};
    char err[256];
    assert_int_equal(cmr_msg_encode(CMR_MSG_CLASS_GRANTS, m, &enc, err, sizeof err), CMR_WIRE_OK);
    cmr_msg_t back;
    assert_int_equal(cmr_msg_decode(enc.data, enc.len, &back, err, sizeof err), CMR_WIRE_OK);
    assert_int_equal(back.u.class_grants.classes.count, m->classes.count);
    cmr_msg_free(&back);
    cmr_buf_free(&enc);
    size_t bytes = 0;
    for (size_t i = 0; i < m->classes.count; i++) {
        const cmr_granted_class_t *c = &m->classes.items[i];
        cmr_grant_t g;
        assert_int_equal(cmr_grant_decode(c->grant.data, c->grant.len, &g), CMR_GRANT_OK);
        assert_string_equal(g.class_name, c->class_name);
        assert_memory_equal(g.original_digest, c->original_digest.data, CMR_TRUST_DIGEST_BYTES);
        snprintf(s->names[s->classes++], sizeof s->names[0], "%s", c->class_name);
        bytes += c->bytecode.len + c->grant.len;
    }
    if (m->classes.count > 1)
        assert_true(bytes <= s->max_bytes);
    if (bytes > s->largest_message)
        s->largest_message = bytes;
    return 0;
}

static void test_order_replacement_and_messages(void **state)
{
    (void)state;
    cmr_instr_ahead_t *x = cmr_instr_ahead_new(1 << 20);
    for (int i = 0; i < 10; i++)
        assert_int_equal(put(x, "shop", 3, i, 1000, 1), 1);
    assert_int_equal(put(x, "shop", 3, 4, 1200, 2), 1); /* C4 again: replaced in its place */
    assert_int_equal(put(x, "billing", 1, 0, 500, 1), 1);
    assert_int_equal(cmr_instr_ahead_count(x, "shop", 3), 10);
    assert_int_equal(cmr_instr_ahead_count(x, "shop", 2), 0);
    assert_int_equal(cmr_instr_ahead_count(x, "billing", 1), 1);
    assert_int_equal(cmr_instr_ahead_count(x, "none", 1), 0);

    /* about three classes per message (each ~1,000 bytes and a grant of ~300) */
    seen_t s = {.max_bytes = 4000};
    size_t sent = 0;
    assert_int_equal(
        cmr_instr_ahead_messages(x, "shop", 3, 42, cmr_wall_ms(), SIZE_MAX, s.max_bytes, collect, &s, &sent), 0);
    assert_int_equal(sent, 10);
    assert_int_equal(s.classes, 10);
    assert_int_equal(s.last_part, s.parts);
    assert_true(s.parts >= 3 && s.parts <= 5);
    for (int i = 0; i < 10; i++) {
        char want[16];
        snprintf(want, sizeof want, "demo/C%d", i);
        assert_string_equal(s.names[i], want);
    }
    /* a message size smaller than a class: one class per message */
    seen_t one = {.max_bytes = 10};
    assert_int_equal(
        cmr_instr_ahead_messages(x, "shop", 3, 42, cmr_wall_ms(), SIZE_MAX, one.max_bytes, collect, &one, NULL), 0);
    assert_int_equal(one.parts, 10);
    /* none for an older revision or an unknown environment */
    seen_t none = {.max_bytes = 4000};
    assert_int_equal(
        cmr_instr_ahead_messages(x, "shop", 2, 42, cmr_wall_ms(), SIZE_MAX, none.max_bytes, collect, &none, NULL), 0);
    assert_int_equal(
        cmr_instr_ahead_messages(x, "none", 3, 42, cmr_wall_ms(), SIZE_MAX, none.max_bytes, collect, &none, NULL), 0);
    assert_int_equal(none.classes, 0);

    cmr_instr_ahead_stats_t st;
    cmr_instr_ahead_stats(x, &st);
    assert_int_equal(st.classes, 11);
    assert_int_equal(st.kept, 12);
    assert_int_equal(st.sets_sent, 2);
    assert_int_equal(st.classes_sent, 20);

    /* classes the JVMs load most go first; with a bound per JVM, only they go */
    for (int k = 0; k < 3; k++)
        cmr_instr_ahead_loaded(x, "shop", "demo/C7");
    cmr_instr_ahead_loaded(x, "shop", "demo/C5");
    cmr_instr_ahead_loaded(x, "billing", "demo/C5"); /* another environment's count */
    cmr_instr_ahead_loaded(x, "shop", "demo/C99");   /* a class not held */
    seen_t hot = {.max_bytes = 4000};
    assert_int_equal(
        cmr_instr_ahead_messages(x, "shop", 3, 42, cmr_wall_ms(), SIZE_MAX, hot.max_bytes, collect, &hot, NULL), 0);
    assert_string_equal(hot.names[0], "demo/C7");
    assert_string_equal(hot.names[1], "demo/C5");
    assert_string_equal(hot.names[2], "demo/C0");
    assert_string_equal(hot.names[9], "demo/C9");
    seen_t capped = {.max_bytes = 4000};
    assert_int_equal(
        cmr_instr_ahead_messages(x, "shop", 3, 42, cmr_wall_ms(), 2700, capped.max_bytes, collect, &capped, &sent), 0);
    assert_int_equal(sent, 2);
    assert_int_equal(capped.classes, 2);
    assert_string_equal(capped.names[0], "demo/C7");
    assert_string_equal(capped.names[1], "demo/C5");
    seen_t tiny = {.max_bytes = 4000};
    assert_int_equal(
        cmr_instr_ahead_messages(x, "shop", 3, 42, cmr_wall_ms(), 1, tiny.max_bytes, collect, &tiny, &sent), 0);
    assert_int_equal(sent, 1); /* at least one class */
    /* a class granted again keeps its count */
    assert_int_equal(put(x, "shop", 3, 7, 900, 3), 1);
    seen_t again = {.max_bytes = 4000};
    assert_int_equal(
        cmr_instr_ahead_messages(x, "shop", 3, 42, cmr_wall_ms(), SIZE_MAX, again.max_bytes, collect, &again, NULL), 0);
    assert_string_equal(again.names[0], "demo/C7");
    cmr_instr_ahead_free(x);
}

static void test_revisions_and_bound(void **state)
{
    (void)state;
    cmr_instr_ahead_t *x = cmr_instr_ahead_new(5000);
    assert_int_equal(put(x, "shop", 3, 0, 1000, 1), 1);
    assert_int_equal(put(x, "shop", 3, 1, 1000, 1), 1);
    assert_int_equal(put(x, "shop", 2, 2, 1000, 1), 0); /* older revision: not kept */
    assert_int_equal(put(x, "shop", 4, 3, 1000, 1), 1); /* newer: the older grants go */
    assert_int_equal(cmr_instr_ahead_count(x, "shop", 3), 0);
    assert_int_equal(cmr_instr_ahead_count(x, "shop", 4), 1);
    cmr_instr_ahead_stats_t st;
    cmr_instr_ahead_stats(x, &st);
    assert_int_equal(st.stale, 1);
    assert_int_equal(st.classes, 1);
    /* the bound: ~1,300 bytes a class, 5,000 bytes in all */
    int kept = 0;
    for (int i = 10; i < 20; i++)
        kept += put(x, "shop", 4, i, 1000, 1);
    cmr_instr_ahead_stats(x, &st);
    assert_true(kept >= 1 && kept <= 3);
    assert_true(st.bytes <= 5000);
    assert_int_equal(st.over_budget, (uint64_t)(10 - kept));
    /* malformed grants are not kept */
    uint8_t junk[40] = {0}, bytes[10] = {0};
    assert_int_equal(cmr_instr_ahead_put(x, junk, sizeof junk, bytes, sizeof bytes), CMR_INSTR_AHEAD_NOT_KEPT);
    cmr_instr_ahead_free(x);

    cmr_instr_ahead_t *off = cmr_instr_ahead_new(0);
    assert_int_equal(put(off, "shop", 1, 0, 100, 1), 0);
    cmr_instr_ahead_free(off);
}

static void test_same_renewed_and_expiring(void **state)
{
    (void)state;
    cmr_instr_ahead_t *x = cmr_instr_ahead_new(1 << 20);
    assert_int_equal(put(x, "shop", 1, 0, 500, 1), CMR_INSTR_AHEAD_KEPT);
    /* the same bytes signed again while the held grant has days left: nothing to publish */
    assert_int_equal(put(x, "shop", 1, 0, 500, 1), CMR_INSTR_AHEAD_SAME);
    /* other bytes for the class: kept, to be published */
    assert_int_equal(put(x, "shop", 1, 0, 500, 2), CMR_INSTR_AHEAD_KEPT);
    /* a held grant with less than a day left is renewed */
    assert_int_equal(put_for(x, "shop", 1, 1, 500, 1, DAY_MS / 2), CMR_INSTR_AHEAD_KEPT);
    assert_int_equal(put_for(x, "shop", 1, 1, 500, 1, 2 * DAY_MS), CMR_INSTR_AHEAD_KEPT);
    assert_int_equal(put_for(x, "shop", 1, 1, 500, 1, 2 * DAY_MS), CMR_INSTR_AHEAD_SAME);
    /* a grant valid for less than an hour is held but never sent */
    assert_int_equal(put_for(x, "shop", 1, 2, 500, 1, 30 * 60 * 1000), CMR_INSTR_AHEAD_KEPT);
    assert_int_equal(cmr_instr_ahead_count(x, "shop", 1), 3);
    seen_t s = {.max_bytes = 1 << 20};
    size_t sent = 0;
    assert_int_equal(
        cmr_instr_ahead_messages(x, "shop", 1, 42, cmr_wall_ms(), SIZE_MAX, s.max_bytes, collect, &s, &sent), 0);
    assert_int_equal(sent, 2);
    assert_string_equal(s.names[0], "demo/C0");
    assert_string_equal(s.names[1], "demo/C1");
    cmr_instr_ahead_free(x);
}

typedef struct renewals {
    int n;
    char names[8][16];
} renewals_t;

static void note_renewed(const char *name, const uint8_t original_digest[32], const cmr_bytes_t *grant,
                         const cmr_bytes_t *bytes, void *ud)
{
    renewals_t *r = ud;
    cmr_grant_t g;
    assert_int_equal(cmr_grant_decode(grant->data, grant->len, &g), CMR_GRANT_OK);
    assert_string_equal(g.class_name, name);
    assert_memory_equal(g.original_digest, original_digest, CMR_TRUST_DIGEST_BYTES);
    uint8_t d[CMR_TRUST_DIGEST_BYTES];
    cmr_trust_digest(bytes->data, bytes->len, d);
    assert_memory_equal(g.instrumented_digest, d, sizeof d);
    assert_true(g.not_after_ms - cmr_wall_ms() > 6 * DAY_MS);
    snprintf(r->names[r->n++], sizeof r->names[0], "%s", name);
}

/* Renewal: the grants with less than a day left (expired ones too) are signed again for
 * the same bytes, the most loaded first, up to `max`, and then sent again; one that does
 * not verify under the worker's own key (its id, a bad signature) is dropped, never
 * signed. */
static void test_renewal(void **state)
{
    (void)state;
    char err[256];
    cmr_verifier_t *own = cmr_verifier_new("cmr-instrumenter", NULL);
    assert_int_equal(cmr_verifier_add_signer(own, signer, err, sizeof err), 0);
    cmr_instr_ahead_t *x = cmr_instr_ahead_new(1 << 20);
    assert_int_equal(put(x, "shop", 1, 0, 500, 1), CMR_INSTR_AHEAD_KEPT);                      /* 2 days */
    assert_int_equal(put_for(x, "shop", 1, 1, 500, 1, DAY_MS / 2), CMR_INSTR_AHEAD_KEPT);      /* 12 h */
    assert_int_equal(put_for(x, "shop", 1, 2, 500, 1, 2 * 3600 * 1000), CMR_INSTR_AHEAD_KEPT); /* 2 h */
    assert_int_equal(put_for(x, "shop", 1, 3, 500, 1, 1), CMR_INSTR_AHEAD_KEPT);               /* expired */
    /* class 4: this key's id, a bad signature (a forged record of cmr.grants) */
    uint8_t orig[CMR_TRUST_DIGEST_BYTES] = {4}, bytes[500];
    memset(bytes, 1, sizeof bytes);
    cmr_buf_t forged = {0};
    assert_int_equal(
        cmr_grant_sign(signer, "shop", 1, "demo/C4", orig, bytes, sizeof bytes, 3600 * 1000, &forged, err, sizeof err),
        0);
    forged.data[forged.len - 1] ^= 1;
    assert_int_equal(cmr_instr_ahead_put(x, forged.data, forged.len, bytes, sizeof bytes), CMR_INSTR_AHEAD_KEPT);
    cmr_buf_free(&forged);
    cmr_instr_ahead_loaded(x, "shop", "demo/C2");
    usleep(2000); /* class 3 expired */

    /* none for another revision or environment, or without the keys */
    renewals_t r = {0};
    int64_t now = cmr_wall_ms();
    assert_int_equal(cmr_instr_ahead_renew(x, "shop", 2, now, 10, own, signer, 7 * DAY_MS, note_renewed, &r, NULL), 0);
    assert_int_equal(cmr_instr_ahead_renew(x, "none", 1, now, 10, own, signer, 7 * DAY_MS, note_renewed, &r, NULL), 0);
    assert_int_equal(cmr_instr_ahead_renew(x, "shop", 1, now, 10, NULL, signer, 7 * DAY_MS, note_renewed, &r, NULL), 0);
    /* one at a time: the most loaded first */
    assert_int_equal(cmr_instr_ahead_renew(x, "shop", 1, now, 1, own, signer, 7 * DAY_MS, note_renewed, &r, NULL), 1);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.names[0], "demo/C2");
    /* the rest: classes 1 and 3 renewed, the forged one dropped, class 0 not due */
    size_t dropped = 0;
    assert_int_equal(cmr_instr_ahead_renew(x, "shop", 1, now, 10, own, signer, 7 * DAY_MS, note_renewed, &r, &dropped),
                     2);
    assert_int_equal(dropped, 1);
    assert_int_equal(r.n, 3);
    assert_string_equal(r.names[1], "demo/C1");
    assert_string_equal(r.names[2], "demo/C3");
    cmr_instr_ahead_stats_t st;
    cmr_instr_ahead_stats(x, &st);
    assert_int_equal(st.renewed, 3);
    assert_int_equal(st.renew_refused, 1);
    assert_int_equal(st.classes, 4);
    assert_int_equal(cmr_instr_ahead_count(x, "shop", 1), 4);
    /* nothing due any more */
    assert_int_equal(cmr_instr_ahead_renew(x, "shop", 1, now, 10, own, signer, 7 * DAY_MS, note_renewed, &r, NULL), 0);

    /* 20 h on, every class is still sent (class 0 had 2 days), in its order, C2 first */
    seen_t s = {.max_bytes = 1 << 20};
    size_t sent = 0;
    assert_int_equal(
        cmr_instr_ahead_messages(x, "shop", 1, 42, now + 20 * 3600 * 1000, SIZE_MAX, s.max_bytes, collect, &s, &sent),
        0);
    assert_int_equal(sent, 4);
    assert_string_equal(s.names[0], "demo/C2");
    assert_string_equal(s.names[1], "demo/C0");
    assert_string_equal(s.names[2], "demo/C1");
    assert_string_equal(s.names[3], "demo/C3");
    /* what the agent checks: each grant verifies, for its class and bytes */
    cmr_instr_ahead_free(x);
    cmr_verifier_free(own);
}

/* A cmr.grants record of one class: kept only when its grant is of the worker's key and
 * names that class, its original digest and the digest of its bytes. */
static void test_records_of_the_topic_are_checked(void **state)
{
    (void)state;
    char err[256];
    uint8_t orig[CMR_TRUST_DIGEST_BYTES] = {7}, other_orig[CMR_TRUST_DIGEST_BYTES] = {8};
    uint8_t bytes[300], other_bytes[300];
    memset(bytes, 1, sizeof bytes);
    memset(other_bytes, 2, sizeof other_bytes);
    cmr_buf_t g = {0}, foreign = {0};
    assert_int_equal(
        cmr_grant_sign(signer, "shop", 1, "demo/C", orig, bytes, sizeof bytes, 2 * DAY_MS, &g, err, sizeof err), 0);
    test_keys_t stranger;
    assert_int_equal(test_keys_make(&stranger), 0);
    assert_int_equal(cmr_grant_sign(stranger.signer, "shop", 1, "demo/C", orig, bytes, sizeof bytes, 2 * DAY_MS,
                                    &foreign, err, sizeof err),
                     0);
    const char *key = cmr_signer_key_id(signer);
    cmr_granted_class_t c = {"demo/C", {orig, sizeof orig}, {g.data, g.len}, {bytes, sizeof bytes}};
    cmr_msg_t m = {.type = CMR_MSG_CLASS_GRANTS};
    m.u.class_grants.classes.items = &c;
    m.u.class_grants.classes.count = 1;
    assert_null(cmr_instr_ahead_record_refusal(&m, key));

    cmr_granted_class_t bad = c;
    bad.grant = (cmr_bytes_t){foreign.data, foreign.len};
    m.u.class_grants.classes.items = &bad;
    assert_string_equal(cmr_instr_ahead_record_refusal(&m, key), "signed by another key");
    bad = c;
    bad.class_name = "demo/Other";
    assert_string_equal(cmr_instr_ahead_record_refusal(&m, key), "grant for another class");
    bad = c;
    bad.original_digest = (cmr_bytes_t){other_orig, sizeof other_orig};
    assert_string_equal(cmr_instr_ahead_record_refusal(&m, key), "grant for another class");
    bad.original_digest = (cmr_bytes_t){orig, 16};
    assert_string_equal(cmr_instr_ahead_record_refusal(&m, key), "grant for another class");
    bad = c;
    bad.bytecode = (cmr_bytes_t){other_bytes, sizeof other_bytes};
    assert_string_equal(cmr_instr_ahead_record_refusal(&m, key), "bytes do not match the grant");
    bad = c;
    bad.grant = (cmr_bytes_t){g.data, g.len / 2};
    assert_string_equal(cmr_instr_ahead_record_refusal(&m, key), "malformed grant");
    m.u.class_grants.classes.count = 2; /* (items[1] is not read) */
    assert_string_equal(cmr_instr_ahead_record_refusal(&m, key), "not a ClassGrants of one class");
    m.u.class_grants.classes.count = 1;
    m.type = CMR_MSG_REDEFINE;
    assert_string_equal(cmr_instr_ahead_record_refusal(&m, key), "not a ClassGrants of one class");

    test_keys_free(&stranger);
    cmr_buf_free(&g);
    cmr_buf_free(&foreign);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_replacement_and_messages),
        cmocka_unit_test(test_revisions_and_bound),
        cmocka_unit_test(test_same_renewed_and_expiring),
        cmocka_unit_test(test_records_of_the_topic_are_checked),
        cmocka_unit_test(test_renewal),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
