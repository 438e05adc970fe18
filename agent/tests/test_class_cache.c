/*
 * test_class_cache.c - the agent's class memory: never-send set, queue with byte budget,
 * in-flight entries that come back on failed delivery, captures, registry, and the
 * original digests that bind a Redefine to a class.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "class_cache.h"

static const uint8_t bytes[100] = {0xCA, 0xFE, 0xBA, 0xBE};

static void test_offer_once_then_never_send(void **state)
{
    (void)state;
    cmr_class_cache_t *c = cmr_class_cache_new(1 << 20);
    assert_true(cmr_class_cache_offer(c, "a/A", 0, 11, NULL, bytes, sizeof bytes, CMR_CLASS_LOADED, 0));
    /* the same bytes in another loader are not queued twice */
    assert_false(cmr_class_cache_offer(c, "a/A", 5, 11, NULL, bytes, sizeof bytes, CMR_CLASS_LOADED, 0));
    assert_true(cmr_class_cache_never_send(c, 11));
    cmr_class_cache_unmark_never_send(c, 11); /* a Redefine with instrumented bytes */
    assert_false(cmr_class_cache_never_send(c, 11));
    assert_true(cmr_class_cache_offer(c, "a/A", 6, 11, NULL, bytes, sizeof bytes, CMR_CLASS_LOADED, 0));
    cmr_class_cache_stats_t st;
    cmr_class_cache_stats(c, &st);
    assert_int_equal(st.seen, 3);
    assert_int_equal(st.queued, 2);
    assert_int_equal(st.skipped, 1);
    assert_int_equal(st.pending, 2);
    uint64_t h;
    assert_true(cmr_class_cache_hash_of(c, "a/A", 5, &h));
    assert_true(h == 11);
    /* load times are remembered per (class, loader) for the redefine latency */
    assert_true(cmr_class_cache_offer(c, "t/T", 2, 99, NULL, bytes, sizeof bytes, CMR_CLASS_LOADED, 123456789));
    assert_int_equal(cmr_class_cache_loaded_ns(c, "t/T", 2), 123456789);
    assert_int_equal(cmr_class_cache_loaded_ns(c, "t/T", 3), 0);
    assert_false(cmr_class_cache_hash_of(c, "a/B", 0, &h));
    cmr_class_cache_free(c, NULL, NULL);
}

static void test_never_send_set_grows_and_deletes(void **state)
{
    (void)state;
    cmr_class_cache_t *c = cmr_class_cache_new(0);
    for (uint64_t h = 1; h <= 20000; h++)
        cmr_class_cache_mark_never_send(c, h * 0x9E3779B97F4A7C15ULL);
    for (uint64_t h = 1; h <= 20000; h += 2)
        cmr_class_cache_unmark_never_send(c, h * 0x9E3779B97F4A7C15ULL);
    for (uint64_t h = 1; h <= 20000; h++)
        assert_int_equal(cmr_class_cache_never_send(c, h * 0x9E3779B97F4A7C15ULL), h % 2 == 0);
    cmr_class_cache_mark_never_send(c, 0);
    assert_true(cmr_class_cache_never_send(c, 0));
    cmr_class_cache_free(c, NULL, NULL);
}

