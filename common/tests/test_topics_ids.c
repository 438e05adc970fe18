/*
 * test_topics_ids.c - topic names, message keys, identifiers, and the partitions of trace ids.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "cmr/bytes.h"
#include "cmr/ids.h"
#include "cmr/kafka.h"
#include "cmr/topics.h"

static void test_topic_names(void **state)
{
    (void)state;
    assert_string_equal(cmr_topic_name(CMR_TOPIC_EVENTS), "cmr.events");
    assert_string_equal(cmr_topic_name(CMR_TOPIC_AGENT_EVENTS), "cmr.agent-events");
    assert_null(cmr_topic_name(CMR_TOPIC_COMMANDS));
    char t[CMR_TOPIC_NAME_MAX];
    assert_int_equal(cmr_topic_command("0123abcd", t, sizeof t), 0);
    assert_string_equal(t, "cmr.cmd.0123abcd");
    assert_int_equal(cmr_topic_command("bad/id", t, sizeof t), -1);
    assert_int_equal(cmr_topic_command("", t, sizeof t), -1);
    assert_int_equal(cmr_topics_set_prefix("prod.eu"), 0);
    assert_string_equal(cmr_topic_name(CMR_TOPIC_CLASSES), "prod.eu.classes");
    assert_int_equal(cmr_topics_set_prefix("bad prefix"), -1);
    assert_int_equal(cmr_topics_set_prefix("cmr"), 0);
    assert_true(cmr_topic_layout(CMR_TOPIC_CONFIG)->compacted);
    for (int m = 0; m < CMR_MSG__COUNT; m++)
        assert_true(cmr_msg_topic(m) < CMR_TOPIC__COUNT);
}

static void test_keys(void **state)
{
    (void)state;
    char key[CMR_KEY_MAX];
    cmr_event_msg_t b = {0}; /* keyed by its first segment's trace id */
    for (int i = 0; i < 16; i++)
        b.key_trace_id[i] = (uint8_t)i;
    assert_int_equal(cmr_msg_key(CMR_MSG_EVENT_BATCH, &b, key, sizeof key), 32);
    assert_string_equal(key, "000102030405060708090a0b0c0d0e0f");
    cmr_class_loaded_t c = {.agent_id = -1};
    cmr_msg_key(CMR_MSG_CLASS_LOADED, &c, key, sizeof key);
    assert_string_equal(key, "ffffffffffffffff");
    cmr_environment_t env = {.id = "prod"};
    cmr_config_change_t cc = {.kind = CMR_CONFIG_ENVIRONMENT, .environment = &env};
    cmr_msg_key(CMR_MSG_CONFIG_CHANGE, &cc, key, sizeof key);
    assert_string_equal(key, "prod");
    cc.kind = CMR_CONFIG_MAPPINGS;
    cmr_msg_key(CMR_MSG_CONFIG_CHANGE, &cc, key, sizeof key);
    assert_string_equal(key, "mappings");
    cmr_redefine_t r = {0};
    assert_int_equal(cmr_msg_key(CMR_MSG_REDEFINE, &r, key, sizeof key), 3);
    assert_string_equal(key, "cmd");
}

/* Trace ids' partitions picked with the CRC of their first half kept (a thread's ids share
 * it) are the ones the producers' partitioner gives their keys: with every partitioner
 * librdkafka has, one it does not, ids that share their first 8 bytes and ids that do not
 * (in between), and partition counts from 1 to 300. */
static void test_trace_partitions(void **state)
{
    (void)state;
    static const char *const names[] = {NULL,    "consistent_random", "consistent", "murmur2_random",   "murmur2",
                                        "fnv1a", "fnv1a_random",      "random",     "not-a-partitioner"};
    uint64_t x = 0x243F6A8885A308D3u, prefix = 0, counter = 0;
    for (size_t n = 0; n < sizeof names / sizeof *names; n++) {
        cmr_trace_partitioner_t tp;
        cmr_trace_partitioner_init(&tp, names[n]);
        uint8_t id[16];
        for (int i = 0; i < 20000; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            if (i % 100 == 0)
                prefix = x, counter = x >> 3;                /* another thread */
            cmr_put_be64(id, i % 13 == 0 ? x * 31 : prefix); /* an id from elsewhere now and then */
            cmr_put_be64(id + 8, i % 7 == 0 ? x : ++counter);
            int32_t count = 1 + (int32_t)(x % 300);
            char key[33];
            cmr_hex(id, 16, key);
            int32_t want = cmr_key_partition(names[n], key, 32, count);
            assert_int_equal(cmr_trace_partitioner_pick(&tp, id, count), want);
            assert_true(n >= 7 ? want == -1 : want >= 0 && want < count);
        }
        assert_int_equal(cmr_trace_partitioner_pick(&tp, id, 0), -1);
    }
}

