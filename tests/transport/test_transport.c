/*
 * test_transport.c - the transport against the embedded broker, run as its own process:
 *
 *  - every message type, produced through the transport, is consumed intact by a
 *    consumer group, on its topic, with its key;
 *  - two consumers of one group share the partitions of a topic;
 *  - a consumer that restarts resumes after the last record it marked done: nothing
 *    lost, nothing processed twice;
 *  - foreign and corrupt messages on a topic are skipped and counted, the valid ones
 *    around them still arrive;
 *  - partitions paused from the rebalance callback hand out nothing until resumed, even
 *    where librdkafka lost the pause (then every record still once, in order); the
 *    group's committed offsets are read back;
 *  - a range reader reads exactly its offset ranges, stops at the end of the log, and
 *    drops a range on request;
 *  - an unreachable broker: sends do not block, the failures are reported and counted;
 *  - librdkafka handles are destroyed within a bound, a process ends with one abandoned
 *    without running exit()'s handlers, and a group consumer closes within its bounds
 *    once the cluster is gone.
 *
 * Usage: test_transport PATH-TO-cmr-broker
 * CMR_TEST_FILTER (a cmocka glob on the test names) runs some tests only;
 * CMR_TEST_KAFKA_DEBUG (librdkafka's debug contexts, e.g. "cgrp,topic,fetch") logs them.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker_proc.h"
#include "kafka_internal.h"
#include "cmr/clock.h"
#include "cmr/ids.h"
#include "cmr/kafka.h"
#include "cmr/log.h"
#include "cmr/reader.h"
#include "cmr/wire.h"
#include "msg_sample.h"

static const char *broker_bin;
static broker_proc_t broker;
static cmr_conf_t *conf;

static void unique(const char *prefix, char *buf, size_t len)
{
    uint8_t raw[6];
    char hex[13];
    cmr_random_bytes(raw, sizeof raw);
    cmr_hex(raw, sizeof raw, hex);
    snprintf(buf, len, "%s-%s", prefix, hex);
}

/* The partition of the last message delivered by a fresh_topic() producer. */
static int32_t last_partition = -1;

static void note_partition(const cmr_delivery_t *d, void *opaque)
{
    (void)opaque;
    last_partition = d->partition;
}

/* A new topic named after prefix (of `partitions` partitions, or the broker's default
 * when it creates topics on first use), a new group name, and a producer (the caller
 * destroys it) that notes the partition of each delivery in last_partition. */
static cmr_producer_t *fresh_topic(const char *prefix, int partitions, char topic[96], char group[64])
{
    char err[512], name[64];
    snprintf(name, sizeof name, "cmr.test-%s", prefix);
    unique(name, topic, 96);
    unique(prefix, group, 64);
    assert_int_equal(cmr_admin_ensure_topic(conf, topic, partitions, -1, 0, 10000, err, sizeof err), 0);
    cmr_producer_t *p = cmr_producer_new(conf, prefix, note_partition, NULL, err, sizeof err);
    assert_non_null(p);
    return p;
}

/* Method entries with ids 0..count-1 on topic; with a key of its own each (spread over
 * the partitions) or, one_key, all with key "k" (one partition, in this order). */
static void send_entries(cmr_producer_t *p, const char *topic, int count, bool one_key)
{
    char err[512];
    for (int i = 0; i < count; i++) {
        cmr_method_entry_t m = {.method_id = i, .class_name = "C", .method_name = "m", .descriptor = "()V"};
        if (!one_key) {
            assert_int_equal(cmr_producer_send(p, CMR_MSG_METHOD_ENTRY, &m, topic, NULL, err, sizeof err), CMR_SEND_OK);
            continue;
        }
        cmr_buf_t bytes = {0};
        assert_int_equal(cmr_msg_encode(CMR_MSG_METHOD_ENTRY, &m, &bytes, err, sizeof err), CMR_WIRE_OK);
        assert_int_equal(cmr_producer_send_raw(p, topic, "k", 1, bytes.data, bytes.len, NULL), CMR_SEND_OK);
        cmr_buf_free(&bytes);
    }
    assert_int_equal(cmr_producer_flush(p, 20000), 0);
}

