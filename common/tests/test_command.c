/*
 * test_command.c - signed commands on the wire (cmr/command.h): a command wrapped and
 * signed by a CMR worker, encoded, decoded as the agent's consumer decodes it, and
 * opened by the agent's verifier; and the forgeries an attacker who can write to the
 * command topic would try: a bare command, a replayed envelope, a swapped payload, an
 * envelope for another JVM, a non-command inside a valid envelope.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cmr/clock.h"
#include "cmr/command.h"
#include "cmr/wire.h"

#define INSTANCE "00112233445566778899aabbccddeeff"

static char dir[64];
static cmr_signer_t *signer;

static int setup(void **state)
{
    (void)state;
    char err[256], path[128];
    strcpy(dir, "/tmp/cmr-cmd-XXXXXX");
    if (!mkdtemp(dir) || cmr_trust_keygen(dir, "cmr", err, sizeof err) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/cmr.key", dir);
    signer = cmr_signer_load(path, err, sizeof err);
    return signer ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    cmr_signer_free(signer);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static cmr_verifier_t *agent_verifier(const char *instance)
{
    char err[256], path[128];
    snprintf(path, sizeof path, "%s/cmr.pub", dir);
    cmr_verifier_t *v = cmr_verifier_new(instance, NULL);
    assert_int_equal(cmr_verifier_add_key_file(v, path, err, sizeof err), 0);
    return v;
}

static cmr_redefine_t sample_redefine(uint8_t *bytes, size_t n)
{
    cmr_redefine_t r = {0};
    r.request_id = 7;
    r.agent_id = 42;
    r.class_name = "com/acme/Victim";
    r.loader_id = 3;
    r.class_hash = 0x1234;
    r.revision = 2;
    r.bytecode = (cmr_bytes_t){bytes, n};
    r.original_digest = (cmr_bytes_t){bytes, 32 < n ? 32 : n};
    return r;
}

/* Signs msg for `instance` and returns the envelope's wire bytes. */
static void wire_envelope(const char *instance, cmr_msg_type_t type, const void *msg, cmr_buf_t *out)
{
    cmr_buf_t payload = {0};
    cmr_signed_command_t sc;
    char key_id[CMR_TRUST_KEY_ID_CHARS + 1], err[256];
    uint8_t sig[CMR_TRUST_SIGNATURE_BYTES];
    assert_int_equal(cmr_command_wrap(signer, instance, 60000, type, msg, &payload, &sc, key_id, sig, err, sizeof err),
                     0);
    assert_int_equal(cmr_msg_encode(CMR_MSG_SIGNED_COMMAND, &sc, out, err, sizeof err), CMR_WIRE_OK);
    cmr_buf_free(&payload);
}

static cmr_trust_verdict_t receive(cmr_verifier_t *v, const cmr_buf_t *wire, cmr_msg_t *msg)
{
    char err[256];
    assert_int_equal(cmr_msg_decode(wire->data, wire->len, msg, err, sizeof err), CMR_WIRE_OK);
    return cmr_command_open(v, msg, cmr_wall_ms());
}

static void test_signed_round_trip_and_replay(void **state)
{
    (void)state;
    uint8_t bytes[64];
    memset(bytes, 0xca, sizeof bytes);
    cmr_redefine_t r = sample_redefine(bytes, sizeof bytes);
    cmr_buf_t wire = {0};
    wire_envelope(INSTANCE, CMR_MSG_REDEFINE, &r, &wire);
    cmr_verifier_t *v = agent_verifier(INSTANCE);
    cmr_msg_t m;
    assert_int_equal(receive(v, &wire, &m), CMR_TRUST_OK);
    assert_int_equal(m.type, CMR_MSG_REDEFINE);
    assert_string_equal(m.u.redefine.class_name, "com/acme/Victim");
    assert_int_equal(m.u.redefine.bytecode.len, sizeof bytes);
    assert_memory_equal(m.u.redefine.original_digest.data, bytes, 32);
    cmr_msg_free(&m);
    /* The same envelope written to the topic again: refused. */
    assert_int_equal(receive(v, &wire, &m), CMR_TRUST_REPLAYED);
    assert_int_equal(m.type, CMR_MSG_SIGNED_COMMAND); /* left as it was */
    cmr_msg_free(&m);
    cmr_buf_free(&wire);
    cmr_verifier_free(v);
}