static void test_budget_keeps_names_and_failed_delivery_requeues(void **state)
{
    (void)state;
    cmr_class_cache_t *c = cmr_class_cache_new(250); /* room for two classes' bytes */
    char name[32];
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "p/C%d", i);
        assert_true(cmr_class_cache_offer(c, name, 1, (uint64_t)i + 100, NULL, bytes, sizeof bytes,
                                          CMR_CLASS_LOADED_BEFORE_REGISTRATION, 0));
    }
    cmr_class_cache_stats_t st;
    cmr_class_cache_stats(c, &st);
    assert_int_equal(st.pending, 5);
    assert_int_equal(st.bytes_dropped, 3);
    assert_int_equal(st.buffered_bytes, 200);

    cmr_class_entry_t *e1 = cmr_class_cache_take(c), *e2 = cmr_class_cache_take(c);
    assert_string_equal(e1->name, "p/C0");
    assert_string_equal(e2->name, "p/C1");
    assert_null(cmr_class_cache_take(c)); /* the rest have no bytes */
    cmr_class_cache_delivered(c, e1, true);
    cmr_class_cache_delivered(c, e2, false); /* back in line, nothing lost */
    cmr_class_cache_stats(c, &st);
    assert_int_equal(st.sent, 1);
    assert_int_equal(st.requeued, 1);
    assert_int_equal(st.pending, 4);
    assert_int_equal(st.buffered_bytes, 100);

    /* the byteless ones are captured from the JVM later */
    cmr_class_entry_t *bl[8];
    size_t n = cmr_class_cache_take_byteless(c, bl, 8);
    assert_int_equal(n, 3);
    assert_true(cmr_class_cache_attach_bytes(c, bl[0], 102, NULL, bytes, sizeof bytes));
    cmr_class_cache_drop(c, bl[1]);
    assert_true(cmr_class_cache_attach_bytes(c, bl[2], 104, NULL, bytes, 10));
    cmr_class_cache_stats(c, &st);
    assert_int_equal(st.pending, 3);
    assert_int_equal(st.in_flight, 0);
    int taken = 0;
    cmr_class_entry_t *e;
    while ((e = cmr_class_cache_take(c))) {
        taken++;
        cmr_class_cache_delivered(c, e, true);
    }
    assert_int_equal(taken, 3);
    cmr_class_cache_stats(c, &st);
    assert_int_equal(st.buffered_bytes, 0);
    cmr_class_cache_free(c, NULL, NULL);
}

static void test_unread_classes_get_their_hash_at_capture(void **state)
{
    (void)state;
    cmr_class_cache_t *c = cmr_class_cache_new(1 << 20);
    cmr_class_cache_offer_unread(c, "x/Old", 3, CMR_CLASS_LOADED_BEFORE_REGISTRATION);
    cmr_class_cache_offer_unread(c, "x/Twin", 4, CMR_CLASS_LOADED_BEFORE_REGISTRATION);
    cmr_class_entry_t *bl[4];
    assert_int_equal(cmr_class_cache_take_byteless(c, bl, 4), 2);
    assert_true(cmr_class_cache_attach_bytes(c, bl[0], 77, NULL, bytes, sizeof bytes));
    /* identical bytes already queued: the second is not sent again */
    assert_false(cmr_class_cache_attach_bytes(c, bl[1], 77, NULL, bytes, sizeof bytes));
    uint64_t h;
    assert_true(cmr_class_cache_hash_of(c, "x/Old", 3, &h));
    assert_true(h == 77);
    cmr_class_cache_offer_resend(c, "x/Old", 3, 77, NULL, bytes, sizeof bytes, 555);
    cmr_class_entry_t *e = cmr_class_cache_take(c);
    assert_int_equal(e->cause, CMR_CLASS_LOADED_BEFORE_REGISTRATION);
    cmr_class_cache_delivered(c, e, true);
    e = cmr_class_cache_take(c);
    assert_int_equal(e->cause, CMR_CLASS_RESEND);
    assert_int_equal(e->request_id, 555);
    cmr_class_cache_delivered(c, e, true);
    cmr_class_cache_free(c, NULL, NULL);
}

static bool skip_instrumented(const char *name, int64_t loader_id, void *ud)
{
    (void)loader_id;
    return strcmp(name, (const char *)ud) == 0;
}

/* A CMR that lost ClassLoaded messages asks for every class: each registered class whose
 * hash is known is queued again without bytes (RESEND, whatever the never-send set says),
 * except those the caller leaves out; unread ones are not doubled. */
