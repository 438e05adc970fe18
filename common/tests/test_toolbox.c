/*
 * test_toolbox.c - unit tests of the toolbox (cmr_base): buffers and array growth, hash
 * maps (against a reference model under random inserts and deletes), byte order, clocks,
 * JSON output from untrusted strings and the work pool (every job of a round once).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cmr/buf.h"
#include "cmr/bytes.h"
#include "cmr/clock.h"
#include "cmr/json.h"
#include "cmr/log.h"
#include "cmr/map.h"
#include "cmr/utf8.h"
#include "cmr/workpool.h"

/* --- buf ---------------------------------------------------------------------------- */

static void test_buf_appends_and_terminates(void **state)
{
    (void)state;
    cmr_buf_t b = {0};
    assert_string_equal(cmr_buf_str(&b), "");
    cmr_buf_puts(&b, "ab");
    cmr_buf_putc(&b, 'c');
    cmr_buf_printf(&b, "-%d-%s", 42, "x");
    assert_int_equal(b.len, 8);
    assert_string_equal(cmr_buf_str(&b), "abc-42-x");
    /* Grows far past its first capacity, keeping everything. */
    for (int i = 0; i < 10000; i++)
        cmr_buf_putc(&b, (char)('a' + i % 26));
    assert_int_equal(b.len, 10008);
    assert_int_equal(b.data[b.len], '\0');
    assert_int_equal(b.data[8], 'a');
    assert_int_equal(b.data[10007], 'a' + 9999 % 26);
    cmr_buf_truncate(&b, 3);
    assert_string_equal(cmr_buf_str(&b), "abc");
    cmr_buf_reset(&b);
    assert_int_equal(b.len, 0);
    assert_true(b.cap > 0);
    char *s = (cmr_buf_puts(&b, "kept"), cmr_buf_take(&b));
    assert_string_equal(s, "kept");
    free(s);
    assert_null(b.data);
    s = cmr_buf_take(&b);
    assert_string_equal(s, "");
    free(s);
    cmr_buf_free(&b);
}

static void test_buf_binary_and_big_endian(void **state)
{
    (void)state;
    cmr_buf_t b = {0};
    cmr_buf_put(&b, "\0\1", 2);
    cmr_buf_put_be16(&b, 0x0102);
    cmr_buf_put_be32(&b, 0x03040506);
    cmr_buf_put_be64(&b, 0x0708090a0b0c0d0eULL);
    uint8_t *at = cmr_buf_append(&b, 3);
    assert_non_null(at);
    assert_memory_equal(at, "\0\0\0", 3);
    at[1] = 0xff;
    static const uint8_t want[] = {0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0, 0xff, 0};
    assert_int_equal(b.len, sizeof want);
    assert_memory_equal(b.data, want, sizeof want);
    cmr_buf_free(&b);
}

static void test_buf_oom_is_sticky(void **state)
{
    (void)state;
    cmr_buf_t b = {0};
    cmr_buf_puts(&b, "abc");
    /* A size that cannot be allocated sets oom; later appends are no-ops. */
    assert_false(cmr_buf_reserve(&b, SIZE_MAX - 2));
    assert_false(cmr_buf_ok(&b));
    cmr_buf_puts(&b, "def");
    assert_int_equal(b.len, 3);
    assert_null(cmr_buf_take(&b)); /* incomplete content is never handed out */
    cmr_buf_free(&b);
}