static int setup(void **state)
{
    (void)state;
    conf = broker_proc_start_conf(&broker, broker_bin);
    if (!conf)
        return -1;
    /* react to group changes quickly */
    cmr_conf_set(conf, "kafka.session.timeout.ms", "6000", "test");
    cmr_conf_set(conf, "kafka.heartbeat.interval.ms", "500", "test");
    cmr_conf_set(conf, "kafka.topic.metadata.refresh.interval.ms", "1000", "test");
    if (getenv("CMR_TEST_KAFKA_DEBUG")) {
        cmr_conf_set(conf, "kafka.debug", getenv("CMR_TEST_KAFKA_DEBUG"), "test");
        cmr_log_set_level(CMR_LOG_DEBUG);
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    cmr_conf_destroy(conf);
    broker_proc_stop(&broker);
    return 0;
}

/* --- every message type ------------------------------------------------------------ */

static void test_every_type_on_its_topic_with_its_key(void **state)
{
    (void)state;
    char err[512], cmd_topic[CMR_TOPIC_NAME_MAX], group[64];
    cmr_msg_t samples[CMR_MSG__COUNT];
    cmr_buf_t bytes[CMR_MSG__COUNT];
    int seen[CMR_MSG__COUNT] = {0};

    cmr_msg_sample(CMR_MSG_AGENT_REGISTRATION, &samples[0]);
    assert_int_equal(cmr_topic_command(samples[0].u.registration.instance_id, cmd_topic, sizeof cmd_topic), 0);
    cmr_msg_free(&samples[0]);
    assert_int_equal(cmr_admin_ensure_topic(conf, cmd_topic, 1, -1, 0, 10000, err, sizeof err), 0);

    cmr_producer_t *p = cmr_producer_new(conf, "test", NULL, NULL, err, sizeof err);
    assert_non_null(p);
    for (int t = 0; t < CMR_MSG__COUNT; t++) {
        cmr_msg_sample(t, &samples[t]);
        memset(&bytes[t], 0, sizeof bytes[t]);
        assert_int_equal(cmr_msg_encode(t, &samples[t].u, &bytes[t], err, sizeof err), CMR_WIRE_OK);
        const char *topic = cmr_msg_topic(t) == CMR_TOPIC_COMMANDS ? cmd_topic : NULL;
        assert_int_equal(cmr_producer_send(p, t, &samples[t].u, topic, NULL, err, sizeof err), CMR_SEND_OK);
    }
    /* a command without its topic is refused, not sent somewhere */
    assert_int_equal(cmr_producer_send(p, CMR_MSG_REDEFINE, &samples[CMR_MSG_REDEFINE].u, NULL, NULL, err, sizeof err),
                     CMR_SEND_ERROR);
    assert_int_equal(cmr_producer_flush(p, 20000), 0);
    cmr_producer_stats_t ps;
    cmr_producer_stats(p, &ps);
    assert_int_equal(ps.delivered, CMR_MSG__COUNT);
    assert_true(cmr_producer_fetch_metadata(p, cmd_topic, 5000) > 0); /* brokers answered */
    cmr_producer_destroy(p, 1000);

    const char *topics[CMR_TOPIC__COUNT];
    size_t n = 0;
    for (int t = 0; t < CMR_TOPIC__COUNT; t++)
        topics[n++] = t == CMR_TOPIC_COMMANDS ? cmd_topic : cmr_topic_name(t);
    unique("every-type", group, sizeof group);
    cmr_consumer_t *c = cmr_consumer_new(conf, group, topics, n, NULL, NULL, err, sizeof err);
    assert_non_null(c);
    int got = 0;
    int64_t deadline = cmr_mono_ms() + 60000;
    while (got < CMR_MSG__COUNT && cmr_mono_ms() < deadline) {
        cmr_record_t *rec;
        if (cmr_consumer_poll(c, 200, &rec) != 1)
            continue;
        int t = rec->msg.type;
        if (rec->len == bytes[t].len && memcmp(rec->payload, bytes[t].data, bytes[t].len) == 0) {
            char key[CMR_KEY_MAX];
            cmr_msg_key(t, &samples[t].u, key, sizeof key);
            assert_string_equal(rec->key, key);
            const char *want = cmr_msg_topic(t) == CMR_TOPIC_COMMANDS ? cmd_topic : cmr_topic_name(cmr_msg_topic(t));
            assert_string_equal(rec->topic, want);
            /* the decoded struct is the value that was sent */
            cmr_buf_t again = {0};
            assert_int_equal(cmr_msg_encode(t, &rec->msg.u, &again, err, sizeof err), CMR_WIRE_OK);
            assert_memory_equal(again.data, bytes[t].data, bytes[t].len);
            cmr_buf_free(&again);
            assert_int_equal(seen[t], 0);
            seen[t] = 1;
            got++;
        }
        cmr_consumer_done(c, rec);
        cmr_record_free(rec);
    }
    cmr_consumer_close(c);
    assert_int_equal(got, CMR_MSG__COUNT);
    for (int t = 0; t < CMR_MSG__COUNT; t++) {
        cmr_msg_free(&samples[t]);
        cmr_buf_free(&bytes[t]);
    }
}

/* --- two consumers in one group ---------------------------------------------------- */

#define SHARE_MESSAGES 400

static void send_batches(int count, const char *topic_unused)
{
    (void)topic_unused;
    char err[256];
    cmr_producer_t *p = cmr_producer_new(conf, "test-share", NULL, NULL, err, sizeof err);
    assert_non_null(p);
    for (int i = 0; i < count; i++) {
        cmr_msg_t m;
        cmr_msg_sample(CMR_MSG_EVENT_BATCH, &m); /* random trace id: spreads over partitions */
        m.u.event_batch.agent_id = 1000000 + i;  /* the message's number */
        assert_int_equal(cmr_producer_send(p, CMR_MSG_EVENT_BATCH, &m.u, NULL, NULL, err, sizeof err), CMR_SEND_OK);
        cmr_msg_free(&m);
    }
    assert_int_equal(cmr_producer_flush(p, 20000), 0);
    cmr_producer_destroy(p, 1000);
}

static void test_two_consumers_share_partitions(void **state)
{
    (void)state;
    char err[512], group[64];
    unique("share", group, sizeof group);
    const char *topics[] = {cmr_topic_name(CMR_TOPIC_EVENTS)};
    cmr_consumer_t *c[2];
    for (int i = 0; i < 2; i++) {
        c[i] = cmr_consumer_new(conf, group, topics, 1, NULL, NULL, err, sizeof err);
        assert_non_null(c[i]);
    }
    /* wait until both are members: each holds some partitions and none is shared */
    int64_t deadline = cmr_mono_ms() + 60000;
    int owners_ok = 0;
    while (!owners_ok && cmr_mono_ms() < deadline) {
        cmr_record_t *rec;
        for (int i = 0; i < 2; i++)
            if (cmr_consumer_poll(c[i], 100, &rec) == 1)
                cmr_record_free(rec); /* leftovers of other tests: not done, not counted */
        cmr_partition_t *a[2];
        size_t n[2];
        assert_int_equal(cmr_consumer_assignment(c[0], &a[0], &n[0]), 0);
        assert_int_equal(cmr_consumer_assignment(c[1], &a[1], &n[1]), 0);
        owners_ok = n[0] > 0 && n[1] > 0 && n[0] + n[1] == (size_t)cmr_topic_layout(CMR_TOPIC_EVENTS)->partitions;
        free(a[0]);
        free(a[1]);
    }
    assert_true(owners_ok);

    send_batches(SHARE_MESSAGES, NULL);
    int per_consumer[2] = {0, 0}, owner_of[64];
    char *got = calloc(SHARE_MESSAGES, 1);
    for (int i = 0; i < 64; i++)
        owner_of[i] = -1;
    int total = 0;
    deadline = cmr_mono_ms() + 60000;
    while (total < SHARE_MESSAGES && cmr_mono_ms() < deadline) {
        for (int i = 0; i < 2; i++) {
            cmr_record_t *rec;
            if (cmr_consumer_poll(c[i], 50, &rec) != 1)
                continue;
            int64_t seg = rec->msg.u.event_batch.agent_id - 1000000;
            if (rec->msg.u.event_batch.segment_count == 2 && seg >= 0 && seg < SHARE_MESSAGES && !got[seg]) {
                got[seg] = 1;
                total++;
                per_consumer[i]++;
                /* a partition belongs to one consumer */
                assert_true(owner_of[rec->partition] == -1 || owner_of[rec->partition] == i);
                owner_of[rec->partition] = i;
            }
            cmr_consumer_done(c[i], rec);
            cmr_record_free(rec);
        }
    }
    free(got);
    cmr_consumer_close(c[0]);
    cmr_consumer_close(c[1]);
    print_message("shared: consumer A %d, consumer B %d of %d\n", per_consumer[0], per_consumer[1], SHARE_MESSAGES);
    assert_int_equal(total, SHARE_MESSAGES);
    assert_true(per_consumer[0] > 0 && per_consumer[1] > 0);
}

/* --- restart resumes from the committed offset ------------------------------------- */

#define RESUME_MESSAGES 120
#define RESUME_FIRST 45

/* Processes method entries (counted in processed[id], marked done) until `upto` were
 * processed in all, starting from n. The new count. */
static int process_entries(cmr_consumer_t *c, int *processed, int n, int upto)
{
    int64_t deadline = cmr_mono_ms() + 60000;
    while (n < upto && cmr_mono_ms() < deadline) {
        cmr_record_t *rec;
        if (cmr_consumer_poll(c, 200, &rec) != 1)
            continue;
        processed[rec->msg.u.method_entry.method_id]++;
        n++;
        cmr_consumer_done(c, rec);
        cmr_record_free(rec);
    }
    return n;
}

static void test_restart_resumes_without_loss_or_duplicates(void **state)
{
    (void)state;
    char err[512], topic[96], group[64];
    cmr_producer_t *p = fresh_topic("resume", 3, topic, group);
    send_entries(p, topic, RESUME_MESSAGES, false);
    cmr_producer_destroy(p, 1000);

    int processed[RESUME_MESSAGES] = {0};
    const char *topics[] = {topic};
    /* first life: process RESUME_FIRST records, then stop; what was fetched but not
     * processed must come again */
    cmr_consumer_t *c = cmr_consumer_new(conf, group, topics, 1, NULL, NULL, err, sizeof err);
    int n = process_entries(c, processed, 0, RESUME_FIRST);
    assert_int_equal(n, RESUME_FIRST);
    cmr_consumer_close(c);

    /* second life */
    c = cmr_consumer_new(conf, group, topics, 1, NULL, NULL, err, sizeof err);
    n = process_entries(c, processed, n, RESUME_MESSAGES);
    /* nothing more arrives */
    cmr_record_t *extra = NULL;
    for (int i = 0; i < 10 && !extra; i++)
        if (cmr_consumer_poll(c, 200, &extra) != 1)
            extra = NULL;
    assert_null(extra);
    cmr_consumer_close(c);
    assert_int_equal(n, RESUME_MESSAGES);
    for (int i = 0; i < RESUME_MESSAGES; i++)
        assert_int_equal(processed[i], 1);
}

/* --- topics made sure of once ------------------------------------------------------- */

static void test_ensure_topic_once_asks_once(void **state)
{
    (void)state;
    char err[256], topic[96];
    unique("cmr.cmd.once", topic, sizeof topic);
    cmr_topic_set_t set = {0};
    assert_int_equal(cmr_admin_ensure_topic_once(&set, conf, topic, 10000, err, sizeof err), 1);
    assert_int_equal(cmr_admin_ensure_topic_once(&set, conf, topic, 10000, err, sizeof err), 0);
    assert_int_equal(cmr_topic_set_count(&set), 1);
    /* a cluster that does not answer: an error, and the topic is not remembered */
    cmr_conf_t *bad = cmr_conf_new();
    cmr_conf_set(bad, "kafka.bootstrap.servers", "127.0.0.1:1", "test");
    cmr_conf_set(bad, "log.level", "off", "test");
    assert_int_equal(cmr_admin_ensure_topic_once(&set, bad, "cmr.cmd.unreachable", 500, err, sizeof err), -1);
    assert_int_equal(cmr_topic_set_count(&set), 1);
    cmr_conf_destroy(bad);
    cmr_topic_set_free(&set);
    assert_int_equal(cmr_topic_set_count(&set), 0);
}

/* --- an agent's command topic read by assign() --------------------------------------- */

/* Commands written before the reader exists and after it are all handed out once, in
 * order, without a group join; cmr_producer_ensure_topic_once finds the topic on the
 * producer's connection. */
static void test_assigned_consumer_reads_commands_from_the_beginning(void **state)
{
    (void)state;
    char err[512], topic[96];
    unique("cmr.cmd.assigned", topic, sizeof topic);
    cmr_producer_t *p = cmr_producer_new(conf, "test-assigned", NULL, NULL, err, sizeof err);
    assert_non_null(p);
    cmr_topic_set_t set = {0};
    assert_int_equal(cmr_producer_ensure_topic_once(p, &set, conf, topic, 10000, err, sizeof err), 1);
    assert_int_equal(cmr_producer_ensure_topic_once(p, &set, conf, topic, 10000, err, sizeof err), 0);
    cmr_msg_t sample;
    cmr_msg_sample(CMR_MSG_NO_ENVIRONMENT, &sample);
    enum { BEFORE = 5, AFTER = 5 };
    char reasons[BEFORE + AFTER][16];
    char *orig = sample.u.no_environment.reason;
    for (int i = 0; i < BEFORE; i++) { /* before the reader exists */
        snprintf(reasons[i], sizeof reasons[i], "cmd-%d", i);
        sample.u.no_environment.reason = reasons[i];
        assert_int_equal(cmr_producer_send(p, CMR_MSG_NO_ENVIRONMENT, &sample.u, topic, NULL, err, sizeof err),
                         CMR_SEND_OK);
    }
    assert_int_equal(cmr_producer_flush(p, 20000), 0);
    int64_t t0 = cmr_mono_ms();
    cmr_consumer_t *c = cmr_consumer_new_assigned(conf, "test-assigned-reader", topic, 5000, err, sizeof err);
    assert_non_null(c);
    for (int i = BEFORE; i < BEFORE + AFTER; i++) { /* after */
        snprintf(reasons[i], sizeof reasons[i], "cmd-%d", i);
        sample.u.no_environment.reason = reasons[i];
        assert_int_equal(cmr_producer_send(p, CMR_MSG_NO_ENVIRONMENT, &sample.u, topic, NULL, err, sizeof err),
                         CMR_SEND_OK);
    }
    sample.u.no_environment.reason = orig;
    cmr_msg_free(&sample);
    int got = 0;
    int64_t deadline = cmr_mono_ms() + 30000;
    while (got < BEFORE + AFTER && cmr_mono_ms() < deadline) {
        cmr_record_t *rec;
        if (cmr_consumer_poll(c, 100, &rec) != 1)
            continue;
        assert_int_equal(rec->msg.type, CMR_MSG_NO_ENVIRONMENT);
        assert_string_equal(rec->msg.u.no_environment.reason, reasons[got]); /* in order, once */
        got++;
        cmr_consumer_done(c, rec);
        cmr_record_free(rec);
    }
    assert_int_equal(got, BEFORE + AFTER);
    /* no group join: far below the seconds a join takes on the embedded broker */
    int64_t took = cmr_mono_ms() - t0;
    fprintf(stderr, "# assigned consumer: %d commands in %lld ms\n", got, (long long)took);
    assert_true(took < 2500);
    cmr_record_t *extra;
    assert_int_equal(cmr_consumer_poll(c, 300, &extra), 0); /* nothing twice */
    assert_int_equal(cmr_consumer_commit(c), 0);            /* nothing to commit */
    cmr_consumer_close(c);
    cmr_producer_destroy(p, 1000);
    cmr_topic_set_free(&set);
}

/* --- foreign messages -------------------------------------------------------------- */

static void test_foreign_messages_are_skipped_and_counted(void **state)
{
    (void)state;
    char err[512], topic[96], group[64];
    cmr_producer_t *p = fresh_topic("foreign", 1, topic, group);
    /* one key for all: one partition, so the order below is the order consumed */
    cmr_method_entry_t m = {.method_id = 1, .class_name = "C", .method_name = "m", .descriptor = "()V"};
    cmr_buf_t valid = {0};
    assert_int_equal(cmr_msg_encode(CMR_MSG_METHOD_ENTRY, &m, &valid, err, sizeof err), CMR_WIRE_OK);
    assert_int_equal(cmr_producer_send_raw(p, topic, "k", 1, valid.data, valid.len, NULL), CMR_SEND_OK);
    const char *json = "{\"not\":\"avro\"}";
    assert_int_equal(cmr_producer_send_raw(p, topic, "k", 1, json, strlen(json), NULL), CMR_SEND_OK);
    uint8_t foreign[20] = {0xC3, 0x01, 1, 2, 3, 4, 5, 6, 7, 8, 0};
    assert_int_equal(cmr_producer_send_raw(p, topic, "k", 1, foreign, sizeof foreign, NULL), CMR_SEND_OK);
    assert_int_equal(cmr_producer_send_raw(p, topic, "k", 1, "", 0, NULL), CMR_SEND_OK);
    m.method_id = 2;
    assert_int_equal(cmr_msg_encode(CMR_MSG_METHOD_ENTRY, &m, &valid, err, sizeof err), CMR_WIRE_OK);
    assert_int_equal(cmr_producer_send_raw(p, topic, "k", 1, valid.data, valid.len, NULL), CMR_SEND_OK);
    cmr_buf_free(&valid);
    assert_int_equal(cmr_producer_flush(p, 20000), 0);
    cmr_producer_destroy(p, 1000);

    const char *topics[] = {topic};
    cmr_consumer_t *c = cmr_consumer_new(conf, group, topics, 1, NULL, NULL, err, sizeof err);
    int64_t ids[2], n = 0, deadline = cmr_mono_ms() + 30000;
    cmr_consumer_stats_t st = {0};
    while ((n < 2 || st.rejected < 3) && cmr_mono_ms() < deadline) {
        cmr_record_t *rec;
        if (cmr_consumer_poll(c, 200, &rec) == 1) {
            assert_true(n < 2);
            ids[n++] = rec->msg.u.method_entry.method_id;
            cmr_consumer_done(c, rec);
            cmr_record_free(rec);
        }
        cmr_consumer_stats(c, &st);
    }
    cmr_consumer_close(c);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 2);
    assert_int_equal(st.rejected, 3);
}

