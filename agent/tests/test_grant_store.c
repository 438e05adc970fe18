/*
 * test_grant_store.c - class grants (common/trust/grant.c) and the agent's cache of
 * instrumented classes (agent/src/grant_store.c): a grant verifies only for its
 * environment, its original bytes and its instrumented bytes, under a pinned key and
 * within its validity; the cache hands out only bytes whose grant verifies, refuses
 * (and counts) tampered, truncated, foreign-key, expired and other-environment files,
 * writes files 0600 in a 0700 directory, refuses a directory others may use, evicts the
 * oldest files beyond its bounds, and survives a restart (a new store on the same
 * directory).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmr/clock.h"
#include "cmr/grant.h"
#include "grant_store.h"
#include "test_keys.h"

#define DAY_MS INT64_C(86400000)

static test_keys_t keys, other; /* the pinned key, and one the agent does not pin */
static char dir[128];
static cmr_signer_t *signer, *other_signer;
static cmr_verifier_t *verifier, *other_verifier;
static const uint8_t original[] = {0xCA, 0xFE, 0xBA, 0xBE, 0, 0, 0, 55, 1, 2, 3};
static const uint8_t instrumented[] = {0xCA, 0xFE, 0xBA, 0xBE, 0, 0, 0, 55, 9, 9, 9, 9};
static uint8_t orig_digest[CMR_TRUST_DIGEST_BYTES];