static void test_array_grow(void **state)
{
    (void)state;
    struct {
        uint64_t *items;
        size_t count, cap;
    } v = {0};
    for (uint64_t i = 0; i < 1000; i++) {
        assert_int_equal(CMR_ARRAY_GROW(v.items, v.cap, v.count + 1), 0);
        v.items[v.count++] = i * 3;
    }
    assert_true(v.cap >= 1000);
    for (uint64_t i = 0; i < 1000; i++)
        assert_int_equal(v.items[i], i * 3);
    size_t cap = v.cap;
    uint64_t *items = v.items;
    /* Overflowing sizes fail and leave the array as it was. */
    assert_int_equal(cmr_array_grow(&v.items, &v.cap, SIZE_MAX / 4, sizeof *v.items, 8), -1);
    assert_int_equal(v.cap, cap);
    assert_ptr_equal(v.items, items);
    assert_int_equal(cmr_array_grow(&v.items, &v.cap, cap, sizeof *v.items, 8), 0); /* fits: no-op */
    free(v.items);
}

/* --- map ---------------------------------------------------------------------------- */

/* Reference model: a plain array of (key, value, present). */
#define MODEL_KEYS 512

/* cmr_u64map_reserve makes room once: inserts up to the count reserved keep the table (no
 * resize), entries already in it stay, and the next insert beyond grows it as before. */
static void test_u64map_reserve(void **state)
{
    (void)state;
    cmr_u64map_t m = {0};
    assert_int_equal(cmr_u64map_put(&m, 7, (void *)1), 0);
    assert_int_equal(cmr_u64map_reserve(&m, 44), 0);
    assert_int_equal(m.cap, 64);
    const cmr_u64map_slot_t *slots = m.slots;
    for (uint64_t k = 100; k < 143; k++) /* 43 more: 44 in all */
        assert_int_equal(cmr_u64map_put(&m, k << 40, (void *)(uintptr_t)k), 0);
    assert_ptr_equal(m.slots, slots);
    assert_int_equal((uintptr_t)cmr_u64map_get(&m, 7), 1);
    assert_int_equal((uintptr_t)cmr_u64map_get(&m, 142ull << 40), 142);
    assert_int_equal(cmr_u64map_reserve(&m, 10), 0); /* fewer than it holds: unchanged */
    assert_ptr_equal(m.slots, slots);
    assert_int_equal(cmr_u64map_put(&m, 1, (void *)2), 0); /* the 45th grows it */
    assert_int_equal(m.cap, 128);
    assert_int_equal(cmr_u64map_count(&m), 45);
    cmr_u64map_free(&m);
}

static void test_u64map_against_model(void **state)
{
    (void)state;
    cmr_u64map_t m = {0};
    uint64_t keys[MODEL_KEYS];
    uintptr_t vals[MODEL_KEYS];
    bool present[MODEL_KEYS] = {false};
    size_t live = 0;
    srand(7);
    for (size_t i = 0; i < MODEL_KEYS; i++) /* 0, small numbers, and keys differing in high bits */
        keys[i] = i < 3 ? i : (i % 2 ? (uint64_t)i << 40 : ((uint64_t)rand() << 32 | (unsigned)rand()));
    for (int step = 0; step < 200000; step++) {
        size_t k = (size_t)rand() % MODEL_KEYS;
        int op = rand() % 3;
        if (op < 2) {
            uintptr_t v = (uintptr_t)step + 1;
            assert_int_equal(cmr_u64map_put(&m, keys[k], (void *)v), 0);
            live += !present[k];
            present[k] = true;
            vals[k] = v;
        } else {
            void *old = NULL;
            bool was = cmr_u64map_del(&m, keys[k], &old);
            assert_int_equal(was, present[k]);
            if (was)
                assert_int_equal((uintptr_t)old, vals[k]);
            live -= present[k];
            present[k] = false;
        }
        if (step % 997 == 0) {
            assert_int_equal(cmr_u64map_count(&m), live);
            for (size_t i = 0; i < MODEL_KEYS; i++) {
                assert_int_equal(cmr_u64map_has(&m, keys[i]), present[i]);
                if (present[i])
                    assert_int_equal((uintptr_t)cmr_u64map_get(&m, keys[i]), vals[i]);
            }
        }
    }
    /* Iteration visits every live entry exactly once. */
    size_t it = 0, seen = 0;
    uint64_t key;
    void *val;
    while (cmr_u64map_next(&m, &it, &key, &val)) {
        size_t i = 0;
        while (keys[i] != key)
            i++;
        assert_true(present[i]);
        assert_int_equal((uintptr_t)val, vals[i]);
        seen++;
    }
    assert_int_equal(seen, live);
    cmr_u64map_clear(&m);
    assert_int_equal(cmr_u64map_count(&m), 0);
    assert_false(cmr_u64map_has(&m, keys[5]));
    cmr_u64map_free(&m);
}

