/*
 * test_wire_reject.c - what is not a valid message is rejected with a clear error and
 * counted, never crashes the reader: truncation at every length, corrupted bytes, foreign
 * fingerprints, bad magic, oversized and trailing data, hostile lengths and counts.
 * Runs under ASan + UBSan in CI, which turns any out-of-bounds read into a failure.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/wire.h"
#include "msg_fill.h"

static cmr_buf_t encode_sample(cmr_msg_type_t type, uint64_t seed)
{
    cmr_msg_t m;
    cmr_buf_t buf = {0};
    msg_fill(type, MSG_FILL_RANDOM, seed, &m);
    assert_int_equal(cmr_msg_encode(type, &m.u, &buf, NULL, 0), CMR_WIRE_OK);
    cmr_msg_free(&m);
    return buf;
}

static cmr_wire_err_t decode(const void *data, size_t len, char *err, size_t errlen)
{
    cmr_msg_t m;
    cmr_wire_err_t rc = cmr_msg_decode(data, len, &m, err, errlen);
    if (rc == CMR_WIRE_OK)
        cmr_msg_free(&m);
    return rc;
}

static void test_truncated_at_every_length(void **state)
{
    (void)state;
    for (int t = 0; t < CMR_MSG__COUNT; t++) {
        cmr_buf_t buf = encode_sample(t, 11);
        for (size_t len = 0; len < buf.len; len++) {
            uint64_t before = cmr_wire_rejected_total();
            uint8_t *copy = malloc(len ? len : 1); /* exact size: ASan sees any over-read */
            memcpy(copy, buf.data, len);
            char err[256] = "";
            cmr_wire_err_t rc = decode(copy, len, err, sizeof err);
            assert_int_not_equal(rc, CMR_WIRE_OK);
            assert_true(err[0] != '\0');
            assert_true(cmr_wire_rejected_total() == before + 1);
            free(copy);
        }
        cmr_buf_free(&buf);
    }
    assert_true(cmr_wire_rejected(CMR_WIRE_ERR_TRUNCATED) > 0);
}

static void test_corrupted_bytes_never_crash(void **state)
{
    (void)state;
    uint64_t rng = 88172645463325252ULL;
    for (int t = 0; t < CMR_MSG__COUNT; t++) {
        cmr_buf_t buf = encode_sample(t, 5);
        for (int round = 0; round < 300; round++) {
            uint8_t *copy = malloc(buf.len);
            memcpy(copy, buf.data, buf.len);
            int flips = 1 + round % 4;
            for (int f = 0; f < flips; f++) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                size_t pos = CMR_WIRE_HEADER_SIZE + rng % (buf.len - CMR_WIRE_HEADER_SIZE);
                copy[pos] = (uint8_t)(rng >> 32);
            }
            (void)decode(copy, buf.len, NULL, 0); /* either outcome is fine; a crash is not */
            free(copy);
        }
        cmr_buf_free(&buf);
    }
}

static void test_foreign_and_bad_magic(void **state)
{
    (void)state;
    char err[256];
    cmr_buf_t buf = encode_sample(CMR_MSG_AGENT_STATUS, 2);
    buf.data[5] ^= 0x55; /* another schema's fingerprint */
    assert_int_equal(decode(buf.data, buf.len, err, sizeof err), CMR_WIRE_ERR_UNKNOWN_FINGERPRINT);
    assert_non_null(strstr(err, "fingerprint"));
    buf.data[5] ^= 0x55;
    buf.data[0] = '{'; /* JSON, not Avro */
    assert_int_equal(decode(buf.data, buf.len, err, sizeof err), CMR_WIRE_ERR_BAD_MAGIC);
    assert_int_equal(decode("", 0, err, sizeof err), CMR_WIRE_ERR_TRUNCATED);
    assert_int_equal(decode(NULL, 0, err, sizeof err), CMR_WIRE_ERR_TRUNCATED);
    cmr_buf_free(&buf);
}

