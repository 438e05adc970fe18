/*
 * test_wire_codec.c - every message type encodes and decodes back to the same value,
 * for empty, maximal and random contents; the header is Avro single-object encoding;
 * the canonical form follows the specification; invalid structs are refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/event.h"
#include "cmr/wire.h"
#include "msg_fill.h"

static void roundtrip(cmr_msg_type_t type, msg_fill_variant_t variant, uint64_t seed)
{
    cmr_msg_t in, out;
    char err[256] = "";
    msg_fill(type, variant, seed, &in);
    cmr_buf_t a = {0}, b = {0};
    cmr_wire_err_t rc = cmr_msg_encode(type, &in.u, &a, err, sizeof err);
    if (rc != CMR_WIRE_OK)
        fail_msg("encode %s: %s", cmr_msg_type_name(type), err);
    rc = cmr_msg_decode(a.data, a.len, &out, err, sizeof err);
    if (rc != CMR_WIRE_OK)
        fail_msg("decode %s: %s", cmr_msg_type_name(type), err);
    assert_int_equal(out.type, type);
    /* Same value: the re-encoding is byte-identical and so is the JSON rendering. */
    assert_int_equal(cmr_msg_encode(type, &out.u, &b, err, sizeof err), CMR_WIRE_OK);
    assert_int_equal(a.len, b.len);
    assert_memory_equal(a.data, b.data, a.len);
    char *ja = cmr_msg_to_json(&in), *jb = cmr_msg_to_json(&out);
    assert_non_null(ja);
    assert_string_equal(ja, jb);
    free(ja);
    free(jb);
    cmr_buf_free(&a);
    cmr_buf_free(&b);
    cmr_msg_free(&in);
    cmr_msg_free(&out);
}

static void test_init_and_fingerprints(void **state)
{
    (void)state;
    assert_int_equal(cmr_wire_init(), 0);
    for (int t = 0; t < CMR_MSG__COUNT; t++) {
        assert_true(cmr_msg_fingerprint(t) != 0);
        assert_int_equal(cmr_msg_type_by_name(cmr_msg_type_name(t)), t);
        for (int u = 0; u < t; u++)
            assert_true(cmr_msg_fingerprint(t) != cmr_msg_fingerprint(u));
    }
    assert_int_equal(cmr_msg_type_by_name("NoSuchMessage"), -1);
}

static void test_roundtrip_empty(void **state)
{
    (void)state;
    for (int t = 0; t < CMR_MSG__COUNT; t++)
        roundtrip(t, MSG_FILL_EMPTY, 0);
}

static void test_roundtrip_maximal(void **state)
{
    (void)state;
    for (int t = 0; t < CMR_MSG__COUNT; t++)
        roundtrip(t, MSG_FILL_MAXIMAL, 7);
}

static void test_roundtrip_random(void **state)
{
    (void)state;
    for (int t = 0; t < CMR_MSG__COUNT; t++)
        for (uint64_t seed = 1; seed <= 40; seed++)
            roundtrip(t, MSG_FILL_RANDOM, seed);
}

static void test_header_is_single_object(void **state)
{
    (void)state;
    cmr_msg_t in;
    msg_fill(CMR_MSG_METHOD_ENTRY, MSG_FILL_RANDOM, 3, &in);
    cmr_buf_t buf = {0};
    assert_int_equal(cmr_msg_encode(CMR_MSG_METHOD_ENTRY, &in.u, &buf, NULL, 0), CMR_WIRE_OK);
    assert_int_equal(buf.data[0], 0xC3);
    assert_int_equal(buf.data[1], 0x01);
    uint64_t fp = 0;
    for (int i = 0; i < 8; i++)
        fp |= (uint64_t)buf.data[2 + i] << (8 * i);
    assert_true(fp == cmr_msg_fingerprint(CMR_MSG_METHOD_ENTRY));
    cmr_msg_type_t type;
    assert_int_equal(cmr_wire_peek_type(buf.data, buf.len, &type), CMR_WIRE_OK);
    assert_int_equal(type, CMR_MSG_METHOD_ENTRY);
    cmr_buf_free(&buf);
    cmr_msg_free(&in);
}