/* --- pause from the rebalance callback, committed offsets, resume --------------------- */

#define PAUSE_MESSAGES 40

typedef struct paused {
    char topic[96];
    size_t n; /* partitions assigned (and paused) */
} paused_t;

/* Pauses every partition as it is assigned, as the instrumenter does for its catch-up. */
static void pause_on_assign(cmr_consumer_t *c, int revoked, const cmr_partition_t *parts, size_t n, void *opaque)
{
    paused_t *x = opaque;
    if (revoked) {
        x->n = 0;
        return;
    }
    assert_int_equal(cmr_consumer_pause(c, parts, n), 0);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(parts[i].topic, x->topic);
    x->n += n;
}

/* Polls until the partitions are assigned (and paused) and quiet_ms have passed since,
 * asserting that no record is handed out meanwhile; then checks the assignment (every
 * partition, none committed). Returns it (the caller frees it). */
static cmr_partition_t *expect_nothing_while_paused(cmr_consumer_t *c, const paused_t *x, size_t *n)
{
    int64_t deadline = cmr_mono_ms() + 30000, quiet_until = 0;
    while (cmr_mono_ms() < deadline && (!x->n || cmr_mono_ms() < quiet_until)) {
        cmr_record_t *rec = NULL;
        assert_int_not_equal(cmr_consumer_poll(c, 100, &rec), 1);
        if (x->n && !quiet_until)
            quiet_until = cmr_mono_ms() + 2000;
    }
    cmr_partition_t *assigned;
    assert_int_equal(cmr_consumer_assignment(c, &assigned, n), 0);
    assert_true(*n >= 2); /* the one consumer of its group holds every partition */
    assert_int_equal(x->n, *n);
    assert_string_equal(assigned[0].topic, x->topic);
    /* a new group has committed nothing */
    assert_int_equal(cmr_consumer_committed(c, assigned, *n, 10000), 0);
    for (size_t i = 0; i < *n; i++)
        assert_int_equal(assigned[i].offset, CMR_OFFSET_INVALID);
    return assigned;
}