static void test_oversized_and_trailing(void **state)
{
    (void)state;
    char err[256];
    cmr_msg_t m;
    msg_fill(CMR_MSG_CLASS_LOADED, MSG_FILL_MAXIMAL, 1, &m); /* 1 MiB of bytecode */
    cmr_buf_t buf = {0};
    assert_int_equal(cmr_msg_encode(CMR_MSG_CLASS_LOADED, &m.u, &buf, err, sizeof err), CMR_WIRE_OK);
    cmr_wire_set_max_message(64 * 1024);
    assert_int_equal(decode(buf.data, buf.len, err, sizeof err), CMR_WIRE_ERR_OVERSIZED);
    assert_non_null(strstr(err, "exceeds"));
    cmr_buf_t again = {0};
    assert_int_equal(cmr_msg_encode(CMR_MSG_CLASS_LOADED, &m.u, &again, err, sizeof err), CMR_WIRE_ERR_OVERSIZED);
    cmr_wire_set_max_message(0);
    assert_int_equal(cmr_wire_max_message(), CMR_WIRE_DEFAULT_MAX_MESSAGE);
    cmr_msg_free(&m);
    cmr_buf_free(&buf);
    cmr_buf_free(&again);

    buf = encode_sample(CMR_MSG_BYTECODE_RESEND, 3);
    uint8_t *longer = malloc(buf.len + 1);
    memcpy(longer, buf.data, buf.len);
    longer[buf.len] = 0;
    assert_int_equal(decode(longer, buf.len + 1, err, sizeof err), CMR_WIRE_ERR_TRAILING);
    assert_non_null(strstr(err, "trailing"));
    free(longer);
    cmr_buf_free(&buf);
}

/* --- hand-made bodies with hostile values ------------------------------------------ */

typedef struct msgbuf {
    uint8_t b[256];
    size_t n;
} msgbuf_t;

static void put_varint(msgbuf_t *m, int64_t v)
{
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    do {
        uint8_t byte = z & 0x7f;
        z >>= 7;
        m->b[m->n++] = byte | (z ? 0x80 : 0);
    } while (z);
}

static void put_string(msgbuf_t *m, const char *s)
{
    put_varint(m, (int64_t)strlen(s));
    memcpy(m->b + m->n, s, strlen(s));
    m->n += strlen(s);
}

static void start(msgbuf_t *m, cmr_msg_type_t type)
{
    uint64_t fp = cmr_msg_fingerprint(type);
    m->n = 0;
    m->b[m->n++] = 0xC3;
    m->b[m->n++] = 0x01;
    for (int i = 0; i < 8; i++)
        m->b[m->n++] = (uint8_t)(fp >> (8 * i));
}

static cmr_wire_err_t decode_exact(const msgbuf_t *m, char *err, size_t errlen)
{
    uint8_t *copy = malloc(m->n);
    memcpy(copy, m->b, m->n);
    cmr_wire_err_t rc = decode(copy, m->n, err, errlen);
    free(copy);
    return rc;
}

