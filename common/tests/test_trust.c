/*
 * test_trust.c - unit tests of signed command envelopes (cmr_trust): key files, signing,
 * and every way the agent's verifier refuses an envelope (unsigned, unknown key, bad
 * signature, tampered payload or fields, wrong target, expired, from the future, too long
 * lived, replayed, window full), plus key rotation and the bounded file reads.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "cmr/clock.h"
#include "cmr/file.h"
#include "cmr/trust.h"

#define INSTANCE "0123456789abcdef0123456789abcdef"

typedef struct fixture {
    char dir[64];
    char key_a[128], pub_a[128], key_b[128], pub_b[128];
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    strcpy(f->dir, "/tmp/cmr-trust-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    char err[256];
    if (cmr_trust_keygen(f->dir, "a", err, sizeof err) != 0 || cmr_trust_keygen(f->dir, "b", err, sizeof err) != 0) {
        fprintf(stderr, "keygen: %s\n", err);
        return -1;
    }
    snprintf(f->key_a, sizeof f->key_a, "%s/a.key", f->dir);
    snprintf(f->pub_a, sizeof f->pub_a, "%s/a.pub", f->dir);
    snprintf(f->key_b, sizeof f->key_b, "%s/b.key", f->dir);
    snprintf(f->pub_b, sizeof f->pub_b, "%s/b.pub", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    if (system(cmd) != 0)
        return -1;
    free(f);
    return 0;
}

static cmr_verifier_t *verifier_for(const fixture_t *f, const char *pub)
{
    char err[256];
    cmr_verifier_t *v = cmr_verifier_new(INSTANCE, NULL);
    assert_non_null(v);
    assert_int_equal(cmr_verifier_add_key_file(v, pub ? pub : f->pub_a, err, sizeof err), 0);
    return v;
}

static void test_sign_and_verify(void **state)
{
    fixture_t *f = *state;
    char err[256];
    cmr_signer_t *s = cmr_signer_load(f->key_a, err, sizeof err);
    assert_non_null(s);
    assert_int_equal(strlen(cmr_signer_key_id(s)), CMR_TRUST_KEY_ID_CHARS);
    cmr_verifier_t *v = verifier_for(f, NULL);
    const char payload[] = "a redefine command";
    cmr_envelope_t env;
    cmr_signer_sign(s, INSTANCE, 60000, payload, sizeof payload, &env);
    int64_t now = cmr_wall_ms();
    assert_int_equal(cmr_verifier_check(v, &env, payload, sizeof payload, now), CMR_TRUST_OK);
    /* The same envelope again is a replay. */
    assert_int_equal(cmr_verifier_check(v, &env, payload, sizeof payload, now), CMR_TRUST_REPLAYED);
    /* Two commands signed one after the other have different ids. */
    cmr_envelope_t env2;
    cmr_signer_sign(s, INSTANCE, 60000, payload, sizeof payload, &env2);
    assert_memory_not_equal(env.command_id, env2.command_id, sizeof env.command_id);
    assert_int_equal(cmr_verifier_check(v, &env2, payload, sizeof payload, now), CMR_TRUST_OK);
    uint64_t counts[CMR_TRUST_VERDICT__COUNT];
    cmr_verifier_counts(v, counts);
    assert_int_equal(counts[CMR_TRUST_OK], 2);
    assert_int_equal(counts[CMR_TRUST_REPLAYED], 1);
    cmr_verifier_free(v);
    cmr_signer_free(s);
}