static void test_ids(void **state)
{
    (void)state;
    /* method id = XXH3-64 of the full signature, computed without building it */
    const char *sig = "java/lang/String.length()I";
    assert_true(cmr_method_id("java/lang/String", "length", "()I") == cmr_class_hash(sig, strlen(sig)));
    const char *i1 = "0123456789abcdef0123456789abcdef", *i2 = "fedcba9876543210fedcba9876543210";
    assert_true(cmr_agent_id("shop", "host1", i1) == cmr_agent_id("shop", "host1", i1));
    assert_true(cmr_agent_id("shop", "host1", i1) != cmr_agent_id("shop", "host2", i1));
    /* one per JVM run: the same name on the same host, another instance, another agent */
    assert_true(cmr_agent_id("shop", "host1", i1) != cmr_agent_id("shop", "host1", i2));
    const char *whole = "shop@host1/0123456789abcdef0123456789abcdef";
    assert_true(cmr_agent_id("shop", "host1", i1) == cmr_class_hash(whole, strlen(whole)));
    char a[33], b[33];
    assert_int_equal(cmr_instance_id_new(a, sizeof a), 0);
    assert_int_equal(cmr_instance_id_new(b, sizeof b), 0);
    assert_int_equal(strlen(a), 32);
    assert_string_not_equal(a, b);
    uint8_t raw[16], back[16];
    assert_int_equal(cmr_random_bytes(raw, sizeof raw), 0);
    char hex[33];
    cmr_hex(raw, 16, hex);
    assert_int_equal(cmr_unhex(hex, back, 16), 0);
    assert_memory_equal(raw, back, 16);
    assert_int_equal(cmr_unhex("zz", back, 1), -1);
    assert_int_equal(cmr_unhex("abc", back, 1), -1);
}

/* cmr_id64_parse: exactly 16 hex digits of the n given, either case, in place in a list */
static void test_id64_parse(void **state)
{
    (void)state;
    uint64_t id = 7;
    assert_int_equal(cmr_id64_parse("00000000000000ff", 16, &id), 0);
    assert_true(id == 0xff);
    assert_int_equal(cmr_id64_parse("FEDCBA9876543210", 16, &id), 0);
    assert_true(id == UINT64_C(0xfedcba9876543210));
    const char *list = "0123456789abcdef,ffffffffffffffff";
    assert_int_equal(cmr_id64_parse(list, 16, &id), 0);
    assert_true(id == UINT64_C(0x0123456789abcdef));
    assert_int_equal(cmr_id64_parse(list + 17, strlen(list + 17), &id), 0);
    assert_true(id == UINT64_MAX);
    id = 7;
    assert_int_equal(cmr_id64_parse(list, strlen(list), &id), -1);      /* 33 chars */
    assert_int_equal(cmr_id64_parse("0123456789abcde", 15, &id), -1);   /* 15 */
    assert_int_equal(cmr_id64_parse("0123456789abcdeg", 16, &id), -1);  /* not hex */
    assert_int_equal(cmr_id64_parse("0123456789abcd\0f", 16, &id), -1); /* NUL inside */
    assert_int_equal(cmr_id64_parse("", 0, &id), -1);
    assert_true(id == 7);
    /* the same id cmr_unhex + cmr_be64 gives */
    uint8_t raw[8];
    char hex[17];
    assert_int_equal(cmr_random_bytes(raw, sizeof raw), 0);
    cmr_hex(raw, 8, hex);
    assert_int_equal(cmr_id64_parse(hex, 16, &id), 0);
    assert_true(id == cmr_be64(raw));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topic_names),      cmocka_unit_test(test_keys),
        cmocka_unit_test(test_id64_parse),       cmocka_unit_test(test_ids),
        cmocka_unit_test(test_trace_partitions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