static void test_u64map_slot_counts(void **state)
{
    (void)state;
    cmr_u64map_t m = {0};
    for (int round = 0; round < 3; round++) {
        for (uint64_t k = 0; k < 100; k++) {
            bool created;
            void **slot = cmr_u64map_get_slot(&m, k * 0x100000000ULL, &created);
            assert_non_null(slot);
            assert_int_equal(created, round == 0);
            *slot = (void *)((uintptr_t)*slot + 1);
        }
    }
    assert_int_equal((uintptr_t)cmr_u64map_get(&m, 7 * 0x100000000ULL), 3);
    cmr_u64map_free(&m);
}

static void test_map_bytes_keys(void **state)
{
    (void)state;
    cmr_map_t m = {0};
    char key[64];
    /* Keys that share long prefixes, binary keys with NULs, and the empty key. */
    for (int i = 0; i < 2000; i++) {
        int n = snprintf(key, sizeof key, "com/example/VeryLongPackage/Name%d", i);
        assert_int_equal(cmr_map_put(&m, key, (size_t)n, (void *)(uintptr_t)(i + 1)), 0);
    }
    assert_int_equal(cmr_map_put(&m, "", 0, (void *)1), 0);
    assert_int_equal(cmr_map_put(&m, "a\0b", 3, (void *)2), 0);
    assert_int_equal(cmr_map_put(&m, "a\0c", 3, (void *)3), 0);
    assert_int_equal(cmr_map_count(&m), 2003);
    assert_int_equal((uintptr_t)cmr_map_get(&m, "a\0b", 3), 2);
    assert_int_equal((uintptr_t)cmr_map_get(&m, "a\0c", 3), 3);
    assert_null(cmr_map_get(&m, "a", 1));
    assert_int_equal((uintptr_t)cmr_map_get_str(&m, "com/example/VeryLongPackage/Name1999"), 2000);
    for (int i = 0; i < 2000; i += 2) {
        int n = snprintf(key, sizeof key, "com/example/VeryLongPackage/Name%d", i);
        assert_true(cmr_map_del(&m, key, (size_t)n, NULL));
        assert_false(cmr_map_del(&m, key, (size_t)n, NULL));
    }
    for (int i = 0; i < 2000; i++) {
        int n = snprintf(key, sizeof key, "com/example/VeryLongPackage/Name%d", i);
        assert_int_equal(cmr_map_has(&m, key, (size_t)n), i % 2 == 1);
    }
    size_t it = 0, seen = 0, klen;
    const void *k;
    while (cmr_map_next(&m, &it, &k, &klen, NULL)) {
        assert_int_equal(((const char *)k)[klen], '\0');
        seen++;
    }
    assert_int_equal(seen, 1003);
    cmr_map_free(&m);
}

/* --- bytes, clock ------------------------------------------------------------------- */