static void test_requeue_all(void **state)
{
    (void)state;
    cmr_class_cache_t *c = cmr_class_cache_new(1 << 20);
    assert_true(cmr_class_cache_offer(c, "x/A", 0, 11, NULL, bytes, sizeof bytes, CMR_CLASS_LOADED, 1));
    assert_true(cmr_class_cache_offer(c, "x/B", 0, 12, NULL, bytes, sizeof bytes, CMR_CLASS_LOADED, 1));
    assert_true(cmr_class_cache_offer(c, "x/Instrumented", 0, 13, NULL, bytes, sizeof bytes, CMR_CLASS_LOADED, 1));
    for (int i = 0; i < 3; i++) {
        cmr_class_entry_t *e = cmr_class_cache_take(c);
        assert_non_null(e);
        cmr_class_cache_delivered(c, e, true);
    }
    cmr_class_cache_offer_unread(c, "x/Unread", 0, CMR_CLASS_LOADED_BEFORE_REGISTRATION);
    assert_int_equal(cmr_class_cache_requeue_all(c, skip_instrumented, "x/Instrumented", 99), 2);
    cmr_class_entry_t *bl[8];
    size_t n = cmr_class_cache_take_byteless(c, bl, 8);
    assert_int_equal(n, 3); /* x/Unread, x/A, x/B */
    int resend = 0;
    for (size_t i = 0; i < n; i++) {
        if (bl[i]->cause == CMR_CLASS_RESEND) {
            resend++;
            assert_int_equal(bl[i]->request_id, 99);
            assert_true(strcmp(bl[i]->name, "x/Instrumented") != 0);
            /* its hash is in the never-send set, and it is queued all the same */
            assert_true(cmr_class_cache_attach_bytes(c, bl[i], bl[i]->hash, NULL, bytes, sizeof bytes));
        } else {
            cmr_class_cache_drop(c, bl[i]);
        }
    }
    assert_int_equal(resend, 2);
    for (int i = 0; i < 2; i++) {
        cmr_class_entry_t *e = cmr_class_cache_take(c);
        assert_non_null(e);
        assert_int_equal(e->cause, CMR_CLASS_RESEND);
        cmr_class_cache_delivered(c, e, true);
    }
    assert_null(cmr_class_cache_take(c));
    cmr_class_cache_free(c, NULL, NULL);
}

static int released;
static void release(void *handle, void *opaque)
{
    (void)handle;
    (void)opaque;
    released++;
}

typedef struct seen {
    int n;
    int64_t loaders[8];
} seen_t;

static int visit(const char *name, int64_t loader_id, uint64_t hash, const cmr_class_digests_t *digests, void *handle,
                 void *opaque)
{
    (void)name;
    (void)hash;
    (void)digests;
    (void)handle;
    seen_t *s = opaque;
    s->loaders[s->n++] = loader_id;
    return 0;
}

static void test_registry_handles(void **state)
{
    (void)state;
    cmr_class_cache_t *c = cmr_class_cache_new(0);
    int h1, h2, h3;
    assert_null(cmr_class_cache_set_handle(c, "r/R", 1, &h1));
    assert_null(cmr_class_cache_set_handle(c, "r/R", 2, &h2));
    assert_ptr_equal(cmr_class_cache_set_handle(c, "r/R", 1, &h3), &h1);
    for (int i = 0; i < 10000; i++) { /* growth keeps entries findable */
        char name[32];
        snprintf(name, sizeof name, "g/G%d", i);
        cmr_class_cache_set_handle(c, name, i % 7, &h1);
    }
    seen_t s = {0};
    cmr_class_cache_visit(c, "r/R", visit, &s);
    assert_int_equal(s.n, 2);
    assert_int_equal(cmr_class_cache_registered(c), 10002);
    released = 0;
    cmr_class_cache_free(c, release, NULL);
    assert_int_equal(released, 10002);
}

typedef struct named {
    const char *want;
    int n;
    int64_t loader;
} named_t;

static int visit_named(const char *name, int64_t loader_id, uint64_t hash, const cmr_class_digests_t *digests,
                       void *handle, void *opaque)
{
    (void)hash;
    (void)digests;
    (void)handle;
    named_t *s = opaque;
    assert_string_equal(name, s->want);
    s->loader = loader_id;
    return ++s->n == 2 ? 7 : 0; /* stops at the second */
}

/* The registry's key is (loader, name) exactly: names that share a prefix, long names, the
 * bootstrap loader (0) and loaders that differ only in high bits are all distinct. */