static void test_typed_fields_survive(void **state)
{
    (void)state;
    uint8_t code[] = {0xCA, 0xFE, 0xBA, 0xBE, 0x00, 0x00, 0x00, 0x3D};
    cmr_instrumented_method_t methods[] = {
        {(int64_t)0x8000000000000001ULL, "run", "()V", CMR_SENSOR_INVOCATION_SEQUENCE},
        {42, "<init>", "(Ljava/lang/String;)V", CMR_SENSOR_TIMER},
    };
    cmr_redefine_t r = {
        .request_id = 77,
        .agent_id = -5,
        .class_name = "com/acme/Shop",
        .loader_id = 3,
        .class_hash = (int64_t)0xFEDCBA9876543210ULL,
        .original = true,
        .revision = 12,
        .bytecode = {code, sizeof code},
        .methods = {methods, 2},
    };
    cmr_buf_t buf = {0};
    cmr_msg_t out;
    assert_int_equal(cmr_msg_encode(CMR_MSG_REDEFINE, &r, &buf, NULL, 0), CMR_WIRE_OK);
    assert_int_equal(cmr_msg_decode(buf.data, buf.len, &out, NULL, 0), CMR_WIRE_OK);
    const cmr_redefine_t *d = &out.u.redefine;
    assert_int_equal(d->request_id, 77);
    assert_int_equal(d->agent_id, -5);
    assert_string_equal(d->class_name, "com/acme/Shop");
    assert_true((uint64_t)d->class_hash == 0xFEDCBA9876543210ULL);
    assert_true(d->original);
    assert_int_equal(d->bytecode.len, sizeof code);
    assert_memory_equal(d->bytecode.data, code, sizeof code);
    assert_int_equal(d->methods.count, 2);
    assert_true((uint64_t)d->methods.items[0].method_id == 0x8000000000000001ULL);
    assert_string_equal(d->methods.items[1].name, "<init>");
    assert_int_equal(d->methods.items[0].sensor, CMR_SENSOR_INVOCATION_SEQUENCE);
    char *json = cmr_msg_to_json(&out);
    assert_non_null(strstr(json, "\"sensor\":\"INVOCATION_SEQUENCE\""));
    assert_non_null(strstr(json, "\"type\":\"Redefine\""));
    free(json);
    cmr_msg_free(&out);
    cmr_buf_free(&buf);
}

static void test_optional_record_and_fixed(void **state)
{
    (void)state;
    uint8_t block[2 * CMR_EVENT_RECORD_SIZE];
    cmr_event_t e1 = {0x1122334455667788ULL, 1700000000123456789ULL, CMR_EVENT_ENTER, 0};
    cmr_event_t e2 = {0x1122334455667788ULL, 1700000000123459999ULL, CMR_EVENT_EXIT, 0};
    cmr_event_write(block, 0, &e1);
    cmr_event_write(block, 1, &e2);
    static cmr_events_encoder_t enc;
    uint8_t packed[2 * CMR_EVENTS_MAX_ENCODED];
    size_t packed_len;
    assert_int_equal(cmr_events_pack(&enc, block, 2, packed, &packed_len), 0);
    cmr_parent_link_t parent = {9, 10, 11};
    cmr_event_batch_t batch = {.agent_id = 1,
                               .thread_id = 2,
                               .thread_name = "main",
                               .segment_id = 3,
                               .parent = &parent,
                               .batch_seq = 0,
                               .first_event_seq = 0,
                               .last = true,
                               .event_count = 2,
                               .packed_events = {packed, packed_len}};
    memset(batch.trace_id, 0xAB, 16);
    /* an EventBatch message of that one segment batch, through Avro and the segment reader */
    static cmr_segs_writer_t w;
    cmr_event_msg_t m;
    assert_int_equal(cmr_segs_join(&w, batch.agent_id, &batch, 1, &m), 0);
    cmr_buf_t buf = {0};
    cmr_msg_t out;
    assert_int_equal(cmr_msg_encode(CMR_MSG_EVENT_BATCH, &m, &buf, NULL, 0), CMR_WIRE_OK);
    assert_int_equal(cmr_msg_decode(buf.data, buf.len, &out, NULL, 0), CMR_WIRE_OK);
    cmr_event_batch_t *v;
    char err[128];
    assert_int_equal(cmr_segs_split(&out.u.event_batch, &v, err, sizeof err), 1);
    assert_non_null(v[0].parent);
    assert_int_equal(v[0].parent->event_seq, 11);
    assert_memory_equal(v[0].trace_id, batch.trace_id, 16);
    uint8_t back[sizeof block];
    assert_int_equal(cmr_events_unpack(v[0].packed_events.data, v[0].packed_events.len, 2, back, NULL, 0), 0);
    cmr_event_t r;
    cmr_event_read(back, 1, &r);
    assert_true(r.timestamp_ns == e2.timestamp_ns && r.kind == CMR_EVENT_EXIT && r.method_id == e2.method_id);
    cmr_segs_batches_free(v, 1);
    cmr_msg_free(&out);
    batch.parent = NULL;
    assert_int_equal(cmr_segs_join(&w, batch.agent_id, &batch, 1, &m), 0);
    assert_int_equal(cmr_msg_encode(CMR_MSG_EVENT_BATCH, &m, &buf, NULL, 0), CMR_WIRE_OK);
    assert_int_equal(cmr_msg_decode(buf.data, buf.len, &out, NULL, 0), CMR_WIRE_OK);
    assert_int_equal(cmr_segs_split(&out.u.event_batch, &v, err, sizeof err), 1);
    assert_null(v[0].parent);
    cmr_segs_batches_free(v, 1);
    cmr_msg_free(&out);
    cmr_buf_free(&buf);
    cmr_segs_writer_free(&w);
}