static void test_byte_order(void **state)
{
    (void)state;
    uint8_t p[9] = {0};
    cmr_put_be16(p + 1, 0xabcd); /* unaligned */
    assert_int_equal(p[1], 0xab);
    assert_int_equal(cmr_be16(p + 1), 0xabcd);
    cmr_put_be32(p + 1, 0x89abcdefU);
    assert_int_equal(p[1], 0x89);
    assert_int_equal(cmr_be32(p + 1), 0x89abcdefU);
    cmr_put_be64(p + 1, 0x0123456789abcdefULL);
    assert_int_equal(p[1], 0x01);
    assert_int_equal(p[8], 0xef);
    assert_true(cmr_be64(p + 1) == 0x0123456789abcdefULL);
    cmr_put_le64(p + 1, 0x0123456789abcdefULL);
    assert_int_equal(p[1], 0xef);
    assert_true(cmr_le64(p + 1) == 0x0123456789abcdefULL);
    cmr_put_le32(p, 0xdeadbeefU);
    assert_int_equal(p[0], 0xef);
    assert_int_equal(cmr_le32(p), 0xdeadbeefU);
    /* Ordered signed keys sort like their values, byte by byte. */
    uint8_t a[8], b[8], c[8];
    cmr_put_be64_ordered(a, -5);
    cmr_put_be64_ordered(b, 0);
    cmr_put_be64_ordered(c, INT64_MAX);
    assert_true(memcmp(a, b, 8) < 0 && memcmp(b, c, 8) < 0);
    assert_true(cmr_be64_ordered(a) == -5);
    assert_true(cmr_be64_ordered(c) == INT64_MAX);
}

static void test_clocks(void **state)
{
    (void)state;
    int64_t m0 = cmr_mono_ns(), w0 = cmr_wall_ms();
    cmr_sleep_ms(20);
    int64_t m1 = cmr_mono_ns();
    assert_true(m1 - m0 >= 20 * 1000000LL);
    assert_true(w0 > 1600000000000LL); /* after 2020 */
    assert_true(cmr_wall_ns() / 1000000 >= w0);
    assert_true(cmr_mono_ms() >= m1 / 1000000);
    assert_true(cmr_process_cpu_ns() > 0);
    cmr_sleep_ms(0);
    cmr_sleep_ms(-3);
}

/* --- json --------------------------------------------------------------------------- */

static void test_json_untrusted_strings(void **state)
{
    (void)state;
    /* Valid UTF-8 stays as it is; invalid bytes become U+FFFD instead of dropping the
     * member (json_string() would return NULL). */
    json_t *o = json_object();
    json_object_set_new(o, "ok", cmr_json_str("caf\xc3\xa9 \"q\" \\ \n"));
    json_object_set_new(o, "bad",
                        cmr_json_str("a\xff"
                                     "b\xc3"));
    json_object_set_new(o, "overlong", cmr_json_strn("\xc0\xaf", 2));
    json_object_set_new(o, "surrogate", cmr_json_str("\xed\xa0\x80"));
    json_object_set_new(o, "nul", cmr_json_strn("x\0y", 3));
    json_object_set_new(o, "null", cmr_json_str(NULL));
    json_object_set_new(o, "id", cmr_json_id64(0x00ab));
    json_object_set_new(o, "hex", cmr_json_hex("\x01\xfe", 2));
    char *s = cmr_json_take(o, CMR_JSON_COMPACT);
    assert_non_null(s);
    assert_string_equal(s, "{\"ok\":\"caf\xc3\xa9 \\\"q\\\" \\\\ \\n\","
                           "\"bad\":\"a\xef\xbf\xbd"
                           "b\xef\xbf\xbd\","
                           "\"overlong\":\"\xef\xbf\xbd\xef\xbf\xbd\","
                           "\"surrogate\":\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\","
                           "\"nul\":\"x\\u0000y\",\"null\":null,"
                           "\"id\":\"00000000000000ab\",\"hex\":\"01fe\"}");
    free(s);
    /* Every output parses back. */
    json_error_t err;
    json_t *back = json_loads("{\"a\":[1,2]}", 0, &err);
    cmr_buf_t b = {0};
    cmr_buf_puts(&b, "x=");
    assert_int_equal(cmr_json_append(&b, back, CMR_JSON_COMPACT), 0);
    assert_string_equal(cmr_buf_str(&b), "x={\"a\":[1,2]}");
    assert_int_equal(cmr_json_append(&b, NULL, CMR_JSON_COMPACT), -1);
    cmr_buf_free(&b);
    FILE *f = tmpfile();
    assert_int_equal(cmr_json_write(f, back, CMR_JSON_COMPACT), 0);
    rewind(f);
    char line[64] = {0};
    assert_non_null(fgets(line, sizeof line, f));
    assert_string_equal(line, "{\"a\":[1,2]}\n");
    fclose(f);
    json_decref(back);
}