static void test_refusals(void **state)
{
    fixture_t *f = *state;
    char err[256];
    cmr_signer_t *a = cmr_signer_load(f->key_a, err, sizeof err), *b = cmr_signer_load(f->key_b, err, sizeof err);
    assert_non_null(a);
    assert_non_null(b);
    cmr_verifier_t *v = verifier_for(f, NULL);
    const char payload[] = "payload bytes";
    int64_t now = cmr_wall_ms();
    cmr_envelope_t env, t;
    cmr_signer_sign(a, INSTANCE, 60000, payload, sizeof payload, &env);

    /* Unsigned: no signature, or no key id. */
    t = env;
    memset(t.signature, 0, sizeof t.signature);
    assert_int_equal(cmr_verifier_check(v, &t, payload, sizeof payload, now), CMR_TRUST_UNSIGNED);
    t = env;
    t.key_id[0] = '\0';
    assert_int_equal(cmr_verifier_check(v, &t, payload, sizeof payload, now), CMR_TRUST_UNSIGNED);
    /* Signed by a key that is not pinned. */
    cmr_signer_sign(b, INSTANCE, 60000, payload, sizeof payload, &t);
    assert_int_equal(cmr_verifier_check(v, &t, payload, sizeof payload, now), CMR_TRUST_UNKNOWN_KEY);
    /* For another instance (even with a valid signature for that one). */
    cmr_signer_sign(a, "ffffffffffffffffffffffffffffffff", 60000, payload, sizeof payload, &t);
    assert_int_equal(cmr_verifier_check(v, &t, payload, sizeof payload, now), CMR_TRUST_WRONG_TARGET);
    /* Any change to the payload or a signed field breaks the signature. */
    char other[sizeof payload];
    memcpy(other, payload, sizeof payload);
    other[0] ^= 1;
    assert_int_equal(cmr_verifier_check(v, &env, other, sizeof other, now), CMR_TRUST_BAD_SIGNATURE);
    assert_int_equal(cmr_verifier_check(v, &env, payload, sizeof payload - 1, now), CMR_TRUST_BAD_SIGNATURE);
    t = env;
    t.not_after_ms += 1;
    assert_int_equal(cmr_verifier_check(v, &t, payload, sizeof payload, now), CMR_TRUST_BAD_SIGNATURE);
    t = env;
    t.command_id[3] ^= 0x40;
    assert_int_equal(cmr_verifier_check(v, &t, payload, sizeof payload, now), CMR_TRUST_BAD_SIGNATURE);
    t = env;
    t.signature[10] ^= 1;
    assert_int_equal(cmr_verifier_check(v, &t, payload, sizeof payload, now), CMR_TRUST_BAD_SIGNATURE);
    /* Time: expired (beyond the 60 s tolerance), from the future, valid for too long. */
    assert_int_equal(cmr_verifier_check(v, &env, payload, sizeof payload, env.not_after_ms + 60001), CMR_TRUST_EXPIRED);
    assert_int_equal(cmr_verifier_check(v, &env, payload, sizeof payload, env.issued_ms - 60001),
                     CMR_TRUST_NOT_YET_VALID);
    cmr_signer_sign(a, INSTANCE, 2 * 3600000, payload, sizeof payload, &t);
    assert_int_equal(cmr_verifier_check(v, &t, payload, sizeof payload, now), CMR_TRUST_LIFETIME);
    /* Refused envelopes were not remembered: the genuine one still goes through once. */
    assert_int_equal(cmr_verifier_check(v, &env, payload, sizeof payload, now), CMR_TRUST_OK);
    assert_int_equal(cmr_verifier_check(v, &env, payload, sizeof payload, now), CMR_TRUST_REPLAYED);
    assert_string_equal(cmr_trust_verdict_name(CMR_TRUST_BAD_SIGNATURE), "bad_signature");
    cmr_verifier_free(v);
    cmr_signer_free(a);
    cmr_signer_free(b);
}

static void test_rotation_two_keys(void **state)
{
    fixture_t *f = *state;
    char err[256];
    cmr_signer_t *a = cmr_signer_load(f->key_a, err, sizeof err), *b = cmr_signer_load(f->key_b, err, sizeof err);
    cmr_verifier_t *v = verifier_for(f, NULL);
    assert_int_equal(cmr_verifier_add_key_file(v, f->pub_b, err, sizeof err), 0);
    assert_int_equal(cmr_verifier_add_key_file(v, f->pub_b, err, sizeof err), 0); /* the same key twice: once */
    assert_int_equal(cmr_verifier_key_count(v), 2);
    /* A third key is refused: at most two at once. */
    char dir3[128];
    snprintf(dir3, sizeof dir3, "%s", f->dir);
    assert_int_equal(cmr_trust_keygen(dir3, "c", err, sizeof err), 0);
    char pub_c[160];
    snprintf(pub_c, sizeof pub_c, "%s/c.pub", f->dir);
    assert_int_equal(cmr_verifier_add_key_file(v, pub_c, err, sizeof err), -1);
    assert_non_null(strstr(err, "at most 2"));
    const char p[] = "x";
    cmr_envelope_t e;
    int64_t now = cmr_wall_ms();
    cmr_signer_sign(a, INSTANCE, 1000, p, sizeof p, &e);
    assert_int_equal(cmr_verifier_check(v, &e, p, sizeof p, now), CMR_TRUST_OK);
    cmr_signer_sign(b, INSTANCE, 1000, p, sizeof p, &e);
    assert_int_equal(cmr_verifier_check(v, &e, p, sizeof p, now), CMR_TRUST_OK);
    cmr_verifier_free(v);
    cmr_signer_free(a);
    cmr_signer_free(b);
}