/* Resumes the partitions: every record is handed out once, and what was marked done is
 * committed (the offsets add up to every record). */
static void expect_every_record_once_after_resume(cmr_consumer_t *c, cmr_partition_t *assigned, size_t n)
{
    assert_int_equal(cmr_consumer_resume(c, assigned, n), 0);
    int got[PAUSE_MESSAGES] = {0}, total = 0;
    int64_t deadline = cmr_mono_ms() + 30000;
    while (total < PAUSE_MESSAGES && cmr_mono_ms() < deadline) {
        cmr_record_t *rec;
        if (cmr_consumer_poll(c, 100, &rec) != 1)
            continue;
        int64_t id = rec->msg.u.method_entry.method_id;
        assert_true(id >= 0 && id < PAUSE_MESSAGES && !got[id]);
        got[id] = 1;
        total++;
        cmr_consumer_done(c, rec);
        cmr_record_free(rec);
    }
    assert_int_equal(total, PAUSE_MESSAGES);
    assert_int_equal(cmr_consumer_commit(c), 0);
    assert_int_equal(cmr_consumer_committed(c, assigned, n, 10000), 0);
    int64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += assigned[i].offset > 0 ? assigned[i].offset : 0;
    assert_int_equal(sum, PAUSE_MESSAGES);
}