static int setup(void **state)
{
    (void)state;
    if (test_keys_make(&keys) != 0 || test_keys_make(&other) != 0)
        return -1;
    signer = keys.signer;
    verifier = keys.verifier;
    other_signer = other.signer;
    other_verifier = other.verifier;
    cmr_trust_digest(original, sizeof original, orig_digest);
    snprintf(dir, sizeof dir, "%s/cache", keys.dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    test_keys_free(&keys);
    test_keys_free(&other);
    return 0;
}

static void sign(const cmr_signer_t *s, const char *env, int64_t lifetime_ms, cmr_buf_t *out)
{
    char err[256];
    assert_int_equal(cmr_grant_sign(s, env, 7, "demo/Work", orig_digest, instrumented, sizeof instrumented, lifetime_ms,
                                    out, err, sizeof err),
                     0);
}

static cmr_grant_verdict_t verify(const cmr_verifier_t *v, const cmr_buf_t *g, const char *env, const uint8_t *digest,
                                  const uint8_t *bytes, size_t len, int64_t now)
{
    cmr_grant_expect_t want = {env, "demo/Work", digest, bytes, len};
    return cmr_grant_verify(v, g->data, g->len, &want, now, NULL);
}

/* --- grants ---------------------------------------------------------------------------- */

static void test_grant_binds_environment_class_bytes_key_and_time(void **state)
{
    (void)state;
    cmr_buf_t g = {0};
    sign(signer, "shop", DAY_MS, &g);
    int64_t now = cmr_wall_ms();
    cmr_grant_t out;
    cmr_grant_expect_t want = {"shop", "demo/Work", orig_digest, instrumented, sizeof instrumented};
    assert_int_equal(cmr_grant_verify(verifier, g.data, g.len, &want, now, &out), CMR_GRANT_OK);
    assert_string_equal(out.environment_id, "shop");
    assert_string_equal(out.class_name, "demo/Work");
    assert_int_equal(out.revision, 7);
    assert_string_equal(out.key_id, cmr_signer_key_id(signer));
    assert_int_equal(out.not_after_ms - out.issued_ms, DAY_MS);

    uint8_t other_digest[CMR_TRUST_DIGEST_BYTES];
    cmr_trust_digest(instrumented, sizeof instrumented, other_digest);
    assert_int_equal(verify(verifier, &g, "other", orig_digest, instrumented, sizeof instrumented, now),
                     CMR_GRANT_WRONG_ENVIRONMENT);
    assert_int_equal(verify(verifier, &g, "shop", other_digest, instrumented, sizeof instrumented, now),
                     CMR_GRANT_WRONG_CLASS);
    assert_int_equal(verify(verifier, &g, "shop", orig_digest, original, sizeof original, now),
                     CMR_GRANT_BYTES_MISMATCH);
    assert_int_equal(verify(other_verifier, &g, "shop", orig_digest, instrumented, sizeof instrumented, now),
                     CMR_GRANT_UNKNOWN_KEY);
    assert_int_equal(verify(verifier, &g, "shop", orig_digest, instrumented, sizeof instrumented, now + 2 * DAY_MS),
                     CMR_GRANT_EXPIRED);
    assert_int_equal(verify(verifier, &g, "shop", orig_digest, instrumented, sizeof instrumented, now - DAY_MS),
                     CMR_GRANT_NOT_YET_VALID);
    /* every byte is covered: a flipped one anywhere is refused */
    for (size_t i = 0; i < g.len; i++) {
        g.data[i] ^= 0x01;
        cmr_grant_verdict_t v = verify(verifier, &g, "shop", orig_digest, instrumented, sizeof instrumented, now);
        assert_int_not_equal(v, CMR_GRANT_OK);
        g.data[i] ^= 0x01;
    }
    /* truncated, or with bytes after it */
    for (size_t n = 0; n < g.len; n++) {
        cmr_grant_expect_t w2 = want;
        assert_int_equal(cmr_grant_verify(verifier, g.data, n, &w2, now, NULL), CMR_GRANT_MALFORMED);
    }
    cmr_buf_put(&g, "x", 1);
    assert_int_equal(verify(verifier, &g, "shop", orig_digest, instrumented, sizeof instrumented, now),
                     CMR_GRANT_MALFORMED);
    cmr_buf_free(&g);

    char err[256];
    assert_int_equal(cmr_grant_sign(signer, "shop", 1, "demo/Work", orig_digest, instrumented, sizeof instrumented,
                                    CMR_GRANT_MAX_LIFETIME_MS + 1, &g, err, sizeof err),
                     -1);
    assert_int_equal(cmr_grant_sign(signer, "", 1, "demo/Work", orig_digest, instrumented, sizeof instrumented, DAY_MS,
                                    &g, err, sizeof err),
                     -1);
    cmr_buf_free(&g);
}

/* --- the store ------------------------------------------------------------------------- */

static void wipe_dir(void)
{
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static cmr_grant_store_t *open_store(const char *env, const cmr_verifier_t *v, size_t max_files)
{
    char err[512];
    cmr_grant_store_t *s = cmr_grant_store_open(dir, env, v, 1 << 20, max_files, err, sizeof err);
    if (!s)
        fail_msg("open: %s", err);
    return s;
}

static void put(cmr_grant_store_t *s, const char *env, int64_t lifetime_ms)
{
    cmr_buf_t g = {0};
    char err[256];
    sign(signer, env, lifetime_ms, &g);
    assert_int_equal(cmr_grant_store_put(s, g.data, g.len, orig_digest, instrumented, sizeof instrumented,
                                         cmr_wall_ms(), err, sizeof err),
                     0);
    cmr_buf_free(&g);
}

static cmr_grant_lookup_t lookup(cmr_grant_store_t *s, int64_t now, cmr_grant_verdict_t *why)
{
    uint8_t *bytes = NULL;
    size_t len = 0;
    cmr_grant_lookup_t r = cmr_grant_store_lookup(s, "demo/Work", orig_digest, now, &bytes, &len, NULL, why);
    if (r == CMR_GRANT_LOOKUP_HIT) {
        assert_int_equal(len, sizeof instrumented);
        assert_memory_equal(bytes, instrumented, len);
    } else {
        assert_null(bytes);
    }
    free(bytes);
    return r;
}

static void file_path(const char *env, char *out, size_t cap)
{
    char name[40];
    cmr_grant_store_file_name(env, orig_digest, name);
    snprintf(out, cap, "%s/%s", dir, name);
}

static void test_store_serves_verified_bytes_across_a_restart(void **state)
{
    (void)state;
    wipe_dir();
    cmr_grant_store_t *s = open_store("shop", verifier, 100);
    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    cmr_grant_verdict_t why;
    assert_int_equal(lookup(s, cmr_wall_ms(), &why), CMR_GRANT_LOOKUP_MISS);
    put(s, "shop", DAY_MS);
    char path[256];
    file_path("shop", path, sizeof path);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(lookup(s, cmr_wall_ms(), &why), CMR_GRANT_LOOKUP_HIT);
    char err[256];
    assert_int_equal(cmr_grant_store_record_environment(s, "agent-a", "shop", err, sizeof err), 0);
    cmr_grant_store_close(s);

    /* the next JVM: the environment recorded for its name, its index read at open */
    char env[128];
    cmr_grant_store_recorded_environment(dir, "agent-a", env, sizeof env);
    assert_string_equal(env, "shop");
    cmr_grant_store_recorded_environment(dir, "agent-b", env, sizeof env);
    assert_string_equal(env, "");
    s = open_store("shop", verifier, 100);
    assert_int_equal(lookup(s, cmr_wall_ms(), &why), CMR_GRANT_LOOKUP_HIT);
    /* another environment's JVM does not use them, nor one that has none yet */
    cmr_grant_store_expect(s, "other");
    assert_int_equal(lookup(s, cmr_wall_ms(), &why), CMR_GRANT_LOOKUP_MISS);
    cmr_grant_store_expect(s, "");
    assert_int_equal(lookup(s, cmr_wall_ms(), &why), CMR_GRANT_LOOKUP_MISS);
    cmr_grant_store_stats_t gs;
    cmr_grant_store_stats(s, &gs);
    assert_int_equal(gs.hits, 1);
    assert_int_equal(gs.misses, 2);
    assert_int_equal(gs.files, 1);
    cmr_grant_store_close(s);
}

/* Rewrites the cache file of "shop" through fn (NULL: unchanged). */
static void rewrite_file(void (*fn)(uint8_t *data, size_t *len))
{
    char path[256];
    file_path("shop", path, sizeof path);
    uint8_t data[4096];
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t len = fread(data, 1, sizeof data, f);
    fclose(f);
    if (fn)
        fn(data, &len);
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
}

/* Rewrites the cache file of "shop" through fn, then checks that a fresh store refuses it
 * for `want`, counts it, and then misses (the file is out of the index); the same when
 * the store verifies its files ahead (preverify), which then refuses it. */
static void expect_refused(void (*fn)(uint8_t *data, size_t *len), const cmr_verifier_t *v, int64_t now,
                           cmr_grant_verdict_t want)
{
    for (int ahead = 0; ahead < 2; ahead++) {
        wipe_dir();
        cmr_grant_store_t *s = open_store("shop", verifier, 100);
        put(s, "shop", DAY_MS);
        cmr_grant_store_close(s);
        rewrite_file(fn);
        s = open_store("shop", v, 100);
        cmr_grant_verdict_t why;
        if (ahead) {
            cmr_grant_preverify_t r;
            assert_int_equal(cmr_grant_store_preverify(s, now, 10, &r), 0);
            assert_int_equal(r.left, 0);
            assert_int_equal(r.refused, 1);
            assert_int_equal(r.first_refusal, want);
            char name[40];
            cmr_grant_store_file_name("shop", orig_digest, name);
            assert_string_equal(r.first_refused_file, name);
        } else {
            assert_int_equal(lookup(s, now, &why), CMR_GRANT_LOOKUP_REFUSED);
            assert_int_equal(why, want);
        }
        assert_int_equal(lookup(s, now, &why), CMR_GRANT_LOOKUP_MISS);
        cmr_grant_store_stats_t gs;
        cmr_grant_store_stats(s, &gs);
        assert_int_equal(gs.refused, 1);
        assert_int_equal(gs.refusals[want], 1);
        assert_int_equal(gs.preverified, 0);
        cmr_grant_store_close(s);
    }
}

static void flip_last(uint8_t *d, size_t *len)
{
    d[*len - 1] ^= 0x40; /* the instrumented bytes */
}

static void truncate_file(uint8_t *d, size_t *len)
{
    (void)d;
    *len -= 5;
}

static void flip_signature(uint8_t *d, size_t *len)
{
    d[*len - sizeof instrumented - 4 - 10] ^= 0x01; /* inside the grant's signature */
}

static void garbage(uint8_t *d, size_t *len)
{
    memset(d, 'x', *len);
}

static void test_store_refuses_tampered_truncated_foreign_and_expired_files(void **state)
{
    (void)state;
    int64_t now = cmr_wall_ms();
    expect_refused(flip_last, verifier, now, CMR_GRANT_BYTES_MISMATCH);
    expect_refused(truncate_file, verifier, now, CMR_GRANT_MALFORMED);
    expect_refused(flip_signature, verifier, now, CMR_GRANT_BAD_SIGNATURE);
    expect_refused(garbage, verifier, now, CMR_GRANT_MALFORMED);
    expect_refused(NULL, other_verifier, now, CMR_GRANT_UNKNOWN_KEY);
    expect_refused(NULL, verifier, now + 8 * DAY_MS, CMR_GRANT_EXPIRED);
}

/* Files verified ahead of their load: the load checks the content's digest, the class
 * name and the validity, and anything else (content changed since, another class, past
 * its validity) goes through the whole verification again. */
static void test_preverified_files_skip_the_signature_check(void **state)
{
    (void)state;
    wipe_dir();
    cmr_grant_store_t *s = open_store("shop", verifier, 100);
    put(s, "shop", DAY_MS);
    put(s, "other", DAY_MS); /* another environment's, same class: left alone */
    cmr_grant_store_close(s);
    s = open_store("shop", verifier, 100);
    int64_t now = cmr_wall_ms();
    cmr_grant_preverify_t r;
    size_t total = cmr_grant_store_preverify(s, now, 1, &r); /* a slice of one file */
    assert_int_equal(r.left, 1);
    total += cmr_grant_store_preverify(s, now, 1, &r);
    assert_int_equal(r.left, 0);
    assert_int_equal(r.refused, 0);
    assert_int_equal(total, 1);
    assert_int_equal(cmr_grant_store_preverify(s, now, 10, &r), 0); /* nothing left to look at */
    cmr_grant_store_stats_t gs;
    cmr_grant_store_stats(s, &gs);
    assert_int_equal(gs.preverified, 1);
    assert_int_equal(gs.files, 2);
    assert_int_equal(gs.refused, 0);

    cmr_grant_verdict_t why;
    cmr_grant_t g;
    uint8_t *bytes = NULL;
    size_t len = 0;
    assert_int_equal(cmr_grant_store_lookup(s, "demo/Work", orig_digest, now, &bytes, &len, &g, &why),
                     CMR_GRANT_LOOKUP_HIT);
    assert_int_equal(len, sizeof instrumented);
    assert_memory_equal(bytes, instrumented, len);
    free(bytes);
    assert_string_equal(g.class_name, "demo/Work");
    assert_string_equal(g.environment_id, "shop");
    cmr_grant_store_stats(s, &gs);
    assert_int_equal(gs.hits, 1);
    assert_int_equal(gs.preverified_hits, 1);

    /* past its validity: verified again, and refused */
    assert_int_equal(lookup(s, now + 8 * DAY_MS, &why), CMR_GRANT_LOOKUP_REFUSED);
    assert_int_equal(why, CMR_GRANT_EXPIRED);
    put(s, "shop", DAY_MS);

    /* content changed after it was verified ahead: verified again, and refused */
    assert_int_equal(cmr_grant_store_preverify(s, now, 10, &r), 1);
    rewrite_file(flip_last);
    assert_int_equal(lookup(s, now, &why), CMR_GRANT_LOOKUP_REFUSED);
    assert_int_equal(why, CMR_GRANT_BYTES_MISMATCH);
    put(s, "shop", DAY_MS);

    /* another class name: verified again, and refused */
    assert_int_equal(cmr_grant_store_preverify(s, now, 10, &r), 1);
    assert_int_equal(cmr_grant_store_lookup(s, "demo/Other", orig_digest, now, &bytes, &len, NULL, &why),
                     CMR_GRANT_LOOKUP_REFUSED);
    assert_int_equal(why, CMR_GRANT_WRONG_CLASS);
    cmr_grant_store_stats(s, &gs);
    assert_int_equal(gs.preverified_hits, 1);

    /* another environment expected: its files are looked at again */
    cmr_grant_store_expect(s, "other");
    assert_int_equal(cmr_grant_store_preverify(s, now, 10, &r), 1);
    assert_int_equal(lookup(s, now, &why), CMR_GRANT_LOOKUP_HIT);
    cmr_grant_store_stats(s, &gs);
    assert_int_equal(gs.preverified_hits, 2);
    assert_int_equal(gs.refused, 3);

    /* a file gone meanwhile (another JVM of the directory evicted it): out of the index,
     * not refused */
    put(s, "other", DAY_MS);
    char name[40], path[sizeof dir + sizeof name];
    cmr_grant_store_file_name("other", orig_digest, name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(cmr_grant_store_preverify(s, now, 10, &r), 0);
    assert_int_equal(r.refused, 0);
    cmr_grant_store_stats(s, &gs);
    assert_int_equal(gs.refused, 3);
    assert_int_equal(gs.files, 0);
    cmr_grant_store_close(s);
}

static void test_store_refuses_grants_it_cannot_verify_and_other_environments_files(void **state)
{
    (void)state;
    wipe_dir();
    cmr_grant_store_t *s = open_store("shop", verifier, 100);
    cmr_buf_t g = {0};
    char err[256];
    sign(other_signer, "shop", DAY_MS, &g); /* a key the agent does not pin */
    assert_int_equal(cmr_grant_store_put(s, g.data, g.len, orig_digest, instrumented, sizeof instrumented,
                                         cmr_wall_ms(), err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "unknown_key"));
    sign(signer, "shop", DAY_MS, &g); /* for other bytes */
    assert_int_equal(
        cmr_grant_store_put(s, g.data, g.len, orig_digest, original, sizeof original, cmr_wall_ms(), err, sizeof err),
        -1);
    assert_non_null(strstr(err, "bytes_mismatch"));
    cmr_buf_free(&g);
    /* a file of environment "other" renamed to the name of "shop"'s is refused */
    put(s, "other", DAY_MS);
    char from[256], to[256];
    file_path("other", from, sizeof from);
    file_path("shop", to, sizeof to);
    assert_int_equal(rename(from, to), 0);
    cmr_grant_store_close(s);
    s = open_store("shop", verifier, 100);
    cmr_grant_verdict_t why;
    assert_int_equal(lookup(s, cmr_wall_ms(), &why), CMR_GRANT_LOOKUP_REFUSED);
    assert_int_equal(why, CMR_GRANT_WRONG_ENVIRONMENT);
    cmr_grant_store_close(s);
}

static void test_store_refuses_a_directory_others_may_use_and_bounds_its_files(void **state)
{
    (void)state;
    wipe_dir();
    assert_int_equal(mkdir(dir, 0755), 0);
    char err[512];
    assert_null(cmr_grant_store_open(dir, "shop", verifier, 1 << 20, 100, err, sizeof err));
    assert_non_null(strstr(err, "chmod 700"));
    assert_int_equal(chmod(dir, 0700), 0);
    /* foreign names are left alone; two files at most: the oldest goes */
    char path[256];
    snprintf(path, sizeof path, "%s/README", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("not a grant\n", f);
    fclose(f);
    cmr_grant_store_t *s = open_store("a", verifier, 2);
    put(s, "a", DAY_MS);
    usleep(2000);
    put(s, "b", DAY_MS);
    usleep(2000);
    put(s, "c", DAY_MS);
    cmr_grant_store_stats_t gs;
    cmr_grant_store_stats(s, &gs);
    assert_int_equal(gs.files, 2);
    assert_int_equal(gs.evicted, 1);
    assert_int_equal(gs.written, 3);
    cmr_grant_verdict_t why;
    assert_int_equal(lookup(s, cmr_wall_ms(), &why), CMR_GRANT_LOOKUP_MISS); /* "a" was evicted */
    cmr_grant_store_expect(s, "c");
    assert_int_equal(lookup(s, cmr_wall_ms(), &why), CMR_GRANT_LOOKUP_HIT);
    assert_int_equal(access(path, F_OK), 0);
    cmr_grant_store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grant_binds_environment_class_bytes_key_and_time),
        cmocka_unit_test(test_store_serves_verified_bytes_across_a_restart),
        cmocka_unit_test(test_store_refuses_tampered_truncated_foreign_and_expired_files),
        cmocka_unit_test(test_preverified_files_skip_the_signature_check),
        cmocka_unit_test(test_store_refuses_grants_it_cannot_verify_and_other_environments_files),
        cmocka_unit_test(test_store_refuses_a_directory_others_may_use_and_bounds_its_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