static void test_registry_keys_are_exact(void **state)
{
    (void)state;
    cmr_class_cache_t *c = cmr_class_cache_new(1 << 20);
    char long_a[5000], long_b[5000];
    memset(long_a, 'x', sizeof long_a - 1);
    long_a[sizeof long_a - 1] = '\0';
    memcpy(long_b, long_a, sizeof long_b);
    long_b[sizeof long_b - 2] = 'y'; /* differs in its last character only */
    int h;
    assert_true(cmr_class_cache_offer(c, "p/A", 0, 1, NULL, bytes, 4, CMR_CLASS_LOADED, 10));
    assert_true(cmr_class_cache_offer(c, "p/AB", 0, 2, NULL, bytes, 4, CMR_CLASS_LOADED, 20));
    assert_true(cmr_class_cache_offer(c, "p/A", INT64_C(1) << 40, 3, NULL, bytes, 4, CMR_CLASS_LOADED, 30));
    assert_true(cmr_class_cache_offer(c, long_a, 1, 4, NULL, bytes, 4, CMR_CLASS_LOADED, 40));
    assert_true(cmr_class_cache_offer(c, long_b, 1, 5, NULL, bytes, 4, CMR_CLASS_LOADED, 50));
    assert_null(cmr_class_cache_set_handle(c, "p/Handle", 9, &h));
    assert_int_equal(cmr_class_cache_registered(c), 6);
    uint64_t hash = 0;
    assert_true(cmr_class_cache_hash_of(c, "p/A", 0, &hash) && hash == 1);
    assert_true(cmr_class_cache_hash_of(c, "p/AB", 0, &hash) && hash == 2);
    assert_true(cmr_class_cache_hash_of(c, "p/A", INT64_C(1) << 40, &hash) && hash == 3);
    assert_true(cmr_class_cache_hash_of(c, long_a, 1, &hash) && hash == 4);
    assert_true(cmr_class_cache_hash_of(c, long_b, 1, &hash) && hash == 5);
    assert_false(cmr_class_cache_hash_of(c, "p/A", 1, &hash));
    assert_false(cmr_class_cache_hash_of(c, "p/", 0, &hash));
    assert_int_equal(cmr_class_cache_loaded_ns(c, long_b, 1), 50);
    /* a handle alone: registered, but the load hook never offered its bytes */
    assert_true(cmr_class_cache_has_handle(c, "p/Handle", 9));
    assert_false(cmr_class_cache_knows(c, "p/Handle", 9));
    assert_true(cmr_class_cache_knows(c, "p/AB", 0));
    assert_false(cmr_class_cache_has_handle(c, "p/AB", 0));
    /* a visit sees names and loaders as registered, and stops when asked */
    named_t s = {long_b, 0, 0};
    assert_int_equal(cmr_class_cache_visit(c, long_b, visit_named, &s), 0);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.loader, 1);
    s = (named_t){"p/A", 0, 0};
    assert_int_equal(cmr_class_cache_visit(c, "p/A", visit_named, &s), 7);
    assert_int_equal(s.n, 2);
    released = 0;
    cmr_class_cache_free(c, release, NULL);
    assert_int_equal(released, 1);
}

typedef struct digest_seen {
    int n;
    cmr_class_digests_t last;
} digest_seen_t;

static int visit_digest(const char *name, int64_t loader_id, uint64_t hash, const cmr_class_digests_t *digests,
                        void *handle, void *opaque)
{
    (void)name;
    (void)loader_id;
    (void)hash;
    (void)handle;
    digest_seen_t *s = opaque;
    s->n++;
    s->last = *digests;
    return 0;
}

/* The registry keeps the digest of a class's original bytes (from the load hook, or from
 * the first capture of a class loaded before the agent) and that of the latest capture. */