/* A fresh topic with PAUSE_MESSAGES records, and the one consumer of a new group that
 * pauses its partitions as they are assigned: returned once they are and nothing was
 * handed out (*assigned: the assignment, which the caller frees). */
static cmr_consumer_t *paused_consumer(const char *prefix, paused_t *x, cmr_partition_t **assigned, size_t *n)
{
    char err[512], group[64];
    cmr_producer_t *p = fresh_topic(prefix, 2, x->topic, group);
    send_entries(p, x->topic, PAUSE_MESSAGES, false);
    cmr_producer_destroy(p, 1000);
    const char *topics[] = {x->topic};
    cmr_consumer_t *c = cmr_consumer_new(conf, group, topics, 1, pause_on_assign, x, err, sizeof err);
    assert_non_null(c);
    *assigned = expect_nothing_while_paused(c, x, n);
    return c;
}

static void test_pause_on_assign_holds_records_until_resumed(void **state)
{
    (void)state;
    paused_t x = {0};
    size_t n;
    cmr_partition_t *assigned;
    cmr_consumer_t *c = paused_consumer("pause", &x, &assigned, &n);
    expect_every_record_once_after_resume(c, assigned, n);
    free(assigned);
    cmr_consumer_close(c);
}

/* librdkafka can lose a pause: its pause is an op of the partition that a newer op makes
 * outdated before it is served (the fetch start that follows the assignment). Resumed in
 * librdkafka behind the consumer's back, the paused partitions are fetched, and still no
 * record of them is handed out before the consumer's own resume; then every record once. */