/* --- log escaping and rate limiting ---------------------------------------------------- */

static void test_log_escape(void **state)
{
    (void)state;
    char out[64];
    /* A name with a newline cannot forge a second log line; quotes cannot end the value. */
    assert_string_equal(cmr_log_escape("shop\nts=x level=error event=forged", out, sizeof out),
                        "shop\\nts=x level=error event=forged");
    assert_string_equal(cmr_log_escape("a\"b\\c\r\t\x01\x7f", out, sizeof out), "a\\\"b\\\\c\\r\\t\\x01\\x7f");
    assert_string_equal(cmr_log_escape("caf\xc3\xa9", out, sizeof out), "caf\xc3\xa9"); /* UTF-8 kept */
    assert_string_equal(cmr_log_escape(NULL, out, sizeof out), "(null)");
    /* Too long: cut with "...", always terminated, never a split escape. */
    char small[8];
    assert_string_equal(cmr_log_escape("abcdefghij", small, sizeof small), "abcd...");
    assert_string_equal(cmr_log_escape("abcdefg", small, sizeof small), "abcdefg");
    assert_string_equal(cmr_log_escape("abc\n\n\n", small, sizeof small), "abc...");
    assert_string_equal(cmr_log_escape("\n\n\n\n", small, sizeof small), "\\n\\n...");
    for (size_t n = 4; n < 20; n++) {
        char buf[20];
        cmr_log_escape("x\"y\"z\x02\x03 long value", buf, n);
        assert_true(strlen(buf) < n);
        assert_null(strchr(buf, '\n'));
    }
}

/* Text as transaction names and http.path are kept: UTF-8 without control characters. */
static void test_utf8_text_check(void **state)
{
    (void)state;
    assert_null(cmr_utf8_text_check("", 0));
    assert_null(cmr_utf8_text_check("GET /caf\xc3\xa9/*", 12));
    assert_string_equal(cmr_utf8_text_check("GET /\x01", 6), "a control character");
    assert_string_equal(cmr_utf8_text_check("a\x7f", 2), "a control character");     /* DEL */
    assert_string_equal(cmr_utf8_text_check("a\xc2\x85", 3), "a control character"); /* C1 NEL */
    assert_string_equal(cmr_utf8_text_check("a\xff", 2), "not UTF-8");
    assert_string_equal(cmr_utf8_text_check("a\xc3", 2), "not UTF-8"); /* cut inside a character */
    assert_null(cmr_utf8_text_check("a\x01", 1));                      /* only len bytes count */
}

static void test_log_limiter(void **state)
{
    (void)state;
    cmr_log_limiter_t l = {0};
    unsigned long long suppressed = 99;
    int allowed = 0;
    for (int i = 0; i < 100; i++)
        allowed += cmr_log_allow(&l, 5, &suppressed);
    assert_true(allowed >= 5 && allowed <= 10); /* 5 a second (the loop may cross a second) */
    assert_true(l.suppressed >= 90);
    cmr_sleep_ms(1100);
    assert_true(cmr_log_allow(&l, 5, &suppressed));
    assert_true(suppressed >= 90); /* what was suppressed is reported with the next line */
    assert_int_equal(l.suppressed, 0);
}

/* --- workpool.h -------------------------------------------------------------------- */