static void test_forgeries(void **state)
{
    (void)state;
    uint8_t bytes[64];
    memset(bytes, 0x11, sizeof bytes);
    cmr_redefine_t r = sample_redefine(bytes, sizeof bytes);
    cmr_verifier_t *v = agent_verifier(INSTANCE);
    cmr_buf_t wire = {0};
    char err[256];
    cmr_msg_t m;

    /* A bare Redefine, as the CMR used to send them: unsigned. */
    assert_int_equal(cmr_msg_encode(CMR_MSG_REDEFINE, &r, &wire, err, sizeof err), CMR_WIRE_OK);
    assert_int_equal(receive(v, &wire, &m), CMR_TRUST_UNSIGNED);
    cmr_msg_free(&m);

    /* A genuine envelope whose payload is swapped for the attacker's class. */
    wire_envelope(INSTANCE, CMR_MSG_REDEFINE, &r, &wire);
    assert_int_equal(cmr_msg_decode(wire.data, wire.len, &m, err, sizeof err), CMR_WIRE_OK);
    uint8_t evil[64];
    memset(evil, 0x66, sizeof evil);
    cmr_redefine_t forged = sample_redefine(evil, sizeof evil);
    cmr_buf_t evil_payload = {0};
    assert_int_equal(cmr_msg_encode(CMR_MSG_REDEFINE, &forged, &evil_payload, err, sizeof err), CMR_WIRE_OK);
    free(m.u.signed_command.payload.data);
    m.u.signed_command.payload.data = evil_payload.data; /* taken over by m */
    m.u.signed_command.payload.len = evil_payload.len;
    assert_int_equal(cmr_command_open(v, &m, cmr_wall_ms()), CMR_TRUST_BAD_SIGNATURE);
    cmr_msg_free(&m);

    /* A signature of the wrong size, or none: unsigned. */
    assert_int_equal(cmr_msg_decode(wire.data, wire.len, &m, err, sizeof err), CMR_WIRE_OK);
    m.u.signed_command.signature.len = 10;
    assert_int_equal(cmr_command_open(v, &m, cmr_wall_ms()), CMR_TRUST_UNSIGNED);
    cmr_msg_free(&m);

    /* An envelope for another JVM is refused by this one. */
    wire_envelope("ffeeddccbbaa99887766554433221100", CMR_MSG_REDEFINE, &r, &wire);
    assert_int_equal(receive(v, &wire, &m), CMR_TRUST_WRONG_TARGET);
    cmr_msg_free(&m);

    /* A valid envelope around something that is not a command. */
    cmr_class_loaded_t cl = {
        .instance_id = INSTANCE, .environment_id = "e", .class_name = "X", .bytecode = {bytes, sizeof bytes}};
    wire_envelope(INSTANCE, CMR_MSG_CLASS_LOADED, &cl, &wire);
    assert_int_equal(receive(v, &wire, &m), CMR_TRUST_MALFORMED);
    cmr_msg_free(&m);

    uint64_t counts[CMR_TRUST_VERDICT__COUNT];
    cmr_verifier_counts(v, counts);
    assert_int_equal(counts[CMR_TRUST_OK], 0);
    assert_int_equal(counts[CMR_TRUST_UNSIGNED], 2);
    assert_int_equal(counts[CMR_TRUST_BAD_SIGNATURE], 1);
    assert_int_equal(counts[CMR_TRUST_WRONG_TARGET], 1);
    assert_int_equal(counts[CMR_TRUST_MALFORMED], 1);
    cmr_buf_free(&wire);
    cmr_verifier_free(v);
}

static void test_send_refuses_non_commands(void **state)
{
    (void)state;
    char err[256];
    cmr_class_loaded_t cl = {0};
    assert_int_equal(cmr_command_send(NULL, signer, INSTANCE, "t", 0, CMR_MSG_CLASS_LOADED, &cl, NULL, err, sizeof err),
                     CMR_SEND_ERROR);
    assert_non_null(strstr(err, "not a command"));
    assert_true(cmr_command_type(CMR_MSG_REDEFINE));
    assert_false(cmr_command_type(CMR_MSG_SIGNED_COMMAND));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_signed_round_trip_and_replay),
        cmocka_unit_test(test_forgeries),
        cmocka_unit_test(test_send_refuses_non_commands),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