static void test_replay_window_bounded(void **state)
{
    fixture_t *f = *state;
    char err[256];
    cmr_signer_t *a = cmr_signer_load(f->key_a, err, sizeof err);
    cmr_verifier_limits_t lim = {.max_remembered = 3};
    cmr_verifier_t *v = cmr_verifier_new(INSTANCE, &lim);
    assert_int_equal(cmr_verifier_add_key_file(v, f->pub_a, err, sizeof err), 0);
    const char p[] = "x";
    cmr_envelope_t e[4];
    for (int i = 0; i < 4; i++)
        cmr_signer_sign(a, INSTANCE, 1000, p, sizeof p, &e[i]);
    int64_t now = e[0].issued_ms;
    for (int i = 0; i < 3; i++)
        assert_int_equal(cmr_verifier_check(v, &e[i], p, sizeof p, now), CMR_TRUST_OK);
    /* Full of live ids: refused, never forgotten early. */
    assert_int_equal(cmr_verifier_check(v, &e[3], p, sizeof p, now), CMR_TRUST_OVERLOADED);
    assert_int_equal(cmr_verifier_check(v, &e[0], p, sizeof p, now), CMR_TRUST_REPLAYED);
    /* Once the first three have expired (past not-after + tolerance) they are forgotten,
     * which makes room, and are refused as expired rather than accepted again. */
    cmr_envelope_t late;
    cmr_signer_sign(a, INSTANCE, 3000000, p, sizeof p, &late); /* valid for 50 minutes */
    int64_t later = 0; /* past every one's not-after + tolerance (signed in different ms) */
    for (int i = 0; i < 4; i++)
        later = e[i].not_after_ms + 60001 > later ? e[i].not_after_ms + 60001 : later;
    assert_int_equal(cmr_verifier_check(v, &late, p, sizeof p, later), CMR_TRUST_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(cmr_verifier_check(v, &e[i], p, sizeof p, later), CMR_TRUST_EXPIRED);
    cmr_verifier_free(v);
    cmr_signer_free(a);
}

static void test_key_files(void **state)
{
    fixture_t *f = *state;
    char err[256], path[160];
    /* keygen refuses to overwrite. */
    assert_int_equal(cmr_trust_keygen(f->dir, "a", err, sizeof err), -1);
    /* The secret key is 0600; a readable one is refused. */
    struct stat st;
    assert_int_equal(stat(f->key_a, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(chmod(f->key_a, 0644), 0);
    assert_null(cmr_signer_load(f->key_a, err, sizeof err));
    assert_non_null(strstr(err, "chmod 600"));
    assert_int_equal(chmod(f->key_a, 0600), 0);
    /* A public key is not a secret key and vice versa; errors never quote contents. */
    assert_null(cmr_signer_load(f->pub_a, err, sizeof err)); /* 0644: refused as readable */
    cmr_verifier_t *v = cmr_verifier_new(INSTANCE, NULL);
    assert_int_equal(cmr_verifier_add_key_file(v, f->key_a, err, sizeof err), -1);
    assert_null(strstr(err, "cmr-ed25519-secret"));
    /* Not a regular file, or too large: refused at once. */
    assert_int_equal(cmr_verifier_add_key_file(v, "/dev/zero", err, sizeof err), -1);
    assert_non_null(strstr(err, "not a regular file"));
    snprintf(path, sizeof path, "%s/big.pub", f->dir);
    FILE *fp = fopen(path, "w");
    for (int i = 0; i < 5000; i++)
        fputc('A', fp);
    fclose(fp);
    assert_int_equal(cmr_verifier_add_key_file(v, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "larger than"));
    /* Key text: with or without the label; anything else refused. */
    cmr_buf_t text = {0};
    assert_int_equal(cmr_file_read(f->pub_a, 4096, &text, err, sizeof err), 0);
    assert_int_equal(cmr_verifier_add_key_text(v, cmr_buf_str(&text), err, sizeof err), 0);
    const char *b64 = strchr(cmr_buf_str(&text), ' ') + 1;
    assert_int_equal(cmr_verifier_add_key_text(v, b64, err, sizeof err), 0);
    assert_int_equal(cmr_verifier_key_count(v), 1);
    assert_int_equal(cmr_verifier_add_key_text(v, "cmr-ed25519-public AAAA", err, sizeof err), -1);
    assert_int_equal(cmr_verifier_add_key_text(v, "", err, sizeof err), -1);
    cmr_buf_free(&text);
    cmr_verifier_free(v);
}

static void test_file_read_bounds(void **state)
{
    fixture_t *f = *state;
    char err[256], path[160];
    cmr_buf_t b = {0};
    assert_int_equal(cmr_file_read(f->dir, 100, &b, err, sizeof err), -1); /* a directory */
    assert_non_null(strstr(err, "not a regular file"));
    snprintf(path, sizeof path, "%s/fifo", f->dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(cmr_file_read(path, 100, &b, err, sizeof err), -1); /* returns, does not block */
    assert_non_null(strstr(err, "not a regular file"));
    assert_int_equal(cmr_file_read("/nonexistent/x", 100, &b, err, sizeof err), -1);
    snprintf(path, sizeof path, "%s/ten", f->dir);
    FILE *fp = fopen(path, "w");
    fputs("0123456789", fp);
    fclose(fp);
    assert_int_equal(cmr_file_read(path, 10, &b, err, sizeof err), 0);
    assert_string_equal(cmr_buf_str(&b), "0123456789");
    assert_int_equal(cmr_file_read(path, 9, &b, err, sizeof err), -1);
    assert_int_equal(b.len, 0);
    assert_null(strstr(err, "0123"));
    cmr_buf_free(&b);
}

static void test_derived_keys(void **state)
{
    fixture_t *f = *state;
    char err[256];
    cmr_signer_t *a = cmr_signer_load(f->key_a, err, sizeof err), *a2 = cmr_signer_load(f->key_a, err, sizeof err);
    cmr_signer_t *b = cmr_signer_load(f->key_b, err, sizeof err);
    uint8_t k1[32], k2[32], k3[32], k4[32];
    cmr_signer_derive_key(a, "trace-context:shop", k1);
    cmr_signer_derive_key(a2, "trace-context:shop", k2); /* another worker with the same key */
    cmr_signer_derive_key(a, "trace-context:billing", k3);
    cmr_signer_derive_key(b, "trace-context:shop", k4);
    assert_memory_equal(k1, k2, 32);
    assert_memory_not_equal(k1, k3, 32);
    assert_memory_not_equal(k1, k4, 32);
    cmr_signer_free(a);
    cmr_signer_free(a2);
    cmr_signer_free(b);
}

static void test_digest(void **state)
{
    (void)state;
    uint8_t d1[CMR_TRUST_DIGEST_BYTES], d2[CMR_TRUST_DIGEST_BYTES];
    cmr_trust_digest("abc", 3, d1);
    cmr_trust_digest("abd", 3, d2);
    assert_memory_not_equal(d1, d2, sizeof d1);
    /* BLAKE2b-256("abc"), RFC 7693 test vector family (libsodium generichash, 32 bytes). */
    static const uint8_t want[4] = {0xbd, 0xdd, 0x81, 0x3c};
    assert_memory_equal(d1, want, sizeof want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sign_and_verify),   cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_rotation_two_keys), cmocka_unit_test(test_replay_window_bounded),
        cmocka_unit_test(test_key_files),         cmocka_unit_test(test_file_read_bounds),
        cmocka_unit_test(test_derived_keys),      cmocka_unit_test(test_digest),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