static void test_original_digests(void **state)
{
    (void)state;
    cmr_class_cache_t *c = cmr_class_cache_new(1 << 20);
    uint8_t d1[CMR_TRUST_DIGEST_BYTES], d2[CMR_TRUST_DIGEST_BYTES], got[CMR_TRUST_DIGEST_BYTES];
    cmr_trust_digest(bytes, sizeof bytes, d1);
    cmr_trust_digest(bytes, 10, d2);
    assert_memory_not_equal(d1, d2, sizeof d1);

    /* at load */
    assert_true(cmr_class_cache_offer(c, "d/Loaded", 1, 21, d1, bytes, sizeof bytes, CMR_CLASS_LOADED, 0));
    assert_true(cmr_class_cache_digest_of(c, "d/Loaded", 1, got));
    assert_memory_equal(got, d1, sizeof got);
    assert_false(cmr_class_cache_digest_of(c, "d/Loaded", 2, got));
    /* a resend of other bytes (HotSpot rebuilds them) adds their digest, keeps the original */
    cmr_class_cache_offer_resend(c, "d/Loaded", 1, 22, d2, bytes, 10, 7);
    assert_true(cmr_class_cache_digest_of(c, "d/Loaded", 1, got));
    assert_memory_equal(got, d1, sizeof got);
    digest_seen_t seen = {0};
    cmr_class_cache_visit(c, "d/Loaded", visit_digest, &seen);
    assert_int_equal(seen.last.n, 2);
    assert_memory_equal(seen.last.d[0], d1, sizeof d1);
    assert_memory_equal(seen.last.d[1], d2, sizeof d2);
    /* the same bytes again change nothing; a new load starts over */
    cmr_class_cache_offer_resend(c, "d/Loaded", 1, 21, d1, bytes, sizeof bytes, 8);
    cmr_class_cache_visit(c, "d/Loaded", visit_digest, &seen);
    assert_int_equal(seen.last.n, 2);
    assert_true(cmr_class_cache_offer(c, "d/Loaded", 1, 25, d2, bytes, 10, CMR_CLASS_LOADED, 0));
    cmr_class_cache_visit(c, "d/Loaded", visit_digest, &seen);
    assert_int_equal(seen.last.n, 1);
    assert_memory_equal(seen.last.d[0], d2, sizeof d2);


    /* loaded before the agent: no digest until its bytes are captured */
    cmr_class_cache_offer_unread(c, "d/Early", 3, CMR_CLASS_LOADED_BEFORE_REGISTRATION);
    assert_false(cmr_class_cache_digest_of(c, "d/Early", 3, got));
    int handle;
    assert_null(cmr_class_cache_set_handle(c, "d/Early", 3, &handle));
    seen = (digest_seen_t){0};
    cmr_class_cache_visit(c, "d/Early", visit_digest, &seen);
    assert_int_equal(seen.n, 1);
    assert_int_equal(seen.last.n, 0); /* a Redefine finds no digest to match */
    cmr_class_entry_t *bl[4];
    assert_int_equal(cmr_class_cache_take_byteless(c, bl, 4), 1);
    assert_true(cmr_class_cache_attach_bytes(c, bl[0], 23, d2, bytes, 10));
    assert_true(cmr_class_cache_digest_of(c, "d/Early", 3, got));
    assert_memory_equal(got, d2, sizeof got);
    seen = (digest_seen_t){0};
    cmr_class_cache_visit(c, "d/Early", visit_digest, &seen);
    assert_int_equal(seen.last.n, 1);
    assert_memory_equal(seen.last.d[0], d2, sizeof got);

    /* no digest given (NULL): none recorded */
    assert_true(cmr_class_cache_offer(c, "d/None", 1, 24, NULL, bytes, 4, CMR_CLASS_LOADED, 0));
    assert_false(cmr_class_cache_digest_of(c, "d/None", 1, got));
    cmr_class_cache_free(c, NULL, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_offer_once_then_never_send),
        cmocka_unit_test(test_never_send_set_grows_and_deletes),
        cmocka_unit_test(test_budget_keeps_names_and_failed_delivery_requeues),
        cmocka_unit_test(test_unread_classes_get_their_hash_at_capture),
        cmocka_unit_test(test_requeue_all),
        cmocka_unit_test(test_registry_handles),
        cmocka_unit_test(test_registry_keys_are_exact),
        cmocka_unit_test(test_original_digests),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