static void test_encode_refuses_invalid_structs(void **state)
{
    (void)state;
    char err[256];
    cmr_buf_t buf = {0};
    cmr_bytecode_resend_t r = {.class_name = NULL};
    assert_int_equal(cmr_msg_encode(CMR_MSG_BYTECODE_RESEND, &r, &buf, err, sizeof err), CMR_WIRE_ERR_INVALID);
    assert_non_null(strstr(err, "class_name"));

    cmr_redefine_result_t res = {.instance_id = "i", .class_name = "c", .message = "m", .status = 7};
    assert_int_equal(cmr_msg_encode(CMR_MSG_REDEFINE_RESULT, &res, &buf, err, sizeof err), CMR_WIRE_ERR_INVALID);
    assert_non_null(strstr(err, "status"));

    cmr_class_loaded_t cl = {.instance_id = "i", .environment_id = "e", .class_name = "A", .bytecode = {NULL, 10}};
    assert_int_equal(cmr_msg_encode(CMR_MSG_CLASS_LOADED, &cl, &buf, err, sizeof err), CMR_WIRE_ERR_INVALID);
    assert_non_null(strstr(err, "bytecode"));

    assert_int_equal(cmr_msg_encode(CMR_MSG__COUNT, &cl, &buf, err, sizeof err), CMR_WIRE_ERR_INVALID);
    cmr_buf_free(&buf);
}

static void test_canonical_form(void **state)
{
    (void)state;
    char *pcf = cmr_wire_canonical_form("{\"type\": \"int\", \"doc\": \"x\"}", NULL, 0);
    assert_string_equal(pcf, "\"int\"");
    free(pcf);
    pcf = cmr_wire_canonical_form(
        "{\"type\":\"record\",\"namespace\":\"a.b\",\"name\":\"R\",\"doc\":\"d\",\"aliases\":[\"Q\"],"
        "\"fields\":[{\"name\":\"e\",\"type\":{\"type\":\"enum\",\"name\":\"E\",\"symbols\":[\"X\",\"Y\"]},\"default\":"
        "\"X\"},"
        "{\"name\":\"f\",\"doc\":\"z\",\"type\":[\"null\",\"E\"]},"
        "{\"name\":\"g\",\"type\":{\"type\":\"map\",\"values\":{\"type\":\"fixed\",\"name\":\"c.F\",\"size\":4}}},"
        "{\"name\":\"h\",\"type\":{\"type\":\"array\",\"items\":\"string\"}}]}",
        NULL, 0);
    assert_string_equal(
        pcf, "{\"name\":\"a.b.R\",\"type\":\"record\",\"fields\":["
             "{\"name\":\"e\",\"type\":{\"name\":\"a.b.E\",\"type\":\"enum\",\"symbols\":[\"X\",\"Y\"]}},"
             "{\"name\":\"f\",\"type\":[\"null\",\"a.b.E\"]},"
             "{\"name\":\"g\",\"type\":{\"type\":\"map\",\"values\":{\"name\":\"c.F\",\"type\":\"fixed\",\"size\":4}}},"
             "{\"name\":\"h\",\"type\":{\"type\":\"array\",\"items\":\"string\"}}]}");
    free(pcf);
    char err[128];
    assert_null(cmr_wire_canonical_form("{not json", err, sizeof err));
    assert_non_null(strstr(err, "line 1"));
    /* CRC-64-AVRO of the empty input is the algorithm's EMPTY constant. */
    assert_true(cmr_wire_crc64_avro("", 0) == 0xc15d213aa4d7a795ULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_and_fingerprints),
        cmocka_unit_test(test_roundtrip_empty),
        cmocka_unit_test(test_roundtrip_maximal),
        cmocka_unit_test(test_roundtrip_random),
        cmocka_unit_test(test_header_is_single_object),
        cmocka_unit_test(test_typed_fields_survive),
        cmocka_unit_test(test_optional_record_and_fixed),
        cmocka_unit_test(test_encode_refuses_invalid_structs),
        cmocka_unit_test(test_canonical_form),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