static void test_pause_holds_where_librdkafka_lost_it(void **state)
{
    (void)state;
    paused_t x = {0};
    size_t n;
    cmr_partition_t *assigned;
    cmr_consumer_t *c = paused_consumer("lostpause", &x, &assigned, &n);

    rd_kafka_topic_partition_list_t *list = cmr_kafka_list_of(assigned, n);
    assert_non_null(list);
    assert_int_equal(rd_kafka_resume_partitions(cmr_consumer_handle(c), list), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(list);
    /* fetched and held back (the consumer pauses them again at the first one): until one
     * arrived, and a second more */
    cmr_consumer_stats_t st = {0};
    int64_t deadline = cmr_mono_ms() + 30000, quiet_until = 0;
    while (cmr_mono_ms() < deadline && (!quiet_until || cmr_mono_ms() < quiet_until)) {
        cmr_record_t *rec = NULL;
        assert_int_not_equal(cmr_consumer_poll(c, 100, &rec), 1);
        cmr_consumer_stats(c, &st);
        if (st.held_back && !quiet_until)
            quiet_until = cmr_mono_ms() + 1000;
    }
    assert_true(st.held_back > 0);
    assert_int_equal(st.received, 0);

    expect_every_record_once_after_resume(c, assigned, n);
    free(assigned);
    cmr_consumer_close(c);
}

/* --- reading offset ranges ------------------------------------------------------------ */

/* Reads r until it has caught up and has been quiet for a second; the method ids of the
 * method entries it handed out, in order (one_key: all of one partition, where each
 * entry's offset is its id). */
static size_t read_ids(cmr_reader_t *r, int64_t *ids, size_t max, bool one_key)
{
    size_t n = 0;
    int64_t deadline = cmr_mono_ms() + 30000, quiet_until = 0;
    while (cmr_mono_ms() < deadline && (!quiet_until || cmr_mono_ms() < quiet_until)) {
        cmr_reader_rec_t rec;
        int rc = cmr_reader_poll(r, 50, &rec);
        assert_true(rc >= 0);
        if (rc == 1) {
            cmr_msg_t m;
            char err[256];
            assert_int_equal(cmr_msg_decode(rec.payload, rec.len, &m, err, sizeof err), CMR_WIRE_OK);
            assert_int_equal(m.type, CMR_MSG_METHOD_ENTRY);
            if (one_key)
                assert_int_equal(rec.offset, m.u.method_entry.method_id);
            assert_true(n < max);
            ids[n++] = m.u.method_entry.method_id;
            cmr_msg_free(&m);
            quiet_until = 0;
        }
        if (cmr_reader_caught_up(r) && !quiet_until)
            quiet_until = cmr_mono_ms() + 1000;
    }
    assert_true(cmr_reader_caught_up(r));
    return n;
}

static size_t read_range(cmr_reader_t *r, int64_t *ids, size_t max)
{
    return read_ids(r, ids, max, true);
}

static void test_range_reader_reads_exactly_its_ranges(void **state)
{
    (void)state;
    char err[512], topic[96], group[64];
    int64_t ids[16];
    cmr_producer_t *p = fresh_topic("range", 1, topic, group);
    send_entries(p, topic, 10, true);
    cmr_producer_destroy(p, 1000);
    int32_t part = last_partition; /* where the one key went */
    assert_true(part >= 0);

    /* a range inside the log: exactly its records, in order */
    cmr_reader_range_t inside = {part, 3, 7};
    cmr_reader_t *r = cmr_reader_new_ranges(conf, topic, &inside, 1, err, sizeof err);
    assert_non_null(r);
    assert_int_equal(cmr_reader_total(r), 4);
    assert_int_equal(read_range(r, ids, 16), 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(ids[i], 3 + i);
    assert_true(cmr_reader_partition_done(r, part));
    cmr_reader_free(r);

    /* a range past the end of the log: done at the end; an empty range: done at once */
    cmr_reader_range_t past[] = {{part, 8, 100}, {part + 1, 5, 5}};
    r = cmr_reader_new_ranges(conf, topic, past, 2, err, sizeof err);
    assert_non_null(r);
    assert_true(cmr_reader_partition_done(r, part + 1));
    assert_false(cmr_reader_partition_done(r, part));
    assert_int_equal(read_range(r, ids, 16), 2);
    assert_int_equal(ids[0], 8);
    assert_int_equal(ids[1], 9);
    cmr_reader_free(r);

    /* a dropped range: done, nothing more handed out */
    cmr_reader_range_t all = {part, 0, 10};
    r = cmr_reader_new_ranges(conf, topic, &all, 1, err, sizeof err);
    assert_non_null(r);
    assert_false(cmr_reader_caught_up(r));
    cmr_reader_drop(r, part);
    assert_true(cmr_reader_caught_up(r));
    assert_int_equal(read_range(r, ids, 16), 0);
    cmr_reader_free(r);

    /* two ranges of one partition are refused */
    cmr_reader_range_t twice[] = {{part, 0, 2}, {part, 4, 6}};
    assert_null(cmr_reader_new_ranges(conf, topic, twice, 2, err, sizeof err));
    assert_non_null(strstr(err, "two ranges"));
}

/* --- readers sharing a client ----------------------------------------------------- */

/* Reads r until caught up and quiet; counts the entries, each with an id below limit
 * (its own topic's: the other has more). */
static int read_whole(cmr_reader_t *r, int limit)
{
    int64_t ids[128];
    size_t n = read_ids(r, ids, 128, false);
    for (size_t i = 0; i < n; i++)
        assert_true(ids[i] < limit);
    return (int)n;
}

static void test_readers_share_a_client(void **state)
{
    (void)state;
    char err[512], a[96], b[96], group[64];
    /* two topics of several partitions (the embedded broker may give more), 30 records on
     * one, 50 on the other */
    cmr_producer_t *p = fresh_topic("share-a", 3, a, group);
    send_entries(p, a, 30, false);
    cmr_producer_destroy(p, 1000);
    p = fresh_topic("share-b", 4, b, group);
    send_entries(p, b, 50, false);

    cmr_reader_client_t *c = cmr_reader_client_new(conf, err, sizeof err);
    assert_non_null(c);
    cmr_reader_t *ra = cmr_reader_open(c, a, 0, err, sizeof err);
    assert_non_null(ra);
    cmr_reader_t *rb = cmr_reader_open(c, b, 0, err, sizeof err);
    assert_non_null(rb);
    assert_true(cmr_reader_partitions(ra) > 1);
    assert_true(cmr_reader_partitions(rb) > 1);
    /* each reader has exactly its own topic's records */
    assert_int_equal(read_whole(ra, 30), 30);
    assert_int_equal(read_whole(rb, 50), 50);

    /* a reader freed: the other goes on following its topic on the same client */
    cmr_reader_free(ra);
    send_entries(p, b, 20, false);
    assert_int_equal(read_whole(rb, 20), 20);
    /* and a reader opened afterwards on the client reads its topic from the beginning */
    ra = cmr_reader_open(c, a, 0, err, sizeof err);
    assert_non_null(ra);
    assert_int_equal(read_whole(ra, 30), 30);
    assert_int_equal(read_whole(rb, 1), 0);
    cmr_reader_free(ra);
    cmr_reader_free(rb);
    cmr_reader_client_free(c);
    cmr_producer_destroy(p, 1000);
}

/* --- unreachable broker ------------------------------------------------------------ */

typedef struct dr_count {
    int ok, failed;
} dr_count_t;

static void count_dr(const cmr_delivery_t *d, void *opaque)
{
    dr_count_t *c = opaque;
    assert_true((d->err != 0) == (d->error != NULL));
    if (d->err)
        c->failed++;
    else
        c->ok++;
}

static void test_unreachable_broker_never_blocks(void **state)
{
    (void)state;
    char err[512];
    cmr_conf_t *bad = cmr_conf_new();
    cmr_conf_set(bad, "kafka.bootstrap.servers", "127.0.0.1:1", "test");
    cmr_conf_set(bad, "kafka.message.timeout.ms", "1500", "test");
    cmr_conf_set(bad, "kafka.queue.buffering.max.messages", "50", "test");
    cmr_conf_set(bad, "log.level", "off", "test");
    dr_count_t dr = {0};
    cmr_producer_t *p = cmr_producer_new(bad, "test-unreachable", count_dr, &dr, err, sizeof err);
    assert_non_null(p);
    int64_t t0 = cmr_mono_ms();
    int queued = 0, full = 0;
    for (int i = 0; i < 80; i++) {
        cmr_method_entry_t m = {.method_id = i, .class_name = "C", .method_name = "m", .descriptor = "()V"};
        int rc = cmr_producer_send(p, CMR_MSG_METHOD_ENTRY, &m, NULL, NULL, err, sizeof err);
        queued += rc == CMR_SEND_OK;
        full += rc == CMR_SEND_QUEUE_FULL;
    }
    assert_true(cmr_mono_ms() - t0 < 1000);                          /* sending never waited for the network */
    assert_int_equal(cmr_producer_fetch_metadata(p, NULL, 300), -1); /* nobody answers */
    assert_int_equal(queued, 50);
    assert_int_equal(full, 30);
    assert_int_equal(cmr_producer_flush(p, 10000), 0); /* all reported, as failures */
    cmr_producer_stats_t st;
    cmr_producer_stats(p, &st);
    assert_int_equal(st.queue_full, 30);
    assert_int_equal(st.failed, 50);
    assert_int_equal(dr.failed, 50);
    assert_int_equal(dr.ok, 0);
    cmr_producer_destroy(p, 100);
    /* the admin client says clearly that nobody answered */
    assert_int_equal(cmr_admin_ensure_topic(bad, "cmr.cmd.x", 1, -1, 0, 1000, err, sizeof err), -1);
    assert_non_null(strstr(err, "did not answer"));
    cmr_conf_destroy(bad);
}

/* --- destroys within a bound -------------------------------------------------------- */

/* A destroy that waits until released, as librdkafka's does for a group whose
 * coordinator is gone. */
static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t held_cond = PTHREAD_COND_INITIALIZER;
static bool held_released;

static void held_destroy(rd_kafka_t *rk, int flags)
{
    pthread_mutex_lock(&held_lock);
    while (!held_released)
        pthread_cond_wait(&held_cond, &held_lock);
    pthread_mutex_unlock(&held_lock);
    rd_kafka_destroy_flags(rk, flags);
}

static rd_kafka_t *unreachable_handle(void)
{
    char err[256];
    cmr_conf_t *bad = cmr_conf_new();
    cmr_conf_set(bad, "kafka.bootstrap.servers", "127.0.0.1:1", "test");
    cmr_conf_set(bad, "log.level", "off", "test");
    rd_kafka_t *rk = cmr_kafka_client(RD_KAFKA_PRODUCER, bad, NULL, NULL, NULL, NULL, "test", err, sizeof err);
    assert_non_null(rk);
    cmr_conf_destroy(bad);
    return rk;
}

static void test_destroy_within_its_bound(void **state)
{
    (void)state;
    /* a destroy that returns in time: done, nothing abandoned */
    int before = cmr_kafka_abandoned_handles();
    assert_true(cmr_kafka_destroy_within(unreachable_handle(), 0, 5000, NULL));
    assert_int_equal(cmr_kafka_abandoned_handles(), before);
    /* one that does not: given up at the bound, counted until it returns */
    held_released = false;
    int64_t t0 = cmr_mono_ms();
    assert_false(cmr_kafka_destroy_within(unreachable_handle(), 0, 300, held_destroy));
    int64_t took = cmr_mono_ms() - t0;
    assert_true(took >= 290 && took < 3000);
    assert_int_equal(cmr_kafka_abandoned_handles(), before + 1);
    pthread_mutex_lock(&held_lock);
    held_released = true;
    pthread_cond_broadcast(&held_cond);
    pthread_mutex_unlock(&held_lock);
    for (int64_t until = cmr_mono_ms() + 10000; cmr_kafka_abandoned_handles() != before && cmr_mono_ms() < until;)
        cmr_sleep_ms(10);
    assert_int_equal(cmr_kafka_abandoned_handles(), before);
}

/* The end of a process with a handle still being destroyed: the exit code it was given,
 * and none of exit()'s handlers (which would run under librdkafka's thread). In a child. */
static int atexit_fd = -1;

static void atexit_mark(void)
{
    if (write(atexit_fd, "x", 1) != 1)
        abort();
}

static void test_process_end_with_an_abandoned_handle(void **state)
{
    (void)state;
    assert_int_equal(cmr_kafka_abandoned_handles(), 0); /* the child starts with none */
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        atexit_fd = fds[1];
        atexit(atexit_mark);
        held_released = false;             /* never released in the child */
        if (cmr_kafka_process_end(3) != 3) /* nothing abandoned yet: returns */
            _exit(10);
        if (cmr_kafka_destroy_within(unreachable_handle(), 0, 100, held_destroy))
            _exit(11);
        cmr_kafka_process_end(7);
        _exit(12); /* not reached */
    }
    close(fds[1]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 7);
    char b;
    assert_int_equal(read(fds[0], &b, 1), 0); /* the atexit handler never ran */
    close(fds[0]);
}

/* A worker stopping while the cluster is gone: closing its group consumer (commit, leave
 * the group, destroy) gives up within its bounds (10 s for the close, 5 s for the
 * destroy). With the default session timeout (45 s), librdkafka 2.0's destroy alone took
 * about 35 s, spinning a CPU, and the close 47 s. Stops the broker: runs last. */
static void test_close_without_broker_is_bounded(void **state)
{
    (void)state;
    char err[512], topic[96], group[64];
    cmr_producer_t *p = fresh_topic("close", 2, topic, group);
    send_entries(p, topic, 20, false);
    cmr_producer_destroy(p, 1000);
    const char *topics[] = {topic};
    cmr_conf_set(conf, "kafka.session.timeout.ms", "45000", "test"); /* librdkafka's default */
    cmr_consumer_t *c = cmr_consumer_new(conf, group, topics, 1, NULL, NULL, err, sizeof err);
    assert_non_null(c);
    int processed[20] = {0};
    assert_int_equal(process_entries(c, processed, 0, 10), 10); /* offsets stored, not committed */
    broker_proc_stop(&broker);
    /* the worker polls on for a second while the cluster is gone, then is stopped */
    for (int64_t until = cmr_mono_ms() + 1000; cmr_mono_ms() < until;) {
        cmr_record_t *rec;
        if (cmr_consumer_poll(c, 200, &rec) == 1)
            cmr_record_free(rec);
    }
    int before = cmr_kafka_abandoned_handles();
    int64_t t0 = cmr_mono_ms();
    cmr_consumer_close(c);
    int64_t took = cmr_mono_ms() - t0;
    print_message("close without a broker: %lld ms, %d handle(s) abandoned\n", (long long)took,
                  cmr_kafka_abandoned_handles() - before);
    assert_true(took < 10000 + CMR_KAFKA_DESTROY_WAIT_MS + 2000);
}

int main(int argc, char **argv)
{
    broker_bin = argc > 1 ? argv[1] : getenv("CMR_BROKER_BIN");
    if (!broker_bin) {
        fprintf(stderr, "usage: %s PATH-TO-cmr-broker\n", argv[0]);
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_type_on_its_topic_with_its_key),
        cmocka_unit_test(test_two_consumers_share_partitions),
        cmocka_unit_test(test_restart_resumes_without_loss_or_duplicates),
        cmocka_unit_test(test_ensure_topic_once_asks_once),
        cmocka_unit_test(test_assigned_consumer_reads_commands_from_the_beginning),
        cmocka_unit_test(test_foreign_messages_are_skipped_and_counted),
        cmocka_unit_test(test_pause_on_assign_holds_records_until_resumed),
        cmocka_unit_test(test_pause_holds_where_librdkafka_lost_it),
        cmocka_unit_test(test_range_reader_reads_exactly_its_ranges),
        cmocka_unit_test(test_readers_share_a_client),
        cmocka_unit_test(test_unreachable_broker_never_blocks),
        cmocka_unit_test(test_destroy_within_its_bound),
        cmocka_unit_test(test_process_end_with_an_abandoned_handle),
        cmocka_unit_test(test_close_without_broker_is_bounded),
    };
    if (getenv("CMR_TEST_FILTER"))
        cmocka_set_test_filter(getenv("CMR_TEST_FILTER"));
    /* the last test leaves a consumer's destroy running: no exit() handlers under it */
    return cmr_kafka_process_end(cmocka_run_group_tests(tests, setup, teardown));
}