typedef struct pool_round {
    _Atomic int ran[512];
    _Atomic int threads_seen;
    pthread_t seen[8];
    pthread_mutex_t lock;
} pool_round_t;

static void pool_job(void *ctx, size_t i)
{
    pool_round_t *r = ctx;
    atomic_fetch_add(&r->ran[i], 1);
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL); /* long enough for the helpers to take some */
    pthread_mutex_lock(&r->lock);
    int n = atomic_load(&r->threads_seen), known = 0;
    for (int k = 0; k < n; k++)
        known |= pthread_equal(r->seen[k], pthread_self());
    if (!known && n < 8)
        r->seen[atomic_fetch_add(&r->threads_seen, 1)] = pthread_self();
    pthread_mutex_unlock(&r->lock);
}

static void test_workpool_runs_each_job_once(void **state)
{
    (void)state;
    assert_null(cmr_workpool_new(-1));
    assert_null(cmr_workpool_new(CMR_WORKPOOL_MAX_THREADS + 1));
    cmr_workpool_t *p = cmr_workpool_new(3);
    assert_non_null(p);
    pool_round_t *r = calloc(1, sizeof *r);
    pthread_mutex_init(&r->lock, NULL);
    cmr_workpool_run(p, 1, pool_job, r); /* one job: the caller's, no helper started */
    assert_int_equal(cmr_workpool_threads(p), 0);
    assert_int_equal(atomic_load(&r->ran[0]), 1);
    for (int round = 0; round < 20; round++) { /* rounds one after the other, sizes varying */
        size_t n = round % 2 ? 512 : 37;
        memset(r->ran, 0, sizeof r->ran);
        cmr_workpool_run(p, n, pool_job, r);
        for (size_t i = 0; i < 512; i++)
            assert_int_equal(atomic_load(&r->ran[i]), i < n ? 1 : 0);
    }
    assert_int_equal(cmr_workpool_threads(p), 3);
    assert_true(atomic_load(&r->threads_seen) >= 2); /* the caller and at least one helper */
    cmr_workpool_run(p, 0, pool_job, r);
    /* in steps: the caller takes jobs while the helpers run others; every job once */
    memset(r->ran, 0, sizeof r->ran);
    cmr_workpool_start(p, 300, pool_job, r);
    size_t mine = 0;
    while (cmr_workpool_help(p))
        mine++;
    cmr_workpool_wait(p);
    assert_true(mine >= 1 && mine <= 300);
    for (size_t i = 0; i < 512; i++)
        assert_int_equal(atomic_load(&r->ran[i]), i < 300 ? 1 : 0);
    assert_false(cmr_workpool_help(p)); /* no round */
    cmr_workpool_free(p);
    cmr_workpool_free(NULL);

    cmr_workpool_t *inline_only = cmr_workpool_new(0); /* every job on the caller's thread */
    memset(r->ran, 0, sizeof r->ran);
    cmr_workpool_run(inline_only, 100, pool_job, r);
    assert_int_equal(cmr_workpool_threads(inline_only), 0);
    assert_int_equal(atomic_load(&r->ran[99]), 1);
    cmr_workpool_free(inline_only);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buf_appends_and_terminates),
        cmocka_unit_test(test_buf_binary_and_big_endian),
        cmocka_unit_test(test_buf_oom_is_sticky),
        cmocka_unit_test(test_array_grow),
        cmocka_unit_test(test_u64map_against_model),
        cmocka_unit_test(test_u64map_reserve),
        cmocka_unit_test(test_u64map_slot_counts),
        cmocka_unit_test(test_map_bytes_keys),
        cmocka_unit_test(test_byte_order),
        cmocka_unit_test(test_clocks),
        cmocka_unit_test(test_json_untrusted_strings),
        cmocka_unit_test(test_log_escape),
        cmocka_unit_test(test_utf8_text_check),
        cmocka_unit_test(test_log_limiter),
        cmocka_unit_test(test_workpool_runs_each_job_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