static void test_hostile_values(void **state)
{
    (void)state;
    char err[256];
    msgbuf_t m;
    /* BytecodeResend: request_id, agent_id, class_name, loader_id, class_hash */
    start(&m, CMR_MSG_BYTECODE_RESEND);
    put_varint(&m, 1);
    put_varint(&m, 2);
    put_varint(&m, INT64_C(1) << 40); /* a terabyte-long class name */
    assert_int_equal(decode_exact(&m, err, sizeof err), CMR_WIRE_ERR_TRUNCATED);
    assert_non_null(strstr(err, "class_name"));

    start(&m, CMR_MSG_BYTECODE_RESEND);
    put_varint(&m, 1);
    put_varint(&m, 2);
    put_varint(&m, -3); /* negative length */
    assert_int_equal(decode_exact(&m, err, sizeof err), CMR_WIRE_ERR_CORRUPT);

    start(&m, CMR_MSG_BYTECODE_RESEND);
    for (int i = 0; i < 11; i++) /* an 11-byte varint */
        m.b[m.n++] = 0xff;
    m.b[m.n++] = 0x01;
    assert_int_equal(decode_exact(&m, err, sizeof err), CMR_WIRE_ERR_CORRUPT);

    start(&m, CMR_MSG_BYTECODE_RESEND);
    put_varint(&m, 1);
    put_varint(&m, 2);
    put_varint(&m, 3);
    memcpy(m.b + m.n, "a\0b", 3); /* NUL inside a string */
    m.n += 3;
    put_varint(&m, 0);
    put_varint(&m, 0);
    assert_int_equal(decode_exact(&m, err, sizeof err), CMR_WIRE_ERR_CORRUPT);
    assert_non_null(strstr(err, "NUL"));

    /* NoEnvironment: instance_id, agent_name, hostname, ip_addresses[], reason, time_ms */
    start(&m, CMR_MSG_NO_ENVIRONMENT);
    put_string(&m, "i");
    put_string(&m, "n");
    put_string(&m, "h");
    put_varint(&m, INT64_C(1) << 50); /* 2^50 addresses announced */
    put_string(&m, "x");
    assert_int_equal(decode_exact(&m, err, sizeof err), CMR_WIRE_ERR_TRUNCATED);
    assert_non_null(strstr(err, "ip_addresses"));

    start(&m, CMR_MSG_NO_ENVIRONMENT);
    put_string(&m, "i");
    put_string(&m, "n");
    put_string(&m, "h");
    put_varint(&m, -1); /* block with byte size */
    put_varint(&m, 1000);
    assert_int_equal(decode_exact(&m, err, sizeof err), CMR_WIRE_ERR_TRUNCATED);

    /* RedefineResult with an enum symbol out of range */
    start(&m, CMR_MSG_REDEFINE_RESULT);
    put_varint(&m, 1);
    put_string(&m, "i");
    put_varint(&m, 1);
    put_string(&m, "c");
    put_varint(&m, 0);
    put_varint(&m, 0);
    put_varint(&m, 4); /* only 0..3 exist */
    put_varint(&m, 0);
    put_string(&m, "m");
    put_varint(&m, 0);
    assert_int_equal(decode_exact(&m, err, sizeof err), CMR_WIRE_ERR_CORRUPT);
    assert_non_null(strstr(err, "enum"));
    m.b[m.n - 5] = 2 << 1; /* the same message with a valid symbol decodes */
    assert_int_equal(decode_exact(&m, err, sizeof err), CMR_WIRE_OK);

    /* MethodEntry with a union branch that does not exist */
    start(&m, CMR_MSG_METHOD_ENTRY);
    put_varint(&m, 1);
    put_string(&m, "C");
    put_string(&m, "m");
    put_string(&m, "()V");
    put_varint(&m, 1);
    put_varint(&m, 2); /* branches are 0 and 1 */
    put_varint(&m, 0);
    assert_int_equal(decode_exact(&m, err, sizeof err), CMR_WIRE_ERR_CORRUPT);
    assert_non_null(strstr(err, "union"));

    /* AgentConfiguration sensor with a boolean that is 2 */
    start(&m, CMR_MSG_AGENT_CONFIGURATION);
    put_string(&m, "i");
    put_varint(&m, 1);
    put_string(&m, "e");
    put_string(&m, "n");
    put_varint(&m, 1);
    put_varint(&m, 1); /* one sensor */
    put_varint(&m, 0); /* TIMER */
    m.b[m.n++] = 2;    /* enabled = 2 */
    assert_int_equal(decode_exact(&m, err, sizeof err), CMR_WIRE_ERR_CORRUPT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_truncated_at_every_length),
        cmocka_unit_test(test_corrupted_bytes_never_crash),
        cmocka_unit_test(test_foreign_and_bad_magic),
        cmocka_unit_test(test_oversized_and_trailing),
        cmocka_unit_test(test_hostile_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
